//! The client's observer: turns a role's reports into [`Event`]s, adds the interval reports
//! from the streams' counters and `TCP_INFO`, and builds the [`Summary`].

use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use zcp_engine::RecvEngine;
use zcp_engine::sys::tcp_info;

use crate::event::{
    Cpu, Event, Failure, FileOutcome, Interval, Observer, Phase, Progress, Reporter, Start,
    StreamInterval, Summary,
};

/// Failures kept in a summary (all are counted).
const MAX_FAILURES_KEPT: usize = 100;

/// What the summary needs beyond what the observer saw: both sides' engines and costs, and
/// when the data and the transfer ended.
pub(super) struct Measured {
    pub(super) entries: u64,
    pub(super) resent_chunks: u64,
    pub(super) end: Instant,
    pub(super) send_end: Instant,
    pub(super) sender_engine: String,
    pub(super) receiver_engine: String,
    pub(super) sender_cpu: Cpu,
    pub(super) sender_data_cpu: Cpu,
    pub(super) receiver_cpu: Cpu,
    pub(super) sender_max_rss: u64,
    pub(super) receiver_max_rss: u64,
    pub(super) target: String,
    pub(super) retries: u32,
    pub(super) limit_rate: Option<crate::event::RateLimit>,
    pub(super) encryption: Option<crate::event::Encryption>,
}

/// Turns a role's reports into events, and adds intervals.
pub(super) struct ClientObserver<'a> {
    pub(super) reporter: &'a mut dyn Reporter,
    start: Option<Start>,
    pub(super) t0: Instant,
    interval: Option<Duration>,
    last_tick: Instant,
    counters: Vec<Arc<AtomicU64>>,
    socks: Vec<TcpStream>,
    at_tick: Vec<(u64, u32)>,
    first_retrans: Vec<u32>,
    failures: Vec<Failure>,
    failed: u64,
    skipped: u64,
    files: u64,
    /// `--ignore-existing`: a file refused as already there (class `exists`) is left, not
    /// failed.
    pub(super) ignore_existing: bool,
    left_existing: u64,
    /// `--delete`: entries removed (or named, in a dry run).
    deleted: (u64, bool),
    bytes: u64,
    verified: bool,
    stored: bool,
    verify_mode: zcp_wire::VerifyMode,
    /// What the session asked every file to be, before the peer said anything: verified
    /// (`--verify blake3` with an engine that reads the bytes) and stored (an engine that
    /// stores). A file done as anything else counts as failed.
    asked: (bool, bool),
    digest: Option<[u8; 32]>,
    pub(super) receiver_engine: Option<String>,
    pub(super) sender_engine: Option<String>,
    /// Notices and failures that came before the engines were known; shown right after the
    /// `Start` they would otherwise have forced out early.
    early: Vec<Event>,
    /// What the role is doing, as of the last tick.
    phase: Phase,
    /// Files and bytes the sender counted, once it has.
    plan: Option<(u64, u64)>,
    /// When the last `Progress` went out, and the bytes moved then.
    progress_at: (Instant, u64),
    /// When bytes last moved.
    moved_at: Instant,
    /// Set (to the signal's number) when the person asked the transfer to stop.
    stop: Option<crate::client::StopFlag>,
    /// Over UDP: the transport's counters and its mode.
    pub(super) udp: Option<(Arc<crate::transport::udp::UdpStats>, zcp_wire::udp::UdpMode)>,
}

/// Between two `Progress` events, at least.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);
/// Bytes moved this recently: the phase shows as sending.
const MOVING: Duration = Duration::from_millis(500);

/// Early events kept before `Start` at most; more force it out.
const MAX_EARLY: usize = 1000;

impl<'a> ClientObserver<'a> {
    pub(super) fn new(
        reporter: &'a mut dyn Reporter,
        start: Start,
        interval: Option<Duration>,
        socks: Vec<TcpStream>,
        counters: Vec<Arc<AtomicU64>>,
        stop: Option<crate::client::StopFlag>,
    ) -> Self {
        let first_retrans: Vec<u32> = socks
            .iter()
            .map(|s| tcp_info(s).map_or(0, |t| t.total_retrans))
            .collect();
        let now = Instant::now();
        let verify_mode = start.verify_mode;
        // `Start` still holds what was asked: the engines that ran replace it later.
        let stores = RecvEngine::parse(&start.receiver_engine).is_none_or(RecvEngine::stores);
        let asked = (start.verify, stores);
        ClientObserver {
            reporter,
            start: Some(start),
            t0: now,
            interval,
            last_tick: now,
            at_tick: first_retrans.iter().map(|r| (0, *r)).collect(),
            first_retrans,
            counters,
            socks,
            failures: Vec::new(),
            failed: 0,
            skipped: 0,
            files: 0,
            ignore_existing: false,
            left_existing: 0,
            deleted: (0, false),
            bytes: 0,
            verified: true,
            stored: true,
            verify_mode,
            asked,
            digest: None,
            receiver_engine: None,
            sender_engine: None,
            early: Vec::new(),
            phase: Phase::Connecting,
            plan: None,
            progress_at: (now, 0),
            moved_at: now,
            stop,
            udp: None,
        }
    }

    /// Payload bytes over every stream so far.
    fn moved(&self) -> u64 {
        self.counters
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Where the transfer is now.
    pub(super) fn progress(&self) -> Progress {
        Progress {
            phase: self.phase,
            bytes: self.moved() + self.skipped,
            total_bytes: self.plan.map(|p| p.1),
            files: self.files + self.failed,
            total_files: self.plan.map(|p| p.0),
            seconds: self.t0.elapsed().as_secs_f64(),
        }
    }

    /// Files and bytes committed and stored so far (nothing for engines that store nothing).
    pub(super) fn committed(&self) -> (u64, u64) {
        if self.stored {
            (self.files, self.bytes)
        } else {
            (0, 0)
        }
    }

    /// The transfer is over: a last `Progress` that says so.
    pub(super) fn done(&mut self) {
        self.phase = Phase::Done;
        if self.start.is_none() {
            let p = self.progress();
            self.reporter.event(&Event::Progress(p));
        }
    }

    /// Shows `e` now, or keeps it until `Start` is out.
    fn emit(&mut self, e: Event) {
        if self.start.is_some() && self.early.len() < MAX_EARLY {
            self.early.push(e);
        } else {
            self.flush_start();
            self.reporter.event(&e);
        }
    }

    /// Emits the pending `Start` (once), then what waited for it; intervals count from here.
    pub(super) fn flush_start(&mut self) {
        if let Some(s) = self.start.take() {
            self.reporter.event(&Event::Start(s));
            for e in std::mem::take(&mut self.early) {
                self.reporter.event(&e);
            }
            self.t0 = Instant::now();
            self.last_tick = self.t0;
        }
    }

    fn interval(&mut self, now: Instant) {
        let mut streams = Vec::with_capacity(self.counters.len());
        for (i, c) in self.counters.iter().enumerate() {
            let bytes = c.load(Ordering::Relaxed);
            let tcp = self.socks.get(i).and_then(tcp_info);
            let (b0, r0) = self.at_tick[i];
            let retrans = tcp.map_or(r0, |t| t.total_retrans);
            streams.push(StreamInterval {
                id: i as u16,
                bytes: bytes - b0,
                tcp,
                retransmits: retrans.saturating_sub(r0),
            });
            self.at_tick[i] = (bytes, retrans);
        }
        let progress = self.progress();
        self.reporter.event(&Event::Interval(Interval {
            start: self.last_tick.duration_since(self.t0).as_secs_f64(),
            end: now.duration_since(self.t0).as_secs_f64(),
            streams,
            progress,
            udp: self.udp_report(),
        }));
        self.last_tick = now;
    }

    /// The final partial interval, ending when the data did, when anything moved since the
    /// last one.
    pub(super) fn last_interval(&mut self, end: Instant) {
        if self.interval.is_some() && self.start.is_none() {
            let moved = self
                .counters
                .iter()
                .enumerate()
                .any(|(i, c)| c.load(Ordering::Relaxed) != self.at_tick[i].0);
            if moved {
                self.interval(end.max(self.last_tick));
            }
        }
    }

    fn retransmits(&self) -> u32 {
        self.socks
            .iter()
            .zip(&self.first_retrans)
            .map(|(s, r0)| tcp_info(s).map_or(0, |t| t.total_retrans.saturating_sub(*r0)))
            .sum()
    }

    /// The transfer's summary, pushed to the reporter too.
    pub(super) fn summary(&mut self, m: Measured) -> Summary {
        let bytes_sent = self
            .counters
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum();
        let since = |t: Instant| t.saturating_duration_since(self.t0).as_secs_f64();
        let summary = Summary {
            bytes: self.bytes,
            bytes_sent,
            bytes_skipped: self.skipped,
            files: self.files,
            left_existing: self.left_existing,
            deleted: self.deleted.0,
            deleted_dry_run: self.deleted.1,
            entries: m.entries,
            resent_chunks: m.resent_chunks,
            seconds: since(m.end),
            send_seconds: since(m.send_end),
            sender_engine: m.sender_engine,
            receiver_engine: m.receiver_engine,
            sender_cpu: m.sender_cpu,
            sender_data_cpu: m.sender_data_cpu,
            receiver_cpu: m.receiver_cpu,
            sender_max_rss: m.sender_max_rss,
            receiver_max_rss: m.receiver_max_rss,
            retransmits: self.retransmits(),
            // A session that does not verify never reports a file verified.
            verified: self.files > 0 && self.verified && self.verify_mode.checks(),
            verify_mode: self.verify_mode,
            stored: self.files > 0 && self.stored,
            digest: self.digest.map(hex::encode),
            target: m.target,
            failed: self.failed,
            failures: self.failures.clone(),
            retries: m.retries,
            limit_rate: m.limit_rate,
            udp: self.udp_report(),
            encryption: m.encryption,
        };
        self.reporter.event(&Event::Summary(summary.clone()));
        summary
    }

    fn udp_report(&self) -> Option<crate::UdpReport> {
        self.udp.as_ref().map(|(s, mode)| s.report(*mode))
    }

    fn record_failure(&mut self, f: Failure) {
        if self.ignore_existing && f.code == zcp_wire::ErrorCode::Exists.name() {
            // Asked for: a file already there is left as it is.
            self.left_existing += 1;
            return;
        }
        self.failed += 1;
        if self.failures.len() < MAX_FAILURES_KEPT {
            self.failures.push(f.clone());
        }
        self.emit(Event::Failed(f));
    }
}

impl Observer for ClientObserver<'_> {
    fn deleted(&mut self, path: String, dir: bool, dry_run: bool) {
        self.deleted = (self.deleted.0 + 1, dry_run);
        self.emit(Event::Deleted(crate::event::Deleted { path, dir, dry_run }));
    }

    fn engines(
        &mut self,
        sender: &str,
        sender_note: Option<&str>,
        receiver: &str,
        receiver_note: Option<&str>,
    ) {
        tracing::info!(sender, receiver, "engines");
        self.receiver_engine = Some(receiver.to_string());
        self.sender_engine = Some(sender.to_string());
        if let Some(s) = self.start.as_mut() {
            s.sender_engine = sender.to_string();
            s.sender_note = sender_note.map(str::to_string);
            s.receiver_engine = receiver.to_string();
            s.receiver_note = receiver_note.map(str::to_string);
            s.verify = s.verify_mode.checks() && receiver != RecvEngine::Null.name();
        }
        self.flush_start();
    }

    fn file_done(&mut self, mut done: FileOutcome) {
        if done.failure.is_none() && (done.verified, done.stored) != self.asked {
            // The role proves what it reports; this is the last word on it: a file done as
            // less (or more) than the session asked for is not done.
            done.failure = Some(not_as_asked(&done, self.asked));
        }
        match done.failure {
            Some(mut f) => {
                if f.path.is_empty() {
                    f.path = done.path;
                }
                self.record_failure(f);
            }
            None => {
                tracing::debug!(path = %done.path, bytes = done.bytes, skipped = done.skipped,
                    engine = %done.engine, "committed");
                self.emit(Event::File(crate::event::Arrived {
                    path: done.path.clone(),
                    bytes: done.bytes,
                    skipped: done.skipped,
                    seconds: done.seconds,
                    verified: done.verified,
                    digest: done.verified.then(|| hex::encode(done.digest)),
                }));
                self.files += 1;
                self.bytes += done.bytes;
                self.skipped += done.skipped;
                self.verified &= done.verified;
                self.stored &= done.stored;
                self.digest = (self.files == 1 && done.verified).then_some(done.digest);
                // A file kept whole (an existing target proven equal) is counted in the
                // summary's resumed bytes; a line each would bury a re-run tree's output.
                if done.skipped > 0 && done.skipped < done.bytes {
                    self.emit(Event::Notice(format!(
                        "{}: resumed; {} were already on the receiver and not sent again",
                        done.path,
                        zcp_wire::size_text(done.skipped)
                    )));
                }
            }
        }
    }

    fn notice(&mut self, failure: Option<Failure>, note: Option<String>) {
        if let Some(f) = failure {
            self.record_failure(f);
        }
        if let Some(n) = note {
            self.emit(Event::Notice(n));
        }
    }

    fn tick(&mut self, phase: Phase) {
        if self.start.is_some() {
            return;
        }
        let now = Instant::now();
        let moved = self.moved();
        if moved != self.progress_at.1 {
            self.moved_at = now;
        }
        // Bytes moving is sending, whatever else the role waits for.
        self.phase = if now.duration_since(self.moved_at) < MOVING && moved > 0 {
            Phase::Sending
        } else {
            phase
        };
        if now >= self.progress_at.0 + PROGRESS_EVERY {
            self.progress_at = (now, moved);
            let p = self.progress();
            self.reporter.event(&Event::Progress(p));
        }
        if let Some(i) = self.interval
            && now >= self.last_tick + i
        {
            self.interval(now);
        }
    }

    fn plan(&mut self, files: u64, bytes: u64) {
        tracing::debug!(files, bytes, "the sender counted its sources");
        self.plan = Some((files, bytes));
    }

    fn stop(&self) -> Option<String> {
        let signal = self.stop.as_ref()?.load(Ordering::Relaxed);
        (signal != 0).then(|| {
            format!(
                "the client was interrupted ({})",
                signal_name(signal as i32)
            )
        })
    }
}

/// The failure of a file reported done, but not verified and stored as `asked`.
fn not_as_asked(done: &FileOutcome, asked: (bool, bool)) -> Failure {
    let word = |b: bool| if b { "" } else { "not " };
    Failure {
        path: String::new(),
        code: "verify",
        message: format!(
            "reported {}verified and {}stored, where the session asked for it {}verified \
             and {}stored",
            word(done.verified),
            word(done.stored),
            word(asked.0),
            word(asked.1)
        ),
    }
}

/// `SIGINT`, `SIGTERM`, ... for the signals a client stops on.
pub(crate) fn signal_name(signal: i32) -> String {
    match signal {
        2 => "SIGINT".into(),
        15 => "SIGTERM".into(),
        1 => "SIGHUP".into(),
        n => format!("signal {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Collect;

    fn start(verify_mode: zcp_wire::VerifyMode, receiver: &str) -> Start {
        let addr: std::net::SocketAddr = "127.0.0.1:1".parse().expect("an address");
        Start {
            local: addr,
            remote: addr,
            session: String::new(),
            direction: "send",
            source: String::new(),
            target: String::new(),
            size: None,
            chunk_size: 0,
            block_size: 0,
            streams: 1,
            sender_engine: "sendfile".into(),
            sender_note: None,
            receiver_engine: receiver.into(),
            receiver_note: None,
            verify: verify_mode.checks() && receiver != "null",
            verify_mode,
            limit_rate: None,
        }
    }

    fn done(verified: bool, stored: bool) -> FileOutcome {
        FileOutcome {
            path: "f".into(),
            bytes: 10,
            skipped: 0,
            seconds: 0.0,
            engine: "rw".into(),
            verified,
            stored,
            digest: [0; 32],
            failure: None,
        }
    }

    /// The last check before a file counts: done as the session asked (verified and stored
    /// by default; not verified with `--verify none`; neither with `null`), or failed.
    #[test]
    fn a_file_done_as_other_than_asked_counts_as_failed() {
        use zcp_wire::VerifyMode::{Blake3, None as Unverified};
        let cases = [
            (Blake3, "auto", (true, true), true),
            (Blake3, "auto", (false, true), false),
            (Blake3, "auto", (true, false), false),
            (Blake3, "null", (false, false), true),
            (Blake3, "null", (true, true), false),
            (Blake3, "mem", (true, false), true),
            (Unverified, "rw", (false, true), true),
            (Unverified, "rw", (false, false), false),
        ];
        for (mode, engine, (verified, stored), ok) in cases {
            let mut events = Collect::default();
            let mut obs = ClientObserver::new(
                &mut events,
                start(mode, engine),
                None,
                Vec::new(),
                Vec::new(),
                None,
            );
            obs.file_done(done(verified, stored));
            let what = format!("{mode:?} {engine} {verified} {stored}");
            assert_eq!(
                (obs.files, obs.failed),
                (u64::from(ok), u64::from(!ok)),
                "{what}"
            );
            if !ok {
                assert_eq!(obs.failures[0].code, "verify", "{what}");
                assert_eq!(obs.failures[0].path, "f", "{what}");
            }
        }
    }
}
