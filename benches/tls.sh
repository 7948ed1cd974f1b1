#!/usr/bin/env bash
# HTTPS and JSON Web Tokens against plain HTTP and a tokens-file token (docs/api.md
# section 16): bash benches/tls.sh
#
# Two servers of the release binary on one generated snapshot (100 stations, 2 days),
# one plain HTTP, one HTTPS (an ECDSA P-256 certificate of a test CA), both accepting
# a tokens-file token and RS256 JSON Web Tokens. wrk (Debian's, OpenSSL inside;
# installed if missing) sends the load benchmark's Q1 (/units, one station, one hour;
# 2,000 paths drawn from the data) over 32 kept-alive connections, taking turns:
# HTTP with the tokens-file token, HTTPS with it, HTTP with the JWT (cached after its
# first request), TLS_ROUNDS times (default 3) of TLS_SECONDS each (default 5); each
# run's rate, and the server's CPU time (utime + stime, /proc) per request. Then
# `openssl s_time -new` makes new TLS connections (full handshakes, no resumption)
# for 10 s, and the HTTPS server's CPU time (utime + stime, /proc) is divided by
# their number.
#
# Every process it starts is stopped by pid on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${TLS_ROUNDS:-3}
seconds=${TLS_SECONDS:-5}
work=target/tls-bench
stq=${STQ_BINARY:-target/release/stq}
mkdir -p "$work"
pids=()
stop() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap stop EXIT

command -v wrk >/dev/null || apt-get install -y wrk
[[ -n ${STQ_BINARY:-} ]] || cargo build --release --quiet

venv=target/tmp/identity-venv
if ! "$venv/bin/python" -c "import cryptography, jwt" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet -r tests/identity/requirements.txt
fi
tool() { "$venv/bin/python" tests/identity/tool.py "$@"; }

if [[ ! -d $work/snapshots ]]; then
    "$stq" gen --out "$work/snapshots" --stations 100 --days 2 --end 2026-12-01T00:00:00Z >/dev/null
fi
token=bench-token-0000000000000001
printf '{"tokens": [{"name": "bench", "sha256": "%s", "stations": "*"}]}\n' \
    "$(printf %s "$token" | sha256sum | cut -d' ' -f1)" >"$work/tokens.json"
mkdir -p "$work/pki" "$work/keys"
tool pki "$work/pki"
tool keys "$work/keys"
jwt=$(printf '{"kid": "rsa", "alg": "RS256", "claims": {"iss": "bench", "sub": "bench", "exp": %d, "stq_stations": "*"}}\n' \
    $(($(date +%s) + 86400)) | tool mint "$work/keys")

serve() { # PORT ADMIN_PORT FLAGS...
    local port=$1 admin=$2
    shift 2
    "$stq" serve --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin" \
        --snapshots "$work/snapshots" --tokens "$work/tokens.json" --hot all \
        --jwt-jwks "$work/keys/jwks.json" --jwt-issuer bench "$@" >"$work/stq-$port.log" 2>&1 &
    pids+=($!)
    until grep -q "stq ready" "$work/stq-$port.log"; do sleep 0.2; done
}
serve 18580 18590
http_pid=${pids[-1]}
serve 18581 18591 --tls-cert "$work/pki/server.pem" --tls-key "$work/pki/server.key"
https_pid=${pids[-1]}

# Q1's paths: one station, one hour within the data.
"$venv/bin/python" - "$work/paths.txt" <<'EOF'
import random, sys, datetime
random.seed(2026)
end = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)
with open(sys.argv[1], "w") as out:
    for _ in range(2000):
        station = f"ST-{random.randrange(1, 101):03d}"
        start = end - datetime.timedelta(seconds=random.randrange(3600, 2 * 86400))
        stop = start + datetime.timedelta(hours=1)
        fmt = lambda t: t.strftime("%Y-%m-%dT%H:%M:%SZ")
        out.write(f"/units?station_ids={station}&from={fmt(start)}&to={fmt(stop)}\n")
EOF
curl -sf -H "Authorization: Bearer $token" "http://127.0.0.1:18580/$(head -1 "$work/paths.txt" | cut -c2-)" | head -c 120
echo

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ticks=$(getconf CLK_TCK)
# Requests a second, and the server's CPU time for each request (less sensitive
# than the rate to what else runs on the machine).
run() { # NAME URL TOKEN PID
    local line before after
    before=$(cpu "$4")
    line=$(wrk --threads 2 --connections 32 --duration "${seconds}s" --timeout 10s \
        --script benches/load/paths.lua "$2" -- "$work/paths.txt" "$3" | grep LOAD-RESULT)
    after=$(cpu "$4")
    python3 -c '
import json, sys
r = json.loads(sys.argv[2].split(" ", 1)[1])
assert r["non_2xx_or_3xx"] == 0 and r["read_errors"] == 0, r
rate = r["requests"] / r["duration_us"] * 1e6
p50, p99 = r["latency_p50_us"] / 1e3, r["latency_p99_us"] / 1e3
cpu = (int(sys.argv[4]) - int(sys.argv[3])) / int(sys.argv[5]) / r["requests"] * 1e6
print(f"{sys.argv[1]} {rate:.0f} req/s p50 {p50:.2f} ms p99 {p99:.2f} ms, server CPU {cpu:.1f} us/request")
' "$1" "$line" "$before" "$after" "$ticks"
}
for round in $(seq "$rounds"); do
    echo "round $round"
    run http-token http://127.0.0.1:18580 "$token" "$http_pid"
    run https-token https://127.0.0.1:18581 "$token" "$https_pid"
    run http-jwt http://127.0.0.1:18580 "$jwt" "$http_pid"
done

before=$(cpu "$https_pid")
handshakes=$(openssl s_time -connect 127.0.0.1:18581 -new -time 10 2>/dev/null |
    awk '/connections in/ {print $1; exit}')
after=$(cpu "$https_pid")
python3 -c "import sys; n, t = int(sys.argv[1]), (int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4]); print(f'full handshakes: {n} in 10 s, server CPU {t:.2f} s, {t / n * 1e3:.3f} ms each')" \
    "$handshakes" "$before" "$after" "$ticks"
