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

use stq_core::data::{Answer, Request};
use stq_core::domain::time::Timestamp;
use stq_core::domain::{Endpoint, Principal, QueryParams};

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

/// The answer to a query as it is now, `wait` or not: 304 if `If-None-Match`
/// names its tag.
pub(super) async fn answer_now(
    endpoint: Endpoint,
    request: &HttpRequest,
    state: &AppState,
    router: &RouterHandle,
) -> Result<HttpResponse, ApiError> {
    Ok(evaluate(endpoint, request, state, router)
        .await?
        .respond(request))
}

/// The query evaluated as it is now, or `timeout` once `--request-timeout` has
/// passed, not yet written as a response.
pub(super) async fn evaluate(
    endpoint: Endpoint,
    request: &HttpRequest,
    state: &AppState,
    router: &RouterHandle,
) -> Result<Reply, ApiError> {
    in_time(state, |started| {
        evaluate_in_time(endpoint, request, state, router, started)
    })
    .await
}

/// `answering`'s answer, or `timeout` once `--request-timeout` has passed since it
/// started.
async fn in_time<T, F: Future<Output = Result<T, ApiError>>>(
    state: &AppState,
    answering: impl FnOnce(Instant) -> F,
) -> Result<T, ApiError> {
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
    engine.limits().check_length(request.query_string())?;
    let mut authorizations = request.headers().get_all(header::AUTHORIZATION);
    let authorization = authorizations.next().map(HeaderValue::as_bytes);
    if authorizations.next().is_some() {
        return Err(ApiError::InvalidRequest {
            reason: "more than one Authorization header",
        });
    }
    let principal = engine.authenticate(authorization, arrived)?;
    RequestId::set_holder(request, &principal);
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

/// What a request asks, once it passed its checks: the endpoint, the request as
/// planned, how its answer is written, and the fault a test asked for.
pub(super) struct Asked {
    pub(super) endpoint: Endpoint,
    pub(super) query: Arc<Request>,
    pub(super) presentation: Presentation,
    pub(super) fault: Option<Fault>,
}

/// An answer computed, and its tag: what held requests asking the same thing
/// share.
pub(super) struct Evaluated {
    pub(super) answer: Arc<Answer>,
    pub(super) etag: String,
    /// The generation it was read from (a page's; the catalog's for rows).
    pub(super) generation: u64,
    /// How long its query took.
    pub(super) query_duration_ms: u64,
}

/// A request's answer, written and ready to send.
pub(super) struct Reply {
    pub(super) asked: Asked,
    pub(super) evaluated: Evaluated,
    written: Written,
    count: usize,
}

impl Reply {
    /// The 200, or 304 when `If-None-Match` names its tag.
    pub(super) fn respond(self, request: &HttpRequest) -> HttpResponse {
        respond(self.evaluated.etag, request, self.written, self.count)
    }

    /// The 200, whatever `If-None-Match` says: a held request's new answer.
    pub(super) fn changed(self) -> HttpResponse {
        changed(self.evaluated.etag, self.written, self.count)
    }
}

/// The 200 with the `written` answer, or 304 when `If-None-Match` names its tag.
/// The tag is the answer's own, so the answer must exist first; a match saves
/// the bytes on the wire. `*` matches any answer, but only an answer: not a
/// refusal.
fn respond(etag: String, request: &HttpRequest, written: Written, count: usize) -> HttpResponse {
    let precondition = IfNoneMatch::of(request.headers());
    if precondition == IfNoneMatch::Any || precondition.names(&etag) {
        return not_modified(etag);
    }
    changed(etag, written, count)
}

fn changed(etag: String, written: Written, count: usize) -> HttpResponse {
    let Written {
        body,
        content_type,
        headers,
        ..
    } = written;
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

/// The answer, for [`answer`] to bound in time: the checks, then the query.
async fn evaluate_in_time(
    endpoint: Endpoint,
    request: &HttpRequest,
    state: &AppState,
    router: &RouterHandle,
    started: Instant,
) -> Result<Reply, ApiError> {
    let arrived = Timestamp::from(Utc::now());
    let engine = &state.engine;
    let (principal, fault) = authenticate(request, state, arrived)?;
    let params = QueryParams::parse(endpoint, request.query_string(), *engine.limits())?;
    let presentation = Presentation::of(request, endpoint, &params);
    let asked = Asked {
        endpoint,
        query: Arc::new(Request {
            endpoint,
            params,
            principal,
            arrived,
        }),
        presentation,
        fault,
    };
    let computed = compute(&asked, request, state, router, started).await?;
    write(asked, request, state, computed, started).await
}

/// The query's answer from the engine: planned on the current generation, asked
/// of the shards, merged; with the generation it was planned on, and the wait for
/// slots it began, which its assembly continues.
pub(super) async fn compute(
    asked: &Asked,
    request: &HttpRequest,
    state: &AppState,
    router: &RouterHandle,
    started: Instant,
) -> Result<(Arc<Answer>, u64, Patience), ApiError> {
    let deadline = state.admission.deadline(started);
    let request_id = RequestId::of(request);
    let engine = &state.engine;
    let engine_error =
        |error| ApiError::from_engine(error, &request_id, state.admission.request_timeout());
    let plan = engine.plan(&asked.query).map_err(engine_error)?;
    let generation = plan.generation();
    let patience = Patience::default();
    let answer = router
        .execute(
            Arc::clone(&asked.query),
            plan,
            deadline,
            patience.clone(),
            Fault::in_shard(asked.fault),
        )
        .await
        .map_err(engine_error)?;
    Ok((Arc::new(answer), generation, patience))
}

/// `answer` written for `request` as `asked` says, in a query slot of its own
/// (`patience` is the query's wait for slots so far).
pub(super) async fn write(
    asked: Asked,
    request: &HttpRequest,
    state: &AppState,
    (answer, generation, patience): (Arc<Answer>, u64, Patience),
    started: Instant,
) -> Result<Reply, ApiError> {
    let slot = assembly_slot(state, &patience, asked.fault).await?;
    let request_id = RequestId::of(request);
    let query_duration_ms = started.elapsed().as_millis() as u64;
    let reply = written(
        asked,
        request,
        answer,
        generation,
        &request_id,
        query_duration_ms,
    );
    drop(slot);
    // Assembly runs on this thread without a pause the timer could act in.
    if Instant::now() > state.admission.deadline(started) {
        return Err(state.admission.timed_out());
    }
    Ok(reply)
}

/// `evaluated`'s answer written again for another request that asked the same
/// (a held request of its group), in a query slot.
pub(super) async fn rewrite(
    asked: Asked,
    request: &HttpRequest,
    state: &AppState,
    evaluated: &Evaluated,
) -> Result<Reply, ApiError> {
    let slot = assembly_slot(state, &Patience::default(), None).await?;
    let request_id = RequestId::of(request);
    let reply = written(
        asked,
        request,
        Arc::clone(&evaluated.answer),
        evaluated.generation,
        &request_id,
        evaluated.query_duration_ms,
    );
    drop(slot);
    Ok(reply)
}

fn written(
    asked: Asked,
    request: &HttpRequest,
    answer: Arc<Answer>,
    generation: u64,
    request_id: &str,
    query_duration_ms: u64,
) -> Reply {
    let meta = Meta {
        timestamp: Utc::now(),
        request_id,
        query_duration_ms,
        // With `limit` (records only), always there: the cursor, or null on the
        // last page.
        next_cursor: answer.next_cursor(),
    };
    let (more, count) = (meta.next_cursor.flatten().is_some(), answer.count());
    let written = format::write(&asked.presentation, asked.endpoint, request, &answer, &meta);
    let etag = entity_tag(
        asked.endpoint,
        asked.presentation.format(),
        &written.body[written.hashed.clone()],
        more,
    );
    Reply {
        asked,
        evaluated: Evaluated {
            answer,
            etag,
            generation,
            query_duration_ms,
        },
        written,
        count,
    }
}
