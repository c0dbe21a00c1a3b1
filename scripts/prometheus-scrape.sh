#!/usr/bin/env bash
# A real Prometheus scrapes `zcp serve --metrics` while a file is pushed, and the figures are
# read back through Prometheus's own query API: the target is up, one session ended ok, and
# the bytes received for the export and identity equal the file's size. Loopback only; every
# process it starts is stopped and every file removed on exit, however it ends.
#
#   scripts/prometheus-scrape.sh [ZCP_BINARY]      (default target/release/zcp)
#
# Needs prometheus (Debian's `prometheus` package), curl and jq; .ci/run installs them.
set -euo pipefail

zcp=$(realpath "${1:-target/release/zcp}")
for tool in prometheus curl jq ss; do
    command -v "$tool" >/dev/null || { echo "prometheus-scrape: $tool is not installed" >&2; exit 2; }
done
[[ -x $zcp ]] || { echo "prometheus-scrape: no zcp binary at $zcp (cargo build --release)" >&2; exit 2; }

work=$(mktemp -d /tmp/zcp-prom.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "prometheus-scrape: FAILED: $*" >&2
    for f in serve.out serve.err prometheus.log send.out; do
        [[ -s $work/$f ]] && { echo "--- $f" >&2; tail -n 20 "$work/$f" >&2; }
    done
    exit 1
}

# Waits up to $1 tenths of a second for the command after it to succeed.
wait_for() {
    local tenths=$1
    shift
    for ((i = 0; i < tenths; i++)); do
        if "$@"; then return 0; fi
        sleep 0.1
    done
    return 1
}

# A free loopback port for Prometheus (zcp takes port 0 and says which it got).
free_port() {
    local p
    for _ in $(seq 1 50); do
        p=$((20000 + RANDOM % 40000))
        [[ -z $(ss -Hltn "sport = :$p") ]] && { echo "$p"; return 0; }
    done
    return 1
}

mkdir -p "$work/root" "$work/tsdb"
"$zcp" keygen -o "$work/key" >/dev/null 2>&1
size=$((48 << 20))
head -c "$size" /dev/urandom >"$work/src.bin"

"$zcp" serve --root "$work/root" --key-file "$work/key" -4 -p 0 --metrics 127.0.0.1:0 \
    >"$work/serve.out" 2>"$work/serve.err" &
pids+=($!)
wait_for 100 grep -q "listening on" "$work/serve.out" || fail "zcp serve did not start"
wait_for 100 grep -q "metrics at http://" "$work/serve.err" || fail "zcp serve named no metrics address"
port=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\),.*/\1/p' "$work/serve.out" | head -n 1)
metrics=$(sed -n 's|.*metrics at http://\([^/]*\)/metrics.*|\1|p' "$work/serve.err" | head -n 1)
[[ -n $port && -n $metrics ]] || fail "could not read the ports zcp serve chose"

prom_port=$(free_port) || fail "no free port for Prometheus"
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: zcp
    static_configs:
      - targets: ["$metrics"]
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
    --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
pids+=($!)
api="http://127.0.0.1:$prom_port/api/v1"
wait_for 300 curl -sf "$api/status/buildinfo" -o /dev/null || fail "Prometheus did not start"

"$zcp" send -q --key-file "$work/key" -p "$port" "$work/src.bin" "127.0.0.1::src.bin" \
    >"$work/send.out" 2>&1 || fail "zcp send failed"
cmp -s "$work/src.bin" "$work/root/src.bin" || fail "the pushed file differs from its source"

# One instant query's single value, or nothing.
query() {
    curl -sf --get "$api/query" --data-urlencode "query=$1" | jq -r '.data.result[0].value[1] // empty'
}
# Waits until Prometheus has scraped a value of $2 for the query $1 (its own scrape, every 1 s).
expect() {
    local got=""
    for _ in $(seq 1 150); do
        got=$(query "$1" || true)
        [[ $got == "$2" ]] && { echo "prometheus-scrape: $1 = $got"; return 0; }
        sleep 0.2
    done
    fail "Prometheus has $1 = '${got:-nothing}', expected $2"
}

expect 'up{job="zcp"}' 1
expect 'zcp_sessions_total{job="zcp",outcome="ok"}' 1
expect 'zcp_received_bytes_total{job="zcp",export="root",identity="default"}' "$size"
expect 'zcp_files_committed_total{job="zcp",direction="push"}' 1
expect 'zcp_sessions_active{job="zcp"}' 0
scraped=$(curl -sf "$api/targets" | jq -r '.data.activeTargets[0].health')
[[ $scraped == up ]] || fail "the zcp target's health is '$scraped'"
echo "prometheus-scrape: ok (Prometheus $(prometheus --version 2>&1 | head -n 1 | awk '{print $3}') scraped $metrics)"
