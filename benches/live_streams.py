#!/usr/bin/env python3
"""The live-answers benchmark (docs/api.md section 14, BENCHMARKS.md "Streams and
wait"): streams and held `wait` requests against `stq serve --watch` on a floor
that keeps writing.

usage: python3 benches/live_streams.py STQ_BINARY SNAPSHOT_DIRECTORY LABEL
knobs: RATES=120,1200 (lines/s)  SECONDS=30 (per rate)  STREAMS=1000 (freshness)
       IDLE_STREAMS=10000  IDLE_WAITS=10000  IDLE_SECONDS=20  SHARED_WAITS=1000

The snapshot is `stq gen --stations N --days D --end 2026-11-24T00:00:00Z`; the
writer appends to the units files of its last day, 2026-11-23, of every station
(a working copy: every file hard-linked, the written ones copied). A snapshot of
one file per day for all stations (`benches/day_files.py`, no station
directories) has one units file of that day, which every station's lines go to,
as a central logger appends them; its stations are those `/stations` names.

1. Idle cost: stq's VmRSS with nothing open, then with IDLE_STREAMS streams (each
   following one station, `from` now) and IDLE_WAITS held requests (each `/units`
   of one station for the last hour with `wait=60s` and its own ETag, asked again
   when its wait ends) open at once, held by `benches/live_hold.py`; the growth per
   connection, and stq's CPU in cores over IDLE_SECONDS while nothing is written.
   All closed after.
2. Per rate, the floor without streams, then with STREAMS streams open, each
   following one station (station i of every STREAMS-th): one writer appends output
   unit lines, paced evenly, each one `write` of a whole line, to the stations in
   turn, `time_created` the wall clock; with streams, a line's freshness is the
   time its event was read by the client minus its append time (the monotonic
   clock of this one process). stq's CPU in cores over each run: the fan-out's cost
   is the difference.
3. SHARED_WAITS held requests for one query (one station's last hour, one token),
   then one line appended to that station: `stq_wait_evaluations_total` over the
   generations installed meanwhile.

Prints one JSON line of every figure. The client is asyncio in this process (one
thread); stq is stopped by its pid (SIGTERM) at the end, also on failure.
"""

import asyncio, atexit, datetime, http.client, json, math, os, resource, shutil
import signal, socket, subprocess, sys, time

if len(sys.argv) != 4:
    sys.exit(__doc__.split("\n\n")[1])
binary, source, label = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
RATES = [int(rate) for rate in os.environ.get("RATES", "120,1200").split(",")]
SECONDS = float(os.environ.get("SECONDS", "30"))
STREAMS = int(os.environ.get("STREAMS", "1000"))
IDLE_STREAMS = int(os.environ.get("IDLE_STREAMS", "10000"))
IDLE_WAITS = int(os.environ.get("IDLE_WAITS", "10000"))
IDLE_SECONDS = float(os.environ.get("IDLE_SECONDS", "20"))
SHARED_WAITS = int(os.environ.get("SHARED_WAITS", "1000"))
DAY = "2026-11-23"
TOKEN = "stq-demo-ops"
TOKENS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "snapshots", "tokens.json")
os.makedirs("/tmp/bench", exist_ok=True)
# stq (which inherits the limit and raises its soft limit to it) holds every idle
# connection, and live_hold.py the other end of each.
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (65536, max(hard, 65536)))
except (ValueError, PermissionError):
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def fail(message):
    sys.exit(f"live_streams.py: {message}")


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close(); return port


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])


def percentile(values, p):
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] if ordered else None


stations = sorted(name for name in os.listdir(source) if os.path.isdir(os.path.join(source, name)))
day_files = not stations
if day_files and not os.path.exists(f"{source}/{DAY}.units.jsonl"):
    fail(f"no station directories in {source}, and no {DAY}.units.jsonl")
copy = f"/tmp/bench/{label}-streams-snapshot"
shutil.rmtree(copy, ignore_errors=True)
subprocess.run(["cp", "-al", source, copy], check=True)
for written in ([DAY] if day_files else [f"{station}/{DAY}" for station in stations]):
    path = f"{copy}/{written}.units.jsonl"
    os.unlink(path)
    shutil.copyfile(f"{source}/{written}.units.jsonl", path)
os.sync()

port, admin = free_port(), free_port()
log = open(f"/tmp/bench/{label}-streams-stq.log", "w")
server = subprocess.Popen([binary, "serve", "--watch", "--snapshots", copy, "--tokens", TOKENS,
    "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}",
    "--max-streams", str(max(IDLE_STREAMS, STREAMS) + 10),
    "--max-waiting", str(max(IDLE_WAITS, SHARED_WAITS) + 10)],
    stdout=subprocess.DEVNULL, stderr=log)
atexit.register(lambda: server.poll() is None and (server.send_signal(signal.SIGTERM), server.wait()))


def get(path, headers=None, at=port):
    connection = http.client.HTTPConnection("127.0.0.1", at, timeout=120)
    connection.request("GET", path, headers={"Authorization": f"Bearer {TOKEN}", **(headers or {})})
    response = connection.getresponse()
    return response.status, dict(response.getheaders()), response.read()


def metric(name):
    _, _, body = get("/metrics", at=admin)
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    fail(f"no {name} at the admin listener")


started = time.monotonic()
while True:
    if server.poll() is not None:
        fail(f"stq exited before ready (/tmp/bench/{label}-streams-stq.log)")
    try:
        if get("/readyz")[0] == 200:
            break
    except OSError:
        pass
    time.sleep(0.2)
load_seconds = time.monotonic() - started
if day_files:
    stations = sorted(record["station_id"] for record in json.loads(get("/stations")[2])["data"])
    shared = os.open(f"{copy}/{DAY}.units.jsonl", os.O_WRONLY | os.O_APPEND)
    files = {station: shared for station in stations}
else:
    files = {station: os.open(f"{copy}/{station}/{DAY}.units.jsonl", os.O_WRONLY | os.O_APPEND)
             for station in stations}
last_ms = 0


def stamp():
    global last_ms
    last_ms = max(time.time_ns() // 1_000_000, last_ms + 1)
    moment = datetime.datetime.fromtimestamp(last_ms // 1000, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{last_ms % 1000:03d}Z"


def append(station, serial):
    line = json.dumps({"station_id": station, "unit_serial": serial, "time_created": stamp(),
                       "unit_type": "PCB", "direction": "output", "result": "pass"},
                      separators=(",", ":")) + "\n"
    os.write(files[station], line.encode())


def hour_window():
    now = datetime.datetime.now(datetime.timezone.utc)
    return (f"from={(now - datetime.timedelta(hours=1)).strftime('%Y-%m-%dT%H:%M:%SZ')}"
            f"&to={(now + datetime.timedelta(days=1)).strftime('%Y-%m-%dT%H:%M:%SZ')}")


async def request_head(path, headers=""):
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: stq\r\nAuthorization: Bearer {TOKEN}\r\n{headers}\r\n".encode())
    await writer.drain()
    status = await reader.readline()
    head = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        head[name.strip().lower()] = value.strip()
    return reader, writer, status, head


class Streams:
    """Open streams, each following one station; each records event's records'
    serials with the time they were read."""

    def __init__(self):
        self.tasks, self.writers, self.seen, self.opened = [], [], {}, 0

    async def follow(self, station, ready):
        reader, writer, status, _ = await request_head(f"/units/stream?station_ids={station}")
        if b" 200 " not in status:
            fail(f"a stream answered {status!r}")
        self.writers.append(writer)
        self.opened += 1
        if self.opened == ready[0]:
            ready[1].set()
        while True:
            # Chunked transfer: a size line, then the chunk; events are read by line.
            line = await reader.readline()
            if not line:
                return
            if line.startswith(b"data: "):
                now = time.monotonic()
                for record in json.loads(line[6:]):
                    self.seen[record["unit_serial"]] = now

    async def open(self, which):
        ready = [len(which), asyncio.Event()]
        self.tasks += [asyncio.create_task(self.follow(station, ready)) for station in which]
        await ready[1].wait()

    def close(self):
        for writer in self.writers:
            writer.close()
        for task in self.tasks:
            task.cancel()


async def hold(path, tag, stop, held):
    """Holds `path` again each time its wait ends, until `stop`."""
    reader, writer, status, head = await request_head(path, f"If-None-Match: {tag}\r\n")
    held.append(writer)
    while not stop.is_set():
        body = await reader.readexactly(int(head.get("content-length", "0")))
        if stop.is_set():
            break
        writer.write(f"GET {path} HTTP/1.1\r\nHost: stq\r\nAuthorization: Bearer {TOKEN}\r\n"
                     f"If-None-Match: {tag}\r\n\r\n".encode())
        status = await reader.readline()
        head = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            head[name.strip().lower()] = value.strip()
    writer.close()


async def settle():
    """Waits until stq's CPU stays below 0.05 cores for a second."""
    while True:
        before = cpu_seconds(server.pid)
        await asyncio.sleep(1)
        if cpu_seconds(server.pid) - before < 0.05:
            return


async def idle_cost(results):
    await settle()
    rss_before = rss_kib(server.pid)
    # Another process holds them: this one holds a file per station besides.
    holder = await asyncio.create_subprocess_exec(
        sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "live_hold.py"),
        str(port), TOKEN, str(IDLE_STREAMS), str(IDLE_WAITS), hour_window(), *stations,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    if await holder.stdout.readline() != b"open\n":
        fail("live_hold.py did not open its connections")
    while metric("stq_waiting_requests") < IDLE_WAITS or metric("stq_streams") < IDLE_STREAMS:
        await asyncio.sleep(0.5)
    await settle()
    rss_open = rss_kib(server.pid)
    cpu = cpu_seconds(server.pid)
    await asyncio.sleep(IDLE_SECONDS)
    idle_cores = (cpu_seconds(server.pid) - cpu) / IDLE_SECONDS
    results.update(idle_streams=IDLE_STREAMS, idle_waits=IDLE_WAITS,
                   rss_idle_mib=round(rss_before / 1024, 1), rss_open_mib=round(rss_open / 1024, 1),
                   kib_per_connection=round((rss_open - rss_before) / (IDLE_STREAMS + IDLE_WAITS), 2),
                   idle_open_cores=round(idle_cores, 4))
    holder.stdin.close()
    await holder.wait()
    while metric("stq_streams") > 0 or metric("stq_waiting_requests") > 0:
        await asyncio.sleep(0.5)


async def floor(rate, streams):
    """Appends at `rate` for SECONDS; (lines, appended serial -> time, stq cores)."""
    appended = {}
    lines = int(rate * SECONDS)
    cpu = cpu_seconds(server.pid)
    began = time.monotonic()
    followed = stations[::max(1, len(stations) // STREAMS)][:STREAMS] if streams else stations
    for i in range(lines):
        delay = began + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        station = followed[i % len(followed)]
        serial = f"LS-{rate}-{int(streams is not None)}-{i}"
        append(station, serial)
        appended[serial] = time.monotonic()
    cores = (cpu_seconds(server.pid) - cpu) / (time.monotonic() - began)
    return appended, cores


async def freshness(results):
    for rate in RATES:
        await settle()
        _, bare_cores = await floor(rate, None)
        await settle()
        streams = Streams()
        followed = stations[::max(1, len(stations) // STREAMS)][:STREAMS]
        await streams.open(followed)
        appended, stream_cores = await floor(rate, streams)
        deadline = time.monotonic() + 60
        while any(serial not in streams.seen for serial in appended) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        lags = [streams.seen[serial] - at for serial, at in appended.items() if serial in streams.seen]
        streams.close()
        results[f"rate_{rate}"] = dict(
            lines=len(appended), never_seen=len(appended) - len(lags),
            freshness_p50_s=round(percentile(lags, 50), 3), freshness_p99_s=round(percentile(lags, 99), 3),
            freshness_max_s=round(max(lags), 3), cores_without_streams=round(bare_cores, 3),
            cores_with_streams=round(stream_cores, 3),
            fan_out_cores=round(stream_cores - bare_cores, 3))
        while metric("stq_streams") > 0:
            await asyncio.sleep(0.5)


async def shared_evaluations(results):
    await settle()
    station = stations[0]
    path = f"/units?station_ids={station}&{hour_window()}&wait=60s"
    tag = (await asyncio.to_thread(get, path))[1]["etag"]
    stop, held = asyncio.Event(), []
    holders = [asyncio.create_task(hold(path, tag, stop, held)) for _ in range(SHARED_WAITS)]
    while metric("stq_waiting_requests") < SHARED_WAITS:
        await asyncio.sleep(0.2)
    evaluations, generation = metric("stq_wait_evaluations_total"), metric("stq_generation")
    stop.set()
    append(station, "LS-SHARED")
    while metric("stq_waiting_requests") > 0:
        await asyncio.sleep(0.2)
    results.update(shared_waits=SHARED_WAITS,
                   shared_evaluations=metric("stq_wait_evaluations_total") - evaluations,
                   shared_generations=metric("stq_generation") - generation)
    for writer in held:
        writer.close()
    for task in holders:
        task.cancel()


async def main():
    results = dict(label=label, stations=len(stations), load_seconds=round(load_seconds, 1),
                   layout="a file per day" if day_files else "a file per station-day")
    await idle_cost(results)
    await shared_evaluations(results)
    await freshness(results)
    print(json.dumps(results))


asyncio.run(main())
