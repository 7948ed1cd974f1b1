//! How many queries run at once, and for how long (docs/api.md section 9).
//!
//! actix-web has neither a concurrency cap nor a handler timeout of its own. A query
//! holds a permit from its first engine call to its last byte of envelope; a request
//! that finds none free waits a little, then is turned away with 503 `overloaded`, so
//! a burst queues briefly and a flood is refused early instead of piling up behind
//! the shards. The deadline covers the whole answer, the wait for a permit included.

use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, SemaphorePermit};

use super::error::ApiError;

/// The longest a request waits for a permit.
pub const ADMISSION_WAIT: Duration = Duration::from_millis(100);

pub struct Admission {
    permits: Semaphore,
    request_timeout: Duration,
}

impl Admission {
    pub fn new(max_concurrent_queries: usize, request_timeout: Duration) -> Admission {
        Admission {
            permits: Semaphore::new(max_concurrent_queries),
            request_timeout,
        }
    }

    /// A permit to run one query, or 503 `overloaded` after [`ADMISSION_WAIT`].
    pub async fn enter(&self) -> Result<SemaphorePermit<'_>, ApiError> {
        // A free slot needs no timer.
        if let Ok(permit) = self.permits.try_acquire() {
            return Ok(permit);
        }
        match actix_web::rt::time::timeout(ADMISSION_WAIT, self.permits.acquire()).await {
            Ok(Ok(permit)) => Ok(permit),
            // The semaphore is never closed; a closed one would also mean "no".
            Ok(Err(_)) | Err(_) => Err(ApiError::Overloaded),
        }
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
    async fn a_request_beyond_the_cap_waits_briefly_then_is_refused() {
        let admission = Admission::new(1, Duration::from_secs(10));
        let held = admission.enter().await.unwrap();
        let asked = Instant::now();
        let refused = admission.enter().await.unwrap_err();
        assert_eq!(refused.code(), "overloaded");
        assert!(asked.elapsed() >= ADMISSION_WAIT);
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
