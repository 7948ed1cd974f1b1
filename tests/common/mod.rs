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
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant as StdInstant, SystemTime, UNIX_EPOCH};

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

pub fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
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

pub const NANOS: i128 = 1_000_000_000;
pub const HOUR: i128 = 3600 * NANOS;
pub const DAY: i128 = 24 * HOUR;

pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Nanoseconds since the Unix epoch of a date-time the suite itself writes
/// (RFC 3339 with `T`/`Z` in either case), or of a bare integer (epoch ms).
pub fn instant(s: &str) -> i128 {
    let t = s.trim();
    if !t.is_empty()
        && t.trim_start_matches('-')
            .bytes()
            .all(|b| b.is_ascii_digit())
    {
        return t.parse::<i128>().expect("epoch ms") * 1_000_000;
    }
    let num = |a: usize, b: usize| -> i64 {
        t[a..b]
            .parse()
            .unwrap_or_else(|_| panic!("bad test date-time {t}"))
    };
    let (y, mo, d, h, mi, se) = (
        num(0, 4),
        num(5, 7),
        num(8, 10),
        num(11, 13),
        num(14, 16),
        num(17, 19),
    );
    let mut rest = &t[19..];
    let mut nanos: i128 = 0;
    if let Some(r) = rest.strip_prefix('.') {
        let digits: String = r.chars().take_while(|c| c.is_ascii_digit()).collect();
        let mut padded = digits.clone();
        while padded.len() < 9 {
            padded.push('0');
        }
        nanos = padded[..9].parse().unwrap();
        rest = &r[digits.len()..];
    }
    let offset_secs: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            let oh: i64 = rest[1..3].parse().unwrap();
            let om: i64 = rest[4..6].parse().unwrap();
            sign * (oh * 3600 + om * 60)
        }
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se - offset_secs;
    secs as i128 * NANOS + nanos
}

pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `YYYY-MM-DDTHH:MM:SSZ` of Unix seconds.
pub fn rfc3339_secs(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

/// Checks `YYYY-MM-DDTHH:MM:SS.mmmZ` and returns its Unix milliseconds.
pub fn parse_meta_timestamp(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 24 {
        return None;
    }
    let shape = "dddd-dd-ddTdd:dd:dd.dddZ".as_bytes();
    for (c, p) in b.iter().zip(shape) {
        let ok = if *p == b'd' {
            c.is_ascii_digit()
        } else {
            c == p
        };
        if !ok {
            return None;
        }
    }
    let n = |a: usize, z: usize| -> i64 { s[a..z].parse().unwrap() };
    let (mo, d, h, mi, se) = (n(5, 7), n(8, 10), n(11, 13), n(14, 16), n(17, 19));
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 59 {
        return None;
    }
    let secs = days_from_civil(n(0, 4), mo, d) * 86_400 + h * 3600 + mi * 60 + se;
    Some(secs * 1000 + n(20, 23))
}

// ---------------------------------------------------------------------------
// The fixture
// ---------------------------------------------------------------------------

/// The window that holds every 2024 record of the main fixture.
pub const W_FROM: &str = "2024-03-01T00:00:00Z";
pub const W_TO: &str = "2024-04-01T00:00:00Z";
/// `from=W_FROM&to=W_TO`
pub const WIN: &str = "from=2024-03-01T00:00:00Z&to=2024-04-01T00:00:00Z";

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
    pub rel: String,
    pub text: String,
    pub gz_members: Option<Vec<usize>>,
}

impl FileSpec {
    pub fn plain(rel: &str, text: impl Into<String>) -> FileSpec {
        FileSpec {
            rel: rel.to_string(),
            text: text.into(),
            gz_members: None,
        }
    }
    pub fn gz(rel: &str, text: impl Into<String>, splits: &[usize]) -> FileSpec {
        FileSpec {
            rel: rel.to_string(),
            text: text.into(),
            gz_members: Some(splits.to_vec()),
        }
    }
}

/// A record as the reference filter sees it.
#[derive(Clone, Debug)]
pub struct Rec {
    pub kind: Kind,
    pub rel: String,
    pub line: usize,
    pub at: i128,
    /// The record as the API must return it.
    pub out: Value,
}

impl Rec {
    pub fn s(&self, field: &str) -> &str {
        self.out[field].as_str().unwrap_or("")
    }
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

/// Writes the files under `dir` (creating sub-directories).
pub fn write_files(dir: &Path, files: &[FileSpec]) {
    for f in files {
        let path = dir.join(&f.rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let bytes = match &f.gz_members {
            None => f.text.as_bytes().to_vec(),
            Some(splits) => {
                let mut out = Vec::new();
                let mut start = 0;
                for &end in splits.iter().chain(std::iter::once(&f.text.len())) {
                    out.extend(gzip(&f.text.as_bytes()[start..end]));
                    start = end;
                }
                out
            }
        };
        std::fs::write(path, bytes).unwrap();
    }
}

const UNIT_STRINGS: [&str; 9] = [
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
const METRIC_STRINGS: [&str; 9] = [
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
    let get = |k: &str| -> Option<&str> { raw.get(k).map(|r| r.get()).filter(|t| *t != "null") };
    let string = |k: &str| -> Value {
        match get(k) {
            None => Value::String(String::new()),
            Some(t) => serde_json::from_str::<String>(t)
                .map(Value::String)
                .unwrap_or_else(|_| {
                    // value / limit_*: a number keeps its text
                    Value::String(t.to_string())
                }),
        }
    };
    let mut out = Map::new();
    let strings: &[&str] = match kind {
        Kind::Units => &UNIT_STRINGS,
        Kind::Metrics => &METRIC_STRINGS,
    };
    for k in strings {
        out.insert(k.to_string(), string(k));
    }
    out.insert(
        "tags".into(),
        get("tags")
            .map(|t| serde_json::from_str(t).unwrap())
            .unwrap_or_else(|| Value::Array(vec![])),
    );
    match kind {
        Kind::Units => {
            out.insert(
                "metadata".into(),
                get("metadata")
                    .map(|t| serde_json::from_str(t).unwrap())
                    .unwrap_or(Value::Null),
            );
        }
        Kind::Metrics => {
            for k in ["value", "limit_upper", "limit_lower"] {
                out.insert(k.to_string(), string(k));
            }
        }
    }
    Value::Object(out)
}

/// The records of a set of files, as a loader following CONTRACT section 2 sees them.
pub fn load(files: &[FileSpec]) -> Vec<Rec> {
    let mut recs = Vec::new();
    for f in files {
        let name = f.rel.rsplit('/').next().unwrap();
        let stem = name.strip_suffix(".gz").unwrap_or(name);
        let kind = if stem.ends_with(".units.jsonl") {
            Kind::Units
        } else if stem.ends_with(".metrics.jsonl") {
            Kind::Metrics
        } else {
            continue;
        };
        for (i, line) in f.text.split('\n').enumerate() {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.trim().is_empty() {
                continue;
            }
            let out = render(kind, line);
            let at = instant(out["time_created"].as_str().unwrap());
            recs.push(Rec {
                kind,
                rel: f.rel.clone(),
                line: i + 1,
                at,
                out,
            });
        }
    }
    recs
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

    let c1 = [
        r#"{"station_id":"ST-01","unit_serial":"SN-010","time_created":"2024-03-10T11:00:00+01:00","unit_type":"PCB","direction":"output"}"#,
        "\n",
        r#"{"station_id":"ST-03","unit_serial":"SN-011","time_created":"2024-03-10T13:15:00Z","unit_type":"Cable","direction":"input"}"#,
        "\n",
    ]
    .concat();
    let c2 = [
        r#"{"station_id":"ST-10","unit_serial":"SN-012","time_created":"2024-03-10T10:00:00-00:00","unit_type":"PCB","direction":"output"}"#,
        "\n",
    ]
    .concat();
    let c_split = c1.len();
    let c_units = format!("{c1}{c2}");

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

    let t = |delta: i64| rfc3339_secs(now + delta);
    let now_units = [
        format!(r#"{{"station_id":"ST-NOW","unit_serial":"SN-N1","time_created":"{}","unit_type":"PCB","direction":"output"}}"#, t(-3600)),
        format!(r#"{{"station_id":"ST-NOW","unit_serial":"SN-N2","time_created":"{}","unit_type":"PCB","direction":"output"}}"#, t(-23 * 3600)),
        format!(r#"{{"station_id":"ST-NOW","unit_serial":"SN-N3","time_created":"{}","unit_type":"PCB","direction":"output"}}"#, t(-25 * 3600)),
        format!(r#"{{"station_id":"ST-NOW","unit_serial":"SN-N4","time_created":"{}","unit_type":"PCB","direction":"output"}}"#, t(3600)),
        format!(r#"{{"station_id":"ST-NOW","unit_serial":"SN-N5","time_created":"{}","unit_type":"PCB","direction":"input"}}"#, t(-2 * 3600)),
        format!(r#"{{"station_id":"ST-NOW","unit_serial":"SN-N6","time_created":"{}","unit_type":"PCB","direction":"output"}}"#, t(-3 * 3600)),
        format!(r#"{{"station_id":"ST-NOW","unit_serial":"SN-N7","time_created":"{}","unit_type":"PCB","direction":"output"}}"#, t(-4 * 3600)),
    ]
    .join("\n");
    let now_metrics = [
        format!(
            r#"{{"station_id":"ST-NOW","time_created":"{}","name":"voltage","value":"1"}}"#,
            t(-3600)
        ),
        format!(
            r#"{{"station_id":"ST-NOW","time_created":"{}","name":"voltage","value":"2"}}"#,
            t(-25 * 3600)
        ),
        format!(
            r#"{{"station_id":"ST-NOW","time_created":"{}","name":"voltage","value":"3"}}"#,
            t(-5 * 3600)
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
    pub tmp: tempfile::TempDir,
    pub snapshots: PathBuf,
    pub tokens: PathBuf,
    pub recs: Vec<Rec>,
    /// Unix seconds at which the fixture was written.
    pub now: i64,
}

pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("stq-test-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

impl Fixture {
    pub fn from_files(files: &[FileSpec]) -> Fixture {
        let tmp = temp_dir();
        let snapshots = tmp.path().join("snap");
        std::fs::create_dir_all(&snapshots).unwrap();
        write_files(&snapshots, files);
        let tokens = tmp.path().join("tokens.json");
        std::fs::write(&tokens, tokens_json()).unwrap();
        Fixture {
            tmp,
            snapshots,
            tokens,
            recs: load(files),
            now: now_secs(),
        }
    }

    pub fn main() -> Fixture {
        let now = now_secs();
        let mut f = Fixture::from_files(&main_files(now));
        f.now = now;
        f
    }

    /// The reference answer of a query.
    pub fn expect(&self, q: &Q) -> Vec<Value> {
        let mut hits: Vec<&Rec> = self
            .recs
            .iter()
            .filter(|r| r.kind == q.kind)
            .filter(|r| q.from <= r.at && r.at < q.to)
            .filter(|r| {
                q.stations
                    .as_ref()
                    .map_or(true, |s| s.iter().any(|x| x == r.s("station_id")))
            })
            .filter(|r| {
                q.scope
                    .as_ref()
                    .map_or(true, |s| s.iter().any(|x| x == r.s("station_id")))
            })
            .filter(|r| q.types.is_empty() || q.types.iter().any(|x| x == r.s("unit_type")))
            .filter(|r| q.serial.as_ref().map_or(true, |x| x == r.s("unit_serial")))
            .filter(|r| {
                q.kind == Kind::Metrics
                    || if q.directions.is_empty() {
                        r.s("direction") == "output"
                    } else {
                        q.directions.iter().any(|x| x == r.s("direction"))
                    }
            })
            .filter(|r| {
                q.kind == Kind::Units
                    || q.names.is_empty()
                    || q.names.iter().any(|x| x == r.s("name"))
            })
            .collect();
        hits.sort_by(|a, b| {
            (a.at, a.s("station_id").as_bytes(), a.rel.as_bytes(), a.line).cmp(&(
                b.at,
                b.s("station_id").as_bytes(),
                b.rel.as_bytes(),
                b.line,
            ))
        });
        hits.into_iter().map(|r| r.out.clone()).collect()
    }
}

/// A query for the reference filter.
#[derive(Clone, Debug)]
pub struct Q {
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
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

impl Q {
    pub fn new(kind: Kind, from: &str, to: &str) -> Q {
        Q::at(kind, instant(from), instant(to))
    }
    pub fn at(kind: Kind, from: i128, to: i128) -> Q {
        Q {
            kind,
            from,
            to,
            stations: None,
            scope: None,
            types: vec![],
            serial: None,
            directions: vec![],
            names: vec![],
        }
    }
    /// The whole 2024 window.
    pub fn units() -> Q {
        Q::new(Kind::Units, W_FROM, W_TO)
    }
    pub fn metrics() -> Q {
        Q::new(Kind::Metrics, W_FROM, W_TO)
    }
    pub fn stations(mut self, s: &[&str]) -> Q {
        self.stations = Some(strings(s));
        self
    }
    pub fn scope(mut self, s: &[&str]) -> Q {
        self.scope = Some(strings(s));
        self
    }
    pub fn types(mut self, s: &[&str]) -> Q {
        self.types = strings(s);
        self
    }
    pub fn serial(mut self, s: &str) -> Q {
        self.serial = Some(s.to_string());
        self
    }
    pub fn directions(mut self, s: &[&str]) -> Q {
        self.directions = strings(s);
        self
    }
    pub fn both(self) -> Q {
        self.directions(&["input", "output"])
    }
    pub fn names(mut self, s: &[&str]) -> Q {
        self.names = strings(s);
        self
    }
}

/// `station time_created serial/name` of each record, for readable failures.
pub fn brief(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .map(|r| {
            let id = if r.get("name").is_some() {
                &r["name"]
            } else {
                &r["unit_serial"]
            };
            format!(
                "{} {} {}",
                r["station_id"].as_str().unwrap_or("?"),
                r["time_created"].as_str().unwrap_or("?"),
                id.as_str().unwrap_or("?")
            )
        })
        .collect()
}

#[track_caller]
pub fn assert_records(got: &[Value], want: &[Value], ctx: &str) {
    if got != want {
        panic!(
            "{ctx}: records differ\n got  ({}): {:#?}\n want ({}): {:#?}\n full got: {}\n full want: {}",
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
pub fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// ---------------------------------------------------------------------------
// The server process
// ---------------------------------------------------------------------------

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_stq")
}

/// Removes every inherited `STQ_*` variable (and log settings) so the
/// environment of the test run does not configure the program under test.
pub fn clean_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("STQ_") {
            cmd.env_remove(&k);
        }
    }
    cmd.env_remove("RUST_LOG");
    cmd.env("NO_COLOR", "1");
    // Not built yet (CONTRACT 8); harmless to an env-reading CLI that ignores it,
    // and keeps parallel servers off one fixed admin port once it exists.
    cmd.env("STQ_ADMIN_LISTEN", "127.0.0.1:0");
}

/// Removes ANSI escape sequences (coloured log output).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c2 in chars.by_ref() {
                    if c2.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// Wraps the server in a tiny shell that kills it when our end of its stdin
/// closes: when the guard drops, or when the test process exits (a server held in
/// a `static` is never dropped). The shell exits with the server's status.
const WRAPPER: &str = r#"exec 3<&0
"$0" "$@" </dev/null 3<&- &
pid=$!
( read _x <&3; kill -KILL $pid 2>/dev/null ) &
watcher=$!
wait $pid
st=$?
kill $watcher 2>/dev/null
exit $st
"#;

pub struct Server {
    pub port: u16,
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

impl Server {
    /// `stq serve --listen 127.0.0.1:0 --snapshots .. --tokens .. EXTRA`
    pub fn start(fx: &Fixture, extra: &[&str]) -> Server {
        let mut args = vec![
            "serve".to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--snapshots".into(),
            fx.snapshots.display().to_string(),
            "--tokens".into(),
            fx.tokens.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Server::spawn(&args, &[])
    }

    /// Starts `stq ARGS` with extra environment variables; panics unless it gets ready.
    pub fn spawn(args: &[String], envs: &[(&str, &str)]) -> Server {
        match Server::try_spawn(args, envs) {
            Started::Ready(s) => s,
            Started::Exited(code, log) => {
                panic!("server {args:?} exited ({code:?}) before ready:\n{log}")
            }
        }
    }

    pub fn try_spawn(args: &[String], envs: &[(&str, &str)]) -> Started {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(WRAPPER).arg(bin()).args(args);
        clean_env(&mut cmd);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn sh wrapper");
        let stdin = child.stdin.take();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let (tx, rx) = mpsc::channel::<String>();
        {
            let log = log.clone();
            thread::spawn(move || {
                let reader = BufReader::new(stderr);
                for line in reader.split(b'\n') {
                    let Ok(line) = line else { break };
                    let line = strip_ansi(&String::from_utf8_lossy(&line));
                    log.lock().unwrap().push(line.clone());
                    let _ = tx.send(line);
                }
            });
        }
        let deadline = StdInstant::now() + Duration::from_secs(30);
        let marker = "listening on http://127.0.0.1:";
        loop {
            let left = deadline.saturating_duration_since(StdInstant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(pos) = line.find(marker) {
                        let digits: String = line[pos + marker.len()..]
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
                            base: format!("http://127.0.0.1:{port}"),
                            stdin: Mutex::new(stdin),
                            child: Mutex::new(child),
                            stderr: log,
                            agent,
                        });
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    drop(stdin);
                    let status = child.wait().ok().and_then(|s| s.code());
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

    pub fn url(&self, path_and_query: &str) -> String {
        format!("{}{}", self.base, path_and_query)
    }

    /// Any method, any headers, any status.
    pub fn req(&self, method: &str, path_and_query: &str, headers: &[(&str, &str)]) -> Resp {
        call(&self.agent, method, &self.url(path_and_query), headers)
    }

    /// `GET` with an optional bearer token.
    pub fn get(&self, path_and_query: &str, token: Option<&str>) -> Resp {
        match token {
            Some(t) => self.req(
                "GET",
                path_and_query,
                &[("Authorization", &format!("Bearer {t}"))],
            ),
            None => self.req("GET", path_and_query, &[]),
        }
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
        // Closing the wrapper's stdin kills the server.
        drop(self.stdin.lock().unwrap().take());
        let mut child = self.child.lock().unwrap();
        let deadline = StdInstant::now() + Duration::from_secs(10);
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if StdInstant::now() < deadline => {
                    thread::sleep(Duration::from_millis(20))
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

// ---------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct Resp {
    pub method: String,
    pub url: String,
    pub status: u16,
    /// Lower-case names, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

pub fn call(agent: &ureq::Agent, method: &str, url: &str, headers: &[(&str, &str)]) -> Resp {
    let mut req = agent.request(method, url);
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let resp = match req.call() {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: transport error: {e}"),
    };
    let status = resp.status();
    let mut names: Vec<String> = resp.headers_names();
    names.dedup();
    let mut seen = BTreeSet::new();
    let mut hs = Vec::new();
    for n in names {
        if !seen.insert(n.clone()) {
            continue;
        }
        for v in resp.all(&n) {
            hs.push((n.clone(), v.to_string()));
        }
    }
    let mut body = String::new();
    resp.into_reader()
        .read_to_string(&mut body)
        .unwrap_or_else(|e| panic!("{method} {url}: body: {e}"));
    Resp {
        method: method.to_string(),
        url: url.to_string(),
        status,
        headers: hs,
        body,
    }
}

pub struct Envelope {
    pub data: Vec<Value>,
    pub message: String,
    pub meta: Map<String, Value>,
    pub resp: Resp,
}

impl Envelope {
    pub fn cursor(&self) -> Option<String> {
        self.meta
            .get("next_cursor")
            .map(|c| c.as_str().unwrap().to_string())
    }
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn header_all(&self, name: &str) -> Vec<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn ctx(&self) -> String {
        format!(
            "{} {} -> {} {}",
            self.method, self.url, self.status, self.body
        )
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("{}: body is not JSON: {e}", self.ctx()))
    }

    #[track_caller]
    pub fn assert_json_content_type(&self) {
        let ct = self
            .header("content-type")
            .unwrap_or_else(|| panic!("{}: no Content-Type", self.ctx()));
        let media = ct.split(';').next().unwrap().trim();
        assert!(
            media.eq_ignore_ascii_case("application/json"),
            "{}: Content-Type {ct}",
            self.ctx()
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
            self.ctx()
        );
        ids[0].to_string()
    }

    /// Asserts a 200 envelope of CONTRACT section 7 and returns it.
    #[track_caller]
    pub fn ok(self) -> Envelope {
        assert_eq!(self.status, 200, "{}", self.ctx());
        self.assert_json_content_type();
        let rid = self.request_id();
        let v = self.json();
        let obj = v
            .as_object()
            .unwrap_or_else(|| panic!("{}: not an object", self.ctx()));
        let keys: BTreeSet<&str> = obj.keys().map(|k| k.as_str()).collect();
        assert_eq!(
            keys,
            BTreeSet::from(["data", "message", "meta"]),
            "{}: envelope keys",
            self.ctx()
        );
        let data = obj["data"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: data not an array", self.ctx()))
            .clone();
        let message = obj["message"]
            .as_str()
            .unwrap_or_else(|| panic!("{}: message not a string", self.ctx()));
        assert!(!message.is_empty(), "{}: empty message", self.ctx());
        let meta = obj["meta"]
            .as_object()
            .unwrap_or_else(|| panic!("{}: meta not an object", self.ctx()))
            .clone();
        let mkeys: BTreeSet<&str> = meta.keys().map(|k| k.as_str()).collect();
        let mut want = BTreeSet::from(["timestamp", "request_id", "query_duration_ms"]);
        if meta.contains_key("next_cursor") {
            want.insert("next_cursor");
            let c = meta["next_cursor"]
                .as_str()
                .unwrap_or_else(|| panic!("{}: next_cursor not a string", self.ctx()));
            assert!(!c.is_empty(), "{}: empty next_cursor", self.ctx());
        }
        assert_eq!(mkeys, want, "{}: meta keys", self.ctx());
        let ts = meta["timestamp"]
            .as_str()
            .unwrap_or_else(|| panic!("{}: timestamp not a string", self.ctx()));
        let ms = parse_meta_timestamp(ts).unwrap_or_else(|| {
            panic!(
                "{}: timestamp {ts:?} is not YYYY-MM-DDTHH:MM:SS.mmmZ",
                self.ctx()
            )
        });
        let now_ms = now_secs() * 1000;
        assert!(
            (ms - now_ms).abs() < 300_000,
            "{}: timestamp {ts} far from now",
            self.ctx()
        );
        assert_eq!(
            meta["request_id"].as_str(),
            Some(rid.as_str()),
            "{}: meta.request_id vs header",
            self.ctx()
        );
        assert!(
            meta["query_duration_ms"].is_u64(),
            "{}: query_duration_ms not a non-negative integer",
            self.ctx()
        );
        Envelope {
            data,
            message: message.to_string(),
            meta,
            resp: self,
        }
    }

    /// Asserts an error response: status, JSON, exactly `{"error":{"code","message","details"}}`,
    /// the code, an `X-Request-Id`; returns `details`.
    #[track_caller]
    pub fn err(&self, status: u16, code: &str) -> Value {
        assert_eq!(self.status, status, "{}", self.ctx());
        self.assert_json_content_type();
        self.request_id();
        let v = self.json();
        let obj = v
            .as_object()
            .unwrap_or_else(|| panic!("{}: not an object", self.ctx()));
        let keys: Vec<&str> = obj.keys().map(|k| k.as_str()).collect();
        assert_eq!(keys, vec!["error"], "{}: top-level keys", self.ctx());
        let e = obj["error"]
            .as_object()
            .unwrap_or_else(|| panic!("{}: error not an object", self.ctx()));
        let ekeys: BTreeSet<&str> = e.keys().map(|k| k.as_str()).collect();
        assert_eq!(
            ekeys,
            BTreeSet::from(["code", "message", "details"]),
            "{}: error keys",
            self.ctx()
        );
        assert_eq!(e["code"].as_str(), Some(code), "{}: code", self.ctx());
        let msg = e["message"]
            .as_str()
            .unwrap_or_else(|| panic!("{}: message not a string", self.ctx()));
        assert!(!msg.is_empty(), "{}: empty message", self.ctx());
        e["details"].clone()
    }
}

// ---------------------------------------------------------------------------
// Running the CLI
// ---------------------------------------------------------------------------

/// Runs `stq ARGS` to completion (at most `timeout`), with optional stdin and env.
pub fn run(
    args: &[&str],
    stdin: Option<&[u8]>,
    envs: &[(&str, &str)],
    timeout: Duration,
) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args);
    clean_env(&mut cmd);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn stq");
    if let Some(input) = stdin {
        let mut w = child.stdin.take().unwrap();
        let input = input.to_vec();
        thread::spawn(move || {
            let _ = w.write_all(&input);
        });
    }
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = StdInstant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if StdInstant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let e = t_err.join().unwrap();
            panic!(
                "stq {args:?} still running after {timeout:?}; stderr:\n{}",
                String::from_utf8_lossy(&e)
            );
        }
        thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}
