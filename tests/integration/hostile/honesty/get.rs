//! Exit honesty of `zcp get`: exit 0 only when every requested entry arrived and was
//! verified. A malicious server that sends nothing, announces a file and never sends it, or
//! sends one of two requested files cannot make `get` report success; an honest session
//! through the same harness does.

use zcp_wire::Message;

use crate::hostile::peer::*;
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

/// A server that answers `get want.txt` with nothing at all and a clean Finish.
/// SAFE: non-zero exit (nothing that was asked for arrived).
#[test]
fn pull_nothing_sent_then_finish_is_not_success() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let (child, mut evil) = evil_get(&env, &["want.txt"], &dest, &[]);
    evil.finish();
    let o = wait_output(child, 30);
    assert_eq!(tree(&dest), Vec::<String>::new());
    assert_ne!(
        o.status.code(),
        Some(0),
        "GOT THROUGH: get exited 0 though nothing arrived: {}",
        both(&o)
    );
}

/// A server that announces the requested file, gets FileReady, then Finishes without data.
/// SAFE: non-zero exit.
#[test]
fn pull_file_announced_then_finish_is_not_success() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let (child, mut evil) = evil_get(&env, &["want.txt"], &dest, &[]);
    evil.put(0, b"want.txt", b"", 200_000);
    assert!(matches!(evil.next(), Message::FileReady { .. }));
    evil.finish();
    let o = wait_output(child, 30);
    assert!(!dest.join("want.txt").exists());
    assert_ne!(
        o.status.code(),
        Some(0),
        "GOT THROUGH: get exited 0 though the file never arrived: {}",
        both(&o)
    );
}

/// Two names asked for, one sent: SAFE is a non-zero (partial) exit.
#[test]
fn pull_one_of_two_requested_then_finish_is_not_success() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let (child, mut evil) = evil_get(&env, &["a.txt", "b.txt"], &dest, &[]);
    let a = evil.send_file(0, b"a.txt", b"only this one");
    assert!(matches!(a, Message::FileCommitted { .. }), "{a:?}");
    evil.finish();
    let o = wait_output(child, 30);
    assert_eq!(tree(&dest), vec!["a.txt"]);
    assert_ne!(
        o.status.code(),
        Some(0),
        "GOT THROUGH: get of a.txt and b.txt exited 0 with b.txt missing: {}",
        both(&o)
    );
}

/// A server that, asked with `--ignore-existing`, announces the requested file and then gives
/// it up as `exists` (which only a receiver may say), to have it counted as left there.
/// SAFE: non-zero exit, nothing stored, and the file is not counted as left.
#[test]
fn pull_a_sender_saying_exists_is_no_file_left_there() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let (child, mut evil) = evil_get(&env, &["want.txt"], &dest, &["-J", "--ignore-existing"]);
    evil.put(0, b"want.txt", b"", 200_000);
    assert!(matches!(evil.next(), Message::FileReady { .. }));
    evil.send(&Message::FileAbort {
        file_id: 0,
        code: zcp_wire::ErrorCode::Exists,
        message: "already there, trust me".into(),
    });
    evil.finish();
    let o = wait_output(child, 30);
    assert_eq!(tree(&dest), Vec::<String>::new());
    assert_ne!(
        o.status.code(),
        Some(0),
        "GOT THROUGH: get exited 0 though nothing arrived: {}",
        both(&o)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    assert_eq!(v["end"]["files"]["left_existing"], 0, "{v}");
}
