//! CONTRACT section 10, rule by rule, over real HTTP against the real binary:
//! `GET /units/summary`, `GET /metrics/summary` and `GET /stations` (issue 13).
//!
//! Each test names the rule it proves and states the expected rows by hand from the
//! contract's words, over a small fixture built for it: retests on two stations
//! and in two buckets, empty and absent serials, input records, results in mixed
//! case, ties at one instant across stations and across files, a station with only
//! empty serials, metric values and limits numeric and not, and records an hour
//! before the server starts (for the default window). The larger comparisons use
//! the reference model of `common::summary`, the same one `summary_properties`
//! drives with random snapshots.
//!
//! Also proved: the parameters each endpoint accepts (everything else, `limit` and
//! `cursor` included, is `unknown_parameter`), the `bucket` and `group_by` grammar,
//! the envelope without `next_cursor`, auth (401, 403 with `details.stations`),
//! `result_too_large`, `too_many_stations`, the window defaults and `--max-window`
//! (not on `/stations`), `ETag`/`If-None-Match`/304 (also from another process) and
//! `HEAD`, 404/405/414, which value texts are numeric, buckets before the epoch,
//! summaries after a reload, and (with `fault-injection`) `--request-timeout` and
//! shard failures on the summaries.

use std::sync::OnceLock;

use serde_json::{json, Value};

use crate::common::summary::{self as model, Ordered, SummaryQuery};
use crate::common::{
    instant, rfc3339_from_seconds, Envelope, FileSpec, Fixture, Response, Server, LINE, OPS, ST03,
};

/// The window that holds every 2024 record of the fixture.
const W: &str = "from=2024-05-01T00:00:00Z&to=2024-05-02T00:00:00Z";

fn unit(
    station: &str,
    slot: &str,
    serial: Option<&str>,
    at: &str,
    kind: &str,
    result: &str,
) -> String {
    unit_with(station, slot, serial, at, kind, "output", result, "prod")
}

#[allow(clippy::too_many_arguments)]
fn unit_with(
    station: &str,
    slot: &str,
    serial: Option<&str>,
    at: &str,
    kind: &str,
    direction: &str,
    result: &str,
    mode: &str,
) -> String {
    let mut record = json!({
        "station_id": station,
        "slot": slot,
        "time_created": at,
        "unit_type": kind,
        "direction": direction,
        "result": result,
        "mode": mode,
    });
    if let Some(serial) = serial {
        record["unit_serial"] = json!(serial);
    }
    record.to_string()
}

/// A metric line; `value`, `lower`, `upper` are JSON text as written (numbers or
/// strings), `None` leaves the field out.
fn metric(
    station: &str,
    at: &str,
    name: &str,
    value: Option<&str>,
    lower: Option<&str>,
    upper: Option<&str>,
) -> String {
    let mut fields = vec![
        format!(r#""station_id":"{station}""#),
        r#""slot":"S1""#.to_owned(),
        r#""unit":"V""#.to_owned(),
        format!(r#""time_created":"{at}""#),
        format!(r#""name":"{name}""#),
    ];
    for (key, text) in [
        ("value", value),
        ("limit_lower", lower),
        ("limit_upper", upper),
    ] {
        if let Some(text) = text {
            fields.push(format!(r#""{key}":{text}"#));
        }
    }
    format!("{{{}}}", fields.join(","))
}

fn lines(lines: &[String]) -> String {
    lines.iter().map(|line| format!("{line}\n")).collect()
}

/// The fixture. Unit types isolate the scenarios: `Retest`, `Tie`, `Empty`,
/// `Order`, `Grid`, `Now`. Metric names do the same.
fn files(now: i64) -> Vec<FileSpec> {
    let a_units = lines(&[
        // Retest: SN-A fails on ST-01 at 10:05 and passes on ST-02 at 11:20.
        unit(
            "ST-01",
            "S1",
            Some("SN-A"),
            "2024-05-01T10:05:00Z",
            "Retest",
            "fail",
        ),
        unit(
            "ST-02",
            "S2",
            Some("SN-A"),
            "2024-05-01T12:20:00+01:00",
            "Retest",
            "pass",
        ),
        unit(
            "ST-01",
            "S1",
            Some("SN-B"),
            "2024-05-01T10:10:00Z",
            "Retest",
            "PASS",
        ),
        // An empty and an absent serial: records and results only.
        unit(
            "ST-01",
            "S1",
            Some(""),
            "2024-05-01T10:15:00Z",
            "Retest",
            "pass",
        ),
        unit(
            "ST-01",
            "S1",
            None,
            "2024-05-01T10:40:00Z",
            "Retest",
            "fail",
        ),
        // An input record never counts.
        unit_with(
            "ST-01",
            "S1",
            Some("SN-C"),
            "2024-05-01T10:20:00Z",
            "Retest",
            "input",
            "pass",
            "prod",
        ),
        // SN-B fails after the window: its last attempt in the window passed.
        unit(
            "ST-01",
            "S1",
            Some("SN-B"),
            "2024-05-02T01:00:00Z",
            "Retest",
            "fail",
        ),
        unit(
            "ST-02",
            "S2",
            Some("SN-E"),
            "2024-05-01T11:30:00Z",
            "Retest",
            "ok",
        ),
        // Tie: the same instant on ST-02 (written first) and ST-01: ST-01's is the
        // first attempt.
        unit(
            "ST-02",
            "S1",
            Some("SN-T"),
            "2024-05-01T14:00:00Z",
            "Tie",
            "pass",
        ),
        unit(
            "ST-01",
            "S1",
            Some("SN-T"),
            "2024-05-01T15:00:00+01:00",
            "Tie",
            "fail",
        ),
        // Tie at one station and instant: load order decides; SN-V's other attempt
        // is in b.units.jsonl, which loads after this file.
        unit(
            "ST-03",
            "S1",
            Some("SN-U"),
            "2024-05-01T16:00:00Z",
            "Tie",
            "fail",
        ),
        unit(
            "ST-03",
            "S1",
            Some("SN-U"),
            "2024-05-01T16:00:00.000Z",
            "Tie",
            "pass",
        ),
        unit(
            "ST-03",
            "S1",
            Some("SN-V"),
            "2024-05-01T17:00:00Z",
            "Tie",
            "pass",
        ),
        // Empty: a station whose only records have empty serials.
        unit(
            "ST-04",
            "S1",
            Some(""),
            "2024-05-01T09:00:00Z",
            "Empty",
            "pass",
        ),
        unit("ST-04", "S1", None, "2024-05-01T09:30:00Z", "Empty", "Fail"),
        // Order: station ids and slots whose byte order is not a human order.
        unit(
            "ST-2",
            "b",
            Some("SN-O1"),
            "2024-05-01T08:00:00Z",
            "Order",
            "pass",
        ),
        unit(
            "ST-10",
            "a",
            Some("SN-O2"),
            "2024-05-01T08:00:00Z",
            "Order",
            "pass",
        ),
        unit(
            "B",
            "b",
            Some("SN-O3"),
            "2024-05-01T08:00:00Z",
            "Order",
            "pass",
        ),
        unit(
            "st-1",
            "a",
            Some("SN-O4"),
            "2024-05-01T08:00:00Z",
            "Order",
            "pass",
        ),
        unit(
            "ST-10",
            "b",
            Some("SN-O5"),
            "2024-05-01T08:00:00Z",
            "Order",
            "fail",
        ),
        // Grid: one day's last nanosecond and the next day's first; epoch-aligned
        // 7d and 31d buckets start on 2024-04-25 and 2024-04-27.
        unit(
            "ST-05",
            "S1",
            Some("SN-G1"),
            "2024-05-01T23:59:59.999999999Z",
            "Grid",
            "pass",
        ),
        unit(
            "ST-05",
            "S1",
            Some("SN-G2"),
            "2024-05-02T00:00:00Z",
            "Grid",
            "pass",
        ),
    ]);
    let b_units = lines(&[unit(
        "ST-03",
        "S1",
        Some("SN-V"),
        "2024-05-01T17:00:00Z",
        "Tie",
        "fail",
    )]);
    let now_at = |delta: i64| rfc3339_from_seconds(now + delta);
    let now_units = lines(&[
        unit("ST-09", "S1", Some("SN-N1"), &now_at(-3600), "Now", "pass"),
        unit(
            "ST-09",
            "S1",
            Some("SN-N2"),
            &now_at(-25 * 3600),
            "Now",
            "pass",
        ),
    ]);
    let m = lines(&[
        // v: six records in the 10:00 hour on ST-01.
        metric(
            "ST-01",
            "2024-05-01T10:00:00Z",
            "v",
            Some("1"),
            Some("0"),
            Some("10"),
        ),
        metric(
            "ST-01",
            "2024-05-01T10:10:00Z",
            "v",
            Some(r#""3""#),
            Some(r#""0""#),
            Some(r#""10""#),
        ),
        metric(
            "ST-01",
            "2024-05-01T10:20:00Z",
            "v",
            Some(r#""abc""#),
            Some("0"),
            Some("10"),
        ),
        metric(
            "ST-01",
            "2024-05-01T10:30:00Z",
            "v",
            Some("20"),
            Some("0"),
            Some("10"),
        ),
        metric(
            "ST-01",
            "2024-05-01T10:40:00Z",
            "v",
            Some(r#""-1""#),
            Some(r#""n/a""#),
            Some("10"),
        ),
        metric(
            "ST-01",
            "2024-05-01T10:50:00Z",
            "v",
            Some(r#""+5""#),
            Some("0.0"),
            Some("4"),
        ),
        // v in the next hour: its own row, its own last limits.
        metric(
            "ST-01",
            "2024-05-01T11:00:00Z",
            "v",
            Some("7"),
            Some("1E+0"),
            None,
        ),
        // single: one numeric value.
        metric(
            "ST-01",
            "2024-05-01T10:00:00Z",
            "single",
            Some("2.5"),
            Some("0"),
            Some("5"),
        ),
        // flat: equal values, numeric limits: stddev 0, cpk null.
        metric(
            "ST-01",
            "2024-05-01T10:00:00Z",
            "flat",
            Some("2"),
            Some("0"),
            Some("5"),
        ),
        metric(
            "ST-01",
            "2024-05-01T10:01:00Z",
            "flat",
            Some("2.0"),
            Some("0"),
            Some("5"),
        ),
        metric(
            "ST-01",
            "2024-05-01T10:02:00Z",
            "flat",
            Some(r#""2""#),
            Some("0"),
            Some("5"),
        ),
        // weird: only "+3.5" is numeric.
        metric(
            "ST-01",
            "2024-05-01T10:00:00Z",
            "weird",
            Some("1e400"),
            None,
            None,
        ),
        metric(
            "ST-01",
            "2024-05-01T10:01:00Z",
            "weird",
            Some(r#""01""#),
            None,
            None,
        ),
        metric(
            "ST-01",
            "2024-05-01T10:02:00Z",
            "weird",
            Some(r#""""#),
            None,
            None,
        ),
        metric("ST-01", "2024-05-01T10:03:00Z", "weird", None, None, None),
        metric(
            "ST-01",
            "2024-05-01T10:04:00Z",
            "weird",
            Some(r#""+3.5""#),
            None,
            None,
        ),
        metric(
            "ST-01",
            "2024-05-01T10:05:00Z",
            "weird",
            Some(r#""1e400""#),
            Some("1E+1"),
            Some(r#""x""#),
        ),
        // nolimit: the last record's upper limit is not numeric.
        metric(
            "ST-02",
            "2024-05-01T10:00:00Z",
            "nolimit",
            Some("1"),
            Some("0"),
            Some("10"),
        ),
        metric(
            "ST-02",
            "2024-05-01T10:01:00Z",
            "nolimit",
            Some("2"),
            Some("0"),
            Some(r#""n/a""#),
        ),
        // a metric on the Order stations, for /stations
        metric(
            "ST-10",
            "2024-05-01T07:00:00+02:00",
            "v",
            Some("1"),
            None,
            None,
        ),
    ]);
    vec![
        FileSpec::plain("a.units.jsonl", a_units),
        FileSpec::plain("b.units.jsonl", b_units),
        FileSpec::plain("m.metrics.jsonl", m),
        FileSpec::plain("now.units.jsonl", now_units),
    ]
}

struct Shared {
    fixture: Fixture,
    server: Server,
}

fn start(extra: &[&str]) -> Shared {
    let now = crate::common::now_seconds();
    let mut fixture = Fixture::from_files(&files(now));
    fixture.now = now;
    let server = Server::start(&fixture, extra);
    Shared { fixture, server }
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| start(&[]))
}

fn server() -> &'static Server {
    &shared().server
}

/// The rows of a 200 answer, with their key order, after checking the envelope.
#[track_caller]
fn rows_as(server: &Server, path: &str, token: &str) -> Vec<Ordered> {
    let envelope = server.get(path, Some(token)).ok();
    assert_summary_envelope(&envelope);
    model::rows_of(&envelope.response.body).unwrap()
}

#[track_caller]
fn rows(path: &str) -> Vec<Ordered> {
    rows_as(server(), path, OPS)
}

/// The rows as plain values (key order checked separately where it matters).
#[track_caller]
fn values(path: &str) -> Vec<Value> {
    rows(path).iter().map(Ordered::value).collect()
}

#[track_caller]
fn assert_summary_envelope(envelope: &Envelope) {
    assert!(
        !envelope.meta.contains_key("next_cursor"),
        "{}: a summary has no next_cursor",
        envelope.response.context()
    );
    let body = Ordered::parse(&envelope.response.body).unwrap();
    assert_eq!(body.keys(), ["data", "message", "meta"]);
}

#[track_caller]
fn error(path: &str, status: u16, code: &str) -> Value {
    server().get(path, Some(OPS)).error(status, code)
}

/// The reference rows of `/units/summary` for the whole fixture and a query.
fn reference_units(query: &SummaryQuery, pass: &[&str]) -> Vec<model::Row> {
    let pass: Vec<String> = pass.iter().map(|p| p.to_string()).collect();
    model::units_summary(&shared().fixture.records, query, &pass)
}

fn window() -> SummaryQuery {
    SummaryQuery::new(
        instant("2024-05-01T00:00:00Z"),
        instant("2024-05-02T00:00:00Z"),
    )
}

fn keys(row: &Ordered) -> Vec<&str> {
    row.keys()
}

/// A `/units/summary` row's cycle-time fields when none of its outputs has an input.
fn no_cycles(mut row: Value) -> Value {
    let fields = row.as_object_mut().unwrap();
    fields.insert("cycle_count".into(), json!(0));
    for name in ["cycle_mean_s", "cycle_p50_s", "cycle_p90_s", "cycle_max_s"] {
        fields.insert(name.into(), Value::Null);
    }
    row
}

// ---------------------------------------------------------------------------
// 10.1 /units/summary
// ---------------------------------------------------------------------------

#[test]
fn units_belong_to_the_bucket_of_their_first_attempt_and_final_pass_uses_the_last_attempt() {
    let got = values(&format!(
        "/units/summary?{W}&type=Retest&group_by=unit_type&bucket=1h"
    ));
    assert_eq!(
        got,
        vec![
            no_cycles(
                json!({"unit_type": "Retest", "bucket_start": "2024-05-01T10:00:00Z",
                   "records": 4, "results": {"PASS": 1, "fail": 2, "pass": 1},
                   "units": 2, "first_pass": 1, "second_pass": 2, "final_pass": 2,
                   "retested": 1, "first_pass_yield": 0.5, "second_pass_yield": 1.0,
                   "final_yield": 1.0, "retest_rate": 0.5})
            ),
            no_cycles(
                json!({"unit_type": "Retest", "bucket_start": "2024-05-01T11:00:00Z",
                   "records": 2, "results": {"ok": 1, "pass": 1},
                   "units": 1, "first_pass": 0, "second_pass": 0, "final_pass": 0,
                   "retested": 0, "first_pass_yield": 0.0, "second_pass_yield": 0.0,
                   "final_yield": 0.0, "retest_rate": 0.0})
            ),
        ]
    );
}

#[test]
fn without_bucket_one_row_per_group_without_bucket_start() {
    let got = rows(&format!(
        "/units/summary?{W}&type=Retest&group_by=unit_type"
    ));
    assert_eq!(got.len(), 1);
    assert_eq!(
        keys(&got[0]),
        [
            "unit_type",
            "records",
            "results",
            "units",
            "first_pass",
            "second_pass",
            "final_pass",
            "retested",
            "first_pass_yield",
            "second_pass_yield",
            "final_yield",
            "retest_rate",
            "cycle_count",
            "cycle_mean_s",
            "cycle_p50_s",
            "cycle_p90_s",
            "cycle_max_s"
        ]
    );
    let row = got[0].value();
    assert_eq!(row["records"], 6);
    assert_eq!(
        row["results"],
        json!({"PASS": 1, "fail": 2, "ok": 1, "pass": 2})
    );
    assert_eq!(row["units"], 3, "SN-A, SN-B, SN-E");
    assert_eq!(row["first_pass"], 1, "SN-B");
    assert_eq!(row["final_pass"], 2, "SN-A and SN-B");
    let yields = (
        row["first_pass_yield"].as_f64(),
        row["final_yield"].as_f64(),
    );
    assert!((yields.0.unwrap() - 1.0 / 3.0).abs() < 1e-9, "{row}");
    assert!((yields.1.unwrap() - 2.0 / 3.0).abs() < 1e-9, "{row}");
}

#[test]
fn a_units_attempts_are_those_of_its_group() {
    // By station, SN-A is a unit on ST-01 (failed) and another on ST-02 (passed).
    let got = values(&format!("/units/summary?{W}&type=Retest"));
    assert_eq!(
        got,
        vec![
            no_cycles(json!({"station_id": "ST-01", "records": 4,
                   "results": {"PASS": 1, "fail": 2, "pass": 1},
                   "units": 2, "first_pass": 1, "second_pass": 1, "final_pass": 1,
                   "retested": 0, "first_pass_yield": 0.5, "second_pass_yield": 0.5,
                   "final_yield": 0.5, "retest_rate": 0.0})),
            no_cycles(json!({"station_id": "ST-02", "records": 2,
                   "results": {"ok": 1, "pass": 1},
                   "units": 2, "first_pass": 1, "second_pass": 1, "final_pass": 1,
                   "retested": 0, "first_pass_yield": 0.5, "second_pass_yield": 0.5,
                   "final_yield": 0.5, "retest_rate": 0.0})),
        ]
    );
}

#[test]
fn the_default_group_is_station_id() {
    let explicit = values(&format!("/units/summary?{W}&group_by=station_id"));
    for spelling in [
        "",
        "&group_by=",
        "&group_by=,%20,",
        "&group_by=station_id,station_id",
    ] {
        assert_eq!(
            values(&format!("/units/summary?{W}{spelling}")),
            explicit,
            "{spelling:?}"
        );
    }
    let reference = reference_units(&window(), &["pass"]);
    model::compare_rows(&rows(&format!("/units/summary?{W}")), &reference).unwrap();
}

#[test]
fn the_first_attempt_of_a_tie_across_stations_is_the_lower_station_id() {
    // SN-T: ST-02 pass written first, ST-01 fail at the same instant.
    let got = values(&format!(
        "/units/summary?{W}&serial_number=SN-T&group_by=unit_type"
    ));
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["units"], 1);
    assert_eq!(got[0]["first_pass"], 0, "ST-01's fail is the first attempt");
    assert_eq!(got[0]["final_pass"], 1, "ST-02's pass is the last attempt");
}

#[test]
fn the_first_attempt_of_a_tie_at_one_station_is_the_first_loaded() {
    // SN-U: fail then pass, lines of one file; SN-V: pass in a.units.jsonl, fail
    // in b.units.jsonl.
    let u = values(&format!(
        "/units/summary?{W}&serial_number=SN-U&group_by=unit_type"
    ));
    assert_eq!(
        (&u[0]["first_pass"], &u[0]["final_pass"]),
        (&json!(0), &json!(1))
    );
    let v = values(&format!(
        "/units/summary?{W}&serial_number=SN-V&group_by=unit_type"
    ));
    assert_eq!(
        (&v[0]["first_pass"], &v[0]["final_pass"]),
        (&json!(1), &json!(0))
    );
}

#[test]
fn empty_serials_count_in_records_and_results_only_and_yields_are_null_without_units() {
    let got = values(&format!("/units/summary?{W}&station_ids=ST-04"));
    assert_eq!(
        got,
        vec![no_cycles(
            json!({"station_id": "ST-04", "records": 2, "results": {"Fail": 1, "pass": 1},
                    "units": 0, "first_pass": 0, "second_pass": 0, "final_pass": 0,
                    "retested": 0, "first_pass_yield": null, "second_pass_yield": null,
                    "final_yield": null, "retest_rate": null})
        )]
    );
}

#[test]
fn input_records_never_count() {
    // SN-C's only record is an input: no unit, no record.
    let got = values(&format!("/units/summary?{W}&serial_number=SN-C"));
    assert_eq!(got, Vec::<Value>::new());
    let got = values(&format!("/units/summary?{W}&type=Retest&station_ids=ST-01"));
    assert_eq!(got[0]["records"], 4);
}

#[test]
fn the_window_cuts_attempts() {
    // SN-B's fail after the window does not count; in a window holding it, it is
    // the last attempt.
    let within = values(&format!("/units/summary?{W}&serial_number=SN-B"));
    assert_eq!(within[0]["final_pass"], 1);
    let wider = values(
        "/units/summary?from=2024-05-01T00:00:00Z&to=2024-05-03T00:00:00Z&serial_number=SN-B",
    );
    assert_eq!(wider[0]["records"], 2);
    assert_eq!(
        (&wider[0]["first_pass"], &wider[0]["final_pass"]),
        (&json!(1), &json!(0))
    );
}

#[test]
fn pass_results_are_a_list_compared_ignoring_ascii_case() {
    let shared = start(&["--pass-results", "pass,OK"]);
    let got: Vec<Value> = rows_as(
        &shared.server,
        &format!("/units/summary?{W}&type=Retest&group_by=unit_type&bucket=1h"),
        OPS,
    )
    .iter()
    .map(Ordered::value)
    .collect();
    // 11:00: SN-E's "ok" now passes.
    assert_eq!(got[1]["first_pass"], 1, "{got:?}");
    assert_eq!(got[1]["final_pass"], 1, "{got:?}");
    assert_eq!(got[1]["first_pass_yield"], 1.0, "{got:?}");
    // "PASS" passes by default too (SN-B).
    assert_eq!(
        values(&format!("/units/summary?{W}&serial_number=SN-B"))[0]["first_pass"],
        1
    );
    let query = window();
    model::compare_rows(
        &rows_as(&shared.server, &format!("/units/summary?{W}"), OPS),
        &model::units_summary(
            &shared.fixture.records,
            &query,
            &["pass".to_owned(), "OK".to_owned()],
        ),
    )
    .unwrap();
}

#[test]
fn pass_results_is_read_from_its_environment_variable() {
    let fixture = Fixture::from_files(&files(crate::common::now_seconds()));
    let server = Server::spawn(
        &crate::common::serve_args(&fixture.snapshots, &fixture.tokens, &[]),
        &[("STQ_PASS_RESULTS", "fail")],
    );
    let got = rows_as(
        &server,
        &format!("/units/summary?{W}&serial_number=SN-A&group_by=unit_type"),
        OPS,
    );
    assert_eq!(got[0].value()["first_pass"], 1, "SN-A failed first");
}

#[test]
fn group_by_order_decides_key_order_and_row_order() {
    let by_station = rows(&format!(
        "/units/summary?{W}&type=Order&group_by=station_id,slot"
    ));
    let pairs: Vec<(Value, Value)> = by_station
        .iter()
        .map(|row| {
            (
                row.value()["station_id"].clone(),
                row.value()["slot"].clone(),
            )
        })
        .collect();
    assert_eq!(
        pairs,
        [
            ("B", "b"),
            ("ST-10", "a"),
            ("ST-10", "b"),
            ("ST-2", "b"),
            ("st-1", "a")
        ]
        .map(|(s, l)| (json!(s), json!(l)))
    );
    assert_eq!(keys(&by_station[0])[..2], ["station_id", "slot"]);
    let by_slot = rows(&format!(
        "/units/summary?{W}&type=Order&group_by=slot&group_by=station_id,slot"
    ));
    let pairs: Vec<(Value, Value)> = by_slot
        .iter()
        .map(|row| {
            (
                row.value()["slot"].clone(),
                row.value()["station_id"].clone(),
            )
        })
        .collect();
    assert_eq!(
        pairs,
        [
            ("a", "ST-10"),
            ("a", "st-1"),
            ("b", "B"),
            ("b", "ST-10"),
            ("b", "ST-2")
        ]
        .map(|(l, s)| (json!(l), json!(s)))
    );
    assert_eq!(keys(&by_slot[0])[..3], ["slot", "station_id", "records"]);
}

#[test]
fn group_by_every_unit_field_in_any_order() {
    for group_by in [
        "unit_type,mode",
        "mode,slot,unit_type,station_id",
        "slot",
        "mode,mode,slot,mode",
    ] {
        let path = format!("/units/summary?{W}&group_by={group_by}&bucket=15m");
        let mut query = window();
        let items: Vec<&str> = group_by.split(',').collect();
        query.group_by = model::group_by_list(&items);
        query.bucket = Some(model::bucket_nanos("15m"));
        model::compare_rows(&rows(&path), &reference_units(&query, &["pass"]))
            .unwrap_or_else(|difference| panic!("{path}: {difference}"));
    }
}

#[test]
fn rows_sort_by_group_fields_then_bucket_start() {
    let got = values(&format!(
        "/units/summary?{W}&type=Retest,Tie&group_by=unit_type&bucket=1h"
    ));
    let keys: Vec<(String, String)> = got
        .iter()
        .map(|row| {
            (
                row["unit_type"].as_str().unwrap().to_owned(),
                row["bucket_start"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("Retest", "2024-05-01T10:00:00Z"),
        ("Retest", "2024-05-01T11:00:00Z"),
        ("Tie", "2024-05-01T14:00:00Z"),
        ("Tie", "2024-05-01T16:00:00Z"),
        ("Tie", "2024-05-01T17:00:00Z"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(keys, expected);
}

#[test]
fn buckets_are_aligned_to_the_epoch_and_written_without_fraction() {
    let wide = "from=2024-04-01T00:00:00Z&to=2024-06-01T00:00:00Z&type=Grid&group_by=unit_type";
    let starts = |bucket: &str| -> Vec<String> {
        values(&format!("/units/summary?{wide}&bucket={bucket}"))
            .iter()
            .map(|row| row["bucket_start"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        starts("1d"),
        ["2024-05-01T00:00:00Z", "2024-05-02T00:00:00Z"]
    );
    assert_eq!(starts("24h"), starts("1d"));
    assert_eq!(
        starts("1m"),
        ["2024-05-01T23:59:00Z", "2024-05-02T00:00:00Z"]
    );
    // 1970-01-01 was a Thursday: 7-day buckets start on Thursdays.
    assert_eq!(
        starts("7d"),
        ["2024-04-25T00:00:00Z", "2024-05-02T00:00:00Z"]
    );
    assert_eq!(starts("31d"), ["2024-04-27T00:00:00Z"]);
    assert_eq!(starts("744h"), starts("31d"));
    assert_eq!(
        starts("5h"),
        ["2024-05-01T19:00:00Z", "2024-05-02T00:00:00Z"]
    );
}

#[test]
fn the_bucket_grammar() {
    for bucket in ["1m", "15m", "60m", "1h", "744h", "31d", "7d", "44640m"] {
        rows(&format!("/units/summary?{W}&bucket={bucket}"));
        rows(&format!("/metrics/summary?{W}&bucket={bucket}"));
    }
    for bucket in [
        "0m",
        "01h",
        "32d",
        "745h",
        "44641m",
        "1s",
        "1H",
        "1D",
        "1",
        "h",
        "",
        "1.5h",
        "+1h",
        "-1h",
        "1h1m",
        "1%20h",
        "00d",
        "1w",
        // Issue 13: a bucket ending in a multi-byte character was a panic's 500.
        "%C3%A9",
        "1%C3%A9",
        "1h%C3%A9",
        "%E2%82%AC",
        "%201h",
        "1h%20",
    ] {
        for path in ["/units/summary", "/metrics/summary"] {
            let uri = format!("{path}?{W}&bucket={bucket}");
            error(&uri, 400, "invalid_parameter");
        }
    }
    // Single-valued.
    error(
        &format!("/units/summary?{W}&bucket=1h&bucket=1h"),
        400,
        "invalid_parameter",
    );
}

#[test]
fn a_bad_group_by_item_is_invalid() {
    for item in [
        "unit",
        "name",
        "direction",
        "unit_serial",
        "Station_id",
        "bucket_start",
        "x",
    ] {
        error(
            &format!("/units/summary?{W}&group_by=station_id,{item}"),
            400,
            "invalid_parameter",
        );
    }
    for item in [
        "name",
        "unit_type",
        "mode",
        "unit_serial",
        "value",
        "SLOT",
        "station_id%20x",
    ] {
        error(
            &format!("/metrics/summary?{W}&group_by={item}"),
            400,
            "invalid_parameter",
        );
    }
}

#[test]
fn each_summary_accepts_only_its_own_parameters() {
    for param in [
        "limit=10",
        "cursor=abc",
        "direction=output",
        "names=v",
        "station_id=ST-01",
        "access_token=x",
        "group=station_id",
    ] {
        error(
            &format!("/units/summary?{W}&{param}"),
            400,
            "unknown_parameter",
        );
    }
    for param in [
        "limit=10",
        "cursor=abc",
        "type=PCB",
        "serial_number=SN-A",
        "direction=output",
        "name=v",
    ] {
        error(
            &format!("/metrics/summary?{W}&{param}"),
            400,
            "unknown_parameter",
        );
    }
    for param in [
        "from=2024-05-01T00:00:00Z",
        "to=2024-05-01T00:00:00Z",
        "group_by=station_id",
        "bucket=1h",
        "limit=1",
        "cursor=x",
        "type=PCB",
        "names=v",
    ] {
        error(&format!("/stations?{param}"), 400, "unknown_parameter");
    }
}

#[test]
fn section_4_applies_to_summary_parameters() {
    error(
        &format!("/units/summary?{W}&serial_number="),
        400,
        "invalid_parameter",
    );
    error(
        &format!("/units/summary?{W}&serial_number=a&serial_number=b"),
        400,
        "invalid_parameter",
    );
    error(
        "/units/summary?from=2024-05-02T00:00:00Z&to=2024-05-01T00:00:00Z",
        400,
        "invalid_window",
    );
    error("/metrics/summary?from=x", 400, "invalid_parameter");
    // Lists: repeated and comma forms combine; names are exact.
    assert_eq!(
        values(&format!(
            "/metrics/summary?{W}&names=v&names=single,%20flat"
        )),
        values(&format!("/metrics/summary?{W}&names=flat,single,v,v")),
    );
    assert_eq!(
        values(&format!("/metrics/summary?{W}&names=V")),
        Vec::<Value>::new()
    );
    assert_eq!(
        values(&format!("/units/summary?{W}&type=retest")),
        Vec::<Value>::new(),
        "type is case-sensitive"
    );
}

// ---------------------------------------------------------------------------
// 10.2 /metrics/summary
// ---------------------------------------------------------------------------

fn close(got: &Value, want: f64) -> bool {
    got.as_f64()
        .is_some_and(|got| (got - want).abs() <= 1e-9_f64.max(1e-6 * want.abs()))
}

#[test]
fn statistics_of_numeric_values_with_the_last_records_limits() {
    let got = rows(&format!(
        "/metrics/summary?{W}&names=v&station_ids=ST-01&bucket=1h"
    ));
    assert_eq!(got.len(), 2);
    assert_eq!(
        keys(&got[0]),
        [
            "station_id",
            "name",
            "bucket_start",
            "count",
            "numeric",
            "min",
            "max",
            "mean",
            "stddev",
            "limit_lower",
            "limit_upper",
            "out_of_limits",
            "failing_units",
            "cp",
            "cpk"
        ]
    );
    let row = got[0].value();
    // Values 1, 3, "abc", 20, -1, +5: five numeric.
    let numbers = [1.0, 3.0, 20.0, -1.0, 5.0];
    let mean = numbers.iter().sum::<f64>() / 5.0;
    let stddev = (numbers.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 4.0).sqrt();
    assert_eq!(row["station_id"], "ST-01");
    assert_eq!(row["name"], "v");
    assert_eq!(row["bucket_start"], "2024-05-01T10:00:00Z");
    assert_eq!(row["count"], 6);
    assert_eq!(row["numeric"], 5);
    assert!(close(&row["min"], -1.0), "{row}");
    assert!(close(&row["max"], 20.0), "{row}");
    assert!(close(&row["mean"], mean), "{row}");
    assert!(close(&row["stddev"], stddev), "{row}");
    // The last record's limits as written (0.0 and 4).
    assert_eq!(row["limit_lower"], "0.0");
    assert_eq!(row["limit_upper"], "4");
    // 20 > 10 (its own upper), +5 > 4 (its own upper); -1 has no numeric lower.
    assert_eq!(row["out_of_limits"], 2);
    let cpk = (4.0 - mean).min(mean - 0.0) / (3.0 * stddev);
    assert!(close(&row["cpk"], cpk), "{row} want cpk {cpk}");
    assert!(close(&row["cp"], 4.0 / (6.0 * stddev)), "{row}");
    // The fixture's metric records have no serials: no failing unit.
    assert_eq!(row["failing_units"], 0);
    // The next hour: one value, its own last limits (an absent upper is "").
    let next = got[1].value();
    assert_eq!(next["bucket_start"], "2024-05-01T11:00:00Z");
    assert_eq!(
        (&next["limit_lower"], &next["limit_upper"]),
        (&json!("1E+0"), &json!(""))
    );
    assert_eq!(
        (&next["stddev"], &next["cpk"]),
        (&Value::Null, &Value::Null)
    );
    assert_eq!(next["out_of_limits"], 0);
}

#[test]
fn stddev_and_cpk_are_null_for_one_value() {
    let got = values(&format!("/metrics/summary?{W}&names=single"));
    assert_eq!(got.len(), 1);
    let row = &got[0];
    assert_eq!(row["numeric"], 1);
    for field in ["min", "max", "mean"] {
        assert!(close(&row[field], 2.5), "{row}");
    }
    assert_eq!(row["stddev"], Value::Null);
    assert_eq!(row["cpk"], Value::Null);
}

#[test]
fn cpk_is_null_when_stddev_is_zero() {
    let got = values(&format!("/metrics/summary?{W}&names=flat"));
    let row = &got[0];
    assert_eq!(row["numeric"], 3);
    assert!(close(&row["stddev"], 0.0), "{row}");
    assert_eq!(row["cpk"], Value::Null, "{row}");
}

#[test]
fn issue_23_cpk_is_one_sided_and_cp_null_when_one_last_limit_is_not_numeric() {
    // Until revision 3 of the contract, cpk was null here.
    let got = values(&format!("/metrics/summary?{W}&names=nolimit"));
    let row = &got[0];
    assert_eq!(row["station_id"], "ST-02");
    assert_eq!(row["limit_upper"], "n/a");
    let stddev = std::f64::consts::FRAC_1_SQRT_2;
    assert!(close(&row["stddev"], stddev), "{row}");
    assert_eq!(row["cp"], Value::Null);
    // Values 1 and 2 against the lower limit 0 alone: (mean - L) / 3s.
    assert!(close(&row["cpk"], 1.5 / (3.0 * stddev)), "{row}");
}

#[test]
fn only_finite_decimal_numbers_are_numeric() {
    // 1e400 (number and string), "01", "", absent, "+3.5": only "+3.5" counts.
    let got = values(&format!("/metrics/summary?{W}&names=weird"));
    let row = &got[0];
    assert_eq!(row["count"], 6);
    assert_eq!(row["numeric"], 1, "{row}");
    assert!(close(&row["mean"], 3.5), "{row}");
    assert_eq!(row["limit_lower"], "1E+1");
    assert_eq!(row["limit_upper"], "x");
    // "+3.5" had no limits of its own: out_of_limits uses each record's own limits.
    assert_eq!(row["out_of_limits"], 0);
    assert_eq!(row["min"], row["max"]);
    assert_eq!((&row["stddev"], &row["cpk"]), (&Value::Null, &Value::Null));
}

#[test]
fn metric_rows_sort_by_group_fields_then_name_then_bucket() {
    let got = values(&format!("/metrics/summary?{W}&group_by=unit,station_id"));
    let order: Vec<(String, String, String)> = got
        .iter()
        .map(|row| {
            (
                row["unit"].as_str().unwrap().to_owned(),
                row["station_id"].as_str().unwrap().to_owned(),
                row["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    assert_eq!(
        order
            .iter()
            .map(|(_, s, n)| format!("{s}/{n}"))
            .collect::<Vec<_>>(),
        [
            "ST-01/flat",
            "ST-01/single",
            "ST-01/v",
            "ST-01/weird",
            "ST-02/nolimit",
            "ST-10/v"
        ]
    );
    let reference = model::metrics_summary(&shared().fixture.records, &{
        let mut query = window();
        query.group_by = model::group_by_list(&["unit", "station_id"]);
        query
    });
    model::compare_rows(
        &rows(&format!("/metrics/summary?{W}&group_by=unit,station_id")),
        &reference,
    )
    .unwrap();
    let got = rows(&format!(
        "/metrics/summary?{W}&group_by=slot,slot&bucket=1m"
    ));
    assert_eq!(keys(&got[0])[..3], ["slot", "name", "bucket_start"]);
}

// ---------------------------------------------------------------------------
// 10.3 /stations
// ---------------------------------------------------------------------------

#[test]
fn stations_lists_counts_and_first_and_last_as_written_without_a_window() {
    let got = rows("/stations");
    let reference = model::stations(&shared().fixture.records, None, None);
    model::compare_rows(&got, &reference).unwrap();
    let ids: Vec<String> = got
        .iter()
        .map(|row| row.value()["station_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        ids,
        ["B", "ST-01", "ST-02", "ST-03", "ST-04", "ST-05", "ST-09", "ST-10", "ST-2", "st-1"]
    );
    assert_eq!(
        keys(&got[0]),
        ["station_id", "units", "metrics", "first", "last"]
    );
    let st01 = got[1].value();
    // Units of both directions and after any window; first and last as written.
    assert_eq!(st01["units"], 7);
    assert_eq!(st01["metrics"], 17);
    assert_eq!(st01["first"], "2024-05-01T10:00:00Z");
    assert_eq!(st01["last"], "2024-05-02T01:00:00Z");
    let st10 = got[7].value();
    assert_eq!(
        st10["first"], "2024-05-01T07:00:00+02:00",
        "the metric at 05:00Z"
    );
    assert_eq!((&st10["units"], &st10["metrics"]), (&json!(2), &json!(1)));
}

#[test]
fn stations_filters_by_station_ids_and_token() {
    let got: Vec<Value> = rows("/stations?station_ids=ST-10,ST-03,ghost")
        .iter()
        .map(|row| row.value()["station_id"].clone())
        .collect();
    assert_eq!(got, [json!("ST-03"), json!("ST-10")]);
    let got: Vec<Value> = rows_as(server(), "/stations", LINE)
        .iter()
        .map(|row| row.value()["station_id"].clone())
        .collect();
    assert_eq!(got, [json!("ST-01"), json!("ST-02")]);
    let details = server()
        .get("/stations?station_ids=ST-01,ST-09,ST-04,ST-09", Some(LINE))
        .error(403, "forbidden");
    assert_eq!(details, json!({"stations": ["ST-04", "ST-09"]}));
}

#[test]
fn stations_ignores_max_window() {
    let shared = start(&["--max-window", "1h"]);
    let got = rows_as(&shared.server, "/stations", OPS);
    assert_eq!(got.len(), 10);
    for path in ["/units/summary", "/metrics/summary"] {
        shared
            .server
            .get(path, Some(OPS))
            .error(400, "window_too_large");
        shared
            .server
            .get(&format!("{path}?{W}"), Some(OPS))
            .error(400, "window_too_large");
    }
    rows_as(
        &shared.server,
        "/units/summary?from=2024-05-01T10:00:00Z&to=2024-05-01T11:00:00Z",
        OPS,
    );
    // window_too_large is a 400 of the parameters: before the 403.
    shared
        .server
        .get(&format!("/units/summary?{W}&station_ids=ST-03"), Some(LINE))
        .error(400, "window_too_large");
}

// ---------------------------------------------------------------------------
// Sections 3, 5, 7, 8, 9 on the summaries
// ---------------------------------------------------------------------------

#[test]
fn the_default_window_is_the_last_24_hours() {
    // SN-N1 an hour ago is in; SN-N2 25 hours ago is not.
    let got = values("/units/summary?station_ids=ST-09");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["records"], 1);
    // Only `from`: to = from + 24h.
    let from = rfc3339_from_seconds(shared().fixture.now - 26 * 3600);
    let got = values(&format!("/units/summary?station_ids=ST-09&from={from}"));
    assert_eq!(
        got[0]["records"], 1,
        "only SN-N2 is within 24h after {from}"
    );
    // Only `to`: from = to - 24h.
    let to = rfc3339_from_seconds(shared().fixture.now - 2 * 3600);
    let got = values(&format!("/units/summary?station_ids=ST-09&to={to}"));
    assert_eq!(got[0]["records"], 1, "only SN-N2 is within 24h before {to}");
}

#[test]
fn too_many_rows_is_result_too_large() {
    let shared = start(&["--max-records", "2"]);
    let get = |path: &str| shared.server.get(path, Some(OPS));
    // Five Order rows by station and slot; two rows for Retest by bucket.
    let details = get(&format!(
        "/units/summary?{W}&type=Order&group_by=station_id,slot"
    ))
    .error(400, "result_too_large");
    assert_eq!(details, json!({"max_records": 2}));
    get(&format!("/metrics/summary?{W}")).error(400, "result_too_large");
    get("/stations").error(400, "result_too_large");
    assert_eq!(
        rows_as(
            &shared.server,
            &format!("/units/summary?{W}&type=Retest&group_by=unit_type&bucket=1h"),
            OPS
        )
        .len(),
        2
    );
    // A summary of many records is one row: the limit counts rows.
    assert_eq!(
        rows_as(
            &shared.server,
            &format!("/metrics/summary?{W}&names=v&station_ids=ST-01"),
            OPS
        )
        .len(),
        1
    );
    // 403 comes before result_too_large.
    shared
        .server
        .get(&format!("/units/summary?{W}&station_ids=ST-03"), Some(LINE))
        .error(403, "forbidden");
}

#[test]
fn authentication_and_scope() {
    for path in ["/units/summary", "/metrics/summary", "/stations"] {
        let response = server().get(path, None);
        response.error(401, "unauthorized");
        assert!(response
            .header("www-authenticate")
            .is_some_and(|value| value.contains(r#"realm="stq""#)));
        let response = server().get(path, Some("nope"));
        response.error(401, "unauthorized");
        assert!(response
            .header("www-authenticate")
            .is_some_and(|value| value.contains("invalid_token")));
    }
    let details = server()
        .get(
            &format!("/metrics/summary?{W}&station_ids=ST-03,ST-01,ghost,ST-03"),
            Some(LINE),
        )
        .error(403, "forbidden");
    assert_eq!(details, json!({"stations": ["ST-03", "ghost"]}));
    // No token: 401 before any 400.
    server()
        .get(&format!("/units/summary?{W}&bucket=0m&limit=1"), None)
        .error(401, "unauthorized");
    // A bad parameter is a 400 before the 403.
    server()
        .get(
            &format!("/units/summary?{W}&station_ids=ST-03&bucket=0m"),
            Some(LINE),
        )
        .error(400, "invalid_parameter");
    // A token sees only its stations.
    let got: Vec<Value> = rows_as(server(), &format!("/units/summary?{W}"), ST03)
        .iter()
        .map(Ordered::value)
        .collect();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["station_id"], "ST-03");
    let mut query = window();
    query.scope = Some(vec!["ST-01".into(), "ST-02".into()]);
    query.group_by = model::group_by_list(&["unit_type"]);
    model::compare_rows(
        &rows_as(
            server(),
            &format!("/units/summary?{W}&group_by=unit_type"),
            LINE,
        ),
        &reference_units(&query, &["pass"]),
    )
    .unwrap();
}

/// The one weak `ETag` of a response.
fn etag(response: &Response) -> String {
    let tags = response.header_all("etag");
    assert_eq!(tags.len(), 1, "{}", response.context());
    assert!(tags[0].starts_with("W/\""), "{}", response.context());
    tags[0].to_owned()
}

#[test]
fn summaries_carry_etags_of_their_answer_and_304_on_a_match() {
    for path in [
        format!("/units/summary?{W}&bucket=1h"),
        format!("/metrics/summary?{W}&names=v"),
        "/stations".to_owned(),
    ] {
        let first = server().get(&path, Some(OPS));
        let tag = etag(&first);
        let again = server().get(&path, Some(OPS));
        assert_eq!(etag(&again), tag, "{path}");
        let not_modified = server().request_as("GET", &path, Some(OPS), &[("If-None-Match", &tag)]);
        assert_eq!(not_modified.status, 304, "{}", not_modified.context());
        assert!(not_modified.body.is_empty());
        let head = server().request_as("HEAD", &path, Some(OPS), &[]);
        assert_eq!(head.status, 200, "{}", head.context());
        assert!(head.body.is_empty());
        assert_eq!(etag(&head), tag, "{path}: HEAD");
    }
    // Equal answers spelled differently: equal tags.
    let spellings = [
        format!("/units/summary?{W}"),
        format!("/units/summary?{W}&group_by=station_id,station_id"),
        "/units/summary?to=2024-05-02T02:00:00%2B02:00&from=1714521600000&group_by=".to_owned(),
        format!(
            "/units/summary?{W}&station_ids=ST-01,B,ST-02,ST-03,ST-04,ST-05,ST-10,ST-2,st-1,ST-09"
        ),
    ];
    let tags: Vec<String> = spellings
        .iter()
        .map(|path| etag(&server().get(path, Some(OPS))))
        .collect();
    for (path, tag) in spellings.iter().zip(&tags) {
        assert_eq!(tag, &tags[0], "{path}");
    }
    // Other answers: other tags.
    let others = [
        format!("/units/summary?{W}&bucket=1d"),
        format!("/units/summary?{W}&group_by=station_id,slot"),
        format!("/units/summary?{W}&station_ids=ST-01"),
        format!("/metrics/summary?{W}"),
    ];
    for path in &others {
        assert_ne!(etag(&server().get(path, Some(OPS))), tags[0], "{path}");
    }
    // Same rows from two endpoints are still two answers: both empty.
    let empty_units =
        etag(&server().get(&format!("/units/summary?{W}&station_ids=ghost"), Some(OPS)));
    let empty_metrics = etag(&server().get(
        &format!("/metrics/summary?{W}&station_ids=ghost"),
        Some(OPS),
    ));
    assert_ne!(empty_units, empty_metrics);
}

#[test]
fn the_bucket_changes_the_tag_even_when_rows_are_alike() {
    // 1d and 3d: one Retest row each; the 3d bucket starts on 2024-04-29.
    let a = etag(&server().get(
        &format!("/units/summary?{W}&type=Retest&group_by=unit_type&bucket=1d"),
        Some(OPS),
    ));
    let b = etag(&server().get(
        &format!("/units/summary?{W}&type=Retest&group_by=unit_type&bucket=3d"),
        Some(OPS),
    ));
    assert_ne!(a, b);
}

#[test]
fn the_envelope_is_data_message_meta_without_next_cursor() {
    for path in [
        format!("/units/summary?{W}"),
        format!("/metrics/summary?{W}"),
        "/stations".to_owned(),
    ] {
        let envelope = server().get(&path, Some(OPS)).ok();
        assert_summary_envelope(&envelope);
        assert!(!envelope.data.is_empty(), "{path}");
    }
}

#[test]
fn only_get_and_head() {
    for path in ["/units/summary", "/metrics/summary", "/stations"] {
        let response = server().request_as("POST", path, Some(OPS), &[]);
        response.error(405, "method_not_allowed");
        assert_eq!(response.header("allow"), Some("GET, HEAD"));
    }
    for path in [
        "/units/summary/",
        "/units/summaries",
        "/stations/ST-01",
        "/Stations",
    ] {
        server().get(path, Some(OPS)).error(404, "not_found");
    }
}

#[test]
fn too_many_station_ids_on_the_summaries_and_stations() {
    let shared = start(&["--max-stations", "2"]);
    for path in ["/units/summary", "/metrics/summary", "/stations"] {
        shared
            .server
            .get(&format!("{path}?station_ids=ST-01,ST-02,ghost"), Some(OPS))
            .error(400, "too_many_stations");
        // Duplicates are one id.
        rows_as(
            &shared.server,
            &format!("{path}?station_ids=ST-01,ST-02,ST-01"),
            OPS,
        );
    }
}

/// `value` as written on disk (JSON text) and whether CONTRACT 10.2 calls it
/// numeric: a finite decimal number in JSON number syntax, also with a leading `+`.
const NUMERIC_CASES: &[(&str, bool)] = &[
    ("0", true),
    ("-0", true),
    (r#""-0""#, true),
    (r#""+0""#, true),
    (r#""-0.0""#, true),
    (r#""+1E+2""#, true),
    (r#""+01""#, false),
    (r#""+.5""#, false),
    (r#""+3.5""#, true),
    (r#""1.5e-3""#, true),
    (r#""1E5""#, true),
    (r#""1e+5""#, true),
    (r#""-1.25E-2""#, true),
    ("1.7976931348623157e308", true),
    (r#""1e-400""#, true),
    ("123456789012345678901234567890.5", true),
    (r#""01""#, false),
    (r#""-01""#, false),
    (r#""00""#, false),
    (r#""+""#, false),
    (r#""-""#, false),
    (r#""""#, false),
    (r#"" 1""#, false),
    (r#""1 ""#, false),
    (r#""\t1""#, false),
    (r#"".5""#, false),
    (r#""5.""#, false),
    (r#""1.e5""#, false),
    (r#""1e""#, false),
    (r#""1e+""#, false),
    (r#""+-1""#, false),
    (r#""++1""#, false),
    (r#""--1""#, false),
    (r#""0x10""#, false),
    (r#""1_0""#, false),
    (r#""1,5""#, false),
    (r#""0.0.1""#, false),
    (r#""inf""#, false),
    (r#""Infinity""#, false),
    (r#""-Infinity""#, false),
    (r#""NaN""#, false),
    (r#""nan""#, false),
    (r#""١""#, false),
    (r#""１""#, false),
    ("1e400", false),
    ("-1e400", false),
    (r#""1e400""#, false),
    (r#""1.8e308""#, false),
];

#[test]
fn which_values_are_numeric() {
    let lines: Vec<String> = NUMERIC_CASES
        .iter()
        .enumerate()
        .map(|(index, (value, _))| {
            metric(
                "ST-01",
                "2024-05-01T10:00:00Z",
                &format!("n{index:02}"),
                Some(value),
                None,
                None,
            )
        })
        .collect();
    let fixture = Fixture::from_files(&[FileSpec::plain("n.metrics.jsonl", self::lines(&lines))]);
    let server = Server::start(&fixture, &[]);
    let got: Vec<Value> = rows_as(&server, &format!("/metrics/summary?{W}"), OPS)
        .iter()
        .map(Ordered::value)
        .collect();
    let mut wrong = Vec::new();
    for (index, (value, numeric)) in NUMERIC_CASES.iter().enumerate() {
        let row = &got[index];
        assert_eq!(row["name"], format!("n{index:02}"));
        if row["numeric"] != json!(u64::from(*numeric)) {
            wrong.push(format!("{value}: {row}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "numeric wrongly decided:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn statistics_stay_finite_near_the_largest_double() {
    let value = "1e308";
    let lines: Vec<String> = (0..3)
        .map(|minute| {
            metric(
                "ST-01",
                &format!("2024-05-01T10:0{minute}:00Z"),
                "huge",
                Some(value),
                Some("0"),
                Some("1.5e308"),
            )
        })
        .collect();
    let fixture = Fixture::from_files(&[FileSpec::plain("n.metrics.jsonl", self::lines(&lines))]);
    let server = Server::start(&fixture, &[]);
    let row = rows_as(&server, &format!("/metrics/summary?{W}"), OPS)[0].value();
    for field in ["min", "max", "mean"] {
        assert!(close(&row[field], 1e308), "{field}: {row}");
    }
    assert!(close(&row["stddev"], 0.0), "{row}");
    assert_eq!(row["cpk"], Value::Null, "{row}");
}

#[test]
fn buckets_before_the_epoch_start_at_or_before_their_records() {
    let lines = lines(&[
        unit(
            "ST-01",
            "S1",
            Some("SN-1"),
            "1969-12-31T23:59:30Z",
            "Old",
            "pass",
        ),
        unit(
            "ST-01",
            "S1",
            Some("SN-2"),
            "1969-12-31T23:59:59.999999999Z",
            "Old",
            "pass",
        ),
        unit(
            "ST-01",
            "S1",
            Some("SN-3"),
            "1970-01-01T00:00:00Z",
            "Old",
            "pass",
        ),
        unit(
            "ST-01",
            "S1",
            Some("SN-4"),
            "0001-01-01T00:00:00Z",
            "Old",
            "pass",
        ),
        unit(
            "ST-01",
            "S1",
            Some("SN-5"),
            "1969-12-25T12:00:00+01:00",
            "Old",
            "pass",
        ),
    ]);
    let fixture = Fixture::from_files(&[FileSpec::plain("old.units.jsonl", lines)]);
    let server = Server::start(&fixture, &[]);
    let starts = |window: &str, bucket: &str| -> Vec<String> {
        rows_as(
            &server,
            &format!("/units/summary?{window}&bucket={bucket}"),
            OPS,
        )
        .iter()
        .map(|row| row.value()["bucket_start"].as_str().unwrap().to_owned())
        .collect()
    };
    let near = "from=1969-12-31T00:00:00Z&to=1970-01-02T00:00:00Z";
    assert_eq!(
        starts(near, "1m"),
        ["1969-12-31T23:59:00Z", "1970-01-01T00:00:00Z"]
    );
    assert_eq!(
        starts(near, "1d"),
        ["1969-12-31T00:00:00Z", "1970-01-01T00:00:00Z"]
    );
    // 1969-12-25T11:00Z: the 7-day bucket before the epoch's starts on 12-25.
    let week = "from=1969-12-20T00:00:00Z&to=1970-01-02T00:00:00Z";
    assert_eq!(
        starts(week, "7d"),
        ["1969-12-25T00:00:00Z", "1970-01-01T00:00:00Z"]
    );
    // Year 1: 719162 days before the epoch; 31-day buckets on the epoch's grid.
    let far = "from=0001-01-01T00:00:00Z&to=0001-01-02T00:00:00Z";
    let mut query = SummaryQuery::new(
        instant("0001-01-01T00:00:00Z"),
        instant("0001-01-02T00:00:00Z"),
    );
    query.bucket = Some(model::bucket_nanos("31d"));
    let want = model::units_summary(&fixture.records, &query, &["pass".to_owned()]);
    assert_eq!(
        want[0][1].1, "0000-12-25T00:00:00Z",
        "the model's own arithmetic"
    );
    assert_eq!(starts(far, "31d"), ["0000-12-25T00:00:00Z"]);
}

#[test]
fn a_long_query_string_is_414_on_summaries_too() {
    let long = "x".repeat(9000);
    for path in ["/units/summary", "/metrics/summary", "/stations"] {
        let uri = format!("{path}?station_ids={long}");
        error(&uri, 414, "uri_too_long");
    }
}

/// With `fault-injection`: a summary that runs longer than `--request-timeout` is a
/// 503 `timeout`; a shard that panics or dies under a summary is a 500
/// `internal_error` for that request alone, and the next summary is whole.
#[cfg(feature = "fault-injection")]
#[test]
fn summaries_are_bounded_and_isolated_like_the_record_endpoints() {
    let shared = start(&["--request-timeout", "300ms", "--shards", "2"]);
    let server = &shared.server;
    let with = |path: &str, fault: &str| {
        server.request_as("GET", path, Some(OPS), &[("X-Stq-Fault", fault)])
    };
    for path in [
        format!("/units/summary?{W}"),
        format!("/metrics/summary?{W}&bucket=1h"),
        "/stations".to_owned(),
    ] {
        let want = rows_as(server, &path, OPS);
        with(&path, "delay=600000").error(503, "timeout");
        for fault in ["shard-panic", "shard-death", "handler-panic"] {
            let details = with(&path, fault).error(500, "internal_error");
            assert!(
                details["request_id"].is_string(),
                "{path} {fault}: {details}"
            );
            assert_eq!(rows_as(server, &path, OPS), want, "{path} after {fault}");
        }
    }
}

/// After a reload (a file grown in place and a new file), the summaries answer
/// what a fresh start on the new files would: new stations, new result values (a
/// pass only by `--pass-results`, ignoring case), retests appended to known units.
#[test]
fn summaries_after_a_reload_answer_from_the_new_files() {
    let before = lines(&[
        unit(
            "ST-01",
            "S1",
            Some("SN-R"),
            "2024-05-01T10:00:00Z",
            "Reload",
            "fail",
        ),
        unit(
            "ST-01",
            "S1",
            Some("SN-S"),
            "2024-05-01T10:05:00Z",
            "Reload",
            "pass",
        ),
    ]);
    let grown = lines(&[
        unit(
            "ST-02",
            "S1",
            Some("SN-R"),
            "2024-05-01T11:00:00Z",
            "Reload",
            "oK",
        ),
        unit(
            "ST-06",
            "S1",
            Some("SN-Q"),
            "2024-05-01T09:00:00Z",
            "Reload",
            "Good",
        ),
    ]);
    let metrics = lines(&[
        metric(
            "ST-06",
            "2024-05-01T10:00:00Z",
            "v",
            Some("1"),
            Some("0"),
            Some("3"),
        ),
        metric(
            "ST-06",
            "2024-05-01T10:30:00Z",
            "v",
            Some("2.5"),
            Some("0"),
            Some("3"),
        ),
    ]);
    let fixture = Fixture::from_files(&[FileSpec::plain("r.units.jsonl", before.clone())]);
    let server = Server::start(&fixture, &["--pass-results", "ok,GOOD"]);
    let pass = ["ok".to_owned(), "GOOD".to_owned()];
    let units_path = format!("/units/summary?{W}&group_by=unit_type,station_id&bucket=1h");
    let metrics_path = format!("/metrics/summary?{W}&group_by=slot");
    let mut query = window();
    query.group_by = model::group_by_list(&["unit_type", "station_id"]);
    query.bucket = Some(model::bucket_nanos("1h"));
    let mut metrics_query = window();
    metrics_query.group_by = model::group_by_list(&["slot"]);
    let check = |files: &[FileSpec]| {
        let records = crate::common::load(files);
        model::compare_rows(
            &rows_as(&server, &units_path, OPS),
            &model::units_summary(&records, &query, &pass),
        )
        .unwrap();
        model::compare_rows(
            &rows_as(&server, &metrics_path, OPS),
            &model::metrics_summary(&records, &metrics_query),
        )
        .unwrap();
        model::compare_rows(
            &rows_as(&server, "/stations", OPS),
            &model::stations(&records, None, None),
        )
        .unwrap();
    };
    check(&[FileSpec::plain("r.units.jsonl", before.clone())]);
    let generation = server.generation();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(fixture.snapshots.join("r.units.jsonl"))
        .unwrap();
    std::io::Write::write_all(&mut file, grown.as_bytes()).unwrap();
    drop(file);
    std::fs::write(fixture.snapshots.join("r.metrics.jsonl"), &metrics).unwrap();
    server.signal("HUP");
    server.wait_for_generation_after(generation);
    let after = [
        FileSpec::plain("r.metrics.jsonl", metrics),
        FileSpec::plain("r.units.jsonl", format!("{before}{grown}")),
    ];
    check(&after);
    // SN-R: fail on ST-01 then "oK" on ST-02; by unit_type alone one unit whose
    // final attempt passes; SN-Q's "Good" passes.
    let got = values(&format!(
        "/units/summary?{W}&type=Reload&group_by=unit_type"
    ));
    assert_eq!(got.len(), 0, "the shared server has no Reload records");
    let got: Vec<Value> = rows_as(
        &server,
        &format!("/units/summary?{W}&type=Reload&group_by=unit_type"),
        OPS,
    )
    .iter()
    .map(Ordered::value)
    .collect();
    assert_eq!(
        (
            &got[0]["units"],
            &got[0]["first_pass"],
            &got[0]["final_pass"]
        ),
        (&json!(3), &json!(1), &json!(2)),
        "{got:?}"
    );
}

#[test]
fn another_process_tags_the_same_summary_alike() {
    let other = start(&[]);
    for path in [
        format!("/units/summary?{W}&bucket=15m&group_by=slot,mode"),
        format!("/metrics/summary?{W}&bucket=1h"),
        "/stations?station_ids=ST-01,ST-02".to_owned(),
    ] {
        let here = etag(&server().get(&path, Some(OPS)));
        let there = other.server.get(&path, Some(OPS));
        assert_eq!(etag(&there), here, "{path}");
        let not_modified =
            other
                .server
                .request_as("GET", &path, Some(OPS), &[("If-None-Match", &here)]);
        assert_eq!(not_modified.status, 304, "{}", not_modified.context());
    }
}

/// The files under `directory` (recursively) as the reference reads them, sorted
/// by relative path; `.gz` files decompressed.
fn read_snapshot(directory: &std::path::Path) -> Vec<FileSpec> {
    fn walk(root: &std::path::Path, directory: &std::path::Path, out: &mut Vec<FileSpec>) {
        for entry in std::fs::read_dir(directory).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
                continue;
            }
            let relative = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let bytes = std::fs::read(&path).unwrap();
            let text = if relative.ends_with(".gz") {
                let mut text = String::new();
                std::io::Read::read_to_string(
                    &mut flate2::read::MultiGzDecoder::new(&bytes[..]),
                    &mut text,
                )
                .unwrap();
                text
            } else {
                String::from_utf8(bytes).unwrap()
            };
            out.push(FileSpec::plain(relative.trim_end_matches(".gz"), text));
        }
    }
    let mut files = Vec::new();
    walk(directory, directory, &mut files);
    files.sort_by(|a, b| a.relative_path.as_bytes().cmp(b.relative_path.as_bytes()));
    files
}

/// `stq gen`'s realistic data (retests, every slot and mode, limits as numbers):
/// every summary equals the reference's, in many groupings and buckets.
#[test]
fn generated_data_summarises_as_the_reference_says() {
    let directory = crate::common::temporary_directory();
    let snapshots = directory.path().join("snap");
    let output = crate::common::run(
        &[
            "gen",
            "--out",
            &crate::common::path_string(&snapshots),
            "--stations",
            "3",
            "--days",
            "2",
            "--units-per-hour",
            "4",
            "--seed",
            "13",
            "--end",
            "2026-11-20T00:00:00Z",
        ],
        None,
        &[],
        std::time::Duration::from_secs(120),
    );
    assert!(output.status.success(), "{output:?}");
    let tokens = directory.path().join("tokens.json");
    std::fs::write(&tokens, crate::common::tokens_json()).unwrap();
    let records = crate::common::load(&read_snapshot(&snapshots));
    assert!(records.len() > 1000, "{} records", records.len());
    let server = Server::spawn(
        &crate::common::serve_args(&snapshots, &tokens, &["--shards", "3"]),
        &[],
    );
    let window = "from=2026-11-18T06:00:00Z&to=2026-11-19T18:00:00Z";
    let mut base = SummaryQuery::new(
        instant("2026-11-18T06:00:00Z"),
        instant("2026-11-19T18:00:00Z"),
    );
    let pass = ["pass".to_owned()];
    for (group_by, bucket) in [
        ("station_id", None),
        ("unit_type", Some("1h")),
        ("mode,slot", Some("15m")),
        ("slot,station_id,unit_type,mode", Some("1d")),
        ("unit_type", Some("7d")),
    ] {
        base.group_by = model::group_by_list(&group_by.split(',').collect::<Vec<_>>());
        base.bucket = bucket.map(model::bucket_nanos);
        let bucket_param = bucket.map_or(String::new(), |b| format!("&bucket={b}"));
        let path = format!("/units/summary?{window}&group_by={group_by}{bucket_param}");
        model::compare_rows(
            &rows_as(&server, &path, OPS),
            &model::units_summary(&records, &base, &pass),
        )
        .unwrap_or_else(|difference| panic!("{path}: {difference}"));
    }
    for (group_by, bucket) in [
        ("station_id", None),
        ("slot", Some("1h")),
        ("unit,station_id", Some("1d")),
    ] {
        base.group_by = model::group_by_list(&group_by.split(',').collect::<Vec<_>>());
        base.bucket = bucket.map(model::bucket_nanos);
        let bucket_param = bucket.map_or(String::new(), |b| format!("&bucket={b}"));
        let path = format!("/metrics/summary?{window}&group_by={group_by}{bucket_param}");
        model::compare_rows(
            &rows_as(&server, &path, OPS),
            &model::metrics_summary(&records, &base),
        )
        .unwrap_or_else(|difference| panic!("{path}: {difference}"));
    }
    model::compare_rows(
        &rows_as(&server, "/stations", OPS),
        &model::stations(&records, None, None),
    )
    .unwrap();
}

#[test]
fn summaries_are_compressed_on_request_and_carry_the_cache_headers() {
    let path = format!("/units/summary?{W}&bucket=1h");
    let plain = server().get(&path, Some(OPS)).ok();
    assert_eq!(
        plain.response.header("cache-control"),
        Some("private, no-cache")
    );
    assert_eq!(
        plain.response.header("vary"),
        Some("Authorization, Accept-Encoding, Accept")
    );
    let response = ureq::AgentBuilder::new()
        .build()
        .get(&server().url(&path))
        .set("Authorization", &format!("Bearer {OPS}"))
        .set("Accept-Encoding", "gzip")
        .call()
        .unwrap();
    assert_eq!(response.header("content-encoding"), Some("gzip"));
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut response.into_reader(), &mut bytes).unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text)
        .unwrap();
    let decoded: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(decoded["data"], Value::Array(plain.data));
    // HEAD with the tag: 304 too.
    let tag = etag(&plain.response);
    let head = server().request_as("HEAD", &path, Some(OPS), &[("If-None-Match", &tag)]);
    assert_eq!(head.status, 304, "{}", head.context());
}

// ---------------------------------------------------------------------------
// Issue 23: what revision 3 of section 10 adds, over a fixture of its own
// ---------------------------------------------------------------------------

/// Issue 23's fixture. Unit type `Dst`: one output a serial around Berlin's
/// daylight-saving changes of 2026 (forward at 01:00Z on 03-29, back at 01:00Z on
/// 10-25). Unit type `Cycle`: retests and the pairing of inputs with outputs. Metric
/// names `cur`, `both`, `upper_only`, `lower_only`: failing units and capability.
fn files_23() -> Vec<FileSpec> {
    let dst = |serial: &str, at: &str| unit("DST", "S1", Some(serial), at, "Dst", "pass");
    let dst_units = lines(&[
        dst("D01", "2026-03-28T22:30:00Z"),
        dst("D02", "2026-03-28T23:30:00Z"),
        dst("D03", "2026-03-29T00:59:59Z"),
        dst("D04", "2026-03-29T01:00:00Z"),
        dst("D05", "2026-03-29T21:59:59Z"),
        dst("D06", "2026-03-29T22:00:00Z"),
        dst("D07", "2026-10-24T21:59:59Z"),
        dst("D08", "2026-10-24T22:00:00Z"),
        dst("D09", "2026-10-25T00:30:00Z"),
        dst("D10", "2026-10-25T01:30:00Z"),
        dst("D11", "2026-10-25T02:00:00Z"),
        dst("D12", "2026-10-25T22:59:59Z"),
        dst("D13", "2026-10-25T23:00:00Z"),
    ]);
    let cycle = |slot: &str, serial: &str, at: &str, direction: &str, result: &str| {
        let at = format!("2024-05-01T{at}Z");
        unit_with(
            "CY",
            slot,
            Some(serial),
            &at,
            "Cycle",
            direction,
            result,
            "prod",
        )
    };
    let cycle_units = lines(&[
        // SN-1: input, then output 90 s later.
        cycle("S1", "SN-1", "10:00:00", "input", ""),
        cycle("S1", "SN-1", "10:01:30", "output", "pass"),
        // An input with an empty serial pairs with nothing; SN-2 has no input.
        cycle("S1", "", "10:05:00", "input", ""),
        cycle("S1", "SN-2", "10:06:00", "output", "pass"),
        cycle("S1", "", "10:06:30", "output", "pass"),
        // SN-3: two inputs before one output: the later one (180 s); then an input
        // after that output pairs with the next (240 s); a third attempt has none.
        cycle("S1", "SN-3", "10:10:00", "input", ""),
        cycle("S1", "SN-3", "10:12:00", "input", ""),
        cycle("S1", "SN-3", "10:15:00", "output", "fail"),
        cycle("S1", "SN-3", "10:16:00", "input", ""),
        cycle("S1", "SN-3", "10:20:00", "output", "pass"),
        cycle("S1", "SN-3", "10:25:00", "output", "fail"),
        // SN-4: an output without an input.
        cycle("S1", "SN-4", "10:26:00", "output", "pass"),
        // SN-5: the input is on another slot.
        cycle("S2", "SN-5", "10:30:00", "input", ""),
        cycle("S1", "SN-5", "10:31:00", "output", "pass"),
        // SN-6: input and output at one instant, the input first: 0 s.
        cycle("S1", "SN-6", "10:40:00", "input", ""),
        cycle("S1", "SN-6", "10:40:00", "output", "pass"),
        // SN-7: passes at its third attempt.
        cycle("S1", "SN-7", "10:50:00", "output", "fail"),
        cycle("S1", "SN-7", "10:51:00", "output", "FAIL"),
        cycle("S1", "SN-7", "10:52:00", "output", "pass"),
        // SN-8: the output's bucket holds the cycle time (90 s, in the 11:00 hour).
        cycle("S1", "SN-8", "10:59:00", "input", ""),
        cycle("S1", "SN-8", "11:00:30", "output", "pass"),
    ]);
    let measure = |serial: Option<&str>, minute: u32, name: &str, value: &str, lower, upper| {
        let mut line = metric(
            "CY",
            &format!("2024-05-01T12:{minute:02}:00Z"),
            name,
            Some(value),
            lower,
            upper,
        );
        if let Some(serial) = serial {
            line = line.replacen('{', &format!(r#"{{"unit_serial":"{serial}","#), 1);
        }
        line
    };
    let (zero, ten) = (Some("0"), Some("10"));
    let metric_lines = lines(&[
        // cur: limits 0 to 10; out of limits: SN-1 once, SN-2 twice, an empty and
        // an absent serial: five records, two failing units.
        measure(Some("SN-1"), 0, "cur", "5", zero, ten),
        measure(Some("SN-1"), 1, "cur", "11", zero, ten),
        measure(Some("SN-2"), 2, "cur", "12", zero, ten),
        measure(Some("SN-2"), 3, "cur", "-1", zero, ten),
        measure(Some(""), 4, "cur", "20", zero, ten),
        measure(None, 5, "cur", "30", zero, ten),
        measure(Some("SN-3"), 6, "cur", "4", zero, ten),
        // 1, 2, 3: mean 2, stddev 1.
        measure(Some("SN-1"), 0, "both", "1", zero, Some("6")),
        measure(Some("SN-2"), 1, "both", "2", zero, Some("6")),
        measure(Some("SN-3"), 2, "both", "3", zero, Some("6")),
        measure(Some("SN-1"), 0, "upper_only", "1", None, Some("5")),
        measure(Some("SN-2"), 1, "upper_only", "2", None, Some("5")),
        measure(Some("SN-3"), 2, "upper_only", "3", None, Some("5")),
        measure(Some("SN-1"), 0, "lower_only", "1", zero, Some(r#""n/a""#)),
        measure(Some("SN-2"), 1, "lower_only", "2", zero, Some(r#""n/a""#)),
        measure(Some("SN-3"), 2, "lower_only", "3", zero, Some(r#""n/a""#)),
    ]);
    vec![
        FileSpec::plain("cycle.units.jsonl", cycle_units),
        FileSpec::plain("dst.units.jsonl", dst_units),
        FileSpec::plain("cy.metrics.jsonl", metric_lines),
    ]
}

fn shared_23() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let fixture = Fixture::from_files(&files_23());
        let server = Server::start(&fixture, &["--shards", "2"]);
        Shared { fixture, server }
    })
}

#[track_caller]
fn values_23(path: &str) -> Vec<Value> {
    rows_as(&shared_23().server, path, OPS)
        .iter()
        .map(Ordered::value)
        .collect()
}

/// `(bucket_start, records)` of each row.
#[track_caller]
fn buckets_23(path: &str) -> Vec<(String, u64)> {
    values_23(path)
        .iter()
        .map(|row| {
            (
                row["bucket_start"].as_str().unwrap().to_owned(),
                row["records"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn starts(rows: &[(&str, u64)]) -> Vec<(String, u64)> {
    rows.iter()
        .map(|(start, records)| (start.to_string(), *records))
        .collect()
}

/// The window of a query string that starts `from=...&to=...`.
fn window_of(query: &str) -> SummaryQuery {
    let mut pairs = query.split('&').map(|pair| pair.split_once('=').unwrap().1);
    let from = instant(pairs.next().unwrap());
    SummaryQuery::new(from, instant(pairs.next().unwrap()))
}

const SPRING: &str = "from=2026-03-28T00:00:00Z&to=2026-03-31T00:00:00Z&type=Dst";
const FALL: &str = "from=2026-10-24T00:00:00Z&to=2026-10-27T00:00:00Z&type=Dst";

#[test]
fn issue_23_berlin_days_are_23_and_25_hours_long_across_daylight_saving_changes() {
    let tz = "tz=Europe/Berlin&bucket=1d";
    assert_eq!(
        buckets_23(&format!("/units/summary?{SPRING}&{tz}")),
        starts(&[
            ("2026-03-28T00:00:00+01:00", 1),
            // 23:30Z on the 28th to 21:59:59Z on the 29th: local midnight to midnight.
            ("2026-03-29T00:00:00+01:00", 4),
            ("2026-03-30T00:00:00+02:00", 1),
        ])
    );
    assert_eq!(
        buckets_23(&format!("/units/summary?{FALL}&{tz}")),
        starts(&[
            ("2026-10-24T00:00:00+02:00", 1),
            ("2026-10-25T00:00:00+02:00", 5),
            ("2026-10-26T00:00:00+01:00", 1),
        ])
    );
}

#[test]
fn issue_23_berlin_hours_skip_the_gap_and_keep_the_repeated_hour_together() {
    let tz = "tz=Europe/Berlin&bucket=1h";
    // 02:00 does not exist on 03-29: the hour after 01:00+01:00 starts at 03:00+02:00.
    assert_eq!(
        buckets_23(&format!("/units/summary?{SPRING}&{tz}")),
        starts(&[
            ("2026-03-28T23:00:00+01:00", 1),
            ("2026-03-29T00:00:00+01:00", 1),
            ("2026-03-29T01:00:00+01:00", 1),
            ("2026-03-29T03:00:00+02:00", 1),
            ("2026-03-29T23:00:00+02:00", 1),
            ("2026-03-30T00:00:00+02:00", 1),
        ])
    );
    // 02:00 happens twice on 10-25: its bucket starts at the first and holds both
    // 02:30s (00:30Z and 01:30Z).
    assert_eq!(
        buckets_23(&format!("/units/summary?{FALL}&{tz}")),
        starts(&[
            ("2026-10-24T23:00:00+02:00", 1),
            ("2026-10-25T00:00:00+02:00", 1),
            ("2026-10-25T02:00:00+02:00", 2),
            ("2026-10-25T03:00:00+01:00", 1),
            ("2026-10-25T23:00:00+01:00", 1),
            ("2026-10-26T00:00:00+01:00", 1),
        ])
    );
}

#[test]
fn issue_23_a_half_hour_offset_cuts_days_and_hours_at_its_own_midnight() {
    assert_eq!(
        buckets_23(&format!(
            "/units/summary?{SPRING}&tz=Asia/Kolkata&bucket=1d"
        )),
        starts(&[
            ("2026-03-29T00:00:00+05:30", 4),
            ("2026-03-30T00:00:00+05:30", 2),
        ])
    );
    // 00:59:59Z and 01:00Z are 06:29:59 and 06:30 there: one hour's bucket.
    assert_eq!(
        buckets_23(&format!(
            "/units/summary?{SPRING}&tz=Asia%2FKolkata&bucket=1h"
        )),
        starts(&[
            ("2026-03-29T04:00:00+05:30", 1),
            ("2026-03-29T05:00:00+05:30", 1),
            ("2026-03-29T06:00:00+05:30", 2),
            ("2026-03-30T03:00:00+05:30", 2),
        ])
    );
}

#[test]
fn issue_23_tz_without_bucket_changes_nothing_and_utc_keeps_the_z_form() {
    for path in [
        format!("/units/summary?{W}"),
        format!("/metrics/summary?{W}&group_by=slot"),
    ] {
        assert_eq!(
            values(&format!("{path}&tz=Asia/Kolkata")),
            values(&path),
            "{path}"
        );
    }
    let hourly = format!("/units/summary?{W}&bucket=1h");
    assert_eq!(values(&format!("{hourly}&tz=UTC")), values(&hourly));
    // UTC by another name is a zone like any other: its offset is written.
    let other = values(&format!("{hourly}&tz=Etc/UTC"));
    let utc = values(&hourly);
    assert_eq!(other.len(), utc.len());
    for (other, utc) in other.iter().zip(&utc) {
        let written = utc["bucket_start"].as_str().unwrap().replace('Z', "+00:00");
        assert_eq!(other["bucket_start"], written);
    }
}

#[test]
fn issue_23_tz_is_one_known_iana_name_on_the_summaries_only() {
    for tz in [
        "Mars/Olympus",
        "europe/berlin",
        "%2B01:00",
        "CEST",
        "",
        "UTC&tz=UTC",
    ] {
        for path in ["/units/summary", "/metrics/summary"] {
            error(
                &format!("{path}?{W}&bucket=1h&tz={tz}"),
                400,
                "invalid_parameter",
            );
        }
    }
    for path in ["/units", "/metrics", "/stations"] {
        let window = if path == "/stations" { "" } else { W };
        error(&format!("{path}?{window}&tz=UTC"), 400, "unknown_parameter");
    }
}

#[test]
fn issue_23_buckets_in_a_zone_match_the_reference_model() {
    let shared = shared_23();
    for window in [SPRING, FALL] {
        for tz in ["Europe/Berlin", "Asia/Kolkata", "America/New_York", "UTC"] {
            for bucket in ["1m", "30m", "1h", "2h", "1d", "7d"] {
                let path = format!("/units/summary?{window}&tz={tz}&bucket={bucket}");
                let mut query = window_of(window);
                query.types = vec!["Dst".to_owned()];
                query.bucket = Some(model::bucket_nanos(bucket));
                query.tz = Some(tz.to_owned());
                let want = model::units_summary(&shared.fixture.records, &query, &["pass".into()]);
                model::compare_rows(&rows_as(&shared.server, &path, OPS), &want)
                    .unwrap_or_else(|difference| panic!("{path}: {difference}"));
            }
        }
    }
}

const CYCLE: &str =
    "from=2024-05-01T00:00:00Z&to=2024-05-02T00:00:00Z&type=Cycle&group_by=unit_type";

#[test]
fn issue_23_retests_and_second_passes() {
    let got = rows_as(&shared_23().server, &format!("/units/summary?{CYCLE}"), OPS);
    assert_eq!(got.len(), 1);
    let row = got[0].value();
    // SN-1, -2, -4, -5, -6, -8 pass at once; SN-3 fails, passes, fails; SN-7 fails
    // twice, then passes. The empty serial's output is a record but no unit.
    assert_eq!(row["records"], 13, "{row}");
    assert_eq!(row["results"], json!({"FAIL": 1, "fail": 3, "pass": 9}));
    assert_eq!(
        [
            &row["units"],
            &row["first_pass"],
            &row["second_pass"],
            &row["final_pass"],
            &row["retested"]
        ],
        [&json!(8), &json!(6), &json!(7), &json!(7), &json!(2)],
        "{row}"
    );
    assert!(close(&row["second_pass_yield"], 7.0 / 8.0), "{row}");
    assert!(close(&row["retest_rate"], 2.0 / 8.0), "{row}");
    // From 10:16 to 10:51: SN-3 passes, then fails (a retest, passed by its second
    // attempt); SN-4, -5, -6 pass; SN-7 fails once.
    let later = values_23(
        "/units/summary?from=2024-05-01T10:16:00Z&to=2024-05-01T10:51:00Z&type=Cycle&group_by=unit_type",
    );
    assert_eq!(
        (
            &later[0]["units"],
            &later[0]["first_pass"],
            &later[0]["second_pass"]
        ),
        (&json!(5), &json!(4), &json!(4)),
        "{:?}",
        later[0]
    );
    assert_eq!(later[0]["retested"], 1, "{:?}", later[0]);
}

#[test]
fn issue_23_cycle_times_pair_each_output_with_its_latest_input() {
    let got = values_23(&format!("/units/summary?{CYCLE}"));
    let row = &got[0];
    // SN-1 90 s; SN-3 180 s (the later of two inputs) and 240 s (an input after the
    // earlier output), its third attempt none; SN-6 0 s (input first, same instant);
    // SN-8 90 s. None for SN-2 (only an empty serial's input before it), SN-4 (no
    // input), SN-5 (its input on another slot), SN-7, or the empty serial.
    assert_eq!(row["cycle_count"], 5, "{row}");
    assert!(close(&row["cycle_mean_s"], 120.0), "{row}");
    // 0, 90, 90, 180, 240: ranks ceil(2.5) = 3 and ceil(4.5) = 5.
    assert!(close(&row["cycle_p50_s"], 90.0), "{row}");
    assert!(close(&row["cycle_p90_s"], 240.0), "{row}");
    assert!(close(&row["cycle_max_s"], 240.0), "{row}");
    // The output's bucket holds its cycle time: SN-8's input is at 10:59, its
    // output at 11:00:30.
    let hours = values_23(&format!("/units/summary?{CYCLE}&bucket=1h"));
    let counts: Vec<(&Value, &Value)> = hours
        .iter()
        .map(|row| (&row["bucket_start"], &row["cycle_count"]))
        .collect();
    assert_eq!(
        counts,
        [
            (&json!("2024-05-01T10:00:00Z"), &json!(4)),
            (&json!("2024-05-01T11:00:00Z"), &json!(1)),
        ]
    );
    assert!(close(&hours[1]["cycle_mean_s"], 90.0), "{:?}", hours[1]);
    // A window that starts after SN-1's input leaves its output without one.
    let cut =
        values_23("/units/summary?from=2024-05-01T10:00:01Z&to=2024-05-01T10:02:00Z&type=Cycle");
    assert_eq!(cut[0]["records"], 1);
    assert_eq!(cut[0]["cycle_count"], 0);
    assert_eq!(cut[0]["cycle_mean_s"], Value::Null);
    // `serial_number` keeps the pairs of that serial.
    let sn3 = values_23(&format!("/units/summary?{CYCLE}&serial_number=SN-3"));
    assert_eq!(sn3[0]["cycle_count"], 2);
    assert!(close(&sn3[0]["cycle_p50_s"], 180.0), "{:?}", sn3[0]);
}

#[test]
fn issue_23_units_rows_match_the_reference_model() {
    let shared = shared_23();
    for group_by in ["unit_type", "station_id,slot", "slot", "mode,unit_type"] {
        for bucket in [None, Some("15m"), Some("1h")] {
            let mut path = format!("/units/summary?{W}&group_by={group_by}");
            let mut query = window();
            query.group_by = model::group_by_list(&group_by.split(',').collect::<Vec<_>>());
            if let Some(bucket) = bucket {
                path.push_str(&format!("&bucket={bucket}"));
                query.bucket = Some(model::bucket_nanos(bucket));
            }
            let want = model::units_summary(&shared.fixture.records, &query, &["pass".into()]);
            model::compare_rows(&rows_as(&shared.server, &path, OPS), &want)
                .unwrap_or_else(|difference| panic!("{path}: {difference}"));
        }
    }
}

const METRICS_23: &str = "from=2024-05-01T00:00:00Z&to=2024-05-02T00:00:00Z&station_ids=CY";

#[test]
fn issue_23_failing_units_are_distinct_serials_of_out_of_limit_records() {
    let got = values_23(&format!("/metrics/summary?{METRICS_23}&names=cur"));
    let row = &got[0];
    // 11 (SN-1), 12 and -1 (SN-2), 20 (empty serial) and 30 (absent serial) are
    // out of 0..10: five records, two units.
    assert_eq!(row["out_of_limits"], 5, "{row}");
    assert_eq!(row["failing_units"], 2, "{row}");
    // Per minute, each row its own: SN-2 twice in two rows, the serial-less ones none.
    let minutes = values_23(&format!(
        "/metrics/summary?{METRICS_23}&names=cur&bucket=1m"
    ));
    let failing: Vec<u64> = minutes
        .iter()
        .map(|row| row["failing_units"].as_u64().unwrap())
        .collect();
    assert_eq!(failing, [0, 1, 1, 1, 0, 0, 0]);
}

#[test]
fn issue_23_cp_and_cpk_with_both_limits_and_one_sided_cpk() {
    let got = values_23(&format!(
        "/metrics/summary?{METRICS_23}&names=both,upper_only,lower_only"
    ));
    let by_name = |name: &str| got.iter().find(|row| row["name"] == name).unwrap();
    // Each: values 1, 2, 3 (mean 2, stddev 1).
    let both = by_name("both");
    assert!(close(&both["cp"], 1.0), "(6 - 0) / 6: {both}");
    assert!(close(&both["cpk"], 2.0 / 3.0), "min(4, 2) / 3: {both}");
    let upper = by_name("upper_only");
    assert_eq!(upper["limit_lower"], "");
    assert_eq!(upper["cp"], Value::Null, "{upper}");
    assert!(close(&upper["cpk"], 1.0), "(5 - 2) / 3: {upper}");
    let lower = by_name("lower_only");
    assert_eq!(lower["cp"], Value::Null, "{lower}");
    assert!(close(&lower["cpk"], 2.0 / 3.0), "(2 - 0) / 3: {lower}");
    // cur's mean is above its upper limit: a negative cpk (docs/api.md's worked
    // example: mean 81 / 7, stddev 10.565).
    let cur = &values_23(&format!("/metrics/summary?{METRICS_23}&names=cur"))[0];
    assert!(close(&cur["cp"], 0.157_753_714_242_245_7), "{cur}");
    assert!(close(&cur["cpk"], -0.049_579_738_761_848_645), "{cur}");
}

#[test]
fn issue_23_metric_rows_match_the_reference_model() {
    let shared = shared_23();
    for group_by in ["station_id", "slot,unit"] {
        for extra in ["", "&bucket=1m", "&bucket=1h&tz=Asia/Kolkata"] {
            let path = format!("/metrics/summary?{W}&group_by={group_by}{extra}");
            let mut query = window();
            query.group_by = model::group_by_list(&group_by.split(',').collect::<Vec<_>>());
            if extra.contains("1m") {
                query.bucket = Some(model::bucket_nanos("1m"));
            }
            if extra.contains("1h") {
                query.bucket = Some(model::bucket_nanos("1h"));
                query.tz = Some("Asia/Kolkata".to_owned());
            }
            let want = model::metrics_summary(&shared.fixture.records, &query);
            model::compare_rows(&rows_as(&shared.server, &path, OPS), &want)
                .unwrap_or_else(|difference| panic!("{path}: {difference}"));
        }
    }
}
