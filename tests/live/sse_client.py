#!/usr/bin/env python3
"""Follows a stq stream (docs/api.md section 14.2) and prints its records.

    STQ_TOKEN=stq-demo-ops python3 tests/live/sse_client.py --count 10 \
        'http://127.0.0.1:8080/units/stream?station_ids=ST-01'

Prints each record as one line of JSON, as its `records` event arrives; `RESET
<reason>` when the server starts the stream over (the view is then empty, and the
backlog follows again); `ERROR <body>` when the stream ends with `event: error`
(the token was revoked or expired) or is refused (any status but 200, and 503,
which it tries again after `Retry-After`), and exits 1. Once the view holds
`--count` records (those received since the start, or since the last reset), it
exits 0. A connection that drops, or a stream that ends (SIGTERM, a slow reader cut
off), is opened again after the server's `retry` with `Last-Event-ID`, so the
stream goes on after the last event received; after 10 connections in a row that
brought no records it gives up (exit 3).

Needs httpx and httpx-sse (tests/live/requirements.txt).
"""

import argparse
import json
import os
import sys
import time

import httpx
from httpx_sse import SSEError, connect_sse

FAILURES_IN_A_ROW = 10


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="a stream URL, e.g. http://127.0.0.1:8080/units/stream")
    parser.add_argument("--count", type=int, required=True, help="exit 0 once the view holds this many records")
    args = parser.parse_args()

    headers = {"Authorization": f"Bearer {os.environ['STQ_TOKEN']}"}
    # A heartbeat comes after 15 s of silence: three missed ones mean a dead connection.
    timeout = httpx.Timeout(10.0, read=45.0)
    view = 0
    last_event_id = None
    retry = 2.0
    failures = 0
    with httpx.Client(timeout=timeout) as client:
        while True:
            if last_event_id:
                headers["Last-Event-ID"] = last_event_id
            try:
                with connect_sse(client, "GET", args.url, headers=dict(headers)) as source:
                    response = source.response
                    if response.status_code == 503:
                        retry = float(response.headers.get("retry-after", retry))
                    elif response.status_code != 200:
                        print(f"ERROR {response.read().decode()}", flush=True)
                        return 1
                    else:
                        for event in source.iter_sse():
                            # As EventSource does: the last id seen is where to resume.
                            last_event_id = event.id or last_event_id
                            if event.retry is not None:
                                retry = event.retry / 1000
                            if event.event == "records":
                                failures = 0
                                for record in json.loads(event.data):
                                    print(json.dumps(record, ensure_ascii=False, separators=(",", ":")), flush=True)
                                    view += 1
                                    if view == args.count:
                                        return 0
                            elif event.event == "reset":
                                print(f"RESET {json.loads(event.data)['reason']}", flush=True)
                                view = 0
                            elif event.event == "error":
                                print(f"ERROR {event.data}", flush=True)
                                return 1
            except SSEError as error:  # a 200 that is no stream: not a stream URL
                print(f"ERROR {error}", flush=True)
                return 1
            except httpx.TransportError as error:
                print(f"connection lost: {error!r}", file=sys.stderr)
            # The stream ended or the connection dropped: open it again where it was.
            failures += 1
            if failures == FAILURES_IN_A_ROW:
                print(f"giving up: {failures} connections in a row brought no records", file=sys.stderr)
                return 3
            time.sleep(retry)


if __name__ == "__main__":
    sys.exit(main())
