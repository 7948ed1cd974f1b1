#!/usr/bin/env bash
# The chaos soak (issue 51; BENCHMARKS.md "Chaos soak"):
#
#   bash benches/chaos.sh [SECONDS]        # default 1800; .ci/run runs 180
#
# A floor keeps writing while stq is killed with kill -9 and restarted on its store,
# its S3 server (s3s-fs) is killed and restarted, the tmpfs under the store's local
# copy fills up and is freed, and a store file is cut under the running stq; every
# answer is checked against a model of the snapshot files. benches/chaos.py says
# what exactly, and its knobs (environment). It builds the release stq unless STQ
# names a binary, installs s3s-fs under target/tmp when missing (the release
# tests/export/s3-tools.sh pins), and works in CHAOS_WORK (default target/chaos,
# emptied first). Mounting the tmpfs needs root; without it the full-disk fault is
# left out and the report says so. The report is printed and written to
# CHAOS_WORK/chaos-report.md; the exit status is 1 if any target was missed.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
stq=${STQ:-}
if [[ -z $stq ]]; then
    cargo build --release --locked --bin stq
    stq=$target/release/stq
fi
bash tests/export/s3-tools.sh "$target/tmp" s3s-fs
CHAOS_SECONDS=${1:-${CHAOS_SECONDS:-1800}} S3S_FS="$target/tmp/s3s-fs/bin/s3s-fs" \
    exec python3 benches/chaos.py "$stq" "${CHAOS_WORK:-$target/chaos}"
