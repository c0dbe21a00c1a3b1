//! The hostile peers every test in `hostile/` plays, one per direction, both built on
//! zcp-wire and able to send any frame in any order, with the key:
//! - [`server`]: a malicious *server* ([`Evil`]) for a real `zcp get` or `zcp send`: it runs
//!   the server's handshake, answers `Open` as it likes and plays the session's other side;
//! - [`receiver`]: the same server scripted as a lying *receiver* for a real `zcp send`
//!   ([`EvilRx`], each [`Lie`] an attack on the sender's proof that a file was stored and
//!   verified: engines, verified flags, digests, early commits, over TCP and UDP);
//! - [`client`]: a malicious *client* ([`Raw`], from `util.rs`, and its sessions) against a
//!   real `zcp serve`: sessions opened with any `Open`, files announced, chunks and MACs sent
//!   right or wrong, answers awaited;
//! - [`observe`]: what a test looks at afterwards on the victim's side (its disk, memory,
//!   descriptors and printed output).
//!
//! A test that needs a new move of either peer adds it here, in its direction's file, so the
//! next test of any class can make the same move.

pub mod client;
pub mod observe;
pub mod receiver;
pub mod server;

pub use client::*;
pub use observe::*;
pub use server::*;
