//! One station's records in two tiers, read as one: the hot tier
//! ([`crate::data::hot`]), B-tree maps with an entry a record, and the sealed tier
//! ([`crate::data::sealed`]), compressed blocks of four hours each. Every read
//! goes through the [`Tier`] both implement and merges them by key; no reader
//! knows which tier holds a record.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::{Bound, Range, RangeBounds};

use std::sync::{Arc, OnceLock};

use itertools::{Either, Itertools as _};
use xxhash_rust::xxh3::Xxh3;

use crate::data::digest::bounds;
use crate::data::fault::{FirstFault, StorageFault};
use crate::data::hot::Hot;
use crate::data::key::RecordKey;
use crate::data::sealed::{
    is_sealed, period_of, period_start, JsonMemo, MetricBlock, Sealed, UnitBlock,
};
use crate::data::stored::{prefetch_value, Pieces, RecordJson, StoredRecord};
use crate::data::symbols::Symbol;
use crate::data::tier::{key_range, KeyRange, Tier};
pub(crate) use crate::data::tier::{MetricEntry, UnitEntry};
use crate::domain::record::{Direction, Kind};
use crate::domain::time::{Timestamp, Window, DAY_SECONDS};

/// One station's records of both kinds, in its hot and sealed tiers. Cloning the
/// tiers shares them: a generation that keeps a station's records shares them.
#[derive(Debug, Default)]
pub(crate) struct StationData {
    pub(crate) hot: Hot,
    pub(crate) sealed: Arc<Sealed>,
    /// The serials of hot outputs that the sealed tier has outputs of too, in
    /// order: found when a summary first asks, which most stations' lives never do.
    crossing: OnceLock<Box<[Symbol]>>,
    /// The serials of the settled hot layer's outputs that the sealed tier or the
    /// recent layer has outputs of too, and the settled layer's periods that have
    /// them, each in order, found likewise.
    hot_crossing: OnceLock<Crossing>,
}

/// Serials, and the periods that have them, each in order.
type Crossing = (Box<[Symbol]>, Box<[i64]>);

impl StationData {
    /// A station of records in any order, all hot.
    #[cfg(test)]
    pub(crate) fn new(
        arena: Box<[u8]>,
        pieces: Pieces,
        units: Vec<(RecordKey, UnitEntry)>,
        metrics: Vec<(RecordKey, MetricEntry)>,
    ) -> StationData {
        StationData {
            hot: Hot::new(arena, pieces, units, metrics),
            sealed: Arc::default(),
            crossing: OnceLock::new(),
            hot_crossing: OnceLock::new(),
        }
    }

    /// A station of these tiers.
    pub(crate) fn of_tiers(hot: Hot, sealed: Arc<Sealed>) -> StationData {
        StationData {
            hot,
            sealed,
            crossing: OnceLock::new(),
            hot_crossing: OnceLock::new(),
        }
    }

    /// This station with records appended to its hot tier (see [`Hot::extended`]);
    /// its sealed tier is shared.
    pub(crate) fn extended(
        &self,
        arena: Box<[u8]>,
        pieces: Pieces,
        units: &[(RecordKey, UnitEntry)],
        metrics: &[(RecordKey, MetricEntry)],
    ) -> StationData {
        StationData {
            hot: self.hot.extended(arena, pieces, units, metrics),
            sealed: Arc::clone(&self.sealed),
            crossing: OnceLock::new(),
            hot_crossing: OnceLock::new(),
        }
    }

    /// Whether `appended` more records would grow the hot tier's recent layer past
    /// its share, so that the station is built again instead (and sealed).
    pub(crate) fn folds_with(&self, appended: usize) -> bool {
        self.hot.folds_with(appended)
    }

    /// A hot record's response JSON, as the parts it is sent in. A sealed record's
    /// is written by [`StationData::write_json`].
    pub(crate) fn json(&self, record: StoredRecord) -> RecordJson<'_> {
        debug_assert!(
            !is_sealed(record),
            "a sealed record is written, not borrowed"
        );
        self.hot.json(record)
    }

    /// Appends a record's response JSON, whichever tier holds it.
    pub(crate) fn write_json(
        &self,
        record: StoredRecord,
        out: &mut Vec<u8>,
    ) -> Result<(), StorageFault> {
        if is_sealed(record) {
            return self.sealed.write_json(record, out);
        }
        self.hot.json(record).write_to(out);
        Ok(())
    }

    /// Where a sealed record's JSON is among `memo`'s blocks
    /// ([`JsonMemo::json`] reads it).
    pub(crate) fn locate_json(
        &self,
        record: StoredRecord,
        memo: &mut JsonMemo,
    ) -> Result<StoredRecord, StorageFault> {
        self.sealed.locate_json(record, memo)
    }

    /// Hints the CPU to load the fields [`StationData::json`] reads.
    pub(crate) fn prefetch_locations(&self) {
        self.hot.prefetch_locations();
    }

    /// Whether a read of `range` may find sealed records: by the tier's last
    /// record, which it keeps, not its last block's header, which may be a
    /// tree's walk or a row's read.
    fn reads_sealed(&self, range: &KeyRange) -> bool {
        match (self.sealed.first_and_last(), range.0) {
            (None, _) => false,
            (Some(_), Bound::Unbounded) => true,
            (Some((_, (last, _))), Bound::Included(key)) => key <= last,
            (Some((_, (last, _))), Bound::Excluded(key)) => key < last,
        }
    }

    /// The units with keys in `range`, in time order, up to the sealed tier's
    /// fault, which `fault` keeps ([`Tier`]).
    pub(crate) fn units_in<'a>(
        &'a self,
        range: impl RangeBounds<RecordKey>,
        fault: &'a FirstFault,
    ) -> impl Iterator<Item = (RecordKey, UnitEntry)> + 'a {
        let range = key_range(range);
        merged(
            self.reads_sealed(&range)
                .then(|| self.sealed.units_in(range, fault)),
            self.hot.units_in(range),
        )
    }

    /// Gives `reader` the units with keys in `range` in time order, a sealed block
    /// at a time where it will take one whole from its digest: where every unit
    /// record of the block is in `range` and no hot record lies among them.
    pub(crate) fn read_units(
        &self,
        range: Range<RecordKey>,
        reader: &mut impl UnitReader,
    ) -> Result<(), StorageFault> {
        let keys = key_range(range.clone());
        let mut hot = self.hot.units_in(keys).peekable();
        if self.reads_sealed(&keys) {
            let mut blocks = (self.sealed.unit_blocks(keys))
                .map(|block| {
                    let block = block?;
                    let digest = block.digest()?;
                    Ok((block, digest))
                })
                .peekable();
            while let Some(read) = blocks.next() {
                let (block, digest) = read?;
                // Each block's digest is its own allocation, away from the last
                // one's: ask for the next while this one is read.
                let next = blocks.peek().and_then(|next| next.as_ref().ok());
                if let Some(next) = next.and_then(|(_, next)| next.first()) {
                    prefetch_value(next);
                }
                let (first, last) = bounds(block.period_start(), &digest);
                while let Some((key, entry)) = hot.next_if(|(key, _)| *key < first) {
                    reader.record(key, entry);
                }
                let whole = range.start <= first
                    && last < range.end
                    && hot.peek().is_none_or(|(key, _)| *key > last);
                if whole
                    && reader.may_take(first.instant, last.instant)
                    && reader.block(block.period_start(), &digest, &self.elsewhere(&block)?)
                {
                    continue;
                }
                for (key, entry) in block.records()?.filter(|(key, _)| range.contains(key)) {
                    while let Some((hot_key, hot_entry)) = hot.next_if(|(hot, _)| *hot < key) {
                        reader.record(hot_key, hot_entry);
                    }
                    reader.record(key, entry);
                }
            }
        }
        // The hot periods after the sealed ones: a digest of the settled layer's
        // units where the reader takes one whole, else record by record.
        let sealed_last = self.sealed.last_period();
        while let Some(&(key, _)) = hot.peek() {
            let period = period_of(key.instant);
            if sealed_last.is_none_or(|last| period > last) {
                if let Some(last) = self.offer_hot_period(period, key, &range, reader)? {
                    hot = self
                        .hot
                        .units_in((Bound::Excluded(last), keys.1))
                        .peekable();
                    continue;
                }
            }
            while let Some((key, entry)) =
                hot.next_if(|(next, _)| period_of(next.instant) == period)
            {
                reader.record(key, entry);
            }
        }
        Ok(())
    }

    /// Offers `reader` the settled layer's digest of `period`'s units, if every
    /// unit record of the period is in `range`, in that layer, and `next` is its
    /// first: the key of the last record it took, if it took them.
    fn offer_hot_period(
        &self,
        period: i64,
        next: RecordKey,
        range: &Range<RecordKey>,
        reader: &mut impl UnitReader,
    ) -> Result<Option<RecordKey>, StorageFault> {
        let start = period_start(period);
        // From the settled layer's tree, so that no digest is made that the reader
        // would refuse (a summary by hours, say).
        let Some((first, last)) = (self.hot).settled_units_span(start, period_start(period + 1))
        else {
            return Ok(None);
        };
        let whole = next == first
            && range.start <= first
            && last < range.end
            && (self.hot.recent_units_in(key_range(first..=last)))
                .next()
                .is_none();
        if !whole || !reader.may_take(first.instant, last.instant) {
            return Ok(None);
        }
        let digests = self.hot.settled_digests();
        let Some(bytes) = digests.periods.get(&period) else {
            return Ok(None);
        };
        debug_assert_eq!(bounds(start, bytes), (first, last));
        let (crossing, crossing_periods) = get_or_try_init(&self.hot_crossing, || {
            let sealed = self.sealed.serials()?;
            let mut recent: Vec<Symbol> = (self.hot)
                .recent_units_in(key_range(..))
                .filter(|(_, entry)| entry.direction == Direction::Output)
                .map(|(_, entry)| entry.unit_serial)
                .collect();
            recent.sort_unstable();
            let pairs: Vec<(Symbol, i64)> = (digests.outputs.iter().copied())
                .filter(|(serial, _)| {
                    sealed.binary_search(serial).is_ok() || recent.binary_search(serial).is_ok()
                })
                .collect();
            let mut serials: Vec<Symbol> = pairs.iter().map(|(serial, _)| *serial).collect();
            serials.dedup();
            let mut periods: Vec<i64> = pairs.iter().map(|(_, period)| *period).collect();
            periods.sort_unstable();
            periods.dedup();
            Ok((serials.into(), periods.into()))
        })?;
        let crosses = |periods: &[i64]| periods.binary_search(&period).is_ok();
        let elsewhere = match crosses(&digests.shared_periods) || crosses(crossing_periods) {
            true => Elsewhere::Serials {
                shared: &digests.shared,
                hot: crossing,
            },
            false => Elsewhere::Nowhere,
        };
        Ok(reader.block(start, bytes, &elsewhere).then_some(last))
    }

    /// Gives `reader` the metrics with keys in `range` in time order, a sealed
    /// block at a time where it will take one whole from its digest: where every
    /// metric record of the block is in `range` and the hot tier has none of the
    /// block's period.
    pub(crate) fn read_metrics<'a>(
        &'a self,
        range: Range<RecordKey>,
        reader: &mut impl MetricReader<'a>,
    ) -> Result<(), StorageFault> {
        let keys = key_range(range.clone());
        let mut hot = self.hot.metrics_in(keys).peekable();
        if self.reads_sealed(&keys) {
            for block in self.sealed.metric_blocks(keys) {
                let block = block?;
                let start = period_start(block.period());
                let (first, last) = bounds(start, &block.digest()?);
                while let Some((key, entry)) = hot.next_if(|(key, _)| *key < first) {
                    reader.record(key, entry);
                }
                let period = period_start(block.period())..period_start(block.period() + 1);
                let whole = range.start <= first
                    && last < range.end
                    && (self.hot)
                        .metrics_in(key_range(
                            RecordKey {
                                instant: period.start,
                                load_order: 0,
                            }..RecordKey {
                                instant: period.end,
                                load_order: 0,
                            },
                        ))
                        .next()
                        .is_none();
                if whole && reader.may_take(first.instant, last.instant) && reader.block(&block)? {
                    continue;
                }
                for (key, entry) in block.records()?.filter(|(key, _)| range.contains(key)) {
                    while let Some((hot_key, hot_entry)) = hot.next_if(|(hot, _)| *hot < key) {
                        reader.record(hot_key, hot_entry);
                    }
                    reader.record(key, entry);
                }
            }
        }
        for (key, entry) in hot {
            reader.record(key, entry);
        }
        Ok(())
    }

    /// Which serials a read of the station's units gives outputs of outside
    /// `block`, of those it has outputs of.
    fn elsewhere(&self, block: &UnitBlock<'_>) -> Result<Elsewhere<'_>, StorageFault> {
        let crossing = get_or_try_init(&self.crossing, || {
            let sealed = self.sealed.serials()?;
            let mut crossing: Vec<Symbol> = (self.hot_units())
                .filter(|(_, entry)| entry.direction == Direction::Output)
                .map(|(_, entry)| entry.unit_serial)
                .filter(|serial| sealed.binary_search(serial).is_ok())
                .collect();
            crossing.sort_unstable();
            crossing.dedup();
            Ok(crossing.into())
        })?;
        let shares = block.shares_serials();
        Ok(
            match shares || crossing.iter().any(|&serial| block.may_hold_serial(serial)) {
                true => Elsewhere::Serials {
                    shared: self.sealed.shared_serials(),
                    hot: crossing,
                },
                false => Elsewhere::Nowhere,
            },
        )
    }

    /// The hot tier's units, in time order: those the shard-wide tree holds.
    pub(crate) fn hot_units(&self) -> impl Iterator<Item = (RecordKey, UnitEntry)> + '_ {
        self.hot.units_in((Bound::Unbounded, Bound::Unbounded))
    }

    /// The units of serial number `serial` with keys in `range`, in time order.
    pub(crate) fn units_of_serial<'a>(
        &'a self,
        serial: Symbol,
        range: impl RangeBounds<RecordKey>,
        fault: &'a FirstFault,
    ) -> impl Iterator<Item = (RecordKey, UnitEntry)> + 'a {
        let range = key_range(range);
        merged(
            self.reads_sealed(&range)
                .then(|| self.sealed.units_of_serial(serial, range, fault)),
            self.hot.units_of_serial(serial, range),
        )
    }

    /// The units of serial number `serial` with keys in `range`, in time order;
    /// a sealed one's `bytes` locate it among `memo`'s blocks ([`JsonMemo::json`]),
    /// where the scan's answer writes its JSON from.
    pub(crate) fn units_of_serial_located<'a>(
        &'a self,
        serial: Symbol,
        range: impl RangeBounds<RecordKey>,
        memo: &'a RefCell<JsonMemo>,
        fault: &'a FirstFault,
    ) -> impl Iterator<Item = (RecordKey, UnitEntry)> + 'a {
        let range = key_range(range);
        merged(
            (self.reads_sealed(&range))
                .then(|| (self.sealed).units_of_serial_in_memo(serial, range, memo, fault)),
            self.hot.units_of_serial(serial, range),
        )
    }

    /// The metrics with keys in `range`, in time order, up to the sealed tier's
    /// fault, which `fault` keeps.
    pub(crate) fn metrics_in<'a>(
        &'a self,
        range: impl RangeBounds<RecordKey>,
        fault: &'a FirstFault,
    ) -> impl Iterator<Item = (RecordKey, MetricEntry)> + 'a {
        let range = key_range(range);
        merged(
            self.reads_sealed(&range)
                .then(|| self.sealed.metrics_in(range, fault)),
            self.hot.metrics_in(range),
        )
    }

    /// The metric records named `name` with keys in `range`, in time order; a
    /// sealed one located among `memo`'s blocks ([`JsonMemo::json`]), where the
    /// scan's answer writes its JSON from.
    pub(crate) fn metrics_of_name<'a>(
        &'a self,
        name: Symbol,
        range: impl RangeBounds<RecordKey>,
        memo: &'a RefCell<JsonMemo>,
        fault: &'a FirstFault,
    ) -> impl Iterator<Item = (RecordKey, StoredRecord)> + 'a {
        let range = key_range(range);
        merged(
            (self.reads_sealed(&range))
                .then(|| (self.sealed).metrics_of_name_in_memo(name, range, memo, fault)),
            self.hot.metrics_of_name(name, range),
        )
    }

    /// The station's first and last record of either kind, by key.
    pub(crate) fn first_and_last(
        &self,
    ) -> Option<((RecordKey, StoredRecord), (RecordKey, StoredRecord))> {
        let ends = [self.sealed.first_and_last(), self.hot.first_and_last()];
        let first = ends
            .iter()
            .flatten()
            .map(|(first, _)| *first)
            .min_by_key(|(key, _)| *key)?;
        let last = ends
            .iter()
            .flatten()
            .map(|(_, last)| *last)
            .max_by_key(|(key, _)| *key)?;
        Some((first, last))
    }

    /// Its bytes on the heap by part, of both tiers.
    pub(crate) fn memory(&self, add: &mut dyn FnMut(&'static str, u64)) {
        self.hot.memory(add);
        self.sealed.memory(add);
    }

    pub(crate) fn unit_count(&self) -> usize {
        self.hot.unit_count() + self.sealed.unit_count()
    }

    pub(crate) fn metric_count(&self) -> usize {
        self.hot.metric_count() + self.sealed.metric_count()
    }

    pub(crate) fn record_count(&self) -> usize {
        self.unit_count() + self.metric_count()
    }

    /// A fingerprint of each UTC day's records of `kind` in `window` (which starts
    /// and ends at midnights), by day number since 1970-01-01, for the days that
    /// hold any; see [`crate::data::shard::ShardData::day_fingerprints`].
    pub(crate) fn day_fingerprints(
        &self,
        kind: Kind,
        window: Window,
    ) -> Result<BTreeMap<i64, u64>, StorageFault> {
        let mut days: BTreeMap<i64, Xxh3> = BTreeMap::new();
        let day = |instant: Timestamp| instant.seconds.div_euclid(DAY_SECONDS);
        (self.sealed).hash_blocks(kind, window.from, window.to, &mut |start, bytes| {
            let hasher = days.entry(day(start)).or_default();
            bytes.iter().for_each(|bytes| hasher.update(bytes));
        })?;
        let starting = |instant| RecordKey {
            instant,
            load_order: 0,
        };
        let range = key_range(starting(window.from)..starting(window.to));
        let mut json = Vec::new();
        let mut hot = |key: RecordKey, bytes: StoredRecord| {
            json.clear();
            self.hot.json(bytes).write_to(&mut json);
            let hasher = days.entry(day(key.instant)).or_default();
            let (instant, load_order) = (key.instant, key.load_order);
            hasher.update(&instant.seconds.to_le_bytes());
            hasher.update(&instant.nanos.to_le_bytes());
            hasher.update(&load_order.to_le_bytes());
            hasher.update(&(json.len() as u64).to_le_bytes());
            hasher.update(&json);
        };
        match kind {
            Kind::Units => {
                (self.hot.units_in(range)).for_each(|(key, entry)| hot(key, entry.bytes));
            }
            Kind::Metrics => {
                (self.hot.metrics_in(range)).for_each(|(key, entry)| hot(key, entry.bytes));
            }
        }
        Ok((days.into_iter())
            .map(|(day, hasher)| (day, hasher.digest()))
            .collect())
    }
}

/// What reads a station's unit records for a summary ([`StationData::read_units`]):
/// each record in key order, or a sealed block's digest in place of its records.
pub(crate) trait UnitReader {
    fn record(&mut self, key: RecordKey, entry: UnitEntry);

    /// Whether it may take a digest of units from `first` to `last` whole
    /// ([`UnitReader::block`]), asked before a digest is read or made: a digest is
    /// offered only where this said yes.
    fn may_take(&mut self, _first: Timestamp, _last: Timestamp) -> bool {
        true
    }

    /// Offers a sealed block of the period starting at `period_start`, by its unit
    /// digest ([`crate::data::digest`]): true if the reader took its records whole
    /// from it, false to be given them one by one. `elsewhere` tells which serials
    /// the read gives outputs of outside the block.
    fn block(&mut self, period_start: Timestamp, digest: &[u8], elsewhere: &Elsewhere<'_>) -> bool;
}

/// Which serials a read of a station's units ([`StationData::read_units`]) gives
/// outputs of outside the digest it offers (a sealed block's, or a settled hot
/// period's), of those the digest has outputs of: a unit whose serial is not among
/// them has all its attempts in the digest.
pub(crate) enum Elsewhere<'a> {
    /// None of them.
    Nowhere,
    /// Maybe any of these: for a sealed block, the serials of outputs in more than
    /// one sealed block of the station, and of hot outputs that sealed blocks have
    /// too; for a hot period, of outputs in more than one settled period, and of
    /// settled outputs that the sealed tier or the recent layer has too.
    Serials {
        shared: &'a [Symbol],
        hot: &'a [Symbol],
    },
}

impl Elsewhere<'_> {
    /// Whether the read may give an output of `serial` outside the block offered,
    /// if the block has one.
    pub(crate) fn holds(&self, serial: Symbol) -> bool {
        match self {
            Elsewhere::Nowhere => false,
            Elsewhere::Serials { shared, hot } => {
                shared.binary_search(&serial).is_ok() || hot.binary_search(&serial).is_ok()
            }
        }
    }
}

/// What reads a station's metric records for a summary
/// ([`StationData::read_metrics`]): each record in key order, or a sealed block's
/// digest in place of its records.
pub(crate) trait MetricReader<'a> {
    fn record(&mut self, key: RecordKey, entry: MetricEntry);

    /// As [`UnitReader::may_take`], for a metric digest.
    fn may_take(&mut self, _first: Timestamp, _last: Timestamp) -> bool {
        true
    }

    /// Offers a sealed block by its metric digest ([`crate::data::digest`]): true
    /// if the reader took its records whole from it, false to be given them one by
    /// one; a digest that cannot be read is its store file's fault.
    fn block(&mut self, block: &MetricBlock<'a>) -> Result<bool, StorageFault>;
}

/// The records of the sealed tier, when it is read, merged by key with the hot
/// tier's (a key is in one tier only); the hot tier's alone otherwise, as for a
/// query of the hot window. The sealed tier's read ends at its fault, which the
/// caller's `FirstFault` keeps ([`Tier`]).
fn merged<T>(
    sealed: Option<impl Iterator<Item = (RecordKey, T)>>,
    hot: impl Iterator<Item = (RecordKey, T)>,
) -> impl Iterator<Item = (RecordKey, T)> {
    match sealed {
        None => Either::Left(hot),
        Some(sealed) => Either::Right(sealed.merge_by(hot, |left, right| left.0 < right.0)),
    }
}

/// The value `cell` holds, else the one `init` makes, kept there; a value
/// `init` fails to make is its error, and nothing is kept.
fn get_or_try_init<T>(
    cell: &OnceLock<T>,
    init: impl FnOnce() -> Result<T, StorageFault>,
) -> Result<&T, StorageFault> {
    if let Some(value) = cell.get() {
        return Ok(value);
    }
    let value = init()?;
    Ok(cell.get_or_init(|| value))
}
