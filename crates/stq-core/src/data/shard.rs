//! A shard's stations ([`ShardData`]), and every unit record of the shard once
//! more in one tree in the contract's order. A shard is what one shard actor of the engine owns.
//!
//! Its stations and its shard-wide tree are reference-counted so that the next
//! generation can share what a reload did not change: a station no change touched,
//! and the whole tree of a shard none of whose stations changed or moved in rank.
//! The tree is two: the units as of its last whole build, shared between
//! generations, and the units appended since, a smaller tree that each reload which
//! appends copies and adds to. So a floor that appends all day costs each reload
//! the units appended lately, not the shard's; once the recent tree holds a
//! sixteenth of the other, the two are merged.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use itertools::{Either, Itertools as _};

use crate::data::fault::StorageFault;
use crate::data::key::{Position, RecordKey};
use crate::data::sealed::cache::BlockCache;
use crate::data::sealed::{fresh_id, PeriodUnits};
use crate::data::station::{StationData, UnitEntry};
use crate::data::tuning::TUNING;
use crate::domain::record::Kind;
use crate::domain::time::Window;

/// The stations of one shard, in the order the catalog's `Placement::station_index`
/// names: what one shard actor of the engine owns.
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

/// A unit record in a shard-wide tree: which station holds it, and its entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShardUnit {
    pub(crate) station_index: u32,
    pub(crate) entry: UnitEntry,
}

/// Where a station of a shard built by [`ShardData::updated`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The previous generation's station at this index of the shard, unchanged.
    Shared { previous_index: u32 },
    /// The previous generation's station at this index of the shard, with records
    /// appended: every record it had keeps its stored form where it was.
    Extended,
    /// Built anew: changed or new.
    Built,
}

/// What names a shard's sealed tiers together, for their units merged by period
/// ([`crate::data::sealed::PeriodUnits`]): each station's rank and its tier's
/// identity, by station index, and the periods they hold.
#[derive(Debug, Default)]
pub(crate) struct ShardTiers {
    tiers: Vec<(u32, u64)>,
    /// Every period any of them holds, in order: history may have gaps of
    /// years (a station's clock once wrong), which a read walks past.
    periods: Vec<i64>,
    /// The most units any one period of them holds.
    most_units: u64,
    /// What the merged periods of these tiers are known by: kept while the
    /// tiers and ranks are the same, new when any is not.
    key: u64,
    /// Set once a merged period of these tiers weighed more than the cache
    /// keeps: reads then go station by station, whose blocks it keeps.
    unmerged: AtomicBool,
    /// The cache their blocks are read through (each tier's that holds any),
    /// which keeps their merged periods; none when no tier holds a block, and
    /// then there is no period to merge.
    cache: Option<BlockCache>,
}

impl ShardTiers {
    /// Those of `stations`, whose ranks are `ranks`: `previous`'s if the same.
    fn of(
        stations: &[Arc<StationData>],
        ranks: impl Iterator<Item = u32>,
        previous: Option<&Arc<ShardTiers>>,
    ) -> Arc<ShardTiers> {
        let tiers: Vec<(u32, u64)> = (ranks.zip(stations))
            .map(|(rank, station)| (rank, station.sealed.identity()))
            .collect();
        if let Some(previous) = previous.filter(|previous| previous.tiers == tiers) {
            return Arc::clone(previous);
        }
        let mut units: Vec<(i64, u32)> = (stations.iter())
            .flat_map(|station| station.sealed.periods())
            .collect();
        units.sort_unstable_by_key(|(period, _)| *period);
        let mut periods = Vec::new();
        let mut most_units = 0;
        for same in units.chunk_by(|left, right| left.0 == right.0) {
            periods.push(same[0].0);
            most_units = most_units.max(same.iter().map(|(_, units)| u64::from(*units)).sum());
        }
        Arc::new(ShardTiers {
            tiers,
            periods,
            most_units,
            key: fresh_id(),
            unmerged: AtomicBool::new(false),
            cache: (stations.iter()).find_map(|station| station.sealed.cache().cloned()),
        })
    }

    /// Every period any of its tiers holds, in order.
    pub(crate) fn periods(&self) -> &[i64] {
        &self.periods
    }

    /// Whether a merged period of its tiers would weigh more than the cache
    /// keeps: its largest would at least ([`PeriodUnits::RECORD_BYTES`] a
    /// record), or one did.
    pub(crate) fn unmerged(&self) -> bool {
        let largest_kept = (self.cache.as_ref()).map_or(0, BlockCache::largest_kept);
        self.most_units.saturating_mul(PeriodUnits::RECORD_BYTES) > largest_kept
            || self.unmerged.load(Ordering::Relaxed)
    }

    /// Notes that a merged period of its tiers weighed more than the cache keeps.
    pub(crate) fn set_unmerged(&self) {
        self.unmerged.store(true, Ordering::Relaxed);
    }

    /// The most units any one period of its tiers holds.
    #[cfg(test)]
    pub(crate) fn most_units(&self) -> u64 {
        self.most_units
    }

    /// The cache its tiers' blocks and merged periods are read through: there
    /// is one whenever a tier holds a period.
    pub(crate) fn cache(&self) -> &BlockCache {
        (self.cache.as_ref()).expect("tiers that hold a period hold the cache")
    }

    /// What the merged periods of its tiers are known by.
    pub(crate) fn key(&self) -> u64 {
        self.key
    }

    /// Each station's rank, by station index.
    pub(crate) fn ranks(&self) -> impl Iterator<Item = u32> + '_ {
        self.tiers.iter().map(|(rank, _)| *rank)
    }
}

/// The shard-wide tree's entries.
pub(crate) type ShardUnits = BTreeMap<Position, ShardUnit>;

impl ShardData {
    /// The generation this shard's data belongs to.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A shard of `stations`, whose ranks in the catalog are `ranks`.
    pub(crate) fn new(generation: u64, stations: Vec<StationData>, ranks: &[u32]) -> ShardData {
        ShardData::of_shared(
            generation,
            stations.into_iter().map(Arc::new).collect(),
            ranks,
        )
    }

    /// A shard of `stations`, some perhaps shared with another generation, whose
    /// ranks in the catalog are `ranks`; its shard-wide tree is built anew.
    pub(crate) fn of_shared(
        generation: u64,
        stations: Vec<Arc<StationData>>,
        ranks: &[u32],
    ) -> ShardData {
        let units = stations
            .iter()
            .zip(ranks)
            .enumerate()
            .flat_map(|(station_index, (station, &rank))| shard_units(station, station_index, rank))
            .collect();
        ShardData {
            generation,
            sealed: ShardTiers::of(&stations, ranks.iter().copied(), None),
            stations,
            units: Arc::new(units),
            recent: Arc::default(),
        }
    }

    /// A shard of `stations` (whose ranks are `ranks`) that differs from `previous`
    /// in a few stations: its tree is `previous`'s, without the units of stations
    /// that are gone or `Built` anew, merged with the units of those built anew. So
    /// the work is a copy of the tree, not a sort of it. Every `Shared` station must
    /// have the rank it had in `previous`: the positions of its units are kept.
    pub(crate) fn updated(
        generation: u64,
        previous: &ShardData,
        stations: Vec<Arc<StationData>>,
        origins: &[Origin],
        ranks: &[u32],
    ) -> ShardData {
        let mut renumbered: Vec<Option<u32>> = vec![None; previous.stations.len()];
        for (station_index, origin) in origins.iter().enumerate() {
            if let Origin::Shared { previous_index } = *origin {
                renumbered[previous_index as usize] = Some(station_index as u32);
            }
        }
        let previous_units = previous
            .units
            .iter()
            .merge_by(previous.recent.iter(), |left, right| left.0 < right.0);
        let kept = previous_units.filter_map(|(position, unit)| {
            let station_index = renumbered[unit.station_index as usize]?;
            Some((
                *position,
                ShardUnit {
                    station_index,
                    entry: unit.entry,
                },
            ))
        });
        let mut built: Vec<(Position, ShardUnit)> = origins
            .iter()
            .enumerate()
            .filter(|(_, origin)| !matches!(origin, Origin::Shared { .. }))
            .flat_map(|(station_index, _)| {
                shard_units(
                    &stations[station_index],
                    station_index,
                    ranks[station_index],
                )
            })
            .collect();
        built.sort_unstable_by_key(|(position, _)| *position);
        // Collecting an already sorted sequence bulk-builds the tree without sorting.
        let units = kept
            .merge_by(built, |left, right| left.0 < right.0)
            .collect();
        ShardData {
            generation,
            sealed: ShardTiers::of(&stations, ranks.iter().copied(), Some(&previous.sealed)),
            stations,
            units: Arc::new(units),
            recent: Arc::default(),
        }
    }

    /// A shard of `stations`, each the previous generation's at the same index,
    /// shared or [`Origin::Extended`], whose appended units are `appended`: the
    /// tree of `previous` is shared, and its recent tree copied with `appended`
    /// added (or both merged, once the recent one has grown).
    pub(crate) fn extended(
        generation: u64,
        previous: &ShardData,
        stations: Vec<Arc<StationData>>,
        appended: Vec<(Position, ShardUnit)>,
    ) -> ShardData {
        let mut recent = ShardUnits::clone(&previous.recent);
        recent.extend(appended);
        let sealed = ShardTiers::of(&stations, previous.sealed.ranks(), Some(&previous.sealed));
        if recent.len() * TUNING.recent_share <= previous.units.len() {
            return ShardData {
                generation,
                sealed,
                stations,
                units: Arc::clone(&previous.units),
                recent: Arc::new(recent),
            };
        }
        let units = previous
            .units
            .iter()
            .map(|(position, unit)| (*position, *unit))
            .merge_by(recent, |left, right| left.0 < right.0)
            .collect();
        ShardData {
            generation,
            sealed,
            stations,
            units: Arc::new(units),
            recent: Arc::default(),
        }
    }

    /// The same stations and trees as `previous`, as part of `generation`.
    pub(crate) fn shared(generation: u64, previous: &ShardData) -> ShardData {
        ShardData {
            generation,
            sealed: Arc::clone(&previous.sealed),
            stations: previous.stations.clone(),
            units: Arc::clone(&previous.units),
            recent: Arc::clone(&previous.recent),
        }
    }

    /// The units of the shard-wide trees in `range`, in the contract's order.
    pub(crate) fn units_in(
        &self,
        range: (std::ops::Bound<Position>, std::ops::Bound<Position>),
    ) -> impl Iterator<Item = (&Position, &ShardUnit)> {
        // Most scans find no recent units: they walk the one tree without a merge.
        match self.recent.is_empty() {
            true => Either::Left(self.units.range(range)),
            false => Either::Right(
                self.units
                    .range(range)
                    .merge_by(self.recent.range(range), |left, right| left.0 < right.0),
            ),
        }
    }

    /// A fingerprint of each UTC day's records of `kind` in `window` (which starts
    /// and ends at midnights) of the station at `station_index`, by day number
    /// since 1970-01-01, for the days that hold any (`stq serve --export`, which
    /// writes a day again only when its fingerprint changes). It is made, without
    /// decompressing anything, of what the records are read from: the sealed
    /// blocks' compressed bytes with the pieces they share, and the hot records'
    /// keys and JSON; so it changes whenever a record of the day is added, dropped
    /// or rewritten, and may change too when the same records are sealed again
    /// (a rebuild can encode them otherwise).
    pub(crate) fn day_fingerprints(
        &self,
        station_index: u32,
        kind: Kind,
        window: Window,
    ) -> Result<BTreeMap<i64, u64>, StorageFault> {
        self.stations[station_index as usize].day_fingerprints(kind, window)
    }

    /// How many records the shard holds.
    pub(crate) fn record_count(&self) -> usize {
        self.stations
            .iter()
            .map(|station| station.record_count())
            .sum()
    }
}

/// A station's hot units as entries of the shard-wide tree (its sealed ones are
/// read from the station, see `crate::data::scan`): placed by their position in
/// the contract's order, and naming the station that holds them.
pub(crate) fn shard_units(
    station: &StationData,
    station_index: usize,
    rank: u32,
) -> impl Iterator<Item = (Position, ShardUnit)> + '_ {
    station
        .hot_units()
        .map(move |(key, entry)| shard_unit(station_index, rank, key, entry))
}

/// A unit of the station at `station_index` (of rank `rank`) as an entry of the
/// shard-wide trees.
pub(crate) fn shard_unit(
    station_index: usize,
    rank: u32,
    key: RecordKey,
    entry: UnitEntry,
) -> (Position, ShardUnit) {
    let position = Position {
        instant: key.instant,
        station_rank: rank,
        load_order: key.load_order,
    };
    let unit = ShardUnit {
        station_index: station_index as u32,
        entry,
    };
    (position, unit)
}
