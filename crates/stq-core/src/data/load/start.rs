//! A server's first generation (docs/api.md section 12): from the store, when
//! one is given and can be used, and what changed since it was written; else
//! from every file. What the store could not give is logged here, and the
//! store's writer made, holding what the start restored.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::{full, reload, FromStore, LoadError, LoadOptions, Start};
use crate::data::sealed::Remote;
use crate::data::store::{self, StoreError, StoreSettings, Written};

/// See [`super::start`].
pub(super) fn start(
    options: &LoadOptions,
    store: Option<&Path>,
    remote: Option<Arc<dyn Remote>>,
) -> Result<Start, LoadError> {
    let Some(directory) = store else {
        let (generation, report) = full::load(options)?;
        return Ok(Start {
            generation,
            report,
            writer: None,
            store: None,
        });
    };
    let settings = StoreSettings {
        snapshots: options.directory.clone(),
        shards: options.shards,
        hot: options.hot,
    };
    let full = |from: FromStore| -> Result<Start, LoadError> {
        let (generation, report) = full::load(options)?;
        Ok(Start {
            generation,
            report,
            writer: Some(store::writer(
                directory,
                settings.clone(),
                Written::default(),
            )),
            store: Some(from),
        })
    };
    let begun = Instant::now();
    let mut restored = match store::read(directory, remote, &settings, &options.cache) {
        Ok(restored) => restored,
        Err(StoreError::Empty) => return full(FromStore::Empty),
        Err(error) => {
            tracing::warn!(
                "the store {} is not used: {error}; reading the snapshot files instead, and the \
                 store is written again",
                directory.display()
            );
            return full(FromStore::NotUsed);
        }
    };
    for (station, error) in &restored.repaired {
        tracing::warn!(
            "the store {}: station {station}: {error}; its snapshot files are read again, \
             and its files in the store written again",
            directory.display()
        );
    }
    let records = restored.records();
    let repaired = restored.repaired.len();
    let written = std::mem::take(&mut restored.written);
    let (generation, mut report, used) = reload::load_from_store(options, restored)?;
    if !used {
        return Ok(Start {
            generation,
            report,
            writer: Some(store::writer(directory, settings, Written::default())),
            store: Some(FromStore::ParsedInstead),
        });
    }
    // The store's read is part of the start.
    report.elapsed = begun.elapsed();
    Ok(Start {
        generation,
        report,
        writer: Some(store::writer(directory, settings, written)),
        store: Some(FromStore::Restored { records, repaired }),
    })
}
