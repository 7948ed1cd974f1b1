//! The decoded-block cache (`--cache-size`, [`BlockCache`]): sealed blocks as a
//! query reads them, decoded and rendered ([`super::rendered`]: keys, entries,
//! each record's JSON, a time index and a symbol index), bounded in bytes. A
//! dashboard that keeps asking about yesterday pays the decompression and
//! decoding once, not on each request.
//!
//! **Whose it is.** A value, not a static: the service makes one (`serve` of
//! `--cache-size`, `export` of a constant) and gives it to the load
//! ([`crate::data::load::LoadOptions`]), which gives it to every sealed tier it
//! builds or reads ([`super::Sealed`]); a reload's tiers get the same one, so a
//! reload never empties it, and a unit test makes one of its own, small or not.
//! The counts of store-file reads its figures add are the process's
//! ([`super::store_reads`]).
//!
//! **Why a sharded `lru` and not `moka` or `quick_cache`.** The contract (section 12)
//! says the least recently used history leaves memory first. Each shard here is an
//! exact LRU list (`lru`, already a dependency) behind its own lock, with a byte
//! budget of its own (the capacity divided by the shards), so the bound is exact
//! and the order is least recently used within a shard; the shards make two
//! workers seldom meet on one lock. moka admits by frequency (TinyLFU: a new block
//! may be refused while older ones stay) and quick_cache evicts by CLOCK-Pro:
//! neither evicts in least-recently-used order, and both are crates more. A lookup
//! here is a hash, a lock and a list move: a query over a hundred stations' history
//! makes one per block it reads, and a scan's answer keeps the blocks of its
//! sealed hits ([`crate::data::sealed::JsonMemo`]), not a lookup per record.
//!
//! **What is counted.** An entry weighs what its decoded block holds on the heap
//! ([`super::rendered::Rendered::heap_bytes`]: its vectors' capacities and its header), or
//! its digest's bytes, plus its key, its list node and its map slot.
//!
//! **Digests.** A summary reads blocks by their digests; a block in a store file
//! has its digests read from there, and kept here beside the decoded blocks, so
//! that a dashboard's summary of last week reads no file twice while they fit.

use std::any::Any;
use std::hash::{BuildHasher as _, Hash};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use lru::LruCache;
use parking_lot::Mutex;

/// What the cache reports (the admin listener's `/metrics`): `pub` for
/// [`BlockCache::stats`], which returns it, and named by no path
/// outside this crate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Reads of block parts from store files.
    pub store_reads: u64,
    /// The bytes of those reads.
    pub store_read_bytes: u64,
    /// Bytes its entries weigh now.
    pub bytes: u64,
    /// Bytes it may hold.
    pub capacity: u64,
    /// Lookups that found their block decoded.
    pub hits: u64,
    /// Lookups that did not: the block was decoded then.
    pub misses: u64,
}

/// A unit test's cache, unless the test sets another: the default
/// `--cache-size`, 1 GiB.
#[cfg(test)]
pub(crate) const DEFAULT_CAPACITY: u64 = 1 << 30;

/// Shards of a [`BlockCache`]: enough that two or a few HTTP workers seldom
/// wait on one lock, few enough that each shard's budget (a sixteenth of 1 GiB)
/// holds thousands of blocks.
const SHARDS: usize = 16;

/// A cache of values each weighing some bytes, at most `capacity` bytes in all:
/// an LRU list per shard, each at most its share of the capacity.
pub(crate) struct DecodedCache<K, V> {
    shards: Box<[Mutex<Shard<K, V>>]>,
    hasher: foldhash::fast::FixedState,
    /// Each shard's capacity, read without a lock ([`DecodedCache::share`]).
    share: AtomicU64,
}

struct Shard<K, V> {
    entries: LruCache<K, (V, u64), foldhash::fast::FixedState>,
    bytes: u64,
    capacity: u64,
    hits: u64,
    misses: u64,
}

impl<K: Hash + Eq, V: Clone> DecodedCache<K, V> {
    /// A cache of `capacity` bytes in `shards` shards (at least one).
    pub(crate) fn new(capacity: u64, shards: usize) -> DecodedCache<K, V> {
        let shards = shards.max(1);
        let share = capacity / shards as u64;
        DecodedCache {
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        entries: LruCache::unbounded_with_hasher(
                            foldhash::fast::FixedState::default(),
                        ),
                        bytes: 0,
                        capacity: share,
                        hits: 0,
                        misses: 0,
                    })
                })
                .collect(),
            hasher: foldhash::fast::FixedState::with_seed(0x5eed),
            share: AtomicU64::new(share),
        }
    }

    fn shard(&self, key: &K) -> &Mutex<Shard<K, V>> {
        let hash = self.hasher.hash_one(key);
        &self.shards[(hash % self.shards.len() as u64) as usize]
    }

    /// The value of `key`, now the most recently used of its shard; counted as a
    /// hit or a miss.
    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let mut shard = self.shard(key).lock();
        match shard.entries.get(key).map(|(value, _)| value.clone()) {
            Some(value) => {
                shard.hits += 1;
                Some(value)
            }
            None => {
                shard.misses += 1;
                None
            }
        }
    }

    /// Keeps `value`, weighing `weight` bytes, under `key`, as the most recently
    /// used of its shard; the least recently used leave until it fits. A value
    /// heavier than a shard's whole share is not kept: then it returns false.
    pub(crate) fn insert(&self, key: K, value: V, weight: u64) -> bool {
        let mut shard = self.shard(&key).lock();
        if let Some((_, old)) = shard.entries.pop(&key) {
            shard.bytes -= old;
        }
        if weight > shard.capacity {
            return false;
        }
        while shard.bytes + weight > shard.capacity {
            let Some((_, (_, evicted))) = shard.entries.pop_lru() else {
                break;
            };
            shard.bytes -= evicted;
        }
        shard.bytes += weight;
        shard.entries.put(key, (value, weight));
        true
    }

    /// Sets the bytes it may hold, dropping the least recently used entries of
    /// each shard down to its new share: a test's cache shrunk under a
    /// generation that reads through it.
    #[cfg(test)]
    pub(crate) fn set_capacity(&self, capacity: u64) {
        let share = capacity / self.shards.len() as u64;
        self.share.store(share, Ordering::Relaxed);
        for shard in &self.shards {
            let mut shard = shard.lock();
            shard.capacity = share;
            while shard.bytes > share {
                let Some((_, (_, evicted))) = shard.entries.pop_lru() else {
                    break;
                };
                shard.bytes -= evicted;
            }
        }
    }

    /// The most one value may weigh to be kept: a shard's capacity.
    pub(crate) fn share(&self) -> u64 {
        self.share.load(Ordering::Relaxed)
    }

    /// Its bytes, capacity, hits and misses, summed over its shards.
    pub(crate) fn stats(&self) -> CacheStats {
        let mut stats = CacheStats::default();
        for shard in &self.shards {
            let shard = shard.lock();
            stats.bytes += shard.bytes;
            stats.capacity += shard.capacity;
            stats.hits += shard.hits;
            stats.misses += shard.misses;
        }
        stats
    }
}

/// A block decoded by any thread, or one of its digests read from the store: by
/// its body's id ([`super::body::Body::id`]), what of it (its units or metrics
/// decoded, or a digest), and the base of its tier's locators (which decoded
/// entries' locators count from).
pub(crate) type BlockKey = (u64, u32, i64);

/// A decoded block, or a digest's bytes.
pub(crate) type CachedBlock = Arc<dyn Any + Send + Sync>;

/// What an entry costs beside its decoded block's heap bytes: its key and value
/// in the list's node, the node's two links, its slot in the map (two pointers and
/// a control byte, rounded up to a word), and the decoded block's `Arc` counts.
pub(crate) const ENTRY_BYTES: u64 = (size_of::<BlockKey>()
    + size_of::<(CachedBlock, u64)>()
    + 2 * size_of::<usize>()
    + 3 * size_of::<usize>()
    + 2 * size_of::<usize>()) as u64;

/// A cache of decoded blocks (`--cache-size`), which the reads of sealed tiers
/// go through. Cloning one shares it: every generation of the process reads
/// through the one the service made, so a reload keeps what it holds.
#[derive(Clone)]
pub struct BlockCache(Arc<DecodedCache<BlockKey, CachedBlock>>);

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not its figures: those take every shard's lock.
        formatter.debug_struct("BlockCache").finish_non_exhaustive()
    }
}

impl BlockCache {
    /// A cache that holds at most `capacity` bytes (`--cache-size`).
    pub fn new(capacity: u64) -> BlockCache {
        BlockCache(Arc::new(DecodedCache::new(capacity, SHARDS)))
    }

    /// What it holds and has done, with the reads of store files (`/metrics`).
    /// The caller reads its fields and never names its type, which no path
    /// exports.
    pub fn stats(&self) -> CacheStats {
        let (store_reads, store_read_bytes) = super::store_reads();
        CacheStats {
            store_reads,
            store_read_bytes,
            ..self.0.stats()
        }
    }

    /// The value it holds under `key`, else the one `make` gives (with the heap
    /// bytes it weighs), kept here.
    pub(crate) fn cached<T: Send + Sync + 'static, E>(
        &self,
        key: BlockKey,
        make: impl FnOnce() -> Result<(T, u64), E>,
    ) -> Result<Arc<T>, E> {
        Ok(self.cached_if_kept(key, make)?.0)
    }

    /// As [`BlockCache::cached`], and whether the value is kept: one heavier
    /// than a shard of the cache holds is made, returned and not kept. A value
    /// `make` fails to make is its error, and nothing is kept.
    pub(crate) fn cached_if_kept<T: Send + Sync + 'static, E>(
        &self,
        key: BlockKey,
        make: impl FnOnce() -> Result<(T, u64), E>,
    ) -> Result<(Arc<T>, bool), E> {
        let cached = (self.0.get(&key)).and_then(|cached| cached.downcast::<T>().ok());
        if let Some(value) = cached {
            return Ok((value, true));
        }
        let (value, weight) = make()?;
        let value = Arc::new(value);
        let kept = Arc::clone(&value) as CachedBlock;
        let kept = self.0.insert(key, kept, weight + ENTRY_BYTES);
        Ok((value, kept))
    }

    /// The most one value may weigh (its entry's own bytes included) to be kept.
    pub(crate) fn largest_kept(&self) -> u64 {
        self.0.share().saturating_sub(ENTRY_BYTES)
    }

    /// Sets the bytes it may hold ([`DecodedCache::set_capacity`]).
    #[cfg(test)]
    pub(crate) fn set_capacity(&self, capacity: u64) {
        self.0.set_capacity(capacity);
    }
}

/// A unit test's cache, its own, of [`DEFAULT_CAPACITY`].
#[cfg(test)]
pub(crate) fn test_cache() -> BlockCache {
    BlockCache::new(DEFAULT_CAPACITY)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Issue 32: whatever is inserted and looked up, the cache never holds
        /// more bytes than its capacity, and its count of bytes is the sum of
        /// what its entries weigh.
        #[test]
        fn issue_32_the_cache_never_holds_more_than_its_capacity(
            capacity in 0u64..5000,
            shards in 1usize..5,
            steps in proptest::collection::vec((0u32..40, 0u64..1500, any::<bool>()), 1..200),
        ) {
            let cache: DecodedCache<u32, u64> = DecodedCache::new(capacity, shards);
            let mut model: std::collections::HashMap<u32, u64> = Default::default();
            for (key, weight, lookup) in steps {
                if lookup {
                    if let Some(value) = cache.get(&key) {
                        prop_assert_eq!(Some(&value), model.get(&key));
                    }
                    continue;
                }
                cache.insert(key, weight, weight);
                model.insert(key, weight);
                let stats = cache.stats();
                prop_assert!(stats.bytes <= stats.capacity, "{:?}", stats);
                prop_assert!(stats.capacity <= capacity);
                let held: u64 = cache.shards.iter()
                    .map(|shard| shard.lock().entries.iter().map(|(_, (_, weight))| *weight).sum::<u64>())
                    .sum();
                prop_assert_eq!(held, stats.bytes);
            }
        }
    }

    /// Issue 32: the least recently used entry leaves first; a lookup makes an
    /// entry the most recently used.
    #[test]
    fn issue_32_the_least_recently_used_block_leaves_first() {
        let cache: DecodedCache<char, char> = DecodedCache::new(300, 1);
        for key in ['a', 'b', 'c'] {
            cache.insert(key, key, 100);
        }
        assert_eq!(cache.get(&'a'), Some('a'));
        cache.insert('d', 'd', 100);
        assert_eq!(cache.get(&'b'), None, "b was the least recently used");
        for key in ['a', 'c', 'd'] {
            assert_eq!(cache.get(&key), Some(key));
        }
        // Now c, then d, then a were used last: two leave for an entry of 200.
        assert_eq!(cache.get(&'a'), Some('a'));
        cache.insert('e', 'e', 200);
        assert_eq!(cache.get(&'c'), None);
        assert_eq!(cache.get(&'d'), None);
        assert_eq!(cache.get(&'a'), Some('a'));
        assert_eq!(cache.get(&'e'), Some('e'));
        let stats = cache.stats();
        assert_eq!((stats.bytes, stats.capacity), (300, 300));
        assert_eq!((stats.hits, stats.misses), (7, 3));
        // Heavier than the whole capacity: not kept, and nothing leaves for it.
        cache.insert('f', 'f', 301);
        assert_eq!(cache.get(&'f'), None);
        assert_eq!(cache.get(&'a'), Some('a'));
        // e was used before a: it leaves for a smaller capacity.
        cache.set_capacity(200);
        assert_eq!(cache.stats().bytes, 100);
        assert_eq!(cache.get(&'e'), None);
        assert_eq!(cache.get(&'a'), Some('a'));
    }
}
