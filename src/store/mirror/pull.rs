//! The pull: a start's copy made to hold what the bucket's manifest names (sealed
//! files as their indexes alone, from the pack where it can), and the fill that
//! fetches those sealed files whole after the start.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use stq_core::data::NamedFile;
use stq_objects::{Objects, ObjectsError};

use super::IN_FLIGHT_BYTES;
use super::{in_parallel, sync_file_system, write_unsynced, Damaged, Job, Mirror, MirrorError};
use crate::store::pack;

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

/// The suffix of a file the fill is writing: not `.tmp`, which the store's writer
/// deletes when its manifest does not name it; what a killed fill leaves, the next
/// pull deletes.
const FETCHING: &str = ".fetching";

impl Mirror {
    /// Makes the copy hold what the bucket's manifest names, and that manifest:
    /// sealed files as their indexes alone, for [`Pulled::fill`] to complete.
    pub fn pull(&mut self) -> Result<Pulled, MirrorError> {
        fs::create_dir_all(&self.copy).map_err(|source| self.copy_error(&self.copy, source))?;
        remove_fetching(&self.copy);
        let mut pulled = Pulled::default();
        let manifest = match self.bucket.get(NamedFile::MANIFEST) {
            Ok(manifest) => manifest,
            Err(error) if error.is_not_found() => return Ok(pulled),
            Err(error) => return Err(error.into()),
        };
        pulled.manifest = true;
        let files = match NamedFile::read_manifest(&manifest) {
            Ok(files) => files,
            Err(reason) => {
                // The copy keeps what it held; the next push puts a whole manifest.
                pulled
                    .damaged
                    .push(format!("{}: {reason}", NamedFile::MANIFEST));
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
        self.files.put(NamedFile::MANIFEST, manifest.clone())?;
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
    /// (after an error of the bucket, again every [`crate::store::RETRY_INTERVAL`]),
    /// logging what it did, and handing `repair` the stations of the objects
    /// that fail their checksum, to be read again from the snapshot files (the
    /// engine's reload trigger: the store stands below the engine and names none of
    /// it).
    pub fn spawn(mut self, repair: impl Fn(Vec<String>) + Send + 'static) -> std::io::Result<()> {
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
                        repair(
                            filled
                                .damaged
                                .into_iter()
                                .map(|(_, station)| station)
                                .collect(),
                        );
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
                            std::thread::sleep(crate::store::RETRY_INTERVAL);
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
