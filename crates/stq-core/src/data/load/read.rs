//! Reading snapshot files: one reader thread streams each file in path order to
//! the parsing threads, cut as its format says; the workers parse blocks with the
//! file's [`Format`](super::format::Format) and stage the records, and every 16 MiB of them store a
//! station's run at a time in that station's builder in a `DashMap` ([`Staged`]:
//! so a file of ~1000 stations interleaved loads as fast as a file per station).
//! Order does not depend on which worker got which block: a record's load order is
//! its file's ordinal and its line number, part of its key.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::{self, Read};
use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam::channel;
use dashmap::DashMap;
use flate2::read::MultiGzDecoder;
use parking_lot::Mutex;

use super::build::StationBuilder;
use super::files::{self, FileRead, SnapshotFile};
use super::format::{Block, Cut, Records};
use super::{FileReport, LoadError, LoadReport};
use crate::data::fault::StorageFault;
use crate::data::key::{load_order, RecordKey};
use crate::data::sealed::cache::BlockCache;
use crate::data::sources::InvalidLine;
use crate::data::sources::INVALID_LINES_SHOWN;
use crate::data::sources::{FileStamp, Resume, SourceState, Start};
use crate::data::station::{MetricEntry, UnitEntry};
use crate::data::stored::{self, StoredRecord};
use crate::data::symbols::{Symbol, Symbols};
use crate::data::threads;
use crate::domain::record::{numeric, IndexedFields, Kind, ParsedLine};

/// Bytes handed to a worker at once: large enough to amortize the hand-off, small
/// enough to keep both cores busy on a single file.
const BLOCK_BYTES: usize = 1 << 20;

/// Bytes of response JSON a worker stages before storing them ([`Staged`]): with
/// ~1000 stations interleaved, a few dozen records of each, so that storing a
/// station's run finds its table of pieces warm.
const STAGED_BYTES: usize = 16 << 20;

/// How a read cuts its work; tests make the parts small.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Split {
    /// Bytes of lines in a block (more for a longer line).
    pub(super) block_bytes: usize,
    /// Bytes of response JSON a worker stages before storing them.
    pub(super) staged_bytes: usize,
}

impl Default for Split {
    fn default() -> Split {
        Split {
            block_bytes: BLOCK_BYTES,
            staged_bytes: STAGED_BYTES,
        }
    }
}

/// What the workers build together while the files are read.
#[derive(Default)]
pub(crate) struct LoadState {
    pub(crate) stations: DashMap<Box<str>, StationBuilder>,
    pub(crate) symbols: SharedSymbols,
    pub(crate) invalid: Mutex<Vec<InvalidLine>>,
    pub(crate) pending: AtomicU64,
    pub(crate) files: Vec<FileCounters>,
    /// What each file's read found out about the file, in file order.
    pub(crate) reads: Vec<FileRead>,
    pub(crate) bytes: AtomicU64,
    pub(crate) split: Split,
    /// The hot window, when a station's old records are sealed as its files are
    /// read ([`StationBuilder::seal_while_reading`]): in a full load only, whose
    /// builders hold nothing but what they are handed; with the cache the
    /// sealed tiers are read through.
    pub(crate) seal_while_reading: Option<(std::time::Duration, BlockCache)>,
}

#[derive(Default)]
pub(crate) struct FileCounters {
    pub(crate) units: AtomicU64,
    pub(crate) metrics: AtomicU64,
    pub(crate) invalid: AtomicU64,
    /// 1 when its last line is pending.
    pub(crate) pending: AtomicU64,
    pub(crate) unknown_fields: Mutex<BTreeSet<String>>,
    /// The stations its records went to.
    pub(crate) stations: Mutex<BTreeSet<Box<str>>>,
    /// The station and kind of a record loaded from a last line without a line
    /// end, which a reload drops and reads again once the file grows.
    pub(crate) open_record: Mutex<Option<(Box<str>, Kind)>>,
    /// Its first [`INVALID_LINES_SHOWN`] invalid lines, in line order: what
    /// `/files` shows of this read.
    pub(crate) errors: Mutex<Vec<InvalidLine>>,
}

/// A symbol table the workers intern into concurrently; a reload's extends the
/// previous generation's, whose symbols the shared stations' entries hold.
pub(crate) struct SharedSymbols {
    previous: Arc<Symbols>,
    by_text: DashMap<Box<str>, Symbol, foldhash::fast::RandomState>,
    next: AtomicU32,
    /// The first fault of a lookup in the previous table's mapped runs: the
    /// workers go on (a string it hid is given the empty string's symbol), and
    /// the table, so the load, is that fault ([`SharedSymbols::into_symbols`]).
    fault: Mutex<Option<StorageFault>>,
}

impl SharedSymbols {
    /// A table that numbers new strings after `previous`'s.
    pub(crate) fn extending(previous: Arc<Symbols>) -> SharedSymbols {
        SharedSymbols {
            next: AtomicU32::new(previous.len() as u32),
            previous,
            by_text: DashMap::default(),
            fault: Mutex::new(None),
        }
    }

    fn intern(&self, text: &str) -> Symbol {
        match self.previous.lookup(text) {
            Ok(Some(symbol)) => return symbol,
            Ok(None) => {}
            Err(fault) => {
                self.fault.lock().get_or_insert(fault);
                return Symbol::EMPTY;
            }
        }
        if let Some(symbol) = self.by_text.get(text) {
            return *symbol;
        }
        *self
            .by_text
            .entry(text.into())
            .or_insert_with(|| Symbol(self.next.fetch_add(1, Ordering::Relaxed)))
    }

    /// The new strings, in symbol order.
    fn into_new(self) -> Vec<Box<str>> {
        let mut entries: Vec<(Box<str>, Symbol)> = self.by_text.into_iter().collect();
        entries.sort_by_key(|(_, symbol)| *symbol);
        entries.into_iter().map(|(text, _)| text).collect()
    }

    /// The table: the previous one extended with the new strings, or the fault
    /// of a lookup or a copy of its mapped runs.
    pub(crate) fn into_symbols(self) -> Result<Symbols, StorageFault> {
        if let Some(fault) = self.fault.lock().take() {
            return Err(fault);
        }
        let previous = Arc::clone(&self.previous);
        previous.extended(self.into_new())
    }
}

impl Default for SharedSymbols {
    /// A first load's table: the empty string's symbol is the only one known.
    fn default() -> SharedSymbols {
        SharedSymbols::extending(Arc::new(Symbols::default()))
    }
}

impl LoadState {
    pub(crate) fn report(&self, files: &[SnapshotFile]) -> LoadReport {
        let mut report = LoadReport {
            bytes: self.bytes.load(Ordering::Relaxed),
            pending: self.pending.load(Ordering::Relaxed),
            ..LoadReport::default()
        };
        for (file, counters) in files.iter().zip(&self.files) {
            let units = counters.units.load(Ordering::Relaxed);
            let metrics = counters.metrics.load(Ordering::Relaxed);
            report.units += units;
            report.metrics += metrics;
            report.files.push(FileReport {
                path: file.display.clone(),
                format: file.format.name(),
                kind: file.format.kind(),
                records: units + metrics,
                units,
                metrics,
                invalid: counters.invalid.load(Ordering::Relaxed),
                unknown_fields: counters.unknown_fields.lock().clone(),
            });
        }
        let mut invalid = self.invalid.lock().clone();
        let file_index: HashMap<&str, usize> = files
            .iter()
            .enumerate()
            .map(|(index, file)| (file.display.as_str(), index))
            .collect();
        invalid.sort_by_key(|line| (file_index.get(line.path.as_str()).copied(), line.line));
        report.invalid = invalid;
        report
    }
}

/// Reads and parses every file from its start into `state`, whose symbols may
/// extend a previous generation's.
pub(crate) fn read_all_into(
    mut state: LoadState,
    files: &[SnapshotFile],
    threads: usize,
    keep: bool,
) -> Result<LoadState, LoadError> {
    state.files = files.iter().map(|_| FileCounters::default()).collect();
    let threads = threads.max(1);
    let (sender, receiver) = channel::bounded::<Block>(threads * 2);
    // Every block in flight, and one being read, and one spare.
    let (spare_sender, spare) = channel::bounded::<Vec<u8>>(threads * 2 + 2);
    let blocks = Blocks { sender, spare };
    let read_result = threads::scope(|scope| {
        for _ in 0..threads {
            let receiver = receiver.clone();
            let spare = spare_sender.clone();
            let state = &state;
            scope.spawn(move |_| {
                let mut worker = Worker::default();
                for block in receiver {
                    worker.parse(&block, files, state, keep);
                    if block.bytes.capacity() <= SPARE_BYTES_MOST * state.split.block_bytes {
                        let _ = spare.try_send(block.bytes);
                    }
                    if worker.staged.json.len() >= state.split.staged_bytes {
                        worker.staged.hand_over(state);
                    }
                }
                worker.staged.hand_over(state);
            });
        }
        drop(receiver);
        drop(spare_sender);
        for file in files.iter().take(READ_AHEAD_FILES) {
            read_ahead(file);
        }
        let result = files
            .iter()
            .enumerate()
            .map(|(index, file)| {
                if let Some(ahead) = files.get(index + READ_AHEAD_FILES) {
                    read_ahead(ahead);
                }
                read_file(index as u32, file, &blocks, &state)
            })
            .collect::<Result<Vec<FileRead>, LoadError>>();
        drop(blocks);
        result
    });
    state.reads = read_result?;
    Ok(state)
}

/// The way to the parsing threads, and back: blocks go to them, and their emptied
/// buffers come back to be read into again. Reading each block into a new buffer
/// made a central logger's file per day (a 1 MiB block after another) cost a page
/// fault and the zeroing of every page of every block (BENCHMARKS.md).
struct Blocks {
    sender: channel::Sender<Block>,
    spare: channel::Receiver<Vec<u8>>,
}

/// Buffers larger than this many blocks (a line longer than a block, a file read
/// whole) are not kept for reuse.
const SPARE_BYTES_MOST: usize = 4;

/// How many files ahead of the one being read the kernel is asked to read.
const READ_AHEAD_FILES: usize = 4;

/// Asks the kernel to start reading `file` into the page cache now. The reader
/// reads one file at a time, and a file not in the cache then waits on the disk
/// alone: measured cold on this project's 2-core machine, one `cat` of the
/// 1000-station snapshot's files read 453 MB/s and four at once 797 MB/s. Only a
/// hint: a file that cannot be opened here is reported when it is read.
fn read_ahead(file: &SnapshotFile) {
    #[cfg(target_os = "linux")]
    if let Ok(handle) = File::open(&file.path) {
        use std::os::fd::AsRawFd as _;
        // SAFETY: the descriptor is open for the call; the advice only starts reads.
        unsafe {
            libc::posix_fadvise(handle.as_raw_fd(), 0, 0, libc::POSIX_FADV_WILLNEED);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}

/// Streams one file to the workers in blocks that end at line ends, from
/// `file.start` to the size the file had when it was opened.
fn read_file(
    index: u32,
    file: &SnapshotFile,
    blocks: &Blocks,
    state: &LoadState,
) -> Result<FileRead, LoadError> {
    let io_error = |source| LoadError::Io {
        path: file.display.clone(),
        source,
    };
    let mut handle = File::open(&file.path).map_err(io_error)?;
    let mut stamp = FileStamp::of(&handle.metadata().map_err(io_error)?);
    if !file.resumable() {
        let reader: Box<dyn Read> = if file.gzip {
            Box::new(MultiGzDecoder::new(io::BufReader::new(handle)))
        } else {
            Box::new(handle)
        };
        match file.format.cut() {
            Cut::Whole => read_whole(index, file, reader, blocks, state)?,
            Cut::Lines => {
                read_lines(index, file, reader, Start::BEGINNING, blocks, state)?;
            }
        }
        return Ok(FileRead {
            stamp,
            resume: None,
            resumed: false,
        });
    }
    // Checked on the file opened, not on the one the reload saw: it may have been
    // replaced in between.
    let start = match file.resume {
        Some((before, resume)) if files::grew(&handle, &before, &stamp, resume.tail) => {
            resume.start
        }
        _ => Start::BEGINNING,
    };
    if start.offset > 0 {
        io::Seek::seek(&mut handle, io::SeekFrom::Start(start.offset)).map_err(io_error)?;
    }
    // Up to the size seen at opening only: what a writer appends meanwhile is for
    // the next reload, and the size recorded is then the size read.
    let limit = stamp.length.saturating_sub(start.offset);
    let reader = Box::new((&handle).take(limit));
    let (read_to, resume) = read_lines(index, file, reader, start, blocks, state)?;
    stamp.length = read_to;
    let resume = files::tail_digest(&handle, read_to)
        .ok()
        .map(|tail| Resume {
            start: resume,
            tail,
        });
    Ok(FileRead {
        stamp,
        resume,
        resumed: start != Start::BEGINNING,
    })
}

/// Streams the lines of `reader`, which starts at `start`, to the workers; returns
/// the offset it read up to and where the last line without a line end starts (or
/// the end, when the last line has one).
fn read_lines(
    index: u32,
    file: &SnapshotFile,
    mut reader: Box<dyn Read + '_>,
    start: Start,
    blocks: &Blocks,
    state: &LoadState,
) -> Result<(u64, Start), LoadError> {
    let io_error = |source| LoadError::Io {
        path: file.display.clone(),
        source,
    };
    let mut next_line: u32 = start.line;
    let mut offset = start.offset;
    let mut pending: Vec<u8> = Vec::new();
    loop {
        // A spare buffer if there is one, the previous block's partial last line first.
        let mut block = blocks.spare.try_recv().unwrap_or_default();
        block.clear();
        block.reserve(pending.len() + state.split.block_bytes);
        block.extend_from_slice(&pending);
        pending.clear();
        let scanned = block.len();
        let read = (&mut reader)
            .take(state.split.block_bytes as u64)
            .read_to_end(&mut block);
        let at_end = match read {
            Ok(0) => true,
            Ok(_) => false,
            // A damaged gzip stream is bad data, not a broken disk: report where the
            // readable lines end and keep what came before.
            Err(error) if file.gzip && is_bad_data(&error) => {
                let complete = memchr::memrchr(b'\n', &block).map_or(0, |end| end + 1);
                block.truncate(complete);
                let line = next_line + memchr::memchr_iter(b'\n', &block).count() as u32;
                offset += block.len() as u64;
                send(blocks, state, index, &mut next_line, block, false);
                state.files[index as usize]
                    .invalid
                    .fetch_add(1, Ordering::Relaxed);
                state.invalid.lock().push(InvalidLine {
                    path: file.display.clone(),
                    line,
                    reason: format!("the gzip stream is damaged or truncated: {error}"),
                });
                let resume = Start {
                    offset,
                    line: next_line,
                };
                return Ok((offset, resume));
            }
            Err(error) => return Err(io_error(error)),
        };
        if at_end {
            let open_end = block.last().is_some_and(|byte| *byte != b'\n');
            let last_line = if open_end {
                memchr::memrchr(b'\n', &block).map_or(0, |end| end + 1)
            } else {
                block.len()
            };
            let resume_offset = offset + last_line as u64;
            offset += block.len() as u64;
            send(blocks, state, index, &mut next_line, block, open_end);
            // The last line has no line end, so `next_line` counted up to it.
            let resume = Start {
                offset: resume_offset,
                line: next_line,
            };
            return Ok((offset, resume));
        }
        // Keep the partial last line for the next block; a line longer than a block
        // simply makes a longer block.
        if let Some(end) = memchr::memrchr(b'\n', &block[scanned..]) {
            pending.extend_from_slice(&block[scanned + end + 1..]);
            block.truncate(scanned + end + 1);
            offset += block.len() as u64;
            send(blocks, state, index, &mut next_line, block, false);
        } else {
            pending = block;
        }
    }
}

/// Sends an OpenHTF file to the workers as one block: it is one JSON document, and
/// whole or invalid (no line of it is pending).
fn read_whole(
    index: u32,
    file: &SnapshotFile,
    mut reader: Box<dyn Read + '_>,
    blocks: &Blocks,
    state: &LoadState,
) -> Result<(), LoadError> {
    let mut bytes = Vec::new();
    match reader.read_to_end(&mut bytes) {
        Ok(_) => {}
        Err(error) if file.gzip && is_bad_data(&error) => {
            state.files[index as usize]
                .invalid
                .fetch_add(1, Ordering::Relaxed);
            state.invalid.lock().push(InvalidLine {
                path: file.display.clone(),
                line: 1,
                reason: format!("the gzip stream is damaged or truncated: {error}"),
            });
            return Ok(());
        }
        Err(error) => {
            return Err(LoadError::Io {
                path: file.display.clone(),
                source: error,
            })
        }
    }
    state.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    // The workers only stop when the channel closes, so sending cannot fail.
    let _ = blocks.sender.send(Block {
        file: index,
        first_line: 1,
        bytes,
        open_end: false,
    });
    Ok(())
}

fn is_bad_data(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput | io::ErrorKind::UnexpectedEof
    )
}

fn send(
    blocks: &Blocks,
    state: &LoadState,
    file: u32,
    next_line: &mut u32,
    bytes: Vec<u8>,
    open_end: bool,
) {
    if bytes.is_empty() {
        return;
    }
    state.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    let first_line = *next_line;
    *next_line += memchr::memchr_iter(b'\n', &bytes).count() as u32;
    // The workers only stop when the channel closes, so sending cannot fail.
    let _ = blocks.sender.send(Block {
        file,
        first_line,
        bytes,
        open_end,
    });
}

/// A parsing thread's reusable buffers, and the records it parsed but has not
/// stored yet.
#[derive(Default)]
struct Worker {
    rendered: Vec<u8>,
    unknown: Vec<String>,
    staged: Staged,
    symbols: SymbolCache,
}

/// Valid records one parsing thread has parsed and not yet stored: they are stored
/// in their stations' builders a station at a time ([`Staged::hand_over`]).
///
/// Why wait: storing a record looks its pieces up in its station's table of pieces
/// and writes at the end of its station's arena and entries. A file per station
/// (and day) brings blocks of one station's records, whose table and arena stay in
/// the cache while a block is stored. A central logger's file per day brings ~1000
/// stations interleaved in time, a few records of each per 1 MiB block: handed over
/// in a small batch per station and block, as they were, every batch built a table
/// and an arena of its own and was then copied into its station's, its pieces
/// looked up again in the station's cold table. Such a snapshot loaded at less than
/// half the speed (BENCHMARKS.md). Staged, a record is rendered once,
/// into one buffer, and a station's few dozen records of 16 MiB are stored in one
/// go, its table warm after the first. One buffer for all stations, reused: one per
/// station, freed and grown again between the builders, left the allocator holding
/// a hundred megabytes more after the load.
#[derive(Default)]
struct Staged {
    /// The staged records' response JSON, one after the other, as parsed.
    json: Vec<u8>,
    records: Vec<StagedRecord>,
    /// The stations this thread staged records of, and how many since the last
    /// hand-over.
    stations: indexmap::IndexMap<String, StagedStation, foldhash::fast::RandomState>,
    /// Stations whose first record of the current file came in the current block:
    /// noted in the file's counters at the block's end, under one lock.
    new_in_file: Vec<Box<str>>,
    /// The staged records' indexes, by station: reused by each hand-over.
    order: Vec<u32>,
}

#[derive(Default)]
struct StagedStation {
    /// Records staged since the last hand-over.
    records: u32,
    /// The last file whose counters were told of this station.
    noted: Option<u32>,
}

/// A record waiting to be stored: its entry lacks only where its bytes are.
struct StagedRecord {
    /// Its station's index in [`Staged::stations`].
    station: u32,
    key: RecordKey,
    /// Where its response JSON is in the staged JSON.
    json: Range<usize>,
    /// Where its time and value texts are in its response JSON.
    time: Range<usize>,
    value: Range<usize>,
    entry: StagedEntry,
}

#[derive(Clone, Copy)]
enum StagedEntry {
    Unit(UnitEntry),
    Metric(MetricEntry),
}

/// How many records ahead a hand-over asks for the staged JSON it will read, and
/// twice as many for the staged record that says where that JSON is: a central
/// logger's records of one station lie far apart in both.
const PREFETCH_RECORDS: usize = 4;

impl Staged {
    /// Stages a record of `station` from file number `file`, whose response JSON
    /// the staged JSON already holds.
    fn push(&mut self, station: &str, file: u32, mut record: StagedRecord) {
        let index = match self.stations.get_index_of(station) {
            Some(index) => index,
            None => {
                self.stations
                    .insert_full(station.to_owned(), StagedStation::default())
                    .0
            }
        };
        let staged = &mut self.stations[index];
        staged.records += 1;
        if staged.noted != Some(file) {
            staged.noted = Some(file);
            self.new_in_file.push(station.into());
        }
        record.station = index as u32;
        self.records.push(record);
    }

    /// Tells a file's counters of the stations a block of it staged first.
    fn note_stations(&mut self, counters: &FileCounters) {
        if !self.new_in_file.is_empty() {
            counters.stations.lock().extend(self.new_in_file.drain(..));
        }
    }

    /// Stores every staged record in its station's builder, a station at a time and
    /// each station's in the order parsed. Which thread stores which records first
    /// does not matter: a record's key holds its load order.
    fn hand_over(&mut self, state: &LoadState) {
        let Staged {
            json,
            records,
            stations,
            order,
            ..
        } = self;
        if records.is_empty() {
            return;
        }
        // A counting sort of the records by station.
        let mut next = Vec::with_capacity(stations.len());
        let mut total = 0;
        for station in stations.values() {
            next.push(total);
            total += station.records as usize;
        }
        order.clear();
        order.resize(records.len(), 0);
        for (index, record) in records.iter().enumerate() {
            let slot = &mut next[record.station as usize];
            order[*slot] = index as u32;
            *slot += 1;
        }
        let mut at = 0;
        for (name, station) in stations.iter_mut() {
            let count = std::mem::take(&mut station.records) as usize;
            if count == 0 {
                continue;
            }
            let mut builder = match state.stations.get_mut(name.as_str()) {
                Some(builder) => builder,
                None => state.stations.entry(name.as_str().into()).or_default(),
            };
            let builder = &mut *builder;
            for position in at..at + count {
                if let Some(&ahead) = order.get(position + 2 * PREFETCH_RECORDS) {
                    let ahead = &records[ahead as usize];
                    // Its first and last bytes: it spans two cache lines.
                    stored::prefetch_value(ahead);
                    stored::prefetch_value(&ahead.entry);
                }
                if let Some(&ahead) = order.get(position + PREFETCH_RECORDS) {
                    let ahead = &records[ahead as usize];
                    json[ahead.json.clone()]
                        .iter()
                        .step_by(64)
                        .for_each(stored::prefetch_value);
                }
                let record = &records[order[position] as usize];
                let bytes = stored::store(
                    &mut builder.arena,
                    &mut builder.pieces,
                    &json[record.json.clone()],
                    record.time.clone(),
                    record.value.clone(),
                );
                match record.entry {
                    StagedEntry::Unit(entry) => {
                        builder
                            .units
                            .push((record.key, UnitEntry { bytes, ..entry }));
                    }
                    StagedEntry::Metric(entry) => {
                        builder
                            .metrics
                            .push((record.key, MetricEntry { bytes, ..entry }));
                    }
                }
            }
            if let Some((hot, cache)) = &state.seal_while_reading {
                // A full load's tiers are sealed in memory, where no read fails.
                (builder.seal_while_reading(*hot, cache)).expect("a full load's sealed tier reads");
            }
            at += count;
        }
        records.clear();
        json.clear();
    }
}

/// The symbols a parsing thread met lately, in front of the shared table and its
/// locks: the lines of one unit repeat its serial number, slot and metric names.
#[derive(Default)]
struct SymbolCache {
    known: foldhash::HashMap<Box<str>, Symbol>,
}

impl SymbolCache {
    /// The most it holds; then it starts again, or it would grow as large as the
    /// table with a dataset's serial numbers.
    const MOST: usize = 1 << 16;

    fn intern(&mut self, shared: &SharedSymbols, text: &str) -> Symbol {
        if let Some(symbol) = self.known.get(text) {
            return *symbol;
        }
        let symbol = shared.intern(text);
        if self.known.len() >= Self::MOST {
            self.known.clear();
        }
        self.known.insert(text.into(), symbol);
        symbol
    }
}

impl Worker {
    /// Parses a block of file number `block.file` with the file's format.
    fn parse(&mut self, block: &Block, files: &[SnapshotFile], state: &LoadState, keep: bool) {
        let file = &files[block.file as usize];
        let mut records = BlockRecords {
            worker: self,
            state,
            file,
            index: block.file,
            keep,
            units: 0,
            metrics: 0,
            invalid: Vec::new(),
        };
        file.format.parse(block, &mut records);
        records.finish();
    }
}

/// What a format's parser finds in one block, on its way to the worker's staged
/// records and the file's counters (which are told once, at the block's end).
struct BlockRecords<'a> {
    worker: &'a mut Worker,
    state: &'a LoadState,
    file: &'a SnapshotFile,
    /// The file's index in the read.
    index: u32,
    /// False for `stq check`, which only validates and counts.
    keep: bool,
    units: u64,
    metrics: u64,
    invalid: Vec<InvalidLine>,
}

impl BlockRecords<'_> {
    fn counters(&self) -> &FileCounters {
        &self.state.files[self.index as usize]
    }

    /// Tells the file's counters what the block held.
    fn finish(self) {
        let counters = &self.state.files[self.index as usize];
        counters.units.fetch_add(self.units, Ordering::Relaxed);
        counters.metrics.fetch_add(self.metrics, Ordering::Relaxed);
        if !self.invalid.is_empty() {
            counters
                .invalid
                .fetch_add(self.invalid.len() as u64, Ordering::Relaxed);
            // Blocks end in any order, but a block's lines ascend: the file's first
            // lines are among each block's first.
            let mut errors = counters.errors.lock();
            errors.extend(self.invalid.iter().take(INVALID_LINES_SHOWN).cloned());
            errors.sort_by_key(|line| line.line);
            errors.truncate(INVALID_LINES_SHOWN);
            drop(errors);
            self.state.invalid.lock().extend(self.invalid);
        }
        if !self.worker.unknown.is_empty() {
            counters
                .unknown_fields
                .lock()
                .extend(self.worker.unknown.drain(..));
        }
        self.worker.staged.note_stations(counters);
    }
}

impl Records for BlockRecords<'_> {
    fn buffers(&mut self) -> (&mut Vec<u8>, &mut Vec<String>) {
        let worker = &mut *self.worker;
        // Kept, a record is rendered straight into the staged JSON.
        let json = match self.keep {
            true => &mut worker.staged.json,
            false => {
                worker.rendered.clear();
                &mut worker.rendered
            }
        };
        (json, &mut worker.unknown)
    }

    fn record(&mut self, parsed: ParsedLine<'_>, line: u32, json_start: usize, open: bool) {
        let kind = match parsed.fields {
            IndexedFields::Unit { .. } => Kind::Units,
            IndexedFields::Metric { .. } => Kind::Metrics,
        };
        match kind {
            Kind::Units => self.units += 1,
            Kind::Metrics => self.metrics += 1,
        }
        if open {
            *self.counters().open_record.lock() = Some((parsed.station_id.as_ref().into(), kind));
        }
        let key = load_order(self.file.ordinal, line);
        let worker = &mut *self.worker;
        stage(
            &mut worker.staged,
            &mut worker.symbols,
            self.state,
            parsed,
            (self.index, key),
            json_start,
            self.keep,
        );
    }

    fn invalid(&mut self, line: u32, reason: String) {
        self.invalid.push(InvalidLine {
            path: self.file.display.clone(),
            line,
            reason,
        });
    }

    fn pending(&mut self) {
        self.state.pending.fetch_add(1, Ordering::Relaxed);
        self.counters().pending.fetch_add(1, Ordering::Relaxed);
    }
}

/// Stages one valid record of file number `file`, whose response JSON is the
/// staged JSON from `json_start` on; `keep` false (`stq check`) only notes its
/// station.
fn stage(
    staged: &mut Staged,
    cache: &mut SymbolCache,
    state: &LoadState,
    parsed: ParsedLine<'_>,
    (file, load_order): (u32, u64),
    json_start: usize,
    keep: bool,
) {
    if !keep {
        if !state.stations.contains_key(parsed.station_id.as_ref()) {
            // `check` only counts stations: no allocation per record.
            state.stations.entry(parsed.station_id.into()).or_default();
        }
        return;
    }
    let key = RecordKey {
        instant: parsed.instant,
        load_order,
    };
    // Set when the record is stored.
    let bytes = StoredRecord {
        start: 0,
        length: 0,
    };
    let mut symbols = |text: &str| cache.intern(&state.symbols, text);
    let number = |text: &str| numeric(text).unwrap_or(f64::NAN);
    let entry = match parsed.fields {
        IndexedFields::Unit {
            unit_type,
            unit_serial,
            direction,
            slot,
            mode,
            result,
        } => StagedEntry::Unit(UnitEntry {
            bytes,
            unit_type: symbols(&unit_type),
            unit_serial: symbols(&unit_serial),
            direction,
            slot: symbols(&slot),
            mode: symbols(&mode),
            result: symbols(&result),
        }),
        IndexedFields::Metric {
            name,
            slot,
            unit_serial,
            unit,
            value,
            limit_lower,
            limit_upper,
        } => StagedEntry::Metric(MetricEntry {
            bytes,
            name: symbols(&name),
            slot: symbols(&slot),
            unit_serial: symbols(&unit_serial),
            unit: symbols(&unit),
            value: number(&value),
            limit_lower: number(&limit_lower),
            limit_upper: number(&limit_upper),
        }),
    };
    let record = StagedRecord {
        station: 0,
        key,
        json: json_start..staged.json.len(),
        time: parsed.time,
        value: parsed.value,
        entry,
    };
    staged.push(&parsed.station_id, file, record);
}

impl LoadState {
    /// The state of file `index` of this read, as this read alone found it.
    pub(crate) fn source(&self, files: &[SnapshotFile], index: usize) -> SourceState {
        let file = &files[index];
        let counters = &self.files[index];
        let read = self.reads[index];
        SourceState {
            relative: file.relative.clone().into_boxed_str(),
            ordinal: file.ordinal,
            format: file.format.name(),
            stamp: read.stamp,
            resume: read.resume,
            units: counters.units.load(Ordering::Relaxed),
            metrics: counters.metrics.load(Ordering::Relaxed),
            invalid: counters.invalid.load(Ordering::Relaxed),
            pending: counters.pending.load(Ordering::Relaxed),
            stations: std::mem::take(&mut *counters.stations.lock())
                .into_iter()
                .collect(),
            open_record: counters.open_record.lock().take(),
            held: None,
            errors: std::mem::take(&mut *counters.errors.lock()).into(),
        }
    }
}
