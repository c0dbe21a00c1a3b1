//! Faults mid-transfer: either side killed, the source changing under the sender, a full
//! destination. In every case the final name is untouched and nothing partial is committed.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::util::*;

/// Starts a slow send (read/write through 4 KiB blocks into the page cache) reporting every
/// 0.05 s, and returns once the first interval shows bytes moving.
fn start_slow_send(port: u16, key: &Path, src: &Path, dest: &str) -> Child {
    let mut child = send_cmd(
        port,
        key,
        src,
        dest,
        &[
            "--json-stream",
            "-i",
            "0.05",
            "--engine",
            "rw",
            "--recv-engine",
            "rw",
            "--block-size",
            "4K",
        ],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    loop {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line)
                if line.contains("\"type\":\"interval\"") && !line.contains("\"bytes\":0,") =>
            {
                return child;
            }
            Ok(line) if line.contains("\"type\":\"end\"") => {
                panic!("the transfer finished before the fault: {line}")
            }
            Ok(_) => {}
            Err(_) => {
                let _ = child.kill();
                panic!("no interval report from the sender");
            }
        }
    }
}

/// The size of [`big_source`].
const BIG: u64 = 1 << 30;

fn big_source(env: &Env, name: &str) -> std::path::PathBuf {
    let src = env.path(name);
    // 1 GiB, data every 4 MiB: the slow path needs a second or more, the fault lands mid-file.
    make_file(&src, BIG, 4 << 20, 7);
    src
}

#[test]
fn killing_the_sender_mid_file_leaves_the_target_untouched_and_resumes() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::write(root.join("t.bin"), b"old").unwrap();
    let src = big_source(&env, "src");
    let mut srv = ServerProc::start(&root, &env.key, &[]);
    let mut child = start_slow_send(srv.port, &env.key, &src, "t.bin");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(srv.wait_log("failed", 20), "{}", srv.log());
    assert_eq!(std::fs::read(root.join("t.bin")).unwrap(), b"old");
    assert!(srv.alive());
    // The same command again finishes the file, sending only what is missing.
    let (o, v) = send_json(srv.port, &env.key, &src, "t.bin", &[], 120);
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &root.join("t.bin")));
    assert!(no_partials(&root, 10), "{:?}", tree(&root));
    let sent = v["end"]["sum_sent"]["bytes"].as_u64().unwrap();
    let skipped = v["end"]["resume"]["bytes_skipped"].as_u64().unwrap();
    assert_eq!(sent + skipped, BIG, "{v}");
}

#[test]
fn killing_the_receiver_mid_file_fails_the_sender_clearly_and_resumes() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::write(root.join("t.bin"), b"old").unwrap();
    let src = big_source(&env, "src");
    let mut srv = ServerProc::start(&root, &env.key, &[]);
    let child = start_slow_send(srv.port, &env.key, &src, "t.bin");
    srv.kill();
    let o = wait_output(child, 30);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    let err = text(&o.stderr);
    assert!(err.contains("connection") || err.contains("peer"), "{err}");
    assert_eq!(
        std::fs::read(root.join("t.bin")).unwrap(),
        b"old",
        "final name untouched"
    );
    let srv = ServerProc::start(&root, &env.key, &[]);
    send_again_and_check(&srv, &env, &src, "t.bin");
}

#[test]
fn a_source_that_shrinks_while_sent_is_not_committed() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = big_source(&env, "src");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let child = start_slow_send(srv.port, &env.key, &src, "t.bin");
    std::fs::File::options()
        .write(true)
        .open(&src)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let o = wait_output(child, 60);
    assert_eq!(o.status.code(), Some(5), "{}", both(&o));
    assert!(
        both(&o).contains("changed while being sent"),
        "{}",
        both(&o)
    );
    assert!(!root.join("t.bin").exists());
}

#[test]
fn a_source_modified_while_sent_is_not_committed() {
    use std::os::unix::fs::FileExt;
    let env = Env::new();
    let root = env.mkdir("root");
    let src = big_source(&env, "src");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let child = start_slow_send(srv.port, &env.key, &src, "t.bin");
    let f = std::fs::File::options().write(true).open(&src).unwrap();
    for off in [0u64, BIG / 2, BIG - 12345] {
        f.write_all_at(b"tampered", off).unwrap();
    }
    drop(f);
    let o = wait_output(child, 120);
    assert_eq!(o.status.code(), Some(5), "{}", both(&o));
    assert!(!root.join("t.bin").exists());
    // Sent again unchanged from here, it arrives whole and right.
    send_again_and_check(&srv, &env, &src, "t.bin");
}

#[test]
fn a_full_destination_fails_cleanly_and_keeps_serving() {
    let env = Env::new();
    let root = env.mkdir("small-root");
    let Some(_fs) = SmallFs::for_test(&root, "4m") else {
        return;
    };
    std::fs::write(root.join("keep.txt"), b"committed earlier").unwrap();
    let src = env.path("big");
    make_dense(&src, 16 << 20, 3);
    let mut srv = ServerProc::start(&root, &env.key, &[]);
    for engine in ["auto", "splice", "rw"] {
        let o = run(
            send_cmd(srv.port, &env.key, &src, "big", &["--recv-engine", engine]),
            20,
        );
        assert_eq!(o.status.code(), Some(4), "{engine}: {}", both(&o));
        let err = both(&o);
        assert!(
            err.contains("no space") || err.contains("full"),
            "{engine}: {err}"
        );
    }
    assert_eq!(tree(&root), vec!["keep.txt"]);
    assert_eq!(
        std::fs::read(root.join("keep.txt")).unwrap(),
        b"committed earlier"
    );
    assert!(srv.alive());
    let small = env.path("small");
    make_dense(&small, 1 << 20, 4);
    let o = run(
        send_cmd(srv.port, &env.key, &small, "small", &["-i", "0"]),
        20,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// Sends `src` to `dest` once more and checks it arrives whole, with nothing left beside it.
fn send_again_and_check(srv: &ServerProc, env: &Env, src: &Path, dest: &str) {
    let o = run(send_cmd(srv.port, &env.key, src, dest, &["-i", "0"]), 120);
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(src, &srv.root.join(dest)));
    assert!(no_partials(&srv.root, 10), "{:?}", tree(&srv.root));
}
