//! Query slots (`--max-concurrent-queries`, docs/api.md section 9): how many stretches
//! of query work compute at once.
//!
//! A query takes a slot for each stretch of computing, not for its whole life: each
//! shard's scan or partial summary, the router's merge, the HTTP layer's assembly of
//! the envelope. Between them the query waits on an actor's mailbox, on its replies
//! or on the client, and holds nothing. A stretch takes its slot before it starts and
//! frees it when it ends, and never waits for a slot while it holds one, so slots
//! cannot deadlock. `http::admission` states what this means for requests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// The longest a query waits for slots, all its stretches' waits together.
pub const SLOT_WAIT: Duration = Duration::from_millis(100);

/// Turns of the worker's task queue a stretch waits through before it sets a timer.
const YIELDS_BEFORE_WAITING: usize = 4;

/// Every slot was taken for [`SLOT_WAIT`]: the query is turned away (503
/// `overloaded`).
#[derive(Clone, Copy, Debug, thiserror::Error)]
#[error("every query slot stayed taken for {SLOT_WAIT:?}")]
pub struct Overloaded;

/// The cap on stretches computing at once, shared by every worker.
///
/// Not a fair semaphore, on purpose. tokio's `Semaphore` hands a released permit to
/// the longest waiter, which runs only when its worker's task queue reaches it; a
/// slot would sit idle that long. Here a released slot is free at once for whichever
/// stretch runs next, and waiters are woken to try again.
pub(crate) struct Slots {
    capacity: usize,
    in_use: AtomicUsize,
    /// Stretches between their first failed try and their timer's end: a release
    /// wakes one only if there is one, which spares the common case an atomic write.
    waiters: AtomicUsize,
    released: Notify,
}

/// A slot held by one stretch; dropping it frees the slot.
pub struct Slot<'a> {
    slots: &'a Slots,
}

/// How long a query's stretches may still wait for slots, shared by all of them: the
/// first wait opens a window of [`SLOT_WAIT`], and every later wait ends with it.
/// Cheap to clone; every clone is the same query's.
#[derive(Clone, Debug, Default)]
pub struct Patience {
    until: Arc<OnceLock<Instant>>,
}

impl Slots {
    pub(crate) fn new(capacity: usize) -> Slots {
        Slots {
            capacity,
            in_use: AtomicUsize::new(0),
            waiters: AtomicUsize::new(0),
            released: Notify::new(),
        }
    }

    /// A slot for one stretch of a query, or [`Overloaded`] once `patience` runs out.
    pub(crate) async fn take(&self, patience: &Patience) -> Result<Slot<'_>, Overloaded> {
        // A free slot needs no timer.
        if let Some(slot) = self.try_take() {
            return Ok(slot);
        }
        let until = patience.until();
        // Other workers' stretches end within a few turns of this worker's task
        // queue: trying again after each turn costs less than a timer.
        for _ in 0..YIELDS_BEFORE_WAITING {
            actix_rt::task::yield_now().await;
            if let Some(slot) = self.try_take() {
                return Ok(slot);
            }
        }
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let waiting = async {
            loop {
                // Registered before the check, so a release in between is not missed.
                let released = self.released.notified();
                if let Some(slot) = self.try_take() {
                    return slot;
                }
                released.await;
            }
        };
        let left = until.saturating_duration_since(Instant::now());
        let taken = actix_rt::time::timeout(left, waiting).await;
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        taken.map_err(|_| Overloaded)
    }

    /// A free slot, without waiting.
    pub(crate) fn try_take(&self) -> Option<Slot<'_>> {
        self.in_use
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |in_use| {
                (in_use < self.capacity).then_some(in_use + 1)
            })
            .ok()
            .map(|_| Slot { slots: self })
    }
}

impl Default for Slots {
    /// The contract's default: 4 x CPUs.
    fn default() -> Slots {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        Slots::new(4 * cpus)
    }
}

impl std::fmt::Debug for Slot<'_> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Slot")
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let slots = self.slots;
        slots.in_use.fetch_sub(1, Ordering::SeqCst);
        // Sequentially consistent with the waiter's count and its try: either it
        // finds this slot free, or this release sees it waiting.
        if slots.waiters.load(Ordering::SeqCst) > 0 {
            slots.released.notify_one();
        }
    }
}

impl Patience {
    /// When the query's waits must end; the first call opens the window.
    fn until(&self) -> Instant {
        *self.until.get_or_init(|| Instant::now() + SLOT_WAIT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_rt::test]
    async fn a_stretch_beyond_the_cap_is_refused_and_a_freed_slot_taken() {
        let slots = Slots::new(1);
        let held = slots.take(&Patience::default()).await.unwrap();
        assert!(slots.take(&Patience::default()).await.is_err());
        drop(held);
        assert!(slots.take(&Patience::default()).await.is_ok());
    }

    #[actix_rt::test]
    async fn a_waiting_stretch_gets_a_slot_released_within_the_wait() {
        let slots = Arc::new(Slots::new(1));
        let held = slots.try_take().unwrap();
        let waiter = {
            let slots = Arc::clone(&slots);
            actix_rt::spawn(async move { slots.take(&Patience::default()).await.is_ok() })
        };
        actix_rt::time::sleep(Duration::from_millis(20)).await;
        drop(held);
        assert!(waiter.await.unwrap());
    }

    #[actix_rt::test]
    async fn a_query_waits_once_in_all_not_once_per_stretch() {
        let slots = Slots::new(1);
        let patience = Patience::default();
        let held = slots.try_take().unwrap();
        assert!(slots.take(&patience).await.is_err());
        drop(held);
        // The window stays where the first wait opened it.
        let closed = patience.until();
        let held = slots.try_take().unwrap();
        assert!(slots.take(&patience).await.is_err());
        assert_eq!(patience.until(), closed);
        drop(held);
        assert!(slots.take(&patience).await.is_ok());
    }
}
