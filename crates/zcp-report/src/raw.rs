//! The reports of a bare byte stream (`zcp send --raw`, `zcp recv`): text and JSON for
//! [`RawStart`] and [`RawEnd`]. Intervals and the progress line are a session's.

use std::io::Write;

use serde_json::{Value, json};
use zcp_session::{RawEnd, RawStart};

use crate::json::connected;
use crate::units::{bits_per_second, bytes, rate, size};

/// `s` with every text that may come from outside (paths, notes) escaped.
pub(crate) fn clean_start(s: &RawStart) -> RawStart {
    let t = |s: &str| zcp_wire::escape_text(s);
    RawStart {
        path: t(&s.path),
        engine: t(&s.engine),
        engine_note: s.engine_note.as_deref().map(t),
        ..s.clone()
    }
}

/// `e` with every text escaped.
pub(crate) fn clean_end(e: &RawEnd) -> RawEnd {
    let t = |s: &str| zcp_wire::escape_text(s);
    RawEnd {
        engine: t(&e.engine),
        blake3: e.blake3.as_deref().map(t),
        checked: e.checked.iter().map(|c| t(c)).collect(),
        stored: e.stored.as_deref().map(t),
        ..e.clone()
    }
}

/// The text report's opening lines.
pub(crate) fn human_start(o: &mut impl Write, s: &RawStart) -> std::io::Result<()> {
    if s.direction == "send" {
        writeln!(
            o,
            "Connecting to host {}, port {}: a bare byte stream (no key, no protocol)",
            s.remote.ip(),
            s.remote.port()
        )?;
    } else {
        writeln!(
            o,
            "Accepted a connection from {} port {}: a bare byte stream (no authentication)",
            s.remote.ip(),
            s.remote.port()
        )?;
    }
    writeln!(
        o,
        "[  0] local {} port {} connected to {} port {}",
        s.local.ip(),
        s.local.port(),
        s.remote.ip(),
        s.remote.port()
    )?;
    let what = match s.size {
        Some(n) if s.direction == "send" => format!("Sending {} ({})", s.path, size(n)),
        Some(n) => format!("Receiving {} into {}", size(n), s.path),
        None => format!("Receiving into {}", s.path),
    };
    writeln!(o, "{what}, engine {}", s.engine)?;
    if let Some(n) = &s.engine_note {
        writeln!(o, "  {n}")?;
    }
    if let Some(r) = &s.limit_rate {
        writeln!(
            o,
            "Rate cap: {}, pacing: {}",
            rate(r.bits_per_second as f64),
            r.pacing
        )?;
    }
    Ok(())
}

/// The text report's closing lines.
pub(crate) fn human_end(o: &mut impl Write, e: &RawEnd) -> std::io::Result<()> {
    writeln!(o, "- - - - - - - - - - - - - - - - - - - - - - - - -")?;
    writeln!(
        o,
        "[ ID] Interval           Transfer     Bitrate         Retr"
    )?;
    let what = if e.direction == "send" {
        "sent"
    } else {
        "received"
    };
    writeln!(
        o,
        "[  0] {:>6.2}-{:<6.2} sec  {:>11}  {:>15} {:>4}  {what}",
        0.0,
        e.seconds,
        bytes(e.bytes),
        rate(bits_per_second(e.bytes, e.seconds)),
        e.retransmits
    )?;
    writeln!(o, "Engine:   {}", e.engine)?;
    if let Some(d) = &e.blake3 {
        writeln!(o, "BLAKE3:   {d} (unkeyed, of the bytes that arrived)")?;
    }
    if !e.checked.is_empty() {
        writeln!(o, "Checked:  {}", e.checked.join(", "))?;
    }
    match (&e.stored, e.direction) {
        (Some(t), _) => writeln!(o, "Stored:   {t} (fsync'd, then renamed into place)")?,
        (None, "recv") => writeln!(o, "Stored:   no ({} receiver)", e.engine)?,
        _ => {}
    }
    if e.discarded > 0 {
        writeln!(o, "Dropped:  {} the peer sent back", bytes(e.discarded))?;
    }
    writeln!(
        o,
        "CPU:      {:.2} user + {:.2} sys s; peak RSS {}",
        e.cpu.user,
        e.cpu.sys,
        size(e.max_rss)
    )
}

/// The JSON document's `start`.
pub(crate) fn json_start(s: &RawStart) -> Value {
    json!({
        "version": format!("zcp {}", env!("CARGO_PKG_VERSION")),
        "mode": "raw",
        "direction": s.direction,
        "connected": connected(s.local, s.remote),
        "path": s.path,
        "size": s.size,
        "engine": s.engine,
        "engine_note": s.engine_note,
        "authenticated": false,
        "limit_rate": s.limit_rate.as_ref().map(|r| json!({
            "bits_per_second": r.bits_per_second, "pacing": r.pacing
        })),
    })
}

/// The JSON document's `end`.
pub(crate) fn json_end(e: &RawEnd) -> Value {
    json!({
        "mode": "raw",
        "direction": e.direction,
        "sum": {
            "start": 0.0,
            "end": e.seconds,
            "seconds": e.seconds,
            "bytes": e.bytes,
            "bits_per_second": bits_per_second(e.bytes, e.seconds),
            "retransmits": e.retransmits,
        },
        "engine": e.engine,
        "blake3": e.blake3,
        "checked": e.checked,
        "stored": e.stored.is_some(),
        "target": e.stored,
        "discarded_bytes": e.discarded,
        "cpu": { "user": e.cpu.user, "sys": e.cpu.sys, "total": e.cpu.total() },
        "memory": { "max_rss_bytes": e.max_rss },
    })
}

#[cfg(test)]
mod tests {
    use zcp_session::{
        Cpu, Event, Interval, Phase, Progress, RateLimit, RawEnd, RawStart, Reporter,
        StreamInterval, TcpStats,
    };

    use crate::{Human, JsonDoc, JsonStream};

    /// A `zcp recv` (or, with `send`, a `zcp send --raw`) as its events.
    fn events(send: bool) -> Vec<Event> {
        let direction = if send { "send" } else { "recv" };
        let (local, remote) = if send {
            ("127.0.0.1:40122", "127.0.0.1:9000")
        } else {
            ("127.0.0.1:9000", "127.0.0.1:40122")
        };
        let progress = |bytes, done: bool| Progress {
            phase: if done { Phase::Done } else { Phase::Sending },
            bytes,
            total_bytes: Some(1 << 30),
            files: u64::from(done),
            total_files: Some(1),
            seconds: 0.5,
        };
        vec![
            Event::RawStart(RawStart {
                direction,
                local: local.parse().unwrap(),
                remote: remote.parse().unwrap(),
                // A name with a terminal escape in it: printed escaped.
                path: "data\u{1b}[2J.bin".into(),
                size: Some(1 << 30),
                engine: if send { "sendfile" } else { "direct" }.into(),
                engine_note: (!send)
                    .then(|| "auto chose direct: O_DIRECT works on this ext4 destination".into()),
                limit_rate: send.then(|| RateLimit {
                    bits_per_second: 5_000_000_000,
                    pacing: "user space".into(),
                }),
            }),
            Event::Progress(progress(1 << 29, false)),
            Event::Interval(Interval {
                start: 0.0,
                end: 1.0,
                streams: vec![StreamInterval {
                    id: 0,
                    bytes: 1 << 30,
                    tcp: send.then_some(TcpStats {
                        rtt_us: 40,
                        rttvar_us: 8,
                        snd_cwnd: 300,
                        snd_mss: 65483,
                        total_retrans: 0,
                    }),
                    retransmits: 0,
                }],
                progress: progress(1 << 30, false),
                udp: None,
            }),
            Event::Progress(progress(1 << 30, true)),
            Event::RawEnd(RawEnd {
                direction,
                bytes: 1 << 30,
                seconds: 1.25,
                engine: if send { "sendfile" } else { "direct" }.into(),
                blake3: (!send).then(|| "ab".repeat(32)),
                checked: if send {
                    Vec::new()
                } else {
                    vec![
                        "size 1073741824 as expected".into(),
                        "BLAKE3 as expected".into(),
                    ]
                },
                stored: (!send).then(|| "data\u{1b}[2J.bin".into()),
                cpu: Cpu {
                    user: 0.12,
                    sys: 0.48,
                },
                max_rss: 6 << 20,
                retransmits: 0,
                discarded: 0,
            }),
        ]
    }

    fn human(send: bool) -> String {
        let mut h = Human::new(Vec::new());
        for e in events(send) {
            h.event(&e);
        }
        String::from_utf8(h.into_inner()).unwrap()
    }

    #[test]
    fn raw_human_send() {
        let text = human(true);
        assert!(!text.contains('\u{1b}'), "{text}");
        insta::assert_snapshot!(text);
    }

    #[test]
    fn raw_human_recv() {
        let text = human(false);
        assert!(!text.contains('\u{1b}'), "{text}");
        insta::assert_snapshot!(text);
    }

    #[test]
    fn raw_json_document_and_lines() {
        let mut j = JsonDoc::new(Vec::new());
        let mut s = JsonStream::new(Vec::new());
        for e in events(false) {
            j.event(&e);
            s.event(&e);
        }
        let doc = String::from_utf8(j.into_inner()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
        for p in [
            "/start/mode",
            "/start/authenticated",
            "/end/sum/bytes",
            "/end/blake3",
            "/end/stored",
            "/end/target",
            "/intervals/0/sum/bytes",
        ] {
            assert!(v.pointer(p).is_some(), "missing {p}");
        }
        let lines = String::from_utf8(s.into_inner()).unwrap();
        insta::assert_snapshot!(format!("{doc}\n{lines}"));
    }
}
