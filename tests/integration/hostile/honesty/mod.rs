//! Exit honesty: exit codes and reports tell the truth on both sides, never 0 when a
//! requested entry was not stored and verified, and never on the peer's word alone; what a
//! peer claims (`Progress`) is held to what it can be. `get`: a malicious server against
//! `zcp get`'s exit code; `once`: `zcp serve --once`'s exit code; `claims`: `Progress` from
//! either side; `send`: `zcp send`'s exit code against a malicious receiver (an engine not
//! asked for, a commit unverified, with another digest or before the data), in trees, with
//! `--retry` and over UDP, and `zcp serve`'s own verdict in a pull; `listing`: `zcp ls`
//! against a server that lists what was not asked for, or names that would drive a terminal.

mod claims;
mod get;
mod listing;
mod once;
mod send;
