//! `stq serve`: tokens, snapshot, engine, reloads, then the listeners.
//!
//! The listener is bound only once the snapshot has loaded, so a client that can
//! connect gets answers from complete data.

use std::sync::Arc;

use actix_web::web;
use anyhow::Context as _;
use stq_core::data::catalog::Generation;
use stq_core::data::cursor::CursorKey;
use stq_core::data::load::{self, LoadError, LoadOptions, LoadReport, INVALID_LINES_SHOWN};
use stq_core::data::store::{Store, StoreError, StoreSettings, StoreWriter, Written};
use stq_core::domain::auth::Tokens;
use stq_core::domain::query::Limits;
use stq_objects::{Objects, S3Settings};

use super::{cpus, ServeArgs};
use crate::engine::{
    reload_on_change, reload_on_hangup, Engine, Reloader, StoreHandle, StoreStatus,
};
use crate::export::{complete_before, ExportHandle};
use crate::http::{admin_server, api_server, stop_gracefully_on_signals, Admission, AppState};
use crate::metrics::{Gauges, Metrics};

/// Loads everything, then serves until the process is stopped.
pub fn serve(args: ServeArgs) -> anyhow::Result<()> {
    // Read before the snapshot, so a wrong key file fails at once, not after a load.
    let cursor_key = match &args.cursor_key_file {
        None => CursorKey::random(),
        Some(path) => {
            let secret = std::fs::read(path)
                .with_context(|| format!("cannot read the cursor key file {}", path.display()))?;
            CursorKey::from_secret(secret)
                .with_context(|| format!("the cursor key file {}", path.display()))?
        }
    };
    let tokens = Tokens::load(&args.tokens)?;
    if tokens.is_empty() {
        tracing::warn!(path = %args.tokens.display(), "the tokens file holds no tokens: every request will get 401");
    }
    stq_core::data::cache::set_capacity(args.cache_size);
    let shards = args.shards.map_or_else(cpus, std::num::NonZero::get);
    let options = LoadOptions {
        directory: args.snapshots.clone(),
        shards,
        on_invalid: args.on_invalid.into(),
        generation: 1,
        threads: cpus(),
        hot: args.hot.0,
    };
    let status = Arc::new(StoreStatus::default());
    let (generation, mut report, started) = start(&args, &options)?;
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
    let store = match &args.store {
        None => None,
        Some(directory) => {
            let settings = store_settings(&args, &options);
            let writer = StoreWriter::new(Store::new(directory), settings, started.written);
            Some(
                StoreHandle::spawn(writer, Arc::clone(&status))
                    .context("cannot start the store's thread")?,
            )
        }
    };

    let limits = Limits {
        max_records: args.max_records.get(),
        max_stations: args.max_stations.get(),
        max_query_bytes: args.max_query_bytes.get(),
        max_window: args.max_window,
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
        limits,
        cursor_key,
        shards,
        workers,
        store,
        export,
        status,
        started: started.line,
    };
    actix_rt::System::new().block_on(run(args, generation, tokens, settings, report))
}

/// How the first generation came to be, with a store.
#[derive(Default)]
struct Started {
    /// What the store holds of it, for the writer to keep.
    written: Written,
    /// For the ready line: what the store gave and what was parsed.
    line: String,
}

/// What the store is written for: another snapshot directory, number of shards or
/// hot window makes a start ignore it.
fn store_settings(args: &ServeArgs, options: &LoadOptions) -> StoreSettings {
    StoreSettings {
        snapshots: args.snapshots.clone(),
        shards: options.shards,
        hot: options.hot,
    }
}

/// The first generation: from the store and what changed since it was written
/// (docs/api.md section 12), or, without a usable store, from every file.
fn start(
    args: &ServeArgs,
    options: &LoadOptions,
) -> anyhow::Result<(Generation, LoadReport, Started)> {
    let Some(directory) = &args.store else {
        let (generation, report) = loaded(args, load::load(options))?;
        return Ok((generation, report, Started::default()));
    };
    let full = |reason: String| -> anyhow::Result<(Generation, LoadReport, Started)> {
        let (generation, report) = loaded(args, load::load(options))?;
        let line = format!("; store: {reason}, every record parsed");
        Ok((
            generation,
            report,
            Started {
                written: Written::default(),
                line,
            },
        ))
    };
    let begun = std::time::Instant::now();
    let mut restored = match Store::new(directory).read(&store_settings(args, options)) {
        Ok(restored) => restored,
        Err(StoreError::Empty) => return full("empty".into()),
        Err(error) => {
            tracing::warn!(
                "the store {} is not used: {error}; reading the snapshot files instead, and the \
                 store is written again",
                directory.display()
            );
            return full("not used".into());
        }
    };
    let records = restored.records();
    let written = std::mem::take(&mut restored.written);
    let (generation, mut report, used) = match load::load_from_store(options, restored) {
        Err(LoadError::Invalid { report }) => {
            return Err(refused(args, &report));
        }
        result => result?,
    };
    if !used {
        return Ok((
            generation,
            report,
            Started {
                written: Written::default(),
                line: "; store: not used (files held back, or invalid lines under --on-invalid \
                       fail), every record parsed"
                    .into(),
            },
        ));
    }
    // The store's read is part of the start.
    report.elapsed = begun.elapsed();
    let line = format!(
        "; store: {records} records restored, {} files ({} bytes) parsed",
        report.files.len(),
        report.bytes
    );
    Ok((generation, report, Started { written, line }))
}

/// A load's generation, or why stq does not start.
fn loaded(
    args: &ServeArgs,
    result: Result<(Generation, LoadReport), LoadError>,
) -> anyhow::Result<(Generation, LoadReport)> {
    match result {
        Ok(loaded) => Ok(loaded),
        Err(LoadError::Invalid { report }) => Err(refused(args, &report)),
        Err(error) => Err(error.into()),
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
    limits: Limits,
    cursor_key: CursorKey,
    shards: usize,
    workers: usize,
    /// `--store`: the thread that writes it, and what `/readyz` says of it.
    store: Option<StoreHandle>,
    /// `--export`: the thread that keeps it up to date.
    export: Option<ExportHandle>,
    status: Arc<StoreStatus>,
    /// What the ready line says of the store.
    started: String,
}

async fn run(
    args: ServeArgs,
    generation: Generation,
    tokens: Tokens,
    settings: Settings,
    report: LoadReport,
) -> anyhow::Result<()> {
    let Settings {
        limits,
        cursor_key,
        shards,
        workers,
        store,
        export,
        status,
        started,
    } = settings;
    let gauges = Gauges::of(&generation);
    let complete_before = (args.hot.0)
        .filter(|_| export.is_some())
        .and_then(|hot| complete_before(&generation, hot));
    let metrics = Arc::new(Metrics::default());
    let engine = Engine::start(
        generation,
        Arc::new(tokens),
        limits,
        cursor_key,
        metrics.shard_restarts.clone(),
    )
    .with_pass_results(args.pass_results.clone())
    .with_max_concurrent_queries(args.max_concurrent_queries());
    let stations = engine.catalog().stations().len();
    let state = web::Data::new(
        AppState::new(engine.clone())
            .with_metrics(Arc::clone(&metrics))
            .with_cors_origins(args.cors_origins.clone())
            .with_admission(Admission::new(args.request_timeout))
            .with_store_status(status),
    );
    if let Some((store, (catalog, shards))) = store.as_ref().zip(engine.serving()) {
        store.write(catalog, shards);
    }
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
        store,
        export,
    }
    .spawn();
    reload_on_hangup(trigger.clone()).context("cannot listen for SIGHUP")?;
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
    let (server, address) = api_server(&args.listen, workers, args.client_timeout, state)?;
    let addresses = [format!("http://{address}")];
    tracing::info!(
        "stq ready: {} records ({} units, {} metrics; {} sealed), {} stations, {} shards, \
         {} invalid lines skipped, {} files held, loaded in {} ms ({:.1} MB at {:.0} MB/s)\
         {started}, listening on {}",
        report.records(),
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
        addresses.join(", ")
    );
    stop_gracefully_on_signals(vec![server.handle(), admin.handle()])
        .context("cannot listen for SIGTERM and SIGINT")?;
    // Bound, and a stop from now on is graceful: systemd may count stq as started.
    crate::systemd::ready(&format!(
        "serving generation 1: {} records, {} stations",
        report.records(),
        stations
    ));
    actix_rt::spawn(admin);
    server.await.context("the HTTP server failed")
}
