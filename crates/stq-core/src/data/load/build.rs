//! Building: a station's records as they arrive ([`StationBuilder`]) become its
//! immutable [`StationData`], and stations are placed on shards ([`place`]). A
//! reload's builders start from a station of the previous generation:
//! [`StationBuilder::extending`] keeps its stored records where they are,
//! [`StationBuilder::surviving`] copies the ones that stay.

use super::report::LoadError;
use crate::data::key::{load_order, RecordKey};
use crate::data::station::{MetricEntry, StationData, UnitEntry};
use crate::data::stored::{self, Piece, PieceTable, Pieces, StoredRecord};

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

    /// Whether its arena and its pieces can be addressed with 32 bits, as its
    /// entries and piece table address them.
    pub(crate) fn fits(&self) -> bool {
        u32::try_from(self.arena.len()).is_ok() && u32::try_from(self.pieces.bytes()).is_ok()
    }

    /// The station built from this builder's records, named `name` in the error
    /// when it is too large to address.
    pub(crate) fn into_station(self, name: &str) -> Result<StationData, LoadError> {
        if !self.fits() {
            return Err(LoadError::StationTooLarge {
                station: name.to_string(),
            });
        }
        Ok(self.finish())
    }

    /// The station built from this builder's records, which [`Self::fits`].
    pub(super) fn finish(self) -> StationData {
        StationData::new(
            self.arena.into_boxed_slice(),
            self.pieces.finish(),
            self.units,
            self.metrics,
        )
    }

    /// A builder holding the stored records of `station`'s recent layer as they
    /// are, but none of its entries, so that what is appended goes after them and
    /// the layer's stored records (which its shard's trees point into) stay valid;
    /// its entries are then the appended records', addressed in the layer's arena.
    pub(crate) fn extending(station: &StationData) -> StationBuilder {
        let recent = &station.recent;
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
        }
    }

    /// Adds the records of `station` from the file numbered `from`, numbered
    /// `to` instead: a held file's previous records when the files are numbered
    /// afresh.
    pub(crate) fn carry(&mut self, station: &StationData, from: u32, to: u32) {
        let renumbered = |key: &RecordKey| RecordKey {
            load_order: load_order(to, key.load_order as u32),
            ..*key
        };
        let of_file = |key: &RecordKey| (key.load_order >> 32) as u32 == from;
        for layer in station.layers() {
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
    }

    /// A builder holding the records of `station` (both layers) that `is_dropped`
    /// keeps, their bytes copied into a new arena so that the dropped ones' bytes go
    /// with the old one.
    pub(crate) fn surviving(
        station: &StationData,
        is_dropped: &impl Fn(u64) -> bool,
    ) -> StationBuilder {
        let mut builder = StationBuilder::default();
        for layer in station.layers() {
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
        builder
    }
}

/// Spreads stations over shards by record count, largest first onto the lightest
/// shard, so that no shard does much more than its share of the work. Stations are
/// given in rank order; the result is each one's shard, by rank.
pub(super) fn place(stations: &[(Box<str>, StationBuilder)], shard_count: usize) -> Vec<usize> {
    let mut by_size: Vec<usize> = (0..stations.len()).collect();
    by_size.sort_by_key(|&rank| std::cmp::Reverse(stations[rank].1.record_count()));
    let mut load = vec![0usize; shard_count];
    let mut shard_of = vec![0; stations.len()];
    for rank in by_size {
        let shard = (0..shard_count)
            .min_by_key(|&shard| (load[shard], shard))
            .expect("there is at least one shard");
        load[shard] += stations[rank].1.record_count();
        shard_of[rank] = shard;
    }
    shard_of
}
