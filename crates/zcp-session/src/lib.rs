//! zcp sessions: the sender and receiver roles, the client that runs them (`send`, `get`)
//! and the server that runs them for its peers, built on `zcp-wire` (what bytes mean) and
//! `zcp-engine` (how bytes move); and bare byte streams without a session ([`raw`]:
//! `send --raw`, `recv`).
//!
//! This crate owns the order of things — handshake, session options, the manifest walk, the
//! chunk plan and its queue over N streams, verification and re-sends, the resume journal,
//! batched durable commits — and the threads that do them. It never prints: a client pushes
//! [`Event`]s into a [`Reporter`], a server pushes [`ServerEvent`]s into a
//! [`ServerReporter`], and the `zcp-report` crate turns them into text or JSON.

#![deny(missing_docs)]

mod client;
mod confine;
mod conn;
mod control;
mod error;
mod event;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing_entries;
pub mod keyfile;
mod manifest;
#[cfg(test)]
mod pair;
pub mod raw;
mod recv;
mod send;
mod server;
mod transport;
mod wiring;

pub use client::{
    Connection, GetOptions, LineSink, ListOptions, ListOutcome, Listed, MAX_RETRY_WAIT, READY,
    Relay, RemoteRoot, SECRET, SendOptions, Ssh, StopFlag, Transfer, get, list, send,
};
pub use error::{SessionError, exit};
pub use event::{
    Arrived, CLIENT_GAVE_UP, Collect, Cpu, Deleted, Encryption, Event, Failure, Fanout, Interval,
    Phase, Progress, Quiet, RateLimit, RawEnd, RawStart, Reporter, Retry, STOPPED_BY_CLIENT,
    ServerEvent, ServerReporter, Start, StreamInterval, Summary, TcpStats,
};
pub use recv::MAX_RECV_BLOCK;
pub use server::{
    AccessConfig, AccessSnapshot, AccessView, DEFAULT_MAX_PENDING, DEFAULT_MAX_PENDING_PER_SOURCE,
    ExportSpec, IdentitySpec, PendingId, PendingLimits, PendingSource, PendingTable, Permission,
    Reloader, SINGLE_EXPORT, SINGLE_IDENTITY, Server, ServerConfig, check_name,
};
pub use transport::Link;
pub use transport::udp::UdpReport;
pub use zcp_wire::VerifyMode;
pub use zcp_wire::udp::{TransportKind, UdpMode};

/// The TCP port zcp uses when none is given.
pub const DEFAULT_PORT: u16 = 5310;
