//! Any bytes as a script of inputs to the receiving role's state machine — frames from the
//! sender in any order, chunk headers, engine completions, durability and commit results,
//! the clock — with the file-system work answered in memory: never panics, and never commits,
//! acknowledges or reports progress for what it was not told happened
//! (`zcp_session::fuzzing`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    zcp_session::fuzzing::receiver_script(data);
});
