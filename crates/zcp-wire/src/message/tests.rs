//! Round trips and bounds of every message.

use super::*;

/// One message of every type.
pub(crate) fn samples() -> Vec<Message> {
    let mut all = setup_and_entry_samples();
    all.extend(file_samples());
    all
}

fn setup_and_entry_samples() -> Vec<Message> {
    vec![
        Message::Hello {
            version: 6,
            role: Role::Control,
            nonce: [3; 32],
            identity: Some([4; 32]),
            share: Some([5; 32]),
        },
        Message::Challenge {
            version: 6,
            nonce: [4; 32],
            proof: [5; 32],
            share: Some([6; 32]),
        },
        Message::Proof { proof: [6; 32] },
        Message::DataChallenge { nonce: [7; 32] },
        Message::DataJoin {
            session_id: [8; 16],
            stream: 3,
            proof: [9; 32],
        },
        Message::DataAccept,
        Message::Error {
            code: ErrorCode::BadPath,
            message: "destination is absolute".into(),
        },
        Message::Welcome {
            session_id: [1; 16],
            max_streams: 8,
            exports: true,
        },
        Message::Open(Box::new(Open {
            pull: true,
            recursive: true,
            streams: 4,
            idle_ms: 30_000,
            recv_engine: "auto".into(),
            send_engine: "sendfile".into(),
            block_size: 1 << 20,
            chunk_size: 0,
            rate: 2_000_000_000,
            verify: "none".into(),
            transport: "udp".into(),
            udp_mode: "fixed".into(),
            export: "incoming".into(),
            existing: "backup".into(),
            list: true,
            filters: vec!["- *.tmp".into(), "+ */".into()],
            delete: DeleteMode::DryRun,
        })),
        Message::Opened {
            streams: 2,
            idle_ms: 60_000,
            pacing: Pacing::Kernel,
            verify: "none".into(),
            transport: "udp".into(),
            udp_mode: "fixed".into(),
        },
        Message::PutFile(PutFile {
            file_id: 0,
            dest: b"dir/\xffname".to_vec(),
            name: b"src.bin".to_vec(),
            size: (1 << 33) + 1,
            mode: 0o644,
            mtime_sec: -1,
            mtime_nsec: 999_999_999,
            chunk_size: 64 << 20,
            sparse: true,
        }),
        Message::MakeDir {
            path: b"a/b".to_vec(),
            top: true,
        },
        Message::MakeLink {
            path: b"a/l".to_vec(),
            target: b"../../etc/passwd".to_vec(),
        },
        Message::DirTimes {
            path: b"a".to_vec(),
            mode: 0o755,
            mtime_sec: 5,
            mtime_nsec: 6,
        },
        Message::EntryFailed {
            path: b"a/l".to_vec(),
            code: ErrorCode::BadPath,
            message: "symlink".into(),
        },
        Message::EntryDone {
            path: b"a/b".to_vec(),
        },
        Message::Have(Have {
            file_id: 3,
            client_nonce: [1; 32],
            server_nonce: [2; 32],
            old_file_id: 9,
            entries: vec![(0, [4; 32]), (7, [5; 32])],
        }),
        Message::FileReady {
            file_id: 0,
            engine: "direct".into(),
            note: String::new(),
            target: b"dir/x".to_vec(),
            resumed: true,
        },
        Message::Go {
            file_id: 3,
            restart: true,
        },
    ]
}

fn file_samples() -> Vec<Message> {
    vec![
        Message::ChunkMac {
            file_id: 0,
            index: 12,
            mac: [2; 32],
        },
        Message::ChunkAck {
            file_id: 0,
            index: 12,
            ok: false,
        },
        Message::FileEnd {
            file_id: 0,
            digest: [3; 32],
        },
        Message::FileAbort {
            file_id: 1,
            code: ErrorCode::SourceChanged,
            message: "grew".into(),
        },
        Message::FileCommitted {
            file_id: 0,
            bytes: 5,
            digest: [3; 32],
            verified: true,
            stored: false,
        },
        Message::FileFailed {
            file_id: 0,
            code: ErrorCode::NoSpace,
            message: "full".into(),
        },
        Message::Progress {
            file_id: 2,
            bytes: 1 << 40,
        },
        Message::Plan {
            files: 10_000,
            bytes: u64::MAX,
        },
        Message::Get {
            path: b"data/run1".to_vec(),
            dest: b"local".to_vec(),
        },
        Message::GetEnd,
        Message::Notice {
            message: "skipped fifo".into(),
        },
        Message::Finish,
        Message::ListEntry(ListEntry {
            path: b"run/\xffa".to_vec(),
            kind: ListKind::Link,
            size: 0,
            mode: 0o777,
            mtime_sec: -1,
            mtime_nsec: 999_999_999,
            target: b"../x".to_vec(),
            head: true,
        }),
        Message::Prune,
        Message::Deleted {
            path: b"a/old\xff".to_vec(),
            dir: true,
            failed: Some((ErrorCode::Io, "busy".into())),
        },
        Message::Pruned(PruneCount {
            scanned: 7,
            deleted: 2,
            failed: 1,
            end: true,
            refused: "a file failed".into(),
        }),
        Message::Stats(SideStats {
            cpu_user_us: 1,
            cpu_sys_us: 2,
            max_rss_bytes: 3,
            bytes: 4,
            files: 5,
            cipher_us: 6,
        }),
    ]
}

#[test]
fn every_message_round_trips() {
    let all = samples();
    let kinds: std::collections::HashSet<u8> = all.iter().map(Message::kind).collect();
    assert_eq!(kinds.len(), all.len(), "one sample per message type");
    for m in all {
        let body = m.encode_body();
        assert_eq!(Message::decode(m.kind(), &body).unwrap(), m, "{}", m.name());
        // Every strict prefix is truncated or malformed, never a different message.
        for cut in 0..body.len() {
            assert!(
                Message::decode(m.kind(), &body[..cut]).is_err(),
                "{}",
                m.name()
            );
        }
        let mut longer = body.clone();
        longer.push(0);
        assert!(Message::decode(m.kind(), &longer).is_err());
    }
}

#[test]
fn hellos_carry_an_identity_tag_only_on_version_2_control_connections() {
    for m in [
        Message::Hello {
            version: 2,
            role: Role::Data,
            nonce: [3; 32],
            identity: None,
            share: None,
        },
        Message::Hello {
            version: 2,
            role: Role::Control,
            nonce: [3; 32],
            identity: Some([4; 32]),
            share: None,
        },
        Message::Hello {
            version: 6,
            role: Role::Control,
            nonce: [3; 32],
            identity: Some([4; 32]),
            share: None,
        },
        // A version-1 client's Hello still decodes, so the server can answer Error{version}.
        Message::Hello {
            version: 1,
            role: Role::Control,
            nonce: [3; 32],
            identity: None,
            share: None,
        },
    ] {
        let body = m.encode_body();
        assert_eq!(Message::decode(code::HELLO, &body).unwrap(), m);
        let mut longer = body.clone();
        longer.extend_from_slice(&[0; 32]);
        assert!(Message::decode(code::HELLO, &longer).is_err());
    }
}

#[test]
fn header_bounds_length_and_type() {
    let ok = FrameHeader::decode([0, 0, 0, 4, code::PROOF]).unwrap();
    assert_eq!(ok.len, 4);
    assert!(!ok.is_sealed());
    assert!(matches!(
        FrameHeader::decode([0xff, 0xff, 0xff, 0xff, code::PROOF]),
        Err(DecodeError::TooLarge { .. })
    ));
    assert!(matches!(
        FrameHeader::decode([0, 0, 0, 1, 0x7f]),
        Err(DecodeError::Malformed(_))
    ));
    assert!(
        FrameHeader::decode([0, 0, 0, 0, code::FINISH])
            .unwrap()
            .is_sealed()
    );
}

#[test]
fn unknown_flag_bits_are_malformed() {
    let mut body = Message::Go {
        file_id: 1,
        restart: false,
    }
    .encode_body();
    *body.last_mut().unwrap() = 0x80;
    assert!(matches!(
        Message::decode(code::GO, &body),
        Err(DecodeError::Malformed(_))
    ));
    let Some(Message::PutFile(p)) = samples().into_iter().find(|m| m.kind() == code::PUT_FILE)
    else {
        panic!("a PutFile sample");
    };
    let mut body = Message::PutFile(p).encode_body();
    assert_eq!(*body.last().unwrap(), 1, "the sparse flag is bit 0");
    *body.last_mut().unwrap() = 0x02;
    assert!(matches!(
        Message::decode(code::PUT_FILE, &body),
        Err(DecodeError::Malformed(_))
    ));
}

#[test]
fn verify_modes_round_trip_by_name_and_an_unknown_one_still_decodes() {
    for m in VerifyMode::ALL {
        assert_eq!(VerifyMode::parse(m.name()), Some(m));
    }
    assert_eq!(
        VerifyMode::default(),
        VerifyMode::Blake3,
        "verified by default"
    );
    assert!(VerifyMode::Blake3.checks() && !VerifyMode::None.checks());
    assert_eq!(VerifyMode::parse("NONE"), None, "names are exact");
    assert_eq!(VerifyMode::parse(""), None);
    // The wire carries the name: a mode this build does not know decodes, so the server can
    // refuse it by name.
    let open = Message::Open(Box::new(Open {
        pull: false,
        recursive: false,
        streams: 1,
        idle_ms: 0,
        recv_engine: "auto".into(),
        send_engine: "sendfile".into(),
        block_size: 0,
        chunk_size: 0,
        rate: 0,
        verify: "crc32".into(),
        transport: "tcp".into(),
        udp_mode: "fair".into(),
        export: String::new(),
        existing: String::new(),
        list: false,
        filters: Vec::new(),
        delete: DeleteMode::Off,
    }));
    let body = open.encode_body();
    assert_eq!(Message::decode(code::OPEN, &body).unwrap(), open);
    // A version-3 Open (no filter rules) is malformed, as is one without the existing mode.
    assert!(Message::decode(code::OPEN, &body[..body.len() - 2]).is_err());
    assert!(Message::decode(code::OPEN, &body[..body.len() - 4]).is_err());
    let body = &body[..body.len() - 4];
    // An Open that stops before the mode (as a build without it would send) is malformed.
    let tail = (2 + 3) + (2 + 4);
    assert!(Message::decode(code::OPEN, &body[..body.len() - tail - 2 - 5]).is_err());
    // So is one that stops before the transport and its mode.
    assert!(Message::decode(code::OPEN, &body[..body.len() - tail]).is_err());
}

#[test]
fn a_dry_run_without_delete_is_malformed_and_a_plain_deleted_carries_no_failure() {
    let Some(Message::Open(mut open)) = samples().into_iter().find(|m| m.kind() == code::OPEN)
    else {
        panic!("an Open sample");
    };
    open.delete = DeleteMode::Delete;
    let mut body = Message::Open(open).encode_body();
    assert_eq!(body[0] & 0x18, 0x08, "--delete is bit 3");
    body[0] = (body[0] & !0x18) | 0x10;
    assert!(matches!(
        Message::decode(code::OPEN, &body),
        Err(DecodeError::Malformed(_))
    ));
    let plain = Message::Deleted {
        path: b"x".to_vec(),
        dir: false,
        failed: None,
    };
    let body = plain.encode_body();
    assert_eq!(body.len(), 2 + 1 + 1, "a path and the flags, nothing more");
    assert_eq!(Message::decode(code::DELETED, &body).unwrap(), plain);
}

#[test]
fn an_opened_with_an_unknown_pacing_is_malformed() {
    for (v, ok) in [(0u8, true), (1, true), (2, true), (3, false), (0xff, false)] {
        let mut w = Writer::default();
        w.u16(1).u32(1000).u8(v);
        w.bytes(b"blake3").bytes(b"tcp").bytes(b"fair");
        let r = Message::decode(code::OPENED, &w.buf);
        assert_eq!(r.is_ok(), ok, "{v}: {r:?}");
        if !ok {
            assert!(r.unwrap_err().to_string().contains("unknown pacing"));
        }
    }
    assert_eq!(Pacing::User.name(), "user space");
}

#[test]
fn an_open_with_too_many_filter_rules_is_refused_before_allocation() {
    let mut w = Writer::default();
    w.u16(crate::MAX_FILTER_RULES as u16 + 1);
    let r = filters_only(&w.buf);
    assert!(matches!(r, Err(DecodeError::TooLarge { .. })), "{r:?}");
    let mut w = Writer::default();
    w.u16(1).bytes(&vec![b'a'; crate::MAX_FILTER_RULE + 1]);
    assert!(filters_only(&w.buf).is_err());
}

/// Decodes an `Open` whose every field before the filter rules is empty, then `rest`.
fn filters_only(rest: &[u8]) -> Result<Message, DecodeError> {
    let mut w = Writer::default();
    w.u8(0).u16(1).u32(0);
    w.bytes(b"auto").bytes(b"sendfile").u32(0).u64(0).u64(0);
    for t in ["blake3", "tcp", "fair", "", ""] {
        w.bytes(t.as_bytes());
    }
    w.buf.extend_from_slice(rest);
    Message::decode(code::OPEN, &w.buf)
}

#[test]
fn a_listing_of_an_unknown_kind_is_malformed() {
    let mut w = Writer::default();
    w.bytes(b"a")
        .u8(5)
        .u64(0)
        .u32(0)
        .i64(0)
        .u32(0)
        .bytes(b"")
        .u8(0);
    let r = Message::decode(code::LIST_ENTRY, &w.buf);
    assert!(r.unwrap_err().to_string().contains("unknown entry kind 5"));
}

#[test]
fn a_have_over_the_limit_is_refused_before_allocation() {
    let mut w = Writer::default();
    w.u32(0).raw(&[0; 32]).raw(&[0; 32]).u32(0).u16(u16::MAX);
    let err = Message::decode(code::HAVE, &w.buf).unwrap_err();
    assert!(err.to_string().contains("over the limit"), "{err}");
}

#[test]
fn bad_hello_magic_names_the_cause() {
    let err = Message::decode(code::HELLO, b"GET / HTTP/1.1\r\n\r\n").unwrap_err();
    assert!(err.to_string().contains("not a zcp hello"), "{err}");
}

#[test]
fn long_text_is_clipped_on_a_char_boundary() {
    let long = "é".repeat(MAX_TEXT);
    let m = Message::Error {
        code: ErrorCode::Io,
        message: long,
    };
    match Message::decode(code::ERROR, &m.encode_body()).unwrap() {
        Message::Error { message, .. } => {
            assert!(message.len() <= MAX_TEXT);
            assert!(!message.contains('\u{FFFD}'));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_sealed_error_decodes_only_through_an_opener() {
    // 0x2D is an `Error` sealed in an encrypted session: as a bare type it is no message.
    let body = Message::Error {
        code: ErrorCode::Io,
        message: "x".into(),
    }
    .encode_body();
    assert!(Message::decode(code::SEALED_ERROR, &body).is_err());
}
