//! The TCP/IP stack's sysctls against the target's BDP, the path to the peer, and the
//! `sysctl.conf` snippet and other systems' equivalents that follow from them.

use zcp_engine::probe::PathProbe;

use crate::host::HostView;
use crate::units;
use crate::{Check, OtherOs, SYSCTL_INT_MAX, Status, Target};

const NET: &str = "network";

/// Socket buffers to ask for, in BDPs. A socket's buffer holds its unsent and its
/// unacknowledged data plus the kernel's per-packet overhead, so a ceiling of one BDP leaves a
/// stream short of the link: through the testbed's delay line (RTT 50 ms, tbf 2 Gbit/s, bbr,
/// one stream) iperf3 and zcp reached 1.34 and 1.28 Gbit/s with one BDP (12.6 MB) and 1.82 and
/// 1.70 with 64 MiB (benches/results/2026-11-24-vm-udp/README.md, "Document 002's BDP effect").
/// Two BDPs is the advice between those measured points.
pub(crate) const BUFFER_BDPS: u64 = 2;

/// The buffer size to ask for: [`BUFFER_BDPS`] times the BDP, within what Linux accepts.
pub(crate) fn buffer_want(t: &Target) -> u64 {
    t.bdp_bytes
        .saturating_mul(BUFFER_BDPS)
        .clamp(4096, SYSCTL_INT_MAX)
}

fn sysctl(host: &HostView, key: &str) -> Result<String, String> {
    host.read(&format!("/proc/sys/{}", key.replace('.', "/")))
        .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
}

fn number(host: &HostView, key: &str) -> Result<u64, String> {
    let v = sysctl(host, key)?;
    v.parse().map_err(|_| {
        format!(
            "/proc/sys/{} holds {v:?}, not a number",
            key.replace('.', "/")
        )
    })
}

/// The three numbers of `tcp_rmem`/`tcp_wmem`.
fn triple(host: &HostView, key: &str) -> Result<[u64; 3], String> {
    let v = sysctl(host, key)?;
    let n: Vec<u64> = v.split(' ').filter_map(|x| x.parse().ok()).collect();
    <[u64; 3]>::try_from(n).map_err(|_| format!("{key} holds {v:?}, not three numbers"))
}

/// Where a kernel module stands: usable now, loadable, absent, or unknown.
fn module(host: &HostView, name: &str, path: &str) -> Result<&'static str, String> {
    if let Ok(m) = host.read("/proc/modules")
        && m.lines().any(|l| l.split(' ').next() == Some(name))
    {
        return Ok("loaded");
    }
    let release = host.read("/proc/sys/kernel/osrelease")?;
    let base = format!("/lib/modules/{release}");
    host.list(&base)
        .map_err(|_| format!("no {base} to look for {name} in"))?;
    if let Ok(b) = host.read(&format!("{base}/modules.builtin"))
        && b.lines().any(|l| l.ends_with(&format!("/{name}.ko")))
    {
        return Ok("built in");
    }
    let loadable = ["", ".xz", ".zst", ".gz"]
        .iter()
        .any(|z| host.exists(&format!("{base}/kernel/{path}/{name}.ko{z}")));
    Ok(if loadable { "loadable" } else { "absent" })
}

/// The socket-buffer limits, TCP options, congestion control, qdisc and MTU probing.
pub(crate) fn stack(host: &HostView, t: &Target) -> Vec<Check> {
    let want = buffer_want(t);
    let bdp_note = format!(
        "{BUFFER_BDPS} x BDP ({} x {} = {} bytes) = {} bytes: a buffer also holds unacknowledged data and the kernel's overhead",
        units::rate(t.rate_bps),
        units::duration(std::time::Duration::from_micros(t.rtt_us)),
        t.bdp_bytes,
        t.bdp_bytes.saturating_mul(BUFFER_BDPS)
    );
    let capped = if t.bdp_bytes.saturating_mul(BUFFER_BDPS) > SYSCTL_INT_MAX {
        format!(
            "; {BUFFER_BDPS} x BDP exceeds Linux's limit {SYSCTL_INT_MAX}: use parallel streams (-P) for the rest"
        )
    } else {
        String::new()
    };
    let mut out = Vec::new();
    for key in ["net.core.rmem_max", "net.core.wmem_max"] {
        out.push(match number(host, key) {
            Ok(v) if v >= want => Check::new(NET, key, v.to_string(), Status::Ok)
                .want(format!(">= {want}"))
                .note(format!("{bdp_note}{capped}")),
            Ok(v) => Check::new(NET, key, v.to_string(), Status::Tune)
                .want(format!(">= {want}"))
                .note(format!(
                    "the largest buffer a socket may ask for; below {bdp_note}{capped}"
                ))
                .fix(format!("sysctl -w {key}={want}")),
            Err(e) => Check::unknown(NET, key, e).want(format!(">= {want}")),
        });
    }
    for (key, default) in [
        ("net.ipv4.tcp_rmem", 131_072),
        ("net.ipv4.tcp_wmem", 16_384),
    ] {
        out.push(match triple(host, key) {
            Ok([min, def, max]) => {
                let rec = format!("{min} {def} {}", max.max(want));
                let cur = format!("{min} {def} {max}");
                if max >= want {
                    Check::new(NET, key, cur, Status::Ok).want(rec)
                } else {
                    Check::new(NET, key, cur, Status::Tune)
                        .want(rec.clone())
                        .note(format!(
                            "the autotuning ceiling (min default max); a single stream's window cannot grow past max{capped}"
                        ))
                        .fix(format!("sysctl -w {key}=\"{rec}\""))
                }
            }
            Err(e) => Check::unknown(NET, key, e).want(format!("4096 {default} {want}")),
        });
    }
    for (key, why) in [
        (
            "net.ipv4.tcp_window_scaling",
            "without it no window exceeds 64 KiB",
        ),
        (
            "net.ipv4.tcp_timestamps",
            "RTT measurement and protection against wrapped sequence numbers at high rates",
        ),
        (
            "net.ipv4.tcp_sack",
            "selective acknowledgement: one loss does not resend a whole window",
        ),
    ] {
        out.push(match number(host, key) {
            Ok(1) => Check::new(NET, key, "1", Status::Ok).want("1"),
            Ok(v) => Check::new(NET, key, v.to_string(), Status::Tune)
                .want("1")
                .note(why)
                .fix(format!("sysctl -w {key}=1")),
            Err(e) => Check::unknown(NET, key, e).want("1"),
        });
    }
    out.push(congestion(host));
    out.push(qdisc(host));
    out.push(match number(host, "net.ipv4.tcp_mtu_probing") {
        Ok(v) if v >= 1 => {
            Check::new(NET, "net.ipv4.tcp_mtu_probing", v.to_string(), Status::Ok).want("1")
        }
        Ok(v) => Check::new(NET, "net.ipv4.tcp_mtu_probing", v.to_string(), Status::Tune)
            .want("1")
            .note("with jumbo frames, a hop that drops ICMP would otherwise black-hole large segments")
            .fix("sysctl -w net.ipv4.tcp_mtu_probing=1"),
        Err(e) => Check::unknown(NET, "net.ipv4.tcp_mtu_probing", e).want("1"),
    });
    out
}

/// Congestion control: in use, available, and whether BBR or H-TCP could be loaded.
fn congestion(host: &HostView) -> Check {
    const KEY: &str = "net.ipv4.tcp_congestion_control";
    let current = match sysctl(host, KEY) {
        Ok(c) => c,
        Err(e) => return Check::unknown(NET, KEY, e).want("bbr (or htcp)"),
    };
    let available = sysctl(host, "net.ipv4.tcp_available_congestion_control").unwrap_or_default();
    let has = |cc: &str| available.split(' ').any(|a| a == cc);
    let mut notes = vec![format!(
        "available: {}",
        if available.is_empty() {
            "unknown"
        } else {
            &available
        }
    )];
    let mut pick = None;
    for cc in ["bbr", "htcp"] {
        if has(cc) {
            pick.get_or_insert((cc, false));
            continue;
        }
        match module(host, &format!("tcp_{cc}"), "net/ipv4") {
            Ok(s @ ("loadable" | "built in" | "loaded")) => {
                notes.push(format!("{cc}: {s}"));
                pick.get_or_insert((cc, true));
            }
            Ok(s) => notes.push(format!("{cc}: {s}")),
            Err(e) => notes.push(format!("{cc}: unknown ({e})")),
        }
    }
    if current == "bbr" || current == "htcp" {
        return Check::new(NET, KEY, current, Status::Ok)
            .want("bbr (or htcp)")
            .note(notes.join("; "));
    }
    match pick {
        Some((cc, load)) => {
            let mut c = Check::new(NET, KEY, current, Status::Tune)
                .want(cc)
                .note(format!(
                    "loss-based {} halves its window at every loss on long paths; {}",
                    "cubic/reno",
                    notes.join("; ")
                ));
            if load {
                c = c.fix(format!("modprobe tcp_{cc}"));
            }
            c.fix(format!("sysctl -w {KEY}={cc}"))
        }
        None => Check::new(NET, KEY, current, Status::Info)
            .want("bbr (or htcp)")
            .note(format!(
                "neither bbr nor htcp is available to this kernel; {}",
                notes.join("; ")
            )),
    }
}

/// The default qdisc: `fq` paces every flow.
fn qdisc(host: &HostView) -> Check {
    const KEY: &str = "net.core.default_qdisc";
    let current = match sysctl(host, KEY) {
        Ok(c) => c,
        Err(e) => return Check::unknown(NET, KEY, e).want("fq"),
    };
    let fq = match module(host, "sch_fq", "net/sched") {
        Ok(s) => format!("sch_fq: {s}"),
        Err(e) => format!("sch_fq: unknown ({e})"),
    };
    if current == "fq" {
        return Check::new(NET, KEY, current, Status::Ok)
            .want("fq")
            .note("fq paces each flow");
    }
    Check::new(NET, KEY, current, Status::Tune)
        .want("fq")
        .note(format!(
            "fq paces each flow at its rate instead of bursting into switch buffers (what BBR expects); applies to interfaces set up after the change; {fq}"
        ))
        .fix(format!("sysctl -w {KEY}=fq"))
}

/// What the path to the peer showed: RTT, path MTU, and whether jumbo frames get through.
pub(crate) fn peer(name: &str, p: &PathProbe) -> Vec<Check> {
    let sec = "peer";
    let mut out = vec![
        Check::new(sec, "rtt", units::duration(p.connect_min), Status::Info)
            .want("-")
            .note(format!(
                "{name}: fastest of {} TCP connects, median {}, slowest {}; local address {}",
                p.samples,
                units::duration(p.connect_median),
                units::duration(p.connect_max),
                p.local.ip()
            )),
    ];
    out.push(match p.path_mtu {
        Some(m) if m >= 9000 => Check::new(sec, "path mtu", m.to_string(), Status::Ok).want("9000"),
        Some(m) => Check::new(sec, "path mtu", m.to_string(), Status::Tune)
            .want("9000")
            .note("the route (or path MTU discovery) limits frames towards the peer: raise the MTU of the interface and every hop"),
        None => Check::unknown(sec, "path mtu", "the kernel gave no IP_MTU for the connection"),
    });
    let header = if p.local.is_ipv4() { 40 } else { 60 };
    out.push(match p.mss {
        Some(m) if m + header >= 8000 => Check::new(sec, "jumbo frames end to end", format!("yes (MSS {m})"), Status::Ok)
            .want("yes"),
        Some(m) => Check::new(sec, "jumbo frames end to end", format!("no (MSS {m})"), Status::Tune)
            .want("yes")
            .note(format!(
                "the connection's segments are at most {m} bytes: the peer's MTU or ours is about {}; set MTU 9000 on both hosts and every hop between",
                m + header
            )),
        None => Check::unknown(sec, "jumbo frames end to end", "the kernel gave no TCP_MAXSEG for the connection"),
    });
    out
}

/// A `sysctl.conf` snippet with every network recommendation, never lowering a value the host
/// already has higher.
pub(crate) fn sysctl_conf(host: &HostView, t: &Target) -> String {
    let want = buffer_want(t);
    let keep = |key: &str| number(host, key).map_or(want, |v| v.max(want));
    let tri = |key: &str, def: u64| match triple(host, key) {
        Ok([min, d, max]) => format!("{min} {d} {}", max.max(want)),
        Err(_) => format!("4096 {def} {want}"),
    };
    let cc = {
        let available =
            sysctl(host, "net.ipv4.tcp_available_congestion_control").unwrap_or_default();
        let current = sysctl(host, "net.ipv4.tcp_congestion_control").unwrap_or_default();
        if current == "htcp" && !available.contains("bbr") {
            "htcp"
        } else {
            "bbr"
        }
    };
    let mut s = format!(
        "# zcp doctor: {} x {} = BDP {} bytes ({}); socket buffers {BUFFER_BDPS} x BDP{}\n",
        units::rate(t.rate_bps),
        units::duration(std::time::Duration::from_micros(t.rtt_us)),
        t.bdp_bytes,
        units::bytes(t.bdp_bytes),
        if t.bdp_bytes.saturating_mul(BUFFER_BDPS) > SYSCTL_INT_MAX {
            format!(", at most Linux's {SYSCTL_INT_MAX}")
        } else {
            format!(" = {want}")
        }
    );
    s += "# Install as /etc/sysctl.d/90-zcp.conf, then run: sysctl --system\n";
    s += &format!("net.core.rmem_max = {}\n", keep("net.core.rmem_max"));
    s += &format!("net.core.wmem_max = {}\n", keep("net.core.wmem_max"));
    s += "# autotuning: min, default, max bytes per socket\n";
    s += &format!(
        "net.ipv4.tcp_rmem = {}\n",
        tri("net.ipv4.tcp_rmem", 131_072)
    );
    s += &format!("net.ipv4.tcp_wmem = {}\n", tri("net.ipv4.tcp_wmem", 16_384));
    s += "net.ipv4.tcp_window_scaling = 1\n";
    s += "net.ipv4.tcp_timestamps = 1\n";
    s += "net.ipv4.tcp_sack = 1\n";
    s += "net.ipv4.tcp_mtu_probing = 1\n";
    s += "net.core.default_qdisc = fq\n";
    s += &format!("net.ipv4.tcp_congestion_control = {cc}\n");
    s
}

/// FreeBSD's and macOS's socket-buffer settings for the same BDP, as document 002 lists them
/// (Fig. 4), plus FreeBSD's `kern.ipc.maxsockbuf`, which caps the other two and counts
/// bookkeeping as well as data (hence a quarter more).
pub(crate) fn other_os(t: &Target) -> Vec<OtherOs> {
    let b = t.bdp_bytes.max(4096);
    vec![
        OtherOs {
            os: "FreeBSD".into(),
            file: "/etc/sysctl.conf".into(),
            lines: vec![
                format!("kern.ipc.maxsockbuf = {}", b + b / 4),
                format!("net.inet.tcp.sendbuf_max = {b}"),
                format!("net.inet.tcp.recvbuf_max = {b}"),
            ],
        },
        OtherOs {
            os: "macOS".into(),
            file: "/etc/sysctl.conf".into(),
            lines: vec![
                format!("kern.ipc.maxsockbuf = {b}"),
                format!("net.inet.tcp.sendspace = {}", b / 2),
                format!("net.inet.tcp.recvspace = {}", b / 2),
            ],
        },
    ]
}
