//! `/metrics/summary` (docs/api.md section 10.2): statistics, limits, failing
//! units and capability by name, group and bucket.
//!
//! Each shard keeps its rows' running statistics ([`Running`]), the serials of
//! their failing units and their last record's limits. Partials of several
//! shards merge exactly: failing serials are joined (so distinct counts are
//! exact), and statistics hold exact sums of the values and their squares
//! (`data::exact`), rounded once when a row is written. So a row is the same to
//! the bit however its records were split: into blocks or tiers, read from
//! digests or records, on one shard or several, merged in any order.
//!
//! A station's metric records join their rows a period (a sealed block's span)
//! at a time, by fine group ([`Segments`]), as a block's digest holds them.

use std::borrow::Cow;
use std::ops::Range;

// Keys are small integers chosen by the data, not by a client: a fast hash that
// is not DoS-resistant is right here, and SipHash was a third of a summary's time.
use foldhash::{HashMap, HashSet};
use serde::Deserialize;

use super::buckets::{BucketStarts, Buckets};
use super::{
    finite, group_values, key_range, position, row_order, write_group, Digests, Grouping, Names,
    PartialSummary, RowKey, Rows,
};
use crate::data::catalog::Catalog;
use crate::data::digest::{MetricDigest, Running};
use crate::data::fault::StorageFault;
use crate::data::key::{Position, RecordKey};
use crate::data::scan::{Matcher, ShardStation};
use crate::data::sealed::{period_of, period_start, MetricBlock, Slice};
use crate::data::station::{MetricEntry, MetricReader, StationData};
use crate::data::stored::StoredRecord;
use crate::data::symbols::Symbol;
use crate::domain::query::GroupField;
use crate::domain::record::numeric;
use crate::domain::time::{Timestamp, Window};

/// `/metrics/summary`: metric records in `window` that pass the filter.
#[derive(Clone, Debug)]
pub(crate) struct MetricQuestion {
    /// The window records must fall in.
    pub(crate) window: Window,
    /// The metric names asked for.
    pub(crate) names: Matcher,
    /// How the rows are grouped.
    pub(crate) grouping: Grouping,
}

impl MetricQuestion {
    /// A shard's partial over `stations`.
    pub(super) fn summarize<'a>(
        &self,
        stations: impl Iterator<Item = (ShardStation, &'a StationData)>,
        digests: Digests,
    ) -> Result<MetricPartial, StorageFault> {
        let mut partial = MetricPartial::new(self.grouping.clone());
        let mut digest = MetricDigest::default();
        for (station, data) in stations {
            let mut lasts: HashMap<RowKey, Last> = HashMap::default();
            let mut reading = MetricReading {
                partial: &mut partial,
                station,
                names: &self.names,
                digests,
                digest: &mut digest,
                lasts: &mut lasts,
            };
            data.read_metrics(key_range(&self.window), &mut reading)?;
            partial.flush(station, &mut lasts);
            partial.read_limits(data, &lasts)?;
        }
        Ok(partial)
    }
}

/// One shard's `/metrics/summary`: its rows' statistics.
#[derive(Debug)]
pub(crate) struct MetricPartial {
    /// The question's grouping, which the rows are finished by.
    grouping: Grouping,
    rows: HashMap<RowKey, MetricStatistics>,
    buckets: Buckets,
    /// The station's records of the period being read, by fine group and bucket.
    segments: Segments,
}

/// A station's metric records of one period (a sealed block's: four hours), by
/// fine group (name, slot, unit) and bucket: each joins its row once the period is
/// read, in one order, as a block's digest does. So a row's statistics come out
/// the same to the bit whether a block's records or its digest were read, and
/// whichever tier holds them.
#[derive(Debug, Default)]
struct Segments {
    period: Option<i64>,
    list: Vec<Segment>,
    index: HashMap<FineKey, usize>,
    /// The segment of the last record added, which the next is nearly always of.
    recent: Option<(FineKey, usize)>,
}

/// A metric record's fine group and bucket: name, slot, unit, bucket start.
type FineKey = (Symbol, Symbol, Symbol, i64);

#[derive(Debug)]
struct Segment {
    fine: FineKey,
    running: Running,
    /// The serials of its out-of-limit records, each once.
    failing: Vec<Symbol>,
    last: Position,
    locator: StoredRecord,
}

/// A row's last record so far: where its JSON is, or the text of its limits as a
/// block's digest keeps it (the digest, and where each limit is in it).
#[derive(Clone, Debug)]
enum Last {
    Record(StoredRecord),
    Limits(Slice, [Range<usize>; 2]),
}

/// One fine group's statistics, of a period or of a block's digest, to join its
/// row.
struct FineMetrics<'a> {
    name: Symbol,
    slot: Symbol,
    unit: Symbol,
    bucket: i64,
    running: &'a Running,
    failing: &'a [Symbol],
    /// Its last record: where it is, and where its limits are.
    last: Position,
    locator: Last,
}

/// Running statistics of one row's records, and what else its row shows.
#[derive(Clone, Debug)]
struct MetricStatistics {
    /// Of its fine groups, joined exactly.
    running: Running,
    /// The serials of the out-of-limit records (the empty one too, left out when
    /// counted): a set, so that units failing on two shards count once.
    failing: HashSet<Symbol>,
    /// The row's last record, whose limits the row shows.
    last: Position,
    limit_lower: String,
    limit_upper: String,
}

/// One station's metric records read into a shard's partial.
struct MetricReading<'a> {
    partial: &'a mut MetricPartial,
    station: ShardStation,
    names: &'a Matcher,
    digests: Digests,
    /// A digest's buffers, reused from block to block.
    digest: &'a mut MetricDigest,
    lasts: &'a mut HashMap<RowKey, Last>,
}

impl<'data> MetricReader<'data> for MetricReading<'_> {
    fn record(&mut self, key: RecordKey, entry: MetricEntry) {
        if self.names.matches(entry.name) {
            (self.partial).add(self.station, &key, &entry, self.lasts);
        }
    }

    /// Reads digests only when asked to, and only where one bucket holds them.
    fn may_take(&mut self, first: Timestamp, last: Timestamp) -> bool {
        let buckets = &mut self.partial.buckets;
        self.digests != Digests::Decode && buckets.start_of(first) == buckets.start_of(last)
    }

    fn block(&mut self, block: &MetricBlock<'data>) -> Result<bool, StorageFault> {
        let bytes = block.digest()?;
        self.digest.read(period_start(block.period()), &bytes);
        if !self.digest.exact {
            return Ok(false);
        }
        let bucket = (self.partial.buckets).start_of(self.digest.first.instant);
        // As `MetricPartial::add` and `flush` would have added its records one by
        // one: every record of the block is in the window and in `bucket`.
        let station = self.station;
        self.partial.flush(station, self.lasts);
        for group in &self.digest.groups {
            if !self.names.matches(group.name) {
                continue;
            }
            let fine = FineMetrics {
                name: group.name,
                slot: group.slot,
                unit: group.unit,
                bucket,
                running: &group.running,
                failing: &self.digest.failing[group.failing.clone()],
                last: position(station, &group.last),
                locator: Last::Limits(bytes.clone(), group.limits.clone()),
            };
            self.partial.join(station, fine, self.lasts);
        }
        Ok(true)
    }
}

impl MetricPartial {
    fn new(grouping: Grouping) -> MetricPartial {
        MetricPartial {
            buckets: Buckets::new(&grouping),
            grouping,
            rows: HashMap::default(),
            segments: Segments::default(),
        }
    }

    /// Adds a record of the station being read (in key order); `lasts` notes,
    /// per row, the station's latest record so far, whose limits are read once the
    /// station is done.
    fn add(
        &mut self,
        station: ShardStation,
        key: &RecordKey,
        entry: &MetricEntry,
        lasts: &mut HashMap<RowKey, Last>,
    ) {
        let period = period_of(key.instant);
        if self.segments.period != Some(period) {
            self.flush(station, lasts);
            self.segments.period = Some(period);
        }
        let bucket = self.buckets.start_of(key.instant);
        let fine = (entry.name, entry.slot, entry.unit, bucket);
        let segments = &mut self.segments;
        let index = match segments.recent {
            Some((recent, index)) if recent == fine => index,
            _ => {
                let list = &mut segments.list;
                let index = *segments.index.entry(fine).or_insert_with(|| {
                    list.push(Segment {
                        fine,
                        running: Running::default(),
                        failing: Vec::new(),
                        last: position(station, key),
                        locator: entry.bytes,
                    });
                    list.len() - 1
                });
                segments.recent = Some((fine, index));
                index
            }
        };
        let segment = &mut segments.list[index];
        if (segment.running).add(entry.value, entry.limit_lower, entry.limit_upper)
            && !segment.failing.contains(&entry.unit_serial)
        {
            segment.failing.push(entry.unit_serial);
        }
        // Within a station records come in order: the latest is the last seen.
        segment.last = position(station, key);
        segment.locator = entry.bytes;
    }

    /// Joins the segments of the period read last to their rows, in the order of
    /// their bucket, name, slot and unit, the order of a block's digest.
    fn flush(&mut self, station: ShardStation, lasts: &mut HashMap<RowKey, Last>) {
        let mut list = std::mem::take(&mut self.segments.list);
        list.sort_unstable_by_key(|segment| {
            let (name, slot, unit, bucket) = segment.fine;
            (bucket, name, slot, unit)
        });
        for segment in list.drain(..) {
            let (name, slot, unit, bucket) = segment.fine;
            let fine = FineMetrics {
                name,
                slot,
                unit,
                bucket,
                running: &segment.running,
                failing: &segment.failing,
                last: segment.last,
                locator: Last::Record(segment.locator),
            };
            self.join(station, fine, lasts);
        }
        let segments = &mut self.segments;
        (segments.list, segments.period, segments.recent) = (list, None, None);
        segments.index.clear();
    }

    /// Joins one fine group's statistics (of a period, or of a block's digest) to
    /// its row.
    fn join(
        &mut self,
        station: ShardStation,
        fine: FineMetrics<'_>,
        lasts: &mut HashMap<RowKey, Last>,
    ) {
        let group = group_values(&self.grouping, station, |field| match field {
            GroupField::Slot => fine.slot,
            _ => fine.unit,
        });
        let row_key = RowKey {
            group,
            name: fine.name,
            bucket: fine.bucket,
        };
        let row = self
            .rows
            .entry(row_key)
            .or_insert_with(|| MetricStatistics::empty(fine.last));
        row.running.join(fine.running);
        row.failing.extend(fine.failing);
        if fine.last >= row.last {
            row.last = fine.last;
            lasts.insert(row_key, fine.locator);
        }
    }

    /// The limits' text of each row's last record of `station`, from its JSON.
    fn read_limits(
        &mut self,
        station: &StationData,
        lasts: &HashMap<RowKey, Last>,
    ) -> Result<(), StorageFault> {
        #[derive(Deserialize)]
        struct Limits<'a> {
            #[serde(borrow)]
            limit_lower: Cow<'a, str>,
            #[serde(borrow)]
            limit_upper: Cow<'a, str>,
        }
        for (row_key, last) in lasts {
            let row = self.rows.get_mut(row_key).expect("a noted row exists");
            let bytes = match last {
                Last::Limits(digest, [lower, upper]) => {
                    let text = |range: &Range<usize>| {
                        (std::str::from_utf8(&digest[range.clone()]))
                            .expect("limits' text is UTF-8")
                            .to_owned()
                    };
                    (row.limit_lower, row.limit_upper) = (text(lower), text(upper));
                    continue;
                }
                Last::Record(bytes) => bytes,
            };
            let mut json = Vec::new();
            station.write_json(*bytes, &mut json)?;
            let limits: Limits = serde_json::from_slice(&json)
                .expect("a metric record's JSON, rendered at load, has both limits");
            row.limit_lower = limits.limit_lower.into_owned();
            row.limit_upper = limits.limit_upper.into_owned();
        }
        Ok(())
    }
}

impl MetricStatistics {
    fn empty(first: Position) -> MetricStatistics {
        MetricStatistics {
            running: Running::default(),
            failing: HashSet::default(),
            last: first,
            limit_lower: String::new(),
            limit_upper: String::new(),
        }
    }

    fn absorb(&mut self, other: MetricStatistics) {
        self.running.join(&other.running);
        self.failing.extend(other.failing);
        if other.last > self.last {
            self.last = other.last;
            self.limit_lower = other.limit_lower;
            self.limit_upper = other.limit_upper;
        }
    }
}

/// What [`Rows::with_capacity`] reserves a `/metrics/summary` row: a little over
/// the rows seen, about 240 bytes, and some 40 more with `bucket_start`.
const METRIC_ROW_BYTES: usize = 300;

impl PartialSummary for MetricPartial {
    fn merge(&mut self, other: MetricPartial) {
        for (key, statistics) in other.rows {
            match self.rows.get_mut(&key) {
                Some(row) => row.absorb(statistics),
                None => {
                    self.rows.insert(key, statistics);
                }
            }
        }
    }

    fn row_count(&self) -> usize {
        self.rows.len()
    }

    fn finish(self, catalog: &Catalog) -> Result<Rows, StorageFault> {
        let grouping = &self.grouping;
        let mut rows: Vec<(RowKey, MetricStatistics)> = self.rows.into_iter().collect();
        let names = Names::of(catalog, grouping, rows.iter().map(|(key, _)| key))?;
        rows.sort_unstable_by(|(left, _), (right, _)| row_order(grouping, left, right, &names));
        let mut rendered = Rows::with_capacity(rows.len(), METRIC_ROW_BYTES);
        let mut bucket_starts = BucketStarts::new(grouping.zone);
        for (key, statistics) in rows {
            let running = &statistics.running;
            let has_numbers = running.numeric > 0;
            let stddev = finite(running.stddev());
            let mean = finite(running.mean());
            let failing_units =
                statistics.failing.len() - usize::from(statistics.failing.contains(&Symbol::EMPTY));
            let (cp, cpk) = capability(
                numeric(&statistics.limit_lower),
                numeric(&statistics.limit_upper),
                mean,
                stddev,
            );
            rendered.push(|row| {
                write_group(row, grouping, &key, true, &names, &mut bucket_starts);
                row.field("count", &running.count);
                row.field("numeric", &running.numeric);
                row.field("min", &has_numbers.then_some(running.min));
                row.field("max", &has_numbers.then_some(running.max));
                row.field("mean", &mean);
                row.field("stddev", &stddev);
                row.field("limit_lower", &statistics.limit_lower);
                row.field("limit_upper", &statistics.limit_upper);
                row.field("out_of_limits", &running.out_of_limits);
                row.field("failing_units", &failing_units);
                row.field("cp", &cp);
                row.field("cpk", &cpk);
            });
        }
        Ok(rendered)
    }
}

/// `cp` and `cpk` from the last record's limits (those that are numeric), the mean
/// and the overall sample standard deviation (so Pp and Ppk, in AIAG's words):
/// `cp` = (U - L) / 6s with both limits; `cpk` = min(U - mean, mean - L) / 3s with
/// both, the one side with one; `None` without a limit it needs or with s = 0.
fn capability(
    lower: Option<f64>,
    upper: Option<f64>,
    mean: Option<f64>,
    stddev: Option<f64>,
) -> (Option<f64>, Option<f64>) {
    let (Some(mean), Some(stddev)) = (mean, stddev.filter(|stddev| *stddev > 0.0)) else {
        return (None, None);
    };
    let cp = lower
        .zip(upper)
        .map(|(lower, upper)| (upper - lower) / (6.0 * stddev));
    let cpk = match (lower, upper) {
        (Some(lower), Some(upper)) => Some((upper - mean).min(mean - lower)),
        (None, Some(upper)) => Some(upper - mean),
        (Some(lower), None) => Some(mean - lower),
        (None, None) => None,
    };
    (
        finite(cp),
        finite(cpk.map(|margin| margin / (3.0 * stddev))),
    )
}

#[cfg(test)]
mod tests;
