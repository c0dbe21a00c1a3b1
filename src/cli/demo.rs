//! `zcp demo`: the zero-setup path. Starts a server on loopback in this process, generates a
//! test file, sends it with the chosen engines, checks the received copy byte for byte
//! (independently of zcp's own verification), prints the report, and cleans up.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use zcp_session::{Connection, SendOptions, Server, ServerConfig, send};

use super::TransferArgs;

/// `zcp demo --help`'s examples, each a command line the tests parse.
pub(crate) const EXAMPLES: &str = "\
  zcp demo                                         # 1 GiB in the temporary directory
  zcp demo --size 4G --dir /data                   # on the disk you want to measure
  zcp demo --engine splice --recv-engine direct -P 4
                                                   # other engines, 4 parallel streams
  zcp demo --recv-engine null -J                   # the network-only ceiling, as JSON";

#[derive(Debug, Args)]
#[command(after_help = super::after_help(EXAMPLES, false))]
pub(crate) struct DemoArgs {
    /// Size of the generated file (suffixes K, M, G, T).
    #[arg(long, default_value = "1G", value_parser = super::parse_size, value_name = "BYTES")]
    size: u64,
    /// Directory for the demo's files (default: the system temporary directory). Put it on
    /// the disk you want to measure: on tmpfs the receiver has no disk to reach.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Keep the generated and received files (their directory is printed).
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    pub(super) transfer: TransferArgs,
}

/// Fills `path` with `size` pseudo-random (incompressible) bytes; the data stays in the page
/// cache, as a file just written or read does.
fn generate(path: &Path, size: u64) -> std::io::Result<()> {
    let mut out = BufWriter::with_capacity(8 << 20, File::create(path)?);
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15 ^ size;
    let mut block = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        for word in block.chunks_exact_mut(8) {
            // xorshift64*: fast, and random enough that no layer can compress or dedupe it.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            word.copy_from_slice(&state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
        }
        let n = left.min(block.len() as u64) as usize;
        out.write_all(&block[..n])?;
        left -= n as u64;
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_data()
}

/// Compares two files byte for byte.
fn identical(a: &Path, b: &Path) -> std::io::Result<bool> {
    let (mut fa, mut fb) = (File::open(a)?, File::open(b)?);
    if fa.metadata()?.len() != fb.metadata()?.len() {
        return Ok(false);
    }
    let (mut ba, mut bb) = (vec![0u8; 4 << 20], vec![0u8; 4 << 20]);
    loop {
        let n = read_full(&mut fa, &mut ba)?;
        let m = read_full(&mut fb, &mut bb)?;
        if n != m || ba[..n] != bb[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match f.read(&mut buf[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

pub(crate) fn run(a: DemoArgs) -> anyhow::Result<i32> {
    if a.transfer.delete || a.transfer.delete_dry_run {
        super::usage!(
            "the demo sends one file: --delete has no tree to mirror; try it with send -r"
        );
    }
    let base = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let work = tempfile::Builder::new()
        .prefix("zcp-demo-")
        .tempdir_in(&base)
        .with_context(|| format!("cannot create a working directory in {}", base.display()))?;
    let (src_dir, recv_dir) = (work.path().join("send"), work.path().join("recv"));
    std::fs::create_dir(&src_dir)?;
    std::fs::create_dir(&recv_dir)?;
    let source = src_dir.join("demo.bin");

    eprintln!(
        "zcp demo: generating {} of test data in {}",
        zcp_report::units::size(a.size),
        work.path().display()
    );
    let t = Instant::now();
    generate(&source, a.size).with_context(|| format!("cannot write {}", source.display()))?;
    eprintln!(
        "zcp demo: generated in {:.2} s; starting a server on 127.0.0.1",
        t.elapsed().as_secs_f64()
    );

    let key: [u8; zcp_wire::PSK_LEN] = zcp_engine::sys::random().context("getrandom")?;
    let psk = zcp_wire::Psk::from_bytes(key);
    let log = Arc::new(zcp_report::ServerLog::new(
        std::io::stderr(),
        std::io::stderr(),
    ));
    let server = Server::bind(
        "127.0.0.1:0".parse()?,
        ServerConfig::new(recv_dir.clone(), psk.clone()),
        log,
    )?;
    let port = server.local_addr().port();
    let stop = Arc::new(AtomicBool::new(false));

    let opts = SendOptions {
        conn: Connection {
            host: "127.0.0.1".into(),
            port,
            psk,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        },
        transfer: a.transfer.transfer()?,
        sources: vec![source.clone()],
        dest: b"demo.bin".to_vec(),
        ssh: None,
    };
    let mut out = a.transfer.output();
    let result = std::thread::scope(|s| {
        let stop_srv = stop.clone();
        let srv = s.spawn(move || server.run(&stop_srv, true));
        let r = send(&opts, out.reporter());
        if r.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        let _ = srv.join();
        r
    });
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            let code = super::signals::caught().map_or(e.exit_code(), |s| 128 + s);
            out.fail(&e, code);
            eprintln!("zcp demo: {e}");
            return Ok(code);
        }
    };
    let received = recv_dir.join("demo.bin");
    if summary.stored {
        let same = identical(&source, &received).context("comparing the received file")?;
        if !same {
            eprintln!(
                "zcp demo: the received file differs from the source (independent byte comparison)"
            );
            return Ok(zcp_session::exit::INTEGRITY);
        }
        eprintln!(
            "zcp demo: independent check: {} is byte-identical to the source",
            received.display()
        );
    } else {
        eprintln!(
            "zcp demo: the {} receiver stores nothing; no file to compare",
            summary.receiver_engine
        );
    }
    if a.keep {
        let kept = work.keep();
        eprintln!("zcp demo: kept {}", kept.display());
    } else {
        drop(work);
        eprintln!("zcp demo: removed the demo files");
    }
    Ok(0)
}
