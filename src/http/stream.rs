//! Streams (docs/api.md section 14.2): `GET /units/stream` and `/metrics/stream`
//! in the Server-Sent Events format.
//!
//! A stream is checked as a records request is (length, token, parameters, the
//! plan's stations), then answered with a body fed by a task on the worker it
//! arrived on. The task sends the backlog (the walk from `from` of the
//! generation it opened on), then each later generation's additions (which
//! records, `stq_core::data::Stream` says from the generation's
//! [`Change`](crate::engine::Change): no history is read again), generation by
//! generation however many were installed since its last step, as `records`
//! events whose ids name the stream's position, so that a client that
//! reconnects with `Last-Event-ID` continues exactly after its last event, in
//! the same order. A reload that removes or changes records the
//! stream reads, an id this process did not issue for this stream, or one whose
//! generations are no longer kept, sends `reset` and the backlog again.
//!
//! A stream costs memory for its unsent bytes only: it goes on only while less
//! than [`WALK_WHILE_UNSENT`] is queued, and a client that leaves more than
//! [`MOST_UNSENT`] queued (an event of large records past the pause) is cut off.
//! A client that stops reading altogether fills the socket's buffers, then the
//! queue up to the walk's pause; the connection's write deadline
//! (`--client-timeout`, `connection`) then closes it, counted as `slow` too. A
//! stream that is read, or idle with nothing to send, is never cut off. It ends when its client leaves, when a
//! reload revokes its token or the token expires (an `error` event), and at
//! SIGTERM.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::web::{self, Bytes};
use actix_web::{HttpRequest, HttpResponse};
use chrono::Utc;
use stq_core::data::{Answer, Plan, PlanError, Request, Stream, Touch};
use stq_core::domain::record::Kind;
use stq_core::domain::time::Timestamp;
use stq_core::domain::{Endpoint, Principal, QueryParams, Unauthorized};
use tokio::sync::Notify;

use super::error::ApiError;
use super::request_id::RequestId;
use super::wait::Place;
use super::AppState;
use crate::engine::{EngineError, RouterHandle};
use crate::jwt::Refused;

/// A stream goes on while less than this is queued for the client.
const WALK_WHILE_UNSENT: usize = 1 << 20;
/// A client that leaves more than this unread is cut off (section 14.2).
const MOST_UNSENT: usize = 4 << 20;
/// A comment is sent when nothing was for this long.
const HEARTBEAT: Duration = Duration::from_secs(15);
/// How long a step waits when the queries are all taken before it is tried again.
const BUSY_PAUSE: Duration = Duration::from_millis(250);
/// How long a stream's step may take before it is tried again.
const STEP_DEADLINE: Duration = Duration::from_secs(30);

const TEXT_EVENT_STREAM: &str = "text/event-stream";
const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// The stream endpoints, on GET and HEAD.
pub(super) fn routes(config: &mut web::ServiceConfig) {
    for kind in [Kind::Units, Kind::Metrics] {
        let path = match kind {
            Kind::Units => "/units/stream",
            Kind::Metrics => "/metrics/stream",
        };
        config.service(super::get_and_head(
            path,
            move |request: HttpRequest,
                  state: web::Data<AppState>,
                  router: web::Data<RouterHandle>| async move {
                open(kind, request, state, router).await
            },
        ));
    }
}

/// A stream's response, or the error the records endpoints would answer, in
/// their order; 503 beyond `--max-streams`.
async fn open(
    kind: Kind,
    request: HttpRequest,
    state: web::Data<AppState>,
    router: web::Data<RouterHandle>,
) -> Result<HttpResponse, ApiError> {
    let arrived = Timestamp::from(Utc::now());
    let engine = &state.engine;
    engine.limits().check_length(request.query_string())?;
    let authorization = authorization(&request)?;
    let principal = engine.authenticate(authorization.as_deref(), arrived)?;
    RequestId::set_holder(&request, &principal);
    let params = QueryParams::parse_stream(kind, request.query_string(), *engine.limits())?;
    let last_event_id = (request.headers().get(LAST_EVENT_ID))
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
        .or_else(|| params.last_event_id().map(str::to_owned));
    let endpoint = match kind {
        Kind::Units => Endpoint::Units,
        Kind::Metrics => Endpoint::Metrics,
    };
    let query = Arc::new(Request {
        endpoint,
        params,
        principal,
        arrived,
    });
    // The plan's checks (the stations the token may see) before the stream starts.
    let request_id = RequestId::of(&request);
    let opened = Stream::open(
        query,
        engine.process(),
        engine.catalog(),
        engine.plan_settings(),
    );
    let stream = engine.planned(opened).map_err(|error| {
        ApiError::from_engine(error, &request_id, state.admission.request_timeout())
    })?;
    if *engine.stopping().borrow() {
        // SIGTERM closed every stream: a client that reconnects on a kept-alive
        // connection is told to come back (to a replica, or after the restart),
        // and the connection closes, so that the stop is not held up by it.
        let mut refused = actix_web::ResponseError::error_response(&ApiError::Overloaded);
        refused
            .head_mut()
            .set_connection_type(actix_web::http::ConnectionType::Close);
        return Ok(refused);
    }
    let place = state.live.open_stream(&state.metrics.live)?;
    let mut response = HttpResponse::Ok();
    response
        .content_type(TEXT_EVENT_STREAM)
        .insert_header((header::CACHE_CONTROL, HeaderValue::from_static("no-store")))
        .insert_header((X_ACCEL_BUFFERING, HeaderValue::from_static("no")))
        // Events are sent as they come: not held back by a compressor's buffer.
        .insert_header((
            header::CONTENT_ENCODING,
            HeaderValue::from_static("identity"),
        ));
    if request.method() == actix_web::http::Method::HEAD {
        return Ok(response.finish());
    }
    let queue = Arc::new(Queue::default());
    let feeder = Feeder {
        state: state.clone(),
        router: router.get_ref().clone(),
        queue: Arc::clone(&queue),
        authorization,
        stream,
        request_id: request_id.to_string(),
        _place: place,
    };
    actix_web::rt::spawn(feeder.run(last_event_id));
    Ok(response.streaming(Body { queue }))
}

/// The request's one `Authorization` header, as bytes.
fn authorization(request: &HttpRequest) -> Result<Option<Vec<u8>>, ApiError> {
    let mut authorizations = request.headers().get_all(header::AUTHORIZATION);
    let authorization = authorizations.next().map(|value| value.as_bytes().to_vec());
    if authorizations.next().is_some() {
        return Err(ApiError::InvalidRequest {
            reason: "more than one Authorization header",
        });
    }
    Ok(authorization)
}

/// What the feeder queued and the body has not yet taken, shared by the two.
#[derive(Default)]
struct Queue {
    pending: parking_lot::Mutex<Pending>,
    /// Bytes queued.
    unsent: AtomicUsize,
    /// The body dropped (the client left).
    gone: AtomicBool,
    /// Wakes the feeder when the body took a chunk, or left.
    to_feeder: Notify,
}

#[derive(Default)]
struct Pending {
    chunks: VecDeque<Bytes>,
    /// The feeder is done: the body ends once `chunks` is empty.
    ended: bool,
    /// The client is cut off: the body fails, which closes the connection.
    cut: bool,
    /// The body's task, while it waits for a chunk.
    waker: Option<Waker>,
}

impl Queue {
    /// Why the client's connection is gone: `slow` if it left what the walk waits
    /// on unread (the connection's write deadline, `--client-timeout`, closes a
    /// connection that stops reading: the socket's buffers fill, then the queue),
    /// else `closed`.
    fn left(&self) -> End {
        match self.unsent.load(Ordering::Acquire) >= WALK_WHILE_UNSENT {
            true => End::Slow,
            false => End::Closed,
        }
    }

    /// Changes what is pending and wakes the body.
    fn push(&self, change: impl FnOnce(&mut Pending)) {
        let waker = {
            let mut pending = self.pending.lock();
            change(&mut pending);
            pending.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The response's body: the chunks the feeder queues, as the connection takes them.
struct Body {
    queue: Arc<Queue>,
}

impl futures_util::Stream for Body {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let queue = &self.queue;
        let mut pending = queue.pending.lock();
        if pending.cut {
            return Poll::Ready(Some(Err(std::io::Error::other(
                "more than 4 MiB left unread",
            ))));
        }
        if let Some(chunk) = pending.chunks.pop_front() {
            drop(pending);
            queue.unsent.fetch_sub(chunk.len(), Ordering::AcqRel);
            queue.to_feeder.notify_one();
            return Poll::Ready(Some(Ok(chunk)));
        }
        if pending.ended {
            return Poll::Ready(None);
        }
        pending.waker = Some(context.waker().clone());
        Poll::Pending
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        self.queue.gone.store(true, Ordering::Release);
        self.queue.to_feeder.notify_one();
    }
}

/// Why a stream ended, as the disconnect counter's label says.
#[derive(Clone, Copy, Debug)]
enum End {
    /// The client left, or the process stops.
    Closed,
    /// More than [`MOST_UNSENT`] queued, or the connection cut while the walk
    /// waited on the client to read.
    Slow,
    /// The token was revoked or expired.
    Token,
}

impl End {
    fn label(self) -> &'static str {
        match self {
            End::Closed => "closed",
            End::Slow => "slow",
            End::Token => "token",
        }
    }
}

/// Where a step left the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Progress {
    /// There may be more to walk at once.
    More,
    /// Everything up to the newest generation is sent.
    CaughtUp,
    /// The client has [`WALK_WHILE_UNSENT`] or more to read before the walk goes on.
    Paused,
}

/// Why a stream starts over with `reset`.
struct Reset(&'static str);

/// What a step of the stream met.
enum Interrupt {
    End(End),
    Reset(Reset),
    /// A reload passed the step: it is taken again.
    Raced,
}

impl From<End> for Interrupt {
    fn from(end: End) -> Interrupt {
        Interrupt::End(end)
    }
}

/// The task that feeds one stream's body.
struct Feeder {
    state: web::Data<AppState>,
    router: RouterHandle,
    queue: Arc<Queue>,
    authorization: Option<Vec<u8>>,
    stream: Stream,
    request_id: String,
    /// Held for as long as the stream is open (`--max-streams`).
    _place: Place,
}

impl Feeder {
    /// Feeds the stream until it ends, resuming from `last_event_id` if given.
    async fn run(mut self, last_event_id: Option<String>) {
        self.queue_bytes(Bytes::from_static(b"retry: 2000\n\n"));
        let engine = self.state.engine.clone();
        if let Some(id) = last_event_id {
            match self.stream.resume(&id, engine.plan_settings()) {
                Some(stream) => {
                    self.stream = stream;
                    let generation = self.stream.generation();
                    if engine.changes_since(generation).is_err()
                        || generation > engine.catalog().generation()
                    {
                        self.reset(Reset("the event id is older than the history kept"));
                    }
                }
                None => {
                    self.reset(Reset(
                        "the event id was not issued by this process for this stream",
                    ));
                }
            }
        }
        let end = self.feed().await;
        self.state.metrics.live.disconnected(end.label());
        self.queue.push(|pending| pending.ended = true);
    }

    /// Sends `reset` and starts the stream over from its `from`.
    fn reset(&mut self, Reset(reason): Reset) {
        let data = serde_json::json!({ "reason": reason }).to_string();
        self.queue_bytes(Bytes::from(format!("event: reset\ndata: {data}\n\n")));
        let request = Arc::clone(self.stream.request());
        (self.stream).restart(request, self.state.engine.catalog().generation());
    }

    /// The stream from where it stands on, until it ends.
    async fn feed(&mut self) -> End {
        let engine = self.state.engine.clone();
        let mut generations = engine.generations();
        let mut stopping = engine.stopping();
        let mut last_sent = Instant::now();
        loop {
            if *stopping.borrow_and_update() {
                return End::Closed;
            }
            generations.borrow_and_update();
            let progress = match self.step(&mut last_sent).await {
                Ok(progress) => progress,
                Err(Interrupt::End(end)) => return end,
                Err(Interrupt::Reset(reset)) => {
                    self.reset(reset);
                    continue;
                }
                Err(Interrupt::Raced) => continue,
            };
            if progress == Progress::More {
                continue;
            }
            // Caught up, or waiting for the client to read: wait for news.
            let expiry = self.stream.request().principal.expires;
            loop {
                let heartbeat = actix_web::rt::time::sleep_until((last_sent + HEARTBEAT).into());
                let expires = async {
                    match expiry.map(until) {
                        Some(left) => actix_web::rt::time::sleep(left).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    changed = generations.changed() => match changed {
                        Ok(()) => break,
                        Err(_) => return End::Closed,
                    },
                    _ = stopping.changed() => return End::Closed,
                    () = self.queue.to_feeder.notified() => {
                        if self.queue.gone.load(Ordering::Acquire) {
                            return self.queue.left();
                        }
                        let drained = self.queue.unsent.load(Ordering::Acquire) < WALK_WHILE_UNSENT;
                        if progress == Progress::Paused && drained {
                            break;
                        }
                    }
                    () = heartbeat => {
                        self.queue_bytes(Bytes::from_static(b": keep-alive\n\n"));
                        last_sent = Instant::now();
                    }
                    () = expires => {
                        self.error(Unauthorized::Expired.into());
                        return End::Token;
                    }
                }
            }
        }
    }

    /// One step: an event of the walk, or the events of the generations
    /// installed since the stream's position, until the client has enough to read.
    async fn step(&mut self, last_sent: &mut Instant) -> Result<Progress, Interrupt> {
        if self.queue.gone.load(Ordering::Acquire) {
            return Err(self.queue.left().into());
        }
        let engine = self.state.engine.clone();
        let catalog = engine.catalog();
        let newest = catalog.generation();
        let generation = self.stream.generation();
        let mut changes = engine.changes_since(generation).map_err(|_| {
            Interrupt::Reset(Reset("the history this stream needs is no longer kept"))
        })?;
        changes.retain(|change| change.generation <= newest);
        if changes
            .last()
            .map_or(generation, |change| change.generation)
            < newest
        {
            // The history records an install just after its catalog, and then
            // tells the streams: this one hears of it then.
            return Ok(Progress::CaughtUp);
        }
        if !changes.is_empty() {
            self.check_token()?;
        }
        let request = self.stream.request();
        if (changes.iter()).any(|change| request.touched_by(&change.additions) == Touch::Altered) {
            return Err(Interrupt::Reset(Reset(
                "a reload removed or changed records this stream reads",
            )));
        }
        let settings = engine.plan_settings();
        let since = changes
            .iter()
            .map(|change| (change.generation, &change.additions));
        loop {
            if let Some(paced) = self.paced()? {
                return Ok(paced);
            }
            let walking = !self.stream.caught_up();
            let next = (self.stream).next(since.clone(), Arc::clone(&catalog), settings);
            let Some(plan) = self.planned(next)? else {
                return Ok(Progress::CaughtUp);
            };
            let answer = self.executed(plan, newest).await?;
            if let Some(id) = self.stream.answered(&answer, &catalog, settings) {
                self.event(&answer, &id);
                *last_sent = Instant::now();
            }
            // A walk goes an event a step, so that a long backlog hears of a stop
            // or a new generation between its events.
            if walking && !self.stream.caught_up() {
                return Ok(self.paced()?.unwrap_or(Progress::More));
            }
        }
    }

    /// Whether the client has too much to read: cut off beyond [`MOST_UNSENT`]
    /// queued, paused from [`WALK_WHILE_UNSENT`] on.
    fn paced(&self) -> Result<Option<Progress>, Interrupt> {
        let unsent = self.queue.unsent.load(Ordering::Acquire);
        if unsent > MOST_UNSENT {
            self.queue.push(|pending| pending.cut = true);
            return Err(End::Slow.into());
        }
        Ok((unsent >= WALK_WHILE_UNSENT).then_some(Progress::Paused))
    }

    /// [`Feeder::execute`], of a plan made on generation `generation`'s catalog.
    async fn executed(&self, plan: Plan, generation: u64) -> Result<Answer, Interrupt> {
        let answer = self.execute(plan).await?;
        match answer.generation() == Some(generation) {
            true => Ok(answer),
            false => Err(Interrupt::Raced),
        }
    }

    /// The token as the tokens read with the current generation say: an `error`
    /// event and the end if it is gone or expired, a reset if it sees other
    /// stations than the stream was opened with.
    fn check_token(&mut self) -> Result<(), Interrupt> {
        let engine = &self.state.engine;
        let authenticated =
            engine.authenticate(self.authorization.as_deref(), Timestamp::from(Utc::now()));
        let principal: Arc<Principal> = match authenticated {
            Ok(principal) => principal,
            Err(refusal) => {
                self.error(refusal);
                return Err(End::Token.into());
            }
        };
        if !principal.sees_as(&self.stream.request().principal) {
            let request = self
                .stream
                .request()
                .again(principal, self.stream.request().arrived);
            // The reset that follows starts over for the new request.
            (self.stream).restart(Arc::new(request), engine.catalog().generation());
            return Err(Interrupt::Reset(Reset("the token's stations changed")));
        }
        Ok(())
    }

    /// A stream step's plan: a refusal is the stations it may read changing (a
    /// reset); a store file's fault, reported, ends the stream, which the client
    /// resumes after its last event.
    fn planned<T>(&self, planned: Result<T, PlanError>) -> Result<T, Interrupt> {
        self.state
            .engine
            .planned(planned)
            .map_err(|error| match error {
                EngineError::StorageUnavailable(fault) => {
                    tracing::warn!(request_id = %self.request_id, "{fault}; the stream ends");
                    Interrupt::End(End::Closed)
                }
                _ => Interrupt::Reset(Reset("the stream's stations changed")),
            })
    }

    /// Answers a stream step's plan from the generation it was planned on.
    async fn execute(&self, plan: Plan) -> Result<Answer, Interrupt> {
        let request = Arc::clone(self.stream.request());
        let deadline = Instant::now() + STEP_DEADLINE;
        match self.router.execute_planned(request, plan, deadline).await {
            Ok(answer) => Ok(answer),
            Err(EngineError::Raced) => Err(Interrupt::Raced),
            // Busy: the step waits its turn and is taken again, rather than end a
            // stream that every client would then open again at once.
            Err(EngineError::Overloaded(_) | EngineError::TimedOut) => {
                actix_web::rt::time::sleep(BUSY_PAUSE).await;
                Err(Interrupt::Raced)
            }
            Err(error) => {
                tracing::error!(request_id = %self.request_id, %error, "a stream's step failed");
                // The client reconnects and resumes after its last event.
                Err(End::Closed.into())
            }
        }
    }

    /// Queues a `records` event of `answer`'s records, of id `id`: its `data` is
    /// the array a records answer's envelope holds.
    fn event(&self, answer: &Answer, id: &str) {
        let prefix = format!("event: records\nid: {id}\ndata: ");
        let (mut event, _) = answer.json(prefix.as_bytes(), 2);
        event.extend_from_slice(b"\n\n");
        self.queue_bytes(Bytes::from(event));
        self.state.metrics.live.events.inc();
    }

    /// Queues an `error` event with `refusal`'s 401 body.
    fn error(&self, refusal: Refused) {
        let body = ApiError::from(refusal).body();
        let mut event = b"event: error\ndata: ".to_vec();
        event.extend_from_slice(&body);
        event.extend_from_slice(b"\n\n");
        self.queue_bytes(Bytes::from(event));
    }

    fn queue_bytes(&self, bytes: Bytes) {
        self.queue.unsent.fetch_add(bytes.len(), Ordering::AcqRel);
        self.queue.push(|pending| pending.chunks.push_back(bytes));
    }
}

/// How long until `instant`, from now; zero once it passed.
fn until(instant: Timestamp) -> Duration {
    let now = Timestamp::from(Utc::now());
    let nanos = |time: Timestamp| i128::from(time.seconds) * 1_000_000_000 + i128::from(time.nanos);
    let left = nanos(instant) - nanos(now);
    Duration::from_nanos(left.clamp(0, i128::from(u64::MAX)) as u64)
}
