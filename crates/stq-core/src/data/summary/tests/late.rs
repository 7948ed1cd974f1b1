use serde_json::json;

use super::*;
use crate::data::fault::StorageFault;
use crate::data::sealed::{period_start, MetricBlock};
use crate::data::station::{
    Elsewhere, MetricEntry, MetricReader, StationData, UnitEntry, UnitReader,
};
use crate::domain::query::Rules;

/// Where a reload of issue 22's late records leaves a snapshot: the generation
/// loaded first, with records older than a second sealed, as the engine holds
/// it; the one a reload builds from it once the late lines are written; and
/// fresh loads of the final files, all hot and sealed again.
struct LateReload {
    catalog: Arc<Catalog>,
    shards: Vec<Arc<ShardData>>,
    reloaded: Generation,
    hot: Generation,
    resealed: Generation,
}

/// `files` loaded with records older than a second sealed, then `late` lines
/// appended (to a file of `files`, or a new one) and reloaded.
fn late_reload(files: &[(String, String)], late: &[(String, String)], shards: usize) -> LateReload {
    let directory = tempfile::tempdir().unwrap();
    let append = |name: &str, text: &str| {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(directory.path().join(name))
            .unwrap();
        std::io::Write::write_all(&mut file, text.as_bytes()).unwrap();
    };
    // One cache for the load and its reloads, as a process's.
    let cache = crate::data::sealed::cache::test_cache();
    let options = |generation, hot| LoadOptions {
        directory: directory.path().to_owned(),
        shards,
        on_invalid: OnInvalid::Fail,
        generation,
        threads: 1,
        hot,
        cache: cache.clone(),
    };
    let sealing = Some(std::time::Duration::from_secs(1));
    for (name, text) in files {
        append(name, text);
    }
    let Generation {
        catalog,
        shards: first,
    } = load(&options(1, sealing)).unwrap().0;
    let first: Vec<Arc<ShardData>> = first.into_iter().map(Arc::new).collect();
    for (name, text) in late {
        append(name, text);
    }
    let reloaded = crate::data::load::reload(&catalog, &first, &options(2, sealing))
        .unwrap()
        .0;
    LateReload {
        catalog,
        shards: first,
        reloaded,
        hot: load(&options(2, None)).unwrap().0,
        resealed: load(&options(2, sealing)).unwrap().0,
    }
}

fn texts(rows: &[Vec<u8>]) -> Vec<String> {
    (rows.iter())
        .map(|row| String::from_utf8_lossy(row).into_owned())
        .collect()
}

impl LateReload {
    /// The station `name` before the reload and after it.
    fn station(&self, name: &str) -> (&StationData, &StationData) {
        let of = |catalog: &Catalog| catalog.placement(catalog.rank(name).unwrap());
        let (before, after) = (of(&self.catalog), of(&self.reloaded.catalog));
        (
            &self.shards[before.shard as usize].stations[before.station_index as usize],
            &self.reloaded.shards()[after.shard as usize].stations[after.station_index as usize],
        )
    }

    /// The reload kept the `late` records of `station` hot, beside its sealed
    /// tier as it was: the case the summaries must notice. A reload that
    /// resealed them would leave the digests nothing to get wrong.
    fn assert_kept_hot(&self, station: &str, late: usize) {
        let (before, after) = self.station(station);
        assert!(
            Arc::ptr_eq(&before.sealed, &after.sealed),
            "{station}'s sealed tier was built again"
        );
        assert_eq!(
            after.hot.recent.trees.record_count(),
            before.hot.recent.trees.record_count() + late,
            "{station}'s late records"
        );
    }

    /// `question`'s rows (its filters made with a generation's symbols) after
    /// the reload, with digests read and with every block decoded, in either
    /// order of shards, are the bytes of a fresh load's, all hot or sealed again
    /// (which puts the late records in their blocks), wherever a fresh load
    /// placed the stations (issue 51: a summary's arithmetic is exact, so no
    /// order of merging moves its last bits); those rows.
    fn assert_same_rows(&self, question: impl Fn(&Symbols) -> Question) -> Vec<Value> {
        let rows = |generation: &Generation, reverse, digests| {
            let question = question(generation.catalog.symbols());
            rendered(generation, &question, reverse, digests)
        };
        let decoded = rows(&self.reloaded, false, Digests::Decode);
        let same = [
            ("digests", rows(&self.reloaded, false, Digests::Read)),
            ("reversed", rows(&self.reloaded, true, Digests::Read)),
            ("all hot", rows(&self.hot, false, Digests::Read)),
            ("resealed", rows(&self.resealed, false, Digests::Read)),
        ];
        for (what, got) in same {
            assert_eq!(texts(&got), texts(&decoded), "{what}");
        }
        (decoded.iter())
            .map(|row| serde_json::from_slice(row).unwrap())
            .collect()
    }

    /// The reloaded generation lists what `filter` (made with a generation's
    /// symbols) selects in `window` as a fresh load with every record hot
    /// does, read at once or a few records a page.
    fn assert_same_listing(&self, window: Window, filter: impl Fn(&Symbols) -> RecordFilter) {
        let listing = |generation: &Generation, page| {
            texts(&listed(
                generation,
                &filter(generation.catalog.symbols()),
                window,
                page,
            ))
        };
        let expected = listing(&self.hot, usize::MAX);
        for page in [3, usize::MAX] {
            assert_eq!(listing(&self.reloaded, page), expected, "{page} a page");
        }
    }
}

/// The records `filter` selects in `window`, as the JSON a response sends, in
/// the contract's order: every shard scanned and merged, `page` records at a
/// time, each page after the last record of the one before, as a cursor goes.
fn listed(
    generation: &Generation,
    filter: &RecordFilter,
    window: Window,
    page: usize,
) -> Vec<Vec<u8>> {
    let catalog = &generation.catalog;
    let mut listed = Vec::new();
    let mut after = None;
    loop {
        let mut hits: Vec<(Position, Vec<u8>)> = Vec::new();
        for (shard, data) in generation.shards().iter().enumerate() {
            let answer = data
                .scan(&ScanRequest {
                    stations: shard_stations(catalog, shard),
                    window,
                    after,
                    filter: filter.clone(),
                    cap: page,
                    pick: Default::default(),
                })
                .unwrap();
            let json = |hit: &Hit| data.json(hit, &answer.sealed).to_vec();
            hits.extend(answer.hits.iter().map(|hit| (hit.position, json(hit))));
        }
        hits.sort_by_key(|(position, _)| *position);
        hits.truncate(page);
        let done = hits.len() < page;
        after = hits.last().map(|(position, _)| *position);
        listed.extend(hits.into_iter().map(|(_, json)| json));
        if done || after.is_none() {
            return listed;
        }
    }
}

fn all_units(_: &Symbols) -> RecordFilter {
    RecordFilter::Units {
        unit_types: Matcher::Any,
        unit_serial: Matcher::Any,
        results: Matcher::Any,
        directions: Directions::BOTH,
    }
}

/// Units of serial `SN4` (`serial_number` is single): read by the tree by
/// serial.
fn one_serial(symbols: &Symbols) -> RecordFilter {
    RecordFilter::Units {
        unit_types: Matcher::Any,
        unit_serial: Matcher::OneOf(symbols.lookup("SN4").unwrap().into_iter().collect()),
        results: Matcher::Any,
        directions: Directions::BOTH,
    }
}

fn all_metrics(_: &Symbols) -> RecordFilter {
    RecordFilter::Metrics {
        names: Matcher::Any,
        unit_serial: Matcher::Any,
    }
}

/// Metrics named `n1`: read by the tree by name.
fn one_name(symbols: &Symbols) -> RecordFilter {
    RecordFilter::Metrics {
        names: Matcher::OneOf(symbols.lookup("n1").unwrap().into_iter().collect()),
        unit_serial: Matcher::Any,
    }
}

/// From `from` to `to` seconds past 2024-01-01T00:00:00Z.
fn seconds_window(from: u32, to: u32) -> Window {
    let at = |second: u32| Timestamp {
        seconds: 1_704_067_200 + i64::from(second),
        nanos: 0,
    };
    Window {
        from: at(from),
        to: at(to),
    }
}

fn grouping(fields: &[GroupField], bucket: Option<&str>, zone: &str) -> Grouping {
    Grouping {
        fields: fields.to_vec(),
        bucket: bucket.map(|text| Bucket::parse(text).unwrap()),
        zone: Zone::parse(zone).unwrap(),
    }
}

fn unit_question(window: Window, unit_types: Matcher, grouping: Grouping) -> Question {
    Question::Units(UnitQuestion {
        window,
        unit_types,
        unit_serial: Matcher::Any,
        grouping,
        pass_results: vec!["pass".into(), "OK".into()],
    })
}

fn metric_question(window: Window, names: Matcher, grouping: Grouping) -> Question {
    Question::Metrics(MetricQuestion {
        window,
        names,
        grouping,
    })
}

/// Which sealed blocks a read offers to take from their digests, by their
/// periods' first second; it takes none, so every record is given too.
#[derive(Default)]
struct Offered(Vec<i64>);

impl UnitReader for Offered {
    fn record(&mut self, _: RecordKey, _: UnitEntry) {}

    fn block(&mut self, period_start: Timestamp, _: &[u8], _: &Elsewhere<'_>) -> bool {
        self.0.push(period_start.seconds - 1_704_067_200);
        false
    }
}

impl<'a> MetricReader<'a> for Offered {
    fn record(&mut self, _: RecordKey, _: MetricEntry) {}

    fn block(&mut self, block: &MetricBlock<'a>) -> Result<bool, StorageFault> {
        self.0
            .push(period_start(block.period()).seconds - 1_704_067_200);
        Ok(false)
    }
}

/// A reader that takes no digest: counts the records it is given.
#[derive(Default)]
struct Refusing(usize);

impl UnitReader for Refusing {
    fn record(&mut self, _: RecordKey, _: UnitEntry) {
        self.0 += 1;
    }

    fn may_take(&mut self, _: Timestamp, _: Timestamp) -> bool {
        false
    }

    fn block(&mut self, _: Timestamp, _: &[u8], _: &Elsewhere<'_>) -> bool {
        panic!("offered a digest after refusing it");
    }
}

const MINUTE: u32 = 60;

/// Issue 22: a reload that appends late units to sealed hours keeps them hot,
/// and the summaries pair and count them as a fresh load of the same files
/// does. An hour whose block holds hot records between its first and last
/// must be decoded; one with hot records only around its own may still be
/// read from its digest, and pairs with them.
#[test]
fn issue_22_late_units_in_sealed_hours_pair_and_count_as_a_fresh_load_does() {
    let unit = |minute: u32, serial: u8, output: bool, slot: u8, result: u8| {
        unit_record_line(&(
            0,
            minute * MINUTE,
            serial,
            output,
            slot,
            result,
            0,
            0,
            false,
        ))
    };
    let (input, output, pass, fail) = (false, true, 0, 1);
    // Hours 0 and 1 are sealed; hour 2, the newest, is hot and holds more
    // records than the reload appends, so that the station is extended.
    let mut base = [
        unit(10, 1, input, 1, pass),
        unit(20, 1, output, 1, pass),
        unit(30, 3, input, 1, pass),
        unit(50, 4, output, 1, fail),
        unit(70, 4, output, 1, pass),
    ]
    .concat();
    for minute in [120, 130, 140, 150, 160] {
        base += &unit(minute, 0, output, 0, pass);
    }
    let late = [
        // Pairs with the sealed input at 00:30.
        unit(35, 3, output, 1, pass),
        // The sealed output at 00:50 pairs with it.
        unit(40, 4, input, 1, pass),
        // Before and after the one record of hour 1's block, 01:10.
        unit(65, 4, input, 1, pass),
        unit(80, 4, output, 1, fail),
    ]
    .concat();
    let name = "s0.units.jsonl".to_string();
    let late = late_reload(&[(name.clone(), base)], &[(name, late)], 1);
    late.assert_kept_hot("S0", 4);
    let (_, station) = late.station("S0");
    assert_eq!(station.sealed.unit_count(), 5, "hours 0 and 1 stay sealed");
    // A reader that takes no digest (a summary by minutes, say) is given every
    // record, and no digest of the hot layer is made for it.
    let mut refusing = Refusing::default();
    station
        .read_units(key_range(&seconds_window(0, 3 * 3600)), &mut refusing)
        .unwrap();
    assert_eq!(refusing.0, 14, "every unit record");
    assert!(!station.hot.settled_digested());
    let mut offered = Offered::default();
    station
        .read_units(key_range(&seconds_window(0, 3 * 3600)), &mut offered)
        .unwrap();
    assert!(station.hot.settled_digested());
    // Hour 2 is offered from the settled hot layer's digest: the late records
    // are all in the recent layer, and none in hour 2.
    assert_eq!(
        offered.0,
        [3600, 7200],
        "hour 0's block has hot records inside"
    );

    let whole = seconds_window(0, 3 * 3600);
    let rows = late.assert_same_rows(|_| {
        unit_question(
            whole,
            Matcher::Any,
            grouping(&[GroupField::Slot], None, "UTC"),
        )
    });
    assert_eq!(rows[1]["slot"], "1", "{rows:?}");
    // SN1 and SN3 pass at once; SN4 fails, passes, and fails last.
    let counts = ["records", "units", "first_pass", "second_pass"];
    let counts = counts.map(|name| rows[1][name].as_u64().unwrap());
    assert_eq!(counts, [5, 3, 2, 3], "{rows:?}");
    let more = ["final_pass", "retested"].map(|name| rows[1][name].as_u64().unwrap());
    assert_eq!(more, [2, 1], "{rows:?}");
    assert_eq!(rows[1]["results"], json!({"FAIL": 2, "pass": 3}));
    // 10 minutes for SN1 and SN4 at 00:50, 5 for SN3 and SN4 at 01:10.
    let cycles = ["cycle_count", "cycle_mean_s", "cycle_p50_s", "cycle_max_s"];
    let cycles = cycles.map(|name| rows[1][name].as_f64().unwrap());
    assert_eq!(cycles, [4.0, 450.0, 300.0, 600.0], "{rows:?}");

    let by_hour = late
        .assert_same_rows(|_| unit_question(whole, Matcher::Any, grouping(&[], Some("1h"), "UTC")));
    let cycles: Vec<&Value> = by_hour.iter().map(|row| &row["cycle_count"]).collect();
    assert_eq!(cycles, [&json!(3), &json!(1), &json!(0)]);
    for (from, to) in [(0, 3600), (3600, 7200), (1800, 5400), (3000, 4300)] {
        for (fields, bucket) in [
            (&[][..], None),
            (&[GroupField::StationId][..], Some("1h")),
            (&[GroupField::Slot][..], Some("15m")),
        ] {
            late.assert_same_rows(|_| {
                unit_question(
                    seconds_window(from, to),
                    Matcher::Any,
                    grouping(fields, bucket, "Asia/Kolkata"),
                )
            });
        }
    }
    late.assert_same_listing(whole, all_units);
    late.assert_same_listing(whole, one_serial);
}

/// Issue 22: a reload that appends late metrics to sealed hours keeps them hot,
/// and a metric row shows the limits of its latest record, late or sealed, and
/// counts the late records' failing units, as a fresh load of the same files
/// does; a block whose hour holds a hot record is never read from its digest.
#[test]
fn issue_22_late_metrics_in_sealed_hours_show_the_latest_limits_as_a_fresh_load_does() {
    // Values by code (`metric_record_line`): 9 is 3.2, 12 is 4.5, 15 is 5.1,
    // 18 is 6.4, 33 is 11.5, 36 is 12.1, 60 is 20.4.
    let metric = |minute: u32, name: u8, value: u8, serial: u8, limits: [&str; 2]| {
        metric_line_with_limits(&(0, minute * MINUTE, name, 0, 0, value, serial), limits)
    };
    let mut base = [
        metric(10, 0, 15, 1, ["0", "10"]),
        metric(15, 1, 9, 1, ["1", "9"]),
        metric(20, 0, 36, 2, ["0", "10"]),
        metric(25, 1, 12, 2, ["1", "9"]),
        metric(70, 0, 18, 1, ["0", "10"]),
    ]
    .concat();
    for minute in [120, 130, 140, 150, 160] {
        base += &metric(minute, 2, 15, 0, ["0", "10"]);
    }
    let late = [
        // n0's latest record in hour 0, out of its own limits.
        metric(30, 0, 33, 3, ["2", "\"8\""]),
        // n1's earliest, out of limits that no row shows.
        metric(5, 1, 60, 3, ["7", "7"]),
    ]
    .concat();
    // A file of its own, which sorts before the station's.
    let files = [("s0.metrics.jsonl".to_string(), base)];
    let late = late_reload(&files, &[("s0.late.metrics.jsonl".to_string(), late)], 1);
    late.assert_kept_hot("S0", 2);
    let (_, station) = late.station("S0");
    assert_eq!(
        station.sealed.metric_count(),
        5,
        "hours 0 and 1 stay sealed"
    );
    let mut offered = Offered::default();
    station
        .read_metrics(key_range(&seconds_window(0, 3 * 3600)), &mut offered)
        .unwrap();
    assert_eq!(offered.0, [3600], "hour 0 holds hot records");

    let whole = seconds_window(0, 3 * 3600);
    let rows =
        late.assert_same_rows(|_| metric_question(whole, Matcher::Any, grouping(&[], None, "UTC")));
    let figures = |row: &Value| {
        let number = |name: &str| row[name].as_u64().unwrap();
        let text = |name: &str| row[name].as_str().unwrap().to_owned();
        (
            number("count"),
            number("out_of_limits"),
            number("failing_units"),
            text("limit_lower"),
            text("limit_upper"),
        )
    };
    let limits = |lower: &str, upper: &str| (lower.to_owned(), upper.to_owned());
    let [(n0_lower, n0_upper), (n1_lower, n1_upper)] = [limits("0", "10"), limits("1", "9")];
    // 12.1 is over 10 and 11.5 over 8: SN2 and SN3 fail; n0's last is 01:10's.
    assert_eq!(figures(&rows[0]), (4, 2, 2, n0_lower, n0_upper), "{rows:?}");
    assert_eq!(figures(&rows[1]), (3, 1, 1, n1_lower, n1_upper), "{rows:?}");
    let by_hour = late.assert_same_rows(|_| {
        metric_question(
            whole,
            Matcher::Any,
            grouping(&[GroupField::StationId], Some("1h"), "UTC"),
        )
    });
    assert_eq!(by_hour[0]["name"], "n0");
    assert_eq!(
        figures(&by_hour[0]),
        (3, 2, 2, "2".to_owned(), "8".to_owned()),
        "{by_hour:?}"
    );
    for (from, to) in [(0, 3600), (3600, 7200), (1800, 5400), (0, 1500)] {
        for (fields, bucket) in [
            (&[][..], None),
            (&[GroupField::StationId][..], Some("1h")),
            (&[GroupField::Unit][..], Some("15m")),
        ] {
            late.assert_same_rows(|_| {
                metric_question(
                    seconds_window(from, to),
                    Matcher::Any,
                    grouping(fields, bucket, "America/St_Johns"),
                )
            });
        }
        // Issue 52: a chart's points cross the late records' blocks and tiers.
        for fields in [&[][..], &[GroupField::StationId][..]] {
            late.assert_same_rows(|_| {
                Question::Control(ControlQuestion {
                    window: seconds_window(from, to),
                    baseline: Some(seconds_window(0, 3 * 3600)),
                    names: Matcher::Any,
                    grouping: grouping(fields, None, "UTC"),
                    rules: Rules::ALL,
                })
            });
        }
    }
    late.assert_same_listing(whole, all_metrics);
    late.assert_same_listing(whole, one_name);
}

/// Records in the newest hour of every station of the late properties: their
/// hot tiers then hold at least as many records as a reload appends, so that
/// a reload extends them and the late records stay hot (in tests, a station
/// is built again once its appended records outnumber its settled ones).
const NEWEST_HOUR_RECORDS: u32 = 12;

/// The most late records a property appends.
const LATE_RECORDS: usize = 8;

/// The instant of a late record: near the base record `near` of its station,
/// moved by `offset` seconds within the sealed hours; and that station.
fn late_instant<T>(
    records: &[T],
    near: &proptest::sample::Index,
    offset: i32,
    instant: impl Fn(&T) -> (u8, u32),
) -> (u8, u32) {
    let (station, second) = instant(near.get(records));
    let second = (i64::from(second) + i64::from(offset)).clamp(0, 4 * 3600 - 1);
    (station, second as u32)
}

/// Where a late record of `station` goes: its station's file, or a file of
/// its own, which sorts before the station's.
fn late_file(station: u8, own: bool, kind: &str) -> String {
    match own {
        true => format!("s{station}.late.{kind}.jsonl"),
        false => format!("s{station}.{kind}.jsonl"),
    }
}

/// The files of the late properties: each station's base records, and the
/// newest hour's records of every station in a file read first. Those hold
/// every name, slot and unit, so that every load numbers their symbols alike:
/// a row joins its fine groups in the order of their symbols, and the last
/// bits of its statistics follow that order, which a reload (numbering new
/// symbols after the old ones) and a fresh load (in the order of the files)
/// would otherwise not share.
fn late_files<T>(
    records: &[T],
    newest: impl Fn(u8, u32) -> String,
    line: impl Fn(&T) -> String,
    station_of: impl Fn(&T) -> u8,
    kind: &str,
) -> Vec<(String, String)> {
    let newest_hour = (0..3)
        .flat_map(|station| (0..NEWEST_HOUR_RECORDS).map(move |index| (station, index)))
        .map(|(station, index)| newest(station, index))
        .collect();
    let mut files = vec![(format!("a.{kind}.jsonl"), newest_hour)];
    for station in 0..3 {
        let text: String = (records.iter())
            .filter(|record| station_of(record) == station)
            .map(&line)
            .collect();
        if !text.is_empty() {
            files.push((format!("s{station}.{kind}.jsonl"), text));
        }
    }
    files
}

/// How many of `late`'s records each station has.
fn late_counts(stations: impl Iterator<Item = u8>) -> [usize; 3] {
    let mut counts = [0; 3];
    for station in stations {
        counts[usize::from(station)] += 1;
    }
    counts
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Issue 22: units a reload appends to sealed hours stay hot beside their
    /// hours' blocks, and every unit summary (read with digests or decoding
    /// every block) and listing answers as a fresh load of the same files,
    /// whatever the late records, their files, the window, buckets, zone,
    /// grouping and type filter.
    #[test]
    fn issue_22_late_units_in_sealed_hours_answer_as_a_fresh_load_does(
        records in proptest::collection::vec(
            (0u8..3, 0u32..4 * 3600, 0u8..5, proptest::bool::ANY, 0u8..2, 0u8..4,
             0u8..2, 0u8..2, proptest::bool::weighted(0.1)),
            1..100,
        ),
        late in proptest::collection::vec(
            (proptest::prelude::any::<proptest::sample::Index>(), -900i32..900, 0u8..5,
             proptest::bool::ANY, 0u8..2, 0u8..4, 0u8..2, 0u8..2,
             proptest::bool::weighted(0.1), proptest::bool::ANY),
            1..=LATE_RECORDS,
        ),
        from in 0u32..4 * 3600,
        length in 1u32..6 * 3600,
        bucket in 0usize..6,
        zone in 0usize..4,
        fields in proptest::sample::subsequence(
            vec![GroupField::StationId, GroupField::Slot, GroupField::UnitType, GroupField::Mode],
            0..=4,
        ),
        types in 0usize..4,
        shards in 1usize..3,
    ) {
        // Every slot, unit type and mode.
        let newest = |station: u8, index: u32| {
            let (serial, small) = ((index % 5) as u8, (index % 2) as u8);
            let second = 4 * 3600 + 250 * index;
            unit_record_line(&(station, second, serial, index.is_multiple_of(3), small, serial % 4, small, (index / 2 % 2) as u8, false))
        };
        let files = late_files(&records, newest, unit_record_line, |record| record.0, "units");
        let late_records: Vec<(UnitRecord, bool)> = (late.iter())
            .map(|&(near, offset, serial, output, slot, result, unit_type, mode, fraction, own)| {
                let (station, second) =
                    late_instant(&records, &near, offset, |record| (record.0, record.1));
                ((station, second, serial, output, slot, result, unit_type, mode, fraction), own)
            })
            .collect();
        let late_lines: Vec<(String, String)> = (late_records.iter())
            .map(|(record, own)| (late_file(record.0, *own, "units"), unit_record_line(record)))
            .collect();
        let reloaded = late_reload(&files, &late_lines, shards);
        let counts = late_counts(late_records.iter().map(|(record, _)| record.0));
        for (station, &count) in counts.iter().enumerate() {
            reloaded.assert_kept_hot(&format!("S{station}"), count);
        }

        let unit_types = |symbols: &Symbols| match types {
            0 => Matcher::Any,
            1 => Matcher::OneOf(symbols.lookup("t0").unwrap().into_iter().collect()),
            2 => Matcher::OneOf(symbols.lookup("t1").unwrap().into_iter().collect()),
            _ => Matcher::OneOf(Vec::new()),
        };
        let window = seconds_window(from, from + length);
        let zone = ["UTC", "Asia/Kolkata", "America/St_Johns", "Europe/Berlin"][zone];
        let bucket = [None, Some("15m"), Some("1h"), Some("2h"), Some("1d"), Some("90m")][bucket];
        reloaded.assert_same_rows(|symbols| unit_question(window, unit_types(symbols), grouping(&fields, bucket, zone)));
        // The first late record's hour whole (a block a digest could answer
        // for), and half of it with half of the next.
        let hour = late_records[0].0 .1 / 3600 * 3600;
        for (window, fields, bucket) in [
            (seconds_window(hour, hour + 3600), &[GroupField::StationId][..], None),
            (seconds_window(hour, hour + 3600), &[GroupField::Slot][..], Some("1h")),
            (seconds_window(hour + 1800, hour + 5400), &[][..], Some("1h")),
            (seconds_window(0, 5 * 3600), &[][..], None),
            (seconds_window(0, 5 * 3600), &[GroupField::StationId, GroupField::Mode][..], Some("1h")),
        ] {
            reloaded.assert_same_rows(|_| unit_question(window, Matcher::Any, grouping(fields, bucket, "UTC")));
        }
        reloaded.assert_same_listing(seconds_window(0, 5 * 3600), all_units);
        reloaded.assert_same_listing(window, one_serial);
    }

    /// Issue 22: metrics a reload appends to sealed hours stay hot beside their
    /// hours' blocks, with limits of their own, and every metric summary (read
    /// with digests or decoding every block) and listing answers as a fresh
    /// load of the same files, whatever the late records, their files, the
    /// window, buckets, zone, grouping and names.
    #[test]
    fn issue_22_late_metrics_in_sealed_hours_answer_as_a_fresh_load_does(
        records in proptest::collection::vec(
            (0u8..3, 0u32..4 * 3600, 0u8..3, 0u8..2, 0u8..2, 0u8..20, 0u8..4),
            1..100,
        ),
        late in proptest::collection::vec(
            (proptest::prelude::any::<proptest::sample::Index>(), -900i32..900, 0u8..3, 0u8..2, 0u8..2,
             0u8..20, 0u8..6, 0u8..3, proptest::bool::ANY),
            1..=LATE_RECORDS,
        ),
        from in 0u32..4 * 3600,
        length in 1u32..6 * 3600,
        bucket in 0usize..6,
        zone in 0usize..4,
        fields in proptest::sample::subsequence(
            vec![GroupField::StationId, GroupField::Slot, GroupField::Unit],
            0..=3,
        ),
        names in 0usize..3,
        shards in 1usize..3,
    ) {
        // Every name, slot and unit: 3 x 2 x 2.
        let newest = |station: u8, index: u32| {
            let (name, slot, unit) = ((index % 3) as u8, (index / 3 % 2) as u8, (index / 6 % 2) as u8);
            metric_record_line(&(station, 4 * 3600 + 250 * index, name, slot, unit, 2 + index as u8, name))
        };
        let files = late_files(&records, newest, metric_record_line, |record| record.0, "metrics");
        let late_records: Vec<(MetricRecord, u8, bool)> = (late.iter())
            .map(|&(near, offset, name, slot, unit, value, serial, limits, own)| {
                let (station, second) =
                    late_instant(&records, &near, offset, |record| (record.0, record.1));
                ((station, second, name, slot, unit, value, serial), limits, own)
            })
            .collect();
        // Limits no base record has, so that a row shows which record is its last.
        let late_lines: Vec<(String, String)> = (late_records.iter())
            .map(|(record, limits, own)| {
                let limits = [format!("{}", 10 + limits), format!("\"{}\"", 20 + limits)];
                let line = metric_line_with_limits(record, [&limits[0], &limits[1]]);
                (late_file(record.0, *own, "metrics"), line)
            })
            .collect();
        let reloaded = late_reload(&files, &late_lines, shards);
        let counts = late_counts(late_records.iter().map(|(record, ..)| record.0));
        for (station, &count) in counts.iter().enumerate() {
            reloaded.assert_kept_hot(&format!("S{station}"), count);
        }

        let names = |symbols: &Symbols| match names {
            0 => Matcher::Any,
            1 => Matcher::OneOf(symbols.lookup("n1").unwrap().into_iter().collect()),
            _ => Matcher::OneOf(["n0", "n2"].iter().filter_map(|name| symbols.lookup(name).unwrap()).collect()),
        };
        let window = seconds_window(from, from + length);
        let zone = ["UTC", "Asia/Kolkata", "America/St_Johns", "Europe/Berlin"][zone];
        let bucket = [None, Some("15m"), Some("1h"), Some("2h"), Some("1d"), Some("90m")][bucket];
        reloaded.assert_same_rows(|symbols| metric_question(window, names(symbols), grouping(&fields, bucket, zone)));
        let hour = late_records[0].0 .1 / 3600 * 3600;
        for (window, fields, bucket) in [
            (seconds_window(hour, hour + 3600), &[GroupField::StationId][..], None),
            (seconds_window(hour, hour + 3600), &[GroupField::Slot][..], Some("1h")),
            (seconds_window(hour + 1800, hour + 5400), &[][..], Some("1h")),
            (seconds_window(0, 5 * 3600), &[][..], None),
            (seconds_window(0, 5 * 3600), &[GroupField::StationId, GroupField::Unit][..], Some("1h")),
        ] {
            reloaded.assert_same_rows(|_| metric_question(window, Matcher::Any, grouping(fields, bucket, "UTC")));
        }
        reloaded.assert_same_listing(seconds_window(0, 5 * 3600), all_metrics);
        reloaded.assert_same_listing(window, one_name);
    }
}
