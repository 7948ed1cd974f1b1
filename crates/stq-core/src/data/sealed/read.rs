//! What queries read of a sealed tier: the blocks a key range needs, each
//! decoded through the block cache ([`super::cache`]) or a scan's
//! [`JsonMemo`], and the blocks a summary reads by their digests.

use std::borrow::Cow;
use std::cell::RefCell;
use std::mem::size_of;
use std::ops::{Bound, Range};
use std::sync::Arc;

use foldhash::HashMap;
use itertools::Itertools as _;

use super::body::{IndexPart, IndexPartAt, StoreFile};
use super::cache::{BlockCache, BlockKey};
use super::columns::Sealable;
use super::period::PeriodUnits;
use super::rendered::{Rendered, WholeJson};
use super::store::read_serials;
use super::{
    period_of, period_start, Block, Part, Sealed, SerialList, SharedPieces, Slice, SEALED,
};
use crate::data::codec::Corrupt;
use crate::data::fault::{FirstFault, StorageFault};
use crate::data::key::RecordKey;
use crate::data::stored::StoredRecord;
use crate::data::symbols::Symbol;
use crate::data::tier::{KeyRange, MetricEntry, UnitEntry};
use crate::domain::time::Timestamp;

/// What a tier's shared pieces and its serial list are known by in the cache,
/// beside its blocks' kinds (0 and 1) and parts (2 to 5).
const SHARED_PIECES: u32 = 6;
const SERIALS: u32 = 7;

/// What `part` holds: from memory, or through the block cache (known by its
/// body and `kind`, weighing `weight` of it) from its region of a store file, which
/// `read` reads.
fn through_cache<T: Send + Sync + 'static>(
    cache: Option<&BlockCache>,
    part: &IndexPart<T>,
    kind: u32,
    read: fn(&[u8]) -> Result<T, Corrupt>,
    weight: fn(&T) -> u64,
) -> Result<Arc<T>, StorageFault> {
    let (body, length, check) = match part.place() {
        IndexPartAt::Resident(value) => return Ok(value),
        IndexPartAt::Stored(body, length, check) => (body, length, check),
    };
    let cache = cache.expect("a tier with a part in a store file holds the cache");
    cache.cached((body.id(), kind, 0), || {
        let value = read(&body.read(0..length, check)?).unwrap_or_else(|corrupt| {
            panic!("a sealed tier's region passed its checksum but does not read: {corrupt}")
        });
        let bytes = weight(&value);
        Ok((value, bytes))
    })
}

impl Sealed {
    /// The block of a locator, and its period.
    fn block_of(&self, record: StoredRecord) -> Result<(i64, Cow<'_, Block>), StorageFault> {
        self.block_of_period(self.base + i64::from(record.start & !SEALED))
    }

    /// The block of `period`, which a locator named.
    fn block_of_period(&self, period: i64) -> Result<(i64, Cow<'_, Block>), StorageFault> {
        let block = (self.blocks.get(period)?).expect("a sealed record's locator names its block");
        Ok((period, block))
    }

    /// Appends the JSON of the sealed record `record` locates.
    pub(crate) fn write_json(
        &self,
        record: StoredRecord,
        out: &mut Vec<u8>,
    ) -> Result<(), StorageFault> {
        let (period, block) = self.block_of(record)?;
        let index = (record.length & !SEALED) as usize;
        match record.length >> 31 {
            0 => self.decoded::<UnitEntry>(period, &block)?.write(index, out),
            _ => (self.decoded::<MetricEntry>(period, &block)?).write(index, out),
        }
        Ok(())
    }

    /// The blocks that may hold records with keys in `range`, with their periods.
    fn blocks_in(
        &self,
        (start, end): KeyRange,
    ) -> impl Iterator<Item = Result<(i64, Cow<'_, Block>), StorageFault>> + '_ {
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
    }

    /// The records of kind `E` in `range` of the blocks `keep` keeps, up to the
    /// first block that cannot be read, whose fault `fault` keeps.
    pub(super) fn records_in<'a, E: Sealable>(
        &'a self,
        range: KeyRange,
        keep: impl Fn(&Block) -> bool + 'static,
        fault: &'a FirstFault,
    ) -> impl Iterator<Item = (RecordKey, E)> + 'a {
        (fault.until(self.blocks_in(range)))
            .filter(move |(_, block)| keep(block))
            .map_while(move |(period, block)| fault.ok(self.decoded(period, &block)))
            .flat_map(move |decoded: Arc<Rendered<E>>| {
                // A window's records are found through the block's time index,
                // not by reading its four hours.
                decoded
                    .indexes_in(range)
                    .map(move |index| (decoded.keys[index], decoded.entries[index]))
            })
    }

    /// The blocks that may hold records of kind `E` whose serial (units) or name
    /// (metrics) is `symbol` in `range`, rendered.
    fn blocks_of<'a, E: Sealable>(
        &'a self,
        symbol: Symbol,
        range: KeyRange,
        fault: &'a FirstFault,
    ) -> impl Iterator<Item = Arc<Rendered<E>>> + 'a {
        (self.blocks_holding::<E>(symbol, range, fault))
            .map_while(move |(period, block)| fault.ok(self.decoded(period, &block)))
    }

    /// The blocks in `range` whose filter of serials (units) or names (metrics)
    /// may hold `symbol`, with their periods, not yet decoded.
    fn blocks_holding<'a, E: Sealable>(
        &'a self,
        symbol: Symbol,
        range: KeyRange,
        fault: &'a FirstFault,
    ) -> impl Iterator<Item = (i64, Cow<'a, Block>)> + 'a {
        (fault.until(self.blocks_in(range))).filter(move |(_, block)| match E::KIND {
            0 => block.serials.may_hold(symbol),
            _ => block.names.may_hold(symbol),
        })
    }

    /// The records of kind `E` whose serial (units) or name (metrics) is `symbol`
    /// in `range`.
    pub(super) fn records_of<'a, E: Sealable>(
        &'a self,
        symbol: Symbol,
        range: KeyRange,
        fault: &'a FirstFault,
    ) -> impl Iterator<Item = (RecordKey, E)> + 'a {
        (self.blocks_of(symbol, range, fault)).flat_map(move |decoded: Arc<Rendered<E>>| {
            decoded.positions_of(symbol, range).map(move |position| {
                let index = decoded.by_symbol(position);
                (decoded.keys[index], decoded.entries[index])
            })
        })
    }

    /// The keys of the metric records named `name` in `range`, each located
    /// among `memo`'s blocks ([`JsonMemo::json`]): what a scan that writes their
    /// JSON reads. A block is taken into the memo when a read first reaches it, so
    /// that its records are not each looked up there again ([`Sealed::locate_json`])
    /// and a read of another name finds it there, not in the block cache.
    pub(crate) fn metrics_of_name_in_memo<'a>(
        &'a self,
        name: Symbol,
        range: KeyRange,
        memo: &'a RefCell<JsonMemo>,
        fault: &'a FirstFault,
    ) -> impl Iterator<Item = (RecordKey, StoredRecord)> + 'a {
        self.of_symbol_in_memo(
            name,
            range,
            memo,
            fault,
            |decoded: &Rendered<MetricEntry>, position, slot| {
                // Located where its JSON lies, its entry not read.
                let (key, located) = decoded.located_by_symbol(position);
                (key, JsonMemo::locator(slot, located.length & !SEALED))
            },
        )
    }

    /// The units of serial number `serial` in `range`, each with its `bytes`
    /// located among `memo`'s blocks, as [`Sealed::metrics_of_name_in_memo`]'s
    /// are (a hit's block was looked up again, and its header read
    /// again, to locate its JSON after the scan).
    pub(crate) fn units_of_serial_in_memo<'a>(
        &'a self,
        serial: Symbol,
        range: KeyRange,
        memo: &'a RefCell<JsonMemo>,
        fault: &'a FirstFault,
    ) -> impl Iterator<Item = (RecordKey, UnitEntry)> + 'a {
        self.of_symbol_in_memo(
            serial,
            range,
            memo,
            fault,
            |decoded: &Rendered<UnitEntry>, position, slot| {
                let index = decoded.by_symbol(position);
                let entry = decoded.entries[index];
                let located = JsonMemo::locator(slot, index as u32);
                (decoded.keys[index], entry.with_bytes(located))
            },
        )
    }

    /// What `pick` makes of each record of kind `E` whose serial (units) or name
    /// (metrics) is `symbol` in `range`, given its block, its position in the
    /// block's symbol index and the block's slot among `memo`'s blocks. A block
    /// is taken into the memo when a read first reaches it.
    fn of_symbol_in_memo<'a, E: Memoized, T>(
        &'a self,
        symbol: Symbol,
        range: KeyRange,
        memo: &'a RefCell<JsonMemo>,
        fault: &'a FirstFault,
        pick: impl Fn(&Rendered<E>, usize, u32) -> T + Copy + 'a,
    ) -> impl Iterator<Item = T> + 'a {
        (self.blocks_holding::<E>(symbol, range, fault))
            .map_while(move |(period, block)| {
                let key = self.cache_key::<E>(block.body.id());
                fault.ok((memo.borrow_mut()).typed_block(key, || self.decoded(period, &block)))
            })
            .flat_map(move |(slot, decoded)| {
                (decoded.positions_of(symbol, range))
                    .map(move |position| pick(&decoded, position, slot))
            })
    }
}

/// A sealed block that holds unit records, as a unit summary reads it: by its
/// digest when that will do, else record by record.
#[derive(Clone, Debug)]
pub(crate) struct UnitBlock<'a> {
    sealed: &'a Sealed,
    period: i64,
    block: Cow<'a, Block>,
}

impl<'a> UnitBlock<'a> {
    pub(crate) fn period_start(&self) -> Timestamp {
        period_start(self.period)
    }

    /// Its unit digest ([`crate::data::digest`]).
    pub(crate) fn digest(&self) -> Result<Slice, StorageFault> {
        self.sealed.digest(&self.block, Part::UnitDigest)
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
    pub(crate) fn records(
        &self,
    ) -> Result<impl Iterator<Item = (RecordKey, UnitEntry)> + 'a, StorageFault> {
        let decoded: Arc<Rendered<UnitEntry>> = self.sealed.decoded(self.period, &self.block)?;
        Ok((0..decoded.keys.len()).map(move |index| (decoded.keys[index], decoded.entries[index])))
    }
}

/// A sealed block that holds metric records, as a metric summary reads it: by
/// its digest when that will do, else record by record.
#[derive(Clone, Debug)]
pub(crate) struct MetricBlock<'a> {
    sealed: &'a Sealed,
    period: i64,
    block: Cow<'a, Block>,
}

impl<'a> MetricBlock<'a> {
    pub(crate) fn period(&self) -> i64 {
        self.period
    }

    /// Its metric digest ([`crate::data::digest`]).
    pub(crate) fn digest(&self) -> Result<Slice, StorageFault> {
        self.sealed.digest(&self.block, Part::MetricDigest)
    }

    /// Its metric records, in key order.
    pub(crate) fn records(
        &self,
    ) -> Result<impl Iterator<Item = (RecordKey, MetricEntry)> + 'a, StorageFault> {
        let decoded: Arc<Rendered<MetricEntry>> = self.sealed.decoded(self.period, &self.block)?;
        Ok((0..decoded.keys.len()).map(move |index| (decoded.keys[index], decoded.entries[index])))
    }
}

impl Sealed {
    /// The blocks that hold metric records and may hold some with keys in `range`,
    /// in time order.
    pub(crate) fn metric_blocks(
        &self,
        range: KeyRange,
    ) -> impl Iterator<Item = Result<MetricBlock<'_>, StorageFault>> {
        self.blocks_in(range)
            .filter_ok(|(_, block)| block.metrics > 0)
            .map_ok(|(period, block)| MetricBlock {
                sealed: self,
                period,
                block,
            })
    }

    /// The blocks that hold unit records and may hold some with keys in `range`, in
    /// time order.
    pub(crate) fn unit_blocks(
        &self,
        range: KeyRange,
    ) -> impl Iterator<Item = Result<UnitBlock<'_>, StorageFault>> {
        self.blocks_in(range)
            .filter_ok(|(_, block)| block.units > 0)
            .map_ok(|(period, block)| UnitBlock {
                sealed: self,
                period,
                block,
            })
    }
}

impl Sealed {
    /// Adds to `reads` what a read of `range` would fetch from a remote one
    /// request after another (its blocks, whole, and the tier's shared pieces and
    /// serial list), if its store file is remote still: for [`super::body::prefetch`]
    /// to fetch at once.
    pub(crate) fn ask_ahead(&self, range: KeyRange, reads: &mut Vec<(Arc<StoreFile>, Range<u64>)>) {
        let before = reads.len();
        // A row that fails its check is asked nothing of: the read that follows
        // finds its fault.
        for (_, block) in self.blocks_in(range).flatten() {
            block.body.ask_ahead(block.length, reads);
        }
        if reads.len() > before {
            let shared = match self.shared.place() {
                IndexPartAt::Stored(body, length, _) => Some((body, length)),
                IndexPartAt::Resident(_) => None,
            };
            let serials = match self.serials.place() {
                IndexPartAt::Stored(body, length, _) => Some((body, length)),
                IndexPartAt::Resident(_) => None,
            };
            for (body, length) in shared.into_iter().chain(serials) {
                body.ask_ahead(length, reads);
            }
        }
    }

    /// `block`'s records of kind `E` (of `period`), rendered for reading: from
    /// the block cache ([`cache`]), else decompressed and rendered now and
    /// kept there.
    fn decoded<E: Sealable>(
        &self,
        period: i64,
        block: &Block,
    ) -> Result<Arc<Rendered<E>>, StorageFault> {
        (self.reading_cache()).cached(self.cache_key::<E>(block.body.id()), || {
            let decoded = self.decode::<E>(period, block, true)?;
            let rendered = Rendered::new(self, decoded, period_start(period));
            let weight = rendered.heap_bytes();
            Ok((rendered, weight))
        })
    }

    /// Its shared pieces: from memory, or through the block cache from its
    /// store file.
    pub(super) fn shared(&self) -> Result<Arc<SharedPieces>, StorageFault> {
        through_cache(
            self.cache(),
            &self.shared,
            SHARED_PIECES,
            SharedPieces::read,
            |pieces| pieces.heap_bytes(),
        )
    }

    /// The serials of its outputs, in order: from memory, or through the block
    /// cache from its store file.
    pub(crate) fn serials(&self) -> Result<Arc<SerialList>, StorageFault> {
        through_cache(
            self.cache(),
            &self.serials,
            SERIALS,
            read_serials,
            |serials| (serials.len() * size_of::<Symbol>()) as u64,
        )
    }

    /// A digest of `block`: from memory, or through the block cache from its
    /// store file.
    fn digest(&self, block: &Block, part: Part) -> Result<Slice, StorageFault> {
        if block.body.is_resident() {
            return block.read(part);
        }
        let digest =
            (self.reading_cache()).cached((block.body.id(), 2 + part as u32, 0), || {
                let digest = block.read(part)?;
                let weight = digest.heap_bytes();
                Ok((digest, weight))
            })?;
        Ok(Slice::clone(&digest))
    }

    /// What names the records of kind `E` decoded of the block known by `id`, in
    /// the cache and in a [`JsonMemo`].
    fn cache_key<E: Sealable>(&self, id: u64) -> BlockKey {
        (id, E::KIND, self.base)
    }

    /// Where the JSON of the sealed record `record` locates is among `memo`'s
    /// blocks, which takes its block (from the block cache, or decoded now)
    /// unless an earlier record of the same scan took it.
    pub(crate) fn locate_json(
        &self,
        record: StoredRecord,
        memo: &mut JsonMemo,
    ) -> Result<StoredRecord, StorageFault> {
        let period = self.base + i64::from(record.start & !SEALED);
        let index = record.length & !SEALED;
        let slot = match record.length >> 31 {
            0 => memo.slot::<UnitEntry>(self, period)?,
            _ => memo.slot::<MetricEntry>(self, period)?,
        };
        Ok(JsonMemo::locator(slot, index))
    }
}

/// The blocks one scan's sealed hits are in, rendered ([`Rendered`]), so that
/// their answer writes each hit's JSON straight from its block: a scan's hits
/// interleave stations, and each would otherwise be a lookup in the shared
/// cache, its lock taken. Kept with the scan's answer until it is written.
#[derive(Default)]
pub(crate) struct JsonMemo {
    slots: HashMap<BlockKey, u32>,
    blocks: Vec<Arc<dyn WholeJson>>,
    /// The blocks reads by serial or name took ([`JsonMemo::typed_block`]),
    /// with their slots in `blocks`, by what the cache knows them by.
    unit_blocks: HashMap<BlockKey, (u32, Arc<Rendered<UnitEntry>>)>,
    metric_blocks: HashMap<BlockKey, (u32, Arc<Rendered<MetricEntry>>)>,
}

/// A kind whose blocks a [`JsonMemo`] keeps typed, for reads by serial (units)
/// or name (metrics).
trait Memoized: Sealable {
    fn blocks(memo: &mut JsonMemo) -> &mut HashMap<BlockKey, (u32, Arc<Rendered<Self>>)>;
}

impl Memoized for UnitEntry {
    fn blocks(memo: &mut JsonMemo) -> &mut HashMap<BlockKey, (u32, Arc<Rendered<Self>>)> {
        &mut memo.unit_blocks
    }
}

impl Memoized for MetricEntry {
    fn blocks(memo: &mut JsonMemo) -> &mut HashMap<BlockKey, (u32, Arc<Rendered<Self>>)> {
        &mut memo.metric_blocks
    }
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
    /// The slot of the records of kind `E` of `sealed`'s block of `period` among
    /// its blocks. A scan's hits are mostly in blocks an earlier hit took: those
    /// are found by the number the block is known by, its header not read.
    fn slot<E: Sealable>(&mut self, sealed: &Sealed, period: i64) -> Result<u32, StorageFault> {
        let id = (sealed.blocks.id_of(period)).expect("a sealed record's locator names its block");
        let key = sealed.cache_key::<E>(id);
        if let Some(slot) = self.slots.get(&key) {
            return Ok(*slot);
        }
        let (_, block) = sealed.block_of_period(period)?;
        let slot = self.blocks.len() as u32;
        self.blocks.push(sealed.decoded::<E>(period, &block)?);
        self.slots.insert(key, slot);
        Ok(slot)
    }

    /// The block of kind `E` the cache knows by `key` and its slot among its
    /// blocks: one an earlier read by serial or name took, else the one `read`
    /// gives, taken now (a block a filter let through for one symbol may hold
    /// another that the scan reads next).
    fn typed_block<E: Memoized>(
        &mut self,
        key: BlockKey,
        read: impl FnOnce() -> Result<Arc<Rendered<E>>, StorageFault>,
    ) -> Result<(u32, Arc<Rendered<E>>), StorageFault> {
        if let Some((slot, block)) = E::blocks(self).get(&key) {
            return Ok((*slot, Arc::clone(block)));
        }
        let block = read()?;
        let slot = self.blocks.len() as u32;
        self.blocks.push(Arc::clone(&block) as Arc<dyn WholeJson>);
        E::blocks(self).insert(key, (slot, Arc::clone(&block)));
        Ok((slot, block))
    }

    /// Keeps `block` among its blocks; its record `index` is then located by
    /// [`JsonMemo::locator`] of the slot this returns.
    pub(crate) fn hold(&mut self, block: Arc<PeriodUnits>) -> u32 {
        self.blocks.push(block);
        (self.blocks.len() - 1) as u32
    }

    /// What locates record `index` of the block in `slot` for [`JsonMemo::json`].
    pub(crate) fn locator(slot: u32, index: u32) -> StoredRecord {
        StoredRecord {
            start: SEALED | slot,
            length: index,
        }
    }

    /// The JSON of the record that `record` (made by [`Sealed::locate_json`] with
    /// this memo, or by [`JsonMemo::locator`]) locates.
    pub(crate) fn json(&self, record: StoredRecord) -> &[u8] {
        self.blocks[(record.start & !SEALED) as usize].json(record.length as usize)
    }

    /// Hints the CPU to load what [`JsonMemo::json`] of `record` reads first.
    pub(crate) fn prefetch(&self, record: StoredRecord) {
        if let Some(block) = self.blocks.get((record.start & !SEALED) as usize) {
            block.prefetch(record.length as usize);
        }
    }
}
