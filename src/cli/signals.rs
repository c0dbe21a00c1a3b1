//! SIGINT and SIGTERM: the first one stops the transfer (or the server) cleanly; a second one
//! of either ends the process at once, with 128 + its number. SIGHUP (`zcp serve`) reloads.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use signal_hook::consts::{SIGINT, SIGTERM};

/// The flag a transfer watches: the number of the first signal caught, 0 until then.
static CAUGHT: OnceLock<Arc<AtomicUsize>> = OnceLock::new();

/// Installs the handlers (once) and returns the flag they set.
pub(crate) fn stop_on_signals() -> zcp_session::StopFlag {
    CAUGHT
        .get_or_init(|| {
            let caught = Arc::new(AtomicUsize::new(0));
            let armed = Arc::new(AtomicBool::new(false));
            for sig in [SIGINT, SIGTERM] {
                // Registered in this order, the actions run in this order: a signal that finds
                // the flag armed ends the process; the first one only arms it and says which.
                let installed =
                    signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, armed.clone())
                        .and_then(|_| signal_hook::flag::register(sig, armed.clone()))
                        .and_then(|_| {
                            signal_hook::flag::register_usize(sig, caught.clone(), sig as usize)
                        });
                if let Err(e) = installed {
                    // Without handlers the default action still ends the process.
                    eprintln!("zcp: cannot handle signal {sig}: {e}");
                }
            }
            caught
        })
        .clone()
}

/// The first signal caught, if any.
pub(crate) fn caught() -> Option<i32> {
    let n = CAUGHT.get()?.load(Ordering::Relaxed);
    (n != 0).then_some(n as i32)
}

/// Tells systemd about a state change (`READY=1`, `STOPPING=1`) when it started zcp as a
/// `Type=notify` service; a no-op when `$NOTIFY_SOCKET` is unset. A failure is reported and
/// otherwise ignored: serving matters more than the service manager's view of it.
pub(crate) fn notify_systemd(state: sd_notify::NotifyState<'_>) {
    if let Err(e) = sd_notify::notify(&[state]) {
        eprintln!("zcp: cannot notify systemd: {e}");
    }
}

/// Installs a SIGHUP handler (once) and returns the flag it sets: `zcp serve` reloads its
/// configuration when it finds the flag set (and clears it).
pub(crate) fn on_hangup() -> Arc<AtomicBool> {
    static HUP: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    HUP.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        if let Err(e) = signal_hook::flag::register(signal_hook::consts::SIGHUP, flag.clone()) {
            eprintln!("zcp: cannot handle SIGHUP: {e}");
        }
        flag
    })
    .clone()
}
