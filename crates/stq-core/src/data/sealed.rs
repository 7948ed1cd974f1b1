//! The sealed tier of a station: its records older than the hot window (`--hot`),
//! in compressed blocks of four hours of a station each, in a B-tree map ordered by time
//! with an entry a block.
//!
//! Most of a record repeats its neighbours: its station, slot, serial and date,
//! its metric's name, unit and limits. A block keeps each record's key and entry
//! as columns (times as deltas, symbols as numbers, a metric's value only where
//! its text does not say it, limits by their index in the block's own table), its
//! JSON's three pieces by small indexes (into the station's shared pieces, for a
//! piece more than one of the blocks sealed together uses, or the block's own:
//! a load seals a few days at a time, and a piece first met again in a later
//! sealing is kept by each block that uses it), and its two texts (the
//! time, only where it is not the instant written the usual way, and the value);
//! and compresses each kind's with zstd, in a frame of its own, so that a read of
//! units decompresses no metric. A record comes back exactly as written: its JSON
//! is its five parts again, copied in order. The process keeps the blocks
//! queries decoded lately in a cache bounded in bytes (`--cache-size`, [`cache`]),
//! shared by its threads, and a read finds a window's records in a decoded block
//! by binary searches of its keys, in order, not by reading its four hours.
//!
//! A block also keeps what lets a read skip it without decompressing it: how many
//! records of each kind it holds, which files they came from, and a 256-bit
//! filter of its serial numbers and of its metric names.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use foldhash::{HashMap, HashMapExt as _};
use integer_encoding::VarInt as _;

use crate::data::digest::{self, write_metric_digest, write_unit_digest, MetricRecord, UnitDigest};
use crate::data::key::RecordKey;
use crate::data::store::codec;
use crate::data::stored::{Piece, StoredRecord};
use crate::data::symbols::Symbol;
use crate::data::tier::{tree_bytes, KeyRange, MetricEntry, Tier, UnitEntry};
use crate::domain::record::{numeric, Direction, Kind};
use crate::domain::time::Timestamp;
use cache::{BlockKey, CachedBlock};

pub mod cache;

/// Marks a [`StoredRecord`] that locates a sealed record: the rest of `start` is
/// its block's period counted from the tier's first, and `length` its kind (top bit)
/// and its index in the block. Hot arenas stay below 2 GiB, so no hot record's
/// start has this bit.
pub(crate) const SEALED: u32 = 1 << 31;

/// Whether `record` locates a sealed record rather than a hot one's stored form.
pub(crate) fn is_sealed(record: StoredRecord) -> bool {
    record.start & SEALED != 0
}

/// A block's period of time: four hours. Of 1, 2, 4 and 6 hours, four took the
/// least memory for the generated 1000 stations x 7 days at a 24-hour hot window
/// (longer blocks compress better, but leave more hours hot; BENCHMARKS.md).
#[cfg(not(test))]
const PERIOD_SECONDS: i64 = 4 * 3600;
/// In tests, an hour: a few hours of records make several blocks.
#[cfg(test)]
const PERIOD_SECONDS: i64 = 3600;

/// zstd's level: 3, its default, compressed the sealed blocks of the generated
/// floor to within a few percent of level 9, at a third of the time.
const LEVEL: i32 = 3;

/// The period an instant falls in, in whole periods since the epoch.
pub(crate) fn period_of(instant: Timestamp) -> i64 {
    instant.seconds.div_euclid(PERIOD_SECONDS)
}

/// The first instant of a period.
pub(crate) fn period_start(period: i64) -> Timestamp {
    Timestamp {
        seconds: period.saturating_mul(PERIOD_SECONDS),
        nanos: 0,
    }
}

/// A record to seal: its key, its entry, and its JSON's five parts (head piece,
/// time, middle piece, value, tail piece).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unsealed<'a, E> {
    pub(crate) key: RecordKey,
    pub(crate) entry: E,
    pub(crate) parts: [&'a [u8]; 5],
}

/// The entries a block holds: the columns each kind writes and reads.
pub(crate) trait Sealable: Copy + Send + Sync + std::fmt::Debug + 'static {
    /// The kind's bit in a locator's `length`.
    const KIND: u32;
    fn with_bytes(self, bytes: StoredRecord) -> Self;
    /// The symbol a block's filter notes: a unit's serial, a metric's name.
    fn filtered(&self) -> Symbol;
    /// Writes the entries' columns; `values` are their value texts.
    fn write(entries: &[Self], values: &[&[u8]], out: &mut Vec<u8>);
    /// Reads `count` entries' columns, given their value texts.
    fn read(reader: &mut Reader<'_>, count: usize, values: &[&[u8]]) -> Vec<Self>;
}

impl Sealable for UnitEntry {
    const KIND: u32 = 0;

    fn with_bytes(self, bytes: StoredRecord) -> Self {
        UnitEntry { bytes, ..self }
    }

    fn filtered(&self) -> Symbol {
        self.unit_serial
    }

    fn write(entries: &[Self], _: &[&[u8]], out: &mut Vec<u8>) {
        let columns: [fn(&UnitEntry) -> Symbol; 5] = [
            |entry| entry.unit_type,
            |entry| entry.unit_serial,
            |entry| entry.slot,
            |entry| entry.mode,
            |entry| entry.result,
        ];
        for column in columns {
            for entry in entries {
                number(out, u64::from(column(entry).0));
            }
        }
        out.extend(entries.iter().map(|entry| entry.direction as u8));
    }

    fn read(reader: &mut Reader<'_>, count: usize, _: &[&[u8]]) -> Vec<Self> {
        let mut columns = [(); 5].map(|()| Vec::with_capacity(count));
        for column in &mut columns {
            for _ in 0..count {
                column.push(Symbol(reader.number() as u32));
            }
        }
        let directions = reader.take(count);
        (0..count)
            .map(|index| UnitEntry {
                bytes: StoredRecord {
                    start: 0,
                    length: 0,
                },
                unit_type: columns[0][index],
                unit_serial: columns[1][index],
                slot: columns[2][index],
                mode: columns[3][index],
                result: columns[4][index],
                direction: match directions[index] {
                    0 => Direction::Input,
                    _ => Direction::Output,
                },
            })
            .collect()
    }
}

impl Sealable for MetricEntry {
    const KIND: u32 = 1;

    fn with_bytes(self, bytes: StoredRecord) -> Self {
        MetricEntry { bytes, ..self }
    }

    fn filtered(&self) -> Symbol {
        self.name
    }

    fn write(entries: &[Self], values: &[&[u8]], out: &mut Vec<u8>) {
        let columns: [fn(&MetricEntry) -> Symbol; 4] = [
            |entry| entry.name,
            |entry| entry.slot,
            |entry| entry.unit_serial,
            |entry| entry.unit,
        ];
        for column in columns {
            for entry in entries {
                number(out, u64::from(column(entry).0));
            }
        }
        // A value is almost always the number its text says: then nothing more.
        let mut raw = Vec::new();
        for (entry, text) in entries.iter().zip(values) {
            let told = value_of(text).to_bits() == entry.value.to_bits();
            out.push(u8::from(!told));
            if !told {
                raw.extend_from_slice(&entry.value.to_bits().to_le_bytes());
            }
        }
        out.extend_from_slice(&raw);
        // Limits by their index in the block's table of distinct pairs.
        let mut table: Vec<[u64; 2]> = Vec::new();
        let mut indexes = Vec::with_capacity(entries.len());
        for entry in entries {
            let pair = [entry.limit_lower.to_bits(), entry.limit_upper.to_bits()];
            let index = match table.iter().position(|known| *known == pair) {
                Some(index) => index,
                None => {
                    table.push(pair);
                    table.len() - 1
                }
            };
            indexes.push(index);
        }
        number(out, table.len() as u64);
        for pair in &table {
            for bits in pair {
                out.extend_from_slice(&bits.to_le_bytes());
            }
        }
        for index in indexes {
            number(out, index as u64);
        }
    }

    fn read(reader: &mut Reader<'_>, count: usize, values: &[&[u8]]) -> Vec<Self> {
        let mut columns = [(); 4].map(|()| Vec::with_capacity(count));
        for column in &mut columns {
            for _ in 0..count {
                column.push(Symbol(reader.number() as u32));
            }
        }
        let told = reader.take(count).to_vec();
        let mut numbers = Vec::with_capacity(count);
        for (index, &raw) in told.iter().enumerate() {
            numbers.push(match raw {
                0 => value_of(values[index]),
                _ => reader.float(),
            });
        }
        let pairs = reader.number() as usize;
        let table: Vec<[f64; 2]> = (0..pairs)
            .map(|_| [reader.float(), reader.float()])
            .collect();
        (0..count)
            .map(|index| {
                let [limit_lower, limit_upper] = table[reader.number() as usize];
                MetricEntry {
                    bytes: StoredRecord {
                        start: 0,
                        length: 0,
                    },
                    name: columns[0][index],
                    slot: columns[1][index],
                    unit_serial: columns[2][index],
                    unit: columns[3][index],
                    value: numbers[index],
                    limit_lower,
                    limit_upper,
                }
            })
            .collect()
    }
}

/// The number a value text says, as the loader reads it (`NaN` when none).
fn value_of(text: &[u8]) -> f64 {
    std::str::from_utf8(text)
        .ok()
        .and_then(numeric)
        .unwrap_or(f64::NAN)
}

/// The pieces more than one block uses, each held once; only ever added to, so
/// that a block sealed earlier still finds its pieces by their indexes.
#[derive(Debug, Default)]
struct SharedPieces {
    bytes: Vec<u8>,
    pieces: Vec<Piece>,
}

impl SharedPieces {
    fn get(&self, index: usize) -> &[u8] {
        let piece = self.pieces[index];
        &self.bytes[piece.start as usize..(piece.start + piece.length) as usize]
    }
}

/// One station's sealed records of a period, of both kinds, compressed.
#[derive(Clone, Debug)]
struct Block {
    /// The zstd frames of its units and of its metrics, then its unit digest and
    /// its metric digest ([`crate::data::digest`]), one after the other.
    bytes: Arc<[u8]>,
    /// Where the metrics' frame starts.
    split: u32,
    /// Where the unit digest starts, and the metric digest.
    unit_digest: u32,
    metric_digest: u32,
    units: u32,
    metrics: u32,
    /// The serial numbers and the metric names it holds, each as a bit of a hash.
    serials: Filter,
    names: Filter,
    /// The lowest and highest ordinal of the files its records came from.
    files: (u32, u32),
    /// Whether another block of its station has outputs of a serial it has outputs
    /// of (one in `Sealed::shared_serials`).
    shares: bool,
}

impl Block {
    fn unit_digest(&self) -> &[u8] {
        &self.bytes[self.unit_digest as usize..self.metric_digest as usize]
    }
}

/// A set of symbols as 256 bits, one for each symbol's hash: a symbol whose bit is
/// clear is not in the set. A block of four hours holds a few dozen serials: with
/// 64 bits, a search for one decoded half of a week's blocks.
#[derive(Clone, Copy, Debug, Default)]
struct Filter([u64; 4]);

impl Filter {
    fn of(symbols: impl Iterator<Item = Symbol>) -> Filter {
        let mut filter = Filter::default();
        for symbol in symbols {
            let bit = Filter::bit(symbol);
            filter.0[bit / 64] |= 1 << (bit % 64);
        }
        filter
    }

    fn may_hold(&self, symbol: Symbol) -> bool {
        let bit = Filter::bit(symbol);
        self.0[bit / 64] & (1 << (bit % 64)) != 0
    }

    fn bit(symbol: Symbol) -> usize {
        (symbol.0.wrapping_mul(0x9e37_79b9) >> 24) as usize
    }
}

/// A station's sealed records. Cloning one shares its blocks.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sealed {
    blocks: BTreeMap<i64, Block>,
    shared: Arc<SharedPieces>,
    /// The period locators count from: the first block's.
    base: i64,
    unit_count: usize,
    metric_count: usize,
    /// Its first and last record of either kind, so that `/stations` decodes nothing.
    ends: Option<((RecordKey, StoredRecord), (RecordKey, StoredRecord))>,
    /// The serials of its outputs, each once, in order; and of those in more than
    /// one of its blocks (a unit retested hours later, say). A summary joins the
    /// attempts of these across blocks, and of the hot outputs' with serials in
    /// `serials`; it counts every other unit from its block's digest alone.
    serials: Box<[Symbol]>,
    shared_serials: Box<[Symbol]>,
}

/// A block's records of one kind, decompressed: their keys, entries (whose
/// `bytes` locate them) and, when asked for, where their JSON's parts are.
#[derive(Debug)]
pub(crate) struct Decoded<E> {
    pub(crate) keys: Vec<RecordKey>,
    pub(crate) entries: Vec<E>,
    spans: Vec<[Span; 5]>,
    payload: Vec<u8>,
    /// Times written the usual way, made again from their instants.
    times: Vec<u8>,
}

#[derive(Clone, Copy, Debug)]
enum Source {
    Payload,
    Times,
    Shared,
}

#[derive(Clone, Copy, Debug)]
struct Span {
    source: Source,
    start: u32,
    length: u32,
}

impl Sealed {
    /// The serials of its outputs, in order.
    pub(crate) fn serials(&self) -> &[Symbol] {
        &self.serials
    }

    /// The serials of outputs in more than one of its blocks, in order.
    pub(crate) fn shared_serials(&self) -> &[Symbol] {
        &self.shared_serials
    }

    /// The last period it holds records of.
    pub(crate) fn last_period(&self) -> Option<i64> {
        self.blocks.last_key_value().map(|(period, _)| *period)
    }

    /// This tier with `units` and `metrics` sealed too, in any order. A record in an
    /// period that is sealed already (one that came late) goes into that period's
    /// block, which is sealed again.
    pub(crate) fn with(
        &self,
        units: Vec<Unsealed<'_, UnitEntry>>,
        metrics: Vec<Unsealed<'_, MetricEntry>>,
    ) -> Sealed {
        if units.is_empty() && metrics.is_empty() {
            return self.clone();
        }
        let mut periods: Vec<i64> = (units.iter().map(|record| period_of(record.key.instant)))
            .chain(metrics.iter().map(|record| period_of(record.key.instant)))
            .collect();
        periods.sort_unstable();
        periods.dedup();
        // Blocks sealed again: decompressed first, so that their records' parts
        // can be borrowed while every block is written.
        let again: Vec<(i64, Decoded<UnitEntry>, Decoded<MetricEntry>)> = periods
            .iter()
            .filter_map(|period| {
                let block = self.blocks.get(period)?;
                Some((
                    *period,
                    self.decode(*period, block, true),
                    self.decode(*period, block, true),
                ))
            })
            .collect();
        let mut groups: BTreeMap<i64, Group<'_>> = BTreeMap::new();
        for (period, old_units, old_metrics) in &again {
            let group = groups.entry(*period).or_default();
            group.units.extend(self.unsealed(old_units));
            group.metrics.extend(self.unsealed(old_metrics));
        }
        let (added_units, added_metrics) = (units.len(), metrics.len());
        for record in units {
            groups
                .entry(period_of(record.key.instant))
                .or_default()
                .units
                .push(record);
        }
        for record in metrics {
            groups
                .entry(period_of(record.key.instant))
                .or_default()
                .metrics
                .push(record);
        }
        let shared = Arc::new(self.shared_with(&groups));
        let known = shared.known();
        let mut sealed = Sealed {
            blocks: self.blocks.clone(),
            shared: Arc::clone(&shared),
            base: 0,
            unit_count: self.unit_count + added_units,
            metric_count: self.metric_count + added_metrics,
            ends: None,
            serials: Box::default(),
            shared_serials: Box::default(),
        };
        for (period, mut group) in groups {
            group.units.sort_unstable_by_key(|record| record.key);
            group.metrics.sort_unstable_by_key(|record| record.key);
            sealed.blocks.insert(period, encode(period, &group, &known));
        }
        sealed.settle();
        sealed
    }

    /// This tier without the records `dropped` says go (by load order), or `None`
    /// when it loses none; only blocks with records of a file `touched` names (by
    /// the lowest and highest file ordinal of a block) are read.
    pub(crate) fn without(
        &self,
        dropped: &dyn Fn(u64) -> bool,
        touched: &dyn Fn(u32, u32) -> bool,
    ) -> Option<Sealed> {
        let periods: Vec<i64> = (self.blocks.iter())
            .filter(|(_, block)| touched(block.files.0, block.files.1))
            .map(|(period, _)| *period)
            .collect();
        let decoded: Vec<(i64, Decoded<UnitEntry>, Decoded<MetricEntry>)> = periods
            .iter()
            .map(|&period| {
                let block = &self.blocks[&period];
                (
                    period,
                    self.decode(period, block, true),
                    self.decode(period, block, true),
                )
            })
            .collect();
        let loses = |keys: &[RecordKey]| keys.iter().any(|key| dropped(key.load_order));
        if !decoded
            .iter()
            .any(|(_, units, metrics)| loses(&units.keys) || loses(&metrics.keys))
        {
            return None;
        }
        let mut kept = Sealed {
            blocks: self.blocks.clone(),
            shared: Arc::clone(&self.shared),
            ..Sealed::default()
        };
        let mut units = Vec::new();
        let mut metrics = Vec::new();
        for (period, old_units, old_metrics) in &decoded {
            kept.blocks.remove(period);
            units.extend(
                (self.unsealed(old_units)).filter(|record| !dropped(record.key.load_order)),
            );
            metrics.extend(
                (self.unsealed(old_metrics)).filter(|record| !dropped(record.key.load_order)),
            );
        }
        // A tier of its own, whether or not any record of the blocks read stays.
        kept.count();
        kept.settle();
        Some(kept.with(units, metrics))
    }

    /// Calls `unit` and `metric` with each sealed record of the blocks that hold
    /// records of a file `touched` names (by a block's lowest and highest file
    /// ordinal) and that `wanted` keeps (by load order), with its JSON's parts.
    pub(crate) fn each(
        &self,
        touched: &dyn Fn(u32, u32) -> bool,
        wanted: &dyn Fn(u64) -> bool,
        unit: &mut dyn FnMut(Unsealed<'_, UnitEntry>),
        metric: &mut dyn FnMut(Unsealed<'_, MetricEntry>),
    ) {
        for (&period, block) in &self.blocks {
            if !touched(block.files.0, block.files.1) {
                continue;
            }
            let units: Decoded<UnitEntry> = self.decode(period, block, true);
            (self.unsealed(&units))
                .filter(|record| wanted(record.key.load_order))
                .for_each(&mut *unit);
            let metrics: Decoded<MetricEntry> = self.decode(period, block, true);
            (self.unsealed(&metrics))
                .filter(|record| wanted(record.key.load_order))
                .for_each(&mut *metric);
        }
    }

    /// A decoded block's records as records to seal, borrowing their parts.
    fn unsealed<'a, E: Sealable>(
        &'a self,
        decoded: &'a Decoded<E>,
    ) -> impl Iterator<Item = Unsealed<'a, E>> + 'a {
        (0..decoded.keys.len()).map(move |index| Unsealed {
            key: decoded.keys[index],
            entry: decoded.entries[index],
            parts: decoded.spans[index].map(|span| self.span(decoded, span)),
        })
    }

    fn span<'a, E>(&'a self, decoded: &'a Decoded<E>, span: Span) -> &'a [u8] {
        let (start, end) = (span.start as usize, (span.start + span.length) as usize);
        match span.source {
            Source::Payload => &decoded.payload[start..end],
            Source::Times => &decoded.times[start..end],
            Source::Shared => &self.shared.bytes[start..end],
        }
    }

    /// The shared pieces after `groups` are sealed: this tier's, and every piece
    /// that more than one period's block uses.
    fn shared_with(&self, groups: &BTreeMap<i64, Group<'_>>) -> SharedPieces {
        let mut periods_of: HashMap<&[u8], (i64, u32)> = HashMap::new();
        for (&period, group) in groups {
            let parts = (group.units.iter().map(|record| record.parts))
                .chain(group.metrics.iter().map(|record| record.parts));
            for parts in parts {
                for piece in [parts[0], parts[2], parts[4]] {
                    let seen = periods_of.entry(piece).or_insert((period, 0));
                    if seen.1 == 0 || seen.0 != period {
                        *seen = (period, seen.1 + 1);
                    }
                }
            }
        }
        let mut shared = SharedPieces {
            bytes: self.shared.bytes.clone(),
            pieces: self.shared.pieces.clone(),
        };
        let known = self.shared.known();
        let mut wide: Vec<&[u8]> = (periods_of.into_iter())
            .filter(|(piece, (_, periods))| *periods > 1 && !known.contains_key(piece))
            .map(|(piece, _)| piece)
            .collect();
        wide.sort_unstable();
        for piece in wide {
            shared.pieces.push(Piece {
                start: shared.bytes.len() as u32,
                length: piece.len() as u32,
            });
            shared.bytes.extend_from_slice(piece);
        }
        shared
    }

    /// Feeds `day` each block's stored bytes of `kind` in the periods from `from`
    /// to before `to`, with the period and the pieces they share: what a block's
    /// records of `kind` are read from, so that these change whenever the records
    /// do. `block` is called with the block's period's start and those bytes.
    pub(crate) fn hash_blocks(
        &self,
        kind: Kind,
        from: Timestamp,
        to: Timestamp,
        block: &mut dyn FnMut(Timestamp, [&[u8]; 4]),
    ) {
        let (first, end) = (period_of(from), period_of(to));
        if first >= end {
            return;
        }
        // The shared pieces once, then their digest for every block.
        let mut shared = xxhash_rust::xxh3::Xxh3::new();
        shared.update(&self.shared.bytes);
        for piece in &self.shared.pieces {
            shared.update(&piece.start.to_le_bytes());
            shared.update(&piece.length.to_le_bytes());
        }
        let shared = shared.digest128().to_le_bytes();
        for (&period, stored) in self.blocks.range(first..end) {
            let frame = match kind {
                Kind::Units if stored.units > 0 => &stored.bytes[..stored.split as usize],
                Kind::Metrics if stored.metrics > 0 => {
                    &stored.bytes[stored.split as usize..stored.unit_digest as usize]
                }
                _ => continue,
            };
            block(
                period_start(period),
                [
                    &period.to_le_bytes(),
                    &shared,
                    &(frame.len() as u64).to_le_bytes(),
                    frame,
                ],
            );
        }
    }

    /// Finds its first and last record and its outputs' serials, and sets the base
    /// period.
    fn settle(&mut self) {
        self.base = self
            .blocks
            .first_key_value()
            .map_or(0, |(period, _)| *period);
        // Every block's digest read once: its outputs' serials, with its period.
        let mut outputs: Vec<(Symbol, i64)> = Vec::new();
        let mut buffer = UnitDigest::default();
        for (&period, block) in &self.blocks {
            let bytes = block.unit_digest();
            digest::unit_serials(period_start(period), bytes, &mut buffer, &mut |serial| {
                outputs.push((serial, period));
            });
        }
        let (shared, sharing) = digest::shared_serials(&mut outputs);
        for (period, block) in &mut self.blocks {
            block.shares = sharing.binary_search(period).is_ok();
        }
        let mut serials: Vec<Symbol> = outputs.iter().map(|(serial, _)| *serial).collect();
        serials.dedup();
        self.serials = serials.into();
        self.shared_serials = shared.into();
        self.ends = None;
        let (Some((&first_period, first)), Some((&last_period, last))) =
            (self.blocks.first_key_value(), self.blocks.last_key_value())
        else {
            return;
        };
        let ends = |period: i64, block: &Block, last: bool| {
            let units: Decoded<UnitEntry> = self.decode(period, block, false);
            let metrics: Decoded<MetricEntry> = self.decode(period, block, false);
            let unit = units.keys.iter().zip(&units.entries);
            let metric = metrics.keys.iter().zip(&metrics.entries);
            let pick = |(key, bytes): (&RecordKey, StoredRecord)| (*key, bytes);
            let records = (unit.map(|(key, entry)| (key, entry.bytes)))
                .chain(metric.map(|(key, entry)| (key, entry.bytes)));
            match last {
                false => records.min_by_key(|(key, _)| **key).map(pick),
                true => records.max_by_key(|(key, _)| **key).map(pick),
            }
        };
        if let (Some(first), Some(last)) = (
            ends(first_period, first, false),
            ends(last_period, last, true),
        ) {
            self.ends = Some((first, last));
        }
    }

    /// Counts its records from its blocks.
    fn count(&mut self) {
        self.unit_count = self.blocks.values().map(|block| block.units as usize).sum();
        self.metric_count = (self.blocks.values())
            .map(|block| block.metrics as usize)
            .sum();
    }

    /// Decompresses `block` (of `period`) and reads its records of kind `E`; their
    /// JSON's parts too when `json`.
    fn decode<E: Sealable>(&self, period: i64, block: &Block, json: bool) -> Decoded<E> {
        let count = match E::KIND {
            0 => block.units,
            _ => block.metrics,
        } as usize;
        let mut decoded = Decoded {
            keys: Vec::with_capacity(count),
            entries: Vec::new(),
            spans: Vec::new(),
            payload: Vec::new(),
            times: Vec::new(),
        };
        if count == 0 {
            return decoded;
        }
        let frame = match E::KIND {
            0 => &block.bytes[..block.split as usize],
            _ => &block.bytes[block.split as usize..block.unit_digest as usize],
        };
        decoded.payload = decompress(frame);
        let payload = &decoded.payload;
        let mut reader = Reader {
            bytes: payload,
            at: 0,
        };
        let locals: Vec<Span> = read_locals(&mut reader);
        reader.number(); // the count, which the block says too
        let nanos_unit = match reader.take(1)[0] {
            0 => 1_000_000,
            _ => 1,
        };
        let start = period_start(period);
        let mut offset: u64 = 0;
        let mut instants = Vec::with_capacity(count);
        for _ in 0..count {
            offset += reader.number();
            instants.push(add_nanos(start, offset * nanos_unit));
        }
        let (mut file, mut line) = (0i64, 0i64);
        let mut files = Vec::with_capacity(count);
        for _ in 0..count {
            file += reader.signed();
            files.push(file);
        }
        for (index, instant) in instants.iter().enumerate() {
            line += reader.signed();
            decoded.keys.push(RecordKey {
                instant: *instant,
                load_order: ((files[index] as u64) << 32) | (line as u64 & 0xffff_ffff),
            });
        }
        let mut times: Vec<(u64, usize)> = Vec::with_capacity(count);
        for _ in 0..count {
            let code = reader.number();
            let length = match code {
                0 => reader.number() as usize,
                _ => 0,
            };
            times.push((code, length));
        }
        let time_texts: Vec<Span> = (times.iter())
            .map(|&(_, length)| reader.span(length))
            .collect();
        let value_lengths: Vec<usize> = (0..count).map(|_| reader.number() as usize).collect();
        let values: Vec<Span> = value_lengths
            .iter()
            .map(|&length| reader.span(length))
            .collect();
        let mut pieces = [(); 3].map(|()| Vec::with_capacity(count));
        for column in &mut pieces {
            for _ in 0..count {
                let reference = reader.number() as usize;
                column.push(match reference & 1 {
                    0 => {
                        let piece = self.shared.pieces[reference >> 1];
                        Span {
                            source: Source::Shared,
                            start: piece.start,
                            length: piece.length,
                        }
                    }
                    _ => locals[reference >> 1],
                });
            }
        }
        let value_texts: Vec<&[u8]> = values
            .iter()
            .map(|span| &payload[span.start as usize..(span.start + span.length) as usize])
            .collect();
        let entries = E::read(&mut reader, count, &value_texts);
        let kind = E::KIND << 31;
        let block_number = SEALED | (period - self.base) as u32;
        decoded.entries = (entries.into_iter().enumerate())
            .map(|(index, entry)| {
                entry.with_bytes(StoredRecord {
                    start: block_number,
                    length: kind | index as u32,
                })
            })
            .collect();
        if json {
            let mut generated = Vec::new();
            decoded.spans = (0..count)
                .map(|index| {
                    let time = match times[index].0 {
                        0 => time_texts[index],
                        code => {
                            let start = generated.len() as u32;
                            write_coded_time(&mut generated, decoded.keys[index].instant, code);
                            Span {
                                source: Source::Times,
                                start,
                                length: generated.len() as u32 - start,
                            }
                        }
                    };
                    [
                        pieces[0][index],
                        time,
                        pieces[1][index],
                        values[index],
                        pieces[2][index],
                    ]
                })
                .collect();
            decoded.times = generated;
        }
        decoded
    }

    /// The block of a locator, and its period.
    fn block_of(&self, record: StoredRecord) -> (i64, &Block) {
        let period = self.base + i64::from(record.start & !SEALED);
        (period, &self.blocks[&period])
    }

    /// Appends the JSON of the sealed record `record` locates.
    pub(crate) fn write_json(&self, record: StoredRecord, out: &mut Vec<u8>) {
        let (period, block) = self.block_of(record);
        let index = (record.length & !SEALED) as usize;
        match record.length >> 31 {
            0 => self
                .decoded::<UnitEntry>(period, block)
                .write(self, index, out),
            _ => self
                .decoded::<MetricEntry>(period, block)
                .write(self, index, out),
        }
    }

    /// The blocks that may hold records with keys in `range`, with their periods.
    fn blocks_in(&self, (start, end): KeyRange) -> impl Iterator<Item = (i64, &Block)> + '_ {
        let period = |bound: Bound<RecordKey>| bound.map(|key| period_of(key.instant));
        let lower = match period(start) {
            Bound::Excluded(period) => Bound::Included(period),
            other => other,
        };
        let upper = match period(end) {
            Bound::Excluded(period) => Bound::Included(period),
            other => other,
        };
        let empty = match (lower, upper) {
            (Bound::Included(lower), Bound::Included(upper)) => lower > upper,
            _ => false,
        };
        (!empty)
            .then(|| self.blocks.range((lower, upper)))
            .into_iter()
            .flatten()
            .map(|(period, block)| (*period, block))
    }

    /// The records of kind `E` in `range` of the blocks `keep` keeps.
    fn records_in<E: Sealable>(
        &self,
        range: KeyRange,
        keep: impl Fn(&Block) -> bool + 'static,
    ) -> impl Iterator<Item = (RecordKey, E)> + '_ {
        self.blocks_in(range)
            .filter(move |(_, block)| keep(block))
            .flat_map(move |(period, block)| {
                let decoded: Arc<Decoded<E>> = self.decoded(period, block);
                // Its keys are in order: a window's records are found by two
                // binary searches, not by reading the block's four hours.
                decoded
                    .indexes_in(range)
                    .map(move |index| (decoded.keys[index], decoded.entries[index]))
            })
    }
}

/// A sealed block that holds unit records, as a unit summary reads it: by its
/// digest when that will do, else record by record.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UnitBlock<'a> {
    sealed: &'a Sealed,
    period: i64,
    block: &'a Block,
}

impl<'a> UnitBlock<'a> {
    pub(crate) fn period_start(&self) -> Timestamp {
        period_start(self.period)
    }

    /// Its unit digest ([`crate::data::digest`]).
    pub(crate) fn digest(&self) -> &'a [u8] {
        self.block.unit_digest()
    }

    /// Whether another block of the station has outputs of a serial it has
    /// outputs of.
    pub(crate) fn shares_serials(&self) -> bool {
        self.block.shares
    }

    /// Whether it may hold records of `serial`: false if it holds none.
    pub(crate) fn may_hold_serial(&self, serial: Symbol) -> bool {
        self.block.serials.may_hold(serial)
    }

    /// Its unit records, in key order.
    pub(crate) fn records(&self) -> impl Iterator<Item = (RecordKey, UnitEntry)> + 'a {
        let decoded: Arc<Decoded<UnitEntry>> = self.sealed.decoded(self.period, self.block);
        (0..decoded.keys.len()).map(move |index| (decoded.keys[index], decoded.entries[index]))
    }
}

/// A sealed block that holds metric records, as a metric summary reads it: by
/// its digest when that will do, else record by record.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MetricBlock<'a> {
    sealed: &'a Sealed,
    period: i64,
    block: &'a Block,
}

impl<'a> MetricBlock<'a> {
    pub(crate) fn period(&self) -> i64 {
        self.period
    }

    /// Its metric digest ([`crate::data::digest`]).
    pub(crate) fn digest(&self) -> &'a [u8] {
        &self.block.bytes[self.block.metric_digest as usize..]
    }

    /// Its metric records, in key order.
    pub(crate) fn records(&self) -> impl Iterator<Item = (RecordKey, MetricEntry)> + 'a {
        let decoded: Arc<Decoded<MetricEntry>> = self.sealed.decoded(self.period, self.block);
        (0..decoded.keys.len()).map(move |index| (decoded.keys[index], decoded.entries[index]))
    }
}

impl Sealed {
    /// The blocks that hold metric records and may hold some with keys in `range`,
    /// in time order.
    pub(crate) fn metric_blocks(&self, range: KeyRange) -> impl Iterator<Item = MetricBlock<'_>> {
        self.blocks_in(range)
            .filter(|(_, block)| block.metrics > 0)
            .map(|(period, block)| MetricBlock {
                sealed: self,
                period,
                block,
            })
    }

    /// The blocks that hold unit records and may hold some with keys in `range`, in
    /// time order.
    pub(crate) fn unit_blocks(&self, range: KeyRange) -> impl Iterator<Item = UnitBlock<'_>> {
        self.blocks_in(range)
            .filter(|(_, block)| block.units > 0)
            .map(|(period, block)| UnitBlock {
                sealed: self,
                period,
                block,
            })
    }
}

thread_local! {
    /// zstd's contexts, one of each a thread, used again for every block: making
    /// a decompression context for each block decoded was a quarter of the CPU of
    /// a summary of a hundred stations' history (BENCHMARKS.md).
    static DECOMPRESSOR: RefCell<zstd::bulk::Decompressor<'static>> = RefCell::new(
        zstd::bulk::Decompressor::new().expect("zstd makes a decompression context"),
    );
    static COMPRESSOR: RefCell<zstd::bulk::Compressor<'static>> = RefCell::new(
        zstd::bulk::Compressor::new(LEVEL).expect("zstd makes a compression context"),
    );
}

/// A block's frame decompressed, with this thread's context. A frame made by
/// [`frame`] says how long it is decompressed.
fn decompress(frame: &[u8]) -> Vec<u8> {
    let length = zstd::zstd_safe::get_frame_content_size(frame)
        .ok()
        .flatten()
        .expect("a sealed block's frame says its length");
    DECOMPRESSOR
        .with_borrow_mut(|decompressor| decompressor.decompress(frame, length as usize))
        .expect("a sealed block decompresses as it was made")
}

impl Sealed {
    /// `block` (of `period`) decoded with its JSON's parts: from the process's
    /// cache ([`cache`]), else decompressed now and kept there.
    fn decoded<E: Sealable>(&self, period: i64, block: &Block) -> Arc<Decoded<E>> {
        let key = self.cache_key::<E>(block);
        let cached = cache::with_blocks(|blocks| blocks.get(&key))
            .and_then(|cached| Arc::clone(&cached.decoded).downcast::<Decoded<E>>().ok());
        if let Some(decoded) = cached {
            return decoded;
        }
        let decoded = Arc::new(self.decode::<E>(period, block, true));
        let weight = decoded.heap_bytes() + cache::ENTRY_BYTES;
        let cached = CachedBlock {
            _bytes: Arc::clone(&block.bytes),
            decoded: Arc::clone(&decoded) as Arc<dyn std::any::Any + Send + Sync>,
        };
        cache::with_blocks(|blocks| blocks.insert(key, cached, weight));
        decoded
    }

    /// What names `block`'s records of kind `E` decoded, in the cache and in a
    /// [`JsonMemo`].
    fn cache_key<E: Sealable>(&self, block: &Block) -> BlockKey {
        (block.bytes.as_ptr() as usize, E::KIND, self.base)
    }

    /// Appends the JSON of the sealed record `record` locates, reading its block
    /// decoded from `memo` when an earlier record of the same scan read it.
    pub(crate) fn write_json_with(
        &self,
        record: StoredRecord,
        out: &mut Vec<u8>,
        memo: &mut JsonMemo,
    ) {
        let (period, block) = self.block_of(record);
        let index = (record.length & !SEALED) as usize;
        match record.length >> 31 {
            0 => memo
                .decoded::<UnitEntry>(self, period, block)
                .write(self, index, out),
            _ => memo
                .decoded::<MetricEntry>(self, period, block)
                .write(self, index, out),
        }
    }
}

/// The blocks one scan has written sealed records' JSON from, decoded: a scan's
/// hits interleave stations, so that each record would otherwise be a lookup in
/// the shared cache, its lock taken. It lives as long as the scan, while the
/// generation it reads is borrowed, so no block's address is taken by another.
#[derive(Default)]
pub(crate) struct JsonMemo {
    blocks: HashMap<BlockKey, Arc<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for JsonMemo {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("JsonMemo")
            .field("blocks", &self.blocks.len())
            .finish()
    }
}

impl JsonMemo {
    fn decoded<E: Sealable>(
        &mut self,
        sealed: &Sealed,
        period: i64,
        block: &Block,
    ) -> Arc<Decoded<E>> {
        let key = sealed.cache_key::<E>(block);
        if let Some(decoded) = self.blocks.get(&key) {
            if let Ok(decoded) = Arc::clone(decoded).downcast::<Decoded<E>>() {
                return decoded;
            }
        }
        let decoded = sealed.decoded::<E>(period, block);
        self.blocks.insert(
            key,
            Arc::clone(&decoded) as Arc<dyn std::any::Any + Send + Sync>,
        );
        decoded
    }
}

impl<E> Decoded<E> {
    /// Its bytes on the heap: its vectors' capacities and itself, what the cache
    /// weighs it by.
    fn heap_bytes(&self) -> u64 {
        (size_of::<Self>()
            + self.keys.capacity() * size_of::<RecordKey>()
            + self.entries.capacity() * size_of::<E>()
            + self.spans.capacity() * size_of::<[Span; 5]>()
            + self.payload.capacity()
            + self.times.capacity()) as u64
    }

    /// The indexes of its records with keys in `range`: its keys are in order.
    fn indexes_in(&self, (start, end): KeyRange) -> std::ops::Range<usize> {
        let first = match start {
            Bound::Included(key) => self.keys.partition_point(|probe| *probe < key),
            Bound::Excluded(key) => self.keys.partition_point(|probe| *probe <= key),
            Bound::Unbounded => 0,
        };
        let end = match end {
            Bound::Included(key) => self.keys.partition_point(|probe| *probe <= key),
            Bound::Excluded(key) => self.keys.partition_point(|probe| *probe < key),
            Bound::Unbounded => self.keys.len(),
        };
        first..end.max(first)
    }

    fn write(&self, sealed: &Sealed, index: usize, out: &mut Vec<u8>) {
        for span in self.spans[index] {
            out.extend_from_slice(sealed.span(self, span));
        }
    }
}

impl Tier for Sealed {
    fn units_in(&self, range: KeyRange) -> impl Iterator<Item = (RecordKey, UnitEntry)> + '_ {
        self.records_in(range, |block| block.units > 0)
    }

    fn units_of_serial(
        &self,
        serial: Symbol,
        range: KeyRange,
    ) -> impl Iterator<Item = (RecordKey, UnitEntry)> + '_ {
        self.records_in(range, move |block| block.serials.may_hold(serial))
            .filter(move |(_, entry): &(RecordKey, UnitEntry)| entry.unit_serial == serial)
    }

    fn metrics_in(&self, range: KeyRange) -> impl Iterator<Item = (RecordKey, MetricEntry)> + '_ {
        self.records_in(range, |block| block.metrics > 0)
    }

    fn metrics_of_name(
        &self,
        name: Symbol,
        range: KeyRange,
    ) -> impl Iterator<Item = (RecordKey, StoredRecord)> + '_ {
        self.records_in(range, move |block| block.names.may_hold(name))
            .filter(move |(_, entry): &(RecordKey, MetricEntry)| entry.name == name)
            .map(|(key, entry)| (key, entry.bytes))
    }

    fn first_and_last(&self) -> Option<((RecordKey, StoredRecord), (RecordKey, StoredRecord))> {
        self.ends
    }

    fn unit_count(&self) -> usize {
        self.unit_count
    }

    fn metric_count(&self) -> usize {
        self.metric_count
    }

    fn memory(&self, add: &mut dyn FnMut(&'static str, u64)) {
        // An `Arc<[u8]>` holds two counts before its bytes.
        let blocks = (self.blocks.values())
            .map(|block| u64::from(block.unit_digest) + 16)
            .sum();
        add("sealed blocks (compressed)", blocks);
        let digests =
            |kind: fn(&Block) -> usize| self.blocks.values().map(|block| kind(block) as u64).sum();
        add(
            "sealed unit digests",
            digests(|block| (block.metric_digest - block.unit_digest) as usize),
        );
        add(
            "sealed metric digests",
            digests(|block| block.bytes.len() - block.metric_digest as usize),
        );
        add("sealed block index", tree_bytes(&self.blocks));
        add(
            "sealed serial index",
            ((self.serials.len() + self.shared_serials.len()) * size_of::<Symbol>()) as u64,
        );
        add(
            "sealed shared pieces",
            (self.shared.bytes.len() + self.shared.pieces.len() * size_of::<Piece>()) as u64,
        );
    }
}

/// The records of one period to seal.
#[derive(Default)]
struct Group<'a> {
    units: Vec<Unsealed<'a, UnitEntry>>,
    metrics: Vec<Unsealed<'a, MetricEntry>>,
}

impl SharedPieces {
    /// Each piece's index, by its bytes.
    fn known(&self) -> HashMap<&[u8], usize> {
        (0..self.pieces.len())
            .map(|index| (self.get(index), index))
            .collect()
    }
}

/// The block of one period's records, each kind in key order.
fn encode(period: i64, group: &Group<'_>, known: &HashMap<&[u8], usize>) -> Block {
    let units = frame(period, &group.units, known);
    let metrics = frame(period, &group.metrics, known);
    let split = units.len() as u32;
    let mut bytes = units;
    bytes.extend_from_slice(&metrics);
    let unit_digest = bytes.len() as u32;
    let records: Vec<(RecordKey, UnitEntry)> = (group.units.iter())
        .map(|record| (record.key, record.entry))
        .collect();
    write_unit_digest(period_start(period), &records, &mut bytes);
    let metric_digest = bytes.len() as u32;
    let records: Vec<MetricRecord<'_>> = (group.metrics.iter())
        .map(|record| (record.key, record.entry, record.parts))
        .collect();
    write_metric_digest(period_start(period), &records, &mut bytes);
    let mut files = (u32::MAX, 0);
    let orders = (group.units.iter().map(|record| record.key.load_order))
        .chain(group.metrics.iter().map(|record| record.key.load_order));
    for order in orders {
        let file = (order >> 32) as u32;
        files = (files.0.min(file), files.1.max(file));
    }
    Block {
        bytes: Arc::from(bytes),
        split,
        unit_digest,
        metric_digest,
        units: group.units.len() as u32,
        metrics: group.metrics.len() as u32,
        serials: Filter::of(group.units.iter().map(|record| record.entry.filtered())),
        names: Filter::of(group.metrics.iter().map(|record| record.entry.filtered())),
        files,
        shares: false,
    }
}

/// One kind's records of a block as a zstd frame of their own (none when there are
/// none): the pieces of theirs the shared table does not hold, then their columns.
/// A read of one kind decompresses its frame alone.
fn frame<'a, E: Sealable>(
    period: i64,
    records: &[Unsealed<'a, E>],
    known: &HashMap<&[u8], usize>,
) -> Vec<u8> {
    if records.is_empty() {
        return Vec::new();
    }
    let mut locals: Vec<&'a [u8]> = Vec::new();
    let mut local_index: HashMap<&'a [u8], usize> = HashMap::new();
    let mut reference = |piece: &'a [u8]| -> u64 {
        if let Some(&index) = known.get(piece) {
            return (index as u64) << 1;
        }
        let index = *local_index.entry(piece).or_insert_with(|| {
            locals.push(piece);
            locals.len() - 1
        });
        ((index as u64) << 1) | 1
    };
    let mut section = Vec::new();
    write_section(period, records, &mut reference, &mut section);
    let mut payload = Vec::with_capacity(section.len() + 64);
    number(&mut payload, locals.len() as u64);
    for piece in &locals {
        number(&mut payload, piece.len() as u64);
    }
    for piece in &locals {
        payload.extend_from_slice(piece);
    }
    payload.extend_from_slice(&section);
    COMPRESSOR
        .with_borrow_mut(|compressor| compressor.compress(&payload))
        .expect("zstd compresses a buffer in memory")
}

/// Writes one kind's records of a block, in key order, as columns.
fn write_section<'a, E: Sealable>(
    period: i64,
    records: &[Unsealed<'a, E>],
    reference: &mut dyn FnMut(&'a [u8]) -> u64,
    out: &mut Vec<u8>,
) {
    number(out, records.len() as u64);
    let whole_millis = (records.iter()).all(|record| record.key.instant.nanos % 1_000_000 == 0);
    out.push(u8::from(!whole_millis));
    let unit: u64 = if whole_millis { 1_000_000 } else { 1 };
    let start = period_start(period);
    let mut previous = 0;
    for record in records {
        let offset = nanos_between(start, record.key.instant) / unit;
        number(out, offset - previous);
        previous = offset;
    }
    let mut file = 0i64;
    for record in records {
        let this = (record.key.load_order >> 32) as i64;
        signed(out, this - file);
        file = this;
    }
    let mut line = 0i64;
    for record in records {
        let this = i64::from(record.key.load_order as u32);
        signed(out, this - line);
        line = this;
    }
    let mut texts = Vec::new();
    for record in records {
        match time_code(record.key.instant, record.parts[1]) {
            Some(code) => number(out, code),
            None => {
                number(out, 0);
                number(out, record.parts[1].len() as u64);
                texts.extend_from_slice(record.parts[1]);
            }
        }
    }
    out.extend_from_slice(&texts);
    for record in records {
        number(out, record.parts[3].len() as u64);
    }
    for record in records {
        out.extend_from_slice(record.parts[3]);
    }
    for part in [0, 2, 4] {
        for record in records {
            number(out, reference(record.parts[part]));
        }
    }
    let entries: Vec<E> = records.iter().map(|record| record.entry).collect();
    let values: Vec<&[u8]> = records.iter().map(|record| record.parts[3]).collect();
    E::write(&entries, &values, out);
}

/// How a time text is written, when it is one of the usual ways: the time of day
/// at its offset, with milliseconds or none, then `Z` or the offset. The code is
/// `1 + (offset << 1 | millis)`, where the offset is 0 for `Z`, else one more
/// than its minutes zigzagged; 0 means the text is kept as it is.
fn time_code(instant: Timestamp, text: &[u8]) -> Option<u64> {
    let offset = match text.last()? {
        b'Z' => 0,
        _ => {
            let suffix = text.get(text.len().checked_sub(6)?..)?;
            let digits = |at: usize| -> Option<i64> {
                let tens = suffix[at].checked_sub(b'0').filter(|digit| *digit < 10)?;
                let ones = suffix[at + 1]
                    .checked_sub(b'0')
                    .filter(|digit| *digit < 10)?;
                Some(i64::from(tens * 10 + ones))
            };
            let minutes = digits(1)? * 60 + digits(4)?;
            let minutes = match (suffix[0], suffix[3]) {
                (b'+', b':') => minutes,
                (b'-', b':') => -minutes,
                _ => return None,
            };
            ((minutes << 1) ^ (minutes >> 63)) as u64 + 1
        }
    };
    [1u64, 0].into_iter().find_map(|millis| {
        let code = 1 + ((offset << 1) | millis);
        let mut usual = Vec::with_capacity(text.len());
        write_coded_time(&mut usual, instant, code);
        (usual == text).then_some(code)
    })
}

/// Writes the time text a [`time_code`] stands for.
fn write_coded_time(out: &mut Vec<u8>, instant: Timestamp, code: u64) {
    let millis = (code - 1) & 1 == 1;
    let offset = (code - 1) >> 1;
    let minutes = match offset {
        0 => 0,
        _ => {
            let zigzag = offset - 1;
            ((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64)
        }
    };
    let second = (instant.seconds + minutes * 60).rem_euclid(86_400);
    let two = |out: &mut Vec<u8>, value: i64| {
        out.push(b'0' + (value / 10 % 10) as u8);
        out.push(b'0' + (value % 10) as u8);
    };
    two(out, second / 3600);
    out.push(b':');
    two(out, second / 60 % 60);
    out.push(b':');
    two(out, second % 60);
    if millis {
        let milli = instant.nanos / 1_000_000;
        out.push(b'.');
        out.push(b'0' + (milli / 100) as u8);
        two(out, i64::from(milli % 100));
    }
    match offset {
        0 => out.push(b'Z'),
        _ => {
            out.push(if minutes < 0 { b'-' } else { b'+' });
            two(out, minutes.abs() / 60);
            out.push(b':');
            two(out, minutes.abs() % 60);
        }
    }
}

fn nanos_between(start: Timestamp, instant: Timestamp) -> u64 {
    instant.nanos_since(start) as u64
}

fn add_nanos(start: Timestamp, nanos: u64) -> Timestamp {
    Timestamp {
        seconds: start.seconds + (nanos / 1_000_000_000) as i64,
        nanos: (nanos % 1_000_000_000) as u32,
    }
}

fn read_locals(reader: &mut Reader<'_>) -> Vec<Span> {
    let count = reader.number() as usize;
    let lengths: Vec<usize> = (0..count).map(|_| reader.number() as usize).collect();
    lengths
        .into_iter()
        .map(|length| reader.span(length))
        .collect()
}

fn number(out: &mut Vec<u8>, value: u64) {
    let mut encoded = [0; 10];
    let length = value.encode_var(&mut encoded);
    out.extend_from_slice(&encoded[..length]);
}

fn signed(out: &mut Vec<u8>, value: i64) {
    number(out, ((value << 1) ^ (value >> 63)) as u64);
}

/// Reads a block's payload from the front.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn number(&mut self) -> u64 {
        let (value, length) =
            u64::decode_var(&self.bytes[self.at..]).expect("a sealed block's numbers are whole");
        self.at += length;
        value
    }

    fn signed(&mut self) -> i64 {
        let value = self.number();
        ((value >> 1) as i64) ^ -((value & 1) as i64)
    }

    fn take(&mut self, count: usize) -> &[u8] {
        let taken = &self.bytes[self.at..self.at + count];
        self.at += count;
        taken
    }

    fn float(&mut self) -> f64 {
        let bytes: [u8; 8] = self.take(8).try_into().expect("eight bytes");
        f64::from_bits(u64::from_le_bytes(bytes))
    }

    /// The span of the next `length` bytes of the payload.
    fn span(&mut self, length: usize) -> Span {
        let span = Span {
            source: Source::Payload,
            start: self.at as u32,
            length: length as u32,
        };
        self.at += length;
        span
    }
}

/// A station's sealed tier in a store file (issue 32): its blocks as they are in
/// memory, compressed, with their digests, and its shared pieces; what is derived
/// from them (counts, ends, serials) is found again when it is read back.
impl Sealed {
    /// Appends the tier's blocks and shared pieces.
    pub(crate) fn write_to(&self, out: &mut Vec<u8>) {
        codec::number(out, self.blocks.len() as u64);
        for (&period, block) in &self.blocks {
            codec::signed(out, period);
            codec::bytes(out, &block.bytes);
            for number in [
                block.split,
                block.unit_digest,
                block.metric_digest,
                block.units,
                block.metrics,
                block.files.0,
                block.files.1,
            ] {
                codec::number(out, u64::from(number));
            }
            for word in block.serials.0.iter().chain(&block.names.0) {
                out.extend_from_slice(&word.to_le_bytes());
            }
        }
        codec::bytes(out, &self.shared.bytes);
        codec::number(out, self.shared.pieces.len() as u64);
        for piece in &self.shared.pieces {
            codec::number(out, u64::from(piece.start));
            codec::number(out, u64::from(piece.length));
        }
    }

    /// A tier as [`Sealed::write_to`] wrote it.
    pub(crate) fn read_from(decoder: &mut codec::Decoder<'_>) -> Result<Sealed, codec::Corrupt> {
        let corrupt = codec::Corrupt;
        let mut blocks = BTreeMap::new();
        for _ in 0..decoder.count(8)? {
            let period = decoder.signed()?;
            let bytes: Arc<[u8]> = Arc::from(decoder.bytes()?);
            let mut numbers = [0u32; 7];
            for number in &mut numbers {
                *number = decoder.u32()?;
            }
            let [split, unit_digest, metric_digest, units, metrics, lowest, highest] = numbers;
            if !(split <= unit_digest
                && unit_digest <= metric_digest
                && metric_digest as usize <= bytes.len())
            {
                return Err(corrupt("a sealed block's parts"));
            }
            let mut words = [0u64; 8];
            for word in &mut words {
                *word = decoder.u64_le()?;
            }
            let block = Block {
                bytes,
                split,
                unit_digest,
                metric_digest,
                units,
                metrics,
                serials: Filter([words[0], words[1], words[2], words[3]]),
                names: Filter([words[4], words[5], words[6], words[7]]),
                files: (lowest, highest),
                shares: false,
            };
            if blocks.insert(period, block).is_some() {
                return Err(corrupt("a sealed period twice"));
            }
        }
        let shared_bytes = decoder.bytes()?.to_vec();
        let mut pieces = Vec::new();
        for _ in 0..decoder.count(2)? {
            let piece = Piece {
                start: decoder.u32()?,
                length: decoder.u32()?,
            };
            if u64::from(piece.start) + u64::from(piece.length) > shared_bytes.len() as u64 {
                return Err(corrupt("a shared piece"));
            }
            pieces.push(piece);
        }
        let mut sealed = Sealed {
            blocks,
            shared: Arc::new(SharedPieces {
                bytes: shared_bytes,
                pieces,
            }),
            ..Sealed::default()
        };
        sealed.count();
        sealed.settle();
        Ok(sealed)
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Bound::{Excluded, Included, Unbounded};
    use std::ops::RangeBounds as _;
    use std::time::Duration;

    use proptest::prelude::*;
    use proptest::test_runner::TestCaseError;

    use super::*;
    use crate::data::catalog::Generation;
    use crate::data::load::{load, LoadOptions, OnInvalid};
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
        loaded_files(&[("a", records)], hot)
    }

    /// Records as [`lines`] writes them: (second, serial, style).
    type Records<'a> = &'a [(i64, u8, u8)];

    /// A load of one units file and one metrics file of `records` for each name.
    fn loaded_files(files: &[(&str, Records<'_>)], hot: Option<Duration>) -> Generation {
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
        })
        .unwrap()
        .0
    }

    fn station(generation: &Generation) -> &StationData {
        &generation.shards()[0].stations[0]
    }

    fn json(station: &StationData, record: StoredRecord) -> String {
        let mut json = Vec::new();
        station.write_json(record, &mut json);
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
        let units = station.units_in(range).map(|(key, entry)| {
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
        for serial in 0..4 {
            let symbol = Symbol(serial);
            let units = station.units_of_serial(symbol, range);
            read.extend(units.map(|(key, entry)| format!("{key:?}") + &json(station, entry.bytes)));
            let metrics = station.metrics_of_name(symbol, range);
            read.extend(metrics.map(|(key, bytes)| format!("{key:?}") + &json(station, bytes)));
        }
        let metrics = station.metrics_in(range).map(|(key, entry)| {
            let numbers = [entry.value, entry.limit_lower, entry.limit_upper].map(f64::to_bits);
            format!("{key:?} {:?} {:?} {numbers:?}", entry.name, entry.slot)
                + &json(station, entry.bytes)
        });
        read.extend(metrics);
        read
    }

    /// Records as [`lines`] writes them, and windows of seconds (from, to, shape)
    /// to read them in.
    type Windows<'a> = &'a [(i64, i64, u8)];

    /// Loads `records` all hot and sealed, and asserts that they read the same in
    /// `windows` and whole.
    fn reads_the_same(records: Records<'_>, windows: Windows<'_>) -> Result<(), TestCaseError> {
        let hot = loaded(records, None);
        let sealed = loaded(records, Some(Duration::from_secs(1)));
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
            cache::set_capacity(capacity);
            let result = reads_the_same(&records, &ranges);
            let stats = cache::stats();
            cache::set_capacity(cache::DEFAULT_CAPACITY);
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
            for (period, block) in &sealed.blocks {
                let units: Decoded<UnitEntry> = sealed.decode(*period, block, false);
                let metrics: Decoded<MetricEntry> = sealed.decode(*period, block, false);
                for &(start, end) in &windows {
                    for keys in [&units.keys, &metrics.keys] {
                        if keys.is_empty() {
                            continue;
                        }
                        let range = (bound(keys, start), bound(keys, end));
                        let decoded = Decoded::<()> {
                            keys: keys.clone(),
                            entries: Vec::new(),
                            spans: Vec::new(),
                            payload: Vec::new(),
                            times: Vec::new(),
                        };
                        let indexed: Vec<RecordKey> =
                            decoded.indexes_in(range).map(|index| keys[index]).collect();
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
        for round in 0..20u8 {
            let records: Vec<(i64, u8, u8)> = (0..40)
                .map(|index| (index * 300, (index as u8 + round) % 6, round % 12))
                .collect();
            let windows = [(0, 12_000, 0)];
            reads_the_same(&records, &windows).unwrap();
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
        let both = loaded_files(&[("a", &early), ("b", &late)], hot);
        let only_late = loaded_files(&[("b", &late)], hot);
        // `a.metrics` and `a.units` are the first two files in path order.
        let last_of_a = both.catalog().file_ordinals[1];
        let sealed = &station(&both).sealed;
        let kept = sealed
            .without(&|order| (order >> 32) as u32 <= last_of_a, &|lowest, _| {
                lowest <= last_of_a
            })
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
}
