//! `--transport udp` from the command line: send and get, several streams, a tree, every
//! receiver engine, the reports' UDP counters, `fixed` mode's rule, and a resume after the
//! sender was killed mid-transfer.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::util::*;

const UDP: [&str; 2] = ["--transport", "udp"];

fn get_cmd(port: u16, key: &Path, path: &str, dest: &Path, extra: &[&str]) -> Command {
    let mut c = zcp();
    c.args(["get", "-p", &port.to_string(), "--key-file"])
        .arg(key)
        .args(extra)
        .arg(format!("127.0.0.1::{path}"))
        .arg(dest);
    c
}

#[test]
fn files_go_both_ways_over_udp_with_every_receiver_engine_and_say_so() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("src.bin");
    make_dense(&src, (9 << 20) + 4097, 3);
    let srv = ServerProc::start(&root, &env.key, &[]);
    for engine in ["auto", "direct", "rw", "splice", "mem", "null"] {
        let dest = format!("{engine}.bin");
        let args = [&UDP[..], &["-P", "2", "--recv-engine", engine]].concat();
        let (o, v) = send_json(srv.port, &env.key, &src, &dest, &args, 30);
        assert!(o.status.success(), "{engine}: {}", both(&o));
        if matches!(engine, "mem" | "null") {
            assert!(!root.join(&dest).exists(), "{engine} stores nothing");
        } else {
            assert!(same_file(&src, &root.join(&dest)), "{engine}");
        }
        let u = &v["end"]["udp"];
        assert_eq!(u["mode"], "fair", "{u}");
        assert!(u["datagrams_sent"].as_u64().unwrap() > 100, "{u}");
        assert!(u["payload_bytes"].as_u64().unwrap() >= 512, "{u}");
        assert!(u["engines"].as_str().unwrap().contains("sendmmsg"), "{u}");
    }
    // A get: the server sends over UDP, the client lands and verifies.
    let out = env.path("got.bin");
    let o = run(
        get_cmd(
            srv.port,
            &env.key,
            "auto.bin",
            &out,
            &[&UDP[..], &["-P", "2", "-J"]].concat(),
        ),
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &out));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["end"]["udp"]["datagrams_received"].as_u64().unwrap() > 100);
    // Over TCP there is no UDP section.
    let (o, v) = send_json(srv.port, &env.key, &src, "tcp.bin", &[], 30);
    assert!(o.status.success(), "{}", both(&o));
    assert!(v["end"]["udp"].is_null());
    assert!(no_partials(&root, 10), "{:?}", tree(&root));
}

#[test]
fn a_tree_goes_over_udp_and_the_text_report_names_the_transport() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.mkdir("t");
    for d in 0..3 {
        std::fs::create_dir(src.join(format!("d{d}"))).unwrap();
    }
    for i in 0..120u64 {
        make_dense(&src.join(format!("d{}/f{i}", i % 3)), i * 101, i);
    }
    make_dense(&src.join("big"), 6 << 20, 9);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let args = [&UDP[..], &["-r", "-P", "2", "-i", "0"]].concat();
    let o = run(send_cmd(srv.port, &env.key, &src, "in", &args), 30);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(tree_paths(&src), tree_paths(&root.join("in/t")));
    for rel in tree_paths(&src) {
        if src.join(&rel).is_file() {
            assert!(
                same_file(&src.join(&rel), &root.join("in/t").join(&rel)),
                "{rel:?}"
            );
        }
    }
    let out = text(&o.stdout);
    assert!(out.contains("UDP:      fair mode"), "{out}");
}

#[test]
fn the_rate_cap_holds_over_udp_in_both_modes() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("src.bin");
    make_dense(&src, 8 << 20, 4);
    let srv = ServerProc::start(&root, &env.key, &[]);
    for mode in ["fair", "fixed"] {
        let args = [&UDP[..], &["--udp-mode", mode, "--limit-rate", "200M"]].concat();
        let (o, v) = send_json(srv.port, &env.key, &src, mode, &args, 30);
        assert!(o.status.success(), "{}", both(&o));
        assert!(same_file(&src, &root.join(mode)));
        let bps = v["end"]["sum_sent"]["bits_per_second"].as_f64().unwrap();
        assert!(
            bps <= 200e6 * 1.15,
            "{mode}: {bps} bit/s over a 200 Mbit/s cap"
        );
        assert!(bps >= 200e6 * 0.3, "{mode}: {bps} bit/s");
        assert_eq!(
            v["end"]["limit_rate"]["pacing"],
            "user space (UDP, per stream)"
        );
    }
}

#[test]
fn fixed_mode_needs_a_rate_cap_and_unknown_names_are_refused() {
    let env = Env::new();
    let src = env.path("s");
    make_dense(&src, 1000, 1);
    let o = run(
        send_cmd(
            1,
            &env.key,
            &src,
            "x",
            &[&UDP[..], &["--udp-mode", "fixed"]].concat(),
        ),
        10,
    );
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(text(&o.stderr).contains("--limit-rate"), "{}", both(&o));
    for bad in [["--transport", "quic"], ["--udp-mode", "greedy"]] {
        let o = run(send_cmd(1, &env.key, &src, "x", &bad), 10);
        assert_eq!(o.status.code(), Some(2), "{}", both(&o));
        assert!(text(&o.stderr).contains("choose one of"), "{}", both(&o));
    }
}

#[test]
fn a_udp_send_killed_midway_resumes_what_the_receiver_verified() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("src.bin");
    make_dense(&src, 24 << 20, 5);
    let srv = ServerProc::start(&root, &env.key, &[]);
    // 24 MiB at 64 Mbit/s takes 3 s: killed after 1.5 s, about half is durable.
    let capped = [
        &UDP[..],
        &["--limit-rate", "64M", "--chunk-size", "1M", "-q"],
    ]
    .concat();
    let mut child = send_cmd(srv.port, &env.key, &src, "r.bin", &capped)
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        !root.join("r.bin").exists(),
        "nothing committed by a killed sender"
    );
    let (o, v) = send_json(
        srv.port,
        &env.key,
        &src,
        "r.bin",
        &[&UDP[..], &["--chunk-size", "1M"]].concat(),
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &root.join("r.bin")));
    let skipped = v["end"]["resume"]["bytes_skipped"].as_u64().unwrap();
    assert!((4 << 20..24 << 20).contains(&skipped), "{}", v["end"]);
    assert!(no_partials(&root, 10), "{:?}", tree(&root));
}
