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
use stq_core::domain::auth::Tokens;
use stq_core::domain::query::Limits;

use super::{cpus, ServeArgs};
use crate::engine::{reload_on_change, reload_on_hangup, Engine, Reloader};
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
    let shards = args.shards.map_or_else(cpus, std::num::NonZero::get);
    let options = LoadOptions {
        directory: args.snapshots.clone(),
        shards,
        on_invalid: args.on_invalid.into(),
        generation: 1,
        threads: cpus(),
        hot: args.hot.0,
    };
    let (generation, mut report) = match load::load(&options) {
        Ok(loaded) => loaded,
        Err(LoadError::Invalid { report }) => {
            for line in report.invalid.iter().take(INVALID_LINES_SHOWN) {
                eprintln!("{line}");
            }
            anyhow::bail!(
                "{} invalid line(s) in {}; fix them, or start with --on-invalid hold (serve \
                 the other files) or skip",
                report.invalid.len(),
                args.snapshots.display()
            );
        }
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

    let limits = Limits {
        max_records: args.max_records.get(),
        max_stations: args.max_stations.get(),
        max_query_bytes: args.max_query_bytes.get(),
        max_window: args.max_window,
    };
    let workers = args.workers.map_or_else(cpus, std::num::NonZero::get);
    let settings = Settings {
        limits,
        cursor_key,
        shards,
        workers,
    };
    actix_rt::System::new().block_on(run(args, generation, tokens, settings, report))
}

/// What the engine and the listener are started with, besides the data.
struct Settings {
    limits: Limits,
    cursor_key: CursorKey,
    shards: usize,
    workers: usize,
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
    } = settings;
    let gauges = Gauges::of(&generation);
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
            .with_admission(Admission::new(args.request_timeout)),
    );
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
         {} invalid lines skipped, {} files held, loaded in {} ms ({:.1} MB at {:.0} MB/s), \
         listening on {}",
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
