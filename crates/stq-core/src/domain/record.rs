//! Records: the two record kinds, how a snapshot line becomes a record,
//! and the record's response JSON, rendered once, here, at load time.
//!
//! A snapshot line has exactly the shape the API returns (docs/api.md section 2), so
//! parsing a line and rendering its response bytes are one step: the rendered bytes
//! are what every later response copies, and nothing serializes a record again.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::domain::time::{parse_rfc3339, Timestamp};

use self::fast::Verbatim;

mod fast;

/// Which endpoint, snapshot file suffix and record shape we are dealing with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Unit records: `/units`, `*.units.jsonl`.
    Units,
    /// Metric records: `/metrics`, `*.metrics.jsonl`.
    Metrics,
}

/// The record noun of the envelope's `message`: `unit`, `metric`.
impl fmt::Display for Kind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Kind::Units => "unit",
            Kind::Metrics => "metric",
        })
    }
}

impl Kind {
    /// The path of the endpoint that returns records of this kind (the endpoint
    /// table, `domain::query`, takes it from here).
    pub(crate) const fn path(self) -> &'static str {
        match self {
            Kind::Units => "/units",
            Kind::Metrics => "/metrics",
        }
    }

    /// The fields of a record's response JSON, in the order it holds them (SPEC.md
    /// 2.2, 2.3): those both kinds have, then the kind's own. A CSV answer's header
    /// row and the parser's checks read them here.
    pub(crate) fn fields(self) -> &'static [&'static str] {
        match self {
            Kind::Units => &UNIT_FIELDS,
            Kind::Metrics => &METRIC_FIELDS,
        }
    }
}

/// See [`Kind::fields`].
const UNIT_FIELDS: [&str; 11] = [
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
const METRIC_FIELDS: [&str; 13] = [
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

/// The direction of a unit record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Direction {
    /// The record a unit's processing starts with (`input`).
    Input,
    /// The record a unit's processing ends with, its result in it (`output`).
    Output,
}

impl Direction {
    /// The direction spelled `text` (lower case only), if any.
    pub(crate) fn parse(text: &str) -> Option<Direction> {
        match text {
            "input" => Some(Direction::Input),
            "output" => Some(Direction::Output),
            _ => None,
        }
    }

    /// Its spelling in records and queries.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Direction::Input => "input",
            Direction::Output => "output",
        }
    }
}

/// A set of directions: which unit records a `/units` query keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub(crate) struct Directions {
    input: bool,
    output: bool,
}

impl Directions {
    /// No direction at all: matches no record.
    pub(crate) const NONE: Directions = Directions {
        input: false,
        output: false,
    };
    /// What a query that names no direction keeps (docs/api.md section 4).
    pub(crate) const OUTPUT: Directions = Directions {
        input: false,
        output: true,
    };
    /// Both directions: every unit record.
    pub(crate) const BOTH: Directions = Directions {
        input: true,
        output: true,
    };

    /// The set of exactly `directions`.
    #[cfg(test)]
    pub(crate) fn of(directions: &[Direction]) -> Directions {
        let mut set = Directions::NONE;
        for &direction in directions {
            set.insert(direction);
        }
        set
    }

    pub(crate) fn insert(&mut self, direction: Direction) {
        match direction {
            Direction::Input => self.input = true,
            Direction::Output => self.output = true,
        }
    }

    pub(crate) fn contains(self, direction: Direction) -> bool {
        match direction {
            Direction::Input => self.input,
            Direction::Output => self.output,
        }
    }

    /// Whether it holds no direction, and so matches no record.
    pub(crate) fn is_empty(self) -> bool {
        self == Directions::NONE
    }
}

/// What the index keeps of a record besides its JSON: the fields the filters
/// (docs/api.md section 4) and the summaries (section 10) read, as returned (an
/// absent field is `""`), borrowed from the line where possible.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum IndexedFields<'a> {
    /// A unit record's fields.
    Unit {
        /// The type of unit tested.
        unit_type: Cow<'a, str>,
        /// The serial number of the unit tested.
        unit_serial: Cow<'a, str>,
        /// Whether the record starts or ends the unit's processing.
        direction: Direction,
        /// The fixture slot that held the unit.
        slot: Cow<'a, str>,
        /// The test mode.
        mode: Cow<'a, str>,
        /// The processing's result, as written (`""` on an input record).
        result: Cow<'a, str>,
    },
    /// A metric record's fields.
    Metric {
        /// The metric's name.
        name: Cow<'a, str>,
        /// The fixture slot that held the unit.
        slot: Cow<'a, str>,
        /// The serial number of the unit tested.
        unit_serial: Cow<'a, str>,
        /// The metric's unit of measure.
        unit: Cow<'a, str>,
        /// The measured value, as the text the line holds.
        value: Cow<'a, str>,
        /// The lowest passing value, as written.
        limit_lower: Cow<'a, str>,
        /// The highest passing value, as written.
        limit_upper: Cow<'a, str>,
    },
}

/// The number a returned string field stands for, when it is a finite decimal
/// number (docs/api.md section 10.2): JSON number syntax, also with a leading `+`,
/// whose value is finite in double precision. Anything else is not numeric. Public
/// for `stq export`, whose numeric columns must read values as the summaries do.
pub fn numeric(text: &str) -> Option<f64> {
    let bytes = text.as_bytes();
    let digits_from = |at: usize| {
        bytes[at.min(bytes.len())..]
            .iter()
            .take_while(|byte| byte.is_ascii_digit())
            .count()
    };
    let mut at = usize::from(matches!(bytes.first(), Some(b'+' | b'-')));
    let whole = digits_from(at);
    // `-?(0|[1-9][0-9]*)`: no empty whole part, no leading zero.
    if whole == 0 || (whole > 1 && bytes[at] == b'0') {
        return None;
    }
    at += whole;
    if bytes.get(at) == Some(&b'.') {
        let fraction = digits_from(at + 1);
        if fraction == 0 {
            return None;
        }
        at += 1 + fraction;
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(bytes.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        let exponent = digits_from(at);
        if exponent == 0 {
            return None;
        }
        at += exponent;
    }
    if at != bytes.len() {
        return None;
    }
    // Rust's float grammar accepts everything JSON's does, and the leading `+`.
    let value: f64 = text.parse().ok()?;
    value.is_finite().then_some(value)
}

/// A valid line: what the index needs. Its response JSON went to the caller's buffer.
#[derive(Debug, PartialEq, Eq)]
pub struct ParsedLine<'a> {
    /// Its station's id.
    pub station_id: Cow<'a, str>,
    /// The instant `time_created` names.
    pub instant: Timestamp,
    /// The fields filters and summaries read.
    pub(crate) fields: IndexedFields<'a>,
    /// Where the response JSON has the text of `time_created`, inside its quotes,
    /// counted from the JSON's first byte.
    pub time: Range<usize>,
    /// Where it has the text of `value`, inside its quotes; for a unit, the empty
    /// range at the JSON's end. With `time`, this is what sets a record apart from
    /// the records of its unit and metric name: the index stores the rest once.
    pub value: Range<usize>,
}

/// Parses one snapshot line of `kind` and appends the record's response JSON to
/// `rendered`; on error `rendered` is left as it was and the reason is returned.
/// `unknown` receives the names of fields the record shape does not have.
///
/// Two parsers read a line into the same [`LineFields`]: the [`fast`] scanner, which
/// takes only the plain lines that are the rule and gives up on anything else, and
/// serde_json, which reads every line and words every reason. Both then go through
/// [`record`], so the checks and the response JSON are the same whichever read it.
pub fn parse_line<'a>(
    kind: Kind,
    line: &'a str,
    rendered: &mut Vec<u8>,
    unknown: &mut Vec<String>,
) -> Result<ParsedLine<'a>, String> {
    match fast::scan(kind, line) {
        Some(scanned) => record(kind, scanned.fields, scanned.verbatim, rendered, unknown),
        None => parse_with_serde(kind, line, rendered, unknown),
    }
}

/// [`parse_line`] by serde_json alone: any line, and the reason of every bad one.
fn parse_with_serde<'a>(
    kind: Kind,
    line: &'a str,
    rendered: &mut Vec<u8>,
    unknown: &mut Vec<String>,
) -> Result<ParsedLine<'a>, String> {
    let mut deserializer = serde_json::Deserializer::from_str(line);
    let fields = LineSeed { kind }
        .deserialize(&mut deserializer)
        .and_then(|fields| deserializer.end().map(|()| fields))
        .map_err(describe_json_error)?;
    record(kind, fields, None, rendered, unknown)
}

/// A line's fields checked and rendered: the record's response JSON appended to
/// `rendered` (copied from the line when `verbatim` says the line already is that
/// JSON), its unknown fields to `unknown`.
fn record<'a>(
    kind: Kind,
    mut fields: LineFields<'a>,
    verbatim: Option<Verbatim<'a>>,
    rendered: &mut Vec<u8>,
    unknown: &mut Vec<String>,
) -> Result<ParsedLine<'a>, String> {
    let station_id = match fields.station_id.take() {
        Some(Text(station)) if !station.is_empty() => station,
        Some(_) => return Err("field `station_id` is empty".to_owned()),
        None => return Err("missing field `station_id`".to_owned()),
    };
    let time_text = fields
        .time_created
        .take()
        .ok_or_else(|| "missing field `time_created`".to_owned())?;
    let instant = parse_rfc3339(&time_text.0).ok_or_else(|| {
        format!(
            "field `time_created` is not an RFC 3339 date-time: {}",
            quoted(&time_text.0)
        )
    })?;

    // What can still make the line invalid is checked before anything is written.
    let shape = match kind {
        Kind::Units => match &fields.direction {
            Some(Text(value)) => Shape::Unit(Direction::parse(value).ok_or_else(|| {
                format!(
                    "field `direction` must be \"input\" or \"output\", not {}",
                    quoted(value)
                )
            })?),
            None => return Err("missing field `direction`".to_owned()),
        },
        Kind::Metrics => match &fields.name {
            Some(Text(name)) if !name.is_empty() => Shape::Metric(name.clone()),
            Some(_) => return Err("field `name` is empty".to_owned()),
            None => return Err("missing field `name`".to_owned()),
        },
    };

    let start = rendered.len();
    let (time, value) = match verbatim {
        Some(verbatim) => verbatim.render(rendered),
        None => render(&fields, &station_id, &time_text.0, &shape, rendered),
    };
    let end = rendered.len() - start;
    let owned = |field: Option<Text<'a>>| field.map_or(Cow::Borrowed(""), |text| text.0);
    let indexed = match shape {
        Shape::Unit(direction) => IndexedFields::Unit {
            unit_type: owned(fields.unit_type),
            unit_serial: owned(fields.unit_serial),
            direction,
            slot: owned(fields.slot),
            mode: owned(fields.mode),
            result: owned(fields.result),
        },
        Shape::Metric(name) => IndexedFields::Metric {
            name,
            slot: owned(fields.slot),
            unit_serial: owned(fields.unit_serial),
            unit: owned(fields.unit),
            value: owned(fields.value),
            limit_lower: owned(fields.limit_lower),
            limit_upper: owned(fields.limit_upper),
        },
    };
    unknown.extend(fields.unknown.into_iter().map(String::from));
    Ok(ParsedLine {
        station_id,
        instant,
        fields: indexed,
        time,
        value: value.unwrap_or(end..end),
    })
}

/// Appends the response JSON of a checked line, field by field; returns where it
/// has the text of `time_created` and, for a metric, of `value`.
#[allow(
    clippy::ptr_arg,
    reason = "whether a string is borrowed decides how it is written"
)]
fn render(
    fields: &LineFields<'_>,
    station_id: &Cow<'_, str>,
    time_text: &Cow<'_, str>,
    shape: &Shape<'_>,
    rendered: &mut Vec<u8>,
) -> (Range<usize>, Option<Range<usize>>) {
    let start = rendered.len();
    let mut json = JsonWriter {
        out: rendered,
        start,
    };
    // The field order is the response's (SPEC 2.2, 2.3).
    json.raw(br#"{"station_id":"#);
    json.string(station_id);
    json.raw(br#","slot":"#);
    json.string(text(&fields.slot));
    json.raw(br#","unit_serial":"#);
    json.string(text(&fields.unit_serial));
    json.raw(br#","time_created":"#);
    let time = json.string(time_text);
    json.raw(br#","tz":"#);
    json.string(text(&fields.tz));
    json.raw(br#","mode":"#);
    json.string(text(&fields.mode));
    json.raw(br#","tags":"#);
    match &fields.tags {
        Tags::Absent => json.raw(b"[]"),
        Tags::Decoded(tags) => {
            json.raw(b"[");
            for (index, tag) in tags.iter().enumerate() {
                if index > 0 {
                    json.raw(b",");
                }
                json.string(&tag.0);
            }
            json.raw(b"]");
        }
        Tags::Written(array) => json.raw(array.as_bytes()),
    }
    match shape {
        Shape::Unit(direction) => {
            json.raw(br#","unit_type":"#);
            json.string(text(&fields.unit_type));
            json.raw(br#","direction":"#);
            json.string(&Cow::Borrowed(direction.as_str()));
            json.raw(br#","result":"#);
            json.string(text(&fields.result));
            json.raw(br#","metadata":"#);
            json.raw(fields.metadata.map_or("null", RawValue::get).as_bytes());
            json.raw(b"}");
            (time, None)
        }
        Shape::Metric(name) => {
            json.raw(br#","name":"#);
            json.string(name);
            json.raw(br#","value":"#);
            let value = json.string(text(&fields.value));
            json.raw(br#","unit":"#);
            json.string(text(&fields.unit));
            json.raw(br#","type":"#);
            json.string(text(&fields.metric_type));
            json.raw(br#","limit_upper":"#);
            json.string(text(&fields.limit_upper));
            json.raw(br#","limit_lower":"#);
            json.string(text(&fields.limit_lower));
            json.raw(b"}");
            (time, Some(value))
        }
    }
}

/// What sets a valid line of each kind apart, checked before its JSON is written.
enum Shape<'a> {
    Unit(Direction),
    Metric(Cow<'a, str>),
}

/// An optional string field as returned: absent is `""`.
fn text<'b, 'a>(field: &'b Option<Text<'a>>) -> &'b Cow<'a, str> {
    const EMPTY: &Cow<'static, str> = &Cow::Borrowed("");
    field.as_ref().map_or(EMPTY, |text| &text.0)
}

/// Appends a record's response JSON to a buffer that may already hold others.
struct JsonWriter<'b> {
    out: &'b mut Vec<u8>,
    /// Where this record's JSON starts in `out`.
    start: usize,
}

impl JsonWriter<'_> {
    fn raw(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    /// Writes `value` as a JSON string; returns where its text lies between the
    /// quotes, from the record's first byte.
    ///
    /// A string borrowed from the line held no escape sequence, and the parser
    /// refuses control characters in strings, so it has nothing to escape and is
    /// copied as it is; only the others are escaped.
    #[allow(clippy::ptr_arg, reason = "whether it is borrowed is what is asked")]
    fn string(&mut self, value: &Cow<'_, str>) -> Range<usize> {
        let from = self.out.len() + 1 - self.start;
        match value {
            Cow::Borrowed(text) => {
                self.out.push(b'"');
                self.out.extend_from_slice(text.as_bytes());
                self.out.push(b'"');
            }
            Cow::Owned(text) => {
                serde_json::to_writer(&mut *self.out, text).expect("writing to a Vec cannot fail");
            }
        }
        from..self.out.len() - 1 - self.start
    }
}

/// The most characters of a bad value a reason quotes. A reason names the line; it
/// need not repeat it, and a 10 MB value must not make a 10 MB log line.
const QUOTED_CHARACTERS: usize = 48;

/// A bad value for a reason: quoted, and cut short when long.
pub(crate) fn quoted(value: &str) -> String {
    if value.chars().count() <= QUOTED_CHARACTERS {
        return format!("{value:?}");
    }
    let head: String = value.chars().take(QUOTED_CHARACTERS).collect();
    format!("{head:?}... ({} bytes)", value.len())
}

/// serde_json quotes a value of the wrong type in full (`invalid type: string
/// "..."`); the quote is cut as [`quoted`] cuts one.
fn shorten_quote(message: &str) -> Cow<'_, str> {
    let (Some(open), Some(close)) = (message.find('"'), message.rfind('"')) else {
        return Cow::Borrowed(message);
    };
    let inner = message.get(open + 1..close).unwrap_or_default();
    if inner.chars().count() <= QUOTED_CHARACTERS {
        return Cow::Borrowed(message);
    }
    let head: String = inner.chars().take(QUOTED_CHARACTERS).collect();
    Cow::Owned(format!(
        "{}\"{head}\"... ({} bytes){}",
        &message[..open],
        inner.len(),
        &message[close + 1..]
    ))
}

/// serde_json ends its messages with " at line 1 column N"; the line is ours to
/// name, so only the column is kept.
fn describe_json_error(error: serde_json::Error) -> String {
    let text = error.to_string();
    let message = shorten_quote(match text.rfind(" at line ") {
        Some(cut) => &text[..cut],
        None => &text,
    });
    if error.column() > 0 {
        format!("{message} (column {})", error.column())
    } else {
        message.into_owned()
    }
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

/// The fields of a line as written; `None` is absent or `null`.
#[derive(Default)]
struct LineFields<'a> {
    station_id: Option<Text<'a>>,
    slot: Option<Text<'a>>,
    unit_serial: Option<Text<'a>>,
    time_created: Option<Text<'a>>,
    tz: Option<Text<'a>>,
    mode: Option<Text<'a>>,
    tags: Tags<'a>,
    unit_type: Option<Text<'a>>,
    direction: Option<Text<'a>>,
    result: Option<Text<'a>>,
    metadata: Option<&'a RawValue>,
    name: Option<Text<'a>>,
    value: Option<Text<'a>>,
    unit: Option<Text<'a>>,
    metric_type: Option<Text<'a>>,
    limit_upper: Option<Text<'a>>,
    limit_lower: Option<Text<'a>>,
    unknown: Vec<Cow<'a, str>>,
}

/// A line's `tags` as its response JSON needs them.
#[derive(Default)]
enum Tags<'a> {
    /// Absent or `null`: the response has `[]`.
    #[default]
    Absent,
    /// Each tag decoded (serde_json's reading).
    Decoded(Vec<Text<'a>>),
    /// The array as written, `[` to `]`: strings without escapes and no whitespace,
    /// which is what the response has, byte for byte (the fast scanner's reading).
    Written(&'a str),
}

/// Deserializes a line of one kind: each field is known to one kind or to both.
struct LineSeed {
    kind: Kind,
}

impl<'de> DeserializeSeed<'de> for LineSeed {
    type Value = LineFields<'de>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for LineSeed {
    type Value = LineFields<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        write!(formatter, "a {} record object", self.kind)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = LineFields::default();
        let units = self.kind == Kind::Units;
        // The known fields seen, one bit each; unknown ones are in `fields.unknown`.
        let mut seen: u32 = 0;
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            let duplicate = match known_field(&key, units) {
                Some(bit) => {
                    let before = seen;
                    seen |= bit;
                    before & bit != 0
                }
                None => fields.unknown.contains(&key),
            };
            if duplicate {
                return Err(de::Error::custom(format_args!("duplicate field `{key}`")));
            }
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
                            .map_err(|error| field_error(&key, error))?
                            .map_or(Tags::Absent, Tags::Decoded);
                    }
                    "metadata" if units => {
                        fields.metadata = map.next_value::<Option<&'de RawValue>>()?;
                    }
                    "value" | "limit_upper" | "limit_lower" if !units => {
                        let raw = map.next_value::<&'de RawValue>()?;
                        let text = string_or_number(raw).map_err(|()| {
                            de::Error::custom(format_args!(
                                "field `{key}` must be a string or a number"
                            ))
                        })?;
                        match key.as_ref() {
                            "value" => fields.value = text,
                            "limit_upper" => fields.limit_upper = text,
                            _ => fields.limit_lower = text,
                        }
                    }
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                        fields.unknown.push(key);
                    }
                }
            }
        }
        Ok(fields)
    }
}

/// The bit of a field the record shape of a unit (`units`) or of a metric has.
fn known_field(key: &str, units: bool) -> Option<u32> {
    let index = match key {
        "station_id" => 0,
        "slot" => 1,
        "unit_serial" => 2,
        "time_created" => 3,
        "tz" => 4,
        "mode" => 5,
        "tags" => 6,
        "unit_type" if units => 7,
        "direction" if units => 8,
        "result" if units => 9,
        "metadata" if units => 10,
        "name" if !units => 11,
        "value" if !units => 12,
        "unit" if !units => 13,
        "type" if !units => 14,
        "limit_upper" if !units => 15,
        "limit_lower" if !units => 16,
        _ => return None,
    };
    Some(1 << index)
}

/// Names the field in serde's own reason ("invalid type: integer `5`, expected a
/// string"); its position suffix is dropped as the caller adds the column.
fn field_error<E: de::Error>(key: &str, cause: E) -> E {
    let cause = cause.to_string();
    let cause = cause.split(" at line ").next().unwrap_or_default();
    E::custom(format_args!("field `{key}`: {cause}"))
}

/// `value` and the limits: a JSON string, or a JSON number kept as its exact text.
fn string_or_number(raw: &RawValue) -> Result<Option<Text<'_>>, ()> {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'"') => serde_json::from_str::<Text>(text).map(Some).map_err(|_| ()),
        Some(b'-' | b'0'..=b'9') => Ok(Some(Text(Cow::Borrowed(text)))),
        Some(b'n') => Ok(None),
        _ => Err(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn parse(kind: Kind, line: &str) -> Result<(Value, Vec<String>), String> {
        let mut rendered = Vec::new();
        let mut unknown = Vec::new();
        parse_line(kind, line, &mut rendered, &mut unknown)?;
        Ok((serde_json::from_slice(&rendered).unwrap(), unknown))
    }

    #[test]
    fn issue_5_reasons_quote_long_bad_values_cut_short() {
        let huge = "x".repeat(1 << 20);
        for line in [
            format!(r#"{{"station_id":"S","time_created":"{huge}","direction":"output"}}"#),
            format!(
                r#"{{"station_id":"S","time_created":"2024-01-01T00:00:00Z","direction":"{huge}"}}"#
            ),
            format!(
                r#"{{"station_id":"S","time_created":"2024-01-01T00:00:00Z","direction":"output","tags":"{huge}"}}"#
            ),
        ] {
            let reason = parse(Kind::Units, &line).unwrap_err();
            assert!(
                reason.len() < 200,
                "{} bytes: {:.200}",
                reason.len(),
                reason
            );
            assert!(reason.contains("... (1048576 bytes)"), "{reason}");
        }
        // Short values are quoted whole.
        let reason = parse(
            Kind::Units,
            r#"{"station_id":"S","time_created":"2024-01-01T00:00:00Z","direction":"sideways"}"#,
        )
        .unwrap_err();
        assert_eq!(
            reason,
            r#"field `direction` must be "input" or "output", not "sideways""#
        );
    }

    /// The response JSON as serde writes the record's fields in order: the reference
    /// the hand-written JSON must equal byte for byte.
    fn reference_json(kind: Kind, line: &str) -> Vec<u8> {
        let value: serde_json::Map<String, Value> = serde_json::from_str(line).unwrap();
        let raw: std::collections::HashMap<String, Box<RawValue>> =
            serde_json::from_str(line).unwrap();
        // Numbers as written: the raw text, not the parsed value.
        let text = |name: &str| match (value.get(name), raw.get(name)) {
            (None | Some(Value::Null), _) => Value::from(""),
            (Some(Value::Number(_)), Some(raw)) => Value::from(raw.get()),
            (Some(other), _) => other.clone(),
        };
        let mut fields = vec![
            ("station_id", text("station_id")),
            ("slot", text("slot")),
            ("unit_serial", text("unit_serial")),
            ("time_created", text("time_created")),
            ("tz", text("tz")),
            ("mode", text("mode")),
            (
                "tags",
                value
                    .get("tags")
                    .cloned()
                    .filter(|tags| !tags.is_null())
                    .unwrap_or(json!([])),
            ),
        ];
        let mut json = Vec::new();
        let metadata = match kind {
            Kind::Units => {
                fields.extend([
                    ("unit_type", text("unit_type")),
                    ("direction", text("direction")),
                    ("result", text("result")),
                ]);
                // Raw, as written in the line.
                Some(
                    raw.get("metadata")
                        .map_or("null", |raw| raw.get())
                        .to_owned(),
                )
            }
            Kind::Metrics => {
                for name in [
                    "name",
                    "value",
                    "unit",
                    "type",
                    "limit_upper",
                    "limit_lower",
                ] {
                    fields.push((name, text(name)));
                }
                None
            }
        };
        json.push(b'{');
        for (index, (name, value)) in fields.iter().enumerate() {
            if index > 0 {
                json.push(b',');
            }
            serde_json::to_writer(&mut json, name).unwrap();
            json.push(b':');
            serde_json::to_writer(&mut json, value).unwrap();
        }
        if let Some(metadata) = metadata {
            json.extend_from_slice(br#","metadata":"#);
            json.extend_from_slice(metadata.as_bytes());
        }
        json.push(b'}');
        json
    }

    #[test]
    fn the_response_json_is_the_fields_in_order_and_its_spans_hold_time_and_value() {
        let units = [
            r#"{"station_id":"ST-1","time_created":"2024-01-01T00:00:00Z","direction":"input"}"#,
            r#"{"direction":"output","metadata":{ "a" : [1.50, "\u00e9"] },"tags":["x\"y","\u00e9"],"station_id":"S\\1","slot":"A","unit_serial":"SN","time_created":"2024-01-01T00:00:00.5+01:00","tz":"Europe/Paris","mode":"m","unit_type":"board","result":"pass"}"#,
            r#"{"station_id":"S","time_created":"2024-01-01T00:00:00Z","direction":"input","metadata":null,"tags":null,"slot":null}"#,
        ];
        let metrics = [
            r#"{"station_id":"S","time_created":"2024-01-01T00:00:00Z","name":"v"}"#,
            r#"{"limit_lower":-1.5e3,"station_id":"S","time_created":"2024-01-01T00:00:00Z","name":"n\tx","value":"a \"b\"","unit":"V","type":"t","limit_upper":"","tags":["l"]}"#,
            r#"{"station_id":"S","time_created":"2024-01-01T00:00:00Z","name":"v","value":3.30}"#,
        ];
        for (kind, lines) in [(Kind::Units, &units), (Kind::Metrics, &metrics)] {
            for line in lines {
                let mut rendered = b"earlier".to_vec();
                let parsed = parse_line(kind, line, &mut rendered, &mut Vec::new()).unwrap();
                let json = &rendered[7..];
                assert_eq!(
                    String::from_utf8_lossy(json),
                    String::from_utf8_lossy(&reference_json(kind, line))
                );
                let record: Value = serde_json::from_slice(json).unwrap();
                let unquoted = |range: Range<usize>| {
                    assert_eq!((json[range.start - 1], json[range.end]), (b'"', b'"'));
                    serde_json::from_slice::<String>(&json[range.start - 1..=range.end]).unwrap()
                };
                assert_eq!(unquoted(parsed.time.clone()), record["time_created"]);
                match kind {
                    Kind::Units => assert_eq!(parsed.value, json.len()..json.len()),
                    Kind::Metrics => assert_eq!(unquoted(parsed.value.clone()), record["value"]),
                }
            }
        }
    }

    #[test]
    fn a_minimal_unit_line_renders_every_field_with_defaults() {
        let (record, _) = parse(
            Kind::Units,
            r#"{"station_id":"ST-1","time_created":"2024-01-01T00:00:00Z","direction":"input"}"#,
        )
        .unwrap();
        assert_eq!(
            record,
            json!({"station_id":"ST-1","slot":"","unit_serial":"","time_created":"2024-01-01T00:00:00Z",
                   "tz":"","mode":"","tags":[],"unit_type":"","direction":"input","result":"","metadata":null})
        );
    }

    #[test]
    fn metric_numbers_keep_their_exact_text() {
        let line = r#"{"station_id":"S","time_created":"2024-01-01T00:00:00.120+01:00","name":"v",
            "value":3.30,"limit_upper":1E+5,"limit_lower":-123456789012345678901234567890.5,"type":null}"#
            .replace('\n', "");
        let mut rendered = Vec::new();
        parse_line(Kind::Metrics, &line, &mut rendered, &mut Vec::new()).unwrap();
        let text = String::from_utf8(rendered).unwrap();
        assert!(text.contains(r#""value":"3.30""#), "{text}");
        assert!(text.contains(r#""limit_upper":"1E+5""#), "{text}");
        assert!(
            text.contains(r#""limit_lower":"-123456789012345678901234567890.5""#),
            "{text}"
        );
        assert!(text.contains(r#""type":"""#), "{text}");
        assert!(text.contains(r#""time_created":"2024-01-01T00:00:00.120+01:00""#));
        assert!(!text.contains("metadata"));
    }

    #[test]
    fn metadata_is_returned_as_written_and_unknown_fields_are_reported() {
        let line = r#"{"station_id":"S","time_created":"2024-01-01T00:00:00Z","direction":"output",
            "metadata":{"a":[1.50,{"b":null}]},"extra":1,"name":"not a unit field"}"#
            .replace('\n', "");
        let mut rendered = Vec::new();
        let mut unknown = Vec::new();
        parse_line(Kind::Units, &line, &mut rendered, &mut unknown).unwrap();
        let text = String::from_utf8(rendered).unwrap();
        assert!(
            text.ends_with(r#""metadata":{"a":[1.50,{"b":null}]}}"#),
            "{text}"
        );
        assert_eq!(unknown, ["extra", "name"]);
    }

    #[test]
    fn indexed_fields_come_from_the_line() {
        let line = r#"{"station_id":"S\u0031","time_created":"2024-01-01T00:00:00Z","direction":"output","unit_type":"board","unit_serial":"SN1"}"#;
        let parsed = parse_line(Kind::Units, line, &mut Vec::new(), &mut Vec::new()).unwrap();
        assert_eq!(parsed.station_id, "S1");
        assert_eq!(
            parsed.fields,
            IndexedFields::Unit {
                unit_type: "board".into(),
                unit_serial: "SN1".into(),
                direction: Direction::Output,
                slot: "".into(),
                mode: "".into(),
                result: "".into(),
            }
        );
        let line = r#"{"station_id":"S1","time_created":"2024-01-01T00:00:00Z","name":"v","value":3.30,"limit_lower":"1","slot":"A","unit_serial":"SN7"}"#;
        let parsed = parse_line(Kind::Metrics, line, &mut Vec::new(), &mut Vec::new()).unwrap();
        assert_eq!(
            parsed.fields,
            IndexedFields::Metric {
                name: "v".into(),
                slot: "A".into(),
                unit_serial: "SN7".into(),
                unit: "".into(),
                value: "3.30".into(),
                limit_lower: "1".into(),
                limit_upper: "".into(),
            }
        );
    }

    #[test]
    fn numeric_values_are_finite_json_numbers_with_an_optional_plus() {
        for (text, value) in [
            ("0", 0.0),
            ("-0", 0.0),
            ("3.30", 3.3),
            ("+3.5", 3.5),
            ("1E+5", 1e5),
            ("-2.5e-3", -2.5e-3),
            ("12", 12.0),
        ] {
            assert_eq!(numeric(text), Some(value), "{text}");
        }
        for text in [
            "", "+", "-", "abc", "01", "1.", ".5", "1e", "1e+", " 1", "1 ", "NaN", "inf",
            "Infinity", "0x10", "1e400", "--1", "+-1", "-+1", "1.5.2", "1_000", "true",
        ] {
            assert_eq!(numeric(text), None, "{text:?}");
        }
    }

    #[test]
    fn invalid_lines_say_why() {
        let cases = [
            (Kind::Units, "@garbage", "expected value"),
            (Kind::Units, "[1]", "expected a unit record object"),
            (
                Kind::Units,
                r#"{"time_created":"2024-01-01T00:00:00Z","direction":"input"}"#,
                "missing field `station_id`",
            ),
            (
                Kind::Units,
                r#"{"station_id":"","time_created":"2024-01-01T00:00:00Z","direction":"input"}"#,
                "field `station_id` is empty",
            ),
            (
                Kind::Units,
                r#"{"station_id":"S","direction":"input"}"#,
                "missing field `time_created`",
            ),
            (
                Kind::Units,
                r#"{"station_id":"S","time_created":"2024-01-01 00:00:00Z","direction":"input"}"#,
                "not an RFC 3339 date-time",
            ),
            (
                Kind::Units,
                r#"{"station_id":"S","time_created":"2024-01-01T00:00:00Z"}"#,
                "missing field `direction`",
            ),
            (
                Kind::Units,
                r#"{"station_id":"S","time_created":"2024-01-01T00:00:00Z","direction":"sideways"}"#,
                "field `direction` must be",
            ),
            (
                Kind::Units,
                r#"{"station_id":"S","time_created":"2024-01-01T00:00:00Z","direction":"input","slot":5}"#,
                "field `slot`: invalid type: integer `5`, expected a string",
            ),
            (
                Kind::Units,
                r#"{"station_id":"S","time_created":"2024-01-01T00:00:00Z","direction":"input","tags":["a",1]}"#,
                "field `tags`: invalid type: integer `1`, expected a string",
            ),
            (
                Kind::Units,
                r#"{"station_id":"S","station_id":"T","time_created":"2024-01-01T00:00:00Z","direction":"input"}"#,
                "duplicate field `station_id`",
            ),
            (
                Kind::Units,
                r#"{"station_id":"S","time_created":"2024-01-01T00:00:00Z","direction":"input"} x"#,
                "trailing characters",
            ),
            (
                Kind::Metrics,
                r#"{"station_id":"S","time_created":"2024-01-01T00:00:00Z"}"#,
                "missing field `name`",
            ),
            (
                Kind::Metrics,
                r#"{"station_id":"S","time_created":"2024-01-01T00:00:00Z","name":"n","value":true}"#,
                "field `value` must be a string or a number",
            ),
            (
                Kind::Metrics,
                r#"{"station_id":"S","time_created":"2024-01-01T00:00:00Z","name":"n","value":[1]}"#,
                "field `value` must be a string or a number",
            ),
            (
                Kind::Metrics,
                r#"{"station_id":7,"time_created":"2024-01-01T00:00:00Z","name":"n"}"#,
                "field `station_id`: invalid type: integer `7`, expected a string",
            ),
        ];
        for (kind, line, wanted) in cases {
            let mut rendered = b"kept".to_vec();
            let reason = parse_line(kind, line, &mut rendered, &mut Vec::new()).unwrap_err();
            assert!(
                reason.contains(wanted),
                "{line}: {reason:?} should contain {wanted:?}"
            );
            assert_eq!(
                rendered, b"kept",
                "a failed line must not leave output behind"
            );
        }
    }
}
