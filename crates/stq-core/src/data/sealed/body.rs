//! Where a sealed block's bytes are: in memory, as sealing made them, or
//! in a store file, read when a query needs them. A block is sealed in memory; once
//! the store has written its station's sealed tier, the block points at that file
//! and its bytes leave the heap; a start from the store makes every block so, and
//! its headers (counts, filters and checksums) are rows of the mapped file
//! ([`super::headers`]). So memory holds the decoded blocks of the cache, and
//! the headers of blocks sealed since the store last wrote their tier, not
//! history.
//!
//! Each part of a block (its two frames and its two digests) has the XXH3-64 of
//! its bytes in the block's header, checked on every read from a file: a store file
//! is checked whole when a start reads it, and this catches what changed it since.
//! A part that fails its check, or cannot be read, is a [`StorageFault`] its read
//! returns, so its request is answered `storage_unavailable` and the station
//! read again from the snapshot files, rather than answered from damaged bytes.
//!
//! Two parts of a tier's index move the same way ([`IndexPart`]), its shared pieces
//! and its outputs' serial list: from memory to their region of the store file's
//! index, read (and checked) into the cache when a block of the tier is decoded,
//! the tier is sealed into, or a summary pairs attempts across its blocks.

use std::fs::File;
use std::ops::{Deref, Range};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use xxhash_rust::xxh3::xxh3_64;

use crate::data::fault::StorageFault;
use crate::data::mapped::Mapped;
use crate::data::sealed::Remote;

/// Reads of block parts from store files since the process started, and their bytes.
static READS: AtomicU64 = AtomicU64::new(0);
static READ_BYTES: AtomicU64 = AtomicU64::new(0);

/// The number a block's body is known by in the cache, or a sealed tier's blocks
/// together ([`fresh_id`]): no two share one.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A number no body and no other sealed tier is known by.
pub(crate) fn fresh_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// The first of `count` numbers in a row that no body and no other sealed tier is
/// known by.
pub(crate) fn fresh_ids(count: u64) -> u64 {
    NEXT_ID.fetch_add(count, Ordering::Relaxed)
}

/// Store files read from a remote still: while there are none (always, but for an
/// `s3://` store's replica in the seconds after it joins), a query asks nothing
/// ahead and pays nothing for it.
static REMOTE_FILES: AtomicU64 = AtomicU64::new(0);

/// Whether any store file is read from a remote still.
pub(crate) fn any_remote() -> bool {
    REMOTE_FILES.load(Ordering::Relaxed) > 0
}

/// How many reads of block parts the store has served, and their bytes.
pub(crate) fn store_reads() -> (u64, u64) {
    (
        READS.load(Ordering::Relaxed),
        READ_BYTES.load(Ordering::Relaxed),
    )
}

/// A store file that blocks are read from, open for as long as a block points at
/// it: a file the store deletes once no manifest names it is still read through
/// this handle by the generations that hold its blocks.
#[derive(Debug)]
pub(crate) struct StoreFile {
    path: PathBuf,
    source: RwLock<Source>,
    /// Of a remote file: what was fetched ahead ([`prefetch`]).
    ahead: parking_lot::Mutex<Ahead>,
}

/// The ranges of a remote file fetched ahead of the reads that need them, and
/// which were asked for: each range once, so that a query answered from the cache
/// asks for nothing.
#[derive(Debug, Default)]
struct Ahead {
    asked: std::collections::HashSet<u64>,
    fetched: Vec<(u64, Arc<[u8]>)>,
    bytes: usize,
}

/// The bytes fetched ahead that one remote file keeps at most: past them, what it
/// kept is dropped (read again by range when needed).
const AHEAD_BYTES: usize = 16 << 20;

/// How many ranges [`prefetch`] fetches at once: a request's time is mostly
/// waiting for the bucket's first byte, as for the pull (`IN_FLIGHT` there).
const AHEAD_IN_FLIGHT: usize = 64;

/// The bytes one [`prefetch`] fetches at most: a query over months on a replica
/// that has just joined leaves the rest to its reads (and to the fill).
const AHEAD_PER_QUERY: u64 = 64 << 20;

#[derive(Debug)]
enum Source {
    Local(File),
    /// Not in the directory yet: read from `remote` until a file appears at
    /// `path` (written whole, so whole once it is there).
    Remote(Arc<dyn Remote>),
}

impl StoreFile {
    pub(crate) fn open(path: &Path) -> std::io::Result<Arc<StoreFile>> {
        Ok(Arc::new(StoreFile {
            path: path.to_path_buf(),
            source: RwLock::new(Source::Local(File::open(path)?)),
            ahead: parking_lot::Mutex::default(),
        }))
    }

    /// The file at `path`, read from `remote` until it is in its directory.
    pub(crate) fn remote(path: &Path, remote: Arc<dyn Remote>) -> Arc<StoreFile> {
        REMOTE_FILES.fetch_add(1, Ordering::Relaxed);
        Arc::new(StoreFile {
            path: path.to_path_buf(),
            source: RwLock::new(Source::Remote(remote)),
            ahead: parking_lot::Mutex::default(),
        })
    }

    /// The file mapped and guarded ([`Mapped`]), if it is in the store's directory.
    pub(crate) fn map(&self) -> std::io::Result<Mapped> {
        let Source::Local(file) = &*self.source.read() else {
            return Err(std::io::Error::other(
                "the file is not in the store's directory",
            ));
        };
        Mapped::new(file)
    }

    /// Where it is in the store's directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The whole file.
    pub(crate) fn read_all(&self) -> std::io::Result<Vec<u8>> {
        let Source::Local(file) = &*self.source.read() else {
            return Err(std::io::Error::other(
                "the file is not in the store's directory",
            ));
        };
        let mut bytes = vec![0; file.metadata()?.len() as usize];
        file.read_exact_at(&mut bytes, 0)?;
        Ok(bytes)
    }

    /// `length` bytes at `offset`. A file the store wrote and checked holds them;
    /// one that fails here was changed or cut since (or its remote cannot be
    /// reached), and the read is a [`StorageFault`] (see the module's doc).
    fn read(&self, offset: u64, length: usize) -> Result<Vec<u8>, StorageFault> {
        let bytes = self.fetch(offset, length).map_err(|error| {
            StorageFault::at(&self.path, format!("cannot be read at {offset}: {error}"))
        })?;
        READS.fetch_add(1, Ordering::Relaxed);
        READ_BYTES.fetch_add(length as u64, Ordering::Relaxed);
        Ok(bytes)
    }

    fn fetch(&self, offset: u64, length: usize) -> std::io::Result<Vec<u8>> {
        let remote = match &*self.source.read() {
            Source::Local(file) => return read_at(file, offset, length),
            Source::Remote(remote) => Arc::clone(remote),
        };
        // Once the file has arrived in the directory, it is read from there.
        if let Some(file) = self.arrived() {
            return read_at(&file, offset, length);
        }
        let end = offset + length as u64;
        let ahead = (self.ahead.lock().fetched.iter())
            .find(|(start, bytes)| *start <= offset && end <= start + bytes.len() as u64)
            .map(|(start, bytes)| {
                bytes[(offset - start) as usize..(end - start) as usize].to_vec()
            });
        if let Some(bytes) = ahead {
            return Ok(bytes);
        }
        let bytes = remote.read(&self.name(), offset..end)?;
        match bytes.len() == length {
            true => Ok(bytes),
            false => Err(std::io::Error::other(format!(
                "{} bytes from its remote, not {length}",
                bytes.len()
            ))),
        }
    }
}

impl StoreFile {
    /// The file in the directory, if a remote one has arrived there: from then on
    /// it is read from there, and what was fetched ahead is dropped.
    fn arrived(&self) -> Option<File> {
        let file = File::open(&self.path).ok()?;
        let local = Source::Local(file.try_clone().ok()?);
        if matches!(
            std::mem::replace(&mut *self.source.write(), local),
            Source::Remote(_)
        ) {
            REMOTE_FILES.fetch_sub(1, Ordering::Relaxed);
        }
        *self.ahead.lock() = Ahead::default();
        Some(file)
    }

    fn name(&self) -> String {
        (self.path.file_name()).map_or_else(String::new, |name| name.to_string_lossy().into_owned())
    }

    /// Whether `range` is to be fetched ahead: the file is remote still, and the
    /// range was not asked for before.
    fn asks_ahead(&self, range: &Range<u64>) -> bool {
        if !matches!(*self.source.read(), Source::Remote(_)) || self.arrived().is_some() {
            return false;
        }
        !self.ahead.lock().asked.contains(&range.start)
    }

    /// Keeps `bytes`, fetched ahead from `start`.
    fn keep_ahead(&self, start: u64, bytes: Vec<u8>) {
        let mut ahead = self.ahead.lock();
        if ahead.bytes + bytes.len() > AHEAD_BYTES {
            ahead.fetched.clear();
            ahead.bytes = 0;
        }
        ahead.bytes += bytes.len();
        ahead.fetched.push((start, Arc::from(bytes)));
    }
}

/// Fetches `reads` (ranges of remote files) at once, [`AHEAD_IN_FLIGHT`] at a
/// time, for the reads about to need them: a query over many stations
/// on a replica whose copy does not hold their sealed files yet would otherwise
/// wait on one request to the bucket after another (1000 stations' quarter of an
/// hour from s3s-fs: 37 s, past the request's time limit; 3.9 s 32 at a time:
/// BENCHMARKS.md). A range that fails is left to the read that needs it.
pub(crate) fn prefetch(mut reads: Vec<(Arc<StoreFile>, Range<u64>)>) {
    if reads.len() < 2 {
        return;
    }
    let mut budget = AHEAD_PER_QUERY;
    reads.retain(|(file, range)| {
        let length = range.end - range.start;
        let kept = length <= budget && file.ahead.lock().asked.insert(range.start);
        budget = budget.saturating_sub(length);
        kept
    });
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..AHEAD_IN_FLIGHT.min(reads.len()) {
            scope.spawn(|| {
                while let Some((file, range)) = reads.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let remote = match &*file.source.read() {
                        Source::Remote(remote) => Arc::clone(remote),
                        Source::Local(_) => continue,
                    };
                    if let Ok(bytes) = remote.read(&file.name(), range.clone()) {
                        if bytes.len() as u64 == range.end - range.start {
                            file.keep_ahead(range.start, bytes);
                        }
                    }
                }
            });
        }
    });
}

impl Drop for StoreFile {
    fn drop(&mut self) {
        if matches!(*self.source.get_mut(), Source::Remote(_)) {
            REMOTE_FILES.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

fn read_at(file: &File, offset: u64, length: usize) -> std::io::Result<Vec<u8>> {
    let mut bytes = vec![0; length];
    file.read_exact_at(&mut bytes, offset)?;
    Ok(bytes)
}

/// A block's bytes, or a part of them, shared.
#[derive(Clone, Debug)]
pub(crate) struct Slice {
    bytes: Arc<[u8]>,
    range: Range<usize>,
}

impl Deref for Slice {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes[self.range.clone()]
    }
}

impl Slice {
    /// The bytes it holds on the heap (what a cache entry of it weighs).
    pub(crate) fn heap_bytes(&self) -> u64 {
        self.bytes.len() as u64
    }
}

#[derive(Debug)]
enum Place {
    Resident(Arc<[u8]>),
    Stored { file: Arc<StoreFile>, offset: u64 },
}

/// Where one block's bytes are. Shared by every tier that holds the block.
#[derive(Debug)]
pub(crate) struct Body {
    id: u64,
    place: RwLock<Place>,
}

impl Body {
    /// A body held in memory.
    pub(crate) fn resident(bytes: Vec<u8>) -> Arc<Body> {
        Body::new(Place::Resident(Arc::from(bytes)))
    }

    /// A body at `offset` in `file`.
    pub(crate) fn stored(file: Arc<StoreFile>, offset: u64) -> Arc<Body> {
        Body::new(Place::Stored { file, offset })
    }

    fn new(place: Place) -> Arc<Body> {
        Arc::new(Body {
            id: fresh_id(),
            place: RwLock::new(place),
        })
    }

    /// What names it in the cache.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Whether its bytes are in memory.
    pub(crate) fn is_resident(&self) -> bool {
        matches!(*self.place.read(), Place::Resident(_))
    }

    /// Its bytes in `range`, which hash to `check`.
    pub(crate) fn read(&self, range: Range<u32>, check: u64) -> Result<Slice, StorageFault> {
        let range = range.start as usize..range.end as usize;
        let (file, offset) = match &*self.place.read() {
            Place::Resident(bytes) => {
                return Ok(Slice {
                    bytes: Arc::clone(bytes),
                    range,
                })
            }
            Place::Stored { file, offset } => (Arc::clone(file), *offset),
        };
        read_stored(&file, offset, range, check)
    }

    /// Adds its first `length` bytes to `reads` if they are in a remote file and
    /// were not asked for before ([`prefetch`]).
    pub(crate) fn ask_ahead(&self, length: u32, reads: &mut Vec<(Arc<StoreFile>, Range<u64>)>) {
        if let Place::Stored { file, offset } = &*self.place.read() {
            ask_ahead(file, *offset, length, reads);
        }
    }

    /// Points it at `offset` in `file`, which holds the same bytes: its bytes leave
    /// memory once no reader holds them.
    pub(crate) fn store_at(&self, file: Arc<StoreFile>, offset: u64) {
        *self.place.write() = Place::Stored { file, offset };
    }
}

/// Adds `length` bytes at `offset` in `file` to `reads` if the file is remote and
/// they were not asked for before ([`prefetch`]).
fn ask_ahead(
    file: &Arc<StoreFile>,
    offset: u64,
    length: u32,
    reads: &mut Vec<(Arc<StoreFile>, Range<u64>)>,
) {
    let range = offset..offset + u64::from(length);
    if file.asks_ahead(&range) {
        reads.push((Arc::clone(file), range));
    }
}

/// `range` of the bytes at `offset` in `file`, which hash to `check`.
fn read_stored(
    file: &StoreFile,
    offset: u64,
    range: Range<usize>,
    check: u64,
) -> Result<Slice, StorageFault> {
    let bytes = file.read(offset + range.start as u64, range.len())?;
    if xxh3_64(&bytes) != check {
        return Err(StorageFault::at(
            &file.path,
            format!(
                "is damaged: a block's part at {} fails its checksum",
                offset + range.start as u64
            ),
        ));
    }
    Ok(Slice {
        range: 0..bytes.len(),
        bytes: Arc::from(bytes),
    })
}

/// Where a block's bytes are, as its header says: a [`Body`] that every tier
/// holding the block shares (a block sealed in memory, perhaps pointed at a store
/// file since), or a place in a store file whose index rows are mapped
/// ([`super::headers`]), known in the cache by the number its row was given.
#[derive(Clone, Debug)]
pub(crate) enum BlockBody {
    /// Its body, and the body's number beside it: a query finds a block in the
    /// cache by that number, and reading it through the pointer would be one more
    /// miss of the CPU's cache a block.
    Shared { body: Arc<Body>, id: u64 },
    Mapped {
        file: Arc<StoreFile>,
        offset: u64,
        id: u64,
    },
}

impl BlockBody {
    /// `body`, shared.
    pub(crate) fn shared(body: Arc<Body>) -> BlockBody {
        BlockBody::Shared {
            id: body.id(),
            body,
        }
    }

    /// What names it in the cache.
    pub(crate) fn id(&self) -> u64 {
        match self {
            BlockBody::Shared { id, .. } => *id,
            BlockBody::Mapped { id, .. } => *id,
        }
    }

    /// Whether its bytes are in memory.
    pub(crate) fn is_resident(&self) -> bool {
        match self {
            BlockBody::Shared { body, .. } => body.is_resident(),
            BlockBody::Mapped { .. } => false,
        }
    }

    /// Its bytes in `range`, which hash to `check`.
    pub(crate) fn read(&self, range: Range<u32>, check: u64) -> Result<Slice, StorageFault> {
        match self {
            BlockBody::Shared { body, .. } => body.read(range, check),
            BlockBody::Mapped { file, offset, .. } => read_stored(
                file,
                *offset,
                range.start as usize..range.end as usize,
                check,
            ),
        }
    }

    /// Adds its first `length` bytes to `reads` if they are in a remote file and
    /// were not asked for before ([`prefetch`]).
    pub(crate) fn ask_ahead(&self, length: u32, reads: &mut Vec<(Arc<StoreFile>, Range<u64>)>) {
        match self {
            BlockBody::Shared { body, .. } => body.ask_ahead(length, reads),
            BlockBody::Mapped { file, offset, .. } => ask_ahead(file, *offset, length, reads),
        }
    }
}

/// Where a part of a tier's index is (its shared pieces, its serial list): in
/// memory, as sealing made it, or a region of its store file (a [`Body`] of
/// `length` bytes that hash to `check`).
#[derive(Debug)]
pub(crate) struct IndexPart<T> {
    place: RwLock<IndexPlace<T>>,
}

#[derive(Debug)]
enum IndexPlace<T> {
    Resident(Arc<T>),
    Stored {
        body: Arc<Body>,
        length: u32,
        check: u64,
    },
}

/// Where a part of a tier's index is, as [`IndexPart::place`] says.
pub(crate) enum IndexPartAt<T> {
    /// In memory.
    Resident(Arc<T>),
    /// In a store file: the region's body, its length and its checksum.
    Stored(Arc<Body>, u32, u64),
}

impl<T: Default> Default for IndexPart<T> {
    /// An empty part, in memory.
    fn default() -> IndexPart<T> {
        IndexPart {
            place: RwLock::new(IndexPlace::Resident(Arc::default())),
        }
    }
}

impl<T> IndexPart<T> {
    /// A part held in memory.
    pub(crate) fn resident(pieces: Arc<T>) -> Arc<IndexPart<T>> {
        Arc::new(IndexPart {
            place: RwLock::new(IndexPlace::Resident(pieces)),
        })
    }

    /// A part at `offset` in `file`, `length` bytes that hash to `check`.
    pub(crate) fn stored(
        file: Arc<StoreFile>,
        offset: u64,
        length: u32,
        check: u64,
    ) -> Arc<IndexPart<T>> {
        Arc::new(IndexPart {
            place: RwLock::new(IndexPlace::Stored {
                body: Body::stored(file, offset),
                length,
                check,
            }),
        })
    }

    /// Where it is now.
    pub(crate) fn place(&self) -> IndexPartAt<T> {
        match &*self.place.read() {
            IndexPlace::Resident(pieces) => IndexPartAt::Resident(Arc::clone(pieces)),
            IndexPlace::Stored {
                body,
                length,
                check,
            } => IndexPartAt::Stored(Arc::clone(body), *length, *check),
        }
    }

    /// Points it at `offset` in `file`, which holds it as `length` bytes that hash
    /// to `check`: it leaves memory once no reader holds it.
    pub(crate) fn store_at(&self, file: Arc<StoreFile>, offset: u64, length: u32, check: u64) {
        *self.place.write() = IndexPlace::Stored {
            body: Body::stored(file, offset),
            length,
            check,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 32: a stored body reads what a resident one holds; a byte changed in
    /// its file since is caught by the part's checksum.
    #[test]
    fn issue_32_a_stored_body_reads_its_bytes_and_catches_a_changed_byte() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("sealed.stq");
        let bytes: Vec<u8> = (0..200u8).collect();
        let mut file = b"head".to_vec();
        file.extend_from_slice(&bytes);
        std::fs::write(&path, &file).unwrap();
        let check = xxh3_64(&bytes[10..50]);
        let resident = Body::resident(bytes.clone());
        let stored = Body::stored(StoreFile::open(&path).unwrap(), 4);
        assert_ne!(resident.id(), stored.id());
        assert_eq!(&*resident.read(10..50, check).unwrap(), &bytes[10..50]);
        let before = store_reads();
        assert_eq!(&*stored.read(10..50, check).unwrap(), &bytes[10..50]);
        assert!(store_reads().0 > before.0);
        assert!(!stored.is_resident());
        resident.store_at(StoreFile::open(&path).unwrap(), 4);
        assert!(!resident.is_resident());
        assert_eq!(&*resident.read(10..50, check).unwrap(), &bytes[10..50]);
        file[4 + 20] ^= 1;
        std::fs::write(&path, &file).unwrap();
        let fault = stored.read(10..50, check).unwrap_err();
        assert!(fault.reason.contains("fails its checksum"), "{fault}");
    }
}
