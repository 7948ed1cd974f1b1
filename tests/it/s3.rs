//! Issue 35: `stq export --parquet s3://BUCKET/PREFIX` and `stq serve --export
//! s3://...` (docs/api.md section 13) against real S3 servers on loopback, each
//! started and stopped (by its process id) by its test: `moto_server` (PyPI's
//! `moto[server]`) and `s3s-fs` (crates.io), so that what holds does not rest on
//! one server's reading of S3.
//!
//! What stq wrote is read back by clients that are not stq's: boto3 lists and
//! downloads the objects, and polars and chDB (from PyPI, as a plant would run
//! them) read the export from the S3 server and compute what `/units/summary` and
//! `/metrics/summary` answer. Every run's standard output and error (at
//! `RUST_LOG=debug`) is searched for the credentials.
//!
//! Nothing is skipped: each server and Python package is installed when missing
//! (by tests/export/s3-tools.sh, which pins their releases: `s3s-fs` with `cargo
//! install` and moto, polars and chDB with pip, under the target directory), and a
//! test fails when it cannot be.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use super::export::{close, every_partition, generated, generated_days, ready_server, records};
use crate::common::s3::*;
use crate::common::*;

/// The pass results `stq gen`'s units have (docs/api.md section 10.1's default).
const PASS: &str = "pass";

/// `stq export --parquet s3://lake/PREFIX --snapshots SNAPSHOTS EXTRA` with
/// `server`'s settings; its output searched for the credentials.
fn export(snapshots: &Path, server: &S3Server, prefix: &str, extra: &[&str]) -> Output {
    let destination = format!("s3://{BUCKET}/{prefix}");
    let snapshots = path_string(snapshots);
    let mut args = vec![
        "export",
        "--parquet",
        &destination,
        "--snapshots",
        &snapshots,
    ];
    args.extend(extra);
    let variables = with_debug_log(server);
    let output = run(&args, None, &borrowed(&variables), Duration::from_secs(300));
    let context = format!("stq {args:?} against {:?}", server.kind);
    assert_no_secret(&String::from_utf8_lossy(&output.stdout), &context);
    assert_no_secret(&String::from_utf8_lossy(&output.stderr), &context);
    output
}

fn exported(snapshots: &Path, server: &S3Server, prefix: &str, extra: &[&str]) {
    let output = export(snapshots, server, prefix, extra);
    assert!(
        output.status.success(),
        "stq export to {:?} failed: {}",
        server.kind,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Runs a script of tests/export with the venv's Python and `server`'s settings.
fn script(server: &S3Server, name: &str, args: &[&str]) -> Vec<u8> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/export")
        .join(name);
    let output = Command::new(python())
        .arg(script)
        .args(args)
        .envs(server.variables())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{name} {args:?} against {:?}: {}",
        server.kind,
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// Every key under `prefix/` in the bucket, and its size, as boto3 lists them.
fn sizes(server: &S3Server, prefix: &str) -> Vec<(String, u64)> {
    let listed: Value =
        serde_json::from_slice(&script(server, "s3_objects.py", &["list", BUCKET, prefix]))
            .unwrap();
    let mut sizes: Vec<(String, u64)> = (listed.as_array().unwrap().iter())
        .map(|item| {
            let key = item["key"].as_str().unwrap().to_owned();
            (key, item["size"].as_u64().unwrap())
        })
        .collect();
    sizes.sort();
    sizes
}

/// Every key under `prefix/` in the bucket, as boto3 lists them.
fn keys(server: &S3Server, prefix: &str) -> Vec<String> {
    (sizes(server, prefix).into_iter())
        .map(|(key, _)| key)
        .collect()
}

/// Every object under `prefix/`, downloaded by boto3 into `directory`.
fn download(server: &S3Server, prefix: &str, directory: &Path) {
    script(
        server,
        "s3_objects.py",
        &["download", BUCKET, prefix, &path_string(directory)],
    );
}

/// A type as an engine names it, without ClickHouse's `Nullable(...)`.
fn bare(engine_type: &str) -> &str {
    engine_type
        .strip_prefix("Nullable(")
        .and_then(|inner| inner.strip_suffix(')'))
        .unwrap_or(engine_type)
}

/// Section 13's types as each engine names them.
fn assert_types(engine: &str, types: &Value) {
    let string = ["String"].as_slice();
    let strings = ["List(String)", "Array(String)", "Array(Nullable(String))"].as_slice();
    let timestamp = [
        "Datetime(time_unit='ns', time_zone='UTC')",
        "DateTime64(9, 'UTC')",
    ]
    .as_slice();
    let double = ["Float64"].as_slice();
    for (kind, column, names) in [
        ("units", "station_id", string),
        ("units", "result", string),
        ("units", "tags", strings),
        ("units", "metadata", string),
        ("units", "time", timestamp),
        ("metrics", "time_created", string),
        ("metrics", "value", string),
        ("metrics", "value_num", double),
        ("metrics", "limit_lower_num", double),
        ("metrics", "limit_upper_num", double),
    ] {
        let got = types[kind][column].as_str().unwrap_or("missing");
        assert!(
            names.contains(&got) || names.contains(&bare(got)),
            "{engine}: {kind}.{column} is {got}"
        );
    }
}

/// An engine's first-pass yields and metric statistics equal the summaries'
/// (1e-9 relative).
fn assert_summaries(engine: &str, answer: &Value, stq: &Server) {
    let window = "from=2026-11-22T00:00:00Z&to=2026-11-24T00:00:00Z";
    let summary = stq.ok(&format!("/units/summary?{window}&bucket=1d")).data;
    let rows = answer["units"].as_array().unwrap();
    assert_eq!(rows.len(), summary.len(), "{engine}: {rows:?}");
    for (got, want) in rows.iter().zip(&summary) {
        assert_eq!(got["station_id"], want["station_id"], "{engine}");
        assert_eq!(got["bucket_start"], want["bucket_start"], "{engine}");
        assert_eq!(got["units"], want["units"], "{engine}: {got}");
        let (got, want) = (
            got["first_pass_yield"].as_f64().unwrap(),
            want["first_pass_yield"].as_f64().unwrap(),
        );
        assert!(
            close(got, want),
            "{engine}: first-pass yield {got}, not {want}"
        );
    }
    let summary = stq.ok(&format!("/metrics/summary?{window}")).data;
    let rows = answer["metrics"].as_array().unwrap();
    assert_eq!(rows.len(), summary.len(), "{engine}");
    for (got, want) in rows.iter().zip(&summary) {
        assert_eq!(
            (&got["station_id"], &got["name"]),
            (&want["station_id"], &want["name"]),
            "{engine}"
        );
        for statistic in ["mean", "stddev"] {
            match (got[statistic].as_f64(), want[statistic].as_f64()) {
                (Some(got), Some(want)) => {
                    assert!(close(got, want), "{engine}: {statistic} {got}, not {want}");
                }
                (got, want) => assert_eq!(got, want, "{engine}: {statistic}"),
            }
        }
    }
}

/// The size of the suffix of a file that polars asks for first (`Range:
/// bytes=-262144`, read off s3s-fs's log).
const POLARS_SUFFIX: u64 = 256 << 10;

/// `stq gen`'s snapshot of eight stations over two days up to 2026-11-24, 30 units
/// an hour each, in `directory/snap`: large enough that each day's part is
/// larger than [`POLARS_SUFFIX`]. s3s-fs 0.14.1 answers a suffix range longer than
/// the object with 500 (it seeks that far back from the end: EINVAL) where S3
/// answers the whole object, and the s3s-fs releases that fix it need rustc 1.96.
fn large_snapshot(directory: &Path) -> PathBuf {
    let snapshots = directory.join("snap");
    let output = run(
        &[
            "gen",
            "--out",
            &path_string(&snapshots),
            "--stations",
            "8",
            "--days",
            "2",
            "--units-per-hour",
            "60",
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

/// polars and chDB read the export from the S3 server, with section 13's types,
/// and compute from it what stq's summaries say: across two plants, each exported
/// under a prefix of its own (half the stations each), read as one through the
/// glob `plant-*` as docs/deployment.md's query does.
fn engines_compute_what_the_summaries_say(kind: ServerKind) {
    let server = S3Server::start(kind);
    let directory = temporary_directory();
    let snapshots = large_snapshot(directory.path());
    let plants = [
        ("plant-1", "ST-01,ST-02,ST-03,ST-04"),
        ("plant-2", "ST-05,ST-06,ST-07,ST-08"),
    ];
    for (plant, stations) in plants {
        exported(&snapshots, &server, plant, &["--station-ids", stations]);
        let parts = sizes(&server, plant);
        assert_eq!(parts.len(), 4, "{parts:?}");
        for (key, size) in &parts {
            assert!(
                *size > POLARS_SUFFIX,
                "{key} is too small for s3s-fs: {size} bytes"
            );
        }
    }
    let stq = ready_server(&snapshots, directory.path());
    for engine in ["polars", "chdb"] {
        let answer: Value = serde_json::from_slice(&script(
            &server,
            "s3_engines.py",
            &[engine, BUCKET, "plant-*", PASS],
        ))
        .unwrap();
        assert_types(engine, &answer["types"]);
        assert_summaries(engine, &answer, &stq);
    }
}

#[test]
fn issue_35_polars_and_chdb_read_from_moto_what_the_summaries_say() {
    engines_compute_what_the_summaries_say(ServerKind::Moto);
}

#[test]
fn issue_35_polars_and_chdb_read_from_s3s_fs_what_the_summaries_say() {
    engines_compute_what_the_summaries_say(ServerKind::S3sFs);
}

/// An export again replaces the day partitions it covers: a part an earlier run
/// left beside the new ones goes, and so does a partition of its window that no
/// record holds any more; no temporary object is ever left.
fn an_export_again_replaces_the_days(kind: ServerKind) {
    let server = S3Server::start(kind);
    let directory = temporary_directory();
    let snapshots = generated(directory.path());
    exported(&snapshots, &server, "plant-1", &[]);
    let first = keys(&server, "plant-1");
    assert_eq!(
        first,
        [
            "plant-1/metrics/day=2026-11-22/part-0.parquet",
            "plant-1/metrics/day=2026-11-23/part-0.parquet",
            "plant-1/units/day=2026-11-22/part-0.parquet",
            "plant-1/units/day=2026-11-23/part-0.parquet",
        ]
    );
    // What an earlier run left: a part beside today's, and a day no record has.
    let part = "plant-1/units/day=2026-11-22/part-0.parquet";
    for stale in [
        "plant-1/units/day=2026-11-22/part-7.parquet",
        "plant-1/units/day=2001-01-01/part-0.parquet",
    ] {
        script(&server, "s3_objects.py", &["copy", BUCKET, part, stale]);
    }
    assert_eq!(keys(&server, "plant-1").len(), 6);

    exported(&snapshots, &server, "plant-1", &[]);
    assert_eq!(
        keys(&server, "plant-1"),
        first,
        "{kind:?}: parts of the first run stay"
    );
    // And the rows are the day's, once.
    let local = directory.path().join("downloaded");
    download(&server, "plant-1", &local);
    let stq = ready_server(&snapshots, directory.path());
    let want =
        stq.ok("/units?from=2026-11-22T00:00:00Z&to=2026-11-23T00:00:00Z&direction=input,output");
    let got = records(&local.join("units/day=2026-11-22"));
    assert_eq!(got.len(), want.data.len(), "{kind:?}");
}

#[test]
fn issue_35_an_export_again_replaces_the_days_on_moto() {
    an_export_again_replaces_the_days(ServerKind::Moto);
}

#[test]
fn issue_35_an_export_again_replaces_the_days_on_s3s_fs() {
    an_export_again_replaces_the_days(ServerKind::S3sFs);
}

/// `stq serve --export s3://...` writes each complete day, the same rows a fresh
/// `stq export` writes, keeps its fingerprints in the bucket, and writes a day
/// again after a late record into it.
fn serve_keeps_the_complete_days_exported(kind: ServerKind) {
    let server = S3Server::start(kind);
    let directory = temporary_directory();
    let snapshots = generated_days(directory.path(), 3);
    let tokens = directory.path().join("tokens.json");
    std::fs::write(&tokens, tokens_json()).unwrap();
    let destination = format!("s3://{BUCKET}/served");
    let variables = with_debug_log(&server);
    let stq = Server::spawn(
        &serve_args(
            &snapshots,
            &tokens,
            &["--export", &destination, "--hot", "1h", "--watch"],
        ),
        &borrowed(&variables),
    );
    // The records end at midnight on the 24th: with an hour hot, the 23rd is not
    // complete, the two days before are.
    let complete = ["day=2026-11-21", "day=2026-11-22"];
    stq.wait_for_log("export written:", 1);
    let same_as_export = |context: &str| {
        let prefix = format!("fresh-{context}");
        exported(&snapshots, &server, &prefix, &[]);
        let (fresh, served) = (
            directory.path().join(&prefix),
            directory.path().join(format!("served-{context}")),
        );
        download(&server, &prefix, &fresh);
        download(&server, "served", &served);
        assert!(
            served.join(".stq-export").is_file(),
            "{kind:?}: the fingerprints are kept in the bucket"
        );
        let (fresh, written) = (every_partition(&fresh), every_partition(&served));
        let names: Vec<&(String, String)> = written.keys().collect();
        let want: Vec<&(String, String)> = (fresh.keys())
            .filter(|(_, name)| complete.contains(&name.as_str()))
            .collect();
        assert_eq!(names, want, "{kind:?} {context}");
        for (partition, path) in &written {
            let got = records(path);
            assert!(!got.is_empty(), "{kind:?} {context}: {partition:?}");
            assert!(
                got == records(&fresh[partition]),
                "{kind:?} {context}: {partition:?} differs from stq export's"
            );
        }
    };
    same_as_export("start");

    // A unit tested late, on the 21st (17:00 UTC), in a file already read.
    let late = r#"{"station_id":"ST-01","slot":"slot-1","unit_serial":"SN-LATE-35","time_created":"2026-11-21T12:00:00.000-05:00","tz":"America/New_York","mode":"production","tags":[],"unit_type":"pcb-power","direction":"output","result":"pass","metadata":{"operator":"op-35"}}"#;
    let generation = stq.generation();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(snapshots.join("ST-01/2026-11-21.units.jsonl"))
        .unwrap();
    std::io::Write::write_all(&mut file, format!("{late}\n").as_bytes()).unwrap();
    drop(file);
    stq.wait_for_generation_after(generation);
    stq.wait_for_log("exported day 2026-11-21 of units", 2);
    stq.wait_for_log("export written:", 2);
    same_as_export("late");
    let served = directory.path().join("served-late");
    assert!(
        records(&served.join("units/day=2026-11-21"))
            .iter()
            .any(|(record, _)| record["unit_serial"] == "SN-LATE-35"),
        "{kind:?}: the late record is exported"
    );
    assert_eq!(stq.log_count("exported day 2026-11-22 of units"), 1);
    assert_no_secret(
        &stq.log().join("\n"),
        &format!("stq serve --export on {kind:?}"),
    );
}

#[test]
fn issue_35_serve_keeps_the_days_exported_to_moto() {
    serve_keeps_the_complete_days_exported(ServerKind::Moto);
}

#[test]
fn issue_35_serve_keeps_the_days_exported_to_s3s_fs() {
    serve_keeps_the_complete_days_exported(ServerKind::S3sFs);
}

/// An S3 server that is not there makes `stq export` exit 1 with a message that
/// names the destination, once its retries are spent: it does not hang. (One
/// server: what is tested is stq's client, which never reaches it.)
#[test]
fn issue_35_an_export_to_a_stopped_s3_server_fails_with_a_message() {
    let mut server = S3Server::start(ServerKind::S3sFs);
    let directory = temporary_directory();
    let snapshots = generated(directory.path());
    exported(&snapshots, &server, "plant-1", &[]);
    server.stop();
    let output = export(&snapshots, &server, "plant-1", &[]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let message = (stderr.lines())
        .find(|line| line.starts_with("stq: "))
        .unwrap_or_else(|| panic!("no error line:\n{stderr}"));
    assert!(message.contains("s3://lake/plant-1"), "{message}");
    assert!(
        message.contains("cannot list") || message.contains("cannot put"),
        "{message}"
    );
}
