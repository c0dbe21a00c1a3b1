#!/usr/bin/env bash
# zcp loopback benchmark: zcp measured against its peers and limits in the same run.
#
#   benches/transfer.sh [-n REPS] [-s SIZE] [-d DIR] [-o OUTDIR]
#
# Every repetition runs, in this order (interleaved, so drift hits all alike):
#   iperf3 -Z -n SIZE                       the network-only peer
#   zcp --recv-engine null                  memory to memory (network-only ceiling)
#   zcp --recv-engine mem                   verified, into memory (the CPU ceiling of verification)
#   fio O_DIRECT sequential write of SIZE   the destination disk's own rate
#   zcp default engines (sendfile -> auto)  disk to disk, durable and verified
#   zcp --engine rw --recv-engine rw        the conventional path, durable and verified
#   zcp --engine rw (default receiver)      for the sender-only comparison
# The source is read into the page cache before each zcp run. Medians are reported, with
# ratios against the goals of issue 2. DIR must be on the disk to measure (not tmpfs).
# Needs: iperf3, fio, python3; builds zcp in release mode.
set -euo pipefail

REPS=5
SIZE=4G
DIR=/var/tmp/zcp-bench
OUT=""
while getopts "n:s:d:o:h" opt; do
    case $opt in
        n) REPS=$OPTARG ;;
        s) SIZE=$OPTARG ;;
        d) DIR=$OPTARG ;;
        o) OUT=$OPTARG ;;
        *) sed -n '2,16p' "$0"; exit 2 ;;
    esac
done

for tool in iperf3 fio python3; do
    command -v "$tool" >/dev/null || { echo "transfer.sh: $tool is required (apt-get install $tool)" >&2; exit 2; }
done

cd "$(dirname "$0")/.."
cargo build --release --quiet
ZCP=$PWD/target/release/zcp

mkdir -p "$DIR"
WORK=$(mktemp -d "$DIR/run.XXXXXX")
RAW=$WORK/raw.jsonl
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

fstype=$(findmnt -no FSTYPE -T "$WORK" 2>/dev/null || stat -f -c %T "$WORK")
if [ "$fstype" = tmpfs ] || [ "$fstype" = ramfs ]; then
    echo "transfer.sh: $DIR is on $fstype; put -d on the disk you want to measure" >&2
    exit 2
fi

echo "== setup: $SIZE source in $WORK ($fstype), $REPS repetitions"
# fio writes incompressible data quickly (/dev/urandom is slow).
fio --name=gen --filename="$WORK/src.bin" --rw=write --bs=4M --size="$SIZE" --ioengine=psync \
    --refill_buffers --buffer_compress_percentage=0 --end_fsync=1 --output=/dev/null
mkdir "$WORK/root"
"$ZCP" keygen -o "$WORK/key" 2>/dev/null

"$ZCP" serve --root "$WORK/root" --bind 127.0.0.1 -p 0 --key-file "$WORK/key" >"$WORK/serve.out" 2>"$WORK/serve.log" &
pids+=($!)
for _ in $(seq 50); do grep -q listening "$WORK/serve.out" 2>/dev/null && break; sleep 0.1; done
PORT=$(sed -n 's/.*listening on [^:]*:\([0-9]*\),.*/\1/p' "$WORK/serve.out")
[ -n "$PORT" ] || { echo "transfer.sh: zcp serve did not start" >&2; cat "$WORK/serve.log" >&2; exit 1; }

IPORT=$((PORT + 1))
iperf3 -s -p "$IPORT" >/dev/null 2>&1 &
pids+=($!)
sleep 0.3

warm() { cat "$WORK/src.bin" >/dev/null; }
record() { # kind rep json
    python3 -c 'import json,sys; print(json.dumps({"kind": sys.argv[1], "rep": int(sys.argv[2]), "data": json.loads(sys.stdin.read())}))' "$1" "$2" >>"$RAW"
}
zcp_run() { # kind rep args...
    local kind=$1 rep=$2
    shift 2
    warm
    sync
    "$ZCP" send -p "$PORT" --key-file "$WORK/key" -J -i 0 "$@" "$WORK/src.bin" 127.0.0.1:out.bin | record "$kind" "$rep"
    rm -f "$WORK/root/out.bin"
    sync
}

for rep in $(seq "$REPS"); do
    echo "== repetition $rep/$REPS"
    warm
    iperf3 -c 127.0.0.1 -p "$IPORT" -Z -n "$SIZE" -J | record iperf3 "$rep"
    zcp_run null "$rep" --recv-engine null
    zcp_run mem "$rep" --recv-engine mem
    fio --name=disk --filename="$WORK/fio.tmp" --rw=write --bs=4M --size="$SIZE" --direct=1 \
        --ioengine=libaio --iodepth=4 --end_fsync=1 --output-format=json | record fio "$rep"
    rm -f "$WORK/fio.tmp"
    sync
    zcp_run default "$rep"
    zcp_run rw_rw "$rep" --engine rw --recv-engine rw
    zcp_run rw_sender "$rep" --engine rw
done

SUMMARY=$(python3 - "$RAW" "$SIZE" "$REPS" "$fstype" <<'PY'
import json, statistics, sys
raw, size, reps, fstype = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
runs = {}
for line in open(raw):
    r = json.loads(line)
    runs.setdefault(r["kind"], []).append(r["data"])

def med(xs):
    return statistics.median(xs)

def gbps(kind):
    if kind == "iperf3":
        return [d["end"]["sum_received"]["bits_per_second"] / 1e9 for d in runs[kind]]
    if kind == "fio":
        return [d["jobs"][0]["write"]["bw_bytes"] * 8 / 1e9 for d in runs[kind]]
    return [d["end"]["sum"]["bits_per_second"] / 1e9 for d in runs[kind]]

def cpu_gib(kind, side=None, key="total"):
    out = []
    for d in runs[kind]:
        e = d["end"]
        gib = e["sum"]["bytes"] / 2**30
        if side is None:
            out.append((e["cpu"]["sender"]["total"] + e["cpu"]["receiver"]["total"]) / gib)
        elif key == "data_path":
            out.append(e["cpu"]["sender"]["data_path"]["total"] / gib)
        else:
            out.append(e["cpu"][side][key] / gib)
    return out

def rng(xs):
    return f"{med(xs):7.2f}  ({min(xs):.2f}..{max(xs):.2f})"

engines = {k: (runs[k][0]["end"]["engines"]["sender"], runs[k][0]["end"]["engines"]["receiver"]) for k in runs if k not in ("iperf3", "fio")}
lines = []
p = lines.append
W = 46
def row(label, value):
    p(f"  {label:<{W}}{value}")
d_eng = " -> ".join(engines["default"])
p(f"zcp loopback benchmark: {size} page-cached source, destination {fstype}, {reps} interleaved repetitions")
p(f"medians (min..max)")
p("")
p("throughput, Gbit/s")
row(f"iperf3 -Z -n {size}", rng(gbps("iperf3")))
row("zcp memory to memory (sendfile -> null)", rng(gbps("null")))
row("zcp verified into memory (sendfile -> mem)", rng(gbps("mem")))
row("disk O_DIRECT write (fio libaio, qd 4, 4 MiB)", rng(gbps("fio")))
row(f"zcp disk to disk, durable ({d_eng})", rng(gbps("default")))
row("zcp disk to disk, durable (rw -> rw)", rng(gbps("rw_rw")))
p("")
p("CPU seconds per GiB stored (user + sys, both sides)")
row(f"default ({d_eng})", rng(cpu_gib("default")))
row("  sender / receiver", f"{med(cpu_gib('default', 'sender')):7.2f} / {med(cpu_gib('default', 'receiver')):.2f}")
row("rw -> rw", rng(cpu_gib("rw_rw")))
row("  sender / receiver", f"{med(cpu_gib('rw_rw', 'sender')):7.2f} / {med(cpu_gib('rw_rw', 'receiver')):.2f}")
p("")
p("sender CPU seconds per GiB")
row("data path only: sendfile", rng(cpu_gib("default", "sender", "data_path")))
row("data path only: rw", rng(cpu_gib("rw_sender", "sender", "data_path")))
row("with hashing: sendfile / rw", f"{med(cpu_gib('default', 'sender')):7.2f} / {med(cpu_gib('rw_sender', 'sender')):.2f}")
p("")
mem, ip, disk, dur = med(gbps("null")), med(gbps("iperf3")), med(gbps("fio")), med(gbps("default"))
vmem = med(gbps("mem"))
cpu_ratio = med(cpu_gib("default")) / med(cpu_gib("rw_rw"))
send_ratio = med(cpu_gib("default", "sender", "data_path")) / med(cpu_gib("rw_sender", "sender", "data_path"))
def verdict(ok):
    return "met" if ok else "NOT met"
floor = min(disk, mem)
p("ratios")
row("memory to memory / iperf3 -Z", f"{mem / ip:7.2f}   goal >= 1.00  {verdict(mem / ip >= 1.0)}")
row("durable / min(disk O_DIRECT, memory to memory)", f"{dur / floor:7.2f}   goal >= 0.85  {verdict(dur / floor >= 0.85)}")
row("CPU per GiB, default / rw -> rw", f"{cpu_ratio:7.2f}   goal <= 0.50  {verdict(cpu_ratio <= 0.5)}")
row("sender data path, sendfile / rw", f"{send_ratio:7.2f}")
row("durable / verified into memory", f"{dur / vmem:7.2f}   (how close storage comes to the verification ceiling)")
print("\n".join(lines))
PY
)
echo
echo "$SUMMARY"

if [ -n "$OUT" ]; then
    mkdir -p "$OUT"
    cp "$RAW" "$OUT/raw.jsonl"
    echo "$SUMMARY" >"$OUT/summary.txt"
    {
        echo "kernel: $(uname -r)"
        echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
        echo "memory: $(free -g | awk '/Mem:/ {print $2}') GiB"
        echo "destination: $fstype on $(df --output=source "$WORK" | tail -1)"
        echo "zcp: $("$ZCP" --version)"
        echo "iperf3: $(iperf3 --version | head -1)"
        echo "fio: $(fio --version)"
        echo "command: benches/transfer.sh -n $REPS -s $SIZE -d $DIR"
    } >"$OUT/setup.txt"
    echo "results written to $OUT"
fi
