#!/usr/bin/env python3
"""The live-floor benchmark: `stq serve --watch` while stations never stop writing
and a dashboard polls beside them (BENCHMARKS.md).

usage: python3 benches/live_floor.py STQ_BINARY SNAPSHOT_DIRECTORY LABEL
knobs: RATES=120,1200 (lines/s)  SECONDS=60 (per rate)  IDLE_SECONDS=60
       POLL_HZ=20 (dashboard)  STATIONS=200 (written to)  GIVE_UP_SECONDS=120
       WATCH_POLL= (e.g. 1s: `--watch-poll 1s`, a look at every file every second
       instead of inotify, as on a network share; none by default)
       STQ_STORE=DIR (stq's own variable, passed on like the rest of the
       environment: `--store DIR`; the store is written for the working copy's path)
       CLOCK_FROM= (e.g. 2026-11-24T00:00:00Z, the snapshot's end: `time_created`
       counts on from there by the wall clock's time since the script began, as a
       floor's clock runs on from its newest records; by default the wall clock,
       so that each station's first new line moves its hot window days ahead and
       seals its whole hot day)

The snapshot is `stq gen --stations N --days D --end 2026-11-24T00:00:00Z`; the
writers append to the files of its last day, 2026-11-23.

1. A working copy at /tmp/bench/LABEL-snapshot: every file hard-linked, then each
   file the writers append to (units and metrics of 2026-11-23 of STATIONS stations,
   evenly spread over the station ids) replaced by a real copy, so the original is
   never written. Synced to disk, then `stq serve --watch` starts on it (logs in
   /tmp/bench/LABEL-stq.log) and the script waits for /readyz.
2. Idle: a dashboard poller, in its own process so that this script's other
   threads never hold it up, asks one small query (the first written station, one
   hour of units inside the data, like the load test's Q1) POLL_HZ times a second on
   one kept-alive connection and records each latency. For 10 s it polls alone,
   then for IDLE_SECONDS (as long as a rate's writing, so that both p99s stand on
   as many queries) a checker (step 3) polls too. stq's
   CPU (utime + stime from /proc/PID/stat) over wall time is its CPU in cores.
3. Per rate: one writer thread appends whole visits as `stq gen` writes them, 12
   lines each (the `input` unit line, 10 metric lines, the `output` unit line: a
   real visit of that station with a new `unit_serial` LF-RATE-N, `time_created` the
   wall clock in UTC with milliseconds and strictly increasing, and the output's
   `cycle_ms` to match). Every written station has one visit under way at all
   times: line i goes to station i mod STATIONS, so each file grows all the time.
   Lines are paced evenly, each one `write` of a whole line ending in `\\n`, and its
   append time taken from the monotonic clock. A checker thread asks every 50 ms,
   on its own kept-alive connection, `/units` (both directions) and `/metrics` of
   the written stations (named in `station_ids`; all stations, unnamed, when all
   are written) from the oldest line not yet seen (not the newest one seen: one
   reload may serve a later line of one file before an earlier line of another) to
   a day ahead, following cursors in pages of 10,000. Only lines that are new, or
   were written after the oldest unseen one, come back. The checker's queries cost
   stq CPU all the same; that cost is in the idle CPU (the second part of step 2),
   so "CPU beyond the polling queries" is the writing CPU minus the idle CPU. A
   line's lag is the time its answer arrived minus its append time. After the
   writes the script waits until every line was seen, or GIVE_UP_SECONDS, and
   reports the lines never seen (they are in no lag figure); then 12 s more (longer
   than a replaced generation is kept: --request-timeout 10 s and 1 s) before the
   RSS after. The next rate starts from there.

Reported per rate: lines and bytes written; lag p50, p99, max; lines never seen;
stq's CPU in cores while writing and from the first write until every line was
seen (or the give-up), beside the idle figures; the small query's p50 and p99 while writing beside
idle; VmRSS before, when every line was seen, and 12 s later, the peak (VmHWM,
reset through /proc/PID/clear_refs), and the growth (12 s later) over the bytes
appended; the reloads (generations of /readyz).
Prints one JSON line, then a table. stq is stopped by its pid (SIGTERM) at the end,
also on failure; any failed query or stq's exit ends the run with a message.
"""

import atexit, collections, datetime, http.client, json, math, multiprocessing, os
import shutil, signal, socket, subprocess, sys, threading, time, traceback, urllib.parse

if len(sys.argv) != 4:
    sys.exit(__doc__.split("\n\n")[1])
binary, source, label = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
RATES = [int(rate) for rate in os.environ.get("RATES", "120,1200").split(",")]
SECONDS = float(os.environ.get("SECONDS", "60"))
IDLE_SECONDS = float(os.environ.get("IDLE_SECONDS", "60"))
POLLER_ALONE_SECONDS = 10
POLL_HZ = float(os.environ.get("POLL_HZ", "20"))
STATIONS = int(os.environ.get("STATIONS", "200"))
GIVE_UP_SECONDS = float(os.environ.get("GIVE_UP_SECONDS", "120"))
WATCH_POLL = os.environ.get("WATCH_POLL", "")
CLOCK_FROM = os.environ.get("CLOCK_FROM", "")
# Milliseconds added to the wall clock's for each `time_created`.
CLOCK_SHIFT_MS = (round(datetime.datetime.fromisoformat(CLOCK_FROM.replace("Z", "+00:00")).timestamp() * 1000)
                  - time.time_ns() // 1_000_000) if CLOCK_FROM else 0
CHECK_INTERVAL = 0.05
PAGE = 10000
RETIRE_SECONDS = 12
DAY = "2026-11-23"
SMALL_QUERY_WINDOW = "from=2026-11-23T10:00:00Z&to=2026-11-23T11:00:00Z"
TOKEN = "stq-demo-ops"
TOKENS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "snapshots", "tokens.json")
os.makedirs("/tmp/bench", exist_ok=True)


def fail(message):
    sys.exit(f"live_floor.py: {message}")


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close(); return port


class Client:
    """One kept-alive HTTP connection to stq; any answer but 200 raises."""

    def __init__(self, port):
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def get(self, path):
        self.connection.request("GET", path, headers={"Authorization": f"Bearer {TOKEN}"})
        response = self.connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status} {body[:300]!r}")
        return body


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mib(pid, field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    fail(f"no {field} in /proc/{pid}/status")


def percentile(values, p):
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] if ordered else None


def all_stations():
    return sorted(name for name in os.listdir(source) if os.path.isdir(os.path.join(source, name)))


def pick_stations():
    stations = all_stations()
    if not stations:
        fail(f"no station directories in {source}")
    step = max(1, len(stations) // STATIONS)
    return stations[::step][:STATIONS]


def visit_of(station):
    """The first visit of the station's last day with 10 metric lines, as dicts."""
    units = [json.loads(line) for line in open(f"{source}/{station}/{DAY}.units.jsonl")]
    metrics = collections.defaultdict(list)
    for line in open(f"{source}/{station}/{DAY}.metrics.jsonl"):
        record = json.loads(line)
        metrics[record["unit_serial"]].append(record)
    for first, second in zip(units, units[1:]):
        serial = first["unit_serial"]
        measured = metrics.get(serial, [])
        if (first["direction"], second["direction"]) == ("input", "output") \
                and second["unit_serial"] == serial and len(measured) == 10 \
                and len({record["name"] for record in measured}) == 10:
            return [first] + measured + [second]
    fail(f"{station}: no visit of an input line, 10 metric lines and an output line on {DAY}")


def working_copy(stations):
    target = f"/tmp/bench/{label}-snapshot"
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(["cp", "-al", source, target], check=True)
    for station in stations:
        for kind in ("units", "metrics"):
            path = f"{target}/{station}/{DAY}.{kind}.jsonl"
            os.unlink(path)
            shutil.copyfile(f"{source}/{station}/{DAY}.{kind}.jsonl", path)
    os.sync()
    return target


server = None
poller = None


def stop_all():
    if poller is not None and poller.is_alive():
        poller.terminate()
    if server is not None and server.poll() is None:
        server.send_signal(signal.SIGTERM)
        server.wait()


atexit.register(stop_all)


def start_server(directory):
    global server
    port, admin = free_port(), free_port()
    log = open(f"/tmp/bench/{label}-stq.log", "w")
    poll = ["--watch-poll", WATCH_POLL] if WATCH_POLL else []
    environment = {name: value for name, value in os.environ.items() if name != "STQ_WATCH_POLL"}
    server = subprocess.Popen([binary, "serve", "--watch", *poll, "--snapshots", directory,
        "--tokens", TOKENS, "--listen", f"127.0.0.1:{port}", "--admin-listen",
        f"127.0.0.1:{admin}"], stdout=subprocess.DEVNULL, stderr=log,
        env=dict(environment, RUST_LOG=os.environ.get("RUST_LOG", "info")))
    started = time.monotonic()
    while time.monotonic() - started < 900:
        if server.poll() is not None:
            fail(f"stq exited with {server.returncode} before it was ready (/tmp/bench/{label}-stq.log)")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/readyz")
            if connection.getresponse().status == 200:
                return port, time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.1)
    fail("stq was not ready after 900 s")


def readyz(port):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", "/readyz")
    response = connection.getresponse()
    body = response.read()
    if response.status != 200:
        fail(f"/readyz: {response.status} {body[:300]!r}")
    return json.loads(body)


def poll(port, path, stop, results):
    """The dashboard, in its own process: (start, latency) of each small query."""
    client, samples = Client(port), []
    began = time.monotonic()
    while not stop.is_set():
        sent = time.monotonic()
        client.get(path)
        samples.append((sent, time.monotonic() - sent))
        next_poll = began + math.ceil((time.monotonic() - began) * POLL_HZ) / POLL_HZ
        time.sleep(max(0.0, next_poll - time.monotonic()))
    results.send(samples)


class Floor:
    """What the writer wrote and the checker has not seen yet, under one lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.pending = {}                    # (serial, direction or name) -> append time
        self.order = collections.deque()     # (time_created, key) in writing order
        self.lags = []
        self.last_ms = 0

    def stamp(self):
        """The wall clock (shifted by CLOCK_FROM), in UTC with milliseconds, strictly
        increasing."""
        self.last_ms = max(time.time_ns() // 1_000_000 + CLOCK_SHIFT_MS, self.last_ms + 1)
        moment = datetime.datetime.fromtimestamp(self.last_ms // 1000, datetime.timezone.utc)
        return self.last_ms, moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{self.last_ms % 1000:03d}Z"

    def oldest_unseen(self):
        while self.order and self.order[0][1] not in self.pending:
            self.order.popleft()
        return self.order[0][0] if self.order else None


def key(record):
    return record["unit_serial"], record.get("direction") or record["name"]


def write(floor, files, visits, rate, rounds):
    """Rounds of one whole visit per station, line i to station i mod len(files)."""
    stations = list(files)
    lines = rounds * 12 * len(stations)
    began = time.monotonic()
    written = 0
    for i in range(lines):
        time.sleep(max(0.0, began + i / rate - time.monotonic()))
        station = stations[i % len(stations)]
        position = (i // len(stations)) % 12
        serial = f"LF-{rate}-{i // (12 * len(stations)) * len(stations) + i % len(stations)}"
        record = dict(visits[station][position], unit_serial=serial)
        with floor.lock:
            ms, record["time_created"] = floor.stamp()
            if position == 0:
                files[station]["input_ms"] = ms
            if position == 11 and "cycle_ms" in (record["metadata"] or {}):
                record["metadata"] = dict(record["metadata"], cycle_ms=ms - files[station]["input_ms"])
            line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
            os.write(files[station]["units" if position in (0, 11) else "metrics"], line)
            floor.pending[key(record)] = time.monotonic()
            floor.order.append((record["time_created"], key(record)))
            written += len(line)
    return lines, written


def check(floor, port, stations, stop):
    """Every CHECK_INTERVAL: the records of the written stations served from the
    oldest unseen line on."""
    client = Client(port)
    named = "" if len(stations) == len(all_stations()) else f"station_ids={','.join(stations)}&"
    while not stop.is_set():
        began = time.monotonic()
        with floor.lock:
            oldest = floor.oldest_unseen() or floor.stamp()[1]
        ahead = datetime.datetime.fromisoformat(oldest.replace("Z", "+00:00")) + datetime.timedelta(days=1)
        window = f"{named}from={oldest}&to={ahead.strftime('%Y-%m-%dT%H:%M:%SZ')}&limit={PAGE}"
        for path in (f"/units?direction=input,output&{window}", f"/metrics?{window}"):
            cursor = None
            while True:
                page = json.loads(client.get(path + (f"&cursor={urllib.parse.quote(cursor)}" if cursor else "")))
                seen = time.monotonic()
                with floor.lock:
                    for record in page["data"]:
                        appended = floor.pending.pop(key(record), None)
                        if appended is not None:
                            floor.lags.append(seen - appended)
                cursor = page["meta"]["next_cursor"]
                if cursor is None:
                    break
        time.sleep(max(0.0, began + CHECK_INTERVAL - time.monotonic()))


errors = []


def in_thread(target, *args):
    def run():
        try:
            target(*args)
        except BaseException:
            errors.append(f"{target.__name__} failed:\n{traceback.format_exc()}")
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def wait(seconds=None, until=None):
    """Sleeps, failing as soon as stq, the poller or a thread fails; True if until() held."""
    deadline = time.monotonic() + (seconds if seconds is not None else float("inf"))
    while time.monotonic() < deadline:
        if server.poll() is not None:
            fail(f"stq exited with {server.returncode} (/tmp/bench/{label}-stq.log)")
        if not poller.is_alive():
            fail(f"the dashboard poller stopped with exit code {poller.exitcode}")
        if errors:
            fail("; ".join(errors))
        if until is not None and until():
            return True
        time.sleep(0.02)
    return False


def cpu_cores(pid, since):
    cpu, wall = since
    return round((cpu_seconds(pid) - cpu) / (time.monotonic() - wall), 3)


def main():
    global poller
    stations = pick_stations()
    visits = {station: visit_of(station) for station in stations}
    directory = working_copy(stations)
    port, startup = start_server(directory)
    pid = server.pid
    small_query = f"/units?station_ids={stations[0]}&{SMALL_QUERY_WINDOW}"
    if not json.loads(Client(port).get(small_query))["data"]:
        fail(f"the small query {small_query} found nothing")
    results = {"label": label, "watch_poll": WATCH_POLL or None, "clock_from": CLOCK_FROM or None, "stations_written": len(stations), "startup_s": round(startup, 1),
               "load_average_start": [round(load, 2) for load in os.getloadavg()], "small_query": small_query}

    context = multiprocessing.get_context("fork")
    stop_polling, (receive, send) = context.Event(), context.Pipe(duplex=False)
    poller = context.Process(target=poll, args=(port, small_query, stop_polling, send), daemon=True)
    poller.start()
    wait(1)
    floor, stop_checking = Floor(), threading.Event()
    spans = {}                               # phase -> (start, end) on the monotonic clock

    since = (cpu_seconds(pid), time.monotonic())
    wait(POLLER_ALONE_SECONDS)
    results["idle_cpu_cores_poller_only"] = cpu_cores(pid, since)
    checker = in_thread(check, floor, port, stations, stop_checking)
    wait(1)
    since = (cpu_seconds(pid), time.monotonic())
    wait(IDLE_SECONDS)
    results["idle_cpu_cores"] = cpu_cores(pid, since)
    spans["idle"] = (since[1], time.monotonic())

    files = {}
    for station in stations:
        files[station] = {}
        for kind in ("units", "metrics"):
            path = f"{directory}/{station}/{DAY}.{kind}.jsonl"
            if os.stat(path).st_nlink != 1:
                fail(f"{path} is still linked to the original")
            files[station][kind] = os.open(path, os.O_WRONLY | os.O_APPEND)

    results["rates"] = []
    for rate in RATES:
        figures = {"rate": rate}
        rounds = max(1, round(rate * SECONDS / (12 * len(stations))))
        rss_before = memory_mib(pid, "VmRSS")
        figures["rss_before_mib"] = round(rss_before)
        with open(f"/proc/{pid}/clear_refs", "w") as clear:
            clear.write("5")                 # from here VmHWM is this phase's peak
        generation = readyz(port)["generation"]
        with floor.lock:
            floor.lags = []
        since = (cpu_seconds(pid), time.monotonic())
        written = []
        writer = in_thread(lambda: written.extend(write(floor, files, visits, rate, rounds)))
        wait(until=lambda: not writer.is_alive())
        spans[rate] = (since[1], time.monotonic())
        figures["seconds_writing"] = round(spans[rate][1] - since[1], 1)
        figures["lines"], figures["bytes"] = written
        figures["cpu_cores_writing"] = cpu_cores(pid, since)
        with floor.lock:
            figures["unseen_when_writing_stopped"] = len(floor.pending)
        stopped = time.monotonic()
        all_seen = wait(GIVE_UP_SECONDS, until=lambda: not floor.pending)
        figures["seconds_to_all_seen_after_writing"] = round(time.monotonic() - stopped, 1) if all_seen else None
        figures["rss_when_all_seen_mib"] = round(memory_mib(pid, "VmRSS"))
        figures["cpu_cores_until_all_seen"] = cpu_cores(pid, since)
        figures["generations"] = readyz(port)["generation"] - generation
        with floor.lock:
            figures["never_seen"] = len(floor.pending)
            figures["give_up_seconds"] = None if all_seen else GIVE_UP_SECONDS
            floor.pending.clear()
            lags = floor.lags
        for p in (50, 99, 100):
            figures[f"lag_p{p}_ms"] = round(percentile(lags, p) * 1000) if lags else None
        wait(RETIRE_SECONDS)
        rss_after = memory_mib(pid, "VmRSS")
        figures["rss_after_mib"] = round(rss_after)
        figures["rss_peak_mib"] = round(memory_mib(pid, "VmHWM"))
        figures["rss_growth_over_bytes"] = round((rss_after - rss_before) * 1048576 / figures["bytes"], 2)
        results["rates"].append(figures)

    stop_checking.set()
    stop_polling.set()
    checker.join()
    samples = receive.recv()
    poller.join()
    for phase, (start, end) in spans.items():
        latencies = [latency for sent, latency in samples if start <= sent < end]
        entry = results if phase == "idle" else next(f for f in results["rates"] if f["rate"] == phase)
        prefix = "idle_" if phase == "idle" else ""
        entry[prefix + "small_query_count"] = len(latencies)
        for p in (50, 99):
            entry[f"{prefix}small_query_p{p}_ms"] = round(percentile(latencies, p) * 1000, 2)
    results["load_average_end"] = [round(load, 2) for load in os.getloadavg()]
    stop_all()
    print(json.dumps(results))
    print_table(results)


def print_table(results):
    def joined(figures, *names):
        return " / ".join("-" if figures[name] is None else str(figures[name]) for name in names)
    rows = [("lines written (MB)", lambda f: f"{f['lines']} ({f['bytes'] / 1e6:.1f})"),
            ("seconds writing", lambda f: str(f["seconds_writing"])),
            ("lag p50 / p99 / max (ms)", lambda f: joined(f, "lag_p50_ms", "lag_p99_ms", "lag_p100_ms")),
            ("unseen when writing stopped", lambda f: str(f["unseen_when_writing_stopped"])),
            ("s after writing until all seen", lambda f: joined(f, "seconds_to_all_seen_after_writing")),
            ("never seen (give-up after s)", lambda f: f"{f['never_seen']} ({f['give_up_seconds'] or '-'})"),
            ("stq CPU cores writing / until seen", lambda f: joined(f, "cpu_cores_writing", "cpu_cores_until_all_seen")),
            ("small query p50 / p99 (ms)", lambda f: joined(f, "small_query_p50_ms", "small_query_p99_ms")),
            ("RSS before / all seen / 12 s on (MiB)", lambda f: joined(f, "rss_before_mib", "rss_when_all_seen_mib", "rss_after_mib")),
            ("RSS peak (MiB)", lambda f: str(f["rss_peak_mib"])),
            ("RSS growth (12 s on) / bytes appended", lambda f: str(f["rss_growth_over_bytes"])),
            ("generations", lambda f: str(f["generations"]))]
    watch = f"a look every {results['watch_poll']}" if results["watch_poll"] else "inotify"
    print(f"\n{results['label']} (--watch by {watch}): {results['stations_written']} stations written, "
          f"load average {results['load_average_start']} at the start, {results['load_average_end']} at the end")
    print(f"idle: stq CPU {results['idle_cpu_cores_poller_only']} cores with the poller alone, "
          f"{results['idle_cpu_cores']} with the checker too; small query p50 / p99 "
          f"{results['idle_small_query_p50_ms']} / {results['idle_small_query_p99_ms']} ms")
    width = max(len(name) for name, _ in rows)
    print(" " * width + "".join(f" | {f['rate']:>5} lines/s".ljust(27) for f in results["rates"]))
    for name, cell in rows:
        print(name.ljust(width) + "".join(f" | {cell(f)}".ljust(27) for f in results["rates"]))


if __name__ == "__main__":
    main()
