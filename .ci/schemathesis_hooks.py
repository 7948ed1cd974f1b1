"""Schemathesis hooks for stq's CI run (loaded by .ci/schemathesis.sh).

OpenAPI 3.1 has no way to say how two query parameters depend on each other, so
a case that schemathesis generates as schema-valid ("positive") can still break a
rule of CONTRACT.md that spans parameters, and the server rightly answers 400:

- section 5: `from >= to` is `invalid_window`;
- section 6: a `cursor` is only valid as the server issued it (`meta.next_cursor`
  of an earlier page, with the same filters and token); any other
  string is `invalid_cursor`, and a cursor without `limit` is `invalid_parameter`;
- section 15: `baseline_from` and `baseline_to` come both or neither (one alone is
  `invalid_parameter`), and `baseline_from >= baseline_to` is `invalid_window`.

This hook makes positive cases obey those rules; it leaves negative cases
alone (they must be refused anyway) and changes nothing else.
"""

from __future__ import annotations

import re

import schemathesis

# docs/api.md section 4: RFC 3339 as the contract restricts it, or epoch milliseconds.
# The document's `pattern` for `from`/`to` has already guaranteed one of the two.
RFC_3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:[Zz]|([+-])(\d{2}):(\d{2}))"
)
EPOCH_MILLISECONDS = re.compile(r"-?\d+")


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (years 0000 to 9999
    included, which `datetime` cannot hold)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146_097 + day_of_era - 719_468


def instant(text: str) -> int | None:
    """Nanoseconds since the Unix epoch of a `from`/`to` value, or None when it is
    neither form (then the case is not positive after all, and is left alone)."""
    if EPOCH_MILLISECONDS.fullmatch(text):
        return int(text) * 1_000_000
    match = RFC_3339.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(group) for group in match.groups()[:6])
    fraction, sign, offset_hours, offset_minutes = match.groups()[6:]
    nanoseconds = int((fraction or "").ljust(9, "0"))
    offset = 0
    if sign is not None:
        offset = (int(offset_hours) * 3600 + int(offset_minutes) * 60) * (-1 if sign == "-" else 1)
    seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset
    return seconds * 1_000_000_000 + nanoseconds


@schemathesis.hook
def map_case(context, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or not case.query:
        return case
    query = dict(case.query)
    # A generated cursor was never issued by the server.
    query.pop("cursor", None)
    start, end = query.get("from"), query.get("to")
    if isinstance(start, str) and isinstance(end, str):
        start_instant, end_instant = instant(start), instant(end)
        if start_instant is not None and end_instant is not None and start_instant >= end_instant:
            # Without `to`, the window is `from` plus 24 hours: never empty.
            del query["to"]
    # The baseline has no default end: both or neither, the first before the second.
    baseline = [query.get("baseline_from"), query.get("baseline_to")]
    if any(end is not None for end in baseline):
        instants = [instant(end) if isinstance(end, str) else None for end in baseline]
        if None in instants or instants[0] >= instants[1]:
            query.pop("baseline_from", None)
            query.pop("baseline_to", None)
    case.query = query
    return case
