//! A full load: every file read from its start into a new generation, and `stq
//! check`, which reads every file and builds nothing. At start-up under
//! `--on-invalid hold`, a file with an invalid line is held: its records leave the
//! stations they went to, and its state remembers it as read, to be read again
//! once it changes (docs/api.md section 2).

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::build::{self, StationBuilder};
use super::files::{self, SnapshotFile};
use super::read::{self, LoadState, Split};
use super::{LoadError, LoadOptions, LoadReport, OnInvalid};
use crate::data::catalog::Catalog;
use crate::data::catalog::Generation;
use crate::data::catalog::LoadSummary;
use crate::data::catalog::Placement;
use crate::data::fault::StorageFault;
use crate::data::shard::ShardData;
use crate::data::sources::SourceState;
use crate::data::symbols::Symbols;
use crate::data::threads;

/// Loads a snapshot directory into a generation spread over `options.shards` shards.
pub(crate) fn load(options: &LoadOptions) -> Result<(Generation, LoadReport), LoadError> {
    load_with(options, Split::default())
}

/// [`load`], its reading cut as `split` says.
pub(super) fn load_with(
    options: &LoadOptions,
    split: Split,
) -> Result<(Generation, LoadReport), LoadError> {
    let started = Instant::now();
    let mut files = files::discover(&options.directory)?;
    files::spread_ordinals(&mut files);
    let state = LoadState {
        split,
        seal_while_reading: (options.hot).map(|hot| (hot, options.cache.clone())),
        ..LoadState::default()
    };
    let mut state = read::read_all_into(state, &files, options.threads, true)?;
    let mut report = state.report(&files);
    if !report.invalid.is_empty() && options.on_invalid == OnInvalid::Fail {
        report.elapsed = started.elapsed();
        return Err(LoadError::Invalid {
            report: Box::new(report),
        });
    }
    let held = match options.on_invalid {
        OnInvalid::Hold => hold(&mut state, &files, &mut report)?,
        OnInvalid::Fail | OnInvalid::Skip => HashSet::new(),
    };
    let symbols = Arc::new(std::mem::take(&mut state.symbols).into_symbols()?);
    let sources: Vec<SourceState> = (0..files.len())
        .map(|index| {
            let source = state.source(&files, index);
            match held.contains(&files[index].ordinal) {
                true => SourceState::held_back(None, source, state.reads[index].stamp),
                false => source,
            }
        })
        .collect();
    let summary = summary_of(&sources);
    // What is served: without the held files' records.
    (report.units, report.metrics) = (summary.units, summary.metrics);
    let stations = std::mem::take(&mut state.stations);
    let generation = generation(stations, symbols, summary, sources, options)?;
    report.stations = generation.catalog.stations.len();
    report.sealed = generation.sealed_records();
    threads::release_freed_memory();
    report.elapsed = started.elapsed();
    Ok((generation, report))
}

/// Holds every file read with an invalid line (`--on-invalid hold` at start-up):
/// its records leave the stations they went to, and the report names it. Returns
/// the held files' ordinals.
fn hold(
    state: &mut LoadState,
    files: &[SnapshotFile],
    report: &mut LoadReport,
) -> Result<HashSet<u32>, StorageFault> {
    let mut held = HashSet::new();
    let mut touched: BTreeSet<Box<str>> = BTreeSet::new();
    for (file, counters) in files.iter().zip(&state.files) {
        if counters.invalid.load(Ordering::Relaxed) > 0 {
            held.insert(file.ordinal);
            report.held.push(file.display.clone());
            touched.extend(counters.stations.lock().iter().cloned());
        }
    }
    for station in touched {
        let Some((name, builder)) = state.stations.remove(&station) else {
            continue;
        };
        if let Some(kept) = builder.without_files(&held)? {
            state.stations.insert(name, kept);
        }
    }
    Ok(held)
}

/// The totals `/readyz` reports, from every file's state.
pub(super) fn summary_of(sources: &[SourceState]) -> LoadSummary {
    LoadSummary {
        loaded_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        units: sources.iter().map(|source| source.units).sum(),
        metrics: sources.iter().map(|source| source.metrics).sum(),
        skipped_lines: sources.iter().map(|source| source.invalid).sum(),
        pending_lines: sources.iter().map(|source| source.pending).sum(),
        held_files: sources
            .iter()
            .filter(|source| source.held.is_some())
            .count() as u64,
    }
}

/// Validates every line without building an index (`stq check`).
pub(crate) fn check(directory: &Path, threads: usize) -> Result<LoadReport, LoadError> {
    let started = Instant::now();
    let files = files::discover(directory)?;
    let state = read::read_all_into(LoadState::default(), &files, threads, false)?;
    let mut report = state.report(&files);
    report.stations = state.stations.len();
    report.elapsed = started.elapsed();
    Ok(report)
}

/// The generation of a full load: stations placed on shards, each shard's index
/// built, shards in parallel.
pub(super) fn generation(
    stations: impl IntoIterator<Item = (Box<str>, StationBuilder)>,
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
    let shard_of = build::place(&stations, shard_count);
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
            let stations = (builders.into_iter())
                .map(|builder| builder.finish(options.hot, &options.cache))
                .collect::<Result<_, _>>()?;
            Ok::<_, StorageFault>(ShardData::new(options.generation, stations, ranks))
        },
    )
    .into_iter()
    .collect::<Result<_, _>>()?;

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
