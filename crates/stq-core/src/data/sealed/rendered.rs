//! A block's records of one kind as queries read them, and as the cache
//! ([`super::cache`]) holds them: keys and entries, each record's JSON whole, and
//! two indexes that let a query go straight to what it asks for.
//!
//! **Why whole JSON, not its five parts.** A decoded block ([`super::Decoded`])
//! keeps where each record's parts are (60 bytes of spans a record) beside the
//! decompressed payload they point into; writing a record then reads its spans
//! and copies five pieces from three places, each a likely miss of the CPU's
//! cache once a hundred stations' blocks are read. Whole, a record is one copy
//! of bytes that lie together, and the payload and spans are dropped. It costs
//! bytes: a unit block weighs 1.3 x its parts form, a metric block 2 x; the
//! parts written straight from the block took 13 to 18% more CPU a request
//! (BENCHMARKS.md, tried and rejected), and the bound is `--cache-size` either
//! way.
//!
//! **The time index.** The first record of each sixteenth of the period: a window
//! starts in one, so a search reads the keys of that sixteenth alone, a line or
//! two of memory, not the several lines a binary search over the whole block
//! would touch.
//!
//! **The symbol index.** The records of each serial number (units) or metric name
//! (metrics), in time order: a query that filters by one reads its records only,
//! as the hot tier's per-symbol trees let it, not every record of the window.
//!
//! **Metrics' JSON by name.** A metric block's JSON is written in its symbol
//! index's order, each name's records together: a `names=` read copies runs of
//! bytes that lie together, where in time order each record's JSON lay between
//! other names' (a dashboard plots a measurement; a read of all names in time
//! order pays a lookup a record instead). Units' JSON stays in time order, as
//! most unit reads are.

use std::ops::{Bound, Range, RangeBounds as _};

use super::columns::Sealable;
use super::{locator, Decoded, Sealed, PERIOD_SECONDS};
use crate::data::key::RecordKey;
use crate::data::stored::{prefetch_value, StoredRecord};
use crate::data::symbols::Symbol;
use crate::data::tier::KeyRange;
use crate::domain::time::Timestamp;

/// Marks a locator's index ([`super::locator`]) as a position in a block's
/// symbol index rather than a record's index: a read by metric name locates its
/// records' JSON where it lies, without the index of each.
const BY_SYMBOL: u32 = 1 << 30;

/// The parts of a period the time index marks.
const SLOTS: usize = 16;
/// The seconds of one of them.
const SLOT_SECONDS: i64 = PERIOD_SECONDS / SLOTS as i64;

/// A block's records of one kind, ready for queries (see the module's doc).
#[derive(Debug)]
pub(crate) struct Rendered<E> {
    pub(crate) keys: Vec<RecordKey>,
    pub(crate) entries: Vec<E>,
    /// Each record's JSON, one after another: in time order, or (metrics) in
    /// the symbol index's order.
    json: Vec<u8>,
    /// Where each record's JSON ends in `json`, in the order it is written.
    ends: Vec<u32>,
    /// Of JSON written in the symbol index's order, where each record's is in
    /// that order, by its index; else empty.
    written_at: Vec<u32>,
    time: TimeIndex,
    /// Record indexes grouped by their symbol ([`Sealable::filtered`]), each
    /// group in time order; `runs` says where each symbol's group starts.
    by_symbol: Vec<u32>,
    /// Their keys, in the same order: a search and a read of one symbol's
    /// records read memory that lies together.
    symbol_keys: Vec<RecordKey>,
    /// What a locator of its records says first ([`super::SEALED`] and its
    /// block's number).
    block: u32,
    /// Each symbol present, in order, and where its group starts in `by_symbol`.
    runs: Vec<(Symbol, u32)>,
}

impl<E: Sealable> Rendered<E> {
    /// `decoded` (of the period that starts at `start`, with its JSON's parts)
    /// rendered: every record's JSON written out whole.
    pub(super) fn new(sealed: &Sealed, decoded: Decoded<E>, start: Timestamp) -> Rendered<E> {
        let count = decoded.keys.len();
        debug_assert!(count < BY_SYMBOL as usize);
        let mut by_symbol: Vec<u32> = (0..count as u32).collect();
        by_symbol.sort_by_key(|&index| (decoded.entries[index as usize].filtered(), index));
        let mut runs: Vec<(Symbol, u32)> = Vec::new();
        for (position, &index) in by_symbol.iter().enumerate() {
            let symbol = decoded.entries[index as usize].filtered();
            if runs.last().is_none_or(|(last, _)| *last != symbol) {
                runs.push((symbol, position as u32));
            }
        }
        runs.shrink_to_fit();
        let symbol_keys = (by_symbol.iter())
            .map(|&index| decoded.keys[index as usize])
            .collect();
        // Metrics' JSON by name (see the module's doc), units' by time.
        let grouped = E::KIND == 1;
        let mut json = Vec::with_capacity(
            (decoded.spans.iter().flatten())
                .map(|span| span.length as usize)
                .sum(),
        );
        let mut ends = Vec::with_capacity(count);
        let order: Box<dyn Iterator<Item = u32>> = match grouped {
            true => Box::new(by_symbol.iter().copied()),
            false => Box::new(0..count as u32),
        };
        for index in order {
            for span in &decoded.spans[index as usize] {
                json.extend_from_slice(sealed.span(&decoded, *span));
            }
            ends.push(json.len() as u32);
        }
        let mut written_at = Vec::new();
        if grouped {
            written_at = vec![0; count];
            for (position, &index) in by_symbol.iter().enumerate() {
                written_at[index as usize] = position as u32;
            }
        }
        Rendered {
            block: decoded
                .entries
                .first()
                .map_or(0, |entry| entry.bytes().start),
            symbol_keys,
            time: TimeIndex::new(&decoded.keys, start, |key| key.instant.seconds),
            keys: decoded.keys,
            entries: decoded.entries,
            json,
            ends,
            written_at,
            by_symbol,
            runs,
        }
    }
}

impl<E: Sealable> Rendered<E> {
    /// The key of the record at `position` of its symbol index, and its locator:
    /// what its entry's `bytes` say, without reading its entry.
    pub(super) fn located_by_symbol(&self, position: usize) -> (RecordKey, StoredRecord) {
        let index = match self.written_at.is_empty() {
            true => self.by_symbol[position],
            false => position as u32 | BY_SYMBOL,
        };
        (self.symbol_keys[position], locator::<E>(self.block, index))
    }
}

impl<E> Rendered<E> {
    /// Its bytes on the heap and itself: what the cache weighs it by.
    pub(super) fn heap_bytes(&self) -> u64 {
        (size_of::<Self>()
            + self.keys.capacity() * size_of::<RecordKey>()
            + self.entries.capacity() * size_of::<E>()
            + self.json.capacity()
            + self.ends.capacity() * size_of::<u32>()
            + self.written_at.capacity() * size_of::<u32>()
            + self.by_symbol.capacity() * size_of::<u32>()
            + self.symbol_keys.capacity() * size_of::<RecordKey>()
            + self.runs.capacity() * size_of::<(Symbol, u32)>()) as u64
    }

    /// The indexes of its records with keys in `range`.
    pub(super) fn indexes_in(&self, range: KeyRange) -> Range<usize> {
        self.time.indexes_in(&self.keys, range)
    }

    /// Where its records whose symbol is `symbol` with keys in `range` are in
    /// its symbol index, in time order: [`Rendered::by_symbol`] gives each one's
    /// index.
    pub(super) fn positions_of(&self, symbol: Symbol, range: KeyRange) -> Range<usize> {
        let Ok(run) = self
            .runs
            .binary_search_by_key(&symbol, |(symbol, _)| *symbol)
        else {
            return 0..0;
        };
        let start = self.runs[run].1 as usize;
        let end = (self.runs.get(run + 1)).map_or(self.by_symbol.len(), |next| next.1 as usize);
        let group = &self.symbol_keys[start..end];
        // Most blocks of a window hours long lie in it whole: their group needs
        // no search, whose probes would each be a likely miss of the CPU's cache.
        let whole = (group.first()).is_some_and(|first| range.contains(first))
            && (group.last()).is_some_and(|last| range.contains(last));
        if whole {
            return start..end;
        }
        let within = bounded(range, group.len(), |key, through| {
            group.partition_point(|probe| *probe < key || (through && *probe == key))
        });
        start + within.start..start + within.end
    }

    /// The index of the record at `position` of its symbol index.
    pub(super) fn by_symbol(&self, position: usize) -> usize {
        self.by_symbol[position] as usize
    }

    /// Appends the JSON of its record `index`.
    pub(super) fn write(&self, index: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(self.json(index));
    }

    /// The JSON of its record `index`, or, with [`BY_SYMBOL`] set, of the
    /// record at that position of its symbol index.
    pub(super) fn json(&self, index: usize) -> &[u8] {
        written(&self.json, &self.ends, self.written_as(index))
    }

    /// Where the JSON of its record `index` (or, with [`BY_SYMBOL`] set, of the
    /// record at that position of its symbol index) is among those written.
    fn written_as(&self, index: usize) -> usize {
        match (index & BY_SYMBOL as usize, self.written_at.is_empty()) {
            (0, true) => index,
            (0, false) => self.written_at[index] as usize,
            _ => index & !(BY_SYMBOL as usize),
        }
    }
}

/// The `at`-th JSON written one after another into `json`, each ending where
/// `ends` says.
pub(super) fn written<'a>(json: &'a [u8], ends: &[u32], at: usize) -> &'a [u8] {
    let start = match at {
        0 => 0,
        _ => ends[at - 1] as usize,
    };
    &json[start..ends[at] as usize]
}

/// A rendered block of either kind, as an answer reads its records' JSON.
pub(super) trait WholeJson: Send + Sync {
    /// The JSON of its record `index`.
    fn json(&self, index: usize) -> &[u8];

    /// Hints the CPU to load where the JSON of its record `index` ends, which
    /// [`WholeJson::json`] reads first.
    fn prefetch(&self, index: usize);
}

impl<E: Send + Sync> WholeJson for Rendered<E> {
    fn json(&self, index: usize) -> &[u8] {
        Rendered::json(self, index)
    }

    fn prefetch(&self, index: usize) {
        if let Some(end) = self.ends.get(self.written_as(index)) {
            prefetch_value(end);
        }
    }
}

/// The indexes of `count` ordered keys that lie in `range`, given `point(key,
/// through)`: how many of them are before `key`, or, `through`, not after it.
fn bounded(
    (start, end): KeyRange,
    count: usize,
    point: impl Fn(RecordKey, bool) -> usize,
) -> Range<usize> {
    let first = match start {
        Bound::Included(key) => point(key, false),
        Bound::Excluded(key) => point(key, true),
        Bound::Unbounded => 0,
    };
    let end = match end {
        Bound::Included(key) => point(key, true),
        Bound::Excluded(key) => point(key, false),
        Bound::Unbounded => count,
    };
    first..end.max(first)
}

/// Where each sixteenth of a block's period starts among its keys.
#[derive(Clone, Copy, Debug)]
pub(super) struct TimeIndex {
    /// The period's first second.
    start: i64,
    /// The index of the first key at or after each sixteenth's start, and the
    /// count of keys last.
    firsts: [u32; SLOTS + 1],
}

impl TimeIndex {
    /// The index of `keys` (in order, all in the period starting at `start`),
    /// whose instants' seconds `seconds` gives.
    pub(super) fn new<K>(keys: &[K], start: Timestamp, seconds: impl Fn(&K) -> i64) -> TimeIndex {
        let mut firsts = [0u32; SLOTS + 1];
        for (slot, first) in firsts.iter_mut().enumerate() {
            let second = start.seconds.saturating_add(slot as i64 * SLOT_SECONDS);
            *first = keys.partition_point(|key| seconds(key) < second) as u32;
        }
        firsts[SLOTS] = keys.len() as u32;
        TimeIndex {
            start: start.seconds,
            firsts,
        }
    }

    /// The indexes of `keys` (those it was made from) in `range`.
    pub(super) fn indexes_in(&self, keys: &[RecordKey], range: KeyRange) -> Range<usize> {
        bounded(range, keys.len(), |key, through| {
            self.position(keys, key.instant.seconds, |probe| {
                *probe < key || (through && *probe == key)
            })
        })
    }

    /// The partition point of `before` in `keys`, searched among the keys of the
    /// sixteenth the second `seconds` falls in: every key of an earlier one is
    /// before the bound `before` tests against (`before` is `< bound` or `<=
    /// bound`, whose instant's second is `seconds`), and none of a later one.
    pub(super) fn position<K>(
        &self,
        keys: &[K],
        seconds: i64,
        before: impl Fn(&K) -> bool,
    ) -> usize {
        // A bound may be any instant, the ends of time included.
        let slot = (seconds.saturating_sub(self.start)).div_euclid(SLOT_SECONDS);
        if slot < 0 {
            return 0;
        }
        if slot >= SLOTS as i64 {
            return keys.len();
        }
        let (low, high) = (
            self.firsts[slot as usize] as usize,
            self.firsts[slot as usize + 1] as usize,
        );
        low + keys[low..high].partition_point(before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seconds: i64) -> RecordKey {
        RecordKey {
            instant: Timestamp { seconds, nanos: 0 },
            load_order: 0,
        }
    }

    /// A bound at the ends of time (an export's whole-history window) is before
    /// or after every key, not an overflow.
    #[test]
    fn the_time_index_takes_bounds_at_the_ends_of_time() {
        let start = Timestamp {
            seconds: 1_795_478_400,
            nanos: 0,
        };
        let keys: Vec<RecordKey> = (0..10)
            .map(|second| key(start.seconds + second * 300))
            .collect();
        let index = TimeIndex::new(&keys, start, |key| key.instant.seconds);
        for (bound, expected) in [(i64::MIN, 0..10), (i64::MAX, 10..10)] {
            let range = (Bound::Included(key(bound)), Bound::Unbounded);
            assert_eq!(index.indexes_in(&keys, range), expected);
        }
        let everything = (
            Bound::Excluded(key(i64::MIN)),
            Bound::Excluded(key(i64::MAX)),
        );
        assert_eq!(index.indexes_in(&keys, everything), 0..10);
    }
}
