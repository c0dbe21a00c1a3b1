#!/usr/bin/env bash
# Where each cycle goes: one zcp transfer per configuration under `perf record -a`, CPU time
# per thread and, within each thread, per kind of work.
#
#   benches/cpu-profile.sh [-s SIZE] [-d DEST] [-n REPS] [-o OUTDIR] [-c "auto splice rw mem null"]
#
# A page-cached SIZE (default 2G) source under /var/tmp is sent over loopback to a zcp server
# whose root is DEST (default: a tmpfs mounted for the run when root, else /dev/shm), once per
# configuration (a receiver engine, or `none` for --verify none when the binary has it), REPS
# times interleaved. perf samples every CPU at 999 Hz without call graphs; each sample of a
# zcp thread (or of ksoftirqd, which runs the loopback's network work) counts 1/999 s. The
# table gives, per configuration, CPU seconds per GiB of each thread and of each kind of work:
#   hash      BLAKE3 (chunk MACs on the sender; verification on the receiver)
#   copy      memcpy and the kernel's user copies (recv into a buffer, write into a file)
#   pagecache page-cache and tmpfs folio allocation, lookup, LRU and memcg accounting
#   mapping   page faults, mapping and unmapping (hashing through mmap)
#   network   TCP, IP, skb and softirq work
#   splice    pipe and splice bookkeeping
#   sched     wake-ups, futexes, context switches, syscall entry
#   other     the rest
# Needs: perf (apt-get install linux-perf), python3; builds zcp in release mode.
set -euo pipefail

SIZE=2G
DEST=""
REPS=1
OUT=""
CONFIGS="auto splice rw mem null"
while getopts "s:d:n:o:c:h" opt; do
    case $opt in
        s) SIZE=$OPTARG ;;
        d) DEST=$OPTARG ;;
        n) REPS=$OPTARG ;;
        o) OUT=$OPTARG ;;
        c) CONFIGS=$OPTARG ;;
        *) sed -n '2,21p' "$0"; exit 2 ;;
    esac
done
for tool in perf python3; do
    command -v "$tool" >/dev/null || { echo "cpu-profile.sh: $tool is required (apt-get install linux-perf python3)" >&2; exit 2; }
done

cd "$(dirname "$0")/.."
cargo build --release --quiet
ZCP=$PWD/target/release/zcp

WORK=$(mktemp -d /var/tmp/zcp-profile.XXXXXX)
MOUNTED=""
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    # The server must be gone before its root can be unmounted.
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ -n "$MOUNTED" ] && ! umount "$MOUNTED"; then
        echo "cpu-profile.sh: could not unmount $MOUNTED; left in place" >&2
        return
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
if [ -z "$DEST" ]; then
    if [ "$(id -u)" = 0 ]; then
        mkdir "$WORK/dest"
        mount -t tmpfs -o size=$(( $(numfmt --from=iec "$SIZE") * 2 + (256 << 20) )) zcp-profile "$WORK/dest"
        MOUNTED=$WORK/dest
        DEST=$WORK/dest
    else
        DEST=$(mktemp -d /dev/shm/zcp-profile.XXXXXX)
    fi
fi
echo "== $SIZE source in $WORK, destination $DEST ($(findmnt -no FSTYPE -T "$DEST")), $REPS repetition(s)"
head -c "$(numfmt --from=iec "$SIZE")" /dev/urandom >"$WORK/src.bin"
"$ZCP" keygen -o "$WORK/key" 2>/dev/null
"$ZCP" serve --root "$DEST" --bind 127.0.0.1 -p 0 --key-file "$WORK/key" >"$WORK/serve.out" 2>"$WORK/serve.log" &
pids+=($!)
for _ in $(seq 50); do grep -q listening "$WORK/serve.out" 2>/dev/null && break; sleep 0.1; done
PORT=$(sed -n 's/.*listening on [^:]*:\([0-9]*\),.*/\1/p' "$WORK/serve.out")
[ -n "$PORT" ] || { echo "cpu-profile.sh: zcp serve did not start" >&2; exit 1; }
HAS_VERIFY=""
"$ZCP" send --help | grep -q -- '--verify' && HAS_VERIFY=1

args_of() {
    case $1 in
        none) [ -n "$HAS_VERIFY" ] && echo --verify none ;;
        *) echo --recv-engine "$1" ;;
    esac
}
RAW=$WORK/samples.txt
: >"$RAW"
for rep in $(seq "$REPS"); do
    for cfg in $CONFIGS; do
        if [ "$cfg" = none ] && [ -z "$HAS_VERIFY" ]; then continue; fi
        cat "$WORK/src.bin" >/dev/null
        # shellcheck disable=SC2046
        perf record -q -F 999 -a -o "$WORK/perf.data" -- \
            "$ZCP" send -p "$PORT" --key-file "$WORK/key" -J -i 0 $(args_of "$cfg") \
            "$WORK/src.bin" 127.0.0.1::out.bin >"$WORK/run.json" 2>/dev/null
        gbps=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum"]["bits_per_second"]/1e9)' "$WORK/run.json")
        engine=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["start"]["engines"]["receiver"])' "$WORK/run.json")
        perf script -i "$WORK/perf.data" -F comm,ip,sym 2>/dev/null |
            awk -v cfg="$cfg" -v rep="$rep" -v gbps="$gbps" -v eng="$engine" \
                'NF >= 2 {c=$1; $1=""; $2=""; sub(/^ +/, ""); print cfg "\t" rep "\t" gbps "\t" eng "\t" c "\t" $0}' >>"$RAW"
        rm -f "$DEST/out.bin"
    done
    echo "   repetition $rep of $REPS done"
done

python3 - "$RAW" "$SIZE" <<'PY' | tee "$WORK/table.txt"
import collections, re, subprocess, sys
raw, size = sys.argv[1:3]
gib = int(subprocess.check_output(["numfmt", "--from=iec", size]).decode()) / (1 << 30)
HZ = 999.0
KINDS = [
    ("hash", r"blake3"),
    ("copy", r"memcpy|memmove|copy_user|copy_to_user|copy_from_user|copy_page|_copy_to_iter|_copy_from_iter|copy_folio"),
    ("mapping", r"fault|munmap|unmap|zap_|pte|tlb|rmap|mmap|vma|filemap_map_pages|next_uptodate"),
    ("pagecache", r"shmem|folio|filemap|lru|memcg|page_cache|alloc_pages|get_page_from_freelist|xas_|clear_page|free_unref|__free_pages|rmqueue|lruvec|charge"),
    ("network", r"tcp|skb|ip_|__ip|inet|sock|net_|napi|softirq|loopback|__dev_|dev_hard|sk_|validate_xmit|nf_|process_backlog"),
    ("splice", r"splice|pipe"),
    ("sched", r"schedule|futex|switch|wake|entry_SYSCALL|syscall|pick_next|update_curr|enqueue|dequeue|irqrestore|unlock_irq|idle|halt"),
]
kinds = [k for k, _ in KINDS] + ["other"]
pat = [(k, re.compile(p, re.I)) for k, p in KINDS]
def kind(sym):
    for k, p in pat:
        if p.search(sym):
            return k
    return "other"
def thread(comm):
    # Threads named per stream or per peer are folded into one row each.
    comm = re.sub(r"\d+$", "N", comm)
    return re.sub(r"^zcp-conn-.*", "zcp-conn-PEER (receiver's stream)", comm)
per = collections.defaultdict(lambda: collections.Counter())
rates = collections.defaultdict(dict)
engines = {}
for line in open(raw):
    cfg, rep, gbps, eng, comm, sym = line.rstrip("\n").split("\t")
    if not (comm.startswith("zcp") or comm.startswith("ksoftirqd")):
        continue
    rates[cfg][rep] = float(gbps)
    engines[cfg] = eng
    per[cfg][(thread(comm), kind(sym))] += 1
for cfg in per:
    reps = len(rates[cfg])
    c = per[cfg]
    total = sum(c.values()) / HZ / reps / gib
    mean = sum(rates[cfg].values()) / reps
    print(f"\n== {cfg} (receiver {engines[cfg]}): {mean:.2f} Gbit/s mean of {reps}; "
          f"{total:.3f} CPU s/GiB in zcp's threads and ksoftirqd")
    threads = sorted({t for t, _ in c}, key=lambda t: -sum(v for (tt, _), v in c.items() if tt == t))
    print(f"   {'thread':<38}{'s/GiB':>7}  " + " ".join(f"{k:>9}" for k in kinds))
    for t in threads:
        row = [c[(t, k)] / HZ / reps / gib for k in kinds]
        if sum(row) < 0.005:
            continue
        print(f"   {t:<38}{sum(row):>7.3f}  " + " ".join(f"{x:>9.3f}" for x in row))
    tot = [sum(c[(t, k)] for t in threads) / HZ / reps / gib for k in kinds]
    print(f"   {'all':<38}{sum(tot):>7.3f}  " + " ".join(f"{x:>9.3f}" for x in tot))
PY
if [ -n "$OUT" ]; then
    mkdir -p "$OUT"
    cp "$WORK/table.txt" "$OUT/"
    { echo "commit: $(git rev-parse --short HEAD)"; echo "kernel: $(uname -r)"; echo "load: $(cut -d' ' -f1-3 /proc/loadavg)";
      echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) x $(nproc)"; } >"$OUT/setup.txt"
    echo "== wrote $OUT"
fi
