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
    pub(crate) generation: u64,
    /// Station ids in ascending byte order; a station's rank is its index here.
    pub(crate) stations: Vec<Box<str>>,
    pub(crate) placements: Vec<Placement>,
    pub(crate) symbols: Symbols,
    pub(crate) shard_count: usize,
    pub(crate) summary: LoadSummary,
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
    /// The number of the load that made it: 1 at start-up, then one more per reload.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Station ids in ascending byte order; a station's rank is its index here.
    pub fn stations(&self) -> &[Box<str>] {
        &self.stations
    }

    /// Where the station of `rank` lives.
    pub fn placement(&self, rank: u32) -> Placement {
        self.placements[rank as usize]
    }

    /// Every placement, by rank.
    pub fn placements(&self) -> &[Placement] {
        &self.placements
    }

    /// The interned filter values (types, serials, names) of this generation.
    pub fn symbols(&self) -> &Symbols {
        &self.symbols
    }

    pub fn shard_count(&self) -> usize {
        self.shard_count
    }

    pub fn summary(&self) -> &LoadSummary {
        &self.summary
    }

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
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) shards: Vec<ShardData>,
}

impl Generation {
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// Each shard's data, in shard order.
    pub fn shards(&self) -> &[ShardData] {
        &self.shards
    }

    /// The catalog, and the shards for the engine to hand out.
    pub fn into_parts(self) -> (Arc<Catalog>, Vec<ShardData>) {
        (self.catalog, self.shards)
    }

    /// How many records each shard holds.
    pub fn shard_records(&self) -> Vec<usize> {
        self.shards
            .iter()
            .map(|shard| shard.stations.iter().map(StationData::record_count).sum())
            .collect()
    }
}
