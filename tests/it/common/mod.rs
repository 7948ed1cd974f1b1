//! Shared helpers of the black-box suite: the hand-made snapshot fixture, a tiny
//! reference filter over it, the server process guard, an HTTP helper that returns
//! every status, and the assertions of CONTRACT section 7 (envelope, error body).
//!
//! Everything here talks to the `stq` binary from the outside: files on disk,
//! a child process, and real HTTP.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant as StdInstant, SystemTime, UNIX_EPOCH};

pub mod s3;
pub mod sse;
pub mod summary;

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

// ---------------------------------------------------------------------------
// Tokens
// ---------------------------------------------------------------------------

/// `"*"`: every station.
pub const OPS: &str = "tok-ops-0001";
/// A second token with the same `"*"` scope.
pub const OPS2: &str = "tok-ops-0002";
/// `["ST-01", "ST-02"]`.
pub const LINE: &str = "tok-line-0001";
/// `["ST-03"]`.
pub const ST03: &str = "tok-st03-0001";

pub fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The tokens file of the suite.
pub fn tokens_json() -> String {
    serde_json::json!({
        "tokens": [
            {"name": "ops", "sha256": sha256_hex(OPS), "stations": "*"},
            {"name": "ops-2", "sha256": sha256_hex(OPS2), "stations": "*"},
            {"name": "line", "sha256": sha256_hex(LINE), "stations": ["ST-01", "ST-02"]},
            {"name": "st03", "sha256": sha256_hex(ST03), "stations": ["ST-03"]}
        ]
    })
    .to_string()
}

// ---------------------------------------------------------------------------
// Time (test-side reference arithmetic)
// ---------------------------------------------------------------------------

pub const SECOND: i128 = 1_000_000_000;
pub const HOUR: i128 = 3600 * SECOND;
pub const DAY: i128 = 24 * HOUR;

// Howard Hinnant's civil-calendar algorithms: eras of 400 years, and years that
// start on 1 March so that the leap day falls at the end of a year.

pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = if year >= 0 { year } else { year - 399 } / 400;
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = if days >= 0 { days } else { days - 146_096 } / 146_097;
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let year = year_of_era + era * 400;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    (if month <= 2 { year + 1 } else { year }, month, day)
}

/// Nanoseconds since the Unix epoch of a date-time the suite itself writes
/// (RFC 3339 with `T`/`Z` in either case), or of a bare integer (epoch ms).
pub fn instant(written: &str) -> i128 {
    let text = written.trim();
    if !text.is_empty()
        && text
            .trim_start_matches('-')
            .bytes()
            .all(|b| b.is_ascii_digit())
    {
        return text.parse::<i128>().expect("epoch ms") * 1_000_000;
    }
    let number = |start: usize, end: usize| -> i64 {
        text[start..end]
            .parse()
            .unwrap_or_else(|_| panic!("bad test date-time {text}"))
    };
    let (year, month, day, hour, minute, second) = (
        number(0, 4),
        number(5, 7),
        number(8, 10),
        number(11, 13),
        number(14, 16),
        number(17, 19),
    );
    let mut rest = &text[19..];
    let mut nanoseconds: i128 = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits: String = fraction
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        let mut padded = digits.clone();
        while padded.len() < 9 {
            padded.push('0');
        }
        nanoseconds = padded[..9].parse().unwrap();
        rest = &fraction[digits.len()..];
    }
    let offset_seconds: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            let offset_hours: i64 = rest[1..3].parse().unwrap();
            let offset_minutes: i64 = rest[4..6].parse().unwrap();
            sign * (offset_hours * 3600 + offset_minutes * 60)
        }
    };
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second
        - offset_seconds;
    seconds as i128 * SECOND + nanoseconds
}

pub fn now_seconds() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `YYYY-MM-DDTHH:MM:SSZ` of Unix seconds.
pub fn rfc3339_from_seconds(seconds: i64) -> String {
    let days = seconds.div_euclid(86_400);
    let second_of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

/// Checks `YYYY-MM-DDTHH:MM:SS.mmmZ` and returns its Unix milliseconds.
pub fn parse_meta_timestamp(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    if bytes.len() != 24 {
        return None;
    }
    let shape = "dddd-dd-ddTdd:dd:dd.dddZ".as_bytes();
    for (byte, expected) in bytes.iter().zip(shape) {
        let fits = if *expected == b'd' {
            byte.is_ascii_digit()
        } else {
            byte == expected
        };
        if !fits {
            return None;
        }
    }
    let number = |start: usize, end: usize| -> i64 { text[start..end].parse().unwrap() };
    let (month, day, hour, minute, second) = (
        number(5, 7),
        number(8, 10),
        number(11, 13),
        number(14, 16),
        number(17, 19),
    );
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let seconds =
        days_from_civil(number(0, 4), month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    Some(seconds * 1000 + number(20, 23))
}

// ---------------------------------------------------------------------------
// The fixture
// ---------------------------------------------------------------------------

/// The window that holds every 2024 record of the main fixture.
pub const WINDOW_FROM: &str = "2024-03-01T00:00:00Z";
pub const WINDOW_TO: &str = "2024-04-01T00:00:00Z";
/// `from=WINDOW_FROM&to=WINDOW_TO`
pub const WINDOW: &str = "from=2024-03-01T00:00:00Z&to=2024-04-01T00:00:00Z";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Units,
    Metrics,
}

impl Kind {
    pub fn path(self) -> &'static str {
        match self {
            Kind::Units => "/units",
            Kind::Metrics => "/metrics",
        }
    }
}

/// One file of a fixture: its path relative to the snapshot directory, its
/// decompressed text, and, for a `.gz` file, the byte offsets where a new gzip
/// member starts.
pub struct FileSpec {
    pub relative_path: String,
    pub text: String,
    pub gz_members: Option<Vec<usize>>,
}

impl FileSpec {
    pub fn plain(relative_path: &str, text: impl Into<String>) -> FileSpec {
        FileSpec {
            relative_path: relative_path.to_string(),
            text: text.into(),
            gz_members: None,
        }
    }
    pub fn gz(relative_path: &str, text: impl Into<String>, splits: &[usize]) -> FileSpec {
        FileSpec {
            relative_path: relative_path.to_string(),
            text: text.into(),
            gz_members: Some(splits.to_vec()),
        }
    }
}

/// A record as the reference filter sees it.
#[derive(Clone, Debug)]
pub struct Record {
    pub kind: Kind,
    pub relative_path: String,
    pub line: usize,
    pub at: i128,
    /// The record as the API must return it.
    pub out: Value,
}

impl Record {
    /// A string field of the record as returned ("" when it is not a string).
    pub fn text(&self, field: &str) -> &str {
        self.out[field].as_str().unwrap_or("")
    }
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

/// Writes the files under `directory` (creating sub-directories).
pub fn write_files(directory: &Path, files: &[FileSpec]) {
    for file in files {
        let path = directory.join(&file.relative_path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let bytes = match &file.gz_members {
            None => file.text.as_bytes().to_vec(),
            Some(splits) => {
                let mut out = Vec::new();
                let mut start = 0;
                for &end in splits.iter().chain(std::iter::once(&file.text.len())) {
                    out.extend(gzip(&file.text.as_bytes()[start..end]));
                    start = end;
                }
                out
            }
        };
        std::fs::write(path, bytes).unwrap();
    }
}

/// Unit fields that are JSON strings, on disk and in a response.
pub const UNIT_STRING_FIELDS: [&str; 9] = [
    "station_id",
    "slot",
    "unit_serial",
    "time_created",
    "tz",
    "mode",
    "unit_type",
    "direction",
    "result",
];
/// Metric fields that are JSON strings, on disk and in a response (`value` and the
/// limits are strings in a response too, but may be numbers on disk).
pub const METRIC_STRING_FIELDS: [&str; 9] = [
    "station_id",
    "slot",
    "unit_serial",
    "time_created",
    "tz",
    "mode",
    "name",
    "unit",
    "type",
];
pub const UNIT_FIELDS: [&str; 11] = [
    "station_id",
    "slot",
    "unit_serial",
    "time_created",
    "tz",
    "mode",
    "tags",
    "unit_type",
    "direction",
    "result",
    "metadata",
];
pub const METRIC_FIELDS: [&str; 13] = [
    "station_id",
    "slot",
    "unit_serial",
    "time_created",
    "tz",
    "mode",
    "tags",
    "name",
    "value",
    "unit",
    "type",
    "limit_upper",
    "limit_lower",
];

/// The reference rendering of one (valid) snapshot line (CONTRACT section 2).
pub fn render(kind: Kind, line: &str) -> Value {
    let raw: BTreeMap<String, Box<RawValue>> =
        serde_json::from_str(line).expect("fixture line is valid JSON");
    let get = |key: &str| -> Option<&str> {
        raw.get(key)
            .map(|value| value.get())
            .filter(|text| *text != "null")
    };
    let string = |key: &str| -> Value {
        match get(key) {
            None => Value::String(String::new()),
            Some(text) => serde_json::from_str::<String>(text)
                .map(Value::String)
                .unwrap_or_else(|_| {
                    // value / limit_*: a number keeps its text
                    Value::String(text.to_string())
                }),
        }
    };
    let mut out = Map::new();
    let strings: &[&str] = match kind {
        Kind::Units => &UNIT_STRING_FIELDS,
        Kind::Metrics => &METRIC_STRING_FIELDS,
    };
    for key in strings {
        out.insert(key.to_string(), string(key));
    }
    out.insert(
        "tags".into(),
        get("tags")
            .map(|text| serde_json::from_str(text).unwrap())
            .unwrap_or_else(|| Value::Array(vec![])),
    );
    match kind {
        Kind::Units => {
            out.insert(
                "metadata".into(),
                get("metadata")
                    .map(|text| serde_json::from_str(text).unwrap())
                    .unwrap_or(Value::Null),
            );
        }
        Kind::Metrics => {
            for key in ["value", "limit_upper", "limit_lower"] {
                out.insert(key.to_string(), string(key));
            }
        }
    }
    Value::Object(out)
}

/// The records of a set of files, as a loader following CONTRACT section 2 sees them.
pub fn load(files: &[FileSpec]) -> Vec<Record> {
    let mut records = Vec::new();
    for file in files {
        let name = file.relative_path.rsplit('/').next().unwrap();
        let stem = name.strip_suffix(".gz").unwrap_or(name);
        let kind = if stem.ends_with(".units.jsonl") {
            Kind::Units
        } else if stem.ends_with(".metrics.jsonl") {
            Kind::Metrics
        } else {
            continue;
        };
        let last = file.text.split('\n').count() - 1;
        for (index, line) in file.text.split('\n').enumerate() {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.trim().is_empty() {
                continue;
            }
            // A last line without its line end that does not parse is pending.
            if index == last && serde_json::from_str::<Value>(line).is_err() {
                continue;
            }
            let out = render(kind, line);
            let at = instant(out["time_created"].as_str().unwrap());
            records.push(Record {
                kind,
                relative_path: file.relative_path.clone(),
                line: index + 1,
                at,
                out,
            });
        }
    }
    records
}

/// The main fixture: several stations, offsets, fractions, ties across and within
/// files, absent optional fields, numbers as values, a multi-member `.gz` file, a
/// nested sub-directory, CRLF and blank lines, and a station `ST-NOW` whose records
/// sit around the time the fixture was written (for the default window).
pub fn main_files(now: i64) -> Vec<FileSpec> {
    let a_units = [
        // 1
        r#"{"station_id":"ST-01","slot":"S1","unit_serial":"SN-001","time_created":"2024-03-10T10:00:00Z","tz":"Europe/Berlin","mode":"production","tags":["a","b"],"unit_type":"PCB","direction":"output","result":"pass","metadata":{"op":"alice","n":1.50,"big":12345678901234567890123}}"#,
        "\n",
        // 2: absent optional fields, CRLF line end, same instant as line 1 written with an offset
        r#"{"station_id":"ST-02","time_created":"2024-03-10T12:00:00+02:00","direction":"output","unit_type":"PCB","unit_serial":"SN-002"}"#,
        "\r\n",
        // 3: white space only
        "  \t \n",
        // 4: same station and instant as line 1, written differently
        r#"{"station_id":"ST-01","slot":"S2","unit_serial":"SN-003","time_created":"2024-03-10T10:00:00.000000000Z","tz":"UTC","mode":"rework","tags":[],"unit_type":"Cable","direction":"input","result":"fail","metadata":"note"}"#,
        "\n",
        // 5: lower-case unit type, a fraction
        r#"{"station_id":"ST-10","unit_serial":"SN-004","time_created":"2024-03-10T09:30:00.5Z","unit_type":"pcb","direction":"output","result":"pass","metadata":[1,2]}"#,
        "\n",
        // 6: lower-case t and z, a serial shared with line 1, explicit nulls
        r#"{"station_id":"ST-03","unit_serial":"SN-001","time_created":"2024-03-10t11:00:00z","unit_type":"PCB","direction":"output","tags":["x"],"metadata":null}"#,
        "\n",
        // 7: negative offset, nine fraction digits, nulls and an unknown field
        r#"{"station_id":"ST-02","unit_serial":"SN-005","time_created":"2024-03-10T07:59:59.999999999-02:00","unit_type":"Module","direction":"input","tags":null,"result":null,"extra_field":"ignored"}"#,
        "\n",
        // 8: lexically before 10:00Z, an instant after it (10:45Z)
        r#"{"station_id":"ST-03","unit_serial":"SN-006","time_created":"2024-03-10T09:45:00-01:00","unit_type":"Cable","direction":"output"}"#,
        "\n",
    ]
    .concat();

    let c_first_member = [
        r#"{"station_id":"ST-01","unit_serial":"SN-010","time_created":"2024-03-10T11:00:00+01:00","unit_type":"PCB","direction":"output"}"#,
        "\n",
        r#"{"station_id":"ST-03","unit_serial":"SN-011","time_created":"2024-03-10T13:15:00Z","unit_type":"Cable","direction":"input"}"#,
        "\n",
    ]
    .concat();
    let c_second_member = [
        r#"{"station_id":"ST-10","unit_serial":"SN-012","time_created":"2024-03-10T10:00:00-00:00","unit_type":"PCB","direction":"output"}"#,
        "\n",
    ]
    .concat();
    let c_split = c_first_member.len();
    let c_units = format!("{c_first_member}{c_second_member}");

    let z_units = [
        r#"{"station_id":"ST-02","unit_serial":"SN-020","time_created":"2024-03-10T10:00:00Z","unit_type":"Module","direction":"output"}"#,
        "\n",
        r#"{"station_id":"ST-04","unit_serial":"SN-021","time_created":"2024-03-11T09:00:00Z","unit_type":"PCB","direction":"output"}"#,
        "\n",
        r#"{"station_id":"ST-01","unit_serial":"SN-022","time_created":"2024-03-09T23:59:59Z","unit_type":"PCB","direction":"output"}"#,
        "\n",
        // "ST-2" sorts after "ST-10" in byte order
        r#"{"station_id":"ST-2","unit_serial":"SN-023","time_created":"2024-03-10T10:00:00Z","unit_type":"PCB","direction":"output"}"#,
        "\n",
        // one nanosecond after the 10:00Z ties: after ST-10 and ST-2 despite ST-01
        r#"{"station_id":"ST-01","unit_serial":"SN-024","time_created":"2024-03-10T10:00:00.000000001Z","unit_type":"PCB","direction":"output"}"#,
        // no line end after the last line
    ]
    .concat();

    let b_metrics = [
        r#"{"station_id":"ST-01","slot":"S1","unit_serial":"SN-001","time_created":"2024-03-10T10:00:00Z","tz":"UTC","mode":"production","tags":["x"],"name":"voltage","value":3.30,"unit":"V","type":"measure","limit_upper":3.6,"limit_lower":"3.0"}"#,
        "\n",
        r#"{"station_id":"ST-02","time_created":"2024-03-10T10:30:00Z","name":"current","value":"0.25","unit":"A","limit_upper":1E+5,"limit_lower":-0.0}"#,
        "\n",
        r#"{"station_id":"ST-01","time_created":"2024-03-10T11:00:00+01:00","name":"temperature","value":123456789012345678901234567890.123456789,"unit":"C"}"#,
        "\n",
        // unknown to a metric record: metadata, direction
        r#"{"station_id":"ST-03","time_created":"2024-03-10T10:00:00.25Z","name":"voltage","value":5,"metadata":{"ignored":true},"direction":"input"}"#,
        "\n",
        r#"{"station_id":"ST-10","time_created":"2024-03-10T08:00:00Z","name":"voltage","tags":null}"#,
        "\r\n",
    ]
    .concat();

    let d_metrics = [
        r#"{"station_id":"ST-01","time_created":"2024-03-10T10:00:00.000Z","name":"voltage","value":"3.31"}"#,
        "\n",
        r#"{"station_id":"ST-02","time_created":"2024-03-10T23:59:59.999999999Z","name":"current","value":0.5}"#,
        "\n",
        "\n",
        r#"{"station_id":"ST-04","time_created":"2024-03-10T10:00:00+00:00","name":"Voltage","value":1}"#,
        "\n",
    ]
    .concat();

    let from_now = |delta: i64| rfc3339_from_seconds(now + delta);
    let now_units = [
        format!(r#"{{"station_id":"ST-NOW","unit_serial":"SN-N1","time_created":"{}","unit_type":"PCB","direction":"output"}}"#, from_now(-3600)),
        format!(r#"{{"station_id":"ST-NOW","unit_serial":"SN-N2","time_created":"{}","unit_type":"PCB","direction":"output"}}"#, from_now(-23 * 3600)),
        format!(r#"{{"station_id":"ST-NOW","unit_serial":"SN-N3","time_created":"{}","unit_type":"PCB","direction":"output"}}"#, from_now(-25 * 3600)),
        format!(r#"{{"station_id":"ST-NOW","unit_serial":"SN-N4","time_created":"{}","unit_type":"PCB","direction":"output"}}"#, from_now(3600)),
        format!(r#"{{"station_id":"ST-NOW","unit_serial":"SN-N5","time_created":"{}","unit_type":"PCB","direction":"input"}}"#, from_now(-2 * 3600)),
        format!(r#"{{"station_id":"ST-NOW","unit_serial":"SN-N6","time_created":"{}","unit_type":"PCB","direction":"output"}}"#, from_now(-3 * 3600)),
        format!(r#"{{"station_id":"ST-NOW","unit_serial":"SN-N7","time_created":"{}","unit_type":"PCB","direction":"output"}}"#, from_now(-4 * 3600)),
    ]
    .join("\n");
    let now_metrics = [
        format!(
            r#"{{"station_id":"ST-NOW","time_created":"{}","name":"voltage","value":"1"}}"#,
            from_now(-3600)
        ),
        format!(
            r#"{{"station_id":"ST-NOW","time_created":"{}","name":"voltage","value":"2"}}"#,
            from_now(-25 * 3600)
        ),
        format!(
            r#"{{"station_id":"ST-NOW","time_created":"{}","name":"voltage","value":"3"}}"#,
            from_now(-5 * 3600)
        ),
    ]
    .join("\n")
        + "\n";

    vec![
        FileSpec::plain("a.units.jsonl", a_units),
        FileSpec::plain("b.metrics.jsonl", b_metrics),
        FileSpec::gz("nested/c.units.jsonl.gz", c_units, &[c_split]),
        FileSpec::plain("nested/deeper/d.metrics.jsonl", d_metrics),
        FileSpec::plain("now.metrics.jsonl", now_metrics),
        FileSpec::plain("now.units.jsonl", now_units),
        FileSpec::plain("z.units.jsonl", z_units),
    ]
}

/// A snapshot directory and tokens file on disk, with its reference records.
pub struct Fixture {
    /// Holds `snapshots` and `tokens`; removed when the fixture drops.
    pub directory: tempfile::TempDir,
    pub snapshots: PathBuf,
    pub tokens: PathBuf,
    pub records: Vec<Record>,
    /// Unix seconds at which the fixture was written.
    pub now: i64,
}

pub fn temporary_directory() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("stq-test-")
        .tempdir_in(run_directory())
        .unwrap()
}

/// This run's directory under the target's, `stq-run-PID`, which holds every
/// directory the run's tests make. A fixture kept in a `static` is never
/// dropped, and a store of `STQ_TEST_STORE` is kept for the run; so each run
/// first removes the directories of runs whose process has ended, and the
/// target's directory does not fill up run after run.
pub fn run_directory() -> &'static Path {
    static RUN: OnceLock<PathBuf> = OnceLock::new();
    RUN.get_or_init(|| {
        let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
        for entry in std::fs::read_dir(target).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|name| name.strip_prefix("stq-run-")) else {
                continue;
            };
            if !Path::new("/proc").join(pid).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let directory = target.join(format!("stq-run-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        directory
    })
}

/// Writes the files into a fresh snapshot directory beside the suite's tokens file:
/// `(the directory holding both, snapshots, tokens)`.
pub fn write_snapshot(files: &[FileSpec]) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let directory = temporary_directory();
    let snapshots = directory.path().join("snap");
    std::fs::create_dir_all(&snapshots).unwrap();
    write_files(&snapshots, files);
    let tokens = directory.path().join("tokens.json");
    std::fs::write(&tokens, tokens_json()).unwrap();
    (directory, snapshots, tokens)
}

impl Fixture {
    pub fn from_files(files: &[FileSpec]) -> Fixture {
        let (directory, snapshots, tokens) = write_snapshot(files);
        Fixture {
            directory,
            snapshots,
            tokens,
            records: load(files),
            now: now_seconds(),
        }
    }

    pub fn main() -> Fixture {
        let now = now_seconds();
        let mut fixture = Fixture::from_files(&main_files(now));
        fixture.now = now;
        fixture
    }

    /// The reference answer of a query.
    pub fn expect(&self, query: &Query) -> Vec<Value> {
        reference(&self.records, query)
    }
}

/// The reference model of docs/api.md sections 3 to 6, the one every test compares
/// with (the HTTP tests and the property tests alike): the flat list of records,
/// each kept or not by every filter in turn, then sorted by the contract's order.
pub fn reference(records: &[Record], query: &Query) -> Vec<Value> {
    {
        // `None`: no list given, so every value passes.
        let listed = |list: &Option<Vec<String>>, value: &str| {
            list.as_ref()
                .is_none_or(|items| items.iter().any(|x| x == value))
        };
        let hits: Vec<&Record> = records
            .iter()
            .filter(|record| record.kind == query.kind)
            .filter(|record| query.from <= record.at && record.at < query.to)
            .filter(|record| listed(&query.stations, record.text("station_id")))
            .filter(|record| listed(&query.scope, record.text("station_id")))
            .filter(|record| {
                query.types.is_empty() || query.types.iter().any(|x| x == record.text("unit_type"))
            })
            .filter(|record| {
                query
                    .serial
                    .as_ref()
                    .is_none_or(|x| x == record.text("unit_serial"))
            })
            .filter(|record| {
                query.kind == Kind::Metrics
                    || if query.directions.is_empty() {
                        record.text("direction") == "output"
                    } else {
                        query
                            .directions
                            .iter()
                            .any(|x| x == record.text("direction"))
                    }
            })
            .filter(|record| {
                query.kind == Kind::Units
                    || query.names.is_empty()
                    || query.names.iter().any(|x| x == record.text("name"))
            })
            .filter(|record| {
                query.kind == Kind::Metrics
                    || query.results.is_empty()
                    || (query.results.iter()).any(|x| x.eq_ignore_ascii_case(record.text("result")))
            })
            .collect();
        in_contract_order(hits)
    }
}

/// Records' response JSON in the order of CONTRACT section 6: instant, station id,
/// then file and line.
pub fn in_contract_order(mut records: Vec<&Record>) -> Vec<Value> {
    records.sort_by_key(|record| {
        (
            record.at,
            record.text("station_id").as_bytes(),
            record.relative_path.as_bytes(),
            record.line,
        )
    });
    records
        .into_iter()
        .map(|record| record.out.clone())
        .collect()
}

/// A query for the reference filter.
#[derive(Clone, Debug)]
pub struct Query {
    pub kind: Kind,
    pub from: i128,
    pub to: i128,
    pub stations: Option<Vec<String>>,
    pub scope: Option<Vec<String>>,
    pub types: Vec<String>,
    pub serial: Option<String>,
    /// Empty = the default `["output"]`.
    pub directions: Vec<String>,
    pub names: Vec<String>,
    /// `/units`' `result`: matched ignoring ASCII case.
    pub results: Vec<String>,
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|s| s.to_string()).collect()
}

impl Query {
    pub fn new(kind: Kind, from: &str, to: &str) -> Query {
        Query::at(kind, instant(from), instant(to))
    }
    pub fn at(kind: Kind, from: i128, to: i128) -> Query {
        Query {
            kind,
            from,
            to,
            stations: None,
            scope: None,
            types: vec![],
            serial: None,
            directions: vec![],
            names: vec![],
            results: vec![],
        }
    }
    /// The whole 2024 window.
    pub fn units() -> Query {
        Query::new(Kind::Units, WINDOW_FROM, WINDOW_TO)
    }
    pub fn metrics() -> Query {
        Query::new(Kind::Metrics, WINDOW_FROM, WINDOW_TO)
    }
    pub fn stations(mut self, stations: &[&str]) -> Query {
        self.stations = Some(strings(stations));
        self
    }
    pub fn scope(mut self, scope: &[&str]) -> Query {
        self.scope = Some(strings(scope));
        self
    }
    pub fn types(mut self, types: &[&str]) -> Query {
        self.types = strings(types);
        self
    }
    pub fn serial(mut self, serial: &str) -> Query {
        self.serial = Some(serial.to_string());
        self
    }
    pub fn directions(mut self, directions: &[&str]) -> Query {
        self.directions = strings(directions);
        self
    }
    pub fn both(self) -> Query {
        self.directions(&["input", "output"])
    }
    pub fn names(mut self, names: &[&str]) -> Query {
        self.names = strings(names);
        self
    }
    pub fn results(mut self, results: &[&str]) -> Query {
        self.results = strings(results);
        self
    }
}

/// `station time_created serial/name` of each record, for readable failures.
pub fn brief(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .map(|record| {
            let id = if record.get("name").is_some() {
                &record["name"]
            } else {
                &record["unit_serial"]
            };
            format!(
                "{} {} {}",
                record["station_id"].as_str().unwrap_or("?"),
                record["time_created"].as_str().unwrap_or("?"),
                id.as_str().unwrap_or("?")
            )
        })
        .collect()
}

#[track_caller]
pub fn assert_records(got: &[Value], want: &[Value], context: &str) {
    if got != want {
        panic!(
            "{context}: records differ\n got  ({}): {:#?}\n want ({}): {:#?}\n full got: {}\n full want: {}",
            got.len(),
            brief(got),
            want.len(),
            brief(want),
            Value::Array(got.to_vec()),
            Value::Array(want.to_vec())
        );
    }
}

// ---------------------------------------------------------------------------
// URL encoding
// ---------------------------------------------------------------------------

/// Percent-encodes everything but unreserved characters.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

// ---------------------------------------------------------------------------
// The server process
// ---------------------------------------------------------------------------

/// The binary under test: this build's, or the one `STQ_TEST_BINARY` names (`.ci/run`
/// points it at the release build for `production_build`).
pub fn stq_binary() -> &'static str {
    static BINARY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        std::env::var("STQ_TEST_BINARY").unwrap_or_else(|_| env!("CARGO_BIN_EXE_stq").to_owned())
    });
    &BINARY
}

/// Removes every inherited `STQ_*` and `AWS_*` variable (and log settings, and
/// `NOTIFY_SOCKET`) so the environment of the test run does not configure the
/// program under test; then sets `variables`, the ones a test means.
///
/// One exception: `STQ_TEST_HOT`, when the suite is run with it, is every server's
/// `STQ_HOT` (a test's own `--hot` or `STQ_HOT` still wins). `.ci/run` runs the
/// suite once more with `STQ_TEST_HOT=1s`, so that every query of the suite reads
/// sealed blocks beside hot records and must answer as at the defaults (issue 22).
pub fn clean_environment(command: &mut Command, variables: &[(&str, &str)]) {
    for (name, _) in std::env::vars_os() {
        let text = name.to_string_lossy();
        if text.starts_with("STQ_") || text.starts_with("AWS_") {
            command.env_remove(&name);
        }
    }
    if let Ok(hot) = std::env::var("STQ_TEST_HOT") {
        command.env("STQ_HOT", hot);
    }
    // Before the test's own variables: a test's `STQ_STORE` or `--store` wins, and
    // `STQ_TEST_NO_STORE` keeps a server without one (the one a store is held to).
    if !variables
        .iter()
        .any(|(name, _)| *name == "STQ_TEST_NO_STORE")
    {
        if let Some(store) = test_store() {
            command.env("STQ_STORE", &store.location);
            if let Some(copy) = &store.copy {
                command.env("STQ_STORE_CACHE", copy);
                command.envs(s3::shared_server().variables());
            }
        }
    }
    command.env_remove("RUST_LOG");
    // A test run under systemd must not tell systemd about the servers it starts.
    command.env_remove("NOTIFY_SOCKET");
    command.env("NO_COLOR", "1");
    // Not built yet (CONTRACT 8); harmless to an env-reading CLI that ignores it,
    // and keeps parallel servers off one fixed admin port once it exists.
    command.env("STQ_ADMIN_LISTEN", "127.0.0.1:0");
    command.envs(variables.iter().copied());
}

/// `STQ_TEST_STORE` (issue 32): when the suite is run with it, every server gets a
/// store of its own (`STQ_STORE`, a fresh directory), so that every answer of the
/// suite is given by a server with a store and must be what a server without one
/// gives. `STQ_TEST_STORE=cold` (or `1`): the store is empty at the start, and
/// written while the server serves. `STQ_TEST_STORE=warm`: a server with the same
/// arguments first fills the store and is stopped once it has written it; the
/// server under test then starts from that store.
///
/// With `STQ_TEST_STORE_S3=1` besides (issue 35), each store is
/// `s3://lake/<a prefix of its own>` on one s3s-fs server that the whole run
/// shares (`s3::shared_server`), with a local copy of its own (`STQ_STORE_CACHE`):
/// under `warm`, the filling server has another copy, so that the server under
/// test fetches the store from the bucket.
fn test_store() -> Option<TestStore> {
    std::env::var_os("STQ_TEST_STORE")?;
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let number = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("stq-test-store-{}-{number}", std::process::id());
    let directory = run_directory().join(&name);
    let _ = std::fs::remove_dir_all(&directory);
    if std::env::var_os("STQ_TEST_STORE_S3").is_none() {
        return Some(TestStore {
            location: path_string(&directory),
            copy: None,
        });
    }
    Some(TestStore {
        location: format!("s3://{}/{name}", s3::BUCKET),
        copy: Some(directory),
    })
}

/// A store `STQ_TEST_STORE` gives a server: `--store`'s value, and the local copy of
/// an `s3://` one.
struct TestStore {
    location: String,
    copy: Option<PathBuf>,
}

/// Under `STQ_TEST_STORE=warm`: fills `store` with a server of `args` and
/// `variables`, stopped once it has written the store (or ended on its own); an
/// `s3://` store through a copy of the filler's own (`copy` with `-filling`).
fn fill_store(args: &[String], variables: &[(&str, &str)], store: &str, copy: Option<&Path>) {
    // Only the server under test tells a test's systemd socket about itself.
    let mut variables: Vec<(&str, &str)> = (variables.iter())
        .filter(|(name, _)| *name != "NOTIFY_SOCKET")
        .copied()
        .collect();
    variables.push(("STQ_STORE", store));
    let filling_copy = copy.map(|copy| format!("{}-filling", path_string(copy)));
    if let Some(filling_copy) = &filling_copy {
        variables.push(("STQ_STORE_CACHE", filling_copy));
    }
    variables.push(("STQ_TEST_STORE_FILLING", "1"));
    // The filler fills the store and nothing else: were it to write the test's
    // `--export` too, the server under test could find every day written already
    // (and log no write), or not, as the filler's stop fell.
    let mut filler_args = Vec::with_capacity(args.len());
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--export" {
            rest.next();
        } else if !arg.starts_with("--export=") {
            filler_args.push(arg.clone());
        }
    }
    variables.retain(|(name, _)| *name != "STQ_EXPORT");
    if let Started::Ready(server) = Server::try_spawn(&filler_args, &variables) {
        let deadline = StdInstant::now() + RELOAD_TIMEOUT;
        while server.log_count("store written") == 0
            && server.log_count("cannot write the store") == 0
            && StdInstant::now() < deadline
        {
            thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Removes ANSI escape sequences (coloured log output).
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(character) = chars.next() {
        if character == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for inside in chars.by_ref() {
                    if inside.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(character);
    }
    out
}

/// Wraps the server in a tiny shell that kills it when our end of its stdin
/// closes: when the guard drops, or when the test process exits (a server held in
/// a `static` is never dropped). The shell exits with the server's status.
///
/// The shell prints the server's own process id as the one line of its stdout
/// (the server's stdout goes to `/dev/null`), so that a test can signal the server
/// itself rather than the shell; stdout, not stderr, so the line can never be
/// interleaved with the server's log.
pub const WRAPPER: &str = r#"exec 3<&0
"$0" "$@" </dev/null >/dev/null 3<&- &
pid=$!
echo "$pid"
exec >/dev/null
( read _x <&3; kill -KILL $pid 2>/dev/null ) &
watcher=$!
wait $pid
exit_status=$?
kill $watcher 2>/dev/null
exit $exit_status
"#;

/// How long a reload (or a reload failure) may take to show.
pub const RELOAD_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Server {
    pub port: u16,
    /// The process id of `stq` itself (not of its shell wrapper), for signals.
    pub pid: u32,
    pub base: String,
    stdin: Mutex<Option<ChildStdin>>,
    child: Mutex<Child>,
    stderr: Arc<Mutex<Vec<String>>>,
    agent: ureq::Agent,
}

pub enum Started {
    Ready(Server),
    /// The process ended before it was ready: exit status and its stderr.
    Exited(Option<i32>, String),
}

pub fn path_string(path: &Path) -> String {
    path.display().to_string()
}

/// `serve --listen 127.0.0.1:0 --snapshots SNAPSHOTS --tokens TOKENS EXTRA`
pub fn serve_args(snapshots: &Path, tokens: &Path, extra: &[&str]) -> Vec<String> {
    let snapshots = path_string(snapshots);
    let tokens = path_string(tokens);
    let fixed = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--snapshots",
        &snapshots,
        "--tokens",
        &tokens,
    ];
    fixed
        .iter()
        .chain(extra)
        .map(|arg| arg.to_string())
        .collect()
}

impl Server {
    /// `stq serve` on the fixture with extra flags.
    pub fn start(fixture: &Fixture, extra: &[&str]) -> Server {
        Server::spawn(&serve_args(&fixture.snapshots, &fixture.tokens, extra), &[])
    }

    /// Starts `stq ARGS` with extra environment variables; panics unless it gets ready.
    pub fn spawn(args: &[String], variables: &[(&str, &str)]) -> Server {
        match Server::try_spawn(args, variables) {
            Started::Ready(server) => server,
            Started::Exited(code, log) => {
                panic!("server {args:?} exited ({code:?}) before ready:\n{log}")
            }
        }
    }

    pub fn try_spawn(args: &[String], variables: &[(&str, &str)]) -> Started {
        let mut command = Command::new("sh");
        command.arg("-c").arg(WRAPPER).arg(stq_binary()).args(args);
        clean_environment(&mut command, variables);
        let filling = variables
            .iter()
            .any(|(name, _)| *name == "STQ_TEST_STORE_FILLING");
        let own_store = variables.iter().any(|(name, _)| *name == "STQ_STORE")
            || args.iter().any(|arg| arg.starts_with("--store"));
        // `STQ_TEST_COLD`: a test that counts what its start reads or logs (each
        // file's invalid lines are logged by the read that meets them, which a warm
        // start does not repeat) starts from an empty store even in the warm run.
        let cold = variables.iter().any(|(name, _)| *name == "STQ_TEST_COLD");
        if std::env::var("STQ_TEST_STORE").as_deref() == Ok("warm")
            && !filling
            && !own_store
            && !cold
        {
            let variable = |wanted: &str| {
                (command.get_envs())
                    .find(|(name, _)| name.to_str() == Some(wanted))
                    .and_then(|(_, value)| value.map(|value| value.to_string_lossy().into_owned()))
            };
            if let Some(store) = variable("STQ_STORE") {
                let copy = variable("STQ_STORE_CACHE").map(PathBuf::from);
                fill_store(args, variables, &store, copy.as_deref());
            }
        }
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn sh wrapper");
        let stdin = child.stdin.take();
        // The wrapper prints the pid right after starting the server, before it waits.
        let mut pid_line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut pid_line)
            .expect("read the server's pid from the wrapper");
        let pid: u32 = pid_line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the wrapper printed {pid_line:?}, not a pid"));
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let (sender, receiver) = mpsc::channel::<String>();
        {
            let log = log.clone();
            thread::spawn(move || {
                let reader = BufReader::new(stderr);
                for line in reader.split(b'\n') {
                    let Ok(line) = line else { break };
                    let line = strip_ansi(&String::from_utf8_lossy(&line));
                    log.lock().unwrap().push(line.clone());
                    let _ = sender.send(line);
                }
            });
        }
        let deadline = StdInstant::now() + Duration::from_secs(30);
        // `https://` with --tls-cert: `base` then names the scheme the server speaks.
        let https = args.iter().any(|arg| arg == "--tls-cert");
        let scheme = if https { "https" } else { "http" };
        let marker = format!("listening on {scheme}://127.0.0.1:");
        loop {
            let remaining = deadline.saturating_duration_since(StdInstant::now());
            match receiver.recv_timeout(remaining) {
                Ok(line) => {
                    if let Some(position) = line.find(&marker) {
                        let digits: String = line[position + marker.len()..]
                            .chars()
                            .take_while(|c| c.is_ascii_digit())
                            .collect();
                        let port: u16 = digits.parse().expect("port in ready line");
                        let agent = ureq::AgentBuilder::new()
                            .timeout(Duration::from_secs(30))
                            .redirects(0)
                            .build();
                        return Started::Ready(Server {
                            port,
                            pid,
                            base: format!("{scheme}://127.0.0.1:{port}"),
                            stdin: Mutex::new(stdin),
                            child: Mutex::new(child),
                            stderr: log,
                            agent,
                        });
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    drop(stdin);
                    let status = child.wait().ok().and_then(|status| status.code());
                    let text = log.lock().unwrap().join("\n");
                    return Started::Exited(status, text);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    drop(stdin);
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "server {args:?} not ready within 30 s; stderr:\n{}",
                        log.lock().unwrap().join("\n")
                    );
                }
            }
        }
    }

    /// Everything the server wrote on stderr so far (ANSI stripped).
    pub fn log(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// How many stderr lines so far contain `needle`.
    pub fn log_count(&self, needle: &str) -> usize {
        self.stderr
            .lock()
            .unwrap()
            .iter()
            .filter(|line| line.contains(needle))
            .count()
    }

    /// Waits until `needle` has appeared on `occurrences` stderr lines.
    #[track_caller]
    pub fn wait_for_log(&self, needle: &str, occurrences: usize) {
        self.wait_for_log_within(needle, occurrences, RELOAD_TIMEOUT);
    }

    /// [`Server::wait_for_log`], giving up after `patience` instead.
    #[track_caller]
    pub fn wait_for_log_within(&self, needle: &str, occurrences: usize, patience: Duration) {
        let deadline = StdInstant::now() + patience;
        while self.log_count(needle) < occurrences {
            assert!(
                StdInstant::now() < deadline,
                "{needle:?} not logged {occurrences} time(s) within {patience:?}; stderr:\n{}",
                self.log().join("\n")
            );
            thread::sleep(Duration::from_millis(25));
        }
    }

    /// Sends SIGHUP and waits until the reload it asked for has failed.
    pub fn reload_expecting_failure(&self) {
        let failures = self.log_count("reload failed");
        self.signal("HUP");
        self.wait_for_log("reload failed", failures + 1);
    }

    /// The admin listener's metrics address, from the `metrics at http://...` line.
    /// The value of the admin listener's sample `name` (one without labels).
    pub fn admin_value(&self, name: &str) -> f64 {
        let text = ureq::get(&self.metrics_url())
            .call()
            .unwrap()
            .into_string()
            .unwrap();
        (text.lines())
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .trim()
            .parse()
            .unwrap()
    }

    pub fn metrics_url(&self) -> String {
        let deadline = StdInstant::now() + Duration::from_secs(10);
        loop {
            let line = self.log().into_iter().find_map(|line| {
                let start = line.find("metrics at http://")? + "metrics at ".len();
                Some(line[start..].split_whitespace().next()?.to_owned())
            });
            if let Some(url) = line {
                return url;
            }
            assert!(
                StdInstant::now() < deadline,
                "the server never logged its metrics address"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The admin listener's `/files` (issue 34), answered 200 as JSON.
    pub fn admin_files(&self) -> Value {
        let url = self.metrics_url().replace("/metrics", "/files");
        let agent = ureq::AgentBuilder::new().build();
        let response = call(&agent, "GET", &url, &[]);
        assert_eq!(response.status, 200, "{}", response.body);
        assert_eq!(response.header("content-type"), Some("application/json"));
        serde_json::from_str(&response.body).unwrap()
    }

    /// Sends `kill -NAME` to the server itself.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([format!("-{name}"), self.pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} {} failed", self.pid);
    }

    /// Waits for the server to end on its own: its exit status, or `None` if it
    /// still runs after `timeout`. The wrapper exits with the server's status.
    pub fn wait_for_exit(&self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = StdInstant::now() + timeout;
        loop {
            if let Some(status) = self.child.lock().unwrap().try_wait().unwrap() {
                return Some(status);
            }
            if StdInstant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(25));
        }
    }

    /// The body of `GET /readyz`, which must be 200.
    #[track_caller]
    pub fn readiness(&self) -> Value {
        let response = self.get("/readyz", None);
        assert_eq!(response.status, 200, "{}", response.context());
        response.json()
    }

    pub fn generation(&self) -> u64 {
        generation_of(&self.readiness())
    }

    /// Polls `/readyz` until the generation is past `previous`; returns that body.
    /// Reloads take time: polling, not sleeping.
    #[track_caller]
    pub fn wait_for_generation_after(&self, previous: u64) -> Value {
        let deadline = StdInstant::now() + RELOAD_TIMEOUT;
        loop {
            let readiness = self.readiness();
            if generation_of(&readiness) > previous {
                return readiness;
            }
            assert!(
                StdInstant::now() < deadline,
                "still generation {previous} after {RELOAD_TIMEOUT:?}; stderr:\n{}",
                self.log().join("\n")
            );
            thread::sleep(Duration::from_millis(25));
        }
    }

    pub fn url(&self, path_and_query: &str) -> String {
        format!("{}{}", self.base, path_and_query)
    }

    /// Any method, any headers, any status.
    pub fn request(
        &self,
        method: &str,
        path_and_query: &str,
        headers: &[(&str, &str)],
    ) -> Response {
        call(&self.agent, method, &self.url(path_and_query), headers)
    }

    /// Any method and headers, with an optional bearer token.
    pub fn request_as(
        &self,
        method: &str,
        path_and_query: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Response {
        let authorization = token.map(|token| format!("Bearer {token}"));
        let mut all: Vec<(&str, &str)> = headers.to_vec();
        if let Some(authorization) = &authorization {
            all.push(("Authorization", authorization));
        }
        self.request(method, path_and_query, &all)
    }

    /// `GET` with an optional bearer token.
    pub fn get(&self, path_and_query: &str, token: Option<&str>) -> Response {
        self.request_as("GET", path_and_query, token, &[])
    }

    /// `GET` as `ops`, expecting a 200 envelope.
    pub fn ok(&self, path_and_query: &str) -> Envelope {
        self.get(path_and_query, Some(OPS)).ok()
    }

    pub fn ok_as(&self, path_and_query: &str, token: &str) -> Envelope {
        self.get(path_and_query, Some(token)).ok()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A failing test's server says what it logged: a failure seen once in CI
        // (under load, beside other work) is then explained by its own output
        // rather than by a rerun that may not fail.
        if thread::panicking() {
            let log = self.stderr.lock().map(|lines| lines.join("\n"));
            if let Ok(log) = log {
                eprintln!("--- the log of stq on port {} ---\n{log}\n---", self.port);
            }
        }
        // Closing the wrapper's stdin kills the server.
        drop(self.stdin.lock().unwrap().take());
        let mut child = self.child.lock().unwrap();
        let deadline = StdInstant::now() + Duration::from_secs(10);
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if StdInstant::now() < deadline => {
                    thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
            }
        }
    }
}

/// The `generation` of a `/readyz` body.
pub fn generation_of(readiness: &Value) -> u64 {
    readiness["generation"]
        .as_u64()
        .unwrap_or_else(|| panic!("readyz generation is not a number: {readiness}"))
}

// ---------------------------------------------------------------------------
// The shared server
// ---------------------------------------------------------------------------

/// A fixture and a server on it.
pub struct Shared {
    pub fixture: Fixture,
    pub server: Server,
}

impl Shared {
    /// The main fixture, served with extra flags.
    pub fn start(extra: &[&str]) -> Shared {
        let fixture = Fixture::main();
        let server = Server::start(&fixture, extra);
        Shared { fixture, server }
    }
}

/// The main fixture with a server of default flags, started once per test binary
/// (each integration test file is a crate of its own) and shared by its tests.
pub fn shared_main() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| Shared::start(&[]))
}

pub fn server() -> &'static Server {
    &shared_main().server
}

pub fn fixture() -> &'static Fixture {
    &shared_main().fixture
}

/// Every unit record of the main fixture's 2024 window, of both directions.
pub fn units_all() -> String {
    format!("/units?{WINDOW}&direction=input,output")
}

/// Every metric record of the main fixture's 2024 window.
pub fn metrics_all() -> String {
    format!("/metrics?{WINDOW}")
}

/// The `unit_serial` of each record.
pub fn serials(data: &[Value]) -> Vec<String> {
    data.iter()
        .map(|record| record["unit_serial"].as_str().unwrap().to_string())
        .collect()
}

/// The `value` of each metric record.
pub fn metric_values(data: &[Value]) -> Vec<&str> {
    data.iter()
        .map(|record| record["value"].as_str().unwrap())
        .collect()
}

// ---------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct Response {
    pub method: String,
    pub url: String,
    pub status: u16,
    /// Lower-case names, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

pub fn call(agent: &ureq::Agent, method: &str, url: &str, headers: &[(&str, &str)]) -> Response {
    let mut request = agent.request(method, url);
    for (name, value) in headers {
        request = request.set(name, value);
    }
    // ureq returns 4xx/5xx as errors; a test wants them like any response.
    let response = match request.call() {
        Ok(response) => response,
        Err(ureq::Error::Status(_, response)) => response,
        Err(error) => panic!("{method} {url}: transport error: {error}"),
    };
    let status = response.status();
    let mut names: Vec<String> = response.headers_names();
    names.dedup();
    let mut seen = BTreeSet::new();
    let mut received = Vec::new();
    for name in names {
        if !seen.insert(name.clone()) {
            continue;
        }
        for value in response.all(&name) {
            received.push((name.clone(), value.to_string()));
        }
    }
    let mut body = String::new();
    response
        .into_reader()
        .read_to_string(&mut body)
        .unwrap_or_else(|error| panic!("{method} {url}: body: {error}"));
    Response {
        method: method.to_string(),
        url: url.to_string(),
        status,
        headers: received,
        body,
    }
}

pub struct Envelope {
    pub data: Vec<Value>,
    pub message: String,
    pub meta: Map<String, Value>,
    pub response: Response,
}

impl Envelope {
    /// The next page's cursor; `None` on a last page (`null`) and without `limit`.
    pub fn cursor(&self) -> Option<String> {
        self.meta
            .get("next_cursor")
            .filter(|cursor| !cursor.is_null())
            .map(|cursor| cursor.as_str().unwrap().to_string())
    }
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.header_all(name).first().copied()
    }

    pub fn header_all(&self, name: &str) -> Vec<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .filter(|(received, _)| *received == name)
            .map(|(_, value)| value.as_str())
            .collect()
    }

    pub fn context(&self) -> String {
        format!(
            "{} {} -> {} {}",
            self.method, self.url, self.status, self.body
        )
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|error| panic!("{}: body is not JSON: {error}", self.context()))
    }

    /// The body, which must be a JSON object.
    #[track_caller]
    fn json_object(&self) -> Map<String, Value> {
        match self.json() {
            Value::Object(object) => object,
            _ => panic!("{}: not an object", self.context()),
        }
    }

    #[track_caller]
    fn assert_keys(&self, object: &Map<String, Value>, expected: &[&str], what: &str) {
        let keys: BTreeSet<&str> = object.keys().map(|key| key.as_str()).collect();
        let expected: BTreeSet<&str> = expected.iter().copied().collect();
        assert_eq!(keys, expected, "{}: {what}", self.context());
    }

    #[track_caller]
    fn non_empty_string<'a>(&self, object: &'a Map<String, Value>, key: &str) -> &'a str {
        let text = object[key]
            .as_str()
            .unwrap_or_else(|| panic!("{}: {key} not a string", self.context()));
        assert!(!text.is_empty(), "{}: empty {key}", self.context());
        text
    }

    #[track_caller]
    pub fn assert_json_content_type(&self) {
        let content_type = self
            .header("content-type")
            .unwrap_or_else(|| panic!("{}: no Content-Type", self.context()));
        let media = content_type.split(';').next().unwrap().trim();
        assert!(
            media.eq_ignore_ascii_case("application/json"),
            "{}: Content-Type {content_type}",
            self.context()
        );
    }

    /// The `X-Request-Id` header (exactly one) of any response.
    #[track_caller]
    pub fn request_id(&self) -> String {
        let ids = self.header_all("x-request-id");
        assert_eq!(
            ids.len(),
            1,
            "{}: X-Request-Id headers: {ids:?}",
            self.context()
        );
        ids[0].to_string()
    }

    /// Asserts a 200 envelope of CONTRACT section 7 and returns it.
    #[track_caller]
    pub fn ok(self) -> Envelope {
        assert_eq!(self.status, 200, "{}", self.context());
        self.assert_json_content_type();
        let request_id = self.request_id();
        let envelope = self.json_object();
        self.assert_keys(&envelope, &["data", "message", "meta"], "envelope keys");
        let data = envelope["data"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: data not an array", self.context()))
            .clone();
        let message = self.non_empty_string(&envelope, "message");
        let meta = envelope["meta"]
            .as_object()
            .unwrap_or_else(|| panic!("{}: meta not an object", self.context()))
            .clone();
        let mut meta_keys = vec!["timestamp", "request_id", "query_duration_ms"];
        if meta.contains_key("next_cursor") {
            meta_keys.push("next_cursor");
            // null on a last page (docs/api.md section 6.3), else a cursor.
            if !meta["next_cursor"].is_null() {
                self.non_empty_string(&meta, "next_cursor");
            }
        }
        self.assert_keys(&meta, &meta_keys, "meta keys");
        let timestamp = meta["timestamp"]
            .as_str()
            .unwrap_or_else(|| panic!("{}: timestamp not a string", self.context()));
        let milliseconds = parse_meta_timestamp(timestamp).unwrap_or_else(|| {
            panic!(
                "{}: timestamp {timestamp:?} is not YYYY-MM-DDTHH:MM:SS.mmmZ",
                self.context()
            )
        });
        let now_milliseconds = now_seconds() * 1000;
        assert!(
            (milliseconds - now_milliseconds).abs() < 300_000,
            "{}: timestamp {timestamp} far from now",
            self.context()
        );
        assert_eq!(
            meta["request_id"].as_str(),
            Some(request_id.as_str()),
            "{}: meta.request_id vs header",
            self.context()
        );
        assert!(
            meta["query_duration_ms"].is_u64(),
            "{}: query_duration_ms not a non-negative integer",
            self.context()
        );
        Envelope {
            data,
            message: message.to_string(),
            meta,
            response: self,
        }
    }

    /// Asserts an error response: status, JSON, exactly `{"error":{"code","message","details"}}`,
    /// the code, an `X-Request-Id`; returns `details`.
    #[track_caller]
    pub fn error(&self, status: u16, code: &str) -> Value {
        assert_eq!(self.status, status, "{}", self.context());
        self.assert_json_content_type();
        self.request_id();
        let body = self.json_object();
        self.assert_keys(&body, &["error"], "top-level keys");
        let error = body["error"]
            .as_object()
            .unwrap_or_else(|| panic!("{}: error not an object", self.context()));
        self.assert_keys(error, &["code", "message", "details"], "error keys");
        assert_eq!(
            error["code"].as_str(),
            Some(code),
            "{}: code",
            self.context()
        );
        self.non_empty_string(error, "message");
        error["details"].clone()
    }
}

// ---------------------------------------------------------------------------
// Running the CLI
// ---------------------------------------------------------------------------

/// `stq check --snapshots SNAPSHOTS`
pub fn check_snapshots(snapshots: &Path) -> Output {
    run(
        &["check", "--snapshots", &path_string(snapshots)],
        None,
        &[],
        Duration::from_secs(60),
    )
}

/// Reads all of `source` on a thread of its own, so that a full pipe cannot stall
/// the child while we wait for the other one.
fn read_in_background(mut source: impl Read + Send + 'static) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = source.read_to_end(&mut bytes);
        bytes
    })
}

/// Runs `stq ARGS` to completion (at most `timeout`), with optional stdin and
/// environment variables.
pub fn run(
    args: &[&str],
    stdin: Option<&[u8]>,
    variables: &[(&str, &str)],
    timeout: Duration,
) -> Output {
    let mut command = Command::new(stq_binary());
    command.args(args);
    clean_environment(&mut command, variables);
    command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("spawn stq");
    if let Some(input) = stdin {
        let mut writer = child.stdin.take().unwrap();
        let input = input.to_vec();
        thread::spawn(move || {
            let _ = writer.write_all(&input);
        });
    }
    let stdout = read_in_background(child.stdout.take().unwrap());
    let stderr = read_in_background(child.stderr.take().unwrap());
    let deadline = StdInstant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if StdInstant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = stderr.join().unwrap();
            panic!(
                "stq {args:?} still running after {timeout:?}; stderr:\n{}",
                String::from_utf8_lossy(&stderr)
            );
        }
        thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

// ---------------------------------------------------------------------------
// Debian packages a test needs
// ---------------------------------------------------------------------------

/// `binary`, from Debian's `package`: found, or installed with `apt-get` when it is
/// missing and can be (as root, with `apt-get` on the `PATH`: CI and our machines).
/// `None` when it is missing and cannot be installed here (not root, or no
/// `apt-get`: a laptop, macOS): the caller skips its test, and this says so on
/// standard error (past the test harness's capture), naming the package. Under
/// `CI=true` that is a failure instead, and so is a failed install anywhere. Tests of
/// this one binary run in parallel and apt allows one apt-get at a time, so installs
/// take turns here, and wait for any other apt.
pub fn debian_binary(binary: &str, package: &str) -> Option<PathBuf> {
    static APT: Mutex<()> = Mutex::new(());
    let installed = PathBuf::from(binary);
    let _turn = APT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if installed.exists() {
        return Some(installed);
    }
    if let Some(why) = cannot_install() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no {binary}: this test needs Debian's package `{package}`, which cannot be \
             installed here ({why}); under CI=true a missing package is a failure"
        );
        // Not `eprintln!`: the harness would hide it behind a passing test.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: this test needs Debian's package `{package}` ({binary} is missing), \
             which cannot be installed here ({why}); install it to run the test"
        );
        return None;
    }
    let install = format!(
        "apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive \
         apt-get -o DPkg::Lock::Timeout=600 install -y -qq {package} >/dev/null"
    );
    let status = Command::new("sh")
        .args(["-c", &install])
        .status()
        .expect("run apt-get");
    assert!(status.success(), "apt-get could not install {package}");
    assert!(installed.exists(), "no {package} at {binary}");
    Some(installed)
}

/// Why a Debian package cannot be installed by this process, if it cannot.
fn cannot_install() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root");
    }
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|directory| directory.join("apt-get").is_file())
    });
    (!on_path).then_some("no apt-get")
}
