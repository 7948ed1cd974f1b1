//! A store file that fails a read while stq serves (docs/api.md section 12): an
//! I/O error, or bytes that fail their checksum because the file was cut, removed
//! or changed under the running process.
//!
//! Such a read cannot answer, and the query that made it must not answer from
//! what it got. The reads deep in the sealed tier and the symbol runs raise the
//! fault as a typed payload ([`StorageFault::raise`]) that unwinds to the shard's
//! wall, which turns it back into a value: the engine answers it with
//! `storage_unavailable`, marks the store degraded and has the stations read
//! again from the snapshot files. A plain panic stays a bug (`internal_error`).

use std::path::{Path, PathBuf};

/// A store file that could not be read, or read damaged, during a query.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the store file {} {reason}", path.display())]
pub struct StorageFault {
    /// The file's path.
    pub path: PathBuf,
    /// What failed: the read's error, or which check.
    pub reason: String,
}

impl StorageFault {
    /// Ends the read under way with the fault of `path`: the query unwinds to its
    /// shard's wall, which answers it (see the module's doc).
    pub(crate) fn raise(path: &Path, reason: String) -> ! {
        std::panic::panic_any(StorageFault {
            path: path.to_path_buf(),
            reason,
        })
    }
}
