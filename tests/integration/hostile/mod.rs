//! Hostile peers that hold the key (and, before authentication, anyone who reaches a port),
//! one directory or file per attack class. Every test asserts what is on disk afterwards,
//! and what the victim reported, its exit code and where relevant its memory, not only
//! that something was refused.
//!
//! The peers: `peer/` (see its doc) is the one malicious server (`peer/server.rs`: `Evil`,
//! for `zcp get` and `zcp send`, scripted as a lying receiver in `peer/receiver.rs`) and the
//! one malicious client (`peer/client.rs`: `Raw`
//! sessions against `zcp serve`) every class uses, with `peer/observe.rs` for what a test
//! looks at afterwards; `harness` re-exports them under the names of earlier rounds.
//!
//! The classes:
//! - `confinement/`: writes beyond the root, destination or export; names, links, modes,
//!   hard links (`get`, `serve`, `exports`);
//! - `honesty/`: exit codes and claims: `send`'s against a lying receiver, `get`'s and
//!   `serve --once`'s exit codes, `Progress` from either side (`send`, `get`, `once`,
//!   `claims`);
//! - `resource_bounds/`: what a peer can make the other side hold: memory, chunk tables and
//!   offers, descriptors, the server log, UDP chunk buffers (`memory`, `tables`,
//!   `descriptors`, `logs`, `udp_memory`);
//! - `idle_clock/`: sessions held without progress (`serve`, `get`);
//! - `preauth/`: before or during the handshake: a cut handshake, the monitor's listener,
//!   held connections that would lock clients out (`handshake`, `monitor`, `lockout`);
//! - `downgrade/`: session parameters a peer chooses or answers: verify mode, rate cap and
//!   pacing, transport and streams (`verify`, `rate`, `transport`);
//! - `integrity/`: nothing commits unverified: chunks and MACs, planted resumes, stale
//!   writes, sparse extents, UDP datagrams (`chunks`, `resume`, `stale`, `sparse`, `udp`);
//! - `escaping/`: network text on the terminal, in the logs and on the monitor page
//!   (`terminal`, `logs`, `monitor`);
//! - `partials`: what is left on disk when a file is given up, on either side;
//! - `bare_stream`: a sender on `zcp recv`'s bare stream, which needs no key.
//!
//! Where the next test goes: in its class's directory, in the topic file of the side it
//! attacks (or a new topic file there, listed in the class's `mod.rs` doc); a new class
//! gets its own directory beside these, with a `mod.rs` that says what it holds, and a line
//! above. A move of either peer that a second test could use goes into `peer/`, not into
//! the test's file.

mod bare_stream;
mod confinement;
mod downgrade;
pub(crate) mod escaping;
mod harness;
mod honesty;
mod idle_clock;
mod integrity;
mod partials;
mod peer;
mod preauth;
mod resource_bounds;
