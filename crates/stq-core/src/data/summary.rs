//! Summaries (docs/api.md section 10): what a dashboard shows, computed where the
//! records live.
//!
//! Each shard summarises its own stations into a [`Partial`]: counts per group and
//! bucket, per unit its first, second and last attempt, and each row's cycle times
//! (units); or running statistics, the serials of failing units and the last
//! record's limits (metrics). Partials of several shards merge exactly: a unit
//! whose attempts lie on two shards (grouped by `slot`, say) keeps the two earliest
//! attempts and the latest one, cycle times and failing serials are joined (so
//! percentiles and distinct counts are exact), and statistics combine by Chan's
//! formulas. [`Partial::finish`] turns the merged partial into rows in the
//! contract's order, rendered as JSON. No raw record leaves its shard.
//!
//! A cycle time pairs an output record with an input record of the same station,
//! slot and serial (docs/api.md section 10.1). A station's records all live in one
//! shard and are read in one pass, in the contract's order, so the pairing is done
//! there, station by station ([`Pairing`]): none spans two stations, so none spans
//! two shards, and a partial carries only the cycle times, never the inputs.
//!
//! A sealed block that the window and one bucket hold whole is read from its
//! digest (`data::digest`) instead of its records, with the same answer
//! to the byte: a unit digest's attempts, cycle times and waiting inputs are joined
//! as its records would have been, and a station's metric records join their rows
//! a period (a block's span) at a time, by fine group in one order, as a metric
//! digest's statistics do (`Segments`).

use std::borrow::Cow;
use std::cmp::Ordering;
use std::ops::Range;

// Keys are small integers chosen by the data, not by a client: a fast hash that
// is not DoS-resistant is right here, and SipHash was a third of a summary's time.
use foldhash::{HashMap, HashSet};

use serde::ser::{SerializeMap, Serializer};
use serde::Deserialize;

use crate::data::catalog::Catalog;
use crate::data::digest::{MetricDigest, Running, UnitDigest};
use crate::data::key::{Position, RecordKey};
use crate::data::scan::{Matcher, ShardStation};
use crate::data::sealed::{period_of, period_start, MetricBlock};
use crate::data::shard::ShardData;
use crate::data::station::{
    Elsewhere, MetricEntry, MetricReader, StationData, UnitEntry, UnitReader,
};
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
    /// The inputs of the station being read that wait for their output.
    pairing: Pairing,
}

#[derive(Debug, Default)]
struct UnitCounts {
    records: u64,
    /// Records by `result`; few distinct values, so a list beats a map.
    results: Vec<(Symbol, u64)>,
    units: u64,
    first_pass: u64,
    second_pass: u64,
    final_pass: u64,
    retested: u64,
    /// The cycle times of the row's output records that have one.
    cycles: CycleTimes,
}

/// A unit's first, second and last attempt in the window, in the contract's order.
#[derive(Clone, Copy, Debug)]
struct Attempts {
    first: Position,
    /// The row of the first attempt, an index into its partial's `rows`.
    first_row: usize,
    first_passed: bool,
    /// The second attempt and whether it passed; `None`: tried once.
    second: Option<(Position, bool)>,
    last: Position,
    last_passed: bool,
}

/// Pairs a station's output records with their input records: per slot and
/// serial, the instant of the latest input since the last output. The contract
/// pairs records of one `station_id` only, and a station is read whole and in
/// order by one shard, so this lives for one station and is emptied after it.
#[derive(Debug, Default)]
struct Pairing {
    open: HashMap<(Symbol, Symbol), Timestamp>,
}

/// Cycle times, each one kept, so that percentiles over several shards are exact:
/// in seconds (each from the exact difference of two instants, which keeps their
/// order), and their sum in nanoseconds, exact, for the mean.
#[derive(Debug, Default)]
struct CycleTimes {
    seconds: Vec<f64>,
    total_nanos: i128,
}

#[derive(Debug, Default)]
pub struct MetricPartial {
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
/// block's digest keeps it.
#[derive(Clone, Copy, Debug)]
enum Last<'a> {
    Record(StoredRecord),
    Limits([&'a str; 2]),
}

/// One fine group's statistics, of a period or of a block's digest, to join its
/// row.
struct FineMetrics<'a, 'data> {
    name: Symbol,
    slot: Symbol,
    unit: Symbol,
    bucket: i64,
    running: &'a Running,
    failing: &'a [Symbol],
    /// Its last record: where it is, and where its limits are.
    last: Position,
    locator: Last<'data>,
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
    /// The serials of the out-of-limit records (the empty one too, left out when
    /// counted): a set, so that units failing on two shards count once.
    failing: HashSet<Symbol>,
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

/// What [`Rows::with_capacity`] reserves a row: a little over the rows seen, a
/// `/units/summary` row by station and hour about 372 bytes (the request bench's
/// Q6), a `/metrics/summary` row 240 bytes, and some 40 more with `bucket_start`.
const UNIT_ROW_BYTES: usize = 400;
const METRIC_ROW_BYTES: usize = 300;

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
    pub fn summarize(&self, request: &SummaryRequest, symbols: &Symbols) -> Partial {
        self.summarize_reading(request, symbols, Digests::Read)
    }

    /// [`ShardData::summarize`], reading sealed blocks' digests where they will do
    /// or, for tests, decoding every block.
    fn summarize_reading(
        &self,
        request: &SummaryRequest,
        symbols: &Symbols,
        digests: Digests,
    ) -> Partial {
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
                // Grouped by station, a unit's attempts are all on its station:
                // count its units once the station is done, so that the map of
                // units stays small and the router merges counts, not units.
                let by_station = grouping.fields.contains(&GroupField::StationId);
                let mut partial = UnitPartial::default();
                let mut digest = UnitDigest::default();
                let mut rows_of = Vec::new();
                for (station, data) in stations {
                    let mut reading = UnitReading {
                        partial: &mut partial,
                        grouping,
                        station,
                        unit_types,
                        passes: &mut passes,
                        by_station,
                        digests,
                        digest: &mut digest,
                        rows_of: &mut rows_of,
                    };
                    // Inputs too: an output's cycle time is measured from its input.
                    match unit_serial {
                        Matcher::Any => data.read_units(key_range(window), &mut reading),
                        // An exact range of the tree by serial: the order of
                        // attempts is kept by their positions, not by the walk.
                        Matcher::OneOf(serials) => {
                            let range = key_range(window);
                            let units = (serials.iter())
                                .flat_map(|&serial| data.units_of_serial(serial, range.clone()));
                            for (key, entry) in units {
                                reading.record(key, entry);
                            }
                        }
                    }
                    partial.end_station(by_station);
                }
                Partial::Units(partial)
            }
            Question::Metrics {
                window,
                names,
                grouping,
            } => {
                let mut partial = MetricPartial::default();
                let mut digest = MetricDigest::default();
                for (station, data) in stations {
                    let mut lasts: HashMap<RowKey, Last<'_>> = HashMap::default();
                    let mut reading = MetricReading {
                        partial: &mut partial,
                        grouping,
                        station,
                        names,
                        digests,
                        digest: &mut digest,
                        lasts: &mut lasts,
                    };
                    data.read_metrics(key_range(window), &mut reading);
                    partial.flush(grouping, station, &mut lasts);
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

/// Whether a summary reads sealed blocks' digests where they will do, or decodes
/// every block (so that tests can hold the two to the same answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Digests {
    Read,
    #[cfg_attr(not(test), allow(dead_code))]
    Decode,
}

/// One station's metric records read into a shard's partial.
struct MetricReading<'a, 'data> {
    partial: &'a mut MetricPartial,
    grouping: &'a Grouping,
    station: ShardStation,
    names: &'a Matcher,
    digests: Digests,
    /// A digest's buffers, reused from block to block.
    digest: &'a mut MetricDigest,
    lasts: &'a mut HashMap<RowKey, Last<'data>>,
}

impl<'data> MetricReader<'data> for MetricReading<'_, 'data> {
    fn record(&mut self, key: RecordKey, entry: MetricEntry) {
        if self.names.matches(entry.name) {
            (self.partial).add(self.grouping, self.station, &key, &entry, self.lasts);
        }
    }

    /// Reads digests only when asked to, and only where one bucket holds them.
    fn may_take(&mut self, first: Timestamp, last: Timestamp) -> bool {
        let buckets = &mut self.partial.buckets;
        self.digests != Digests::Decode
            && buckets.start_of(self.grouping, first) == buckets.start_of(self.grouping, last)
    }

    fn block(&mut self, block: &MetricBlock<'data>) -> bool {
        let bytes = block.digest();
        self.digest.read(period_start(block.period()), bytes);
        let bucket = (self.partial.buckets).start_of(self.grouping, self.digest.first.instant);
        // As `MetricPartial::add` and `flush` would have added its records one by
        // one: every record of the block is in the window and in `bucket`.
        let (grouping, station) = (self.grouping, self.station);
        self.partial.flush(grouping, station, self.lasts);
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
                locator: Last::Limits(group.limits.clone().map(|range| {
                    std::str::from_utf8(&bytes[range]).expect("limits' text is UTF-8")
                })),
            };
            self.partial.join(grouping, station, fine, self.lasts);
        }
        true
    }
}

/// One station's unit records read into a shard's partial.
struct UnitReading<'a, 'b> {
    partial: &'a mut UnitPartial,
    grouping: &'a Grouping,
    station: ShardStation,
    unit_types: &'a Matcher,
    passes: &'a mut PassCache<'b>,
    /// Whether rows are grouped by station, so that a unit whose attempts are all
    /// in one block of its station can be counted from the block's tallies.
    by_station: bool,
    digests: Digests,
    /// A digest's buffers, reused from block to block.
    digest: &'a mut UnitDigest,
    /// Per fine group of the digest read, its row and group values.
    rows_of: &'a mut Vec<(usize, GroupValues)>,
}

impl UnitReader for UnitReading<'_, '_> {
    fn record(&mut self, key: RecordKey, entry: UnitEntry) {
        if !self.unit_types.matches(entry.unit_type) {
            return;
        }
        let passed = self.passes.passes(entry.result);
        (self.partial).add(self.grouping, self.station, &key, &entry, passed);
    }

    /// Reads digests only when asked to, and only where one bucket holds them.
    fn may_take(&mut self, first: Timestamp, last: Timestamp) -> bool {
        let buckets = &mut self.partial.buckets;
        self.digests != Digests::Decode
            && buckets.start_of(self.grouping, first) == buckets.start_of(self.grouping, last)
    }

    fn block(&mut self, period_start: Timestamp, digest: &[u8], elsewhere: &Elsewhere<'_>) -> bool {
        self.digest.read(period_start, digest);
        if let Matcher::OneOf(types) = self.unit_types {
            let kept = (self.digest.types.iter())
                .filter(|unit_type| types.contains(unit_type))
                .count();
            // None of its records passes the filter: the block adds nothing.
            if kept == 0 {
                return true;
            }
            if kept < self.digest.types.len() {
                return false;
            }
        }
        let bucket = (self.partial.buckets).start_of(self.grouping, self.digest.first.instant);
        // A lone unit's tally counts it only where its attempts are all in the
        // block: grouped by station (else a unit joins its attempts on every
        // station), and no other output of its serial is read.
        match (self.by_station, elsewhere) {
            (true, Elsewhere::Nowhere) => {}
            (true, _) => (self.digest).read_lone(digest, |serial| elsewhere.holds(serial)),
            (false, _) => self.digest.read_lone(digest, |_| true),
        }
        self.partial.add_digest(
            self.grouping,
            self.station,
            (self.digest, digest),
            bucket,
            self.passes,
            self.rows_of,
        );
        true
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

/// The group values of a unit record or a fine group of them, by their slot, unit
/// type and mode.
fn unit_group_values(
    grouping: &Grouping,
    station: ShardStation,
    [slot, unit_type, mode]: [Symbol; 3],
) -> GroupValues {
    group_values(grouping, station, |field| match field {
        GroupField::Slot => slot,
        GroupField::UnitType => unit_type,
        _ => mode,
    })
}

/// The zone's bucket boundaries met so far, consecutive: records come a station
/// at a time in time order, each station over the same window, so after the first
/// station nearly every record falls between two known boundaries, and placing a
/// record by a zone's rules costs a few look-ups of them (a tenth of a summary's
/// time when done per bucket and station).
#[derive(Debug, Default)]
struct Buckets {
    /// Ascending; an instant from the first to before the last is in the bucket of
    /// the latest one at or before it. Empty until a zone's bucket is asked for.
    boundaries: Vec<i64>,
}

/// How many buckets [`Buckets`] walks to join a new bucket to the known ones;
/// farther away, it starts over from the new one.
const BUCKETS_WALKED: usize = 64;

impl Buckets {
    /// The first instant (in seconds) of the bucket `instant` is in; 0 without buckets.
    fn start_of(&mut self, grouping: &Grouping, instant: Timestamp) -> i64 {
        let Some(bucket) = grouping.bucket else {
            return 0;
        };
        if grouping.zone == Zone::Utc {
            return bucket.start_of(instant);
        }
        let at = instant.seconds;
        let known = &self.boundaries;
        if known.len() >= 2 && known[0] <= at && at < known[known.len() - 1] {
            return known[known.partition_point(|&boundary| boundary <= at) - 1];
        }
        let span = grouping.zone.bucket_span(bucket.seconds(), instant);
        self.join(grouping.zone, bucket.seconds(), span.clone());
        span.start
    }

    /// Adds `span` and the buckets between it and the known ones, if few.
    fn join(&mut self, zone: Zone, length: i64, span: Range<i64>) {
        let next = |boundary: i64| {
            zone.bucket_span(
                length,
                Timestamp {
                    seconds: boundary,
                    nanos: 0,
                },
            )
            .end
        };
        // The boundaries from `from` on, up to `until` at most.
        let walk = |from: i64, until: i64| {
            let mut walked = vec![from];
            while walked.len() <= BUCKETS_WALKED {
                let last = walked[walked.len() - 1];
                if last >= until {
                    return Some(walked);
                }
                let following = next(last);
                if following <= last {
                    return None;
                }
                walked.push(following);
            }
            None
        };
        let joined = match (self.boundaries.first(), self.boundaries.last()) {
            (Some(&first), Some(_)) if span.end <= first => walk(span.start, first)
                .filter(|walked| walked[walked.len() - 1] == first)
                .map(|mut walked| {
                    walked.pop();
                    walked.append(&mut self.boundaries);
                    walked
                }),
            (Some(&first), Some(&last)) if span.start >= last && first < last => {
                walk(last, span.end)
                    .filter(|walked| walked[walked.len() - 1] == span.end)
                    .map(|walked| {
                        let mut joined = std::mem::take(&mut self.boundaries);
                        joined.extend_from_slice(&walked[1..]);
                        joined
                    })
            }
            _ => None,
        };
        self.boundaries = joined.unwrap_or_else(|| vec![span.start, span.end]);
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
    /// Adds a unit record of the station being read (both directions, those that
    /// pass the filters, in the contract's order).
    fn add(
        &mut self,
        grouping: &Grouping,
        station: ShardStation,
        key: &RecordKey,
        entry: &UnitEntry,
        passed: bool,
    ) {
        let has_serial = entry.unit_serial != Symbol::EMPTY;
        if entry.direction == Direction::Input {
            if has_serial {
                self.pairing.input(entry, key.instant);
            }
            return;
        }
        let group = unit_group_values(grouping, station, [entry.slot, entry.unit_type, entry.mode]);
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
        if !has_serial {
            return;
        }
        if let Some(nanos) = self.pairing.output(entry, key.instant) {
            row.cycles.add(nanos);
        }
        // A station's records arrive in time order, but stations interleave.
        let here = position(station, key);
        let attempt = Attempts {
            first: here,
            first_row: row_index,
            first_passed: passed,
            second: None,
            last: here,
            last_passed: passed,
        };
        self.units
            .entry((group, entry.unit_serial))
            .and_modify(|attempts| attempts.absorb(&attempt))
            .or_insert(attempt);
    }

    /// Adds a sealed block's unit records of the station being read, from its
    /// digest, as [`UnitPartial::add`] would have added them one by one: every
    /// record of the block passes the filters and falls in `bucket`. The units the
    /// digest's tallies still count have all their attempts in the block.
    fn add_digest(
        &mut self,
        grouping: &Grouping,
        station: ShardStation,
        (digest, bytes): (&mut UnitDigest, &[u8]),
        bucket: i64,
        passes: &mut PassCache<'_>,
        rows_of: &mut Vec<(usize, GroupValues)>,
    ) {
        rows_of.clear();
        // Grouped by station alone (the default), every fine group of the block is
        // in one row: found once, not once a group.
        let by_fine_fields = (grouping.fields.iter()).any(|field| *field != GroupField::StationId);
        let mut block_row = None;
        for fine in &digest.groups {
            let (row_index, group) = match block_row {
                Some(row) => row,
                None => {
                    let fields = [fine.slot, fine.unit_type, fine.mode];
                    let group = unit_group_values(grouping, station, fields);
                    let key = RowKey {
                        group,
                        name: Symbol(0),
                        bucket,
                    };
                    let row = (self.row(key), group);
                    if !by_fine_fields {
                        block_row = Some(row);
                    }
                    row
                }
            };
            let row = &mut self.rows[row_index].1;
            row.records += fine.records;
            for &(result, count) in &digest.results[fine.results.clone()] {
                match row.results.iter_mut().find(|(known, _)| *known == result) {
                    Some((_, total)) => *total += count,
                    None => row.results.push((result, count)),
                }
            }
            row.cycles.add_all(&digest.cycles[fine.cycles.clone()]);
            rows_of.push((row_index, group));
        }
        for &(fine, serial, instant) in &digest.leading {
            let slot = digest.groups[fine].slot;
            if let Some(input) = self.pairing.open.remove(&(slot, serial)) {
                self.rows[rows_of[fine].0]
                    .1
                    .cycles
                    .add(instant.nanos_since(input));
            }
        }
        for tally in digest.tallies.iter().filter(|tally| tally.units > 0) {
            let row = &mut self.rows[rows_of[tally.group].0].1;
            let units = tally.units;
            let first_passed = passes.passes(tally.first);
            let second_passed = tally.second.is_some_and(|second| passes.passes(second));
            row.units += units;
            row.first_pass += units * u64::from(first_passed);
            row.second_pass += units * u64::from(first_passed || second_passed);
            row.final_pass += units * u64::from(passes.passes(tally.last));
            row.retested += units * u64::from(tally.second.is_some());
        }
        for unit in &digest.units {
            let (row_index, group) = rows_of[unit.group];
            let attempt = |(key, result): (RecordKey, Symbol), passes: &mut PassCache<'_>| {
                (position(station, &key), passes.passes(result))
            };
            let (first, first_passed) = attempt(unit.first, passes);
            let (last, last_passed) = attempt(unit.last, passes);
            let attempts = Attempts {
                first,
                first_row: row_index,
                first_passed,
                second: unit.second.map(|second| attempt(second, passes)),
                last,
                last_passed,
            };
            self.units
                .entry((group, unit.serial))
                .and_modify(|known| known.absorb(&attempts))
                .or_insert(attempts);
        }
        // The block's outputs used up or dropped the inputs that waited for them;
        // then its own inputs wait.
        if !self.pairing.open.is_empty() {
            digest.read_lone_outputs(bytes);
            let outputs = (digest.lone.iter().copied())
                .chain(digest.units.iter().map(|unit| (unit.group, unit.serial)));
            let outputs: Vec<(Symbol, Symbol)> = outputs
                .map(|(fine, serial)| (digest.groups[fine].slot, serial))
                .collect();
            self.pairing.open.retain(|pair, _| !outputs.contains(pair));
        }
        for &(slot, serial, instant) in &digest.waiting {
            self.pairing.open.insert((slot, serial), instant);
        }
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
            // A station's rows come one bucket after another, each about as busy
            // as the last: so many cycle times, without growing the list to them.
            let cycles = rows.last().map_or(0, |(_, row)| row.cycles.seconds.len());
            let mut row = UnitCounts::default();
            row.cycles.seconds.reserve_exact(cycles);
            rows.push((key, row));
            rows.len() - 1
        });
        self.recent = Some((key, index));
        index
    }

    /// The station being read is done: its inputs wait no more, and, grouped by
    /// station, its units' attempts are all known.
    fn end_station(&mut self, by_station: bool) {
        self.pairing.open.clear();
        if by_station {
            self.settle();
        }
    }

    /// Counts every unit whose attempts are all known into the row of its first.
    fn settle(&mut self) {
        for (_, attempts) in self.units.drain() {
            let row = &mut self.rows[attempts.first_row].1;
            let second_passed = attempts.second.is_some_and(|(_, passed)| passed);
            row.units += 1;
            row.first_pass += u64::from(attempts.first_passed);
            row.second_pass += u64::from(attempts.first_passed || second_passed);
            row.final_pass += u64::from(attempts.last_passed);
            row.retested += u64::from(attempts.second.is_some());
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
            row.second_pass += counts.second_pass;
            row.final_pass += counts.final_pass;
            row.retested += counts.retested;
            row.cycles.absorb(counts.cycles);
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
    /// Joins another set of the unit's attempts (none of them one of these): the
    /// two earliest of both, and the latest.
    fn absorb(&mut self, other: &Attempts) {
        let second = if other.first < self.first {
            let second = match other.second {
                Some(second) if second.0 < self.first => second,
                _ => (self.first, self.first_passed),
            };
            self.first = other.first;
            self.first_row = other.first_row;
            self.first_passed = other.first_passed;
            second
        } else {
            match self.second {
                Some(second) if second.0 < other.first => second,
                _ => (other.first, other.first_passed),
            }
        };
        self.second = Some(second);
        if other.last > self.last {
            self.last = other.last;
            self.last_passed = other.last_passed;
        }
    }
}

impl Pairing {
    /// An input record with a serial: the latest one waits for the next output.
    fn input(&mut self, entry: &UnitEntry, instant: Timestamp) {
        self.open.insert((entry.slot, entry.unit_serial), instant);
    }

    /// An output record with a serial: its cycle time in nanoseconds, from the
    /// latest input of its slot and serial since the previous output, if any; that
    /// input is used up either way.
    fn output(&mut self, entry: &UnitEntry, instant: Timestamp) -> Option<i128> {
        let input = self.open.remove(&(entry.slot, entry.unit_serial))?;
        Some(instant.nanos_since(input))
    }
}

impl CycleTimes {
    fn add(&mut self, nanos: i128) {
        // From i64 where it fits (any cycle under 292 years): the same number,
        // without the slow software conversion of an i128.
        let as_float = i64::try_from(nanos).map_or_else(|_| nanos as f64, |nanos| nanos as f64);
        self.seconds.push(as_float / 1e9);
        self.total_nanos += nanos;
    }

    /// Adds cycle times in nanoseconds, as [`CycleTimes::add`] one by one would.
    fn add_all(&mut self, nanos: &[i64]) {
        (self.seconds).extend(nanos.iter().map(|&nanos| nanos as f64 / 1e9));
        self.total_nanos += nanos.iter().map(|&nanos| i128::from(nanos)).sum::<i128>();
    }

    fn absorb(&mut self, other: CycleTimes) {
        self.seconds.extend(other.seconds);
        self.total_nanos += other.total_nanos;
    }

    /// `cycle_count`, and the mean, p50, p90 and maximum in seconds (`None`
    /// without cycle times): percentiles by nearest rank, the value at rank
    /// ceil(p/100 x n) in ascending order.
    fn figures(mut self) -> (u64, [Option<f64>; 4]) {
        let count = self.seconds.len();
        if count == 0 {
            return (0, [None; 4]);
        }
        // The values at two ranks and the largest, selected rather than sorted:
        // sorting every row's cycle times was a tenth of a week's summary. A cycle
        // time is never negative (an output pairs with an input at or before it),
        // and the bits of floats that are not order as the floats do.
        debug_assert!(self
            .seconds
            .iter()
            .all(|seconds| seconds.is_sign_positive()));
        let index = |percent: usize| (percent * count).div_ceil(100).max(1) - 1;
        let (p50, p90) = (index(50), index(90));
        // As integers, in place: compared without a conversion each time.
        let mut bits: Vec<u64> = std::mem::take(&mut self.seconds)
            .into_iter()
            .map(f64::to_bits)
            .collect();
        let (below, &mut at_p90, above) = bits.select_nth_unstable(p90);
        let max = f64::from_bits((above.iter().copied()).fold(at_p90, u64::max));
        let at_p50 = match p50 < p90 {
            true => *below.select_nth_unstable(p50).1,
            false => at_p90,
        };
        let (at_p50, at_p90) = (f64::from_bits(at_p50), f64::from_bits(at_p90));
        let mean = self.total_nanos as f64 / 1e9 / count as f64;
        let figures = [mean, at_p50, at_p90, max];
        (count as u64, figures.map(Some))
    }
}

impl MetricPartial {
    /// Adds a record of the station being read (in key order); `lasts` notes,
    /// per row, the station's latest record so far, whose limits are read once the
    /// station is done.
    fn add(
        &mut self,
        grouping: &Grouping,
        station: ShardStation,
        key: &RecordKey,
        entry: &MetricEntry,
        lasts: &mut HashMap<RowKey, Last<'_>>,
    ) {
        let period = period_of(key.instant);
        if self.segments.period != Some(period) {
            self.flush(grouping, station, lasts);
            self.segments.period = Some(period);
        }
        let bucket = self.buckets.start_of(grouping, key.instant);
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
    fn flush(
        &mut self,
        grouping: &Grouping,
        station: ShardStation,
        lasts: &mut HashMap<RowKey, Last<'_>>,
    ) {
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
            self.join(grouping, station, fine, lasts);
        }
        let segments = &mut self.segments;
        (segments.list, segments.period, segments.recent) = (list, None, None);
        segments.index.clear();
    }

    /// Joins one fine group's statistics (of a period, or of a block's digest) to
    /// its row.
    fn join<'data>(
        &mut self,
        grouping: &Grouping,
        station: ShardStation,
        fine: FineMetrics<'_, 'data>,
        lasts: &mut HashMap<RowKey, Last<'data>>,
    ) {
        let group = group_values(grouping, station, |field| match field {
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
        let running = fine.running;
        row.count += running.count;
        row.out_of_limits += running.out_of_limits;
        row.failing.extend(fine.failing);
        row.join_numbers(running.numeric, running.mean, running.squares);
        row.min = row.min.min(running.min);
        row.max = row.max.max(running.max);
        if fine.last >= row.last {
            row.last = fine.last;
            lasts.insert(row_key, fine.locator);
        }
    }

    /// The limits' text of each row's last record of `station`, from its JSON.
    fn read_limits(&mut self, station: &StationData, lasts: &HashMap<RowKey, Last<'_>>) {
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
                Last::Limits([lower, upper]) => {
                    (row.limit_lower, row.limit_upper) = (lower.to_string(), upper.to_string());
                    continue;
                }
                Last::Record(bytes) => bytes,
            };
            let mut json = Vec::new();
            station.write_json(*bytes, &mut json);
            let limits: Limits = serde_json::from_slice(&json)
                .expect("a metric record's JSON, rendered at load, has both limits");
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
            failing: HashSet::default(),
            last: first,
            limit_lower: String::new(),
            limit_upper: String::new(),
        }
    }

    fn absorb(&mut self, other: MetricStatistics) {
        self.count += other.count;
        self.out_of_limits += other.out_of_limits;
        self.failing.extend(other.failing);
        self.join_numbers(other.numeric, other.mean, other.squares);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        if other.last > self.last {
            self.last = other.last;
            self.limit_lower = other.limit_lower;
            self.limit_upper = other.limit_upper;
        }
    }

    /// Joins the mean and squared deviations of `numeric` more values (Chan et
    /// al.); taken as they are by a row that has none yet.
    fn join_numbers(&mut self, numeric: u64, mean: f64, squares: f64) {
        if numeric == 0 {
            return;
        }
        if self.numeric == 0 {
            (self.numeric, self.mean, self.squares) = (numeric, mean, squares);
            return;
        }
        let (left, right) = (self.numeric as f64, numeric as f64);
        let total = left + right;
        let delta = mean - self.mean;
        self.mean += delta * right / total;
        self.squares += squares + delta * delta * left * right / total;
        self.numeric += numeric;
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
        let mut json = Vec::new();
        data.write_json(bytes, &mut json);
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
                    rows.push(|row| {
                        row.field("station_id", &catalog.stations[station.rank as usize]);
                        row.field("units", &station.units);
                        row.field("metrics", &station.metrics);
                        row.field("first", &station.first);
                        row.field("last", &station.last);
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
fn write_group(
    row: &mut RowWriter,
    grouping: &Grouping,
    key: &RowKey,
    with_name: bool,
    catalog: &Catalog,
    bucket_starts: &mut BucketStarts,
) {
    for (&field, &value) in grouping.fields.iter().zip(&key.group) {
        row.field(field.name(), group_text(field, value, catalog));
    }
    if with_name {
        row.field("name", catalog.symbols.text(key.name));
    }
    if grouping.bucket.is_some() {
        row.field("bucket_start", bucket_starts.text(grouping, key.bucket));
    }
}

/// `bucket_start` texts by bucket: a summary's rows share few buckets, and a
/// zone's text takes a look-up of its offset.
#[derive(Default)]
struct BucketStarts {
    texts: HashMap<i64, String>,
}

impl BucketStarts {
    fn text(&mut self, grouping: &Grouping, start: i64) -> &str {
        self.texts
            .entry(start)
            .or_insert_with(|| grouping.zone.bucket_start_text(start))
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
        let mut rendered = Rows::with_capacity(rows.len(), UNIT_ROW_BYTES);
        let mut bucket_starts = BucketStarts::default();
        for (key, mut counts) in rows {
            let mut results: Vec<(&str, u64)> = counts
                .results
                .iter()
                .map(|&(result, count)| (catalog.symbols.text(result), count))
                .collect();
            results.sort_unstable();
            let (cycle_count, cycle_figures) = std::mem::take(&mut counts.cycles).figures();
            rendered.push(|row| {
                write_group(row, grouping, &key, false, catalog, &mut bucket_starts);
                row.field("records", &counts.records);
                row.field("results", &ResultCounts(&results));
                let units = counts.units;
                for (name, value) in [
                    ("units", units),
                    ("first_pass", counts.first_pass),
                    ("second_pass", counts.second_pass),
                    ("final_pass", counts.final_pass),
                    ("retested", counts.retested),
                ] {
                    row.field(name, &value);
                }
                for (name, part) in [
                    ("first_pass_yield", counts.first_pass),
                    ("second_pass_yield", counts.second_pass),
                    ("final_yield", counts.final_pass),
                    ("retest_rate", counts.retested),
                ] {
                    row.field(name, &ratio(part, units));
                }
                row.field("cycle_count", &cycle_count);
                let names = ["cycle_mean_s", "cycle_p50_s", "cycle_p90_s", "cycle_max_s"];
                for (name, value) in names.into_iter().zip(cycle_figures) {
                    row.field(name, &value);
                }
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
        let mut rendered = Rows::with_capacity(rows.len(), METRIC_ROW_BYTES);
        let mut bucket_starts = BucketStarts::default();
        for (key, statistics) in rows {
            let has_numbers = statistics.numeric > 0;
            let stddev = finite(statistics.stddev());
            let mean = finite(has_numbers.then_some(statistics.mean));
            let failing_units =
                statistics.failing.len() - usize::from(statistics.failing.contains(&Symbol::EMPTY));
            let (cp, cpk) = capability(
                numeric(&statistics.limit_lower),
                numeric(&statistics.limit_upper),
                mean,
                stddev,
            );
            rendered.push(|row| {
                write_group(row, grouping, &key, true, catalog, &mut bucket_starts);
                row.field("count", &statistics.count);
                row.field("numeric", &statistics.numeric);
                row.field("min", &has_numbers.then_some(statistics.min));
                row.field("max", &has_numbers.then_some(statistics.max));
                row.field("mean", &mean);
                row.field("stddev", &stddev);
                row.field("limit_lower", &statistics.limit_lower);
                row.field("limit_upper", &statistics.limit_upper);
                row.field("out_of_limits", &statistics.out_of_limits);
                row.field("failing_units", &failing_units);
                row.field("cp", &cp);
                row.field("cpk", &cpk);
            });
        }
        rendered
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
mod tests {
    use std::sync::Arc;

    use serde_json::{json, Value};

    use super::*;
    use crate::data::catalog::Generation;
    use crate::data::load::{load, LoadOptions, OnInvalid};
    use crate::data::scan::{Hit, RecordFilter, ScanRequest};
    use crate::data::tier::Tier as _;
    use crate::domain::record::Directions;
    use crate::domain::time::parse_rfc3339;

    /// `files` loaded into `shards` shards, with every station placed on its own
    /// shard when there are as many shards as stations (placement balances counts).
    fn generation(files: &[(&str, &str)], shards: usize) -> Generation {
        // Records an hour older than a station's newest are sealed: the summaries
        // read both tiers.
        generation_sealing(files, shards, Some(std::time::Duration::from_secs(3600)))
    }

    /// [`generation`], with records older than `hot` sealed (none without).
    fn generation_sealing(
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
        rendered(generation, question, reverse, Digests::Read)
            .iter()
            .map(|row| serde_json::from_slice(row).unwrap())
            .collect()
    }

    /// [`summarize`]'s rows as the bytes a response sends, the sealed blocks read
    /// as `digests` says.
    fn rendered(
        generation: &Generation,
        question: &Question,
        reverse: bool,
        digests: Digests,
    ) -> Vec<Vec<u8>> {
        let catalog = generation.catalog();
        let mut partials: Vec<Partial> = (0..catalog.shard_count())
            .map(|shard| {
                let request = SummaryRequest {
                    stations: shard_stations(catalog, shard),
                    question: question.clone(),
                };
                generation.shards()[shard].summarize_reading(&request, catalog.symbols(), digests)
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
            .map(<[u8]>::to_vec)
            .collect()
    }

    /// Every station of `shard`, for a request that reads them all.
    fn shard_stations(catalog: &Catalog, shard: usize) -> Vec<ShardStation> {
        (0..catalog.stations().len() as u32)
            .filter(|&rank| catalog.placement(rank).shard == shard as u32)
            .map(|rank| ShardStation {
                rank,
                station_index: catalog.placement(rank).station_index,
            })
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

    /// The known boundaries place every instant as the zone's own rules do, in
    /// whatever order instants come: forwards, backwards, near and far apart.
    #[test]
    fn issue_23_known_bucket_boundaries_place_instants_as_the_zone_does() {
        for (zone, bucket) in [
            ("Europe/Berlin", "1h"),
            ("Europe/Berlin", "1d"),
            ("Australia/Lord_Howe", "30m"),
            ("Asia/Kolkata", "7h"),
            ("America/St_Johns", "1d"),
        ] {
            let grouping = Grouping {
                fields: vec![GroupField::StationId],
                bucket: Bucket::parse(bucket),
                zone: Zone::parse(zone).unwrap(),
            };
            let length = grouping.bucket.unwrap().seconds();
            let mut buckets = Buckets::default();
            // A fixed pseudo-random walk over 2026, around both changes of clocks.
            let mut state: u64 = 0x2545_f491_4f6c_dd1d;
            let mut seconds: i64 = 1_774_000_000;
            for step in 0..20_000 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let jump = (state % 7_200) as i64 - 2_000;
                seconds += if step % 500 == 0 { jump * 400 } else { jump };
                let instant = Timestamp { seconds, nanos: 0 };
                assert_eq!(
                    buckets.start_of(&grouping, instant),
                    grouping.zone.bucket_span(length, instant).start,
                    "{zone} {bucket} at {seconds}"
                );
            }
        }
    }

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
            // SN2's input on A is on another station than its output on B: no pair.
            assert_eq!(
                rows,
                [
                    no_cycles(json!({"slot": "1", "records": 3,
                           "results": {"FAIL": 1, "Pass": 1, "pass": 1},
                           "units": 1, "first_pass": 0, "second_pass": 1, "final_pass": 1,
                           "retested": 1, "first_pass_yield": 0.0, "second_pass_yield": 1.0,
                           "final_yield": 1.0, "retest_rate": 1.0})),
                    no_cycles(json!({"slot": "2", "records": 1, "results": {"ok": 1},
                           "units": 1, "first_pass": 1, "second_pass": 1, "final_pass": 1,
                           "retested": 0, "first_pass_yield": 1.0, "second_pass_yield": 1.0,
                           "final_yield": 1.0, "retest_rate": 0.0})),
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
                no_cycles(json!({"slot": "1", "bucket_start": "2024-01-01T00:00:00Z",
                       "records": 2, "results": {"FAIL": 1, "pass": 1}, "units": 1,
                       "first_pass": 0, "second_pass": 1, "final_pass": 1, "retested": 1,
                       "first_pass_yield": 0.0, "second_pass_yield": 1.0,
                       "final_yield": 1.0, "retest_rate": 1.0})),
                // The retest's own bucket holds its record, but not its unit.
                no_cycles(json!({"slot": "1", "bucket_start": "2024-01-01T01:00:00Z",
                       "records": 1, "results": {"Pass": 1}, "units": 0, "first_pass": 0,
                       "second_pass": 0, "final_pass": 0, "retested": 0,
                       "first_pass_yield": null, "second_pass_yield": null,
                       "final_yield": null, "retest_rate": null})),
                no_cycles(json!({"slot": "2", "bucket_start": "2024-01-01T00:00:00Z",
                       "records": 1, "results": {"ok": 1}, "units": 1, "first_pass": 1,
                       "second_pass": 1, "final_pass": 1, "retested": 0,
                       "first_pass_yield": 1.0, "second_pass_yield": 1.0,
                       "final_yield": 1.0, "retest_rate": 0.0})),
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

    /// A unit row's cycle fields when it has no cycle time.
    fn no_cycles(mut row: Value) -> Value {
        let fields = row.as_object_mut().unwrap();
        fields.insert("cycle_count".into(), json!(0));
        for name in ["cycle_mean_s", "cycle_p50_s", "cycle_p90_s", "cycle_max_s"] {
            fields.insert(name.into(), Value::Null);
        }
        row
    }

    /// A unit line of station `station`, slot `S`, at minute `minute` past 00:00.
    fn unit_line(
        station: &str,
        serial: &str,
        minute: u32,
        direction: &str,
        result: &str,
    ) -> String {
        format!(
            r#"{{"station_id":"{station}","time_created":"2024-01-01T00:{minute:02}:00Z","direction":"{direction}","slot":"S","unit_serial":"{serial}","result":"{result}"}}"#
        ) + "\n"
    }

    #[test]
    fn issue_23_cycle_times_pair_an_output_with_the_latest_input_since_the_last_output() {
        let lines = [
            unit_line("A", "SN1", 0, "input", ""),
            unit_line("A", "SN1", 1, "input", ""),
            // 2 minutes after the later input.
            unit_line("A", "SN1", 3, "output", "fail"),
            // No input since the last output: none.
            unit_line("A", "SN1", 4, "output", "fail"),
            // An empty serial pairs with nothing.
            unit_line("A", "", 5, "input", ""),
            unit_line("A", "", 6, "output", "pass"),
            unit_line("A", "SN1", 7, "input", ""),
            // 3 minutes; SN1's third attempt passes.
            unit_line("A", "SN1", 10, "output", "pass"),
            // SN2's input is on station B: SN2's output on A has none.
            unit_line("B", "SN2", 11, "input", ""),
            unit_line("A", "SN2", 12, "output", "pass"),
            // B: 9 and 1 minutes, and an input that never ends.
            unit_line("B", "SN2", 20, "output", "pass"),
            unit_line("B", "SN3", 21, "input", ""),
            unit_line("B", "SN3", 22, "output", "fail"),
            unit_line("B", "SN3", 23, "input", ""),
        ];
        let (a, b): (Vec<&String>, Vec<&String>) =
            lines.iter().partition(|line| line.contains(r#""A""#));
        let a: String = a.into_iter().cloned().collect();
        let b: String = b.into_iter().cloned().collect();
        let (a, b) = (a.as_str(), b.as_str());
        for shards in [1, 2] {
            let generation = generation(&[("a.units.jsonl", a), ("b.units.jsonl", b)], shards);
            for reverse in [false, true] {
                // One row of both stations: cycle times 120, 180, 540 and 60 s.
                let rows = summarize(&generation, &units(&[], None), reverse);
                assert_eq!(rows.len(), 1);
                let row = &rows[0];
                assert_eq!(row["records"], 7, "{row}");
                assert_eq!(row["cycle_count"], 4, "{row}");
                assert_eq!(row["cycle_mean_s"], 225.0, "{row}");
                // Nearest rank: ceil(0.5 x 4) = 2nd, ceil(0.9 x 4) = 4th of 60, 120, 180, 540.
                assert_eq!(row["cycle_p50_s"], 120.0, "{row}");
                assert_eq!(row["cycle_p90_s"], 540.0, "{row}");
                assert_eq!(row["cycle_max_s"], 540.0, "{row}");
                // Without station_id in the group, SN2 on A and on B is one unit: SN1
                // (fail, fail, pass), SN2 (pass, pass) and SN3 (fail).
                assert_eq!(
                    (&row["units"], &row["first_pass"], &row["second_pass"]),
                    (&json!(3), &json!(1), &json!(1)),
                    "{row}"
                );
                assert_eq!(
                    (&row["final_pass"], &row["retested"]),
                    (&json!(2), &json!(2)),
                    "{row}"
                );
            }
            // By station: each station's own.
            let rows = summarize(&generation, &units(&[GroupField::StationId], None), false);
            let cycles: Vec<(&Value, &Value, &Value)> = rows
                .iter()
                .map(|row| {
                    (
                        &row["cycle_count"],
                        &row["cycle_p50_s"],
                        &row["cycle_max_s"],
                    )
                })
                .collect();
            assert_eq!(
                cycles,
                [
                    (&json!(2), &json!(120.0), &json!(180.0)),
                    (&json!(2), &json!(60.0), &json!(540.0)),
                ]
            );
        }
    }

    #[test]
    fn issue_23_a_units_second_attempt_is_found_across_shards() {
        // SN1: A at 0 (fail), B at 1 (pass), A at 2 (fail), B at 3 (fail); SN2: B at
        // 4 (fail), A at 5 (fail), B at 6 (pass); SN3: A at 7 (pass) only.
        let a = [
            unit_line("A", "SN1", 0, "output", "fail"),
            unit_line("A", "SN1", 2, "output", "fail"),
            unit_line("A", "SN2", 5, "output", "fail"),
            unit_line("A", "SN3", 7, "output", "pass"),
        ]
        .concat();
        let b = [
            unit_line("B", "SN1", 1, "output", "pass"),
            unit_line("B", "SN1", 3, "output", "fail"),
            unit_line("B", "SN2", 4, "output", "fail"),
            unit_line("B", "SN2", 6, "output", "pass"),
        ]
        .concat();
        let generation = generation(&[("a.units.jsonl", &a), ("b.units.jsonl", &b)], 2);
        for reverse in [false, true] {
            let rows = summarize(&generation, &units(&[GroupField::Slot], None), reverse);
            assert_eq!(
                rows,
                [no_cycles(
                    json!({"slot": "S", "records": 8, "results": {"fail": 5, "pass": 3},
                    "units": 3, "first_pass": 1, "second_pass": 2, "final_pass": 2,
                    "retested": 2, "first_pass_yield": 1.0 / 3.0,
                    "second_pass_yield": 2.0 / 3.0, "final_yield": 2.0 / 3.0,
                    "retest_rate": 2.0 / 3.0})
                )]
            );
        }
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
        let question = |fields: &[GroupField]| Question::Metrics {
            window: window(),
            names: Matcher::Any,
            grouping: Grouping {
                fields: fields.to_vec(),
                bucket: None,
                zone: Zone::Utc,
            },
        };
        for shards in [1, 2] {
            let generation =
                generation(&[("a.metrics.jsonl", &a), ("b.metrics.jsonl", &b)], shards);
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

    /// A unit record for [`issue_22_summaries_from_digests_answer_as_decoding_does`]:
    /// (station, second past 2024-01-01T00:00:00Z, serial (0 for the empty one),
    /// output, slot, result, unit type, mode, a fraction of a second).
    type UnitRecord = (u8, u32, u8, bool, u8, u8, u8, u8, bool);

    fn unit_record_line(record: &UnitRecord) -> String {
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

    proptest::proptest! {
        /// Issue 22: a unit summary that reads sealed blocks' digests answers byte
        /// for byte as one that decodes every block, and as one over records all
        /// hot, whatever the window, buckets, zone, grouping and type filter.
        #[test]
        fn issue_22_summaries_from_digests_answer_as_decoding_does(
            records in proptest::collection::vec(
                (0u8..3, 0u32..4 * 3600, 0u8..5, proptest::bool::ANY, 0u8..2, 0u8..4,
                 0u8..2, 0u8..2, proptest::bool::weighted(0.1)),
                1..150,
            ),
            from in 0u32..4 * 3600,
            length in 1u32..6 * 3600,
            bucket in 0usize..6,
            zone in 0usize..4,
            fields in proptest::sample::subsequence(
                vec![GroupField::StationId, GroupField::Slot, GroupField::UnitType, GroupField::Mode],
                0..=4,
            ),
            reversed in proptest::bool::ANY,
            types in 0usize..4,
            shards in 1usize..3,
        ) {
            let mut files: Vec<(String, String)> = Vec::new();
            for station in 0..3 {
                let lines: String = (records.iter())
                    .filter(|record| record.0 == station)
                    .map(unit_record_line)
                    .collect();
                if !lines.is_empty() {
                    files.push((format!("s{station}.units.jsonl"), lines));
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
            let symbols = sealed.catalog().symbols();
            let unit_types = match types {
                0 => Matcher::Any,
                1 => Matcher::OneOf(symbols.lookup("t0").into_iter().collect()),
                2 => Matcher::OneOf(symbols.lookup("t1").into_iter().collect()),
                _ => Matcher::OneOf(Vec::new()),
            };
            let question = Question::Units {
                window,
                unit_types,
                unit_serial: Matcher::Any,
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
                pass_results: vec!["pass".into(), "OK".into()],
            };
            let decoded = rendered(&sealed, &question, false, Digests::Decode);
            let digested = rendered(&sealed, &question, false, Digests::Read);
            proptest::prop_assert_eq!(&digested, &decoded);
            proptest::prop_assert_eq!(&rendered(&sealed, &question, true, Digests::Read), &decoded);
            proptest::prop_assert_eq!(&rendered(&hot, &question, false, Digests::Read), &decoded);
        }
    }

    /// A metric record for [`issue_22_metric_summaries_from_digests_answer_as_decoding_does`]:
    /// (station, second past 2024-01-01T00:00:00Z, name, slot, unit, value, serial).
    type MetricRecord = (u8, u32, u8, u8, u8, u8, u8);

    fn metric_record_line(record: &MetricRecord) -> String {
        let &(_, _, name, slot, ..) = record;
        metric_line_with_limits(record, [&slot.to_string(), &format!("\"{}\"", 3 + name)])
    }

    /// [`metric_record_line`] with other limits, JSON as written: a row shows its
    /// last record's, so records of one row must not all have the same.
    fn metric_line_with_limits(record: &MetricRecord, [lower, upper]: [&str; 2]) -> String {
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
            let symbols = sealed.catalog().symbols();
            let names = match names {
                0 => Matcher::Any,
                1 => Matcher::OneOf(symbols.lookup("n1").into_iter().collect()),
                _ => Matcher::OneOf(["n0", "n2"].iter().filter_map(|name| symbols.lookup(name)).collect()),
            };
            let question = Question::Metrics {
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
            };
            let decoded = rendered(&sealed, &question, false, Digests::Decode);
            let digested = rendered(&sealed, &question, false, Digests::Read);
            proptest::prop_assert_eq!(&digested, &decoded);
            proptest::prop_assert_eq!(&rendered(&hot, &question, false, Digests::Read), &decoded);
        }
    }

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
    fn late_reload(
        files: &[(String, String)],
        late: &[(String, String)],
        shards: usize,
    ) -> LateReload {
        let directory = tempfile::tempdir().unwrap();
        let append = |name: &str, text: &str| {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(directory.path().join(name))
                .unwrap();
            std::io::Write::write_all(&mut file, text.as_bytes()).unwrap();
        };
        let options = |generation, hot| LoadOptions {
            directory: directory.path().to_owned(),
            shards,
            on_invalid: OnInvalid::Fail,
            generation,
            threads: 1,
            hot,
        };
        let sealing = Some(std::time::Duration::from_secs(1));
        for (name, text) in files {
            append(name, text);
        }
        let (catalog, first) = load(&options(1, sealing)).unwrap().0.into_parts();
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

    /// Two rows' fields are the same, their floating-point numbers within 1e-9.
    fn assert_close(got: &Value, expected: &Value, what: &str) {
        let (Value::Object(got_fields), Value::Object(expected_fields)) = (got, expected) else {
            panic!("{what}: rows are objects: {got} {expected}");
        };
        let keys =
            |fields: &serde_json::Map<String, Value>| fields.keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(got_fields), keys(expected_fields), "{what}");
        for (key, value) in got_fields {
            let other = &expected_fields[key];
            match (value.as_f64(), other.as_f64()) {
                (Some(left), Some(right)) if value.is_f64() || other.is_f64() => assert!(
                    (left - right).abs() <= 1e-9 * left.abs().max(right.abs()).max(1.0),
                    "{what}: {key} {got} {expected}"
                ),
                _ => assert_eq!(value, other, "{what}: {key} {got} {expected}"),
            }
        }
    }

    impl LateReload {
        /// The station `name` before the reload and after it.
        fn station(&self, name: &str) -> (&StationData, &StationData) {
            let of = |catalog: &Catalog| catalog.placement(catalog.rank(name).unwrap());
            let (before, after) = (of(&self.catalog), of(self.reloaded.catalog()));
            (
                &self.shards[before.shard as usize].stations[before.station_index as usize],
                &self.reloaded.shards()[after.shard as usize].stations
                    [after.station_index as usize],
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
        /// the reload, with digests read and with every block decoded, are the
        /// bytes of a fresh load's, all hot or sealed again (which puts the late
        /// records in their blocks); those rows.
        ///
        /// Statistics merged from several shards depend on the order of shards in
        /// their last bits: where a fresh load placed the stations otherwise than
        /// the reload kept them (it keeps each on its shard), a metric row of
        /// several stations has its numbers held to within 1e-9 of the fresh
        /// load's, its texts and counts still exactly.
        fn assert_same_rows(&self, question: impl Fn(&Symbols) -> Question) -> Vec<Value> {
            let rows = |generation: &Generation, reverse, digests| {
                let question = question(generation.catalog().symbols());
                rendered(generation, &question, reverse, digests)
            };
            let decoded = rows(&self.reloaded, false, Digests::Decode);
            let (is_units, by_station) = match question(self.hot.catalog().symbols()) {
                Question::Units { .. } => (true, true),
                Question::Metrics { grouping, .. } => {
                    (false, grouping.fields.contains(&GroupField::StationId))
                }
                Question::Stations => (false, false),
            };
            let mut same = vec![("digests", rows(&self.reloaded, false, Digests::Read))];
            // Units merge exactly in any order of shards.
            if is_units {
                same.push(("reversed", rows(&self.reloaded, true, Digests::Read)));
            }
            for (what, got) in same {
                assert_eq!(texts(&got), texts(&decoded), "{what}");
            }
            let placed = |generation: &Generation| generation.catalog().placements().to_vec();
            for (what, fresh) in [("all hot", &self.hot), ("resealed", &self.resealed)] {
                let expected = rows(fresh, false, Digests::Read);
                if by_station || placed(fresh) == placed(&self.reloaded) {
                    assert_eq!(texts(&decoded), texts(&expected), "{what}");
                } else {
                    assert_eq!(decoded.len(), expected.len(), "{what}");
                    for (got, expected) in decoded.iter().zip(&expected) {
                        let parse = |row| serde_json::from_slice::<Value>(row).unwrap();
                        assert_close(&parse(got), &parse(expected), what);
                    }
                }
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
                    &filter(generation.catalog().symbols()),
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
        let catalog = generation.catalog();
        let mut listed = Vec::new();
        let mut after = None;
        loop {
            let mut hits: Vec<(Position, Vec<u8>)> = Vec::new();
            for (shard, data) in generation.shards().iter().enumerate() {
                let answer = data.scan(&ScanRequest {
                    stations: shard_stations(catalog, shard),
                    window,
                    after,
                    filter: filter.clone(),
                    cap: page,
                });
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
            unit_serial: Matcher::OneOf(symbols.lookup("SN4").into_iter().collect()),
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
            names: Matcher::OneOf(symbols.lookup("n1").into_iter().collect()),
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
        Question::Units {
            window,
            unit_types,
            unit_serial: Matcher::Any,
            grouping,
            pass_results: vec!["pass".into(), "OK".into()],
        }
    }

    fn metric_question(window: Window, names: Matcher, grouping: Grouping) -> Question {
        Question::Metrics {
            window,
            names,
            grouping,
        }
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

        fn block(&mut self, block: &MetricBlock<'a>) -> bool {
            self.0
                .push(period_start(block.period()).seconds - 1_704_067_200);
            false
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
        station.read_units(key_range(&seconds_window(0, 3 * 3600)), &mut refusing);
        assert_eq!(refusing.0, 14, "every unit record");
        assert!(!station.hot.settled_digested());
        let mut offered = Offered::default();
        station.read_units(key_range(&seconds_window(0, 3 * 3600)), &mut offered);
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

        let by_hour = late.assert_same_rows(|_| {
            unit_question(whole, Matcher::Any, grouping(&[], Some("1h"), "UTC"))
        });
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
        station.read_metrics(key_range(&seconds_window(0, 3 * 3600)), &mut offered);
        assert_eq!(offered.0, [3600], "hour 0 holds hot records");

        let whole = seconds_window(0, 3 * 3600);
        let rows = late
            .assert_same_rows(|_| metric_question(whole, Matcher::Any, grouping(&[], None, "UTC")));
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
                1 => Matcher::OneOf(symbols.lookup("t0").into_iter().collect()),
                2 => Matcher::OneOf(symbols.lookup("t1").into_iter().collect()),
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
                1 => Matcher::OneOf(symbols.lookup("n1").into_iter().collect()),
                _ => Matcher::OneOf(["n0", "n2"].iter().filter_map(|name| symbols.lookup(name)).collect()),
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
}
