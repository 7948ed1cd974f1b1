#!/usr/bin/env bash
# Schemathesis against the real stq binary: the OpenAPI document it serves at
# /openapi.json is the test plan, every default check of the pinned schemathesis
# runs on every operation, and any failure fails CI.
#
# Run by .ci/run against the release build the Debian package is made of
# (STQ_BINARY). Runs on a fresh machine: it installs schemathesis itself, from
# PyPI, into a venv under target/.
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned: the checks, their defaults and the generated cases change between
# releases. In 4.32.5 every check is on by default (max_response_time aside, which
# needs a limit): not_a_server_error, status_code_conformance,
# content_type_conformance, response_headers_conformance,
# response_schema_conformance, negative_data_rejection, positive_data_acceptance,
# missing_required_header, unsupported_method, allow_header_conformance,
# use_after_free, ensure_resource_availability, ignored_auth and
# object_level_authorization (use_after_free, ensure_resource_availability and
# object_level_authorization look at resources created and deleted: this
# read-only API has none, so they find nothing to check).
SCHEMATHESIS_VERSION=4.32.5
# Test cases per operation and phase. With the seed fixed, the run is the same
# every time: about 2,000 cases, 15 s on two idle cores, under 2 minutes on two
# cores shared with other builds (200 took 27 s idle, 150 s loaded).
MAX_EXAMPLES=100
SEED=20261120
# `stq-demo-ops` may see every station (README.md, snapshots/tokens.json), so a
# generated station list is a 200 rather than a 403.
TOKEN="stq-demo-ops"

target_dir=${CARGO_TARGET_DIR:-target}
venv=target/schemathesis-venv
report=target/schemathesis-report

if [[ ! -x $venv/bin/schemathesis ]] ||
    [[ $("$venv/bin/schemathesis" --version 2>/dev/null) != *" $SCHEMATHESIS_VERSION" ]]; then
    echo "installing schemathesis $SCHEMATHESIS_VERSION into $venv"
    rm -rf "$venv"
    # Debian's python3 leaves `venv` (and its ensurepip) to the python3-venv package.
    if ! python3 -c 'import ensurepip, venv' 2>/dev/null && command -v apt-get >/dev/null; then
        apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    fi
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi
"$venv/bin/schemathesis" --version

# STQ_BINARY: the binary to test; .ci/run gives it the release build the Debian
# package is made of (the production build, without fault-injection). Without it, a
# debug build.
stq=${STQ_BINARY:-}
if [[ -z $stq ]]; then
    cargo build --locked --bin stq
    stq=$target_dir/debug/stq
fi

# Loopback, ports picked by the kernel: nothing else on the machine can clash.
# `--cors-origin '*'` makes the documented preflight (OPTIONS) answerable, so its
# 204 is tested too; without it every OPTIONS is a 405.
log=$(mktemp)
"$stq" serve --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
    --snapshots snapshots --tokens snapshots/tokens.json --cors-origin '*' \
    >"$log" 2>&1 &
server=$!
# shellcheck disable=SC2317 # called by the trap
stop_server() {
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    rm -f "$log"
}
trap stop_server EXIT

# The ready line ends with the address it listens on; it comes once the sample
# snapshot has loaded, and stq binds only then.
address=
for _ in $(seq 1 600); do
    address=$(sed -n 's/.*stq ready: .* listening on \(http:\/\/[0-9.:]*\).*/\1/p' "$log" | head -n 1)
    [[ -n $address ]] && break
    if ! kill -0 "$server" 2>/dev/null; then
        cat "$log"
        echo "stq exited before it was ready" >&2
        exit 1
    fi
    sleep 0.1
done
if [[ -z $address ]]; then
    cat "$log"
    echo "stq was not ready within 60 s" >&2
    exit 1
fi
echo "stq serves $address"

started=$SECONDS
status=0
"$venv/bin/schemathesis" --no-color --config-file .ci/schemathesis.toml run \
    "$address/openapi.json" \
    --header "Authorization: Bearer $TOKEN" \
    --max-examples "$MAX_EXAMPLES" \
    --seed "$SEED" \
    --generation-database none \
    --report junit --report-dir "$report" \
    || status=$?
echo "schemathesis: exit $status after $((SECONDS - started)) s"
if [[ $status -ne 0 ]]; then
    echo "== stq's log" >&2
    tail -n 50 "$log" >&2
fi
exit "$status"
