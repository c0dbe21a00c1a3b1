//! Encryption from a hostile server: a client that asks for encryption is never served in
//! clear. A server (or someone on the path) that answers without a key share is refused at
//! the handshake, before the client proves its key, opens a session or sends a byte.

use std::io::Write;
use std::net::TcpListener;

use zcp_wire::{Accepted, ErrorCode, Message};

use crate::hostile::peer::*;
use crate::util::*;

#[test]
fn a_server_that_answers_without_encryption_is_refused_before_anything_is_sent() {
    let env = Env::new();
    let src = env.path("secret.bin");
    make_dense(&src, 200_000, 3);
    let back = env.mkdir("back");
    for get_it in [false, true] {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let child = match get_it {
            false => send(port, &env.key, &src, "secret.bin", &["--encrypt"]),
            true => get(port, &env.key, &["secret.bin"], &back, &["--encrypt"]),
        };
        // The server's side of the handshake, from a server that cannot encrypt: its
        // Challenge carries no key share (and its proof is genuine).
        let mut s = accept_within(&l, 10).expect("the client connects");
        read_timeout(&s);
        let hello = read_plain(&mut s).unwrap();
        let Message::Hello { share, .. } = &hello else {
            panic!("{hello:?}")
        };
        assert!(share.is_some(), "the client asks with a key share");
        let (state, reply) = zcp_wire::accept(&env.psk(), hello, [9; 32]).unwrap();
        assert!(matches!(state, Accepted::Control(_)));
        s.write_all(&reply.encode_frame()).unwrap();
        // The client answers with an Error, not its proof of the key.
        match read_plain(&mut s) {
            Ok(Message::Error { code, message }) => {
                assert_eq!(code, ErrorCode::Auth, "{message}");
                assert!(message.contains("without encryption"), "{message}");
            }
            other => panic!("expected an Error, got {other:?}"),
        }
        let o = wait_output(child, 20);
        assert_eq!(o.status.code(), Some(3), "{}", both(&o));
        assert!(
            text(&o.stderr).contains("without encryption"),
            "{}",
            both(&o)
        );
        assert!(tree(&back).is_empty(), "nothing arrived: {:?}", tree(&back));
        // Nothing else reached the server: no data connection, no second try.
        assert_eq!(pending(&l), 0);
    }
}
