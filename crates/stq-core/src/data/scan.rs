//! The scan of one shard: the first `cap` records of some of its stations that match
//! a query's window, cursor and filters, in the contract's order.
//!
//! Pure and immutable: a generation's index is built once by the snapshot loader
//! and never changed; a scan only reads it.

use std::cell::RefCell;
use std::ops::Bound;
use std::sync::Arc;

use itertools::Either;

use crate::data::fault::{FirstFault, StorageFault};
use crate::data::key::{Position, RecordKey};
use crate::data::merge::merge_sorted;
use crate::data::sealed::{
    any_remote, is_sealed, period_of, period_start, prefetch, JsonMemo, PeriodUnits,
};
use crate::data::shard::ShardData;
use crate::data::station::{MetricEntry, StationData, UnitEntry};
use crate::data::stored::{RecordJson, StoredRecord};
use crate::data::symbols::Symbol;
use crate::domain::record::Directions;
use crate::domain::time::{Timestamp, Window};

/// A set of symbols a field must be one of, or no constraint at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Matcher {
    /// Every value matches.
    Any,
    /// Matches nothing when empty: every requested value was unknown to the data.
    OneOf(Vec<Symbol>),
}

impl Matcher {
    pub(crate) fn matches(&self, symbol: Symbol) -> bool {
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
pub(crate) enum RecordFilter {
    /// A unit query's filters.
    Units {
        /// The `unit_type` values asked for.
        unit_types: Matcher,
        /// The `unit_serial` asked for.
        unit_serial: Matcher,
        /// Every spelling of the `result` values asked for (docs/api.md section 4).
        results: Matcher,
        /// The directions asked for.
        directions: Directions,
    },
    /// A metric query's filters.
    Metrics {
        /// The metric names asked for.
        names: Matcher,
        /// The `unit_serial` asked for.
        unit_serial: Matcher,
    },
}

impl RecordFilter {
    fn is_impossible(&self) -> bool {
        match self {
            RecordFilter::Units {
                unit_types,
                unit_serial,
                results,
                directions,
            } => {
                unit_types.is_impossible()
                    || unit_serial.is_impossible()
                    || results.is_impossible()
                    || directions.is_empty()
            }
            RecordFilter::Metrics { names, unit_serial } => {
                names.is_impossible() || unit_serial.is_impossible()
            }
        }
    }

    fn matches_unit(&self, entry: &UnitEntry) -> bool {
        match self {
            RecordFilter::Units {
                unit_types,
                unit_serial,
                results,
                directions,
            } => {
                directions.contains(entry.direction)
                    && unit_types.matches(entry.unit_type)
                    && unit_serial.matches(entry.unit_serial)
                    && results.matches(entry.result)
            }
            RecordFilter::Metrics { .. } => false,
        }
    }

    fn matches_metric(&self, entry: &MetricEntry) -> bool {
        match self {
            RecordFilter::Metrics { names, unit_serial } => {
                names.matches(entry.name) && unit_serial.matches(entry.unit_serial)
            }
            RecordFilter::Units { .. } => false,
        }
    }
}

/// A station to scan: its rank (for the order) and its index in the shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShardStation {
    /// Its rank in the catalog: where its records fall in the order.
    pub(crate) rank: u32,
    /// Its index among the shard's stations.
    pub(crate) station_index: u32,
}

/// Which records at given positions a scan may return, beside its window and
/// filters: a stream's steps read a generation's additions alone, or the
/// records of an older generation without those added since (docs/api.md
/// section 14.2).
#[derive(Clone, Debug, Default)]
pub(crate) enum Pick {
    /// Every record.
    #[default]
    All,
    /// Only the records at these positions (sorted).
    Only(Arc<[Position]>),
    /// Every record but those at these positions (sorted).
    Except(Arc<[Position]>),
}

impl Pick {
    /// Whether the record at `position` may be returned.
    pub(crate) fn keeps(&self, position: &Position) -> bool {
        match self {
            Pick::All => true,
            Pick::Only(positions) => positions.binary_search(position).is_ok(),
            Pick::Except(positions) => positions.binary_search(position).is_err(),
        }
    }

    /// `hits` with those it does not keep left out; `hits` itself when it keeps all.
    fn applied<'a>(
        &'a self,
        hits: Box<dyn Iterator<Item = Hit> + 'a>,
    ) -> Box<dyn Iterator<Item = Hit> + 'a> {
        match self {
            Pick::All => hits,
            _ => Box::new(hits.filter(|hit| self.keeps(&hit.position))),
        }
    }
}

/// What one shard is asked: the first `cap` matching records of its stations.
#[derive(Clone, Debug)]
pub(crate) struct ScanRequest {
    /// The shard's stations to read.
    pub(crate) stations: Vec<ShardStation>,
    /// The window records must fall in.
    pub(crate) window: Window,
    /// Where the previous page ended: only records after it match.
    pub(crate) after: Option<Position>,
    /// What a record must match.
    pub(crate) filter: RecordFilter,
    /// At most this many hits.
    pub(crate) cap: usize,
    /// Which records, by position, it may return.
    pub(crate) pick: Pick,
}

/// A matching record: its place in the contract's order and where its bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hit {
    /// Its place in the contract's order.
    pub(crate) position: Position,
    /// Its station's index among the shard's stations.
    pub(crate) station_index: u32,
    /// Where its JSON lies: in its station's arena, or for a sealed record in
    /// the answer's `sealed`.
    pub(crate) bytes: StoredRecord,
}

/// What a shard's scan answers: its hits, and the blocks that hold those that are
/// sealed records, rendered (a sealed hit's `bytes` say which block and record,
/// see [`ShardData::json`]).
#[derive(Debug, Default)]
pub(crate) struct ScanAnswer {
    /// The matching records, in order.
    pub(crate) hits: Vec<Hit>,
    /// The blocks of the sealed hits.
    pub(crate) sealed: SealedJson,
}

/// The blocks a scan's sealed hits are in, which [`ShardData::json`] writes
/// their JSON from: the answer writes each record once, from where its block
/// holds it whole.
#[derive(Debug, Default)]
pub(crate) struct SealedJson {
    memo: JsonMemo,
}

impl SealedJson {
    /// The length of the JSON of the sealed hit whose `bytes` are `record`.
    pub(crate) fn length(&self, record: StoredRecord) -> usize {
        self.memo.json(record).len()
    }
}

impl ShardData {
    /// Fetches at once what reading `stations`' records in `window` would fetch
    /// from a remote one request after another: on an `s3://` store's replica
    /// whose copy does not hold their sealed files yet; else nothing.
    pub(crate) fn fetch_ahead(&self, stations: &[ShardStation], window: &Window) {
        if !any_remote() {
            return;
        }
        let key = |instant| RecordKey {
            instant,
            load_order: 0,
        };
        let range = (
            Bound::Included(key(window.from)),
            Bound::Excluded(key(window.to)),
        );
        let mut reads = Vec::new();
        for station in stations {
            if let Some(data) = self.stations.get(station.station_index as usize) {
                data.sealed.ask_ahead(range, &mut reads);
            }
        }
        prefetch(reads);
    }

    /// Fetches ahead what reading `request` would fetch ([`ShardData::fetch_ahead`]):
    /// of every station of the shard when it reads their sealed units merged by
    /// period, which reads the blocks of stations it was not asked for too.
    pub(crate) fn fetch_ahead_records(&self, request: &ScanRequest) {
        if !any_remote() {
            return;
        }
        if !self.reads_merged(request) {
            return self.fetch_ahead(&request.stations, &request.window);
        }
        let every: Vec<ShardStation> = (self.sealed.ranks().enumerate())
            .map(|(station_index, rank)| ShardStation {
                rank,
                station_index: station_index as u32,
            })
            .collect();
        self.fetch_ahead(&every, &request.window);
    }

    /// Whether `request` reads units of many stations: one walk of the
    /// shard-wide tree and of their sealed units merged by period (unless a
    /// merged period of this shard was too heavy for the cache).
    fn reads_merged(&self, request: &ScanRequest) -> bool {
        !self.sealed.unmerged()
            && matches!(
                request.filter,
                RecordFilter::Units {
                    unit_serial: Matcher::Any,
                    ..
                }
            )
            && request.stations.len() * 4 >= self.stations.len()
    }

    /// The first `request.cap` matching records of the requested stations, in order,
    /// with the JSON of those that are sealed; a store file that fails a read of
    /// the scan's is its fault.
    pub(crate) fn scan(&self, request: &ScanRequest) -> Result<ScanAnswer, StorageFault> {
        let mut memo = JsonMemo::default();
        let hits = self.scan_hits(request, &mut memo)?;
        Ok(ScanAnswer {
            hits,
            sealed: SealedJson { memo },
        })
    }

    /// The first `request.cap` matching records of the requested stations, in
    /// order; a sealed one's `bytes` locate it among `memo`'s blocks.
    ///
    /// Picks the tree that reads least: a serial number or metric names are exact
    /// ranges of the per-station secondary trees; units of many stations are one walk
    /// of the shard-wide tree and of their sealed units merged by period; anything
    /// else walks each station's time range.
    fn scan_hits(
        &self,
        request: &ScanRequest,
        memo: &mut JsonMemo,
    ) -> Result<Vec<Hit>, StorageFault> {
        if request.cap == 0 || request.filter.is_impossible() {
            return Ok(Vec::new());
        }
        let filter = &request.filter;
        let fault = FirstFault::default();
        let fault = &fault;
        let hits = match filter {
            RecordFilter::Units {
                unit_serial: Matcher::OneOf(serials),
                ..
            } => {
                // A serial number is single-valued: one exact range. Sealed hits
                // are located among the memo's blocks as each block is read.
                let located = RefCell::new(std::mem::take(memo));
                let hits = self.merge_stations(request, |data, station, lower, upper| {
                    let located = &located;
                    Box::new(serials.iter().flat_map(move |&serial| {
                        (data.units_of_serial_located(serial, lower..upper, located, fault))
                            .filter(|(_, entry)| filter.matches_unit(entry))
                            .map(move |(key, entry)| station.hit(&key, entry.bytes))
                    }))
                });
                *memo = located.into_inner();
                return fault.or(hits);
            }
            RecordFilter::Units { .. } if self.reads_merged(request) => {
                return self.scan_shard_units(request, memo);
            }
            RecordFilter::Units { .. } => {
                self.merge_stations(request, |data, station, lower, upper| {
                    Box::new(
                        (data.units_in(lower..upper, fault))
                            .filter(|(_, entry)| filter.matches_unit(entry))
                            .map(move |(key, entry)| station.hit(&key, entry.bytes)),
                    )
                })
            }
            RecordFilter::Metrics {
                names: Matcher::OneOf(names),
                unit_serial: Matcher::Any,
            } => {
                // One stream per (station, name): each is an exact range in time
                // order. Their sealed hits are located among the memo's blocks as
                // each block is read, not hit by hit afterwards.
                let located = RefCell::new(std::mem::take(memo));
                let streams = request.stations.iter().flat_map(|&station| {
                    let located = &located;
                    names.iter().filter_map(move |&name| {
                        let data = self.stations.get(station.station_index as usize)?;
                        let (lower, upper) = station_bounds(request, station.rank)?;
                        let stream: Box<dyn Iterator<Item = Hit>> = Box::new(
                            (data.metrics_of_name(name, lower..upper, located, fault))
                                .map(move |(key, bytes)| station.hit(&key, bytes)),
                        );
                        Some(request.pick.applied(stream))
                    })
                });
                let hits = merge_sorted(streams.collect(), request.cap);
                *memo = located.into_inner();
                return fault.or(hits);
            }
            // A serial number on metrics has no tree of its own: the time range,
            // filtered (a unit's measurements are a few of a station's records).
            RecordFilter::Metrics { .. } => {
                self.merge_stations(request, |data, station, lower, upper| {
                    Box::new(
                        (data.metrics_in(lower..upper, fault))
                            .filter(|(_, entry)| filter.matches_metric(entry))
                            .map(move |(key, entry)| station.hit(&key, entry.bytes)),
                    )
                })
            }
        };
        let mut hits = fault.or(hits)?;
        for hit in hits.iter_mut().filter(|hit| is_sealed(hit.bytes)) {
            hit.bytes = self.stations[hit.station_index as usize].locate_json(hit.bytes, memo)?;
        }
        Ok(hits)
    }

    /// Merges one stream per requested station, each made by `stream` from the
    /// station's data and its key bounds.
    fn merge_stations<'a>(
        &'a self,
        request: &'a ScanRequest,
        stream: impl Fn(
            &'a StationData,
            ShardStation,
            RecordKey,
            RecordKey,
        ) -> Box<dyn Iterator<Item = Hit> + 'a>,
    ) -> Vec<Hit> {
        let streams = request.stations.iter().filter_map(|&station| {
            let data = self.stations.get(station.station_index as usize)?;
            let (lower, upper) = station_bounds(request, station.rank)?;
            Some(request.pick.applied(stream(data, station, lower, upper)))
        });
        merge_sorted(streams.collect(), request.cap)
    }

    /// Units of many stations: one walk of the shard-wide tree, which is already in
    /// the contract's order, merged with their sealed units, a period of the
    /// shard's stations merged at a time ([`PeriodUnits`]); sealed hits are
    /// located among `memo`'s blocks.
    fn scan_shard_units(
        &self,
        request: &ScanRequest,
        memo: &mut JsonMemo,
    ) -> Result<Vec<Hit>, StorageFault> {
        let mut wanted = vec![false; self.stations.len()];
        for station in &request.stations {
            if let Some(slot) = wanted.get_mut(station.station_index as usize) {
                *slot = true;
            }
        }
        let start = Position {
            instant: request.window.from,
            station_rank: 0,
            load_order: 0,
        };
        let end = Position {
            instant: request.window.to,
            station_rank: 0,
            load_order: 0,
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
            return Ok(Vec::new());
        }
        let wanted = |station_index: u32, entry: &UnitEntry| {
            wanted[station_index as usize] && request.filter.matches_unit(entry)
        };
        let hot = self
            .units_in((lower, Bound::Excluded(end)))
            .filter(|(position, unit)| {
                wanted(unit.station_index, &unit.entry) && request.pick.keeps(position)
            })
            .map(|(position, unit)| Hit {
                position: *position,
                station_index: unit.station_index,
                bytes: unit.entry.bytes,
            });
        let sealed = self.sealed_units(lower, end, request, &wanted, memo)?;
        if sealed.is_empty() {
            return Ok(hot.take(request.cap).collect());
        }
        Ok(merge_sorted(
            vec![Either::Left(sealed.into_iter()), Either::Right(hot)],
            request.cap,
        ))
    }

    /// The first `request.cap` sealed units after `lower` and before `end` that
    /// `wanted` (by station index and entry) and the request's pick keep, in
    /// order, located among `memo`'s blocks: a period of the shard's stations at
    /// a time.
    fn sealed_units(
        &self,
        lower: Bound<Position>,
        end: Position,
        request: &ScanRequest,
        wanted: &dyn Fn(u32, &UnitEntry) -> bool,
        memo: &mut JsonMemo,
    ) -> Result<Vec<Hit>, StorageFault> {
        // The period of the last instant before `end`.
        let last = match period_start(period_of(end.instant)) < end.instant {
            true => period_of(end.instant),
            false => period_of(end.instant) - 1,
        };
        let periods = self.sealed.periods();
        let first = match lower {
            Bound::Included(position) | Bound::Excluded(position) => {
                periods.partition_point(|period| *period < period_of(position.instant))
            }
            Bound::Unbounded => 0,
        };
        let mut hits = Vec::new();
        for &period in periods[first..]
            .iter()
            .take_while(|period| **period <= last)
        {
            let (merged, kept) =
                PeriodUnits::of(self.sealed.cache(), self.sealed.key(), period, || {
                    (self.sealed.ranks().zip(&self.stations))
                        .map(|(rank, station)| (rank, &*station.sealed))
                        .collect()
                })?;
            if !kept {
                self.sealed.set_unmerged();
            }
            let mut slot = None;
            for index in merged.indexes_in(lower, end) {
                let (position, station_index, entry) = merged.record(index);
                if !wanted(station_index, entry) || !request.pick.keeps(&position) {
                    continue;
                }
                let slot = *slot.get_or_insert_with(|| memo.hold(Arc::clone(&merged)));
                hits.push(Hit {
                    position,
                    station_index,
                    bytes: JsonMemo::locator(slot, index as u32),
                });
                if hits.len() == request.cap {
                    return Ok(hits);
                }
            }
        }
        Ok(hits)
    }

    /// A hit's response JSON; `sealed` is the [`ScanAnswer::sealed`] of the scan
    /// that found it.
    pub(crate) fn json<'a>(&'a self, hit: &Hit, sealed: &'a SealedJson) -> RecordJson<'a> {
        match is_sealed(hit.bytes) {
            true => RecordJson::whole(sealed.memo.json(hit.bytes)),
            false => self.stations[hit.station_index as usize].json(hit.bytes),
        }
    }

    /// Asks the CPU for what [`ShardData::json`] reads first of `hit` (where its
    /// station's arena and pieces are; of a sealed hit, where its JSON ends in
    /// its block), for a record written a few records later: an answer over many
    /// stations or blocks otherwise waits on each one's cache miss in turn.
    pub(crate) fn prefetch_location(&self, hit: &Hit, sealed: &SealedJson) {
        match is_sealed(hit.bytes) {
            true => sealed.memo.prefetch(hit.bytes),
            false => self.stations[hit.station_index as usize].prefetch_locations(),
        }
    }
}

impl ShardStation {
    /// The hit of this station's record at `key`.
    fn hit(self, key: &RecordKey, bytes: StoredRecord) -> Hit {
        Hit {
            position: Position {
                instant: key.instant,
                station_rank: self.rank,
                load_order: key.load_order,
            },
            station_index: self.station_index,
            bytes,
        }
    }
}

/// The key range `[lower, upper)` of a station for the request's window and cursor;
/// `None` when it is empty.
fn station_bounds(request: &ScanRequest, rank: u32) -> Option<(RecordKey, RecordKey)> {
    let lower = lower_bound(request.window.from, request.after, rank)?;
    let upper = RecordKey {
        instant: request.window.to,
        load_order: 0,
    };
    (lower < upper).then_some((lower, upper))
}

/// The first key of a station that may follow both `from` and the cursor position.
/// `None` when nothing of the station can follow.
fn lower_bound(from: Timestamp, after: Option<Position>, rank: u32) -> Option<RecordKey> {
    let window_start = RecordKey {
        instant: from,
        load_order: 0,
    };
    let Some(after) = after else {
        return Some(window_start);
    };
    let resume = match rank.cmp(&after.station_rank) {
        // Earlier stations come first among equal instants: only later instants follow.
        std::cmp::Ordering::Less => RecordKey {
            instant: next_nanosecond(after.instant)?,
            load_order: 0,
        },
        std::cmp::Ordering::Equal => RecordKey {
            instant: after.instant,
            load_order: after.load_order.checked_add(1)?,
        },
        std::cmp::Ordering::Greater => RecordKey {
            instant: after.instant,
            load_order: 0,
        },
    };
    Some(resume.max(window_start))
}

fn next_nanosecond(instant: Timestamp) -> Option<Timestamp> {
    if instant.nanos < 999_999_999 {
        Some(Timestamp {
            seconds: instant.seconds,
            nanos: instant.nanos + 1,
        })
    } else {
        Some(Timestamp {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::stored::Pieces;
    use crate::data::symbols::Symbols;
    use crate::domain::record::Direction;

    fn instant(seconds: i64) -> Timestamp {
        Timestamp { seconds, nanos: 0 }
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
                .map(|&(seconds, load_order, direction)| {
                    let key = RecordKey {
                        instant: instant(seconds),
                        load_order,
                    };
                    let entry = UnitEntry {
                        bytes: StoredRecord {
                            start: 0,
                            length: 0,
                        },
                        unit_type: board,
                        unit_serial: serial,
                        direction,
                        slot: board,
                        mode: board,
                        result: board,
                    };
                    (key, entry)
                })
                .collect();
            StationData::new(Box::default(), Pieces::default(), units, Vec::new())
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
                ShardStation {
                    rank: 0,
                    station_index: 0,
                },
                ShardStation {
                    rank: 1,
                    station_index: 1,
                },
            ],
            window: Window {
                from: instant(from),
                to: instant(to),
            },
            after,
            filter: RecordFilter::Units {
                unit_types: Matcher::Any,
                unit_serial: Matcher::Any,
                results: Matcher::Any,
                directions: Directions::BOTH,
            },
            cap,
            pick: Pick::All,
        }
    }

    fn order(hits: &[Hit]) -> Vec<(i64, u32, u64)> {
        hits.iter()
            .map(|hit| {
                (
                    hit.position.instant.seconds,
                    hit.position.station_rank,
                    hit.position.load_order,
                )
            })
            .collect()
    }

    #[test]
    fn ties_order_by_station_then_load_order() {
        let hits = shard().scan(&request(0, 100, None, 100)).unwrap().hits;
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
        assert_eq!(
            order(&shard().scan(&request(20, 40, None, 100)).unwrap().hits).len(),
            4
        );
        assert_eq!(
            order(&shard().scan(&request(20, 21, None, 100)).unwrap().hits).len(),
            3
        );
        assert!(shard()
            .scan(&request(41, 100, None, 100))
            .unwrap()
            .hits
            .is_empty());
    }

    #[test]
    fn the_cap_keeps_the_first_records() {
        assert_eq!(
            order(&shard().scan(&request(0, 100, None, 2)).unwrap().hits),
            [(10, 0, 1), (20, 0, 2)]
        );
    }

    #[test]
    fn resuming_after_every_position_returns_each_record_once() {
        let all = shard().scan(&request(0, 100, None, 100)).unwrap().hits;
        for (index, hit) in all.iter().enumerate() {
            let rest = shard()
                .scan(&request(0, 100, Some(hit.position), 100))
                .unwrap()
                .hits;
            assert_eq!(
                order(&rest),
                order(&all[index + 1..]),
                "after {:?}",
                hit.position
            );
        }
    }

    #[test]
    fn a_pick_keeps_its_positions_or_all_but_them_before_the_cap() {
        let all = shard().scan(&request(0, 100, None, 100)).unwrap().hits;
        let chosen: Arc<[Position]> = all.iter().step_by(2).map(|hit| hit.position).collect();
        for pick in [Pick::Only(Arc::clone(&chosen)), Pick::Except(chosen)] {
            let kept: Vec<Hit> = (all.iter())
                .filter(|hit| pick.keeps(&hit.position))
                .copied()
                .collect();
            assert!(!kept.is_empty() && kept.len() < all.len());
            for cap in [1, 100] {
                let mut picked = request(0, 100, None, cap);
                picked.pick = pick.clone();
                let expected = &kept[..cap.min(kept.len())];
                assert_eq!(
                    order(&shard().scan(&picked).unwrap().hits),
                    order(expected),
                    "{pick:?}, cap {cap}"
                );
            }
        }
    }

    #[test]
    fn filters_select_by_symbol_and_direction() {
        let mut only_input = request(0, 100, None, 100);
        only_input.filter = RecordFilter::Units {
            unit_types: Matcher::Any,
            unit_serial: Matcher::Any,
            results: Matcher::Any,
            directions: Directions::of(&[Direction::Input]),
        };
        assert_eq!(
            order(&shard().scan(&only_input).unwrap().hits),
            [(20, 0, 3)]
        );

        let mut unknown_type = request(0, 100, None, 100);
        unknown_type.filter = RecordFilter::Units {
            unit_types: Matcher::OneOf(vec![]),
            unit_serial: Matcher::Any,
            results: Matcher::Any,
            directions: Directions::BOTH,
        };
        assert!(shard().scan(&unknown_type).unwrap().hits.is_empty());
    }

    /// Issue 32: units of many stations, read with their sealed units merged by
    /// period ([`PeriodUnits`]), are the records, JSON and order that a read
    /// station by station gives, whatever the window, cursor, cap, stations and
    /// filter; and a reload that leaves the sealed tiers alone keeps what names
    /// the merged periods, while one that seals more does not.
    #[test]
    fn issue_32_units_merged_by_period_read_as_station_by_station() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};

        let directory = tempfile::tempdir().unwrap();
        stq_gen::generate(&stq_gen::GenOptions {
            out: directory.path().to_path_buf(),
            stations: 6,
            days: 1,
            units_per_hour: 6,
            seed: 32,
            end: "2026-11-20T00:00:00Z".parse().unwrap(),
        })
        .unwrap();
        let options = crate::data::load::LoadOptions {
            directory: directory.path().to_path_buf(),
            shards: 2,
            on_invalid: crate::data::load::OnInvalid::Fail,
            generation: 1,
            threads: 2,
            hot: Some(std::time::Duration::from_secs(3 * 3600)),
            cache: crate::data::sealed::cache::test_cache(),
        };
        let (generation, _) = crate::data::load::load(&options).unwrap();
        assert!(generation.sealed_records() > 0);
        let catalog = &generation.catalog;
        let first = generation.shards()[0].sealed.periods()[0];
        let start = period_start(first).seconds;
        let direction = catalog.symbols().lookup("output").unwrap();
        let strategy = (
            0..2usize,
            proptest::collection::vec(any::<bool>(), 6),
            0..30 * 3600i64,
            1..8 * 3600i64,
            1..400usize,
            any::<bool>(),
            0..20usize,
        );
        let mut runner = TestRunner::new(Config::with_cases(96));
        runner
            .run(
                &strategy,
                |(shard_index, chosen, from, length, cap, only_outputs, resume)| {
                    let shard = &generation.shards()[shard_index];
                    let stations: Vec<ShardStation> = (catalog.placements.iter().enumerate())
                        .filter(|(rank, placement)| {
                            placement.shard as usize == shard_index && chosen[*rank]
                        })
                        .map(|(rank, placement)| ShardStation {
                            rank: rank as u32,
                            station_index: placement.station_index,
                        })
                        .collect();
                    let window = Window {
                        from: instant(start + from),
                        to: instant(start + from + length),
                    };
                    let filter = RecordFilter::Units {
                        unit_types: Matcher::Any,
                        unit_serial: Matcher::Any,
                        results: Matcher::Any,
                        directions: match (only_outputs, direction) {
                            (true, Some(_)) => Directions::of(&[Direction::Output]),
                            _ => Directions::BOTH,
                        },
                    };
                    let mut request = ScanRequest {
                        stations,
                        window,
                        after: None,
                        filter,
                        cap,
                        pick: Pick::All,
                    };
                    // Station by station: what the merged read must equal.
                    let expected = |request: &ScanRequest| -> Vec<(Position, Vec<u8>)> {
                        let filter = &request.filter;
                        let no_fault = FirstFault::default();
                        let hits = shard.merge_stations(request, |data, station, lower, upper| {
                            Box::new(
                                (data.units_in(lower..upper, &no_fault))
                                    .filter(|(_, entry)| filter.matches_unit(entry))
                                    .map(move |(key, entry)| station.hit(&key, entry.bytes)),
                            )
                        });
                        let hits = no_fault.or(hits).expect("a tier in memory reads");
                        (hits.iter())
                            .map(|hit| {
                                let mut json = Vec::new();
                                shard.stations[hit.station_index as usize]
                                    .write_json(hit.bytes, &mut json)
                                    .unwrap();
                                (hit.position, json)
                            })
                            .collect()
                    };
                    let merged = |request: &ScanRequest| -> Vec<(Position, Vec<u8>)> {
                        let mut memo = JsonMemo::default();
                        let hits = shard.scan_shard_units(request, &mut memo).unwrap();
                        let sealed = SealedJson { memo };
                        (hits.iter())
                            .map(|hit| {
                                let mut json = Vec::new();
                                shard.json(hit, &sealed).write_to(&mut json);
                                (hit.position, json)
                            })
                            .collect()
                    };
                    let all = expected(&request);
                    prop_assert_eq!(merged(&request), all.clone());
                    // Resuming after any of them reads the rest.
                    if let Some((after, _)) = all.get(resume) {
                        request.after = Some(*after);
                        prop_assert_eq!(merged(&request), expected(&request));
                    }
                    // A pick keeps its positions, or all but them, before the cap.
                    let every = expected(&ScanRequest {
                        cap: usize::MAX,
                        ..request.clone()
                    });
                    let chosen: Arc<[Position]> = every
                        .iter()
                        .step_by(2)
                        .map(|(position, _)| *position)
                        .collect();
                    for pick in [Pick::Only(Arc::clone(&chosen)), Pick::Except(chosen)] {
                        let kept: Vec<(Position, Vec<u8>)> = (every.iter())
                            .filter(|(position, _)| pick.keeps(position))
                            .take(cap)
                            .cloned()
                            .collect();
                        request.pick = pick;
                        prop_assert_eq!(merged(&request), kept);
                    }
                    Ok(())
                },
            )
            .unwrap();

        // What names the merged periods: kept by a shard that shares its
        // stations, and new for the same stations with their tiers sealed anew.
        let shard = &generation.shards()[0];
        let shared = ShardData::shared(2, shard);
        assert!(Arc::ptr_eq(&shared.sealed, &shard.sealed));
        let again = crate::data::load::load(&options).unwrap().0;
        assert_ne!(again.shards()[0].sealed.key(), shard.sealed.key());

        // A merged period the cache cannot keep is answered, and the shard then
        // reads station by station, with the same answer: known before one is
        // made when even its records' fixed bytes would not fit, else once one
        // was refused.
        let shard = &again.shards()[0];
        let floor = shard.sealed.most_units() * PeriodUnits::RECORD_BYTES;
        let capacity = |share: u64| options.cache.set_capacity(16 * share);
        capacity(floor + crate::data::sealed::cache::ENTRY_BYTES + 1024);
        let every: Vec<ShardStation> = (catalog.placements.iter().enumerate())
            .filter(|(_, placement)| placement.shard == 0)
            .map(|(rank, placement)| ShardStation {
                rank: rank as u32,
                station_index: placement.station_index,
            })
            .collect();
        let request = ScanRequest {
            stations: every,
            window: Window {
                from: instant(start),
                to: instant(start + 30 * 3600),
            },
            after: None,
            filter: RecordFilter::Units {
                unit_types: Matcher::Any,
                unit_serial: Matcher::Any,
                results: Matcher::Any,
                directions: Directions::BOTH,
            },
            cap: 100_000,
            pick: Pick::All,
        };
        let positions = |answer: ScanAnswer| -> Vec<Position> {
            answer.hits.iter().map(|hit| hit.position).collect()
        };
        assert!(shard.reads_merged(&request));
        let merged = positions(shard.scan(&request).unwrap());
        assert!(shard.sealed.unmerged() && !shard.reads_merged(&request));
        assert!(!merged.is_empty());
        assert_eq!(positions(shard.scan(&request).unwrap()), merged);
        let fresh = crate::data::load::load(&options).unwrap().0;
        let shard = &fresh.shards()[0];
        assert!(shard.reads_merged(&request));
        capacity(floor / 2);
        assert!(!shard.reads_merged(&request));
        assert_eq!(positions(shard.scan(&request).unwrap()), merged);
    }
}
