//! The time index: each station's records in B-tree maps ordered by time, the
//! scans that answer a query over a shard, and the merge of sorted results.
//!
//! This module is pure: it knows nothing of actix or HTTP, owns no threads and does
//! no I/O. A generation's index is built once by the snapshot loader and is never
//! changed afterwards; a reload builds a new one.
//!
//! Order is the contract's (CONTRACT section 6): by instant, then by station id in
//! byte order, then by load order. Station ids are replaced by their rank in the
//! sorted station list of the generation, and load order by `seq` (file index and
//! line number), so the whole order is a comparison of three integers.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use itertools::Itertools;

use crate::model::{Direction, Kind};
use crate::time::Instant;

/// A record's place in the order within one station: its instant, then load order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordKey {
    pub instant: Instant,
    pub seq: u64,
}

/// Load order of a line: its file's index in path order, then its line number.
pub fn load_seq(file_index: u32, line_number: u32) -> u64 {
    (u64::from(file_index) << 32) | u64::from(line_number)
}

/// Where a record's rendered JSON lies in its station's arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start: u32,
    pub len: u32,
}

/// An interned string: unit types, serial numbers and metric names are compared as
/// integers when filtering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Symbol(pub u32);

/// The strings of one generation that filters compare against.
#[derive(Debug, Default)]
pub struct Symbols {
    by_text: HashMap<Box<str>, Symbol>,
}

impl Symbols {
    pub fn intern(&mut self, text: &str) -> Symbol {
        if let Some(symbol) = self.by_text.get(text) {
            return *symbol;
        }
        let symbol = Symbol(self.by_text.len() as u32);
        self.by_text.insert(text.into(), symbol);
        symbol
    }

    pub fn lookup(&self, text: &str) -> Option<Symbol> {
        self.by_text.get(text).copied()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnitEntry {
    pub span: Span,
    pub unit_type: Symbol,
    pub unit_serial: Symbol,
    pub direction: Direction,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricEntry {
    pub span: Span,
    pub name: Symbol,
}

/// One station's records of both kinds, and the bytes of their response JSON.
///
/// Each kind is held in time order, and once more ordered by the field its most
/// selective filter names (serial number, metric name) and then by time, so that a
/// filtered query reads one exact range instead of the station's whole window.
#[derive(Debug, Default)]
pub struct StationData {
    pub arena: Box<[u8]>,
    pub units: BTreeMap<RecordKey, UnitEntry>,
    pub units_by_serial: BTreeMap<(Symbol, RecordKey), UnitEntry>,
    pub metrics: BTreeMap<RecordKey, MetricEntry>,
    pub metrics_by_name: BTreeMap<(Symbol, RecordKey), Span>,
}

impl StationData {
    /// Builds every tree of a station from its records in any order.
    pub fn new(
        arena: Box<[u8]>,
        units: Vec<(RecordKey, UnitEntry)>,
        metrics: Vec<(RecordKey, MetricEntry)>,
    ) -> StationData {
        // Collecting sorts, then bulk-builds densely packed nodes.
        let units_by_serial = units
            .iter()
            .map(|(key, entry)| ((entry.unit_serial, *key), *entry))
            .collect();
        let metrics_by_name = metrics
            .iter()
            .map(|(key, entry)| ((entry.name, *key), entry.span))
            .collect();
        StationData {
            arena,
            units: units.into_iter().collect(),
            units_by_serial,
            metrics: metrics.into_iter().collect(),
            metrics_by_name,
        }
    }

    pub fn json(&self, span: Span) -> &[u8] {
        &self.arena[span.start as usize..(span.start + span.len) as usize]
    }

    pub fn record_count(&self) -> usize {
        self.units.len() + self.metrics.len()
    }
}

/// A unit record in a shard-wide tree: which station holds it, and its entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardUnit {
    pub local: u32,
    pub entry: UnitEntry,
}

/// The stations of one shard, in the order the catalog's `Placement::local` names.
#[derive(Debug, Default)]
pub struct ShardData {
    pub generation: u64,
    pub stations: Vec<StationData>,
    /// Every unit record of the shard in the contract's order, for queries over many
    /// of its stations: one range walk instead of a search and a merge per station.
    pub units: BTreeMap<Position, ShardUnit>,
}

impl ShardData {
    /// A shard of `stations`, whose ranks in the catalog are `ranks`.
    pub fn new(generation: u64, stations: Vec<StationData>, ranks: &[u32]) -> ShardData {
        let units = stations
            .iter()
            .zip(ranks)
            .enumerate()
            .flat_map(|(local, (station, &rank))| {
                station.units.iter().map(move |(key, entry)| {
                    let position = Position {
                        instant: key.instant,
                        station: rank,
                        seq: key.seq,
                    };
                    let unit = ShardUnit {
                        local: local as u32,
                        entry: *entry,
                    };
                    (position, unit)
                })
            })
            .collect();
        ShardData {
            generation,
            stations,
            units,
        }
    }
}

/// Where a station lives: its shard and its index within that shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub shard: u32,
    pub local: u32,
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

/// The last record a page returned; the next page starts strictly after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub instant: Instant,
    pub station: u32,
    pub seq: u64,
}

/// A half-open window `from <= t < to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Window {
    pub from: Instant,
    pub to: Instant,
}

/// A set of symbols a field must be one of, or no constraint at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Matcher {
    Any,
    /// Matches nothing when empty: every requested value was unknown to the data.
    OneOf(Vec<Symbol>),
}

impl Matcher {
    fn matches(&self, symbol: Symbol) -> bool {
        match self {
            Matcher::Any => true,
            Matcher::OneOf(symbols) => symbols.contains(&symbol),
        }
    }

    fn is_impossible(&self) -> bool {
        matches!(self, Matcher::OneOf(symbols) if symbols.is_empty())
    }
}

/// The record filters of a query, with strings already turned into symbols.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordFilter {
    Units {
        unit_types: Matcher,
        unit_serial: Matcher,
        /// Indexed by `Direction as usize`.
        directions: [bool; 2],
    },
    Metrics {
        names: Matcher,
    },
}

impl RecordFilter {
    pub fn kind(&self) -> Kind {
        match self {
            RecordFilter::Units { .. } => Kind::Units,
            RecordFilter::Metrics { .. } => Kind::Metrics,
        }
    }

    fn is_impossible(&self) -> bool {
        match self {
            RecordFilter::Units {
                unit_types,
                unit_serial,
                directions,
            } => {
                unit_types.is_impossible()
                    || unit_serial.is_impossible()
                    || directions == &[false; 2]
            }
            RecordFilter::Metrics { names } => names.is_impossible(),
        }
    }

    fn matches_unit(&self, entry: &UnitEntry) -> bool {
        match self {
            RecordFilter::Units {
                unit_types,
                unit_serial,
                directions,
            } => {
                directions[entry.direction as usize]
                    && unit_types.matches(entry.unit_type)
                    && unit_serial.matches(entry.unit_serial)
            }
            RecordFilter::Metrics { .. } => false,
        }
    }
}

/// A station to scan: its rank (for the order) and its index in the shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StationRef {
    pub rank: u32,
    pub local: u32,
}

/// What one shard is asked: the first `cap` matching records of its stations.
#[derive(Clone, Debug)]
pub struct ScanRequest {
    pub stations: Vec<StationRef>,
    pub window: Window,
    pub after: Option<Position>,
    pub filter: RecordFilter,
    pub cap: usize,
}

/// A matching record: its place in the contract's order and where its bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    pub position: Position,
    pub local: u32,
    pub span: Span,
}

impl ShardData {
    /// The first `request.cap` matching records of the requested stations, in order.
    ///
    /// Picks the tree that reads least: a serial number or metric names are exact
    /// ranges of the per-station secondary trees; units of many stations are one walk
    /// of the shard-wide tree; anything else walks each station's time range.
    pub fn scan(&self, request: &ScanRequest) -> Vec<Hit> {
        if request.cap == 0 || request.filter.is_impossible() {
            return Vec::new();
        }
        let filter = &request.filter;
        match filter {
            RecordFilter::Units {
                unit_serial: Matcher::OneOf(serials),
                ..
            } => self.merge_stations(request, |data, station, lower, upper| {
                // A serial number is single-valued: one exact range.
                Box::new(serials.iter().flat_map(move |&serial| {
                    data.units_by_serial
                        .range((serial, lower)..(serial, upper))
                        .filter(|(_, entry)| filter.matches_unit(entry))
                        .map(move |((_, key), entry)| station.hit(key, entry.span))
                }))
            }),
            RecordFilter::Units { .. } if request.stations.len() * 4 >= self.stations.len() => {
                self.scan_shard_units(request)
            }
            RecordFilter::Units { .. } => {
                self.merge_stations(request, |data, station, lower, upper| {
                    Box::new(
                        data.units
                            .range(lower..upper)
                            .filter(|(_, entry)| filter.matches_unit(entry))
                            .map(move |(key, entry)| station.hit(key, entry.span)),
                    )
                })
            }
            RecordFilter::Metrics {
                names: Matcher::OneOf(names),
            } => {
                // One stream per (station, name): each is an exact range in time order.
                let streams = request.stations.iter().flat_map(|&station| {
                    names.iter().filter_map(move |&name| {
                        let data = self.stations.get(station.local as usize)?;
                        let (lower, upper) = station_bounds(request, station.rank)?;
                        Some(
                            data.metrics_by_name
                                .range((name, lower)..(name, upper))
                                .map(move |((_, key), span)| station.hit(key, *span)),
                        )
                    })
                });
                merge_sorted(streams.collect(), request.cap)
            }
            RecordFilter::Metrics { .. } => {
                self.merge_stations(request, |data, station, lower, upper| {
                    Box::new(
                        data.metrics
                            .range(lower..upper)
                            .map(move |(key, entry)| station.hit(key, entry.span)),
                    )
                })
            }
        }
    }

    /// Merges one stream per requested station, each made by `stream` from the
    /// station's data and its key bounds.
    fn merge_stations<'a>(
        &'a self,
        request: &'a ScanRequest,
        stream: impl Fn(
            &'a StationData,
            StationRef,
            RecordKey,
            RecordKey,
        ) -> Box<dyn Iterator<Item = Hit> + 'a>,
    ) -> Vec<Hit> {
        let streams = request.stations.iter().filter_map(|&station| {
            let data = self.stations.get(station.local as usize)?;
            let (lower, upper) = station_bounds(request, station.rank)?;
            Some(stream(data, station, lower, upper))
        });
        merge_sorted(streams.collect(), request.cap)
    }

    /// Units of many stations: one walk of the shard-wide tree, which is already in
    /// the contract's order.
    fn scan_shard_units(&self, request: &ScanRequest) -> Vec<Hit> {
        let mut wanted = vec![false; self.stations.len()];
        for station in &request.stations {
            if let Some(slot) = wanted.get_mut(station.local as usize) {
                *slot = true;
            }
        }
        let start = Position {
            instant: request.window.from,
            station: 0,
            seq: 0,
        };
        let end = Position {
            instant: request.window.to,
            station: 0,
            seq: 0,
        };
        let lower = match request.after {
            Some(after) if after >= start => Bound::Excluded(after),
            _ => Bound::Included(start),
        };
        let empty = match lower {
            Bound::Excluded(after) => after >= end,
            _ => start >= end,
        };
        if empty {
            return Vec::new();
        }
        self.units
            .range((lower, Bound::Excluded(end)))
            .filter(|(_, unit)| {
                wanted[unit.local as usize] && request.filter.matches_unit(&unit.entry)
            })
            .take(request.cap)
            .map(|(position, unit)| Hit {
                position: *position,
                local: unit.local,
                span: unit.entry.span,
            })
            .collect()
    }

    pub fn json(&self, hit: &Hit) -> &[u8] {
        self.stations[hit.local as usize].json(hit.span)
    }
}

impl StationRef {
    /// The hit of this station's record at `key`.
    fn hit(self, key: &RecordKey, span: Span) -> Hit {
        Hit {
            position: Position {
                instant: key.instant,
                station: self.rank,
                seq: key.seq,
            },
            local: self.local,
            span,
        }
    }
}

/// The key range `[lower, upper)` of a station for the request's window and cursor;
/// `None` when it is empty.
fn station_bounds(request: &ScanRequest, rank: u32) -> Option<(RecordKey, RecordKey)> {
    let lower = lower_bound(request.window.from, request.after, rank)?;
    let upper = RecordKey {
        instant: request.window.to,
        seq: 0,
    };
    (lower < upper).then_some((lower, upper))
}

/// The first key of a station that may follow both `from` and the cursor position.
/// `None` when nothing of the station can follow.
fn lower_bound(from: Instant, after: Option<Position>, rank: u32) -> Option<RecordKey> {
    let window_start = RecordKey {
        instant: from,
        seq: 0,
    };
    let Some(after) = after else {
        return Some(window_start);
    };
    let resume = match rank.cmp(&after.station) {
        // Earlier stations come first among equal instants: only later instants follow.
        std::cmp::Ordering::Less => RecordKey {
            instant: next_nanosecond(after.instant)?,
            seq: 0,
        },
        std::cmp::Ordering::Equal => RecordKey {
            instant: after.instant,
            seq: after.seq.checked_add(1)?,
        },
        std::cmp::Ordering::Greater => RecordKey {
            instant: after.instant,
            seq: 0,
        },
    };
    Some(resume.max(window_start))
}

fn next_nanosecond(instant: Instant) -> Option<Instant> {
    if instant.nanos < 999_999_999 {
        Some(Instant {
            seconds: instant.seconds,
            nanos: instant.nanos + 1,
        })
    } else {
        Some(Instant {
            seconds: instant.seconds.checked_add(1)?,
            nanos: 0,
        })
    }
}

impl PartialOrd for Hit {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Hit {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.position.cmp(&other.position)
    }
}

/// Merges sorted streams into the first `cap` items of their sorted union.
pub fn merge_sorted<I, T>(streams: Vec<I>, cap: usize) -> Vec<T>
where
    I: Iterator<Item = T>,
    T: Ord,
{
    let mut streams = streams;
    match streams.len() {
        0 => Vec::new(),
        1 => streams.pop().into_iter().flatten().take(cap).collect(),
        _ => streams.into_iter().kmerge().take(cap).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instant(seconds: i64) -> Instant {
        Instant { seconds, nanos: 0 }
    }

    /// A shard with two stations: rank 0 has units at 10, 20, 20 (two lines), 30;
    /// rank 1 has units at 20 and 40.
    fn shard() -> ShardData {
        let mut symbols = Symbols::default();
        let board = symbols.intern("board");
        let serial = symbols.intern("SN");
        let station = |times: &[(i64, u64, Direction)]| {
            let units = times
                .iter()
                .map(|&(seconds, seq, direction)| {
                    let key = RecordKey {
                        instant: instant(seconds),
                        seq,
                    };
                    let entry = UnitEntry {
                        span: Span { start: 0, len: 0 },
                        unit_type: board,
                        unit_serial: serial,
                        direction,
                    };
                    (key, entry)
                })
                .collect();
            StationData::new(Box::default(), units, Vec::new())
        };
        let stations = vec![
            station(&[
                (10, 1, Direction::Output),
                (20, 2, Direction::Output),
                (20, 3, Direction::Input),
                (30, 4, Direction::Output),
            ]),
            station(&[(20, 5, Direction::Output), (40, 6, Direction::Output)]),
        ];
        ShardData::new(1, stations, &[0, 1])
    }

    fn request(from: i64, to: i64, after: Option<Position>, cap: usize) -> ScanRequest {
        ScanRequest {
            stations: vec![
                StationRef { rank: 0, local: 0 },
                StationRef { rank: 1, local: 1 },
            ],
            window: Window {
                from: instant(from),
                to: instant(to),
            },
            after,
            filter: RecordFilter::Units {
                unit_types: Matcher::Any,
                unit_serial: Matcher::Any,
                directions: [true, true],
            },
            cap,
        }
    }

    fn order(hits: &[Hit]) -> Vec<(i64, u32, u64)> {
        hits.iter()
            .map(|hit| {
                (
                    hit.position.instant.seconds,
                    hit.position.station,
                    hit.position.seq,
                )
            })
            .collect()
    }

    #[test]
    fn ties_order_by_station_then_load_order() {
        let hits = shard().scan(&request(0, 100, None, 100));
        assert_eq!(
            order(&hits),
            [
                (10, 0, 1),
                (20, 0, 2),
                (20, 0, 3),
                (20, 1, 5),
                (30, 0, 4),
                (40, 1, 6)
            ]
        );
    }

    #[test]
    fn the_window_is_half_open() {
        assert_eq!(order(&shard().scan(&request(20, 40, None, 100))).len(), 4);
        assert_eq!(order(&shard().scan(&request(20, 21, None, 100))).len(), 3);
        assert!(shard().scan(&request(41, 100, None, 100)).is_empty());
    }

    #[test]
    fn the_cap_keeps_the_first_records() {
        assert_eq!(
            order(&shard().scan(&request(0, 100, None, 2))),
            [(10, 0, 1), (20, 0, 2)]
        );
    }

    #[test]
    fn resuming_after_every_position_returns_each_record_once() {
        let all = shard().scan(&request(0, 100, None, 100));
        for (index, hit) in all.iter().enumerate() {
            let rest = shard().scan(&request(0, 100, Some(hit.position), 100));
            assert_eq!(
                order(&rest),
                order(&all[index + 1..]),
                "after {:?}",
                hit.position
            );
        }
    }

    #[test]
    fn filters_select_by_symbol_and_direction() {
        let mut only_input = request(0, 100, None, 100);
        only_input.filter = RecordFilter::Units {
            unit_types: Matcher::Any,
            unit_serial: Matcher::Any,
            directions: [true, false],
        };
        assert_eq!(order(&shard().scan(&only_input)), [(20, 0, 3)]);

        let mut unknown_type = request(0, 100, None, 100);
        unknown_type.filter = RecordFilter::Units {
            unit_types: Matcher::OneOf(vec![]),
            unit_serial: Matcher::Any,
            directions: [true, true],
        };
        assert!(shard().scan(&unknown_type).is_empty());
    }

    #[test]
    fn merging_keeps_order_and_cap() {
        let merged = merge_sorted(
            vec![vec![1, 4, 9].into_iter(), vec![2, 3, 10].into_iter()],
            5,
        );
        assert_eq!(merged, [1, 2, 3, 4, 9]);
        assert_eq!(
            merge_sorted(Vec::<std::vec::IntoIter<u8>>::new(), 5),
            Vec::<u8>::new()
        );
    }
}
