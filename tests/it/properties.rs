//! Property tests of the query path, over random snapshots and random queries.
//!
//! Every case writes a random snapshot to a temporary directory, loads it with the
//! real loader (`LoadOptions::start`), starts the real sharded, actor-backed engine
//! (`stq::engine::Engine`) and drives the real HTTP app (`stq::http::app`) in-process.
//! What it proves, for every generated case:
//!
//! 1. `the_engine_answers_what_the_reference_filter_answers`: an unpaged `/units` or
//!    `/metrics` answer holds exactly the records that a naive filter over the flat
//!    list of generated records selects (CONTRACT sections 3-6): same records, every
//!    field as the API must render it, same order; a result larger than
//!    `max_records` is a 400 `result_too_large` instead, and an empty or reversed
//!    window a 400 `invalid_window`.
//! 2. `following_cursors_returns_everything_exactly_once`: following
//!    `meta.next_cursor` with a `limit` that changes from page to page (and the same
//!    query spelled differently on every page) returns the unpaged result exactly
//!    once, in order, also when it is larger than `max_records`; every page but the
//!    last is full, and only the last page lacks `next_cursor`.
//! 3. `tokens_see_only_their_stations`: no record of a station outside the token's
//!    scope ever appears; naming a station the token may not access (existing or
//!    not) is a 403 whose `details.stations` are exactly the forbidden ids, without
//!    repeats, in byte order, and that 403 wins over `result_too_large`.
//!
//! The snapshots aim at the corners: station ids whose byte order is not a human
//! order (`"B" < "ST-1" < "ST-10" < "ST-2" < "a" < "é"`), many records at the same
//! instant written with different offsets, fraction lengths and `t`/`z` cases,
//! files in nested directories whose byte order is not the directory walk's order,
//! gzip (also multi-member), CRLF, blank lines, `null` for absent fields, unknown
//! fields, and metric numbers whose exact text must survive. Queries spell the same
//! thing many ways: repeated and comma lists, percent-encoding, padding, empty items,
//! epoch milliseconds, raw and encoded `+` in offsets, any parameter order.
//!
//! The reference is the suite's one model, `common::reference`, the same the HTTP
//! tests use, fed the generated files' text. The generator knows every record's
//! instant, and checks that the model reads each time to it. Failing seeds are kept in `proptest-regressions/properties.txt`.
//! The case counts keep the file at a few seconds; `PROPTEST_CASES=5000` soaks it.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write as _};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix_web::test as actix_test;
use actix_web::web;
use chrono::{DateTime, FixedOffset};
use flate2::write::GzEncoder;
use flate2::Compression;
use futures_util::future::LocalBoxFuture;
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS, NON_ALPHANUMERIC};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::{select, subsequence};
use proptest::test_runner::{FileFailurePersistence, TestCaseError};
use serde_json::{json, Value};

use crate::common;

use stq::engine::Engine;
use stq::http::{app, AppState};
use stq_core::data::{LoadOptions, OnInvalid, Settings, Start};
use stq_core::domain::record::Kind;
use stq_core::domain::{Endpoint, Limits, Tokens};

// --- The pools values are drawn from ----------------------------------------------

/// Station ids of snapshots; their byte order is `A < B < ST-1 < ST-10 < ST-2 < a < é`.
const STATIONS: &[&str] = &["a", "B", "ST-1", "ST-10", "ST-2", "é", "A"];
/// Station ids that queries and tokens may name besides those (never in a snapshot).
const GHOSTS: &[&str] = &["ST-3", "b", "Z"];

const UNIT_TYPES: &[&str] = &["board", "Board", "psu"];
const SERIALS: &[&str] = &["SN1", "SN2", "sn1"];
const NAMES: &[&str] = &["temp", "Temp", "volt"];
const DIRECTIONS: &[&str] = &["input", "output"];
const SLOTS: &[&str] = &["1", "2", ""];
const TIME_ZONES: &[&str] = &["UTC", "Europe/Berlin"];
const MODES: &[&str] = &["prod", "debug"];
const RESULTS: &[&str] = &["pass", "fail", "Fail", "PASS"];
const TAGS: &[&str] = &["a", "b", "é"];
const MEASURE_UNITS: &[&str] = &["V", "°C"];
const METRIC_TYPES: &[&str] = &["float", "int"];
/// `metadata` as written: any JSON value.
const METADATA: &[&str] = &[r#"{"a":[1.50,{"b":null}]}"#, "[1,2]", r#""x""#, "7", "true"];
/// `value` and the limits as written: JSON numbers keep their text, strings too.
const SCALARS: &[Scalar] = &[
    Scalar::Number("3.30"),
    Scalar::Number("1E+5"),
    Scalar::Number("-0.5"),
    Scalar::Number("123456789012345678901234567890"),
    Scalar::Text("3.30"),
    Scalar::Text("n/a"),
];

/// Snapshot files by kind. In byte order `a-x... < a.... < a/...`, which is not the
/// order a directory walk yields.
const UNIT_PATHS: &[&str] = &[
    "a.units.jsonl",
    "a-x.units.jsonl.gz",
    "a/x.units.jsonl",
    "B/c/d.units.jsonl.gz",
    "b.units.jsonl",
];
const METRIC_PATHS: &[&str] = &[
    "a.metrics.jsonl.gz",
    "a/m.metrics.jsonl",
    "Z.metrics.jsonl",
    "a-m/n.metrics.jsonl.gz",
];

// --- Time ---------------------------------------------------------------------------

const NANOS: i128 = 1_000_000_000;
const DAY: i128 = 86_400 * NANOS;
/// 2024-01-01T00:00:00Z in nanoseconds since the Unix epoch; every record is within
/// a few seconds after it, or after five hours.
const BASE: i128 = 1_704_067_200 * NANOS;

/// The offsets an instant may be written with: (text, minutes east of UTC).
const OFFSETS: &[(&str, i32)] = &[
    ("Z", 0),
    ("z", 0),
    ("+00:00", 0),
    ("-00:00", 0),
    ("+01:00", 60),
    ("-05:30", -330),
    ("+14:00", 840),
    ("-23:59", -1439),
];

/// How an instant is written in RFC 3339.
#[derive(Clone, Copy, Debug)]
struct TimeStyle {
    /// Index into [`OFFSETS`].
    offset: usize,
    /// Fraction digits written at least (more when the instant needs them).
    min_fraction_digits: usize,
    lower_case_t: bool,
}

/// `at` (nanoseconds since the epoch) in RFC 3339, as `style` says.
fn write_time(at: i128, style: TimeStyle) -> String {
    let (offset_text, minutes) = OFFSETS[style.offset];
    let seconds = i64::try_from(at.div_euclid(NANOS)).expect("instants are near 2024");
    let utc = DateTime::from_timestamp(seconds, at.rem_euclid(NANOS) as u32)
        .expect("instants are near 2024");
    let local = utc.with_timezone(&FixedOffset::east_opt(minutes * 60).expect("a valid offset"));
    let nanos = local.timestamp_subsec_nanos();
    let mut needed = 9;
    let mut rest = nanos;
    while needed > 0 && rest % 10 == 0 {
        rest /= 10;
        needed -= 1;
    }
    let digits = needed.max(style.min_fraction_digits);
    let fraction = if digits == 0 {
        String::new()
    } else {
        format!(".{}", &format!("{nanos:09}")[..digits])
    };
    let t = if style.lower_case_t { 't' } else { 'T' };
    format!(
        "{}{t}{}{fraction}{offset_text}",
        local.format("%Y-%m-%d"),
        local.format("%H:%M:%S")
    )
}

// --- Records and snapshots ------------------------------------------------------------

/// A generated record: what its line says, and so what the API must return.
#[derive(Clone, Debug)]
struct Record {
    station_id: &'static str,
    /// What `time_created` means, in nanoseconds since the Unix epoch.
    instant: i128,
    /// `time_created` as written; the API returns it unchanged.
    time_created: String,
    slot: Option<&'static str>,
    unit_serial: Option<&'static str>,
    tz: Option<&'static str>,
    mode: Option<&'static str>,
    tags: Option<Vec<&'static str>>,
    body: Body,
    style: LineStyle,
}

/// The fields only one kind of record has.
#[derive(Clone, Debug)]
enum Body {
    Unit {
        unit_type: Option<&'static str>,
        direction: &'static str,
        result: Option<&'static str>,
        metadata: Option<&'static str>,
    },
    Metric {
        name: &'static str,
        value: Option<Scalar>,
        unit: Option<&'static str>,
        metric_type: Option<&'static str>,
        limit_upper: Option<Scalar>,
        limit_lower: Option<Scalar>,
    },
}

/// `value` and the limits: a JSON number or a JSON string, returned as its text.
#[derive(Clone, Copy, Debug)]
enum Scalar {
    Number(&'static str),
    Text(&'static str),
}

impl Scalar {
    fn json(self) -> String {
        match self {
            Scalar::Number(text) => text.to_owned(),
            Scalar::Text(text) => quote(text),
        }
    }
}

/// How a record's line is written, none of which may change what it means.
#[derive(Clone, Copy, Debug)]
struct LineStyle {
    /// Absent optional fields are written as `null` rather than left out.
    nulls: bool,
    /// White space after `:` and `,`.
    spaced: bool,
    /// A field the record shape does not have, which must be ignored.
    unknown_field: bool,
}

fn quote(text: &str) -> String {
    serde_json::to_string(text).expect("strings serialize")
}

impl Record {
    fn kind(&self) -> Kind {
        match self.body {
            Body::Unit { .. } => Kind::Units,
            Body::Metric { .. } => Kind::Metrics,
        }
    }

    /// The snapshot line.
    fn line(&self) -> String {
        let text = |field: Option<&str>| field.map(quote);
        let mut fields: Vec<(&str, Option<String>)> = vec![
            ("station_id", Some(quote(self.station_id))),
            ("time_created", Some(quote(&self.time_created))),
            ("slot", text(self.slot)),
            ("unit_serial", text(self.unit_serial)),
            ("tz", text(self.tz)),
            ("mode", text(self.mode)),
            (
                "tags",
                self.tags
                    .as_ref()
                    .map(|tags| serde_json::to_string(tags).expect("tags serialize")),
            ),
        ];
        match &self.body {
            Body::Unit {
                unit_type,
                direction,
                result,
                metadata,
            } => fields.extend([
                ("unit_type", text(*unit_type)),
                ("direction", Some(quote(direction))),
                ("result", text(*result)),
                ("metadata", metadata.map(str::to_owned)),
            ]),
            Body::Metric {
                name,
                value,
                unit,
                metric_type,
                limit_upper,
                limit_lower,
            } => fields.extend([
                ("name", Some(quote(name))),
                ("value", value.map(Scalar::json)),
                ("unit", text(*unit)),
                ("type", text(*metric_type)),
                ("limit_upper", limit_upper.map(Scalar::json)),
                ("limit_lower", limit_lower.map(Scalar::json)),
            ]),
        }
        if self.style.unknown_field {
            fields.push(("x_comment", Some(quote("ignored"))));
        }
        let (colon, comma) = if self.style.spaced {
            (": ", ", ")
        } else {
            (":", ",")
        };
        let members: Vec<String> = fields
            .into_iter()
            .filter_map(|(key, value)| match value {
                Some(value) => Some(format!("{}{colon}{value}", quote(key))),
                None if self.style.nulls => Some(format!("{}{colon}null", quote(key))),
                None => None,
            })
            .collect();
        format!("{{{}}}", members.join(comma))
    }
}

/// One snapshot file: its path relative to the snapshot directory, its records in
/// line order, and how its bytes are laid out.
#[derive(Clone, Debug)]
struct SnapshotFile {
    path: &'static str,
    records: Vec<Record>,
    layout: Layout,
}

#[derive(Clone, Copy, Debug)]
struct Layout {
    crlf: bool,
    /// A blank (or white-space-only) line before every other record.
    blank_lines: bool,
    final_line_end: bool,
    /// For `.gz` files: the bytes split over this many gzip members.
    gzip_members: usize,
}

impl SnapshotFile {
    /// The file's text, before any compression.
    fn text(&self) -> String {
        let end = if self.layout.crlf { "\r\n" } else { "\n" };
        let mut text = String::new();
        for (index, record) in self.records.iter().enumerate() {
            if self.layout.blank_lines && index % 2 == 1 {
                text.push_str(" \t");
                text.push_str(end);
            }
            text.push_str(&record.line());
            if index + 1 < self.records.len() || self.layout.final_line_end {
                text.push_str(end);
            }
        }
        text
    }

    fn bytes(&self) -> Vec<u8> {
        let text = self.text();
        if !self.path.ends_with(".gz") {
            return text.into_bytes();
        }
        let bytes = text.into_bytes();
        let members = self.layout.gzip_members.max(1);
        let member_len = bytes.len().div_ceil(members).max(1);
        let mut gzip = Vec::new();
        for chunk in bytes.chunks(member_len) {
            let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
            encoder.write_all(chunk).expect("writing to a Vec");
            gzip.extend(encoder.finish().expect("writing to a Vec"));
        }
        if bytes.is_empty() {
            let encoder = GzEncoder::new(Vec::new(), Compression::fast());
            gzip = encoder.finish().expect("writing to a Vec");
        }
        gzip
    }
}

/// A whole snapshot; its files are kept in load order (byte order of their paths).
#[derive(Clone, Debug)]
struct Snapshot {
    /// The stations its records were drawn from (some may have no record).
    stations: Vec<&'static str>,
    files: Vec<SnapshotFile>,
    /// The hot window it is served with (issue 22): mostly a second, so that a
    /// station's records in hours before its newest one's are sealed and queries
    /// cross the boundary between the tiers; else every record hot.
    hot: Option<Duration>,
}

impl Snapshot {
    /// Every record, in load order.
    fn records(&self) -> impl Iterator<Item = &Record> {
        self.files.iter().flat_map(|file| &file.records)
    }

    /// The records as the shared reference model reads them from the files' text.
    fn model(&self) -> Vec<common::Record> {
        let files: Vec<common::FileSpec> = self
            .files
            .iter()
            .map(|file| common::FileSpec::plain(file.path, file.text()))
            .collect();
        let records = common::load(&files);
        // The model reads each time as the loader must; the generator knows what
        // each one means. They agree, or the model is wrong.
        for (model, generated) in records.iter().zip(self.records()) {
            assert_eq!(model.at, generated.instant, "{}", generated.time_created);
        }
        assert_eq!(records.len(), self.records().count());
        records
    }

    fn count(&self, kind: Kind) -> u64 {
        self.records()
            .filter(|record| record.kind() == kind)
            .count() as u64
    }

    /// Writes every file, and a few files the loader must ignore.
    fn write(&self, directory: &Path) -> io::Result<()> {
        for file in &self.files {
            let path = directory.join(file.path);
            fs::create_dir_all(path.parent().expect("files are below the directory"))?;
            fs::write(path, file.bytes())?;
        }
        fs::write(directory.join("README.txt"), "not a snapshot file\n")?;
        fs::write(directory.join("a.units.jsonl.bak"), "{broken\n")?;
        Ok(())
    }
}

// --- Tokens and queries -------------------------------------------------------------------

/// A bearer token and the stations it may access (`None`: `"*"`).
#[derive(Clone, Debug)]
struct Token {
    secret: &'static str,
    stations: Option<BTreeSet<&'static str>>,
}

impl Token {
    fn all() -> Token {
        Token {
            secret: "ops",
            stations: None,
        }
    }

    fn allows(&self, station: &str) -> bool {
        self.stations
            .as_ref()
            .is_none_or(|stations| stations.contains(station))
    }
}

fn tokens_file(tokens: &[Token]) -> String {
    let entries: Vec<Value> = tokens
        .iter()
        .map(|token| {
            json!({
                "name": token.secret,
                "sha256": Tokens::hash(token.secret),
                "stations": token.stations.as_ref().map_or(json!("*"), |stations| json!(stations)),
            })
        })
        .collect();
    json!({ "tokens": entries }).to_string()
}

/// What a request asks, before it is spelled as a query string.
#[derive(Clone, Debug)]
struct Query {
    kind: Kind,
    /// `None`: not given, every station the token may access. Never empty; items
    /// may repeat.
    stations: Option<Vec<&'static str>>,
    /// Nanoseconds since the epoch; at least one of the two is given.
    from: Option<i128>,
    to: Option<i128>,
    types: Vec<&'static str>,
    serial: Option<&'static str>,
    /// Empty: not given, which means `["output"]`.
    directions: Vec<&'static str>,
    names: Vec<&'static str>,
    /// `/units` only; empty: not given.
    results: Vec<&'static str>,
}

impl Query {
    /// The window of CONTRACT section 5, or `None` when it is empty or reversed.
    fn window(&self) -> Option<(i128, i128)> {
        let (from, to) = match (self.from, self.to) {
            (Some(from), Some(to)) => (from, to),
            (Some(from), None) => (from, from + DAY),
            (None, Some(to)) => (to - DAY, to),
            (None, None) => unreachable!("generated queries name their window"),
        };
        (from < to).then_some((from, to))
    }
}

// --- The reference ------------------------------------------------------------------------

/// The request as the shared reference model (`common::reference`) states it: the
/// window resolved, the token's scope, the filters.
fn model_query(token: &Token, query: &Query, (from, to): (i128, i128)) -> common::Query {
    let strings = |items: &[&str]| items.iter().map(|item| item.to_string()).collect();
    common::Query {
        kind: match query.kind {
            Kind::Units => common::Kind::Units,
            Kind::Metrics => common::Kind::Metrics,
        },
        from,
        to,
        stations: query.stations.as_deref().map(strings),
        scope: token
            .stations
            .as_ref()
            .map(|stations| stations.iter().map(|station| station.to_string()).collect()),
        types: strings(&query.types),
        serial: query.serial.map(str::to_owned),
        directions: strings(&query.directions),
        names: strings(&query.names),
        results: strings(&query.results),
    }
}

/// What the contract says a request must get.
#[derive(Debug)]
enum Outcome {
    Records(Vec<Value>),
    Error {
        status: u16,
        code: &'static str,
        /// `None`: not checked.
        details: Option<Value>,
    },
}

/// The outcome of an unpaged request (`max_records`) or of a walk's first page
/// (`None`), in the contract's precedence: the 400s of the parameters, then 403,
/// then `result_too_large`.
fn expected(
    snapshot: &Snapshot,
    token: &Token,
    query: &Query,
    max_records: Option<usize>,
) -> Outcome {
    let Some(window) = query.window() else {
        return Outcome::Error {
            status: 400,
            code: "invalid_window",
            details: None,
        };
    };
    let forbidden: BTreeSet<&str> = query
        .stations
        .iter()
        .flatten()
        .copied()
        .filter(|station| !token.allows(station))
        .collect();
    if !forbidden.is_empty() {
        return Outcome::Error {
            status: 403,
            code: "forbidden",
            details: Some(json!({ "stations": forbidden })),
        };
    }
    let records = common::reference(&snapshot.model(), &model_query(token, query, window));
    match max_records {
        Some(max) if records.len() > max => Outcome::Error {
            status: 400,
            code: "result_too_large",
            details: Some(json!({ "max_records": max })),
        },
        _ => Outcome::Records(records),
    }
}

// --- Spelling a query -------------------------------------------------------------------------

/// A deterministic source of spelling choices (separators, encodings, parameter
/// order, time formats), so one query can be written many equivalent ways.
struct Spelling(u64);

impl Spelling {
    /// One of `0..choices` (splitmix64).
    fn pick(&mut self, choices: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z % choices as u64) as usize
    }

    fn coin(&mut self) -> bool {
        self.pick(2) == 0
    }
}

/// What must be percent-encoded in a query value at the least.
const RESERVED: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'#')
    .add(b'%')
    .add(b'&')
    .add(b'+')
    .add(b',')
    .add(b'=');

fn encode(item: &str, spelling: &mut Spelling) -> String {
    let set = if spelling.coin() {
        NON_ALPHANUMERIC
    } else {
        RESERVED
    };
    utf8_percent_encode(item, set).to_string()
}

/// A comma list: items maybe padded with (encoded or `+`) spaces, `,` or `%2C`,
/// maybe an empty item somewhere.
fn list(items: &[&str], spelling: &mut Spelling) -> String {
    let mut parts: Vec<String> = items
        .iter()
        .map(|item| {
            let pad = ["", "", "%20", "+"][spelling.pick(4)];
            format!("{pad}{}{pad}", encode(item, spelling))
        })
        .collect();
    if spelling.pick(4) == 0 {
        let at = spelling.pick(parts.len() + 1);
        parts.insert(at, String::new());
    }
    let separator = if spelling.coin() { "," } else { "%2C" };
    parts.join(separator)
}

/// A repeatable list parameter: its items over one or several parameters.
fn repeatable(name: &str, items: &[&str], spelling: &mut Spelling, params: &mut Vec<String>) {
    if items.is_empty() {
        if spelling.pick(3) == 0 {
            params.push(format!("{name}="));
        }
        return;
    }
    let mut groups: Vec<Vec<&str>> = Vec::new();
    for item in items {
        if groups.is_empty() || spelling.coin() {
            groups.push(Vec::new());
        }
        groups.last_mut().expect("a group was pushed").push(item);
    }
    for group in groups {
        params.push(format!("{name}={}", list(&group, spelling)));
    }
}

/// `from`/`to`: epoch milliseconds when exact, else RFC 3339 with any offset, its
/// `+` raw or encoded.
fn query_time(at: i128, spelling: &mut Spelling) -> String {
    if at % 1_000_000 == 0 && spelling.pick(3) == 0 {
        return (at / 1_000_000).to_string();
    }
    let style = TimeStyle {
        offset: spelling.pick(OFFSETS.len()),
        min_fraction_digits: [0, 0, 3, 9][spelling.pick(4)],
        lower_case_t: spelling.pick(4) == 0,
    };
    let text = write_time(at, style);
    if spelling.coin() {
        text.replace('+', "%2B").replace(':', "%3A")
    } else {
        text
    }
}

/// The request URI of `query` and `extra` parameters, spelled as `spelling` says.
fn uri(query: &Query, extra: &[String], spelling: &mut Spelling) -> String {
    let mut params: Vec<String> = extra.to_vec();
    match &query.stations {
        None => match spelling.pick(3) {
            0 => {}
            1 => params.push("station_ids=".to_owned()),
            _ => params.push("station_ids=%20,,".to_owned()),
        },
        Some(stations) => params.push(format!("station_ids={}", list(stations, spelling))),
    }
    for (name, at) in [("from", query.from), ("to", query.to)] {
        if let Some(at) = at {
            params.push(format!("{name}={}", query_time(at, spelling)));
        }
    }
    match query.kind {
        Kind::Units => {
            repeatable("type", &query.types, spelling, &mut params);
            if let Some(serial) = query.serial {
                params.push(format!("serial_number={}", encode(serial, spelling)));
            }
            if query.directions.is_empty() && spelling.pick(4) == 0 {
                // The default, spelled out: the same normalized query.
                params.push("direction=output".to_owned());
            } else {
                repeatable("direction", &query.directions, spelling, &mut params);
            }
            repeatable("result", &query.results, spelling, &mut params);
        }
        Kind::Metrics => {
            repeatable("names", &query.names, spelling, &mut params);
            if let Some(serial) = query.serial {
                params.push(format!("serial_number={}", encode(serial, spelling)));
            }
        }
    }
    for index in (1..params.len()).rev() {
        params.swap(index, spelling.pick(index + 1));
    }
    let endpoint = match query.kind {
        Kind::Units => Endpoint::Units,
        Kind::Metrics => Endpoint::Metrics,
    };
    format!("{}?{}", endpoint.spec().path, params.join("&"))
}

// --- Strategies ---------------------------------------------------------------------------------

/// A few instants a second apart, in two blocks of the sealed tier five hours
/// apart (so that the earlier is sealed, issue 22), with fractions at the edges of
/// a second: ties are frequent.
fn instant() -> impl Strategy<Value = i128> {
    (
        select(vec![0i128, 5 * 3600]),
        0i128..4,
        select(vec![0i128, 1, 500_000_000, 999_999_999]),
    )
        .prop_map(|(hour, second, nanos)| BASE + (hour + second) * NANOS + nanos)
}

fn time_style() -> impl Strategy<Value = TimeStyle> {
    (
        0..OFFSETS.len(),
        prop_oneof![3 => Just(0usize), 1 => 1usize..=9],
        prop::bool::weighted(0.2),
    )
        .prop_map(|(offset, min_fraction_digits, lower_case_t)| TimeStyle {
            offset,
            min_fraction_digits,
            lower_case_t,
        })
}

fn line_style() -> impl Strategy<Value = LineStyle> {
    (any::<bool>(), any::<bool>(), prop::bool::weighted(0.2)).prop_map(
        |(nulls, spaced, unknown_field)| LineStyle {
            nulls,
            spaced,
            unknown_field,
        },
    )
}

/// An optional field: mostly present.
fn maybe(pool: &'static [&'static str]) -> impl Strategy<Value = Option<&'static str>> {
    option::weighted(0.75, select(pool))
}

fn scalar() -> impl Strategy<Value = Option<Scalar>> {
    option::weighted(0.75, select(SCALARS))
}

fn unit_body() -> impl Strategy<Value = Body> {
    (
        maybe(UNIT_TYPES),
        select(DIRECTIONS),
        maybe(RESULTS),
        maybe(METADATA),
    )
        .prop_map(|(unit_type, direction, result, metadata)| Body::Unit {
            unit_type,
            direction,
            result,
            metadata,
        })
}

fn metric_body() -> impl Strategy<Value = Body> {
    (
        select(NAMES),
        scalar(),
        maybe(MEASURE_UNITS),
        maybe(METRIC_TYPES),
        scalar(),
        scalar(),
    )
        .prop_map(
            |(name, value, unit, metric_type, limit_upper, limit_lower)| Body::Metric {
                name,
                value,
                unit,
                metric_type,
                limit_upper,
                limit_lower,
            },
        )
}

fn record(kind: Kind, stations: Vec<&'static str>) -> impl Strategy<Value = Record> {
    let body = match kind {
        Kind::Units => unit_body().boxed(),
        Kind::Metrics => metric_body().boxed(),
    };
    (
        (select(stations), instant(), time_style()),
        (
            maybe(SLOTS),
            maybe(SERIALS),
            maybe(TIME_ZONES),
            maybe(MODES),
        ),
        option::of(vec(select(TAGS), 0..3)),
        body,
        line_style(),
    )
        .prop_map(
            |((station_id, instant, time), (slot, unit_serial, tz, mode), tags, body, style)| {
                Record {
                    station_id,
                    instant,
                    time_created: write_time(instant, time),
                    slot,
                    unit_serial,
                    tz,
                    mode,
                    tags,
                    body,
                    style,
                }
            },
        )
}

fn layout() -> impl Strategy<Value = Layout> {
    (any::<bool>(), any::<bool>(), any::<bool>(), 1usize..=2).prop_map(
        |(crlf, blank_lines, final_line_end, gzip_members)| Layout {
            crlf,
            blank_lines,
            final_line_end,
            gzip_members,
        },
    )
}

/// One to two files of `kind`, each with up to 16 records of the given stations.
fn files(
    kind: Kind,
    paths: &'static [&'static str],
    stations: Vec<&'static str>,
) -> impl Strategy<Value = Vec<SnapshotFile>> {
    subsequence(paths, 1..=2).prop_flat_map(move |paths| {
        paths
            .into_iter()
            .map(|path| {
                (vec(record(kind, stations.clone()), 0..=16), layout()).prop_map(
                    move |(records, layout)| SnapshotFile {
                        path,
                        records,
                        layout,
                    },
                )
            })
            .collect::<Vec<_>>()
    })
}

/// One to six stations, two to four files of both kinds.
fn snapshot() -> impl Strategy<Value = Snapshot> {
    subsequence(STATIONS, 1..=6).prop_flat_map(|stations| {
        (
            files(Kind::Units, UNIT_PATHS, stations.clone()),
            files(Kind::Metrics, METRIC_PATHS, stations.clone()),
            prop_oneof![3 => Just(Some(Duration::from_secs(1))), 1 => Just(None)],
        )
            .prop_map(move |(mut files, metric_files, hot)| {
                files.extend(metric_files);
                files.sort_by(|left, right| left.path.as_bytes().cmp(right.path.as_bytes()));
                Snapshot {
                    stations: stations.clone(),
                    files,
                    hot,
                }
            })
    })
}

/// A station id as queries and tokens name them: mostly one of the snapshot's,
/// else any, existing or not.
fn station_name(stations: &[&'static str]) -> impl Strategy<Value = &'static str> {
    prop_oneof![
        3 => select(stations.to_vec()),
        1 => select(STATIONS),
        1 => select(GHOSTS),
    ]
}

/// A `station_ids` list (repeats allowed), given with `probability`.
fn station_list(
    probability: f64,
    stations: &[&'static str],
) -> impl Strategy<Value = Option<Vec<&'static str>>> {
    option::weighted(probability, vec(station_name(stations), 1..=4))
}

/// A window bound: near the records (to the nanosecond around them) or well away.
fn bound() -> impl Strategy<Value = i128> {
    prop_oneof![
        6 => (instant(), -1i128..=1).prop_map(|(at, delta)| at + delta),
        1 => Just(BASE - 3_600 * NANOS),
        1 => Just(BASE + 6 * 3_600 * NANOS),
    ]
}

/// `(from, to)`: often around everything, mostly both in order, sometimes one
/// alone, sometimes reversed or empty.
fn window() -> impl Strategy<Value = (Option<i128>, Option<i128>)> {
    let everything = (Some(BASE - 3_600 * NANOS), Some(BASE + 6 * 3_600 * NANOS));
    prop_oneof![
        5 => Just(everything),
        6 => (bound(), bound()).prop_map(|(a, b)| (Some(a.min(b)), Some(a.max(b)))),
        1 => bound().prop_map(|from| (Some(from), None)),
        1 => bound().prop_map(|to| (None, Some(to))),
        1 => (bound(), bound()).prop_map(|(from, to)| (Some(from), Some(to))),
    ]
}

/// A list filter: half the time not given, else one to three items.
fn filter_list(pool: &'static [&'static str]) -> impl Strategy<Value = Vec<&'static str>> {
    prop_oneof![Just(Vec::new()), vec(select(pool), 1..=3)]
}

fn units_query(probability: f64, stations: &[&'static str]) -> impl Strategy<Value = Query> {
    (
        station_list(probability, stations),
        window(),
        filter_list(&["board", "Board", "psu", "fan"]),
        option::weighted(0.2, select(&["SN1", "SN2", "sn1", "SN9"][..])),
        vec(select(DIRECTIONS), 0..=2),
        filter_list(&["pass", "FAIL", "Pass", "abort"]),
    )
        .prop_map(
            |(stations, (from, to), types, serial, directions, results)| Query {
                kind: Kind::Units,
                stations,
                from,
                to,
                types,
                serial,
                directions,
                names: Vec::new(),
                results,
            },
        )
}

fn metrics_query(probability: f64, stations: &[&'static str]) -> impl Strategy<Value = Query> {
    (
        station_list(probability, stations),
        window(),
        filter_list(&["temp", "Temp", "volt", "rpm"]),
        option::weighted(0.2, select(&["SN1", "SN2", "sn1", "SN9"][..])),
    )
        .prop_map(|(stations, (from, to), names, serial)| Query {
            kind: Kind::Metrics,
            stations,
            from,
            to,
            types: Vec::new(),
            serial,
            directions: Vec::new(),
            names,
            results: Vec::new(),
        })
}

/// A query of either endpoint, with a `station_ids` list at `probability`.
fn query(probability: f64, stations: &[&'static str]) -> impl Strategy<Value = Query> {
    prop_oneof![
        units_query(probability, stations),
        metrics_query(probability, stations)
    ]
}

/// A token limited to a random set of stations, existing or not (maybe none).
fn limited_token(secret: &'static str, stations: &[&'static str]) -> impl Strategy<Value = Token> {
    vec(station_name(stations), 0..=4).prop_map(move |stations| Token {
        secret,
        stations: Some(stations.into_iter().collect()),
    })
}

// --- Serving a snapshot in-process -------------------------------------------------------------

/// A status and a parsed body (or a string saying why it is not JSON).
struct Reply {
    status: u16,
    body: Value,
}

type Call = Box<dyn Fn(String, &'static str) -> LocalBoxFuture<'static, Reply>>;

/// A snapshot loaded by the real loader and served by the real engine and app.
/// Dropping it stops the shard threads.
struct Server {
    call: Call,
    engine: Engine,
    _directory: tempfile::TempDir,
}

fn failure(what: &str, error: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(format!("{what}: {error}"))
}

impl Server {
    async fn start(
        snapshot: &Snapshot,
        shards: usize,
        tokens: &[Token],
        max_records: usize,
    ) -> Result<Server, TestCaseError> {
        let directory = tempfile::tempdir().map_err(|error| failure("tempdir", error))?;
        snapshot
            .write(directory.path())
            .map_err(|error| failure("writing the snapshot", error))?;
        let options = LoadOptions {
            directory: directory.path().to_path_buf(),
            shards,
            on_invalid: OnInvalid::Fail,
            generation: 1,
            threads: 2,
            hot: snapshot.hot,
            cache: stq_core::data::BlockCache::new(1 << 30),
        };
        let Start {
            generation, report, ..
        } = options
            .start(None, None)
            .map_err(|error| failure("loading the snapshot", error))?;
        prop_assert_eq!(
            report.units,
            snapshot.count(Kind::Units),
            "unit records loaded"
        );
        prop_assert_eq!(
            report.metrics,
            snapshot.count(Kind::Metrics),
            "metric records loaded"
        );
        let tokens = tokens_file(tokens)
            .parse::<Tokens>()
            .map_err(|error| failure("tokens", error))?;

        let engine = Engine::start(
            generation,
            Arc::new(tokens),
            Settings::new(
                Limits {
                    max_records,
                    max_stations: 1000,
                    ..Limits::default()
                },
                None,
            )
            .expect("a random cursor key"),
            Default::default(),
        );
        let state = web::Data::new(AppState::new(engine.clone()));
        let service = Rc::new(actix_test::init_service(app(state, engine.router())).await);
        let call: Call = Box::new(move |uri, secret| {
            let service = Rc::clone(&service);
            Box::pin(async move {
                let request = actix_test::TestRequest::get()
                    .uri(&uri)
                    .insert_header(("Authorization", format!("Bearer {secret}")))
                    .to_request();
                let response = actix_test::call_service(&*service, request).await;
                let status = response.status().as_u16();
                let bytes = actix_test::read_body(response).await;
                let body = serde_json::from_slice(&bytes).unwrap_or_else(|error| {
                    Value::String(format!(
                        "not JSON ({error}): {}",
                        String::from_utf8_lossy(&bytes)
                    ))
                });
                Reply { status, body }
            })
        });
        Ok(Server {
            call,
            engine,
            _directory: directory,
        })
    }

    async fn get(&self, uri: &str, token: &Token) -> Reply {
        (self.call)(uri.to_owned(), token.secret).await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.engine.stop();
    }
}

// --- Checking replies ---------------------------------------------------------------------------

/// `station@time_created` of each record, for readable failure messages.
fn brief(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .map(|record| {
            format!(
                "{}@{}",
                record["station_id"].as_str().unwrap_or("?"),
                record["time_created"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

fn data(reply: &Reply) -> Result<Vec<Value>, TestCaseError> {
    match reply.body["data"].as_array() {
        Some(records) => Ok(records.clone()),
        None => Err(TestCaseError::fail(format!(
            "no data array in {}",
            reply.body
        ))),
    }
}

fn same_records(got: &[Value], wanted: &[Value], uri: &str) -> Result<(), TestCaseError> {
    if got != wanted {
        let first_difference = got
            .iter()
            .zip(wanted)
            .position(|(got, wanted)| got != wanted)
            .unwrap_or(got.len().min(wanted.len()));
        return Err(TestCaseError::fail(format!(
            "GET {uri}\n got    {:?}\n wanted {:?}\n first difference at {first_difference}:\n got    {}\n wanted {}",
            brief(got),
            brief(wanted),
            got.get(first_difference).unwrap_or(&Value::Null),
            wanted.get(first_difference).unwrap_or(&Value::Null),
        )));
    }
    Ok(())
}

/// Checks an unpaged reply against the contract's outcome.
fn check(reply: &Reply, outcome: &Outcome, uri: &str) -> Result<(), TestCaseError> {
    match outcome {
        Outcome::Records(wanted) => {
            prop_assert_eq!(reply.status, 200, "GET {} answered {}", uri, reply.body);
            same_records(&data(reply)?, wanted, uri)?;
            prop_assert!(
                reply.body["meta"].get("next_cursor").is_none(),
                "GET {} without limit has a next_cursor",
                uri
            );
        }
        Outcome::Error {
            status,
            code,
            details,
        } => {
            prop_assert_eq!(reply.status, *status, "GET {} answered {}", uri, reply.body);
            prop_assert_eq!(&reply.body["error"]["code"], code, "GET {}", uri);
            if let Some(details) = details {
                prop_assert_eq!(&reply.body["error"]["details"], details, "GET {}", uri);
            }
        }
    }
    Ok(())
}

// --- The properties -------------------------------------------------------------------------------

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/proptest-regressions/properties.txt"
        )))),
        ..ProptestConfig::default()
    }
}

/// Property 1: a snapshot, a shard count, a `max_records` (small ones make
/// `result_too_large` likely) and queries, each with a spelling.
#[derive(Clone, Debug)]
struct ReferenceCase {
    snapshot: Snapshot,
    shards: usize,
    max_records: usize,
    queries: Vec<(Query, u64)>,
}

fn reference_case() -> impl Strategy<Value = ReferenceCase> {
    snapshot()
        .prop_flat_map(|snapshot| {
            let queries = vec((query(0.5, &snapshot.stations), any::<u64>()), 1..=6);
            (
                Just(snapshot),
                1usize..=4,
                prop_oneof![1usize..=8, Just(1000)],
                queries,
            )
        })
        .prop_map(|(snapshot, shards, max_records, queries)| ReferenceCase {
            snapshot,
            shards,
            max_records,
            queries,
        })
}

async fn engine_matches_reference(case: ReferenceCase) -> Result<(), TestCaseError> {
    let token = Token::all();
    let server = Server::start(
        &case.snapshot,
        case.shards,
        std::slice::from_ref(&token),
        case.max_records,
    )
    .await?;
    for (query, seed) in &case.queries {
        let uri = uri(query, &[], &mut Spelling(*seed));
        let reply = server.get(&uri, &token).await;
        let outcome = expected(&case.snapshot, &token, query, Some(case.max_records));
        check(&reply, &outcome, &uri)?;
    }
    Ok(())
}

#[test]
fn the_engine_answers_what_the_reference_filter_answers() {
    let system = actix_rt::System::new();
    proptest!(config(128), |(case in reference_case())| {
        system.block_on(engine_matches_reference(case))?;
    });
}

/// Property 2: queries, each walked with a list of `(limit, spelling)` per page
/// (reused cyclically when the walk is longer). A small `max_records` shows that
/// walks are not bound by it.
#[derive(Clone, Debug)]
struct PagingCase {
    snapshot: Snapshot,
    shards: usize,
    max_records: usize,
    walks: Vec<(Query, Vec<(usize, u64)>)>,
}

/// The largest `limit` of a page.
const MAX_LIMIT: usize = 5;

fn paging_case() -> impl Strategy<Value = PagingCase> {
    snapshot()
        .prop_flat_map(|snapshot| {
            let pages = vec((1..=MAX_LIMIT, any::<u64>()), 1..=6);
            let walks = vec((query(0.3, &snapshot.stations), pages), 1..=4);
            let max_records = prop_oneof![Just(MAX_LIMIT), Just(1000)];
            (Just(snapshot), 1usize..=4, max_records, walks)
        })
        .prop_map(|(snapshot, shards, max_records, walks)| PagingCase {
            snapshot,
            shards,
            max_records,
            walks,
        })
}

async fn walks_return_everything_once(case: PagingCase) -> Result<(), TestCaseError> {
    let token = Token::all();
    let server = Server::start(
        &case.snapshot,
        case.shards,
        std::slice::from_ref(&token),
        case.max_records,
    )
    .await?;
    for (query, pages) in &case.walks {
        let wanted = match expected(&case.snapshot, &token, query, None) {
            Outcome::Records(records) => records,
            error => {
                let (limit, seed) = pages[0];
                let uri = uri(query, &[format!("limit={limit}")], &mut Spelling(seed));
                check(&server.get(&uri, &token).await, &error, &uri)?;
                continue;
            }
        };
        let mut seen: Vec<Value> = Vec::new();
        let mut cursor: Option<String> = None;
        for page in 0.. {
            prop_assert!(
                page <= wanted.len(),
                "the walk did not end after {} pages",
                page
            );
            let (limit, seed) = pages[page % pages.len()];
            let mut extra = vec![format!("limit={limit}")];
            extra.extend(cursor.iter().map(|cursor| format!("cursor={cursor}")));
            let uri = uri(query, &extra, &mut Spelling(seed));
            let reply = server.get(&uri, &token).await;
            prop_assert_eq!(reply.status, 200, "GET {} answered {}", uri, reply.body);
            let records = data(&reply)?;
            // Present on every page of a walk: a string, or null on the last.
            prop_assert!(
                reply.body["meta"]
                    .get("next_cursor")
                    .is_some_and(|cursor| cursor.is_string() || cursor.is_null()),
                "GET {}: next_cursor missing or neither a string nor null",
                uri
            );
            let next = reply.body["meta"]["next_cursor"]
                .as_str()
                .map(str::to_owned);
            prop_assert!(records.len() <= limit, "GET {}: more than limit", uri);
            seen.extend(records.iter().cloned());
            match next {
                Some(next) => {
                    prop_assert_eq!(
                        records.len(),
                        limit,
                        "GET {}: a page before the last is not full",
                        uri
                    );
                    prop_assert!(
                        seen.len() < wanted.len(),
                        "GET {}: next_cursor after the last record ({} of {})",
                        uri,
                        seen.len(),
                        wanted.len()
                    );
                    cursor = Some(next);
                }
                None => {
                    same_records(&seen, &wanted, &format!("{uri} (all pages)"))?;
                    break;
                }
            }
        }
    }
    Ok(())
}

#[test]
fn following_cursors_returns_everything_exactly_once() {
    let system = actix_rt::System::new();
    proptest!(config(96), |(case in paging_case())| {
        system.block_on(walks_return_everything_once(case))?;
    });
}

/// Property 3: an all-stations token and two limited ones; each query is asked
/// with one of them.
#[derive(Clone, Debug)]
struct AccessCase {
    snapshot: Snapshot,
    shards: usize,
    max_records: usize,
    tokens: Vec<Token>,
    queries: Vec<(usize, Query, u64)>,
}

fn access_case() -> impl Strategy<Value = AccessCase> {
    snapshot()
        .prop_flat_map(|snapshot| {
            let tokens = (
                limited_token("line", &snapshot.stations),
                limited_token("cell", &snapshot.stations),
            );
            let queries = vec(
                (0usize..3, query(0.8, &snapshot.stations), any::<u64>()),
                1..=6,
            );
            (
                Just(snapshot),
                1usize..=4,
                prop_oneof![1usize..=8, Just(1000)],
                tokens,
                queries,
            )
        })
        .prop_map(
            |(snapshot, shards, max_records, (line, cell), queries)| AccessCase {
                snapshot,
                shards,
                max_records,
                tokens: vec![Token::all(), line, cell],
                queries,
            },
        )
}

async fn tokens_are_confined(case: AccessCase) -> Result<(), TestCaseError> {
    let server = Server::start(&case.snapshot, case.shards, &case.tokens, case.max_records).await?;
    for (token, query, seed) in &case.queries {
        let token = &case.tokens[*token];
        let uri = uri(query, &[], &mut Spelling(*seed));
        let reply = server.get(&uri, token).await;
        if reply.status == 200 {
            for record in data(&reply)? {
                let station = record["station_id"].as_str().unwrap_or_default();
                prop_assert!(
                    token.allows(station),
                    "GET {} as {:?} returned a record of {:?}",
                    uri,
                    token,
                    station
                );
            }
        }
        let outcome = expected(&case.snapshot, token, query, Some(case.max_records));
        check(&reply, &outcome, &format!("{uri} as {}", token.secret))?;
    }
    Ok(())
}

#[test]
fn tokens_see_only_their_stations() {
    let system = actix_rt::System::new();
    proptest!(config(128), |(case in access_case())| {
        system.block_on(tokens_are_confined(case))?;
    });
}
