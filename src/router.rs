//! The router actor: fans a query out to the shards that hold its stations and
//! merges their sorted answers into the contract's order.
//!
//! Every HTTP worker starts a router of its own ([`Engine::router`]), so no single
//! router mailbox is the place every request queues on; the shards are shared. A
//! router keeps no state between requests: each query's fan-out runs as its own
//! future, so a slow query does not hold up the next one in the mailbox.

use std::sync::Arc;
use std::time::Instant as Stopwatch;

use actix::prelude::*;
use futures_util::future::join_all;
use prometheus_client::metrics::counter::Counter;

use crate::fault::ShardFault;
use crate::index::{
    merge_sorted, Catalog, Generation, Hit, Position, RecordFilter, ScanRequest, ShardData,
    StationRef, Window,
};
use crate::shard::{ShardError, ShardHandle};

// --- Messages --------------------------------------------------------------------

/// Answer a query: the first `query.cap` matching records of its stations.
pub struct Execute {
    pub query: EngineQuery,
    /// After it nobody waits for the answer: a shard that reaches the query later
    /// skips it.
    pub deadline: Stopwatch,
    /// Only tests ask for one (see `fault`).
    pub fault: Option<ShardFault>,
}

impl Message for Execute {
    type Result = Result<QueryResult, ShardError>;
}

/// A query in the index's terms: stations by rank, filters by symbol.
#[derive(Clone, Debug)]
pub struct EngineQuery {
    /// The catalog of the generation the query was planned against.
    pub catalog: Arc<Catalog>,
    /// Station ranks, each at most once.
    pub stations: Vec<u32>,
    pub window: Window,
    pub after: Option<Position>,
    pub filter: RecordFilter,
    pub cap: usize,
}

/// Matching records in order, pointing into the shard data they came from.
#[derive(Debug, Default)]
pub struct QueryResult {
    parts: Vec<Arc<ShardData>>,
    hits: Vec<PartHit>,
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
    pub fn truncate(&mut self, count: usize) {
        self.hits.truncate(count);
    }

    pub fn last_position(&self) -> Option<Position> {
        self.hits.last().map(|part_hit| part_hit.hit.position)
    }

    /// The records' response JSON, in order.
    pub fn records(&self) -> impl Iterator<Item = &[u8]> + Clone + '_ {
        self.hits
            .iter()
            .map(|part_hit| self.parts[part_hit.part].json(&part_hit.hit))
    }
}

// --- The actor -------------------------------------------------------------------

pub struct Router {
    shards: Arc<[ShardHandle]>,
}

impl Actor for Router {
    type Context = Context<Self>;
}

impl Handler<Execute> for Router {
    type Result = ResponseFuture<Result<QueryResult, ShardError>>;

    fn handle(&mut self, message: Execute, _: &mut Context<Self>) -> Self::Result {
        let shards = Arc::clone(&self.shards);
        Box::pin(async move { fan_out(&shards, message).await })
    }
}

async fn fan_out(shards: &[ShardHandle], message: Execute) -> Result<QueryResult, ShardError> {
    let Execute {
        query,
        deadline,
        fault,
    } = message;
    let catalog = &query.catalog;
    let mut per_shard: Vec<Vec<StationRef>> = vec![Vec::new(); catalog.shard_count];
    for &rank in &query.stations {
        let placement = catalog.placements[rank as usize];
        per_shard[placement.shard as usize].push(StationRef {
            rank,
            local: placement.local,
        });
    }
    let scans = per_shard
        .into_iter()
        .enumerate()
        .filter(|(_, stations)| !stations.is_empty())
        .map(|(shard, stations)| {
            shards[shard].scan(
                catalog.generation,
                ScanRequest {
                    stations,
                    window: query.window,
                    after: query.after,
                    filter: query.filter.clone(),
                    cap: query.cap,
                },
                deadline,
                fault,
            )
        });
    let replies = join_all(scans).await;

    let mut parts = Vec::with_capacity(replies.len());
    let mut streams = Vec::with_capacity(replies.len());
    for (part, reply) in replies.into_iter().enumerate() {
        let reply = reply?;
        parts.push(reply.data);
        streams.push(reply.hits.into_iter().map(move |hit| PartHit { hit, part }));
    }
    Ok(QueryResult {
        hits: merge_sorted(streams, query.cap),
        parts,
    })
}

// --- The handle ------------------------------------------------------------------

/// The running engine: every shard actor, started once for the whole process.
#[derive(Clone)]
pub struct Engine {
    shards: Arc<[ShardHandle]>,
}

impl Engine {
    /// Starts one shard actor per shard of the generation, each on its own arbiter,
    /// and returns the generation's catalog beside the engine. `restarts` counts the
    /// shard actors that die and are started again.
    pub fn start(generation: Generation, restarts: Counter) -> (Engine, Arc<Catalog>) {
        let shards: Arc<[ShardHandle]> = generation
            .shards
            .into_iter()
            .enumerate()
            .map(|(number, data)| ShardHandle::start(number, data, restarts.clone()))
            .collect();
        (Engine { shards }, generation.catalog)
    }

    /// Hands every shard its part of a new generation and waits until all hold it.
    /// Only then may the catalog be swapped: a request planned on the new catalog
    /// must find the new data in every shard.
    pub async fn install(&self, generation: Generation) -> Result<Arc<Catalog>, ShardError> {
        assert_eq!(
            generation.shards.len(),
            self.shards.len(),
            "a generation is built for the engine's shard count"
        );
        let installs = self
            .shards
            .iter()
            .zip(generation.shards)
            .map(|(shard, data)| shard.install(data));
        for result in join_all(installs).await {
            result?;
        }
        Ok(generation.catalog)
    }

    /// Has every shard drop the generation before `generation`, once no request
    /// can still be answered from it.
    pub async fn retire_before(&self, generation: u64) {
        join_all(self.shards.iter().map(|shard| shard.retire(generation))).await;
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Stops every shard's thread; routers still running answer with errors after.
    pub fn stop(&self) {
        for shard in self.shards.iter() {
            shard.stop();
        }
    }

    /// Starts a router on the current arbiter (an HTTP worker's own thread).
    pub fn router(&self) -> RouterHandle {
        let router = Router {
            shards: Arc::clone(&self.shards),
        };
        RouterHandle {
            address: router.start(),
        }
    }
}

/// How an HTTP handler reaches its worker's router.
#[derive(Clone)]
pub struct RouterHandle {
    address: Addr<Router>,
}

impl RouterHandle {
    pub async fn execute(
        &self,
        query: EngineQuery,
        deadline: Stopwatch,
        fault: Option<ShardFault>,
    ) -> Result<QueryResult, ShardError> {
        self.address
            .send(Execute {
                query,
                deadline,
                fault,
            })
            .await?
    }
}
