//! The rate cap from the network: a client's `Open.rate` (the server holds it in a pull) and
//! a server's `Opened.pacing` (what the client reports). A client cannot make the server pace
//! at nothing or at an impossible rate, nor hold it by pulling at the slowest cap; a server
//! cannot claim a pacing for a session in which it sends nothing capped.

use std::io::Read;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use zcp_wire::{ErrorCode, MAX_RATE, MIN_RATE, Message, Open, Pacing};

use crate::hostile::peer::*;
use crate::util::*;

fn open(pull: bool, rate: u64) -> Message {
    Message::Open(Box::new(Open {
        recv_engine: "mem".into(),
        rate,
        ..base_open(pull)
    }))
}

#[test]
fn a_cap_of_nothing_or_past_any_link_is_refused_and_the_server_goes_on() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::write(root.join("want.bin"), vec![7u8; 300_000]).unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    for (pull, rate) in [
        (true, 1),
        (true, MIN_RATE - 1),
        (true, MAX_RATE + 1),
        (true, u64::MAX),
        (false, u64::MAX),
        (false, 1),
    ] {
        let mut raw = Raw::authenticate(srv.port, env.psk());
        raw.send(&open(pull, rate));
        let (code, why) = error_from(&mut raw).expect("an Error");
        assert_eq!(code, ErrorCode::Limit, "{rate}: {why}");
        assert!(
            why.contains(&format!("rate cap {rate} bit/s is outside")),
            "{why}"
        );
        // No data stream may join a session that was never opened.
        assert!(raw.data(srv.port, 0).is_err());
    }
    // No cap (0) is a session like any other; a push says the server paces nothing.
    let mut raw = Raw::authenticate(srv.port, env.psk());
    raw.send(&open(false, 0));
    assert!(matches!(
        raw.recv().unwrap(),
        Message::Opened {
            pacing: Pacing::None,
            ..
        }
    ));
    drop(raw);
    // The server still serves, whole files, at the largest cap too.
    let o = run(get_cmd(&srv, &env, "10T"), 30);
    assert!(o.status.success(), "{}\n{}", both(&o), srv.log());
    assert!(same_file(&root.join("want.bin"), &env.path("got")));
    assert_eq!(tree(&root), ["want.bin"]);
}

fn get_cmd(srv: &ServerProc, env: &Env, rate: &str) -> std::process::Command {
    let mut c = zcp();
    c.args([
        "get",
        "-i",
        "0",
        "--limit-rate",
        rate,
        "-p",
        &srv.port.to_string(),
    ])
    .arg("--key-file")
    .arg(&env.key)
    .arg("127.0.0.1::want.bin")
    .arg(env.path("got"));
    c
}

#[test]
fn a_client_pulling_at_the_slowest_cap_gets_no_more_and_frees_the_server_when_it_leaves() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::write(root.join("want.bin"), vec![3u8; 4 << 20]).unwrap();
    let mut srv = ServerProc::start(&root, &env.key, &["--once"]);
    let mut raw = Raw::authenticate(srv.port, env.psk());
    raw.send(&open(true, MIN_RATE));
    match raw.recv().unwrap() {
        Message::Opened { pacing, .. } => {
            assert!(
                matches!(pacing, Pacing::Kernel | Pacing::User),
                "{pacing:?}"
            )
        }
        other => panic!("{other:?}"),
    }
    raw.get_files(&[b"want.bin"]);
    let mut data = raw.data(srv.port, 0).unwrap();
    let id = next_put(&mut raw);
    raw.ready(id, "mem");
    // 100 kbit/s is 12.5 KB/s: read for 1.5 s as fast as the socket gives.
    data.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let t0 = Instant::now();
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    while t0.elapsed() < Duration::from_millis(1500) {
        match data.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(_) => {}
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    // The chunk header, the bucket's 1 KiB burst and the rate since FileReady (15% over for
    // the clocks): the kernel's first unpaced segments get only what the bucket lets out.
    let most = 28.0 + 1024.0 + 12_500.0 * secs * 1.15;
    println!("{got} bytes in {secs:.2} s (at most {most:.0})");
    assert!(got > 0, "nothing came");
    assert!(
        (got as f64) <= most,
        "{got} bytes in {secs:.2} s at 100 kbit/s"
    );
    // The client leaves mid-file: the session ends at once, and --once exits.
    drop(data);
    drop(raw);
    let t = Instant::now();
    assert!(srv.exit_code(10).is_some(), "{}", srv.log());
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(tree(&root), ["want.bin"]);
}

/// A malicious server that answers the client's `Open` with `pacing`.
fn answer_with(l: &TcpListener, env: &Env, pacing: Pacing) {
    answer_open(l, env, |_| opened(1, pacing, "blake3"));
}

#[test]
fn a_server_naming_a_pacing_it_does_not_hold_is_refused_before_any_stream() {
    let env = Env::new();
    let src = env.path("src.bin");
    std::fs::write(&src, b"source bytes").unwrap();
    // (command, client's cap, the server's claim)
    let cases = [
        ("get", None, Pacing::Kernel),
        ("get", Some("200M"), Pacing::None),
        ("send", Some("200M"), Pacing::User),
        ("send", None, Pacing::Kernel),
    ];
    for (cmd, cap, claim) in cases {
        let (l, port) = listener();
        let dest = env.path("dest");
        let extra: Vec<&str> = cap.iter().flat_map(|r| ["--limit-rate", r]).collect();
        let child = if cmd == "get" {
            get(port, &env.key, &["f"], &dest, &extra)
        } else {
            send(port, &env.key, &src, "f", &extra)
        };
        answer_with(&l, &env, claim);
        let o = wait_output(child, 15);
        let joined = pending(&l);
        let ctx = format!("{cmd} {cap:?} {claim:?}: {}", both(&o));
        assert_eq!(o.status.code(), Some(1), "{ctx}");
        assert!(text(&o.stderr).contains("pacing"), "{ctx}");
        assert_eq!(joined, 0, "{ctx}");
        assert!(!dest.exists(), "{ctx}");
        assert_eq!(std::fs::read(&src).unwrap(), b"source bytes");
    }
}
