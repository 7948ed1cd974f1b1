#!/usr/bin/env bash
# Soak test of stq: bash benches/soak.sh [RATE]
#
# What it does. Starts the release stq with its defaults (so at most 4 x CPUs queries
# at once; a request that waits 100 ms for a turn gets 503 `overloaded`) on the load
# benchmark's 100-station dataset, and for SOAK_SECONDS drives it over loopback with
# an open-loop, fixed-rate load of Q1 requests (one station, one hour of units; each
# request drawn at random from 5,000 paths drawn from the data) with oha. Meanwhile it
# sends stq a SIGHUP every SOAK_HUP_SECONDS (each one a full reload of the snapshot:
# a new generation built aside, then swapped in) and samples stq's resident memory.
# It checks that every answer was 2xx, 429 or 503 (connection errors count as
# errors), that stq is still alive, and that /readyz's generation is 1 + the reloads
# that completed. It prints a Markdown report and writes it to target/soak-report.md;
# it exits non-zero if any other answer or error happened, stq died, or the
# generation does not add up.
#
# How long. SOAK_SECONDS of load (default 180) plus about a minute: building, the
# dataset (made once by `cargo bench --bench load -- --prepare`, cached under
# target/load/; a few minutes the first time), stq's start-up, and the wait for the
# last reload. Not for every CI run: it loads both cores for minutes.
#
# How to call it:
#   bash benches/soak.sh                    # 180 s at 2 x BENCHMARKS.md's Q1 req/s
#   SOAK_SECONDS=45 bash benches/soak.sh    # a short run
#   bash benches/soak.sh 20000              # another rate (requests per second)
#
# Knobs (environment):
#   SOAK_SECONDS         seconds of load (default 180)
#   SOAK_RATE            target requests per second, also the first argument
#                        (default: 2 x the Q1 stq req/s of BENCHMARKS.md's table)
#   SOAK_HUP_SECONDS     seconds between two SIGHUPs (default 5)
#   SOAK_SAMPLE_SECONDS  seconds between two samples of stq's memory (default 2)
#   SOAK_CONNECTIONS     oha's connections (default 256; see below)
#
# The generator. wrk, the load benchmark's, is closed-loop: it sends the next request
# when an answer comes, so it cannot hold a rate. oha (from crates.io, installed here
# with `cargo install` when missing, at a pinned version because its JSON output
# changes between versions) schedules request i at start + i / RATE and hands it to
# the first free one of its SOAK_CONNECTIONS connections. The connections bound what
# is in flight: at the target rate and about a millisecond per answer, some 80 are
# busy, so 256 leave room for the stalls of a reload. Latencies are measured from the
# moment oha sends a request (no --latency-correction): on two cores shared with stq,
# oha may not keep up with the target rate, and correcting would then add oha's own
# backlog to every latency. The report gives the achieved rate beside the target.
# oha sends no Accept-Encoding here (--disable-compression), as wrk does in the load
# benchmark, so that Q1 means the same in both.
#
# stq's log is kept in target/soak/stq.log without its access lines (one per request:
# gigabytes in a soak); stq's own counts by status, from its admin /metrics, are in
# the report instead.
#
# Every process this script starts (cargo, stq, the log filter, oha, the SIGHUP and
# memory loops) is stopped by its pid when the script ends, also on failure or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly OHA_VERSION=1.16.0
# Sent with every request: the demo tokens file's `ops` token, which sees every station.
readonly TOKEN=stq-demo-ops

die() {
    echo "soak: $*" >&2
    exit 1
}

whole_number() {
    [[ $2 =~ ^[0-9]+$ && $2 -gt 0 ]] || die "$1 must be a whole number above 0, not '$2'"
}

seconds=${SOAK_SECONDS:-180}
hup_seconds=${SOAK_HUP_SECONDS:-5}
sample_seconds=${SOAK_SAMPLE_SECONDS:-2}
connections=${SOAK_CONNECTIONS:-256}
whole_number SOAK_SECONDS "$seconds"
whole_number SOAK_HUP_SECONDS "$hup_seconds"
whole_number SOAK_SAMPLE_SECONDS "$sample_seconds"
whole_number SOAK_CONNECTIONS "$connections"
if (($# > 1)); then
    die "usage: bash benches/soak.sh [RATE]"
fi
rate=${1:-${SOAK_RATE:-}}
rate_source="as given"
if [[ -z $rate ]]; then
    # The row `| Q1 ... | 39,214 | ...` of the load table: its second cell is stq's req/s.
    q1=$(grep -m1 -E '^\| *Q1 ' BENCHMARKS.md | awk -F'|' '{ gsub(/[ ,]/, "", $3); print $3 }') || true
    [[ $q1 =~ ^[0-9]+$ ]] ||
        die "cannot read the Q1 req/s from BENCHMARKS.md's load table; give the rate: SOAK_RATE=N"
    rate=$((2 * q1))
    rate_source="2 x the Q1 rate of BENCHMARKS.md ($q1 req/s)"
fi
whole_number "the rate (SOAK_RATE or the argument)" "$rate"

# ---------------------------------------------------------------------------
# Processes, and stopping them

cargo_pid='' stq_pid='' filter_pid='' oha_pid='' hup_pid='' sampler_pid=''

# Stops every process this script started, by pid: the helpers first, stq last and
# gracefully when it still runs (SIGTERM, then SIGKILL after 10 s).
stop_everything() {
    trap - EXIT INT TERM
    local pid
    for pid in $cargo_pid $oha_pid $hup_pid $sampler_pid; do
        kill "$pid" 2>/dev/null || true
    done
    if [[ -n $stq_pid ]] && kill -0 "$stq_pid" 2>/dev/null; then
        kill -TERM "$stq_pid" 2>/dev/null || true
        for _ in $(seq 100); do
            kill -0 "$stq_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$stq_pid" 2>/dev/null || true
    fi
    # The filter ends by itself once stq's stderr closes; this is for a stuck one.
    if [[ -n $filter_pid ]]; then
        kill "$filter_pid" 2>/dev/null || true
    fi
    wait 2>/dev/null || true
}
trap 'status=$?; stop_everything; exit $status' EXIT
trap 'stop_everything; exit 130' INT
trap 'stop_everything; exit 143' TERM

# ---------------------------------------------------------------------------
# Tools, build, dataset

if ! command -v jq >/dev/null || ! command -v curl >/dev/null; then
    sudo=
    if [[ $(id -u) != 0 ]]; then sudo=sudo; fi
    $sudo apt-get update
    $sudo apt-get install -y jq curl
fi
if [[ $(oha --version 2>/dev/null) != "oha $OHA_VERSION" ]]; then
    echo "soak: installing oha $OHA_VERSION (cargo install, a few minutes once)"
    cargo install oha --version "$OHA_VERSION" --locked
fi
oha=$(command -v oha) || die "oha is not on PATH after cargo install (is ~/.cargo/bin on PATH?)"

target=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
work=$target/soak
report_path=$target/soak-report.md
mkdir -p "$work"
rm -f "$work"/*

cargo build --release
stq=$target/release/stq

# The load benchmark's own dataset and paths (benches/load.rs): the same stq gen
# flags, cached, and the same 5,000 Q1 paths.
cargo bench --bench load -- --prepare &
cargo_pid=$!
wait "$cargo_pid"
cargo_pid=
snapshot=$target/load/snapshot
paths=$target/load/paths-Q1.txt
[[ -s $paths && -d $snapshot ]] || die "the load benchmark did not leave $paths and $snapshot"

# ---------------------------------------------------------------------------
# stq

log=$work/stq.log
mkfifo "$work/stq.stderr"
# Access lines are INFO lines of the target stq::access; every other line is kept.
grep --line-buffered -v -F ' stq::access: ' <"$work/stq.stderr" >"$log" &
filter_pid=$!
RUST_LOG=info "$stq" serve \
    --listen 127.0.0.1:0 \
    --admin-listen 127.0.0.1:0 \
    --snapshots "$snapshot" \
    --tokens snapshots/tokens.json \
    </dev/null >/dev/null 2>"$work/stq.stderr" &
stq_pid=$!
echo "soak: started stq (pid $stq_pid) on $snapshot; its log: $log"

ready_line=
for _ in $(seq 3000); do
    ready_line=$(grep -m1 'listening on http://' "$log" || true)
    [[ -n $ready_line ]] && break
    kill -0 "$stq_pid" 2>/dev/null || die "stq exited before it was ready; see $log"
    sleep 0.1
done
[[ -n $ready_line ]] || die "stq was not ready within 300 s; see $log"
base=$(grep -o -m1 'listening on http://127\.0\.0\.1:[0-9]*' <<<"$ready_line" | sed 's/^listening on //')
admin=$(grep -o -m1 'metrics at http://127\.0\.0\.1:[0-9]*' "$log" | sed 's/^metrics at //')
[[ -n $base && -n $admin ]] || die "no API or admin address in stq's log; see $log"
echo "soak: ${ready_line#*stq ready: }"

# Sets children_cpu to the CPU seconds (user + system) of this shell's reaped
# children: around the wait for oha, the only child reaped then, the difference is
# oha's. `times` runs in this shell itself, as a subshell would see no children.
children_cpu_seconds() {
    times >"$work/times.txt"
    children_cpu=$(tail -n 1 "$work/times.txt" | awk '{
        total = 0
        for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); total += t[1] * 60 + t[2] }
        printf "%.2f", total
    }')
}
rss_kb() {
    awk '/^VmRSS:/ { print $2 }' "/proc/$stq_pid/status" 2>/dev/null || true
}
# stq's CPU time so far, in clock ticks (user + system, fields 14 and 15).
stq_cpu_ticks() {
    awk '{ print $14 + $15 }' "/proc/$stq_pid/stat" 2>/dev/null || echo 0
}
reloads_completed() {
    grep -c 'reloaded: generation' "$log" || true
}
readyz_generation() {
    curl -sf "$base/readyz" | jq -r .generation
}

sed "s|^|$base|" "$paths" >"$work/urls.txt"
# One request first: the paths must answer 200 with data, or the soak measures nothing.
first_url=$(head -n1 "$work/urls.txt")
status=$(curl -s -o "$work/first.json" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "$first_url")
records=$(jq '.data | length' "$work/first.json" 2>/dev/null || echo 0)
[[ $status == 200 && $records -gt 0 ]] ||
    die "GET $first_url answered $status with $records records: $(head -c 300 "$work/first.json")"
generation_at_start=$(readyz_generation)
[[ $generation_at_start == 1 ]] || die "/readyz says generation $generation_at_start at start, not 1"

rss_start=$(rss_kb)
loadavg_start=$(cut -d' ' -f1 /proc/loadavg)
ticks_start=$(stq_cpu_ticks)
machine_start=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat)

# ---------------------------------------------------------------------------
# The soak: oha at the rate, SIGHUPs, memory samples

started=$(date +%s.%N)
elapsed() {
    awk -v now="$(date +%s.%N)" -v start="$started" 'BEGIN { printf "%.1f\n", now - start }'
}

# Both loops below stop on SIGTERM, but only between two of their steps: the trap
# sets a flag, so a SIGHUP sent is always also written down. Each sleeps in a child
# of its own that it kills when it stops, so that nothing outlives it.

# Memory: one line per sample, `seconds RSS_kB reloads_completed`.
(
    stop=0 sleeper=''
    trap 'stop=1' TERM
    while ((stop == 0)) && kill -0 "$stq_pid" 2>/dev/null; do
        echo "$(elapsed) $(rss_kb) $(reloads_completed)" >>"$work/rss.tsv"
        sleep "$sample_seconds" &
        sleeper=$!
        wait "$sleeper" || true
    done
    kill "$sleeper" 2>/dev/null || true
) &
sampler_pid=$!

# SIGHUPs: one every hup_seconds while the load runs, each written down when sent;
# only to stq's own pid, and only while it is still stq.
(
    stop=0 sleeper=''
    trap 'stop=1' TERM
    while ((stop == 0)); do
        sleep "$hup_seconds" &
        sleeper=$!
        wait "$sleeper" || true
        ((stop == 0)) || break
        [[ $(cat "/proc/$stq_pid/comm" 2>/dev/null) == stq ]] || break
        kill -HUP "$stq_pid"
        elapsed >>"$work/hups.txt"
    done
    kill "$sleeper" 2>/dev/null || true
) &
hup_pid=$!

echo "soak: ${seconds} s at $rate req/s ($rate_source), $connections connections, a SIGHUP every ${hup_seconds} s"
"$oha" --no-tui --output-format json --output "$work/oha.json" \
    --urls-from-file "$work/urls.txt" \
    -H "Authorization: Bearer $TOKEN" \
    --disable-compression \
    -q "$rate" -z "${seconds}s" -c "$connections" \
    --wait-ongoing-requests-after-deadline \
    -t 15s \
    --stats-success-breakdown \
    >"$work/oha.out" 2>&1 &
oha_pid=$!
oha_status=0
children_cpu_seconds
children_before=$children_cpu
wait "$oha_pid" || oha_status=$?
children_cpu_seconds
oha_cpu=$(awk -v a="$children_before" -v b="$children_cpu" 'BEGIN { printf "%.1f", b - a }')
oha_pid=
kill "$hup_pid" 2>/dev/null || true
wait "$hup_pid" 2>/dev/null || true
hup_pid=
load_ended=$(elapsed)
loadavg_end=$(cut -d' ' -f1 /proc/loadavg)
ticks_end=$(stq_cpu_ticks)
machine_end=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat)
[[ $oha_status == 0 && -s $work/oha.json ]] ||
    die "oha failed (exit $oha_status): $(tail -n 20 "$work/oha.out")"

# ---------------------------------------------------------------------------
# After the load: let the last reloads finish, then look

# Replays the log's SIGHUP and reload lines through stq's reload queue (src/reload.rs:
# reloads run one at a time; a request while one runs queues one more, and a request
# while one is queued adds nothing). Prints `busy completed failed coalesced`.
reload_state() {
    awk '
        /SIGHUP: reloading/ {
            if (!running) running = 1
            else if (!queued) queued = 1
            else coalesced++
        }
        /reloaded: generation/ || /reload failed/ {
            if (/reload failed/) failed++; else completed++
            if (queued) queued = 0; else running = 0
        }
        END { print (running ? 1 : 0), completed + 0, failed + 0, coalesced + 0 }
    ' "$log"
}
alive=yes
settle_deadline=$((SECONDS + 180))
while true; do
    kill -0 "$stq_pid" 2>/dev/null || { alive=no; break; }
    read -r busy completed failed coalesced < <(reload_state)
    [[ $busy == 0 ]] && break
    ((SECONDS < settle_deadline)) || { echo "soak: a reload was still running 180 s after the load" >&2; break; }
    sleep 0.5
done
sleep "$sample_seconds"
read -r busy completed failed coalesced < <(reload_state)

generation_at_end=
rss_end=
rss_trimmed=
if [[ $alive == yes ]]; then
    generation_at_end=$(readyz_generation || true)
    rss_end=$(rss_kb)
    echo "$(elapsed) $rss_end $(reloads_completed)" >>"$work/rss.tsv"
    curl -sf "$admin/metrics" >"$work/metrics.txt" || true
    # Resident memory is not live memory: glibc's malloc keeps much of what is freed.
    # malloc_trim(0), called in stq through gdb, hands every free page back, so what
    # stays is what stq still holds, and growth across reloads can be told apart from
    # memory the allocator kept. It runs after the end figure was taken.
    if [[ ${SOAK_TRIM:-1} == 1 ]] && command -v gdb >/dev/null; then
        if gdb -p "$stq_pid" -batch -ex 'call (int) malloc_trim(0)' >"$work/gdb.out" 2>&1; then
            rss_trimmed=$(rss_kb)
        else
            echo "soak: gdb could not call malloc_trim in stq; see $work/gdb.out" >&2
        fi
    fi
fi
kill "$sampler_pid" 2>/dev/null || true
wait "$sampler_pid" 2>/dev/null || true
sampler_pid=

# ---------------------------------------------------------------------------
# The report

hups_sent=$(wc -l <"$work/hups.txt" 2>/dev/null || echo 0)
hups_logged=$(grep -c 'SIGHUP: reloading' "$log" || true)
mb() { awk -v kb="${1:-0}" 'BEGIN { printf "%.1f MB", kb * 1024 / 1e6 }'; }
ms() { awk -v s="$1" 'BEGIN { if (s == "null" || s == "") print "-"; else printf "%.2f ms", s * 1000 }'; }

oha_json=$work/oha.json
duration=$(jq '.summary.total' "$oha_json")
answered=$(jq '[.statusCodeDistribution[]] | add // 0' "$oha_json")
failed_requests=$(jq '[.errorDistribution[]] | add // 0' "$oha_json")
sent=$((answered + failed_requests))
achieved=$(awk -v n="$sent" -v s="$duration" 'BEGIN { printf "%.0f", n / s }')
achieved_share=$(awk -v a="$achieved" -v r="$rate" 'BEGIN { printf "%.0f", 100 * a / r }')
ok_2xx=$(jq '[.statusCodeDistribution | to_entries[] | select(.key | test("^2")) | .value] | add // 0' "$oha_json")
refused=$(jq '[.statusCodeDistribution | to_entries[] | select(.key == "429" or .key == "503") | .value] | add // 0' "$oha_json")
bad_statuses=$(jq '[.statusCodeDistribution | to_entries[] | select((.key | test("^2")) or .key == "429" or .key == "503" | not) | .value] | add // 0' "$oha_json")
errors=$((bad_statuses + failed_requests))
status_counts=$(jq -r '.statusCodeDistribution | to_entries | map("\(.key): \(.value)") | join(", ")' "$oha_json")
error_counts=$(jq -r '.errorDistribution | to_entries | map("\(.key): \(.value)") | join("; ")' "$oha_json")

latency_row() { # NAME PERCENTILES_KEY MAX
    local name=$1 key=$2 max=$3
    echo "| $name | $(ms "$(jq ".$key.p50 // null" "$oha_json")") | $(ms "$(jq ".$key.p99 // null" "$oha_json")") | $(ms "$(jq ".${key}[\"p99.9\"] // null" "$oha_json")") | $(ms "$max") |"
}
# oha's histograms have 11 even buckets from the fastest to the slowest: the last
# bucket's key is the slowest answer of that set.
max_of() { jq "(.$1 // {}) | keys | map(tonumber) | max // null" "$oha_json"; }

rss_peak=$(awk '$2 > peak { peak = $2 } END { print peak + 0 }' "$work/rss.tsv")
# The lowest sample while each number of reloads had completed: what a generation
# settles at, away from the moments when two generations exist at once.
rss_settled=$(awk '
    $2 != "" { if (!($3 in low) || $2 < low[$3]) low[$3] = $2; if ($3 > last) last = $3 }
    END { for (k = 0; k <= last; k++) if (k in low) print k, low[k] }
' "$work/rss.tsv")
# At most 8 of them: the first, the last, and evenly spaced between.
rss_settled_line=$(awk '
    { k[NR] = $1; v[NR] = $2 }
    END {
        points = (NR < 8) ? NR : 8
        for (t = 0; t < points; t++) {
            j = (points == 1) ? 1 : 1 + int((NR - 1) * t / (points - 1) + 0.5)
            if (j == previous) continue
            previous = j
            out = out (out == "" ? "" : ", ") sprintf("%d: %.0f MB", k[j], v[j] * 1024 / 1e6)
        }
        print out
    }' <<<"$rss_settled")
reload_ms=$(grep -o 'reloaded: generation.* in [0-9]* ms' "$log" | sed -E 's/.* in ([0-9]+) ms/\1/' | sort -n || true)
reload_times=$(awk '{ v[NR] = $1 } END { if (NR) printf "min %d ms, median %d ms, max %d ms", v[1], v[int((NR + 1) / 2)], v[NR]; else print "none" }' <<<"$reload_ms")
hz=$(getconf CLK_TCK)
# Little's law: the answers in flight on average, against the connections oha has.
in_flight=$(awk -v r="$achieved" -v l="$(jq '.summary.average' "$oha_json")" 'BEGIN { printf "%.0f", r * l }')
if ((achieved * 100 >= rate * 95)); then
    rate_note="oha held the target rate."
elif ((in_flight * 10 >= connections * 9)); then
    rate_note="oha did not reach the target rate because all its connections were waiting for answers: stq answered no faster on this machine, at this moment. Requests scheduled but not sent are not counted anywhere."
else
    rate_note="oha did not reach the target rate with connections to spare: it ran out of CPU itself. Requests scheduled but not sent are not counted anywhere."
fi
stq_cores=$(awk -v a="$ticks_start" -v b="$ticks_end" -v hz="$hz" -v s="$load_ended" 'BEGIN { printf "%.2f", (b - a) / hz / s }')
machine_busy=$(awk -v a="$machine_start" -v b="$machine_end" 'BEGIN {
    split(a, x, " "); split(b, y, " "); printf "%.0f%%", 100 * (y[1] - x[1]) / (y[2] - x[2]) }')
server_statuses=$(grep -E '^stq_requests_total\{' "$work/metrics.txt" 2>/dev/null |
    sed -E 's/.*endpoint="([^"]*)".*status="([^"]*)".* ([0-9.e+]+)$/\1 \2: \3/' | paste -sd, - | sed 's/,/, /g' || true)
warn_lines=$(grep -E '^[^ ]+ +(WARN|ERROR) ' "$log" || true)
warn_count=$(grep -c . <<<"$warn_lines" || true)

verdicts=()
[[ $errors == 0 ]] || verdicts+=("$errors answers or errors that are neither 2xx nor 429/503")
[[ $alive == yes ]] || verdicts+=("stq died during the soak (see $log)")
if [[ $alive == yes && $generation_at_end != $((1 + completed)) ]]; then
    verdicts+=("/readyz says generation $generation_at_end, not 1 + $completed completed reloads")
fi
[[ $failed == 0 ]] || verdicts+=("$failed reloads failed")

{
    echo "## Soak: $(date -u +%Y-%m-%dT%H:%MZ), $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo
    echo "stq with its defaults on the load benchmark's dataset, Q1 requests (1 station, 1 h of"
    echo "units, drawn from 5,000 paths) from oha $OHA_VERSION at a fixed rate on $connections"
    echo "connections for $seconds s, a SIGHUP every $hup_seconds s; stq and oha share $(nproc) CPUs."
    echo
    echo "| load | |"
    echo "|---|---|"
    echo "| target rate | $rate req/s ($rate_source) |"
    echo "| achieved rate | **$achieved req/s** ($achieved_share% of the target) |"
    echo "| requests sent | $sent in $(printf '%.1f' "$duration") s |"
    echo "| status codes | $status_counts |"
    echo "| 2xx / 429+503 | $ok_2xx / $refused |"
    echo "| connection and other errors | $failed_requests${error_counts:+ ($error_counts)} |"
    echo "| **errors (not 2xx, 429 or 503)** | **$errors** |"
    echo "| stq's own count (admin /metrics) | ${server_statuses:-unavailable} |"
    echo "| CPU | stq $stq_cores cores on average, oha $(awk -v c="$oha_cpu" -v s="$duration" 'BEGIN { printf "%.2f", c / s }'); the machine's CPUs were $machine_busy busy (stq, oha and any other tenant; load average $loadavg_start before, $loadavg_end after) |"
    echo "| mean answers in flight | $in_flight of $connections connections |"
    echo
    echo "$rate_note"
    echo
    echo "| latency, from oha's send | p50 | p99 | p99.9 | max |"
    echo "|---|---|---|---|---|"
    latency_row "all answers" latencyPercentiles "$(jq '.summary.slowest' "$oha_json")"
    latency_row "2xx answers" latencyPercentilesSuccessful "$(max_of responseTimeHistogramSuccessful)"
    if (($(jq '[.statusCodeDistribution | to_entries[] | select(.key | test("^2") | not) | .value] | add // 0' "$oha_json") > 0)); then
        latency_row "other answers" latencyPercentilesNotSuccessful "$(max_of responseTimeHistogramNotSuccessful)"
    fi
    echo
    echo "| memory and reloads | |"
    echo "|---|---|"
    echo "| RSS at start (after the first load) | $(mb "$rss_start") |"
    echo "| RSS peak (samples every $sample_seconds s) | $(mb "$rss_peak") |"
    echo "| RSS at the end (reloads settled) | $(if [[ -n $rss_end ]]; then mb "$rss_end"; else echo "stq gone"; fi) |"
    if [[ -n $rss_trimmed ]]; then
        echo "| RSS at the end after malloc_trim(0) (gdb): what stq still holds | $(mb "$rss_trimmed") |"
    fi
    echo "| RSS between reloads (lowest sample after N reloads) | $rss_settled_line |"
    echo "| SIGHUPs sent / logged by stq | $hups_sent / $hups_logged |"
    echo "| reloads completed / failed / merged into a queued one | $completed / $failed / $coalesced |"
    echo "| reload times | $reload_times |"
    echo "| /readyz generation at the end | ${generation_at_end:-stq gone} (1 + $completed expected) |"
    echo
    echo "stq's WARN and ERROR lines: $warn_count"
    if [[ $warn_count -gt 0 ]]; then
        echo
        echo '```'
        head -n 20 <<<"$warn_lines"
        if ((warn_count > 20)); then echo "... $((warn_count - 20)) more in $log"; fi
        echo '```'
    fi
    echo
    if ((${#verdicts[@]} == 0)); then
        echo "**Verdict: pass** (no answer outside 2xx/429/503, stq alive, generation adds up)."
    else
        echo "**Verdict: FAIL**"
        for verdict in "${verdicts[@]}"; do echo "- $verdict"; done
    fi
} >"$report_path"

echo
cat "$report_path"
echo
echo "soak: report written to $report_path; oha's JSON, stq's log and the memory samples are in $work"
((${#verdicts[@]} == 0))
