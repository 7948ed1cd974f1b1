#!/usr/bin/env bash
# Rounds of benches/cpu_per_request.sh, the builds' order rotated each round, and
# each build's median CPU µs a request at the end: bash benches/cpu_rounds.sh QUERY
# SECONDS ROUNDS BUILD[:hot] ... (STORE= and SNAPSHOTS= as cpu_per_request.sh takes
# them). On a shared two-core box one run of a build moves by up to 30%: compare
# medians of several rounds measured together.
set -euo pipefail
cd "$(dirname "$0")/.."
query=$1
seconds=$2
rounds=$3
shift 3
builds=("$@")
count=${#builds[@]}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for ((round = 0; round < rounds; round++)); do
    order=()
    for ((slot = 0; slot < count; slot++)); do
        order+=("${builds[$(((round + slot) % count))]}")
    done
    bash benches/cpu_per_request.sh "$query" "$seconds" "${order[@]}" | tee -a "$log"
done
echo "== medians ($query, $rounds rounds)"
for build in "${builds[@]}"; do
    grep -F "$query $build: " "$log" |
        awk '{for (field = 1; field <= NF; field++) if ($field == "us") print $(field - 1)}' |
        sort -n |
        awk -v build="$build" '
            {runs[NR] = $1}
            END {
                median = (NR % 2) ? runs[(NR + 1) / 2] : (runs[NR / 2] + runs[NR / 2 + 1]) / 2
                all = ""
                for (run = 1; run <= NR; run++) all = all " " runs[run]
                printf "%s: median %s us (%s)\n", build, median, all
            }'
done
