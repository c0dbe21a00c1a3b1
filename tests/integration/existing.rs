//! A file already at the destination: replaced by default (only by verified data),
//! `--ignore-existing` leaves it and counts it, `--no-clobber` fails it, `--backup` keeps the
//! old one as `NAME~`; both ways (a push, where the server decides, and a get, where the
//! client does). An identity that may not read cannot ask for the two that would tell it
//! what exists.

use std::path::Path;

use crate::util::*;

/// A tree `t` of `a` (50,000 bytes) and `b` (3,000), and a destination `up/t` where `a` is
/// already there as 2 bytes.
fn setup(env: &Env, root: &Path) -> std::path::PathBuf {
    let dir = env.mkdir("t");
    make_file(&dir.join("a"), 50_000, 1 << 20, 1);
    make_file(&dir.join("b"), 3_000, 1 << 20, 2);
    std::fs::create_dir_all(root.join("up/t")).unwrap();
    std::fs::write(root.join("up/t/a"), b"hi").unwrap();
    dir
}

fn push(
    srv: &ServerProc,
    env: &Env,
    dir: &Path,
    flags: &[&str],
) -> (std::process::Output, serde_json::Value) {
    let mut args = vec!["-r"];
    args.extend_from_slice(flags);
    send_json(srv.port, &env.key, dir, "up/", &args, 30)
}

#[test]
fn a_file_already_there_is_left_refused_or_kept_as_asked() {
    let env = Env::new();
    let root = env.mkdir("root");
    let dir = setup(&env, &root);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (a, b) = (root.join("up/t/a"), root.join("up/t/b"));
    let text_push = |flags: &[&str]| run(send_cmd(srv.port, &env.key, &dir, "up/", flags), 30);

    // --ignore-existing: `a` stays as it was, `b` arrives, exit 0, and it is counted.
    let (o, v) = push(&srv, &env, &dir, &["--ignore-existing"]);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(std::fs::read(&a).unwrap(), b"hi");
    assert!(same_file(&dir.join("b"), &b));
    assert_eq!(v["end"]["files"]["left_existing"], 1, "{v}");
    assert_eq!(v["end"]["files"]["committed"], 1, "{v}");
    assert_eq!(v["end"]["files"]["failed"], 0, "{v}");
    // The server logs it (the transfer log accounts for every file), as left.
    let log = srv.log();
    assert!(
        log.contains("up/t/a not committed") && log.contains("--ignore-existing"),
        "{log}"
    );
    assert!(
        log.contains("finished: 1 file, ") && log.contains(", 1 left as already there"),
        "{log}"
    );
    let o = text_push(&["-r", "-i", "0", "--ignore-existing"]);
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        text(&o.stdout).contains("2 already there and left as they were"),
        "{}",
        text(&o.stdout)
    );

    // --no-clobber: `a` fails with class exists (the other is there already too).
    std::fs::remove_file(&b).unwrap();
    let (o, v) = push(&srv, &env, &dir, &["--no-clobber"]);
    assert_eq!(o.status.code(), Some(23), "{}", both(&o));
    assert_eq!(std::fs::read(&a).unwrap(), b"hi");
    assert!(same_file(&dir.join("b"), &b));
    let f = &v["end"]["files"]["failures"][0];
    assert_eq!(f["code"], "exists", "{v}");
    assert!(
        f["message"].as_str().unwrap().contains("--no-clobber"),
        "{v}"
    );

    // --backup: `a` is replaced, its old bytes kept as a~; `b` is the same bytes, kept in
    // place, and gets no backup.
    let (o, _) = push(&srv, &env, &dir, &["--backup"]);
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&dir.join("a"), &a));
    assert_eq!(std::fs::read(root.join("up/t/a~")).unwrap(), b"hi");
    assert!(!root.join("up/t/b~").exists());
    // Again with a changed source: the previous version becomes the backup.
    let before = std::fs::read(&a).unwrap();
    make_file(&dir.join("a"), 50_000, 1 << 20, 9);
    let (o, _) = push(&srv, &env, &dir, &["--backup"]);
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&dir.join("a"), &a));
    assert_eq!(std::fs::read(root.join("up/t/a~")).unwrap(), before);
    // A backup name taken by a directory fails that file and keeps the target as it was.
    std::fs::remove_file(root.join("up/t/a~")).unwrap();
    std::fs::create_dir(root.join("up/t/a~")).unwrap();
    let kept = std::fs::read(&a).unwrap();
    make_file(&dir.join("a"), 50_000, 1 << 20, 10);
    let (o, v) = push(&srv, &env, &dir, &["--backup"]);
    assert!(!o.status.success(), "{}", both(&o));
    assert_eq!(std::fs::read(&a).unwrap(), kept);
    let m = v["end"]["files"]["failures"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(m.contains("backup"), "{v}");
    assert!(no_partials(&root, 10), "{:?}", tree(&root));

    // The flags exclude one another.
    let o = text_push(&["-r", "--backup", "--no-clobber"]);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
}

/// In a get the client is the receiver and decides: a local file is left, refused or kept.
#[test]
fn a_get_leaves_a_local_file_as_asked() {
    let env = Env::new();
    let root = env.mkdir("root");
    make_file(&root.join("f.bin"), 40_000, 1 << 20, 3);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let dest = env.path("f.bin");
    let get = |flags: &[&str]| get_json(srv.port, &env.key, "f.bin", &dest, flags, 30);
    std::fs::write(&dest, b"mine").unwrap();
    let (o, v) = get(&["--ignore-existing"]);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(std::fs::read(&dest).unwrap(), b"mine");
    assert_eq!(v["end"]["files"]["left_existing"], 1, "{v}");
    let (o, _) = get(&["--no-clobber"]);
    assert_eq!(o.status.code(), Some(4), "{}", both(&o));
    assert_eq!(std::fs::read(&dest).unwrap(), b"mine");
    let (o, _) = get(&["--backup"]);
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&root.join("f.bin"), &dest));
    assert_eq!(std::fs::read(env.path("f.bin~")).unwrap(), b"mine");
}

/// An identity that may write but not read cannot ask to leave or refuse files already
/// there (that would tell it which exist); `--backup` it may, and nothing is written else.
#[test]
fn a_write_only_identity_may_not_ask_what_is_there() {
    let site = crate::serve_config::Site::new();
    let srv = site.serve();
    let src = site.file("f.bin", 10_000);
    std::fs::write(site.incoming.join("f.bin"), b"old").unwrap();
    for flag in ["--ignore-existing", "--no-clobber"] {
        let o = run(
            send_cmd(
                srv.port,
                &site.observatory,
                &src,
                "incoming/",
                &["-q", flag],
            ),
            30,
        );
        assert_eq!(o.status.code(), Some(3), "{flag}: {}", both(&o));
        assert!(
            text(&o.stderr).contains("may not read incoming"),
            "{}",
            both(&o)
        );
        assert_eq!(std::fs::read(site.incoming.join("f.bin")).unwrap(), b"old");
    }
    let o = run(
        send_cmd(
            srv.port,
            &site.observatory,
            &src,
            "incoming/",
            &["-q", "--backup"],
        ),
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &site.incoming.join("f.bin")));
    assert_eq!(std::fs::read(site.incoming.join("f.bin~")).unwrap(), b"old");
    // A NAME~ that cannot take a backup is refused before a byte moves, in the same words
    // whether NAME is there or not: --backup names nothing either.
    let g = site.file("g.bin", 10_000);
    std::fs::create_dir(site.incoming.join("g.bin~")).unwrap();
    let mut why = Vec::new();
    for there in [false, true] {
        if there {
            std::fs::write(site.incoming.join("g.bin"), b"old").unwrap();
        }
        let (o, v) = send_json(
            srv.port,
            &site.observatory,
            &g,
            "incoming/",
            &["--backup"],
            30,
        );
        assert_eq!(o.status.code(), Some(4), "{}", both(&o));
        why.push(v["end"]["files"]["failures"][0]["message"].clone());
    }
    assert_eq!(why[0], why[1]);
    assert!(why[0].as_str().unwrap().contains("NAME~"), "{why:?}");
    assert_eq!(std::fs::read(site.incoming.join("g.bin")).unwrap(), b"old");
}

/// A hostile client naming a mode the server does not know: refused by name before
/// anything opens, with the known ones listed; nothing is written and the server serves on.
#[test]
fn an_unknown_existing_mode_is_refused_by_name() {
    let env = Env::new();
    let root = env.mkdir("root");
    let mut srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::authenticate(srv.port, env.psk());
    let mut open = base_open(false);
    open.existing = "clobber\u{1b}[2J".into();
    raw.send(&zcp_wire::Message::Open(Box::new(open)));
    match raw.recv() {
        Ok(zcp_wire::Message::Error { code, message }) => {
            assert_eq!(code, zcp_wire::ErrorCode::Protocol);
            assert!(message.contains("unknown existing-file mode"), "{message}");
            assert!(
                message.contains("replace, ignore, fail, backup"),
                "{message}"
            );
            assert!(!message.contains('\u{1b}'), "{message}");
        }
        other => panic!("expected Error, got {other:?}"),
    }
    assert!(tree(&root).is_empty(), "{:?}", tree(&root));
    assert!(srv.alive());
}

/// `--quick-check` leaves a file whose size and mtime are the source's, `--size-only` one
/// whose size is, reading neither copy (the destination here was altered behind zcp's back,
/// size and mtime kept: a full re-proof would find it, a quick check by design does not); a
/// file that differs in what they look at is sent and replaces it. A write-only identity may
/// not ask for either.
#[test]
fn the_quick_checks_leave_what_looks_the_same_and_send_what_differs() {
    let env = Env::new();
    let root = env.mkdir("root");
    let dir = env.mkdir("t");
    make_file(&dir.join("a"), 50_000, 1 << 20, 1);
    make_file(&dir.join("b"), 3_000, 1 << 20, 2);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (o, _) = push(&srv, &env, &dir, &[]);
    assert!(o.status.success(), "{}", both(&o));
    let (a, b) = (root.join("up/t/a"), root.join("up/t/b"));
    // `a` altered on the receiver, its size and mtime kept; `b` changed at the source.
    let mtime = std::fs::metadata(&a).unwrap().modified().unwrap();
    std::fs::write(&a, vec![7u8; 50_000]).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&a)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    make_file(&dir.join("b"), 4_000, 1 << 20, 3);
    let (o, v) = push(&srv, &env, &dir, &["--quick-check"]);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(v["end"]["files"]["left_existing"], 1, "{v}");
    assert_eq!(std::fs::read(&a).unwrap(), vec![7u8; 50_000]);
    assert!(same_file(&dir.join("b"), &b));
    // Another mtime, same size: --size-only still leaves it, --quick-check sends it.
    let old = mtime - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&a)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let (o, v) = push(&srv, &env, &dir, &["--size-only"]);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(v["end"]["files"]["left_existing"], 2, "{v}");
    assert_eq!(std::fs::read(&a).unwrap(), vec![7u8; 50_000]);
    let (o, v) = push(&srv, &env, &dir, &["--quick-check"]);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(v["end"]["files"]["left_existing"], 1, "{v}");
    assert!(same_file(&dir.join("a"), &a));
    // The default proves every byte: after the same alteration, it finds and mends it.
    std::fs::write(&a, vec![7u8; 50_000]).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&a)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let (o, _) = push(&srv, &env, &dir, &["--checksum"]);
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&dir.join("a"), &a));

    let site = crate::serve_config::Site::new();
    let srv = site.serve();
    let src = site.file("f.bin", 10_000);
    for flag in ["--size-only", "--quick-check"] {
        let o = run(
            send_cmd(
                srv.port,
                &site.observatory,
                &src,
                "incoming/",
                &["-q", flag],
            ),
            30,
        );
        assert_eq!(o.status.code(), Some(3), "{flag}: {}", both(&o));
        assert!(!site.incoming.join("f.bin").exists());
    }
}
