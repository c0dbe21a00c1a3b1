//! `zcp doctor` from the command line: fixture hosts (`--root`), this host, a peer on
//! loopback, `--write-sysctl`, and bad input.

use std::path::{Path, PathBuf};

use crate::util::{Env, ServerProc, both, run, text, zcp};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates/zcp-tune/fixtures")
        .join(name)
}

fn doctor(args: &[&str]) -> std::process::Output {
    let mut c = zcp();
    c.arg("doctor").args(args);
    run(c, 60)
}

fn json(o: &std::process::Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", both(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o.stdout)))
}

#[test]
fn fixture_hosts_from_the_command_line() {
    let untuned = fixture("untuned");
    let root = untuned.to_str().unwrap();
    let v = json(&doctor(&["--root", root, "--path", "/data", "--json"]));
    assert_eq!(v["target"]["bdp_bytes"], 1_250_000_000u64);
    assert!(v["counts"]["tune"].as_u64().unwrap() >= 15, "{v}");
    let fixes: Vec<&str> = v["fixes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(
        fixes.contains(&"ip link set dev ens1f0 mtu 9000"),
        "{fixes:?}"
    );
    // The table: header, sections, statuses, the fixes, the other systems.
    let o = doctor(&[
        "--root", root, "--path", "/data", "--rate", "40G", "--rtt", "50ms",
    ]);
    assert!(o.status.success(), "{}", both(&o));
    let t = text(&o.stdout);
    for want in [
        "check ",
        "recommended",
        "target: 40 Gbit/s (given: --rate) x RTT 50 ms (given: --rtt)",
        "bandwidth-delay product 250 MB (250000000 bytes)",
        "interface ens1f0",
        "TUNE",
        "sysctl -w net.core.rmem_max=500000000",
        "net.ipv4.tcp_rmem = 4096 131072 500000000",
        "net.inet.tcp.sendbuf_max = 250000000",
        "net.inet.tcp.recvspace = 125000000",
    ] {
        assert!(t.contains(want), "missing {want:?} in\n{t}");
    }
    let tuned = json(&doctor(&[
        "--root",
        fixture("tuned").to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(tuned["counts"]["tune"], 0);
    assert_eq!(tuned["fixes"], serde_json::json!([]));
}

#[test]
fn write_sysctl_writes_the_snippet_once() {
    let env = Env::new();
    let file = env.path("90-zcp.conf");
    let f = file.to_str().unwrap();
    let root = fixture("vm");
    let args = [
        "--root",
        root.to_str().unwrap(),
        "--json",
        "--write-sysctl",
        f,
    ];
    let v = json(&doctor(&args));
    let written = std::fs::read_to_string(&file).unwrap();
    assert_eq!(written, v["sysctl_conf"].as_str().unwrap());
    assert!(
        written.contains("net.core.rmem_max = 250000000\n"),
        "{written}"
    );
    // Never overwritten: the user may have edited it.
    std::fs::write(&file, "# mine\n").unwrap();
    let o = doctor(&args);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(text(&o.stderr).contains("the file exists"), "{}", both(&o));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "# mine\n");
}

#[test]
fn this_host_gives_a_complete_report_and_leaves_nothing_behind() {
    let env = Env::new();
    let data = env.mkdir("data");
    let v = json(&doctor(&["--path", data.to_str().unwrap(), "--json"]));
    let checks = v["checks"].as_array().unwrap();
    for c in checks {
        let s = c["status"].as_str().unwrap();
        assert!(["ok", "tune", "info", "unknown"].contains(&s), "{c}");
        if s == "unknown" {
            assert!(c["note"].is_string(), "an unknown says why: {c}");
        }
    }
    for name in [
        "net.core.rmem_max",
        "governor",
        "O_DIRECT",
        "splice",
        "free space",
    ] {
        assert!(checks.iter().any(|c| c["name"] == name), "no {name}");
    }
    let t = &v["target"];
    let want = t["rate_bps"].as_u64().unwrap() as u128 * t["rtt_us"].as_u64().unwrap() as u128
        / 8
        / 1_000_000;
    assert_eq!(t["bdp_bytes"].as_u64().unwrap() as u128, want);
    assert_eq!(
        std::fs::read_dir(&data).unwrap().count(),
        0,
        "the probe file is removed"
    );
}

#[test]
fn a_peer_on_loopback_is_measured() {
    let env = Env::new();
    let root = env.mkdir("root");
    let mut server = ServerProc::start(&root, &env.key, &["--metrics", "127.0.0.1:0"]);
    let m = crate::monitor::monitor_addr(&server);
    let peer = format!("127.0.0.1:{}", server.port);
    let v = json(&doctor(&[
        "--peer",
        &peer,
        "--json",
        "--path",
        root.to_str().unwrap(),
    ]));
    assert_eq!(v["target"]["rtt_source"], "measured");
    assert!(v["target"]["rtt_us"].as_u64().unwrap() >= 1);
    assert_eq!(v["interfaces"], serde_json::json!(["lo"]));
    let peer_rows: Vec<_> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["section"] == "peer")
        .collect();
    assert_eq!(peer_rows.len(), 3, "{peer_rows:?}");
    assert!(server.alive(), "the server survives bare probe connections");
    // Its connections were probes, not refusals: the counter operators alert on stays still.
    let samples = 5.0; // zcp_tune::host::PEER_TRIES connections
    let mut probes = None;
    for _ in 0..50 {
        let (_, _, t) = crate::monitor::http(m, "GET", "/metrics", None);
        assert!(!t.contains("zcp_refused_connections_total{"), "{t}");
        probes = crate::monitor::sample(&t, "zcp_probe_connections_total");
        if probes == Some(samples) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(probes, Some(samples), "{}", server.log());
    let log = server.log();
    assert!(!log.contains("refused") && !log.contains("WARN"), "{log}");
}

#[test]
fn bad_input_is_refused_with_a_reason() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let closed = format!("127.0.0.1:{closed}");
    let vm = fixture("vm");
    let vm = vm.to_str().unwrap();
    for (args, code, want) in [
        (vec!["--rate", "fast"], 2, "not a rate"),
        (vec!["--rtt", "100"], 2, "no unit"),
        (
            vec!["--rtt", "10ms", "--peer", "127.0.0.1"],
            2,
            "cannot be used with",
        ),
        (
            vec!["--root", vm, "--interface", "eth9"],
            2,
            "--interface eth9: no such interface",
        ),
        (
            vec!["--path", "/nonexistent/zcp"],
            2,
            "--path /nonexistent/zcp: not a directory",
        ),
        (
            vec!["--root", "/nonexistent/zcp"],
            2,
            "--root /nonexistent/zcp: not a directory",
        ),
        (vec!["--peer", "[::1"], 2, "missing ']'"),
        (vec!["--peer", &closed], 1, "--peer: cannot connect to"),
    ] {
        let o = doctor(&args);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", both(&o));
        assert!(text(&o.stderr).contains(want), "{args:?}: {}", both(&o));
        assert!(
            o.stdout.is_empty(),
            "{args:?}: nothing printed but the error"
        );
    }
}
