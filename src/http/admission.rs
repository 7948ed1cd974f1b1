//! How many queries run at once, and for how long (docs/api.md section 9).
//!
//! actix-web has neither a concurrency cap nor a handler timeout of its own. A query
//! holds a permit from its first engine call to its last byte of envelope, not while
//! the answer is written; a request that finds none free waits a little, then is
//! turned away with 503 `overloaded`, so a burst queues briefly and a flood is
//! refused early instead of piling up behind the shards. The deadline covers the whole answer, the wait for a permit included.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::error::ApiError;

/// The longest a request waits for a permit.
pub const ADMISSION_WAIT: Duration = Duration::from_millis(100);

/// Turns of the worker's task queue a request waits through before it sets a timer.
const YIELDS_BEFORE_WAITING: usize = 4;

/// The cap on queries computed at once, and the request deadline.
///
/// Not a fair semaphore, on purpose. tokio's `Semaphore` hands a released permit to
/// the longest waiter, which runs only when its worker's task queue reaches it; on
/// a worker interleaving a hundred connections the permit sits idle that long, and
/// the cap, not the CPU, set the throughput (a quarter of it at 256 connections).
/// Here a released slot is free at once for whichever query runs next, and waiters
/// are woken to try again.
pub struct Admission {
    capacity: usize,
    in_use: AtomicUsize,
    released: Notify,
    request_timeout: Duration,
}

/// A slot held by one query; dropping it frees the slot.
pub struct Permit<'a> {
    admission: &'a Admission,
}

impl std::fmt::Debug for Permit<'_> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Permit")
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.admission.in_use.fetch_sub(1, Ordering::AcqRel);
        self.admission.released.notify_one();
    }
}

impl Admission {
    pub fn new(max_concurrent_queries: usize, request_timeout: Duration) -> Admission {
        Admission {
            capacity: max_concurrent_queries,
            in_use: AtomicUsize::new(0),
            released: Notify::new(),
            request_timeout,
        }
    }

    /// A permit to run one query, or 503 `overloaded` after [`ADMISSION_WAIT`].
    pub async fn enter(&self) -> Result<Permit<'_>, ApiError> {
        // A free slot needs no timer.
        if let Some(permit) = self.try_enter() {
            return Ok(permit);
        }
        // On a worker that interleaves many queries, slots come free within a few
        // turns of its task queue: trying again after each turn costs less than a
        // timer.
        for _ in 0..YIELDS_BEFORE_WAITING {
            actix_web::rt::task::yield_now().await;
            if let Some(permit) = self.try_enter() {
                return Ok(permit);
            }
        }
        let waiting = async {
            loop {
                // Registered before the check, so a release in between is not missed.
                let released = self.released.notified();
                if let Some(permit) = self.try_enter() {
                    return permit;
                }
                released.await;
            }
        };
        actix_web::rt::time::timeout(ADMISSION_WAIT, waiting)
            .await
            .map_err(|_| ApiError::Overloaded)
    }

    fn try_enter(&self) -> Option<Permit<'_>> {
        self.in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |in_use| {
                (in_use < self.capacity).then_some(in_use + 1)
            })
            .ok()
            .map(|_| Permit { admission: self })
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
    /// The contract's defaults: 4 x CPUs queries at once, 10 s each.
    fn default() -> Admission {
        Admission::new(4 * crate::cli::cpus(), Duration::from_secs(10))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_web::test]
    async fn a_request_beyond_the_cap_is_refused_and_a_freed_slot_taken() {
        let admission = Admission::new(1, Duration::from_secs(10));
        let held = admission.enter().await.unwrap();
        let refused = admission.enter().await.unwrap_err();
        assert_eq!(refused.code(), "overloaded");
        drop(held);
        assert!(admission.enter().await.is_ok());
    }

    #[actix_web::test]
    async fn a_waiting_request_gets_a_permit_released_within_the_wait() {
        let admission = std::rc::Rc::new(Admission::new(1, Duration::from_secs(10)));
        let held = admission.enter().await.unwrap();
        let waiter = {
            let admission = std::rc::Rc::clone(&admission);
            actix_web::rt::spawn(async move { admission.enter().await.is_ok() })
        };
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
        drop(held);
        assert!(waiter.await.unwrap());
    }
}
