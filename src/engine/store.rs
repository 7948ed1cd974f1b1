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

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stq_core::data::catalog::Catalog;
use stq_core::data::shard::ShardData;
use stq_core::data::store::StoreWriter;

use crate::newest::Newest;

/// The least time from the end of one write of the store (done or failed) to the
/// start of the next. On a live floor, generations come several times a second; each write
/// costs CPU (compressing and hashing every touched station's recent layer, a
/// symbol run and the manifest, each fsynced), so writing every generation cost
/// several times the CPU of the reloads themselves (issue 32). A start catches up
/// on what the store lacks by reading the files' grown tails, which at any floor's
/// rate is a few seconds of lines: cheap to read again, so little is gained by
/// writing more often.
pub const WRITE_INTERVAL: Duration = Duration::from_secs(5);

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
    /// Starts the writing thread of `writer`, which reports to `status`.
    pub fn spawn(writer: StoreWriter, status: Arc<StoreStatus>) -> std::io::Result<StoreHandle> {
        let next: Arc<Newest<Job>> = Arc::default();
        status.set(OK);
        let waiting = Arc::clone(&next);
        std::thread::Builder::new()
            .name("stq-store".into())
            .spawn(move || write_forever(writer, &waiting, &status))?;
        Ok(StoreHandle { next })
    }

    /// Asks for the generation of `catalog` and `shards` to be written, in place of
    /// any not yet begun.
    pub fn write(&self, catalog: Arc<Catalog>, shards: Vec<Arc<ShardData>>) {
        self.next.put((catalog, shards));
    }
}

fn write_forever(mut writer: StoreWriter, next: &Newest<Job>, status: &StoreStatus) {
    let mut first = true;
    let mut last_ended: Option<Instant> = None;
    loop {
        // The generation handed over last while it waits is the one written.
        let (catalog, shards) = next.take_after(last_ended, WRITE_INTERVAL);
        let generation = catalog.generation();
        match writer.write(&catalog, &shards) {
            Ok(report) => {
                let was = status.set(OK);
                let line = format!(
                    "store written: generation {generation}, {} files ({} bytes) written, {} \
                     deleted, in {} ms",
                    report.files_written,
                    report.bytes_written,
                    report.files_deleted,
                    report.elapsed.as_millis()
                );
                if first || was == DEGRADED {
                    tracing::info!("{line}");
                } else {
                    tracing::debug!("{line}");
                }
                first = false;
            }
            Err(error) => {
                if status.set(DEGRADED) != DEGRADED {
                    tracing::warn!(
                        "cannot write the store {}: {error}; serving from memory, the store keeps \
                         what it held (store: degraded)",
                        writer.directory().display()
                    );
                }
            }
        }
        // The generation is not kept beyond its write.
        drop((catalog, shards));
        last_ended = Some(Instant::now());
    }
}
