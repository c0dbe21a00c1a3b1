#!/usr/bin/env bash
# zcp over TCP and over UDP (`--transport udp`) on the namespace testbed with its delay line
# (scripts/testbed.sh, docs/udp.md): the matrix of issue 14's "Measure" paragraph.
#
#   benches/udp.sh [-m "1500 9000"] [-r "0 10 50"] [-l "0 0.1 1 5"] [-T tcp,udp] [-P "1 4"]
#                  [-R 2gbit] [-c CC] [-s SIZE] [-t SECONDS] [-u fair|fixed] [-e ENGINE] [-F]
#                  [-o OUTDIR]
#
#   -m  veth MTUs            -r  RTTs in ms through the delay line (0: the line without delay)
#   -l  loss in % on the sender -> receiver direction (nftables numgen drop into NAME-b)
#   -T  zcp transports       -P  stream counts (-P of zcp)
#   -R  the tbf bottleneck on both veth ends (default 2gbit)
#   -c  TCP congestion control in both namespaces (default: the namespace's, which a new
#       namespace takes from the host; recorded in the CSV and the table's title). It decides
#       how TCP fares under random loss: cubic halves its window at each loss, bbr does not.
#   -s  one file size for every cell (default: sized per cell from its expected rate, so a
#       cell takes about half of -t; a cell done in under a quarter of -t runs once more with
#       a file sized from the rate it showed, and that run is recorded)
#   -t  each cell's time bound in seconds (default 20): a cell still running then is stopped
#       and its rate taken from the bytes of its interval lines (status "timeout")
#   -u  --udp-mode for the udp cells (default fair)
#   -e  the server's receiver engine (default null: the network path only, still verified)
#   -F  skip the fairness cells (one zcp flow and one iperf3 TCP flow for -t seconds through
#       the same bottleneck, at one stream; Jain's index of their rates)
#   -o  write udp.csv, fairness.csv, table.txt and udp.svg there
#
# Every cell runs zcp send from NAME-a to a server in NAME-b with -J; it records Gbit/s, CPU
# s/GiB of both sides (the -J report: the sender's own getrusage, the receiver's as the server
# reports it), the bytes the loss rule dropped (nftables counter, the ground truth), the TCP
# retransmits, and for udp whatever re-sent / lost / drop counters -J carries (searched by
# name, so the script keeps working as the report grows). A cell that fails (as udp on a zcp
# without --transport udp) is recorded as failed with zcp's own words, and the matrix goes on.
# Then a table with the issue's goals, each met / NOT met / n/a. Root only; needs iproute2,
# ethtool, nftables, iperf3, python3 and cargo. The testbed is removed on exit, also on failure.
set -euo pipefail

MTUS="1500 9000" RTTS="0 10 50" LOSSES="0 0.1 1 5" TRANSPORTS="tcp,udp" STREAMS="1 4"
RATE=2gbit CC="" SIZE="" SECS=20 UDPMODE=fair ENGINE=null FAIR=1 OUT=""
while getopts "m:r:l:T:P:R:c:s:t:u:e:Fo:h" opt; do
    case $opt in
        m) MTUS=$OPTARG ;; r) RTTS=$OPTARG ;; l) LOSSES=$OPTARG ;; T) TRANSPORTS=$OPTARG ;;
        P) STREAMS=$OPTARG ;; R) RATE=$OPTARG ;; c) CC=$OPTARG ;; s) SIZE=$OPTARG ;; t) SECS=$OPTARG ;;
        u) UDPMODE=$OPTARG ;; e) ENGINE=$OPTARG ;; F) FAIR=0 ;; o) OUT=$OPTARG ;;
        *) sed -n '2,34p' "$0"; exit 2 ;;
    esac
done
die() { echo "udp.sh: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
for tool in ip ethtool nft iperf3 python3 cargo timeout; do
    command -v "$tool" >/dev/null || die "$tool is required"
done
[[ $SECS =~ ^[0-9]+$ ]] && [ "$SECS" -ge 4 ] && [ "$SECS" -le 600 ] || die "-t $SECS: give 4 to 600 seconds"
case $UDPMODE in fair|fixed) ;; *) die "-u $UDPMODE: fair or fixed" ;; esac

cd "$(dirname "$0")/.."
cargo build --release --quiet -p zcp -p zcp-delay
ZCP=$PWD/target/release/zcp
TB=$PWD/scripts/testbed.sh
export ZCP_DELAY=$PWD/target/release/zcp-delay
NAME=zcpudp$$
WORK=$(mktemp -d /var/tmp/zcp-udp.XXXXXX)
CSV=$WORK/udp.csv FAIRCSV=$WORK/fairness.csv
SERVER=""
cleanup() {
    [ -z "$SERVER" ] || kill "$SERVER" 2>/dev/null || true
    "$TB" down "$NAME" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$ZCP" keygen -o "$WORK/key" >/dev/null
mkdir -p "$WORK/root"
echo "mtu,rtt_ms,loss_pct,transport,streams,size_bytes,status,seconds,gbps,cpu_send_s_per_gib,cpu_recv_s_per_gib,loss_dropped_packets,loss_dropped_bytes,tcp_retransmits,udp_resent_bytes,udp_lost_bytes,udp_receiver_drops,note,tcp_cc" >"$CSV"
echo "mtu,rtt_ms,loss_pct,transport,zcp_gbps,iperf3_gbps,jain,note,tcp_cc" >"$FAIRCSV"

# Bytes the loss rule has dropped so far ("packets bytes").
dropped() {
    "$TB" exec "$NAME" b nft list table netdev zcploss 2>/dev/null |
        sed -n 's/.*counter packets \([0-9]*\) bytes \([0-9]*\).*/\1 \2/p' | head -1 || true
}

# The file size for a cell: about SECS/2 at the rate expected (the bottleneck for udp; for tcp
# also the Mathis bound, 1.22 x MSS / (RTT x sqrt(loss)) per stream, which cubic beats, so
# the cell ends sooner), between 16 MiB and 4 GiB.
cell_size() {
    local transport=$1 mtu=$2 rtt=$3 loss=$4 p=$5
    [ -z "$SIZE" ] || { echo "$SIZE"; return; }
    python3 - "$transport" "$mtu" "$rtt" "$loss" "$p" "$RATE" "$SECS" <<'PY'
import re, sys
t, mtu, rtt, loss, p, rate, secs = sys.argv[1:]
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate.lower())
bps = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] if m else 2e9
est = bps * 0.9 * (1 - float(loss) / 100)
if t == "tcp" and float(loss) > 0:
    mss = (int(mtu) - 52) * 8
    est = min(est, int(p) * 1.22 * mss / (max(float(rtt), 0.2) / 1000 * (float(loss) / 100) ** 0.5))
size = est / 8 * int(secs) / 2
print(int(min(max(size, 16 << 20), 4 << 30)) >> 20 << 20)
PY
}

# Makes (or reuses) a source file of SIZE bytes, page-cached; they go with $WORK at exit.
source_file() {
    local size=$1 f="$WORK/src-$1"
    [ -f "$f" ] || head -c "$size" /dev/urandom >"$f"
    cat "$f" >/dev/null
    echo "$f"
}

up() {
    local mtu=$1 rtt=$2 loss=$3
    [ -z "$SERVER" ] || { kill "$SERVER" 2>/dev/null || true; SERVER=""; }
    "$TB" up "$NAME" --mtu "$mtu" --rate "$RATE" --rtt "$rtt" --loss "$loss" >/dev/null
    # Buffers for the bandwidth-delay product (doctor's advice), in both namespaces.
    for side in a b; do
        "$TB" exec "$NAME" "$side" sysctl -qw net.ipv4.tcp_rmem="4096 131072 67108864" \
            net.ipv4.tcp_wmem="4096 16384 67108864"
        [ -z "$CC" ] || "$TB" exec "$NAME" "$side" sysctl -qw net.ipv4.tcp_congestion_control="$CC"
    done
    TCPCC=$("$TB" exec "$NAME" a sysctl -n net.ipv4.tcp_congestion_control)
    "$TB" exec "$NAME" b iperf3 -s -D -B 10.231.0.2 -p 5201 --logfile "$WORK/iperf3.log"
    "$TB" exec "$NAME" b "$ZCP" serve --bind 10.231.0.2 -p 5310 --root "$WORK/root" \
        --key-file "$WORK/key" >"$WORK/serve.log" 2>&1 &
    SERVER=$!
    disown
    sleep 0.5
}

# zcp send for one cell; prints the CSV fields from status on.
run_cell() {
    local transport=$1 p=$2 src=$3 target=$4
    local extra=()
    [ "$transport" = tcp ] || extra=(--transport "$transport" --udp-mode "$UDPMODE")
    local before after rc=0
    before=$(dropped)
    timeout -s TERM "$SECS" "$TB" exec "$NAME" a "$ZCP" send --json-stream -i 1 -P "$p" \
        --recv-engine "$ENGINE" "${extra[@]}" -p 5310 --key-file "$WORK/key" "$src" \
        "10.231.0.2::$target" >"$WORK/out.jsonl" 2>"$WORK/err.txt" || rc=$?
    after=$(dropped)
    rm -rf "${WORK:?}/root/"* "$WORK/root/".zcp-* 2>/dev/null || true
    python3 - "$WORK/out.jsonl" "$WORK/err.txt" "$rc" "${before:-0 0}" "${after:-0 0}" <<'PY'
import json, sys
out, err, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
b, a = [list(map(int, s.split())) for s in sys.argv[4:6]]
drops = [a[0] - b[0], a[1] - b[1]]
lines = []
for l in open(out):
    try:
        lines.append(json.loads(l))
    except ValueError:
        pass
def find(d, names):
    """The first number under a key named like one of `names`, anywhere in `d`."""
    if isinstance(d, dict):
        for k, v in d.items():
            if k in names and isinstance(v, (int, float)):
                return v
        for v in d.values():
            r = find(v, names)
            if r is not None:
                return r
    elif isinstance(d, list):
        for v in d:
            r = find(v, names)
            if r is not None:
                return r
    return None
end = next((x["data"] for x in lines if x.get("type") == "end"), None)
ivs = [x["data"]["sum"] for x in lines if x.get("type") == "interval"]
note = open(err).read().strip().splitlines()
note = (note[0] if note else "").replace(",", ";").replace('"', "'")[:160]
f = lambda v: "" if v is None else (f"{v:.6g}" if isinstance(v, float) else str(v))
if end is not None and rc == 0:
    s = end["sum"]
    cpu = end.get("cpu", {})
    udp = {k: v for k, v in end.items() if "udp" in k.lower() or "datagram" in k.lower()}
    row = ["ok", f(s["seconds"]), f(s["bits_per_second"] / 1e9),
           f(cpu.get("sender", {}).get("seconds_per_gib")),
           f(cpu.get("receiver", {}).get("seconds_per_gib")),
           str(drops[0]), str(drops[1]), f(s.get("retransmits")),
           f(find(udp or end, {"resent_bytes", "bytes_resent", "retransmitted_bytes", "resent"})),
           f(find(udp or end, {"lost_bytes", "bytes_lost", "lost"})),
           f(find(udp or end, {"receiver_drops", "rx_drops", "socket_drops", "drops", "rxq_ovfl"})), ""]
elif ivs and rc == 124:
    secs = ivs[-1]["end"]
    byts = sum(i["bytes"] for i in ivs)
    row = ["timeout", f(secs), f(byts * 8 / secs / 1e9), "", "", str(drops[0]), str(drops[1]),
           str(sum(i.get("retransmits") or 0 for i in ivs)), "", "", "",
           "stopped at the time bound; rate from the interval lines"]
else:
    row = ["failed", "", "", "", "", str(drops[0]), str(drops[1]), "", "", "", "",
           note or f"exit {rc}"]
print(",".join(row))
PY
}

# One zcp flow (one stream) and one iperf3 TCP flow together for SECS seconds; prints
# zcp_gbps,iperf3_gbps,jain,note from their rates over seconds 2 .. SECS-1.
run_fair() {
    local transport=$1 src=$2 target=$3
    local extra=()
    [ "$transport" = tcp ] || extra=(--transport "$transport" --udp-mode "$UDPMODE")
    timeout $((SECS + 10)) "$TB" exec "$NAME" a iperf3 -c 10.231.0.2 -p 5201 -t "$SECS" -J \
        >"$WORK/iperf.json" 2>&1 &
    local ip=$!
    timeout -s TERM "$SECS" "$TB" exec "$NAME" a "$ZCP" send --json-stream -i 1 \
        --recv-engine "$ENGINE" "${extra[@]}" -p 5310 --key-file "$WORK/key" "$src" \
        "10.231.0.2::$target" >"$WORK/fair.jsonl" 2>"$WORK/err.txt" || true
    wait "$ip" || true
    rm -rf "${WORK:?}/root/"* "$WORK/root/".zcp-* 2>/dev/null || true
    python3 - "$WORK/fair.jsonl" "$WORK/iperf.json" "$WORK/err.txt" "$SECS" <<'PY'
import json, sys
secs = float(sys.argv[4])
lo, hi = 2.0, secs - 1
def rate(ivs):
    got = [(s, e, b) for s, e, b in ivs if s >= lo - 0.01 and e <= hi + 0.5]
    t = sum(e - s for s, e, _ in got)
    return sum(b for *_, b in got) * 8 / t / 1e9 if t > 0 else None
z = []
for l in open(sys.argv[1]):
    try:
        x = json.loads(l)
    except ValueError:
        continue
    if x.get("type") == "interval":
        s = x["data"]["sum"]
        z.append((s["start"], s["end"], s["bytes"]))
try:
    d = json.load(open(sys.argv[2]))
    i = [(x["sum"]["start"], x["sum"]["end"], x["sum"]["bytes"]) for x in d["intervals"]]
except (ValueError, KeyError):
    i = []
zr, ir = rate(z), rate(i)
if zr is None or ir is None or zr + ir == 0:
    err = open(sys.argv[3]).read().strip().splitlines()
    print(",".join(["", "", "", ((err[0] if err else "no overlap measured").replace(",", ";"))[:160]]))
else:
    jain = (zr + ir) ** 2 / (2 * (zr * zr + ir * ir))
    print(f"{zr:.6g},{ir:.6g},{jain:.3f},")
PY
}

IFS=, read -r -a TLIST <<<"$TRANSPORTS"
n=0
for mtu in $MTUS; do
    for rtt in $RTTS; do
        for loss in $LOSSES; do
            up "$mtu" "$rtt" "$loss"
            for transport in "${TLIST[@]}"; do
                for p in $STREAMS; do
                    size=$(cell_size "$transport" "$mtu" "$rtt" "$loss" "$p")
                    src=$(source_file "$size")
                    n=$((n + 1))
                    fields=$(run_cell "$transport" "$p" "$src" "c$n")
                    # Done in under a quarter of the time bound (the estimate was low): once
                    # more with a file sized from the rate just seen, unless -s fixed it.
                    resize=$(python3 -c 'import sys
f = sys.argv[1].split(","); secs = int(sys.argv[2]); size = int(sys.argv[3])
if f[0] == "ok" and float(f[1]) < secs / 4 and size < 4 << 30:
    print(int(min(max(float(f[2]) * 1e9 / 8 * secs / 2, size * 2), 4 << 30)) >> 20 << 20)' \
                        "$fields" "$SECS" "$size")
                    if [ -z "$SIZE" ] && [ -n "$resize" ]; then
                        size=$resize
                        src=$(source_file "$size")
                        n=$((n + 1))
                        fields=$(run_cell "$transport" "$p" "$src" "c$n")
                    fi
                    echo "$mtu,$rtt,$loss,$transport,$p,$size,$fields,$TCPCC" >>"$CSV"
                    echo "mtu $mtu rtt $rtt loss $loss $transport -P $p: ${fields%%,,*}" | cut -c1-140 >&2
                done
                if [ "$FAIR" = 1 ]; then
                    size=$(python3 -c "import sys; print(min(4 << 30, int(2e9 / 8 * $SECS)) >> 20 << 20)")
                    src=$(source_file "$size")
                    n=$((n + 1))
                    fields=$(run_fair "$transport" "$src" "f$n")
                    echo "$mtu,$rtt,$loss,$transport,$fields,$TCPCC" >>"$FAIRCSV"
                    echo "mtu $mtu rtt $rtt loss $loss $transport + iperf3: $fields" >&2
                fi
            done
        done
    done
done

# The rows first, so a failure below loses no measurement.
[ -z "$OUT" ] || { mkdir -p "$OUT" && cp "$CSV" "$FAIRCSV" "$OUT/"; }
TABLE=$WORK/table.txt
python3 - "$CSV" "$FAIRCSV" "$RATE" "$UDPMODE" >"$TABLE" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
fair = list(csv.DictReader(open(sys.argv[2])))
rate, mode = sys.argv[3], sys.argv[4]
num = lambda v: float(v) if v not in ("", None) else None
ccs = ",".join(sorted({r.get("tcp_cc") or "?" for r in rows}))
print(f"zcp over the testbed's delay line, tbf {rate}, TCP congestion control {ccs}, udp mode {mode}; "
      "Gbit/s, CPU s/GiB (sender / receiver), packets dropped by the loss rule")
print(f"{'mtu':>5} {'rtt':>4} {'loss%':>5} {'transport':<9} {'P':>2} {'status':<8} {'Gbit/s':>7} "
      f"{'cpu snd':>8} {'cpu rcv':>8} {'dropped':>8} {'tcp rtx':>8} {'udp resent/lost':>16}")
for r in rows:
    g = num(r["gbps"])
    rs, lb = num(r["udp_resent_bytes"]), num(r["loss_dropped_bytes"])
    ratio = f"{rs / lb:.2f}x" if rs is not None and lb else "-"
    print(f"{r['mtu']:>5} {r['rtt_ms']:>4} {r['loss_pct']:>5} {r['transport']:<9} {r['streams']:>2} "
          f"{r['status']:<8} {g if g is not None else float('nan'):>7.4g} "
          f"{r['cpu_send_s_per_gib'] or '-':>8} {r['cpu_recv_s_per_gib'] or '-':>8} "
          f"{r['loss_dropped_packets']:>8} {r['tcp_retransmits'] or '-':>8} {ratio:>16}"
          + (f"  {r['note']}" if r["status"] == "failed" else ""))
if fair:
    print("\nfairness: one zcp flow and one iperf3 TCP flow through the bottleneck (Gbit/s, Jain's index)")
    for f in fair:
        print(f"{f['mtu']:>5} {f['rtt_ms']:>4} {f['loss_pct']:>5} {f['transport']:<9} "
              f"zcp {f['zcp_gbps'] or '-':>7} iperf3 {f['iperf3_gbps'] or '-':>7} Jain {f['jain'] or '-':>6} {f['note']}")
def cell(mtu, rtt, loss, t, p="1"):
    for r in rows:
        if (r["mtu"], r["rtt_ms"], r["transport"], r["streams"]) == (mtu, rtt, t, p) \
                and float(r["loss_pct"]) == loss and r["status"] in ("ok", "timeout"):
            return r
    return None
verdict = lambda ok: "met" if ok else "NOT met"
print("\ngoals (issue 14), per MTU and RTT where both transports have a cell:")
keys = sorted({(r["mtu"], r["rtt_ms"]) for r in rows}, key=lambda k: (int(k[0]), float(k[1])))
for mtu, rtt in keys:
    u, t = cell(mtu, rtt, 1.0, "udp"), cell(mtu, rtt, 1.0, "tcp")
    if float(rtt) >= 10:
        if u and t and not num(t["gbps"]):
            print(f"  mtu {mtu} rtt {rtt}: 1% loss, TCP moved nothing, UDP {num(u['gbps']):.3g} Gbit/s "
                  f"(goal >= 3x): {verdict(bool(num(u['gbps'])))}")
        elif u and t:
            x = num(u["gbps"]) / num(t["gbps"])
            print(f"  mtu {mtu} rtt {rtt}: 1% loss, UDP/TCP throughput {x:.2f}x (goal >= 3x): {verdict(x >= 3)}")
        else:
            print(f"  mtu {mtu} rtt {rtt}: 1% loss, UDP >= 3x TCP: n/a (no udp or tcp cell)")
    u, t = cell(mtu, rtt, 0.0, "udp"), cell(mtu, rtt, 0.0, "tcp")
    if u and t and num(t["gbps"]):
        x = num(u["gbps"]) / num(t["gbps"])
        print(f"  mtu {mtu} rtt {rtt}: 0% loss, UDP/TCP throughput {x:.2f}x (goal >= 0.8x): {verdict(x >= 0.8)}")
        cu = (num(u["cpu_send_s_per_gib"]) or 0) + (num(u["cpu_recv_s_per_gib"]) or 0)
        ct = (num(t["cpu_send_s_per_gib"]) or 0) + (num(t["cpu_recv_s_per_gib"]) or 0)
        if cu and ct:
            print(f"  mtu {mtu} rtt {rtt}: 0% loss, UDP/TCP CPU per GiB {cu / ct:.2f}x (goal <= 2x): {verdict(cu / ct <= 2)}")
    else:
        print(f"  mtu {mtu} rtt {rtt}: 0% loss, UDP vs TCP: n/a (no udp or tcp cell)")
for r in rows:
    rs, lb = num(r["udp_resent_bytes"]), num(r["loss_dropped_bytes"])
    if r["transport"] == "udp" and rs is not None and lb:
        print(f"  mtu {r['mtu']} rtt {r['rtt_ms']} loss {r['loss_pct']} P {r['streams']}: re-sent/lost "
              f"{rs / lb:.2f}x (goal <= 1.1x): {verdict(rs / lb <= 1.1)}")
for f in fair:
    if f["transport"] == "udp" and f["jain"]:
        print(f"  mtu {f['mtu']} rtt {f['rtt_ms']} loss {f['loss_pct']}: udp {mode} with iperf3, Jain "
              f"{f['jain']} (goal >= 0.8): {verdict(float(f['jain']) >= 0.8)}")
if not any(r["transport"] == "udp" and r["status"] != "failed" for r in rows):
    print("  (no udp cell succeeded: the goals comparing UDP with TCP cannot be judged)")
PY
cat "$TABLE"
if [ -n "$OUT" ]; then
    cp "$TABLE" "$OUT/"
    "$ZCP" bench-chart udp "$OUT/udp.csv" "$OUT/udp.svg" && echo "chart: $OUT/udp.svg"
fi
