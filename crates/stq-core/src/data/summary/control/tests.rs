//! A control row from whole stations: the same bytes however the records are
//! split into shards, tiers and merge orders, its limits and flags those of the
//! chart over the points in the contract's order, and its `violations` the
//! flagged records' own fields.

use serde_json::Value;

use super::super::tests::*;
use super::*;
use crate::data::summary::Digests;
use crate::data::summary::Question;
use crate::domain::zone::Zone;

fn question(fields: Vec<GroupField>, baseline: Option<Window>) -> Question {
    Question::Control(ControlQuestion {
        window: window(),
        baseline,
        names: Matcher::Any,
        grouping: Grouping {
            fields,
            bucket: None,
            zone: Zone::Utc,
        },
        rules: Rules::ALL,
    })
}

/// A metric line of `station` at `minute` past midnight of the test's day.
fn line(station: &str, minute: u32, slot: &str, value: &str) -> String {
    format!(
        r#"{{"station_id":"{station}","time_created":"2024-01-01T{:02}:{:02}:00Z","name":"v","slot":"{slot}","unit_serial":"SN-{minute}","value":"{value}","limit_lower":"-10","limit_upper":"10"}}"#,
        minute / 60,
        minute % 60
    ) + "\n"
}

/// Two stations' interleaved series over 20 hours, with one slot on both, a
/// run that rule 2 flags, a point that rule 1 flags, and a non-numeric value.
fn files() -> Vec<(String, String)> {
    let mut a = String::new();
    let mut b = String::new();
    for step in 0..240_u32 {
        let minute = step * 5;
        let wave = f64::from((step * 37) % 11) / 5.0 - 1.0;
        let value = match step {
            100..=112 => 1.5,
            150 => 9.0,
            _ => wave,
        };
        let slot = if step % 3 == 0 { "S1" } else { "S2" };
        let text = if step == 77 {
            "open".to_owned()
        } else {
            value.to_string()
        };
        match step % 2 {
            0 => a.push_str(&line("A", minute, slot, &text)),
            _ => b.push_str(&line("B", minute + 1, slot, &text)),
        }
    }
    vec![("a.metrics.jsonl".into(), a), ("b.metrics.jsonl".into(), b)]
}

fn rows(question: &Question, shards: usize, sealed: bool, reverse: bool) -> Vec<Vec<u8>> {
    let files = files();
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let hot = sealed.then(|| std::time::Duration::from_secs(3600));
    let generation = generation_sealing(&files, shards, hot);
    rendered(&generation, question, reverse, Digests::Read)
}

#[test]
fn issue_52_a_row_is_the_same_bytes_however_its_records_are_split() {
    let baseline = Window {
        from: window().from,
        to: window().from.add_seconds(6 * 3600),
    };
    for question in [
        question(vec![GroupField::StationId], None),
        question(vec![GroupField::Slot], None),
        question(Vec::new(), Some(baseline)),
    ] {
        let expected = rows(&question, 1, false, false);
        assert!(!expected.is_empty());
        for (shards, sealed, reverse) in [(1, true, false), (2, false, true), (2, true, false)] {
            assert_eq!(
                rows(&question, shards, sealed, reverse),
                expected,
                "{question:?} {shards} {sealed} {reverse}"
            );
        }
    }
}

#[test]
fn issue_52_a_group_across_stations_is_charted_in_the_contract_order() {
    let rows = rows(&question(Vec::new(), None), 2, true, false);
    assert_eq!(rows.len(), 1);
    let row: Value = serde_json::from_slice(&rows[0]).unwrap();
    // The numeric values of both stations in time order (B's a minute after A's).
    let files = files();
    let mut points: Vec<(String, f64, String)> = Vec::new();
    for (_, text) in &files {
        for line in text.lines() {
            let record: Value = serde_json::from_str(line).unwrap();
            if let Ok(value) = record["value"].as_str().unwrap().parse::<f64>() {
                let serial = record["unit_serial"].as_str().unwrap().to_owned();
                points.push((
                    record["time_created"].as_str().unwrap().to_owned(),
                    value,
                    serial,
                ));
            }
        }
    }
    points.sort_by(|left, right| left.0.cmp(&right.0));
    let values: Vec<f64> = points.iter().map(|point| point.1).collect();
    let limits = Limits::of(values.iter().copied()).unwrap();
    assert_eq!(row["points"], values.len());
    assert_eq!(row["baseline_points"], values.len());
    assert_eq!(row["center"].as_f64(), Some(limits.center));
    assert_eq!(row["sigma"].as_f64(), Some(limits.sigma));
    assert_eq!(row["ucl"].as_f64(), Some(limits.upper()));
    assert_eq!(row["mr_ucl"].as_f64(), Some(limits.mr_upper()));
    let mut expected = Vec::new();
    flags(
        values.iter().copied(),
        &limits,
        Rules::ALL,
        |index, rule| expected.push((index, rule)),
    );
    assert_eq!(row["violations_count"], expected.len());
    assert!(expected.iter().any(|&(_, rule)| rule == 1));
    assert!(expected.iter().any(|&(_, rule)| rule == 2));
    let listed = row["violations"].as_array().unwrap();
    assert_eq!(listed.len(), expected.len());
    for (violation, &(index, rule)) in listed.iter().zip(&expected) {
        assert_eq!(violation["rule"], rule);
        assert_eq!(violation["time_created"], points[index].0.as_str());
        assert_eq!(violation["unit_serial"], points[index].2.as_str());
        // The value as the record holds it: a string here.
        assert_eq!(
            violation["value"].as_str().unwrap().parse::<f64>().unwrap(),
            values[index]
        );
    }
    assert_eq!(
        (row["limit_lower"].as_str(), row["limit_upper"].as_str()),
        (Some("-10"), Some("10"))
    );
    let cpk = capability(Some(-10.0), Some(10.0), limits.center, limits.sigma);
    assert_eq!(row["cpk"].as_f64(), cpk);
    assert_eq!(
        row["ppk"].as_f64(),
        capability(Some(-10.0), Some(10.0), limits.center, limits.stddev)
    );
}

#[test]
fn issue_52_a_baseline_with_one_point_charts_nothing() {
    let first = window().from;
    let baseline = Window {
        from: first,
        to: first.add_seconds(60),
    };
    let rows = rows(&question(Vec::new(), Some(baseline)), 1, false, false);
    let row: Value = serde_json::from_slice(&rows[0]).unwrap();
    assert_eq!(row["baseline_points"], 1);
    for field in [
        "center", "sigma", "ucl", "lcl", "mr_mean", "mr_ucl", "cpk", "ppk",
    ] {
        assert_eq!(row[field], Value::Null, "{field}");
    }
    assert_eq!(row["violations_count"], 0);
    assert_eq!(row["violations"], serde_json::json!([]));
}
