//! Turning session events into output: the iperf3-style text report ([`Human`]), one JSON
//! document ([`JsonDoc`], `-J`), JSON lines ([`JsonStream`], `--json-stream`), and the
//! server's log lines ([`ServerLog`], or as tracing events: [`ServerTrace`]), and the server's
//! JSON transfer log ([`TransferLog`]).
//!
//! This crate never measures anything: every number it prints arrived in an event, so the
//! formats cannot disagree with each other.

#![deny(missing_docs)]

mod human;
mod json;
pub mod log_writer;
pub mod monitor;
mod progress;
mod raw;
pub mod serve_config;
mod server;
mod server_trace;
pub mod sessions;
mod transfer_log;
pub mod units;

pub use human::Human;
pub use json::{JSON_VERSION, JsonDoc, JsonStream};
pub use monitor::Monitor;
pub use progress::{
    BarTarget, ProgressReport, line as progress_line, line_within as progress_line_within,
};
pub use server::ServerLog;
pub use server_trace::{ServerTrace, TARGET as LOG_TARGET, level as log_level};
pub use transfer_log::TransferLog;

#[cfg(test)]
mod tests;
