#!/usr/bin/env bash
# Two zcp builds, interleaved in one run: did a change cost throughput or CPU?
#
#   benches/compare.sh [-n REPS] [-s SIZE] [-d DIR] [-o OUTDIR] BEFORE_BIN AFTER_BIN
#
# For each repetition and each configuration — default engines (sendfile -> auto, durable and
# verified, to DIR's disk), --recv-engine mem (verified, into memory) and --recv-engine null
# (network only) — both binaries send the same page-cached SIZE file over loopback to a server
# of their own build, in alternating order (so drift hits both alike). Prints, per
# configuration, the median Gbit/s and CPU seconds per GiB (both sides) of each build and the
# ratio AFTER/BEFORE. Raw JSON documents and the table go to OUTDIR when given.
# Needs: python3. Example: cp target/release/zcp /tmp/zcp-before; (change, rebuild);
# benches/compare.sh -n 5 /tmp/zcp-before target/release/zcp
set -euo pipefail

REPS=5
SIZE=1G
DIR=/var/tmp/zcp-bench
OUT=""
while getopts "n:s:d:o:h" opt; do
    case $opt in
        n) REPS=$OPTARG ;;
        s) SIZE=$OPTARG ;;
        d) DIR=$OPTARG ;;
        o) OUT=$OPTARG ;;
        *) sed -n '2,14p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || { sed -n '2,14p' "$0"; exit 2; }
BIN=("$(realpath "$1")" "$(realpath "$2")")
NAME=(before after)
for b in "${BIN[@]}"; do [ -x "$b" ] || { echo "compare.sh: $b is not an executable" >&2; exit 2; }; done
command -v python3 >/dev/null || { echo "compare.sh: python3 is required" >&2; exit 2; }

mkdir -p "$DIR"
WORK=$(mktemp -d "$DIR/compare.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

echo "== $SIZE source in $WORK ($(findmnt -no FSTYPE -T "$WORK" 2>/dev/null || echo '?')), $REPS repetitions"
head -c "$SIZE" /dev/urandom >"$WORK/src.bin" 2>/dev/null ||
    python3 -c 'import os,sys; f=open(sys.argv[1],"wb"); n=int(sys.argv[2]); [f.write(os.urandom(1<<20)) for _ in range(n>>20)]' "$WORK/src.bin" "$(numfmt --from=iec "$SIZE")"
"${BIN[1]}" keygen -o "$WORK/key" 2>/dev/null
PORT=()
for i in 0 1; do
    mkdir "$WORK/root$i"
    "${BIN[$i]}" serve --root "$WORK/root$i" --bind 127.0.0.1 -p 0 --key-file "$WORK/key" \
        >"$WORK/serve$i.out" 2>"$WORK/serve$i.log" &
    pids+=($!)
    for _ in $(seq 50); do grep -q listening "$WORK/serve$i.out" 2>/dev/null && break; sleep 0.1; done
    PORT[$i]=$(sed -n 's/.*listening on [^:]*:\([0-9]*\),.*/\1/p' "$WORK/serve$i.out")
    [ -n "${PORT[$i]}" ] || { echo "compare.sh: ${BIN[$i]} serve did not start" >&2; exit 1; }
done

RAW=$WORK/raw.jsonl
CONFIGS=(default mem null)
args_of() { case $1 in default) ;; mem) echo --recv-engine mem ;; null) echo --recv-engine null ;; esac; }
for rep in $(seq "$REPS"); do
    order=(0 1)
    [ $((rep % 2)) -eq 0 ] && order=(1 0)
    for cfg in "${CONFIGS[@]}"; do
        for i in "${order[@]}"; do
            cat "$WORK/src.bin" >/dev/null
            sync
            # shellcheck disable=SC2046
            "${BIN[$i]}" send -p "${PORT[$i]}" --key-file "$WORK/key" -J -i 0 $(args_of "$cfg") \
                "$WORK/src.bin" 127.0.0.1:out.bin |
                python3 -c 'import json,sys; print(json.dumps({"build": sys.argv[1], "cfg": sys.argv[2], "data": json.load(sys.stdin)}))' \
                    "${NAME[$i]}" "$cfg" >>"$RAW"
            rm -f "$WORK/root$i/out.bin"
            sync
        done
    done
    echo "   repetition $rep of $REPS done"
done

python3 - "$RAW" "$SIZE" "${BIN[0]}" "${BIN[1]}" <<'PY' | tee "$WORK/table.txt"
import json, statistics, sys
raw, size, before, after = sys.argv[1:5]
runs = {}
for line in open(raw):
    r = json.loads(line)
    d = r["data"]
    if "error" in d:
        print(f"{r['build']} {r['cfg']}: error: {d['error']}")
        continue
    e = d["end"]
    gib = e["sum"]["bytes"] / (1 << 30)
    cpu = (e["cpu"]["sender"]["total"] + e["cpu"]["receiver"]["total"]) / gib
    runs.setdefault((r["cfg"], r["build"]), []).append((e["sum"]["bits_per_second"] / 1e9, cpu))
print(f"{size} over loopback; medians of each build's runs, interleaved")
print(f"before: {before}\nafter:  {after}")
print(f"{'config':<10} {'before Gbit/s':>14} {'after Gbit/s':>13} {'after/before':>13} {'CPU s/GiB before':>17} {'after':>7}")
for cfg in ["default", "mem", "null"]:
    b, a = runs.get((cfg, "before"), []), runs.get((cfg, "after"), [])
    if not b or not a:
        continue
    mb, ma = statistics.median(x[0] for x in b), statistics.median(x[0] for x in a)
    cb, ca = statistics.median(x[1] for x in b), statistics.median(x[1] for x in a)
    print(f"{cfg:<10} {mb:>14.2f} {ma:>13.2f} {ma / mb:>13.2f} {cb:>17.2f} {ca:>7.2f}")
    print(f"{'':<10} {'range ' + format(min(x[0] for x in b), '.2f') + '-' + format(max(x[0] for x in b), '.2f'):>14} "
          f"{'range ' + format(min(x[0] for x in a), '.2f') + '-' + format(max(x[0] for x in a), '.2f'):>13}")
PY
if [ -n "$OUT" ]; then
    mkdir -p "$OUT"
    cp "$RAW" "$WORK/table.txt" "$OUT/"
    echo "== wrote $OUT"
fi
