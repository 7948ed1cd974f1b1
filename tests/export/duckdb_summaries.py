"""Issue 35: what DuckDB computes from an `stq export --parquet` directory, for
tests/it/export.rs to compare with stq's own summaries (docs/api.md section 10).

usage: python duckdb_summaries.py LAKE PASS_RESULT...

Prints one JSON object:
- "units": per station and UTC day, first-pass yield as /units/summary defines it
  (output records only; a unit is a station's non-empty unit_serial; its attempts
  in the contract's order; it belongs to the day of its first attempt, and passed
  first time when that attempt's result is a pass result, ignoring ASCII case);
- "metrics": per station and metric name, the mean and the sample standard
  deviation of the numeric values (value_num);
- "types": each column's DuckDB type, of both kinds.
"""

import json
import sys

import duckdb

lake, passes = sys.argv[1], [result.lower() for result in sys.argv[2:]]
connection = duckdb.connect()
units = f"read_parquet('{lake}/units/*/*.parquet', hive_partitioning = true, filename = true, file_row_number = true)"
metrics = f"read_parquet('{lake}/metrics/*/*.parquet', hive_partitioning = true)"

# Within a station a file's rows are in the contract's order (instant, then load
# order), so its file and row number break ties of time.
first_pass = connection.execute(
    f"""
    with attempts as (
        select station_id, unit_serial, result, time,
               row_number() over (
                   partition by station_id, unit_serial
                   order by time, filename, file_row_number) as attempt
        from {units}
        where direction = 'output' and unit_serial <> ''
    )
    select station_id,
           strftime(time at time zone 'UTC', '%Y-%m-%dT00:00:00Z') as bucket_start,
           count(*) as units,
           avg(case when lower(result) in (select unnest(?::varchar[])) then 1.0 else 0.0 end)
               as first_pass_yield
    from attempts
    where attempt = 1
    group by all
    order by all
    """,
    [passes],
).fetchall()

statistics = connection.execute(
    f"""
    select station_id, name, avg(value_num) as mean, stddev_samp(value_num) as stddev
    from {metrics}
    group by all
    order by all
    """
).fetchall()

types = {}
for kind, source in (("units", units), ("metrics", metrics)):
    types[kind] = {
        name: kind_type
        for name, kind_type, *_ in connection.execute(f"describe select * from {source}").fetchall()
    }

print(
    json.dumps(
        {
            "units": [
                {"station_id": s, "bucket_start": b, "units": u, "first_pass_yield": y}
                for s, b, u, y in first_pass
            ],
            "metrics": [
                {"station_id": s, "name": n, "mean": m, "stddev": d} for s, n, m, d in statistics
            ],
            "types": types,
        }
    )
)
