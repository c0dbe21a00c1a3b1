//! Two hosts on one machine: `scripts/testbed.sh` makes two network namespaces joined by a
//! veth pair; a zcp server runs in one, clients in the other. Root only (CI runs as root); the
//! tests skip with a printed reason otherwise, and fail if root cannot make the testbed. The
//! namespaces are removed when the testbed is dropped, also when a test fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::util::{
    Env, ServerProc, SmallFs, is_root, make_file, on_path, run, same_file, skip, text, tree,
};

/// The server's and the client's addresses inside the namespaces.
pub const ADDR_A: &str = "10.231.0.1";
pub const ADDR_B: &str = "10.231.0.2";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/testbed.sh")
}

/// The delay line's binary, in the directory of the zcp binary under test.
fn delay_tool() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_zcp")).with_file_name("zcp-delay")
}

/// Namespaces `<name>-a` (client side, dev `zcpa`) and `<name>-b` (server side, dev `zcpb`).
pub struct Testbed {
    pub name: String,
}

impl Testbed {
    /// Creates a testbed; `None`, with the reason printed, when not root (the test then
    /// returns). As root the testbed must come up: a failure panics with the script's words.
    pub fn up(mtu: u32, mtu_b: u32, rate: Option<&str>) -> Option<Testbed> {
        let mut extra = vec![];
        if let Some(r) = rate {
            extra.extend(["--rate", r]);
        }
        Testbed::up_with(mtu, mtu_b, &extra)
    }

    /// [`Testbed::up`] with more options of `testbed.sh up` (`--delay MS`, `--loss PCT`,
    /// `--rate R`). The delay line is the `zcp-delay` binary beside zcp's (`cargo test
    /// --workspace` builds it).
    pub fn up_with(mtu: u32, mtu_b: u32, extra: &[&str]) -> Option<Testbed> {
        if !is_root() {
            skip("network namespaces need root");
            return None;
        }
        if let Some(tool) = missing_tool(extra) {
            skip(&format!(
                "the testbed needs {tool} here (.ci/run installs it)"
            ));
            return None;
        }
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "zcpt{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let mut c = Command::new(script());
        c.args([
            "up",
            &name,
            "--mtu",
            &mtu.to_string(),
            "--mtu-b",
            &mtu_b.to_string(),
        ]);
        c.args(extra);
        if extra.iter().any(|a| *a == "--delay" || *a == "--loss") {
            let tool = delay_tool();
            assert!(
                tool.exists(),
                "no {}: build the delay line first (cargo build --release -p zcp-delay; cargo test --workspace builds it)",
                tool.display()
            );
            c.env("ZCP_DELAY", tool);
        }
        let o = run(c, 30);
        assert!(
            o.status.success(),
            "running as root, but the testbed could not be made: {}",
            text(&o.stderr)
        );
        Some(Testbed { name })
    }

    /// `zcp ARGS...` inside namespace `a` or `b`.
    pub fn zcp(&self, side: char, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &format!("{}-{side}", self.name)])
            .arg(env!("CARGO_BIN_EXE_zcp"))
            .args(args)
            .env_remove("ZCP_KEY_FILE");
        c
    }

    /// A zcp server on the `b` side, listening on [`ADDR_B`].
    pub fn server(&self, root: &Path, key: &Path) -> ServerProc {
        ServerProc::spawn(self.zcp('b', &["serve", "--bind", ADDR_B]), root, key, &[])
    }

    /// `tc -s qdisc show` of one end.
    pub fn qdisc(&self, side: char) -> String {
        let dev = if side == 'a' { "zcpa" } else { "zcpb" };
        let mut c = Command::new("tc");
        c.args([
            "-n",
            &format!("{}-{side}", self.name),
            "-s",
            "qdisc",
            "show",
            "dev",
            dev,
        ]);
        text(&run(c, 10).stdout)
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let mut c = Command::new(script());
        c.args(["down", &self.name]);
        let _ = c.status();
    }
}

/// A tool `testbed.sh up` needs with these options and this host lacks: `ip` (iproute2)
/// always; `tc` for `--rate`; `ethtool` for the delay line (`--delay`, `--rtt`, and `--loss`,
/// which runs through it); `nft` (nftables) for `--loss`.
fn missing_tool(extra: &[&str]) -> Option<&'static str> {
    let has = |flag: &str| extra.contains(&flag);
    let mut need = vec![("ip", "ip (iproute2)")];
    if has("--rate") {
        need.push(("tc", "tc (iproute2)"));
    }
    if has("--delay") || has("--rtt") || has("--loss") {
        need.push(("ethtool", "ethtool"));
    }
    if has("--loss") {
        need.push(("nft", "nft (nftables)"));
    }
    need.into_iter()
        .find(|(t, _)| !on_path(t))
        .map(|(_, name)| name)
}

/// Bytes a tbf qdisc has sent, from `tc -s qdisc show`.
fn tbf_sent(qdisc: &str) -> u64 {
    qdisc
        .lines()
        .find_map(|l| l.trim().strip_prefix("Sent "))
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn doctor_sees_jumbo_frames_end_to_end_or_not() {
    for (mtu_b, jumbo) in [(9000, true), (1500, false)] {
        let Some(tb) = Testbed::up(9000, mtu_b, None) else {
            return;
        };
        let env = Env::new();
        let root = env.mkdir("root");
        let server = tb.server(&root, &env.key);
        let peer = format!("{ADDR_B}:{}", server.port);
        let data = env.mkdir("data");
        let mut c = tb.zcp('a', &["doctor", "--peer", &peer, "--json", "--path"]);
        c.arg(&data);
        let o = run(c, 60);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            v["interfaces"],
            serde_json::json!(["zcpa"]),
            "the route to the peer"
        );
        assert_eq!(v["target"]["rtt_source"], "measured");
        let find = |sec: &str, name: &str| {
            v["checks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["section"] == sec && c["name"] == name)
                .unwrap_or_else(|| panic!("no {sec}/{name} in {v}"))
                .clone()
        };
        assert_eq!(find("interface zcpa", "mtu")["status"], "ok");
        let rtt = find("peer", "rtt");
        assert!(rtt["note"].as_str().unwrap().contains(ADDR_A), "{rtt}");
        assert_eq!(find("peer", "path mtu")["current"], "9000");
        let j = find("peer", "jumbo frames end to end");
        if jumbo {
            assert_eq!(j["status"], "ok", "{j}");
        } else {
            // The far end announces the MSS of its 1500-byte MTU.
            assert_eq!(j["status"], "tune", "{j}");
            assert!(
                j["current"].as_str().unwrap().starts_with("no (MSS 14"),
                "{j}"
            );
        }
        // The probe's bare connections leave the server serving.
        let src = env.path("f");
        make_file(&src, 1 << 20, 4096, 7);
        let mut c = tb.zcp('a', &["send", "-p", &server.port.to_string(), "--key-file"]);
        c.arg(&env.key).arg(&src).arg(format!("{ADDR_B}::f"));
        let o = run(c, 60);
        assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
        assert!(same_file(&src, &root.join("f")));
    }
}

#[test]
fn streams_cross_a_rate_limited_veth_intact() {
    let Some(tb) = Testbed::up(1500, 1500, Some("400mbit")) else {
        return;
    };
    let env = Env::new();
    let root = env.mkdir("root");
    let server = tb.server(&root, &env.key);
    let src = env.path("big");
    let size = 24u64 << 20;
    make_file(&src, size, 4096, 11);
    let port = server.port.to_string();
    let mut c = tb.zcp(
        'a',
        &[
            "send",
            "-P",
            "4",
            "--chunk-size",
            "1M",
            "-p",
            &port,
            "--key-file",
        ],
    );
    c.arg(&env.key).arg(&src).arg(format!("{ADDR_B}::big"));
    let o = run(c, 120);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(same_file(&src, &root.join("big")));
    // Every byte went through the shaped link, not some other path.
    let q = tb.qdisc('a');
    assert!(q.contains("tbf"), "{q}");
    assert!(tbf_sent(&q) >= size, "{q}");
}

#[test]
fn tbf_counters_parse() {
    let q = "qdisc tbf 8001: root refcnt 3 rate 400Mbit burst 1048550b lat 100ms \n Sent 25417381 bytes 1790 pkt (dropped 0, overlimits 0 requeues 0) \n";
    assert_eq!(tbf_sent(q), 25_417_381);
    assert_eq!(tbf_sent("nothing"), 0);
}

/// A server whose loopback is down (a namespace without `lo` up) cannot time the engines on
/// a filesystem in memory: `auto` says why and falls back at once, instead of waiting for a
/// loopback connection that never comes (before the fix the session hung for good, holding
/// a 32 MiB probe file in the destination and every later measurement behind it).
#[test]
fn auto_into_memory_without_loopback_falls_back_at_once() {
    let Some(tb) = Testbed::up(1500, 1500, None) else {
        return;
    };
    let o = run(
        {
            let mut c = Command::new("ip");
            c.args(["-n", &format!("{}-b", tb.name), "link", "set", "lo", "down"]);
            c
        },
        10,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let env = Env::new();
    let root = env.mkdir("root");
    // Room to measure (128 MiB free), so the fallback is the loopback's doing.
    let Some(_fs) = SmallFs::for_test(&root, "256M") else {
        return;
    };
    let server = tb.server(&root, &env.key);
    let src = env.path("f");
    make_file(&src, 1 << 20, 4096, 5);
    let port = server.port.to_string();
    let send = || {
        let mut c = tb.zcp('a', &["send", "-J", "-i", "0", "-p", &port, "--key-file"]);
        c.arg(&env.key).arg(&src).arg(format!("{ADDR_B}::f"));
        let t = std::time::Instant::now();
        let o = run(c, 30);
        (o, t.elapsed())
    };
    for round in 0..2 {
        let (o, took) = send();
        assert!(
            o.status.success(),
            "round {round}: {}{}\n{}",
            text(&o.stdout),
            text(&o.stderr),
            server.log()
        );
        // Connecting to itself gives up after 1 s; the answer is then kept for the server.
        assert!(took < Duration::from_secs(8), "round {round}: {took:?}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let note = v["start"]["engines"]["receiver_note"].as_str().unwrap();
        assert!(
            note.starts_with("auto chose splice")
                && note.contains("measuring failed")
                && note.contains("loopback"),
            "round {round}: {note}"
        );
        assert!(same_file(&src, &root.join("f")));
        // The probe file is gone: the root holds the file and nothing else.
        assert_eq!(tree(&root), ["f"], "round {round}");
    }
}

/// Through the delay line (10 ms each way), `zcp doctor --peer` measures the 20 ms RTT it
/// sets, and the socket-buffer advice follows the BDP of that RTT: at 4 Gbit/s x 20 ms the
/// 10 MB window exceeds a tcp_rmem ceiling of 6 MiB (set in the namespace: a new one's
/// default depends on the host's memory).
#[test]
fn doctor_measures_the_rtt_of_the_delay_line() {
    let Some(tb) = Testbed::up_with(1500, 1500, &["--delay", "10"]) else {
        return;
    };
    let env = Env::new();
    let root = env.mkdir("root");
    let server = tb.server(&root, &env.key);
    let peer = format!("{ADDR_B}:{}", server.port);
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &format!("{}-a", tb.name)]);
    c.args(["sysctl", "-qw", "net.ipv4.tcp_rmem=4096 131072 6291456"]);
    assert!(run(c, 10).status.success());
    let o = run(
        tb.zcp(
            'a',
            &["doctor", "--peer", &peer, "--rate", "4gbit", "--json"],
        ),
        60,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let t = &v["target"];
    assert_eq!(t["rtt_source"], "measured", "{t}");
    let rtt_us = t["rtt_us"].as_u64().unwrap();
    // One SYN/SYN-ACK exchange: the two delays plus microseconds of stack and timer slack.
    assert!(
        (20_000..24_000).contains(&rtt_us),
        "set 20 ms, measured {rtt_us} us: {t}"
    );
    assert!(t["rtt_why"].as_str().unwrap().contains("median"), "{t}");
    let bdp = t["bdp_bytes"].as_u64().unwrap();
    assert_eq!(bdp, 4_000_000_000 / 8 * rtt_us / 1_000_000, "{t}");
    let rmem = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "net.ipv4.tcp_rmem")
        .unwrap_or_else(|| panic!("no tcp_rmem check in {v}"));
    assert_eq!(rmem["status"], "tune", "{rmem}");
    assert!(
        rmem["recommended"]
            .as_str()
            .unwrap()
            .ends_with(&format!(" {}", 2 * bdp)),
        "the ceiling wanted is twice the BDP: {rmem}"
    );
}

/// `--loss` drops that share of the packets towards `b`, counted by the script's nftables
/// rule, and none the other way; the transfer still arrives intact.
#[test]
fn loss_drops_packets_towards_b_only() {
    let Some(tb) = Testbed::up_with(1500, 1500, &["--delay", "1", "--loss", "5"]) else {
        return;
    };
    let env = Env::new();
    let root = env.mkdir("root");
    let server = tb.server(&root, &env.key);
    let src = env.path("f");
    make_file(&src, 8 << 20, 4096, 3);
    let mut c = tb.zcp('a', &["send", "-p", &server.port.to_string(), "--key-file"]);
    c.arg(&env.key).arg(&src).arg(format!("{ADDR_B}::f"));
    let o = run(c, 60);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(same_file(&src, &root.join("f")));
    // The delay line rewrites its counters every second: wait for the transfer's.
    std::thread::sleep(Duration::from_millis(1200));
    let mut c = Command::new(script());
    c.args(["show", &tb.name]);
    let show = text(&run(c, 10).stdout);
    let field = |line: &str, key: &str| -> u64 {
        line.split(' ')
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {line:?}"))
    };
    let dropped: u64 = show
        .lines()
        .find_map(|l| l.strip_prefix("dropped: packets "))
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no loss counter in {show}"));
    let ab = show.lines().find(|l| l.starts_with("a>b ")).unwrap();
    assert!(show.contains("delay line: 1 ms each way"), "{show}");
    // 8 MiB is about 5,800 segments of 1448 bytes: 5% is about 290 of them.
    assert!(
        (60..2_000).contains(&dropped),
        "dropped {dropped} packets of an 8 MiB transfer at 5%: {show}"
    );
    // Every frame went through the delay line (about 5,800 data segments in super-frames
    // of up to 64 KiB) and its queue never overflowed.
    assert!(field(ab, "bytes_in") >= 8 << 20, "{show}");
    assert_eq!(field(ab, "dropped_full"), 0, "{show}");
}

/// A delay line that does not start (here a stand-in that exits at once) fails `up` with the
/// tool's log and leaves no namespace and no state behind.
#[test]
fn a_delay_line_that_fails_to_start_leaves_nothing() {
    if !is_root() {
        skip("network namespaces need root");
        return;
    }
    let name = format!("zcpf{}", std::process::id());
    let mut c = Command::new(script());
    c.args(["up", &name, "--delay", "5"])
        .env("ZCP_DELAY", "/bin/false");
    let o = run(c, 30);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("zcp-delay did not start"),
        "{}",
        text(&o.stderr)
    );
    let mut l = Command::new("ip");
    l.args(["netns", "list"]);
    let list = text(&run(l, 10).stdout);
    assert!(!list.contains(&name), "left behind: {list}");
    assert!(!Path::new(&format!("/run/zcp-testbed/{name}")).exists());
}

/// A server host that drops every packet, under a name with two addresses: the connect
/// timeout is one wait for the whole connect, not one for each address (3 s, not 6), and
/// the message names the timeout and the flag. Root only (a namespace's own hosts file).
#[test]
fn the_connect_timeout_is_one_wait_whatever_the_name_resolves_to() {
    let Some(tb) = Testbed::up_with(1500, 1500, &["--loss", "100"]) else {
        return;
    };
    let b = format!("{}-b", tb.name);
    let o = run(
        {
            let mut c = Command::new("ip");
            c.args(["-n", &b, "addr", "add", "10.231.0.3/24", "dev", "zcpb"]);
            c
        },
        10,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    // `ip netns exec` reads /etc/netns/NAME/hosts as /etc/hosts.
    let hosts = Hosts::new(
        &format!("{}-a", tb.name),
        "10.231.0.2 zcp-two\n10.231.0.3 zcp-two\n",
    );
    let env = Env::new();
    let src = env.path("f");
    make_file(&src, 1000, 1000, 1);
    let mut c = tb.zcp(
        'a',
        &["send", "--connect-timeout", "3", "-p", "5310", "--key-file"],
    );
    c.arg(&env.key).arg(&src).arg("zcp-two::f");
    let t0 = std::time::Instant::now();
    let o = run(c, 30);
    let took = t0.elapsed();
    drop(hosts);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no answer within 3 s (--connect-timeout)"),
        "{err}"
    );
    assert!(err.contains("nothing was sent"), "{err}");
    assert!(took < Duration::from_millis(5500), "took {took:?}: {err}");
}

/// `/etc/netns/NS/hosts` while it lives (removed on drop, also when a test fails).
struct Hosts(PathBuf);

impl Hosts {
    fn new(ns: &str, text: &str) -> Hosts {
        let dir = PathBuf::from("/etc/netns").join(ns);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("hosts"), text).unwrap();
        Hosts(dir)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
