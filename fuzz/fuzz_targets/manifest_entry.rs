//! Any bytes as a run of manifest entries (`PutFile`, `MakeDir`, `MakeLink`, `DirTimes`),
//! raw or built from awkward path components, through the receiver's gate in a push and in a
//! pull: never panics; what decodes round-trips; an accepted path is plain, never the root,
//! never one of zcp's own names, inside what a pull asked for; `DirTimes` only for a
//! directory this session's `MakeDir` named (`zcp_session::fuzzing_entries`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    zcp_session::fuzzing_entries::manifest_entries(data);
});
