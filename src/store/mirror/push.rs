//! The push: after each write of the copy, the files its manifest names that the
//! bucket lacks, then the manifest; the pack kept current; then the objects no
//! manifest names, once older than [`GRACE`], deleted.

use std::fs;
use std::time::{Duration, Instant, SystemTime};

use stq_core::data::NamedFile;

use super::{in_parallel, Mirror, MirrorError, IN_FLIGHT_BYTES, PACK_IN_FLIGHT_BYTES};
use crate::store::pack;

/// How long an object no manifest names stays in the bucket: longer than any
/// replica takes from putting a write's files to putting the manifest that names
/// them, so that a replica never deletes what another is about to name.
pub(crate) const GRACE: Duration = Duration::from_secs(3600);

/// How often the bucket is listed again, between pushes, to learn what other
/// replicas deleted (an object this replica's manifest names is then put again).
pub(crate) const RELIST_INTERVAL: Duration = Duration::from_secs(600);

/// What a push did.
#[derive(Debug, Default)]
pub struct Pushed {
    /// Objects put (the manifest among them), and their bytes.
    pub files: usize,
    pub bytes: u64,
    /// Objects deleted.
    pub deleted: usize,
    /// Damaged objects (found by the fill) that the bucket no longer needs: put
    /// again, or their stations' files, read again, put under other names.
    pub replaced: usize,
    /// When it wrote a new pack: the parts it put, and their bytes.
    pub pack: Option<(usize, u64)>,
    /// How long the push took.
    pub elapsed: Duration,
}

impl Mirror {
    /// Puts what the copy's manifest names and the bucket lacks, then the manifest;
    /// then deletes the objects no manifest needs.
    pub fn push(&mut self) -> Result<Pushed, MirrorError> {
        let begun = Instant::now();
        let path = self.copy.join(NamedFile::MANIFEST);
        let manifest = fs::read(&path).map_err(|source| self.copy_error(&path, source))?;
        let mut pushed = Pushed::default();
        let stale = (self.listed).is_none_or(|listed| listed.elapsed() >= RELIST_INTERVAL);
        if stale {
            self.list()?;
            // Another replica may have written a pack since.
            self.pack_read = false;
        }
        let damaged = std::mem::take(&mut *self.damaged.lock());
        for name in &damaged {
            self.held.remove(name);
        }
        let unchanged_manifest = self.pushed.as_ref() == Some(&manifest);
        let unchanged = !stale && damaged.is_empty() && unchanged_manifest;
        // A bucket without a pack (one a replica of an older stq filled) gets one
        // though its manifest is the same.
        if unchanged && self.pack_read && self.pack.is_some() && !self.pack_failed {
            return Ok(pushed);
        }
        let named = NamedFile::read_manifest(&manifest).map_err(|reason| MirrorError::Copy {
            path: path.display().to_string(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, reason),
        })?;
        if unchanged {
            pushed.pack = self.write_pack(&named)?;
            pushed.elapsed = begun.elapsed();
            return Ok(pushed);
        }
        let files: Vec<(String, u64)> = (named.iter())
            .map(|file| (file.name.clone(), file.length))
            .collect();
        let (missing, waiting): (Vec<_>, Vec<_>) = (files.iter())
            .filter(|(name, length)| self.held.get(name).is_none_or(|held| held.0 != *length))
            .cloned()
            // A damaged object's station may not be written to the copy yet.
            .partition(|(name, _)| !damaged.contains(name) || self.copy.join(name).exists());
        // The others are put again, or their stations now have other files.
        pushed.replaced = damaged.len() - waiting.len();
        (self.damaged.lock()).extend(waiting.into_iter().map(|(name, _)| name));
        in_parallel(
            &missing,
            |(_, length)| *length,
            IN_FLIGHT_BYTES,
            |(name, _)| {
                self.bucket.put(name, self.files.get(name)?)?;
                Ok(())
            },
        )
        .inspect_err(|_| {
            // Put again at the next push.
            self.damaged.lock().extend(damaged.iter().cloned());
        })?;
        let now = SystemTime::now();
        let missing_none = missing.is_empty();
        for (name, length) in missing {
            pushed.files += 1;
            pushed.bytes += length;
            self.held.insert(name, (length, now));
        }
        // A relist alone (nothing put, the manifest the one pulled or pushed last)
        // puts no manifest: another replica may have put a newer one since.
        if !(unchanged_manifest && missing_none && damaged.is_empty()) {
            pushed.files += 1;
            pushed.bytes += manifest.len() as u64;
            self.bucket.put(NamedFile::MANIFEST, manifest.clone())?;
        }
        pushed.pack = self.write_pack(&named)?;
        let named: std::collections::HashSet<&str> =
            files.iter().map(|(name, _)| name.as_str()).collect();
        let packed: std::collections::HashSet<&str> = (self.pack.iter())
            .flat_map(|table| table.parts.iter().map(|(name, _)| name.as_str()))
            .collect();
        let old: Vec<String> = (self.held.iter())
            .filter(|(name, (_, put))| {
                let needed = if name.ends_with(".stq") {
                    named.contains(name.as_str())
                } else {
                    !pack::is_part(name) || packed.contains(name.as_str())
                };
                !needed && now.duration_since(*put).unwrap_or_default() >= GRACE
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in old {
            // Another replica may have deleted it first.
            match self.bucket.delete(&name) {
                Ok(()) => pushed.deleted += 1,
                Err(error) if error.is_not_found() => {}
                Err(error) => return Err(error.into()),
            }
            self.held.remove(&name);
        }
        self.pushed = Some(manifest);
        pushed.elapsed = begun.elapsed();
        Ok(pushed)
    }

    /// Writes a new pack of what a join fetches of the store whose manifest names
    /// `named`, when one is [`pack::due`] and this process wrote none in the last
    /// [`pack::INTERVAL`] (unless the bucket has none): the parts put and their
    /// bytes, if it wrote one.
    fn write_pack(&mut self, named: &[NamedFile]) -> Result<Option<(usize, u64)>, MirrorError> {
        self.read_pack()?;
        let failed = self.pack_failed;
        let recent = (self.packed_at).is_some_and(|at| at.elapsed() < pack::INTERVAL);
        // A push comes after every write of the copy: within the interval it
        // looks no further.
        if !failed && recent && self.pack.is_some() {
            return Ok(None);
        }
        let mut seen = std::collections::HashSet::new();
        let files: Vec<&NamedFile> = (named.iter())
            .filter(|file| seen.insert(file.name.as_str()))
            .collect();
        if !failed && !pack::due(self.pack.as_ref(), &files) {
            return Ok(None);
        }
        let parts = pack::plan(&files);
        let part_bytes = |part: &Vec<&NamedFile>| -> u64 {
            part.iter().map(|file| pack::Piece::of(file).1).sum()
        };
        let written = in_parallel(&parts, part_bytes, PACK_IN_FLIGHT_BYTES, |part| {
            let mut bytes = Vec::with_capacity(part_bytes(part) as usize);
            let mut entries = Vec::with_capacity(part.len());
            for &file in part {
                let (piece, _) = pack::Piece::of(file);
                // A file the copy lacks, or holds damaged, is left out: a join
                // fetches it on its own.
                let Ok(piece_bytes) = pack::read(&self.copy, file, piece) else {
                    continue;
                };
                let at = bytes.len() as u64;
                entries.push((file.name.clone(), piece, at, piece_bytes.len() as u64));
                bytes.extend_from_slice(&piece_bytes);
            }
            if entries.is_empty() {
                return Ok(None);
            }
            let name = pack::part_name(&bytes);
            let length = bytes.len() as u64;
            // A part of the same bytes as a damaged one has its name: put again.
            let put = failed || self.held.get(&name).is_none_or(|held| held.0 != length);
            if put {
                self.bucket.put(&name, bytes)?;
            }
            Ok(Some((name, length, entries, put)))
        })?;
        let mut written: Vec<_> = written.into_iter().flatten().collect();
        written.sort_by(|one, other| one.0.cmp(&other.0));
        let mut table = pack::Table::default();
        let (mut parts_put, mut bytes_put) = (0, 0);
        let now = SystemTime::now();
        for (name, length, entries, put) in written {
            let part = table.parts.len();
            for (file, piece, offset, file_length) in entries {
                table.entries.push(pack::Entry {
                    name: file,
                    piece,
                    part,
                    offset,
                    length: file_length,
                });
            }
            if put {
                parts_put += 1;
                bytes_put += length;
                self.held.insert(name.clone(), (length, now));
            }
            table.parts.push((name, length));
        }
        self.bucket.put(pack::POINTER, table.to_bytes())?;
        self.pack = Some(table);
        self.pack_failed = false;
        self.packed_at = Some(Instant::now());
        Ok(Some((parts_put, bytes_put)))
    }
}
