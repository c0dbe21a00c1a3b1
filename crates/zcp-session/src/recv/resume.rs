//! Resuming a part file: which chunks an earlier attempt's journal holds, and whether this
//! push may be offered them (a write-only identity: only its own sessions' chunks).

use std::collections::HashMap;

use zcp_engine::fs::PartFile;
use zcp_wire::journal::{JournalChunk, JournalHeader, MAX_JOURNAL_SESSIONS, decode_journal};
use zcp_wire::{ChunkPlan, ChunkProof, JournalOwner};

use super::chunks::JournalState;
use super::frames::Offer;
use super::prepare::engine_err;
use crate::error::Refusal;

/// The chunks an intact journal of an earlier attempt holds for this size and chunk size,
/// grouped by the session that verified them; the journal continues after them. Anything
/// else empties the part file, as does (`only`: a write-only identity's push) a journal
/// naming any session that was not that owner's: such an identity resumes only what its own
/// sessions wrote, and learns nothing of another's part file.
pub(crate) fn resume(
    part: &mut PartFile,
    plan: &ChunkPlan,
    journal: &mut JournalState,
    size: u64,
    only: Option<JournalOwner>,
) -> Result<Vec<Offer>, Refusal> {
    let state = if journal.kept {
        part.read_journal()
            .ok()
            .flatten()
            .and_then(|b| decode_journal(&b).ok())
    } else {
        None
    };
    let header = JournalHeader {
        size,
        chunk_size: plan.chunk_size(),
    };
    let Some(s) = state.filter(|s| {
        s.header == header
            && s.sessions.len() < MAX_JOURNAL_SESSIONS
            && s.chunks.iter().all(|c| c.index < plan.count())
            && only.is_none_or(|o| s.sessions.iter().all(|t| t.owner == o))
    }) else {
        part.reset().map_err(engine_err)?;
        return Ok(Vec::new());
    };
    // Latest record per chunk wins.
    let mut latest: HashMap<u64, &JournalChunk> = HashMap::new();
    for c in &s.chunks {
        latest.insert(c.index, c);
    }
    let mut by_session: HashMap<u16, Vec<(u64, ChunkProof)>> = HashMap::new();
    for (i, c) in latest {
        let proof = ChunkProof {
            mac: c.mac,
            cv: c.cv,
            // Not journaled; a file of one chunk keeps no journal.
            root: None,
        };
        by_session.entry(c.session).or_default().push((i, proof));
    }
    let mut offers: Vec<Offer> = by_session
        .into_iter()
        .map(|(t, mut entries)| {
            entries.sort_unstable_by_key(|e| e.0);
            let sess = s.sessions[usize::from(t)];
            Offer {
                nonces: (sess.client_nonce, sess.server_nonce),
                old_file_id: sess.file_id,
                entries,
            }
        })
        .collect();
    offers.sort_unstable_by_key(|o| o.entries[0].0);
    part.continue_journal(s.valid_len as u64)
        .map_err(engine_err)?;
    journal.tag = s.sessions.len() as u16;
    journal.open = true;
    Ok(offers)
}

#[cfg(test)]
#[path = "resume_tests.rs"]
mod resume_tests;
