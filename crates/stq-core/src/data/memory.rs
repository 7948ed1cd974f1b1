//! Where a generation's bytes go, part by part (BENCHMARKS.md): the
//! records' stored form, each tree of the index, and the symbols, as a
//! [`MemoryUse`].
//!
//! Each tier of a station says what it holds ([`crate::data::tier::Tier::memory`]):
//! arenas and blocks are counted exactly; a tree's bytes are worked out from std's
//! B-tree node layout ([`crate::data::tier::tree_bytes`]), close estimates. What the
//! allocator keeps beyond these (slack, fragmentation) is the difference to the
//! heap or RSS a caller measures.

use crate::data::catalog::Generation;
use crate::data::tier::tree_bytes;

/// A generation's bytes by part, and the records they hold (made from a generation
/// by `From`).
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
/// A generation's bytes by part. Data shared with another generation is counted
/// as this one's.
impl From<&Generation> for MemoryUse {
    fn from(generation: &Generation) -> MemoryUse {
        let mut usage = MemoryUse {
            parts: Vec::new(),
            units: 0,
            metrics: 0,
            mapped: generation.catalog.symbols.mapped_bytes(),
        };
        let mut add = |name: &'static str, bytes: u64| match usage
            .parts
            .iter_mut()
            .find(|(part, _)| *part == name)
        {
            Some((_, part_bytes)) => *part_bytes += bytes,
            None => usage.parts.push((name, bytes)),
        };
        for shard in &generation.shards {
            for station in &shard.stations {
                station.memory(&mut add);
            }
        }
        add(
            "shard-wide unit tree",
            generation
                .shards
                .iter()
                .map(|shard| tree_bytes(&shard.units) + tree_bytes(&shard.recent))
                .sum(),
        );
        add("symbols", generation.catalog.symbols.heap_bytes());
        let stations = || generation.shards.iter().flat_map(|shard| &shard.stations);
        usage.units = stations().map(|station| station.unit_count() as u64).sum();
        usage.metrics = stations()
            .map(|station| station.metric_count() as u64)
            .sum();
        usage
    }
}
