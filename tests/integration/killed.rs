//! Real processes killed with SIGKILL: each trial sends a small random tree with `zcp send` to
//! a `zcp serve`, kills the sender or the server at a random moment, then runs the same
//! command again (the server restarted if it was the one killed). After each: nothing under
//! a final name differs from its source and nothing is outside the root; after the second
//! run everything arrived, no part file is left, and no byte that was durable before it (what
//! the journals held) was sent again. The in-process campaign (zcp-session's
//! `pair::campaign`) covers every other kind of fault, many thousands of times; this is the
//! part only real processes can show: what a kill leaves on disk.
//!
//! `ZCP_KILLS=300 ZCP_KILLS_SEED=1 cargo test --release --test integration -- --ignored
//! killed::killed --nocapture` (`ZCP_KILLS_OUT=FILE` writes the table).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::util::*;

/// Whether `b` exists and holds what `a` holds.
fn same(a: &Path, b: &Path) -> bool {
    b.exists() && same_file(a, b)
}

/// Counts of one kind of kill.
#[derive(Default, Debug)]
struct Tally {
    missed: u64,
    killed: u64,
    completed: u64,
    corrupt: u64,
    truncated: u64,
    outside: u64,
    resent: u64,
    lost: u64,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One trial: kill the server when `server`, else the sender.
fn trial(rng: &mut fastrand::Rng, server: bool, t: &mut Tally) {
    let env = Env::new();
    let src = env.mkdir("src/t");
    let root = env.mkdir("root");
    let n = rng.usize(1..=3);
    let mut files = Vec::new();
    for i in 0..n {
        let size = rng.u64((16 << 20)..(160 << 20));
        let p = src.join(format!("f{i}"));
        make_file(&p, size, 1 << 20, rng.u64(..));
        files.push((format!("t/f{i}"), size));
    }
    let mut srv = ServerProc::start(&root, &env.key, &[]);
    // Slow enough to be caught mid-file: read/write in 64 KiB calls, 1 MiB chunks.
    let args = [
        "-r",
        "--chunk-size",
        "1M",
        "--block-size",
        "64K",
        "--engine",
        "rw",
    ];
    let mut child = send_cmd(srv.port, &env.key, &src, ".", &args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(rng.u64(10..250)));
    let finished = child.try_wait().unwrap().is_some();
    if server {
        srv.kill();
    } else {
        let _ = child.kill();
    }
    let _ = child.wait();
    if finished {
        t.missed += 1;
        return;
    }
    t.killed += 1;
    // What is under a final name is a whole, right file; nothing is outside the root.
    for (name, size) in &files {
        let dst = root.join(name);
        if dst.exists() && !same(&env.path(&format!("src/{name}")), &dst) {
            let len = std::fs::metadata(&dst).map_or(0, |m| m.len());
            if len < *size {
                t.truncated += 1;
            } else {
                t.corrupt += 1;
            }
        }
    }
    let top: Vec<_> = std::fs::read_dir(env.dir.path()).unwrap().collect();
    if top.len() != 3 {
        t.outside += 1;
    }
    let due: u64 = files
        .iter()
        .map(|(name, size)| {
            let dst = root.join(name);
            if same(&env.path(&format!("src/{name}")), &dst) {
                0
            } else {
                size.saturating_sub(journaled(&dst))
            }
        })
        .sum();
    if server {
        srv = ServerProc::start(&root, &env.key, &[]);
    }
    // The same command again.
    let (o, v) = send_json(srv.port, &env.key, &src, ".", &args, 120);
    let all = files
        .iter()
        .all(|(name, _)| same(&env.path(&format!("src/{name}")), &root.join(name)));
    if o.status.success() && all && no_partials(&root, 5) {
        t.completed += 1;
    } else {
        eprintln!("not completed: {}\n{:?}", both(&o), tree(&root));
    }
    let sent = v["end"]["sum_sent"]["bytes"].as_u64().unwrap_or(0);
    if std::env::var_os("ZCP_KILLS_VERBOSE").is_some() {
        let total: u64 = files.iter().map(|f| f.1).sum();
        eprintln!("server killed {server}: total {total}, due {due}, sent again {sent}");
    }
    t.resent += sent;
    t.lost += sent.saturating_sub(due);
}

#[test]
#[ignore = "heavy: real processes killed a few hundred times, its own CI step"]
fn killed_at_random_points_then_run_again() {
    let (trials, seed) = (env_u64("ZCP_KILLS", 300), env_u64("ZCP_KILLS_SEED", 1));
    let mut rng = fastrand::Rng::with_seed(seed);
    let (mut sender, mut server) = (Tally::default(), Tally::default());
    let t0 = Instant::now();
    for i in 0..trials {
        if i % 2 == 0 {
            trial(&mut rng, false, &mut sender);
        } else {
            trial(&mut rng, true, &mut server);
        }
    }
    let mut table = String::from(
        "| killed | kills | completed after re-run | corrupt | truncated | outside the root | bytes re-sent | durable bytes sent again | finished before the kill (not counted) |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for (what, t) in [
        ("sender (`zcp send`)", &sender),
        ("server (`zcp serve`)", &server),
    ] {
        table.push_str(&format!(
            "| {what} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            t.killed, t.completed, t.corrupt, t.truncated, t.outside, t.resent, t.lost, t.missed
        ));
    }
    let text = format!(
        "{table}\n{trials} trials, seed {seed}, {:.0} s\n",
        t0.elapsed().as_secs_f64()
    );
    println!("{text}");
    if let Ok(path) = std::env::var("ZCP_KILLS_OUT") {
        std::fs::write(path, &text).unwrap();
    }
    for t in [&sender, &server] {
        assert_eq!(t.completed, t.killed, "{t:?}");
        assert_eq!(
            (t.corrupt, t.truncated, t.outside, t.lost),
            (0, 0, 0, 0),
            "{t:?}"
        );
    }
}
