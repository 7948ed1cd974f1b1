//! Property tests of the two parsers that read hostile input directly: the query
//! string parser (`QueryParams::parse`, CONTRACT sections 4, 5 and 9) and the
//! snapshot line parser (`crate::domain::record::parse_line`, CONTRACT section 2). The
//! invariants themselves live in `crate::domain::checks`, shared with the
//! cargo-fuzz targets under `fuzz/`; this file says which inputs they must hold for:
//!
//! 1. Query strings: arbitrary text; query strings made of the real parameter names
//!    (and unknown ones such as `access_token`, `station_id`) with hostile values
//!    (percent-escapes, `%2C`, `+`, NUL, overlong UTF-8, long lists, huge numbers,
//!    odd Unicode); and the fuzz seeds; each under small random limits.
//! 2. Two spellings of the same request (comma lists against repeated parameters,
//!    `,` against `%2C`, padding, empty items, repeats, any order, and for times
//!    `+`, `%2B`, `Z` and epoch milliseconds) parse to equal parameters, and those
//!    are exactly the request's sets.
//! 3. Snapshot lines: arbitrary text, and valid lines (the fuzz seeds and generated
//!    records with odd time spellings) mutated by splicing in hostile JSON; a valid
//!    generated record is always accepted.
//! 4. The contract's date-time grammar accepts nothing that chrono's RFC 3339
//!    parser rejects, and reads the same instant.
//!
//! Case counts keep the file at a few seconds in debug; `PROPTEST_CASES=20000`
//! soaks it. Failing seeds are kept in
//! `crates/stq-core/proptest-regressions/domain/parser_properties.txt`.

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use chrono::DateTime;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::FileFailurePersistence;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::domain::checks;
use crate::domain::query::{Limits, QueryParams};
use crate::domain::record::{Direction, Directions, Kind};
use crate::domain::time::{parse_query_time, parse_rfc3339, Timestamp};

/// The parsers take microseconds, so 512 cases a property cost little.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/proptest-regressions/domain/parser_properties.txt"
        )))),
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------
// Query strings
// ---------------------------------------------------------------------------

/// The parameter names of both endpoints.
const PARAMETER_NAMES: &[&str] = &[
    "station_ids",
    "from",
    "to",
    "type",
    "serial_number",
    "result",
    "direction",
    "names",
    "limit",
    "cursor",
];

/// Names no endpoint accepts: a token in the URL, typos, encoded near misses.
const UNKNOWN_NAMES: &[&str] = &[
    "access_token",
    "station_id",
    "Station_ids",
    "%73tation_ids",
    "station%5Fids",
    "limit%00",
    "",
];

/// Pieces of hostile values; a value is a few of them run together.
const VALUE_PIECES: &[&str] = &[
    "ST-01",
    "a",
    ",",
    "%2C",
    "%2c",
    "+",
    "%2B",
    "%20",
    " ",
    "%00",
    "%C0%AF",
    "%E0%80%AF",
    "%FF",
    "%",
    "%2",
    "%ZZ",
    "=",
    "é",
    "%C3%A9",
    "\u{202e}",
    "\u{feff}",
    "\u{3000}",
    "😀",
    "input",
    "output",
    "Output",
    "0",
    "0007",
    "1",
    "-1",
    "1000",
    "99999999999999999999999",
    "9223372036854775807",
    "-9223372036854775808",
];

fn value() -> impl Strategy<Value = String> {
    let piece = prop_oneof![4 => select(VALUE_PIECES), 1 => select(TIME_VALUES)];
    vec(piece, 0..6).prop_map(|pieces| pieces.concat())
}

/// `a,b,c…` of short ids, up to 60 of them: mostly within a small `max_stations`,
/// sometimes far beyond it.
fn id_list() -> impl Strategy<Value = String> {
    let length = prop_oneof![3 => 0usize..6, 1 => 0usize..60];
    (
        length.prop_flat_map(|length| vec("[A-Za-z0-9é-]{0,4}", length)),
        any::<bool>(),
    )
        .prop_map(|(items, encoded)| items.join(if encoded { "%2C" } else { "," }))
}

/// Times and epoch milliseconds, valid and not, as `from` and `to` receive them.
const TIME_VALUES: &[&str] = &[
    "1704067200000",
    "-1",
    "9223372036854775807",
    "-9223372036854775808",
    "99999999999999999999999",
    "2024-01-01T00:00:00Z",
    "2024-01-01t00:00:00.123456789z",
    "2024-01-01T01:00:00+01:00",
    "2024-01-01T01:00:00%2B01:00",
    "2024-01-01T01:00:00%2001:00",
    "2024-01-01T00:00:00-00:00",
    "0000-01-01T00:00:00Z",
    "0000-01-01T00:00:00+23:59",
    "9999-12-31T23:59:59.999999999Z",
    "9999-12-31T23:59:59.999999999-23:59",
    "2024-01-01T24:00:00Z",
    "2024-01-01T00:00:60Z",
    "2024-01-01T00:00:00.1234567890Z",
];

const LIMIT_VALUES: &[&str] = &[
    "1",
    "2",
    "3",
    "0007",
    "10",
    "1000",
    "100000",
    "0",
    "-1",
    "+1",
    "99999999999999999999999",
];

const DIRECTION_ITEMS: &[&str] = &["input", "output", "Output", "", "+input+", "%20output"];

/// A value for parameter `name`: mostly one of the kind it takes, so that many
/// queries are accepted and their limits checked; else any hostile value.
fn value_for(name: &'static str) -> BoxedStrategy<String> {
    let fitting = match name {
        "from" | "to" => select(TIME_VALUES).prop_map(str::to_owned).boxed(),
        "limit" => select(LIMIT_VALUES).prop_map(str::to_owned).boxed(),
        "direction" => (vec(select(DIRECTION_ITEMS), 0..4), select(vec![",", "%2C"]))
            .prop_map(|(items, separator)| items.join(separator))
            .boxed(),
        "station_ids" => id_list().boxed(),
        _ => value().boxed(),
    };
    prop_oneof![3 => fitting, 1 => value()].boxed()
}

fn structured_query() -> impl Strategy<Value = String> {
    let name = prop_oneof![8 => select(PARAMETER_NAMES), 1 => select(UNKNOWN_NAMES)];
    let pair = (
        name.prop_flat_map(|name| (Just(name), value_for(name))),
        any::<bool>(),
    )
        .prop_map(|((name, value), with_equals)| {
            if with_equals || !value.is_empty() {
                format!("{name}={value}")
            } else {
                name.to_owned()
            }
        });
    vec(pair, 0..6).prop_map(|pairs| pairs.join("&"))
}

/// Text that looks like a query string more often than arbitrary Unicode does.
fn query_like_text() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), "[a-z_=&%0-9A-Fa-f,+.:TZtz -]{0,160}",]
}

fn limits() -> impl Strategy<Value = Limits> {
    let window = prop_oneof![
        Just(None),
        (1u64..=3 * 86_400_000_000_000).prop_map(|nanos| Some(Duration::from_nanos(nanos))),
        select(vec![1u64, 3600, 43_200, 86_400, 31 * 86_400])
            .prop_map(|seconds| Some(Duration::from_secs(seconds))),
    ];
    (
        prop_oneof![1usize..=12, Just(100_000)],
        prop_oneof![0usize..=6, Just(1000)],
        prop_oneof![0usize..=400, Just(8192)],
        window,
    )
        .prop_map(
            |(max_records, max_stations, max_query_bytes, max_window)| Limits {
                max_records,
                max_stations,
                max_query_bytes,
                max_window,
                ..Limits::default()
            },
        )
}

/// The time a request arrived: ordinary, and the ends of the time line.
fn now() -> impl Strategy<Value = Timestamp> {
    prop_oneof![
        4 => select(vec![
            Timestamp { seconds: 1_704_153_600, nanos: 0 },
            Timestamp { seconds: 0, nanos: 0 },
            Timestamp::MIN,
            Timestamp::MAX,
        ]),
        1 => (any::<i64>(), 0u32..1_000_000_000)
            .prop_map(|(seconds, nanos)| Timestamp { seconds, nanos }),
    ]
}

fn kind() -> impl Strategy<Value = Kind> {
    select(vec![Kind::Units, Kind::Metrics])
}

fn seed_directory(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target)
}

/// The seed files of a fuzz target, sorted by name.
fn seeds(target: &str) -> Vec<Vec<u8>> {
    let directory = seed_directory(target);
    let mut paths: Vec<PathBuf> = fs::read_dir(&directory)
        .unwrap_or_else(|error| panic!("{}: {error}", directory.display()))
        .map(|entry| entry.expect("readable seed directory").path())
        .collect();
    paths.sort();
    let contents: Vec<Vec<u8>> = paths
        .iter()
        .map(|path| fs::read(path).expect("readable seed"))
        .collect();
    assert!(
        contents.len() >= 10,
        "too few seeds in {}",
        directory.display()
    );
    contents
}

/// The seeds of `fuzz/seeds/query_string`, without the five header bytes that
/// choose the fuzz target's limits.
fn query_seeds() -> Vec<String> {
    seeds("query_string")
        .into_iter()
        .map(|seed| String::from_utf8(seed[5..].to_vec()).expect("UTF-8 query seed"))
        .collect()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_text_never_breaks_the_query_parser(
        query in query_like_text(),
        limits in limits(),
        now in now(),
    ) {
        for kind in [Kind::Units, Kind::Metrics] {
            kind.check_query(&query, limits, now);
        }
    }

    #[test]
    fn hostile_values_of_real_parameters_never_break_the_query_parser(
        query in structured_query(),
        limits in limits(),
        now in now(),
    ) {
        for kind in [Kind::Units, Kind::Metrics] {
            kind.check_query(&query, limits, now);
        }
    }

    #[test]
    fn seed_queries_hold_under_any_limits(
        seed in select(query_seeds()),
        limits in limits(),
        now in now(),
        kind in kind(),
    ) {
        kind.check_query(&seed, limits, now);
    }
}

// ---------------------------------------------------------------------------
// Two spellings of one request
// ---------------------------------------------------------------------------

/// List items: none has a comma or surrounding white space, some need encoding.
const ITEMS: &[&str] = &[
    "ST-01",
    "ST-1",
    "ST-10",
    "a",
    "B",
    "é",
    "a b",
    "x%y",
    "+",
    "a&b",
    "k=v",
    "日本",
    "😀",
    "\u{202e}x",
];

/// One request, as sets; each spelling of it must parse to [`Request::expected`].
#[derive(Clone, Debug)]
struct Request {
    kind: Kind,
    stations: Vec<&'static str>,
    /// `type` for `/units`, `names` for `/metrics`.
    filter: Vec<&'static str>,
    directions: Vec<Direction>,
    /// Unix epoch milliseconds, and the offset (minutes) to write it with.
    from: Option<(i64, i32)>,
    limit: Option<usize>,
    /// Decides every free choice of the second spelling.
    spelling_seed: u64,
}

impl Request {
    fn expected(&self) -> QueryParams {
        let mut stations: Vec<String> = self.stations.iter().map(ToString::to_string).collect();
        stations.sort();
        stations.dedup();
        let mut filter: Vec<String> = self.filter.iter().map(ToString::to_string).collect();
        filter.sort();
        filter.dedup();
        let mut directions = Directions::of(&self.directions);
        if directions.is_empty() || self.kind == Kind::Metrics {
            directions = Directions::OUTPUT;
        }
        QueryParams {
            station_ids: (!stations.is_empty()).then_some(stations),
            from: self
                .from
                .map(|(millis, _)| Timestamp::from_unix_millis(millis)),
            unit_types: if self.kind == Kind::Units {
                filter.clone()
            } else {
                Vec::new()
            },
            names: if self.kind == Kind::Metrics {
                filter
            } else {
                Vec::new()
            },
            directions,
            limit: self.limit,
            ..QueryParams::default()
        }
    }

    /// The plainest spelling: one parameter a list, `,` between items, every item
    /// percent-encoded, `from` in UTC.
    fn canonical(&self) -> String {
        let encode = |item: &str| utf8_percent_encode(item, NON_ALPHANUMERIC).to_string();
        let join = |items: &[&str]| {
            items
                .iter()
                .map(|item| encode(item))
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut pairs = Vec::new();
        if !self.stations.is_empty() {
            pairs.push(format!("station_ids={}", join(&self.stations)));
        }
        if !self.filter.is_empty() {
            pairs.push(format!("{}={}", self.filter_name(), join(&self.filter)));
        }
        if self.kind == Kind::Units && !self.directions.is_empty() {
            let directions: Vec<&str> = self.directions.iter().map(|d| d.as_str()).collect();
            pairs.push(format!("direction={}", directions.join(",")));
        }
        if let Some((millis, _)) = self.from {
            pairs.push(format!("from={}", rfc3339_text(millis, 0)));
        }
        if let Some(limit) = self.limit {
            pairs.push(format!("limit={limit}"));
        }
        pairs.join("&")
    }

    /// Another spelling of the same request: items shuffled, repeated and padded,
    /// empty items added, `%2C` for commas, repeatable lists split over several
    /// parameters, parameters in any order, `from` in another form.
    fn respelled(&self) -> String {
        let mut rng = StdRng::seed_from_u64(self.spelling_seed);
        let mut pairs = Vec::new();
        if !self.stations.is_empty() {
            let items = scramble(&self.stations, &mut rng);
            pairs.push(format!("station_ids={}", spell_list(&items, &mut rng)));
        }
        let mut repeatable = Vec::new();
        if !self.filter.is_empty() {
            repeatable.push((self.filter_name(), scramble(&self.filter, &mut rng)));
        }
        if self.kind == Kind::Units && !self.directions.is_empty() {
            let directions: Vec<&str> = self.directions.iter().map(|d| d.as_str()).collect();
            repeatable.push(("direction", scramble(&directions, &mut rng)));
        }
        for (name, items) in repeatable {
            let mut rest = items.as_slice();
            while !rest.is_empty() {
                let take = rng.gen_range(1..=rest.len());
                pairs.push(format!("{name}={}", spell_list(&rest[..take], &mut rng)));
                rest = &rest[take..];
            }
            if rng.gen_bool(0.3) {
                pairs.push(format!(
                    "{name}={}",
                    ["", ",", "%2C%20", "+"][rng.gen_range(0..4)]
                ));
            }
        }
        if let Some((millis, offset_minutes)) = self.from {
            let text = match rng.gen_range(0..3) {
                0 => millis.to_string(),
                // A `+` sent unencoded must still be read as `+`.
                1 => rfc3339_text(millis, offset_minutes),
                _ => rfc3339_text(millis, offset_minutes).replace('+', "%2B"),
            };
            pairs.push(format!("from={text}"));
        }
        if let Some(limit) = self.limit {
            pairs.push(format!("limit={}{limit}", "0".repeat(rng.gen_range(0..3))));
        }
        if self.kind == Kind::Units && self.directions.is_empty() && rng.gen_bool(0.3) {
            pairs.push("direction=".to_owned());
        }
        pairs.shuffle(&mut rng);
        if rng.gen_bool(0.3) {
            pairs.push(String::new());
        }
        pairs.join("&")
    }

    fn filter_name(&self) -> &'static str {
        match self.kind {
            Kind::Units => "type",
            Kind::Metrics => "names",
        }
    }
}

/// The items shuffled, some of them twice.
fn scramble<'a>(items: &[&'a str], rng: &mut StdRng) -> Vec<&'a str> {
    let mut scrambled = items.to_vec();
    for item in items {
        if rng.gen_bool(0.3) {
            scrambled.push(item);
        }
    }
    scrambled.shuffle(rng);
    scrambled
}

/// Items joined by `,` or `%2C`, each padded or not, spaces as `+` or `%20`, with
/// empty items here and there.
fn spell_list(items: &[&str], rng: &mut StdRng) -> String {
    let mut spelled = Vec::new();
    for item in items {
        let mut encoded = utf8_percent_encode(item, NON_ALPHANUMERIC).to_string();
        if rng.gen_bool(0.5) {
            encoded = encoded.replace("%20", "+");
        }
        for _ in 0..rng.gen_range(0..2) {
            encoded = format!("{}{encoded}{}", pad(rng), pad(rng));
        }
        spelled.push(encoded);
        if rng.gen_bool(0.2) {
            spelled.push(pad(rng).to_owned());
        }
    }
    let separator = if rng.gen_bool(0.5) { "," } else { "%2C" };
    spelled.join(separator)
}

fn pad(rng: &mut StdRng) -> &'static str {
    ["+", "%20", "%09", ""][rng.gen_range(0..4)]
}

/// `millis` as RFC 3339 at an offset of `offset_minutes`, with as many fraction
/// digits as it needs, or more.
fn rfc3339_text(millis: i64, offset_minutes: i32) -> String {
    let offset = chrono::FixedOffset::east_opt(offset_minutes * 60).expect("offset within a day");
    let time = DateTime::from_timestamp_millis(millis).expect("millis within chrono's range");
    time.with_timezone(&offset)
        .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

fn request() -> impl Strategy<Value = Request> {
    (
        kind(),
        vec(select(ITEMS), 0..7),
        vec(select(ITEMS), 0..5),
        vec(select(vec![Direction::Input, Direction::Output]), 0..3),
        proptest::option::of((
            // 0000-01-02 to 9999-12-31 in UTC, so that any offset keeps a
            // four-digit year, at millisecond steps.
            -62_167_132_800_000i64..253_402_214_400_000,
            -1439i32..=1439,
        )),
        proptest::option::of(1usize..=1000),
        any::<u64>(),
    )
        .prop_map(
            |(kind, stations, filter, directions, from, limit, spelling_seed)| Request {
                kind,
                stations,
                filter,
                directions,
                from,
                limit,
                spelling_seed,
            },
        )
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn two_spellings_of_one_request_parse_equal(
        request in request(),
        max_stations in 1usize..=6,
    ) {
        let limits = Limits { max_stations, ..Limits::default() };
        let canonical = request.canonical();
        let respelled = request.respelled();
        let expected = request.expected();
        let now = Timestamp { seconds: 1_704_153_600, nanos: 0 };
        let distinct_stations = expected.station_ids.as_ref().map_or(0, Vec::len);
        for query in [&canonical, &respelled] {
            if distinct_stations > max_stations {
                let error = QueryParams::parse(
                    crate::domain::query::Endpoint::records(request.kind),
                    query,
                    limits,
                )
                    .expect_err("too many stations");
                prop_assert_eq!(checks::code(&error), "too_many_stations", "{}", query);
            } else {
                let params = request.kind.check_query(query, limits, now);
                prop_assert_eq!(params.as_ref(), Some(&expected), "{}", query);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Snapshot lines
// ---------------------------------------------------------------------------

/// Spliced into valid lines: JSON that breaks, bends or stretches a record.
const LINE_PIECES: &[&str] = &[
    "\"",
    "\\",
    "\\u0000",
    "\\ud800",
    "\\udc00\\ud800",
    "\\ud83d\\ude00",
    "\\u005f",
    "\u{0}",
    "\u{feff}",
    "\u{202e}",
    "é",
    "\r",
    "\t",
    " ",
    "null",
    "true",
    "1e999",
    "-0",
    "123456789012345678901234567890.5",
    "{}",
    "[]",
    "[[[[[[[[",
    ",",
    ":",
    "}",
    "\"x\":1,",
    "\"station_id\":\"S\",",
    "\"time_created\":\"2024-01-01T00:00:00Z\",",
    "\"direction\":\"input\",",
    "\"name\":\"n\",",
    "\"metadata\":{\"a\":[1.50,1e999]},",
    "\"tags\":[\"a\",null],",
    "\"value\":3.30,",
    "T",
    "t",
    "Z",
    "z",
    "+23:59",
    "-00:00",
    ".123456789",
    ".1234567890",
    "0000",
    "9999",
    "24",
    "60",
];

#[derive(Clone, Debug)]
enum Mutation {
    Insert(Index, &'static str),
    Delete(Index, usize),
    Replace(Index, &'static str),
    Truncate(Index),
    Duplicate(Index, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<Index>(), select(LINE_PIECES)).prop_map(|(at, piece)| Mutation::Insert(at, piece)),
        2 => (any::<Index>(), 1usize..8).prop_map(|(at, count)| Mutation::Delete(at, count)),
        3 => (any::<Index>(), select(LINE_PIECES)).prop_map(|(at, piece)| Mutation::Replace(at, piece)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        1 => (any::<Index>(), 1usize..20).prop_map(|(at, count)| Mutation::Duplicate(at, count)),
    ]
}

/// Applies a mutation at a character boundary, so that the line stays text.
fn mutate(line: &mut String, mutation: &Mutation) {
    let boundaries: Vec<usize> = line
        .char_indices()
        .map(|(position, _)| position)
        .chain([line.len()])
        .collect();
    let at = |index: &Index| boundaries[index.index(boundaries.len())];
    // The end of `count` characters from `start`, or of the line.
    let end = |start: usize, count: usize| {
        line[start..]
            .char_indices()
            .nth(count)
            .map_or(line.len(), |(offset, _)| start + offset)
    };
    match mutation {
        Mutation::Insert(index, piece) => line.insert_str(at(index), piece),
        Mutation::Delete(index, count) => {
            let start = at(index);
            line.replace_range(start..end(start, *count), "");
        }
        Mutation::Replace(index, piece) => {
            let start = at(index);
            line.replace_range(start..end(start, 1), piece);
        }
        Mutation::Truncate(index) => line.truncate(at(index)),
        Mutation::Duplicate(index, count) => {
            let start = at(index);
            let copy = line[start..end(start, *count)].to_owned();
            line.insert_str(start, &copy);
        }
    }
}

fn seed_lines() -> Vec<String> {
    seeds("snapshot_line")
        .into_iter()
        .filter_map(|seed| String::from_utf8(seed).ok())
        .collect()
}

/// A date-time in the contract's grammar, in any of its spellings.
fn time_text() -> impl Strategy<Value = String> {
    (
        0u32..=9999,
        1u32..=12,
        1u32..=28,
        (0u32..24, 0u32..60, 0u32..60),
        select(vec!["T", "t"]),
        "[0-9]{0,9}",
        prop_oneof![
            Just("Z".to_owned()),
            Just("z".to_owned()),
            Just("-00:00".to_owned()),
            (select(vec!['+', '-']), 0u32..24, 0u32..60)
                .prop_map(|(sign, hours, minutes)| format!("{sign}{hours:02}:{minutes:02}")),
        ],
    )
        .prop_map(|(year, month, day, (hour, minute, second), t, fraction, offset)| {
            let fraction = if fraction.is_empty() { String::new() } else { format!(".{fraction}") };
            format!("{year:04}-{month:02}-{day:02}{t}{hour:02}:{minute:02}:{second:02}{fraction}{offset}")
        })
}

/// A JSON string of `text`, sometimes with every character `\u`-escaped.
fn json_string(text: &str, escape_all: bool) -> String {
    if !escape_all {
        return serde_json::to_string(text).expect("strings serialize");
    }
    let mut escaped = String::from("\"");
    for unit in text.encode_utf16() {
        escaped.push_str(&format!("\\u{unit:04x}"));
    }
    escaped.push('"');
    escaped
}

/// A valid record of either kind, as a line, with every optional field present,
/// `null` or absent, in a random field order.
fn valid_line() -> impl Strategy<Value = (Kind, String)> {
    let text = prop_oneof![
        Just(String::new()),
        "[a-zA-Z0-9 é\"\\\\\u{0}-\u{1f}😀]{1,8}"
    ];
    let optional = proptest::option::of(proptest::option::of(text.clone()));
    (
        kind(),
        "[a-zA-Z0-9 é\"\\\\\u{0}-\u{1f}😀-]{1,8}",
        time_text(),
        select(vec!["input", "output"]),
        vec(optional, 8),
        proptest::option::of(vec(text, 0..3)),
        select(vec![
            "1e999",
            "-0",
            "3.30",
            "1E+5",
            "\"n/a\"",
            "null",
            "{\"a\":[1.50]}",
        ]),
        any::<u64>(),
    )
        .prop_map(
            |(kind, station, time, direction, optionals, tags, number, seed)| {
                let mut rng = StdRng::seed_from_u64(seed);
                let mut fields = vec![
                    ("station_id", json_string(&station, rng.gen_bool(0.2))),
                    ("time_created", json_string(&time, rng.gen_bool(0.2))),
                ];
                let names: &[&str] = match kind {
                    Kind::Units => {
                        fields.push(("direction", json_string(direction, false)));
                        fields.push(("metadata", number.to_owned()));
                        &[
                            "slot",
                            "unit_serial",
                            "tz",
                            "mode",
                            "unit_type",
                            "result",
                            "name",
                            "x",
                        ]
                    }
                    Kind::Metrics => {
                        fields.push(("name", json_string(&station, false)));
                        let value = if number.starts_with('{') {
                            "null"
                        } else {
                            number
                        };
                        fields.push(("value", value.to_owned()));
                        &[
                            "slot",
                            "unit_serial",
                            "tz",
                            "mode",
                            "unit",
                            "type",
                            "limit_upper",
                            "direction",
                        ]
                    }
                };
                for (name, optional) in names.iter().zip(optionals) {
                    match optional {
                        Some(Some(value)) => {
                            fields.push((name, json_string(&value, rng.gen_bool(0.2))));
                        }
                        Some(None) => fields.push((name, "null".to_owned())),
                        None => {}
                    }
                }
                if let Some(tags) = tags {
                    let tags: Vec<String> =
                        tags.iter().map(|tag| json_string(tag, false)).collect();
                    fields.push(("tags", format!("[{}]", tags.join(","))));
                }
                fields.shuffle(&mut rng);
                let body: Vec<String> = fields
                    .iter()
                    .map(|(name, value)| format!("{}:{value}", json_string(name, false)))
                    .collect();
                (kind, format!("{{{}}}", body.join(",")))
            },
        )
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_text_never_breaks_the_line_parser(
        line in prop_oneof![any::<String>(), "[{}\\[\\]\":,0-9a-z_ .+-]{0,120}"],
    ) {
        Kind::Units.check_line(&line);
        Kind::Metrics.check_line(&line);
    }

    #[test]
    fn mutated_seed_lines_never_break_the_line_parser(
        mut line in select(seed_lines()),
        mutations in vec(mutation(), 1..5),
    ) {
        for mutation in &mutations {
            mutate(&mut line, mutation);
        }
        Kind::Units.check_line(&line);
        Kind::Metrics.check_line(&line);
    }

    #[test]
    fn valid_lines_are_accepted_as_written((kind, line) in valid_line()) {
        prop_assert!(kind.check_line(&line), "valid line rejected: {}", line);
    }

    #[test]
    fn mutated_valid_lines_never_break_the_line_parser(
        (_, mut line) in valid_line(),
        mutations in vec(mutation(), 1..4),
    ) {
        for mutation in &mutations {
            mutate(&mut line, mutation);
        }
        Kind::Units.check_line(&line);
        Kind::Metrics.check_line(&line);
    }

    #[test]
    fn accepted_times_are_read_as_chrono_reads_them(
        text in prop_oneof![
            time_text(),
            "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,10})?([Zz]|[+-][0-9]{2}:?[0-9]{2})?",
        ],
    ) {
        if let Some(instant) = parse_rfc3339(&text) {
            let chrono = DateTime::parse_from_rfc3339(&text);
            prop_assert!(chrono.is_ok(), "{} accepted, chrono rejects it: {:?}", text, chrono);
            let chrono = chrono.expect("checked");
            prop_assert_eq!(
                (instant.seconds, instant.nanos),
                (chrono.timestamp(), chrono.timestamp_subsec_nanos()),
                "{}", text
            );
            prop_assert_eq!(parse_query_time(&text), Some(instant));
        }
    }
}

/// Every line seed from a snapshot file is a record the loader accepts, so the
/// line fuzzer starts from accepted lines, not only from rejected ones.
#[test]
fn seed_lines_taken_from_snapshots_are_accepted() {
    let directory = seed_directory("snapshot_line");
    let mut accepted = 0;
    for entry in fs::read_dir(&directory).expect("seed directory") {
        let path = entry.expect("seed entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with("-from-snapshot") {
            continue;
        }
        let line = fs::read_to_string(&path).expect("UTF-8 seed");
        let kind = if name.starts_with("unit") {
            Kind::Units
        } else {
            Kind::Metrics
        };
        assert!(kind.check_line(&line), "{name} rejected");
        accepted += 1;
    }
    assert!(accepted >= 3, "only {accepted} seeds from snapshots");
}

/// The loader hands the parser whole lines of any length, and `metadata` is any
/// JSON value: nesting past serde_json's recursion limit (128) is kept as written,
/// in `metadata` and in skipped unknown fields alike, without overflowing the stack.
#[test]
fn deeply_nested_values_are_kept_without_overflowing_the_stack() {
    for depth in [128, 129, 100_000] {
        let line = format!(
            r#"{{"station_id":"S","time_created":"2024-01-01T00:00:00Z","direction":"input","metadata":{}{}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        assert!(Kind::Units.check_line(&line), "metadata at depth {depth}");
        let line = line.replace("metadata", "unknown");
        assert!(
            Kind::Units.check_line(&line),
            "unknown field at depth {depth}"
        );
    }
}
