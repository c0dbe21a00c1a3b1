//! The status page's model: the running sessions, a ring of per-second throughput samples,
//! and the last transfers, rendered as the JSON of `GET /api/sessions`.

use std::collections::VecDeque;

use serde::Serialize;

/// Per-second samples kept: ten minutes.
pub(crate) const SAMPLES: usize = 600;
/// Finished files and sessions kept.
pub(crate) const RECENT: usize = 50;
/// Seconds the rate gauge averages over.
pub(crate) const RATE_WINDOW: usize = 5;

/// A running session, as the page shows it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Active {
    pub(crate) session: String,
    pub(crate) peer: String,
    pub(crate) identity: String,
    pub(crate) export: String,
    pub(crate) direction: &'static str,
    pub(crate) streams: u16,
    pub(crate) phase: &'static str,
    pub(crate) bytes: u64,
    pub(crate) total_bytes: Option<u64>,
    pub(crate) files: u64,
    pub(crate) total_files: Option<u64>,
    /// The last file committed, escaped.
    pub(crate) last: Option<String>,
    /// Bits per second between the last two progress reports.
    pub(crate) rate_bps: f64,
    pub(crate) sender_engine: Option<String>,
    pub(crate) receiver_engine: Option<String>,
    /// Seconds since the session started.
    pub(crate) seconds: f64,
    /// When it started, seconds since the monitor's start.
    #[serde(skip)]
    pub(crate) started_at: f64,
    /// When its bytes were last counted, and how many had been then.
    #[serde(skip)]
    pub(crate) counted_at: f64,
    #[serde(skip)]
    pub(crate) counted: u64,
}

/// A finished file or session.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Recent {
    /// `file` or `session`.
    pub(crate) kind: &'static str,
    /// When it finished, seconds since the monitor's start.
    pub(crate) at: f64,
    pub(crate) session: String,
    pub(crate) direction: &'static str,
    pub(crate) identity: String,
    pub(crate) export: String,
    /// The peer (sessions) or the file's path (files), escaped.
    pub(crate) name: String,
    pub(crate) bytes: u64,
    /// Files committed (sessions; 1 or 0 for a file).
    pub(crate) files: u64,
    pub(crate) seconds: f64,
    /// `ok` or `failed`.
    pub(crate) outcome: &'static str,
    /// Why it failed, escaped.
    pub(crate) reason: Option<String>,
    /// Files of one session that finished one after another alike (committed, or failed
    /// for the same reason) share a row: how many, `name` the last of them; `seconds` then
    /// spans from the first one's start to the last one's end. 1 for a session.
    pub(crate) count: u64,
}

impl Recent {
    /// Takes `next` into this row when both are files of the same session that ended alike.
    pub(crate) fn absorb(&mut self, next: &Recent) -> bool {
        let alike = self.kind == "file"
            && next.kind == "file"
            && self.session == next.session
            && !self.session.is_empty()
            && self.outcome == next.outcome
            && self.reason == next.reason;
        if !alike {
            return false;
        }
        let began = (self.at - self.seconds).min(next.at - next.seconds);
        self.at = next.at;
        self.seconds = ((next.at - began) * 1000.0).round() / 1000.0;
        self.name.clone_from(&next.name);
        self.bytes += next.bytes;
        self.files += next.files;
        self.count += 1;
        true
    }
}

/// Bytes moved in each second since the monitor started, the last [`SAMPLES`] of them.
#[derive(Debug, Default)]
pub(crate) struct Throughput {
    /// The second (since the start) of `bytes[0]`.
    first: u64,
    /// Bytes per second; the last entry is the second in progress.
    bytes: VecDeque<f64>,
}

impl Throughput {
    /// Makes the last entry the second `now` falls in.
    pub(crate) fn advance(&mut self, now: f64) {
        let sec = now.max(0.0) as u64;
        if self.bytes.is_empty() {
            self.first = sec;
            self.bytes.push_back(0.0);
        }
        let last = self.first + self.bytes.len() as u64 - 1;
        if sec <= last {
            return;
        }
        // A long quiet spell: start afresh rather than push hundreds of zeros one by one.
        let gap = sec - last;
        if gap as usize > SAMPLES {
            self.bytes.clear();
            self.bytes.extend(std::iter::repeat_n(0.0, SAMPLES + 1));
        } else {
            self.bytes.extend(std::iter::repeat_n(0.0, gap as usize));
        }
        while self.bytes.len() > SAMPLES + 1 {
            self.bytes.pop_front();
        }
        self.first = sec + 1 - self.bytes.len() as u64;
    }

    /// Adds `bytes` moved between `from` and `to` (seconds), spread evenly over the seconds
    /// in between (a session reports about once a second, not on the second).
    pub(crate) fn add(&mut self, from: f64, to: f64, bytes: u64) {
        self.advance(to);
        if bytes == 0 {
            return;
        }
        let start = self.first as f64;
        let from = from.max(start).max(to - SAMPLES as f64);
        if to - from < 1e-6 {
            if let Some(b) = self.bytes.back_mut() {
                *b += bytes as f64;
            }
            return;
        }
        let per_second = bytes as f64 / (to - from);
        let mut t = from;
        while t < to {
            let sec_end = (t.floor() + 1.0).min(to);
            let i = (t.floor() as u64).saturating_sub(self.first) as usize;
            if let Some(b) = self.bytes.get_mut(i) {
                *b += per_second * (sec_end - t);
            }
            t = sec_end;
        }
    }

    /// Bits per second in each complete second, oldest first.
    pub(crate) fn samples(&self) -> Vec<u64> {
        let complete = self.bytes.len().saturating_sub(1);
        self.bytes
            .iter()
            .take(complete)
            .map(|b| (b * 8.0).round() as u64)
            .collect()
    }

    /// Bits per second over the last [`RATE_WINDOW`] complete seconds (fewer at the start).
    pub(crate) fn rate(&self) -> f64 {
        let complete = self.bytes.len().saturating_sub(1);
        let n = complete.min(RATE_WINDOW);
        if n == 0 {
            return 0.0;
        }
        let sum: f64 = self.bytes.iter().take(complete).rev().take(n).sum();
        sum * 8.0 / n as f64
    }
}

/// The document `GET /api/sessions` answers with.
#[derive(Debug, Serialize)]
pub(crate) struct Status<'a> {
    /// Seconds since the server started.
    pub(crate) uptime: f64,
    /// Bits per second over the last seconds.
    pub(crate) rate_bps: f64,
    pub(crate) active: Vec<&'a Active>,
    /// Seconds each sample covers.
    pub(crate) sample_seconds: u32,
    /// Bits per second in each of the last seconds, oldest first.
    pub(crate) samples: Vec<u64>,
    /// Finished files and sessions, newest first.
    pub(crate) recent: Vec<&'a Recent>,
}
