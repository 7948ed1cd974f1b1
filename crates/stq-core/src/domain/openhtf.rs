//! OpenHTF test records (contract section 2.1): one `*.openhtf.json` file, as
//! OpenHTF's JSON output callback writes it, turned into the record lines stq loads.
//!
//! The conversion is pure, from the file's bytes to JSON record lines that
//! [`parse_line`](crate::domain::record::parse_line) accepts: the input unit record,
//! the output unit record, then one metric record per measurement with a value, in
//! the file's order. The loader parses those lines like any other, so a record from
//! an OpenHTF file is rendered and indexed by the same code as one from JSON Lines.
//! A file is whole or invalid: any problem is one reason for the whole file.
//!
//! Numbers keep the text the file holds (a borrowed [`RawValue`] never goes through
//! a float), because the contract returns `3.30` as `"3.30"` wherever it comes from.

use std::fmt;

use chrono::{DateTime, Datelike};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::domain::record::{quoted, Kind};

/// Converts one OpenHTF test record file into record lines in load order, or gives
/// the one reason the file is invalid.
pub(crate) fn convert(bytes: &[u8]) -> Result<Vec<(Kind, String)>, String> {
    let text = std::str::from_utf8(bytes)
        .map_err(|error| format!("invalid UTF-8 at byte {}", error.valid_up_to() + 1))?;
    // The JSON Lines reader drops a byte order mark on line 1; so does this one.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let raw: &RawValue = serde_json::from_str(text).map_err(|error| error.to_string())?;
    if !raw.get().starts_with('{') {
        return Err("an OpenHTF test record must be a JSON object".to_owned());
    }
    let record: RecordIn = serde_json::from_str(raw.get()).map_err(|error| error.to_string())?;

    let station_id = required_text(record.station_id, "station_id")?;
    let unit_serial = required_text(record.dut_id, "dut_id")?;
    let start = epoch_millis(record.start_time_millis, "start_time_millis")?;
    let end = epoch_millis(record.end_time_millis, "end_time_millis")?;
    let result = optional_text(record.outcome, "outcome")?
        .unwrap_or_default()
        .to_lowercase();
    let unit_type = record.metadata.and_then(test_name).unwrap_or_default();
    // A record line is one line: the metadata of an indented file loses its line
    // breaks here (white space may differ, the contract says; numbers keep their text).
    let metadata = record
        .metadata
        .map(|raw| RawValue::from_string(without_white_space(raw.get())))
        .transpose()
        .map_err(|error| error.to_string())?;

    let mut lines = Vec::new();
    for (direction, time, result) in [("input", &start, ""), ("output", &end, &*result)] {
        let line = UnitLine {
            station_id: &station_id,
            slot: "",
            unit_serial: &unit_serial,
            time_created: time,
            tz: "UTC",
            mode: "",
            tags: [],
            unit_type: &unit_type,
            direction,
            result,
            metadata: metadata.as_deref(),
        };
        lines.push((Kind::Units, to_line(&line)?));
    }

    let phases: Vec<&RawValue> = match record.phases {
        None => Vec::new(),
        Some(raw) => serde_json::from_str(raw.get())
            .map_err(|_| "field `phases` must be an array".to_owned())?,
    };
    for (index, raw_phase) in phases.into_iter().enumerate() {
        let phase_number = index + 1;
        let phase: PhaseIn = if raw_phase.get().starts_with('{') {
            serde_json::from_str(raw_phase.get())
                .map_err(|error| format!("phase {phase_number}: {error}"))?
        } else {
            return Err(format!("phase {phase_number} is not a JSON object"));
        };
        let phase_name = required_text(phase.name, "name")
            .map_err(|reason| format!("phase {phase_number}: {reason}"))?;
        let in_phase =
            |reason: String| format!("phase {phase_number} ({}): {reason}", quoted(&phase_name));
        let Some(measurements) = phase.measurements else {
            continue;
        };
        if !measurements.get().starts_with('{') {
            return Err(in_phase(
                "field `measurements` must be an object".to_owned(),
            ));
        }
        let Entries(measurements) = serde_json::from_str(measurements.get())
            .map_err(|error| in_phase(error.to_string()))?;
        // The phase's time is read only when it has a metric to give it to.
        let mut phase_time = None;
        for (key, raw_measurement) in measurements {
            let in_measurement =
                |reason: String| in_phase(format!("measurement {}: {reason}", quoted(&key)));
            if !raw_measurement.get().starts_with('{') {
                return Err(in_measurement("not a JSON object".to_owned()));
            }
            let measurement: MeasurementIn = serde_json::from_str(raw_measurement.get())
                .map_err(|error| in_measurement(error.to_string()))?;
            let Some(measured) = measurement.measured_value else {
                continue;
            };
            if phase_time.is_none() {
                phase_time = Some(
                    epoch_millis(phase.end_time_millis, "end_time_millis").map_err(&in_phase)?,
                );
            }
            let time = phase_time.as_deref().unwrap_or_default();
            let name = required_text(measurement.name, "name").map_err(&in_measurement)?;
            let value = value_text(measured).map_err(&in_measurement)?;
            let unit = measurement.units.map(unit_text).unwrap_or_default();
            let (limit_lower, limit_upper) = measurement
                .validators
                .and_then(first_limits)
                .unwrap_or_default();
            let line = MetricLine {
                station_id: &station_id,
                slot: "",
                unit_serial: &unit_serial,
                time_created: time,
                tz: "UTC",
                mode: "",
                tags: [&phase_name],
                name: &name,
                value: &value,
                unit: &unit,
                r#type: "measurement",
                limit_upper: &limit_upper,
                limit_lower: &limit_lower,
            };
            lines.push((Kind::Metrics, to_line(&line)?));
        }
    }
    Ok(lines)
}

/// The fields of a test record that stq reads; `None` is absent or `null`.
/// Everything else OpenHTF writes (`log_records`, `code_info`, ...) is ignored.
#[derive(Deserialize)]
struct RecordIn<'a> {
    #[serde(borrow, default)]
    station_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    dut_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    start_time_millis: Option<&'a RawValue>,
    #[serde(borrow, default)]
    end_time_millis: Option<&'a RawValue>,
    #[serde(borrow, default)]
    outcome: Option<&'a RawValue>,
    #[serde(borrow, default)]
    metadata: Option<&'a RawValue>,
    #[serde(borrow, default)]
    phases: Option<&'a RawValue>,
}

/// The fields of a phase record that stq reads.
#[derive(Deserialize)]
struct PhaseIn<'a> {
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    end_time_millis: Option<&'a RawValue>,
    #[serde(borrow, default)]
    measurements: Option<&'a RawValue>,
}

/// The fields of a measurement that stq reads.
#[derive(Deserialize)]
struct MeasurementIn<'a> {
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    measured_value: Option<&'a RawValue>,
    #[serde(borrow, default)]
    units: Option<&'a RawValue>,
    #[serde(borrow, default)]
    validators: Option<&'a RawValue>,
}

/// A JSON object's entries in their written order: OpenHTF writes a phase's
/// measurements as an object, and the contract keeps their order.
struct Entries<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Entries<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;
        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = Entries<'de>;
            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(EntriesVisitor)
    }
}

/// A record line of a unit, in the field order `parse_line` renders.
#[derive(Serialize)]
struct UnitLine<'a> {
    station_id: &'a str,
    slot: &'a str,
    unit_serial: &'a str,
    time_created: &'a str,
    tz: &'a str,
    mode: &'a str,
    tags: [&'a str; 0],
    unit_type: &'a str,
    direction: &'a str,
    result: &'a str,
    metadata: Option<&'a RawValue>,
}

/// A record line of a metric, in the field order `parse_line` renders.
#[derive(Serialize)]
struct MetricLine<'a> {
    station_id: &'a str,
    slot: &'a str,
    unit_serial: &'a str,
    time_created: &'a str,
    tz: &'a str,
    mode: &'a str,
    tags: [&'a str; 1],
    name: &'a str,
    value: &'a str,
    unit: &'a str,
    r#type: &'a str,
    limit_upper: &'a str,
    limit_lower: &'a str,
}

fn to_line<T: Serialize>(line: &T) -> Result<String, String> {
    // Serializing these shapes into a String cannot fail; the mapping is for completeness.
    serde_json::to_string(line).map_err(|error| error.to_string())
}

/// A JSON string's decoded text, or `None` when `raw` is not a string.
fn string_of(raw: &RawValue) -> Option<String> {
    serde_json::from_str(raw.get()).ok()
}

/// A field that must be a string when present.
fn optional_text(raw: Option<&RawValue>, field: &str) -> Result<Option<String>, String> {
    raw.map(|raw| string_of(raw).ok_or_else(|| format!("field `{field}` must be a string")))
        .transpose()
}

/// A field that must be a non-empty string.
fn required_text(raw: Option<&RawValue>, field: &str) -> Result<String, String> {
    match optional_text(raw, field)? {
        Some(text) if !text.is_empty() => Ok(text),
        Some(_) => Err(format!("field `{field}` is empty")),
        None => Err(format!("missing field `{field}`")),
    }
}

/// An integer number of milliseconds since the Unix epoch, written as the contract
/// writes OpenHTF's times: `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn epoch_millis(raw: Option<&RawValue>, field: &str) -> Result<String, String> {
    let raw = raw.ok_or_else(|| format!("missing field `{field}`"))?;
    let text = raw.get();
    let digits = text.strip_prefix('-').unwrap_or(text);
    let millis = (!digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit()))
        .then(|| text.parse::<i64>().ok())
        .flatten()
        .ok_or_else(|| {
            format!(
                "field `{field}` must be an integer (milliseconds since the Unix epoch), not {}",
                quoted(text)
            )
        })?;
    DateTime::from_timestamp_millis(millis)
        .filter(|time| (0..=9999).contains(&time.year()))
        .map(|time| time.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .ok_or_else(|| format!("field `{field}` is outside the years 0000 to 9999: {millis}"))
}

/// `metadata.test_name` when it is a string; a shop's metadata is free-form, so
/// anything else is no test name rather than an invalid file.
fn test_name(metadata: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct Metadata<'a> {
        #[serde(borrow, default)]
        test_name: Option<&'a RawValue>,
    }
    let metadata: Metadata = serde_json::from_str(metadata.get()).ok()?;
    metadata.test_name.and_then(string_of)
}

/// The unit rule: `units.suffix` when it is a non-empty string, else `units.name`
/// when that is, else `""`.
fn unit_text(units: &RawValue) -> String {
    #[derive(Deserialize)]
    struct Units<'a> {
        #[serde(borrow, default)]
        name: Option<&'a RawValue>,
        #[serde(borrow, default)]
        suffix: Option<&'a RawValue>,
    }
    let Ok(units) = serde_json::from_str::<Units>(units.get()) else {
        return String::new();
    };
    [units.suffix, units.name]
        .into_iter()
        .flatten()
        .filter_map(string_of)
        .find(|text| !text.is_empty())
        .unwrap_or_default()
}

/// The value rule: a number as written, a string as is, `true`/`false`, and a list
/// or object as compact JSON.
fn value_text(raw: &RawValue) -> Result<String, String> {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'"') => {
            string_of(raw).ok_or_else(|| "`measured_value` is not a valid string".to_owned())
        }
        Some(b'[' | b'{') => {
            let mut compact = String::with_capacity(text.len());
            write_compact(raw, &mut compact)?;
            Ok(compact)
        }
        _ => Ok(text.to_owned()),
    }
}

/// Writes `raw` as compact JSON: no white space, numbers as written, and strings
/// written again so that a `\u00df` from Python's ASCII-only output is an `ß`.
fn write_compact(raw: &RawValue, out: &mut String) -> Result<(), String> {
    let text = raw.get();
    let reason = |error: serde_json::Error| error.to_string();
    match text.as_bytes().first() {
        Some(b'"') => {
            let decoded: String = serde_json::from_str(text).map_err(reason)?;
            out.push_str(&serde_json::to_string(&decoded).map_err(reason)?);
        }
        Some(b'[') => {
            let items: Vec<&RawValue> = serde_json::from_str(text).map_err(reason)?;
            out.push('[');
            for (index, item) in items.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_compact(item, out)?;
            }
            out.push(']');
        }
        Some(b'{') => {
            let Entries(entries) = serde_json::from_str(text).map_err(reason)?;
            out.push('{');
            for (index, (key, value)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(&key).map_err(reason)?);
                out.push(':');
                write_compact(value, out)?;
            }
            out.push('}');
        }
        _ => out.push_str(text),
    }
    Ok(())
}

/// Valid JSON text without the white space between its tokens; strings, escapes
/// included, and numbers stay as written.
fn without_white_space(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut in_string = false;
    let mut escaped = false;
    for character in json.chars() {
        if in_string {
            out.push(character);
            if escaped {
                escaped = false;
            } else if character == '\\' {
                escaped = true;
            } else if character == '"' {
                in_string = false;
            }
        } else if !matches!(character, ' ' | '\t' | '\n' | '\r') {
            in_string = character == '"';
            out.push(character);
        }
    }
    out
}

/// The limits of the first validator whose text has a recognised form, as
/// `(limit_lower, limit_upper)`; `None` when `validators` is not a list or none has.
fn first_limits(validators: &RawValue) -> Option<(String, String)> {
    let validators: Vec<&RawValue> = serde_json::from_str(validators.get()).ok()?;
    validators
        .into_iter()
        .filter_map(string_of)
        .find_map(|text| limits(&text).map(|(lower, upper)| (lower.to_owned(), upper.to_owned())))
}

/// The outer bounds of a validator's text when it has one of the contract's forms
/// (`A <= x <= B`, `A < x < B`, `A <= x`, `A < x`, `x <= B`, `x < B`, `x >= A`,
/// `x > A`, `x == V`), also with `Marginal:` bounds between an outer bound and `x`
/// as OpenHTF writes them (`1.0 <= Marginal:1.1 <= x <= Marginal:1.9 <= 2.0`). A
/// bound the form lacks is `""`.
///
/// Every comparison of one form uses the same operator, as in the contract's list
/// (`A <= x < B` is not one of its forms).
fn limits(text: &str) -> Option<(&str, &str)> {
    let tokens: Vec<&str> = text.split_ascii_whitespace().collect();
    if let ["x", "==", value] = tokens[..] {
        return is_number(value).then_some((value, value));
    }
    if tokens.len() < 3 || tokens.len().is_multiple_of(2) {
        return None;
    }
    let operator = tokens[1];
    if !matches!(operator, "<" | "<=" | ">" | ">=")
        || tokens
            .iter()
            .skip(1)
            .step_by(2)
            .any(|token| *token != operator)
    {
        return None;
    }
    let terms: Vec<&str> = tokens.iter().step_by(2).copied().collect();
    let at = terms.iter().position(|term| *term == "x")?;
    let (before, after) = (&terms[..at], &terms[at + 1..]);
    let upward = operator.starts_with('<');
    let (lower, upper) = if upward {
        (outer(before, true)?, outer(after, false)?)
    } else {
        // Only `x >= A` and `x > A`: nothing may stand before `x`.
        if !before.is_empty() {
            return None;
        }
        (outer(after, false)?, None)
    };
    if lower.is_none() && upper.is_none() {
        return None;
    }
    Some((lower.unwrap_or(""), upper.unwrap_or("")))
}

/// One side of `x` read away from it: nothing, or an outer bound with an optional
/// marginal bound before it. `Some(None)` is no bound; `None` is not a form.
fn outer<'t>(side: &[&'t str], away_is_reversed: bool) -> Option<Option<&'t str>> {
    let mut side = side.to_vec();
    if away_is_reversed {
        side.reverse();
    }
    match side[..] {
        [] => Some(None),
        [bound] => is_number(bound).then_some(Some(bound)),
        [marginal, bound] => (is_marginal(marginal) && is_number(bound)).then_some(Some(bound)),
        _ => None,
    }
}

/// `Marginal:N`, as OpenHTF writes a marginal bound.
fn is_marginal(term: &str) -> bool {
    term.strip_prefix("Marginal:").is_some_and(is_number)
}

/// JSON number syntax: `-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?`, which is
/// also what Python's `str` writes for finite ints and floats.
fn is_number(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut at = usize::from(bytes.first() == Some(&b'-'));
    let digits = |at: &mut usize| {
        let start = *at;
        while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
            *at += 1;
        }
        *at - start
    };
    let integer_start = at;
    let integer = digits(&mut at);
    if integer == 0 || (integer > 1 && bytes[integer_start] == b'0') {
        return false;
    }
    if bytes.get(at) == Some(&b'.') {
        at += 1;
        if digits(&mut at) == 0 {
            return false;
        }
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(bytes.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        if digits(&mut at) == 0 {
            return false;
        }
    }
    at == bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::record::parse_line;
    use serde_json::{json, Value};

    /// Converts `text` and parses every line as the loader does, returning each
    /// record's rendered response JSON.
    fn records(text: &str) -> Result<Vec<(Kind, Value)>, String> {
        let lines = convert(text.as_bytes())?;
        Ok(lines
            .into_iter()
            .map(|(kind, line)| {
                assert!(!line.contains('\n'), "a record line is one line: {line}");
                let mut rendered = Vec::new();
                parse_line(kind, &line, &mut rendered, &mut Vec::new())
                    .unwrap_or_else(|reason| panic!("{line}: {reason}"));
                (kind, serde_json::from_slice(&rendered).unwrap())
            })
            .collect())
    }

    /// A test record with one phase `p` holding `measurements` (a JSON object's text).
    fn with_measurements(measurements: &str) -> String {
        format!(
            r#"{{"station_id":"S","dut_id":"D","start_time_millis":0,"end_time_millis":2000,
                "outcome":"PASS","phases":[{{"name":"p","end_time_millis":1500,
                "measurements":{measurements}}}]}}"#
        )
    }

    /// The metric records of a record whose one phase holds `measurements`.
    fn metrics(measurements: &str) -> Vec<Value> {
        records(&with_measurements(measurements))
            .unwrap()
            .into_iter()
            .filter(|(kind, _)| *kind == Kind::Metrics)
            .map(|(_, record)| record)
            .collect()
    }

    /// The one metric of a measurement `m` written as `fields` (an object's inside).
    fn metric(fields: &str) -> Value {
        let mut found = metrics(&format!(r#"{{"m":{{"name":"m",{fields}}}}}"#));
        assert_eq!(found.len(), 1, "{fields}");
        found.remove(0)
    }

    #[test]
    fn a_record_maps_to_two_units_then_its_metrics() {
        let text = r#"{"station_id":"ST-1","dut_id":"SN-1","start_time_millis":1700000000123,
            "end_time_millis":1700000001456,"outcome":"FAIL","extra":[1],
            "metadata":{"test_name":"board","n":1.50},
            "phases":[{"name":"power","end_time_millis":1700000000999,"measurements":{
                "vcc":{"name":"vcc","measured_value":3.30,"units":{"name":"volt","suffix":"V"},
                       "validators":["3.0 <= x <= 3.6"]}}}]}"#;
        let found = records(text).unwrap();
        let kinds: Vec<Kind> = found.iter().map(|(kind, _)| *kind).collect();
        assert_eq!(kinds, [Kind::Units, Kind::Units, Kind::Metrics]);
        assert_eq!(
            found[0].1,
            json!({"station_id":"ST-1","slot":"","unit_serial":"SN-1",
                   "time_created":"2023-11-14T22:13:20.123Z","tz":"UTC","mode":"","tags":[],
                   "unit_type":"board","direction":"input","result":"",
                   "metadata":{"test_name":"board","n":1.50}})
        );
        assert_eq!(
            found[1].1,
            json!({"station_id":"ST-1","slot":"","unit_serial":"SN-1",
                   "time_created":"2023-11-14T22:13:21.456Z","tz":"UTC","mode":"","tags":[],
                   "unit_type":"board","direction":"output","result":"fail",
                   "metadata":{"test_name":"board","n":1.50}})
        );
        assert_eq!(
            found[2].1,
            json!({"station_id":"ST-1","slot":"","unit_serial":"SN-1",
                   "time_created":"2023-11-14T22:13:20.999Z","tz":"UTC","mode":"","tags":["power"],
                   "name":"vcc","value":"3.30","unit":"V","type":"measurement",
                   "limit_upper":"3.6","limit_lower":"3.0"})
        );
        // Numbers of the metadata keep their text in the rendered bytes.
        let lines = convert(text.as_bytes()).unwrap();
        assert!(
            lines[0]
                .1
                .contains(r#""metadata":{"test_name":"board","n":1.50}"#),
            "{}",
            lines[0].1
        );
    }

    #[test]
    fn outcomes_are_lower_cased() {
        for (outcome, result) in [
            (r#""PASS""#, "pass"),
            (r#""FAIL""#, "fail"),
            (r#""ERROR""#, "error"),
            (r#""TIMEOUT""#, "timeout"),
            (r#""ABORTED""#, "aborted"),
            (r#""Marginal_Pass""#, "marginal_pass"),
            ("null", ""),
        ] {
            let text = format!(
                r#"{{"station_id":"S","dut_id":"D","start_time_millis":0,"end_time_millis":0,"outcome":{outcome}}}"#
            );
            let found = records(&text).unwrap();
            assert_eq!(found[0].1["result"], "", "{outcome}");
            assert_eq!(found[1].1["result"], result, "{outcome}");
        }
    }

    #[test]
    fn unit_type_is_the_metadata_test_name_and_metadata_is_kept() {
        for (metadata, unit_type, rendered) in [
            (
                r#"{"test_name":"t","k":[1, 2.0]}"#,
                "t",
                r#"{"test_name":"t","k":[1,2.0]}"#,
            ),
            (r#"{ "k" : "a b\"c\\" }"#, "", r#"{"k":"a b\"c\\"}"#),
            (
                r#"{"test_name":"\u00e9"}"#,
                "é",
                r#"{"test_name":"\u00e9"}"#,
            ),
            (r#"{"test_name":7}"#, "", r#"{"test_name":7}"#),
            (r#"{"test_name":null}"#, "", r#"{"test_name":null}"#),
            (r#"[1, {"test_name":"t"}]"#, "", r#"[1,{"test_name":"t"}]"#),
            ("\"text\"", "", "\"text\""),
            ("null", "", "null"),
        ] {
            let text = format!(
                "{{\"station_id\":\"S\",\"dut_id\":\"D\",\"start_time_millis\":0,\n\
                 \"end_time_millis\":0,\"metadata\":{metadata}}}"
            );
            let lines = convert(text.as_bytes()).unwrap();
            for (_, line) in &lines {
                assert!(
                    line.ends_with(&format!(r#""metadata":{rendered}}}"#)),
                    "{metadata}: {line}"
                );
            }
            let found = records(&text).unwrap();
            assert_eq!(found[0].1["unit_type"], unit_type, "{metadata}");
            assert_eq!(found[1].1["unit_type"], unit_type, "{metadata}");
        }
        // No metadata at all: `null`, as for any unit record without it.
        let found =
            records(r#"{"station_id":"S","dut_id":"D","start_time_millis":0,"end_time_millis":0}"#)
                .unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].1["metadata"], Value::Null);
        assert_eq!(found[0].1["unit_type"], "");
    }

    #[test]
    fn times_are_utc_milliseconds() {
        for (millis, text) in [
            ("0", "1970-01-01T00:00:00.000Z"),
            ("1", "1970-01-01T00:00:00.001Z"),
            ("-1", "1969-12-31T23:59:59.999Z"),
            ("1795528933337", "2026-11-24T14:02:13.337Z"),
            ("-62167219200000", "0000-01-01T00:00:00.000Z"),
            ("253402300799999", "9999-12-31T23:59:59.999Z"),
        ] {
            assert_eq!(
                epoch_millis(serde_json::from_str(millis).ok(), "t").as_deref(),
                Ok(text),
                "{millis}"
            );
        }
        for millis in [
            "-62167219200001",
            "253402300800000",
            "9223372036854775807",
            "9223372036854775808",
            "1.0",
            "1e3",
            "-0.5",
            "\"1\"",
            "true",
            "[1]",
        ] {
            let raw: &RawValue = serde_json::from_str(millis).unwrap();
            let reason = epoch_millis(Some(raw), "start_time_millis").unwrap_err();
            assert!(
                reason.starts_with("field `start_time_millis` "),
                "{millis}: {reason}"
            );
        }
        assert_eq!(
            epoch_millis(None, "end_time_millis").unwrap_err(),
            "missing field `end_time_millis`"
        );
    }

    #[test]
    fn the_unit_is_the_suffix_else_the_name() {
        for (units, unit) in [
            (r#"{"name":"volt","code":"VLT","suffix":"V"}"#, "V"),
            (r#"{"name":"degree Celsius","suffix":"\u00b0C"}"#, "°C"),
            (
                r#"{"name":"No dimension","code":"NDL","suffix":null}"#,
                "No dimension",
            ),
            (r#"{"name":"percent volume","suffix":""}"#, "percent volume"),
            (r#"{"name":"ohm"}"#, "ohm"),
            (r#"{"name":"ohm","suffix":5}"#, "ohm"),
            (r#"{"name":"","suffix":""}"#, ""),
            (r#"{"name":null,"suffix":null}"#, ""),
            (r#"{"name":5}"#, ""),
            ("{}", ""),
            ("null", ""),
            (r#""V""#, ""),
            ("[]", ""),
        ] {
            let record = metric(&format!(r#""measured_value":1,"units":{units}"#));
            assert_eq!(record["unit"], unit, "{units}");
        }
        assert_eq!(metric(r#""measured_value":1"#)["unit"], "");
    }

    #[test]
    fn values_are_written_as_the_contract_says() {
        for (measured, value) in [
            ("3.30", "3.30"),
            ("-0", "-0"),
            ("25", "25"),
            ("1E+5", "1E+5"),
            ("2.5e-09", "2.5e-09"),
            (
                "123456789012345678901234567890.5",
                "123456789012345678901234567890.5",
            ),
            (r#""v1.2.3""#, "v1.2.3"),
            (r#""Stra\u00dfe \"q\"""#, "Straße \"q\""),
            (r#""""#, ""),
            ("true", "true"),
            ("false", "false"),
            ("[1, 2.50, -3]", "[1,2.50,-3]"),
            ("[ ]", "[]"),
            (
                "{\"gain\": 1.020,\n \"label\": \"Stra\\u00dfe\", \"ok\": null, \"t\": [true, {}]}",
                r#"{"gain":1.020,"label":"Straße","ok":null,"t":[true,{}]}"#,
            ),
            (r#"{"b":1,"a":2}"#, r#"{"b":1,"a":2}"#),
            (r#"["\ud83d\ude00","tab\t","\/"]"#, r#"["😀","tab\t","/"]"#),
            (r#"[[0, 1, 2.0], [1, 1, 3]]"#, "[[0,1,2.0],[1,1,3]]"),
        ] {
            let record = metric(&format!(r#""measured_value":{measured}"#));
            assert_eq!(record["value"], value, "{measured}");
        }
    }

    #[test]
    fn limits_come_from_recognised_forms() {
        for (validator, bounds) in [
            ("3.0 <= x <= 3.6", Some(("3.0", "3.6"))),
            ("3.0 < x < 3.6", Some(("3.0", "3.6"))),
            ("-10 <= x", Some(("-10", ""))),
            ("-10 < x", Some(("-10", ""))),
            ("x <= 0.05", Some(("", "0.05"))),
            ("x < 0.05", Some(("", "0.05"))),
            ("x >= 1e-06", Some(("1e-06", ""))),
            ("x > 1E+5", Some(("1E+5", ""))),
            ("x == 3", Some(("3", "3"))),
            ("x == -2.50", Some(("-2.50", "-2.50"))),
            (
                "1.0 <= Marginal:1.1 <= x <= Marginal:1.9 <= 2.0",
                Some(("1.0", "2.0")),
            ),
            ("1.0 <= Marginal:1.1 <= x", Some(("1.0", ""))),
            ("x <= Marginal:1.9 <= 2.0", Some(("", "2.0"))),
            ("1.0 <= Marginal:1.1 <= x <= 2.0", Some(("1.0", "2.0"))),
            ("1 < Marginal:2 < x < Marginal:3 < 4", Some(("1", "4"))),
            ("x >= Marginal:2 >= 1", Some(("1", ""))),
            ("  3.0   <=  x  <=  3.6 ", Some(("3.0", "3.6"))),
            // Not one of the forms.
            ("3.0 <= x < 3.6", None),
            ("3.0 < x <= 3.6", None),
            ("3.6 >= x >= 3.0", None),
            ("x >= 1 >= 0", None),
            ("x", None),
            ("x ==", None),
            ("x == V", None),
            ("x == 1 == 1", None),
            ("x != 3", None),
            ("3 <= y", None),
            ("3.0<=x<=3.6", None),
            ("x <= inf", None),
            ("nan <= x", None),
            ("01 <= x", None),
            ("1. <= x", None),
            (".5 <= x", None),
            ("+1 <= x", None),
            ("1e <= x", None),
            ("0x10 <= x", None),
            ("Marginal:1.1 <= x", None),
            ("x <= Marginal:1.9", None),
            ("1 <= Marginal:2 <= Marginal:3 <= x", None),
            ("1 <= Marginal: <= x", None),
            ("1 <= Marginal:a <= x", None),
            ("1 <= 2 <= x", None),
            ("1 <= x <= 2 <= 3", None),
            ("x <= x", None),
            ("1 <= x <= x", None),
            ("'x' matches /^v\\d+$/", None),
            ("'x' is within 5% of 1000.", None),
            ("'x' is equal to '[1, 2]'", None),
            ("All values pass: 1 <= x <= 2", None),
            ("", None),
        ] {
            assert_eq!(limits(validator), bounds, "{validator:?}");
        }
    }

    #[test]
    fn the_first_recognised_validator_gives_both_limits() {
        for (validators, lower, upper) in [
            (r#"["3.0 <= x <= 3.6"]"#, "3.0", "3.6"),
            (
                r#"["'x' is within 5% of 1000.", "900 <= x <= 1100"]"#,
                "900",
                "1100",
            ),
            (r#"["x <= 10", "0 <= x"]"#, "", "10"),
            (r#"[7, null, "x == 2"]"#, "2", "2"),
            (r#"["'x' matches /a/"]"#, "", ""),
            ("[]", "", ""),
            ("null", "", ""),
            (r#""x == 2""#, "", ""),
            (r#"{"a":"x == 2"}"#, "", ""),
        ] {
            let record = metric(&format!(r#""measured_value":1,"validators":{validators}"#));
            assert_eq!(record["limit_lower"], lower, "{validators}");
            assert_eq!(record["limit_upper"], upper, "{validators}");
        }
    }

    #[test]
    fn measurements_keep_their_order_and_only_set_ones_count() {
        let found = metrics(
            r#"{"zeta":{"name":"zeta","measured_value":1},
                "alpha":{"name":"alpha","measured_value":null},
                "mid":{"name":"mid"},
                "beta":{"name":"beta","measured_value":2},
                "key":{"name":"named","measured_value":3}}"#,
        );
        let names: Vec<&Value> = found.iter().map(|record| &record["name"]).collect();
        assert_eq!(names, ["zeta", "beta", "named"]);
        for record in &found {
            assert_eq!(record["time_created"], "1970-01-01T00:00:01.500Z");
            assert_eq!(record["tags"], json!(["p"]));
            assert_eq!(record["type"], "measurement");
        }
    }

    #[test]
    fn phases_give_their_metrics_in_order_at_their_end() {
        let text = r#"{"station_id":"S","dut_id":"D","start_time_millis":0,"end_time_millis":9000,
            "phases":[
              {"name":"trigger","end_time_millis":"not needed","measurements":{}},
              {"name":"a","end_time_millis":1000,"measurements":{"m":{"name":"m","measured_value":1}}},
              {"name":"none","measurements":{"u":{"name":"u"}}},
              {"name":"b","end_time_millis":2000,"measurements":{"m":{"name":"m","measured_value":2}}},
              {"name":"c","end_time_millis":500,"measurements":null},
              {"name":"d","end_time_millis":3000}
            ]}"#;
        let found = records(text).unwrap();
        let metrics: Vec<(&Value, &Value, &Value)> = found[2..]
            .iter()
            .map(|(_, record)| {
                (
                    &record["tags"][0],
                    &record["value"],
                    &record["time_created"],
                )
            })
            .collect();
        assert_eq!(
            metrics,
            [
                (&json!("a"), &json!("1"), &json!("1970-01-01T00:00:01.000Z")),
                (&json!("b"), &json!("2"), &json!("1970-01-01T00:00:02.000Z")),
            ]
        );
        let no_phases = r#"{"station_id":"S","dut_id":"D","start_time_millis":0,"end_time_millis":0,"phases":null}"#;
        assert_eq!(records(no_phases).unwrap().len(), 2);
    }

    #[test]
    fn invalid_files_say_why() {
        let base = |fields: &str| {
            format!(
                r#"{{"station_id":"S","dut_id":"D","start_time_millis":0,"end_time_millis":1{fields}}}"#
            )
        };
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"".to_vec(), "EOF while parsing a value at line 1 column 0"),
            (b"{\"station_id\": \"S\",\n  oops}".to_vec(), "key must be a string at line 2 column 3"),
            (b"{\"station_id\":\"S\xff\"}".to_vec(), "invalid UTF-8 at byte 17"),
            (b"[1]".to_vec(), "an OpenHTF test record must be a JSON object"),
            (b"\"text\"".to_vec(), "an OpenHTF test record must be a JSON object"),
            (b"{} {}".to_vec(), "trailing characters"),
            (
                br#"{"dut_id":"D","start_time_millis":0,"end_time_millis":0}"#.to_vec(),
                "missing field `station_id`",
            ),
            (
                br#"{"station_id":null,"dut_id":"D","start_time_millis":0,"end_time_millis":0}"#
                    .to_vec(),
                "missing field `station_id`",
            ),
            (
                br#"{"station_id":"","dut_id":"D","start_time_millis":0,"end_time_millis":0}"#
                    .to_vec(),
                "field `station_id` is empty",
            ),
            (
                br#"{"station_id":5,"dut_id":"D","start_time_millis":0,"end_time_millis":0}"#
                    .to_vec(),
                "field `station_id` must be a string",
            ),
            (
                br#"{"station_id":"S","start_time_millis":0,"end_time_millis":0}"#.to_vec(),
                "missing field `dut_id`",
            ),
            (
                br#"{"station_id":"S","dut_id":"","start_time_millis":0,"end_time_millis":0}"#
                    .to_vec(),
                "field `dut_id` is empty",
            ),
            (
                br#"{"station_id":"S","dut_id":"D","end_time_millis":0}"#.to_vec(),
                "missing field `start_time_millis`",
            ),
            (
                br#"{"station_id":"S","dut_id":"D","start_time_millis":0}"#.to_vec(),
                "missing field `end_time_millis`",
            ),
            (
                br#"{"station_id":"S","dut_id":"D","start_time_millis":0.5,"end_time_millis":0}"#
                    .to_vec(),
                "field `start_time_millis` must be an integer (milliseconds since the Unix epoch), not \"0.5\"",
            ),
            (
                br#"{"station_id":"S","dut_id":"D","start_time_millis":0,"end_time_millis":"1"}"#
                    .to_vec(),
                "field `end_time_millis` must be an integer",
            ),
            (
                br#"{"station_id":"S","station_id":"T","dut_id":"D","start_time_millis":0,"end_time_millis":0}"#
                    .to_vec(),
                "duplicate field `station_id`",
            ),
            (base(r#","outcome":1"#).into_bytes(), "field `outcome` must be a string"),
            (base(r#","phases":{}"#).into_bytes(), "field `phases` must be an array"),
            (base(r#","phases":[1]"#).into_bytes(), "phase 1 is not a JSON object"),
            (base(r#","phases":[{}]"#).into_bytes(), "phase 1: missing field `name`"),
            (
                base(r#","phases":[{"name":"p","measurements":[]}]"#).into_bytes(),
                "phase 1 (\"p\"): field `measurements` must be an object",
            ),
            (
                base(r#","phases":[{"name":"p","measurements":{"m":1}}]"#).into_bytes(),
                "phase 1 (\"p\"): measurement \"m\": not a JSON object",
            ),
            (
                base(r#","phases":[{"name":"p","measurements":{"m":{"measured_value":1}}}]"#)
                    .into_bytes(),
                "phase 1 (\"p\"): missing field `end_time_millis`",
            ),
            (
                base(r#","phases":[{"name":"p","end_time_millis":1,"measurements":{"m":{"measured_value":1}}}]"#)
                    .into_bytes(),
                "phase 1 (\"p\"): measurement \"m\": missing field `name`",
            ),
            (
                base(r#","phases":[{"name":"p","end_time_millis":1,"measurements":{"m":{"name":"","measured_value":1}}}]"#)
                    .into_bytes(),
                "phase 1 (\"p\"): measurement \"m\": field `name` is empty",
            ),
            (
                base(r#","phases":[{"name":"p","end_time_millis":1.5,"measurements":{"m":{"name":"m","measured_value":1}}}]"#)
                    .into_bytes(),
                "phase 1 (\"p\"): field `end_time_millis` must be an integer",
            ),
            (
                base(r#","phases":[{"name":"p","end_time_millis":1,"measurements":{"m":{"name":"m","measured_value":"\udc00"}}}]"#)
                    .into_bytes(),
                "phase 1 (\"p\"): measurement \"m\": ",
            ),
            (
                base(r#","phases":[{"name":"ok","end_time_millis":1},{"name":"p","end_time_millis":1,"measurements":{"m":{"name":"m","measured_value":["\udc00"]}}}]"#)
                    .into_bytes(),
                "phase 2 (\"p\"): measurement \"m\": ",
            ),
        ];
        for (bytes, wanted) in cases {
            let reason = convert(&bytes).unwrap_err();
            assert!(
                reason.contains(wanted),
                "{}: {reason:?} should contain {wanted:?}",
                String::from_utf8_lossy(&bytes)
            );
        }
    }

    /// A committed fixture (tests/openhtf/records/), converted, with the file parsed
    /// to read the times a rewrite changes.
    fn fixture(name: &str) -> (Vec<(Kind, Value)>, Value) {
        let path = format!(
            "{}/../../tests/openhtf/records/{name}.openhtf.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{path}: {error}"));
        (
            records(&text).unwrap(),
            serde_json::from_str(&text).unwrap(),
        )
    }

    /// Epoch milliseconds as the contract writes them, by chrono's own formatter.
    fn at(millis: &Value) -> String {
        DateTime::from_timestamp_millis(millis.as_i64().unwrap())
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    }

    /// Checks a fixture's records field by field: its units, then `metrics` as
    /// (phase, name, value, unit, limit_lower, limit_upper).
    fn check_fixture(
        name: &str,
        station: &str,
        serial: &str,
        unit_type: &str,
        result: &str,
        metrics: &[(&str, &str, &str, &str, &str, &str)],
    ) {
        let (found, file) = fixture(name);
        assert_eq!(found.len(), 2 + metrics.len(), "{name}");
        for (index, direction) in ["input", "output"].into_iter().enumerate() {
            let (kind, record) = &found[index];
            assert_eq!(*kind, Kind::Units);
            let time = match direction {
                "input" => at(&file["start_time_millis"]),
                _ => at(&file["end_time_millis"]),
            };
            assert_eq!(
                *record,
                json!({"station_id": station, "slot": "", "unit_serial": serial,
                       "time_created": time, "tz": "UTC", "mode": "", "tags": [],
                       "unit_type": unit_type, "direction": direction,
                       "result": if direction == "input" { "" } else { result },
                       "metadata": file["metadata"]}),
                "{name}"
            );
        }
        let phase_ends: std::collections::HashMap<&str, String> = file["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|phase| {
                (
                    phase["name"].as_str().unwrap(),
                    at(&phase["end_time_millis"]),
                )
            })
            .collect();
        for ((kind, record), (phase, metric, value, unit, lower, upper)) in
            found[2..].iter().zip(metrics)
        {
            assert_eq!(*kind, Kind::Metrics);
            assert_eq!(
                *record,
                json!({"station_id": station, "slot": "", "unit_serial": serial,
                       "time_created": phase_ends[phase], "tz": "UTC", "mode": "",
                       "tags": [phase], "name": metric, "value": value, "unit": unit,
                       "type": "measurement", "limit_upper": upper, "limit_lower": lower}),
                "{name}"
            );
        }
    }

    #[test]
    fn the_passing_fixture_maps_every_field() {
        check_fixture(
            "passing",
            "ST-OHTF-A",
            "SN-PASS-001",
            "board_power",
            "pass",
            &[
                ("power", "vcc", "3.3", "V", "3.0", "3.6"),
                ("power", "temperature", "25", "°C", "-10", ""),
                ("power", "ripple", "0.012", "V", "", "0.05"),
                ("power", "rail_count", "3", "", "3", "3"),
                ("power", "vref", "1.5", "V", "1.0", "2.0"),
                ("power", "gain", "0.00125", "No dimension", "", ""),
                ("power", "humidity", "40.5", "percent volume", "0", "100"),
                ("identity", "firmware", "v1.2.3", "", "", ""),
                ("identity", "frequency", "1001", "Hz", "900", "1100"),
                ("identity", "leakage", "2", "", "", "10"),
                ("identity", "standby_current", "2.5e-09", "A", "", "1e-06"),
                ("identity", "self_test", "true", "", "", ""),
                ("identity", "samples", "[1,2.5,-3]", "", "", ""),
                (
                    "identity",
                    "calibration",
                    r#"{"gain":1.02,"label":"Straße","ok":null}"#,
                    "",
                    "",
                    "",
                ),
            ],
        );
    }

    #[test]
    fn the_failing_fixture_maps_every_field() {
        check_fixture(
            "failing",
            "ST-OHTF-A",
            "SN-FAIL-002",
            "board_power",
            "fail",
            &[
                ("power_fail", "vcc", "3.9", "V", "3.0", "3.6"),
                ("power_fail", "current", "0.25", "A", "", "0.5"),
            ],
        );
    }

    #[test]
    fn the_erroring_fixture_maps_every_field() {
        check_fixture(
            "erroring",
            "ST-OHTF-B",
            "SN-ERR-003",
            "flash_program",
            "error",
            &[
                ("power_ok", "vcc", "3.31", "V", "3.0", "3.6"),
                ("flash", "flash_size", "4096", "", "1024", ""),
            ],
        );
    }

    #[test]
    fn fixture_metadata_keeps_its_text_without_line_breaks() {
        let text = std::fs::read_to_string(format!(
            "{}/../../tests/openhtf/records/passing.openhtf.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        assert!(text.contains("\n"), "the passing fixture is indented");
        let lines = convert(text.as_bytes()).unwrap();
        assert!(
            lines[0].1.contains(
                r#""metadata":{"test_name":"board_power","test_description":"Power rails and identity","operator":{"badge":1042,"shift":"night"},"fixture_revision":3.1,"#
            ),
            "{}",
            lines[0].1
        );
    }
}
