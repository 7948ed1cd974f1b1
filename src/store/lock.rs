//! One writer per store directory (docs/api.md section 12: several stq processes
//! may share a store, and none corrupts another's files). A write names its files
//! in the manifest and then deletes every store file the manifest does not name,
//! temporary files included: two processes writing one directory would delete each
//! other's files, and each would reuse files it wrote earlier that the other has
//! since deleted. So the directory's writer is the process that holds an exclusive
//! lock on its `LOCK` file (`flock(2)`, released by the kernel however the process
//! ends, `kill -9` included). Another process on the same directory starts from the
//! store all the same (its files are immutable, and one deleted under a start is
//! read again from the snapshot files, as a damaged one is), writes nothing, and
//! takes the lock when the writer has stopped: the next generation it writes is
//! then written whole. With `--store s3://`, the same holds for the local copy, and
//! only its writer pulls and pushes.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};

/// The lock file's name in the store's directory: not a name the store's writer
/// deletes (it deletes `*.stq` and `*.tmp`), nor one a pull fetches.
pub(crate) const LOCK: &str = "LOCK";

/// What this process knows of a store directory's lock.
#[derive(Debug)]
pub enum WriterLock {
    /// This process holds it (the file held open: closing it releases the lock),
    /// and writes the store.
    Held(File),
    /// Another process held it when this one last asked.
    Elsewhere,
    /// It could not be made (a read-only directory, say): the writes are tried,
    /// to fail and say why.
    Unavailable,
}

impl WriterLock {
    /// The lock file of the store in `directory`.
    pub fn file(directory: &Path) -> PathBuf {
        directory.join(LOCK)
    }

    /// Takes the lock on `directory` (made if missing), unless another process
    /// holds it.
    pub fn take(directory: &Path) -> WriterLock {
        match WriterLock::try_take(directory) {
            Ok(Some(file)) => WriterLock::Held(file),
            Ok(None) => WriterLock::Elsewhere,
            Err(_) => WriterLock::Unavailable,
        }
    }

    fn try_take(directory: &Path) -> io::Result<Option<File>> {
        std::fs::create_dir_all(directory)?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(WriterLock::file(directory))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(error)) => Err(error),
        }
    }

    /// Whether another process held the lock when this one last asked.
    pub fn is_elsewhere(&self) -> bool {
        matches!(self, WriterLock::Elsewhere)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_one_directory_waits_for_the_first_to_be_released() {
        let directory = tempfile::tempdir().unwrap();
        let first = WriterLock::take(directory.path());
        assert!(matches!(first, WriterLock::Held(_)));
        // Another open file description, as another process has: refused.
        assert!(WriterLock::take(directory.path()).is_elsewhere());
        drop(first);
        assert!(matches!(
            WriterLock::take(directory.path()),
            WriterLock::Held(_)
        ));
    }

    #[test]
    fn the_lock_creates_the_directory() {
        let directory = tempfile::tempdir().unwrap();
        let store = directory.path().join("not/yet");
        assert!(matches!(WriterLock::take(&store), WriterLock::Held(_)));
        assert!(store.join(LOCK).exists());
    }

    #[test]
    fn a_lock_that_cannot_be_made_is_unavailable() {
        let directory = tempfile::tempdir().unwrap();
        let file = directory.path().join("a file");
        std::fs::write(&file, b"not a directory").unwrap();
        assert!(matches!(WriterLock::take(&file), WriterLock::Unavailable));
    }
}
