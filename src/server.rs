//! Start-up of `stq serve`: tokens, snapshot, shard actors, then the HTTP server.
//!
//! The listener is bound only once the snapshot has loaded, so a client that can
//! connect gets answers from complete data.

use std::sync::Arc;

use std::net::ToSocketAddrs as _;
use std::time::Duration;

use actix_http::{error::DispatchError, HttpService};
use actix_service::{fn_service, map_config, ServiceFactoryExt as _};
use actix_web::dev::AppConfig;
use actix_web::rt::net::TcpStream;
use actix_web::{web, HttpServer};
use anyhow::Context as _;
use socket2::{Domain, Protocol, Socket, Type};

use crate::api::{self, Admission, AppState};
use crate::auth::Tokens;
use crate::config::{cpus, ServeArgs};
use crate::connection::Deadlined;
use crate::cursor::CursorKey;
use crate::metrics::Metrics;
use crate::query::Limits;
use crate::reload::{reload_on_change, reload_on_hangup, Reloader};
use crate::router::Engine;
use crate::snapshot::{self, LoadError, LoadOptions, LoadReport, INVALID_LINES_SHOWN};

/// Loads everything, then serves until the process is stopped.
pub fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let tokens = Tokens::load(&args.tokens)?;
    if tokens.is_empty() {
        tracing::warn!(path = %args.tokens.display(), "the tokens file holds no tokens: every request will get 401");
    }
    let shards = args.shards.map_or_else(cpus, |shards| shards.get());
    let options = LoadOptions {
        directory: args.snapshots.clone(),
        shards,
        on_invalid: args.on_invalid,
        generation: 1,
        threads: cpus(),
    };
    let (generation, report) = match snapshot::load(&options) {
        Ok(loaded) => loaded,
        Err(LoadError::Invalid { report }) => {
            for line in report.invalid.iter().take(INVALID_LINES_SHOWN) {
                eprintln!("{line}");
            }
            anyhow::bail!(
                "{} invalid line(s) in {}; fix them or start with --on-invalid skip",
                report.invalid.len(),
                args.snapshots.display()
            );
        }
        Err(error) => return Err(error.into()),
    };
    report.log_warnings(&args.snapshots);

    let limits = Limits {
        max_records: args.max_records.get(),
        max_stations: args.max_stations.get(),
        max_query_bytes: args.max_query_bytes.get(),
        max_window: args.max_window,
    };
    let workers = args.workers.map_or_else(cpus, |workers| workers.get());
    actix_web::rt::System::new().block_on(run(
        args, generation, tokens, limits, shards, workers, report,
    ))
}

async fn run(
    args: ServeArgs,
    generation: crate::index::Generation,
    tokens: Tokens,
    limits: Limits,
    shards: usize,
    workers: usize,
    report: LoadReport,
) -> anyhow::Result<()> {
    let shard_records = generation.shard_records();
    let metrics = Arc::new(Metrics::default());
    let (engine, catalog) = Engine::start(generation, metrics.shard_restarts.clone());
    let stations = catalog.stations.len();
    let state = web::Data::new(
        AppState::new(catalog, Arc::new(tokens), limits, CursorKey::random())
            .with_metrics(metrics)
            .with_cors_origins(args.cors_origins.clone())
            .with_admission(Admission::new(
                args.max_concurrent_queries(),
                args.request_timeout,
            )),
    );
    state
        .metrics
        .serving(1, report.elapsed.as_secs_f64(), &shard_records);
    let admin = admin_server(&args.admin_listen, Arc::clone(&state.metrics))?;
    let trigger = Reloader {
        engine: engine.clone(),
        state: state.clone(),
        snapshots: args.snapshots.clone(),
        tokens: args.tokens.clone(),
        on_invalid: args.on_invalid,
        threads: cpus(),
    }
    .spawn();
    reload_on_hangup(trigger.clone()).context("cannot listen for SIGHUP")?;
    // The watch lasts as long as this value: until the server stops.
    let _watcher = if args.watch {
        Some(
            reload_on_change(trigger, &args.snapshots, &args.tokens)
                .context("cannot watch the snapshot directory and the tokens file")?,
        )
    } else {
        None
    };
    let listener = listen(&args.listen)?;
    let address = listener.local_addr()?;
    let client_timeout = args.client_timeout;
    // actix-web's HttpServer would do this assembly, but it has no place to wrap the
    // socket, which the client deadlines need (see `connection`).
    let server = actix_server::Server::build()
        .workers(workers)
        // actix-server stops at once on SIGINT; the contract wants both graceful.
        .disable_signals()
        .listen("stq", listener, move || {
            let app = api::app(state.clone(), engine.router());
            fn_service(move |stream: TcpStream| async move {
                // As actix-web's own server does: an answer leaves at once instead
                // of waiting for the client's acknowledgement of the last one.
                let _ = stream.set_nodelay(true);
                let peer = stream.peer_addr().ok();
                Ok::<_, DispatchError>((Deadlined::new(stream, client_timeout), peer))
            })
            .and_then(
                HttpService::build()
                    .keep_alive(client_timeout)
                    .client_request_timeout(client_timeout)
                    .client_disconnect_timeout(Duration::from_secs(1))
                    .local_addr(address)
                    .h1(map_config(app, |_| AppConfig::default())),
            )
        })?;
    let addresses = [format!("http://{address}")];
    tracing::info!(
        "stq ready: {} records ({} units, {} metrics), {} stations, {} shards, {} invalid lines skipped, \
         loaded in {} ms ({:.1} MB at {:.0} MB/s), listening on {}",
        report.records(),
        report.units,
        report.metrics,
        stations,
        shards,
        report.invalid.len(),
        report.elapsed.as_millis(),
        report.bytes as f64 / 1e6,
        report.bytes as f64 / 1e6 / report.elapsed.as_secs_f64().max(1e-9),
        addresses.join(", ")
    );
    let server = server.run();
    stop_gracefully_on_signals(vec![server.handle(), admin.handle()])
        .context("cannot listen for SIGTERM and SIGINT")?;
    actix_web::rt::spawn(admin);
    server.await.context("the HTTP server failed")
}

/// A listening socket as actix-web's own server makes it: address reuse, and a
/// backlog deep enough for a burst of dashboards connecting at once.
fn listen(address: &str) -> anyhow::Result<std::net::TcpListener> {
    let context = || format!("cannot listen on {address}");
    let resolved = address
        .to_socket_addrs()
        .with_context(context)?
        .next()
        .with_context(context)?;
    let socket = Socket::new(
        Domain::for_address(resolved),
        Type::STREAM,
        Some(Protocol::TCP),
    )
    .with_context(context)?;
    socket.set_reuse_address(true).with_context(context)?;
    socket.bind(&resolved.into()).with_context(context)?;
    socket.listen(1024).with_context(context)?;
    Ok(socket.into())
}

/// The admin listener: Prometheus metrics at `GET /metrics`, on its own address so
/// that it can stay off the network the API faces.
fn admin_server(address: &str, metrics: Arc<Metrics>) -> anyhow::Result<actix_web::dev::Server> {
    let server = HttpServer::new(move || {
        let metrics = Arc::clone(&metrics);
        actix_web::App::new().route(
            "/metrics",
            web::get().to(move || {
                let text = metrics.render();
                async move {
                    actix_web::HttpResponse::Ok()
                        .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
                        .body(text)
                }
            }),
        )
    })
    .workers(1)
    .disable_signals()
    .bind(address)
    .with_context(|| format!("cannot listen on {address} for the admin listener"))?;
    for bound in server.addrs() {
        tracing::info!("metrics at http://{bound}/metrics");
    }
    Ok(server.run())
}

/// On SIGTERM or SIGINT: stop accepting, let the requests in flight finish, then
/// end the process.
fn stop_gracefully_on_signals(servers: Vec<actix_web::dev::ServerHandle>) -> std::io::Result<()> {
    use actix_web::rt::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    actix_web::rt::spawn(async move {
        let name = match futures_util::future::select(
            Box::pin(terminate.recv()),
            Box::pin(interrupt.recv()),
        )
        .await
        {
            futures_util::future::Either::Left(_) => "SIGTERM",
            futures_util::future::Either::Right(_) => "SIGINT",
        };
        tracing::info!("{name}: no new connections; finishing the requests in flight");
        futures_util::future::join_all(servers.iter().map(|server| server.stop(true))).await;
    });
    Ok(())
}
