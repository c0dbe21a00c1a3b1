//! Any bytes as a script of inputs to the sending role's state machine, played as a
//! malicious receiver would — offers, `FileReady` naming any engine, acknowledgements,
//! `FileCommitted` with any digest, `verified` and `stored`, failures, keep-alives, errors,
//! in any order — with the hash workers, resume checks, source checks and the clock
//! answered in memory: never panics, never reports a file done, verified or stored without
//! the proof the session asked for, and holds what it holds within its bounds
//! (`zcp_session::fuzzing::sender_script`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    zcp_session::fuzzing::sender_script(data);
});
