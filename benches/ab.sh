#!/usr/bin/env bash
# A quick interleaved A/B of two stq binaries on one query of the load test: each
# round runs wrk against A, B, B, A (ABBA, so that a drift of the machine falls on
# both alike) and prints each run's requests a second and the CPU time of the
# server's process per request (user + system, from /proc/PID/stat). BENCHMARKS.md.
#
# Each binary runs as one process for the whole A/B, and one process can run
# faster than the other throughout: an A/A run (the same binary in both slots)
# gave the second 2% more on Q2. Run both orders before trusting a difference of a few
# percent (BENCHMARKS.md).
#
# usage: bash benches/ab.sh QUERY SECONDS ROUNDS BINARY_A BINARY_B
#
# AB_ARGS adds arguments to both servers' `serve` (for example `--hot all`).
#
# QUERY is Q1 to Q6 of the load test; its dataset, tokens and paths are those
# `bash benches/load.sh` leaves in target/load (run it once first).
set -euo pipefail
query=$1 seconds=$2 rounds=$3 binary_a=$4 binary_b=$5
cd "$(dirname "$0")/.."
load=target/load
[ -f "$load/paths-$query.txt" ] || { echo "run bash benches/load.sh first" >&2; exit 1; }

start() {
  "$1" serve --listen "127.0.0.1:$2" --admin-listen "127.0.0.1:$(($2 + 1))" \
    --snapshots "$load/snapshot" --tokens "$load/tokens.json" ${AB_ARGS:-} > "$load/ab-$2.log" 2>&1 &
  echo $!
}
pid_a=$(start "$binary_a" 47600)
pid_b=$(start "$binary_b" 47700)
trap 'kill $pid_a $pid_b 2> /dev/null || true' EXIT
for port in 47600 47700; do
  until curl -sf "http://127.0.0.1:$port/readyz" > /dev/null; do sleep 0.2; done
done

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
run() {
  local port=$1 pid=$2 before output after requests rate
  before=$(ticks "$pid")
  output=$(wrk --threads 2 --connections 32 --duration "${seconds}s" --timeout 10s \
    --script benches/load/paths.lua "http://127.0.0.1:$port" -- \
    "$load/paths-$query.txt" stq-load-benchmark)
  after=$(ticks "$pid")
  requests=$(echo "$output" | awk '/requests in/ {print $1}')
  rate=$(echo "$output" | awk '/Requests\/sec/ {print $2}')
  python3 -c "print(f'{float($rate):8.0f} req/s {($after - $before) * 1e6 / $(getconf CLK_TCK) / $requests:6.2f} us/req', end='')"
}

run 47600 "$pid_a" > /dev/null
run 47700 "$pid_b" > /dev/null
for _ in $(seq "$rounds"); do
  a1=$(run 47600 "$pid_a"); b1=$(run 47700 "$pid_b")
  b2=$(run 47700 "$pid_b"); a2=$(run 47600 "$pid_a")
  echo "$query A [$a1] [$a2]  B [$b1] [$b2]"
done
