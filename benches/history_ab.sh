#!/usr/bin/env bash
# An interleaved comparison of stq servers on one summary query of the load test's
# dataset: each server (a binary and its flags, `--hot 24h` against
# `--hot all`, say) runs as one process for the whole comparison; each round runs
# wrk against every server in order, then in the reverse order, so that a drift of
# the machine falls on all alike. Prints each run's requests a second and the CPU
# time of the server's process per request (user + system, /proc/PID/stat), then
# each server's median requests a second and its ratio to the first server's
# median, and the median of the rounds' ratios. BENCHMARKS.md, "Sealed history".
#
# usage: bash benches/history_ab.sh QUERY SECONDS ROUNDS LABEL BINARY FLAGS [LABEL BINARY FLAGS]...
#
# QUERY is a load-test query whose paths `bash benches/load.sh` left in
# target/load (H2, the week's unit summary, say), or M7: every station's metric
# summary over the week, by day, whose paths this script draws. FLAGS is one word
# list, quoted ("--hot all"). HISTORY_CONNECTIONS sets wrk's connections (32): a
# query of a few hundred milliseconds wants fewer, or a run of a few seconds ends
# with most of its requests still queued.
set -euo pipefail
query=$1 seconds=$2 rounds=$3
shift 3
cd "$(dirname "$0")/.."
load=target/load
[ -d "$load/snapshot" ] || { echo "run bash benches/load.sh first" >&2; exit 1; }
if [ "$query" = M7 ] && [ ! -f "$load/paths-M7.txt" ]; then
  # The load test's week: 2026-10-25 to 2026-11-01; a random second of the first
  # hour starts each window, so that no two paths are the same.
  python3 -c "
import random
random.seed(2026)
for _ in range(5000):
    print(f'/metrics/summary?from=2026-10-25T00:{random.randrange(60):02}:{random.randrange(60):02}Z&to=2026-11-01T00:00:00Z&bucket=1d')
" > "$load/paths-M7.txt"
fi
[ -f "$load/paths-$query.txt" ] || { echo "no paths for $query" >&2; exit 1; }

labels=() pids=() ports=()
trap 'for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done' EXIT
port=47800
while [ $# -gt 0 ]; do
  label=$1 binary=$2 flags=$3
  shift 3
  # shellcheck disable=SC2086 # FLAGS is a word list
  "$binary" serve --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$((port + 1))" \
    --snapshots "$load/snapshot" --tokens "$load/tokens.json" $flags \
    > "$load/history-$port.log" 2>&1 &
  labels+=("$label") pids+=($!) ports+=("$port")
  port=$((port + 10))
done
for port in "${ports[@]}"; do
  until curl -sf "http://127.0.0.1:$port/readyz" > /dev/null; do sleep 0.5; done
done

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# Prints "REQUESTS_A_SECOND MICROSECONDS_OF_CPU_A_REQUEST".
run() {
  local port=$1 pid=$2 before output after requests rate
  before=$(ticks "$pid")
  output=$(wrk --threads 2 --connections "${HISTORY_CONNECTIONS:-32}" --duration "${seconds}s" --timeout 30s \
    --script benches/load/paths.lua "http://127.0.0.1:$port" -- \
    "$load/paths-$query.txt" stq-load-benchmark)
  after=$(ticks "$pid")
  requests=$(echo "$output" | awk '/requests in/ {print $1}')
  rate=$(echo "$output" | awk '/Requests\/sec/ {print $2}')
  python3 -c "print($rate, ($after - $before) * 1e6 / $(getconf CLK_TCK) / max($requests, 1))"
}

count=${#labels[@]}
results=$(mktemp)
for index in $(seq 0 $((count - 1))); do run "${ports[$index]}" "${pids[$index]}" > /dev/null; done
for round in $(seq "$rounds"); do
  order=$(seq 0 $((count - 1)); seq $((count - 1)) -1 0)
  for index in $order; do
    measured=$(run "${ports[$index]}" "${pids[$index]}")
    echo "$round ${labels[$index]} $measured" | tee -a "$results"
  done
done
python3 - "$results" "${labels[@]}" << 'EOF'
import statistics, sys
path, labels = sys.argv[1], sys.argv[2:]
runs = [line.split() for line in open(path)]
rate = {label: [float(r[2]) for r in runs if r[1] == label] for label in labels}
cpu = {label: [float(r[3]) for r in runs if r[1] == label] for label in labels}
rounds = sorted({r[0] for r in runs})
def round_rate(label, number):
    return statistics.mean(float(r[2]) for r in runs if r[1] == label and r[0] == number)
first = labels[0]
for label in labels:
    ratios = [round_rate(label, n) / round_rate(first, n) for n in rounds]
    print(f"{label:>16}: {statistics.median(rate[label]):9.1f} req/s (median of {len(rate[label])}), "
          f"{statistics.median(cpu[label]) / 1000:8.2f} ms CPU a request, "
          f"x{statistics.median(rate[label]) / statistics.median(rate[first]):.2f} of {first} "
          f"(rounds' ratios {', '.join(f'{r:.2f}' for r in ratios)})")
EOF
rm -f "$results"
