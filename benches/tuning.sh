#!/usr/bin/env bash
# Document 002's network experiments on this machine: MTU 1500 vs 9000 and 1..8 parallel
# streams, over the two-namespace veth testbed (scripts/testbed.sh), for iperf3 (the network
# peer) and zcp (a page-cached file sent with sendfile into --recv-engine null, so only the
# network path is measured), with the veth offloads (GRO/GSO/TSO) on and, with -k, also off: a
# NIC without segmentation offloads, where every MTU-sized packet costs the kernel work.
#
#   benches/tuning.sh [-n REPS] [-t SECONDS] [-s SIZE] [-P "1 2 4 8"] [-k] [-o OUTDIR]
#
# Runs are interleaved (every MTU and stream count once per repetition); medians are printed
# with the ratio MTU 9000 / MTU 1500. Root only; needs iproute2, iperf3, python3 (and ethtool
# for -k). Everything is removed on exit, also on failure; every run has a timeout.
set -euo pipefail

REPS=3
SECS=4
SIZE=2G
STREAMS="1 2 4 8"
OFFLOADS="on"
OUT=""
while getopts "n:t:s:P:ko:h" opt; do
    case $opt in
        n) REPS=$OPTARG ;;
        t) SECS=$OPTARG ;;
        s) SIZE=$OPTARG ;;
        P) STREAMS=$OPTARG ;;
        k) OFFLOADS="on off" ;;
        o) OUT=$OPTARG ;;
        *) sed -n '2,14p' "$0"; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "tuning.sh: needs root (network namespaces)" >&2; exit 2; }
for tool in ip iperf3 python3; do
    command -v "$tool" >/dev/null || { echo "tuning.sh: $tool is required (apt-get install $tool)" >&2; exit 2; }
done
if [[ $OFFLOADS == *off* ]] && ! command -v ethtool >/dev/null; then
    echo "tuning.sh: -k needs ethtool (apt-get install ethtool)" >&2; exit 2
fi

cd "$(dirname "$0")/.."
cargo build --release --quiet
ZCP=$PWD/target/release/zcp
TB=$PWD/scripts/testbed.sh
NAME=zcptune$$
WORK=$(mktemp -d /var/tmp/zcp-tuning.XXXXXX)
RAW=$WORK/raw.jsonl
cleanup() {
    "$TB" down "$NAME" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

"$ZCP" keygen -o "$WORK/key" >/dev/null
head -c "$SIZE" /dev/urandom > "$WORK/src" 2>/dev/null || dd if=/dev/urandom of="$WORK/src" bs=1M count=2048 status=none
mkdir -p "$WORK/root"

for rep in $(seq 1 "$REPS"); do
    for off in $OFFLOADS; do
        for mtu in 1500 9000; do
            "$TB" up "$NAME" --mtu "$mtu" >/dev/null
            if [ "$off" = off ]; then
                "$TB" exec "$NAME" a ethtool -K zcpa gro off gso off tso off >/dev/null 2>&1
                "$TB" exec "$NAME" b ethtool -K zcpb gro off gso off tso off >/dev/null 2>&1
            fi
            "$TB" exec "$NAME" b iperf3 -s -D -B 10.231.0.2 -p 5201 --logfile "$WORK/iperf3.log"
            "$TB" exec "$NAME" b "$ZCP" serve --bind 10.231.0.2 -p 5310 --root "$WORK/root" \
                --key-file "$WORK/key" >"$WORK/serve.log" 2>&1 &
            disown
            sleep 0.5
            for p in $STREAMS; do
                j=$(timeout 60 "$TB" exec "$NAME" a iperf3 -c 10.231.0.2 -p 5201 -P "$p" -t "$SECS" -J)
                python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(json.dumps({"tool":"iperf3","offloads":sys.argv[2],"mtu":int(sys.argv[3]),"streams":int(sys.argv[4]),"gbps":d["end"]["sum_received"]["bits_per_second"]/1e9}))' \
                    "$j" "$off" "$mtu" "$p" >> "$RAW"
                cat "$WORK/src" > /dev/null
                j=$(timeout 120 "$TB" exec "$NAME" a "$ZCP" send -J -i 0 -P "$p" --recv-engine null \
                    -p 5310 --key-file "$WORK/key" "$WORK/src" 10.231.0.2::src)
                python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(json.dumps({"tool":"zcp","offloads":sys.argv[2],"mtu":int(sys.argv[3]),"streams":int(sys.argv[4]),"gbps":d["end"]["sum"]["bits_per_second"]/1e9}))' \
                    "$j" "$off" "$mtu" "$p" >> "$RAW"
            done
            "$TB" down "$NAME"
        done
    done
    echo "repetition $rep of $REPS done" >&2
done

report=$(python3 - "$RAW" "$REPS" "$SIZE" "$SECS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
reps, size, secs = sys.argv[2:5]
cells = {}
for r in rows:
    cells.setdefault((r["offloads"], r["tool"], r["streams"], r["mtu"]), []).append(r["gbps"])
print(f"veth testbed, {reps} interleaved repetitions, medians in Gbit/s (min-max); "
      f"iperf3 -t {secs}, zcp sends a {size} page-cached file into --recv-engine null")
print(f"{'offloads':<9}{'tool':<8}{'streams':>8}{'MTU 1500':>22}{'MTU 9000':>22}{'9000/1500':>11}")
for off in ("on", "off"):
    for tool in ("iperf3", "zcp"):
        for p in sorted({k[2] for k in cells}):
            a, b = cells.get((off, tool, p, 1500)), cells.get((off, tool, p, 9000))
            if not a or not b:
                continue
            f = lambda v: f"{statistics.median(v):6.2f} ({min(v):.1f}-{max(v):.1f})"
            print(f"{off:<9}{tool:<8}{p:>8}{f(a):>22}{f(b):>22}{statistics.median(b)/statistics.median(a):>10.2f}x")
PY
)
echo "$report"
if [ -n "$OUT" ]; then
    mkdir -p "$OUT"
    echo "$report" > "$OUT/tuning.txt"
    cp "$RAW" "$OUT/tuning.jsonl"
fi
