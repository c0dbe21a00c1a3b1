//! A client naming its files to break the server's transfer log: newlines (a forged line),
//! quotes (broken JSON), terminal escapes, bidirectional overrides, bytes that are not UTF-8.
//! Every line must stay one JSON object holding the escaped name, one line per file.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use serde_json::Value;

use crate::util::*;

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
