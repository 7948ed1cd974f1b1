//! How many queries compute at once, and for how long (docs/api.md section 9).
//!
//! actix-web has neither a concurrency cap nor a handler timeout of its own.
//!
//! The cap counts computing only. `--max-concurrent-queries` bounds the *stretches*
//! of queries that compute at once, not the queries in flight. A stretch is one
//! piece of one query's work on one worker, from where it starts computing to where
//! it hands the query on: a shard's scan or partial summary, the router's merge and
//! pagination, the envelope's assembly here. It takes a slot (the engine's `Slots`)
//! as it starts and frees it as it ends. Waiting for a mailbox to be reached, for the
//! shards' replies, or for the client to read the answer is no stretch and holds
//! nothing, so a slow reader of a large answer keeps no other query out. A stretch
//! that pauses without handing the query on is still one stretch and keeps its slot:
//! a scan that yields to let its worker's other connections run, or the delay a test
//! injects into the assembly (`X-Stq-Fault: delay=`), counts as the slow computing it
//! stands for.
//!
//! Invariants: nothing waits for a slot while it holds one, so slots cannot
//! deadlock. Today's stretches never pause, and every one runs on the worker the
//! request arrived on (thread per core), so at most one per worker computes at any
//! instant: at its default of 4 x CPUs, above the number of workers, the cap never
//! makes a query wait. It turns queries away only when stretches pause (an injected
//! delay, a scan that yields) or when it is set below the number of workers.
//!
//! A query's waits for slots last at most [`SLOT_WAIT`] in all, counted from its
//! first (the engine's `Patience`); then it is turned away with 503 `overloaded`, so
//! a burst queues briefly and a flood is refused early. Planning, the last of the
//! checks (docs/api.md section 3.4), takes no slot: refusals cost none. The request
//! deadline covers the whole answer, the waits for slots included.

use std::time::{Duration, Instant};

use super::error::ApiError;
#[cfg(doc)]
use crate::engine::SLOT_WAIT;

/// A query's deadline, `--request-timeout`.
pub struct Admission {
    request_timeout: Duration,
}

impl Admission {
    pub fn new(request_timeout: Duration) -> Admission {
        Admission { request_timeout }
    }

    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The answer to a request that ran past its deadline.
    pub fn timed_out(&self) -> ApiError {
        ApiError::Timeout {
            after: self.request_timeout,
        }
    }

    /// When a request that started at `started` must have been answered.
    pub fn deadline(&self, started: Instant) -> Instant {
        started + self.request_timeout
    }
}

impl Default for Admission {
    /// The contract's default: 10 s for each query.
    fn default() -> Admission {
        Admission::new(Duration::from_secs(10))
    }
}
