//! A generation: the immutable result of one load. Its catalog lists the stations
//! in byte order and says where each one lives; its shards hold the records.

use std::sync::Arc;

use crate::data::shard::ShardData;
use crate::data::station::StationData;
use crate::data::symbols::Symbols;

/// Where a station lives: its shard and its index within that shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub shard: u32,
    pub station_index: u32,
}

/// Every station of a generation and where it lives. A station lives in exactly one
/// shard.
#[derive(Debug, Default)]
pub struct Catalog {
    pub generation: u64,
    /// Station ids in ascending byte order; a station's rank is its index here.
    pub stations: Vec<Box<str>>,
    pub placements: Vec<Placement>,
    pub symbols: Symbols,
    pub shard_count: usize,
    pub summary: LoadSummary,
}

/// What the load that made a generation found, as `/readyz` reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadSummary {
    /// RFC 3339, UTC.
    pub loaded_at: String,
    pub units: u64,
    pub metrics: u64,
    pub skipped_lines: u64,
}

impl Catalog {
    pub fn rank(&self, station: &str) -> Option<u32> {
        self.stations
            .binary_search_by(|probe| probe.as_bytes().cmp(station.as_bytes()))
            .ok()
            .map(|rank| rank as u32)
    }
}

/// An immutable, complete snapshot of the data: what one load produces.
#[derive(Debug, Default)]
pub struct Generation {
    pub catalog: Arc<Catalog>,
    pub shards: Vec<ShardData>,
}

impl Generation {
    /// How many records each shard holds.
    pub fn shard_records(&self) -> Vec<usize> {
        self.shards
            .iter()
            .map(|shard| shard.stations.iter().map(StationData::record_count).sum())
            .collect()
    }
}
