//! The sender script's checks of what the role put out: each frame it sent, and each report
//! it made, against what the script told it.

use super::*;

/// Checks one frame the role sent.
pub(super) fn sent_frame(sm: &Sending, told: &mut Told, keys: &SessionKeys, m: &Message) {
    let asked = sm.cfg().recv_engine;
    let proved = sm.cfg().verify.checks() && asked != RecvEngine::Null;
    let waiting = told.prune_sent && !told.pruned;
    match m {
        Message::MakeDir { path, .. } | Message::MakeLink { path, .. } => {
            assert!(!told.prune_sent, "an entry after Prune");
            told.awaited.push_back((true, path.clone()));
        }
        Message::DirTimes { path, .. } => {
            assert!(!waiting, "directory times before the receiver's Pruned");
            told.awaited.push_back((false, path.clone()));
        }
        Message::Finish => assert!(!waiting, "Finish before the receiver's Pruned"),
        Message::Prune => {
            assert!(
                sm.cfg().delete.prunes() && !told.prune_sent,
                "a Prune not asked for, or again"
            );
            assert!(sm.idle_files(), "a Prune with files open");
            told.prune_sent = true;
        }
        Message::PutFile(p) => {
            assert!(!told.prune_sent, "a file after Prune");
            let plan = ChunkPlan::new(p.size, p.chunk_size).expect("a plan the role made");
            told.plans.insert(p.file_id, plan);
            if !told.ready.contains_key(&p.file_id) {
                told.not_ready.insert(p.file_id);
            }
            told.ids
                .insert(String::from_utf8_lossy(&p.dest).into_owned(), p.file_id);
        }
        Message::ChunkMac { file_id, index, .. } => {
            let ready = told.ready.get(file_id);
            assert!(
                proved && ready.is_some_and(|e| in_class(asked, e)),
                "a MAC for file {file_id} (ready as {ready:?}) in a session that proves nothing"
            );
            assert!(
                told.departed.contains(&(*file_id, *index)),
                "a MAC for chunk {index} of file {file_id}, which has not left"
            );
        }
        Message::FileEnd { file_id, digest } => {
            told.ended.insert(*file_id, *digest);
            if !told.over.contains(file_id) {
                told.unsettled.insert(*file_id);
            }
            let plan = told.plans[file_id];
            for i in 0..plan.count() {
                let c = (*file_id, i);
                assert!(
                    told.departed.contains(&c) || told.kept.contains(&c),
                    "FileEnd {file_id}: chunk {i} neither left nor kept"
                );
            }
            if !proved {
                return;
            }
            let plan = told.plans[file_id];
            let mut d = keys.file_digest(*file_id, plan.size(), plan.chunk_size());
            let macs = told.macs.get(file_id);
            for i in 0..plan.count() {
                let mac = macs.and_then(|m| m.get(&i)).copied();
                d.push(&mac.unwrap_or_else(|| panic!("FileEnd {file_id}: chunk {i} not hashed")));
            }
            assert_eq!(
                *digest,
                d.finish(),
                "FileEnd {file_id}: not this side's digest"
            );
        }
        _ => {}
    }
}

/// Checks one report: engines of the class asked for; a file done only with its proof.
pub(super) fn report(sm: &Sending, told: &mut Told, r: Report, commit: ThisCommit) {
    let asked = sm.cfg().recv_engine;
    let proved = sm.cfg().verify.checks() && asked != RecvEngine::Null;
    let d = match r {
        Report::Engines { receiver, .. } => {
            assert!(
                in_class(asked, &receiver),
                "reported receiver engine {receiver}"
            );
            return;
        }
        Report::FileDone(d) => d,
        Report::Notice(Some(f), _) if f.message.contains("without saying it made") => {
            told.unconfirmed += 1;
            return;
        }
        _ => return,
    };
    assert!(
        told.done.insert(d.path.clone()),
        "two outcomes for {}",
        d.path
    );
    if let Some(id) = told.ids.get(&d.path) {
        told.over.insert(*id);
        told.unsettled.remove(id);
    }
    if d.failure.is_some() {
        assert!(
            !d.verified && !d.stored,
            "{} failed, yet verified or stored",
            d.path
        );
        return;
    }
    let id = told.ids[&d.path];
    let Some((file, claim, after_end)) = commit.filter(|c| c.0 == id) else {
        panic!("{} done without a FileCommitted for it", d.path);
    };
    assert_eq!(file, id);
    assert!(after_end, "{} done on a commit before its FileEnd", d.path);
    let ready = told.ready.get(&id);
    assert!(
        ready.is_some_and(|e| in_class(asked, e)),
        "{} done with the engine {ready:?}, asked for {}",
        d.path,
        asked.name()
    );
    assert_eq!(d.verified, proved, "{} verified {}", d.path, d.verified);
    assert_eq!(d.stored, asked.stores(), "{} stored {}", d.path, d.stored);
    assert!(
        claim.stored || !asked.stores(),
        "{} done, not stored",
        d.path
    );
    if proved {
        let sent = told.ended[&id];
        assert!(claim.verified, "{} done, not verified", d.path);
        assert_eq!(claim.digest, sent, "{} done with another digest", d.path);
        let plain = plain_of(told.macs.get(&id), told.plans[&id].count());
        assert_eq!(d.digest, plain, "{} reported with another digest", d.path);
    } else {
        assert_eq!(d.digest, [0; 32], "{} unproved, with a digest", d.path);
    }
    told.committed += 1;
}
