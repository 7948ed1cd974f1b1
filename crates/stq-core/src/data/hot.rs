//! The hot tier of a station: its records within the hot window (`--hot`) and any
//! appended since the station was last sealed, in B-tree maps ordered by time, an
//! entry a record, their stored form ([`crate::data::stored`]) in an arena and a
//! table of pieces; in two layers, the settled records and those appended since,
//! read as one. A summary reads the settled layer's units a period at a time from
//! digests made when one that can take a period whole first asks
//! ([`LayerDigests`]), as it reads sealed blocks.

use std::collections::{btree_map, BTreeMap};
use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use itertools::{Either, Itertools as _};

use crate::data::codec;
use crate::data::digest::{shared_serials, write_unit_digest};
use crate::data::fault::FirstFault;
use crate::data::key::RecordKey;
use crate::data::sealed::{period_of, period_start};
use crate::data::stored::{Pieces, RecordJson, StoredRecord};
use crate::data::symbols::Symbol;
use crate::data::tier::{tree_bytes, KeyRange, MetricEntry, Tier, UnitEntry};
use crate::data::tuning::TUNING;
use crate::domain::record::Direction;
use crate::domain::time::Timestamp;

/// The trees of one layer of a station.
///
/// Each kind is held in time order, and once more ordered by the field its most
/// selective filter names (serial number, metric name) and then by time, so that a
/// filtered query reads one exact range instead of the station's whole window.
#[derive(Clone, Debug, Default)]
pub(crate) struct Trees {
    pub(crate) units: BTreeMap<RecordKey, UnitEntry>,
    pub(crate) units_by_serial: BTreeMap<(Symbol, RecordKey), UnitEntry>,
    pub(crate) metrics: BTreeMap<RecordKey, MetricEntry>,
    pub(crate) metrics_by_name: BTreeMap<(Symbol, RecordKey), StoredRecord>,
}

impl Trees {
    /// Trees of records in any order.
    fn of(units: Vec<(RecordKey, UnitEntry)>, metrics: Vec<(RecordKey, MetricEntry)>) -> Trees {
        // Collecting sorts, then bulk-builds densely packed nodes.
        let units_by_serial = units
            .iter()
            .map(|(key, entry)| ((entry.unit_serial, *key), *entry))
            .collect();
        let metrics_by_name = metrics
            .iter()
            .map(|(key, entry)| ((entry.name, *key), entry.bytes))
            .collect();
        Trees {
            units: units.into_iter().collect(),
            units_by_serial,
            metrics: metrics.into_iter().collect(),
            metrics_by_name,
        }
    }

    fn insert(&mut self, units: &[(RecordKey, UnitEntry)], metrics: &[(RecordKey, MetricEntry)]) {
        for (key, entry) in units {
            self.units.insert(*key, *entry);
            self.units_by_serial
                .insert((entry.unit_serial, *key), *entry);
        }
        for (key, entry) in metrics {
            self.metrics.insert(*key, *entry);
            self.metrics_by_name.insert((entry.name, *key), entry.bytes);
        }
    }

    pub(crate) fn record_count(&self) -> usize {
        self.units.len() + self.metrics.len()
    }
}

/// A layer of a station: records' stored form in an arena and a table of pieces,
/// and their trees. Cloning one shares all of it.
///
/// Its trees' `Arc` is its identity: a layer is only ever shared whole (cloned) or
/// made anew with trees of its own, never made around another's trees, so two
/// layers with the same trees are the same layer. The store keeps a layer's file
/// while the generations it writes share that layer ([`crate::data::store`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct Layer {
    pub(crate) arena: Bytes,
    pub(crate) pieces: Pieces,
    pub(crate) trees: Arc<Trees>,
    /// Where its records' starts count from: the station's entries address both
    /// layers as one arena, the recent one after the settled one.
    pub(crate) offset: u32,
    /// The unit digests of its periods, made when a summary first asks for them
    /// (of the settled layer only, which every generation that keeps it shares).
    digests: Arc<OnceLock<LayerDigests>>,
}

/// A layer's units digested a period at a time ([`crate::data::digest`]), as a
/// sealed block's are, so that a summary over the hot day need not join its units
/// one by one.
#[derive(Debug, Default)]
pub(crate) struct LayerDigests {
    /// Each period's unit digest.
    pub(crate) periods: BTreeMap<i64, Box<[u8]>>,
    /// The serials of its outputs and the periods they are in, each pair once, in
    /// order.
    pub(crate) outputs: Box<[(Symbol, i64)]>,
    /// The serials of outputs in more than one of its periods, and those periods,
    /// each in order.
    pub(crate) shared: Box<[Symbol]>,
    pub(crate) shared_periods: Box<[i64]>,
}

impl LayerDigests {
    fn of(trees: &Trees) -> LayerDigests {
        let mut digests = LayerDigests::default();
        let mut outputs: Vec<(Symbol, i64)> = Vec::new();
        let units: Vec<(RecordKey, UnitEntry)> = trees
            .units
            .iter()
            .map(|(key, entry)| (*key, *entry))
            .collect();
        for records in
            units.chunk_by(|left, right| period_of(left.0.instant) == period_of(right.0.instant))
        {
            let period = period_of(records[0].0.instant);
            let mut bytes = Vec::new();
            write_unit_digest(period_start(period), records, &mut bytes);
            digests.periods.insert(period, bytes.into());
            let outputs_of = records
                .iter()
                .filter(|(_, entry)| entry.direction == Direction::Output)
                .filter(|(_, entry)| entry.unit_serial != Symbol::EMPTY);
            outputs.extend(outputs_of.map(|(_, entry)| (entry.unit_serial, period)));
        }
        let (shared, shared_periods) = shared_serials(&mut outputs);
        digests.outputs = outputs.into();
        digests.shared = shared.into();
        digests.shared_periods = shared_periods.into();
        digests
    }

    fn heap_bytes(&self) -> u64 {
        let digests: usize = self.periods.values().map(|bytes| bytes.len()).sum();
        let serials = self.outputs.len() * size_of::<(Symbol, i64)>()
            + self.shared.len() * size_of::<Symbol>()
            + self.shared_periods.len() * size_of::<i64>();
        (digests + serials) as u64 + tree_bytes(&self.periods)
    }
}

impl Layer {
    /// A layer of no records after `settled`: what a station's recent layer is
    /// until a reload appends to it.
    pub(crate) fn empty_after(settled: &Layer) -> Layer {
        Layer {
            offset: settled.arena.len() as u32,
            ..Layer::default()
        }
    }

    /// Whether it holds nothing: no record, no arena, no piece.
    pub(crate) fn is_empty(&self) -> bool {
        let trees = &self.trees;
        trees.units.is_empty()
            && trees.metrics.is_empty()
            && self.arena.is_empty()
            && self.pieces.as_bytes().is_empty()
    }

    /// A record of this layer as its own arena addresses it.
    pub(crate) fn local(&self, record: StoredRecord) -> StoredRecord {
        StoredRecord {
            start: record.start - self.offset,
            ..record
        }
    }
}

/// The hot tier in two layers: the settled one, shared with every generation that
/// kept the station's hot records, and the recent one, the records appended by
/// reloads since (small: a reload copies it and adds to it, and folds it into a new
/// settled layer once it has grown). Every read merges both.
#[derive(Clone, Debug, Default)]
pub(crate) struct Hot {
    pub(crate) settled: Layer,
    pub(crate) recent: Layer,
}

impl Hot {
    /// A tier of records in any order, in one layer.
    pub(crate) fn new(
        arena: Box<[u8]>,
        pieces: Pieces,
        units: Vec<(RecordKey, UnitEntry)>,
        metrics: Vec<(RecordKey, MetricEntry)>,
    ) -> Hot {
        let offset = arena.len() as u32;
        Hot {
            settled: Layer {
                arena: Bytes::from(arena),
                pieces,
                trees: Arc::new(Trees::of(units, metrics)),
                offset: 0,
                digests: Arc::default(),
            },
            recent: Layer {
                offset,
                ..Layer::default()
            },
        }
    }

    /// This tier with records appended in its recent layer, whose arena and pieces
    /// are now `arena` and `pieces`: they hold the recent layer's records as they
    /// were (so its stored records stay valid) and the new records' after them,
    /// which `units` and `metrics` index. The settled layer is shared; the recent
    /// trees are copied with the new entries added.
    pub(crate) fn extended(
        &self,
        arena: Box<[u8]>,
        pieces: Pieces,
        units: &[(RecordKey, UnitEntry)],
        metrics: &[(RecordKey, MetricEntry)],
    ) -> Hot {
        let mut trees = Trees::clone(&self.recent.trees);
        trees.insert(units, metrics);
        Hot {
            settled: self.settled.clone(),
            recent: Layer {
                arena: Bytes::from(arena),
                pieces,
                trees: Arc::new(trees),
                offset: self.recent.offset,
                digests: Arc::default(),
            },
        }
    }

    /// Whether `appended` more records would grow the recent layer past its share.
    pub(crate) fn folds_with(&self, appended: usize) -> bool {
        (self.recent.trees.record_count() + appended) * TUNING.recent_share
            > self.settled.trees.record_count()
    }

    /// The settled layer's unit digests, made now if not yet.
    pub(crate) fn settled_digests(&self) -> &LayerDigests {
        (self.settled.digests).get_or_init(|| LayerDigests::of(&self.settled.trees))
    }

    /// Whether the settled layer's unit digests were made.
    #[cfg(test)]
    pub(crate) fn settled_digested(&self) -> bool {
        self.settled.digests.get().is_some()
    }

    /// The keys of the settled layer's first and last unit with instants from
    /// `from` to before `to`, if it has any.
    pub(crate) fn settled_units_span(
        &self,
        from: Timestamp,
        to: Timestamp,
    ) -> Option<(RecordKey, RecordKey)> {
        let key = |instant| RecordKey {
            instant,
            load_order: 0,
        };
        let mut units = self.settled.trees.units.range(key(from)..key(to));
        let first = *units.next()?.0;
        let last = units.next_back().map_or(first, |(key, _)| *key);
        Some((first, last))
    }

    /// The recent layer's units with keys in `range`.
    pub(crate) fn recent_units_in(
        &self,
        range: KeyRange,
    ) -> impl Iterator<Item = (RecordKey, UnitEntry)> + '_ {
        let recent = &self.recent.trees.units;
        let units = match recent.is_empty() {
            true => None,
            false => Some(recent.range(range)),
        };
        units
            .into_iter()
            .flatten()
            .map(|(key, entry)| (*key, *entry))
    }

    /// Both layers, the settled one first.
    pub(crate) fn layers(&self) -> [&Layer; 2] {
        [&self.settled, &self.recent]
    }

    /// The layer that holds `record`.
    fn layer_of(&self, record: StoredRecord) -> &Layer {
        match record.start >= self.recent.offset {
            true => &self.recent,
            false => &self.settled,
        }
    }

    /// A record's response JSON, as the parts it is sent in.
    pub(crate) fn json(&self, record: StoredRecord) -> RecordJson<'_> {
        let layer = self.layer_of(record);
        RecordJson::new(&layer.arena, &layer.pieces, layer.local(record))
    }

    /// Hints the CPU to load the fields [`Hot::json`] reads.
    pub(crate) fn prefetch_locations(&self) {
        crate::data::stored::prefetch_value(&self.settled.arena);
        crate::data::stored::prefetch_value(&self.settled.pieces);
    }
}

impl Hot {
    /// The metrics named `name` with keys in `range`: their keys and where their
    /// JSON is, from the tier's trees by name.
    pub(crate) fn metrics_of_name(
        &self,
        name: Symbol,
        range: KeyRange,
    ) -> impl Iterator<Item = (RecordKey, StoredRecord)> + '_ {
        let range = by_symbol(name, range);
        merged(
            self.settled.trees.metrics_by_name.range(range),
            &self.recent.trees.metrics_by_name,
            move |recent| recent.range(range),
        )
        .map(|((_, key), bytes)| (*key, *bytes))
    }
}

/// The reads [`Tier`] names, which cannot fail: the records are in memory.
impl Hot {
    /// The units with keys in `range`.
    pub(crate) fn units_in(
        &self,
        range: KeyRange,
    ) -> impl Iterator<Item = (RecordKey, UnitEntry)> + '_ {
        merged(
            self.settled.trees.units.range(range),
            &self.recent.trees.units,
            move |recent| recent.range(range),
        )
        .map(|(key, entry)| (*key, *entry))
    }

    /// The units of serial number `serial` with keys in `range`.
    pub(crate) fn units_of_serial(
        &self,
        serial: Symbol,
        range: KeyRange,
    ) -> impl Iterator<Item = (RecordKey, UnitEntry)> + '_ {
        let range = by_symbol(serial, range);
        merged(
            self.settled.trees.units_by_serial.range(range),
            &self.recent.trees.units_by_serial,
            move |recent| recent.range(range),
        )
        .map(|((_, key), entry)| (*key, *entry))
    }

    /// The metrics with keys in `range`.
    pub(crate) fn metrics_in(
        &self,
        range: KeyRange,
    ) -> impl Iterator<Item = (RecordKey, MetricEntry)> + '_ {
        merged(
            self.settled.trees.metrics.range(range),
            &self.recent.trees.metrics,
            move |recent| recent.range(range),
        )
        .map(|(key, entry)| (*key, *entry))
    }
}

impl Tier for Hot {
    fn units_in<'a>(
        &'a self,
        range: KeyRange,
        _: &'a FirstFault,
    ) -> impl Iterator<Item = (RecordKey, UnitEntry)> + 'a {
        Hot::units_in(self, range)
    }

    fn units_of_serial<'a>(
        &'a self,
        serial: Symbol,
        range: KeyRange,
        _: &'a FirstFault,
    ) -> impl Iterator<Item = (RecordKey, UnitEntry)> + 'a {
        Hot::units_of_serial(self, serial, range)
    }

    fn metrics_in<'a>(
        &'a self,
        range: KeyRange,
        _: &'a FirstFault,
    ) -> impl Iterator<Item = (RecordKey, MetricEntry)> + 'a {
        Hot::metrics_in(self, range)
    }

    fn first_and_last(&self) -> Option<((RecordKey, StoredRecord), (RecordKey, StoredRecord))> {
        let trees = [&*self.settled.trees, &*self.recent.trees];
        let firsts = trees.iter().flat_map(|trees| {
            let unit = (trees.units.first_key_value()).map(|(key, entry)| (*key, entry.bytes));
            let metric = (trees.metrics.first_key_value()).map(|(key, entry)| (*key, entry.bytes));
            [unit, metric]
        });
        let lasts = trees.iter().flat_map(|trees| {
            let unit = (trees.units.last_key_value()).map(|(key, entry)| (*key, entry.bytes));
            let metric = (trees.metrics.last_key_value()).map(|(key, entry)| (*key, entry.bytes));
            [unit, metric]
        });
        let first = firsts.flatten().min_by_key(|(key, _)| *key)?;
        let last = lasts.flatten().max_by_key(|(key, _)| *key)?;
        Some((first, last))
    }

    fn unit_count(&self) -> usize {
        self.settled.trees.units.len() + self.recent.trees.units.len()
    }

    fn metric_count(&self) -> usize {
        self.settled.trees.metrics.len() + self.recent.trees.metrics.len()
    }

    fn memory(&self, add: &mut dyn FnMut(&'static str, u64)) {
        for layer in self.layers() {
            let trees = &layer.trees;
            add("records' stored form (arenas)", layer.arena.len() as u64);
            add("pieces of records", layer.pieces.heap_bytes() as u64);
            add("unit tree by time", tree_bytes(&trees.units));
            add("unit tree by serial", tree_bytes(&trees.units_by_serial));
            add("metric tree by time", tree_bytes(&trees.metrics));
            add("metric tree by name", tree_bytes(&trees.metrics_by_name));
            if let Some(digests) = layer.digests.get() {
                add("hot unit digests", digests.heap_bytes());
            }
        }
    }
}

/// The hot tier in a store: each layer in a file of its own, so that an
/// append, which makes a new recent layer and shares the settled one, writes only
/// the small recent one. A layer is its arena and pieces as they are, its offset,
/// and its records' keys and entries as columns; the trees are built again when it
/// is read back (collecting sorted entries), and the digests made again when a
/// summary first asks.
impl Layer {
    /// Appends this layer.
    pub(crate) fn write_to(&self, out: &mut Vec<u8>) {
        codec::bytes(out, &self.arena);
        codec::bytes(out, self.pieces.as_bytes());
        codec::number(out, u64::from(self.offset));
        let trees = &self.trees;
        write_keys(out, trees.units.keys());
        for entry in trees.units.values() {
            write_stored(out, entry.bytes);
            for symbol in [
                entry.unit_type,
                entry.unit_serial,
                entry.slot,
                entry.mode,
                entry.result,
            ] {
                codec::number(out, u64::from(symbol.0));
            }
            out.push(entry.direction as u8);
        }
        write_keys(out, trees.metrics.keys());
        for entry in trees.metrics.values() {
            write_stored(out, entry.bytes);
            for symbol in [entry.name, entry.slot, entry.unit_serial, entry.unit] {
                codec::number(out, u64::from(symbol.0));
            }
            for number in [entry.value, entry.limit_lower, entry.limit_upper] {
                out.extend_from_slice(&number.to_bits().to_le_bytes());
            }
        }
    }

    /// A layer as [`Layer::write_to`] wrote it; every record's stored form is
    /// checked to lie in its arena.
    pub(crate) fn read_from(decoder: &mut codec::Decoder<'_>) -> Result<Layer, codec::Corrupt> {
        let arena = Bytes::copy_from_slice(decoder.bytes()?);
        let pieces = Pieces::from_bytes(decoder.bytes()?);
        let offset = decoder.u32()?;
        let within = |bytes: StoredRecord| {
            let start = u64::from(bytes.start);
            match start >= u64::from(offset) && start - u64::from(offset) < arena.len() as u64 {
                true => Ok(bytes),
                false => Err(codec::Corrupt("a hot record outside its arena")),
            }
        };
        let keys = read_keys(decoder)?;
        let mut units = Vec::with_capacity(keys.len());
        for key in keys {
            let bytes = within(read_stored(decoder)?)?;
            let [unit_type, unit_serial, slot, mode, result] = [
                symbol(decoder)?,
                symbol(decoder)?,
                symbol(decoder)?,
                symbol(decoder)?,
                symbol(decoder)?,
            ];
            let direction = match decoder.take(1)?[0] {
                0 => Direction::Input,
                _ => Direction::Output,
            };
            let entry = UnitEntry {
                bytes,
                unit_type,
                unit_serial,
                direction,
                slot,
                mode,
                result,
            };
            units.push((key, entry));
        }
        let keys = read_keys(decoder)?;
        let mut metrics = Vec::with_capacity(keys.len());
        for key in keys {
            let bytes = within(read_stored(decoder)?)?;
            let [name, slot, unit_serial, unit] = [
                symbol(decoder)?,
                symbol(decoder)?,
                symbol(decoder)?,
                symbol(decoder)?,
            ];
            let [value, limit_lower, limit_upper] = [
                f64::from_bits(decoder.u64_le()?),
                f64::from_bits(decoder.u64_le()?),
                f64::from_bits(decoder.u64_le()?),
            ];
            let entry = MetricEntry {
                bytes,
                name,
                slot,
                unit_serial,
                unit,
                value,
                limit_lower,
                limit_upper,
            };
            metrics.push((key, entry));
        }
        Ok(Layer {
            arena,
            pieces,
            trees: Arc::new(Trees::of(units, metrics)),
            offset,
            digests: Arc::default(),
        })
    }
}

impl Hot {
    /// A tier of the layers [`Layer::read_from`] read, if they fit together as every
    /// tier's do: the settled layer's arena first, the recent one's right after it.
    pub(crate) fn of_layers(settled: Layer, recent: Layer) -> Result<Hot, codec::Corrupt> {
        match settled.offset == 0 && recent.offset as usize == settled.arena.len() {
            true => Ok(Hot { settled, recent }),
            false => Err(codec::Corrupt("a hot tier's layers do not fit together")),
        }
    }
}

/// Keys in order: their count, then each one's seconds (as a difference from the
/// one before), nanoseconds and load order.
fn write_keys<'a>(out: &mut Vec<u8>, keys: impl ExactSizeIterator<Item = &'a RecordKey>) {
    codec::number(out, keys.len() as u64);
    let mut seconds = 0i64;
    for key in keys {
        let (instant, load_order) = (key.instant, key.load_order);
        codec::signed(out, instant.seconds.wrapping_sub(seconds));
        seconds = instant.seconds;
        codec::number(out, u64::from(instant.nanos));
        codec::number(out, load_order);
    }
}

fn read_keys(decoder: &mut codec::Decoder<'_>) -> Result<Vec<RecordKey>, codec::Corrupt> {
    let count = decoder.count(3)?;
    let mut keys = Vec::with_capacity(count);
    let mut seconds = 0i64;
    for _ in 0..count {
        seconds = seconds.wrapping_add(decoder.signed()?);
        let nanos = decoder.u32()?;
        if nanos >= 1_000_000_000 {
            return Err(codec::Corrupt("nanoseconds"));
        }
        keys.push(RecordKey {
            instant: Timestamp { seconds, nanos },
            load_order: decoder.number()?,
        });
    }
    Ok(keys)
}

fn symbol(decoder: &mut codec::Decoder<'_>) -> Result<Symbol, codec::Corrupt> {
    decoder.u32().map(Symbol)
}

fn write_stored(out: &mut Vec<u8>, bytes: StoredRecord) {
    codec::number(out, u64::from(bytes.start));
    codec::number(out, u64::from(bytes.length));
}

fn read_stored(decoder: &mut codec::Decoder<'_>) -> Result<StoredRecord, codec::Corrupt> {
    Ok(StoredRecord {
        start: decoder.u32()?,
        length: decoder.u32()?,
    })
}

/// A range of a tree ordered by a symbol and then by key.
type SymbolRange = (Bound<(Symbol, RecordKey)>, Bound<(Symbol, RecordKey)>);

/// The keys of a tree ordered by a symbol and then by key that fall in `range`
/// for `symbol`.
fn by_symbol(symbol: Symbol, (start, end): KeyRange) -> SymbolRange {
    let lowest = RecordKey {
        instant: Timestamp::MIN,
        load_order: 0,
    };
    let highest = RecordKey {
        instant: Timestamp::MAX,
        load_order: u64::MAX,
    };
    let start = match start {
        Included(key) => Included((symbol, key)),
        Excluded(key) => Excluded((symbol, key)),
        Unbounded => Included((symbol, lowest)),
    };
    let end = match end {
        Included(key) => Included((symbol, key)),
        Excluded(key) => Excluded((symbol, key)),
        Unbounded => Included((symbol, highest)),
    };
    (start, end)
}

/// The entries of a settled range and of the same range of a recent tree, merged
/// by key (a key is in one layer only); the settled range alone when the recent
/// tree is empty, as it is for every station of a snapshot at rest.
fn merged<'a, K: Ord + 'a, V: 'a>(
    settled: btree_map::Range<'a, K, V>,
    recent: &'a BTreeMap<K, V>,
    range: impl FnOnce(&'a BTreeMap<K, V>) -> btree_map::Range<'a, K, V>,
) -> impl Iterator<Item = (&'a K, &'a V)> {
    match recent.is_empty() {
        true => Either::Left(settled),
        false => Either::Right(settled.merge_by(range(recent), |left, right| left.0 < right.0)),
    }
}
