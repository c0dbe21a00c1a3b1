//! Over ssh, how a try reaches the far side: started by ssh, connected directly or through
//! ssh (the fallback), and what the user hears of either when the session ends.

use super::ssh::{self, Ssh};
use crate::error::SessionError;
use crate::event::{Event, Reporter, Summary};
use crate::{Connection, Transfer};

/// Over ssh, a far side this host cannot connect to is said as such: the address it
/// listens on is the one the ssh connection reached, which a NAT or a jump host hides.
pub(super) fn unreachable<T>(
    ssh: &Option<Ssh>,
    ran: Result<T, SessionError>,
) -> Result<T, SessionError> {
    match (ssh, ran) {
        (Some(s), Err(SessionError::Connect { addr, source })) => Err(SessionError::Ssh {
            host: zcp_wire::escape_text(&s.destination),
            reason: format!(
                "zcp there listens on {addr}, the address the ssh connection reached, and this \
                 host cannot connect to it ({source}): behind a NAT or a jump host the data \
                 cannot flow directly"
            ),
            retry: true,
        }),
        (_, ran) => ran,
    }
}

/// Over ssh, zcp started on the far side for one try (ended when dropped), reached directly
/// or, when that fails, through ssh (said to `reporter`).
pub(super) fn reach(
    ssh: &Option<Ssh>,
    conn: &Connection,
    t: &Transfer,
    reporter: &mut dyn Reporter,
) -> Result<Option<ssh::FarSide>, SessionError> {
    let udp = t.link.kind == zcp_wire::udp::TransportKind::Udp;
    start(ssh, conn, udp, &mut |note| {
        reporter.event(&Event::Notice(note))
    })
}

/// [`reach`] for a session without data streams (`zcp ls`): `notice` hears the fallback.
pub(super) fn start(
    ssh: &Option<Ssh>,
    conn: &Connection,
    udp: bool,
    notice: &mut dyn FnMut(String),
) -> Result<Option<ssh::FarSide>, SessionError> {
    let Some(s) = ssh else {
        return Ok(None);
    };
    let mut far = s.start(conn.connect_timeout, conn.idle_timeout)?;
    if let Some(note) = far.route(s, conn.connect_timeout, udp)? {
        notice(note);
    }
    Ok(Some(far))
}

/// After a session through ssh: the rate it reached, said as loudly as the fallback was;
/// or, when the connection through ssh broke, why that may be.
pub(super) fn through_ssh(
    (ssh, far): (&Option<Ssh>, &Option<ssh::FarSide>),
    ran: Result<Summary, SessionError>,
    reporter: &mut dyn Reporter,
) -> Result<Summary, SessionError> {
    let (Some(s), Some(f)) = (ssh, far) else {
        return ran;
    };
    if !f.tunneled() {
        return ran;
    }
    match ran {
        Ok(sum) => {
            let gbit = sum.bytes_sent as f64 * 8.0 / sum.seconds.max(1e-9) / 1e9;
            reporter.event(&Event::Notice(format!(
                "through ssh, the session reached {gbit:.2} Gbit/s"
            )));
            Ok(sum)
        }
        Err(e) => Err(broken_tunnel(s, e)),
    }
}

/// A session through ssh that failed: when the connection broke, why that may be.
pub(super) fn broken_tunnel(s: &Ssh, e: SessionError) -> SessionError {
    match e {
        e @ (SessionError::Connection { .. } | SessionError::Protocol { .. }) => s.fail(
            format!(
                "the session through ssh broke ({e}): the ssh server may forbid forwarding \
                 (AllowTcpForwarding, PermitOpen); open a port for zcp instead (--port-range)"
            ),
            true,
        ),
        e => e,
    }
}
