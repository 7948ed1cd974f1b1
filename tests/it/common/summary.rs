//! The reference model of CONTRACT section 10 (summaries), written from the
//! contract's words over the flat list of records that `common::load` reads: the
//! rows `/units/summary`, `/metrics/summary` and `/stations` must answer, and a
//! comparison of a real answer with them (counts, `null`s, row order and key order
//! exactly; statistics to 1e-6 relative, 1e-9 absolute near zero).
//!
//! It reuses `common::reference` for what sections 3-6 decide (window, stations,
//! scope, `type`, `serial_number`, `names`, the contract's order) and adds only
//! what section 10 says: groups, buckets (epoch-aligned in UTC, or cut at a
//! zone's wall clock with `tz`), units by their first attempt, pass results
//! ignoring ASCII case, the statistics and the last record's limits.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr as _;

use chrono::{DateTime, LocalResult, NaiveDateTime, Offset as _, TimeZone as _};
use chrono_tz::Tz;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{json, Map, Value};

use super::{in_contract_order, reference, rfc3339_from_seconds, Kind, Query, Record, SECOND};

/// A summary query, resolved: the window in nanoseconds, the filters, the
/// `group_by` list as the contract makes it (deduplicated keeping first
/// occurrences, `["station_id"]` when none is given) and the bucket in nanoseconds.
#[derive(Clone, Debug)]
pub struct SummaryQuery {
    pub from: i128,
    pub to: i128,
    pub stations: Option<Vec<String>>,
    pub scope: Option<Vec<String>>,
    /// Units only.
    pub types: Vec<String>,
    /// Units only.
    pub serial: Option<String>,
    /// Metrics only.
    pub names: Vec<String>,
    pub group_by: Vec<String>,
    pub bucket: Option<i128>,
    /// `tz` as given; `None`: the default, UTC.
    pub tz: Option<String>,
}

impl SummaryQuery {
    pub fn new(from: i128, to: i128) -> SummaryQuery {
        SummaryQuery {
            from,
            to,
            stations: None,
            scope: None,
            types: vec![],
            serial: None,
            names: vec![],
            group_by: vec!["station_id".to_owned()],
            bucket: None,
            tz: None,
        }
    }

    /// The zone of the buckets, unless it is UTC (written `Z`).
    fn zone(&self) -> Option<Tz> {
        match self.tz.as_deref() {
            None | Some("UTC") => None,
            Some(name) => Some(Tz::from_str(name).expect("a zone the test names")),
        }
    }

    /// The records of `kind` that sections 3-6 select, in the contract's order
    /// (unit records of direction `output` only).
    fn selected(&self, records: &[Record], kind: Kind) -> Vec<Value> {
        self.selected_in(records, kind, &["output"])
    }

    /// The same, unit records of `directions`.
    fn selected_in(&self, records: &[Record], kind: Kind, directions: &[&str]) -> Vec<Value> {
        let query = Query {
            kind,
            from: self.from,
            to: self.to,
            stations: self.stations.clone(),
            scope: self.scope.clone(),
            types: self.types.clone(),
            serial: self.serial.clone(),
            directions: directions.iter().map(|d| d.to_string()).collect(),
            names: self.names.clone(),
            results: Vec::new(),
        };
        reference(records, &query)
    }

    /// The start of the bucket of an instant, if there are buckets: epoch-aligned
    /// in UTC; in a zone, the latest boundary at or before it, boundary `k` being
    /// the first instant whose wall-clock time is at or after `k` buckets past
    /// 1970-01-01T00:00:00 there (CONTRACT 10: a skipped time maps to the first
    /// instant after the gap, a repeated one to its earlier occurrence).
    fn bucket_of(&self, at: i128) -> Option<i128> {
        let size = self.bucket?;
        let Some(tz) = self.zone() else {
            return Some(at.div_euclid(size) * size);
        };
        let size = i64::try_from(size / SECOND).expect("whole seconds");
        let seconds = i64::try_from(at.div_euclid(SECOND)).expect("near 2024");
        // From well past any wall-clock time repeated at `at`, down to the bucket.
        let mut index = wall_clock(tz, seconds).div_euclid(size) + 3 * 3600 / size + 1;
        while first_instant_at_or_after(tz, index * size) > seconds {
            index -= 1;
        }
        Some(i128::from(first_instant_at_or_after(tz, index * size)) * SECOND)
    }

    /// `bucket_start` as the contract writes it.
    fn bucket_start(&self, start: i128) -> String {
        let seconds = i64::try_from(start.div_euclid(SECOND)).expect("near 2024");
        let Some(tz) = self.zone() else {
            return rfc3339_from_seconds(seconds);
        };
        let offset = wall_clock(tz, seconds) - seconds;
        let local = rfc3339_from_seconds(seconds + offset);
        let sign = if offset < 0 { '-' } else { '+' };
        format!(
            "{}{sign}{:02}:{:02}",
            &local[..local.len() - 1],
            offset.abs() / 3600,
            offset.abs() % 3600 / 60
        )
    }
}

/// The wall-clock time in `tz` at an instant, both in seconds since (their)
/// 1970-01-01T00:00:00.
fn wall_clock(tz: Tz, seconds: i64) -> i64 {
    let utc = DateTime::from_timestamp(seconds, 0).expect("near 2024");
    seconds
        + i64::from(
            tz.offset_from_utc_datetime(&utc.naive_utc())
                .fix()
                .local_minus_utc(),
        )
}

/// The first instant whose wall-clock time in `tz` is `wall` or later: the time
/// itself, its earlier occurrence, or, in a gap, the instant of the first minute
/// after it (the zones the tests use change on whole minutes).
fn first_instant_at_or_after(tz: Tz, wall: i64) -> i64 {
    let local = |wall: i64| -> NaiveDateTime {
        DateTime::from_timestamp(wall, 0)
            .expect("near 2024")
            .naive_utc()
    };
    let mut minute = wall;
    loop {
        match tz.from_local_datetime(&local(minute)) {
            LocalResult::Single(time) => return time.timestamp(),
            LocalResult::Ambiguous(earlier, later) => {
                return earlier.timestamp().min(later.timestamp())
            }
            LocalResult::None => minute += 60,
        }
    }
}

/// The `group_by` list of a query as the contract reads it: deduplicated keeping
/// first occurrences; empty means the default `station_id`.
pub fn group_by_list(items: &[&str]) -> Vec<String> {
    let mut list: Vec<String> = Vec::new();
    for item in items {
        let item = item.trim();
        if !item.is_empty() && !list.iter().any(|seen| seen == item) {
            list.push(item.to_owned());
        }
    }
    if list.is_empty() {
        list.push("station_id".to_owned());
    }
    list
}

/// `15m`, `1h`, `7d` in nanoseconds (the test's own reading of the grammar).
pub fn bucket_nanos(text: &str) -> i128 {
    let (digits, unit) = text.split_at(text.len() - 1);
    let count: i128 = digits.parse().expect("a bucket the test writes");
    count
        * match unit {
            "m" => 60 * SECOND,
            "h" => 3600 * SECOND,
            "d" => 86_400 * SECOND,
            _ => panic!("bucket unit {unit}"),
        }
}

/// A row as the contract lists its keys, in that order.
pub type Row = Vec<(String, Value)>;

fn text(record: &Value, field: &str) -> String {
    record[field].as_str().unwrap_or("").to_owned()
}

fn at(record: &Value) -> i128 {
    super::instant(record["time_created"].as_str().expect("time_created"))
}

/// Whether a `result` counts as a pass: equal to an item of `--pass-results`,
/// ignoring ASCII case.
pub fn passes(result: &str, pass_results: &[String]) -> bool {
    pass_results
        .iter()
        .any(|pass| pass.trim().eq_ignore_ascii_case(result))
}

/// The cycle time of each output record, in seconds, in the contract's order of
/// the outputs (CONTRACT 10.1): the latest input record the query selects with the
/// same `station_id`, `slot` and non-empty `unit_serial` that comes before the
/// output, in the contract's order, and after any earlier output of those three.
fn cycle_times(both: &[Value]) -> Vec<Option<f64>> {
    let key = |record: &Value| {
        (
            text(record, "station_id"),
            text(record, "slot"),
            text(record, "unit_serial"),
        )
    };
    let is_output = |record: &Value| text(record, "direction") == "output";
    let mut times = Vec::new();
    for (index, output) in both.iter().enumerate() {
        if !is_output(output) {
            continue;
        }
        let mine = key(output);
        if mine.2.is_empty() {
            times.push(None);
            continue;
        }
        let earlier_output = (0..index)
            .rev()
            .find(|&before| is_output(&both[before]) && key(&both[before]) == mine);
        let input = (earlier_output.map_or(0, |after| after + 1)..index)
            .rev()
            .find(|&before| !is_output(&both[before]) && key(&both[before]) == mine);
        times.push(input.map(|input| (at(output) - at(&both[input])) as f64 / 1e9));
    }
    times
}

/// `cycle_count`, `cycle_mean_s`, `cycle_p50_s`, `cycle_p90_s`, `cycle_max_s`.
fn cycle_figures(mut times: Vec<f64>) -> [(String, Value); 5] {
    let count = times.len();
    times.sort_by(f64::total_cmp);
    let figure = |value: f64| {
        if count == 0 {
            Value::Null
        } else {
            json!(value)
        }
    };
    // Nearest rank: the value at rank ceil(p/100 x n), counted from 1.
    let rank = |percent: usize| (percent * count).div_ceil(100).max(1);
    let at_rank = |rank: usize| times.get(rank - 1).copied().unwrap_or(0.0);
    [
        ("cycle_count".into(), json!(count)),
        (
            "cycle_mean_s".into(),
            figure(times.iter().sum::<f64>() / count.max(1) as f64),
        ),
        ("cycle_p50_s".into(), figure(at_rank(rank(50)))),
        ("cycle_p90_s".into(), figure(at_rank(rank(90)))),
        ("cycle_max_s".into(), figure(at_rank(count.max(1)))),
    ]
}

fn ratio(part: u64, whole: u64) -> Value {
    if whole == 0 {
        Value::Null
    } else {
        json!(part as f64 / whole as f64)
    }
}

/// `GET /units/summary` (CONTRACT 10.1).
pub fn units_summary(
    records: &[Record],
    query: &SummaryQuery,
    pass_results: &[String],
) -> Vec<Row> {
    #[derive(Default)]
    struct Acc {
        records: u64,
        results: BTreeMap<String, u64>,
        units: u64,
        first_pass: u64,
        second_pass: u64,
        final_pass: u64,
        retested: u64,
        cycles: Vec<f64>,
    }
    let both = query.selected_in(records, Kind::Units, &["input", "output"]);
    let cycles = cycle_times(&both);
    let selected: Vec<Value> = both
        .into_iter()
        .filter(|record| text(record, "direction") == "output")
        .collect();
    // (group values, bucket start) -> the row's counts; a BTreeMap orders rows by
    // the group fields in byte order (Rust's `String` order), then the bucket.
    let mut rows: BTreeMap<(Vec<String>, Option<i128>), Acc> = BTreeMap::new();
    // (group values, serial) -> the unit's attempts, in the contract's order.
    let mut attempts: BTreeMap<(Vec<String>, String), Vec<&Value>> = BTreeMap::new();
    for (record, cycle) in selected.iter().zip(cycles) {
        let group: Vec<String> = query.group_by.iter().map(|f| text(record, f)).collect();
        let bucket = query.bucket_of(at(record));
        let acc = rows.entry((group.clone(), bucket)).or_default();
        acc.records += 1;
        *acc.results.entry(text(record, "result")).or_default() += 1;
        acc.cycles.extend(cycle);
        let serial = text(record, "unit_serial");
        if !serial.is_empty() {
            attempts.entry((group, serial)).or_default().push(record);
        }
    }
    for ((group, _serial), tries) in &attempts {
        let first = tries[0];
        let last = tries[tries.len() - 1];
        let acc = rows
            .get_mut(&(group.clone(), query.bucket_of(at(first))))
            .expect("the first attempt's row exists");
        let passed = |attempt: &Value| passes(&text(attempt, "result"), pass_results);
        acc.units += 1;
        acc.first_pass += u64::from(passed(first));
        acc.second_pass += u64::from(tries.iter().take(2).any(|&attempt| passed(attempt)));
        acc.final_pass += u64::from(passed(last));
        acc.retested += u64::from(tries.len() > 1);
    }
    rows.into_iter()
        .map(|((group, bucket), acc)| {
            let mut row: Row = query
                .group_by
                .iter()
                .zip(group)
                .map(|(field, value)| (field.clone(), Value::String(value)))
                .collect();
            if let Some(start) = bucket {
                row.push((
                    "bucket_start".into(),
                    Value::String(query.bucket_start(start)),
                ));
            }
            let results: Map<String, Value> = acc
                .results
                .into_iter()
                .map(|(result, count)| (result, json!(count)))
                .collect();
            row.extend([
                ("records".into(), json!(acc.records)),
                ("results".into(), Value::Object(results)),
                ("units".into(), json!(acc.units)),
                ("first_pass".into(), json!(acc.first_pass)),
                ("second_pass".into(), json!(acc.second_pass)),
                ("final_pass".into(), json!(acc.final_pass)),
                ("retested".into(), json!(acc.retested)),
                ("first_pass_yield".into(), ratio(acc.first_pass, acc.units)),
                (
                    "second_pass_yield".into(),
                    ratio(acc.second_pass, acc.units),
                ),
                ("final_yield".into(), ratio(acc.final_pass, acc.units)),
                ("retest_rate".into(), ratio(acc.retested, acc.units)),
            ]);
            row.extend(cycle_figures(acc.cycles));
            row
        })
        .collect()
}

/// A value (or limit) as a number, when it is a finite decimal number in JSON
/// number syntax, optionally with a leading `+` (CONTRACT 10.2).
pub fn numeric(text: &str) -> Option<f64> {
    let bytes = text.as_bytes();
    let mut i = 0;
    if i < bytes.len() && (bytes[i] == b'+' || bytes[i] == b'-') {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < bytes.len() && bytes[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    let int_start = i;
    let int_digits = digits(&mut i);
    if int_digits == 0 || (int_digits > 1 && bytes[int_start] == b'0') {
        return None;
    }
    if i < bytes.len() && bytes[i] == b'.' {
        i += 1;
        if digits(&mut i) == 0 {
            return None;
        }
    }
    if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
        i += 1;
        if i < bytes.len() && (bytes[i] == b'+' || bytes[i] == b'-') {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return None;
        }
    }
    if i != bytes.len() {
        return None;
    }
    let number: f64 = text.parse().ok()?;
    number.is_finite().then_some(number)
}

/// Mean and sample standard deviation, shifted by the first value so that equal
/// values give exactly their value and exactly 0.
fn mean_and_stddev(values: &[f64]) -> (f64, Option<f64>) {
    let n = values.len() as f64;
    let shift = values[0];
    let mean = shift + values.iter().map(|x| x - shift).sum::<f64>() / n;
    if values.len() < 2 {
        return (mean, None);
    }
    let squares: f64 = values.iter().map(|x| (x - mean) * (x - mean)).sum();
    // The two-pass correction term (Chan, Golub, LeVeque).
    let correction: f64 = values.iter().map(|x| x - mean).sum();
    let variance = (squares - correction * correction / n) / (n - 1.0);
    (mean, Some(variance.max(0.0).sqrt()))
}

/// `GET /metrics/summary` (CONTRACT 10.2).
pub fn metrics_summary(records: &[Record], query: &SummaryQuery) -> Vec<Row> {
    #[derive(Default)]
    struct Acc {
        count: u64,
        values: Vec<f64>,
        out_of_limits: u64,
        failing: BTreeSet<String>,
        limit_lower: String,
        limit_upper: String,
    }
    let selected = query.selected(records, Kind::Metrics);
    let mut rows: BTreeMap<(Vec<String>, Option<i128>), Acc> = BTreeMap::new();
    for record in &selected {
        let mut group: Vec<String> = query.group_by.iter().map(|f| text(record, f)).collect();
        group.push(text(record, "name"));
        let acc = rows
            .entry((group, query.bucket_of(at(record))))
            .or_default();
        acc.count += 1;
        let lower = text(record, "limit_lower");
        let upper = text(record, "limit_upper");
        if let Some(value) = numeric(&text(record, "value")) {
            acc.values.push(value);
            let below = numeric(&lower).is_some_and(|lower| value < lower);
            let above = numeric(&upper).is_some_and(|upper| value > upper);
            acc.out_of_limits += u64::from(below || above);
            let serial = text(record, "unit_serial");
            if (below || above) && !serial.is_empty() {
                acc.failing.insert(serial);
            }
        }
        // The records come in the contract's order: the last one wins.
        acc.limit_lower = lower;
        acc.limit_upper = upper;
    }
    rows.into_iter()
        .map(|((mut group, bucket), acc)| {
            let name = group.pop().expect("name is a group field");
            let mut row: Row = query
                .group_by
                .iter()
                .zip(group)
                .map(|(field, value)| (field.clone(), Value::String(value)))
                .collect();
            row.push(("name".into(), Value::String(name)));
            if let Some(start) = bucket {
                row.push((
                    "bucket_start".into(),
                    Value::String(query.bucket_start(start)),
                ));
            }
            let (min, max, mean, stddev) = if acc.values.is_empty() {
                (Value::Null, Value::Null, Value::Null, None)
            } else {
                let min = acc.values.iter().copied().fold(f64::INFINITY, f64::min);
                let max = acc.values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let (mean, stddev) = mean_and_stddev(&acc.values);
                (
                    json!(min),
                    json!(max),
                    json!(mean),
                    stddev.map(|s| (mean, s)),
                )
            };
            // CONTRACT 10.2 (revision 3): cp with both limits; cpk with both, or
            // one-sided with one.
            let (lower, upper) = (numeric(&acc.limit_lower), numeric(&acc.limit_upper));
            let (cp, cpk) = match stddev {
                Some((mean, stddev)) if stddev > 0.0 => {
                    let cp = match (lower, upper) {
                        (Some(lower), Some(upper)) => json!((upper - lower) / (6.0 * stddev)),
                        _ => Value::Null,
                    };
                    let cpk = match (lower, upper) {
                        (Some(lower), Some(upper)) => {
                            json!((upper - mean).min(mean - lower) / (3.0 * stddev))
                        }
                        (None, Some(upper)) => json!((upper - mean) / (3.0 * stddev)),
                        (Some(lower), None) => json!((mean - lower) / (3.0 * stddev)),
                        (None, None) => Value::Null,
                    };
                    (cp, cpk)
                }
                _ => (Value::Null, Value::Null),
            };
            row.extend([
                ("count".into(), json!(acc.count)),
                ("numeric".into(), json!(acc.values.len())),
                ("min".into(), min),
                ("max".into(), max),
                ("mean".into(), mean),
                (
                    "stddev".into(),
                    stddev.map_or(Value::Null, |(_, s)| json!(s)),
                ),
                ("limit_lower".into(), Value::String(acc.limit_lower)),
                ("limit_upper".into(), Value::String(acc.limit_upper)),
                ("out_of_limits".into(), json!(acc.out_of_limits)),
                ("failing_units".into(), json!(acc.failing.len())),
                ("cp".into(), cp),
                ("cpk".into(), cpk),
            ]);
            row
        })
        .collect()
}

/// `GET /stations` (CONTRACT 10.3): every station with records that the token may
/// see and `station_ids` names (when given); no window.
pub fn stations(
    records: &[Record],
    stations: Option<&[String]>,
    scope: Option<&[String]>,
) -> Vec<Row> {
    let listed = |list: Option<&[String]>, station: &str| {
        list.is_none_or(|items| items.iter().any(|item| item == station))
    };
    let mut by_station: BTreeMap<String, Vec<&Record>> = BTreeMap::new();
    for record in records {
        let station = record.text("station_id");
        if listed(stations, station) && listed(scope, station) {
            by_station
                .entry(station.to_owned())
                .or_default()
                .push(record);
        }
    }
    by_station
        .into_iter()
        .map(|(station, records)| {
            let units = records.iter().filter(|r| r.kind == Kind::Units).count();
            let metrics = records.len() - units;
            let ordered = in_contract_order(records);
            vec![
                ("station_id".into(), Value::String(station)),
                ("units".into(), json!(units)),
                ("metrics".into(), json!(metrics)),
                ("first".into(), ordered[0]["time_created"].clone()),
                (
                    "last".into(),
                    ordered[ordered.len() - 1]["time_created"].clone(),
                ),
            ]
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Reading an answer with its key order, and comparing it with the reference
// ---------------------------------------------------------------------------

/// A JSON value that remembers the order of object keys (the suite's
/// `serde_json` does not).
#[derive(Clone, Debug, PartialEq)]
pub enum Ordered {
    Object(Vec<(String, Ordered)>),
    Array(Vec<Ordered>),
    Scalar(Value),
}

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Ordered, D::Error> {
        struct OrderedVisitor;
        impl<'de> Visitor<'de> for OrderedVisitor {
            type Value = Ordered;
            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("any JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(Value::Bool(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(json!(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(json!(v)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(json!(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(Value::String(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(Value::String(v)))
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(Value::Null))
            }
            fn visit_none<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(Value::Null))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Ordered, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Ordered::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut entries = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, Ordered>()? {
                    entries.push((key, value));
                }
                Ok(Ordered::Object(entries))
            }
        }
        deserializer.deserialize_any(OrderedVisitor)
    }
}

impl Ordered {
    pub fn parse(body: &str) -> Result<Ordered, String> {
        serde_json::from_str(body).map_err(|error| format!("not JSON ({error}): {body}"))
    }

    pub fn get(&self, key: &str) -> Option<&Ordered> {
        match self {
            Ordered::Object(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn keys(&self) -> Vec<&str> {
        match self {
            Ordered::Object(entries) => entries.iter().map(|(k, _)| k.as_str()).collect(),
            _ => vec![],
        }
    }

    /// The plain value (key order forgotten).
    pub fn value(&self) -> Value {
        match self {
            Ordered::Object(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.value()))
                    .collect(),
            ),
            Ordered::Array(items) => Value::Array(items.iter().map(Ordered::value).collect()),
            Ordered::Scalar(value) => value.clone(),
        }
    }
}

/// The rows (`data`) of a summary answer's body, with their key order.
pub fn rows_of(body: &str) -> Result<Vec<Ordered>, String> {
    let envelope = Ordered::parse(body)?;
    match envelope.get("data") {
        Some(Ordered::Array(rows)) => Ok(rows.clone()),
        _ => Err(format!("no data array in {body}")),
    }
}

/// Fields compared to 1e-6 relative (1e-9 absolute near zero).
const STATISTICS: &[&str] = &[
    "first_pass_yield",
    "second_pass_yield",
    "final_yield",
    "retest_rate",
    "cycle_mean_s",
    "cycle_p50_s",
    "cycle_p90_s",
    "cycle_max_s",
    "min",
    "max",
    "mean",
    "stddev",
    "cp",
    "cpk",
];

fn close(got: f64, want: f64) -> bool {
    let difference = (got - want).abs();
    difference <= 1e-9 || difference <= 1e-6 * got.abs().max(want.abs())
}

/// Why one row differs from the reference, if it does.
fn row_difference(got: &Ordered, want: &Row) -> Option<String> {
    let want_keys: Vec<&str> = want.iter().map(|(k, _)| k.as_str()).collect();
    if got.keys() != want_keys {
        return Some(format!("keys {:?}, want {:?}", got.keys(), want_keys));
    }
    for (key, want_value) in want {
        let got_value = got.get(key).expect("the keys are equal");
        let same = if STATISTICS.contains(&key.as_str()) {
            match (got_value.value(), want_value) {
                (Value::Null, Value::Null) => true,
                (Value::Number(g), Value::Number(w)) => {
                    close(g.as_f64().unwrap(), w.as_f64().unwrap())
                }
                _ => false,
            }
        } else if key == "results" {
            // Keys in byte order, counts exact.
            let want_keys: Vec<&str> = want_value
                .as_object()
                .map(|o| o.keys().map(String::as_str).collect())
                .unwrap_or_default();
            got_value.keys() == want_keys && got_value.value() == *want_value
        } else {
            got_value.value() == *want_value
        };
        if !same {
            return Some(format!(
                "{key}: got {}, want {want_value}",
                got_value.value()
            ));
        }
    }
    None
}

fn row_text(row: &Row) -> String {
    let members: Vec<String> = row.iter().map(|(k, v)| format!("{k:?}:{v}")).collect();
    format!("{{{}}}", members.join(","))
}

/// Compares an answer's rows with the reference rows: number and order of rows,
/// each row's keys in order, counts and `null`s exactly, statistics to tolerance.
pub fn compare_rows(got: &[Ordered], want: &[Row]) -> Result<(), String> {
    let described = || {
        format!(
            "\n got  ({}): {}\n want ({}): [{}]",
            got.len(),
            Value::Array(got.iter().map(Ordered::value).collect()),
            want.len(),
            want.iter().map(row_text).collect::<Vec<_>>().join(",")
        )
    };
    if got.len() != want.len() {
        return Err(format!(
            "{} rows, want {}{}",
            got.len(),
            want.len(),
            described()
        ));
    }
    for (index, (got_row, want_row)) in got.iter().zip(want).enumerate() {
        if let Some(difference) = row_difference(got_row, want_row) {
            return Err(format!("row {index}: {difference}{}", described()));
        }
    }
    Ok(())
}
