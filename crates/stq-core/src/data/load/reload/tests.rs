//! The invariant of an incremental reload: after any sequence of changes, each
//! followed by a reload from the generation before, what is served equals what a
//! fresh load of the same files serves.

use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use serde_json::Value;

use super::*;
use crate::data::cursor::RecordIdentity;
use crate::data::key::{Position, RecordKey};
use crate::data::sealed::cache::BlockCache;
use crate::data::stored::StoredRecord;

/// A fresh directory under the system's temporary directory, removed when dropped;
/// with the cache that every generation loaded of it reads through, as a process's
/// generations share one.
struct TempDirectory(PathBuf, BlockCache);

impl TempDirectory {
    fn new(name: &str) -> TempDirectory {
        let path = std::env::temp_dir().join(format!(
            "stq-incremental-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDirectory(path, crate::data::sealed::cache::test_cache())
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.0.join(relative)
    }
}

impl Drop for TempDirectory {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn options(directory: &TempDirectory, on_invalid: OnInvalid, generation: u64) -> LoadOptions {
    LoadOptions {
        directory: directory.0.clone(),
        shards: 2,
        on_invalid,
        generation,
        threads: 2,
        hot: HOT,
        cache: directory.1.clone(),
    }
}

/// The hot window of these tests' loads and reloads: an hour, so that records an
/// hour older than a station's newest are sealed and both tiers are read.
const HOT: Option<Duration> = Some(Duration::from_secs(3600));

/// What a generation serves: every record by identity and JSON in the contract's
/// order, per kind, and the counts `/readyz` reports.
#[derive(Debug, PartialEq)]
struct Served {
    units: Vec<(RecordIdentity, String)>,
    metrics: Vec<(RecordIdentity, String)>,
    counts: (u64, u64, usize, u64, u64),
}

/// What `generation` serves; also checks what must hold within it: cursors'
/// positions, the shard-wide trees, the symbols of the entries.
fn served(generation: &Generation) -> Served {
    let catalog = &generation.catalog;
    let text = |record: &Value, field: &str| record[field].as_str().unwrap_or("").to_owned();
    let mut units = Vec::new();
    let mut metrics = Vec::new();
    for (rank, placement) in catalog.placements.iter().enumerate() {
        let station =
            &generation.shards[placement.shard as usize].stations[placement.station_index as usize];
        let position = |key: &RecordKey| Position {
            instant: key.instant,
            station_rank: rank as u32,
            load_order: key.load_order,
        };
        let record = |bytes: StoredRecord| {
            let mut json = Vec::new();
            station.write_json(bytes, &mut json).unwrap();
            let json = String::from_utf8(json).unwrap();
            let value: Value = serde_json::from_str(&json).unwrap();
            assert_eq!(value["station_id"], *catalog.stations[rank]);
            (json, value)
        };
        let symbol = |text: String| catalog.symbols.lookup(&text).unwrap().unwrap();
        let fault = crate::data::fault::FirstFault::default();
        for (key, entry) in station.units_in(.., &fault) {
            let (json, value) = record(entry.bytes);
            for (field, symbol) in [
                ("unit_serial", entry.unit_serial),
                ("unit_type", entry.unit_type),
                ("slot", entry.slot),
                ("mode", entry.mode),
                ("result", entry.result),
            ] {
                assert_eq!(catalog.symbols.text(symbol).unwrap(), text(&value, field));
            }
            units.push((position(&key), json));
        }
        for (key, entry) in station.metrics_in(.., &fault) {
            let (json, value) = record(entry.bytes);
            assert_eq!(entry.name, symbol(text(&value, "name")));
            assert_eq!(
                catalog.symbols.text(entry.unit).unwrap(),
                text(&value, "unit")
            );
            metrics.push((position(&key), json));
        }
        fault.or(()).expect("a generation in memory reads");
    }
    let mut from_shards: Vec<(Position, String)> = generation
        .shards
        .iter()
        .flat_map(|shard| {
            let everything = (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded);
            shard.units_in(everything).map(|(position, unit)| {
                let station = &shard.stations[unit.station_index as usize];
                let json = String::from_utf8(station.json(unit.entry.bytes).to_vec()).unwrap();
                (*position, json)
            })
        })
        .collect();
    // The shard-wide trees hold the hot units; the sealed ones are read from the
    // stations.
    for (rank, placement) in catalog.placements.iter().enumerate() {
        let station =
            &generation.shards[placement.shard as usize].stations[placement.station_index as usize];
        let everything = (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded);
        let fault = crate::data::fault::FirstFault::default();
        for (key, entry) in crate::data::tier::Tier::units_in(&*station.sealed, everything, &fault)
        {
            let mut json = Vec::new();
            station.write_json(entry.bytes, &mut json).unwrap();
            let position = Position {
                instant: key.instant,
                station_rank: rank as u32,
                load_order: key.load_order,
            };
            from_shards.push((position, String::from_utf8(json).unwrap()));
        }
        fault.or(()).expect("a generation in memory reads");
    }
    from_shards.sort_by_key(|(position, _)| *position);
    units.sort_by_key(|(position, _)| *position);
    metrics.sort_by_key(|(position, _)| *position);
    assert_eq!(from_shards, units, "the shard-wide trees hold every unit");
    let identified = |records: Vec<(Position, String)>| -> Vec<(RecordIdentity, String)> {
        records
            .into_iter()
            .map(|(position, json)| {
                let identity = catalog.identity_of(position);
                assert_eq!(catalog.position_after(&identity), position);
                (identity, json)
            })
            .collect()
    };
    let summary = &catalog.summary;
    Served {
        units: identified(units),
        metrics: identified(metrics),
        counts: (
            summary.units,
            summary.metrics,
            catalog.stations.len(),
            summary.skipped_lines,
            summary.pending_lines,
        ),
    }
}

/// The files the changes pick from: JSON Lines of both kinds sorting before,
/// between and after each other, in a subdirectory too, a gzip file and an OpenHTF
/// record (which lines appended to make invalid, and a replacement makes whole).
const FILES: [&str; 8] = [
    "a.units.jsonl",
    "c/m.metrics.jsonl",
    "g.units.jsonl",
    "k.metrics.jsonl",
    "p.units.jsonl.gz",
    "s.units.jsonl",
    "z.metrics.jsonl",
    "r.openhtf.json",
];

/// A committed OpenHTF fixture's bytes (tests/openhtf/records/).
fn openhtf_fixture(number: usize) -> Vec<u8> {
    let name = ["passing", "failing", "erroring"][number % 3];
    let path = format!(
        "{}/../../tests/openhtf/records/{name}.openhtf.json",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// A record line for `file`: few stations, instants and serials, so that ties
/// between stations and files are common.
fn line(file: &str, station: u8, second: u8, serial: u8) -> String {
    let time = format!("2024-01-01T00:00:0{}Z", second % 4);
    if file.contains(".units.") {
        format!(
            r#"{{"station_id":"ST-{station}","time_created":"{time}","direction":"input","unit_serial":"SN-{serial}","unit_type":"T{}","slot":"S{second}","result":"pass"}}"#,
            serial % 2
        )
    } else {
        format!(
            r#"{{"station_id":"ST-{station}","time_created":"{time}","name":"m{serial}","value":{second}.50,"unit":"V{station}"}}"#
        )
    }
}

#[derive(Clone, Debug)]
enum Change {
    /// Complete lines appended (a gzip file gets them as one more member).
    Append {
        file: usize,
        lines: Vec<(u8, u8, u8)>,
    },
    /// The first `cut` bytes of a line, without a line end.
    AppendPart {
        file: usize,
        record: (u8, u8, u8),
        cut: usize,
    },
    /// The rest of every line cut short, with its line end.
    Finish,
    /// A line that is not a record.
    AppendInvalid {
        file: usize,
    },
    /// New content renamed over the file.
    Replace {
        file: usize,
        lines: Vec<(u8, u8, u8)>,
    },
    /// Cut to a fraction (in 1/8ths) of its length.
    Truncate {
        file: usize,
        eighths: u64,
    },
    Delete {
        file: usize,
    },
}

fn record() -> impl Strategy<Value = (u8, u8, u8)> {
    (0u8..4, 0u8..4, 0u8..3)
}

fn change() -> impl Strategy<Value = Change> {
    let file = 0..FILES.len();
    prop_oneof![
        4 => (file.clone(), prop::collection::vec(record(), 1..4))
            .prop_map(|(file, lines)| Change::Append { file, lines }),
        2 => (file.clone(), record(), 0usize..200)
            .prop_map(|(file, record, cut)| Change::AppendPart { file, record, cut }),
        2 => Just(Change::Finish),
        1 => file.clone().prop_map(|file| Change::AppendInvalid { file }),
        1 => (file.clone(), prop::collection::vec(record(), 0..4))
            .prop_map(|(file, lines)| Change::Replace { file, lines }),
        1 => (file.clone(), 0u64..8).prop_map(|(file, eighths)| Change::Truncate { file, eighths }),
        1 => file.prop_map(|file| Change::Delete { file }),
    ]
}

/// Applies changes to a directory, remembering the lines cut short.
struct Writer {
    directory: TempDirectory,
    /// Per file, the rest of the line cut short there.
    rests: HashMap<usize, String>,
    /// Each write moves the modification time on by a second, so that a change is
    /// never hidden by the file system's clock granularity.
    clock: SystemTime,
}

impl Writer {
    fn append(&mut self, file: usize, text: &str) {
        let path = self.directory.path(FILES[file]);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut handle = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        if FILES[file].ends_with(".gz") {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(text.as_bytes()).unwrap();
            handle.write_all(&encoder.finish().unwrap()).unwrap();
        } else {
            handle.write_all(text.as_bytes()).unwrap();
        }
        self.touch(&handle);
    }

    fn touch(&mut self, handle: &File) {
        self.clock += Duration::from_secs(1);
        handle.set_modified(self.clock).unwrap();
    }

    /// The paths `change` touches, as a watch of the directory reports them.
    fn touched(&self, change: &Change) -> BTreeSet<String> {
        let files: Vec<usize> = match change {
            Change::Append { file, .. }
            | Change::AppendPart { file, .. }
            | Change::AppendInvalid { file }
            | Change::Replace { file, .. }
            | Change::Truncate { file, .. }
            | Change::Delete { file } => vec![*file],
            Change::Finish => self.rests.keys().copied().collect(),
        };
        let mut paths: BTreeSet<String> = files.iter().map(|&file| FILES[file].into()).collect();
        if let Change::Replace { .. } = change {
            paths.insert("staging.tmp".into());
        }
        paths
    }

    fn apply(&mut self, change: &Change) {
        let lines = |file: usize, records: &[(u8, u8, u8)]| -> String {
            records
                .iter()
                .map(|&(station, second, serial)| line(FILES[file], station, second, serial) + "\n")
                .collect()
        };
        match change {
            Change::Append {
                file,
                lines: records,
            } => {
                let text = lines(*file, records);
                self.append(*file, &text);
            }
            Change::AppendPart { file, record, cut } => {
                let whole = line(FILES[*file], record.0, record.1, record.2);
                let cut = (*cut).min(whole.len());
                self.append(*file, &whole[..cut]);
                let rest = self.rests.entry(*file).or_default();
                rest.insert_str(0, &whole[cut..]);
            }
            Change::Finish => {
                let rests: Vec<(usize, String)> = self.rests.drain().collect();
                for (file, rest) in rests {
                    self.append(file, &(rest + "\n"));
                }
            }
            Change::AppendInvalid { file } => self.append(*file, "{\"station_id\": 7}\n"),
            Change::Replace {
                file,
                lines: records,
            } => {
                let text = lines(*file, records);
                let staging = self.directory.path("staging.tmp");
                let bytes = if FILES[*file].ends_with(".openhtf.json") {
                    openhtf_fixture(records.len())
                } else if FILES[*file].ends_with(".gz") {
                    let mut encoder =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                    encoder.write_all(text.as_bytes()).unwrap();
                    encoder.finish().unwrap()
                } else {
                    text.into_bytes()
                };
                std::fs::write(&staging, bytes).unwrap();
                let handle = File::options().write(true).open(&staging).unwrap();
                self.touch(&handle);
                let path = self.directory.path(FILES[*file]);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::rename(&staging, &path).unwrap();
                self.rests.remove(file);
            }
            Change::Truncate { file, eighths } => {
                let path = self.directory.path(FILES[*file]);
                if let Ok(handle) = File::options().write(true).open(&path) {
                    let length = handle.metadata().unwrap().len();
                    handle.set_len(length * eighths / 8).unwrap();
                    self.touch(&handle);
                }
                self.rests.remove(file);
            }
            Change::Delete { file } => {
                let _ = std::fs::remove_file(self.directory.path(FILES[*file]));
                self.rests.remove(file);
            }
        }
    }
}

/// A generation's parts as the engine holds them between reloads.
fn parts(generation: Generation) -> (Arc<Catalog>, Vec<Arc<ShardData>>) {
    let (catalog, shards) = (generation.catalog, generation.shards);
    (catalog, shards.into_iter().map(Arc::new).collect())
}

/// `watched`: each reload looks only at the paths the change touched, as with
/// `--watch`; otherwise at everything, as on SIGHUP.
fn run_changes(name: &str, changes: &[Change], watched: bool) -> Result<(), TestCaseError> {
    let mut writer = Writer {
        directory: TempDirectory::new(name),
        rests: HashMap::new(),
        clock: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    };
    let (generation, _) = full::load(&options(&writer.directory, OnInvalid::Skip, 1)).unwrap();
    let (mut catalog, mut shards) = parts(generation);
    for (step, change) in changes.iter().enumerate() {
        let look = match watched {
            true => Look::Paths(writer.touched(change)),
            false => Look::Everything,
        };
        writer.apply(change);
        let number = step as u64 + 2;
        let skip = options(&writer.directory, OnInvalid::Skip, number);
        let (reloaded, _) = reload_looking(&catalog, &shards, &skip, &look).unwrap();
        let (fresh, _) = full::load(&skip).unwrap();
        let fresh = served(&fresh);
        prop_assert_eq!(&served(&reloaded), &fresh, "after {:?}", change);
        (catalog, shards) = parts(reloaded);
        prop_assert_eq!(catalog.generation(), number);
    }
    Ok(())
}

/// The relative paths of the files `catalog` holds back.
fn held(catalog: &Catalog) -> Vec<&str> {
    catalog
        .sources
        .iter()
        .filter(|source| source.held.is_some())
        .map(|source| &*source.relative)
        .collect()
}

/// Under `fail` (and `hold`, which acts alike at a reload), each reload serves what
/// a fresh load serves of a copy of the directory that keeps each file as it was
/// last read cleanly (absent if it never was): a held file serves what it served,
/// every other file advances.
fn run_changes_holding(
    name: &str,
    changes: &[Change],
    on_invalid: OnInvalid,
) -> Result<(), TestCaseError> {
    let mut writer = Writer {
        directory: TempDirectory::new(name),
        rests: HashMap::new(),
        clock: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    };
    let accepted = TempDirectory::new(&format!("{name}-accepted"));
    let (generation, _) = full::load(&options(&writer.directory, on_invalid, 1)).unwrap();
    let (mut catalog, mut shards) = parts(generation);
    for (step, change) in changes.iter().enumerate() {
        writer.apply(change);
        let number = step as u64 + 2;
        let holding = options(&writer.directory, on_invalid, number);
        let (reloaded, report) = reload(&catalog, &shards, &holding).unwrap();
        let held_now = held(&reloaded.catalog);
        for file in FILES {
            if held_now.contains(&file) {
                continue;
            }
            let (from, to) = (writer.directory.path(file), accepted.path(file));
            if from.exists() {
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                std::fs::copy(&from, &to).unwrap();
            } else {
                let _ = std::fs::remove_file(&to);
            }
        }
        let (fresh, _) = full::load(&options(&accepted, OnInvalid::Fail, number))
            .map_err(|error| TestCaseError::fail(format!("after {change:?}: {error}")))?;
        prop_assert_eq!(
            &served(&reloaded),
            &served(&fresh),
            "after {:?}, holding {:?}",
            change,
            held_now
        );
        prop_assert_eq!(reloaded.catalog.summary.held_files, held_now.len() as u64);
        // Every invalid line read is in a file held back.
        for line in &report.invalid {
            prop_assert!(report.held.contains(&line.path), "{}", line);
        }
        (catalog, shards) = parts(reloaded);
    }
    Ok(())
}

/// Issue 32: a start from the store is a reload from the generation written last.
/// Each step changes the directory, then either reloads or starts again from the
/// store (written after every generation, as the service writes it); whichever it
/// does, it serves what a fresh load of the same files serves.
fn run_changes_restarting(name: &str, changes: &[(Change, bool)]) -> Result<(), TestCaseError> {
    use crate::data::store::{Store, StoreSettings, StoreWriter, Written};
    let mut writer = Writer {
        directory: TempDirectory::new(name),
        rests: HashMap::new(),
        clock: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    };
    let store_directory = TempDirectory::new(&format!("{name}-store"));
    let store = Store::new(&store_directory.0);
    let settings = StoreSettings {
        snapshots: writer.directory.0.clone(),
        shards: 2,
        hot: HOT,
    };
    let (generation, _) = full::load(&options(&writer.directory, OnInvalid::Skip, 1)).unwrap();
    let (mut catalog, mut shards) = parts(generation);
    let mut store_writer = StoreWriter::new(store.clone(), settings.clone(), Written::default());
    store_writer.write(&catalog, &shards, false).unwrap();
    for (step, (change, restart)) in changes.iter().enumerate() {
        writer.apply(change);
        let number = step as u64 + 2;
        let skip = options(&writer.directory, OnInvalid::Skip, number);
        let next = match restart {
            true => {
                let mut restored = store.read(&settings, &skip.cache).unwrap();
                let written = std::mem::take(&mut restored.written);
                let (generation, _, used) = load_from_store(&skip, restored).unwrap();
                prop_assert!(used);
                store_writer = StoreWriter::new(store.clone(), settings.clone(), written);
                generation
            }
            false => reload(&catalog, &shards, &skip).unwrap().0,
        };
        let (fresh, _) = full::load(&skip).unwrap();
        prop_assert_eq!(
            &served(&next),
            &served(&fresh),
            "after {:?}, {}",
            change,
            if *restart { "restarted" } else { "reloaded" }
        );
        (catalog, shards) = parts(next);
        store_writer.write(&catalog, &shards, false).unwrap();
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|cases| cases.parse().ok()).unwrap_or(32)
    ))]

    #[test]
    fn issue_32_a_start_from_the_store_serves_what_a_fresh_load_serves(
        changes in prop::collection::vec((change(), proptest::bool::ANY), 1..12)
    ) {
        run_changes_restarting("restarting", &changes)?;
    }
}

proptest! {
    // A second or two in debug; `PROPTEST_CASES=2000` soaks it.
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|cases| cases.parse().ok()).unwrap_or(48)
    ))]

    #[test]
    fn a_reload_serves_what_a_fresh_load_serves(
        changes in prop::collection::vec(change(), 1..14)
    ) {
        run_changes("property", &changes, false)?;
    }

    /// Issue 21: a reload that looks only where the watch saw changes serves the
    /// same.
    #[test]
    fn issue_21_a_reload_looking_at_the_changed_paths_serves_what_a_fresh_load_serves(
        changes in prop::collection::vec(change(), 1..14)
    ) {
        run_changes("watched", &changes, true)?;
    }

    /// Issue 21: one broken writer freezes nothing else.
    #[test]
    fn issue_21_under_fail_a_reload_holds_back_only_files_with_invalid_lines(
        changes in prop::collection::vec(change(), 1..14)
    ) {
        run_changes_holding("holding", &changes, OnInvalid::Fail)?;
    }

    /// Issue 34: at a reload, `hold` acts as `fail` does.
    #[test]
    fn issue_34_under_hold_a_reload_holds_back_only_files_with_invalid_lines(
        changes in prop::collection::vec(change(), 1..14)
    ) {
        run_changes_holding("holding-hold", &changes, OnInvalid::Hold)?;
    }
}

#[test]
fn unchanged_files_are_not_read_and_grown_ones_from_their_last_line() {
    let directory = TempDirectory::new("reads");
    let mut writer = Writer {
        directory,
        rests: HashMap::new(),
        clock: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    };
    writer.apply(&Change::Append {
        file: 0,
        lines: vec![(0, 0, 0), (1, 1, 1)],
    });
    writer.apply(&Change::Append {
        file: 3,
        lines: vec![(2, 0, 0)],
    });
    writer.apply(&Change::AppendPart {
        file: 3,
        record: (2, 1, 1),
        cut: 10,
    });
    let (generation, report) = full::load(&options(&writer.directory, OnInvalid::Fail, 1)).unwrap();
    assert_eq!(report.pending, 1);
    let (catalog, shards) = parts(generation);

    // Nothing changed: nothing read, everything shared.
    let (same, report) = reload(
        &catalog,
        &shards,
        &options(&writer.directory, OnInvalid::Fail, 2),
    )
    .unwrap();
    assert_eq!((report.files.len(), report.bytes), (0, 0));
    assert_eq!(same.catalog.summary.pending_lines, 1);
    for (before, after) in shards.iter().zip(&same.shards) {
        assert!(Arc::ptr_eq(&before.units, &after.units));
    }

    // The pending line ends: only the metrics file is read, from that line on.
    let size_before = std::fs::metadata(writer.directory.path(FILES[3]))
        .unwrap()
        .len();
    writer.apply(&Change::Finish);
    let (grown, report) = reload(
        &catalog,
        &shards,
        &options(&writer.directory, OnInvalid::Fail, 2),
    )
    .unwrap();
    assert_eq!(report.files.len(), 1);
    assert!(report.files[0].path.ends_with(FILES[3]));
    let full_line = line(FILES[3], 2, 1, 1).len() as u64 + 1;
    assert_eq!(report.bytes, full_line);
    assert!(report.bytes < size_before + full_line);
    assert_eq!(
        (
            grown.catalog.summary.metrics,
            grown.catalog.summary.pending_lines
        ),
        (2, 0)
    );
    // ST-0 and ST-1 only have units of the untouched file: their data is shared.
    let untouched = ["ST-0", "ST-1"];
    for name in untouched {
        let before = catalog.placement(catalog.rank(name).unwrap());
        let after = grown.catalog.placement(grown.catalog.rank(name).unwrap());
        assert!(Arc::ptr_eq(
            &shards[before.shard as usize].stations[before.station_index as usize],
            &grown.shards[after.shard as usize].stations[after.station_index as usize],
        ));
    }
    let fresh = full::load(&options(&writer.directory, OnInvalid::Fail, 2))
        .unwrap()
        .0;
    assert_eq!(served(&grown), served(&fresh));
}

/// Issue 21: a file with an invalid line is held back alone, is not read again
/// while it stays as it was, and is released once it reads cleanly.
#[test]
fn issue_21_a_held_file_serves_what_it_served_until_it_reads_cleanly() {
    let mut writer = Writer {
        directory: TempDirectory::new("held"),
        rests: HashMap::new(),
        clock: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    };
    writer.apply(&Change::Append {
        file: 0,
        lines: vec![(0, 0, 0)],
    });
    writer.apply(&Change::Append {
        file: 2,
        lines: vec![(1, 0, 0)],
    });
    let (generation, _) = full::load(&options(&writer.directory, OnInvalid::Fail, 1)).unwrap();
    let before = served(&generation);
    let (catalog, shards) = parts(generation);

    // File 0 gets an invalid line and a valid one after it; file 2 a valid line;
    // file 3, new, an invalid line between two valid ones.
    writer.apply(&Change::AppendInvalid { file: 0 });
    writer.apply(&Change::Append {
        file: 0,
        lines: vec![(0, 1, 1)],
    });
    writer.apply(&Change::Append {
        file: 2,
        lines: vec![(1, 1, 1)],
    });
    writer.apply(&Change::Append {
        file: 3,
        lines: vec![(2, 0, 0)],
    });
    writer.apply(&Change::AppendInvalid { file: 3 });
    writer.apply(&Change::Append {
        file: 3,
        lines: vec![(2, 1, 1)],
    });
    let (reloaded, report) = reload(
        &catalog,
        &shards,
        &options(&writer.directory, OnInvalid::Fail, 2),
    )
    .unwrap();
    let lines: Vec<(bool, u32)> = report
        .invalid
        .iter()
        .map(|line| (line.path.ends_with(FILES[0]), line.line))
        .collect();
    assert_eq!(lines, [(true, 2), (false, 2)]);
    assert_eq!(report.held.len(), 2);
    assert_eq!(held(&reloaded.catalog), [FILES[0], FILES[3]]);
    let summary = &reloaded.catalog.summary;
    assert_eq!(
        (summary.units, summary.metrics, summary.held_files),
        (3, 0, 2)
    );
    let served_now = served(&reloaded);
    // File 0 serves its one record of before, file 2 both of its own, file 3 none.
    assert_eq!(served_now.units[..1], before.units[..1]);
    let paths: Vec<&str> = served_now
        .units
        .iter()
        .map(|(identity, _)| identity.path.as_str())
        .collect();
    assert_eq!(paths, [FILES[0], FILES[2], FILES[2]]);
    let (catalog, shards) = parts(reloaded);

    // Unchanged since they were held: not read again, still held.
    let (again, report) = reload(
        &catalog,
        &shards,
        &options(&writer.directory, OnInvalid::Fail, 3),
    )
    .unwrap();
    assert_eq!((report.files.len(), report.bytes), (0, 0));
    assert_eq!(again.catalog.summary.held_files, 2);
    assert_eq!(served(&again), served_now);

    // Written right by renaming good ones over them: released, and served whole.
    writer.apply(&Change::Replace {
        file: 0,
        lines: vec![(0, 0, 0), (0, 1, 1)],
    });
    writer.apply(&Change::Replace {
        file: 3,
        lines: vec![(2, 0, 0)],
    });
    let (released, report) = reload(
        &catalog,
        &shards,
        &options(&writer.directory, OnInvalid::Fail, 3),
    )
    .unwrap();
    assert!(report.held.is_empty());
    assert_eq!(released.catalog.summary.held_files, 0);
    let fresh = full::load(&options(&writer.directory, OnInvalid::Fail, 3))
        .unwrap()
        .0;
    assert_eq!(served(&released), served(&fresh));
}

/// Issue 34 (CONTRACT revision 4, sections 2 and 8): a file held at start-up under
/// `hold` serves nothing, is not read again while unchanged, is read again (and
/// still held) when it changes with its invalid line still in it, and is released
/// once it reads cleanly; `/files` says each time what its last read found.
#[test]
fn issue_34_a_file_held_at_start_up_is_released_once_it_reads_cleanly() {
    let mut writer = Writer {
        directory: TempDirectory::new("held-at-start"),
        rests: HashMap::new(),
        clock: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    };
    writer.apply(&Change::Append {
        file: 0,
        lines: vec![(0, 0, 0)],
    });
    writer.apply(&Change::Append {
        file: 2,
        lines: vec![(1, 0, 0)],
    });
    writer.apply(&Change::AppendInvalid { file: 2 });
    writer.apply(&Change::Append {
        file: 2,
        lines: vec![(1, 1, 1)],
    });
    let directory = writer.directory.0.clone();
    let cache = writer.directory.1.clone();
    let hold = |generation| LoadOptions {
        directory: directory.clone(),
        shards: 2,
        on_invalid: OnInvalid::Hold,
        generation,
        threads: 2,
        hot: HOT,
        cache: cache.clone(),
    };
    let status = |catalog: &Catalog, file: &str| {
        let status = (catalog.file_statuses())
            .find(|status| status.path == file)
            .unwrap();
        let errors: Vec<u32> = status.errors.iter().map(|line| line.line).collect();
        (status.held, status.records, errors)
    };
    let (generation, report) = full::load(&hold(1)).unwrap();
    assert_eq!(report.held.len(), 1);
    assert_eq!(held(&generation.catalog), [FILES[2]]);
    let summary = &generation.catalog.summary;
    assert_eq!(
        (summary.units, summary.skipped_lines, summary.held_files),
        (1, 0, 1)
    );
    assert_eq!(status(&generation.catalog, FILES[2]), (true, 0, vec![2]));
    assert_eq!(status(&generation.catalog, FILES[0]), (false, 1, vec![]));
    let started = served(&generation);
    let (catalog, shards) = parts(generation);

    // Unchanged: not read again, still held.
    let (again, report) = reload(&catalog, &shards, &hold(2)).unwrap();
    assert_eq!((report.files.len(), report.bytes), (0, 0));
    assert_eq!(again.catalog.summary.held_files, 1);
    assert_eq!(served(&again), started);
    let (catalog, shards) = parts(again);

    // A line more in each: the held file is read again and still held, with the
    // same invalid line; the other advances.
    writer.apply(&Change::Append {
        file: 2,
        lines: vec![(1, 2, 2)],
    });
    writer.apply(&Change::Append {
        file: 0,
        lines: vec![(0, 1, 1)],
    });
    let (grown, report) = reload(&catalog, &shards, &hold(3)).unwrap();
    assert_eq!(report.held.len(), 1);
    assert_eq!(report.files.len(), 2);
    assert_eq!(status(&grown.catalog, FILES[2]), (true, 0, vec![2]));
    assert_eq!(status(&grown.catalog, FILES[0]), (false, 2, vec![]));
    assert_eq!(grown.catalog.summary.units, 2);
    let (catalog, shards) = parts(grown);

    // Written right: released, and served as a fresh load serves it.
    writer.apply(&Change::Replace {
        file: 2,
        lines: vec![(1, 0, 0), (1, 1, 1)],
    });
    let (released, report) = reload(&catalog, &shards, &hold(4)).unwrap();
    assert!(report.held.is_empty());
    assert_eq!(released.catalog.summary.held_files, 0);
    assert_eq!(status(&released.catalog, FILES[2]), (false, 2, vec![]));
    let fresh = full::load(&options(&writer.directory, OnInvalid::Fail, 4))
        .unwrap()
        .0;
    assert_eq!(served(&released), served(&fresh));
}

#[test]
fn new_files_between_others_keep_the_others_ordinals_until_no_gap_is_left() {
    let mut writer = Writer {
        directory: TempDirectory::new("ordinals"),
        rests: HashMap::new(),
        clock: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    };
    writer.apply(&Change::Append {
        file: 0,
        lines: vec![(0, 0, 0)],
    });
    writer.apply(&Change::Append {
        file: 6,
        lines: vec![(1, 0, 0)],
    });
    let (generation, _) = full::load(&options(&writer.directory, OnInvalid::Fail, 1)).unwrap();
    let (mut catalog, mut shards) = parts(generation);
    let ordinals = |catalog: &Catalog| -> Vec<u32> {
        catalog
            .sources
            .iter()
            .map(|source| source.ordinal)
            .collect()
    };
    let first = ordinals(&catalog);
    // Each new file sorts right after a.units.jsonl: the gap halves each time.
    for step in 0..40u32 {
        let name = format!("a{:02}.units.jsonl", 99 - step);
        let path = writer.directory.path(&name);
        std::fs::write(&path, line(&name, 2, 0, 0) + "\n").unwrap();
        let number = u64::from(step) + 2;
        let options = options(&writer.directory, OnInvalid::Fail, number);
        let (reloaded, _) = reload(&catalog, &shards, &options).unwrap();
        let fresh = full::load(&options).unwrap().0;
        assert_eq!(served(&reloaded), served(&fresh), "step {step}");
        (catalog, shards) = parts(reloaded);
        let ordinals = &ordinals(&catalog);
        assert!(ordinals.windows(2).all(|pair| pair[0] < pair[1]));
        if step == 0 {
            assert_eq!(
                (ordinals[0], ordinals[2]),
                (first[0], first[1]),
                "the old files keep their ordinals"
            );
        }
    }
}

#[test]
fn a_new_file_per_station_and_day_keeps_every_ordinal_for_months() {
    let directory = TempDirectory::new("days");
    let write_day = |day: u32| {
        for station in 0..3u8 {
            let relative = format!("ST-{station}/day-{day:03}.units.jsonl");
            let path = directory.path(&relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, line(&relative, station, (day % 4) as u8, 0) + "\n").unwrap();
        }
    };
    write_day(0);
    let (generation, _) = full::load(&options(&directory, OnInvalid::Fail, 1)).unwrap();
    let (mut catalog, mut shards) = parts(generation);
    let ordinals = |catalog: &Catalog| -> Vec<u32> {
        catalog
            .sources
            .iter()
            .map(|source| source.ordinal)
            .collect()
    };
    let first = ordinals(&catalog);
    for day in 1..120 {
        write_day(day);
        let options = options(&directory, OnInvalid::Fail, u64::from(day) + 1);
        let (reloaded, _) = reload(&catalog, &shards, &options).unwrap();
        (catalog, shards) = parts(reloaded);
        // No full load came between: the first day's files kept their ordinals.
        let kept: Vec<u32> = (catalog.sources.iter())
            .filter(|source| source.relative.ends_with("day-000.units.jsonl"))
            .map(|source| source.ordinal)
            .collect();
        assert_eq!(kept, first, "day {day}");
    }
    let fresh = full::load(&options(&directory, OnInvalid::Fail, 200))
        .unwrap()
        .0;
    assert_eq!(
        served(&parts_to_generation(&catalog, &shards)),
        served(&fresh)
    );
}

/// A generation made of a catalog and shards the engine would hold.
fn parts_to_generation(catalog: &Arc<Catalog>, shards: &[Arc<ShardData>]) -> Generation {
    Generation {
        catalog: Arc::clone(catalog),
        shards: shards
            .iter()
            .map(|shard| ShardData::shared(shard.generation, shard))
            .collect(),
    }
}

/// Issue 21: a station that only grows is extended, not rebuilt: its shard keeps
/// its tree and puts the new units in its recent tree, and the records it had keep
/// their stored form.
#[test]
fn issue_21_appended_lines_extend_their_station_and_the_recent_tree() {
    let mut writer = Writer {
        directory: TempDirectory::new("extend"),
        rests: HashMap::new(),
        clock: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    };
    writer.apply(&Change::Append {
        file: 0,
        lines: vec![(0, 0, 0), (0, 1, 1), (0, 2, 2), (1, 0, 0), (1, 1, 1)],
    });
    let (generation, _) = full::load(&options(&writer.directory, OnInvalid::Fail, 1)).unwrap();
    let (catalog, shards) = parts(generation);
    writer.apply(&Change::Append {
        file: 0,
        lines: vec![(0, 3, 0)],
    });
    let (grown, _) = reload(
        &catalog,
        &shards,
        &options(&writer.directory, OnInvalid::Fail, 2),
    )
    .unwrap();
    let placement = catalog.placement(catalog.rank("ST-0").unwrap());
    let (before, after) = (
        &shards[placement.shard as usize],
        &grown.shards[placement.shard as usize],
    );
    assert!(Arc::ptr_eq(&before.units, &after.units));
    assert_eq!(after.recent.len(), 1);
    let (old, new) = (
        &before.stations[placement.station_index as usize],
        &after.stations[placement.station_index as usize],
    );
    assert!(!Arc::ptr_eq(old, new));
    // The settled layer is shared; the appended unit is the recent layer's.
    assert!(Arc::ptr_eq(&old.hot.settled.trees, &new.hot.settled.trees));
    assert_eq!(
        new.hot.settled.arena.as_ptr(),
        old.hot.settled.arena.as_ptr()
    );
    assert_eq!(
        (
            old.hot.recent.trees.record_count(),
            new.hot.recent.trees.record_count()
        ),
        (0, 1)
    );
    assert!(old.unit_count() > 0);
    let fault = crate::data::fault::FirstFault::default();
    for (key, entry) in old.units_in(.., &fault) {
        let kept = new
            .units_in(key..=key, &fault)
            .next()
            .map(|(_, entry)| entry);
        assert_eq!(kept, Some(entry), "a kept record moved");
    }
    fault.or(()).expect("a generation in memory reads");
    let fresh = full::load(&options(&writer.directory, OnInvalid::Fail, 2))
        .unwrap()
        .0;
    assert_eq!(served(&grown), served(&fresh));
}

/// Issue 21: a watch that names a new directory (whose files it may not have seen
/// created) makes the reload look at everything; one that names only other files
/// leaves a changed file it did not name as it was.
#[test]
fn issue_21_a_changed_directory_makes_a_watched_reload_look_at_everything() {
    let mut writer = Writer {
        directory: TempDirectory::new("directory"),
        rests: HashMap::new(),
        clock: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    };
    writer.apply(&Change::Append {
        file: 0,
        lines: vec![(0, 0, 0)],
    });
    let (generation, _) = full::load(&options(&writer.directory, OnInvalid::Fail, 1)).unwrap();
    let (catalog, shards) = parts(generation);
    // c/m.metrics.jsonl is new, in a new directory; a.units.jsonl grows unnamed.
    writer.apply(&Change::Append {
        file: 1,
        lines: vec![(1, 0, 0)],
    });
    writer.apply(&Change::Append {
        file: 0,
        lines: vec![(0, 1, 1)],
    });
    let only_other = Look::Paths(["z.metrics.jsonl".to_string()].into());
    let (unnamed, report) = reload_looking(
        &catalog,
        &shards,
        &options(&writer.directory, OnInvalid::Fail, 2),
        &only_other,
    )
    .unwrap();
    assert_eq!(report.files.len(), 0);
    assert_eq!(
        served(&unnamed),
        served(&parts_to_generation(&catalog, &shards))
    );
    let directory = Look::Paths(["c".to_string()].into());
    let (everything, _) = reload_looking(
        &catalog,
        &shards,
        &options(&writer.directory, OnInvalid::Fail, 2),
        &directory,
    )
    .unwrap();
    let fresh = full::load(&options(&writer.directory, OnInvalid::Fail, 2))
        .unwrap()
        .0;
    assert_eq!(served(&everything), served(&fresh));
}

/// Issue 21: a station's recent layer is folded into a new settled one once it
/// outgrows its share of the station (in tests, the size of the settled layer), and
/// the station then serves what a fresh load serves.
#[test]
fn issue_21_a_station_folds_its_recent_layer_once_it_outgrows_its_share() {
    let mut writer = Writer {
        directory: TempDirectory::new("fold"),
        rests: HashMap::new(),
        clock: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    };
    writer.apply(&Change::Append {
        file: 0,
        lines: vec![(0, 0, 0), (0, 1, 1), (0, 2, 2)],
    });
    let (generation, _) = full::load(&options(&writer.directory, OnInvalid::Fail, 1)).unwrap();
    let (mut catalog, mut shards) = parts(generation);
    let station = |catalog: &Catalog, shards: &[Arc<ShardData>]| {
        let placement = catalog.placement(catalog.rank("ST-0").unwrap());
        Arc::clone(&shards[placement.shard as usize].stations[placement.station_index as usize])
    };
    let first = station(&catalog, &shards);
    // Three settled records: up to three appended one by one stay recent; a
    // fourth would make the recent layer larger than the settled one.
    let mut layers = Vec::new();
    for number in 2..6 {
        writer.apply(&Change::Append {
            file: 0,
            lines: vec![(0, number as u8, 0)],
        });
        let options = options(&writer.directory, OnInvalid::Fail, number);
        let (next, _) = reload(&catalog, &shards, &options).unwrap();
        let fresh = full::load(&options).unwrap().0;
        assert_eq!(served(&next), served(&fresh), "generation {number}");
        (catalog, shards) = parts(next);
        let now = station(&catalog, &shards);
        layers.push((
            now.hot.settled.trees.record_count(),
            now.hot.recent.trees.record_count(),
            Arc::ptr_eq(&now.hot.settled.trees, &first.hot.settled.trees),
        ));
    }
    assert_eq!(
        layers,
        [(3, 1, true), (3, 2, true), (3, 3, true), (7, 0, false)]
    );
}

/// Issue 21: a reload that finds no room between two files' ordinals numbers every
/// file afresh, and under `fail` still holds back the file with an invalid line
/// alone, serving its previous records: the reload does not fail whole.
#[test]
fn issue_21_a_reload_that_numbers_the_files_afresh_still_holds_back_a_broken_file() {
    let directory = TempDirectory::new("renumbered");
    let accepted = TempDirectory::new("renumbered-accepted");
    let write = |relative: &str, text: &str| {
        for root in [&directory, &accepted] {
            let path = root.path(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    };
    let first = "a.units.jsonl";
    let broken = "z.units.jsonl";
    write(first, &format!("{}\n", line(first, 1, 0, 0)));
    let before = format!("{}\n{}\n", line(broken, 2, 1, 1), line(broken, 2, 2, 2));
    write(broken, &before);
    let (generation, _) = full::load(&options(&directory, OnInvalid::Fail, 1)).unwrap();
    let first_ordinal = generation.catalog.sources[0].ordinal;
    let (mut catalog, mut shards) = parts(generation);

    // The broken writer: held back from here on.
    std::fs::write(directory.path(broken), format!("{before}not a record\n")).unwrap();
    let (held, report) =
        reload(&catalog, &shards, &options(&directory, OnInvalid::Fail, 2)).unwrap();
    assert_eq!(report.held.len(), 1);
    (catalog, shards) = parts(held);

    // Each new file sorts just after the first, taking a sixteenth of the gap left
    // before the one added last, until no ordinal is left between them.
    let mut number = 2;
    while catalog.sources[0].ordinal == first_ordinal {
        number += 1;
        assert!(number < 100, "the ordinals were never spread again");
        let relative = format!("b/{:04}.units.jsonl", 1000 - number);
        write(
            &relative,
            &format!("{}\n", line(&relative, 3, 0, number as u8)),
        );
        let (next, report) = reload(
            &catalog,
            &shards,
            &options(&directory, OnInvalid::Fail, number),
        )
        .unwrap();
        assert_eq!(next.catalog.summary.held_files, 1, "generation {number}");
        assert!(report.held.is_empty() || report.held[0].ends_with(broken));
        (catalog, shards) = parts(next);
    }
    assert!(number > 4, "spread again after {number} reloads only");
    let fresh = full::load(&options(&accepted, OnInvalid::Fail, number))
        .unwrap()
        .0;
    assert_eq!(
        served(&parts_to_generation(&catalog, &shards)),
        served(&fresh)
    );
}

/// Issue 32: a store written while a reload held a file back is not what a start
/// serves (a start reads that file again, skipping or refusing its invalid lines):
/// it is not used.
#[test]
fn issue_32_a_store_with_a_held_file_is_not_used_at_a_start() {
    use crate::data::store::{Store, StoreSettings, StoreWriter, Written};
    let mut writer = Writer {
        directory: TempDirectory::new("store-held"),
        rests: HashMap::new(),
        clock: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    };
    writer.apply(&Change::Append {
        file: 0,
        lines: vec![(0, 0, 0), (1, 1, 1)],
    });
    let (generation, _) = full::load(&options(&writer.directory, OnInvalid::Fail, 1)).unwrap();
    let (catalog, shards) = parts(generation);
    writer.apply(&Change::AppendInvalid { file: 0 });
    writer.apply(&Change::Append {
        file: 0,
        lines: vec![(2, 2, 2)],
    });
    let fail = options(&writer.directory, OnInvalid::Fail, 2);
    let (reloaded, _) = reload(&catalog, &shards, &fail).unwrap();
    assert_eq!(held(&reloaded.catalog), vec![FILES[0]]);
    let (catalog, shards) = parts(reloaded);
    let store_directory = TempDirectory::new("store-held-store");
    let store = Store::new(&store_directory.0);
    let settings = StoreSettings {
        snapshots: writer.directory.0.clone(),
        shards: 2,
        hot: HOT,
    };
    StoreWriter::new(store.clone(), settings.clone(), Written::default())
        .write(&catalog, &shards, false)
        .unwrap();
    let skip = options(&writer.directory, OnInvalid::Skip, 1);
    let (generation, _, used) =
        load_from_store(&skip, store.read(&settings, &skip.cache).unwrap()).unwrap();
    assert!(!used);
    assert_eq!(served(&generation), served(&full::load(&skip).unwrap().0));
}
