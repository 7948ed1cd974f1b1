#!/usr/bin/env python3
"""Holds idle live connections open for `benches/live_streams.py`'s idle-cost phase,
in a process of its own: one process may hold at most its hard RLIMIT_NOFILE of
descriptors (20,000 on the benchmark machine, which cannot raise it), and the
benchmark's own process also holds a file for each station it writes to.

usage: python3 benches/live_hold.py PORT TOKEN STREAMS WAITS WINDOW STATION...

Opens STREAMS streams (`/units/stream` of one station each, in turn) and WAITS held
requests (`/units` of one station over WINDOW with `wait=60s` and that answer's
ETag, asked again each time its wait ends), prints `open` once every stream has its
answer's head and every held request is sent, and closes them all when its standard input ends.
"""

import asyncio, resource, sys

port, token = int(sys.argv[1]), sys.argv[2]
streams, waits, window, stations = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6:]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def head(reader):
    status = await reader.readline()
    fields = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        fields[name.strip().lower()] = value.strip()
    if b" 200 " not in status and b" 304 " not in status:
        raise SystemExit(f"live_hold.py: answered {status!r}")
    return fields


def request(path, tag=None):
    extra = f"If-None-Match: {tag}\r\n" if tag else ""
    return (f"GET {path} HTTP/1.1\r\nHost: stq\r\nAuthorization: Bearer {token}\r\n"
            f"{extra}\r\n").encode()


def failing(connect):
    """`connect`, whose failure before it opened fails the wait for it too."""
    async def connecting(*arguments):
        opened = arguments[-1]
        try:
            await connect(*arguments)
        except BaseException as error:
            if not opened.done():
                opened.set_exception(error)
            raise
    return connecting


@failing
async def follow(station, opened):
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
    writer.write(request(f"/units/stream?station_ids={station}"))
    await head(reader)
    opened.set_result(None)
    while await reader.read(1 << 16):
        pass


@failing
async def hold(path, tag, opened):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request(path, tag))
    await writer.drain()
    # Held: its head comes when the wait ends. The caller counts it at stq.
    opened.set_result(None)
    fields = await head(reader)
    while True:
        await reader.readexactly(int(fields.get("content-length", "0")))
        writer.write(request(path, tag))
        fields = await head(reader)


async def main():
    tags = {}
    for station in stations[:min(waits, len(stations))]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
        writer.write(request(f"/units?station_ids={station}&{window}"))
        fields = await head(reader)
        await reader.readexactly(int(fields["content-length"]))
        tags[station] = fields["etag"]
        writer.close()
    connections = [(follow, (stations[i % len(stations)],)) for i in range(streams)]
    for i in range(waits):
        station = stations[i % len(stations)]
        path = f"/units?station_ids={station}&{window}&wait=60s"
        connections.append((hold, (path, tags[station])))
    # A few hundred at a time: thousands connecting at once would leave some
    # requests unwritten past stq's time for a request's head (408).
    tasks = []
    for start in range(0, len(connections), 250):
        opened = []
        for connect, arguments in connections[start:start + 250]:
            opened.append(asyncio.get_running_loop().create_future())
            tasks.append(asyncio.create_task(connect(*arguments, opened[-1])))
        await asyncio.gather(*opened)
    print("open", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for task in tasks:
        task.cancel()


asyncio.run(main())
