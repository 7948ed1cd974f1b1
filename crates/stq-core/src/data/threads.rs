//! The threads that load and reload snapshots: one pool, for the life of the
//! process.
//!
//! Why not threads of their own for each load: glibc's allocator gives a new thread
//! the heap (arena) of a thread that has ended. A load leaves its threads' heaps
//! full of holes between the records it keeps, and the HTTP workers, started after
//! the first load, took those heaps over: every request then allocated among the
//! holes and cost a quarter more (BENCHMARKS.md). Threads that never end
//! keep their heaps, so the workers start on clean ones.

use std::sync::OnceLock;

use rayon::prelude::*;
use rayon::{Scope, ThreadPool, ThreadPoolBuilder};

/// The pool's threads: one per CPU. A load's reader runs on the thread that asked
/// for the load, beside them.
fn pool() -> &'static ThreadPool {
    static POOL: OnceLock<ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(2, usize::from);
        ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|index| format!("stq-loader-{index}"))
            .build()
            .expect("the loader threads start")
    })
}

/// Runs `body` on the calling thread with a scope whose spawned work runs on the
/// pool; returns once all of it is done. A panic in any of it is raised here.
pub(crate) fn scope<'scope, R>(body: impl FnOnce(&Scope<'scope>) -> R) -> R {
    pool().in_place_scope(body)
}

/// `work` on every item on the pool; the results in item order.
pub(crate) fn map<T: Send, R: Send>(items: Vec<T>, work: impl Fn(T) -> R + Sync + Send) -> Vec<R> {
    pool().install(|| items.into_par_iter().map(work).collect())
}

/// Gives the pages a load freed back to the system. A load builds each station in
/// full before it seals most of it, and glibc keeps what was freed in its heaps:
/// after loading 1000 stations x 7 days the RSS was 2.7 times the live heap, and
/// 1.08 times after this (BENCHMARKS.md).
pub(crate) fn release_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free memory of the allocator's own heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_runs_on_the_pool_and_keeps_its_order() {
        let names = map((0..100).collect(), |number: u32| {
            (number, std::thread::current().name().map(str::to_owned))
        });
        assert_eq!(names.len(), 100);
        for (index, (number, name)) in names.into_iter().enumerate() {
            assert_eq!(number as usize, index);
            assert!(name.unwrap().starts_with("stq-loader-"));
        }
        let caller = std::thread::current().id();
        scope(|scope| {
            assert_eq!(std::thread::current().id(), caller);
            scope.spawn(move |_| assert_ne!(std::thread::current().id(), caller));
        });
    }
}
