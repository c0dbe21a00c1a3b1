//! Bytes to message bodies: every length bounded before allocation, every byte accounted for.

use super::*;
use crate::SESSION_ID_LEN;

impl Message {
    /// Decodes a body of type `kind`. The body is the payload without any seal tag.
    pub fn decode(kind: u8, body: &[u8]) -> Result<Message, DecodeError> {
        let mut r = Reader::new(body);
        let msg = match kind {
            code::HELLO..=code::OPENED => setup(kind, &mut r)?,
            code::PUT_FILE..=code::GO => entry(kind, &mut r)?,
            _ => file(kind, &mut r)?,
        };
        r.finish("message")?;
        Ok(msg)
    }
}

fn unknown(kind: u8) -> DecodeError {
    DecodeError::Malformed(format!("unknown message type 0x{kind:02x}"))
}

/// Handshake and session set-up messages.
fn setup(kind: u8, r: &mut Reader<'_>) -> Result<Message, DecodeError> {
    Ok(match kind {
        code::HELLO => {
            let magic: [u8; 4] = r.array()?;
            if magic != HELLO_MAGIC {
                return Err(DecodeError::Malformed(
                    "not a zcp hello (bad magic bytes)".into(),
                ));
            }
            let version = r.u16()?;
            let role = match r.u8()? {
                1 => Role::Control,
                2 => Role::Data,
                other => {
                    return Err(DecodeError::Malformed(format!(
                        "unknown connection role {other}"
                    )));
                }
            };
            let nonce = r.array()?;
            // A version-1 Hello has no identity: it still decodes, to be answered with
            // Error{version}.
            let identity = match (version >= 2, role) {
                (true, Role::Control) => Some(r.array()?),
                _ => None,
            };
            // Version 6 on: a key share (none is read from an older one, to be answered with
            // Error{version}).
            let share = match (version >= 6, role) {
                (true, Role::Control) => optional_share(r)?,
                _ => None,
            };
            Message::Hello {
                version,
                role,
                nonce,
                identity,
                share,
            }
        }
        code::CHALLENGE => {
            let (version, nonce, proof) = (r.u16()?, r.array()?, r.array()?);
            Message::Challenge {
                version,
                nonce,
                proof,
                share: if version >= 6 {
                    optional_share(r)?
                } else {
                    None
                },
            }
        }
        code::PROOF => Message::Proof { proof: r.array()? },
        code::DATA_CHALLENGE => Message::DataChallenge { nonce: r.array()? },
        code::DATA_JOIN => Message::DataJoin {
            session_id: r.array::<SESSION_ID_LEN>()?,
            stream: r.u16()?,
            proof: r.array()?,
        },
        code::DATA_ACCEPT => Message::DataAccept,
        code::ERROR => Message::Error {
            code: ErrorCode::from_u16(r.u16()?),
            message: r.text(MAX_TEXT, "error message")?,
        },
        code::WELCOME => {
            let session_id = r.array()?;
            let max_streams = r.u16()?;
            let [exports] = read_flags::<1>(r, "welcome")?;
            Message::Welcome {
                session_id,
                max_streams,
                exports,
            }
        }
        code::OPEN => {
            let [pull, recursive, list, delete, dry] = read_flags::<5>(r, "open")?;
            let delete = DeleteMode::from_flags(delete, dry).ok_or_else(|| {
                DecodeError::Malformed("an Open asks for a dry run of no --delete".into())
            })?;
            Message::Open(Box::new(Open {
                pull,
                recursive,
                streams: r.u16()?,
                idle_ms: r.u32()?,
                recv_engine: r.text(MAX_ENGINE_NAME, "receiver engine")?,
                send_engine: r.text(MAX_ENGINE_NAME, "sender engine")?,
                block_size: r.u32()?,
                chunk_size: r.u64()?,
                rate: r.u64()?,
                verify: r.text(MAX_ENGINE_NAME, "verify mode")?,
                transport: r.text(MAX_ENGINE_NAME, "transport")?,
                udp_mode: r.text(MAX_ENGINE_NAME, "UDP mode")?,
                export: r.text(MAX_NAME, "export name")?,
                existing: r.text(MAX_ENGINE_NAME, "existing-file mode")?,
                list,
                filters: filters(r)?,
                delete,
            }))
        }
        code::OPENED => Message::Opened {
            streams: r.u16()?,
            idle_ms: r.u32()?,
            pacing: {
                let v = r.u8()?;
                Pacing::from_u8(v)
                    .ok_or_else(|| DecodeError::Malformed(format!("unknown pacing {v}")))?
            },
            verify: r.text(MAX_ENGINE_NAME, "verify mode")?,
            transport: r.text(MAX_ENGINE_NAME, "transport")?,
            udp_mode: r.text(MAX_ENGINE_NAME, "UDP mode")?,
        },
        other => return Err(unknown(other)),
    })
}

/// An `Open`'s filter rules: a count, bounded before anything is allocated, then each text.
fn filters(r: &mut Reader<'_>) -> Result<Vec<String>, DecodeError> {
    let n = usize::from(r.u16()?);
    if n > crate::MAX_FILTER_RULES {
        return Err(DecodeError::TooLarge {
            len: n as u64,
            max: crate::MAX_FILTER_RULES as u64,
        });
    }
    (0..n)
        .map(|_| r.text(crate::MAX_FILTER_RULE, "filter rule"))
        .collect()
}

/// Entry announcements and their answers.
fn entry(kind: u8, r: &mut Reader<'_>) -> Result<Message, DecodeError> {
    Ok(match kind {
        code::PUT_FILE => Message::PutFile(PutFile {
            file_id: r.u32()?,
            dest: r.bytes(MAX_PATH, "destination path")?,
            name: r.bytes(MAX_NAME, "file name")?,
            size: r.u64()?,
            mode: r.u32()?,
            mtime_sec: r.i64()?,
            mtime_nsec: r.u32()?,
            chunk_size: r.u64()?,
            sparse: {
                let [sparse] = read_flags::<1>(r, "PutFile")?;
                sparse
            },
        }),
        code::MAKE_DIR => Message::MakeDir {
            path: r.bytes(MAX_PATH, "directory path")?,
            top: read_flags::<1>(r, "MakeDir")?[0],
        },
        code::MAKE_LINK => Message::MakeLink {
            path: r.bytes(MAX_PATH, "link path")?,
            target: r.bytes(MAX_PATH, "link target")?,
        },
        code::DIR_TIMES => Message::DirTimes {
            path: r.bytes(MAX_PATH, "directory path")?,
            mode: r.u32()?,
            mtime_sec: r.i64()?,
            mtime_nsec: r.u32()?,
        },
        code::ENTRY_FAILED => Message::EntryFailed {
            path: r.bytes(MAX_PATH, "entry path")?,
            code: ErrorCode::from_u16(r.u16()?),
            message: r.text(MAX_TEXT, "failure message")?,
        },
        code::HAVE => {
            let (file_id, client_nonce, server_nonce, old_file_id) =
                (r.u32()?, r.array()?, r.array()?, r.u32()?);
            let n = usize::from(r.u16()?);
            if n > MAX_HAVE_ENTRIES {
                return Err(DecodeError::Malformed(format!(
                    "{n} entries in one Have, over the limit of {MAX_HAVE_ENTRIES}"
                )));
            }
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                entries.push((r.u64()?, r.array()?));
            }
            Message::Have(Have {
                file_id,
                client_nonce,
                server_nonce,
                old_file_id,
                entries,
            })
        }
        code::FILE_READY => {
            let (file_id, engine, note, target) = (
                r.u32()?,
                r.text(MAX_ENGINE_NAME, "engine name")?,
                r.text(MAX_TEXT, "note")?,
                r.bytes(MAX_PATH, "target path")?,
            );
            let [resumed] = read_flags::<1>(r, "file ready")?;
            Message::FileReady {
                file_id,
                engine,
                note,
                target,
                resumed,
            }
        }
        code::GO => {
            let file_id = r.u32()?;
            let [restart] = read_flags::<1>(r, "go")?;
            Message::Go { file_id, restart }
        }
        other => return Err(unknown(other)),
    })
}

/// Per-chunk and per-file messages, and the end of a session.
fn file(kind: u8, r: &mut Reader<'_>) -> Result<Message, DecodeError> {
    Ok(match kind {
        code::CHUNK_MAC => Message::ChunkMac {
            file_id: r.u32()?,
            index: r.u64()?,
            mac: r.array()?,
        },
        code::CHUNK_ACK => {
            let (file_id, index) = (r.u32()?, r.u64()?);
            let [ok] = read_flags::<1>(r, "chunk ack")?;
            Message::ChunkAck { file_id, index, ok }
        }
        code::FILE_END => Message::FileEnd {
            file_id: r.u32()?,
            digest: r.array()?,
        },
        code::FILE_ABORT => Message::FileAbort {
            file_id: r.u32()?,
            code: ErrorCode::from_u16(r.u16()?),
            message: r.text(MAX_TEXT, "abort message")?,
        },
        code::FILE_COMMITTED => {
            let (file_id, bytes, digest) = (r.u32()?, r.u64()?, r.array()?);
            let [verified, stored] = read_flags::<2>(r, "commit")?;
            Message::FileCommitted {
                file_id,
                bytes,
                digest,
                verified,
                stored,
            }
        }
        code::FILE_FAILED => Message::FileFailed {
            file_id: r.u32()?,
            code: ErrorCode::from_u16(r.u16()?),
            message: r.text(MAX_TEXT, "failure message")?,
        },
        code::PROGRESS => Message::Progress {
            file_id: r.u32()?,
            bytes: r.u64()?,
        },
        code::GET => Message::Get {
            path: r.bytes(MAX_PATH, "requested path")?,
            dest: r.bytes(MAX_PATH, "requested destination")?,
        },
        code::GET_END => Message::GetEnd,
        code::LIST_ENTRY => Message::ListEntry(ListEntry {
            path: r.bytes(MAX_PATH, "listed path")?,
            kind: {
                let v = r.u8()?;
                ListKind::from_u8(v)
                    .ok_or_else(|| DecodeError::Malformed(format!("unknown entry kind {v}")))?
            },
            size: r.u64()?,
            mode: r.u32()?,
            mtime_sec: r.i64()?,
            mtime_nsec: r.u32()?,
            target: r.bytes(MAX_PATH, "link target")?,
            head: read_flags::<1>(r, "list entry")?[0],
        }),
        code::PLAN => Message::Plan {
            files: r.u64()?,
            bytes: r.u64()?,
        },
        code::NOTICE => Message::Notice {
            message: r.text(MAX_TEXT, "notice")?,
        },
        code::FINISH => Message::Finish,
        code::PRUNE => Message::Prune,
        code::DELETED => {
            // A directory's path and a name in it: a whole path and a component, at most.
            let path = r.bytes(MAX_PATH + 1 + MAX_NAME, "deleted path")?;
            let [dir, failed] = read_flags::<2>(r, "Deleted")?;
            let failed = match failed {
                true => Some((
                    ErrorCode::from_u16(r.u16()?),
                    r.text(MAX_TEXT, "deletion failure")?,
                )),
                false => None,
            };
            Message::Deleted { path, dir, failed }
        }
        code::PRUNED => Message::Pruned(PruneCount {
            scanned: r.u64()?,
            deleted: r.u64()?,
            failed: r.u64()?,
            end: read_flags::<1>(r, "Pruned")?[0],
            refused: r.text(MAX_TEXT, "pruning refusal")?,
        }),
        code::ENTRY_DONE => Message::EntryDone {
            path: r.bytes(MAX_PATH, "entry path")?,
        },
        code::STATS => Message::Stats(SideStats {
            cpu_user_us: r.u64()?,
            cpu_sys_us: r.u64()?,
            max_rss_bytes: r.u64()?,
            bytes: r.u64()?,
            files: r.u64()?,
            cipher_us: r.u64()?,
        }),
        other => return Err(unknown(other)),
    })
}

/// A key share field: a presence byte, then the share if it is 1.
fn optional_share(r: &mut Reader<'_>) -> Result<Option<crate::KeyShare>, DecodeError> {
    match r.u8()? {
        0 => Ok(None),
        1 => Ok(Some(r.array()?)),
        v => Err(DecodeError::Malformed(format!(
            "key share presence byte is {v}, not 0 or 1"
        ))),
    }
}
