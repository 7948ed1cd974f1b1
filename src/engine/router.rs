//! The router actor: fans a planned query out to the shards that hold its stations
//! and merges their sorted answers into the contract's order.
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
use stq_core::data::key::Position;
use stq_core::data::merge::merge_sorted;
use stq_core::data::scan::{Hit, ScanRequest, ShardStation};
use stq_core::data::shard::ShardData;
use stq_core::data::stored::RecordJson;
use stq_core::data::summary::{Partial, Rows, SummaryRequest as ShardSummary};

use super::fault::ShardFault;
use super::plan::{self, Plan, Request, SummaryPlan, SummaryRequest};
use super::shard::{ShardError, ShardHandle};
use super::slots::{Patience, Slot};
use super::{Engine, EngineError};

// --- Messages --------------------------------------------------------------------

/// Answer a planned request: the page of its records.
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
    type Result = Result<Page, EngineError>;
}

/// Answer a planned summary: its rows, merged from every shard's partial result.
struct Summarize {
    request: Arc<SummaryRequest>,
    plan: SummaryPlan,
    deadline: Instant,
    /// The query's wait for slots, shared with its other stretches.
    patience: Patience,
    /// Only tests ask for one (see `fault`).
    fault: Option<ShardFault>,
}

impl Message for Summarize {
    type Result = Result<Rows, EngineError>;
}

/// One page of an answer: its records, the cursor of the next page, and the plan
/// it was answered from (which a retry after a reload may have replaced).
#[derive(Debug)]
pub struct Page {
    pub(crate) records: QueryResult,
    pub(crate) next_cursor: Option<String>,
    pub(crate) plan: Plan,
}

impl Page {
    pub fn records(&self) -> &QueryResult {
        &self.records
    }

    pub fn next_cursor(&self) -> Option<&str> {
        self.next_cursor.as_deref()
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
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
    type Result = ResponseFuture<Result<Page, EngineError>>;

    fn handle(&mut self, message: Execute, _: &mut Context<Self>) -> Self::Result {
        let engine = self.engine.clone();
        let shards = Rc::clone(&self.shards);
        Box::pin(async move { answer(&engine, &shards, message).await })
    }
}

impl Handler<Summarize> for Router {
    type Result = ResponseFuture<Result<Rows, EngineError>>;

    fn handle(&mut self, message: Summarize, _: &mut Context<Self>) -> Self::Result {
        let engine = self.engine.clone();
        let shards = Rc::clone(&self.shards);
        Box::pin(async move { summarize(&engine, &shards, message).await })
    }
}

async fn answer(
    engine: &Engine,
    shards: &[ShardHandle],
    message: Execute,
) -> Result<Page, EngineError> {
    let Execute {
        request,
        mut plan,
        deadline,
        patience,
        fault,
    } = message;
    let mut retried = false;
    loop {
        match fan_out(engine, shards, &plan, deadline, &patience, fault).await {
            // The merge's slot, held until the page is cut.
            Ok((records, _slot)) => {
                return plan::paginate(
                    &request,
                    plan,
                    records,
                    engine.limits(),
                    engine.cursor_key(),
                )
            }
            Err(ShardError::OtherGeneration { .. }) if !retried => {
                retried = true;
                plan = engine.plan(&request)?;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// Merges the shards' partial summaries into rows; more rows than `--max-records`
/// is `result_too_large`. Like [`answer`], plans once more after two reloads.
async fn summarize(
    engine: &Engine,
    shards: &[ShardHandle],
    message: Summarize,
) -> Result<Rows, EngineError> {
    let Summarize {
        request,
        mut plan,
        deadline,
        patience,
        fault,
    } = message;
    let mut retried = false;
    let partials = loop {
        let asks = stations_by_shard(&plan.catalog, &plan.stations).map(|(shard, stations)| {
            let request = ShardSummary {
                stations,
                question: plan.question.clone(),
            };
            shards[shard].summarize(
                Arc::clone(&plan.catalog),
                request,
                deadline,
                patience.clone(),
                fault,
            )
        });
        let replies: Result<Vec<Partial>, ShardError> = join_all(asks).await.into_iter().collect();
        match replies {
            Ok(partials) => break partials,
            Err(ShardError::OtherGeneration { .. }) if !retried => {
                retried = true;
                plan = engine.plan_summary(&request)?;
            }
            Err(error) => return Err(error.into()),
        }
    };
    let _slot = engine.take_slot(&patience).await?;
    let merged = partials.into_iter().reduce(|mut merged, partial| {
        merged.merge(partial);
        merged
    });
    let Some(merged) = merged else {
        return Ok(Rows::default());
    };
    let max_records = engine.limits().max_records;
    if merged.row_count() > max_records {
        return Err(EngineError::TooManyRows { max_records });
    }
    Ok(merged.finish(plan.grouping(), &plan.catalog))
}

/// A plan's stations grouped by the shard that holds them; shards without any are
/// left out.
fn stations_by_shard(
    catalog: &stq_core::data::catalog::Catalog,
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

/// The plan's records merged from its shards' scans, and the slot the merge took.
async fn fan_out<'engine>(
    engine: &'engine Engine,
    shards: &[ShardHandle],
    plan: &Plan,
    deadline: Instant,
    patience: &Patience,
    fault: Option<ShardFault>,
) -> Result<(QueryResult, Slot<'engine>), ShardError> {
    let catalog = &plan.catalog;
    let scans = stations_by_shard(catalog, &plan.stations).map(|(shard, stations)| {
        shards[shard].scan(
            catalog.generation(),
            ScanRequest {
                stations,
                window: plan.window,
                after: plan.after,
                filter: plan.filter.clone(),
                cap: plan.cap,
            },
            deadline,
            patience.clone(),
            fault,
        )
    });
    let replies = join_all(scans).await;

    let mut parts = Vec::with_capacity(replies.len());
    let mut streams = Vec::with_capacity(replies.len());
    for (part, reply) in replies.into_iter().enumerate() {
        let reply = reply?;
        parts.push(Part {
            data: reply.data,
            sealed: reply.answer.sealed,
        });
        (streams).push((reply.answer.hits.into_iter()).map(move |hit| PartHit { hit, part }));
    }
    let slot = engine.take_slot(patience).await?;
    let records = QueryResult {
        hits: merge_sorted(streams, plan.cap),
        parts,
    };
    Ok((records, slot))
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
    ) -> Result<Page, EngineError> {
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

    /// Answers the summary `request`, planned as `plan`, by `deadline`; its
    /// stretches wait for slots within `patience`.
    pub async fn summarize(
        &self,
        request: Arc<SummaryRequest>,
        plan: SummaryPlan,
        deadline: Instant,
        patience: Patience,
        fault: Option<ShardFault>,
    ) -> Result<Rows, EngineError> {
        self.address
            .send(Summarize {
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
