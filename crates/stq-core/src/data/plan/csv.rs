//! CSV answers (docs/api.md section 7): RFC 4180 text, a header row of the field
//! names and then a row per element of `data`, written from the same JSON the
//! envelope copies.
//!
//! A record's JSON is stored as five parts (`data::stored`): three pieces its
//! station shares with its other records, and its own time and value texts. Each
//! piece is transcribed to CSV once per answer, and a record's row is copied
//! from its pieces' transcriptions and its own texts, as its JSON is copied into
//! the envelope; nothing parses an answer's JSON as a whole. A summary's rows
//! are few and each is transcribed whole.
//!
//! Transcribing a JSON object (or a piece of one) to CSV fields: a string is its
//! text, unescaped; a number is its JSON text; `null` is an empty field; an
//! object or array is its compact JSON text, and so is `metadata` whatever it
//! holds. A field is quoted (inner quotes
//! doubled) when it holds `,`, `"`, CR or LF, and only then. Rows end with CRLF.

use std::ops::Range;

use super::Page;
use crate::data::stored::Parts;
use crate::data::summary::Rows;
use crate::domain::query::{Endpoint, QueryParams};
use crate::domain::record::Kind;

/// Rows end with CRLF (RFC 4180).
const ROW_END: &[u8] = b"\r\n";

/// The one field written as JSON text whatever its value (docs/api.md section 7).
const METADATA_KEY: &[u8] = b"metadata";

/// The fields of a summary row after its group fields, `name` and
/// `bucket_start` (docs/api.md section 10).
const UNIT_SUMMARY_FIELDS: &[&str] = &[
    "records",
    "results",
    "units",
    "first_pass",
    "second_pass",
    "final_pass",
    "retested",
    "first_pass_yield",
    "second_pass_yield",
    "final_yield",
    "retest_rate",
    "cycle_count",
    "cycle_mean_s",
    "cycle_p50_s",
    "cycle_p90_s",
    "cycle_max_s",
];
const METRIC_SUMMARY_FIELDS: &[&str] = &[
    "count",
    "numeric",
    "min",
    "max",
    "mean",
    "stddev",
    "limit_lower",
    "limit_upper",
    "out_of_limits",
    "failing_units",
    "cp",
    "cpk",
];
const STATION_FIELDS: &[&str] = &["station_id", "units", "metrics", "first", "last"];
const CONTROL_FIELDS: &[&str] = &[
    "points",
    "baseline_points",
    "center",
    "sigma",
    "ucl",
    "lcl",
    "mr_mean",
    "mr_ucl",
    "cpk",
    "ppk",
    "limit_lower",
    "limit_upper",
    "violations_count",
    "violations",
];

/// The header row's names of an answer of `endpoint` to `params` (see
/// [`super::Answer::csv_columns`]).
pub(super) fn columns(endpoint: Endpoint, params: &QueryParams) -> Vec<&'static str> {
    let group = || {
        let mut names: Vec<&'static str> = params.group_names().collect();
        if matches!(
            endpoint,
            Endpoint::MetricsSummary | Endpoint::MetricsControl
        ) {
            names.push("name");
        }
        if params.has_bucket() {
            names.push("bucket_start");
        }
        names
    };
    match endpoint {
        Endpoint::Units => Kind::Units.fields().to_vec(),
        Endpoint::Metrics => Kind::Metrics.fields().to_vec(),
        Endpoint::UnitsSummary => [group(), UNIT_SUMMARY_FIELDS.to_vec()].concat(),
        Endpoint::MetricsSummary => [group(), METRIC_SUMMARY_FIELDS.to_vec()].concat(),
        Endpoint::Stations => STATION_FIELDS.to_vec(),
        Endpoint::MetricsControl => [group(), CONTROL_FIELDS.to_vec()].concat(),
    }
}

/// The CSV of a page of records.
pub(super) fn records(columns: &[&str], page: &Page) -> Vec<u8> {
    // A row is shorter than the record's JSON, which names every field.
    let mut body = Vec::with_capacity(page.json_bytes() + 256);
    write_header(&mut body, columns);
    let mut pieces = PieceRows::default();
    page.each_record(|_, parts| {
        pieces.write_row(&mut body, parts);
    });
    body
}

/// The CSV of a summary's or `/stations`' rows.
pub(super) fn rows(columns: &[&str], rows: &Rows) -> Vec<u8> {
    let bytes: usize = rows.rows().map(<[u8]>::len).sum();
    let mut body = Vec::with_capacity(bytes + 256);
    write_header(&mut body, columns);
    for row in rows.rows() {
        transcribe(row, &mut body);
        body.extend_from_slice(ROW_END);
    }
    body
}

fn write_header(body: &mut Vec<u8>, columns: &[&str]) {
    for (index, column) in columns.iter().enumerate() {
        if index > 0 {
            body.push(b',');
        }
        body.extend_from_slice(column.as_bytes());
    }
    body.extend_from_slice(ROW_END);
}

/// Records' rows, with each shared piece transcribed once.
///
/// A hot record's piece is known by where it lies: the pieces of a station are
/// held once for the answer's whole life, so equal places are equal pieces. A
/// sealed record's JSON comes whole, written out by its scan; it is cut into the
/// same five parts, and its pieces are known by their text.
#[derive(Default)]
struct PieceRows<'a> {
    /// Transcriptions, one after the other.
    transcribed: Vec<u8>,
    /// Where a hot piece's transcription lies in `transcribed`, by the piece's
    /// address and length.
    by_place: foldhash::HashMap<(usize, usize), Range<usize>>,
    /// Where a sealed record's piece's transcription lies, by its text.
    by_text: foldhash::HashMap<&'a [u8], Range<usize>>,
}

impl<'a> PieceRows<'a> {
    /// Writes a record's row: its head piece (the fields before `time_created` and
    /// that field's date), its own time of day, its middle piece, its own value
    /// (metrics), its tail piece.
    fn write_row(&mut self, body: &mut Vec<u8>, parts: Parts<'a>) {
        if parts.shares_pieces() {
            self.write_parts(body, parts.all(), true);
        } else {
            self.write_whole(body, parts.all()[0]);
        }
    }

    /// Writes the row of a sealed record, whose JSON its scan wrote out whole.
    fn write_whole(&mut self, body: &mut Vec<u8>, json: &'a [u8]) {
        match cut(json) {
            Some(parts) => self.write_parts(body, parts, false),
            // Not a record's JSON as `domain::record` renders it.
            None => {
                transcribe(json, body);
                body.extend_from_slice(ROW_END);
            }
        }
    }

    /// Writes a row from a record's five parts; `shared`: its pieces are its
    /// station's, known by their place.
    fn write_parts(
        &mut self,
        body: &mut Vec<u8>,
        [head, time, middle, value, tail]: [&'a [u8]; 5],
        shared: bool,
    ) {
        self.write_piece(body, head, shared);
        // A time text is RFC 3339 (docs/api.md section 4): nothing to quote.
        body.extend_from_slice(time);
        self.write_piece(body, middle, shared);
        write_json_text(body, value);
        self.write_piece(body, tail, shared);
        body.extend_from_slice(ROW_END);
    }

    /// Writes a piece's transcription, made the first time the piece is met.
    fn write_piece(&mut self, body: &mut Vec<u8>, piece: &'a [u8], shared: bool) {
        let transcribed = &mut self.transcribed;
        let transcribe_once = || {
            let start = transcribed.len();
            transcribe(piece, transcribed);
            start..transcribed.len()
        };
        let range = if shared {
            self.by_place
                .entry((piece.as_ptr() as usize, piece.len()))
                .or_insert_with(transcribe_once)
        } else {
            self.by_text.entry(piece).or_insert_with(transcribe_once)
        };
        body.extend_from_slice(&self.transcribed[range.clone()]);
    }
}

/// A record's whole JSON cut where `data::stored` cuts it: the head
/// (up to the date of `time_created`), the time of day, the middle (up to just
/// inside the string of `value`), the value's text and the tail. Inside a JSON
/// string every quote is escaped, so the first `"time_created":"` and, after
/// it, `,"value":"` are the keys themselves.
fn cut(json: &[u8]) -> Option<[&[u8]; 5]> {
    const TIME_KEY: &[u8] = br#""time_created":""#;
    const VALUE_KEY: &[u8] = br#","value":""#;
    /// `YYYY-MM-DDT`, which goes with the head.
    const DATE_BYTES: usize = 11;
    let time_start = memchr::memmem::find(json, TIME_KEY)? + TIME_KEY.len();
    let time_end = time_start + memchr::memchr(b'"', &json[time_start..])?;
    let own_time = match time_end - time_start > DATE_BYTES {
        true => time_start + DATE_BYTES,
        false => time_start,
    };
    let value = match memchr::memmem::find(&json[time_end..], VALUE_KEY) {
        Some(at) => {
            let start = time_end + at + VALUE_KEY.len();
            start..string_end(json, start)
        }
        // A unit: no value, the middle runs to the end.
        None => json.len()..json.len(),
    };
    Some([
        &json[..own_time],
        &json[own_time..time_end],
        &json[time_end..value.start],
        &json[value.clone()],
        &json[value.end..],
    ])
}

/// Writes the CSV fields of a JSON object, or of a piece of a record's JSON, to
/// `out`: values comma-separated, keys left out, no row end.
///
/// A piece of a record's JSON begins with the object's `{` (a head) or with the
/// closing quote of `time_created` or of `value` (a middle or a tail), and ends
/// inside the string of `time_created` (a head, whose text so far is a date) or
/// just inside that of `value` (a metric's middle): the record's own texts lie
/// between, and their writer writes them.
fn transcribe(json: &[u8], out: &mut Vec<u8>) {
    let mut at = match json.first() {
        // The object's start, or the closing quote of a string a piece before
        // this one opened.
        Some(b'{' | b'"') => 1,
        _ => 0,
    };
    while at < json.len() {
        match json[at] {
            b',' => {
                out.push(b',');
                at += 1;
            }
            b'"' => {
                // A key: a field name of the contract, without escapes.
                let Some(end) = memchr::memchr(b'"', &json[at + 1..]) else {
                    return;
                };
                let key = &json[at + 1..at + 1 + end];
                at = skip_space(json, at + 1 + end + 1);
                if json.get(at) == Some(&b':') {
                    at = skip_space(json, at + 1);
                }
                at = match key == METADATA_KEY && json.get(at) == Some(&b'"') {
                    true => write_json_string(json, at, out),
                    false => write_value(json, at, out),
                };
            }
            // The object's end, or space between its tokens.
            _ => at += 1,
        }
    }
}

/// Writes the JSON string at `at` as its JSON text, quotes and escapes as
/// written, and returns where it ends: a string `metadata` must read apart from
/// a number (`"42"` against `42`), as an object's strings do.
fn write_json_string(json: &[u8], at: usize, out: &mut Vec<u8>) -> usize {
    let end = (string_end(json, at + 1) + 1).min(json.len());
    write_field(out, &json[at..end]);
    end
}

/// Where the space between JSON tokens from `at` ends.
fn skip_space(json: &[u8], mut at: usize) -> usize {
    while json.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

/// Writes the CSV field of the JSON value at `at`, and returns where it ends. A
/// string the text ends in is written as far as it goes.
fn write_value(json: &[u8], at: usize, out: &mut Vec<u8>) -> usize {
    let Some(&first) = json.get(at) else {
        return at;
    };
    match first {
        b'"' => {
            let end = string_end(json, at + 1);
            write_json_text(out, &json[at + 1..end]);
            end + 1
        }
        b'{' | b'[' => {
            let end = compound_end(json, at);
            let mut compact = Vec::with_capacity(end - at);
            compact_json(&json[at..end], &mut compact);
            write_field(out, &compact);
            end
        }
        _ => {
            let end = json[at..]
                .iter()
                .position(|&byte| matches!(byte, b',' | b'}' | b']') || byte.is_ascii_whitespace())
                .map_or(json.len(), |length| at + length);
            let scalar = &json[at..end];
            // `null` is an empty field; numbers, `true` and `false` as written.
            if scalar != b"null" {
                out.extend_from_slice(scalar);
            }
            end
        }
    }
}

/// Where the string whose text starts at `from` ends: its closing quote, or the
/// end of `json`.
fn string_end(json: &[u8], mut from: usize) -> usize {
    loop {
        match memchr::memchr2(b'"', b'\\', &json[from..]) {
            Some(offset) if json[from + offset] == b'\\' => from += offset + 2,
            Some(offset) => return from + offset,
            None => return json.len(),
        }
        if from >= json.len() {
            return json.len();
        }
    }
}

/// Where the object or array at `start` ends: just after its closing bracket, or
/// the end of `json`.
fn compound_end(json: &[u8], start: usize) -> usize {
    let mut depth = 0usize;
    let mut at = start;
    while at < json.len() {
        match json[at] {
            b'"' => at = string_end(json, at + 1),
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return at + 1;
                }
            }
            _ => {}
        }
        at += 1;
    }
    json.len()
}

/// Copies JSON text without the space between its tokens (a snapshot's
/// `metadata` and `tags` are kept as written); strings stay as they are.
fn compact_json(json: &[u8], out: &mut Vec<u8>) {
    let mut at = 0;
    while at < json.len() {
        match json[at] {
            b'"' => {
                let end = string_end(json, at + 1).min(json.len() - 1);
                out.extend_from_slice(&json[at..=end]);
                at = end + 1;
            }
            byte if byte.is_ascii_whitespace() => at += 1,
            byte => {
                out.push(byte);
                at += 1;
            }
        }
    }
}

/// Writes the text of a JSON string, given as it stands between its quotes, as
/// a field.
fn write_json_text(out: &mut Vec<u8>, escaped: &[u8]) {
    if memchr::memchr(b'\\', escaped).is_none() {
        // Unescaped, a JSON string holds no quote, CR or LF.
        write_field(out, escaped);
        return;
    }
    let mut quoted = Vec::with_capacity(escaped.len() + 2);
    quoted.push(b'"');
    quoted.extend_from_slice(escaped);
    quoted.push(b'"');
    match serde_json::from_slice::<String>(&quoted) {
        Ok(text) => write_field(out, text.as_bytes()),
        // Only a string that a piece boundary cut could fail; its text is kept
        // as it stands.
        Err(_) => write_field(out, escaped),
    }
}

/// Writes a field: quoted, inner quotes doubled, when it holds `,`, `"`, CR or
/// LF; as it is otherwise.
fn write_field(out: &mut Vec<u8>, field: &[u8]) {
    let needs_quotes = field
        .iter()
        .any(|&byte| matches!(byte, b',' | b'"' | b'\r' | b'\n'));
    if !needs_quotes {
        out.extend_from_slice(field);
        return;
    }
    out.push(b'"');
    for &byte in field {
        if byte == b'"' {
            out.push(b'"');
        }
        out.push(byte);
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::record::parse_line;

    /// A JSON object's fields, transcribed as a whole.
    fn whole_row(json: &[u8]) -> String {
        let mut out = Vec::new();
        transcribe(json, &mut out);
        String::from_utf8(out).unwrap()
    }

    /// A record's row from its JSON whole, as a sealed record's is written: cut
    /// into its parts, each piece known by its text.
    fn sealed_row(json: &[u8]) -> String {
        let mut out = Vec::new();
        let mut rows = PieceRows::default();
        // Twice: the second time from the transcriptions the first one made.
        for _ in 0..2 {
            out.clear();
            rows.write_whole(&mut out, json);
        }
        String::from_utf8(out).unwrap()
    }

    /// A record's row from its five parts, as a hot record's is written, and
    /// the record's JSON.
    fn row_from_parts(kind: Kind, line: &str) -> (String, Vec<u8>) {
        let mut json = Vec::new();
        let parsed = parse_line(kind, line, &mut json, &mut Vec::new()).unwrap();
        let own_time = parsed.time.start + 11..parsed.time.end;
        let mut out = Vec::new();
        let mut rows = PieceRows::default();
        rows.write_piece(&mut out, &json[..own_time.start], true);
        out.extend_from_slice(&json[own_time.clone()]);
        rows.write_piece(&mut out, &json[own_time.end..parsed.value.start], true);
        write_json_text(&mut out, &json[parsed.value.clone()]);
        rows.write_piece(&mut out, &json[parsed.value.end..], true);
        (String::from_utf8(out).unwrap(), json)
    }

    #[test]
    fn issue_34_fields_are_quoted_only_when_they_must_be() {
        let field = |text: &str| {
            let mut out = Vec::new();
            write_field(&mut out, text.as_bytes());
            String::from_utf8(out).unwrap()
        };
        assert_eq!(field("plain text; tab\there"), "plain text; tab\there");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("two\r\nlines"), "\"two\r\nlines\"");
        assert_eq!(field("lf\n"), "\"lf\n\"");
        assert_eq!(field(""), "");
    }

    #[test]
    fn issue_34_a_record_reads_the_same_from_its_parts_and_whole() {
        let units = [
            r#"{"station_id":"ST-1","time_created":"2024-01-01T00:00:00Z","direction":"input"}"#,
            r#"{"direction":"output","metadata":{ "a" : [1.50, "\u00e9 \" ,"] },"tags":["x\"y", "\u00e9"],"station_id":"S\\1,2","slot":"A\nB","unit_serial":"SN","time_created":"2024-01-01T00:00:00.5+01:00","tz":"Europe/Paris","mode":"m","unit_type":"board","result":"pass"}"#,
        ];
        let metrics = [
            r#"{"station_id":"S","time_created":"2024-01-01T00:00:00Z","name":"v"}"#,
            r#"{"limit_lower":-1.5e3,"station_id":"S","time_created":"2024-01-01T00:00:00Z","name":"n\tx","value":"a \"b\", c","unit":"V","type":"t","limit_upper":"","tags":["l"]}"#,
            r#"{"station_id":"S","time_created":"2024-01-01T00:00:00Z","name":"v","value":3.30,"unit":"\r"}"#,
        ];
        let expected = [
            "ST-1,,,2024-01-01T00:00:00Z,,,[],,input,,",
            "\"S\\1,2\",\"A\nB\",SN,2024-01-01T00:00:00.5+01:00,Europe/Paris,m,\"[\"\"x\\\"\"y\"\",\"\"é\"\"]\",board,output,pass,\"{\"\"a\"\":[1.50,\"\"\\u00e9 \\\"\" ,\"\"]}\"",
            "S,,,2024-01-01T00:00:00Z,,,[],v,,,,,",
            "S,,,2024-01-01T00:00:00Z,,,\"[\"\"l\"\"]\",n\tx,\"a \"\"b\"\", c\",V,t,,-1.5e3",
            "S,,,2024-01-01T00:00:00Z,,,[],v,3.30,\"\r\",,,",
        ];
        let lines = units
            .iter()
            .map(|line| (Kind::Units, line))
            .chain(metrics.iter().map(|line| (Kind::Metrics, line)));
        for ((kind, line), expected) in lines.zip(expected) {
            let (from_parts, json) = row_from_parts(kind, line);
            assert_eq!(from_parts, expected, "{line}");
            assert_eq!(whole_row(&json), expected, "{line}");
            assert_eq!(sealed_row(&json), format!("{expected}\r\n"), "{line}");
            // The header names every field of the JSON, in its order.
            let fields = kind.fields();
            let text = String::from_utf8_lossy(&json);
            let places: Vec<Option<usize>> = fields
                .iter()
                .map(|name| text.find(&format!("\"{name}\":")))
                .collect();
            assert!(places.iter().all(Option::is_some), "{line}: {places:?}");
            assert!(places.is_sorted(), "{line}: {places:?}");
            let keys = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&json)
                .unwrap()
                .len();
            assert_eq!(keys, fields.len(), "{line}");
        }
    }

    #[test]
    fn issue_51_a_string_metadata_is_written_as_json_text() {
        let unit = |metadata: &str| {
            format!(
                r#"{{"station_id":"S","time_created":"2024-01-01T00:00:00Z","direction":"output","metadata":{metadata}}}"#
            )
        };
        let cases = [
            (r#""42""#, r#""""42""""#),
            ("42", "42"),
            (r#""plain string""#, r#""""plain string""""#),
            (r#""a,\"b\"\u00e9""#, r#""""a,\""b\""\u00e9""""#),
            ("null", ""),
            (r#"{ "k" : "v" }"#, r#""{""k"":""v""}""#),
        ];
        for (metadata, field) in cases {
            let line = unit(metadata);
            let expected = format!("S,,,2024-01-01T00:00:00Z,,,[],,output,,{field}");
            let (from_parts, json) = row_from_parts(Kind::Units, &line);
            assert_eq!(from_parts, expected, "{line}");
            assert_eq!(whole_row(&json), expected, "{line}");
            assert_eq!(sealed_row(&json), format!("{expected}\r\n"), "{line}");
        }
    }

    #[test]
    fn issue_34_summary_rows_write_numbers_as_written_and_null_as_nothing() {
        let row = br#"{"station_id":"ST-1","bucket_start":"2024-01-01T00:00:00+01:00","records":3,"results":{"fail":1,"pass":2},"first_pass_yield":0.6666666666666666,"cycle_mean_s":null,"cp":1e-7}"#;
        assert_eq!(
            whole_row(row),
            "ST-1,2024-01-01T00:00:00+01:00,3,\"{\"\"fail\"\":1,\"\"pass\"\":2}\",0.6666666666666666,,1e-7"
        );
    }
}
