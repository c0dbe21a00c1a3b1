#!/usr/bin/env bash
# A two-host network testbed on one machine: network namespaces NAME-a and NAME-b joined by a
# veth pair, with a chosen MTU and an optional tbf rate limit. Needs root and iproute2.
#
#   testbed.sh up NAME [--mtu N] [--mtu-b N] [--rate RATE]
#       Creates the pair (removing any leftover of NAME first). NAME-a has 10.231.0.1 on dev
#       zcpa, NAME-b has 10.231.0.2 on dev zcpb; --mtu sets both ends (default 1500), --mtu-b
#       overrides NAME-b's end (a hop without jumbo frames); --rate (tc syntax: 1gbit, 400mbit)
#       shapes both directions with tbf. If any step fails, what was made is removed.
#   testbed.sh down NAME
#       Kills every process inside the namespaces and removes them (and with them the veth).
#   testbed.sh exec NAME a|b CMD...
#       Runs CMD inside one namespace.
#   testbed.sh show NAME
#       Addresses, MTUs and the qdisc counters of both ends.
#
# Only the two addresses above exist inside the namespaces; nothing is routed anywhere else.
set -euo pipefail

die() { echo "testbed: $*" >&2; exit 2; }
[ $# -ge 2 ] || die "usage: $0 up|down|exec|show NAME ..."
cmd=$1 name=$2
shift 2
[[ $name =~ ^[A-Za-z0-9_.-]{1,40}$ ]] || die "NAME must be 1-40 letters, digits, '.', '_' or '-'"
a="$name-a" b="$name-b"

down() {
    for ns in "$a" "$b"; do
        if ip netns list | grep -qw -- "^$ns"; then
            pids=$(ip netns pids "$ns" 2>/dev/null || true)
            [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
            ip netns del "$ns" 2>/dev/null || true
        fi
    done
}

case $cmd in
up)
    mtu=1500 mtu_b= rate=
    while [ $# -gt 0 ]; do
        case $1 in
        --mtu) mtu=${2:?--mtu needs a value}; shift 2 ;;
        --mtu-b) mtu_b=${2:?--mtu-b needs a value}; shift 2 ;;
        --rate) rate=${2:?--rate needs a value}; shift 2 ;;
        *) die "unknown option $1" ;;
        esac
    done
    mtu_b=${mtu_b:-$mtu}
    for m in "$mtu" "$mtu_b"; do
        [[ $m =~ ^[0-9]+$ ]] && [ "$m" -ge 1280 ] && [ "$m" -le 65535 ] ||
            die "MTU $m: give 1280 to 65535"
    done
    [ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
    command -v ip >/dev/null || die "needs iproute2 (ip)"
    down
    trap 'echo "testbed: setup failed; removing $name" >&2; down' ERR
    ip netns add "$a"
    ip netns add "$b"
    ip link add zcpa netns "$a" type veth peer name zcpb netns "$b"
    ip -n "$a" addr add 10.231.0.1/24 dev zcpa
    ip -n "$b" addr add 10.231.0.2/24 dev zcpb
    ip -n "$a" link set zcpa mtu "$mtu" up
    ip -n "$b" link set zcpb mtu "$mtu_b" up
    ip -n "$a" link set lo up
    ip -n "$b" link set lo up
    if [ -n "$rate" ]; then
        tc -n "$a" qdisc add dev zcpa root tbf rate "$rate" burst 1mb latency 100ms
        tc -n "$b" qdisc add dev zcpb root tbf rate "$rate" burst 1mb latency 100ms
    fi
    trap - ERR
    echo "testbed $name: $a 10.231.0.1 (zcpa, mtu $mtu) <-> $b 10.231.0.2 (zcpb, mtu $mtu_b)${rate:+, tbf $rate}"
    ;;
down) down ;;
exec)
    side=${1:-}
    shift || true
    case $side in a) ns=$a ;; b) ns=$b ;; *) die "exec NAME a|b CMD..." ;; esac
    [ $# -gt 0 ] || die "exec NAME a|b CMD..."
    exec ip netns exec "$ns" "$@"
    ;;
show)
    ip -n "$a" -br addr show dev zcpa; ip -n "$a" link show dev zcpa | head -1
    ip -n "$b" -br addr show dev zcpb; ip -n "$b" link show dev zcpb | head -1
    tc -n "$a" -s qdisc show dev zcpa; tc -n "$b" -s qdisc show dev zcpb
    ;;
*) die "unknown command $cmd (up, down, exec, show)" ;;
esac
