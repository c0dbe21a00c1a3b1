//! Before authentication: what anyone who reaches a port can do, and what a connection can
//! do to the server while its handshake is under way. `handshake`: a handshake cut at its
//! last step; `monitor`: the metrics listener's unauthenticated HTTP; `lockout`: connections
//! held in their handshake (and on the monitor) that must not keep a legitimate client out:
//! a full table, a source's share, the shorter deadline, descriptors; a sender on
//! `zcp recv`'s bare stream, which has no handshake at all, is in `bare_stream`.

mod handshake;
mod lockout;
mod monitor;
