//! Exit honesty of `zcp serve --once`: it exits 0 only when the one session it ran for
//! stored what it was sent. An empty session, a file announced and never sent, or another
//! client's short session while the operator's transfer is under way cannot make it report
//! success.

use std::time::{Duration, Instant};

use zcp_wire::Message;

use crate::hostile::peer::*;
use crate::util::*;

/// `serve --once`: a push session that sends nothing at all.
#[test]
fn once_empty_push_session_exit_code() {
    let env = Env::new();
    let root = env.mkdir("root");
    let mut srv = ServerProc::start(&root, &env.key, &["--once"]);
    let mut raw = Raw::connect_with(srv.port, env.psk(), "auto", 1);
    let d = raw.data(srv.port, 0).unwrap();
    assert!(raw_finish(&mut raw, &mut [d]));
    let code = srv.exit_code(10);
    eprintln!("empty push: exit {code:?}; log {}", srv.log());
    assert_eq!(tree(&root), Vec::<String>::new());
    assert_ne!(
        code,
        Some(0),
        "GOT THROUGH: --once exited 0 after an empty session"
    );
}

/// `serve --once`: a PutFile that is never sent, then Finish: the open file is dropped.
#[test]
fn once_push_file_never_sent_exit_code() {
    let env = Env::new();
    let root = env.mkdir("root");
    let mut srv = ServerProc::start(&root, &env.key, &["--once"]);
    let mut raw = Raw::connect_with(srv.port, env.psk(), "auto", 1);
    let d = raw.data(srv.port, 0).unwrap();
    raw.send(&pf(0, b"x.bin", 300_000, 65536));
    assert!(matches!(raw.recv().unwrap(), Message::FileReady { .. }));
    let stats = raw_finish(&mut raw, &mut [d]);
    let code = srv.exit_code(10);
    eprintln!("stats {stats}, exit {code:?}; log {}", srv.log());
    assert!(!root.join("x.bin").exists());
    assert_ne!(
        code,
        Some(0),
        "GOT THROUGH: --once exited 0 though the announced file was never stored: {}",
        srv.log()
    );
}

/// `serve --once` runs a session for the operator (here a real `zcp send` of 512 MiB). While
/// it is in flight, a key holder opens a second session, makes one directory and finishes.
/// The server returns after the first session to *end* — the key holder's — with its code
/// (0), and the process exit cuts the operator's transfer off.
/// SAFE: `--once` does not report success while the session it ran for did not complete
/// (either it waits for it, refuses the second session, or exits non-zero). Fixed: the
/// second session is refused as busy, and the first runs to its end.
#[test]
fn once_exits_0_on_another_sessions_success_while_the_real_one_is_cut() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("big.bin");
    make_file(&src, 512 << 20, 64 << 20, 4);
    let mut srv = ServerProc::start(&root, &env.key, &["--once"]);
    let honest = {
        let mut c = send_cmd(srv.port, &env.key, &src, "big.bin", &SLOW);
        c.args(["-i", "0"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c.spawn().unwrap()
    };
    // The operator's session is under way once its part file is there.
    let end = Instant::now() + Duration::from_secs(10);
    while own_files(&root).is_empty() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!own_files(&root).is_empty(), "the honest send started");
    // A second client's short session (a key holder's, or anyone's).
    let small = env.path("small.bin");
    make_dense(&small, 1000, 5);
    let second = run(
        send_cmd(srv.port, &env.key, &small, "small.bin", &["-i", "0"]),
        30,
    );
    let code = srv.exit_code(120);
    let o = wait_output(honest, 60);
    let arrived = root.join("big.bin").exists() && same_file(&src, &root.join("big.bin"));
    println!(
        "serve --once exit {code:?}; honest send exit {:?}; big.bin arrived: {arrived}; \
         second session: {:?} {}",
        o.status.code(),
        second.status.code(),
        both(&second).lines().last().unwrap_or("")
    );
    assert!(
        code != Some(0) || arrived,
        "GOT THROUGH: serve --once exited 0 (another session's outcome) while the transfer it \
         ran for was cut off: send said {}",
        both(&o).lines().last().unwrap_or("")
    );
    // --once runs one session: the second is refused as busy, the first runs to its end.
    assert!(!second.status.success(), "{}", both(&second));
    assert!(both(&second).contains("serve --once"), "{}", both(&second));
    assert!(!root.join("small.bin").exists());
    assert!(o.status.success() && arrived, "{}", both(&o));
    assert_eq!(code, Some(0));
}
