//! What a receiver must show before the sending role reports a file done: the one place
//! that decides whether a `FileReady` names an engine the session asked for
//! ([`engine_fits`]) and whether a `FileCommitted` proves the file stored and verified
//! ([`judge`]).
//!
//! A receiver holding the key can say anything, so what it says is believed only where it
//! matches what this side asked for and computed itself: the engine class of the session's
//! `Open` (a storing engine for `auto`, `splice`, `direct` and `rw`, which fall back among
//! themselves; exactly `null` or `mem` when asked for), the verify mode of the session, and
//! the digest this side sent in `FileEnd`. Anything else fails the file (class `verify`), so
//! neither the summary nor the exit code can call it done.

use std::time::Instant;

use zcp_engine::RecvEngine;
use zcp_wire::ChunkProof;

use super::state::OutFile;

/// Why a receiver named `named` for a file of a session that asked for `asked`, if that
/// is not an engine of the class asked for: the receiver would otherwise decide alone
/// that nothing is stored (`null`, `mem`) or that nothing is proved (`null` reads no byte,
/// so no MAC is sent for it). `auto` is never an answer: the receiver resolves it.
pub(crate) fn engine_fits(asked: RecvEngine, named: &str) -> Result<RecvEngine, String> {
    let fits = |e: RecvEngine| {
        e != RecvEngine::Auto
            && if asked.stores() {
                e.stores()
            } else {
                e == asked
            }
    };
    match RecvEngine::parse(named) {
        Some(e) if fits(e) => Ok(e),
        Some(e) if asked.stores() && !e.stores() => Err(format!(
            "the receiver chose the {named} engine, which stores nothing, where '{}' was asked \
             for: nothing of this file would be stored{}",
            asked.name(),
            if e == RecvEngine::Null {
                " or verified"
            } else {
                ""
            }
        )),
        _ => Err(format!(
            "the receiver named the engine '{named}' where '{}' was asked for",
            asked.name()
        )),
    }
}

/// What a `FileCommitted` says.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claim {
    pub(crate) digest: [u8; 32],
    pub(crate) verified: bool,
    pub(crate) stored: bool,
}

/// What a commit proved, as the file's outcome reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Proved {
    /// Every chunk MAC and the digest this side computed were checked (never in a session
    /// that does not verify, nor with a `null` receiver the session asked for).
    pub(crate) verified: bool,
    /// Stored under its final name (never with `null` or `mem`).
    pub(crate) stored: bool,
    /// This side's plain BLAKE3 of the file when verified, else zeros.
    pub(crate) digest: [u8; 32],
}

/// Whether `claim`, a receiver's `FileCommitted` for `f`, proves the file done as the
/// session asked: after this side's `FileEnd` (before it, the receiver cannot have had the
/// data, and there is no digest of this side's to hold it to); stored where the engine
/// stores; and, where the file is proved, verified with the digest `FileEnd` carried. The
/// outcome's flags are this side's, never the receiver's alone: a claim of more than was
/// proved (`verified` in a session that does not verify) is not reported.
pub(crate) fn judge(f: &OutFile, claim: Claim) -> Result<Proved, String> {
    let Some(sent) = f.sent_digest else {
        return Err(
            "the receiver committed it before this side sent all of it (no FileEnd yet)".into(),
        );
    };
    if f.stores && !claim.stored {
        return Err(format!(
            "the receiver says it did not store it, with the {} engine, which stores",
            f.engine
        ));
    }
    if f.verify {
        if !claim.verified {
            return Err(
                "the receiver says it did not verify it, in a session that verifies".into(),
            );
        }
        if claim.digest != sent {
            return Err(
                "the receiver committed it with a digest other than this side's \
                 (keyed BLAKE3 over the chunk MACs it computed)"
                    .into(),
            );
        }
    }
    Ok(Proved {
        verified: f.verify,
        stored: f.stores,
        digest: f.plain_digest(),
    })
}

impl OutFile {
    /// Its time so far: from when its bytes began to move, or (none moved: every chunk was
    /// held already) from its announcement.
    pub(crate) fn seconds(&self, now: Instant) -> f64 {
        let from = self.began.unwrap_or(self.started);
        now.saturating_duration_since(from).as_secs_f64()
    }

    /// Chunk `index`'s proof: its MAC (what `ChunkMac` and the keyed digest carry) and its
    /// share of the file's plain BLAKE3.
    pub(crate) fn prove(&mut self, index: u64, proof: ChunkProof) {
        let i = index as usize;
        self.macs[i] = Some(proof.mac);
        self.cvs[i] = proof.cv;
        if i == 0 {
            self.root = proof.root;
        }
    }

    /// The file's plain BLAKE3 (what `b3sum` prints), from its chunks' chaining values: what
    /// reports show. Zeros for a file not verified (nothing was hashed).
    pub(crate) fn plain_digest(&self) -> [u8; 32] {
        if !self.verify {
            return [0; 32];
        }
        zcp_wire::plain_digest(&self.cvs, self.root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_storing_request_accepts_any_storing_engine_and_nothing_else() {
        for asked in [
            RecvEngine::Auto,
            RecvEngine::Splice,
            RecvEngine::Direct,
            RecvEngine::ReadWrite,
        ] {
            for named in ["splice", "direct", "rw"] {
                assert!(engine_fits(asked, named).is_ok(), "{asked:?} {named}");
            }
            for named in ["null", "mem", "auto", "", "RW", "rw ", "\\x1b[2J"] {
                let e = engine_fits(asked, named).unwrap_err();
                assert!(e.contains(asked.name()), "{e}");
            }
            let e = engine_fits(asked, "null").unwrap_err();
            assert!(
                e.contains("stores nothing") && e.contains("verified"),
                "{e}"
            );
            let e = engine_fits(asked, "mem").unwrap_err();
            assert!(
                e.contains("stores nothing") && !e.contains("verified"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_non_storing_request_accepts_exactly_that_engine() {
        for asked in [RecvEngine::Null, RecvEngine::Mem] {
            assert_eq!(engine_fits(asked, asked.name()), Ok(asked));
            for named in ["null", "mem", "rw", "splice", "direct", "auto"] {
                if named != asked.name() {
                    assert!(engine_fits(asked, named).is_err(), "{asked:?} {named}");
                }
            }
        }
    }
}
