//! Summaries (docs/api.md section 10): what a dashboard shows, computed where the
//! records live.
//!
//! Each shard summarises its own stations into a [`Partial`]: counts per group and
//! bucket, and per unit its first and last attempt (units), or running statistics
//! and the last record's limits (metrics). Partials of several shards merge
//! exactly: a unit whose attempts lie on two shards (grouped by `slot`, say) keeps
//! the earliest first attempt and the latest last one, and statistics combine by
//! Chan's formulas. [`Partial::finish`] turns the merged partial into rows in the
//! contract's order, rendered as JSON. No raw record leaves its shard.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::ops::Range;

// Keys are small integers chosen by the data, not by a client: a fast hash that
// is not DoS-resistant is right here, and SipHash was a third of a summary's time.
use foldhash::HashMap;

use serde::ser::{SerializeMap, Serializer};
use serde::Deserialize;

use crate::data::catalog::Catalog;
use crate::data::key::{Position, RecordKey};
use crate::data::scan::{Matcher, ShardStation};
use crate::data::shard::ShardData;
use crate::data::station::{MetricEntry, StationData, UnitEntry};
use crate::data::stored::StoredRecord;
use crate::data::symbols::{Symbol, Symbols};
use crate::domain::query::{Bucket, GroupField};
use crate::domain::record::{numeric, Direction};
use crate::domain::time::{Timestamp, Window};
use crate::domain::zone::Zone;

/// What one shard is asked to summarise.
#[derive(Clone, Debug)]
pub struct SummaryRequest {
    /// The shard's stations the query reads.
    pub stations: Vec<ShardStation>,
    pub question: Question,
}

/// The three summaries.
#[derive(Clone, Debug)]
pub enum Question {
    /// `/units/summary`: output unit records in `window` that pass the filters.
    Units {
        window: Window,
        unit_types: Matcher,
        unit_serial: Matcher,
        grouping: Grouping,
        /// `--pass-results`: the `result` values that pass, compared ignoring ASCII case.
        pass_results: Vec<String>,
    },
    /// `/metrics/summary`: metric records in `window` that pass the filter.
    Metrics {
        window: Window,
        names: Matcher,
        grouping: Grouping,
    },
    /// `/stations`: every record of each station, no window.
    Stations,
}

/// How rows are grouped: by these fields, in this order, and into these buckets,
/// cut at the wall clock of `zone`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grouping {
    pub fields: Vec<GroupField>,
    pub bucket: Option<Bucket>,
    pub zone: Zone,
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

/// One shard's summary, to be merged with the other shards' and finished.
#[derive(Debug)]
pub enum Partial {
    Units(UnitPartial),
    Metrics(MetricPartial),
    Stations(Vec<StationSummary>),
}

#[derive(Debug, Default)]
pub struct UnitPartial {
    rows: Vec<(RowKey, UnitCounts)>,
    /// Where each row is in `rows`.
    index: HashMap<RowKey, usize>,
    /// The row of the last record added: a station's records come in time order,
    /// so the next record is nearly always of the same row, and needs no hashing.
    recent: Option<(RowKey, usize)>,
    /// Units with a serial number, by group and serial: where they were tried.
    units: HashMap<(GroupValues, Symbol), Attempts>,
    buckets: Buckets,
}

#[derive(Debug, Default)]
struct UnitCounts {
    records: u64,
    /// Records by `result`; few distinct values, so a list beats a map.
    results: Vec<(Symbol, u64)>,
    units: u64,
    first_pass: u64,
    final_pass: u64,
}

/// A unit's first and last attempt in the window, in the contract's order.
#[derive(Clone, Copy, Debug)]
struct Attempts {
    first: Position,
    /// The row of the first attempt, an index into its partial's `rows`.
    first_row: usize,
    first_passed: bool,
    last: Position,
    last_passed: bool,
}

#[derive(Debug, Default)]
pub struct MetricPartial {
    rows: HashMap<RowKey, MetricStatistics>,
    buckets: Buckets,
}

/// Running statistics of one row's records.
#[derive(Clone, Debug)]
struct MetricStatistics {
    count: u64,
    numeric: u64,
    min: f64,
    max: f64,
    mean: f64,
    /// Sum of squared deviations from the mean (Welford, merged by Chan et al.).
    squares: f64,
    out_of_limits: u64,
    /// The row's last record, whose limits the row shows.
    last: Position,
    limit_lower: String,
    limit_upper: String,
}

/// One station's line of `/stations`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StationSummary {
    pub rank: u32,
    pub units: u64,
    pub metrics: u64,
    /// `time_created` as written, of the station's first and last record.
    pub first: String,
    pub last: String,
}

/// Rows rendered as JSON objects, one after another in `bytes`.
#[derive(Debug, Default)]
pub struct Rows {
    bytes: Vec<u8>,
    rows: Vec<Range<usize>>,
}

impl Rows {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Each row's JSON, in order.
    pub fn rows(&self) -> impl Iterator<Item = &[u8]> + Clone + '_ {
        self.rows.iter().map(|range| &self.bytes[range.clone()])
    }

    fn push(&mut self, write: impl FnOnce(&mut serde_json::Serializer<&mut Vec<u8>>)) {
        let start = self.bytes.len();
        write(&mut serde_json::Serializer::new(&mut self.bytes));
        self.rows.push(start..self.bytes.len());
    }
}

impl ShardData {
    /// This shard's part of a summary. `symbols` is the generation's table, which
    /// the `result` values are read from to decide what passes.
    pub fn summarize(&self, request: &SummaryRequest, symbols: &Symbols) -> Partial {
        let stations = request.stations.iter().filter_map(|&station| {
            let data = self.stations.get(station.station_index as usize)?;
            Some((station, data))
        });
        match &request.question {
            Question::Units {
                window,
                unit_types,
                unit_serial,
                grouping,
                pass_results,
            } => {
                let mut passes = PassCache::new(pass_results, symbols);
                let no_serial = symbols.lookup("");
                // Grouped by station, a unit's attempts are all on its station:
                // count its units once the station is done, so that the map of
                // units stays small and the router merges counts, not units.
                let by_station = grouping.fields.contains(&GroupField::StationId);
                let mut partial = UnitPartial::default();
                for (station, data) in stations {
                    for (key, entry) in station_units(data, window, unit_serial) {
                        if entry.direction != Direction::Output
                            || !unit_types.matches(entry.unit_type)
                        {
                            continue;
                        }
                        let passed = passes.passes(entry.result);
                        partial.add(grouping, station, key, entry, passed, no_serial);
                    }
                    if by_station {
                        partial.settle();
                    }
                }
                Partial::Units(partial)
            }
            Question::Metrics {
                window,
                names,
                grouping,
            } => {
                let mut partial = MetricPartial::default();
                for (station, data) in stations {
                    let mut lasts: HashMap<RowKey, StoredRecord> = HashMap::default();
                    for (key, entry) in data.metrics_in(key_range(window)) {
                        if names.matches(entry.name) {
                            partial.add(grouping, station, key, entry, &mut lasts);
                        }
                    }
                    partial.read_limits(data, &lasts);
                }
                Partial::Metrics(partial)
            }
            Question::Stations => Partial::Stations(
                stations
                    .filter_map(|(station, data)| station_summary(station.rank, data))
                    .collect(),
            ),
        }
    }
}

/// A station's unit records in `window` with a serial `unit_serial` allows: for a
/// serial number, an exact range of the tree by serial (the order of attempts is
/// kept by their positions, not by the walk).
fn station_units<'a>(
    data: &'a StationData,
    window: &Window,
    unit_serial: &'a Matcher,
) -> Box<dyn Iterator<Item = (&'a RecordKey, &'a UnitEntry)> + 'a> {
    let range = key_range(window);
    match unit_serial {
        Matcher::Any => Box::new(data.units_in(range)),
        Matcher::OneOf(serials) => Box::new(
            serials
                .iter()
                .flat_map(move |&serial| data.units_of_serial(serial, range.clone())),
        ),
    }
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

/// The bucket of the last record placed, remembered: records come a station at a
/// time in time order, so most are in the bucket of the one before, and placing a
/// record in a zone's wall-clock buckets costs a few look-ups of its rules.
#[derive(Debug, Default)]
struct Buckets {
    last: Option<Range<i64>>,
}

impl Buckets {
    /// The first instant (in seconds) of the bucket `instant` is in; 0 without buckets.
    fn start_of(&mut self, grouping: &Grouping, instant: Timestamp) -> i64 {
        let Some(bucket) = grouping.bucket else {
            return 0;
        };
        if grouping.zone == Zone::Utc {
            return bucket.start_of(instant);
        }
        match &self.last {
            Some(span) if span.contains(&instant.seconds) => span.start,
            _ => {
                let span = grouping.zone.bucket_span(bucket, instant);
                let start = span.start;
                self.last = Some(span);
                start
            }
        }
    }
}

/// Whether a `result` symbol passes, remembered per symbol: a scan meets few
/// distinct results, and comparing their text on every record would cost more.
struct PassCache<'a> {
    pass_results: &'a [String],
    symbols: &'a Symbols,
    known: Vec<(Symbol, bool)>,
}

impl<'a> PassCache<'a> {
    fn new(pass_results: &'a [String], symbols: &'a Symbols) -> PassCache<'a> {
        PassCache {
            pass_results,
            symbols,
            known: Vec::new(),
        }
    }

    fn passes(&mut self, result: Symbol) -> bool {
        if let Some(&(_, passed)) = self.known.iter().find(|(symbol, _)| *symbol == result) {
            return passed;
        }
        let text = self.symbols.text(result);
        let passed = self
            .pass_results
            .iter()
            .any(|pass| pass.eq_ignore_ascii_case(text));
        self.known.push((result, passed));
        passed
    }
}

impl UnitPartial {
    fn add(
        &mut self,
        grouping: &Grouping,
        station: ShardStation,
        key: &RecordKey,
        entry: &UnitEntry,
        passed: bool,
        no_serial: Option<Symbol>,
    ) {
        let group = group_values(grouping, station, |field| match field {
            GroupField::Slot => entry.slot,
            GroupField::UnitType => entry.unit_type,
            _ => entry.mode,
        });
        let row_key = RowKey {
            group,
            name: Symbol(0),
            bucket: self.buckets.start_of(grouping, key.instant),
        };
        let row_index = self.row(row_key);
        let row = &mut self.rows[row_index].1;
        row.records += 1;
        match row
            .results
            .iter_mut()
            .find(|(result, _)| *result == entry.result)
        {
            Some((_, count)) => *count += 1,
            None => row.results.push((entry.result, 1)),
        }
        if Some(entry.unit_serial) == no_serial {
            return;
        }
        // A station's records arrive in time order, but stations interleave.
        let here = position(station, key);
        let attempt = Attempts {
            first: here,
            first_row: row_index,
            first_passed: passed,
            last: here,
            last_passed: passed,
        };
        self.units
            .entry((group, entry.unit_serial))
            .and_modify(|attempts| attempts.absorb(&attempt))
            .or_insert(attempt);
    }

    /// The index of `key`'s row, made empty if new.
    fn row(&mut self, key: RowKey) -> usize {
        if let Some((recent, index)) = self.recent {
            if recent == key {
                return index;
            }
        }
        let rows = &mut self.rows;
        let index = *self.index.entry(key).or_insert_with(|| {
            rows.push((key, UnitCounts::default()));
            rows.len() - 1
        });
        self.recent = Some((key, index));
        index
    }

    /// Counts every unit whose attempts are all known into the row of its first.
    fn settle(&mut self) {
        for (_, attempts) in self.units.drain() {
            let row = &mut self.rows[attempts.first_row].1;
            row.units += 1;
            row.first_pass += u64::from(attempts.first_passed);
            row.final_pass += u64::from(attempts.last_passed);
        }
    }

    fn merge(&mut self, other: UnitPartial) {
        // Where each of `other`'s rows is in this partial.
        let mut moved = Vec::with_capacity(other.rows.len());
        for (key, counts) in other.rows {
            let index = self.row(key);
            moved.push(index);
            let row = &mut self.rows[index].1;
            row.records += counts.records;
            row.units += counts.units;
            row.first_pass += counts.first_pass;
            row.final_pass += counts.final_pass;
            for (result, count) in counts.results {
                match row.results.iter_mut().find(|(known, _)| *known == result) {
                    Some((_, total)) => *total += count,
                    None => row.results.push((result, count)),
                }
            }
        }
        for (unit, mut attempts) in other.units {
            attempts.first_row = moved[attempts.first_row];
            self.units
                .entry(unit)
                .and_modify(|known| known.absorb(&attempts))
                .or_insert(attempts);
        }
    }
}

impl Attempts {
    fn absorb(&mut self, other: &Attempts) {
        if other.first < self.first {
            self.first = other.first;
            self.first_row = other.first_row;
            self.first_passed = other.first_passed;
        }
        if other.last > self.last {
            self.last = other.last;
            self.last_passed = other.last_passed;
        }
    }
}

impl MetricPartial {
    /// Adds a record; `lasts` notes, per row, the station's latest record so far,
    /// whose limits are read once the station is done.
    fn add(
        &mut self,
        grouping: &Grouping,
        station: ShardStation,
        key: &RecordKey,
        entry: &MetricEntry,
        lasts: &mut HashMap<RowKey, StoredRecord>,
    ) {
        let group = group_values(grouping, station, |field| match field {
            GroupField::Slot => entry.slot,
            _ => entry.unit,
        });
        let row_key = RowKey {
            group,
            name: entry.name,
            bucket: self.buckets.start_of(grouping, key.instant),
        };
        let here = position(station, key);
        let row = self
            .rows
            .entry(row_key)
            .or_insert_with(|| MetricStatistics::empty(here));
        row.count += 1;
        if entry.value.is_finite() {
            let value = entry.value;
            row.numeric += 1;
            row.min = row.min.min(value);
            row.max = row.max.max(value);
            let delta = value - row.mean;
            row.mean += delta / row.numeric as f64;
            row.squares += delta * (value - row.mean);
            // A NaN limit is not numeric, and NaN comparisons are false.
            if value < entry.limit_lower || value > entry.limit_upper {
                row.out_of_limits += 1;
            }
        }
        // Within a station records come in order: the latest is the last seen.
        if here >= row.last {
            row.last = here;
            lasts.insert(row_key, entry.bytes);
        }
    }

    /// The limits' text of each row's last record of `station`, from its JSON.
    fn read_limits(&mut self, station: &StationData, lasts: &HashMap<RowKey, StoredRecord>) {
        #[derive(Deserialize)]
        struct Limits<'a> {
            #[serde(borrow)]
            limit_lower: Cow<'a, str>,
            #[serde(borrow)]
            limit_upper: Cow<'a, str>,
        }
        for (row_key, bytes) in lasts {
            let json = station.json(*bytes).to_vec();
            let limits: Limits = serde_json::from_slice(&json)
                .expect("a metric record's JSON, rendered at load, has both limits");
            let row = self.rows.get_mut(row_key).expect("a noted row exists");
            row.limit_lower = limits.limit_lower.into_owned();
            row.limit_upper = limits.limit_upper.into_owned();
        }
    }

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
}

impl MetricStatistics {
    fn empty(first: Position) -> MetricStatistics {
        MetricStatistics {
            count: 0,
            numeric: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            mean: 0.0,
            squares: 0.0,
            out_of_limits: 0,
            last: first,
            limit_lower: String::new(),
            limit_upper: String::new(),
        }
    }

    fn absorb(&mut self, other: MetricStatistics) {
        self.count += other.count;
        self.out_of_limits += other.out_of_limits;
        if other.numeric > 0 {
            let (left, right) = (self.numeric as f64, other.numeric as f64);
            let total = left + right;
            let delta = other.mean - self.mean;
            self.mean += delta * right / total;
            self.squares += other.squares + delta * delta * left * right / total;
            self.numeric += other.numeric;
            self.min = self.min.min(other.min);
            self.max = self.max.max(other.max);
        }
        if other.last > self.last {
            self.last = other.last;
            self.limit_lower = other.limit_lower;
            self.limit_upper = other.limit_upper;
        }
    }

    fn stddev(&self) -> Option<f64> {
        (self.numeric >= 2).then(|| (self.squares.max(0.0) / (self.numeric - 1) as f64).sqrt())
    }
}

/// A station's counts and its first and last record of either kind.
fn station_summary(rank: u32, data: &StationData) -> Option<StationSummary> {
    let (first, last) = data.first_and_last()?;
    let time_created = |bytes: StoredRecord| {
        #[derive(Deserialize)]
        struct Time<'a> {
            #[serde(borrow)]
            time_created: Cow<'a, str>,
        }
        let json = data.json(bytes).to_vec();
        let time: Time =
            serde_json::from_slice(&json).expect("a record's JSON, rendered at load, has its time");
        time.time_created.into_owned()
    };
    Some(StationSummary {
        rank,
        units: data.unit_count() as u64,
        metrics: data.metric_count() as u64,
        first: time_created(first.1),
        last: time_created(last.1),
    })
}

impl Partial {
    /// Folds another shard's partial of the same question into this one.
    pub fn merge(&mut self, other: Partial) {
        match (self, other) {
            (Partial::Units(mine), Partial::Units(other)) => mine.merge(other),
            (Partial::Metrics(mine), Partial::Metrics(other)) => mine.merge(other),
            (Partial::Stations(mine), Partial::Stations(other)) => mine.extend(other),
            _ => unreachable!("partials of one question are of one kind"),
        }
    }

    /// The number of rows [`Partial::finish`] will make.
    pub fn row_count(&self) -> usize {
        match self {
            Partial::Units(partial) => partial.rows.len(),
            Partial::Metrics(partial) => partial.rows.len(),
            Partial::Stations(stations) => stations.len(),
        }
    }

    /// The rows, in the contract's order, as JSON. `grouping` is the question's
    /// (`None` for `/stations`); `catalog` names stations and symbols.
    pub fn finish(self, grouping: Option<&Grouping>, catalog: &Catalog) -> Rows {
        match (self, grouping) {
            (Partial::Stations(mut stations), _) => {
                stations.sort_by_key(|station| station.rank);
                let mut rows = Rows::default();
                for station in stations {
                    rows.push(|serializer| {
                        let mut map = serializer.serialize_map(Some(5)).expect(WRITING);
                        let station_id = &catalog.stations[station.rank as usize];
                        map.serialize_entry("station_id", station_id)
                            .expect(WRITING);
                        map.serialize_entry("units", &station.units).expect(WRITING);
                        map.serialize_entry("metrics", &station.metrics)
                            .expect(WRITING);
                        map.serialize_entry("first", &station.first).expect(WRITING);
                        map.serialize_entry("last", &station.last).expect(WRITING);
                        map.end().expect(WRITING);
                    });
                }
                rows
            }
            (Partial::Units(partial), Some(grouping)) => partial.finish(grouping, catalog),
            (Partial::Metrics(partial), Some(grouping)) => partial.finish(grouping, catalog),
            (_, None) => unreachable!("summaries of records have a grouping"),
        }
    }
}

const WRITING: &str = "writing JSON to a Vec cannot fail";

/// The text of a group value.
fn group_text(field: GroupField, value: u32, catalog: &Catalog) -> &str {
    match field {
        GroupField::StationId => &catalog.stations[value as usize],
        _ => catalog.symbols.text(Symbol(value)),
    }
}

/// The contract's row order: by the group fields' text in byte order, in
/// `group_by` order, then by name (metrics), then by bucket.
fn row_order(grouping: &Grouping, left: &RowKey, right: &RowKey, catalog: &Catalog) -> Ordering {
    let groups = grouping
        .fields
        .iter()
        .zip(left.group.iter().zip(&right.group));
    for (&field, (&left, &right)) in groups {
        let order = match field {
            // Ranks follow the byte order of station ids.
            GroupField::StationId => left.cmp(&right),
            _ if left == right => Ordering::Equal,
            _ => group_text(field, left, catalog).cmp(group_text(field, right, catalog)),
        };
        if order != Ordering::Equal {
            return order;
        }
    }
    let names = if left.name == right.name {
        Ordering::Equal
    } else {
        catalog
            .symbols
            .text(left.name)
            .cmp(catalog.symbols.text(right.name))
    };
    names.then(left.bucket.cmp(&right.bucket))
}

/// Writes the group fields and `bucket_start` that start every summary row.
fn write_group<S: SerializeMap>(
    map: &mut S,
    grouping: &Grouping,
    key: &RowKey,
    with_name: bool,
    catalog: &Catalog,
) {
    for (&field, &value) in grouping.fields.iter().zip(&key.group) {
        map.serialize_entry(field.name(), group_text(field, value, catalog))
            .expect(WRITING);
    }
    if with_name {
        map.serialize_entry("name", catalog.symbols.text(key.name))
            .expect(WRITING);
    }
    if grouping.bucket.is_some() {
        map.serialize_entry("bucket_start", &grouping.zone.bucket_start_text(key.bucket))
            .expect(WRITING);
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

impl UnitPartial {
    fn finish(mut self, grouping: &Grouping, catalog: &Catalog) -> Rows {
        self.settle();
        let mut rows = self.rows;
        rows.sort_unstable_by(|(left, _), (right, _)| row_order(grouping, left, right, catalog));
        let mut rendered = Rows::default();
        for (key, counts) in rows {
            let mut results: Vec<(&str, u64)> = counts
                .results
                .iter()
                .map(|&(result, count)| (catalog.symbols.text(result), count))
                .collect();
            results.sort_unstable();
            rendered.push(|serializer| {
                let mut map = serializer.serialize_map(None).expect(WRITING);
                write_group(&mut map, grouping, &key, false, catalog);
                map.serialize_entry("records", &counts.records)
                    .expect(WRITING);
                map.serialize_entry("results", &ResultCounts(&results))
                    .expect(WRITING);
                map.serialize_entry("units", &counts.units).expect(WRITING);
                map.serialize_entry("first_pass", &counts.first_pass)
                    .expect(WRITING);
                map.serialize_entry("final_pass", &counts.final_pass)
                    .expect(WRITING);
                map.serialize_entry("first_pass_yield", &ratio(counts.first_pass, counts.units))
                    .expect(WRITING);
                map.serialize_entry("final_yield", &ratio(counts.final_pass, counts.units))
                    .expect(WRITING);
                map.end().expect(WRITING);
            });
        }
        rendered
    }
}

/// `results`: counts by value, keys in byte order.
struct ResultCounts<'a>(&'a [(&'a str, u64)]);

impl serde::Serialize for ResultCounts<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (result, count) in self.0 {
            map.serialize_entry(result, count)?;
        }
        map.end()
    }
}

impl MetricPartial {
    fn finish(self, grouping: &Grouping, catalog: &Catalog) -> Rows {
        let mut rows: Vec<(RowKey, MetricStatistics)> = self.rows.into_iter().collect();
        rows.sort_unstable_by(|(left, _), (right, _)| row_order(grouping, left, right, catalog));
        let mut rendered = Rows::default();
        for (key, statistics) in rows {
            let has_numbers = statistics.numeric > 0;
            let stddev = finite(statistics.stddev());
            let mean = finite(has_numbers.then_some(statistics.mean));
            let cpk = match (
                numeric(&statistics.limit_lower),
                numeric(&statistics.limit_upper),
                mean,
                stddev,
            ) {
                (Some(lower), Some(upper), Some(mean), Some(stddev)) if stddev > 0.0 => {
                    finite(Some((upper - mean).min(mean - lower) / (3.0 * stddev)))
                }
                _ => None,
            };
            rendered.push(|serializer| {
                let mut map = serializer.serialize_map(None).expect(WRITING);
                write_group(&mut map, grouping, &key, true, catalog);
                map.serialize_entry("count", &statistics.count)
                    .expect(WRITING);
                map.serialize_entry("numeric", &statistics.numeric)
                    .expect(WRITING);
                map.serialize_entry("min", &has_numbers.then_some(statistics.min))
                    .expect(WRITING);
                map.serialize_entry("max", &has_numbers.then_some(statistics.max))
                    .expect(WRITING);
                map.serialize_entry("mean", &mean).expect(WRITING);
                map.serialize_entry("stddev", &stddev).expect(WRITING);
                map.serialize_entry("limit_lower", &statistics.limit_lower)
                    .expect(WRITING);
                map.serialize_entry("limit_upper", &statistics.limit_upper)
                    .expect(WRITING);
                map.serialize_entry("out_of_limits", &statistics.out_of_limits)
                    .expect(WRITING);
                map.serialize_entry("cpk", &cpk).expect(WRITING);
                map.end().expect(WRITING);
            });
        }
        rendered
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::data::catalog::Generation;
    use crate::data::load::{load, LoadOptions, OnInvalid};
    use crate::domain::time::parse_rfc3339;

    /// `files` loaded into `shards` shards, with every station placed on its own
    /// shard when there are as many shards as stations (placement balances counts).
    fn generation(files: &[(&str, &str)], shards: usize) -> Generation {
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
        })
        .unwrap()
        .0
    }

    fn window() -> Window {
        Window {
            from: parse_rfc3339("2024-01-01T00:00:00Z").unwrap(),
            to: parse_rfc3339("2024-01-02T00:00:00Z").unwrap(),
        }
    }

    /// Each shard's partial of `question` over every station, merged in shard order
    /// or in reverse, and finished.
    fn summarize(generation: &Generation, question: &Question, reverse: bool) -> Vec<Value> {
        let catalog = generation.catalog();
        let mut partials: Vec<Partial> = (0..catalog.shard_count())
            .map(|shard| {
                let stations = (0..catalog.stations().len() as u32)
                    .filter(|&rank| catalog.placement(rank).shard == shard as u32)
                    .map(|rank| ShardStation {
                        rank,
                        station_index: catalog.placement(rank).station_index,
                    })
                    .collect();
                let request = SummaryRequest {
                    stations,
                    question: question.clone(),
                };
                generation.shards()[shard].summarize(&request, catalog.symbols())
            })
            .collect();
        if reverse {
            partials.reverse();
        }
        let grouping = match question {
            Question::Units { grouping, .. } | Question::Metrics { grouping, .. } => {
                Some(grouping.clone())
            }
            Question::Stations => None,
        };
        let merged = partials
            .into_iter()
            .reduce(|mut merged, partial| {
                merged.merge(partial);
                merged
            })
            .unwrap();
        merged
            .finish(grouping.as_ref(), catalog)
            .rows()
            .map(|row| serde_json::from_slice(row).unwrap())
            .collect()
    }

    fn units(fields: &[GroupField], bucket: Option<&str>) -> Question {
        Question::Units {
            window: window(),
            unit_types: Matcher::Any,
            unit_serial: Matcher::Any,
            grouping: Grouping {
                fields: fields.to_vec(),
                bucket: bucket.map(|text| Bucket::parse(text).unwrap()),
                zone: Zone::Utc,
            },
            pass_results: vec!["pass".into(), "OK".into()],
        }
    }

    const UNITS_A: &str = r#"{"station_id":"A","time_created":"2024-01-01T00:10:00Z","direction":"output","slot":"1","unit_serial":"SN1","result":"FAIL"}
{"station_id":"A","time_created":"2024-01-01T00:20:00Z","direction":"input","slot":"1","unit_serial":"SN2","result":""}
{"station_id":"A","time_created":"2024-01-01T00:30:00Z","direction":"output","slot":"1","unit_serial":"","result":"pass"}
"#;
    const UNITS_B: &str = r#"{"station_id":"B","time_created":"2024-01-01T01:20:00Z","direction":"output","slot":"1","unit_serial":"SN1","result":"Pass"}
{"station_id":"B","time_created":"2024-01-01T00:10:00Z","direction":"output","slot":"2","unit_serial":"SN2","result":"ok"}
"#;

    #[test]
    fn a_unit_tried_on_two_shards_counts_once_with_its_first_and_last_attempt() {
        let generation = generation(&[("a.units.jsonl", UNITS_A), ("b.units.jsonl", UNITS_B)], 2);
        let catalog = generation.catalog();
        assert_ne!(
            catalog.placement(0).shard,
            catalog.placement(1).shard,
            "the test needs A and B on two shards"
        );
        for reverse in [false, true] {
            let rows = summarize(&generation, &units(&[GroupField::Slot], None), reverse);
            assert_eq!(
                rows,
                [
                    json!({"slot": "1", "records": 3, "results": {"FAIL": 1, "Pass": 1, "pass": 1},
                           "units": 1, "first_pass": 0, "final_pass": 1,
                           "first_pass_yield": 0.0, "final_yield": 1.0}),
                    json!({"slot": "2", "records": 1, "results": {"ok": 1},
                           "units": 1, "first_pass": 1, "final_pass": 1,
                           "first_pass_yield": 1.0, "final_yield": 1.0}),
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
                json!({"slot": "1", "bucket_start": "2024-01-01T00:00:00Z", "records": 2,
                       "results": {"FAIL": 1, "pass": 1}, "units": 1, "first_pass": 0,
                       "final_pass": 1, "first_pass_yield": 0.0, "final_yield": 1.0}),
                // The retest's own bucket holds its record, but not its unit.
                json!({"slot": "1", "bucket_start": "2024-01-01T01:00:00Z", "records": 1,
                       "results": {"Pass": 1}, "units": 0, "first_pass": 0, "final_pass": 0,
                       "first_pass_yield": null, "final_yield": null}),
                json!({"slot": "2", "bucket_start": "2024-01-01T00:00:00Z", "records": 1,
                       "results": {"ok": 1}, "units": 1, "first_pass": 1, "final_pass": 1,
                       "first_pass_yield": 1.0, "final_yield": 1.0}),
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

    const METRICS_A: &str = r#"{"station_id":"A","time_created":"2024-01-01T00:10:00Z","name":"v","value":1,"limit_lower":0,"limit_upper":"10"}
{"station_id":"A","time_created":"2024-01-01T00:20:00Z","name":"v","value":"abc","limit_lower":"0","limit_upper":"10"}
{"station_id":"A","time_created":"2024-01-01T00:30:00Z","name":"v","value":"12","limit_lower":"0","limit_upper":"10"}
"#;
    const METRICS_B: &str = r#"{"station_id":"B","time_created":"2024-01-01T00:40:00Z","name":"v","value":"+5","limit_lower":"1.0","limit_upper":"9"}
{"station_id":"B","time_created":"2024-01-01T00:05:00Z","name":"v","value":"-1","limit_lower":"x","limit_upper":"20"}
"#;

    #[test]
    fn metric_statistics_merge_across_shards_and_show_the_last_limits() {
        let question = Question::Metrics {
            window: window(),
            names: Matcher::Any,
            grouping: Grouping {
                fields: Vec::new(),
                bucket: None,
                zone: Zone::Utc,
            },
        };
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
            }
        }
    }

    #[test]
    fn stations_show_counts_and_their_first_and_last_times_as_written() {
        let generation = generation(
            &[
                ("a.metrics.jsonl", METRICS_A),
                ("a.units.jsonl", UNITS_A),
                ("b.units.jsonl", UNITS_B),
            ],
            2,
        );
        let rows = summarize(&generation, &Question::Stations, true);
        assert_eq!(
            rows,
            [
                json!({"station_id": "A", "units": 3, "metrics": 3,
                       "first": "2024-01-01T00:10:00Z", "last": "2024-01-01T00:30:00Z"}),
                json!({"station_id": "B", "units": 2, "metrics": 0,
                       "first": "2024-01-01T00:10:00Z", "last": "2024-01-01T01:20:00Z"}),
            ]
        );
    }
}
