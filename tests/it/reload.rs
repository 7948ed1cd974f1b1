//! CONTRACT section 8, operations: the probes `/healthz` and `/readyz`, hot reload
//! of the snapshot directory and the tokens file on SIGHUP and with `--watch`, and
//! what generations promise: a failed reload keeps the old one serving and logs each
//! `path:line: reason`, a request is answered from one whole generation even while
//! reloads run under load, and a cursor does not cross from one to the next. Last,
//! a stop signal (SIGTERM, SIGINT) lets a large in-flight response finish.
//!
//! Each test starts its own `common::Server`, whose `signal` reaches the server's
//! own process id (not its shell wrapper's). Reloads take time: tests poll
//! `/readyz` for the next generation (or stderr for `reload failed`) instead of
//! sleeping.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use crate::common::*;
use serde_json::Value;

// ---------------------------------------------------------------------------
// Snapshot files
// ---------------------------------------------------------------------------

/// Where the test records start: inside the suite's 2024 window.
pub(crate) const BASE_TIME: &str = "2024-03-10T10:00:00Z";

pub(crate) fn base_seconds() -> i64 {
    (instant(BASE_TIME) / SECOND) as i64
}

/// An output unit record of `station` at `BASE_TIME + offset_seconds`.
pub(crate) fn unit_line(station: &str, serial: &str, offset_seconds: i64) -> String {
    format!(
        r#"{{"station_id":"{station}","unit_serial":"{serial}","time_created":"{}","unit_type":"PCB","direction":"output"}}"#,
        rfc3339_from_seconds(base_seconds() + offset_seconds)
    )
}

/// JSON Lines text of `lines`, each ended by `\n`.
pub(crate) fn lines(lines: &[String]) -> String {
    lines.iter().map(|line| format!("{line}\n")).collect()
}

/// Every output unit record of the 2024 window, as `ops`.
fn all_units() -> String {
    format!("/units?{WINDOW}")
}

/// What the API must answer for `query` over exactly `files`.
fn reference(files: &[FileSpec], query: &Query) -> Vec<Value> {
    Fixture::from_files(files).expect(query)
}

/// A fixture on disk without reference records, for files the reference loader
/// cannot or need not read (invalid lines, a large file).
pub(crate) fn unchecked_fixture(files: &[FileSpec]) -> Fixture {
    let (directory, snapshots, tokens) = write_snapshot(files);
    Fixture {
        directory,
        snapshots,
        tokens,
        records: Vec::new(),
        now: now_seconds(),
    }
}

/// Writes `text` beside the snapshot directory, then renames it to `target`, so
/// that a reader sees either no file or the whole file.
pub(crate) fn write_by_rename(fixture: &Fixture, target: &Path, text: &str) {
    let staging = fixture.directory.path().join(format!(
        "staging-{}",
        target.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&staging, text).unwrap();
    std::fs::rename(&staging, target).unwrap();
}

pub(crate) fn append(path: &Path, text: &str) {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

/// Three records of ST-01 and one of ST-02.
pub(crate) fn small_files() -> Vec<FileSpec> {
    vec![FileSpec::plain(
        "first.units.jsonl",
        lines(&[
            unit_line("ST-01", "SN-A1", 0),
            unit_line("ST-02", "SN-A2", 60),
            unit_line("ST-01", "SN-A3", 120),
            unit_line("ST-01", "SN-A4", 180),
        ]),
    )]
}

/// A tokens file with `(token, stations)` entries (`None` = `"*"`).
pub(crate) fn tokens_file(entries: &[(&str, Option<&[&str]>)]) -> String {
    let tokens: Vec<Value> = entries
        .iter()
        .enumerate()
        .map(|(index, (token, stations))| {
            serde_json::json!({
                "name": format!("token-{index}"),
                "sha256": sha256_hex(token),
                "stations": match stations {
                    None => Value::String("*".into()),
                    Some(stations) => serde_json::json!(stations),
                },
            })
        })
        .collect();
    serde_json::json!({ "tokens": tokens }).to_string()
}

// ---------------------------------------------------------------------------
// 1. Probes
// ---------------------------------------------------------------------------

#[test]
fn probes_answer_without_a_token_in_their_exact_shapes() {
    let fixture = Fixture::main();
    let started_at = now_seconds();
    let server = Server::start(&fixture, &[]);

    let stations: BTreeSet<&str> = fixture
        .records
        .iter()
        .map(|record| record.text("station_id"))
        .collect();
    let count = |kind: Kind| {
        fixture
            .records
            .iter()
            .filter(|record| record.kind == kind)
            .count() as u64
    };

    let health = server.get("/healthz", None);
    assert_eq!(health.status, 200, "{}", health.context());
    health.assert_json_content_type();
    health.request_id();
    assert_eq!(health.json(), serde_json::json!({"status": "ok"}));

    let ready = server.get("/readyz", None);
    assert_eq!(ready.status, 200, "{}", ready.context());
    ready.assert_json_content_type();
    ready.request_id();
    let body = ready.json();
    let loaded_at = body["loaded_at"]
        .as_str()
        .unwrap_or_else(|| panic!("{}: loaded_at is not a string", ready.context()))
        .to_string();
    assert_eq!(
        body,
        serde_json::json!({
            "status": "ready",
            "generation": 1,
            "loaded_at": loaded_at,
            "units": count(Kind::Units),
            "metrics": count(Kind::Metrics),
            "stations": stations.len(),
            "skipped_lines": 0,
            "pending_lines": 0,
            "held_files": 0,
            // Issue 32: `STQ_TEST_STORE` gives every server a store.
            "store": match std::env::var_os("STQ_TEST_STORE") {
                Some(_) => "ok",
                None => "off",
            },
        }),
        "{}",
        ready.context()
    );
    let parsed = chrono::DateTime::parse_from_rfc3339(&loaded_at)
        .unwrap_or_else(|error| panic!("loaded_at {loaded_at:?} is not RFC 3339: {error}"));
    let loaded_seconds = parsed.timestamp();
    assert!(
        started_at - 1 <= loaded_seconds && loaded_seconds <= now_seconds() + 1,
        "loaded_at {loaded_at} is not the time of the load (started {started_at})"
    );

    for response in [&health, &ready] {
        for station in &stations {
            assert!(
                !response.body.contains(station),
                "{}: lists station {station}",
                response.context()
            );
        }
    }

    // A token changes nothing; a wrong method is a 405 like on the API.
    assert_eq!(server.get("/readyz", Some(OPS)).json(), body);
    for path in ["/healthz", "/readyz"] {
        let head = server.request("HEAD", path, &[]);
        assert_eq!(head.status, 200, "{}", head.context());
        assert!(head.body.is_empty(), "{}", head.context());
        head.request_id();
        for method in ["POST", "PUT", "DELETE"] {
            let refused = server.request(method, path, &[]);
            assert_eq!(refused.error(405, "method_not_allowed"), Value::Null);
            assert_eq!(
                refused.header("allow"),
                Some("GET, HEAD"),
                "{}",
                refused.context()
            );
        }
    }
}

// ---------------------------------------------------------------------------
// 2. SIGHUP: new data
// ---------------------------------------------------------------------------

#[test]
fn sighup_serves_an_added_snapshot_file() {
    let mut files = small_files();
    let fixture = Fixture::from_files(&files);
    let server = Server::start(&fixture, &[]);
    let before = server.readiness();
    assert_eq!(generation_of(&before), 1);
    assert_eq!(before["units"], 4);
    assert_eq!(before["stations"], 2);
    let query = Query::units();
    assert_records(
        &server.ok(&all_units()).data,
        &reference(&files, &query),
        "generation 1",
    );

    // New records before, between and after the old ones, and a new station.
    let added = FileSpec::plain(
        "nested/second.units.jsonl",
        lines(&[
            unit_line("ST-05", "SN-B1", -60),
            unit_line("ST-01", "SN-B2", 90),
            unit_line("ST-05", "SN-B3", 600),
        ]),
    );
    write_files(&fixture.snapshots, std::slice::from_ref(&added));
    files.push(added);
    server.signal("HUP");

    let after = server.wait_for_generation_after(1);
    assert_eq!(generation_of(&after), 2, "{after}");
    assert_eq!(after["units"], 7, "{after}");
    assert_eq!(after["metrics"], 0, "{after}");
    assert_eq!(after["stations"], 3, "{after}");
    assert_eq!(after["skipped_lines"], 0, "{after}");
    assert!(
        instant(after["loaded_at"].as_str().unwrap())
            >= instant(before["loaded_at"].as_str().unwrap()),
        "loaded_at went back: {before} then {after}"
    );
    let expected = reference(&files, &query);
    assert_eq!(expected.len(), 7);
    assert_records(&server.ok(&all_units()).data, &expected, "generation 2");
    assert_records(
        &server
            .ok(&format!("{}&station_ids=ST-05", all_units()))
            .data,
        &reference(&files, &query.stations(&["ST-05"])),
        "generation 2, the new station",
    );
}

// ---------------------------------------------------------------------------
// 3. A failed reload
// ---------------------------------------------------------------------------

/// Issue 21 (CONTRACT revision 3, section 8): a reload under `fail` that meets an
/// invalid line holds back that file alone. It keeps serving what it served (not
/// the valid line after the broken one), every other file advances, the line is
/// logged as `path:line: reason`, `/readyz` and the admin metrics count the held
/// file, and it is released once it reads cleanly.
#[test]
fn issue_21_a_broken_line_holds_back_its_file_alone() {
    let mut files = small_files();
    files.push(FileSpec::plain(
        "other.units.jsonl",
        lines(&[unit_line("ST-03", "SN-O1", 30)]),
    ));
    let fixture = Fixture::from_files(&files);
    let server = Server::start(&fixture, &[]);
    assert_eq!(server.readiness()["held_files"], 0);

    // Line 5 of the first file: a time that is not a date-time; line 6 is valid.
    let broken_path = fixture.snapshots.join("first.units.jsonl");
    append(
        &broken_path,
        r#"{"station_id":"ST-01","unit_serial":"SN-BAD","time_created":"yesterday","direction":"output"}"#,
    );
    append(&broken_path, "\n");
    append(&broken_path, &lines(&[unit_line("ST-01", "SN-AFTER", 200)]));
    // The other file advances.
    let grown = lines(&[unit_line("ST-03", "SN-O2", 90)]);
    append(&fixture.snapshots.join("other.units.jsonl"), &grown);
    files[1].text.push_str(&grown);
    server.signal("HUP");
    let after = server.wait_for_generation_after(1);
    assert_eq!(
        (&after["generation"], &after["held_files"], &after["units"]),
        (&2.into(), &1.into(), &6.into()),
        "{after}"
    );
    assert_records(
        &server.ok(&all_units()).data,
        &reference(&files, &Query::units()),
        "the held file serves what it served, the other advances",
    );
    let location = format!("{}:5: ", path_string(&broken_path));
    server.wait_for_log("holding back 1 file(s)", 1);
    let log = server.log();
    assert!(
        log.iter().any(|line| line.contains("reload: ")
            && line
                .split_once(&location)
                .is_some_and(|(_, reason)| !reason.trim().is_empty())),
        "no `reload: {location}<reason>` line on stderr:\n{}",
        log.join("\n")
    );
    let metrics = scrape_admin(&server);
    assert!(metrics.contains("\nstq_held_files 1\n"), "{metrics}");
    assert!(
        metrics.contains("\nstq_reload_outcomes_total{outcome=\"held\"} 1\n"),
        "{metrics}"
    );

    // Written right by renaming a good file over it: released.
    let fixed_text = files[0].text.clone() + &unit_line("ST-01", "SN-FIX", 240) + "\n";
    write_by_rename(&fixture, &broken_path, &fixed_text);
    files[0] = FileSpec::plain("first.units.jsonl", fixed_text);
    server.signal("HUP");
    let after = server.wait_for_generation_after(2);
    assert_eq!(
        (&after["held_files"], &after["units"]),
        (&0.into(), &7.into()),
        "{after}"
    );
    assert_records(
        &server.ok(&all_units()).data,
        &reference(&files, &Query::units()),
        "after the fix",
    );
    let metrics = scrape_admin(&server);
    assert!(metrics.contains("\nstq_held_files 0\n"), "{metrics}");
    assert!(
        metrics.contains("\nstq_reload_outcomes_total{outcome=\"clean\"} 1\n"),
        "{metrics}"
    );
}

/// Issue 21 (CONTRACT revision 3, sections 2.1 and 8): files are held in every
/// form: a JSON Lines file replaced by one with an invalid line, a new one with an
/// invalid line, a gzip file replaced by a damaged one, and an OpenHTF record still
/// being written. Each serves what it served (nothing, if new) while a new valid
/// file advances, and all are released once they read cleanly.
#[test]
fn issue_21_held_files_in_every_form() {
    let gzipped = lines(&[unit_line("ST-05", "SN-G1", 10)]);
    let mut files = small_files();
    files.push(FileSpec::gz("packed.units.jsonl.gz", gzipped.clone(), &[]));
    let fixture = Fixture::from_files(&files);
    let server = Server::start(&fixture, &[]);
    let before = server.readiness();

    // The first file replaced: a valid line, then an invalid one.
    let replaced = lines(&[
        unit_line("ST-01", "SN-R1", 15),
        r#"{"station_id":"ST-01","time_created":"2024-03-10T10:00:20Z"}"#.to_string(),
    ]);
    write_by_rename(
        &fixture,
        &fixture.snapshots.join("first.units.jsonl"),
        &replaced,
    );
    // A new file with an invalid line.
    let new_broken = lines(&["{not json".to_string(), unit_line("ST-06", "SN-N1", 25)]);
    write_by_rename(
        &fixture,
        &fixture.snapshots.join("new.units.jsonl"),
        &new_broken,
    );
    // The gzip file replaced by one cut short.
    let mut damaged = gzip(lines(&[unit_line("ST-05", "SN-G2", 35)]).as_bytes());
    damaged.truncate(damaged.len() - 10);
    let packed_path = fixture.snapshots.join("packed.units.jsonl.gz");
    let staging = fixture.directory.path().join("staging.gz");
    std::fs::write(&staging, &damaged).unwrap();
    std::fs::rename(&staging, &packed_path).unwrap();
    // Half an OpenHTF record.
    let record = std::fs::read(format!(
        "{}/tests/openhtf/records/passing.openhtf.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let openhtf_path = fixture.snapshots.join("run.openhtf.json");
    std::fs::write(&openhtf_path, &record[..record.len() / 2]).unwrap();
    // And a new valid file, which advances.
    let added = FileSpec::plain(
        "valid.units.jsonl",
        lines(&[unit_line("ST-07", "SN-V1", 45)]),
    );
    write_by_rename(
        &fixture,
        &fixture.snapshots.join(&added.relative_path),
        &added.text,
    );
    files.push(added);

    server.signal("HUP");
    let after = server.wait_for_generation_after(1);
    assert_eq!(after["held_files"], 4, "{after}");
    assert_eq!(
        after["units"],
        before["units"].as_u64().unwrap() + 1,
        "{after}"
    );
    assert_eq!(after["skipped_lines"], 0, "{after}");
    assert_records(
        &server.ok(&all_units()).data,
        &reference(&files, &Query::units()),
        "held files serve what they served; the valid new file is served",
    );
    for path in [&packed_path, &openhtf_path] {
        server.wait_for_log(&format!("reload: {}:1: ", path_string(path)), 1);
    }

    // Each written whole: all released.
    files[0] = FileSpec::plain(
        "first.units.jsonl",
        lines(&[unit_line("ST-01", "SN-R1", 15)]),
    );
    write_by_rename(
        &fixture,
        &fixture.snapshots.join("first.units.jsonl"),
        &files[0].text,
    );
    let new_fixed = FileSpec::plain("new.units.jsonl", lines(&[unit_line("ST-06", "SN-N1", 25)]));
    write_by_rename(
        &fixture,
        &fixture.snapshots.join("new.units.jsonl"),
        &new_fixed.text,
    );
    files.push(new_fixed);
    let packed = FileSpec::gz(
        "packed.units.jsonl.gz",
        gzipped + &lines(&[unit_line("ST-05", "SN-G2", 35)]),
        &[],
    );
    std::fs::write(&staging, gzip(packed.text.as_bytes())).unwrap();
    std::fs::rename(&staging, &packed_path).unwrap();
    files[1] = packed;
    write_by_rename(
        &fixture,
        &openhtf_path,
        std::str::from_utf8(&record).unwrap(),
    );
    server.signal("HUP");
    let after = server.wait_for_generation_after(2);
    assert_eq!(after["held_files"], 0, "{after}");
    // Five JSON Lines units and the OpenHTF record's two (of 2026, outside the window).
    assert_eq!(after["units"], 7, "{after}");
    assert_records(
        &server.ok(&all_units()).data,
        &reference(&files, &Query::units()),
        "after every file was written whole",
    );
}

/// Issue 34 (CONTRACT revision 4, sections 2 and 8): under `--on-invalid hold`, a
/// file with an invalid line at start-up is held: stq starts with every other file,
/// serves none of the held file's records, logs the line as `path:line: reason`,
/// and counts the file in `/readyz`, the admin metrics and `/files`. Written right,
/// it is released at the next reload; broken again at a reload, it is held back as
/// under `fail`, serving what it served.
#[test]
fn issue_34_on_invalid_hold_starts_with_every_healthy_file() {
    let mut files = small_files();
    let broken_text = lines(&[
        unit_line("ST-05", "SN-H1", 20),
        r#"{"station_id":"ST-05","unit_serial":"SN-BAD","time_created":"after the power cut","direction":"output"}"#.to_owned(),
        unit_line("ST-05", "SN-H2", 40),
    ]);
    let fixture = unchecked_fixture(&[
        FileSpec::plain("first.units.jsonl", files[0].text.clone()),
        FileSpec::plain("line-5.units.jsonl", broken_text),
    ]);
    let broken_path = fixture.snapshots.join("line-5.units.jsonl");
    let server = Server::start(&fixture, &["--on-invalid", "hold"]);
    let ready = server.readiness();
    assert_eq!(
        (
            &ready["held_files"],
            &ready["units"],
            &ready["skipped_lines"],
            &ready["stations"]
        ),
        (&1.into(), &4.into(), &0.into(), &2.into()),
        "{ready}"
    );
    assert_records(
        &server.ok(&all_units()).data,
        &reference(&files, &Query::units()),
        "every record of the healthy file, none of the held one",
    );
    let location = format!("{}:2: ", path_string(&broken_path));
    server.wait_for_log("holding 1 file(s)", 1);
    assert!(
        server.log().iter().any(|line| line
            .split_once(&location)
            .is_some_and(|(_, reason)| !reason.trim().is_empty())),
        "no `{location}<reason>` line on stderr:\n{}",
        server.log().join("\n")
    );
    assert!(scrape_admin(&server).contains("\nstq_held_files 1\n"));
    let listed = server.admin_files();
    let held = &listed["files"][1];
    assert_eq!(
        (&held["path"], &held["state"], &held["records"]),
        (&"line-5.units.jsonl".into(), &"held".into(), &0.into()),
        "{listed}"
    );
    let errors = held["errors"].as_array().unwrap();
    assert!(
        errors.len() == 1 && errors[0].as_str().unwrap().starts_with(&location),
        "{listed}"
    );
    assert_eq!(listed["files"][0]["state"], "loaded", "{listed}");

    // Written right: released.
    let fixed = FileSpec::plain(
        "line-5.units.jsonl",
        lines(&[
            unit_line("ST-05", "SN-H1", 20),
            unit_line("ST-05", "SN-H2", 40),
        ]),
    );
    write_by_rename(&fixture, &broken_path, &fixed.text);
    files.push(fixed);
    server.signal("HUP");
    let after = server.wait_for_generation_after(1);
    assert_eq!(
        (&after["held_files"], &after["units"]),
        (&0.into(), &6.into()),
        "{after}"
    );
    assert_records(
        &server.ok(&all_units()).data,
        &reference(&files, &Query::units()),
        "after the fix",
    );
    assert_eq!(server.admin_files()["files"][1]["state"], "loaded");

    // Broken again at a reload: held back, serving what it served.
    append(&broken_path, "{not json\n");
    server.signal("HUP");
    let after = server.wait_for_generation_after(2);
    assert_eq!(
        (&after["held_files"], &after["units"]),
        (&1.into(), &6.into()),
        "{after}"
    );
    assert_records(
        &server.ok(&all_units()).data,
        &reference(&files, &Query::units()),
        "held back at a reload",
    );
    let held = &server.admin_files()["files"][1];
    assert_eq!(
        (&held["state"], &held["records"]),
        (&"held".into(), &2.into()),
        "{held}"
    );
}

/// The admin listener's exposition.
fn scrape_admin(server: &Server) -> String {
    let agent = ureq::AgentBuilder::new().build();
    let response = call(&agent, "GET", &server.metrics_url(), &[]);
    assert_eq!(response.status, 200, "{}", response.body);
    response.body
}

// ---------------------------------------------------------------------------
// 4. Tokens
// ---------------------------------------------------------------------------

#[test]
fn sighup_reloads_the_tokens_file() {
    const NEW: &str = "tok-new-0001";
    let files = small_files();
    let fixture = Fixture::from_files(&files);
    let server = Server::start(&fixture, &[]);
    let station_01 = format!("{}&station_ids=ST-01", all_units());
    server.get(&station_01, Some(OPS2)).ok();
    server
        .get(&station_01, Some(NEW))
        .error(401, "unauthorized");

    // ops-2 removed, a new token for ST-01 only.
    let replacement = tokens_file(&[(OPS, None), (NEW, Some(&["ST-01"]))]);
    write_by_rename(&fixture, &fixture.tokens, &replacement);
    server.signal("HUP");
    let after = server.wait_for_generation_after(1);
    assert_eq!(generation_of(&after), 2, "{after}");

    let check_tokens = |when: &str| {
        assert_records(
            &server.get(&station_01, Some(NEW)).ok().data,
            &reference(&files, &Query::units().stations(&["ST-01"])),
            &format!("{when}: the new token"),
        );
        // Its scope came with it.
        let details = server
            .get(&format!("{}&station_ids=ST-02", all_units()), Some(NEW))
            .error(403, "forbidden");
        assert_eq!(
            details,
            serde_json::json!({"stations": ["ST-02"]}),
            "{when}"
        );
        assert_records(
            &server.get(&all_units(), Some(NEW)).ok().data,
            &reference(&files, &Query::units().scope(&["ST-01"])),
            &format!("{when}: the new token without station_ids"),
        );
        server
            .get(&station_01, Some(OPS2))
            .error(401, "unauthorized");
        server.get(&station_01, Some(OPS)).ok();
    };
    check_tokens("after the reload");

    // A broken tokens file fails the reload and keeps the tokens in force.
    std::fs::write(&fixture.tokens, r#"{"tokens": [{"name": "#).unwrap();
    server.reload_expecting_failure();
    assert_eq!(server.generation(), 2);
    check_tokens("after a failed reload");
}

// ---------------------------------------------------------------------------
// 5. Reloads under load
// ---------------------------------------------------------------------------

/// How many answers of each set a request thread saw, and what else it saw.
#[derive(Default)]
struct Tally {
    set_a: usize,
    set_b: usize,
    failures: Vec<String>,
    failure_count: usize,
}

/// `GET url` as `ops` without panicking: the `data` of a 200, or what went wrong.
fn fetch_data(agent: &ureq::Agent, url: &str) -> Result<Vec<Value>, String> {
    let response = match agent
        .get(url)
        .set("Authorization", &format!("Bearer {OPS}"))
        .call()
    {
        Ok(response) => response,
        Err(ureq::Error::Status(status, response)) => {
            let body = response.into_string().unwrap_or_default();
            return Err(format!("status {status}: {body}"));
        }
        Err(error) => return Err(format!("transport error: {error}")),
    };
    let body = response
        .into_string()
        .map_err(|error| format!("body: {error}"))?;
    let value: Value =
        serde_json::from_str(&body).map_err(|error| format!("not JSON ({error}): {body}"))?;
    value["data"]
        .as_array()
        .cloned()
        .ok_or_else(|| format!("no data array: {body}"))
}

/// Sets the flag when dropped, also while a panic unwinds.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Reloads done while requests run, one after another.
const RELOADS_UNDER_LOAD: usize = 12;

#[test]
fn requests_during_reloads_see_one_whole_generation() {
    // Set A: a1..a50 of ST-01; set B: the same file plus b1..b50 in between them.
    let series = |prefix: &str, relative_path: &str, offset: i64| {
        let records: Vec<String> = (1..=50)
            .map(|index| unit_line("ST-01", &format!("{prefix}{index}"), index * 120 + offset))
            .collect();
        FileSpec::plain(relative_path, lines(&records))
    };
    let set_a = [series("a", "a.units.jsonl", 0)];
    let set_b = [
        series("a", "a.units.jsonl", 0),
        series("b", "b.units.jsonl", 60),
    ];
    let path = format!("{}&station_ids=ST-01", all_units());
    let query = Query::units().stations(&["ST-01"]);
    let expected_a = reference(&set_a, &query);
    let expected_b = reference(&set_b, &query);
    assert_eq!((expected_a.len(), expected_b.len()), (50, 100));

    let fixture = Fixture::from_files(&set_a);
    // B's file waits beside the snapshot directory; a rename moves it in or out whole.
    let inside: PathBuf = fixture.snapshots.join("b.units.jsonl");
    let outside: PathBuf = fixture.directory.path().join("b.units.jsonl.stash");
    std::fs::write(&outside, &set_b[1].text).unwrap();
    let server = Server::start(&fixture, &["--workers", "4"]);
    let url = server.url(&path);

    let stop = AtomicBool::new(false);
    let mut reloads = 0;
    let tallies: Vec<Tally> = thread::scope(|scope| {
        let requesters: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    let agent = ureq::AgentBuilder::new()
                        .timeout(Duration::from_secs(30))
                        .build();
                    let mut tally = Tally::default();
                    while !stop.load(Ordering::SeqCst) {
                        match fetch_data(&agent, &url) {
                            Ok(data) if data == expected_a => tally.set_a += 1,
                            Ok(data) if data == expected_b => tally.set_b += 1,
                            Ok(data) => {
                                tally.failure_count += 1;
                                let serials = serials(&data);
                                tally
                                    .failures
                                    .push(format!("a mix of {} records: {serials:?}", data.len()));
                            }
                            Err(error) => {
                                tally.failure_count += 1;
                                tally.failures.push(error);
                            }
                        }
                        tally.failures.truncate(5);
                    }
                    tally
                })
            })
            .collect();

        let stop_requesters = SetOnDrop(&stop);
        let mut generation = 1;
        let mut serving_b = false;
        while reloads < RELOADS_UNDER_LOAD {
            if serving_b {
                std::fs::rename(&inside, &outside).unwrap();
            } else {
                std::fs::rename(&outside, &inside).unwrap();
            }
            serving_b = !serving_b;
            server.signal("HUP");
            let readiness = server.wait_for_generation_after(generation);
            assert_eq!(generation_of(&readiness), generation + 1, "{readiness}");
            let units = if serving_b { 100 } else { 50 };
            assert_eq!(readiness["units"], units, "{readiness}");
            generation += 1;
            reloads += 1;
            // Pacing, not waiting for anything: the requesters run between reloads.
            thread::sleep(Duration::from_millis(150));
        }
        drop(stop_requesters);
        requesters
            .into_iter()
            .map(|requester| requester.join().expect("request thread panicked"))
            .collect()
    });

    let set_a: usize = tallies.iter().map(|tally| tally.set_a).sum();
    let set_b: usize = tallies.iter().map(|tally| tally.set_b).sum();
    let failure_count: usize = tallies.iter().map(|tally| tally.failure_count).sum();
    let failures: Vec<&String> = tallies.iter().flat_map(|tally| &tally.failures).collect();
    eprintln!("{reloads} reloads; answers: {set_a} of set A, {set_b} of set B");
    assert_eq!(
        failure_count, 0,
        "{failure_count} answers were neither set A nor set B (of {} in all, {reloads} reloads); first ones: {failures:#?}",
        set_a + set_b + failure_count
    );
    assert!(
        set_a > 0 && set_b > 0,
        "both sets must have been served: {set_a} of A, {set_b} of B"
    );
}

// ---------------------------------------------------------------------------
// 6. Cursors
// ---------------------------------------------------------------------------

/// Issue 11 (CONTRACT revision 2, section 6): a cursor names its last record by
/// instant, station, file and line, so a walk goes on across a reload from where
/// that record sorts in the new data, even when the record itself is gone.
#[test]
fn issue_11_a_cursor_continues_after_its_record_across_a_reload() {
    let files = small_files();
    let fixture = Fixture::from_files(&files);
    let server = Server::start(&fixture, &[]);
    let path = format!("{}&limit=2", all_units());
    let first = server.ok(&path);
    assert_eq!(serials(&first.data), ["SN-A1", "SN-A2"]);
    // It names SN-A2: ST-02, first.units.jsonl, line 2, at 60 s.
    let cursor = first.cursor().expect("page 1 has a next_cursor");

    // SN-A2 goes; SN-N1 comes; a file that sorts before first.units.jsonl holds a
    // record at SN-A2's instant and station (before it in the order) and one of a
    // station after it (after it).
    let rewritten = lines(&[
        unit_line("ST-01", "SN-A1", 0),
        unit_line("ST-01", "SN-A3", 120),
        unit_line("ST-01", "SN-A4", 180),
        unit_line("ST-01", "SN-N1", 90),
    ]);
    write_by_rename(
        &fixture,
        &fixture.snapshots.join("first.units.jsonl"),
        &rewritten,
    );
    let early = lines(&[
        unit_line("ST-02", "SN-E1", 60),
        unit_line("ST-03", "SN-E2", 60),
    ]);
    write_by_rename(
        &fixture,
        &fixture.snapshots.join("0-early.units.jsonl"),
        &early,
    );
    server.signal("HUP");
    let after = server.wait_for_generation_after(1);
    assert_eq!(after["units"], 6, "{after}");

    let mut rest = Vec::new();
    let mut next = Some(cursor);
    while let Some(cursor) = next {
        let page = server.ok(&format!("{path}&cursor={}", percent_encode(&cursor)));
        rest.extend(serials(&page.data));
        next = page.cursor();
    }
    assert_eq!(rest, ["SN-E2", "SN-N1", "SN-A3", "SN-A4"]);
}

// ---------------------------------------------------------------------------
// 7. --watch
// ---------------------------------------------------------------------------

/// The ways `--watch` sees changes: the system's notification, and (issue 34,
/// CONTRACT revision 4, section 8) a look at every file every second, forced on a
/// local directory as a network file system would choose it.
pub(crate) const WATCHES: [&[&str]; 2] = [&["--watch"], &["--watch", "--watch-poll", "1s"]];

/// A server started on `fixture` with the watch of `watch` (one of [`WATCHES`]),
/// which says in its log that it polls when it does.
pub(crate) fn start_watching(fixture: &Fixture, watch: &[&str]) -> Server {
    start_watching_with(fixture, watch, &[])
}

/// [`start_watching`], with extra environment variables.
pub(crate) fn start_watching_with(
    fixture: &Fixture,
    watch: &[&str],
    variables: &[(&str, &str)],
) -> Server {
    let server = Server::spawn(
        &serve_args(&fixture.snapshots, &fixture.tokens, watch),
        variables,
    );
    if watch.contains(&"--watch-poll") {
        server.wait_for_log("by a look at every file every 1s", 1);
    }
    server
}

#[test]
fn watch_reloads_changed_files_without_a_signal() {
    watch_reloads_changed_files(WATCHES[0]);
}

/// Issue 34: as [`watch_reloads_changed_files_without_a_signal`], polling.
#[test]
fn issue_34_watch_poll_reloads_changed_files_without_a_signal() {
    watch_reloads_changed_files(WATCHES[1]);
}

fn watch_reloads_changed_files(watch: &[&str]) {
    const NEW: &str = "tok-watch-0001";
    let mut files = small_files();
    let fixture = Fixture::from_files(&files);
    let server = start_watching(&fixture, watch);
    assert_eq!(server.generation(), 1);

    let added = FileSpec::plain(
        "second.units.jsonl",
        lines(&[unit_line("ST-07", "SN-W1", 30)]),
    );
    write_by_rename(
        &fixture,
        &fixture.snapshots.join(&added.relative_path),
        &added.text,
    );
    files.push(added);
    let after_file = server.wait_for_generation_after(1);
    assert_eq!(after_file["units"], 5, "{after_file}");
    assert_eq!(after_file["stations"], 3, "{after_file}");
    assert_records(
        &server.ok(&all_units()).data,
        &reference(&files, &Query::units()),
        "after the new file",
    );

    // The tokens file is watched too.
    server
        .get(&all_units(), Some(NEW))
        .error(401, "unauthorized");
    write_by_rename(
        &fixture,
        &fixture.tokens,
        &tokens_file(&[(OPS, None), (NEW, None)]),
    );
    let after_tokens = server.wait_for_generation_after(generation_of(&after_file));
    server.get(&all_units(), Some(NEW)).ok();

    // Nothing changed since: the next reload is the one the next change causes, so
    // no reload came between (the tokens file, rewritten the same, is that change).
    write_by_rename(
        &fixture,
        &fixture.tokens,
        &tokens_file(&[(OPS, None), (NEW, None)]),
    );
    let after_rewrite = server.wait_for_generation_after(generation_of(&after_tokens));
    assert_eq!(
        generation_of(&after_rewrite),
        generation_of(&after_tokens) + 1,
        "a reload without a change came between"
    );
}

/// Issue 21 (CONTRACT revision 3, section 8): with `--watch`, lines are served while
/// writers keep appending without a pause. Two writers append a line every 20 ms,
/// to their own files, and never stop until the test has seen, three times over,
/// every line written up to a moment served while they went on writing. (The
/// landed watch waited for 300 ms of quiet and served none of them until the
/// writers stopped.)
#[test]
fn issue_21_watch_serves_lines_while_writers_never_pause() {
    watch_serves_lines_while_writers_never_pause(WATCHES[0]);
}

/// Issue 34 (CONTRACT revision 4, section 8): with a poll of 1 s, the same.
#[test]
fn issue_34_watch_poll_serves_lines_while_writers_never_pause() {
    watch_serves_lines_while_writers_never_pause(WATCHES[1]);
}

fn watch_serves_lines_while_writers_never_pause(watch: &[&str]) {
    let mut files = small_files();
    files.push(FileSpec::plain(
        "second.units.jsonl",
        lines(&[unit_line("ST-02", "SN-B0", 30)]),
    ));
    let fixture = Fixture::from_files(&files);
    let server = start_watching(&fixture, watch);
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writers: Vec<_> = [
        ("first.units.jsonl", "ST-01"),
        ("second.units.jsonl", "ST-02"),
    ]
    .into_iter()
    .enumerate()
    .map(|(writer, (file, station))| {
        let path = fixture.snapshots.join(file);
        let (stop, written) = (stop.clone(), written.clone());
        thread::spawn(move || {
            let mut text = String::new();
            let mut line = 0;
            while !stop.load(Ordering::SeqCst) {
                let serial = format!("SN-LIVE-{writer}-{line}");
                let appended = lines(&[unit_line(station, &serial, 600 + line as i64)]);
                append(&path, &appended);
                text.push_str(&appended);
                line += 1;
                written.fetch_add(1, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(20));
            }
            text
        })
    })
    .collect();
    let served =
        || -> BTreeSet<String> { serials(&server.ok(&all_units()).data).into_iter().collect() };
    for checkpoint in 0..3 {
        // Every line of both writers up to now, by its serial.
        let wanted = written.load(Ordering::SeqCst) / 2;
        let deadline = std::time::Instant::now() + RELOAD_TIMEOUT;
        loop {
            let seen = served();
            if (0..2).all(|writer| {
                (0..wanted).all(|line| seen.contains(&format!("SN-LIVE-{writer}-{line}")))
            }) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "checkpoint {checkpoint}: the first {wanted} lines of each writer were not \
                 served while the writers went on; stderr:\n{}",
                server.log().join("\n")
            );
            thread::sleep(Duration::from_millis(20));
        }
        assert!(!stop.load(Ordering::SeqCst));
        // The next checkpoint asks for lines written after this one was met.
        let met = written.load(Ordering::SeqCst);
        while written.load(Ordering::SeqCst) < met + 4 {
            thread::sleep(Duration::from_millis(5));
        }
    }
    stop.store(true, Ordering::SeqCst);
    for (writer, handle) in writers.into_iter().enumerate() {
        let text = handle.join().unwrap();
        files[writer].text.push_str(&text);
    }
    // Once they stop, everything they wrote is served, exactly.
    let expected = reference(&files, &Query::units());
    let deadline = std::time::Instant::now() + RELOAD_TIMEOUT;
    while server.ok(&all_units()).data.len() < expected.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "the last lines were not served"
        );
        thread::sleep(Duration::from_millis(20));
    }
    assert_records(
        &server.ok(&all_units()).data,
        &expected,
        "after the writers stopped",
    );
}

// ---------------------------------------------------------------------------
// 8. Stopping with a response in flight
// ---------------------------------------------------------------------------

const LARGE_COUNT: usize = 50_000;

/// `LARGE_COUNT` unit records of ST-01, one second apart, each padded so that the
/// whole response (about 20 MB) is larger than the socket buffers can hold.
fn large_units_file() -> String {
    let padding = "x".repeat(300);
    let base = base_seconds();
    let mut text = String::with_capacity(LARGE_COUNT * 480);
    for index in 0..LARGE_COUNT {
        writeln!(
            text,
            r#"{{"station_id":"ST-01","unit_serial":"SN-{index:06}","time_created":"{}","unit_type":"PCB","direction":"output","metadata":{{"note":"{padding}"}}}}"#,
            rfc3339_from_seconds(base + index as i64)
        )
        .unwrap();
    }
    text
}

/// Starts a request for every record, sends `signal` once the response has begun
/// (its headers arrived, most of the body not yet read), and expects the whole
/// response, then the process to exit.
fn stop_signal_lets_a_large_response_finish(signal: &str) {
    let fixture = unchecked_fixture(&[FileSpec::plain("large.units.jsonl", large_units_file())]);
    let server = Server::start(&fixture, &["--max-records", "100000"]);
    let url = server.url(&format!("{}&station_ids=ST-01", all_units()));

    let (headers_arrived, headers_received) = mpsc::channel();
    let (stopping_sender, stopping) = mpsc::channel::<()>();
    let request = thread::spawn(move || -> Result<(u16, Vec<u8>), String> {
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(60))
            .build();
        let response = agent
            .get(&url)
            .set("Authorization", &format!("Bearer {OPS}"))
            .call()
            .map_err(|error| format!("request: {error}"))?;
        let status = response.status();
        let _ = headers_arrived.send(());
        // The body is read only once the server has begun to stop, so most of it is
        // still unsent when it does.
        let _ = stopping.recv_timeout(Duration::from_secs(30));
        let mut body = Vec::new();
        let read = response.into_reader().read_to_end(&mut body);
        read.map_err(|error| format!("body cut after {} bytes: {error}", body.len()))?;
        Ok((status, body))
    });
    headers_received
        .recv_timeout(Duration::from_secs(30))
        .expect("the response did not begin within 30 s");
    server.signal(signal);
    server.wait_for_log("no new connections; finishing the requests in flight", 1);
    let _ = stopping_sender.send(());

    let outcome = request.join().expect("request thread panicked");
    let (status, body) = outcome.unwrap_or_else(|error| {
        panic!(
            "SIG{signal} cut the in-flight response: {error}; stderr:\n{}",
            server.log().join("\n")
        )
    });
    assert_eq!(status, 200);
    let envelope: Value = serde_json::from_slice(&body).unwrap_or_else(|error| {
        panic!(
            "SIG{signal}: the body ({} bytes) is not JSON: {error}",
            body.len()
        )
    });
    let data = envelope["data"].as_array().expect("data array");
    let expected: Vec<String> = (0..LARGE_COUNT)
        .map(|index| format!("SN-{index:06}"))
        .collect();
    assert_eq!(data.len(), LARGE_COUNT, "SIG{signal}: records received");
    assert!(
        serials(data) == expected,
        "SIG{signal}: records out of order"
    );

    let timeout = Duration::from_secs(15);
    let status = server.wait_for_exit(timeout).unwrap_or_else(|| {
        panic!(
            "stq still running {timeout:?} after the stop signal; stderr:\n{}",
            server.log().join("\n")
        )
    });
    assert!(
        status.success(),
        "SIG{signal}: stq exited with {status}; stderr:\n{}",
        server.log().join("\n")
    );
}

#[test]
fn sigterm_lets_a_large_in_flight_response_finish() {
    stop_signal_lets_a_large_response_finish("TERM");
}

#[test]
fn sigint_lets_a_large_in_flight_response_finish() {
    stop_signal_lets_a_large_response_finish("INT");
}

// ---------------------------------------------------------------------------
// --on-invalid skip on reload
// ---------------------------------------------------------------------------

#[test]
fn a_reload_with_on_invalid_skip_counts_and_logs_skipped_lines() {
    let mut files = small_files();
    files[0].text.push_str("{not json\n");
    let fixture = unchecked_fixture(&files);
    let server = Server::start(&fixture, &["--on-invalid", "skip"]);
    let before = server.readiness();
    assert_eq!(before["skipped_lines"], 1, "{before}");
    assert_eq!(before["units"], 4, "{before}");

    // Line 2 is invalid (direction missing), line 1 and 3 are new records.
    let added_path = fixture.snapshots.join("second.units.jsonl");
    let added_text = [
        unit_line("ST-01", "SN-S1", 30),
        r#"{"station_id":"ST-01","unit_serial":"SN-S2","time_created":"2024-03-10T10:01:00Z"}"#
            .to_string(),
        unit_line("ST-01", "SN-S3", 90),
    ]
    .join("\n");
    write_by_rename(&fixture, &added_path, &added_text);
    server.signal("HUP");
    let after = server.wait_for_generation_after(1);
    assert_eq!(generation_of(&after), 2, "{after}");
    assert_eq!(after["skipped_lines"], 2, "{after}");
    assert_eq!(after["units"], 6, "{after}");
    let got = serials(&server.ok(&all_units()).data);
    assert_eq!(
        got,
        ["SN-A1", "SN-S1", "SN-A2", "SN-S3", "SN-A3", "SN-A4"],
        "the valid lines of the new file are served"
    );

    // CONTRACT section 2: a skipped line is logged as `path:line: reason`.
    let location = format!("{}:2: ", path_string(&added_path));
    // The log is written by its own thread: the line may follow the swap.
    server.wait_for_log(&location, 1);
    let log = server.log();
    assert!(
        log.iter().any(|line| line
            .split_once(&location)
            .is_some_and(|(_, reason)| !reason.trim().is_empty())),
        "the reload skipped {location}... without logging it; stderr:\n{}",
        log.join("\n")
    );
}

/// Issue 12 (CONTRACT revision 2, section 8): a last line without its line end that
/// does not parse is pending, at start-up and at reload alike: not loaded, not
/// skipped, not a failure, counted in `/readyz`; once the writer ends it, the next
/// reload loads it.
#[test]
fn issue_12_an_unfinished_last_line_is_pending_until_it_ends() {
    let whole = unit_line("ST-01", "SN-P2", 60);
    let half = &whole[..whole.len() / 2];
    let files = vec![FileSpec::plain(
        "growing.units.jsonl",
        format!("{}\n{half}", unit_line("ST-01", "SN-P1", 0)),
    )];
    let fixture = Fixture::from_files(&files);
    // The default --on-invalid fail: a pending line does not stop the start.
    let server = Server::start(&fixture, &[]);
    let ready = server.readiness();
    assert_eq!(ready["units"], 1, "{ready}");
    assert_eq!(ready["pending_lines"], 1, "{ready}");
    assert_eq!(ready["skipped_lines"], 0, "{ready}");

    // Still unfinished at a reload: still pending, and the reload succeeds.
    server.signal("HUP");
    let ready = server.wait_for_generation_after(1);
    assert_eq!(ready["pending_lines"], 1, "{ready}");

    // The writer finishes the line: the next reload serves it.
    append(
        &fixture.snapshots.join("growing.units.jsonl"),
        &whole[whole.len() / 2..],
    );
    append(&fixture.snapshots.join("growing.units.jsonl"), "\n");
    server.signal("HUP");
    let ready = server.wait_for_generation_after(2);
    assert_eq!(ready["pending_lines"], 0, "{ready}");
    assert_eq!(ready["units"], 2, "{ready}");
    assert_eq!(serials(&server.ok(&all_units()).data), ["SN-P1", "SN-P2"]);
}

/// Issue 12 (CONTRACT section 8): SIGTERM during a reload abandons the reload
/// instead of waiting for it. The reload here can never end: its tokens file is a
/// named pipe no one writes, so reading it blocks. The server must still exit, and
/// never report the reload done.
#[test]
fn issue_12_sigterm_during_a_reload_abandons_it() {
    let fixture = Fixture::main();
    let server = Server::start(&fixture, &[]);
    let pipe = fixture.directory.path().join("tokens.fifo");
    let made = Command::new("mkfifo")
        .arg(&pipe)
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo failed");
    std::fs::rename(&pipe, &fixture.tokens).unwrap();
    server.signal("HUP");
    server.wait_for_log("SIGHUP: reloading", 1);

    server.signal("TERM");
    let status = server.wait_for_exit(Duration::from_secs(60));
    let log = server.log().join("\n");
    assert!(
        status.is_some_and(|status| status.success()),
        "stq did not stop during a reload ({status:?}); stderr:\n{log}"
    );
    assert!(!log.contains("reloaded: generation 2"), "{log}");
}

/// The counters of what the loads read: files, bytes, and reloads done.
fn read_counters(server: &Server) -> (f64, f64, f64) {
    let agent = ureq::AgentBuilder::new().build();
    let response = call(&agent, "GET", &server.metrics_url(), &[]);
    assert_eq!(response.status, 200, "{}", response.body);
    let value = |name: &str| {
        response
            .body
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .map_or(0.0, |value| value.parse().unwrap())
    };
    (
        value("stq_snapshot_files_read_total"),
        value("stq_snapshot_bytes_read_total"),
        value("stq_reloads_total"),
    )
}

/// Issue 12 (CONTRACT revision 2, section 8): with `--watch`, a line appended to a
/// snapshot file is served, and the reload reads only the change: the grown file
/// from where its last read ended, and not the file nobody touched.
#[test]
fn issue_12_watch_serves_an_appended_line_reading_only_the_change() {
    watch_serves_an_appended_line_reading_only_the_change(WATCHES[0]);
}

/// Issue 34: polling, the same; the looks between changes read nothing.
#[test]
fn issue_34_watch_poll_serves_an_appended_line_reading_only_the_change() {
    watch_serves_an_appended_line_reading_only_the_change(WATCHES[1]);
}

fn watch_serves_an_appended_line_reading_only_the_change(watch: &[&str]) {
    let untouched = FileSpec::plain(
        "other.units.jsonl",
        lines(&[unit_line("ST-03", "SN-O1", 30)]),
    );
    let mut files = small_files();
    files.push(untouched);
    let fixture = Fixture::from_files(&files);
    // It counts what the start reads: every file, from an empty store too.
    let server = start_watching_with(&fixture, watch, &[("STQ_TEST_COLD", "1")]);
    let (files_read, bytes_read, reloads) = read_counters(&server);
    let whole = files.iter().map(|file| file.text.len()).sum::<usize>() as f64;
    assert_eq!((files_read, bytes_read, reloads), (2.0, whole, 0.0));

    let appended = lines(&[unit_line("ST-01", "SN-W9", 240)]);
    append(&fixture.snapshots.join("first.units.jsonl"), &appended);
    files[0].text.push_str(&appended);
    let deadline = std::time::Instant::now() + RELOAD_TIMEOUT;
    while !serials(&server.ok(&all_units()).data).contains(&"SN-W9".to_owned()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the appended line was not served within {RELOAD_TIMEOUT:?}; stderr:\n{}",
            server.log().join("\n")
        );
        thread::sleep(Duration::from_millis(20));
    }
    assert_records(
        &server.ok(&all_units()).data,
        &reference(&files, &Query::units()),
        "after the append",
    );
    // The record is served once the catalog is swapped; the counters follow.
    let counters = loop {
        let counters = read_counters(&server);
        if counters.2 >= 1.0 {
            break counters;
        }
        assert!(std::time::Instant::now() < deadline, "no reload counted");
        thread::sleep(Duration::from_millis(20));
    };
    // Whatever number of reloads the watch made, only the appended line was read.
    assert_eq!(
        (counters.0 - files_read, counters.1 - bytes_read),
        (1.0, appended.len() as f64),
        "{}",
        server.log().join("\n")
    );
}

/// Issue 24: under systemd (`Type=notify`, `NOTIFY_SOCKET` set) stq says READY=1
/// once it is bound, RELOADING=1 and then READY=1 around a reload SIGHUP asked for
/// (`systemctl reload`), and STOPPING=1 when SIGTERM begins the stop. The socket
/// here stands in for systemd's.
#[test]
fn issue_24_systemd_hears_ready_reloading_and_stopping() {
    use std::os::unix::net::UnixDatagram;

    let fixture = Fixture::main();
    let socket_path = fixture.directory.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let next = || {
        let mut buffer = [0u8; 4096];
        let length = socket
            .recv(&mut buffer)
            .expect("a message on NOTIFY_SOCKET");
        String::from_utf8(buffer[..length].to_vec()).unwrap()
    };
    let server = Server::spawn(
        &serve_args(&fixture.snapshots, &fixture.tokens, &[]),
        &[("NOTIFY_SOCKET", &path_string(&socket_path))],
    );

    let ready = next();
    assert!(ready.lines().any(|line| line == "READY=1"), "{ready:?}");
    assert!(ready.contains("STATUS=serving generation 1: "), "{ready:?}");
    // Ready means answering.
    assert_eq!(server.generation(), 1);

    server.signal("HUP");
    let reloading = next();
    assert!(
        reloading.lines().any(|line| line == "RELOADING=1"),
        "{reloading:?}"
    );
    assert!(
        reloading
            .lines()
            .any(|line| line.starts_with("MONOTONIC_USEC=")),
        "{reloading:?}"
    );
    let reloaded = next();
    assert!(
        reloaded.lines().any(|line| line == "READY=1"),
        "{reloaded:?}"
    );
    assert!(
        reloaded.contains("STATUS=serving generation 2: "),
        "{reloaded:?}"
    );
    assert_eq!(server.generation(), 2);

    server.signal("TERM");
    let stopping = next();
    assert!(
        stopping.lines().any(|line| line == "STOPPING=1"),
        "{stopping:?}"
    );
    let status = server.wait_for_exit(Duration::from_secs(30));
    assert!(status.is_some_and(|status| status.success()), "{status:?}");
}
