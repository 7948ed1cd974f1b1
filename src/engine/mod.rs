//! The engine: the actors that hold the data and answer queries over it.
//!
//! One shard actor per shard holds that shard's part of the current generation
//! ([`shard`]); one router actor per HTTP worker fans a query out to the shards that
//! hold its stations and merges their answers ([`router`]). A request is first
//! planned against the current catalog ([`plan`]); a reload builds the next
//! generation beside the current one and swaps it in ([`reload`]).
//!
//! [`Engine`] is the one handle the HTTP layer holds: the current generation (its
//! catalog and the tokens read with it), the settings queries are planned with, and
//! the shards. What the HTTP layer gets back is a [`Page`] or an [`EngineError`],
//! never a shard's own error: a query that raced a reload is planned again by its
//! router, not by its caller.

mod fault;
mod plan;
mod reload;
mod router;
mod shard;

use std::sync::Arc;

use futures_util::future::join_all;
use parking_lot::RwLock;
use prometheus_client::metrics::counter::Counter;
use stq_core::data::catalog::{Catalog, Generation};
use stq_core::data::cursor::{CursorError, CursorKey};
use stq_core::domain::auth::Tokens;
use stq_core::domain::query::{Limits, QueryError};

pub use fault::{Fault, ShardFault};
pub use plan::{Plan, Request};
pub use reload::{reload_on_change, reload_on_hangup, ReloadError, ReloadTrigger, Reloader};
pub use router::{Page, QueryResult, RouterHandle};
pub(crate) use shard::panic_message;

use shard::{ShardError, ShardHandle};

/// Why the engine did not answer a query.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The request's window cannot be resolved (docs/api.md section 5).
    #[error(transparent)]
    Query(#[from] QueryError),

    #[error(transparent)]
    Cursor(#[from] CursorError),

    #[error("the token may not access some of the requested stations")]
    Forbidden {
        /// Sorted in byte order, without repeats.
        stations: Vec<String>,
    },

    #[error(
        "more than {max_records} records match; narrow the window or the filters, or page with `limit`"
    )]
    ResultTooLarge { max_records: usize },

    /// The request's deadline passed before the shards reached it.
    #[error("the query's deadline passed before the shards answered")]
    TimedOut,

    /// A shard panicked or died, or the query raced more reloads than it retries.
    /// The cause is for the log, not for the client.
    #[error("the query failed in the engine: {0}")]
    Failed(String),
}

impl From<ShardError> for EngineError {
    fn from(error: ShardError) -> EngineError {
        match error {
            ShardError::Expired => EngineError::TimedOut,
            error => EngineError::Failed(error.to_string()),
        }
    }
}

/// The running engine: the shard actors, started once for the whole process, and
/// the generation they serve. Cheap to clone; every clone is the same engine.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    shards: Box<[ShardHandle]>,
    /// Swapped whole by a reload, only once every shard holds the new generation.
    current: RwLock<Current>,
    limits: Limits,
    cursor_key: CursorKey,
}

/// The generation being served, and the tokens read with it.
#[derive(Clone)]
struct Current {
    catalog: Arc<Catalog>,
    tokens: Arc<Tokens>,
}

impl Engine {
    /// Starts one shard actor per shard of `generation`, each on its own arbiter.
    /// `restarts` counts the shard actors that die and are started again. Needs a
    /// running actix system.
    pub fn start(
        generation: Generation,
        tokens: Arc<Tokens>,
        limits: Limits,
        cursor_key: CursorKey,
        restarts: Counter,
    ) -> Engine {
        let shards = generation
            .shards
            .into_iter()
            .enumerate()
            .map(|(number, data)| ShardHandle::start(number, data, restarts.clone()))
            .collect();
        Engine {
            inner: Arc::new(Inner {
                shards,
                current: RwLock::new(Current {
                    catalog: generation.catalog,
                    tokens,
                }),
                limits,
                cursor_key,
            }),
        }
    }

    /// The current generation's catalog; a request keeps the one it planned on.
    pub fn catalog(&self) -> Arc<Catalog> {
        Arc::clone(&self.inner.current.read().catalog)
    }

    /// The tokens read with the current generation.
    pub fn tokens(&self) -> Arc<Tokens> {
        Arc::clone(&self.inner.current.read().tokens)
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Plans `request` on the current generation.
    pub fn plan(&self, request: &Request) -> Result<Plan, EngineError> {
        plan::plan(
            request,
            self.catalog(),
            &self.inner.limits,
            &self.inner.cursor_key,
        )
    }

    /// Hands every shard its part of a new generation, waits until all hold it, and
    /// only then makes it and `tokens` current: a request planned on the new catalog
    /// must find the new data in every shard.
    pub async fn install(
        &self,
        generation: Generation,
        tokens: Arc<Tokens>,
    ) -> Result<(), EngineError> {
        let shards = &self.inner.shards;
        assert_eq!(
            generation.shards.len(),
            shards.len(),
            "a generation is built for the engine's shard count"
        );
        let installs = shards
            .iter()
            .zip(generation.shards)
            .map(|(shard, data)| shard.install(data));
        for result in join_all(installs).await {
            result?;
        }
        *self.inner.current.write() = Current {
            catalog: generation.catalog,
            tokens,
        };
        Ok(())
    }

    /// Has every shard drop the generation before `generation`, once no request
    /// can still be answered from it.
    pub async fn retire_before(&self, generation: u64) {
        join_all(
            self.inner
                .shards
                .iter()
                .map(|shard| shard.retire(generation)),
        )
        .await;
    }

    pub fn shard_count(&self) -> usize {
        self.inner.shards.len()
    }

    /// Stops every shard's thread; routers still running answer with errors after.
    pub fn stop(&self) {
        for shard in self.inner.shards.iter() {
            shard.stop();
        }
    }

    /// Starts a router on the current arbiter (an HTTP worker's own thread).
    pub fn router(&self) -> RouterHandle {
        RouterHandle::start(self.clone())
    }

    fn shards(&self) -> &[ShardHandle] {
        &self.inner.shards
    }

    fn cursor_key(&self) -> &CursorKey {
        &self.inner.cursor_key
    }
}
