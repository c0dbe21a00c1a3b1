//! The JSON outputs: one document at the end (`-J`), or one JSON line per event
//! (`--json-stream`). Both shapes are a public interface, documented in docs/json.md and
//! snapshot-tested; add fields freely, never rename or remove one.

use std::io::Write;

use serde_json::{Value, json};
use zcp_session::{
    Arrived, Event, Failure, Interval, Progress, RateLimit, Reporter, Retry, Start, Summary,
};

use crate::units::bits_per_second;

/// Version of the JSON shapes; rises only when a field changes meaning or goes away.
pub const JSON_VERSION: u32 = 1;

/// The `connected` array of a `start`: the one connection's two ends, as iperf3 has it.
pub(crate) fn connected(local: std::net::SocketAddr, remote: std::net::SocketAddr) -> Value {
    json!([{
        "local_host": local.ip().to_string(),
        "local_port": local.port(),
        "remote_host": remote.ip().to_string(),
        "remote_port": remote.port(),
    }])
}

fn start(s: &Start) -> Value {
    json!({
        "version": format!("zcp {}", env!("CARGO_PKG_VERSION")),
        "protocol": zcp_wire::PROTOCOL_VERSION,
        "session": s.session,
        "direction": s.direction,
        "connected": connected(s.local, s.remote),
        "source": s.source,
        "target": s.target,
        "size": s.size,
        "chunk_size": s.chunk_size,
        "block_size": s.block_size,
        "streams": s.streams,
        "engines": {
            "sender": s.sender_engine,
            "receiver": s.receiver_engine,
            "sender_note": s.sender_note,
            "receiver_note": s.receiver_note,
        },
        "verify": s.verify,
        "verify_mode": s.verify_mode.name(),
        "limit_rate": s.limit_rate.as_ref().map(limit_rate),
    })
}

fn progress(p: &Progress) -> Value {
    json!({
        "phase": p.phase.name(),
        "bytes": p.bytes,
        "total_bytes": p.total_bytes,
        "files": p.files,
        "total_files": p.total_files,
    })
}

fn retry(r: &Retry) -> Value {
    json!({
        "attempt": r.attempt,
        "attempts": r.attempts,
        "reason": r.reason,
        "wait_seconds": r.wait,
    })
}

/// The rate cap: `{"bits_per_second", "pacing"}`, or `null` without one.
fn limit_rate(r: &RateLimit) -> Value {
    json!({ "bits_per_second": r.bits_per_second, "pacing": r.pacing })
}

fn interval(i: &Interval) -> Value {
    let secs = i.end - i.start;
    let streams: Vec<Value> = i
        .streams
        .iter()
        .map(|st| {
            json!({
                "id": st.id,
                "start": i.start,
                "end": i.end,
                "seconds": secs,
                "bytes": st.bytes,
                "bits_per_second": bits_per_second(st.bytes, secs),
                "retransmits": st.retransmits,
                "rtt_us": st.tcp.map(|t| t.rtt_us),
                "rttvar_us": st.tcp.map(|t| t.rttvar_us),
                "snd_cwnd_bytes": st.tcp.map(|t| u64::from(t.snd_cwnd) * u64::from(t.snd_mss)),
            })
        })
        .collect();
    json!({
        "streams": streams,
        "sum": {
            "start": i.start,
            "end": i.end,
            "seconds": secs,
            "bytes": i.bytes(),
            "bits_per_second": bits_per_second(i.bytes(), secs),
            "retransmits": i.retransmits(),
        },
        "progress": progress(&i.progress),
        "udp": i.udp.as_ref().map(udp),
    })
}

/// The UDP transport's counters: `null` over TCP.
fn udp(u: &zcp_session::UdpReport) -> Value {
    json!({
        "mode": u.mode,
        "engines": u.engines,
        "payload_bytes": u.payload,
        "datagrams_sent": u.sent,
        "datagrams_received": u.received,
        "datagrams_lost": u.lost,
        "bytes_lost": u.lost_bytes,
        "datagrams_resent": u.resent,
        "bytes_resent": u.resent_bytes,
        "receiver_drops": u.receiver_drops,
        "datagrams_refused": u.rejected,
        "duplicates": u.duplicates,
        "rate_bits_per_second": u.rate_bits,
        "rate_cuts": u.cuts,
    })
}

fn per_gib(cpu: f64, bytes: u64) -> f64 {
    if bytes == 0 {
        0.0
    } else {
        cpu / (bytes as f64 / f64::from(1u32 << 30))
    }
}

/// A file that arrived: its rate is of the bytes moved (not those already there).
fn arrived(a: &Arrived) -> Value {
    let moved = a.bytes.saturating_sub(a.skipped);
    json!({
        "path": a.path,
        "bytes": a.bytes,
        "bytes_skipped": a.skipped,
        "seconds": a.seconds,
        "bits_per_second": bits_per_second(moved, a.seconds),
        "verified": a.verified,
        "digest": a.digest,
    })
}

fn failure(f: &Failure) -> Value {
    json!({ "path": f.path, "code": f.code, "message": f.message })
}

fn end(s: &Summary) -> Value {
    json!({
        "files": {
            "committed": s.files,
            "left_existing": s.left_existing,
            "deleted": s.deleted,
            "deleted_dry_run": s.deleted_dry_run,
            "entries": s.entries,
            "failed": s.failed,
            "failures": s.failures.iter().map(failure).collect::<Vec<_>>(),
        },
        "resume": {
            "bytes_skipped": s.bytes_skipped,
            "chunks_resent": s.resent_chunks,
        },
        "sum": {
            "start": 0.0,
            "end": s.seconds,
            "seconds": s.seconds,
            "bytes": s.bytes,
            "bytes_moved": s.bytes.saturating_sub(s.bytes_skipped),
            "bits_per_second": bits_per_second(s.bytes.saturating_sub(s.bytes_skipped), s.seconds),
            "retransmits": s.retransmits,
        },
        "sum_sent": {
            "start": 0.0,
            "end": s.send_seconds,
            "seconds": s.send_seconds,
            "bytes": s.bytes_sent,
            "bits_per_second": bits_per_second(s.bytes_sent, s.send_seconds),
        },
        "engines": {
            "sender": s.sender_engine,
            "receiver": s.receiver_engine,
        },
        "cpu": {
            "sender": { "user": s.sender_cpu.user, "sys": s.sender_cpu.sys, "total": s.sender_cpu.total(),
                        "seconds_per_gib": per_gib(s.sender_cpu.total(), s.bytes),
                        "data_path": { "user": s.sender_data_cpu.user, "sys": s.sender_data_cpu.sys,
                                       "total": s.sender_data_cpu.total(),
                                       "seconds_per_gib": per_gib(s.sender_data_cpu.total(), s.bytes) } },
            "receiver": { "user": s.receiver_cpu.user, "sys": s.receiver_cpu.sys, "total": s.receiver_cpu.total(),
                          "seconds_per_gib": per_gib(s.receiver_cpu.total(), s.bytes) },
        },
        "memory": {
            "sender": { "max_rss_bytes": s.sender_max_rss },
            "receiver": { "max_rss_bytes": s.receiver_max_rss },
        },
        "verified": s.verified,
        "verify_mode": s.verify_mode.name(),
        "stored": s.stored,
        "digest": s.digest,
        "target": s.target,
        "retries": s.retries,
        "limit_rate": s.limit_rate.as_ref().map(limit_rate),
        "udp": s.udp.as_ref().map(udp),
        "encryption": s.encryption.as_ref().map(|e| json!({
            "cipher": e.cipher,
            "key_exchange": e.key_exchange,
            "cipher_seconds": { "sender": e.sender_seconds, "receiver": e.receiver_seconds },
        })),
    })
}

/// Collects events and writes one JSON document when the transfer ends (or fails).
#[derive(Debug)]
pub struct JsonDoc<W: Write> {
    out: W,
    start: Value,
    intervals: Vec<Value>,
    notices: Vec<String>,
    retries: Vec<Value>,
}

impl<W: Write> JsonDoc<W> {
    /// A reporter writing the document to `out` at the end.
    pub fn new(out: W) -> JsonDoc<W> {
        JsonDoc {
            out,
            start: json!({}),
            intervals: Vec::new(),
            notices: Vec::new(),
            retries: Vec::new(),
        }
    }

    /// The writer back (for tests).
    pub fn into_inner(self) -> W {
        self.out
    }

    /// Writes the document for a failed transfer: what is known, plus `error`.
    pub fn fail(&mut self, message: &str, exit_code: i32) {
        let doc = json!({
            "start": self.start,
            "intervals": self.intervals,
            "notices": self.notices,
            "retries": self.retries,
            "error": message,
            "exit_code": exit_code,
        });
        let _ = writeln!(
            self.out,
            "{}",
            serde_json::to_string_pretty(&doc).expect("JSON values serialize")
        );
    }
}

impl<W: Write> Reporter for JsonDoc<W> {
    fn event(&mut self, event: &Event) {
        match event {
            Event::Start(s) => self.start = start(s),
            Event::Interval(i) => self.intervals.push(interval(i)),
            Event::Notice(n) => {
                if self.notices.len() < 1000 {
                    self.notices.push(n.clone());
                }
            }
            // Failures are listed in `end.files.failures`; progress is for live displays; a
            // line per file is the stream's (a tree of millions would swell one document).
            Event::Failed(_) | Event::Progress(_) | Event::File(_) | Event::Deleted(_) => {}
            Event::Retry(r) => {
                if self.retries.len() < 1000 {
                    self.retries.push(retry(r));
                }
            }
            Event::Summary(s) => self.end(end(s)),
            Event::RawStart(s) => self.start = crate::raw::json_start(s),
            Event::RawEnd(e) => self.end(crate::raw::json_end(e)),
        }
    }
}

impl<W: Write> JsonDoc<W> {
    /// Writes the whole document, with `end`.
    fn end(&mut self, end: Value) {
        let doc = json!({
            "start": self.start,
            "intervals": self.intervals,
            "notices": self.notices,
            "retries": self.retries,
            "end": end,
        });
        let _ = writeln!(
            self.out,
            "{}",
            serde_json::to_string_pretty(&doc).expect("JSON values serialize")
        );
    }
}

/// Writes one JSON object per line as events happen: `{"type": ..., "version": 1, "data": ...}`.
#[derive(Debug)]
pub struct JsonStream<W: Write> {
    out: W,
}

impl<W: Write> JsonStream<W> {
    /// A reporter writing JSON lines to `out`.
    pub fn new(out: W) -> JsonStream<W> {
        JsonStream { out }
    }

    /// The writer back (for tests).
    pub fn into_inner(self) -> W {
        self.out
    }

    fn line(&mut self, kind: &str, data: Value) {
        let v = json!({ "type": kind, "version": JSON_VERSION, "data": data });
        let _ = writeln!(self.out, "{v}");
        let _ = self.out.flush();
    }

    /// Writes the `error` line of a failed transfer.
    pub fn fail(&mut self, message: &str, exit_code: i32) {
        self.line(
            "error",
            json!({ "message": message, "exit_code": exit_code }),
        );
    }
}

impl<W: Write> Reporter for JsonStream<W> {
    fn event(&mut self, event: &Event) {
        match event {
            Event::Start(s) => self.line("start", start(s)),
            Event::Interval(i) => self.line("interval", interval(i)),
            Event::Notice(n) => self.line("notice", json!({ "message": n })),
            Event::Failed(f) => self.line("failed", failure(f)),
            Event::File(a) => self.line("file", arrived(a)),
            Event::Deleted(d) => self.line(
                "deleted",
                json!({ "path": d.path, "dir": d.dir, "dry_run": d.dry_run }),
            ),
            Event::Summary(s) => self.line("end", end(s)),
            Event::Retry(r) => self.line("retry", retry(r)),
            Event::RawStart(s) => self.line("start", crate::raw::json_start(s)),
            Event::RawEnd(e) => self.line("end", crate::raw::json_end(e)),
            // The interval lines carry the phase and totals; ten lines a second would not help.
            Event::Progress(_) => {}
        }
    }
}
