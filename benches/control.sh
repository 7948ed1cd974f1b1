#!/usr/bin/env bash
# Control charts against the summary of the same records at floor scale
# (docs/api.md section 15): bash benches/control.sh
#
# One server of the release binary on `stq gen`'s 1000 stations over 7 days
# (CONTROL_SNAPSHOT, default /var/tmp/stq-week1000, generated if missing: 3.5 GB),
# `--hot 24h` (the default). After every query has run twice (a warm cache), the
# queries take turns CONTROL_ROUNDS times (default 5), each asked 4 times (the day)
# or 200 (the week) on one connection: `/metrics/control` and
# `/metrics/summary` of every station and name over the newest 24 hours (the hot
# tier), then the same of one station over the 7 days (mostly sealed), one name
# and all. Each prints the server's CPU time (utime + stime, /proc) for the
# request, its wall time (curl) and its body's bytes; then the medians and each
# chart's ratio to its summary.
#
# The server is stopped by its pid on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${CONTROL_ROUNDS:-5}
snapshot=${CONTROL_SNAPSHOT:-/var/tmp/stq-week1000}
stq=${STQ_BINARY:-target/release/stq}
work=target/control-bench
mkdir -p "$work"
pid=
trap '[[ -n $pid ]] && kill "$pid" 2>/dev/null || true' EXIT

[[ -n ${STQ_BINARY:-} ]] || cargo build --release --quiet
if [[ ! -d $snapshot/ST-1000 ]]; then
    "$stq" gen --out "$snapshot" --stations 1000 --days 7 --end 2026-11-01T00:00:00Z >/dev/null
fi
token=bench-token-0000000000000001
printf '{"tokens": [{"name": "bench", "sha256": "%s", "stations": "*"}]}\n' \
    "$(printf %s "$token" | sha256sum | cut -d' ' -f1)" >"$work/tokens.json"

port=18431
"$stq" serve --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$((port + 1))" \
    --snapshots "$snapshot" --tokens "$work/tokens.json" >"$work/stq.log" 2>&1 &
pid=$!
until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do
    kill -0 "$pid" || { cat "$work/stq.log"; exit 1; }
    sleep 1
done

day="from=2026-10-31T00:00:00Z&to=2026-11-01T00:00:00Z"
week="from=2026-10-25T00:00:00Z&to=2026-11-01T00:00:00Z&station_ids=ST-0500"
queries=(
    "day-control /metrics/control?$day"
    "day-summary /metrics/summary?$day"
    "week-one-control /metrics/control?$week&names=voltage_3v3"
    "week-one-summary /metrics/summary?$week&names=voltage_3v3"
    "week-all-control /metrics/control?$week"
    "week-all-summary /metrics/summary?$week"
)
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
# NAME REPEAT PATH: the path asked REPEAT times on one connection; prints
# "NAME cpu_ms wall_ms bytes", each a request's.
measure() {
    local name=$1 repeat=$2 path=$3 before after start end args=() code
    for _ in $(seq "$repeat"); do
        args+=(-o "$work/body" "http://127.0.0.1:$port$path")
    done
    before=$(cpu)
    start=$(date +%s%N)
    code=$(curl -s -w '%{http_code}\n' -H "Authorization: Bearer $token" "${args[@]}" | sort -u)
    end=$(date +%s%N)
    after=$(cpu)
    [[ $code == 200 ]] || { echo "$name: HTTP $code: $(head -c 300 "$work/body")" >&2; exit 1; }
    awk -v n="$name" -v c=$((after - before)) -v t="$ticks" -v w=$((end - start)) \
        -v r="$repeat" -v b="$(stat -c %s "$work/body")" \
        'BEGIN { printf "%s %.3f %.3f %d\n", n, c * 1000 / t / r, w / 1e6 / r, b }'
}
repeat() { [[ $1 == day-* ]] && echo 4 || echo 200; }
for query in "${queries[@]}"; do
    read -r name path <<<"$query"
    measure "$name" 2 "$path" >/dev/null
done
results=$work/results.txt
: >"$results"
for round in $(seq "$rounds"); do
    for query in "${queries[@]}"; do
        read -r name path <<<"$query"
        measure "$name" "$(repeat "$name")" "$path" | tee -a "$results"
    done
done
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "== medians a request (CPU ms, wall ms, bytes), and each chart against its summary"
for name in day week-one week-all; do
    for kind in control summary; do
        rows=$(grep "^$name-$kind " "$results")
        echo "$name-$kind $(cut -d' ' -f2 <<<"$rows" | median) $(cut -d' ' -f3 <<<"$rows" | median) $(tail -1 <<<"$rows" | cut -d' ' -f4)"
    done
done | tee "$work/medians.txt"
awk '{c[$1]=$2; w[$1]=$3} END {
    for (n in c) if (n ~ /-control$/) { s=n; sub(/-control$/, "-summary", s);
        printf "%s: %.2f x CPU, %.2f x wall\n", n, c[n] / c[s], w[n] / w[s] } }' "$work/medians.txt"
