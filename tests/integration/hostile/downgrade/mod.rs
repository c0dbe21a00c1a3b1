//! Downgrade: what a peer chooses or answers for a session (verify mode, rate cap, pacing,
//! transport, streams) is held to what the other side asked for and to its own limits;
//! an unknown name or another answer is refused by name before any stream joins, and a
//! session without verification still keeps every other bound. `verify`: the verify mode
//! from either side; `rate`: the rate cap and pacing from either side; `transport`:
//! transports, UDP modes and stream counts; `encryption`: a server that answers an
//! encrypting client in clear.

mod encryption;
mod rate;
mod transport;
mod verify;
