//! `--limit-rate`: the cap holds on loopback, in both directions and with either pacing, and
//! bad rates are usage errors before anything moves.
//!
//! Each capped transfer is sized to take about 2 s. The bounds are wide for a loaded 2-core
//! VM below the cap (-25%) and tight above it (+15%): a cap must cap. Receivers are `mem`
//! (verified, not stored), so no disk's speed enters the figure.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::util::*;

/// Below the cap, what a loaded machine may lose; above it, what a cap may let through.
const LOW: f64 = 0.75;
const HIGH: f64 = 1.15;

/// A scratch place for large sources: /dev/shm when it is there (no disk in the figure).
fn env() -> Env {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        Env::in_dir(shm)
    } else {
        Env::new()
    }
}

/// A dense file of `size` bytes (1 MiB of random bytes, each MiB numbered).
fn dense(path: &Path, size: usize) -> PathBuf {
    let mut block = vec![0u8; 1 << 20];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for b in block.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut left = size;
    let mut i = 0u64;
    while left > 0 {
        block[..8].copy_from_slice(&i.to_le_bytes());
        let n = left.min(block.len());
        f.write_all(&block[..n]).unwrap();
        left -= n;
        i += 1;
    }
    f.flush().unwrap();
    path.to_path_buf()
}

/// The achieved rate of a `-J` document, checked against `cap` (bits per second): the
/// average within [LOW, HIGH] of it, every interval of half a second or more at most 1.25x,
/// and the cap and `pacing` reported at the start and the end. Returns the average.
fn check_capped(v: &Value, cap: u64, pacing: &str, ctx: &str) -> f64 {
    let sent = &v["end"]["sum_sent"];
    let rate = sent["bits_per_second"].as_f64().unwrap();
    let ratio = rate / cap as f64;
    println!("{ctx}: {rate:.0} bit/s, {:.1}% of the cap", ratio * 100.0);
    assert!(
        (LOW..=HIGH).contains(&ratio),
        "{ctx}: {rate:.0} bit/s is {:.1}% of the cap {cap}",
        ratio * 100.0
    );
    for iv in v["intervals"].as_array().unwrap() {
        let sum = &iv["sum"];
        if sum["seconds"].as_f64().unwrap() >= 0.5 {
            let r = sum["bits_per_second"].as_f64().unwrap();
            assert!(
                r <= cap as f64 * 1.25,
                "{ctx}: an interval ran at {r:.0}: {iv}"
            );
        }
    }
    for at in ["start", "end"] {
        let lr = &v[at]["limit_rate"];
        assert_eq!(lr["bits_per_second"], cap, "{ctx}: {at}: {lr}");
        assert_eq!(lr["pacing"], pacing, "{ctx}: {at}");
    }
    rate
}

#[test]
fn a_send_holds_its_cap_at_200m_and_2g_and_runs_faster_without_one() {
    let env = env();
    let srv = ServerProc::start(&env.mkdir("root"), &env.key, &[]);
    let small = dense(&env.path("small.bin"), 50_000_000);
    let args = ["--recv-engine", "mem", "-i", "0.5"];
    let mut capped = args.to_vec();
    capped.extend(["--limit-rate", "200M"]);
    let (o, v) = send_json(srv.port, &env.key, &small, "a", &capped, 60);
    assert!(o.status.success(), "{}", both(&o));
    // Where this kernel paces TCP, the kernel paces (loopback's shares are far above the
    // 16 segments a second it needs).
    let pacing = match zcp_engine::pace::kernel_pacing() {
        Ok(()) => "kernel",
        Err(_) => "user space",
    };
    let slow = check_capped(&v, 200_000_000, pacing, "200M, 1 stream");
    // Two streams at 2G: 1G each, held together.
    let large = dense(&env.path("large.bin"), 500_000_000);
    let mut fast = args.to_vec();
    fast.extend(["--limit-rate", "2G", "-P", "2"]);
    let (o, v) = send_json(srv.port, &env.key, &large, "b", &fast, 60);
    assert!(o.status.success(), "{}", both(&o));
    check_capped(&v, 2_000_000_000, pacing, "2G, 2 streams");
    // No cap: the same 50 MB goes faster than the 200M cap let it.
    let (o, v) = send_json(srv.port, &env.key, &small, "c", &args, 60);
    assert!(o.status.success(), "{}", both(&o));
    assert!(v["start"]["limit_rate"].is_null() && v["end"]["limit_rate"].is_null());
    let free = v["end"]["sum_sent"]["bits_per_second"].as_f64().unwrap();
    assert!(free > slow * 1.5, "uncapped {free:.0} vs capped {slow:.0}");
    // The human report shows the cap in its header and its summary.
    let o = run(
        send_cmd(
            srv.port,
            &env.key,
            &small,
            "d",
            &["-i", "0", "--limit-rate", "1G"],
        ),
        60,
    );
    let out = text(&o.stdout);
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        out.contains("Rate cap: 1.00 Gbits/sec over all streams, pacing: "),
        "{out}"
    );
    assert!(out.contains("Rate cap: 1.00 Gbits/sec (pacing: "), "{out}");
}

#[test]
fn a_get_is_capped_by_the_server_which_says_how_it_paces() {
    let env = env();
    let root = env.mkdir("root");
    dense(&root.join("want.bin"), 50_000_000);
    // This server paces in user space alone; the client's report says so.
    let mut c = zcp();
    c.env("ZCP_PACING", "user")
        .args(["serve", "--bind", "127.0.0.1"]);
    let srv = ServerProc::spawn(c, &root, &env.key, &[]);
    let mut get = zcp();
    get.args(["get", "-J", "-i", "0.5", "--recv-engine", "mem"])
        .args(["--limit-rate", "200M", "-p", &srv.port.to_string()])
        .arg("--key-file")
        .arg(&env.key)
        .arg("127.0.0.1::want.bin")
        .arg(env.path("got"));
    let o = run(get, 60);
    assert!(o.status.success(), "{}\n{}", both(&o), srv.log());
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    check_capped(&v, 200_000_000, "user space", "get at 200M");
    assert!(
        srv.log()
            .contains("rate cap 200000000 bit/s over 1 streams, pacing: user space"),
        "{}",
        srv.log()
    );
}

#[test]
fn the_largest_cap_is_taken_and_moves_the_file_whole() {
    let env = Env::new();
    let root = env.mkdir("root");
    make_dense(&root.join("f.bin"), 3 << 20, 7);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut get = zcp();
    get.args(["get", "-i", "0", "-P", "3", "--limit-rate", "10T"])
        .args(["-p", &srv.port.to_string(), "--key-file"])
        .arg(&env.key)
        .arg("127.0.0.1::f.bin")
        .arg(env.path("f.bin"));
    let o = run(get, 30);
    assert!(o.status.success(), "{}\n{}", both(&o), srv.log());
    assert!(same_file(&root.join("f.bin"), &env.path("f.bin")));
    assert!(
        text(&o.stdout).contains("Rate cap: 10.0 Tbits/sec"),
        "{}",
        both(&o)
    );
}

#[test]
fn a_bad_rate_is_a_usage_error_before_anything_moves() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let src = env.path("src.bin");
    std::fs::write(&src, b"payload").unwrap();
    for (rate, says) in [
        ("0", "would send nothing"),
        ("fast", "not a rate"),
        ("100MB", "800M"),
        ("50K", "below the smallest cap"),
        ("20T", "above the largest cap"),
        ("99999999999999999999", "too large"),
    ] {
        for cmd in ["send", "get"] {
            let mut c = zcp();
            c.args([cmd, "-p", &srv.port.to_string(), "--limit-rate", rate])
                .arg("--key-file")
                .arg(&env.key);
            if cmd == "send" {
                c.arg(&src).arg("127.0.0.1::x");
            } else {
                c.arg("127.0.0.1::x").arg(env.path("got"));
            }
            let o = run(c, 10);
            assert_eq!(o.status.code(), Some(2), "{cmd} {rate}: {}", both(&o));
            let err = text(&o.stderr);
            assert!(
                err.contains("--limit-rate") && err.contains(says),
                "{rate}: {err}"
            );
        }
    }
    // Nothing reached the server, and nothing was made here.
    assert!(tree(&root).is_empty(), "{:?}", tree(&root));
    assert!(!env.path("got").exists());
    assert!(!srv.log().contains("session"), "{}", srv.log());
}
