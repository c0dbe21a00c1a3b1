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
#   zcp -P 2, zcp -P 4 (defaults)           parallel streams on one file (-P 1 is the default run)
#   a tree of FILES files of 4-64 KiB:      zcp -r -P 2, an rsync daemon, tar | socat | tar
#   resume: zcp killed (SIGKILL) once half the file is sent, then run again; every byte on
#                                           loopback counted (lo tx_bytes)
# The source is read into the page cache before each zcp run. Medians are reported, with
# ratios against the goals of issues 2 and 3. DIR must be on the disk to measure (not tmpfs).
# -p picks the parts: core (the first seven), streams, tree, resume; default all.
# Needs: iperf3, fio, rsync, socat, python3; builds zcp in release mode.
set -euo pipefail

REPS=5
SIZE=4G
DIR=/var/tmp/zcp-bench
OUT=""
PARTS=core,streams,tree,resume
FILES=10000
while getopts "n:s:d:o:p:f:h" opt; do
    case $opt in
        n) REPS=$OPTARG ;;
        s) SIZE=$OPTARG ;;
        d) DIR=$OPTARG ;;
        o) OUT=$OPTARG ;;
        p) PARTS=$OPTARG ;;
        f) FILES=$OPTARG ;;
        *) sed -n '2,22p' "$0"; exit 2 ;;
    esac
done
part() { [[ ",$PARTS," == *",$1,"* ]]; }

for tool in iperf3 fio rsync socat python3; do
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
    "$ZCP" send -p "$PORT" --key-file "$WORK/key" -J -i 0 "$@" "$WORK/src.bin" 127.0.0.1::out.bin | record "$kind" "$rep"
    rm -f "$WORK/root/out.bin"
    sync
}

now() { date +%s.%N; }
lo_bytes() { cat /sys/class/net/lo/statistics/tx_bytes; }

if part tree; then
    echo "== setup: a tree of $FILES files of 4-64 KiB"
    python3 - "$WORK/tree" "$FILES" <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
for i in range(n):
    d = os.path.join(root, f"d{i // 100:03}")
    if i % 100 == 0:
        os.makedirs(d)
    with open(os.path.join(d, f"f{i:06}"), "wb") as f:
        f.write(os.urandom(rng.randrange(4096, 65537)))
PY
    mkdir "$WORK/rsync" "$WORK/tar"
    RPORT=$((PORT + 2))
    cat >"$WORK/rsyncd.conf" <<EOF
use chroot = no
[bench]
    path = $WORK/rsync
    read only = false
    uid = $(id -u)
    gid = $(id -g)
EOF
    rsync --daemon --no-detach --config="$WORK/rsyncd.conf" --port="$RPORT" --address=127.0.0.1 \
        --log-file=/dev/null &
    pids+=($!)
    TPORT=$((PORT + 3))
    sleep 0.3
fi

tree_runs() { # rep: the same tree three ways, each into a fresh directory (no deletions between)
    local rep=$1 t0 t1
    cat $(find "$WORK/tree" -type f) >/dev/null
    sync
    t0=$(now)
    "$ZCP" send -p "$PORT" --key-file "$WORK/key" -J -i 0 -r -P 2 "$WORK/tree" "127.0.0.1::tree-$rep" >"$WORK/tree.json"
    t1=$(now)
    record tree_zcp "$rep" <<<"{\"wall\": $(awk "BEGIN {print $t1 - $t0}"), \"zcp\": $(cat "$WORK/tree.json")}"
    sync
    t0=$(now)
    rsync -a "$WORK/tree/" "rsync://127.0.0.1:$RPORT/bench/tree-$rep/"
    t1=$(now)
    record tree_rsync "$rep" <<<"{\"wall\": $(awk "BEGIN {print $t1 - $t0}")}"
    sync
    mkdir "$WORK/tar/tree-$rep"
    socat -u "TCP-LISTEN:$TPORT,bind=127.0.0.1,reuseaddr" - | tar -x -C "$WORK/tar/tree-$rep" &
    local rx=$!
    sleep 0.2
    t0=$(now)
    tar -c -C "$WORK/tree" . | socat -u - "TCP:127.0.0.1:$TPORT"
    wait "$rx"
    t1=$(now)
    record tree_tar "$rep" <<<"{\"wall\": $(awk "BEGIN {print $t1 - $t0}")}"
    sync
}

resume_run() { # rep: kill the sender once half the file is reported sent, then run again
    local rep=$1 half lo0 lo1 killed_at
    half=$(( $(stat -c %s "$WORK/src.bin") / 2 ))
    warm
    sync
    lo0=$(lo_bytes)
    killed_at=$(python3 - "$ZCP" "$PORT" "$WORK/key" "$WORK/src.bin" "$half" <<'PY'
import json, subprocess, sys
zcp, port, key, src, half = sys.argv[1:6]
p = subprocess.Popen([zcp, "send", "-p", port, "--key-file", key, "--json-stream", "-i", "0.05",
                      src, "127.0.0.1::resume.bin"], stdout=subprocess.PIPE)
sent = 0
for line in p.stdout:
    d = json.loads(line)
    if d["type"] == "interval":
        sent += d["data"]["sum"]["bytes"]
        if sent >= int(half):
            p.kill()
            break
p.wait()
print(sent)
PY
)
    warm
    "$ZCP" send -p "$PORT" --key-file "$WORK/key" -J -i 0 "$WORK/src.bin" 127.0.0.1::resume.bin >"$WORK/resume.json"
    lo1=$(lo_bytes)
    cmp -s "$WORK/src.bin" "$WORK/root/resume.bin" || { echo "transfer.sh: resumed file differs" >&2; exit 1; }
    record resume "$rep" <<<"{\"killed_at\": $killed_at, \"lo_bytes\": $((lo1 - lo0)), \"size\": $((half * 2)), \"second\": $(cat "$WORK/resume.json")}"
    rm -f "$WORK/root/resume.bin"
    sync
}

for rep in $(seq "$REPS"); do
    echo "== repetition $rep/$REPS"
    if part core; then
        warm
        iperf3 -c 127.0.0.1 -p "$IPORT" -Z -n "$SIZE" -J | record iperf3 "$rep"
        zcp_run null "$rep" --recv-engine null
        zcp_run mem "$rep" --recv-engine mem
        fio --name=disk --filename="$WORK/fio.tmp" --rw=write --bs=4M --size="$SIZE" --direct=1 \
            --ioengine=libaio --iodepth=4 --end_fsync=1 --output-format=json | record fio "$rep"
        rm -f "$WORK/fio.tmp"
        sync
    fi
    if part core || part streams; then
        zcp_run default "$rep"
    fi
    if part core; then
        zcp_run rw_rw "$rep" --engine rw --recv-engine rw
        zcp_run rw_sender "$rep" --engine rw
    fi
    if part streams; then
        zcp_run p2 "$rep" -P 2
        zcp_run p4 "$rep" -P 4
    fi
    if part tree; then
        tree_runs "$rep"
    fi
    if part resume; then
        resume_run "$rep"
    fi
done

SUMMARY=$(python3 - "$RAW" "$SIZE" "$REPS" "$fstype" "$FILES" <<'PY'
import json, statistics, sys
raw, size, reps, fstype, nfiles = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
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

def rng(xs, fmt="7.2f"):
    return f"{med(xs):{fmt}}  ({min(xs):.2f}..{max(xs):.2f})"

def verdict(ok):
    return "met" if ok else "NOT met"

def engines(kind):
    e = runs[kind][0]["end"]["engines"]
    return f'{e["sender"]} -> {e["receiver"]}'

lines = []
p = lines.append
W = 46
def row(label, value):
    p(f"  {label:<{W}}{value}")
p(f"zcp loopback benchmark: {size} page-cached source, destination {fstype}, {reps} interleaved repetitions")
p("medians (min..max)")

if "iperf3" in runs:
    d_eng = engines("default")
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
    floor = min(disk, mem)
    p("ratios (issue 2)")
    row("memory to memory / iperf3 -Z", f"{mem / ip:7.2f}   goal >= 1.00  {verdict(mem / ip >= 1.0)}")
    row("durable / min(disk O_DIRECT, memory to memory)", f"{dur / floor:7.2f}   goal >= 0.85  {verdict(dur / floor >= 0.85)}")
    row("CPU per GiB, default / rw -> rw", f"{cpu_ratio:7.2f}   goal <= 0.50  {verdict(cpu_ratio <= 0.5)}")
    row("sender data path, sendfile / rw", f"{send_ratio:7.2f}")
    row("durable / verified into memory", f"{dur / vmem:7.2f}   (how close storage comes to the verification ceiling)")

if "p2" in runs:
    p("")
    p(f"parallel streams, one {size} file, durable ({engines('default')}), Gbit/s")
    g = {n: gbps(k) for n, k in ((1, "default"), (2, "p2"), (4, "p4"))}
    for n, xs in g.items():
        row(f"-P {n}", rng(xs) + f"   CPU/GiB {med(cpu_gib({1: 'default', 2: 'p2', 4: 'p4'}[n])):.2f}")
    m = {n: med(xs) for n, xs in g.items()}
    p("ratios (issue 3)")
    row("-P 2 / -P 1", f"{m[2] / m[1]:7.2f}   goal: does not fall (>= 0.95)  {verdict(m[2] / m[1] >= 0.95)}")
    row("-P 4 / -P 2", f"{m[4] / m[2]:7.2f}   goal: does not fall (>= 0.95)  {verdict(m[4] / m[2] >= 0.95)}")

if "tree_zcp" in runs:
    def fps(kind):
        return [nfiles / d["wall"] for d in runs[kind]]
    z, r, t = fps("tree_zcp"), fps("tree_rsync"), fps("tree_tar")
    p("")
    p(f"a tree of {nfiles} files of 4-64 KiB, files per second (wall time, process start to exit)")
    row("zcp send -r -P 2 (durable, verified)", rng(z, "7.0f"))
    row("rsync -a to an rsync daemon (not synced)", rng(r, "7.0f"))
    row("tar | socat | tar (not synced)", rng(t, "7.0f"))
    cpu = [d["zcp"]["end"]["cpu"]["sender"]["total"] + d["zcp"]["end"]["cpu"]["receiver"]["total"] for d in runs["tree_zcp"]]
    row("zcp CPU seconds, both sides", rng(cpu))
    p("ratios (issue 3)")
    row("zcp / rsync daemon", f"{med(z) / med(r):7.2f}   goal >= 2.00  {verdict(med(z) / med(r) >= 2.0)}")
    row("zcp / tar | socat | tar", f"{med(z) / med(t):7.2f}")

if "resume" in runs:
    p("")
    p(f"resume: the sender killed (SIGKILL) once half of {size} was reported sent, then run again")
    ratio = [d["lo_bytes"] / d["size"] for d in runs["resume"]]
    skipped = [d["second"]["end"]["resume"]["bytes_skipped"] / d["size"] for d in runs["resume"]]
    killed = [d["killed_at"] / d["size"] for d in runs["resume"]]
    row("killed at (fraction of the file reported sent)", rng(killed))
    row("second run: fraction skipped as already held", rng(skipped))
    row("all loopback bytes, both runs / file size", rng(ratio, "7.3f"))
    p("ratios (issue 3)")
    row("bytes on the wire / file size", f"{med(ratio):7.3f}   goal <= 1.05  {verdict(med(ratio) <= 1.05)}")
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
        echo "command: benches/transfer.sh -n $REPS -s $SIZE -d $DIR -p $PARTS -f $FILES"
        echo "rsync: $(rsync --version | head -1)"
        echo "socat: $(socat -V 2>/dev/null | grep -m1 "socat version")"
    } >"$OUT/setup.txt"
    echo "results written to $OUT"
fi
