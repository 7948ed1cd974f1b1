//! The answer to `GET /units` and `GET /metrics`, and to the summaries
//! (`/units/summary`, `/metrics/summary`, `/stations`), in the contract's order
//! (docs/api.md section 3): query length, token, parameters, then the engine's plan
//! (window, cursor, stations), the engine (whose scans and merge each take a query
//! slot, the first wait for one turning a query away), the body in the format asked
//! for (`format`: the envelope or CSV) in a slot of its own, and `If-None-Match`. The whole body is assembled before the response starts,
//! so an error can never follow a 200; sending it holds no slot (see `admission`).

use std::sync::Arc;
use std::time::Instant;

use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse};
use chrono::Utc;
use std::future::Future;

use stq_core::data::plan::Request;
use stq_core::domain::auth::Principal;
use stq_core::domain::query::{self, Endpoint};
use stq_core::domain::time::Timestamp;

use super::caching::{entity_tag, not_modified, IfNoneMatch};
use super::envelope::Meta;
use super::error::ApiError;
use super::fault;
use super::format::{self, Presentation, Written};
use super::request_id::RequestId;
use super::AppState;
use crate::engine::{Fault, Patience, RouterHandle, Slot};

/// How many records a response holds, for the access log and the metrics.
#[derive(Clone, Copy, Debug)]
pub(super) struct RecordCount(pub(super) usize);

/// The answer to a query, or `timeout` once `--request-timeout` has passed.
pub(super) async fn answer(
    endpoint: Endpoint,
    request: &HttpRequest,
    state: &AppState,
    router: &RouterHandle,
) -> Result<HttpResponse, ApiError> {
    in_time(state, |started| {
        answer_in_time(endpoint, request, state, router, started)
    })
    .await
}

/// `answering`'s answer, or `timeout` once `--request-timeout` has passed since it
/// started.
async fn in_time<F: Future<Output = Result<HttpResponse, ApiError>>>(
    state: &AppState,
    answering: impl FnOnce(Instant) -> F,
) -> Result<HttpResponse, ApiError> {
    let started = Instant::now();
    match actix_web::rt::time::timeout(state.admission.request_timeout(), answering(started)).await
    {
        Ok(answer) => answer,
        Err(_) => Err(state.admission.timed_out()),
    }
}

/// The checks every query passes first, in the contract's order: the query's
/// length, one `Authorization` header, a known token not expired when the request
/// `arrived`; and the fault a test asked for, if any.
fn authenticate(
    request: &HttpRequest,
    state: &AppState,
    arrived: Timestamp,
) -> Result<(Arc<Principal>, Option<Fault>), ApiError> {
    let engine = &state.engine;
    query::check_length(request.query_string(), engine.limits())?;
    let mut authorizations = request.headers().get_all(header::AUTHORIZATION);
    let authorization = authorizations.next().map(HeaderValue::as_bytes);
    if authorizations.next().is_some() {
        return Err(ApiError::InvalidRequest {
            reason: "more than one Authorization header",
        });
    }
    let principal = engine.tokens().authenticate(authorization, arrived)?;
    let fault = fault::requested(request.headers());
    if fault == Some(Fault::HandlerPanic) {
        panic!("the handler panics, as the request asked");
    }
    Ok((principal, fault))
}

/// The query slot the envelope is assembled in; then the delay a test may have
/// asked for, a slow stretch that holds its slot.
async fn assembly_slot<'state>(
    state: &'state AppState,
    patience: &Patience,
    fault: Option<Fault>,
) -> Result<Slot<'state>, ApiError> {
    let slot = state.engine.take_slot(patience).await?;
    if let Some(Fault::Delay(delay)) = fault {
        actix_web::rt::time::sleep(delay).await;
    }
    Ok(slot)
}

/// The 200 with the `written` answer, or 304 when `If-None-Match` names its tag.
/// The tag is the answer's own, so the answer must exist first; a match saves
/// the bytes on the wire. `*` matches any answer, but only an answer: not a
/// refusal.
fn respond(
    endpoint: Endpoint,
    presentation: &Presentation,
    request: &HttpRequest,
    written: Written,
    more: bool,
    count: usize,
) -> HttpResponse {
    let Written {
        body,
        hashed,
        content_type,
        headers,
    } = written;
    let etag = entity_tag(endpoint, presentation.format(), &body[hashed], more);
    let precondition = IfNoneMatch::of(request.headers());
    if precondition == IfNoneMatch::Any || precondition.names(&etag) {
        return not_modified(etag);
    }
    let mut response = HttpResponse::Ok();
    response
        .content_type(content_type)
        .insert_header((header::ETAG, etag));
    for header in headers {
        response.insert_header(header);
    }
    let mut response = response.body(body);
    response.extensions_mut().insert(RecordCount(count));
    response
}

/// The answer, for [`answer`] to bound in time.
async fn answer_in_time(
    endpoint: Endpoint,
    request: &HttpRequest,
    state: &AppState,
    router: &RouterHandle,
    started: Instant,
) -> Result<HttpResponse, ApiError> {
    let arrived = Timestamp::from(Utc::now());
    let deadline = state.admission.deadline(started);
    let request_id = RequestId::of(request);
    let engine = &state.engine;

    let (principal, fault) = authenticate(request, state, arrived)?;
    let params = query::parse(endpoint, request.query_string(), *engine.limits())?;
    let presentation = Presentation::of(request, endpoint, &params);
    let engine_error =
        |error| ApiError::from_engine(error, &request_id, state.admission.request_timeout());
    let query = Arc::new(Request {
        endpoint,
        params,
        principal,
        arrived,
    });
    let plan = engine.plan(&query).map_err(engine_error)?;

    let patience = Patience::default();
    let answer = router
        .execute(
            query,
            plan,
            deadline,
            patience.clone(),
            Fault::in_shard(fault),
        )
        .await
        .map_err(engine_error)?;

    let slot = assembly_slot(state, &patience, fault).await?;
    let meta = Meta {
        timestamp: Utc::now(),
        request_id: &request_id,
        query_duration_ms: started.elapsed().as_millis() as u64,
        // With `limit` (records only), always there: the cursor, or null on the
        // last page.
        next_cursor: answer.next_cursor(),
    };
    let (more, count) = (meta.next_cursor.flatten().is_some(), answer.count());
    let written = format::write(&presentation, endpoint, request, &answer, &meta);
    drop(slot);
    // Assembly runs on this thread without a pause the timer could act in.
    if Instant::now() > deadline {
        return Err(state.admission.timed_out());
    }
    Ok(respond(
        endpoint,
        &presentation,
        request,
        written,
        more,
        count,
    ))
}
