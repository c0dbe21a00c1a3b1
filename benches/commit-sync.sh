#!/usr/bin/env bash
# How a receiver's commit batches are made durable, and what each way costs:
#
#   benches/commit-sync.sh [-n REPS] [-f FILES] [-w DIRTY] [-d DIR] [ZCP]
#
# Three servers of one build (ZCP, default target/release/zcp) receive the same tree of FILES
# (1500) files of 4-64 KiB over loopback (-r -P 2), in rotation: one with
# ZCP_COMMIT_SYNC=syncfs, one with =each (an fsync of each file), one choosing for itself
# (the default). -w DIRTY writes DIRTY bytes of another file (zeros, not synced) to DIR's
# filesystem before each run, so the run starts behind that much of another writer's dirty
# data. Prints, per run, the wall time and the sum of the commit batches' sync times from
# each server's debug log (`commit batch ... sync_ms=`). Needs: bc, python3.
set -euo pipefail

REPS=3
FILES=1500
DIRTY=""
DIR=/var/tmp/zcp-bench
while getopts "n:f:w:d:h" opt; do
    case $opt in
        n) REPS=$OPTARG ;;
        f) FILES=$OPTARG ;;
        w) DIRTY=$OPTARG ;;
        d) DIR=$OPTARG ;;
        *) sed -n '2,12p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
Z=$(realpath "${1:-target/release/zcp}")
[ -x "$Z" ] || { echo "commit-sync.sh: $Z is not an executable" >&2; exit 2; }
mkdir -p "$DIR"
W=$(mktemp -d "$DIR/commit-sync.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$W"
}
trap cleanup EXIT

python3 - "$W/src" "$FILES" <<'TREE'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
for i in range(n):
    d = os.path.join(root, f"d{i % 15}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i}"), "wb") as f:
        f.write(os.urandom(rng.randrange(4096, 65537)))
TREE
"$Z" keygen -o "$W/key" 2>/dev/null
MODES=(syncfs each auto)
declare -A PORT
for m in "${MODES[@]}"; do
    mkdir "$W/root-$m"
    ZCP_COMMIT_SYNC=$m "$Z" serve --root "$W/root-$m" --bind 127.0.0.1 -p 0 --key-file "$W/key" \
        --log-level debug >"$W/out-$m" 2>"$W/log-$m" &
    pids+=($!)
    for _ in $(seq 300); do grep -q listening "$W/out-$m" 2>/dev/null && break; sleep 0.1; done
    PORT[$m]=$(sed -n 's/.*listening on [^:]*:\([0-9]*\),.*/\1/p' "$W/out-$m")
    [ -n "${PORT[$m]}" ] || { echo "commit-sync.sh: the $m server did not start" >&2; exit 1; }
done
echo "== $W ($(findmnt -no FSTYPE -T "$W" 2>/dev/null || echo '?')), $FILES files, ${DIRTY:-no} dirty data before each run"
for r in $(seq "$REPS"); do
    for m in "${MODES[@]}"; do
        find "$W/src" -type f -exec cat {} + >/dev/null
        sync
        if [ -n "$DIRTY" ]; then
            rm -f "$W/dirty"
            head -c "$DIRTY" /dev/zero >"$W/dirty"
        fi
        n0=$(wc -l <"$W/log-$m")
        t0=$(date +%s.%N)
        "$Z" send -p "${PORT[$m]}" --key-file "$W/key" -q -r -P 2 "$W/src" "127.0.0.1::s$r"
        t1=$(date +%s.%N)
        tail -n +"$((n0 + 1))" "$W/log-$m" | grep 'commit batch' |
            sed -n 's/.*files=\([0-9]*\).*sync_ms=\([0-9.]*\).*/\1 \2/p' |
            awk -v m="$m" -v w="$(echo "$t1 - $t0" | bc)" '{ f += $1; s += $2; n++ }
                END { printf "%-7s wall %.2f s  batches %d  files %d  sync %.0f ms  %.3f ms a file\n", m, w, n, f, s, s / f }'
        rm -f "$W/dirty"
        sync
    done
done
