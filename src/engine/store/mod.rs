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
//! manifest written whole).
//!
//! A write that fails (a full or read-only disk) leaves the store as the last
//! whole write left it and stq serving from memory: the status turns `degraded`
//! (`/readyz` `store`) and the cause is logged once, until a write succeeds again.
//!
//! With `--store s3://`, each write of the local copy is pushed to the bucket
//! ([`mirror`]); a push that fails makes the store `degraded` too, and is tried
//! again every [`RETRY_INTERVAL`] while no generation comes, so that the status
//! turns back to `ok` once the bucket answers again.

pub(crate) mod mirror;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stq_core::data::catalog::Catalog;
use stq_core::data::shard::ShardData;
use stq_core::data::store::StoreWriter;

use crate::newest::Newest;
use mirror::Mirror;

/// The least time from the end of one write of the store (done or failed) to the
/// start of the next. On a live floor, generations come several times a second; each write
/// costs CPU (compressing and hashing every touched station's recent layer, a
/// symbol run and the manifest, each fsynced), so writing every generation cost
/// several times the CPU of the reloads themselves (issue 32). A start catches up
/// on what the store lacks by reading the files' grown tails, which at any floor's
/// rate is a few seconds of lines: cheap to read again, so little is gained by
/// writing more often.
pub const WRITE_INTERVAL: Duration = Duration::from_secs(5);

/// While a bucket could not be pushed to, how long the thread waits for a new
/// generation before it pushes again what it wrote: a bucket back after an outage
/// is in use again within this, on a floor that appends nothing.
pub(crate) const RETRY_INTERVAL: Duration = Duration::from_secs(5);

/// What `/readyz` says of the store.
#[derive(Debug, Default)]
pub struct StoreStatus(AtomicU8);

const OFF: u8 = 0;
const OK: u8 = 1;
const DEGRADED: u8 = 2;

impl StoreStatus {
    /// `off` (no `--store`), `ok` (the last write, or the start's read, worked) or
    /// `degraded` (the last write failed).
    pub fn name(&self) -> &'static str {
        match self.0.load(Ordering::Relaxed) {
            OFF => "off",
            OK => "ok",
            _ => "degraded",
        }
    }

    fn set(&self, state: u8) -> u8 {
        self.0.swap(state, Ordering::Relaxed)
    }
}

/// A generation to write: its catalog and shards.
type Job = (Arc<Catalog>, Vec<Arc<ShardData>>);

/// Hands generations to the store's writing thread; cheap to clone.
#[derive(Clone)]
pub struct StoreHandle {
    next: Arc<Newest<Job>>,
}

impl StoreHandle {
    /// Starts the writing thread of `writer` (of the store in that directory), which pushes each write through
    /// `mirror` (with `--store s3://`) and reports to `status`; `degraded` when the
    /// start could not read the bucket.
    pub fn spawn(
        writer: StoreWriter,
        directory: PathBuf,
        mirror: Option<Mirror>,
        status: Arc<StoreStatus>,
        degraded: bool,
    ) -> std::io::Result<StoreHandle> {
        let next: Arc<Newest<Job>> = Arc::default();
        status.set(if degraded { DEGRADED } else { OK });
        let waiting = Arc::clone(&next);
        let mut thread = Writing {
            writer,
            directory,
            mirror,
            status,
            first: true,
        };
        std::thread::Builder::new()
            .name("stq-store".into())
            .spawn(move || thread.write_forever(&waiting))?;
        Ok(StoreHandle { next })
    }

    /// Asks for the generation of `catalog` and `shards` to be written, in place of
    /// any not yet begun.
    pub fn write(&self, catalog: Arc<Catalog>, shards: Vec<Arc<ShardData>>) {
        self.next.put((catalog, shards));
    }
}

/// The store's thread: its writer, the mirror it pushes through, its status.
struct Writing {
    writer: StoreWriter,
    /// The store's directory (an `s3://` store's copy), for messages.
    directory: PathBuf,
    mirror: Option<Mirror>,
    status: Arc<StoreStatus>,
    first: bool,
}

impl Writing {
    fn write_forever(&mut self, next: &Newest<Job>) {
        let mut last_ended: Option<Instant> = None;
        loop {
            // While the bucket is behind the copy, a push is tried again when no
            // generation comes.
            let patience = (self.status.0.load(Ordering::Relaxed) == DEGRADED
                && self.mirror.is_some())
            .then_some(RETRY_INTERVAL);
            let Some((catalog, shards)) = next.take_within(last_ended, WRITE_INTERVAL, patience)
            else {
                self.push();
                last_ended = Some(Instant::now());
                continue;
            };
            let generation = catalog.generation();
            match self.writer.write(&catalog, &shards) {
                Ok(report) => {
                    let line = format!(
                        "store written: generation {generation}, {} files ({} bytes) written, \
                         {} deleted, in {} ms",
                        report.files_written,
                        report.bytes_written,
                        report.files_deleted,
                        report.elapsed.as_millis()
                    );
                    let was = self.status.0.load(Ordering::Relaxed);
                    self.push();
                    let now = self.status.0.load(Ordering::Relaxed);
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
                }
            }
            // The generation is not kept beyond its write.
            drop((catalog, shards));
            last_ended = Some(Instant::now());
        }
    }

    /// Pushes the copy's last write to the bucket, if there is one; the status
    /// says whether the store is whole where it should be.
    fn push(&mut self) {
        let Some(mirror) = &mut self.mirror else {
            self.status.set(OK);
            return;
        };
        match mirror.push() {
            Ok(pushed) => {
                let was = self.status.set(OK);
                let line = format!(
                    "store pushed to {}: {} objects ({} bytes) put, {} deleted, in {} ms",
                    mirror.location(),
                    pushed.files,
                    pushed.bytes,
                    pushed.deleted,
                    pushed.elapsed.as_millis()
                );
                if was == DEGRADED || self.first {
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
