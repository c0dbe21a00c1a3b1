use std::net::SocketAddr;

use zcp_session::ServerEvent;

use super::Monitor;
use super::status::{SAMPLES, Throughput};

fn peer() -> SocketAddr {
    "127.0.0.1:40000".parse().unwrap()
}

fn start(m: &Monitor, session: &str, direction: &'static str, identity: &str, now: f64) {
    m.event_at(
        &ServerEvent::SessionStart {
            peer: peer(),
            session: session.into(),
            direction,
            streams: 4,
            identity: identity.into(),
            export: "incoming".into(),
        },
        now,
    );
}

fn progress(m: &Monitor, session: &str, bytes: u64, last: Option<&str>, now: f64) {
    m.event_at(
        &ServerEvent::Progress {
            session: session.into(),
            phase: "sending",
            bytes,
            resumed: 0,
            total_bytes: Some(10_000_000),
            files: 1,
            total_files: Some(2),
            last: last.map(Into::into),
        },
        now,
    );
}

fn end(m: &Monitor, session: &str, ok: bool, bytes: u64, now: f64) {
    m.event_at(
        &ServerEvent::SessionEnd {
            session: session.into(),
            ok,
            reason: (!ok).then(|| "lost\x1b[2J the connection".into()),
            files: 2,
            bytes,
            seconds: 3.0,
            resent_chunks: 3,
            failed: 0,
            left: 0,
            deleted: 0,
        },
        now,
    );
}

/// The value of the sample line that starts with `name` (name and labels, exactly).
fn value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

#[test]
fn events_in_give_the_metrics_out() {
    let m = Monitor::new();
    m.event_at(
        &ServerEvent::Leftovers {
            root: "/srv".into(),
            files: 3,
            bytes: 4096,
            capped: None,
        },
        0.1,
    );
    m.event_at(
        &ServerEvent::Rejected {
            peer: peer(),
            reason: "bad key".into(),
            cause: "auth",
        },
        0.2,
    );
    start(&m, "aa", "push", "observatory", 1.0);
    start(&m, "bb", "pull", "lab", 1.0);
    m.event_at(
        &ServerEvent::Engines {
            session: "aa".into(),
            sender: "sendfile".into(),
            receiver: "splice".into(),
        },
        1.1,
    );
    progress(&m, "aa", 1_000_000, None, 2.0);
    progress(&m, "bb", 500, None, 2.0);
    let t = m.metrics_text_at(2.5);
    assert_eq!(value(&t, "zcp_sessions_active"), Some(2.0), "{t}");
    assert_eq!(
        value(
            &t,
            "zcp_received_bytes_total{export=\"incoming\",identity=\"observatory\"}"
        ),
        Some(1e6),
        "{t}"
    );
    m.event_at(
        &ServerEvent::FileDone {
            session: "aa".into(),
            target: "a.bin".into(),
            bytes: 2_000_000,
            skipped: 0,
            seconds: 1.5,
            engine: "splice".into(),
            verified: true,
            stored: true,
            digest: None,
        },
        2.6,
    );
    m.event_at(
        &ServerEvent::FileFailed {
            session: "aa".into(),
            target: "b.bin".into(),
            reason: "digest differs".into(),
            code: "verify",
        },
        2.7,
    );
    // The end's byte count tops up what progress counted.
    end(&m, "aa", true, 2_000_000, 3.0);
    end(&m, "bb", false, 800, 3.0);
    m.event_at(
        &ServerEvent::SessionRefused {
            session: "cc".into(),
            peer: peer(),
            identity: "lab".into(),
            export: Some("incoming".into()),
            direction: Some("push"),
            cause: "access",
            reason: "may not write".into(),
        },
        3.0,
    );
    // Connections closed without a byte (zcp doctor's RTT probes) are not refusals.
    m.event_at(
        &ServerEvent::Shed {
            evicted: 0,
            expired: 0,
            gave_up: 0,
            probes: 5,
            refused: 0,
            descriptors: 0,
            pending: 0,
            max: 64,
            busiest: None,
        },
        3.1,
    );
    let t = m.metrics_text_at(3.5);
    for (name, want) in [
        ("zcp_sessions_active", 0.0),
        ("zcp_sessions_total{outcome=\"ok\"}", 1.0),
        ("zcp_sessions_total{outcome=\"failed\"}", 1.0),
        (
            "zcp_received_bytes_total{export=\"incoming\",identity=\"observatory\"}",
            2e6,
        ),
        (
            "zcp_sent_bytes_total{export=\"incoming\",identity=\"lab\"}",
            800.0,
        ),
        ("zcp_files_committed_total{direction=\"push\"}", 1.0),
        ("zcp_resent_chunks_total", 6.0),
        ("zcp_verify_failures_total", 1.0),
        ("zcp_refused_connections_total{cause=\"auth\"}", 1.0),
        ("zcp_refused_connections_total{cause=\"access\"}", 1.0),
        ("zcp_probe_connections_total", 5.0),
        (
            "zcp_engines_chosen_total{side=\"sender\",engine=\"sendfile\"}",
            1.0,
        ),
        (
            "zcp_engines_chosen_total{side=\"receiver\",engine=\"splice\"}",
            1.0,
        ),
        ("zcp_part_files_pending", 3.0),
        ("zcp_part_files_pending_bytes", 4096.0),
    ] {
        assert_eq!(value(&t, name), Some(want), "{name} in\n{t}");
    }
    assert!(!t.contains("cause=\"protocol\""), "{t}");
    assert!(t.contains("# HELP zcp_rate_bytes_per_second "), "{t}");
    // Prometheus's text format: a counter's HELP and TYPE name its samples.
    assert!(t.contains("# TYPE zcp_sessions_total counter\n"), "{t}");
    assert!(
        t.contains("# HELP zcp_sessions_total Sessions ended"),
        "{t}"
    );
    assert!(!t.contains("# EOF") && !t.contains("# UNIT"), "{t}");
}

#[test]
fn label_values_from_the_network_are_bounded() {
    let m = Monitor::new();
    for (i, bogus) in ["<script>alert(1)</script>", "x\"}\n# EOF", "sendfile2"]
        .iter()
        .enumerate()
    {
        let session = format!("s{i}");
        start(&m, &session, "push", "a\"b{c}\nd", 1.0);
        m.event_at(
            &ServerEvent::Engines {
                session,
                sender: (*bogus).into(),
                receiver: (*bogus).into(),
            },
            1.0,
        );
    }
    m.event_at(
        &ServerEvent::Rejected {
            peer: peer(),
            reason: "?".into(),
            cause: "made-up",
        },
        1.0,
    );
    progress(&m, "s0", 10, None, 2.0);
    let t = m.metrics_text_at(2.0);
    assert_eq!(
        value(
            &t,
            "zcp_engines_chosen_total{side=\"sender\",engine=\"other\"}"
        ),
        Some(3.0),
        "{t}"
    );
    assert_eq!(
        value(&t, "zcp_refused_connections_total{cause=\"other\"}"),
        Some(1.0),
        "{t}"
    );
    assert_eq!(
        value(
            &t,
            "zcp_received_bytes_total{export=\"incoming\",identity=\"other\"}"
        ),
        Some(10.0),
        "{t}"
    );
    assert!(!t.contains("script") && !t.contains("EOF"), "{t}");
}

#[test]
fn the_status_json_escapes_and_bounds() {
    let m = Monitor::new();
    start(&m, "aa", "push", "observatory", 0.5);
    let evil = "<img src=x onerror=alert(1)>\x1b[31m\nline";
    progress(&m, "aa", 4_000_000, Some(evil), 1.5);
    for i in 0..60 {
        m.event_at(
            &ServerEvent::FileFailed {
                session: "aa".into(),
                target: format!("{evil}{i}"),
                // Alternating, so that no two in a row share a row.
                reason: if i % 2 == 0 { "no\x07 room" } else { "full" }.into(),
                code: "no-space",
            },
            1.6,
        );
    }
    let doc: serde_json::Value = serde_json::from_str(&m.status_json_at(2.0)).unwrap();
    let a = &doc["active"][0];
    assert_eq!(a["identity"], "observatory");
    assert_eq!(a["bytes"], 4_000_000);
    // JSON carries the text, escaped for terminals (ESC, newline); the page renders it as
    // text, so the markup stays inert.
    assert_eq!(a["last"], "<img src=x onerror=alert(1)>\\u{1b}[31m\\nline");
    let recent = doc["recent"].as_array().unwrap();
    assert_eq!(recent.len(), 50);
    assert_eq!(
        recent[0]["name"],
        format!("{}59", a["last"].as_str().unwrap())
    );
    assert_eq!(recent[0]["reason"], "full");
    assert_eq!(recent[1]["reason"], "no\\u{7} room");
    assert_eq!(recent[0]["outcome"], "failed");
    // Two complete seconds so far; the 4 MB progressed was spread over 0.5..1.5.
    let samples = doc["samples"].as_array().unwrap();
    assert_eq!(samples, &[16e6, 16e6]);
}

#[test]
fn one_sessions_files_share_a_row_of_the_last_transfers() {
    let m = Monitor::new();
    start(&m, "aa", "push", "observatory", 0.5);
    start(&m, "bb", "push", "lab", 0.5);
    let done = |session: &str, name: String, at: f64| {
        m.event_at(
            &ServerEvent::FileDone {
                session: session.into(),
                target: name,
                bytes: 1000,
                skipped: 0,
                seconds: 0.5,
                engine: "rw".into(),
                verified: true,
                stored: true,
                digest: None,
            },
            at,
        );
    };
    for i in 0..500 {
        done("aa", format!("tree/f{i}"), 1.0 + f64::from(i) / 100.0);
    }
    done("bb", "other.bin".into(), 6.5);
    done("aa", "tree/late".into(), 7.0);
    let doc: serde_json::Value = serde_json::from_str(&m.status_json_at(8.0)).unwrap();
    let recent = doc["recent"].as_array().unwrap();
    assert_eq!(recent.len(), 3, "{doc}");
    assert_eq!(recent[0]["name"], "tree/late");
    assert_eq!(recent[0]["count"], 1);
    assert_eq!(recent[1]["name"], "other.bin");
    let tree = &recent[2];
    assert_eq!(tree["count"], 500, "{tree}");
    assert_eq!(tree["files"], 500);
    assert_eq!(tree["bytes"], 500_000);
    assert_eq!(tree["name"], "tree/f499");
    // From the first file's start (1.0 - 0.5) to the last one's end (5.99).
    assert_eq!(tree["seconds"], 5.49);
}

#[test]
fn the_throughput_ring_spreads_and_keeps_ten_minutes() {
    let mut t = Throughput::default();
    t.advance(0.0);
    t.add(0.5, 2.5, 2000);
    assert_eq!(t.samples(), vec![4000, 8000]);
    t.advance(3.0);
    assert_eq!(t.samples().len(), 3);
    // Rate: the last 3 complete seconds (fewer than the window): (500+1000+500)*8/3.
    assert!((t.rate() - 2000.0 * 8.0 / 3.0).abs() < 1e-6, "{}", t.rate());
    t.advance(10_000.0);
    assert_eq!(t.samples().len(), SAMPLES);
    assert_eq!(t.rate(), 0.0);
    t.add(9_999.5, 10_000.5, 1000);
    t.advance(10_001.0);
    let s = t.samples();
    assert_eq!(s.len(), SAMPLES);
    assert_eq!(s[SAMPLES - 2..], [4000, 4000]);
}
#[test]
fn the_text_format_is_prometheus_0_0_4() {
    let om = "# HELP a_bytes Bytes.\n# TYPE a_bytes counter\n# UNIT a_bytes bytes\na_bytes_total{x=\"1\"} 2\n# HELP g A gauge.\n# TYPE g gauge\ng 1\n# EOF\n";
    insta::assert_snapshot!(super::metrics::prometheus_text(om), @r#"
    # HELP a_bytes_total Bytes.
    # TYPE a_bytes_total counter
    a_bytes_total{x="1"} 2
    # HELP g A gauge.
    # TYPE g gauge
    g 1
    "#);
}

/// Bytes resumed from an earlier attempt show as the session's progress, but are neither
/// bytes received nor throughput: they did not cross the network.
#[test]
fn resumed_bytes_are_progress_not_throughput() {
    let m = Monitor::new();
    start(&m, "aa", "push", "observatory", 1.0);
    m.event_at(
        &ServerEvent::Progress {
            session: "aa".into(),
            phase: "sending",
            bytes: 9_000_000,
            resumed: 8_000_000,
            total_bytes: None,
            files: 0,
            total_files: None,
            last: None,
        },
        2.0,
    );
    let t = m.metrics_text_at(2.5);
    assert_eq!(
        value(
            &t,
            "zcp_received_bytes_total{export=\"incoming\",identity=\"observatory\"}"
        ),
        Some(1e6),
        "{t}"
    );
    let rate = value(&t, "zcp_rate_bytes_per_second").unwrap();
    assert!(rate <= 1e6, "{rate}: {t}");
    let json = m.status_json_at(2.5);
    assert!(json.contains("9000000"), "{json}");
}
