//! The engine's error type and the one place that classifies `errno` values.
//!
//! As in iperf3's `net.c`, every syscall loop asks [`classify`] what an error means instead of
//! matching errno values itself: retry at once (EINTR), retry after a short pause a bounded
//! number of times (ENOBUFS, ENOMEM: the kernel is short of memory for a moment), a timeout
//! (EAGAIN on our blocking sockets only happens when `SO_RCVTIMEO`/`SO_SNDTIMEO` expire), or a
//! hard error that ends the transfer.

use std::io;
use std::time::Duration;

use rustix::io::Errno;

/// What a failed syscall means to the loop that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrClass {
    /// Interrupted by a signal: call again.
    Retry,
    /// Transient shortage: pause briefly and call again, a bounded number of times.
    Soft,
    /// A socket timeout expired: the peer sent or accepted nothing for that long.
    Timeout,
    /// Anything else.
    Hard,
}

pub(crate) fn classify(e: Errno) -> ErrClass {
    match e {
        Errno::INTR => ErrClass::Retry,
        Errno::NOBUFS | Errno::NOMEM => ErrClass::Soft,
        // Our sockets are blocking, so EAGAIN means a socket timeout expired.
        Errno::AGAIN => ErrClass::Timeout,
        _ => ErrClass::Hard,
    }
}

/// What a failed read or write on one of std's sockets means. Code outside the engine that
/// reads sockets through `std::io` (the session's control frames, chunk headers, the
/// handshake) asks this instead of matching error kinds itself, so errors are classified in
/// one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoClass {
    /// Interrupted by a signal: call again.
    Interrupted,
    /// The socket's timeout expired (or the kernel gave up on the peer): nothing arrived.
    TimedOut,
    /// The connection failed.
    Failed,
}

/// Classifies a `std::io` socket error (see [`IoClass`]).
pub fn io_class(e: &io::Error) -> IoClass {
    match e.raw_os_error().map(Errno::from_raw_os_error) {
        Some(Errno::TIMEDOUT) => IoClass::TimedOut,
        Some(errno) => match classify(errno) {
            ErrClass::Retry => IoClass::Interrupted,
            ErrClass::Timeout => IoClass::TimedOut,
            ErrClass::Soft | ErrClass::Hard => IoClass::Failed,
        },
        None => match e.kind() {
            io::ErrorKind::Interrupted => IoClass::Interrupted,
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => IoClass::TimedOut,
            _ => IoClass::Failed,
        },
    }
}

/// How many soft errors in a row a loop tolerates before it gives up.
pub(crate) const SOFT_RETRIES: u32 = 50;
/// Pause after a soft error.
pub(crate) const SOFT_PAUSE: Duration = Duration::from_millis(10);

/// Why an engine operation failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A syscall failed.
    #[error("{call} failed ({what}): {source}")]
    Sys {
        /// The syscall, as `splice(socket -> pipe)`.
        call: &'static str,
        /// What it was working on ("socket", "destination file", ...).
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The peer closed the connection before all announced bytes arrived.
    #[error("the peer closed the connection after {got} of {want} bytes")]
    Disconnected {
        /// Bytes received of the current unit.
        got: u64,
        /// Bytes expected.
        want: u64,
    },
    /// The source file ended before the announced size.
    #[error("the source ended at byte {at}, but {expected} bytes were announced (file shrank?)")]
    SourceShort {
        /// Where it ended.
        at: u64,
        /// Where it should have ended.
        expected: u64,
    },
    /// The source file changed while it was being read.
    #[error("the source changed while it was being read: {0}")]
    SourceChanged(String),
    /// A socket timeout expired.
    #[error("no progress on the {what} for {secs:.0} s (peer stalled or gone)")]
    Timeout {
        /// Which socket.
        what: &'static str,
        /// The timeout.
        secs: f64,
    },
    /// The destination filesystem has no room.
    #[error("the destination filesystem is full ({0})")]
    NoSpace(String),
    /// An engine cannot run here.
    #[error("engine {engine} is not available here: {reason}")]
    Unsupported {
        /// The engine.
        engine: &'static str,
        /// Why.
        reason: String,
    },
    /// A path beneath the root was refused or could not be resolved.
    #[error("{0}")]
    Path(String),
    /// Someone else holds what this needs (another transfer to the same destination).
    #[error("{0}")]
    Busy(String),
    /// The peer's bytes were refused before use (an encrypted record that failed to open).
    #[error("{0}")]
    Refused(String),
}

impl EngineError {
    /// Wraps an errno from `call` on `what`, turning ENOSPC/EDQUOT into [`EngineError::NoSpace`].
    pub(crate) fn sys(call: &'static str, what: &'static str, e: Errno) -> EngineError {
        match e {
            Errno::NOSPC | Errno::DQUOT => {
                EngineError::NoSpace(format!("{call}: {}", io::Error::from(e)))
            }
            _ => EngineError::Sys {
                call,
                what,
                source: e.into(),
            },
        }
    }

    /// Whether this error is the filesystem running out of room.
    pub fn is_no_space(&self) -> bool {
        matches!(self, EngineError::NoSpace(_))
    }
}

/// Runs `op` until it succeeds or fails for good, following [`classify`]. `timeout_what` names
/// the socket for timeout messages; `timeout` is its configured timeout.
pub(crate) fn retry<T>(
    call: &'static str,
    what: &'static str,
    timeout: Option<Duration>,
    mut op: impl FnMut() -> Result<T, Errno>,
) -> Result<T, EngineError> {
    let mut soft = 0;
    loop {
        match op() {
            Ok(v) => return Ok(v),
            Err(e) => match classify(e) {
                ErrClass::Retry => continue,
                ErrClass::Soft if soft < SOFT_RETRIES => {
                    soft += 1;
                    std::thread::sleep(SOFT_PAUSE);
                }
                ErrClass::Timeout => {
                    return Err(EngineError::Timeout {
                        what,
                        secs: timeout.map_or(0.0, |t| t.as_secs_f64()),
                    });
                }
                ErrClass::Soft | ErrClass::Hard => return Err(EngineError::sys(call, what, e)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn std_socket_errors_are_classified_here() {
        let os = |e: Errno| io::Error::from_raw_os_error(e.raw_os_error());
        assert_eq!(io_class(&os(Errno::INTR)), IoClass::Interrupted);
        assert_eq!(io_class(&os(Errno::AGAIN)), IoClass::TimedOut);
        assert_eq!(io_class(&os(Errno::TIMEDOUT)), IoClass::TimedOut);
        assert_eq!(io_class(&os(Errno::CONNRESET)), IoClass::Failed);
        assert_eq!(io_class(&os(Errno::NOBUFS)), IoClass::Failed);
        let kind = |k: io::ErrorKind| io::Error::from(k);
        assert_eq!(
            io_class(&kind(io::ErrorKind::WouldBlock)),
            IoClass::TimedOut
        );
        assert_eq!(
            io_class(&kind(io::ErrorKind::Interrupted)),
            IoClass::Interrupted
        );
        assert_eq!(
            io_class(&kind(io::ErrorKind::UnexpectedEof)),
            IoClass::Failed
        );
    }

    #[test]
    fn classification() {
        assert_eq!(classify(Errno::INTR), ErrClass::Retry);
        assert_eq!(classify(Errno::AGAIN), ErrClass::Timeout);
        assert_eq!(classify(Errno::NOBUFS), ErrClass::Soft);
        assert_eq!(classify(Errno::PIPE), ErrClass::Hard);
    }

    #[test]
    fn retry_loops_on_eintr_and_maps_enospc() {
        let mut n = 0;
        let v = retry("x", "y", None, || {
            n += 1;
            if n < 3 { Err(Errno::INTR) } else { Ok(n) }
        })
        .unwrap();
        assert_eq!(v, 3);
        let e = retry::<()>("write", "file", None, || Err(Errno::NOSPC)).unwrap_err();
        assert!(e.is_no_space());
        let e = retry::<()>("recv", "socket", Some(Duration::from_secs(5)), || {
            Err(Errno::AGAIN)
        })
        .unwrap_err();
        assert!(e.to_string().contains("5 s"), "{e}");
        let mut soft = 0;
        let e = retry::<()>("send", "socket", None, || {
            soft += 1;
            Err(Errno::NOBUFS)
        })
        .unwrap_err();
        assert!(matches!(e, EngineError::Sys { .. }));
        assert_eq!(soft, SOFT_RETRIES + 1);
    }
}
