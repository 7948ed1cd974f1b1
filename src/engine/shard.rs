//! The shard actor: scans one shard's stations of the current generation (and of
//! the one before, for requests still in flight across a reload).
//!
//! Thread per core: every HTTP worker's arbiter hosts one actor for every shard,
//! its *replica* of that shard, and the worker's router asks only its own replicas.
//! A query's messages therefore never leave the worker's thread: no wake-up of
//! another thread, no context switch, no core taken from the HTTP workers. The
//! replicas of a shard share its data (one `Arc<ShardData>` per generation), so a
//! station's records still lie in exactly one place in memory. ARCHITECTURE.md
//! gives the measurements that chose this over a thread per shard.
//!
//! A query's scan or partial summary is a stretch of computing: it holds a query slot
//! (`slots`) while it runs and only then. When none is free, the handler answers
//! with a future that waits for one and then does the work, so the actor goes on
//! with its mailbox meanwhile.
//!
//! Failures stay small. A scan that panics fails only its own query: the actor's
//! data is immutable, so nothing is left half-changed, and the actor goes on. A
//! replica whose actor dies anyway closes its mailbox; its handle starts a new actor
//! on the same arbiter from the shard's [`Shard`] record, so only the queries that
//! were in the dead mailbox fail.

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use parking_lot::{Mutex, RwLock};
use prometheus_client::metrics::counter::Counter;

use stq_core::data::{ShardAnswer, ShardQuestion};
use stq_core::data::{ShardData, StorageFault};

use super::fault::ShardFault;
use super::slots::{Overloaded, Patience, Slots};

// --- Messages --------------------------------------------------------------------

/// Answer a query's question over this shard's stations, in the generation it
/// was planned on: the first `cap` matching records, or a partial summary (docs/api.md
/// section 10), never records.
pub(super) struct Query {
    /// What the shard is asked, and about which generation.
    pub question: ShardQuestion,
    /// Past it the request has been answered 503 `timeout`: the work is skipped.
    pub deadline: Instant,
    /// The query's wait for slots, shared with its other stretches.
    pub patience: Patience,
    /// Only tests ask for one (see `fault`).
    pub fault: Option<ShardFault>,
}

impl Message for Query {
    type Result = Result<ShardAnswer, ShardError>;
}

/// Make `data` the current generation; the current one becomes the previous one, so
/// that requests planned against it before the catalog was swapped still finish.
pub(super) struct Install {
    pub data: Arc<ShardData>,
}

impl Message for Install {
    type Result = ();
}

/// Drop the generation before `generation`, if `generation` is still the current
/// one: no request can use the previous one any longer.
pub(super) struct Retire {
    pub generation: u64,
}

impl Message for Retire {
    type Result = ();
}

#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("the shard holds generation {held}, not {wanted}")]
    OtherGeneration { held: u64, wanted: u64 },
    #[error("the request's deadline passed before the shard reached it")]
    Expired,
    #[error(transparent)]
    Overloaded(#[from] Overloaded),
    #[error("shard {shard} panicked: {message}")]
    Panicked { shard: usize, message: String },
    /// A store file failed a read of the query's ([`StorageFault`]).
    #[error(transparent)]
    Storage(#[from] StorageFault),
    #[error("the shard's mailbox is closed: {0}")]
    Mailbox(#[from] MailboxError),
}

// --- The actor -------------------------------------------------------------------

pub(super) struct ShardActor {
    number: usize,
    held: Held,
    slots: Arc<Slots>,
}

/// The generations a shard holds: the current one, and the one before.
#[derive(Clone)]
struct Held {
    current: Arc<ShardData>,
    previous: Option<Arc<ShardData>>,
}

impl Actor for ShardActor {
    type Context = Context<Self>;
}

impl Handler<Query> for ShardActor {
    type Result = Response<Result<ShardAnswer, ShardError>>;

    fn handle(&mut self, message: Query, _: &mut Context<Self>) -> Self::Result {
        let Query {
            question,
            deadline,
            patience,
            fault,
        } = message;
        let data = match self.data_for(question.generation(), deadline, fault) {
            Ok(data) => Arc::clone(data),
            Err(error) => return Response::reply(Err(error)),
        };
        self.in_slot(
            deadline,
            patience,
            fault,
            move || Ok(question.answer(data)?),
        )
    }
}

impl Handler<Install> for ShardActor {
    type Result = ();

    fn handle(&mut self, message: Install, _: &mut Context<Self>) {
        self.held.install(message.data);
    }
}

impl Handler<Retire> for ShardActor {
    type Result = ();

    fn handle(&mut self, message: Retire, _: &mut Context<Self>) {
        self.held.retire(message.generation);
    }
}

impl ShardActor {
    /// The data of `generation`, unless the request is past its deadline or the
    /// generation has left this shard.
    fn data_for(
        &self,
        generation: u64,
        deadline: Instant,
        fault: Option<ShardFault>,
    ) -> Result<&Arc<ShardData>, ShardError> {
        if Instant::now() > deadline {
            return Err(ShardError::Expired);
        }
        if fault == Some(ShardFault::Death) {
            // Outside `guarded`: the panic ends the actor, as a real crash would.
            panic!("shard {} dies, as the request asked", self.number);
        }
        let held = &self.held;
        std::iter::once(&held.current)
            .chain(&held.previous)
            .find(|data| data.generation() == generation)
            .ok_or(ShardError::OtherGeneration {
                held: held.current.generation(),
                wanted: generation,
            })
    }

    /// Runs `work` in a query slot, so that a panic in it fails this message alone:
    /// at once if a slot is free, or else as a future that waits for one within the
    /// query's `patience`.
    fn in_slot<T: 'static>(
        &self,
        deadline: Instant,
        patience: Patience,
        fault: Option<ShardFault>,
        work: impl FnOnce() -> Result<T, ShardError> + 'static,
    ) -> Response<Result<T, ShardError>> {
        let number = self.number;
        let work = move || {
            guarded(number, || {
                if fault == Some(ShardFault::Panic) {
                    panic!("shard {number} panics in a scan, as the request asked");
                }
                work()
            })?
        };
        if let Some(_slot) = self.slots.try_take() {
            return Response::reply(work());
        }
        let slots = Arc::clone(&self.slots);
        Response::fut(async move {
            let _slot = slots.take(&patience).await?;
            if Instant::now() > deadline {
                return Err(ShardError::Expired);
            }
            work()
        })
    }
}

impl Held {
    /// Idempotent: a replica started after the shard took `data` already holds it.
    fn install(&mut self, data: Arc<ShardData>) {
        if self.current.generation() != data.generation() {
            self.previous = Some(std::mem::replace(&mut self.current, data));
        }
    }

    fn retire(&mut self, generation: u64) {
        if self.current.generation() == generation {
            self.previous = None;
        }
    }
}

/// The text a panic was raised with, when it has one.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

/// Runs `work`, turning a panic in it (a bug: a store file's fault is a value,
/// [`ShardError::Storage`]) into an error for this one message.
fn guarded<T>(shard: usize, work: impl FnOnce() -> T) -> Result<T, ShardError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).map_err(|panic| {
        ShardError::Panicked {
            shard,
            message: panic_message(&*panic).to_owned(),
        }
    })
}

// --- The shard and its replicas --------------------------------------------------

/// One shard, whatever number of replicas it has: the generations it holds, from
/// which a new or restarted replica starts.
pub(super) struct Shard {
    number: usize,
    held: Mutex<Held>,
    restarts: Counter,
}

impl Shard {
    pub(super) fn new(number: usize, data: ShardData, restarts: Counter) -> Shard {
        Shard {
            number,
            held: Mutex::new(Held {
                current: Arc::new(data),
                previous: None,
            }),
            restarts,
        }
    }

    /// Makes `data` this shard's current generation for the replicas started from
    /// now on; the running ones are told by [`ShardHandle::install`].
    pub(super) fn install(&self, data: &Arc<ShardData>) {
        self.held.lock().install(Arc::clone(data));
    }

    pub(super) fn retire(&self, generation: u64) {
        self.held.lock().retire(generation);
    }

    /// The shard's part of the current generation.
    pub(super) fn current(&self) -> Arc<ShardData> {
        Arc::clone(&self.held.lock().current)
    }
}

// --- The handle ------------------------------------------------------------------

/// How a router reaches its worker's replica of a shard; restarts the replica's
/// actor if it has died.
#[derive(Clone)]
pub(super) struct ShardHandle {
    replica: Arc<Replica>,
}

struct Replica {
    shard: Arc<Shard>,
    arbiter: ArbiterHandle,
    slots: Arc<Slots>,
    actor: RwLock<Incarnation>,
}

/// The replica's running actor, and how many actors it has had before it.
///
/// A query sends through the lock without cloning the address: an `Addr` clone
/// allocates (actix gives each sender its own parked-task cell), and a query
/// sends one message per shard. The number tells a failed send which actor it
/// reached, so that only the first query to find an actor dead restarts it.
struct Incarnation {
    address: Addr<ShardActor>,
    number: u64,
}

impl ShardHandle {
    /// Starts a replica of `shard` on the current arbiter (an HTTP worker's thread),
    /// its stretches counted in `slots`. Needs a running actix system.
    pub(super) fn start(shard: Arc<Shard>, slots: Arc<Slots>) -> ShardHandle {
        let arbiter = Arbiter::current();
        let held = shard.held.lock().clone();
        let address = start_actor(&arbiter, shard.number, held, Arc::clone(&slots));
        ShardHandle {
            replica: Arc::new(Replica {
                shard,
                arbiter,
                slots,
                actor: RwLock::new(Incarnation { address, number: 0 }),
            }),
        }
    }

    /// The shard this is a replica of.
    pub(super) fn number(&self) -> usize {
        self.replica.shard.number
    }

    /// Whether the replica's thread still runs (a stopped worker takes its
    /// replicas with it).
    pub(super) fn is_alive(&self) -> bool {
        self.replica.arbiter.spawn(async {})
    }

    /// Hands the replica `data`, already installed in its [`Shard`]. A replica whose
    /// actor has died is restarted from the shard, which holds `data` already.
    pub(super) async fn install(&self, data: Arc<ShardData>) {
        let (sent, incarnation) = self.send(Install { data });
        if sent.await.is_err() {
            self.restart(incarnation);
        }
    }

    /// Drops the generation before `generation`; the shard has dropped it already.
    pub(super) async fn retire(&self, generation: u64) {
        // A dead actor is restarted from the shard, which no longer has it either.
        let _ = self.send(Retire { generation }).0.await;
    }

    /// Asks the replica `question`.
    pub(super) async fn query(
        &self,
        question: ShardQuestion,
        deadline: Instant,
        patience: Patience,
        fault: Option<ShardFault>,
    ) -> Result<ShardAnswer, ShardError> {
        self.ask(Query {
            question,
            deadline,
            patience,
            fault,
        })
        .await
    }

    /// Sends a query's message to the replica; a closed mailbox restarts it.
    async fn ask<M, T>(&self, message: M) -> Result<T, ShardError>
    where
        M: Message<Result = Result<T, ShardError>> + Send + 'static,
        T: Send + 'static,
        ShardActor: Handler<M>,
    {
        let (sent, incarnation) = self.send(message);
        match sent.await {
            Ok(reply) => reply,
            Err(error) => {
                self.restart(incarnation);
                Err(error.into())
            }
        }
    }

    /// Sends `message` to the replica's actor, and says which actor that was.
    fn send<M>(&self, message: M) -> (Request<ShardActor, M>, u64)
    where
        M: Message + Send + 'static,
        M::Result: Send,
        ShardActor: Handler<M>,
    {
        let actor = self.replica.actor.read();
        (actor.address.send(message), actor.number)
    }

    /// Starts a new actor in place of incarnation `dead`, unless another request
    /// did already. A closed mailbox means the actor is gone or going: it dropped a
    /// message without answering, which a live actor never does.
    fn restart(&self, dead: u64) {
        let replica = &self.replica;
        let mut actor = replica.actor.write();
        if actor.number != dead || !self.is_alive() {
            return;
        }
        let held = replica.shard.held.lock().clone();
        actor.address = start_actor(
            &replica.arbiter,
            replica.shard.number,
            held,
            Arc::clone(&replica.slots),
        );
        actor.number += 1;
        replica.shard.restarts.inc();
        tracing::warn!(
            shard = replica.shard.number,
            "shard actor died; started a new one with its data"
        );
    }
}

fn start_actor(
    arbiter: &ArbiterHandle,
    number: usize,
    held: Held,
    slots: Arc<Slots>,
) -> Addr<ShardActor> {
    ShardActor::start_in_arbiter(arbiter, move |_| ShardActor {
        number,
        held,
        slots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shard's data of generation `number`: one shard of an empty directory.
    fn generation(number: u64) -> Arc<ShardData> {
        let directory = tempfile::tempdir().unwrap();
        let options = stq_core::data::LoadOptions {
            directory: directory.path().to_owned(),
            shards: 1,
            on_invalid: stq_core::data::OnInvalid::Fail,
            generation: number,
            threads: 1,
            hot: None,
            cache: stq_core::data::BlockCache::new(1 << 30),
        };
        let start = options.start(None, None).unwrap();
        let mut shards = start.generation.shards;
        Arc::new(shards.remove(0))
    }

    #[test]
    fn the_previous_generation_is_dropped_only_while_its_successor_is_current() {
        let mut held = Held {
            current: generation(1),
            previous: None,
        };
        held.install(generation(2));
        assert_eq!(
            held.previous.as_ref().map(|data| data.generation()),
            Some(1)
        );
        // A retirement meant for generation 2 comes after generation 3 arrived:
        // generation 2 is now the previous one, and may still be in use.
        held.install(generation(3));
        held.retire(2);
        assert_eq!(
            held.previous.as_ref().map(|data| data.generation()),
            Some(2)
        );
        held.retire(3);
        assert!(held.previous.is_none());
        assert_eq!(held.current.generation(), 3);
    }
}
