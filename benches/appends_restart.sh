#!/usr/bin/env bash
# A restart from the store after an hour of appends ("a restart after an
# hour of appends costs what those appends cost"). BENCHMARKS.md.
#
# usage: bash benches/appends_restart.sh SNAPSHOT_DIRECTORY ROUNDS BINARY
#
# SNAPSHOT_DIRECTORY holds files named DAY.KIND.jsonl: one per station-day and kind
# (`stq gen`'s STATION/DAY.KIND.jsonl) or one per day for all stations
# (`benches/day_files.py`). Each round works on a copy (hard links, except the newest
# day's files, which are copied because they grow) and a store filled by one start:
#   unchanged  a restart with nothing changed;
#   appended   the newest day's files grown by an hour of records
#              (the day's first hour again, a day later, with serials of their own),
#              then a restart;
#   alone      a start without a store on a directory holding only those appended
#              records, in files named as those they were appended to: what they cost by
#              themselves.
# Each line: stq's own `loaded in` line, the process's CPU time, its RSS when ready.
set -euo pipefail
source_directory=$1 rounds=$2 binary=$3
tokens="$(cd "$(dirname "$0")/.." && pwd)/snapshots/tokens.json"
work=$(mktemp -d /var/tmp/stq-appends.XXXXXX)
log=$work/log
trap 'rm -rf "$work"' EXIT

# Starts stq on $1 with extra arguments, waits for readiness, prints one line
# labelled $label, and stops it unless $keep is set (then $pid names it).
start() {
  local label=$1 directory=$2
  shift 2
  "$binary" serve --listen 127.0.0.1:47910 --admin-listen 127.0.0.1:47911 \
    --snapshots "$directory" --tokens "$tokens" "$@" > "$log" 2>&1 &
  pid=$!
  until curl -sf http://127.0.0.1:47910/readyz > /dev/null; do
    kill -0 "$pid" 2> /dev/null || { cat "$log"; exit 1; }
    sleep 0.05
  done
  local ticks loaded rss
  ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  loaded=$(grep -o "loaded in [0-9]* ms ([0-9.]* MB at [0-9]* MB/s)" "$log" | head -1 || true)
  rss=$(awk '/^VmRSS/ {print int($2 / 1024)}' "/proc/$pid/status")
  echo "$label: $loaded, CPU $((ticks * 1000 / $(getconf CLK_TCK))) ms, RSS $rss MiB"
}

stop() {
  kill "$pid"
  wait "$pid" 2> /dev/null || true
}

# The copy: every file hard-linked but the newest day's, which is copied.
newest=$(find "$source_directory" -name '*.units.jsonl' -printf '%f\n' | sort | tail -1)
newest=${newest%.units.jsonl}
echo "source $source_directory, newest day $newest"

fresh_copy() {
  rm -rf "$work/snapshots" "$work/store"
  cp -al "$source_directory" "$work/snapshots"
  find "$work/snapshots" -name "$newest.*.jsonl" | while read -r file; do
    rm "$file"
    cp "$source_directory/${file#"$work/snapshots/"}" "$file"
  done
}

# Appends to each newest-day file its first hour again, a day later, with serials
# of their own; writes the appended lines alone under $work/alone as well.
append_hour() {
  rm -rf "$work/alone"
  python3 - "$work/snapshots" "$work/alone" "$newest" << 'EOF'
import datetime, os, pathlib, sys
snapshots, alone, newest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
day = datetime.date.fromisoformat(newest)
hour = f'"time_created":"{newest}T00:'.encode()
later = f'"time_created":"{day + datetime.timedelta(days=1)}T00:'.encode()
total = 0
for file in sorted(snapshots.rglob(f"{newest}.*.jsonl")):
    lines = [line.replace(hour, later).replace(b'"SN-', b'"SN-LATE-')
             for line in file.read_bytes().splitlines(keepends=True) if hour in line]
    data = b"".join(lines)
    with open(file, "ab") as out:
        out.write(data)
    target = alone / file.relative_to(snapshots)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    total += len(data)
print(f"appended {total / 1e6:.1f} MB")
EOF
}

for round in $(seq "$rounds"); do
  echo "== round $round"
  fresh_copy
  start "first start, empty store" "$work/snapshots" --store "$work/store"
  until grep -q "store written" "$log"; do sleep 0.1; done
  stop
  start "unchanged" "$work/snapshots" --store "$work/store"
  stop
  append_hour
  start "appended" "$work/snapshots" --store "$work/store"
  stop
  start "alone" "$work/alone"
  stop
done
