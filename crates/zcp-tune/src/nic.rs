//! Per-interface checks: MTU, link speed, rings, offloads, NUMA locality and IRQ affinity;
//! and which interfaces to examine (the routes in `/proc/net`).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::host::HostView;
use crate::units;
use crate::{Check, Error, Status, Target};

/// The interfaces to examine: those named, else the route to the peer's, else the default
/// routes', else every interface that is up (never `lo` unless named or routed to).
pub(crate) fn choose(
    host: &HostView,
    named: &[String],
    peer: Option<SocketAddr>,
) -> Result<Vec<String>, Error> {
    let all = host.list("/sys/class/net").unwrap_or_default();
    if !named.is_empty() {
        for n in named {
            if !all.contains(n) {
                return Err(Error::NoSuchInterface {
                    name: n.clone(),
                    have: all,
                });
            }
        }
        return Ok(named.to_vec());
    }
    let routes = routes(host);
    if let Some(peer) = peer {
        if peer.ip().is_loopback() {
            return Ok(vec!["lo".to_string()]);
        }
        if let Some(r) = routes
            .iter()
            .filter(|r| r.contains(peer.ip()))
            .max_by_key(|r| r.prefix)
        {
            return Ok(vec![r.iface.clone()]);
        }
    }
    let mut out: Vec<String> = Vec::new();
    for r in routes.iter().filter(|r| r.prefix == 0 && r.iface != "lo") {
        if !out.contains(&r.iface) {
            out.push(r.iface.clone());
        }
    }
    if out.is_empty() {
        out = all
            .into_iter()
            .filter(|i| i != "lo")
            .filter(|i| {
                host.read(&format!("/sys/class/net/{i}/operstate"))
                    .as_deref()
                    == Ok("up")
            })
            .collect();
    }
    Ok(out)
}

/// One route of the main table.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Route {
    iface: String,
    dest: IpAddr,
    prefix: u8,
}

impl Route {
    fn contains(&self, ip: IpAddr) -> bool {
        match (self.dest, ip) {
            (IpAddr::V4(d), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(d) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(d), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(d) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// `/proc/net/route` and `/proc/net/ipv6_route`, whatever of them is readable.
fn routes(host: &HostView) -> Vec<Route> {
    let mut out = Vec::new();
    if let Ok(t) = host.read("/proc/net/route") {
        for line in t.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                continue;
            }
            // The kernel prints the network-order address as a native integer.
            let (Ok(dest), Ok(mask)) =
                (u32::from_str_radix(f[1], 16), u32::from_str_radix(f[7], 16))
            else {
                continue;
            };
            out.push(Route {
                iface: f[0].to_string(),
                dest: IpAddr::V4(Ipv4Addr::from(dest.to_ne_bytes())),
                prefix: u32::from_be_bytes(mask.to_ne_bytes()).count_ones() as u8,
            });
        }
    }
    if let Ok(t) = host.read("/proc/net/ipv6_route") {
        for line in t.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[9] == "lo" {
                continue;
            }
            let (Ok(dest), Ok(prefix)) =
                (u128::from_str_radix(f[0], 16), u8::from_str_radix(f[1], 16))
            else {
                continue;
            };
            out.push(Route {
                iface: f[9].to_string(),
                dest: IpAddr::V6(Ipv6Addr::from(dest)),
                prefix,
            });
        }
    }
    out
}

/// The interface's link speed in Mbit/s.
pub(crate) fn speed_mbps(host: &HostView, iface: &str) -> Result<u64, String> {
    let s = host.read(&format!("/sys/class/net/{iface}/speed"))?;
    match s.trim().parse::<i64>() {
        Ok(v) if v > 0 => Ok(v as u64),
        _ => Err(format!(
            "the driver reports no link speed ({s:?}): a virtual NIC, or the link is down"
        )),
    }
}

/// A CPU list (`0-3,8-11`) as a set.
fn cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 65_536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// The NUMA nodes of the host.
pub(crate) fn numa_nodes(host: &HostView) -> Option<usize> {
    let names = host.list("/sys/devices/system/node").ok()?;
    Some(
        names
            .iter()
            .filter(|n| {
                n.strip_prefix("node")
                    .is_some_and(|d| d.parse::<u32>().is_ok())
            })
            .count()
            .max(1),
    )
}

/// The IRQs serving `iface`: the `/proc/interrupts` lines named after it or its device
/// (`eth0-TxRx-0`, `virtio2-input.0`, `mlx5_comp0@pci:0000:81:00.0`), else the device's
/// `msi_irqs`.
fn irqs(host: &HostView, iface: &str) -> Result<Vec<u32>, String> {
    let dev = host.link_name(&format!("/sys/class/net/{iface}/device"));
    let mut out = Vec::new();
    if let Ok(t) = host.read("/proc/interrupts") {
        for line in t.lines() {
            let Some((num, rest)) = line.trim_start().split_once(':') else {
                continue;
            };
            let Ok(n) = num.parse::<u32>() else { continue };
            let name = rest.split_whitespace().last().unwrap_or("");
            let by_iface = name
                .split(|c: char| !c.is_ascii_alphanumeric() && c != '.' && c != '_')
                .any(|w| w == iface);
            let by_dev = dev.as_deref().is_some_and(|d| {
                name.contains(&format!("@pci:{d}"))
                    || (name.starts_with(&format!("{d}-")) && !name.ends_with("-config"))
            });
            if (by_iface || by_dev) && !out.contains(&n) {
                out.push(n);
            }
        }
    }
    if out.is_empty() {
        for dir in ["device/msi_irqs", "device/../msi_irqs"] {
            if let Ok(names) = host.list(&format!("/sys/class/net/{iface}/{dir}")) {
                out = names.iter().filter_map(|n| n.parse().ok()).collect();
                if !out.is_empty() {
                    break;
                }
            }
        }
    }
    out.sort_unstable();
    if out.is_empty() {
        Err(format!(
            "no IRQs found for {iface} in /proc/interrupts or the device's msi_irqs"
        ))
    } else {
        Ok(out)
    }
}

/// Every check of one interface.
pub(crate) fn interface(host: &HostView, iface: &str, t: &Target) -> Vec<Check> {
    let sec = format!("interface {iface}");
    let sec = sec.as_str();
    let base = format!("/sys/class/net/{iface}");
    if iface == "lo" {
        return vec![
            Check::new(
                sec,
                "loopback",
                host.read(&format!("{base}/mtu"))
                    .map_or("-".into(), |m| format!("mtu {m}")),
                Status::Info,
            )
            .want("-")
            .note("loopback: no NIC, rings or IRQs; the peer is this host"),
        ];
    }
    let driver = host.link_name(&format!("{base}/device/driver"));
    let drv = driver
        .as_deref()
        .map(|d| format!(" (driver {d})"))
        .unwrap_or_default();
    let nodes = numa_nodes(host);
    let local = host
        .read(&format!("{base}/device/local_cpulist"))
        .ok()
        .and_then(|l| cpu_list(&l).map(|set| (l, set)));
    vec![
        mtu(host, iface, sec, &base),
        speed(host, iface, sec, t),
        rings(host, iface, sec, &drv),
        offloads(host, iface, sec, &drv),
        numa(host, sec, &base, nodes, &local),
        irq_affinity(host, iface, sec, nodes, &local),
    ]
}

/// The NIC's local CPUs, as listed and as a set.
type Local = Option<(String, Vec<u32>)>;

/// Jumbo frames.
fn mtu(host: &HostView, iface: &str, sec: &str, base: &str) -> Check {
    match host.read(&format!("{base}/mtu")).map(|m| m.trim().parse::<u32>()) {
        Ok(Ok(m)) if m >= 9000 => Check::new(sec, "mtu", m.to_string(), Status::Ok).want("9000"),
        Ok(Ok(m)) => Check::new(sec, "mtu", m.to_string(), Status::Tune)
            .want("9000")
            .note("jumbo frames cut per-packet work sixfold (document 002: 10 -> 36 Gbit/s on one stream); only if the peer and every hop carry them too: check with --peer")
            .fix(format!("ip link set dev {iface} mtu 9000")),
        Ok(Err(_)) => Check::unknown(sec, "mtu", format!("{base}/mtu is not a number")),
        Err(e) => Check::unknown(sec, "mtu", e).want("9000"),
    }
}

/// The link against the target rate.
fn speed(host: &HostView, iface: &str, sec: &str, t: &Target) -> Check {
    match speed_mbps(host, iface) {
        Ok(mbps) if mbps * 1_000_000 >= t.rate_bps => {
            Check::new(sec, "link speed", units::rate(mbps * 1_000_000), Status::Ok)
                .want(format!(">= {}", units::rate(t.rate_bps)))
        }
        Ok(mbps) => Check::new(
            sec,
            "link speed",
            units::rate(mbps * 1_000_000),
            Status::Info,
        )
        .want(format!(">= {}", units::rate(t.rate_bps)))
        .note("the link is slower than the target rate: no setting on this host changes that"),
        Err(e) => Check::unknown(sec, "link speed", e),
    }
}

/// NIC ring sizes against their maximum.
fn rings(host: &HostView, iface: &str, sec: &str, drv: &str) -> Check {
    match host.probes().rings(iface) {
        Ok(r) if r.rx_max == 0 && r.tx_max == 0 => Check::new(
            sec,
            "rings rx/tx",
            format!("{}/{}", r.rx, r.tx),
            Status::Info,
        )
        .want("-")
        .note(format!("the driver reports no ring maximum{drv}")),
        Ok(r) if r.rx >= r.rx_max && r.tx >= r.tx_max => {
            Check::new(sec, "rings rx/tx", format!("{}/{}", r.rx, r.tx), Status::Ok)
                .want(format!("{}/{} (max)", r.rx_max, r.tx_max))
        }
        Ok(r) => Check::new(
            sec,
            "rings rx/tx",
            format!("{}/{}", r.rx, r.tx),
            Status::Tune,
        )
        .want(format!("{}/{} (max)", r.rx_max, r.tx_max))
        .note("small rings drop bursts at high rates before the kernel sees them")
        .fix(format!(
            "ethtool -G {iface} rx {} tx {}",
            r.rx_max, r.tx_max
        )),
        Err(e) => Check::unknown(sec, "rings rx/tx", format!("{e}{drv}")),
    }
}

/// GRO, GSO and TSO.
fn offloads(host: &HostView, iface: &str, sec: &str, drv: &str) -> Check {
    match host.probes().offloads(iface) {
        Ok(o) => {
            let on = |b: bool| if b { "on" } else { "off" };
            let cur = format!("gro {} gso {} tso {}", on(o.gro), on(o.gso), on(o.tso));
            if o.gro && o.gso && o.tso {
                Check::new(sec, "offloads", cur, Status::Ok).want("gro on gso on tso on")
            } else {
                let off: Vec<&str> = [("gro", o.gro), ("gso", o.gso), ("tso", o.tso)]
                    .into_iter()
                    .filter(|(_, b)| !b)
                    .map(|(n, _)| n)
                    .collect();
                Check::new(sec, "offloads", cur, Status::Tune)
                    .want("gro on gso on tso on")
                    .note("without them the kernel handles every MTU-sized packet itself")
                    .fix(format!(
                        "ethtool -K {iface} {}",
                        off.iter()
                            .map(|n| format!("{n} on"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    ))
            }
        }
        Err(e) => Check::unknown(sec, "offloads", format!("{e}{drv}")),
    }
}

/// The NIC's NUMA node.
fn numa(host: &HostView, sec: &str, base: &str, nodes: Option<usize>, local: &Local) -> Check {
    let node = host
        .read(&format!("{base}/device/numa_node"))
        .ok()
        .and_then(|n| n.trim().parse::<i32>().ok());
    match (nodes, node, local) {
        (Some(n), _, _) if n <= 1 => Check::new(sec, "numa node", "single node", Status::Info)
            .want("-")
            .note("one NUMA node: every core is local to the NIC"),
        (_, Some(nd), Some((list, _))) if nd >= 0 => Check::new(
            sec,
            "numa node",
            format!("node {nd}, cpus {list}"),
            Status::Info,
        )
        .want(format!("run zcp on node {nd}"))
        .note(format!(
            "keep the transfer on the NIC's node: numactl --cpunodebind={nd} --membind={nd} zcp ..."
        )),
        (_, Some(_), _) | (_, None, _) => Check::unknown(
            sec,
            "numa node",
            format!("{base}/device/numa_node or local_cpulist is missing or -1 (no PCI device)"),
        ),
    }
}

/// Whether the NIC's interrupts are served on its own node.
fn irq_affinity(
    host: &HostView,
    iface: &str,
    sec: &str,
    nodes: Option<usize>,
    local: &Local,
) -> Check {
    match irqs(host, iface) {
        Err(e) => Check::unknown(sec, "irq affinity", e),
        Ok(list) => {
            let mut by_aff: BTreeMap<String, Vec<u32>> = BTreeMap::new();
            let mut unreadable = Vec::new();
            for n in &list {
                match host.read(&format!("/proc/irq/{n}/smp_affinity_list")) {
                    Ok(a) => by_aff.entry(a.trim().to_string()).or_default().push(*n),
                    Err(_) => unreadable.push(*n),
                }
            }
            let summary = by_aff
                .iter()
                .map(|(a, ns)| {
                    let ns: Vec<String> = ns.iter().map(u32::to_string).collect();
                    format!("{} -> cpu {a}", ns.join(","))
                })
                .collect::<Vec<_>>()
                .join("; ");
            let summary = if summary.is_empty() {
                "unreadable".to_string()
            } else {
                summary
            };
            match (nodes, local) {
                (Some(n), _) if n <= 1 => Check::new(sec, "irq affinity", summary, Status::Info)
                    .want("-")
                    .note("one NUMA node: any core may serve the NIC"),
                (_, Some((llist, lset))) => {
                    let off: Vec<(String, Vec<u32>)> = by_aff
                        .iter()
                        .filter(|(a, _)| {
                            cpu_list(a).is_none_or(|s| s.iter().any(|c| !lset.contains(c)))
                        })
                        .map(|(a, ns)| (a.clone(), ns.clone()))
                        .collect();
                    if off.is_empty() && unreadable.is_empty() {
                        Check::new(sec, "irq affinity", summary, Status::Ok)
                            .want(format!("cpu {llist} (the NIC's node)"))
                    } else {
                        let mut c = Check::new(sec, "irq affinity", summary, Status::Tune)
                            .want(format!("cpu {llist} (the NIC's node)"))
                            .note("interrupts served on another node cross the interconnect for every packet (document 002, Fig. 2); stop irqbalance first or it moves them back");
                        for (_, ns) in off {
                            for n in ns {
                                c = c
                                    .fix(format!("echo {llist} > /proc/irq/{n}/smp_affinity_list"));
                            }
                        }
                        c
                    }
                }
                _ => Check::unknown(
                    sec,
                    "irq affinity",
                    format!("{summary}; the NIC's local CPUs are unknown"),
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(cpu_list("0-3,8,10-11"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(cpu_list("5"), Some(vec![5]));
        assert_eq!(cpu_list("3-1"), None);
        assert_eq!(cpu_list("x"), None);
    }

    #[test]
    fn route_prefixes() {
        let r = Route {
            iface: "eth0".into(),
            dest: "192.0.2.0".parse().unwrap(),
            prefix: 24,
        };
        assert!(r.contains("192.0.2.77".parse().unwrap()));
        assert!(!r.contains("192.0.3.1".parse().unwrap()));
        assert!(!r.contains("::1".parse().unwrap()));
        let default = Route {
            iface: "eth0".into(),
            dest: "0.0.0.0".parse().unwrap(),
            prefix: 0,
        };
        assert!(default.contains("203.0.113.9".parse().unwrap()));
    }
}
