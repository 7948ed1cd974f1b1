//! Where a loaded snapshot's bytes go (BENCHMARKS.md).
//!
//! `cargo run --release -p stq-core --example memory -- DIRECTORY [SHARDS]` loads
//! DIRECTORY as `stq serve` does and prints, per part of the index, its bytes and
//! its bytes per record, beside the live heap a counting allocator saw and the
//! process's RSS. The parts are a [`stq_core::data::MemoryUse`]'s; the heap not in any
//! part is the loader's leftovers, the catalog and the allocator's own bookkeeping.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::sync::Arc;

use stq_core::data::Generation;
use stq_core::data::{FromStore, LoadOptions, LoadReport, MemoryUse, OnInvalid, ShardData};

/// The system allocator (what `stq` uses), counting the bytes it has handed out.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(pointer, layout) }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        LIVE.fetch_add(size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(pointer, layout, size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn main() {
    let mut arguments = std::env::args().skip(1);
    let Some(directory) = arguments.next().map(PathBuf::from) else {
        eprintln!("usage: memory DIRECTORY [SHARDS [HOT_HOURS|all]]");
        std::process::exit(2);
    };
    let shards = arguments
        .next()
        .map_or(2, |text| text.parse().expect("SHARDS"));
    // The hot window, as `stq serve --hot`: 24 hours unless told.
    let hot = match arguments.next().as_deref() {
        Some("all") => None,
        Some(hours) => Some(std::time::Duration::from_secs(
            3600 * hours.parse::<u64>().expect("HOT_HOURS"),
        )),
        None => Some(std::time::Duration::from_secs(24 * 3600)),
    };
    let threads = std::thread::available_parallelism().map_or(2, usize::from);
    let options = LoadOptions {
        directory,
        shards,
        on_invalid: OnInvalid::Skip,
        generation: 1,
        threads,
        hot,
        cache: stq_core::data::BlockCache::new(1 << 30),
    };
    let (generation, report) = match std::env::var_os("STQ_MEMORY_STORE") {
        None => {
            let start = options
                .start(None, None)
                .unwrap_or_else(|error| fail(&error));
            (start.generation, start.report)
        }
        Some(store) => with_store(&options, std::path::Path::new(&store)),
    };
    let heap = LIVE.load(Ordering::Relaxed) as u64;
    let usage = MemoryUse::from(&generation);
    let records = (usage.units + usage.metrics).max(1) as f64;
    let jsonl = report.bytes as f64;
    println!(
        "{} unit and {} metric records, {:.1} MB of JSON Lines ({:.0} bytes a record)",
        usage.units,
        usage.metrics,
        jsonl / 1e6,
        jsonl / records
    );
    println!("| part | MB | bytes a record | x JSONL |");
    println!("|---|---|---|---|");
    let row = |name: &str, bytes: u64| {
        let bytes = bytes as f64;
        println!(
            "| {name} | {:.1} | {:.1} | {:.3} |",
            bytes / 1e6,
            bytes / records,
            bytes / jsonl
        );
    };
    for &(name, bytes) in &usage.parts {
        row(name, bytes);
    }
    let total: u64 = usage.parts.iter().map(|(_, bytes)| bytes).sum();
    row("sum of the parts", total);
    row("heap not in the parts", heap.saturating_sub(total));
    row("live heap (counted)", heap);
    row("store files mapped (symbols; not heap)", usage.mapped);
    if let Some(rss) = resident_bytes() {
        row("RSS", rss);
    }
    // What of the RSS is mapped store files, by kind (`sealed-`, `symbols-`).
    for (kind, bytes) in mapped_resident_bytes() {
        row(&format!("RSS of mapped {kind}files"), bytes);
    }
    drop(generation);
}

fn fail(error: &dyn std::fmt::Display) -> ! {
    eprintln!("memory: {error}");
    std::process::exit(1);
}

/// With `STQ_MEMORY_STORE=DIR`: a start from the store in DIR, as `stq
/// serve --store DIR` makes it (when DIR holds no store yet, or one not used, the
/// start reads every file and writes it, and is dropped).
fn with_store(options: &LoadOptions, directory: &std::path::Path) -> (Generation, LoadReport) {
    let mut started = std::time::Instant::now();
    let mut start = options
        .start(Some(directory), None)
        .unwrap_or_else(|error| fail(&error));
    if let Some(why @ (FromStore::Empty | FromStore::NotUsed)) = start.store {
        // Dropped before the start from what it wrote.
        let (catalog, shards) = (start.generation.catalog, start.generation.shards);
        let shards: Vec<Arc<ShardData>> = shards.into_iter().map(Arc::new).collect();
        let mut writer = start.writer.expect("a start from a store has its writer");
        let written = writer
            .write(&catalog, &shards, false)
            .unwrap_or_else(|error| fail(&error));
        eprintln!("memory: no store to start from ({why:?}): a load wrote it: {written:?}");
        drop((catalog, shards, writer));
        started = std::time::Instant::now();
        start = options
            .start(Some(directory), None)
            .unwrap_or_else(|error| fail(&error));
    }
    eprintln!(
        "memory: started from the store {} in {:?}",
        directory.display(),
        started.elapsed()
    );
    (start.generation, start.report)
}

/// The process's resident set, from `/proc` (Linux only).
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The resident bytes of each kind of store file mapped (by the name before its
/// hash), from `/proc/self/smaps` (Linux only).
fn mapped_resident_bytes() -> Vec<(String, u64)> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut kinds: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    let mut kind: Option<String> = None;
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("Rss:") => {
                if let (Some(kind), Some(kib)) = (&kind, words.next()) {
                    let kib: u64 = kib.parse().unwrap_or(0);
                    *kinds.entry(kind.clone()).or_default() += kib * 1024;
                }
            }
            Some(word) if word.contains('-') && !word.ends_with(':') => {
                let path = line.split_whitespace().nth(5).unwrap_or("");
                let name = path.rsplit('/').next().unwrap_or("");
                kind = (name.ends_with(".stq"))
                    .then(|| name.split('-').next().unwrap_or("").to_owned() + "-");
            }
            _ => {}
        }
    }
    kinds.into_iter().collect()
}
