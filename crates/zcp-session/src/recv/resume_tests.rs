//! [`super::resume`]: which part files a push may resume, by who wrote them.

use std::sync::Arc;

use zcp_engine::fs::PartFile;
use zcp_wire::journal::{JournalHeader, JournalRecord};
use zcp_wire::{ChunkPlan, JournalOwner};

use super::resume;
use crate::recv::chunks::JournalState;

const CHUNK: u64 = 65536;

/// A part file beside a journal of three chunks: one session per owner in `owners`, each
/// recording one chunk (the last owner the third).
fn part_with(dir: &tempfile::TempDir, owners: &[JournalOwner]) -> (PartFile, ChunkPlan) {
    let fd = std::fs::File::open(dir.path()).expect("open the directory");
    let (mut part, _) = PartFile::open(Arc::new(fd.into()), "k").expect("part file");
    let plan = ChunkPlan::new(3 * CHUNK, CHUNK).expect("plan");
    let header = JournalHeader {
        size: plan.size(),
        chunk_size: CHUNK,
    };
    part.start_journal(&header.encode()).expect("journal");
    let mut records = Vec::new();
    for (t, owner) in owners.iter().enumerate() {
        records.extend(
            JournalRecord::Session {
                owner: *owner,
                client_nonce: [t as u8; 32],
                server_nonce: [9; 32],
                file_id: 1,
            }
            .encode(),
        );
        records.extend(
            JournalRecord::Chunk {
                session: t as u16,
                index: t as u64,
                mac: [7; 32],
                cv: [8; 32],
            }
            .encode(),
        );
    }
    part.append_journal(&records).expect("records");
    (part, plan)
}

/// Chunks offered to a push that may resume only `only`'s part files (`None`: any).
fn offered(owners: &[JournalOwner], only: Option<JournalOwner>) -> usize {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut part, plan) = part_with(&dir, owners);
    let mut journal = JournalState {
        kept: true,
        ..JournalState::default()
    };
    let offers = resume(&mut part, &plan, &mut journal, plan.size(), only).expect("resume");
    offers.iter().map(|o| o.entries.len()).sum()
}

#[test]
fn a_write_only_identity_is_offered_only_what_its_own_sessions_wrote() {
    let (mine, theirs) = ([1; 16], [2; 16]);
    // Any identity that may read resumes whatever is there.
    assert_eq!(offered(&[mine, theirs], None), 2);
    // A write-only one: its own sessions only, every one of them.
    assert_eq!(offered(&[mine, mine], Some(mine)), 2);
    assert_eq!(offered(&[theirs], Some(mine)), 0);
    assert_eq!(offered(&[mine, theirs], Some(mine)), 0);
    assert_eq!(offered(&[theirs, mine], Some(mine)), 0);
}
