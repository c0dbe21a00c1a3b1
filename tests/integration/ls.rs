//! `zcp ls`: what a key may read beneath paths, sorted, in short, long and JSON forms; the
//! exports a key may use; refusals for what it may not read; and a lying server.

use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use crate::serve_config::Site;
use crate::util::*;

fn ls(port: u16, key: &Path, extra: &[&str], paths: &[&str]) -> std::process::Output {
    run(ls_cmd(port, key, extra, paths), 30)
}

/// `root/run`: b.h5 (5 bytes, 0640, mtime 1e9), a.txt, sub/c.h5, link -> ../elsewhere, and a
/// part file an interrupted transfer left.
fn tree_in(root: &Path) {
    let run = root.join("run");
    std::fs::create_dir_all(run.join("sub")).unwrap();
    std::fs::write(run.join("b.h5"), b"hello").unwrap();
    std::fs::write(run.join("a.txt"), b"x").unwrap();
    std::fs::write(run.join("sub/c.h5"), b"yy").unwrap();
    std::fs::write(run.join(".zcp-0123456789abcdef.part"), b"partial").unwrap();
    std::os::unix::fs::symlink("../elsewhere", run.join("link")).unwrap();
    let f = std::fs::File::options()
        .write(true)
        .open(run.join("b.h5"))
        .unwrap();
    f.set_modified(UNIX_EPOCH + Duration::from_secs(1_000_000_000))
        .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(run.join("b.h5"), std::fs::Permissions::from_mode(0o640)).unwrap();
}

#[test]
fn a_listing_is_sorted_and_shows_what_a_get_would_fetch() {
    let env = Env::new();
    let root = env.mkdir("root");
    tree_in(&root);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let o = ls(srv.port, &env.key, &[], &["run"]);
    assert!(o.status.success(), "{}", both(&o));
    // Sorted, directories marked, zcp's own part file hidden, nothing descended into.
    assert_eq!(text(&o.stdout), "a.txt\nb.h5\nlink\nsub/\n");
    // A directory's entries follow it, before names that sort between.
    std::fs::create_dir(root.join("run/sub-x")).unwrap();
    let o = ls(srv.port, &env.key, &["-r"], &["run/sub", "run"]);
    let out = text(&o.stdout);
    assert!(out.contains("\nsub/\nsub/c.h5\nsub-x/\n"), "{out}");
    std::fs::remove_dir(root.join("run/sub-x")).unwrap();
    let o = ls(srv.port, &env.key, &["-l"], &["run/b.h5", "run/link"]);
    assert!(o.status.success(), "{}", both(&o));
    let out = text(&o.stdout);
    assert!(
        out.starts_with("-rw-r-----              5 2001-09-09T01:46:40Z run/b.h5\n"),
        "{out}"
    );
    assert!(out.contains(" run/link -> ../elsewhere\n"), "{out}");
    assert!(out.starts_with('-') && out.lines().nth(1).unwrap().starts_with('l'));
    // -r, filtered as a get would be; the root with `HOST:`.
    let flags = ["-r", "--exclude", "*.txt"];
    let o = ls(srv.port, &env.key, &flags, &[""]);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(
        text(&o.stdout),
        "run/\nrun/b.h5\nrun/link\nrun/sub/\nrun/sub/c.h5\n"
    );
}

#[test]
fn a_missing_path_is_named_and_the_exit_code_says_how_much_was_listed() {
    let env = Env::new();
    let root = env.mkdir("root");
    tree_in(&root);
    let srv = ServerProc::start(&root, &env.key, &[]);
    // However it is spelled.
    for nope in ["nope", "nope/", "./nope", "run//nope/"] {
        let o = ls(srv.port, &env.key, &[], &[nope]);
        assert_eq!(o.status.code(), Some(1), "{nope}: {}", both(&o));
        assert!(
            text(&o.stderr).contains(&format!("{nope}: no such file or directory on the server")),
            "{}",
            both(&o)
        );
    }
    // Two listed, one not: partial. Several paths get a heading each, as ls does.
    let o = ls(srv.port, &env.key, &[], &["run/sub", "nope", "run/a.txt"]);
    assert_eq!(o.status.code(), Some(23), "{}", both(&o));
    assert_eq!(text(&o.stdout), "run/sub:\nc.h5\nrun/a.txt\n");
    // Climbing out, or through the link, is refused like a missing path.
    let o = ls(srv.port, &env.key, &[], &["run/link/x"]);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    let o = ls(srv.port, &env.key, &[], &["../"]);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(!text(&o.stderr).contains("protocol"), "{}", both(&o));
}

#[test]
fn json_lists_every_entry_with_its_facts() {
    let env = Env::new();
    let root = env.mkdir("root");
    tree_in(&root);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let o = ls(srv.port, &env.key, &["-J", "-r"], &["run", "gone"]);
    assert_eq!(o.status.code(), Some(23), "{}", both(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let entries = v["entries"].as_array().unwrap();
    let paths: Vec<&str> = entries
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, [".", "a.txt", "b.h5", "link", "sub", "sub/c.h5"]);
    let b = &entries[2];
    assert_eq!(
        (b["type"].as_str(), b["size"].as_u64(), b["mode"].as_str()),
        (Some("file"), Some(5), Some("0640"))
    );
    assert_eq!(b["mtime"], "2001-09-09T01:46:40Z");
    assert_eq!(entries[3]["target"], "../elsewhere");
    assert_eq!(v["failures"][0]["path"], "gone");
}

#[test]
fn exports_are_listed_with_what_the_key_may_do_and_unreadable_ones_refused() {
    let site = Site::new();
    let srv = site.serve();
    std::fs::write(site.archive.join("a.h5"), b"a").unwrap();
    std::fs::write(site.incoming.join("secret"), b"s").unwrap();
    let o = ls(srv.port, &site.observatory, &["-l"], &[""]);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(
        text(&o.stdout),
        format!("{:<17}  archive/\n{:<17}  incoming/\n", "read", "write")
    );
    let o = ls(srv.port, &site.lab, &[], &[""]);
    assert_eq!(text(&o.stdout), "archive/\n", "{}", both(&o));
    // Accounted as listings, not as refusals.
    let log = srv.log();
    assert!(log.contains(": list, 0 streams, identity lab"), "{log}");
    assert!(!log.contains("refused"), "{log}");
    let o = ls(srv.port, &site.observatory, &[], &["archive"]);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(text(&o.stdout), "a.h5\n");
    // A write-only export is not listed: its names are not the key's to learn.
    let o = ls(srv.port, &site.observatory, &[], &["incoming"]);
    assert_eq!(o.status.code(), Some(3), "{}", both(&o));
    assert!(!text(&o.stdout).contains("secret"), "{}", both(&o));
    // A wrong export name lists the right ones.
    let o = ls(srv.port, &site.lab, &[], &["archiv/x"]);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        text(&o.stderr).contains("no export 'archiv' on this server (yours: archive;"),
        "{}",
        both(&o)
    );
}

/// A hostile client's listings: one that does not say it reads, a path that climbs, an
/// exports listing that names a path. Each refused or failed by name, nothing outside the
/// root named, and the server serves on.
#[test]
fn a_listing_reads_only_beneath_the_root_and_only_as_asked() {
    use zcp_wire::{ErrorCode, Message, Open};
    let env = Env::new();
    let root = env.mkdir("root");
    tree_in(&root);
    std::fs::write(env.path("outside"), b"o").unwrap();
    let mut srv = ServerProc::start(&root, &env.key, &[]);
    let open = |pull| Open {
        list: true,
        ..base_open(pull)
    };
    let mut raw = Raw::authenticate(srv.port, env.psk());
    raw.send(&Message::Open(Box::new(open(false))));
    match raw.recv() {
        Ok(Message::Error { code, message }) => {
            assert_eq!(code, ErrorCode::Protocol);
            assert!(message.contains("a listing reads"), "{message}");
        }
        other => panic!("expected Error, got {other:?}"),
    }
    let mut raw = Raw::authenticate(srv.port, env.psk());
    raw.send(&Message::Open(Box::new(open(true))));
    assert!(matches!(raw.recv(), Ok(Message::Opened { streams: 0, .. })));
    for path in [
        &b"../outside"[..],
        b"run/link/x",
        b"/etc",
        b"run/.zcp-0123456789abcdef.part",
    ] {
        raw.send(&Message::Get {
            path: path.to_vec(),
            dest: Vec::new(),
        });
    }
    raw.send(&Message::GetEnd);
    let mut failed = 0;
    loop {
        match raw.recv() {
            Ok(Message::EntryFailed { code, .. }) => {
                assert_eq!(code, ErrorCode::BadPath);
                failed += 1;
            }
            Ok(Message::Finish) => break,
            other => panic!("expected EntryFailed or Finish, got {other:?}"),
        }
    }
    assert_eq!(failed, 4);
    assert!(srv.alive());
}
