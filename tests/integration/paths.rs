//! Destination paths: every way out of the root is refused and creates or changes nothing
//! outside it; odd but legal names arrive with their exact bytes.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;

use zcp_wire::{ErrorCode, Message};

use crate::util::*;

#[test]
fn cli_refuses_absolute_and_parent_paths() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("f");
    make_dense(&src, 1000, 1);
    let srv = ServerProc::start(&root, &env.key, &[]);
    for (dest, needle) in [
        ("/etc/zcp-test", "absolute"),
        ("a/../../x", ".."),
        ("..", ".."),
    ] {
        // Found before connecting: a usage mistake (2), never "the peer refused".
        let o = run(send_cmd(srv.port, &env.key, &src, dest, &[]), 10);
        assert_eq!(o.status.code(), Some(2), "{dest}: {}", text(&o.stderr));
        assert!(!text(&o.stderr).contains("peer"), "{}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains(needle),
            "{dest}: {}",
            text(&o.stderr)
        );
    }
    assert!(tree(&root).is_empty());
    assert!(!std::path::Path::new("/etc/zcp-test").exists());
}

#[test]
fn server_refuses_bad_paths_from_a_hostile_client() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let cases: &[(&[u8], &str)] = &[
        (b"", "empty"),
        (b"a\0b", "NUL"),
        (b"/etc/passwd", "absolute"),
        (b"../escape", ".."),
        (b"ok/../../escape", ".."),
    ];
    let mut raw = Raw::connect_with(srv.port, env.psk(), "auto", 1);
    for (i, (dest, needle)) in cases.iter().enumerate() {
        match raw.put(i as u32, dest, 10) {
            Message::FileFailed { code, message, .. } => {
                assert_eq!(code, ErrorCode::BadPath, "{dest:?}");
                assert!(message.contains(needle), "{dest:?}: {message}");
            }
            other => panic!("{dest:?}: expected FileFailed, got {other:?}"),
        }
    }
    // A file name that is not one component is refused too.
    raw.send(&Message::PutFile(zcp_wire::PutFile {
        file_id: 99,
        dest: b"dir/".to_vec(),
        name: b"../../x".to_vec(),
        size: 1,
        mode: 0o644,
        mtime_sec: 0,
        mtime_nsec: 0,
        chunk_size: 65536,
        sparse: false,
    }));
    assert!(matches!(
        raw.recv().unwrap(),
        Message::FileFailed {
            code: ErrorCode::BadPath,
            ..
        }
    ));
    assert!(tree(&root).is_empty(), "{:?}", tree(&root));
    let mut srv = srv;
    assert!(srv.alive());
}

#[test]
fn symlinks_on_the_receiver_are_never_followed() {
    let env = Env::new();
    let root = env.mkdir("root");
    let outside = env.mkdir("outside");
    std::fs::write(outside.join("victim"), b"original").unwrap();
    symlink(&outside, root.join("dirlink")).unwrap();
    symlink(outside.join("victim"), root.join("filelink")).unwrap();
    let src = env.path("payload");
    make_dense(&src, 4096, 2);
    let srv = ServerProc::start(&root, &env.key, &[]);
    for dest in ["dirlink/x", "dirlink/sub/x", "dirlink/", "filelink"] {
        let o = run(send_cmd(srv.port, &env.key, &src, dest, &[]), 10);
        assert_eq!(o.status.code(), Some(4), "{dest}: {}", text(&o.stderr));
        assert!(both(&o).contains("symlink"), "{dest}: {}", both(&o));
    }
    assert_eq!(
        tree(&outside),
        vec!["victim"],
        "nothing created outside the root"
    );
    assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"original");
    assert!(
        std::fs::symlink_metadata(root.join("filelink"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(tree(&root), vec!["dirlink", "filelink"]);
}

#[test]
fn directories_receive_the_source_name_and_parents_are_created() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::create_dir(root.join("existing")).unwrap();
    let src = env.path("name.bin");
    make_dense(&src, 10_000, 3);
    let srv = ServerProc::start(&root, &env.key, &[]);
    for dest in ["existing", "new/dir/", "deep/er/file.out", "."] {
        let o = run(send_cmd(srv.port, &env.key, &src, dest, &["-i", "0"]), 10);
        assert!(o.status.success(), "{dest}: {}", text(&o.stderr));
    }
    for p in [
        "existing/name.bin",
        "new/dir/name.bin",
        "deep/er/file.out",
        "name.bin",
    ] {
        assert!(same_file(&src, &root.join(p)), "{p}");
    }
    // A destination that is a directory by name but a file on disk is refused cleanly.
    std::fs::write(root.join("plain"), b"x").unwrap();
    let o = run(send_cmd(srv.port, &env.key, &src, "plain/inside", &[]), 10);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o.stderr));
    assert!(both(&o).contains("not a directory"), "{}", both(&o));
}

#[test]
fn unusual_names_arrive_with_their_exact_bytes() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("s");
    make_dense(&src, 777, 4);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let names: [&[u8]; 4] = [
        b"with space",
        b"-leading-dash",
        b"new\nline",
        b"bad\xffutf8",
    ];
    for name in names {
        let mut target = b"127.0.0.1::".to_vec();
        target.extend_from_slice(name);
        let mut c = zcp();
        c.args(["send", "-i", "0", "-p", &srv.port.to_string(), "--key-file"])
            .arg(&env.key)
            .arg(&src)
            .arg(OsStr::from_bytes(&target));
        let o = run(c, 10);
        assert!(o.status.success(), "{name:?}: {}", text(&o.stderr));
        assert!(
            same_file(&src, &root.join(OsStr::from_bytes(name))),
            "{name:?}"
        );
    }
    let long = "n".repeat(255);
    let o = run(send_cmd(srv.port, &env.key, &src, &long, &[]), 10);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(root.join(&long).exists());
    let too_long = "n".repeat(256);
    let o = run(send_cmd(srv.port, &env.key, &src, &too_long, &[]), 10);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("255"), "{}", text(&o.stderr));
}

#[test]
fn an_existing_target_is_replaced_only_by_verified_data() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::write(root.join("t.bin"), b"old contents").unwrap();
    let src = env.path("new");
    make_dense(&src, 50_000, 5);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let o = run(
        send_cmd(srv.port, &env.key, &src, "t.bin", &["-i", "0"]),
        10,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(same_file(&src, &root.join("t.bin")));
}
