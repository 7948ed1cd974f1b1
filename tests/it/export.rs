//! Issue 35: `stq export --parquet` (docs/api.md section 13) through the real
//! binary, its files read back with the `parquet` crate's Arrow reader and compared,
//! row by row, with what `/units` and `/metrics` answer for the same station and day.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use arrow_array::cast::AsArray as _;
use arrow_array::types::{Float64Type, TimestampNanosecondType};
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{Map, Value};

use crate::common::*;

/// `/units` returns only `output` records unless asked (docs/api.md section 4); an
/// export holds both.
const EVERY_DIRECTION: &str = "&direction=input,output";

/// `stq gen`'s snapshot of three stations over two days, in `directory/snap`.
pub(crate) fn generated(directory: &Path) -> PathBuf {
    generated_days(directory, 2)
}

/// `stq gen`'s snapshot of three stations over `days` days up to 2026-11-24, in
/// `directory/snap`.
pub(crate) fn generated_days(directory: &Path, days: u32) -> PathBuf {
    let snapshots = directory.join("snap");
    let output = run(
        &[
            "gen",
            "--out",
            &path_string(&snapshots),
            "--stations",
            "3",
            "--days",
            &days.to_string(),
            "--units-per-hour",
            "3",
            "--seed",
            "35",
            "--end",
            "2026-11-24T00:00:00Z",
        ],
        None,
        &[],
        Duration::from_secs(120),
    );
    assert!(output.status.success(), "{output:?}");
    snapshots
}

/// `stq export --parquet DESTINATION --snapshots SNAPSHOTS EXTRA`.
fn export(snapshots: &Path, destination: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "export".to_owned(),
        "--parquet".to_owned(),
        path_string(destination),
        "--snapshots".to_owned(),
        path_string(snapshots),
    ];
    args.extend(extra.iter().map(|arg| arg.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&args, None, &[], Duration::from_secs(120))
}

fn exported(snapshots: &Path, destination: &Path, extra: &[&str]) {
    let output = export(snapshots, destination, extra);
    assert!(
        output.status.success(),
        "stq export failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A partition's rows: each record as the API writes it, and its `time` and (on
/// metrics) numeric columns.
struct Row {
    record: Value,
    time: Option<i64>,
    numbers: Vec<Option<f64>>,
}

/// Every row of the parts of `partition`, in file order, then row order.
fn rows(partition: &Path) -> Vec<Row> {
    let mut parts: Vec<PathBuf> = std::fs::read_dir(partition)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    parts.sort();
    let mut rows = Vec::new();
    for part in parts {
        let name = part.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("part-") && name.ends_with(".parquet"),
            "{name} in {partition:?}"
        );
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&part).unwrap())
            .unwrap()
            .build()
            .unwrap();
        for batch in reader {
            rows.extend(batch_rows(&batch.unwrap()));
        }
    }
    rows
}

fn batch_rows(batch: &RecordBatch) -> Vec<Row> {
    let schema = batch.schema();
    let mut rows = Vec::new();
    for index in 0..batch.num_rows() {
        let mut record = Map::new();
        let mut time = None;
        let mut numbers = Vec::new();
        for (field, column) in schema.fields().iter().zip(batch.columns()) {
            let name = field.name().as_str();
            match (name, field.data_type()) {
                ("time", DataType::Timestamp(TimeUnit::Nanosecond, Some(zone))) => {
                    assert_eq!(&**zone, "UTC");
                    let column = column.as_primitive::<TimestampNanosecondType>();
                    time = column.is_valid(index).then(|| column.value(index));
                }
                ("tags", DataType::List(_)) => {
                    let tags = column.as_list::<i32>().value(index);
                    let tags = tags.as_string::<i32>();
                    let tags: Vec<Value> = (0..tags.len())
                        .map(|at| Value::from(tags.value(at)))
                        .collect();
                    record.insert("tags".into(), Value::Array(tags));
                }
                ("metadata", DataType::Utf8) => {
                    let column = column.as_string::<i32>();
                    let metadata = match column.is_valid(index) {
                        true => serde_json::from_str(column.value(index)).unwrap(),
                        false => Value::Null,
                    };
                    record.insert("metadata".into(), metadata);
                }
                (_, DataType::Float64) => {
                    let column = column.as_primitive::<Float64Type>();
                    numbers.push(column.is_valid(index).then(|| column.value(index)));
                }
                (_, DataType::Utf8) => {
                    let column = column.as_string::<i32>();
                    assert!(column.is_valid(index), "{name} is null");
                    record.insert(name.into(), Value::from(column.value(index)));
                }
                (_, other) => panic!("column {name} of type {other:?}"),
            }
        }
        rows.push(Row {
            record: Value::Object(record),
            time,
            numbers,
        });
    }
    rows
}

/// The day partitions of `kind` (`units` or `metrics`) under `destination`, by name.
fn partitions(destination: &Path, kind: &str) -> BTreeMap<String, PathBuf> {
    std::fs::read_dir(destination.join(kind))
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                path,
            )
        })
        .collect()
}

/// A value's number as `/metrics/summary` reads it (docs/api.md section 10.2): JSON
/// number syntax, also with one leading `+`, finite; nothing around it.
fn numeric(text: &str) -> Option<f64> {
    let unsigned = text.strip_prefix('+').unwrap_or(text);
    let bare = |text: &str| {
        !text.starts_with(|c: char| c.is_whitespace() || c == '+')
            && !text.ends_with(char::is_whitespace)
    };
    if !bare(unsigned) || (text.starts_with('+') && unsigned.starts_with('-')) {
        return None;
    }
    match serde_json::from_str::<Value>(unsigned) {
        Ok(Value::Number(number)) => number.as_f64().filter(|number| number.is_finite()),
        _ => None,
    }
}

pub(crate) fn ready_server(snapshots: &Path, directory: &Path) -> Server {
    let tokens = directory.join("tokens.json");
    std::fs::write(&tokens, tokens_json()).unwrap();
    Server::spawn(&serve_args(snapshots, &tokens, &[]), &[])
}

/// Every record of every day partition is the record `/units` or `/metrics`
/// returns for its station and day, in the same order; rows are sorted by station;
/// `time` is the instant of `time_created`, within the partition's day; the
/// numeric twins are the numbers of their texts.
#[test]
fn issue_35_every_row_is_the_record_the_api_returns() {
    let directory = temporary_directory();
    let snapshots = generated(directory.path());
    let destination = directory.path().join("lake");
    exported(&snapshots, &destination, &[]);
    let server = ready_server(&snapshots, directory.path());
    let stations: Vec<String> = (server.ok("/stations").data.iter())
        .map(|row| row["station_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(stations.len(), 3);
    let mut total = 0;
    for kind in ["units", "metrics"] {
        let partitions = partitions(&destination, kind);
        assert_eq!(
            partitions.keys().collect::<Vec<_>>(),
            ["day=2026-11-22", "day=2026-11-23"],
            "{kind}"
        );
        for (name, partition) in &partitions {
            let day = name.strip_prefix("day=").unwrap();
            let from = format!("{day}T00:00:00Z");
            let start = instant(&from);
            let to = rfc3339_from_seconds((start / SECOND) as i64 + 86_400);
            let rows = rows(partition);
            let station_order: Vec<&str> = (rows.iter())
                .map(|row| row.record["station_id"].as_str().unwrap())
                .collect();
            assert!(
                station_order.windows(2).all(|pair| pair[0] <= pair[1]),
                "{kind} {name}: rows not sorted by station"
            );
            for row in &rows {
                let written = row.record["time_created"].as_str().unwrap();
                let want = instant(written);
                assert_eq!(row.time.map(i128::from), Some(want), "{written}");
                assert!(start <= want && want < start + DAY, "{written} in {name}");
                if kind == "metrics" {
                    let texts = ["value", "limit_lower", "limit_upper"]
                        .map(|field| numeric(row.record[field].as_str().unwrap()));
                    assert_eq!(row.numbers, texts, "{}", row.record);
                }
            }
            for station in &stations {
                let want = server
                    .ok(&format!(
                        "/{kind}?station_ids={station}&from={from}&to={to}{}",
                        if kind == "units" { EVERY_DIRECTION } else { "" }
                    ))
                    .data;
                let got: Vec<Value> = (rows.iter())
                    .filter(|row| row.record["station_id"] == **station)
                    .map(|row| row.record.clone())
                    .collect();
                assert!(!want.is_empty(), "{kind} {station} {day}");
                assert_eq!(got, want, "{kind} {station} {day}");
                total += got.len();
            }
        }
    }
    let all = server.ok(&format!(
        "/units?from=2026-11-01T00:00:00Z&to=2026-12-01T00:00:00Z{EVERY_DIRECTION}"
    ));
    let metrics = server.ok("/metrics?from=2026-11-01T00:00:00Z&to=2026-12-01T00:00:00Z");
    assert_eq!(total, all.data.len() + metrics.data.len());
}

/// `--from`, `--to` and `--station-ids` choose what is written; an export again
/// replaces the day partitions it covers (no part of the earlier run stays beside
/// the new one) and leaves the others as they were; a partition of its window that
/// no record holds any more goes.
#[test]
fn issue_35_an_export_replaces_the_days_it_covers() {
    let directory = temporary_directory();
    let snapshots = generated(directory.path());
    let destination = directory.path().join("lake");
    exported(&snapshots, &destination, &[]);
    let day_one = destination.join("units/day=2026-11-22");
    let day_two = destination.join("units/day=2026-11-23");
    // What an earlier export left: a part beside today's, and a day no record has.
    std::fs::copy(
        day_one.join("part-0.parquet"),
        day_one.join("part-7.parquet"),
    )
    .unwrap();
    let old_day = destination.join("units/day=2001-01-01");
    std::fs::create_dir_all(&old_day).unwrap();
    std::fs::copy(
        day_one.join("part-0.parquet"),
        old_day.join("part-0.parquet"),
    )
    .unwrap();
    let day_two_before = std::fs::read(day_two.join("part-0.parquet")).unwrap();
    let modified = |path: &Path| std::fs::metadata(path).unwrap().modified().unwrap();
    let day_two_modified = modified(&day_two.join("part-0.parquet"));

    exported(
        &snapshots,
        &destination,
        &[
            "--from",
            "2026-11-22T06:00:00Z",
            "--to",
            "2026-11-22T12:00:00Z",
            "--station-ids",
            "ST-02,ST-09",
        ],
    );
    let names: Vec<String> = std::fs::read_dir(&day_one)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["part-0.parquet"], "the earlier part-7 stays");
    let windowed = rows(&day_one);
    assert!(!windowed.is_empty());
    for row in &windowed {
        assert_eq!(row.record["station_id"], "ST-02");
        let at = instant(row.record["time_created"].as_str().unwrap());
        assert!(
            instant("2026-11-22T06:00:00Z") <= at && at < instant("2026-11-22T12:00:00Z"),
            "{}",
            row.record
        );
    }
    // Outside the window: untouched.
    assert_eq!(
        std::fs::read(day_two.join("part-0.parquet")).unwrap(),
        day_two_before
    );
    assert_eq!(modified(&day_two.join("part-0.parquet")), day_two_modified);
    assert!(old_day.join("part-0.parquet").exists());

    // The whole time line: the day no record holds goes, and day one is whole again.
    exported(&snapshots, &destination, &[]);
    assert!(!old_day.exists(), "a day without records stays");
    let server = ready_server(&snapshots, directory.path());
    let want = server.ok(&format!(
        "/units?from=2026-11-22T00:00:00Z&to=2026-11-23T00:00:00Z{EVERY_DIRECTION}"
    ));
    assert_eq!(rows(&day_one).len(), want.data.len());
    let left: Vec<String> = walk(&destination)
        .into_iter()
        .filter(|path| !path.ends_with(".parquet"))
        .collect();
    assert_eq!(left, Vec::<String>::new(), "files besides the parts");
}

/// Every file under `root`, as paths relative to it.
fn walk(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_owned()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).unwrap() {
            let path = entry.unwrap().path();
            match path.is_dir() {
                true => pending.push(path),
                false => files.push(path.strip_prefix(root).unwrap().display().to_string()),
            }
        }
    }
    files.sort();
    files
}

/// An invalid line stops the export with `path:line: reason` and exit 1, and
/// writes nothing; `--on-invalid skip` exports every valid record.
#[test]
fn issue_35_an_invalid_line_stops_the_export_unless_skipped() {
    let directory = temporary_directory();
    let snapshots = generated(directory.path());
    std::fs::write(
        snapshots.join("broken.units.jsonl"),
        "{\"station_id\": \"ST-01\", \"time_created\": \"not a time\"}\n",
    )
    .unwrap();
    let destination = directory.path().join("lake");
    let output = export(&snapshots, &destination, &[]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("broken.units.jsonl:1:"), "{stderr}");
    assert!(stderr.contains("--on-invalid"), "{stderr}");
    assert!(!destination.exists() || walk(&destination).is_empty());

    exported(&snapshots, &destination, &["--on-invalid", "skip"]);
    let units: usize = (partitions(&destination, "units").values())
        .map(|partition| rows(partition).len())
        .sum();
    let tokens = directory.path().join("tokens.json");
    std::fs::write(&tokens, tokens_json()).unwrap();
    let skipped = Server::spawn(
        &serve_args(&snapshots, &tokens, &["--on-invalid", "skip"]),
        &[],
    );
    let want = skipped.ok(&format!(
        "/units?from=2026-11-01T00:00:00Z&to=2026-12-01T00:00:00Z{EVERY_DIRECTION}"
    ));
    assert_eq!(units, want.data.len());
}

/// The DuckDB release the comparison runs with (PyPI), pinned: its Parquet reader
/// and SQL are what is tested.
const DUCKDB_VERSION: &str = "2.0.1";

/// A Python with DuckDB: a venv under the target directory, made (and DuckDB
/// installed from PyPI) when missing. `None` where it cannot be made here (no
/// `python3 -m venv` and no way to install Debian's python3-venv): the caller skips
/// and says so; under `CI=true` that is a failure.
fn duckdb_python() -> Option<PathBuf> {
    static PYTHON: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("duckdb-venv");
            let python = venv.join("bin/python");
            let installed = |python: &Path| {
                std::process::Command::new(python)
                    .args(["-c", "import duckdb; print(duckdb.__version__)"])
                    .output()
                    .is_ok_and(|output| {
                        String::from_utf8_lossy(&output.stdout).trim() == DUCKDB_VERSION
                    })
            };
            if installed(&python) {
                return Some(python);
            }
            let system = debian_binary("/usr/bin/python3", "python3")?;
            let has_venv = |system: &Path| {
                std::process::Command::new(system)
                    .args(["-c", "import ensurepip, venv"])
                    .status()
                    .is_ok_and(|status| status.success())
            };
            if !has_venv(&system) {
                // Debian leaves `venv`'s ensurepip to python3-venv.
                let version = std::process::Command::new(&system)
                    .args([
                        "-c",
                        "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')",
                    ])
                    .output()
                    .unwrap();
                let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
                debian_binary(
                    &format!("/usr/lib/python{version}/ensurepip/__init__.py"),
                    "python3-venv",
                )?;
            }
            let _ = std::fs::remove_dir_all(&venv);
            let made = std::process::Command::new(&system)
                .args(["-m", "venv"])
                .arg(&venv)
                .status()
                .unwrap();
            assert!(made.success(), "python3 -m venv {venv:?}");
            let pip = std::process::Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "--disable-pip-version-check"])
                .arg(format!("duckdb=={DUCKDB_VERSION}"))
                .status()
                .unwrap();
            assert!(pip.success(), "pip install duckdb=={DUCKDB_VERSION}");
            assert!(
                installed(&python),
                "duckdb {DUCKDB_VERSION} is not importable"
            );
            Some(python)
        })
        .clone()
}

/// Numbers equal to 1e-9 relative (1e-12 absolute near zero).
pub(crate) fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-9 * want.abs().max(got.abs()) || (got - want).abs() <= 1e-12
}

/// DuckDB reads the export as it is, with section 13's types, and computes from it
/// what stq's summaries say: first-pass yield per station and day, and each metric's
/// mean and standard deviation per station (0 differences, 1e-9 relative).
#[test]
fn issue_35_duckdb_computes_from_the_export_what_the_summaries_say() {
    let Some(python) = duckdb_python() else {
        return;
    };
    let directory = temporary_directory();
    let snapshots = generated(directory.path());
    let destination = directory.path().join("lake");
    exported(&snapshots, &destination, &[]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/export/duckdb_summaries.py");
    let output = std::process::Command::new(&python)
        .arg(&script)
        .arg(&destination)
        .arg("pass")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let duckdb: Value = serde_json::from_slice(&output.stdout).unwrap();

    let types = &duckdb["types"];
    for (kind, column, want) in [
        ("units", "station_id", "VARCHAR"),
        ("units", "tags", "VARCHAR[]"),
        ("units", "metadata", "VARCHAR"),
        ("units", "time", "TIMESTAMP WITH TIME ZONE"),
        ("metrics", "value", "VARCHAR"),
        ("metrics", "value_num", "DOUBLE"),
        ("metrics", "limit_lower_num", "DOUBLE"),
        ("metrics", "limit_upper_num", "DOUBLE"),
        ("metrics", "day", "DATE"),
    ] {
        let got = types[kind][column].as_str().unwrap_or("missing");
        // DuckDB names a zoned nanosecond timestamp TIMESTAMPTZ_NS or TIMESTAMP_NS
        // WITH TIME ZONE by release; both are section 13's TIMESTAMP (ns, UTC).
        let same =
            got == want || (column == "time" && got.contains("TIMESTAMP") && got.contains("NS"));
        assert!(same, "{kind}.{column}: {got}, not {want}");
    }

    let server = ready_server(&snapshots, directory.path());
    let window = "from=2026-11-22T00:00:00Z&to=2026-11-24T00:00:00Z";
    let summary = server
        .ok(&format!("/units/summary?{window}&bucket=1d"))
        .data;
    let rows = duckdb["units"].as_array().unwrap();
    assert_eq!(rows.len(), summary.len(), "rows: {rows:?}");
    for (got, want) in rows.iter().zip(&summary) {
        assert_eq!(got["station_id"], want["station_id"]);
        assert_eq!(got["bucket_start"], want["bucket_start"]);
        assert_eq!(got["units"], want["units"]);
        let (got, want) = (
            got["first_pass_yield"].as_f64().unwrap(),
            want["first_pass_yield"].as_f64().unwrap(),
        );
        assert!(close(got, want), "first-pass yield {got} against {want}");
    }
    let summary = server.ok(&format!("/metrics/summary?{window}")).data;
    let rows = duckdb["metrics"].as_array().unwrap();
    assert_eq!(rows.len(), summary.len());
    for (got, want) in rows.iter().zip(&summary) {
        assert_eq!(
            (&got["station_id"], &got["name"]),
            (&want["station_id"], &want["name"])
        );
        for statistic in ["mean", "stddev"] {
            let (got, want) = (got[statistic].as_f64(), want[statistic].as_f64());
            match (got, want) {
                (Some(got), Some(want)) => {
                    assert!(close(got, want), "{statistic} {got} against {want}");
                }
                _ => assert_eq!(got, want, "{statistic}"),
            }
        }
    }
}

/// Every partition (`units/day=...` and `metrics/day=...`) under `destination`, by
/// kind and name.
pub(crate) fn every_partition(destination: &Path) -> BTreeMap<(String, String), PathBuf> {
    let mut all = BTreeMap::new();
    for kind in ["units", "metrics"] {
        if destination.join(kind).is_dir() {
            for (name, path) in partitions(destination, kind) {
                all.insert((kind.to_owned(), name), path);
            }
        }
    }
    all
}

/// The rows of a partition as records and their `time`, to compare with another's.
pub(crate) fn records(partition: &Path) -> Vec<(Value, Option<i64>)> {
    (rows(partition).into_iter())
        .map(|row| (row.record, row.time))
        .collect()
}

/// Each part's modification time, by path.
fn modified(partition: &Path) -> BTreeMap<PathBuf, std::time::SystemTime> {
    (std::fs::read_dir(partition).unwrap())
        .map(|entry| {
            let path = entry.unwrap().path();
            let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
            (path, modified)
        })
        .collect()
}

/// Issue 35: `stq serve --export DIR` writes each day once all of it is older than
/// the hot window counted back from the floor's newest record, the same rows `stq export` writes; a late record
/// into a day already written has that day written again after the reload, and
/// only that day.
#[test]
fn issue_35_serve_keeps_the_complete_days_exported() {
    let directory = temporary_directory();
    let snapshots = generated_days(directory.path(), 3);
    let tokens = directory.path().join("tokens.json");
    std::fs::write(&tokens, tokens_json()).unwrap();
    let served = directory.path().join("served");
    let destination = path_string(&served);
    let server = Server::spawn(
        &serve_args(
            &snapshots,
            &tokens,
            &["--export", &destination, "--hot", "1h", "--watch"],
        ),
        &[],
    );
    // The records end at midnight on the 24th: with an hour hot, the 23rd is not
    // complete, the two days before are.
    let complete = ["day=2026-11-21", "day=2026-11-22"];
    server.wait_for_log("export written:", 1);
    let same_as_export = |context: &str| {
        let fresh = directory.path().join(format!("fresh-{context}"));
        exported(&snapshots, &fresh, &[]);
        let fresh = every_partition(&fresh);
        let written = every_partition(&served);
        let names: Vec<&(String, String)> = written.keys().collect();
        let want: Vec<&(String, String)> = (fresh.keys())
            .filter(|(_, name)| complete.contains(&name.as_str()))
            .collect();
        assert_eq!(names, want, "{context}");
        for (partition, path) in &written {
            let got = records(path);
            assert!(!got.is_empty(), "{context}: {partition:?}");
            assert!(
                got == records(&fresh[partition]),
                "{context}: {partition:?} differs from stq export's"
            );
        }
    };
    same_as_export("start");
    let untouched = (
        served.join("metrics/day=2026-11-21"),
        served.join("units/day=2026-11-22"),
    );
    let untouched_modified = (modified(&untouched.0), modified(&untouched.1));

    // A unit tested late, on the 21st (17:00 UTC), in a file already read.
    let late = r#"{"station_id":"ST-01","slot":"slot-1","unit_serial":"SN-LATE-35","time_created":"2026-11-21T12:00:00.000-05:00","tz":"America/New_York","mode":"production","tags":[],"unit_type":"pcb-power","direction":"output","result":"pass","metadata":{"operator":"op-35"}}"#;
    let generation = server.generation();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(snapshots.join("ST-01/2026-11-21.units.jsonl"))
        .unwrap();
    std::io::Write::write_all(&mut file, format!("{late}\n").as_bytes()).unwrap();
    drop(file);
    server.wait_for_generation_after(generation);
    server.wait_for_log("exported day 2026-11-21 of units", 2);
    // The pass that wrote it has ended: any other day it wrote is logged.
    server.wait_for_log("export written:", 2);
    same_as_export("late");
    let again = records(&served.join("units/day=2026-11-21"));
    assert!(
        again
            .iter()
            .any(|(record, _)| record["unit_serial"] == "SN-LATE-35"),
        "the late record is exported"
    );
    assert_eq!(server.log_count("exported day 2026-11-21 of metrics"), 1);
    assert_eq!(server.log_count("exported day 2026-11-22 of units"), 1);
    assert_eq!(modified(&untouched.0), untouched_modified.0);
    assert_eq!(modified(&untouched.1), untouched_modified.1);
}

/// Issue 51: a station that fell silent days ago holds back no day: a day is
/// complete by the newest record of all stations, so the silent station's last
/// day and the floor's complete days after it are written, the same rows
/// `stq export` writes.
#[test]
fn issue_51_a_silent_station_holds_back_no_day() {
    let directory = temporary_directory();
    let snapshots = generated_days(directory.path(), 3);
    let silent = snapshots.join("ST-SILENT");
    std::fs::create_dir_all(&silent).unwrap();
    std::fs::write(
        silent.join("2026-11-20.units.jsonl"),
        concat!(
            r#"{"station_id":"ST-SILENT","slot":"slot-1","unit_serial":"SN-SILENT-1","time_created":"2026-11-20T10:00:00Z","direction":"output","result":"pass"}"#,
            "\n"
        ),
    )
    .unwrap();
    std::fs::write(
        silent.join("2026-11-20.metrics.jsonl"),
        concat!(
            r#"{"station_id":"ST-SILENT","unit_serial":"SN-SILENT-1","time_created":"2026-11-20T10:00:00Z","name":"voltage","value":"3.3"}"#,
            "\n"
        ),
    )
    .unwrap();
    let tokens = directory.path().join("tokens.json");
    std::fs::write(&tokens, tokens_json()).unwrap();
    let served = directory.path().join("served");
    let server = Server::spawn(
        &serve_args(
            &snapshots,
            &tokens,
            &["--export", &path_string(&served), "--hot", "1h"],
        ),
        &[],
    );
    server.wait_for_log("export written:", 1);
    let fresh = directory.path().join("fresh");
    exported(&snapshots, &fresh, &[]);
    let fresh = every_partition(&fresh);
    // The floor's records end at midnight on the 24th: with an hour hot, the
    // 23rd is not complete; the silent station's 20th and the two days after are.
    let complete = ["day=2026-11-20", "day=2026-11-21", "day=2026-11-22"];
    let want: Vec<&(String, String)> = (fresh.keys())
        .filter(|(_, name)| complete.contains(&name.as_str()))
        .collect();
    assert_eq!(want.len(), 6, "{:?}", fresh.keys());
    let written = every_partition(&served);
    assert_eq!(written.keys().collect::<Vec<_>>(), want);
    for (partition, path) in &written {
        assert!(
            records(path) == records(&fresh[partition]),
            "{partition:?} differs from stq export's"
        );
    }
    let silent_day = records(&served.join("units/day=2026-11-20"));
    assert!(
        (silent_day.iter()).any(|(record, _)| record["station_id"] == "ST-SILENT"),
        "the silent station's day is exported"
    );
}
