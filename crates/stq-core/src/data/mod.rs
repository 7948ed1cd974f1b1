//! The data layer: records held in memory and read back in the contract's order.
//!
//! A snapshot is loaded ([`load`]) into an immutable [`Generation`]: each
//! station's records in time order ([`station`]: the recent ones in B-tree maps,
//! older ones in compressed blocks) grouped into shards ([`shard`]), and a
//! [`catalog`] that says where each station lives. A query is a
//! [`scan`] of each shard it touches and a [`merge`] of their sorted hits; a page
//! ends in a [`cursor`] that says where the next one starts. A [`summary`] is
//! computed by each shard over its own stations and merged. The [`store`] keeps a
//! generation on disk, so that a start rebuilds it instead of parsing it again.
//!
//! The front door for queries is [`plan`]: a request planned, what each shard is
//! asked and answers, and the merge into a page or rows, in a handful of types;
//! the engine names those, not the scans, summaries and cursors behind them. The
//! other public modules are those whose functions the service calls ([`load`],
//! [`store`]). What else it names, of modules that stay private, is declared
//! here, each module holding what its types do: a [`Generation`], its
//! [`Catalog`] and [`LoadSummary`] and each shard's [`ShardData`], and a
//! station's records read through [`StationRecords`] (`catalog`, `shard`); the
//! [`Remote`] that the service's `s3://` store supplies (`sealed`); the bound and
//! figures of the decoded-block cache ([`set_cache_capacity`], [`cache_stats`])
//! and a generation's [`MemoryUse`] (`memory`).

use std::ops::Range;
use std::sync::Arc;

use crate::data::catalog::Placement;
use crate::data::load::files::SourceState;
use crate::data::sealed::cache::{self, CacheStats};
use crate::data::shard::{ShardTiers, ShardUnits};
use crate::data::station::StationData;
use crate::data::symbols::Symbols;

pub(crate) mod catalog;
pub(crate) mod cursor;
pub(crate) mod digest;
pub(crate) mod exact;
pub(crate) mod hot;
pub(crate) mod key;
pub mod load;
pub(crate) mod memory;
pub(crate) mod merge;
pub mod plan;
pub(crate) mod scan;
pub(crate) mod sealed;
pub(crate) mod shard;
pub(crate) mod station;
pub mod store;
pub(crate) mod stored;
pub(crate) mod summary;
pub(crate) mod symbols;
pub(crate) mod threads;
pub(crate) mod tier;

/// Every station of a generation and where it lives. A station lives in exactly one
/// shard.
#[derive(Debug, Default)]
pub struct Catalog {
    pub(crate) generation: u64,
    /// Station ids in ascending byte order; a station's rank is its index here.
    pub(crate) stations: Vec<Box<str>>,
    pub(crate) placements: Vec<Placement>,
    pub(crate) symbols: Arc<Symbols>,
    pub(crate) shard_count: usize,
    /// What the load that made this generation found (`/readyz`, the metrics):
    /// figures to read, public where the other fields, which must agree with each
    /// other, are this crate's.
    pub summary: LoadSummary,
    /// What was read of each file, for the next reload to read only what changed.
    pub(crate) sources: Vec<SourceState>,
}

/// What the load that made a generation found, as `/readyz` reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadSummary {
    /// RFC 3339, UTC.
    pub loaded_at: String,
    /// Unit records loaded.
    pub units: u64,
    /// Metric records loaded.
    pub metrics: u64,
    /// Invalid lines skipped (`--on-invalid skip`).
    pub skipped_lines: u64,
    /// Last lines without a line end that do not parse yet (docs/api.md section 8).
    pub pending_lines: u64,
    /// Files held for invalid lines, which serve what they served before (nothing
    /// if they never read cleanly): by a reload under `--on-invalid fail` or
    /// `hold`, or a start-up under `hold` (docs/api.md sections 2 and 8).
    pub held_files: u64,
}

/// An immutable, complete snapshot of the data: what one load produces, a
/// catalog and the shards it places stations on. The engine takes it apart, the
/// catalog shared and each shard handed to its actor.
#[derive(Debug, Default)]
pub struct Generation {
    /// Its catalog: the stations and where each lives.
    pub catalog: Arc<Catalog>,
    /// Each shard's data, in shard order.
    pub shards: Vec<ShardData>,
}

/// A generation's records read a station at a time: every record of a kind in a
/// window, in the contract's order, as `stq export` writes them. A query reads
/// through [`crate::data::plan`] instead.
pub struct StationRecords<'a> {
    /// The catalog of the generation the records are read from.
    pub catalog: &'a Catalog,
    /// Its shards' data, in shard order.
    pub shards: Vec<&'a ShardData>,
}

/// The stations of one shard, in the order the catalog's `Placement::station_index`
/// names: what one shard actor of the engine owns. Declared here, where the engine
/// names it; what it holds and does is [`shard`]'s.
#[derive(Debug, Default)]
pub struct ShardData {
    pub(crate) generation: u64,
    pub(crate) stations: Vec<Arc<StationData>>,
    /// Every unit record of the shard in the contract's order, for queries over many
    /// of its stations: one range walk instead of a search and a merge per station.
    /// Those appended since its last whole build are in `recent` instead.
    pub(crate) units: Arc<ShardUnits>,
    /// The units of records appended since `units` was built; often empty.
    pub(crate) recent: Arc<ShardUnits>,
    /// What names its stations' sealed tiers together, for their units merged
    /// by period.
    pub(crate) sealed: Arc<ShardTiers>,
}

/// Where the store's files are fetched from when its directory does not hold them
/// (an `s3://` store's bucket, issue 35): a start from a copy that holds only the
/// sealed files' indexes reads their blocks by range until the whole file is in
/// the copy (`sealed`). The service supplies it, so that this crate stays free of
/// the network.
pub trait Remote: Send + Sync + std::fmt::Debug {
    /// The bytes of the file `name` in `range`.
    fn read(&self, name: &str, range: Range<u64>) -> std::io::Result<Vec<u8>>;
}

/// Sets the bytes the process's cache of decoded blocks may hold (`--cache-size`):
/// the cache sealed blocks are read through, shared by every generation.
pub fn set_cache_capacity(bytes: u64) {
    cache::set_capacity(bytes);
}

/// What the process's cache of decoded blocks holds and has done (`/metrics`).
/// The caller reads its fields and never names its type, which no path exports.
pub fn cache_stats() -> CacheStats {
    cache::stats()
}

/// A generation's bytes by part, and the records they hold (`memory`: made from a
/// generation by `From`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryUse {
    /// Every part, in the order the table shows them: what it is, as the memory
    /// table names it, and its bytes.
    pub parts: Vec<(&'static str, u64)>,
    /// Unit records the parts hold.
    pub units: u64,
    /// Metric records the parts hold.
    pub metrics: u64,
    /// Bytes of store files mapped rather than read into the heap (the symbol
    /// table's runs after a start from the store): in memory only as far as
    /// lookups touched them, and not in `parts`.
    pub mapped: u64,
}
