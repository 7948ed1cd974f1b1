//! `stq serve`: tokens, snapshot, engine, reloads, then the listeners.
//!
//! The listener is bound only once the snapshot has loaded, so a client that can
//! connect gets answers from complete data.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use actix_web::web;
use anyhow::Context as _;
use stq_core::data::{
    BlockCache, FromStore, Generation, LoadError, LoadOptions, LoadReport, Start,
};
use stq_core::domain::{Limits, Tokens};
use stq_objects::{Location, Objects, S3Settings};

use super::{cpus, ServeArgs, INVALID_LINES_SHOWN};
use crate::engine::{reload_on_change, reload_on_hangup, Engine, ReloadTrigger, Reloader};
use crate::export::{complete_before, ExportHandle};
use crate::http::{
    admin_server, api_server, stop_gracefully_on_signals, Admission, AppState, LiveState,
};
use crate::jwt::Verifier;
use crate::metrics::{Gauges, Metrics};
use crate::store::lock::WriterLock;
use crate::store::mirror::{Fill, Mirror};
use crate::store::{StoreHandle, StorePlace, StoreStatus};
use crate::tls::Certificates;

/// Loads everything, then serves until the process is stopped.
pub fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let limits = Limits {
        max_records: args.max_records.get(),
        max_stations: args.max_stations.get(),
        max_query_bytes: args.max_query_bytes.get(),
        max_window: args.max_window,
        max_wait: args.max_wait,
    };
    // Read before the snapshot, so a wrong key file fails at once, not after a load.
    let plan = stq_core::data::Settings::new(limits, args.cursor_key_file.as_deref())
        .map_err(anyhow::Error::msg)?;
    let tokens = Tokens::load(&args.tokens)?;
    let certificates = args.identity.certificates()?;
    if tokens.is_empty() {
        tracing::warn!(path = %args.tokens.display(), "the tokens file holds no tokens: every request will get 401");
    }
    // One cache for the process: every generation's sealed tiers read through
    // it, so a reload keeps what it holds.
    let cache = BlockCache::new(args.cache_size);
    let shards = args.shards.map_or_else(cpus, std::num::NonZero::get);
    let options = LoadOptions {
        directory: args.snapshots.clone(),
        shards,
        on_invalid: args.on_invalid.into(),
        generation: 1,
        threads: cpus(),
        hot: args.hot.0,
        cache: cache.clone(),
    };
    let status = Arc::new(StoreStatus::default());
    let mut place = store_place(&args)?;
    let fill = place.as_mut().map(|place| std::mem::take(&mut place.fill));
    let remote = place.as_ref().and_then(|place| place.remote.clone());
    let directory = place.as_ref().map(|place| place.directory.as_path());
    // Streams and held requests are connections that stay open: ten thousand of
    // them need as many descriptors, and a store's sealed files more.
    raise_open_file_limit();
    let Start {
        generation,
        mut report,
        writer,
        store: from_store,
    } = match options.start(directory, remote) {
        Ok(start) => start,
        Err(LoadError::Invalid { report }) => return Err(refused(&args, &report)),
        Err(error) => return Err(error.into()),
    };
    // Under `hold`, every invalid line is logged as what holds its file.
    let held_lines = report.take_held_lines();
    for line in &held_lines {
        tracing::error!("held: {line}");
    }
    if !report.held.is_empty() {
        tracing::warn!(
            "holding {} file(s) with {} invalid line(s), serving none of their records until \
             they read cleanly: {}",
            report.held.len(),
            held_lines.len(),
            report.held.join(", ")
        );
    }
    report.log_warnings(&args.snapshots);
    let started = started_line(from_store, &report);
    let store = match place.zip(writer) {
        None => None,
        Some((place, writer)) => Some(
            StoreHandle::spawn(writer, place, Arc::clone(&status))
                .context("cannot start the store's thread")?,
        ),
    };

    let export = match (&args.export, args.hot.0) {
        (None, _) => None,
        (Some(_), None) => anyhow::bail!(
            "--export writes the days older than every station's hot window: it needs --hot \
             DURATION, not all"
        ),
        (Some(location), Some(_)) => {
            let destination = Objects::open(location.clone(), &S3Settings::from_env())
                .with_context(|| format!("--export {location}"))?;
            Some(ExportHandle::spawn(destination).context("cannot start the export's thread")?)
        }
    };
    let workers = args.workers.map_or_else(cpus, std::num::NonZero::get);
    let settings = Settings {
        plan,
        shards,
        workers,
        store,
        export,
        status,
        started,
        fill,
        certificates,
        cache,
    };
    actix_rt::System::new().block_on(run(args, generation, tokens, settings, report))
}

/// `engine` accepting the JSON Web Tokens of `--jwt-jwks`, whose key set is read
/// or fetched now: one that cannot be had is a start-up error.
async fn accepting_json_web_tokens(engine: Engine, args: &ServeArgs) -> anyhow::Result<Engine> {
    let Some(jwt) = args.identity.jwt() else {
        return Ok(engine);
    };
    let verifier = Verifier::start(jwt)
        .await
        .map_err(|reason| anyhow::anyhow!("--jwt-jwks: {reason}"))?;
    verifier.spawn_refresh();
    Ok(engine.with_jwt(verifier))
}

/// Raises the soft limit on open files to the hard one: with a store, each
/// station's sealed tier is read from its file, kept open (docs/api.md section
/// 12), so a thousand stations need a thousand descriptors beside the sockets,
/// where the usual soft limit is 1024 (the Debian unit sets 65536).
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct given, nothing else.
    let raised = unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0
        }
    };
    if raised {
        tracing::info!(
            "open files: at most {} (the hard limit): streams, held requests and store files",
            limit.rlim_cur
        );
    } else {
        tracing::warn!(
            "cannot raise the limit on open files: {}; connections beyond it are refused, \
             and a sealed tier whose file cannot be opened stays in memory",
            std::io::Error::last_os_error()
        );
    }
}

/// Where the store is read and written: a directory, which with `--store s3://`
/// is the local copy of a bucket, pulled from it before the start reads it by the
/// process that takes the directory's lock (another stq on the same directory
/// writes it, and pulls it).
fn store_place(args: &ServeArgs) -> anyhow::Result<Option<StorePlace>> {
    let (directory, s3) = match &args.store {
        None => return Ok(None),
        Some(Location::Directory(directory)) => (directory.clone(), None),
        Some(location @ Location::S3 { bucket, prefix }) => {
            let copy = match &args.store_cache {
                Some(copy) => copy.clone(),
                None => default_store_cache(bucket, prefix)?,
            };
            (copy, Some(location))
        }
    };
    let lock = WriterLock::take(&directory);
    if lock.is_elsewhere() {
        tracing::info!(
            "the store {} is written by another stq (it holds {}): this one starts from \
             it{}, and writes it once that one stops",
            directory.display(),
            WriterLock::file(&directory).display(),
            if s3.is_some() {
                " as it is, without pulling"
            } else {
                ""
            }
        );
    }
    let Some(location) = s3 else {
        return Ok(Some(StorePlace {
            directory,
            mirror: None,
            degraded: false,
            lock,
            remote: None,
            fill: Fill::default(),
        }));
    };
    let mut mirror = Mirror::open(location.clone(), directory.clone())
        .with_context(|| format!("--store {location}"))?;
    let mut fill = Fill::default();
    let degraded = !lock.is_elsewhere() && !pull(&mut mirror, location, &directory, &mut fill);
    Ok(Some(StorePlace {
        directory,
        remote: Some(mirror.remote()),
        mirror: Some(mirror),
        degraded,
        lock,
        fill,
    }))
}

/// Pulls the bucket at `location` into the copy `mirror` keeps in `copy`,
/// logging what it did; false if the bucket could not be read.
fn pull(mirror: &mut Mirror, location: &Location, copy: &Path, fill: &mut Fill) -> bool {
    let begun = std::time::Instant::now();
    match mirror.pull() {
        Ok(mut pulled) => {
            for damaged in &pulled.damaged {
                tracing::warn!(
                    "the store {location}: {damaged} fails its checksum and is not used; its \
                     history is read from the snapshot files, and the object put again"
                );
            }
            if pulled.pack_damaged {
                tracing::warn!(
                    "the store {location}: its pack did not give every file it names (a part \
                     damaged or gone); those files were fetched on their own, and the next push \
                     writes a new pack"
                );
            }
            tracing::info!(
                "the store {location}: {} ({} files, {} bytes fetched into {} in {} ms, {} of \
                 them from {} parts of its pack; {} sealed files as their indexes alone, \
                 fetched whole after the start)",
                if pulled.manifest { "read" } else { "empty" },
                pulled.files,
                pulled.bytes,
                copy.display(),
                begun.elapsed().as_millis(),
                pulled.packed,
                pulled.parts,
                pulled.fill.len()
            );
            *fill = std::mem::take(&mut pulled.fill);
            true
        }
        Err(error) => {
            tracing::warn!(
                "cannot read the store {location}: {error}; starting from what its local copy {} \
                 holds (store: degraded)",
                copy.display()
            );
            false
        }
    }
}

/// Where an `s3://` store's copy is kept without `--store-cache`: systemd's
/// `CacheDirectory=` (the Debian unit's `/var/cache/stq`), else the XDG cache
/// directory's `stq`, then `s3/BUCKET/PREFIX`.
fn default_store_cache(bucket: &str, prefix: &str) -> anyhow::Result<PathBuf> {
    let variable = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    let cache = match (variable("CACHE_DIRECTORY"), variable("XDG_CACHE_HOME")) {
        // systemd may list several, separated by `:`.
        (Some(directories), _) => std::env::split_paths(&directories)
            .next()
            .unwrap_or_default(),
        (None, Some(xdg)) => PathBuf::from(xdg).join("stq"),
        (None, None) => match variable("HOME") {
            Some(home) => PathBuf::from(home).join(".cache/stq"),
            None => anyhow::bail!(
                "--store s3:// keeps a local copy: give --store-cache DIR (no $HOME, \
                 $XDG_CACHE_HOME or $CACHE_DIRECTORY to put it under)"
            ),
        },
    };
    Ok(cache.join("s3").join(bucket).join(prefix))
}

/// What the ready line says of the store: what it gave and what was parsed.
fn started_line(from_store: Option<FromStore>, report: &LoadReport) -> String {
    match from_store {
        None => String::new(),
        Some(FromStore::Empty) => "; store: empty, every record parsed".into(),
        Some(FromStore::NotUsed) => "; store: not used, every record parsed".into(),
        Some(FromStore::ParsedInstead) => "; store: not used (files held back, or invalid \
                                           lines under --on-invalid fail), every record parsed"
            .into(),
        Some(FromStore::Restored { records, .. }) => format!(
            "; store: {records} records restored, {} files ({} bytes) parsed",
            report.files.len(),
            report.bytes
        ),
    }
}

/// Why a start under `--on-invalid fail` stops: every invalid line shown.
fn refused(args: &ServeArgs, report: &LoadReport) -> anyhow::Error {
    for line in report.invalid.iter().take(INVALID_LINES_SHOWN) {
        eprintln!("{line}");
    }
    anyhow::anyhow!(
        "{} invalid line(s) in {}; fix them, or start with --on-invalid hold (serve the \
         other files) or skip",
        report.invalid.len(),
        args.snapshots.display()
    )
}

/// What the engine and the listener are started with, besides the data.
struct Settings {
    /// What queries are planned under.
    plan: stq_core::data::Settings,
    shards: usize,
    workers: usize,
    /// `--store`: the thread that writes it, and what `/readyz` says of it.
    store: Option<StoreHandle>,
    /// `--export`: the thread that keeps it up to date.
    export: Option<ExportHandle>,
    status: Arc<StoreStatus>,
    /// What the ready line says of the store.
    started: String,
    /// With `--store s3://`: the sealed files to fetch whole after the start.
    fill: Option<Fill>,
    /// `--tls-cert` and `--tls-key`, read.
    certificates: Option<Arc<Certificates>>,
    /// The cache of decoded sealed blocks (`--cache-size`), which every
    /// generation reads through and the admin metrics report.
    cache: BlockCache,
}

/// The admin metrics, with the figures of `cache`, and `stq_store_generation`
/// read from `status` when there is a store.
fn metrics_of(store: bool, status: &Arc<StoreStatus>, cache: BlockCache) -> Metrics {
    let metrics = Metrics::default().with_cache(cache);
    if !store {
        return metrics;
    }
    let status = Arc::clone(status);
    metrics.with_store_generation(move || status.generation())
}

/// A store file that fails a query's read (docs/api.md section 12) makes the store
/// `degraded`, and its stations are read again from the snapshot files (and so
/// written again).
fn repair_on_storage_faults(engine: &Engine, trigger: &ReloadTrigger, status: Arc<StoreStatus>) {
    let trigger = trigger.clone();
    engine.on_storage_fault(move |stations| {
        let ticket = trigger.repair_ticket();
        status.degrade_until(ticket);
        trigger.request_repair_of(ticket, stations);
    });
}

/// The line an operator reads first: what was loaded, how fast, and where stq listens.
fn log_ready(
    report: &LoadReport,
    stations: usize,
    shards: usize,
    started: &str,
    scheme: &str,
    address: &impl std::fmt::Display,
) {
    tracing::info!(
        "stq ready: {} records ({} units, {} metrics; {} sealed), {} stations, {} shards, \
         {} invalid lines skipped, {} files held, loaded in {} ms ({:.1} MB at {:.0} MB/s)\
         {started}, listening on {scheme}://{address}",
        report.units + report.metrics,
        report.units,
        report.metrics,
        report.sealed,
        stations,
        shards,
        report.invalid.len(),
        report.held.len(),
        report.elapsed.as_millis(),
        report.bytes as f64 / 1e6,
        report.bytes as f64 / 1e6 / report.elapsed.as_secs_f64().max(1e-9),
    );
}

async fn run(
    args: ServeArgs,
    generation: Generation,
    tokens: Tokens,
    settings: Settings,
    report: LoadReport,
) -> anyhow::Result<()> {
    let Settings {
        plan,
        shards,
        workers,
        store,
        export,
        status,
        started,
        fill,
        certificates,
        cache,
    } = settings;
    let gauges = Gauges::of(&generation);
    let complete_before = (args.hot.0)
        .filter(|_| export.is_some())
        .and_then(|hot| complete_before(&generation, hot));
    let metrics = Arc::new(metrics_of(store.is_some(), &status, cache.clone()));
    let engine = Engine::start(
        generation,
        Arc::new(tokens),
        plan,
        metrics.shard_restarts.clone(),
    )
    .with_pass_results(args.pass_results.clone())
    .with_max_concurrent_queries(args.max_concurrent_queries());
    let engine = accepting_json_web_tokens(engine, &args).await?;
    let stations = engine.catalog().stations().len();
    let state = web::Data::new(
        AppState::new(engine.clone())
            .with_metrics(Arc::clone(&metrics))
            .with_cors_origins(args.cors_origins.clone())
            .with_admission(Admission::new(args.request_timeout))
            .with_live(LiveState::new(
                args.max_waiting.get(),
                args.max_streams.get(),
            ))
            .with_store_status(Arc::clone(&status)),
    );
    if let Some((store, (catalog, shards))) = store.as_ref().zip(engine.serving()) {
        store.write(catalog, shards, 0);
    }
    let store_at_stop = store.clone();
    if let Some((export, (catalog, shards))) = export.as_ref().zip(engine.serving()) {
        export.export(catalog, shards, complete_before);
    }
    metrics.serving(gauges, report.elapsed.as_secs_f64());
    metrics.read(&report);
    let admin = admin_server(&args.admin_listen, Arc::clone(&metrics), engine.clone())?;
    let trigger = Reloader {
        engine: engine.clone(),
        metrics: Arc::clone(&metrics),
        request_timeout: args.request_timeout,
        snapshots: args.snapshots.clone(),
        tokens: args.tokens.clone(),
        on_invalid: args.on_invalid.into(),
        threads: cpus(),
        hot: args.hot.0,
        cache,
        store,
        export,
        certificates: certificates.clone(),
    }
    .spawn();
    reload_on_hangup(trigger.clone()).context("cannot listen for SIGHUP")?;
    repair_on_storage_faults(&engine, &trigger, status);
    if let Some(fill) = fill {
        let trigger = trigger.clone();
        fill.spawn(move |stations| trigger.request_repair(stations))
            .context("cannot start the store's fill")?;
    }
    // The watch lasts as long as this value: until the server stops.
    let _watcher = if args.watch {
        Some(
            reload_on_change(
                trigger,
                &args.snapshots,
                &args.tokens,
                args.watch_poll,
                &engine.catalog(),
            )
            .context("cannot watch the snapshot directory and the tokens file")?,
        )
    } else {
        None
    };
    let scheme = ["http", "https"][usize::from(certificates.is_some())];
    let timeout = args.client_timeout;
    let (server, address) = api_server(&args.listen, workers, timeout, certificates, state)?;
    log_ready(&report, stations, shards, &started, scheme, &address);
    stop_gracefully_on_signals(engine.clone(), vec![server.handle(), admin.handle()])
        .context("cannot listen for SIGTERM and SIGINT")?;
    // Bound, and a stop from now on is graceful: systemd may count stq as started.
    crate::systemd::ready(&format!(
        "serving generation 1: {} records, {} stations",
        report.units + report.metrics,
        stations
    ));
    actix_rt::spawn(admin);
    let served = server.await.context("the HTTP server failed");
    if let Some(store) = store_at_stop {
        // Nothing is served any more: blocking this thread holds up no one.
        store.finish_within(crate::store::STOP_WAIT);
    }
    served
}
