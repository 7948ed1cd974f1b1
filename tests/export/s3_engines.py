"""Issue 35: what polars and chDB compute from an `stq export --parquet s3://...`
read from an S3 server, for tests/it/s3.rs to compare with stq's own summaries
(docs/api.md section 10), as tests/export/duckdb_summaries.py does for DuckDB over
a directory.

usage: python s3_engines.py ENGINE BUCKET PREFIX PASS_RESULT...

PREFIX may hold a `*` (`plant-*`: every plant's export, read as one).

ENGINE is `polars` or `chdb`. S3's settings come from the environment as stq takes
them: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION.

Prints one JSON object:
- "units": per station and UTC day, first-pass yield as /units/summary defines it
  (output records only; a unit is a station's non-empty unit_serial; its attempts
  in the contract's order; it belongs to the day of its first attempt, and passed
  first time when that attempt's result is a pass result, ignoring ASCII case);
- "metrics": per station and metric name, the mean and the sample standard
  deviation of the numeric values (value_num), null where there are none (or, for
  the deviation, fewer than two);
- "types": each column's type as the engine names it, of both kinds.

chDB's deviation is `stddevSampStable` (Welford's method): its `stddevSamp` sums
squares in one pass, which loses about nine digits on a metric whose deviation is
a thousandth of its mean, and so differs from run to run by more than 1e-9 as its
threads add in another order.

Within a station, a unit's attempts are ordered by `time`; the files' own order
breaks ties of time in DuckDB's script, but neither engine here reads S3 in a
stable order, and the generated snapshots the test exports have no unit tested
twice at one instant (a tie broken otherwise would show as a difference).
"""

import json
import math
import os
import sys

engine, bucket, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
passes = [result.lower() for result in sys.argv[4:]]
endpoint = os.environ["AWS_ENDPOINT_URL"]
key_id = os.environ["AWS_ACCESS_KEY_ID"]
secret = os.environ["AWS_SECRET_ACCESS_KEY"]
region = os.environ.get("AWS_REGION", "us-east-1")


def number(value):
    """A JSON number, or null for a missing or not-a-number statistic."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def with_polars():
    import polars as pl

    options = {
        "aws_endpoint_url": endpoint,
        "aws_access_key_id": key_id,
        "aws_secret_access_key": secret,
        "aws_region": region,
        "aws_allow_http": "true",
    }

    def scan(kind):
        return pl.scan_parquet(
            f"s3://{bucket}/{prefix}/{kind}/**/*.parquet",
            hive_partitioning=True,
            storage_options=options,
        )

    units = scan("units")
    metrics = scan("metrics")
    first = (
        units.filter((pl.col("direction") == "output") & (pl.col("unit_serial") != ""))
        .sort("station_id", "unit_serial", "time")
        .group_by("station_id", "unit_serial", maintain_order=True)
        .first()
        .with_columns(
            bucket_start=pl.col("time").dt.truncate("1d").dt.strftime("%Y-%m-%dT00:00:00Z"),
            passed=pl.col("result").str.to_lowercase().is_in(passes).cast(pl.Float64),
        )
        .group_by("station_id", "bucket_start")
        .agg(units=pl.len(), first_pass_yield=pl.col("passed").mean())
        .sort("station_id", "bucket_start")
        .collect()
    )
    statistics = (
        metrics.group_by("station_id", "name")
        .agg(mean=pl.col("value_num").mean(), stddev=pl.col("value_num").std(ddof=1))
        .sort("station_id", "name")
        .collect()
    )
    types = {
        kind: {name: str(kind_type) for name, kind_type in source.collect_schema().items()}
        for kind, source in (("units", units), ("metrics", metrics))
    }
    return (
        [
            {
                "station_id": row["station_id"],
                "bucket_start": row["bucket_start"],
                "units": row["units"],
                "first_pass_yield": number(row["first_pass_yield"]),
            }
            for row in first.iter_rows(named=True)
        ],
        [
            {
                "station_id": row["station_id"],
                "name": row["name"],
                "mean": number(row["mean"]),
                "stddev": number(row["stddev"]),
            }
            for row in statistics.iter_rows(named=True)
        ],
        types,
    )


def with_chdb():
    import chdb

    def source(kind):
        url = f"{endpoint}/{bucket}/{prefix}/{kind}/day=*/*.parquet"
        return f"s3('{url}', '{key_id}', '{secret}', 'Parquet')"

    settings = "settings use_hive_partitioning = 1"

    def rows(sql):
        answer = chdb.query(sql, "JSONEachRow")
        return [json.loads(line) for line in answer.bytes().decode().splitlines() if line]

    pass_list = "[" + ", ".join(f"'{result}'" for result in passes) + "]"
    first = rows(
        f"""
        select station_id,
               formatDateTime(toStartOfDay(first_time, 'UTC'), '%Y-%m-%dT00:00:00Z', 'UTC')
                   as bucket_start,
               count() as units,
               avg(if(has({pass_list}, lower(first_result)), 1.0, 0.0)) as first_pass_yield
        from (
            select station_id, unit_serial,
                   argMin(result, time) as first_result, min(time) as first_time
            from {source('units')}
            where direction = 'output' and unit_serial != ''
            group by station_id, unit_serial
        )
        group by station_id, bucket_start
        order by station_id, bucket_start
        {settings}
        """
    )
    statistics = rows(
        f"""
        select station_id, name, avg(value_num) as mean, stddevSampStable(value_num) as stddev
        from {source('metrics')}
        group by station_id, name
        order by station_id, name
        {settings}
        """
    )
    types = {
        kind: {row["name"]: row["type"] for row in rows(f"describe {source(kind)} {settings}")}
        for kind in ("units", "metrics")
    }
    for row in first:
        row["units"] = int(row["units"])
        row["first_pass_yield"] = number(row["first_pass_yield"])
    for row in statistics:
        row["mean"] = number(row["mean"])
        row["stddev"] = number(row["stddev"])
    return first, statistics, types


units, metrics, types = {"polars": with_polars, "chdb": with_chdb}[engine]()
print(json.dumps({"units": units, "metrics": metrics, "types": types}))
