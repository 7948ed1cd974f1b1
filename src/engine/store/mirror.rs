//! `--store s3://BUCKET/PREFIX` (docs/api.md section 12): the store is read and
//! written in a local directory exactly as `--store DIR` is (its *copy*,
//! `--store-cache`), and that directory is mirrored to the bucket, so that every
//! query and every start read local files, and the bucket is what replicas share.
//!
//! - **Pull**, at a start: the bucket's manifest, then every file it names that the
//!   copy lacks, each checked against the hash its name holds before it is written
//!   (whole: a temporary name, then a rename; one syncfs(2) for them all); the
//!   manifest last. A start against a
//!   store another replica filled then reads it instead of parsing. An object that
//!   fails its hash is not written: the start finds its station's file missing and
//!   reads that station from the snapshot files, as for a damaged local file, and
//!   the next push puts it again.
//! - Of a **sealed file** (three quarters of a store's bytes), the pull fetches its
//!   index alone, a range the manifest names with its checksum
//!   ([`NamedFile::index_file`]): the start reads the index, and
//!   queries read blocks from the bucket by range ([`BucketRemote`], each checked
//!   against its header) until the whole file is in the copy. The **fill**
//!   ([`Fill`]) fetches those files whole after the start, off the request path,
//!   each checked against its name; one that fails is not used, and its stations
//!   are read again from the snapshot files ([`Filled::damaged`]). So a replica is
//!   ready after fetching about a third of the store (issue 35).
//! - **Push**, after each write of the copy: the files its manifest names that the
//!   bucket lacks, each one PUT, then the manifest, last. Store files are named by
//!   their hash, so two replicas putting at once put the same bytes under a name,
//!   or different names: never a torn or mixed object. Then objects named by no
//!   manifest are deleted, once older than [`GRACE`]: another replica may be
//!   between putting its files and its manifest.
//! - **The pack** ([`pack`]): the push also keeps what a pull of an empty copy
//!   fetches gathered in a few objects, so that a join is some ten requests
//!   rather than one a file; a pull takes from it what it holds, each file
//!   checked, and fetches the rest on its own.
//! - What the bucket holds is known from a listing (made by the first push),
//!   refreshed every
//!   [`RELIST_INTERVAL`] (a replica's deletions are then seen, and what they took
//!   is put again) and kept current with this process's own puts.
//!
//! A bucket that cannot be reached (after `stq-objects`' timeouts and retries)
//! leaves the start with what the copy holds and the writes to the copy going on;
//! the store is then `degraded` until a push succeeds.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use stq_core::data::store::{named_files, NamedFile, MANIFEST};
use stq_core::data::Remote;
use stq_objects::{Location, Objects, ObjectsError, S3Settings};

use super::pack;

/// How long an object no manifest names stays in the bucket: longer than any
/// replica takes from putting a write's files to putting the manifest that names
/// them, so that a replica never deletes what another is about to name.
pub(crate) const GRACE: Duration = Duration::from_secs(3600);

/// How often the bucket is listed again, between pushes, to learn what other
/// replicas deleted (an object this replica's manifest names is then put again).
pub(crate) const RELIST_INTERVAL: Duration = Duration::from_secs(600);

/// Objects fetched or put at once. A request's time is mostly waiting (S3's
/// first byte comes after tens of milliseconds), so a start's thousands of objects
/// go at the pace of how many are in flight: a week of 1000 stations (3,001
/// objects, 340 MB, from s3s-fs on loopback) was fetched in 13.0 s 8 at a time, 4.2 s
/// 32 at a time and 3.5 s 64 at a time (BENCHMARKS.md).
const IN_FLIGHT: usize = 64;

/// The bytes of the objects in flight, at most (one larger object goes alone): a
/// year's sealed files are some 15 MB each, and 64 of them would hold a gigabyte.
const IN_FLIGHT_BYTES: u64 = 256 << 20;

/// The bytes of the parts a push builds at once: each is whole in memory.
const PACK_IN_FLIGHT_BYTES: u64 = 4 * pack::PART_BYTES;

/// Why a pull or a push did not finish.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// The bucket refused, or could not be reached.
    #[error(transparent)]
    Bucket(#[from] ObjectsError),
    /// The local copy could not be read or written.
    #[error("{path}: {source}")]
    Copy {
        path: String,
        source: std::io::Error,
    },
}

/// What a pull did.
#[derive(Debug, Default)]
pub struct Pulled {
    /// Whether the bucket held a manifest (a store another start wrote).
    pub manifest: bool,
    /// Files fetched into the copy (whole, or a sealed file's index), and their
    /// bytes.
    pub files: usize,
    pub bytes: u64,
    /// Of those files, how many came from the pack, and its parts fetched.
    pub packed: usize,
    pub parts: usize,
    /// Whether the pack failed to give a file it names (a part damaged or gone):
    /// the file was fetched on its own, and the next push writes a new pack.
    pub pack_damaged: bool,
    /// Objects that failed the hash their name holds, not used.
    pub damaged: Vec<String>,
    /// The sealed files the copy holds the index of alone, for the fill.
    pub fill: Fill,
}

/// The sealed files a pull fetched the index of alone, to be fetched whole into
/// the copy after the start ([`Fill::run`]).
#[derive(Debug, Default)]
pub struct Fill {
    files: Vec<NamedFile>,
    bucket: Option<Objects>,
    copy: PathBuf,
    /// Where it tells the mirror of damaged objects.
    damaged: Damaged,
}

/// Objects a fill found damaged, for the mirror's next push to put again (once
/// their stations, read again, are written to the copy): shared by the two.
type Damaged = std::sync::Arc<parking_lot::Mutex<Vec<String>>>;

/// What a fill did.
#[derive(Debug, Default)]
pub struct Filled {
    /// Files fetched whole into the copy, and their bytes.
    pub files: usize,
    pub bytes: u64,
    /// Objects that failed the hash their name holds (or were gone), and the
    /// stations whose history they held, to be read again from the snapshot files.
    pub damaged: Vec<(String, String)>,
}

/// Reads a store's files from its bucket by range: what a start from a copy that
/// holds a sealed file's index alone reads its blocks through.
#[derive(Debug)]
pub(crate) struct BucketRemote(Objects);

impl Remote for BucketRemote {
    /// On a thread of its own: a shard reads blocks on an actix worker, whose
    /// runtime `stq-objects` will not block on (its client has a runtime of its
    /// own). The worker waits all the same, as it waits for a disk: only until the
    /// fill has the file in the copy.
    fn read(&self, name: &str, range: std::ops::Range<u64>) -> std::io::Result<Vec<u8>> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| self.0.get_range(name, range))
                .join()
                .map_err(|_| std::io::Error::other("the thread reading the bucket panicked"))?
                .map_err(std::io::Error::other)
        })
    }
}

/// The suffix of a file the fill is writing: not `.tmp`, which the store's writer
/// deletes when its manifest does not name it; what a killed fill leaves, the next
/// pull deletes.
const FETCHING: &str = ".fetching";

/// What a push did.
#[derive(Debug, Default)]
pub struct Pushed {
    /// Objects put (the manifest among them), and their bytes.
    pub files: usize,
    pub bytes: u64,
    /// Objects deleted.
    pub deleted: usize,
    /// Damaged objects (found by the fill) that the bucket no longer needs: put
    /// again, or their stations' files, read again, put under other names.
    pub replaced: usize,
    /// When it wrote a new pack: the parts it put, and their bytes.
    pub pack: Option<(usize, u64)>,
    /// How long the push took.
    pub elapsed: Duration,
}

/// The bucket and the local copy that mirrors it.
pub struct Mirror {
    bucket: Objects,
    copy: PathBuf,
    /// The copy's files, written as the bucket's objects are: whole (a temporary
    /// name, fsync, rename, the directory fsynced).
    files: Objects,
    /// What the bucket is known to hold: each object's size and when it was put.
    held: HashMap<String, (u64, SystemTime)>,
    listed: Option<Instant>,
    /// The manifest pushed last: a push with nothing new puts nothing.
    pushed: Option<Vec<u8>>,
    /// What the fill found damaged since the last push.
    damaged: Damaged,
    /// The bucket's pack ([`pack`]), as read or written last (none if it has
    /// none, or none whole), once `pack_read`.
    pack: Option<pack::Table>,
    pack_read: bool,
    /// Whether a pull found the pack failing to give a file it names: the next
    /// push writes it again whole, every part put.
    pack_failed: bool,
    /// When this process wrote a pack last.
    packed_at: Option<Instant>,
}

impl Mirror {
    /// The mirror of `location` (an S3 bucket and prefix) in the directory `copy`.
    pub fn open(location: Location, copy: PathBuf) -> Result<Mirror, ObjectsError> {
        Ok(Mirror {
            bucket: Objects::open(location, &S3Settings::from_env())?,
            files: Objects::open(Location::Directory(copy.clone()), &S3Settings::default())?,
            copy,
            held: HashMap::new(),
            listed: None,
            pushed: None,
            damaged: Damaged::default(),
            pack: None,
            pack_read: false,
            pack_failed: false,
            packed_at: None,
        })
    }

    /// The bucket, for messages.
    pub fn location(&self) -> &Location {
        self.bucket.location()
    }

    /// The local copy's directory: the store the start reads and the writer writes.
    pub fn copy(&self) -> &Path {
        &self.copy
    }

    /// What reads the bucket's files by range.
    pub fn remote(&self) -> std::sync::Arc<dyn Remote> {
        std::sync::Arc::new(BucketRemote(self.bucket.clone()))
    }

    /// Makes the copy hold what the bucket's manifest names, and that manifest:
    /// sealed files as their indexes alone, for [`Pulled::fill`] to complete.
    pub fn pull(&mut self) -> Result<Pulled, MirrorError> {
        fs::create_dir_all(&self.copy).map_err(|source| self.copy_error(&self.copy, source))?;
        remove_fetching(&self.copy);
        let mut pulled = Pulled::default();
        let manifest = match self.bucket.get(MANIFEST) {
            Ok(manifest) => manifest,
            Err(error) if error.is_not_found() => return Ok(pulled),
            Err(error) => return Err(error.into()),
        };
        pulled.manifest = true;
        let files = match named_files(&manifest) {
            Ok(files) => files,
            Err(reason) => {
                // The copy keeps what it held; the next push puts a whole manifest.
                pulled.damaged.push(format!("{MANIFEST}: {reason}"));
                return Ok(pulled);
            }
        };
        let has = |name: &str, length: u64| {
            fs::metadata(self.copy.join(name)).is_ok_and(|file| file.len() == length)
        };
        // Stations share files (an empty recent layer is one file): each is
        // fetched once.
        let mut seen = std::collections::HashSet::new();
        let missing: Vec<NamedFile> = (files.into_iter())
            .filter(|file| seen.insert(file.name.clone()) && !has(&file.name, file.length))
            .collect();
        // A sealed file's index is fetched alone, unless the copy has it (the start
        // checks it against the manifest); every other file whole.
        let jobs: Vec<&NamedFile> = (missing.iter())
            .filter(|file| match (&file.index, &file.index_file) {
                (Some((_, length, _)), Some(index_file)) => !has(index_file, u64::from(*length)),
                _ => true,
            })
            .collect();
        let (fetched, pack_damaged) = self.fetch(&jobs)?;
        pulled.pack_damaged = pack_damaged;
        let partial: Vec<NamedFile> = (missing.into_iter())
            .filter(|file| file.index.is_some())
            .collect();
        for fetched in fetched {
            match fetched {
                Fetched::Written { bytes, packed } => {
                    pulled.files += 1;
                    pulled.bytes += bytes;
                    pulled.packed += usize::from(packed);
                }
                Fetched::Part => pulled.parts += 1,
                Fetched::Damaged(name) => {
                    // Not held, as far as pushes go: the next one puts it whole
                    // (its station, read again at the start, is written again).
                    self.held.remove(&name);
                    pulled.damaged.push(name);
                }
            }
        }
        // The files are on the disk before the manifest that names them: one
        // syncfs(2) for them all, where an fsync each cost a start more than the
        // fetching (BENCHMARKS.md). Were one torn all the same, the start would
        // find it failing its checksum, as any damaged file of the store.
        sync_file_system(&self.copy).map_err(|source| self.copy_error(&self.copy, source))?;
        self.files.put(MANIFEST, manifest.clone())?;
        // With an object to put again, the first push must not take the bucket for
        // whole, though its manifest may come out the same.
        if pulled.damaged.is_empty() {
            self.pushed = Some(manifest);
        }
        pulled.fill = Fill {
            files: partial,
            bucket: Some(self.bucket.clone()),
            copy: self.copy.clone(),
            damaged: std::sync::Arc::clone(&self.damaged),
        };
        Ok(pulled)
    }

    /// Puts what the copy's manifest names and the bucket lacks, then the manifest;
    /// then deletes the objects no manifest needs.
    pub fn push(&mut self) -> Result<Pushed, MirrorError> {
        let begun = Instant::now();
        let path = self.copy.join(MANIFEST);
        let manifest = fs::read(&path).map_err(|source| self.copy_error(&path, source))?;
        let mut pushed = Pushed::default();
        let stale = (self.listed).is_none_or(|listed| listed.elapsed() >= RELIST_INTERVAL);
        if stale {
            self.list()?;
            // Another replica may have written a pack since.
            self.pack_read = false;
        }
        let damaged = std::mem::take(&mut *self.damaged.lock());
        for name in &damaged {
            self.held.remove(name);
        }
        let unchanged_manifest = self.pushed.as_ref() == Some(&manifest);
        let unchanged = !stale && damaged.is_empty() && unchanged_manifest;
        // A bucket without a pack (one a replica of an older stq filled) gets one
        // though its manifest is the same.
        if unchanged && self.pack_read && self.pack.is_some() && !self.pack_failed {
            return Ok(pushed);
        }
        let named = named_files(&manifest).map_err(|reason| MirrorError::Copy {
            path: path.display().to_string(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, reason),
        })?;
        if unchanged {
            pushed.pack = self.write_pack(&named)?;
            pushed.elapsed = begun.elapsed();
            return Ok(pushed);
        }
        let files: Vec<(String, u64)> = (named.iter())
            .map(|file| (file.name.clone(), file.length))
            .collect();
        let (missing, waiting): (Vec<_>, Vec<_>) = (files.iter())
            .filter(|(name, length)| self.held.get(name).is_none_or(|held| held.0 != *length))
            .cloned()
            // A damaged object's station may not be written to the copy yet.
            .partition(|(name, _)| !damaged.contains(name) || self.copy.join(name).exists());
        // The others are put again, or their stations now have other files.
        pushed.replaced = damaged.len() - waiting.len();
        (self.damaged.lock()).extend(waiting.into_iter().map(|(name, _)| name));
        in_parallel(
            &missing,
            |(_, length)| *length,
            IN_FLIGHT_BYTES,
            |(name, _)| {
                self.bucket.put(name, self.files.get(name)?)?;
                Ok(())
            },
        )
        .inspect_err(|_| {
            // Put again at the next push.
            self.damaged.lock().extend(damaged.iter().cloned());
        })?;
        let now = SystemTime::now();
        let missing_none = missing.is_empty();
        for (name, length) in missing {
            pushed.files += 1;
            pushed.bytes += length;
            self.held.insert(name, (length, now));
        }
        // A relist alone (nothing put, the manifest the one pulled or pushed last)
        // puts no manifest: another replica may have put a newer one since.
        if !(unchanged_manifest && missing_none && damaged.is_empty()) {
            pushed.files += 1;
            pushed.bytes += manifest.len() as u64;
            self.bucket.put(MANIFEST, manifest.clone())?;
        }
        pushed.pack = self.write_pack(&named)?;
        let named: std::collections::HashSet<&str> =
            files.iter().map(|(name, _)| name.as_str()).collect();
        let packed: std::collections::HashSet<&str> = (self.pack.iter())
            .flat_map(|table| table.parts.iter().map(|(name, _)| name.as_str()))
            .collect();
        let old: Vec<String> = (self.held.iter())
            .filter(|(name, (_, put))| {
                let needed = if name.ends_with(".stq") {
                    named.contains(name.as_str())
                } else {
                    !pack::is_part(name) || packed.contains(name.as_str())
                };
                !needed && now.duration_since(*put).unwrap_or_default() >= GRACE
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in old {
            // Another replica may have deleted it first.
            match self.bucket.delete(&name) {
                Ok(()) => pushed.deleted += 1,
                Err(error) if error.is_not_found() => {}
                Err(error) => return Err(error.into()),
            }
            self.held.remove(&name);
        }
        self.pushed = Some(manifest);
        pushed.elapsed = begun.elapsed();
        Ok(pushed)
    }

    /// Fetches `files` into the copy: those the bucket's pack holds from its parts,
    /// the others (and any a part fails to give) from their own objects; and
    /// whether the pack failed to give a file it names.
    fn fetch(&mut self, files: &[&NamedFile]) -> Result<(Vec<Fetched>, bool), MirrorError> {
        if files.is_empty() {
            return Ok((Vec::new(), false));
        }
        self.read_pack()?;
        let table = self.pack.clone().unwrap_or_default();
        let lookup = table.lookup();
        let mut in_parts: HashMap<usize, Vec<(&NamedFile, &pack::Entry)>> = HashMap::new();
        let mut jobs = Vec::new();
        for &file in files {
            let (piece, length) = pack::Piece::of(file);
            match lookup.get(&(file.name.as_str(), piece)) {
                Some(&entry) if entry.length == length => {
                    in_parts.entry(entry.part).or_default().push((file, entry));
                }
                _ => jobs.push(Job::Object(file)),
            }
        }
        for (part, files) in in_parts {
            let (name, length) = &table.parts[part];
            let wanted: u64 = files.iter().map(|(_, entry)| entry.length).sum();
            // A part of files mostly in the copy already is not worth its bytes.
            if wanted * 2 >= *length {
                let length = *length;
                jobs.push(Job::Part {
                    name,
                    length,
                    files,
                });
            } else {
                jobs.extend(files.into_iter().map(|(file, _)| Job::Object(file)));
            }
        }
        let damaged = std::sync::atomic::AtomicBool::new(false);
        let done = in_parallel(&jobs, Job::bytes, IN_FLIGHT_BYTES, |job| match job {
            Job::Object(file) => Ok((vec![self.fetch_object(file)?], Vec::new())),
            Job::Part {
                name,
                length: _,
                files,
            } => self.fetch_part(name, files, &damaged),
        })?;
        let mut fetched = Vec::with_capacity(files.len());
        let mut left = Vec::new();
        for (written, unpacked) in done {
            fetched.extend(written);
            left.extend(unpacked);
        }
        let by_itself = |file: &&NamedFile| self.fetch_object(file);
        let piece_bytes = |file: &&NamedFile| pack::Piece::of(file).1;
        fetched.extend(in_parallel(&left, piece_bytes, IN_FLIGHT_BYTES, by_itself)?);
        let damaged = damaged.into_inner();
        if damaged {
            self.pack = None;
            self.pack_failed = true;
        }
        Ok((fetched, damaged))
    }

    /// Fetches `file` (of a sealed file, its index) from its own object into the
    /// copy, checked.
    fn fetch_object(&self, file: &NamedFile) -> Result<Fetched, MirrorError> {
        let (piece, _) = pack::Piece::of(file);
        let bytes = match file.index {
            None => self.bucket.get(&file.name)?,
            Some((offset, length, _)) => {
                let range = offset..offset + u64::from(length);
                self.bucket.get_range(&file.name, range)?
            }
        };
        if !pack::holds(file, piece, &bytes) {
            return Ok(Fetched::Damaged(file.name.clone()));
        }
        self.write_piece(file, piece, &bytes)?;
        Ok(Fetched::Written {
            bytes: bytes.len() as u64,
            packed: false,
        })
    }

    /// Fetches part `name` of the pack and writes `files` from it into the copy,
    /// each checked, as the part's bytes arrive (a part is never whole in memory);
    /// those it cannot give (the part damaged or gone, or a file in it failing its
    /// check) are returned, to be fetched on their own, and `damaged` set.
    fn fetch_part<'a>(
        &self,
        name: &str,
        files: &[(&'a NamedFile, &pack::Entry)],
        damaged: &std::sync::atomic::AtomicBool,
    ) -> Result<(Vec<Fetched>, Vec<&'a NamedFile>), MirrorError> {
        let mut wanted = files.to_vec();
        wanted.sort_by_key(|(_, entry)| entry.offset);
        let mut fetched = Vec::with_capacity(files.len() + 1);
        let mut left = Vec::new();
        // Where the next byte lies in the part, the next file wanted, and the
        // bytes of it so far. The part is not checked against its name: each file
        // taken from it is, on its own, which costs hashing its bytes once.
        let (mut at, mut next, mut piece) = (0, 0, Vec::new());
        let mut failed = None;
        let mut sink = |mut chunk: &[u8]| -> std::io::Result<()> {
            while let (false, Some(&(file, entry))) = (chunk.is_empty(), wanted.get(next)) {
                if at < entry.offset {
                    let skipped = chunk.len().min((entry.offset - at) as usize);
                    chunk = &chunk[skipped..];
                    at += skipped as u64;
                    continue;
                }
                let taken = chunk.len().min(entry.length as usize - piece.len());
                piece.extend_from_slice(&chunk[..taken]);
                chunk = &chunk[taken..];
                at += taken as u64;
                if piece.len() as u64 == entry.length {
                    if pack::holds(file, entry.piece, &piece) {
                        if let Err(error) = self.write_piece(file, entry.piece, &piece) {
                            failed = Some(error);
                            return Err(std::io::Error::other("the copy refused a file"));
                        }
                        fetched.push(Fetched::Written {
                            bytes: entry.length,
                            packed: true,
                        });
                    } else {
                        left.push(file);
                    }
                    piece.clear();
                    next += 1;
                }
            }
            Ok(())
        };
        match self.bucket.get_each(name, &mut sink) {
            Ok(_) => fetched.push(Fetched::Part),
            Err(error) if error.is_not_found() => {}
            Err(ObjectsError::Sink(_)) if failed.is_some() => {
                return Err(failed.expect("the sink's own error"));
            }
            Err(error) => return Err(error.into()),
        }
        // What the part did not hold whole (it is shorter than its table says).
        left.extend(wanted[next..].iter().map(|(file, _)| *file));
        if !left.is_empty() {
            damaged.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        Ok((fetched, left))
    }

    /// Writes `piece` of `file` into the copy: a whole file under its name, an
    /// index alone under its own.
    fn write_piece(
        &self,
        file: &NamedFile,
        piece: pack::Piece,
        bytes: &[u8],
    ) -> Result<(), MirrorError> {
        let name = match (piece, &file.index_file) {
            (pack::Piece::Index, Some(index_file)) => index_file,
            _ => &file.name,
        };
        let path = self.copy.join(name);
        write_unsynced(&path, bytes).map_err(|source| self.copy_error(&path, source))
    }

    /// Reads the bucket's pack's table, unless read already: a table that is not
    /// whole is as none (the next push writes one).
    fn read_pack(&mut self) -> Result<(), ObjectsError> {
        if self.pack_read {
            return Ok(());
        }
        self.pack = match self.bucket.get(pack::POINTER) {
            Ok(bytes) => pack::Table::parse(&bytes).ok(),
            Err(error) if error.is_not_found() => None,
            Err(error) => return Err(error),
        };
        self.pack_read = true;
        Ok(())
    }

    /// Writes a new pack of what a join fetches of the store whose manifest names
    /// `named`, when one is [`pack::due`] and this process wrote none in the last
    /// [`pack::INTERVAL`] (unless the bucket has none): the parts put and their
    /// bytes, if it wrote one.
    fn write_pack(&mut self, named: &[NamedFile]) -> Result<Option<(usize, u64)>, MirrorError> {
        self.read_pack()?;
        let failed = self.pack_failed;
        let recent = (self.packed_at).is_some_and(|at| at.elapsed() < pack::INTERVAL);
        // A push comes after every write of the copy: within the interval it
        // looks no further.
        if !failed && recent && self.pack.is_some() {
            return Ok(None);
        }
        let mut seen = std::collections::HashSet::new();
        let files: Vec<&NamedFile> = (named.iter())
            .filter(|file| seen.insert(file.name.as_str()))
            .collect();
        if !failed && !pack::due(self.pack.as_ref(), &files) {
            return Ok(None);
        }
        let parts = pack::plan(&files);
        let part_bytes = |part: &Vec<&NamedFile>| -> u64 {
            part.iter().map(|file| pack::Piece::of(file).1).sum()
        };
        let written = in_parallel(&parts, part_bytes, PACK_IN_FLIGHT_BYTES, |part| {
            let mut bytes = Vec::with_capacity(part_bytes(part) as usize);
            let mut entries = Vec::with_capacity(part.len());
            for &file in part {
                let (piece, _) = pack::Piece::of(file);
                // A file the copy lacks, or holds damaged, is left out: a join
                // fetches it on its own.
                let Ok(piece_bytes) = pack::read(&self.copy, file, piece) else {
                    continue;
                };
                let at = bytes.len() as u64;
                entries.push((file.name.clone(), piece, at, piece_bytes.len() as u64));
                bytes.extend_from_slice(&piece_bytes);
            }
            if entries.is_empty() {
                return Ok(None);
            }
            let name = pack::part_name(&bytes);
            let length = bytes.len() as u64;
            // A part of the same bytes as a damaged one has its name: put again.
            let put = failed || self.held.get(&name).is_none_or(|held| held.0 != length);
            if put {
                self.bucket.put(&name, bytes)?;
            }
            Ok(Some((name, length, entries, put)))
        })?;
        let mut written: Vec<_> = written.into_iter().flatten().collect();
        written.sort_by(|one, other| one.0.cmp(&other.0));
        let mut table = pack::Table::default();
        let (mut parts_put, mut bytes_put) = (0, 0);
        let now = SystemTime::now();
        for (name, length, entries, put) in written {
            let part = table.parts.len();
            for (file, piece, offset, file_length) in entries {
                table.entries.push(pack::Entry {
                    name: file,
                    piece,
                    part,
                    offset,
                    length: file_length,
                });
            }
            if put {
                parts_put += 1;
                bytes_put += length;
                self.held.insert(name.clone(), (length, now));
            }
            table.parts.push((name, length));
        }
        self.bucket.put(pack::POINTER, table.to_bytes())?;
        self.pack = Some(table);
        self.pack_failed = false;
        self.packed_at = Some(Instant::now());
        Ok(Some((parts_put, bytes_put)))
    }

    /// Learns what the bucket holds.
    fn list(&mut self) -> Result<(), ObjectsError> {
        let listed = self.bucket.list("")?;
        self.held = (listed.into_iter())
            .map(|object| (object.name, (object.size, object.modified)))
            .collect();
        self.listed = Some(Instant::now());
        Ok(())
    }

    fn copy_error(&self, path: &Path, source: std::io::Error) -> MirrorError {
        MirrorError::Copy {
            path: path.display().to_string(),
            source,
        }
    }
}

impl Fill {
    /// How many files it is to fetch.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether it has nothing to fetch.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Fetches each file whole into the copy, checked against its name, and then
    /// deletes its index alone; those it could not fetch for an error of the bucket
    /// or the copy stay in it, for the next run.
    pub fn run(&mut self) -> (Filled, Option<MirrorError>) {
        let mut filled = Filled::default();
        let Some(bucket) = self.bucket.clone() else {
            return (filled, None);
        };
        let done = std::sync::Mutex::new(Vec::new());
        let copy = &self.copy;
        let failed = in_parallel(
            &self.files,
            |file| file.length,
            IN_FLIGHT_BYTES,
            |file| {
                let name = &file.name;
                let bytes = match bucket.get(name) {
                    Ok(bytes) => Some(bytes),
                    // Another replica deleted it: its history is read again.
                    Err(error) if error.is_not_found() => None,
                    Err(error) => return Err(error.into()),
                };
                let whole = (bytes.as_ref())
                    .filter(|bytes| file.digest == Some(xxhash_rust::xxh3::xxh3_128(bytes)));
                if let Some(bytes) = whole {
                    let path = copy.join(name);
                    write_fetched(&path, bytes).map_err(|source| MirrorError::Copy {
                        path: path.display().to_string(),
                        source,
                    })?;
                    if let Some(index_file) = &file.index_file {
                        let _ = fs::remove_file(copy.join(index_file));
                    }
                }
                if whole.is_none() {
                    self.damaged.lock().push(name.clone());
                }
                done.lock()
                    .expect("a fill's worker does not panic")
                    .push((name.clone(), whole.map(|bytes| bytes.len() as u64)));
                Ok(())
            },
        )
        .err();
        let done = done.into_inner().expect("a fill's worker does not panic");
        let done: HashMap<String, Option<u64>> = done.into_iter().collect();
        let (finished, left): (Vec<NamedFile>, Vec<NamedFile>) =
            (self.files.drain(..)).partition(|file| done.contains_key(&file.name));
        self.files = left;
        for file in finished {
            match done[&file.name] {
                Some(bytes) => {
                    filled.files += 1;
                    filled.bytes += bytes;
                }
                None => filled.damaged.push((
                    file.name,
                    file.station.map(String::from).unwrap_or_default(),
                )),
            }
        }
        if filled.files > 0 {
            // The files are whole under their names already; this only makes a
            // power cut keep them.
            let _ = sync_file_system(copy);
        }
        (filled, failed)
    }
}

impl Fill {
    /// Runs the fill on a thread of its own until every file is in the copy
    /// (after an error of the bucket, again every [`super::RETRY_INTERVAL`]),
    /// logging what it did, and asking `trigger` to read again from the snapshot
    /// files the stations of the objects that fail their checksum.
    pub fn spawn(mut self, trigger: crate::engine::ReloadTrigger) -> std::io::Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let location =
            (self.bucket.as_ref()).map_or_else(String::new, |bucket| bucket.location().to_string());
        std::thread::Builder::new()
            .name("stq-store-fill".into())
            .spawn(move || {
                let begun = Instant::now();
                let mut total = Filled::default();
                loop {
                    let (filled, failed) = self.run();
                    total.files += filled.files;
                    total.bytes += filled.bytes;
                    for (name, station) in &filled.damaged {
                        tracing::warn!(
                            "the store {location}: {name} fails its checksum (or is gone) and \
                             is not used; station {station} is read again from the snapshot \
                             files, and its files in the store written again"
                        );
                    }
                    if !filled.damaged.is_empty() {
                        trigger
                            .request_repair(filled.damaged.into_iter().map(|(_, station)| station));
                    }
                    match failed {
                        None => break,
                        Some(error) => {
                            tracing::warn!(
                                "the store {location}: cannot fetch {} sealed files whole: \
                                 {error}; their blocks are read from the bucket meanwhile, and \
                                 the fetch is tried again",
                                self.len()
                            );
                            std::thread::sleep(super::RETRY_INTERVAL);
                        }
                    }
                }
                tracing::info!(
                    "the store {location}: {} sealed files ({} bytes) fetched whole into the \
                     copy in {} ms, after the start",
                    total.files,
                    total.bytes,
                    begun.elapsed().as_millis()
                );
            })
            .map(drop)
    }
}

/// Deletes what a fill killed while writing left in `copy`.
fn remove_fetching(copy: &Path) {
    let Ok(entries) = fs::read_dir(copy) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().ends_with(FETCHING) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Writes `bytes` as `path` under a name ending in [`FETCHING`], then renames it.
fn write_fetched(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(FETCHING);
    fs::write(&temporary, bytes)?;
    fs::rename(&temporary, path).inspect_err(|_| {
        let _ = fs::remove_file(&temporary);
    })
}

/// What fetching one object did.
enum Fetched {
    /// A file (or a sealed file's index) written into the copy, from a part of the
    /// pack or from its own object.
    Written { bytes: u64, packed: bool },
    /// A part of the pack fetched (each file taken from it is `Written` besides).
    Part,
    /// An object that failed the hash its name holds, not used.
    Damaged(String),
}

/// What a pull fetches in one request.
enum Job<'a> {
    /// A file's object, or of a sealed file the index's range.
    Object(&'a NamedFile),
    /// A part of the pack, for these of its files.
    Part {
        name: &'a str,
        length: u64,
        files: Vec<(&'a NamedFile, &'a pack::Entry)>,
    },
}

impl Job<'_> {
    fn bytes(&self) -> u64 {
        match self {
            Job::Object(file) => pack::Piece::of(file).1,
            Job::Part { length, .. } => *length,
        }
    }
}

/// `work` on each of `items` (objects of `bytes` each), [`IN_FLIGHT`] and at
/// most `budget` bytes at a time; the results in no order, or the first error.
fn in_parallel<T: Sync, R: Send>(
    items: &[T],
    bytes: impl Fn(&T) -> u64 + Sync,
    budget: u64,
    work: impl Fn(&T) -> Result<R, MirrorError> + Sync,
) -> Result<Vec<R>, MirrorError> {
    let budget = Budget {
        limit: budget,
        ..Budget::default()
    };
    let next = std::sync::atomic::AtomicUsize::new(0);
    // After an error, no worker begins another item.
    let failing = std::sync::atomic::AtomicBool::new(false);
    let threads = IN_FLIGHT.min(items.len());
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut results = Vec::new();
                    loop {
                        let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let item = match items.get(at) {
                            Some(item) if !failing.load(std::sync::atomic::Ordering::Relaxed) => {
                                item
                            }
                            _ => return Ok(results),
                        };
                        let weight = bytes(item);
                        budget.take(weight);
                        let worked = work(item);
                        budget.give(weight);
                        match worked {
                            Ok(result) => results.push(result),
                            Err(error) => {
                                failing.store(true, std::sync::atomic::Ordering::Relaxed);
                                return Err(error);
                            }
                        }
                    }
                })
            })
            .collect();
        let mut results = Vec::with_capacity(items.len());
        let mut failed = None;
        for worker in workers {
            match worker.join().expect("a mirror's worker does not panic") {
                Ok(done) => results.extend(done),
                Err(error) => failed = failed.or(Some(error)),
            }
        }
        match failed {
            None => Ok(results),
            Some(error) => Err(error),
        }
    })
}

/// The bytes of the objects in flight, bounded by `limit`.
#[derive(Default)]
struct Budget {
    limit: u64,
    used: parking_lot::Mutex<u64>,
    freed: parking_lot::Condvar,
}

impl Budget {
    /// Waits until `bytes` more fit, or nothing else is in flight.
    fn take(&self, bytes: u64) {
        let mut used = self.used.lock();
        while *used > 0 && *used + bytes > self.limit {
            self.freed.wait(&mut used);
        }
        *used += bytes;
    }

    fn give(&self, bytes: u64) {
        *self.used.lock() -= bytes;
        self.freed.notify_all();
    }
}

/// Writes `bytes` as `path` under a temporary name, then renames it: never a torn
/// file under its name, though not yet on the disk (see [`sync_file_system`]).
fn write_unsynced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".{}.tmp", std::process::id()));
    fs::write(&temporary, bytes)?;
    fs::rename(&temporary, path).inspect_err(|_| {
        let _ = fs::remove_file(&temporary);
    })
}

/// Flushes every file written to the file system that holds `directory`.
fn sync_file_system(directory: &Path) -> std::io::Result<()> {
    let handle = fs::File::open(directory)?;
    // SAFETY: syncfs(2) on a descriptor this function owns and keeps open.
    match unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&handle)) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use stq_core::data::load::{self, FromStore, LoadOptions, OnInvalid};

    use super::*;

    /// What a start from the store in `copy` of the repository's sample snapshot
    /// reads.
    fn options() -> LoadOptions {
        LoadOptions {
            directory: Path::new(env!("CARGO_MANIFEST_DIR")).join("snapshots"),
            shards: 2,
            on_invalid: OnInvalid::Fail,
            generation: 1,
            threads: 2,
            hot: Some(Duration::from_secs(3600)),
        }
    }

    /// A store of the repository's sample snapshot written in `copy`.
    fn written_store(copy: &Path) {
        let start = load::start(&options(), Some(copy), None).unwrap();
        let (catalog, shards) = (start.generation.catalog, start.generation.shards);
        let shards: Vec<_> = shards.into_iter().map(Arc::new).collect();
        start
            .writer
            .unwrap()
            .write(&catalog, &shards, false)
            .unwrap();
    }

    /// What a start from the store in `copy` had from it.
    fn from_store(copy: &Path) -> FromStore {
        load::start(&options(), Some(copy), None)
            .unwrap()
            .store
            .unwrap()
    }

    /// A bucket and two copies under `root`.
    fn places(root: &Path) -> (PathBuf, PathBuf, PathBuf) {
        let place = |name| root.join(name);
        (place("bucket"), place("first"), place("second"))
    }

    /// A directory stands for the bucket: `stq-objects` gives both one API.
    fn mirror(bucket: &Path, copy: &Path) -> Mirror {
        Mirror::open(
            Location::Directory(bucket.to_path_buf()),
            copy.to_path_buf(),
        )
        .unwrap()
    }

    /// Each `.stq` file and the manifest in `directory`, with its bytes.
    fn files(directory: &Path) -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<_> = (fs::read_dir(directory).unwrap())
            .map(|entry| entry.unwrap())
            .map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                (name, fs::read(entry.path()).unwrap())
            })
            .filter(|(name, _)| name.ends_with(".stq") || name == MANIFEST)
            .collect();
        files.sort();
        files
    }

    #[test]
    fn a_pushed_store_is_pulled_whole_into_another_copy() {
        let root = tempfile::tempdir().unwrap();
        let (bucket, first, second) = places(root.path());
        written_store(&first);
        let pushed = mirror(&bucket, &first).push().unwrap();
        assert_eq!(pushed.files, files(&first).len());
        // What the bucket holds is not put again: a new mirror puts the manifest,
        // one that pulled it nothing.
        assert_eq!(mirror(&bucket, &first).push().unwrap().files, 1);
        let mut again = mirror(&bucket, &first);
        again.pull().unwrap();
        assert_eq!(again.push().unwrap().files, 0);

        let mut pulled = mirror(&bucket, &second).pull().unwrap();
        assert!(pulled.manifest && pulled.damaged.is_empty());
        assert_eq!(pulled.files + 1, files(&first).len());
        // Sealed files come as their indexes, then whole from the fill.
        let sealed = (files(&first).iter())
            .filter(|(name, _)| name.starts_with("sealed-"))
            .count();
        assert!(sealed > 0);
        assert_eq!(pulled.fill.len(), sealed);
        assert_eq!(files(&second).len() + sealed, files(&first).len());
        let (filled, failed) = pulled.fill.run();
        assert!(failed.is_none() && filled.damaged.is_empty());
        assert_eq!(filled.files, sealed);
        assert_eq!(files(&second), files(&first));
        let indexes = (fs::read_dir(&second).unwrap())
            .filter(|entry| {
                let name = entry.as_ref().unwrap().file_name();
                name.to_string_lossy().ends_with(".index")
            })
            .count();
        assert_eq!(
            indexes, 0,
            "an index alone is deleted once its file is whole"
        );
    }

    /// Issue 35: a start from a copy that holds the sealed files' indexes alone
    /// restores every station from the store, none read again (its blocks' reads
    /// from the bucket are stq-core's and `tests/it/s3_store.rs`'s tests).
    #[test]
    fn issue_35_a_start_before_the_fill_restores_every_station_from_the_indexes() {
        let root = tempfile::tempdir().unwrap();
        let (bucket, first, second) = places(root.path());
        written_store(&first);
        mirror(&bucket, &first).push().unwrap();
        let mut pulling = mirror(&bucket, &second);
        let pulled = pulling.pull().unwrap();
        assert!(!pulled.fill.is_empty());
        let start = load::start(&options(), Some(&second), Some(pulling.remote())).unwrap();
        assert!(matches!(
            start.store,
            Some(FromStore::Restored { repaired: 0, .. })
        ));
        let fresh = load::start(&options(), None, None).unwrap().generation;
        let records = |generation: &stq_core::data::Generation| {
            let catalog = &generation.catalog;
            (catalog.summary.units, catalog.summary.metrics)
        };
        assert_eq!(records(&start.generation), records(&fresh));
    }

    #[test]
    fn an_empty_bucket_pulls_nothing() {
        let root = tempfile::tempdir().unwrap();
        let pulled = mirror(&root.path().join("bucket"), &root.path().join("copy"))
            .pull()
            .unwrap();
        assert!(!pulled.manifest);
        assert_eq!(pulled.files, 0);
    }

    #[test]
    fn an_object_that_fails_its_checksum_is_not_pulled_and_is_put_again() {
        let root = tempfile::tempdir().unwrap();
        let (bucket, first, second) = places(root.path());
        written_store(&first);
        mirror(&bucket, &first).push().unwrap();
        let (name, mut bytes) = (files(&bucket).into_iter())
            .find(|(name, _)| name.starts_with("sealed-"))
            .expect("a sealed file");
        // In its first block, past the magic: not in its index.
        bytes[10] ^= 1;
        fs::write(bucket.join(&name), &bytes).unwrap();

        let mut second_mirror = mirror(&bucket, &second);
        let mut pulled = second_mirror.pull().unwrap();
        // Its index is whole: the fill finds the damage.
        assert_eq!(pulled.damaged, Vec::<String>::new());
        let (filled, _) = pulled.fill.run();
        assert_eq!(filled.damaged.len(), 1);
        assert_eq!(filled.damaged[0].0, name);
        assert!(!second.join(&name).exists(), "a damaged object is not used");
        // The copy that holds it whole puts it again.
        let mut first_mirror = mirror(&bucket, &first);
        first_mirror.held.remove(&name);
        first_mirror.listed = Some(Instant::now());
        first_mirror.push().unwrap();
        assert_eq!(
            fs::read(bucket.join(&name)).unwrap(),
            fs::read(first.join(&name)).unwrap()
        );
    }

    #[test]
    fn objects_no_manifest_names_are_deleted_once_older_than_the_grace() {
        let root = tempfile::tempdir().unwrap();
        let (bucket, copy) = (root.path().join("bucket"), root.path().join("copy"));
        written_store(&copy);
        mirror(&bucket, &copy).push().unwrap();
        let (old, young) = ("sealed-old.stq", "sealed-young.stq");
        for name in [old, young] {
            fs::write(bucket.join(name), b"left by another replica").unwrap();
        }
        let long_ago = SystemTime::now() - GRACE - Duration::from_secs(60);
        fs::File::options()
            .write(true)
            .open(bucket.join(old))
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        let pushed = mirror(&bucket, &copy).push().unwrap();
        assert_eq!(pushed.deleted, 1);
        assert!(!bucket.join(old).exists());
        assert!(
            bucket.join(young).exists(),
            "another replica may be about to name it"
        );
        let named = named_files(&fs::read(copy.join(MANIFEST)).unwrap()).unwrap();
        for file in named {
            assert!(bucket.join(&file.name).exists(), "{}", file.name);
        }
    }

    /// A push cut off between its objects and its manifest leaves objects no manifest
    /// names; a pull cut off before its manifest leaves a copy with some of the
    /// objects and no manifest. The next pull completes the copy, and a start from it
    /// restores every record the store held, nothing repaired.
    #[test]
    fn a_push_or_a_pull_cut_off_between_its_writes_leaves_a_store_the_next_start_uses() {
        let root = tempfile::tempdir().unwrap();
        let (bucket, first, second) = places(root.path());
        written_store(&first);
        let FromStore::Restored { records, .. } = from_store(&first) else {
            panic!("the store is not used");
        };
        assert!(records > 0);
        mirror(&bucket, &first).push().unwrap();
        fs::write(
            bucket.join(format!("sealed-{:032x}.stq", 7)),
            b"an object of a push cut off before its manifest",
        )
        .unwrap();
        let named = named_files(&fs::read(bucket.join(MANIFEST)).unwrap()).unwrap();
        fs::create_dir_all(&second).unwrap();
        for file in named.iter().step_by(2) {
            fs::copy(bucket.join(&file.name), second.join(&file.name)).unwrap();
        }
        assert_eq!(from_store(&second), FromStore::Empty, "no manifest yet");

        let mut pulled = mirror(&bucket, &second).pull().unwrap();
        assert_eq!(pulled.files, named.len() / 2);
        let (filled, failed) = pulled.fill.run();
        assert!(failed.is_none() && filled.damaged.is_empty());
        assert_eq!(
            from_store(&second),
            FromStore::Restored {
                records,
                repaired: 0
            }
        );
    }

    /// The bucket's pack parts, by name.
    fn parts(bucket: &Path) -> Vec<String> {
        let mut parts: Vec<String> = (fs::read_dir(bucket).unwrap())
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| pack::is_part(name))
            .collect();
        parts.sort();
        parts
    }

    /// Issue 35: the first push writes a pack of what a join fetches; a pull of an
    /// empty copy takes every file from it, and the copy is the same as one
    /// fetched file by file.
    #[test]
    fn issue_35_a_join_takes_every_file_from_the_pack() {
        let root = tempfile::tempdir().unwrap();
        let (bucket, first, second) = places(root.path());
        written_store(&first);
        let pushed = mirror(&bucket, &first).push().unwrap();
        let (parts_put, _) = pushed.pack.expect("the first push writes a pack");
        assert_eq!(parts_put, parts(&bucket).len());
        assert!(parts_put > 0);

        let pulled = mirror(&bucket, &second).pull().unwrap();
        assert!(pulled.files > 0 && !pulled.pack_damaged);
        assert_eq!(pulled.packed, pulled.files, "every file from the pack");
        assert_eq!(pulled.parts, parts_put);

        // Without the pack, file by file: the same copy.
        let third = root.path().join("third");
        fs::remove_file(bucket.join(pack::POINTER)).unwrap();
        let unpacked = mirror(&bucket, &third).pull().unwrap();
        assert_eq!((unpacked.files, unpacked.packed), (pulled.files, 0));
        let every_file = |directory: &Path| {
            let mut files: Vec<(String, Vec<u8>)> = (fs::read_dir(directory).unwrap())
                .map(|entry| entry.unwrap())
                .map(|entry| {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    (name, fs::read(entry.path()).unwrap())
                })
                .collect();
            files.sort();
            files
        };
        assert_eq!(every_file(&second), every_file(&third));
    }

    /// Issue 35: a pack part damaged or gone costs requests, never a file: the pull
    /// fetches what it cannot give on its own, says so, and the next push writes a
    /// whole pack again.
    #[test]
    fn issue_35_a_damaged_or_lost_pack_part_is_fetched_around_and_written_again() {
        let root = tempfile::tempdir().unwrap();
        let (bucket, first, _) = places(root.path());
        written_store(&first);
        mirror(&bucket, &first).push().unwrap();
        let whole = mirror(&bucket, &root.path().join("whole")).pull().unwrap();
        let part = parts(&bucket)[0].clone();
        let mut bytes = fs::read(bucket.join(&part)).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 1;
        fs::write(bucket.join(&part), &bytes).unwrap();

        let damaged_copy = root.path().join("damaged");
        let mut pulling = mirror(&bucket, &damaged_copy);
        let pulled = pulling.pull().unwrap();
        assert!(pulled.pack_damaged);
        assert!(
            pulled.damaged.is_empty(),
            "the store's own objects are whole"
        );
        assert_eq!(pulled.files, whole.files);
        assert!(pulled.packed < pulled.files);
        let mut pulled = pulled;
        pulled.fill.run();
        assert_eq!(files(&damaged_copy), files(&first));
        // The replica that found it writes a new pack at its next push.
        let pushed = pulling.push().unwrap();
        assert!(pushed.pack.is_some());
        let lost = root.path().join("lost");
        for part in parts(&bucket) {
            fs::remove_file(bucket.join(part)).unwrap();
        }
        let pulled = mirror(&bucket, &lost).pull().unwrap();
        assert!(pulled.pack_damaged);
        assert_eq!((pulled.files, pulled.packed), (whole.files, 0));

        // A table that is not whole is as none: the next push writes one.
        let table = bucket.join(pack::POINTER);
        let mut bytes = fs::read(&table).unwrap();
        bytes.truncate(bytes.len() / 2);
        fs::write(&table, &bytes).unwrap();
        let fresh = mirror(&bucket, &root.path().join("fresh")).pull().unwrap();
        assert_eq!((fresh.files, fresh.packed), (whole.files, 0));
        assert!(mirror(&bucket, &first).push().unwrap().pack.is_some());
        let packed = mirror(&bucket, &root.path().join("packed")).pull().unwrap();
        assert_eq!(packed.packed, whole.files);
    }

    /// Issue 35: a pack is not written again while most of what a join fetches is
    /// in it, and parts no table names are deleted once older than the grace.
    #[test]
    fn issue_35_a_pack_is_kept_while_current_and_old_parts_are_deleted() {
        let root = tempfile::tempdir().unwrap();
        let (bucket, copy) = (root.path().join("bucket"), root.path().join("copy"));
        written_store(&copy);
        let mut pushing = mirror(&bucket, &copy);
        assert!(pushing.push().unwrap().pack.is_some());
        let current = parts(&bucket);
        // A new mirror reads the table and finds it current.
        let mut again = mirror(&bucket, &copy);
        again.listed = Some(Instant::now());
        again.pushed = Some(fs::read(copy.join(MANIFEST)).unwrap());
        assert_eq!(again.push().unwrap().pack, None);

        let old = format!("pack-{:032x}.pack", 7);
        let young = format!("pack-{:032x}.pack", 8);
        for name in [&old, &young] {
            fs::write(bucket.join(name), b"a part of an older pack").unwrap();
        }
        let long_ago = SystemTime::now() - GRACE - Duration::from_secs(60);
        for name in current.iter().chain([&old]) {
            (fs::File::options()
                .write(true)
                .open(bucket.join(name))
                .unwrap())
            .set_modified(long_ago)
            .unwrap();
        }
        let pushed = mirror(&bucket, &copy).push().unwrap();
        assert_eq!(pushed.deleted, 1);
        let mut kept = current.clone();
        kept.push(young);
        kept.sort();
        assert_eq!(
            parts(&bucket),
            kept,
            "the table's parts and the young one stay"
        );
    }
}
