#!/usr/bin/env bash
# A year of history for 100 stations, and the history queries BENCHMARKS.md times on it.
#
#   bash benches/year.sh DIR                 # writes the year under DIR (1.5 GB of gzip)
#   bash benches/year.sh DIR queries PORT    # each query twice against stq on PORT
#   bash benches/year.sh DIR fill PORT       # 80 history queries that fill a 256 MiB cache
#
# The year is made 30 days at a time, each day's files gzipped as they come, so that
# the plain 18.9 GB never lie on the disk at once; each run has its own seed.
set -euo pipefail
out=${1:?usage: year.sh DIR [queries PORT]}
stq=${STQ:-target/release/stq}

if [[ ${2:-} == queries ]]; then
    port=${3:?the port stq listens on}
    header='Authorization: Bearer stq-demo-ops'
    for query in \
        "/units?from=2026-06-10T00:00:00Z&to=2026-06-10T00:15:00Z&limit=100000" \
        "/metrics?from=2026-06-10T00:00:00Z&to=2026-06-10T00:15:00Z&limit=100000" \
        "/units?station_ids=ST-042&from=2026-03-01T00:00:00Z&to=2026-03-08T00:00:00Z&limit=100000" \
        "/units/summary?from=2026-05-01T00:00:00Z&to=2026-06-01T00:00:00Z&bucket=1d" \
        "/metrics/summary?station_ids=ST-042&from=2025-11-24T00:00:00Z&to=2026-11-24T00:00:00Z&bucket=1d"; do
        first=$(curl -s -H "$header" "127.0.0.1:$port$query" -o /dev/null -w '%{http_code} %{time_total}')
        second=$(curl -s -H "$header" "127.0.0.1:$port$query" -o /dev/null -w '%{http_code} %{time_total}')
        echo "$query first $first s, second $second s"
    done
    exit 0
fi

if [[ ${2:-} == fill ]]; then
    # Units and metrics of all stations over a quarter of an hour, on 40 days of the
    # year: each reads a block of every station (RSS with the cache full).
    port=${3:?the port stq listens on}
    header='Authorization: Bearer stq-demo-ops'
    for day in $(seq 0 39); do
        date=$(date -u -d "2026-01-05 + $((day * 7)) days" +%Y-%m-%d)
        for kind in units metrics; do
            curl -sf -H "$header" -o /dev/null \
                "127.0.0.1:$port/$kind?from=${date}T06:00:00Z&to=${date}T06:15:00Z&limit=100000"
        done
    done
    exit 0
fi

mkdir -p "$out"
for chunk in $(seq 0 12); do
    days=30
    [[ $chunk == 12 ]] && days=5
    end=$(date -u -d "2026-11-24 - $((chunk * 30)) days" +%Y-%m-%dT00:00:00Z)
    part="$out/.chunk"
    rm -rf "$part"
    "$stq" gen --stations 100 --days "$days" --end "$end" --seed $((chunk + 1)) --out "$part" >/dev/null
    (cd "$part" && find . -type f -name '*.jsonl' -print0 | xargs -0 -P2 -n 50 gzip -1)
    cp -rl "$part"/. "$out"/
    rm -rf "$part"
    echo "days to $end written"
done
