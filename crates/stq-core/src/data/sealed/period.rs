//! A shard's sealed units of one period, every station's, merged in the
//! contract's order: what a read of units over many stations reads,
//! as the hot tier's shard-wide tree lets it read hot units.
//!
//! **Why.** Station by station, fifteen minutes of a hundred stations is a block
//! each: a lookup in the shared cache, then the first touch of each block's
//! time index, keys and JSON, each likely a miss of the CPU's cache. That made
//! such a read cost 2.4 x its CPU all hot, read station by station. Merged,
//! it is a lookup and a search a period, and records whose keys and JSON lie
//! together.
//!
//! **What names one.** The shard's stations' ranks and their sealed tiers'
//! identities ([`super::Sealed::identity`]) together, as a number the shard
//! keeps ([`crate::data::shard::ShardData`]'s `sealed`), and the period. A reload that
//! leaves every sealed tier of a shard alone (a floor appending to its hot
//! tier) keeps the number, so the merged periods stay in the cache; one that
//! seals or drops records of a station gives another, and the old ones leave
//! the cache as least recently used.
//!
//! **What it costs.** A merged period is built from its stations' blocks
//! decoded for it alone (the per-station cache is neither read nor filled), so
//! the cache holds each record's JSON once for such reads; it weighs what a
//! block per station would, and is bounded by `--cache-size` as they are. A
//! shard of many stations makes a heavy one (1000 stations x 7 on two shards:
//! two merged periods and their tiers' pieces weigh 44 MB). One heavier than a
//! shard of the cache holds is not kept, and its shard then reads station by
//! station ([`crate::data::shard::ShardData`]'s `sealed`), whose blocks fit.

use std::ops::{Bound, Range};
use std::sync::Arc;

use super::cache::BlockCache;
use super::rendered::{written, TimeIndex, WholeJson};
use super::{period_start, Decoded, Sealed};
use crate::data::fault::StorageFault;
use crate::data::key::Position;
use crate::data::stored::prefetch_value;
use crate::data::tier::UnitEntry;

/// What merged periods are known by in the cache, beside a block's kinds and
/// parts, and a tier's index parts (0 to 7, `read`).
const PERIOD_UNITS: u32 = 8;

/// The sealed units of one period of a shard's stations, in the contract's
/// order (see the module's doc).
#[derive(Debug)]
pub(crate) struct PeriodUnits {
    positions: Vec<Position>,
    /// Each record's station, by its index in the shard.
    stations: Vec<u32>,
    entries: Vec<UnitEntry>,
    /// Each record's JSON, one after another.
    json: Vec<u8>,
    /// Where each record's JSON ends in `json`.
    ends: Vec<u32>,
    time: TimeIndex,
}

impl PeriodUnits {
    /// What a merged period weighs at least for each of its records, its JSON
    /// aside: whether the cache could keep one is known before it is made.
    pub(crate) const RECORD_BYTES: u64 =
        (size_of::<Position>() + size_of::<UnitEntry>() + 2 * size_of::<u32>()) as u64;

    /// The units of `period` of the tiers `tiers` gives (each station's rank and
    /// sealed tier, by its index in the shard), merged: from `cache`,
    /// where `key` (what names those tiers together) and the period name them,
    /// else merged now and kept there; and whether the cache holds it (one
    /// heavier than a shard of the cache holds is not kept).
    pub(crate) fn of<'a>(
        cache: &BlockCache,
        key: u64,
        period: i64,
        tiers: impl FnOnce() -> Vec<(u32, &'a Sealed)>,
    ) -> Result<(Arc<PeriodUnits>, bool), StorageFault> {
        cache.cached_if_kept((key, PERIOD_UNITS, period), || {
            let merged = PeriodUnits::merge(period, &tiers())?;
            let weight = merged.heap_bytes();
            Ok((merged, weight))
        })
    }

    fn merge(period: i64, tiers: &[(u32, &Sealed)]) -> Result<PeriodUnits, StorageFault> {
        let mut blocks: Vec<(u32, u32, &Sealed, Decoded<UnitEntry>)> = Vec::new();
        for (station, &(rank, sealed)) in tiers.iter().enumerate() {
            let Some(block) = sealed.blocks.get(period)?.filter(|block| block.units > 0) else {
                continue;
            };
            let decoded = sealed.decode(period, &block, true)?;
            blocks.push((station as u32, rank, sealed, decoded));
        }
        // (position, which block, which record of it)
        let mut order: Vec<(Position, u32, u32)> = (blocks.iter().enumerate())
            .flat_map(|(slot, (_, rank, _, decoded))| {
                (decoded.keys.iter().enumerate()).map(move |(index, key)| {
                    let position = Position {
                        instant: key.instant,
                        station_rank: *rank,
                        load_order: key.load_order,
                    };
                    (position, slot as u32, index as u32)
                })
            })
            .collect();
        order.sort_unstable_by_key(|(position, ..)| *position);
        let bytes = (blocks
            .iter()
            .flat_map(|block| block.3.spans.iter().flatten()))
        .map(|span| span.length as usize)
        .sum();
        let mut positions = Vec::with_capacity(order.len());
        let mut stations = Vec::with_capacity(order.len());
        let mut entries = Vec::with_capacity(order.len());
        let mut json = Vec::with_capacity(bytes);
        let mut ends = Vec::with_capacity(order.len());
        for (position, slot, index) in order {
            let (station, _, sealed, decoded) = &blocks[slot as usize];
            positions.push(position);
            stations.push(*station);
            entries.push(decoded.entries[index as usize]);
            for span in decoded.spans[index as usize] {
                json.extend_from_slice(sealed.span(decoded, span));
            }
            ends.push(json.len() as u32);
        }
        Ok(PeriodUnits {
            time: TimeIndex::new(&positions, period_start(period), |position| {
                position.instant.seconds
            }),
            positions,
            stations,
            entries,
            json,
            ends,
        })
    }

    /// Its bytes on the heap and itself: what the cache weighs it by.
    fn heap_bytes(&self) -> u64 {
        (size_of::<Self>()
            + self.positions.capacity() * size_of::<Position>()
            + self.stations.capacity() * size_of::<u32>()
            + self.entries.capacity() * size_of::<UnitEntry>()
            + self.json.capacity()
            + self.ends.capacity() * size_of::<u32>()) as u64
    }

    /// The indexes of its records after `lower` and before `upper`.
    pub(crate) fn indexes_in(&self, lower: Bound<Position>, upper: Position) -> Range<usize> {
        let point = |bound: Position, through: bool| {
            self.time
                .position(&self.positions, bound.instant.seconds, |probe| {
                    *probe < bound || (through && *probe == bound)
                })
        };
        let first = match lower {
            Bound::Included(position) => point(position, false),
            Bound::Excluded(position) => point(position, true),
            Bound::Unbounded => 0,
        };
        first..point(upper, false).max(first)
    }

    /// Its record `index`: its position, its station's index in the shard, and
    /// its entry.
    pub(crate) fn record(&self, index: usize) -> (Position, u32, &UnitEntry) {
        (
            self.positions[index],
            self.stations[index],
            &self.entries[index],
        )
    }
}

impl WholeJson for PeriodUnits {
    fn json(&self, index: usize) -> &[u8] {
        written(&self.json, &self.ends, index)
    }

    fn prefetch(&self, index: usize) {
        if let Some(end) = self.ends.get(index) {
            prefetch_value(end);
        }
    }
}
