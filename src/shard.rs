//! The shard actor: owns one shard's stations of the current generation (and of the
//! one before, for requests still in flight across a reload) and scans them on its
//! own `Arbiter` (thread), so no shard's work blocks another's.

use std::sync::Arc;
use std::time::Instant as Stopwatch;

use actix::prelude::*;

use crate::index::{Hit, ScanRequest, ShardData};

// --- Messages --------------------------------------------------------------------

/// Scan this shard for the first `request.cap` matching records of a generation.
///
/// Answers with the hits and the shard data they point into, so the bytes can be
/// copied straight into a response without another message.
pub struct Scan {
    pub generation: u64,
    pub request: ScanRequest,
    /// Past it the request has been answered 503 `timeout`: the scan is skipped.
    pub deadline: Stopwatch,
}

impl Message for Scan {
    type Result = Result<ShardReply, ShardError>;
}

pub struct ShardReply {
    pub data: Arc<ShardData>,
    pub hits: Vec<Hit>,
}

/// Make `data` the current generation; the current one becomes the previous one, so
/// that requests planned against it before the catalog was swapped still finish.
pub struct Install {
    pub data: Arc<ShardData>,
}

impl Message for Install {
    type Result = ();
}

#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("the shard holds generation {held}, not {wanted}")]
    OtherGeneration { held: u64, wanted: u64 },
    #[error("the request's deadline passed before the shard reached it")]
    Expired,
    #[error("the shard's mailbox is closed: {0}")]
    Mailbox(#[from] MailboxError),
}

// --- The actor -------------------------------------------------------------------

pub struct ShardActor {
    current: Arc<ShardData>,
    previous: Option<Arc<ShardData>>,
}

impl Actor for ShardActor {
    type Context = Context<Self>;
}

impl Handler<Scan> for ShardActor {
    type Result = Result<ShardReply, ShardError>;

    fn handle(&mut self, message: Scan, _: &mut Context<Self>) -> Self::Result {
        if Stopwatch::now() > message.deadline {
            return Err(ShardError::Expired);
        }
        let data = std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|data| data.generation == message.generation)
            .ok_or(ShardError::OtherGeneration {
                held: self.current.generation,
                wanted: message.generation,
            })?;
        Ok(ShardReply {
            hits: data.scan(&message.request),
            data: Arc::clone(data),
        })
    }
}

impl Handler<Install> for ShardActor {
    type Result = ();

    fn handle(&mut self, message: Install, _: &mut Context<Self>) {
        self.previous = Some(std::mem::replace(&mut self.current, message.data));
    }
}

// --- The handle ------------------------------------------------------------------

/// How the router reaches a shard.
#[derive(Clone)]
pub struct ShardHandle {
    address: Addr<ShardActor>,
    arbiter: ArbiterHandle,
}

impl ShardHandle {
    /// Starts a shard actor on a new arbiter of its own. Needs a running actix system.
    pub fn start(data: ShardData) -> ShardHandle {
        let arbiter = Arbiter::new();
        let current = Arc::new(data);
        let address = ShardActor::start_in_arbiter(&arbiter.handle(), move |_| ShardActor {
            current,
            previous: None,
        });
        ShardHandle {
            address,
            arbiter: arbiter.handle(),
        }
    }

    /// Stops the shard's arbiter thread once its queued messages are handled.
    pub fn stop(&self) {
        self.arbiter.stop();
    }

    pub async fn install(&self, data: ShardData) -> Result<(), ShardError> {
        let data = Arc::new(data);
        Ok(self.address.send(Install { data }).await?)
    }

    pub async fn scan(
        &self,
        generation: u64,
        request: ScanRequest,
        deadline: Stopwatch,
    ) -> Result<ShardReply, ShardError> {
        self.address
            .send(Scan {
                generation,
                request,
                deadline,
            })
            .await?
    }
}
