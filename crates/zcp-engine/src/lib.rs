//! Moving and counting bytes between file descriptors: the only crate in zcp that makes
//! syscalls of its own or uses `unsafe`.
//!
//! It owns the sender engines ([`SendEngine`]: sendfile, read/write, mmap), the receiver
//! engines ([`RecvEngine`]: splice, O_DIRECT ring, read/write, null, mem) and their probes,
//! filesystem work beneath the receiver's root ([`fs`]), hashing from the page cache through
//! guarded mappings ([`map`]), rate caps ([`pace`]: the kernel's TCP pacing and a token
//! bucket), resource accounting ([`sys`]) and the read-only host probes of
//! `zcp doctor` ([`probe`]), and the link-layer sockets of the testbed's delay line
//! ([`packet`]). It knows nothing of zcp's frames, keys or sessions: callers hand it
//! descriptors, offsets and lengths.
//!
//! `unsafe_code` stays denied at the crate level: each `unsafe` block carries its own
//! `#[allow(unsafe_code)]` and a `// SAFETY:` note, so none slips in unannounced.

#![deny(missing_docs)]

mod buf;
mod error;
pub mod fs;
pub mod map;
pub mod pace;
pub mod packet;
pub mod poller;
pub mod probe;
pub mod recv;
pub mod send;
pub mod sparse;
pub mod sync;
pub mod sys;
pub mod udp;

pub use buf::AlignedBuf;
pub use error::{EngineError, IoClass, io_class};
pub use recv::{Choice, RecvEngine, StreamReceiver};
pub use send::{FileSender, SendEngine};
pub use sys::{TcpStats, Usage};
