//! `stq serve --export DEST` (docs/api.md section 13): the files `stq export` writes,
//! kept up to date by the server off the request path. A day is written once all
//! of it is older than the hot window (`--hot`, the history still open for
//! appends) counted back from the newest record of all stations, and written again
//! when a later generation changes its records. The floor's clock, not each
//! station's: a station that fell silent would otherwise hold back every later day
//! for good, and a record it sends late rewrites its day as any late record does.
//!
//! Like the store's writer (`crate::store::StoreHandle`), a thread of its own
//! takes the newest generation served, the start's and each reload's; generations
//! handed over while it writes replace each other, and a pass begins at least
//! [`EXPORT_INTERVAL`] after the last one ended. Serving never waits for it.
//!
//! **Change detection.** Each pass takes a fingerprint of every complete day of
//! each kind: per station, the fingerprint stq-core makes of the station's records
//! of that day (`StationRecords::day_fingerprints`: the sealed blocks' compressed bytes
//! and the pieces they share, and the hot records' keys and JSON, nothing
//! decompressed), hashed with the station's id in byte order (xxh3). A day whose
//! fingerprint differs from the one it was written with is written again (a late
//! record, a snapshot file rewritten); a day written before that no record holds
//! any more is emptied; any other day's files are not touched. A pass hashes the
//! compressed history, never decodes or writes an unchanged day.
//!
//! **Across restarts.** The fingerprints written are kept in `DEST/.stq-export`
//! (an object put whole, like the parts; Hive-style readers skip the dot name),
//! so that a restart does not write every day again: re-exporting a
//! plant's months of history at every start would cost minutes of CPU for
//! nothing. A remembered day whose partition is gone is written again. The
//! fingerprint follows the encoding, so the first pass after a start may still
//! write a day again when its records were sealed otherwise than before (the same
//! files load the same way, so an unchanged floor does not).
//!
//! A day, or the fingerprints' file, that cannot be written is logged (once per
//! cause, until a pass writes everything) and tried again at the next generation.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use stq_core::data::ShardData;
use stq_core::data::{Catalog, Generation, StorageFault};
use stq_core::domain::record::Kind;
use stq_core::domain::time::{Timestamp, Window};
use stq_objects::Objects;
use xxhash_rust::xxh3::Xxh3;

use crate::newest::Newest;

use super::{
    day_of, day_text, export_day, parse_day, partition_day, start_of, stations, Data, Day,
    ExportError,
};

/// The least time from the end of one pass to the start of the next: a floor
/// reloads several times a second, and a pass hashes every station's history. A
/// day is complete hours after its last record, so a few seconds later is soon.
pub const EXPORT_INTERVAL: Duration = Duration::from_secs(5);

/// The fingerprints' object, at the root of the export's destination.
const FINGERPRINTS: &str = ".stq-export";

/// Its first line: a file of another version is not read.
const FINGERPRINTS_HEADER: &str = "stq export fingerprints 1";

/// The first instant inside the floor's hot window: the newest record's instant
/// over all stations, less `hot`; `None` without records. Every day that ends by
/// then is complete.
pub fn complete_before(generation: &Generation, hot: Duration) -> Option<Timestamp> {
    let hot = i64::try_from(hot.as_secs()).unwrap_or(i64::MAX);
    let newest = (generation.newest_records().into_iter())
        .map(|(_, newest)| newest)
        .max()?;
    Some(Timestamp {
        seconds: newest.seconds.saturating_sub(hot),
        ..newest
    })
}

/// A generation to export: its catalog, its shards, and [`complete_before`] of it.
type Job = (Arc<Catalog>, Vec<Arc<ShardData>>, Option<Timestamp>);

/// Hands generations to the exporting thread; cheap to clone.
#[derive(Clone)]
pub struct ExportHandle {
    next: Arc<Newest<Job>>,
}

impl ExportHandle {
    /// Starts the thread that keeps `destination` up to date.
    pub fn spawn(destination: Objects) -> io::Result<ExportHandle> {
        let next: Arc<Newest<Job>> = Arc::default();
        let waiting = Arc::clone(&next);
        std::thread::Builder::new()
            .name("stq-export".into())
            .spawn(move || export_forever(Exporter::new(destination), &waiting))?;
        Ok(ExportHandle { next })
    }

    /// Asks for the days of the generation of `catalog` and `shards` that are
    /// complete (those that end by `complete_before`) to be brought up to date, in
    /// place of any generation not yet begun.
    pub fn export(
        &self,
        catalog: Arc<Catalog>,
        shards: Vec<Arc<ShardData>>,
        complete_before: Option<Timestamp>,
    ) {
        self.next.put((catalog, shards, complete_before));
    }
}

fn export_forever(mut exporter: Exporter, next: &Newest<Job>) {
    let mut last_ended: Option<Instant> = None;
    loop {
        let (catalog, shards, complete_before) = next.take_after(last_ended, EXPORT_INTERVAL);
        let data = Data::of(&catalog, shards.iter().map(|shard| &**shard).collect());
        exporter.pass(&data, complete_before);
        drop(data);
        // The generation is not kept beyond its pass.
        drop((catalog, shards));
        last_ended = Some(Instant::now());
    }
}

/// A partition: a kind and a day.
type Partition = (KindName, Day);

/// A kind as the partitions' directories name it, which orders and compares.
type KindName = &'static str;

const KINDS: [(Kind, KindName); 2] = [(Kind::Units, "units"), (Kind::Metrics, "metrics")];

/// What the exporting thread keeps between passes.
struct Exporter {
    destination: Objects,
    /// Each partition written, with the fingerprint of the records it was written
    /// from.
    written: BTreeMap<Partition, u64>,
    /// Whether `written` differs from the fingerprints' file.
    unsaved: bool,
    /// The failure logged last, until a pass writes everything.
    failing: Option<String>,
}

impl Exporter {
    fn new(destination: Objects) -> Exporter {
        let written = read_fingerprints(&destination);
        Exporter {
            destination,
            written,
            unsaved: false,
            failing: None,
        }
    }

    /// Writes each complete day whose records differ from those it was written
    /// from (or that was never written), and empties each written one that no
    /// record holds any more.
    fn pass(&mut self, data: &Data<'_>, complete_before: Option<Timestamp>) {
        let Some(complete_before) = complete_before else {
            return;
        };
        // Days before the one that holds that instant end by it.
        let end = day_of(complete_before);
        let window = Window {
            to: start_of(end),
            ..Window::ALL
        };
        let every = Window::ALL;
        let stations = stations(data, None);
        let current = match fingerprints(data, &stations, window) {
            Ok(current) => current,
            // The query that meets the fault first has the stations read again.
            Err(fault) => {
                tracing::warn!("cannot export: {fault}; tried again at the next generation");
                return;
            }
        };
        let mut due: Vec<Partition> = (current.iter())
            .filter(|(partition, fingerprint)| self.written.get(*partition) != Some(*fingerprint))
            .map(|(partition, _)| *partition)
            .collect();
        due.extend(
            (self.written.keys())
                .filter(|partition| partition.1 < end && !current.contains_key(*partition)),
        );
        due.sort_unstable();
        let began = Instant::now();
        let (mut written, due_count) = (0, due.len());
        let mut failure: Option<ExportError> = None;
        for partition in due {
            let (kind, name) = KINDS
                .into_iter()
                .find(|(_, name)| *name == partition.0)
                .expect("a partition is of a known kind");
            let day_began = Instant::now();
            match export_day(data, &stations, kind, partition.1, every, &self.destination) {
                Ok(report) => {
                    tracing::info!(
                        "exported day {} of {name}: {} records in {} files ({} bytes), in {} ms",
                        day_text(partition.1),
                        report.records,
                        report.files,
                        report.bytes,
                        day_began.elapsed().as_millis()
                    );
                    match current.get(&partition) {
                        Some(&fingerprint) => self.written.insert(partition, fingerprint),
                        None => self.written.remove(&partition),
                    };
                    self.unsaved = true;
                    written += 1;
                }
                Err(error) => {
                    failure.get_or_insert(error);
                }
            }
        }
        if due_count > 0 {
            tracing::info!(
                "export written: generation {}, {written} of {due_count} partitions written, in {} \
                 ms",
                data.catalog.generation(),
                began.elapsed().as_millis()
            );
        }
        if self.unsaved {
            match write_fingerprints(&self.destination, &self.written) {
                Ok(()) => self.unsaved = false,
                Err(error) => {
                    failure.get_or_insert(error);
                }
            }
        }
        match failure {
            Some(error) => {
                let cause = error.to_string();
                if self.failing.as_ref() != Some(&cause) {
                    tracing::warn!(
                        "cannot export to {}: {cause}; serving goes on, and the days not written \
                         are tried again at the next generation",
                        self.destination.location()
                    );
                }
                self.failing = Some(cause);
            }
            None => {
                if self.failing.take().is_some() {
                    tracing::info!("exporting to {} again", self.destination.location());
                }
            }
        }
    }
}

/// The fingerprint of each day in `window` of each kind that holds records of
/// `stations`: each station's, with its id, in byte order.
fn fingerprints(
    data: &Data<'_>,
    stations: &[u32],
    window: Window,
) -> Result<BTreeMap<Partition, u64>, StorageFault> {
    let mut days: BTreeMap<Partition, Xxh3> = BTreeMap::new();
    for (kind, name) in KINDS {
        for &station in stations {
            let id = &data.catalog.stations()[station as usize];
            for (day, fingerprint) in data.records.day_fingerprints(station, kind, window)? {
                let hasher = days.entry((name, day)).or_default();
                hasher.update(&(id.len() as u64).to_le_bytes());
                hasher.update(id.as_bytes());
                hasher.update(&fingerprint.to_le_bytes());
            }
        }
    }
    Ok((days.into_iter())
        .map(|(partition, hasher)| (partition, hasher.digest()))
        .collect())
}

/// The fingerprints written, from `destination`'s object: those of partitions
/// still there. None when the object is missing, not of this version, or cannot
/// be read (which is logged): every complete day is written then.
fn read_fingerprints(destination: &Objects) -> BTreeMap<Partition, u64> {
    let text = match destination.get(FINGERPRINTS) {
        Ok(bytes) => String::from_utf8(bytes).unwrap_or_default(),
        Err(error) if error.is_not_found() => return BTreeMap::new(),
        Err(error) => {
            tracing::warn!("{error}; every complete day is exported again");
            return BTreeMap::new();
        }
    };
    let mut lines = text.lines();
    if lines.next() != Some(FINGERPRINTS_HEADER) {
        return BTreeMap::new();
    }
    let mut remembered = BTreeMap::new();
    for line in lines {
        let mut fields = line.split(' ');
        let (Some(kind), Some(day), Some(fingerprint), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return BTreeMap::new();
        };
        let Some((_, name)) = KINDS.into_iter().find(|(_, name)| *name == kind) else {
            return BTreeMap::new();
        };
        let (Some(day), Ok(fingerprint)) = (parse_day(day), u64::from_str_radix(fingerprint, 16))
        else {
            return BTreeMap::new();
        };
        remembered.insert((name, day), fingerprint);
    }
    let mut present: BTreeSet<Partition> = BTreeSet::new();
    for (_, name) in KINDS {
        match destination.list(name) {
            Ok(listed) => present.extend(
                (listed.iter()).filter_map(|listed| Some((name, partition_day(&listed.name)?))),
            ),
            Err(error) => {
                tracing::warn!("{error}; every complete day is exported again");
                return BTreeMap::new();
            }
        }
    }
    remembered.retain(|partition, _| present.contains(partition));
    remembered
}

/// Replaces `destination`'s fingerprints' object with `written`, whole.
fn write_fingerprints(
    destination: &Objects,
    written: &BTreeMap<Partition, u64>,
) -> Result<(), ExportError> {
    let mut text = format!("{FINGERPRINTS_HEADER}\n");
    for ((kind, day), fingerprint) in written {
        text.push_str(&format!("{kind} {} {fingerprint:016x}\n", day_text(*day)));
    }
    destination.put(FINGERPRINTS, text.into_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_read_back_for_the_partitions_still_there() {
        let directory = tempfile::tempdir().unwrap();
        let destination = Objects::open(
            stq_objects::Location::Directory(directory.path().to_owned()),
            &stq_objects::S3Settings::default(),
        )
        .unwrap();
        let written: BTreeMap<Partition, u64> = [
            (("units", 20_781), 0x0123_4567_89ab_cdef),
            (("metrics", 20_781), 7),
            (("units", 20_780), u64::MAX),
        ]
        .into();
        write_fingerprints(&destination, &written).unwrap();
        for day in ["2026-11-24", "2026-11-23"] {
            let part = format!("units/day={day}/part-0.parquet");
            destination.put(&part, b"PAR1".to_vec()).unwrap();
        }
        let mut present = written.clone();
        // Its partition is gone: written again.
        present.remove(&("metrics", 20_781));
        assert_eq!(read_fingerprints(&destination), present);
        destination
            .put(FINGERPRINTS, b"stq export fingerprints 0\n".to_vec())
            .unwrap();
        assert!(read_fingerprints(&destination).is_empty());
    }
}
