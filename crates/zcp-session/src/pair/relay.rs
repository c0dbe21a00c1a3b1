//! Connections between the two roles of a pair, over loopback, through a relay that can flip,
//! stall or cut the bytes going from the sending role to the receiving role at a given byte,
//! or run a trigger there (change the source, "kill" a side).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use zcp_engine::sync::Locked;

/// What happens to one connection's sender-to-receiver bytes at byte `at`.
#[derive(Clone)]
pub(crate) enum WireFault {
    /// The byte at `at` is inverted.
    Flip,
    /// Nothing more passes, both ways, on every connection of the pair (a cut, a reset, or
    /// one side killed).
    CutAll,
    /// The bytes stop for this long, then go on.
    Stall(Duration),
    /// `f` runs once the first `at` bytes have passed (e.g. the source is changed); the bytes
    /// go on.
    Trigger(Arc<dyn Fn() + Send + Sync>),
}

impl std::fmt::Debug for WireFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireFault::Flip => f.write_str("Flip"),
            WireFault::CutAll => f.write_str("CutAll"),
            WireFault::Stall(d) => write!(f, "Stall({d:?})"),
            WireFault::Trigger(_) => f.write_str("Trigger"),
        }
    }
}

/// Every socket of a pair, so one cut can end them all. An idle cutter (no cut armed) keeps
/// nothing: a handle kept here would keep a socket open after its role let it go.
#[derive(Default, Clone)]
pub(crate) struct Cutter {
    socks: Arc<Mutex<Vec<TcpStream>>>,
    cut: Arc<AtomicBool>,
    armed: bool,
    /// Set when a fault fired (its byte came).
    pub(crate) fired: Arc<AtomicBool>,
}

impl Cutter {
    /// A cutter that can cut (`armed`), or one that only marks.
    pub(crate) fn new(armed: bool) -> Cutter {
        Cutter {
            armed,
            ..Cutter::default()
        }
    }

    fn register(&self, s: &TcpStream) {
        if !self.armed {
            return;
        }
        if let Ok(c) = s.try_clone() {
            if self.cut.load(Ordering::Relaxed) {
                let _ = c.shutdown(Shutdown::Both);
            }
            self.socks.locked().push(c);
        }
    }

    /// Ends every connection of the pair, now.
    pub(crate) fn cut(&self) {
        self.cut.store(true, Ordering::Relaxed);
        for s in self.socks.locked().iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// A connected loopback pair: (the sending role's end, the receiving role's end).
fn socket_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let a = TcpStream::connect(l.local_addr().expect("bound")).expect("connect loopback");
    let (b, _) = l.accept().expect("accept loopback");
    let _ = a.set_nodelay(true);
    let _ = b.set_nodelay(true);
    (a, b)
}

/// A connection between the roles: direct, or through a relay applying `fault` at byte `at`
/// of the sender-to-receiver direction, `back` at byte `at` of the other. Returns the two ends
/// and the relay's threads.
pub(crate) fn link(
    fault: Option<(u64, WireFault)>,
    back: Option<(u64, WireFault)>,
    cutter: &Cutter,
) -> (TcpStream, TcpStream, Vec<JoinHandle<()>>) {
    if fault.is_none() && back.is_none() {
        let (a, b) = socket_pair();
        cutter.register(&a);
        cutter.register(&b);
        return (a, b, Vec::new());
    }
    let (s_end, near) = socket_pair();
    let (far, r_end) = socket_pair();
    for s in [&s_end, &near, &far, &r_end] {
        cutter.register(s);
    }
    let forward = {
        let (from, to, cutter) = (
            near.try_clone().expect("clone"),
            far.try_clone().expect("clone"),
            cutter.clone(),
        );
        std::thread::spawn(move || pump(from, to, fault, &cutter))
    };
    let back = {
        let cutter = cutter.clone();
        std::thread::spawn(move || pump(far, near, back, &cutter))
    };
    (s_end, r_end, vec![forward, back])
}

/// Copies `from` to `to` until either ends, applying `fault` at its byte.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    mut fault: Option<(u64, WireFault)>,
    cutter: &Cutter,
) {
    let mut buf = vec![0u8; 64 << 10];
    let mut pos = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &mut buf[..n];
        let end = pos + n as u64;
        if let Some((at, f)) = fault.take_if(|(at, _)| *at < end) {
            cutter.fired.store(true, Ordering::Relaxed);
            let i = (at - pos) as usize;
            match f {
                WireFault::Flip => chunk[i] ^= 0xff,
                WireFault::CutAll => {
                    let _ = to.write_all(&chunk[..i]);
                    cutter.cut();
                    return;
                }
                WireFault::Stall(d) => {
                    if to.write_all(&chunk[..i]).is_err() {
                        break;
                    }
                    std::thread::sleep(d);
                    if to.write_all(&chunk[i..]).is_err() {
                        break;
                    }
                    pos = end;
                    continue;
                }
                WireFault::Trigger(t) => {
                    if to.write_all(&chunk[..i]).is_err() {
                        break;
                    }
                    t();
                    if to.write_all(&chunk[i..]).is_err() {
                        break;
                    }
                    pos = end;
                    continue;
                }
            }
        }
        if to.write_all(chunk).is_err() {
            break;
        }
        pos = end;
    }
    // The end of one direction is passed on, as a closed socket would be.
    let _ = to.shutdown(Shutdown::Write);
}
