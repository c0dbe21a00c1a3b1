//! Texts from a malicious client in `zcp serve`'s logs: an engine name, `Get` paths, failed
//! entries and notices in the server log, and file names made to break the transfer log
//! (newlines, quotes, terminal escapes, bidirectional overrides, bytes that are not UTF-8).
//! Every line stays one line, escaped; no control byte is written raw and no line forged.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use serde_json::Value;
use zcp_wire::{ErrorCode, Message, Open};

use crate::hostile::peer::*;
use crate::util::*;

/// Texts a client controls before and around a session, into the server log: an
/// unauthenticated Error, an unknown engine name, Get paths, EntryFailed in a pull.
#[test]
fn log_injection_into_the_server_log() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::write(root.join("want.bin"), vec![1u8; 1000]).unwrap();
    // The pulls below never open their data stream: the server waits for it no longer than
    // the larger of the handshake and idle timeouts.
    let srv = ServerProc::start(
        &root,
        &env.key,
        &["--handshake-timeout", "1", "--idle-timeout", "1"],
    );
    let nasty = "\x1b[31m\r\nzcp: session 0000000000000000 finished: 9 files\x07";
    let nasty = nasty.replace("\\x1b", "\x1b").replace("\\x07", "\x07");
    let nasty = nasty.replace("\\r", "\r").replace("\\n", "\n");
    // Unknown engine (in Open).
    let mut raw = Raw::authenticate(srv.port, env.psk());
    raw.send(&Message::Open(Box::new(Open {
        recv_engine: nasty.clone(),
        ..base_open(false)
    })));
    let _ = error_from(&mut raw);
    // Get paths.
    let mut raw = Raw::authenticate(srv.port, env.psk());
    raw.send(&open_message(true, 65536));
    let _ = raw.recv();
    raw.send(&Message::Get {
        path: nasty.clone().into_bytes(),
        dest: nasty.clone().into_bytes(),
    });
    raw.send(&Message::GetEnd);
    let _ = error_from(&mut raw);
    // A pull whose receiver reports failures and notices with the nasty text.
    let (mut raw, _d) = raw_open(&srv, &env, true);
    let id = next_put(&mut raw);
    raw.send(&Message::FileFailed {
        file_id: id,
        code: ErrorCode::Io,
        message: nasty.clone(),
    });
    raw.send(&Message::EntryFailed {
        path: nasty.clone().into_bytes(),
        code: ErrorCode::Io,
        message: nasty.clone(),
    });
    raw.send(&Message::Notice {
        message: nasty.clone(),
    });
    raw.send(&Message::Error {
        code: ErrorCode::Internal,
        message: nasty.clone(),
    });
    let _ = error_from(&mut raw);
    std::thread::sleep(Duration::from_millis(500));
    let log = srv.log();
    eprintln!("{log}");
    for b in ['\x1b', '\x07', '\r'] {
        assert!(!log.contains(b), "GOT THROUGH: raw {b:?} in the log");
    }
    assert!(
        !log.lines()
            .any(|l| l.starts_with("zcp: session 0000000000000000")),
        "GOT THROUGH: forged line"
    );
}

#[test]
fn hostile_names_stay_one_escaped_json_line_each_in_the_transfer_log() {
    let env = Env::new();
    let root = env.mkdir("root");
    let tl = env.path("transfers.jsonl");
    let srv = ServerProc::start(
        &root,
        &env.key,
        &[
            "--transfer-log",
            tl.to_str().unwrap(),
            "--log-format",
            "json",
        ],
    );
    let names: [&[u8]; 6] = [
        b"new\nline\",\"type\":\"session\"}\n{\"forged\":1",
        b"q\"uote\\back",
        b"\x1b[31mred\x1b]0;title\x07",
        b"\xe2\x80\xaeevil\xff\xfe",
        b"cr\rlf",
        b"fails\n\x1b[2J",
    ];
    let src = env.mkdir("h");
    for (i, n) in names.iter().enumerate() {
        std::fs::write(src.join(OsStr::from_bytes(n)), vec![b'a' + i as u8; 10 + i]).unwrap();
    }
    // The last one fails: a directory stands where it goes.
    std::fs::create_dir_all(root.join("x/h").join(OsStr::from_bytes(names[5]))).unwrap();
    let o = run(send_cmd(srv.port, &env.key, &src, "x/", &["-q", "-r"]), 30);
    assert_eq!(o.status.code(), Some(23), "{}", both(&o));
    assert!(srv.wait_log("finished", 10), "{}", srv.log());
    let text = std::fs::read_to_string(&tl).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect();
    assert_eq!(lines.len(), names.len() + 1, "{text}");
    assert!(
        !text.contains(['\u{1b}', '\r', '\u{7}', '\u{202e}']),
        "{text:?}"
    );
    for (i, n) in names.iter().enumerate() {
        let mut dest = b"x/h/".to_vec();
        dest.extend_from_slice(n);
        let want = zcp_wire::escape(&dest);
        let mine: Vec<&Value> = lines.iter().filter(|l| l["path"] == *want).collect();
        assert_eq!(mine.len(), 1, "{want} in {text}");
        let l = mine[0];
        assert_eq!(l["type"], "file");
        assert!(l.get("forged").is_none());
        if i == 5 {
            assert_eq!(l["outcome"], "failed", "{l}");
            assert!(!l["reason"].as_str().unwrap().contains('\u{1b}'), "{l}");
        } else {
            assert_eq!(l["outcome"], "ok", "{l}");
            assert_eq!(l["bytes"], 10 + i as u64, "{l}");
            let stored = std::fs::read(root.join("x/h").join(OsStr::from_bytes(n))).unwrap();
            assert_eq!(stored, vec![b'a' + i as u8; 10 + i]);
        }
    }
    assert_eq!(lines.iter().filter(|l| l["type"] == "session").count(), 1);
    // The server's own JSON log: one object per line too, no raw control character.
    for l in srv.log().lines().filter(|l| !l.contains("listening on")) {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"));
        assert!(!l.contains(['\u{1b}', '\r', '\u{7}']), "{l:?}");
        assert!(v["fields"]["message"].is_string(), "{l}");
    }
}
