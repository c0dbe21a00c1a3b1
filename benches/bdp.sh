#!/usr/bin/env bash
# Document 002's socket-buffer (bandwidth-delay product) effect on the namespace testbed with
# its delay line (scripts/testbed.sh, docs/udp.md): one TCP stream through a tbf bottleneck at
# a long RTT, with the namespaces' default TCP buffer limits, with the ceiling `zcp doctor`
# recommends for that rate x RTT, and with a generous one, for iperf3 and for zcp.
#
#   benches/bdp.sh [-r RTT_MS] [-R RATE] [-m MTU] [-n REPS] [-t SECONDS] [-s SIZE] [-o OUTDIR]
#
# Defaults: RTT 50 ms, tbf 2gbit, MTU 1500, 2 interleaved repetitions, iperf3 -t 10, zcp sends
# a 1G page-cached file into --recv-engine null (network path, verified; each run bounded at
# 90 s). The buffers are set in both namespaces: net.ipv4.tcp_rmem and tcp_wmem are per
# network namespace; net.core.rmem_max and wmem_max are not (a namespace other than the first
# cannot write them), and neither iperf3 without -w nor zcp sets SO_RCVBUF/SO_SNDBUF, so they
# do not apply here. Root only; needs iproute2, ethtool, nftables, iperf3, python3, cargo.
set -euo pipefail

RTT=50 RATE=2gbit MTU=1500 REPS=2 SECS=10 SIZE=1G OUT=""
while getopts "r:R:m:n:t:s:o:h" opt; do
    case $opt in
        r) RTT=$OPTARG ;; R) RATE=$OPTARG ;; m) MTU=$OPTARG ;; n) REPS=$OPTARG ;;
        t) SECS=$OPTARG ;; s) SIZE=$OPTARG ;; o) OUT=$OPTARG ;;
        *) sed -n '2,16p' "$0"; exit 2 ;;
    esac
done
die() { echo "bdp.sh: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
for tool in ip ethtool nft iperf3 python3 cargo timeout; do
    command -v "$tool" >/dev/null || die "$tool is required"
done

cd "$(dirname "$0")/.."
cargo build --release --quiet -p zcp -p zcp-delay
ZCP=$PWD/target/release/zcp
TB=$PWD/scripts/testbed.sh
export ZCP_DELAY=$PWD/target/release/zcp-delay
NAME=zcpbdp$$
WORK=$(mktemp -d /var/tmp/zcp-bdp.XXXXXX)
RAW=$WORK/bdp.jsonl
cleanup() {
    "$TB" down "$NAME" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$ZCP" keygen -o "$WORK/key" >/dev/null
mkdir -p "$WORK/root"
head -c "$SIZE" /dev/urandom >"$WORK/src"
"$TB" up "$NAME" --mtu "$MTU" --rate "$RATE" --rtt "$RTT" >/dev/null
"$TB" exec "$NAME" b iperf3 -s -D -B 10.231.0.2 -p 5201 --logfile "$WORK/iperf3.log"
"$TB" exec "$NAME" b "$ZCP" serve --bind 10.231.0.2 -p 5310 --root "$WORK/root" \
    --key-file "$WORK/key" >"$WORK/serve.log" 2>&1 &
disown
sleep 0.5

# The namespace's defaults, and what doctor recommends for this rate x RTT (its measured RTT
# to the server, through the delay line).
rmem0=$("$TB" exec "$NAME" a sysctl -n net.ipv4.tcp_rmem | tr -s '\t ' ' ')
wmem0=$("$TB" exec "$NAME" a sysctl -n net.ipv4.tcp_wmem | tr -s '\t ' ' ')
doctor=$("$TB" exec "$NAME" a "$ZCP" doctor --peer 10.231.0.2:5310 --rate "$RATE" -J)
read -r rtt_us bdp rmem_doc wmem_doc < <(python3 -c '
import json, sys
d = json.loads(sys.argv[1])
want = {c["name"]: c.get("recommended") for c in d["checks"]}
print(d["target"]["rtt_us"], d["target"]["bdp_bytes"],
      want["net.ipv4.tcp_rmem"].replace(" ", "_"), want["net.ipv4.tcp_wmem"].replace(" ", "_"))' "$doctor")
echo "doctor through the delay line: RTT $rtt_us us, BDP $bdp bytes; recommends tcp_rmem ${rmem_doc//_/ }, tcp_wmem ${wmem_doc//_/ }" >&2

set_buffers() {
    for side in a b; do
        "$TB" exec "$NAME" "$side" sysctl -qw net.ipv4.tcp_rmem="$1" net.ipv4.tcp_wmem="$2"
    done
}

for rep in $(seq 1 "$REPS"); do
    for cfg in default doctor tuned; do
        case $cfg in
            default) set_buffers "$rmem0" "$wmem0" ;;
            doctor) set_buffers "${rmem_doc//_/ }" "${wmem_doc//_/ }" ;;
            tuned) set_buffers "4096 131072 67108864" "4096 16384 67108864" ;;
        esac
        j=$(timeout $((SECS + 30)) "$TB" exec "$NAME" a iperf3 -c 10.231.0.2 -p 5201 -t "$SECS" -J)
        python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(json.dumps({"tool":"iperf3","buffers":sys.argv[2],"gbps":d["end"]["sum_received"]["bits_per_second"]/1e9,"retransmits":d["end"]["sum_sent"].get("retransmits")}))' \
            "$j" "$cfg" >>"$RAW"
        cat "$WORK/src" >/dev/null
        j=$(timeout 90 "$TB" exec "$NAME" a "$ZCP" send -J -i 0 --recv-engine null -p 5310 \
            --key-file "$WORK/key" "$WORK/src" "10.231.0.2::src$rep$cfg")
        rm -f "$WORK/root/src$rep$cfg"
        python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(json.dumps({"tool":"zcp","buffers":sys.argv[2],"gbps":d["end"]["sum"]["bits_per_second"]/1e9,"retransmits":d["end"]["sum"].get("retransmits")}))' \
            "$j" "$cfg" >>"$RAW"
    done
    echo "repetition $rep of $REPS done" >&2
done

report=$(python3 - "$RAW" "$REPS" "$RTT" "$RATE" "$MTU" "$SECS" "$SIZE" "$rmem0" "$wmem0" "$rmem_doc" "$wmem_doc" "$rtt_us" "$bdp" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
reps, rtt, rate, mtu, secs, size, r0, w0, rd, wd, rtt_us, bdp = sys.argv[2:14]
print(f"one TCP stream, RTT {rtt} ms through the delay line (doctor measured {int(rtt_us)/1000:.1f} ms), "
      f"tbf {rate}, MTU {mtu}; BDP {int(bdp)/1e6:.1f} MB; {reps} interleaved repetitions, "
      f"Gbit/s median (min-max); iperf3 -t {secs}, zcp a {size} file into --recv-engine null")
bufs = {"default": f"namespace default: tcp_rmem {r0}, tcp_wmem {w0}",
        "doctor": f"doctor's advice: tcp_rmem {rd.replace('_', ' ')}, tcp_wmem {wd.replace('_', ' ')}",
        "tuned": "64 MiB: tcp_rmem 4096 131072 67108864, tcp_wmem 4096 16384 67108864"}
print(f"{'buffers':<9}{'iperf3':>22}{'zcp':>22}   limits")
for b in ("default", "doctor", "tuned"):
    cells = []
    for t in ("iperf3", "zcp"):
        v = [r["gbps"] for r in rows if r["tool"] == t and r["buffers"] == b]
        cells.append(f"{statistics.median(v):6.3f} ({min(v):.2f}-{max(v):.2f})" if v else "-")
    print(f"{b:<9}{cells[0]:>22}{cells[1]:>22}   {bufs[b]}")
PY
)
echo "$report"
if [ -n "$OUT" ]; then
    mkdir -p "$OUT"
    echo "$report" >"$OUT/bdp.txt"
    cp "$RAW" "$OUT/bdp.jsonl"
fi
