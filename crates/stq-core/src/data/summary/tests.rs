//! What the summaries' tests share: snapshots loaded into generations, questions,
//! and each shard's partial merged and finished as the router does.

use std::sync::Arc;

use serde_json::Value;

use super::*;
use crate::data::catalog::Generation;
use crate::data::load::{load, LoadOptions, OnInvalid};
use crate::data::scan::Matcher;
use crate::data::scan::{Hit, RecordFilter, ScanRequest};
use crate::data::tier::Tier as _;
use crate::domain::record::Directions;
use crate::domain::time::parse_rfc3339;
use crate::domain::time::Timestamp;

/// `files` loaded into `shards` shards, with every station placed on its own
/// shard when there are as many shards as stations (placement balances counts).
pub(super) fn generation(files: &[(&str, &str)], shards: usize) -> Generation {
    // Records an hour older than a station's newest are sealed: the summaries
    // read both tiers.
    generation_sealing(files, shards, Some(std::time::Duration::from_secs(3600)))
}

/// [`generation`], with records older than `hot` sealed (none without).
pub(super) fn generation_sealing(
    files: &[(&str, &str)],
    shards: usize,
    hot: Option<std::time::Duration>,
) -> Generation {
    let directory = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(directory.path().join(name), text).unwrap();
    }
    load(&LoadOptions {
        directory: directory.path().to_owned(),
        shards,
        on_invalid: OnInvalid::Fail,
        generation: 1,
        threads: 1,
        hot,
        cache: crate::data::sealed::cache::test_cache(),
    })
    .unwrap()
    .0
}

pub(super) fn window() -> Window {
    Window {
        from: parse_rfc3339("2024-01-01T00:00:00Z").unwrap(),
        to: parse_rfc3339("2024-01-02T00:00:00Z").unwrap(),
    }
}

/// Each shard's partial of `question` over every station, merged in shard order
/// or in reverse, and finished.
pub(super) fn summarize(generation: &Generation, question: &Question, reverse: bool) -> Vec<Value> {
    rendered(generation, question, reverse, Digests::Read)
        .iter()
        .map(|row| serde_json::from_slice(row).unwrap())
        .collect()
}

/// [`summarize`]'s rows as the bytes a response sends, the sealed blocks read
/// as `digests` says.
pub(super) fn rendered(
    generation: &Generation,
    question: &Question,
    reverse: bool,
    digests: Digests,
) -> Vec<Vec<u8>> {
    let catalog = &generation.catalog;
    let mut partials: Vec<Partial> = (0..catalog.shard_count())
        .map(|shard| {
            let request = SummaryRequest {
                stations: shard_stations(catalog, shard),
                question: question.clone(),
            };
            (generation.shards()[shard])
                .summarize_reading(&request, catalog.symbols(), digests)
                .unwrap()
        })
        .collect();
    if reverse {
        partials.reverse();
    }
    let rows = match question {
        Question::Units(_) => merged(partials, |partial| match partial {
            Partial::Units(partial) => partial,
            _ => panic!("partials of one question are of one kind"),
        })
        .finish(catalog)
        .unwrap(),
        Question::Metrics(_) => merged(partials, |partial| match partial {
            Partial::Metrics(partial) => partial,
            _ => panic!("partials of one question are of one kind"),
        })
        .finish(catalog)
        .unwrap(),
        Question::Stations => merged(partials, |partial| match partial {
            Partial::Stations(partial) => partial,
            _ => panic!("partials of one question are of one kind"),
        })
        .finish(catalog)
        .unwrap(),

        Question::Control(_) => merged(partials, |partial| match partial {
            Partial::Control(partial) => partial,
            _ => panic!("partials of one question are of one kind"),
        })
        .finish(catalog)
        .unwrap(),
    };
    rows.rows().map(<[u8]>::to_vec).collect()
}

/// The partials, each of the kind `kind` takes, merged in order.
fn merged<P: PartialSummary>(partials: Vec<Partial>, kind: impl Fn(Partial) -> P) -> P {
    (partials.into_iter().map(kind))
        .reduce(|mut merged, partial| {
            merged.merge(partial);
            merged
        })
        .unwrap()
}

/// Every station of `shard`, for a request that reads them all.
pub(super) fn shard_stations(catalog: &Catalog, shard: usize) -> Vec<ShardStation> {
    (0..catalog.stations().len() as u32)
        .filter(|&rank| catalog.placement(rank).shard == shard as u32)
        .map(|rank| ShardStation {
            rank,
            station_index: catalog.placement(rank).station_index,
        })
        .collect()
}

pub(super) fn units(fields: &[GroupField], bucket: Option<&str>) -> Question {
    Question::Units(UnitQuestion {
        window: window(),
        unit_types: Matcher::Any,
        unit_serial: Matcher::Any,
        grouping: Grouping {
            fields: fields.to_vec(),
            bucket: bucket.map(|text| Bucket::parse(text).unwrap()),
            zone: Zone::Utc,
        },
        pass_results: vec!["pass".into(), "OK".into()],
    })
}

pub(super) const UNITS_A: &str = r#"{"station_id":"A","time_created":"2024-01-01T00:10:00Z","direction":"output","slot":"1","unit_serial":"SN1","result":"FAIL"}
{"station_id":"A","time_created":"2024-01-01T00:20:00Z","direction":"input","slot":"1","unit_serial":"SN2","result":""}
{"station_id":"A","time_created":"2024-01-01T00:30:00Z","direction":"output","slot":"1","unit_serial":"","result":"pass"}
"#;
pub(super) const UNITS_B: &str = r#"{"station_id":"B","time_created":"2024-01-01T01:20:00Z","direction":"output","slot":"1","unit_serial":"SN1","result":"Pass"}
{"station_id":"B","time_created":"2024-01-01T00:10:00Z","direction":"output","slot":"2","unit_serial":"SN2","result":"ok"}
"#;

pub(super) const METRICS_A: &str = r#"{"station_id":"A","time_created":"2024-01-01T00:10:00Z","name":"v","value":1,"limit_lower":0,"limit_upper":"10"}
{"station_id":"A","time_created":"2024-01-01T00:20:00Z","name":"v","value":"abc","limit_lower":"0","limit_upper":"10"}
{"station_id":"A","time_created":"2024-01-01T00:30:00Z","name":"v","value":"12","limit_lower":"0","limit_upper":"10"}
"#;
pub(super) const METRICS_B: &str = r#"{"station_id":"B","time_created":"2024-01-01T00:40:00Z","name":"v","value":"+5","limit_lower":"1.0","limit_upper":"9"}
{"station_id":"B","time_created":"2024-01-01T00:05:00Z","name":"v","value":"-1","limit_lower":"x","limit_upper":"20"}
"#;

/// A unit record for the digest properties (`units::tests`) and the late reloads:
/// (station, second past 2024-01-01T00:00:00Z, serial (0 for the empty one),
/// output, slot, result, unit type, mode, a fraction of a second).
pub(super) type UnitRecord = (u8, u32, u8, bool, u8, u8, u8, u8, bool);

pub(super) fn unit_record_line(record: &UnitRecord) -> String {
    let &(station, second, serial, output, slot, result, unit_type, mode, fraction) = record;
    let time = chrono::DateTime::from_timestamp(1_704_067_200 + i64::from(second), 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string();
    let fraction = if fraction { ".250001" } else { "" };
    let serial = match serial {
        0 => String::new(),
        serial => format!("SN{serial}"),
    };
    let direction = if output { "output" } else { "input" };
    let result = ["pass", "FAIL", "ok", "Error"][usize::from(result % 4)];
    format!(
        r#"{{"station_id":"S{station}","time_created":"{time}{fraction}Z","direction":"{direction}","slot":"{slot}","unit_serial":"{serial}","result":"{result}","unit_type":"t{unit_type}","mode":"m{mode}"}}"#
    ) + "\n"
}

/// A metric record for the digest properties (`metrics::tests`) and the late reloads:
/// (station, second past 2024-01-01T00:00:00Z, name, slot, unit, value, serial).
pub(super) type MetricRecord = (u8, u32, u8, u8, u8, u8, u8);

pub(super) fn metric_record_line(record: &MetricRecord) -> String {
    let &(_, _, name, slot, ..) = record;
    metric_line_with_limits(record, [&slot.to_string(), &format!("\"{}\"", 3 + name)])
}

/// [`metric_record_line`] with other limits, JSON as written: a row shows its
/// last record's, so records of one row must not all have the same.
pub(super) fn metric_line_with_limits(record: &MetricRecord, [lower, upper]: [&str; 2]) -> String {
    let &(station, second, name, slot, unit, value, serial) = record;
    let time = chrono::DateTime::from_timestamp(1_704_067_200 + i64::from(second), 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ");
    // Numbers, one that is not, and one beyond a float.
    let value = match value {
        0 => "\"abc\"".to_owned(),
        1 => "1e400".to_owned(),
        value => format!("{}.{}", value / 3, value % 7),
    };
    format!(
        r#"{{"station_id":"S{station}","time_created":"{time}","name":"n{name}","slot":"{slot}","unit":"u{unit}","unit_serial":"SN{serial}","value":{value},"limit_lower":{lower},"limit_upper":{upper}}}"#
    ) + "\n"
}

mod late;
