#!/usr/bin/env bash
# A replica joining against a store in S3, against a restart from a local
# store, interleaved: BENCHMARKS.md "A replica joining from an S3 store".
#
#   bash benches/s3_replica.sh SNAPSHOTS WORK [ROUNDS]
#
# SNAPSHOTS: a snapshot directory (e.g. 1000 stations x 7 days: `stq gen --stations
# 1000 --days 7`). WORK: a scratch directory for the bucket's files, the copies and
# the logs. s3s-fs must be on PATH or in $S3S_FS: a release build, as a bucket's
# server would be (`cargo install s3s-fs@0.14.1 --features binary --locked`).
#
# First a replica fills the bucket (a full load, a write of its copy, a push); then,
# each round, (a) a start from that copy as a local `--store` (a warm restart), and
# (b) a new replica with an empty copy on the bucket: it fetches every object the
# manifest names (of a sealed file, its index alone), then starts from them, and
# fetches the sealed files whole after it is ready (the fill). Each line: seconds
# from exec to /readyz ready, and the resident memory then; then the pull's and the
# fill's log lines.
set -euo pipefail
snapshots=${1:?usage: s3_replica.sh SNAPSHOTS WORK [ROUNDS]}
work=${2:?usage: s3_replica.sh SNAPSHOTS WORK [ROUNDS]}
rounds=${3:-3}
stq=${STQ:-target/release/stq}
s3s_fs=${S3S_FS:-s3s-fs}
tokens=${TOKENS:-snapshots/tokens.json}
port=18091
admin=19491
s3_port=19000

# Files deleted shortly before are not deleted here: ext4 looks past recently
# deleted inodes (for a minute or more) when it creates a file, which made a
# replica's pull after an `rm -rf` of thousands of files spend a fifth of its time
# there. A WORK left by an earlier run is moved aside and deleted at the end.
if [[ -e $work ]]; then
    mv "$work" "$work.old.$$"
fi
mkdir -p "$work/bucket/bench"
"$s3s_fs" --host 127.0.0.1 --port $s3_port --access-key bench-key --secret-key bench-secret \
    "$work/bucket" >"$work/s3s-fs.log" 2>&1 &
s3=$!
stop_all() {
    [[ -n ${server:-} ]] && kill "$server" 2>/dev/null || true
    kill "$s3" 2>/dev/null || true
    rm -rf "$work.old.$$"
}
trap stop_all EXIT
until curl -s -o /dev/null "127.0.0.1:$s3_port"; do sleep 0.1; done
export AWS_ACCESS_KEY_ID=bench-key AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1 \
    AWS_ENDPOINT_URL=http://127.0.0.1:$s3_port AWS_ALLOW_HTTP=true

# Starts stq with STORE_ARGS, waits for ready, prints the time and RSS; leaves it
# running as $server.
run() {
    local label=$1 log=$2
    shift 2
    local start end
    start=$(date +%s.%N)
    "$stq" serve --snapshots "$snapshots" --tokens "$tokens" --listen 127.0.0.1:$port \
        --admin-listen 127.0.0.1:$admin "$@" >"$log" 2>&1 &
    server=$!
    until [[ $(curl -s 127.0.0.1:$port/readyz || true) == *'"ready"'* ]]; do
        kill -0 "$server" 2>/dev/null || { cat "$log" >&2; exit 1; }
        sleep 0.05
    done
    end=$(date +%s.%N)
    echo "$label: ready after $(echo "$end - $start" | bc) s, $(grep VmRSS /proc/$server/status | tr -s ' ')"
}

stop() {
    kill "$server"
    wait "$server" 2>/dev/null || true
    server=
}

run "filling the bucket (full load)" "$work/fill.log" --store s3://bench/week --store-cache "$work/copy"
until grep -q "store pushed to" "$work/fill.log"; do sleep 0.2; done
grep "store pushed to\|store written" "$work/fill.log" | head -2
stop
echo "bucket: $(du -sh "$work/bucket" | cut -f1) on disk (s3s-fs keeps metadata files beside the objects)"

for round in $(seq 1 "$rounds"); do
    run "round $round, local store (warm restart)" "$work/local-$round.log" --store "$work/copy"
    stop
    # A new directory each round (see above).
    run "round $round, new replica on the bucket" "$work/replica-$round.log" \
        --store s3://bench/week --store-cache "$work/replica-$round"
    grep -o "the store s3://bench/week: read ([^)]*)" "$work/replica-$round.log"
    until grep -q "fetched whole into the copy" "$work/replica-$round.log"; do sleep 0.1; done
    grep -o "[0-9]* sealed files ([0-9]* bytes) fetched whole.*" "$work/replica-$round.log"
    stop
done
