//! What live answers need of the engine (docs/api.md section 14): the news that a
//! generation was installed, what each recent generation changed, and the stop.
//!
//! Every install records its generation's [`Change`] (the records its reload
//! added, the stations it altered) and then tells every listener the new
//! generation's number through one `watch` channel: a held request or a stream
//! costs nothing while no generation comes, and no timer of its own. The history
//! keeps the changes a stream may resume across: the last [`KEPT_GENERATIONS`]
//! and those of the last [`KEPT_FOR`], as section 14.2 promises. Its memory is
//! the keys of what those reloads added (about 24 bytes a record): a floor's
//! quarter of an hour, or one large reload's records until 15 minutes pass.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use stq_core::data::Additions;
use tokio::sync::watch;

/// Kept however old (docs/api.md section 14.2: at least the last 64).
const KEPT_GENERATIONS: usize = 64;
/// Kept however many (at least the last 15 minutes).
const KEPT_FOR: Duration = Duration::from_secs(15 * 60);

/// What one generation changed, as its reload found.
#[derive(Debug)]
pub struct Change {
    /// Its number.
    pub generation: u64,
    /// The records it added and the stations it altered.
    pub additions: Additions,
    /// When it was installed.
    pub installed: Instant,
}

/// The history of recent changes, and the channels live answers listen on.
pub(crate) struct Live {
    changes: Mutex<History>,
    newest: watch::Sender<u64>,
    stopping: watch::Sender<bool>,
    /// Drawn at the start: an event id names the process that issued it.
    process: u64,
}

struct History {
    changes: VecDeque<Arc<Change>>,
}

/// The generations since the one asked for are no longer all kept.
#[derive(Debug, thiserror::Error)]
#[error("the generations after {0} are no longer kept")]
pub struct Forgotten(pub u64);

impl Live {
    pub(crate) fn new(generation: u64) -> Live {
        Live {
            changes: Mutex::new(History {
                changes: VecDeque::new(),
            }),
            newest: watch::Sender::new(generation),
            stopping: watch::Sender::new(false),
            process: uuid::Uuid::new_v4().as_u64_pair().0,
        }
    }

    /// Records what `generation` changed, forgets what is no longer kept, and
    /// tells every listener.
    pub(crate) fn installed(&self, generation: u64, additions: Additions) {
        let change = Arc::new(Change {
            generation,
            additions,
            installed: Instant::now(),
        });
        {
            let mut history = self.changes.lock();
            history.changes.push_back(change);
            while history.changes.len() > KEPT_GENERATIONS {
                let oldest = &history.changes[0];
                if oldest.installed.elapsed() <= KEPT_FOR {
                    break;
                }
                history.changes.pop_front();
            }
        }
        self.newest.send_replace(generation);
    }

    /// The changes of every generation after `generation` up to the newest, in
    /// order; [`Forgotten`] if some of them are no longer kept.
    pub(crate) fn since(&self, generation: u64) -> Result<Vec<Arc<Change>>, Forgotten> {
        let newest = *self.newest.borrow();
        if generation >= newest {
            return Ok(Vec::new());
        }
        let history = self.changes.lock();
        let changes: Vec<Arc<Change>> = (history.changes.iter())
            .filter(|change| change.generation > generation)
            .cloned()
            .collect();
        let complete = changes.first().map(|first| first.generation) == Some(generation + 1)
            && changes.len() as u64 == newest - generation;
        match complete {
            true => Ok(changes),
            false => Err(Forgotten(generation)),
        }
    }

    /// The newest generation's number, and news of the next ones.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.newest.subscribe()
    }

    /// Tells every stream and held request that the process stops.
    pub(crate) fn stop(&self) {
        self.stopping.send_replace(true);
    }

    /// News of the stop.
    pub(crate) fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    pub(crate) fn process(&self) -> u64 {
        self.process
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_changes_since_a_generation_come_in_order_until_some_are_forgotten() {
        let live = Live::new(1);
        assert!(live.since(1).unwrap().is_empty());
        for generation in 2..=(KEPT_GENERATIONS as u64 + 10) {
            live.installed(generation, Additions::default());
        }
        let newest = KEPT_GENERATIONS as u64 + 10;
        let since: Vec<u64> = (live.since(newest - 3).unwrap().iter())
            .map(|change| change.generation)
            .collect();
        assert_eq!(since, vec![newest - 2, newest - 1, newest]);
        // Young changes are kept beyond the count.
        assert_eq!(live.since(1).unwrap().len() as u64, newest - 1);
        assert!(live.since(newest).unwrap().is_empty());
    }

    #[test]
    fn a_listener_hears_of_each_install() {
        let live = Live::new(1);
        let mut newest = live.subscribe();
        assert_eq!(*newest.borrow_and_update(), 1);
        live.installed(2, Additions::default());
        assert!(newest.has_changed().unwrap());
        assert_eq!(*newest.borrow_and_update(), 2);
    }
}
