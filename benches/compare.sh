#!/usr/bin/env bash
# Two zcp builds, interleaved in one run: did a change cost throughput or CPU?
#
#   benches/compare.sh [-n REPS] [-s SIZE] [-d DIR] [-o OUTDIR] [-c CONFIGS] [-f FILES] BEFORE_BIN AFTER_BIN
#
# For each repetition and each configuration — default engines (sendfile -> auto, durable and
# verified, to DIR's disk), --recv-engine mem (verified, into memory) and --recv-engine null
# (network only) — both binaries send the same page-cached SIZE file over loopback to a server
# of their own build, in alternating order (so drift hits both alike). Prints, per
# configuration, the median Gbit/s and CPU seconds per GiB (both sides, and each side) of each
# build and the ratio AFTER/BEFORE. Any other receiver engine (splice, rw, direct) is a
# configuration too, e.g. -c splice,rw. Raw JSON documents and the table go to OUTDIR when given.
# -c picks the configurations (default: default,mem,null); `tree` is a tree of FILES (10000)
# files of 4-64 KiB sent with -r -P 2 (durable, verified; each run into a new directory),
# measured in files per second (wall time, process start to exit) and CPU seconds (both
# sides), with an rsync daemon (rsync -a, not synced) in the same rotation when rsync is
# installed. -w SIZE writes SIZE of another file (zeros, not synced) to DIR's filesystem just
# before each tree run, so every run starts with that much of another writer's dirty data
# there (what `syncfs` has to wait for). Every tree is deleted at the end: on ext4 without a
# journal, creating files is slower after many deletions nearby, so leave the filesystem a
# while between sessions.
# Needs: python3. Example: cp target/release/zcp /tmp/zcp-before; (change, rebuild);
# benches/compare.sh -n 5 /tmp/zcp-before target/release/zcp
set -euo pipefail

REPS=5
SIZE=1G
DIR=/var/tmp/zcp-bench
OUT=""
CONFIGS=default,mem,null
FILES=10000
DIRTY=""
while getopts "n:s:d:o:c:f:w:h" opt; do
    case $opt in
        n) REPS=$OPTARG ;;
        s) SIZE=$OPTARG ;;
        d) DIR=$OPTARG ;;
        o) OUT=$OPTARG ;;
        c) CONFIGS=$OPTARG ;;
        f) FILES=$OPTARG ;;
        w) DIRTY=$OPTARG ;;
        *) sed -n '2,23p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || { sed -n '2,23p' "$0"; exit 2; }
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

IFS=, read -r -a CONFIGS <<<"$CONFIGS"
has() { [[ " ${CONFIGS[*]} " == *" $1 "* ]]; }
RSYNC=""
if has tree && command -v rsync >/dev/null; then RSYNC=rsync; fi
echo "== $WORK ($(findmnt -no FSTYPE -T "$WORK" 2>/dev/null || echo '?')), $REPS repetitions: ${CONFIGS[*]}"
if has default || has mem || has null; then
    head -c "$SIZE" /dev/urandom >"$WORK/src.bin" 2>/dev/null ||
        python3 -c 'import os,sys; f=open(sys.argv[1],"wb"); n=int(sys.argv[2]); [f.write(os.urandom(1<<20)) for _ in range(n>>20)]' "$WORK/src.bin" "$(numfmt --from=iec "$SIZE")"
fi
if has tree; then
    # The tree of benches/transfer.sh: the same sizes, the same seed.
    python3 - "$WORK/tree" "$FILES" <<'TREE'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
for i in range(n):
    d = os.path.join(root, f"d{i // 100:03}")
    if i % 100 == 0:
        os.makedirs(d)
    with open(os.path.join(d, f"f{i:06}"), "wb") as f:
        f.write(os.urandom(rng.randrange(4096, 65537)))
TREE
fi
"${BIN[1]}" keygen -o "$WORK/key" 2>/dev/null
PORT=()
for i in 0 1; do
    mkdir "$WORK/root$i"
    "${BIN[$i]}" serve --root "$WORK/root$i" --bind 127.0.0.1 -p 0 --key-file "$WORK/key" \
        >"$WORK/serve$i.out" 2>"$WORK/serve$i.log" &
    pids+=($!)
    for _ in $(seq 300); do grep -q listening "$WORK/serve$i.out" 2>/dev/null && break; sleep 0.1; done
    PORT[$i]=$(sed -n 's/.*listening on [^:]*:\([0-9]*\),.*/\1/p' "$WORK/serve$i.out")
    [ -n "${PORT[$i]}" ] || { echo "compare.sh: ${BIN[$i]} serve did not start" >&2; exit 1; }
done
if [ -n "$RSYNC" ]; then
    mkdir "$WORK/rsync"
    RPORT=$((PORT[0] + 2))
    printf 'use chroot = no\n[bench]\n    path = %s\n    read only = false\n    uid = %s\n    gid = %s\n' \
        "$WORK/rsync" "$(id -u)" "$(id -g)" >"$WORK/rsyncd.conf"
    rsync --daemon --no-detach --config="$WORK/rsyncd.conf" --port="$RPORT" --address=127.0.0.1 \
        --log-file=/dev/null &
    RSYNCD=$!
    pids+=("$RSYNCD")
    sleep 0.3
fi

RAW=$WORK/raw.jsonl
args_of() { case $1 in default) ;; *) echo --recv-engine "$1" ;; esac; }
now() { date +%s.%N; }
record() { # build cfg wall: the JSON document on stdin
    python3 -c 'import json,sys; print(json.dumps({"build": sys.argv[1], "cfg": sys.argv[2], "wall": float(sys.argv[3]), "data": json.loads(sys.stdin.read() or "{}")}))' \
        "$1" "$2" "$3" >>"$RAW"
}
children_cpu() { # FILE: user + sys seconds of the shell's waited-for children, from `times >FILE`
    tail -1 "$1" | awk '{ s = 0; for (i = 1; i <= 2; i++) { split($i, t, "m"); s += t[1] * 60 + t[2] } print s }'
}
daemon_cpu() { # user + sys seconds of the rsync daemon's reaped children
    awk -v hz="$(getconf CLK_TCK)" '{ print ($16 + $17) / hz }' "/proc/$RSYNCD/stat"
}
tree_run() { # rep who (0, 1 or r): the tree into a new directory; nothing is deleted between runs
    local rep=$1 who=$2 t0 t1
    find "$WORK/tree" -type f -exec cat {} + >/dev/null
    sync
    if [ -n "$DIRTY" ]; then
        rm -f "$WORK/dirty"
        head -c "$DIRTY" /dev/zero >"$WORK/dirty"
    fi
    t0=$(now)
    if [ "$who" = r ]; then
        # CPU of both sides: the client's from bash's `times` (children), the daemon's from its
        # reaped children (the connection's process and its generator), /proc/PID/stat 16-17.
        # (`times` runs in this shell, not in a $(...) subshell, which has no children yet.)
        local c0 d0 c1 d1
        d0=$(daemon_cpu)
        times >"$WORK/times0"
        t0=$(now)
        rsync -a "$WORK/tree/" "rsync://127.0.0.1:$RPORT/bench/tree-$rep/"
        times >"$WORK/times1"
        t1=$(now)
        c0=$(children_cpu "$WORK/times0")
        c1=$(children_cpu "$WORK/times1")
        sleep 0.3 # the daemon reaps its connection's process
        d1=$(daemon_cpu)
        echo "{\"cpu\": $(awk "BEGIN {print $c1 - $c0 + $d1 - $d0}")}" |
            record rsync tree "$(awk "BEGIN {print $t1 - $t0}")"
    else
        "${BIN[$who]}" send -p "${PORT[$who]}" --key-file "$WORK/key" -J -i 0 -r -P 2 \
            "$WORK/tree" "127.0.0.1::tree-$rep" >"$WORK/tree.json"
        t1=$(now)
        record "${NAME[$who]}" tree "$(awk "BEGIN {print $t1 - $t0}")" <"$WORK/tree.json"
    fi
    sync
}
for rep in $(seq "$REPS"); do
    order=(0 1)
    [ $((rep % 2)) -eq 0 ] && order=(1 0)
    for cfg in "${CONFIGS[@]}"; do
        if [ "$cfg" = tree ]; then
            # rsync's place in the rotation moves too
            runs=("${order[@]}")
            [ -n "$RSYNC" ] && case $((rep % 3)) in
                0) runs=(r "${order[@]}") ;; 1) runs=("${order[0]}" r "${order[1]}") ;; 2) runs=("${order[@]}" r) ;;
            esac
            for who in "${runs[@]}"; do tree_run "$rep" "$who"; done
            continue
        fi
        for i in "${order[@]}"; do
            cat "$WORK/src.bin" >/dev/null
            sync
            t0=$(now)
            # shellcheck disable=SC2046
            "${BIN[$i]}" send -p "${PORT[$i]}" --key-file "$WORK/key" -J -i 0 $(args_of "$cfg") \
                "$WORK/src.bin" 127.0.0.1::out.bin >"$WORK/one.json"
            t1=$(now)
            record "${NAME[$i]}" "$cfg" "$(awk "BEGIN {print $t1 - $t0}")" <"$WORK/one.json"
            rm -f "$WORK/root$i/out.bin"
            sync
        done
    done
    echo "   repetition $rep of $REPS done"
done

python3 - "$RAW" "$SIZE" "${BIN[0]}" "${BIN[1]}" "$FILES" <<'PY' | tee "$WORK/table.txt"
import json, statistics, sys
raw, size, before, after, nfiles = sys.argv[1:6]
nfiles = int(nfiles)
runs, trees = {}, {}
for line in open(raw):
    r = json.loads(line)
    d = r["data"]
    if "error" in d:
        print(f"{r['build']} {r['cfg']}: error: {d['error']}")
        continue
    if r["cfg"] == "tree":
        cpu = d.get("cpu")
        if "end" in d:
            c = d["end"]["cpu"]
            cpu = c["sender"]["total"] + c["receiver"]["total"]
        trees.setdefault(r["build"], []).append((nfiles / r["wall"], cpu))
        continue
    e = d["end"]
    gib = e["sum"]["bytes"] / (1 << 30)
    snd, rcv = e["cpu"]["sender"]["total"] / gib, e["cpu"]["receiver"]["total"] / gib
    runs.setdefault((r["cfg"], r["build"]), []).append((e["sum"]["bits_per_second"] / 1e9, snd + rcv, snd, rcv))
med = statistics.median
print(f"medians of each build's runs, interleaved")
print(f"before: {before}\nafter:  {after}")
if runs:
    print(f"\n{size} over loopback")
    print(f"{'config':<10} {'before Gbit/s':>14} {'after Gbit/s':>13} {'after/before':>13} {'CPU s/GiB before':>17} {'after':>7}"
          f" {'send/recv before':>17} {'after':>11}")
for cfg in dict.fromkeys(c for c, _ in runs):
    b, a = runs.get((cfg, "before"), []), runs.get((cfg, "after"), [])
    if not b or not a:
        continue
    mb, ma = med(x[0] for x in b), med(x[0] for x in a)
    cb, ca = med(x[1] for x in b), med(x[1] for x in a)
    side = lambda xs: f"{med(x[2] for x in xs):.2f}/{med(x[3] for x in xs):.2f}"
    print(f"{cfg:<10} {mb:>14.2f} {ma:>13.2f} {ma / mb:>13.2f} {cb:>17.2f} {ca:>7.2f} {side(b):>17} {side(a):>11}")
    print(f"{'':<10} {'range ' + format(min(x[0] for x in b), '.2f') + '-' + format(max(x[0] for x in b), '.2f'):>14} "
          f"{'range ' + format(min(x[0] for x in a), '.2f') + '-' + format(max(x[0] for x in a), '.2f'):>13}")
if trees:
    print(f"\na tree of {nfiles} files of 4-64 KiB, -r -P 2 (rsync -a to a daemon, not synced); files/s, wall time")
    print(f"{'':<8} {'files/s':>9} {'range':>15} {'CPU s both sides':>17} {'runs':>5}")
    for who in ["before", "after", "rsync"]:
        xs = trees.get(who, [])
        if not xs:
            continue
        fps = [x[0] for x in xs]
        cpus = [x[1] for x in xs if x[1] is not None]
        cpu = f"{med(cpus):.2f}" if cpus else "-"
        print(f"{who:<8} {med(fps):>9.0f} {f'{min(fps):.0f}-{max(fps):.0f}':>15} {cpu:>17} {len(xs):>5}")
    m = {k: med(x[0] for x in v) for k, v in trees.items()}
    if "before" in m and "after" in m:
        print(f"after/before {m['after'] / m['before']:.2f}")
    if "rsync" in m:
        for k in ("before", "after"):
            if k in m:
                print(f"{k}/rsync {m[k] / m['rsync']:.2f}")
PY
if [ -n "$OUT" ]; then
    mkdir -p "$OUT"
    cp "$RAW" "$WORK/table.txt" "$OUT/"
    echo "== wrote $OUT"
fi
