//! `zcp bench`: the copy-mechanism benchmark (crate `zcp-bench`), with a progress display
//! and the output format the user picked; `zcp bench-side` is one side of one run.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use zcp_bench::{BenchError, CacheState, Config, Event, Scenario};
use zcp_engine::RecvEngine;

use super::{parse_recv_engine, parse_size};

/// The sizes of documents 001 (1K-64M) and 003/004 (7M-1G), in one ascending list.
const DEFAULT_SIZES: &str = "1K,16K,256K,4M,7M,21M,63M,64M,98M,200M,350M,700M,1G";

/// Stream counts of `streams` when `--streams` is not given (document 002's 1..8).
const DEFAULT_STREAMS: [u32; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
/// Stream counts (`-P`) of `transport` when `--streams` is not given: one, and the four
/// `benches/udp.sh` runs.
const DEFAULT_TRANSPORT_STREAMS: [u32; 2] = [1, 4];

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Cache {
    /// Read the source whole into the page cache before each run.
    Warm,
    /// Drop the source's pages (posix_fadvise DONTNEED) before each run.
    Cold,
}

/// `zcp bench --help`'s examples, each a command line the tests parse.
pub(crate) const EXAMPLES: &str = "\
  zcp bench                                        # the four default scenarios: minutes
  zcp bench sizes --sizes 4K,64M,1G --seeds        # one scenario, the documents' ratios beside
  zcp bench sink --dir /data --cache cold --plot sink.svg --json=sink.json
  zcp bench streams --streams 1,2,4,8 -n 5         # 5 measured runs per cell
  zcp bench transport --size 256M --udp-rate 2G    # zcp sessions over TCP and UDP (opt-in)";

#[derive(Debug, Args)]
#[command(after_help = super::after_help(EXAMPLES, false))]
pub(crate) struct BenchArgs {
    /// Scenarios to run: sizes, offset, sink, streams (default: these four), and transport
    /// (zcp's whole session over TCP and UDP; runs only when named).
    #[arg(value_name = "SCENARIO", value_parser = parse_scenario)]
    scenarios: Vec<Scenario>,
    /// File sizes of `sizes`, comma-separated.
    #[arg(long, value_name = "LIST", default_value = DEFAULT_SIZES, value_parser = parse_sizes)]
    sizes: SizeList,
    /// File size of `offset`, `sink`, `streams` and `transport`.
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = parse_size)]
    size: u64,
    /// Stream counts of `streams` (default 1,2,3,4,5,6,7,8) and of `transport` (-P; default
    /// 1,4), comma-separated.
    #[arg(long, value_name = "LIST", value_parser = parse_counts)]
    streams: Option<CountList>,
    /// The rate cap of `transport`'s UDP fixed-mode cells (fixed mode sends at it), bits per
    /// second: 500M, 2G.
    #[arg(long, value_name = "RATE", default_value = "5G", value_parser = super::rate::parse_rate)]
    udp_rate: u64,
    /// Measured runs per cell (min/median/max are over these).
    #[arg(short = 'n', long, value_name = "N", default_value_t = 3)]
    repeat: u32,
    /// Runs per cell before the measured ones, thrown away.
    #[arg(long, value_name = "N", default_value_t = 1)]
    warmup: u32,
    /// Page-cache state of the source before each run.
    #[arg(long, value_enum, default_value = "warm")]
    cache: Cache,
    /// Bytes per call (default: each engine's own; `offset` re-sends 1M regions).
    #[arg(long, value_name = "BYTES", value_parser = parse_size, default_value = "0")]
    block_size: u64,
    /// Receiver engine of `sizes`, `offset` and `streams` (`sink` runs every one).
    #[arg(long, default_value = "mem", value_parser = parse_recv_engine)]
    recv_engine: RecvEngine,
    /// Where the files go (a scratch directory is made inside and removed); put it on the
    /// disk you want to measure [default: $TMPDIR, else /var/tmp].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// CSV, one row per cell: printed instead of the table, or written to FILE with
    /// `--csv=FILE` (the table is printed then).
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true)]
    csv: Option<Option<PathBuf>>,
    /// One JSON document: printed instead of the table, or written to FILE with
    /// `--json=FILE`.
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true)]
    json: Option<Option<PathBuf>>,
    /// Also draw the charts into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Print the source documents' published ratios beside the measured ones.
    #[arg(long)]
    seeds: bool,
    /// Longest one run may take, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    timeout: u64,
    /// No progress display.
    #[arg(short, long)]
    quiet: bool,
}

#[derive(Debug, Clone)]
struct SizeList(Vec<u64>);

#[derive(Debug, Clone)]
struct CountList(Vec<u32>);

fn parse_scenario(s: &str) -> Result<Scenario, String> {
    Scenario::parse(s).ok_or_else(|| {
        let names: Vec<_> = Scenario::ALL
            .iter()
            .chain(&Scenario::OPT_IN)
            .map(|s| s.name())
            .collect();
        format!("unknown scenario '{s}'; choose from: {}", names.join(", "))
    })
}

fn parse_sizes(s: &str) -> Result<SizeList, String> {
    s.split(',')
        .map(parse_size)
        .collect::<Result<Vec<_>, _>>()
        .map(SizeList)
}

fn parse_counts(s: &str) -> Result<CountList, String> {
    s.split(',')
        .map(|p| {
            p.trim()
                .parse::<u32>()
                .map_err(|_| format!("'{p}' is not a stream count (example: 1,2,4,8)"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(CountList)
}

pub(crate) fn run(a: BenchArgs) -> anyhow::Result<i32> {
    if matches!((&a.json, &a.csv), (Some(None), Some(None))) {
        eprintln!("zcp: --json and --csv cannot both be printed; give one a file (--csv=FILE)");
        return Ok(2);
    }
    let dir = a.dir.clone().unwrap_or_else(|| {
        std::env::var_os("TMPDIR")
            .map(PathBuf::from)
            .filter(|p| p.is_dir())
            .unwrap_or_else(|| PathBuf::from("/var/tmp"))
    });
    let mut scenarios = if a.scenarios.is_empty() {
        Scenario::ALL.to_vec()
    } else {
        a.scenarios.clone()
    };
    scenarios.dedup();
    let config = Config {
        scenarios,
        sizes: a.sizes.0.clone(),
        size: a.size,
        streams: a
            .streams
            .as_ref()
            .map_or(DEFAULT_STREAMS.to_vec(), |l| l.0.clone()),
        transport_streams: a
            .streams
            .as_ref()
            .map_or(DEFAULT_TRANSPORT_STREAMS.to_vec(), |l| l.0.clone()),
        udp_rate: a.udp_rate,
        repeat: a.repeat,
        warmup: a.warmup,
        cache: match a.cache {
            Cache::Warm => CacheState::Warm,
            Cache::Cold => CacheState::Cold,
        },
        block: a.block_size,
        recv_engine: a.recv_engine,
        dir,
        exe: std::env::current_exe().context("finding the zcp executable")?,
        run_timeout: Duration::from_secs(a.timeout.max(1)),
    };
    let mut progress = Progress::new(a.quiet);
    let report = match zcp_bench::run(&config, &mut |e| progress.event(e)) {
        Ok(r) => r,
        Err(BenchError::Config(m)) => {
            progress.finish();
            eprintln!("zcp: {m}");
            return Ok(2);
        }
        Err(e) => {
            progress.finish();
            return Err(e.into());
        }
    };
    progress.finish();
    let report = if a.seeds { report.with_seeds() } else { report };
    if let Some(path) = &a.plot {
        let svg = zcp_bench::plot::svg(&report).map_err(|e| anyhow::anyhow!(e))?;
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
    }
    let mut stdout = None;
    for (choice, text) in [
        (&a.json, report.to_json() + "\n"),
        (&a.csv, report.to_csv()),
    ] {
        match choice {
            None => {}
            Some(None) => stdout = Some(text),
            Some(Some(path)) => {
                std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?
            }
        }
    }
    print!("{}", stdout.unwrap_or_else(|| report.to_table()));
    Ok(0)
}

/// A bar on a terminal; one line per finished cell otherwise (logs, CI); nothing with -q.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    lines: bool,
    done: u64,
}

impl Progress {
    fn new(quiet: bool) -> Progress {
        let tty = std::io::stderr().is_terminal();
        Progress {
            bar: None,
            lines: !quiet && !tty,
            done: 0,
        }
        .with_bar(!quiet && tty)
    }

    fn with_bar(mut self, bar: bool) -> Progress {
        if bar {
            let b = indicatif::ProgressBar::new(0);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30}] {pos}/{len} runs  {msg}",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            self.bar = Some(b);
        }
        self
    }

    fn event(&mut self, e: Event) {
        match e {
            Event::Preparing { size } => {
                let m = format!("writing a {} source file", zcp_bench::size_label(size));
                match &self.bar {
                    Some(b) => b.set_message(m),
                    None if self.lines => eprintln!("zcp bench: {m}"),
                    None => {}
                }
            }
            Event::Planned { cells, runs } => match &self.bar {
                Some(b) => b.set_length(runs),
                None if self.lines => eprintln!("zcp bench: {cells} cells, {runs} runs"),
                None => {}
            },
            Event::RunStarted {
                label,
                run,
                of,
                warmup,
            } => {
                if let Some(b) = &self.bar {
                    b.set_position(self.done);
                    self.done += 1;
                    let kind = if warmup { " (warm-up)" } else { "" };
                    b.set_message(format!("{label} {run}/{of}{kind}"));
                }
            }
            Event::CellDone { label, gbps } => {
                if self.lines {
                    eprintln!("zcp bench: {label}: {gbps:.3} Gbit/s (median)");
                }
            }
        }
    }

    fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct BenchSideArgs {
    /// The side's instructions, as JSON.
    spec: String,
}

pub(crate) fn run_side(a: BenchSideArgs) -> anyhow::Result<i32> {
    let spec: zcp_bench::side::SideSpec =
        serde_json::from_str(&a.spec).context("bench-side takes a JSON spec from zcp bench")?;
    zcp_bench::side::run_side(&spec, &mut std::io::stdout().lock())?;
    Ok(0)
}

/// The charts `zcp bench-chart` draws.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ChartKind {
    /// `benches/udp.sh`'s udp.csv: Gbit/s vs loss, a panel per RTT.
    Udp,
}

#[derive(Debug, Args)]
pub(crate) struct BenchChartArgs {
    /// Which script's CSV.
    kind: ChartKind,
    /// The CSV to read.
    csv: PathBuf,
    /// The SVG to write.
    out: PathBuf,
}

pub(crate) fn run_chart(a: BenchChartArgs) -> anyhow::Result<i32> {
    let text = std::fs::read_to_string(&a.csv)
        .with_context(|| format!("cannot read {}", a.csv.display()))?;
    let svg = match a.kind {
        ChartKind::Udp => zcp_bench::udp_chart::svg(&text),
    }
    .map_err(|e| anyhow::anyhow!("{}: {e}", a.csv.display()))?;
    std::fs::write(&a.out, svg).with_context(|| format!("cannot write {}", a.out.display()))?;
    Ok(0)
}
