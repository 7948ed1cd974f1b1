use serde_json::{json, Value};

use super::super::tests::*;
use super::*;
use crate::data::summary::Question;
use crate::domain::query::Bucket;
use crate::domain::zone::Zone;

#[test]
fn a_unit_tried_on_two_shards_counts_once_with_its_first_and_last_attempt() {
    let generation = generation(&[("a.units.jsonl", UNITS_A), ("b.units.jsonl", UNITS_B)], 2);
    let catalog = &generation.catalog;
    assert_ne!(
        catalog.placement(0).shard,
        catalog.placement(1).shard,
        "the test needs A and B on two shards"
    );
    for reverse in [false, true] {
        let rows = summarize(&generation, &units(&[GroupField::Slot], None), reverse);
        // SN2's input on A is on another station than its output on B: no pair.
        assert_eq!(
            rows,
            [
                no_cycles(json!({"slot": "1", "records": 3,
                       "results": {"FAIL": 1, "Pass": 1, "pass": 1},
                       "units": 1, "first_pass": 0, "second_pass": 1, "final_pass": 1,
                       "retested": 1, "first_pass_yield": 0.0, "second_pass_yield": 1.0,
                       "final_yield": 1.0, "retest_rate": 1.0})),
                no_cycles(json!({"slot": "2", "records": 1, "results": {"ok": 1},
                       "units": 1, "first_pass": 1, "second_pass": 1, "final_pass": 1,
                       "retested": 0, "first_pass_yield": 1.0, "second_pass_yield": 1.0,
                       "final_yield": 1.0, "retest_rate": 0.0})),
            ]
        );
    }
}

#[test]
fn a_unit_counts_in_the_bucket_of_its_first_attempt() {
    let generation = generation(&[("a.units.jsonl", UNITS_A), ("b.units.jsonl", UNITS_B)], 2);
    let rows = summarize(&generation, &units(&[GroupField::Slot], Some("1h")), false);
    assert_eq!(
        rows,
        [
            no_cycles(json!({"slot": "1", "bucket_start": "2024-01-01T00:00:00Z",
                   "records": 2, "results": {"FAIL": 1, "pass": 1}, "units": 1,
                   "first_pass": 0, "second_pass": 1, "final_pass": 1, "retested": 1,
                   "first_pass_yield": 0.0, "second_pass_yield": 1.0,
                   "final_yield": 1.0, "retest_rate": 1.0})),
            // The retest's own bucket holds its record, but not its unit.
            no_cycles(json!({"slot": "1", "bucket_start": "2024-01-01T01:00:00Z",
                   "records": 1, "results": {"Pass": 1}, "units": 0, "first_pass": 0,
                   "second_pass": 0, "final_pass": 0, "retested": 0,
                   "first_pass_yield": null, "second_pass_yield": null,
                   "final_yield": null, "retest_rate": null})),
            no_cycles(json!({"slot": "2", "bucket_start": "2024-01-01T00:00:00Z",
                   "records": 1, "results": {"ok": 1}, "units": 1, "first_pass": 1,
                   "second_pass": 1, "final_pass": 1, "retested": 0,
                   "first_pass_yield": 1.0, "second_pass_yield": 1.0,
                   "final_yield": 1.0, "retest_rate": 0.0})),
        ]
    );
    // Grouped by station, the attempts are two units; rows sort by the group
    // fields in `group_by` order.
    let rows = summarize(
        &generation,
        &units(&[GroupField::Slot, GroupField::StationId], None),
        false,
    );
    let keys: Vec<(&str, &str)> = rows
        .iter()
        .map(|row| {
            (
                row["slot"].as_str().unwrap(),
                row["station_id"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(keys, [("1", "A"), ("1", "B"), ("2", "B")]);
    assert_eq!(rows[0]["units"], 1);
    assert_eq!(rows[1]["units"], 1);
}

/// A unit row's cycle fields when it has no cycle time.
fn no_cycles(mut row: Value) -> Value {
    let fields = row.as_object_mut().unwrap();
    fields.insert("cycle_count".into(), json!(0));
    for name in ["cycle_mean_s", "cycle_p50_s", "cycle_p90_s", "cycle_max_s"] {
        fields.insert(name.into(), Value::Null);
    }
    row
}

/// A unit line of station `station`, slot `S`, at minute `minute` past 00:00.
fn unit_line(station: &str, serial: &str, minute: u32, direction: &str, result: &str) -> String {
    format!(
        r#"{{"station_id":"{station}","time_created":"2024-01-01T00:{minute:02}:00Z","direction":"{direction}","slot":"S","unit_serial":"{serial}","result":"{result}"}}"#
    ) + "\n"
}

#[test]
fn issue_23_cycle_times_pair_an_output_with_the_latest_input_since_the_last_output() {
    let lines = [
        unit_line("A", "SN1", 0, "input", ""),
        unit_line("A", "SN1", 1, "input", ""),
        // 2 minutes after the later input.
        unit_line("A", "SN1", 3, "output", "fail"),
        // No input since the last output: none.
        unit_line("A", "SN1", 4, "output", "fail"),
        // An empty serial pairs with nothing.
        unit_line("A", "", 5, "input", ""),
        unit_line("A", "", 6, "output", "pass"),
        unit_line("A", "SN1", 7, "input", ""),
        // 3 minutes; SN1's third attempt passes.
        unit_line("A", "SN1", 10, "output", "pass"),
        // SN2's input is on station B: SN2's output on A has none.
        unit_line("B", "SN2", 11, "input", ""),
        unit_line("A", "SN2", 12, "output", "pass"),
        // B: 9 and 1 minutes, and an input that never ends.
        unit_line("B", "SN2", 20, "output", "pass"),
        unit_line("B", "SN3", 21, "input", ""),
        unit_line("B", "SN3", 22, "output", "fail"),
        unit_line("B", "SN3", 23, "input", ""),
    ];
    let (a, b): (Vec<&String>, Vec<&String>) =
        lines.iter().partition(|line| line.contains(r#""A""#));
    let a: String = a.into_iter().cloned().collect();
    let b: String = b.into_iter().cloned().collect();
    let (a, b) = (a.as_str(), b.as_str());
    for shards in [1, 2] {
        let generation = generation(&[("a.units.jsonl", a), ("b.units.jsonl", b)], shards);
        for reverse in [false, true] {
            // One row of both stations: cycle times 120, 180, 540 and 60 s.
            let rows = summarize(&generation, &units(&[], None), reverse);
            assert_eq!(rows.len(), 1);
            let row = &rows[0];
            assert_eq!(row["records"], 7, "{row}");
            assert_eq!(row["cycle_count"], 4, "{row}");
            assert_eq!(row["cycle_mean_s"], 225.0, "{row}");
            // Nearest rank: ceil(0.5 x 4) = 2nd, ceil(0.9 x 4) = 4th of 60, 120, 180, 540.
            assert_eq!(row["cycle_p50_s"], 120.0, "{row}");
            assert_eq!(row["cycle_p90_s"], 540.0, "{row}");
            assert_eq!(row["cycle_max_s"], 540.0, "{row}");
            // Without station_id in the group, SN2 on A and on B is one unit: SN1
            // (fail, fail, pass), SN2 (pass, pass) and SN3 (fail).
            assert_eq!(
                (&row["units"], &row["first_pass"], &row["second_pass"]),
                (&json!(3), &json!(1), &json!(1)),
                "{row}"
            );
            assert_eq!(
                (&row["final_pass"], &row["retested"]),
                (&json!(2), &json!(2)),
                "{row}"
            );
        }
        // By station: each station's own.
        let rows = summarize(&generation, &units(&[GroupField::StationId], None), false);
        let cycles: Vec<(&Value, &Value, &Value)> = rows
            .iter()
            .map(|row| {
                (
                    &row["cycle_count"],
                    &row["cycle_p50_s"],
                    &row["cycle_max_s"],
                )
            })
            .collect();
        assert_eq!(
            cycles,
            [
                (&json!(2), &json!(120.0), &json!(180.0)),
                (&json!(2), &json!(60.0), &json!(540.0)),
            ]
        );
    }
}

#[test]
fn issue_23_a_units_second_attempt_is_found_across_shards() {
    // SN1: A at 0 (fail), B at 1 (pass), A at 2 (fail), B at 3 (fail); SN2: B at
    // 4 (fail), A at 5 (fail), B at 6 (pass); SN3: A at 7 (pass) only.
    let a = [
        unit_line("A", "SN1", 0, "output", "fail"),
        unit_line("A", "SN1", 2, "output", "fail"),
        unit_line("A", "SN2", 5, "output", "fail"),
        unit_line("A", "SN3", 7, "output", "pass"),
    ]
    .concat();
    let b = [
        unit_line("B", "SN1", 1, "output", "pass"),
        unit_line("B", "SN1", 3, "output", "fail"),
        unit_line("B", "SN2", 4, "output", "fail"),
        unit_line("B", "SN2", 6, "output", "pass"),
    ]
    .concat();
    let generation = generation(&[("a.units.jsonl", &a), ("b.units.jsonl", &b)], 2);
    for reverse in [false, true] {
        let rows = summarize(&generation, &units(&[GroupField::Slot], None), reverse);
        assert_eq!(
            rows,
            [no_cycles(
                json!({"slot": "S", "records": 8, "results": {"fail": 5, "pass": 3},
                "units": 3, "first_pass": 1, "second_pass": 2, "final_pass": 2,
                "retested": 2, "first_pass_yield": 1.0 / 3.0,
                "second_pass_yield": 2.0 / 3.0, "final_yield": 2.0 / 3.0,
                "retest_rate": 2.0 / 3.0})
            )]
        );
    }
}

proptest::proptest! {
    /// Issue 22: a unit summary that reads sealed blocks' digests answers byte
    /// for byte as one that decodes every block, and as one over records all
    /// hot, whatever the window, buckets, zone, grouping and type filter.
    #[test]
    fn issue_22_summaries_from_digests_answer_as_decoding_does(
        records in proptest::collection::vec(
            (0u8..3, 0u32..4 * 3600, 0u8..5, proptest::bool::ANY, 0u8..2, 0u8..4,
             0u8..2, 0u8..2, proptest::bool::weighted(0.1)),
            1..150,
        ),
        from in 0u32..4 * 3600,
        length in 1u32..6 * 3600,
        bucket in 0usize..6,
        zone in 0usize..4,
        fields in proptest::sample::subsequence(
            vec![GroupField::StationId, GroupField::Slot, GroupField::UnitType, GroupField::Mode],
            0..=4,
        ),
        reversed in proptest::bool::ANY,
        types in 0usize..4,
        shards in 1usize..3,
    ) {
        let mut files: Vec<(String, String)> = Vec::new();
        for station in 0..3 {
            let lines: String = (records.iter())
                .filter(|record| record.0 == station)
                .map(unit_record_line)
                .collect();
            if !lines.is_empty() {
                files.push((format!("s{station}.units.jsonl"), lines));
            }
        }
        let files: Vec<(&str, &str)> =
            files.iter().map(|(name, text)| (name.as_str(), text.as_str())).collect();
        let start = 1_704_067_200 + i64::from(from);
        let window = Window {
            from: Timestamp { seconds: start, nanos: 0 },
            to: Timestamp { seconds: start + i64::from(length), nanos: 0 },
        };
        let mut fields = fields;
        if reversed {
            fields.reverse();
        }
        let hot = generation_sealing(&files, shards, None);
        let sealed = generation_sealing(&files, shards, Some(std::time::Duration::from_secs(1)));
        let symbols = sealed.catalog.symbols();
        let unit_types = match types {
            0 => Matcher::Any,
            1 => Matcher::OneOf(symbols.lookup("t0").unwrap().into_iter().collect()),
            2 => Matcher::OneOf(symbols.lookup("t1").unwrap().into_iter().collect()),
            _ => Matcher::OneOf(Vec::new()),
        };
        let question = Question::Units(UnitQuestion {
            window,
            unit_types,
            unit_serial: Matcher::Any,
            grouping: Grouping {
                fields,
                bucket: [None, Some("15m"), Some("1h"), Some("2h"), Some("1d"), Some("90m")]
                    [bucket]
                    .map(|text| Bucket::parse(text).unwrap()),
                zone: Zone::parse(
                    ["UTC", "Asia/Kolkata", "America/St_Johns", "Europe/Berlin"][zone],
                )
                .unwrap(),
            },
            pass_results: vec!["pass".into(), "OK".into()],
        });
        let decoded = rendered(&sealed, &question, false, Digests::Decode);
        let digested = rendered(&sealed, &question, false, Digests::Read);
        proptest::prop_assert_eq!(&digested, &decoded);
        proptest::prop_assert_eq!(&rendered(&sealed, &question, true, Digests::Read), &decoded);
        proptest::prop_assert_eq!(&rendered(&hot, &question, false, Digests::Read), &decoded);
    }
}
