//! The fast path of [`parse_line`](super::parse_line): one pass over a
//! plain line, into the same [`LineFields`] serde_json would have made of it.
//!
//! Nearly every line is plain: one object of known fields, strings without escapes,
//! numbers, `null`, `tags` an array of strings (what `stq gen` writes, and what
//! stations write). serde's visitor took 29% of a load's CPU time (BENCHMARKS.md,
//! "The load pipeline"), so the scanner reads such a line byte by byte instead,
//! and gives up (`None`) on anything it is not sure of: a backslash or a
//! control character in a string, an unknown or repeated field, a value of the wrong
//! type, whitespace inside `tags`, anything malformed. serde_json then reads the line
//! again and words the reason, so a line the scanner takes is a line serde_json
//! accepts with the same fields, and every refusal is serde_json's. `metadata` may be
//! any JSON value: serde_json checks it, from where it starts.
//!
//! A line whose fields are all there, in the response's order, with no whitespace
//! and no `null` but in `metadata`, already is its record's response JSON, except for
//! the quotes the response puts around a bare number. The scanner says so
//! ([`Verbatim`]), and the record is copied from the line in at most seven runs.

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Kind, LineFields, Tags, Text};

/// What the scanner made of a line it took.
pub(super) struct Scanned<'a> {
    pub(super) fields: LineFields<'a>,
    /// Set when the line is its record's response JSON but for quotes.
    pub(super) verbatim: Option<Verbatim<'a>>,
}

/// A line that is its record's response JSON once its bare numbers are quoted.
pub(super) struct Verbatim<'a> {
    /// The line from its `{` (its first byte) to its `}`.
    object: &'a str,
    /// Where the response has a `"` the line has not, in ascending order: before the
    /// first and after the last byte of each bare number.
    quotes: [usize; 6],
    quote_count: usize,
    /// Where the line has the text of `time_created`.
    time: Range<usize>,
    /// Where it has the text of `value`, for a metric.
    value: Option<Range<usize>>,
}

impl Verbatim<'_> {
    /// Appends the response JSON; returns where it has the text of `time_created` and
    /// of `value`, counted from its first byte, as the field-by-field render does.
    pub(super) fn render(&self, rendered: &mut Vec<u8>) -> (Range<usize>, Option<Range<usize>>) {
        let object = self.object.as_bytes();
        let quotes = &self.quotes[..self.quote_count];
        let mut from = 0;
        for &at in quotes {
            rendered.extend_from_slice(&object[from..at]);
            rendered.push(b'"');
            from = at;
        }
        rendered.extend_from_slice(&object[from..]);
        // A byte of the line moves right by the quotes put before it.
        let moved = |range: &Range<usize>| {
            let start = range.start + quotes.iter().filter(|&&at| at <= range.start).count();
            start..start + range.len()
        };
        (moved(&self.time), self.value.as_ref().map(moved))
    }
}

/// The known fields of units, one bit each as [`super::known_field`] numbers them.
const UNIT_FIELDS: u32 = (1 << 11) - 1;
/// The known fields of metrics.
const METRIC_FIELDS: u32 = 0x7f | (0x3f << 11);

/// Where the scanner is in the line.
struct Scanner<'a> {
    line: &'a str,
    at: usize,
    /// No whitespace so far.
    compact: bool,
}

/// Reads a plain line, or says `None` for serde_json to read it.
pub(super) fn scan(kind: Kind, line: &str) -> Option<Scanned<'_>> {
    let units = kind == Kind::Units;
    let mut scanner = Scanner {
        line,
        at: 0,
        compact: true,
    };
    let mut fields = LineFields::default();
    // The known fields seen, one bit each; a bit is greater than all bits before it
    // as long as the fields come in the response's order.
    let mut seen = 0_u32;
    let mut in_order = true;
    let mut quotes = [0; 6];
    let mut quote_count = 0;
    let mut time = 0..0;
    let mut value = None;

    scanner.whitespace();
    scanner.byte(b'{')?;
    loop {
        scanner.whitespace();
        let key = scanner.string()?;
        scanner.whitespace();
        scanner.byte(b':')?;
        scanner.whitespace();
        let (index, field) = match key {
            "station_id" => (0, Field::Text(&mut fields.station_id)),
            "slot" => (1, Field::Text(&mut fields.slot)),
            "unit_serial" => (2, Field::Text(&mut fields.unit_serial)),
            "time_created" => (3, Field::Text(&mut fields.time_created)),
            "tz" => (4, Field::Text(&mut fields.tz)),
            "mode" => (5, Field::Text(&mut fields.mode)),
            "tags" => (6, Field::Tags(&mut fields.tags)),
            "unit_type" if units => (7, Field::Text(&mut fields.unit_type)),
            "direction" if units => (8, Field::Text(&mut fields.direction)),
            "result" if units => (9, Field::Text(&mut fields.result)),
            "metadata" if units => (10, Field::Metadata(&mut fields.metadata)),
            "name" if !units => (11, Field::Text(&mut fields.name)),
            "value" if !units => (12, Field::Number(&mut fields.value)),
            "unit" if !units => (13, Field::Text(&mut fields.unit)),
            "type" if !units => (14, Field::Text(&mut fields.metric_type)),
            "limit_upper" if !units => (15, Field::Number(&mut fields.limit_upper)),
            "limit_lower" if !units => (16, Field::Number(&mut fields.limit_lower)),
            // Unknown: serde_json lists them.
            _ => return None,
        };
        let bit = 1 << index;
        if seen & bit != 0 {
            return None;
        }
        in_order &= bit > seen;
        seen |= bit;
        let start = scanner.at;
        match field {
            Field::Text(slot) => {
                *slot = scanner.nullable_string()?;
                // The response writes `null` as `""`.
                in_order &= slot.is_some();
                if index == 3 && slot.is_some() {
                    time = start + 1..scanner.at - 1;
                }
            }
            Field::Tags(slot) => {
                *slot = scanner.tags()?;
                in_order &= matches!(slot, Tags::Written(_));
            }
            Field::Metadata(slot) => *slot = scanner.metadata()?,
            Field::Number(slot) => {
                let (number, bare) = scanner.string_or_number()?;
                *slot = number;
                in_order &= slot.is_some();
                if bare {
                    // At most three numbers, two quotes each.
                    quotes[quote_count] = start;
                    quotes[quote_count + 1] = scanner.at;
                    quote_count += 2;
                }
                if index == 12 {
                    let quote = usize::from(!bare);
                    value = Some(start + quote..scanner.at - quote);
                }
            }
        }
        scanner.whitespace();
        match scanner.next()? {
            b',' => {}
            b'}' => break,
            _ => return None,
        }
    }
    let end = scanner.at;
    let compact = scanner.compact;
    scanner.whitespace();
    if scanner.at != line.len() {
        return None;
    }
    let all = if units { UNIT_FIELDS } else { METRIC_FIELDS };
    let verbatim = (compact && in_order && seen == all).then(|| Verbatim {
        object: &line[..end],
        quotes,
        quote_count,
        time,
        value,
    });
    Some(Scanned { fields, verbatim })
}

/// Where a field's value goes, and how it is read.
enum Field<'f, 'a> {
    /// A string or `null`.
    Text(&'f mut Option<Text<'a>>),
    /// An array of strings, or `null`.
    Tags(&'f mut Tags<'a>),
    /// Any JSON value.
    Metadata(&'f mut Option<&'a RawValue>),
    /// A string, a number or `null`.
    Number(&'f mut Option<Text<'a>>),
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.line.as_bytes().get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    fn byte(&mut self, wanted: u8) -> Option<()> {
        (self.next()? == wanted).then_some(())
    }

    /// Skips JSON's whitespace, the four bytes serde_json skips.
    fn whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
            self.compact = false;
        }
    }

    /// Skips a `null`; whether there was one.
    fn null(&mut self) -> bool {
        let null = self.line.as_bytes()[self.at..].starts_with(b"null");
        if null {
            self.at += 4;
        }
        null
    }

    /// A string without escapes: its text between the quotes, borrowed as
    /// serde_json borrows it.
    fn string(&mut self) -> Option<&'a str> {
        self.byte(b'"')?;
        let from = self.at;
        let bytes = &self.line.as_bytes()[from..];
        // One pass, a byte at a time, for the quote, a backslash (left to serde_json)
        // and a control character (which serde_json refuses). These strings are
        // short: memchr2 and then a check for control characters, and eight bytes at
        // a time in a `u64`, measured the same as this within the noise.
        let length = bytes
            .iter()
            .position(|&byte| byte == b'"' || byte == b'\\' || byte < 0x20)?;
        if bytes[length] != b'"' {
            return None;
        }
        self.at = from + length + 1;
        Some(&self.line[from..from + length])
    }

    fn nullable_string(&mut self) -> Option<Option<Text<'a>>> {
        if self.null() {
            return Some(None);
        }
        self.string().map(|text| Some(Text(Cow::Borrowed(text))))
    }

    /// `tags`, kept as written: an array of strings without whitespace, or `null`.
    fn tags(&mut self) -> Option<Tags<'a>> {
        if self.null() {
            return Some(Tags::Absent);
        }
        let from = self.at;
        self.byte(b'[')?;
        if self.peek() == Some(b']') {
            self.at += 1;
        } else {
            loop {
                self.string()?;
                match self.next()? {
                    b',' => {}
                    b']' => break,
                    _ => return None,
                }
            }
        }
        Some(Tags::Written(&self.line[from..self.at]))
    }

    /// `metadata`: any JSON value, checked by serde_json, as written.
    fn metadata(&mut self) -> Option<Option<&'a RawValue>> {
        if self.null() {
            return Some(None);
        }
        let rest = &self.line[self.at..];
        let mut deserializer = serde_json::Deserializer::from_str(rest);
        let raw = <&RawValue>::deserialize(&mut deserializer).ok()?;
        let text = raw.get();
        // serde_json skips whitespace before the value; there was none left.
        self.at += text.as_ptr() as usize - rest.as_ptr() as usize + text.len();
        Some(Some(raw))
    }

    /// `value` and the limits: a string, a number kept as its text (`true` after
    /// it: bare, the response quotes it), or `null`.
    fn string_or_number(&mut self) -> Option<(Option<Text<'a>>, bool)> {
        match self.peek()? {
            b'"' => Some((Some(Text(Cow::Borrowed(self.string()?))), false)),
            b'-' | b'0'..=b'9' => Some((Some(Text(Cow::Borrowed(self.number()?))), true)),
            _ if self.null() => Some((None, false)),
            _ => None,
        }
    }

    /// A JSON number: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`. What follows
    /// it is the caller's to check, as it is serde_json's.
    fn number(&mut self) -> Option<&'a str> {
        let from = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.digit()?;
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            self.digit()?;
            self.digits();
        }
        Some(&self.line[from..self.at])
    }

    fn digit(&mut self) -> Option<()> {
        self.next()?.is_ascii_digit().then_some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|byte| byte.is_ascii_digit()) {
            self.at += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::{parse_line, parse_with_serde, record, ParsedLine};
    use super::*;

    /// What a parse gave: its result, the buffer it appended to (which held
    /// `earlier` before), and the unknown fields it listed.
    type Outcome<'a> = (Result<ParsedLine<'a>, String>, String, Vec<String>);

    type Parse =
        for<'a> fn(Kind, &'a str, &mut Vec<u8>, &mut Vec<String>) -> Result<ParsedLine<'a>, String>;

    fn outcome(parse: Parse, kind: Kind, line: &str) -> Outcome<'_> {
        let mut rendered = b"earlier".to_vec();
        let mut unknown = Vec::new();
        let result = parse(kind, line, &mut rendered, &mut unknown);
        let rendered = String::from_utf8(rendered).expect("the response JSON is UTF-8");
        (result, rendered, unknown)
    }

    /// The fast path alone, rendered from the line (`verbatim`, when the scanner
    /// allows it) or field by field; `None` where it gives up.
    fn fast_outcome(kind: Kind, line: &str, verbatim: bool) -> Option<Outcome<'_>> {
        let scanned = scan(kind, line)?;
        let mut rendered = b"earlier".to_vec();
        let mut unknown = Vec::new();
        let layout = scanned.verbatim.filter(|_| verbatim);
        let result = record(kind, scanned.fields, layout, &mut rendered, &mut unknown);
        let rendered = String::from_utf8(rendered).expect("the response JSON is UTF-8");
        Some((result, rendered, unknown))
    }

    /// Asserts that `parse_line` is serde_json's reading of `line`, and that the fast
    /// path, where it takes the line, agrees with it by either render; returns
    /// whether the fast path took it and whether it copied it.
    fn assert_same(kind: Kind, line: &str) -> (bool, bool) {
        let serde = outcome(parse_with_serde, kind, line);
        assert_eq!(outcome(parse_line, kind, line), serde, "{kind:?} {line}");
        let Some(fast) = fast_outcome(kind, line, true) else {
            return (false, false);
        };
        assert_eq!(fast, serde, "fast path, {kind:?} {line}");
        let by_field = fast_outcome(kind, line, false).expect("the same scan");
        assert_eq!(by_field, serde, "fast path by field, {kind:?} {line}");
        let copied = scan(kind, line).is_some_and(|scanned| scanned.verbatim.is_some());
        (true, copied)
    }

    const UNIT: &str = r#"{"station_id":"ST-07","slot":"slot-2","unit_serial":"SN-ST-07-0000002A","time_created":"2026-10-30T08:15:00.250+01:00","tz":"Europe/Paris","mode":"production","tags":["line-1","shift-b","retest"],"unit_type":"pump-controller","direction":"output","result":"fail","metadata":{"operator":"op-3","fixture":"FX-12","retest":true,"cycle_ms":5120,"failed_test":"leak rate"}}"#;
    const METRIC: &str = r#"{"station_id":"ST-07","slot":"slot-2","unit_serial":"SN-ST-07-0000002A","time_created":"2026-10-30T08:15:00.250+01:00","tz":"Europe/Paris","mode":"production","tags":["line-1","shift-b"],"name":"supply voltage","value":3.30,"unit":"V","type":"numeric","limit_upper":3.6,"limit_lower":""}"#;

    #[test]
    fn issue_12_plain_lines_are_copied() {
        let quoted = METRIC.replace("3.30", "\"3.30\"").replace("3.6", "\"3.6\"");
        let input = UNIT
            .replace(r#""output","result":"fail""#, r#""input","result":"""#)
            .replace(r#"{"operator"#, "null,\"x\":{\"operator");
        let input = &input[..input.find(",\"x\"").unwrap()];
        for (kind, line) in [
            (Kind::Units, UNIT),
            (Kind::Units, &format!("{input}}}")),
            (Kind::Metrics, METRIC),
            (Kind::Metrics, &quoted),
            (Kind::Metrics, &format!("{METRIC} \t")),
        ] {
            assert_eq!(assert_same(kind, line), (true, true), "{line}");
            assert!(fast_outcome(kind, line, true).unwrap().0.is_ok(), "{line}");
        }
    }

    #[test]
    fn issue_12_every_line_stq_gen_writes_is_copied() {
        let directory = tempfile::tempdir().unwrap();
        stq_gen::generate(&stq_gen::GenOptions {
            out: directory.path().to_owned(),
            stations: 3,
            days: 1,
            units_per_hour: 6,
            seed: 12,
            end: "2026-11-24T00:00:00Z".parse().unwrap(),
        })
        .unwrap();
        let mut lines = 0;
        for entry in walkdir::WalkDir::new(directory.path()) {
            let entry = entry.unwrap();
            let name = entry.file_name().to_str().unwrap();
            let kind = if name.ends_with(".units.jsonl") {
                Kind::Units
            } else if name.ends_with(".metrics.jsonl") {
                Kind::Metrics
            } else {
                continue;
            };
            for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
                assert_eq!(assert_same(kind, line), (true, true), "{line}");
                lines += 1;
            }
        }
        assert!(lines > 1000, "{lines} lines");
    }

    #[test]
    fn issue_12_lines_out_of_order_spaced_or_with_nulls_are_rendered_field_by_field() {
        for (kind, line) in [
            // Whitespace between tokens.
            (Kind::Units, UNIT.replacen(',', ", ", 1)),
            (Kind::Units, format!(" {UNIT}")),
            (Kind::Metrics, METRIC.replace(':', " : ")),
            // Out of order, or a field missing.
            (Kind::Units, UNIT.replacen(r#""slot":"slot-2","#, "", 1)),
            (
                Kind::Metrics,
                METRIC.replacen("{", r#"{"limit_lower":"","#, 1).replacen(
                    r#","limit_lower":"""#,
                    "",
                    1,
                ),
            ),
            // `null` where the response has `""` or `[]`.
            (Kind::Units, UNIT.replacen(r#""slot-2""#, "null", 1)),
            (
                Kind::Units,
                UNIT.replacen(r#"["line-1","shift-b","retest"]"#, "null", 1),
            ),
            (Kind::Metrics, METRIC.replacen("3.6", "null", 1)),
        ] {
            assert_eq!(assert_same(kind, &line), (true, false), "{line}");
        }
    }

    #[test]
    fn issue_12_what_the_fast_path_leaves_to_serde_json() {
        let units = [
            // Escapes, in a key, a value, a tag.
            UNIT.replacen("ST-07", r"ST-\u0030", 1),
            UNIT.replacen(r#""tz""#, r#""t\u007a""#, 1),
            UNIT.replacen("line-1", r#"line \"1\""#, 1),
            // A control character in a string: serde_json refuses it.
            UNIT.replacen("slot-2", "slot\t2", 1),
            UNIT.replacen("line-1", "line\u{1}1", 1),
            // Unknown and repeated fields; a field of the other kind.
            UNIT.replacen('{', r#"{"extra":1,"#, 1),
            UNIT.replacen('{', r#"{"slot":"a","#, 1),
            UNIT.replacen('{', r#"{"value":1,"#, 1),
            // Wrong types.
            UNIT.replacen(r#""slot-2""#, "2", 1),
            UNIT.replacen(r#""slot-2""#, "true", 1),
            UNIT.replacen(r#"["line-1","shift-b","retest"]"#, r#"["a",1]"#, 1),
            UNIT.replacen(r#"["line-1","shift-b","retest"]"#, r#"["a",null]"#, 1),
            UNIT.replacen(r#"["line-1","shift-b","retest"]"#, r#""a""#, 1),
            // Whitespace inside `tags`.
            UNIT.replacen(r#""shift-b""#, r#" "shift-b""#, 1),
            UNIT.replacen("[", "[ ", 1),
            // Malformed: commas, braces, literals, what follows the object.
            UNIT.replacen(',', ",,", 1),
            UNIT.replacen(',', "", 1),
            UNIT.replacen(r#","tz""#, r#",}"#, 1),
            format!("{}]", &UNIT[..UNIT.len() - 1]),
            format!("{},}}", &UNIT[..UNIT.len() - 1]),
            format!("{UNIT} x"),
            format!("{UNIT}}}"),
            format!("{UNIT}\u{a0}"),
            UNIT.replacen("true", "tru", 1),
            UNIT.replacen(r#""slot-2""#, "nul", 1),
            UNIT.replacen(r#""slot-2""#, "nullx", 1),
            UNIT[..UNIT.len() - 1].to_owned(),
            UNIT.replacen(r#"{"operator"#, r#"{"operator":1,"#, 1),
            "[1]".to_owned(),
            "{}".to_owned(),
            String::new(),
            "\u{feff}{}".to_owned(),
        ];
        let metrics = [
            // Not JSON numbers.
            METRIC.replacen("3.30", "03.30", 1),
            METRIC.replacen("3.30", "3.", 1),
            METRIC.replacen("3.30", "-", 1),
            METRIC.replacen("3.30", ".5", 1),
            METRIC.replacen("3.30", "+3", 1),
            METRIC.replacen("3.30", "3e", 1),
            METRIC.replacen("3.30", "3e+", 1),
            METRIC.replacen("3.30", "3.3.0", 1),
            METRIC.replacen("3.30", "0x10", 1),
            METRIC.replacen("3.30", "NaN", 1),
            METRIC.replacen("3.30", "-Infinity", 1),
            // Neither string nor number.
            METRIC.replacen("3.30", "true", 1),
            METRIC.replacen("3.30", "[3.30]", 1),
            METRIC.replacen("3.30", "{}", 1),
            // A quoted number with an escape.
            METRIC.replacen("3.30", r#""3\u002e30""#, 1),
            // Fields of units.
            METRIC.replacen('{', r#"{"metadata":null,"#, 1),
            METRIC.replacen('{', r#"{"direction":"input","#, 1),
        ];
        for (kind, line) in units
            .iter()
            .map(|line| (Kind::Units, line))
            .chain(metrics.iter().map(|line| (Kind::Metrics, line)))
        {
            assert!(
                line != UNIT && line != METRIC,
                "a case that changes nothing: {line}"
            );
            assert!(scan(kind, line).is_none(), "{kind:?} {line}");
            assert_same(kind, line);
        }
    }

    #[test]
    fn issue_12_numbers_the_fast_path_takes_are_kept_as_written() {
        for number in ["0", "-0", "12", "-3.30", "1E+5", "1e-05", "0.5E3", "-0.0e0"] {
            let line = METRIC.replacen("3.30", number, 1);
            assert_eq!(assert_same(Kind::Metrics, &line), (true, true), "{line}");
        }
        // Numbers JSON allows however long, as written.
        let long = format!(
            "-{}.{}e-{}",
            "9".repeat(400),
            "0".repeat(400),
            "7".repeat(30)
        );
        let line = METRIC.replacen("3.30", &long, 1);
        assert_eq!(assert_same(Kind::Metrics, &line), (true, true));
    }

    #[test]
    fn issue_12_metadata_nested_deep_is_taken_as_serde_json_takes_it() {
        // The fast path reads `metadata` with a deserializer of its own, one level
        // less deep than the line's; serde_json skips a value it keeps raw without a
        // depth limit, so both take any depth.
        let start = &UNIT[..UNIT.find(r#"{"operator"#).unwrap()];
        for depth in [126, 127, 128, 10_000] {
            let metadata = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let line = format!("{start}{metadata}}}");
            assert_eq!(
                assert_same(Kind::Units, &line),
                (true, true),
                "depth {depth}"
            );
        }
    }

    #[test]
    fn issue_12_a_line_the_fast_path_reads_but_the_checks_refuse_says_why() {
        for (kind, line, reason) in [
            (
                Kind::Units,
                UNIT.replacen("output", "sideways", 1),
                "field `direction` must be",
            ),
            (
                Kind::Units,
                UNIT.replacen("ST-07", "", 1),
                "field `station_id` is empty",
            ),
            (
                Kind::Metrics,
                METRIC.replacen("supply voltage", "", 1),
                "field `name` is empty",
            ),
            (
                Kind::Metrics,
                METRIC.replacen("08:15", "08:61", 1),
                "not an RFC 3339",
            ),
            (
                Kind::Metrics,
                r#"{"station_id":"S","name":"n"}"#.to_owned(),
                "missing field `time_created`",
            ),
        ] {
            assert!(assert_same(kind, &line).0, "{line}");
            let refusal = outcome(parse_line, kind, &line);
            assert!(refusal.0.unwrap_err().contains(reason), "{line}");
            assert_eq!(refusal.1, "earlier", "nothing written");
        }
    }

    /// A JSON string as a line may write it: plain text, and in a `rough` line also
    /// escapes, a control character now and then.
    fn string(rough: bool) -> BoxedStrategy<String> {
        if !rough {
            return "\"[a-zA-Z0-9 _.:+/é€😀-]{0,12}\"".boxed();
        }
        let piece = prop_oneof![
            12 => "[a-zA-Z0-9 _.:+/é-]{1,6}",
            1 => Just(r#"\""#.to_owned()),
            1 => Just(r"\\".to_owned()),
            1 => Just(r"\n".to_owned()),
            1 => Just(r"\u00e9".to_owned()),
            1 => Just(r"\ud83d\ude00".to_owned()),
            1 => Just("\u{1}".to_owned()),
            1 => Just("\u{7f}".to_owned()),
        ];
        prop::collection::vec(piece, 0..4)
            .prop_map(|pieces| format!("\"{}\"", pieces.concat()))
            .boxed()
    }

    /// A JSON number's text, and in a `rough` line now and then one JSON does not
    /// allow.
    fn number(rough: bool) -> BoxedStrategy<String> {
        let valid = r"-?(0|[1-9][0-9]{0,3})(\.[0-9]{1,3})?([eE][+-]?[0-9]{1,3})?";
        if !rough {
            return valid.boxed();
        }
        const INVALID: [&str; 10] = [
            "01", "1.", "-", ".5", "+1", "1e", "1.e5", "--1", "1x", "-01",
        ];
        prop_oneof![
            8 => valid,
            1 => prop::sample::select(&INVALID[..]).prop_map(str::to_owned),
        ]
        .boxed()
    }

    fn time(rough: bool) -> impl Strategy<Value = String> {
        const TIMES: [&str; 7] = [
            r#""2024-01-01T00:00:00Z""#,
            r#""2026-10-30T08:15:00.250+01:00""#,
            r#""1999-12-31T23:59:59.999999999-12:00""#,
            r#""2024-01-01T00:00:00\u005a""#,
            r#""2024-02-30T00:00:00Z""#,
            r#""2024-01-01 00:00:00Z""#,
            r#""""#,
        ];
        prop::sample::select(&TIMES[..if rough { 7 } else { 3 }]).prop_map(str::to_owned)
    }

    /// Any JSON value, as `metadata` or an unknown field may hold.
    fn json(rough: bool) -> BoxedStrategy<String> {
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            Just("false".to_owned()),
            number(rough),
            string(rough),
        ];
        leaf.prop_recursive(3, 16, 4, move |inner| {
            prop_oneof![
                (
                    prop::collection::vec(inner.clone(), 0..4),
                    whitespace(rough)
                )
                    .prop_map(|(items, space)| format!("[{}]", items.join(&format!(",{space}")))),
                prop::collection::vec((string(rough), inner, whitespace(rough)), 0..4).prop_map(
                    |members| {
                        let members: Vec<String> = members
                            .into_iter()
                            .map(|(key, value, space)| format!("{key}:{space}{value}"))
                            .collect();
                        format!("{{{}}}", members.join(","))
                    }
                ),
            ]
        })
        .boxed()
    }

    /// What lies between two tokens: nothing in a plain line.
    fn whitespace(rough: bool) -> BoxedStrategy<&'static str> {
        if !rough {
            return Just("").boxed();
        }
        prop_oneof![
            8 => Just(""),
            1 => Just(" "),
            1 => Just("\t"),
            1 => Just("\r\n"),
            1 => Just("  "),
        ]
        .boxed()
    }

    /// A value for a field of the given name: what it should hold, and in a `rough`
    /// line now and then `null` or a value of another type.
    fn value(key: &'static str, rough: bool) -> BoxedStrategy<String> {
        let usual = match key {
            "time_created" => time(rough).boxed(),
            "direction" => {
                const DIRECTIONS: [&str; 3] = [r#""input""#, r#""output""#, r#""sideways""#];
                prop::sample::select(&DIRECTIONS[..if rough { 3 } else { 2 }])
                    .prop_map(str::to_owned)
                    .boxed()
            }
            "station_id" | "name" if rough => {
                prop_oneof![8 => string(rough), 1 => Just(r#""""#.to_owned())].boxed()
            }
            "station_id" | "name" => "\"[A-Z0-9-]{1,8}\"".boxed(),
            "tags" => (
                prop::collection::vec((string(rough), whitespace(rough)), 0..4),
                whitespace(rough),
            )
                .prop_map(|(tags, space)| {
                    let tags: Vec<String> = tags
                        .into_iter()
                        .map(|(tag, space)| format!("{space}{tag}"))
                        .collect();
                    format!("[{}{space}]", tags.join(","))
                })
                .boxed(),
            "metadata" => json(rough),
            "value" | "limit_upper" | "limit_lower" => prop_oneof![
                number(rough),
                number(rough).prop_map(|number| format!("\"{number}\"")),
                string(rough),
            ]
            .boxed(),
            _ => string(rough),
        };
        if !rough {
            return usual;
        }
        let wrong = prop_oneof![
            Just("true".to_owned()),
            number(rough),
            Just("[]".to_owned()),
            Just("{}".to_owned()),
        ];
        prop_oneof![30 => usual, 1 => Just("null".to_owned()), 1 => wrong].boxed()
    }

    /// The known fields of `kind`, in the response's order.
    fn known(kind: Kind) -> Vec<&'static str> {
        let mut fields = vec![
            "station_id",
            "slot",
            "unit_serial",
            "time_created",
            "tz",
            "mode",
            "tags",
        ];
        fields.extend(match kind {
            Kind::Units => &["unit_type", "direction", "result", "metadata"][..],
            Kind::Metrics => &[
                "name",
                "value",
                "unit",
                "type",
                "limit_upper",
                "limit_lower",
            ][..],
        });
        fields
    }

    /// A snapshot line: the known fields in the response's order or shuffled. A
    /// plain line has each of them, of the right type, as `stq gen` writes them; a
    /// `rough` one may lack some, and have unknown or repeated fields, escapes,
    /// whitespace, `null` and values of the wrong type.
    fn line() -> impl Strategy<Value = (Kind, String)> {
        let kind = prop_oneof![Just(Kind::Units), Just(Kind::Metrics)];
        (kind, any::<bool>()).prop_flat_map(|(kind, rough)| {
            let known = known(kind);
            let members: Vec<_> = known
                .iter()
                .copied()
                .chain(["extra", "name", "metadata", "station_id", "tags", "value"])
                .enumerate()
                .map(|(index, key)| {
                    let member = (
                        Just(key),
                        value(key, rough),
                        whitespace(rough),
                        whitespace(rough),
                    );
                    match (index < known.len(), rough) {
                        (true, false) => member.prop_map(Some).boxed(),
                        (false, false) => Just(None).boxed(),
                        (true, true) => prop::option::weighted(0.95, member).boxed(),
                        (false, true) => prop::option::weighted(0.03, member).boxed(),
                    }
                })
                .collect();
            let edges = (whitespace(rough), whitespace(rough));
            (Just(kind), members, any::<bool>(), edges).prop_flat_map(
                |(kind, members, shuffled, (before, after))| {
                    let members: Vec<_> = members.into_iter().flatten().collect();
                    let order = Just(members);
                    let order = if shuffled {
                        order.prop_shuffle().boxed()
                    } else {
                        order.boxed()
                    };
                    order.prop_map(move |members| {
                        let members: Vec<String> = members
                            .into_iter()
                            .map(|(key, value, left, right)| {
                                format!("{left}\"{key}\"{right}:{left}{value}{right}")
                            })
                            .collect();
                        (kind, format!("{before}{{{}}}{after}", members.join(",")))
                    })
                },
            )
        })
    }

    /// An edit that most often breaks a line: a character deleted, or one inserted.
    #[derive(Debug, Clone)]
    enum Edit {
        Delete(prop::sample::Index),
        Insert(prop::sample::Index, char),
    }

    fn edit() -> impl Strategy<Value = Edit> {
        let inserted = prop::sample::select(vec![
            '"', '\\', ',', ':', '{', '}', '[', ']', ' ', '0', '1', '-', '.', 'e', 'n', 'x',
            '\u{1}', 'é',
        ]);
        prop_oneof![
            any::<prop::sample::Index>().prop_map(Edit::Delete),
            (any::<prop::sample::Index>(), inserted).prop_map(|(at, byte)| Edit::Insert(at, byte)),
        ]
    }

    fn apply(line: &str, edit: &Edit) -> String {
        let mut characters: Vec<char> = line.chars().collect();
        match edit {
            Edit::Delete(at) if !characters.is_empty() => {
                characters.remove(at.index(characters.len()));
            }
            Edit::Delete(_) => {}
            Edit::Insert(at, character) => {
                characters.insert(at.index(characters.len() + 1), *character);
            }
        }
        characters.into_iter().collect()
    }

    proptest! {
        // A second or two; `PROPTEST_CASES=100000` soaks it.
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|cases| cases.parse().ok()).unwrap_or(1024)
        ))]

        #[test]
        fn issue_12_the_fast_path_agrees_with_serde_json(
            (kind, line) in line(),
            edits in prop::collection::vec(edit(), 0..3),
            edited in prop::bool::weighted(0.3),
        ) {
            assert_same(kind, &line);
            if edited {
                let broken = edits.iter().fold(line, |line, edit| apply(&line, edit));
                assert_same(kind, &broken);
            }
        }
    }
}
