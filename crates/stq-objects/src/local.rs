//! Objects as files under a directory: a name's parts are directories and its
//! last part the file. A file is written whole: under a temporary name in its
//! directory that begins with `.` (which Hive-style readers skip), fsynced,
//! renamed to its name, and the directory fsynced; a write that fails or is
//! abandoned removes its temporary file, so it leaves no object and no part of
//! one. Deleting a directory's last file deletes the directory, and each parent
//! left empty, up to the root: a bucket has no directories to leave behind.

use std::fs::{self, File};
use std::io::{self, Read as _, Seek as _, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use crate::{Listed, ObjectsError};

/// A directory that holds objects.
#[derive(Debug)]
pub(crate) struct Directory {
    root: PathBuf,
}

/// Tells apart the temporary files of one process's writes.
static NEXT_TEMPORARY: AtomicU64 = AtomicU64::new(0);

/// A file being written under its temporary name.
#[derive(Debug)]
pub(crate) struct FileWriter {
    file: Option<io::BufWriter<File>>,
    temporary: PathBuf,
    path: PathBuf,
    bytes: u64,
}

impl Directory {
    pub(crate) fn new(root: PathBuf) -> Directory {
        Directory { root }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Begins writing `name` under a temporary name beside it.
    pub(crate) fn writer(&self, name: &str) -> Result<FileWriter, ObjectsError> {
        let path = self.path(name);
        let directory = path.parent().expect("a name has a last part").to_owned();
        let file_name = path.file_name().expect("a name has a last part");
        let temporary = directory.join(format!(
            ".{}.{}.{}.tmp",
            file_name.to_string_lossy(),
            std::process::id(),
            NEXT_TEMPORARY.fetch_add(1, Ordering::Relaxed)
        ));
        // A delete may remove the directory, left empty, between the two: again.
        let mut attempts = 0;
        let file = loop {
            fs::create_dir_all(&directory).map_err(|error| ObjectsError::io(&directory, error))?;
            match File::create_new(&temporary) {
                Ok(file) => break file,
                Err(error) if error.kind() == io::ErrorKind::NotFound && attempts < 3 => {
                    attempts += 1;
                }
                Err(error) => return Err(ObjectsError::io(&temporary, error)),
            }
        };
        Ok(FileWriter {
            file: Some(io::BufWriter::with_capacity(1 << 20, file)),
            temporary,
            path,
            bytes: 0,
        })
    }

    pub(crate) fn get(&self, name: &str) -> Result<Vec<u8>, ObjectsError> {
        let path = self.path(name);
        fs::read(&path).map_err(|error| self.failed(name, &path, error))
    }

    pub(crate) fn get_each(
        &self,
        name: &str,
        sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<u64, ObjectsError> {
        let path = self.path(name);
        let failed = |error| self.failed(name, &path, error);
        let mut file = File::open(&path).map_err(failed)?;
        let mut buffer = vec![0; 1 << 20];
        let mut size = 0;
        loop {
            let read = file.read(&mut buffer).map_err(failed)?;
            if read == 0 {
                return Ok(size);
            }
            size += read as u64;
            sink(&buffer[..read]).map_err(ObjectsError::Sink)?;
        }
    }

    pub(crate) fn get_range(&self, name: &str, range: Range<u64>) -> Result<Vec<u8>, ObjectsError> {
        let path = self.path(name);
        let failed = |error| self.failed(name, &path, error);
        let mut file = File::open(&path).map_err(failed)?;
        let size = file.metadata().map_err(failed)?.len();
        if range.start >= range.end || range.end > size {
            return Err(ObjectsError::Range {
                location: self.root.display().to_string(),
                name: name.to_owned(),
                start: range.start,
                end: range.end,
                size,
            });
        }
        file.seek(SeekFrom::Start(range.start)).map_err(failed)?;
        let mut bytes = vec![0; (range.end - range.start) as usize];
        file.read_exact(&mut bytes).map_err(failed)?;
        Ok(bytes)
    }

    /// Every file under `prefix` (a directory's name, or empty for the root), by
    /// name.
    pub(crate) fn list(&self, prefix: &str) -> Result<Vec<Listed>, ObjectsError> {
        let mut listed = Vec::new();
        let mut pending = vec![self.path(prefix)];
        while let Some(directory) = pending.pop() {
            let entries = match fs::read_dir(&directory) {
                Ok(entries) => entries,
                // Nothing was put there (or the prefix names a file, not a directory).
                Err(error)
                    if error.kind() == io::ErrorKind::NotFound
                        || error.kind() == io::ErrorKind::NotADirectory =>
                {
                    continue
                }
                Err(error) => return Err(ObjectsError::io(&directory, error)),
            };
            for entry in entries {
                let entry = entry.map_err(|error| ObjectsError::io(&directory, error))?;
                let path = entry.path();
                let kind = entry
                    .file_type()
                    .map_err(|error| ObjectsError::io(&path, error))?;
                if kind.is_dir() {
                    pending.push(path);
                } else if kind.is_file() {
                    let metadata =
                        (entry.metadata()).map_err(|error| ObjectsError::io(&path, error))?;
                    let Some(name) = self.name_of(&path) else {
                        continue;
                    };
                    listed.push(Listed {
                        name,
                        size: metadata.len(),
                        modified: metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    });
                }
            }
        }
        listed.sort_unstable_by(|one, other| one.name.cmp(&other.name));
        Ok(listed)
    }

    /// A file's name as an object's, `/`-separated; `None` for one no name can
    /// give (not UTF-8).
    fn name_of(&self, path: &Path) -> Option<String> {
        let relative = path.strip_prefix(&self.root).ok()?;
        let parts: Option<Vec<&str>> = relative.iter().map(|part| part.to_str()).collect();
        Some(parts?.join("/"))
    }

    /// Deletes `name` (nothing if it does not exist), then each directory it was
    /// in that is left empty, up to the root.
    pub(crate) fn delete(&self, name: &str) -> Result<(), ObjectsError> {
        let path = self.path(name);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(ObjectsError::io(&path, error)),
        }
        let mut directory = path.parent();
        while let Some(inside) = directory.filter(|inside| *inside != self.root) {
            // Not empty (or another writer's): it stays.
            if fs::remove_dir(inside).is_err() {
                break;
            }
            directory = inside.parent();
        }
        Ok(())
    }

    fn failed(&self, name: &str, path: &Path, error: io::Error) -> ObjectsError {
        match error.kind() {
            io::ErrorKind::NotFound => ObjectsError::NotFound {
                location: self.root.display().to_string(),
                name: name.to_owned(),
            },
            _ => ObjectsError::io(path, error),
        }
    }
}

impl FileWriter {
    /// Flushes, fsyncs, renames the file to its name and fsyncs its directory.
    pub(crate) fn finish(mut self) -> Result<u64, ObjectsError> {
        let file = self.file.take().expect("finished once");
        let temporary = self.temporary.clone();
        let failed = |error| ObjectsError::io(&temporary, error);
        let file = file
            .into_inner()
            .map_err(|error| failed(error.into_error()))?;
        file.sync_all().map_err(failed)?;
        drop(file);
        fs::rename(&self.temporary, &self.path)
            .map_err(|error| ObjectsError::io(&self.path, error))?;
        let directory = self.path.parent().expect("a name has a last part");
        File::open(directory)
            .and_then(|directory| directory.sync_all())
            .map_err(|error| ObjectsError::io(directory, error))?;
        // Renamed: nothing left to remove.
        self.temporary = PathBuf::new();
        Ok(self.bytes)
    }
}

impl io::Write for FileWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let written = self.file.as_mut().expect("not finished").write(bytes)?;
        self.bytes += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.as_mut().expect("not finished").flush()
    }
}

impl Drop for FileWriter {
    /// A write that failed or was abandoned leaves no file behind.
    fn drop(&mut self) {
        if !self.temporary.as_os_str().is_empty() {
            drop(self.file.take());
            let _ = fs::remove_file(&self.temporary);
        }
    }
}
