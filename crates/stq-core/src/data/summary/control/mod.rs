//! `/metrics/control` (docs/api.md section 15): the individuals chart (I-MR) of
//! each measurement and group, and the points Nelson's rules flag.
//!
//! A chart needs its points in the contract's order (a moving range and a run
//! cross every tier and block boundary), so a shard reads each group's numeric
//! values in order, station by station, and keeps them: a point is its position,
//! its value and where its record is. A group within one station, as under the
//! default grouping, is whole on its shard; one that spans stations (grouped by
//! `slot` or `unit` alone) is merged by position from every shard that has some
//! of it. The chart ([`chart`]) is drawn once its points are whole, in the
//! merge, and only then is the JSON of a flagged point's record read, for its
//! `violations` entry. The arithmetic runs in the points' order, which the
//! files alone decide, so a row is the same to the bit whatever the cache, the
//! tiers or the shards.

use std::borrow::Cow;
use std::sync::Arc;

use foldhash::HashMap;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{
    finite, group_values, key_range, position, row_order, write_group, Grouping, Names, RowKey,
    Rows,
};
use crate::data::catalog::Catalog;
use crate::data::fault::StorageFault;
use crate::data::key::{Position, RecordKey};
use crate::data::scan::{Matcher, ShardStation};
use crate::data::sealed::MetricBlock;
use crate::data::station::{MetricEntry, MetricReader, StationData};
use crate::data::stored::StoredRecord;
use crate::data::summary::PartialSummary;
use crate::data::symbols::Symbol;
use crate::domain::query::{GroupField, Rules};
use crate::domain::record::numeric;
use crate::domain::time::{Timestamp, Window};

use chart::{capability, flags, Limits};

mod chart;
#[cfg(test)]
mod tests;

/// The most `violations` a row lists; `violations_count` counts them all.
const VIOLATIONS_LISTED: usize = 1000;

/// `/metrics/control`: the charts of the metric records in `window` that pass the
/// filter, with limits from those in `baseline`.
#[derive(Clone, Debug)]
pub(crate) struct ControlQuestion {
    /// The window whose points are charted.
    pub(crate) window: Window,
    /// The window whose points give the limits; `None`: `window`.
    pub(crate) baseline: Option<Window>,
    /// The metric names asked for.
    pub(crate) names: Matcher,
    /// How the rows are grouped (never into buckets).
    pub(crate) grouping: Grouping,
    /// The rules applied.
    pub(crate) rules: Rules,
}

/// One shard's `/metrics/control`, or the merge of several: each group's points.
#[derive(Debug)]
pub(crate) struct ControlPartial {
    question: ControlQuestion,
    series: HashMap<RowKey, Series>,
    /// The stations the points are of, by rank, whose records the flagged points'
    /// `violations` entries and the limits are read from.
    stations: HashMap<u32, Arc<StationData>>,
}

/// One group's points, in the window and in the baseline.
#[derive(Debug, Default)]
struct Series {
    /// The window's points with a numeric value.
    points: Vec<Point>,
    /// The baseline's values by position, when the baseline is not the window.
    baseline: Vec<(Position, f64)>,
    /// The group's last record in the window, numeric or not: its limits are the
    /// row's.
    last: Option<(Position, StoredRecord)>,
    /// Whether points of several stations were added, so that they need sorting
    /// (a station's come in order).
    mixed: bool,
    /// The station of the records added last.
    station: Option<u32>,
}

/// A point of a chart: where it is in the order, its value, and its record.
#[derive(Clone, Copy, Debug)]
struct Point {
    position: Position,
    value: f64,
    record: StoredRecord,
}

impl ControlQuestion {
    /// A shard's partial over `stations`.
    pub(super) fn summarize<'a>(
        &self,
        stations: impl Iterator<Item = (ShardStation, &'a Arc<StationData>)>,
    ) -> Result<ControlPartial, StorageFault> {
        let mut partial = ControlPartial {
            question: self.clone(),
            series: HashMap::default(),
            stations: HashMap::default(),
        };
        for (station, data) in stations {
            let mut reading = ControlReading {
                partial: &mut partial,
                station,
                baseline: false,
                recent: None,
            };
            data.read_metrics(key_range(&self.window), &mut reading)?;
            if let Some(baseline) = &self.baseline {
                reading.baseline = true;
                reading.recent = None;
                data.read_metrics(key_range(baseline), &mut reading)?;
            }
            partial.stations.insert(station.rank, Arc::clone(data));
        }
        Ok(partial)
    }
}

/// One station's metric records read into a shard's partial.
struct ControlReading<'a> {
    partial: &'a mut ControlPartial,
    station: ShardStation,
    /// Whether the baseline is being read, not the window.
    baseline: bool,
    /// The fine group (name, slot, unit) of the last record and its row, which
    /// the next record is nearly always of.
    recent: Option<((Symbol, Symbol, Symbol), RowKey)>,
}

impl<'data> MetricReader<'data> for ControlReading<'_> {
    fn record(&mut self, key: RecordKey, entry: MetricEntry) {
        let question = &self.partial.question;
        if !question.names.matches(entry.name) {
            return;
        }
        let fine = (entry.name, entry.slot, entry.unit);
        let row_key = match self.recent {
            Some((recent, row_key)) if recent == fine => row_key,
            _ => {
                let group = group_values(&question.grouping, self.station, |field| match field {
                    GroupField::Slot => entry.slot,
                    _ => entry.unit,
                });
                let row_key = RowKey {
                    group,
                    name: entry.name,
                    bucket: 0,
                };
                self.recent = Some((fine, row_key));
                row_key
            }
        };
        let series = self.partial.series.entry(row_key).or_default();
        let position = position(self.station, &key);
        // The window's points and the baseline's values each come in order
        // within a station; of two stations, they need sorting.
        if (series.station).is_some_and(|station| station != self.station.rank) {
            series.mixed = true;
        }
        series.station = Some(self.station.rank);
        if self.baseline {
            if entry.value.is_finite() {
                series.baseline.push((position, entry.value));
            }
            return;
        }
        if series.last.is_none_or(|(last, _)| last < position) {
            series.last = Some((position, entry.bytes));
        }
        if entry.value.is_finite() {
            series.points.push(Point {
                position,
                value: entry.value,
                record: entry.bytes,
            });
        }
    }

    /// A chart needs every point: no digest will do.
    fn may_take(&mut self, _first: Timestamp, _last: Timestamp) -> bool {
        false
    }

    fn block(&mut self, _block: &MetricBlock<'data>) -> Result<bool, StorageFault> {
        Ok(false)
    }
}

impl Series {
    /// Takes another shard's points of the same group.
    fn absorb(&mut self, other: Series) {
        let mixed = !self.points.is_empty() || !self.baseline.is_empty();
        self.mixed |= other.mixed || mixed;
        self.points.extend(other.points);
        self.baseline.extend(other.baseline);
        if let Some(last) = other.last {
            if self.last.is_none_or(|(position, _)| position < last.0) {
                self.last = Some(last);
            }
        }
    }

    /// Its points (and baseline values) in the contract's order.
    fn sort(&mut self) {
        if self.mixed {
            self.points.sort_unstable_by_key(|point| point.position);
            self.baseline
                .sort_unstable_by_key(|(position, _)| *position);
            self.mixed = false;
        }
    }
}

impl PartialSummary for ControlPartial {
    fn merge(&mut self, other: ControlPartial) {
        self.stations.extend(other.stations);
        for (key, series) in other.series {
            match self.series.get_mut(&key) {
                Some(mine) => mine.absorb(series),
                None => {
                    self.series.insert(key, series);
                }
            }
        }
    }

    fn row_count(&self) -> usize {
        (self.series.values())
            .filter(|series| !series.points.is_empty())
            .count()
    }

    fn finish(self, catalog: &Catalog) -> Result<Rows, StorageFault> {
        let ControlPartial {
            question,
            series,
            stations,
        } = self;
        let grouping = &question.grouping;
        let mut rows: Vec<(RowKey, Series)> = (series.into_iter())
            .filter(|(_, series)| !series.points.is_empty())
            .collect();
        let names = Names::of(catalog, grouping, rows.iter().map(|(key, _)| key))?;
        rows.sort_unstable_by(|(left, _), (right, _)| row_order(grouping, left, right, &names));
        let mut rendered = Rows::with_capacity(rows.len(), CONTROL_ROW_BYTES);
        let mut bucket_starts = super::buckets::BucketStarts::new(grouping.zone);
        let mut json = Vec::new();
        let mut violations = Vec::new();
        for (key, mut series) in rows {
            series.sort();
            // Every record of the window is noted as the last so far.
            let (position, record) = series.last.expect("a series with points has a last record");
            let fields = record_fields(&stations, &position, record, &mut json)?;
            let (limit_lower, limit_upper) = (
                fields.limit_lower.into_owned(),
                fields.limit_upper.into_owned(),
            );
            let (baseline_count, limits) = match question.baseline {
                Some(_) => (
                    series.baseline.len(),
                    Limits::of(series.baseline.iter().map(|(_, value)| *value)),
                ),
                None => (
                    series.points.len(),
                    Limits::of(series.points.iter().map(|point| point.value)),
                ),
            };
            let (lower, upper) = (numeric(&limit_lower), numeric(&limit_upper));
            let mut count = 0_u64;
            violations.clear();
            if let Some(limits) = &limits {
                let points = series.points.iter().map(|point| point.value);
                flags(points, limits, question.rules, |index, rule| {
                    count += 1;
                    if violations.len() < VIOLATIONS_LISTED {
                        violations.push((index, rule));
                    }
                });
            }
            let listed = violations_json(&violations, &series.points, &stations, &mut json)?;
            rendered.push(|row| {
                write_group(row, grouping, &key, true, &names, &mut bucket_starts);
                row.field("points", &series.points.len());
                row.field("baseline_points", &baseline_count);
                row.field("center", &finite(limits.map(|limits| limits.center)));
                row.field("sigma", &finite(limits.map(|limits| limits.sigma)));
                row.field("ucl", &finite(limits.map(|limits| limits.upper())));
                row.field("lcl", &finite(limits.map(|limits| limits.lower())));
                row.field("mr_mean", &finite(limits.map(|limits| limits.mr_mean)));
                row.field("mr_ucl", &finite(limits.map(|limits| limits.mr_upper())));
                let cpk =
                    limits.and_then(|limits| capability(lower, upper, limits.center, limits.sigma));
                let ppk = limits
                    .and_then(|limits| capability(lower, upper, limits.center, limits.stddev));
                row.field("cpk", &cpk);
                row.field("ppk", &ppk);
                row.field("limit_lower", &limit_lower);
                row.field("limit_upper", &limit_upper);
                row.field("violations_count", &count);
                row.raw_field("violations", &listed);
            });
        }
        Ok(rendered)
    }
}

/// The `violations` of a row as JSON: each flag's rule and its point's record's
/// fields, read from the record's JSON (`json` is a buffer for it).
fn violations_json(
    violations: &[(usize, u8)],
    points: &[Point],
    stations: &HashMap<u32, Arc<StationData>>,
    json: &mut Vec<u8>,
) -> Result<Vec<u8>, StorageFault> {
    let mut listed = Vec::with_capacity(violations.len() * 120 + 2);
    listed.push(b'[');
    for (number, &(index, rule)) in violations.iter().enumerate() {
        let point = &points[index];
        let fields = record_fields(stations, &point.position, point.record, json)?;
        if number > 0 {
            listed.push(b',');
        }
        listed.extend_from_slice(b"{\"rule\":");
        listed.extend_from_slice(rule.to_string().as_bytes());
        for (name, value) in [
            ("time_created", fields.time_created),
            ("station_id", fields.station_id),
            ("unit_serial", fields.unit_serial),
            ("value", fields.value),
        ] {
            listed.extend_from_slice(b",\"");
            listed.extend_from_slice(name.as_bytes());
            listed.extend_from_slice(b"\":");
            listed.extend_from_slice(value.get().as_bytes());
        }
        listed.push(b'}');
    }
    listed.push(b']');
    Ok(listed)
}

/// The fields a row shows of the record at `position`, read from its JSON into
/// `json`.
fn record_fields<'json>(
    stations: &HashMap<u32, Arc<StationData>>,
    position: &Position,
    record: StoredRecord,
    json: &'json mut Vec<u8>,
) -> Result<RecordFields<'json>, StorageFault> {
    json.clear();
    stations[&position.station_rank].write_json(record, json)?;
    Ok(serde_json::from_slice(json)
        .expect("a metric record's JSON, rendered at load, has every field"))
}

/// The fields of a metric record's JSON a control row shows, as the API returns
/// them.
#[derive(Deserialize)]
struct RecordFields<'a> {
    #[serde(borrow)]
    time_created: &'a RawValue,
    #[serde(borrow)]
    station_id: &'a RawValue,
    #[serde(borrow)]
    unit_serial: &'a RawValue,
    #[serde(borrow)]
    value: &'a RawValue,
    #[serde(borrow)]
    limit_lower: Cow<'a, str>,
    #[serde(borrow)]
    limit_upper: Cow<'a, str>,
}

/// What [`Rows::with_capacity`] reserves a row without violations.
const CONTROL_ROW_BYTES: usize = 360;
