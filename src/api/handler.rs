//! The answer to `GET /units` and `GET /metrics`: from authentication to the
//! envelope, in the contract's order, and the plan of the engine query.

use std::sync::Arc;
use std::time::Instant as Stopwatch;

use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse};
use chrono::Utc;
use serde::Serialize;

use crate::auth::{Principal, Scope};
use crate::cursor::Cursor;
use crate::error::{Error, JSON};
use crate::fault::Fault;
use crate::index::{Catalog, Matcher, RecordFilter};
use crate::model::Kind;
use crate::query::{self, QueryParams};
use crate::router::{EngineQuery, RouterHandle};
use crate::shard::ShardError;
use crate::time::{timestamp_millis_utc, Instant};

use super::caching::{entity_tag, not_modified, IfNoneMatch};
use super::envelope::{envelope, Meta};
use super::middleware::RecordCount;
use super::{AppState, RequestId};

pub(super) async fn answer(
    kind: Kind,
    request: &HttpRequest,
    state: &AppState,
    router: &RouterHandle,
) -> Result<HttpResponse, Error> {
    let started = Stopwatch::now();
    let deadline = state.admission.deadline(started);
    let answering = answer_by(kind, request, state, router, started, deadline);
    match actix_web::rt::time::timeout(state.admission.request_timeout(), answering).await {
        Ok(answer) => answer,
        Err(_) => Err(state.admission.timed_out()),
    }
}

/// The answer, for `answer` to bound in time.
async fn answer_by(
    kind: Kind,
    request: &HttpRequest,
    state: &AppState,
    router: &RouterHandle,
    started: Stopwatch,
    deadline: Stopwatch,
) -> Result<HttpResponse, Error> {
    let arrived = Instant::now();
    let request_id = RequestId::of(request);

    query::check_length(request.query_string(), &state.limits)?;
    let mut authorizations = request.headers().get_all(header::AUTHORIZATION);
    let authorization = authorizations.next().map(HeaderValue::as_bytes);
    if authorizations.next().is_some() {
        return Err(Error::InvalidRequest {
            reason: "more than one Authorization header",
        });
    }
    let principal = state.tokens().authenticate(authorization)?;
    let fault = Fault::of(request.headers());
    if fault == Some(Fault::HandlerPanic) {
        panic!("the handler panics, as the request asked");
    }
    let params = query::parse(kind, request.query_string(), state.limits)?;
    // A request is answered from the one generation it planned on. Only if two
    // reloads pass while it is in flight has that generation left the shards; it is
    // then planned once more, on the current one.
    let precondition = IfNoneMatch::of(request.headers());
    let mut retried = false;
    // Taken at the first engine call: refusals and 304s cost no permit.
    let mut permit = None;
    let (plan, mut result, etag) = loop {
        let catalog = state.catalog();
        let plan = plan(kind, &params, &principal, state, catalog, arrived)?;
        let etag = entity_tag(state.boot, kind, &plan, &params, &principal.scope);
        // A tag can only come from a 200 to this same query over this generation and
        // scope, which would be a 200 again: the shards need not be asked.
        if precondition.names(&etag) {
            return Ok(not_modified(etag));
        }
        if permit.is_none() {
            permit = Some(state.admission.enter().await?);
            if let Some(Fault::Delay(delay)) = fault {
                actix_web::rt::time::sleep(delay).await;
            }
        }
        match router
            .execute(plan.query.clone(), deadline, Fault::in_shard(fault))
            .await
        {
            Ok(result) => break (plan, result, etag),
            Err(ShardError::OtherGeneration { .. }) if !retried => retried = true,
            Err(ShardError::Expired) => return Err(state.admission.timed_out()),
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
    drop(permit);
    // Assembly runs on this thread without a pause the timer could act in.
    if Stopwatch::now() > deadline {
        return Err(state.admission.timed_out());
    }
    let mut response = HttpResponse::Ok()
        .content_type(JSON)
        .insert_header((header::ETAG, etag))
        .body(body);
    response.extensions_mut().insert(RecordCount(result.len()));
    Ok(response)
}

/// A request turned into an engine query, and, for a paged one, the scope its
/// cursors are sealed to.
pub(super) struct Plan {
    pub(super) query: EngineQuery,
    pub(super) scope: Option<Vec<u8>>,
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
                let window = params.window(arrived, state.limits.max_window)?;
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
        _ => (params.window(arrived, state.limits.max_window)?, None),
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
