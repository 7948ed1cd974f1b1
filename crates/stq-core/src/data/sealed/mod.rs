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
//! shared by its threads and generations, rendered for reading ([`rendered`]:
//! each record's JSON whole, a time index, and an index of each serial's or
//! name's records), so a read goes to a window's records, or a filter's, not
//! through its four hours.
//!
//! A block also keeps what lets a read skip it without decompressing it: how many
//! records of each kind it holds, which files they came from, and a 256-bit
//! filter of its serial numbers and of its metric names.
//!
//! This module holds the tier itself: its blocks, sealing more records into it
//! and dropping some. The rest, a module each: [`encode`] (records into a block's
//! bytes) and [`decode`] (a block's bytes back into records), with [`columns`]
//! (what each kind's entries write and read), [`times`] (how a record's time
//! text is kept) and [`payload`] (the numbers it is all written in); [`read`]
//! (what queries read: blocks by key range, rendered ([`rendered`]) through
//! [`cache`]); and
//! [`store`] (the tier in a store file), with [`body`] (where a block's bytes
//! are: in memory, or in that file, read when a query needs them) and
//! [`headers`] (where the blocks' headers are: in a map, or rows of that file,
//! read where they lie).

use std::collections::BTreeMap;
use std::sync::Arc;

use foldhash::{HashMap, HashMapExt as _};
use itertools::Itertools as _;
use xxhash_rust::xxh3::xxh3_64;

use crate::data::digest::{self, UnitDigest};
use crate::data::fault::{FirstFault, StorageFault};
use crate::data::key::RecordKey;
use crate::data::stored::{Piece, StoredRecord};
use crate::data::symbols::Symbol;
use crate::data::tier::{KeyRange, MetricEntry, Tier, UnitEntry};
use crate::data::tuning::TUNING;
use crate::domain::record::Kind;
use crate::domain::time::Timestamp;
use body::{BlockBody, Body, IndexPart, IndexPartAt};
use columns::Sealable;
use encode::encode;
use headers::{Blocks, Rows};

pub(crate) mod body;
pub(crate) mod cache;
mod columns;
mod decode;
mod encode;
mod headers;
mod payload;
mod period;
mod read;
mod rendered;
mod store;
#[cfg(test)]
mod tests;
mod times;

pub(crate) use body::{any_remote, fresh_id, prefetch, store_reads, Slice, StoreFile};
use cache::BlockCache;
pub(crate) use period::PeriodUnits;
pub(crate) use read::{JsonMemo, MetricBlock, UnitBlock};
pub(crate) use store::{index_region, Layout, Region};

/// Where the store's files are fetched from when its directory does not hold them
/// (an `s3://` store's bucket): a start from a copy that holds only the
/// sealed files' indexes reads their blocks by range until the whole file is in
/// the copy (`sealed`). The service supplies it, so that this crate stays free of
/// the network.
pub trait Remote: Send + Sync + std::fmt::Debug {
    /// The bytes of the file `name` in `range`.
    fn read(&self, name: &str, range: std::ops::Range<u64>) -> std::io::Result<Vec<u8>>;
}

/// Marks a [`StoredRecord`] that locates a sealed record: the rest of `start` is
/// its block's period counted from the tier's first, and `length` its kind (top bit)
/// and its index in the block. Hot arenas stay below 2 GiB, so no hot record's
/// start has this bit.
pub(crate) const SEALED: u32 = 1 << 31;

/// The locator of record `index` of kind `E` of the block whose locators start
/// `block` (`SEALED` and its number).
fn locator<E: Sealable>(block: u32, index: u32) -> StoredRecord {
    StoredRecord {
        start: block,
        length: E::KIND << 31 | index,
    }
}

/// Whether `record` locates a sealed record rather than a hot one's stored form.
pub(crate) fn is_sealed(record: StoredRecord) -> bool {
    record.start & SEALED != 0
}

/// A block's period of time ([`Tuning::period_seconds`](crate::data::tuning::Tuning::period_seconds)).
const PERIOD_SECONDS: i64 = TUNING.period_seconds;

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

/// The pieces more than one block uses, each held once; only ever added to, so
/// that a block sealed earlier still finds its pieces by their indexes.
#[derive(Debug, Default)]
struct SharedPieces {
    bytes: Vec<u8>,
    pieces: Vec<Piece>,
}

impl SharedPieces {
    /// What it holds on the heap (what a cache entry of it weighs).
    fn heap_bytes(&self) -> u64 {
        (self.bytes.capacity() + self.pieces.capacity() * size_of::<Piece>()) as u64
    }

    fn get(&self, index: usize) -> &[u8] {
        let piece = self.pieces[index];
        &self.bytes[piece.start as usize..(piece.start + piece.length) as usize]
    }
}

impl SharedPieces {
    /// Each piece's index, by its bytes.
    fn known(&self) -> HashMap<&[u8], usize> {
        (0..self.pieces.len())
            .map(|index| (self.get(index), index))
            .collect()
    }
}

/// One station's sealed records of a period, of both kinds, compressed.
#[derive(Clone, Debug)]
struct Block {
    /// The zstd frames of its units and of its metrics, then its unit digest and
    /// its metric digest ([`crate::data::digest`]), one after the other: in memory
    /// or in a store file ([`body`]).
    body: BlockBody,
    /// Where the metrics' frame starts.
    split: u32,
    /// Where the unit digest starts, the metric digest, and where it ends.
    unit_digest: u32,
    metric_digest: u32,
    length: u32,
    /// The XXH3-64 of each [`Part`]'s bytes: checked when a part is read from a
    /// file, and what a block's fingerprint is made of
    /// ([`Sealed::hash_blocks`]).
    checks: [u64; 4],
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

/// A part of a block's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Units,
    Metrics,
    UnitDigest,
    MetricDigest,
}

impl Block {
    /// A block of `bytes`, in memory, whose parts start at `split`, `unit_digest`
    /// and `metric_digest`; its counts and filters are its caller's to set.
    fn resident(bytes: Vec<u8>, split: u32, unit_digest: u32, metric_digest: u32) -> Block {
        let length = bytes.len() as u32;
        let bounds = [0, split, unit_digest, metric_digest, length];
        let checks = [0, 1, 2, 3]
            .map(|part| xxh3_64(&bytes[bounds[part] as usize..bounds[part + 1] as usize]));
        Block {
            body: BlockBody::shared(Body::resident(bytes)),
            split,
            unit_digest,
            metric_digest,
            length,
            checks,
            units: 0,
            metrics: 0,
            serials: Filter::default(),
            names: Filter::default(),
            files: (u32::MAX, 0),
            shares: false,
        }
    }

    fn range(&self, part: Part) -> std::ops::Range<u32> {
        match part {
            Part::Units => 0..self.split,
            Part::Metrics => self.split..self.unit_digest,
            Part::UnitDigest => self.unit_digest..self.metric_digest,
            Part::MetricDigest => self.metric_digest..self.length,
        }
    }

    /// The bytes of `part`, from memory or its store file.
    fn read(&self, part: Part) -> Result<Slice, StorageFault> {
        self.body.read(self.range(part), self.checks[part as usize])
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

/// A tier's outputs' serials, each once, in order.
type SerialList = Box<[Symbol]>;

/// A station's sealed records. Cloning one shares its blocks.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sealed {
    blocks: Blocks,
    /// The pieces its blocks share: in memory, or in its store file ([`Sealed::shared`]).
    shared: Arc<IndexPart<SharedPieces>>,
    /// The period locators count from: the first block's.
    base: i64,
    unit_count: usize,
    metric_count: usize,
    /// Its first and last record of either kind, so that `/stations` decodes nothing.
    ends: Option<((RecordKey, StoredRecord), (RecordKey, StoredRecord))>,
    /// The serials of its outputs, each once, in order; and of those in more than
    /// one of its blocks (a unit retested hours later, say). A summary joins the
    /// attempts of these across blocks, and of the hot outputs' with serials in
    /// `serials`; it counts every other unit from its block's digest alone. The
    /// first list is read from the store file, as the shared pieces are, once the
    /// store holds the tier ([`Sealed::serials`]).
    serials: Arc<IndexPart<SerialList>>,
    shared_serials: Box<[Symbol]>,
    /// What names its blocks together ([`Sealed::identity`]).
    identity: u64,
    /// Its blocks as rows of the store file written of it, once the store has
    /// ([`Sealed::stored_in`]): what the tier sealed into next starts from, so
    /// that only blocks sealed since are headers in the heap.
    written: std::sync::OnceLock<Arc<Rows>>,
    /// The cache its blocks are read through: given to every tier that holds a
    /// block ([`Sealed::with`], [`Sealed::read_index`]), and none in an empty
    /// tier (`Sealed::default`), which has no block to read and whose parts are
    /// in memory.
    cache: Option<BlockCache>,
}

/// A block's records of one kind, decompressed: their keys, entries (whose
/// `bytes` locate them) and, when asked for, where their JSON's parts are.
#[derive(Debug)]
pub(crate) struct Decoded<E> {
    pub(crate) keys: Vec<RecordKey>,
    pub(crate) entries: Vec<E>,
    spans: Vec<[Span; 5]>,
    /// The tier's shared pieces it was read with, which its spans may point into.
    shared: Arc<SharedPieces>,
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

/// The records of one period to seal.
#[derive(Default)]
struct Group<'a> {
    units: Vec<Unsealed<'a, UnitEntry>>,
    metrics: Vec<Unsealed<'a, MetricEntry>>,
}

impl Sealed {
    /// The serials of outputs in more than one of its blocks, in order.
    pub(crate) fn shared_serials(&self) -> &[Symbol] {
        &self.shared_serials
    }

    /// The cache its blocks are read through, if it holds any block.
    pub(crate) fn cache(&self) -> Option<&BlockCache> {
        self.cache.as_ref()
    }

    /// The cache its blocks are read through: only a tier that holds a block,
    /// or a part in a store file, asks for it, and every such tier was given one.
    fn reading_cache(&self) -> &BlockCache {
        (self.cache.as_ref()).expect("a tier that holds blocks holds the cache")
    }

    /// A number that names its blocks together: a tier with other blocks (sealed
    /// into, without some, or read from another store file) has another, and a
    /// copy has the same. What a shard's units merged by period are cached by
    /// ([`period`]). An empty tier's is 0.
    pub(crate) fn identity(&self) -> u64 {
        self.identity
    }

    /// Whether its block headers are all rows of a store file ([`headers`]): not
    /// so for a tier sealed in memory, or read from a file of the format before.
    pub(crate) fn headers_in_rows(&self) -> bool {
        self.blocks.all_rows()
    }

    /// Whether its blocks are read from the store file at `path` (a store file
    /// of its station's sealed tier, as written or as a start read it).
    pub(crate) fn reads_file(&self, path: &std::path::Path) -> bool {
        let rows = self.blocks.rows_path();
        let written = self.written.get().map(|rows| rows.path());
        [rows, written]
            .into_iter()
            .flatten()
            .any(|file| file == path)
    }

    /// How many of its block headers are in the heap, not rows of a store file.
    #[cfg(test)]
    pub(crate) fn headers_in_heap(&self) -> usize {
        self.blocks.in_memory().count()
    }

    /// The periods it holds records of, in order, each with how many units it
    /// holds of it.
    pub(crate) fn periods(&self) -> impl Iterator<Item = (i64, u32)> + '_ {
        self.blocks.unit_counts()
    }

    /// The last period it holds records of.
    pub(crate) fn last_period(&self) -> Option<i64> {
        self.blocks.last_period()
    }

    /// Its blocks, to seal into or drop from: as rows of its store file, if the
    /// store has written it.
    fn blocks_to_change(&self) -> Blocks {
        match self.written.get() {
            Some(rows) => Blocks::of_rows(Arc::clone(rows)),
            None => self.blocks.clone(),
        }
    }

    /// This tier with `units` and `metrics` sealed too, in any order. A record in an
    /// period that is sealed already (one that came late) goes into that period's
    /// block, which is sealed again. A block to seal again that cannot be read is
    /// its store file's fault. Its blocks are read through `cache`.
    pub(crate) fn with(
        &self,
        cache: &BlockCache,
        units: Vec<Unsealed<'_, UnitEntry>>,
        metrics: Vec<Unsealed<'_, MetricEntry>>,
    ) -> Result<Sealed, StorageFault> {
        if units.is_empty() && metrics.is_empty() {
            return Ok(self.clone());
        }
        let mut periods: Vec<i64> = (units.iter().map(|record| period_of(record.key.instant)))
            .chain(metrics.iter().map(|record| period_of(record.key.instant)))
            .collect();
        periods.sort_unstable();
        periods.dedup();
        // Blocks sealed again: decompressed first, so that their records' parts
        // can be borrowed while every block is written.
        let mut again: Vec<(i64, Decoded<UnitEntry>, Decoded<MetricEntry>)> = Vec::new();
        for &period in &periods {
            if let Some(block) = self.blocks.get(period)? {
                let units = self.decode(period, &block, true)?;
                again.push((period, units, self.decode(period, &block, true)?));
            }
        }
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
        let shared = Arc::new(self.shared_with(&groups)?);
        let known = shared.known();
        let mut sealed = Sealed {
            blocks: self.blocks_to_change(),
            shared: IndexPart::resident(Arc::clone(&shared)),
            unit_count: self.unit_count + added_units,
            metric_count: self.metric_count + added_metrics,
            cache: Some(cache.clone()),
            ..Sealed::default()
        };
        for (period, mut group) in groups {
            group.units.sort_unstable_by_key(|record| record.key);
            group.metrics.sort_unstable_by_key(|record| record.key);
            sealed.blocks.insert(period, encode(period, &group, &known));
        }
        sealed.blocks.compact();
        sealed.settle()?;
        Ok(sealed)
    }

    /// This tier without the records `dropped` says go (by load order), or `None`
    /// when it loses none; only blocks with records of a file `touched` names (by
    /// the lowest and highest file ordinal of a block) are read.
    pub(crate) fn without(
        &self,
        dropped: &dyn Fn(u64) -> bool,
        touched: &dyn Fn(u32, u32) -> bool,
    ) -> Result<Option<Sealed>, StorageFault> {
        let mut decoded: Vec<(i64, Decoded<UnitEntry>, Decoded<MetricEntry>)> = Vec::new();
        for block in self.blocks.iter() {
            let (period, block) = block?;
            if touched(block.files.0, block.files.1) {
                let units = self.decode(period, &block, true)?;
                decoded.push((period, units, self.decode(period, &block, true)?));
            }
        }
        let loses = |keys: &[RecordKey]| keys.iter().any(|key| dropped(key.load_order));
        if !decoded
            .iter()
            .any(|(_, units, metrics)| loses(&units.keys) || loses(&metrics.keys))
        {
            return Ok(None);
        }
        let mut kept = Sealed {
            blocks: self.blocks_to_change(),
            shared: Arc::clone(&self.shared),
            cache: self.cache.clone(),
            ..Sealed::default()
        };
        let mut units = Vec::new();
        let mut metrics = Vec::new();
        for (period, old_units, old_metrics) in &decoded {
            kept.blocks.remove(*period);
            units.extend(
                (self.unsealed(old_units)).filter(|record| !dropped(record.key.load_order)),
            );
            metrics.extend(
                (self.unsealed(old_metrics)).filter(|record| !dropped(record.key.load_order)),
            );
        }
        // A tier of its own, whether or not any record of the blocks read stays.
        kept.count()?;
        kept.settle()?;
        Ok(Some(kept.with(self.reading_cache(), units, metrics)?))
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
    ) -> Result<(), StorageFault> {
        for block in self.blocks.iter() {
            let (period, block) = block?;
            if !touched(block.files.0, block.files.1) {
                continue;
            }
            let units: Decoded<UnitEntry> = self.decode(period, &block, true)?;
            (self.unsealed(&units))
                .filter(|record| wanted(record.key.load_order))
                .for_each(&mut *unit);
            let metrics: Decoded<MetricEntry> = self.decode(period, &block, true)?;
            (self.unsealed(&metrics))
                .filter(|record| wanted(record.key.load_order))
                .for_each(&mut *metric);
        }
        Ok(())
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
            Source::Shared => &decoded.shared.bytes[start..end],
        }
    }

    /// The shared pieces after `groups` are sealed: this tier's, and every piece
    /// that more than one period's block uses.
    fn shared_with(&self, groups: &BTreeMap<i64, Group<'_>>) -> Result<SharedPieces, StorageFault> {
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
        let current = self.shared()?;
        let mut shared = SharedPieces {
            bytes: current.bytes.clone(),
            pieces: current.pieces.clone(),
        };
        let known = current.known();
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
        Ok(shared)
    }

    /// Feeds `block` what names each block's bytes of `kind` in the periods from
    /// `from` to before `to`: the period, the digest of the pieces they share, and
    /// the length and XXH3-64 of the block's frame of `kind`, which change whenever
    /// its records do. No block is read for it. `block` is called with the block's
    /// period's start and those bytes.
    pub(crate) fn hash_blocks(
        &self,
        kind: Kind,
        from: Timestamp,
        to: Timestamp,
        block: &mut dyn FnMut(Timestamp, [&[u8]; 4]),
    ) -> Result<(), StorageFault> {
        let (first, end) = (period_of(from), period_of(to));
        if first >= end {
            return Ok(());
        }
        // The shared pieces once, then their digest for every block.
        let mut shared = xxhash_rust::xxh3::Xxh3::new();
        let pieces = self.shared()?;
        shared.update(&pieces.bytes);
        for piece in &pieces.pieces {
            shared.update(&piece.start.to_le_bytes());
            shared.update(&piece.length.to_le_bytes());
        }
        let shared = shared.digest128().to_le_bytes();
        let periods = (
            std::ops::Bound::Included(first),
            std::ops::Bound::Excluded(end),
        );
        for stored in self.blocks.range(periods) {
            let (period, stored) = stored?;
            let part = match kind {
                Kind::Units if stored.units > 0 => Part::Units,
                Kind::Metrics if stored.metrics > 0 => Part::Metrics,
                _ => continue,
            };
            let range = stored.range(part);
            block(
                period_start(period),
                [
                    &period.to_le_bytes(),
                    &shared,
                    &u64::from(range.end - range.start).to_le_bytes(),
                    &stored.checks[part as usize].to_le_bytes(),
                ],
            );
        }
        Ok(())
    }

    /// Finds its first and last record and its outputs' serials, sets the base
    /// period, and gives it a new identity.
    fn settle(&mut self) -> Result<(), StorageFault> {
        self.identity = match self.blocks.is_empty() {
            true => 0,
            false => fresh_id(),
        };
        self.base = self.blocks.first_period().unwrap_or(0);
        // Every block's digest read once: its outputs' serials, with its period.
        let mut outputs: Vec<(Symbol, i64)> = Vec::new();
        let mut buffer = UnitDigest::default();
        for block in self.blocks.iter() {
            let (period, block) = block?;
            let bytes = block.read(Part::UnitDigest)?;
            digest::unit_serials(period_start(period), &bytes, &mut buffer, &mut |serial| {
                outputs.push((serial, period));
            });
        }
        let (shared, sharing) = digest::shared_serials(&mut outputs);
        let periods: Vec<i64> = self
            .blocks
            .iter()
            .map_ok(|(period, _)| period)
            .try_collect()?;
        for period in periods {
            (self.blocks).set_shares(period, sharing.binary_search(&period).is_ok())?;
        }
        let mut serials: Vec<Symbol> = outputs.iter().map(|(serial, _)| *serial).collect();
        serials.dedup();
        self.serials = IndexPart::resident(Arc::new(serials.into()));
        self.shared_serials = shared.into();
        self.ends = None;
        let last = match self.blocks.last_period() {
            Some(period) => (self.blocks.get(period)?).map(|block| (period, block)),
            None => None,
        };
        let (Some((first_period, first)), Some((last_period, last))) =
            (self.blocks.iter().next().transpose()?, last)
        else {
            return Ok(());
        };
        let ends = |period: i64, block: &Block, last: bool| {
            let units: Decoded<UnitEntry> = self.decode(period, block, false)?;
            let metrics: Decoded<MetricEntry> = self.decode(period, block, false)?;
            let unit = units.keys.iter().zip(&units.entries);
            let metric = metrics.keys.iter().zip(&metrics.entries);
            let pick = |(key, bytes): (&RecordKey, StoredRecord)| (*key, bytes);
            let records = (unit.map(|(key, entry)| (key, entry.bytes)))
                .chain(metric.map(|(key, entry)| (key, entry.bytes)));
            Ok::<_, StorageFault>(match last {
                false => records.min_by_key(|(key, _)| **key).map(pick),
                true => records.max_by_key(|(key, _)| **key).map(pick),
            })
        };
        if let (Some(first), Some(last)) = (
            ends(first_period, &first, false)?,
            ends(last_period, &last, true)?,
        ) {
            self.ends = Some((first, last));
        }
        Ok(())
    }

    /// Counts its records from its blocks.
    fn count(&mut self) -> Result<(), StorageFault> {
        (self.unit_count, self.metric_count) = self.blocks.counts()?;
        Ok(())
    }
}

impl Tier for Sealed {
    fn units_in<'a>(
        &'a self,
        range: KeyRange,
        fault: &'a FirstFault,
    ) -> impl Iterator<Item = (RecordKey, UnitEntry)> + 'a {
        self.records_in(range, |block| block.units > 0, fault)
    }

    fn units_of_serial<'a>(
        &'a self,
        serial: Symbol,
        range: KeyRange,
        fault: &'a FirstFault,
    ) -> impl Iterator<Item = (RecordKey, UnitEntry)> + 'a {
        self.records_of(serial, range, fault)
    }

    fn metrics_in<'a>(
        &'a self,
        range: KeyRange,
        fault: &'a FirstFault,
    ) -> impl Iterator<Item = (RecordKey, MetricEntry)> + 'a {
        self.records_in(range, |block| block.metrics > 0, fault)
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
        // Only what is in memory: a stored block's bytes are its file's. An
        // `Arc<[u8]>` holds two counts before its bytes.
        let resident = || (self.blocks.in_memory()).filter(|block| block.body.is_resident());
        let blocks = resident()
            .map(|block| u64::from(block.unit_digest) + 16)
            .sum();
        add("sealed blocks (compressed)", blocks);
        add(
            "sealed unit digests",
            (resident())
                .map(|block| u64::from(block.metric_digest - block.unit_digest))
                .sum(),
        );
        add(
            "sealed metric digests",
            (resident())
                .map(|block| u64::from(block.length - block.metric_digest))
                .sum(),
        );
        add(
            "sealed block index",
            self.blocks.heap_bytes(size_of::<Body>() + 16),
        );
        let serials = match self.serials.place() {
            IndexPartAt::Resident(serials) => serials.len(),
            IndexPartAt::Stored(..) => 0,
        };
        add(
            "sealed serial index",
            ((serials + self.shared_serials.len()) * size_of::<Symbol>()) as u64,
        );
        if let IndexPartAt::Resident(shared) = self.shared.place() {
            add("sealed shared pieces", shared.heap_bytes());
        }
    }
}
