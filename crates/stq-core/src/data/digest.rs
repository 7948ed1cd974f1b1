//! A sealed block's digest: what a summary (docs/api.md section 10) reads of a
//! block's records without decompressing them, made when the block is sealed, on
//! the loader threads.
//!
//! A summary whose window holds a block whole, and whose buckets put all of the
//! block's records in one, reads the block's digest instead of its records: a
//! block of four hours holds a few dozen units, and a summary over a week of a
//! hundred stations would otherwise decompress and read four thousand blocks.
//!
//! A unit digest holds, in the block's key order:
//! - the first and last unit record's key, so that a reader can tell whether its
//!   window and a bucket hold the block whole, and the unit types of its records,
//!   so that a type filter can be proved to keep all of them or none;
//! - per fine group (slot, unit type and mode: every field a unit row groups by
//!   but the station, which a block has one of), the output records, their counts
//!   by `result`, and the cycle times whose input and output are both in the block;
//! - the tallies of its lone units (below): how many have each first, second and
//!   last `result`, per fine group, for a reader to count them without joining
//!   their attempts (what passes is the reader's setting);
//! - the outputs that use up an input from before the block (the first record of
//!   their slot and serial in the block), with their instants;
//! - its units, per fine group and serial: the first, second and last attempt (key
//!   and `result`), the lone units' after the rest;
//! - the inputs still waiting for their output at the block's end.
//!
//! A lone unit is one whose serial no other fine group of the block has: grouped by
//! station, and when the station's records that a summary reads hold no other
//! output of its serial, its attempts are all in the block, and its tally is what
//! joining them would count. A reader that cannot prove so reads the lone units'
//! attempts too, which the digest keeps last so that the others need not skip
//! them.
//!
//! With these, a reader pairs and counts a block's units as it would have record by
//! record, in an order that changes no answer: rows are sorted when finished,
//! cycle times kept whole and summed exactly, and attempts joined by the two
//! earliest and the latest whatever their order.
//!
//! Units without a serial ([`Symbol::EMPTY`]) count in their group's records and
//! results only: a summary makes no attempts, cycle times or waiting inputs of
//! them, and the digest keeps none.
//!
//! A metric digest holds the first and last metric record's key and, per fine
//! group (name, slot and unit), the running statistics of its values ([`Running`]:
//! counts, extremes and exact sums, as a summary reading records keeps them; a
//! digest of an earlier version, with rounded statistics instead, is not taken),
//! the serials of its
//! out-of-limit records, and its last record's key and the text of its limits,
//! which a row shows (each distinct text once a block: a name's limits are the
//! same in every slot).
//!
//! The digest is numbers written as varints, not compressed: reading one is a
//! pass over a few hundred bytes. Keys' file ordinals are written as differences
//! from the first key's, which most keys of a block share.

use std::borrow::Cow;

use foldhash::{HashMap, HashMapExt as _, HashSet};
use integer_encoding::VarInt as _;
use smallvec::SmallVec;

use crate::data::exact::{self, ExactSum};
use crate::data::key::RecordKey;
use crate::data::symbols::Symbol;
use crate::data::tier::{MetricEntry, UnitEntry};
use crate::domain::record::Direction;
use crate::domain::time::Timestamp;

/// A fine group's output records: their group fields and counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DigestGroup {
    pub(crate) slot: Symbol,
    pub(crate) unit_type: Symbol,
    pub(crate) mode: Symbol,
    pub(crate) records: u64,
    /// Where its counts by `result` are in [`UnitDigest::results`].
    pub(crate) results: std::ops::Range<usize>,
    /// Where its cycle times within the block are in [`UnitDigest::cycles`].
    pub(crate) cycles: std::ops::Range<usize>,
}

/// One attempt: the output record's key and its `result`.
pub(crate) type Attempt = (RecordKey, Symbol);

/// A serial's outputs in one fine group of a block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DigestUnit {
    /// Its fine group's index in [`UnitDigest::groups`].
    pub(crate) group: usize,
    pub(crate) serial: Symbol,
    pub(crate) first: Attempt,
    pub(crate) second: Option<Attempt>,
    pub(crate) last: Attempt,
}

/// How many lone units of a fine group had these `result`s: of their first,
/// second (if tried twice) and last attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Tally {
    pub(crate) group: usize,
    pub(crate) first: Symbol,
    pub(crate) second: Option<Symbol>,
    pub(crate) last: Symbol,
    pub(crate) units: u64,
}

impl Tally {
    fn of(unit: &DigestUnit) -> Tally {
        Tally {
            group: unit.group,
            first: unit.first.1,
            second: unit.second.map(|(_, result)| result),
            last: unit.last.1,
            units: 1,
        }
    }

    fn counts_as(&self, other: &Tally) -> bool {
        (self.group, self.first, self.second, self.last)
            == (other.group, other.first, other.second, other.last)
    }
}

/// A block's unit digest, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UnitDigest {
    /// The keys of its first and last unit record, of either direction.
    pub(crate) first: RecordKey,
    pub(crate) last: RecordKey,
    /// The distinct unit types of its records, inputs too.
    pub(crate) types: Vec<Symbol>,
    pub(crate) groups: Vec<DigestGroup>,
    pub(crate) results: Vec<(Symbol, u64)>,
    /// Cycle times in nanoseconds.
    pub(crate) cycles: Vec<i64>,
    /// Its lone units' tallies, less those of the lone units read by
    /// [`UnitDigest::read_lone`].
    pub(crate) tallies: Vec<Tally>,
    /// The outputs that pair with an input from before the block, if one waits:
    /// fine group, serial, instant.
    pub(crate) leading: Vec<(usize, Symbol, Timestamp)>,
    /// Its lone units' fine groups and serials, once read by
    /// [`UnitDigest::read_lone_outputs`].
    pub(crate) lone: Vec<(usize, Symbol)>,
    /// Its units that are not lone, then the lone units read by
    /// [`UnitDigest::read_lone`].
    pub(crate) units: Vec<DigestUnit>,
    /// The inputs that wait for an output at the block's end: slot, serial, instant.
    pub(crate) waiting: Vec<(Symbol, Symbol, Timestamp)>,
    /// Where the lone units' outputs are in the digest, whether they were read,
    /// where their attempts are, and the digest's times.
    outputs: usize,
    outputs_read: bool,
    attempts: usize,
    times: Times,
}

impl Default for UnitDigest {
    fn default() -> UnitDigest {
        let key = RecordKey {
            instant: Timestamp {
                seconds: 0,
                nanos: 0,
            },
            load_order: 0,
        };
        UnitDigest {
            first: key,
            last: key,
            types: Vec::new(),
            groups: Vec::new(),
            results: Vec::new(),
            cycles: Vec::new(),
            tallies: Vec::new(),
            leading: Vec::new(),
            lone: Vec::new(),
            units: Vec::new(),
            waiting: Vec::new(),
            outputs: 0,
            outputs_read: false,
            attempts: 0,
            times: Times {
                start: key.instant,
                unit: 1,
                file: 0,
            },
        }
    }
}

/// Writes the unit digest of a block of `period_start`'s period: `records` are its
/// unit records in key order.
pub(crate) fn write_unit_digest(
    period_start: Timestamp,
    records: &[(RecordKey, UnitEntry)],
    out: &mut Vec<u8>,
) {
    let (Some(first), Some(last)) = (records.first(), records.last()) else {
        return;
    };
    let whole_millis = (records.iter()).all(|(key, _)| key.instant.nanos % 1_000_000 == 0);
    let times = Times::write_head(out, period_start, whole_millis, first.0, last.0);
    let mut gathered = UnitGathering::default();
    for &(key, entry) in records {
        gathered.add(key, entry);
    }
    gathered.write(times, out);
}

/// A fine group as a block's records fill it: its counts, its counts by `result`
/// and its cycle times.
type FineGroup = (DigestGroup, Vec<(Symbol, u64)>, Vec<i64>);

/// What a block's unit records make of its unit digest, taken in key order.
#[derive(Default)]
struct UnitGathering {
    /// The distinct unit types of its records, inputs too.
    types: Vec<Symbol>,
    groups: Vec<FineGroup>,
    group_index: HashMap<(Symbol, Symbol, Symbol), usize>,
    units: Vec<DigestUnit>,
    unit_index: HashMap<(usize, Symbol), usize>,
    leading: Vec<(usize, Symbol, Timestamp)>,
    /// Per slot and serial: the latest input since the last output, and whether
    /// any record of theirs came before, as the summary pairs them.
    open: HashMap<(Symbol, Symbol), Timestamp>,
    seen: HashSet<(Symbol, Symbol)>,
}

impl UnitGathering {
    /// Takes the block's next unit record.
    fn add(&mut self, key: RecordKey, entry: UnitEntry) {
        if !self.types.contains(&entry.unit_type) {
            self.types.push(entry.unit_type);
        }
        let has_serial = entry.unit_serial != Symbol::EMPTY;
        let pair = (entry.slot, entry.unit_serial);
        if entry.direction == Direction::Input {
            if has_serial {
                self.open.insert(pair, key.instant);
                self.seen.insert(pair);
            }
            return;
        }
        let group = self.count_output(&entry);
        if !has_serial {
            return;
        }
        self.attempt(group, key, &entry);
        match self.open.remove(&pair) {
            Some(input) => (self.groups[group].2).push(key.instant.nanos_since(input) as i64),
            None if !self.seen.contains(&pair) => {
                self.leading.push((group, entry.unit_serial, key.instant));
            }
            None => {}
        }
        self.seen.insert(pair);
    }

    /// Counts an output in its fine group, by its `result` too; returns the group.
    fn count_output(&mut self, entry: &UnitEntry) -> usize {
        let fine = (entry.slot, entry.unit_type, entry.mode);
        let groups = &mut self.groups;
        let group = *self.group_index.entry(fine).or_insert_with(|| {
            groups.push((
                DigestGroup {
                    slot: entry.slot,
                    unit_type: entry.unit_type,
                    mode: entry.mode,
                    records: 0,
                    results: 0..0,
                    cycles: 0..0,
                },
                Vec::new(),
                Vec::new(),
            ));
            groups.len() - 1
        });
        let (counts, results, _) = &mut self.groups[group];
        counts.records += 1;
        match results
            .iter_mut()
            .find(|(result, _)| *result == entry.result)
        {
            Some((_, count)) => *count += 1,
            None => results.push((entry.result, 1)),
        }
        group
    }

    /// Notes an output with a serial as an attempt of its unit (its fine group and
    /// serial): the unit's first, second or, so far, last.
    fn attempt(&mut self, group: usize, key: RecordKey, entry: &UnitEntry) {
        let attempt = (key, entry.result);
        let units = &mut self.units;
        let index = *self
            .unit_index
            .entry((group, entry.unit_serial))
            .or_insert_with(|| {
                units.push(DigestUnit {
                    group,
                    serial: entry.unit_serial,
                    first: attempt,
                    second: None,
                    last: attempt,
                });
                units.len() - 1
            });
        let unit = &mut self.units[index];
        if unit.first != attempt {
            if unit.second.is_none() {
                unit.second = Some(attempt);
            }
            unit.last = attempt;
        }
    }

    /// Writes the digest after its head ([`Times::write_head`]), in the order the
    /// module's documentation gives.
    fn write(self, times: Times, out: &mut Vec<u8>) {
        let (lone, others, tallies) = lone_units(self.units);
        number(out, self.types.len() as u64);
        for symbol in &self.types {
            number(out, u64::from(symbol.0));
        }
        write_groups(&self.groups, times.unit, out);
        number(out, tallies.len() as u64);
        for tally in &tallies {
            number(out, tally.group as u64);
            number(out, u64::from(tally.first.0));
            number(
                out,
                tally.second.map_or(0, |second| u64::from(second.0) + 1),
            );
            number(out, u64::from(tally.last.0));
            number(out, tally.units);
        }
        number(out, self.leading.len() as u64);
        for &(group, serial, instant) in &self.leading {
            number(out, group as u64);
            number(out, u64::from(serial.0));
            times.write_instant(out, instant);
        }
        number(out, others.len() as u64);
        for unit in &others {
            number(out, unit.group as u64);
            number(out, u64::from(unit.serial.0));
            write_attempts(times, unit, out);
        }
        let mut waiting: Vec<((Symbol, Symbol), Timestamp)> = self.open.into_iter().collect();
        waiting.sort_unstable();
        number(out, waiting.len() as u64);
        for ((slot, serial), instant) in waiting {
            number(out, u64::from(slot.0));
            number(out, u64::from(serial.0));
            times.write_instant(out, instant);
        }
        number(out, lone.len() as u64);
        for unit in &lone {
            number(out, unit.group as u64);
            number(out, u64::from(unit.serial.0));
        }
        for unit in &lone {
            write_attempts(times, unit, out);
        }
    }
}

/// The lone units (whose serial no other fine group has) apart from the others,
/// and the lone units' tallies, in order.
fn lone_units(units: Vec<DigestUnit>) -> (Vec<DigestUnit>, Vec<DigestUnit>, Vec<Tally>) {
    let mut groups_of_serial: HashMap<Symbol, u32> = HashMap::new();
    for unit in &units {
        *groups_of_serial.entry(unit.serial).or_default() += 1;
    }
    let (lone, others): (Vec<DigestUnit>, Vec<DigestUnit>) =
        (units.into_iter()).partition(|unit| groups_of_serial[&unit.serial] == 1);
    let mut tallies: Vec<Tally> = Vec::new();
    for unit in &lone {
        let tally = Tally::of(unit);
        match tallies.iter_mut().find(|known| known.counts_as(&tally)) {
            Some(known) => known.units += 1,
            None => tallies.push(tally),
        }
    }
    tallies.sort_unstable();
    (lone, others, tallies)
}

/// Writes each fine group: its slot, unit type and mode, its records, its counts
/// by `result`, and its cycle times in the digest's unit of time.
fn write_groups(groups: &[FineGroup], time_unit: u64, out: &mut Vec<u8>) {
    number(out, groups.len() as u64);
    for (group, results, cycles) in groups {
        for symbol in [group.slot, group.unit_type, group.mode] {
            number(out, u64::from(symbol.0));
        }
        number(out, group.records);
        number(out, results.len() as u64);
        for (result, count) in results {
            number(out, u64::from(result.0));
            number(out, *count);
        }
        let cycles: Vec<u64> = (cycles.iter())
            .map(|&nanos| nanos as u64 / time_unit)
            .collect();
        write_fixed(out, &cycles);
    }
}

/// Writes a unit's attempts: how many it names (1 to 3), then each.
fn write_attempts(times: Times, unit: &DigestUnit, out: &mut Vec<u8>) {
    let named = match (unit.second, unit.second == Some(unit.last)) {
        (None, _) => 1,
        (Some(_), true) => 2,
        (Some(_), false) => 3,
    };
    number(out, named);
    let mut attempts = vec![unit.first];
    attempts.extend(unit.second);
    if named == 3 {
        attempts.push(unit.last);
    }
    for (key, result) in attempts {
        times.write_key(out, key);
        number(out, u64::from(result.0));
    }
}

/// The unit of a digest's instants and cycle times, in nanoseconds.
fn unit_of(whole_millis: bool) -> u64 {
    match whole_millis {
        true => 1_000_000,
        false => 1,
    }
}

/// Calls `output` with the serial of each unit a unit digest holds, in any order
/// and maybe more than once, without reading their attempts; `digest` is a buffer.
pub(crate) fn unit_serials(
    period_start: Timestamp,
    bytes: &[u8],
    digest: &mut UnitDigest,
    output: &mut impl FnMut(Symbol),
) {
    if bytes.is_empty() {
        return;
    }
    digest.read(period_start, bytes);
    digest.read_lone_outputs(bytes);
    for &(_, serial) in &digest.lone {
        output(serial);
    }
    for unit in &digest.units {
        output(unit.serial);
    }
}

/// Of `outputs` (each a serial and a period it has outputs in), which it sorts
/// and rids of repeats: the serials in more than one period, and those periods,
/// each in order. A summary joins these serials' attempts across periods and
/// counts every other unit from its period's digest (a sealed block's, or the hot
/// layer's).
pub(crate) fn shared_serials(outputs: &mut Vec<(Symbol, i64)>) -> (Vec<Symbol>, Vec<i64>) {
    outputs.sort_unstable();
    outputs.dedup();
    let mut shared = Vec::new();
    let mut periods = Vec::new();
    for pairs in outputs.chunk_by(|left, right| left.0 == right.0) {
        if pairs.len() > 1 {
            shared.push(pairs[0].0);
            periods.extend(pairs.iter().map(|(_, period)| *period));
        }
    }
    periods.sort_unstable();
    periods.dedup();
    (shared, periods)
}

impl UnitDigest {
    /// Reads a unit digest written by [`write_unit_digest`] for a block of
    /// `period_start`'s period into this one, whose buffers it reuses: all of it
    /// but the lone units' outputs and attempts, which
    /// [`UnitDigest::read_lone_outputs`] and [`UnitDigest::read_lone`] read.
    pub(crate) fn read(&mut self, period_start: Timestamp, bytes: &[u8]) {
        let mut reader = Reader { bytes, at: 0 };
        let times;
        (times, self.first, self.last) = Times::read_head(&mut reader, period_start);
        self.times = times;
        let unit = times.unit;
        self.types.clear();
        for _ in 0..reader.number() {
            self.types.push(reader.symbol());
        }
        self.groups.clear();
        self.results.clear();
        self.cycles.clear();
        for _ in 0..reader.number() {
            let [slot, unit_type, mode] = [(); 3].map(|()| reader.symbol());
            let records = reader.number();
            let results = self.results.len();
            for _ in 0..reader.number() {
                let result = reader.symbol();
                self.results.push((result, reader.number()));
            }
            let cycles = self.cycles.len();
            reader.fixed(|cycle| self.cycles.push((cycle * unit) as i64));
            self.groups.push(DigestGroup {
                slot,
                unit_type,
                mode,
                records,
                results: results..self.results.len(),
                cycles: cycles..self.cycles.len(),
            });
        }
        self.tallies.clear();
        for _ in 0..reader.number() {
            let group = reader.number() as usize;
            let first = reader.symbol();
            let second = reader
                .number()
                .checked_sub(1)
                .map(|second| Symbol(second as u32));
            let last = reader.symbol();
            let units = reader.number();
            self.tallies.push(Tally {
                group,
                first,
                second,
                last,
                units,
            });
        }
        self.leading.clear();
        for _ in 0..reader.number() {
            let group = reader.number() as usize;
            let serial = reader.symbol();
            self.leading
                .push((group, serial, times.read_instant(&mut reader)));
        }
        self.units.clear();
        for _ in 0..reader.number() {
            let group = reader.number() as usize;
            let serial = reader.symbol();
            let unit = read_attempts(times, &mut reader, group, serial);
            self.units.push(unit);
        }
        self.waiting.clear();
        for _ in 0..reader.number() {
            let slot = reader.symbol();
            let serial = reader.symbol();
            self.waiting
                .push((slot, serial, times.read_instant(&mut reader)));
        }
        self.outputs = reader.at;
        self.outputs_read = false;
        self.lone.clear();
    }

    /// Reads the lone units' fine groups and serials into [`UnitDigest::lone`], if
    /// not read yet. `bytes` are the digest [`UnitDigest::read`] read last.
    pub(crate) fn read_lone_outputs(&mut self, bytes: &[u8]) {
        if self.outputs_read {
            return;
        }
        let mut reader = Reader {
            bytes,
            at: self.outputs,
        };
        for _ in 0..reader.number() {
            let group = reader.number() as usize;
            self.lone.push((group, reader.symbol()));
        }
        self.attempts = reader.at;
        self.outputs_read = true;
    }

    /// Reads the attempts of the lone units whose serials `read` is true of into
    /// [`UnitDigest::units`], and takes them out of the tallies. `bytes` are the
    /// digest [`UnitDigest::read`] read last.
    pub(crate) fn read_lone(&mut self, bytes: &[u8], read: impl Fn(Symbol) -> bool) {
        self.read_lone_outputs(bytes);
        // Attempts are read in order: none after the last lone unit wanted.
        let Some(end) = self.lone.iter().rposition(|&(_, serial)| read(serial)) else {
            return;
        };
        let mut reader = Reader {
            bytes,
            at: self.attempts,
        };
        for (index, &(group, serial)) in self.lone[..=end].iter().enumerate() {
            let unit = read_attempts(self.times, &mut reader, group, serial);
            if index < end && !read(serial) {
                continue;
            }
            let tally = Tally::of(&unit);
            let known = (self.tallies.iter_mut())
                .find(|known| known.counts_as(&tally))
                .expect("a lone unit is tallied");
            known.units -= 1;
            self.units.push(unit);
        }
    }
}

/// Reads what [`write_attempts`] wrote, as the attempts of `serial` in `group`.
fn read_attempts(
    times: Times,
    reader: &mut Reader<'_>,
    group: usize,
    serial: Symbol,
) -> DigestUnit {
    let named = reader.number();
    let mut attempt = || {
        let key = times.read_key(reader);
        (key, reader.symbol())
    };
    let first = attempt();
    let (second, last) = match named {
        1 => (None, first),
        2 => {
            let second = attempt();
            (Some(second), second)
        }
        _ => {
            let second = attempt();
            (Some(second), attempt())
        }
    };
    DigestUnit {
        group,
        serial,
        first,
        second,
        last,
    }
}

/// Running statistics of metric records' values: counts, extremes, and the exact
/// sums of the values and of their squares (`data::exact`), so that statistics
/// joined from any split of the records into blocks, tiers and shards are the
/// same to the bit.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Running {
    pub(crate) count: u64,
    pub(crate) numeric: u64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    /// The numeric values' sum, each scaled by [`SUM_SCALE`].
    pub(crate) sum: ExactSum,
    /// The sum of their squares.
    pub(crate) squares: ExactSum,
    pub(crate) out_of_limits: u64,
}

/// What a value is scaled by in [`Running::sum`], exactly (a power of two): a sum
/// of values near the largest double stays finite, and the scale changes no bit
/// of a mean.
const SUM_SCALE: f64 = 1.0 / 18_446_744_073_709_551_616.0;

impl Default for Running {
    fn default() -> Running {
        Running {
            count: 0,
            numeric: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            sum: ExactSum::default(),
            squares: ExactSum::default(),
            out_of_limits: 0,
        }
    }
}

impl Running {
    /// Adds a record of these numbers (`NaN` where not numeric): true if its value
    /// is out of its limits.
    pub(crate) fn add(&mut self, value: f64, limit_lower: f64, limit_upper: f64) -> bool {
        self.count += 1;
        if !value.is_finite() {
            return false;
        }
        self.numeric += 1;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
        self.sum.add(value * SUM_SCALE);
        self.squares.add_product(value, value);
        // A NaN limit is not numeric, and NaN comparisons are false.
        let out = value < limit_lower || value > limit_upper;
        self.out_of_limits += u64::from(out);
        out
    }

    /// Joins another's statistics, exactly.
    pub(crate) fn join(&mut self, other: &Running) {
        self.count += other.count;
        self.out_of_limits += other.out_of_limits;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.numeric += other.numeric;
        self.sum.join(&other.sum);
        self.squares.join(&other.squares);
    }

    /// The numeric values' mean: their exact sum, rounded, over their count.
    pub(crate) fn mean(&self) -> Option<f64> {
        (self.numeric > 0).then(|| self.sum.value() / self.numeric as f64 / SUM_SCALE)
    }

    /// The numeric values' sample standard deviation (n - 1), from their exact
    /// spread; 0 when they are all equal, also where their squares would
    /// overflow, and not finite where they overflow otherwise.
    pub(crate) fn stddev(&self) -> Option<f64> {
        let numeric = self.numeric;
        (numeric >= 2).then(|| {
            if self.min == self.max {
                return 0.0;
            }
            let sum = ExactSum::from_parts(
                &(self.sum.parts().iter())
                    .map(|part| part / SUM_SCALE)
                    .collect::<SmallVec<[f64; 3]>>(),
            );
            let spread = exact::spread(numeric, &sum, &self.squares).max(0.0);
            (spread / numeric as f64 / (numeric - 1) as f64).sqrt()
        })
    }
}

/// A fine group's metric records in a block (name, slot and unit: every field a
/// metric row groups by but the station).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MetricGroup {
    pub(crate) name: Symbol,
    pub(crate) slot: Symbol,
    pub(crate) unit: Symbol,
    pub(crate) running: Running,
    /// Where the serials of its out-of-limit records are in
    /// [`MetricDigest::failing`], each once.
    pub(crate) failing: std::ops::Range<usize>,
    /// Its last record's key, and where the text of its limits is in the digest.
    pub(crate) last: RecordKey,
    pub(crate) limits: [std::ops::Range<usize>; 2],
}

/// A block's metric digest, read.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MetricDigest {
    /// The keys of its first and last metric record.
    pub(crate) first: RecordKey,
    pub(crate) last: RecordKey,
    /// In the order of their name, slot and unit symbols.
    pub(crate) groups: Vec<MetricGroup>,
    pub(crate) failing: Vec<Symbol>,
    /// Where each distinct text of limits is in the digest: a buffer.
    limits: Vec<[std::ops::Range<usize>; 2]>,
    /// Whether it holds exact sums; a digest written before them, in a store of
    /// an earlier version, holds rounded statistics, which are not read: its
    /// block's records are.
    pub(crate) exact: bool,
}

/// The bit of a metric digest's first byte that says it holds exact sums (the
/// bit below says how its times are written).
pub(crate) const EXACT_SUMS: u8 = 2;

impl Default for MetricDigest {
    fn default() -> MetricDigest {
        let key = UnitDigest::default().first;
        MetricDigest {
            first: key,
            last: key,
            groups: Vec::new(),
            failing: Vec::new(),
            limits: Vec::new(),
            exact: true,
        }
    }
}

/// A metric record to digest: its key, its entry and its JSON's five parts.
pub(crate) type MetricRecord<'a> = (RecordKey, MetricEntry, [&'a [u8]; 5]);

/// Writes the metric digest of a block of `period_start`'s period: `records` are
/// its metric records in key order.
pub(crate) fn write_metric_digest(
    period_start: Timestamp,
    records: &[MetricRecord<'_>],
    out: &mut Vec<u8>,
) {
    let (Some(first), Some(last)) = (records.first(), records.last()) else {
        return;
    };
    let whole_millis = (records.iter()).all(|(key, ..)| key.instant.nanos % 1_000_000 == 0);
    let head = out.len();
    let times = Times::write_head(out, period_start, whole_millis, first.0, last.0);
    out[head] |= EXACT_SUMS;
    /// A fine group's records so far.
    struct Accumulated {
        running: Running,
        failing: Vec<Symbol>,
        last: RecordKey,
        last_index: usize,
    }
    let mut groups: HashMap<(Symbol, Symbol, Symbol), Accumulated> = HashMap::new();
    for (index, (key, entry, _)) in records.iter().enumerate() {
        let group = groups
            .entry((entry.name, entry.slot, entry.unit))
            .or_insert_with(|| Accumulated {
                running: Running::default(),
                failing: Vec::new(),
                last: *key,
                last_index: 0,
            });
        if (group.running).add(entry.value, entry.limit_lower, entry.limit_upper)
            && !group.failing.contains(&entry.unit_serial)
        {
            group.failing.push(entry.unit_serial);
        }
        group.last = *key;
        group.last_index = index;
    }
    let mut groups: Vec<_> = groups.into_iter().collect();
    groups.sort_unstable_by_key(|(fine, _)| *fine);
    // The text of each group's limits, which a row shows (so that a summary
    // decodes no block for it), each text once: a name's limits are the same in
    // every slot.
    #[derive(serde::Deserialize)]
    struct Limits<'a> {
        #[serde(borrow)]
        limit_lower: Cow<'a, str>,
        #[serde(borrow)]
        limit_upper: Cow<'a, str>,
    }
    let mut texts: Vec<[String; 2]> = Vec::new();
    let mut text_index: HashMap<[String; 2], usize> = HashMap::new();
    let limits_of: Vec<usize> = (groups.iter())
        .map(|(_, group)| {
            let json = records[group.last_index].2.concat();
            let limits: Limits = serde_json::from_slice(&json)
                .expect("a metric record's JSON, rendered at load, has both limits");
            let pair = [
                limits.limit_lower.into_owned(),
                limits.limit_upper.into_owned(),
            ];
            *text_index.entry(pair.clone()).or_insert_with(|| {
                texts.push(pair);
                texts.len() - 1
            })
        })
        .collect();
    number(out, texts.len() as u64);
    for text in texts.iter().flatten() {
        number(out, text.len() as u64);
        out.extend_from_slice(text.as_bytes());
    }
    number(out, groups.len() as u64);
    for (((name, slot, unit), group), limits) in groups.into_iter().zip(limits_of) {
        let Accumulated {
            running,
            failing,
            last,
            ..
        } = group;
        for symbol in [name, slot, unit] {
            number(out, u64::from(symbol.0));
        }
        // Mostly every value is a number: one bit says so, for one count.
        let all_numeric = running.numeric == running.count;
        number(out, (running.count << 1) | u64::from(all_numeric));
        if !all_numeric {
            number(out, running.numeric);
        }
        if running.numeric > 0 {
            for float in [running.min, running.max] {
                out.extend_from_slice(&float.to_bits().to_le_bytes());
            }
            for sum in [&running.sum, &running.squares] {
                number(out, sum.parts().len() as u64);
                for part in sum.parts() {
                    out.extend_from_slice(&part.to_bits().to_le_bytes());
                }
            }
        }
        number(out, running.out_of_limits);
        number(out, failing.len() as u64);
        for serial in failing {
            number(out, u64::from(serial.0));
        }
        times.write_key(out, last);
        number(out, limits as u64);
    }
}

/// The keys of the first and last record of a block of `period_start`'s period,
/// from its unit or metric digest, which is read no further.
pub(crate) fn bounds(period_start: Timestamp, bytes: &[u8]) -> (RecordKey, RecordKey) {
    let (_, first, last) = Times::read_head(&mut Reader { bytes, at: 0 }, period_start);
    (first, last)
}

impl MetricDigest {
    /// Reads a metric digest written by [`write_metric_digest`] for a block of
    /// `period_start`'s period into this one, whose buffers it reuses.
    pub(crate) fn read(&mut self, period_start: Timestamp, bytes: &[u8]) {
        let mut reader = Reader { bytes, at: 0 };
        let times;
        (times, self.first, self.last) = Times::read_head(&mut reader, period_start);
        self.groups.clear();
        self.failing.clear();
        self.limits.clear();
        self.exact = bytes.first().is_some_and(|head| head & EXACT_SUMS != 0);
        if !self.exact {
            return;
        }
        for _ in 0..reader.number() {
            let pair = [(); 2].map(|()| {
                let length = reader.number() as usize;
                reader.at += length;
                reader.at - length..reader.at
            });
            self.limits.push(pair);
        }
        for _ in 0..reader.number() {
            let [name, slot, unit] = [(); 3].map(|()| reader.symbol());
            let counts = reader.number();
            let count = counts >> 1;
            let mut running = Running {
                count,
                numeric: match counts & 1 {
                    1 => count,
                    _ => reader.number(),
                },
                ..Running::default()
            };
            if running.numeric > 0 {
                running.min = reader.float();
                running.max = reader.float();
                for sum in [&mut running.sum, &mut running.squares] {
                    let parts: SmallVec<[f64; 3]> =
                        (0..reader.number()).map(|_| reader.float()).collect();
                    *sum = ExactSum::from_parts(&parts);
                }
            }
            running.out_of_limits = reader.number();
            let start = self.failing.len();
            for _ in 0..reader.number() {
                self.failing.push(reader.symbol());
            }
            let last = times.read_key(&mut reader);
            let limits = self.limits[reader.number() as usize].clone();
            self.groups.push(MetricGroup {
                name,
                slot,
                unit,
                running,
                failing: start..self.failing.len(),
                last,
                limits,
            });
        }
    }
}

/// Instants as offsets from a period's start, in whole milliseconds where all of
/// a block's are, else nanoseconds; and keys' file ordinals as differences from
/// the block's first key's, which the others mostly share (ordinals are spread
/// over 32 bits, five bytes as they are).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Times {
    start: Timestamp,
    unit: u64,
    file: u64,
}

impl Times {
    /// Writes a digest's head: the unit of its times, and the keys of its first
    /// and last record. The times of the rest of it are as the returned ones.
    fn write_head(
        out: &mut Vec<u8>,
        start: Timestamp,
        whole_millis: bool,
        first: RecordKey,
        last: RecordKey,
    ) -> Times {
        out.push(u8::from(!whole_millis));
        let mut times = Times {
            start,
            unit: unit_of(whole_millis),
            file: 0,
        };
        times.write_key(out, first);
        times.file = first.load_order >> 32;
        times.write_key(out, last);
        times
    }

    /// Reads what [`Times::write_head`] wrote: the times, the first and last key.
    fn read_head(reader: &mut Reader<'_>, start: Timestamp) -> (Times, RecordKey, RecordKey) {
        let mut times = Times {
            start,
            unit: unit_of(reader.take() & 1 == 0),
            file: 0,
        };
        let first = times.read_key(reader);
        times.file = first.load_order >> 32;
        let last = times.read_key(reader);
        (times, first, last)
    }

    fn write_instant(self, out: &mut Vec<u8>, instant: Timestamp) {
        number(out, instant.nanos_since(self.start) as u64 / self.unit);
    }

    fn write_key(self, out: &mut Vec<u8>, key: RecordKey) {
        self.write_instant(out, key.instant);
        let file = (key.load_order >> 32) as i64 - self.file as i64;
        // Zigzag: a later record can come from an earlier file.
        number(out, ((file << 1) ^ (file >> 63)) as u64);
        number(out, key.load_order & 0xffff_ffff);
    }

    fn read_instant(self, reader: &mut Reader<'_>) -> Timestamp {
        let nanos = reader.number() * self.unit;
        Timestamp {
            seconds: self.start.seconds + (nanos / 1_000_000_000) as i64,
            nanos: (nanos % 1_000_000_000) as u32,
        }
    }

    fn read_key(self, reader: &mut Reader<'_>) -> RecordKey {
        let instant = self.read_instant(reader);
        let zigzag = reader.number();
        let file = (self.file as i64 + ((zigzag >> 1) as i64 ^ -((zigzag & 1) as i64))) as u64;
        let line = reader.number();
        RecordKey {
            instant,
            load_order: (file << 32) | line,
        }
    }
}

/// Writes a list of numbers as their count, then (if any) the least of them and the
/// width in bytes of their differences from it, then each difference in that many
/// bytes: the cycle times of a fine group, one a unit, which a summary reads by the
/// thousand, and which varints spent a quarter of a week's summary on (each byte a
/// branch); as long as varints where the times are alike.
fn write_fixed(out: &mut Vec<u8>, values: &[u64]) {
    number(out, values.len() as u64);
    let (Some(&least), Some(&most)) = (values.iter().min(), values.iter().max()) else {
        return;
    };
    let width = (64 - (most - least).leading_zeros() as usize).div_ceil(8);
    number(out, least);
    out.push(width as u8);
    for value in values {
        out.extend_from_slice(&(value - least).to_le_bytes()[..width]);
    }
}

fn number(out: &mut Vec<u8>, value: u64) {
    let mut encoded = [0; 10];
    let length = value.encode_var(&mut encoded);
    out.extend_from_slice(&encoded[..length]);
}

/// Reads a digest from the front.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self) -> u8 {
        let byte = self.bytes[self.at];
        self.at += 1;
        byte
    }

    /// A varint, read here rather than by `integer_encoding`, whose general
    /// reader was a tenth of a week's summary.
    #[inline]
    fn number(&mut self) -> u64 {
        let mut value = 0;
        let mut shift = 0;
        loop {
            let byte = self.bytes[self.at];
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return value;
            }
            shift += 7;
        }
    }

    /// Calls `each` with every number of a list [`write_fixed`] wrote, in order.
    #[inline]
    fn fixed(&mut self, mut each: impl FnMut(u64)) {
        let count = self.number() as usize;
        if count == 0 {
            return;
        }
        let least = self.number();
        let width = usize::from(self.take());
        let bytes = &self.bytes[self.at..self.at + count * width];
        self.at += count * width;
        // A loop for each common width, with its reads of fixed size.
        match width {
            0 => (0..count).for_each(|_| each(least)),
            1 => (bytes.iter()).for_each(|&byte| each(least + u64::from(byte))),
            2 => (bytes.chunks_exact(2))
                .for_each(|two| each(least + u64::from(u16::from_le_bytes([two[0], two[1]])))),
            3 => (bytes.chunks_exact(3)).for_each(|three| {
                let value = u32::from_le_bytes([three[0], three[1], three[2], 0]);
                each(least + u64::from(value));
            }),
            _ => (bytes.chunks_exact(width)).for_each(|some| {
                let mut eight = [0; 8];
                eight[..width].copy_from_slice(some);
                each(least + u64::from_le_bytes(eight));
            }),
        }
    }

    fn float(&mut self) -> f64 {
        let bytes: [u8; 8] = (self.bytes[self.at..self.at + 8])
            .try_into()
            .expect("eight bytes");
        self.at += 8;
        f64::from_bits(u64::from_le_bytes(bytes))
    }

    fn symbol(&mut self) -> Symbol {
        Symbol(self.number() as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::stored::StoredRecord;

    fn unit(
        seconds: i64,
        direction: Direction,
        slot: u32,
        serial: u32,
        mode: u32,
        result: u32,
    ) -> (RecordKey, UnitEntry) {
        let key = RecordKey {
            instant: Timestamp { seconds, nanos: 0 },
            load_order: seconds as u64,
        };
        let entry = UnitEntry {
            bytes: StoredRecord {
                start: 0,
                length: 0,
            },
            unit_type: Symbol(1),
            unit_serial: Symbol(serial),
            direction,
            slot: Symbol(slot),
            mode: Symbol(mode),
            result: Symbol(result),
        };
        (key, entry)
    }

    #[test]
    fn issue_22_fixed_width_lists_read_back_as_written_at_every_width() {
        // Empty, then widths 0, 0, 1, 2, 3, 4, 8 and 0.
        let lists: [&[u64]; 9] = [
            &[],
            &[7],
            &[5, 5, 5],
            &[30_000, 30_255, 30_001],
            &[1, 65_536, 2],
            &[9, 1 << 23, 10],
            &[0, 1 << 24, 1 << 23],
            &[3, u64::MAX, 0, u64::MAX - 1],
            &[u64::MAX],
        ];
        for list in lists {
            let mut out = vec![0x55];
            write_fixed(&mut out, list);
            out.push(0x66);
            let mut reader = Reader { bytes: &out, at: 1 };
            let mut read = Vec::new();
            reader.fixed(|value| read.push(value));
            assert_eq!(read, list);
            assert_eq!(reader.take(), 0x66, "the list ends where it was written to");
        }
    }

    #[test]
    fn issue_22_lone_units_are_tallied_and_read_only_when_asked_for() {
        use Direction::{Input, Output};
        const PASS: u32 = 20;
        const FAIL: u32 = 21;
        let records = [
            // Serial 10: input, failed, retested and passed, all in mode 2: lone.
            unit(100, Input, 5, 10, 2, 0),
            unit(160, Output, 5, 10, 2, FAIL),
            unit(200, Output, 5, 10, 2, PASS),
            // Serial 11: passed once, its input from before the block: lone.
            unit(210, Output, 5, 11, 2, PASS),
            // Serial 12: in modes 2 and 3, so not lone.
            unit(220, Output, 5, 12, 2, PASS),
            unit(230, Output, 5, 12, 3, FAIL),
            // Serial 13: passed once: lone, and tallied with serial 11.
            unit(240, Input, 5, 13, 2, 0),
            unit(250, Output, 5, 13, 2, PASS),
            // No serial: counted in its group, no unit.
            unit(260, Output, 5, Symbol::EMPTY.0, 2, PASS),
            // Serial 14 waits for its output.
            unit(270, Input, 5, 14, 2, 0),
        ];
        let start = Timestamp {
            seconds: 0,
            nanos: 0,
        };
        let mut bytes = Vec::new();
        write_unit_digest(start, &records, &mut bytes);
        let mut digest = UnitDigest::default();
        digest.read(start, &bytes);

        let records_by_group: Vec<u64> = digest.groups.iter().map(|group| group.records).collect();
        assert_eq!(records_by_group, [6, 1]);
        let cycles = &digest.cycles[digest.groups[0].cycles.clone()];
        assert_eq!(cycles, [60_000_000_000, 10_000_000_000]);
        let tallied = |digest: &UnitDigest| -> Vec<(Symbol, Option<Symbol>, Symbol, u64)> {
            (digest.tallies.iter())
                .map(|tally| (tally.first, tally.second, tally.last, tally.units))
                .collect()
        };
        let (pass, fail) = (Symbol(PASS), Symbol(FAIL));
        assert_eq!(
            tallied(&digest),
            [(pass, None, pass, 2), (fail, Some(pass), pass, 1)]
        );
        assert_eq!(digest.leading.len(), 2, "serials 11 and 12 in mode 2");
        let serials = |digest: &UnitDigest| -> Vec<u32> {
            digest.units.iter().map(|unit| unit.serial.0).collect()
        };
        assert_eq!(serials(&digest), [12, 12]);
        assert_eq!(
            digest.waiting,
            [(Symbol(5), Symbol(14), records[9].0.instant)]
        );
        assert!(
            digest.lone.is_empty(),
            "lone outputs are read when asked for"
        );

        // Serial 10's attempts are asked for: its tally is taken out.
        let mut asked = digest.clone();
        asked.read_lone(&bytes, |serial| serial == Symbol(10));
        assert_eq!(asked.lone.len(), 3);
        assert_eq!(serials(&asked), [12, 12, 10]);
        let retested = &asked.units[2];
        assert_eq!(
            (
                retested.first.1,
                retested.second.map(|second| second.1),
                retested.last.1
            ),
            (fail, Some(pass), pass)
        );
        assert_eq!(retested.last.0, records[2].0);
        assert_eq!(
            tallied(&asked),
            [(pass, None, pass, 2), (fail, Some(pass), pass, 0)]
        );

        // All of them: no tally counts a unit.
        let mut all = digest.clone();
        all.read_lone(&bytes, |_| true);
        assert_eq!(serials(&all), [12, 12, 10, 11, 13]);
        assert!(all.tallies.iter().all(|tally| tally.units == 0));
    }
}
