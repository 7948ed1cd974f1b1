//! CONTRACT section 15 (issue 52): `GET /metrics/control` over real HTTP against
//! the real binary.
//!
//! The fixture holds one designed series per Nelson rule (names `r1` to `r8`),
//! each charted against a baseline of ten points whose centre is 100 and whose
//! sigma is 1 (moving ranges of 1.128), so that each series' points sit at known
//! sigmas and each rule fires at known points and nowhere else. Its points lie 20
//! minutes apart across hours and sealed periods, and the server runs with
//! `--hot 1h`, so that runs and moving ranges cross tiers and blocks. A metric
//! `x` on two stations, interleaved in time, is one group by `slot`: its chart
//! runs in the contract's order across stations and shards.
//!
//! Also proved: the row's fields and formulas (against this file's own
//! arithmetic), the default baseline and `ppk` against `/metrics/summary`'s
//! `cpk`, a baseline of one point, `rules`, `violations` as the records' own
//! fields (and CSV's compact JSON text), the parameters and their errors,
//! `--max-window` on both windows, `result_too_large`, 403, HEAD, ETag/304 and
//! `wait`.

use std::sync::OnceLock;

use serde_json::{json, Value};

use crate::common::summary::{rows_of, Ordered};
use crate::common::{FileSpec, Fixture, Response, Server, LINE, OPS, ST03};

/// The window of the designed series; their baselines are before it.
const W: &str = "from=2024-06-01T01:00:00Z&to=2024-06-02T00:00:00Z";
/// The baseline window.
const B: &str = "baseline_from=2024-06-01T00:00:00Z&baseline_to=2024-06-01T01:00:00Z";

/// A designed series: its name, its values in sigmas from the centre, and the
/// (point, rule) flags the contract gives it, worked out by hand.
type Design = (&'static str, Vec<f64>, Vec<(usize, u64)>);

/// Each designed series.
fn designs() -> Vec<Design> {
    let mut above = vec![0.5; 10];
    above.extend([-0.5, 0.5]);
    let zigzag: Vec<f64> = (0..14)
        .map(|i| if i % 2 == 0 { 0.2 } else { -0.2 })
        .collect();
    let calm: Vec<f64> = (0..16)
        .map(|i| if i % 3 == 0 { 0.5 } else { -0.4 })
        .collect();
    vec![
        // Beyond 3 sigma, either side.
        ("r1", vec![0.5, 3.5, -0.5, -3.2, 0.4], vec![(1, 1), (3, 1)]),
        // The 9th and 10th of ten above.
        ("r2", above, vec![(8, 2), (9, 2)]),
        // Six rising (five rises), then a seventh; an equal pair ends it.
        (
            "r3",
            vec![-0.9, -0.7, -0.5, -0.3, -0.1, 0.1, 0.3, 0.3, 0.5],
            vec![(5, 3), (6, 3)],
        ),
        // Fourteen alternating.
        ("r4", zigzag, vec![(13, 4)]),
        // Two of three beyond 2 sigma on one side, the point among them.
        ("r5", vec![2.5, 0.1, 2.5, 0.1, -2.5, -0.1], vec![(2, 5)]),
        // Four of five beyond 1 sigma on one side.
        ("r6", vec![1.5, 1.5, 0.1, 1.5, 1.5, 0.2], vec![(4, 6)]),
        // Fifteen within 1 sigma, then a sixteenth.
        ("r7", calm, vec![(14, 7), (15, 7)]),
        // Eight beyond 1 sigma on both sides, then a ninth.
        (
            "r8",
            vec![1.5, -1.5, 1.6, 1.7, -1.5, 1.5, -1.6, 1.5, 1.4],
            vec![(7, 8), (8, 8)],
        ),
    ]
}

/// The baseline's ten values: 99.436 and 100.564 in turn.
fn baseline_values() -> Vec<f64> {
    (0..10)
        .map(|i| if i % 2 == 0 { 99.436 } else { 100.564 })
        .collect()
}

/// A metric line; `value` is written as a JSON string, as the floor writes it.
fn metric(station: &str, slot: &str, minute: u32, name: &str, value: &str) -> String {
    json!({
        "station_id": station,
        "slot": slot,
        "unit": "V",
        "unit_serial": format!("SN-{name}-{minute}"),
        "time_created": format!("2024-06-01T{:02}:{:02}:00Z", minute / 60, minute % 60),
        "name": name,
        "value": value,
        "limit_lower": "90",
        "limit_upper": "110",
    })
    .to_string()
        + "\n"
}

/// A designed series' values as the records hold them.
fn value_text(sigmas: f64) -> String {
    format!("{}", 100.0 + sigmas)
}

fn files() -> Vec<FileSpec> {
    let mut designed = String::new();
    for (name, series, _) in designs() {
        for (index, value) in baseline_values().iter().enumerate() {
            designed.push_str(&metric(
                "ST-01",
                "S1",
                index as u32 * 5,
                name,
                &value.to_string(),
            ));
        }
        for (index, sigmas) in series.iter().enumerate() {
            let minute = 60 + index as u32 * 20;
            designed.push_str(&metric("ST-01", "S1", minute, name, &value_text(*sigmas)));
        }
    }
    // One non-numeric value, which is no point.
    designed.push_str(&metric("ST-01", "S1", 59, "r1", "open"));
    // `x`: ST-01 on even minutes, ST-02 on odd ones, one slot; a jump at the end.
    let (mut first, mut second) = (String::new(), String::new());
    for minute in 60..200_u32 {
        let wave = f64::from((minute * 7) % 5) * 0.3;
        let value = if minute >= 190 { 20.0 } else { 10.0 + wave };
        let line = metric(
            if minute % 2 == 0 { "ST-01" } else { "ST-02" },
            "S9",
            minute,
            "x",
            &value.to_string(),
        );
        match minute % 2 {
            0 => first.push_str(&line),
            _ => second.push_str(&line),
        }
    }
    vec![
        FileSpec::plain("ST-01/designed.metrics.jsonl", designed),
        FileSpec::plain("ST-01/x.metrics.jsonl", first),
        FileSpec::plain("ST-02/x.metrics.jsonl", second),
    ]
}

struct Shared {
    _fixture: Fixture,
    server: Server,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let fixture = Fixture::from_files(&files());
        let server = Server::start(&fixture, &["--hot", "1h"]);
        Shared {
            _fixture: fixture,
            server,
        }
    })
}

fn server() -> &'static Server {
    &shared().server
}

fn rows(path: &str) -> Vec<Value> {
    let envelope = server().ok(path);
    assert!(envelope.meta.get("next_cursor").is_none(), "{path}");
    envelope.data
}

/// The rows of `path` with their keys in the order sent.
fn ordered_rows(path: &str) -> Vec<Ordered> {
    rows_of(&server().ok(path).response.body).unwrap()
}

fn row<'a>(rows: &'a [Value], name: &str) -> &'a Value {
    (rows.iter())
        .find(|row| row["name"] == name)
        .unwrap_or_else(|| panic!("no row of {name}: {rows:?}"))
}

#[track_caller]
fn assert_close(got: &Value, want: f64, what: &str) {
    let got = got.as_f64().unwrap_or_else(|| panic!("{what}: {got}"));
    let scale = want.abs().max(1e-9);
    assert!(
        (got - want).abs() <= 1e-9 * scale,
        "{what}: {got} against {want}"
    );
}

/// This file's own I-MR arithmetic: centre, mean moving range, sigma and the
/// sample standard deviation of `values`.
fn chart_of(values: &[f64]) -> (f64, f64, f64, f64) {
    let count = values.len() as f64;
    let center = values.iter().sum::<f64>() / count;
    let mr_mean = values
        .windows(2)
        .map(|pair| (pair[1] - pair[0]).abs())
        .sum::<f64>()
        / (count - 1.0);
    let stddev = (values
        .iter()
        .map(|value| (value - center).powi(2))
        .sum::<f64>()
        / (count - 1.0))
        .sqrt();
    (center, mr_mean, mr_mean / 1.128, stddev)
}

/// The (point, rule) flags of a row, the point as its index in `series`' times.
fn flags_of(row: &Value, times: &[String]) -> Vec<(usize, u64)> {
    (row["violations"].as_array().unwrap().iter())
        .map(|violation| {
            let time = violation["time_created"].as_str().unwrap();
            let index = times.iter().position(|known| known == time).unwrap();
            (index, violation["rule"].as_u64().unwrap())
        })
        .collect()
}

fn design_times(count: usize) -> Vec<String> {
    (0..count)
        .map(|index| {
            let minute = 60 + index * 20;
            format!("2024-06-01T{:02}:{:02}:00Z", minute / 60, minute % 60)
        })
        .collect()
}

#[test]
fn issue_52_each_rule_fires_at_its_designed_points_and_nowhere_else() {
    let rows = rows(&format!(
        "/metrics/control?{W}&{B}&names=r1,r2,r3,r4,r5,r6,r7,r8"
    ));
    assert_eq!(rows.len(), 8);
    let (center, mr_mean, sigma, stddev) = chart_of(&baseline_values());
    for (name, series, expected) in designs() {
        let row = row(&rows, name);
        let ordered = ordered_rows(&format!("/metrics/control?{W}&{B}&names={name}"));
        assert_eq!(
            ordered[0].keys(),
            [
                "station_id",
                "name",
                "points",
                "baseline_points",
                "center",
                "sigma",
                "ucl",
                "lcl",
                "mr_mean",
                "mr_ucl",
                "cpk",
                "ppk",
                "limit_lower",
                "limit_upper",
                "violations_count",
                "violations",
            ]
        );
        assert_eq!(row["station_id"], "ST-01");
        assert_eq!(row["points"], series.len(), "{name}");
        assert_eq!(row["baseline_points"], 10, "{name}");
        assert_close(&row["center"], center, "center");
        assert_close(&row["mr_mean"], mr_mean, "mr_mean");
        assert_close(&row["sigma"], sigma, "sigma");
        assert_close(&row["ucl"], center + 3.0 * sigma, "ucl");
        assert_close(&row["lcl"], center - 3.0 * sigma, "lcl");
        assert_close(&row["mr_ucl"], 3.267 * mr_mean, "mr_ucl");
        assert_close(
            &row["cpk"],
            (110.0 - center).min(center - 90.0) / (3.0 * sigma),
            "cpk",
        );
        assert_close(
            &row["ppk"],
            (110.0 - center).min(center - 90.0) / (3.0 * stddev),
            "ppk",
        );
        assert_eq!(
            (row["limit_lower"].as_str(), row["limit_upper"].as_str()),
            (Some("90"), Some("110"))
        );
        let times = design_times(series.len());
        assert_eq!(flags_of(row, &times), expected, "{name}");
        assert_eq!(row["violations_count"], expected.len(), "{name}");
        if let Some(Ordered::Array(listed)) = ordered[0].get("violations") {
            for violation in listed {
                assert_eq!(
                    violation.keys(),
                    ["rule", "time_created", "station_id", "unit_serial", "value"]
                );
            }
        }
        // Each violation is its record's fields as `/metrics` returns them.
        let records = server().ok(&format!("/metrics?{W}&names={name}")).data;
        for violation in row["violations"].as_array().unwrap() {
            let record = (records.iter())
                .find(|record| record["time_created"] == violation["time_created"])
                .unwrap();
            for field in ["time_created", "station_id", "unit_serial", "value"] {
                assert_eq!(violation[field], record[field], "{name} {field}");
            }
        }
    }
}

#[test]
fn issue_52_rules_chooses_the_rules_applied() {
    let all = rows(&format!("/metrics/control?{W}&{B}"));
    let some = rows(&format!("/metrics/control?{W}&{B}&rules=1,8&rules=2"));
    for (name, series, expected) in designs() {
        let times = design_times(series.len());
        let kept: Vec<(usize, u64)> = (expected.iter())
            .filter(|(_, rule)| [1, 2, 8].contains(rule))
            .copied()
            .collect();
        assert_eq!(flags_of(row(&some, name), &times), kept, "{name}");
        assert_eq!(row(&all, name)["violations_count"], expected.len());
        // The chart itself does not depend on the rules.
        assert_eq!(row(&some, name)["center"], row(&all, name)["center"]);
    }
}

#[test]
fn issue_52_without_a_baseline_the_window_is_its_own_and_ppk_is_the_summary_cpk() {
    let path = "from=2024-06-01T00:00:00Z&to=2024-06-02T00:00:00Z";
    let control = rows(&format!("/metrics/control?{path}"));
    let summary = server().ok(&format!("/metrics/summary?{path}")).data;
    assert_eq!(control.len(), summary.len());
    for (chart, statistics) in control.iter().zip(&summary) {
        assert_eq!(chart["name"], statistics["name"]);
        assert_eq!(chart["points"], statistics["numeric"]);
        assert_eq!(chart["baseline_points"], chart["points"]);
        assert_close(
            &chart["center"],
            statistics["mean"].as_f64().unwrap(),
            "center",
        );
        assert_close(&chart["ppk"], statistics["cpk"].as_f64().unwrap(), "ppk");
        assert_eq!(chart["limit_upper"], statistics["limit_upper"]);
    }
    // `r1`'s window holds its baseline, its series and its one non-numeric value.
    let r1 = row(&control, "r1");
    assert_eq!(r1["points"], 15);
    let values: Vec<f64> = baseline_values()
        .into_iter()
        .chain(designs()[0].1.iter().map(|sigmas| 100.0 + sigmas))
        .collect();
    let (center, mr_mean, _, _) = chart_of(&values);
    assert_close(&r1["center"], center, "center");
    assert_close(&r1["mr_mean"], mr_mean, "mr_mean");
}

#[test]
fn issue_52_a_baseline_of_one_point_charts_nothing() {
    let one = "baseline_from=2024-06-01T00:00:00Z&baseline_to=2024-06-01T00:01:00Z";
    let charted = rows(&format!("/metrics/control?{W}&{one}&names=r1"));
    let row = &charted[0];
    assert_eq!(row["baseline_points"], 1);
    for field in [
        "center", "sigma", "ucl", "lcl", "mr_mean", "mr_ucl", "cpk", "ppk",
    ] {
        assert_eq!(row[field], Value::Null, "{field}");
    }
    assert_eq!(
        (row["violations_count"].clone(), row["violations"].clone()),
        (json!(0), json!([]))
    );
    // A window without points has no row.
    let empty = "from=2024-06-01T00:00:00Z&to=2024-06-01T00:00:01Z";
    let charted = rows(&format!("/metrics/control?{empty}&names=r2"));
    assert_eq!(charted.len(), 1, "the baseline's first point is at 00:00");
    assert_eq!(
        rows("/metrics/control?from=2024-06-03T00:00:00Z&to=2024-06-04T00:00:00Z"),
        Vec::<Value>::new()
    );
}

/// `x` on two stations, one slot: grouped by slot, one chart over both in time
/// order; by station, one each.
#[test]
fn issue_52_a_group_across_stations_is_charted_in_the_contract_order() {
    let path = "from=2024-06-01T01:00:00Z&to=2024-06-01T04:00:00Z&names=x";
    let by_slot = rows(&format!("/metrics/control?{path}&group_by=slot"));
    assert_eq!(by_slot.len(), 1);
    let records = server().ok(&format!("/metrics?{path}")).data;
    let values: Vec<f64> = (records.iter())
        .map(|record| record["value"].as_str().unwrap().parse().unwrap())
        .collect();
    let (center, mr_mean, sigma, _) = chart_of(&values);
    let row = &by_slot[0];
    assert_eq!(
        (row["slot"].as_str(), row["points"].as_u64()),
        (Some("S9"), Some(140))
    );
    assert_close(&row["center"], center, "center");
    assert_close(&row["mr_mean"], mr_mean, "mr_mean");
    assert_close(&row["sigma"], sigma, "sigma");
    // The jump at the end: rule 1 on each of its ten points, in time order, of
    // both stations.
    let jumps: Vec<(&str, &str)> = (row["violations"].as_array().unwrap().iter())
        .filter(|violation| violation["rule"] == 1)
        .map(|violation| {
            (
                violation["time_created"].as_str().unwrap(),
                violation["station_id"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(jumps.len(), 10, "{row}");
    assert!(jumps.windows(2).all(|pair| pair[0].0 < pair[1].0));
    assert_eq!(jumps[0], ("2024-06-01T03:10:00Z", "ST-01"));
    assert_eq!(jumps[1], ("2024-06-01T03:11:00Z", "ST-02"));
    let by_station = rows(&format!("/metrics/control?{path}"));
    let stations: Vec<&str> = by_station
        .iter()
        .map(|row| row["station_id"].as_str().unwrap())
        .collect();
    assert_eq!(stations, ["ST-01", "ST-02"]);
    assert_eq!(by_station[0]["points"], 70);
    // group_by's order is the rows' fields' order.
    let both = ordered_rows(&format!("/metrics/control?{path}&group_by=unit,slot"));
    assert_eq!(both[0].keys()[..3], ["unit", "slot", "name"]);
}

#[test]
fn issue_52_csv_writes_violations_as_compact_json_text() {
    let path = format!("/metrics/control?{W}&{B}&names=r1&format=csv");
    let response = server().get(&path, Some(OPS));
    assert_eq!(response.status, 200, "{}", response.context());
    assert_eq!(
        response.header("content-type"),
        Some("text/csv; charset=utf-8; header=present")
    );
    let mut lines = response.body.split("\r\n");
    assert_eq!(
        lines.next(),
        Some(
            "station_id,name,points,baseline_points,center,sigma,ucl,lcl,mr_mean,mr_ucl,cpk,ppk,\
             limit_lower,limit_upper,violations_count,violations"
        )
    );
    let row = lines.next().unwrap();
    let json_rows = rows(&format!("/metrics/control?{W}&{B}&names=r1"));
    // The last field, quoted: compact JSON with its quotes doubled.
    let (head, quoted) = row.split_once(",\"").unwrap();
    assert!(head.ends_with(",90,110,2"), "{row}");
    let text = quoted.strip_suffix('"').unwrap().replace("\"\"", "\"");
    assert!(
        text.starts_with(
            r#"[{"rule":1,"time_created":"2024-06-01T01:20:00Z","station_id":"ST-01""#
        ),
        "{text}"
    );
    assert!(!text.contains(' '), "{text}");
    let parsed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(parsed, json_rows[0]["violations"]);
    assert!(row.starts_with("ST-01,r1,5,10,"), "{row}");
}

#[test]
fn issue_52_parameters_are_checked_as_the_contract_says() {
    let error =
        |path: &str, status: u16, code: &str| server().get(path, Some(OPS)).error(status, code);
    let path = |query: &str| format!("/metrics/control?{W}&{query}");
    error(
        &path("baseline_from=2024-06-01T00:00:00Z"),
        400,
        "invalid_parameter",
    );
    error(
        &path("baseline_to=2024-06-01T00:00:00Z"),
        400,
        "invalid_parameter",
    );
    let reversed = error(
        &path("baseline_from=2024-06-01T01:00:00Z&baseline_to=2024-06-01T00:00:00Z"),
        400,
        "invalid_window",
    );
    assert_eq!(
        reversed,
        json!({"baseline_from": "2024-06-01T01:00:00Z", "baseline_to": "2024-06-01T00:00:00Z"})
    );
    for rules in ["0", "9", "1,x", "01", "1.0"] {
        error(&path(&format!("rules={rules}")), 400, "invalid_parameter");
    }
    for unknown in [
        "bucket=1h",
        "tz=UTC",
        "limit=5",
        "cursor=x",
        "serial_number=SN",
    ] {
        error(&path(unknown), 400, "unknown_parameter");
    }
    error(&path("group_by=mode"), 400, "invalid_parameter");
    (server().get(&path("names=r1&station_ids=ST-03"), Some(LINE))).error(403, "forbidden");
    // Both forms of a list, `rules=` empty is every rule.
    assert_eq!(rows(&path(&format!("{B}&rules="))), rows(&path(B)));
    // A token sees only its stations.
    let mine = server()
        .get(&path("names=x&group_by=slot"), Some(ST03))
        .ok();
    assert_eq!(mine.data, Vec::<Value>::new());
    let line = server()
        .get(&path("names=x&group_by=slot"), Some(LINE))
        .ok();
    assert_eq!(line.data.len(), 1);
    assert_eq!(line.message, "1 control row");
}

#[test]
fn issue_52_max_window_and_max_records_hold_for_charts() {
    let fixture = Fixture::from_files(&files());
    let server = Server::start(&fixture, &["--max-window", "2h", "--max-records", "3"]);
    let ok = "from=2024-06-01T01:00:00Z&to=2024-06-01T03:00:00Z";
    let long_baseline = "baseline_from=2024-06-01T00:00:00Z&baseline_to=2024-06-01T03:00:00Z";
    let response = server.get(&format!("/metrics/control?{ok}&{long_baseline}"), Some(OPS));
    let body = response.error(400, "window_too_large");
    assert_eq!(body["baseline_from"], "2024-06-01T00:00:00Z", "{body}");
    server
        .get(
            "/metrics/control?from=2024-06-01T00:00:00Z&to=2024-06-01T03:00:00Z",
            Some(OPS),
        )
        .error(400, "window_too_large");
    // Nine names, one row each: more than three rows.
    server
        .get(&format!("/metrics/control?{ok}"), Some(OPS))
        .error(400, "result_too_large");
    let three = server
        .get(&format!("/metrics/control?{ok}&names=r1,r2,r3"), Some(OPS))
        .ok();
    assert_eq!(three.data.len(), 3);
}

fn etag(response: &Response) -> String {
    response.header("etag").expect("an ETag").to_owned()
}

#[test]
fn issue_52_head_etags_and_wait_as_every_summary() {
    let path = format!("/metrics/control?{W}&{B}");
    let first = server().get(&path, Some(OPS));
    let tag = etag(&first);
    let head = server().request_as("HEAD", &path, Some(OPS), &[]);
    assert_eq!((head.status, head.body.as_str()), (200, ""));
    assert_eq!(etag(&head), tag);
    let not_modified = server().request_as("GET", &path, Some(OPS), &[("If-None-Match", &tag)]);
    assert_eq!(not_modified.status, 304, "{}", not_modified.context());
    // Held for a second: nothing changes, so 304 at the end of the wait.
    let waited = server().request_as(
        "GET",
        &format!("{path}&wait=1s"),
        Some(OPS),
        &[("If-None-Match", &tag)],
    );
    assert_eq!(waited.status, 304, "{}", waited.context());
    // Another question, another tag; the summary of the same window too.
    let other = server().get(&format!("{path}&rules=1"), Some(OPS));
    assert_ne!(etag(&other), tag);
    let summary = server().get(&format!("/metrics/summary?{W}"), Some(OPS));
    let chart = server().get(&format!("/metrics/control?{W}"), Some(OPS));
    assert_ne!(etag(&summary), etag(&chart));
    assert_eq!(first.header("cache-control"), Some("private, no-cache"));
}
