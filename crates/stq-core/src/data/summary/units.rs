//! `/units/summary` (docs/api.md section 10.1): records, results, yield, retests
//! and cycle times by group and bucket.
//!
//! Each shard counts its stations' output records by row (group and bucket), and
//! per unit (serial) its first, second and last attempt. Partials of several
//! shards merge exactly: a unit whose attempts lie on two shards (grouped by
//! `slot`, say) keeps the two earliest attempts and the latest one, and cycle
//! times are joined, each one kept, so that percentiles are exact.
//!
//! A cycle time pairs an output record with an input record of the same station,
//! slot and serial. A station's records all live in one shard and are read in one
//! pass, in the contract's order, so the pairing is done there, station by
//! station ([`Pairing`]): none spans two stations, so none spans two shards, and a
//! partial carries only the cycle times, never the inputs. A sealed block's digest
//! gives its attempts, cycle times and waiting inputs, joined as its records
//! would have been.

use itertools::Itertools as _;
use serde::ser::{SerializeMap, Serializer};
// Keys are small integers chosen by the data, not by a client: a fast hash that
// is not DoS-resistant is right here, and SipHash was a third of a summary's time.
use foldhash::HashMap;

use super::buckets::{BucketStarts, Buckets};
use super::{
    group_values, key_range, position, ratio, row_order, write_group, Digests, GroupValues,
    Grouping, Names, PartialSummary, RowKey, Rows,
};
use crate::data::catalog::Catalog;
use crate::data::digest::UnitDigest;
use crate::data::fault::{FirstFault, StorageFault};
use crate::data::key::{Position, RecordKey};
use crate::data::scan::{Matcher, ShardStation};
use crate::data::station::{Elsewhere, StationData, UnitEntry, UnitReader};
use crate::data::symbols::{Symbol, Symbols};
use crate::domain::query::GroupField;
use crate::domain::record::Direction;
use crate::domain::time::{Timestamp, Window};

/// `/units/summary`: output unit records in `window` that pass the filters.
#[derive(Clone, Debug)]
pub(crate) struct UnitQuestion {
    /// The window records must fall in.
    pub(crate) window: Window,
    /// The `unit_type` values asked for.
    pub(crate) unit_types: Matcher,
    /// The `unit_serial` asked for.
    pub(crate) unit_serial: Matcher,
    /// How the rows are grouped.
    pub(crate) grouping: Grouping,
    /// `--pass-results`: the `result` values that pass, compared ignoring ASCII case.
    pub(crate) pass_results: Vec<String>,
}

impl UnitQuestion {
    /// A shard's partial over `stations`; `symbols` name the results that pass.
    pub(super) fn summarize<'a>(
        &self,
        stations: impl Iterator<Item = (ShardStation, &'a StationData)>,
        symbols: &Symbols,
        digests: Digests,
    ) -> Result<UnitPartial, StorageFault> {
        let mut passes = PassCache::new(&self.pass_results, symbols);
        // Grouped by station, a unit's attempts are all on its station: count its
        // units once the station is done, so that the map of units stays small and
        // the merge adds counts, not units.
        let by_station = self.grouping.fields.contains(&GroupField::StationId);
        let mut partial = UnitPartial::new(self.grouping.clone());
        let mut digest = UnitDigest::default();
        let mut rows_of = Vec::new();
        for (station, data) in stations {
            let mut reading = UnitReading {
                partial: &mut partial,
                station,
                unit_types: &self.unit_types,
                passes: &mut passes,
                by_station,
                digests,
                digest: &mut digest,
                rows_of: &mut rows_of,
            };
            // Inputs too: an output's cycle time is measured from its input.
            match &self.unit_serial {
                Matcher::Any => data.read_units(key_range(&self.window), &mut reading)?,
                // An exact range of the tree by serial: the order of attempts is
                // kept by their positions, not by the walk.
                Matcher::OneOf(serials) => {
                    let range = key_range(&self.window);
                    let fault = FirstFault::default();
                    let units = (serials.iter())
                        .flat_map(|&serial| data.units_of_serial(serial, range.clone(), &fault));
                    for (key, entry) in units {
                        reading.record(key, entry);
                    }
                    fault.or(())?;
                }
            }
            partial.end_station(by_station);
        }
        passes.fault()?;
        Ok(partial)
    }
}

/// One shard's `/units/summary`: its rows' counts, and the attempts of the units
/// not yet counted.
#[derive(Debug)]
pub(crate) struct UnitPartial {
    /// The question's grouping, which the rows are finished by.
    grouping: Grouping,
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

/// One station's unit records read into a shard's partial.
struct UnitReading<'a, 'b> {
    partial: &'a mut UnitPartial,
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
        (self.partial).add(self.station, &key, &entry, passed);
    }

    /// Reads digests only when asked to, and only where one bucket holds them.
    fn may_take(&mut self, first: Timestamp, last: Timestamp) -> bool {
        let buckets = &mut self.partial.buckets;
        self.digests != Digests::Decode && buckets.start_of(first) == buckets.start_of(last)
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
        let bucket = (self.partial.buckets).start_of(self.digest.first.instant);
        // A lone unit's tally counts it only where its attempts are all in the
        // block: grouped by station (else a unit joins its attempts on every
        // station), and no other output of its serial is read.
        match (self.by_station, elsewhere) {
            (true, Elsewhere::Nowhere) => {}
            (true, _) => (self.digest).read_lone(digest, |serial| elsewhere.holds(serial)),
            (false, _) => self.digest.read_lone(digest, |_| true),
        }
        self.partial.add_digest(
            self.station,
            (self.digest, digest),
            bucket,
            self.passes,
            self.rows_of,
        );
        true
    }
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

/// Whether a `result` symbol passes, remembered per symbol: a scan meets few
/// distinct results, and comparing their text on every record would cost more.
/// A result whose text cannot be read (a cut symbol run) passes nothing, and its
/// fault is the summary's ([`PassCache::fault`]).
struct PassCache<'a> {
    pass_results: &'a [String],
    symbols: &'a Symbols,
    known: Vec<(Symbol, bool)>,
    fault: FirstFault,
}

impl<'a> PassCache<'a> {
    fn new(pass_results: &'a [String], symbols: &'a Symbols) -> PassCache<'a> {
        PassCache {
            pass_results,
            symbols,
            known: Vec::new(),
            fault: FirstFault::default(),
        }
    }

    fn passes(&mut self, result: Symbol) -> bool {
        if let Some(&(_, passed)) = self.known.iter().find(|(symbol, _)| *symbol == result) {
            return passed;
        }
        let Some(text) = self.fault.ok(self.symbols.text(result)) else {
            return false;
        };
        let passed = self
            .pass_results
            .iter()
            .any(|pass| pass.eq_ignore_ascii_case(text));
        self.known.push((result, passed));
        passed
    }

    /// The first result whose text could not be read, if one could not.
    fn fault(&self) -> Result<(), StorageFault> {
        self.fault.or(())
    }
}

impl UnitPartial {
    fn new(grouping: Grouping) -> UnitPartial {
        UnitPartial {
            buckets: Buckets::new(&grouping),
            grouping,
            rows: Vec::new(),
            index: HashMap::default(),
            recent: None,
            units: HashMap::default(),
            pairing: Pairing::default(),
        }
    }

    /// Adds a unit record of the station being read (both directions, those that
    /// pass the filters, in the contract's order).
    fn add(&mut self, station: ShardStation, key: &RecordKey, entry: &UnitEntry, passed: bool) {
        let has_serial = entry.unit_serial != Symbol::EMPTY;
        if entry.direction == Direction::Input {
            if has_serial {
                self.pairing.input(entry, key.instant);
            }
            return;
        }
        let fields = [entry.slot, entry.unit_type, entry.mode];
        let group = unit_group_values(&self.grouping, station, fields);
        let row_key = RowKey {
            group,
            name: Symbol(0),
            bucket: self.buckets.start_of(key.instant),
        };
        let row_index = self.row(row_key);
        let row = &mut self.rows[row_index].1;
        row.records += 1;
        row.count_result(entry.result, 1);
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
        station: ShardStation,
        (digest, bytes): (&mut UnitDigest, &[u8]),
        bucket: i64,
        passes: &mut PassCache<'_>,
        rows_of: &mut Vec<(usize, GroupValues)>,
    ) {
        rows_of.clear();
        // Grouped by station alone (the default), every fine group of the block is
        // in one row: found once, not once a group.
        let by_fine_fields =
            (self.grouping.fields.iter()).any(|field| *field != GroupField::StationId);
        let mut block_row = None;
        for fine in &digest.groups {
            let (row_index, group) = match block_row {
                Some(row) => row,
                None => {
                    let fields = [fine.slot, fine.unit_type, fine.mode];
                    let group = unit_group_values(&self.grouping, station, fields);
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
                row.count_result(result, count);
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
}

impl UnitCounts {
    /// Counts `count` more records whose `result` is `result`.
    fn count_result(&mut self, result: Symbol, count: u64) {
        match self.results.iter_mut().find(|(known, _)| *known == result) {
            Some((_, total)) => *total += count,
            None => self.results.push((result, count)),
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

impl PartialSummary for UnitPartial {
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
                row.count_result(result, count);
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

    fn row_count(&self) -> usize {
        self.rows.len()
    }

    fn finish(mut self, catalog: &Catalog) -> Result<Rows, StorageFault> {
        self.settle();
        let grouping = &self.grouping;
        let mut rows = self.rows;
        let names = Names::of(catalog, grouping, rows.iter().map(|(key, _)| key))?;
        rows.sort_unstable_by(|(left, _), (right, _)| row_order(grouping, left, right, &names));
        let mut rendered = Rows::with_capacity(rows.len(), UNIT_ROW_BYTES);
        let mut bucket_starts = BucketStarts::new(grouping.zone);
        for (key, mut counts) in rows {
            let mut results: Vec<(&str, u64)> = counts
                .results
                .iter()
                .map(|&(result, count)| {
                    Ok::<_, StorageFault>((catalog.symbols.text(result)?, count))
                })
                .try_collect()?;
            results.sort_unstable();
            let (cycle_count, cycle_figures) = std::mem::take(&mut counts.cycles).figures();
            rendered.push(|row| {
                write_group(row, grouping, &key, false, &names, &mut bucket_starts);
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
        Ok(rendered)
    }
}

/// What [`Rows::with_capacity`] reserves a `/units/summary` row: a little over
/// the rows seen, a row by station and hour about 372 bytes (the request bench's
/// Q6), and some 40 more with `bucket_start`.
const UNIT_ROW_BYTES: usize = 400;

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

#[cfg(test)]
mod tests;
