//! Hot reload (docs/api.md section 8): on SIGHUP, or on a change under the snapshot
//! directory or to the tokens file with `--watch`, generation N+1 is built off to
//! the side with the same validation as at start-up, installed into every shard,
//! and only then swapped in with the tokens read alongside it (and the TLS pair and
//! a file's key set, docs/api.md section 16). A reload that cannot read the tokens,
//! those, or the directory keeps generation N serving, and all it had; one that meets
//! invalid lines under `--on-invalid fail` (or `hold`) holds back only the files
//! that hold them (they serve what they served) and logs every `path:line: reason`.
//!
//! A reload reads only what changed since the generation it follows
//! ([`LoadOptions::reload`]): unchanged files are not opened, grown ones are
//! read from their last whole line, and stations the change does not touch are
//! shared with that generation.
//!
//! Reloads run one at a time on one task. Asking for a reload while one is running
//! queues exactly one more, which starts as soon as the running one ends: changes
//! that arrive during a reload are batched into the next one, never postponed.
//! The watch ([`super::watch`]) asks for reloads through a [`ReloadTrigger`] too.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use stq_core::data::{BlockCache, LoadError, LoadOptions, LoadReport, Look, OnInvalid};
use stq_core::domain::{Tokens, TokensError};
use tokio::sync::mpsc;

use super::Engine;
use crate::export::{complete_before, ExportHandle};
use crate::jwt::{NewKeys, Verifier};
use crate::metrics::{Gauges, Metrics, Outcome};
use crate::store::StoreHandle;
use crate::tls::{Certificates, Pair, TlsError};

/// How long after a request's time limit the generation it may have used is kept.
const RETIRE_MARGIN: Duration = Duration::from_secs(1);

/// The least time between two trims of the allocator's free memory
/// ([`release_freed_memory`]).
///
/// A trim walks every free chunk of every arena and advises the kernel of each
/// page again, whether or not it was given back before, so its cost follows the
/// free memory, not what the last retired generation freed. A live floor retires
/// several generations a second, each freeing a few stations' layers; trimming
/// after each took most of what a store cost on a floor of 1000 stations at 120
/// lines/s (0.46 cores against 0.25 paced; the store writer's freed buffers are
/// free memory that every trim walked again), and 0.04 cores without a store.
/// A reload that frees hundreds of megabytes still gives them back within this.
const TRIM_INTERVAL: Duration = Duration::from_secs(2);

/// Whether a trim is due, and when the last one ran: the allocator's arenas are
/// the process's, so these are too.
static TRIM_DUE: AtomicBool = AtomicBool::new(false);
static LAST_TRIM: Mutex<Option<Instant>> = Mutex::new(None);

/// Hands the pages of freed generations back to the system, at most once every
/// [`TRIM_INTERVAL`]: retirements meanwhile share the one trim that is due. glibc
/// keeps freed memory in its arenas, and a generation may be hundreds of megabytes
/// freed at once.
fn release_freed_memory() {
    if TRIM_DUE.swap(true, Ordering::AcqRel) {
        return;
    }
    let delay = LAST_TRIM.lock().map_or(Duration::ZERO, |last| {
        TRIM_INTERVAL.saturating_sub(last.elapsed())
    });
    actix_rt::spawn(async move {
        actix_rt::time::sleep(delay).await;
        // Cleared first: a retirement during the trim has its own trim due.
        TRIM_DUE.store(false, Ordering::Release);
        *LAST_TRIM.lock() = Some(Instant::now());
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only returns free pages to the system; it touches no
        // memory in use and may be called from any thread at any time.
        unsafe {
            libc::malloc_trim(0);
        }
    });
}

/// What a reload needs to build and install a generation.
pub struct Reloader {
    pub engine: Engine,
    pub metrics: Arc<Metrics>,
    /// How long a request may use the generation it planned on: `--request-timeout`.
    pub request_timeout: Duration,
    pub snapshots: PathBuf,
    pub tokens: PathBuf,
    pub on_invalid: OnInvalid,
    pub threads: usize,
    /// `--hot`: see [`LoadOptions::hot`].
    pub hot: Option<Duration>,
    /// `--cache-size`'s cache, which every generation's sealed tiers read
    /// through: see [`LoadOptions::cache`].
    pub cache: BlockCache,
    /// `--store`: where each generation served is written, off the request path.
    pub store: Option<StoreHandle>,
    /// `--export`: where each generation served is exported, off the request path.
    pub export: Option<ExportHandle>,
    /// `--tls-cert` and `--tls-key`: read again with the tokens.
    pub certificates: Option<Arc<Certificates>>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Tokens(#[from] TokensError),
    #[error(transparent)]
    Snapshot(#[from] LoadError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("{0}")]
    KeySet(String),
    #[error("the loading thread failed: {0}")]
    Loader(String),
}

/// What a reload reads beside the tokens, all before it changes anything: the TLS
/// pair and a file's key set. Either failing fails the reload, as unreadable tokens
/// do, and the pair and keys in use stay.
struct Credentials {
    pair: Option<Pair>,
    keys: Option<NewKeys>,
}

impl Credentials {
    fn read(
        certificates: Option<&Certificates>,
        jwt: Option<&Verifier>,
    ) -> Result<Credentials, ReloadError> {
        let pair = certificates.map(Certificates::read).transpose()?;
        let keys = (jwt.and_then(Verifier::read_again))
            .transpose()
            .map_err(ReloadError::KeySet)?;
        Ok(Credentials { pair, keys })
    }

    fn install(self, certificates: Option<&Certificates>, jwt: Option<&Arc<Verifier>>) {
        if let Some((certificates, pair)) = certificates.zip(self.pair) {
            certificates.install(pair);
        }
        if let Some((jwt, keys)) = jwt.zip(self.keys) {
            jwt.install(keys);
        }
    }
}

/// Asks the reload task for a reload; cheap to clone and to call from any thread.
#[derive(Clone)]
pub struct ReloadTrigger {
    sender: mpsc::Sender<()>,
    /// What the requests since the last reload started ask of the next one.
    pending: Arc<Mutex<Pending>>,
    /// The last repair ticket given ([`ReloadTrigger::repair_ticket`]).
    tickets: Arc<AtomicU64>,
}

/// What the next reload is asked to do.
#[derive(Debug, Default)]
struct Pending {
    /// Log its clean outcome at `info`: a reload the operator asked for is, while
    /// the watch's, several a second on a busy floor, are logged at `debug` (a
    /// held file or a failure always is logged).
    announce: bool,
    /// Look at every file, not only at `paths`.
    everything: bool,
    /// Paths relative to the snapshot directory that the watch saw change.
    paths: BTreeSet<String>,
    /// Stations whose store files were found damaged after the start: read again
    /// from the snapshot files ([`LoadOptions::reload`]).
    repair: BTreeSet<String>,
    /// The newest ticket among the repairs asked for: a generation built with
    /// them mends every fault up to it, and its write may call the store whole
    /// ([`StoreHandle::write`]).
    ticket: u64,
}

impl ReloadTrigger {
    /// Asks for a reload of everything, whose outcome is logged (SIGHUP).
    pub fn request(&self) {
        {
            let mut pending = self.pending.lock();
            pending.announce = true;
            pending.everything = true;
        }
        self.send();
    }

    /// Asks for a reload that looks at `paths` (relative to the snapshot directory),
    /// or at every file when `everything` (the watch lost track), logged only if it
    /// holds a file back or fails.
    pub(super) fn request_quietly(&self, everything: bool, paths: BTreeSet<String>) {
        {
            let mut pending = self.pending.lock();
            pending.everything |= everything;
            pending.paths.extend(paths);
        }
        self.send();
    }

    /// Asks for a reload that reads `stations` again from the snapshot files, whose
    /// history in the store was found damaged after the start; logged.
    pub fn request_repair(&self, stations: impl IntoIterator<Item = String>) {
        self.request_repair_of(0, stations);
    }

    /// A ticket for a fault's repair, taken before the store is marked degraded
    /// until it ([`crate::store::StoreStatus::degrade_until`]) and the repair is
    /// asked for ([`ReloadTrigger::request_repair_of`]): a write of a generation
    /// built before the repair then does not call the store whole while the
    /// damaged file is still in it.
    pub fn repair_ticket(&self) -> u64 {
        self.tickets.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// As [`ReloadTrigger::request_repair`], for the fault of `ticket`.
    pub fn request_repair_of(&self, ticket: u64, stations: impl IntoIterator<Item = String>) {
        {
            let mut pending = self.pending.lock();
            pending.announce = true;
            pending.everything = true;
            pending.repair.extend(stations);
            pending.ticket = pending.ticket.max(ticket);
        }
        self.send();
    }

    fn send(&self) {
        // A full queue already holds a reload that will see this change too.
        let _ = self.sender.try_send(());
    }
}

impl Reloader {
    /// Builds, installs and swaps in the next generation; returns its number, what
    /// the reload read, and how many files it holds back. It looks for changes
    /// where `look` says, and reads the stations `repair` again whole.
    ///
    /// `repaired` is the newest repair ticket the generation mends (with the
    /// repairs of every reload before it): its store write says so.
    pub async fn reload(
        &self,
        look: Look,
        repair: BTreeSet<String>,
        repaired: u64,
    ) -> Result<(u64, LoadReport, u64), ReloadError> {
        let options = LoadOptions {
            directory: self.snapshots.clone(),
            shards: self.engine.shard_count(),
            on_invalid: self.on_invalid,
            generation: self.engine.catalog().generation() + 1,
            threads: self.threads,
            hot: self.hot,
            cache: self.cache.clone(),
        };
        let tokens_path = self.tokens.clone();
        let certificates = self.certificates.clone();
        let jwt = self.engine.jwt().cloned();
        let previous = self.engine.serving();
        // A thread of its own, not the runtime's blocking pool: the runtime waits
        // for its blocking tasks when it shuts down, so SIGTERM during a long (or
        // stuck) load would wait for the load. Nobody waits for this thread: a stop
        // abandons the reload, and nothing of it was swapped in.
        let (sender, receiver) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("stq-reload".into())
            .spawn(move || {
                let loaded = Credentials::read(certificates.as_deref(), jwt.as_deref())
                    .and_then(|credentials| Ok((credentials, Tokens::load(&tokens_path)?)))
                    .and_then(|(credentials, tokens)| {
                        let previous = (previous.as_ref())
                            .map(|(catalog, shards)| (catalog.as_ref(), shards.as_slice()));
                        Ok((
                            (credentials, tokens),
                            options.reload(previous, &look, repair)?,
                        ))
                    });
                let _ = sender.send(loaded);
            })
            .map_err(|error| ReloadError::Loader(error.to_string()))?;
        let ((credentials, tokens), (generation, mut report)) = receiver
            .await
            .map_err(|error| ReloadError::Loader(error.to_string()))??;
        let gauges = Gauges::of(&generation);
        let number = generation.catalog.generation();
        let held_files = gauges.held_files();
        let complete_before = (self.hot)
            .filter(|_| self.export.is_some())
            .and_then(|hot| complete_before(&generation, hot));
        let additions = std::mem::take(&mut report.additions);
        self.engine
            .install(generation, Arc::new(tokens), additions)
            .await;
        credentials.install(self.certificates.as_deref(), self.engine.jwt());
        if let Some((store, (catalog, shards))) = self.store.as_ref().zip(self.engine.serving()) {
            store.write(catalog, shards, repaired);
        }
        if let Some((export, (catalog, shards))) = self.export.as_ref().zip(self.engine.serving()) {
            export.export(catalog, shards, complete_before);
        }
        self.retire_later(number);
        let metrics = &self.metrics;
        metrics.serving(gauges, report.elapsed.as_secs_f64());
        metrics.read(&report);
        Ok((number, report, held_files))
    }

    /// Once every request that may have planned on the generation before `number`
    /// has ended (requests last at most `--request-timeout`), the shards drop it, and
    /// the memory goes back to the system: otherwise a server reloaded every few
    /// seconds would hold two generations for good, and more in freed pages.
    fn retire_later(&self, number: u64) {
        let engine = self.engine.clone();
        let grace = self.request_timeout + RETIRE_MARGIN;
        actix_rt::spawn(async move {
            actix_rt::time::sleep(grace).await;
            engine.retire_before(number).await;
            release_freed_memory();
        });
    }

    /// Starts the reload task on the current actix system and returns its trigger.
    pub fn spawn(self) -> ReloadTrigger {
        let (sender, mut receiver) = mpsc::channel::<()>(1);
        let pending = Arc::new(Mutex::new(Pending::default()));
        let trigger = ReloadTrigger {
            sender,
            pending: Arc::clone(&pending),
            tickets: Arc::default(),
        };
        actix_rt::spawn(async move {
            // The newest repair ticket a generation served has mended.
            let mut repaired = 0;
            while receiver.recv().await.is_some() {
                // What is asked from here on is for the next reload.
                let asked = std::mem::take(&mut *pending.lock());
                let ticket = repaired.max(asked.ticket);
                let announced = asked.announce;
                let look = match asked.everything {
                    true => Look::Everything,
                    false => Look::Paths(asked.paths),
                };
                let current = self.engine.catalog().generation();
                // A reload the operator asked for (`systemctl reload`) is one systemd
                // shows; the watch's, several a second, are not.
                if announced {
                    crate::systemd::reloading();
                }
                let result = self.reload(look, asked.repair.clone(), ticket).await;
                match &result {
                    Ok(_) => repaired = ticket,
                    // The repairs are asked of the next reload again.
                    Err(_) if !asked.repair.is_empty() => {
                        let mut pending = pending.lock();
                        pending.everything = true;
                        pending.repair.extend(asked.repair);
                        pending.ticket = pending.ticket.max(asked.ticket);
                    }
                    Err(_) => {}
                }
                if announced {
                    let serving = self.engine.catalog();
                    crate::systemd::ready(&format!(
                        "serving generation {}: {} records, {} stations",
                        serving.generation(),
                        serving.summary.units + serving.summary.metrics,
                        serving.stations().len()
                    ));
                }
                self.metrics.reloaded(match &result {
                    Ok((_, _, 0)) => Outcome::Clean,
                    Ok(_) => Outcome::Held,
                    Err(_) => Outcome::Failed,
                });
                match result {
                    Ok((generation, mut report, held_files)) => {
                        let held_lines = report.take_held_lines();
                        for line in &held_lines {
                            tracing::error!("reload: {line}");
                        }
                        report.log_warnings(&self.snapshots);
                        let line = format!(
                            "generation {generation}, {} records ({} units, {} metrics; {} \
                             sealed), {} stations, {} pending lines, {} new invalid lines \
                             skipped; read {} files ({} bytes) in {} ms",
                            report.units + report.metrics,
                            report.units,
                            report.metrics,
                            report.sealed,
                            report.stations,
                            report.pending,
                            report.invalid.len(),
                            report.files.len(),
                            report.bytes,
                            report.elapsed.as_millis()
                        );
                        if !report.held.is_empty() {
                            tracing::warn!(
                                "reloaded, holding back {} file(s) with {} invalid line(s), each \
                                 serving what it served before: {}; {held_files} file(s) held in \
                                 all; {line}",
                                report.held.len(),
                                held_lines.len(),
                                report.held.join(", ")
                            );
                        } else if announced {
                            tracing::info!("reloaded: {line}");
                        } else {
                            tracing::debug!("reloaded: {line}");
                        }
                    }
                    Err(ReloadError::Snapshot(LoadError::Invalid { report })) => {
                        for line in &report.invalid {
                            tracing::error!("reload: {line}");
                        }
                        tracing::error!(
                            "reload failed: {} invalid lines; still serving generation {current}",
                            report.invalid.len()
                        );
                    }
                    Err(error) => tracing::error!(
                        "reload failed: {error}; still serving generation {current}"
                    ),
                }
            }
        });
        trigger
    }
}

/// Reloads on every SIGHUP, for as long as the actix system runs.
pub fn reload_on_hangup(trigger: ReloadTrigger) -> std::io::Result<()> {
    use actix_rt::signal::unix::{signal, SignalKind};
    let mut hangups = signal(SignalKind::hangup())?;
    actix_rt::spawn(async move {
        while hangups.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the snapshot and the tokens");
            trigger.request();
        }
    });
    Ok(())
}
