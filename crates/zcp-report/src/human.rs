//! The human-readable report, laid out like iperf3's: a connection line, one line per stream
//! per interval (and a `[SUM]` line when there are several streams), a separator, and the
//! summary with the engines, verification, CPU and memory. Notices and failures are printed
//! as they happen.

use std::io::Write;

use zcp_session::{
    Arrived, Event, Failure, Interval, Phase, RateLimit, Reporter, Retry, Start, Summary,
};

use crate::units::{bits_per_second, bytes, rate, size};

const HEADER: &str =
    "[ ID] Interval           Transfer     Bitrate         Retr  Cwnd          RTT";

/// Writes the human report to `W` (stdout in the binary, a buffer in tests).
#[derive(Debug)]
pub struct Human<W: Write> {
    out: W,
    header_done: bool,
    streams: u16,
    /// The last failure printed (class and reason), and how many since had the same and
    /// were folded into one line: one wrong destination fails every entry of a tree alike
    /// (only destination classes fold; see `failed`).
    fold: Option<(String, String, u64)>,
    /// A line for every file that arrives (`-v`), not only for failures.
    files: bool,
}

impl<W: Write> Human<W> {
    /// A reporter writing to `out`.
    pub fn new(out: W) -> Human<W> {
        Human {
            out,
            header_done: false,
            streams: 1,
            fold: None,
            files: false,
        }
    }

    /// Also a line for every file that arrives (`-v`): its size, time, rate and proof.
    pub fn with_files(mut self, on: bool) -> Human<W> {
        self.files = on;
        self
    }

    fn arrived(&mut self, a: &Arrived) -> std::io::Result<()> {
        if !self.files {
            return Ok(());
        }
        let moved = a.bytes.saturating_sub(a.skipped);
        let held = if a.skipped > 0 {
            format!(", {} already there", size(a.skipped))
        } else {
            String::new()
        };
        writeln!(
            self.out,
            "file:     {} {} in {:.2} s, {}{held}, {}",
            a.path,
            size(a.bytes),
            a.seconds,
            rate(bits_per_second(moved, a.seconds)),
            if a.verified {
                "verified"
            } else {
                "not verified"
            }
        )
    }

    /// An entry `--delete` removed: shown with `-v`, and always in a dry run (the list is
    /// what a dry run is for).
    fn deleted(&mut self, d: &zcp_session::Deleted) -> std::io::Result<()> {
        if !self.files && !d.dry_run {
            return Ok(());
        }
        let slash = if d.dir { "/" } else { "" };
        match d.dry_run {
            true => writeln!(self.out, "would delete: {}{slash}", d.path),
            false => writeln!(self.out, "deleted:  {}{slash}", d.path),
        }
    }

    /// The writer back (for tests).
    pub fn into_inner(self) -> W {
        self.out
    }

    fn start(&mut self, s: &Start) -> std::io::Result<()> {
        self.streams = s.streams;
        let o = &mut self.out;
        writeln!(
            o,
            "Connecting to host {}, port {}",
            s.remote.ip(),
            s.remote.port()
        )?;
        writeln!(
            o,
            "[  0] local {} port {} connected to {} port {} (session {})",
            s.local.ip(),
            s.local.port(),
            s.remote.ip(),
            s.remote.port(),
            &s.session[..s.session.len().min(16)]
        )?;
        let what = match s.size {
            Some(n) => format!("{} ({})", s.source, size(n)),
            None => s.source.clone(),
        };
        let verb = if s.direction == "get" {
            "Fetching"
        } else {
            "Sending"
        };
        let chunks = if s.chunk_size == 0 {
            String::from("chunks sized per file")
        } else {
            format!("{} chunks", size(s.chunk_size))
        };
        writeln!(
            o,
            "{verb} {what} to {} in {chunks}, {} stream{}",
            s.target,
            s.streams,
            if s.streams == 1 { "" } else { "s" }
        )?;
        writeln!(
            o,
            "Engines: sender {}, receiver {}",
            s.sender_engine, s.receiver_engine
        )?;
        if let Some(n) = &s.sender_note {
            writeln!(o, "  sender: {n}")?;
        }
        if let Some(n) = &s.receiver_note {
            writeln!(o, "  receiver: {n}")?;
        }
        if !s.verify_mode.checks() {
            writeln!(
                o,
                "Verify: not verified (--verify none): no chunk MAC or file digest is computed or checked"
            )?;
        } else if !s.verify {
            writeln!(
                o,
                "  note: the null receiver discards bytes unread, so nothing is verified or stored"
            )?;
        }
        if let Some(r) = &s.limit_rate {
            writeln!(
                o,
                "Rate cap: {} over all streams, pacing: {}",
                rate(r.bits_per_second as f64),
                r.pacing
            )?;
        }
        Ok(())
    }

    fn line(
        &mut self,
        id: &str,
        start: f64,
        end: f64,
        n: u64,
        retr: u32,
        tcp: Option<&zcp_session::TcpStats>,
    ) -> std::io::Result<()> {
        let (cwnd, rtt) = match tcp {
            Some(t) => (
                bytes(u64::from(t.snd_cwnd) * u64::from(t.snd_mss)),
                format!("{} us", t.rtt_us),
            ),
            None => (String::new(), String::new()),
        };
        let line = format!(
            "[{id:>3}] {start:>6.2}-{end:<6.2} sec  {:>11}  {:>15} {retr:>4}  {cwnd:>12}  {rtt:>8}",
            bytes(n),
            rate(bits_per_second(n, end - start)),
        );
        writeln!(self.out, "{}", line.trim_end())
    }

    fn interval(&mut self, i: &Interval) -> std::io::Result<()> {
        if !self.header_done {
            writeln!(self.out, "{HEADER}")?;
            self.header_done = true;
        }
        for st in &i.streams {
            self.line(
                &st.id.to_string(),
                i.start,
                i.end,
                st.bytes,
                st.retransmits,
                st.tcp.as_ref(),
            )?;
        }
        if i.streams.len() > 1 {
            self.line("SUM", i.start, i.end, i.bytes(), i.retransmits(), None)?;
        }
        if let Some(u) = &i.udp {
            writeln!(
                self.out,
                "      udp {}: rate {}, so far {} datagrams {}, {} lost, {} re-sent, \
                 {} receiver drops, {} cuts",
                u.mode,
                rate(u.rate_bits as f64),
                u.sent.max(u.received),
                if u.sent > 0 { "sent" } else { "received" },
                u.lost,
                u.resent,
                u.receiver_drops,
                u.cuts
            )?;
        }
        // When nothing moves, say why: the end of a transfer must not read as a stall.
        let phase = i.progress.phase;
        if i.bytes() == 0 && !matches!(phase, Phase::Sending | Phase::Done) {
            writeln!(self.out, "      ({})", phase.name())?;
        }
        Ok(())
    }

    fn retry(&mut self, r: &Retry) -> std::io::Result<()> {
        writeln!(
            self.out,
            "retry:    {}; attempt {} of {} in {:.1} s (what is durable is not sent again)",
            r.reason, r.attempt, r.attempts, r.wait
        )
    }

    /// Writes what is still held back (failures folded into the last one printed): at the
    /// end of a session that ended without its summary.
    pub fn finish(&mut self) {
        let _ = self.unfold();
        let _ = self.out.flush();
    }

    fn failed(&mut self, f: &Failure) -> std::io::Result<()> {
        // Only failures of a cause the entries share fold: the destination (a path that is
        // not a directory, a full filesystem). An unreadable source, a damaged or changed
        // file is each file's own: every one is named.
        let shared = matches!(f.code, "bad-path" | "no-space");
        if let Some((code, message, n)) = &mut self.fold
            && shared
            && *code == f.code
            && *message == f.message
        {
            *n += 1;
            return Ok(());
        }
        self.unfold()?;
        self.fold = Some((f.code.to_string(), f.message.clone(), 0));
        writeln!(self.out, "failed:   {}: {} [{}]", f.path, f.message, f.code)
    }

    /// Writes how many failures were folded into the last one printed, if any.
    fn unfold(&mut self) -> std::io::Result<()> {
        match self.fold.take() {
            Some((_, _, n)) if n > 0 => writeln!(
                self.out,
                "failed:   and {n} more entr{} for the same reason",
                if n == 1 { "y" } else { "ies" }
            ),
            _ => Ok(()),
        }
    }

    fn summary(&mut self, s: &Summary) -> std::io::Result<()> {
        let id = if self.streams > 1 { "SUM" } else { "  0" };
        let o = &mut self.out;
        writeln!(o, "- - - - - - - - - - - - - - - - - - - - - - - - -")?;
        writeln!(
            o,
            "[ ID] Interval           Transfer     Bitrate         Retr"
        )?;
        writeln!(
            o,
            "[{id}] {:>6.2}-{:<6.2} sec  {:>11}  {:>15} {:>4}  sent",
            0.0,
            s.send_seconds,
            bytes(s.bytes_sent),
            rate(bits_per_second(s.bytes_sent, s.send_seconds)),
            s.retransmits
        )?;
        let unverified = !s.verify_mode.checks();
        let what = match (s.stored, s.verified) {
            _ if s.files == 0 => "nothing committed",
            (true, true) => "stored durably and verified",
            // "--verify none" only where the user asked for it.
            (true, false) if unverified => "stored durably, not verified (--verify none)",
            (true, false) => "stored durably, not verified",
            (false, true) => "received into memory and verified",
            (false, false) if unverified && s.receiver_engine != "null" => {
                "received into memory, not verified (--verify none)"
            }
            (false, false) if s.receiver_engine == "null" => "discarded by the receiver",
            (false, false) => "neither stored nor verified",
        };
        // Of the bytes moved: what was resumed or kept was not, and is named apart.
        let moved = s.bytes.saturating_sub(s.bytes_skipped);
        let kept = if s.bytes_skipped > 0 && s.files > 0 {
            format!(" (and {} resumed, not sent)", bytes(s.bytes_skipped))
        } else {
            String::new()
        };
        writeln!(
            o,
            "[{id}] {:>6.2}-{:<6.2} sec  {:>11}  {:>15}       {what}{kept}",
            0.0,
            s.seconds,
            bytes(moved),
            rate(bits_per_second(moved, s.seconds)),
        )?;
        writeln!(
            o,
            "Files:    {} committed, {} directories and links{}{}{}{}",
            s.files,
            s.entries,
            match (s.deleted, s.deleted_dry_run) {
                (0, _) => String::new(),
                (n, true) => format!(", {n} would be deleted (--delete-dry-run)"),
                (n, false) => format!(", {n} deleted"),
            },
            if s.left_existing > 0 {
                format!(
                    ", {} already there and left as {}",
                    s.left_existing,
                    if s.left_existing == 1 {
                        "it was"
                    } else {
                        "they were"
                    }
                )
            } else {
                String::new()
            },
            if s.failed > 0 {
                format!(", {} FAILED", s.failed)
            } else {
                String::new()
            },
            if s.resent_chunks > 0 {
                format!(
                    ", {} chunks sent again after failing verification",
                    s.resent_chunks
                )
            } else {
                String::new()
            }
        )?;
        if s.retries > 0 {
            writeln!(
                o,
                "Retries:  {} (each resumed what the receiver held)",
                s.retries
            )?;
        }
        if s.bytes_skipped > 0 {
            writeln!(
                o,
                "Resumed:  {} were already on the receiver and not sent again",
                bytes(s.bytes_skipped)
            )?;
        }
        writeln!(
            o,
            "Engines:  sender {}, receiver {}",
            s.sender_engine, s.receiver_engine
        )?;
        if let Some(e) = &s.encryption {
            writeln!(
                o,
                "Secrecy:  encrypted with {} (keys agreed with {} for this session); CPU in the cipher: sender {:.2} s, receiver {:.2} s",
                e.cipher, e.key_exchange, e.sender_seconds, e.receiver_seconds
            )?;
        }
        if let Some(u) = &s.udp {
            writeln!(
                o,
                "UDP:      {} mode, {}, {} B payloads; {} datagrams {}, {} lost ({}), \
                 {} re-sent ({}), {} receiver drops, {} refused, {} duplicates, {} rate cuts",
                u.mode,
                u.engines,
                u.payload,
                u.sent.max(u.received),
                if u.sent > 0 { "sent" } else { "received" },
                u.lost,
                bytes(u.lost_bytes),
                u.resent,
                bytes(u.resent_bytes),
                u.receiver_drops,
                u.rejected,
                u.duplicates,
                u.cuts
            )?;
        }
        if let Some(r) = &s.limit_rate {
            let sent = bits_per_second(s.bytes_sent, s.send_seconds);
            writeln!(
                o,
                "Rate cap: {} (pacing: {}); data sent at {:.1}% of it",
                rate(r.bits_per_second as f64),
                r.pacing,
                sent * 100.0 / r.bits_per_second.max(1) as f64
            )?;
        }
        match (&s.digest, s.verified) {
            (Some(d), true) => writeln!(
                o,
                "Verified: every chunk MAC matched; BLAKE3 {d} (as b3sum prints it)"
            )?,
            (None, true) => writeln!(o, "Verified: every chunk MAC and file digest matched")?,
            _ if s.files == 0 => {}
            _ if unverified => writeln!(
                o,
                "Verified: no (--verify none): no chunk MAC or file digest was computed or checked"
            )?,
            _ if s.receiver_engine == "null" => {
                writeln!(o, "Verified: no (the null receiver never reads the bytes)")?
            }
            _ => writeln!(o, "Verified: no")?,
        }
        if s.stored {
            writeln!(
                o,
                "Stored:   {} (fsync'd, then renamed into place)",
                s.target
            )?;
        } else if s.files > 0 {
            writeln!(o, "Stored:   no ({} receiver)", s.receiver_engine)?;
        }
        writeln!(
            o,
            "CPU:      sender {:.2} user + {:.2} sys s ({:.2} s moving data); receiver {:.2} user + {:.2} sys s",
            s.sender_cpu.user,
            s.sender_cpu.sys,
            s.sender_data_cpu.total(),
            s.receiver_cpu.user,
            s.receiver_cpu.sys
        )?;
        writeln!(
            o,
            "Memory:   peak RSS sender {}, receiver {} (whole processes, during the session)",
            size(s.sender_max_rss),
            size(s.receiver_max_rss)
        )?;
        Ok(())
    }
}

/// `event` with every text a peer could have written (names, engines, notes, messages)
/// escaped with [`zcp_wire::escape_text`]: the session escapes what it hears, and this is the
/// last guard before the terminal.
fn cleaned(event: &Event) -> Event {
    let t = |s: &str| zcp_wire::escape_text(s);
    let limit = |r: &RateLimit| RateLimit {
        pacing: t(&r.pacing),
        ..r.clone()
    };
    let failure = |f: &Failure| Failure {
        path: t(&f.path),
        code: f.code,
        message: t(&f.message),
    };
    match event {
        Event::Start(s) => Event::Start(Start {
            source: t(&s.source),
            target: t(&s.target),
            session: t(&s.session),
            sender_engine: t(&s.sender_engine),
            sender_note: s.sender_note.as_deref().map(t),
            receiver_engine: t(&s.receiver_engine),
            receiver_note: s.receiver_note.as_deref().map(t),
            limit_rate: s.limit_rate.as_ref().map(limit),
            ..s.clone()
        }),
        Event::Notice(n) => Event::Notice(t(n)),
        Event::Retry(r) => Event::Retry(Retry {
            reason: t(&r.reason),
            ..r.clone()
        }),
        Event::Failed(f) => Event::Failed(failure(f)),
        Event::Deleted(d) => Event::Deleted(zcp_session::Deleted {
            path: t(&d.path),
            ..d.clone()
        }),
        Event::File(a) => Event::File(Arrived {
            path: t(&a.path),
            digest: a.digest.as_deref().map(t),
            ..a.clone()
        }),
        Event::Summary(s) => Event::Summary(Summary {
            sender_engine: t(&s.sender_engine),
            receiver_engine: t(&s.receiver_engine),
            target: t(&s.target),
            digest: s.digest.as_deref().map(t),
            failures: s.failures.iter().map(failure).collect(),
            limit_rate: s.limit_rate.as_ref().map(limit),
            ..s.clone()
        }),
        Event::RawStart(s) => Event::RawStart(crate::raw::clean_start(s)),
        Event::RawEnd(e) => Event::RawEnd(crate::raw::clean_end(e)),
        other => other.clone(),
    }
}

impl<W: Write> Reporter for Human<W> {
    fn event(&mut self, event: &Event) {
        // A closed stdout (zcp send ... | head) must not abort the transfer: ignore write errors.
        let event = cleaned(event);
        if !matches!(event, Event::Failed(_) | Event::Progress(_)) {
            let _ = self.unfold();
        }
        let _ = match &event {
            Event::Start(s) => self.start(s),
            Event::Interval(i) => self.interval(i),
            Event::Notice(n) => writeln!(self.out, "note:     {n}"),
            Event::Failed(f) => self.failed(f),
            Event::File(a) => self.arrived(a),
            Event::Deleted(d) => self.deleted(d),
            Event::Summary(s) => self.summary(s),
            Event::Retry(r) => self.retry(r),
            Event::RawStart(s) => crate::raw::human_start(&mut self.out, s),
            Event::RawEnd(e) => crate::raw::human_end(&mut self.out, e),
            // Drawn by the progress bar, when there is one.
            Event::Progress(_) => Ok(()),
        };
        let _ = self.out.flush();
    }
}
