//! Issue 5, "stq holds under hostile input": hostile snapshot files (CONTRACT sections
//! 2 and 8). The corpus is `tests/hostile/` (its README tables every case) plus two
//! cases made at run time because they are large: 10 MiB lines, and 100 000-deep
//! nesting. Each case is seen four ways:
//!
//! - `stq check` prints every invalid line as `path:line: reason` and exits 1;
//! - `stq serve --on-invalid fail` exits 1 printing the very same lines;
//! - `stq serve --on-invalid skip` starts, counts the lines in `/readyz`
//!   `skipped_lines`, logs each, and serves exactly the good lines of the same file;
//! - a SIGHUP reload that meets the file keeps the old generation serving and logs
//!   each line.
//!
//! `path` is the snapshot directory joined with the file's relative path, and line
//! numbers count lines after decompression. A reason must be short, even for a
//! 10 MiB line. Last, a file that vanishes under a reload (a dangling symlink), and
//! the neighbours a directory walk can meet (a directory or a FIFO with a snapshot
//! file's name).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::common::*;
use serde_json::Value;

/// Cases land in this sub-directory of a snapshot directory, so that a reported path
/// is the directory joined with a relative path of more than one part.
const CORPUS_DIRECTORY: &str = "corpus";

/// The longest reason a report may carry: enough for any reason of the corpus, far
/// from the megabytes a reason that quotes a huge line would hold.
const LONGEST_REASON: usize = 200;

/// The whole time line as epoch milliseconds (CONTRACT section 4): every record of
/// the corpus, years 0000 and 9999 included.
const EVERY_TIME: &str = "from=-9223372036854775808&to=9223372036854775807";

/// The station of every good corpus record but one.
const STATION: &str = "ST-01";

/// The station of the one record whose metadata is nested 100 000 deep: a JSON
/// parser with a depth limit (the test's own) cannot read its response, so it is
/// queried on its own and checked as text.
const DEEP_STATION: &str = "ST-DEEP";
const DEEP_SERIAL: &str = "DEEP-2";

/// One hostile snapshot file and what `stq` must make of it.
struct Case {
    /// The file name; its suffix says the kind (and gzip).
    name: &'static str,
    /// `(line, reason)` of every invalid line; the reason as printed, less the
    /// ` (column N)` serde_json adds.
    invalid: &'static [(usize, &'static str)],
    /// The `unit_serial` of every valid line, each unique in the file.
    served: &'static [&'static str],
    /// The content, for cases made at run time; else the file in `tests/hostile/`.
    generated: Option<fn() -> &'static [u8]>,
}

impl Case {
    fn bytes(&self) -> Vec<u8> {
        match self.generated {
            Some(generate) => generate().to_vec(),
            None => std::fs::read(corpus_directory().join(self.name))
                .unwrap_or_else(|error| panic!("corpus file {}: {error}", self.name)),
        }
    }

    fn kind(&self) -> Kind {
        if self.name.contains(".units.jsonl") {
            Kind::Units
        } else {
            Kind::Metrics
        }
    }

    /// The record noun of `stq check`'s count line.
    fn noun(&self) -> &'static str {
        match self.kind() {
            Kind::Units => "unit",
            Kind::Metrics => "metric",
        }
    }
}

fn corpus_directory() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile")
}

const CASES: &[Case] = &[
    Case {
        name: "wrong-types.units.jsonl",
        invalid: &[
            (2, "field `station_id`: invalid type: integer `5`, expected a string"),
            (3, "field `time_created`: invalid type: integer `1710064800000`, expected a string"),
            (4, "field `direction`: invalid type: boolean `true`, expected a string"),
            (5, "field `direction` must be \"input\" or \"output\", not \"OUTPUT\""),
            (6, "field `tags`: invalid type: string \"a,b\", expected a sequence"),
            (7, "field `tags`: invalid type: integer `1`, expected a string"),
            (8, "field `tags`: invalid type: null, expected a string"),
            (9, "field `slot`: invalid type: map, expected a string"),
            (10, "field `unit_serial`: invalid type: sequence, expected a string"),
            (11, "field `station_id`: number out of range"),
            (12, "invalid type: sequence, expected a unit record object"),
            (13, "invalid type: string \"just a string\", expected a unit record object"),
            (14, "invalid type: null, expected a unit record object"),
            (15, "invalid type: integer `42`, expected a unit record object"),
        ],
        served: &["WTU-1", "WTU-2"],
        generated: None,
    },
    Case {
        name: "wrong-types.metrics.jsonl",
        invalid: &[
            (2, "field `value` must be a string or a number"),
            (3, "field `value` must be a string or a number"),
            (4, "field `value` must be a string or a number"),
            (5, "field `name`: invalid type: integer `7`, expected a string"),
            (6, "field `limit_upper` must be a string or a number"),
            (7, "field `unit`: invalid type: integer `5`, expected a string"),
            (8, "field `type`: invalid type: sequence, expected a string"),
            (9, "expected value"),
        ],
        served: &["WTM-1", "WTM-2"],
        generated: None,
    },
    Case {
        name: "missing-fields.units.jsonl",
        invalid: &[
            (1, "missing field `station_id`"),
            (2, "missing field `station_id`"),
            (3, "missing field `station_id`"),
            (4, "field `station_id` is empty"),
            (5, "missing field `time_created`"),
            (6, "missing field `time_created`"),
            (7, "missing field `direction`"),
            (8, "missing field `direction`"),
        ],
        served: &["MFU-1", "MFU-2"],
        generated: None,
    },
    Case {
        name: "missing-fields.metrics.jsonl",
        invalid: &[
            (1, "missing field `name`"),
            (2, "field `name` is empty"),
            (3, "missing field `name`"),
            (4, "missing field `station_id`"),
            (5, "missing field `time_created`"),
        ],
        served: &["MFM-1"],
        generated: None,
    },
    Case {
        name: "duplicate-keys.units.jsonl",
        invalid: &[
            (2, "duplicate field `station_id`"),
            (3, "duplicate field `station_id`"),
            (4, "duplicate field `time_created`"),
            (5, "duplicate field `direction`"),
            (6, "duplicate field `slot`"),
            (7, "duplicate field `extra`"),
            (8, "duplicate field `metadata`"),
        ],
        served: &["DKU-1", "DKU-2"],
        generated: None,
    },
    Case {
        name: "duplicate-keys.metrics.jsonl",
        invalid: &[
            (1, "duplicate field `value`"),
            (2, "duplicate field `name`"),
        ],
        served: &["DKM-1"],
        generated: None,
    },
    Case {
        name: "bad-json.units.jsonl",
        invalid: &[
            (2, "field `time_created`: EOF while parsing a string"),
            (3, "trailing characters"),
            (4, "trailing comma"),
            (5, "key must be a string"),
            (6, "expected value"),
            (7, "field `station_id`: expected value"),
            (
                8,
                "field `station_id`: control character (\\u0000-\\u001F) found while parsing a string",
            ),
            (9, "expected value"),
            (10, "field `station_id`: unexpected end of hex escape"),
            (11, "field `station_id`: lone leading surrogate in hex escape"),
            (12, "expected value"),
            (13, "trailing characters"),
            (
                14,
                "field `station_id`: control character (\\u0000-\\u001F) found while parsing a string",
            ),
            // Line 16, cut off with no line end after it, is pending, not
            // invalid (docs/api.md section 8): a writer may be half-way through.
        ],
        served: &["BJU-1", "BJU-2"],
        generated: None,
    },
    Case {
        name: "bad-times.units.jsonl",
        invalid: &[
            (3, "field `time_created` is not an RFC 3339 date-time: \"10000-01-01T00:00:00Z\""),
            (4, "field `time_created` is not an RFC 3339 date-time: \"-0001-01-01T00:00:00Z\""),
            (5, "field `time_created` is not an RFC 3339 date-time: \"2023-02-29T10:00:00Z\""),
            (6, "field `time_created` is not an RFC 3339 date-time: \"2024-03-10T24:00:00Z\""),
            (7, "field `time_created` is not an RFC 3339 date-time: \"2024-03-10T23:59:60Z\""),
            (8, "field `time_created` is not an RFC 3339 date-time: \"2024-03-10T10:00:00\""),
            (9, "field `time_created` is not an RFC 3339 date-time: \"2024-03-10 10:00:00Z\""),
            (
                10,
                "field `time_created` is not an RFC 3339 date-time: \"2024-03-10T10:00:00.1234567890Z\"",
            ),
            (11, "field `time_created` is not an RFC 3339 date-time: \"2024-03-10T10:00:00+0100\""),
            (12, "field `time_created` is not an RFC 3339 date-time: \"2024-03-10T10:00:00+24:00\""),
            (13, "field `time_created` is not an RFC 3339 date-time: \"2024-03-10T10:00:00Z \""),
            (14, "field `time_created` is not an RFC 3339 date-time: \"\""),
            (
                15,
                "field `time_created` is not an RFC 3339 date-time: \"\u{ff12}\u{ff10}\u{ff12}\u{ff14}-03-10T10:00:00Z\"",
            ),
        ],
        served: &["BTU-0000", "BTU-9999", "BTU-3"],
        generated: None,
    },
    Case {
        name: "cr-line-ends.units.jsonl",
        invalid: &[(1, "trailing characters")],
        served: &[],
        generated: None,
    },
    Case {
        name: "invalid-utf8.metrics.jsonl",
        invalid: &[
            (2, "invalid UTF-8 at byte 19"),
            (3, "invalid UTF-8 at byte 19"),
            (4, "invalid UTF-8 at byte 19"),
            (5, "invalid UTF-8 at byte 19"),
            (6, "invalid UTF-8 at byte 19"),
            (7, "invalid UTF-8 at byte 79"),
        ],
        served: &["IUM-1", "IUM-2"],
        generated: None,
    },
    Case {
        name: "truncated.units.jsonl.gz",
        invalid: &[(
            4,
            "the gzip stream is damaged or truncated: incomplete deflate stream",
        )],
        served: &["TRU-1", "TRU-2", "TRU-3"],
        generated: None,
    },
    Case {
        name: "missing-trailer.units.jsonl.gz",
        invalid: &[(
            3,
            "the gzip stream is damaged or truncated: unexpected end of file",
        )],
        served: &["MTU-1", "MTU-2"],
        generated: None,
    },
    Case {
        name: "bad-checksum.units.jsonl.gz",
        invalid: &[(
            3,
            "the gzip stream is damaged or truncated: corrupt gzip stream does not have a matching checksum",
        )],
        served: &["BCU-1", "BCU-2"],
        generated: None,
    },
    Case {
        name: "trailing-garbage.metrics.jsonl.gz",
        invalid: &[(
            3,
            "the gzip stream is damaged or truncated: invalid gzip header",
        )],
        served: &["TGM-1", "TGM-2"],
        generated: None,
    },
    Case {
        name: "not-gzip.units.jsonl.gz",
        invalid: &[(
            1,
            "the gzip stream is damaged or truncated: invalid gzip header",
        )],
        served: &[],
        generated: None,
    },
    Case {
        name: "empty.units.jsonl.gz",
        invalid: &[(
            1,
            "the gzip stream is damaged or truncated: unexpected end of file",
        )],
        served: &[],
        generated: None,
    },
    Case {
        name: "huge-lines.units.jsonl",
        invalid: &[
            (2, "expected value"),
            (3, "field `unit_serial`: EOF while parsing a string"),
        ],
        served: &["HUGE-1", "HUGE-2"],
        generated: Some(huge_lines),
    },
    Case {
        name: "deep-nesting.units.jsonl",
        invalid: &[
            (3, "expected value"),
            (4, "field `tags`: invalid type: sequence, expected a string"),
        ],
        served: &["DEEP-1", DEEP_SERIAL],
        generated: Some(deep_nesting),
    },
];

// ---------------------------------------------------------------------------
// The cases made at run time
// ---------------------------------------------------------------------------

/// The size of each huge line: 10 MiB.
const HUGE: usize = 10 * 1024 * 1024;

/// The huge `metadata` string of `HUGE-1`.
fn huge_metadata() -> String {
    "m".repeat(HUGE)
}

/// 1: a valid record whose `metadata` is a 10 MiB string; 2: 10 MiB of printable
/// garbage; 3: a 10 MiB string that never closes; 4: a small valid record, whose line
/// number shows that counting went on past lines far longer than a read block.
fn huge_lines() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let mut out = Vec::with_capacity(3 * HUGE + 1024);
        out.extend_from_slice(
            br#"{"station_id":"ST-01","unit_serial":"HUGE-1","time_created":"2024-03-10T10:20:00Z","direction":"output","metadata":""#,
        );
        out.extend_from_slice(huge_metadata().as_bytes());
        out.extend_from_slice(b"\"}\n");
        // `#` starts no JSON value; then printable ASCII from a fixed xorshift sequence.
        out.push(b'#');
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..HUGE {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            out.push(b' ' + (state % 95) as u8);
        }
        out.push(b'\n');
        out.extend_from_slice(br#"{"station_id":"ST-01","unit_serial":""#);
        out.resize(out.len() + HUGE, b'g');
        out.push(b'\n');
        out.extend_from_slice(
            br#"{"station_id":"ST-01","unit_serial":"HUGE-2","time_created":"2024-03-10T10:21:00Z","direction":"output"}"#,
        );
        out.push(b'\n');
        out
    })
}

/// How deep the nested arrays of `deep_nesting` go: far past serde_json's default
/// recursion limit of 128, and deep enough to overflow a thread's stack if any
/// step recursed once per level.
const DEPTH: usize = 100_000;

fn nested_arrays() -> String {
    "[".repeat(DEPTH) + &"]".repeat(DEPTH)
}

/// 1: a valid record with a deeply nested unknown field (skipped); 2: a valid record
/// whose `metadata` is nested that deep (returned as written); 3: nesting that never
/// closes; 4: nested `tags`.
fn deep_nesting() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let nested = nested_arrays();
        let open = "[".repeat(DEPTH);
        [
            format!(r#"{{"station_id":"ST-01","unit_serial":"DEEP-1","time_created":"2024-03-10T10:22:00Z","direction":"output","extra":{nested}}}"#),
            format!(r#"{{"station_id":"{DEEP_STATION}","unit_serial":"{DEEP_SERIAL}","time_created":"2024-03-10T10:23:00Z","direction":"output","metadata":{nested}}}"#),
            format!(r#"{{"station_id":"ST-01","time_created":"2024-03-10T10:24:00Z","direction":"output","metadata":{open}}}"#),
            format!(r#"{{"station_id":"ST-01","time_created":"2024-03-10T10:25:00Z","direction":"output","tags":{nested}}}"#),
        ]
        .iter()
        .map(|line| format!("{line}\n"))
        .collect::<String>()
        .into_bytes()
    })
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn text(bytes: &[u8]) -> String {
    strip_ansi(&String::from_utf8_lossy(bytes))
}

/// At most the first 4000 characters of `text`: a failure message must stay
/// readable even when the output quotes a 10 MiB line.
fn excerpt(text: &str) -> String {
    match text.char_indices().nth(4000) {
        Some((cut, _)) => format!("{}... [{} bytes in all]", &text[..cut], text.len()),
        None => text.to_string(),
    }
}

/// Writes the case under `snapshots/corpus/` and returns its path as reports name it.
fn place(case: &Case, snapshots: &Path) -> String {
    let directory = snapshots.join(CORPUS_DIRECTORY);
    std::fs::create_dir_all(&directory).unwrap();
    let path = directory.join(case.name);
    std::fs::write(&path, case.bytes()).unwrap();
    path_string(&path)
}

/// A panic would print this; `stq` must report bad input, never crash on it.
#[track_caller]
fn assert_no_panic(output: &str, what: &str) {
    assert!(
        !output.contains("panicked") && !output.contains("RUST_BACKTRACE"),
        "{what} panicked:\n{}",
        excerpt(output)
    );
}

/// Every `PATH:LINE: REASON` about `path` in `output`, whether it starts its line
/// (`check`, a failed start) or follows a log prefix (`skipped `, `reload: `):
/// `(line, reason, the whole output line)`.
fn reports<'a>(output: &'a str, path: &str) -> Vec<(usize, &'a str, &'a str)> {
    let marker = format!("{path}:");
    let mut found = Vec::new();
    for printed in output.lines() {
        let mut rest = printed;
        while let Some(position) = rest.find(&marker) {
            rest = &rest[position + marker.len()..];
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            // `PATH: 3 unit records, ...` is a count line, not a report.
            if digits == 0 {
                continue;
            }
            let Some(reason) = rest[digits..].strip_prefix(": ") else {
                continue;
            };
            found.push((rest[..digits].parse().unwrap(), reason, printed));
            break;
        }
    }
    found
}

/// The reason less the ` (column N)` that serde_json's reasons end with.
fn without_column(reason: &str) -> &str {
    if let Some(start) = reason.rfind(" (column ") {
        let number = &reason[start + " (column ".len()..];
        if let Some(digits) = number.strip_suffix(')') {
            if !digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit()) {
                return &reason[..start];
            }
        }
    }
    reason
}

/// Asserts that `output` reports exactly the case's invalid lines, each once, with
/// its reason, short; `prefix` is what must come right before `path` on the line
/// (`""`: the report starts the line). Returns the report lines.
#[track_caller]
fn assert_case_reports<'a>(
    case: &Case,
    output: &'a str,
    path: &str,
    prefix: &str,
    what: &str,
) -> Vec<&'a str> {
    let found = reports(output, path);
    let got: Vec<usize> = found.iter().map(|(line, _, _)| *line).collect();
    let wanted: Vec<usize> = case.invalid.iter().map(|(line, _)| *line).collect();
    assert_eq!(
        got,
        wanted,
        "{what}, {}: the reported lines differ; output:\n{}",
        case.name,
        excerpt(output)
    );
    for ((line, reason, printed), (_, expected)) in found.iter().zip(case.invalid) {
        assert!(
            reason.len() <= LONGEST_REASON,
            "{what}, {}:{line}: a reason of {} bytes: {}",
            case.name,
            reason.len(),
            excerpt(reason)
        );
        assert_eq!(
            without_column(reason),
            *expected,
            "{what}, {}:{line}: the reason",
            case.name
        );
        let location = format!("{path}:{line}: ");
        let start = printed.find(&location).unwrap();
        assert!(
            printed[..start].ends_with(prefix) && (!prefix.is_empty() || start == 0),
            "{what}, {}:{line}: `{prefix}` must come right before the path: {printed}",
            case.name
        );
    }
    found.iter().map(|(_, _, printed)| *printed).collect()
}

/// The decompressed lines of a case as far as they can be read (a damaged gzip
/// stream gives what came before the damage).
fn decompressed_lines(case: &Case) -> Vec<String> {
    let bytes = case.bytes();
    let plain = if case.name.ends_with(".gz") {
        let mut out = Vec::new();
        // `read_to_end` keeps what it read before an error; the error is the point.
        let _ = flate2::read::MultiGzDecoder::new(&bytes[..]).read_to_end(&mut out);
        out
    } else {
        bytes
    };
    plain
        .split(|byte| *byte == b'\n')
        .map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let line = line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line);
            String::from_utf8_lossy(line).into_owned()
        })
        .collect()
}

/// The record a served line must come back as: the one line of the case with that
/// `unit_serial`, rendered by the suite's reference (CONTRACT section 2).
fn expected_record(case: &Case, serial: &str) -> Value {
    let needle = format!(r#""unit_serial":"{serial}""#);
    let lines: Vec<String> = decompressed_lines(case)
        .into_iter()
        .filter(|line| line.contains(&needle))
        .collect();
    assert_eq!(lines.len(), 1, "{}: one line holds {needle}", case.name);
    render(case.kind(), &lines[0])
}

/// A snapshot directory (with the suite's tokens file beside it) holding `cases`;
/// the path of each case as reports name it.
fn snapshot_of(cases: &[&Case]) -> (tempfile::TempDir, PathBuf, PathBuf, Vec<String>) {
    let (directory, snapshots, tokens) = write_snapshot(&[]);
    let paths = cases.iter().map(|case| place(case, &snapshots)).collect();
    (directory, snapshots, tokens, paths)
}

// ---------------------------------------------------------------------------
// The corpus itself
// ---------------------------------------------------------------------------

#[test]
fn every_corpus_file_is_a_case_and_every_case_is_in_the_readme() {
    let committed: BTreeSet<String> = std::fs::read_dir(corpus_directory())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "README.md")
        .collect();
    let cases: BTreeSet<String> = CASES
        .iter()
        .filter(|case| case.generated.is_none())
        .map(|case| case.name.to_string())
        .collect();
    assert_eq!(
        committed, cases,
        "files in tests/hostile/ vs committed cases"
    );
    let readme = std::fs::read_to_string(corpus_directory().join("README.md")).unwrap();
    for case in CASES {
        assert!(
            readme.contains(&format!("`{}`", case.name)),
            "tests/hostile/README.md does not table {}",
            case.name
        );
    }
}

// ---------------------------------------------------------------------------
// (a) stq check, (b) a start with --on-invalid fail
// ---------------------------------------------------------------------------

#[test]
fn check_reports_every_bad_line_as_path_line_reason_and_exits_1() {
    for case in CASES {
        let (_directory, snapshots, _tokens, paths) = snapshot_of(&[case]);
        let path = &paths[0];
        let output = check_snapshots(&snapshots);
        let stdout = text(&output.stdout);
        let stderr = text(&output.stderr);
        // 1 = invalid lines; 101 would be a panic, 2 an unreadable snapshot.
        assert_eq!(
            output.status.code(),
            Some(1),
            "{}: stdout:\n{}\nstderr:\n{}",
            case.name,
            excerpt(&stdout),
            excerpt(&stderr)
        );
        assert_no_panic(&format!("{stdout}{stderr}"), "stq check");
        assert_case_reports(case, &stdout, path, "", "stq check");
        let count_line = format!(
            "{path}: {} {} records, {} invalid",
            case.served.len(),
            case.noun(),
            case.invalid.len()
        );
        assert!(
            stdout.lines().any(|line| line == count_line),
            "{}: no `{count_line}` in:\n{}",
            case.name,
            excerpt(&stdout)
        );
    }
}

#[test]
fn a_start_with_on_invalid_fail_exits_1_printing_the_lines_check_prints() {
    for case in CASES {
        let (_directory, snapshots, tokens, paths) = snapshot_of(&[case]);
        let path = &paths[0];
        let check_output = text(&check_snapshots(&snapshots).stdout);
        let checked = assert_case_reports(case, &check_output, path, "", "stq check");
        let args = serve_args(&snapshots, &tokens, &["--on-invalid", "fail"]);
        let log = match Server::try_spawn(&args, &[]) {
            Started::Ready(server) => panic!(
                "{}: the server started but must not:\n{}",
                case.name,
                excerpt(&server.log().join("\n"))
            ),
            Started::Exited(code, log) => {
                assert_eq!(code, Some(1), "{}: stderr:\n{}", case.name, excerpt(&log));
                log
            }
        };
        assert_no_panic(&log, "stq serve --on-invalid fail");
        assert!(
            !log.contains("listening on"),
            "{}: {}",
            case.name,
            excerpt(&log)
        );
        let printed = assert_case_reports(case, &log, path, "", "stq serve --on-invalid fail");
        assert_eq!(printed, checked, "{}: serve and check differ", case.name);
    }
}

// ---------------------------------------------------------------------------
// (c) a start with --on-invalid skip
// ---------------------------------------------------------------------------

#[test]
fn a_start_with_on_invalid_skip_counts_the_bad_lines_and_serves_the_good_ones() {
    let cases: Vec<&Case> = CASES.iter().collect();
    let (_directory, snapshots, tokens, paths) = snapshot_of(&cases);
    let server = Server::spawn(
        &serve_args(&snapshots, &tokens, &["--on-invalid", "skip"]),
        &[("STQ_TEST_COLD", "1")],
    );

    let count = |kind: Kind| -> usize {
        CASES
            .iter()
            .filter(|case| case.kind() == kind)
            .map(|case| case.served.len())
            .sum()
    };
    let skipped: usize = CASES.iter().map(|case| case.invalid.len()).sum();
    let readiness = server.readiness();
    assert_eq!(readiness["skipped_lines"], skipped, "{readiness}");
    // bad-json.units.jsonl's line 16.
    assert_eq!(readiness["pending_lines"], 1, "{readiness}");
    assert_eq!(readiness["units"], count(Kind::Units), "{readiness}");
    assert_eq!(readiness["metrics"], count(Kind::Metrics), "{readiness}");
    assert_eq!(readiness["stations"], 2, "{readiness}");

    let log = server.log().join("\n");
    assert_no_panic(&log, "stq serve --on-invalid skip");
    for (case, path) in CASES.iter().zip(&paths) {
        assert_case_reports(case, &log, path, "skipped ", "the skip log");
    }

    // Exactly the good lines, each as the reference renders it.
    for kind in [Kind::Units, Kind::Metrics] {
        let mut query = format!("{}?station_ids={STATION}&{EVERY_TIME}", kind.path());
        if kind == Kind::Units {
            query.push_str("&direction=input,output");
        }
        let envelope = server.ok(&query);
        let got: BTreeMap<String, Value> = envelope
            .data
            .iter()
            .map(|record| {
                (
                    record["unit_serial"].as_str().unwrap().to_string(),
                    record.clone(),
                )
            })
            .collect();
        assert_eq!(
            got.len(),
            envelope.data.len(),
            "{query}: a serial came twice"
        );
        let mut wanted = BTreeMap::new();
        for case in CASES.iter().filter(|case| case.kind() == kind) {
            for serial in case.served.iter().filter(|serial| **serial != DEEP_SERIAL) {
                wanted.insert(serial.to_string(), expected_record(case, serial));
            }
        }
        let got_serials: Vec<&String> = got.keys().collect();
        let wanted_serials: Vec<&String> = wanted.keys().collect();
        assert_eq!(got_serials, wanted_serials, "{query}: the records served");
        for (serial, record) in &wanted {
            assert!(
                &got[serial] == record,
                "{query}: {serial} differs:\n got  {}\n want {}",
                excerpt(&got[serial].to_string()),
                excerpt(&record.to_string())
            );
        }
        // What a parse into `Value` would hide: text kept exactly as written.
        let body = &envelope.response.body;
        let written: &[&str] = match kind {
            Kind::Units => &[
                r#""metadata":12345678901234567890123.4500"#,
                r#""metadata":{"a":1,"a":2}"#,
            ],
            Kind::Metrics => &[r#""value":"1e999999""#, r#""limit_lower":"-0.0""#],
        };
        for text in written {
            assert!(body.contains(text), "{query}: {text} is not in the body");
        }
    }
    let huge = server.ok(&format!("/units?serial_number=HUGE-1&{EVERY_TIME}"));
    assert_eq!(huge.data.len(), 1);
    assert!(huge.data[0]["metadata"] == Value::String(huge_metadata()));

    // 100 000-deep metadata comes back as written (checked as text: too deep for
    // the test's own JSON parser).
    let deep = server.get(
        &format!("/units?station_ids={DEEP_STATION}&{EVERY_TIME}"),
        Some(OPS),
    );
    assert_eq!(deep.status, 200, "{}", excerpt(&deep.context()));
    let metadata = format!(r#""metadata":{}}}]"#, nested_arrays());
    assert!(
        deep.body.contains(&metadata),
        "the deep metadata is not returned as written: {}",
        excerpt(&deep.body)
    );
}

// ---------------------------------------------------------------------------
// (d) a reload that meets a bad file
// ---------------------------------------------------------------------------

/// Two good records of a fixture that the reloads must keep serving.
fn base_files() -> Vec<FileSpec> {
    vec![FileSpec::plain(
        "base.units.jsonl",
        [
            r#"{"station_id":"ST-01","unit_serial":"BASE-1","time_created":"2024-03-10T09:00:00Z","direction":"output"}"#,
            r#"{"station_id":"ST-02","unit_serial":"BASE-2","time_created":"2024-03-10T09:30:00Z","direction":"output"}"#,
        ]
        .join("\n"),
    )]
}

/// Issue 21 (CONTRACT revision 3, section 8): under `fail`, a reload that meets a
/// bad file holds back that file alone: the generation advances, the file serves
/// nothing (it is new), `/readyz` counts it, each line is logged, and once the
/// file is gone it is no longer held.
#[test]
fn a_reload_meeting_a_bad_file_holds_it_back_and_logs_each_line() {
    let fixture = Fixture::from_files(&base_files());
    let server = Server::start(&fixture, &["--on-invalid", "fail"]);
    let before = server.readiness();
    let all_units = format!("/units?{WINDOW}&direction=input,output");
    let expected = fixture.expect(&Query::units().both());
    assert_eq!(expected.len(), 2);
    assert_records(&server.ok(&all_units).data, &expected, "generation 1");

    let mut generation = 1;
    for case in CASES {
        let path = place(case, &fixture.snapshots);
        server.signal("HUP");
        let held = server.wait_for_generation_after(generation);
        generation = generation_of(&held);
        for field in ["units", "metrics", "stations", "skipped_lines"] {
            assert_eq!(held[field], before[field], "{}: {field}: {held}", case.name);
        }
        assert_eq!(held["held_files"], 1, "{}: {held}", case.name);
        assert_records(
            &server.ok(&all_units).data,
            &expected,
            &format!("while {} is held", case.name),
        );
        server.wait_for_log("holding back 1 file(s)", generation as usize - 1);
        let log = server.log().join("\n");
        assert_case_reports(case, &log, &path, "reload: ", "the reload log");
        std::fs::remove_file(&path).unwrap();
    }
    let log = server.log().join("\n");
    assert_no_panic(&log, "a reload");

    // The last bad file gone: nothing held, the server still reloads.
    server.signal("HUP");
    let after = server.wait_for_generation_after(generation);
    assert_eq!(after["held_files"], 0, "{after}");
    assert_records(&server.ok(&all_units).data, &expected, "at the end");
}

// ---------------------------------------------------------------------------
// A file that vanishes, and what else a directory walk meets
// ---------------------------------------------------------------------------

#[test]
fn a_file_that_vanishes_fails_the_reload_cleanly_and_names_its_path() {
    let fixture = Fixture::from_files(&base_files());
    let all_units = format!("/units?{WINDOW}&direction=input,output");

    // A file found by name whose content is gone when read: a symbolic link whose
    // target is deleted. Deleting a plain file between the SIGHUP and the scan is a
    // race no test can win every time; the dangling link fails the same read, always
    // (and, unlike `chmod 000`, also for root).
    let elsewhere = fixture.directory.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let target = elsewhere.join("vanishing.units.jsonl");
    std::fs::write(
        &target,
        r#"{"station_id":"ST-03","unit_serial":"VANISHING-1","time_created":"2024-03-10T11:00:00Z","direction":"output"}"#,
    )
    .unwrap();
    let link = fixture.snapshots.join("vanishing.units.jsonl");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let link_path = path_string(&link);

    let server = Server::start(&fixture, &[]);
    let before = server.readiness();
    assert_eq!(before["units"], 3, "{before}");
    let generation_1 = server.ok(&all_units).data;
    assert_eq!(
        serials(&generation_1),
        ["BASE-1", "BASE-2", "VANISHING-1"],
        "generation 1 reads through the link"
    );

    std::fs::remove_file(&target).unwrap();
    server.reload_expecting_failure();
    assert_eq!(
        server.readiness(),
        before,
        "a failed reload changed /readyz"
    );
    assert_records(
        &server.ok(&all_units).data,
        &generation_1,
        "generation 1 after the failed reload",
    );
    let log = server.log();
    let failed = log
        .iter()
        .find(|line| line.contains("reload failed"))
        .unwrap();
    assert!(
        failed.contains(&link_path) && failed.contains("still serving generation 1"),
        "the failure must name {link_path}: {failed}"
    );
    assert_no_panic(&log.join("\n"), "a reload");

    // The same directory from the command line: a clear error naming the path, and
    // exit 2 (unreadable), not 1 (invalid lines) nor a panic.
    let output = check_snapshots(&fixture.snapshots);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr:\n{stderr}");
    assert!(
        stderr.contains(&link_path),
        "check must name {link_path}:\n{stderr}"
    );
    assert_no_panic(&stderr, "stq check");
    match Server::try_spawn(&serve_args(&fixture.snapshots, &fixture.tokens, &[]), &[]) {
        Started::Ready(_) => panic!("a server started on a dangling link"),
        Started::Exited(code, log) => {
            assert_eq!(code, Some(1), "{log}");
            assert!(
                log.contains(&link_path),
                "serve must name {link_path}:\n{log}"
            );
            assert_no_panic(&log, "stq serve");
        }
    }

    // A directory with a snapshot file's name is no file (CONTRACT section 2: files
    // are loaded, directories walked): the reload succeeds without those records.
    std::fs::remove_file(&link).unwrap();
    std::fs::create_dir(&link).unwrap();
    server.signal("HUP");
    let after = server.wait_for_generation_after(1);
    assert_eq!(after["units"], 2, "{after}");
    assert_eq!(serials(&server.ok(&all_units).data), ["BASE-1", "BASE-2"]);

    // A FIFO with a snapshot file's name would block a reader for ever: it is not
    // a regular file, so it is not opened, and the reload completes.
    let fifo = fixture.snapshots.join("waiting.metrics.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo {}", fifo.display());
    server.signal("HUP");
    let after = server.wait_for_generation_after(2);
    assert_eq!(after["units"], 2, "{after}");
    assert_eq!(after["metrics"], 0, "{after}");
    let output = check_snapshots(&fixture.snapshots);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
}

// ---------------------------------------------------------------------------
// A bug this corpus found
// ---------------------------------------------------------------------------

/// The reasons of three kinds of invalid line quoted the bad value in full: a 10 MiB
/// `time_created`, `direction` or `tags` string came back as a 10 MiB reason, on
/// stdout, in the start-up error and in every log line (issue 5).
#[test]
fn a_ten_megabyte_bad_value_is_not_quoted_in_full_by_its_reason() {
    let huge = "x".repeat(HUGE);
    let lines = [
        format!(r#"{{"station_id":"ST-01","time_created":"{huge}","direction":"output"}}"#),
        format!(
            r#"{{"station_id":"ST-01","time_created":"2024-03-10T10:00:00Z","direction":"{huge}"}}"#
        ),
        format!(
            r#"{{"station_id":"ST-01","time_created":"2024-03-10T10:00:00Z","direction":"output","tags":"{huge}"}}"#
        ),
    ];
    let text_of_file: String = lines.iter().map(|line| format!("{line}\n")).collect();
    let (_directory, snapshots, _tokens) =
        write_snapshot(&[FileSpec::plain("huge-values.units.jsonl", text_of_file)]);
    let output = check_snapshots(&snapshots);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1));
    let path = path_string(&snapshots.join("huge-values.units.jsonl"));
    let found = reports(&stdout, &path);
    assert_eq!(found.len(), 3, "{}", excerpt(&stdout));
    for (line, reason, _) in found {
        assert!(
            reason.len() <= LONGEST_REASON,
            "{path}:{line}: a reason of {} bytes: {}",
            reason.len(),
            excerpt(reason)
        );
    }
}
