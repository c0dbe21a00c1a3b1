#!/usr/bin/env bash
# Interleaved: old (protocol 2, keyed BLAKE3 of the bytes) vs new (protocol 3, hash-then-MAC),
# a 2 GiB file from the page cache over loopback, -P 2, default engines; CPU per GiB of each side.
set -u
out=$1; mkdir -p "$out"
for round in 1 2 3; do
  for v in old new; do
    bin=/tmp/zcp-$v-bin
    rm -rf srv-$v; mkdir srv-$v
    port=$((5400 + round))
    $bin serve --root srv-$v --key-file key --bind 127.0.0.1 -p $port > serve-$v.log 2>&1 &
    spid=$!
    sleep 0.5
    cat src.bin > /dev/null
    $bin send -J -i 0 -P 2 --key-file key -p $port src.bin 127.0.0.1:f.bin > "$out/$v-$round.json"
    kill $spid; wait $spid 2>/dev/null
    python3 -c "
import json,sys
e=json.load(open('$out/$v-$round.json'))['end']
print('$v', $round, 'sender s/GiB', e['cpu']['sender']['seconds_per_gib'], 'receiver s/GiB', e['cpu']['receiver']['seconds_per_gib'], 'Gbit/s', round(e['sum']['bits_per_second']/1e9,2), 'digest', e.get('digest','')[:16])
"
    sync
  done
done
