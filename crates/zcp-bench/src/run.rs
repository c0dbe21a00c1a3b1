//! Drives a benchmark: makes the source files, runs every cell `warmup + repeat` times as two
//! side processes each, and gathers the [`Report`]. Progress goes to the caller as [`Event`]s.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::report::{CellResult, Host, Report, Run};
use crate::side::{Role, SideReport, SideSpec};
use crate::{BenchError, CacheState, CellSpec, Config, Scenario, plan, size_label};

/// What the benchmark is doing, for a progress display.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Writing a source file of `size` bytes.
    Preparing {
        /// The file's size.
        size: u64,
    },
    /// The plan is made: this many cells and runs (warm-ups included).
    Planned {
        /// Cells.
        cells: usize,
        /// Runs, warm-ups included.
        runs: u64,
    },
    /// A run starts.
    RunStarted {
        /// The cell's label.
        label: String,
        /// 1-based run number within the cell, warm-ups first.
        run: u32,
        /// Runs of the cell, warm-ups included.
        of: u32,
        /// Whether this run is a warm-up (thrown away).
        warmup: bool,
    },
    /// A cell is done; its median throughput.
    CellDone {
        /// The cell's label.
        label: String,
        /// Median Gbit/s over the measured runs.
        gbps: f64,
    },
}

/// Runs the benchmark `config` describes.
pub fn run(config: &Config, events: &mut dyn FnMut(Event)) -> Result<Report, BenchError> {
    check(config)?;
    let host = Host::probe(&config.dir)?;
    let scratch = tempfile::Builder::new()
        .prefix("zcp-bench-")
        .tempdir_in(&config.dir)
        .map_err(|e| {
            BenchError::io(
                format!("making a scratch directory in {}", config.dir.display()),
                e,
            )
        })?;
    let cells = plan::cells(config);
    check_space(&cells, &host, &config.dir)?;

    let mut sources: Vec<(u64, PathBuf)> = Vec::new();
    for c in &cells {
        if !sources.iter().any(|(s, _)| *s == c.size) {
            events(Event::Preparing { size: c.size });
            let p = scratch.path().join(format!("src-{}", size_label(c.size)));
            make_source(&p, c.size)?;
            sources.push((c.size, p));
        }
    }
    let recv_dir = scratch.path().join("recv");
    std::fs::create_dir(&recv_dir)
        .map_err(|e| BenchError::io(format!("creating {}", recv_dir.display()), e))?;
    // `transport` runs zcp sessions: a fresh key for this benchmark, readable by its user only.
    let key = if cells.iter().any(|c| c.transport.is_some()) {
        let path = scratch.path().join("key");
        zcp_session::keyfile::write_new_key(&path, false)?;
        Some(path)
    } else {
        None
    };

    let per_cell = config.warmup + config.repeat;
    events(Event::Planned {
        cells: cells.len(),
        runs: cells.len() as u64 * u64::from(per_cell),
    });
    let mut results = Vec::with_capacity(cells.len());
    for cell in cells {
        let src = &sources
            .iter()
            .find(|(s, _)| *s == cell.size)
            .expect("every size has a source")
            .1;
        let mut runs = Vec::with_capacity(config.repeat as usize);
        for i in 0..per_cell {
            let warmup = i < config.warmup;
            events(Event::RunStarted {
                label: cell.label(),
                run: i + 1,
                of: per_cell,
                warmup,
            });
            prepare_cache(src, config.cache)?;
            let r = one_run(config, &cell, src, &recv_dir, key.as_deref())?;
            if !warmup {
                runs.push(r);
            }
        }
        let result = CellResult::new(cell, runs);
        events(Event::CellDone {
            label: result.spec.label(),
            gbps: result.stats["gbit_per_second"].median,
        });
        results.push(result);
    }
    drop(scratch);
    Ok(Report::new(config, host, results))
}

fn check(config: &Config) -> Result<(), BenchError> {
    let bad = |m: &str| Err(BenchError::Config(m.to_string()));
    if config.scenarios.is_empty() {
        return bad("no scenario to run");
    }
    if config.repeat == 0 {
        return bad("--repeat must be at least 1");
    }
    if config.scenarios.contains(&Scenario::Sizes) && config.sizes.is_empty() {
        return bad("--sizes names no size");
    }
    if config.sizes.contains(&0) {
        return bad("--sizes: every size must be at least 1 byte");
    }
    if config.size == 0 {
        return bad("--size must be at least 1 byte");
    }
    if config.scenarios.contains(&Scenario::Streams) && config.streams.is_empty() {
        return bad("--streams names no stream count");
    }
    if config.streams.iter().any(|&n| n == 0 || n > 64) {
        return bad("--streams: each count must be between 1 and 64");
    }
    if config.scenarios.contains(&Scenario::Transport) {
        if config.transport_streams.is_empty() {
            return bad("--streams names no stream count");
        }
        if config.transport_streams.iter().any(|&n| n == 0 || n > 16) {
            return bad(
                "--streams: transport runs zcp sessions, which take 1 to 16 streams; give counts up to 16",
            );
        }
        if config.udp_rate == 0 {
            return bad("--udp-rate must be above 0");
        }
    }
    if !config.dir.is_dir() {
        return Err(BenchError::Config(format!(
            "--dir {} is not a directory",
            config.dir.display()
        )));
    }
    Ok(())
}

/// The sources (one file per size) plus the largest file a receiver stores at once.
fn check_space(cells: &[CellSpec], host: &Host, dir: &Path) -> Result<(), BenchError> {
    let mut sizes: Vec<u64> = cells.iter().map(|c| c.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let stored = cells
        .iter()
        .filter(|c| c.sink != plan::SinkKind::Memory)
        .map(|c| c.size)
        .max()
        .unwrap_or(0);
    let need = sizes.iter().sum::<u64>() + stored + (64 << 20);
    if need > host.free_bytes {
        return Err(BenchError::Config(format!(
            "the benchmark needs {} MiB in {} and {} MiB are free: point --dir at a larger filesystem or choose smaller --sizes/--size",
            need >> 20,
            dir.display(),
            host.free_bytes >> 20
        )));
    }
    Ok(())
}

/// Writes `size` bytes that no filesystem can compress or deduplicate, then syncs them, so
/// their pages are clean (a cold run can drop them).
fn make_source(path: &Path, size: u64) -> Result<(), BenchError> {
    use std::io::Write;
    let what = || format!("writing {}", path.display());
    let mut f = std::fs::File::create(path).map_err(|e| BenchError::io(what(), e))?;
    let mut block = vec![0u8; 1 << 20];
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ size;
    let mut left = size;
    while left > 0 {
        for word in block.chunks_exact_mut(8) {
            // xorshift64: fast, and different in every block.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            word.copy_from_slice(&state.to_le_bytes());
        }
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n])
            .map_err(|e| BenchError::io(what(), e))?;
        left -= n as u64;
    }
    f.sync_all().map_err(|e| BenchError::io(what(), e))
}

fn prepare_cache(src: &Path, cache: CacheState) -> Result<(), BenchError> {
    let what = || format!("preparing the page cache of {}", src.display());
    let mut f = std::fs::File::open(src).map_err(|e| BenchError::io(what(), e))?;
    match cache {
        CacheState::Warm => {
            let mut buf = vec![0u8; 1 << 20];
            while f.read(&mut buf).map_err(|e| BenchError::io(what(), e))? > 0 {}
        }
        CacheState::Cold => zcp_engine::fs::drop_cached(&f)?,
    }
    Ok(())
}

/// A child process that is killed if it is still running when this is dropped.
struct Side {
    child: Child,
    label: &'static str,
}

impl Drop for Side {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn spawn(config: &Config, spec: &SideSpec, label: &'static str) -> Result<Side, BenchError> {
    let json = serde_json::to_string(spec).expect("a spec serializes");
    let child = Command::new(&config.exe)
        .arg("bench-side")
        .arg(json)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| BenchError::io(format!("starting {}", config.exe.display()), e))?;
    Ok(Side { child, label })
}

fn one_run(
    config: &Config,
    cell: &CellSpec,
    src: &Path,
    recv_dir: &Path,
    key: Option<&Path>,
) -> Result<Run, BenchError> {
    let fail = |message: String| BenchError::Run {
        cell: cell.label(),
        message,
    };
    let mut recv = spawn(
        config,
        &SideSpec {
            role: Role::Recv,
            cell: cell.clone(),
            path: recv_dir.to_path_buf(),
            port: 0,
            key: key.map(Path::to_path_buf),
        },
        "receiver",
    )?;
    let mut recv_out = BufReader::new(recv.child.stdout.take().expect("piped"));
    let mut line = String::new();
    let _ = recv_out.read_line(&mut line);
    let port = serde_json::from_str::<serde_json::Value>(&line)
        .ok()
        .and_then(|v| v["port"].as_u64())
        .and_then(|p| u16::try_from(p).ok());
    let Some(port) = port else {
        let _ = recv.child.wait();
        return Err(fail(format!(
            "the receiver did not start: {}",
            stderr(&mut recv)
        )));
    };
    let mut send = spawn(
        config,
        &SideSpec {
            role: Role::Send,
            cell: cell.clone(),
            path: src.to_path_buf(),
            port,
            key: key.map(Path::to_path_buf),
        },
        "sender",
    )?;
    let deadline = Instant::now() + config.run_timeout;
    for side in [&mut send, &mut recv] {
        loop {
            match side.child.try_wait() {
                Ok(Some(status)) if status.success() => break,
                Ok(Some(status)) => {
                    let label = side.label;
                    return Err(fail(format!(
                        "the {label} failed ({status}): {}",
                        stderr(side)
                    )));
                }
                Ok(None) if Instant::now() >= deadline => {
                    return Err(fail(format!(
                        "the run took longer than {} s; stopped",
                        config.run_timeout.as_secs()
                    )));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(1)),
                Err(e) => return Err(BenchError::io("waiting for a side", e)),
            }
        }
    }
    let mut sent = String::new();
    let _ = send
        .child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut sent);
    let mut got = String::new();
    let _ = recv_out.read_to_string(&mut got);
    let parse = |text: &str, who: &str| {
        serde_json::from_str::<SideReport>(text.trim())
            .map_err(|e| fail(format!("the {who} printed no report ({e}): {text:?}")))
    };
    let (sender, receiver) = (parse(&sent, "sender")?, parse(&got, "receiver")?);
    for (who, r) in [("sender", &sender), ("receiver", &receiver)] {
        if r.bytes != cell.size {
            return Err(fail(format!(
                "the {who} moved {} bytes of {}",
                r.bytes, cell.size
            )));
        }
    }
    if cell.transport.is_some() {
        crate::transport::side::take_committed(recv_dir, cell)?;
    }
    Ok(Run {
        seconds: sender.seconds,
        bytes: cell.size,
        sender,
        receiver,
    })
}

fn stderr(side: &mut Side) -> String {
    let mut s = String::new();
    if let Some(mut e) = side.child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    let s = s.trim();
    if s.is_empty() {
        "(no message)".to_string()
    } else {
        s.to_string()
    }
}
