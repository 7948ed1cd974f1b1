//! The router actor: fans a planned query out to the shards that hold its stations
//! and merges their answers into a page of records or a summary's rows. What a
//! shard is asked and how answers merge is `stq_core::data::plan`'s; here is where
//! and when: on the worker's own replicas, in a query slot, within the deadline.
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
use stq_core::data::{Answer, Plan, Request, ShardAnswer};

use super::fault::ShardFault;
use super::shard::{ShardError, ShardHandle};
use super::slots::Patience;
use super::{Engine, EngineError};

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
    /// Whether a query that raced two reloads is planned again from its request;
    /// a stream's steps, planned otherwise, are not: they fail with
    /// [`EngineError::Raced`] and are planned again by the stream.
    replan: bool,
}

impl Message for Execute {
    type Result = Result<Answer, EngineError>;
}

// --- The actor -------------------------------------------------------------------

/// One worker's router: it holds nothing of a query between its messages.
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
        replan,
    } = message;
    let mut retried = false;
    let answers = loop {
        let asks = plan.shard_questions().map(|(shard, question)| {
            shards[shard].query(question, deadline, patience.clone(), fault)
        });
        let answers: Result<Vec<ShardAnswer>, ShardError> =
            join_all(asks).await.into_iter().collect();
        match answers {
            Ok(answers) => break answers,
            Err(ShardError::OtherGeneration { .. }) if !replan => return Err(EngineError::Raced),
            Err(ShardError::OtherGeneration { .. }) if !retried => {
                retried = true;
                plan = engine.plan(&request)?;
            }
            Err(ShardError::Storage(fault)) => {
                engine.storage_fault(&fault);
                return Err(EngineError::StorageUnavailable(fault));
            }
            Err(error) => return Err(error.into()),
        }
    };
    // The merge's slot, held until the answer is cut.
    let _slot = engine.take_slot(&patience).await?;
    // The merge reads records' JSON, from store files too.
    engine.planned(plan.merge(answers, engine.settings()))
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
        self.send(Execute {
            request,
            plan,
            deadline,
            patience,
            fault,
            replan: true,
        })
        .await
    }

    /// Answers a plan made for `request` otherwise than from it (a stream's step),
    /// by `deadline`: from the generation it was planned on, or
    /// [`EngineError::Raced`] once two reloads passed it.
    pub async fn execute_planned(
        &self,
        request: Arc<Request>,
        plan: Plan,
        deadline: Instant,
    ) -> Result<Answer, EngineError> {
        self.send(Execute {
            request,
            plan,
            deadline,
            patience: Patience::default(),
            fault: None,
            replan: false,
        })
        .await
    }

    async fn send(&self, execute: Execute) -> Result<Answer, EngineError> {
        self.address
            .send(execute)
            .await
            .map_err(|error| EngineError::Failed(format!("the router's mailbox: {error}")))?
    }
}
