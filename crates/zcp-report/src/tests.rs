//! Snapshot tests of every output format, fed with fixed events so the text never depends on
//! the machine.

use zcp_session::{
    Cpu, Event, Failure, Interval, Phase, Progress, RateLimit, Reporter, Retry, ServerEvent,
    ServerReporter, Start, StreamInterval, Summary, TcpStats, UdpReport, VerifyMode,
};

use crate::{Human, JsonDoc, JsonStream, ServerLog};

fn events(verify: bool) -> Vec<Event> {
    let limit = verify.then(|| RateLimit {
        bits_per_second: 15_000_000_000,
        pacing: "kernel".into(),
    });
    let start = Start {
        local: "127.0.0.1:40122".parse().unwrap(),
        remote: "127.0.0.1:5310".parse().unwrap(),
        session: "3fa2c1d4e5f60718293a4b5c6d7e8f90".into(),
        direction: "send",
        source: "data.bin".into(),
        target: "incoming/data.bin".into(),
        size: Some(4 << 30),
        chunk_size: 64 << 20,
        block_size: 8 << 20,
        streams: 2,
        sender_engine: "sendfile".into(),
        sender_note: None,
        receiver_engine: if verify {
            "direct".into()
        } else {
            "null".into()
        },
        receiver_note: verify
            .then(|| "auto chose direct: O_DIRECT works on this ext4 destination".into()),
        verify,
        verify_mode: VerifyMode::Blake3,
        limit_rate: limit.clone(),
    };
    let tcp = TcpStats {
        rtt_us: 52,
        rttvar_us: 9,
        snd_cwnd: 320,
        snd_mss: 65483,
        total_retrans: 0,
    };
    // The unverified run goes over UDP (its counters in intervals and the summary).
    let udp = (!verify).then(|| UdpReport {
        mode: "fair".into(),
        engines: "gso+sendmmsg / gro+recvmmsg".into(),
        payload: 8192,
        sent: 400_123,
        received: 0,
        lost: 4_001,
        lost_bytes: 4_001 * 8192,
        resent: 4_050,
        resent_bytes: 4_050 * 8192,
        receiver_drops: 12,
        rejected: 0,
        duplicates: 0,
        rate_bits: 9_400_000_000,
        cuts: 3,
    });
    let iv = |start: f64, end: f64, bytes: u64| {
        let phase = if bytes == 0 {
            Phase::Syncing
        } else {
            Phase::Sending
        };
        Event::Interval(Interval {
            progress: Progress {
                phase,
                bytes: ((end / 2.4) * (4u64 << 30) as f64) as u64,
                total_bytes: Some(4 << 30),
                files: 0,
                total_files: Some(1),
                seconds: end,
            },
            start,
            end,
            streams: vec![
                StreamInterval {
                    id: 0,
                    bytes: bytes / 2,
                    tcp: Some(tcp),
                    retransmits: 0,
                },
                StreamInterval {
                    id: 1,
                    bytes: bytes - bytes / 2,
                    tcp: Some(tcp),
                    retransmits: 1,
                },
            ],
            udp: udp.clone(),
        })
    };
    vec![
        Event::Retry(Retry {
            attempt: 2,
            attempts: 4,
            reason: "cannot connect to 127.0.0.1:5310: Connection refused (os error 111)".into(),
            wait: 2.0,
        }),
        Event::Start(start),
        Event::Progress(Progress {
            phase: Phase::Sending,
            bytes: 1 << 30,
            total_bytes: Some(4 << 30),
            files: 0,
            total_files: Some(1),
            seconds: 0.5,
        }),
        iv(0.0, 1.0, 2_040_109_465),
        iv(1.0, 2.0, 2_147_483_648),
        iv(2.0, 2.1, 107_374_183),
        iv(2.1, 2.4, 0),
        Event::Notice(
            "data.bin: resumed; 1.00 GiB were already on the receiver and not sent again".into(),
        ),
        Event::Failed(Failure {
            path: "dir/fifo".into(),
            code: "source",
            message: "is a FIFO; only files, directories and links are sent".into(),
        }),
        Event::Deleted(zcp_session::Deleted {
            path: "dir/old\x1b[2J".into(),
            dir: true,
            dry_run: true,
        }),
        Event::Summary(Summary {
            bytes: 4 << 30,
            bytes_sent: 3 << 30,
            bytes_skipped: 1 << 30,
            files: 1,
            left_existing: 3,
            deleted: 5,
            deleted_dry_run: false,
            entries: 2,
            resent_chunks: 1,
            failed: 1,
            failures: vec![Failure {
                path: "dir/fifo".into(),
                code: "source",
                message: "is a FIFO".into(),
            }],
            seconds: 2.45,
            send_seconds: 2.1,
            sender_engine: "sendfile".into(),
            receiver_engine: if verify {
                "direct".into()
            } else {
                "null".into()
            },
            sender_data_cpu: Cpu {
                user: 0.01,
                sys: 0.62,
            },
            sender_cpu: Cpu {
                user: 0.61,
                sys: 1.02,
            },
            receiver_cpu: Cpu {
                user: 0.98,
                sys: 1.5,
            },
            sender_max_rss: 12 << 20,
            receiver_max_rss: 30 << 20,
            retransmits: 0,
            verified: verify,
            verify_mode: VerifyMode::Blake3,
            stored: verify,
            digest: verify.then(|| "9f".repeat(32)),
            target: "incoming/data.bin".into(),
            retries: 1,
            limit_rate: limit,
            udp,
            encryption: verify.then_some(zcp_session::Encryption {
                cipher: "AES-256-GCM",
                key_exchange: "X25519",
                sender_seconds: 0.41,
                receiver_seconds: 0.38,
            }),
        }),
    ]
}

#[test]
fn progress_lines() {
    let p = |phase, bytes, total: Option<u64>, files, total_files: Option<u64>, seconds| Progress {
        phase,
        bytes,
        total_bytes: total,
        files,
        total_files,
        seconds,
    };
    let lines = [
        crate::progress_line(
            &p(Phase::Connecting, 0, Some(4 << 30), 0, Some(1), 0.0),
            0.0,
        ),
        crate::progress_line(&p(Phase::Checking, 0, None, 0, None, 0.2), 0.0),
        crate::progress_line(
            &p(Phase::Sending, 1 << 30, Some(4 << 30), 0, Some(1), 1.0),
            8.0e9,
        ),
        crate::progress_line(
            &p(Phase::Sending, 3 << 20, Some(10 << 20), 3, Some(10), 0.5),
            5.0e7,
        ),
        crate::progress_line(
            &p(Phase::Syncing, 4 << 30, Some(4 << 30), 0, Some(1), 4.0),
            0.0,
        ),
        crate::progress_line(
            &p(Phase::Done, 4 << 30, Some(4 << 30), 1, Some(1), 4.2),
            0.0,
        ),
        crate::progress_line(&p(Phase::Sending, 5 << 20, None, 2, None, 1.0), 4.0e7),
    ];
    for l in &lines[2..] {
        assert!(l.contains("ETA"), "{l}");
    }
    assert!(
        lines[2].contains("25%") && lines[2].contains("ETA 0:00:03"),
        "{}",
        lines[2]
    );
    insta::assert_snapshot!(lines.join("\n"));
}

#[test]
fn the_progress_line_fits_the_terminal() {
    let p = |phase, bytes, total, files, total_files| Progress {
        phase,
        bytes,
        total_bytes: Some(total),
        files,
        total_files: Some(total_files),
        seconds: 3.0,
    };
    let wide = p(Phase::Syncing, 3 << 30, 300 << 30, 1200, 4000);
    let full = crate::progress_line(&wide, 9.41e9);
    assert!(full.chars().count() > 100, "{full}");
    // Wide enough: all of it.
    assert_eq!(crate::progress_line_within(&wide, 9.41e9, 200), full);
    let mut seen = Vec::new();
    for width in [120, 100, 80, 72, 60, 48, 40, 30, 20, 1] {
        let l = crate::progress_line_within(&wide, 9.41e9, width);
        assert!(
            l.chars().count() < width,
            "{width}: {} chars: {l}",
            l.chars().count()
        );
        seen.push(format!("{width:>3}: {l}"));
    }
    // In 80 columns, what matters stays: the amount, the percentage, the rate, the ETA.
    let l80 = crate::progress_line_within(&wide, 9.41e9, 80);
    for part in ["3.00 GiB of 300 GiB", "1%", "9.41 Gbits/sec", "ETA "] {
        assert!(l80.contains(part), "{part}: {l80}");
    }
    insta::assert_snapshot!(seen.join("\n"));
}

#[test]
fn human_report() {
    let mut h = Human::new(Vec::new());
    for e in events(true) {
        h.event(&e);
    }
    insta::assert_snapshot!(String::from_utf8(h.into_inner()).unwrap());
}

#[test]
fn human_report_null_receiver() {
    let mut h = Human::new(Vec::new());
    for e in events(false) {
        h.event(&e);
    }
    insta::assert_snapshot!(String::from_utf8(h.into_inner()).unwrap());
}

/// The events of a durable transfer run with `--verify none`: stored, not verified.
fn events_unverified() -> Vec<Event> {
    let mut all = events(true);
    for e in &mut all {
        match e {
            Event::Start(s) => {
                s.verify = false;
                s.verify_mode = VerifyMode::None;
            }
            Event::Summary(s) => {
                s.verified = false;
                s.verify_mode = VerifyMode::None;
                s.digest = None;
            }
            _ => {}
        }
    }
    all
}

#[test]
fn failures_for_one_reason_fold_into_one_line() {
    let fail = |path: &str, message: &str| {
        Event::Failed(Failure {
            path: path.into(),
            code: "bad-path",
            message: message.into(),
        })
    };
    let wrong = "destination 'dst' is not a directory";
    let mut h = Human::new(Vec::new());
    for p in ["dst/", "dst/t2", "t2/top", "dst/t2/c"] {
        h.event(&fail(p, wrong));
    }
    h.event(&fail("t2/x", "no space"));
    h.event(&fail("t2/y", wrong));
    h.event(&fail("t2/z", wrong));
    h.event(&Event::Notice("a note".into()));
    // Failures of each file's own are never folded: each damaged or unreadable file is named.
    for (p, code, message) in [
        ("v1", "verify", "the whole-file digests differ"),
        ("v2", "verify", "the whole-file digests differ"),
        ("s1", "source", "cannot be opened (Permission denied)"),
        ("s2", "source", "cannot be opened (Permission denied)"),
    ] {
        h.event(&Event::Failed(Failure {
            path: p.into(),
            code,
            message: message.into(),
        }));
    }
    h.event(&fail("t2/w", wrong));
    h.event(&fail("t2/v", wrong));
    // A session that ends without its summary still says what was folded.
    h.finish();
    let text = String::from_utf8(h.into_inner()).unwrap();
    assert_eq!(
        text,
        "failed:   dst/: destination 'dst' is not a directory [bad-path]\n\
         failed:   and 3 more entries for the same reason\n\
         failed:   t2/x: no space [bad-path]\n\
         failed:   t2/y: destination 'dst' is not a directory [bad-path]\n\
         failed:   and 1 more entry for the same reason\n\
         note:     a note\n\
         failed:   v1: the whole-file digests differ [verify]\n\
         failed:   v2: the whole-file digests differ [verify]\n\
         failed:   s1: cannot be opened (Permission denied) [source]\n\
         failed:   s2: cannot be opened (Permission denied) [source]\n\
         failed:   t2/w: destination 'dst' is not a directory [bad-path]\n\
         failed:   and 1 more entry for the same reason\n"
    );
}

#[test]
fn an_unverified_transfer_says_so_in_its_start_and_summary_and_never_says_verified() {
    let mut h = Human::new(Vec::new());
    for e in events_unverified() {
        h.event(&e);
    }
    let text = String::from_utf8(h.into_inner()).unwrap();
    assert!(
        text.contains("Verify: not verified (--verify none)"),
        "start: {text}"
    );
    assert!(
        text.contains("stored durably, not verified (--verify none)"),
        "summary: {text}"
    );
    assert!(text.contains("Verified: no (--verify none)"), "{text}");
    assert!(!text.contains("and verified"), "{text}");
    assert!(!text.contains("digest 9f"), "{text}");
    assert!(!text.contains("null receiver"), "{text}");

    // Into memory: received, not verified; never "discarded".
    let mut h = Human::new(Vec::new());
    for mut e in events_unverified() {
        if let Event::Summary(s) = &mut e {
            s.stored = false;
            s.receiver_engine = "mem".into();
        }
        h.event(&e);
    }
    let text = String::from_utf8(h.into_inner()).unwrap();
    assert!(
        text.contains("received into memory, not verified (--verify none)"),
        "{text}"
    );

    let mut j = JsonDoc::new(Vec::new());
    for e in events_unverified() {
        j.event(&e);
    }
    let v: serde_json::Value = serde_json::from_slice(&j.into_inner()).unwrap();
    assert_eq!(v["start"]["verify_mode"], "none");
    assert_eq!(v["start"]["verify"], false);
    assert_eq!(v["end"]["verify_mode"], "none");
    assert_eq!(v["end"]["verified"], false);
    assert_eq!(v["end"]["stored"], true);
    assert!(v["end"]["digest"].is_null());

    let mut j = JsonStream::new(Vec::new());
    for e in events_unverified() {
        j.event(&e);
    }
    let text = String::from_utf8(j.into_inner()).unwrap();
    let modes: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "start" || v["type"] == "end")
        .map(|v| v["data"]["verify_mode"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(modes, ["none", "none"]);
}

/// A summary not verified in a session that asked for verification (no longer reachable
/// through a role, which fails such files; issue 24) never blames `--verify none` or the
/// `null` receiver: the user asked for neither.
#[test]
fn an_unverified_summary_of_a_verified_session_blames_no_flag_it_was_not_given() {
    for (stored, engine) in [(true, "rw"), (false, "mem")] {
        let mut h = Human::new(Vec::new());
        for mut e in events(true) {
            if let Event::Summary(s) = &mut e {
                s.verified = false;
                s.stored = stored;
                s.digest = None;
                s.receiver_engine = engine.into();
            }
            h.event(&e);
        }
        let text = String::from_utf8(h.into_inner()).unwrap();
        assert!(!text.contains("--verify none"), "{text}");
        assert!(!text.contains("null receiver"), "{text}");
        assert!(!text.contains("discarded"), "{text}");
        assert!(text.contains("Verified: no\n"), "{text}");
    }
}

#[test]
fn json_document() {
    let mut j = JsonDoc::new(Vec::new());
    for e in events(true) {
        j.event(&e);
    }
    let text = String::from_utf8(j.into_inner()).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    // The fields the issue names as the public interface.
    for p in [
        "/end/sum/bytes",
        "/end/sum/seconds",
        "/end/sum/bits_per_second",
        "/end/engines/sender",
        "/end/engines/receiver",
        "/end/cpu/sender/user",
        "/end/cpu/sender/sys",
        "/end/cpu/receiver/user",
        "/end/cpu/receiver/sys",
        "/end/verified",
        "/end/verify_mode",
        "/start/verify_mode",
        "/end/digest",
        "/intervals",
    ] {
        assert!(v.pointer(p).is_some(), "missing {p}");
    }
    insta::assert_snapshot!(text);
}

#[test]
fn json_document_on_failure() {
    let mut j = JsonDoc::new(Vec::new());
    j.event(&events(true)[1]);
    j.fail(
        "the receiver did not commit the file: no space on the receiver [no-space]",
        4,
    );
    insta::assert_snapshot!(String::from_utf8(j.into_inner()).unwrap());
}

#[test]
fn json_stream_lines() {
    let mut j = JsonStream::new(Vec::new());
    for e in events(true) {
        j.event(&e);
    }
    j.fail("example failure", 1);
    let text = String::from_utf8(j.into_inner()).unwrap();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["version"], 1);
        assert!(v["type"].is_string());
    }
    insta::assert_snapshot!(text);
}

#[test]
fn server_lines() {
    let evs = [
        ServerEvent::Listening {
            addr: "127.0.0.1:5310".parse().unwrap(),
            root: "/data".into(),
        },
        ServerEvent::Rejected {
            peer: "127.0.0.1:4000".parse().unwrap(),
            reason: "not a zcp hello (bad magic bytes)".into(),
            cause: "protocol",
        },
        ServerEvent::SessionStart {
            peer: "127.0.0.1:4001".parse().unwrap(),
            session: "00112233445566778899aabbccddeeff".into(),
            direction: "push",
            streams: 4,
            identity: "observatory".into(),
            export: "incoming".into(),
        },
        ServerEvent::FileDone {
            session: "00112233445566778899aabbccddeeff".into(),
            target: "a/b.bin".into(),
            bytes: 1 << 30,
            skipped: 1 << 29,
            seconds: 0.5,
            engine: "direct".into(),
            verified: true,
            stored: true,
            digest: None,
        },
        ServerEvent::FileFailed {
            session: "00112233445566778899aabbccddeeff".into(),
            target: "/etc".into(),
            reason: "absolute".into(),
            code: "bad-path",
        },
        ServerEvent::SessionEnd {
            session: "00112233445566778899aabbccddeeff".into(),
            ok: true,
            reason: None,
            files: 1,
            bytes: 1 << 30,
            seconds: 1.0,
            resent_chunks: 0,
            failed: 0,
            left: 0,
            deleted: 0,
        },
    ];
    let log = ServerLog::new(Vec::new(), Vec::new());
    let mut lines: Vec<String> = evs.iter().map(|e| log.line(e)).collect();
    // After its end, a session's lines no longer name its peer; a pull's files are "sent".
    let pull = [
        ServerEvent::SessionStart {
            peer: "[::1]:4002".parse().unwrap(),
            session: "ffeeddccbbaa99887766554433221100".into(),
            direction: "pull",
            streams: 1,
            identity: "default".into(),
            export: "root".into(),
        },
        ServerEvent::FileDone {
            session: "ffeeddccbbaa99887766554433221100".into(),
            target: "run1/a.dat".into(),
            bytes: 1 << 20,
            skipped: 0,
            seconds: 0.25,
            engine: "splice".into(),
            verified: true,
            stored: true,
            digest: None,
        },
    ];
    lines.extend(pull.iter().map(|e| log.line(e)));
    lines.push(log.line(&evs[4]));
    // The real log adds an RFC 3339 timestamp in front of each line.
    log.event(&evs[0]);
    let (out, _) = (log.out.into_inner().unwrap(), ());
    let first = String::from_utf8(out).unwrap();
    let stamp = first.split(' ').next().unwrap();
    assert!(humantime::parse_rfc3339(stamp).is_ok(), "{first}");
    assert!(
        first.ends_with("zcp: listening on 127.0.0.1:5310, root /data\n"),
        "{first}"
    );
    insta::assert_snapshot!(lines.join("\n"));
}

#[test]
fn the_start_up_count_of_partial_files_points_at_zcp_clean() {
    let log = ServerLog::new(Vec::new(), Vec::new());
    let line = |capped| {
        log.line(&ServerEvent::Leftovers {
            root: "/data/in".into(),
            files: 2,
            bytes: 3 << 30,
            capped,
        })
    };
    assert_eq!(
        line(None),
        "zcp: 2 partial files of interrupted transfers (3.00 GiB on disk) under /data/in: running the same transfer again resumes or replaces them; `zcp clean /data/in` lists and removes them"
    );
    assert_eq!(
        line(Some(100_000)),
        "zcp: 2 partial files of interrupted transfers (3.00 GiB on disk) in the first 100000 entries under /data/in (not all were looked at); `zcp clean /data/in` lists and removes them all"
    );
}

/// `-v`'s line per file: only when asked for, its rate of the bytes moved (not those already
/// there), and a name from the network escaped (a hostile server names the files of a get).
#[test]
fn a_line_per_file_with_v_escaped() {
    let arrived = Event::File(zcp_session::Arrived {
        path: "run/\u{1b}[2Jevil".into(),
        bytes: 4 << 20,
        skipped: 2 << 20,
        seconds: 0.5,
        verified: true,
        digest: Some("ab".repeat(32)),
    });
    let mut quiet = Human::new(Vec::new());
    quiet.event(&arrived);
    assert_eq!(String::from_utf8(quiet.into_inner()).unwrap(), "");
    let mut h = Human::new(Vec::new()).with_files(true);
    h.event(&arrived);
    let out = String::from_utf8(h.into_inner()).unwrap();
    assert_eq!(
        out,
        "file:     run/\\u{1b}[2Jevil 4.00 MiB in 0.50 s, 33.6 Mbits/sec, 2.00 MiB already there, verified\n"
    );
    let mut s = JsonStream::new(Vec::new());
    s.event(&arrived);
    let line: serde_json::Value = serde_json::from_slice(&s.into_inner()).unwrap();
    assert_eq!(line["type"], "file");
    assert_eq!(line["data"]["bytes_skipped"], 2 << 20);
    assert_eq!(
        line["data"]["bits_per_second"],
        (2u64 << 20) as f64 * 8.0 / 0.5
    );
}
