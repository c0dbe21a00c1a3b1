//! zcp sessions: the sender, the server and its receiver, built on `zcp-wire` (what bytes
//! mean) and `zcp-engine` (how bytes move).
//!
//! This crate owns the order of things — handshake, file announcement, chunk plan, data
//! streams, verification, atomic commit — and the threads that do them. It never prints: a
//! sending session pushes [`Event`]s into a [`Reporter`], a server pushes [`ServerEvent`]s
//! into a [`ServerReporter`], and the `zcp-report` crate turns them into text or JSON.

#![deny(missing_docs)]

mod client;
mod conn;
mod error;
mod event;
mod incoming;
pub mod keyfile;
mod server;

pub use client::{SendOptions, send_file};
pub use error::{SessionError, exit};
pub use event::{
    Collect, Cpu, Event, Interval, Quiet, Reporter, ServerEvent, ServerReporter, Start,
    StreamInterval, Summary, TcpStats,
};
pub use server::{MAX_RECV_BLOCK, Server, ServerConfig};

/// The TCP port zcp uses when none is given.
pub const DEFAULT_PORT: u16 = 5310;
