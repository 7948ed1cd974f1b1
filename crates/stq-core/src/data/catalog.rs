//! A generation: the immutable result of one load. Its catalog lists the stations
//! in byte order and says where each one lives; its shards hold the records
//! ([`Generation`], [`Catalog`]), and a generation's records read a station at a
//! time ([`StationRecords`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use itertools::Itertools as _;

use crate::data::cursor::RecordIdentity;
use crate::data::fault::StorageFault;
use crate::data::key::{load_order, Position};
use crate::data::scan::{Matcher, RecordFilter, ScanAnswer, ScanRequest, ShardStation};
use crate::data::shard::ShardData;
use crate::data::sources::{FileStatus, SourceState, Stamps};
use crate::data::symbols::Symbols;
use crate::data::tier::Tier as _;
use crate::domain::record::{Directions, Kind};
use crate::domain::time::{Timestamp, Window};

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

/// Where a station lives: its shard and its index within that shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    /// The shard that holds the station.
    pub shard: u32,
    /// The station's index among its shard's stations.
    pub station_index: u32,
}

impl Catalog {
    /// The stations to read again from the snapshot files, so that the generation
    /// after this one (whose shards are `shards`) reads nothing of the file that
    /// failed with `fault`: those whose sealed tier reads it, or every station
    /// when none does (a file of the symbol table, which every station's records
    /// name).
    pub fn stations_to_repair(
        &self,
        shards: &[Arc<ShardData>],
        fault: &StorageFault,
    ) -> Vec<String> {
        let stations = || self.stations.iter().zip(&self.placements);
        let reading: Vec<String> = stations()
            .filter(|(_, placement)| {
                let shard = &shards[placement.shard as usize];
                let station = &shard.stations[placement.station_index as usize];
                station.sealed.reads_file(&fault.path)
            })
            .map(|(name, _)| name.to_string())
            .collect();
        match reading.is_empty() {
            true => stations().map(|(name, _)| name.to_string()).collect(),
            false => reading,
        }
    }

    /// The catalog of a load or reload: the files' paths and ordinals are those of
    /// `sources`, in load order.
    pub(crate) fn new(
        generation: u64,
        stations: Vec<Box<str>>,
        placements: Vec<Placement>,
        symbols: Arc<Symbols>,
        shard_count: usize,
        summary: LoadSummary,
        sources: Vec<SourceState>,
    ) -> Catalog {
        Catalog {
            generation,
            stations,
            placements,
            symbols,
            shard_count,
            summary,
            sources,
        }
    }

    /// The number of the load that made it: 1 at start-up, then one more per reload.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Station ids in ascending byte order; a station's rank is its index here.
    pub fn stations(&self) -> &[Box<str>] {
        &self.stations
    }

    /// Where the station of `rank` lives.
    pub(crate) fn placement(&self, rank: u32) -> Placement {
        self.placements[rank as usize]
    }

    /// The interned filter values (types, serials, names) of this generation.
    pub(crate) fn symbols(&self) -> &Symbols {
        &self.symbols
    }

    /// How many shards the stations are spread over.
    pub(crate) fn shard_count(&self) -> usize {
        self.shard_count
    }

    /// Every snapshot file's stamp as this generation's loads read them, which
    /// `--watch-poll`'s first look compares the files with.
    pub(crate) fn stamps(&self) -> Stamps {
        Stamps::of_sources(&self.sources)
    }

    /// Every snapshot file in path order, as the admin listener's `/files` reports
    /// it: what this generation serves of it and what its last read found.
    pub(crate) fn file_statuses(&self) -> impl Iterator<Item = FileStatus<'_>> {
        self.sources.iter().map(SourceState::status)
    }

    /// The admin listener's `/files` body (docs/api.md section 8): `{"files":
    /// [...]}`, an object per snapshot file in path order, saying what this
    /// generation serves of it and what its last read found.
    pub fn files_json(&self) -> String {
        let files: Vec<serde_json::Value> = self
            .file_statuses()
            .map(|file| {
                serde_json::json!({
                    "path": file.path,
                    "kind": file.kind,
                    "state": if file.held { "held" } else { "loaded" },
                    "bytes": file.bytes,
                    "records": file.records,
                    "skipped_lines": file.skipped_lines,
                    "pending_lines": file.pending_lines,
                    "errors": file.errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
                })
            })
            .collect();
        serde_json::json!({ "files": files }).to_string()
    }

    /// The identity of the record at `position`, as a cursor names it.
    pub(crate) fn identity_of(&self, position: Position) -> RecordIdentity {
        RecordIdentity {
            instant: position.instant,
            station_id: self.stations[position.station_rank as usize].to_string(),
            path: self.file_of(position.load_order).to_string(),
            line: position.load_order as u32,
        }
    }

    /// A position that every record after `identity` in the contract's order follows
    /// and no other does, whether or not that record, its station or its file is in
    /// this generation: a missing station or file takes the place its id or path
    /// would sort into, before everything that sorts after it.
    pub(crate) fn position_after(&self, identity: &RecordIdentity) -> Position {
        let by_bytes = |probe: &str, wanted: &str| probe.as_bytes().cmp(wanted.as_bytes());
        let (station_rank, found) = match self
            .stations
            .binary_search_by(|probe| by_bytes(probe, &identity.station_id))
        {
            Ok(rank) => (rank as u32, true),
            Err(rank) => (rank as u32, false),
        };
        let load_order = if !found {
            0
        } else {
            match self
                .sources
                .binary_search_by(|probe| by_bytes(&probe.relative, &identity.path))
            {
                Ok(index) => load_order(self.sources[index].ordinal, identity.line),
                // Before every line of the file the path would precede, or after
                // every line of every file (ordinals stay below `u32::MAX`).
                Err(index) => match self.sources.get(index) {
                    Some(source) => load_order(source.ordinal, 0),
                    None => self
                        .sources
                        .last()
                        .map_or(0, |last| load_order(last.ordinal.saturating_add(1), 0)),
                },
            }
        };
        Position {
            instant: identity.instant,
            station_rank,
            load_order,
        }
    }

    /// The relative path of the file a load order's line is in.
    fn file_of(&self, load_order: u64) -> &str {
        let ordinal = (load_order >> 32) as u32;
        let index = self
            .sources
            .binary_search_by_key(&ordinal, |source| source.ordinal)
            .expect("a record's file is in its generation's catalog");
        &self.sources[index].relative
    }

    /// A list filter's values as symbols: any value when none is given; a value
    /// this generation does not hold matches nothing. A lookup in a mapped run
    /// that fails is its store file's fault.
    pub(crate) fn matcher(&self, texts: &[String]) -> Result<Matcher, StorageFault> {
        if texts.is_empty() {
            return Ok(Matcher::Any);
        }
        let symbols = texts.iter().map(|text| self.symbols().lookup(text));
        Ok(Matcher::OneOf(symbols.flatten_ok().try_collect()?))
    }

    /// The rank of the station with this id (its index in byte order), if the
    /// generation has it.
    pub(crate) fn rank(&self, station: &str) -> Option<u32> {
        self.stations
            .binary_search_by(|probe| probe.as_bytes().cmp(station.as_bytes()))
            .ok()
            .map(|rank| rank as u32)
    }
}

impl Generation {
    /// How many of its records are in sealed blocks.
    pub(crate) fn sealed_records(&self) -> u64 {
        (self.shards.iter().flat_map(|shard| &shard.stations))
            .map(|station| (station.sealed.unit_count() + station.sealed.metric_count()) as u64)
            .sum()
    }

    /// Each shard's data, in shard order.
    #[cfg(test)]
    pub(crate) fn shards(&self) -> &[ShardData] {
        &self.shards
    }

    /// Every station's id and the instant of its newest record, in rank order
    /// (the admin listener's freshness gauges).
    pub fn newest_records(&self) -> Vec<(&str, Timestamp)> {
        (self.catalog.stations.iter().zip(&self.catalog.placements))
            .filter_map(|(name, placement)| {
                let station = &self.shards[placement.shard as usize].stations
                    [placement.station_index as usize];
                let (_, (last, _)) = station.first_and_last()?;
                Some((&**name, last.instant))
            })
            .collect()
    }

    /// How many records each shard holds.
    pub fn shard_records(&self) -> Vec<usize> {
        self.shards.iter().map(ShardData::record_count).collect()
    }
}

impl<'a> StationRecords<'a> {
    /// The station of `rank` as its shard's scan names it, and that shard.
    fn station(&self, rank: u32) -> (&'a ShardData, ShardStation) {
        let placement = self.catalog.placement(rank);
        let station = ShardStation {
            rank,
            station_index: placement.station_index,
        };
        (self.shards[placement.shard as usize], station)
    }

    /// The first `cap` records of `kind` of the station of `rank` in `window`.
    fn scan(
        &self,
        rank: u32,
        kind: Kind,
        window: Window,
        cap: usize,
    ) -> Result<(&'a ShardData, ScanAnswer), StorageFault> {
        let (shard, station) = self.station(rank);
        let filter = match kind {
            Kind::Units => RecordFilter::Units {
                unit_types: Matcher::Any,
                unit_serial: Matcher::Any,
                results: Matcher::Any,
                directions: Directions::BOTH,
            },
            Kind::Metrics => RecordFilter::Metrics {
                names: Matcher::Any,
                unit_serial: Matcher::Any,
            },
        };
        let answer = shard.scan(&ScanRequest {
            stations: vec![station],
            window,
            after: None,
            filter,
            cap,
            pick: Default::default(),
        })?;
        Ok((shard, answer))
    }

    /// The instant of the first record of `kind` of the station of `rank` in
    /// `window`, if it has one.
    pub fn first(
        &self,
        rank: u32,
        kind: Kind,
        window: Window,
    ) -> Result<Option<Timestamp>, StorageFault> {
        let (_, answer) = self.scan(rank, kind, window, 1)?;
        Ok(answer.hits.first().map(|hit| hit.position.instant))
    }

    /// Hands each record of `kind` of the station of `rank` in `window`, in the
    /// contract's order, to `each`: its response JSON and its instant. Stops at
    /// the first error `each` returns, and returns it; a store file that fails the
    /// read is its fault, and nothing is handed on.
    pub fn each<E: From<StorageFault>>(
        &self,
        rank: u32,
        kind: Kind,
        window: Window,
        mut each: impl FnMut(&[u8], Timestamp) -> Result<(), E>,
    ) -> Result<(), E> {
        let (shard, answer) = self.scan(rank, kind, window, usize::MAX)?;
        let mut json = Vec::new();
        for hit in &answer.hits {
            json.clear();
            shard.json(hit, &answer.sealed).parts().write_to(&mut json);
            each(&json, hit.position.instant)?;
        }
        Ok(())
    }

    /// A fingerprint of each UTC day (days since 1970-01-01) of `window` that
    /// holds records of `kind` of the station of `rank`: see
    /// [`ShardData::day_fingerprints`].
    pub fn day_fingerprints(
        &self,
        rank: u32,
        kind: Kind,
        window: Window,
    ) -> Result<BTreeMap<i64, u64>, StorageFault> {
        let (shard, station) = self.station(rank);
        shard.day_fingerprints(station.station_index, kind, window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::time::Timestamp;

    fn catalog() -> Catalog {
        Catalog {
            stations: vec!["ST-01".into(), "ST-03".into()],
            sources: vec![
                SourceState::named("a.units.jsonl", 1 << 20),
                SourceState::named("c.units.jsonl", 2 << 20),
            ],
            ..Catalog::default()
        }
    }

    fn identity(station_id: &str, path: &str, line: u32) -> RecordIdentity {
        RecordIdentity {
            instant: Timestamp {
                seconds: 100,
                nanos: 0,
            },
            station_id: station_id.into(),
            path: path.into(),
            line,
        }
    }

    /// A record's position in `catalog`, which holds its station and file.
    fn at(catalog: &Catalog, station: &str, path: &str, line: u32) -> Position {
        let file = (catalog.sources.iter())
            .find(|file| &*file.relative == path)
            .unwrap();
        Position {
            instant: identity(station, path, line).instant,
            station_rank: catalog.rank(station).unwrap(),
            load_order: load_order(file.ordinal, line),
        }
    }

    #[test]
    fn a_record_of_this_generation_is_its_own_position() {
        let catalog = catalog();
        let position = catalog.position_after(&identity("ST-03", "c.units.jsonl", 7));
        assert_eq!(position, at(&catalog, "ST-03", "c.units.jsonl", 7));
        assert_eq!(
            catalog.identity_of(position),
            identity("ST-03", "c.units.jsonl", 7)
        );
    }

    #[test]
    fn a_missing_station_or_file_takes_the_place_it_would_sort_into() {
        let catalog = catalog();
        // ST-02 is gone: ST-01's records at the instant come before, ST-03's after.
        let after = catalog.position_after(&identity("ST-02", "a.units.jsonl", 3));
        assert!(at(&catalog, "ST-01", "c.units.jsonl", 9) < after);
        assert!(at(&catalog, "ST-03", "a.units.jsonl", 1) > after);
        // b.units.jsonl is gone: ST-01's lines of a come before, of c after.
        let after = catalog.position_after(&identity("ST-01", "b.units.jsonl", 3));
        assert!(at(&catalog, "ST-01", "a.units.jsonl", 9) < after);
        assert!(at(&catalog, "ST-01", "c.units.jsonl", 1) > after);
        // d.units.jsonl is gone: after every line of ST-01 at the instant, and a
        // position a scan can resume after (its load order has a successor).
        let after = catalog.position_after(&identity("ST-01", "d.units.jsonl", 3));
        assert!(at(&catalog, "ST-01", "c.units.jsonl", u32::MAX) < after);
        assert!(at(&catalog, "ST-03", "a.units.jsonl", 1) > after);
        assert!(after.load_order < u64::MAX);
    }
}
