//! The live progress line (`indicatif`): bytes done of the total, percent, the current and the
//! average rate, ETA, files done of the total, and the phase, so that the end of a transfer
//! (the receiver verifying, syncing, renaming) never looks like a stall. It wraps another
//! reporter (the text report): every other event is printed by that one, with the line lifted
//! out of the way while it prints.

use std::fmt::Write as _;
use std::io::Write;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use zcp_session::{Event, Phase, Progress, Reporter};

use crate::units::{bits_per_second, rate, size};

/// Where the line is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarTarget {
    /// Redrawn in place on standard error, ten times a second (only when it is a terminal).
    Terminal,
    /// One plain line a second (and the last one) on standard error, for logs and pipes
    /// (`--progress` when standard error is not a terminal).
    Lines,
}

/// A reporter that draws the progress line and hands every other event to `inner`.
#[derive(Debug)]
pub struct ProgressReport<R: Reporter> {
    /// The line on a terminal; `None` for plain lines.
    bar: Option<ProgressBar>,
    /// When the last plain line was written.
    printed: Option<Instant>,
    inner: R,
    /// Bytes and time of the samples the current rate is taken over (about a second).
    window: std::collections::VecDeque<(Instant, u64)>,
    /// Interval lines are printed too (`-i` given with `--progress`).
    intervals: bool,
}

impl<R: Reporter> ProgressReport<R> {
    /// A progress line on `target`, other events to `inner`; interval events are passed on
    /// only when `intervals`.
    pub fn new(inner: R, target: BarTarget, intervals: bool) -> Self {
        let bar = (target == BarTarget::Terminal).then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(10));
            bar.set_style(ProgressStyle::with_template("{msg}").expect("the template is valid"));
            bar
        });
        ProgressReport {
            bar,
            printed: None,
            inner,
            window: Default::default(),
            intervals,
        }
    }

    /// Takes the line off the screen (before an error is printed).
    pub fn clear(&mut self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }

    /// The wrapped reporter.
    pub fn inner_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    /// The wrapped reporter back.
    pub fn into_inner(mut self) -> R {
        self.clear();
        self.inner
    }

    fn update(&mut self, p: &Progress) {
        let now = Instant::now();
        self.window.push_back((now, p.bytes));
        while self.window.len() > 2 && now.duration_since(self.window[0].0) > Duration::from_secs(1)
        {
            self.window.pop_front();
        }
        let (t0, b0) = self.window[0];
        let current = bits_per_second(
            p.bytes.saturating_sub(b0),
            now.duration_since(t0).as_secs_f64(),
        );
        match &self.bar {
            Some(b) => {
                let width = console::Term::stderr()
                    .size_checked()
                    .map_or(80, |(_, w)| w);
                b.set_message(line_within(p, current, usize::from(width)));
                b.tick();
            }
            None => {
                // A line a second, and the last one.
                let due = self
                    .printed
                    .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1));
                if due || p.phase == Phase::Done {
                    self.printed = Some(now);
                    let _ = writeln!(std::io::stderr(), "{}", line(p, current));
                }
            }
        }
    }
}

/// The progress line for `p`, with `current` the rate over the last second (bits/s): every
/// part, for logs and wide terminals.
pub fn line(p: &Progress, current: f64) -> String {
    compose(p, current, Parts::ALL)
}

/// The progress line for a terminal `width` columns wide: the most of it that fits, shedding
/// whole parts, the least useful first: the phase's padding, the average rate, the long phase
/// name (for its short one), the file count, the current rate, the phase, the ETA. Never
/// wider than `width - 1`, so the cursor never wraps (cut only where even the amount alone
/// does not fit).
pub fn line_within(p: &Progress, current: f64, width: usize) -> String {
    let room = width.saturating_sub(1);
    let all = Parts::ALL;
    let mut tries = vec![all];
    let mut shed = |f: fn(&mut Parts)| {
        let mut next = *tries.last().expect("one at least");
        f(&mut next);
        tries.push(next);
    };
    shed(|p| p.pad = false);
    shed(|p| p.avg = false);
    shed(|p| p.short = true);
    shed(|p| p.files = false);
    shed(|p| p.now = false);
    shed(|p| p.phase = false);
    shed(|p| p.eta = false);
    for parts in &tries {
        let text = compose(p, current, *parts);
        if text.chars().count() <= room {
            return text;
        }
    }
    let last = compose(p, current, tries[tries.len() - 1]);
    let cut: String = last.chars().take(room).collect();
    cut.trim_end().to_string()
}

/// Which parts of the line to write.
#[derive(Debug, Clone, Copy)]
struct Parts {
    /// The phase padded to its longest name, so the rest stays in place as it changes.
    pad: bool,
    /// The short name of the phase (`syncing` for `verifying and syncing`).
    short: bool,
    /// The rate over the last second, and the average rate.
    now: bool,
    avg: bool,
    /// Files done of the total.
    files: bool,
    /// The phase at all, and the ETA.
    phase: bool,
    eta: bool,
}

impl Parts {
    const ALL: Parts = Parts {
        pad: true,
        short: false,
        now: true,
        avg: true,
        files: true,
        phase: true,
        eta: true,
    };
}

fn compose(p: &Progress, current: f64, parts: Parts) -> String {
    let phase = match (parts.short, p.phase) {
        (true, Phase::Syncing) => "syncing",
        (_, phase) => phase.name(),
    };
    let mut s = match (parts.phase, parts.pad) {
        (false, _) => String::new(),
        (true, true) => format!("{phase:<22}"),
        (true, false) => phase.to_string(),
    };
    match p.total_bytes {
        Some(total) if total > 0 => {
            let pct = (p.bytes.min(total) as f64 * 100.0 / total as f64).floor();
            let _ = write!(
                s,
                " {} of {} {pct:>3.0}%",
                size(p.bytes.min(total)),
                size(total)
            );
        }
        Some(_) => s.push_str(" 0 B of 0 B 100%"),
        None => {
            let _ = write!(s, " {} of ?", size(p.bytes));
        }
    }
    let avg = bits_per_second(p.bytes, p.seconds);
    match (parts.now, parts.avg) {
        (true, true) => {
            let _ = write!(s, "  {} now, {} avg", rate(current), rate(avg));
        }
        (true, false) => {
            let _ = write!(s, "  {}", rate(current));
        }
        _ => {}
    }
    let eta = match (p.total_bytes, p.phase) {
        (_, Phase::Done) => Some(0.0),
        (Some(total), _) if avg > 0.0 => Some(total.saturating_sub(p.bytes) as f64 * 8.0 / avg),
        _ => None,
    };
    match eta {
        _ if !parts.eta => {}
        Some(e) => {
            let e = e.round() as u64;
            let _ = write!(s, "  ETA {}:{:02}:{:02}", e / 3600, e / 60 % 60, e % 60);
        }
        None => s.push_str("  ETA --:--:--"),
    }
    if parts.files {
        match p.total_files {
            Some(t) if t != 1 => {
                let _ = write!(s, "  {}/{} files", p.files, t);
            }
            None if p.files > 0 => {
                let _ = write!(s, "  {} files", p.files);
            }
            _ => {}
        }
    }
    s.trim_start().to_string()
}

impl<R: Reporter> Reporter for ProgressReport<R> {
    fn event(&mut self, event: &Event) {
        match event {
            Event::Progress(p) => self.update(p),
            Event::Interval(_) if !self.intervals => {}
            Event::Summary(_) | Event::RawEnd(_) => {
                self.clear();
                self.inner.event(event);
            }
            other => match &self.bar {
                Some(b) => b.suspend(|| self.inner.event(other)),
                None => self.inner.event(other),
            },
        }
    }
}
