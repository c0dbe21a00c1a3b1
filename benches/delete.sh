#!/usr/bin/env bash
# The cost of `--delete` on a mirror run, against an rsync daemon and plain `rm -rf`, in one
# run, interleaved. A source tree of D directories of F small files is already on the
# receiver (sent once before); the receiver also holds S stale directories of N files each,
# which the mirror run must remove. Each round rebuilds the stale part, then times:
#   rm      rm -rf of the stale directories alone (the floor: the unlinks themselves)
#   zcp     zcp send -r --delete --quick-check SRC HOST:   (the tree left as it is, stale pruned)
#   rsync   rsync -r --delete SRC/ rsync://HOST/m/T/        (the same, rsync's quick check)
# Usage: benches/delete.sh [ROUNDS] ; needs rsync; uses ./target/release/zcp.
set -euo pipefail
ROUNDS=${1:-3}
D=${D:-100} F=${F:-100} S=${S:-100} N=${N:-1000}
ZCP=${ZCP:-./target/release/zcp}
command -v rsync >/dev/null || { echo "delete.sh: needs rsync (apt-get install rsync)" >&2; exit 2; }
W=$(mktemp -d /tmp/zcp-delete-bench.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$W"' EXIT
mkdir -p "$W/src/t" "$W/zroot" "$W/rroot"
for d in $(seq 1 "$D"); do
    mkdir -p "$W/src/t/d$d"
    (cd "$W/src/t/d$d" && for f in $(seq 1 "$F"); do printf 'file %s %s\n' "$d" "$f" > "f$f"; done)
done
"$ZCP" keygen -o "$W/key" >/dev/null 2>&1
"$ZCP" serve --root "$W/zroot" --key-file "$W/key" -p 0 --allow-delete --bind 127.0.0.1 \
    >"$W/serve.log" 2>&1 &
for _ in $(seq 1 50); do
    PORT=$(grep -o 'listening on 127.0.0.1:[0-9]*' "$W/serve.log" | grep -o '[0-9]*$' || true)
    [ -n "${PORT:-}" ] && break
    sleep 0.1
done
cat >"$W/rsyncd.conf" <<EOF
pid file = $W/rsyncd.pid
use chroot = false
uid = 0
gid = 0
[m]
path = $W/rroot
read only = false
EOF
RPORT=$((PORT + 1))
rsync --daemon --no-detach --config="$W/rsyncd.conf" --port="$RPORT" --address=127.0.0.1 &
sleep 0.5
zsend() { "$ZCP" send -q -r --key-file "$W/key" -p "$PORT" "$@" "$W/src/t" 127.0.0.1:: ; }
zsend
rsync -r "$W/src/t/" "rsync://127.0.0.1:$RPORT/m/t/"
stale() {
    for s in $(seq 1 "$S"); do
        mkdir -p "$1/t/stale$s"
        (cd "$1/t/stale$s" && touch $(seq -f "x%g" 1 "$N"))
    done
}
secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
echo "tree: $D x $F files kept; stale: $S x $N files to remove; rounds: $ROUNDS"
printf '%-6s %8s %8s %8s\n' round rm zcp rsync
for r in $(seq 1 "$ROUNDS"); do
    mkdir -p "$W/rmroot"; stale "$W/rmroot"; sync
    a=$(secs rm -rf "$W/rmroot/t")
    stale "$W/zroot"; sync
    b=$(secs zsend --delete --quick-check)
    [ -e "$W/zroot/t/stale1" ] && { echo "zcp left the stale tree" >&2; exit 1; }
    stale "$W/rroot"; sync
    c=$(secs rsync -r --delete "$W/src/t/" "rsync://127.0.0.1:$RPORT/m/t/")
    [ -e "$W/rroot/t/stale1" ] && { echo "rsync left the stale tree" >&2; exit 1; }
    printf '%-6s %8.2f %8.2f %8.2f\n' "$r" "$a" "$b" "$c"
done
grep -c "deleted directory t/stale" "$W/serve.log" | sed 's/^/zcp server log lines for stale directories: /'
