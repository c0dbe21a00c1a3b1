//! Engine and transfer-shape flags shared by `send`, `get` and `demo`, and the session's
//! transfer settings they make.

use clap::Args;
use zcp_engine::{RecvEngine, SendEngine};

use super::{
    MAX_STREAMS, Output, filter, output, parse_recv_engine, parse_send_engine, parse_size,
    parse_transport, parse_udp_mode, parse_verify, rate, signals, usage,
};

/// Engine and transfer-shape flags shared by `send` and `demo`.
#[derive(Debug, Clone, Args)]
pub(super) struct TransferArgs {
    /// Sender engine: sendfile, rw (read/write), mmap or splice (file -> pipe -> socket).
    #[arg(long, default_value = "sendfile", value_parser = parse_send_engine)]
    pub(super) engine: SendEngine,
    /// Receiver engine: auto, splice, direct (O_DIRECT), rw, null (discard, no copy) or mem
    /// (read into memory and discard).
    #[arg(long, default_value = "auto", value_parser = parse_recv_engine)]
    pub(super) recv_engine: RecvEngine,
    /// Bytes per read/write/sendfile/splice call on both sides (suffixes K, M, G); 0 lets each
    /// engine choose.
    #[arg(long, default_value = "0", value_parser = parse_size, value_name = "BYTES")]
    pub(super) block_size: u64,
    /// Chunk size, a power of two from 64K to 1G (suffixes K, M, G): the unit of
    /// verification, resume and scheduling over streams; default grows with the file.
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    pub(super) chunk_size: Option<u64>,
    /// Parallel data streams (TCP connections, 1 to 64); chunks of every file are spread over
    /// them. (The port is -p.)
    #[arg(short = 'P', long = "parallel", default_value_t = 1, value_name = "N")]
    pub(super) streams: u16,
    /// Descend into directories: send (or get) whole trees.
    #[arg(short = 'r', long)]
    pub(super) recursive: bool,
    /// Seconds between interval reports; 0 for none. Default 1, except on a terminal, where
    /// a progress line takes their place unless -i is given.
    #[arg(short = 'i', long, value_name = "SECONDS")]
    pub(super) interval: Option<f64>,
    /// Print one JSON document at the end instead of the text report.
    #[arg(short = 'J', long, conflicts_with = "json_stream")]
    pub(super) json: bool,
    /// Print one JSON object per line as events happen.
    #[arg(long)]
    pub(super) json_stream: bool,
    /// Draw the progress line (bytes and files of the total, percent, rates, ETA, phase) on
    /// standard error even when it is not a terminal (then as one line a second).
    #[arg(long, conflicts_with_all = ["json", "json_stream", "quiet"])]
    pub(super) progress: bool,
    /// Print nothing but errors.
    #[arg(short = 'q', long, conflicts_with_all = ["json", "json_stream"])]
    pub(super) quiet: bool,
    /// After a lost connection, a timeout or a busy or restarting server, connect again up to
    /// N times and resume: only what the receiver does not hold verified and durable is sent.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub(super) retry: u32,
    /// Seconds before the first retry; each later retry waits twice as long (at most 300).
    #[arg(long, default_value = "2", value_name = "SECONDS")]
    pub(super) retry_wait: f64,
    /// Cap the transfer at RATE bits per second over all streams, as iperf3's -b: 500M, 2G,
    /// 1.5G (K, M, G, T are powers of 1000). In a get the server holds the cap.
    #[arg(long, value_name = "RATE", value_parser = rate::parse_rate)]
    pub(super) limit_rate: Option<u64>,
    /// How the receiver proves what it stores: blake3 (the default: a keyed BLAKE3 MAC per
    /// chunk and a digest per file, checked before a chunk is acknowledged and before a file
    /// is renamed into place) or none, which computes and checks nothing: bytes damaged or
    /// altered on the way are stored as they arrive, an existing target is replaced without
    /// being compared, and what an interrupted run wrote is sent again. Writes stay durable
    /// and atomic, and the session authenticated. For measuring what verification costs.
    #[arg(long, default_value = "blake3", value_name = "MODE", value_parser = parse_verify)]
    pub(super) verify: zcp_session::VerifyMode,
    /// How the bytes move: tcp (the default: the data streams carry them) or udp (paced UDP
    /// datagrams sized to the path MTU, one socket per stream, NAK-based loss recovery over
    /// the authenticated data streams; chunks default to 4 MiB). See docs/udp.md.
    #[arg(long, default_value = "tcp", value_name = "KIND", value_parser = parse_transport)]
    pub(super) transport: zcp_session::TransportKind,
    /// With --transport udp, the rate control: fair (the default: starts at 100 Mbit/s, or
    /// the cap if lower, and doubles each round trip up to the cap or 100 Gbit/s; cuts 1/8 on
    /// loss, backs off as queueing delay rises) or fixed (sends at
    /// --limit-rate, which it requires, whatever the path: for dedicated links only).
    #[arg(long, default_value = "fair", value_name = "MODE", value_parser = parse_udp_mode)]
    pub(super) udp_mode: zcp_session::UdpMode,
    /// Leave a file already at the destination as it is and send nothing for it, without
    /// comparing (rsync's --ignore-existing): counted as skipped, and the exit code stays 0.
    /// The default replaces it (or keeps it, when its bytes are proved the same).
    #[arg(long, conflicts_with_all = ["no_clobber", "backup", "size_only", "quick_check"])]
    pub(super) ignore_existing: bool,
    /// Leave a file already at the destination as it is and fail that file (class exists,
    /// exit code 4 or 23), as cp -n would refuse it.
    #[arg(long, conflicts_with_all = ["backup", "size_only", "quick_check"])]
    pub(super) no_clobber: bool,
    /// Replace a file already at the destination, keeping the old one beside it as NAME~
    /// (an older NAME~ is replaced), as rsync --backup does.
    #[arg(long, conflicts_with_all = ["size_only", "quick_check"])]
    pub(super) backup: bool,
    /// Leave a file already at the destination when its size is the one being sent, reading
    /// neither copy (rsync's --size-only): for huge trees where a re-run must not re-prove
    /// every byte. Counted as skipped; a file of another size is sent and replaces it.
    #[arg(long, conflicts_with = "quick_check")]
    pub(super) size_only: bool,
    /// Leave a file already at the destination when its size and modification time are the
    /// ones being sent (rsync's quick check), reading neither copy. Counted as skipped.
    #[arg(long)]
    pub(super) quick_check: bool,
    /// Prove every file already at the destination against the source, chunk by chunk, and
    /// send only what differs (the default; named for those used to rsync's -c).
    #[arg(long, conflicts_with_all = ["ignore_existing", "no_clobber", "size_only", "quick_check"])]
    pub(super) checksum: bool,
    /// Mirror (rsync's --delete): once every entry arrived and nothing failed, remove from
    /// each directory tree sent what its source does not hold. Never outside those trees;
    /// what the filters exclude, zcp's own part files and --backup's NAME~ stay. Needs -r;
    /// a server allows it to identities with read-write-delete. Try --delete-dry-run first.
    #[arg(long, requires = "recursive")]
    pub(super) delete: bool,
    /// Name what --delete would remove, and remove nothing (the files are still sent).
    #[arg(long, requires = "recursive", conflicts_with = "delete")]
    pub(super) delete_dry_run: bool,
    #[command(flatten)]
    pub(super) filter: filter::FilterArgs,
}

impl TransferArgs {
    /// The session's transfer settings.
    pub(super) fn transfer(&self) -> anyhow::Result<zcp_session::Transfer> {
        if self.streams == 0 {
            usage!("-P/--parallel takes 1 to {MAX_STREAMS} streams, got 0");
        }
        if self.streams > MAX_STREAMS {
            usage!(
                "-P/--parallel takes 1 to {MAX_STREAMS} streams, got {}; the port is -p (lowercase)",
                self.streams
            );
        }
        if let Some(cs) = self.chunk_size
            && let Err(e) = zcp_wire::ChunkPlan::new(0, cs)
        {
            usage!("--chunk-size {cs}: {e}");
        }
        let link = zcp_session::Link {
            kind: self.transport,
            udp_mode: self.udp_mode,
            limit_rate: self.limit_rate,
            encrypt: false,
        };
        if self.udp_mode == zcp_session::UdpMode::Fixed
            && self.transport != zcp_session::TransportKind::Udp
        {
            usage!("--udp-mode fixed is for --transport udp");
        }
        if let Some(problem) = link.problem() {
            usage!("{problem}");
        }
        Ok(zcp_session::Transfer {
            engine: self.engine,
            recv_engine: self.recv_engine,
            block_size: self.block_size,
            chunk_size: self.chunk_size,
            streams: self.streams,
            recursive: self.recursive,
            interval: self.interval()?,
            retries: self.retry,
            retry_wait: self.retry_wait()?,
            stop: Some(signals::stop_on_signals()),
            verify: self.verify,
            link,
            existing: self.existing(),
            filter: self.filter.rules()?,
            delete: match (self.delete, self.delete_dry_run) {
                (true, _) => zcp_wire::DeleteMode::Delete,
                (false, true) => zcp_wire::DeleteMode::DryRun,
                (false, false) => zcp_wire::DeleteMode::Off,
            },
        })
    }

    /// What the receiver does with a file already there.
    pub(super) fn existing(&self) -> zcp_wire::ExistingMode {
        use zcp_wire::ExistingMode as E;
        if self.ignore_existing {
            E::Ignore
        } else if self.no_clobber {
            E::Fail
        } else if self.backup {
            E::Backup
        } else if self.size_only {
            E::SizeOnly
        } else if self.quick_check {
            E::Quick
        } else {
            E::Replace
        }
    }

    pub(super) fn retry_wait(&self) -> anyhow::Result<std::time::Duration> {
        let w = self.retry_wait;
        if !w.is_finite() || !(0.0..=3600.0).contains(&w) {
            usage!("--retry-wait takes 0 to 3600 seconds, got {w}");
        }
        Ok(std::time::Duration::from_secs_f64(w))
    }

    /// The output flags alone.
    pub(super) fn out_flags(&self) -> output::OutputArgs {
        output::OutputArgs {
            interval: self.interval,
            json: self.json,
            json_stream: self.json_stream,
            progress: self.progress,
            quiet: self.quiet,
        }
    }

    pub(super) fn interval(&self) -> anyhow::Result<Option<std::time::Duration>> {
        self.out_flags().interval()
    }

    /// The reporter the output flags ask for, writing to stdout.
    pub(super) fn output(&self) -> Output {
        self.out_flags().output()
    }
}
