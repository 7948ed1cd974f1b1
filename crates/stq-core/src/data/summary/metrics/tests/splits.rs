//! Issue 51: a metric summary is a function of the files alone. However its
//! records are split (sealed blocks of any span, a reload's late blocks beside
//! them, the hot tier, shards merged in either order, digests read or not), its
//! rows are the same bytes, and their mean and standard deviation are those of
//! a reference computed in exact integer arithmetic, rounded once.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::data::digest::EXACT_SUMS;
use crate::data::load::{load, reload, LoadOptions, OnInvalid};
use crate::data::station::{MetricEntry, MetricReader};
use crate::data::{Generation, ShardData};

/// A metric record: station, second past 2024-01-01T00:00:00Z, name, value in
/// 1/1024ths (`None`: not numeric), whether it comes late (after a reload).
type Record = (u8, u32, u8, Option<i64>, bool);

/// A value in 1/1024ths as decimal text: exact, so the double it parses to is
/// the value itself.
fn value_text(scaled: i64) -> String {
    let sign = if scaled < 0 { "-" } else { "" };
    let magnitude = scaled.unsigned_abs();
    // 1/1024 = 9765625 / 10^10.
    let fraction = (magnitude % 1024) * 9_765_625;
    format!("{sign}{}.{fraction:010}", magnitude / 1024)
}

fn line(&(station, second, name, value, _): &Record) -> String {
    let time = chrono::DateTime::from_timestamp(1_704_067_200 + i64::from(second), 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ");
    let value = value.map_or("\"abc\"".to_owned(), value_text);
    format!(
        r#"{{"station_id":"S{station}","time_created":"{time}","name":"n{name}","value":{value},"limit_lower":"-1e12","limit_upper":"1e12"}}"#
    ) + "\n"
}

/// Values a measurement takes: near a large offset with a small spread (where
/// rounded sums of squares cancel), or of any scale a double's 2^50 holds.
fn value() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![
        1 => Just(None),
        4 => (0i64..4096).prop_map(|spread| Some(735_297_020 * 1024 + spread)),
        4 => (-(1i64 << 50)..(1i64 << 50)).prop_map(Some),
        2 => (-4096i64..4096).prop_map(Some),
    ]
}

/// The files of `records` (of those that come late or not), one per station.
fn files(records: &[Record], late: bool) -> Vec<(String, String)> {
    (0..3u8)
        .filter_map(|station| {
            let lines: String = (records.iter())
                .filter(|record| record.0 == station && record.4 == late)
                .map(line)
                .collect();
            (!lines.is_empty()).then(|| (format!("s{station}.metrics.jsonl"), lines))
        })
        .collect()
}

/// The records loaded into `shards` shards with `hot` sealing, the late ones
/// appended after and reloaded.
fn loaded(records: &[Record], shards: usize, hot: Option<u64>) -> Generation {
    let directory = tempfile::tempdir().unwrap();
    let append = |(name, text): &(String, String)| {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(directory.path().join(name))
            .unwrap();
        std::io::Write::write_all(&mut file, text.as_bytes()).unwrap();
    };
    // One cache for the load and its reloads, as a process's.
    let cache = crate::data::sealed::cache::test_cache();
    let options = |generation| LoadOptions {
        directory: directory.path().to_owned(),
        shards,
        on_invalid: OnInvalid::Fail,
        generation,
        threads: 1,
        hot: hot.map(std::time::Duration::from_secs),
        cache: cache.clone(),
    };
    files(records, false).iter().for_each(append);
    let Generation { catalog, shards } = load(&options(1)).unwrap().0;
    let late = files(records, true);
    if late.is_empty() {
        return Generation { catalog, shards };
    }
    late.iter().for_each(append);
    let shards: Vec<Arc<ShardData>> = shards.into_iter().map(Arc::new).collect();
    reload(&catalog, &shards, &options(2)).unwrap().0
}

/// A row's statistics by exact integer arithmetic: count, numeric, mean and
/// standard deviation, each rounded once.
fn reference(values: &[Option<i64>]) -> (usize, usize, Option<f64>, Option<f64>) {
    let numbers: Vec<i128> = values
        .iter()
        .flatten()
        .map(|&value| i128::from(value))
        .collect();
    let n = numbers.len() as i128;
    let sum: i128 = numbers.iter().sum();
    let squares: i128 = numbers.iter().map(|value| value * value).sum();
    let mean = (n > 0).then(|| sum as f64 / 1024.0 / n as f64);
    let stddev = (n > 1).then(|| {
        let spread = (n * squares - sum * sum) as f64 / (1024.0 * 1024.0);
        (spread / n as f64 / (n - 1) as f64).sqrt()
    });
    (values.len(), numbers.len(), mean, stddev)
}

/// The bits of the number a row's JSON writes for `field`, parsed by Rust's
/// correctly rounded parser (serde_json's default one may miss by an ulp);
/// `None` for `null`.
fn number(row: &str, field: &str) -> Option<u64> {
    let key = format!("\"{field}\":");
    let start = row.find(&key).unwrap() + key.len();
    let length = row[start..].find([',', '}']).unwrap();
    let text = &row[start..start + length];
    (text != "null").then(|| text.parse::<f64>().unwrap().to_bits())
}

fn question(by_station: bool, bucket: Option<&str>) -> Question {
    Question::Metrics(MetricQuestion {
        window: Window {
            from: Timestamp {
                seconds: 1_704_067_200,
                nanos: 0,
            },
            to: Timestamp {
                seconds: 1_704_067_200 + 2 * 86_400,
                nanos: 0,
            },
        },
        names: Matcher::Any,
        grouping: Grouping {
            fields: if by_station {
                vec![GroupField::StationId]
            } else {
                Vec::new()
            },
            bucket: bucket.map(|text| Bucket::parse(text).unwrap()),
            zone: Zone::Utc,
        },
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn issue_51_metric_rows_are_the_same_bytes_however_records_are_split(
        records in proptest::collection::vec(
            (0u8..3, 0u32..36 * 3600, 0u8..2, value(), proptest::bool::weighted(0.3)),
            1..120,
        ),
        by_station in proptest::bool::ANY,
        bucket in 0usize..3,
        settings in proptest::collection::vec(
            (1usize..5, proptest::option::of(1u64..30 * 3600), proptest::bool::ANY, proptest::bool::ANY),
            1..4,
        ),
    ) {
        let bucket = [None, Some("1h"), Some("1d")][bucket];
        let question = question(by_station, bucket);
        // All in one shard, all hot, none late: the plainest reading.
        let mut plain: Vec<Record> = records.clone();
        plain.iter_mut().for_each(|record| record.4 = false);
        let expected = rendered(&loaded(&plain, 1, None), &question, false, Digests::Read);
        for (shards, hot, reverse, decode) in settings {
            let digests = if decode { Digests::Decode } else { Digests::Read };
            let got = rendered(&loaded(&records, shards, hot), &question, reverse, digests);
            prop_assert_eq!(
                &got,
                &expected,
                "{} shards, hot {:?}, reversed {}, decoded {}",
                shards,
                hot,
                reverse,
                decode
            );
        }
        // Each row's statistics are the reference's, to the bit.
        let bucket_seconds = match bucket {
            None => i64::MAX,
            Some("1h") => 3600,
            Some(_) => 86_400,
        };
        let mut groups: BTreeMap<(String, String, i64), Vec<Option<i64>>> = BTreeMap::new();
        for &(station, second, name, value, _) in &records {
            let station = if by_station { format!("S{station}") } else { String::new() };
            let start = match bucket {
                None => 0,
                Some(_) => i64::from(second) / bucket_seconds * bucket_seconds,
            };
            groups.entry((station, format!("n{name}"), start)).or_default().push(value);
        }
        prop_assert_eq!(expected.len(), groups.len());
        for row in &expected {
            let text = String::from_utf8(row.clone()).unwrap();
            let row: Value = serde_json::from_slice(row).unwrap();
            let station = row["station_id"].as_str().unwrap_or_default().to_owned();
            let start = match row["bucket_start"].as_str() {
                None => 0,
                Some(text) => {
                    crate::domain::time::parse_rfc3339(text).unwrap().seconds - 1_704_067_200
                }
            };
            let name = row["name"].as_str().unwrap().to_owned();
            let (count, numeric, mean, stddev) = reference(&groups[&(station, name, start)]);
            prop_assert_eq!(row["count"].as_u64(), Some(count as u64), "{}", row);
            prop_assert_eq!(row["numeric"].as_u64(), Some(numeric as u64), "{}", row);
            prop_assert_eq!(number(&text, "mean"), mean.map(f64::to_bits), "{}", text);
            prop_assert_eq!(number(&text, "stddev"), stddev.map(f64::to_bits), "{}", text);
        }
    }
}

/// The sealed blocks' metric digests of a station, as a read offers them.
#[derive(Default)]
struct Digested(Vec<(Timestamp, Vec<u8>)>);

impl<'a> MetricReader<'a> for Digested {
    fn record(&mut self, _: RecordKey, _: MetricEntry) {}

    fn block(&mut self, block: &MetricBlock<'a>) -> Result<bool, StorageFault> {
        self.0
            .push((period_start(block.period()), block.digest()?.to_vec()));
        Ok(false)
    }
}

/// A digest that a store of an earlier version holds, with rounded statistics in
/// place of exact sums, reads as not exact, and a summary reads its block's
/// records instead.
#[test]
fn issue_51_a_digest_of_rounded_statistics_is_not_taken() {
    let mut records: Vec<Record> = (0..5)
        .map(|minute| (0, minute * 60, 0, Some(i64::from(minute) * 1024), false))
        .collect();
    // The newest record, hot, in another period: the first period's block is
    // sealed whole.
    records.push((0, 5 * 3600, 0, Some(0), false));
    let generation = loaded(&records, 1, Some(1));
    let catalog = &generation.catalog;
    let placement = catalog.placement(catalog.rank("S0").unwrap());
    let station =
        &generation.shards()[placement.shard as usize].stations[placement.station_index as usize];
    let mut digested = Digested::default();
    station
        .read_metrics(key_range(&question_window()), &mut digested)
        .unwrap();
    let [(start, bytes)] = &digested.0[..] else {
        panic!("one sealed block: {:?}", digested.0.len());
    };
    let mut digest = MetricDigest::default();
    digest.read(*start, bytes);
    assert!(digest.exact);
    assert_eq!(digest.groups.len(), 1);
    assert_eq!(digest.groups[0].running.mean(), Some(2.0));
    let mut before = bytes.clone();
    before[0] &= !EXACT_SUMS;
    digest.read(*start, &before);
    assert!(!digest.exact);
    assert!(digest.groups.is_empty());
}

fn question_window() -> Window {
    match question(true, None) {
        Question::Metrics(question) => question.window,
        _ => unreachable!("a metric question"),
    }
}
