//! CPU checks: the frequency governor of every core, and irqbalance.

use std::collections::BTreeMap;

use crate::host::HostView;
use crate::{Check, Status};

const SEC: &str = "cpu";

/// `0-3,8` from a sorted list of core numbers.
fn ranges(cores: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cores.len() {
        let mut j = i;
        while j + 1 < cores.len() && cores[j + 1] == cores[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cores[i].to_string()
        } else {
            format!("{}-{}", cores[i], cores[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// Whether the host says it runs under a hypervisor, and which, where it tells.
fn hypervisor(host: &HostView) -> Option<String> {
    let flagged = host.read("/proc/cpuinfo").ok().is_some_and(|c| {
        c.lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "hypervisor"))
    });
    let vendor = host
        .read("/sys/class/dmi/id/sys_vendor")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let hv_type = host.read("/sys/hypervisor/type").ok();
    match (flagged || hv_type.is_some(), vendor.or(hv_type)) {
        (true, Some(v)) => Some(v.trim().to_string()),
        (true, None) => Some("the CPU flags say hypervisor".to_string()),
        (false, _) => None,
    }
}

/// Governor per core, then irqbalance.
pub(crate) fn checks(host: &HostView) -> Vec<Check> {
    let mut out = Vec::new();
    let cores: Vec<u32> = match host.list("/sys/devices/system/cpu") {
        Ok(names) => {
            let mut c: Vec<u32> = names
                .iter()
                .filter_map(|n| n.strip_prefix("cpu")?.parse().ok())
                .collect();
            c.sort_unstable();
            c
        }
        Err(e) => {
            out.push(Check::unknown(SEC, "governor", e).want("performance"));
            out.push(irqbalance(host));
            return out;
        }
    };
    let mut by_gov: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let mut missing = Vec::new();
    for c in &cores {
        match host.read(&format!(
            "/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor"
        )) {
            Ok(g) => by_gov.entry(g.trim().to_string()).or_default().push(*c),
            Err(_) => missing.push(*c),
        }
    }
    if by_gov.is_empty() {
        let why = match hypervisor(host) {
            Some(hv) => format!(
                "no cpufreq on any of {} cores: a virtual machine ({hv}) sets no frequency of its own; the host's governor applies: ask the provider for dedicated cores or a performance profile",
                cores.len()
            ),
            None => format!(
                "no cpufreq on any of {} cores: the cpufreq driver is not loaded, or the firmware controls the frequency (check the BIOS power profile)",
                cores.len()
            ),
        };
        out.push(Check::unknown(SEC, "governor", why).want("performance"));
    } else {
        let summary = by_gov
            .iter()
            .map(|(g, cs)| format!("{g} (cpu {})", ranges(cs)))
            .collect::<Vec<_>>()
            .join(", ");
        let slow: Vec<u32> = by_gov
            .iter()
            .filter(|(g, _)| g.as_str() != "performance")
            .flat_map(|(_, cs)| cs.iter().copied())
            .collect();
        let mut c = if slow.is_empty() {
            Check::new(SEC, "governor", summary, Status::Ok).want("performance")
        } else {
            Check::new(SEC, "governor", summary, Status::Tune)
                .want("performance")
                .note("a power-saving governor clocks cores down between bursts (document 002: with performance, 4 streams already fill 100 Gbit/s)")
                .fix("cpupower frequency-set -g performance")
        };
        if !missing.is_empty() {
            let m = format!("no cpufreq for cpu {}", ranges(&missing));
            c.note = Some(match c.note {
                Some(n) => format!("{n}; {m}"),
                None => m,
            });
        }
        out.push(c);
    }
    out.push(irqbalance(host));
    out
}

/// Whether irqbalance runs, from the names of the processes in `/proc`.
fn irqbalance(host: &HostView) -> Check {
    let pids = match host.list("/proc") {
        Ok(p) => p,
        Err(e) => return Check::unknown(SEC, "irqbalance", e),
    };
    let pids: Vec<&String> = pids
        .iter()
        .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
        .collect();
    if pids.is_empty() {
        return Check::unknown(SEC, "irqbalance", "no processes visible in /proc");
    }
    let running = pids.iter().any(|p| {
        host.read(&format!("/proc/{p}/comm"))
            .is_ok_and(|c| c.trim() == "irqbalance")
    });
    let nodes = crate::nic::numa_nodes(host).unwrap_or(1);
    let cur = if running { "running" } else { "not running" };
    match (running, nodes > 1) {
        (true, true) => Check::new(SEC, "irqbalance", cur, Status::Tune)
            .want("stopped, NIC IRQs pinned to its node")
            .note("irqbalance moves the NIC's interrupts across NUMA nodes; document 002 stops it and binds them")
            .fix("systemctl disable --now irqbalance"),
        (false, true) => Check::new(SEC, "irqbalance", cur, Status::Ok)
            .want("stopped, NIC IRQs pinned to its node"),
        (_, false) => Check::new(SEC, "irqbalance", cur, Status::Info)
            .want("-")
            .note("one NUMA node: where interrupts land matters little"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn core_ranges() {
        assert_eq!(super::ranges(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(super::ranges(&[4]), "4");
        assert_eq!(super::ranges(&[]), "");
    }
}
