//! Loading a snapshot directory (docs/api.md sections 2 and 8) into a
//! [`Generation`], from scratch or from the previous generation and what changed.
//!
//! The steps, each a module, used by both callers:
//! - [`files`]: finding the files, each one's stamp, the ordinals that number their
//!   lines, and what a generation remembers of each (kept in its catalog);
//! - [`format`]: what a format is (names, how its files are cut, its parser): a
//!   new format is a file there and a line in its table;
//! - [`read`]: reading files on every core, each block parsed by its file's format
//!   and its records staged into their stations' builders;
//! - [`build`]: stations built from their builders and placed on shards.
//!
//! The callers: [`full`] (start-up, `stq check`, and a reload that cannot build on
//! the previous generation) reads every file; [`reload`] reads what changed and
//! shares the rest; [`start`] makes a process's first generation, from the store
//! through [`reload`] when it can, else through [`full`]. No module here imports
//! one that imports it back: [`files`] (which the catalog keeps) imports only
//! [`format`] and this module, [`format`] nothing of loading, and only [`full`]
//! and [`reload`] import the catalog.
//!
//! This module is the front door, and the data layer re-exports its types: what a
//! load is asked ([`LoadOptions`], whose methods are the ways in: a
//! [`LoadOptions::start`] and a [`LoadOptions::reload`]), what it answers (its
//! report, whose [`LoadReport::check`] is `stq check`, and its errors), and
//! `--watch-poll`'s looks ([`Look::watch`]). The service names each of them once
//! and none of the steps (what `/files` says of a file is the catalog's
//! `files_json`).

mod added;
mod build;
pub(crate) mod files;
pub(crate) mod format;
mod full;
mod read;
mod reload;
mod start;

pub use added::{Additions, Touch};
#[cfg(test)]
pub(crate) use full::load;
#[cfg(test)]
pub(crate) use reload::{load_from_store, reload};

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::data::catalog::Catalog;
use crate::data::catalog::Generation;
use crate::data::fault::StorageFault;
use crate::data::sealed::cache::BlockCache;
use crate::data::sealed::Remote;
use crate::data::shard::ShardData;
use crate::data::sources::InvalidLine;
use crate::data::store::StoreWriter;
use crate::domain::record::Kind;

impl LoadOptions {
    /// A process's first generation, loaded from the snapshot directory
    /// `self.directory` into `self.shards` shards: from every file (`stq
    /// export`, and `stq serve` without `--store`); with `store` (a directory,
    /// docs/api.md section 12), from the generation written there for these
    /// options, rebuilt and then reloaded, so that it reads only the snapshot files
    /// that changed since and serves what a start without it would; else, as without
    /// `store`, from every file: when the store is empty or cannot be used (logged, as is
    /// each damaged station, whose files are read again), or when a start under
    /// `--on-invalid fail` would meet invalid lines (in the store's history or in
    /// what changed; it then refuses to start as a start without a store does), or
    /// the store holds files a reload held back (a start does not hold files back).
    /// With `remote` (an `s3://` store's bucket), a sealed file the directory holds
    /// only the index of ([`crate::data::NamedFile::index_file`]) has its blocks read
    /// from there until the whole file is in the directory.
    pub fn start(
        &self,
        store: Option<&Path>,
        remote: Option<Arc<dyn Remote>>,
    ) -> Result<Start, LoadError> {
        start::start(self, store, remote)
    }

    /// Builds the generation after `previous` (a catalog and its shards) from what
    /// changed in the directory since `previous` was read, looking for changes only
    /// where `look` says; what it serves is what [`LoadOptions::start`] without a
    /// store would of the same files. The stations of `repair` (none, as a rule) are
    /// read again from their snapshot files, and then every file is looked at: their
    /// store files were found damaged after the start used them (an `s3://` store's
    /// object that fails its checksum once fetched whole). The report counts what
    /// this reload read, and the totals of the data it holds.
    ///
    /// A reload rebuilds stations from their surviving records, and so may read a
    /// store file that fails (docs/api.md section 12): then the stations reading
    /// that file are read again from the snapshot files too, and the reload is tried
    /// again, until it reads no file that fails. A fault that no station's repair
    /// mends (the symbol table's run, which every station reads, cut or damaged),
    /// or no `previous` (an install under way), has the whole generation read from
    /// the snapshot files, every station an addition.
    pub fn reload(
        &self,
        previous: Option<(&Catalog, &[Arc<ShardData>])>,
        look: &Look,
        mut repair: BTreeSet<String>,
    ) -> Result<(Generation, LoadReport), LoadError> {
        let Some((catalog, shards)) = previous else {
            return self.whole();
        };
        loop {
            let fault = match self.reload_once(catalog, shards, look, &repair) {
                Err(LoadError::Storage(fault)) => fault,
                reloaded => return reloaded,
            };
            let before = repair.len();
            repair.extend(catalog.stations_to_repair(shards, &fault));
            tracing::warn!("{fault}; the reload reads its stations from the snapshot files too");
            if repair.len() == before {
                // Every station it names is read from the files already: what fails
                // is shared by them all.
                tracing::warn!("{fault}; the reload reads every station from the snapshot files");
                return self.whole();
            }
        }
    }

    /// [`LoadOptions::reload`] tried once: a store file that fails is its error.
    pub(crate) fn reload_once(
        &self,
        previous: &Catalog,
        shards: &[Arc<ShardData>],
        look: &Look,
        repair: &BTreeSet<String>,
    ) -> Result<(Generation, LoadReport), LoadError> {
        match repair.is_empty() {
            true => reload::reload_looking(previous, shards, self, look),
            false => {
                reload::repair(previous, shards, repair, self).map(|(generation, mut report)| {
                    report.additions = Additions::whole();
                    (generation, report)
                })
            }
        }
    }

    /// The whole generation read from the snapshot files, every station an
    /// addition.
    fn whole(&self) -> Result<(Generation, LoadReport), LoadError> {
        self.start(None, None).map(|start| {
            let mut report = start.report;
            report.additions = Additions::whole();
            (start.generation, report)
        })
    }
}

/// A first generation, as [`LoadOptions::start`] made it.
pub struct Start {
    /// The generation.
    pub generation: Generation,
    /// What was read to make it; with a store, how long its read took counts.
    pub report: LoadReport,
    /// With a store, its writer, which keeps the files of what the start
    /// restored from it.
    pub writer: Option<StoreWriter>,
    /// With a store, what it gave.
    pub store: Option<FromStore>,
}

/// What a start had from the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FromStore {
    /// Nothing: it holds no generation yet; every file was read.
    Empty,
    /// Nothing: it is damaged, unreadable or written for other settings (logged);
    /// every file was read.
    NotUsed,
    /// Nothing: it holds files held back, or invalid lines under `--on-invalid
    /// fail`; every file was read.
    ParsedInstead,
    /// The generation it held, and what changed since.
    Restored {
        /// Records it gave.
        records: u64,
        /// Its stations whose files were damaged (logged): each one's snapshot
        /// files were read again.
        repaired: usize,
    },
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

impl Look {
    /// `--watch-poll` (docs/api.md section 8): a look at every snapshot file under
    /// `snapshots` and at the tokens file at `tokens` each time it is called, saying
    /// what changed since the look before as what a reload should look at (`None`
    /// when nothing did). The first look compares the snapshot files with how
    /// `catalog`'s loads read them, and the tokens file with how it is now. A look
    /// that cannot read the directory says to look at everything, once; the next
    /// look that can compares with the last one that could.
    pub fn watch(
        catalog: &Catalog,
        snapshots: &Path,
        tokens: &Path,
    ) -> impl FnMut() -> Option<Look> + Send + 'static {
        let mut watched = files::Watched::new(snapshots, tokens, catalog.stamps());
        move || watched.look()
    }
}

/// What to do with an invalid line (docs/api.md section 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnInvalid {
    /// A start-up refuses the snapshot; a reload holds back the files that hold
    /// invalid lines, each serving what it served before.
    Fail,
    /// The line is skipped and counted.
    Skip,
    /// A start-up holds the files that hold invalid lines (none of their records
    /// are served) and starts with the others; a reload does as under `Fail`.
    Hold,
}

/// What a load reads and how: the snapshot directory, the shards, what an
/// invalid line does, and the threads and hot window it builds with.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// The snapshot directory.
    pub directory: PathBuf,
    /// How many shards the stations are spread over.
    pub shards: usize,
    /// What an invalid line does.
    pub on_invalid: OnInvalid,
    /// The number the new generation gets (1 at start-up, one more each reload).
    pub generation: u64,
    /// Parsing threads; the reader is one more.
    pub threads: usize,
    /// The hot window (`--hot`): a station's records in whole hours older than
    /// this, counted back from its newest record, are sealed; `None` keeps every
    /// record hot.
    pub hot: Option<Duration>,
    /// The cache of decoded sealed blocks (`--cache-size`) that its sealed
    /// tiers are read through: the same for every generation of a process, so
    /// that a reload keeps what it holds.
    pub cache: BlockCache,
}

/// One snapshot file and what was found in it.
#[derive(Clone, Debug)]
pub struct FileReport {
    /// Its path, relative to the snapshot directory.
    pub path: String,
    /// Its format's name: `units`, `metrics` or `openhtf`.
    pub format: &'static str,
    /// The kind of every record it holds, or `None` when it holds both.
    pub kind: Option<Kind>,
    /// Valid records: `units + metrics`.
    pub records: u64,
    /// Its unit records.
    pub units: u64,
    /// Its metric records.
    pub metrics: u64,
    /// Its invalid lines.
    pub invalid: u64,
    /// Field names of the file that the record shape does not have.
    pub(crate) unknown_fields: BTreeSet<String>,
}

/// What a load found: each file's report, the invalid lines, the totals, and
/// how long it took.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// Each file read, in load order.
    pub files: Vec<FileReport>,
    /// Every invalid line, in load order.
    pub invalid: Vec<InvalidLine>,
    /// Unit records loaded.
    pub units: u64,
    /// Metric records loaded.
    pub metrics: u64,
    /// Stations in the generation.
    pub stations: usize,
    /// Last lines without a line end that do not parse (yet): not loaded, not
    /// counted as invalid (docs/api.md section 8).
    pub pending: u64,
    /// Snapshot bytes read, after decompression.
    pub bytes: u64,
    /// Of the generation's records, how many are in sealed blocks (older than `--hot`).
    pub sealed: u64,
    /// Files held for their invalid lines (as messages name them): at a reload
    /// under `fail` or `hold`, each serves what it served before; at a start-up
    /// under `hold`, nothing.
    pub held: Vec<String>,
    /// How long the load took, from the first look at the directory.
    pub elapsed: Duration,
    /// A reload's: the records it added and the stations whose records it removed
    /// or changed (docs/api.md section 14); empty for a first load.
    pub additions: Additions,
}

impl LoadReport {
    /// Validates every line of the snapshot directory `directory` with `threads`
    /// parsing threads, without building an index (`stq check`).
    pub fn check(directory: &Path, threads: usize) -> Result<LoadReport, LoadError> {
        full::check(directory, threads)
    }

    /// Records loaded, units and metrics.
    pub(crate) fn records(&self) -> u64 {
        self.units + self.metrics
    }

    /// Takes out the invalid lines of the held files, to be logged as what holds
    /// them: where a file is held (under `fail` or `hold`) every invalid line is
    /// in a held file; under `skip` none is, and the skipped lines stay.
    pub fn take_held_lines(&mut self) -> Vec<InvalidLine> {
        match self.held.is_empty() {
            true => Vec::new(),
            false => std::mem::take(&mut self.invalid),
        }
    }

    /// Logs what loaded but deserves a look: an empty directory, each skipped line
    /// as `path:line: reason`, and each file's unknown fields, once.
    pub fn log_warnings(&self, directory: &Path) {
        // A start from the store reads no file when none changed: it serves the
        // store's records.
        if self.files.is_empty() && self.records() == 0 {
            tracing::warn!(
                directory = %directory.display(),
                "the snapshot directory holds no {} files: serving no records",
                format::file_patterns()
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

/// Why a load made no generation.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The snapshot directory is missing, or not a directory.
    #[error("snapshot directory {0} does not exist or is not a directory")]
    MissingDirectory(PathBuf),
    /// A file or directory could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path that could not be read.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// A station's hot records outgrow what a station's arena can address.
    #[error("{station:?} holds more than 2 GiB of records in its hot window; use more, smaller stations or a shorter --hot")]
    StationTooLarge {
        /// The station's id.
        station: String,
    },
    /// Invalid lines under `--on-invalid fail` at start-up: the report lists them.
    #[error("{} invalid snapshot line(s)", report.invalid.len())]
    Invalid {
        /// What the load found, the invalid lines among it.
        report: Box<LoadReport>,
    },
    /// A store file the load read a station's sealed tier from failed the read:
    /// the station is to be read from the snapshot files instead
    /// ([`Catalog::stations_to_repair`](crate::data::Catalog::stations_to_repair)).
    #[error(transparent)]
    Storage(#[from] StorageFault),
}

#[cfg(test)]
mod tests;
