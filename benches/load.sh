#!/usr/bin/env bash
# Can connections that never finish their handshake lock a client out of `zcp serve`, slow
# it, or make the server hold memory or threads? (issue 24, class 3). Loopback only.
#
#   benches/load.sh [-n REPS] [-s SIZE_MIB] [-H HELD] [-N PENDING] [-c CLIENTS] [-d DIR]
#                   [-o OUTDIR] [-b ZCP]
#
# One server (default limits: --max-pending 4096, 256 per source, handshake timeout 10 s)
# and benches/hold.py holding HELD (default 1000) connections, half silent, half sending a
# byte a second, each one the server closes replaced (at most 500 reconnections a second).
#   A. a SIZE_MIB (default 1024) file sent with -P 4 into the server's memory (--recv-engine
#      mem: verified, not stored, so no disk enters the ratio), REPS times (default 3) each:
#      alone; with the HELD connections from 127.0.0.2-.9 (8 sources); with them from
#      127.0.0.1, the client's own address (the worst case). Runs interleaved; the ratio of
#      medians (held / alone) is printed.
#   B. CLIENTS (default 48) `zcp send --retry 8` at once (8 MiB each, to disk), under the
#      held connections from 127.0.0.1-.9; each file compared byte for byte.
#   C. PENDING (default 10000) connections held (from 127.0.0.10-.49, no reconnection)
#      against a server with --max-pending 16384, so all of them really are pending; a send
#      must still go through.
# The server's RSS (VmRSS) and threads are sampled every 0.2 s throughout; the maxima per
# phase are printed. Sources live in DIR (default /dev/shm). OUTDIR gets load.log, the
# samples and the holder's counts. Bounded: every step has a timeout. Needs python3.
set -euo pipefail

REPS=3
SIZE=1024
HELD=1000
PENDING=10000
CLIENTS=48
DIR=/dev/shm
[ -d "$DIR" ] || DIR=/var/tmp
OUT=""
ZCP=target/release/zcp
while getopts "n:s:H:N:c:d:o:b:h" opt; do
    case $opt in
        n) REPS=$OPTARG ;;
        s) SIZE=$OPTARG ;;
        H) HELD=$OPTARG ;;
        N) PENDING=$OPTARG ;;
        c) CLIENTS=$OPTARG ;;
        d) DIR=$OPTARG ;;
        o) OUT=$OPTARG ;;
        b) ZCP=$OPTARG ;;
        *) sed -n '2,24p' "$0"; exit 2 ;;
    esac
done
ZCP=$(realpath "$ZCP")
HOLD=$(dirname "$(realpath "$0")")/hold.py
[ -x "$ZCP" ] || { echo "load.sh: $ZCP is not an executable (cargo build --release)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "load.sh: python3 is required" >&2; exit 2; }
ulimit -n "$(ulimit -Hn)"

WORK=$(mktemp -d "$DIR/zcp-load.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
LOG=$WORK/load.log
say() { echo "$*" | tee -a "$LOG"; }

mkdir -p "$WORK/root" "$WORK/src"
"$ZCP" keygen -o "$WORK/key" 2>/dev/null
head -c $((SIZE << 20)) /dev/urandom >"$WORK/src/big.bin"
for i in $(seq "$CLIENTS"); do head -c $((8 << 20)) /dev/urandom >"$WORK/src/c$i.bin"; done

# start_server NAME ARGS...: sets PORT and SPID
start_server() {
    local name=$1; shift
    "$ZCP" serve --root "$WORK/root" --bind 127.0.0.1 -p 0 --key-file "$WORK/key" "$@" \
        >"$WORK/serve-$name.out" 2>"$WORK/serve-$name.log" &
    SPID=$!
    pids+=("$SPID")
    for _ in $(seq 50); do grep -q listening "$WORK/serve-$name.out" 2>/dev/null && break; sleep 0.1; done
    PORT=$(sed -n 's/.*listening on [^:]*:\([0-9]*\),.*/\1/p' "$WORK/serve-$name.out")
    [ -n "$PORT" ] || { echo "load.sh: zcp serve did not start" >&2; exit 1; }
}

# sample PID FILE: VmRSS (KiB) and Threads every 0.2 s, as "rss threads" lines, until killed
sample() {
    while kill -0 "$1" 2>/dev/null; do
        awk '/^VmRSS:/{r=$2} /^Threads:/{t=$2} END{print r, t}' "/proc/$1/status" >>"$2" 2>/dev/null || true
        sleep 0.2
    done
}
max_of() { awk -v c="$2" 'BEGIN{m=0} $c>m{m=$c} END{print m}' "$1"; }

# hold NAME COUNT SOURCES RATE: starts hold.py, sets HPID
hold() {
    timeout 900 python3 "$HOLD" "$PORT" "$2" "$3" --reconnect-rate "$4" --stats "$WORK/hold-$1.jsonl" &
    HPID=$!
    pids+=("$HPID")
}
# wait_held NAME N: until the holder reports N connections opened (at most 60 s)
wait_held() {
    for _ in $(seq 600); do
        [ -s "$WORK/hold-$1.jsonl" ] && [ "$(tail -1 "$WORK/hold-$1.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["opened"])')" -ge "$2" ] && return 0
        sleep 0.1
    done
    echo "load.sh: the holder opened fewer than $2 connections" >&2
    return 1
}
stop_hold() { kill "$HPID" 2>/dev/null || true; wait "$HPID" 2>/dev/null || true; }

# one_send: seconds for the big file with -P 4 into memory
one_send() {
    local t0 t1
    t0=$(date +%s.%N)
    timeout 300 "$ZCP" send -q -P 4 --recv-engine mem -p "$PORT" --key-file "$WORK/key" \
        "$WORK/src/big.bin" 127.0.0.1::big.bin >>"$LOG" 2>&1 || { echo "load.sh: send failed" >&2; exit 1; }
    t1=$(date +%s.%N)
    python3 -c "print(f'{$t1-$t0:.3f}')"
}
rate() { python3 -c "print(f'{$SIZE*8*1048576/$1/1e9:.2f}')"; }
median() { python3 -c 'import sys,statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

say "load.sh: $(date -u +%FT%TZ) $(uname -r), $(nproc) CPUs, zcp $("$ZCP" --version | head -1)"
say "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

# ---------------------------------------------------------------- A: rate under held connections
start_server a
sample "$SPID" "$WORK/rss-a.txt" &
pids+=($!)
ATTACK8=$(seq -s, -f '127.0.0.%g' 2 9)
alone=(); spread=(); shared=()
for r in $(seq "$REPS"); do
    t=$(one_send); alone+=("$t"); say "A rep $r alone:             ${t} s  $(rate "$t") Gbit/s"
    hold a8-$r "$HELD" "$ATTACK8" 500; wait_held a8-$r "$HELD"; sleep 1
    t=$(one_send); spread+=("$t"); say "A rep $r held from .2-.9:    ${t} s  $(rate "$t") Gbit/s  ($(tail -1 "$WORK/hold-a8-$r.jsonl"))"
    stop_hold
    hold a1-$r "$HELD" 127.0.0.1 500; wait_held a1-$r "$HELD"; sleep 1
    t=$(one_send); shared+=("$t"); say "A rep $r held from .1 (own): ${t} s  $(rate "$t") Gbit/s  ($(tail -1 "$WORK/hold-a1-$r.jsonl"))"
    stop_hold
done
ma=$(median "${alone[@]}"); ms=$(median "${spread[@]}"); mo=$(median "${shared[@]}")
say "A medians: alone $(rate "$ma") Gbit/s; held from 8 sources $(rate "$ms") Gbit/s (ratio $(python3 -c "print(f'{$ma/$ms:.3f}')")); held from the client's address $(rate "$mo") Gbit/s (ratio $(python3 -c "print(f'{$ma/$mo:.3f}')"))"
say "A server max RSS $(( $(max_of "$WORK/rss-a.txt" 1) / 1024 )) MiB, max threads $(max_of "$WORK/rss-a.txt" 2)"
sum_of() { grep -o "[0-9]* $1" "$WORK/serve-a.log" | awk '{s+=$1} END{print s+0}'; }
say "A server log: $(grep -c 'in their handshake' "$WORK/serve-a.log" || true) summaries: $(sum_of evicted) evicted, $(sum_of 'past their deadline') expired, $(sum_of 'closed by their peer') closed by their peer; $(grep -c 'WARN' "$WORK/serve-a.log" || true) warning lines in all"

# ---------------------------------------------------------------- B: 48 clients at once, --retry
hold b "$HELD" "$(seq -s, -f '127.0.0.%g' 1 9)" 500; wait_held b "$HELD"; sleep 1
t0=$(date +%s.%N)
cpids=()
for i in $(seq "$CLIENTS"); do
    timeout 600 "$ZCP" send -q --retry 8 --retry-wait 1 -p "$PORT" --key-file "$WORK/key" \
        "$WORK/src/c$i.bin" "127.0.0.1::b/c$i.bin" >"$WORK/client-$i.log" 2>&1 &
    cpids+=($!)
done
ok=0; failed=0
for p in "${cpids[@]}"; do if wait "$p"; then ok=$((ok + 1)); else failed=$((failed + 1)); fi; done
t1=$(date +%s.%N)
stop_hold
exact=0
for i in $(seq "$CLIENTS"); do cmp -s "$WORK/src/c$i.bin" "$WORK/root/b/c$i.bin" && exact=$((exact + 1)); done
busy=$(grep -c "too many sessions" "$WORK/serve-a.log" || true)
say "B $CLIENTS clients with --retry under $HELD held connections: $ok exit 0, $failed failed, $exact byte-exact; $busy sessions refused as busy (--max-sessions 16) and retried; $(python3 -c "print(f'{$t1-$t0:.1f}')") s"
say "B server max RSS $(( $(max_of "$WORK/rss-a.txt" 1) / 1024 )) MiB (A and B), max threads $(max_of "$WORK/rss-a.txt" 2)"
kill "$SPID"; wait "$SPID" 2>/dev/null || true

# ---------------------------------------------------------------- C: 10,000 pending
start_server c --max-pending 16384 --max-pending-per-source 16384 --handshake-timeout 120
sample "$SPID" "$WORK/rss-c.txt" &
pids+=($!)
base=$(awk '/^VmRSS:/{print $2}' "/proc/$SPID/status")
hold c "$PENDING" "$(seq -s, -f '127.0.0.%g' 10 49)" 0; wait_held c "$PENDING"; sleep 2
held_rss=$(awk '/^VmRSS:/{print $2}' "/proc/$SPID/status")
held_thr=$(awk '/^Threads:/{print $2}' "/proc/$SPID/status")
fds=$(ls "/proc/$SPID/fd" | wc -l)
t=$(one_send)
say "C $PENDING pending ($(tail -1 "$WORK/hold-c.jsonl")): server RSS $((base / 1024)) -> $((held_rss / 1024)) MiB, $held_thr threads, $fds descriptors; a ${SIZE} MiB send meanwhile: ${t} s ($(rate "$t") Gbit/s)"
stop_hold
say "C server max RSS $(( $(max_of "$WORK/rss-c.txt" 1) / 1024 )) MiB, max threads $(max_of "$WORK/rss-c.txt" 2)"
say "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "$OUT" ]; then
    mkdir -p "$OUT"
    cp "$LOG" "$WORK"/hold-*.jsonl "$WORK"/rss-*.txt "$OUT"/
    grep -v " INFO " "$WORK/serve-a.log" >"$OUT/serve-a-warnings.log" || true
fi
