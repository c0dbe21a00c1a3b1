#!/usr/bin/env bash
# The HTTPS/WebDAV face (issue 28) against nginx serving the same file, same run, interleaved:
# GET of a page-cached file over HTTPS and plain HTTP (curl to /dev/null), and PUT over HTTPS
# (curl -T; zcp syncs and checks the adler32 it is given, nginx's dav module does neither).
# For each: Gbit/s of curl's wall time, and CPU seconds per GiB of the server (its process, or
# nginx's workers, from /proc) and of curl.
#
#   benches/http.sh [-n ROUNDS] [-s SIZE] [-d DIR] [-o OUTDIR]
#
# Needs nginx (apt-get install nginx), curl, openssl, and a built target/release/zcp.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=5 size=1G dir=/var/tmp/zcp-http-bench out=""
while getopts "n:s:d:o:" o; do
    case $o in
    n) rounds=$OPTARG ;; s) size=$OPTARG ;; d) dir=$OPTARG ;; o) out=$OPTARG ;;
    *) sed -n 2,10p "$0"; exit 2 ;;
    esac
done
zcp=$PWD/target/release/zcp
[ -n "$out" ] && out=$(realpath -m "$out")
for t in nginx curl openssl "$zcp"; do
    command -v "$t" >/dev/null || { echo "http.sh: $t is missing" >&2; exit 2; }
done
rm -rf "$dir" && mkdir -p "$dir"/{data,pki,up-zcp,up-nginx,nginx}
cd "$dir"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; [ -f nginx/pid ] && kill "$(cat nginx/pid)" 2>/dev/null || true; }
trap cleanup EXIT

# A CA and a certificate for 127.0.0.1, used by both servers.
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -keyout pki/ca.key -out pki/ca.pem -days 2 -subj /CN=bench-ca 2>/dev/null
openssl req "${ec[@]}" -keyout pki/srv.key -out pki/srv.csr -subj /CN=localhost 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > pki/ext
openssl x509 -req -in pki/srv.csr -CA pki/ca.pem -CAkey pki/ca.key -CAcreateserial -days 2 \
    -out pki/srv.pem -extfile pki/ext 2>/dev/null
head -c "$size" /dev/urandom > data/f.bin
bytes=$(stat -c %s data/f.bin)
adler=$(python3 -c "import zlib,sys;print('%08x'%zlib.adler32(open('data/f.bin','rb').read()))")

"$zcp" keygen -o key 2>/dev/null
serve() { # $1: https|http, $2: port
    local tls=""
    [ "$1" = https ] && tls="cert = \"$dir/pki/srv.pem\"
key = \"$dir/pki/srv.key\""
    cat > "zcp-$1.toml" <<EOF
listen = ["127.0.0.1:0"]
[http]
listen = "127.0.0.1:$2"
$tls
[export.data]
path = "$dir/data"
[export.up]
path = "$dir/up-zcp"
[identity.bench]
key_file = "$dir/key"
access = { data = "read", up = "read-write" }
EOF
    "$zcp" serve --config "zcp-$1.toml" --log-level warn > "zcp-$1.log" 2>&1 &
    pids+=($!)
}
serve https 18601
serve http 18602
cat > nginx/nginx.conf <<EOF
worker_processes 1;
pid $dir/nginx/pid;
error_log $dir/nginx/error.log;
events { worker_connections 64; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    client_max_body_size 0;
    client_body_temp_path $dir/nginx/body;
    server { listen 127.0.0.1:18603 ssl; ssl_certificate $dir/pki/srv.pem;
             ssl_certificate_key $dir/pki/srv.key; root $dir;
             location /up/ { alias $dir/up-nginx/; dav_methods PUT; } }
    server { listen 127.0.0.1:18604; root $dir; }
}
EOF
nginx -c "$dir/nginx/nginx.conf"
sleep 1
token=$("$zcp" token --config zcp-https.toml --identity bench --ttl 2h 2>/dev/null)
zcp_pid() { pgrep -f "zcp serve --config zcp-$1.toml" | head -1; }
nginx_pids() { pgrep -P "$(cat nginx/pid)" | tr '\n' ' '; }
ticks() { local t=0; for p in "$@"; do t=$((t + $(awk '{print $14+$15}' /proc/"$p"/stat))); done; echo $t; }
hz=$(getconf CLK_TCK)

# One run: $1 label, $2 server pids, rest: curl arguments. Prints label, Gbit/s, server and
# client CPU s/GiB.
run() {
    local label=$1 spids=$2
    shift 2
    cat data/f.bin > /dev/null
    local t0 c
    # shellcheck disable=SC2086
    t0=$(ticks $spids)
    c=$( { /usr/bin/time -f "%e %U %S" curl -sS --cacert pki/ca.pem -o /dev/null "$@"; } 2>&1 | tail -1)
    # shellcheck disable=SC2086
    local t1; t1=$(ticks $spids)
    awk -v l="$label" -v b="$bytes" -v c="$c" -v s=$((t1 - t0)) -v hz="$hz" 'BEGIN {
        split(c, x, " "); gib = b / 2^30
        printf "%s %.2f %.3f %.3f\n", l, b * 8 / x[1] / 1e9, s / hz / gib, (x[2] + x[3]) / gib }'
}
auth=(-H "Authorization: Bearer $token")
results=$(mktemp)
for r in $(seq "$rounds"); do
    run zcp-https "$(zcp_pid https)" "${auth[@]}" https://127.0.0.1:18601/data/f.bin >> "$results"
    run nginx-https "$(nginx_pids)" https://127.0.0.1:18603/data/f.bin >> "$results"
    run zcp-http "$(zcp_pid http)" "${auth[@]}" http://127.0.0.1:18602/data/f.bin >> "$results"
    run nginx-http "$(nginx_pids)" http://127.0.0.1:18604/data/f.bin >> "$results"
    run zcp-put "$(zcp_pid https)" "${auth[@]}" -H "Digest: adler32=$adler" -T data/f.bin \
        "https://127.0.0.1:18601/up/r$r.bin" >> "$results"
    run nginx-put "$(nginx_pids)" -T data/f.bin "https://127.0.0.1:18603/up/r$r.bin" >> "$results"
    rm -f up-zcp/* up-nginx/*
    echo "round $r of $rounds done" >&2
done
table=$(awk '
    { n[$1]++; g[$1, n[$1]] = $2; s[$1, n[$1]] = $3; c[$1, n[$1]] = $4 }
    function med(a, k, m,   i, j, v, t) {
        for (i = 1; i <= m; i++) v[i] = a[k, i]
        for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2 }
    END {
        print "| run | Gbit/s (median) | server CPU s/GiB | curl CPU s/GiB |"
        print "|---|---|---|---|"
        split("zcp-https nginx-https zcp-http nginx-http zcp-put nginx-put", order, " ")
        for (i = 1; i <= 6; i++) { k = order[i]; m = n[k]
            G[k] = med(g, k, m)
            printf "| %s | %.2f | %.3f | %.3f |\n", k, G[k], med(s, k, m), med(c, k, m) }
        printf "\nzcp/nginx, Gbit/s: HTTPS GET %.2f, plain GET %.2f, PUT %.2f\n",
            G["zcp-https"] / G["nginx-https"], G["zcp-http"] / G["nginx-http"], G["zcp-put"] / G["nginx-put"]
    }' "$results")
echo "$table"
if [ -n "$out" ]; then
    mkdir -p "$out"
    cp "$results" "$out/runs.txt"
    { echo "benches/http.sh -n $rounds -s $size -d $dir ($(date -u +%F), $(nproc) cores, $(uname -r))"; echo; echo "$table"; } > "$out/table.md"
fi
