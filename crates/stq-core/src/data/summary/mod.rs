//! Summaries (docs/api.md section 10): what a dashboard shows, computed where the
//! records live.
//!
//! Each shard summarises its own stations into a [`Partial`]: counts per group and
//! bucket, per unit its first, second and last attempt, and each row's cycle times
//! (units); or running statistics, the serials of failing units and the last
//! record's limits (metrics). Partials of several shards merge exactly: a unit
//! whose attempts lie on two shards (grouped by `slot`, say) keeps the two earliest
//! attempts and the latest one, cycle times and failing serials are joined (so
//! percentiles and distinct counts are exact), and statistics hold exact sums,
//! so that no split or order of the records changes a row's bytes. [`PartialSummary::finish`] turns the merged partial into rows in the
//! contract's order, rendered as JSON. No raw record leaves its shard.
//!
//! A module per question, each with its question, its partial and how a shard
//! reads records into it: [`units`] (a cycle time pairs an output record with an
//! input record of one station, so the pairing is done on the station's shard),
//! [`metrics`] and [`stations`]; [`buckets`] places instants in buckets, in UTC
//! or a zone. This module holds what they share: the question and partial enums
//! (a line each per question), the [`PartialSummary`] seam the merge
//! (`data::plan`) goes through, rows' order, and [`Rows`], the rendered JSON.
//!
//! A sealed block that the window and one bucket hold whole is read from its
//! digest (`data::digest`) instead of its records, with the same answer to the
//! byte (see [`units`] and [`metrics`]).
//!
//! A new summary is a module here (its question, partial, a reading of records and
//! `PartialSummary`), its variant in [`Question`] and [`Partial`], its endpoint in
//! `domain::query`'s table, and its plan and answer in `data::plan` (the compiler
//! lists the places: every `match` on them is exhaustive).

use std::cmp::Ordering;
use std::ops::Range;

use crate::data::catalog::Catalog;
use crate::data::fault::StorageFault;
use crate::data::key::{Position, RecordKey};
use crate::data::scan::ShardStation;
use crate::data::shard::ShardData;
use crate::data::symbols::{Symbol, Symbols};
use crate::domain::query::{Bucket, GroupField};
use crate::domain::time::Window;
use crate::domain::zone::Zone;

use buckets::BucketStarts;
pub(crate) use control::{ControlPartial, ControlQuestion};
pub(crate) use metrics::{MetricPartial, MetricQuestion};
pub(crate) use stations::StationsPartial;
pub(crate) use units::{UnitPartial, UnitQuestion};

mod buckets;
mod control;
mod metrics;
mod stations;
#[cfg(test)]
mod tests;
mod units;

/// What one shard is asked to summarise.
#[derive(Clone, Debug)]
pub(crate) struct SummaryRequest {
    /// The shard's stations the query reads.
    pub(crate) stations: Vec<ShardStation>,
    /// The summary asked for.
    pub(crate) question: Question,
}

/// The three summaries, each answered by its own module.
#[derive(Clone, Debug)]
pub(crate) enum Question {
    /// `/units/summary`.
    Units(UnitQuestion),
    /// `/metrics/summary`.
    Metrics(MetricQuestion),
    /// `/stations`: every record of each station, no window.
    Stations,
    /// `/metrics/control`.
    Control(ControlQuestion),
}

impl Question {
    /// The window its records must fall in; none for `/stations`.
    pub(crate) fn window(&self) -> Option<&Window> {
        match self {
            Question::Units(question) => Some(&question.window),
            Question::Metrics(question) => Some(&question.window),
            Question::Stations => None,
            Question::Control(question) => Some(&question.window),
        }
    }
}

/// How rows are grouped: by these fields, in this order, and into these buckets,
/// cut at the wall clock of `zone`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Grouping {
    /// The `group_by` fields, in the order asked.
    pub(crate) fields: Vec<GroupField>,
    /// The time buckets, if asked for.
    pub(crate) bucket: Option<Bucket>,
    /// The zone whose wall clock cuts buckets of a day or more.
    pub(crate) zone: Zone,
}

/// The values of a row's group fields, in `group_by` order: a station's rank, or
/// a symbol. At most four fields exist, so a fixed array needs no allocation.
type GroupValues = [u32; 4];

/// A row's identity: its group, its metric name (metrics only) and its bucket's
/// first instant in seconds since the epoch (0 without buckets).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct RowKey {
    group: GroupValues,
    name: Symbol,
    bucket: i64,
}

/// One shard's summary, one variant per question: the merge takes the
/// shards' partials of its question ([`PartialSummary::merge`]) and finishes
/// them.
#[derive(Debug)]
pub(crate) enum Partial {
    /// A shard's `/units/summary`.
    Units(UnitPartial),
    /// A shard's `/metrics/summary`.
    Metrics(MetricPartial),
    /// A shard's `/stations`.
    Stations(StationsPartial),
    /// A shard's `/metrics/control`.
    Control(ControlPartial),
}

/// What the merge does with the shards' partials of one question: merges them,
/// counts the rows they make, and renders those. A partial carries what its
/// question asked (its grouping), so that it finishes alone.
pub(crate) trait PartialSummary: Sized {
    /// Folds another shard's partial of the same question into this one.
    fn merge(&mut self, other: Self);

    /// The number of rows [`PartialSummary::finish`] will make.
    fn row_count(&self) -> usize;

    /// The rows, in the contract's order, as JSON; `catalog` names stations and
    /// symbols. A row that shows a sealed record's fields reads them from its
    /// block, and a store file that fails that read is its fault.
    fn finish(self, catalog: &Catalog) -> Result<Rows, StorageFault>;
}

/// Rows rendered as JSON objects, one after another in `bytes`.
#[derive(Debug, Default)]
pub(crate) struct Rows {
    bytes: Vec<u8>,
    rows: Vec<Range<usize>>,
}

impl Rows {
    /// How many rows there are.
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    /// Each row's JSON, in order.
    pub(crate) fn rows(&self) -> impl Iterator<Item = &[u8]> + Clone + '_ {
        self.rows.iter().map(|range| &self.bytes[range.clone()])
    }

    /// Room for `rows` rows of about `row_bytes` bytes each: growing the bytes
    /// by doubling copied them over and over (a tenth of a large summary's time).
    fn with_capacity(rows: usize, row_bytes: usize) -> Rows {
        Rows {
            bytes: Vec::with_capacity(rows * row_bytes),
            rows: Vec::with_capacity(rows),
        }
    }

    /// Adds the row `write` writes, field by field.
    fn push(&mut self, write: impl FnOnce(&mut RowWriter)) {
        let start = self.bytes.len();
        let mut row = RowWriter {
            bytes: &mut self.bytes,
            fields: 0,
        };
        write(&mut row);
        row.end();
        self.rows.push(start..self.bytes.len());
    }
}

/// Writes one row's JSON object straight into the rows' bytes. Its keys are the
/// contract's fixed names, ASCII that needs no escaping, so they are copied as
/// they are; only the values go through serde_json (texts need escaping, numbers
/// its formatting). Through serde_json's map, escaping the keys was a sixth of
/// writing a row.
struct RowWriter<'a> {
    bytes: &'a mut Vec<u8>,
    fields: usize,
}

impl RowWriter<'_> {
    fn field<T: serde::Serialize + ?Sized>(&mut self, key: &str, value: &T) {
        debug_assert!(key
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_'));
        self.bytes.push(if self.fields == 0 { b'{' } else { b',' });
        self.fields += 1;
        self.bytes.push(b'"');
        self.bytes.extend_from_slice(key.as_bytes());
        self.bytes.extend_from_slice(b"\":");
        serde_json::to_writer(&mut *self.bytes, value).expect(WRITING);
    }

    /// A field whose value is `json`, JSON text written already.
    fn raw_field(&mut self, key: &str, json: &[u8]) {
        self.bytes.push(if self.fields == 0 { b'{' } else { b',' });
        self.fields += 1;
        self.bytes.push(b'"');
        self.bytes.extend_from_slice(key.as_bytes());
        self.bytes.extend_from_slice(b"\":");
        self.bytes.extend_from_slice(json);
    }

    fn end(self) {
        if self.fields == 0 {
            self.bytes.push(b'{');
        }
        self.bytes.push(b'}');
    }
}

impl ShardData {
    /// This shard's part of a summary. `symbols` is the generation's table, which
    /// the `result` values are read from to decide what passes.
    /// A store file that fails a read of the summary's is its fault.
    pub(crate) fn summarize(
        &self,
        request: &SummaryRequest,
        symbols: &Symbols,
    ) -> Result<Partial, StorageFault> {
        self.summarize_reading(request, symbols, Digests::Read)
    }

    /// [`ShardData::summarize`], reading sealed blocks' digests where they will do
    /// or, for tests, decoding every block.
    fn summarize_reading(
        &self,
        request: &SummaryRequest,
        symbols: &Symbols,
        digests: Digests,
    ) -> Result<Partial, StorageFault> {
        let held = request.stations.iter().filter_map(|&station| {
            let data = self.stations.get(station.station_index as usize)?;
            Some((station, data))
        });
        let stations = held.clone().map(|(station, data)| (station, &**data));
        Ok(match &request.question {
            Question::Units(question) => {
                Partial::Units(question.summarize(stations, symbols, digests)?)
            }
            Question::Metrics(question) => Partial::Metrics(question.summarize(stations, digests)?),
            Question::Stations => Partial::Stations(StationsPartial::summarize(stations)?),
            Question::Control(question) => Partial::Control(question.summarize(held)?),
        })
    }
}

/// Whether a summary reads sealed blocks' digests where they will do, or decodes
/// every block (so that tests can hold the two to the same answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Digests {
    Read,
    #[cfg_attr(not(test), allow(dead_code))]
    Decode,
}

/// The keys of a station's records whose instants are in `window`.
fn key_range(window: &Window) -> Range<RecordKey> {
    RecordKey {
        instant: window.from,
        load_order: 0,
    }..RecordKey {
        instant: window.to,
        load_order: 0,
    }
}

fn position(station: ShardStation, key: &RecordKey) -> Position {
    Position {
        instant: key.instant,
        station_rank: station.rank,
        load_order: key.load_order,
    }
}

/// The group values of a record; `field_of` gives a symbol-valued field.
fn group_values(
    grouping: &Grouping,
    station: ShardStation,
    field_of: impl Fn(GroupField) -> Symbol,
) -> GroupValues {
    let mut values = [0; 4];
    for (value, &field) in values.iter_mut().zip(&grouping.fields) {
        *value = match field {
            GroupField::StationId => station.rank,
            field => field_of(field).0,
        };
    }
    values
}

const WRITING: &str = "writing JSON to a Vec cannot fail";

/// The texts of the symbols a summary's rows show (group values, metric names),
/// read from the table once, before the rows are ordered and written: a read of
/// a mapped run that fails is the summary's fault, met before a sort would meet it.
struct Names<'a> {
    catalog: &'a Catalog,
    texts: foldhash::HashMap<Symbol, &'a str>,
}

impl<'a> Names<'a> {
    /// The texts of the symbols of the rows `keys` of `grouping`.
    fn of<'k>(
        catalog: &'a Catalog,
        grouping: &Grouping,
        keys: impl Iterator<Item = &'k RowKey>,
    ) -> Result<Names<'a>, StorageFault> {
        let mut texts = foldhash::HashMap::default();
        for key in keys {
            let groups = (grouping.fields.iter().zip(&key.group))
                .filter(|(field, _)| **field != GroupField::StationId)
                .map(|(_, value)| Symbol(*value));
            for symbol in groups.chain([key.name]) {
                if let std::collections::hash_map::Entry::Vacant(entry) = texts.entry(symbol) {
                    entry.insert(catalog.symbols.text(symbol)?);
                }
            }
        }
        Ok(Names { catalog, texts })
    }

    /// The text of a symbol of the rows it was read for.
    fn text(&self, symbol: Symbol) -> &'a str {
        self.texts[&symbol]
    }

    /// The text of a group value.
    fn group(&self, field: GroupField, value: u32) -> &'a str {
        match field {
            GroupField::StationId => &self.catalog.stations[value as usize],
            _ => self.text(Symbol(value)),
        }
    }
}

/// The contract's row order: by the group fields' text in byte order, in
/// `group_by` order, then by name (metrics), then by bucket.
fn row_order(grouping: &Grouping, left: &RowKey, right: &RowKey, names: &Names<'_>) -> Ordering {
    let groups = grouping
        .fields
        .iter()
        .zip(left.group.iter().zip(&right.group));
    for (&field, (&left, &right)) in groups {
        let order = match field {
            // Ranks follow the byte order of station ids.
            GroupField::StationId => left.cmp(&right),
            _ if left == right => Ordering::Equal,
            _ => names.group(field, left).cmp(names.group(field, right)),
        };
        if order != Ordering::Equal {
            return order;
        }
    }
    let by_name = match left.name == right.name {
        true => Ordering::Equal,
        false => names.text(left.name).cmp(names.text(right.name)),
    };
    by_name.then(left.bucket.cmp(&right.bucket))
}

/// Writes the group fields and `bucket_start` that start every summary row.
fn write_group(
    row: &mut RowWriter,
    grouping: &Grouping,
    key: &RowKey,
    with_name: bool,
    names: &Names<'_>,
    bucket_starts: &mut BucketStarts,
) {
    for (&field, &value) in grouping.fields.iter().zip(&key.group) {
        row.field(field.name(), names.group(field, value));
    }
    if with_name {
        row.field("name", names.text(key.name));
    }
    if grouping.bucket.is_some() {
        row.field("bucket_start", bucket_starts.text(key.bucket));
    }
}

/// A ratio as a JSON number, or `null` without a denominator.
fn ratio(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// A statistic as a JSON number; `null` when it does not exist or overflowed.
fn finite(value: Option<f64>) -> Option<f64> {
    value.filter(|value| value.is_finite())
}
