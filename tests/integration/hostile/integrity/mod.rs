//! Integrity: nothing commits but the bytes the sender has, verified. `chunks`: chunks and
//! MACs that break the rules; `resume`: planted part files and journals, `Go` without an
//! offer, a chunk held for `Go`; `stale`: stale `O_DIRECT` writes after a part file was let
//! go; `sparse`: holes claimed over data and extent tables that break the rules; `udp`:
//! datagrams and side-channel frames that break the rules; `encrypted`: an encrypted
//! stream's records in clear, or sealed under another stream's or session's key;
//! `udp_sealed`: an encrypted UDP session's datagrams and side channel broken the same ways.

mod chunks;
mod encrypted;
mod resume;
mod sparse;
mod stale;
mod udp;
mod udp_sealed;
