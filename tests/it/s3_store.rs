//! Issue 35: `--store s3://BUCKET/PREFIX` (docs/api.md section 12) against real S3
//! servers on loopback (`s3::S3Server`: moto's and s3s-fs's): replicas that share
//! a bucket behind Debian's nginx, the second ready from what the first put; a
//! bucket that goes away and comes back; an object damaged in the bucket. Every
//! answer is compared with a server without a store's; every log is searched for
//! the credentials.

use std::path::Path;

use super::export::generated_days;
use super::replicas::{answered_by, nginx_binary, Balancer};
use crate::common::s3::{assert_no_secret, borrowed, with_debug_log, S3Server, ServerKind};
use crate::common::*;

/// The queries whose answers (records, cursors, summaries) and `ETag`s every
/// server of a test must give alike.
const QUERIES: [&str; 6] = [
    "/units?from=2026-11-20T00:00:00Z&to=2026-11-25T00:00:00Z&limit=50",
    "/metrics?from=2026-11-21T00:00:00Z&to=2026-11-22T00:00:00Z&limit=50",
    "/metrics?from=2026-11-20T00:00:00Z&to=2026-11-25T00:00:00Z&station_ids=ST-02&limit=500",
    "/units/summary?from=2026-11-20T00:00:00Z&to=2026-11-25T00:00:00Z&bucket=1d",
    "/metrics/summary?from=2026-11-20T00:00:00Z&to=2026-11-25T00:00:00Z",
    "/stations",
];

/// A snapshot of three generated days, its tokens, and a cursor key the servers of
/// a test share (cursors must pass between replicas).
struct Floor {
    directory: tempfile::TempDir,
    snapshots: std::path::PathBuf,
}

impl Floor {
    fn new() -> Floor {
        let directory = temporary_directory();
        let snapshots = generated_days(directory.path(), 3);
        std::fs::write(directory.path().join("tokens.json"), tokens_json()).unwrap();
        std::fs::write(
            directory.path().join("cursor.key"),
            b"the replicas' shared secret, 32 bytes or more",
        )
        .unwrap();
        Floor {
            directory,
            snapshots,
        }
    }

    /// `serve` on the floor with `--hot 1h` (so most of it is sealed, in the store's
    /// sealed files) and `extra`.
    fn args(&self, extra: &[&str]) -> Vec<String> {
        let key = path_string(&self.directory.path().join("cursor.key"));
        let mut flags = vec![
            "--hot",
            "1h",
            "--cursor-key-file",
            &key,
            "--watch",
            "--access-log",
        ];
        flags.extend(extra);
        serve_args(
            &self.snapshots,
            &self.directory.path().join("tokens.json"),
            &flags,
        )
    }

    /// A server with the store `s3://lake/PREFIX`, its local copy in `copy`.
    fn replica(&self, s3: &S3Server, prefix: &str, copy: &Path) -> Server {
        let store = format!("s3://lake/{prefix}");
        let copy = path_string(copy);
        let variables = with_debug_log(s3);
        Server::spawn(
            &self.args(&["--store", &store, "--store-cache", &copy]),
            &borrowed(&variables),
        )
    }
}

/// Every query's answer and `ETag` from `server`.
fn answers(server: &Server) -> Vec<(String, Option<String>)> {
    let mut answers = Vec::new();
    for query in QUERIES {
        let response = server.get(query, Some(OPS));
        assert_eq!(response.status, 200, "{query}: {}", response.context());
        let tag = response.header("etag").map(str::to_owned);
        answers.push((answer_text(&response.body), tag));
    }
    answers
}

/// An answer without its `meta` (a timestamp, a request id, a duration), which
/// differs between any two answers by design.
fn answer_text(body: &str) -> String {
    let mut value: serde_json::Value = serde_json::from_str(body).unwrap();
    if let Some(object) = value.as_object_mut() {
        object.remove("meta");
    }
    value.to_string()
}

fn store_status(server: &Server) -> String {
    server.readiness()["store"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Waits until `/readyz` says the store is `want`.
fn wait_for_store(server: &Server, want: &str) {
    let deadline = std::time::Instant::now() + RELOAD_TIMEOUT;
    while store_status(server) != want {
        assert!(
            std::time::Instant::now() < deadline,
            "the store is {:?}, not {want:?}; log:\n{}",
            store_status(server),
            server.log().join("\n")
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Two replicas on one bucket: the second starts from what the first put (no
/// snapshot file parsed), and behind nginx both answer alike, a cursor walk across
/// them included; both answer as a server without a store does.
fn replicas_share_the_store(kind: ServerKind) {
    let s3 = S3Server::start(kind);
    let floor = Floor::new();
    let copies = temporary_directory();
    let first = floor.replica(&s3, "plant-1", &copies.path().join("first"));
    first.wait_for_log("store pushed to s3://lake/plant-1", 1);
    assert_eq!(store_status(&first), "ok");
    // The first push writes the pack a join fetches (issue 35).
    assert_eq!(first.log_count(", a new pack ("), 1, "{kind:?}: no pack");
    let second = floor.replica(&s3, "plant-1", &copies.path().join("second"));
    let ready = second
        .log()
        .into_iter()
        .find(|line| line.contains("records restored"))
        .unwrap_or_else(|| panic!("{kind:?}: the second replica used no store"));
    assert!(
        ready.contains(", 0 files (0 bytes) parsed"),
        "{kind:?}: the second replica parsed files: {ready}"
    );
    // Every file it fetched came from the pack: no request a file.
    let pulled = (second.log().into_iter())
        .find(|line| line.contains("fetched into"))
        .expect("the second replica's pull");
    let counts: Vec<&str> = (pulled.split(['(', ' ', ','].as_ref()))
        .filter(|word| word.parse::<u64>().is_ok())
        .collect();
    assert_eq!(
        counts.first(),
        counts.get(3),
        "{kind:?}: files fetched, then as many from the pack: {pulled}"
    );
    let plain = Server::spawn(&floor.args(&[]), &[]);
    let want = answers(&plain);
    assert_eq!(answers(&first), want, "{kind:?}: the first replica");
    assert_eq!(answers(&second), want, "{kind:?}: the second replica");

    if let Some(nginx) = nginx_binary() {
        let replicas = [&first, &second];
        let balancer = Balancer::start(nginx, &replicas);
        let mut walked = Vec::new();
        let mut answered = [0, 0];
        let mut cursor: Option<String> = None;
        for page in 0.. {
            let path = match &cursor {
                None => QUERIES[0].to_owned(),
                Some(cursor) => format!("{}&cursor={}", QUERIES[0], percent_encode(cursor)),
            };
            let request_id = format!("s3-walk-{page}");
            let envelope = balancer.get(&path, &[("X-Request-Id", &request_id)]).ok();
            answered[answered_by(&replicas, &request_id)] += 1;
            walked.extend(envelope.data.iter().cloned());
            cursor = envelope.cursor();
            if cursor.is_none() {
                break;
            }
        }
        let mut alone = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                None => QUERIES[0].to_owned(),
                Some(cursor) => format!("{}&cursor={}", QUERIES[0], percent_encode(cursor)),
            };
            let envelope = plain.ok(&path);
            alone.extend(envelope.data.iter().cloned());
            cursor = envelope.cursor();
            if cursor.is_none() {
                break;
            }
        }
        assert_eq!(walked, alone, "{kind:?}: a walk through nginx");
        assert!(
            answered[0] > 0 && answered[1] > 0,
            "{kind:?}: pages answered per replica: {answered:?}"
        );
    }
    for server in [&first, &second] {
        assert_no_secret(&server.log().join("\n"), &format!("a replica on {kind:?}"));
    }
}

#[test]
fn issue_35_replicas_share_a_store_on_moto() {
    replicas_share_the_store(ServerKind::Moto);
}

#[test]
fn issue_35_replicas_share_a_store_on_s3s_fs() {
    replicas_share_the_store(ServerKind::S3sFs);
}

/// Issue 35: a replica whose copy holds the sealed files' indexes alone, and which
/// does not fill it (another process holds the copy's lock), answers as a server
/// without a store does, every sealed block read from the bucket by range; the
/// copy gains no sealed file.
#[test]
fn issue_35_a_replica_reads_sealed_blocks_from_the_bucket_until_its_copy_has_them() {
    let s3 = S3Server::start(ServerKind::S3sFs);
    let floor = Floor::new();
    let copies = temporary_directory();
    let copy = copies.path().join("copy");
    let first = floor.replica(&s3, "ranges", &copy);
    first.wait_for_log("store pushed to s3://lake/ranges", 1);
    drop(first);
    // The copy as a pull leaves it: each sealed file's index alone.
    let manifest = std::fs::read(copy.join("MANIFEST")).unwrap();
    let mut sealed = 0;
    for file in stq_core::data::NamedFile::read_manifest(&manifest).unwrap() {
        let (Some((offset, length, _)), Some(index_file)) = (file.index, file.index_file) else {
            continue;
        };
        let whole = std::fs::read(copy.join(&file.name)).unwrap();
        let index = &whole[offset as usize..offset as usize + length as usize];
        std::fs::write(copy.join(index_file), index).unwrap();
        std::fs::remove_file(copy.join(&file.name)).unwrap();
        sealed += 1;
    }
    assert!(sealed > 0, "the floor has sealed history");
    // Held here, the lock keeps the replica from pulling and filling.
    let lock = std::fs::File::create(copy.join("LOCK")).unwrap();
    lock.lock().unwrap();
    let second = floor.replica(&s3, "ranges", &copy);
    let ready = (second.log().into_iter())
        .find(|line| line.contains("records restored"))
        .expect("the replica used the store");
    assert!(ready.contains(", 0 files (0 bytes) parsed"), "{ready}");
    let plain = Server::spawn(&floor.args(&[]), &[]);
    assert_eq!(answers(&second), answers(&plain));
    assert!(second.admin_value("stq_store_reads_total") > 0.0);
    let sealed_files = (std::fs::read_dir(&copy).unwrap())
        .filter(|entry| {
            let name = entry.as_ref().unwrap().file_name();
            let name = name.to_string_lossy();
            name.starts_with("sealed-") && name.ends_with(".stq")
        })
        .count();
    assert_eq!(sealed_files, 0, "every block came from the bucket");
    drop(lock);
}

/// The bucket goes away: stq keeps answering (what was appended meanwhile too),
/// `/readyz` says `degraded`; it comes back: the store is `ok` again without a
/// further append, and a new replica starts from what was pushed then. s3s-fs,
/// which keeps its objects across a restart (moto's are in memory).
#[test]
fn issue_35_a_bucket_that_goes_away_degrades_the_store_until_it_is_back() {
    let mut s3 = S3Server::start(ServerKind::S3sFs);
    let floor = Floor::new();
    let copies = temporary_directory();
    let server = floor.replica(&s3, "outage", &copies.path().join("first"));
    server.wait_for_log("store pushed to s3://lake/outage", 1);
    s3.stop();

    let late = r#"{"station_id":"ST-01","slot":"slot-1","unit_serial":"SN-OUTAGE-35","time_created":"2026-11-23T20:00:00.000Z","tz":"UTC","mode":"production","tags":[],"unit_type":"pcb-power","direction":"output","result":"pass","metadata":{}}"#;
    let generation = server.generation();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(floor.snapshots.join("ST-01/2026-11-23.units.jsonl"))
        .unwrap();
    std::io::Write::write_all(&mut file, format!("{late}\n").as_bytes()).unwrap();
    drop(file);
    server.wait_for_generation_after(generation);
    wait_for_store(&server, "degraded");
    server.wait_for_log("cannot push the store to s3://lake/outage", 1);
    let found = server
        .ok("/units?from=2026-11-23T19:00:00Z&to=2026-11-23T21:00:00Z&serial_number=SN-OUTAGE-35");
    assert_eq!(
        found.data.len(),
        1,
        "the appended record is served meanwhile"
    );

    s3.restart();
    wait_for_store(&server, "ok");
    let second = floor.replica(&s3, "outage", &copies.path().join("second"));
    let ready = (second.log().into_iter())
        .find(|line| line.contains("records restored"))
        .expect("the second replica used the store");
    assert!(ready.contains(", 0 files (0 bytes) parsed"), "{ready}");
    assert_eq!(answers(&second), answers(&server));
    assert_no_secret(&server.log().join("\n"), "a replica through an outage");
}

/// An object changed in the bucket after it was put (a flipped byte) is not used:
/// a replica starting from the bucket reads that station from the snapshot files,
/// answers as a server without a store does, and puts that station's files whole
/// again, so that the next replica starts from the bucket alone. Issue 35: the
/// byte is in a block, which a start does not fetch (it fetches the sealed files'
/// indexes); the fill after the start finds it, and the station is read again.
#[test]
fn issue_35_an_object_damaged_in_the_bucket_is_read_from_the_snapshot_files() {
    let s3 = S3Server::start(ServerKind::S3sFs);
    let floor = Floor::new();
    let copies = temporary_directory();
    let first = floor.replica(&s3, "damage", &copies.path().join("first"));
    first.wait_for_log("store pushed to s3://lake/damage", 1);
    drop(first);
    let objects = s3.objects_directory().join("damage");
    let mut sealed: Vec<_> = std::fs::read_dir(&objects)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path_string(path).contains("/sealed-"))
        .collect();
    sealed.sort();
    let victim = sealed.first().expect("a sealed object").clone();
    let mut bad = std::fs::read(&victim).unwrap();
    // In its first block, past the store's magic.
    bad[10] ^= 0x20;
    std::fs::write(&victim, &bad).unwrap();

    let second = floor.replica(&s3, "damage", &copies.path().join("second"));
    let name = victim.file_name().unwrap().to_string_lossy().into_owned();
    second.wait_for_log(&format!("{name} fails its checksum"), 1);
    second.wait_for_log("reloaded: generation", 1);
    let plain = Server::spawn(&floor.args(&[]), &[]);
    assert_eq!(answers(&second), answers(&plain));
    // The station's files, written again, are put: a third replica finds every
    // object whole and parses nothing.
    second.wait_for_log("1 damaged replaced", 1);
    let third = floor.replica(&s3, "damage", &copies.path().join("third"));
    let ready = (third.log().into_iter())
        .find(|line| line.contains("records restored"))
        .expect("the third replica used the store");
    assert!(ready.contains(", 0 files (0 bytes) parsed"), "{ready}");
    third.wait_for_log("fetched whole into the copy", 1);
    assert!(third.log_count("fails its checksum") == 0);
    assert_eq!(answers(&third), answers(&plain));
}

/// A late unit record of `station` with its own serial, within the floor's days.
fn late_unit(station: &str, serial: usize) -> String {
    format!(
        r#"{{"station_id":"{station}","slot":"slot-1","unit_serial":"SN-KILL-{serial}","time_created":"2026-11-22T{:02}:{:02}:00.000Z","tz":"UTC","mode":"production","tags":[],"unit_type":"pcb-power","direction":"output","result":"pass","metadata":{{}}}}"#,
        serial % 24,
        serial % 60
    )
}

/// Issue 35: `kill -9` at random moments of a replica's life on a bucket (while
/// it pulls the store into its copy, loads, writes the copy and pushes it), now
/// and then after a late record gave it something new to push. After each kill, a
/// replica on the killed one's copy and a replica on an empty copy answer as a
/// server without a store does, and later ones start from the bucket. s3s-fs;
/// `STQ_TEST_CRASHES` kills (default 12).
#[test]
fn issue_35_a_kill_9_mid_pull_or_push_leaves_a_store_the_next_replica_uses() {
    use rand::Rng as _;
    let iterations: usize = std::env::var("STQ_TEST_CRASHES")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(12);
    let s3 = S3Server::start(ServerKind::S3sFs);
    let floor = Floor::new();
    let copies = temporary_directory();
    let kept = copies.path().join("kept");
    let store = "s3://lake/crash";
    let variables = s3.variables();
    let mut rng = rand::thread_rng();
    let mut from_bucket = 0;
    for iteration in 0..iterations {
        if rng.gen_bool(0.5) {
            let station = ["ST-01", "ST-02", "ST-03"][iteration % 3];
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(
                    floor
                        .snapshots
                        .join(format!("{station}/2026-11-22.units.jsonl")),
                )
                .unwrap();
            let line = late_unit(station, iteration);
            std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes()).unwrap();
        }
        // The victim: on the copy the replicas keep, or on one of its own that it
        // fills from the bucket; killed before, during or after its pull and push
        // (a debug build pulls this floor's store in some 30 ms, is ready some
        // 50 ms later, and has written and pushed its copy within 250 ms).
        let copy = if rng.gen_bool(0.5) {
            kept.clone()
        } else {
            copies.path().join(format!("victim-{iteration}"))
        };
        let arguments = floor.args(&["--store", store, "--store-cache", &path_string(&copy)]);
        let mut command = std::process::Command::new(stq_binary());
        command
            .args(&arguments)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        clean_environment(&mut command, &borrowed(&variables));
        let mut victim = command.spawn().expect("start stq");
        std::thread::sleep(std::time::Duration::from_millis(rng.gen_range(0..400)));
        victim.kill().expect("kill -9");
        victim.wait().unwrap();

        let plain = Server::spawn(&floor.args(&[]), &[]);
        let want = answers(&plain);
        let fresh = copies.path().join(format!("fresh-{iteration}"));
        for (name, copy) in [("the kept copy", &kept), ("an empty copy", &fresh)] {
            let next = floor.replica(&s3, "crash", copy);
            let ready = (next.log().into_iter())
                .find(|line| line.contains("records restored") || line.contains("loaded in"))
                .unwrap_or_default();
            if name == "an empty copy" && ready.contains("records restored") {
                from_bucket += 1;
            }
            assert_eq!(
                answers(&next),
                want,
                "kill {iteration}, then a replica on {name}: {ready}"
            );
            // Now and then the bucket is whole again before the next kill.
            if rng.gen_bool(0.5) {
                next.wait_for_log("store pushed to s3://lake/crash", 1);
            }
        }
    }
    assert!(
        from_bucket > 0,
        "no replica on an empty copy started from the bucket in {iterations} kills"
    );
}

/// Two replicas on one host sharing their copy of the bucket (docs/api.md section
/// 12): the first holds the copy's lock, pulls and pushes; the second starts from
/// the copy as it is, without pulling, pushes nothing, and answers alike.
#[test]
fn issue_35_two_replicas_on_one_copy_leave_it_to_the_one_that_holds_its_lock() {
    let s3 = S3Server::start(ServerKind::S3sFs);
    let floor = Floor::new();
    let copies = temporary_directory();
    let copy = copies.path().join("shared");
    let first = floor.replica(&s3, "one-copy", &copy);
    first.wait_for_log("store pushed to s3://lake/one-copy", 1);
    let second = floor.replica(&s3, "one-copy", &copy);
    assert_eq!(
        second.log_count("without pulling, and writes it once that one stops"),
        1,
        "{}",
        second.log().join("\n")
    );
    assert_eq!(second.log_count("fetched into"), 0, "the second pulled");
    let ready = (second.log().into_iter())
        .find(|line| line.contains("records restored"))
        .expect("the second replica used the copy");
    assert!(ready.contains(", 0 files (0 bytes) parsed"), "{ready}");
    let plain = Server::spawn(&floor.args(&[]), &[]);
    assert_eq!(answers(&second), answers(&plain));
    assert_eq!(store_status(&second), "ok");
    assert_eq!(second.log_count("store pushed"), 0, "the second pushed");
}
