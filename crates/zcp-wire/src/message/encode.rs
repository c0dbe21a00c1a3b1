//! Message bodies to bytes.

use super::*;

impl Message {
    /// The message body, without frame header or tag.
    pub fn encode_body(&self) -> Vec<u8> {
        let mut w = Writer::default();
        let done =
            self.encode_setup(&mut w) || self.encode_entry(&mut w) || self.encode_file(&mut w);
        debug_assert!(done, "every message has an encoder");
        w.buf
    }

    /// A whole unsealed frame: header and body. Sealed messages go through
    /// [`crate::Sealer::seal`] instead.
    pub fn encode_frame(&self) -> Vec<u8> {
        debug_assert!(!self.is_sealed(), "sealed messages need a Sealer");
        frame(self.kind(), &self.encode_body(), &[])
    }

    /// Handshake and session set-up messages. Returns `false` for any other message.
    fn encode_setup(&self, w: &mut Writer) -> bool {
        match self {
            Message::Hello {
                version,
                role,
                nonce,
                identity,
                share,
            } => {
                w.raw(&HELLO_MAGIC).u16(*version);
                w.u8(match role {
                    Role::Control => 1,
                    Role::Data => 2,
                });
                w.raw(nonce);
                if let Some(id) = identity {
                    w.raw(id);
                    if *version >= 6 {
                        optional_share(w, share);
                    }
                }
            }
            Message::Challenge {
                version,
                nonce,
                proof,
                share,
            } => {
                w.u16(*version).raw(nonce).raw(proof);
                if *version >= 6 {
                    optional_share(w, share);
                }
            }
            Message::Proof { proof } => {
                w.raw(proof);
            }
            Message::DataChallenge { nonce } => {
                w.raw(nonce);
            }
            Message::DataJoin {
                session_id,
                stream,
                proof,
            } => {
                w.raw(session_id).u16(*stream).raw(proof);
            }
            Message::DataAccept => {}
            Message::Error { code, message } => {
                w.u16(code.to_u16());
                text(w, message, MAX_TEXT);
            }
            Message::Welcome {
                session_id,
                max_streams,
                exports,
            } => {
                w.raw(session_id).u16(*max_streams).u8(flags(&[*exports]));
            }
            Message::Open(o) => {
                let [delete, dry] = o.delete.to_flags();
                w.u8(flags(&[o.pull, o.recursive, o.list, delete, dry]))
                    .u16(o.streams)
                    .u32(o.idle_ms);
                text(w, &o.recv_engine, MAX_ENGINE_NAME);
                text(w, &o.send_engine, MAX_ENGINE_NAME);
                w.u32(o.block_size).u64(o.chunk_size).u64(o.rate);
                text(w, &o.verify, MAX_ENGINE_NAME);
                text(w, &o.transport, MAX_ENGINE_NAME);
                text(w, &o.udp_mode, MAX_ENGINE_NAME);
                text(w, &o.export, MAX_NAME);
                text(w, &o.existing, MAX_ENGINE_NAME);
                let n = o.filters.len().min(crate::MAX_FILTER_RULES);
                w.u16(n as u16);
                for rule in &o.filters[..n] {
                    text(w, rule, crate::MAX_FILTER_RULE);
                }
            }
            Message::Opened {
                streams,
                idle_ms,
                pacing,
                verify,
                transport,
                udp_mode,
            } => {
                w.u16(*streams).u32(*idle_ms).u8(pacing.to_u8());
                text(w, verify, MAX_ENGINE_NAME);
                text(w, transport, MAX_ENGINE_NAME);
                text(w, udp_mode, MAX_ENGINE_NAME);
            }
            _ => return false,
        }
        true
    }

    /// Entry announcements and their answers. Returns `false` for any other message.
    fn encode_entry(&self, w: &mut Writer) -> bool {
        match self {
            Message::PutFile(p) => {
                w.u32(p.file_id).bytes(&p.dest).bytes(&p.name).u64(p.size);
                w.u32(p.mode)
                    .i64(p.mtime_sec)
                    .u32(p.mtime_nsec)
                    .u64(p.chunk_size)
                    .u8(flags(&[p.sparse]));
            }
            Message::MakeDir { path, top } => {
                w.bytes(path).u8(flags(&[*top]));
            }
            Message::MakeLink { path, target } => {
                w.bytes(path).bytes(target);
            }
            Message::DirTimes {
                path,
                mode,
                mtime_sec,
                mtime_nsec,
            } => {
                w.bytes(path).u32(*mode).i64(*mtime_sec).u32(*mtime_nsec);
            }
            Message::EntryDone { path } => {
                w.bytes(path);
            }
            Message::EntryFailed {
                path,
                code,
                message,
            } => {
                w.bytes(path).u16(code.to_u16());
                text(w, message, MAX_TEXT);
            }
            Message::Have(h) => {
                w.u32(h.file_id)
                    .raw(&h.client_nonce)
                    .raw(&h.server_nonce)
                    .u32(h.old_file_id);
                let n = h.entries.len().min(MAX_HAVE_ENTRIES);
                w.u16(n as u16);
                for (index, mac) in &h.entries[..n] {
                    w.u64(*index).raw(mac);
                }
            }
            Message::FileReady {
                file_id,
                engine,
                note,
                target,
                resumed,
            } => {
                w.u32(*file_id);
                text(w, engine, MAX_ENGINE_NAME);
                text(w, note, MAX_TEXT);
                w.bytes(target).u8(flags(&[*resumed]));
            }
            Message::Go { file_id, restart } => {
                w.u32(*file_id).u8(flags(&[*restart]));
            }
            _ => return false,
        }
        true
    }

    /// Per-chunk and per-file messages, and the end of a session. Returns `false` for any other message.
    fn encode_file(&self, w: &mut Writer) -> bool {
        match self {
            Message::ChunkMac {
                file_id,
                index,
                mac,
            } => {
                w.u32(*file_id).u64(*index).raw(mac);
            }
            Message::ChunkAck { file_id, index, ok } => {
                w.u32(*file_id).u64(*index).u8(flags(&[*ok]));
            }
            Message::FileEnd { file_id, digest } => {
                w.u32(*file_id).raw(digest);
            }
            Message::FileAbort {
                file_id,
                code,
                message,
            }
            | Message::FileFailed {
                file_id,
                code,
                message,
            } => {
                w.u32(*file_id).u16(code.to_u16());
                text(w, message, MAX_TEXT);
            }
            Message::FileCommitted {
                file_id,
                bytes,
                digest,
                verified,
                stored,
            } => {
                w.u32(*file_id)
                    .u64(*bytes)
                    .raw(digest)
                    .u8(flags(&[*verified, *stored]));
            }
            Message::Progress { file_id, bytes } => {
                w.u32(*file_id).u64(*bytes);
            }
            Message::Plan { files, bytes } => {
                w.u64(*files).u64(*bytes);
            }
            Message::Get { path, dest } => {
                w.bytes(path).bytes(dest);
            }
            Message::Notice { message } => {
                text(w, message, MAX_TEXT);
            }
            Message::Stats(s) => {
                w.u64(s.cpu_user_us)
                    .u64(s.cpu_sys_us)
                    .u64(s.max_rss_bytes)
                    .u64(s.bytes)
                    .u64(s.files)
                    .u64(s.cipher_us);
            }
            Message::ListEntry(e) => {
                w.bytes(&e.path).u8(e.kind.to_u8()).u64(e.size).u32(e.mode);
                w.i64(e.mtime_sec).u32(e.mtime_nsec).bytes(&e.target);
                w.u8(flags(&[e.head]));
            }
            Message::Deleted { path, dir, failed } => {
                w.bytes(path).u8(flags(&[*dir, failed.is_some()]));
                if let Some((code, message)) = failed {
                    w.u16(code.to_u16());
                    text(w, message, MAX_TEXT);
                }
            }
            Message::Pruned(c) => {
                w.u64(c.scanned).u64(c.deleted).u64(c.failed);
                w.u8(flags(&[c.end]));
                text(w, &c.refused, MAX_TEXT);
            }
            Message::GetEnd | Message::Finish | Message::Prune => {}
            _ => return false,
        }
        true
    }
}

fn text(w: &mut Writer, t: &str, max: usize) {
    w.bytes(clip(t.as_bytes(), max));
}

/// A key share field: a presence byte (0 or 1), then the share when present.
fn optional_share(w: &mut Writer, share: &Option<crate::KeyShare>) {
    match share {
        Some(s) => {
            w.u8(1).raw(s);
        }
        None => {
            w.u8(0);
        }
    }
}
