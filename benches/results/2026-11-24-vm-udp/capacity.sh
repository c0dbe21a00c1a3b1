#!/usr/bin/env bash
# The delay line's capacity: one iperf3 TCP stream (15 s, cubic, tcp_rmem/tcp_wmem max
# 128 MiB in both namespaces, no tbf) through scripts/testbed.sh --rtt, per MTU and RTT, with
# zcpa's segmentation offloads on and off. Root; run from the checkout after
# cargo build --release -p zcp-delay.
set -euo pipefail
cd "$(dirname "$0")/../../.."
S=scripts/testbed.sh
export ZCP_DELAY=$PWD/target/release/zcp-delay
trap '$S down cap 2>/dev/null || true' EXIT
for cfg in "${@:-1500 10 on}"; do
    set -- $cfg
    $S up cap --rtt "$2" --mtu "$1" >/dev/null
    for ns in a b; do
        $S exec cap $ns sysctl -qw net.ipv4.tcp_rmem="4096 131072 134217728" \
            net.ipv4.tcp_wmem="4096 16384 134217728"
    done
    [ "$3" = on ] || $S exec cap a ethtool -K zcpa tso off gso off >/dev/null
    $S exec cap b iperf3 -s -1 -B 10.231.0.2 >/dev/null 2>&1 &
    sleep 0.5
    j=$($S exec cap a timeout 40 iperf3 -c 10.231.0.2 -t 15 -J)
    pid=$(cat /run/zcp-testbed/cap/pid)
    ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    stats=$(grep '^a>b' /run/zcp-testbed/cap/stats)
    python3 - "$j" "$cfg" "$ticks" "$(getconf CLK_TCK)" "$stats" <<'PY'
import json, sys
d = json.loads(sys.argv[1]); e = d["end"]
mtu, rtt, off = sys.argv[2].split()
last = [i["sum"]["bits_per_second"] for i in d["intervals"][-5:]]
kv = dict(x.split("=") for x in sys.argv[5].split()[1:])
print(f"MTU {mtu:>4} RTT {rtt:>3} ms offloads {off:<3}: {e['sum_received']['bits_per_second'] / 1e9:5.2f} Gbit/s "
      f"(last 5 s {sum(last) / len(last) / 1e9:5.2f}), retransmits {e['sum_sent']['retransmits']}, "
      f"delay line CPU {int(sys.argv[3]) / int(sys.argv[4]):.1f} s, queue peak {int(kv['peak_bytes']) / 1e6:.0f} MB, "
      f"dropped full {kv['dropped_full']}, socket drops {kv['socket_drops']}")
PY
    $S down cap
done
