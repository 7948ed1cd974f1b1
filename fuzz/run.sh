#!/usr/bin/env bash
# Runs stq's cargo-fuzz targets (fuzz/fuzz_targets/), each for a bounded time.
#
# Usage, from anywhere:
#   fuzz/run.sh                 every target, 60 s each
#   fuzz/run.sh query_string    one target (query_string, snapshot_line, bearer_token)
#   FUZZ_SECONDS=600 fuzz/run.sh snapshot_line
#   FUZZ_TOOLCHAIN=stable fuzz/run.sh   the fallback below, even with nightly there
#
# What it does:
# - installs cargo-fuzz with `cargo install cargo-fuzz --locked` when it is missing;
# - uses `cargo +nightly fuzz` (libFuzzer with AddressSanitizer) when rustup lists a
#   nightly toolchain, else the default (stable) compiler with RUSTC_BOOTSTRAP=1 and
#   `--sanitizer none`, as a machine that cannot download a toolchain (CI) must;
#   FUZZ_TOOLCHAIN=nightly or stable chooses instead of looking;
# - copies the committed seeds fuzz/seeds/TARGET/ into the working corpus
#   fuzz/corpus/TARGET/ (not committed; it grows from run to run), then fuzzes;
# - prints each target's executions, exec/s and corpus size, and keeps its output
#   in fuzz/artifacts/TARGET/last-run.log.
# Exit status: 0 when no target crashed; 1 when one did, after printing the path of
# the crashing input (under fuzz/artifacts/TARGET/). Reproduce a crash with
#   cargo +nightly fuzz run TARGET fuzz/artifacts/TARGET/crash-...
# or turn it into a regression test of the parser it names. 2: bad usage.

set -euo pipefail

fuzz_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# cargo-fuzz finds the fuzz project as `fuzz/` under the crate it fuzzes.
cd "$fuzz_dir/.."

seconds="${FUZZ_SECONDS:-60}"
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
    echo "run.sh: FUZZ_SECONDS must be a whole number of seconds, not '$seconds'" >&2
    exit 2
fi

all_targets=()
for source in "$fuzz_dir"/fuzz_targets/*.rs; do
    all_targets+=("$(basename "$source" .rs)")
done
if [[ $# -gt 1 ]]; then
    echo "usage: $0 [TARGET]   (targets: ${all_targets[*]})" >&2
    exit 2
elif [[ $# -eq 1 ]]; then
    if [[ ! -f "$fuzz_dir/fuzz_targets/$1.rs" ]]; then
        echo "run.sh: no target '$1'; the targets are: ${all_targets[*]}" >&2
        exit 2
    fi
    targets=("$1")
else
    targets=("${all_targets[@]}")
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "run.sh: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

toolchain="${FUZZ_TOOLCHAIN:-auto}"
if [[ "$toolchain" == auto ]]; then
    if command -v rustup >/dev/null 2>&1 && rustup toolchain list | grep -q '^nightly'; then
        toolchain=nightly
    else
        toolchain=stable
    fi
fi
if [[ "$toolchain" == nightly ]]; then
    fuzz=(cargo +nightly fuzz)
    sanitizer=()
elif [[ "$toolchain" == stable ]]; then
    echo "run.sh: fuzzing with the stable compiler, without a sanitizer"
    # cargo-fuzz passes nightly-only compiler flags; this lets stable accept them.
    export RUSTC_BOOTSTRAP=1
    fuzz=(cargo fuzz)
    sanitizer=(--sanitizer none)
else
    echo "run.sh: FUZZ_TOOLCHAIN must be auto, nightly or stable, not '$toolchain'" >&2
    exit 2
fi

crashed=0
summary=()
for target in "${targets[@]}"; do
    corpus="fuzz/corpus/$target"
    artifacts="fuzz/artifacts/$target"
    log="$artifacts/last-run.log"
    mkdir -p "$corpus" "$artifacts"
    cp "fuzz/seeds/$target"/* "$corpus/"

    echo "run.sh: fuzzing $target for ${seconds}s"
    set +e
    "${fuzz[@]}" run "${sanitizer[@]}" "$target" "$corpus" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    set -e

    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    files=$(find "$corpus" -type f | wc -l)
    if [[ $status -eq 0 ]]; then
        summary+=("$target: ok, ${runs:-?} runs, ${speed:-?} exec/s, corpus $files files")
    else
        crashed=1
        crash=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
        summary+=("$target: FAILED (exit $status), crashing input: ${crash:-see $log}")
    fi
done

echo
echo "run.sh: summary (${seconds}s a target)"
printf '  %s\n' "${summary[@]}"
exit "$crashed"
