//! docs/api.md section 12 (issue 32): the store. A server with `--store`, started
//! on an empty store (cold) and again on the one it wrote (warm), answers every
//! request exactly as a server without a store on the same files: bodies, ETags,
//! cursors (pages walked); after lines are appended and a file replaced between
//! starts too. A damaged store is not used (a station's damaged file: that station's
//! snapshot files are read again); one that cannot be written leaves the
//! server serving from memory with `/readyz` `store` `degraded`; a `kill -9` while
//! the store is written leaves one the next start uses or repairs.

use std::path::{Path, PathBuf};

use rand::Rng as _;
use serde_json::Value;

use crate::common::*;

/// The flags of every server here: one cursor key (so that two servers' cursors
/// are the same bytes) and an hour's hot window (so that both tiers hold records).
fn flags(directory: &Path) -> Vec<String> {
    let key = directory.join("cursor.key");
    if !key.exists() {
        std::fs::write(&key, [7u8; 32]).unwrap();
    }
    ["--cursor-key-file", &path_string(&key), "--hot", "1h"]
        .map(str::to_owned)
        .to_vec()
}

/// A server on `fixture` with `store`, or without any (also under
/// `STQ_TEST_STORE`).
fn start(fixture: &Fixture, store: Option<&Path>) -> Server {
    let mut extra = flags(fixture.directory.path());
    if let Some(store) = store {
        extra.extend(["--store".to_owned(), path_string(store)]);
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let args = serve_args(&fixture.snapshots, &fixture.tokens, &extra);
    Server::spawn(&args, &[("STQ_TEST_NO_STORE", "1")])
}

/// The requests compared: records in the fixture's window and the default one,
/// pages of them walked, summaries, stations.
fn queries() -> Vec<String> {
    [
        units_all(),
        metrics_all(),
        "/units?direction=input,output".into(),
        "/metrics".into(),
        format!("{}&limit=3", units_all()),
        format!("{}&limit=2", metrics_all()),
        format!("/units?{WINDOW}&serial_number=SN-001&direction=input,output"),
        format!("/metrics?{WINDOW}&names=voltage&limit=2"),
        // Symbols looked up: in the table a start from the store maps (issue 32).
        format!("/metrics?{WINDOW}&serial_number=SN-001"),
        format!("/units?{WINDOW}&result=FAIL&direction=input,output"),
        format!("/units?{WINDOW}&result=Aborted-By-The-Operator"),
        format!("/units/summary?{WINDOW}&group_by=station_id"),
        format!("/units/summary?{WINDOW}&bucket=1h"),
        format!("/metrics/summary?{WINDOW}"),
        format!("/metrics/summary?{WINDOW}&group_by=station_id&bucket=1h"),
        "/stations".into(),
    ]
    .into()
}

/// Every answer of `server` to [`queries`], pages followed: each status, ETag and
/// body without what differs per request (its id, time and duration); and what
/// `/readyz` counts.
fn answers(server: &Server) -> Vec<String> {
    let mut all = Vec::new();
    for query in queries() {
        let mut next = Some(query.clone());
        while let Some(path) = next.take() {
            let response = server.get(&path, Some(OPS));
            let etag = response.header("etag").unwrap_or("").to_owned();
            let mut body: Value = serde_json::from_str(&response.body).unwrap();
            let cursor = body["meta"]["next_cursor"].as_str().map(str::to_owned);
            if let Some(meta) = body.get_mut("meta").and_then(Value::as_object_mut) {
                for varies in ["timestamp", "request_id", "query_duration_ms"] {
                    meta.remove(varies);
                }
            }
            all.push(format!("{path} {} {etag} {body}", response.status));
            if let Some(cursor) = cursor {
                next = Some(format!("{query}&cursor={cursor}"));
            }
        }
    }
    let mut readiness = server.readiness();
    // The generation too: a reload moves it on.
    for varies in ["loaded_at", "store", "generation"] {
        readiness.as_object_mut().unwrap().remove(varies);
    }
    all.push(readiness.to_string());
    all
}

#[track_caller]
fn assert_same_answers(got: &Server, want: &Server, context: &str) {
    let (got, want) = (answers(got), answers(want));
    assert_eq!(got.len(), want.len(), "{context}");
    for (got, want) in got.iter().zip(&want) {
        assert_eq!(got, want, "{context}");
    }
}

/// Waits until `server` has written its store `writes` times in all: each write
/// after the first waits its turn (`WRITE_INTERVAL` after the one before).
#[track_caller]
fn wait_for_writes(server: &Server, writes: usize) {
    let paced = stq::store::WRITE_INTERVAL * (writes.saturating_sub(1) as u32);
    server.wait_for_log_within("store written", writes, RELOAD_TIMEOUT + paced);
}

/// A store that a server on `fixture` filled and left, and a server without one.
fn filled_store(fixture: &Fixture) -> (PathBuf, Server) {
    let store = fixture.directory.path().join("store");
    let plain = start(fixture, None);
    let cold = start(fixture, Some(&store));
    wait_for_writes(&cold, 1);
    drop(cold);
    (store, plain)
}

/// The store's files, the manifest last (temporary files aside).
fn store_files(store: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(store)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        // Not the manifest, nor what a server killed while it wrote left behind.
        .filter(|path| path.extension().is_some_and(|extension| extension == "stq"))
        .collect();
    files.sort();
    files.push(store.join("MANIFEST"));
    files
}

fn ready_line(server: &Server) -> String {
    server
        .log()
        .into_iter()
        .find(|line| line.contains("stq ready"))
        .unwrap()
}

/// Debug logging: each write of the store is logged (the first at info).
const WRITES_LOGGED: [(&str, &str); 1] = [("RUST_LOG", "info,stq=debug")];

fn start_logging(fixture: &Fixture, store: &Path) -> Server {
    let mut extra = flags(fixture.directory.path());
    extra.extend(["--store".to_owned(), path_string(store)]);
    let args = serve_args(
        &fixture.snapshots,
        &fixture.tokens,
        &extra.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    Server::spawn(&args, &WRITES_LOGGED)
}

/// A unit line of `station` at `time`, with the pieces of the fixture's.
fn unit_line(station: &str, serial: &str, time: &str) -> String {
    format!(
        r#"{{"station_id":"{station}","unit_serial":"{serial}","time_created":"{time}","unit_type":"PCB","direction":"output","result":"pass"}}"#
    )
}

fn append(path: &Path, text: &str) {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

#[test]
fn issue_32_cold_and_warm_starts_answer_as_a_start_without_a_store() {
    let fixture = Fixture::main();
    let store = fixture.directory.path().join("store");
    let plain = start(&fixture, None);
    assert_eq!(plain.readiness()["store"], "off");

    let cold = start(&fixture, Some(&store));
    assert!(
        ready_line(&cold).contains("store: empty"),
        "{}",
        ready_line(&cold)
    );
    wait_for_writes(&cold, 1);
    assert_eq!(cold.readiness()["store"], "ok");
    assert_same_answers(&cold, &plain, "cold");
    drop(cold);

    let warm = start(&fixture, Some(&store));
    let line = ready_line(&warm);
    assert!(
        line.contains("records restored, 0 files (0 bytes) parsed"),
        "{line}"
    );
    assert_eq!(warm.readiness()["store"], "ok");
    assert_same_answers(&warm, &plain, "warm");
    wait_for_writes(&warm, 1);
    drop((warm, plain));

    // Lines appended (to the file whose last line has no line end, too) and a file
    // replaced between starts.
    append(
        &fixture.snapshots.join("z.units.jsonl"),
        &format!(
            "\n{}\n",
            unit_line("ST-01", "SN-900", "2024-03-10T10:30:00Z")
        ),
    );
    append(
        &fixture.snapshots.join("a.units.jsonl"),
        &(unit_line("ST-09", "SN-901", "2024-03-11T08:00:00Z") + "\n"),
    );
    let staging = fixture.directory.path().join("staging");
    std::fs::write(
        &staging,
        r#"{"station_id":"ST-02","time_created":"2024-03-10T10:30:00Z","name":"current","value":"0.75","unit":"A"}"#
            .to_owned()
            + "\n",
    )
    .unwrap();
    std::fs::rename(&staging, fixture.snapshots.join("b.metrics.jsonl")).unwrap();
    let plain = start(&fixture, None);
    let warm = start(&fixture, Some(&store));
    let line = ready_line(&warm);
    assert!(line.contains("records restored, 3 files"), "{line}");
    assert_same_answers(&warm, &plain, "warm after changes");
    // The store now holds the changed files' records too.
    wait_for_writes(&warm, 1);
    drop(warm);
    let warm = start(&fixture, Some(&store));
    assert!(ready_line(&warm).contains("0 files (0 bytes) parsed"));
    assert_same_answers(&warm, &plain, "warm again");
}

/// Reloads each of `servers` and waits for its next generation.
fn reload_all(servers: &[&Server]) {
    for server in servers {
        let generation = server.generation();
        server.signal("HUP");
        server.wait_for_generation_after(generation);
    }
}

/// A start from `store` that used it whole: records restored, no station read
/// again, the store not refused.
#[track_caller]
fn assert_store_whole(server: &Server, context: &str) {
    let log = server.log().join("\n");
    assert!(
        ready_line(server).contains("records restored")
            && !log.contains("read again")
            && !log.contains("is not used"),
        "{context}:\n{log}"
    );
}

/// Two servers on one store directory (docs/api.md section 12: several processes
/// may share a store, none corrupting another's files). The first holds the
/// directory's lock and writes the store; the second starts from it, answers
/// alike, and writes nothing while the first runs, so neither deletes files the
/// other's manifest names: a third start, after the first wrote again, finds the
/// store whole. Once the first stops, the second writes the store at its next
/// generation, and a start after that finds it whole too.
#[test]
fn issue_32_two_servers_on_one_store_take_turns_writing_it() {
    let fixture = Fixture::main();
    let (store, plain) = filled_store(&fixture);
    let first = start_logging(&fixture, &store);
    wait_for_writes(&first, 1);
    let second = start_logging(&fixture, &store);
    assert_eq!(second.log_count("is written by another stq"), 1);
    assert_store_whole(&second, "the second server's start");
    assert_same_answers(&second, &plain, "the second server");

    append(
        &fixture.snapshots.join("a.units.jsonl"),
        &(unit_line("ST-02", "SN-SHARED-1", "2024-03-11T09:00:00Z") + "\n"),
    );
    reload_all(&[&first, &second, &plain]);
    wait_for_writes(&first, 2);
    assert_eq!(second.log_count("store written"), 0, "the second wrote");
    let third = start(&fixture, Some(&store));
    assert_store_whole(&third, "a third server while the first writes");
    assert_same_answers(&third, &plain, "a third server");
    assert_same_answers(&second, &plain, "the second server after a reload");
    drop((third, first));

    append(
        &fixture.snapshots.join("a.units.jsonl"),
        &(unit_line("ST-07", "SN-SHARED-2", "2024-03-11T09:30:00Z") + "\n"),
    );
    reload_all(&[&second, &plain]);
    second.wait_for_log("this one writes it from now on", 1);
    wait_for_writes(&second, 1);
    drop(second);
    let fourth = start(&fixture, Some(&store));
    assert_store_whole(&fourth, "a start after the second wrote");
    assert!(
        ready_line(&fourth).contains("0 files (0 bytes) parsed"),
        "{}",
        ready_line(&fourth)
    );
    assert_same_answers(&fourth, &plain, "after the second took over");
}

#[test]
fn issue_32_a_reload_writes_the_store_and_the_next_start_reads_it() {
    let fixture = Fixture::main();
    let store = fixture.directory.path().join("store");
    let server = start_logging(&fixture, &store);
    wait_for_writes(&server, 1);
    // Issue 51: the admin metrics say which generation the store holds whole.
    let generation = server.generation();
    assert_eq!(
        server.admin_value("stq_store_generation"),
        generation as f64
    );
    append(
        &fixture.snapshots.join("a.units.jsonl"),
        &(unit_line("ST-01", "SN-902", "2024-03-10T10:15:00Z") + "\n"),
    );
    server.signal("HUP");
    server.wait_for_generation_after(generation);
    wait_for_writes(&server, 2);
    assert_eq!(
        server.admin_value("stq_store_generation"),
        server.generation() as f64
    );
    drop(server);
    let warm = start(&fixture, Some(&store));
    assert!(ready_line(&warm).contains("0 files (0 bytes) parsed"));
    let plain = start(&fixture, None);
    assert_same_answers(&warm, &plain, "after a reload");
}

/// What a test does to a file of the store.
type Damage = fn(&Path);

#[test]
fn issue_32_a_damaged_store_is_not_used_and_is_written_again() {
    let fixture = Fixture::main();
    let (store, plain) = filled_store(&fixture);
    let files = store_files(&store);
    assert!(files.len() >= 4, "{files:?}");
    let damages: [(&str, Damage); 3] = [
        ("a flipped byte", |path| {
            let mut bytes = std::fs::read(path).unwrap();
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0x01;
            std::fs::write(path, bytes).unwrap();
        }),
        ("a truncated file", |path| {
            let bytes = std::fs::read(path).unwrap();
            std::fs::write(path, &bytes[..bytes.len() / 2]).unwrap();
        }),
        ("a deleted file", |path| std::fs::remove_file(path).unwrap()),
    ];
    let mut rng = rand::thread_rng();
    for (damage, apply) in damages {
        // A file of each kind, and the manifest, each picked from the store as it
        // is then (every start that does not use the store writes it anew).
        for kind in ["settled-", "recent-", "sealed-", "symbols-", "MANIFEST"] {
            let files = store_files(&store);
            let of_kind: Vec<&PathBuf> = (files.iter())
                .filter(|file| {
                    let name = file.file_name().unwrap().to_string_lossy();
                    name.starts_with(kind) && (kind != "MANIFEST" || name == "MANIFEST")
                })
                .collect();
            // A recent layer has a file only once a reload appended to its station
            // (issue 35): a store written by a start has none, and its damage is
            // the unit test `issue_32_a_damaged_or_mismatched_layer_file_has_its_station_read_again`'s.
            if kind == "recent-" && of_kind.is_empty() {
                continue;
            }
            assert!(!of_kind.is_empty(), "no {kind} file: {files:?}");
            let victim = of_kind[rng.gen_range(0..of_kind.len())];
            let context = format!("{damage} in {}", victim.display());
            apply(victim);
            let server = start(&fixture, Some(&store));
            if kind.ends_with('-') && kind != "symbols-" {
                // A station's file: that station's snapshot files are read again,
                // the rest of the store is used.
                assert!(
                    server.log_count("its snapshot files are read again") >= 1,
                    "{context}: {:?}",
                    server.log()
                );
                assert!(
                    ready_line(&server).contains("records restored"),
                    "{context}"
                );
            } else {
                assert!(
                    server.log_count("is not used") == 1
                        || (victim.ends_with("MANIFEST") && damage == "a deleted file"),
                    "{context}: {:?}",
                    server.log()
                );
                assert!(
                    ready_line(&server).contains("every record parsed"),
                    "{context}"
                );
            }
            assert_same_answers(&server, &plain, &context);
            // Written again whole: the next start uses it.
            wait_for_writes(&server, 1);
            drop(server);
            let server = start(&fixture, Some(&store));
            assert!(
                ready_line(&server).contains("records restored"),
                "{context}: {}",
                ready_line(&server)
            );
            assert_same_answers(&server, &plain, &context);
        }
    }
}

#[test]
fn issue_32_a_store_that_cannot_be_written_leaves_the_server_serving_from_memory() {
    let fixture = Fixture::main();
    let plain = start(&fixture, None);
    // A path below a file can be neither made nor written, whoever runs the test.
    let blocker = fixture.directory.path().join("a-file");
    std::fs::write(&blocker, "not a directory").unwrap();
    let store = blocker.join("store");
    let server = start(&fixture, Some(&store));
    server.wait_for_log("cannot write the store", 1);
    assert_eq!(server.readiness()["store"], "degraded");
    assert_same_answers(&server, &plain, "unwritable store");
    // A reload still works, and the store stays degraded.
    let generation = server.generation();
    server.signal("HUP");
    server.wait_for_generation_after(generation);
    assert_eq!(server.readiness()["store"], "degraded");
    assert_eq!(server.log_count("cannot write the store"), 1, "logged once");
    assert_same_answers(&server, &plain, "unwritable store, reloaded");

    // A read-only directory, where permissions bind (not as root).
    let read_only = fixture.directory.path().join("read-only");
    std::fs::create_dir(&read_only).unwrap();
    let mut permissions = std::fs::metadata(&read_only).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o555);
    std::fs::set_permissions(&read_only, permissions).unwrap();
    if std::fs::write(read_only.join("probe"), "").is_err() {
        let server = start(&fixture, Some(&read_only));
        server.wait_for_log("cannot write the store", 1);
        assert_eq!(server.readiness()["store"], "degraded");
        assert_same_answers(&server, &plain, "read-only store");
    }
}

/// Issue 32: `kill -9` at random moments of a server's life with a store (while
/// it loads, writes the store, reloads appended lines and writes again): every
/// next start answers as a start without a store on the same files.
#[test]
fn issue_32_a_kill_9_at_any_moment_leaves_a_store_the_next_start_uses_or_repairs() {
    let iterations: usize = std::env::var("STQ_TEST_CRASHES")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(12);
    let fixture = Fixture::main();
    let store = fixture.directory.path().join("store");
    let mut rng = rand::thread_rng();
    let mut serial = 0;
    let mut restored = 0;
    for iteration in 0..iterations {
        let server = start_logging(&fixture, &store);
        // Some reloads of appended lines, each written to the store in turn.
        for _ in 0..rng.gen_range(0..4) {
            serial += 1;
            let minute = serial % 60;
            append(
                &fixture.snapshots.join("a.units.jsonl"),
                &(unit_line(
                    ["ST-01", "ST-02", "ST-07"][serial % 3],
                    &format!("SN-K{serial}"),
                    &format!("2024-03-1{}T1{}:{minute:02}:00Z", serial % 3, serial % 10),
                ) + "\n"),
            );
            let generation = server.generation();
            server.signal("HUP");
            // Now and then, let the reload finish first.
            if rng.gen_bool(0.5) {
                server.wait_for_generation_after(generation);
            }
        }
        // A random moment: at once, or a little later, while a write may be under way.
        if rng.gen_bool(0.7) {
            std::thread::sleep(std::time::Duration::from_micros(rng.gen_range(0..20_000)));
        }
        server.signal("KILL");
        server.wait_for_exit(RELOAD_TIMEOUT).expect("killed");
        drop(server);
        let plain = start(&fixture, None);
        let next = start(&fixture, Some(&store));
        if ready_line(&next).contains("records restored") {
            restored += 1;
        }
        assert_same_answers(&next, &plain, &format!("after kill {iteration}"));
        // Written whole at least once before the next kill, now and then.
        if rng.gen_bool(0.5) {
            wait_for_writes(&next, 1);
        }
    }
    // The store was used, not only ignored.
    assert!(restored > 0, "no start of {iterations} used the store");
}

/// The admin listener's `stq_store_reads_total`.
fn store_reads(server: &Server) -> f64 {
    server.admin_value("stq_store_reads_total")
}

/// Issue 32: a warm start holds no sealed block in memory: a query reads the
/// blocks it needs from the store's files (`stq_store_reads_total` counts it) and
/// answers as a server without a store. Issue 51: a block changed in its file
/// after the start checked it is never answered from. The request that reads it
/// gets 503 `storage_unavailable` with `Retry-After: 1`, never 500; the store turns
/// `degraded`, and the stations reading the file are read again from the snapshot
/// files, after which every answer is a store-less server's again, and the store,
/// written again, is `ok`.
#[test]
fn issue_32_history_is_read_from_the_store_and_a_block_changed_since_is_read_from_the_files() {
    let fixture = Fixture::main();
    let (store, plain) = filled_store(&fixture);
    let warm = start(&fixture, Some(&store));
    assert_eq!(store_reads(&warm), 0.0, "a start reads no block");
    assert_same_answers(&warm, &plain, "warm");
    assert!(store_reads(&warm) > 0.0);
    drop(warm);

    let server = start(&fixture, Some(&store));
    let generation = server.generation();
    // A byte in the middle of every sealed file's blocks (which the file's last
    // eight bytes say end where its index starts), flipped in place.
    let sealed: Vec<PathBuf> = (store_files(&store).into_iter())
        .filter(|file| {
            file.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("sealed-")
        })
        .collect();
    assert!(!sealed.is_empty());
    for file in &sealed {
        let mut bytes = std::fs::read(file).unwrap();
        let index = u64::from_le_bytes(bytes[bytes.len() - 8..].try_into().unwrap()) as usize;
        bytes[(8 + index) / 2] ^= 0x01;
        std::fs::write(file, bytes).unwrap();
    }
    assert_faulted_then_repaired(&server, &plain, generation, "fails its checksum");
}

/// The answers of `server` (started on a store, at `generation`) after its store
/// files were damaged under it: every answer is 503 `storage_unavailable` with
/// `Retry-After: 1` or a store-less server's (`plain`), the log says `fault`, the
/// store turns `degraded` while the server stays live and ready; the stations
/// met are read again from the snapshot files until every answer is `plain`'s,
/// and the next write makes the store `ok`. No panic, no death (issue 51).
#[track_caller]
fn assert_faulted_then_repaired(server: &Server, plain: &Server, generation: u64, fault: &str) {
    let mut unavailable = 0;
    for query in queries() {
        let response = server.get(&query, Some(OPS));
        match response.status {
            503 => {
                assert_eq!(response.json()["error"]["code"], "storage_unavailable");
                assert_eq!(response.header("retry-after"), Some("1"));
                unavailable += 1;
            }
            // A part this query does not read, or the stations already read again.
            _ => assert_eq!(
                response.json()["data"],
                plain.get(&query, Some(OPS)).json()["data"],
                "{query}"
            ),
        }
    }
    assert!(unavailable > 0, "a damaged store file is not answered from");
    server.wait_for_log(fault, 1);
    server.wait_for_log("(store: degraded)", 1);
    assert_eq!(server.get("/healthz", None).status, 200);
    assert_eq!(server.get("/readyz", None).status, 200);
    // The repairs: each a generation that reads the stations of the files met
    // so far from the snapshot files, until no answer meets a damaged file (at
    // most one repair a station).
    let mut generation = server.wait_for_generation_after(generation);
    for _ in 0..=plain.readiness()["stations"].as_u64().unwrap() {
        let unavailable = answers(server)
            .iter()
            .any(|answer| answer.contains(" 503 "));
        if !unavailable {
            break;
        }
        generation = server.wait_for_generation_after(generation_of(&generation));
    }
    assert_same_answers(server, plain, "after the damaged stations were read again");
    // The write of the last repair's generation (paced: at most WRITE_INTERVAL
    // after the write before) makes the store whole again.
    let patience = RELOAD_TIMEOUT + 2 * stq::store::WRITE_INTERVAL;
    let deadline = std::time::Instant::now() + patience;
    while server.readiness()["store"] != "ok" && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(server.readiness()["store"], "ok");
    assert!(
        !server.log().iter().any(|line| line.contains("panicked")),
        "a store's fault is no panic"
    );
}

/// Issue 51: the mapped store files (the sealed files' rows, the symbol runs) cut
/// to half, then to nothing, under a server reading them are no SIGBUS: the
/// server lives, each answer is a store-less server's or 503, and the stations are
/// read again from the snapshot files (as [`assert_faulted_then_repaired`] says).
#[test]
fn issue_51_a_mapped_store_file_cut_under_the_server_is_answered_not_a_crash() {
    let fixture = Fixture::main();
    let plain = start(&fixture, None);
    for cut in [2, 0] {
        let store = fixture.directory.path().join(format!("store-cut-{cut}"));
        let cold = start(&fixture, Some(&store));
        wait_for_writes(&cold, 1);
        drop(cold);
        let server = start(&fixture, Some(&store));
        let generation = server.generation();
        // Every answer once, so that the maps are read from before they are cut.
        assert_same_answers(&server, &plain, "warm");
        let mapped: Vec<PathBuf> = (store_files(&store).into_iter())
            .filter(|file| {
                let name = file.file_name().unwrap().to_string_lossy().into_owned();
                name.starts_with("sealed-") || name.starts_with("symbols-")
            })
            .collect();
        assert!(mapped.len() >= 2, "{mapped:?}");
        for file in &mapped {
            let length = std::fs::metadata(file).unwrap().len();
            let handle = std::fs::OpenOptions::new().write(true).open(file).unwrap();
            handle
                .set_len(length.checked_div(cut).unwrap_or(0))
                .unwrap();
        }
        assert_faulted_then_repaired(
            &server,
            &plain,
            generation,
            "was cut short under the server",
        );
        assert_eq!(server.get("/healthz", None).status, 200, "alive");
    }
}

/// A tmpfs mounted for one test, unmounted when dropped (also when the test fails).
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// A tmpfs of `bytes` at `path`; none unless this runs as root where mounts
    /// are allowed (not in a container without the capability).
    fn mount(path: &Path, bytes: u64) -> Option<Tmpfs> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        std::fs::create_dir_all(path).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(path)
            .status()
            .unwrap();
        status.success().then(|| Tmpfs(path.to_owned()))
    }

    /// Fills the file system up to `room` bytes short of full, with one file.
    fn fill_leaving(&self, room: u64) -> PathBuf {
        use std::io::Write as _;
        let filler = self.0.join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 4096];
        let mut length = 0u64;
        while file.write_all(&chunk).is_ok() {
            length += chunk.len() as u64;
        }
        file.set_len(length.saturating_sub(room)).unwrap();
        filler
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily: a server being dropped may still hold a file open.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// The bytes of the store's files.
fn store_bytes(store: &Path) -> u64 {
    store_files(store)
        .iter()
        .map(|file| std::fs::metadata(file).unwrap().len())
        .sum()
}

/// Issue 51: a store on a full disk (a small tmpfs, mounted as root). The first
/// write fails: every answer is served from memory as a server without a store
/// gives it, `/readyz` says `degraded`, and the failed write leaves none of its
/// files to hold the room. Once there is room, the same generation is written
/// without a reload and the store is `ok`; a start from it uses it whole. A later
/// write that fails again leaves the last whole store usable.
#[test]
fn issue_51_a_store_on_a_full_disk_serves_every_answer_and_is_written_once_there_is_room() {
    let fixture = Fixture::main();
    let (reference, plain) = filled_store(&fixture);
    let size = store_bytes(&reference);
    let Some(disk) = Tmpfs::mount(&fixture.directory.path().join("disk"), 4 * size + (1 << 20))
    else {
        eprintln!("skipped: mounting a tmpfs needs root and the right to mount");
        return;
    };
    let store = disk.0.join("store");
    let filler = disk.fill_leaving(size / 4);
    let server = start_logging(&fixture, &store);
    server.wait_for_log("cannot write the store", 1);
    assert_eq!(server.readiness()["store"], "degraded");
    assert_same_answers(&server, &plain, "a full disk");
    let left: Vec<_> = std::fs::read_dir(&store)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".stq") || name.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "a failed write left {left:?}");

    std::fs::remove_file(&filler).unwrap();
    server.wait_for_log("store written", 1);
    assert_eq!(server.readiness()["store"], "ok");
    assert_eq!(
        server.admin_value("stq_store_generation"),
        server.generation() as f64
    );
    assert_eq!(server.log_count("cannot write the store"), 1, "logged once");

    // A write of the next generation that fails keeps the store of the one before.
    let filler = disk.fill_leaving(0);
    append(
        &fixture.snapshots.join("a.units.jsonl"),
        &(unit_line("ST-03", "SN-FULL-1", "2024-03-11T08:00:00Z") + "\n"),
    );
    reload_all(&[&server, &plain]);
    server.wait_for_log("cannot write the store", 2);
    assert_eq!(server.readiness()["store"], "degraded");
    assert_same_answers(&server, &plain, "a full disk after a reload");
    drop(server);
    let warm = start(&fixture, Some(&store));
    assert_store_whole(&warm, "a start from the store a full disk kept");
    assert_same_answers(&warm, &plain, "a start from the store a full disk kept");
    drop(warm);

    std::fs::remove_file(&filler).unwrap();
    let server = start_logging(&fixture, &store);
    server.wait_for_log("store written", 1);
    assert_eq!(server.readiness()["store"], "ok");
    drop(server);
    let warm = start(&fixture, Some(&store));
    assert_store_whole(&warm, "a start once there was room");
    assert_same_answers(&warm, &plain, "a start once there was room");
}

/// Issue 51: a SIGTERM right after a first start on an empty store (a package
/// upgrade right after its install), while the store's first write is under way,
/// leaves a store the next start uses (docs/api.md section 12): the stop waits for
/// that write to end (`stq::store::STOP_WAIT` at most). The snapshot is large enough
/// (`stq gen`, 30 stations x 3 days) that the write begun at the start is still
/// under way when the server is first ready and the SIGTERM comes.
#[test]
fn issue_51_a_sigterm_during_the_first_write_leaves_a_store_the_next_start_uses() {
    let fixture = Fixture::main();
    let snapshots = fixture.directory.path().join("generated");
    let generated = run(
        &[
            "gen",
            "--out",
            &path_string(&snapshots),
            "--stations",
            "30",
            "--days",
            "3",
            "--end",
            "2026-11-24T00:00:00Z",
        ],
        None,
        &[],
        std::time::Duration::from_secs(300),
    );
    assert!(generated.status.success(), "{generated:?}");
    let store = fixture.directory.path().join("store");
    let mut extra = flags(fixture.directory.path());
    extra.extend(["--store".to_owned(), path_string(&store)]);
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let args = serve_args(&snapshots, &fixture.tokens, &extra);
    let first = Server::spawn(&args, &[("STQ_TEST_NO_STORE", "1")]);
    first.signal("TERM");
    let status = first
        .wait_for_exit(RELOAD_TIMEOUT + stq::store::STOP_WAIT)
        .expect("a SIGTERM ends the server");
    assert!(status.success(), "{status:?}\n{}", first.log().join("\n"));
    let stopped = first.log().join("\n");
    drop(first);

    let next = Server::spawn(&args, &[("STQ_TEST_NO_STORE", "1")]);
    assert_store_whole(
        &next,
        &format!("after a SIGTERM at the first start:\n{stopped}"),
    );
    let plain = Server::spawn(
        &serve_args(&snapshots, &fixture.tokens, &["--hot", "1h"]),
        &[("STQ_TEST_NO_STORE", "1")],
    );
    let window = "from=2026-11-21T00:00:00Z&to=2026-11-24T00:00:00Z";
    for path in [
        format!("/metrics/summary?{window}"),
        format!("/units/summary?{window}&bucket=1d"),
        "/units?from=2026-11-22T10:00:00Z&to=2026-11-22T11:00:00Z&direction=input,output"
            .to_owned(),
    ] {
        let (got, want) = (next.get(&path, Some(OPS)), plain.get(&path, Some(OPS)));
        assert_eq!(got.status, 200, "{}", got.context());
        assert_eq!(got.json()["data"], want.json()["data"], "{path}");
        assert!(!got.json()["data"].as_array().unwrap().is_empty(), "{path}");
    }
}
