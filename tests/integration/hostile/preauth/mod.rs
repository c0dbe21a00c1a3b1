//! Before authentication: what anyone who reaches a port can do, and what a connection can
//! do to the server while its handshake is under way. `handshake`: a handshake cut at its
//! last step; `monitor`: the metrics listener's unauthenticated HTTP. Tests of held
//! handshakes locking out legitimate clients go here too (as `lockout.rs`); a sender on
//! `zcp recv`'s bare stream, which has no handshake at all, is in `bare_stream`.

mod handshake;
mod monitor;
