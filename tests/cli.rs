//! CONTRACT sections 1 and 2 from the command line: `serve --on-invalid`, start-up
//! errors, `check`, `hash-token`, `gen`, and configuration through `STQ_*` variables.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(60);

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn text(b: &[u8]) -> String {
    strip_ansi(&String::from_utf8_lossy(b))
}

// ---------------------------------------------------------------------------
// A snapshot with invalid lines
// ---------------------------------------------------------------------------

/// `(files, invalid (rel, line) pairs)`.
fn invalid_files() -> (Vec<FileSpec>, Vec<(&'static str, usize)>) {
    let units = [
        /* 1 */ r#"{"station_id":"ST-01","unit_serial":"V1","time_created":"2024-03-10T10:00:00Z","direction":"output"}"#,
        /* 2 */ r#"{not json"#,
        /* 3 */ r#"{"time_created":"2024-03-10T10:00:00Z","direction":"output"}"#,
        /* 4 */ r#"{"station_id":"ST-01","time_created":"2024-03-10 10:00:00Z","direction":"output"}"#,
        /* 5 */ r#"{"station_id":"ST-01","time_created":"2024-03-10T10:00:00Z"}"#,
        /* 6 */ r#"{"station_id":"ST-01","time_created":"2024-03-10T10:00:00Z","direction":"sideways"}"#,
        /* 7 */ r#"{"station_id":5,"time_created":"2024-03-10T10:00:00Z","direction":"output"}"#,
        /* 8 */ r#"{"station_id":"ST-01","time_created":"2024-03-10T10:00:00Z","direction":"output","tags":[1]}"#,
        /* 9 */ r#"{"station_id":"","time_created":"2024-03-10T10:00:00Z","direction":"output"}"#,
        /* 10 */ r#"{"station_id":"ST-02","unit_serial":"V2","time_created":"2024-03-10T11:00:00Z","direction":"output"}"#,
        /* 11 */ r#"[1,2]"#,
        /* 12 */ r#"{"station_id":"ST-01","time_created":"2024-03-10T24:00:00Z","direction":"output"}"#,
    ]
    .join("\n")
        + "\n";
    let m1 = [
        /* 1 */
        r#"{"station_id":"ST-01","time_created":"2024-03-10T10:00:00Z","name":"v","value":"1"}"#,
        /* 2 */ "",
        "",
    ]
    .join("\n");
    let m2 = [
        /* 3 */ r#"{"station_id":"ST-01","time_created":"2024-03-10T10:00:00Z"}"#,
        /* 4 */
        r#"{"station_id":"ST-01","time_created":"2024-03-10T10:00:00Z","name":"v","value":[1]}"#,
        /* 5 */
        r#"{"station_id":"ST-01","time_created":"2024-03-10T10:05:00Z","name":"v","value":2}"#,
        /* 6 */ r#"{"station_id":"ST-01","time_created":"2024-03-10T10:06:00Z","name":""}"#,
    ]
    .join("\n");
    let split = m1.len();
    let files = vec![
        FileSpec::plain("bad.units.jsonl", units),
        FileSpec::gz("sub/bad.metrics.jsonl.gz", format!("{m1}{m2}"), &[split]),
        FileSpec::plain(
            "good.units.jsonl",
            r#"{"station_id":"ST-03","unit_serial":"V3","time_created":"2024-03-10T12:00:00Z","direction":"output"}"#,
        ),
    ];
    let mut bad: Vec<(&str, usize)> = [2, 3, 4, 5, 6, 7, 8, 9, 11, 12]
        .iter()
        .map(|l| ("bad.units.jsonl", *l))
        .collect();
    bad.extend([3, 4, 6].iter().map(|l| ("sub/bad.metrics.jsonl.gz", *l)));
    (files, bad)
}

/// A fixture directory holding the files (and the suite's tokens file).
fn dir_with(files: &[FileSpec]) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = temp_dir();
    let snap = tmp.path().join("snap");
    std::fs::create_dir_all(&snap).unwrap();
    write_files(&snap, files);
    let tokens = tmp.path().join("tokens.json");
    std::fs::write(&tokens, tokens_json()).unwrap();
    (tmp, snap, tokens)
}

fn serve_args(snap: &Path, tokens: &Path, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--snapshots",
        &s(snap),
        "--tokens",
        &s(tokens),
    ]
    .iter()
    .map(|x| x.to_string())
    .collect();
    a.extend(extra.iter().map(|x| x.to_string()));
    a
}

/// Asserts that some line of `out` contains `path:line: reason` (reason non-empty)
/// for each invalid line, and that no valid line is reported.
#[track_caller]
fn assert_reports(
    out: &str,
    snap: &Path,
    bad: &[(&str, usize)],
    valid: &[(&str, usize)],
    line_starts: bool,
) {
    for (rel, line) in bad {
        let prefix = format!("{}:{}: ", s(&snap.join(rel)), line);
        let hit = out.lines().find(|l| {
            if line_starts {
                l.starts_with(&prefix)
            } else {
                l.contains(&prefix)
            }
        });
        let hit = hit.unwrap_or_else(|| panic!("no `{prefix}reason` line in:\n{out}"));
        let reason = &hit[hit.find(&prefix).unwrap() + prefix.len()..];
        assert!(!reason.trim().is_empty(), "empty reason: {hit}");
    }
    for (rel, line) in valid {
        let prefix = format!("{}:{}:", s(&snap.join(rel)), line);
        assert!(
            !out.contains(&prefix),
            "valid line reported as invalid ({prefix}):\n{out}"
        );
    }
}

const VALID_LINES: [(&str, usize); 5] = [
    ("bad.units.jsonl", 1),
    ("bad.units.jsonl", 10),
    ("sub/bad.metrics.jsonl.gz", 1),
    ("sub/bad.metrics.jsonl.gz", 5),
    ("good.units.jsonl", 1),
];

// ---------------------------------------------------------------------------
// serve --on-invalid
// ---------------------------------------------------------------------------

fn expect_start_failure(args: &[String], envs: &[(&str, &str)]) -> String {
    match Server::try_spawn(args, envs) {
        Started::Ready(srv) => panic!(
            "server started (port {}) but must not:\n{}",
            srv.port,
            srv.log().join("\n")
        ),
        Started::Exited(code, log) => {
            assert!(
                code.is_some() && code != Some(0),
                "exit status {code:?}; stderr:\n{log}"
            );
            assert!(!log.contains("listening on"), "{log}");
            log
        }
    }
}

#[test]
fn serve_on_invalid_fail_is_the_default_and_lists_path_line_reason() {
    let (files, bad) = invalid_files();
    let (_tmp, snap, tokens) = dir_with(&files);
    let log = expect_start_failure(&serve_args(&snap, &tokens, &[]), &[]);
    assert_reports(&log, &snap, &bad, &VALID_LINES, false);
}

#[test]
fn serve_on_invalid_fail_flag_exits_non_zero_before_binding() {
    let (files, bad) = invalid_files();
    let (_tmp, snap, tokens) = dir_with(&files);
    let log = expect_start_failure(&serve_args(&snap, &tokens, &["--on-invalid", "fail"]), &[]);
    assert_reports(&log, &snap, &bad, &VALID_LINES, false);
}

#[test]
fn serve_on_invalid_fail_prints_at_most_20_lines_and_the_total() {
    let many: String = (0..25).map(|_| "{bad\n").collect();
    let (_tmp, snap, tokens) = dir_with(&[FileSpec::plain("many.units.jsonl", many)]);
    let log = expect_start_failure(&serve_args(&snap, &tokens, &[]), &[]);
    let path = s(&snap.join("many.units.jsonl"));
    let listed: BTreeSet<usize> = (1..=25)
        .filter(|n| log.contains(&format!("{path}:{n}: ")))
        .collect();
    assert!(
        !listed.is_empty() && listed.len() <= 20,
        "listed {} lines:\n{log}",
        listed.len()
    );
    let total = log
        .lines()
        .filter(|l| !l.contains(&format!("{path}:")))
        .map(|l| l.replace(&s(&snap), ""))
        .any(|l| l.split(|c: char| !c.is_ascii_digit()).any(|n| n == "25"));
    assert!(total, "the total count 25 is not printed:\n{log}");
}

#[test]
fn serve_on_invalid_skip_serves_the_valid_records_and_logs_the_skipped_lines() {
    let (files, bad) = invalid_files();
    let (_tmp, snap, tokens) = dir_with(&files);
    let srv = Server::spawn(&serve_args(&snap, &tokens, &["--on-invalid", "skip"]), &[]);
    let env = srv.ok(&format!("/units?{WIN}"));
    let serials: Vec<&str> = env
        .data
        .iter()
        .map(|r| r["unit_serial"].as_str().unwrap())
        .collect();
    assert_eq!(serials, ["V1", "V2", "V3"]);
    let env = srv.ok(&format!("/metrics?{WIN}"));
    let values: Vec<&str> = env
        .data
        .iter()
        .map(|r| r["value"].as_str().unwrap())
        .collect();
    assert_eq!(values, ["1", "2"]);
    let log = srv.log().join("\n");
    assert_reports(&log, &snap, &bad, &VALID_LINES, false);
}

#[test]
fn serve_on_invalid_from_env_and_flag_beats_env() {
    let (files, _) = invalid_files();
    let (_tmp, snap, tokens) = dir_with(&files);
    let srv = Server::spawn(
        &serve_args(&snap, &tokens, &[]),
        &[("STQ_ON_INVALID", "skip")],
    );
    assert_eq!(srv.ok(&format!("/units?{WIN}")).data.len(), 3);
    drop(srv);
    expect_start_failure(
        &serve_args(&snap, &tokens, &["--on-invalid", "fail"]),
        &[("STQ_ON_INVALID", "skip")],
    );
}

#[test]
fn serve_with_a_missing_snapshot_directory_fails_to_start() {
    let (tmp, _snap, tokens) = dir_with(&[]);
    let missing = tmp.path().join("does-not-exist");
    let log = expect_start_failure(&serve_args(&missing, &tokens, &[]), &[]);
    assert!(!log.trim().is_empty(), "no message");
}

#[test]
fn serve_with_an_empty_snapshot_directory_serves_no_records() {
    let (_tmp, snap, tokens) = dir_with(&[]);
    let srv = Server::spawn(&serve_args(&snap, &tokens, &[]), &[]);
    assert!(srv
        .ok(&format!("/units?{WIN}&direction=input,output"))
        .data
        .is_empty());
    assert!(srv.ok("/metrics").data.is_empty());
}

#[test]
fn serve_ignores_files_that_are_not_snapshots() {
    let rec = r#"{"station_id":"ST-01","unit_serial":"OK","time_created":"2024-03-10T10:00:00Z","direction":"output"}"#;
    let garbage = "this is not json\n{\"station_id\":\"ST-IGN\"}\n";
    let files = vec![
        FileSpec::plain("a.units.jsonl", rec),
        FileSpec::plain("notes.txt", garbage),
        FileSpec::plain("data.jsonl", garbage),
        FileSpec::plain("x.units.json", garbage),
        FileSpec::plain("a.units.jsonl.bak", garbage),
        FileSpec::plain("a.metrics.jsonl.zip", garbage),
        FileSpec::plain("sub/readme.md", garbage),
    ];
    let (_tmp, snap, tokens) = dir_with(&files);
    let srv = Server::spawn(&serve_args(&snap, &tokens, &[]), &[]);
    let env = srv.ok(&format!("/units?{WIN}"));
    assert_eq!(env.data.len(), 1);
    assert_eq!(env.data[0]["unit_serial"], "OK");
    assert!(srv.ok(&format!("/metrics?{WIN}")).data.is_empty());
    let out = run(&["check", "--snapshots", &s(&snap)], None, &[], T);
    assert_eq!(out.status.code(), Some(0), "check: {}", text(&out.stdout));
}

// ---------------------------------------------------------------------------
// check
// ---------------------------------------------------------------------------

#[test]
fn check_on_a_valid_snapshot_exits_0_and_prints_counts_per_file() {
    let fx = Fixture::main();
    let out = run(&["check", "--snapshots", &s(&fx.snapshots)], None, &[], T);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &fx.recs {
        *counts.entry(r.rel.as_str()).or_default() += 1;
    }
    for (rel, n) in counts {
        let name = rel.rsplit('/').next().unwrap();
        let line = stdout
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("no count line for {rel}:\n{stdout}"));
        let stripped = line
            .replace(&s(&fx.snapshots.join(rel)), "")
            .replace(rel, "")
            .replace(name, "");
        let numbers: Vec<&str> = stripped
            .split(|c: char| !c.is_ascii_digit())
            .filter(|x| !x.is_empty())
            .collect();
        assert!(
            numbers.contains(&n.to_string().as_str()),
            "count {n} of {rel} not on its line: {line}"
        );
    }
}

#[test]
fn check_with_invalid_lines_exits_1_and_prints_every_path_line_reason() {
    let (files, bad) = invalid_files();
    let (_tmp, snap, _tokens) = dir_with(&files);
    let out = run(&["check", "--snapshots", &s(&snap)], None, &[], T);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    assert_reports(&stdout, &snap, &bad, &VALID_LINES, true);
}

#[test]
fn check_prints_every_invalid_line_even_beyond_20() {
    let many: String = (0..25).map(|_| "{bad\n").collect();
    let (_tmp, snap, _tokens) = dir_with(&[FileSpec::plain("many.units.jsonl", many)]);
    let out = run(&["check", "--snapshots", &s(&snap)], None, &[], T);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let bad: Vec<(&str, usize)> = (1..=25).map(|n| ("many.units.jsonl", n)).collect();
    assert_reports(&stdout, &snap, &bad, &[], true);
}

#[test]
fn check_on_a_missing_directory_exits_2() {
    let tmp = temp_dir();
    let out = run(
        &["check", "--snapshots", &s(&tmp.path().join("nope"))],
        None,
        &[],
        T,
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "stdout:\n{}\nstderr:\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn check_on_an_empty_directory_exits_0() {
    let tmp = temp_dir();
    let out = run(&["check", "--snapshots", &s(tmp.path())], None, &[], T);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn check_reads_the_snapshot_directory_from_env() {
    let (files, bad) = invalid_files();
    let (_tmp, snap, _tokens) = dir_with(&files);
    let out = run(&["check"], None, &[("STQ_SNAPSHOTS", &s(&snap))], T);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert_reports(&stdout, &snap, &bad, &VALID_LINES, true);
    // the flag wins over the variable
    let tmp = temp_dir();
    let out = run(
        &["check", "--snapshots", &s(tmp.path())],
        None,
        &[("STQ_SNAPSHOTS", &s(&snap))],
        T,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

// ---------------------------------------------------------------------------
// hash-token
// ---------------------------------------------------------------------------

fn hash_token(input: &[u8]) -> String {
    let out = run(&["hash-token"], Some(input), &[], T);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn hash_token_prints_the_lowercase_hex_sha256_and_a_newline() {
    let got = hash_token(b"s3cr3t-token\n");
    assert_eq!(got, format!("{}\n", sha256_hex("s3cr3t-token")));
    assert_eq!(got.trim_end().len(), 64);
    assert!(got
        .trim_end()
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
}

#[test]
fn hash_token_strips_one_crlf() {
    assert_eq!(
        hash_token(b"s3cr3t-token\r\n"),
        format!("{}\n", sha256_hex("s3cr3t-token"))
    );
}

#[test]
fn hash_token_without_a_line_end() {
    assert_eq!(
        hash_token(b"s3cr3t-token"),
        format!("{}\n", sha256_hex("s3cr3t-token"))
    );
}

#[test]
fn hash_token_strips_only_one_line_end() {
    assert_eq!(hash_token(b"tok\n\n"), format!("{}\n", sha256_hex("tok\n")));
    assert_eq!(hash_token(b" tok \n"), format!("{}\n", sha256_hex(" tok ")));
}

#[test]
fn hash_token_output_authenticates_through_a_tokens_file() {
    let token = "fresh-token-for-hash-test";
    let hash = hash_token(format!("{token}\n").as_bytes());
    let fx = Fixture::main();
    let tokens = fx.tmp.path().join("hashed-tokens.json");
    let body = json!({"tokens": [{"name": "t", "sha256": hash.trim_end(), "stations": ["ST-03"]}]});
    std::fs::write(&tokens, body.to_string()).unwrap();
    let srv = Server::spawn(&serve_args(&fx.snapshots, &tokens, &[]), &[]);
    let env = srv.get(&format!("/metrics?{WIN}"), Some(token)).ok();
    assert_records(
        &env.data,
        &fx.expect(&Q::metrics().scope(&["ST-03"])),
        "hashed token",
    );
    srv.get("/metrics", Some(OPS)).err(401, "unauthorized");
}

// ---------------------------------------------------------------------------
// Environment variables
// ---------------------------------------------------------------------------

#[test]
fn env_max_records_configures_serve() {
    let fx = Fixture::main();
    let srv = Server::spawn(
        &serve_args(&fx.snapshots, &fx.tokens, &[]),
        &[("STQ_MAX_RECORDS", "2")],
    );
    let d = srv
        .get(&format!("/units?{WIN}"), Some(OPS))
        .err(400, "result_too_large");
    assert_eq!(d, json!({"max_records": 2}));
    srv.get(&format!("/units?{WIN}&limit=3"), Some(OPS))
        .err(400, "invalid_parameter");
}

#[test]
fn max_records_flag_beats_env() {
    let fx = Fixture::main();
    let srv = Server::spawn(
        &serve_args(&fx.snapshots, &fx.tokens, &["--max-records", "50"]),
        &[("STQ_MAX_RECORDS", "2")],
    );
    let env = srv.ok(&format!("/units?{WIN}"));
    assert_records(&env.data, &fx.expect(&Q::units()), "flag 50");
    srv.ok(&format!("/units?{WIN}&limit=50"));
    let d = srv
        .get(&format!("/units?{WIN}&limit=51"), Some(OPS))
        .err(400, "invalid_parameter");
    assert_eq!(d, json!({"parameter": "limit", "value": "51"}));
}

#[test]
fn env_max_stations_configures_serve_and_flag_beats_it() {
    let fx = Fixture::main();
    let srv = Server::spawn(
        &serve_args(&fx.snapshots, &fx.tokens, &[]),
        &[("STQ_MAX_STATIONS", "1")],
    );
    srv.get(&format!("/units?{WIN}&station_ids=ST-01,ST-02"), Some(OPS))
        .err(400, "too_many_stations");
    srv.ok(&format!("/units?{WIN}&station_ids=ST-01,ST-01"));
    drop(srv);
    let srv = Server::spawn(
        &serve_args(&fx.snapshots, &fx.tokens, &["--max-stations", "2"]),
        &[("STQ_MAX_STATIONS", "1")],
    );
    srv.ok(&format!("/units?{WIN}&station_ids=ST-01,ST-02"));
    srv.get(
        &format!("/units?{WIN}&station_ids=ST-01,ST-02,ST-03"),
        Some(OPS),
    )
    .err(400, "too_many_stations");
}

#[test]
fn serve_reads_listen_snapshots_tokens_and_shards_from_env() {
    let fx = Fixture::main();
    let srv = Server::spawn(
        &["serve".to_string()],
        &[
            ("STQ_LISTEN", "127.0.0.1:0"),
            ("STQ_SNAPSHOTS", &s(&fx.snapshots)),
            ("STQ_TOKENS", &s(&fx.tokens)),
            ("STQ_SHARDS", "2"),
        ],
    );
    let env = srv.ok(&format!("/units?{WIN}&direction=input,output"));
    assert_records(&env.data, &fx.expect(&Q::units().both()), "all from env");
}

#[test]
fn listen_flag_beats_env() {
    let fx = Fixture::main();
    // an address that cannot be bound in the env; the flag's port 0 must be used
    let srv = Server::spawn(
        &serve_args(&fx.snapshots, &fx.tokens, &[]),
        &[("STQ_LISTEN", "192.0.2.1:1")],
    );
    srv.ok(&format!("/metrics?{WIN}"));
}

// ---------------------------------------------------------------------------
// gen
// ---------------------------------------------------------------------------

const GEN_END: &str = "2024-03-10T00:00:00Z";

fn gen_into(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let out = run(
        &[
            "gen",
            "--out",
            &s(dir),
            "--stations",
            "3",
            "--days",
            "1",
            "--units-per-hour",
            "2",
            "--seed",
            "42",
            "--end",
            GEN_END,
        ],
        None,
        &[],
        Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "gen failed: {}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn rec(base: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                rec(base, &p, out);
            } else {
                let rel = p
                    .strip_prefix(base)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    rec(dir, dir, &mut out);
    out
}

fn decompressed(rel: &str, bytes: &[u8]) -> String {
    if rel.ends_with(".gz") {
        let mut s = String::new();
        flate2::read::MultiGzDecoder::new(bytes)
            .read_to_string(&mut s)
            .unwrap();
        s
    } else {
        String::from_utf8(bytes.to_vec()).unwrap()
    }
}

#[test]
fn gen_output_depends_only_on_its_flags() {
    let tmp = temp_dir();
    let (a, b) = (tmp.path().join("one"), tmp.path().join("two"));
    gen_into(&a);
    gen_into(&b);
    let (ta, tb) = (tree(&a), tree(&b));
    assert!(
        ta.keys().any(|k| k.contains(".units.jsonl")),
        "no units file: {:?}",
        ta.keys()
    );
    assert!(
        ta.keys().any(|k| k.contains(".metrics.jsonl")),
        "no metrics file: {:?}",
        ta.keys()
    );
    assert_eq!(
        ta.keys().collect::<Vec<_>>(),
        tb.keys().collect::<Vec<_>>(),
        "file lists differ"
    );
    for (k, v) in &ta {
        assert!(
            v == &tb[k],
            "{k} differs between two runs with the same flags"
        );
    }
}

#[test]
fn gen_output_is_valid_and_spans_the_days_before_end() {
    let tmp = temp_dir();
    let dir = tmp.path().join("gen");
    gen_into(&dir);
    let out = run(&["check", "--snapshots", &s(&dir)], None, &[], T);
    assert_eq!(
        out.status.code(),
        Some(0),
        "check of gen output:\n{}",
        text(&out.stdout)
    );
    let end = instant(GEN_END);
    let start = end - DAY;
    let mut units = 0usize;
    let mut stations = BTreeSet::new();
    for (rel, bytes) in tree(&dir) {
        let is_units = rel.contains(".units.jsonl");
        if !is_units && !rel.contains(".metrics.jsonl") {
            continue;
        }
        for line in decompressed(&rel, &bytes).lines() {
            if line.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(line).unwrap();
            let t = instant(v["time_created"].as_str().unwrap());
            assert!(
                start <= t && t < end,
                "{rel}: {} outside [end - 1 day, end)",
                v["time_created"]
            );
            stations.insert(v["station_id"].as_str().unwrap().to_string());
            if is_units {
                units += 1;
            }
        }
    }
    assert!(units > 0);
    assert!(!stations.is_empty() && stations.len() <= 3, "{stations:?}");
    // and it is served
    let tokens = tmp.path().join("tokens.json");
    std::fs::write(&tokens, tokens_json()).unwrap();
    let srv = Server::spawn(&serve_args(&dir, &tokens, &[]), &[]);
    let env = srv.ok(&format!(
        "/units?to={GEN_END}&direction=input,output&limit=100000"
    ));
    assert_eq!(env.data.len(), units);
}
