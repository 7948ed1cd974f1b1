#!/usr/bin/env bash
# The instructions a request costs the whole server, counted by callgrind:
# bash benches/callgrind_serve.sh QUERY REQUESTS BUILD ...
#
# On the load benchmark's snapshot and paths (make them first with `cargo bench
# --bench load -- --prepare`), each BUILD (a path to an stq binary) serves under
# `valgrind --tool=callgrind` with instrumentation off while it loads; once ready it
# is asked the query's first REQUESTS paths once, then instrumented while curl asks
# them again, one at a time over kept-alive connections: the HTTP layer, the
# middleware, the engine and the sockets' reads and writes, all counted. The
# profile is left in target/callgrind/BUILD_NAME.out.1 for callgrind_annotate. An
# instruction count does not move with the machine's other load; it is not time.
set -euo pipefail
cd "$(dirname "$0")/.."
query=$1
requests=$2
shift 2
paths=target/load/paths-$query.txt
[[ -f $paths ]] || { echo "no $paths: run cargo bench --bench load -- --prepare" >&2; exit 1; }
mkdir -p target/callgrind
urls=$(mktemp)
head -n "$requests" "$paths" | sed 's|^|http://127.0.0.1:18080|' > "$urls"
# curl writes only its first URL to -o: the rest go to stdout, dropped here.
ask() { xargs -a "$urls" curl -s -H "Authorization: Bearer stq-load-benchmark" > /dev/null; }
pid=
stop() { [[ -n $pid ]] && kill "$pid" 2>/dev/null || true; rm -f "$urls"; }
trap stop EXIT
for binary in "$@"; do
    name=$(basename "$binary")
    out=target/callgrind/$name.out
    rm -f "$out" "$out".*
    RUST_LOG=warn valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
        "$binary" serve --listen 127.0.0.1:18080 --admin-listen 127.0.0.1:18081 \
        --snapshots target/load/snapshot --tokens target/load/tokens.json \
        > "target/callgrind/$name.log" 2>&1 &
    pid=$!
    until curl -sf 127.0.0.1:18080/readyz > /dev/null; do sleep 1; done
    ask
    callgrind_control -i on "$pid" > /dev/null
    ask
    callgrind_control -i off "$pid" > /dev/null
    callgrind_control -d "$pid" > /dev/null 2>&1
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=
    total=$(callgrind_annotate "$out".1 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    echo "$query $binary: $total instructions for $requests requests, $((total / requests)) a request"
done
