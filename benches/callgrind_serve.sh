#!/usr/bin/env bash
# The instructions a request costs the whole server, counted by callgrind:
# bash benches/callgrind_serve.sh QUERY REQUESTS BUILD ...
#
# Each BUILD (a path to an stq binary) serves the load benchmark's snapshot
# (`one_at_a_time.sh`) under `valgrind --tool=callgrind` with instrumentation off
# while it loads; once ready it is asked the query's first REQUESTS paths once, then
# instrumented while they are asked again: the HTTP layer, the middleware, the
# engine and the sockets' reads and writes, all counted. The profile is left in
# target/callgrind/BUILD_NAME.out.1 for callgrind_annotate. An instruction count
# does not move with the machine's other load; it is not time.
source "$(dirname "$0")/one_at_a_time.sh"
mkdir -p target/callgrind
for binary in "$@"; do
    name=$(basename "$binary")
    out=target/callgrind/$name.out
    rm -f "$out" "$out".*
    serve "target/callgrind/$name.log" \
        valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" "$binary"
    ask
    callgrind_control -i on "$pid" > /dev/null 2>&1
    ask
    callgrind_control -i off "$pid" > /dev/null 2>&1
    callgrind_control -d "$pid" > /dev/null 2>&1
    stopped
    total=$(callgrind_annotate "$out".1 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    echo "$query $binary: $total instructions for $requests requests, $((total / requests)) a request"
done
