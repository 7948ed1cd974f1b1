//! Tests of a full load: formats side by side, `stq check`, and that what a load
//! gives does not depend on how its files are cut into blocks.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::Value;

use super::files::{self, discover};
use super::full::load_with;
use super::read::{read_all_into, LoadState, Split};
use super::*;
use crate::data::catalog::Generation;
use crate::data::catalog::LoadSummary;
use crate::data::key::RecordKey;
use crate::data::sources::{FileStatus, Start};
use crate::domain::record::Kind;

/// A fresh directory under the system's temporary directory, removed when dropped.
struct TempDirectory(PathBuf);

impl TempDirectory {
    fn new(name: &str) -> TempDirectory {
        let path = std::env::temp_dir().join(format!(
            "stq-snapshot-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDirectory(path)
    }

    fn write(&self, relative: &str, bytes: &[u8]) {
        let path = self.0.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    fn display(&self, relative: &str) -> String {
        self.0.join(relative).display().to_string()
    }
}

impl Drop for TempDirectory {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A committed OpenHTF fixture's bytes (tests/openhtf/records/).
fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../../tests/openhtf/records/{name}.openhtf.json",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|error| panic!("{path}: {error}"))
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn options(directory: &TempDirectory, on_invalid: OnInvalid) -> LoadOptions {
    LoadOptions {
        directory: directory.0.clone(),
        shards: 2,
        on_invalid,
        generation: 1,
        threads: 2,
        hot: Some(Duration::from_secs(3600)),
        cache: crate::data::sealed::cache::test_cache(),
    }
}

/// Every record of a generation as (file index in path order, line, response
/// JSON), in load order.
fn records(generation: &Generation) -> Vec<(u32, u32, Value)> {
    let catalog = &generation.catalog;
    let mut found = Vec::new();
    for rank in 0..catalog.stations().len() {
        let placement = catalog.placement(rank as u32);
        let station = &generation.shards()[placement.shard as usize].stations
            [placement.station_index as usize];
        let fault = crate::data::fault::FirstFault::default();
        let units = (station.units_in(.., &fault)).map(|(key, entry)| (key, entry.bytes));
        let metrics = (station.metrics_in(.., &fault)).map(|(key, entry)| (key, entry.bytes));
        for (key, bytes) in units.chain(metrics) {
            let ordinal = (key.load_order >> 32) as u32;
            let file = (catalog.sources)
                .binary_search_by_key(&ordinal, |source| source.ordinal)
                .unwrap();
            let mut json = Vec::new();
            station.write_json(bytes, &mut json).unwrap();
            found.push((
                file as u32,
                key.load_order as u32,
                serde_json::from_slice(&json).unwrap(),
            ));
        }
        fault.or(()).expect("a generation in memory reads");
    }
    found.sort_by_key(|(file, line, _)| (*file, *line));
    found
}

/// A record's kind and name as a short label: `input`, `output` or the metric name.
fn label(record: &Value) -> &str {
    record["direction"]
        .as_str()
        .or_else(|| record["name"].as_str())
        .unwrap()
}

#[test]
fn openhtf_files_load_in_path_order_beside_json_lines() {
    let directory = TempDirectory::new("openhtf-order");
    directory.write(
        "a/first.units.jsonl",
        br#"{"station_id":"ST-OHTF-A","time_created":"2024-01-01T00:00:00Z","direction":"output"}"#,
    );
    directory.write("a/passing.openhtf.json", &fixture("passing"));
    directory.write("b/erroring.openhtf.json.gz", &gzip(&fixture("erroring")));
    directory.write("b/notes.json", b"{}");
    directory.write("b/failing.openhtf.json.bak", b"not read");

    let (generation, report) = load(&options(&directory, OnInvalid::Fail)).unwrap();
    assert_eq!((report.units, report.metrics), (5, 16));
    assert_eq!(report.stations, 2);
    assert!(report.invalid.is_empty());
    let files: Vec<(&str, u64, u64, u64)> = report
        .files
        .iter()
        .map(|file| (file.format, file.records, file.units, file.metrics))
        .collect();
    assert_eq!(
        files,
        [
            ("units", 1, 1, 0),
            ("openhtf", 16, 2, 14),
            ("openhtf", 4, 2, 2),
        ]
    );
    let paths: Vec<&str> = (generation.catalog.sources.iter())
        .map(|source| &*source.relative)
        .collect();
    assert_eq!(
        paths,
        [
            "a/first.units.jsonl",
            "a/passing.openhtf.json",
            "b/erroring.openhtf.json.gz"
        ]
    );

    let found = records(&generation);
    let order: Vec<(u32, u32, &str)> = found
        .iter()
        .map(|(file, line, record)| (*file, *line, label(record)))
        .collect();
    let passing = [
        "input",
        "output",
        "vcc",
        "temperature",
        "ripple",
        "rail_count",
        "vref",
        "gain",
        "humidity",
        "firmware",
        "frequency",
        "leakage",
        "standby_current",
        "self_test",
        "samples",
        "calibration",
    ];
    let mut wanted = vec![(0, 1, "output")];
    wanted.extend(
        passing
            .iter()
            .enumerate()
            .map(|(position, label)| (1, position as u32 + 1, *label)),
    );
    wanted.extend([
        (2, 1, "input"),
        (2, 2, "output"),
        (2, 3, "vcc"),
        (2, 4, "flash_size"),
    ]);
    assert_eq!(order, wanted);
    let erroring_output = &found
        .iter()
        .find(|(file, line, _)| (*file, *line) == (2, 2))
        .unwrap()
        .2;
    assert_eq!(erroring_output["station_id"], "ST-OHTF-B");
    assert_eq!(erroring_output["unit_serial"], "SN-ERR-003");
    assert_eq!(erroring_output["result"], "error");
}

#[test]
fn a_bad_openhtf_file_is_one_invalid_line() {
    let directory = TempDirectory::new("openhtf-invalid");
    let failing = fixture("failing");
    directory.write("good.openhtf.json", &fixture("passing"));
    directory.write(
        "no-dut.openhtf.json",
        br#"{"station_id":"S","start_time_millis":0,"end_time_millis":0}"#,
    );
    // A file still being written is invalid, not pending: it is one document.
    directory.write("partial.openhtf.json", &failing[..failing.len() / 2]);
    let mut damaged = gzip(&failing);
    damaged.truncate(damaged.len() - 12);
    directory.write("damaged.openhtf.json.gz", &damaged);
    directory.write("empty.openhtf.json", b"");

    let error = load(&options(&directory, OnInvalid::Fail)).unwrap_err();
    let LoadError::Invalid { report } = error else {
        panic!("{error}")
    };
    let lines: Vec<(String, u32)> = report
        .invalid
        .iter()
        .map(|line| (line.path.clone(), line.line))
        .collect();
    assert_eq!(
        lines,
        [
            (directory.display("damaged.openhtf.json.gz"), 1),
            (directory.display("empty.openhtf.json"), 1),
            (directory.display("no-dut.openhtf.json"), 1),
            (directory.display("partial.openhtf.json"), 1),
        ]
    );
    assert!(
        report.invalid[0].reason.contains("gzip stream"),
        "{:?}",
        report.invalid[0]
    );
    assert_eq!(report.invalid[2].reason, "missing field `dut_id`");
    assert_eq!(
        report.invalid[2].to_string(),
        format!(
            "{}:1: missing field `dut_id`",
            directory.display("no-dut.openhtf.json")
        )
    );
    assert_eq!(report.pending, 0);

    let (generation, report) = load(&options(&directory, OnInvalid::Skip)).unwrap();
    assert_eq!(report.invalid.len(), 4);
    assert_eq!((report.units, report.metrics), (2, 14));
    assert_eq!(generation.catalog.summary.skipped_lines, 4);
    for file in &report.files {
        let good = file.path.ends_with("good.openhtf.json");
        assert_eq!(file.invalid, u64::from(!good), "{}", file.path);
        assert_eq!(file.records, if good { 16 } else { 0 }, "{}", file.path);
    }
    assert_eq!(records(&generation).len(), 16);
}

#[test]
fn check_counts_openhtf_records() {
    let directory = TempDirectory::new("openhtf-check");
    for name in ["passing", "failing", "erroring"] {
        directory.write(&format!("{name}.openhtf.json"), &fixture(name));
    }
    directory.write("bad.openhtf.json", b"[]");
    let report = LoadReport::check(&directory.0, 2).unwrap();
    assert_eq!((report.units, report.metrics), (6, 18));
    assert_eq!(report.stations, 2);
    let files: Vec<(&str, u64, u64, u64)> = report
        .files
        .iter()
        .map(|file| {
            let name = file.path.rsplit('/').next().unwrap();
            (name, file.units, file.metrics, file.invalid)
        })
        .collect();
    assert_eq!(
        files,
        [
            ("bad.openhtf.json", 0, 0, 1),
            ("erroring.openhtf.json", 2, 2, 0),
            ("failing.openhtf.json", 2, 2, 0),
            ("passing.openhtf.json", 2, 14, 0),
        ]
    );
    assert_eq!(
        report.invalid[0].reason,
        "an OpenHTF test record must be a JSON object"
    );
}

/// `count` lines of a central logger's day: `stations` stations interleaved in
/// time, each line ending in a line end, with what such files also hold now
/// and then: a byte order mark, Windows line ends, blank lines, invalid lines,
/// an unknown field and an escaped station id.
fn day_lines(kind: Kind, count: usize, stations: usize) -> String {
    let mut text = String::from("\u{feff}");
    for index in 0..count {
        let number = index * 7 % stations;
        let station = match index % 50 {
            // `\u0030` is `0`: the same station, written otherwise.
            37 => format!("ST-\\u0030{number:02}"),
            _ => format!("ST-0{number:02}"),
        };
        let serial = format!("SN-{number:03}-{:04}", index / (stations * 4));
        let time = format!(
            "2026-11-17T{:02}:{:02}:{:02}.{:03}Z",
            index / 3600 % 24,
            index / 60 % 60,
            index % 60,
            index * 13 % 1000
        );
        let unknown = match index % 50 {
            31 => r#","fixture_slot":"FX-1""#,
            _ => "",
        };
        let line = match kind {
            Kind::Units => {
                let (direction, result) = match index % 2 {
                    0 => ("input", ""),
                    _ => ("output", "pass"),
                };
                format!(
                    r#"{{"station_id":"{station}","slot":"slot-{}","unit_serial":"{serial}","time_created":"{time}","tz":"Etc/UTC","mode":"production","tags":["line-6"],"unit_type":"display","direction":"{direction}","result":"{result}"{unknown}}}"#,
                    index % 3
                )
            }
            Kind::Metrics => format!(
                r#"{{"station_id":"{station}","slot":"slot-1","unit_serial":"{serial}","time_created":"{time}","tz":"Etc/UTC","mode":"production","tags":["line-6"],"name":"rail_{}","value":{}.{},"unit":"V","type":"measurement","limit_upper":3.465,"limit_lower":3.135{unknown}}}"#,
                index % 5,
                index % 4,
                index % 10
            ),
        };
        match index % 50 {
            7 => text.push_str(r#"{"station_id":"ST-000","time_created":"#),
            19 => {}
            23 => text.push_str(&format!("{line}\r")),
            43 => text.push_str(r#"{"station_id":"ST-000","slot":"slot-1"}"#),
            _ => text.push_str(&line),
        }
        text.push('\n');
    }
    text
}

/// Everything a load made and reported, but its time: every record's response
/// JSON and index entry with its symbols' texts, station by station, and the
/// report, summary and file states.
fn everything(
    generation: &Generation,
    report: &LoadReport,
) -> (Vec<(u32, u32, Value)>, Vec<String>) {
    let catalog = &generation.catalog;
    let symbols = catalog.symbols();
    let text = |symbol| symbols.text(symbol).unwrap();
    let mut entries = Vec::new();
    for (rank, name) in catalog.stations().iter().enumerate() {
        let placement = catalog.placement(rank as u32);
        let station = &generation.shards()[placement.shard as usize].stations
            [placement.station_index as usize];
        entries.push(format!("station {name} at {placement:?}"));
        let fault = crate::data::fault::FirstFault::default();
        for (key, entry) in station.units_in(.., &fault) {
            entries.push(format!(
                "{key:?} {} {} {:?} {} {} {}",
                text(entry.unit_type),
                text(entry.unit_serial),
                entry.direction,
                text(entry.slot),
                text(entry.mode),
                text(entry.result)
            ));
        }
        for (key, entry) in station.metrics_in(.., &fault) {
            entries.push(format!(
                "{key:?} {} {} {} {:?} {:?} {:?}",
                text(entry.name),
                text(entry.slot),
                text(entry.unit),
                entry.value,
                entry.limit_lower,
                entry.limit_upper
            ));
        }
        fault.or(()).expect("a generation in memory reads");
    }
    let report = LoadReport {
        elapsed: Duration::ZERO,
        ..report.clone()
    };
    entries.push(format!("{report:?}"));
    let summary = LoadSummary {
        loaded_at: String::new(),
        ..catalog.summary.clone()
    };
    entries.push(format!("{summary:?}"));
    entries.push(format!("{:?}", catalog.sources));
    (records(generation), entries)
}

/// Small blocks and hand-overs: a line or two a block, a block's records
/// stored before the next, the two workers taking turns on every file.
const SMALL: Split = Split {
    block_bytes: 64,
    staged_bytes: 1,
};

#[test]
fn records_are_the_same_however_the_files_are_cut() {
    let directory = TempDirectory::new("split");
    directory.write(
        "day.units.jsonl",
        day_lines(Kind::Units, 1500, 40).as_bytes(),
    );
    let metrics = day_lines(Kind::Metrics, 4000, 40);
    // The last line has no line end, and parses: loaded, its station noted.
    directory.write("day.metrics.jsonl", metrics.trim_end().as_bytes());
    directory.write(
        "zipped.metrics.jsonl.gz",
        &gzip(day_lines(Kind::Metrics, 1000, 40).as_bytes()),
    );
    let options = options(&directory, OnInvalid::Skip);

    let (generation, report) = load(&options).unwrap();
    assert_eq!(report.stations, 40);
    assert_eq!(report.invalid.len(), 2 * (30 + 80 + 20));
    assert_eq!(report.pending, 0);
    assert_eq!(report.records() as usize, (1500 + 4000 + 1000) * 47 / 50);
    assert!(report
        .files
        .iter()
        .all(|file| file.unknown_fields.len() == 1));
    let whole = everything(&generation, &report);
    assert_eq!(whole.0.len(), report.records() as usize);

    for split in [
        SMALL,
        Split {
            block_bytes: 4096,
            staged_bytes: 10_000,
        },
    ] {
        let (generation, report) = load_with(&options, split).unwrap();
        let cut = everything(&generation, &report);
        assert!(whole.0 == cut.0, "{split:?}: the records differ");
        assert_eq!(whole.1, cut.1, "{split:?}");
    }
}

#[test]
fn a_pending_last_line_is_the_same_however_the_file_is_cut() {
    let directory = TempDirectory::new("split-pending");
    let lines = day_lines(Kind::Metrics, 600, 20);
    let half = r#"{"station_id":"ST-001","slot":"slot-1","unit_se"#;
    directory.write("day.metrics.jsonl", format!("{lines}{half}").as_bytes());
    let open = day_lines(Kind::Units, 300, 20);
    directory.write("open.units.jsonl", open.trim_end().as_bytes());

    let mut found = Vec::new();
    for split in [Split::default(), SMALL] {
        let mut files = discover(&directory.0).unwrap();
        files::spread_ordinals(&mut files);
        let state = LoadState {
            split,
            ..LoadState::default()
        };
        let state = read_all_into(state, &files, 2, true).unwrap();
        let report = state.report(&files);
        assert_eq!(report.pending, 1, "{split:?}");
        assert_eq!(state.files[0].pending.load(Ordering::Relaxed), 1);
        assert_eq!(report.invalid.len(), 2 * 12 + 2 * 6, "{split:?}");
        // Where the half line starts, it is read again once the file grows.
        let pending = state.reads[0].resume.unwrap().start;
        assert_eq!(
            pending,
            Start {
                offset: lines.len() as u64,
                line: 601
            },
            "{split:?}"
        );
        assert_eq!(
            state.reads[0].stamp.length,
            (lines.len() + half.len()) as u64
        );
        // A last line without a line end that parses is loaded, and read again.
        let open_start = open.trim_end().rfind('\n').unwrap() + 1;
        assert_eq!(
            state.reads[1].resume.unwrap().start,
            Start {
                offset: open_start as u64,
                line: 300
            },
            "{split:?}"
        );
        // Line 300 is index 299: station 299 * 7 % 20.
        assert_eq!(
            state.files[1]
                .open_record
                .lock()
                .as_ref()
                .map(|(station, kind)| (&**station, *kind)),
            Some(("ST-013", Kind::Units)),
            "{split:?}"
        );
        let stations: Vec<Vec<Box<str>>> = state
            .files
            .iter()
            .map(|file| file.stations.lock().iter().cloned().collect())
            .collect();
        assert_eq!(stations[0].len(), 20);
        let records: Vec<(Box<str>, Vec<RecordKey>)> = state
            .stations
            .iter()
            .map(|station| {
                let mut keys: Vec<RecordKey> = station
                    .units
                    .iter()
                    .map(|(key, _)| *key)
                    .chain(station.metrics.iter().map(|(key, _)| *key))
                    .collect();
                keys.sort();
                (station.key().clone(), keys)
            })
            .collect::<BTreeMap<_, _>>()
            .into_iter()
            .collect();
        found.push((format!("{report:?}"), stations, records));
    }
    assert!(found[0] == found[1]);
}

/// Issue 22: a full load seals a station's old records while its files are still
/// read, so that it never holds months of a floor as built records; what it
/// builds is the same as when everything is sealed at the end, and as all hot,
/// however the files are cut and whichever worker hands a station's records over
/// first (records then come late to periods sealed already).
#[test]
fn issue_22_a_load_seals_while_reading_and_builds_the_same() {
    let directory = tempfile::tempdir().unwrap();
    stq_gen::generate(&stq_gen::GenOptions {
        out: directory.path().to_path_buf(),
        stations: 3,
        days: 3,
        units_per_hour: 2,
        seed: 22,
        end: "2026-11-20T00:00:00Z".parse().unwrap(),
    })
    .unwrap();
    let hot = Duration::from_secs(3600);
    let options = LoadOptions {
        directory: directory.path().to_path_buf(),
        shards: 2,
        on_invalid: OnInvalid::Fail,
        generation: 1,
        threads: 2,
        hot: None,
        cache: crate::data::sealed::cache::test_cache(),
    };
    let (generation, report) = load(&options).unwrap();
    let all_hot = everything(&generation, &report);

    let files = discover(directory.path()).unwrap();
    let some_lines = Split {
        block_bytes: 4096,
        staged_bytes: 10_000,
    };
    for split in [some_lines, SMALL] {
        let state = LoadState {
            split,
            seal_while_reading: Some((hot, options.cache.clone())),
            ..LoadState::default()
        };
        let state = read_all_into(state, &files, 2, true).unwrap();
        let sealed: usize = (state.stations.iter())
            .map(|station| station.sealed_records())
            .sum();
        // Of three days, all but the last station-hours and the margin's.
        assert!(
            sealed * 2 > report.records() as usize,
            "{split:?}: {sealed} of {} records sealed while reading",
            report.records()
        );

        let options = LoadOptions {
            hot: Some(hot),
            ..options.clone()
        };
        let (generation, mut report) = load_with(&options, split).unwrap();
        // The report counts what was sealed; everything else in it is the same.
        assert_eq!(report.sealed, generation.sealed_records());
        assert!(report.sealed * 2 > report.records(), "{split:?}");
        report.sealed = 0;
        let sealed = everything(&generation, &report);
        assert!(all_hot.0 == sealed.0, "{split:?}: the records differ");
        assert_eq!(all_hot.1, sealed.1, "{split:?}");
    }
}

/// Every record of a generation as (its file's relative path, line, response JSON),
/// in load order: comparable between loads that number their files otherwise.
fn records_by_path(generation: &Generation) -> Vec<(String, u32, Value)> {
    let files = &generation.catalog.sources;
    (records(generation).into_iter())
        .map(|(file, line, json)| (files[file as usize].relative.to_string(), line, json))
        .collect()
}

/// Issue 34 (CONTRACT revision 4, section 2): at start-up under `hold`, a file with
/// an invalid line is held: none of its records are served, also those sealed
/// while the files were read, and the others are served exactly as a load without
/// it serves them. `/readyz` counts it, `/files` says why, and `stq check` is as
/// before.
#[test]
fn issue_34_hold_starts_without_the_files_with_invalid_lines() {
    let directory = tempfile::tempdir().unwrap();
    stq_gen::generate(&stq_gen::GenOptions {
        out: directory.path().to_path_buf(),
        stations: 3,
        days: 3,
        units_per_hour: 2,
        seed: 34,
        end: "2026-11-20T00:00:00Z".parse().unwrap(),
    })
    .unwrap();
    let files = discover(directory.path()).unwrap();
    // A station's first day of metrics, sealed while reading (a day older than the
    // newest record and the hot window), with a broken line amid valid ones.
    let broken = files
        .iter()
        .find(|file| file.relative.ends_with(".metrics.jsonl"))
        .unwrap()
        .clone();
    let text = std::fs::read_to_string(&broken.path).unwrap();
    let valid_lines = text.lines().count();
    let (head, tail) = text.split_at(text.len() / 2);
    let cut = head.rfind('\n').unwrap() + 1;
    let broken_line = text[..cut].lines().count() as u32 + 1;
    let mut written = text[..cut].to_owned();
    written.push_str("{\"station_id\":\"ST-X\",\"time_created\":\"soon\"}\n");
    written.push_str(&text[cut..]);
    assert_eq!(head.len() + tail.len(), text.len());
    std::fs::write(&broken.path, &written).unwrap();

    let options = LoadOptions {
        directory: directory.path().to_path_buf(),
        shards: 2,
        on_invalid: OnInvalid::Hold,
        generation: 1,
        threads: 2,
        hot: Some(Duration::from_secs(3600)),
        cache: crate::data::sealed::cache::test_cache(),
    };
    let (generation, report) = load_with(&options, SMALL).unwrap();
    assert_eq!(report.held, std::slice::from_ref(&broken.display));
    assert_eq!(report.invalid.len(), 1, "{:?}", report.invalid);
    assert!(report.sealed > 0, "records were sealed");
    let summary = &generation.catalog.summary;
    assert_eq!((summary.held_files, summary.skipped_lines), (1, 0));

    // The same files but the broken one, loaded whole.
    let without = tempfile::tempdir().unwrap();
    for file in files.iter().filter(|file| file.relative != broken.relative) {
        let to = without.path().join(&file.relative);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&file.path, to).unwrap();
    }
    let (clean, _) = load(&LoadOptions {
        directory: without.path().to_path_buf(),
        on_invalid: OnInvalid::Fail,
        ..options.clone()
    })
    .unwrap();
    let served = records_by_path(&generation);
    assert!(served.iter().all(|(path, _, _)| *path != broken.relative));
    assert!(served == records_by_path(&clean), "the records differ");
    let clean_summary = &clean.catalog.summary;
    assert_eq!(
        (
            summary.units,
            summary.metrics,
            generation.catalog.stations().len()
        ),
        (
            clean_summary.units,
            clean_summary.metrics,
            clean.catalog.stations().len()
        )
    );
    assert_eq!(
        (report.units, report.metrics),
        (summary.units, summary.metrics)
    );

    let statuses: Vec<FileStatus> = generation.catalog.file_statuses().collect();
    assert_eq!(statuses.len(), files.len());
    for status in &statuses {
        let held = status.path == broken.relative;
        assert_eq!(status.held, held, "{status:?}");
        assert_eq!(
            status.kind,
            if status.path.ends_with(".units.jsonl") {
                "units"
            } else {
                "metrics"
            }
        );
        assert_eq!(status.skipped_lines, 0);
        if held {
            assert_eq!(status.records, 0);
            assert_eq!(status.bytes, written.len() as u64);
            assert_eq!(
                status
                    .errors
                    .iter()
                    .map(|line| (line.path.as_str(), line.line))
                    .collect::<Vec<_>>(),
                [(broken.display.as_str(), broken_line)]
            );
        } else {
            assert!(status.records > 0 && status.errors.is_empty(), "{status:?}");
            let length = std::fs::metadata(directory.path().join(status.path))
                .unwrap()
                .len();
            assert_eq!(status.bytes, length);
        }
    }
    assert_eq!(
        statuses.iter().map(|status| status.records).sum::<u64>(),
        summary.units + summary.metrics
    );
    assert_eq!(valid_lines + 1, written.lines().count());

    // `stq check` reports the line as ever.
    let checked = LoadReport::check(directory.path(), 2).unwrap();
    assert_eq!(checked.invalid, report.invalid);
    assert!(checked.held.is_empty());
}

/// Issue 34 (CONTRACT revision 4, section 8): `/files` shows at most the first
/// twenty invalid lines of a file, in line order, however its blocks were read.
#[test]
fn issue_34_a_file_shows_its_first_twenty_invalid_lines() {
    let directory = TempDirectory::new("errors");
    let mut text = String::new();
    for line in 1..=60 {
        match line % 2 {
            0 => text.push_str("{broken\n"),
            _ => text.push_str(&format!(
                "{{\"station_id\":\"ST-1\",\"time_created\":\"2026-11-17T00:00:{:02}Z\",\"direction\":\"input\"}}\n",
                line % 60
            )),
        }
    }
    directory.write("a.units.jsonl", text.as_bytes());
    let options = options(&directory, OnInvalid::Skip);
    let (generation, _) = load_with(&options, SMALL).unwrap();
    let status = generation.catalog.file_statuses().next().unwrap();
    assert_eq!(
        (status.held, status.records, status.skipped_lines),
        (false, 30, 30)
    );
    let lines: Vec<u32> = status.errors.iter().map(|line| line.line).collect();
    assert_eq!(
        lines,
        (1..=20).map(|number| number * 2).collect::<Vec<u32>>()
    );
    assert!(status
        .errors
        .iter()
        .all(|line| line.path == directory.display("a.units.jsonl")));
}
