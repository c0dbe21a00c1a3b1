#!/usr/bin/env bash
# Encryption's cost (issue 26, part 3): zcp over ssh encrypted (the default) against zcp over
# ssh in clear (--no-encrypt), each over TCP streams and over UDP (--transport udp), scp -O
# and rsync -e ssh, in one run, interleaved round by round (TOOLS="..." picks some):
# an sshd of its own on 127.0.0.1 (throwaway keys; root, as sshd needs), every tool logging in
# with the same key. Cells:
#   first   a 1 KiB file: the time to start and finish (ssh login, far side, session)
#   tmpfs   SIZE bytes (default 1G), page-cached, into /dev/shm
#   disk    the same into /var/tmp (ext4 here): zcp durable (fsync, rename); scp and rsync not
# For each run: wall time, and the whole machine's CPU seconds (all processes and the kernel,
# from /proc/stat) per GiB; for zcp also each side's own CPU s/GiB (its JSON report) and the
# seconds its side spent in the cipher. Prints a table per cell with ratios to zcp encrypted.
# Usage: benches/encrypt.sh [RUNS] ; needs openssh-server, rsync, python3; uses
# ./target/release/zcp.
set -euo pipefail
RUNS=${1:-5}
SIZE=${SIZE:-1G}
ZCP=$(realpath "${ZCP:-./target/release/zcp}")
for t in /usr/sbin/sshd scp rsync ssh-keygen python3; do
    command -v "$t" >/dev/null || { echo "encrypt.sh: needs $t" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "encrypt.sh: needs root (sshd)" >&2; exit 2; }
W=$(mktemp -d /var/tmp/zcp-enc-bench.XXXXXX)
M=$(mktemp -d /dev/shm/zcp-enc-bench.XXXXXX)
trap '[ -f "$W/sshd.pid" ] && kill "$(cat "$W/sshd.pid")" 2>/dev/null; rm -rf "$W" "$M"' EXIT
. "$(dirname "$0")/sshd.sh"
head -c 1024 /dev/urandom >"$W/first"
head -c "$(numfmt --from=iec "$SIZE")" /dev/urandom >"$W/big"
echo "encrypt.sh: $RUNS rounds, $SIZE, sshd on 127.0.0.1:$PORT; $(nproc) cores; $(ssh -V 2>&1)"
# One run: prints "SECONDS MACHINE_CPU_SECONDS [zcp JSON summary fields]".
cpu() { awk '/^cpu /{print ($2+$3+$4+$7+$8)}' /proc/stat; }
TICK=$(getconf CLK_TCK)
one() {
    local tool=$1 src=$2 dest=$3 out="$W/out.json"
    rm -f "$dest"
    cat "$src" >/dev/null
    local c0 t0 t1 c1
    c0=$(cpu); t0=$(date +%s.%N)
    case $tool in
    zcp-enc) "$ZCP" send -J -i 0 -e "$SSH" --remote-zcp "$ZCP" "$src" "127.0.0.1:$dest" >"$out" ;;
    zcp-plain) "$ZCP" send -J -i 0 --no-encrypt -e "$SSH" --remote-zcp "$ZCP" "$src" "127.0.0.1:$dest" >"$out" ;;
    zcp-udp-enc) "$ZCP" send -J -i 0 --transport udp -e "$SSH" --remote-zcp "$ZCP" "$src" "127.0.0.1:$dest" >"$out" ;;
    zcp-udp-plain) "$ZCP" send -J -i 0 --transport udp --no-encrypt -e "$SSH" --remote-zcp "$ZCP" "$src" "127.0.0.1:$dest" >"$out" ;;
    scp) scp -O -q $OPTS -P "$PORT" "$src" "127.0.0.1:$dest" ;;
    rsync) rsync -e "$SSH" "$src" "127.0.0.1:$dest" ;;
    esac
    t1=$(date +%s.%N); c1=$(cpu)
    cmp -s "$src" "$dest" || { echo "encrypt.sh: $tool: $dest differs" >&2; exit 1; }
    local extra=""
    if [ "${tool#zcp}" != "$tool" ]; then
        extra=$(python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["end"]
c=e["cpu"]; x=e.get("encryption") or {}
print(c["sender"]["total"], c["receiver"]["total"], (x.get("cipher_seconds") or {}).get("sender", 0))' "$out")
    fi
    echo "$(echo "$t1 - $t0" | bc) $(echo "($c1 - $c0) / $TICK" | bc -l) $extra"
}
TOOLS=${TOOLS:-"zcp-enc zcp-plain zcp-udp-enc zcp-udp-plain scp rsync"}
for cell in first tmpfs disk; do
    case $cell in
    first) src=$W/first; dir=$W ;;
    tmpfs) src=$W/big; dir=$M ;;
    disk) src=$W/big; dir=$W ;;
    esac
    : >"$W/$cell.runs"
    one zcp-enc "$src" "$dir/warm" >/dev/null
    for r in $(seq "$RUNS"); do
        for t in $TOOLS; do
            echo "$t $(one "$t" "$src" "$dir/dest-$t")" >>"$W/$cell.runs"
        done
    done
    python3 - "$cell" "$(stat -c %s "$src")" "$W/$cell.runs" <<'EOF'
import statistics as st, sys
cell, size, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = {}
for line in open(path):
    f = line.split()
    rows.setdefault(f[0], []).append([float(x) for x in f[1:]])
gib = size / 2**30
base = st.mean(r[0] for r in rows["zcp-enc"])
print(f"== {cell}: {size} bytes")
print("| tool | mean s | min s | Gbit/s | machine CPU s/GiB | zcp sender CPU s/GiB | zcp receiver CPU s/GiB | cipher s (sender) | time vs zcp encrypted |")
print("|:---|---:|---:|---:|---:|---:|---:|---:|---:|")
for t, rs in rows.items():
    secs = [r[0] for r in rs]
    m = st.mean(secs)
    gbit = size * 8 / m / 1e9
    # CPU per GiB means nothing for the 1 KiB file: its cell is about time.
    big = cell != "first"
    mcpu = f"{st.mean(r[1] for r in rs) / gib:.2f}" if big else "-"
    z = [f"{st.mean(r[i] for r in rs) / gib:.3f}" if big and len(rs[0]) > 2 else "" for i in (2, 3)]
    c = f"{st.mean(r[4] for r in rs):.3f}" if len(rs[0]) > 4 else ""
    print(f"| {t} | {m:.3f} | {min(secs):.3f} | {gbit:.2f} | {mcpu} | {z[0]} | {z[1]} | {c} | {m / base:.2f} |")
EOF
done
