//! Confinement against `zcp serve`: a malicious client writes only beneath the root and
//! never through a link; it cannot chmod or re-time the root, widen an existing directory
//! or clear its sticky and setgid bits, pass an existing directory off as one it made, swap
//! zcp's part file or journal for a link, or change a file outside the root through a hard
//! link kept in place.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use zcp_wire::{ChunkHeader, ErrorCode, Message, PutFile};

use crate::hostile::peer::*;
use crate::util::*;

#[test]
fn a_hostile_client_can_neither_chmod_the_root_nor_forge_log_lines_nor_idle_forever() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::create_dir(root.join("private")).unwrap();
    std::fs::create_dir(root.join("area")).unwrap();
    std::fs::set_permissions(root.join("private"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root_mtime = mtime(&root);
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "2"]);
    let (mut raw, _data) = raw_open(&srv, &env, false);
    let nasty = "\x1b[31mred\x07\r\nzcp: session 0000000000000000 finished: 9 files";
    for m in root_and_log_attacks(nasty) {
        raw.send(&m);
    }
    // Only chatter from here on: the session ends at the idle timeout all the same. The
    // same link again changes nothing, so it is chatter too.
    let t = Instant::now();
    let mut closed = false;
    let chatter = chatter();
    let mut turn = 0;
    while t.elapsed() < Duration::from_secs(10) {
        raw.send(&chatter[turn % chatter.len()]);
        turn += 1;
        raw.s
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        match raw.recv_any() {
            Ok(Message::Error { .. }) => {}
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    assert!(closed, "chatter kept the session open");
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    assert!(srv.wait_log("no progress", 5), "{}", srv.log());
    assert_eq!(mode(&root), 0o755);
    assert_eq!(mtime(&root), root_mtime);
    assert_eq!(mode(&root.join("private")), 0o700);
    let secs = |p: &Path| {
        mtime(p)
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    assert_eq!(secs(&root.join("private")), 1_000_000);
    assert_eq!(mode(&root.join("area/fresh")), 0o777);
    assert_eq!(secs(&root.join("area/fresh")), 1_000_000);
    assert_eq!(
        std::fs::read_link(root.join("area/l")).unwrap(),
        Path::new("t")
    );
    let log = srv.log();
    for b in ['\x1b', '\x07', '\r'] {
        assert!(!log.contains(b), "raw {b:?} in the log: {log:?}");
    }
    assert!(
        !log.lines()
            .any(|l| l.starts_with("zcp: session 0000000000000000")),
        "{log}"
    );
    assert!(log.contains("\\u{1b}[31mred"), "{log}");
    assert_eq!(tree(&root), vec!["area", "area/fresh", "area/l", "private"]);
}

/// Entries that name the root, a private directory, special mode bits, and text made to
/// forge log lines.
fn root_and_log_attacks(nasty: &str) -> Vec<Message> {
    vec![
        Message::DirTimes {
            path: b".".to_vec(),
            mode: 0o777,
            mtime_sec: 0,
            mtime_nsec: 0,
        },
        Message::DirTimes {
            path: b"private".to_vec(),
            mode: 0o7777,
            mtime_sec: 0,
            mtime_nsec: 0,
        },
        Message::MakeDir {
            path: b"./".to_vec(),
            top: false,
        },
        Message::MakeLink {
            path: b".".to_vec(),
            target: b"/".to_vec(),
        },
        Message::Notice {
            message: nasty.into(),
        },
        Message::EntryFailed {
            path: nasty.as_bytes().to_vec(),
            code: ErrorCode::Io,
            message: nasty.into(),
        },
        // Naming an existing directory first gives its times, never a wider mode.
        Message::MakeDir {
            path: b"private".to_vec(),
            top: false,
        },
        Message::DirTimes {
            path: b"private".to_vec(),
            mode: 0o777,
            mtime_sec: 1_000_000,
            mtime_nsec: 0,
        },
        // A directory the session made gets the sender's permission bits, no special bits.
        Message::MakeDir {
            path: b"area/fresh".to_vec(),
            top: false,
        },
        Message::DirTimes {
            path: b"area/fresh".to_vec(),
            mode: 0o4777,
            mtime_sec: 1_000_000,
            mtime_nsec: 0,
        },
        Message::MakeLink {
            path: b"area/l".to_vec(),
            target: b"t".to_vec(),
        },
    ]
}

/// Messages that change nothing: none of them may count as progress.
fn chatter() -> [Message; 5] {
    [
        Message::Notice {
            message: "chatter".into(),
        },
        Message::Finish,
        Message::EntryFailed {
            path: b"x".to_vec(),
            code: ErrorCode::Io,
            message: "again".into(),
        },
        Message::MakeLink {
            path: b"area/l".to_vec(),
            target: b"t".to_vec(),
        },
        Message::MakeDir {
            path: b"area/fresh".to_vec(),
            top: false,
        },
    ]
}

/// A client replaces the server's part file with a symlink pointing outside the root
/// (MakeLink on `.zcp-<k>.part`) while the file is open, then completes the file. The commit
/// renames the part *name* over the target: the "verified, stored" file becomes a link.
/// SAFE: the target is a regular file (or the file fails), never a link outside the root.
#[test]
fn push_part_file_swapped_for_a_link_before_commit() {
    let env = Env::new();
    let root = env.mkdir("root");
    let outside = env.mkdir("outside");
    std::fs::write(outside.join("victim"), b"original").unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::connect_with(srv.port, env.psk(), "auto", 1);
    let mut d = raw.data(srv.port, 0).unwrap();
    let body = vec![0x5au8; 1000];
    raw.send(&pf(0, b"t.bin", body.len() as u64, 65536));
    assert!(matches!(raw.recv().unwrap(), Message::FileReady { .. }));
    let part = part_in(&root);
    raw.send(&Message::MakeLink {
        path: part.clone().into_bytes(),
        target: outside.join("victim").to_str().unwrap().as_bytes().to_vec(),
    });
    std::thread::sleep(Duration::from_millis(300));
    let mac = push_chunk(&mut raw, &mut d, 0, &body, 0);
    let digest = raw.digest(0, body.len() as u64, &[mac]);
    raw.send(&Message::FileEnd { file_id: 0, digest });
    let answer = loop {
        match raw.recv_any().unwrap() {
            m @ (Message::FileCommitted { .. } | Message::FileFailed { .. }) => break m,
            Message::EntryFailed { message, .. } => eprintln!("entry failed: {message}"),
            _ => {}
        }
    };
    eprintln!(
        "answer {answer:?}; tree {:?}; log {}",
        tree(&root),
        srv.log()
    );
    let meta = std::fs::symlink_metadata(root.join("t.bin"));
    assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"original");
    if let Ok(m) = &meta {
        assert!(
            !m.file_type().is_symlink(),
            "GOT THROUGH: committed ({answer:?}) t.bin is a symlink -> {:?}",
            std::fs::read_link(root.join("t.bin"))
        );
    }
}

/// A symlink planted under the journal's name (pointing outside the root), then a file of
/// several chunks for that target: the journal is never written through the link.
#[test]
fn push_journal_name_planted_as_a_link_is_not_followed() {
    let env = Env::new();
    let root = env.mkdir("root");
    let outside = env.mkdir("outside");
    std::fs::write(outside.join("victim"), b"original").unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::connect_with(srv.port, env.psk(), "auto", 1);
    let mut data = raw.data(srv.port, 0).unwrap();
    raw.send(&pf(0, b"t.bin", 200_000, 65536));
    assert!(matches!(raw.recv().unwrap(), Message::FileReady { .. }));
    let part = part_in(&root);
    raw.send(&Message::FileAbort {
        file_id: 0,
        code: ErrorCode::Io,
        message: "x".into(),
    });
    std::thread::sleep(Duration::from_millis(200));
    for (n, name) in [part.replace(".part", ".journal"), part.clone()]
        .iter()
        .enumerate()
    {
        raw.send(&Message::MakeLink {
            path: name.clone().into_bytes(),
            target: outside.join("victim").to_str().unwrap().as_bytes().to_vec(),
        });
        match raw.recv().unwrap() {
            Message::EntryFailed { message, .. } => {
                assert!(message.contains("part files and journals"), "{message}")
            }
            other => panic!("GOT THROUGH: a link named {name}: {other:?}"),
        }
        let body: Vec<u8> = (0..200_000u32).map(|i| (i % 13) as u8).collect();
        let a = push_whole(&mut raw, &mut data, 1 + n as u32, b"t.bin", &body);
        assert!(matches!(a, Message::FileCommitted { .. }), "{name}: {a:?}");
        assert_eq!(std::fs::read(root.join("t.bin")).unwrap(), body);
    }
    assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"original");
    assert_eq!(
        std::fs::symlink_metadata(outside.join("victim"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o644
    );
    eprintln!("{:?} {}", tree(&root), srv.log());
}

/// A push mixing the sequencing games that must be refused; asserts the disk afterwards.
#[test]
fn push_sequencing_games_are_refused() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::create_dir(root.join("private")).unwrap();
    std::fs::set_permissions(root.join("private"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(root.join("private/key"), b"k").unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::connect_with(srv.port, env.psk(), "auto", 1);
    let mut data = raw.data(srv.port, 0).unwrap();
    // A refused file (bad path), then its chunk on the data stream: drained, never written.
    raw.send(&pf(0, b"../out", 1000, 65536));
    assert!(matches!(raw.recv().unwrap(), Message::FileFailed { .. }));
    data.write_all(&ChunkHeader::data(0, 0, 1000).encode())
        .unwrap();
    data.write_all(&[9u8; 1000]).unwrap();
    // Implicit directories (made for a file's parents) get no times; a MakeLink cannot
    // replace a directory; times for an existing directory only narrow it.
    let a = push_whole(&mut raw, &mut data, 1, b"imp/lied/f", b"abc");
    assert!(matches!(a, Message::FileCommitted { .. }), "{a:?}");
    for m in [
        Message::DirTimes {
            path: b"imp/lied".to_vec(),
            mode: 0o777,
            mtime_sec: 0,
            mtime_nsec: 0,
        },
        Message::MakeLink {
            path: b"private".to_vec(),
            target: b"/".to_vec(),
        },
        Message::MakeLink {
            path: b"imp//lied/".to_vec(),
            target: b"/".to_vec(),
        },
    ] {
        raw.send(&m);
        assert!(
            matches!(raw.recv().unwrap(), Message::EntryFailed { .. }),
            "{m:?}"
        );
    }
    // An existing directory, named in other spellings: made (it was there) and its times
    // narrowed, each answered with the path exactly as sent.
    raw.send(&Message::MakeDir {
        path: b"./private//".to_vec(),
        top: false,
    });
    raw.send(&Message::DirTimes {
        path: b"private/.".to_vec(),
        mode: 0o7777,
        mtime_sec: 5,
        mtime_nsec: 0,
    });
    for path in [&b"./private//"[..], b"private/."] {
        match raw.recv().unwrap() {
            Message::EntryDone { path: p } => assert_eq!(p, path),
            other => panic!("{path:?}: {other:?}"),
        }
    }
    // A FileEnd twice for an open (one-chunk, so held) file: protocol error, the session ends, nothing commits.
    raw.send(&pf(2, b"twice.bin", 1000, 65536));
    assert!(matches!(raw.recv().unwrap(), Message::FileReady { .. }));
    raw.send(&Message::FileEnd {
        file_id: 2,
        digest: [0; 32],
    });
    raw.send(&Message::FileEnd {
        file_id: 2,
        digest: [0; 32],
    });
    let e = error_from(&mut raw);
    eprintln!("{e:?}\n{}", srv.log());
    assert!(e.is_some());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        tree(&root),
        vec!["imp", "imp/lied", "imp/lied/f", "private", "private/key"]
    );
    assert_eq!(mode(&root.join("private")), 0o700);
    assert_eq!(mode(&root.join("imp/lied")), 0o755);
    assert!(!env.dir.path().join("out").exists());
}

/// SECURITY.md: a directory that was there before the session "gets its mtime, but its
/// permission bits can only narrow (`old & mode`), so naming an operator's private directory
/// cannot open it to other users of the host". The narrowing is done on `mode & 0o777` and
/// written back with `fchmod`, which also clears the directory's sticky and setgid bits: a
/// key holder's `MakeDir shared` + `DirTimes shared 0777` turns the operator's sticky drop
/// directory (1777: anyone may add, only owners may delete or rename) into one where every
/// local user may delete or replace everyone else's files; a setgid project directory
/// (2775) stops giving new files its group.
/// SAFE: an existing directory keeps its sticky and setgid bits.
#[test]
fn dirtimes_on_an_existing_directory_clears_its_sticky_and_setgid_bits() {
    let env = Env::new();
    let root = env.mkdir("root");
    let shared = env.mkdir("root/shared");
    let project = env.mkdir("root/project");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::set_permissions(&project, std::fs::Permissions::from_mode(0o2775)).unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, data) = raw_open(&srv, &env, false);
    for (name, mode) in [(&b"shared"[..], 0o777), (b"project", 0o775)] {
        raw.send(&Message::MakeDir {
            path: name.to_vec(),
            top: false,
        });
        raw.send(&Message::DirTimes {
            path: name.to_vec(),
            mode,
            mtime_sec: 1_000_000,
            mtime_nsec: 0,
        });
    }
    sync_after(
        &mut raw,
        &Message::Notice {
            message: "sync".into(),
        },
        0,
    );
    let _ = raw_finish(&mut raw, &mut [data]);
    let (s, p) = (mode(&shared), mode(&project));
    println!("shared {s:o}, project {p:o}");
    assert_eq!(
        s & 0o1000,
        0o1000,
        "GOT THROUGH: the sticky bit of an existing world-writable directory was cleared \
         ({s:o}): every local user may now delete the others' files in it"
    );
    assert_eq!(
        p & 0o2000,
        0o2000,
        "GOT THROUGH: the setgid bit of an existing directory was cleared ({p:o})"
    );
}

/// The new bookkeeping of created directories (one entry per resolution, prefixes past
/// `existed`): an existing private directory named in other spellings, and reached through
/// new children, never counts as created. SAFE: its mode only narrows (stays 0700 / 0750
/// against a 0777 `DirTimes`), and a directory only made implicitly gets no times at all.
#[test]
fn push_existing_directories_never_pass_as_created() {
    let env = Env::new();
    let root = env.mkdir("root");
    let private = env.mkdir("root/priv");
    let sub = env.mkdir("root/priv/sub");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o750)).unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, _data) = raw_open(&srv, &env, false);
    let frames: Vec<Message> = vec![
        Message::MakeDir {
            path: b"priv/sub/new/deeper".to_vec(),
            top: false,
        },
        Message::MakeDir {
            path: b"./priv//".to_vec(),
            top: false,
        },
        Message::MakeDir {
            path: b"priv/./sub/".to_vec(),
            top: false,
        },
        Message::MakeDir {
            path: b"fresh/a/b".to_vec(),
            top: false,
        },
    ];
    for f in &frames {
        raw.send(f);
    }
    for (path, mode) in [
        (&b"priv"[..], 0o777),
        (b"./priv/", 0o777),
        (b"priv/sub", 0o777),
        (b"priv/sub/new", 0o777),
        (b"fresh/a", 0o777),
    ] {
        raw.send(&Message::DirTimes {
            path: path.to_vec(),
            mode,
            mtime_sec: 1_000_000,
            mtime_nsec: 0,
        });
    }
    // Everything before it handled: a PutFile refused at once.
    raw.send(&pf(0, b"sync.bin", 1, 1));
    loop {
        match next_raw(&mut raw, Duration::from_secs(8), keepalive) {
            Ok(Some(Message::FileFailed { file_id: 0, .. })) => break,
            Ok(Some(_)) => {}
            other => panic!("{other:?}"),
        }
    }
    let (p, s) = (mode(&private), mode(&sub));
    println!(
        "priv {p:o}, priv/sub {s:o}, priv/sub/new {:o}, fresh/a {:o}",
        mode(&root.join("priv/sub/new")),
        mode(&root.join("fresh/a"))
    );
    assert_eq!(p, 0o700, "GOT THROUGH: an existing directory was widened");
    assert_eq!(s, 0o750, "GOT THROUGH: an existing directory was widened");
    assert_ne!(
        mode(&root.join("fresh/a")),
        0o777,
        "GOT THROUGH: times for a directory only made on the way"
    );
}

/// The in-place keep (`durable.rs` `finalize`, `job.in_place`) gives the *existing* target
/// the sender's mode and mtime with `fchmod`/`futimens` on the inode, where every other
/// commit renames a new file over the name. A target with other hard links shares its inode:
/// here `root/report.csv` is a hard link of the operator's `/…/outside/report.csv` (0600),
/// as in hard-linked snapshot trees. A key holder announces `report.csv` with its size and
/// mode 0777, lets the server offer the file's own chunks, answers `Go{keep}` without
/// checking anything (it never saw the bytes) and sends the file digest over the offered MACs.
/// The server "commits", and the file *outside* the root is now 0777 with the key holder's
/// mtime.
/// SAFE: nothing outside the root changes (mode and mtime of the outside name stay).
#[test]
fn push_in_place_keep_chmods_a_hard_linked_file_outside_the_root() {
    let env = Env::new();
    let root = env.mkdir("root");
    let outside = env.mkdir("outside");
    let secret = outside.join("report.csv");
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
    hard_linked(&secret, &body, &root.join("report.csv"));
    let before = std::fs::metadata(&secret).unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, _data) = raw_open(&srv, &env, false);
    let size = body.len() as u64;
    raw.send(&Message::PutFile(PutFile {
        mode: 0o777,
        ..put_file(0, b"report.csv", size, 65536)
    }));
    let mut macs = vec![None; 4];
    let offered = loop {
        match next_raw(&mut raw, Duration::from_secs(8), keepalive) {
            Ok(Some(Message::Have(h))) => {
                for (i, mac) in h.entries {
                    macs[i as usize] = Some(mac);
                }
            }
            Ok(Some(Message::FileReady { resumed, .. })) => break resumed,
            other => panic!("{other:?}"),
        }
    };
    // Fixed: a target with other hard links is not offered in place at all.
    if offered {
        raw.send(&Message::Go {
            file_id: 0,
            restart: false,
        });
        let digest = raw.digest(0, size, &all_offered(&macs));
        raw.send(&Message::FileEnd { file_id: 0, digest });
    }
    let answer = next_raw(&mut raw, Duration::from_secs(8), keepalive);
    let after = std::fs::metadata(&secret).unwrap();
    println!(
        "answer {answer:?}; outside file mode {:o} -> {:o}, mtime {} -> {}",
        before.mode() & 0o7777,
        after.mode() & 0o7777,
        before.mtime(),
        after.mtime()
    );
    assert_eq!(std::fs::read(&secret).unwrap(), body);
    assert!(
        after.mode() & 0o7777 == 0o600 && after.mtime() == before.mtime(),
        "GOT THROUGH: a file outside the root (hard-linked into it) went from mode {:o} to \
         {:o} and its mtime to {} through an in-place keep the key holder never checked",
        before.mode() & 0o7777,
        after.mode() & 0o7777,
        after.mtime()
    );
}
