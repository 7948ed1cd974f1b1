//! A generation through the store and back, what the writer keeps, and what a
//! damaged store does. The property test of starts from the store among reloads
//! is with the reload's (`load/reload/tests.rs`), whose machinery it shares.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use super::manifest::digest_in_name;
use super::*;
use crate::data::catalog::Generation;
use crate::data::load::{load, load_from_store, reload, LoadError, LoadOptions, Look, OnInvalid};
use crate::data::scan::ShardStation;
use crate::data::sealed::cache::{test_cache, BlockCache};
use crate::data::tier::Tier as _;
use crate::data::StorageFault;

/// A unit line and a metric line of `station` at `minute` past 2026-11-24T00:00Z.
fn lines(station: u32, minute: u32) -> (String, String) {
    let time = format!(
        "2026-11-24T{:02}:{:02}:{:02}.{:03}Z",
        minute / 60 % 24,
        minute % 60,
        station % 60,
        minute % 1000
    );
    let unit = format!(
        r#"{{"station_id":"ST-{station}","time_created":"{time}","direction":"{}","unit_serial":"SN-{}","unit_type":"board","slot":"s{}","result":"{}"}}"#,
        if minute.is_multiple_of(2) {
            "input"
        } else {
            "output"
        },
        minute / 2,
        minute % 3,
        if minute.is_multiple_of(7) {
            "fail"
        } else {
            "pass"
        }
    );
    let metric = format!(
        r#"{{"station_id":"ST-{station}","time_created":"{time}","unit_serial":"SN-{}","name":"m{}","value":{}.25,"unit":"V","limit_upper":9}}"#,
        minute / 2,
        minute % 5,
        minute % 11
    );
    (unit, metric)
}

/// Writes `stations` stations' files with `minutes` minutes of records each.
fn write_snapshot(directory: &Path, stations: u32, minutes: u32) {
    for station in 0..stations {
        let (units, metrics): (Vec<String>, Vec<String>) =
            (0..minutes).map(|minute| lines(station, minute)).unzip();
        let path = |kind: &str| directory.join(format!("st{station}.{kind}.jsonl"));
        fs::write(path("units"), units.join("\n") + "\n").unwrap();
        fs::write(path("metrics"), metrics.join("\n") + "\n").unwrap();
    }
}

fn options(directory: &Path, generation: u64) -> LoadOptions {
    LoadOptions {
        directory: directory.to_path_buf(),
        shards: 2,
        on_invalid: OnInvalid::Skip,
        generation,
        threads: 2,
        hot: Some(Duration::from_secs(3600)),
        cache: test_cache(),
    }
}

fn settings(directory: &Path) -> StoreSettings {
    StoreSettings {
        snapshots: directory.to_path_buf(),
        shards: 2,
        hot: Some(Duration::from_secs(3600)),
    }
}

fn parts(generation: Generation) -> (Arc<Catalog>, Vec<Arc<ShardData>>) {
    let (catalog, shards) = (generation.catalog, generation.shards);
    (catalog, shards.into_iter().map(Arc::new).collect())
}

/// Every station's records of both kinds as JSON, in key order, and the counts.
fn everything(catalog: &Catalog, shards: &[Arc<ShardData>]) -> Vec<String> {
    let mut all = Vec::new();
    for (name, placement) in catalog.stations.iter().zip(&catalog.placements) {
        let station = &shards[placement.shard as usize].stations[placement.station_index as usize];
        let json = |bytes| {
            let mut json = Vec::new();
            station.write_json(bytes, &mut json).unwrap();
            String::from_utf8(json).unwrap()
        };
        let fault = crate::data::fault::FirstFault::default();
        for (key, entry) in station.units_in(.., &fault) {
            let symbols = [entry.unit_serial, entry.unit_type, entry.result]
                .map(|symbol| catalog.symbols.text(symbol).unwrap().to_owned());
            all.push(format!("{name} {key:?} {symbols:?} {}", json(entry.bytes)));
        }
        for (key, entry) in station.metrics_in(.., &fault) {
            let name_text = catalog.symbols.text(entry.name).unwrap();
            let numbers = [entry.value, entry.limit_lower, entry.limit_upper].map(f64::to_bits);
            all.push(format!(
                "{name} {key:?} {name_text} {numbers:?} {}",
                json(entry.bytes)
            ));
        }
        fault.or(()).expect("a generation in memory reads");
        all.push(format!("{name}: {} sealed", station.sealed.unit_count()));
    }
    let summary = &catalog.summary;
    all.push(format!(
        "{} {} {} {}",
        summary.units, summary.metrics, summary.skipped_lines, summary.pending_lines
    ));
    all
}

/// A directory with a snapshot of `stations` x `minutes`, its load, and a store
/// written from it by `writer`.
struct Fixture {
    snapshots: tempfile::TempDir,
    store: tempfile::TempDir,
    catalog: Arc<Catalog>,
    shards: Vec<Arc<ShardData>>,
    writer: StoreWriter,
}

fn fixture(stations: u32, minutes: u32) -> Fixture {
    let snapshots = tempfile::tempdir().unwrap();
    write_snapshot(snapshots.path(), stations, minutes);
    let (catalog, shards) = parts(load(&options(snapshots.path(), 1)).unwrap().0);
    let store = tempfile::tempdir().unwrap();
    let mut writer = StoreWriter::new(
        Store::new(store.path()),
        settings(snapshots.path()),
        Written::default(),
    );
    writer.write(&catalog, &shards, false).unwrap();
    Fixture {
        snapshots,
        store,
        catalog,
        shards,
        writer,
    }
}

impl Fixture {
    fn read(&self) -> Result<Restored, StoreError> {
        (Store::new(self.store.path())).read(&settings(self.snapshots.path()), &test_cache())
    }

    /// What the store's manifest says.
    fn manifest(&self) -> Manifest {
        let bytes = fs::read(self.store.path().join(MANIFEST)).unwrap();
        Manifest::read(checked_manifest(&bytes).unwrap()).unwrap()
    }

    /// Appends `station`'s unit and metric lines of `minutes` to its files.
    fn append(&self, station: u32, minutes: std::ops::Range<u32>) {
        use std::io::Write as _;
        let (units, metrics): (Vec<String>, Vec<String>) =
            minutes.map(|minute| lines(station, minute)).unzip();
        for (kind, lines) in [("units", units), ("metrics", metrics)] {
            let path = (self.snapshots.path()).join(format!("st{station}.{kind}.jsonl"));
            let mut file = fs::OpenOptions::new().append(true).open(path).unwrap();
            file.write_all((lines.join("\n") + "\n").as_bytes())
                .unwrap();
        }
    }

    /// Reloads what changed since the generation it holds, as generation
    /// `generation`, and writes the store; what the write did.
    fn reload_and_write(&mut self, generation: u64) -> WriteReport {
        let options = options(self.snapshots.path(), generation);
        let (next, _) = reload(&self.catalog, &self.shards, &options).unwrap();
        (self.catalog, self.shards) = parts(next);
        self.writer
            .write(&self.catalog, &self.shards, false)
            .unwrap()
    }

    /// A start from the store against a load without one, of the files as they are
    /// now: the records of each, and the files the start read.
    fn restart(&self, generation: u64) -> (Vec<String>, Vec<String>, usize) {
        let options = options(self.snapshots.path(), generation);
        let (generation, report, used) = load_from_store(&options, self.read().unwrap()).unwrap();
        assert!(used);
        let (catalog, shards) = parts(generation);
        let (fresh_catalog, fresh_shards) = parts(load(&options).unwrap().0);
        (
            everything(&catalog, &shards),
            everything(&fresh_catalog, &fresh_shards),
            report.files.len(),
        )
    }

    /// The store's files but the manifest, by name.
    fn files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = fs::read_dir(self.store.path())
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| !path.ends_with(MANIFEST))
            .collect();
        files.sort();
        files
    }
}

#[test]
fn issue_32_a_generation_reads_back_from_the_store_as_it_was() {
    let fixture = fixture(5, 300);
    assert!(fixture.catalog.stations.len() == 5);
    let sealed: u64 = (fixture.shards.iter().flat_map(|shard| &shard.stations))
        .map(|station| station.sealed.unit_count() as u64)
        .sum();
    assert!(sealed > 0, "both tiers are written");
    let restored = fixture.read().unwrap();
    assert_eq!(
        restored.records(),
        fixture.catalog.summary.units + fixture.catalog.summary.metrics
    );
    let (generation, report, used) =
        load_from_store(&options(fixture.snapshots.path(), 1), restored).unwrap();
    assert!(used);
    assert!(
        report.files.is_empty(),
        "no snapshot file is read: {report:?}"
    );
    let (catalog, shards) = parts(generation);
    assert_eq!(
        everything(&catalog, &shards),
        everything(&fixture.catalog, &fixture.shards)
    );
    assert_eq!(catalog.sources.len(), fixture.catalog.sources.len());
}

#[test]
fn issue_32_the_writer_writes_only_what_changed_and_deletes_what_it_no_longer_names() {
    let fixture = fixture(3, 200);
    let store = Store::new(fixture.store.path());
    let before = fixture.files();
    let mut restored = fixture.read().unwrap();
    let written = std::mem::take(&mut restored.written);
    // Another line for one station: only its hot tier (and the symbols) change.
    let (unit, _) = lines(1, 250);
    let path = fixture.snapshots.path().join("st1.units.jsonl");
    let mut text = fs::read_to_string(&path).unwrap();
    text.push_str(&(unit + "\n"));
    fs::write(&path, text).unwrap();
    let (generation, _, _) =
        load_from_store(&options(fixture.snapshots.path(), 1), restored).unwrap();
    let (catalog, shards) = parts(generation);
    let mut writer = StoreWriter::new(store, settings(fixture.snapshots.path()), written);
    let report = writer.write(&catalog, &shards, false).unwrap();
    assert!(
        (1..=3).contains(&report.files_written),
        "a hot tier, perhaps the sealed one and symbols: {report:?}"
    );
    let after = fixture.files();
    let kept = before.iter().filter(|file| after.contains(file)).count();
    assert!(
        kept + report.files_written >= after.len(),
        "{before:?} {after:?}"
    );
    assert_eq!(report.files_deleted, before.len() - kept);
    // Nothing changed: nothing but the manifest is written.
    let report = writer.write(&catalog, &shards, false).unwrap();
    assert_eq!((report.files_written, report.files_deleted), (0, 0));
    assert_eq!(fixture.files(), after);
}

#[test]
fn issue_32_a_damaged_file_is_never_read_and_a_stations_is_read_again_from_the_snapshot() {
    let fixture = fixture(2, 200);
    let files = fixture.files();
    assert!(files.len() >= 3, "{files:?}");
    fixture.read().unwrap();
    let options = options(fixture.snapshots.path(), 1);
    let (catalog, shards) = parts(load(&options).unwrap().0);
    let loaded = everything(&catalog, &shards);
    // A station's file damaged: that station alone is restored empty, and its files
    // are read again, so the start serves what a load serves. Any other file
    // damaged: the whole store is refused.
    let check = |file: &Path, context: &str| {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let a_stations = ["settled-", "recent-", "sealed-"]
            .iter()
            .any(|kind| name.starts_with(kind));
        match fixture.read() {
            Ok(restored) => {
                assert!(a_stations, "{context}: {name} was read");
                // Stations with the same bytes (an empty recent layer) share a file.
                assert!(!restored.repaired.is_empty(), "{context}");
                let error = &restored.repaired[0].1;
                assert!(
                    matches!(error, StoreError::Damaged { .. } | StoreError::Io { .. }),
                    "{context}: {error}"
                );
                let (generation, report, used) = load_from_store(&options, restored).unwrap();
                assert!(used && !report.files.is_empty(), "{context}");
                let (catalog, shards) = parts(generation);
                assert_eq!(everything(&catalog, &shards), loaded, "{context}");
            }
            Err(error) => {
                assert!(!a_stations, "{context}: {error}");
                assert!(
                    matches!(
                        error,
                        StoreError::Damaged { .. } | StoreError::Io { .. } | StoreError::Empty
                    ),
                    "{context}: {error}"
                );
            }
        }
    };
    let restore = |path: &Path, bytes: &[u8]| fs::write(path, bytes).unwrap();
    for file in files.iter().chain([&fixture.store.path().join(MANIFEST)]) {
        let bytes = fs::read(file).unwrap();
        // A flipped byte, anywhere.
        for at in [0, bytes.len() / 2, bytes.len() - 1] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x20;
            restore(file, &flipped);
            check(file, &format!("{file:?} flipped at {at}"));
        }
        // Torn.
        restore(file, &bytes[..bytes.len() / 3]);
        check(file, &format!("{file:?} torn"));
        // Gone.
        fs::remove_file(file).unwrap();
        check(file, &format!("{file:?} gone"));
        if file.ends_with(MANIFEST) {
            assert!(matches!(fixture.read(), Err(StoreError::Empty)));
        }
        restore(file, &bytes);
        assert!(fixture.read().unwrap().repaired.is_empty());
    }
    // Another snapshot directory, another number of shards: not this store.
    let other = Store::new(fixture.store.path()).read(
        &StoreSettings {
            shards: 3,
            ..settings(fixture.snapshots.path())
        },
        &test_cache(),
    );
    assert!(matches!(other, Err(StoreError::Settings(_))));
}

/// What the module's doc cites: how long writing and reading a store takes, and
/// how large it is, for a generated snapshot. Run by hand:
/// `STQ_MEASURE_SNAPSHOTS=DIR cargo test --release -p stq-core
/// issue_32_measure -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, run by hand"]
fn issue_32_measure() {
    let directory = PathBuf::from(std::env::var("STQ_MEASURE_SNAPSHOTS").unwrap());
    let options = LoadOptions {
        threads: 2,
        hot: Some(Duration::from_secs(24 * 3600)),
        ..options(&directory, 1)
    };
    let settings = StoreSettings {
        hot: options.hot,
        ..settings(&directory)
    };
    let started = Instant::now();
    let (catalog, shards) = parts(load(&options).unwrap().0);
    let loaded = started.elapsed();
    let store_directory = tempfile::tempdir_in(std::env::current_dir().unwrap()).unwrap();
    let store = Store::new(store_directory.path());
    let mut writer = StoreWriter::new(store.clone(), settings.clone(), Written::default());
    let report = writer.write(&catalog, &shards, false).unwrap();
    let started = Instant::now();
    let restored = store.read(&settings, &options.cache).unwrap();
    let read = started.elapsed();
    let (_, _, used) = load_from_store(&options, restored).unwrap();
    let warm = started.elapsed();
    assert!(used);
    println!(
        "load {loaded:?}; store write {:?} ({} files, {} bytes); read {read:?}; warm start \
         {warm:?}",
        report.elapsed, report.files_written, report.bytes_written
    );
}

/// The files a manifest names for `station`: settled, recent, sealed.
fn station_files(manifest: &Manifest, station: &str) -> [Option<String>; 3] {
    let station = (manifest.stations.iter())
        .find(|named| &*named.name == station)
        .unwrap();
    [
        Some(station.settled.name.clone()),
        station.recent.as_ref().map(|file| file.name.clone()),
        station.sealed.as_ref().map(|(file, _)| file.name.clone()),
    ]
}

#[test]
fn issue_32_an_append_to_a_station_writes_only_its_recent_layer() {
    let mut fixture = fixture(3, 200);
    let before = fixture.manifest();
    // Within the station's last period, and far fewer than it holds: extended.
    fixture.append(1, 200..203);
    let report = fixture.reload_and_write(2);
    let after = fixture.manifest();
    let [settled, recent, sealed] = station_files(&after, "ST-1");
    let [settled_before, recent_before, sealed_before] = station_files(&before, "ST-1");
    assert_eq!((&settled, &sealed), (&settled_before, &sealed_before));
    assert_ne!(recent, recent_before);
    assert!(
        recent.as_ref().unwrap().starts_with("recent-"),
        "{recent:?}"
    );
    for other in ["ST-0", "ST-2"] {
        assert_eq!(station_files(&after, other), station_files(&before, other));
    }
    // The new serials need a symbol run; nothing else is written.
    let new_runs = (after.symbols.iter())
        .filter(|run| !before.symbols.contains(run))
        .count();
    assert_eq!(new_runs, 1);
    assert_eq!(report.files_written, 1 + new_runs, "{report:?}");
    // The layer it replaces is deleted (unless another station's is the same file,
    // as empty recent layers of equal offsets are).
    let named: HashSet<String> = (after.symbols.iter().map(|(_, file)| file))
        .chain(after.stations.iter().flat_map(ManifestStation::files))
        .map(|file| file.name.clone())
        .collect();
    let held: HashSet<String> = (fixture.files().iter())
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(held, named);
    let recent_size = after.stations[1].recent.as_ref().unwrap().length;
    assert!(
        report.bytes_written < after.stations[1].settled.length + recent_size,
        "less than the whole hot tier: {report:?}"
    );
}

#[test]
fn issue_32_a_restart_from_the_store_after_appends_serves_what_a_load_serves() {
    let mut fixture = fixture(3, 200);
    // Appends to one station, then to two, then so many to one that it is built
    // again (its settled layer written anew, and what left the hot window sealed).
    fixture.append(1, 200..203);
    fixture.reload_and_write(2);
    fixture.append(0, 200..202);
    fixture.append(2, 200..204);
    fixture.reload_and_write(3);
    let settled_before = station_files(&fixture.manifest(), "ST-0")[0].clone();
    fixture.append(0, 202..700);
    fixture.reload_and_write(4);
    assert_ne!(
        station_files(&fixture.manifest(), "ST-0")[0],
        settled_before,
        "built again"
    );
    fixture.append(1, 203..205);
    fixture.reload_and_write(5);
    let (restarted, loaded, files_read) = fixture.restart(6);
    assert_eq!(restarted, loaded);
    assert_eq!(files_read, 0, "the store holds it all");
    // Appends the store has not had yet (a write waiting its turn, or a crash)
    // are read from the files at the start.
    fixture.append(2, 204..210);
    let (restarted, loaded, files_read) = fixture.restart(7);
    assert_eq!(restarted, loaded);
    assert!(files_read > 0);
}

#[test]
fn issue_32_a_damaged_or_mismatched_layer_file_has_its_station_read_again() {
    let mut fixture = fixture(3, 200);
    fixture.append(1, 200..203);
    fixture.append(0, 200..700);
    fixture.reload_and_write(2);
    // ST-0, built again, has an empty recent layer (named by no file) until it is
    // appended to.
    assert_eq!(station_files(&fixture.manifest(), "ST-0")[1], None);
    fixture.append(0, 700..703);
    fixture.reload_and_write(3);
    let manifest = fixture.manifest();
    let [_, recent, _] = station_files(&manifest, "ST-1");
    let path = fixture.store.path().join(recent.unwrap());
    let bytes = fs::read(&path).unwrap();
    let mut flipped = bytes.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    fs::write(&path, &flipped).unwrap();
    let repaired = |restored: Restored| -> Vec<String> {
        let mut names: Vec<String> = (restored.repaired.iter())
            .map(|(name, error)| {
                assert!(matches!(error, StoreError::Damaged { .. }), "{error}");
                name.clone()
            })
            .collect();
        names.sort();
        names
    };
    assert_eq!(repaired(fixture.read().unwrap()), ["ST-1"]);
    fs::write(&path, &bytes).unwrap();
    assert!(repaired(fixture.read().unwrap()).is_empty());
    // Whole files, each matching its name, but of two stations (ST-0 and ST-1, of
    // settled layers of other lengths): their layers do not fit together.
    let mut swapped = fixture.manifest();
    let recent = swapped.stations[0].recent.clone();
    swapped.stations[0].recent = swapped.stations[1].recent.clone();
    swapped.stations[1].recent = recent;
    let mut bytes = Vec::new();
    swapped.write(&mut bytes);
    fs::write(fixture.store.path().join(MANIFEST), bytes).unwrap();
    let restored = fixture.read().unwrap();
    for (_, error) in &restored.repaired {
        assert!(error.to_string().contains("layers"), "{error}");
    }
    assert_eq!(repaired(restored), ["ST-0", "ST-1"]);
}

/// The bytes of sealed blocks a generation holds in memory (compressed, with
/// their digests).
fn resident_block_bytes(shards: &[Arc<ShardData>]) -> u64 {
    resident_bytes(shards, |part| {
        part.starts_with("sealed blocks") || part.ends_with("digests") || part == SHARED
    })
}

/// The memory part of the sealed tiers' shared pieces.
const SHARED: &str = "sealed shared pieces";

fn resident_bytes(shards: &[Arc<ShardData>], counted: impl Fn(&str) -> bool) -> u64 {
    let mut bytes = 0;
    for station in shards.iter().flat_map(|shard| &shard.stations) {
        station.memory(&mut |part, size| {
            if counted(part) {
                bytes += size;
            }
        });
    }
    bytes
}

/// Issue 32: once the store holds a station's sealed tier, its blocks, the
/// pieces they share and its outputs' serials are read from there and leave memory, in the generation that
/// was written and in a start from the store; each read from a file is counted,
/// and the records read are those the load made.
#[test]
fn issue_32_sealed_blocks_leave_memory_once_stored_and_are_read_from_their_files() {
    let snapshots = tempfile::tempdir().unwrap();
    write_snapshot(snapshots.path(), 4, 300);
    let (catalog, shards) = parts(load(&options(snapshots.path(), 1)).unwrap().0);
    let loaded = everything(&catalog, &shards);
    assert!(resident_block_bytes(&shards) > 0);
    assert!(
        resident_bytes(&shards, |part| part == SHARED) > 0,
        "pieces shared"
    );
    let serial_index =
        |shards: &[Arc<ShardData>]| resident_bytes(shards, |part| part == "sealed serial index");
    let serials_loaded = serial_index(&shards);
    let store = tempfile::tempdir().unwrap();
    let mut writer = StoreWriter::new(
        Store::new(store.path()),
        settings(snapshots.path()),
        Written::default(),
    );
    let report = writer.write(&catalog, &shards, false).unwrap();
    assert_eq!(report.tiers_stored, 4, "{report:?}");
    assert_eq!(resident_block_bytes(&shards), 0);
    // The outputs' serials leave too; those in more than one block stay.
    assert!(serial_index(&shards) < serials_loaded);
    // Nothing decoded kept: every block is read again, from its file.
    let cache = shards[0].sealed.cache().clone();
    cache.set_capacity(0);
    let reads = cache.stats().store_reads;
    assert_eq!(everything(&catalog, &shards), loaded);
    assert!(cache.stats().store_reads > reads);
    // A second write keeps the files: nothing changed.
    assert_eq!(
        writer.write(&catalog, &shards, false).unwrap().tiers_stored,
        0
    );
    let restored = Store::new(store.path())
        .read(&settings(snapshots.path()), &test_cache())
        .unwrap();
    let (generation, _, used) = load_from_store(&options(snapshots.path(), 1), restored).unwrap();
    assert!(used);
    let (catalog, shards) = parts(generation);
    assert_eq!(resident_block_bytes(&shards), 0);
    assert_eq!(everything(&catalog, &shards), loaded);
}

/// Issue 32: records that come late into hours whose blocks are read from the
/// store seal those blocks again (read from their file), the writer writes the
/// station's tier anew and points it at the new file, and a start from the store
/// then serves what a load serves.
#[test]
fn issue_32_late_records_into_stored_blocks_seal_them_again() {
    let mut fixture = fixture(3, 300);
    assert_eq!(resident_block_bytes(&fixture.shards), 0);
    let sealed_before = station_files(&fixture.manifest(), "ST-1")[2].clone();
    // Minutes 10 to 14 again, hours before the hot window: late records; then so
    // many more that the station is built again and seals what left the window.
    fixture.append(1, 10..15);
    fixture.append(1, 300..800);
    let report = fixture.reload_and_write(2);
    assert_eq!(report.tiers_stored, 1, "{report:?}");
    assert_ne!(station_files(&fixture.manifest(), "ST-1")[2], sealed_before);
    assert_eq!(resident_block_bytes(&fixture.shards), 0);
    let (catalog, shards) = parts(load(&options(fixture.snapshots.path(), 2)).unwrap().0);
    assert_eq!(
        everything(&fixture.catalog, &fixture.shards),
        everything(&catalog, &shards)
    );
    let (restarted, loaded, files_read) = fixture.restart(3);
    assert_eq!(restarted, loaded);
    assert_eq!(files_read, 0);
}

/// Issue 32: once the store has written the symbol table, the next reload's table
/// reads those strings from the store's files (its heap holds only what was added
/// since), numbers every string as before, and answers as a load does; a start
/// maps them too.
#[test]
fn issue_32_after_a_write_the_next_tables_strings_are_read_from_the_store() {
    let mut fixture = fixture(3, 200);
    let first = Arc::clone(&fixture.catalog);
    assert_eq!(
        first.symbols.mapped_bytes(),
        0,
        "a load's table is in the heap"
    );
    fixture.append(1, 200..240);
    fixture.reload_and_write(2);
    let symbols = &fixture.catalog.symbols;
    assert!(symbols.mapped_bytes() > 0);
    assert!(
        symbols.len() > first.symbols.len(),
        "new serials were added"
    );
    assert!(
        symbols.heap_bytes() < first.symbols.heap_bytes() / 2,
        "heap {} against {}",
        symbols.heap_bytes(),
        first.symbols.heap_bytes()
    );
    for symbol in (0..first.symbols.len()).map(|symbol| Symbol(symbol as u32)) {
        let text = first.symbols.text(symbol).unwrap();
        assert_eq!(symbols.text(symbol).unwrap(), text);
        assert_eq!(symbols.lookup(text).unwrap(), Some(symbol));
    }
    // A reload adding nothing keeps the table as it is; one after the next write
    // reads the strings the second write added from its run.
    fixture.reload_and_write(3);
    fixture.append(2, 200..210);
    fixture.reload_and_write(4);
    let options = options(fixture.snapshots.path(), 4);
    let (loaded, loaded_shards) = parts(load(&options).unwrap().0);
    assert_eq!(
        everything(&fixture.catalog, &fixture.shards),
        everything(&loaded, &loaded_shards)
    );
    let (restarted, loaded, _) = fixture.restart(5);
    assert_eq!(restarted, loaded);
    assert!(fixture.read().unwrap().symbols.heap_bytes() < first.symbols.heap_bytes() / 2);
}

/// Issue 51 (found by the chaos soak): a whole reload (after a cut store file) makes
/// a fresh table, numbered from the files as a first load numbers them. The writer
/// kept the runs it had written of the table before whenever the fresh one was no
/// shorter, so the manifest named another numbering's strings, and the next reload's
/// table read them: summaries named metrics by serial numbers.
#[test]
fn issue_51_a_whole_reloads_table_is_written_whole_whatever_its_length() {
    // A table long beside what the reload adds: the writer would keep its run.
    let mut fixture = fixture(3, 2000);
    // New serials on the first station: a fresh load numbers them before the other
    // stations' strings, the table before numbered them after.
    fixture.append(0, 2000..2008);
    let (catalog, shards) = parts(load(&options(fixture.snapshots.path(), 2)).unwrap().0);
    assert!(catalog.symbols.len() > fixture.catalog.symbols.len());
    let differs = (1..fixture.catalog.symbols.len())
        .map(|symbol| Symbol(symbol as u32))
        .any(|symbol| {
            catalog.symbols.text(symbol).unwrap() != fixture.catalog.symbols.text(symbol).unwrap()
        });
    assert!(differs, "the fresh table numbers its strings otherwise");
    (fixture.catalog, fixture.shards) = (catalog, shards);
    fixture
        .writer
        .write(&fixture.catalog, &fixture.shards, false)
        .unwrap();
    let (restarted, loaded, _) = fixture.restart(3);
    assert_eq!(restarted, loaded, "the store holds the fresh table");
    // The next reload's table reads the strings the write stored.
    fixture.append(1, 2008..2010);
    fixture.reload_and_write(4);
    let (loaded, loaded_shards) = parts(load(&options(fixture.snapshots.path(), 4)).unwrap().0);
    // Which records a reload seals differs from a load's; their strings do not.
    let records = |catalog: &Catalog, shards: &[Arc<ShardData>]| {
        let mut all = everything(catalog, shards);
        all.retain(|line| !line.ends_with(" sealed"));
        all
    };
    assert_eq!(
        records(&fixture.catalog, &fixture.shards),
        records(&loaded, &loaded_shards)
    );
    // And a start reads what that write wrote.
    let (restarted, _, _) = fixture.restart(5);
    assert_eq!(restarted, everything(&fixture.catalog, &fixture.shards));
}

/// Issue 51: store files cut under a generation started from them are faults its
/// reads return as values, not panics: a scan of a station's history, a summary
/// that reads sealed records, a lookup in the symbol run, and a reload that seals
/// into the cut tiers each give the file's `StorageFault`.
#[test]
fn issue_51_store_files_cut_under_a_generation_are_faults_its_reads_return() {
    let fixture = fixture(3, 600);
    let (generation, _, used) = load_from_store(
        &options(fixture.snapshots.path(), 2),
        fixture.read().unwrap(),
    )
    .unwrap();
    assert!(used);
    let (catalog, shards) = parts(generation);
    for file in fixture.files() {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("sealed-") || name.starts_with("symbols-") {
            fs::OpenOptions::new()
                .write(true)
                .open(&file)
                .unwrap()
                .set_len(0)
                .unwrap();
        }
    }
    let cut = |fault: StorageFault| {
        assert!(fault.reason.contains("cut short"), "{fault}");
        fault
            .path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    };
    let stations: Vec<ShardStation> = (catalog.placements.iter().enumerate())
        .filter(|(_, placement)| placement.shard == 0)
        .map(|(rank, placement)| ShardStation {
            rank: rank as u32,
            station_index: placement.station_index,
        })
        .collect();
    let every = crate::domain::time::Window::ALL;
    let scan = shards[0].scan(&crate::data::scan::ScanRequest {
        stations: stations.clone(),
        window: every,
        after: None,
        filter: crate::data::scan::RecordFilter::Units {
            unit_types: crate::data::scan::Matcher::Any,
            unit_serial: crate::data::scan::Matcher::Any,
            results: crate::data::scan::Matcher::Any,
            directions: crate::domain::record::Directions::BOTH,
        },
        cap: usize::MAX,
        pick: Default::default(),
    });
    assert!(cut(scan.unwrap_err()).starts_with("sealed-"));
    let request = crate::data::summary::SummaryRequest {
        stations,
        question: crate::data::summary::Question::Stations,
    };
    let summary = shards[0].summarize(&request, &catalog.symbols);
    assert!(cut(summary.unwrap_err()).starts_with("sealed-"));
    let texts =
        (1..catalog.symbols.len()).map(|symbol| catalog.symbols.text(Symbol(symbol as u32)));
    let fault = texts
        .filter_map(Result::err)
        .next()
        .expect("a string of the cut run");
    assert!(cut(fault).starts_with("symbols-"));
    fixture.append(0, 600..602);
    let looked = Look::Everything;
    let reloaded = options(fixture.snapshots.path(), 3).reload_once(
        &catalog,
        &shards,
        &looked,
        &BTreeSet::new(),
    );
    match reloaded {
        Err(LoadError::Storage(fault)) => drop(cut(fault)),
        other => panic!(
            "a reload over cut files: {:?}",
            other.map(|(_, report)| report)
        ),
    }
}

/// Issue 32: a floor that adds a serial at every write keeps few symbol runs, and
/// writes its whole table again only as the table grows by a quarter (the small
/// runs merged into a new one as they reach a quarter of the one below), not at
/// every eighth write; a start reads them as they were written.
#[test]
fn issue_32_symbol_runs_stay_few_as_a_floor_adds_serials() {
    let mut fixture = fixture(2, 100);
    let first_run = |fixture: &Fixture| fixture.manifest().symbols[0].1.name.clone();
    let mut whole_rewrites = 0;
    let rounds = 120;
    for round in 0..rounds {
        let before = first_run(&fixture);
        fixture.append(round % 2, 100 + round * 2..102 + round * 2);
        fixture.reload_and_write(u64::from(round) + 2);
        assert!(fixture.manifest().symbols.len() <= SYMBOL_RUNS);
        whole_rewrites += usize::from(first_run(&fixture) != before);
    }
    // The table grew from about 60 strings to about 180: 1.25 to the 5th.
    assert!(
        whole_rewrites <= 6,
        "{whole_rewrites} whole rewrites in {rounds} writes"
    );
    // The start holds what the last write wrote (which records are sealed
    // depends on the reloads that made it, so it is compared with that, not with a
    // load).
    let (restarted, _, files_read) = fixture.restart(50);
    assert_eq!(files_read, 0);
    assert_eq!(restarted, everything(&fixture.catalog, &fixture.shards));
}

/// The store in `directory` rewritten as the format before this one wrote it
/// ([`MAGIC_BEFORE`]): each file under that magic (and so another name), and the
/// symbol table as one run of length-prefixed strings.
fn rewrite_as_the_format_before(directory: &Path, symbols: &Symbols) {
    let bytes = fs::read(directory.join(MANIFEST)).unwrap();
    let mut manifest = Manifest::read(checked_manifest(&bytes).unwrap()).unwrap();
    // Files are named by their bytes: stations with the same layer share a file.
    let mut renamed: HashMap<String, FileRef> = HashMap::new();
    let rename = |renamed: &mut HashMap<String, FileRef>, file: &mut FileRef, bytes: Vec<u8>| {
        let kind = file.name.split('-').next().unwrap().to_owned();
        let name = format!("{kind}-{:032x}.stq", xxh3_128(&bytes));
        fs::write(directory.join(&name), &bytes).unwrap();
        let new = FileRef {
            name,
            length: bytes.len() as u64,
        };
        renamed.insert(file.name.clone(), new.clone());
        *file = new;
    };
    for station in &mut manifest.stations {
        // The formats before name a file for an empty recent layer too.
        if station.recent.is_none() {
            let settled = fs::read(directory.join(&station.settled.name)).unwrap();
            let bytes = layer_file(&Layer::empty_after(&read_layer(&settled).unwrap()));
            let name = format!("recent-{:032x}.stq", xxh3_128(&bytes));
            fs::write(directory.join(&name), &bytes).unwrap();
            station.recent = Some(FileRef {
                name,
                length: bytes.len() as u64,
            });
        }
        let files = [Some(&mut station.settled), station.recent.as_mut()]
            .into_iter()
            .chain([station.sealed.as_mut().map(|(file, index)| {
                // The formats before name no index region.
                *index = None;
                file
            })]);
        for file in files.flatten() {
            if let Some(new) = renamed.get(&file.name) {
                *file = new.clone();
                continue;
            }
            let mut bytes = fs::read(directory.join(&file.name)).unwrap();
            bytes[..MAGIC.len()].copy_from_slice(MAGIC_BEFORE);
            rename(&mut renamed, file, bytes);
        }
    }
    let mut run = MAGIC_BEFORE.to_vec();
    codec::number(&mut run, 1);
    codec::number(&mut run, symbols.len() as u64 - 1);
    for symbol in 1..symbols.len() {
        codec::bytes(
            &mut run,
            symbols.text(Symbol(symbol as u32)).unwrap().as_bytes(),
        );
    }
    assert_eq!(manifest.symbols.len(), 1, "a first write's one run");
    let mut first = manifest.symbols[0].1.clone();
    rename(&mut renamed, &mut first, run);
    manifest.symbols = vec![(1, first)];
    for old in renamed.keys() {
        fs::remove_file(directory.join(old)).unwrap();
    }
    manifest.format = Format::Three;
    let mut bytes = Vec::new();
    manifest.write(&mut bytes);
    fs::write(directory.join(MANIFEST), bytes).unwrap();
}

/// Issue 32: a store of the format before this one (whose symbol runs are read
/// into the heap) is still read at a start, so that the upgrade to this format
/// loads no snapshot file again; the first write replaces its symbol runs and
/// keeps its other files, and the start after it maps the new runs.
#[test]
fn issue_32_a_store_of_the_format_before_is_read_and_its_symbols_written_again() {
    let fixture = fixture(3, 200);
    let directory = fixture.store.path();
    rewrite_as_the_format_before(directory, &fixture.catalog.symbols);
    let station_files: Vec<FileRef> = (fixture.manifest().stations.iter())
        .flat_map(|station| station.files().cloned().collect::<Vec<_>>())
        .collect();
    let (restarted, loaded, files_read) = fixture.restart(2);
    assert_eq!(restarted, loaded);
    assert_eq!(files_read, 0, "the store holds it all");
    // The first write: this format's symbol run and manifest, the same station
    // files.
    let mut restored = fixture.read().unwrap();
    assert_eq!(restored.symbols.mapped_bytes(), 0, "read into the heap");
    let written = std::mem::take(&mut restored.written);
    let options = options(fixture.snapshots.path(), 2);
    let (generation, _, used) = load_from_store(&options, restored).unwrap();
    assert!(used);
    let (catalog, shards) = parts(generation);
    let mut writer = StoreWriter::new(
        Store::new(directory),
        settings(fixture.snapshots.path()),
        written,
    );
    let report = writer.write(&catalog, &shards, false).unwrap();
    assert_eq!(report.files_written, 1, "the symbol run: {report:?}");
    let manifest = fixture.manifest();
    assert_eq!(manifest.format, Format::Five);
    let kept: Vec<FileRef> = (manifest.stations.iter())
        .flat_map(|station| station.files().cloned().collect::<Vec<_>>())
        .collect();
    assert_eq!(kept, station_files);
    assert!(fixture.read().unwrap().symbols.mapped_bytes() > 0);
    let (restarted, loaded, files_read) = fixture.restart(3);
    assert_eq!(restarted, loaded);
    assert_eq!(files_read, 0);
}

/// A remote that reads the files of a directory, standing for an `s3://` store's
/// bucket (the service's tests read a real S3 server): how many reads it served.
#[derive(Debug)]
struct DirectoryRemote {
    directory: PathBuf,
    reads: std::sync::atomic::AtomicUsize,
}

impl Remote for DirectoryRemote {
    fn read(&self, name: &str, range: std::ops::Range<u64>) -> io::Result<Vec<u8>> {
        let bytes = fs::read(self.directory.join(name))?;
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(bytes[range.start as usize..range.end as usize].to_vec())
    }
}

impl DirectoryRemote {
    fn reads(&self) -> usize {
        self.reads.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Moves each sealed file of the store in `store` to `bucket` and leaves its index
/// alone in the store, as an `s3://` store's pull does; the files' names.
fn leave_indexes_alone(store: &Path, bucket: &Path) -> Vec<String> {
    let manifest = fs::read(store.join(MANIFEST)).unwrap();
    let mut moved = Vec::new();
    for file in NamedFile::read_manifest(&manifest).unwrap() {
        let Some((offset, length, _)) = file.index else {
            continue;
        };
        let bytes = fs::read(store.join(&file.name)).unwrap();
        let index = &bytes[offset as usize..(offset + u64::from(length)) as usize];
        fs::write(store.join(index_file_name(&file.name)), index).unwrap();
        fs::write(bucket.join(&file.name), &bytes).unwrap();
        fs::remove_file(store.join(&file.name)).unwrap();
        moved.push(file.name);
    }
    moved
}

/// Issue 33: each file a manifest names has the digest its name holds, which is
/// its bytes' XXH3-128 (what a mirror checks a fetched file with); a name that
/// holds none has none, and no bytes hold it.
#[test]
fn issue_33_a_named_file_has_the_digest_of_its_bytes() {
    let fixture = fixture(3, 300);
    let manifest = fs::read(fixture.store.path().join(MANIFEST)).unwrap();
    let files = NamedFile::read_manifest(&manifest).unwrap();
    assert!(files.len() > 3, "{files:?}");
    for file in files {
        let bytes = fs::read(fixture.store.path().join(&file.name)).unwrap();
        assert_eq!(file.digest, Some(xxh3_128(&bytes)), "{}", file.name);
        assert!(holds_its_name(&file.name, &bytes));
    }
    let digest = format!("{:032x}", xxh3_128(b"x"));
    for name in [
        "sealed.stq".to_owned(),
        format!("sealed-{}.stq", &digest[1..]),
        format!("sealed-{}.stq", digest.to_uppercase()),
        format!("sealed-{digest}.stq.index"),
        format!("sealed+{digest}.stq"),
    ] {
        assert_eq!(digest_in_name(&name), None, "{name}");
    }
    assert_eq!(
        digest_in_name(&format!("sealed-{digest}.stq")),
        Some(xxh3_128(b"x"))
    );
}

/// Issue 35: a start from a store whose sealed files are there as their indexes
/// alone reads their blocks from the remote, answers as the load it was written
/// from, and reads from the directory once a file has arrived there whole.
#[test]
fn issue_35_a_start_from_sealed_indexes_alone_reads_blocks_from_the_remote() {
    // No decoded block kept: every read of a block goes to its file.
    let cache = BlockCache::new(0);
    let fixture = fixture(3, 300);
    let bucket = tempfile::tempdir().unwrap();
    let names = leave_indexes_alone(fixture.store.path(), bucket.path());
    assert!(!names.is_empty(), "sealed files to move");
    let remote = Arc::new(DirectoryRemote {
        directory: bucket.path().to_path_buf(),
        reads: Default::default(),
    });
    let restore = |remote: Option<Arc<dyn Remote>>| {
        read(
            fixture.store.path(),
            remote,
            &settings(fixture.snapshots.path()),
            &cache,
        )
    };
    // Without a remote, the stations are read from the snapshot files.
    assert_eq!(restore(None).unwrap().repaired.len(), names.len());
    let restored = restore(Some(Arc::clone(&remote) as Arc<dyn Remote>)).unwrap();
    assert!(restored.repaired.is_empty(), "{:?}", restored.repaired);
    let (generation, report, used) =
        load_from_store(&options(fixture.snapshots.path(), 1), restored).unwrap();
    assert!(used && report.files.is_empty(), "{report:?}");
    assert_eq!(remote.reads(), 0, "a start reads no block");
    let (catalog, shards) = parts(generation);
    let expected = everything(&fixture.catalog, &fixture.shards);
    assert_eq!(everything(&catalog, &shards), expected);
    let remote_reads = remote.reads();
    assert!(remote_reads > 0, "blocks read from the remote");

    for name in &names {
        fs::copy(bucket.path().join(name), fixture.store.path().join(name)).unwrap();
    }
    assert_eq!(everything(&catalog, &shards), expected);
    assert_eq!(remote.reads(), remote_reads, "read from the directory now");
    // The indexes alone are not needed any more: the next write deletes them.
    let mut writer = StoreWriter::new(
        Store::new(fixture.store.path()),
        settings(fixture.snapshots.path()),
        Written::default(),
    );
    writer.write(&catalog, &shards, false).unwrap();
    for name in &names {
        assert!(!fixture.store.path().join(index_file_name(name)).exists());
    }
}

/// Issue 35: an index fetched alone that fails the manifest's checksum is not
/// used: its station is read from the snapshot files.
#[test]
fn issue_35_a_damaged_index_alone_is_not_used() {
    let fixture = fixture(3, 300);
    let bucket = tempfile::tempdir().unwrap();
    let names = leave_indexes_alone(fixture.store.path(), bucket.path());
    let index = fixture.store.path().join(index_file_name(&names[0]));
    let mut bytes = fs::read(&index).unwrap();
    bytes[3] ^= 1;
    fs::write(&index, bytes).unwrap();
    let remote: Arc<dyn Remote> = Arc::new(DirectoryRemote {
        directory: bucket.path().to_path_buf(),
        reads: Default::default(),
    });
    let restored = read(
        fixture.store.path(),
        Some(remote),
        &settings(fixture.snapshots.path()),
        &test_cache(),
    )
    .unwrap();
    assert_eq!(restored.repaired.len(), 1);
    let message = restored.repaired[0].1.to_string();
    assert!(message.contains("checksum"), "{message}");
    let (generation, _, used) =
        load_from_store(&options(fixture.snapshots.path(), 1), restored).unwrap();
    assert!(used);
    let (catalog, shards) = parts(generation);
    assert_eq!(
        everything(&catalog, &shards),
        everything(&fixture.catalog, &fixture.shards)
    );
}

/// Issue 35: a repair reads the named stations again from the snapshot files,
/// dropping what the generation held of them, and serves what a load serves.
#[test]
fn issue_35_a_repair_reads_stations_again_from_the_snapshot_files() {
    let fixture = fixture(3, 300);
    let stations: BTreeSet<String> = [fixture.catalog.stations[1].to_string()].into();
    let options = options(fixture.snapshots.path(), 2);
    let (generation, report) = options
        .reload_once(
            &fixture.catalog,
            &fixture.shards,
            &Look::Paths(BTreeSet::new()),
            &stations,
        )
        .unwrap();
    assert_eq!(report.files.len(), 2, "the station's two files: {report:?}");
    let (catalog, shards) = parts(generation);
    assert_eq!(catalog.generation, 2);
    assert_eq!(
        everything(&catalog, &shards),
        everything(&fixture.catalog, &fixture.shards)
    );
    let station = &fixture.catalog.placements[1];
    assert!(!Arc::ptr_eq(
        &shards[station.shard as usize].stations[station.station_index as usize],
        &fixture.shards[station.shard as usize].stations[station.station_index as usize]
    ));
}

/// Issue 35: on a start from indexes alone, a query's blocks are fetched from the
/// remote at once, ahead of its reads, which then ask the remote for nothing; a
/// second query asks nothing ahead again.
#[test]
fn issue_35_a_query_fetches_its_remote_blocks_ahead_at_once() {
    let cache = BlockCache::new(0);
    let fixture = fixture(3, 300);
    let bucket = tempfile::tempdir().unwrap();
    leave_indexes_alone(fixture.store.path(), bucket.path());
    let remote = Arc::new(DirectoryRemote {
        directory: bucket.path().to_path_buf(),
        reads: Default::default(),
    });
    let restored = read(
        fixture.store.path(),
        Some(Arc::clone(&remote) as Arc<dyn Remote>),
        &settings(fixture.snapshots.path()),
        &cache,
    )
    .unwrap();
    let (generation, _, _) =
        load_from_store(&options(fixture.snapshots.path(), 1), restored).unwrap();
    let (catalog, shards) = parts(generation);
    let window = crate::domain::time::Window {
        from: crate::domain::time::Timestamp {
            seconds: 0,
            nanos: 0,
        },
        to: crate::domain::time::Timestamp {
            seconds: 4_000_000_000,
            nanos: 0,
        },
    };
    let fetch_ahead = || {
        for (shard_index, shard) in shards.iter().enumerate() {
            let stations: Vec<ShardStation> = (catalog.placements.iter().enumerate())
                .filter(|(_, placement)| placement.shard as usize == shard_index)
                .map(|(rank, placement)| ShardStation {
                    rank: rank as u32,
                    station_index: placement.station_index,
                })
                .collect();
            shard.fetch_ahead(&stations, &window);
        }
    };
    fetch_ahead();
    let ahead = remote.reads();
    assert!(ahead > 0, "blocks fetched ahead");
    fetch_ahead();
    assert_eq!(
        remote.reads(),
        ahead,
        "what was asked for is not asked again"
    );
    assert_eq!(
        everything(&catalog, &shards),
        everything(&fixture.catalog, &fixture.shards)
    );
    assert_eq!(
        remote.reads(),
        ahead,
        "every read found its bytes fetched ahead"
    );
}

/// Each station's sealed tier in `shards`, by name, with how many blocks it holds
/// and how many of their headers are in the heap.
fn headers(catalog: &Catalog, shards: &[Arc<ShardData>]) -> Vec<(String, usize, usize)> {
    let mut tiers = Vec::new();
    for (rank, name) in catalog.stations().iter().enumerate() {
        let placement = catalog.placement(rank as u32);
        let station = &shards[placement.shard as usize].stations[placement.station_index as usize];
        let sealed = &station.sealed;
        tiers.push((
            name.to_string(),
            sealed.periods().count(),
            sealed.headers_in_heap(),
        ));
    }
    tiers.sort();
    tiers
}

/// Issue 32: a start from the store reads no block header into the heap (they
/// are rows of the mapped sealed files); a tier sealed into after the store wrote
/// it starts from those rows, so that only the blocks sealed since are headers in
/// the heap, and the write after that makes them rows too.
#[test]
fn issue_32_block_headers_are_rows_of_their_store_file_but_those_sealed_since() {
    let mut fixture = fixture(3, 300);
    let loaded = headers(&fixture.catalog, &fixture.shards);
    assert!(loaded
        .iter()
        .all(|(_, blocks, heap)| blocks == heap && *blocks > 2));
    // ST-1 seals eight more hours: its tier starts from its file's rows.
    fixture.append(1, 300..800);
    fixture.reload_and_write(2);
    let sealed_into = headers(&fixture.catalog, &fixture.shards);
    let (_, blocks, heap) = &sealed_into[1];
    let (_, blocks_before, _) = &loaded[1];
    assert_eq!(sealed_into[1].0, "ST-1");
    assert!(
        *heap > 0 && *heap <= blocks - blocks_before + 1,
        "{sealed_into:?}"
    );
    assert_eq!(sealed_into[0], loaded[0], "untouched");
    fixture.append(1, 800..900);
    fixture.reload_and_write(3);
    let (_, blocks_then, heap) = &headers(&fixture.catalog, &fixture.shards)[1];
    assert!(*heap <= blocks_then - blocks + 1);
    let (restarted, loaded, files_read) = fixture.restart(4);
    assert_eq!(restarted, loaded);
    assert_eq!(files_read, 0);
    let restored = fixture.read().unwrap();
    for (name, _, station) in &restored.stations {
        assert!(station.sealed.headers_in_rows(), "{name}");
        assert_eq!(station.sealed.headers_in_heap(), 0, "{name}");
    }
}

/// Issue 32: a store whose sealed files are of the format before rows (each
/// header in LEB128 numbers) is still read at a start, its headers into the
/// heap, and answers as a load does; the first write replaces those files, and
/// the start after it maps their rows.
#[test]
fn issue_32_sealed_files_of_the_format_before_rows_are_read_and_written_again() {
    let fixture = fixture(3, 300);
    let directory = fixture.store.path();
    let restored = fixture.read().unwrap();
    let mut manifest = fixture.manifest();
    for station in &mut manifest.stations {
        let (_, _, data) = (restored.stations.iter())
            .find(|(name, ..)| *name == station.name)
            .unwrap();
        let (file, index) = station.sealed.as_mut().unwrap();
        let bytes = data.sealed.file_before(MAGIC);
        fs::remove_file(directory.join(&file.name)).unwrap();
        file.name = format!("sealed-{:032x}.stq", xxh3_128(&bytes));
        file.length = bytes.len() as u64;
        *index = Some(index_region(&bytes, MAGIC.len()).unwrap());
        fs::write(directory.join(&file.name), &bytes).unwrap();
    }
    drop(restored);
    let mut bytes = Vec::new();
    manifest.write(&mut bytes);
    fs::write(directory.join(MANIFEST), bytes).unwrap();
    let (restarted, loaded, files_read) = fixture.restart(2);
    assert_eq!(restarted, loaded);
    assert_eq!(files_read, 0, "the store holds it all");
    let mut restored = fixture.read().unwrap();
    for (name, _, station) in &restored.stations {
        assert!(!station.sealed.headers_in_rows(), "{name}");
        assert!(station.sealed.headers_in_heap() > 2, "{name}");
    }
    let written = std::mem::take(&mut restored.written);
    let options = options(fixture.snapshots.path(), 2);
    let (generation, _, used) = load_from_store(&options, restored).unwrap();
    assert!(used);
    let (catalog, shards) = parts(generation);
    let mut writer = StoreWriter::new(
        Store::new(directory),
        settings(fixture.snapshots.path()),
        written,
    );
    let report = writer.write(&catalog, &shards, false).unwrap();
    assert_eq!(report.tiers_stored, 3, "{report:?}");
    for (name, _, station) in &fixture.read().unwrap().stations {
        assert!(station.sealed.headers_in_rows(), "{name}");
    }
    let (restarted, loaded, files_read) = fixture.restart(3);
    assert_eq!(restarted, loaded);
    assert_eq!(files_read, 0);
}
