//! Where a generation's bytes go, part by part (BENCHMARKS.md, issue 12): the
//! records' stored form, each tree of the index, and the symbols.
//!
//! Arenas are counted exactly. A tree's bytes are worked out from std's B-tree node
//! layout (up to 11 entries a node, and the trees are collected from sorted
//! sequences, which fills every node), so they are close estimates: std does not
//! say how much a map allocated. What the allocator keeps beyond these (slack,
//! fragmentation) is the difference to the heap or RSS a caller measures.

use std::collections::BTreeMap;
use std::mem::size_of;

use crate::data::catalog::Generation;
use crate::data::station::{Layer, StationData};

/// The bytes of one part of a generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub name: &'static str,
    pub bytes: u64,
}

/// A generation's bytes by part, and the records they hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryUse {
    pub parts: Vec<Part>,
    pub units: u64,
    pub metrics: u64,
}

impl MemoryUse {
    pub fn total(&self) -> u64 {
        self.parts.iter().map(|part| part.bytes).sum()
    }
}

impl Generation {
    /// This generation's bytes by part. Data shared with another generation is
    /// counted as this one's.
    pub fn memory_use(&self) -> MemoryUse {
        let mut usage = MemoryUse {
            parts: Vec::new(),
            units: 0,
            metrics: 0,
        };
        let stations = || self.shards.iter().flat_map(|shard| &shard.stations);
        let sum = |bytes: &dyn Fn(&StationData) -> u64| stations().map(|s| bytes(s)).sum();
        let mut part = |name, bytes| usage.parts.push(Part { name, bytes });
        part(
            "records' stored form (arenas)",
            sum(&|station| layers(station, &|layer| layer.arena.len() as u64)),
        );
        part(
            "pieces of records",
            sum(&|station| layers(station, &|layer| layer.pieces.heap_bytes() as u64)),
        );
        part(
            "unit tree by time",
            sum(&|station| layers(station, &|layer| tree_bytes(&layer.trees.units))),
        );
        part(
            "unit tree by serial",
            sum(&|station| layers(station, &|layer| tree_bytes(&layer.trees.units_by_serial))),
        );
        part(
            "metric tree by time",
            sum(&|station| layers(station, &|layer| tree_bytes(&layer.trees.metrics))),
        );
        part(
            "metric tree by name",
            sum(&|station| layers(station, &|layer| tree_bytes(&layer.trees.metrics_by_name))),
        );
        part(
            "shard-wide unit tree",
            self.shards
                .iter()
                .map(|shard| tree_bytes(&shard.units) + tree_bytes(&shard.recent))
                .sum(),
        );
        part("symbols", self.catalog.symbols.heap_bytes());
        usage.units = sum(&|station| station.unit_count() as u64);
        usage.metrics = sum(&|station| station.metric_count() as u64);
        usage
    }
}

/// The sum of `bytes` over a station's two layers.
fn layers(station: &StationData, bytes: &dyn Fn(&Layer) -> u64) -> u64 {
    station.layers().iter().map(|layer| bytes(layer)).sum()
}

/// std's node capacity (`CAPACITY` in `alloc::collections::btree::node`).
const NODE_CAPACITY: usize = 11;

/// The bytes of a tree's nodes, if every node is full: a leaf holds its parent
/// pointer, its index in the parent and length, and 11 keys and values; an internal
/// node holds a leaf's fields and 12 child pointers.
fn tree_bytes<K, V>(tree: &BTreeMap<K, V>) -> u64 {
    node_bytes(tree.len(), size_of::<K>() + size_of::<V>())
}

fn node_bytes(entries: usize, entry_bytes: usize) -> u64 {
    if entries == 0 {
        return 0;
    }
    let leaf = (size_of::<usize>() + 4 + NODE_CAPACITY * entry_bytes).next_multiple_of(8);
    let internal = leaf + (NODE_CAPACITY + 1) * size_of::<usize>();
    // A full leaf and the separator its parent holds take 12 entries.
    let leaves = entries.div_ceil(NODE_CAPACITY + 1);
    let mut internals = 0;
    let mut level = leaves;
    while level > 1 {
        level = level.div_ceil(NODE_CAPACITY + 1);
        internals += level;
    }
    (leaves * leaf + internals * internal) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_nodes_cost_about_an_entry_and_a_twelfth_of_a_header() {
        assert_eq!(node_bytes(0, 40), 0);
        // One leaf of 11 entries of 40 bytes, with its 12-byte header rounded up.
        assert_eq!(node_bytes(11, 40), 8 + 4 + 440 + 4);
        let million = node_bytes(1_000_000, 40) as f64 / 1e6;
        assert!((40.0..44.0).contains(&million), "{million} bytes an entry");
    }
}
