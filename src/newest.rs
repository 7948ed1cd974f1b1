//! A mailbox that keeps only the newest job, for the threads that work off the
//! request path on each served generation (the store's writer, the Parquet
//! export): a job handed over while the thread works replaces any not yet begun,
//! so a floor that reloads several times a second costs one job at a time, never a
//! queue; and the thread begins a job no sooner than an interval after it ended
//! the last, so that a job's cost is paid at most so often.

use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// The newest job handed over and not yet begun.
pub(crate) struct Newest<T> {
    slot: Mutex<Option<T>>,
    wake: Condvar,
}

impl<T> Default for Newest<T> {
    fn default() -> Self {
        Newest {
            slot: Mutex::new(None),
            wake: Condvar::new(),
        }
    }
}

impl<T> Newest<T> {
    /// Hands `job` over, in place of any not yet begun.
    pub(crate) fn put(&self, job: T) {
        *self.slot.lock() = Some(job);
        self.wake.notify_one();
    }

    /// Waits for a job, then until `interval` has passed since `last_ended` (if a
    /// job ended before), and takes the newest handed over by then.
    pub(crate) fn take_after(&self, last_ended: Option<Instant>, interval: Duration) -> T {
        loop {
            {
                let mut slot = self.slot.lock();
                while slot.is_none() {
                    self.wake.wait(&mut slot);
                }
            }
            if let Some(ended) = last_ended {
                std::thread::sleep(interval.saturating_sub(ended.elapsed()));
            }
            // Only this thread takes, so the job is still there; the loop is for
            // a mailbox shared by mistake.
            if let Some(job) = self.slot.lock().take() {
                return job;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_job_replaces_those_not_yet_begun() {
        let newest = Newest::default();
        newest.put(1);
        newest.put(2);
        assert_eq!(newest.take_after(None, Duration::ZERO), 2);
        newest.put(3);
        assert_eq!(newest.take_after(Some(Instant::now()), Duration::ZERO), 3);
    }

    #[test]
    fn a_job_handed_over_from_another_thread_wakes_the_taker() {
        let newest = std::sync::Arc::new(Newest::default());
        let giver = std::sync::Arc::clone(&newest);
        let thread = std::thread::spawn(move || giver.put("job"));
        assert_eq!(newest.take_after(None, Duration::ZERO), "job");
        thread.join().unwrap();
    }
}
