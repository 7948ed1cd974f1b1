//! What a generation remembers of its snapshot files: each one's stamp (size,
//! modification time, inode, device), where its whole lines end, what its last
//! read found ([`SourceState`], kept in the catalog so that the next reload reads
//! only what changed, and written to a store's manifest), what the admin
//! listener's `/files` says of it ([`FileStatus`]), and one look at every file's
//! stamp ([`Stamps`]), which `--watch-poll` compares from one look to the next.
//!
//! A leaf of the data layer: the loader fills these in, the catalog keeps them and
//! the store writes them, and this module uses none of those.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::Metadata;
use std::sync::Arc;

use crate::data::codec;
use crate::domain::record::Kind;

/// How many invalid lines a file's state keeps, which `/files` shows.
pub(crate) const INVALID_LINES_SHOWN: usize = 20;

/// The names of the snapshot formats, as a store's manifest writes them: each
/// format of the loader's table has one of them (a test there holds it).
pub(crate) const FORMAT_NAMES: [&str; 3] = ["units", "metrics", "openhtf"];

/// An invalid snapshot line: where it is and why it is invalid; shown as
/// `path:line: reason`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidLine {
    pub(crate) path: String,
    pub(crate) line: u32,
    pub(crate) reason: String,
}

impl fmt::Display for InvalidLine {
    fn fmt(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        write!(formatter, "{}:{}: {}", self.path, self.line, self.reason)
    }
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

/// A file as its metadata says: what tells an unchanged file from a changed one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileStamp {
    pub(crate) length: u64,
    modified: (i64, i64),
    inode: u64,
    device: u64,
}

impl FileStamp {
    /// The stamp of a file with this metadata.
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

    pub(crate) fn same_file(&self, other: &FileStamp) -> bool {
        (self.inode, self.device) == (other.inode, other.device)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Resume {
    /// The start of the last line without a line end, or the end of the file.
    pub(crate) start: Start,
    /// A digest of the last bytes read (the loader's `TAIL_BYTES`).
    pub(crate) tail: u64,
}

/// What a generation knows of one snapshot file: enough for the next reload to
/// skip it, resume it or drop its records, and for `/files` to say what its last
/// read found.
#[derive(Clone, Debug)]
pub(crate) struct SourceState {
    pub(crate) relative: Box<str>,
    pub(crate) ordinal: u32,
    /// Its format's name: `units`, `metrics` or `openhtf`.
    pub(crate) format: &'static str,
    pub(crate) stamp: FileStamp,
    pub(crate) resume: Option<Resume>,
    pub(crate) units: u64,
    pub(crate) metrics: u64,
    pub(crate) invalid: u64,
    pub(crate) pending: u64,
    /// Every station its records went to.
    pub(crate) stations: Box<[Box<str>]>,
    /// The station and kind of the record its last line without a line end made,
    /// if any.
    pub(crate) open_record: Option<(Box<str>, Kind)>,
    /// The file as it was when a load met invalid lines in it and held it (a
    /// reload under `fail` or `hold`, a start-up under `hold`): the rest of this
    /// state is what it served before (nothing, if it was new). Read again as soon
    /// as it differs from this stamp.
    /// Boxed: rarely any, and a year's 73,000 files kept 40 bytes each for it.
    pub(crate) held: Option<Box<FileStamp>>,
    /// The first [`INVALID_LINES_SHOWN`] invalid lines its last read met (a grown
    /// file's, those of its reads since it was last read whole), in line order.
    pub(crate) errors: Arc<[InvalidLine]>,
}

impl SourceState {
    /// The state of a file at `relative` numbered `ordinal` that held nothing yet:
    /// what tests of a catalog's files build catalogs of.
    #[cfg(test)]
    pub(crate) fn named(relative: &str, ordinal: u32) -> SourceState {
        SourceState {
            relative: relative.into(),
            ordinal,
            format: "units",
            stamp: FileStamp {
                length: 0,
                modified: (0, 0),
                inode: 0,
                device: 0,
            },
            resume: None,
            units: 0,
            metrics: 0,
            invalid: 0,
            pending: 0,
            stations: Box::default(),
            open_record: None,
            held: None,
            errors: Arc::default(),
        }
    }

    /// If the file held records of `station`, makes the next reload read it again
    /// whole, as if it had changed (a store's station that was damaged):
    /// its stamp then matches no file, and no read resumes it.
    pub(crate) fn read_again_if_it_holds(&mut self, station: &str) {
        if self.stations.iter().any(|held| **held == *station) {
            self.stamp.length = u64::MAX;
            self.stamp.inode = u64::MAX;
            self.resume = None;
        }
    }
}

/// What a generation knows of its files, in a store's manifest: every
/// field of a [`SourceState`], so that a start from the store compares each file
/// with its state exactly as a reload compares it with the last read.
impl SourceState {
    pub(crate) fn write_to(&self, out: &mut Vec<u8>) {
        codec::bytes(out, self.relative.as_bytes());
        codec::number(out, u64::from(self.ordinal));
        codec::bytes(out, self.format.as_bytes());
        self.stamp.write_to(out);
        match self.resume {
            None => out.push(0),
            Some(resume) => {
                out.push(1);
                codec::number(out, resume.start.offset);
                codec::number(out, u64::from(resume.start.line));
                out.extend_from_slice(&resume.tail.to_le_bytes());
            }
        }
        for count in [self.units, self.metrics, self.invalid, self.pending] {
            codec::number(out, count);
        }
        codec::number(out, self.stations.len() as u64);
        for station in &self.stations {
            codec::bytes(out, station.as_bytes());
        }
        match &self.open_record {
            None => out.push(0),
            Some((station, kind)) => {
                out.push(1 + *kind as u8);
                codec::bytes(out, station.as_bytes());
            }
        }
        match &self.held {
            None => out.push(0),
            Some(stamp) => {
                out.push(1);
                stamp.write_to(out);
            }
        }
        // The admin `/files` shows them after a start from the store as after the
        // read that met them.
        codec::number(out, self.errors.len() as u64);
        for error in self.errors.iter() {
            codec::bytes(out, error.path.as_bytes());
            codec::number(out, u64::from(error.line));
            codec::bytes(out, error.reason.as_bytes());
        }
    }

    pub(crate) fn read_from(
        decoder: &mut codec::Decoder<'_>,
    ) -> Result<SourceState, codec::Corrupt> {
        let relative = decoder.text()?.into();
        let ordinal = decoder.u32()?;
        let format = decoder.text()?;
        let format = (FORMAT_NAMES.iter().copied())
            .find(|known| *known == format)
            .ok_or(codec::Corrupt("a file of no snapshot format"))?;
        let stamp = FileStamp::read_from(decoder)?;
        let resume = match decoder.take(1)?[0] {
            0 => None,
            _ => Some(Resume {
                start: Start {
                    offset: decoder.number()?,
                    line: decoder.u32()?,
                },
                tail: decoder.u64_le()?,
            }),
        };
        let [units, metrics, invalid, pending] = [
            decoder.number()?,
            decoder.number()?,
            decoder.number()?,
            decoder.number()?,
        ];
        let mut stations = Vec::new();
        for _ in 0..decoder.count(1)? {
            stations.push(decoder.text()?.into());
        }
        let open_record = match decoder.take(1)?[0] {
            0 => None,
            code => {
                let kind = match code {
                    1 => Kind::Units,
                    _ => Kind::Metrics,
                };
                Some((decoder.text()?.into(), kind))
            }
        };
        let held = match decoder.take(1)?[0] {
            0 => None,
            _ => Some(Box::new(FileStamp::read_from(decoder)?)),
        };
        let mut errors = Vec::new();
        for _ in 0..decoder.count(3)? {
            errors.push(InvalidLine {
                path: decoder.text()?.to_owned(),
                line: decoder.u32()?,
                reason: decoder.text()?.to_owned(),
            });
        }
        Ok(SourceState {
            relative,
            ordinal,
            format,
            stamp,
            resume,
            units,
            metrics,
            invalid,
            pending,
            stations: stations.into(),
            open_record,
            held,
            errors: errors.into(),
        })
    }
}

impl FileStamp {
    fn write_to(&self, out: &mut Vec<u8>) {
        codec::number(out, self.length);
        codec::signed(out, self.modified.0);
        codec::signed(out, self.modified.1);
        codec::number(out, self.inode);
        codec::number(out, self.device);
    }

    fn read_from(decoder: &mut codec::Decoder<'_>) -> Result<FileStamp, codec::Corrupt> {
        Ok(FileStamp {
            length: decoder.number()?,
            modified: (decoder.signed()?, decoder.signed()?),
            inode: decoder.number()?,
            device: decoder.number()?,
        })
    }
}

impl SourceState {
    /// The state of a file held back for its invalid lines, as it was when it was
    /// read and found so (`stamp`): what it served before (`before`), or, new, its
    /// read's state serving nothing until it reads cleanly.
    pub(crate) fn held_back(
        before: Option<&SourceState>,
        read: SourceState,
        stamp: FileStamp,
    ) -> SourceState {
        let held = Some(Box::new(stamp));
        match before {
            Some(before) => SourceState {
                held,
                errors: read.errors,
                ..before.clone()
            },
            None => SourceState {
                held,
                resume: None,
                units: 0,
                metrics: 0,
                invalid: 0,
                pending: 0,
                stations: Box::default(),
                open_record: None,
                ..read
            },
        }
    }

    /// A grown file's state: this one's, with what `read` read from its last whole
    /// line on.
    pub(crate) fn grown(&self, read: SourceState) -> SourceState {
        let (mut units, mut metrics) = (self.units, self.metrics);
        // The record of the last line without a line end was dropped: it is read
        // again.
        match self.open_record {
            Some((_, Kind::Units)) => units -= 1,
            Some((_, Kind::Metrics)) => metrics -= 1,
            None => {}
        }
        let stations: BTreeSet<Box<str>> = self
            .stations
            .iter()
            .chain(read.stations.iter())
            .cloned()
            .collect();
        let errors = (self.errors.iter().chain(read.errors.iter()))
            .take(INVALID_LINES_SHOWN)
            .cloned()
            .collect();
        SourceState {
            units: units + read.units,
            metrics: metrics + read.metrics,
            invalid: self.invalid + read.invalid,
            stations: stations.into_iter().collect(),
            errors,
            ..read
        }
    }

    /// What `/files` says of it.
    pub(crate) fn status(&self) -> FileStatus<'_> {
        FileStatus {
            path: &self.relative,
            kind: self.format,
            held: self.held.is_some(),
            // A held file's last read reached its held stamp's length.
            bytes: self.held.as_deref().unwrap_or(&self.stamp).length,
            records: self.units + self.metrics,
            skipped_lines: self.invalid,
            pending_lines: self.pending,
            errors: &self.errors,
        }
    }
}

/// One snapshot file of a generation as the admin listener's `/files` reports it
/// (docs/api.md section 8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileStatus<'a> {
    /// Relative to the snapshot directory, `/`-separated.
    pub(crate) path: &'a str,
    /// Its format's name: `units`, `metrics` or `openhtf`.
    pub(crate) kind: &'static str,
    /// Held for invalid lines: it serves what it served before they came (nothing,
    /// if it never read cleanly).
    pub(crate) held: bool,
    /// How far its reads have read it (a held file's, its last read).
    pub(crate) bytes: u64,
    /// The records served from it.
    pub(crate) records: u64,
    /// Its invalid lines skipped (`--on-invalid skip`).
    pub(crate) skipped_lines: u64,
    /// Its last line without a line end, when it does not parse yet: not loaded,
    /// not counted as invalid.
    pub(crate) pending_lines: u64,
    /// The first invalid lines (at most [`INVALID_LINES_SHOWN`]) of its last read.
    pub(crate) errors: &'a [InvalidLine],
}

/// Every snapshot file under a directory and its stamp, as one look saw them:
/// `--watch-poll` compares each look with the one before to tell which files
/// changed (docs/api.md section 8), as a reload compares a file with its last read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stamps(BTreeMap<String, FileStamp>);

impl Stamps {
    /// The stamps of the files named, by relative path.
    pub(crate) fn new(stamps: BTreeMap<String, FileStamp>) -> Stamps {
        Stamps(stamps)
    }

    /// Every file as a generation's load read it (a held file as last read).
    pub(crate) fn of_sources(sources: &[SourceState]) -> Stamps {
        let stamps = (sources.iter())
            .map(|source| {
                (
                    source.relative.to_string(),
                    *source.held.as_deref().unwrap_or(&source.stamp),
                )
            })
            .collect();
        Stamps(stamps)
    }

    /// The paths (relative, `/`-separated) of the files added, changed or gone
    /// since `before`, in path order.
    pub(crate) fn changed_since(&self, before: &Stamps) -> BTreeSet<String> {
        let added_or_changed = (self.0.iter())
            .filter(|(path, stamp)| before.0.get(*path) != Some(stamp))
            .map(|(path, _)| path);
        let gone = (before.0.keys()).filter(|path| !self.0.contains_key(*path));
        added_or_changed.chain(gone).cloned().collect()
    }
}
