//! One station's records in B-tree maps ordered by time, and their stored form
//! ([`crate::data::stored`]) in an arena and a table of pieces: in two layers, the
//! settled records and those appended since, read as one.

use std::collections::{btree_map, BTreeMap};
use std::ops::{Range, RangeBounds};
use std::sync::Arc;

use bytes::Bytes;
use itertools::{Either, Itertools as _};

use crate::data::key::RecordKey;
use crate::data::stored::{Pieces, RecordJson, StoredRecord};
use crate::data::symbols::Symbol;
use crate::domain::record::Direction;

/// A unit record in the index: where its JSON is, and the fields filters and
/// summaries read, so that neither parses the JSON again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnitEntry {
    pub bytes: StoredRecord,
    pub unit_type: Symbol,
    pub unit_serial: Symbol,
    pub direction: Direction,
    pub slot: Symbol,
    pub mode: Symbol,
    pub result: Symbol,
}

/// A metric record in the index: where its JSON is, the fields filters and
/// summaries group by, its serial (for a summary's `failing_units`), and its
/// numbers (`NaN` where a field is not numeric, docs/api.md section 10.2). The
/// limits' text is read from the JSON, only for the one record per summary row
/// whose limits the row shows. The serial fills what was padding: the entry is
/// 48 bytes with it as without it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MetricEntry {
    pub bytes: StoredRecord,
    pub name: Symbol,
    pub slot: Symbol,
    pub unit_serial: Symbol,
    pub unit: Symbol,
    pub value: f64,
    pub limit_lower: f64,
    pub limit_upper: f64,
}

// The serial took the padding after the symbols: no entry grew for it.
const _: () = assert!(size_of::<MetricEntry>() == 48);

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
#[derive(Clone, Debug, Default)]
pub(crate) struct Layer {
    pub(crate) arena: Bytes,
    pub(crate) pieces: Pieces,
    pub(crate) trees: Arc<Trees>,
    /// Where its records' starts count from: the station's entries address both
    /// layers as one arena, the recent one after the settled one.
    pub(crate) offset: u32,
}

impl Layer {
    /// A record of this layer as its own arena addresses it.
    pub(crate) fn local(&self, record: StoredRecord) -> StoredRecord {
        StoredRecord {
            start: record.start - self.offset,
            ..record
        }
    }
}

/// One station's records of both kinds, and their stored form, in two layers: the
/// settled one, shared with every generation that kept the station's records, and
/// the recent one, the records appended by reloads since (small: a reload copies it
/// and adds to it, and folds it into a new settled layer once it has grown). Every
/// read merges both; no reader needs to know which layer holds a record.
#[derive(Debug, Default)]
pub struct StationData {
    pub(crate) settled: Layer,
    pub(crate) recent: Layer,
}

/// The recent layer is folded into a new settled one once it holds more than this
/// share of the station's records (one in `RECENT_SHARE`); tests fold at once, so
/// that both paths run.
#[cfg(not(test))]
pub(crate) const RECENT_SHARE: usize = 16;
#[cfg(test)]
pub(crate) const RECENT_SHARE: usize = 1;

impl StationData {
    /// Builds every tree of a station from its records in any order.
    pub fn new(
        arena: Box<[u8]>,
        pieces: Pieces,
        units: Vec<(RecordKey, UnitEntry)>,
        metrics: Vec<(RecordKey, MetricEntry)>,
    ) -> StationData {
        let offset = arena.len() as u32;
        StationData {
            settled: Layer {
                arena: Bytes::from(arena),
                pieces,
                trees: Arc::new(Trees::of(units, metrics)),
                offset: 0,
            },
            recent: Layer {
                offset,
                ..Layer::default()
            },
        }
    }

    /// This station with records appended in its recent layer, whose arena and
    /// pieces are now `arena` and `pieces`: they hold the recent layer's records as
    /// they were (so its stored records stay valid) and the new records' after them,
    /// which `units` and `metrics` index. The settled layer is shared; the recent
    /// trees are copied with the new entries added.
    pub(crate) fn extended(
        &self,
        arena: Box<[u8]>,
        pieces: Pieces,
        units: &[(RecordKey, UnitEntry)],
        metrics: &[(RecordKey, MetricEntry)],
    ) -> StationData {
        let mut trees = Trees::clone(&self.recent.trees);
        trees.insert(units, metrics);
        StationData {
            settled: self.settled.clone(),
            recent: Layer {
                arena: Bytes::from(arena),
                pieces,
                trees: Arc::new(trees),
                offset: self.recent.offset,
            },
        }
    }

    /// Whether `appended` more records would grow the recent layer past its share,
    /// so that the station is built again in one layer instead.
    pub(crate) fn folds_with(&self, appended: usize) -> bool {
        (self.recent.trees.record_count() + appended) * RECENT_SHARE
            > self.settled.trees.record_count()
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
    pub fn json(&self, record: StoredRecord) -> RecordJson<'_> {
        let layer = self.layer_of(record);
        RecordJson::new(&layer.arena, &layer.pieces, layer.local(record))
    }

    /// Hints the CPU to load the fields [`StationData::json`] reads.
    pub(crate) fn prefetch_locations(&self) {
        crate::data::stored::prefetch_value(&self.settled.arena);
        crate::data::stored::prefetch_value(&self.settled.pieces);
    }

    /// The units with keys in `range`, in time order.
    pub(crate) fn units_in<R: RangeBounds<RecordKey> + Clone>(
        &self,
        range: R,
    ) -> impl Iterator<Item = (&RecordKey, &UnitEntry)> {
        merged(
            self.settled.trees.units.range(range.clone()),
            &self.recent.trees.units,
            |recent| recent.range(range),
        )
    }

    /// The units of serial number `serial` with keys in `range`, in time order.
    pub(crate) fn units_of_serial(
        &self,
        serial: Symbol,
        range: Range<RecordKey>,
    ) -> impl Iterator<Item = (&RecordKey, &UnitEntry)> {
        let range = (serial, range.start)..(serial, range.end);
        merged(
            self.settled.trees.units_by_serial.range(range.clone()),
            &self.recent.trees.units_by_serial,
            |recent| recent.range(range),
        )
        .map(|((_, key), entry)| (key, entry))
    }

    /// The metrics with keys in `range`, in time order.
    pub(crate) fn metrics_in<R: RangeBounds<RecordKey> + Clone>(
        &self,
        range: R,
    ) -> impl Iterator<Item = (&RecordKey, &MetricEntry)> {
        merged(
            self.settled.trees.metrics.range(range.clone()),
            &self.recent.trees.metrics,
            |recent| recent.range(range),
        )
    }

    /// The metrics named `name` with keys in `range`, in time order.
    pub(crate) fn metrics_of_name(
        &self,
        name: Symbol,
        range: Range<RecordKey>,
    ) -> impl Iterator<Item = (&RecordKey, StoredRecord)> {
        let range = (name, range.start)..(name, range.end);
        merged(
            self.settled.trees.metrics_by_name.range(range.clone()),
            &self.recent.trees.metrics_by_name,
            |recent| recent.range(range),
        )
        .map(|((_, key), bytes)| (key, *bytes))
    }

    /// The station's first and last record of either kind, by key.
    pub(crate) fn first_and_last(
        &self,
    ) -> Option<((RecordKey, StoredRecord), (RecordKey, StoredRecord))> {
        let trees = [&*self.settled.trees, &*self.recent.trees];
        let firsts = trees.iter().flat_map(|trees| {
            let unit = trees
                .units
                .first_key_value()
                .map(|(key, entry)| (*key, entry.bytes));
            let metric = (trees.metrics.first_key_value()).map(|(key, entry)| (*key, entry.bytes));
            [unit, metric]
        });
        let lasts = trees.iter().flat_map(|trees| {
            let unit = trees
                .units
                .last_key_value()
                .map(|(key, entry)| (*key, entry.bytes));
            let metric = (trees.metrics.last_key_value()).map(|(key, entry)| (*key, entry.bytes));
            [unit, metric]
        });
        let first = firsts.flatten().min_by_key(|(key, _)| *key)?;
        let last = lasts.flatten().max_by_key(|(key, _)| *key)?;
        Some((first, last))
    }

    pub fn unit_count(&self) -> usize {
        self.settled.trees.units.len() + self.recent.trees.units.len()
    }

    pub fn metric_count(&self) -> usize {
        self.settled.trees.metrics.len() + self.recent.trees.metrics.len()
    }

    pub fn record_count(&self) -> usize {
        self.unit_count() + self.metric_count()
    }
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
