#!/usr/bin/env bash
# How closely zcp holds --limit-rate: achieved rate vs the cap, over loopback.
#
#   benches/limit-rate.sh [-n REPS] [-r RATES] [-t SECONDS] [-P STREAMS] [-d DIR] [-o OUTDIR]
#                         [-b ZCP]
#
# For each cap in RATES (default 200M,500M,1G,2G) and without one, for `send` (the client
# paces) and `get` (the server paces), with the pacing zcp chooses (`auto`: the kernel's
# SO_MAX_PACING_RATE under a user-space bucket where the kernel paces) and with
# ZCP_PACING=user (the bucket alone), REPS runs (default 5) each move a file sized to take
# SECONDS (default 2, whole seconds) at the cap (the largest cap's file without one) into the
# receiver's memory (--recv-engine mem: verified, not stored, so no disk enters the figure).
# Per configuration: the median, min and max of the achieved rate (end.sum_sent of zcp's JSON:
# payload bytes over the whole transfer; for `get` it ends when the client's session does, with
# its last byte), its error against the cap, the steady rate (the
# half-second intervals between the first and the last), the rate over the whole process's
# wall time (connect and handshake included: a lower bound), and the pacing the report named.
# Sources live in DIR (default /dev/shm, else /var/tmp). Writes raw-PN.jsonl, table-PN.md and
# setup-PN.txt (N: the streams) to OUTDIR when given. About 45 s a run at the defaults. Needs
# python3.
set -euo pipefail

REPS=5
RATES=200M,500M,1G,2G
SECS=2
STREAMS=1
DIR=/dev/shm
[ -d "$DIR" ] || DIR=/var/tmp
OUT=""
ZCP=target/release/zcp
while getopts "n:r:t:P:d:o:b:h" opt; do
    case $opt in
        n) REPS=$OPTARG ;;
        r) RATES=$OPTARG ;;
        t) SECS=$OPTARG ;;
        P) STREAMS=$OPTARG ;;
        d) DIR=$OPTARG ;;
        o) OUT=$OPTARG ;;
        b) ZCP=$OPTARG ;;
        *) sed -n '2,20p' "$0"; exit 2 ;;
    esac
done
ZCP=$(realpath "$ZCP")
[ -x "$ZCP" ] || { echo "limit-rate.sh: $ZCP is not an executable (cargo build --release)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "limit-rate.sh: python3 is required" >&2; exit 2; }

WORK=$(mktemp -d "$DIR/zcp-limit-rate.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

# bits per second of a RATE as zcp reads it (decimal suffixes)
bits() { python3 -c 'import sys; s=sys.argv[1]; m={"K":1e3,"M":1e6,"G":1e9,"T":1e12}; print(int(float(s[:-1])*m[s[-1].upper()]) if s[-1].upper() in m else int(s))' "$1"; }

mkdir -p "$WORK/root" "$WORK/got"
"$ZCP" keygen -o "$WORK/key" 2>/dev/null
IFS=, read -ra CAPS <<<"$RATES"
largest=0
for r in "${CAPS[@]}"; do
    b=$(bits "$r")
    head -c $((b / 8 * SECS)) /dev/urandom >"$WORK/root/$r.bin"
    if [ "$b" -gt "$largest" ]; then
        largest=$b
        cp "$WORK/root/$r.bin" "$WORK/root/none.bin"
    fi
done

# Two servers: one paces as zcp chooses, one in user space alone (for `get`).
declare -A PORT
for mode in auto user; do
    ZCP_PACING=$mode "$ZCP" serve --root "$WORK/root" --bind 127.0.0.1 -p 0 --key-file "$WORK/key" \
        >"$WORK/serve-$mode.out" 2>"$WORK/serve-$mode.log" &
    pids+=($!)
    for _ in $(seq 50); do grep -q listening "$WORK/serve-$mode.out" 2>/dev/null && break; sleep 0.1; done
    PORT[$mode]=$(sed -n 's/.*listening on [^:]*:\([0-9]*\),.*/\1/p' "$WORK/serve-$mode.out")
    [ -n "${PORT[$mode]}" ] || { echo "limit-rate.sh: zcp serve did not start" >&2; exit 1; }
done

RAW=$WORK/raw.jsonl
echo "== caps ${RATES} and none, send and get, pacing auto and user, $REPS runs, -P $STREAMS, sources in $WORK"
uptime
for rep in $(seq "$REPS"); do
    for r in "${CAPS[@]}" none; do
        for dir in send get; do
            for mode in auto user; do
                [ "$r" = none ] && [ "$mode" = user ] && continue
                cap_args=()
                [ "$r" != none ] && cap_args=(--limit-rate "$r")
                common=(-J -i 0.5 -P "$STREAMS" --recv-engine mem --key-file "$WORK/key" "${cap_args[@]}")
                t0=$(date +%s.%N)
                if [ "$dir" = send ]; then
                    ZCP_PACING=$mode "$ZCP" send -p "${PORT[auto]}" "${common[@]}" \
                        "$WORK/root/$r.bin" 127.0.0.1::out.bin >"$WORK/run.json"
                else
                    "$ZCP" get -p "${PORT[$mode]}" "${common[@]}" \
                        "127.0.0.1::$r.bin" "$WORK/got/" >"$WORK/run.json"
                fi
                t1=$(date +%s.%N)
                python3 - "$WORK/run.json" "$dir" "$r" "$mode" "$rep" "$t0" "$t1" "$(bits "${r/none/0}")" >>"$RAW" <<'EOF'
import json, sys
doc, direction, rate, mode, rep, t0, t1, cap = sys.argv[1:]
d = json.load(open(doc))
end = d["end"]
lr = end.get("limit_rate") or {}
# The steady rate: the whole half-second intervals between the first and the last.
mid = d["intervals"][1:-1]
secs = sum(i["sum"]["seconds"] for i in mid)
steady = sum(i["sum"]["bytes"] for i in mid) * 8 / secs if secs > 0 else None
print(json.dumps({
    "direction": direction, "rate": rate, "cap_bps": int(cap), "pacing_asked": mode,
    "run": int(rep), "bytes": end["sum_sent"]["bytes"],
    "bps": end["sum_sent"]["bits_per_second"],
    "wall_bps": end["sum_sent"]["bytes"] * 8 / (float(t1) - float(t0)),
    "steady_bps": steady,
    "pacing": lr.get("pacing"),
}))
EOF
            done
        done
    done
    echo "   run $rep of $REPS done ($(cut -d' ' -f1-3 /proc/loadavg) load)"
done

python3 - "$RAW" "$REPS" "$STREAMS" >"$WORK/table.md" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"Medians of {sys.argv[2]} runs, -P {sys.argv[3]}, --recv-engine mem, loopback.\n")
print("| direction | cap | pacing asked | pacing reported | median Mbit/s | error | min–max Mbit/s "
      "| steady Mbit/s | steady error | wall-time Mbit/s |")
print("|---|---|---|---|---|---|---|---|---|---|")
order = {}
for r in rows:
    order.setdefault((r["direction"], r["rate"], r["pacing_asked"]), []).append(r)
def key(k):
    d, rate, mode = k
    rs = order[k]
    return (d, rs[0]["cap_bps"] or 1e99, mode)
for k in sorted(order, key=key):
    d, rate, mode = k
    rs = order[k]
    bps = [r["bps"] for r in rs]
    med = statistics.median(bps)
    wall = statistics.median(r["wall_bps"] for r in rs)
    cap = rs[0]["cap_bps"]
    err = f"{(med / cap - 1) * 100:+.1f}%" if cap else "—"
    st = [r["steady_bps"] for r in rs if r.get("steady_bps")]
    steady = statistics.median(st) if st else None
    st_txt = f"{steady / 1e6:.1f}" if steady else "—"
    st_err = f"{(steady / cap - 1) * 100:+.1f}%" if cap and steady else "—"
    pacing = ", ".join(sorted({r["pacing"] or "none" for r in rs}))
    asked = mode if cap else "—"
    print(f"| {d} | {rate} | {asked} | {pacing} | {med / 1e6:.1f} | {err} | "
          f"{min(bps) / 1e6:.1f}–{max(bps) / 1e6:.1f} | {st_txt} | {st_err} | {wall / 1e6:.1f} |")
EOF
cat "$WORK/table.md"
uptime

if [ -n "$OUT" ]; then
    mkdir -p "$OUT"
    cp "$RAW" "$OUT/raw-P$STREAMS.jsonl"
    cp "$WORK/table.md" "$OUT/table-P$STREAMS.md"
    {
        echo "kernel: $(uname -r)"
        echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
        echo "memory: $(free -g | awk '/Mem:/ {print $2}') GiB"
        echo "congestion control: $(sysctl -n net.ipv4.tcp_congestion_control 2>/dev/null)"
        echo "qdisc on lo: $(tc qdisc show dev lo 2>/dev/null | head -1)"
        echo "sources: $(findmnt -no FSTYPE -T "$WORK" 2>/dev/null | head -1) ($DIR)"
        echo "zcp: $("$ZCP" --version) ($(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
        echo "command: benches/limit-rate.sh -n $REPS -r $RATES -t $SECS -P $STREAMS -d $DIR -o $OUT"
        echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
    } >"$OUT/setup-P$STREAMS.txt"
    echo "== written to $OUT"
fi
