use std::ops::Bound::{Excluded, Included, Unbounded};
use std::ops::RangeBounds as _;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::*;
use crate::data::catalog::Generation;
use crate::data::load::{load, LoadOptions, OnInvalid};
use crate::data::sealed::cache::{test_cache, BlockCache};
use crate::data::station::StationData;

/// 2026-11-24T00:00:00Z.
const START: i64 = 1_795_478_400;

/// A unit record and a metric record at `second` past [`START`], of serial
/// `serial`; the time written in one of the ways stq keeps as the instant or
/// as text, the value a number or not.
fn lines(second: i64, serial: u8, style: u8) -> (String, String) {
    let time = chrono::DateTime::from_timestamp(START + second, 0).unwrap();
    let time = match style % 4 {
        0 => time.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        1 => time.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        2 => time.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
        _ => (time + chrono::Duration::hours(2))
            .format("%Y-%m-%dT%H:%M:%S+02:00")
            .to_string(),
    };
    let unit = format!(
        r#"{{"station_id":"ST-1","slot":"s{}","unit_serial":"SN-{serial}","unit_type":"board","time_created":"{time}","direction":"{}","mode":"production","result":"pass","metadata":{{"cycle_ms":{}}}}}"#,
        serial % 3,
        if second % 2 == 0 { "input" } else { "output" },
        second * 7 % 1000,
    );
    let value = match style % 3 {
        0 => format!("{}.{}", second % 10, serial),
        1 => format!("\"text {serial}\""),
        _ => "1e3".to_owned(),
    };
    let metric = format!(
        r#"{{"station_id":"ST-1","slot":"s1","unit_serial":"SN-{serial}","time_created":"{time}","tz":"Etc/UTC","mode":"production","tags":["a"],"name":"m{}","value":{value},"unit":"V","type":"measurement","limit_upper":{},"limit_lower":""}}"#,
        serial % 4,
        serial % 2 + 3,
    );
    (unit, metric)
}

fn loaded(records: &[(i64, u8, u8)], hot: Option<Duration>) -> Generation {
    loaded_files(&[("a", records)], hot, &test_cache())
}

/// Records as [`lines`] writes them: (second, serial, style).
type Records<'a> = &'a [(i64, u8, u8)];

/// A load of one units file and one metrics file of `records` for each name,
/// its sealed tiers read through `cache`.
fn loaded_files(
    files: &[(&str, Records<'_>)],
    hot: Option<Duration>,
    cache: &BlockCache,
) -> Generation {
    let directory = tempfile::tempdir().unwrap();
    for (name, records) in files {
        let (units, metrics): (Vec<String>, Vec<String>) = records
            .iter()
            .map(|&(second, serial, style)| lines(second, serial, style))
            .unzip();
        let path = |kind: &str| directory.path().join(format!("{name}.{kind}.jsonl"));
        std::fs::write(path("units"), units.join("\n")).unwrap();
        std::fs::write(path("metrics"), metrics.join("\n")).unwrap();
    }
    load(&LoadOptions {
        directory: directory.path().to_owned(),
        shards: 1,
        on_invalid: OnInvalid::Fail,
        generation: 1,
        threads: 1,
        hot,
        cache: cache.clone(),
    })
    .unwrap()
    .0
}

fn station(generation: &Generation) -> &StationData {
    &generation.shards()[0].stations[0]
}

fn json(station: &StationData, record: StoredRecord) -> String {
    let mut json = Vec::new();
    station.write_json(record, &mut json).unwrap();
    String::from_utf8(json).unwrap()
}

fn key(second: i64) -> RecordKey {
    RecordKey {
        instant: Timestamp {
            seconds: START + second,
            nanos: 0,
        },
        load_order: 0,
    }
}

/// Every read of `station` over `range`, with each record's JSON.
fn reads(station: &StationData, range: KeyRange) -> Vec<String> {
    let mut read = Vec::new();
    let fault = FirstFault::default();
    let units = station.units_in(range, &fault).map(|(key, entry)| {
        format!(
            "{key:?} {:?}",
            UnitEntry {
                bytes: StoredRecord {
                    start: 0,
                    length: 0
                },
                ..entry
            }
        ) + &json(station, entry.bytes)
    });
    read.extend(units);
    // Every symbol these records intern (fewer than 48): serials, names and the
    // rest, which no record has as its serial or name.
    // A sealed metric read by name, or unit read by serial, is located among a
    // scan's memo, which the reads of every symbol share, as a scan's of several
    // names do.
    let memo = std::cell::RefCell::new(JsonMemo::default());
    for serial in 0..48 {
        let symbol = Symbol(serial);
        let units = station.units_of_serial(symbol, range, &fault);
        read.extend(units.map(|(key, entry)| format!("{key:?}") + &json(station, entry.bytes)));
        // A scan's read by serial: its sealed units located among the memo too.
        let units: Vec<_> = station
            .units_of_serial_located(symbol, range, &memo, &fault)
            .collect();
        read.extend(units.into_iter().map(|(key, entry)| {
            let json = match is_sealed(entry.bytes) {
                true => String::from_utf8(memo.borrow().json(entry.bytes).to_vec()).unwrap(),
                false => json(station, entry.bytes),
            };
            format!(
                "{key:?} {:?}",
                entry.with_bytes(StoredRecord {
                    start: 0,
                    length: 0
                })
            ) + &json
        }));
        let metrics: Vec<_> = (station.metrics_of_name(symbol, range, &memo, &fault)).collect();
        read.extend(metrics.into_iter().map(|(key, bytes)| {
            let json = match is_sealed(bytes) {
                true => String::from_utf8(memo.borrow().json(bytes).to_vec()).unwrap(),
                false => json(station, bytes),
            };
            format!("{key:?}") + &json
        }));
    }
    let metrics = station.metrics_in(range, &fault).map(|(key, entry)| {
        let numbers = [entry.value, entry.limit_lower, entry.limit_upper].map(f64::to_bits);
        format!("{key:?} {:?} {:?} {numbers:?}", entry.name, entry.slot)
            + &json(station, entry.bytes)
    });
    read.extend(metrics);
    fault.or(read).expect("a tier in memory reads")
}

/// Records as [`lines`] writes them, and windows of seconds (from, to, shape)
/// to read them in.
type Windows<'a> = &'a [(i64, i64, u8)];

/// Loads `records` all hot and sealed, and asserts that they read the same in
/// `windows` and whole.
fn reads_the_same(records: Records<'_>, windows: Windows<'_>) -> Result<(), TestCaseError> {
    reads_the_same_through(records, windows, &test_cache())
}

/// [`reads_the_same`], both loads read through `cache`.
fn reads_the_same_through(
    records: Records<'_>,
    windows: Windows<'_>,
    cache: &BlockCache,
) -> Result<(), TestCaseError> {
    let hot = loaded_files(&[("a", records)], None, cache);
    let sealed = loaded_files(&[("a", records)], Some(Duration::from_secs(1)), cache);
    let (hot, sealed) = (station(&hot), station(&sealed));
    let newest = records.iter().map(|record| record.0).max().unwrap();
    prop_assert_eq!(
        sealed.sealed.last_period().is_none(),
        records
            .iter()
            .all(|record| record.0 / 3600 == newest / 3600)
    );
    prop_assert_eq!(hot.unit_count(), sealed.unit_count());
    prop_assert_eq!(hot.metric_count(), sealed.metric_count());
    let ends = |station: &StationData| {
        let (first, last) = station.first_and_last().unwrap();
        (
            first.0,
            json(station, first.1),
            last.0,
            json(station, last.1),
        )
    };
    prop_assert_eq!(ends(hot), ends(sealed));
    let everything = (Unbounded, Unbounded);
    prop_assert_eq!(reads(hot, everything), reads(sealed, everything));
    for &(from, to, shape) in windows {
        let range = match shape {
            0 => (Included(key(from.min(to))), Excluded(key(from.max(to)))),
            1 => (Excluded(key(from)), Unbounded),
            _ => (Unbounded, Included(key(to))),
        };
        prop_assert_eq!(reads(hot, range), reads(sealed, range), "{:?}", range);
    }
    Ok(())
}

proptest! {
    /// Issue 22: a station reads the same, record for record and byte for
    /// byte, whichever tier holds its records.
    #[test]
    fn issue_22_a_station_reads_the_same_whichever_tier_holds_its_records(
        records in proptest::collection::vec((0i64..5 * 3600, 0u8..6, 0u8..12), 1..60),
        ranges in proptest::collection::vec((0i64..5 * 3600, 0i64..5 * 3600, 0u8..3), 1..6),
    ) {
        reads_the_same(&records, &ranges)?;
    }

    /// Issue 32: with a cache of decoded blocks of a few KiB, which keeps a
    /// block or two and evicts on almost every read, a station still reads
    /// the same whichever tier holds its records; and the cache stays in its
    /// bound.
    #[test]
    fn issue_32_a_station_reads_the_same_with_a_tiny_cache(
        records in proptest::collection::vec((0i64..5 * 3600, 0u8..6, 0u8..12), 1..60),
        ranges in proptest::collection::vec((0i64..5 * 3600, 0i64..5 * 3600, 0u8..3), 1..6),
        capacity in 0u64..16 << 10,
    ) {
        let cache = BlockCache::new(capacity);
        let result = reads_the_same_through(&records, &ranges, &cache);
        let stats = cache.stats();
        result?;
        prop_assert!(stats.bytes <= stats.capacity, "{:?}", stats);
    }

    /// Issue 32: the time index of a decoded block (two binary searches of its
    /// keys) gives the records a read of the whole block filtered by the window
    /// gives, for any window.
    #[test]
    fn issue_32_the_time_index_gives_what_a_full_read_filters(
        records in proptest::collection::vec((0i64..2 * 3600, 0u8..6, 0u8..12), 1..80),
        windows in proptest::collection::vec(
            ((0usize..1000, 0i64..2 * 3600, 0u8..3), (0usize..1000, 0i64..2 * 3600, 0u8..3)),
            1..8,
        ),
    ) {
        let generation = loaded(&records, Some(Duration::from_secs(1)));
        let sealed = &station(&generation).sealed;
        // A record's own key (two times in three), so that a bound can be one
        // the block holds, or an instant's.
        let bound = |keys: &[RecordKey], (pick, second, shape): (usize, i64, u8)| {
            let key = match pick % 3 {
                0 => key(second),
                _ => keys[pick % keys.len()],
            };
            match shape {
                0 => Included(key),
                1 => Excluded(key),
                _ => Unbounded,
            }
        };
        for block in sealed.blocks.iter() {
            let (period, block) = block.unwrap();
            let units: Decoded<UnitEntry> = sealed.decode(period, &block, false).unwrap();
            let metrics: Decoded<MetricEntry> = sealed.decode(period, &block, false).unwrap();
            for &(start, end) in &windows {
                for keys in [&units.keys, &metrics.keys] {
                    if keys.is_empty() {
                        continue;
                    }
                    let range = (bound(keys, start), bound(keys, end));
                    let index = rendered::TimeIndex::new(keys, period_start(period), |key| {
                        key.instant.seconds
                    });
                    let indexed: Vec<RecordKey> =
                        index.indexes_in(keys, range).map(|index| keys[index]).collect();
                    let filtered: Vec<RecordKey> =
                        keys.iter().copied().filter(|key| range.contains(key)).collect();
                    prop_assert_eq!(indexed, filtered, "{:?}", range);
                }
            }
        }
    }
}

/// Issue 32: the cache never answers for a block of a generation that is gone
/// with a block of another that took its place in memory: each entry holds its
/// block's bytes, whose address is its key.
#[test]
fn issue_32_the_cache_never_answers_with_a_dropped_generations_block() {
    // One cache for every round, as a process's is for its generations.
    let cache = test_cache();
    for round in 0..20u8 {
        let records: Vec<(i64, u8, u8)> = (0..40)
            .map(|index| (index * 300, (index as u8 + round) % 6, round % 12))
            .collect();
        let windows = [(0, 12_000, 0)];
        reads_the_same_through(&records, &windows, &cache).unwrap();
    }
}

/// Issue 22: a reload that drops every record of the blocks it reads leaves a
/// tier that still knows its first and last record (`/stations` reads them).
#[test]
fn issue_22_dropping_whole_blocks_keeps_the_first_and_last_record() {
    let early: Vec<(i64, u8, u8)> = (0..5).map(|index| (index * 60, 1, 0)).collect();
    let late: Vec<(i64, u8, u8)> = (0..5)
        .map(|index| (3 * 3600 + index * 60, 2, 0))
        .chain([(5 * 3600, 2, 0)])
        .collect();
    let hot = Some(Duration::from_secs(1));
    let both = loaded_files(&[("a", &early), ("b", &late)], hot, &test_cache());
    let only_late = loaded_files(&[("b", &late)], hot, &test_cache());
    // `a.metrics` and `a.units` are the first two files in path order.
    let last_of_a = both.catalog.sources[1].ordinal;
    let sealed = &station(&both).sealed;
    let kept = sealed
        .without(&|order| (order >> 32) as u32 <= last_of_a, &|lowest, _| {
            lowest <= last_of_a
        })
        .unwrap()
        .expect("it drops records");
    let expected = &station(&only_late).sealed;
    let ends = |tier: &Sealed| {
        let (first, last) = tier.first_and_last().expect("records are sealed");
        (first.0, last.0)
    };
    assert_eq!(kept.unit_count(), expected.unit_count());
    assert_eq!(kept.metric_count(), expected.metric_count());
    let instants = |(first, last): (RecordKey, RecordKey)| (first.instant, last.instant);
    assert_eq!(instants(ends(&kept)), instants(ends(expected)));
}

/// Issue 35: a day's fingerprint (`ShardData::day_fingerprints`, what `serve
/// --export` compares) is the same for the same records loaded the same way, and
/// changes, for both kinds, for the day a late record joins, in a sealed period or
/// the hot one. (Other days may change too: a load that seals the records otherwise
/// shares other pieces between blocks, and the shared pieces are part of every
/// block's fingerprint; that costs an export rewrites, never a stale day.)
#[test]
fn issue_35_a_late_record_changes_its_days_fingerprint() {
    let hour = 3600;
    // Three days, a unit and a metric record an hour; with a 12-hour hot window the
    // first two days and the third's first periods are sealed.
    let records: Vec<(i64, u8, u8)> = (0..72)
        .map(|at| (at * hour + 60, (at % 7) as u8, (at % 5) as u8))
        .collect();
    let hot = Some(Duration::from_secs(12 * 3600));
    let fingerprints = |records: &[(i64, u8, u8)], kind: Kind| {
        let generation = loaded(records, hot);
        let every = crate::domain::time::Window {
            from: Timestamp::MIN,
            to: Timestamp::MAX,
        };
        generation.shards()[0]
            .day_fingerprints(0, kind, every)
            .unwrap()
    };
    let days = [20_781, 20_782, 20_783];
    for kind in [Kind::Units, Kind::Metrics] {
        let before = fingerprints(&records, kind);
        assert_eq!(before.keys().copied().collect::<Vec<_>>(), days);
        assert_eq!(
            fingerprints(&records, kind),
            before,
            "{kind:?} loaded again"
        );
        // Late records: into a sealed period of day 0, a sealed one of day 2, and
        // day 2's hot hours.
        for (late_day, late_second) in [
            (0, 5 * hour + 17),
            (2, 2 * 24 * hour + 3 * hour + 17),
            (2, 2 * 24 * hour + 20 * hour + 17),
        ] {
            let mut late = records.clone();
            late.push((late_second, 3, 1));
            let after = fingerprints(&late, kind);
            let day = days[late_day];
            assert_ne!(
                after[&day], before[&day],
                "{kind:?}: late record at {late_second} s"
            );
        }
    }
}
