#!/usr/bin/env bash
# The heap allocations a request costs stq, counted: bash benches/mallocs.sh QUERY
# REQUESTS BUILD ...
#
# On the load benchmark's snapshot and paths (make them first with `cargo bench
# --bench load -- --prepare`), each BUILD (a path to an stq binary) is started in
# turn, asked the query's first REQUESTS paths once to warm it, then asked them
# again while a uprobe on libc's `malloc` counts its calls (`perf probe`, added if
# missing: needs root). curl asks them over kept-alive connections, one at a time.
# Unlike CPU time, the count does not move with the machine's other load: one run
# of each build says what a change added or took out.
set -euo pipefail
cd "$(dirname "$0")/.."
query=$1
requests=$2
shift 2
paths=target/load/paths-$query.txt
[[ -f $paths ]] || { echo "no $paths: run cargo bench --bench load -- --prepare" >&2; exit 1; }
libc=$(ldd "$1" | awk '/libc.so/ {print $3}')
perf probe -l 2>/dev/null | grep -q 'probe_libc:malloc ' || perf probe -q -x "$libc" --add malloc
urls=$(mktemp)
counted=$(mktemp)
head -n "$requests" "$paths" | sed 's|^|http://127.0.0.1:18080|' > "$urls"
# curl writes only its first URL to -o: the rest go to stdout, dropped here.
ask() { xargs -a "$urls" curl -s -H "Authorization: Bearer stq-load-benchmark" > /dev/null; }
pid=
stop() { [[ -n $pid ]] && kill "$pid" 2>/dev/null || true; rm -f "$urls" "$counted"; }
trap stop EXIT
for binary in "$@"; do
    RUST_LOG=warn "$binary" serve --listen 127.0.0.1:18080 --admin-listen 127.0.0.1:18081 \
        --snapshots target/load/snapshot --tokens target/load/tokens.json > /dev/null 2>&1 &
    pid=$!
    until curl -sf 127.0.0.1:18080/readyz > /dev/null; do sleep 0.2; done
    ask
    perf stat -e probe_libc:malloc -x, -p "$pid" -o "$counted" &
    counter=$!
    sleep 0.5
    ask
    kill -INT "$counter"
    wait "$counter" || true
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=
    calls=$(grep malloc "$counted" | cut -d, -f1)
    echo "$query $binary: $calls malloc calls for $requests requests, $((calls / requests)).$(((calls * 10 / requests) % 10)) a request"
done
