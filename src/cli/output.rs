//! The output flags (`-i`, `-J`, `--json-stream`, `--progress`, `-q`) and the reporter they
//! choose: shared by the transfers (through `TransferArgs`) and `zcp recv`.

use std::sync::atomic::{AtomicBool, Ordering};

use clap::Args;

use super::{ErrorsOnly, Output, usage};

/// `-v` was given: the text report has a line for every file that arrives.
static FILES: AtomicBool = AtomicBool::new(false);

/// Sets whether the text report lists every file (`-v`, a flag of every subcommand).
pub(crate) fn files(on: bool) {
    FILES.store(on, Ordering::Relaxed);
}

/// How a transfer reports.
#[derive(Debug, Clone, Args)]
pub(crate) struct OutputArgs {
    /// Seconds between interval reports; 0 for none. Default 1, except on a terminal, where
    /// a progress line takes their place unless -i is given.
    #[arg(short = 'i', long, value_name = "SECONDS")]
    pub(crate) interval: Option<f64>,
    /// Print one JSON document at the end instead of the text report.
    #[arg(short = 'J', long, conflicts_with = "json_stream")]
    pub(crate) json: bool,
    /// Print one JSON object per line as events happen.
    #[arg(long)]
    pub(crate) json_stream: bool,
    /// Draw the progress line (bytes of the total, percent, rates, ETA) on standard error
    /// even when it is not a terminal (then as one line a second).
    #[arg(long, conflicts_with_all = ["json", "json_stream", "quiet"])]
    pub(crate) progress: bool,
    /// Print nothing but errors.
    #[arg(short = 'q', long, conflicts_with_all = ["json", "json_stream"])]
    pub(crate) quiet: bool,
}

impl OutputArgs {
    /// Whether the progress line is drawn, and where.
    fn bar(&self) -> Option<zcp_report::BarTarget> {
        use std::io::IsTerminal;
        let terminal = std::io::stderr().is_terminal();
        if self.progress {
            Some(if terminal {
                zcp_report::BarTarget::Terminal
            } else {
                zcp_report::BarTarget::Lines
            })
        } else if terminal && !self.json && !self.json_stream && !self.quiet {
            // On a terminal the line replaces the interval lines, unless -i asks for them.
            self.interval
                .is_none()
                .then_some(zcp_report::BarTarget::Terminal)
        } else {
            None
        }
    }

    /// The interval between reports the flags ask for (`None`: none).
    pub(crate) fn interval(&self) -> anyhow::Result<Option<std::time::Duration>> {
        let i = match self.interval {
            Some(i) => i,
            // The progress line takes the place of the interval lines.
            None if self.bar().is_some() || self.quiet => 0.0,
            None => 1.0,
        };
        if !i.is_finite() || i < 0.0 {
            usage!("-i/--interval takes a number of seconds >= 0, got {i}");
        }
        Ok((i > 0.0).then(|| std::time::Duration::from_secs_f64(i.max(0.01))))
    }

    /// The reporter the output flags ask for, writing to stdout.
    pub(crate) fn output(&self) -> Output {
        let human =
            || zcp_report::Human::new(std::io::stdout()).with_files(FILES.load(Ordering::Relaxed));
        if self.json {
            Output::Json(zcp_report::JsonDoc::new(std::io::stdout()))
        } else if self.json_stream {
            Output::Stream(zcp_report::JsonStream::new(std::io::stdout()))
        } else if self.quiet {
            Output::Quiet(ErrorsOnly)
        } else if let Some(target) = self.bar() {
            let intervals = self.interval.is_some_and(|i| i > 0.0);
            Output::Bar(zcp_report::ProgressReport::new(human(), target, intervals))
        } else {
            Output::Human(human())
        }
    }
}
