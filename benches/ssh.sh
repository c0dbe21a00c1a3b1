#!/usr/bin/env bash
# zcp over ssh against scp and rsync -e ssh, in one run, interleaved (hyperfine): an sshd of
# its own on 127.0.0.1 (throwaway host and user keys; root, as sshd needs), each tool logging in
# with the same key. Two cells:
#   small   a 1 KiB file: the time to start (ssh login, zcp's far side, the session) and finish
#   big     SIZE bytes (default 1G), page-cached, into a fresh name on the same filesystem
# Every run writes a new destination (removed before it), so nothing is resumed or skipped.
# zcp stores durably, verifies every byte and encrypts (the default over ssh; before issue 26
# part 3 it did not); scp and rsync encrypt through ssh and neither fsyncs nor proves the file.
# benches/encrypt.sh compares zcp encrypted and in clear, with CPU per GiB.
# Usage: benches/ssh.sh [RUNS] ; needs hyperfine, openssh-server, rsync; uses
# ./target/release/zcp.
set -euo pipefail
RUNS=${1:-5}
SIZE=${SIZE:-1G}
ZCP=$(realpath "${ZCP:-./target/release/zcp}")
for t in hyperfine /usr/sbin/sshd scp rsync ssh-keygen; do
    command -v "$t" >/dev/null || { echo "ssh.sh: needs $t" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "ssh.sh: needs root (sshd)" >&2; exit 2; }
W=$(mktemp -d /var/tmp/zcp-ssh-bench.XXXXXX)
trap '[ -f "$W/sshd.pid" ] && kill "$(cat "$W/sshd.pid")" 2>/dev/null; rm -rf "$W"' EXIT
. "$(dirname "$0")/sshd.sh"
mkdir -p "$W/there"
head -c 1024 /dev/urandom >"$W/small"
head -c "$(numfmt --from=iec "$SIZE")" /dev/urandom >"$W/big"
cat "$W/big" >/dev/null
echo "ssh.sh: $RUNS runs per tool and cell, $SIZE for big, sshd on 127.0.0.1:$PORT; $(nproc) cores"
for cell in small big; do
    hyperfine -N -w 1 -r "$RUNS" ${SHOW:+--show-output} --export-markdown "$W/$cell.md" \
        --prepare "sh -c 'rm -f $W/there/z-$cell; cat $W/$cell >/dev/null'" \
        --prepare "sh -c 'rm -f $W/there/s-$cell; cat $W/$cell >/dev/null'" \
        --prepare "sh -c 'rm -f $W/there/r-$cell; cat $W/$cell >/dev/null'" \
        -n "zcp (durable, verified, encrypted)" \
        "$ZCP send -q -e '$SSH' --remote-zcp $ZCP $W/$cell 127.0.0.1:$W/there/z-$cell" \
        -n "scp -O" \
        "scp -O -q $OPTS -P $PORT $W/$cell 127.0.0.1:$W/there/s-$cell" \
        -n "rsync -e ssh" \
        "rsync -e '$SSH' $W/$cell 127.0.0.1:$W/there/r-$cell" >/dev/null
    echo "== $cell"
    cat "$W/$cell.md"
    cmp "$W/$cell" "$W/there/z-$cell" && cmp "$W/$cell" "$W/there/s-$cell" &&
        cmp "$W/$cell" "$W/there/r-$cell"
done
