//! Turning session events into output: the iperf3-style text report ([`Human`]), one JSON
//! document ([`JsonDoc`], `-J`), JSON lines ([`JsonStream`], `--json-stream`), and the
//! server's log lines ([`ServerLog`]).
//!
//! This crate never measures anything: every number it prints arrived in an event, so the
//! formats cannot disagree with each other.

#![deny(missing_docs)]

mod human;
mod json;
pub mod monitor;
mod progress;
mod raw;
mod server;
pub mod units;

pub use human::Human;
pub use json::{JSON_VERSION, JsonDoc, JsonStream};
pub use monitor::Monitor;
pub use progress::{BarTarget, ProgressReport, line as progress_line};
pub use server::ServerLog;

#[cfg(test)]
mod tests;
