#!/usr/bin/env bash
# Start-up loads of two stq binaries, interleaved (A B B A per round): the rate from
# stq's own `loaded in` line, the process's CPU time (user + system) when it
# appeared, and its peak and current RSS then. BENCHMARKS.md.
#
# usage: bash benches/startup.sh SNAPSHOT_DIRECTORY ROUNDS cold|warm BINARY_A BINARY_B
#
# `cold` drops the page cache before every start (root only), so that every load
# reads its files from the disk; `warm` loads what the previous start just read.
set -euo pipefail
directory=$1 rounds=$2 cache=$3 binary_a=$4 binary_b=$5
tokens="$(cd "$(dirname "$0")/.." && pwd)/snapshots/tokens.json"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

one() {
  local label=$1 binary=$2
  if [ "$cache" = cold ]; then
    sync
    echo 3 > /proc/sys/vm/drop_caches
  fi
  "$binary" serve --listen 127.0.0.1:47900 --admin-listen 127.0.0.1:47901 \
    --snapshots "$directory" --tokens "$tokens" > "$log" 2>&1 &
  local pid=$!
  until curl -sf http://127.0.0.1:47900/readyz > /dev/null; do
    kill -0 "$pid" 2> /dev/null || { cat "$log"; exit 1; }
    sleep 0.3
  done
  local ticks
  ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  local loaded
  loaded=$(grep -o "loaded in [0-9]* ms ([0-9.]* MB at [0-9]* MB/s)" "$log" | head -1)
  local peak rss
  peak=$(awk '/^VmHWM/ {print int($2 / 1024)}' "/proc/$pid/status")
  rss=$(awk '/^VmRSS/ {print int($2 / 1024)}' "/proc/$pid/status")
  echo "$label: $loaded, CPU $((ticks * 1000 / $(getconf CLK_TCK))) ms, peak RSS $peak MiB, RSS $rss MiB"
  kill "$pid"
  wait "$pid" 2> /dev/null || true
}

for _ in $(seq "$rounds"); do
  one A "$binary_a"
  one B "$binary_b"
  one B "$binary_b"
  one A "$binary_a"
done
