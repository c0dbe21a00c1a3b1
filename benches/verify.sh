#!/usr/bin/env bash
# What verification costs: --verify blake3 (the default) against --verify none, interleaved.
#
#   benches/verify.sh [-n REPS] [-s SIZE] [-b BIN] [-o OUTDIR] [-x "EXTRA ARGS"] [-t BYTES/S] [DEST_DIR...]
#
# One page-cached SIZE source (in /var/tmp) is sent over loopback with the default engines
# into each DEST_DIR (default: /dev/shm, a tmpfs, and /var/tmp, the durable disk), verified and
# unverified in alternating order within each repetition (so drift hits both alike), to one
# `zcp serve` per destination. Prints per destination and mode the median Gbit/s, the CPU
# seconds per GiB of each side (sender and receiver, whole sessions), the receiver engine, and
# the ratio verified/none. With -f (needs fio) each repetition also measures the destination's
# own ceiling, an O_DIRECT write of SIZE (libaio, 4 MiB, queue depth 4, fsync at the end),
# where O_DIRECT works: is the disk the limit? On a shared machine the CPU figures are
# steadier than the rates. With -t (root, cgroup v1 blkio) each server runs in a blkio cgroup
# whose writes to the destination's block device are throttled to BYTES/S (suffixes K, M, G):
# a disk made the limit, to see what verification costs where the disk is slower than the
# CPU (use the `direct` receiver, the default on a disk: buffered writes escape the v1
# throttle). Raw JSON documents and the table go to OUTDIR when given. Needs: python3.
# Example: benches/verify.sh -n 5 -s 2G -o benches/results/DATE-HOST-verify
set -euo pipefail

REPS=5
SIZE=2G
BIN=target/release/zcp
OUT=""
EXTRA=""
FIO=0
THROTTLE=""
while getopts "n:s:b:o:x:t:fh" opt; do
    case $opt in
        n) REPS=$OPTARG ;;
        s) SIZE=$OPTARG ;;
        b) BIN=$OPTARG ;;
        o) OUT=$OPTARG ;;
        x) EXTRA=$OPTARG ;;
        f) FIO=1 ;;
        t) THROTTLE=$(numfmt --from=iec "$OPTARG") ;;
        *) sed -n '2,20p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
DESTS=("$@")
[ ${#DESTS[@]} -gt 0 ] || DESTS=(/dev/shm /var/tmp)
BIN=$(realpath "$BIN")
[ -x "$BIN" ] || { echo "verify.sh: $BIN is not an executable" >&2; exit 2; }
command -v python3 >/dev/null || { echo "verify.sh: python3 is required" >&2; exit 2; }
[ $FIO -eq 0 ] || command -v fio >/dev/null || { echo "verify.sh: -f needs fio" >&2; exit 2; }

SRC_DIR=$(mktemp -d /var/tmp/zcp-verify-src.XXXXXX)
ROOTS=()
pids=()
CGROUPS=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    for c in "${CGROUPS[@]}"; do rmdir "$c" 2>/dev/null || true; done
    rm -rf "$SRC_DIR" "${ROOTS[@]}"
}
trap cleanup EXIT

echo "== $SIZE source in $SRC_DIR; destinations: ${DESTS[*]}; $REPS repetitions"
head -c "$SIZE" /dev/urandom >"$SRC_DIR/src.bin"
"$BIN" keygen -o "$SRC_DIR/key" 2>/dev/null
PORT=()
for i in "${!DESTS[@]}"; do
    root=$(mktemp -d "${DESTS[$i]}/zcp-verify.XXXXXX")
    ROOTS+=("$root")
    "$BIN" serve --root "$root" --bind 127.0.0.1 -p 0 --key-file "$SRC_DIR/key" \
        >"$SRC_DIR/serve$i.out" 2>"$SRC_DIR/serve$i.log" &
    pids+=($!)
    for _ in $(seq 50); do grep -q listening "$SRC_DIR/serve$i.out" 2>/dev/null && break; sleep 0.1; done
    PORT[i]=$(sed -n 's/.*listening on [^:]*:\([0-9]*\),.*/\1/p' "$SRC_DIR/serve$i.out")
    [ -n "${PORT[$i]}" ] || { echo "verify.sh: serve did not start" >&2; exit 1; }
    fs=$(findmnt -no FSTYPE -T "$root" 2>/dev/null | head -1)
    echo "   ${DESTS[$i]}: ${fs:-?}, port ${PORT[$i]}"
    if [ -n "$THROTTLE" ]; then
        dev=$(findmnt -no MAJ:MIN -T "$root" | head -1 | tr -d " ")
        [ -d /sys/fs/cgroup/blkio ] || { echo "verify.sh: -t needs cgroup v1 blkio at /sys/fs/cgroup/blkio" >&2; exit 2; }
        case $fs in tmpfs | ramfs) echo "   (no throttle: ${DESTS[$i]} has no block device)"; continue ;; esac
        cg=/sys/fs/cgroup/blkio/zcp-verify-$$-$i
        mkdir "$cg"
        CGROUPS+=("$cg")
        echo "$dev $THROTTLE" >"$cg/blkio.throttle.write_bps_device"
        echo "${pids[-1]}" >"$cg/cgroup.procs"
        echo "   writes to $dev throttled to $(numfmt --to=iec "$THROTTLE")B/s for this server"
    fi
done

RAW=$SRC_DIR/raw.jsonl
for rep in $(seq "$REPS"); do
    modes=(blake3 none)
    [ $((rep % 2)) -eq 0 ] && modes=(none blake3)
    for i in "${!DESTS[@]}"; do
        for mode in "${modes[@]}"; do
            cat "$SRC_DIR/src.bin" >/dev/null
            sync
            # shellcheck disable=SC2086
            "$BIN" send -p "${PORT[$i]}" --key-file "$SRC_DIR/key" -J -i 0 --verify "$mode" \
                $EXTRA "$SRC_DIR/src.bin" 127.0.0.1::out.bin |
                python3 -c 'import json,sys; print(json.dumps({"dest": sys.argv[1], "mode": sys.argv[2], "data": json.load(sys.stdin)}))' \
                    "${DESTS[$i]}" "$mode" >>"$RAW"
            rm -f "${ROOTS[$i]}/out.bin"
            sync
        done
        if [ $FIO -eq 1 ]; then
            fio --name=ceiling --filename="${ROOTS[$i]}/fio.bin" --rw=write --bs=4M --direct=1 \
                --ioengine=libaio --iodepth=4 --size="$SIZE" --end_fsync=1 \
                --output-format=json 2>/dev/null |
                python3 -c 'import json,sys; j=json.load(sys.stdin); print(json.dumps({"dest": sys.argv[1], "fio_bps": j["jobs"][0]["write"]["bw_bytes"] * 8}))' \
                    "${DESTS[$i]}" >>"$RAW" || echo "   ${DESTS[$i]}: no O_DIRECT ceiling (fio failed)"
            rm -f "${ROOTS[$i]}/fio.bin"
            sync
        fi
    done
    echo "   repetition $rep of $REPS done"
done

python3 - "$RAW" "$SIZE" "$BIN" "$EXTRA" "${DESTS[@]}" <<'PY' | tee "$SRC_DIR/table.txt"
import json, statistics, sys
raw, size, binary, extra, *dests = sys.argv[1:]
runs, engines = {}, {}
fio = {}
for line in open(raw):
    r = json.loads(line)
    if "fio_bps" in r:
        fio.setdefault(r["dest"], []).append(r["fio_bps"] / 1e9)
        continue
    d = r["data"]
    if "error" in d:
        print(f"{r['dest']} {r['mode']}: error: {d['error']}")
        continue
    e = d["end"]
    assert e["verify_mode"] == r["mode"], e
    assert e["verified"] == (r["mode"] == "blake3"), e
    runs.setdefault((r["dest"], r["mode"]), []).append((
        e["sum"]["bits_per_second"] / 1e9,
        e["cpu"]["sender"]["seconds_per_gib"],
        e["cpu"]["receiver"]["seconds_per_gib"],
    ))
    engines.setdefault((r["dest"], r["mode"]), set()).add(e["engines"]["receiver"])
med = lambda xs, k: statistics.median(x[k] for x in xs)
print(f"{size} page-cached file over loopback, default engines {extra}; medians, interleaved")
print(f"binary: {binary}")
print(f"{'destination':<12} {'mode':<7} {'recv engine':<12} {'Gbit/s':>7} {'range':>13} "
      f"{'snd CPU s/GiB':>14} {'rcv CPU s/GiB':>14} {'n':>3}")
for dest in dests:
    for mode in ["blake3", "none"]:
        xs = runs.get((dest, mode), [])
        if not xs:
            continue
        rng = f"{min(x[0] for x in xs):.2f}-{max(x[0] for x in xs):.2f}"
        eng = ",".join(sorted(engines[(dest, mode)]))
        print(f"{dest:<12} {mode:<7} {eng:<12} {med(xs, 0):>7.2f} {rng:>13} "
              f"{med(xs, 1):>14.3f} {med(xs, 2):>14.3f} {len(xs):>3}")
    v, n = runs.get((dest, "blake3"), []), runs.get((dest, "none"), [])
    if dest in fio:
        f = fio[dest]
        rng = f"{min(f):.2f}-{max(f):.2f}"
        print(f"{dest:<12} {'fio':<7} {'O_DIRECT':<12} {statistics.median(f):>7.2f} {rng:>13} "
              f"{'':>14} {'':>14} {len(f):>3}")
    if v and n:
        print(f"{dest:<12} verified/none: rate {med(v, 0) / med(n, 0):.2f}x; CPU s/GiB sender "
              f"+{med(v, 1) - med(n, 1):.3f}, receiver +{med(v, 2) - med(n, 2):.3f}")
PY
if [ -n "$OUT" ]; then
    mkdir -p "$OUT"
    cp "$RAW" "$SRC_DIR/table.txt" "$OUT/"
    echo "== wrote $OUT"
fi
