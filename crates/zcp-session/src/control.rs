//! The control connection once a session runs: one writer shared by every thread that has
//! something to say (sealing needs the frames in sequence, so sends take a lock), and one
//! reader thread that turns frames into events for the role's loop.

use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use zcp_engine::Usage;
use zcp_engine::sys::thread_usage;
use zcp_wire::Message;

use crate::conn::{ControlRx, ControlTx};
use crate::error::FrameIoError;

/// The sending half of the control connection, shared.
#[derive(Debug)]
pub(crate) struct ControlWriter {
    tx: Mutex<ControlTx>,
}

impl ControlWriter {
    pub(crate) fn new(tx: ControlTx) -> ControlWriter {
        ControlWriter { tx: Mutex::new(tx) }
    }

    /// Seals and sends one message.
    pub(crate) fn send(&self, m: &Message) -> Result<(), String> {
        self.tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(m)
            .map_err(|e| format!("cannot write to the peer: {e}"))
    }

    /// Sends an unsealed `Error` (it ends the session) without waiting on a stuck peer long.
    pub(crate) fn send_error(&self, code: zcp_wire::ErrorCode, message: &str) {
        let _ = self.send(&Message::Error {
            code,
            message: message.to_string(),
        });
    }

    /// Shuts the connection down both ways, so the reader thread and the peer notice.
    pub(crate) fn shutdown(&self) {
        let _ = self
            .tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stream
            .shutdown(Shutdown::Both);
    }
}

/// Runs the reader: every message, then the error that ended it (or `Closed`), goes to `out`
/// through `wrap`. Ends early once `stop` is set (checked between reads, at least every read
/// timeout of the socket). Returns the thread's CPU use.
pub(crate) fn spawn_reader<T: Send + 'static>(
    mut rx: ControlRx,
    out: mpsc::Sender<T>,
    wrap: fn(Result<Message, FrameIoError>) -> T,
    stop: Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<Usage>> {
    std::thread::Builder::new()
        .name("zcp-control-rx".into())
        .spawn(move || {
            let start = thread_usage();
            loop {
                match rx.poll() {
                    Ok(Some(m)) => {
                        if out.send(wrap(Ok(m))).is_err() {
                            break;
                        }
                    }
                    Ok(None) if stop.load(Ordering::Relaxed) => break,
                    Ok(None) => {}
                    Err(e) => {
                        let _ = out.send(wrap(Err(e)));
                        break;
                    }
                }
            }
            thread_usage().since(&start)
        })
}
