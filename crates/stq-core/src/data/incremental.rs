//! Incremental reload (docs/api.md section 8): the next generation built from the
//! previous one and only what changed in the snapshot directory since it was read.
//!
//! What a load remembers of each file ([`SourceState`], kept in the catalog): its
//! size, modification time, inode and device as read; for an uncompressed JSON
//! Lines file, where its last line without a line end starts (or its end) and a
//! digest of the last 4 KiB read; what it holds (records by kind, skipped and
//! pending lines) and the stations its records went to. A reload then sorts every
//! file into one of four cases:
//! - unchanged (same size, time, inode): not opened;
//! - grown in place (same inode, larger, the last 4 KiB as read unchanged): read
//!   from the start of its last line without a line end, whose record (if it
//!   parsed) is dropped first, since the writer may have been half-way through it;
//! - anything else that changed, or is gone: its records are dropped, and it is
//!   read whole if it is still there; gzip and OpenHTF files are always read whole;
//! - new: read whole.
//!
//! Load order without renumbering: a line's load order is (file ordinal, line),
//! where ordinals ascend with the paths but are spread over the `u32` range with
//! gaps (the first load puts `n` files in the lower half, evenly). A new file takes
//! an ordinal in the gap between its neighbours (close to the lower one, since new
//! files mostly sort right after the newest of their kind), so the keys of every other file's
//! records, and with them every station the change does not touch, stay as they
//! are. When a gap is used up, the reload falls back to a full load, which spreads
//! the ordinals again. The catalog maps ordinals back to paths for cursors.
//!
//! Sharing: a station none of whose records change is the previous generation's
//! `Arc<StationData>`. A touched one that only gains records (appended lines, a new
//! file) is extended: its arena and pieces are copied as they are, so every record
//! it had keeps its stored form where it was, and the new ones go after them; its
//! trees are built again from the entries (work proportional to the station, but a
//! copy, not a parse). One that loses records (a file dropped or replaced, a last
//! line read again) is rebuilt from its surviving records and its new ones. A
//! station keeps its shard; a new one goes to the shard with the fewest records. A
//! shard's shard-wide tree is shared when none of its stations changed, came or
//! went; when its touched stations were only extended, it is shared still, and
//! their new units go into the shard's small tree of recent units
//! ([`ShardData::extended`]); when a station was rebuilt, came or went, it is the
//! previous tree without that station's old units merged with its new ones (a copy,
//! no sort); only when a kept station moved in rank (a station sorting before it
//! came or went, which changes the keys of its units) is it sorted anew. Symbols extend the previous table, so
//! shared entries keep their meaning (a symbol no record uses any longer is
//! harmless: a filter on it matches nothing, as an unknown value would).
//!
//! Held files (docs/api.md section 8): under `--on-invalid fail`, a file this
//! reload read and met an invalid line in is held back on its own. Its state and
//! records stay those of the previous generation (none, if it is new), the records
//! read from it are left out, and its state remembers the file as it was then: it
//! is read again once it differs from that, and released once it reads cleanly.
//! Every other file advances.
//!
//! The invariant, checked by the property test below: what a reload builds serves
//! exactly what a fresh load of the same files would (held files aside).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::{File, Metadata};
use std::hash::Hasher as _;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::data::catalog::{Catalog, Generation, LoadSummary, Placement};
use crate::data::key::{Position, RecordKey};
use crate::data::shard::{Origin, ShardData, ShardUnit};
use crate::data::snapshot::{
    self, FileKind, LoadError, LoadOptions, LoadReport, LoadState, OnInvalid, SharedSymbols,
    SnapshotFile, Start, StationBuilder,
};
use crate::data::station::{StationData, UnitEntry};
use crate::data::stored::PieceTable;
use crate::data::threads;
use crate::domain::record::Kind;

/// How many bytes before the end of what was read must be unchanged for a larger
/// file to count as grown in place.
const TAIL_BYTES: u64 = 4096;

/// The ordinals a first load spreads its files over: the lower half of the range,
/// leaving the upper half for files added after the last one.
const FRESH_ORDINALS: u64 = 1 << 31;

/// The most a file added after the last one moves the ordinal on, so that files
/// added one by one at the end (a new file per day) do not halve the gap each time.
const END_STEP: u64 = 1 << 16;

/// New files between two others take the first 1/`NEAR_LOWER` of the gap.
const NEAR_LOWER: u64 = 16;

/// A file as its metadata says: what tells an unchanged file from a changed one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileStamp {
    pub(crate) length: u64,
    modified: (i64, i64),
    inode: u64,
    device: u64,
}

impl FileStamp {
    pub(crate) fn of(metadata: &Metadata) -> FileStamp {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt as _;
            FileStamp {
                length: metadata.len(),
                modified: (metadata.mtime(), metadata.mtime_nsec()),
                inode: metadata.ino(),
                device: metadata.dev(),
            }
        }
        #[cfg(not(unix))]
        {
            let modified = metadata
                .modified()
                .ok()
                .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or((0, 0), |since| {
                    (since.as_secs() as i64, i64::from(since.subsec_nanos()))
                });
            FileStamp {
                length: metadata.len(),
                modified,
                inode: 0,
                device: 0,
            }
        }
    }

    fn same_file(&self, other: &FileStamp) -> bool {
        (self.inode, self.device) == (other.inode, other.device)
    }
}

/// What reading a file found out about the file itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FileRead {
    /// Its length is the offset read up to.
    pub(crate) stamp: FileStamp,
    /// Where a reload resumes once the file grew; `None`: read it whole again.
    pub(crate) resume: Option<Resume>,
    /// Whether this read resumed a grown file rather than starting from its start.
    pub(crate) resumed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Resume {
    /// The start of the last line without a line end, or the end of the file.
    pub(crate) start: Start,
    /// A digest of the last [`TAIL_BYTES`] read.
    pub(crate) tail: u64,
}

/// A digest of the [`TAIL_BYTES`] of `file` before `end`.
pub(crate) fn tail_digest(file: &File, end: u64) -> io::Result<u64> {
    let length = end.min(TAIL_BYTES);
    let mut bytes = vec![0; length as usize];
    read_exact_at(file, &mut bytes, end - length)?;
    let mut hasher = std::hash::DefaultHasher::new();
    hasher.write(&bytes);
    Ok(hasher.finish())
}

/// Whether `file`, now `now`, is the file that was `before` grown in place: the
/// same file, larger, and its last bytes as read then (whose digest is `tail`)
/// unchanged.
pub(crate) fn grew(file: &File, before: &FileStamp, now: &FileStamp, tail: u64) -> bool {
    now.same_file(before)
        && now.length > before.length
        && tail_digest(file, before.length).is_ok_and(|digest| digest == tail)
}

#[cfg(unix)]
fn read_exact_at(file: &File, bytes: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, bytes, offset)
}

#[cfg(not(unix))]
fn read_exact_at(mut file: &File, bytes: &mut [u8], offset: u64) -> io::Result<()> {
    use std::io::{Read as _, Seek as _};
    file.seek(io::SeekFrom::Start(offset))?;
    file.read_exact(bytes)
}

/// What a generation knows of one snapshot file: enough for the next reload to
/// skip it, resume it or drop its records.
#[derive(Clone, Debug)]
pub(crate) struct SourceState {
    pub(crate) relative: Box<str>,
    pub(crate) ordinal: u32,
    kind: FileKind,
    stamp: FileStamp,
    resume: Option<Resume>,
    units: u64,
    metrics: u64,
    invalid: u64,
    pending: u64,
    /// Every station its records went to.
    stations: Box<[Box<str>]>,
    /// The station of the record its last line without a line end made, if any.
    open_station: Option<Box<str>>,
    /// The file as it was when a reload under `fail` met invalid lines in it and
    /// held it back: the rest of this state is what it served before (nothing, if
    /// it was new). Read again as soon as it differs from this stamp.
    held: Option<FileStamp>,
}

/// Spreads a first load's files evenly over the lower half of the ordinals.
pub(crate) fn spread_ordinals(files: &mut [SnapshotFile]) {
    let gap = (FRESH_ORDINALS / (files.len() as u64 + 1)).max(1);
    for (index, file) in files.iter_mut().enumerate() {
        file.ordinal = ((index as u64 + 1) * gap).min(u64::from(u32::MAX)) as u32;
    }
}

/// The state of every file `state` read whole from its start.
pub(crate) fn sources(files: &[SnapshotFile], state: &mut LoadState) -> Vec<SourceState> {
    (0..files.len())
        .map(|index| source_of_read(files, state, index))
        .collect()
}

/// The state of file `index` of a read, as this read alone found it.
fn source_of_read(files: &[SnapshotFile], state: &LoadState, index: usize) -> SourceState {
    let file = &files[index];
    let counters = &state.files[index];
    let read = state.reads[index];
    SourceState {
        relative: file.relative.clone().into_boxed_str(),
        ordinal: file.ordinal,
        kind: file.kind,
        stamp: read.stamp,
        resume: read.resume,
        units: counters.units.load(Ordering::Relaxed),
        metrics: counters.metrics.load(Ordering::Relaxed),
        invalid: counters.invalid.load(Ordering::Relaxed),
        pending: counters.pending.load(Ordering::Relaxed),
        stations: std::mem::take(&mut *counters.stations.lock())
            .into_iter()
            .collect(),
        open_station: counters.open_station.lock().take(),
        held: None,
    }
}

/// What a reload does with a file of the directory.
#[derive(Clone, Copy)]
enum Plan {
    /// Carried over as it is: the index of its state in the previous catalog.
    Keep(usize),
    /// Read from where the previous read's whole lines end (if it grew in place),
    /// or whole: the index of its read job, and of its previous state if any.
    Read { job: usize, previous: Option<usize> },
    /// Read, met invalid lines under `fail`, and so carried over as it was (the
    /// index of its previous state), or left out if it is new: held back until a
    /// reload reads it cleanly (docs/api.md section 8).
    Held { job: usize, previous: Option<usize> },
}

/// What a reload looks at for changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Look {
    /// Every file under the directory, each one's stamp against its last read.
    Everything,
    /// Only these paths, relative to the directory and `/`-separated, as a watch of
    /// the directory reported them changed: every other known file is taken as
    /// unchanged without a look. A path that is, or was, a directory makes it a
    /// look at everything.
    Paths(BTreeSet<String>),
}

/// Builds the generation after `previous` (whose shards are `shards`) from what
/// changed in the directory since `previous` was read, as `options` say; what it
/// serves is what [`snapshot::load`] of the same files would serve. The report
/// counts what this reload read, and the totals of the data it holds.
pub fn reload(
    previous: &Catalog,
    shards: &[Arc<ShardData>],
    options: &LoadOptions,
) -> Result<(Generation, LoadReport), LoadError> {
    reload_looking(previous, shards, options, &Look::Everything)
}

/// [`reload`], looking for changes only where `look` says.
pub fn reload_looking(
    previous: &Catalog,
    shards: &[Arc<ShardData>],
    options: &LoadOptions,
    look: &Look,
) -> Result<(Generation, LoadReport), LoadError> {
    let started = Instant::now();
    if shards.len() != options.shards.max(1) || previous.sources.len() != previous.files.len() {
        return snapshot::load(options);
    }
    // Which files to read, and from where.
    let looked_at = match look {
        Look::Paths(paths) => look_at(previous, options, paths)?,
        Look::Everything => None,
    };
    let (mut plans, mut jobs) = match looked_at {
        Some(found) => found,
        None => look_everywhere(previous, options)?,
    };
    let looked = started.elapsed();
    if !assign_ordinals(&plans, &mut jobs, previous) {
        // No room between two files' ordinals: a full load spreads them again.
        return snapshot::load(options);
    }

    let state = LoadState {
        symbols: SharedSymbols::extending(Arc::clone(&previous.symbols)),
        ..LoadState::default()
    };
    let mut state = snapshot::read_all_into(state, &jobs, options.threads, true)?;
    let read = started.elapsed();
    let mut report = state.report(&jobs);
    // Under `fail`, a file with an invalid line is held back on its own: every other
    // file advances (docs/api.md section 8).
    let mut held_ordinals: HashSet<u32> = HashSet::new();
    if options.on_invalid == OnInvalid::Fail {
        for plan in &mut plans {
            if let Plan::Read { job, previous } = *plan {
                if state.files[job].invalid.load(Ordering::Relaxed) > 0 {
                    held_ordinals.insert(jobs[job].ordinal);
                    report.held.push(jobs[job].display.clone());
                    *plan = Plan::Held { job, previous };
                }
            }
        }
    }

    // Every file's state, and which records of the previous generation go.
    let resumed = |job: usize| state.reads[job].resumed;
    let kept: HashSet<usize> = plans
        .iter()
        .filter_map(|plan| match *plan {
            Plan::Keep(index) => Some(index),
            Plan::Read { job, previous } => previous.filter(|_| resumed(job)),
            Plan::Held { previous, .. } => previous,
        })
        .collect();
    // By ordinal: the first line whose record goes (0 for all of them).
    let mut dropped_from: HashMap<u32, u32> = HashMap::new();
    let mut touched: HashSet<Box<str>> = HashSet::new();
    // Touched stations that lose records too: rebuilt, not extended.
    let mut shrunk: HashSet<Box<str>> = HashSet::new();
    for (index, source) in previous.sources.iter().enumerate() {
        if !kept.contains(&index) {
            dropped_from.insert(source.ordinal, 0);
            touched.extend(source.stations.iter().cloned());
            shrunk.extend(source.stations.iter().cloned());
        }
    }
    let mut sources = Vec::with_capacity(plans.len());
    for plan in &plans {
        let source = match *plan {
            Plan::Keep(index) => previous.sources[index].clone(),
            Plan::Held {
                job,
                previous: known,
            } => {
                let held = Some(state.reads[job].stamp);
                match known {
                    Some(index) => SourceState {
                        held,
                        ..previous.sources[index].clone()
                    },
                    // New: it serves nothing until it reads cleanly.
                    None => SourceState {
                        held,
                        resume: None,
                        units: 0,
                        metrics: 0,
                        invalid: 0,
                        pending: 0,
                        stations: Box::default(),
                        open_station: None,
                        ..source_of_read(&jobs, &state, job)
                    },
                }
            }
            Plan::Read {
                job,
                previous: known,
            } => {
                let read = source_of_read(&jobs, &state, job);
                match known.filter(|_| resumed(job)) {
                    Some(index) => {
                        let before = &previous.sources[index];
                        if let (Some(station), Some(resume)) = (&before.open_station, before.resume)
                        {
                            dropped_from.insert(before.ordinal, resume.start.line);
                            touched.insert(station.clone());
                            shrunk.insert(station.clone());
                        }
                        grown(before, read)
                    }
                    None => read,
                }
            }
        };
        sources.push(source);
    }

    let symbols = Arc::new(std::mem::take(&mut state.symbols).into_symbols());
    // A held file's records were read with the others: they are left out here (their
    // bytes stay in the batch's arena, which only what is kept is copied from).
    let is_held = |key: &RecordKey| held_ordinals.contains(&((key.load_order >> 32) as u32));
    let mut new_records: HashMap<Box<str>, StationBuilder> = std::mem::take(&mut state.stations)
        .into_iter()
        .filter_map(|(station, mut batch)| {
            if !held_ordinals.is_empty() {
                batch.units.retain(|(key, _)| !is_held(key));
                batch.metrics.retain(|(key, _)| !is_held(key));
            }
            (batch.record_count() > 0).then_some((station, batch))
        })
        .collect();
    touched.extend(new_records.keys().cloned());
    let is_dropped = |load_order: u64| {
        dropped_from
            .get(&((load_order >> 32) as u32))
            .is_some_and(|&from| (load_order as u32) >= from)
    };

    // The stations: shared, rebuilt, gone or new.
    let shard_count = shards.len();
    // A shard with a station built anew (or gone) has its tree rebuilt; one whose
    // touched stations only grew keeps it, and adds their new units to its recent one.
    let mut changed_shards = vec![false; shard_count];
    let mut extended_shards = vec![false; shard_count];
    let mut previous_ranks: Vec<Vec<usize>> = shards
        .iter()
        .map(|data| vec![0; data.stations.len()])
        .collect();
    for (rank, placement) in previous.placements.iter().enumerate() {
        previous_ranks[placement.shard as usize][placement.station_index as usize] = rank;
    }
    // Touched stations are rebuilt, and new ones built, on every core.
    let mut slots: Vec<Vec<Slot>> = (0..shard_count).map(|_| Vec::new()).collect();
    let mut builds: Vec<Build> = Vec::new();
    for (shard, data) in shards.iter().enumerate() {
        for (station_index, station) in data.stations.iter().enumerate() {
            let name = &previous.stations[previous_ranks[shard][station_index]];
            if touched.contains(name) {
                let extend = !shrunk.contains(name);
                match extend {
                    true => extended_shards[shard] = true,
                    false => changed_shards[shard] = true,
                }
                slots[shard].push(Slot::Built(builds.len()));
                let batch = new_records.remove(name);
                builds.push(Build {
                    name: name.clone(),
                    previous: Some(Arc::clone(station)),
                    batch,
                    extend,
                });
            } else {
                let previous_index = station_index as u32;
                slots[shard].push(Slot::Shared(
                    name.clone(),
                    Arc::clone(station),
                    previous_index,
                ));
            }
        }
    }
    let mut arrivals: Vec<(Box<str>, StationBuilder)> = new_records.into_iter().collect();
    arrivals.sort_by(|left, right| left.0.as_bytes().cmp(right.0.as_bytes()));
    let mut shard_load: Vec<usize> = shards.iter().map(|data| data.record_count()).collect();
    for (name, builder) in arrivals {
        let shard = (0..shard_count)
            .min_by_key(|&shard| (shard_load[shard], shard))
            .expect("there is at least one shard");
        shard_load[shard] += builder.record_count();
        changed_shards[shard] = true;
        slots[shard].push(Slot::Built(builds.len()));
        builds.push(Build {
            name,
            previous: None,
            batch: Some(builder),
            extend: false,
        });
    }
    let built = threads::map(builds, |build| {
        let Build {
            name,
            previous,
            batch,
            extend,
        } = build;
        if let (Some(old), true) = (&previous, extend) {
            // The builder holds the old records' bytes and only the new entries.
            let mut builder = extending(old);
            if let Some(batch) = batch {
                builder.append(batch);
            }
            if !builder.fits() {
                return Err(LoadError::StationTooLarge {
                    station: name.to_string(),
                });
            }
            let data = old.extended(
                builder.arena.into_boxed_slice(),
                builder.pieces.finish(),
                &builder.units,
                &builder.metrics,
            );
            return Ok(Some(Rebuilt {
                data: Arc::new(data),
                name,
                origin: Origin::Extended,
                appended: builder.units,
            }));
        }
        let mut builder = match &previous {
            Some(old) => surviving(old, &is_dropped),
            None => StationBuilder::default(),
        };
        if let Some(batch) = batch {
            builder.append(batch);
        }
        if builder.record_count() == 0 {
            // All its records went: the station is gone.
            return Ok(None);
        }
        Ok(Some(Rebuilt {
            data: Arc::new(finish(&name, builder)?),
            name,
            origin: Origin::Built,
            appended: Vec::new(),
        }))
    });
    let mut built: Vec<Option<Rebuilt>> = built.into_iter().collect::<Result<_, LoadError>>()?;
    let mut appended_units: Vec<Vec<Appended>> = vec![Vec::new(); shard_count];
    let mut shard_stations: Vec<Vec<PlacedStation>> = vec![Vec::new(); shard_count];
    for (shard, shard_slots) in slots.into_iter().enumerate() {
        for slot in shard_slots {
            match slot {
                Slot::Shared(name, data, previous_index) => {
                    shard_stations[shard].push((name, data, Origin::Shared { previous_index }));
                }
                Slot::Built(build) => {
                    if let Some(rebuilt) = built[build].take() {
                        if !rebuilt.appended.is_empty() {
                            let station_index = shard_stations[shard].len();
                            appended_units[shard].push((station_index, rebuilt.appended));
                        }
                        shard_stations[shard].push((rebuilt.name, rebuilt.data, rebuilt.origin));
                    }
                }
            }
        }
    }

    let rebuilt = started.elapsed();
    // The catalog: names in byte order, each one's place.
    let mut names: Vec<(Box<str>, Placement)> = shard_stations
        .iter()
        .enumerate()
        .flat_map(|(shard, stations)| {
            stations
                .iter()
                .enumerate()
                .map(move |(station_index, (name, _, _))| {
                    let placement = Placement {
                        shard: shard as u32,
                        station_index: station_index as u32,
                    };
                    (name.clone(), placement)
                })
        })
        .collect();
    names.sort_by(|left, right| left.0.as_bytes().cmp(right.0.as_bytes()));
    let mut ranks_per_shard: Vec<Vec<u32>> = shard_stations
        .iter()
        .map(|stations| vec![0; stations.len()])
        .collect();
    // A shard whose kept stations moved in rank has its tree sorted anew; one that
    // has stations built anew (or gone) has it updated.
    let mut moved_shards = vec![false; shard_count];
    for (rank, (name, placement)) in names.iter().enumerate() {
        let (shard, station_index) = (placement.shard as usize, placement.station_index as usize);
        ranks_per_shard[shard][station_index] = rank as u32;
        let kept = !matches!(shard_stations[shard][station_index].2, Origin::Built);
        if kept && previous.rank(name) != Some(rank as u32) {
            moved_shards[shard] = true;
        }
    }
    let generation = options.generation;
    let jobs: Vec<_> = shard_stations
        .into_iter()
        .zip(&ranks_per_shard)
        .zip(appended_units)
        .enumerate()
        .collect();
    let new_shards: Vec<ShardData> =
        threads::map(jobs, |(shard, ((stations, ranks), appended))| {
            let previous_shard = &shards[shard];
            let (stations, origins): (Vec<_>, Vec<_>) = stations
                .into_iter()
                .map(|(_, data, origin)| (data, origin))
                .unzip();
            if moved_shards[shard] {
                ShardData::of_shared(generation, stations, ranks)
            } else if changed_shards[shard] {
                ShardData::updated(generation, previous_shard, stations, &origins, ranks)
            } else if extended_shards[shard] {
                let appended = appended
                    .into_iter()
                    .flat_map(|(station_index, units)| {
                        let rank = ranks[station_index];
                        units.into_iter().map(move |(key, entry)| {
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
                        })
                    })
                    .collect();
                ShardData::extended(generation, previous_shard, stations, appended)
            } else {
                ShardData::shared(generation, previous_shard)
            }
        });

    let sharded = started.elapsed();
    let summary = LoadSummary {
        loaded_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        units: sources.iter().map(|source| source.units).sum(),
        metrics: sources.iter().map(|source| source.metrics).sum(),
        skipped_lines: sources.iter().map(|source| source.invalid).sum(),
        pending_lines: sources.iter().map(|source| source.pending).sum(),
        held_files: sources
            .iter()
            .filter(|source| source.held.is_some())
            .count() as u64,
    };
    report.units = summary.units;
    report.metrics = summary.metrics;
    report.pending = summary.pending_lines;
    report.stations = names.len();
    let (names, placements) = names.into_iter().unzip();
    let catalog = Catalog::new(
        generation,
        names,
        placements,
        symbols,
        shard_count,
        summary,
        sources,
    );
    report.elapsed = started.elapsed();
    tracing::debug!(
        "reload phases: files looked at by {looked:?}, read by {read:?}, stations built by \
         {rebuilt:?}, shards by {sharded:?}, done in {:?}",
        report.elapsed
    );
    Ok((
        Generation {
            catalog: Arc::new(catalog),
            shards: new_shards,
        },
        report,
    ))
}

/// What a look at the directory found: a plan for each file in path order, and the
/// files to read.
type Looked = (Vec<Plan>, Vec<SnapshotFile>);

/// Every file of the directory, and what to do with each.
fn look_everywhere(previous: &Catalog, options: &LoadOptions) -> Result<Looked, LoadError> {
    let found = snapshot::discover(&options.directory)?;
    let previous_by_path: HashMap<&str, usize> = previous
        .sources
        .iter()
        .enumerate()
        .map(|(index, source)| (&*source.relative, index))
        .collect();
    let mut plans = Vec::with_capacity(found.len());
    let mut jobs: Vec<SnapshotFile> = Vec::new();
    for file in found {
        let known = previous_by_path.get(file.relative.as_str()).copied();
        plan_file(previous, file, known, &mut plans, &mut jobs)?;
    }
    Ok((plans, jobs))
}

/// The files of `previous` with only `changed` looked at (paths relative to the
/// directory): what [`look_everywhere`] would find if nothing else changed. `None`
/// when a changed path is or was a directory: then only a look at everything knows
/// what is in it.
fn look_at(
    previous: &Catalog,
    options: &LoadOptions,
    changed: &BTreeSet<String>,
) -> Result<Option<Looked>, LoadError> {
    let directory = &options.directory;
    if !directory.is_dir() {
        return Err(LoadError::MissingDirectory(directory.clone()));
    }
    let mut files: Vec<SnapshotFile> = Vec::new();
    for relative in changed {
        if relative.is_empty() {
            return Ok(None);
        }
        let path = directory.join(relative);
        let name = relative.rsplit('/').next().unwrap_or(relative);
        let Some((kind, gzip)) = FileKind::of_file_name(name) else {
            let within = format!("{relative}/");
            let was_directory = previous
                .sources
                .iter()
                .any(|source| source.relative.starts_with(&within));
            if path.is_dir() || was_directory {
                return Ok(None);
            }
            continue;
        };
        match std::fs::metadata(&path) {
            Ok(metadata) if metadata.is_file() => {}
            Ok(metadata) if metadata.is_dir() => return Ok(None),
            // Gone (or not a file): dropped, as a full look would not find it.
            _ => continue,
        }
        files.push(SnapshotFile {
            display: directory.join(relative).display().to_string(),
            relative: relative.clone(),
            path,
            kind,
            gzip,
            ordinal: 0,
            resume: None,
        });
    }
    // The known files and the changed ones, in path order.
    let mut plans = Vec::with_capacity(previous.sources.len() + files.len());
    let mut jobs: Vec<SnapshotFile> = Vec::new();
    let mut files = files.into_iter().peekable();
    for (index, source) in previous.sources.iter().enumerate() {
        while let Some(file) =
            files.next_if(|file| file.relative.as_bytes() < source.relative.as_bytes())
        {
            plan_file(previous, file, None, &mut plans, &mut jobs)?;
        }
        match files.next_if(|file| file.relative == *source.relative) {
            Some(file) => plan_file(previous, file, Some(index), &mut plans, &mut jobs)?,
            None if changed.contains(&*source.relative) => {} // gone
            None => plans.push(Plan::Keep(index)),
        }
    }
    for file in files {
        plan_file(previous, file, None, &mut plans, &mut jobs)?;
    }
    Ok(Some((plans, jobs)))
}

/// What to do with `file`, whose state in `previous` is at `known` if it was read
/// before: keep it (unchanged), or read it (from where its last read ended if it
/// only grew, else whole).
fn plan_file(
    previous: &Catalog,
    file: SnapshotFile,
    known: Option<usize>,
    plans: &mut Vec<Plan>,
    jobs: &mut Vec<SnapshotFile>,
) -> Result<(), LoadError> {
    let Some(index) = known else {
        plans.push(Plan::Read {
            job: jobs.len(),
            previous: None,
        });
        jobs.push(file);
        return Ok(());
    };
    let source = &previous.sources[index];
    let metadata = std::fs::metadata(&file.path).map_err(|source| LoadError::Io {
        path: file.display.clone(),
        source,
    })?;
    let stamp = FileStamp::of(&metadata);
    let unchanged = match source.held {
        None => stamp == source.stamp,
        // Held back, and still as it was then: it would be held again.
        Some(held) => stamp == held,
    };
    if unchanged {
        plans.push(Plan::Keep(index));
        return Ok(());
    }
    let mut job = file;
    job.ordinal = source.ordinal;
    // The read resumes it if it only grew, and says whether it did.
    job.resume = source.resume.map(|resume| (source.stamp, resume));
    plans.push(Plan::Read {
        job: jobs.len(),
        previous: Some(index),
    });
    jobs.push(job);
    Ok(())
}

/// A station of a shard of the new generation: its id, data and where that comes
/// from.
type PlacedStation = (Box<str>, Arc<StationData>, Origin);

/// A station to build.
struct Build {
    name: Box<str>,
    /// Its data in the previous generation, whose records it keeps but the dropped.
    previous: Option<Arc<StationData>>,
    /// Its new records.
    batch: Option<StationBuilder>,
    /// Whether it only grows: its records keep their stored form where it was.
    extend: bool,
}

/// The units appended to an extended station: its index in its shard, and each
/// unit's key and entry.
type Appended = (usize, Vec<(RecordKey, UnitEntry)>);

/// A station built.
struct Rebuilt {
    name: Box<str>,
    data: Arc<StationData>,
    origin: Origin,
    /// When it was extended, its units appended, for its shard's recent tree.
    appended: Vec<(RecordKey, UnitEntry)>,
}

/// A station's place in its shard while the touched ones are built.
enum Slot {
    /// Unchanged: its id, data and index in the previous generation's shard.
    Shared(Box<str>, Arc<StationData>, u32),
    /// The index of its build.
    Built(usize),
}

/// A grown file's state: `before`'s, with what was read from its last whole line on.
fn grown(before: &SourceState, read: SourceState) -> SourceState {
    let open = u64::from(before.open_station.is_some());
    let (units, metrics) = match before.kind {
        FileKind::Lines(Kind::Units) => (before.units - open, before.metrics),
        FileKind::Lines(Kind::Metrics) => (before.units, before.metrics - open),
        FileKind::OpenHtf => (before.units, before.metrics),
    };
    let stations: BTreeSet<Box<str>> = before
        .stations
        .iter()
        .chain(read.stations.iter())
        .cloned()
        .collect();
    SourceState {
        units: units + read.units,
        metrics: metrics + read.metrics,
        invalid: before.invalid + read.invalid,
        stations: stations.into_iter().collect(),
        ..read
    }
}

/// How many of a station's latest units, and of its latest metrics, an extension
/// looks at for pieces that appended records can share.
const LATEST_RECORDS: usize = 256;

/// A builder holding the stored records of `station` as they are, but none of its
/// entries, so that what is appended goes after them and the station's stored
/// records (which its shard's trees point into) stay valid; its entries are
/// then the appended records'.
fn extending(station: &StationData) -> StationBuilder {
    // Appended records share pieces with the latest ones (the next unit's metric
    // names, units and limits are the last one's); finding every record's pieces
    // again cost more than the rest of the extension.
    let records = station
        .units
        .values()
        .rev()
        .take(LATEST_RECORDS)
        .map(|entry| entry.bytes)
        .chain(
            station
                .metrics
                .values()
                .rev()
                .take(LATEST_RECORDS)
                .map(|entry| entry.bytes),
        );
    StationBuilder {
        arena: station.arena.to_vec(),
        pieces: PieceTable::continuing(&station.pieces, &station.arena, records),
        units: Vec::new(),
        metrics: Vec::new(),
    }
}

/// A builder holding the records of `station` that `is_dropped` keeps, their bytes
/// copied into a new arena so that the dropped ones' bytes go with the old one.
fn surviving(station: &StationData, is_dropped: &impl Fn(u64) -> bool) -> StationBuilder {
    let mut builder = StationBuilder::default();
    let mut known = foldhash::HashMap::default();
    for (key, entry) in &station.units {
        if !is_dropped(key.load_order) {
            let mut entry = *entry;
            entry.bytes = builder.copy(&station.arena, &station.pieces, entry.bytes, &mut known);
            builder.units.push((*key, entry));
        }
    }
    for (key, entry) in &station.metrics {
        if !is_dropped(key.load_order) {
            let mut entry = *entry;
            entry.bytes = builder.copy(&station.arena, &station.pieces, entry.bytes, &mut known);
            builder.metrics.push((*key, entry));
        }
    }
    builder
}

fn finish(name: &str, builder: StationBuilder) -> Result<StationData, LoadError> {
    if !builder.fits() {
        return Err(LoadError::StationTooLarge {
            station: name.to_string(),
        });
    }
    Ok(builder.finish())
}

/// Gives every new file an ordinal between its neighbours'; false when some gap
/// has no room left.
fn assign_ordinals(plans: &[Plan], jobs: &mut [SnapshotFile], previous: &Catalog) -> bool {
    let mut lower: u64 = 0;
    let mut run: Vec<usize> = Vec::new();
    for plan in plans {
        let ordinal = match *plan {
            Plan::Keep(index) => previous.sources[index].ordinal,
            Plan::Read {
                job,
                previous: Some(_),
            }
            | Plan::Held {
                job,
                previous: Some(_),
            } => jobs[job].ordinal,
            Plan::Read {
                job,
                previous: None,
            }
            | Plan::Held {
                job,
                previous: None,
            } => {
                run.push(job);
                continue;
            }
        };
        let upper = u64::from(ordinal);
        if !spread(&run, jobs, lower, upper, u64::MAX) {
            return false;
        }
        run.clear();
        lower = upper;
    }
    spread(&run, jobs, lower, u64::from(u32::MAX), END_STEP)
}

/// Spreads the files of `run` strictly between `lower` and `upper`, at most
/// `most` apart.
fn spread(run: &[usize], jobs: &mut [SnapshotFile], lower: u64, upper: u64, most: u64) -> bool {
    if run.is_empty() {
        return true;
    }
    let even = (upper - lower) / (run.len() as u64 + 1);
    if even == 0 {
        return false;
    }
    // Close after `lower`, leaving most of the gap before `upper`: files are mostly
    // added after the newest of their kind (the next day's file of a station, which
    // sorts before the next station's first), and so the gap lasts hundreds of such
    // days instead of about ten.
    let step = (even / NEAR_LOWER).max(1).min(most);
    for (position, &job) in run.iter().enumerate() {
        jobs[job].ordinal = (lower + step * (position as u64 + 1)) as u32;
    }
    true
}

#[cfg(test)]
mod tests;
