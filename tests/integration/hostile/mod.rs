//! The hostile-peer harness: a malicious *server* that holds the key and answers `zcp get`
//! ([`Evil`]), and a malicious *client* ([`Raw`], extended here) against a real `zcp serve`.
//! Both are built on zcp-wire and send any frame in any order. Every test asserts what is on
//! disk afterwards, not only the exit code.
//!
//! `harness`: the malicious server ([`harness::Evil`]) and the helpers; `pull`: attacks by a
//! server on `zcp get`; `push`: attacks by a client on `zcp serve`; `partials`: what is left
//! on disk however a file is given up; `bounds`: what neither can make a peer hold or keep
//! open; `sparse`: holes claimed over data, extent tables that break the rules; `plan`: absurd
//! or flooded totals; `exports`: a key holder reaching beyond its export; `rate`: the rate cap from either side; `verify`: the verify mode from
//! either side, and unverified bytes within every bound; `raw`: a sender on `zcp recv`'s
//! bare stream, which needs no key; `logs`: names made to break the transfer log; `lockout`: connections held in their
//! handshake (and on the monitor) that must not keep a client out; `review`, `round3`, `round4` and
//! `round5`: the second
//! to fifth independent attackers' cases.

mod bounds;
mod exports;
mod harness;
mod lockout;
mod logs;
pub(crate) mod monitor;
mod partials;
mod plan;
mod pull;
mod push;
mod rate;
mod raw;
mod review;
mod round3;
mod round4;
mod round5;
mod sparse;
mod udp;
mod verify;
