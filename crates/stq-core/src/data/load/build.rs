//! Building: a station's records as they arrive ([`StationBuilder`]) become its
//! immutable [`StationData`], and stations are placed on shards ([`place`]). A
//! reload's builders start from a station of the previous generation:
//! [`StationBuilder::extending`] keeps its stored records where they are,
//! [`StationBuilder::surviving`] copies the ones that stay.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::LoadError;
use crate::data::fault::StorageFault;
use crate::data::hot::Hot;
use crate::data::key::{load_order, RecordKey};
use crate::data::sealed::cache::BlockCache;
use crate::data::sealed::{period_of, period_start, Sealed, Unsealed, SEALED};
use crate::data::station::{MetricEntry, StationData, UnitEntry};
use crate::data::stored::{self, Piece, PieceTable, Pieces, RecordJson, StoredRecord};
use crate::data::tier::Tier as _;
use crate::data::tuning::TUNING;
use crate::domain::time::Timestamp;

/// How many of a station's latest units, and of its latest metrics, an extension
/// looks at for pieces that appended records can share.
const LATEST_RECORDS: usize = 256;

/// One station's records as they arrive, before its B-tree maps are built.
#[derive(Default)]
pub(crate) struct StationBuilder {
    pub(crate) arena: Vec<u8>,
    pub(crate) pieces: PieceTable,
    pub(crate) units: Vec<(RecordKey, UnitEntry)>,
    pub(crate) metrics: Vec<(RecordKey, MetricEntry)>,
    /// The station's sealed records so far, which the built station keeps and
    /// seals more into.
    pub(crate) sealed: Arc<Sealed>,
    /// How many records it holds when [`Self::seal_while_reading`] looks again.
    next_seal: usize,
}

impl StationBuilder {
    /// Takes over the records of a batch of the same station, in its order after
    /// this builder's.
    pub(crate) fn append(&mut self, batch: StationBuilder) {
        let mut known = foldhash::HashMap::default();
        known.reserve(batch.pieces.len());
        let pieces = batch.pieces.finish();
        self.arena.reserve(batch.arena.len());
        self.units.reserve(batch.units.len());
        for (key, entry) in batch.units {
            let bytes = self.copy(&batch.arena, &pieces, entry.bytes, &mut known);
            self.units.push((key, UnitEntry { bytes, ..entry }));
        }
        self.metrics.reserve(batch.metrics.len());
        for (key, entry) in batch.metrics {
            let bytes = self.copy(&batch.arena, &pieces, entry.bytes, &mut known);
            self.metrics.push((key, MetricEntry { bytes, ..entry }));
        }
    }

    /// Stores a record of another arena and table of pieces in this builder's;
    /// `known` is [`stored::copy`]'s, one for each other table.
    pub(crate) fn copy(
        &mut self,
        arena: &[u8],
        pieces: &Pieces,
        record: StoredRecord,
        known: &mut foldhash::HashMap<Piece, Piece>,
    ) -> StoredRecord {
        stored::copy(
            &mut self.arena,
            &mut self.pieces,
            arena,
            pieces,
            record,
            known,
        )
    }

    pub(crate) fn record_count(&self) -> usize {
        self.units.len() + self.metrics.len()
    }

    /// Its records, sealed ones too.
    fn all_records(&self) -> usize {
        self.record_count() + self.sealed_records()
    }

    /// Its records sealed so far.
    pub(crate) fn sealed_records(&self) -> usize {
        self.sealed.unit_count() + self.sealed.metric_count()
    }

    /// Seals the records that are sure to be sealed when the load ends: those in
    /// whole periods older than the hot window and the reading margin ([`Tuning::reading_margin`](crate::data::tuning::Tuning::reading_margin)), counted back
    /// from its newest record so far (the newest can only grow). So a full load
    /// holds a few days of each station as built records, not all of its history,
    /// which for months of a floor took several times the memory of what it
    /// builds. Looks again once it holds twice the records it keeps.
    pub(crate) fn seal_while_reading(
        &mut self,
        hot: Duration,
        cache: &BlockCache,
    ) -> Result<(), StorageFault> {
        if self.record_count() < self.next_seal {
            return Ok(());
        }
        if let Some(first_hot) = self.first_hot(hot + TUNING.reading_margin) {
            if self.seals_any(first_hot) {
                *self = std::mem::take(self).sealing(first_hot, cache)?;
            }
        }
        self.next_seal = (2 * self.record_count()).max(TUNING.reading_seal_records);
        Ok(())
    }

    /// The first instant that stays hot: the start of the period that holds the
    /// instant `hot` before its newest record.
    fn first_hot(&self, hot: Duration) -> Option<Timestamp> {
        let newest = (self.units.iter().map(|(key, _)| key.instant))
            .chain(self.metrics.iter().map(|(key, _)| key.instant))
            .max()?;
        let seconds = i64::try_from(hot.as_secs()).unwrap_or(i64::MAX);
        Some(period_start(period_of(newest.add_seconds(-seconds))))
    }

    /// Whether it holds a record from before `first_hot`.
    fn seals_any(&self, first_hot: Timestamp) -> bool {
        (self.units.iter()).any(|(key, _)| key.instant < first_hot)
            || (self.metrics.iter()).any(|(key, _)| key.instant < first_hot)
    }

    /// Whether its arena and its pieces can be addressed as its entries and piece
    /// table address them: the arena with 31 bits (the last tells sealed records'
    /// locators apart), the pieces with 32.
    pub(crate) fn fits(&self) -> bool {
        self.arena.len() < SEALED as usize && u32::try_from(self.pieces.bytes()).is_ok()
    }

    /// The station built from this builder's records, named `name` in the error
    /// when it is too large to address; its records in whole periods of blocks (four hours) older than
    /// `hot` (counted back from its newest record) sealed, all hot without one;
    /// its sealed blocks read through `cache`.
    pub(crate) fn into_station(
        self,
        name: &str,
        hot: Option<Duration>,
        cache: &BlockCache,
    ) -> Result<StationData, LoadError> {
        if !self.fits() {
            return Err(LoadError::StationTooLarge {
                station: name.to_string(),
            });
        }
        Ok(self.finish(hot, cache)?)
    }

    /// The station built from this builder's records, which [`Self::fits`]; see
    /// [`Self::into_station`].
    pub(super) fn finish(
        self,
        hot: Option<Duration>,
        cache: &BlockCache,
    ) -> Result<StationData, StorageFault> {
        let builder = match hot.and_then(|hot| self.first_hot(hot)) {
            Some(first_hot) if self.seals_any(first_hot) => self.sealing(first_hot, cache)?,
            _ => self,
        };
        let hot = Hot::new(
            builder.arena.into_boxed_slice(),
            builder.pieces.finish(),
            builder.units,
            builder.metrics,
        );
        Ok(StationData::of_tiers(hot, builder.sealed))
    }

    /// This builder with its records from before `first_hot` sealed, and the rest
    /// copied into a new arena and table of pieces, so that the sealed ones' bytes
    /// go with the old; the sealed tier is read through `cache`.
    fn sealing(
        self,
        first_hot: Timestamp,
        cache: &BlockCache,
    ) -> Result<StationBuilder, StorageFault> {
        let seals = |key: &RecordKey| key.instant < first_hot;
        let pieces = self.pieces.finish();
        let arena = &self.arena;
        let parts = |bytes: StoredRecord| RecordJson::new(arena, &pieces, bytes).parts().all();
        let mut hot = StationBuilder::default();
        let mut known = foldhash::HashMap::default();
        let mut sealed_units = Vec::new();
        for (key, entry) in &self.units {
            match seals(key) {
                true => sealed_units.push(Unsealed {
                    key: *key,
                    entry: *entry,
                    parts: parts(entry.bytes),
                }),
                false => {
                    let bytes = hot.copy(arena, &pieces, entry.bytes, &mut known);
                    hot.units.push((*key, UnitEntry { bytes, ..*entry }));
                }
            }
        }
        let mut sealed_metrics = Vec::new();
        for (key, entry) in &self.metrics {
            match seals(key) {
                true => sealed_metrics.push(Unsealed {
                    key: *key,
                    entry: *entry,
                    parts: parts(entry.bytes),
                }),
                false => {
                    let bytes = hot.copy(arena, &pieces, entry.bytes, &mut known);
                    hot.metrics.push((*key, MetricEntry { bytes, ..*entry }));
                }
            }
        }
        hot.sealed = Arc::new(self.sealed.with(cache, sealed_units, sealed_metrics)?);
        Ok(hot)
    }

    /// This builder without the records of the files whose ordinals `held` holds
    /// (`--on-invalid hold` at start-up), or `None` when none is left: the sealed
    /// tier without them, and the other hot records copied into a new arena, so
    /// that the held ones' bytes go with the old one.
    pub(crate) fn without_files(
        self,
        held: &HashSet<u32>,
    ) -> Result<Option<StationBuilder>, StorageFault> {
        let of_held = |load_order: u64| held.contains(&((load_order >> 32) as u32));
        let touched =
            |lowest: u32, highest: u32| (held.iter()).any(|file| (lowest..=highest).contains(file));
        let sealed = match self.sealed.without(&of_held, &touched)? {
            Some(kept) => Arc::new(kept),
            None => Arc::clone(&self.sealed),
        };
        let pieces = self.pieces.finish();
        let mut kept = StationBuilder {
            sealed,
            ..StationBuilder::default()
        };
        let mut known = foldhash::HashMap::default();
        for (key, entry) in &self.units {
            if !of_held(key.load_order) {
                let bytes = kept.copy(&self.arena, &pieces, entry.bytes, &mut known);
                kept.units.push((*key, UnitEntry { bytes, ..*entry }));
            }
        }
        for (key, entry) in &self.metrics {
            if !of_held(key.load_order) {
                let bytes = kept.copy(&self.arena, &pieces, entry.bytes, &mut known);
                kept.metrics.push((*key, MetricEntry { bytes, ..*entry }));
            }
        }
        Ok((kept.all_records() > 0).then_some(kept))
    }

    /// Stores a record given as its JSON's parts, as the sealed tier gives it.
    fn store_parts(&mut self, parts: [&[u8]; 5]) -> StoredRecord {
        stored::store_parts(&mut self.arena, &mut self.pieces, parts)
    }

    /// A builder holding the stored records of `station`'s recent layer as they
    /// are, but none of its entries, so that what is appended goes after them and
    /// the layer's stored records (which its shard's trees point into) stay valid;
    /// its entries are then the appended records', addressed in the layer's arena.
    pub(crate) fn extending(station: &StationData) -> StationBuilder {
        let recent = &station.hot.recent;
        // Appended records share pieces with the latest ones (the next unit's metric
        // names, units and limits are the last one's); finding every record's pieces
        // again cost more than the rest of the extension.
        let records = recent
            .trees
            .units
            .values()
            .rev()
            .take(LATEST_RECORDS)
            .map(|entry| recent.local(entry.bytes))
            .chain(
                (recent.trees.metrics.values().rev())
                    .take(LATEST_RECORDS)
                    .map(|entry| recent.local(entry.bytes)),
            );
        StationBuilder {
            arena: recent.arena.to_vec(),
            pieces: PieceTable::continuing(&recent.pieces, &recent.arena, records),
            units: Vec::new(),
            metrics: Vec::new(),
            sealed: Arc::clone(&station.sealed),
            next_seal: 0,
        }
    }

    /// Adds the records of `station` from the file numbered `from`, numbered
    /// `to` instead: a held file's previous records when the files are numbered
    /// afresh. A store file that fails the read of its sealed records is its fault.
    pub(crate) fn carry(
        &mut self,
        station: &StationData,
        from: u32,
        to: u32,
    ) -> Result<(), StorageFault> {
        let renumbered = |key: &RecordKey| RecordKey {
            load_order: load_order(to, key.load_order as u32),
            ..*key
        };
        let of_file = |key: &RecordKey| (key.load_order >> 32) as u32 == from;
        let builder = std::cell::RefCell::new(&mut *self);
        station.sealed.each(
            &|lowest, highest| (lowest..=highest).contains(&from),
            &|order| (order >> 32) as u32 == from,
            &mut |record| {
                let mut builder = builder.borrow_mut();
                let bytes = builder.store_parts(record.parts);
                let entry = UnitEntry {
                    bytes,
                    ..record.entry
                };
                builder.units.push((renumbered(&record.key), entry));
            },
            &mut |record| {
                let mut builder = builder.borrow_mut();
                let bytes = builder.store_parts(record.parts);
                let entry = MetricEntry {
                    bytes,
                    ..record.entry
                };
                builder.metrics.push((renumbered(&record.key), entry));
            },
        )?;
        for layer in station.hot.layers() {
            let mut known = foldhash::HashMap::default();
            for (key, entry) in layer.trees.units.iter().filter(|(key, _)| of_file(key)) {
                let local = layer.local(entry.bytes);
                let bytes = self.copy(&layer.arena, &layer.pieces, local, &mut known);
                self.units
                    .push((renumbered(key), UnitEntry { bytes, ..*entry }));
            }
            for (key, entry) in layer.trees.metrics.iter().filter(|(key, _)| of_file(key)) {
                let local = layer.local(entry.bytes);
                let bytes = self.copy(&layer.arena, &layer.pieces, local, &mut known);
                self.metrics
                    .push((renumbered(key), MetricEntry { bytes, ..*entry }));
            }
        }
        Ok(())
    }

    /// A builder holding the records of `station` that `is_dropped` keeps: its hot
    /// ones' bytes copied into a new arena so that the dropped ones' bytes go with
    /// the old one, and its sealed tier, without the dropped ones (only blocks with
    /// records of a file `touched` names, by lowest and highest ordinal, are read).
    pub(crate) fn surviving(
        station: &StationData,
        is_dropped: &impl Fn(u64) -> bool,
        touched: &impl Fn(u32, u32) -> bool,
    ) -> Result<StationBuilder, StorageFault> {
        let mut builder = StationBuilder {
            sealed: match station.sealed.without(is_dropped, touched)? {
                Some(kept) => Arc::new(kept),
                None => Arc::clone(&station.sealed),
            },
            ..StationBuilder::default()
        };
        for layer in station.hot.layers() {
            let mut known = foldhash::HashMap::default();
            let mut copy = |record: StoredRecord| {
                let local = layer.local(record);
                builder.copy(&layer.arena, &layer.pieces, local, &mut known)
            };
            let mut units = Vec::new();
            for (key, entry) in &layer.trees.units {
                if !is_dropped(key.load_order) {
                    units.push((
                        *key,
                        UnitEntry {
                            bytes: copy(entry.bytes),
                            ..*entry
                        },
                    ));
                }
            }
            let mut metrics = Vec::new();
            for (key, entry) in &layer.trees.metrics {
                if !is_dropped(key.load_order) {
                    metrics.push((
                        *key,
                        MetricEntry {
                            bytes: copy(entry.bytes),
                            ..*entry
                        },
                    ));
                }
            }
            builder.units.extend(units);
            builder.metrics.extend(metrics);
        }
        Ok(builder)
    }
}

/// Spreads stations over shards by record count, largest first onto the lightest
/// shard, so that no shard does much more than its share of the work. Stations are
/// given in rank order; the result is each one's shard, by rank.
pub(super) fn place(stations: &[(Box<str>, StationBuilder)], shard_count: usize) -> Vec<usize> {
    let mut by_size: Vec<usize> = (0..stations.len()).collect();
    by_size.sort_by_key(|&rank| std::cmp::Reverse(stations[rank].1.all_records()));
    let mut load = vec![0usize; shard_count];
    let mut shard_of = vec![0; stations.len()];
    for rank in by_size {
        let shard = (0..shard_count)
            .min_by_key(|&shard| (load[shard], shard))
            .expect("there is at least one shard");
        load[shard] += stations[rank].1.all_records();
        shard_of[rank] = shard;
    }
    shard_of
}
