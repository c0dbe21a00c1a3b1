//! `zcp bench`: a tiny configuration of every scenario, checked for the shape of its results
//! (never their speed), its output formats, and its refusal of bad input.

use crate::util::{Env, both, run, text, zcp};

fn bench(dir: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let mut c = zcp();
    c.arg("bench")
        .args(["--sizes", "1K,64K", "--size", "1M", "--streams", "1,3"])
        .args(["-n", "2", "--warmup", "1", "-q", "--dir"])
        .arg(dir)
        .args(extra);
    run(c, 300)
}

#[test]
fn every_scenario_runs_and_reports_every_cell() {
    let env = Env::new();
    let dir = env.mkdir("benchdir");
    let svg = env.path("charts.svg");
    let o = bench(
        &dir,
        &["--json", "--seeds", "--plot", svg.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", both(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let cells = v["cells"].as_array().unwrap();
    // sizes 2 x 4 engines, offset 2 x 2, sink 7 x 2, streams 2 x 2.
    assert_eq!(cells.len(), 8 + 4 + 14 + 4, "{}", text(&o.stdout));
    for c in cells {
        let spec = &c["spec"];
        let runs = c["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{spec}");
        for r in runs {
            assert_eq!(r["bytes"], spec["size"], "{spec}");
            assert_eq!(r["sender"]["bytes"], spec["size"]);
            assert_eq!(r["receiver"]["bytes"], spec["size"]);
            assert!(r["seconds"].as_f64().unwrap() > 0.0);
            assert!(r["sender"]["max_rss_bytes"].as_u64().unwrap() > 0);
            assert!(r["receiver"]["max_rss_bytes"].as_u64().unwrap() > 0);
        }
        for (name, s) in c["stats"].as_object().unwrap() {
            let (lo, med, hi) = (
                s["min"].as_f64().unwrap(),
                s["median"].as_f64().unwrap(),
                s["max"].as_f64().unwrap(),
            );
            assert!(lo <= med && med <= hi, "{name} of {spec}");
        }
        assert_eq!(
            c["sender_engine"], spec["engine"],
            "no sender fallback here"
        );
        let ratio = c["vs_rw"]["speed"].as_f64().unwrap();
        if spec["engine"] == "rw" {
            assert_eq!(ratio, 1.0);
        } else {
            assert!(ratio > 0.0);
        }
    }
    let scenarios: Vec<&str> = cells
        .iter()
        .map(|c| c["spec"]["scenario"].as_str().unwrap())
        .collect();
    for s in ["sizes", "offset", "sink", "streams"] {
        assert!(scenarios.contains(&s), "{s}");
    }
    let fixed = cells
        .iter()
        .find(|c| c["spec"]["param"] == "fixed")
        .unwrap();
    assert_eq!(fixed["spec"]["region"], 1 << 20);
    let three = cells
        .iter()
        .find(|c| c["spec"]["scenario"] == "streams" && c["spec"]["streams"] == 3)
        .unwrap();
    assert_eq!(three["runs"][0]["bytes"], 1 << 20);
    assert_eq!(v["setup"]["cache"], "warm");
    assert!(v["warnings"].as_array().unwrap().len() >= 2);
    let seeds = v["seeds"].as_array().unwrap();
    let measured = seeds.iter().filter(|s| s["measured"].is_number()).count();
    assert!(measured >= 4, "{seeds:?}");
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(chart.starts_with("<svg") && chart.contains("streams: Gbit/s"));
    // The scratch directory and every file in it are gone.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

#[test]
fn table_and_csv_cover_the_cells_that_ran() {
    let env = Env::new();
    let dir = env.mkdir("benchdir");
    let mut c = zcp();
    c.args([
        "bench", "offset", "--size", "256K", "-n", "1", "--warmup", "0",
    ])
    .args(["--cache", "cold", "--csv", "--dir"])
    .arg(&dir);
    let o = run(c, 120);
    assert!(o.status.success(), "{}", both(&o));
    let csv = text(&o.stdout);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 1 + 4, "{csv}");
    assert!(lines[0].starts_with("scenario,param,engine,recv,"));
    assert!(lines[0].contains("gbit_per_second_median"));
    assert!(lines[1..].iter().all(|l| l.starts_with("offset,")));
    assert!(lines[1..].iter().all(|l| l.contains(",cold,")));
    // Not a terminal: one progress line per cell on stderr.
    assert_eq!(
        text(&o.stderr).matches("(median)").count(),
        4,
        "{}",
        both(&o)
    );

    let mut c = zcp();
    c.args(["bench", "sizes", "--sizes", "4K", "-n", "1", "-q", "--dir"])
        .arg(&dir);
    let o = run(c, 120);
    assert!(o.status.success(), "{}", both(&o));
    let table = text(&o.stdout);
    for want in ["sizes:", "x rw", "sendfile", "splice", "mmap", "warnings:"] {
        assert!(table.contains(want), "{want}: {table}");
    }
    assert!(
        o.stderr.is_empty(),
        "-q prints nothing: {}",
        text(&o.stderr)
    );
}

#[test]
fn bad_input_is_refused_before_anything_runs() {
    let env = Env::new();
    let dir = env.mkdir("benchdir");
    let cases: [(&[&str], &str); 7] = [
        (&["--json", "--csv"], "cannot both be printed"),
        (&["nope"], "unknown scenario 'nope'"),
        (&["-n", "0"], "--repeat must be at least 1"),
        (&["--streams", "0"], "between 1 and 64"),
        (&["--sizes", "1Q"], "unknown unit"),
        (&["--size", "0"], "--size must be at least 1 byte"),
        (&["--recv-engine", "disk"], "unknown receiver engine"),
    ];
    for (args, want) in cases {
        let mut c = zcp();
        c.arg("bench").args(args).arg("--dir").arg(&dir);
        let o = run(c, 30);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", both(&o));
        assert!(text(&o.stderr).contains(want), "{args:?}: {}", both(&o));
    }
    let mut c = zcp();
    c.args(["bench", "sizes", "--dir"]).arg(env.path("missing"));
    let o = run(c, 30);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(
        text(&o.stderr).contains("is not a directory"),
        "{}",
        both(&o)
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

/// `zcp bench-chart udp` (what benches/udp.sh runs): the SVG from a CSV, and a clear error
/// naming the file when there is nothing to plot.
#[test]
fn bench_chart_draws_the_udp_csv_and_names_a_bad_one() {
    let env = Env::new();
    let csv = env.path("udp.csv");
    let svg = env.path("udp.svg");
    let header = "mtu,rtt_ms,loss_pct,transport,streams,size_bytes,status,seconds,gbps,note";
    std::fs::write(
        &csv,
        format!("{header}\n9000,50,0,tcp,4,1,ok,1,1.5,\n9000,50,5,tcp,4,1,ok,1,0.4,\n"),
    )
    .unwrap();
    let mut c = zcp();
    c.args(["bench-chart", "udp"]).arg(&csv).arg(&svg);
    let o = run(c, 30);
    assert!(o.status.success(), "{}", both(&o));
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("RTT 50 ms") && drawn.contains("\ntcp MTU 9000 -P 4\n</text>"));
    std::fs::write(&csv, format!("{header}\n9000,50,0,udp,1,1,failed,,,no\n")).unwrap();
    let mut c = zcp();
    c.args(["bench-chart", "udp"])
        .arg(&csv)
        .arg(env.path("none.svg"));
    let o = run(c, 30);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    let err = text(&o.stderr);
    assert!(
        err.contains("udp.csv") && err.contains("nothing to plot"),
        "{err}"
    );
    assert!(!env.path("none.svg").exists());
}

#[test]
fn transport_runs_whole_sessions_over_tcp_and_udp() {
    let env = Env::new();
    let dir = env.mkdir("benchdir");
    let size = 300 * 1024 + 7; // not a whole number of pages or datagrams
    let mut c = zcp();
    c.args(["bench", "transport", "--size", &size.to_string()])
        .args(["--streams", "1,2", "-n", "2", "--warmup", "0"])
        .args(["--udp-rate", "1G", "-q", "--json", "--dir"])
        .arg(&dir);
    let o = run(c, 120);
    assert!(o.status.success(), "{}", both(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let cells = v["cells"].as_array().unwrap();
    // tcp, udp-fair, udp-fixed at -P 1 and -P 2.
    assert_eq!(cells.len(), 6, "{}", text(&o.stdout));
    let mut cpu = 0.0;
    for c in cells {
        let spec = &c["spec"];
        assert_eq!(spec["scenario"], "transport");
        assert_eq!(spec["size"], size);
        let runs = c["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{spec}");
        let moved: u64 = runs.iter().map(|r| r["bytes"].as_u64().unwrap()).sum();
        assert_eq!(moved, size * 2, "bytes moved = file size x runs: {spec}");
        for r in runs {
            assert_eq!(r["sender"]["bytes"], size, "the sender's session: {spec}");
            assert_eq!(r["receiver"]["bytes"], size, "the server committed: {spec}");
            assert!(r["seconds"].as_f64().unwrap() > 0.0);
            for side in ["sender", "receiver"] {
                cpu += r[side]["user"].as_f64().unwrap() + r[side]["sys"].as_f64().unwrap();
            }
            let udp = &r["sender"]["udp"];
            if spec["transport"] == "tcp" {
                assert!(udp.is_null(), "{spec}");
                continue;
            }
            // Every payload byte crossed at least once, and only NAKed datagrams again.
            let (sent, resent, payload) = (
                udp["sent"].as_u64().unwrap(),
                udp["resent"].as_u64().unwrap(),
                udp["payload"].as_u64().unwrap(),
            );
            assert!(payload > 0, "{udp}");
            assert!(sent - resent >= size.div_ceil(payload), "{udp}");
            assert!(resent <= udp["lost"].as_u64().unwrap(), "{udp}");
        }
        assert!(c["stats"]["gbit_per_second"]["median"].as_f64().unwrap() > 0.0);
        assert!(c["stats"]["receiver_cpu_per_gib"]["median"].is_number());
        assert!(c["vs_rw"].is_null(), "{spec}");
        let speed = c["vs_tcp"]["speed"].as_f64().unwrap();
        match spec["transport"].as_str().unwrap() {
            "tcp" => assert_eq!(speed, 1.0),
            "udp-fair" => assert!(spec["limit_bits"].is_null() && speed > 0.0),
            "udp-fixed" => assert!(spec["limit_bits"] == 1_000_000_000 && speed > 0.0),
            other => panic!("unknown transport {other}"),
        }
    }
    assert!(cpu > 0.0, "the sides' CPU was counted");
    // The committed files, the key and the scratch directory are gone.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);

    let mut c = zcp();
    c.args(["bench", "transport", "--streams", "17", "--dir"])
        .arg(&dir);
    let o = run(c, 30);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(text(&o.stderr).contains("1 to 16 streams"), "{}", both(&o));
}
