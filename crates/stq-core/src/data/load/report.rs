//! What a load is asked to do and what it answers: its options, its report (files,
//! invalid lines as `path:line: reason`, totals) and its errors.

use std::collections::BTreeSet;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::domain::record::Kind;

pub const INVALID_LINES_SHOWN: usize = 20;

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

#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub directory: PathBuf,
    pub shards: usize,
    pub on_invalid: OnInvalid,
    pub generation: u64,
    /// Parsing threads; the reader is one more.
    pub threads: usize,
    /// The hot window (`--hot`): a station's records in whole hours older than
    /// this, counted back from its newest record, are sealed; `None` keeps every
    /// record hot.
    pub hot: Option<Duration>,
}

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
    /// Its format's name: `units`, `metrics` or `openhtf`.
    pub format: &'static str,
    /// The kind of every record it holds, or `None` when it holds both.
    pub kind: Option<Kind>,
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
    /// Of the generation's records, how many are in sealed blocks (older than `--hot`).
    pub sealed: u64,
    /// Files held for their invalid lines (as messages name them): at a reload
    /// under `fail` or `hold`, each serves what it served before; at a start-up
    /// under `hold`, nothing.
    pub held: Vec<String>,
    pub elapsed: Duration,
}

impl LoadReport {
    pub fn records(&self) -> u64 {
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
                super::format::file_patterns()
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
    #[error("{station:?} holds more than 2 GiB of records in its hot window; use more, smaller stations or a shorter --hot")]
    StationTooLarge { station: String },
    #[error("{} invalid snapshot line(s)", report.invalid.len())]
    Invalid { report: Box<LoadReport> },
}
