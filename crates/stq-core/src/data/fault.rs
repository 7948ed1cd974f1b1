//! A store file that fails a read while stq serves (docs/api.md section 12): an
//! I/O error, or bytes that fail their checksum because the file was cut, removed
//! or changed under the running process.
//!
//! Such a read cannot answer, and the query that made it must not answer from
//! what it got. Every read of a store file returns its fault as a value (a lazy
//! read of records keeps it in a [`FirstFault`], which its consumer returns), from
//! the sealed tier's blocks, rows and index parts and the symbol runs up through
//! the scans, summaries and loads that made it: the engine answers it with
//! `storage_unavailable`, marks the store degraded and has the stations read
//! again from the snapshot files. No unwinding carries it; a panic is a bug
//! (`internal_error`).

use std::cell::Cell;
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
    /// The fault of `path`, failed as `reason` says.
    pub(crate) fn at(path: &Path, reason: String) -> StorageFault {
        StorageFault {
            path: path.to_path_buf(),
            reason,
        }
    }
}

/// The first fault of lazy reads (a tier's records, a scan's streams of them, one
/// a station): each read ends at its fault, which is kept here, and the result
/// of their consumer is that fault ([`FirstFault::or`]), whatever the reads gave.
/// A fault is kept a block at a time, where a read meets it, so that records
/// pass as plain values ([`crate::data::tier::Tier`]).
#[derive(Default)]
pub(crate) struct FirstFault(Cell<Option<StorageFault>>);

impl FirstFault {
    /// `reads`' values, up to its first fault, which is kept.
    pub(crate) fn until<'a, T: 'a>(
        &'a self,
        reads: impl Iterator<Item = Result<T, StorageFault>> + 'a,
    ) -> impl Iterator<Item = T> + 'a {
        reads.map_while(|read| self.ok(read))
    }

    /// `read`'s value, or `None` with its fault kept: a step of a read that
    /// `map_while` ends at its first fault.
    pub(crate) fn ok<T>(&self, read: Result<T, StorageFault>) -> Option<T> {
        read.map_err(|fault| self.keep(fault)).ok()
    }

    /// Keeps `fault`, unless it holds one already.
    pub(crate) fn keep(&self, fault: StorageFault) {
        let first = self.0.take().unwrap_or(fault);
        self.0.set(Some(first));
    }

    /// `value`, unless a fault was kept: then the fault, taken.
    pub(crate) fn or<T>(&self, value: T) -> Result<T, StorageFault> {
        match self.0.take() {
            Some(fault) => Err(fault),
            None => Ok(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(reason: &str) -> StorageFault {
        StorageFault::at(Path::new("store/sealed-1"), reason.to_owned())
    }

    #[test]
    fn a_merge_of_reads_is_its_first_fault_and_ends_each_read_there() {
        let first = FirstFault::default();
        let reads = vec![Ok(1), Err(fault("first")), Ok(2), Err(fault("second"))];
        let read: Vec<i32> = first.until(reads.into_iter()).collect();
        assert_eq!(read, [1]);
        first.keep(fault("later"));
        assert_eq!(first.or(read), Err(fault("first")));
        let clean = FirstFault::default();
        let read: Vec<i32> = clean.until([Ok(1), Ok(2)].into_iter()).collect();
        assert_eq!(clean.or(read), Ok(vec![1, 2]));
    }
}
