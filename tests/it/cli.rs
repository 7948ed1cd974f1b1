//! CONTRACT sections 1 and 2 from the command line: `serve --on-invalid`, start-up
//! errors, `check`, `hash-token`, `gen`, and configuration through `STQ_*` variables.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::common::*;
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(60);

fn text(bytes: &[u8]) -> String {
    strip_ansi(&String::from_utf8_lossy(bytes))
}

#[track_caller]
fn assert_exit_code(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        text(&output.stdout),
        text(&output.stderr)
    );
}

// ---------------------------------------------------------------------------
// A snapshot with invalid lines
// ---------------------------------------------------------------------------

/// `(files, invalid (relative_path, line) pairs)`.
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
    let metrics_first_member = [
        /* 1 */
        r#"{"station_id":"ST-01","time_created":"2024-03-10T10:00:00Z","name":"v","value":"1"}"#,
        /* 2 */ "",
        "",
    ]
    .join("\n");
    let metrics_second_member = [
        /* 3 */ r#"{"station_id":"ST-01","time_created":"2024-03-10T10:00:00Z"}"#,
        /* 4 */
        r#"{"station_id":"ST-01","time_created":"2024-03-10T10:00:00Z","name":"v","value":[1]}"#,
        /* 5 */
        r#"{"station_id":"ST-01","time_created":"2024-03-10T10:05:00Z","name":"v","value":2}"#,
        /* 6 */ r#"{"station_id":"ST-01","time_created":"2024-03-10T10:06:00Z","name":""}"#,
    ]
    .join("\n")
        // Ended, so line 6 is invalid, not pending (docs/api.md section 8).
        + "\n";
    let member_split = metrics_first_member.len();
    let files = vec![
        FileSpec::plain("bad.units.jsonl", units),
        FileSpec::gz(
            "sub/bad.metrics.jsonl.gz",
            format!("{metrics_first_member}{metrics_second_member}"),
            &[member_split],
        ),
        FileSpec::plain(
            "good.units.jsonl",
            r#"{"station_id":"ST-03","unit_serial":"V3","time_created":"2024-03-10T12:00:00Z","direction":"output"}"#,
        ),
    ];
    let mut invalid: Vec<(&str, usize)> = [2, 3, 4, 5, 6, 7, 8, 9, 11, 12]
        .iter()
        .map(|line| ("bad.units.jsonl", *line))
        .collect();
    invalid.extend(
        [3, 4, 6]
            .iter()
            .map(|line| ("sub/bad.metrics.jsonl.gz", *line)),
    );
    (files, invalid)
}

/// Asserts that some line of `output` contains `path:line: reason` (reason non-empty)
/// for each invalid line, and that no valid line is reported.
#[track_caller]
fn assert_reports(
    output: &str,
    snapshots: &Path,
    invalid: &[(&str, usize)],
    valid: &[(&str, usize)],
    at_line_start: bool,
) {
    for (relative_path, line_number) in invalid {
        let prefix = format!(
            "{}:{}: ",
            path_string(&snapshots.join(relative_path)),
            line_number
        );
        let hit = output.lines().find(|printed| {
            if at_line_start {
                printed.starts_with(&prefix)
            } else {
                printed.contains(&prefix)
            }
        });
        let hit = hit.unwrap_or_else(|| panic!("no `{prefix}reason` line in:\n{output}"));
        let reason = &hit[hit.find(&prefix).unwrap() + prefix.len()..];
        assert!(!reason.trim().is_empty(), "empty reason: {hit}");
    }
    for (relative_path, line_number) in valid {
        let prefix = format!(
            "{}:{}:",
            path_string(&snapshots.join(relative_path)),
            line_number
        );
        assert!(
            !output.contains(&prefix),
            "valid line reported as invalid ({prefix}):\n{output}"
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

fn expect_start_failure(args: &[String], variables: &[(&str, &str)]) -> String {
    match Server::try_spawn(args, variables) {
        Started::Ready(server) => panic!(
            "server started (port {}) but must not:\n{}",
            server.port,
            server.log().join("\n")
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
    let (files, invalid) = invalid_files();
    let (_directory, snapshots, tokens) = write_snapshot(&files);
    let log = expect_start_failure(&serve_args(&snapshots, &tokens, &[]), &[]);
    assert_reports(&log, &snapshots, &invalid, &VALID_LINES, false);
}

#[test]
fn serve_on_invalid_fail_flag_exits_non_zero_before_binding() {
    let (files, invalid) = invalid_files();
    let (_directory, snapshots, tokens) = write_snapshot(&files);
    let log = expect_start_failure(
        &serve_args(&snapshots, &tokens, &["--on-invalid", "fail"]),
        &[],
    );
    assert_reports(&log, &snapshots, &invalid, &VALID_LINES, false);
}

#[test]
fn serve_on_invalid_fail_prints_at_most_20_lines_and_the_total() {
    let many: String = (0..25).map(|_| "{bad\n").collect();
    let (_directory, snapshots, tokens) =
        write_snapshot(&[FileSpec::plain("many.units.jsonl", many)]);
    let log = expect_start_failure(&serve_args(&snapshots, &tokens, &[]), &[]);
    let path = path_string(&snapshots.join("many.units.jsonl"));
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
        .map(|l| l.replace(&path_string(&snapshots), ""))
        .any(|l| l.split(|c: char| !c.is_ascii_digit()).any(|n| n == "25"));
    assert!(total, "the total count 25 is not printed:\n{log}");
}

#[test]
fn serve_on_invalid_skip_serves_the_valid_records_and_logs_the_skipped_lines() {
    let (files, invalid) = invalid_files();
    let (_directory, snapshots, tokens) = write_snapshot(&files);
    let server = Server::spawn(
        &serve_args(&snapshots, &tokens, &["--on-invalid", "skip"]),
        &[("STQ_TEST_COLD", "1")],
    );
    let envelope = server.ok(&format!("/units?{WINDOW}"));
    assert_eq!(serials(&envelope.data), ["V1", "V2", "V3"]);
    let envelope = server.ok(&format!("/metrics?{WINDOW}"));
    assert_eq!(metric_values(&envelope.data), ["1", "2"]);
    let log = server.log().join("\n");
    assert_reports(&log, &snapshots, &invalid, &VALID_LINES, false);
}

#[test]
fn serve_on_invalid_from_env_and_flag_beats_env() {
    let (files, _) = invalid_files();
    let (_directory, snapshots, tokens) = write_snapshot(&files);
    let server = Server::spawn(
        &serve_args(&snapshots, &tokens, &[]),
        &[("STQ_ON_INVALID", "skip")],
    );
    assert_eq!(server.ok(&format!("/units?{WINDOW}")).data.len(), 3);
    drop(server);
    expect_start_failure(
        &serve_args(&snapshots, &tokens, &["--on-invalid", "fail"]),
        &[("STQ_ON_INVALID", "skip")],
    );
}

#[test]
fn serve_with_a_missing_snapshot_directory_fails_to_start() {
    let (directory, _snapshots, tokens) = write_snapshot(&[]);
    let missing = directory.path().join("does-not-exist");
    let log = expect_start_failure(&serve_args(&missing, &tokens, &[]), &[]);
    assert!(!log.trim().is_empty(), "no message");
}

/// Issue 24: the message named the file's cause twice ("... (os error 2): ... (os
/// error 2)").
#[test]
fn issue_24_a_missing_tokens_file_names_its_cause_once() {
    let (directory, snapshots, _tokens) = write_snapshot(&[]);
    let missing = directory.path().join("no-tokens.json");
    let log = expect_start_failure(&serve_args(&snapshots, &missing, &[]), &[]);
    let message = log
        .lines()
        .find(|line| line.contains("cannot read the tokens file"))
        .unwrap_or_else(|| panic!("no message naming the tokens file:\n{log}"));
    assert!(message.contains("no-tokens.json"), "{message}");
    assert_eq!(message.matches("(os error").count(), 1, "{message}");
}

#[test]
fn serve_with_an_empty_snapshot_directory_serves_no_records() {
    let (_directory, snapshots, tokens) = write_snapshot(&[]);
    let server = Server::spawn(&serve_args(&snapshots, &tokens, &[]), &[]);
    assert!(server
        .ok(&format!("/units?{WINDOW}&direction=input,output"))
        .data
        .is_empty());
    assert!(server.ok("/metrics").data.is_empty());
}

#[test]
fn serve_ignores_files_that_are_not_snapshots() {
    let line = r#"{"station_id":"ST-01","unit_serial":"OK","time_created":"2024-03-10T10:00:00Z","direction":"output"}"#;
    let garbage = "this is not json\n{\"station_id\":\"ST-IGN\"}\n";
    let files = vec![
        FileSpec::plain("a.units.jsonl", line),
        FileSpec::plain("notes.txt", garbage),
        FileSpec::plain("data.jsonl", garbage),
        FileSpec::plain("x.units.json", garbage),
        FileSpec::plain("a.units.jsonl.bak", garbage),
        FileSpec::plain("a.metrics.jsonl.zip", garbage),
        FileSpec::plain("sub/readme.md", garbage),
    ];
    let (_directory, snapshots, tokens) = write_snapshot(&files);
    let server = Server::spawn(&serve_args(&snapshots, &tokens, &[]), &[]);
    let envelope = server.ok(&format!("/units?{WINDOW}"));
    assert_eq!(envelope.data.len(), 1);
    assert_eq!(envelope.data[0]["unit_serial"], "OK");
    assert!(server.ok(&format!("/metrics?{WINDOW}")).data.is_empty());
    assert_exit_code(&check_snapshots(&snapshots), 0);
}

// ---------------------------------------------------------------------------
// check
// ---------------------------------------------------------------------------

#[test]
fn check_on_a_valid_snapshot_exits_0_and_prints_counts_per_file() {
    let fixture = Fixture::main();
    let output = check_snapshots(&fixture.snapshots);
    assert_exit_code(&output, 0);
    let stdout = text(&output.stdout);
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for record in &fixture.records {
        *counts.entry(record.relative_path.as_str()).or_default() += 1;
    }
    for (relative_path, count) in counts {
        let name = relative_path.rsplit('/').next().unwrap();
        let line = stdout
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("no count line for {relative_path}:\n{stdout}"));
        let stripped = line
            .replace(&path_string(&fixture.snapshots.join(relative_path)), "")
            .replace(relative_path, "")
            .replace(name, "");
        let numbers: Vec<&str> = stripped
            .split(|c: char| !c.is_ascii_digit())
            .filter(|x| !x.is_empty())
            .collect();
        assert!(
            numbers.contains(&count.to_string().as_str()),
            "count {count} of {relative_path} not on its line: {line}"
        );
    }
}

#[test]
fn check_with_invalid_lines_exits_1_and_prints_every_path_line_reason() {
    let (files, invalid) = invalid_files();
    let (_directory, snapshots, _tokens) = write_snapshot(&files);
    let output = check_snapshots(&snapshots);
    assert_exit_code(&output, 1);
    let stdout = text(&output.stdout);
    assert_reports(&stdout, &snapshots, &invalid, &VALID_LINES, true);
}

#[test]
fn check_prints_every_invalid_line_even_beyond_20() {
    let many: String = (0..25).map(|_| "{bad\n").collect();
    let (_directory, snapshots, _tokens) =
        write_snapshot(&[FileSpec::plain("many.units.jsonl", many)]);
    let output = check_snapshots(&snapshots);
    assert_exit_code(&output, 1);
    let stdout = text(&output.stdout);
    let invalid: Vec<(&str, usize)> = (1..=25).map(|n| ("many.units.jsonl", n)).collect();
    assert_reports(&stdout, &snapshots, &invalid, &[], true);
}

#[test]
fn check_on_a_missing_directory_exits_2() {
    let directory = temporary_directory();
    assert_exit_code(&check_snapshots(&directory.path().join("nope")), 2);
}

#[test]
fn check_on_an_empty_directory_exits_0() {
    let directory = temporary_directory();
    assert_exit_code(&check_snapshots(directory.path()), 0);
}

#[test]
fn check_reads_the_snapshot_directory_from_env() {
    let (files, invalid) = invalid_files();
    let (_directory, snapshots, _tokens) = write_snapshot(&files);
    let output = run(
        &["check"],
        None,
        &[("STQ_SNAPSHOTS", &path_string(&snapshots))],
        TIMEOUT,
    );
    assert_exit_code(&output, 1);
    let stdout = text(&output.stdout);
    assert_reports(&stdout, &snapshots, &invalid, &VALID_LINES, true);
    // the flag wins over the variable
    let directory = temporary_directory();
    let output = run(
        &["check", "--snapshots", &path_string(directory.path())],
        None,
        &[("STQ_SNAPSHOTS", &path_string(&snapshots))],
        TIMEOUT,
    );
    assert_exit_code(&output, 0);
}

// ---------------------------------------------------------------------------
// hash-token
// ---------------------------------------------------------------------------

fn hash_token(input: &[u8]) -> String {
    let output = run(&["hash-token"], Some(input), &[], TIMEOUT);
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr: {}",
        text(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
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
    let fixture = Fixture::main();
    let tokens = fixture.directory.path().join("hashed-tokens.json");
    let body = json!({"tokens": [{"name": "t", "sha256": hash.trim_end(), "stations": ["ST-03"]}]});
    std::fs::write(&tokens, body.to_string()).unwrap();
    let server = Server::spawn(&serve_args(&fixture.snapshots, &tokens, &[]), &[]);
    let envelope = server.get(&format!("/metrics?{WINDOW}"), Some(token)).ok();
    assert_records(
        &envelope.data,
        &fixture.expect(&Query::metrics().scope(&["ST-03"])),
        "hashed token",
    );
    server.get("/metrics", Some(OPS)).error(401, "unauthorized");
}

// ---------------------------------------------------------------------------
// Environment variables
// ---------------------------------------------------------------------------

#[test]
fn env_max_records_configures_serve() {
    let fixture = Fixture::main();
    let server = Server::spawn(
        &serve_args(&fixture.snapshots, &fixture.tokens, &[]),
        &[("STQ_MAX_RECORDS", "2")],
    );
    let details = server
        .get(&format!("/units?{WINDOW}"), Some(OPS))
        .error(400, "result_too_large");
    assert_eq!(details, json!({"max_records": 2}));
    server
        .get(&format!("/units?{WINDOW}&limit=3"), Some(OPS))
        .error(400, "invalid_parameter");
}

#[test]
fn max_records_flag_beats_env() {
    let fixture = Fixture::main();
    let server = Server::spawn(
        &serve_args(
            &fixture.snapshots,
            &fixture.tokens,
            &["--max-records", "50"],
        ),
        &[("STQ_MAX_RECORDS", "2")],
    );
    let envelope = server.ok(&format!("/units?{WINDOW}"));
    assert_records(&envelope.data, &fixture.expect(&Query::units()), "flag 50");
    server.ok(&format!("/units?{WINDOW}&limit=50"));
    let details = server
        .get(&format!("/units?{WINDOW}&limit=51"), Some(OPS))
        .error(400, "invalid_parameter");
    assert_eq!(details, json!({"parameter": "limit", "value": "51"}));
}

#[test]
fn env_max_stations_configures_serve_and_flag_beats_it() {
    let fixture = Fixture::main();
    let server = Server::spawn(
        &serve_args(&fixture.snapshots, &fixture.tokens, &[]),
        &[("STQ_MAX_STATIONS", "1")],
    );
    server
        .get(
            &format!("/units?{WINDOW}&station_ids=ST-01,ST-02"),
            Some(OPS),
        )
        .error(400, "too_many_stations");
    server.ok(&format!("/units?{WINDOW}&station_ids=ST-01,ST-01"));
    drop(server);
    let server = Server::spawn(
        &serve_args(
            &fixture.snapshots,
            &fixture.tokens,
            &["--max-stations", "2"],
        ),
        &[("STQ_MAX_STATIONS", "1")],
    );
    server.ok(&format!("/units?{WINDOW}&station_ids=ST-01,ST-02"));
    server
        .get(
            &format!("/units?{WINDOW}&station_ids=ST-01,ST-02,ST-03"),
            Some(OPS),
        )
        .error(400, "too_many_stations");
}

#[test]
fn serve_reads_listen_snapshots_tokens_and_shards_from_env() {
    let fixture = Fixture::main();
    let server = Server::spawn(
        &["serve".to_string()],
        &[
            ("STQ_LISTEN", "127.0.0.1:0"),
            ("STQ_SNAPSHOTS", &path_string(&fixture.snapshots)),
            ("STQ_TOKENS", &path_string(&fixture.tokens)),
            ("STQ_SHARDS", "2"),
        ],
    );
    let envelope = server.ok(&format!("/units?{WINDOW}&direction=input,output"));
    assert_records(
        &envelope.data,
        &fixture.expect(&Query::units().both()),
        "all from env",
    );
}

#[test]
fn listen_flag_beats_env() {
    let fixture = Fixture::main();
    // an address that cannot be bound in the env; the flag's port 0 must be used
    let server = Server::spawn(
        &serve_args(&fixture.snapshots, &fixture.tokens, &[]),
        &[("STQ_LISTEN", "192.0.2.1:1")],
    );
    server.ok(&format!("/metrics?{WINDOW}"));
}

// ---------------------------------------------------------------------------
// gen
// ---------------------------------------------------------------------------

const GEN_END: &str = "2024-03-10T00:00:00Z";

fn gen_into(directory: &Path) {
    std::fs::create_dir_all(directory).unwrap();
    let output = run(
        &[
            "gen",
            "--out",
            &path_string(directory),
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
        output.status.success(),
        "gen failed: {}\n{}",
        text(&output.stdout),
        text(&output.stderr)
    );
}

/// Every file below `directory`, by its path relative to it.
fn tree(directory: &Path) -> BTreeMap<String, Vec<u8>> {
    fn collect(base: &Path, directory: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(directory).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                collect(base, &path, out);
            } else {
                let relative_path = path
                    .strip_prefix(base)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                out.insert(relative_path, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    collect(directory, directory, &mut out);
    out
}

fn decompressed(relative_path: &str, bytes: &[u8]) -> String {
    if relative_path.ends_with(".gz") {
        let mut text = String::new();
        flate2::read::MultiGzDecoder::new(bytes)
            .read_to_string(&mut text)
            .unwrap();
        text
    } else {
        String::from_utf8(bytes.to_vec()).unwrap()
    }
}

#[test]
fn gen_output_depends_only_on_its_flags() {
    let directory = temporary_directory();
    let (first, second) = (directory.path().join("one"), directory.path().join("two"));
    gen_into(&first);
    gen_into(&second);
    let (first_tree, second_tree) = (tree(&first), tree(&second));
    assert!(
        first_tree.keys().any(|name| name.contains(".units.jsonl")),
        "no units file: {:?}",
        first_tree.keys()
    );
    assert!(
        first_tree
            .keys()
            .any(|name| name.contains(".metrics.jsonl")),
        "no metrics file: {:?}",
        first_tree.keys()
    );
    assert_eq!(
        first_tree.keys().collect::<Vec<_>>(),
        second_tree.keys().collect::<Vec<_>>(),
        "file lists differ"
    );
    for (name, bytes) in &first_tree {
        assert!(
            bytes == &second_tree[name],
            "{name} differs between two runs with the same flags"
        );
    }
}

#[test]
fn gen_output_is_valid_and_spans_the_days_before_end() {
    let directory = temporary_directory();
    let generated = directory.path().join("gen");
    gen_into(&generated);
    assert_exit_code(&check_snapshots(&generated), 0);
    let end = instant(GEN_END);
    let start = end - DAY;
    let mut units = 0usize;
    let mut stations = BTreeSet::new();
    for (relative_path, bytes) in tree(&generated) {
        let is_units = relative_path.contains(".units.jsonl");
        if !is_units && !relative_path.contains(".metrics.jsonl") {
            continue;
        }
        for line in decompressed(&relative_path, &bytes).lines() {
            if line.trim().is_empty() {
                continue;
            }
            let record: Value = serde_json::from_str(line).unwrap();
            let at = instant(record["time_created"].as_str().unwrap());
            assert!(
                start <= at && at < end,
                "{relative_path}: {} outside [end - 1 day, end)",
                record["time_created"]
            );
            stations.insert(record["station_id"].as_str().unwrap().to_string());
            if is_units {
                units += 1;
            }
        }
    }
    assert!(units > 0);
    assert!(!stations.is_empty() && stations.len() <= 3, "{stations:?}");
    // and it is served
    let tokens = directory.path().join("tokens.json");
    std::fs::write(&tokens, tokens_json()).unwrap();
    let server = Server::spawn(&serve_args(&generated, &tokens, &[]), &[]);
    let envelope = server.ok(&format!(
        "/units?to={GEN_END}&direction=input,output&limit=100000"
    ));
    assert_eq!(envelope.data.len(), units);
}

// --- --cursor-key-file (CONTRACT section 1, revision 2) ----------------------------

/// Issue 11: a key file under 32 bytes, or one that cannot be read, stops the
/// start with a message that names the file.
#[test]
fn issue_11_a_short_or_missing_cursor_key_file_is_a_start_up_error() {
    let (_directory, snapshots, tokens) = write_snapshot(&main_files(now_seconds()));
    let keys = temporary_directory();
    let short = keys.path().join("short.key");
    std::fs::write(&short, [7u8; 31]).unwrap();
    let missing = keys.path().join("missing.key");
    for (path, needle) in [(&short, "at least 32 bytes"), (&missing, "cannot read")] {
        let path = path_string(path);
        let log = expect_start_failure(
            &serve_args(&snapshots, &tokens, &["--cursor-key-file", &path]),
            &[],
        );
        assert!(log.contains(&path) && log.contains(needle), "{log}");
    }
}

/// Issue 11: two servers given the same key file accept each other's cursors, also
/// at other generations; two without one (each with a random key) refuse them.
#[test]
fn issue_11_servers_sharing_a_cursor_key_file_accept_each_others_cursors() {
    let fixture = Fixture::main();
    let keys = temporary_directory();
    let key = keys.path().join("cursor.key");
    std::fs::write(&key, b"a secret of more than thirty-two bytes, shared").unwrap();
    let key = path_string(&key);
    let path = format!("{}&limit=2", units_all());
    for (flags, accepted) in [
        (&["--cursor-key-file", key.as_str()][..], true),
        (&[][..], false),
    ] {
        let first = Server::start(&fixture, flags);
        let second = Server::start(&fixture, flags);
        // Generations differ between replicas; cursors do not name them.
        second.signal("HUP");
        second.wait_for_generation_after(1);
        let cursor = first
            .ok(&path)
            .cursor()
            .expect("a first page with more to come");
        let next = format!("{path}&cursor={}", percent_encode(&cursor));
        if accepted {
            assert_eq!(second.ok(&next).data, first.ok(&next).data);
        } else {
            second.get(&next, Some(OPS)).error(400, "invalid_cursor");
        }
    }
}

/// The count of records and of sealed ones on the last line of a server's log that
/// holds `marker` (`stq ready: `, `reloaded: `).
fn logged_counts(log: &[String], marker: &str) -> (u64, u64) {
    let line = (log.iter().rev())
        .find(|line| line.contains(marker))
        .unwrap_or_else(|| panic!("no {marker:?} line in {log:?}"));
    let number_before = |needle: &str| -> u64 {
        let end = line
            .find(needle)
            .unwrap_or_else(|| panic!("{needle:?} in {line}"));
        let start = line[..end].rfind([' ', '(']).map_or(0, |at| at + 1);
        line[start..end].parse().unwrap()
    };
    (number_before(" records ("), number_before(" sealed)"))
}

/// Issue 22: the ready line, and a reload's, say how many records are sealed, so
/// that an operator sees what `--hot` does: none with `--hot all`; with `--hot
/// 1s`, each station's records before the four-hour period (counted from the
/// epoch) of its newest record but a second, exactly (the fixture has records near
/// the time it is written, so the count depends on the hour). When the suite runs again with
/// `STQ_TEST_HOT` (`.ci/run`), the shared server is seen to seal too, so that pass
/// reads sealed blocks and is not the first pass again.
#[test]
fn issue_22_the_ready_line_counts_sealed_records() {
    const PERIOD: i128 = 4 * 3600;
    let fixture = Fixture::main();
    let mut newest: BTreeMap<&str, i128> = BTreeMap::new();
    for record in &fixture.records {
        let station = newest.entry(record.text("station_id")).or_insert(i128::MIN);
        *station = (*station).max(record.at);
    }
    let expected = (fixture.records.iter())
        .filter(|record| {
            let seconds = (newest[record.text("station_id")].div_euclid(1_000_000_000)) - 1;
            record.at < seconds.div_euclid(PERIOD) * PERIOD * 1_000_000_000
        })
        .count() as u64;
    let counts = |hot: &str| {
        let server = Server::start(&fixture, &["--hot", hot]);
        server.wait_for_log("stq ready: ", 1);
        let ready = logged_counts(&server.log(), "stq ready: ");
        server.signal("HUP");
        server.wait_for_log("reloaded: ", 1);
        assert_eq!(logged_counts(&server.log(), "reloaded: "), ready);
        ready
    };
    let records = fixture.records.len() as u64;
    assert_eq!(counts("all"), (records, 0));
    assert!(expected > 0, "the fixture has records to seal");
    assert_eq!(counts("1s"), (records, expected));
    if std::env::var_os("STQ_TEST_HOT").is_some() {
        let shared = server();
        shared.wait_for_log("stq ready: ", 1);
        let (_, sealed) = logged_counts(&shared.log(), "stq ready: ");
        assert!(sealed > 0, "the shared server sealed nothing");
    }
}
