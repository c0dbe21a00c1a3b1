//! `zcp ls` against a lying server: an entry it was not asked for, one deeper than asked
//! without `-r`, one beneath a file, an export where paths were asked for, a listing ended
//! early: each ends the listing as a protocol error (exit 1), and nothing the server named
//! reaches the terminal unescaped; times no calendar holds print as `-`.

use zcp_wire::{ListEntry, ListKind, Message};

use crate::hostile::peer::*;
use crate::util::*;

fn entry(path: &[u8], kind: ListKind, head: bool) -> Message {
    Message::ListEntry(ListEntry {
        path: path.to_vec(),
        kind,
        size: 3,
        mode: 0o644,
        mtime_sec: 1_000_000_000,
        mtime_nsec: 0,
        target: Vec::new(),
        head,
    })
}

#[test]
fn a_server_listing_what_was_not_asked_for_is_a_protocol_error() {
    let env = Env::new();
    let failed = |path: &[u8]| Message::EntryFailed {
        path: path.to_vec(),
        code: zcp_wire::ErrorCode::Io,
        message: "x".into(),
    };
    let lies: [(&str, Vec<Message>); 9] = [
        (
            "not the next path",
            vec![entry(b"other", ListKind::Dir, true)],
        ),
        (
            "not beneath",
            vec![
                entry(b"d", ListKind::Dir, true),
                entry(b"e/x", ListKind::File, false),
            ],
        ),
        (
            "deeper than asked",
            vec![
                entry(b"d", ListKind::Dir, true),
                entry(b"d/a/b", ListKind::File, false),
            ],
        ),
        (
            "no directory",
            vec![
                entry(b"d", ListKind::File, true),
                entry(b"d/a", ListKind::File, false),
            ],
        ),
        (
            "an export where paths",
            vec![entry(b"d", ListKind::Export, true)],
        ),
        ("unanswered", vec![]),
        (
            "not beneath",
            vec![
                entry(b"d", ListKind::Dir, true),
                entry(b"d/./a", ListKind::File, false),
            ],
        ),
        (
            "neither the next path",
            vec![entry(b"d", ListKind::Dir, true), failed(b"e/x")],
        ),
        ("neither the next path", vec![failed(b"./d")]),
    ];
    for (says, lie) in lies {
        let (child, mut evil) = evil_ls(&env, &["d"], &[]);
        assert_eq!(evil.gets.len(), 1, "{says}");
        for m in &lie {
            evil.send(m);
        }
        evil.send(&Message::Finish);
        let o = wait_output(child, 30);
        assert_eq!(o.status.code(), Some(1), "{says}: {}", both(&o));
        assert!(
            text(&o.stderr).contains("protocol error"),
            "{says}: {}",
            both(&o)
        );
        assert!(text(&o.stderr).contains(says), "{says}: {}", both(&o));
    }
}

#[test]
fn what_the_server_could_not_read_makes_the_listing_partial() {
    let env = Env::new();
    let (child, mut evil) = evil_ls(&env, &["d", "f"], &[]);
    evil.send(&entry(b"d", ListKind::Dir, true));
    evil.send(&entry(b"d/a", ListKind::File, false));
    evil.send(&Message::Progress {
        file_id: 0,
        bytes: 256,
    });
    evil.send(&Message::EntryFailed {
        path: b"d/sub".to_vec(),
        code: zcp_wire::ErrorCode::Io,
        message: "Permission denied".into(),
    });
    evil.send(&entry(b"f", ListKind::File, true));
    evil.send(&Message::Finish);
    let o = wait_output(child, 30);
    assert_eq!(o.status.code(), Some(23), "{}", both(&o));
    assert!(
        text(&o.stderr).contains("d/sub: Permission denied"),
        "{}",
        both(&o)
    );
    assert_eq!(text(&o.stdout), "d:\na\nf\n");
}

#[test]
fn names_and_times_from_the_server_are_made_safe_to_print() {
    let env = Env::new();
    let (child, mut evil) = evil_ls(&env, &["d"], &["-l"]);
    evil.send(&entry(b"d", ListKind::Dir, true));
    evil.send(&entry(b"d/\x1b[2J\x07bell\nline", ListKind::File, false));
    for t in [i64::MIN, -1, 253_402_300_800, i64::MAX] {
        let mut e = ListEntry {
            path: format!("d/t{t}").into_bytes(),
            kind: ListKind::Link,
            size: 0,
            mode: 0o7777,
            mtime_sec: t,
            mtime_nsec: u32::MAX,
            target: b"\x1b]0;title\x07".to_vec(),
            head: false,
        };
        evil.send(&Message::ListEntry(e.clone()));
        e.path.push(b'x');
        e.kind = ListKind::Other;
        evil.send(&Message::ListEntry(e));
    }
    evil.send(&Message::Notice {
        message: "\x1b[31mred".into(),
    });
    evil.send(&Message::Finish);
    let o = wait_output(child, 30);
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    for bad in ['\x1b', '\x07'] {
        assert!(!out.contains(bad) && !err.contains(bad), "{}", both(&o));
    }
    // One line per entry: the newline in the name is escaped too.
    assert_eq!(out.lines().count(), 9, "{out}");
    assert_eq!(out.matches(" - ").count(), 8, "{out}");
}
