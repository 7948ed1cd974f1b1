//! The HTTP API: routes, request ids, and the answer to `GET /units` and
//! `GET /metrics` from authentication to the envelope. Only this module (with the
//! error mapping in `error`) speaks JSON to clients.
//!
//! A request is checked in the contract's order (section 3): route, method, token,
//! parameters, stations, then size. The whole body is assembled before the response
//! starts, so an error can never follow a 200.

use std::hash::{Hash as _, Hasher as _};
use std::sync::Arc;
use std::time::Instant as Stopwatch;

use actix_cors::Cors;
use actix_web::body::EitherBody;
use actix_web::body::MessageBody;
use actix_web::dev::{Service as _, ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::error::InternalError;
use actix_web::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::{Compress, Condition};
use actix_web::{web, App, HttpMessage, HttpRequest, HttpResponse, ResponseError as _};
use chrono::Utc;
use parking_lot::RwLock;
use serde::Serialize;

use crate::auth::{Principal, Scope, Tokens};
use crate::cursor::{Cursor, CursorKey};
use crate::error::{Error, JSON};
use crate::index::{Catalog, Matcher, RecordFilter};
use crate::metrics::{endpoint_label, EndpointLabels, Metrics, RequestLabels};
use crate::model::Kind;
use crate::query::{self, Limits, QueryParams};
use crate::router::{EngineQuery, QueryResult, RouterHandle};
use crate::shard::ShardError;
use crate::time::{timestamp_millis_utc, Instant};

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
        }
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

/// How many records a response holds, for the access log and the metrics.
#[derive(Clone, Copy, Debug)]
struct RecordCount(usize);

/// A request being answered, as the access log and the metrics see it.
struct Access {
    request_id: String,
    method: Method,
    /// Without the query string: a token pasted into a URL must not reach a log.
    path: String,
    started: Stopwatch,
}

impl Access {
    fn begin(request: &ServiceRequest, request_id: String) -> Access {
        Access {
            request_id,
            method: request.method().clone(),
            path: request.path().to_owned(),
            started: Stopwatch::now(),
        }
    }

    /// One access line, and the request counted.
    fn end(self, metrics: &Metrics, status: StatusCode, records: usize) {
        let elapsed = self.started.elapsed();
        tracing::info!(
            target: "stq::access",
            request_id = %self.request_id,
            method = %self.method,
            path = %self.path,
            status = status.as_u16(),
            records,
            duration_ms = elapsed.as_secs_f64() * 1e3,
            "request"
        );
        let endpoint = endpoint_label(&self.path);
        metrics
            .requests
            .get_or_create(&RequestLabels {
                endpoint,
                status: status.as_u16(),
            })
            .inc();
        metrics
            .request_duration
            .get_or_create(&EndpointLabels { endpoint })
            .observe(elapsed.as_secs_f64());
        if records > 0 {
            metrics
                .records_returned
                .get_or_create(&EndpointLabels { endpoint })
                .inc_by(records as u64);
        }
    }
}

/// CORS for the listed origins (`*` for any): GET and HEAD with `Authorization`.
fn cors(origins: &[String]) -> Cors {
    let cors = origins
        .iter()
        .fold(Cors::default(), |cors, origin| match origin.as_str() {
            "*" => cors.allow_any_origin(),
            origin => cors.allowed_origin(origin),
        });
    cors.allowed_methods([Method::GET, Method::HEAD])
        .allowed_header(header::AUTHORIZATION)
        .max_age(600)
}

/// An OPTIONS that asks for CORS permission. Without an `Origin` it can never be
/// granted, and is refused like any other OPTIONS.
fn is_preflight(request: &ServiceRequest) -> bool {
    request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

fn origin_listed(origins: &[String], headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return false;
    };
    origins
        .iter()
        .any(|listed| listed == "*" || listed.as_bytes() == origin.as_bytes())
}

/// A listed origin's preflight, as actix-cors answered it: 204 when it allowed the
/// request, else the 405 any other OPTIONS gets, with the contract's error body.
fn answer_preflight<B>(mut response: ServiceResponse<B>) -> ServiceResponse<EitherBody<B>> {
    if response.status().is_success() {
        *response.response_mut().status_mut() = StatusCode::NO_CONTENT;
        response.map_into_left_body()
    } else {
        response
            .into_response(Error::MethodNotAllowed.error_response())
            .map_into_right_body()
    }
}

/// What every response carries (CONTRACT sections 7 and 8). Set after compression,
/// so that `Vary` is exactly the contract's.
fn common_headers(headers: &mut HeaderMap, request_id: &str) {
    let request_id = HeaderValue::from_str(request_id).expect("request ids are visible ASCII");
    headers.insert(X_REQUEST_ID, request_id);
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-cache"),
    );
    headers.insert(
        header::VARY,
        HeaderValue::from_static("Authorization, Accept-Encoding"),
    );
}

fn endpoint(path: &str, kind: Kind) -> actix_web::Resource {
    get_and_head(
        path,
        move |request: HttpRequest, state: web::Data<AppState>, router: web::Data<RouterHandle>| async move {
            answer(kind, &request, &state, &router).await
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
const OPENAPI: &str = include_str!("openapi.json");

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

async fn answer(
    kind: Kind,
    request: &HttpRequest,
    state: &AppState,
    router: &RouterHandle,
) -> Result<HttpResponse, Error> {
    let started = Stopwatch::now();
    let arrived = Instant::now();
    let request_id = request
        .extensions()
        .get::<RequestId>()
        .map_or_else(|| request_id(request.headers()), |id| id.0.clone());

    let principal = state.tokens().authenticate(
        request
            .headers()
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes),
    )?;
    let params = query::parse(kind, request.query_string(), state.limits)?;
    // A request is answered from the one generation it planned on. Only if two
    // reloads pass while it is in flight has that generation left the shards; it is
    // then planned once more, on the current one.
    let precondition = IfNoneMatch::of(request.headers());
    let mut retried = false;
    let (plan, mut result, etag) = loop {
        let catalog = state.catalog();
        let plan = plan(kind, &params, &principal, state, catalog, arrived)?;
        let etag = entity_tag(state.boot, kind, &plan, &params, &principal.scope);
        // A tag can only come from a 200 to this same query over this generation and
        // scope, which would be a 200 again: the shards need not be asked.
        if precondition.names(&etag) {
            return Ok(not_modified(etag));
        }
        match router.execute(plan.query.clone()).await {
            Ok(result) => break (plan, result, etag),
            Err(ShardError::OtherGeneration { .. }) if !retried => retried = true,
            Err(error) => {
                tracing::error!(request_id = %request_id, %error, "query failed");
                return Err(Error::Internal { request_id });
            }
        }
    };

    let next_cursor = match params.limit {
        None if result.len() > state.limits.max_records => {
            return Err(Error::ResultTooLarge {
                max_records: state.limits.max_records,
            })
        }
        None => None,
        Some(limit) if result.len() > limit => {
            result.truncate(limit);
            let after = result
                .last_position()
                .expect("a full page has a last record");
            let cursor = Cursor {
                kind,
                generation: plan.query.catalog.generation,
                window: plan.query.window,
                after,
            };
            let scope = plan
                .scope
                .as_deref()
                .expect("paged queries have a cursor scope");
            Some(cursor.encode(&state.cursor_key, scope))
        }
        Some(_) => None,
    };
    // `*` matches any current answer, but only an answer: not a refusal.
    if precondition == IfNoneMatch::Any {
        return Ok(not_modified(etag));
    }

    let meta = Meta {
        timestamp: timestamp_millis_utc(Utc::now()),
        request_id: &request_id,
        query_duration_ms: started.elapsed().as_millis() as u64,
        next_cursor: next_cursor.as_deref(),
    };
    let body = envelope(kind, &result, &meta);
    let mut response = HttpResponse::Ok()
        .content_type(JSON)
        .insert_header((header::ETAG, etag))
        .body(body);
    response.extensions_mut().insert(RecordCount(result.len()));
    Ok(response)
}

/// A weak ETag that changes exactly when the response's `data` or `next_cursor`
/// could: it hashes the generation, the endpoint, the normalized query with its
/// window resolved, the page's start and size, and the token's station scope (not
/// the token: two tokens that see the same stations share cached answers).
fn entity_tag(boot: u64, kind: Kind, plan: &Plan, params: &QueryParams, scope: &Scope) -> String {
    let mut hasher = std::hash::DefaultHasher::new();
    (
        boot,
        plan.query.catalog.generation,
        kind,
        plan.query.window,
        plan.query.after,
        params.limit,
        &params.station_ids,
        &params.unit_types,
        &params.unit_serial,
        params.directions,
        &params.names,
        scope,
    )
        .hash(&mut hasher);
    format!("W/\"{:016x}\"", hasher.finish())
}

/// A request's `If-None-Match`: the tags it names (compared weakly), or `*`.
#[derive(Debug, PartialEq, Eq)]
enum IfNoneMatch {
    Absent,
    Tags(Vec<String>),
    Any,
}

impl IfNoneMatch {
    fn of(headers: &HeaderMap) -> IfNoneMatch {
        let mut tags = Vec::new();
        for value in headers.get_all(header::IF_NONE_MATCH) {
            for tag in value.to_str().unwrap_or_default().split(',') {
                match tag.trim() {
                    "*" => return IfNoneMatch::Any,
                    "" => {}
                    tag => tags.push(opaque_tag(tag).to_owned()),
                }
            }
        }
        if tags.is_empty() {
            IfNoneMatch::Absent
        } else {
            IfNoneMatch::Tags(tags)
        }
    }

    fn names(&self, etag: &str) -> bool {
        matches!(self, IfNoneMatch::Tags(tags) if tags.iter().any(|tag| tag == opaque_tag(etag)))
    }
}

/// A tag without its weakness mark: weak comparison ignores it.
fn opaque_tag(tag: &str) -> &str {
    tag.strip_prefix("W/").unwrap_or(tag)
}

fn not_modified(etag: String) -> HttpResponse {
    HttpResponse::NotModified()
        .insert_header((header::ETAG, etag))
        .finish()
}

/// A request turned into an engine query, and, for a paged one, the scope its
/// cursors are sealed to.
struct Plan {
    query: EngineQuery,
    scope: Option<Vec<u8>>,
}

fn plan(
    kind: Kind,
    params: &QueryParams,
    principal: &Principal,
    state: &AppState,
    catalog: Arc<Catalog>,
    arrived: Instant,
) -> Result<Plan, Error> {
    // Only pages have cursors (a cursor without `limit` was refused already).
    let scope = params.limit.map(|_| cursor_scope(kind, params, principal));
    let (window, after) = match (&params.cursor, &scope) {
        (Some(text), Some(scope)) => {
            let cursor = Cursor::decode(text, &state.cursor_key, scope)?;
            if cursor.kind != kind || cursor.generation != catalog.generation {
                return Err(Error::InvalidCursor {
                    reason: "it belongs to another endpoint or data generation",
                });
            }
            let window = if params.has_window() {
                let window = params.window(arrived)?;
                if window != cursor.window {
                    return Err(Error::InvalidCursor {
                        reason: "the window differs from the one the cursor was made for",
                    });
                }
                window
            } else {
                cursor.window
            };
            (window, Some(cursor.after))
        }
        _ => (params.window(arrived)?, None),
    };

    let stations = match &params.station_ids {
        Some(requested) => {
            let forbidden: Vec<String> = requested
                .iter()
                .filter(|station| !principal.scope.allows(station))
                .cloned()
                .collect();
            if !forbidden.is_empty() {
                return Err(Error::Forbidden {
                    stations: forbidden,
                });
            }
            requested
                .iter()
                .filter_map(|station| catalog.rank(station))
                .collect()
        }
        None => match &principal.scope {
            Scope::All => (0..catalog.stations.len() as u32).collect(),
            Scope::Stations(allowed) => allowed
                .iter()
                .filter_map(|station| catalog.rank(station))
                .collect(),
        },
    };

    let symbols = |texts: &[String]| -> Matcher {
        if texts.is_empty() {
            Matcher::Any
        } else {
            Matcher::OneOf(
                texts
                    .iter()
                    .filter_map(|text| catalog.symbols.lookup(text))
                    .collect(),
            )
        }
    };
    let filter = match kind {
        Kind::Units => RecordFilter::Units {
            unit_types: symbols(&params.unit_types),
            unit_serial: params
                .unit_serial
                .as_ref()
                .map_or(Matcher::Any, |serial| symbols(std::slice::from_ref(serial))),
            directions: params.directions,
        },
        Kind::Metrics => RecordFilter::Metrics {
            names: symbols(&params.names),
        },
    };

    let cap = params.limit.unwrap_or(state.limits.max_records) + 1;
    Ok(Plan {
        query: EngineQuery {
            catalog,
            stations,
            window,
            after,
            filter,
            cap,
        },
        scope,
    })
}

/// What a cursor is sealed to besides its own payload: the endpoint, the token and
/// every normalized filter but the window (which the payload pins).
fn cursor_scope(kind: Kind, params: &QueryParams, principal: &Principal) -> Vec<u8> {
    #[derive(Serialize)]
    struct ScopeOf<'a> {
        endpoint: &'static str,
        token: [u8; 32],
        station_ids: &'a Option<Vec<String>>,
        unit_types: &'a [String],
        unit_serial: &'a Option<String>,
        directions: [bool; 2],
        names: &'a [String],
    }
    serde_json::to_vec(&ScopeOf {
        endpoint: kind.path(),
        token: principal.digest,
        station_ids: &params.station_ids,
        unit_types: &params.unit_types,
        unit_serial: &params.unit_serial,
        directions: if kind == Kind::Units {
            params.directions
        } else {
            [false; 2]
        },
        names: &params.names,
    })
    .expect("serializing plain data cannot fail")
}

/// The envelope's `meta` (CONTRACT section 7).
#[derive(Serialize)]
pub struct Meta<'a> {
    pub timestamp: String,
    pub request_id: &'a str,
    pub query_duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<&'a str>,
}

/// Assembles the success body from the records' pre-rendered JSON.
pub fn envelope(kind: Kind, result: &QueryResult, meta: &Meta) -> Vec<u8> {
    assemble(kind, result.len(), result.records(), meta)
}

/// `{"data":[...],"message":"...","meta":{...}}` around records rendered at load.
pub fn assemble<'a>(
    kind: Kind,
    count: usize,
    records: impl Iterator<Item = &'a [u8]> + Clone,
    meta: &Meta,
) -> Vec<u8> {
    let records_bytes: usize = records.clone().map(<[u8]>::len).sum();
    let mut body = Vec::with_capacity(records_bytes + count + 256);
    body.extend_from_slice(b"{\"data\":[");
    for (index, record) in records.enumerate() {
        if index > 0 {
            body.push(b',');
        }
        body.extend_from_slice(record);
    }
    body.extend_from_slice(b"],\"message\":");
    let plural = if count == 1 { "" } else { "s" };
    let message = format!("{count} {} record{plural}", kind.noun());
    serde_json::to_writer(&mut body, &message).expect("writing to a Vec cannot fail");
    body.extend_from_slice(b",\"meta\":");
    serde_json::to_writer(&mut body, meta).expect("writing to a Vec cannot fail");
    body.push(b'}');
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

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

    #[test]
    fn the_envelope_wraps_records_as_they_were_rendered() {
        let records = [&br#"{"a":1}"#[..], &br#"{"b":"2"}"#[..]];
        let meta = Meta {
            timestamp: "2024-01-01T00:00:00.000Z".into(),
            request_id: "id\"quoted",
            query_duration_ms: 3,
            next_cursor: Some("abc"),
        };
        let body = assemble(Kind::Units, 2, records.iter().copied(), &meta);
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            value,
            json!({"data": [{"a": 1}, {"b": "2"}], "message": "2 unit records",
                   "meta": {"timestamp": "2024-01-01T00:00:00.000Z", "request_id": "id\"quoted",
                            "query_duration_ms": 3, "next_cursor": "abc"}})
        );
        let single = Meta {
            next_cursor: None,
            ..meta
        };
        let body = assemble(Kind::Metrics, 1, records[..1].iter().copied(), &single);
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["message"], "1 metric record");
        assert!(value["meta"].get("next_cursor").is_none());
        let empty = assemble(Kind::Metrics, 0, std::iter::empty(), &single);
        assert!(empty.starts_with(br#"{"data":[],"message":"0 metric records""#));
    }
}
