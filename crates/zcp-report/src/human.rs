//! The human-readable report, laid out like iperf3's: a connection line, one line per
//! interval, a separator, and the summary with the engines, verification, CPU and memory.

use std::io::Write;

use zcp_session::{Event, Interval, Reporter, Start, Summary};

use crate::units::{bits_per_second, bytes, rate, size};

const HEADER: &str =
    "[ ID] Interval           Transfer     Bitrate         Retr  Cwnd          RTT";

/// Writes the human report to `W` (stdout in the binary, a buffer in tests).
#[derive(Debug)]
pub struct Human<W: Write> {
    out: W,
    header_done: bool,
}

impl<W: Write> Human<W> {
    /// A reporter writing to `out`.
    pub fn new(out: W) -> Human<W> {
        Human {
            out,
            header_done: false,
        }
    }

    /// The writer back (for tests).
    pub fn into_inner(self) -> W {
        self.out
    }

    fn start(&mut self, s: &Start) -> std::io::Result<()> {
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
        writeln!(
            o,
            "Sending {} ({}) to {} in {} chunks, {} stream{}",
            s.source,
            size(s.size),
            s.target,
            size(s.chunk_size),
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
        if !s.verify {
            writeln!(
                o,
                "  note: the null receiver discards bytes unread, so nothing is verified or stored"
            )?;
        }
        Ok(())
    }

    fn interval(&mut self, i: &Interval) -> std::io::Result<()> {
        if !self.header_done {
            writeln!(self.out, "{HEADER}")?;
            self.header_done = true;
        }
        for st in &i.streams {
            let secs = i.end - i.start;
            let (cwnd, rtt) = match &st.tcp {
                Some(t) => (
                    bytes(u64::from(t.snd_cwnd) * u64::from(t.snd_mss)),
                    format!("{} us", t.rtt_us),
                ),
                None => (String::from("-"), String::from("-")),
            };
            writeln!(
                self.out,
                "[{:>3}] {:>6.2}-{:<6.2} sec  {:>11}  {:>15} {:>4}  {:>12}  {:>8}",
                st.id,
                i.start,
                i.end,
                bytes(st.bytes),
                rate(bits_per_second(st.bytes, secs)),
                st.retransmits,
                cwnd,
                rtt
            )?;
        }
        Ok(())
    }

    fn summary(&mut self, s: &Summary) -> std::io::Result<()> {
        let o = &mut self.out;
        writeln!(o, "- - - - - - - - - - - - - - - - - - - - - - - - -")?;
        writeln!(
            o,
            "[ ID] Interval           Transfer     Bitrate         Retr"
        )?;
        writeln!(
            o,
            "[  0] {:>6.2}-{:<6.2} sec  {:>11}  {:>15} {:>4}  sent",
            0.0,
            s.send_seconds,
            bytes(s.bytes),
            rate(bits_per_second(s.bytes, s.send_seconds)),
            s.retransmits
        )?;
        let what = match (s.stored, s.verified) {
            (true, _) => "stored durably and verified",
            (false, true) => "received into memory and verified",
            (false, false) => "discarded by the receiver",
        };
        writeln!(
            o,
            "[  0] {:>6.2}-{:<6.2} sec  {:>11}  {:>15}       {what}",
            0.0,
            s.seconds,
            bytes(s.bytes),
            rate(bits_per_second(s.bytes, s.seconds)),
        )?;
        writeln!(
            o,
            "Engines:  sender {}, receiver {}",
            s.sender_engine, s.receiver_engine
        )?;
        match &s.digest {
            Some(d) if s.verified => writeln!(
                o,
                "Verified: every chunk MAC matched; keyed BLAKE3 digest {d}"
            )?,
            _ => writeln!(o, "Verified: no (the null receiver never reads the bytes)")?,
        }
        if s.stored {
            writeln!(
                o,
                "Stored:   {} (fsync'd, then renamed into place)",
                s.target
            )?;
        } else {
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
            "Memory:   peak RSS sender {}, receiver {}",
            size(s.sender_max_rss),
            size(s.receiver_max_rss)
        )?;
        Ok(())
    }
}

impl<W: Write> Reporter for Human<W> {
    fn event(&mut self, event: &Event) {
        // A closed stdout (zcp send ... | head) must not abort the transfer: ignore write errors.
        let _ = match event {
            Event::Start(s) => self.start(s),
            Event::Interval(i) => self.interval(i),
            Event::Summary(s) => self.summary(s),
        };
        let _ = self.out.flush();
    }
}
