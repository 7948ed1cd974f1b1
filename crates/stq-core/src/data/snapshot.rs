//! Snapshot loading (docs/api.md section 2): finding the files, reading them (gzip
//! too), parsing and validating every line on all cores, and building an immutable
//! [`Generation`] with its stations spread over shards.
//!
//! The pipeline: one reader thread streams each file in path order, cut into blocks
//! at line ends; worker threads parse blocks into records and stage them, and every
//! 16 MiB of them store a station's run at a time in that station's builder in a
//! `DashMap` ([`Staged`]: so a file of ~1000 stations interleaved loads as fast as
//! a file per station); finally stations are placed on shards and each shard's
//! B-tree maps are built, in parallel.
//! Order does not depend on which worker got which block: a record's load order is
//! its file index and line number, part of its key.
//!
//! An OpenHTF file (`*.openhtf.json`) is one test record, not lines: it is read
//! whole, handed to a worker as one block, converted by [`crate::domain::openhtf`]
//! into record lines, and each line is parsed like a JSON Lines line, its position
//! (1, 2, 3, ...) standing for the line number. It loads whole or not at all.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel;
use dashmap::DashMap;
use flate2::read::MultiGzDecoder;
use parking_lot::Mutex;

use crate::data::catalog::{Catalog, Generation, LoadSummary, Placement};
use crate::data::incremental::{self, FileRead, FileStamp, Resume, SourceState};
use crate::data::key::{load_order, RecordKey};
use crate::data::shard::ShardData;
use crate::data::station::{MetricEntry, StationData, UnitEntry};
use crate::data::stored::{self, Piece, PieceTable, Pieces, StoredRecord};
use crate::data::symbols::{Symbol, Symbols};
use crate::data::threads;
use crate::domain::openhtf;
use crate::domain::record::{numeric, parse_line, IndexedFields, Kind, ParsedLine};

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
    block_bytes: usize,
    /// Bytes of response JSON a worker stages before storing them.
    staged_bytes: usize,
}

impl Default for Split {
    fn default() -> Split {
        Split {
            block_bytes: BLOCK_BYTES,
            staged_bytes: STAGED_BYTES,
        }
    }
}

/// How many invalid lines a failed start prints (docs/api.md section 2).
pub const INVALID_LINES_SHOWN: usize = 20;

/// What to do with an invalid line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnInvalid {
    Fail,
    Skip,
}

#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub directory: PathBuf,
    pub shards: usize,
    pub on_invalid: OnInvalid,
    pub generation: u64,
    /// Parsing threads; the reader is one more.
    pub threads: usize,
}

/// What a snapshot file holds, as its name says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// JSON Lines, a record of this kind per line.
    Lines(Kind),
    /// One OpenHTF test record: unit and metric records both.
    OpenHtf,
}

impl FileKind {
    /// The kind of a snapshot file and whether it is gzipped, from its name; `None`
    /// for files to ignore.
    pub fn of_file_name(name: &str) -> Option<(FileKind, bool)> {
        let (stem, gzipped) = match name.strip_suffix(".gz") {
            Some(stem) => (stem, true),
            None => (name, false),
        };
        if stem.ends_with(".openhtf.json") {
            return Some((FileKind::OpenHtf, gzipped));
        }
        Kind::of_file_name(name).map(|(kind, gzipped)| (FileKind::Lines(kind), gzipped))
    }
}

/// An invalid line, displayed as `path:line: reason`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidLine {
    pub path: String,
    pub line: u32,
    pub reason: String,
}

impl fmt::Display for InvalidLine {
    fn fmt(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        write!(formatter, "{}:{}: {}", self.path, self.line, self.reason)
    }
}

/// One snapshot file and what was found in it.
#[derive(Clone, Debug)]
pub struct FileReport {
    pub path: String,
    pub kind: FileKind,
    /// Valid records: `units + metrics`.
    pub records: u64,
    pub units: u64,
    pub metrics: u64,
    pub invalid: u64,
    /// Field names of the file that the record shape does not have.
    pub unknown_fields: BTreeSet<String>,
}

#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    pub files: Vec<FileReport>,
    /// Every invalid line, in load order.
    pub invalid: Vec<InvalidLine>,
    pub units: u64,
    pub metrics: u64,
    pub stations: usize,
    /// Last lines without a line end that do not parse (yet): not loaded, not
    /// counted as invalid (docs/api.md section 8).
    pub pending: u64,
    /// Snapshot bytes read, after decompression.
    pub bytes: u64,
    /// Files a reload under `--on-invalid fail` held back for their invalid lines
    /// (as messages name them): each serves what it served before.
    pub held: Vec<String>,
    pub elapsed: Duration,
}

impl LoadReport {
    pub fn records(&self) -> u64 {
        self.units + self.metrics
    }

    /// Logs what loaded but deserves a look: an empty directory, each skipped line
    /// as `path:line: reason`, and each file's unknown fields, once.
    pub fn log_warnings(&self, directory: &Path) {
        if self.files.is_empty() {
            tracing::warn!(
                directory = %directory.display(),
                "the snapshot directory holds no *.units.jsonl, *.metrics.jsonl or *.openhtf.json files: serving no records"
            );
        }
        for line in &self.invalid {
            tracing::warn!("skipped {line}");
        }
        for file in &self.files {
            if !file.unknown_fields.is_empty() {
                let names: Vec<&str> = file.unknown_fields.iter().map(String::as_str).collect();
                tracing::warn!(
                    "{}: unknown fields ignored: {}",
                    file.path,
                    names.join(", ")
                );
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("snapshot directory {0} does not exist or is not a directory")]
    MissingDirectory(PathBuf),
    #[error("cannot read {path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("{station:?} holds more than 4 GiB of records; use more, smaller stations")]
    StationTooLarge { station: String },
    #[error("{} invalid snapshot line(s)", report.invalid.len())]
    Invalid { report: Box<LoadReport> },
}

/// A snapshot file found by the scan, and where its reading starts.
#[derive(Clone, Debug)]
pub(crate) struct SnapshotFile {
    pub(crate) path: PathBuf,
    /// Relative to the directory, `/`-separated: what a cursor names.
    pub(crate) relative: String,
    /// The directory joined with the relative path, as messages name it.
    pub(crate) display: String,
    pub(crate) kind: FileKind,
    pub(crate) gzip: bool,
    /// The first half of its lines' load order.
    pub(crate) ordinal: u32,
    /// For a reload, the file as last read and where that read's whole lines end:
    /// if it only grew since, reading resumes there; otherwise it starts over.
    pub(crate) resume: Option<(FileStamp, Resume)>,
}

/// A place in a file where whole lines start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Start {
    pub(crate) offset: u64,
    /// The number of the line that starts there.
    pub(crate) line: u32,
}

impl Start {
    pub(crate) const BEGINNING: Start = Start { offset: 0, line: 1 };
}

/// Loads a snapshot directory into a generation spread over `options.shards` shards.
pub fn load(options: &LoadOptions) -> Result<(Generation, LoadReport), LoadError> {
    load_with(options, Split::default())
}

/// [`load`], its reading cut as `split` says.
fn load_with(options: &LoadOptions, split: Split) -> Result<(Generation, LoadReport), LoadError> {
    let started = Instant::now();
    let mut files = discover(&options.directory)?;
    incremental::spread_ordinals(&mut files);
    let state = LoadState {
        split,
        ..LoadState::default()
    };
    let mut state = read_all_into(state, &files, options.threads, true)?;
    let mut report = state.report(&files);
    if !report.invalid.is_empty() && options.on_invalid == OnInvalid::Fail {
        report.elapsed = started.elapsed();
        return Err(LoadError::Invalid {
            report: Box::new(report),
        });
    }
    let symbols = Arc::new(std::mem::take(&mut state.symbols).into_symbols());
    let summary = LoadSummary {
        loaded_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        units: report.units,
        metrics: report.metrics,
        skipped_lines: report.invalid.len() as u64,
        pending_lines: report.pending,
        held_files: 0,
    };
    let sources = incremental::sources(&files, &mut state);
    let stations = std::mem::take(&mut state.stations);
    let generation = build(stations, symbols, summary, sources, options)?;
    report.stations = generation.catalog.stations.len();
    report.elapsed = started.elapsed();
    Ok((generation, report))
}

/// Validates every line without building an index (`stq check`).
pub fn check(directory: &Path, threads: usize) -> Result<LoadReport, LoadError> {
    let started = Instant::now();
    let files = discover(directory)?;
    let state = read_all(&files, threads, false)?;
    let mut report = state.report(&files);
    report.stations = state.stations.len();
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Every snapshot file below `directory`, in byte order of the relative paths.
pub(crate) fn discover(directory: &Path) -> Result<Vec<SnapshotFile>, LoadError> {
    if !directory.is_dir() {
        return Err(LoadError::MissingDirectory(directory.to_path_buf()));
    }
    let mut files = Vec::new();
    for entry in walkdir::WalkDir::new(directory).follow_links(true) {
        let entry = entry.map_err(|error| LoadError::Io {
            path: error.path().unwrap_or(directory).display().to_string(),
            source: error.into(),
        })?;
        if !entry.file_type().is_file() {
            continue;
        }
        let Some((kind, gzip)) = FileKind::of_file_name(&entry.file_name().to_string_lossy())
        else {
            continue;
        };
        let relative = entry
            .path()
            .strip_prefix(directory)
            .unwrap_or(entry.path())
            .components()
            .map(|component| component.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        files.push((relative, entry.into_path(), kind, gzip));
    }
    files.sort_by(|left, right| left.0.as_bytes().cmp(right.0.as_bytes()));
    Ok(files
        .into_iter()
        .map(|(relative, path, kind, gzip)| SnapshotFile {
            display: directory.join(&relative).display().to_string(),
            relative,
            path,
            kind,
            gzip,
            ordinal: 0,
            resume: None,
        })
        .collect())
}

/// A run of lines of one file, ending at a line end (or the file's end).
struct Block {
    file: u32,
    first_line: u32,
    bytes: Vec<u8>,
    /// The file's last block, whose last line has no line end: a writer may be
    /// half-way through it, so if it does not parse it is pending, not invalid.
    open_end: bool,
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
    /// The station of a record loaded from a last line without a line end, which a
    /// reload drops and reads again once the file grows.
    pub(crate) open_station: Mutex<Option<Box<str>>>,
}

/// One station's records as they arrive, before its B-tree maps are built.
#[derive(Default)]
pub(crate) struct StationBuilder {
    pub(crate) arena: Vec<u8>,
    pub(crate) pieces: PieceTable,
    pub(crate) units: Vec<(RecordKey, UnitEntry)>,
    pub(crate) metrics: Vec<(RecordKey, MetricEntry)>,
}

/// A symbol table the workers intern into concurrently; a reload's extends the
/// previous generation's, whose symbols the shared stations' entries hold.
#[derive(Default)]
pub(crate) struct SharedSymbols {
    previous: Option<Arc<Symbols>>,
    by_text: DashMap<Box<str>, Symbol, foldhash::fast::RandomState>,
    next: AtomicU32,
}

impl SharedSymbols {
    /// A table that numbers new strings after `previous`'s.
    pub(crate) fn extending(previous: Arc<Symbols>) -> SharedSymbols {
        SharedSymbols {
            next: AtomicU32::new(previous.len() as u32),
            previous: Some(previous),
            by_text: DashMap::default(),
        }
    }

    fn intern(&self, text: &str) -> Symbol {
        if let Some(symbol) = self
            .previous
            .as_ref()
            .and_then(|previous| previous.lookup(text))
        {
            return symbol;
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

    pub(crate) fn into_symbols(self) -> Symbols {
        let previous = self.previous.clone();
        let new = self.into_new();
        match previous {
            Some(previous) => previous.extended(new),
            None => Symbols::default().extended(new),
        }
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
                kind: file.kind,
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

/// Reads and parses every file; `keep` false only validates and counts.
fn read_all(files: &[SnapshotFile], threads: usize, keep: bool) -> Result<LoadState, LoadError> {
    read_all_into(LoadState::default(), files, threads, keep)
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
    let read_result = threads::scope(|scope| {
        for _ in 0..threads {
            let receiver = receiver.clone();
            let state = &state;
            scope.spawn(move |_| {
                let mut worker = Worker::default();
                for block in receiver {
                    worker.parse(block, files, state, keep);
                    if worker.staged.json.len() >= state.split.staged_bytes {
                        worker.staged.hand_over(state);
                    }
                }
                worker.staged.hand_over(state);
            });
        }
        drop(receiver);
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
                read_file(index as u32, file, &sender, &state)
            })
            .collect::<Result<Vec<FileRead>, LoadError>>();
        drop(sender);
        result
    });
    state.reads = read_result?;
    Ok(state)
}

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
    sender: &channel::Sender<Block>,
    state: &LoadState,
) -> Result<FileRead, LoadError> {
    let io_error = |source| LoadError::Io {
        path: file.display.clone(),
        source,
    };
    let mut handle = File::open(&file.path).map_err(io_error)?;
    let mut stamp = FileStamp::of(&handle.metadata().map_err(io_error)?);
    let whole = file.gzip || file.kind == FileKind::OpenHtf;
    if whole {
        let reader: Box<dyn Read> = if file.gzip {
            Box::new(MultiGzDecoder::new(io::BufReader::new(handle)))
        } else {
            Box::new(handle)
        };
        if file.kind == FileKind::OpenHtf {
            read_whole(index, file, reader, sender, state)?;
        } else {
            read_lines(index, file, reader, Start::BEGINNING, sender, state)?;
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
        Some((before, resume)) if incremental::grew(&handle, &before, &stamp, resume.tail) => {
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
    let (read_to, resume) = read_lines(index, file, reader, start, sender, state)?;
    stamp.length = read_to;
    let resume = incremental::tail_digest(&handle, read_to)
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
    sender: &channel::Sender<Block>,
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
        let mut block = std::mem::take(&mut pending);
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
                send(sender, state, index, &mut next_line, block, false);
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
            send(sender, state, index, &mut next_line, block, open_end);
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
            pending = block.split_off(scanned + end + 1);
            offset += block.len() as u64;
            send(sender, state, index, &mut next_line, block, false);
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
    sender: &channel::Sender<Block>,
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
    let _ = sender.send(Block {
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
    sender: &channel::Sender<Block>,
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
    let _ = sender.send(Block {
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
/// half the speed (BENCHMARKS.md, issue 21). Staged, a record is rendered once,
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
    fn parse(&mut self, block: Block, files: &[SnapshotFile], state: &LoadState, keep: bool) {
        let file = &files[block.file as usize];
        let kind = match file.kind {
            FileKind::Lines(kind) => kind,
            FileKind::OpenHtf => return self.parse_openhtf(block, file, state, keep),
        };
        let counters = &state.files[block.file as usize];
        let mut records = 0;
        let mut invalid = Vec::new();
        for (offset, (raw_line, is_last)) in lines(&block.bytes).enumerate() {
            let line_number = block.first_line + offset as u32;
            let mut line = raw_line.strip_suffix(b"\r").unwrap_or(raw_line);
            if line_number == 1 {
                line = line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line);
            }
            if line.trim_ascii().is_empty() {
                continue;
            }
            // Kept, a record is rendered straight into the staged JSON.
            let rendered = match keep {
                true => &mut self.staged.json,
                false => {
                    self.rendered.clear();
                    &mut self.rendered
                }
            };
            let json_start = rendered.len();
            let result = std::str::from_utf8(line)
                .map_err(|error| format!("invalid UTF-8 at byte {}", error.valid_up_to() + 1))
                .and_then(|text| parse_line(kind, text, rendered, &mut self.unknown));
            match result {
                Ok(parsed) => {
                    records += 1;
                    if block.open_end && is_last {
                        *counters.open_station.lock() = Some(parsed.station_id.as_ref().into());
                    }
                    let key = load_order(file.ordinal, line_number);
                    stage(
                        &mut self.staged,
                        &mut self.symbols,
                        state,
                        parsed,
                        (block.file, key),
                        json_start,
                        keep,
                    );
                }
                Err(_) if block.open_end && is_last => {
                    state.pending.fetch_add(1, Ordering::Relaxed);
                    counters.pending.fetch_add(1, Ordering::Relaxed);
                }
                Err(reason) => invalid.push(InvalidLine {
                    path: file.display.clone(),
                    line: line_number,
                    reason,
                }),
            }
        }
        let records_of_kind = match kind {
            Kind::Units => &counters.units,
            Kind::Metrics => &counters.metrics,
        };
        records_of_kind.fetch_add(records, Ordering::Relaxed);
        if !invalid.is_empty() {
            counters
                .invalid
                .fetch_add(invalid.len() as u64, Ordering::Relaxed);
            state.invalid.lock().extend(invalid);
        }
        if !self.unknown.is_empty() {
            counters
                .unknown_fields
                .lock()
                .extend(self.unknown.drain(..));
        }
        self.staged.note_stations(counters);
    }

    /// One OpenHTF file: its records in the order of docs/api.md section 2, each
    /// numbered as line 1, 2, 3, ...; any problem is one invalid line 1 for the
    /// whole file, and then none of its records is kept.
    fn parse_openhtf(&mut self, block: Block, file: &SnapshotFile, state: &LoadState, keep: bool) {
        let counters = &state.files[block.file as usize];
        let lines = match openhtf::convert(&block.bytes) {
            Ok(lines) => lines,
            Err(reason) => {
                counters.invalid.fetch_add(1, Ordering::Relaxed);
                state.invalid.lock().push(InvalidLine {
                    path: file.display.clone(),
                    line: 1,
                    reason,
                });
                return;
            }
        };
        // Every line is parsed before any is kept, so that a file loads whole or not
        // at all. The converter writes lines `parse_line` accepts; this is the check.
        let mut parsed_lines: Vec<(ParsedLine<'_>, Vec<u8>)> = Vec::with_capacity(lines.len());
        for (kind, line) in &lines {
            let mut rendered = Vec::new();
            match parse_line(*kind, line, &mut rendered, &mut self.unknown) {
                Ok(parsed) => parsed_lines.push((parsed, rendered)),
                Err(reason) => {
                    counters.invalid.fetch_add(1, Ordering::Relaxed);
                    state.invalid.lock().push(InvalidLine {
                        path: file.display.clone(),
                        line: 1,
                        reason,
                    });
                    self.unknown.clear();
                    return;
                }
            }
        }
        self.unknown.clear();
        for (position, (parsed, rendered)) in parsed_lines.into_iter().enumerate() {
            let counter = match parsed.fields {
                IndexedFields::Unit { .. } => &counters.units,
                IndexedFields::Metric { .. } => &counters.metrics,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            let key = load_order(file.ordinal, position as u32 + 1);
            let json_start = self.staged.json.len();
            if keep {
                self.staged.json.extend_from_slice(&rendered);
            }
            stage(
                &mut self.staged,
                &mut self.symbols,
                state,
                parsed,
                (block.file, key),
                json_start,
                keep,
            );
        }
        self.staged.note_stations(counters);
    }
}

/// `bytes` cut at each `\n`, as `<[u8]>::split` cuts them, each piece with whether
/// it is the last.
fn lines(bytes: &[u8]) -> impl Iterator<Item = (&[u8], bool)> {
    let mut rest = Some(bytes);
    std::iter::from_fn(move || {
        let bytes = rest?;
        match memchr::memchr(b'\n', bytes) {
            Some(end) => {
                rest = Some(&bytes[end + 1..]);
                Some((&bytes[..end], false))
            }
            None => {
                rest = None;
                Some((bytes, true))
            }
        }
    })
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
            unit,
            value,
            limit_lower,
            limit_upper,
        } => StagedEntry::Metric(MetricEntry {
            bytes,
            name: symbols(&name),
            slot: symbols(&slot),
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

impl StationBuilder {
    /// Takes over the records of a batch of the same station, in its order after
    /// this builder's.
    pub(crate) fn append(&mut self, batch: StationBuilder) {
        let mut known = foldhash::HashMap::default();
        known.reserve(batch.pieces.len());
        let pieces = batch.pieces.finish();
        self.arena.reserve(batch.arena.len());
        self.units.reserve(batch.units.len());
        for (key, entry) in batch.units {
            let bytes = self.copy(&batch.arena, &pieces, entry.bytes, &mut known);
            self.units.push((key, UnitEntry { bytes, ..entry }));
        }
        self.metrics.reserve(batch.metrics.len());
        for (key, entry) in batch.metrics {
            let bytes = self.copy(&batch.arena, &pieces, entry.bytes, &mut known);
            self.metrics.push((key, MetricEntry { bytes, ..entry }));
        }
    }

    /// Stores a record of another arena and table of pieces in this builder's;
    /// `known` is [`stored::copy`]'s, one for each other table.
    pub(crate) fn copy(
        &mut self,
        arena: &[u8],
        pieces: &Pieces,
        record: StoredRecord,
        known: &mut foldhash::HashMap<Piece, Piece>,
    ) -> StoredRecord {
        stored::copy(
            &mut self.arena,
            &mut self.pieces,
            arena,
            pieces,
            record,
            known,
        )
    }

    pub(crate) fn record_count(&self) -> usize {
        self.units.len() + self.metrics.len()
    }

    /// Whether its arena and its pieces can be addressed with 32 bits, as its
    /// entries and piece table address them.
    pub(crate) fn fits(&self) -> bool {
        u32::try_from(self.arena.len()).is_ok() && u32::try_from(self.pieces.bytes()).is_ok()
    }
}

/// Places stations on shards and builds each shard's index, shards in parallel.
fn build(
    stations: DashMap<Box<str>, StationBuilder>,
    symbols: Arc<Symbols>,
    summary: LoadSummary,
    sources: Vec<SourceState>,
    options: &LoadOptions,
) -> Result<Generation, LoadError> {
    let mut stations: Vec<(Box<str>, StationBuilder)> = stations.into_iter().collect();
    stations.sort_by(|left, right| left.0.as_bytes().cmp(right.0.as_bytes()));
    if let Some((station, _)) = stations.iter().find(|(_, builder)| !builder.fits()) {
        return Err(LoadError::StationTooLarge {
            station: station.to_string(),
        });
    }

    let shard_count = options.shards.max(1);
    let shard_of = place(&stations, shard_count);
    let mut per_shard: Vec<Vec<StationBuilder>> = (0..shard_count).map(|_| Vec::new()).collect();
    let mut ranks_per_shard: Vec<Vec<u32>> = vec![Vec::new(); shard_count];
    let mut names = Vec::with_capacity(stations.len());
    let mut placements = Vec::with_capacity(stations.len());
    for ((name, builder), shard) in stations.into_iter().zip(shard_of) {
        let shard_stations = &mut per_shard[shard];
        placements.push(Placement {
            shard: shard as u32,
            station_index: shard_stations.len() as u32,
        });
        shard_stations.push(builder);
        ranks_per_shard[shard].push(names.len() as u32);
        names.push(name);
    }

    let shards = threads::map(
        per_shard.into_iter().zip(&ranks_per_shard).collect(),
        |(builders, ranks)| {
            let stations = builders.into_iter().map(StationBuilder::finish).collect();
            ShardData::new(options.generation, stations, ranks)
        },
    );

    Ok(Generation {
        catalog: Arc::new(Catalog::new(
            options.generation,
            names,
            placements,
            symbols,
            shard_count,
            summary,
            sources,
        )),
        shards,
    })
}

impl StationBuilder {
    pub(crate) fn finish(self) -> StationData {
        StationData::new(
            self.arena.into_boxed_slice(),
            self.pieces.finish(),
            self.units,
            self.metrics,
        )
    }
}

/// Spreads stations over shards by record count, largest first onto the lightest
/// shard, so that no shard does much more than its share of the work. Stations are
/// given in rank order; the result is each one's shard, by rank.
fn place(stations: &[(Box<str>, StationBuilder)], shard_count: usize) -> Vec<usize> {
    let mut by_size: Vec<usize> = (0..stations.len()).collect();
    by_size.sort_by_key(|&rank| std::cmp::Reverse(stations[rank].1.record_count()));
    let mut load = vec![0usize; shard_count];
    let mut shard_of = vec![0; stations.len()];
    for rank in by_size {
        let shard = (0..shard_count)
            .min_by_key(|&shard| (load[shard], shard))
            .expect("there is at least one shard");
        load[shard] += stations[rank].1.record_count();
        shard_of[rank] = shard;
    }
    shard_of
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::Write as _;

    use serde_json::Value;

    use super::*;

    /// A fresh directory under the system's temporary directory, removed when dropped.
    struct TempDirectory(PathBuf);

    impl TempDirectory {
        fn new(name: &str) -> TempDirectory {
            let path = std::env::temp_dir().join(format!(
                "stq-snapshot-{name}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            TempDirectory(path)
        }

        fn write(&self, relative: &str, bytes: &[u8]) {
            let path = self.0.join(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        }

        fn display(&self, relative: &str) -> String {
            self.0.join(relative).display().to_string()
        }
    }

    impl Drop for TempDirectory {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A committed OpenHTF fixture's bytes (tests/openhtf/records/).
    fn fixture(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/../../tests/openhtf/records/{name}.openhtf.json",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&path).unwrap_or_else(|error| panic!("{path}: {error}"))
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    fn options(directory: &TempDirectory, on_invalid: OnInvalid) -> LoadOptions {
        LoadOptions {
            directory: directory.0.clone(),
            shards: 2,
            on_invalid,
            generation: 1,
            threads: 2,
        }
    }

    /// Every record of a generation as (file index in path order, line, response
    /// JSON), in load order.
    fn records(generation: &Generation) -> Vec<(u32, u32, Value)> {
        let catalog = generation.catalog();
        let mut found = Vec::new();
        for rank in 0..catalog.stations().len() {
            let placement = catalog.placement(rank as u32);
            let station = &generation.shards()[placement.shard as usize].stations
                [placement.station_index as usize];
            let units = station.units.iter().map(|(key, entry)| (key, entry.bytes));
            let metrics = station
                .metrics
                .iter()
                .map(|(key, entry)| (key, entry.bytes));
            for (key, bytes) in units.chain(metrics) {
                let ordinal = (key.load_order >> 32) as u32;
                let file = catalog.file_ordinals.binary_search(&ordinal).unwrap();
                found.push((
                    file as u32,
                    key.load_order as u32,
                    serde_json::from_slice(&station.json(bytes).to_vec()).unwrap(),
                ));
            }
        }
        found.sort_by_key(|(file, line, _)| (*file, *line));
        found
    }

    /// A record's kind and name as a short label: `input`, `output` or the metric name.
    fn label(record: &Value) -> &str {
        record["direction"]
            .as_str()
            .or_else(|| record["name"].as_str())
            .unwrap()
    }

    #[test]
    fn blocks_are_cut_into_lines_as_split_cuts_them() {
        for bytes in ["", "\n", "a", "a\n", "a\nb", "\n\na\r\nb\n\n"] {
            let bytes = bytes.as_bytes();
            let expected: Vec<&[u8]> = bytes.split(|byte| *byte == b'\n').collect();
            let cut: Vec<(&[u8], bool)> = lines(bytes).collect();
            assert_eq!(
                cut.iter().map(|(line, _)| *line).collect::<Vec<_>>(),
                expected
            );
            let lasts: Vec<bool> = cut.iter().map(|(_, last)| *last).collect();
            assert_eq!(lasts.iter().filter(|last| **last).count(), 1);
            assert_eq!(lasts.last(), Some(&true));
        }
    }

    #[test]
    fn file_names_choose_the_kind() {
        for (name, wanted) in [
            ("a.units.jsonl", Some((FileKind::Lines(Kind::Units), false))),
            (
                "a.metrics.jsonl.gz",
                Some((FileKind::Lines(Kind::Metrics), true)),
            ),
            ("a.openhtf.json", Some((FileKind::OpenHtf, false))),
            ("a.openhtf.json.gz", Some((FileKind::OpenHtf, true))),
            (".openhtf.json", Some((FileKind::OpenHtf, false))),
            ("a.json", None),
            ("a.openhtf.jsonl", None),
            ("a.openhtf.json.bak", None),
            ("a.OPENHTF.json", None),
        ] {
            assert_eq!(FileKind::of_file_name(name), wanted, "{name}");
        }
    }

    #[test]
    fn openhtf_files_load_in_path_order_beside_json_lines() {
        let directory = TempDirectory::new("openhtf-order");
        directory.write(
            "a/first.units.jsonl",
            br#"{"station_id":"ST-OHTF-A","time_created":"2024-01-01T00:00:00Z","direction":"output"}"#,
        );
        directory.write("a/passing.openhtf.json", &fixture("passing"));
        directory.write("b/erroring.openhtf.json.gz", &gzip(&fixture("erroring")));
        directory.write("b/notes.json", b"{}");
        directory.write("b/failing.openhtf.json.bak", b"not read");

        let (generation, report) = load(&options(&directory, OnInvalid::Fail)).unwrap();
        assert_eq!((report.units, report.metrics), (5, 16));
        assert_eq!(report.stations, 2);
        assert!(report.invalid.is_empty());
        let files: Vec<(FileKind, u64, u64, u64)> = report
            .files
            .iter()
            .map(|file| (file.kind, file.records, file.units, file.metrics))
            .collect();
        assert_eq!(
            files,
            [
                (FileKind::Lines(Kind::Units), 1, 1, 0),
                (FileKind::OpenHtf, 16, 2, 14),
                (FileKind::OpenHtf, 4, 2, 2),
            ]
        );
        assert_eq!(
            generation.catalog().files,
            [
                "a/first.units.jsonl".into(),
                "a/passing.openhtf.json".into(),
                "b/erroring.openhtf.json.gz".into()
            ]
        );

        let found = records(&generation);
        let order: Vec<(u32, u32, &str)> = found
            .iter()
            .map(|(file, line, record)| (*file, *line, label(record)))
            .collect();
        let passing = [
            "input",
            "output",
            "vcc",
            "temperature",
            "ripple",
            "rail_count",
            "vref",
            "gain",
            "humidity",
            "firmware",
            "frequency",
            "leakage",
            "standby_current",
            "self_test",
            "samples",
            "calibration",
        ];
        let mut wanted = vec![(0, 1, "output")];
        wanted.extend(
            passing
                .iter()
                .enumerate()
                .map(|(position, label)| (1, position as u32 + 1, *label)),
        );
        wanted.extend([
            (2, 1, "input"),
            (2, 2, "output"),
            (2, 3, "vcc"),
            (2, 4, "flash_size"),
        ]);
        assert_eq!(order, wanted);
        let erroring_output = &found
            .iter()
            .find(|(file, line, _)| (*file, *line) == (2, 2))
            .unwrap()
            .2;
        assert_eq!(erroring_output["station_id"], "ST-OHTF-B");
        assert_eq!(erroring_output["unit_serial"], "SN-ERR-003");
        assert_eq!(erroring_output["result"], "error");
    }

    #[test]
    fn a_bad_openhtf_file_is_one_invalid_line() {
        let directory = TempDirectory::new("openhtf-invalid");
        let failing = fixture("failing");
        directory.write("good.openhtf.json", &fixture("passing"));
        directory.write(
            "no-dut.openhtf.json",
            br#"{"station_id":"S","start_time_millis":0,"end_time_millis":0}"#,
        );
        // A file still being written is invalid, not pending: it is one document.
        directory.write("partial.openhtf.json", &failing[..failing.len() / 2]);
        let mut damaged = gzip(&failing);
        damaged.truncate(damaged.len() - 12);
        directory.write("damaged.openhtf.json.gz", &damaged);
        directory.write("empty.openhtf.json", b"");

        let error = load(&options(&directory, OnInvalid::Fail)).unwrap_err();
        let LoadError::Invalid { report } = error else {
            panic!("{error}")
        };
        let lines: Vec<(String, u32)> = report
            .invalid
            .iter()
            .map(|line| (line.path.clone(), line.line))
            .collect();
        assert_eq!(
            lines,
            [
                (directory.display("damaged.openhtf.json.gz"), 1),
                (directory.display("empty.openhtf.json"), 1),
                (directory.display("no-dut.openhtf.json"), 1),
                (directory.display("partial.openhtf.json"), 1),
            ]
        );
        assert!(
            report.invalid[0].reason.contains("gzip stream"),
            "{:?}",
            report.invalid[0]
        );
        assert_eq!(report.invalid[2].reason, "missing field `dut_id`");
        assert_eq!(
            report.invalid[2].to_string(),
            format!(
                "{}:1: missing field `dut_id`",
                directory.display("no-dut.openhtf.json")
            )
        );
        assert_eq!(report.pending, 0);

        let (generation, report) = load(&options(&directory, OnInvalid::Skip)).unwrap();
        assert_eq!(report.invalid.len(), 4);
        assert_eq!((report.units, report.metrics), (2, 14));
        assert_eq!(generation.catalog().summary().skipped_lines, 4);
        for file in &report.files {
            let good = file.path.ends_with("good.openhtf.json");
            assert_eq!(file.invalid, u64::from(!good), "{}", file.path);
            assert_eq!(file.records, if good { 16 } else { 0 }, "{}", file.path);
        }
        assert_eq!(records(&generation).len(), 16);
    }

    #[test]
    fn check_counts_openhtf_records() {
        let directory = TempDirectory::new("openhtf-check");
        for name in ["passing", "failing", "erroring"] {
            directory.write(&format!("{name}.openhtf.json"), &fixture(name));
        }
        directory.write("bad.openhtf.json", b"[]");
        let report = check(&directory.0, 2).unwrap();
        assert_eq!((report.units, report.metrics), (6, 18));
        assert_eq!(report.stations, 2);
        let files: Vec<(&str, u64, u64, u64)> = report
            .files
            .iter()
            .map(|file| {
                let name = file.path.rsplit('/').next().unwrap();
                (name, file.units, file.metrics, file.invalid)
            })
            .collect();
        assert_eq!(
            files,
            [
                ("bad.openhtf.json", 0, 0, 1),
                ("erroring.openhtf.json", 2, 2, 0),
                ("failing.openhtf.json", 2, 2, 0),
                ("passing.openhtf.json", 2, 14, 0),
            ]
        );
        assert_eq!(
            report.invalid[0].reason,
            "an OpenHTF test record must be a JSON object"
        );
    }

    /// `count` lines of a central logger's day: `stations` stations interleaved in
    /// time, each line ending in a line end, with what such files also hold now
    /// and then: a byte order mark, Windows line ends, blank lines, invalid lines,
    /// an unknown field and an escaped station id.
    fn day_lines(kind: Kind, count: usize, stations: usize) -> String {
        let mut text = String::from("\u{feff}");
        for index in 0..count {
            let number = index * 7 % stations;
            let station = match index % 50 {
                // `\u0030` is `0`: the same station, written otherwise.
                37 => format!("ST-\\u0030{number:02}"),
                _ => format!("ST-0{number:02}"),
            };
            let serial = format!("SN-{number:03}-{:04}", index / (stations * 4));
            let time = format!(
                "2026-11-17T{:02}:{:02}:{:02}.{:03}Z",
                index / 3600 % 24,
                index / 60 % 60,
                index % 60,
                index * 13 % 1000
            );
            let unknown = match index % 50 {
                31 => r#","fixture_slot":"FX-1""#,
                _ => "",
            };
            let line = match kind {
                Kind::Units => {
                    let (direction, result) = match index % 2 {
                        0 => ("input", ""),
                        _ => ("output", "pass"),
                    };
                    format!(
                        r#"{{"station_id":"{station}","slot":"slot-{}","unit_serial":"{serial}","time_created":"{time}","tz":"Etc/UTC","mode":"production","tags":["line-6"],"unit_type":"display","direction":"{direction}","result":"{result}"{unknown}}}"#,
                        index % 3
                    )
                }
                Kind::Metrics => format!(
                    r#"{{"station_id":"{station}","slot":"slot-1","unit_serial":"{serial}","time_created":"{time}","tz":"Etc/UTC","mode":"production","tags":["line-6"],"name":"rail_{}","value":{}.{},"unit":"V","type":"measurement","limit_upper":3.465,"limit_lower":3.135{unknown}}}"#,
                    index % 5,
                    index % 4,
                    index % 10
                ),
            };
            match index % 50 {
                7 => text.push_str(r#"{"station_id":"ST-000","time_created":"#),
                19 => {}
                23 => text.push_str(&format!("{line}\r")),
                43 => text.push_str(r#"{"station_id":"ST-000","slot":"slot-1"}"#),
                _ => text.push_str(&line),
            }
            text.push('\n');
        }
        text
    }

    /// Everything a load made and reported, but its time: every record's response
    /// JSON and index entry with its symbols' texts, station by station, and the
    /// report, summary and file states.
    fn everything(
        generation: &Generation,
        report: &LoadReport,
    ) -> (Vec<(u32, u32, Value)>, Vec<String>) {
        let catalog = generation.catalog();
        let symbols = catalog.symbols();
        let text = |symbol| symbols.text(symbol);
        let mut entries = Vec::new();
        for (rank, name) in catalog.stations().iter().enumerate() {
            let placement = catalog.placement(rank as u32);
            let station = &generation.shards()[placement.shard as usize].stations
                [placement.station_index as usize];
            entries.push(format!("station {name} at {placement:?}"));
            for (key, entry) in &station.units {
                entries.push(format!(
                    "{key:?} {} {} {:?} {} {} {}",
                    text(entry.unit_type),
                    text(entry.unit_serial),
                    entry.direction,
                    text(entry.slot),
                    text(entry.mode),
                    text(entry.result)
                ));
            }
            for (key, entry) in &station.metrics {
                entries.push(format!(
                    "{key:?} {} {} {} {:?} {:?} {:?}",
                    text(entry.name),
                    text(entry.slot),
                    text(entry.unit),
                    entry.value,
                    entry.limit_lower,
                    entry.limit_upper
                ));
            }
        }
        let report = LoadReport {
            elapsed: Duration::ZERO,
            ..report.clone()
        };
        entries.push(format!("{report:?}"));
        let summary = LoadSummary {
            loaded_at: String::new(),
            ..catalog.summary().clone()
        };
        entries.push(format!("{summary:?}"));
        entries.push(format!("{:?}", catalog.sources));
        (records(generation), entries)
    }

    /// Small blocks and hand-overs: a line or two a block, a block's records
    /// stored before the next, the two workers taking turns on every file.
    const SMALL: Split = Split {
        block_bytes: 64,
        staged_bytes: 1,
    };

    #[test]
    fn records_are_the_same_however_the_files_are_cut() {
        let directory = TempDirectory::new("split");
        directory.write(
            "day.units.jsonl",
            day_lines(Kind::Units, 1500, 40).as_bytes(),
        );
        let metrics = day_lines(Kind::Metrics, 4000, 40);
        // The last line has no line end, and parses: loaded, its station noted.
        directory.write("day.metrics.jsonl", metrics.trim_end().as_bytes());
        directory.write(
            "zipped.metrics.jsonl.gz",
            &gzip(day_lines(Kind::Metrics, 1000, 40).as_bytes()),
        );
        let options = options(&directory, OnInvalid::Skip);

        let (generation, report) = load(&options).unwrap();
        assert_eq!(report.stations, 40);
        assert_eq!(report.invalid.len(), 2 * (30 + 80 + 20));
        assert_eq!(report.pending, 0);
        assert_eq!(report.records() as usize, (1500 + 4000 + 1000) * 47 / 50);
        assert!(report
            .files
            .iter()
            .all(|file| file.unknown_fields.len() == 1));
        let whole = everything(&generation, &report);
        assert_eq!(whole.0.len(), report.records() as usize);

        for split in [
            SMALL,
            Split {
                block_bytes: 4096,
                staged_bytes: 10_000,
            },
        ] {
            let (generation, report) = load_with(&options, split).unwrap();
            let cut = everything(&generation, &report);
            assert!(whole.0 == cut.0, "{split:?}: the records differ");
            assert_eq!(whole.1, cut.1, "{split:?}");
        }
    }

    #[test]
    fn a_pending_last_line_is_the_same_however_the_file_is_cut() {
        let directory = TempDirectory::new("split-pending");
        let lines = day_lines(Kind::Metrics, 600, 20);
        let half = r#"{"station_id":"ST-001","slot":"slot-1","unit_se"#;
        directory.write("day.metrics.jsonl", format!("{lines}{half}").as_bytes());
        let open = day_lines(Kind::Units, 300, 20);
        directory.write("open.units.jsonl", open.trim_end().as_bytes());

        let mut found = Vec::new();
        for split in [Split::default(), SMALL] {
            let mut files = discover(&directory.0).unwrap();
            incremental::spread_ordinals(&mut files);
            let state = LoadState {
                split,
                ..LoadState::default()
            };
            let state = read_all_into(state, &files, 2, true).unwrap();
            let report = state.report(&files);
            assert_eq!(report.pending, 1, "{split:?}");
            assert_eq!(state.files[0].pending.load(Ordering::Relaxed), 1);
            assert_eq!(report.invalid.len(), 2 * 12 + 2 * 6, "{split:?}");
            // Where the half line starts, it is read again once the file grows.
            let pending = state.reads[0].resume.unwrap().start;
            assert_eq!(
                pending,
                Start {
                    offset: lines.len() as u64,
                    line: 601
                },
                "{split:?}"
            );
            assert_eq!(
                state.reads[0].stamp.length,
                (lines.len() + half.len()) as u64
            );
            // A last line without a line end that parses is loaded, and read again.
            let open_start = open.trim_end().rfind('\n').unwrap() + 1;
            assert_eq!(
                state.reads[1].resume.unwrap().start,
                Start {
                    offset: open_start as u64,
                    line: 300
                },
                "{split:?}"
            );
            // Line 300 is index 299: station 299 * 7 % 20.
            assert_eq!(
                state.files[1].open_station.lock().as_deref(),
                Some("ST-013"),
                "{split:?}"
            );
            let stations: Vec<Vec<Box<str>>> = state
                .files
                .iter()
                .map(|file| file.stations.lock().iter().cloned().collect())
                .collect();
            assert_eq!(stations[0].len(), 20);
            let records: Vec<(Box<str>, Vec<RecordKey>)> = state
                .stations
                .iter()
                .map(|station| {
                    let mut keys: Vec<RecordKey> = station
                        .units
                        .iter()
                        .map(|(key, _)| *key)
                        .chain(station.metrics.iter().map(|(key, _)| *key))
                        .collect();
                    keys.sort();
                    (station.key().clone(), keys)
                })
                .collect::<BTreeMap<_, _>>()
                .into_iter()
                .collect();
            found.push((format!("{report:?}"), stations, records));
        }
        assert!(found[0] == found[1]);
    }
}
