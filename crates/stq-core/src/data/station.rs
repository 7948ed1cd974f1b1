//! One station's records in B-tree maps ordered by time, and their stored form
//! ([`crate::data::stored`]) in one arena and one table of pieces.

use std::collections::BTreeMap;

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
/// summaries group by, and its numbers (`NaN` where a field is not numeric,
/// docs/api.md section 10.2). The limits' text is read from the JSON, only for the
/// one record per summary row whose limits the row shows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MetricEntry {
    pub bytes: StoredRecord,
    pub name: Symbol,
    pub slot: Symbol,
    pub unit: Symbol,
    pub value: f64,
    pub limit_lower: f64,
    pub limit_upper: f64,
}

/// One station's records of both kinds, and their stored form.
///
/// Each kind is held in time order, and once more ordered by the field its most
/// selective filter names (serial number, metric name) and then by time, so that a
/// filtered query reads one exact range instead of the station's whole window.
#[derive(Debug, Default)]
pub struct StationData {
    pub(crate) arena: Box<[u8]>,
    pub(crate) pieces: Pieces,
    pub(crate) units: BTreeMap<RecordKey, UnitEntry>,
    pub(crate) units_by_serial: BTreeMap<(Symbol, RecordKey), UnitEntry>,
    pub(crate) metrics: BTreeMap<RecordKey, MetricEntry>,
    pub(crate) metrics_by_name: BTreeMap<(Symbol, RecordKey), StoredRecord>,
}

impl StationData {
    /// Builds every tree of a station from its records in any order.
    pub fn new(
        arena: Box<[u8]>,
        pieces: Pieces,
        units: Vec<(RecordKey, UnitEntry)>,
        metrics: Vec<(RecordKey, MetricEntry)>,
    ) -> StationData {
        // Collecting sorts, then bulk-builds densely packed nodes.
        let units_by_serial = units
            .iter()
            .map(|(key, entry)| ((entry.unit_serial, *key), *entry))
            .collect();
        let metrics_by_name = metrics
            .iter()
            .map(|(key, entry)| ((entry.name, *key), entry.bytes))
            .collect();
        StationData {
            arena,
            pieces,
            units: units.into_iter().collect(),
            units_by_serial,
            metrics: metrics.into_iter().collect(),
            metrics_by_name,
        }
    }

    /// This station with records appended: `arena` and `pieces` hold this one's
    /// as they are (so its stored records stay valid) and the new records' after
    /// them, which `units` and `metrics` index. The trees are this one's copied
    /// with the new entries added: no sort of what was there.
    pub(crate) fn extended(
        &self,
        arena: Box<[u8]>,
        pieces: Pieces,
        units: &[(RecordKey, UnitEntry)],
        metrics: &[(RecordKey, MetricEntry)],
    ) -> StationData {
        let mut station = StationData {
            arena,
            pieces,
            units: self.units.clone(),
            units_by_serial: self.units_by_serial.clone(),
            metrics: self.metrics.clone(),
            metrics_by_name: self.metrics_by_name.clone(),
        };
        for (key, entry) in units {
            station.units.insert(*key, *entry);
            station
                .units_by_serial
                .insert((entry.unit_serial, *key), *entry);
        }
        for (key, entry) in metrics {
            station.metrics.insert(*key, *entry);
            station
                .metrics_by_name
                .insert((entry.name, *key), entry.bytes);
        }
        station
    }

    /// A record's response JSON, as the parts it is sent in.
    pub fn json(&self, record: StoredRecord) -> RecordJson<'_> {
        RecordJson::new(&self.arena, &self.pieces, record)
    }

    /// Hints the CPU to load the fields [`StationData::json`] reads.
    pub(crate) fn prefetch_locations(&self) {
        crate::data::stored::prefetch_value(&self.arena);
        crate::data::stored::prefetch_value(&self.pieces);
    }

    pub fn record_count(&self) -> usize {
        self.units.len() + self.metrics.len()
    }
}
