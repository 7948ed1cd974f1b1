//! The HTTP layer: the actix-web application, and the only code that speaks HTTP
//! or the contract's JSON to clients.
//!
//! A request to `/units` or `/metrics` goes: `middleware` (request id, access
//! line, metrics, CORS, the headers of every response) → `answer` (limits, token,
//! parameters, plan, the engine, the body in a query slot, `If-None-Match`;
//! `admission` says what holds a slot) → back out through the middleware. The
//! body's format is one seam, `format`: the envelope from `envelope`, or CSV,
//! which the answer writes itself. Every error becomes the contract's body in `error` ([`ApiError`]),
//! the one place codes are given. `server` assembles the listeners, with client
//! deadlines from `connection`; `admin` answers the admin listener's `/files`.

mod admin;
mod admission;
mod answer;
mod caching;
mod connection;
mod envelope;
mod error;
mod fault;
mod format;
mod middleware;
mod request_id;
mod server;
mod stream;
mod ui;
mod wait;

pub use admission::Admission;
pub use envelope::{envelope, Meta};
pub use error::ApiError;
pub use server::{admin_server, api_server, stop_gracefully_on_signals};
pub use wait::LiveState;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::middleware::{Compress, Condition};
use actix_web::{web, App, HttpRequest, HttpResponse};
use futures_util::FutureExt as _;

use crate::engine::{Engine, RouterHandle};
use crate::metrics::Metrics;
use crate::store::StoreStatus;
use error::JSON;
use request_id::RequestId;
use stq_core::domain::Endpoint;
use wait::answer;

/// What every worker shares: the engine (which holds the current generation and
/// its tokens) and the HTTP layer's settings.
pub struct AppState {
    engine: Engine,
    metrics: Arc<Metrics>,
    /// Origins allowed by CORS; none by default.
    cors_origins: Vec<String>,
    /// The queries' deadline.
    admission: Admission,
    /// What `/readyz` says of the store (`off` without `--store`).
    store: Arc<StoreStatus>,
    /// Held requests and streams.
    live: LiveState,
}

impl AppState {
    pub fn new(engine: Engine) -> AppState {
        AppState {
            engine,
            metrics: Arc::default(),
            cors_origins: Vec::new(),
            admission: Admission::default(),
            store: Arc::default(),
            live: LiveState::default(),
        }
    }

    pub fn with_live(self, live: LiveState) -> AppState {
        AppState { live, ..self }
    }

    pub fn with_store_status(self, store: Arc<StoreStatus>) -> AppState {
        AppState { store, ..self }
    }

    pub fn with_metrics(self, metrics: Arc<Metrics>) -> AppState {
        AppState { metrics, ..self }
    }

    pub fn with_admission(self, admission: Admission) -> AppState {
        AppState { admission, ..self }
    }

    pub fn with_cors_origins(self, cors_origins: Vec<String>) -> AppState {
        AppState {
            cors_origins,
            ..self
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}

/// The application: routes, the middleware, shared state and this worker's router.
pub fn app(
    state: web::Data<AppState>,
    router: RouterHandle,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let origins: Arc<[String]> = state.cors_origins.clone().into();
    let tally = state.metrics.requests.worker();
    App::new()
        .app_data(state)
        .app_data(web::Data::new(router))
        .configure(|config| {
            for endpoint in Endpoint::ALL {
                config.service(query_endpoint(endpoint));
            }
            stream::routes(config);
        })
        .service(get_and_head("/healthz", health))
        .service(get_and_head("/readyz", readiness))
        .service(get_and_head("/openapi.json", openapi))
        .configure(ui::routes)
        .default_service(web::to(|| async {
            Err::<HttpResponse, _>(ApiError::NotFound)
        }))
        .wrap(Compress::default())
        .wrap(Condition::new(
            !origins.is_empty(),
            middleware::cors(&origins),
        ))
        .wrap_fn(move |request, service| middleware::around(request, service, &origins, &tally))
}

/// An endpoint of the API, answered on GET and HEAD.
fn query_endpoint(endpoint: Endpoint) -> actix_web::Resource {
    get_and_head(
        endpoint.spec().path,
        move |request: HttpRequest, state: web::Data<AppState>, router: web::Data<RouterHandle>| async move {
            // Boxed once where it is made: the answer's future is about 4 KB, and
            // each wrapper actix and `isolated` put around it would copy it again
            // (memmove rose from 6% to 10% of a dashboard's small query's CPU).
            isolated(
                &request,
                Box::pin(answer(endpoint, &request, &state, &router)),
            )
            .await
        },
    )
}

/// A panic (a bug) fails this request alone, with a 500 that names its id; the
/// panic hook has logged the panic itself.
async fn isolated(
    request: &HttpRequest,
    answering: impl std::future::Future<Output = Result<HttpResponse, ApiError>>,
) -> Result<HttpResponse, ApiError> {
    match AssertUnwindSafe(answering).catch_unwind().await {
        Ok(answer) => answer,
        Err(panic) => {
            let request_id = RequestId::of(request);
            tracing::error!(
                request_id = %request_id,
                panic = crate::engine::panic_message(&*panic),
                "a query panicked; answered 500"
            );
            Err(ApiError::Internal {
                request_id: request_id.to_string(),
            })
        }
    }
}

/// A path answered on GET and HEAD, and 405 to any other method.
fn get_and_head<F, Args>(path: &str, handler: F) -> actix_web::Resource
where
    F: actix_web::Handler<Args> + Clone,
    Args: actix_web::FromRequest + 'static,
    F::Output: actix_web::Responder + 'static,
{
    web::resource(path)
        .route(web::get().to(handler.clone()))
        .route(web::head().to(handler))
        .default_service(web::to(|| async {
            Err::<HttpResponse, _>(ApiError::MethodNotAllowed)
        }))
}

/// `GET /healthz`: the process serves.
async fn health() -> HttpResponse {
    HttpResponse::Ok()
        .content_type(JSON)
        .body(r#"{"status":"ok"}"#)
}

/// The OpenAPI 3.1 document of the API as built; the tests validate real responses
/// against it.
const OPENAPI: &str = include_str!("openapi.json");

/// `GET /openapi.json`: no token needed.
async fn openapi() -> HttpResponse {
    HttpResponse::Ok().content_type(JSON).body(OPENAPI)
}

/// `GET /readyz`: which generation is served, and what its load found. The server
/// binds only once the first snapshot has loaded, so it is always ready here.
async fn readiness(state: web::Data<AppState>) -> HttpResponse {
    let catalog = state.engine.catalog();
    let summary = &catalog.summary;
    let body = serde_json::json!({
        "status": "ready",
        "generation": catalog.generation(),
        "loaded_at": summary.loaded_at,
        "units": summary.units,
        "metrics": summary.metrics,
        "stations": catalog.stations().len(),
        "skipped_lines": summary.skipped_lines,
        "pending_lines": summary.pending_lines,
        "held_files": summary.held_files,
        "store": state.store.name(),
    });
    HttpResponse::Ok().content_type(JSON).body(body.to_string())
}
