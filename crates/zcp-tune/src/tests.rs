//! The checks on the fixture hosts in `fixtures/` (see `fixtures/README.md`): a tuned and an
//! untuned 100 Gbit/s node, a virtual machine without cpufreq, and a host where almost nothing
//! is readable. Nothing here reads the machine the tests run on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::{Error, HostView, Options, Report, Status, examine};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

fn opts() -> Options {
    Options {
        path: PathBuf::from("/data"),
        ..Options::default()
    }
}

fn run(name: &str, o: &Options) -> Report {
    examine(&HostView::tree(&fixture(name)), o).unwrap()
}

fn check<'a>(r: &'a Report, section: &str, name: &str) -> &'a crate::Check {
    r.checks
        .iter()
        .find(|c| c.section == section && c.name == name)
        .unwrap_or_else(|| panic!("no check {section}/{name}"))
}

/// The report's text with the fixture's absolute path made stable.
fn stable(text: String, name: &str) -> String {
    text.replace(&fixture(name).display().to_string(), "<fixture>")
}

#[test]
fn tuned_host_needs_nothing() {
    let r = run("tuned", &opts());
    assert_eq!(r.count(Status::Tune), 0, "{}", r.to_text());
    assert_eq!(r.count(Status::Unknown), 0, "{}", r.to_text());
    assert!(r.fixes().is_empty());
    // Rate from the link (100 Gbit/s), RTT assumed 100 ms: document 002's 1.25 GB.
    assert_eq!(r.target.bdp_bytes, 1_250_000_000);
    assert_eq!(r.interfaces, ["ens1f0"]);
    // The snippet never lowers what the host already has.
    assert!(r.sysctl_conf.contains("net.core.rmem_max = 2147483647\n"));
    assert!(
        r.sysctl_conf
            .contains("net.ipv4.tcp_rmem = 4096 87380 2147483647\n")
    );
    insta::assert_snapshot!(stable(r.to_text(), "tuned"));
}

#[test]
fn untuned_host_gets_every_fix() {
    let r = run("untuned", &opts());
    for (sec, name) in [
        ("network", "net.core.rmem_max"),
        ("network", "net.ipv4.tcp_wmem"),
        ("network", "net.ipv4.tcp_sack"),
        ("network", "net.ipv4.tcp_congestion_control"),
        ("network", "net.core.default_qdisc"),
        ("network", "net.ipv4.tcp_mtu_probing"),
        ("interface ens1f0", "mtu"),
        ("interface ens1f0", "rings rx/tx"),
        ("interface ens1f0", "offloads"),
        ("interface ens1f0", "irq affinity"),
        ("cpu", "governor"),
        ("cpu", "irqbalance"),
        ("storage", "mount options"),
        ("storage", "io scheduler"),
        ("storage", "read-ahead"),
    ] {
        assert_eq!(check(&r, sec, name).status, Status::Tune, "{sec}/{name}");
    }
    let fixes = r.fixes();
    for want in [
        "sysctl -w net.core.rmem_max=2147483647",
        "sysctl -w net.ipv4.tcp_rmem=\"4096 131072 2147483647\"",
        "modprobe tcp_bbr",
        "sysctl -w net.ipv4.tcp_congestion_control=bbr",
        "ip link set dev ens1f0 mtu 9000",
        "ethtool -G ens1f0 rx 8192 tx 8192",
        "ethtool -K ens1f0 gro on tso on",
        "echo 8-15 > /proc/irq/120/smp_affinity_list",
        "echo 8-15 > /proc/irq/122/smp_affinity_list",
        "cpupower frequency-set -g performance",
        "systemctl disable --now irqbalance",
        "echo mq-deadline > /sys/block/sdb/queue/scheduler",
        "echo 4096 > /sys/block/sdb/queue/read_ahead_kb",
    ] {
        assert!(
            fixes.iter().any(|f| f == want),
            "missing fix {want:?} in {fixes:#?}"
        );
    }
    // IRQ 123 already sits on the NIC's node: no fix for it.
    assert!(!fixes.iter().any(|f| f.contains("/proc/irq/123/")));
    assert_eq!(
        check(&r, "cpu", "governor").current,
        "performance (cpu 12-15), powersave (cpu 0-11)"
    );
    insta::assert_snapshot!(stable(r.to_text(), "untuned"));
    insta::assert_snapshot!("untuned_json", stable(r.to_json(), "untuned"));
}

#[test]
fn virtual_machine_without_cpufreq_says_what_to_do() {
    let r = run("vm", &opts());
    let gov = check(&r, "cpu", "governor");
    assert_eq!(gov.status, Status::Unknown);
    let note = gov.note.as_deref().unwrap();
    assert!(note.contains("virtual machine (QEMU)"), "{note}");
    assert!(note.contains("dedicated cores"), "{note}");
    // Rate unknown from a virtio link: assumed 10 Gbit/s, and said so.
    assert_eq!(r.target.rate_source, crate::Source::Assumed);
    assert_eq!(r.target.bdp_bytes, 125_000_000);
    assert_eq!(
        check(&r, "interface eth0", "rings rx/tx").note.as_deref(),
        Some("ethtool -g eth0: Operation not supported (driver virtio_net)")
    );
    assert_eq!(
        check(&r, "interface eth0", "irq affinity").current,
        "25 -> cpu 0; 26 -> cpu 1"
    );
    assert_eq!(check(&r, "storage", "O_DIRECT").status, Status::Info);
    assert_eq!(check(&r, "storage", "block device").status, Status::Unknown);
    // bbr is loadable as a module file, not available yet.
    assert!(r.fixes().contains(&"modprobe tcp_bbr".to_string()));
    insta::assert_snapshot!(stable(r.to_text(), "vm"));
}

#[test]
fn host_with_missing_files_is_unknown_not_a_crash() {
    let r = run("missing", &opts());
    assert_eq!(r.count(Status::Ok), 0);
    assert_eq!(r.count(Status::Tune), 0);
    assert!(
        r.checks.iter().all(|c| c.status == Status::Unknown),
        "{}",
        r.to_text()
    );
    assert!(r.checks.iter().all(|c| c.note.is_some()));
    assert!(
        check(&r, "network", "net.core.rmem_max")
            .note
            .as_deref()
            .unwrap()
            .contains("not a number")
    );
    // The snippet is still complete: it does not depend on what could be read.
    assert!(
        r.sysctl_conf
            .contains("net.ipv4.tcp_rmem = 4096 131072 250000000")
    );
    insta::assert_snapshot!(stable(r.to_text(), "missing"));
    // Even an empty directory is a host with nothing readable.
    let empty = tempfile::tempdir().unwrap();
    let r = examine(&HostView::tree(empty.path()), &opts()).unwrap();
    assert!(r.checks.iter().all(|c| c.status == Status::Unknown));
}

#[test]
fn a_recorded_peer_gives_the_rtt_and_the_end_to_end_mtu() {
    let mut o = opts();
    o.peer = Some(("dtn2:5310".into(), "10.0.2.99:5310".parse().unwrap()));
    let r = run("tuned", &o);
    assert_eq!(r.target.rtt_source, crate::Source::Measured);
    assert_eq!(r.target.rtt_us, 101_200);
    assert_eq!(r.target.bdp_bytes, 1_265_000_000);
    assert_eq!(
        check(&r, "peer", "jumbo frames end to end").status,
        Status::Ok
    );
    // The route to 10.0.2.0/24 is ens1f0's.
    assert_eq!(r.interfaces, ["ens1f0"]);
    let r = run("untuned", &o);
    let j = check(&r, "peer", "jumbo frames end to end");
    assert_eq!(
        (j.status, j.current.as_str()),
        (Status::Tune, "no (MSS 1448)")
    );
    assert_eq!(check(&r, "peer", "path mtu").status, Status::Tune);
    // A host tree without a recorded path: the peer cannot be measured, which is an error.
    let e = examine(&HostView::tree(&fixture("vm")), &o).unwrap_err();
    assert!(matches!(e, Error::Peer(_)), "{e}");
}

#[test]
fn given_rate_and_rtt_size_the_buffers_within_linux_limits() {
    let mut o = opts();
    o.rate_bps = Some(100_000_000_000);
    o.rtt = Some(Duration::from_millis(200));
    let r = run("vm", &o);
    assert_eq!(r.target.bdp_bytes, 2_500_000_000);
    let c = check(&r, "network", "net.core.rmem_max");
    assert_eq!(c.recommended, ">= 2147483647");
    assert!(c.note.as_deref().unwrap().contains("parallel streams"));
    assert!(r.sysctl_conf.contains("net.core.wmem_max = 2147483647\n"));
    // Twice the BDP (benches/results/2026-11-24-vm-udp: one BDP left a stream at ~1.3 of
    // 2 Gbit/s): 10 Gbit/s x 10 ms = 12.5 MB, buffers 25 MB.
    let small = Options {
        rate_bps: Some(10_000_000_000),
        rtt: Some(Duration::from_millis(10)),
        ..opts()
    };
    let r = run("vm", &small);
    assert_eq!(r.target.bdp_bytes, 12_500_000);
    for key in ["net.core.rmem_max", "net.core.wmem_max"] {
        let c = check(&r, "network", key);
        assert_eq!(c.recommended, ">= 25000000", "{key}");
        assert!(!c.note.as_deref().unwrap().contains("parallel streams"));
    }
    assert_eq!(
        check(&r, "network", "net.ipv4.tcp_wmem").recommended,
        "4096 16384 25000000"
    );
    assert!(r.sysctl_conf.contains("net.core.rmem_max = 25000000\n"));
    // The other systems' lines follow document 002's Fig. 4 for the BDP itself.
    let o2 = Options {
        rate_bps: Some(100_000_000_000),
        rtt: Some(Duration::from_millis(100)),
        ..opts()
    };
    let r = run("vm", &o2);
    let mac = r.other_os.iter().find(|x| x.os == "macOS").unwrap();
    assert_eq!(
        mac.lines,
        [
            "kern.ipc.maxsockbuf = 1250000000",
            "net.inet.tcp.sendspace = 625000000",
            "net.inet.tcp.recvspace = 625000000"
        ]
    );
    let bsd = r.other_os.iter().find(|x| x.os == "FreeBSD").unwrap();
    assert!(
        bsd.lines
            .contains(&"net.inet.tcp.recvbuf_max = 1250000000".to_string())
    );
}

#[test]
fn interfaces_are_chosen_or_refused_by_name() {
    let mut o = opts();
    o.interfaces = vec!["eno1".into()];
    let r = run("untuned", &o);
    assert_eq!(r.interfaces, ["eno1"]);
    // The rate defaults to the examined link's own speed.
    assert_eq!(r.target.rate_bps, 1_000_000_000);
    assert_eq!(check(&r, "interface eno1", "link speed").status, Status::Ok);
    o.rate_bps = Some(10_000_000_000);
    let slow = run("untuned", &o);
    assert_eq!(
        check(&slow, "interface eno1", "link speed").status,
        Status::Info
    );
    assert!(
        r.fixes()
            .contains(&"ethtool -G eno1 rx 4096 tx 4096".to_string())
    );
    o.interfaces = vec!["eth9".into()];
    let e = examine(&HostView::tree(&fixture("untuned")), &o).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--interface eth9: no such interface on this host (it has: eno1, ens1f0, lo)"
    );
}
