#!/usr/bin/env bash
# Schemathesis against the real stq binary: the OpenAPI document it serves at
# /openapi.json is the test plan, every default check of the pinned schemathesis
# runs on every operation, and any failure fails CI. Two passes: over HTTP, then a
# shorter one over HTTPS (docs/api.md section 16: stq started with --tls-cert and
# --tls-key, a pair this script makes with Debian's openssl, and schemathesis
# trusting only the CA that signed it), so that every operation is checked over
# both.
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
# The HTTPS pass: the same operations and checks, each case over TLS (HTTP/1.1:
# schemathesis's client, requests, speaks no HTTP/2; curl and httpx test that).
# Fewer cases: what TLS can change is the transport, not the answers. About 4,500
# cases (the coverage phase's are as many as over HTTP), 14 s with the release build
# on two loaded cores beside the HTTP pass's 26 s (a debug build: 20 s and 41 s).
HTTPS_MAX_EXAMPLES=20
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

# The CA and the server's pair of the HTTPS pass, made here: a CA of its own,
# valid two days, and a certificate for 127.0.0.1 it signed (P-256 keys, PKCS#8).
pki=$(mktemp -d)
make_pki() {
    local ca_ext="basicConstraints=critical,CA:TRUE
keyUsage=critical,keyCertSign,cRLSign
subjectKeyIdentifier=hash"
    local leaf_ext="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/ca.key" 2>/dev/null
    openssl req -new -x509 -key "$pki/ca.key" -subj "/CN=stq schemathesis CA" -days 2 \
        -extensions v3_ca -config <(printf '[req]\ndistinguished_name=dn\n[dn]\n[v3_ca]\n%s\n' "$ca_ext") \
        -out "$pki/ca.pem"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/server.key" 2>/dev/null
    openssl req -new -key "$pki/server.key" -subj "/CN=127.0.0.1" -out "$pki/server.csr"
    openssl x509 -req -in "$pki/server.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" \
        -CAcreateserial -days 2 -extfile <(printf '%s\n' "$leaf_ext") \
        -out "$pki/server.pem" 2>/dev/null
    openssl verify -CAfile "$pki/ca.pem" "$pki/server.pem" >/dev/null
}

# Loopback, ports picked by the kernel: nothing else on the machine can clash.
# `--cors-origin '*'` makes the documented preflight (OPTIONS) answerable, so its
# 204 is tested too; without it every OPTIONS is a 405.
log=$(mktemp)
server=
# shellcheck disable=SC2317 # called by the trap
stop_server() {
    if [[ -n $server ]]; then
        kill "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
    fi
    server=
}
# shellcheck disable=SC2317 # called by the trap
cleanup() {
    stop_server
    rm -rf "$log" "$pki"
}
trap cleanup EXIT

# Starts stq with FLAGS, sets `address` to the base URL of its ready line.
start_server() {
    : >"$log"
    "$stq" serve --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
        --snapshots snapshots --tokens snapshots/tokens.json --cors-origin '*' "$@" \
        >"$log" 2>&1 &
    server=$!
    # The ready line ends with the address it listens on; it comes once the sample
    # snapshot has loaded, and stq binds only then.
    address=
    for _ in $(seq 1 600); do
        address=$(sed -n 's/.*stq ready: .* listening on \(https\{0,1\}:\/\/[0-9.:]*\).*/\1/p' "$log" | head -n 1)
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
}

# One pass: schemathesis against `address` with MAX_EXAMPLES cases an operation
# and phase, its JUnit report under REPORT, and EXTRA options; its status.
run_pass() {
    local name=$1 examples=$2 report_dir=$3
    shift 3
    local started=$SECONDS status=0
    "$venv/bin/schemathesis" --no-color --config-file .ci/schemathesis.toml run \
        "$address/openapi.json" \
        --header "Authorization: Bearer $TOKEN" \
        --max-examples "$examples" \
        --seed "$SEED" \
        --generation-database none \
        --report junit --report-dir "$report_dir" \
        "$@" \
        || status=$?
    echo "schemathesis ($name): exit $status after $((SECONDS - started)) s"
    if [[ $status -ne 0 ]]; then
        echo "== stq's log" >&2
        tail -n 50 "$log" >&2
    fi
    return "$status"
}

status=0
start_server
run_pass HTTP "$MAX_EXAMPLES" "$report" || status=$?
stop_server

# Over HTTPS: the pair above, schemathesis trusting its CA alone (not the
# system's roots, and not skipping verification), so that a certificate stq did
# not serve would fail every case.
make_pki
start_server --tls-cert "$pki/server.pem" --tls-key "$pki/server.key"
[[ $address == https://* ]] || { echo "stq does not serve HTTPS: $address" >&2; exit 1; }
run_pass HTTPS "$HTTPS_MAX_EXAMPLES" "$report-https" --tls-verify "$pki/ca.pem" || status=$?
stop_server
exit "$status"
