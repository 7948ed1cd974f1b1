//! A shard's stations, and every unit record of the shard once more in one tree in
//! the contract's order. A shard is what one shard actor of the engine owns.
//!
//! Its stations and its shard-wide tree are reference-counted so that the next
//! generation can share what a reload did not change: a station no change touched,
//! and the whole tree of a shard none of whose stations changed or moved in rank.

use std::collections::BTreeMap;
use std::sync::Arc;

use itertools::Itertools as _;

use crate::data::key::Position;
use crate::data::station::{StationData, UnitEntry};

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
    /// Built anew: changed or new.
    Built,
}

/// The stations of one shard, in the order the catalog's `Placement::station_index` names.
#[derive(Debug, Default)]
pub struct ShardData {
    pub(crate) generation: u64,
    pub(crate) stations: Vec<Arc<StationData>>,
    /// Every unit record of the shard in the contract's order, for queries over many
    /// of its stations: one range walk instead of a search and a merge per station.
    pub(crate) units: Arc<BTreeMap<Position, ShardUnit>>,
}

impl ShardData {
    /// The generation this shard's data belongs to.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A shard of `stations`, whose ranks in the catalog are `ranks`.
    pub fn new(generation: u64, stations: Vec<StationData>, ranks: &[u32]) -> ShardData {
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
            stations,
            units: Arc::new(units),
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
        let kept = previous.units.iter().filter_map(|(position, unit)| {
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
            .filter(|(_, origin)| matches!(origin, Origin::Built))
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
            stations,
            units: Arc::new(units),
        }
    }

    /// The same stations and tree as `previous`, as part of `generation`.
    pub(crate) fn shared(generation: u64, previous: &ShardData) -> ShardData {
        ShardData {
            generation,
            stations: previous.stations.clone(),
            units: Arc::clone(&previous.units),
        }
    }

    /// How many records the shard holds.
    pub fn record_count(&self) -> usize {
        self.stations
            .iter()
            .map(|station| station.record_count())
            .sum()
    }
}

/// A station's units as entries of the shard-wide tree: placed by their position in
/// the contract's order, and naming the station that holds them.
fn shard_units(
    station: &StationData,
    station_index: usize,
    rank: u32,
) -> impl Iterator<Item = (Position, ShardUnit)> + '_ {
    station.units.iter().map(move |(key, entry)| {
        let position = Position {
            instant: key.instant,
            station_rank: rank,
            load_order: key.load_order,
        };
        let unit = ShardUnit {
            station_index: station_index as u32,
            entry: *entry,
        };
        (position, unit)
    })
}
