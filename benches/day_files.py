#!/usr/bin/env python3
"""Rewrites a `stq gen` snapshot (one file per station and day) as a central logger
would write it: one `DAY.units.jsonl` and one `DAY.metrics.jsonl` per day, holding
every station's lines of that day, interleaved in time order. BENCHMARKS.md.

usage: python3 benches/day_files.py SOURCE_DIRECTORY TARGET_DIRECTORY

The lines are merged by `time_created`, as a logger receiving every station's lines
would append them; the merge is stable (equal times keep the order of the stations'
paths, and of the lines within a file), and no line is changed. Each station's file
is read whole: a day's files of the 1000-station set are about 500 MB together.
The record counts of both layouts are checked at the end.
"""

import heapq
import os
import sys
from collections import defaultdict
from datetime import datetime, timezone

TIME_FIELD = b'"time_created":"'


EARLIEST = datetime.min.replace(tzinfo=timezone.utc)


def time_created(line):
    """The instant of the line's `time_created`, found without parsing the line (the
    files are hundreds of MB). Compared as instants, not as texts: the stations
    write their local offsets (`...T18:00:14.654-06:00` comes after
    `...T00:00:03.557Z`). A line without one sorts first."""
    start = line.find(TIME_FIELD)
    if start < 0:
        return EARLIEST
    start += len(TIME_FIELD)
    return datetime.fromisoformat(line[start : line.index(b'"', start)].decode())


def station_day_files(source):
    """`(day, kind) -> [path, ...]`, paths in byte order, for every
    `STATION/DAY.KIND.jsonl` below `source`."""
    groups = defaultdict(list)
    for station in sorted(os.listdir(source)):
        directory = os.path.join(source, station)
        if not os.path.isdir(directory):
            continue
        for name in sorted(os.listdir(directory)):
            for kind in ("units", "metrics"):
                suffix = f".{kind}.jsonl"
                if name.endswith(suffix):
                    groups[(name[: -len(suffix)], kind)].append(os.path.join(directory, name))
    return groups


def lines_of(path):
    with open(path, "rb") as handle:
        lines = handle.read().splitlines(keepends=True)
    # A last line without a line end would run into the next station's line.
    if lines and not lines[-1].endswith(b"\n"):
        lines[-1] += b"\n"
    return lines


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    source, target = sys.argv[1], sys.argv[2]
    os.makedirs(target, exist_ok=True)
    read_total = written_total = 0
    for (day, kind), paths in sorted(station_day_files(source).items()):
        stations = [lines_of(path) for path in paths]
        read = sum(len(lines) for lines in stations)
        written = 0
        output = os.path.join(target, f"{day}.{kind}.jsonl")
        with open(output, "wb", buffering=1 << 20) as handle:
            # heapq.merge is stable: on equal keys the earlier input goes first.
            for line in heapq.merge(*stations, key=time_created):
                handle.write(line)
                written += 1
        if written != read:
            sys.exit(f"{output}: wrote {written} lines of {read}")
        print(f"{output}: {written} lines from {len(paths)} files", flush=True)
        read_total += read
        written_total += written
    print(f"{written_total} lines written, {read_total} read")
    if written_total != read_total:
        sys.exit(1)


if __name__ == "__main__":
    main()
