//! The engine: the actors that hold the data and answer queries over it.
//!
//! One shard actor per shard and HTTP worker holds that shard's part of the
//! current generation ([`shard`]); one router actor per HTTP worker fans a query
//! out to its own worker's actors of the shards that hold its stations and merges
//! their answers ([`router`]), so a query stays on the thread it arrived on. A
//! reload builds the next generation beside the current one and swaps it in
//! ([`reload`]), on SIGHUP or when the watch sees a change ([`watch`]).
//!
//! What is computed of a query (its plan against the current catalog, what each
//! shard is asked and answers, the merge and the page) is stq-core's
//! (`stq_core::data::plan`): the engine decides where each step runs and when,
//! and names only that module's handful of types.
//!
//! [`Engine`] is the one handle the HTTP layer holds: the current generation (its
//! catalog and the tokens read with it), the settings queries are planned with, and
//! the shards. What the HTTP layer gets back is an `Answer` (a page of records or
//! a summary's rows) or an [`EngineError`], never a shard's own error: a query
//! that raced a reload is planned again by its router, not by its caller.

mod fault;
mod live;
mod reload;
mod router;
mod shard;
mod slots;
mod watch;

use std::sync::Arc;

use futures_util::future::join_all;
use parking_lot::RwLock;
use prometheus_client::metrics::counter::Counter;
use stq_core::data::{
    Additions, Catalog, Generation, Plan, PlanError, Refusal, Request, Settings, ShardData,
    StorageFault,
};
use stq_core::domain::time::Timestamp;
use stq_core::domain::{Limits, Principal, QueryError, Tokens};

pub use fault::{Fault, ShardFault};
pub use live::{Change, Forgotten};
pub use reload::{reload_on_hangup, ReloadError, ReloadTrigger, Reloader};
pub use router::RouterHandle;
pub(crate) use shard::panic_message;
pub use slots::{Overloaded, Patience, Slot, SLOT_WAIT};
pub use watch::{reload_on_change, Watch};

use crate::jwt::{self, Refused, Verifier};
use parking_lot::Mutex;
use shard::{Shard, ShardError, ShardHandle};
use slots::Slots;

/// Why the engine did not answer a query.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The request's window cannot be resolved (docs/api.md section 5).
    #[error(transparent)]
    Query(#[from] QueryError),

    /// The query is one the engine will not answer as asked; the client can change it.
    #[error(transparent)]
    Refused(#[from] Refusal),

    /// The request's deadline passed before the shards reached it.
    #[error("the query's deadline passed before the shards answered")]
    TimedOut,

    #[error(transparent)]
    Overloaded(#[from] Overloaded),

    /// A stream's step raced two reloads: its stream plans it again.
    #[error("the query raced two reloads")]
    Raced,

    /// A store file failed a read of the query's: the engine has had the stations
    /// that read it read again from the snapshot files ([`Engine::storage_fault`]).
    #[error(transparent)]
    StorageUnavailable(StorageFault),

    /// A shard panicked or died, or the query raced more reloads than it retries.
    /// The cause is for the log, not for the client.
    #[error("the query failed in the engine: {0}")]
    Failed(String),
}

impl From<PlanError> for EngineError {
    fn from(error: PlanError) -> EngineError {
        match error {
            PlanError::Query(error) => EngineError::Query(error),
            PlanError::Refused(refusal) => EngineError::Refused(refusal),
            error @ PlanError::OtherAnswer => EngineError::Failed(error.to_string()),
            PlanError::Storage(fault) => EngineError::StorageUnavailable(fault),
        }
    }
}

impl From<ShardError> for EngineError {
    fn from(error: ShardError) -> EngineError {
        match error {
            ShardError::Expired => EngineError::TimedOut,
            ShardError::Overloaded(overloaded) => EngineError::Overloaded(overloaded),
            ShardError::Storage(fault) => EngineError::StorageUnavailable(fault),
            error => EngineError::Failed(error.to_string()),
        }
    }
}

/// The running engine: the shards, the replicas of them that the HTTP workers'
/// routers started, and the generation they serve. Cheap to clone; every clone is
/// the same engine.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    shards: Box<[Arc<Shard>]>,
    /// Every worker's replicas of every shard, for installs and retirements. Held
    /// while a worker starts its replicas and while a generation is handed to the
    /// shards, so that no replica misses a generation.
    replicas: Mutex<Vec<ShardHandle>>,
    /// Swapped whole by a reload, only once every shard holds the new generation.
    current: RwLock<Current>,
    /// The limits, cursor key and pass results queries are planned with.
    settings: Settings,
    /// `--max-concurrent-queries`: taken by every stretch of a query that computes.
    slots: Arc<Slots>,
    /// What recent generations changed, and the news of the next.
    live: live::Live,
    /// `--jwt-jwks`: JSON Web Tokens beside the tokens file.
    jwt: Option<Arc<Verifier>>,
    /// What a store file's fault asks for (the stations to read again), once the
    /// reloads have started ([`Engine::on_storage_fault`]).
    repair: std::sync::OnceLock<Box<dyn Fn(Vec<String>) + Send + Sync>>,
    /// The store files whose faults were reported since the last install: one
    /// repair each, not one per query that meets the file before it is done.
    faulted: Mutex<std::collections::HashSet<std::path::PathBuf>>,
}

/// The generation being served, and the tokens read with it.
#[derive(Clone)]
struct Current {
    catalog: Arc<Catalog>,
    tokens: Arc<Tokens>,
}

impl Engine {
    /// The engine over `generation`, planning under `settings`; its shard actors
    /// start with the routers ([`Engine::router`]). `restarts` counts the shard
    /// actors that die and are started again.
    pub fn start(
        generation: Generation,
        tokens: Arc<Tokens>,
        settings: Settings,
        restarts: Counter,
    ) -> Engine {
        let Generation { catalog, shards } = generation;
        let live = live::Live::new(catalog.generation());
        let shards = shards
            .into_iter()
            .enumerate()
            .map(|(number, data)| Arc::new(Shard::new(number, data, restarts.clone())))
            .collect();
        Engine {
            inner: Arc::new(Inner {
                shards,
                replicas: Mutex::new(Vec::new()),
                current: RwLock::new(Current { catalog, tokens }),
                settings,
                slots: Arc::default(),
                live,
                jwt: None,
                repair: std::sync::OnceLock::new(),
                faulted: Mutex::default(),
            }),
        }
    }

    /// The engine with `pass_results` in place of `pass` as what passes. Only
    /// before the engine is shared.
    pub fn with_pass_results(mut self, pass_results: Vec<String>) -> Engine {
        Arc::get_mut(&mut self.inner)
            .expect("pass results are set before the engine is shared")
            .settings
            .pass_results = pass_results;
        self
    }

    /// The engine with at most `max_concurrent_queries` stretches of queries
    /// computing at once, in place of 4 x CPUs. Only before the engine is shared.
    pub fn with_max_concurrent_queries(mut self, max_concurrent_queries: usize) -> Engine {
        Arc::get_mut(&mut self.inner)
            .expect("the cap is set before the engine is shared")
            .slots = Arc::new(Slots::new(max_concurrent_queries));
        self
    }

    /// The engine accepting the JSON Web Tokens `verifier` verifies, beside the
    /// tokens file's. Only before the engine is shared.
    pub fn with_jwt(mut self, verifier: Arc<Verifier>) -> Engine {
        Arc::get_mut(&mut self.inner)
            .expect("the verifier is set before the engine is shared")
            .jwt = Some(verifier);
        self
    }

    /// The principal of an `Authorization` header value at `now` (docs/api.md
    /// sections 3 and 16), or why it is refused.
    pub fn authenticate(
        &self,
        authorization: Option<&[u8]>,
        now: Timestamp,
    ) -> Result<Arc<Principal>, Refused> {
        jwt::authenticate(
            &self.tokens(),
            self.inner.jwt.as_deref(),
            authorization,
            now,
        )
    }

    /// Has `repair` called with the stations to read again from the snapshot
    /// files when a store file fails a query's read. Set once.
    pub fn on_storage_fault(&self, repair: impl Fn(Vec<String>) + Send + Sync + 'static) {
        let _ = self.inner.repair.set(Box::new(repair));
    }

    /// Reports a store file's fault met by a query (docs/api.md section 12): logs
    /// it, and the first time since the last install, asks for the stations that
    /// read the file to be read again from the snapshot files.
    pub fn storage_fault(&self, fault: &StorageFault) {
        if !self.inner.faulted.lock().insert(fault.path.clone()) {
            return;
        }
        let Some(repair) = self.inner.repair.get() else {
            tracing::warn!("{fault}; answered storage_unavailable");
            return;
        };
        let stations = match self.serving() {
            Some((catalog, shards)) => catalog.stations_to_repair(&shards, fault),
            None => Vec::new(),
        };
        tracing::warn!(
            "{fault}; answered storage_unavailable, reading {} station(s) again from the \
             snapshot files (store: degraded)",
            stations.len()
        );
        repair(stations);
    }

    /// The verifier of JSON Web Tokens, with `--jwt-jwks`.
    pub fn jwt(&self) -> Option<&Arc<Verifier>> {
        self.inner.jwt.as_ref()
    }

    /// A slot for a stretch of a query that computes outside the engine (its
    /// envelope), or [`Overloaded`] once the query's `patience` runs out.
    pub async fn take_slot(&self, patience: &Patience) -> Result<Slot<'_>, Overloaded> {
        self.inner.slots.take(patience).await
    }

    /// The current generation's catalog; a request keeps the one it planned on.
    pub fn catalog(&self) -> Arc<Catalog> {
        Arc::clone(&self.inner.current.read().catalog)
    }

    /// The current generation: its catalog and every shard's part of it, which a
    /// reload builds the next one from. `None` while an install is under way (the
    /// shards hold a newer generation than the catalog).
    pub fn serving(&self) -> Option<(Arc<Catalog>, Vec<Arc<ShardData>>)> {
        let catalog = self.catalog();
        let shards: Vec<Arc<ShardData>> = self
            .inner
            .shards
            .iter()
            .map(|shard| shard.current())
            .collect();
        shards
            .iter()
            .all(|shard| shard.generation() == catalog.generation())
            .then_some((catalog, shards))
    }

    /// The tokens read with the current generation.
    pub fn tokens(&self) -> Arc<Tokens> {
        Arc::clone(&self.inner.current.read().tokens)
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.settings.limits
    }

    /// Plans `request` on the current generation.
    pub fn plan(&self, request: &Request) -> Result<Plan, EngineError> {
        self.planned(Plan::new(request, self.catalog(), &self.inner.settings))
    }

    /// `planned` (a plan, a merge, a stream's step), its error the engine's: a
    /// store file's fault is reported on the way ([`Engine::storage_fault`]).
    pub fn planned<T>(&self, planned: Result<T, PlanError>) -> Result<T, EngineError> {
        planned.map_err(|error| {
            if let PlanError::Storage(fault) = &error {
                self.storage_fault(fault);
            }
            error.into()
        })
    }

    /// Hands every shard its part of a new generation, waits until all replicas
    /// hold it, and only then makes it and `tokens` current: a request planned on
    /// the new catalog must find the new data in every replica. Then live answers
    /// hear of it, and of what it changed (`additions`).
    pub async fn install(&self, generation: Generation, tokens: Arc<Tokens>, additions: Additions) {
        let shards = &self.inner.shards;
        let Generation {
            catalog,
            shards: data,
        } = generation;
        assert_eq!(
            data.len(),
            shards.len(),
            "a generation is built for the engine's shard count"
        );
        let data: Vec<Arc<ShardData>> = data.into_iter().map(Arc::new).collect();
        let replicas = {
            let mut replicas = self.inner.replicas.lock();
            for (shard, data) in shards.iter().zip(&data) {
                shard.install(data);
            }
            replicas.retain(ShardHandle::is_alive);
            replicas.clone()
        };
        join_all(
            replicas
                .iter()
                .map(|replica| replica.install(Arc::clone(&data[replica.number()]))),
        )
        .await;
        let number = catalog.generation();
        *self.inner.current.write() = Current { catalog, tokens };
        // A file that fails the new generation's reads is reported again.
        self.inner.faulted.lock().clear();
        self.inner.live.installed(number, additions);
    }

    /// What every generation after `generation` changed, in order; [`Forgotten`]
    /// once some of them are no longer kept.
    pub fn changes_since(&self, generation: u64) -> Result<Vec<Arc<Change>>, Forgotten> {
        self.inner.live.since(generation)
    }

    /// The newest generation's number, and news of each install.
    pub fn generations(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.live.subscribe()
    }

    /// Ends every stream and held request (SIGTERM).
    pub fn stop_live(&self) {
        self.inner.live.stop();
    }

    /// News of [`Engine::stop_live`].
    pub fn stopping(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inner.live.stopping()
    }

    /// The number this process drew at its start, which its event ids carry.
    pub fn process(&self) -> u64 {
        self.inner.live.process()
    }

    /// What queries are planned and merged with.
    pub fn plan_settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// Has every shard drop the generation before `generation`, once no request
    /// can still be answered from it.
    pub async fn retire_before(&self, generation: u64) {
        let replicas = {
            let replicas = self.inner.replicas.lock();
            for shard in self.inner.shards.iter() {
                shard.retire(generation);
            }
            replicas.clone()
        };
        join_all(replicas.iter().map(|replica| replica.retire(generation))).await;
    }

    pub fn shard_count(&self) -> usize {
        self.inner.shards.len()
    }

    /// Forgets every replica: their actors end with their workers' arbiters, and a
    /// router still running answers from the replicas it holds.
    pub fn stop(&self) {
        self.inner.replicas.lock().clear();
    }

    /// Starts a router, and a replica of every shard for it, on the current arbiter
    /// (an HTTP worker's own thread). Needs a running actix system.
    pub fn router(&self) -> RouterHandle {
        RouterHandle::start(self.clone(), self.start_replicas())
    }

    /// A replica of every shard on the current arbiter, in shard order.
    fn start_replicas(&self) -> Box<[ShardHandle]> {
        let mut replicas = self.inner.replicas.lock();
        let started: Box<[ShardHandle]> = self
            .inner
            .shards
            .iter()
            .map(|shard| ShardHandle::start(Arc::clone(shard), Arc::clone(&self.inner.slots)))
            .collect();
        replicas.extend(started.iter().cloned());
        started
    }

    /// What queries are planned and merged with.
    fn settings(&self) -> &Settings {
        &self.inner.settings
    }
}
