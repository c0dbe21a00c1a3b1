//! `--exclude` / `--include` / `--exclude-from`: rsync's tree filters, applied by the sender's
//! walk (the client in a push, the server in a get), first matching rule deciding, in
//! command-line order. What they leave out is neither sent, nor counted in the plan, nor made
//! on the receiver.

use std::path::{Path, PathBuf};

use crate::util::*;

/// A tree `t`: a.fits, a.tmp, cache/c.fits, sub/b.fits, sub/b.txt, sub/deep/cache (a file),
/// build/x.
fn tree_of(env: &Env) -> PathBuf {
    let t = env.mkdir("t");
    for d in ["cache", "sub/deep", "build"] {
        std::fs::create_dir_all(t.join(d)).unwrap();
    }
    for (f, n) in [
        ("a.fits", 100),
        ("a.tmp", 10),
        ("cache/c.fits", 20),
        ("sub/b.fits", 30),
        ("sub/b.txt", 40),
        ("sub/deep/cache", 50),
        ("build/x", 60),
    ] {
        std::fs::write(t.join(f), vec![b'x'; n]).unwrap();
    }
    t
}

fn files(dir: &Path) -> Vec<String> {
    tree_paths(dir)
        .into_iter()
        .filter(|p| dir.join(p).is_file())
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn a_push_leaves_out_what_the_rules_exclude() {
    let env = Env::new();
    let root = env.mkdir("root");
    let t = tree_of(&env);
    let srv = ServerProc::start(&root, &env.key, &[]);
    // `cache/` is a directory rule: the file sub/deep/cache is still sent. `/build` is
    // anchored at the copied directory.
    let flags = [
        "-r",
        "--exclude",
        "*.tmp",
        "--exclude",
        "cache/",
        "--exclude",
        "/build",
    ];
    let (o, v) = send_json(srv.port, &env.key, &t, "up/", &flags, 30);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(
        files(&root.join("up/t")),
        ["a.fits", "sub/b.fits", "sub/b.txt", "sub/deep/cache"]
    );
    assert!(!root.join("up/t/cache").exists() && !root.join("up/t/build").exists());
    assert_eq!(v["end"]["files"]["committed"], 4, "{v}");
    assert_eq!(v["end"]["sum"]["bytes"], 100 + 30 + 40 + 50, "{v}");
}

#[test]
fn a_get_is_filtered_by_the_servers_walk_first_rule_deciding() {
    let env = Env::new();
    let root = env.mkdir("root");
    let t = tree_of(&env);
    std::fs::rename(&t, root.join("t")).unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    // rsync's idiom for "only *.fits": directories kept so the walk reaches them.
    let dest = env.mkdir("dest");
    let only_fits = [
        "-r",
        "--include",
        "*.fits",
        "--include",
        "*/",
        "--exclude",
        "*",
    ];
    let (o, v) = get_json(srv.port, &env.key, "t", &dest, &only_fits, 30);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(
        files(&dest.join("t")),
        ["a.fits", "cache/c.fits", "sub/b.fits"]
    );
    assert_eq!(v["end"]["files"]["committed"], 3, "{v}");
    // The same rules in another order mean something else: `*` first excludes everything.
    let dest = env.mkdir("dest2");
    let flags = ["-r", "--exclude", "*", "--include", "*.fits"];
    let (o, _) = get_json(srv.port, &env.key, "t", &dest, &flags, 30);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(files(&dest.join("t")), Vec::<String>::new());
}

#[test]
fn rules_come_from_files_in_order_with_comments_and_includes() {
    let env = Env::new();
    let root = env.mkdir("root");
    let t = tree_of(&env);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let list = env.path("rules");
    std::fs::write(
        &list,
        "# scratch files\n\n+ sub/b.txt\n; comment\n*.txt\n*.tmp\r\n/build/\n",
    )
    .unwrap();
    let flags = [
        "-r",
        "--exclude-from",
        list.to_str().unwrap(),
        "--exclude",
        "cache",
    ];
    let (o, _) = send_json(srv.port, &env.key, &t, "up/", &flags, 30);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(
        files(&root.join("up/t")),
        ["a.fits", "sub/b.fits", "sub/b.txt"]
    );
}

#[test]
fn a_bad_rule_or_rules_file_is_a_usage_error_before_connecting() {
    let env = Env::new();
    let t = tree_of(&env);
    // No server: a usage error must come before any connection is tried.
    let port = free_port();
    for (flags, says) in [
        (vec!["--exclude", "{a,b"], "exclude pattern \"{a,b\""),
        (vec!["--include", "/"], "matches nothing"),
        (
            vec!["--exclude-from", "/nonexistent/rules"],
            "--exclude-from /nonexistent/rules",
        ),
    ] {
        let mut args = vec!["-r"];
        args.extend(flags);
        let o = run(send_cmd(port, &env.key, &t, "up/", &args), 30);
        assert_eq!(o.status.code(), Some(2), "{}", both(&o));
        assert!(text(&o.stderr).contains(says), "{says}: {}", both(&o));
        assert!(!text(&o.stderr).contains("connect"), "{}", both(&o));
        let dest = env.path("never");
        let mut c = zcp();
        c.args(["get", "-p", &port.to_string(), "--key-file"])
            .arg(&env.key)
            .args(&args)
            .arg("127.0.0.1::t")
            .arg(&dest);
        let o = run(c, 30);
        assert_eq!(o.status.code(), Some(2), "{}", both(&o));
        assert!(!dest.exists());
    }
}

/// A hostile client's rules: in a push (where only the client walks), malformed, or over the
/// bounds. Each is refused by name before anything opens, control characters escaped, and
/// the server serves on.
#[test]
fn a_servers_walk_takes_only_well_formed_rules_in_a_pull() {
    use zcp_wire::{ErrorCode, Message, Open};
    let env = Env::new();
    let root = env.mkdir("root");
    let mut srv = ServerProc::start(&root, &env.key, &[]);
    let refused = |open: Open, code: ErrorCode, says: &str| {
        let mut raw = Raw::authenticate(srv.port, env.psk());
        raw.send(&Message::Open(Box::new(open)));
        match raw.recv() {
            Ok(Message::Error { code: c, message }) => {
                assert_eq!(c, code, "{message}");
                assert!(message.contains(says), "{says}: {message}");
                assert!(!message.contains('\u{1b}'), "{message}");
            }
            other => panic!("expected Error, got {other:?}"),
        }
    };
    let push = Open {
        filters: vec!["- *.tmp".into()],
        ..base_open(false)
    };
    refused(push, ErrorCode::Protocol, "filter rules in a push");
    let bad = |rules: Vec<String>| Open {
        filters: rules,
        recursive: true,
        ..base_open(true)
    };
    refused(
        bad(vec!["* x\u{1b}[2J".into()]),
        ErrorCode::Protocol,
        "neither",
    );
    refused(
        bad(vec!["- [ab".into()]),
        ErrorCode::Protocol,
        "exclude pattern",
    );
    let many = vec![format!("- {}", "a".repeat(1000)); 40];
    refused(bad(many), ErrorCode::Limit, "bytes together");
    assert!(tree(&root).is_empty(), "{:?}", tree(&root));
    assert!(srv.alive());
}
