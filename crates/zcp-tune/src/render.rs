//! The report as text (table, notes, fixes, snippet, other systems) and as JSON.

use std::fmt::Write;
use std::time::Duration;

use crate::units;
use crate::{Report, Source, Status};

fn source(s: &Source) -> &'static str {
    match s {
        Source::Given => "given",
        Source::Measured => "measured",
        Source::Assumed => "assumed",
    }
}

impl Report {
    /// The human report.
    pub fn to_text(&self) -> String {
        let mut o = String::new();
        let t = &self.target;
        let _ = writeln!(
            o,
            "zcp doctor: read-only, nothing was changed (host {}{})",
            self.root.display(),
            self.kernel
                .as_deref()
                .map(|k| format!(", kernel {k}"))
                .unwrap_or_default()
        );
        let _ = writeln!(
            o,
            "target: {} ({}: {}) x RTT {} ({}: {})",
            units::rate(t.rate_bps),
            source(&t.rate_source),
            t.rate_why,
            units::duration(Duration::from_micros(t.rtt_us)),
            source(&t.rtt_source),
            t.rtt_why
        );
        let _ = writeln!(
            o,
            "        = bandwidth-delay product {} ({} bytes): the bytes in flight one stream needs;\n          socket buffers are asked for at {} x that (a buffer also holds unacknowledged data)\n",
            units::bytes(t.bdp_bytes),
            t.bdp_bytes,
            crate::net::BUFFER_BDPS
        );

        let head = ["check", "current", "recommended", "status"];
        let w = |f: &dyn Fn(&crate::Check) -> usize, h: &str| {
            self.checks.iter().map(f).max().unwrap_or(0).max(h.len())
        };
        let w0 = w(&|c| c.name.len() + 2, head[0]);
        let w1 = w(&|c| c.current.chars().count(), head[1]);
        let w2 = w(&|c| c.recommended.chars().count(), head[2]);
        let _ = writeln!(
            o,
            "{:<w0$}  {:<w1$}  {:<w2$}  {}",
            head[0], head[1], head[2], head[3]
        );
        let mut notes = Vec::new();
        let mut section = "";
        for c in &self.checks {
            if c.section != section {
                section = &c.section;
                let _ = writeln!(o, "{section}");
            }
            let mut status = c.status.label().to_string();
            if let Some(n) = &c.note {
                notes.push((c, n));
                let _ = write!(status, " [{}]", notes.len());
            }
            let _ = writeln!(
                o,
                "  {:<w$}  {:<w1$}  {:<w2$}  {}",
                c.name,
                c.current,
                c.recommended,
                status,
                w = w0 - 2
            );
        }
        let _ = writeln!(
            o,
            "\n{} ok, {} to tune, {} unknown, {} for information",
            self.count(Status::Ok),
            self.count(Status::Tune),
            self.count(Status::Unknown),
            self.count(Status::Info)
        );
        if !notes.is_empty() {
            let _ = writeln!(o, "\nnotes:");
            for (i, (c, n)) in notes.iter().enumerate() {
                let _ = writeln!(o, "  [{}] {} {}: {n}", i + 1, c.section, c.name);
            }
        }
        let fixes = self.fixes();
        if fixes.is_empty() {
            let _ = writeln!(o, "\nnothing to fix.");
        } else {
            let _ = writeln!(
                o,
                "\nfixes (run as root; each lasts until reboot: make sysctls permanent with the snippet below):"
            );
            for f in fixes {
                let _ = writeln!(o, "  {f}");
            }
        }
        let _ = writeln!(
            o,
            "\nsysctl.conf snippet (zcp doctor --write-sysctl FILE writes it):"
        );
        for l in self.sysctl_conf.lines() {
            let _ = writeln!(o, "  {l}");
        }
        let _ = writeln!(
            o,
            "\nother systems, socket buffers for the same BDP (document 002, Fig. 4):"
        );
        for os in &self.other_os {
            let _ = writeln!(o, "  {} ({}):", os.os, os.file);
            for l in &os.lines {
                let _ = writeln!(o, "    {l}");
            }
        }
        o
    }

    /// The report as one JSON document: target, interfaces, checks (with notes and fixes),
    /// counts, fixes, snippet, other systems.
    pub fn to_json(&self) -> String {
        let mut v = serde_json::to_value(self).expect("a report serializes");
        v["counts"] = serde_json::json!({
            "ok": self.count(Status::Ok),
            "tune": self.count(Status::Tune),
            "unknown": self.count(Status::Unknown),
            "info": self.count(Status::Info),
        });
        v["fixes"] = serde_json::json!(self.fixes());
        serde_json::to_string_pretty(&v).expect("a value serializes")
    }
}
