//! The criterion benches' data: ten stations, seven days of `stq gen` output, made
//! once under the target directory and loaded on as many shards as a bench wants.

use std::path::PathBuf;

use stq_core::data::Generation;
use stq_core::data::{LoadOptions, OnInvalid};
use stq_gen::{generate, GenOptions};

/// The end of the generated span: the data is the same on every run.
pub const END: &str = "2026-11-01T00:00:00Z";

/// `--hot` as `stq serve` has it by default (24 h), or every record hot with
/// `BENCH_HOT=all`: the data ends on the 1st, so a query of October 29 reads sealed
/// records by default, and hot ones with `all`.
fn hot_window() -> Option<std::time::Duration> {
    match std::env::var("BENCH_HOT").as_deref() {
        Ok("all") => None,
        Ok(other) if !other.is_empty() => panic!("BENCH_HOT is `all` or unset, not {other:?}"),
        _ => Some(std::time::Duration::from_secs(24 * 3600)),
    }
}

/// The data's directory, written on first use, and the data loaded on `shards`.
pub fn dataset(shards: usize) -> (PathBuf, Generation) {
    let directory = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-engine-data");
    if !directory.join("ST-10").exists() {
        generate(&GenOptions {
            out: directory.clone(),
            stations: 10,
            days: 7,
            units_per_hour: 6,
            seed: 42,
            end: chrono::DateTime::parse_from_rfc3339(END).unwrap().into(),
        })
        .expect("the benchmark data can be written");
    }
    let generation = LoadOptions {
        directory: directory.clone(),
        shards,
        on_invalid: OnInvalid::Fail,
        generation: 1,
        threads: 2,
        hot: hot_window(),
        cache: stq_core::data::BlockCache::new(1 << 30),
    }
    .start(None, None)
    .expect("the benchmark data loads")
    .generation;
    (directory, generation)
}
