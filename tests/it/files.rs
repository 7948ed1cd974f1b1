//! CONTRACT revision 4, section 8 (issue 34): the admin listener's `GET /files`,
//! one object per snapshot file in path order with what the generation serves of
//! it and what its last read found, exact for every kind of file and after a
//! reload; no token needed, and not on the API listener.

use std::path::Path;

use crate::common::*;
use serde_json::{json, Value};

const UNIT: &str = r#"{"station_id":"ST-01","unit_serial":"SN-1","time_created":"2024-03-10T10:00:00Z","direction":"input"}"#;
const METRIC: &str =
    r#"{"station_id":"ST-02","name":"vbat","value":3.3,"time_created":"2024-03-10T10:00:01Z"}"#;
const BROKEN: &str = r#"{"station_id":"ST-01","time_created":"2024-03-10T10:00:02Z"}"#;

/// The size of the file at `path`, as stored.
fn size(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

/// The file objects of `/files` by position, without `errors` (checked apart).
fn without_errors(listed: &Value) -> Vec<Value> {
    let files = listed["files"].as_array().expect("a files array");
    (files.iter())
        .map(|file| {
            let mut file = file.clone();
            file.as_object_mut().unwrap().remove("errors");
            file
        })
        .collect()
}

#[test]
fn issue_34_files_lists_every_file_exactly_also_after_a_reload() {
    let openhtf = std::fs::read(format!(
        "{}/tests/openhtf/records/passing.openhtf.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let (directory, snapshots, tokens) = write_snapshot(&[
        FileSpec::plain("a.units.jsonl", format!("{UNIT}\n{BROKEN}\n{UNIT}\n")),
        // The last line is half written: pending.
        FileSpec::plain(
            "b.metrics.jsonl",
            format!("{METRIC}\n{METRIC}\n{{\"station_id\""),
        ),
        FileSpec::gz("c/d.units.jsonl.gz", format!("{UNIT}\n"), &[]),
    ]);
    std::fs::write(snapshots.join("e.openhtf.json"), &openhtf).unwrap();
    let fixture = Fixture {
        directory,
        snapshots,
        tokens,
        records: Vec::new(),
        now: now_seconds(),
    };
    let path = |relative: &str| fixture.snapshots.join(relative);
    let server = Server::start(&fixture, &["--on-invalid", "skip"]);
    let listed = server.admin_files();
    let ready = server.readiness();
    let openhtf_records = ready["units"].as_u64().unwrap() + ready["metrics"].as_u64().unwrap() - 5;
    assert!(openhtf_records > 2, "{ready}");
    let object = |relative: &str, kind: &str, records: u64, skipped: u64, pending: u64| {
        json!({
            "path": relative,
            "kind": kind,
            "state": "loaded",
            "bytes": size(&path(relative)),
            "records": records,
            "skipped_lines": skipped,
            "pending_lines": pending,
        })
    };
    assert_eq!(
        without_errors(&listed),
        [
            object("a.units.jsonl", "units", 2, 1, 0),
            object("b.metrics.jsonl", "metrics", 2, 0, 1),
            object("c/d.units.jsonl.gz", "units", 1, 0, 0),
            object("e.openhtf.json", "openhtf", openhtf_records, 0, 0),
        ],
        "{listed}"
    );
    let broken_line = format!("{}:2: ", path_string(&path("a.units.jsonl")));
    let errors = |listed: &Value| -> Vec<Vec<String>> {
        (listed["files"].as_array().unwrap().iter())
            .map(|file| {
                (file["errors"].as_array().unwrap().iter())
                    .map(|line| line.as_str().unwrap().to_owned())
                    .collect()
            })
            .collect()
    };
    let found = errors(&listed);
    assert!(
        found[0].len() == 1
            && found[0][0].starts_with(&broken_line)
            && found[0][0].len() > broken_line.len(),
        "{listed}"
    );
    assert!(found[1..].iter().all(Vec::is_empty), "{listed}");

    // No token, and only on the admin listener.
    assert_eq!(server.get("/files", Some(OPS)).status, 404);

    // A line appended to the first file, the second's last line finished: the
    // reload reads on from where each ended, and `/files` follows.
    use std::io::Write as _;
    let mut first = std::fs::OpenOptions::new()
        .append(true)
        .open(path("a.units.jsonl"))
        .unwrap();
    first.write_all(format!("{UNIT}\n").as_bytes()).unwrap();
    std::fs::write(
        path("b.metrics.jsonl"),
        format!("{METRIC}\n{METRIC}\n{METRIC}\n"),
    )
    .unwrap();
    server.signal("HUP");
    server.wait_for_generation_after(1);
    let listed = server.admin_files();
    assert_eq!(
        without_errors(&listed),
        [
            object("a.units.jsonl", "units", 3, 1, 0),
            object("b.metrics.jsonl", "metrics", 3, 0, 0),
            object("c/d.units.jsonl.gz", "units", 1, 0, 0),
            object("e.openhtf.json", "openhtf", openhtf_records, 0, 0),
        ],
        "{listed}"
    );
    assert_eq!(
        errors(&listed),
        found,
        "the grown file keeps its skipped line's error"
    );
}
