//! Issue 11: OpenHTF test records (CONTRACT section 2.1) over real HTTP.
//!
//! The snapshot holds the fixtures OpenHTF itself wrote (`tests/openhtf/records/`,
//! one of them gzipped, in two sub-directories) beside a JSON Lines file, and the
//! tests check every field of every record they become, their order among other
//! records, filters and cursor walks over them, and how a bad file is reported. The
//! expected records are written out here from the fixtures' README, not computed by
//! a second converter; only the times, which every rewrite of the fixtures changes,
//! are read from the files.

use std::sync::OnceLock;

use crate::common::*;
use serde_json::{json, Value};

/// The whole time line as epoch milliseconds: the fixtures' times are those of the
/// run that wrote them.
const EVERY_TIME: &str = "from=-9223372036854775808&to=9223372036854775807";

/// The JSON Lines file's one record: on `ST-OHTF-A` at the passing record's end,
/// after it in path order, so it ties with the passing output unit and follows it.
const EXTRA_UNITS: &str = "line-a/zz-extra.units.jsonl";

/// A fixture file's text.
fn fixture_text(name: &str) -> String {
    let path = format!(
        "{}/tests/openhtf/records/{name}.openhtf.json",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{path}: {error}"))
}

fn fixture_json(name: &str) -> Value {
    serde_json::from_str(&fixture_text(name)).unwrap()
}

/// Epoch milliseconds written as the contract writes OpenHTF times.
fn millis_text(millis: i64) -> String {
    let seconds = millis.div_euclid(1000);
    let text = rfc3339_from_seconds(seconds);
    format!(
        "{}.{:03}Z",
        text.strip_suffix('Z').unwrap(),
        millis.rem_euclid(1000)
    )
}

/// Where each fixture lies in the snapshot directory.
const FILES: [(&str, &str); 3] = [
    ("passing", "line-a/passing.openhtf.json"),
    ("failing", "line-a/failing.openhtf.json.gz"),
    ("erroring", "line-b/erroring.openhtf.json"),
];

/// The snapshot of this module: the three fixtures and one JSON Lines unit record.
fn files() -> Vec<FileSpec> {
    let mut files: Vec<FileSpec> = FILES
        .iter()
        .map(|(name, path)| match path.strip_suffix(".gz") {
            Some(_) => FileSpec::gz(path, fixture_text(name), &[]),
            None => FileSpec::plain(path, fixture_text(name)),
        })
        .collect();
    let end = fixture_json("passing")["end_time_millis"].as_i64().unwrap();
    files.push(FileSpec::plain(
        EXTRA_UNITS,
        format!(
            r#"{{"station_id":"ST-OHTF-A","time_created":"{}","direction":"output","result":"pass","unit_serial":"SN-JSONL"}}"#,
            millis_text(end)
        ),
    ));
    files
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let fixture = Fixture::from_files(&files());
        let server = Server::start(&fixture, &[]);
        Shared { fixture, server }
    })
}

/// An expected record and where it sorts: (epoch ms, station, path, position).
type Expected = ((i64, String, String, u32), Value);

/// Each fixture's station, DUT, `unit_type`, `result` and metrics as (phase, name,
/// value, unit, limit_lower, limit_upper), from tests/openhtf/README.md.
#[allow(clippy::type_complexity)]
fn tables() -> Vec<(
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    Vec<(
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
    )>,
)> {
    vec![
        (
            "passing",
            "ST-OHTF-A",
            "SN-PASS-001",
            "board_power",
            "pass",
            vec![
                ("power", "vcc", "3.3", "V", "3.0", "3.6"),
                ("power", "temperature", "25", "°C", "-10", ""),
                ("power", "ripple", "0.012", "V", "", "0.05"),
                ("power", "rail_count", "3", "", "3", "3"),
                ("power", "vref", "1.5", "V", "1.0", "2.0"),
                ("power", "gain", "0.00125", "No dimension", "", ""),
                ("power", "humidity", "40.5", "percent volume", "0", "100"),
                ("identity", "firmware", "v1.2.3", "", "", ""),
                ("identity", "frequency", "1001", "Hz", "900", "1100"),
                ("identity", "leakage", "2", "", "", "10"),
                ("identity", "standby_current", "2.5e-09", "A", "", "1e-06"),
                ("identity", "self_test", "true", "", "", ""),
                ("identity", "samples", "[1,2.5,-3]", "", "", ""),
                (
                    "identity",
                    "calibration",
                    r#"{"gain":1.02,"label":"Straße","ok":null}"#,
                    "",
                    "",
                    "",
                ),
            ],
        ),
        (
            "failing",
            "ST-OHTF-A",
            "SN-FAIL-002",
            "board_power",
            "fail",
            vec![
                ("power_fail", "vcc", "3.9", "V", "3.0", "3.6"),
                ("power_fail", "current", "0.25", "A", "", "0.5"),
            ],
        ),
        (
            "erroring",
            "ST-OHTF-B",
            "SN-ERR-003",
            "flash_program",
            "error",
            vec![
                ("power_ok", "vcc", "3.31", "V", "3.0", "3.6"),
                ("flash", "flash_size", "4096", "", "1024", ""),
            ],
        ),
    ]
}

/// Every record the snapshot must serve, of one kind, in the contract's order.
fn expected(kind: Kind) -> Vec<Value> {
    let mut records: Vec<Expected> = Vec::new();
    for (name, station, serial, unit_type, result, metrics) in tables() {
        let path = FILES.iter().find(|(file, _)| *file == name).unwrap().1;
        let file = fixture_json(name);
        let sort_key =
            |millis: i64, position: u32| (millis, station.to_owned(), path.to_owned(), position);
        let common = |millis: i64| {
            json!({"station_id": station, "slot": "", "unit_serial": serial,
                   "time_created": millis_text(millis), "tz": "UTC", "mode": ""})
        };
        match kind {
            Kind::Units => {
                for (position, direction, field, result) in [
                    (1, "input", "start_time_millis", ""),
                    (2, "output", "end_time_millis", result),
                ] {
                    let millis = file[field].as_i64().unwrap();
                    let mut record = common(millis);
                    let more = json!({"tags": [], "unit_type": unit_type, "direction": direction,
                                      "result": result, "metadata": file["metadata"]});
                    record
                        .as_object_mut()
                        .unwrap()
                        .extend(more.as_object().unwrap().clone());
                    records.push((sort_key(millis, position), record));
                }
            }
            Kind::Metrics => {
                for (index, (phase, metric, value, unit, lower, upper)) in
                    metrics.into_iter().enumerate()
                {
                    let millis = file["phases"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|candidate| candidate["name"] == phase)
                        .unwrap()["end_time_millis"]
                        .as_i64()
                        .unwrap();
                    let mut record = common(millis);
                    let more = json!({"tags": [phase], "name": metric, "value": value,
                                      "unit": unit, "type": "measurement",
                                      "limit_upper": upper, "limit_lower": lower});
                    record
                        .as_object_mut()
                        .unwrap()
                        .extend(more.as_object().unwrap().clone());
                    records.push((sort_key(millis, index as u32 + 3), record));
                }
            }
        }
    }
    if kind == Kind::Units {
        let end = fixture_json("passing")["end_time_millis"].as_i64().unwrap();
        records.push((
            (end, "ST-OHTF-A".to_owned(), EXTRA_UNITS.to_owned(), 1),
            json!({"station_id": "ST-OHTF-A", "slot": "", "unit_serial": "SN-JSONL",
                   "time_created": millis_text(end), "tz": "", "mode": "", "tags": [],
                   "unit_type": "", "direction": "output", "result": "pass", "metadata": null}),
        ));
    }
    records.sort_by(|left, right| {
        let (left, right) = (&left.0, &right.0);
        (left.0, left.1.as_bytes(), left.2.as_bytes(), left.3).cmp(&(
            right.0,
            right.1.as_bytes(),
            right.2.as_bytes(),
            right.3,
        ))
    });
    records.into_iter().map(|(_, record)| record).collect()
}

#[test]
fn every_unit_record_of_the_fixtures_is_served_field_by_field() {
    let page = shared()
        .server
        .ok(&format!("/units?{EVERY_TIME}&direction=input,output"));
    assert_records(&page.data, &expected(Kind::Units), "units of the fixtures");
    assert_eq!(page.data.len(), 7);
    // Metadata numbers keep their text: the passing record's operator badge.
    let body = &page.response.body;
    assert!(
        body.contains(r#""operator":{"badge":1042,"shift":"night"}"#),
        "{body}"
    );
}

#[test]
fn every_metric_record_of_the_fixtures_is_served_field_by_field() {
    let page = shared().server.ok(&format!("/metrics?{EVERY_TIME}"));
    assert_records(
        &page.data,
        &expected(Kind::Metrics),
        "metrics of the fixtures",
    );
    assert_eq!(page.data.len(), 18);
}

#[test]
fn filters_reach_openhtf_records_like_any_other() {
    let server = &shared().server;
    let serials = |query: &str| -> Vec<String> {
        server
            .ok(&format!("/units?{EVERY_TIME}&{query}"))
            .data
            .iter()
            .map(|record| {
                format!(
                    "{} {}",
                    record["unit_serial"].as_str().unwrap(),
                    record["direction"].as_str().unwrap()
                )
            })
            .collect()
    };
    // The default direction is output: one per record, and the JSON Lines one.
    assert_eq!(serials("station_ids=ST-OHTF-B"), ["SN-ERR-003 output"]);
    assert_eq!(
        serials("serial_number=SN-FAIL-002&direction=input,output"),
        ["SN-FAIL-002 input", "SN-FAIL-002 output"]
    );
    assert_eq!(
        serials("type=flash_program&direction=input"),
        ["SN-ERR-003 input"]
    );
    let values: Vec<(String, String)> = server
        .ok(&format!("/metrics?{EVERY_TIME}&names=vcc"))
        .data
        .iter()
        .map(|record| {
            (
                record["unit_serial"].as_str().unwrap().to_owned(),
                record["value"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut sorted = values.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            ("SN-ERR-003".to_owned(), "3.31".to_owned()),
            ("SN-FAIL-002".to_owned(), "3.9".to_owned()),
            ("SN-PASS-001".to_owned(), "3.3".to_owned()),
        ]
    );
}

#[test]
fn a_cursor_walk_over_openhtf_records_returns_each_once_in_order() {
    let server = &shared().server;
    for (kind, extra) in [
        (Kind::Units, "&direction=input,output"),
        (Kind::Metrics, ""),
    ] {
        let mut walked = Vec::new();
        let mut query = format!("{}?{EVERY_TIME}{extra}&limit=3", kind.path());
        loop {
            let page = server.ok(&query);
            walked.extend(page.data.iter().cloned());
            match page.cursor() {
                Some(cursor) => {
                    query = format!(
                        "{}?{EVERY_TIME}{extra}&limit=3&cursor={}",
                        kind.path(),
                        percent_encode(&cursor)
                    );
                }
                None => break,
            }
        }
        assert_records(&walked, &expected(kind), "a walk of limit=3");
    }
}

#[test]
fn a_bad_openhtf_file_is_line_1_under_on_invalid() {
    let mut files = files();
    files.push(FileSpec::plain(
        "line-b/no-dut.openhtf.json",
        r#"{"station_id":"ST-OHTF-B","start_time_millis":0,"end_time_millis":0}"#,
    ));
    let fixture = Fixture::from_files(&files);
    let bad = path_string(&fixture.snapshots.join("line-b/no-dut.openhtf.json"));
    let line = format!("{bad}:1: missing field `dut_id`");

    let output = check_snapshots(&fixture.snapshots);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains(&line), "{stdout}");
    let passing = path_string(&fixture.snapshots.join("line-a/passing.openhtf.json"));
    assert!(
        stdout.contains(&format!(
            "{passing}: 2 unit records, 14 metric records, 0 invalid"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "{bad}: 0 unit records, 0 metric records, 1 invalid"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("5 files, 25 records (7 units, 18 metrics), 2 stations, 1 invalid lines"),
        "{stdout}"
    );

    match Server::try_spawn(&serve_args(&fixture.snapshots, &fixture.tokens, &[]), &[]) {
        Started::Ready(_) => panic!("a server started on an invalid OpenHTF file"),
        Started::Exited(code, log) => {
            assert_eq!(code, Some(1), "{log}");
            assert!(log.contains(&line), "{log}");
        }
    }

    let server = Server::start(&fixture, &["--on-invalid", "skip"]);
    assert_eq!(server.readiness()["skipped_lines"], 1);
    let page = server.ok(&format!("/units?{EVERY_TIME}&direction=input,output"));
    assert_records(&page.data, &expected(Kind::Units), "the good files, skip");
}
