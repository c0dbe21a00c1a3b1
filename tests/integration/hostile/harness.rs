//! The names the hostile tests have called since the first round (`super::harness::…`),
//! kept for the tests and branches that still use them: the peers themselves live in
//! [`super::peer`] (the malicious server, the malicious client, what a test observes).

// Nothing in this tree calls the old names any more; tests written against them on other
// branches (issue 24's new classes) do, and keep compiling when they are merged.
#[allow(unused_imports)]
pub use super::peer::*;
