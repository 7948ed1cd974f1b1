//! Writing the store (docs/api.md section 12) off the request path: once a
//! generation is served, it is handed to a thread of its own that writes what
//! changed since the generation it wrote last ([`StoreWriter`]). Neither readiness
//! nor a reload waits for it. Generations handed over while it writes, or while it
//! waits, replace each other: the next write is of the newest, so a floor reloading
//! several times a second costs one write at a time, never a queue.
//!
//! The writes are paced: one begins at least [`WRITE_INTERVAL`] after the one
//! before ended, so that the thread writes at most a fraction of the time however
//! long a write takes. The start's write is not delayed (nor the first after a quiet
//! spell longer than that). Correctness does not hang on it: a start is a reload
//! from the last generation written, so what a crash, or a stop, loses of the
//! generations not yet written is read again from the snapshot files (what grew
//! since, from where the store's history of each file ends). There is no write at a
//! stop: SIGTERM ends the process once the requests in flight are answered, and a
//! write under way then is left as a killed one is (the store keeps the last
//! manifest written whole). A stop waits a while ([`STOP_WAIT`]) for the write
//! under way, and for the first write when the store holds none yet, so that a stop
//! right after a first start (a package upgrade right after its install) leaves a
//! store the next start uses ([`StoreHandle::finish_within`]).
//!
//! A write that fails (a full or read-only disk) leaves the store as the last
//! whole write left it and stq serving from memory: the status turns `degraded`
//! (`/readyz` `store`) and the cause is logged once, until a write succeeds again.
//! The failed generation is written again every [`RETRY_INTERVAL`] while no newer
//! one comes, so that a disk that has room again is written without a reload; a
//! failed write leaves none of its files behind ([`StoreWriter::write`]).
//!
//! With `--store s3://`, each write of the local copy is pushed to the bucket
//! ([`mirror`]); a push that fails makes the store `degraded` too, and is tried
//! again every [`RETRY_INTERVAL`] while no generation comes, so that the status
//! turns back to `ok` once the bucket answers again.
//!
//! Only the process that holds the directory's lock writes it ([`lock`]); another
//! on the same directory asks for the lock before each write it would make, and
//! writes once it has it.

pub mod lock;
pub mod mirror;
pub(crate) mod pack;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use stq_core::data::{Catalog, ShardData, StoreWriter};

use crate::newest::Newest;
use lock::WriterLock;
use mirror::Mirror;

/// The least time from the end of one write of the store (done or failed) to the
/// start of the next. On a live floor, generations come several times a second; each write
/// costs CPU (compressing and hashing every touched station's recent layer, a
/// symbol run and the manifest, each fsynced), so writing every generation cost
/// several times the CPU of the reloads themselves. A start catches up
/// on what the store lacks by reading the files' grown tails, which at any floor's
/// rate is a few seconds of lines: cheap to read again, so little is gained by
/// writing more often.
pub const WRITE_INTERVAL: Duration = Duration::from_secs(5);

/// While a bucket could not be pushed to (or the store could not be written), how
/// long the thread waits for a new generation before it pushes again what it wrote
/// (or writes the failed generation again): a bucket back after an outage
/// is in use again within this, on a floor that appends nothing.
pub(crate) const RETRY_INTERVAL: Duration = Duration::from_secs(5);

/// The longest a stop (SIGTERM, SIGINT) waits for the store's write under way, or
/// for its first write while it holds none, before the process ends without it:
/// with the requests' drain (at most 30 s, actix's), within the Debian unit's
/// `TimeoutStopSec=60s`. A week of 1000 stations is written in about 2 s.
pub const STOP_WAIT: Duration = Duration::from_secs(25);

/// What `/readyz` says of the store, and the generation it holds whole (the admin
/// `stq_store_generation`).
#[derive(Debug, Default)]
pub struct StoreStatus {
    state: AtomicU8,
    /// The newest generation written whole where the store is (pushed too, for an
    /// `s3://` store) by this process; 0 before its first write.
    whole: AtomicU64,
    /// The newest repair ticket of a fault found while serving: only the write of
    /// a generation that mends it makes the store `ok` again.
    needs_repair: AtomicU64,
    /// Held while the state changes on what `needs_repair` says, so that a fault's
    /// `degraded` is never overwritten by a write that does not mend it.
    changing: Mutex<()>,
}

const OFF: u8 = 0;
const OK: u8 = 1;
const DEGRADED: u8 = 2;

impl StoreStatus {
    /// `off` (no `--store`), `ok` (the last write, or the start's read, worked) or
    /// `degraded` (the last write failed, or a store file failed a read while
    /// serving, until a write succeeds).
    pub fn name(&self) -> &'static str {
        match self.state.load(Ordering::Relaxed) {
            OFF => "off",
            OK => "ok",
            _ => "degraded",
        }
    }

    /// The newest generation the store holds whole: this process's last write that
    /// reached the store (its directory, and with `--store s3://` the bucket too);
    /// 0 before one has.
    pub fn generation(&self) -> u64 {
        self.whole.load(Ordering::Relaxed)
    }

    /// Marks the store `degraded`: a file of it failed a read while serving, whose
    /// repair has `ticket` ([`crate::engine::ReloadTrigger::repair_ticket`]).
    /// The first write that reaches the store of a generation that mends it makes
    /// the store `ok` again; one built before does not, though it writes whole
    /// what it writes: the damaged file may be one it keeps.
    pub fn degrade_until(&self, ticket: u64) {
        let _changing = self.changing.lock();
        self.needs_repair.fetch_max(ticket, Ordering::Relaxed);
        if self.state() != OFF {
            self.set(DEGRADED);
        }
    }

    /// A write (and push) of a generation that mends the repairs up to `repaired`
    /// reached the store: `ok`, unless a fault it does not mend is pending. Returns
    /// the state before.
    fn written(&self, repaired: u64) -> u8 {
        let _changing = self.changing.lock();
        if repaired >= self.needs_repair.load(Ordering::Relaxed) {
            self.set(OK)
        } else {
            self.state()
        }
    }

    fn set(&self, state: u8) -> u8 {
        self.state.swap(state, Ordering::Relaxed)
    }

    fn state(&self) -> u8 {
        self.state.load(Ordering::Relaxed)
    }
}

/// A generation to write: its catalog and shards, and the newest repair ticket it
/// mends ([`StoreStatus::degrade_until`]).
type Job = (Arc<Catalog>, Vec<Arc<ShardData>>, u64);

/// Hands generations to the store's writing thread; cheap to clone.
#[derive(Clone)]
pub struct StoreHandle {
    next: Arc<Newest<Job>>,
    progress: Arc<Progress>,
    status: Arc<StoreStatus>,
}

/// The generations handed to the writing thread and what became of them, for a
/// stop to wait on ([`StoreHandle::finish_within`]).
#[derive(Default)]
struct Progress {
    writes: Mutex<Writes>,
    changed: Condvar,
}

#[derive(Default)]
struct Writes {
    /// The newest generation handed over.
    handed: u64,
    /// The newest generation whose write ended (written, failed or left to another
    /// process).
    ended: u64,
    /// The generation being written (and pushed), if one is.
    writing: Option<u64>,
}

impl Progress {
    fn handed(&self, generation: u64) {
        let mut writes = self.writes.lock();
        writes.handed = writes.handed.max(generation);
    }

    fn begin(&self, generation: u64) {
        self.writes.lock().writing = Some(generation);
    }

    fn end(&self, generation: u64) {
        let mut writes = self.writes.lock();
        writes.writing = None;
        writes.ended = writes.ended.max(generation);
        self.changed.notify_all();
    }
}

/// Where a server's store is read and written, as its start found it.
pub struct StorePlace {
    /// The store's directory: an `s3://` store's local copy.
    pub directory: PathBuf,
    /// With `--store s3://`, what pulls the copy from the bucket and pushes it.
    pub mirror: Option<Mirror>,
    /// The bucket could not be read: the start uses what the copy holds.
    pub degraded: bool,
    /// The directory's lock as the start found it ([`lock`]).
    pub lock: WriterLock,
    /// With `--store s3://`: what the start reads the blocks of sealed files the
    /// copy holds only the index of through, and the fill that fetches them.
    pub remote: Option<Arc<dyn stq_core::data::Remote>>,
    pub fill: mirror::Fill,
}

impl StoreHandle {
    /// Starts the writing thread of `writer` on `place`, which pushes each write
    /// through its mirror (with `--store s3://`) and reports to `status`.
    pub fn spawn(
        writer: StoreWriter,
        place: StorePlace,
        status: Arc<StoreStatus>,
    ) -> std::io::Result<StoreHandle> {
        let next: Arc<Newest<Job>> = Arc::default();
        let progress: Arc<Progress> = Arc::default();
        status.set(if place.degraded { DEGRADED } else { OK });
        let waiting = Arc::clone(&next);
        let mut thread = Writing {
            writer,
            directory: place.directory,
            mirror: place.mirror,
            status: Arc::clone(&status),
            progress: Arc::clone(&progress),
            first: true,
            whole: false,
            written: 0,
            repaired: 0,
            lock: place.lock,
        };
        std::thread::Builder::new()
            .name("stq-store".into())
            .spawn(move || thread.write_forever(&waiting))?;
        Ok(StoreHandle {
            next,
            progress,
            status,
        })
    }

    /// Asks for the generation of `catalog` and `shards` to be written, in place of
    /// any not yet begun; `repaired` is the newest repair ticket it mends (0 for
    /// none).
    pub fn write(&self, catalog: Arc<Catalog>, shards: Vec<Arc<ShardData>>, repaired: u64) {
        self.progress.handed(catalog.generation());
        self.next.put((catalog, shards, repaired));
    }

    /// At a stop: waits, at most `limit`, for the write under way to end, and for
    /// the first write while the store holds no generation whole. A write not yet
    /// begun of a later generation is not waited for: the store holds an earlier
    /// one, and the next start reads what it lacks from the snapshot files. Logs
    /// what it waited for and how that ended.
    pub fn finish_within(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut writes = self.progress.writes.lock();
        let awaited = |writes: &Writes| {
            writes.writing.or_else(|| {
                (self.status.generation() == 0 && writes.handed > writes.ended)
                    .then_some(writes.handed)
            })
        };
        let Some(generation) = awaited(&writes) else {
            return;
        };
        tracing::info!(
            "stopping: the store's write of generation {generation} is under way; waiting up \
             to {} s for it to end",
            limit.as_secs()
        );
        while awaited(&writes).is_some() {
            if self
                .progress
                .changed
                .wait_until(&mut writes, deadline)
                .timed_out()
                && awaited(&writes).is_some()
            {
                tracing::warn!(
                    "stopping without the store's write of generation {generation}: it did \
                     not end within {} s; the next start reads what the store lacks from \
                     the snapshot files",
                    limit.as_secs()
                );
                return;
            }
        }
        tracing::info!(
            "stopping: the store's write ended; it holds generation {} whole",
            self.status.generation()
        );
    }
}

/// The store's thread: its writer, the mirror it pushes through, its status.
struct Writing {
    writer: StoreWriter,
    /// The store's directory (an `s3://` store's copy).
    directory: PathBuf,
    mirror: Option<Mirror>,
    status: Arc<StoreStatus>,
    /// What a stop waits on.
    progress: Arc<Progress>,
    first: bool,
    /// Whether the next write writes every file: this process took the store over
    /// from another, which may have deleted any since this one's start.
    whole: bool,
    /// The directory's lock, as this process last found it.
    lock: WriterLock,
    /// The generation last written to the directory, whole where the store is once
    /// pushed ([`Writing::push`]).
    written: u64,
    /// The newest repair ticket that generation mends.
    repaired: u64,
}

impl Writing {
    fn write_forever(&mut self, next: &Newest<Job>) {
        let mut last_ended: Option<Instant> = None;
        // The generation whose write failed (a full disk), written again when no
        // newer one comes: on a floor at rest, none would, and the store would stay
        // degraded once there is room. It is the one served, or is replaced within
        // a write interval, so keeping it holds little memory beyond the served one.
        let mut failed: Option<Job> = None;
        loop {
            // While the bucket is behind the copy, or a write failed, the push or
            // the write is tried again when no generation comes.
            let behind = self.mirror.is_some() || failed.is_some();
            let patience = (self.status.state() == DEGRADED && behind).then_some(RETRY_INTERVAL);
            let taken = next.take_within(last_ended, WRITE_INTERVAL, patience);
            let Some((catalog, shards, repaired)) = taken.or_else(|| failed.take()) else {
                self.push();
                last_ended = Some(Instant::now());
                continue;
            };
            failed = None;
            let generation = catalog.generation();
            if !self.may_write() {
                // Another process writes the store: this generation is not written.
                drop((catalog, shards));
                self.progress.end(generation);
                last_ended = Some(Instant::now());
                continue;
            }
            let whole = std::mem::take(&mut self.whole);
            self.progress.begin(generation);
            match self.writer.write(&catalog, &shards, whole) {
                Ok(report) => {
                    self.written = generation;
                    self.repaired = repaired;
                    let line = format!(
                        "store written: generation {generation}, {} files ({} bytes) written, \
                         {} deleted, in {} ms",
                        report.files_written,
                        report.bytes_written,
                        report.files_deleted,
                        report.elapsed.as_millis()
                    );
                    let was = self.status.state();
                    self.push();
                    let now = self.status.state();
                    if self.first || (was == DEGRADED && now == OK) {
                        tracing::info!("{line}");
                    } else {
                        tracing::debug!("{line}");
                    }
                    self.first = false;
                }
                Err(error) => {
                    if self.status.set(DEGRADED) != DEGRADED {
                        tracing::warn!(
                            "cannot write the store {}: {error}; serving from memory, the store \
                             keeps what it held (store: degraded)",
                            self.directory.display()
                        );
                    }
                    failed = Some((catalog, shards, repaired));
                    self.progress.end(generation);
                    last_ended = Some(Instant::now());
                    continue;
                }
            }
            // The generation is not kept beyond its write.
            drop((catalog, shards));
            self.progress.end(generation);
            last_ended = Some(Instant::now());
        }
    }

    /// Whether this process may write the store: it holds the directory's lock,
    /// or takes it now; or the lock cannot be made (a read-only directory, say),
    /// and the write is tried, to fail and say why.
    fn may_write(&mut self) -> bool {
        if matches!(self.lock, WriterLock::Held(_)) {
            return true;
        }
        let lock = WriterLock::take(&self.directory);
        if matches!(lock, WriterLock::Held(_)) && self.lock.is_elsewhere() {
            tracing::info!(
                "the store {}: the stq that wrote it has stopped; this one writes it from \
                 now on",
                self.directory.display()
            );
            // What the other process deleted since this one's start is not known
            // here: the first write after it writes every file.
            self.whole = true;
        }
        self.lock = lock;
        !self.lock.is_elsewhere()
    }

    /// Pushes the copy's last write to the bucket, if there is one; the status
    /// says whether the store is whole where it should be.
    fn push(&mut self) {
        if self.lock.is_elsewhere() {
            // Another process writes the copy, and pushes it.
            return;
        }
        let Some(mirror) = &mut self.mirror else {
            self.status.written(self.repaired);
            self.status.whole.store(self.written, Ordering::Relaxed);
            return;
        };
        match mirror.push() {
            Ok(pushed) => {
                let was = self.status.written(self.repaired);
                self.status.whole.store(self.written, Ordering::Relaxed);
                let pack = match pushed.pack {
                    Some((parts, bytes)) => {
                        format!(", a new pack ({parts} parts, {bytes} bytes, put)")
                    }
                    None => String::new(),
                };
                let line = format!(
                    "store pushed to {}: {} objects ({} bytes) put, {} deleted, {} damaged \
                     replaced{pack}, in {} ms",
                    mirror.location(),
                    pushed.files,
                    pushed.bytes,
                    pushed.deleted,
                    pushed.replaced,
                    pushed.elapsed.as_millis()
                );
                if was == DEGRADED || self.first || pushed.replaced > 0 || pushed.pack.is_some() {
                    tracing::info!("{line}");
                } else {
                    tracing::debug!("{line}");
                }
            }
            Err(error) => {
                if self.status.set(DEGRADED) != DEGRADED {
                    tracing::warn!(
                        "cannot push the store to {}: {error}; serving from memory and the \
                         local copy {}, pushing again every {} s (store: degraded)",
                        mirror.location(),
                        mirror.copy().display(),
                        RETRY_INTERVAL.as_secs()
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 51: a write of a generation built before a fault's repair (the damaged
    /// file may be one it keeps) leaves the store `degraded`; the write of one that
    /// mends it makes it `ok`.
    #[test]
    fn issue_51_only_a_write_that_mends_the_fault_makes_the_store_ok_again() {
        let status = StoreStatus::default();
        status.set(OK);
        status.degrade_until(2);
        assert_eq!(status.written(1), DEGRADED);
        assert_eq!(status.name(), "degraded");
        assert_eq!(status.written(2), DEGRADED);
        assert_eq!(status.name(), "ok");
        status.degrade_until(3);
        status.written(2);
        assert_eq!(status.name(), "degraded");
        status.written(7);
        assert_eq!(status.name(), "ok");
    }

    /// Without a store, a fault (none can happen) leaves `off` as it is.
    #[test]
    fn a_store_that_is_off_stays_off() {
        let status = StoreStatus::default();
        status.degrade_until(1);
        assert_eq!(status.name(), "off");
    }
}
