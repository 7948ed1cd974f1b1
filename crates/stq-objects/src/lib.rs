//! Named objects in a directory or an S3 bucket, behind one small synchronous API:
//! where `stq export --parquet` and `stq serve --export` write (docs/api.md
//! section 13), and what `--store s3://` is to use (section 12).
//!
//! A [`Location`] is `s3://BUCKET/PREFIX` or a local path; [`Objects::open`] gives
//! the objects there. Names are relative to the location's root, `/`-separated
//! ([`crate::names`] has the rule), and mean the same on a directory and a bucket.
//! An object is put whole, or not at all: on a directory a file is written under a
//! temporary name that begins with `.`, fsynced and renamed; on S3 it is one PUT.
//! Then it can be read whole or a byte range at a time, listed (with its size)
//! under a prefix, and deleted.
//!
//! **S3** ([`S3Settings`]: the usual `AWS_*` variables) goes through the Apache
//! Arrow project's `object_store`, whose requests have timeouts and retries with
//! backoff (their values, and why, are in `s3.rs`). Its calls are async; a runtime
//! this crate owns (one worker thread per bucket opened) drives them while the
//! calling thread blocks. Callers are plain threads, never an async runtime's (a
//! call from one is refused with an error rather than blocking its executor).
//!
//! **Secrets** (the key id, the secret key, a session token) never reach a
//! message: no type here formats them, in `Display` or `Debug`, and S3's own
//! messages are redacted before they become an [`ObjectsError`].
//!
//! This crate depends on no other crate of stq's.

mod error;
mod local;
mod location;
mod names;
mod s3;
mod settings;

use std::io;
use std::ops::Range;
use std::sync::Arc;
use std::time::SystemTime;

pub use error::ObjectsError;
pub use location::Location;
pub use settings::S3Settings;

/// The objects at a [`Location`]; cheap to clone, and shared by threads.
#[derive(Clone, Debug)]
pub struct Objects {
    location: Location,
    backend: Arc<Backend>,
}

#[derive(Debug)]
enum Backend {
    Directory(local::Directory),
    S3(s3::Bucket),
}

/// An object listed: its name (relative to the location's root) and size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    pub size: u64,
    /// When it was put (S3's `Last-Modified`, a file's modification time).
    pub modified: SystemTime,
}

impl Objects {
    /// The objects at `location`; an S3 bucket's client is made with `settings`
    /// (a directory ignores them). Nothing is read or written yet: a bucket that
    /// cannot be reached fails the first call, not this one.
    pub fn open(location: Location, settings: &S3Settings) -> Result<Objects, ObjectsError> {
        let backend = match &location {
            Location::Directory(root) => Backend::Directory(local::Directory::new(root.clone())),
            Location::S3 { bucket, prefix } => Backend::S3(s3::Bucket::open(
                bucket,
                prefix,
                location.to_string(),
                settings,
            )?),
        };
        Ok(Objects {
            location,
            backend: Arc::new(backend),
        })
    }

    /// Where the objects are.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// Puts `bytes` as object `name`, whole, in place of any object of that name.
    pub fn put(&self, name: &str, bytes: Vec<u8>) -> Result<(), ObjectsError> {
        check(name)?;
        match &*self.backend {
            Backend::Directory(directory) => {
                let mut writer = directory.writer(name)?;
                io::Write::write_all(&mut writer, &bytes)
                    .map_err(|error| ObjectsError::io(&self.path_of(name), error))?;
                writer.finish().map(drop)
            }
            Backend::S3(bucket) => bucket.put(name, bytes),
        }
    }

    /// A writer of object `name`, put whole by [`ObjectWriter::finish`]: on a
    /// directory its bytes go to the temporary file as they are written; on S3
    /// they are kept in memory for the one PUT. Dropped unfinished, it leaves no
    /// object.
    pub fn writer(&self, name: &str) -> Result<ObjectWriter<'_>, ObjectsError> {
        check(name)?;
        let sink = match &*self.backend {
            Backend::Directory(directory) => Sink::File(directory.writer(name)?),
            Backend::S3(_) => Sink::Memory(Vec::new()),
        };
        Ok(ObjectWriter {
            objects: self,
            name: name.to_owned(),
            sink,
        })
    }

    /// Object `name`, whole ([`ObjectsError::NotFound`] when there is none).
    pub fn get(&self, name: &str) -> Result<Vec<u8>, ObjectsError> {
        check(name)?;
        match &*self.backend {
            Backend::Directory(directory) => directory.get(name),
            Backend::S3(bucket) => bucket.get(name),
        }
    }

    /// Object `name` in pieces as they arrive, each given to `sink` in order, so
    /// that a large object is never whole in memory; its size. An error `sink`
    /// returns ends the read, as [`ObjectsError::Sink`].
    pub fn get_each(
        &self,
        name: &str,
        sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<u64, ObjectsError> {
        check(name)?;
        match &*self.backend {
            Backend::Directory(directory) => directory.get_each(name, sink),
            Backend::S3(bucket) => bucket.get_each(name, sink),
        }
    }

    /// Bytes `range` of object `name`: a range that is empty or ends past the
    /// object's end is an error ([`ObjectsError::Range`]).
    pub fn get_range(&self, name: &str, range: Range<u64>) -> Result<Vec<u8>, ObjectsError> {
        check(name)?;
        match &*self.backend {
            Backend::Directory(directory) => directory.get_range(name, range),
            Backend::S3(bucket) => bucket.get_range(name, range),
        }
    }

    /// Every object whose name is under `prefix` (a name's leading parts:
    /// `units/day=2026-11-24` lists `units/day=2026-11-24/part-0.parquet`, not
    /// `units/day=2026-11-240/...`; empty for all), by name, with temporary files
    /// of a directory among them.
    pub fn list(&self, prefix: &str) -> Result<Vec<Listed>, ObjectsError> {
        names::check_prefix(prefix).map_err(|reason| ObjectsError::Name {
            name: prefix.to_owned(),
            reason,
        })?;
        match &*self.backend {
            Backend::Directory(directory) => directory.list(prefix),
            Backend::S3(bucket) => bucket.list(prefix),
        }
    }

    /// Deletes object `name`; one that is not there is no error.
    pub fn delete(&self, name: &str) -> Result<(), ObjectsError> {
        check(name)?;
        match &*self.backend {
            Backend::Directory(directory) => directory.delete(name),
            Backend::S3(bucket) => bucket.delete(name),
        }
    }

    /// Where object `name` is, for a message.
    fn path_of(&self, name: &str) -> std::path::PathBuf {
        match &self.location {
            Location::Directory(root) => root.join(name),
            location => std::path::PathBuf::from(format!("{location}/{name}")),
        }
    }
}

fn check(name: &str) -> Result<(), ObjectsError> {
    names::check(name).map_err(|reason| ObjectsError::Name {
        name: name.to_owned(),
        reason,
    })
}

/// An object being written: see [`Objects::writer`].
#[derive(Debug)]
pub struct ObjectWriter<'a> {
    objects: &'a Objects,
    name: String,
    sink: Sink,
}

#[derive(Debug)]
enum Sink {
    File(local::FileWriter),
    Memory(Vec<u8>),
}

impl ObjectWriter<'_> {
    /// Puts the object, whole; its size in bytes.
    pub fn finish(self) -> Result<u64, ObjectsError> {
        match self.sink {
            Sink::File(file) => file.finish(),
            Sink::Memory(bytes) => {
                let size = bytes.len() as u64;
                self.objects.put(&self.name, bytes)?;
                Ok(size)
            }
        }
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl io::Write for ObjectWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match &mut self.sink {
            Sink::File(file) => file.write(bytes),
            Sink::Memory(memory) => memory.write(bytes),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.sink {
            Sink::File(file) => file.flush(),
            Sink::Memory(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
