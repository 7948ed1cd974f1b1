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

use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use super::format::{self, Format};
use super::{LoadError, Look};
use crate::data::sources::{FileStamp, Resume, Stamps};

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

/// Spreads a first load's files evenly over the lower half of the ordinals.
pub(crate) fn spread_ordinals(files: &mut [SnapshotFile]) {
    let gap = (FRESH_ORDINALS / (files.len() as u64 + 1)).max(1);
    for (index, file) in files.iter_mut().enumerate() {
        file.ordinal = ((index as u64 + 1) * gap).min(u64::from(u32::MAX)) as u32;
    }
}

/// A look at every snapshot file below `directory`. A file gone between being
/// found and being looked at is left out, as a look a moment later would.
pub(crate) fn stamps(directory: &Path) -> Result<Stamps, LoadError> {
    let stamps = (discover(directory)?.into_iter())
        .filter_map(|file| {
            let metadata = std::fs::metadata(&file.path).ok()?;
            Some((file.relative, FileStamp::of(&metadata)))
        })
        .collect();
    Ok(Stamps::new(stamps))
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
        match stamps(&self.snapshots) {
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
