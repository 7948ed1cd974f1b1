//! Parsers for snapshot lines: serde_json, as `parse_line` uses it, against
//! sonic-rs and simd-json, in MB/s of `stq gen` lines, one group per record kind.
//!
//! The aim is the fastest parser that keeps a number's text as written. The
//! cases, on the same lines:
//!
//! - `parse_line`: the production path (its fast path, its own scanner
//!   for plain lines, which all of these are, and serde_json for the others; then the
//!   time, the direction and the response JSON). The case keeps its first name,
//!   "serde_json, checks, render", so that criterion compares it with earlier runs.
//! - `serde_json fields`: the production visitor alone, without the checks and the
//!   render, so that what parsing costs is apart from what rendering costs.
//! - `sonic-rs fields`: the same visitor over sonic-rs's serde `Deserializer`; a
//!   number, and `metadata`, are taken as a `LazyValue`, whose raw text is the text
//!   as written (serde_json's `RawValue` has no sonic-rs counterpart).
//! - `simd-json fields`: the same visitor over simd-json's serde `Deserializer`.
//!   simd-json turns every number into an `f64`, `i64` or `u64` while it parses and
//!   has no raw value, so it cannot keep `3.30` or return `metadata` as written: it
//!   does not meet the requirement and is measured only to see what that would buy.
//!   It parses in place, so each line is first copied into a buffer (counted).
//!
//! The visitor is a copy of the private one in `domain/record.rs`, generic over how a
//! parser hands over a raw value. Before anything is timed, every line's serde_json
//! fields are checked against `parse_line`'s rendered JSON, and the other parsers'
//! fields against serde_json's, so every case does the same work. A few lines with
//! escapes, nulls and unknown fields, and a few bad lines (whose reasons are
//! printed side by side), are checked too: `stq gen` writes neither.
//!
//! Run with `cargo bench -p stq-core --bench parse`; BENCHMARKS.md has the numbers.
//! sonic-rs picks its SIMD code at compile time: without AVX2 and PCLMULQDQ enabled
//! (our release build enables neither) it runs its portable fallback, so run it also
//! with `RUSTFLAGS="-C target-cpu=native"` to see both. simd-json detects at run time.

use std::borrow::Cow;
use std::fmt;
use std::hint::black_box;
use std::marker::PhantomData;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use stq_core::domain::record::{parse_line, Kind};
use stq_gen::{generate, GenOptions};

/// One UTC day of ten stations: a few thousand unit lines, ten thousand metric lines.
const DAY: &str = "2026-10-30";

/// Each kind's lines, joined by line ends, from one day of `stq gen` output.
fn sample(kind: Kind) -> String {
    let directory = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-parse-data");
    if !directory.join("ST-10").exists() {
        generate(&GenOptions {
            out: directory.clone(),
            stations: 10,
            days: 1,
            units_per_hour: 6,
            seed: 42,
            end: chrono::DateTime::parse_from_rfc3339("2026-10-31T00:00:00Z")
                .unwrap()
                .into(),
        })
        .expect("the benchmark data can be written");
    }
    let suffix = match kind {
        Kind::Units => "units",
        Kind::Metrics => "metrics",
    };
    let mut text = String::new();
    for station in 1..=10 {
        let file = directory.join(format!("ST-{station:02}/{DAY}.{suffix}.jsonl"));
        text.push_str(&std::fs::read_to_string(&file).expect("the day's file exists"));
    }
    text
}

/// A JSON string, borrowed from the line when it holds no escapes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, value: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(value)))
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(value.to_owned())))
            }
            fn visit_string<E: de::Error>(self, value: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(value)))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

/// How a parser hands over what serde_json hands over as a `&RawValue`: `value`, the
/// limits and `metadata`.
trait Capture<'de> {
    type Number;
    type Metadata;
    fn number<A: MapAccess<'de>>(map: &mut A, key: &str) -> Result<Option<Self::Number>, A::Error>;
    fn metadata<A: MapAccess<'de>>(map: &mut A) -> Result<Option<Self::Metadata>, A::Error>;
}

/// The fields of a line as written; `None` is absent or `null`.
#[derive(Debug, PartialEq)]
struct LineFields<'a, Number, Metadata> {
    station_id: Option<Text<'a>>,
    slot: Option<Text<'a>>,
    unit_serial: Option<Text<'a>>,
    time_created: Option<Text<'a>>,
    tz: Option<Text<'a>>,
    mode: Option<Text<'a>>,
    tags: Option<Vec<Text<'a>>>,
    unit_type: Option<Text<'a>>,
    direction: Option<Text<'a>>,
    result: Option<Text<'a>>,
    metadata: Option<Metadata>,
    name: Option<Text<'a>>,
    value: Option<Number>,
    unit: Option<Text<'a>>,
    metric_type: Option<Text<'a>>,
    limit_upper: Option<Number>,
    limit_lower: Option<Number>,
    unknown: Vec<Cow<'a, str>>,
}

impl<Number, Metadata> LineFields<'_, Number, Metadata> {
    fn absent() -> Self {
        LineFields {
            station_id: None,
            slot: None,
            unit_serial: None,
            time_created: None,
            tz: None,
            mode: None,
            tags: None,
            unit_type: None,
            direction: None,
            result: None,
            metadata: None,
            name: None,
            value: None,
            unit: None,
            metric_type: None,
            limit_upper: None,
            limit_lower: None,
            unknown: Vec::new(),
        }
    }
}

type Fields<'de, C> = LineFields<'de, <C as Capture<'de>>::Number, <C as Capture<'de>>::Metadata>;

/// The production visitor (`LineSeed` in `domain/record.rs`), line for line, except
/// where `C` takes a number or `metadata`.
struct LineSeed<C> {
    kind: Kind,
    capture: PhantomData<C>,
}

impl<C> LineSeed<C> {
    fn new(kind: Kind) -> Self {
        LineSeed {
            kind,
            capture: PhantomData,
        }
    }
}

impl<'de, C: Capture<'de>> DeserializeSeed<'de> for LineSeed<C> {
    type Value = Fields<'de, C>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, C: Capture<'de>> Visitor<'de> for LineSeed<C> {
    type Value = Fields<'de, C>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        write!(formatter, "a {} record object", self.kind)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = LineFields::absent();
        let mut seen: Vec<Cow<'de, str>> = Vec::with_capacity(16);
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            if seen.contains(&key) {
                return Err(de::Error::custom(format_args!("duplicate field `{key}`")));
            }
            let units = self.kind == Kind::Units;
            let slot = match key.as_ref() {
                "station_id" => Some(&mut fields.station_id),
                "slot" => Some(&mut fields.slot),
                "unit_serial" => Some(&mut fields.unit_serial),
                "time_created" => Some(&mut fields.time_created),
                "tz" => Some(&mut fields.tz),
                "mode" => Some(&mut fields.mode),
                "unit_type" if units => Some(&mut fields.unit_type),
                "direction" if units => Some(&mut fields.direction),
                "result" if units => Some(&mut fields.result),
                "name" if !units => Some(&mut fields.name),
                "unit" if !units => Some(&mut fields.unit),
                "type" if !units => Some(&mut fields.metric_type),
                _ => None,
            };
            if let Some(slot) = slot {
                *slot = map
                    .next_value::<Option<Text<'de>>>()
                    .map_err(|error| field_error(&key, error))?;
            } else {
                match key.as_ref() {
                    "tags" => {
                        fields.tags = map
                            .next_value::<Option<Vec<Text<'de>>>>()
                            .map_err(|error| field_error(&key, error))?;
                    }
                    "metadata" if units => fields.metadata = C::metadata(&mut map)?,
                    "value" | "limit_upper" | "limit_lower" if !units => {
                        let number = C::number(&mut map, &key)?;
                        match key.as_ref() {
                            "value" => fields.value = number,
                            "limit_upper" => fields.limit_upper = number,
                            _ => fields.limit_lower = number,
                        }
                    }
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                        fields.unknown.push(key.clone());
                    }
                }
            }
            seen.push(key);
        }
        Ok(fields)
    }
}

fn field_error<E: de::Error>(key: &str, cause: E) -> E {
    let cause = cause.to_string();
    let cause = cause.split(" at line ").next().unwrap_or_default();
    E::custom(format_args!("field `{key}`: {cause}"))
}

fn not_string_or_number<E: de::Error>(key: &str) -> E {
    E::custom(format_args!("field `{key}` must be a string or a number"))
}

/// `value` and the limits from their raw text: a JSON string (`unquote` decodes
/// it), or a JSON number kept as its exact text.
fn string_or_number<'de>(
    raw: &'de str,
    unquote: impl FnOnce(&'de str) -> Option<Text<'de>>,
) -> Result<Option<Text<'de>>, ()> {
    match raw.as_bytes().first() {
        Some(b'"') => unquote(raw).map(Some).ok_or(()),
        Some(b'-' | b'0'..=b'9') => Ok(Some(Text(Cow::Borrowed(raw)))),
        Some(b'n') => Ok(None),
        _ => Err(()),
    }
}

/// serde_json, as production takes them: `&RawValue`.
struct SerdeJson;

impl<'de> Capture<'de> for SerdeJson {
    type Number = Text<'de>;
    type Metadata = Cow<'de, str>;

    fn number<A: MapAccess<'de>>(map: &mut A, key: &str) -> Result<Option<Text<'de>>, A::Error> {
        let raw = map.next_value::<&'de RawValue>()?;
        string_or_number(raw.get(), |quoted| serde_json::from_str(quoted).ok())
            .map_err(|()| not_string_or_number(key))
    }

    fn metadata<A: MapAccess<'de>>(map: &mut A) -> Result<Option<Cow<'de, str>>, A::Error> {
        let raw = map.next_value::<Option<&'de RawValue>>()?;
        Ok(raw.map(|raw| Cow::Borrowed(raw.get())))
    }
}

/// sonic-rs: a `LazyValue`, checked as it is skipped, whose raw text is borrowed from
/// the line unless it is a string with escapes.
struct SonicRs;

impl<'de> Capture<'de> for SonicRs {
    type Number = Text<'de>;
    type Metadata = Cow<'de, str>;

    fn number<A: MapAccess<'de>>(map: &mut A, key: &str) -> Result<Option<Text<'de>>, A::Error> {
        let raw = map.next_value::<sonic_rs::LazyValue<'de>>()?;
        match raw.as_raw_cow() {
            // Borrowed: no escapes, so a string's text is what lies between its quotes.
            Cow::Borrowed(text) => string_or_number(text, |quoted| {
                Some(Text(Cow::Borrowed(&quoted[1..quoted.len() - 1])))
            }),
            // Only a string can hold an escape.
            Cow::Owned(text) => sonic_rs::from_str::<String>(&text)
                .map(|decoded| Some(Text(Cow::Owned(decoded))))
                .map_err(drop),
        }
        .map_err(|()| not_string_or_number(key))
    }

    fn metadata<A: MapAccess<'de>>(map: &mut A) -> Result<Option<Cow<'de, str>>, A::Error> {
        let raw = map.next_value::<Option<sonic_rs::LazyValue<'de>>>()?;
        Ok(raw.map(|raw| raw.as_raw_cow()))
    }
}

/// A metric number as simd-json gives it: its text is gone.
#[derive(Debug, PartialEq)]
enum Parsed<'a> {
    Text(Text<'a>),
    Float(f64),
    Integer(i128),
}

impl<'de> Deserialize<'de> for Parsed<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ParsedVisitor;
        impl<'de> Visitor<'de> for ParsedVisitor {
            type Value = Parsed<'de>;
            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a string or a number")
            }
            fn visit_borrowed_str<E: de::Error>(self, value: &'de str) -> Result<Self::Value, E> {
                Ok(Parsed::Text(Text(Cow::Borrowed(value))))
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
                Ok(Parsed::Text(Text(Cow::Owned(value.to_owned()))))
            }
            fn visit_f64<E: de::Error>(self, value: f64) -> Result<Self::Value, E> {
                Ok(Parsed::Float(value))
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<Self::Value, E> {
                Ok(Parsed::Integer(value.into()))
            }
            fn visit_u64<E: de::Error>(self, value: u64) -> Result<Self::Value, E> {
                Ok(Parsed::Integer(value.into()))
            }
        }
        deserializer.deserialize_any(ParsedVisitor)
    }
}

/// simd-json: numbers parsed, `metadata` as a value tree (it has no raw value).
struct SimdJson;

impl<'de> Capture<'de> for SimdJson {
    type Number = Parsed<'de>;
    type Metadata = simd_json::BorrowedValue<'de>;

    fn number<A: MapAccess<'de>>(map: &mut A, key: &str) -> Result<Option<Parsed<'de>>, A::Error> {
        map.next_value::<Option<Parsed<'de>>>()
            .map_err(|_| not_string_or_number(key))
    }

    fn metadata<A: MapAccess<'de>>(
        map: &mut A,
    ) -> Result<Option<simd_json::BorrowedValue<'de>>, A::Error> {
        map.next_value()
    }
}

fn serde_json_fields(kind: Kind, line: &str) -> Result<Fields<'_, SerdeJson>, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(line);
    let fields = LineSeed::<SerdeJson>::new(kind).deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(fields)
}

fn sonic_rs_fields(kind: Kind, line: &str) -> Result<Fields<'_, SonicRs>, sonic_rs::Error> {
    let mut deserializer = sonic_rs::Deserializer::from_str(line);
    let fields = LineSeed::<SonicRs>::new(kind).deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(fields)
}

/// sonic-rs without serde: its lazy object iterator, which checks each value as it
/// skips it and hands it over as raw text. What the visitor does by serde's calls is
/// done here by hand, with the same outcome on every line (checked), but with reasons
/// of its own words.
fn sonic_rs_lazy_fields(kind: Kind, line: &str) -> Result<Fields<'_, SonicRs>, String> {
    use sonic_rs::{JsonValueTrait, LazyValue};

    /// A string value, borrowed from the line unless it has escapes.
    fn text<'de>(key: &str, value: &LazyValue<'de>) -> Result<Option<Text<'de>>, String> {
        if value.is_null() {
            return Ok(None);
        }
        let decoded = value
            .as_str()
            .ok_or_else(|| format!("field `{key}`: expected a string"))?;
        Ok(Some(match value.as_raw_cow() {
            // Without escapes, `as_str` is the raw text between the quotes.
            Cow::Borrowed(raw) if decoded.len() + 2 == raw.len() => {
                Text(Cow::Borrowed(&raw[1..raw.len() - 1]))
            }
            _ => Text(Cow::Owned(decoded.to_owned())),
        }))
    }

    let units = kind == Kind::Units;
    let mut fields = LineFields::absent();
    let mut seen: Vec<Cow<'_, str>> = Vec::with_capacity(16);
    // Where the last value ends: the iterator stops at the object's `}` and does not
    // look past it, so the trailing characters are checked here.
    let mut end = line.find('{').map_or(0, |open| open + 1);
    for entry in sonic_rs::to_object_iter(line) {
        let (key, value) = entry.map_err(|error| error.to_string())?;
        if seen.contains(&key) {
            return Err(format!("duplicate field `{key}`"));
        }
        let raw = value.as_raw_str();
        end = raw.as_ptr() as usize + raw.len() - line.as_ptr() as usize;
        let slot = match key.as_ref() {
            "station_id" => Some(&mut fields.station_id),
            "slot" => Some(&mut fields.slot),
            "unit_serial" => Some(&mut fields.unit_serial),
            "time_created" => Some(&mut fields.time_created),
            "tz" => Some(&mut fields.tz),
            "mode" => Some(&mut fields.mode),
            "unit_type" if units => Some(&mut fields.unit_type),
            "direction" if units => Some(&mut fields.direction),
            "result" if units => Some(&mut fields.result),
            "name" if !units => Some(&mut fields.name),
            "unit" if !units => Some(&mut fields.unit),
            "type" if !units => Some(&mut fields.metric_type),
            _ => None,
        };
        if let Some(slot) = slot {
            *slot = text(&key, &value)?;
        } else {
            match key.as_ref() {
                "tags" if value.is_null() => fields.tags = None,
                "tags" => {
                    let tags = value
                        .into_array_iter()
                        .ok_or_else(|| format!("field `{key}`: expected a sequence"))?
                        .map(|tag| text(&key, &tag.map_err(|error| error.to_string())?))
                        .map(|tag| tag?.ok_or_else(|| format!("field `{key}`: null")))
                        .collect::<Result<_, _>>()?;
                    fields.tags = Some(tags);
                }
                "metadata" if units => {
                    fields.metadata = (!value.is_null()).then(|| value.as_raw_cow());
                }
                "value" | "limit_upper" | "limit_lower" if !units => {
                    let number = match value.as_raw_cow() {
                        Cow::Borrowed(raw) => string_or_number(raw, |_| text(&key, &value).ok()?),
                        Cow::Owned(_) => Err(()),
                    }
                    .map_err(|()| format!("field `{key}` must be a string or a number"))?;
                    match key.as_ref() {
                        "value" => fields.value = number,
                        "limit_upper" => fields.limit_upper = number,
                        _ => fields.limit_lower = number,
                    }
                }
                _ => fields.unknown.push(key.clone()),
            }
        }
        seen.push(key);
    }
    let rest = line[end..].trim_matches([' ', '\t', '\n', '\r']);
    if rest != "}" {
        return Err("trailing characters".to_owned());
    }
    Ok(fields)
}

/// `copy` is the line, copied for simd-json to parse in place; it holds the strings.
fn simd_json_fields<'a>(
    kind: Kind,
    copy: &'a mut [u8],
    buffers: &mut simd_json::Buffers,
) -> Result<Fields<'a, SimdJson>, simd_json::Error> {
    let mut deserializer = simd_json::Deserializer::from_slice_with_buffers(copy, buffers)?;
    LineSeed::<SimdJson>::new(kind).deserialize(&mut deserializer)
}

/// The string fields of a line, whatever a parser made of its numbers.
fn strings<'a, Number, Metadata>(
    fields: &LineFields<'a, Number, Metadata>,
) -> [Option<Text<'a>>; 12] {
    [
        &fields.station_id,
        &fields.slot,
        &fields.unit_serial,
        &fields.time_created,
        &fields.tz,
        &fields.mode,
        &fields.unit_type,
        &fields.direction,
        &fields.result,
        &fields.name,
        &fields.unit,
        &fields.metric_type,
    ]
    .map(Clone::clone)
}

/// The response JSON `parse_line` should render from serde_json's fields.
fn expected_record(kind: Kind, fields: &Fields<'_, SerdeJson>) -> Value {
    let text = |field: &Option<Text>| field.as_ref().map_or("", |text| &text.0).to_owned();
    let tags: Vec<&str> = fields.tags.iter().flatten().map(|tag| &*tag.0).collect();
    let mut record = json!({
        "station_id": text(&fields.station_id),
        "slot": text(&fields.slot),
        "unit_serial": text(&fields.unit_serial),
        "time_created": text(&fields.time_created),
        "tz": text(&fields.tz),
        "mode": text(&fields.mode),
        "tags": tags,
    });
    let more = match kind {
        Kind::Units => json!({
            "unit_type": text(&fields.unit_type),
            "direction": text(&fields.direction),
            "result": text(&fields.result),
            "metadata": fields.metadata.as_ref().map_or(Value::Null, |raw| {
                serde_json::from_str(raw).unwrap()
            }),
        }),
        Kind::Metrics => json!({
            "name": text(&fields.name),
            "value": text(&fields.value),
            "unit": text(&fields.unit),
            "type": text(&fields.metric_type),
            "limit_upper": text(&fields.limit_upper),
            "limit_lower": text(&fields.limit_lower),
        }),
    };
    record
        .as_object_mut()
        .unwrap()
        .extend(more.as_object().unwrap().clone());
    record
}

/// Whether simd-json's number stands for serde_json's text, and whether printing it
/// gives that text back.
fn same_number(exact: &Option<Text>, parsed: &Option<Parsed>) -> (bool, bool) {
    match (exact, parsed) {
        (None, None) => (true, true),
        (Some(exact), Some(Parsed::Text(text))) => (exact == text, true),
        (Some(Text(exact)), Some(Parsed::Float(value))) => (
            exact.parse::<f64>().ok() == Some(*value),
            value.to_string() == *exact,
        ),
        (Some(Text(exact)), Some(Parsed::Integer(value))) => (
            exact.parse::<i128>().ok() == Some(*value),
            value.to_string() == *exact,
        ),
        _ => (false, false),
    }
}

/// Checks that every case extracts the same fields from `lines`; returns how many
/// lines simd-json could not give back as written.
fn check_equal_work(kind: Kind, lines: &[&str]) -> usize {
    let mut lost = 0;
    for line in lines {
        let exact = serde_json_fields(kind, line).unwrap_or_else(|error| panic!("{line}: {error}"));
        let mut rendered = Vec::new();
        let mut unknown = Vec::new();
        parse_line(kind, line, &mut rendered, &mut unknown).unwrap();
        let rendered: Value = serde_json::from_slice(&rendered).unwrap();
        assert_eq!(rendered, expected_record(kind, &exact), "{line}");
        assert_eq!(unknown, exact.unknown, "{line}");

        let sonic = sonic_rs_fields(kind, line).unwrap_or_else(|error| panic!("{line}: {error}"));
        assert_eq!(sonic, exact, "sonic-rs: {line}");
        let lazy =
            sonic_rs_lazy_fields(kind, line).unwrap_or_else(|error| panic!("{line}: {error}"));
        assert_eq!(lazy, exact, "sonic-rs lazy: {line}");

        let mut copy = line.as_bytes().to_vec();
        let mut buffers = simd_json::Buffers::new(copy.len());
        let simd = simd_json_fields(kind, &mut copy, &mut buffers)
            .unwrap_or_else(|error| panic!("{line}: {error}"));
        assert_eq!(strings(&simd), strings(&exact), "simd-json: {line}");
        assert_eq!(simd.tags, exact.tags, "simd-json: {line}");
        assert_eq!(simd.unknown, exact.unknown, "simd-json: {line}");
        let metadata = |raw: &Option<Cow<str>>| raw.as_ref().map(|raw| serde_json::from_str(raw));
        let simd_metadata = simd.metadata.as_ref().map(serde_json::to_value);
        assert_eq!(
            simd_metadata.map(Result::unwrap),
            metadata(&exact.metadata).map(Result::<Value, _>::unwrap),
            "simd-json: {line}"
        );
        let mut as_written = true;
        for (exact, parsed) in [
            (&exact.value, &simd.value),
            (&exact.limit_upper, &simd.limit_upper),
            (&exact.limit_lower, &simd.limit_lower),
        ] {
            let (same, printed_back) = same_number(exact, parsed);
            assert!(same, "simd-json: {line}");
            as_written &= printed_back;
        }
        if let (Some(exact), Some(simd)) = (&exact.metadata, &simd.metadata) {
            as_written &= simd_json::to_string(simd).unwrap() == *exact;
        }
        lost += usize::from(!as_written);
    }
    lost
}

/// Lines `stq gen` does not write: escapes, nulls, quoted numbers, unknown fields.
const EDGE_LINES: [(Kind, &str); 4] = [
    (
        Kind::Units,
        r#"{"station_id":"S\u0031","time_created":"2024-01-01T00:00:00Z","direction":"output","tags":["a\"b"],"metadata":{"k":[1.50,"\u00e9",null]},"extra":{"x":1}}"#,
    ),
    (
        Kind::Units,
        r#"{"station_id":"S","time_created":"2024-01-01T00:00:00Z","direction":"input","slot":null,"tags":null,"metadata":null}"#,
    ),
    (
        Kind::Metrics,
        r#"{"station_id":"S","time_created":"2024-01-01T00:00:00Z","name":"v","value":"3\u002e30","limit_upper":1E+5,"limit_lower":-0.5e-3,"type":null}"#,
    ),
    (
        Kind::Metrics,
        r#"{"station_id":"S","time_created":"2024-01-01T00:00:00Z","name":"v","value":null,"limit_upper":"","limit_lower":"7","extra":[]}"#,
    ),
];

/// Bad lines: what each parser's reason says, as `parse_line` would report it.
const BAD_LINES: [(Kind, &str); 8] = [
    (Kind::Units, "@garbage"),
    (
        Kind::Units,
        r#"{"station_id":"S","station_id":"T","direction":"input"}"#,
    ),
    (Kind::Units, r#"{"station_id":"S","slot":5}"#),
    (Kind::Units, r#"{"station_id":"S","tags":["a",1]}"#),
    (Kind::Metrics, r#"{"station_id":"S","value":true}"#),
    (Kind::Metrics, r#"{"station_id":"S"} x"#),
    (Kind::Metrics, r#"{"station_id":"S","value":01}"#),
    (Kind::Metrics, r#"{"station_id":"S","extra":[1,]}"#),
];

/// A reason as `parse_line` words it: the message, then the column.
fn reason(message: String, column: usize) -> String {
    let message = message.split(" at line ").next().unwrap_or_default();
    format!("{message} (column {column})")
}

fn report_reasons() {
    eprintln!("reasons for bad lines: serde_json, sonic-rs (serde), sonic-rs (lazy):");
    for (kind, line) in BAD_LINES {
        let json = serde_json_fields(kind, line)
            .map(drop)
            .map_err(|error| reason(error.to_string(), error.column()));
        let sonic = sonic_rs_fields(kind, line)
            .map(drop)
            .map_err(|error| reason(error.to_string(), error.column()));
        let lazy = sonic_rs_lazy_fields(kind, line).map(drop);
        eprintln!("  {line}\n    {json:?}\n    {sonic:?}\n    {lazy:?}");
    }
}

fn parsers(criterion: &mut Criterion) {
    for (kind, line) in EDGE_LINES {
        check_equal_work(kind, &[line]);
    }
    report_reasons();
    for kind in [Kind::Units, Kind::Metrics] {
        let text = sample(kind);
        let lines: Vec<&str> = text.lines().collect();
        let lost = check_equal_work(kind, &lines);
        eprintln!(
            "{kind:?}: {} lines, {} bytes, all cases equal; simd-json could not give back \
             {lost} lines as written",
            lines.len(),
            text.len()
        );

        let mut group = criterion.benchmark_group(format!("snapshot line parsers/{kind:?}"));
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_function("parse_line (serde_json, checks, render)", |bencher| {
            let mut rendered = Vec::with_capacity(1024);
            let mut unknown = Vec::new();
            bencher.iter(|| {
                for line in &lines {
                    rendered.clear();
                    black_box(parse_line(kind, line, &mut rendered, &mut unknown).unwrap());
                }
            });
        });
        group.bench_function("serde_json fields", |bencher| {
            bencher.iter(|| {
                for line in &lines {
                    black_box(serde_json_fields(kind, line).unwrap());
                }
            });
        });
        group.bench_function("sonic-rs fields", |bencher| {
            bencher.iter(|| {
                for line in &lines {
                    black_box(sonic_rs_fields(kind, line).unwrap());
                }
            });
        });
        group.bench_function("sonic-rs lazy fields", |bencher| {
            bencher.iter(|| {
                for line in &lines {
                    black_box(sonic_rs_lazy_fields(kind, line).unwrap());
                }
            });
        });
        group.bench_function("simd-json fields (numbers not as written)", |bencher| {
            let mut copy = Vec::with_capacity(1024);
            let mut buffers = simd_json::Buffers::new(1024);
            bencher.iter(|| {
                for line in &lines {
                    copy.clear();
                    copy.extend_from_slice(line.as_bytes());
                    black_box(simd_json_fields(kind, &mut copy, &mut buffers).unwrap());
                }
            });
        });
        group.finish();
    }
}

criterion_group!(benches, parsers);
criterion_main!(benches);
