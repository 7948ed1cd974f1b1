#!/usr/bin/env python3
"""The scale benchmark: load and incremental reload, measured as an operator sees
them (BENCHMARKS.md).

usage: python3 benches/reload.py STQ_BINARY SNAPSHOT_DIRECTORY LABEL

The snapshot is `stq gen --stations 1000 --days N --end 2026-11-24T00:00:00Z`
(the appended lines are of 2026-11-23). For each run the directory is copied to
/tmp/bench/LABEL-snapshot, so the appends never touch the original, and
synced to disk before stq starts, so that the load does not share the machine with
the copy's writeback.

1. stq without --watch: the load's time and rate (from stq's own `loaded in` log
   line), the RSS after it against the JSONL bytes, then a SIGHUP with nothing
   changed, timed from the signal until /readyz shows the next generation (ROUNDS
   times).
2. stq with --watch: one unit line appended to one station's file, timed until a
   query finds it (ROUNDS times); then one line to each of 20 stations at once,
   timed until all 20 are found: about one minute of the plant's records (the
   dataset has 1.2 records per station and minute). The time includes the watch's
   0.3 s of quiet. Before each append the peak RSS (VmHWM) is reset through
   /proc/PID/clear_refs, and after it is served the peak is divided by the RSS
   before: that reload's own peak. Rounds are 12 s apart, longer than the time a
   replaced generation is kept for requests that planned on it (--request-timeout,
   10 s, and 1 s), so each reload starts from one generation.

Prints one JSON line of figures; stq's logs go to /tmp/bench/LABEL-*.log.
"""

import json, os, re, shutil, signal, subprocess, sys, time, urllib.request, socket

binary, source, label = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs("/tmp/bench", exist_ok=True)
TOKEN = "stq-demo-ops"
TOKENS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "snapshots", "tokens.json")

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close(); return port

def get(url, token=None):
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()

def rss_mib(pid, field="VmRSS"):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return None

servers = []

def stop_all():
    for process in servers:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait()

import atexit
atexit.register(stop_all)

def start(directory, extra):
    port, admin = free_port(), free_port()
    log = open(f"/tmp/bench/{label}-{'watch' if extra else 'hup'}.log", "w")
    process = subprocess.Popen([binary, "serve", "--listen", f"127.0.0.1:{port}",
        "--admin-listen", f"127.0.0.1:{admin}", "--snapshots", directory,
        "--tokens", TOKENS] + extra, stdout=subprocess.DEVNULL, stderr=log,
        env=dict(os.environ, RUST_LOG="info"))
    servers.append(process)
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    while True:
        try:
            status, body = get(base + "/readyz")
            if status == 200:
                break
        except Exception:
            pass
        if process.poll() is not None:
            sys.exit("stq exited")
        time.sleep(0.05)
    return process, base, time.monotonic() - started

def generation(base):
    return json.loads(get(base + "/readyz")[1])["generation"]

def fresh_copy():
    target = f"/tmp/bench/{label}-snapshot"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    # The copy's dirty pages are written back before stq starts: 3.6 GB of
    # writeback during the load measured the disk, not stq (one run: 238 MB/s
    # right after the copy, 291 to 407 MB/s from the same files at rest).
    os.sync()
    return target

ROUNDS = int(os.environ.get("ROUNDS", "3"))
results = {}
# 1. No-change SIGHUP.
directory = fresh_copy()
process, base, startup = start(directory, [])
results["startup_s"] = round(startup, 2)
with open(f"/tmp/bench/{label}-hup.log") as log:
    loaded = re.search(r"loaded in (\d+) ms \(([\d.]+) MB at (\d+) MB/s\)", log.read())
jsonl_mb = float(loaded.group(2))
results["load_ms"] = int(loaded.group(1))
results["load_mb_per_s"] = int(loaded.group(3))
results["jsonl_mb"] = jsonl_mb
results["rss_after_load_mib"] = round(rss_mib(process.pid))
results["rss_over_jsonl"] = round(rss_mib(process.pid) * 1.048576 / jsonl_mb, 3)
hups = []
for round_ in range(ROUNDS):
    before = generation(base)
    began = time.monotonic()
    process.send_signal(signal.SIGHUP)
    while generation(base) == before:
        time.sleep(0.002)
    hups.append(round((time.monotonic() - began) * 1000))
    time.sleep(1)
results["nochange_sighup_ms"] = hups
results["peak_rss_mib_hup_run"] = round(rss_mib(process.pid, "VmHWM"))
process.send_signal(signal.SIGTERM); process.wait()

# 2. --watch: one line appended to one station; then one line to each of 20 stations.
directory = fresh_copy()
process, base, _ = start(directory, ["--watch"])
time.sleep(1)
rss_before = rss_mib(process.pid)
window = "from=2026-11-20T00:00:00Z&to=2026-11-25T00:00:00Z"

def line(station, serial):
    return json.dumps({"station_id": station, "unit_serial": serial,
        "time_created": "2026-11-23T12:00:00Z", "unit_type": "pcb-power",
        "direction": "output", "result": "pass"}) + "\n"

def served(station, serial):
    status, body = get(f"{base}/units?station_ids={station}&serial_number={serial}&{window}", TOKEN)
    return status == 200 and json.loads(body)["data"]

def reset_peak():
    # From here VmHWM is the peak of what follows (Linux 4.0 and later).
    with open(f"/proc/{process.pid}/clear_refs", "w") as clear:
        clear.write("5")

def append_and_wait(stations, tag, peaks):
    before = rss_mib(process.pid)
    reset_peak()
    began = time.monotonic()
    for station in stations:
        with open(f"{directory}/{station}/2026-11-23.units.jsonl", "a") as file:
            file.write(line(station, f"SN-{tag}-{station}"))
    for station in stations:
        while not served(station, f"SN-{tag}-{station}"):
            time.sleep(0.005)
    served_ms = round((time.monotonic() - began) * 1000)
    peaks.append(round(rss_mib(process.pid, "VmHWM") / before, 3))
    # Longer than --request-timeout and its margin: the generation before is
    # retired (docs/api.md section 8), so each reload starts from one generation.
    time.sleep(GRACE_S)
    return served_ms

GRACE_S = 12
one, one_peaks = [], []
for round_ in range(ROUNDS):
    one.append(append_and_wait(["ST-0500"], f"ONE{round_}", one_peaks))
results["watch_one_line_to_served_ms"] = one
results["peak_over_rss_before_one_line"] = one_peaks
twenty, twenty_peaks = [], []
stations = [f"ST-{number:04d}" for number in range(1, 1001, 50)]
for round_ in range(ROUNDS):
    twenty.append(append_and_wait(stations, f"TWENTY{round_}", twenty_peaks))
results["watch_20_stations_to_served_ms"] = twenty
results["peak_over_rss_before_20_stations"] = twenty_peaks
results["rss_before_watch_mib"] = round(rss_before)
results["rss_after_watch_mib"] = round(rss_mib(process.pid))
process.send_signal(signal.SIGTERM); process.wait()
print(label, json.dumps(results))
