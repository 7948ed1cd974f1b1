#!/usr/bin/env bash
# Load benchmark of stq over loopback: bash benches/load.sh
#
# Installs wrk if it is missing (Debian's package), builds the release binary, and
# runs benches/load.rs (`cargo bench --bench load`), which generates the dataset
# under target/load/, starts stq and a limit server, drives them with wrk, prints
# the table and writes it to target/load-report.md. About 3 minutes, less once the
# dataset exists. LOAD_SECONDS=N shortens the measured runs (default 10 s each).
#
# Every process the benchmark starts is stopped by pid when it ends, also on
# failure or Ctrl-C: the benchmark's guards do it, and this script's trap does it
# from target/load/pids when the benchmark itself is killed.
set -euo pipefail
cd "$(dirname "$0")/.."

pid_file=target/load/pids
cargo_pid=

# Stops cargo and whatever the benchmark listed in the pid file, by pid, checking
# that each pid is still one of ours (stq, wrk, or the load bench binary).
stop_everything() {
    trap - EXIT INT TERM
    if [[ -n $cargo_pid ]] && kill -0 "$cargo_pid" 2>/dev/null; then
        kill "$cargo_pid" 2>/dev/null || true
    fi
    if [[ -f $pid_file ]]; then
        local pid name
        while read -r pid; do
            name=$(cat "/proc/$pid/comm" 2>/dev/null) || continue
            case $name in
                stq | wrk | load-*) kill -KILL "$pid" 2>/dev/null || true ;;
            esac
        done <"$pid_file"
        rm -f "$pid_file"
    fi
}
trap 'status=$?; stop_everything; exit $status' EXIT
trap 'stop_everything; exit 130' INT
trap 'stop_everything; exit 143' TERM

if ! command -v wrk >/dev/null; then
    sudo=
    if [[ $(id -u) != 0 ]]; then sudo=sudo; fi
    $sudo apt-get update
    $sudo apt-get install -y wrk
fi

cargo build --release

# In the background, so that the traps run at once on a signal.
cargo bench --bench load &
cargo_pid=$!
wait "$cargo_pid"
