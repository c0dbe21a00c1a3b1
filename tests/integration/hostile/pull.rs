//! A malicious server that holds the key, against `zcp get`.

use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use zcp_wire::{ErrorCode, Message};

use super::harness::*;
use crate::util::*;

#[test]
fn a_benign_pull_through_the_harness_stores_the_file() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let (child, mut evil) = evil_get(&env, &["want.txt"], &dest.join("got.txt"), &[]);
    assert_eq!(evil.gets, vec![(b"want.txt".to_vec(), b"got.txt".to_vec())]);
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    assert!(matches!(
        evil.send_file(0, b"got.txt", &body),
        Message::FileCommitted { verified: true, .. }
    ));
    evil.finish();
    let o = wait_output(child, 30);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(std::fs::read(dest.join("got.txt")).unwrap(), body);
    assert_eq!(mode(&dest.join("got.txt")), 0o755, "setuid dropped");
    assert_eq!(tree(&dest), vec!["got.txt"]);
}

#[test]
fn get_writes_only_what_it_asked_for() {
    let env = Env::new();
    let dest = victim_dest(&env);
    let (priv_mtime, dest_mtime) = (mtime(&dest.join("private")), mtime(&dest));
    let (child, mut evil) = evil_get(&env, &["want.txt"], &dest, &[]);
    assert_eq!(
        evil.gets,
        vec![(b"want.txt".to_vec(), b"want.txt".to_vec())]
    );
    // Files the client never asked for, and a lone file redirected under a name of the
    // server's choosing.
    let planted: [(&[u8], &[u8]); 6] = [
        (b".ssh/authorized_keys", b""),
        (b"other.txt", b""),
        (b"want.txt/x", b""),
        (b"private/x", b""),
        (b"esc\x1b[31mape", b""),
        (b"want.txt", b"planted"),
    ];
    for (i, (d, n)) in planted.iter().enumerate() {
        evil.put(10 + i as u32, d, n, 5);
        match evil.next() {
            Message::FileFailed { code, message, .. } => {
                assert_eq!(code, ErrorCode::BadPath, "{d:?}: {message}");
            }
            other => panic!("{d:?}: expected FileFailed, got {other:?}"),
        }
    }
    // The existing, unrequested file: no Have (no oracle), and nothing changes.
    evil.put(20, b"keep.txt", b"", 19);
    assert!(matches!(evil.next(), Message::FileFailed { .. }));
    // Links, directories and times outside what was asked for, and on the root itself.
    for m in [
        Message::MakeLink {
            path: b"evil".to_vec(),
            target: b"/etc/passwd".to_vec(),
        },
        Message::MakeDir {
            path: b"newdir".to_vec(),
        },
        Message::MakeDir {
            path: b".".to_vec(),
        },
        Message::DirTimes {
            path: b".".to_vec(),
            mode: 0o777,
            mtime_sec: 0,
            mtime_nsec: 0,
        },
        Message::DirTimes {
            path: b"private/".to_vec(),
            mode: 0o777,
            mtime_sec: 0,
            mtime_nsec: 0,
        },
    ] {
        evil.send(&m);
        assert!(matches!(evil.next(), Message::EntryFailed { .. }), "{m:?}");
    }
    let body = b"the file that was asked for".to_vec();
    assert!(matches!(
        evil.send_file(21, b"want.txt", &body),
        Message::FileCommitted { .. }
    ));
    evil.finish();
    let o = wait_output(child, 30);
    // Some entries arrived and others did not: partial.
    assert_eq!(o.status.code(), Some(23), "{}", both(&o));
    assert!(both(&o).contains("not asked for"), "{}", both(&o));
    assert!(both(&o).contains("esc\\u{1b}[31mape"), "{}", both(&o));
    no_control_bytes(&o);
    assert_eq!(tree(&dest), vec!["keep.txt", "private", "want.txt"]);
    assert_eq!(std::fs::read(dest.join("want.txt")).unwrap(), body);
    assert_eq!(
        std::fs::read(dest.join("keep.txt")).unwrap(),
        b"secret key material"
    );
    assert_eq!(mode(&dest.join("keep.txt")), 0o600);
    assert_eq!(mode(&dest.join("private")), 0o700);
    assert_eq!(mtime(&dest.join("private")), priv_mtime);
    assert_eq!(mode(&dest), 0o750);
    assert!(mtime(&dest) >= dest_mtime);
}

#[test]
fn get_r_accepts_only_entries_beneath_the_requested_directory() {
    let env = Env::new();
    let dest = victim_dest(&env);
    let (child, mut evil) = evil_get(&env, &["data/run42"], &dest, &["-r"]);
    assert_eq!(evil.gets[0].1, b"run42");
    for path in [&b"run42"[..], b"run42/sub"] {
        evil.send(&Message::MakeDir {
            path: path.to_vec(),
        });
    }
    for path in [&b"run42x"[..], b"private/sub"] {
        evil.send(&Message::MakeDir {
            path: path.to_vec(),
        });
        assert!(
            matches!(evil.next(), Message::EntryFailed { .. }),
            "{path:?}"
        );
    }
    assert!(matches!(
        evil.send_file(1, b"run42/sub/a.bin", &[7u8; 70_000]),
        Message::FileCommitted { .. }
    ));
    evil.put(2, b"run42x/b.bin", b"", 3);
    assert!(matches!(evil.next(), Message::FileFailed { .. }));
    // Times with special bits on a directory it made: permission bits only.
    evil.send(&Message::DirTimes {
        path: b"run42".to_vec(),
        mode: 0o7777,
        mtime_sec: 1_000_000,
        mtime_nsec: 0,
    });
    evil.send(&Message::DirTimes {
        path: b"private".to_vec(),
        mode: 0o777,
        mtime_sec: 0,
        mtime_nsec: 0,
    });
    assert!(matches!(evil.next(), Message::EntryFailed { .. }));
    evil.finish();
    let o = wait_output(child, 30);
    assert_eq!(o.status.code(), Some(23), "{}", both(&o));
    assert_eq!(
        tree(&dest),
        vec![
            "keep.txt",
            "private",
            "run42",
            "run42/sub",
            "run42/sub/a.bin"
        ]
    );
    assert_eq!(
        mode(&dest.join("run42")),
        0o777,
        "no setuid, setgid or sticky"
    );
    assert_eq!(mode(&dest.join("private")), 0o700);
}

#[test]
fn a_requested_name_never_becomes_a_link_or_a_directory_of_the_servers_choosing() {
    // Without -r: the user's existing file is neither swapped for a link nor for a directory,
    // nor given directory times. A link where nothing is (the remote path is a link) comes.
    let env = Env::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let dest = victim_dest(&env);
    std::fs::write(dest.join("notes.txt"), b"mine").unwrap();
    std::fs::set_permissions(
        dest.join("notes.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    mkfifo(&dest.join("pipe"));
    let port = l.local_addr().unwrap().port();
    let child = get(port, &env.key, &["notes.txt", "fresh", "pipe"], &dest, &[]);
    let mut evil = Evil::accept(&l, &env.psk(), None);
    for (m, why) in [
        (
            Message::MakeLink {
                path: b"notes.txt".to_vec(),
                target: b"/etc/passwd".to_vec(),
            },
            "your file 'notes.txt' is; nothing of yours is replaced by a link",
        ),
        (
            Message::MakeDir {
                path: b"notes.txt".to_vec(),
            },
            "without -r",
        ),
        (
            Message::DirTimes {
                path: b"notes.txt".to_vec(),
                mode: 0o777,
                mtime_sec: 0,
                mtime_nsec: 0,
            },
            "without -r",
        ),
    ] {
        evil.send(&m);
        match evil.next() {
            Message::EntryFailed { message, .. } => {
                assert!(message.contains(why), "{m:?}: {message}")
            }
            other => panic!("{m:?}: expected EntryFailed, got {other:?}"),
        }
    }
    evil.send(&Message::MakeLink {
        path: b"pipe".to_vec(),
        target: b"/etc/passwd".to_vec(),
    });
    match evil.next() {
        Message::EntryFailed { message, .. } => assert!(message.contains("FIFO"), "{message}"),
        other => panic!("expected EntryFailed, got {other:?}"),
    }
    evil.send(&Message::MakeLink {
        path: b"fresh".to_vec(),
        target: b"elsewhere".to_vec(),
    });
    evil.finish();
    let o = wait_output(child, 30);
    assert_eq!(o.status.code(), Some(23), "{}", both(&o));
    let meta = std::fs::symlink_metadata(dest.join("notes.txt")).unwrap();
    assert!(meta.file_type().is_file());
    assert_eq!(std::fs::read(dest.join("notes.txt")).unwrap(), b"mine");
    assert_eq!(mode(&dest.join("notes.txt")), 0o600);
    assert_eq!(
        std::fs::read_link(dest.join("fresh")).unwrap(),
        Path::new("elsewhere")
    );
    use std::os::unix::fs::FileTypeExt;
    let pipe = std::fs::symlink_metadata(dest.join("pipe")).unwrap();
    assert!(pipe.file_type().is_fifo(), "the FIFO is still there");

    // With -r: the requested directory is not replaced by a link either.
    let dest = env.mkdir("dest-r");
    std::fs::create_dir(dest.join("run42")).unwrap();
    let child = get(port, &env.key, &["run42"], &dest, &["-r"]);
    let mut evil = Evil::accept(&l, &env.psk(), None);
    evil.send(&Message::MakeLink {
        path: b"run42".to_vec(),
        target: b"/".to_vec(),
    });
    match evil.next() {
        Message::EntryFailed { message, .. } => {
            assert!(message.contains("directory"), "{message}")
        }
        other => panic!("expected EntryFailed, got {other:?}"),
    }
    evil.finish();
    let o = wait_output(child, 30);
    assert_ne!(o.status.code(), Some(0), "{}", both(&o));
    assert!(
        std::fs::symlink_metadata(dest.join("run42"))
            .unwrap()
            .is_dir()
    );
    assert_eq!(tree(&dest), ["run42"]);
}

#[test]
fn texts_from_a_hostile_server_never_reach_the_terminal_raw() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let (child, mut evil) = evil_get(&env, &["f"], &dest, &[]);
    let nasty = "\x1b[2J\x07\rzcp: get: done\nzcp: forged line";
    evil.send(&Message::Notice {
        message: nasty.into(),
    });
    evil.send(&Message::EntryFailed {
        path: b"\x1b]0;title\x07".to_vec(),
        code: ErrorCode::Io,
        message: nasty.into(),
    });
    evil.send(&Message::Error {
        code: ErrorCode::Internal,
        message: nasty.into(),
    });
    let o = wait_output(child, 30);
    assert_ne!(o.status.code(), Some(0), "{}", both(&o));
    no_control_bytes(&o);
    assert!(!text(&o.stderr).contains("\nzcp: forged"), "{}", both(&o));
    assert!(both(&o).contains("\\u{1b}[2J"), "{}", both(&o));
    assert_eq!(tree(&dest), Vec::<String>::new());
}

#[test]
fn more_streams_than_asked_for_opens_none() {
    let env = Env::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let dest = env.mkdir("dest");
    let child = get(
        l.local_addr().unwrap().port(),
        &env.key,
        &["f"],
        &dest,
        &["-P", "1"],
    );
    let evil = Evil::accept(&l, &env.psk(), Some(200));
    assert_eq!(evil.joined, 0, "the client opened data connections");
    let o = wait_output(child, 30);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(
        both(&o).contains("more than the 1 asked for"),
        "{}",
        both(&o)
    );
}

#[test]
fn chatter_does_not_keep_a_pull_alive() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let t = Instant::now();
    let (child, mut evil) = evil_get(&env, &["f"], &dest, &["--idle-timeout", "2"]);
    evil.put(0, b"f", b"", 1 << 20);
    assert!(matches!(evil.next(), Message::FileReady { .. }));
    // Notices forever (bounded here: until the client is gone, or 15 s), never a byte.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let chatter = {
        let done = done.clone();
        std::thread::spawn(move || {
            for _ in 0..150 {
                if done.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                evil.send(&Message::Notice {
                    message: "still here".into(),
                });
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let o = wait_output(child, 30);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    chatter.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(both(&o).contains("no progress"), "{}", both(&o));
    assert!(t.elapsed() < Duration::from_secs(9), "{:?}", t.elapsed());
    assert!(no_partials(&dest, 5));
}

#[test]
fn escapes_planted_links_and_replays_from_a_server_are_refused() {
    let env = Env::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let dest = env.mkdir("dest");
    let outside = env.mkdir("outside");
    std::fs::write(outside.join("victim"), b"original").unwrap();
    // A link planted where the requested file goes: never followed, never replaced.
    std::os::unix::fs::symlink(outside.join("victim"), dest.join("want.txt")).unwrap();
    let child = get(
        l.local_addr().unwrap().port(),
        &env.key,
        &["want.txt", "tree"],
        &dest,
        &["-r"],
    );
    let mut evil = Evil::accept(&l, &env.psk(), None);
    for (i, d) in [
        &b"../escape"[..],
        b"/etc/zcp-evil",
        b"tree/../../x",
        b"want.txt",
    ]
    .iter()
    .enumerate()
    {
        evil.put(i as u32, d, b"", 8);
        assert!(matches!(evil.next(), Message::FileFailed { .. }), "{d:?}");
    }
    evil.send(&Message::MakeLink {
        path: b"../link".to_vec(),
        target: b"/".to_vec(),
    });
    assert!(matches!(evil.next(), Message::EntryFailed { .. }));
    // A link inside the requested tree, then a file through it: the link is stored as a
    // link, the file through it is refused.
    evil.send(&Message::MakeDir {
        path: b"tree".to_vec(),
    });
    evil.send(&Message::MakeLink {
        path: b"tree/out".to_vec(),
        target: outside.to_str().unwrap().as_bytes().to_vec(),
    });
    evil.put(10, b"tree/out/victim", b"", 8);
    assert!(matches!(evil.next(), Message::FileFailed { .. }));
    // A sealed frame sent twice: the replay ends the session.
    let frame = evil.est.sealer.seal(&Message::Notice {
        message: "once".into(),
    });
    evil.s.write_all(&frame).unwrap();
    evil.s.write_all(&frame).unwrap();
    let o = wait_output(child, 30);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"original");
    assert_eq!(tree(&outside), vec!["victim"]);
    assert!(
        std::fs::symlink_metadata(dest.join("want.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        std::fs::symlink_metadata(dest.join("tree/out"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(tree(&dest), vec!["tree", "tree/out", "want.txt"]);
    assert!(!env.dir.path().join("escape").exists());
    assert!(!Path::new("/etc/zcp-evil").exists());
}
