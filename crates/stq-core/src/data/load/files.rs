//! Snapshot files and what a generation remembers of them: finding the files
//! ([`discover`]), each one's stamp (size, modification time, inode, device) and
//! where its whole lines end, the ordinals that number its lines, and
//! [`SourceState`], which the catalog keeps so that the next reload reads only what
//! changed and the admin listener's `/files` says what each file's last read found
//! ([`FileStatus`]) (docs/api.md section 8). [`Stamps`] is one look at every file's
//! stamp, which `--watch-poll` compares from one look to the next ([`Watched`]).
//!
//! A file is unchanged when its stamp is; it grew in place when it is the same file,
//! larger, and the last 4 KiB read are unchanged: then a reload resumes it at its
//! last line without a line end. Ordinals ascend with the paths but are spread over
//! the `u32` range with gaps, so that a reload can number a new file's lines
//! between its neighbours' without renumbering any other file.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, Metadata};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::{self, Format};
use super::{InvalidLine, LoadError, Look, INVALID_LINES_SHOWN};
use crate::data::store::codec;
use crate::domain::record::Kind;

/// How many bytes before the end of what was read must be unchanged for a larger
/// file to count as grown in place.
pub(super) const TAIL_BYTES: u64 = 4096;

/// The ordinals a first load spreads its files over: the lower half of the range,
/// leaving the upper half for files added after the last one.
pub(super) const FRESH_ORDINALS: u64 = 1 << 31;

/// The most a file added after the last one moves the ordinal on, so that files
/// added one by one at the end (a new file per day) do not halve the gap each time.
pub(super) const END_STEP: u64 = 1 << 16;

/// New files between two others take the first 1/`NEAR_LOWER` of the gap.
pub(super) const NEAR_LOWER: u64 = 16;

/// A snapshot file found by the scan, and where its reading starts.
#[derive(Clone, Debug)]
pub(crate) struct SnapshotFile {
    pub(crate) path: PathBuf,
    /// Relative to the directory, `/`-separated: what a cursor names.
    pub(crate) relative: String,
    /// The directory joined with the relative path, as messages name it.
    pub(crate) display: String,
    pub(crate) format: &'static dyn Format,
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
        let Some((format, gzip)) = format::of_file_name(&entry.file_name().to_string_lossy())
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
        files.push(SnapshotFile::new(directory, relative, format, gzip));
    }
    files.sort_by(|left, right| left.relative.as_bytes().cmp(right.relative.as_bytes()));
    Ok(files)
}

impl SnapshotFile {
    /// The file at `relative` (`/`-separated) under `directory`, not yet numbered.
    pub(crate) fn new(
        directory: &Path,
        relative: String,
        format: &'static dyn Format,
        gzip: bool,
    ) -> SnapshotFile {
        let path = directory.join(&relative);
        SnapshotFile {
            display: path.display().to_string(),
            path,
            relative,
            format,
            gzip,
            ordinal: 0,
            resume: None,
        }
    }

    /// Whether a reload can read it on from where its last read's whole lines end:
    /// an uncompressed file of lines.
    pub(crate) fn resumable(&self) -> bool {
        !self.gzip && self.format.cut() == format::Cut::Lines
    }
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

/// A digest of the [`TAIL_BYTES`] of `file` before `end`: XXH3, whose output is fixed
/// by its specification, so that a store's manifest written by one build of stq still
/// matches the files for the next (std's `DefaultHasher` may change between Rust
/// releases, and every grown file would then be read whole again).
pub(crate) fn tail_digest(file: &File, end: u64) -> io::Result<u64> {
    let length = end.min(TAIL_BYTES);
    let mut bytes = vec![0; length as usize];
    read_exact_at(file, &mut bytes, end - length)?;
    Ok(xxhash_rust::xxh3::xxh3_64(&bytes))
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
/// skip it, resume it or drop its records, and for `/files` to say what its last
/// read found.
#[derive(Clone, Debug)]
pub(crate) struct SourceState {
    pub(crate) relative: Box<str>,
    pub(crate) ordinal: u32,
    /// Its format's name: `units`, `metrics` or `openhtf`.
    pub(super) format: &'static str,
    pub(super) stamp: FileStamp,
    pub(super) resume: Option<Resume>,
    pub(super) units: u64,
    pub(super) metrics: u64,
    pub(super) invalid: u64,
    pub(super) pending: u64,
    /// Every station its records went to.
    pub(super) stations: Box<[Box<str>]>,
    /// The station and kind of the record its last line without a line end made,
    /// if any.
    pub(super) open_record: Option<(Box<str>, Kind)>,
    /// The file as it was when a load met invalid lines in it and held it (a
    /// reload under `fail` or `hold`, a start-up under `hold`): the rest of this
    /// state is what it served before (nothing, if it was new). Read again as soon
    /// as it differs from this stamp.
    /// Boxed: rarely any, and a year's 73,000 files kept 40 bytes each for it.
    pub(super) held: Option<Box<FileStamp>>,
    /// The first [`INVALID_LINES_SHOWN`] invalid lines its last read met (a grown
    /// file's, those of its reads since it was last read whole), in line order.
    pub(super) errors: Arc<[InvalidLine]>,
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
    /// whole, as if it had changed (a store's station that was damaged, issue 32):
    /// its stamp then matches no file, and no read resumes it.
    pub(crate) fn read_again_if_it_holds(&mut self, station: &str) {
        if self.stations.iter().any(|held| **held == *station) {
            self.stamp.length = u64::MAX;
            self.stamp.inode = u64::MAX;
            self.resume = None;
        }
    }
}

/// What a generation knows of its files, in a store's manifest (issue 32): every
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
        let format = (format::named(decoder.text()?))
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

/// Spreads a first load's files evenly over the lower half of the ordinals.
pub(crate) fn spread_ordinals(files: &mut [SnapshotFile]) {
    let gap = (FRESH_ORDINALS / (files.len() as u64 + 1)).max(1);
    for (index, file) in files.iter_mut().enumerate() {
        file.ordinal = ((index as u64 + 1) * gap).min(u64::from(u32::MAX)) as u32;
    }
}

impl SourceState {
    /// The state of a file held back for its invalid lines, as it was when it was
    /// read and found so (`stamp`): what it served before (`before`), or, new, its
    /// read's state serving nothing until it reads cleanly.
    pub(super) fn held_back(
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
    pub(super) fn grown(&self, read: SourceState) -> SourceState {
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
    /// A look at every snapshot file below `directory`. A file gone between being
    /// found and being looked at is left out, as a look a moment later would.
    pub(crate) fn of(directory: &Path) -> Result<Stamps, LoadError> {
        let stamps = (discover(directory)?.into_iter())
            .filter_map(|file| {
                let metadata = std::fs::metadata(&file.path).ok()?;
                Some((file.relative, FileStamp::of(&metadata)))
            })
            .collect();
        Ok(Stamps(stamps))
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

/// What `--watch-poll` looks at (docs/api.md section 8): every snapshot file's
/// stamp and the tokens file's, each look compared with the one before.
#[derive(Debug)]
pub(crate) struct Watched {
    snapshots: PathBuf,
    tokens: PathBuf,
    /// The snapshot files as the last look that could read the directory saw them.
    files: Stamps,
    tokens_stamp: Option<FileStamp>,
    /// Whether the last look could read the directory.
    readable: bool,
}

impl Watched {
    /// The snapshot directory `snapshots`, whose files are first compared with
    /// `files` (as the generation served read them), and the tokens file at
    /// `tokens`, compared with how it is now.
    pub(crate) fn new(snapshots: &Path, tokens: &Path, files: Stamps) -> Watched {
        Watched {
            snapshots: snapshots.to_path_buf(),
            tokens: tokens.to_path_buf(),
            files,
            tokens_stamp: stamp_of(tokens),
            readable: true,
        }
    }

    /// A look at every file: what changed since the look before, as what a reload
    /// should look at. `None` when nothing did; the paths of the snapshot files
    /// added, changed or gone, which are none when only the tokens file changed
    /// (a reload reads it anyway); everything when the snapshot directory cannot
    /// be read, once (a reload says why; the next look that can read it compares
    /// with the last one that could).
    pub(crate) fn look(&mut self) -> Option<Look> {
        let mut look = None;
        match Stamps::of(&self.snapshots) {
            Ok(files) => {
                let changed = files.changed_since(&self.files);
                if !changed.is_empty() {
                    look = Some(Look::Paths(changed));
                }
                self.files = files;
                self.readable = true;
            }
            Err(error) => {
                tracing::debug!("cannot look at the snapshot directory: {error}");
                if std::mem::replace(&mut self.readable, false) {
                    look = Some(Look::Everything);
                }
            }
        }
        let tokens_stamp = stamp_of(&self.tokens);
        if tokens_stamp != self.tokens_stamp {
            self.tokens_stamp = tokens_stamp;
            look = look.or_else(|| Some(Look::Paths(BTreeSet::new())));
        }
        look
    }
}

/// The file at `path` as its metadata says, if it can be read.
fn stamp_of(path: &Path) -> Option<FileStamp> {
    std::fs::metadata(path)
        .ok()
        .map(|metadata| FileStamp::of(&metadata))
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    /// Issue 32: a file's tail digest is in a store's manifest, so it must be the same
    /// from every build: XXH3's output for these bytes, as its specification fixes it
    /// (the empty input's is the reference implementation's test vector).
    #[test]
    fn issue_32_tail_digests_are_fixed_by_their_specification() {
        let mut file = tempfile::tempfile().unwrap();
        assert_eq!(tail_digest(&file, 0).unwrap(), 0x2D06_8005_38D3_94C2);
        let mut text = b"0123456789".repeat(1000);
        text.extend_from_slice(b"the last line\n");
        file.write_all(&text).unwrap();
        let end = text.len() as u64;
        let tail = &text[text.len() - TAIL_BYTES as usize..];
        assert_eq!(
            tail_digest(&file, end).unwrap(),
            xxhash_rust::xxh3::xxh3_64(tail)
        );
    }
}
