//! Export for other engines (docs/api.md section 13): a loaded generation's records
//! written as Apache Parquet, Hive-partitioned by the UTC day of each record's
//! instant, `units/day=YYYY-MM-DD/part-N.parquet` and `metrics/...` under a
//! directory or `s3://BUCKET/PREFIX` (through `stq_objects`), for DuckDB,
//! ClickHouse, Spark, Trino, DataFusion and polars.
//!
//! A day's file is read from the generation as a query reads it: each station in
//! byte order, read for that day (`StationRecords::each`), its records in the
//! contract's order, so a file's rows are sorted by `station_id` and then as
//! `/units` and `/metrics` return them, and hold exactly the JSON those answers
//! hold ([`parquet`] turns it into columns). Sorted rows give each row group and
//! page statistics that let a reader skip other stations' rows.
//!
//! Days are written by as many threads as the machine has CPUs, each a day at a
//! time. A part is put whole (in a directory: under a temporary name with a
//! leading `.`, which Hive-style readers skip, then renamed; in a bucket: one
//! PUT); after a day's parts are in, every other object of that partition is
//! listed and deleted, so a second export of a day replaces the first and never
//! leaves parts of both.

mod parquet;
mod serving;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use stq_core::data::ShardData;
use stq_core::data::{Catalog, Generation, StationRecords, StorageFault};
use stq_core::domain::record::Kind;
use stq_core::domain::time::{Timestamp, Window};
use stq_objects::Objects;

pub use self::parquet::ExportError;
pub use self::serving::{complete_before, ExportHandle, EXPORT_INTERVAL};

/// A generation's catalog and its shards, however the caller holds them: a
/// loaded [`Generation`] taken apart, or the shards a server serves.
pub(crate) struct Data<'a> {
    catalog: &'a Catalog,
    records: StationRecords<'a>,
}

impl<'a> Data<'a> {
    /// The records of `catalog`'s stations, which `shards` (in shard order) hold.
    fn of(catalog: &'a Catalog, shards: Vec<&'a ShardData>) -> Data<'a> {
        Data {
            catalog,
            records: StationRecords { catalog, shards },
        }
    }
}

/// What to export: the records of some stations within a window.
#[derive(Clone, Debug)]
pub struct ExportOptions {
    /// Where the partitions are written: a directory (made if missing) or a bucket.
    pub destination: Objects,
    /// Records at or after this instant [default: all].
    pub from: Option<Timestamp>,
    /// Records before this instant [default: all].
    pub to: Option<Timestamp>,
    /// Only these stations [default: every station].
    pub stations: Option<Vec<String>>,
    /// Threads writing days at once.
    pub threads: usize,
}

/// What an export wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportReport {
    pub units: u64,
    pub metrics: u64,
    /// Parquet files written.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Partitions (a day of one kind) written or emptied.
    pub partitions: usize,
    pub elapsed: Duration,
}

/// A day: its number since 1970-01-01 (UTC).
type Day = i64;

/// Seconds in a UTC day: partitions are days of the Unix time line, which has no
/// leap seconds.
const DAY_SECONDS: i64 = 86_400;

/// Writes the records `options` selects from `generation` to
/// `options.destination`, replacing the day partitions of the window it covers.
pub fn export(
    generation: Generation,
    options: &ExportOptions,
) -> Result<ExportReport, ExportError> {
    let started = Instant::now();
    let Generation { catalog, shards } = generation;
    let generation = &Data::of(&catalog, shards.iter().collect());
    let window = Window {
        from: options.from.unwrap_or(Window::ALL.from),
        to: options.to.unwrap_or(Window::ALL.to),
    };
    let stations = stations(generation, options.stations.as_deref());
    let mut days = BTreeSet::new();
    for kind in [Kind::Units, Kind::Metrics] {
        if let Some((first, last)) = span(generation, &stations, kind, window)? {
            days.extend(first..=last);
        }
        // A partition an earlier export left within the window is written again,
        // emptied if no record of that day remains.
        days.extend(existing_days(&options.destination, kind, window)?);
    }
    let days: Vec<Day> = days.into_iter().collect();
    let next = AtomicUsize::new(0);
    let report = Mutex::new(ExportReport::default());
    let failure: Mutex<Option<ExportError>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..options.threads.clamp(1, days.len().max(1)) {
            scope.spawn(|| loop {
                if failure.lock().expect("never poisoned").is_some() {
                    return;
                }
                let Some(&day) = days.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    return;
                };
                for kind in [Kind::Units, Kind::Metrics] {
                    let written = export_day(
                        generation,
                        &stations,
                        kind,
                        day,
                        window,
                        &options.destination,
                    );
                    match written {
                        Ok(day_report) => {
                            let mut report = report.lock().expect("never poisoned");
                            match kind {
                                Kind::Units => report.units += day_report.records,
                                Kind::Metrics => report.metrics += day_report.records,
                            }
                            report.files += day_report.files;
                            report.bytes += day_report.bytes;
                            report.partitions += 1;
                        }
                        Err(error) => {
                            failure.lock().expect("never poisoned").get_or_insert(error);
                            return;
                        }
                    }
                }
            });
        }
    });
    if let Some(error) = failure.into_inner().expect("never poisoned") {
        return Err(error);
    }
    let mut report = report.into_inner().expect("never poisoned");
    report.elapsed = started.elapsed();
    Ok(report)
}

/// The stations to export, by rank (in byte order): those of `only` the
/// generation holds, or all.
fn stations(generation: &Data<'_>, only: Option<&[String]>) -> Vec<u32> {
    let catalog = generation.catalog;
    match only {
        None => (0..catalog.stations().len() as u32).collect(),
        Some(names) => {
            // A station's rank is its index in the catalog's list.
            let only: BTreeSet<&str> = names.iter().map(String::as_str).collect();
            (0..)
                .zip(catalog.stations())
                .filter(|(_, id)| only.contains(&***id))
                .map(|(rank, _)| rank)
                .collect()
        }
    }
}

/// The first and last day that hold a record of `kind` of `stations` in `window`.
fn span(
    generation: &Data<'_>,
    stations: &[u32],
    kind: Kind,
    window: Window,
) -> Result<Option<(Day, Day)>, StorageFault> {
    let mut span: Option<(Day, Day)> = None;
    for &station in stations {
        let scan = |window: Window| generation.records.first(station, kind, window);
        let Some(first) = scan(window)? else { continue };
        // The last: the first record of the latest day that has one, found by
        // halving the days between the first and the window's end.
        let mut low = day_of(first);
        let mut high = day_of(window.to).min(day_of(Window::ALL.to) - 1);
        while low < high {
            let middle = low + (high - low + 1) / 2;
            let from = start_of(middle).max(window.from);
            match scan(Window {
                from,
                to: window.to,
            })? {
                Some(_) => low = middle,
                None => high = middle - 1,
            }
        }
        let (first, last) = (day_of(first), low);
        span = Some(match span {
            None => (first, last),
            Some((before, after)) => (before.min(first), after.max(last)),
        });
    }
    Ok(span)
}

/// What one day of one kind wrote.
struct DayReport {
    records: u64,
    files: usize,
    bytes: u64,
}

/// Writes day `day` of `kind`: each station's records of that day within `window`,
/// in byte order of station and then the contract's order, as its parts; then
/// deletes every other object of the partition.
fn export_day(
    generation: &Data<'_>,
    stations: &[u32],
    kind: Kind,
    day: Day,
    window: Window,
    destination: &Objects,
) -> Result<DayReport, ExportError> {
    let partition = partition_name(kind, day);
    let day_window = Window {
        from: start_of(day).max(window.from),
        to: start_of(day + 1).min(window.to),
    };
    let mut writer = parquet::DayWriter::new(kind, destination, &partition);
    for &station in stations {
        (generation.records).each(station, kind, day_window, |json, instant| {
            writer.push(json, instant)
        })?;
    }
    let written = writer.finish()?;
    remove_others(destination, &partition, &written.names)?;
    Ok(DayReport {
        records: written.records,
        files: written.names.len(),
        bytes: written.bytes,
    })
}

/// Deletes the objects of `partition` not in `keep` (the parts just written, by
/// name within the partition). A directory's partition goes with its last file.
fn remove_others(
    destination: &Objects,
    partition: &str,
    keep: &[String],
) -> Result<(), ExportError> {
    let inside = format!("{partition}/");
    for listed in destination.list(partition)? {
        let name = listed.name.strip_prefix(&inside).unwrap_or(&listed.name);
        if !keep.iter().any(|kept| kept == name) {
            destination.delete(&listed.name)?;
        }
    }
    Ok(())
}

/// The days of the partitions of `kind` in `destination` within `window`.
fn existing_days(
    destination: &Objects,
    kind: Kind,
    window: Window,
) -> Result<Vec<Day>, ExportError> {
    let mut days = BTreeSet::new();
    for listed in destination.list(kind_name(kind))? {
        let Some(day) = partition_day(&listed.name) else {
            continue;
        };
        if start_of(day + 1) > window.from && start_of(day) < window.to {
            days.insert(day);
        }
    }
    Ok(days.into_iter().collect())
}

/// The day of the partition an object's name is in: `units/day=YYYY-MM-DD/...`.
fn partition_day(name: &str) -> Option<Day> {
    let mut parts = name.split('/');
    let (_kind, partition) = (parts.next()?, parts.next()?);
    parts.next()?;
    parse_day(partition.strip_prefix("day=")?)
}

/// `units` or `metrics`: the name of a kind's partitions' parent.
fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Units => "units",
        Kind::Metrics => "metrics",
    }
}

/// `units/day=YYYY-MM-DD`: the prefix of a day's parts.
fn partition_name(kind: Kind, day: Day) -> String {
    format!("{}/day={}", kind_name(kind), day_text(day))
}

fn day_of(instant: Timestamp) -> Day {
    instant.seconds.div_euclid(DAY_SECONDS)
}

fn start_of(day: Day) -> Timestamp {
    Timestamp {
        seconds: day.saturating_mul(DAY_SECONDS),
        nanos: 0,
    }
}

/// `YYYY-MM-DD`.
fn day_text(day: Day) -> String {
    chrono::DateTime::from_timestamp(day * DAY_SECONDS, 0).map_or_else(
        || format!("{day}"),
        |date| date.format("%Y-%m-%d").to_string(),
    )
}

fn parse_day(text: &str) -> Option<Day> {
    let date = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()?;
    Some(
        date.and_hms_opt(0, 0, 0)?
            .and_utc()
            .timestamp()
            .div_euclid(DAY_SECONDS),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_utc_dates() {
        assert_eq!(day_text(0), "1970-01-01");
        assert_eq!(day_text(20_781), "2026-11-24");
        assert_eq!(parse_day("2026-11-24"), Some(20_781));
        assert_eq!(parse_day("1969-12-31"), Some(-1));
        assert_eq!(parse_day("2026-13-01"), None);
        assert_eq!(
            partition_name(Kind::Metrics, 20_781),
            "metrics/day=2026-11-24"
        );
        assert_eq!(
            partition_day("units/day=2026-11-24/part-0.parquet"),
            Some(20_781)
        );
        assert_eq!(partition_day("units/day=2026-11-24"), None);
        assert_eq!(partition_day("units/.day=2026-11-24/part-0.parquet"), None);
        assert_eq!(
            day_of(Timestamp {
                seconds: -1,
                nanos: 0
            }),
            -1
        );
    }
}
