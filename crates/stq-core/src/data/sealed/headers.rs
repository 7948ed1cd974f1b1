//! A sealed tier's block headers: in a B-tree map, as sealing makes
//! them, or rows of its store file's index, read where they lie in the mapped
//! file rather than copied into the heap. A year of 100 stations is 219,000
//! blocks: their headers were 46 MB of heap (0.7 bytes a sealed record), for
//! headers a query reads a handful of at a time.
//!
//! A row is [`ROW`] bytes (all numbers little-endian): the block's period and
//! where its bytes start in the file (i64, u64); its parts' bounds, its counts
//! and the lowest and highest ordinal of its files (u32 each: split, unit digest,
//! metric digest, length, units, metrics, lowest, highest); its parts' XXH3-64s,
//! its serials' filter and its names' (u64 each: 4, 4, 4); whether it shares
//! serials (a byte, then 7 of zero); then the XXH3-64 of all that.
//!
//! A start checks the file whole before mapping it, and the rows' order and
//! bounds. A mapped file is read for as long as a tier holds it, after the store
//! has deleted it too; stq never writes to a named store file, but another process
//! that did would change what is read (a truncation loses pages of the map: `crate::data::mapped`). So a
//! row is checked against its hash whenever it is read, and the read of a damaged
//! one is a [`StorageFault`], as a damaged block part's is
//! ([`super::body`]).
//!
//! The heap keeps each row's period (to find a key range's rows) and its unit
//! count (what a shard plans its merged reads by): 8 bytes a block, and 8 more
//! for the rows of a file the store just wrote (the number each block had). A tier sealed into keeps its
//! rows and holds the new and changed blocks in its map beside them
//! ([`Blocks`]); once the store has written it, the tier sealed into next starts
//! from the rows of that file ([`super::Sealed::stored_in`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Bound, Deref, RangeBounds};
use std::sync::Arc;

use itertools::{Either, Itertools as _};
use xxhash_rust::xxh3::xxh3_64;

use super::body::{BlockBody, StoreFile};
use super::{Block, Filter};
use crate::data::codec::Corrupt;
use crate::data::fault::StorageFault;
use crate::data::mapped::Mapped;
use crate::data::tier::tree_bytes;

/// A row's length: its fields, then their hash.
pub(super) const ROW: usize = FIELDS + 8;
const FIELDS: usize = 8 + 8 + 8 * 4 + 12 * 8 + 8;

/// Appends `block`'s row: it is of `period`, and its bytes start at `offset`.
pub(super) fn write_row(period: i64, offset: u64, block: &Block, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&period.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    let numbers = [
        block.split,
        block.unit_digest,
        block.metric_digest,
        block.length,
        block.units,
        block.metrics,
        block.files.0,
        block.files.1,
    ];
    for number in numbers {
        out.extend_from_slice(&number.to_le_bytes());
    }
    let words = (block.checks.iter())
        .chain(&block.serials.0)
        .chain(&block.names.0);
    for word in words {
        out.extend_from_slice(&word.to_le_bytes());
    }
    out.extend_from_slice(&u64::from(block.shares).to_le_bytes());
    let hash = xxh3_64(&out[start..]);
    out.extend_from_slice(&hash.to_le_bytes());
}

/// The fields of a row whose hash was checked: its period, its offset, and the
/// block's header (`body` is the caller's).
fn read_row(row: &[u8], body: impl FnOnce(u64) -> BlockBody) -> (i64, Block) {
    let word = |at: usize| u64::from_le_bytes(row[at..at + 8].try_into().expect("8 bytes"));
    let number = |index: usize| {
        let at = 16 + index * 4;
        u32::from_le_bytes(row[at..at + 4].try_into().expect("4 bytes"))
    };
    let words = |first: usize| [0, 1, 2, 3].map(|index| word(48 + (first + index) * 8));
    let block = Block {
        body: body(word(8)),
        split: number(0),
        unit_digest: number(1),
        metric_digest: number(2),
        length: number(3),
        units: number(4),
        metrics: number(5),
        files: (number(6), number(7)),
        checks: words(0),
        serials: Filter(words(4)),
        names: Filter(words(8)),
        shares: row[144] != 0,
    };
    (word(0) as i64, block)
}

/// Where a tier's rows' bytes are.
#[derive(Debug)]
enum RowBytes {
    /// Its store file, mapped: `start` is where the first row is.
    Mapped(Mapped, usize),
    /// Copied from its index, which a replica fetched alone from its `s3://` store
    /// before the file.
    Heap(Box<[u8]>),
}

impl Deref for RowBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            RowBytes::Mapped(map, start) => &map[*start..],
            RowBytes::Heap(bytes) => bytes,
        }
    }
}

/// The rows of a store file's index.
#[derive(Debug)]
pub(super) struct Rows {
    bytes: RowBytes,
    file: Arc<StoreFile>,
    /// Each row's period, in order, as periods after the first; and its block's
    /// unit count (what a shard's merged periods are planned by:
    /// `crate::data::shard`).
    first: i64,
    after: Box<[u32]>,
    units: Box<[u32]>,
    /// How many metric records its rows hold in all, so that a start reads no
    /// mapped row to count them.
    metrics: usize,
    /// The number each row's block is known by in the cache.
    ids: Ids,
}

/// The numbers rows' blocks are known by in the cache: from a first one on, or
/// each its own (those a tier's blocks had before the store wrote them).
#[derive(Debug)]
enum Ids {
    From(u64),
    Listed(Box<[u64]>),
}

impl Rows {
    /// The `count` rows at the start of `checked` (bytes of `file`, checked against
    /// its name), in order of period, each block's bytes in the file between `low`
    /// and `high`; `map` places them (where the same bytes are in the mapped file,
    /// or `None` to copy them into the heap), and each block is known by a new
    /// number, or by `ids` if given.
    pub(super) fn read(
        checked: &[u8],
        count: usize,
        (low, high): (u64, u64),
        file: &Arc<StoreFile>,
        map: Option<(Mapped, usize)>,
        ids: Option<Box<[u64]>>,
    ) -> Result<Rows, Corrupt> {
        let bytes = checked
            .get(
                ..count
                    .checked_mul(ROW)
                    .ok_or(Corrupt("a sealed file's rows"))?,
            )
            .ok_or(Corrupt("a sealed file's rows"))?;
        let mut periods = Vec::with_capacity(count);
        let mut units = Vec::with_capacity(count);
        let mut metrics = 0;
        for row in bytes.chunks_exact(ROW) {
            let hash = u64::from_le_bytes(row[FIELDS..].try_into().expect("8 bytes"));
            if xxh3_64(&row[..FIELDS]) != hash {
                return Err(Corrupt("a sealed block's row"));
            }
            let (period, block) = read_row(row, |offset| BlockBody::Mapped {
                file: Arc::clone(file),
                offset,
                id: 0,
            });
            let BlockBody::Mapped { offset, .. } = block.body else {
                unreachable!("made mapped just above")
            };
            let inside = (offset.checked_add(u64::from(block.length)))
                .is_some_and(|end| offset >= low && end <= high);
            let ordered = block.split <= block.unit_digest
                && block.unit_digest <= block.metric_digest
                && block.metric_digest <= block.length;
            if !(ordered && inside) {
                return Err(Corrupt("a sealed block's parts"));
            }
            if periods.last().is_some_and(|last| *last >= period) {
                return Err(Corrupt("sealed periods out of order"));
            }
            periods.push(period);
            units.push(block.units);
            metrics += block.metrics as usize;
        }
        let ids = match ids {
            Some(ids) if ids.len() == count => Ids::Listed(ids),
            Some(_) => return Err(Corrupt("a sealed file's rows")),
            None => Ids::From(super::body::fresh_ids(count as u64)),
        };
        let first = periods.first().copied().unwrap_or(0);
        // Four bytes a period: a tier's periods span at most some 22 million
        // (four hours each, from year 1 to year 9999).
        let after = (periods.iter())
            .map(|period| u32::try_from(period - first))
            .collect::<Result<_, _>>()
            .map_err(|_| Corrupt("sealed periods too far apart"))?;
        let bytes = match map {
            Some((map, start)) if map.len() >= start + bytes.len() => RowBytes::Mapped(map, start),
            Some(_) => return Err(Corrupt("a sealed file's mapping")),
            None => RowBytes::Heap(bytes.into()),
        };
        Ok(Rows {
            bytes,
            file: Arc::clone(file),
            first,
            after,
            units: units.into(),
            metrics,
            ids,
        })
    }

    /// The store file they are rows of.
    pub(super) fn path(&self) -> &std::path::Path {
        self.file.path()
    }

    /// Row `index`'s block and its period, checked against its hash.
    ///
    /// A [`StorageFault`] if the mapped file changed since it was checked whole,
    /// or was cut (its lost pages read as zeros: `crate::data::mapped`).
    fn block(&self, index: usize) -> Result<(i64, Block), StorageFault> {
        // Copied, so that what is checked is what is read: a map cut between the
        // two would read zeros after a check that passed.
        let row: [u8; ROW] =
            (self.bytes[index * ROW..(index + 1) * ROW].try_into()).expect("a row's bytes");
        if let RowBytes::Mapped(map, _) = &self.bytes {
            let hash = u64::from_le_bytes(row[FIELDS..].try_into().expect("8 bytes"));
            let reason = match (map.faulted(), xxh3_64(&row[..FIELDS]) == hash) {
                (true, _) => Some("was cut short under the server"),
                (false, false) => Some("is damaged"),
                (false, true) => None,
            };
            if let Some(reason) = reason {
                return Err(StorageFault::at(
                    self.file.path(),
                    format!(
                        "{reason}: the row of period {} fails its check",
                        self.period(index)
                    ),
                ));
            }
        }
        Ok(read_row(&row, |offset| BlockBody::Mapped {
            file: Arc::clone(&self.file),
            offset,
            id: self.id(index),
        }))
    }

    /// The number row `index`'s block is known by in the cache.
    fn id(&self, index: usize) -> u64 {
        match &self.ids {
            Ids::From(first) => first + index as u64,
            Ids::Listed(ids) => ids[index],
        }
    }

    fn len(&self) -> usize {
        self.after.len()
    }

    /// Row `index`'s period.
    fn period(&self, index: usize) -> i64 {
        self.first + i64::from(self.after[index])
    }

    /// Its periods, in order.
    fn periods(&self) -> impl DoubleEndedIterator<Item = i64> + '_ {
        (self.after.iter()).map(|after| self.first + i64::from(*after))
    }

    /// How many of its rows are of periods before `period`, or up to it.
    fn before(&self, period: i64, including: bool) -> usize {
        (self.after).partition_point(|after| {
            let row = self.first + i64::from(*after);
            row < period || (including && row == period)
        })
    }

    /// The indexes of its rows whose periods are in `range`.
    fn indexes(&self, range: impl RangeBounds<i64>) -> std::ops::Range<usize> {
        let start = match range.start_bound() {
            Bound::Included(first) => self.before(*first, false),
            Bound::Excluded(first) => self.before(*first, true),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(last) => self.before(*last, true),
            Bound::Excluded(last) => self.before(*last, false),
            Bound::Unbounded => self.len(),
        };
        start..end.max(start)
    }

    fn find(&self, period: i64) -> Option<usize> {
        let index = self.before(period, false);
        (index < self.len() && self.period(index) == period).then_some(index)
    }

    /// What it holds on the heap.
    fn heap_bytes(&self) -> u64 {
        let copied = match &self.bytes {
            RowBytes::Mapped(..) => 0,
            RowBytes::Heap(bytes) => bytes.len(),
        };
        let ids = match &self.ids {
            Ids::From(_) => 0,
            Ids::Listed(ids) => ids.len() * 8,
        };
        (copied + self.len() * 8 + ids) as u64
    }
}

/// A tier's block headers by period: rows of a store file, and a map that holds
/// the blocks sealed since (in new periods, or in place of rows it hides).
#[derive(Clone, Debug, Default)]
pub(super) struct Blocks {
    rows: Option<Arc<Rows>>,
    /// The periods of rows that are not the tier's: sealed again into `tree`, or
    /// dropped.
    hidden: BTreeSet<i64>,
    tree: BTreeMap<i64, Block>,
}

impl Blocks {
    /// The store file its rows are of, if it has rows.
    pub(super) fn rows_path(&self) -> Option<&std::path::Path> {
        self.rows.as_deref().map(Rows::path)
    }

    /// The blocks of `tree`.
    pub(super) fn of_tree(tree: BTreeMap<i64, Block>) -> Blocks {
        Blocks {
            tree,
            ..Blocks::default()
        }
    }

    /// Whether its headers are all rows of a store file, none in the heap.
    pub(super) fn all_rows(&self) -> bool {
        self.rows.is_some() && self.tree.is_empty()
    }

    /// The blocks of `rows`.
    pub(super) fn of_rows(rows: Arc<Rows>) -> Blocks {
        Blocks {
            rows: Some(rows),
            ..Blocks::default()
        }
    }

    pub(super) fn len(&self) -> usize {
        let rows = self.rows.as_ref().map_or(0, |rows| rows.len());
        rows - self.hidden.len() + self.tree.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The block of `period`, if it has one: borrowed from its map, or read from
    /// its row.
    pub(super) fn get(&self, period: i64) -> Result<Option<Cow<'_, Block>>, StorageFault> {
        if let Some(block) = self.tree.get(&period) {
            return Ok(Some(Cow::Borrowed(block)));
        }
        let Some((rows, index)) = self.row_of(period) else {
            return Ok(None);
        };
        Ok(Some(Cow::Owned(rows.block(index)?.1)))
    }

    /// The number the block of `period` is known by in the cache, its header not
    /// read.
    pub(super) fn id_of(&self, period: i64) -> Option<u64> {
        if let Some(block) = self.tree.get(&period) {
            return Some(block.body.id());
        }
        let (rows, index) = self.row_of(period)?;
        Some(rows.id(index))
    }

    /// The row of `period`'s block, unless none is or the map hides it.
    fn row_of(&self, period: i64) -> Option<(&Rows, usize)> {
        let rows = self.rows.as_deref()?;
        let index = rows
            .find(period)
            .filter(|_| !self.hidden.contains(&period))?;
        Some((rows, index))
    }

    /// The blocks whose periods are in `range`, in order; a row that fails its
    /// check is its fault.
    pub(super) fn range(
        &self,
        range: (Bound<i64>, Bound<i64>),
    ) -> impl Iterator<Item = Result<(i64, Cow<'_, Block>), StorageFault>> + '_ {
        // Borrowed from the map: a clone of each (its body's count shared by the
        // workers) cost Q4 a third more CPU without a store (BENCHMARKS.md).
        let tree =
            (self.tree.range(range)).map(|(period, block)| Ok((*period, Cow::Borrowed(block))));
        let row = |rows: &Rows, index: usize| {
            let (period, block) = rows.block(index)?;
            Ok((period, Cow::Owned(block)))
        };
        // Alone, as after a start (rows) or without a store (a map), neither is
        // merged with the other (a merge cost Q4 a few percent: BENCHMARKS.md).
        match &self.rows {
            None => Either::Left(Either::Left(tree)),
            Some(rows) if self.tree.is_empty() && self.hidden.is_empty() => Either::Left(
                Either::Right(rows.indexes(range).map(move |index| row(rows, index))),
            ),
            Some(rows) => {
                let rows = (rows.indexes(range))
                    .filter(|index| !self.hidden.contains(&rows.period(*index)))
                    .map(move |index| row(rows, index));
                // A row's period is known without its read, so a fault stays in
                // its place in the order.
                let period = |block: &Result<(i64, Cow<'_, Block>), StorageFault>| {
                    block.as_ref().map_or(i64::MIN, |(period, _)| *period)
                };
                Either::Right(tree.merge_by(rows, move |tree, row| period(tree) < period(row)))
            }
        }
    }

    /// Every block, in order; a row that fails its check is its fault.
    pub(super) fn iter(
        &self,
    ) -> impl Iterator<Item = Result<(i64, Cow<'_, Block>), StorageFault>> + '_ {
        self.range((Bound::Unbounded, Bound::Unbounded))
    }

    /// Each block's period and unit count, in order, no row read.
    pub(super) fn unit_counts(&self) -> impl Iterator<Item = (i64, u32)> + '_ {
        let tree = (self.tree.iter()).map(|(period, block)| (*period, block.units));
        let rows = (self.rows.iter()).flat_map(move |rows| {
            (rows.periods().zip(rows.units.iter().copied()))
                .filter(|(period, _)| !self.hidden.contains(period))
        });
        tree.merge_by(rows, |tree, row| tree.0 < row.0)
    }

    /// How many unit and metric records its blocks hold: of rows none hides,
    /// reading only the rows it hides.
    pub(super) fn counts(&self) -> Result<(usize, usize), StorageFault> {
        let mut units = 0;
        let mut metrics = 0;
        for block in self.tree.values() {
            units += block.units as usize;
            metrics += block.metrics as usize;
        }
        if let Some(rows) = &self.rows {
            units += rows
                .units
                .iter()
                .map(|units| *units as usize)
                .sum::<usize>();
            metrics += rows.metrics;
            // The rows hidden are few (blocks sealed again since the store wrote
            // the file): only they are read.
            for index in self.hidden.iter().filter_map(|period| rows.find(*period)) {
                let (_, block) = rows.block(index)?;
                units -= block.units as usize;
                metrics -= block.metrics as usize;
            }
        }
        Ok((units, metrics))
    }

    /// Its blocks in its map, not its rows: those sealed in memory.
    pub(super) fn in_memory(&self) -> impl Iterator<Item = &Block> + '_ {
        self.tree.values()
    }

    /// The first and the last period it holds a block of.
    pub(super) fn first_period(&self) -> Option<i64> {
        let tree = self.tree.first_key_value().map(|(period, _)| *period);
        let rows = (self.rows.iter())
            .flat_map(|rows| rows.periods())
            .find(|period| !self.hidden.contains(period));
        match (tree, rows) {
            (Some(tree), Some(rows)) => Some(tree.min(rows)),
            (tree, rows) => tree.or(rows),
        }
    }

    pub(super) fn last_period(&self) -> Option<i64> {
        let tree = self.tree.last_key_value().map(|(period, _)| *period);
        let rows = (self.rows.iter())
            .flat_map(|rows| rows.periods().rev())
            .find(|period| !self.hidden.contains(period));
        tree.max(rows)
    }

    /// Sets the block of `period`.
    pub(super) fn insert(&mut self, period: i64, block: Block) {
        self.hide(period);
        self.tree.insert(period, block);
    }

    /// Drops the block of `period`.
    pub(super) fn remove(&mut self, period: i64) {
        self.hide(period);
        self.tree.remove(&period);
    }

    fn hide(&mut self, period: i64) {
        if (self.rows.as_ref()).is_some_and(|rows| rows.find(period).is_some()) {
            self.hidden.insert(period);
        }
    }

    /// Builds its map again from its sorted entries, which fills its nodes:
    /// inserted at its right end, a tree's nodes stay about half full
    /// (BENCHMARKS.md).
    pub(super) fn compact(&mut self) {
        self.tree = std::mem::take(&mut self.tree).into_iter().collect();
    }

    /// Marks whether the block of `period` shares serials with another block of
    /// its tier ([`Block::shares`]); a row whose mark changes is copied into the
    /// map, which holds it from then on.
    pub(super) fn set_shares(&mut self, period: i64, shares: bool) -> Result<(), StorageFault> {
        if let Some(block) = self.tree.get_mut(&period) {
            block.shares = shares;
            return Ok(());
        }
        if let Some(block) = self.get(period)?.filter(|block| block.shares != shares) {
            let mut block = block.into_owned();
            block.shares = shares;
            self.insert(period, block);
        }
        Ok(())
    }

    /// What its headers hold on the heap: its map's nodes, the bodies its blocks
    /// share (their id, lock and place, and the `Arc`'s counts), and what its rows
    /// keep there.
    pub(super) fn heap_bytes(&self, body: usize) -> u64 {
        let rows = self.rows.as_ref().map_or(0, |rows| rows.heap_bytes());
        let hidden = self.hidden.len() * size_of::<i64>() * 2;
        tree_bytes(&self.tree) + (self.tree.len() * body) as u64 + rows + hidden as u64
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::ops::Bound::{self, Excluded, Included, Unbounded};
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;

    /// A block whose header says `units` units, its bytes (100 of them, at `offset`
    /// in its file) all in its unit frame.
    fn block(units: u32) -> Block {
        let mut block = Block::resident(vec![0; 100], 100, 100, 100);
        block.units = units;
        block.metrics = units / 2;
        block.files = (units, units + 1);
        block.serials = Filter::of([crate::data::symbols::Symbol(units)].into_iter());
        block
    }

    /// Rows of `periods` (each block with `period * 3` units) in a file under
    /// `directory`, and that file's bytes: mapped if `mapped`.
    fn rows(directory: &std::path::Path, periods: &[i64], mapped: bool) -> (Rows, Vec<u8>) {
        let mut bytes = vec![0u8; 8 + 100 * periods.len()];
        let start = bytes.len();
        for (index, period) in periods.iter().enumerate() {
            write_row(
                *period,
                8 + 100 * index as u64,
                &block(*period as u32 * 3),
                &mut bytes,
            );
        }
        let path = directory.join("rows");
        std::fs::write(&path, &bytes).unwrap();
        let file = StoreFile::open(&path).unwrap();
        let map = mapped.then(|| (file.map().unwrap(), start));
        let high = start as u64;
        let rows = Rows::read(&bytes[start..], periods.len(), (8, high), &file, map, None);
        (rows.unwrap(), bytes)
    }

    fn bound(choice: u8, period: i64) -> Bound<i64> {
        match choice % 3 {
            0 => Included(period),
            1 => Excluded(period),
            _ => Unbounded,
        }
    }

    proptest! {
        /// Issue 32: blocks as rows and a map beside them read as one map of
        /// periods would, whatever is sealed into it or dropped from it.
        #[test]
        fn issue_32_rows_and_the_blocks_sealed_since_read_as_one_map(
            periods in proptest::collection::btree_set(0i64..40, 0..20),
            changes in proptest::collection::vec((0i64..44, proptest::option::of(1u32..50)), 0..20),
            ranges in proptest::collection::vec((0u8..3, -1i64..45, 0u8..3, -1i64..45), 1..8),
            mapped in any::<bool>(),
        ) {
            let directory = tempfile::tempdir().unwrap();
            let periods: Vec<i64> = periods.into_iter().collect();
            let (rows, _) = rows(directory.path(), &periods, mapped);
            let mut blocks = Blocks::of_rows(Arc::new(rows));
            let mut model: BTreeMap<i64, u32> =
                periods.iter().map(|period| (*period, *period as u32 * 3)).collect();
            for (period, change) in changes {
                match change {
                    Some(units) => {
                        blocks.insert(period, block(units));
                        model.insert(period, units);
                    }
                    None => {
                        blocks.remove(period);
                        model.remove(&period);
                    }
                }
            }
            blocks.compact();
            let read = |(period, block): (i64, Cow<'_, Block>)| {
                assert_eq!(block.metrics, block.units / 2);
                assert_eq!(block.files, (block.units, block.units + 1));
                (period, block.units)
            };
            let all: Vec<(i64, u32)> = blocks.iter().map(|block| read(block.unwrap())).collect();
            let expected: Vec<(i64, u32)> = model.iter().map(|(p, u)| (*p, *u)).collect();
            prop_assert_eq!(&all, &expected);
            prop_assert_eq!(blocks.unit_counts().collect::<Vec<_>>(), expected);
            prop_assert_eq!(blocks.len(), model.len());
            let units: u32 = model.values().sum();
            let counts = (units as usize, model.values().map(|units| *units as usize / 2).sum());
            prop_assert_eq!(blocks.counts().unwrap(), counts);
            prop_assert_eq!(blocks.is_empty(), model.is_empty());
            prop_assert_eq!(blocks.first_period(), model.keys().next().copied());
            prop_assert_eq!(blocks.last_period(), model.keys().next_back().copied());
            for period in -1..45 {
                let block = blocks.get(period).unwrap();
                prop_assert_eq!(block.as_ref().map(|block| block.units), model.get(&period).copied());
                prop_assert_eq!(block.map(|block| block.body.id()), blocks.id_of(period));
            }
            for (lower, low, upper, high) in ranges {
                let range = (bound(lower, low), bound(upper, high));
                // A map panics at a range that ends before it starts; a read never asks one.
                let empty = match range {
                    (Included(a) | Excluded(a), Included(b) | Excluded(b)) => a > b || (a == b && range != (Included(a), Included(b))),
                    _ => false,
                };
                if empty {
                    continue;
                }
                let read: Vec<(i64, u32)> =
                    blocks.range(range).map(|block| read(block.unwrap())).collect();
                let expected: Vec<(i64, u32)> = model.range(range).map(|(p, u)| (*p, *u)).collect();
                prop_assert_eq!(read, expected, "{:?}", range);
            }
        }
    }

    /// Issue 32: a row changed in its mapped file after a start checked it is
    /// caught where it is read, not read as a header.
    #[test]
    fn issue_32_a_row_changed_in_its_mapped_file_fails_its_check() {
        let directory = tempfile::tempdir().unwrap();
        let (rows, mut bytes) = rows(directory.path(), &[3, 5, 9], true);
        let blocks = Blocks::of_rows(Arc::new(rows));
        assert_eq!(blocks.get(5).unwrap().unwrap().units, 15);
        // A byte of the second row's serial filter: same length, so the mapping
        // sees it (rewritten in place, as another process could).
        let at = 8 + 300 + ROW + 48 + 4 * 8;
        bytes[at] ^= 1;
        std::fs::OpenOptions::new()
            .write(true)
            .open(directory.path().join("rows"))
            .and_then(|file| {
                std::os::unix::fs::FileExt::write_all_at(&file, &bytes[at..at + 1], at as u64)
            })
            .unwrap();
        assert_eq!(blocks.get(3).unwrap().unwrap().units, 9);
        let fault = blocks.get(5).unwrap_err();
        assert!(fault.reason.contains("fails its check"), "{fault}");
    }

    /// Issue 32: rows whose hash, order or bounds are wrong are refused.
    #[test]
    fn issue_32_rows_out_of_order_or_bounds_or_damaged_are_refused() {
        let directory = tempfile::tempdir().unwrap();
        let (_, bytes) = rows(directory.path(), &[3, 5], false);
        let file = StoreFile::open(&directory.path().join("rows")).unwrap();
        let start = 8 + 200;
        let read = |bytes: &[u8], high: u64| {
            Rows::read(&bytes[start..], 2, (8, high), &file, None, None).map(drop)
        };
        assert!(read(&bytes, start as u64).is_ok());
        assert!(
            read(&bytes, start as u64 - 1).is_err(),
            "a block past the index"
        );
        let mut damaged = bytes.clone();
        damaged[start + 20] ^= 1;
        assert!(read(&damaged, start as u64).is_err(), "a changed byte");
        let mut swapped = bytes[..start].to_vec();
        swapped.extend_from_slice(&bytes[start + ROW..]);
        swapped.extend_from_slice(&bytes[start..start + ROW]);
        assert!(
            read(&swapped, start as u64).is_err(),
            "periods out of order"
        );
    }
}
