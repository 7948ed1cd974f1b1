#!/usr/bin/env bash
# The heap allocations a request costs stq, counted: bash benches/mallocs.sh QUERY
# REQUESTS BUILD ...
#
# Each BUILD (a path to an stq binary) is started in turn on the load benchmark's
# snapshot (`one_at_a_time.sh`), asked the query's first REQUESTS paths once to warm
# it, then asked them again while a uprobe on libc's `malloc` counts its calls
# (`perf probe`, added if missing: needs root). Unlike CPU time, the count does not
# move with the machine's other load: one run of each build says what a change
# added or took out.
source "$(dirname "$0")/one_at_a_time.sh"
libc=$(ldd "$1" | awk '/libc.so/ {print $3}')
perf probe -l 2>/dev/null | grep -q 'probe_libc:malloc ' || perf probe -q -x "$libc" --add malloc
counted=$(mktemp)
temporary+=("$counted")
for binary in "$@"; do
    serve /dev/null "$binary"
    ask
    perf stat -e probe_libc:malloc -x, -p "$pid" -o "$counted" &
    counter=$!
    sleep 0.5
    ask
    kill -INT "$counter"
    wait "$counter" || true
    stopped
    calls=$(grep malloc "$counted" | cut -d, -f1)
    echo "$query $binary: $calls malloc calls for $requests requests, $((calls / requests)).$(((calls * 10 / requests) % 10)) a request"
done
