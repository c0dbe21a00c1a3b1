#!/usr/bin/env bash
# Bare byte streams over loopback: zcp send --raw and zcp recv against nc (OpenBSD netcat) and
# the documents' Java demos (tests/fixtures/java/), one file each way.
#
#   benches/raw.sh [-n REPS] [-s SIZE] [-d DIR] [-b ZCP] [-o OUTDIR]
#
# The source (SIZE, default 2G, random) lives in /dev/shm, so every sender reads the page
# cache; receivers write into DIR (default /dev/shm: no disk in the figure; give a disk
# directory to include it, where zcp recv also fsyncs and the others do not). Per pair of
# sender and receiver, REPS runs (default 3), interleaved: the wall time from starting the
# sender to the receiver's exit (process start included: about 0.3-0.5 s for a JVM), as a
# rate, median/min/max; and where zcp receives, the rate its JSON reports (end.sum: from the
# accepted connection to the rename). Every run's file is compared with the source (cmp).
# Needs python3, nc.openbsd (netcat-openbsd), javac and java (openjdk-17-jdk-headless).
set -euo pipefail

REPS=3
SIZE=2G
DIR=/dev/shm
ZCP=target/release/zcp
OUT=""
while getopts "n:s:d:b:o:h" opt; do
    case $opt in
        n) REPS=$OPTARG ;;
        s) SIZE=$OPTARG ;;
        d) DIR=$OPTARG ;;
        b) ZCP=$OPTARG ;;
        o) OUT=$OPTARG ;;
        *) sed -n '2,14p' "$0"; exit 2 ;;
    esac
done
NC=nc.openbsd
command -v "$NC" >/dev/null || NC=nc
for t in python3 "$NC" javac java cmp; do
    command -v "$t" >/dev/null || { echo "raw.sh: needs $t" >&2; exit 2; }
done
ZCP=$(realpath "$ZCP")
REPO=$(cd "$(dirname "$0")/.." && pwd)

WORK=$(mktemp -d /dev/shm/zcp-raw-bench.XXXXXX)
DEST=$(mktemp -d "$DIR/zcp-raw-dest.XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK" "$DEST"
}
trap cleanup EXIT

javac -d "$WORK/classes" "$REPO"/tests/fixtures/java/*.java
JAVA=(java -XX:TieredStopAtLevel=1 -Xmx64m -cp "$WORK/classes")
bytes=$(python3 -c "import sys; s='$SIZE'; u={'K':10,'M':20,'G':30}.get(s[-1].upper(),0); print(int(s[:-1] if u else s) << u)")
head -c "$bytes" /dev/urandom > "$WORK/src"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port_file() { for _ in $(seq 200); do [ -s "$1" ] && { cat "$1"; return; }; sleep 0.02; done; echo "no port" >&2; exit 1; }
wait_listen() { for _ in $(seq 200); do ss -Hltn "sport = :$1" | grep -q . && return; sleep 0.02; done; echo "nothing listens on $1" >&2; exit 1; }

# One run: receiver kind, sender kind; prints "wall_seconds zcp_bits_per_second|-".
run_one() {
    local recv=$1 send=$2 out="$DEST/out" json="$WORK/recv.json" port pf="$WORK/port"
    rm -f "$out" "$pf" "$json"
    case $recv in
        zcp-*) "$ZCP" recv -J --engine "${recv#zcp-}" --listen 0 --port-file "$pf" "$out" > "$json" 2>/dev/null &
               RP=$!; port=$(wait_port_file "$pf") ;;
        nc)    port=$(free_port); "$NC" -l 127.0.0.1 "$port" > "$out" < /dev/null & RP=$!; wait_listen "$port" ;;
        java-*) "${JAVA[@]}" "${recv#java-}" "$pf" "$out" & RP=$!; port=$(wait_port_file "$pf") ;;
    esac
    PIDS=("$RP")
    local t0 t1
    t0=$(date +%s.%N)
    case $send in
        zcp)    "$ZCP" send -q --raw "$WORK/src" "127.0.0.1:$port" ;;
        nc)     "$NC" -N 127.0.0.1 "$port" < "$WORK/src" ;;
        java-*) "${JAVA[@]}" "${send#java-}" 127.0.0.1 "$port" "$WORK/src" ;;
    esac
    wait "$RP"
    t1=$(date +%s.%N)
    PIDS=()
    cmp -s "$WORK/src" "$out" || { echo "$send -> $recv: the bytes differ" >&2; exit 1; }
    local zrate=-
    [ -s "$json" ] && zrate=$(python3 -c "import json; print(json.load(open('$json'))['end']['sum']['bits_per_second'])")
    echo "$(python3 -c "print($t1 - $t0)") $zrate"
}

PAIRS=(
    "zcp zcp-auto" "zcp zcp-splice" "zcp zcp-rw" "nc zcp-auto" "java-TransferToClient zcp-auto"
    "java-ReadWriteClient zcp-auto" "zcp java-TransferToServer" "zcp java-TransferFromServer"
    "java-TransferToClient java-TransferToServer" "java-ReadWriteClient java-TransferFromServer"
    "zcp nc" "nc nc"
)
RAW="$WORK/raw.txt"
: > "$RAW"
for rep in $(seq "$REPS"); do
    for p in "${PAIRS[@]}"; do
        set -- $p
        echo "$1 $2 $(run_one "$2" "$1")" >> "$RAW"
    done
    echo "rep $rep done" >&2
done

python3 - "$RAW" "$bytes" <<'EOF' | tee "$WORK/table.md"
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    s, r, wall, z = line.split()
    rows.setdefault((s, r), []).append((float(wall), None if z == '-' else float(z)))
size = int(sys.argv[2])
print(f"{size / 2**30:.2f} GiB per run, {len(next(iter(rows.values())))} runs per pair\n")
print("| sender | receiver | wall rate Gbit/s median (min-max) | zcp recv's rate Gbit/s median |")
print("|---|---|---|---|")
for (s, r), v in rows.items():
    w = sorted(size * 8 / x[0] / 1e9 for x in v)
    z = [x[1] / 1e9 for x in v if x[1] is not None]
    zs = f"{statistics.median(z):.2f}" if z else "-"
    print(f"| {s} | {r} | {statistics.median(w):.2f} ({w[0]:.2f}-{w[-1]:.2f}) | {zs} |")
EOF
if [ -n "$OUT" ]; then
    mkdir -p "$OUT"
    cp "$RAW" "$WORK/table.md" "$OUT/"
    { uname -a; nproc; uptime; "$ZCP" --version; java -version 2>&1 | head -1; echo "dest: $DIR"; } > "$OUT/setup.txt"
fi
