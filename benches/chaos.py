#!/usr/bin/env python3
"""The chaos soak (issue 51): a floor that keeps writing while stq, its S3 server and
its store's disk fail at random; every answer is checked against a model of the files.

usage: python3 benches/chaos.py STQ_BINARY WORK
knobs: CHAOS_SECONDS=1800  STATIONS=20  DAYS=3  WRITTEN=8 (stations written to)
       RATE=40 (lines/s)  FAULT_GAP=4,12 (seconds between faults, uniform)
       TMPFS_MIB=32  SEED=51  S3S_FS=s3s-fs  GIVE_UP_SECONDS=60
       READY_TARGETS=1 (0: report the readiness targets without failing on them)

1. `stq gen --stations STATIONS --days DAYS --end 2026-11-24T00:00:00Z` into
   WORK/snapshots. s3s-fs serves a bucket from WORK/bucket on loopback. The store's
   local copy (`--store-cache`) is on a tmpfs of TMPFS_MIB mounted at WORK/tmpfs when
   this runs as root (else a plain directory, and the full-disk fault is left out: the
   report says so). stq runs as a floor has it: `serve --watch --hot 1h --cache-size
   1MiB --store s3://chaos/stq --store-cache WORK/tmpfs/copy`, so history is sealed,
   kept in the store and read from its mapped files (the cache holds little).
2. The model: every line of every file, parsed here, with its instant, station, file
   and line: the contract's order (section 6) is (instant, station, file path, line).
3. The history queries, inside the generated days (the floor never writes there):
   /units and /metrics of all stations a whole day at a time (so every record is
   checked), and 40 drawn from SEED: /units and /metrics of one station or all,
   windows of ten minutes to a day, and /metrics/summary and /units/summary of such
   windows. Once stq is
   first ready, each is asked in full (pages of 10,000): its records must be the
   model's, key for key and in order, and each /metrics/summary row's `count` the
   model's; that answer is its baseline. Then a checker asks them again and again in
   random order all through the soak: a 200 must equal the baseline, byte for byte in
   every row (summaries included: section 10.2); a 503 is counted as unavailable, a
   refused or cut connection as no connection, anything else as wrong.
4. The floor: WRITTEN stations get whole visits (input unit, two metrics, output
   unit; time_created the wall clock in UTC, ms, strictly increasing) appended to
   their last day's files at RATE lines/s, one write per line. A live checker asks
   the written stations' /units (both directions) and /metrics from the floor's
   start, every 0.2 s: every record must be one that was written (same station and
   time), none twice, in order, and every record an earlier answer showed must still
   be there (a restart reads it from the files again).
5. The faults, one at a time, FAULT_GAP apart, each kind in turn in a shuffled cycle:
   - kill: `kill -9` of stq, then a restart on the same store (the time from the kill
     to /readyz ready is a warm start);
   - s3: `kill -9` of s3s-fs, 2 to 8 s without it, then a restart on its directory;
   - full: the tmpfs is filled to the last byte, held 3 to 10 s, then freed;
   - cut: a random file of the store's copy is cut to between 0 and half its length
     under the running stq.
6. A prober asks /readyz every 0.05 s: the fraction of the time ready and the longest
   time not ready (also less the warm start it holds).
After CHAOS_SECONDS the floor stops; the live checker must then see every written
record (else they are lost) within GIVE_UP_SECONDS. The logs of every stq start are
searched for panics. The report (Markdown) is printed and written to
WORK/chaos-report.md. Exit status 1 when any answer was wrong, any record lost, any
panic logged, stq died of itself, or (READY_TARGETS=1) stq was ready less than 98% of
the time or longest not ready beyond 3 s plus a warm start. Every process started here
is stopped by its pid at the end, also on failure, and the tmpfs unmounted.
"""

import atexit, bisect, collections, datetime, errno, http.client, json, os, random
import shutil, signal, socket, subprocess, sys, threading, time, traceback, urllib.parse

if len(sys.argv) != 3:
    sys.exit(__doc__.split("\n\n")[1])
binary, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
SECONDS = float(os.environ.get("CHAOS_SECONDS", "1800"))
STATIONS = int(os.environ.get("STATIONS", "20"))
DAYS = int(os.environ.get("DAYS", "3"))
WRITTEN = int(os.environ.get("WRITTEN", "8"))
RATE = float(os.environ.get("RATE", "40"))
FAULT_GAP = [float(x) for x in os.environ.get("FAULT_GAP", "4,12").split(",")]
TMPFS_MIB = int(os.environ.get("TMPFS_MIB", "32"))
SEED = int(os.environ.get("SEED", "51"))
S3S_FS = os.environ.get("S3S_FS", "s3s-fs")
GIVE_UP_SECONDS = float(os.environ.get("GIVE_UP_SECONDS", "60"))
READY_TARGETS = os.environ.get("READY_TARGETS", "1") == "1"
END = datetime.datetime(2026, 11, 24, tzinfo=datetime.timezone.utc)
DAY = (END - datetime.timedelta(days=1)).strftime("%Y-%m-%d")
TOKEN = "stq-demo-ops"
TOKENS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "snapshots", "tokens.json")
PAGE = 10000
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
random.seed(SEED)


def fail(message):
    sys.exit(f"chaos.py: {message}")


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close(); return port


def instant(text):
    """A time_created as integer microseconds since the epoch (the files have at most
    microseconds)."""
    moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (moment - EPOCH) // datetime.timedelta(microseconds=1)


def rfc3339(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def key(record):
    return record["unit_serial"], record.get("direction") or record["name"]


class Unavailable(Exception):
    """An answer that is no answer yet: a 503, a refused or cut connection."""


class Wrong(Exception):
    """An answer that contradicts the files."""


def get(port, path, timeout=10):
    """(status, body) of one request on a new connection; connection errors raise
    Unavailable."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {TOKEN}"})
        response = connection.getresponse()
        return response.status, response.read()
    except OSError as error:
        raise Unavailable(f"no connection ({type(error).__name__})")
    finally:
        connection.close()


def answer(port, path):
    """Every row of a query, following its cursors; a 503 or no connection on any page
    raises Unavailable, another status Wrong."""
    rows, cursor, first = [], None, None
    paged = "summary" not in path
    while True:
        full = path + (f"&limit={PAGE}" if paged else "") + (f"&cursor={urllib.parse.quote(cursor)}" if cursor else "")
        status, body = get(port, full)
        if status == 503:
            code = json.loads(body).get("error", {}).get("code", "?") if body.startswith(b"{") else "?"
            raise Unavailable(f"503 {code}")
        if status != 200:
            raise Wrong(f"GET {full}: {status} {body[:300]!r}")
        page = json.loads(body)
        rows.extend(page["data"])
        first = first or page["message"]
        cursor = page["meta"].get("next_cursor") if paged else None
        if cursor is None:
            return rows


# --- the files and their model -------------------------------------------------

def generate():
    shutil.rmtree(f"{work}/snapshots", ignore_errors=True)
    subprocess.run([binary, "gen", "--out", f"{work}/snapshots", "--stations", str(STATIONS),
        "--days", str(DAYS), "--end", rfc3339(END), "--seed", str(SEED)], check=True,
        stdout=subprocess.DEVNULL)


def model():
    """kind -> [(instant, station, path, line, record)] in the contract's order."""
    records = {"units": [], "metrics": []}
    root = f"{work}/snapshots"
    paths = sorted(os.path.relpath(os.path.join(d, f), root)
        for d, _, files in os.walk(root) for f in files if f.endswith(".jsonl"))
    for path in paths:
        kind = "units" if path.endswith(".units.jsonl") else "metrics"
        with open(os.path.join(root, path)) as file:
            for number, line in enumerate(file, 1):
                record = json.loads(line)
                records[kind].append((instant(record["time_created"]), record["station_id"], path, number, record))
    for rows in records.values():
        rows.sort(key=lambda row: row[:4])
    return records


def expected(records, kind, station, start, end):
    rows = records[kind]
    low = bisect.bisect_left(rows, (start,))
    high = bisect.bisect_left(rows, (end,))
    return [row[4] for row in rows[low:high] if station is None or row[1] == station]


def history_queries(stations):
    """(path, kind, station, start, end): records and summaries inside the generated
    days."""
    queries = []
    # Every record, a day at a time, so that the model checks each one.
    for day in range(DAYS):
        start = END - datetime.timedelta(days=DAYS - day)
        end = start + datetime.timedelta(days=1)
        for kind, extra in (("units", "&direction=input,output"), ("metrics", "")):
            queries.append((f"/{kind}?from={rfc3339(start)}&to={rfc3339(end)}{extra}", kind, None,
                instant(rfc3339(start)), instant(rfc3339(end))))
    for _ in range(40):
        length = random.choice([600, 3600, 6 * 3600, 86400])
        start = END - datetime.timedelta(days=DAYS) + datetime.timedelta(
            seconds=random.randrange(0, DAYS * 86400 - length, 60))
        end = start + datetime.timedelta(seconds=length)
        kind = random.choice(["units", "metrics", "metrics/summary", "units/summary"])
        every_station = random.random() < (0.5 if "summary" in kind else 0.3 if length <= 3600 else 0)
        station = None if every_station else random.choice(stations)
        parameters = {"from": rfc3339(start), "to": rfc3339(end)}
        if station:
            parameters["station_ids"] = station
        if kind == "units":
            parameters["direction"] = "input,output"
        if "summary" in kind and random.random() < 0.5:
            parameters["bucket"] = "1h"
        path = f"/{kind}?{urllib.parse.urlencode(parameters, safe=':,')}"
        queries.append((path, kind, station, instant(rfc3339(start)), instant(rfc3339(end))))
    return queries


def check_against_model(records, query, rows):
    path, kind, station, start, end = query
    if kind in ("units", "metrics"):
        wanted = expected(records, kind, station, start, end)
        got = [(row["station_id"], key(row), row["time_created"]) for row in rows]
        want = [(row["station_id"], key(row), row["time_created"]) for row in wanted]
        if got != want:
            raise Wrong(f"{path}: {len(got)} records against the model's {len(want)}"
                f" (first difference at {next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))})")
    elif kind == "metrics/summary" and "bucket" not in path:
        counts = collections.Counter((row["station_id"], row["name"])
            for row in expected(records, "metrics", station, start, end))
        got = {(row["station_id"], row["name"]): row["count"] for row in rows}
        if got != dict(counts):
            raise Wrong(f"{path}: counts {sorted(got.items())[:3]}... against the model's {sorted(counts.items())[:3]}...")


# --- the processes --------------------------------------------------------------

class Processes:
    """stq and s3s-fs, started and restarted on fixed ports; stopped at exit."""

    def __init__(self):
        self.port, self.admin, self.s3_port = free_port(), free_port(), free_port()
        self.stq = None
        self.s3 = None
        self.starts = 0
        self.lock = threading.Lock()
        self.killed = set()

    def start_s3(self):
        log = open(f"{work}/s3s-fs.log", "a")
        self.s3 = subprocess.Popen([S3S_FS, "--host", "127.0.0.1", "--port", str(self.s3_port),
            "--access-key", "chaos-key", "--secret-key", "chaos-secret", f"{work}/bucket"],
            stdout=log, stderr=log)
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.s3_port), timeout=1).close()
                return
            except OSError:
                if self.s3.poll() is not None:
                    fail(f"s3s-fs exited with {self.s3.returncode} ({work}/s3s-fs.log)")
                time.sleep(0.05)

    def start_stq(self):
        self.starts += 1
        log = open(f"{work}/stq-{self.starts}.log", "w")
        environment = dict(os.environ, AWS_ACCESS_KEY_ID="chaos-key", AWS_SECRET_ACCESS_KEY="chaos-secret",
            AWS_REGION="us-east-1", AWS_ENDPOINT_URL=f"http://127.0.0.1:{self.s3_port}", AWS_ALLOW_HTTP="true",
            RUST_LOG=os.environ.get("RUST_LOG", "info"))
        for name in ("STQ_STORE", "STQ_HOT", "STQ_CACHE_SIZE", "STQ_WATCH_POLL"):
            environment.pop(name, None)
        self.stq = subprocess.Popen([binary, "serve", "--watch", "--snapshots", f"{work}/snapshots",
            "--tokens", TOKENS, "--listen", f"127.0.0.1:{self.port}", "--admin-listen",
            f"127.0.0.1:{self.admin}", "--hot", "1h", "--cache-size", "1MiB",
            "--store", "s3://chaos/stq", "--store-cache", f"{work}/tmpfs/copy"],
            stdout=subprocess.DEVNULL, stderr=log, env=environment)

    def wait_ready(self, limit=300):
        began = time.monotonic()
        while time.monotonic() - began < limit:
            if self.stq.poll() is not None:
                fail(f"stq exited with {self.stq.returncode} before it was ready ({work}/stq-{self.starts}.log)")
            if ready(self.port):
                return time.monotonic() - began
            time.sleep(0.02)
        fail(f"stq was not ready after {limit} s")

    def stop(self):
        for process in (self.stq, self.s3):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def ready(port):
    try:
        status, body = get(port, "/readyz", timeout=2)
        return status == 200 and json.loads(body).get("status") == "ready"
    except (Unavailable, ValueError):
        return False


# --- the soak --------------------------------------------------------------------

class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = collections.Counter()
        self.wrong = []

    def add(self, what, detail=None):
        with self.lock:
            self.counts[what] += 1
            if detail is not None and len(self.wrong) < 20:
                self.wrong.append(detail)


class Floor:
    """The writer's records: key -> (station, time_created), and what answers showed."""

    def __init__(self, stations):
        self.lock = threading.Lock()
        self.written = {}
        self.seen = set()
        self.last_ms = 0
        self.stations = stations
        self.started = None
        self.templates = {}
        for station in stations:
            units = [json.loads(line) for line in open(f"{work}/snapshots/{station}/{DAY}.units.jsonl")]
            metrics = [json.loads(line) for line in open(f"{work}/snapshots/{station}/{DAY}.metrics.jsonl")]
            names = list(dict.fromkeys(record["name"] for record in metrics))[:2]
            metric_templates = [next(record for record in metrics if record["name"] == name) for name in names]
            self.templates[station] = (units[0], metric_templates)

    def stamp(self):
        self.last_ms = max(time.time_ns() // 1_000_000, self.last_ms + 1)
        moment = datetime.datetime.fromtimestamp(self.last_ms // 1000, datetime.timezone.utc)
        return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{self.last_ms % 1000:03d}Z"

    def write(self, stop):
        files = {station: {kind: os.open(f"{work}/snapshots/{station}/{DAY}.{kind}.jsonl",
            os.O_WRONLY | os.O_APPEND) for kind in ("units", "metrics")} for station in self.stations}
        began = time.monotonic()
        line, visit = 0, 0
        while not stop.is_set():
            station = self.stations[visit % len(self.stations)]
            unit, measurements = self.templates[station]
            serial = f"CHAOS-{visit}"
            metadata = {name: value for name, value in (unit.get("metadata") or {}).items() if name != "cycle_ms"}
            visit_records = [("units", dict(unit, unit_serial=serial, direction="input", result="", metadata=metadata))]
            visit_records += [("metrics", dict(m, unit_serial=serial)) for m in measurements]
            visit_records.append(("units", dict(unit, unit_serial=serial, direction="output", result="pass", metadata=metadata)))
            for kind, record in visit_records:
                time.sleep(max(0.0, began + line / RATE - time.monotonic()))
                with self.lock:
                    record["time_created"] = self.stamp()
                    if self.started is None:
                        self.started = record["time_created"]
                    self.written[key(record)] = (station, record["time_created"])
                os.write(files[station][kind], (json.dumps(record, separators=(",", ":")) + "\n").encode())
                line += 1
            visit += 1
        for kinds in files.values():
            for descriptor in kinds.values():
                os.close(descriptor)

    def check_once(self, port):
        """One round over the written stations; returns the keys it saw. Raises Wrong
        or Unavailable."""
        with self.lock:
            started = self.started
            before = set(self.seen)
        if started is None:
            return set()
        ahead = rfc3339(datetime.datetime.fromisoformat(started.replace("Z", "+00:00")) + datetime.timedelta(days=2))
        window = f"station_ids={','.join(self.stations)}&from={started}&to={ahead}"
        shown = set()
        for path in (f"/units?direction=input,output&{window}", f"/metrics?{window}"):
            rows = answer(port, path)
            last = None
            for row in rows:
                record_key = key(row)
                with self.lock:
                    written = self.written.get(record_key)
                if written != (row["station_id"], row["time_created"]):
                    raise Wrong(f"{path}: a record never written: {record_key} {row['station_id']} {row['time_created']}")
                if record_key in shown:
                    raise Wrong(f"{path}: {record_key} twice")
                if last is not None and instant(row["time_created"]) < last:
                    raise Wrong(f"{path}: {record_key} out of order")
                last = instant(row["time_created"])
                shown.add(record_key)
        missing = before - shown
        if missing:
            raise Wrong(f"{len(missing)} records an earlier answer showed are missing, e.g. {sorted(missing)[:3]}")
        with self.lock:
            self.seen |= shown
        return shown


kept_differences = []
soak_began = 0.0


def keep_difference(path, rows, baseline):
    """The first rows that differ of the first 10 wrong answers, in WORK/wrong-N.json,
    with when they came (seconds since the soak began) to read beside the faults."""
    if len(kept_differences) >= 10:
        return
    first = next((i for i, (a, b) in enumerate(zip(rows, baseline)) if a != b), min(len(rows), len(baseline)))
    kept_differences.append(path)
    with open(f"{work}/wrong-{len(kept_differences)}.json", "w") as file:
        json.dump({"path": path, "at": time.monotonic() - soak_began, "rows": len(rows), "baseline_rows": len(baseline),
            "index": first, "got": rows[first:first + 2], "want": baseline[first:first + 2]}, file, indent=1)


def mount_tmpfs():
    os.makedirs(f"{work}/tmpfs", exist_ok=True)
    if os.geteuid() == 0:
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MIB}m", "tmpfs", f"{work}/tmpfs"],
            capture_output=True, text=True)
        if result.returncode == 0:
            atexit.register(lambda: subprocess.run(["umount", "-l", f"{work}/tmpfs"], capture_output=True))
            return None
        return f"the tmpfs could not be mounted ({result.stderr.strip()}): no full-disk faults"
    return "not root, so no tmpfs: no full-disk faults"


def fill(seconds):
    path = f"{work}/tmpfs/fill"
    chunk = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as file:
        try:
            while True:
                file.write(chunk)
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
    # The last bytes: a write of less than a chunk fills the rest.
    with open(path, "ab", buffering=0) as file:
        for size in (65536, 4096, 1):
            try:
                while True:
                    file.write(b"\0" * size)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
    time.sleep(seconds)
    os.unlink(path)


def cut():
    root = f"{work}/tmpfs/copy"
    files = [os.path.join(d, f) for d, _, names in os.walk(root) for f in names]
    if not files:
        return "no file to cut"
    # Each kind of file (sealed-, symbols-, settled-, recent-, the manifest...) as
    # likely as another, whatever their numbers.
    by_kind = collections.defaultdict(list)
    for path in files:
        by_kind[os.path.basename(path).split("-")[0]].append(path)
    path = random.choice(by_kind[random.choice(sorted(by_kind))])
    try:
        size = os.path.getsize(path)
        length = int(size * random.uniform(0, 0.5))
        os.truncate(path, length)
    except FileNotFoundError:
        return f"{os.path.relpath(path, root)} went before it was cut"
    return f"{os.path.relpath(path, root)} {size} -> {length} bytes"


def main():
    if os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(f"{work}/bucket/chaos")
    skipped = mount_tmpfs()
    generate()
    records = model()
    stations = sorted({row[1] for row in records["units"]})
    queries = history_queries(stations)
    floor = Floor(stations[::max(1, len(stations) // WRITTEN)][:WRITTEN])

    processes = Processes()
    atexit.register(processes.stop)
    processes.start_s3()
    processes.start_stq()
    first_start = processes.wait_ready()
    print(f"stq ready after {first_start:.2f} s (cold, store empty)", flush=True)

    baselines = []
    for query in queries:
        while True:
            try:
                rows = answer(processes.port, query[0])
                break
            except Unavailable:
                time.sleep(0.1)
        try:
            check_against_model(records, query, rows)
        except Wrong as reason:
            fail(f"at rest, before any fault, stq and the model disagree: {reason}")
        baselines.append(rows)
    print(f"{len(queries)} history queries agree with the model; the soak begins", flush=True)

    stop, floor_stop = threading.Event(), threading.Event()
    history, live = Tally(), Tally()
    errors, faults, warm_starts, probes, deaths = [], [], [], [], []

    def in_thread(target, *args):
        def run():
            try:
                target(*args)
            except BaseException:
                errors.append(f"{target.__name__} failed:\n{traceback.format_exc()}")
                stop.set()
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def ask_history():
        while not stop.is_set():
            index = random.randrange(len(queries))
            try:
                rows = answer(processes.port, queries[index][0])
            except Unavailable as reason:
                history.add(str(reason).split(" (")[0])
                time.sleep(0.05)
                continue
            except Wrong as reason:
                history.add("wrong", str(reason))
                continue
            if rows == baselines[index]:
                history.add("right")
            else:
                history.add("wrong", f"{queries[index][0]}: differs from its first answer")
                keep_difference(queries[index][0], rows, baselines[index])

    def ask_live():
        while not stop.is_set():
            began = time.monotonic()
            try:
                floor.check_once(processes.port)
                live.add("right")
            except Unavailable as reason:
                live.add(str(reason).split(" (")[0])
            except Wrong as reason:
                live.add("wrong", str(reason))
            time.sleep(max(0.0, began + 0.2 - time.monotonic()))

    def probe():
        while not stop.is_set():
            probes.append((time.monotonic(), ready(processes.port)))
            time.sleep(0.05)

    def watch():
        """stq must not die but by our kill: a death is counted and stq restarted."""
        while not stop.is_set():
            with processes.lock:
                process = processes.stq
                if process.poll() is not None and process.pid not in processes.killed:
                    deaths.append(f"stq exited with {process.returncode} ({work}/stq-{processes.starts}.log)")
                    processes.start_stq()
            time.sleep(0.1)

    kinds = ["kill", "s3", "cut"] + ([] if skipped else ["full"])

    def inject():
        cycle = []
        while not stop.is_set():
            time.sleep(random.uniform(*FAULT_GAP))
            if stop.is_set():
                return
            if not cycle:
                cycle = random.sample(kinds, len(kinds))
            kind = cycle.pop()
            at = time.monotonic() - soak_began
            if kind == "kill":
                with processes.lock:
                    processes.killed.add(processes.stq.pid)
                    killed = time.monotonic()
                    processes.stq.kill()
                    processes.stq.wait()
                    processes.start_stq()
                processes.wait_ready()
                warm_starts.append(time.monotonic() - killed)
                faults.append((at, kind, f"warm start {warm_starts[-1]:.2f} s after the kill"))
            elif kind == "s3":
                processes.s3.kill()
                processes.s3.wait()
                down = random.uniform(2, 8)
                time.sleep(down)
                processes.start_s3()
                faults.append((at, kind, f"s3s-fs down {down:.1f} s"))
            elif kind == "full":
                held = random.uniform(3, 10)
                fill(held)
                faults.append((at, kind, f"tmpfs full {held:.1f} s"))
            else:
                faults.append((at, kind, cut()))

    global soak_began
    soak_began = time.monotonic()
    threads = [in_thread(target) for target in (ask_history, ask_live, probe, watch, inject)]
    writer = in_thread(floor.write, floor_stop)
    while time.monotonic() - soak_began < SECONDS and not stop.is_set():
        time.sleep(0.2)
    floor_stop.set()
    writer.join()
    # The last fault ends, then every written record must come.
    stop.set()
    for thread in threads:
        thread.join(120)
    if errors:
        fail("; ".join(errors))
    with processes.lock:
        if processes.stq.poll() is not None:
            deaths.append(f"stq exited with {processes.stq.returncode}")
            processes.start_stq()
    processes.wait_ready()
    ended = time.monotonic()
    lost = set(floor.written)
    while time.monotonic() - ended < GIVE_UP_SECONDS:
        try:
            lost = set(floor.written) - floor.check_once(processes.port)
        except Unavailable:
            pass
        except Wrong as reason:
            live.add("wrong", str(reason))
        if not lost:
            break
        time.sleep(0.2)
    status, body = get(processes.admin, "/metrics")
    counters = {line.split()[0]: line.split()[1] for line in body.decode().splitlines()
        if line.startswith(("stq_store_reads_total", "stq_store_generation", "stq_generation"))}
    processes.stop()

    panics = []
    for number in range(1, processes.starts + 1):
        for line in open(f"{work}/stq-{number}.log", errors="replace"):
            if "panicked" in line:
                panics.append(f"stq-{number}.log: {line.strip()[:200]}")

    # Readiness from the probes: each probe's state holds until the next one.
    not_ready, longest, current = 0.0, 0.0, 0.0
    for (at, is_ready), (next_at, _) in zip(probes, probes[1:]):
        if is_ready:
            current = 0.0
        else:
            current += next_at - at
            not_ready += next_at - at
            longest = max(longest, current)
    span = probes[-1][0] - probes[0][0] if len(probes) > 1 else 0.0
    ready_fraction = 1 - not_ready / span if span else 0.0
    warm_max = max(warm_starts, default=0.0)
    beyond_warm = max(0.0, longest - warm_max)

    fault_counts = collections.Counter(kind for _, kind, _ in faults)
    failures = []
    if history.counts["wrong"] or live.counts["wrong"]:
        failures.append(f"{history.counts['wrong'] + live.counts['wrong']} wrong answers")
    if lost:
        failures.append(f"{len(lost)} records lost")
    if panics:
        failures.append(f"{len(panics)} panics logged")
    if deaths:
        failures.append(f"stq died {len(deaths)} times of itself")
    if READY_TARGETS and ready_fraction < 0.98:
        failures.append(f"ready {ready_fraction:.2%} of the time (target 98%)")
    if READY_TARGETS and beyond_warm > 3.0:
        failures.append(f"longest not ready {longest:.2f} s, {beyond_warm:.2f} s beyond a warm start (target 3 s)")

    def outcomes(tally):
        return ", ".join(f"{what} {count}" for what, count in sorted(tally.counts.items()))

    report = [
        f"# Chaos soak: {SECONDS:.0f} s, {STATIONS} stations x {DAYS} days, {len(floor.stations)} written at {RATE:g} lines/s",
        "",
        f"- Faults: {sum(fault_counts.values())} ({', '.join(f'{kind} {count}' for kind, count in sorted(fault_counts.items()))})"
        + (f"; {skipped}" if skipped else ""),
        f"- History answers ({len(queries)} queries, each checked against the model, then against its first answer): {outcomes(history)}",
        f"- Live answers (rounds over the written stations): {outcomes(live)}",
        f"- Records written: {len(floor.written)}; lost after the floor stopped: {len(lost)}",
        f"- The last stq at the end: {', '.join(f'{name} {value}' for name, value in sorted(counters.items()))}",
        f"- Panics in the logs: {len(panics)}; deaths of stq but by kill -9: {len(deaths)}",
        f"- Ready {ready_fraction:.2%} of the time; longest not ready {longest:.2f} s"
        f" ({beyond_warm:.2f} s beyond the slowest warm start)",
        f"- Warm starts after kill -9: {len(warm_starts)}, median {sorted(warm_starts)[len(warm_starts) // 2] if warm_starts else 0:.2f} s,"
        f" max {warm_max:.2f} s; first (cold) start {first_start:.2f} s",
        f"- Verdict: {'; '.join(failures) if failures else 'pass'}",
    ]
    if history.wrong or live.wrong:
        report += ["", "Wrong answers (first 20):"] + [f"- {line}" for line in history.wrong + live.wrong]
    if panics or deaths:
        report += ["", "Panics and deaths:"] + [f"- {line}" for line in panics + deaths]
    report += ["", "Faults:"] + [f"- {at:7.1f} s {kind}: {what}" for at, kind, what in faults]
    text = "\n".join(report) + "\n"
    open(f"{work}/chaos-report.md", "w").write(text)
    print(text)
    sys.exit(1 if failures else 0)


main()
