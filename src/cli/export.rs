//! `stq export --parquet DEST` (docs/api.md section 13): loads the snapshot as
//! `serve` does, under the same `--on-invalid` rules, then writes its records as
//! Parquet ([`crate::export`]) to a directory or `s3://BUCKET/PREFIX` (S3's
//! settings from the `AWS_*` variables) and says what it wrote. Exit 0 when
//! written, 1 with a message otherwise.

use anyhow::Context as _;
use stq_core::data::{BlockCache, LoadError, LoadOptions};
use stq_objects::{Objects, S3Settings};

use super::{cpus, ExportArgs, INVALID_LINES_SHOWN};
use crate::export::{self as parquet_export, ExportOptions};

/// Sealed blocks a scan keeps decoded: an export reads each block about once, so
/// it needs little.
const CACHE_BYTES: u64 = 64 << 20;

/// Loads the snapshot and writes its records under `args.parquet`.
pub fn export(args: ExportArgs) -> anyhow::Result<()> {
    // Before the load: settings S3 cannot use stop the export at once.
    let destination = Objects::open(args.parquet.clone(), &S3Settings::from_env())
        .with_context(|| format!("exporting to {}", args.parquet))?;
    let options = LoadOptions {
        directory: args.snapshots.clone(),
        shards: cpus(),
        on_invalid: args.on_invalid.into(),
        generation: 1,
        threads: cpus(),
        // The default hot window: memory bounded as `serve`'s, whatever the history.
        hot: Some(std::time::Duration::from_secs(24 * 60 * 60)),
        cache: BlockCache::new(CACHE_BYTES),
    };
    let (generation, mut report) = match options.start(None, None) {
        Ok(start) => (start.generation, start.report),
        Err(LoadError::Invalid { report }) => {
            for line in report.invalid.iter().take(INVALID_LINES_SHOWN) {
                eprintln!("{line}");
            }
            anyhow::bail!(
                "{} invalid line(s) in {}; fix them, or export with --on-invalid hold (the other \
                 files) or skip",
                report.invalid.len(),
                args.snapshots.display()
            );
        }
        Err(error) => return Err(error.into()),
    };
    for line in report.take_held_lines() {
        eprintln!("held: {line}");
    }
    if !report.invalid.is_empty() {
        eprintln!("skipped {} invalid line(s)", report.invalid.len());
    }
    let written = parquet_export::export(
        generation,
        &ExportOptions {
            destination,
            from: args.from,
            to: args.to,
            stations: args.station_ids.clone(),
            threads: cpus(),
        },
    )
    .with_context(|| format!("exporting to {}", args.parquet))?;
    println!(
        "exported {} unit and {} metric records from {} ({} MB read in {} ms) to {}: {} files, \
         {} bytes, {} day partitions, in {} ms",
        written.units,
        written.metrics,
        args.snapshots.display(),
        report.bytes / 1_000_000,
        report.elapsed.as_millis(),
        args.parquet,
        written.files,
        written.bytes,
        written.partitions,
        written.elapsed.as_millis()
    );
    Ok(())
}
