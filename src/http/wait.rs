//! `wait` (docs/api.md section 14.1): a request whose `If-None-Match` names its
//! answer's tag is held until a new generation changes the answer, or its wait
//! ends.
//!
//! A held request is a future parked on the engine's news of installs: it holds no
//! query slot and no timer but its own deadline, and costs nothing while no
//! generation comes. At each install it looks at what the generations since its
//! answer changed ([`Engine::changes_since`](crate::engine::Engine::changes_since)):
//! a generation that touched none of the stations it reads cannot change its
//! answer, and is passed over without a query. Otherwise it asks its group, the
//! held requests that ask the same thing of the same token ([`Groups`]), for the
//! answer of the new generation: the first to ask evaluates it, the others take
//! that evaluation, so that a thousand screens asking one thing cost one query a
//! generation. A request whose answer changed gets it, written with its own
//! request id; the others wait on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse};
use chrono::Utc;
use parking_lot::Mutex;
use prometheus_client::metrics::gauge::Gauge;
use stq_core::data::Touch;
use stq_core::domain::time::Timestamp;
use stq_core::domain::Endpoint;

use super::answer::{self, Asked, Evaluated, Reply};
use super::caching::IfNoneMatch;
use super::error::ApiError;
use super::AppState;
use crate::engine::RouterHandle;
use crate::metrics::LiveMetrics;

/// The answer to a query, or `timeout` once `--request-timeout` has passed. With
/// `wait` and an `If-None-Match` that names the answer's tag, the request is held
/// until a new generation changes the answer or the wait ends.
pub(super) async fn answer(
    endpoint: Endpoint,
    request: &HttpRequest,
    state: &AppState,
    router: &RouterHandle,
) -> Result<HttpResponse, ApiError> {
    let first = answer::evaluate(endpoint, request, state, router).await?;
    let Some(wait) = first.asked.query.params.wait() else {
        return Ok(first.respond(request));
    };
    let precondition = IfNoneMatch::of(request.headers());
    if !precondition.names(&first.evaluated.etag) {
        return Ok(first.respond(request));
    }
    // Boxed: a hold's future (about 4 KB) would otherwise make every request's
    // future as large, and be copied with it, though few requests are held.
    Box::pin(hold(request, state, router, first, wait)).await
}

/// What live answers share across the workers: their limits, how many are open,
/// and the groups of held requests.
pub struct LiveState {
    max_waiting: usize,
    max_streams: usize,
    waiting: Arc<AtomicUsize>,
    streams: Arc<AtomicUsize>,
    groups: Groups,
}

impl LiveState {
    /// At most `max_waiting` held requests and `max_streams` streams at once.
    pub fn new(max_waiting: usize, max_streams: usize) -> LiveState {
        LiveState {
            max_waiting,
            max_streams,
            waiting: Arc::default(),
            streams: Arc::default(),
            groups: Groups::default(),
        }
    }

    /// A place among the held requests, if one is free.
    fn hold(&self, metrics: &LiveMetrics) -> Option<Place> {
        Place::take(&self.waiting, self.max_waiting, &metrics.waiting)
    }

    /// A place among the streams, if one is free; else the error that says so.
    pub(super) fn open_stream(&self, metrics: &LiveMetrics) -> Result<Place, ApiError> {
        Place::take(&self.streams, self.max_streams, &metrics.streams).ok_or(
            ApiError::TooManyStreams {
                max: self.max_streams,
            },
        )
    }
}

impl Default for LiveState {
    /// The contract's defaults: 10000 of each.
    fn default() -> LiveState {
        LiveState::new(10_000, 10_000)
    }
}

/// One of a bounded number of places (held requests, streams), given back when
/// dropped; the gauge follows.
pub(super) struct Place {
    count: Arc<AtomicUsize>,
    gauge: Gauge,
}

impl Place {
    fn take(count: &Arc<AtomicUsize>, most: usize, gauge: &Gauge) -> Option<Place> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < most).then_some(open + 1)
            })
            .ok()?;
        gauge.inc();
        Some(Place {
            count: Arc::clone(count),
            gauge: gauge.clone(),
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
        self.gauge.dec();
    }
}

/// The groups of held requests, by what they ask ([`Request::sharing_key`]).
///
/// [`Request::sharing_key`]: stq_core::data::Request::sharing_key
#[derive(Default)]
struct Groups(Mutex<HashMap<String, Weak<Group>>>);

/// Held requests that ask one thing: the newest evaluation of it.
#[derive(Default)]
struct Group {
    /// The generation evaluated, and the answer (`None`: the evaluation failed,
    /// and its requests wait on).
    latest: tokio::sync::Mutex<Option<(u64, Option<Arc<Evaluated>>)>>,
}

impl Groups {
    /// The group of `key`, joined.
    fn join(&self, key: String) -> Arc<Group> {
        let mut groups = self.0.lock();
        if let Some(group) = groups.get(&key).and_then(Weak::upgrade) {
            return group;
        }
        // Groups whose requests all left go as new ones come.
        if groups.len() > 64 && groups.len().is_power_of_two() {
            groups.retain(|_, group| group.strong_count() > 0);
        }
        let group = Arc::new(Group::default());
        groups.insert(key, Arc::downgrade(&group));
        group
    }
}

impl Group {
    /// The answer of generation `generation` or a later one: evaluated by
    /// `evaluate` unless another request of the group did already.
    async fn answer_of(
        &self,
        generation: u64,
        evaluate: impl std::future::Future<Output = Option<Arc<Evaluated>>>,
    ) -> Option<Arc<Evaluated>> {
        let mut latest = self.latest.lock().await;
        if let Some((evaluated, answer)) = &*latest {
            if *evaluated >= generation {
                return answer.clone();
            }
        }
        let answer = evaluate.await;
        let evaluated = (answer.as_ref()).map_or(generation, |answer| answer.generation);
        *latest = Some((evaluated.max(generation), answer.clone()));
        answer
    }
}

/// Holds `first`'s request, whose `If-None-Match` names `first`'s tag, for at most
/// `wait`: the new answer as soon as a generation changes it, 401 when a reload
/// revokes or expires its token, and once `wait` has passed (or the process
/// stops) the answer as it is then. Beyond `--max-waiting` held requests, `first`
/// is answered at once.
async fn hold(
    request: &HttpRequest,
    state: &AppState,
    router: &RouterHandle,
    first: Reply,
    wait: Duration,
) -> Result<HttpResponse, ApiError> {
    let Some(_place) = state.live.hold(&state.metrics.live) else {
        return Ok(first.respond(request));
    };
    let engine = &state.engine;
    let deadline = actix_web::rt::time::Instant::now() + wait;
    let mut generations = engine.generations();
    let mut stopping = engine.stopping();
    let Reply {
        mut asked,
        evaluated,
        ..
    } = first;
    let held_tag = evaluated.etag.clone();
    let mut seen = evaluated.generation;
    drop(evaluated);
    let key = format!(
        "{:?} {}",
        asked.presentation.format(),
        asked.query.sharing_key()
    );
    let group = state.live.groups.join(key);
    let authorization =
        (request.headers().get(header::AUTHORIZATION)).map(|value| value.as_bytes());
    while !*stopping.borrow_and_update() {
        tokio::select! {
            _ = actix_web::rt::time::sleep_until(deadline) => break,
            _ = stopping.changed() => break,
            changed = generations.changed() => if changed.is_err() { break },
        }
        let newest = *generations.borrow_and_update();
        // A reload reads the tokens again: this one may be gone, or see otherwise.
        let principal = engine.authenticate(authorization, Timestamp::from(Utc::now()))?;
        let mut touched = !principal.sees_as(&asked.query.principal);
        if touched {
            asked.query = Arc::new(asked.query.again(principal, asked.query.arrived));
        }
        touched |= match engine.changes_since(seen) {
            Ok(changes) => changes
                .iter()
                .any(|change| asked.query.touched_by(&change.additions) != Touch::Untouched),
            Err(_) => true,
        };
        seen = newest;
        if !touched {
            continue;
        }
        let evaluate = evaluate_for_group(&asked, request, state, router);
        let Some(answer) = group.answer_of(newest, evaluate).await else {
            continue;
        };
        if answer.etag != held_tag {
            let reply = answer::rewrite(asked, request, state, &answer).await?;
            return Ok(reply.changed());
        }
    }
    // The wait is over: the request is answered as it would be now.
    answer::answer_now(asked.endpoint, request, state, router).await
}

/// The group's answer of the current generation, evaluated as a new request of
/// `asked` would be now; `None` if the evaluation failed (the requests wait on).
async fn evaluate_for_group(
    asked: &Asked,
    request: &HttpRequest,
    state: &AppState,
    router: &RouterHandle,
) -> Option<Arc<Evaluated>> {
    state.metrics.live.evaluations.inc();
    let started = Instant::now();
    let now = Asked {
        endpoint: asked.endpoint,
        query: Arc::new((asked.query).again(
            Arc::clone(&asked.query.principal),
            Timestamp::from(Utc::now()),
        )),
        presentation: asked.presentation.clone(),
        fault: None,
    };
    let computed = answer::compute(&now, request, state, router, started)
        .await
        .ok()?;
    let reply = answer::write(now, request, state, computed, started)
        .await
        .ok()?;
    Some(Arc::new(reply.evaluated))
}
