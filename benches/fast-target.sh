#!/usr/bin/env bash
# zcp into a memory-backed destination (tmpfs) against iperf3, rsync, GridFTP and scp (issue 13).
#
#   benches/fast-target.sh [-n REPS] [-s SIZE] [-d DIR] [-o OUTDIR] [-k KINDS] [-b ZCP] [-c]
#                          [-G 'GLOBUS-URL-COPY OPTIONS'] [-P]
#
# -P pins every tool alike, the shape of two hosts (issue 27): each sending client to CPU 0 and
# each receiving server or daemon (zcp serve, iperf3 -s, the rsync daemon, globus-gridftp-server,
# sshd; their sessions inherit it) to CPU 1, with taskset; the table then adds issue 27's
# pinned goals.
#
# A page-cached SIZE (default 2G) file of random bytes in DIR (default /var/tmp/zcp-bench, must
# be on a disk, not tmpfs) goes over loopback into tmpfs: a `mount -t tmpfs` of our own under
# the work directory when root, else /dev/shm (the table says which). Each repetition runs
# every kind once, in an order rotated by 1/REPS of the list per repetition (so drift and
# position hit all alike; one unrecorded zcp transfer first), into a fresh directory per tool,
# emptied after each run:
#   iperf3_z     iperf3 -s -1 -F DEST / iperf3 -c -F SRC -Z (no -n: -F sends the file's size):
#                the issue's baseline. iperf3 3.12 with -Z does not send SRC: it sendfile()s its
#                own buffer file (zeros), while SRC is read into a MAP_PRIVATE mapping of that
#                file which sendfile never sees. The receiver also keeps fewer bytes than were
#                sent (0.98..0.998 here). The table shows the fraction kept and the content.
#   iperf3_f     the same without -Z (read/write): it does send SRC, a prefix of it.
#   rsync        `rsync -a SRC rsync://127.0.0.1:PORT/bench/out.bin` to an rsync daemon on
#                loopback, as users run it. Not whole-file: rsync's --whole-file default is for
#                local-to-local only; against a daemon the delta algorithm runs, with no basis
#                file here (nothing to match); the file is checked end to end with the
#                negotiated checksum (xxh128 for 3.2.7, in setup.txt) and renamed into place.
#   gridftp_p1/_p4  globus-url-copy -p 1 / -p 4 (MODE E, 1 or 4 data connections; extra
#                options with -G) to globus-gridftp-server on 127.0.0.1, anonymous (-aa). As root
#                the server needs -anonymous-user: the session runs as `nobody`, so the work
#                directory is made traversable (0711) and the destination owned by nobody. The
#                system's /etc/gridftp.conf is replaced by an empty -c file. No checksum (no
#                -verify-checksum), as GridFTP runs by default. The table adds the better of
#                the two per repetition.
#   scp          scp to `/usr/sbin/sshd -f CONFIG -D` on 127.0.0.1, its own port, a throwaway
#                ed25519 host key and user key in the work directory; default cipher (the one
#                negotiated is in setup.txt: chacha20-poly1305 with OpenSSH 9.2) and scp's
#                default protocol (SFTP since OpenSSH 9.0). sshd needs /run/sshd: created (and
#                removed afterwards) when missing and root.
#   zcp_auto     zcp send defaults: verified, --recv-engine auto (the engine it chose is shown)
#   zcp_splice, zcp_rw, zcp_direct   explicit receiver engines (direct: the table shows the
#                engine the receiver reported; tmpfs takes O_DIRECT since Linux 6.6)
#   zcp_mem      verified, not stored; zcp_null: not verified, not stored (the network ceiling)
#   zcp_noverify --verify none, when `zcp send --help` offers it
# Peers: throughput is bytes kept / wall time from start to the client's exit (iperf3: to both
# ends' exit); CPU is the client's user+sys (/usr/bin/time, children included) and the
# server's (one-shot iperf3 under /usr/bin/time; daemons: their utime+stime+cutime+cstime in
# /proc, before and after, once the session's process is reaped; not for sshd when not root,
# whose sessions' CPU does not reach the listener). zcp: Gbit/s and CPU of each
# side from -J, plus the same wall-time figure. Every stored output is checked: its size
# against the source (a warning when short) and its content, sampled (1 MiB at start, middle
# and end of what was kept) or whole with -c. Prints medians (min..max) and the goals of issue
# 13 as ratios with met / NOT met; writes raw.jsonl, table.txt and setup.txt (tool versions,
# negotiated ssh cipher and rsync checksum, load average) to OUTDIR when given.
# -k picks kinds (comma list of the names above, default all); -b uses a built zcp binary
# instead of `cargo build --release`; -G 'OPTS' adds options to both globus-url-copy runs.
# Needs: iperf3 rsync ssh scp sshd globus-url-copy globus-gridftp-server /usr/bin/time python3
#   apt-get install iperf3 rsync openssh-client openssh-server globus-gass-copy-progs \
#     globus-gridftp-server-progs time python3 iproute2
# About 1 minute per repetition at 2G on 2 vCPUs (scp is the longest).
set -euo pipefail

REPS=3
SIZE=2G
DIR=/var/tmp/zcp-bench
OUT=""
KINDS=""
ZCP=""
FULL=0
GUC_OPTS=""
PIN=0
TMO=600 # seconds any one client may run before it is killed and the run recorded as failed
while getopts "n:s:d:o:k:b:cG:Ph" opt; do
    case $opt in
        n) REPS=$OPTARG ;;
        s) SIZE=$OPTARG ;;
        d) DIR=$OPTARG ;;
        o) OUT=$OPTARG ;;
        k) KINDS=$OPTARG ;;
        b) ZCP=$OPTARG ;;
        c) FULL=1 ;;
        G) GUC_OPTS=$OPTARG ;;
        P) PIN=1 ;;
        *) sed -n '2,62p' "$0"; exit 2 ;;
    esac
done
# -P: what runs each side (empty: unpinned).
SEND=() RECV=()
if [ $PIN -eq 1 ]; then
    command -v taskset >/dev/null || { echo "fast-target.sh: -P needs taskset (apt-get install util-linux)" >&2; exit 2; }
    [ "$(nproc)" -ge 2 ] || { echo "fast-target.sh: -P needs 2 CPUs" >&2; exit 2; }
    SEND=(taskset -c 0) RECV=(taskset -c 1)
fi
BYTES=$(numfmt --from=iec "$SIZE") || { echo "fast-target.sh: -s $SIZE is not a size (e.g. 256M, 2G)" >&2; exit 2; }
[ "$BYTES" -ge $((1 << 20)) ] || { echo "fast-target.sh: -s $SIZE is under 1M" >&2; exit 2; }

ALL=(zcp_auto iperf3_z zcp_splice rsync zcp_rw gridftp_p1 zcp_direct gridftp_p4 zcp_mem scp zcp_null iperf3_f zcp_noverify)
ORDER=()
if [ -z "$KINDS" ]; then
    ORDER=("${ALL[@]}")
else
    IFS=, read -ra wanted <<<"$KINDS"
    for k in "${wanted[@]}"; do
        [[ " ${ALL[*]} " == *" $k "* ]] || { echo "fast-target.sh: -k: unknown kind $k (one of: ${ALL[*]})" >&2; exit 2; }
    done
    for k in "${ALL[@]}"; do [[ ",$KINDS," == *",$k,"* ]] && ORDER+=("$k"); done
fi
has() { [[ " ${ORDER[*]} " == *" $1"* ]]; } # has iperf3 / has gridftp / has zcp_rw ...

# Fail early, naming the package, when a tool is missing.
need() { # command package
    command -v "$1" >/dev/null || { echo "fast-target.sh: $1 is required (apt-get install $2)" >&2; exit 2; }
}
need python3 python3
need /usr/bin/time time
need ss iproute2
need numfmt coreutils
if has iperf3; then need iperf3 iperf3; fi
if has rsync; then need rsync rsync; fi
if has gridftp; then
    need globus-url-copy globus-gass-copy-progs
    need globus-gridftp-server globus-gridftp-server-progs
fi
if has scp; then
    need scp openssh-client
    need ssh-keygen openssh-client
    need /usr/sbin/sshd openssh-server
fi
ROOT=0
[ "$(id -u)" -eq 0 ] && ROOT=1
if has scp && [ ! -d /run/sshd ] && [ $ROOT -eq 0 ]; then
    echo "fast-target.sh: sshd needs /run/sshd; run as root or create it (mkdir -m 755 /run/sshd)" >&2
    exit 2
fi

cd "$(dirname "$0")/.."
if [ -z "$ZCP" ]; then
    cargo build --release --quiet
    ZCP=target/release/zcp
fi
ZCP=$(realpath "$ZCP")
[ -x "$ZCP" ] || { echo "fast-target.sh: $ZCP is not an executable" >&2; exit 2; }
NOVERIFY=0
"$ZCP" send --help | grep -q -- '--verify' && NOVERIFY=1
if [ $NOVERIFY -eq 0 ] && has zcp_noverify; then
    echo "== this zcp has no --verify option: zcp_noverify skipped"
    ORDER=("${ORDER[@]/zcp_noverify/}")
    read -ra ORDER <<<"${ORDER[*]}"
fi

mkdir -p "$DIR"
WORK=$(mktemp -d "$DIR/fast.XXXXXX")
fstype() { df --output=fstype "$1" | tail -1; }
srcfs=$(fstype "$WORK")
pids=()
MOUNTED=""
MADE_RUN_SSHD=0
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ -n "$MOUNTED" ]; then umount "$MOUNTED" 2>/dev/null || umount -l "$MOUNTED" 2>/dev/null || true; fi
    rm -rf "$WORK"
    if [ -n "${SHMDIR:-}" ]; then rm -rf "$SHMDIR"; fi
    if [ $MADE_RUN_SSHD -eq 1 ]; then rmdir /run/sshd 2>/dev/null || true; fi
}
trap cleanup EXIT
# A signal ends the run once the command in hand returns (each is bounded by timeout), through
# the EXIT trap: servers stopped, the tmpfs unmounted, the work directory removed.
trap 'echo "fast-target.sh: interrupted" >&2; exit 130' INT
trap 'echo "fast-target.sh: terminated" >&2; exit 143' TERM
if [ "$srcfs" = tmpfs ] || [ "$srcfs" = ramfs ]; then
    echo "fast-target.sh: $DIR is on $srcfs; -d must be on a disk (the source is read from there)" >&2
    exit 2
fi

# The destination: our own tmpfs when root, else a directory in /dev/shm.
if [ $ROOT -eq 1 ]; then
    DST=$WORK/dst
    mkdir "$DST"
    mount -t tmpfs -o size=$((BYTES * 2 + (256 << 20))),mode=0755 zcp-fast "$DST"
    MOUNTED=$DST
    DSTDESC="tmpfs mounted for this run at $DST (size $(numfmt --to=iec $((BYTES * 2 + (256 << 20)))))"
else
    SHMDIR=$(mktemp -d /dev/shm/zcp-fast.XXXXXX)
    DST=$SHMDIR
    DSTDESC="/dev/shm ($(fstype /dev/shm)), directory $DST"
fi
[ "$(fstype "$DST")" = tmpfs ] || { echo "fast-target.sh: $DST is not tmpfs" >&2; exit 2; }
chmod 0711 "$WORK"
RAW=$WORK/raw.jsonl
SRC=$WORK/src.bin
echo "== setup: $SIZE source in $WORK ($srcfs); destination $DSTDESC; ${#ORDER[@]} kinds x $REPS repetitions"
head -c "$BYTES" /dev/urandom >"$SRC"
sync

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
listening() { ss -ltnH "sport = :$1" | grep -q .; }
wait_listen() { # port what
    for _ in $(seq 100); do listening "$1" && return 0; sleep 0.05; done
    echo "fast-target.sh: $2 is not listening on 127.0.0.1:$1" >&2
    exit 1
}
proc_cpu() { # seconds of CPU a process and its reaped children used
    sed 's/.*) //' "/proc/$1/stat" | awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($12 + $13 + $14 + $15) / hz}'
}
reaped() { # pid: wait (at most 10 s) until the daemon has no child left (the session ended)
    for _ in $(seq 200); do pgrep -P "$1" >/dev/null || return 0; sleep 0.05; done
    echo "   warning: a session of daemon $1 is still running after 10 s" >&2
}
emptied() { find "$1" -mindepth 1 -delete; }
SETUP=$WORK/setup.txt
: >"$SETUP"

for d in zcp iperf3 rsync gridftp scp; do mkdir -p "$DST/$d"; done
"$ZCP" keygen -o "$WORK/key" 2>/dev/null
"${RECV[@]}" "$ZCP" serve --root "$DST/zcp" --bind 127.0.0.1 -p 0 --key-file "$WORK/key" >"$WORK/serve.out" 2>"$WORK/serve.log" &
pids+=($!)
for _ in $(seq 50); do grep -q listening "$WORK/serve.out" 2>/dev/null && break; sleep 0.1; done
ZPORT=$(sed -n 's/.*listening on [^:]*:\([0-9]*\),.*/\1/p' "$WORK/serve.out")
[ -n "$ZPORT" ] || { echo "fast-target.sh: zcp serve did not start" >&2; cat "$WORK/serve.log" >&2; exit 1; }

if has iperf3; then IPORT=$(free_port); fi

if has rsync; then
    RPORT=$(free_port)
    {
        echo "use chroot = no"
        echo "[bench]"
        echo "    path = $DST/rsync"
        echo "    read only = false"
        if [ $ROOT -eq 1 ]; then echo "    uid = 0"; echo "    gid = 0"; fi
    } >"$WORK/rsyncd.conf"
    "${RECV[@]}" rsync --daemon --no-detach --config="$WORK/rsyncd.conf" --port="$RPORT" --address=127.0.0.1 \
        --log-file="$WORK/rsyncd.log" &
    RSYNCD=$!
    pids+=("$RSYNCD")
    wait_listen "$RPORT" "the rsync daemon"
    head -c 4096 /dev/urandom >"$WORK/probe.bin"
    echo "rsync checksum: $(rsync --debug=nstr "$WORK/probe.bin" "rsync://127.0.0.1:$RPORT/bench/probe.bin" 2>&1 |
        sed -n 's/.*negotiated checksum: //p' | head -1)" >>"$SETUP"
    emptied "$DST/rsync"
fi

if has gridftp; then
    GPORT=$(free_port)
    : >"$WORK/gridftp.conf"
    anon=()
    if [ $ROOT -eq 1 ]; then
        anon=(-anonymous-user nobody)
        chown nobody: "$DST/gridftp"
    fi
    "${RECV[@]}" globus-gridftp-server -c "$WORK/gridftp.conf" -aa "${anon[@]}" -p "$GPORT" \
        -control-interface 127.0.0.1 -data-interface 127.0.0.1 -rp "$DST/gridftp" \
        -d error,warn,info -l "$WORK/gridftp.log" -disable-usage-stats >"$WORK/gridftp.out" 2>&1 &
    GRIDFTPD=$!
    pids+=("$GRIDFTPD")
    wait_listen "$GPORT" "globus-gridftp-server"
fi

if has scp; then
    SPORT=$(free_port)
    S=$WORK/ssh
    mkdir -m 700 "$S"
    ssh-keygen -q -t ed25519 -N '' -f "$S/host" -C zcp-bench-host
    ssh-keygen -q -t ed25519 -N '' -f "$S/user" -C zcp-bench-user
    cp "$S/user.pub" "$S/authorized_keys"
    cat >"$S/sshd_config" <<EOF
Port $SPORT
ListenAddress 127.0.0.1
HostKey $S/host
AuthorizedKeysFile $S/authorized_keys
PidFile none
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp /usr/lib/openssh/sftp-server
EOF
    if [ ! -d /run/sshd ]; then mkdir -m 755 /run/sshd; MADE_RUN_SSHD=1; fi
    "${RECV[@]}" /usr/sbin/sshd -f "$S/sshd_config" -D -e 2>"$WORK/sshd.log" &
    SSHD=$!
    pids+=("$SSHD")
    wait_listen "$SPORT" "sshd"
    SSHO=(-F /dev/null -i "$S/user" -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=no
        -o UserKnownHostsFile="$S/known_hosts")
    echo "ssh cipher: $(ssh "${SSHO[@]}" -v -p "$SPORT" 127.0.0.1 true 2>&1 |
        sed -n 's/.*kex: client->server cipher: \([^ ]*\).*/\1/p' | head -1)" >>"$SETUP"
    echo "scp protocol: SFTP (the OpenSSH 9 default; -O would be the legacy protocol)" >>"$SETUP"
fi

warm() { cat "$SRC" >/dev/null; }

# check OUTFILE: "kept content" of a stored output against the source
check() {
    python3 - "$SRC" "$1" "$FULL" <<'PY'
import os, sys
src, out, full = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
if not os.path.exists(out):
    print(0, "missing")
    sys.exit()
kept, size, M = os.path.getsize(out), os.path.getsize(src), 1 << 20
if kept == 0:
    print(0, "empty")
    sys.exit()
with open(src, "rb") as a, open(out, "rb") as b:
    if full:
        offsets = range(0, kept, 8 * M)
        n = 8 * M
    else:
        offsets = sorted({0, max(0, kept // 2 - M // 2), max(0, kept - M)})
        n = M
    same, zeros = True, True
    for o in offsets:
        a.seek(o); b.seek(o)
        x, y = a.read(min(n, kept - o)), b.read(min(n, kept - o))
        same &= x == y
        zeros &= y.count(0) == len(y)
content = ("file" if kept == size else "prefix") if same else ("zeros" if zeros else "differs")
print(kept, content)
PY
}

record() { # kind rep slot rc wall kept content client_cpu server_cpu toolfile
    python3 - "$@" "$BYTES" "$FULL" >>"$RAW" <<'PY'
import json, sys
kind, rep, slot, rc, wall, kept, content, ccpu, scpu, tool, size, full = sys.argv[1:13]
doc = None
try:
    with open(tool) as f:
        doc = json.load(f)
except (OSError, ValueError):
    pass
num = lambda s: float(s) if s not in ("", "-") else None
print(json.dumps({"kind": kind, "rep": int(rep), "slot": int(slot), "rc": int(rc), "wall": float(wall),
                  "size": int(size), "kept": int(kept), "content": content,
                  "checked": "whole" if full == "1" else "sampled",
                  "cpu": {"client": num(ccpu), "server": num(scpu)}, "tool": doc}))
PY
}

# One run of one kind; fills RC WALL CCPU SCPU TOOL and the output file OUTF (or "").
run_kind() { # kind
    local k=$1 t0 t1 pre srv
    RC=0 CCPU=- SCPU=- TOOL=/dev/null OUTF=""
    : >"$WORK/client.time"
    case $k in
        zcp_*)
            local args=()
            case $k in
                zcp_auto) ;;
                zcp_noverify) args=(--verify none) ;;
                *) args=(--recv-engine "${k#zcp_}") ;;
            esac
            TOOL=$WORK/zcp.json
            t0=$EPOCHREALTIME
            timeout -k 5 $TMO "${SEND[@]}" "$ZCP" send -p "$ZPORT" --key-file "$WORK/key" -J -i 0 "${args[@]}" \
                "$SRC" 127.0.0.1::out.bin >"$TOOL" 2>"$WORK/client.err" || RC=$?
            t1=$EPOCHREALTIME
            OUTF=$DST/zcp/out.bin
            ;;
        iperf3_*)
            local z=()
            [ "$k" = iperf3_z ] && z=(-Z)
            /usr/bin/time -f '%U %S' -o "$WORK/server.time" \
                timeout -k 5 $TMO "${RECV[@]}" iperf3 -s -1 -B 127.0.0.1 -p "$IPORT" -F "$DST/iperf3/out.bin" \
                >/dev/null 2>"$WORK/iperf3-server.err" &
            srv=$!
            wait_listen "$IPORT" "iperf3 -s"
            TOOL=$WORK/iperf3.json
            t0=$EPOCHREALTIME
            /usr/bin/time -f '%U %S' -o "$WORK/client.time" timeout -k 5 $TMO \
                "${SEND[@]}" iperf3 -c 127.0.0.1 -p "$IPORT" -F "$SRC" "${z[@]}" -J >"$TOOL" 2>"$WORK/client.err" || RC=$?
            # a client that failed leaves the one-shot server waiting: stop it (timeout passes
            # the signal on to iperf3)
            if [ $RC -ne 0 ]; then kill "$(pgrep -P "$srv")" 2>/dev/null || true; fi
            wait "$srv" || { [ $RC -ne 0 ] || RC=$?; }
            t1=$EPOCHREALTIME
            SCPU=$(awk '/^[0-9.]+ [0-9.]+$/ {print $1 + $2}' "$WORK/server.time")
            [ -n "$SCPU" ] || SCPU=-
            OUTF=$DST/iperf3/out.bin
            ;;
        rsync | gridftp_* | scp)
            local cmd pid dir
            case $k in
                rsync) pid=$RSYNCD dir=rsync cmd=(rsync -a "$SRC" "rsync://127.0.0.1:$RPORT/bench/out.bin") ;;
                scp) pid=$SSHD dir=scp cmd=(scp "${SSHO[@]}" -P "$SPORT" "$SRC" "127.0.0.1:$DST/scp/out.bin") ;;
                gridftp_*)
                    pid=$GRIDFTPD dir=gridftp
                    # shellcheck disable=SC2206 # -G is a list of options
                    cmd=(globus-url-copy -p "${k#gridftp_p}" $GUC_OPTS "file://$SRC" "ftp://127.0.0.1:$GPORT$DST/gridftp/out.bin")
                    ;;
            esac
            pre=$(proc_cpu "$pid")
            t0=$EPOCHREALTIME
            /usr/bin/time -f '%U %S' -o "$WORK/client.time" timeout -k 5 $TMO "${SEND[@]}" "${cmd[@]}" \
                >"$WORK/client.out" 2>"$WORK/client.err" || RC=$?
            t1=$EPOCHREALTIME
            reaped "$pid"
            SCPU=$(awk -v a="$pre" -v b="$(proc_cpu "$pid")" 'BEGIN {printf "%.2f", b - a}')
            # sshd not run as root does not hand its sessions' CPU on to the listener (measured:
            # 0.04 s/GiB against 3.4 as root): not measured rather than wrong
            if [ "$k" = scp ] && [ $ROOT -eq 0 ]; then SCPU=-; fi
            OUTF=$DST/$dir/out.bin
            ;;
    esac
    WALL=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.6f", b - a}')
    if [[ $k != zcp_* ]]; then
        CCPU=$(awk '/^[0-9.]+ [0-9.]+$/ {print $1 + $2}' "$WORK/client.time")
        [ -n "$CCPU" ] || CCPU=-
    fi
}

# One unrecorded zcp transfer, so that no recorded run is the first into the fresh tmpfs.
echo "== warm-up (not recorded): one zcp transfer into the tmpfs"
warm
timeout -k 5 $TMO "$ZCP" send -p "$ZPORT" --key-file "$WORK/key" -q "$SRC" 127.0.0.1::warm-up.bin ||
    { echo "fast-target.sh: the warm-up transfer failed" >&2; exit 1; }
find "$DST" -mindepth 2 -delete

for rep in $(seq "$REPS"); do
    n=${#ORDER[@]}
    off=$(((rep - 1) * n / REPS))
    echo "== repetition $rep/$REPS (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    python3 -c 'import json,sys; print(json.dumps({"kind": "load", "rep": int(sys.argv[1]), "loadavg": sys.argv[2]}))' \
        "$rep" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW"
    for i in $(seq 0 $((n - 1))); do
        k=${ORDER[$(((i + off) % n))]}
        warm
        sync
        run_kind "$k"
        kept=0 content="not stored"
        if [ -f "$OUTF" ]; then
            read -r kept content < <(check "$OUTF")
        elif [ "$k" != zcp_mem ] && [ "$k" != zcp_null ]; then
            content=missing
        fi
        record "$k" "$rep" "$i" "$RC" "$WALL" "$kept" "$content" "$CCPU" "$SCPU" "$TOOL"
        moved=$kept
        [ "$content" != "not stored" ] || moved=$BYTES
        line=$(printf '   %-13s %8.2f s  %6.2f Gbit/s wall  kept %s  %s' "$k" "$WALL" \
            "$(awk -v b="$moved" -v w="$WALL" 'BEGIN {printf "%.2f", b * 8 / w / 1e9}')" "$kept" "$content")
        echo "$line"
        if [ "$RC" -ne 0 ]; then
            echo "   warning: $k exited $RC: $(tail -c 600 "$WORK/client.err" | tr '\n' ' ')" >&2
        fi
        if [ "$content" != "not stored" ] && [ "$kept" -ne "$BYTES" ]; then
            echo "   warning: $k kept $kept of $BYTES bytes" >&2
        fi
        if [ "$content" != "not stored" ] && [ "$content" != file ] && [ "$content" != prefix ]; then
            echo "   warning: $k: the bytes kept are not the source's ($content)" >&2
        fi
        find "$DST" -mindepth 2 -delete
    done
done
python3 -c 'import json,sys; print(json.dumps({"kind": "load", "rep": int(sys.argv[1]), "loadavg": sys.argv[2]}))' \
    "$((REPS + 1))" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW"

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "kernel: $(uname -r)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
    echo "memory: $(free -g | awk '/Mem:/ {print $2}') GiB"
    echo "source: $SRC on $srcfs ($(df --output=source "$WORK" | tail -1)), page-cached before each run"
    echo "destination: $DSTDESC"
    cmdline="benches/fast-target.sh -n $REPS -s $SIZE -d $DIR"
    [ -z "$KINDS" ] || cmdline+=" -k $KINDS"
    [ -z "$GUC_OPTS" ] || cmdline+=" -G \"$GUC_OPTS\""
    [ $FULL -eq 0 ] || cmdline+=" -c"
    [ $PIN -eq 0 ] || cmdline+=" -P"
    echo "command: $cmdline"
    echo "pinned: $([ $PIN -eq 1 ] && echo 'yes: senders on CPU 0, receivers on CPU 1 (taskset)' || echo no)"
    echo "zcp: $("$ZCP" --version | head -1) ($ZCP); --verify option: $([ $NOVERIFY -eq 1 ] && echo yes || echo no)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)"
    if has iperf3; then echo "iperf3: $(iperf3 --version | head -1)"; fi
    if has rsync; then echo "rsync: $(rsync --version | head -1 | tr -s ' ')"; fi
    if has gridftp; then
        echo "globus-url-copy: $(globus-url-copy -version 2>&1 | head -1)${GUC_OPTS:+, options $GUC_OPTS}"
        echo "globus-gridftp-server: $(globus-gridftp-server -version 2>&1 | head -1)"
    fi
    if has scp; then echo "openssh: $(ssh -V 2>&1)"; fi
    echo "congestion control: $(cat /proc/sys/net/ipv4/tcp_congestion_control)"
} >>"$SETUP"

TABLE=$(python3 - "$RAW" "$SIZE" "$REPS" "$DSTDESC" "$SETUP" <<'PY'
import json, statistics, sys
raw, size, reps, dst, setup = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
runs, loads, failed = {}, [], []
for line in open(raw):
    r = json.loads(line)
    if r["kind"] == "load":
        loads.append(r["loadavg"])
    elif r["rc"] != 0:
        failed.append(r)
    else:
        runs.setdefault(r["kind"], []).append(r)
setup = dict(l.split(": ", 1) for l in open(setup).read().splitlines() if ": " in l)
GIB = 2**30

def wall(r):  # Gbit/s from the bytes kept (the source's size when not stored) over wall time
    b = r["kept"] if r["content"] != "not stored" else r["size"]
    return b * 8 / r["wall"] / 1e9

def tool(r):  # the tool's own figure, where it reports one
    d = r["tool"] or {}
    if r["kind"].startswith("zcp"):
        return d["end"]["sum"]["bits_per_second"] / 1e9
    if r["kind"].startswith("iperf3"):
        return d["end"]["sum_received"]["bits_per_second"] / 1e9
    return None

def cpu(r, side):  # CPU seconds per GiB of the source, sender (client) or receiver (server)
    if r["kind"].startswith("zcp"):
        c = r["tool"]["end"]["cpu"]["sender" if side == "client" else "receiver"]["total"]
    else:
        c = r["cpu"][side]
    return None if c is None else c / (r["size"] / GIB)

med = statistics.median
def rng(xs, f=".2f"):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    return f"{med(xs):{f}} ({min(xs):{f}}..{max(xs):{f}})" if len(xs) > 1 else f"{xs[0]:{f}}"

def m(kind, f=wall):
    return med([f(r) for r in runs[kind]]) if kind in runs else None

def engines(kind):
    out = set()
    for r in runs.get(kind, []):
        e = r["tool"]["start"]["engines"]
        out.add(e["receiver"] + (f" ({e['receiver_note']})" if e.get("receiver_note") else ""))
    return "; ".join(sorted(out))

cipher = setup.get("ssh cipher", "?")
LABEL = {
    "iperf3_z": "iperf3 -F -Z (sends zeros, see content)",
    "iperf3_f": "iperf3 -F (read/write, sends the file)",
    "rsync": "rsync -a to an rsync daemon",
    "gridftp_p1": "GridFTP globus-url-copy -p 1",
    "gridftp_p4": "GridFTP globus-url-copy -p 4",
    "gridftp_best": "GridFTP, better of -p 1/-p 4 per repetition",
    "scp": f"scp (SFTP, {cipher})",
    "zcp_auto": "zcp defaults: verified, auto",
    "zcp_splice": "zcp --recv-engine splice",
    "zcp_rw": "zcp --recv-engine rw",
    "zcp_direct": "zcp --recv-engine direct",
    "zcp_mem": "zcp --recv-engine mem (verified, not stored)",
    "zcp_null": "zcp --recv-engine null (not verified/stored)",
    "zcp_noverify": "zcp --verify none",
}
if "gridftp_p1" in runs and "gridftp_p4" in runs:
    best = []
    for rep in sorted({r["rep"] for r in runs["gridftp_p1"]} & {r["rep"] for r in runs["gridftp_p4"]}):
        pair = [r for k in ("gridftp_p1", "gridftp_p4") for r in runs[k] if r["rep"] == rep]
        best.append(max(pair, key=wall))
    runs["gridftp_best"] = best

lines = []
p = lines.append
p(f"fast-target benchmark: {size} page-cached source over loopback into {dst}")
p(f"{reps} interleaved repetitions, rotating order; load average {' -> '.join(l.split()[0] for l in loads)}")
p("medians (min..max); wall: bytes kept / time from start to exit; CPU s/GiB of the source")
W = 46
p("")
p(f"  {'':<{W}}{'wall Gbit/s':<22}{'own Gbit/s':<22}{'CPU send':<19}{'CPU recv':<19}{'kept':<8}content")
for k in LABEL:
    if k not in runs:
        continue
    rs = runs[k]
    kept = [r["kept"] / r["size"] for r in rs if r["content"] != "not stored"]
    contents = ",".join(sorted({r["content"] for r in rs}))
    checked = f" ({rs[0]['checked']})"
    p(f"  {LABEL[k]:<{W}}{rng([wall(r) for r in rs]):<22}{rng([tool(r) for r in rs]):<22}"
      f"{rng([cpu(r, 'client') for r in rs]):<19}{rng([cpu(r, 'server') for r in rs]):<19}"
      f"{(format(med(kept), '.4f') if kept else '—'):<8}{contents}{checked if kept else ''}")
p("")
p("zcp: receiver engine as reported; seconds of wall time outside zcp's own timed transfer")
p("(process start, connect, handshake, preallocation, commit, exit)")
for k in LABEL:
    if k.startswith("zcp") and k in runs:
        gap = [r["wall"] - r["tool"]["end"]["sum"]["seconds"] for r in runs[k]]
        p(f"  {LABEL[k]:<{W}}{rng(gap):<22}{engines(k)}")

def verdict(ok):
    return "met" if ok else "NOT met"

def ratio(label, a, b, goal=None, note=""):
    if a is None or b is None:
        p(f"  {label:<{W}}   n/a (not run)")
        return
    v = a / b
    g = f"   goal >= {goal:.2f}  {verdict(v >= goal)}" if goal is not None else ""
    p(f"  {label:<{W}}{v:7.2f}{g}{note}")

p("")
p("goals of issue 13 (ratios of medians)")
v = m("zcp_auto")
p(" into tmpfs, verified (zcp defaults), wall-time throughput against each peer")
ratio("verified / iperf3 -F -Z", v, m("iperf3_z"), 2.0)
ratio("verified / GridFTP (better of -p 1/4)", v, m("gridftp_best"), 2.0)
ratio("verified / rsync daemon", v, m("rsync"), 3.0)
ratio("verified / scp", v, m("scp"), 6.0)
ratio("verified / iperf3 -F (no -Z; not a goal)", v, m("iperf3_f"))
p(" zcp by receiver engine, zcp's own Gbit/s (wall-time ratio beside it)")
own = lambda k: m(k, tool)
def both(label, a, b, goal=None):
    note = f"   (wall: {m(a) / m(b):.2f})" if a in runs and b in runs else ""
    ratio(label, own(a), own(b), goal, note)
both("verified (auto) / mem", "zcp_auto", "zcp_mem", 0.8)
explicit = [k for k in ("zcp_splice", "zcp_rw", "zcp_direct") if k in runs]
explicit = [k for k in explicit if all(r["tool"]["start"]["engines"]["receiver"] == k[4:] for r in runs[k])]
if explicit:
    bestk = max(explicit, key=own)
    both(f"auto / best explicit engine ({bestk[4:]})", "zcp_auto", bestk, 0.95)
else:
    ratio("auto / best explicit engine", None, None)
both("verified (auto) / null", "zcp_auto", "zcp_null")
if "zcp_noverify" in runs:
    both("verified (auto) / --verify none", "zcp_auto", "zcp_noverify")
if setup.get("pinned", "no").startswith("yes"):
    p("")
    p("goals of issue 27, pinned one CPU per side (ratios of medians, wall time)")
    ratio("verified / GridFTP -p 1", v, m("gridftp_p1"), 1.0)
    ratio("verified / --verify none", v, m("zcp_noverify"), 0.9)
if failed:
    p("")
    p("failed runs (not in the figures above)")
    for r in failed:
        p(f"  repetition {r['rep']} {r['kind']}: exit {r['rc']}")
short = [r for rs in runs.values() for r in rs if r["content"] != "not stored" and r["kept"] != r["size"]]
bad = [r for rs in runs.values() for r in rs if r["content"] not in ("not stored", "file", "prefix")]
if short or bad:
    p("")
    p("warnings")
    for r in {id(r): r for r in short + bad}.values():
        p(f"  repetition {r['rep']} {r['kind']}: kept {r['kept']} of {r['size']} bytes, content {r['content']}")
print("\n".join(lines))
PY
)
echo
echo "$TABLE"

if [ -n "$OUT" ]; then
    mkdir -p "$OUT"
    cp "$RAW" "$OUT/raw.jsonl"
    echo "$TABLE" >"$OUT/table.txt"
    cp "$SETUP" "$OUT/setup.txt"
    echo "results written to $OUT"
fi
if grep -q '"rc": [1-9]' "$RAW"; then
    echo "fast-target.sh: some runs failed (see above)" >&2
    exit 1
fi
