//! A reload (docs/api.md section 8): the next generation built from the
//! previous one and only what changed in the snapshot directory since it was read.
//!
//! What a load remembers of each file (`SourceState`, kept in the catalog): its
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
//! files mostly sort right after the newest of their kind), so the keys of every
//! other file's records, and with them every station the change does not touch,
//! stay as they are. When a gap is used up, the reload reads every file again and
//! spreads the ordinals anew ([`renumbered`]), still holding back files with
//! invalid lines. The catalog maps ordinals back to paths for cursors.
//!
//! Sharing: a station none of whose records change is the previous generation's
//! `Arc<StationData>`. A touched one that only gains records (appended lines, a new
//! file) is extended: its settled layer is shared as it is, and the new records go
//! into its recent layer, whose arena, pieces and trees are copied and added to
//! (work proportional to what was appended since the station was last built, not
//! to the station). Once the recent layer would outgrow a sixteenth of the settled
//! one, or when the station loses records (a file dropped or replaced, a last line read
//! again), it is rebuilt in one layer from its surviving records and its new ones. A
//! station keeps its shard; a new one goes to the shard with the fewest records. A
//! shard's shard-wide tree is shared when none of its stations changed, came or
//! went; when its touched stations were only extended, it is shared still, and
//! their new units go into the shard's small tree of recent units
//! ([`ShardData::extended`]); when a station was rebuilt, came or went, it is the
//! previous tree without that station's old units merged with its new ones (a copy,
//! no sort); only when a kept station moved in rank (a station sorting before it
//! came or went, which changes the keys of its units) is it sorted anew. Symbols
//! extend the previous table, so shared entries keep their meaning (a symbol no
//! record uses any longer is harmless: a filter on it matches nothing, as an
//! unknown value would).
//!
//! Held files (docs/api.md section 8): under `--on-invalid fail` (and `hold`,
//! which acts alike at a reload), a file this reload read and met an invalid line
//! in is held back on its own. Its state and
//! records stay those of the previous generation (none, if it is new), the records
//! read from it are left out, and its state remembers the file as it was then: it
//! is read again once it differs from that, and released once it reads cleanly.
//! Every other file advances.
//!
//! The invariant, checked by the property tests in `reload/tests.rs`: what a reload builds serves
//! exactly what a fresh load of the same files would (held files aside).
//!
//! A start from the store (docs/api.md section 12, [`load_from_store`]) is a reload
//! from the generation the store held, rebuilt without parsing.
//!
//! The steps, in [`reload_looking`]: look for changes ([`look`]), read what
//! changed (the same reading as a full load), hold back files with invalid lines,
//! settle every file's state and what goes ([`settle`]), build the touched stations
//! ([`build_stations`]), and put the catalog and the shards together
//! ([`assemble`]).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::build::StationBuilder;
use super::files::{self, SnapshotFile, END_STEP, NEAR_LOWER};
use super::format;
use super::full;
use super::read::{self, LoadState, SharedSymbols};
use super::{Additions, LoadError, LoadOptions, LoadReport, Look, OnInvalid};
use crate::data::catalog::Catalog;
use crate::data::catalog::Generation;
use crate::data::catalog::Placement;
use crate::data::hot::Hot;
use crate::data::key::{load_order, Position, RecordKey};
use crate::data::sealed::SEALED;
use crate::data::shard::ShardData;
use crate::data::shard::{shard_unit, Origin, ShardUnit};
use crate::data::sources::{FileStamp, SourceState};
use crate::data::station::{StationData, UnitEntry};
use crate::data::store::Restored;
use crate::data::symbols::Symbols;
use crate::data::threads;

/// [`reload_looking`] with a look at everything.
pub(crate) fn reload(
    previous: &Catalog,
    shards: &[Arc<ShardData>],
    options: &LoadOptions,
) -> Result<(Generation, LoadReport), LoadError> {
    reload_looking(previous, shards, options, &Look::Everything)
}

/// The generation after `previous` (whose shards are `shards`) in which the
/// `stations` are read again from every snapshot file that holds records of them
/// (with those files' other records), with whatever else changed: their store
/// files were found damaged after the start had used them, as a start
/// that finds a station's files damaged reads it.
pub(crate) fn repair(
    previous: &Catalog,
    shards: &[Arc<ShardData>],
    stations: &BTreeSet<String>,
    options: &LoadOptions,
) -> Result<(Generation, LoadReport), LoadError> {
    let mut sources = previous.sources.clone();
    for station in stations {
        for source in &mut sources {
            source.read_again_if_it_holds(station);
        }
    }
    let catalog = Catalog::new(
        previous.generation,
        previous.stations.clone(),
        previous.placements.clone(),
        Arc::clone(&previous.symbols),
        previous.shard_count,
        previous.summary.clone(),
        sources,
    );
    let mut per_shard: Vec<Vec<Arc<StationData>>> = (shards.iter())
        .map(|shard| shard.stations.clone())
        .collect();
    let mut ranks: Vec<Vec<u32>> = (shards.iter())
        .map(|shard| vec![0; shard.stations.len()])
        .collect();
    for (rank, (name, placement)) in (previous.stations.iter())
        .zip(&previous.placements)
        .enumerate()
    {
        let (shard, index) = (placement.shard as usize, placement.station_index as usize);
        ranks[shard][index] = rank as u32;
        if stations.contains(&**name) {
            per_shard[shard][index] =
                Arc::new(StationData::of_tiers(Hot::default(), Arc::default()));
        }
    }
    let shards: Vec<Arc<ShardData>> = (per_shard.into_iter().zip(&ranks))
        .map(|(stations, ranks)| {
            Arc::new(ShardData::of_shared(previous.generation, stations, ranks))
        })
        .collect();
    reload(&catalog, &shards, options)
}

/// Builds the generation after `previous` (whose shards are `shards`) from what
/// changed in the directory since `previous` was read, looking for changes only
/// where `look` says, as `options` say; what it serves is what [`full::load`] of
/// the same files would serve. The report counts what this reload read, and the
/// totals of the data it holds.
pub(crate) fn reload_looking(
    previous: &Catalog,
    shards: &[Arc<ShardData>],
    options: &LoadOptions,
    look: &Look,
) -> Result<(Generation, LoadReport), LoadError> {
    let started = Instant::now();
    // A reload builds on the previous shards: with another number of them, the
    // stations are placed again.
    if shards.len() != options.shards.max(1) {
        return renumbered(previous, shards, options);
    }
    let Some(Looked { mut plans, jobs }) = self::look(previous, options, look)? else {
        // No room between two files' ordinals: they are spread again.
        return renumbered(previous, shards, options);
    };
    let looked = started.elapsed();

    // What changed is read as a full load reads, its symbols after the previous ones.
    let state = LoadState {
        symbols: SharedSymbols::extending(Arc::clone(&previous.symbols)),
        ..LoadState::default()
    };
    let mut state = read::read_all_into(state, &jobs, options.threads, true)?;
    let mut report = state.report(&jobs);
    let read = started.elapsed();

    // Under `fail` or `hold`, a file with an invalid line is held back on its own:
    // every other file advances.
    let held = match options.on_invalid {
        OnInvalid::Fail | OnInvalid::Hold => hold_back(&mut plans, &jobs, &state, &mut report),
        OnInvalid::Skip => HashSet::new(),
    };
    let (sources, mut changes) = settle(previous, &plans, &jobs, &state);
    let new_records = new_records(&mut state, &held);
    changes.touched.extend(new_records.keys().cloned());
    let additions = Additions::of_reload(
        &new_records,
        &changes.reread,
        std::mem::take(&mut changes.lost),
    );
    let symbols = Arc::new(std::mem::take(&mut state.symbols).into_symbols()?);

    let stations = build_stations(previous, shards, &changes, new_records, options)?;
    let built = started.elapsed();
    // Only a station built again (where records are sealed) frees much; an
    // extension frees its copy of a small recent layer.
    let rebuilt = (stations.changes.iter()).any(|change| *change >= ShardChange::Updated);
    let generation = assemble(previous, shards, stations, symbols, sources, options);
    if rebuilt {
        threads::release_freed_memory();
    }
    report.totals_of(&generation);
    report.elapsed = started.elapsed();
    report.additions = additions;
    tracing::debug!(
        "reload phases: files looked at by {looked:?}, read by {read:?}, stations built by \
         {built:?}, done in {:?}",
        report.elapsed
    );
    Ok((generation, report))
}

/// A start from a store (docs/api.md section 12): the generation `restored` read
/// from it, rebuilt as generation 0, then reloaded as [`reload`] would, so that it
/// reads only the snapshot files that changed since the store was written and
/// serves what [`full::load`] of the same files would. The flag says whether the store
/// was used: a start under `--on-invalid fail` that would meet invalid lines (in
/// the store's history or in what changed) loads in full instead, which refuses
/// to start as a start without a store does; so does one whose store holds files
/// a reload held back (a start does not hold files back).
pub(crate) fn load_from_store(
    options: &LoadOptions,
    restored: Restored,
) -> Result<(Generation, LoadReport, bool), LoadError> {
    let started = Instant::now();
    let strict = options.on_invalid == OnInvalid::Fail;
    // A file held back by a reload is read again at a start, as a start without
    // the store reads it: skipping its invalid lines, or refusing them.
    let held = (restored.sources.iter()).any(|source| source.held.is_some());
    let invalid = (restored.sources.iter()).any(|source| source.invalid > 0);
    if held || (strict && invalid) {
        let (generation, report) = full::load(options)?;
        return Ok((generation, report, false));
    }
    let shard_count = restored.shard_count.max(1);
    let mut per_shard: Vec<Vec<Option<Arc<StationData>>>> = vec![Vec::new(); shard_count];
    let mut ranks_per_shard: Vec<Vec<u32>> = vec![Vec::new(); shard_count];
    let mut names = Vec::with_capacity(restored.stations.len());
    let mut placements = Vec::with_capacity(restored.stations.len());
    for (rank, (name, placement, data)) in restored.stations.into_iter().enumerate() {
        let (shard, index) = (placement.shard as usize, placement.station_index as usize);
        if per_shard[shard].len() <= index {
            per_shard[shard].resize(index + 1, None);
            ranks_per_shard[shard].resize(index + 1, 0);
        }
        per_shard[shard][index] = Some(data);
        ranks_per_shard[shard][index] = rank as u32;
        names.push(name);
        placements.push(placement);
    }
    let shards: Vec<Arc<ShardData>> = threads::map(
        per_shard.into_iter().zip(&ranks_per_shard).collect(),
        |(stations, ranks)| {
            let stations = (stations.into_iter())
                .map(|station| station.expect("the store's places have no gap"))
                .collect();
            Arc::new(ShardData::of_shared(0, stations, ranks))
        },
    );
    let catalog = Catalog::new(
        0,
        names,
        placements,
        Arc::new(restored.symbols),
        shard_count,
        full::summary_of(&restored.sources),
        restored.sources,
    );
    let (generation, mut report) = reload(&catalog, &shards, options)?;
    // A reload holds a broken file back with what it served before; a start serves
    // none of it (`hold`) or does not start (`fail`): the files are read as a start
    // reads them.
    if !report.held.is_empty() {
        let (generation, report) = full::load(options)?;
        return Ok((generation, report, false));
    }
    report.elapsed = started.elapsed();
    Ok((generation, report, true))
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

/// What a look at the directory found: a plan for each file in path order, and the
/// files to read, numbered.
struct Looked {
    plans: Vec<Plan>,
    jobs: Vec<SnapshotFile>,
}

/// The files of the directory and what to do with each, looking where `look` says;
/// `None` when a new file finds no room for its ordinal.
fn look(
    previous: &Catalog,
    options: &LoadOptions,
    look: &Look,
) -> Result<Option<Looked>, LoadError> {
    let looked_at = match look {
        Look::Paths(paths) => look_at(previous, options, paths)?,
        Look::Everything => None,
    };
    let mut looked = match looked_at {
        Some(found) => found,
        None => look_everywhere(previous, options)?,
    };
    Ok(assign_ordinals(&looked.plans, &mut looked.jobs, previous).then_some(looked))
}

/// Every file of the directory, and what to do with each.
fn look_everywhere(previous: &Catalog, options: &LoadOptions) -> Result<Looked, LoadError> {
    let found = files::discover(&options.directory)?;
    let previous_by_path = by_path(previous);
    let mut looked = Looked {
        plans: Vec::with_capacity(found.len()),
        jobs: Vec::new(),
    };
    for file in found {
        let known = previous_by_path.get(file.relative.as_str()).copied();
        looked.plan(previous, file, known)?;
    }
    Ok(looked)
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
        let Some((format, gzip)) = format::of_file_name(name) else {
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
        files.push(SnapshotFile::new(directory, relative.clone(), format, gzip));
    }
    // The known files and the changed ones, in path order.
    let mut looked = Looked {
        plans: Vec::with_capacity(previous.sources.len() + files.len()),
        jobs: Vec::new(),
    };
    let mut files = files.into_iter().peekable();
    for (index, source) in previous.sources.iter().enumerate() {
        while let Some(file) =
            files.next_if(|file| file.relative.as_bytes() < source.relative.as_bytes())
        {
            looked.plan(previous, file, None)?;
        }
        match files.next_if(|file| file.relative == *source.relative) {
            Some(file) => looked.plan(previous, file, Some(index))?,
            None if changed.contains(&*source.relative) => {} // gone
            None => looked.plans.push(Plan::Keep(index)),
        }
    }
    for file in files {
        looked.plan(previous, file, None)?;
    }
    Ok(Some(looked))
}

impl Looked {
    /// Plans `file`, whose state in `previous` is at `known` if it was read before:
    /// keep it (unchanged), or read it (from where its last read ended if it only
    /// grew, else whole).
    fn plan(
        &mut self,
        previous: &Catalog,
        file: SnapshotFile,
        known: Option<usize>,
    ) -> Result<(), LoadError> {
        let Some(index) = known else {
            self.plans.push(Plan::Read {
                job: self.jobs.len(),
                previous: None,
            });
            self.jobs.push(file);
            return Ok(());
        };
        let source = &previous.sources[index];
        let metadata = std::fs::metadata(&file.path).map_err(|source| LoadError::Io {
            path: file.display.clone(),
            source,
        })?;
        let stamp = FileStamp::of(&metadata);
        let unchanged = match &source.held {
            None => stamp == source.stamp,
            // Held back, and still as it was then: it would be held again.
            Some(held) => stamp == **held,
        };
        if unchanged {
            self.plans.push(Plan::Keep(index));
            return Ok(());
        }
        let mut job = file;
        job.ordinal = source.ordinal;
        // The read resumes it if it only grew, and says whether it did.
        job.resume = source.resume.map(|resume| (source.stamp, resume));
        self.plans.push(Plan::Read {
            job: self.jobs.len(),
            previous: Some(index),
        });
        self.jobs.push(job);
        Ok(())
    }
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

/// Holds back every file read with an invalid line (under `fail` or `hold`), naming it in
/// the report; returns their ordinals.
fn hold_back(
    plans: &mut [Plan],
    jobs: &[SnapshotFile],
    state: &LoadState,
    report: &mut LoadReport,
) -> HashSet<u32> {
    let mut held = HashSet::new();
    for plan in plans {
        if let Plan::Read { job, previous } = *plan {
            if state.files[job].invalid.load(Ordering::Relaxed) > 0 {
                held.insert(jobs[job].ordinal);
                report.held.push(jobs[job].display.clone());
                *plan = Plan::Held { job, previous };
            }
        }
    }
    held
}

/// Which records of the previous generation a reload drops, and which stations it
/// touches.
#[derive(Default)]
struct Changes {
    /// By file ordinal: the first line whose record goes (0 for all of them).
    dropped_from: HashMap<u32, u32>,
    /// Stations that gain or lose records.
    touched: HashSet<Box<str>>,
    /// Touched stations that lose records: rebuilt, where the others are extended.
    shrunk: HashSet<Box<str>>,
    /// Stations that lose records for good, unlike a last line read again.
    lost: HashSet<Box<str>>,
    /// Last lines without a line end read again: their station and load order.
    reread: Vec<(Box<str>, u64)>,
}

impl Changes {
    /// Drops the records of `source` from line `from` on (0: all of them).
    fn drop_from(&mut self, source: &SourceState, from: u32, stations: &[Box<str>]) {
        self.dropped_from.insert(source.ordinal, from);
        self.touched.extend(stations.iter().cloned());
        self.shrunk.extend(stations.iter().cloned());
        self.lost.extend(stations.iter().cloned());
    }

    /// Drops the record of `source`'s last line without a line end, at `line`,
    /// which is read again.
    fn read_again(&mut self, source: &SourceState, line: u32, station: &str) {
        self.dropped_from.insert(source.ordinal, line);
        self.touched.insert(station.into());
        self.shrunk.insert(station.into());
        self.reread
            .push((station.into(), load_order(source.ordinal, line)));
    }

    /// Whether it drops records of a file numbered `lowest` to `highest`.
    fn touches_files(&self, lowest: u32, highest: u32) -> bool {
        (self.dropped_from.keys()).any(|file| (lowest..=highest).contains(file))
    }

    fn is_dropped(&self, load_order: u64) -> bool {
        self.dropped_from
            .get(&((load_order >> 32) as u32))
            .is_some_and(|&from| (load_order as u32) >= from)
    }
}

/// Every file's state after the reload, in path order, and the records of the
/// previous generation it drops: those of files gone or read whole again, and
/// the record of a grown file's last line without a line end, which is read again.
fn settle(
    previous: &Catalog,
    plans: &[Plan],
    jobs: &[SnapshotFile],
    state: &LoadState,
) -> (Vec<SourceState>, Changes) {
    let resumed = |job: usize| state.reads[job].resumed;
    let kept: HashSet<usize> = plans
        .iter()
        .filter_map(|plan| match *plan {
            Plan::Keep(index) => Some(index),
            Plan::Read { job, previous } => previous.filter(|_| resumed(job)),
            Plan::Held { previous, .. } => previous,
        })
        .collect();
    let mut changes = Changes::default();
    for (index, source) in previous.sources.iter().enumerate() {
        if !kept.contains(&index) {
            changes.drop_from(source, 0, &source.stations);
        }
    }
    let mut sources = Vec::with_capacity(plans.len());
    for plan in plans {
        let source = match *plan {
            Plan::Keep(index) => previous.sources[index].clone(),
            Plan::Held {
                job,
                previous: known,
            } => {
                let before = known.map(|index| &previous.sources[index]);
                SourceState::held_back(before, state.source(jobs, job), state.reads[job].stamp)
            }
            Plan::Read {
                job,
                previous: known,
            } => {
                let read = state.source(jobs, job);
                match known.filter(|_| resumed(job)) {
                    Some(index) => {
                        let before = &previous.sources[index];
                        if let (Some((station, _)), Some(resume)) =
                            (&before.open_record, before.resume)
                        {
                            changes.read_again(before, resume.start.line, station);
                        }
                        before.grown(read)
                    }
                    None => read,
                }
            }
        };
        sources.push(source);
    }
    (sources, changes)
}

/// The records read, by station, without those of held files (their bytes stay in
/// the batch's arena, which only what is kept is copied from).
fn new_records(state: &mut LoadState, held: &HashSet<u32>) -> HashMap<Box<str>, StationBuilder> {
    let is_held = |key: &RecordKey| held.contains(&((key.load_order >> 32) as u32));
    std::mem::take(&mut state.stations)
        .into_iter()
        .filter_map(|(station, mut batch)| {
            if !held.is_empty() {
                batch.units.retain(|(key, _)| !is_held(key));
                batch.metrics.retain(|(key, _)| !is_held(key));
            }
            (batch.record_count() > 0).then_some((station, batch))
        })
        .collect()
}

/// A station of a shard of the new generation: its id, data and where that comes
/// from.
type PlacedStation = (Box<str>, Arc<StationData>, Origin);

/// The units appended to an extended station: its index in its shard, and each
/// unit's key and entry.
type Appended = (usize, Vec<(RecordKey, UnitEntry)>);

/// How a shard's shard-wide tree is made for the new generation, from the least
/// work to the most; a shard takes the most any of its stations needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum ShardChange {
    /// No station of it changed, came or went: shared.
    Shared,
    /// Its touched stations only grew: shared, their new units in its recent tree.
    Extended,
    /// A station was rebuilt, came or went: the previous tree without its old
    /// units, merged with its new ones.
    Updated,
    /// A kept station moved in rank (a station sorting before it came or went),
    /// which changes the keys of its units: sorted anew.
    Sorted,
}

/// The stations of the new generation, shard by shard.
struct Stations {
    /// Each shard's stations, in shard order.
    placed: Vec<Vec<PlacedStation>>,
    /// Each shard's extended stations' appended units.
    appended: Vec<Vec<Appended>>,
    changes: Vec<ShardChange>,
}

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

/// A station built.
struct Built {
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

/// The stations: each untouched one shared, each touched one extended (it only
/// grew) or rebuilt (it lost records, and is gone if it lost them all), each new
/// one built and placed on the shard with the fewest records; built on every core.
fn build_stations(
    previous: &Catalog,
    shards: &[Arc<ShardData>],
    changes: &Changes,
    mut new_records: HashMap<Box<str>, StationBuilder>,
    options: &LoadOptions,
) -> Result<Stations, LoadError> {
    let shard_count = shards.len();
    let mut shard_changes = vec![ShardChange::Shared; shard_count];
    let mut previous_ranks: Vec<Vec<usize>> = shards
        .iter()
        .map(|data| vec![0; data.stations.len()])
        .collect();
    for (rank, placement) in previous.placements.iter().enumerate() {
        previous_ranks[placement.shard as usize][placement.station_index as usize] = rank;
    }
    let mut slots: Vec<Vec<Slot>> = (0..shard_count).map(|_| Vec::new()).collect();
    let mut builds: Vec<Build> = Vec::new();
    for (shard, data) in shards.iter().enumerate() {
        for (station_index, station) in data.stations.iter().enumerate() {
            let name = &previous.stations[previous_ranks[shard][station_index]];
            if !changes.touched.contains(name) {
                let previous_index = station_index as u32;
                slots[shard].push(Slot::Shared(
                    name.clone(),
                    Arc::clone(station),
                    previous_index,
                ));
                continue;
            }
            let batch = new_records.remove(name);
            let appended = batch.as_ref().map_or(0, StationBuilder::record_count);
            // One that only grows is extended, unless its recent layer would outgrow
            // its share: then it is built again, in one layer.
            let extend = !changes.shrunk.contains(name) && !station.folds_with(appended);
            let change = match extend {
                true => ShardChange::Extended,
                false => ShardChange::Updated,
            };
            shard_changes[shard] = shard_changes[shard].max(change);
            slots[shard].push(Slot::Built(builds.len()));
            builds.push(Build {
                name: name.clone(),
                previous: Some(Arc::clone(station)),
                batch,
                extend,
            });
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
        shard_changes[shard] = shard_changes[shard].max(ShardChange::Updated);
        slots[shard].push(Slot::Built(builds.len()));
        builds.push(Build {
            name,
            previous: None,
            batch: Some(builder),
            extend: false,
        });
    }
    let built = threads::map(builds, |build| build_station(build, changes, options));
    let mut built: Vec<Option<Built>> = built.into_iter().collect::<Result<_, LoadError>>()?;

    let mut stations = Stations {
        placed: vec![Vec::new(); shard_count],
        appended: vec![Vec::new(); shard_count],
        changes: shard_changes,
    };
    for (shard, shard_slots) in slots.into_iter().enumerate() {
        let placed = &mut stations.placed[shard];
        for slot in shard_slots {
            match slot {
                Slot::Shared(name, data, previous_index) => {
                    placed.push((name, data, Origin::Shared { previous_index }));
                }
                Slot::Built(build) => {
                    if let Some(built) = built[build].take() {
                        if !built.appended.is_empty() {
                            stations.appended[shard].push((placed.len(), built.appended));
                        }
                        placed.push((built.name, built.data, built.origin));
                    }
                }
            }
        }
    }
    Ok(stations)
}

/// One touched or new station; `None` when it lost all its records.
fn build_station(
    build: Build,
    changes: &Changes,
    options: &LoadOptions,
) -> Result<Option<Built>, LoadError> {
    let Build {
        name,
        previous,
        batch,
        extend,
    } = build;
    if let (Some(old), true) = (&previous, extend) {
        // The builder holds the recent layer's records' bytes and only the new
        // entries, which the station addresses after its settled layer.
        let mut builder = StationBuilder::extending(old);
        if let Some(batch) = batch {
            builder.append(batch);
        }
        let offset = old.hot.recent.offset;
        if u64::from(offset) + builder.arena.len() as u64 >= u64::from(SEALED) || !builder.fits() {
            return Err(LoadError::StationTooLarge {
                station: name.to_string(),
            });
        }
        for (_, entry) in &mut builder.units {
            entry.bytes.start += offset;
        }
        for (_, entry) in &mut builder.metrics {
            entry.bytes.start += offset;
        }
        let data = old.extended(
            builder.arena.into_boxed_slice(),
            builder.pieces.finish(),
            &builder.units,
            &builder.metrics,
        );
        return Ok(Some(Built {
            data: Arc::new(data),
            name,
            origin: Origin::Extended,
            appended: builder.units,
        }));
    }
    let mut builder = match &previous {
        Some(old) => StationBuilder::surviving(
            old,
            &|load_order| changes.is_dropped(load_order),
            &|lowest, highest| changes.touches_files(lowest, highest),
        )?,
        None => StationBuilder::default(),
    };
    if let Some(batch) = batch {
        builder.append(batch);
    }
    if builder.record_count() == 0 {
        return Ok(None);
    }
    Ok(Some(Built {
        data: Arc::new(builder.into_station(&name, options.hot, &options.cache)?),
        name,
        origin: Origin::Built,
        appended: Vec::new(),
    }))
}

/// The new generation: its catalog (station ids in byte order, each one's place,
/// the files' states and the totals of `/readyz`) and its shards, each one's
/// shard-wide tree made as its change allows.
fn assemble(
    previous: &Catalog,
    shards: &[Arc<ShardData>],
    mut stations: Stations,
    symbols: Arc<Symbols>,
    sources: Vec<SourceState>,
    options: &LoadOptions,
) -> Generation {
    let mut names: Vec<(Box<str>, Placement)> = stations
        .placed
        .iter()
        .enumerate()
        .flat_map(|(shard, placed)| {
            placed
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
    let mut ranks_per_shard: Vec<Vec<u32>> = stations
        .placed
        .iter()
        .map(|placed| vec![0; placed.len()])
        .collect();
    for (rank, (name, placement)) in names.iter().enumerate() {
        let (shard, station_index) = (placement.shard as usize, placement.station_index as usize);
        ranks_per_shard[shard][station_index] = rank as u32;
        let kept = !matches!(stations.placed[shard][station_index].2, Origin::Built);
        if kept && previous.rank(name) != Some(rank as u32) {
            stations.changes[shard] = ShardChange::Sorted;
        }
    }
    let generation = options.generation;
    let jobs: Vec<_> = stations
        .placed
        .into_iter()
        .zip(&ranks_per_shard)
        .zip(stations.appended)
        .zip(stations.changes)
        .enumerate()
        .collect();
    let new_shards: Vec<ShardData> =
        threads::map(jobs, |(shard, (((placed, ranks), appended), change))| {
            let previous_shard = &shards[shard];
            let (stations, origins): (Vec<_>, Vec<_>) = placed
                .into_iter()
                .map(|(_, data, origin)| (data, origin))
                .unzip();
            match change {
                ShardChange::Sorted => ShardData::of_shared(generation, stations, ranks),
                ShardChange::Updated => {
                    ShardData::updated(generation, previous_shard, stations, &origins, ranks)
                }
                ShardChange::Extended => {
                    let appended = recent_units(appended, ranks);
                    ShardData::extended(generation, previous_shard, stations, appended)
                }
                ShardChange::Shared => ShardData::shared(generation, previous_shard),
            }
        });

    let summary = full::summary_of(&sources);
    let (names, placements) = names.into_iter().unzip();
    let catalog = Catalog::new(
        generation,
        names,
        placements,
        symbols,
        shards.len(),
        summary,
        sources,
    );
    Generation {
        catalog: Arc::new(catalog),
        shards: new_shards,
    }
}

/// Where each file of `previous` is in its states, by path.
fn by_path(previous: &Catalog) -> HashMap<&str, usize> {
    (previous.sources.iter().enumerate())
        .map(|(index, source)| (&*source.relative, index))
        .collect()
}

impl LoadReport {
    /// The totals of the data a reload's generation holds, from its catalog, and
    /// how many of its records are sealed.
    fn totals_of(&mut self, generation: &Generation) {
        let catalog = &generation.catalog;
        self.units = catalog.summary.units;
        self.metrics = catalog.summary.metrics;
        self.pending = catalog.summary.pending_lines;
        self.stations = catalog.stations.len();
        self.sealed = generation.sealed_records();
    }
}

/// A reload that cannot build on the previous shards or number a new file between
/// its neighbours: every file is read again and numbered afresh, as a full load
/// numbers them, and every station built anew. Under `fail`, a file with an invalid
/// line is still held back alone: it serves its previous records, under its new
/// number.
fn renumbered(
    previous: &Catalog,
    shards: &[Arc<ShardData>],
    options: &LoadOptions,
) -> Result<(Generation, LoadReport), LoadError> {
    let started = Instant::now();
    let mut jobs = files::discover(&options.directory)?;
    files::spread_ordinals(&mut jobs);
    let state = LoadState {
        symbols: SharedSymbols::extending(Arc::clone(&previous.symbols)),
        ..LoadState::default()
    };
    let mut state = read::read_all_into(state, &jobs, options.threads, true)?;
    let mut report = state.report(&jobs);
    let previous_by_path = by_path(previous);
    let mut held: HashSet<u32> = HashSet::new();
    // Held files that were known: their previous state, and their new ordinal.
    let mut carried: Vec<(&SourceState, u32)> = Vec::new();
    let mut sources = Vec::with_capacity(jobs.len());
    for (index, job) in jobs.iter().enumerate() {
        let invalid = state.files[index].invalid.load(Ordering::Relaxed) > 0;
        if options.on_invalid == OnInvalid::Skip || !invalid {
            sources.push(state.source(&jobs, index));
            continue;
        }
        held.insert(job.ordinal);
        report.held.push(job.display.clone());
        let before =
            (previous_by_path.get(job.relative.as_str())).map(|&known| &previous.sources[known]);
        if let Some(before) = before {
            carried.push((before, job.ordinal));
        }
        let source =
            SourceState::held_back(before, state.source(&jobs, index), state.reads[index].stamp);
        // Its previous records are carried under its new number.
        sources.push(SourceState {
            ordinal: job.ordinal,
            ..source
        });
    }
    let mut stations = new_records(&mut state, &held);
    for (before, ordinal) in carried {
        for name in before.stations.iter() {
            let Some(rank) = previous.rank(name) else {
                continue;
            };
            let placement = previous.placement(rank);
            let Some(station) = shards
                .get(placement.shard as usize)
                .and_then(|shard| shard.stations.get(placement.station_index as usize))
            else {
                continue;
            };
            stations
                .entry(name.clone())
                .or_default()
                .carry(station, before.ordinal, ordinal)?;
        }
    }
    let symbols = Arc::new(std::mem::take(&mut state.symbols).into_symbols()?);
    let summary = full::summary_of(&sources);
    let generation = full::generation(stations, symbols, summary, sources, options)?;
    report.totals_of(&generation);
    report.elapsed = started.elapsed();
    // Every line's load order may have moved: no record is named as it was.
    report.additions = Additions::whole();
    threads::release_freed_memory();
    Ok((generation, report))
}

/// The units appended to a shard's extended stations, keyed for its recent tree.
fn recent_units(appended: Vec<Appended>, ranks: &[u32]) -> Vec<(Position, ShardUnit)> {
    appended
        .into_iter()
        .flat_map(|(station_index, units)| {
            let rank = ranks[station_index];
            (units.into_iter()).map(move |(key, entry)| shard_unit(station_index, rank, key, entry))
        })
        .collect()
}

#[cfg(test)]
mod tests;
