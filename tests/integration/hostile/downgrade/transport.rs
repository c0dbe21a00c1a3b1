//! The transport from the network: a client naming an unknown transport or UDP mode (or a
//! fixed rate without a cap) against `zcp serve`, and a server granting a `zcp get` more
//! streams than it asked for. Each is refused by name before any stream joins.

use zcp_wire::{ErrorCode, Message, Open};

use crate::hostile::peer::*;
use crate::util::*;

#[test]
fn unknown_transports_and_modes_are_refused_by_name() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let cases = [
        ("quic", "fair", "unknown transport 'quic' (known: tcp, udp)"),
        ("\x1b[2Judp", "fair", "unknown transport"),
        (
            "udp",
            "greedy",
            "unknown UDP mode 'greedy' (known: fair, fixed)",
        ),
        ("udp", "fixed", "give --limit-rate"),
    ];
    for (t, m, want) in cases {
        let mut raw = Raw::authenticate(srv.port, env.psk());
        raw.send(&Message::Open(Box::new(Open {
            recv_engine: "rw".into(),
            transport: t.into(),
            udp_mode: m.into(),
            ..base_open(false)
        })));
        let (code, why) = error_from(&mut raw).expect("an Error");
        assert!(
            matches!(code, ErrorCode::Protocol | ErrorCode::Limit),
            "{why}"
        );
        assert!(why.contains(want), "{t:?} {m:?}: {why}");
        assert!(raw.data(srv.port, 0).is_err(), "no stream joins");
    }
    let log = srv.log();
    assert!(!log.contains('\x1b'), "{log:?}");
    assert_eq!(tree(&root), Vec::<String>::new());
}

#[test]
fn more_streams_than_asked_for_opens_none() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let (child, evil) = evil_get_granting(&env, &["f"], &dest, &["-P", "1"], Some(200));
    assert_eq!(evil.joined, 0, "the client opened data connections");
    let o = wait_output(child, 30);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(
        both(&o).contains("more than the 1 asked for"),
        "{}",
        both(&o)
    );
}
