#!/usr/bin/env bash
# CPU time a request costs stq, by query and build: bash benches/cpu_per_request.sh
# QUERY SECONDS BUILD[:hot] ...
#
# On the load benchmark's snapshot and paths (make them first with `cargo bench
# --bench load -- --prepare`), each BUILD (a path to an stq binary; `:hot` after it
# serves with `--hot all`) is started in turn, warmed for 2 s by wrk (2 threads, 32
# connections, the query's paths at random), then driven for SECONDS while its CPU
# time (user + system, from /proc) is read: CPU microseconds per request answered,
# beside req/s. On a small, shared machine, CPU a request moves far less with
# other load than req/s does; list the builds twice, interleaved (A B B A), to see
# the noise. Also prints the decoded-block cache's bytes a miss (what a rendered
# block weighs) from the admin listener. SNAPSHOTS=DIR serves another layout of the
# same records (`python3 benches/day_files.py target/load/snapshot DIR`: one file
# per day for all stations). STORE=DIR serves each build but `:hot` ones with
# `--store DIR/NAME` (NAME: the binary's file name), a store of its own: start
# each build once before, so that the runs measured start warm from it.
set -euo pipefail
cd "$(dirname "$0")/.."
query=$1
seconds=$2
shift 2
paths=target/load/paths-$query.txt
[[ -f $paths ]] || { echo "no $paths: run cargo bench --bench load -- --prepare" >&2; exit 1; }
ticks=$(getconf CLK_TCK)
pid=
stop() { [[ -n $pid ]] && kill "$pid" 2>/dev/null || true; }
trap stop EXIT
for build in "$@"; do
    binary=${build%:hot}
    arguments=()
    [[ $build == *:hot ]] && arguments=(--hot all)
    [[ -n ${STORE:-} && $build != *:hot ]] && arguments+=(--store "$STORE/$(basename "$binary")")
    "$binary" serve --listen 127.0.0.1:7311 --admin-listen 127.0.0.1:7312 \
        --snapshots "${SNAPSHOTS:-target/load/snapshot}" --tokens target/load/tokens.json \
        "${arguments[@]}" >/dev/null 2>&1 &
    pid=$!
    until curl -sf 127.0.0.1:7311/readyz >/dev/null; do sleep 0.2; done
    drive() {
        wrk -t2 -c32 -d"$1"s -s benches/load/paths.lua http://127.0.0.1:7311 \
            -- "$paths" stq-load-benchmark
    }
    drive 2 >/dev/null
    before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    report=$(drive "$seconds")
    after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    requests=$(awk '/requests in/ {print $1}' <<<"$report")
    rate=$(awk '/Requests\/sec/ {print $2}' <<<"$report")
    cache=$(curl -s 127.0.0.1:7312/metrics | awk '
        /^stq_cache_bytes / {bytes = $2}
        /^stq_cache_misses_total / {misses = $2}
        END {if (misses > 0) printf "%.0f", bytes / misses; else print "-"}')
    echo "$query $build: $rate req/s, $(((after - before) * 1000000 / ticks / requests)) us CPU/request, $cache cache bytes/miss"
    kill "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    pid=
done
