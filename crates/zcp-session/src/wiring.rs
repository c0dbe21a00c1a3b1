//! One way to wire a role, for every caller: the client (`send`, `get`), the server (a push, a
//! pull) and the pair harness all hand a [`Wiring`] (the authenticated control connection,
//! the session's keys and nonces, its data connections and its [`Link`]) and a role
//! ([`Sender`] or [`Receiver`]) to [`Wiring::wire`], then run what it built. So what the pair
//! harness tests in one process is what runs between two hosts.

use std::net::TcpStream;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, mpsc};

use zcp_engine::Usage;
use zcp_engine::fs::Root;
use zcp_wire::{Nonce, Pacing, Psk, SessionKeys};

use crate::confine::Scope;
use crate::conn::ControlRx;
use crate::control::ControlWriter;
use crate::error::SessionError;
use crate::event::{Observer, RateLimit};
use crate::manifest::Walker;
use crate::recv::state::RxConfig;
use crate::recv::{ReceiverTotals, RxCore, RxEvent, RxSetup};
use crate::send::{SendSetup, SenderConfig, SenderTotals};
use crate::transport::udp::{UdpConfig, UdpStats};
use crate::transport::{Built, Joins, Link, Transport};

/// What both roles are made of: one session's authenticated connections and how its data
/// moves.
pub(crate) struct Wiring {
    pub(crate) ctl: Arc<ControlWriter>,
    pub(crate) rx: ControlRx,
    pub(crate) keys: SessionKeys,
    /// This session's client and server nonces.
    pub(crate) nonces: (Nonce, Nonce),
    pub(crate) link: Link,
    /// The data connections, authenticated, in stream order; a counter for each.
    pub(crate) data: Vec<TcpStream>,
    pub(crate) counters: Vec<Arc<AtomicU64>>,
    /// The UDP streams' configuration instead of the link's own (the pair harness: a
    /// seeded lossy path, a given MTU).
    pub(crate) udp: Option<UdpConfig>,
}

impl Wiring {
    /// Builds `role`'s end of the transport over the data connections.
    pub(crate) fn wire<R: Role>(self, role: R) -> Wired<R> {
        let Wiring {
            ctl,
            rx,
            keys,
            nonces,
            link,
            data,
            counters,
            udp,
        } = self;
        let built = role.build(
            &link,
            Data {
                socks: data,
                counters,
                udp,
            },
        );
        Wired {
            role,
            parts: Parts {
                ctl,
                rx,
                keys,
                nonces,
                link,
            },
            built,
        }
    }
}

/// The data connections a role builds its end of the transport over.
pub(crate) struct Data {
    pub(crate) socks: Vec<TcpStream>,
    pub(crate) counters: Vec<Arc<AtomicU64>>,
    /// The UDP streams' knobs instead of the link's own.
    pub(crate) udp: Option<UdpConfig>,
}

/// A role's share of the wiring, once its transport is built.
pub(crate) struct Parts {
    pub(crate) ctl: Arc<ControlWriter>,
    pub(crate) rx: ControlRx,
    pub(crate) keys: SessionKeys,
    pub(crate) nonces: (Nonce, Nonce),
    pub(crate) link: Link,
}

/// A role: which end of the transport it builds, and how it runs.
pub(crate) trait Role: Sized {
    /// What the role returns when it ends.
    type Totals;
    /// Its end of the transport over `data`.
    fn build(&self, link: &Link, data: Data) -> Built;
    /// Runs to the end; its totals and the control reader's CPU time.
    fn run(
        self,
        parts: Parts,
        transport: Box<dyn Transport>,
        observer: &mut dyn Observer,
    ) -> Result<(Self::Totals, Usage), SessionError>;
}

/// A role with its transport built, ready to run.
pub(crate) struct Wired<R> {
    role: R,
    parts: Parts,
    built: Built,
}

impl<R: Role> Wired<R> {
    /// The UDP streams' counters, for reports (none over TCP).
    pub(crate) fn udp(&self) -> Option<Arc<UdpStats>> {
        self.built.transport.udp()
    }

    /// The rate cap as this side holds it (the sending side), for reports.
    pub(crate) fn limit(&self) -> Option<RateLimit> {
        self.built.limit.clone()
    }

    /// How this side holds the cap.
    pub(crate) fn pacing(&self) -> Pacing {
        self.built.pacing
    }

    /// Why the cap is not held as planned, if it is not.
    pub(crate) fn note(&self) -> Option<String> {
        self.built.note.clone()
    }

    /// The transport, wrapped (the pair harness's faults).
    #[cfg(test)]
    pub(crate) fn wrap(self, f: impl FnOnce(Box<dyn Transport>) -> Box<dyn Transport>) -> Wired<R> {
        let Wired { role, parts, built } = self;
        let Built {
            transport,
            pacing,
            limit,
            note,
        } = built;
        let built = Built {
            transport: f(transport),
            pacing,
            limit,
            note,
        };
        Wired { role, parts, built }
    }

    /// Runs the role to its end.
    pub(crate) fn run(
        self,
        observer: &mut dyn Observer,
    ) -> Result<(R::Totals, Usage), SessionError> {
        self.role.run(self.parts, self.built.transport, observer)
    }
}

/// The sending role: the walk of its sources, chunks out, proofs, commits awaited.
pub(crate) struct Sender {
    /// The chunk size in it is the one asked for: the link may choose one.
    pub(crate) cfg: SenderConfig,
    pub(crate) walker: Walker,
    /// The key the receiver's resume offers are checked with.
    pub(crate) psk: Psk,
    /// The receiver, as messages name it.
    pub(crate) peer: String,
    /// How the cap is held, as the server promised in `Opened` (`None`: planned from the
    /// data connections here).
    pub(crate) plan: Option<(Pacing, Option<String>)>,
}

impl Role for Sender {
    type Totals = SenderTotals;

    fn build(&self, link: &Link, data: Data) -> Built {
        link.sender(data.socks, data.counters, self.plan.clone(), data.udp)
    }

    fn run(
        self,
        parts: Parts,
        transport: Box<dyn Transport>,
        observer: &mut dyn Observer,
    ) -> Result<(SenderTotals, Usage), SessionError> {
        let mut cfg = self.cfg;
        cfg.chunk_size = parts.link.chunk_size(cfg.chunk_size);
        let setup = SendSetup {
            cfg,
            ctl: parts.ctl,
            rx: parts.rx,
            keys: parts.keys,
            nonces: parts.nonces,
            psk: self.psk,
            transport,
            peer: self.peer,
        };
        crate::send::run(setup, self.walker, observer)
    }
}

/// The receiving role: entries and chunks in, verified, made durable, committed.
pub(crate) struct Receiver {
    pub(crate) cfg: RxConfig,
    /// Where the entries go.
    pub(crate) root: Arc<Root>,
    /// What the session may touch beneath it.
    pub(crate) scope: Scope,
    /// Where to hand the lander for data connections that join after the role started (a
    /// server's push), besides those the wiring holds.
    pub(crate) joins: Option<Joins>,
}

impl Role for Receiver {
    type Totals = ReceiverTotals;

    fn build(&self, link: &Link, data: Data) -> Built {
        link.receiver(data.socks, data.counters, data.udp)
    }

    fn run(
        self,
        parts: Parts,
        transport: Box<dyn Transport>,
        observer: &mut dyn Observer,
    ) -> Result<(ReceiverTotals, Usage), SessionError> {
        let (wake, events) = mpsc::channel::<RxEvent>();
        let streams = u16::try_from(transport.counters().len()).unwrap_or(u16::MAX);
        let core = RxCore::new(RxSetup {
            cfg: self.cfg,
            keys: parts.keys,
            nonces: parts.nonces,
            root: self.root,
            scope: self.scope,
            streams,
            ctl: parts.ctl,
            wake: wake.clone(),
        });
        let data = (transport, self.joins);
        crate::recv::run(core, (wake, events), parts.rx, data, observer)
    }
}
