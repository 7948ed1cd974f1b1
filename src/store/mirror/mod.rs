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
//!   ready after fetching about a third of the store.
//! - **Push**, after each write of the copy: the files its manifest names that the
//!   bucket lacks, each one PUT, then the manifest, last. Store files are named by
//!   their hash, so two replicas putting at once put the same bytes under a name,
//!   or different names: never a torn or mixed object. Then objects named by no
//!   manifest are deleted, once older than [`push::GRACE`]: another replica may be
//!   between putting its files and its manifest.
//! - **The pack** ([`pack`]): the push also keeps what a pull of an empty copy
//!   fetches gathered in a few objects, so that a join is some ten requests
//!   rather than one a file; a pull takes from it what it holds, each file
//!   checked, and fetches the rest on its own.
//! - What the bucket holds is known from a listing (made by the first push),
//!   refreshed every
//!   [`push::RELIST_INTERVAL`] (a replica's deletions are then seen, and what they took
//!   is put again) and kept current with this process's own puts.
//!
//! A bucket that cannot be reached (after `stq-objects`' timeouts and retries)
//! leaves the start with what the copy holds and the writes to the copy going on;
//! the store is then `degraded` until a push succeeds.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use stq_core::data::NamedFile;
use stq_core::data::Remote;
use stq_objects::{Location, Objects, ObjectsError, S3Settings};

use super::pack;

mod pull;
mod push;

pub use pull::{Fill, Filled, Pulled};
pub use push::Pushed;

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

/// Objects a fill found damaged, for the mirror's next push to put again (once
/// their stations, read again, are written to the copy): shared by the two.
type Damaged = std::sync::Arc<parking_lot::Mutex<Vec<String>>>;

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

    use std::time::Duration;

    use stq_core::data::NamedFile;
    use stq_core::data::{FromStore, LoadOptions, OnInvalid};

    use super::push::GRACE;
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
            cache: stq_core::data::BlockCache::new(1 << 30),
        }
    }

    /// A store of the repository's sample snapshot written in `copy`.
    fn written_store(copy: &Path) {
        let start = options().start(Some(copy), None).unwrap();
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
        options().start(Some(copy), None).unwrap().store.unwrap()
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
            .filter(|(name, _)| name.ends_with(".stq") || name == NamedFile::MANIFEST)
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
        let start = options()
            .start(Some(&second), Some(pulling.remote()))
            .unwrap();
        assert!(matches!(
            start.store,
            Some(FromStore::Restored { repaired: 0, .. })
        ));
        let fresh = options().start(None, None).unwrap().generation;
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
        let named =
            NamedFile::read_manifest(&fs::read(copy.join(NamedFile::MANIFEST)).unwrap()).unwrap();
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
        let named =
            NamedFile::read_manifest(&fs::read(bucket.join(NamedFile::MANIFEST)).unwrap()).unwrap();
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
        again.pushed = Some(fs::read(copy.join(NamedFile::MANIFEST)).unwrap());
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
