//! The HTTP API: routes, request ids, and the answer to `GET /units` and
//! `GET /metrics` from authentication to the envelope. Only this module (with the
//! error mapping in `error`) speaks JSON to clients.
//!
//! A request is checked in the contract's order (section 3): route, method, token,
//! parameters, stations, then size. The whole body is assembled before the response
//! starts, so an error can never follow a 200.
//!
//! The submodules: `middleware` gives every response its request id, cache headers,
//! access line and metrics, and does CORS; `handler` answers the two endpoints, with
//! `caching` for ETags and `If-None-Match`; `envelope` writes the success body.

mod admission;
mod caching;
mod envelope;
mod handler;
mod middleware;

pub use admission::{Admission, ADMISSION_WAIT};
pub use envelope::{assemble, envelope, Meta};

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use actix_web::body::MessageBody;
use actix_web::dev::{Service as _, ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::error::InternalError;
use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::middleware::{Compress, Condition};
use actix_web::{web, App, HttpMessage, HttpRequest, HttpResponse, ResponseError as _};
use futures_util::FutureExt as _;
use parking_lot::RwLock;

use crate::auth::Tokens;
use crate::cursor::CursorKey;
use crate::error::{panic_message, Error, JSON};
use crate::index::Catalog;
use crate::metrics::Metrics;
use crate::model::Kind;
use crate::query::Limits;
use crate::router::RouterHandle;

use handler::answer;
use middleware::{
    answer_preflight, common_headers, cors, is_preflight, origin_listed, Access, RecordCount,
};

pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// What every worker shares: the current generation's catalog and the tokens (both
/// swapped whole by a reload), and the settings.
pub struct AppState {
    catalog: RwLock<Arc<Catalog>>,
    tokens: RwLock<Arc<Tokens>>,
    pub limits: Limits,
    pub cursor_key: CursorKey,
    pub metrics: Arc<Metrics>,
    /// Origins allowed by CORS; none by default.
    pub cors_origins: Vec<String>,
    /// The cap on queries at once and their deadline.
    pub admission: Admission,
    /// Drawn at start-up and part of every ETag: generations count from 1 again
    /// after a restart, and a restarted server must not call a client's copy fresh.
    boot: u64,
}

impl AppState {
    pub fn new(
        catalog: Arc<Catalog>,
        tokens: Arc<Tokens>,
        limits: Limits,
        cursor_key: CursorKey,
    ) -> AppState {
        AppState {
            catalog: RwLock::new(catalog),
            tokens: RwLock::new(tokens),
            limits,
            cursor_key,
            boot: rand::random(),
            metrics: Arc::default(),
            cors_origins: Vec::new(),
            admission: Admission::default(),
        }
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

    /// The current generation's catalog; a request keeps the one it took first.
    pub fn catalog(&self) -> Arc<Catalog> {
        Arc::clone(&self.catalog.read())
    }

    pub fn tokens(&self) -> Arc<Tokens> {
        Arc::clone(&self.tokens.read())
    }

    /// Makes a new generation (already installed in every shard) and the tokens
    /// read with it current.
    pub fn swap(&self, catalog: Arc<Catalog>, tokens: Arc<Tokens>) {
        *self.tokens.write() = tokens;
        *self.catalog.write() = catalog;
    }
}

/// The request id of a request, set by the request-id middleware.
#[derive(Clone, Debug)]
pub struct RequestId(pub String);

impl RequestId {
    /// The id the middleware gave `request` (or, outside it, the one it would).
    pub fn of(request: &HttpRequest) -> String {
        request
            .extensions()
            .get::<RequestId>()
            .map_or_else(|| request_id(request.headers()), |id| id.0.clone())
    }
}

/// The application: routes, the request-id middleware, shared state and this
/// worker's router.
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
    let metrics = Arc::clone(&state.metrics);
    App::new()
        .app_data(state)
        .app_data(web::Data::new(router))
        .service(endpoint("/units", Kind::Units))
        .service(endpoint("/metrics", Kind::Metrics))
        .service(get_and_head("/healthz", health))
        .service(get_and_head("/readyz", readiness))
        .service(get_and_head("/openapi.json", openapi))
        .default_service(web::to(|| async {
            Err::<HttpResponse, _>(Error::NotFound)
        }))
        .wrap(Compress::default())
        .wrap(Condition::new(!origins.is_empty(), cors(&origins)))
        .wrap_fn(move |request, service| {
            let id = request_id(request.headers());
            request.extensions_mut().insert(RequestId(id.clone()));
            let access = Access::begin(&request, id);
            let preflight = is_preflight(&request);
            // An unlisted origin gets no CORS headers: its preflight is one more
            // OPTIONS, and that is a 405.
            let refused = preflight && !origin_listed(&origins, request.headers());
            let response = if refused {
                Err(request)
            } else {
                Ok(service.call(request))
            };
            let metrics = Arc::clone(&metrics);
            async move {
                let mut response = match response {
                    Err(request) => request
                        .error_response(Error::MethodNotAllowed)
                        .map_into_right_body(),
                    Ok(response) => match response.await {
                        Ok(response) if preflight => answer_preflight(response),
                        Ok(response) => response.map_into_left_body(),
                        // Errors normally arrive as responses; one that escapes as
                        // an error still leaves with the same headers.
                        Err(error) => {
                            let mut response = error.error_response();
                            common_headers(response.headers_mut(), &access.request_id);
                            access.end(&metrics, response.status(), 0);
                            return Err(InternalError::from_response(error, response).into());
                        }
                    },
                };
                // Compress refuses a request that excludes every coding, itself;
                // the refusal still gets the contract's error body.
                if response.status() == StatusCode::NOT_ACCEPTABLE {
                    response = response
                        .into_response(Error::NotAcceptable.error_response())
                        .map_into_right_body();
                }
                common_headers(response.headers_mut(), &access.request_id);
                let records = response
                    .response()
                    .extensions()
                    .get::<RecordCount>()
                    .map_or(0, |count| count.0);
                access.end(&metrics, response.status(), records);
                Ok(response)
            }
        })
}

fn endpoint(path: &str, kind: Kind) -> actix_web::Resource {
    get_and_head(
        path,
        move |request: HttpRequest, state: web::Data<AppState>, router: web::Data<RouterHandle>| async move {
            // A panic fails this request alone, with a 500 that names its id; the
            // panic hook has logged the panic itself.
            match AssertUnwindSafe(answer(kind, &request, &state, &router))
                .catch_unwind()
                .await
            {
                Ok(answer) => answer,
                Err(panic) => {
                    let request_id = RequestId::of(&request);
                    tracing::error!(
                        request_id = %request_id,
                        panic = panic_message(&*panic),
                        "a query panicked; answered 500"
                    );
                    Err(Error::Internal { request_id })
                }
            }
        },
    )
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
            Err::<HttpResponse, _>(Error::MethodNotAllowed)
        }))
}

/// `GET /healthz`: the process serves.
async fn health() -> HttpResponse {
    HttpResponse::Ok()
        .content_type(JSON)
        .body(r#"{"status":"ok"}"#)
}

/// The OpenAPI 3.1 document of the API as built; `tests/openapi.rs` validates real
/// responses against it.
const OPENAPI: &str = include_str!("../openapi.json");

/// `GET /openapi.json`: no token needed.
async fn openapi() -> HttpResponse {
    HttpResponse::Ok().content_type(JSON).body(OPENAPI)
}

/// `GET /readyz`: which generation is served, and what its load found. The server
/// binds only once the first snapshot has loaded, so it is always ready here.
async fn readiness(state: web::Data<AppState>) -> HttpResponse {
    let catalog = state.catalog();
    let summary = &catalog.summary;
    let body = serde_json::json!({
        "status": "ready",
        "generation": catalog.generation,
        "loaded_at": summary.loaded_at,
        "units": summary.units,
        "metrics": summary.metrics,
        "stations": catalog.stations.len(),
        "skipped_lines": summary.skipped_lines,
    });
    HttpResponse::Ok().content_type(JSON).body(body.to_string())
}

/// The client's `X-Request-Id` when it is 1 to 128 visible ASCII characters, else a
/// fresh UUID v4.
pub fn request_id(headers: &HeaderMap) -> String {
    headers
        .get(X_REQUEST_ID)
        .map(HeaderValue::as_bytes)
        .filter(|id| {
            (1..=128).contains(&id.len()) && id.iter().all(|byte| (b'!'..=b'~').contains(byte))
        })
        .and_then(|id| std::str::from_utf8(id).ok())
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_echoed_only_when_well_formed() {
        let with = |value: &[u8]| {
            let mut headers = HeaderMap::new();
            headers.insert(X_REQUEST_ID, HeaderValue::from_bytes(value).unwrap());
            request_id(&headers)
        };
        assert_eq!(with(b"abc-123"), "abc-123");
        assert_eq!(with(b"!\"~"), "!\"~");
        let long = "x".repeat(128);
        assert_eq!(with(long.as_bytes()), long);
        for bad in [&b"x".repeat(129)[..], b"a b", b"caf\xc3\xa9"] {
            let fresh = with(bad);
            assert!(uuid::Uuid::parse_str(&fresh).is_ok(), "{fresh}");
        }
        assert_eq!(request_id(&HeaderMap::new()).len(), 36);
    }
}
