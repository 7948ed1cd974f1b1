//! The listeners: the API's, assembled from actix-server and actix-http around the
//! client deadlines of [`connection`](super::connection), and the admin listener
//! that serves the metrics and the files' states ([`admin`](super::admin)); and the
//! graceful stop on SIGTERM and SIGINT.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs as _};
use std::sync::Arc;
use std::time::Duration;

use actix_http::{error::DispatchError, HttpService, Protocol};
use actix_service::{fn_service, map_config, ServiceFactoryExt as _};
use actix_web::dev::AppConfig;
use actix_web::rt::net::TcpStream;
use actix_web::rt::time::timeout;
use actix_web::{web, HttpServer};
use anyhow::Context as _;
use socket2::{Domain, Socket, Type};
use tokio_rustls::TlsAcceptor;

use super::connection::Deadlined;
use super::{admin, app, AppState};
use crate::engine::Engine;
use crate::metrics::Metrics;
use crate::tls::Certificates;

/// The API listener on `address`, with `workers` HTTP workers, each with a router
/// of its own; HTTPS with `certificates`; not yet running. Returns the address it
/// is bound to.
pub fn api_server(
    address: &str,
    workers: usize,
    client_timeout: Duration,
    certificates: Option<Arc<Certificates>>,
    state: web::Data<AppState>,
) -> anyhow::Result<(actix_server::Server, SocketAddr)> {
    let listener = listen(address)?;
    let address = listener.local_addr()?;
    if let Some(certificates) = certificates {
        return https_server(listener, workers, client_timeout, &certificates, state);
    }
    // actix-web's HttpServer would do this assembly, but it has no place to wrap the
    // socket, which the client deadlines need (see `connection`).
    let server = actix_server::Server::build()
        .workers(workers)
        // actix-server stops at once on SIGINT; the contract wants both graceful.
        .disable_signals()
        .listen("stq", listener, move || {
            let app = app(state.clone(), state.engine().router());
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
        })?
        .run();
    Ok((server, address))
}

/// The API listener of [`api_server`] over TLS: the handshake bounded by the client
/// timeout, then HTTP/2 or HTTP/1.1 as ALPN chose, the client deadlines over the
/// decrypted bytes.
fn https_server(
    listener: std::net::TcpListener,
    workers: usize,
    client_timeout: Duration,
    certificates: &Arc<Certificates>,
    state: web::Data<AppState>,
) -> anyhow::Result<(actix_server::Server, SocketAddr)> {
    let address = listener.local_addr()?;
    let acceptor = TlsAcceptor::from(Arc::new(certificates.server_config()));
    let server = actix_server::Server::build()
        .workers(workers)
        .disable_signals()
        .listen("stq-https", listener, move || {
            let app = app(state.clone(), state.engine().router());
            let acceptor = acceptor.clone();
            fn_service(move |stream: TcpStream| {
                let acceptor = acceptor.clone();
                async move {
                    let _ = stream.set_nodelay(true);
                    let peer = stream.peer_addr().ok();
                    let stream = timeout(client_timeout, acceptor.accept(stream))
                        .await
                        .map_err(|_| {
                            DispatchError::Io(io::Error::new(
                                io::ErrorKind::TimedOut,
                                "TLS handshake too slow",
                            ))
                        })?
                        .map_err(DispatchError::Io)?;
                    let (protocol, stream) = match stream.get_ref().1.alpn_protocol() {
                        Some(b"h2") => (
                            Protocol::Http2,
                            Deadlined::writes_only(stream, client_timeout),
                        ),
                        _ => (Protocol::Http1, Deadlined::new(stream, client_timeout)),
                    };
                    Ok::<_, DispatchError>((stream, protocol, peer))
                }
            })
            .and_then(
                HttpService::build()
                    .keep_alive(client_timeout)
                    .client_request_timeout(client_timeout)
                    .client_disconnect_timeout(Duration::from_secs(1))
                    .local_addr(address)
                    .secure()
                    .finish(map_config(app, |_| AppConfig::default())),
            )
        })?
        .run();
    Ok((server, address))
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
        Some(socket2::Protocol::TCP),
    )
    .with_context(context)?;
    socket.set_reuse_address(true).with_context(context)?;
    socket.bind(&resolved.into()).with_context(context)?;
    socket.listen(1024).with_context(context)?;
    Ok(socket.into())
}

/// The admin listener: Prometheus metrics at `GET /metrics` and the snapshot
/// files' states at `GET /files`, on its own address so that it can stay off the
/// network the API faces.
pub fn admin_server(
    address: &str,
    metrics: Arc<Metrics>,
    engine: Engine,
) -> anyhow::Result<actix_web::dev::Server> {
    let server = HttpServer::new(move || {
        let metrics = Arc::clone(&metrics);
        let engine = engine.clone();
        actix_web::App::new()
            .route(
                "/metrics",
                web::get().to(move || {
                    let text = metrics.render();
                    async move {
                        actix_web::HttpResponse::Ok()
                            .content_type(
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )
                            .body(text)
                    }
                }),
            )
            .route(
                "/files",
                web::get().to(move || admin::files(engine.clone())),
            )
    })
    .workers(1)
    .disable_signals()
    .bind(address)
    .with_context(|| format!("cannot listen on {address} for the admin listener"))?;
    for bound in server.addrs() {
        tracing::info!("metrics at http://{bound}/metrics");
        tracing::info!("snapshot files' states at http://{bound}/files");
    }
    Ok(server.run())
}

/// On SIGTERM or SIGINT: stop accepting, let the requests in flight finish, then
/// end the process.
pub fn stop_gracefully_on_signals(
    engine: Engine,
    servers: Vec<actix_web::dev::ServerHandle>,
) -> io::Result<()> {
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
        crate::systemd::stopping();
        // Streams never end by themselves, and held requests may wait a minute:
        // each answers or closes now, so that the stop waits for no one.
        engine.stop_live();
        futures_util::future::join_all(servers.iter().map(|server| server.stop(true))).await;
    });
    Ok(())
}
