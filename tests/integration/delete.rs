//! `--delete` and `--delete-dry-run`: once every entry arrived and nothing failed, the
//! receiver removes what the source does not hold inside each tree sent — and nothing else:
//! not outside those trees, not through a link, not what the filters exclude, not zcp's own
//! part files, not `--backup`'s `NAME~`. A server allows it only to identities with
//! `read-write-delete`.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::util::*;

/// A source tree `t`: a/f, g.
fn source(env: &Env) -> PathBuf {
    let t = env.mkdir("t");
    std::fs::create_dir_all(t.join("a")).unwrap();
    std::fs::write(t.join("a/f"), b"one").unwrap();
    std::fs::write(t.join("g"), b"two").unwrap();
    t
}

/// A destination that holds an older copy of `t` beneath `root`: extraneous stale, old/deep/x,
/// a/notes.tmp, a link to a directory outside the root, a part file; and `other` beside `t`.
/// Returns the directory outside the root the link points to.
fn older_copy(env: &Env, root: &Path) -> PathBuf {
    let outside = env.mkdir("outside");
    std::fs::write(outside.join("precious"), b"keep me").unwrap();
    let t = root.join("t");
    std::fs::create_dir_all(t.join("old/deep")).unwrap();
    std::fs::create_dir_all(t.join("a")).unwrap();
    std::fs::write(t.join("old/deep/x"), b"x").unwrap();
    std::fs::write(t.join("stale"), b"s").unwrap();
    std::fs::write(t.join("a/notes.tmp"), b"n").unwrap();
    std::fs::write(t.join(".zcp-0123.part"), b"p").unwrap();
    symlink(&outside, t.join("to-outside")).unwrap();
    std::fs::write(root.join("other"), b"o").unwrap();
    outside
}

#[test]
fn a_push_with_delete_mirrors_the_tree_and_touches_nothing_else() {
    let env = Env::new();
    let root = env.mkdir("root");
    let t = source(&env);
    let outside = older_copy(&env, &root);
    // An excluded file deep in a directory the source no longer has: it stays, and so do the
    // directories that hold it; the rest of that directory goes.
    std::fs::write(root.join("t/old/deep/keep.tmp"), b"k").unwrap();
    let srv = ServerProc::start(&root, &env.key, &["--allow-delete"]);
    let flags = ["-r", "--delete", "--exclude", "*.tmp", "-v"];
    let o = run(send_cmd(srv.port, &env.key, &t, "", &flags), 30);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(
        tree(&root),
        [
            "other",
            "t",
            "t/.zcp-0123.part",
            "t/a",
            "t/a/f",
            "t/a/notes.tmp",
            "t/g",
            "t/old",
            "t/old/deep",
            "t/old/deep/keep.tmp"
        ]
    );
    // The link went, not what it points at.
    assert_eq!(std::fs::read(outside.join("precious")).unwrap(), b"keep me");
    let out = text(&o.stdout);
    assert!(out.contains("deleted:  t/stale\n"), "{out}");
    assert!(out.contains("t/old: kept: it holds 1 entry"), "{out}");
    assert!(out.contains(", 2 deleted"), "{out}");
    assert!(
        srv.wait_log("deleted entry t/to-outside (--delete)", 10),
        "{}",
        srv.log()
    );
    assert!(srv.wait_log("2 deleted", 10), "{}", srv.log());
}

#[test]
fn a_push_counts_what_it_deleted_in_its_json() {
    let env = Env::new();
    let root = env.mkdir("root");
    let t = source(&env);
    older_copy(&env, &root);
    let srv = ServerProc::start(&root, &env.key, &["--allow-delete"]);
    let (o, v) = send_json(srv.port, &env.key, &t, "", &["-r", "--delete"], 30);
    assert!(o.status.success(), "{}", both(&o));
    // stale, old/, to-outside, a/notes.tmp.
    assert_eq!(v["end"]["files"]["deleted"], 4, "{v}");
    assert_eq!(v["end"]["files"]["deleted_dry_run"], false, "{v}");
    assert_eq!(
        tree(&root),
        ["other", "t", "t/.zcp-0123.part", "t/a", "t/a/f", "t/g"]
    );
}

#[test]
fn a_dry_run_names_what_would_go_and_removes_nothing() {
    let env = Env::new();
    let root = env.mkdir("root");
    let t = source(&env);
    older_copy(&env, &root);
    let before = tree(&root);
    let srv = ServerProc::start(&root, &env.key, &["--allow-delete"]);
    let o = run(
        send_cmd(srv.port, &env.key, &t, "", &["-r", "--delete-dry-run"]),
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    let out = text(&o.stdout);
    for name in ["t/old/", "t/stale", "t/to-outside", "t/a/notes.tmp"] {
        assert!(out.contains(&format!("would delete: {name}\n")), "{out}");
    }
    assert!(
        out.contains("4 would be deleted (--delete-dry-run)"),
        "{out}"
    );
    // What was sent arrived; nothing went.
    let mut after = before.clone();
    after.extend(["t/a/f".to_string(), "t/g".to_string()]);
    after.sort();
    assert_eq!(tree(&root), after);
}

#[test]
fn a_server_refuses_delete_to_an_identity_without_the_right_and_changes_nothing() {
    let env = Env::new();
    let root = env.mkdir("root");
    let t = source(&env);
    older_copy(&env, &root);
    let before = tree(&root);
    let srv = ServerProc::start(&root, &env.key, &[]);
    for flag in ["--delete", "--delete-dry-run"] {
        let o = run(send_cmd(srv.port, &env.key, &t, "", &["-r", flag]), 30);
        assert_eq!(o.status.code(), Some(3), "{flag}: {}", both(&o));
        assert!(both(&o).contains("read-write-delete"), "{}", both(&o));
        assert!(both(&o).contains("--allow-delete"), "{}", both(&o));
        assert_eq!(tree(&root), before, "{flag}");
    }
}

#[test]
fn delete_needs_r() {
    let env = Env::new();
    let t = source(&env);
    let o = run(send_cmd(1, &env.key, &t, "", &["--delete"]), 30);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(both(&o).contains("--recursive"), "{}", both(&o));
}

#[test]
fn a_transfer_that_was_not_whole_deletes_nothing_and_says_so() {
    let env = Env::new();
    let root = env.mkdir("root");
    let t = source(&env);
    older_copy(&env, &root);
    // A FIFO in the source is passed over: the receiver's `stale` may be what it stood for.
    let fifo = t.join("pipe");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        return skip("mkfifo is not available");
    }
    let srv = ServerProc::start(&root, &env.key, &["--allow-delete"]);
    let o = run(
        send_cmd(srv.port, &env.key, &t, "", &["-r", "--delete"]),
        30,
    );
    assert_ne!(o.status.code(), Some(0), "{}", both(&o));
    assert!(both(&o).contains("nothing deleted"), "{}", both(&o));
    assert!(root.join("t/stale").exists() && root.join("t/old/deep/x").exists());
    assert_eq!(std::fs::read(root.join("t/g")).unwrap(), b"two");
}

#[test]
fn a_get_with_delete_prunes_the_requested_tree_in_the_destination_only() {
    let env = Env::new();
    let root = env.mkdir("root");
    let t = source(&env);
    std::fs::rename(&t, root.join("t")).unwrap();
    let dest = env.mkdir("dest");
    let outside = older_copy(&env, &dest);
    std::fs::write(dest.join("t/g"), b"older g").unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (o, v) = get_json(
        srv.port,
        &env.key,
        "t",
        &dest,
        &["-r", "--delete", "--backup"],
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(
        tree(&dest),
        [
            "other",
            "t",
            "t/.zcp-0123.part",
            "t/a",
            "t/a/f",
            "t/g",
            "t/g~"
        ]
    );
    // --backup kept the older g as g~, and --delete keeps backups.
    assert_eq!(std::fs::read(dest.join("t/g~")).unwrap(), b"older g");
    assert_eq!(std::fs::read(dest.join("t/g")).unwrap(), b"two");
    assert!(outside.join("precious").exists());
    assert_eq!(v["end"]["files"]["deleted"], 4, "{v}");
    // The server logs what the client removed, as the client's.
    assert!(
        srv.wait_log("the client deleted its directory t/old", 10),
        "{}",
        srv.log()
    );
}

#[test]
fn a_config_grants_delete_per_identity_and_export_and_ls_shows_it() {
    let site = crate::serve_config::Site::new();
    // `lab` may delete in archive; `observatory` may only write incoming.
    site.write(&site.text(true).replace(
        "archive = \"read-write\"",
        "archive = \"read-write-delete\"",
    ));
    std::fs::create_dir_all(site.archive.join("t/old")).unwrap();
    std::fs::create_dir_all(site.incoming.join("t/old")).unwrap();
    let srv = site.serve();
    let t = source(&site.env);
    let push = |key: &Path, export: &str| {
        let mut c = zcp();
        c.args([
            "send",
            "-r",
            "--delete",
            "-p",
            &srv.port.to_string(),
            "--key-file",
        ])
        .arg(key)
        .arg(&t)
        .arg(format!("127.0.0.1::{export}/"));
        run(c, 30)
    };
    let o = push(&site.lab, "archive");
    assert!(o.status.success(), "{}", both(&o));
    assert!(!site.archive.join("t/old").exists());
    let o = push(&site.observatory, "incoming");
    assert_eq!(o.status.code(), Some(3), "{}", both(&o));
    assert!(site.incoming.join("t/old").exists());
    let o = run(ls_cmd(srv.port, &site.lab, &["-l"], &[""]), 30);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(
        text(&o.stdout),
        format!("{:<17}  archive/\n", "read-write-delete")
    );
}
