#!/usr/bin/env bash
# A two-host network testbed on one machine: network namespaces NAME-a and NAME-b joined by a
# veth pair, with a chosen MTU, an optional tbf rate limit, and optionally a delay line and
# random loss between them. Needs root and iproute2 (ethtool and the zcp-delay tool for
# --delay, nftables for --loss).
#
#   testbed.sh up NAME [--mtu N] [--mtu-b N] [--rate RATE] [--delay MS | --rtt MS] [--loss PCT]
#                      [--queue BYTES]
#       Creates the testbed (removing any leftover of NAME first). NAME-a has 10.231.0.1 on
#       dev zcpa, NAME-b has 10.231.0.2 on dev zcpb; --mtu sets both ends (default 1500),
#       --mtu-b overrides NAME-b's end (a hop without jumbo frames); --rate (tc syntax: 1gbit,
#       400mbit) shapes both directions with tbf on zcpa and zcpb. If any step fails, what
#       was made is removed.
#       --delay MS (one way, each direction: RTT = 2 x MS; fractions allowed) or --rtt MS
#       (halved into --delay) puts a middle namespace NAME-m between the two: zcpa <-> dla
#       (NAME-m) and dlb (NAME-m) <-> zcpb, with zcp-delay forwarding every Ethernet frame
#       between dla and dlb after the delay (layer 2: the /24 and the addresses stay as
#       they are). Its queue holds --queue bytes per direction (default 128 MiB) and drops
#       what does not fit. Frames towards NAME-b leave dlb segmented to the MTU (dlb has no
#       TSO/GSO), so NAME-b receives wire-sized packets as from a real link. zcp-delay is
#       found as $ZCP_DELAY, target/release/zcp-delay or target/debug/zcp-delay of this
#       checkout, or on PATH (build it: cargo build --release -p zcp-delay); its pid, log and
#       counters are kept in /run/zcp-testbed/NAME.
#       --loss PCT drops that share of the IP packets (0 to 100, fractions allowed) arriving
#       at zcpb, the NAME-a -> NAME-b direction only, with an nftables rule (numgen random)
#       in NAME-b's ingress hook: TCP and UDP alike, per wire packet. It implies the middle
#       namespace (with --delay 0 when none is given), since without it NAME-b would receive
#       TCP and UDP super-frames (up to 64 KiB) and one drop would cost dozens of packets.
#   testbed.sh down NAME
#       Kills every process inside the namespaces (the delay line too) and removes them (and
#       with them the veths) and NAME's state directory.
#   testbed.sh exec NAME a|b|m CMD...
#       Runs CMD inside one namespace.
#   testbed.sh show NAME
#       Addresses, MTUs and the qdisc counters of both ends; the delay, the delay line's
#       counters per direction and the loss rule's counter when there are.
#
# Only the two addresses above exist inside the namespaces; nothing is routed anywhere else.
set -euo pipefail

die() { echo "testbed: $*" >&2; exit 2; }
[ $# -ge 2 ] || die "usage: $0 up|down|exec|show NAME ..."
cmd=$1 name=$2
shift 2
[[ $name =~ ^[A-Za-z0-9_.-]{1,40}$ ]] || die "NAME must be 1-40 letters, digits, '.', '_' or '-'"
a="$name-a" b="$name-b" m="$name-m"
state="/run/zcp-testbed/$name"
here=$(cd "$(dirname "$0")/.." && pwd)

has_ns() { ip netns list | grep -qw -- "^$1"; }

down() {
    for ns in "$m" "$a" "$b"; do
        if has_ns "$ns"; then
            pids=$(ip netns pids "$ns" 2>/dev/null || true)
            [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
            ip netns del "$ns" 2>/dev/null || true
        fi
    done
    rm -rf -- "$state"
}

# A decimal number of milliseconds or percent: digits with at most 3 decimals.
decimal() { [[ $1 =~ ^[0-9]{1,6}(\.[0-9]{1,3})?$ ]]; }

find_delay_tool() {
    for t in "${ZCP_DELAY:-}" "$here/target/release/zcp-delay" "$here/target/debug/zcp-delay" \
        "$(command -v zcp-delay || true)"; do
        [ -n "$t" ] && [ -x "$t" ] && { echo "$t"; return; }
    done
    die "--delay needs the zcp-delay tool: cargo build --release -p zcp-delay (or set ZCP_DELAY)"
}

# The middle namespace with the delay line between zcpa and zcpb.
delay_line() {
    local delay=$1 queue=$2 tool=$3
    ip netns add "$m"
    ip link add zcpa netns "$a" type veth peer name dla netns "$m"
    ip link add dlb netns "$m" type veth peer name zcpb netns "$b"
    ip -n "$m" link set dla mtu "$mtu" promisc on up
    ip -n "$m" link set dlb mtu "$mtu_b" promisc on up
    ip -n "$m" link set lo up
    # Towards NAME-b frames leave at wire size: the kernel segments each super-frame the
    # delay line writes (per-packet loss at zcpb then means what it says).
    ip netns exec "$m" ethtool -K dlb tso off gso off tx-udp-segmentation off >/dev/null 2>&1 ||
        ip netns exec "$m" ethtool -K dlb tso off gso off >/dev/null
    mkdir -p "$state"
    ip netns exec "$m" setsid "$tool" --a dla --b dlb --delay "$delay" --queue-bytes "$queue" \
        --stats "$state/stats" </dev/null >"$state/log" 2>&1 &
    echo $! >"$state/pid"
    echo "$delay" >"$state/delay"
    for _ in $(seq 50); do
        [ -s "$state/stats" ] && return
        kill -0 "$(cat "$state/pid")" 2>/dev/null || break
        sleep 0.1
    done
    echo "testbed: zcp-delay did not start: $(cat "$state/log")" >&2
    down
    exit 2
}

loss_rule() {
    local pct=$1 ppm
    ppm=$(awk -v p="$pct" 'BEGIN { printf "%d", p * 10000 + 0.5 }')
    # All of them: no random number (nft takes none as large as the modulus).
    local pick="numgen random mod 1000000 < $ppm "
    [ "$ppm" -ge 1000000 ] && pick=
    ip netns exec "$b" nft -f - <<NFT
table netdev zcploss {
    chain ingress {
        type filter hook ingress device zcpb priority 0; policy accept;
        ether type { ip, ip6 } ${pick}counter drop
    }
}
NFT
    echo "$pct" >"$state/loss"
}

case $cmd in
up)
    mtu=1500 mtu_b= rate= delay= loss= queue=$((128 << 20))
    while [ $# -gt 0 ]; do
        case $1 in
        --mtu) mtu=${2:?--mtu needs a value}; shift 2 ;;
        --mtu-b) mtu_b=${2:?--mtu-b needs a value}; shift 2 ;;
        --rate) rate=${2:?--rate needs a value}; shift 2 ;;
        --delay) delay=${2:?--delay needs a value}; shift 2
            decimal "$delay" || die "--delay $delay: give milliseconds, e.g. 25 or 0.5" ;;
        --rtt) rtt=${2:?--rtt needs a value}; shift 2
            decimal "$rtt" || die "--rtt $rtt: give milliseconds, e.g. 50"
            delay=$(awk -v r="$rtt" 'BEGIN { printf "%.3f", r / 2 }') ;;
        --loss) loss=${2:?--loss needs a value}; shift 2
            decimal "$loss" && awk -v p="$loss" 'BEGIN { exit !(p <= 100) }' ||
                die "--loss $loss: give a percentage from 0 to 100, e.g. 1 or 0.1" ;;
        --queue) queue=${2:?--queue needs a value}; shift 2
            [[ $queue =~ ^[0-9]{4,12}$ ]] || die "--queue $queue: give bytes (1000 or more)" ;;
        *) die "unknown option $1" ;;
        esac
    done
    mtu_b=${mtu_b:-$mtu}
    for mv in "$mtu" "$mtu_b"; do
        [[ $mv =~ ^[0-9]+$ ]] && [ "$mv" -ge 1280 ] && [ "$mv" -le 65535 ] ||
            die "MTU $mv: give 1280 to 65535"
    done
    [ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
    command -v ip >/dev/null || die "needs iproute2 (ip)"
    [ -z "$loss" ] || [ -n "$delay" ] || delay=0
    [ -z "$loss" ] || command -v nft >/dev/null || die "--loss needs nftables (nft)"
    tool=
    if [ -n "$delay" ]; then
        command -v ethtool >/dev/null || die "--delay needs ethtool"
        tool=$(find_delay_tool)
    fi
    down
    trap 'echo "testbed: setup failed; removing $name" >&2; down' ERR
    ip netns add "$a"
    ip netns add "$b"
    if [ -n "$delay" ]; then
        delay_line "$delay" "$queue" "$tool"
    else
        ip link add zcpa netns "$a" type veth peer name zcpb netns "$b"
    fi
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
    [ -z "$loss" ] || loss_rule "$loss"
    trap - ERR
    echo "testbed $name: $a 10.231.0.1 (zcpa, mtu $mtu) <-> $b 10.231.0.2 (zcpb, mtu $mtu_b)${rate:+, tbf $rate}${delay:+, delay $delay ms each way}${loss:+, loss $loss% a->b}"
    ;;
down) down ;;
exec)
    side=${1:-}
    shift || true
    case $side in a) ns=$a ;; b) ns=$b ;; m) ns=$m ;; *) die "exec NAME a|b|m CMD..." ;; esac
    [ $# -gt 0 ] || die "exec NAME a|b|m CMD..."
    exec ip netns exec "$ns" "$@"
    ;;
show)
    ip -n "$a" -br addr show dev zcpa; ip -n "$a" link show dev zcpa | head -1
    ip -n "$b" -br addr show dev zcpb; ip -n "$b" link show dev zcpb | head -1
    tc -n "$a" -s qdisc show dev zcpa; tc -n "$b" -s qdisc show dev zcpb
    if [ -f "$state/delay" ]; then
        echo "delay line: $(cat "$state/delay") ms each way (pid $(cat "$state/pid"))"
        cat "$state/stats" 2>/dev/null || echo "(no counters yet)"
    fi
    if [ -f "$state/loss" ]; then
        echo "loss: $(cat "$state/loss")% of IP packets into zcpb"
        ip netns exec "$b" nft list table netdev zcploss | grep -o 'counter packets [0-9]* bytes [0-9]*' |
            sed 's/^counter/dropped:/'
    fi
    ;;
*) die "unknown command $cmd (up, down, exec, show)" ;;
esac
