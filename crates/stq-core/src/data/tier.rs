//! What a station's index holds of each record ([`UnitEntry`], [`MetricEntry`]),
//! and the one way a station's records are read, whichever tier holds them
//! ([`Tier`]): the hot tier's B-tree maps ([`crate::data::hot`]) or the sealed
//! tier's compressed blocks ([`crate::data::sealed`]). Scans, summaries and memory
//! accounting read a station through [`crate::data::station::StationData`], which
//! merges its tiers; none of them knows which tier a record is in.

use std::ops::{Bound, RangeBounds};

use crate::data::fault::FirstFault;
use crate::data::key::RecordKey;
use crate::data::stored::StoredRecord;
use crate::data::symbols::Symbol;
use crate::domain::record::Direction;

/// A unit record in the index: where its JSON is, and the fields filters and
/// summaries read, so that neither parses the JSON again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UnitEntry {
    pub(crate) bytes: StoredRecord,
    pub(crate) unit_type: Symbol,
    pub(crate) unit_serial: Symbol,
    pub(crate) direction: Direction,
    pub(crate) slot: Symbol,
    pub(crate) mode: Symbol,
    pub(crate) result: Symbol,
}

/// A metric record in the index: where its JSON is, the fields filters and
/// summaries group by, its serial (for a summary's `failing_units`), and its
/// numbers (`NaN` where a field is not numeric, docs/api.md section 10.2). The
/// limits' text is read from the JSON, only for the one record per summary row
/// whose limits the row shows. The serial fills what was padding: the entry is
/// 48 bytes with it as without it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct MetricEntry {
    pub(crate) bytes: StoredRecord,
    pub(crate) name: Symbol,
    pub(crate) slot: Symbol,
    pub(crate) unit_serial: Symbol,
    pub(crate) unit: Symbol,
    pub(crate) value: f64,
    pub(crate) limit_lower: f64,
    pub(crate) limit_upper: f64,
}

// The serial took the padding after the symbols: no entry grew for it.
const _: () = assert!(size_of::<MetricEntry>() == 48);

/// A range of record keys, as every tier is asked for one.
pub(crate) type KeyRange = (Bound<RecordKey>, Bound<RecordKey>);

/// `range` as a [`KeyRange`].
pub(crate) fn key_range(range: impl RangeBounds<RecordKey>) -> KeyRange {
    (range.start_bound().cloned(), range.end_bound().cloned())
}

/// The records of one tier of a station, in time order (by [`RecordKey`]), each
/// read as its key and its entry, whose `bytes` the station's `json` reads.
/// Metrics by name are each tier's own: the sealed tier locates them among a
/// scan's memo as it reads them ([`crate::data::sealed::JsonMemo`]).
///
/// A read of the sealed tier ends at the first block of a store file that cannot
/// be read, and `fault` keeps that file's fault; the caller's result is the fault
/// ([`FirstFault::or`]). The hot tier's records are in memory, and its reads never
/// fail. The fault is kept a block at a time, not carried by every record: a
/// `Result` around each record cost Q1 and Q2 1.3 x the CPU (BENCHMARKS.md).
pub(crate) trait Tier {
    /// The units with keys in `range`.
    fn units_in<'a>(
        &'a self,
        range: KeyRange,
        fault: &'a FirstFault,
    ) -> impl Iterator<Item = (RecordKey, UnitEntry)> + 'a;

    /// The units of serial number `serial` with keys in `range`.
    fn units_of_serial<'a>(
        &'a self,
        serial: Symbol,
        range: KeyRange,
        fault: &'a FirstFault,
    ) -> impl Iterator<Item = (RecordKey, UnitEntry)> + 'a;

    /// The metrics with keys in `range`.
    fn metrics_in<'a>(
        &'a self,
        range: KeyRange,
        fault: &'a FirstFault,
    ) -> impl Iterator<Item = (RecordKey, MetricEntry)> + 'a;

    /// Its first and last record of either kind, by key.
    fn first_and_last(&self) -> Option<((RecordKey, StoredRecord), (RecordKey, StoredRecord))>;

    fn unit_count(&self) -> usize;

    fn metric_count(&self) -> usize;

    /// Its bytes on the heap, by part (`crate::data::memory`); `add` is called
    /// with each part's name and bytes.
    fn memory(&self, add: &mut dyn FnMut(&'static str, u64));
}

/// std's node capacity (`CAPACITY` in `alloc::collections::btree::node`).
const NODE_CAPACITY: usize = 11;

/// The bytes of a tree's nodes, if every node is full: a leaf holds its parent
/// pointer, its index in the parent and length, and 11 keys and values; an internal
/// node holds a leaf's fields and 12 child pointers. Trees collected from sorted
/// sequences are so; std does not say how much a map allocated.
pub(crate) fn tree_bytes<K, V>(tree: &std::collections::BTreeMap<K, V>) -> u64 {
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
