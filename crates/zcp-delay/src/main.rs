//! `zcp-delay`: the delay line of zcp's network testbed (`scripts/testbed.sh up NAME --delay
//! MS`). A test tool, not part of zcp: it runs as root in the testbed's middle namespace,
//! reads every Ethernet frame that arrives on one interface and writes it out of the other
//! after a fixed delay, in both directions (RTT = 2 x the delay), with a bounded queue per
//! direction that drops and counts what does not fit. Frames keep their offload header
//! (`PACKET_VNET_HDR`), so a 64 KiB TCP super-frame costs one read and one write.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use zcp_delay::{Counters, DelayQueue, stats_line};
use zcp_engine::packet::{PacketSocket, wait_readable};

/// Room for the largest GSO super-frame (64 KiB plus headers) with margin.
const FRAME_BUF: usize = 192 << 10;
/// Frames read per turn before due frames are written again.
const BATCH: usize = 64;
/// Each socket's kernel buffers.
const SOCKET_BUFFER: usize = 32 << 20;

/// Forwards frames between two interfaces after a fixed delay (a test tool for zcp's
/// testbed; needs root).
#[derive(Parser, Debug)]
#[command(name = "zcp-delay", version)]
struct Args {
    /// One interface (frames read here go out of --b).
    #[arg(long, value_name = "IFACE")]
    a: String,
    /// The other interface (frames read here go out of --a).
    #[arg(long, value_name = "IFACE")]
    b: String,
    /// One-way delay in milliseconds, applied in each direction (RTT = 2 x MS); 0 to 10000,
    /// fractions allowed.
    #[arg(long, value_name = "MS", value_parser = parse_ms)]
    delay: Duration,
    /// Bytes each direction may hold at once; frames beyond it are dropped and counted.
    #[arg(long, value_name = "BYTES", default_value_t = 128 << 20)]
    queue_bytes: u64,
    /// Rewrites this file every second with each direction's counters.
    #[arg(long, value_name = "FILE")]
    stats: Option<PathBuf>,
}

fn parse_ms(s: &str) -> Result<Duration, String> {
    let ms: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of milliseconds"))?;
    if !(0.0..=10_000.0).contains(&ms) {
        return Err(format!("{ms} ms: give 0 to 10000"));
    }
    Ok(Duration::from_secs_f64(ms / 1000.0))
}

/// What a direction publishes for the stats file.
#[derive(Default)]
struct Shared {
    counters: Counters,
    queued: u64,
}

fn forward(
    from: &PacketSocket,
    to: &PacketSocket,
    mut q: DelayQueue,
    shared: &Mutex<Shared>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; FRAME_BUF];
    let mut published = Instant::now();
    loop {
        let now = Instant::now();
        while let Some(f) = q.pop_due(now) {
            if let Err(e) = to.send(&f) {
                // ENODEV, ENXIO: the interface is gone (the testbed is being taken down).
                if matches!(e.raw_os_error(), Some(19 | 6)) {
                    return Err(e);
                }
                q.counters.send_errors += 1;
            }
        }
        let mut got = 0;
        while got < BATCH {
            let Some(n) = from.recv(&mut buf)? else {
                break;
            };
            got += 1;
            if n > buf.len() {
                q.counters.frames_in += 1;
                q.counters.dropped_truncated += 1;
            } else {
                q.push(Instant::now(), &buf[..n]);
            }
        }
        if published.elapsed() >= Duration::from_millis(100) {
            let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
            s.counters = q.counters;
            s.queued = q.queued_bytes();
            published = Instant::now();
        }
        if got == 0 {
            let cap = Duration::from_millis(100);
            let wait = q.next_due(Instant::now()).map_or(cap, |d| d.min(cap));
            if !wait.is_zero() {
                wait_readable(std::os::fd::AsFd::as_fd(from), Some(wait))?;
            }
        }
    }
}

fn write_stats(path: &PathBuf, lines: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(lines.as_bytes())?;
    std::fs::rename(&tmp, path)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let open = |ifname: &str| {
        PacketSocket::open(ifname, true, SOCKET_BUFFER).map_err(|e| {
            eprintln!("zcp-delay: cannot open a packet socket on {ifname}: {e} (needs root and an existing interface)");
        })
    };
    let (Ok(sa), Ok(sb)) = (open(&args.a), open(&args.b)) else {
        return ExitCode::from(2);
    };
    let (sa, sb) = (Arc::new(sa), Arc::new(sb));
    let shared = [
        Arc::new(Mutex::new(Shared::default())),
        Arc::new(Mutex::new(Shared::default())),
    ];
    eprintln!(
        "zcp-delay: {} <-> {}, {:?} each way, queue {} bytes per direction",
        args.a, args.b, args.delay, args.queue_bytes
    );
    let mut threads = Vec::new();
    for (i, (from, to)) in [(sa.clone(), sb.clone()), (sb.clone(), sa.clone())]
        .into_iter()
        .enumerate()
    {
        let q = DelayQueue::new(args.delay, args.queue_bytes);
        let sh = shared[i].clone();
        threads.push(std::thread::spawn(move || forward(&from, &to, q, &sh)));
    }
    let mut socket_drops = [0u64; 2];
    loop {
        std::thread::sleep(Duration::from_secs(1));
        if let Some(t) = threads.iter().position(|t| t.is_finished()) {
            let r = threads.swap_remove(t).join();
            eprintln!("zcp-delay: a direction stopped: {r:?}");
            return ExitCode::from(1);
        }
        for (i, s) in [&sa, &sb].iter().enumerate() {
            if let Ok(st) = s.stats() {
                socket_drops[i] += st.drops;
            }
        }
        if let Some(path) = &args.stats {
            let mut text = String::new();
            for (i, name) in ["a>b", "b>a"].iter().enumerate() {
                let s = shared[i].lock().unwrap_or_else(|p| p.into_inner());
                text += &stats_line(name, &s.counters, s.queued, socket_drops[i]);
                text.push('\n');
            }
            if let Err(e) = write_stats(path, &text) {
                eprintln!("zcp-delay: cannot write {}: {e}", path.display());
            }
        }
    }
}
