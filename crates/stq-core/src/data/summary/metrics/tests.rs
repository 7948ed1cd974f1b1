use serde_json::json;

use serde_json::Value;

use super::super::tests::*;
use super::*;
use crate::data::summary::Question;
use crate::domain::query::Bucket;
use crate::domain::zone::Zone;

#[test]
fn metric_statistics_merge_across_shards_and_show_the_last_limits() {
    let question = Question::Metrics(MetricQuestion {
        window: window(),
        names: Matcher::Any,
        grouping: Grouping {
            fields: Vec::new(),
            bucket: None,
            zone: Zone::Utc,
        },
    });
    let values = [1.0, 12.0, 5.0, -1.0_f64];
    let mean = values.iter().sum::<f64>() / 4.0;
    let stddev = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 3.0).sqrt();
    for shards in [1, 2] {
        let generation = generation(
            &[
                ("a.metrics.jsonl", METRICS_A),
                ("b.metrics.jsonl", METRICS_B),
            ],
            shards,
        );
        for reverse in [false, true] {
            let rows = summarize(&generation, &question, reverse);
            assert_eq!(rows.len(), 1);
            let row = &rows[0];
            assert_eq!(row["name"], "v");
            assert_eq!(
                (row["count"].as_u64(), row["numeric"].as_u64()),
                (Some(5), Some(4))
            );
            assert_eq!(
                (row["min"].as_f64(), row["max"].as_f64()),
                (Some(-1.0), Some(12.0))
            );
            assert!((row["mean"].as_f64().unwrap() - mean).abs() < 1e-12);
            assert!((row["stddev"].as_f64().unwrap() - stddev).abs() < 1e-12);
            // 12 > 10 on A; -1 is below no numeric lower limit ("x").
            assert_eq!(row["out_of_limits"], 1);
            // The last record is B's at 00:40.
            assert_eq!(
                (row["limit_lower"].as_str(), row["limit_upper"].as_str()),
                (Some("1.0"), Some("9"))
            );
            let cpk = (9.0 - mean).min(mean - 1.0) / (3.0 * stddev);
            assert!((row["cpk"].as_f64().unwrap() - cpk).abs() < 1e-12, "{row}");
            let cp = (9.0 - 1.0) / (6.0 * stddev);
            assert!((row["cp"].as_f64().unwrap() - cp).abs() < 1e-12, "{row}");
            // The one out-of-limit record has no serial.
            assert_eq!(row["failing_units"], 0);
        }
    }
}

#[test]
fn issue_23_failing_units_are_distinct_serials_over_every_shard() {
    let line = |station: &str, serial: Option<&str>, minute: u32, value: &str| {
        let serial = serial.map_or(String::new(), |serial| {
            format!(r#""unit_serial":"{serial}","#)
        });
        format!(
            r#"{{"station_id":"{station}",{serial}"time_created":"2024-01-01T00:{minute:02}:00Z","name":"v","value":{value},"limit_lower":0,"limit_upper":10}}"#
        ) + "\n"
    };
    let a = [
        line("A", Some("SN1"), 0, "11"),
        line("A", Some("SN2"), 1, "-1"),
        line("A", Some("SN2"), 2, "12"),
        line("A", Some(""), 3, "13"),
        line("A", Some("SN4"), 4, "5"),
    ]
    .concat();
    let b = [
        line("B", Some("SN1"), 5, "20"),
        line("B", Some("SN3"), 6, "10"),
        line("B", None, 7, "-5"),
    ]
    .concat();
    let question = |fields: &[GroupField]| {
        Question::Metrics(MetricQuestion {
            window: window(),
            names: Matcher::Any,
            grouping: Grouping {
                fields: fields.to_vec(),
                bucket: None,
                zone: Zone::Utc,
            },
        })
    };
    for shards in [1, 2] {
        let generation = generation(&[("a.metrics.jsonl", &a), ("b.metrics.jsonl", &b)], shards);
        for reverse in [false, true] {
            let rows = summarize(&generation, &question(&[]), reverse);
            // Six out of limits (10 is within); SN1 on both stations is one unit.
            assert_eq!(rows[0]["out_of_limits"], 6, "{:?}", rows[0]);
            assert_eq!(rows[0]["failing_units"], 2, "{:?}", rows[0]);
        }
        let rows = summarize(&generation, &question(&[GroupField::StationId]), false);
        let failing: Vec<&Value> = rows.iter().map(|row| &row["failing_units"]).collect();
        assert_eq!(failing, [&json!(2), &json!(1)]);
    }
}

#[test]
fn issue_23_cp_needs_both_limits_and_cpk_takes_the_side_it_has() {
    let close = |got: Option<f64>, want: f64| got.is_some_and(|got| (got - want).abs() < 1e-12);
    let (mean, stddev) = (Some(2.0), Some(1.0));
    let (cp, cpk) = capability(Some(0.0), Some(6.0), mean, stddev);
    assert!(close(cp, 1.0) && close(cpk, 2.0 / 3.0), "{cp:?} {cpk:?}");
    // One-sided: (U - mean) / 3s or (mean - L) / 3s; no cp.
    let (cp, cpk) = capability(None, Some(5.0), mean, stddev);
    assert!(cp.is_none() && close(cpk, 1.0), "{cp:?} {cpk:?}");
    let (cp, cpk) = capability(Some(0.5), None, mean, stddev);
    assert!(cp.is_none() && close(cpk, 0.5), "{cp:?} {cpk:?}");
    // A mean outside a limit gives a negative cpk.
    let (_, cpk) = capability(Some(3.0), None, mean, stddev);
    assert!(close(cpk, -1.0 / 3.0), "{cpk:?}");
    // Without limits, a deviation, or a positive one: neither.
    assert_eq!(capability(None, None, mean, stddev), (None, None));
    assert_eq!(capability(Some(0.0), Some(6.0), mean, None), (None, None));
    assert_eq!(
        capability(Some(0.0), Some(6.0), mean, Some(0.0)),
        (None, None)
    );
    assert_eq!(capability(Some(0.0), Some(6.0), None, None), (None, None));
    // Overflow is null, as every statistic's.
    assert_eq!(
        capability(Some(-f64::MAX), Some(f64::MAX), Some(0.0), Some(1e-300)),
        (None, None)
    );
}

proptest::proptest! {
    /// Issue 22: a metric summary that reads sealed blocks' digests answers byte
    /// for byte as one that decodes every block, and as one over records all
    /// hot, whatever the window, buckets, zone, grouping and names.
    #[test]
    fn issue_22_metric_summaries_from_digests_answer_as_decoding_does(
        records in proptest::collection::vec(
            (0u8..3, 0u32..4 * 3600, 0u8..3, 0u8..2, 0u8..2, 0u8..20, 0u8..4),
            1..150,
        ),
        from in 0u32..4 * 3600,
        length in 1u32..6 * 3600,
        bucket in 0usize..6,
        zone in 0usize..4,
        fields in proptest::sample::subsequence(
            vec![GroupField::StationId, GroupField::Slot, GroupField::Unit],
            0..=3,
        ),
        reversed in proptest::bool::ANY,
        names in 0usize..3,
        shards in 1usize..3,
    ) {
        let mut files: Vec<(String, String)> = Vec::new();
        for station in 0..3 {
            let lines: String = (records.iter())
                .filter(|record| record.0 == station)
                .map(metric_record_line)
                .collect();
            if !lines.is_empty() {
                files.push((format!("s{station}.metrics.jsonl"), lines));
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
        let names = match names {
            0 => Matcher::Any,
            1 => Matcher::OneOf(symbols.lookup("n1").unwrap().into_iter().collect()),
            _ => Matcher::OneOf(["n0", "n2"].iter().filter_map(|name| symbols.lookup(name).unwrap()).collect()),
        };
        let question = Question::Metrics(MetricQuestion {
            window,
            names,
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
        });
        let decoded = rendered(&sealed, &question, false, Digests::Decode);
        let digested = rendered(&sealed, &question, false, Digests::Read);
        proptest::prop_assert_eq!(&digested, &decoded);
        proptest::prop_assert_eq!(&rendered(&hot, &question, false, Digests::Read), &decoded);
    }
}

mod splits;
