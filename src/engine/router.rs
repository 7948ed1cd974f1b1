//! The router actor: fans a planned query out to the shards that hold its stations
//! and merges their answers: sorted hits into the contract's order and a page, or
//! partial summaries into rows.
//!
//! Every HTTP worker starts a router of its own ([`Engine::router`]), so no single
//! router mailbox is the place every request queues on; the shards are shared. A
//! router keeps no state between requests: each query's fan-out runs as its own
//! future, so a slow query does not hold up the next one in the mailbox.
//!
//! The merge of a query's replies, and its pagination, is a stretch of computing:
//! it holds a query slot, but the wait for the shards' replies holds none.
//!
//! A query is answered from the one generation it was planned on. Only if two
//! reloads pass while it is in flight has that generation left the shards; the
//! router then plans it once more, on the current one, and answers from that.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use futures_util::future::join_all;
use stq_core::data::catalog::Catalog;
use stq_core::data::cursor::{Cursor, CursorKey};
use stq_core::data::key::Position;
use stq_core::data::merge::merge_sorted;
use stq_core::data::scan::{Hit, ScanRequest, ShardStation};
use stq_core::data::shard::ShardData;
use stq_core::data::stored::RecordJson;
use stq_core::data::summary::{PartialSummary, Question as SummaryQuestion, Rows, SummaryRequest};
use stq_core::domain::query::Limits;

use super::fault::ShardFault;
use super::plan::{Plan, Question, RecordQuestion, Request};
use super::shard::{ShardAnswer, ShardError, ShardHandle, ShardQuestion};
use super::slots::Patience;
use super::{Engine, EngineError, EngineRefusal};

// --- Messages --------------------------------------------------------------------

/// Answer a planned request: the page of its records, or its summary's rows.
struct Execute {
    request: Arc<Request>,
    plan: Plan,
    /// After it nobody waits for the answer: a shard that reaches the query later
    /// skips it.
    deadline: Instant,
    /// The query's wait for slots, shared with its other stretches.
    patience: Patience,
    /// Only tests ask for one (see `fault`).
    fault: Option<ShardFault>,
}

impl Message for Execute {
    type Result = Result<Answer, EngineError>;
}

/// What a query is answered with, by the kind of its question.
#[derive(Debug)]
pub enum Answer {
    /// `/units` and `/metrics`.
    Page(Page),
    /// The summaries and `/stations`: rows rendered as JSON.
    Rows(Rows),
}

/// One page of records, and the cursor of the next page.
#[derive(Debug)]
pub struct Page {
    pub(crate) records: QueryResult,
    pub(crate) next_cursor: Option<String>,
}

impl Page {
    pub fn records(&self) -> &QueryResult {
        &self.records
    }

    pub fn next_cursor(&self) -> Option<&str> {
        self.next_cursor.as_deref()
    }
}

/// Matching records in order, pointing into the shard data they came from.
#[derive(Debug, Default)]
pub struct QueryResult {
    parts: Vec<Part>,
    hits: Vec<PartHit>,
}

/// One shard's reply: its data, and the JSON of its hits that are sealed records.
#[derive(Debug)]
struct Part {
    data: Arc<ShardData>,
    sealed: Vec<u8>,
}

/// A hit and the index of the part (shard reply) that holds its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct PartHit {
    hit: Hit,
    part: usize,
}

impl QueryResult {
    pub fn len(&self) -> usize {
        self.hits.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hits.is_empty()
    }

    /// Keeps the first `count` records.
    pub(crate) fn truncate(&mut self, count: usize) {
        self.hits.truncate(count);
    }

    pub(crate) fn last_position(&self) -> Option<Position> {
        self.hits.last().map(|part_hit| part_hit.hit.position)
    }

    /// The records, in order.
    pub fn records(&self) -> impl Iterator<Item = Record<'_>> + Clone + '_ {
        self.hits.iter().map(|part_hit| {
            let part = &self.parts[part_hit.part];
            Record {
                data: &part.data,
                sealed: &part.sealed,
                hit: &part_hit.hit,
            }
        })
    }
}

/// A record of an answer, not yet read: its length is known from the hit alone,
/// and its JSON lies behind its station, its stored form and its pieces, each a
/// cache miss that waits on the one before.
#[derive(Clone, Copy)]
pub struct Record<'a> {
    data: &'a ShardData,
    sealed: &'a [u8],
    hit: &'a Hit,
}

impl<'a> Record<'a> {
    /// The length of its JSON, without reading the station.
    pub fn len(&self) -> usize {
        self.hit.bytes.length as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its response JSON.
    pub fn json(&self) -> RecordJson<'a> {
        self.data.json(self.hit, self.sealed)
    }

    /// Hints the CPU to load what locates its stored form (see
    /// [`ShardData::prefetch_station`]).
    pub fn prefetch_station(&self) {
        self.data.prefetch_station(self.hit);
    }
}

// --- The actor -------------------------------------------------------------------

struct Router {
    engine: Engine,
    /// This worker's replicas of the shards, in shard order.
    shards: Rc<[ShardHandle]>,
}

impl Actor for Router {
    type Context = Context<Self>;
}

impl Handler<Execute> for Router {
    type Result = ResponseFuture<Result<Answer, EngineError>>;

    fn handle(&mut self, message: Execute, _: &mut Context<Self>) -> Self::Result {
        let engine = self.engine.clone();
        let shards = Rc::clone(&self.shards);
        Box::pin(async move { execute(&engine, &shards, message).await })
    }
}

/// Asks the shards that hold the plan's stations, then merges their answers. A
/// query that raced two reloads is planned once more, on the current generation.
async fn execute(
    engine: &Engine,
    shards: &[ShardHandle],
    message: Execute,
) -> Result<Answer, EngineError> {
    let Execute {
        request,
        mut plan,
        deadline,
        patience,
        fault,
    } = message;
    let mut retried = false;
    let answers = loop {
        let asks = stations_by_shard(&plan.catalog, &plan.stations).map(|(shard, stations)| {
            shards[shard].query(
                Arc::clone(&plan.catalog),
                shard_question(&plan.question, stations),
                deadline,
                patience.clone(),
                fault,
            )
        });
        let answers: Result<Vec<ShardAnswer>, ShardError> =
            join_all(asks).await.into_iter().collect();
        match answers {
            Ok(answers) => break answers,
            Err(ShardError::OtherGeneration { .. }) if !retried => {
                retried = true;
                plan = engine.plan(&request)?;
            }
            Err(error) => return Err(error.into()),
        }
    };
    // The merge's slot, held until the answer is cut.
    let _slot = engine.take_slot(&patience).await?;
    match &plan.question {
        Question::Records(question) => {
            let records = merge_records(answers, question.cap)?;
            let limits = engine.limits();
            let page = paginate(
                &request,
                &plan.catalog,
                question,
                records,
                limits,
                engine.cursor_key(),
            )?;
            Ok(Answer::Page(page))
        }
        Question::Summary(question) => {
            let rows = match question {
                SummaryQuestion::Units(_) => {
                    merge_partials(answers, &plan, engine, |answer| match answer {
                        ShardAnswer::Units(partial) => Some(partial),
                        _ => None,
                    })
                }
                SummaryQuestion::Metrics(_) => {
                    merge_partials(answers, &plan, engine, |answer| match answer {
                        ShardAnswer::Metrics(partial) => Some(partial),
                        _ => None,
                    })
                }
                SummaryQuestion::Stations => {
                    merge_partials(answers, &plan, engine, |answer| match answer {
                        ShardAnswer::Stations(partial) => Some(partial),
                        _ => None,
                    })
                }
            }?;
            Ok(Answer::Rows(rows))
        }
    }
}

/// What one shard is asked of `question`, about its `stations`.
fn shard_question(question: &Question, stations: Vec<ShardStation>) -> ShardQuestion {
    match question {
        Question::Records(question) => ShardQuestion::Records(ScanRequest {
            stations,
            window: question.window,
            after: question.after,
            filter: question.filter.clone(),
            cap: question.cap,
        }),
        Question::Summary(question) => ShardQuestion::Summary(SummaryRequest {
            stations,
            question: question.clone(),
        }),
    }
}

/// The shards' hits merged into the contract's order, the first `cap` of them.
fn merge_records(answers: Vec<ShardAnswer>, cap: usize) -> Result<QueryResult, EngineError> {
    let mut parts = Vec::with_capacity(answers.len());
    let mut streams = Vec::with_capacity(answers.len());
    for (part, answer) in answers.into_iter().enumerate() {
        let ShardAnswer::Records { data, answer } = answer else {
            return Err(other_answer());
        };
        parts.push(Part {
            data,
            sealed: answer.sealed,
        });
        streams.push(
            answer
                .hits
                .into_iter()
                .map(move |hit| PartHit { hit, part }),
        );
    }
    Ok(QueryResult {
        hits: merge_sorted(streams, cap),
        parts,
    })
}

/// The shards' partial summaries, which `partial` takes from their answers,
/// merged and rendered as rows; more rows than `--max-records` is
/// `result_too_large`.
fn merge_partials<P: PartialSummary>(
    answers: Vec<ShardAnswer>,
    plan: &Plan,
    engine: &Engine,
    partial: impl Fn(ShardAnswer) -> Option<P>,
) -> Result<Rows, EngineError> {
    let mut merged: Option<P> = None;
    for answer in answers {
        let Some(partial) = partial(answer) else {
            return Err(other_answer());
        };
        match &mut merged {
            Some(merged) => merged.merge(partial),
            None => merged = Some(partial),
        }
    }
    let Some(merged) = merged else {
        return Ok(Rows::default());
    };
    let max_records = engine.limits().max_records;
    if merged.row_count() > max_records {
        return Err(EngineRefusal::TooManyRows { max_records }.into());
    }
    Ok(merged.finish(&plan.catalog))
}

/// The page a record query's merged records make: all of them, or `limit` of
/// them and the cursor of the rest; or `result_too_large` for an unpaged query
/// over the limit.
pub(crate) fn paginate(
    request: &Request,
    catalog: &Catalog,
    question: &RecordQuestion,
    mut records: QueryResult,
    limits: &Limits,
    cursor_key: &CursorKey,
) -> Result<Page, EngineError> {
    let next_cursor = match request.params.limit {
        None if records.len() > limits.max_records => {
            return Err(EngineError::Refused(EngineRefusal::ResultTooLarge {
                max_records: limits.max_records,
            }))
        }
        None => None,
        Some(limit) if records.len() > limit => {
            records.truncate(limit);
            let after = records
                .last_position()
                .expect("a full page has a last record");
            let cursor = Cursor {
                kind: question.kind,
                window: question.window,
                after: catalog.identity_of(after),
            };
            let scope = question
                .scope
                .as_deref()
                .expect("paged queries have a cursor scope");
            Some(cursor.encode(cursor_key, scope))
        }
        Some(_) => None,
    };
    Ok(Page {
        records,
        next_cursor,
    })
}

/// A shard answered another kind of question than it was asked: a bug, reported
/// as this query's failure rather than a panic of the worker.
fn other_answer() -> EngineError {
    EngineError::Failed("a shard answered another kind of question than it was asked".to_owned())
}

/// A plan's stations grouped by the shard that holds them; shards without any are
/// left out.
fn stations_by_shard(
    catalog: &Catalog,
    stations: &[u32],
) -> impl Iterator<Item = (usize, Vec<ShardStation>)> {
    let mut per_shard: Vec<Vec<ShardStation>> = vec![Vec::new(); catalog.shard_count()];
    for &rank in stations {
        let placement = catalog.placement(rank);
        per_shard[placement.shard as usize].push(ShardStation {
            rank,
            station_index: placement.station_index,
        });
    }
    per_shard
        .into_iter()
        .enumerate()
        .filter(|(_, stations)| !stations.is_empty())
}

// --- The handle ------------------------------------------------------------------

/// How an HTTP handler reaches its worker's router.
#[derive(Clone)]
pub struct RouterHandle {
    address: Addr<Router>,
}

impl RouterHandle {
    /// Starts a router for `engine` on the current arbiter, asking `shards`, this
    /// arbiter's replicas of the engine's shards.
    pub(super) fn start(engine: Engine, shards: Box<[ShardHandle]>) -> RouterHandle {
        let shards = Rc::from(shards);
        RouterHandle {
            address: Router { engine, shards }.start(),
        }
    }

    /// Answers `request`, planned as `plan`, by `deadline`; its stretches wait for
    /// slots within `patience`.
    pub async fn execute(
        &self,
        request: Arc<Request>,
        plan: Plan,
        deadline: Instant,
        patience: Patience,
        fault: Option<ShardFault>,
    ) -> Result<Answer, EngineError> {
        self.address
            .send(Execute {
                request,
                plan,
                deadline,
                patience,
                fault,
            })
            .await
            .map_err(|error| EngineError::Failed(format!("the router's mailbox: {error}")))?
    }
}
