//! The names the hostile tests have called since the first round (`super::harness::…`),
//! kept for the tests and branches that still use them: the peers themselves live in
//! [`super::peer`] (the malicious server, the malicious client, what a test observes).

pub use super::peer::*;
