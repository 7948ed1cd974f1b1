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
            if let Some(job) = self.take_within(last_ended, interval, None) {
                return job;
            }
        }
    }

    /// As [`Newest::take_after`], but gives up (`None`) when no job was handed over
    /// within `patience`, if given: for a thread that has work of its own to retry
    /// while no job comes (the store's push to a bucket that was unreachable).
    pub(crate) fn take_within(
        &self,
        last_ended: Option<Instant>,
        interval: Duration,
        patience: Option<Duration>,
    ) -> Option<T> {
        let give_up = patience.map(|patience| Instant::now() + patience);
        loop {
            {
                let mut slot = self.slot.lock();
                while slot.is_none() {
                    match give_up {
                        None => self.wake.wait(&mut slot),
                        Some(give_up) => {
                            if self.wake.wait_until(&mut slot, give_up).timed_out()
                                && slot.is_none()
                            {
                                return None;
                            }
                        }
                    }
                }
            }
            if let Some(ended) = last_ended {
                std::thread::sleep(interval.saturating_sub(ended.elapsed()));
            }
            // Only this thread takes, so the job is still there; the loop is for
            // a mailbox shared by mistake.
            if let Some(job) = self.slot.lock().take() {
                return Some(job);
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
    fn a_taker_with_patience_gives_up_when_no_job_comes() {
        let newest: Newest<u8> = Newest::default();
        assert_eq!(
            newest.take_within(None, Duration::ZERO, Some(Duration::ZERO)),
            None
        );
        newest.put(7);
        let taken = newest.take_within(None, Duration::ZERO, Some(Duration::ZERO));
        assert_eq!(taken, Some(7));
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
