//! Resume: either side killed with SIGKILL at random points, again and again; then the same
//! command finishes the job, sending only what is missing, and leaves nothing behind.

use std::process::Stdio;
use std::time::Duration;

use crate::util::*;

/// A small deterministic generator for the kill delays (no dependency, reproducible).
struct Delays(u64);

impl Delays {
    fn next_ms(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        lo + self.0 % (hi - lo)
    }
}

fn spawn_send(port: u16, env: &Env, src: &std::path::Path) -> std::process::Child {
    let mut args = vec!["-i", "0"];
    args.extend_from_slice(&SLOW);
    send_cmd(port, &env.key, src, "big.bin", &args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn finish_and_check(
    port: u16,
    env: &Env,
    src: &std::path::Path,
    root: &std::path::Path,
    size: u64,
) -> serde_json::Value {
    let mut args = vec![];
    args.extend_from_slice(&SLOW[4..]);
    let (o, v) = send_json(port, &env.key, src, "big.bin", &args, 300);
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        same_file(src, &root.join("big.bin")),
        "bytes differ after resume"
    );
    assert!(no_partials(root, 10), "stray files: {:?}", tree(root));
    let sent = v["end"]["sum_sent"]["bytes"].as_u64().unwrap();
    let skipped = v["end"]["resume"]["bytes_skipped"].as_u64().unwrap();
    assert_eq!(sent + skipped, size, "{}", v["end"]);
    v
}

#[test]
#[ignore = "heavy: real processes killed at random points, its own CI step; the roles' resume is the pair harness's (zcp-session) in the suite"]
fn the_sender_killed_at_random_points_then_resumed() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("big");
    let size = 2u64 << 30;
    make_file(&src, size, 1 << 20, 11);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut delays = Delays(0x5EED_1234);
    for _ in 0..5 {
        let mut child = spawn_send(srv.port, &env, &src);
        std::thread::sleep(Duration::from_millis(delays.next_ms(300, 1500)));
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            !root.join("big.bin").exists(),
            "nothing committed by a killed sender"
        );
    }
    let v = finish_and_check(srv.port, &env, &src, &root, size);
    assert!(
        v["end"]["resume"]["bytes_skipped"].as_u64().unwrap() > 0,
        "nothing was resumed: {}",
        v["end"]
    );
}

#[test]
#[ignore = "heavy: real processes killed at random points, its own CI step; the roles' resume is the pair harness's (zcp-session) in the suite"]
fn the_receiver_killed_at_random_points_then_resumed() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("big");
    let size = 2u64 << 30;
    make_file(&src, size, 1 << 20, 12);
    let mut delays = Delays(0xC0FFEE);
    for _ in 0..4 {
        let mut srv = ServerProc::start(&root, &env.key, &[]);
        let child = spawn_send(srv.port, &env, &src);
        std::thread::sleep(Duration::from_millis(delays.next_ms(300, 1500)));
        srv.kill();
        let o = wait_output(child, 60);
        assert!(
            !o.status.success(),
            "the sender must notice the receiver is gone"
        );
        assert!(!root.join("big.bin").exists());
    }
    let srv = ServerProc::start(&root, &env.key, &[]);
    let v = finish_and_check(srv.port, &env, &src, &root, size);
    assert!(
        v["end"]["resume"]["bytes_skipped"].as_u64().unwrap() > 0,
        "nothing was resumed: {}",
        v["end"]
    );
}

#[test]
#[ignore = "heavy: real processes killed at random points, its own CI step; the roles' resume is the pair harness's (zcp-session) in the suite"]
fn a_source_changed_between_attempts_is_sent_whole() {
    use std::os::unix::fs::FileExt;
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("big");
    let size = 2u64 << 30;
    make_file(&src, size, 1 << 20, 13);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut child = spawn_send(srv.port, &env, &src);
    std::thread::sleep(Duration::from_millis(1500));
    let _ = child.kill();
    let _ = child.wait();
    // Same size, same mtime afterwards: only the content says it changed.
    let before = std::fs::metadata(&src).unwrap().modified().unwrap();
    std::fs::File::options()
        .write(true)
        .open(&src)
        .unwrap()
        .write_all_at(b"CHANGED", 100)
        .unwrap();
    std::fs::File::options()
        .write(true)
        .open(&src)
        .unwrap()
        .set_modified(before)
        .unwrap();
    let v = finish_and_check(srv.port, &env, &src, &root, size);
    assert_eq!(v["end"]["resume"]["bytes_skipped"], 0, "{}", v["end"]);
    let notices = v["notices"].to_string();
    assert!(
        notices.contains("changed since the interrupted attempt"),
        "{notices}"
    );
}
