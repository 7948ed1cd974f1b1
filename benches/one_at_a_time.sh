# Sourced by the benches that count what one request costs (mallocs.sh,
# callgrind_serve.sh), with their arguments QUERY REQUESTS BUILD ...: the query's
# first REQUESTS paths of the load benchmark (make them first with `cargo bench
# --bench load -- --prepare`), `ask`, which has curl ask them one at a time over
# kept-alive connections, and `serve` and `stopped`, which start stq on the load
# benchmark's snapshot and stop it. On exit, a server still running is stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
query=$1
requests=$2
shift 2
paths=target/load/paths-$query.txt
[[ -f $paths ]] || { echo "no $paths: run cargo bench --bench load -- --prepare" >&2; exit 1; }
urls=$(mktemp)
# More temporary files of the sourcing script, removed on exit.
temporary=("$urls")
head -n "$requests" "$paths" | sed 's|^|http://127.0.0.1:18080|' > "$urls"
# curl writes only its first URL to -o: the rest go to stdout, dropped here.
ask() { xargs -a "$urls" curl -s -H "Authorization: Bearer stq-load-benchmark" > /dev/null; }
pid=
stop() { [[ -n $pid ]] && kill "$pid" 2>/dev/null || true; rm -f "${temporary[@]}"; }
trap stop EXIT
# serve LOG COMMAND...: `COMMAND serve` (an stq binary, or a launcher and its
# arguments before one) on the load snapshot, its output to LOG; returns once it is
# ready, its pid in $pid.
serve() {
    local log=$1
    shift
    RUST_LOG=warn "$@" serve --listen 127.0.0.1:18080 --admin-listen 127.0.0.1:18081 \
        --snapshots target/load/snapshot --tokens target/load/tokens.json > "$log" 2>&1 &
    pid=$!
    until curl -sf 127.0.0.1:18080/readyz > /dev/null; do sleep 0.5; done
}
# Stops the server `serve` started.
stopped() {
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=
}
