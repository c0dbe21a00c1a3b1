//! Confinement of `--delete`: a malicious server in a `get`, or a client holding the
//! `read-write-delete` key in a push, removes nothing outside the trees the session copied,
//! nothing through a link, nothing while anything is open or has failed, and nothing at all
//! when `--delete` was not asked for.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use zcp_wire::{DeleteMode, Message, Open, PruneCount};

use crate::hostile::peer::*;
use crate::util::*;

/// `dest` holding `keep` (beside the requested tree), `t/stale`, `t/old/x` and `t/link`
/// (to a directory outside `dest`, which holds `precious`). Returns that directory.
fn victim(env: &Env, dest: &Path) -> PathBuf {
    let outside = env.mkdir("outside");
    std::fs::write(outside.join("precious"), b"p").unwrap();
    std::fs::create_dir_all(dest.join("t/old")).unwrap();
    std::fs::write(dest.join("t/old/x"), b"x").unwrap();
    std::fs::write(dest.join("t/stale"), b"s").unwrap();
    std::fs::write(dest.join("keep"), b"k").unwrap();
    symlink(&outside, dest.join("t/link")).unwrap();
    outside
}

fn make_dir(path: &[u8], top: bool) -> Message {
    Message::MakeDir {
        path: path.to_vec(),
        top,
    }
}

/// The client's answers to a `Prune`, up to its `Pruned{end}`: the names it said it deleted.
fn pruned(evil: &mut Evil) -> (Vec<Vec<u8>>, PruneCount) {
    let mut named = Vec::new();
    loop {
        match evil.next() {
            Message::Deleted {
                path, failed: None, ..
            } => named.push(path),
            Message::Pruned(c) if c.end => return (named, c),
            Message::Pruned(_) => {}
            other => panic!("expected Deleted or Pruned, got {other:?}"),
        }
    }
}

#[test]
fn a_server_prunes_only_inside_the_requested_tree_and_never_through_a_link() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let outside = victim(&env, &dest);
    let (child, mut evil) = evil_get(&env, &["t"], &dest, &["-r", "--delete"]);
    evil.send(&make_dir(b"t", true));
    evil.made(b"t");
    assert!(matches!(
        evil.send_file(0, b"t/new", b"new bytes"),
        Message::FileCommitted { .. }
    ));
    evil.send(&Message::Prune);
    let (mut named, c) = pruned(&mut evil);
    named.sort();
    assert_eq!(named, [&b"t/link"[..], b"t/old", b"t/stale"]);
    assert_eq!((c.deleted, c.failed, c.refused.as_str()), (3, 0, ""));
    evil.finish();
    let o = wait_output(child, 30);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(tree(&dest), ["keep", "t", "t/new"]);
    assert_eq!(std::fs::read(outside.join("precious")).unwrap(), b"p");
}

#[test]
fn a_server_whose_entries_failed_or_that_prunes_with_a_file_open_deletes_nothing() {
    for open_file in [false, true] {
        let env = Env::new();
        let dest = env.mkdir("dest");
        victim(&env, &dest);
        let before = tree(&dest);
        let (child, mut evil) = evil_get(&env, &["t"], &dest, &["-r", "--delete"]);
        evil.send(&make_dir(b"t", true));
        evil.made(b"t");
        if open_file {
            evil.put(0, b"t/half", b"", 100_000);
            assert!(matches!(evil.next(), Message::FileReady { .. }));
        } else {
            // Tops the client did not ask for, and the root itself: refused, so the session
            // is not whole.
            for p in [&b"keep"[..], b"."] {
                evil.send(&make_dir(p, true));
                assert!(matches!(evil.next(), Message::EntryFailed { .. }), "{p:?}");
            }
        }
        evil.send(&Message::Prune);
        let (named, c) = pruned(&mut evil);
        assert!(named.is_empty() && c.deleted == 0, "{named:?}");
        assert!(!c.refused.is_empty(), "{c:?}");
        evil.finish();
        let o = wait_output(child, 30);
        assert_ne!(o.status.code(), Some(0), "{}", both(&o));
        assert!(both(&o).contains("nothing deleted"), "{}", both(&o));
        assert_eq!(tree(&dest), before, "open file: {open_file}");
    }
}

#[test]
fn a_prune_the_client_did_not_ask_for_is_refused_and_deletes_nothing() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    victim(&env, &dest);
    let before = tree(&dest);
    let (child, mut evil) = evil_get(&env, &["t"], &dest, &["-r"]);
    evil.send(&make_dir(b"t", true));
    evil.made(b"t");
    evil.send(&Message::Prune);
    evil.finish();
    let o = wait_output(child, 30);
    assert_ne!(o.status.code(), Some(0), "{}", both(&o));
    assert!(
        both(&o).contains("did not ask for --delete"),
        "{}",
        both(&o)
    );
    assert_eq!(tree(&dest), before);
}

#[test]
fn a_server_that_never_prunes_cannot_make_a_delete_look_done() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    victim(&env, &dest);
    let (child, mut evil) = evil_get(&env, &["t"], &dest, &["-r", "--delete"]);
    evil.send(&make_dir(b"t", true));
    evil.made(b"t");
    evil.finish();
    let o = wait_output(child, 30);
    assert_ne!(o.status.code(), Some(0), "{}", both(&o));
    assert!(both(&o).contains("nothing deleted"), "{}", both(&o));
    assert!(dest.join("t/stale").exists());
}

/// A push client with the `read-write-delete` key, against a real server.
fn delete_server(env: &Env, root: &Path) -> ServerProc {
    ServerProc::start(root, &env.key, &["--allow-delete"])
}

fn push_open(delete: DeleteMode) -> Open {
    Open {
        recursive: true,
        delete,
        ..base_open(false)
    }
}

#[test]
fn a_client_prunes_only_beneath_its_tops_and_nothing_after_it_pruned() {
    let env = Env::new();
    let root = env.mkdir("root");
    let outside = victim(&env, &root);
    let srv = delete_server(&env, &root);
    let mut raw = Raw::opened(srv.port, env.psk(), push_open(DeleteMode::Delete));
    // A directory made to hold sources is not a top: its other entries are not pruned.
    raw.send(&make_dir(b"t", false));
    assert!(matches!(raw.recv().unwrap(), Message::EntryDone { .. }));
    raw.send(&make_dir(b"t/old", true));
    assert!(matches!(raw.recv().unwrap(), Message::EntryDone { .. }));
    raw.send(&Message::Prune);
    let mut named = Vec::new();
    let c = loop {
        match raw.recv().unwrap() {
            Message::Deleted { path, .. } => named.push(path),
            Message::Pruned(c) if c.end => break c,
            Message::Pruned(_) => {}
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(named, [&b"t/old/x"[..]]);
    assert_eq!(c.deleted, 1);
    // Nothing more may be announced once it pruned.
    raw.send(&make_dir(b"t/later", false));
    let m = raw.recv();
    assert!(matches!(&m, Ok(Message::Error { .. }) | Err(_)), "{m:?}");
    drop(raw);
    assert!(srv.wait_log("after Prune", 10), "{}", srv.log());
    assert_eq!(tree(&root), ["keep", "t", "t/link", "t/old", "t/stale"]);
    assert!(outside.join("precious").exists());
}

#[test]
fn a_client_that_did_not_open_with_delete_cannot_prune() {
    let env = Env::new();
    let root = env.mkdir("root");
    victim(&env, &root);
    let before = tree(&root);
    let srv = delete_server(&env, &root);
    let mut raw = Raw::opened(srv.port, env.psk(), push_open(DeleteMode::Off));
    raw.send(&make_dir(b"t", true));
    assert!(matches!(raw.recv().unwrap(), Message::EntryDone { .. }));
    raw.send(&Message::Prune);
    let m = raw.recv();
    assert!(matches!(&m, Ok(Message::Error { .. }) | Err(_)), "{m:?}");
    drop(raw);
    assert!(
        srv.wait_log("did not ask for --delete", 10),
        "{}",
        srv.log()
    );
    assert_eq!(tree(&root), before);
}

#[test]
fn a_server_cannot_move_where_the_filters_start_by_marking_a_deeper_top() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    std::fs::create_dir_all(dest.join("app/conf")).unwrap();
    std::fs::write(dest.join("app/conf/local.yaml"), b"mine").unwrap();
    std::fs::write(dest.join("app/conf/stale"), b"s").unwrap();
    let flags = ["-r", "--delete", "--exclude", "/conf/local.yaml"];
    let (child, mut evil) = evil_get(&env, &["app"], &dest, &flags);
    evil.send(&make_dir(b"app", true));
    evil.made(b"app");
    // Were `app/conf` a top, the anchored rule would be matched from it, and miss.
    evil.send(&make_dir(b"app/conf", true));
    evil.made(b"app/conf");
    evil.send(&Message::Prune);
    let (named, _) = pruned(&mut evil);
    assert_eq!(named, [&b"app/conf/stale"[..]]);
    evil.finish();
    let o = wait_output(child, 30);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(
        std::fs::read(dest.join("app/conf/local.yaml")).unwrap(),
        b"mine"
    );
}

#[test]
fn a_server_that_sends_a_tree_without_marking_it_deletes_nothing_and_fails() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    victim(&env, &dest);
    let (child, mut evil) = evil_get(&env, &["t"], &dest, &["-r", "--delete"]);
    // A file into the requested directory, which the server never made a tree's top.
    assert!(matches!(
        evil.send_file(0, b"t/new", b"new bytes"),
        Message::FileCommitted { .. }
    ));
    evil.send(&Message::Prune);
    let (named, c) = pruned(&mut evil);
    assert!(named.is_empty() && !c.refused.is_empty(), "{c:?}");
    evil.finish();
    let o = wait_output(child, 30);
    assert_ne!(o.status.code(), Some(0), "{}", both(&o));
    assert!(both(&o).contains("did not mark"), "{}", both(&o));
    assert!(dest.join("t/stale").exists() && dest.join("t/old/x").exists());
}
