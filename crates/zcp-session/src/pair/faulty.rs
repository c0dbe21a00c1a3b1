//! A transport that fails where the pair harness says: the source cannot be read (a stream
//! breaks, as `sendfile` failing with EIO breaks it), or a chunk's write fails with ENOSPC or
//! EIO (its file fails, as a full or failing disk fails it). Wraps the real transport (TCP or
//! UDP streams), so everything else is what runs in production.

use crate::error::Refusal;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use zcp_engine::Usage;
use zcp_engine::recv::WriteFailure;
use zcp_wire::{ChunkHeader, ChunkProof, SessionKeys};

use crate::error::SessionError;
use crate::recv::Placement;
use crate::transport::{Departure, Landing, OutChunk, Queue, SendSide, Transport, spawn};

/// A disk fault at the `at`-th chunk (from 0) of the transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DiskFault {
    /// Reading the source fails: the stream that would send the chunk breaks.
    ReadEio,
    /// Writing the chunk fails: no space.
    WriteNoSpace,
    /// Writing the chunk fails: an I/O error.
    WriteEio,
    /// The stream that lands the chunk finds the process out of file descriptors (as
    /// `pipe2` for its splice pipe fails with EMFILE).
    StreamEmfile,
}

/// A transport (TCP or UDP streams) with one [`DiskFault`].
pub(crate) struct Faulty {
    pub(crate) inner: Box<dyn Transport>,
    pub(crate) fault: Option<(usize, DiskFault)>,
    /// Set when the fault fired.
    pub(crate) fired: Arc<AtomicBool>,
    /// The role's landing, with the fault, once the first stream lands.
    pub(crate) landing: std::sync::OnceLock<Arc<dyn Landing>>,
}

impl Transport for Faulty {
    fn counters(&self) -> Vec<Arc<AtomicU64>> {
        self.inner.counters()
    }

    fn closer(&self) -> Box<dyn Fn() + Send + Sync> {
        self.inner.closer()
    }

    fn udp(&self) -> Option<Arc<crate::transport::udp::UdpStats>> {
        self.inner.udp()
    }

    fn send(self: Box<Self>, side: SendSide) -> Result<Vec<JoinHandle<Usage>>, SessionError> {
        let Some((at, DiskFault::ReadEio)) = self.fault else {
            return self.inner.send(side);
        };
        // Chunks pass through a pump: the `at`-th one is never sent; its stream breaks.
        let inner_q: Arc<Queue<OutChunk>> = Queue::new();
        let (role_q, report) = (side.chunks.clone(), side.report.clone());
        let close = self.inner.closer();
        let fired = self.fired.clone();
        let pump = {
            let inner_q = inner_q.clone();
            spawn("pair-read-fault".into(), move || {
                let mut k = 0;
                while let Some(c) = role_q.pop() {
                    if k == at {
                        fired.store(true, Ordering::Relaxed);
                        report(Departure::StreamFailed {
                            stream: 0,
                            why: "sendfile on the source: Input/output error (os error 5)".into(),
                            forged: false,
                        });
                        close();
                        break;
                    }
                    inner_q.push(c);
                    k += 1;
                }
                inner_q.close();
                Usage::default()
            })?
        };
        let mut threads = self.inner.send(SendSide {
            chunks: inner_q,
            ..side
        })?;
        threads.push(pump);
        Ok(threads)
    }

    fn take_streams(&mut self) -> Vec<(u16, TcpStream)> {
        self.inner.take_streams()
    }

    fn land(&self, stream: u16, sock: TcpStream, landing: Arc<dyn Landing>) {
        // One landing for every stream, so the fault counts the session's chunks.
        let landing = self.landing.get_or_init(|| match self.fault {
            Some((
                at,
                fault @ (DiskFault::WriteNoSpace | DiskFault::WriteEio | DiskFault::StreamEmfile),
            )) => Arc::new(FailAt {
                inner: landing,
                at,
                fault,
                seen: AtomicUsize::new(0),
                fired: self.fired.clone(),
            }),
            _ => landing,
        });
        self.inner.land(stream, sock, landing.clone());
    }
}

/// A landing whose `at`-th write fails ([`DiskFault::WriteNoSpace`], [`DiskFault::WriteEio`])
/// or whose `at`-th placement finds the process out of file descriptors
/// ([`DiskFault::StreamEmfile`]: its stream ends with the refusal the real engine's `EMFILE`
/// makes).
struct FailAt {
    inner: Arc<dyn Landing>,
    at: usize,
    fault: DiskFault,
    seen: AtomicUsize,
    fired: Arc<AtomicBool>,
}

impl FailAt {
    /// Whether this call, of the kind `fault` counts, is the one that fails.
    fn fires(&self, fault: DiskFault) -> bool {
        let now = fault == self.fault && self.seen.fetch_add(1, Ordering::Relaxed) == self.at;
        if now {
            self.fired.store(true, Ordering::Relaxed);
        }
        now
    }
}

impl Landing for FailAt {
    fn join(&self, counter: Arc<AtomicU64>, closer: Box<dyn Fn() + Send>) {
        self.inner.join(counter, closer);
    }

    fn place(&self, header: &ChunkHeader) -> Result<Placement, Refusal> {
        if self.fires(DiskFault::StreamEmfile) {
            let e = zcp_engine::EngineError::Sys {
                call: "pipe2",
                what: "splice pipe",
                source: std::io::Error::from_raw_os_error(24),
            };
            return Err(Refusal::stream(&e));
        }
        self.inner.place(header)
    }

    fn written(&self, file: u32, index: u64, r: Result<(), WriteFailure>) {
        let no_space = self.fault == DiskFault::WriteNoSpace;
        let r = if self.fault != DiskFault::StreamEmfile && self.fires(self.fault) {
            Err(WriteFailure {
                no_space,
                message: if no_space {
                    "No space left on device (os error 28)".into()
                } else {
                    "Input/output error (os error 5)".into()
                },
            })
        } else {
            r
        };
        self.inner.written(file, index, r);
    }

    fn hashed(&self, file: u32, index: u64, proof: ChunkProof) {
        self.inner.hashed(file, index, proof);
    }

    fn keys(&self) -> SessionKeys {
        self.inner.keys()
    }

    fn stream_ended(&self, usage: Usage, failed: Option<Refusal>, late: Option<String>) {
        self.inner.stream_ended(usage, failed, late);
    }

    fn block(&self) -> u64 {
        self.inner.block()
    }

    fn alive(&self) -> bool {
        self.inner.alive()
    }

    fn memory_limit(&self) -> u64 {
        self.inner.memory_limit()
    }

    fn idle(&self) -> Duration {
        self.inner.idle()
    }
}
