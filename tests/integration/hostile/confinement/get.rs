//! Confinement against `zcp get`: a malicious server writes only what was asked for, beneath
//! the destination, under the requested names; it cannot turn a name into a link or a
//! directory of its choosing, climb out with `..`, links or spellings, replace the user's
//! files, FIFOs or directories, or change a file outside the destination through a hard link.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use zcp_wire::{ErrorCode, Message};

use crate::hostile::peer::*;
use crate::util::*;

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
            top: false,
        },
        Message::MakeDir {
            path: b".".to_vec(),
            top: false,
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
            top: false,
        });
        evil.made(path);
    }
    for path in [&b"run42x"[..], b"private/sub"] {
        evil.send(&Message::MakeDir {
            path: path.to_vec(),
            top: false,
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
    evil.made(b"run42");
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
    let dest = victim_dest(&env);
    std::fs::write(dest.join("notes.txt"), b"mine").unwrap();
    std::fs::set_permissions(
        dest.join("notes.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    mkfifo(&dest.join("pipe"));
    let (child, mut evil) = evil_get(&env, &["notes.txt", "fresh", "pipe"], &dest, &[]);
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
                top: false,
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
    let (child, mut evil) = evil_get(&env, &["run42"], &dest, &["-r"]);
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
fn escapes_planted_links_and_replays_from_a_server_are_refused() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let outside = env.mkdir("outside");
    std::fs::write(outside.join("victim"), b"original").unwrap();
    // A link planted where the requested file goes: never followed, never replaced.
    std::os::unix::fs::symlink(outside.join("victim"), dest.join("want.txt")).unwrap();
    let (child, mut evil) = evil_get(&env, &["want.txt", "tree"], &dest, &["-r"]);
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
        top: false,
    });
    evil.made(b"tree");
    evil.send(&Message::MakeLink {
        path: b"tree/out".to_vec(),
        target: outside.to_str().unwrap().as_bytes().to_vec(),
    });
    evil.made(b"tree/out");
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

/// Path spellings for a lone requested file (no -r): only the exact name, normalized, lands.
#[test]
fn pull_path_spellings_and_lookalikes() {
    let env = Env::new();
    let dest = victim_dest(&env);
    let (child, mut evil) = evil_get(&env, &["want.txt"], &dest, &[]);
    let spellings: [&[u8]; 12] = [
        b"want.txt/",
        b"want.txt/.",
        b"want.txt//x",
        b"./want.txt/../keep.txt",
        b"want.txt.",
        b"WANT.TXT",
        "want.txt\u{200b}".as_bytes(),
        "w\u{0430}nt.txt".as_bytes(),
        b"want.txt\xff",
        b".",
        b"./",
        b".//.",
    ];
    for (i, d) in spellings.iter().enumerate() {
        evil.put(10 + i as u32, d, b"", 5);
        match evil.next() {
            Message::FileFailed { .. } => {}
            other => panic!("GOT THROUGH: {d:?} answered {other:?}"),
        }
    }
    for m in [
        Message::MakeDir {
            path: b"./want.txt/".to_vec(),
            top: false,
        },
        Message::MakeLink {
            path: b"./want.txt/x".to_vec(),
            target: b"/".to_vec(),
        },
        Message::MakeLink {
            path: b"keep.txt".to_vec(),
            target: b"/".to_vec(),
        },
        Message::DirTimes {
            path: b"./".to_vec(),
            mode: 0o777,
            mtime_sec: 0,
            mtime_nsec: 0,
        },
    ] {
        evil.send(&m);
        match evil.next() {
            Message::EntryFailed { .. } => {}
            other => panic!("GOT THROUGH: {m:?} answered {other:?}"),
        }
    }
    // A normalised spelling of the requested name is the requested name.
    let a = evil.send_file(40, b"./want.txt", b"hello");
    eprintln!("./want.txt: {a:?}");
    evil.finish();
    let o = wait_output(child, 30);
    assert_ne!(o.status.code(), Some(0));
    no_control_bytes(&o);
    assert_eq!(
        tree(&dest),
        vec!["keep.txt", "private", "want.txt"],
        "{}",
        both(&o)
    );
    assert_eq!(mode(&dest), 0o750);
    assert_eq!(
        std::fs::read(dest.join("keep.txt")).unwrap(),
        b"secret key material"
    );
}

/// The user's FIFO (or socket) at a requested name: a link of the server's choosing must not
/// replace it any more than it may replace a regular file.
#[test]
fn pull_link_never_replaces_the_users_fifo() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let fifo = dest.join("want.pipe");
    mkfifo(&fifo);
    let (child, mut evil) = evil_get(&env, &["want.pipe"], &dest, &[]);
    evil.send(&Message::MakeLink {
        path: b"want.pipe".to_vec(),
        target: b"/etc/passwd".to_vec(),
    });
    evil.finish();
    let o = wait_output(child, 30);
    let ft = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    eprintln!("exit {:?}: {}", o.status.code(), both(&o));
    assert!(
        !ft.is_symlink(),
        "GOT THROUGH: the user's FIFO want.pipe was replaced by a link to /etc/passwd (exit {:?})",
        o.status.code()
    );
}

/// The same against `zcp get`: the user's `dest/want.bin` is a hard link of their private
/// `keys/id.bin` (0600; say, a `cp -al` snapshot). A malicious server announces `want.bin`
/// with the size of the user's file, keeps every chunk the client offers (`Go{keep}`, never
/// having seen the bytes) and sends the digest over the client's own MACs: the client
/// "commits" in place, and the private file elsewhere becomes 0755 with the server's mtime.
/// A real replacement would rename a new file over `want.bin` and leave the other name alone.
/// SAFE: the file outside the destination keeps its mode and mtime.
#[test]
fn pull_in_place_keep_chmods_the_users_hard_linked_file() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let keys = env.mkdir("keys");
    let private = keys.join("id.bin");
    let body: Vec<u8> = (0..150_000u32).map(|i| (i % 239) as u8).collect();
    hard_linked(&private, &body, &dest.join("want.bin"));
    // The announced mtime: in a pull only an unchanged file is offered, so the link count
    // alone decides here.
    set_mtime(&private, 1_000_000);
    let before = std::fs::metadata(&private).unwrap();
    let (child, mut evil) = evil_get(&env, &["want.bin"], &dest, &[]);
    let size = body.len() as u64;
    evil.put(0, b"want.bin", b"", size);
    let mut macs = vec![None; 3];
    let offered = loop {
        match evil.next() {
            Message::Have(h) => {
                for (i, mac) in h.entries {
                    macs[i as usize] = Some(mac);
                }
            }
            Message::FileReady { resumed, .. } => break resumed,
            other => panic!("{other:?}"),
        }
    };
    // Fixed: a file with other hard links is not offered in place at all.
    if offered {
        evil.send(&Message::Go {
            file_id: 0,
            restart: false,
        });
        let digest = evil.digest(0, size, &all_offered(&macs));
        evil.send(&Message::FileEnd { file_id: 0, digest });
    } else {
        evil.send(&Message::FileAbort {
            file_id: 0,
            code: zcp_wire::ErrorCode::Io,
            message: "not offered".into(),
        });
    }
    let answer = offered.then(|| evil.next());
    evil.finish();
    let o = wait_output(child, 20);
    let after = std::fs::metadata(&private).unwrap();
    println!(
        "answer {answer:?}; get exit {:?}; private file mode {:o} -> {:o}, mtime {} -> {}",
        o.status.code(),
        before.mode() & 0o7777,
        after.mode() & 0o7777,
        before.mtime(),
        after.mtime()
    );
    assert_eq!(std::fs::read(&private).unwrap(), body);
    assert!(
        after.mode() & 0o7777 == 0o600 && after.mtime() == before.mtime(),
        "GOT THROUGH: the user's private file outside the destination (hard-linked into it) \
         went from mode {:o} to {:o}, mtime {}, by a server that never sent a byte",
        before.mode() & 0o7777,
        after.mode() & 0o7777,
        after.mtime()
    );
}

#[test]
fn a_server_that_ignores_the_filter_is_refused_what_it_excludes() {
    let env = Env::new();
    let dest = victim_dest(&env);
    let flags = ["-r", "--exclude", "*.secret", "--exclude", "cache/"];
    let (child, mut evil) = evil_get(&env, &["data/run42"], &dest, &flags);
    assert_eq!(evil.filters, ["- *.secret", "- cache/"]);
    for path in [&b"run42"[..], b"run42/sub"] {
        evil.send(&Message::MakeDir {
            path: path.to_vec(),
            top: false,
        });
        evil.made(path);
    }
    assert!(matches!(
        evil.send_file(1, b"run42/sub/a.bin", &[7u8; 1000]),
        Message::FileCommitted { .. }
    ));
    // What the rules leave out, sent anyway: a file, a directory, a file in an excluded
    // directory the server never announced, and a link.
    evil.put(2, b"run42/sub/x.secret", b"", 3);
    assert!(matches!(evil.next(), Message::FileFailed { .. }));
    evil.send(&Message::MakeDir {
        path: b"run42/cache".to_vec(),
        top: false,
    });
    assert!(matches!(evil.next(), Message::EntryFailed { .. }));
    evil.put(3, b"run42/cache/y.bin", b"", 3);
    assert!(matches!(evil.next(), Message::FileFailed { .. }));
    evil.send(&Message::MakeLink {
        path: b"run42/k.secret".to_vec(),
        target: b"/etc/passwd".to_vec(),
    });
    assert!(matches!(evil.next(), Message::EntryFailed { .. }));
    evil.finish();
    let o = wait_output(child, 30);
    assert_eq!(o.status.code(), Some(23), "{}", both(&o));
    assert!(
        text(&o.stderr).contains("the filter excludes"),
        "{}",
        both(&o)
    );
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
}
