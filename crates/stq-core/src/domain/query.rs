//! Query-string parsing and validation (docs/api.md section 4), and the time window
//! rules (section 5). Pure: a raw query string in, a normalized [`QueryParams`] or
//! the contract's 400 out.
//!
//! The query string is decoded here rather than by a general form decoder because
//! the contract needs what such decoders throw away: whether a parameter came twice,
//! and, for `from`/`to`, whether a space was a `+` sent unencoded.

use std::borrow::Cow;
use std::time::Duration;

use percent_encoding::percent_decode;

use crate::domain::record::{Direction, Directions, Kind};
use crate::domain::time::{duration_text, parse_query_time, Timestamp, Window, DAY_SECONDS};
use crate::domain::zone::Zone;

/// Why a query string was refused. Each is one of the contract's client errors;
/// the HTTP layer gives it its code and status.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// A parameter's value is not one it accepts: 400 `invalid_parameter`.
    #[error("invalid value for parameter `{parameter}`: {reason}")]
    InvalidParameter {
        /// The parameter's name.
        parameter: String,
        /// The decoded value, when there was one to show.
        value: Option<String>,
        /// Why the value is refused.
        reason: String,
    },

    /// A parameter the endpoint does not take: 400 `unknown_parameter`.
    #[error("unknown parameter `{parameter}`")]
    UnknownParameter {
        /// The parameter's name, as sent.
        parameter: String,
    },

    /// `from` is not before `to` (or `baseline_from` not before `baseline_to`):
    /// 400 `invalid_window`.
    #[error("`{}` must be before `{}`", .bounds[0], .bounds[1])]
    InvalidWindow {
        /// The window's start.
        from: Timestamp,
        /// The window's end.
        to: Timestamp,
        /// The parameters that give its start and end: `from` and `to`, or a
        /// control chart's `baseline_from` and `baseline_to`.
        bounds: [&'static str; 2],
    },

    /// More station ids than `--max-stations`: 400 `too_many_stations`.
    #[error("at most {max} station ids may be given, not {count}")]
    TooManyStations {
        /// How many distinct ids were given.
        count: usize,
        /// The limit.
        max: usize,
    },

    /// A query string longer than `--max-query-bytes`: 414.
    #[error("the query string is {length} bytes long; at most {max} are accepted")]
    UriTooLong {
        /// The query string's length in bytes, as sent.
        length: usize,
        /// The limit.
        max: usize,
    },

    /// A window longer than `--max-window`: 400 `window_too_large`.
    #[error("the {} spans more than the {} allowed; narrow it", window_noun(.bounds), duration_text(*.max_window))]
    WindowTooLarge {
        /// The window's start.
        from: Timestamp,
        /// The window's end.
        to: Timestamp,
        /// The limit.
        max_window: Duration,
        /// As [`QueryError::InvalidWindow`]'s.
        bounds: [&'static str; 2],
    },
}

/// "window", or "baseline window" for a control chart's baseline.
fn window_noun(bounds: &[&str; 2]) -> &'static str {
    match bounds[0] {
        "from" => "window",
        _ => "baseline window",
    }
}

/// Which of a query's windows is meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WindowOf {
    /// `from` and `to`.
    Query,
    /// `/metrics/control`'s `baseline_from` and `baseline_to` (docs/api.md
    /// section 15).
    Baseline,
}

impl WindowOf {
    /// The parameters that give its start and end.
    fn bounds(self) -> [&'static str; 2] {
        match self {
            WindowOf::Query => ["from", "to"],
            WindowOf::Baseline => ["baseline_from", "baseline_to"],
        }
    }
}

/// The limits that parameter validation depends on (docs/api.md sections 4, 6 and 9).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// `--max-records`: the largest `limit`, and the most records an unpaged
    /// answer holds.
    pub max_records: usize,
    /// `--max-stations`: the most distinct station ids a query may name.
    pub max_stations: usize,
    /// Bytes of the query string as sent, still percent-encoded.
    pub max_query_bytes: usize,
    /// The longest window, the default 24 h included; `None`: any.
    pub max_window: Option<Duration>,
    /// `--max-wait`: the longest `wait` (docs/api.md section 14.1).
    pub max_wait: Duration,
}

impl Default for Limits {
    /// The contract's defaults.
    fn default() -> Limits {
        Limits {
            max_records: 100_000,
            max_stations: 1000,
            max_query_bytes: 8192,
            max_window: None,
            max_wait: Duration::from_secs(60),
        }
    }
}

impl Limits {
    /// 414 when the query string is longer than the limit. Checked before anything
    /// else reads the query, by the handler as well as by [`QueryParams::parse`].
    pub fn check_length(&self, query: &str) -> Result<(), QueryError> {
        if query.len() > self.max_query_bytes {
            return Err(QueryError::UriTooLong {
                length: query.len(),
                max: self.max_query_bytes,
            });
        }
        Ok(())
    }
}

/// A request's parameters, validated and normalized: lists deduplicated and sorted,
/// so that two spellings of the same query compare equal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueryParams {
    /// `None`: every station the token may access.
    pub(crate) station_ids: Option<Vec<String>>,
    /// `from`, if given.
    pub(crate) from: Option<Timestamp>,
    /// `to`, if given.
    pub(crate) to: Option<Timestamp>,
    /// `/units`' `unit_type` values.
    pub(crate) unit_types: Vec<String>,
    /// `unit_serial`, if given.
    pub(crate) unit_serial: Option<String>,
    /// `/units`' `result`: values in ASCII lower case, matched ignoring ASCII case
    /// (docs/api.md section 4).
    pub(crate) results: Vec<String>,
    /// Only meaningful for `/units`.
    pub(crate) directions: Directions,
    /// `/metrics`' `name` values.
    pub(crate) names: Vec<String>,
    /// `limit`: a page's size; `None` answers every record at once.
    pub(crate) limit: Option<usize>,
    /// `cursor`: where the page starts, as the last page's `next_cursor` said.
    pub(crate) cursor: Option<String>,
    /// Summaries only: the row's group fields, in the order given, each once;
    /// `station_id` when none is given (docs/api.md section 10).
    pub(crate) group_by: Vec<GroupField>,
    /// Summaries only: the length of the buckets; `None`: one bucket, rows
    /// without `bucket_start`.
    pub(crate) bucket: Option<Bucket>,
    /// Summaries only: the time zone whose wall clock cuts the buckets (`tz`,
    /// default UTC); without a bucket it changes nothing.
    pub(crate) zone: Zone,
    /// How the answer is written (`format`, every endpoint); `None`: not given, so
    /// the `Accept` header decides. Presentation only: no filter, no cursor scope,
    /// and the one field the HTTP layer reads.
    pub format: Option<Format>,
    /// `wait` (every endpoint, docs/api.md section 14.1): how long a request whose
    /// `If-None-Match` matches may be held for a change. Presentation of time,
    /// not selection: no filter, no cursor scope.
    pub(crate) wait: Option<Duration>,
    /// `last_event_id` (streams only, section 14.2): where a stream resumes.
    pub(crate) last_event_id: Option<String>,
    /// `/metrics/control`'s `baseline_from` and `baseline_to`, given both or
    /// neither (section 15); neither: the window itself.
    pub(crate) baseline_from: Option<Timestamp>,
    /// See `baseline_from`.
    pub(crate) baseline_to: Option<Timestamp>,
    /// `/metrics/control`'s `rules`: the Nelson rules applied, bit `n - 1` for
    /// rule `n`; `None`: all eight.
    pub(crate) rules: Option<Rules>,
}

/// A set of Nelson rules, `1` to `8` (docs/api.md section 15).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Rules(u8);

impl Rules {
    /// All eight.
    pub(crate) const ALL: Rules = Rules(0xff);

    /// Whether rule `number` (1 to 8) is in the set.
    pub(crate) fn contains(self, number: u8) -> bool {
        (1..=8).contains(&number) && self.0 & (1 << (number - 1)) != 0
    }

    /// The set of just these rules.
    #[cfg(test)]
    pub(crate) fn of(numbers: &[u8]) -> Rules {
        Rules(
            numbers
                .iter()
                .fold(0, |bits, number| bits | 1 << (number - 1)),
        )
    }
}

/// How an answer is written (docs/api.md section 7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// The envelope of SPEC.md 2.1.
    #[default]
    Json,
    /// RFC 4180 text: a header row, then a row per element of `data`.
    Csv,
}

impl Format {
    /// `json` or `csv`, exactly.
    pub(crate) fn parse(text: &str) -> Option<Format> {
        match text {
            "json" => Some(Format::Json),
            "csv" => Some(Format::Csv),
            _ => None,
        }
    }
}

/// The endpoints that take a query string (docs/api.md sections 4 and 10). What each
/// layer must know of one is in its [`EndpointSpec`]; a new endpoint is a variant
/// here, its spec, its plan and its computation in `data`, and the
/// compiler points at each place (every `match` on `Endpoint` is exhaustive).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `GET /units`: unit records.
    Units,
    /// `GET /metrics`: metric records.
    Metrics,
    /// `GET /units/summary`: yield, retests and cycle times by group and bucket.
    UnitsSummary,
    /// `GET /metrics/summary`: statistics and capability by name, group and bucket.
    MetricsSummary,
    /// `GET /stations`: each station's counts and first and last record.
    Stations,
    /// `GET /metrics/control`: individuals charts and Nelson's rules by name and
    /// group.
    MetricsControl,
}

impl Endpoint {
    /// Every endpoint, in the order they are listed to people.
    pub const ALL: [Endpoint; 6] = {
        // Adding a variant fails to compile here until the match gives it a
        // number; the list must then hold it at that number.
        const fn number(endpoint: Endpoint) -> usize {
            match endpoint {
                Endpoint::Units => 0,
                Endpoint::Metrics => 1,
                Endpoint::UnitsSummary => 2,
                Endpoint::MetricsSummary => 3,
                Endpoint::Stations => 4,
                Endpoint::MetricsControl => 5,
            }
        }
        let all = [
            Endpoint::Units,
            Endpoint::Metrics,
            Endpoint::UnitsSummary,
            Endpoint::MetricsSummary,
            Endpoint::Stations,
            Endpoint::MetricsControl,
        ];
        let mut index = 0;
        while index < all.len() {
            assert!(number(all[index]) == index);
            index += 1;
        }
        all
    };
}

/// The table of endpoints: what the parser, the engine and the HTTP layer read of
/// each.
#[derive(Debug)]
pub struct EndpointSpec {
    /// Its path, as a request names it (`/units/summary`), which is also its
    /// label in the metrics.
    pub path: &'static str,
    /// The query parameters it accepts.
    parameters: &'static [Parameter],
    /// The fields its rows may be grouped by; none for records and `/stations`.
    group_fields: &'static [GroupField],
    /// The number its ETags are seeded with: fixed, so that tags stay equal across
    /// versions and replicas.
    pub etag_seed: u64,
    /// What the envelope's `message` counts (docs/api.md section 7).
    pub noun: &'static str,
}

const UNITS: EndpointSpec = EndpointSpec {
    path: Kind::Units.path(),
    parameters: &[
        Parameter::StationIds,
        Parameter::From,
        Parameter::To,
        Parameter::Type,
        Parameter::SerialNumber,
        Parameter::Result,
        Parameter::Direction,
        Parameter::Limit,
        Parameter::Cursor,
    ],
    group_fields: &[],
    etag_seed: 0,
    noun: "unit record",
};

const METRICS: EndpointSpec = EndpointSpec {
    path: Kind::Metrics.path(),
    parameters: &[
        Parameter::StationIds,
        Parameter::From,
        Parameter::To,
        Parameter::Names,
        Parameter::SerialNumber,
        Parameter::Limit,
        Parameter::Cursor,
    ],
    group_fields: &[],
    etag_seed: 1,
    noun: "metric record",
};

const UNITS_SUMMARY: EndpointSpec = EndpointSpec {
    path: "/units/summary",
    parameters: &[
        Parameter::StationIds,
        Parameter::From,
        Parameter::To,
        Parameter::Type,
        Parameter::SerialNumber,
        Parameter::GroupBy,
        Parameter::Bucket,
        Parameter::Tz,
    ],
    group_fields: &[
        GroupField::StationId,
        GroupField::Slot,
        GroupField::UnitType,
        GroupField::Mode,
    ],
    etag_seed: 2,
    noun: "summary row",
};

const METRICS_SUMMARY: EndpointSpec = EndpointSpec {
    path: "/metrics/summary",
    parameters: &[
        Parameter::StationIds,
        Parameter::From,
        Parameter::To,
        Parameter::Names,
        Parameter::GroupBy,
        Parameter::Bucket,
        Parameter::Tz,
    ],
    group_fields: &[GroupField::StationId, GroupField::Slot, GroupField::Unit],
    etag_seed: 3,
    noun: "summary row",
};

const STATIONS: EndpointSpec = EndpointSpec {
    path: "/stations",
    parameters: &[Parameter::StationIds],
    group_fields: &[],
    etag_seed: 4,
    noun: "station",
};

const METRICS_CONTROL: EndpointSpec = EndpointSpec {
    path: "/metrics/control",
    parameters: &[
        Parameter::StationIds,
        Parameter::From,
        Parameter::To,
        Parameter::Names,
        Parameter::GroupBy,
        Parameter::BaselineFrom,
        Parameter::BaselineTo,
        Parameter::Rules,
    ],
    group_fields: &[GroupField::StationId, GroupField::Slot, GroupField::Unit],
    etag_seed: 5,
    noun: "control row",
};

impl Endpoint {
    /// What every layer knows of it.
    pub fn spec(self) -> &'static EndpointSpec {
        match self {
            Endpoint::Units => &UNITS,
            Endpoint::Metrics => &METRICS,
            Endpoint::UnitsSummary => &UNITS_SUMMARY,
            Endpoint::MetricsSummary => &METRICS_SUMMARY,
            Endpoint::Stations => &STATIONS,
            Endpoint::MetricsControl => &METRICS_CONTROL,
        }
    }

    /// The endpoint that returns records of `kind`: the parsers' checks ask it
    /// (the service names its endpoints).
    #[cfg(any(test, feature = "checks"))]
    pub(crate) fn records(kind: Kind) -> Endpoint {
        match kind {
            Kind::Units => Endpoint::Units,
            Kind::Metrics => Endpoint::Metrics,
        }
    }

    /// Whether it answers with rows that need a default grouping.
    fn groups(self) -> bool {
        !self.spec().group_fields.is_empty()
    }
}

/// A field a summary row may be grouped by (docs/api.md section 10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum GroupField {
    /// By the record's station (`station_id`).
    StationId,
    /// By the fixture slot that tested the unit (`slot`).
    Slot,
    /// By the type of unit tested (`unit_type`).
    UnitType,
    /// By the record's test mode (`mode`).
    Mode,
    /// By a metric's unit of measure (`unit`).
    Unit,
}

impl GroupField {
    /// The field named `text`, if `endpoint` groups by it.
    fn parse(endpoint: Endpoint, text: &str) -> Option<GroupField> {
        endpoint
            .spec()
            .group_fields
            .iter()
            .copied()
            .find(|field| field.name() == text)
    }

    /// The field's name, as a row names it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            GroupField::StationId => "station_id",
            GroupField::Slot => "slot",
            GroupField::UnitType => "unit_type",
            GroupField::Mode => "mode",
            GroupField::Unit => "unit",
        }
    }
}

/// A summary's bucket length: whole minutes, from `1m` to `31d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Bucket {
    seconds: i64,
}

impl Bucket {
    const LONGEST_SECONDS: i64 = 31 * DAY_SECONDS;

    /// `15m`, `1h`, `7d`: digits without a leading zero, then `m`, `h` or `d`.
    pub(crate) fn parse(text: &str) -> Option<Bucket> {
        let unit = text.chars().last()?;
        let digits = &text[..text.len() - unit.len_utf8()];
        let unit_seconds = match unit {
            'm' => 60,
            'h' => 3600,
            'd' => DAY_SECONDS,
            _ => return None,
        };
        if digits.is_empty()
            || digits.starts_with('0')
            || !digits.bytes().all(|byte| byte.is_ascii_digit())
        {
            return None;
        }
        let seconds = digits.parse::<i64>().ok()?.checked_mul(unit_seconds)?;
        (seconds <= Bucket::LONGEST_SECONDS).then_some(Bucket { seconds })
    }

    pub(crate) fn seconds(self) -> i64 {
        self.seconds
    }
}

/// The parameters each endpoint accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Parameter {
    StationIds,
    From,
    To,
    Type,
    SerialNumber,
    Result,
    Direction,
    Names,
    Limit,
    Cursor,
    GroupBy,
    Bucket,
    Tz,
    Format,
    Wait,
    LastEventId,
    BaselineFrom,
    BaselineTo,
    Rules,
}

/// The parameters every endpoint takes besides its own.
const EVERY_ENDPOINT: &[Parameter] = &[Parameter::Format, Parameter::Wait];

/// The parameters of the records endpoints that a stream of the same records does
/// not take (docs/api.md section 14.2): it has no end, no pages and one format.
const NOT_OF_STREAMS: &[Parameter] = &[
    Parameter::To,
    Parameter::Limit,
    Parameter::Cursor,
    Parameter::Format,
];

/// Which parameters a query string may hold: an endpoint's, or a stream's.
#[derive(Clone, Copy)]
enum Accepted {
    Endpoint(Endpoint),
    Stream(Endpoint),
}

impl Parameter {
    /// The parameter `name` names, if `accepted` takes it.
    fn of(accepted: Accepted, name: &str) -> Option<Parameter> {
        let (Accepted::Endpoint(endpoint) | Accepted::Stream(endpoint)) = accepted;
        let stream = matches!(accepted, Accepted::Stream(_));
        (endpoint.spec().parameters.iter())
            .chain(EVERY_ENDPOINT)
            .chain(stream.then_some(&Parameter::LastEventId))
            .copied()
            .filter(|parameter| !stream || !NOT_OF_STREAMS.contains(parameter))
            .find(|parameter| parameter.name() == name)
    }

    fn name(self) -> &'static str {
        match self {
            Parameter::StationIds => "station_ids",
            Parameter::From => "from",
            Parameter::To => "to",
            Parameter::Type => "type",
            Parameter::SerialNumber => "serial_number",
            Parameter::Result => "result",
            Parameter::Direction => "direction",
            Parameter::Names => "names",
            Parameter::Limit => "limit",
            Parameter::Cursor => "cursor",
            Parameter::GroupBy => "group_by",
            Parameter::Bucket => "bucket",
            Parameter::Tz => "tz",
            Parameter::Format => "format",
            Parameter::Wait => "wait",
            Parameter::LastEventId => "last_event_id",
            Parameter::BaselineFrom => "baseline_from",
            Parameter::BaselineTo => "baseline_to",
            Parameter::Rules => "rules",
        }
    }

    fn is_list(self) -> bool {
        matches!(
            self,
            Parameter::Type
                | Parameter::Result
                | Parameter::Direction
                | Parameter::Names
                | Parameter::GroupBy
                | Parameter::Rules
        )
    }

    /// `from` and `to` keep a `+` as a `+`: an unencoded offset must survive.
    fn keeps_plus(self) -> bool {
        matches!(
            self,
            Parameter::From | Parameter::To | Parameter::BaselineFrom | Parameter::BaselineTo
        )
    }
}

impl QueryParams {
    /// Parses and validates the query string of a request to `endpoint`.
    pub fn parse(
        endpoint: Endpoint,
        query: &str,
        limits: Limits,
    ) -> Result<QueryParams, QueryError> {
        parse_accepting(Accepted::Endpoint(endpoint), query, limits)
    }

    /// Parses and validates the query string of a stream of `kind`'s records
    /// (`/units/stream`, `/metrics/stream`: docs/api.md section 14.2): the records
    /// endpoint's parameters but `to`, `limit`, `cursor` and `format`, and
    /// `last_event_id`.
    pub fn parse_stream(
        kind: Kind,
        query: &str,
        limits: Limits,
    ) -> Result<QueryParams, QueryError> {
        let endpoint = match kind {
            Kind::Units => Endpoint::Units,
            Kind::Metrics => Endpoint::Metrics,
        };
        parse_accepting(Accepted::Stream(endpoint), query, limits)
    }
}

fn parse_accepting(
    accepted: Accepted,
    query: &str,
    limits: Limits,
) -> Result<QueryParams, QueryError> {
    let (Accepted::Endpoint(endpoint) | Accepted::Stream(endpoint)) = accepted;
    limits.check_length(query)?;
    let pairs = || {
        query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
    };

    // Unknown names first: a typo must never be reported as something else. The
    // names are decoded twice rather than collected: a query has a handful, and
    // most need no decoding.
    let parameter_of = |raw_name: &str| {
        let name = decode(raw_name, false).map_err(|_| QueryError::UnknownParameter {
            parameter: String::from_utf8_lossy(raw_name.as_bytes()).into_owned(),
        })?;
        Parameter::of(accepted, &name).ok_or_else(|| QueryError::UnknownParameter {
            parameter: name.into_owned(),
        })
    };
    for (raw_name, _) in pairs() {
        parameter_of(raw_name)?;
    }

    let mut params = QueryParams {
        directions: Directions::NONE,
        ..QueryParams::default()
    };
    // One bit per parameter given.
    let mut seen: u32 = 0;
    for (raw_name, raw_value) in pairs() {
        let parameter = parameter_of(raw_name)?;
        let bit = 1 << parameter as u32;
        if !parameter.is_list() && seen & bit != 0 {
            return Err(invalid(parameter, None, "given more than once"));
        }
        seen |= bit;
        let value = decode(raw_value, parameter.keeps_plus())
            .map_err(|()| invalid(parameter, None, "not valid UTF-8 after decoding"))?;
        if value.is_empty() && !matches!(parameter, Parameter::StationIds) && !parameter.is_list() {
            return Err(invalid(parameter, Some(&value), "must not be empty"));
        }
        params.take(endpoint, parameter, value, &limits)?;
    }
    params.complete(endpoint)?;
    Ok(params)
}

impl QueryParams {
    /// Takes one parameter's decoded value: a list's items are added to those
    /// given before.
    fn take(
        &mut self,
        endpoint: Endpoint,
        parameter: Parameter,
        value: Cow<'_, str>,
        limits: &Limits,
    ) -> Result<(), QueryError> {
        match parameter {
            Parameter::StationIds => {
                let stations = list_items(&value);
                if !stations.is_empty() {
                    if stations.len() > limits.max_stations {
                        return Err(QueryError::TooManyStations {
                            count: stations.len(),
                            max: limits.max_stations,
                        });
                    }
                    self.station_ids = Some(stations);
                }
            }
            Parameter::From | Parameter::To | Parameter::BaselineFrom | Parameter::BaselineTo => {
                let instant = parse_query_time(&value).ok_or_else(|| {
                    invalid(
                        parameter,
                        Some(&value),
                        "expected an RFC 3339 date-time or Unix epoch milliseconds",
                    )
                })?;
                *match parameter {
                    Parameter::From => &mut self.from,
                    Parameter::To => &mut self.to,
                    Parameter::BaselineFrom => &mut self.baseline_from,
                    _ => &mut self.baseline_to,
                } = Some(instant);
            }
            Parameter::Rules => {
                let mut bits = self.rules.map_or(0, |Rules(bits)| bits);
                for item in list_items(&value) {
                    let number = match item.as_str() {
                        "1" | "2" | "3" | "4" | "5" | "6" | "7" | "8" => item.as_bytes()[0] - b'0',
                        _ => {
                            return Err(invalid(
                                parameter,
                                Some(&item),
                                "each item must be a Nelson rule's number, `1` to `8`",
                            ))
                        }
                    };
                    bits |= 1 << (number - 1);
                }
                self.rules = (bits != 0).then_some(Rules(bits));
            }
            Parameter::Type => self.unit_types.extend(list_items(&value)),
            Parameter::Names => self.names.extend(list_items(&value)),
            // Compared ignoring ASCII case: `FAIL` and `fail` are one filter, so
            // one cursor scope.
            Parameter::Result => self.results.extend(
                list_items(&value)
                    .iter()
                    .map(|item| item.to_ascii_lowercase()),
            ),
            Parameter::Direction => {
                for item in list_items(&value) {
                    let direction = Direction::parse(&item).ok_or_else(|| {
                        invalid(parameter, Some(&item), "must be `input` or `output`")
                    })?;
                    self.directions.insert(direction);
                }
            }
            Parameter::SerialNumber => self.unit_serial = Some(value.into_owned()),
            Parameter::Limit => self.limit = Some(limit(&value, limits)?),
            Parameter::Cursor => self.cursor = Some(value.into_owned()),
            Parameter::GroupBy => self.take_group_fields(endpoint, &value)?,
            Parameter::Bucket => {
                let bucket = Bucket::parse(&value).ok_or_else(|| {
                    invalid(
                        parameter,
                        Some(&value),
                        "must be a duration from `1m` to `31d`: digits without a leading zero, then `m`, `h` or `d`",
                    )
                })?;
                self.bucket = Some(bucket);
            }
            Parameter::Tz => {
                self.zone = Zone::parse(&value).ok_or_else(|| {
                    invalid(
                        parameter,
                        Some(&value),
                        "must be an IANA time zone name, such as `UTC` or `Europe/Berlin`",
                    )
                })?;
            }
            Parameter::Format => {
                self.format =
                    Some(Format::parse(&value).ok_or_else(|| {
                        invalid(parameter, Some(&value), "must be `json` or `csv`")
                    })?);
            }
            Parameter::Wait => {
                self.wait = Some(wait(&value, limits.max_wait).ok_or_else(|| {
                    invalid(
                        parameter,
                        Some(&value),
                        &format!(
                            "must be a duration from `1s` to `{}`: digits without a leading zero, then `s` or `m`",
                            duration_text(limits.max_wait)
                        ),
                    )
                })?);
            }
            Parameter::LastEventId => self.last_event_id = Some(value.into_owned()),
        }
        Ok(())
    }

    /// Takes `group_by`'s fields. Their order matters (it is the rows' sort
    /// order): the first occurrence of each is kept.
    fn take_group_fields(&mut self, endpoint: Endpoint, value: &str) -> Result<(), QueryError> {
        for item in value
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
        {
            let field = GroupField::parse(endpoint, item).ok_or_else(|| {
                invalid(Parameter::GroupBy, Some(item), &group_by_reason(endpoint))
            })?;
            if !self.group_by.contains(&field) {
                self.group_by.push(field);
            }
        }
        Ok(())
    }

    /// Once every parameter is taken: the defaults of what was not given, lists
    /// sorted without repeats, and the check that needs them all.
    fn complete(&mut self, endpoint: Endpoint) -> Result<(), QueryError> {
        if endpoint.groups() && self.group_by.is_empty() {
            self.group_by.push(GroupField::StationId);
        }

        if self.directions.is_empty() {
            self.directions = Directions::OUTPUT;
        }
        sort_and_deduplicate(&mut self.unit_types);
        sort_and_deduplicate(&mut self.names);
        sort_and_deduplicate(&mut self.results);
        if self.cursor.is_some() && self.limit.is_none() {
            return Err(invalid(Parameter::Cursor, None, "`cursor` needs `limit`"));
        }
        match (self.baseline_from, self.baseline_to) {
            (Some(_), None) => Err(invalid(
                Parameter::BaselineTo,
                None,
                "`baseline_from` needs `baseline_to`: give both or neither",
            )),
            (None, Some(_)) => Err(invalid(
                Parameter::BaselineFrom,
                None,
                "`baseline_to` needs `baseline_from`: give both or neither",
            )),
            _ => Ok(()),
        }
    }
}

/// `wait`: `15s`, `2m`: digits without a leading zero, then `s` or `m`, from 1 s
/// to `max_wait`.
fn wait(value: &str, max_wait: Duration) -> Option<Duration> {
    let unit_seconds = match value.as_bytes().last()? {
        b's' => 1,
        b'm' => 60,
        _ => return None,
    };
    let digits = &value[..value.len() - 1];
    if digits.is_empty() || digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seconds = digits.parse::<u64>().ok()?.checked_mul(unit_seconds)?;
    Some(Duration::from_secs(seconds)).filter(|wait| *wait <= max_wait)
}

/// `limit`: a whole number from 1 to `--max-records`, in plain digits.
fn limit(value: &str, limits: &Limits) -> Result<usize, QueryError> {
    value
        .bytes()
        .all(|byte| byte.is_ascii_digit())
        .then(|| value.parse::<usize>().ok())
        .flatten()
        .filter(|limit| (1..=limits.max_records).contains(limit))
        .ok_or_else(|| {
            invalid(
                Parameter::Limit,
                Some(value),
                &format!("must be a whole number from 1 to {}", limits.max_records),
            )
        })
}

impl QueryParams {
    /// `wait`, if given: how long a request may be held for a change.
    pub fn wait(&self) -> Option<Duration> {
        self.wait
    }

    /// `from`, if given.
    pub(crate) fn from(&self) -> Option<Timestamp> {
        self.from
    }

    /// A stream's `last_event_id`, if given.
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_event_id.as_deref()
    }

    /// Summaries only: the names of the row's group fields, in the order given,
    /// each once.
    pub(crate) fn group_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.group_by.iter().map(|field| field.name())
    }

    /// Summaries only: whether rows are cut into buckets (`bucket`), and so have a
    /// `bucket_start`.
    pub(crate) fn has_bucket(&self) -> bool {
        self.bucket.is_some()
    }

    /// The window of docs/api.md section 5, with `now` the time the request arrived,
    /// no longer than `max_window` (section 9).
    pub(crate) fn window(
        &self,
        now: Timestamp,
        max_window: Option<Duration>,
    ) -> Result<Window, QueryError> {
        let (from, to) = match (self.from, self.to) {
            (Some(from), Some(to)) => (from, to),
            (Some(from), None) => (from, from.add_seconds(DAY_SECONDS)),
            (None, Some(to)) => (to.add_seconds(-DAY_SECONDS), to),
            (None, None) => (now.add_seconds(-DAY_SECONDS), now),
        };
        checked_window(from, to, max_window, WindowOf::Query)
    }

    /// `/metrics/control`'s baseline window: the one `baseline_from` and
    /// `baseline_to` give, no longer than `max_window`; `None` without them (the
    /// query's window is the baseline).
    pub(crate) fn baseline(
        &self,
        max_window: Option<Duration>,
    ) -> Result<Option<Window>, QueryError> {
        let (Some(from), Some(to)) = (self.baseline_from, self.baseline_to) else {
            return Ok(None);
        };
        checked_window(from, to, max_window, WindowOf::Baseline).map(Some)
    }

    /// `/metrics/control`'s rules: those given, or all eight.
    pub(crate) fn rules(&self) -> Rules {
        self.rules.unwrap_or(Rules::ALL)
    }

    /// Whether the request named its window itself; a cursor pins it otherwise.
    pub(crate) fn has_window(&self) -> bool {
        self.from.is_some() || self.to.is_some()
    }
}

/// The window from `from` to `to`, if `from` is before `to` and it is no longer
/// than `max_window`.
fn checked_window(
    from: Timestamp,
    to: Timestamp,
    max_window: Option<Duration>,
    of: WindowOf,
) -> Result<Window, QueryError> {
    if from >= to {
        return Err(QueryError::InvalidWindow {
            from,
            to,
            bounds: of.bounds(),
        });
    }
    if let Some(max_window) = max_window {
        if to.nanos_since(from) > max_window.as_nanos() as i128 {
            return Err(QueryError::WindowTooLarge {
                from,
                to,
                max_window,
                bounds: of.bounds(),
            });
        }
    }
    Ok(Window { from, to })
}

/// "each item must be `station_id`, `slot` or `unit`": the fields `endpoint` takes.
fn group_by_reason(endpoint: Endpoint) -> String {
    let fields: Vec<String> = endpoint
        .spec()
        .group_fields
        .iter()
        .map(|field| format!("`{}`", field.name()))
        .collect();
    match fields.split_last() {
        Some((last, [])) => format!("each item must be {last}"),
        Some((last, others)) => format!("each item must be {} or {last}", others.join(", ")),
        None => "this endpoint groups by nothing".to_owned(),
    }
}

fn invalid(parameter: Parameter, value: Option<&str>, reason: &str) -> QueryError {
    QueryError::InvalidParameter {
        parameter: parameter.name().to_owned(),
        value: value.map(str::to_owned),
        reason: reason.to_owned(),
    }
}

/// Comma-separated items, trimmed, without empty items and repeats, in byte order.
fn list_items(value: &str) -> Vec<String> {
    let mut items: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect();
    sort_and_deduplicate(&mut items);
    items
}

fn sort_and_deduplicate(items: &mut Vec<String>) {
    items.sort_unstable();
    items.dedup();
}

/// Percent-decoding; `+` is a space unless `keep_plus`. Fails on invalid UTF-8.
fn decode(raw: &str, keep_plus: bool) -> Result<Cow<'_, str>, ()> {
    // Most names and values have nothing to decode, and are already UTF-8.
    let plain = |byte: &u8| *byte != b'%' && (keep_plus || *byte != b'+');
    if raw.as_bytes().iter().all(plain) {
        return Ok(Cow::Borrowed(raw));
    }
    if !keep_plus && raw.contains('+') {
        let spaced = raw.replace('+', " ");
        return percent_decode(spaced.as_bytes())
            .decode_utf8()
            .map(|text| Cow::Owned(text.into_owned()))
            .map_err(|_| ());
    }
    percent_decode(raw.as_bytes()).decode_utf8().map_err(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::time::parse_rfc3339;

    const LIMITS: Limits = Limits {
        max_records: 1000,
        max_stations: 3,
        max_query_bytes: 200,
        max_window: None,
        max_wait: Duration::from_secs(60),
    };

    fn units(query: &str) -> Result<QueryParams, QueryError> {
        QueryParams::parse(Endpoint::Units, query, LIMITS)
    }

    /// Issue 23: one table of endpoints. Each has its own path (so route and
    /// metrics label) and ETag seed, and its parser takes exactly the parameters
    /// and group fields the contract gives it.
    #[test]
    fn issue_23_the_endpoint_table_tells_every_endpoint_apart() {
        let specs: Vec<&EndpointSpec> = Endpoint::ALL
            .iter()
            .map(|endpoint| endpoint.spec())
            .collect();
        let distinct = |values: Vec<String>| {
            let count = values.len();
            values
                .into_iter()
                .collect::<std::collections::HashSet<_>>()
                .len()
                == count
        };
        assert!(distinct(
            specs.iter().map(|spec| spec.path.to_owned()).collect()
        ));
        assert!(distinct(
            specs
                .iter()
                .map(|spec| spec.etag_seed.to_string())
                .collect()
        ));
        // The contract's lists (docs/api.md sections 4 and 10), written out here
        // rather than read from the table under test.
        let contract = |endpoint: Endpoint| -> (&[&str], &[GroupField]) {
            match endpoint {
                Endpoint::Units => (
                    &[
                        "station_ids",
                        "from",
                        "to",
                        "type",
                        "serial_number",
                        "result",
                        "direction",
                        "limit",
                        "cursor",
                    ],
                    &[],
                ),
                Endpoint::Metrics => (
                    &[
                        "station_ids",
                        "from",
                        "to",
                        "names",
                        "serial_number",
                        "limit",
                        "cursor",
                    ],
                    &[],
                ),
                Endpoint::UnitsSummary => (
                    &[
                        "station_ids",
                        "from",
                        "to",
                        "type",
                        "serial_number",
                        "group_by",
                        "bucket",
                        "tz",
                    ],
                    &[
                        GroupField::StationId,
                        GroupField::Slot,
                        GroupField::UnitType,
                        GroupField::Mode,
                    ],
                ),
                Endpoint::MetricsSummary => (
                    &[
                        "station_ids",
                        "from",
                        "to",
                        "names",
                        "group_by",
                        "bucket",
                        "tz",
                    ],
                    &[GroupField::StationId, GroupField::Slot, GroupField::Unit],
                ),
                Endpoint::Stations => (&["station_ids"], &[]),
                Endpoint::MetricsControl => (
                    &[
                        "station_ids",
                        "from",
                        "to",
                        "names",
                        "group_by",
                        "baseline_from",
                        "baseline_to",
                        "rules",
                    ],
                    &[GroupField::StationId, GroupField::Slot, GroupField::Unit],
                ),
            }
        };
        for endpoint in Endpoint::ALL {
            let path = endpoint.spec().path;
            let same_path = Endpoint::ALL
                .iter()
                .filter(|other| other.spec().path == path);
            assert_eq!(same_path.count(), 1, "{path}");
            let spec = endpoint.spec();
            let (parameters, group_fields) = contract(endpoint);
            for name in [
                "station_ids",
                "from",
                "to",
                "type",
                "serial_number",
                "direction",
                "names",
                "limit",
                "cursor",
                "group_by",
                "bucket",
                "tz",
                "baseline_from",
                "baseline_to",
                "rules",
            ] {
                let value = match name {
                    "from" | "baseline_from" => "2024-01-01T00:00:00Z",
                    "to" | "baseline_to" => "2024-01-02T00:00:00Z",
                    "rules" => "1",
                    "direction" => "input",
                    "limit" => "5",
                    "group_by" => "slot",
                    "bucket" => "1h",
                    "tz" => "UTC",
                    _ => "x",
                };
                let listed = parameters.contains(&name);
                let accepted = QueryParams::parse(endpoint, &format!("{name}={value}"), LIMITS)
                    .map_or_else(
                        |error| code::<()>(Err(error)) != "unknown_parameter",
                        |_| true,
                    );
                assert_eq!(listed, accepted, "{} {name}", spec.path);
            }
            for field in [
                GroupField::StationId,
                GroupField::Slot,
                GroupField::UnitType,
                GroupField::Mode,
                GroupField::Unit,
            ] {
                let grouped =
                    QueryParams::parse(endpoint, &format!("group_by={}", field.name()), LIMITS);
                assert_eq!(
                    group_fields.contains(&field),
                    grouped.is_ok(),
                    "{} group_by={}",
                    spec.path,
                    field.name()
                );
            }
        }
        assert_eq!(Kind::Units.path(), "/units");
        assert_eq!(Kind::Metrics.path(), "/metrics");
    }

    /// Issue 34: every endpoint takes `format`, once, as `json` or `csv`; not
    /// given, it is `None` (the `Accept` header decides).
    #[test]
    fn issue_34_every_endpoint_takes_format_json_or_csv_once() {
        for endpoint in Endpoint::ALL {
            let format = |query: &str| {
                QueryParams::parse(endpoint, query, LIMITS).map(|params| params.format)
            };
            assert_eq!(format(""), Ok(None));
            assert_eq!(format("format=json"), Ok(Some(Format::Json)));
            assert_eq!(format("format=csv"), Ok(Some(Format::Csv)));
            for refused in [
                "format=",
                "format=CSV",
                "format=xml",
                "format=csv,json",
                "format=csv&format=csv",
                "format=json&format=csv",
            ] {
                assert_eq!(code(format(refused)), "invalid_parameter", "{refused}");
            }
        }
    }

    /// The contract's name of the refusal, as the HTTP layer will map it.
    fn code<T: std::fmt::Debug>(result: Result<T, QueryError>) -> &'static str {
        match result.expect_err("should be rejected") {
            QueryError::InvalidParameter { .. } => "invalid_parameter",
            QueryError::UnknownParameter { .. } => "unknown_parameter",
            QueryError::InvalidWindow { .. } => "invalid_window",
            QueryError::TooManyStations { .. } => "too_many_stations",
            QueryError::UriTooLong { .. } => "uri_too_long",
            QueryError::WindowTooLarge { .. } => "window_too_large",
        }
    }

    #[test]
    fn summaries_take_group_by_in_order_and_a_bucket() {
        let summary = |query| QueryParams::parse(Endpoint::UnitsSummary, query, LIMITS);
        assert_eq!(summary("").unwrap().group_by, [GroupField::StationId]);
        assert_eq!(
            summary("group_by=").unwrap().group_by,
            [GroupField::StationId]
        );
        assert_eq!(
            summary("group_by=mode,%20slot&group_by=mode,station_id")
                .unwrap()
                .group_by,
            [GroupField::Mode, GroupField::Slot, GroupField::StationId]
        );
        assert_eq!(
            summary("bucket=15m").unwrap().bucket.unwrap().seconds(),
            900
        );
        assert_eq!(
            summary("bucket=31d").unwrap().bucket.unwrap().seconds(),
            31 * 86400
        );
        assert_eq!(
            summary("bucket=744h").unwrap().bucket.unwrap().seconds(),
            31 * 86400
        );
        for query in [
            "bucket=0m",
            "bucket=01h",
            "bucket=745h",
            "bucket=32d",
            "bucket=1s",
            "bucket=1",
            "bucket=h",
            "bucket=1H",
            "bucket=+1h",
            "bucket=1h&bucket=1h",
            "bucket=",
            "group_by=unit",
            "group_by=name",
            "group_by=Station_id",
        ] {
            assert_eq!(code(summary(query)), "invalid_parameter", "{query}");
        }
        let metrics = |query| QueryParams::parse(Endpoint::MetricsSummary, query, LIMITS);
        assert_eq!(
            metrics("group_by=unit,slot").unwrap().group_by,
            [GroupField::Unit, GroupField::Slot]
        );
        assert_eq!(code(metrics("group_by=mode")), "invalid_parameter");
        assert_eq!(code(metrics("group_by=name")), "invalid_parameter");
    }

    /// Issue 34: `/units` takes `result`, a list in both forms, matched ignoring
    /// ASCII case, so its items are normalized to lower case; `/metrics` takes
    /// `serial_number`, single-valued as on `/units`.
    #[test]
    fn issue_34_result_on_units_and_serial_number_on_metrics() {
        let params = units("result=FAIL,abort&result=Fail&result=,+").unwrap();
        assert_eq!(params.results, ["abort", "fail"]);
        assert_eq!(units("result=").unwrap().results, Vec::<String>::new());
        let metrics = |query| QueryParams::parse(Endpoint::Metrics, query, LIMITS);
        let params = metrics("serial_number=SN%2C1").unwrap();
        assert_eq!(params.unit_serial.as_deref(), Some("SN,1"));
        assert_eq!(
            code(metrics("serial_number=a&serial_number=b")),
            "invalid_parameter"
        );
        assert_eq!(code(metrics("serial_number=")), "invalid_parameter");
    }

    #[test]
    fn each_endpoint_takes_only_its_own_parameters() {
        for (endpoint, query) in [
            (Endpoint::UnitsSummary, "limit=5"),
            (Endpoint::UnitsSummary, "cursor=x"),
            (Endpoint::UnitsSummary, "direction=output"),
            (Endpoint::UnitsSummary, "names=x"),
            (Endpoint::MetricsSummary, "type=x"),
            (Endpoint::MetricsSummary, "serial_number=x"),
            (Endpoint::UnitsSummary, "result=pass"),
            (Endpoint::Metrics, "result=pass"),
            (Endpoint::Stations, "from=2024-01-01T00:00:00Z"),
            (Endpoint::Stations, "group_by=station_id"),
            (Endpoint::Stations, "limit=1"),
            (Endpoint::Units, "group_by=station_id"),
            (Endpoint::Metrics, "bucket=1h"),
        ] {
            assert_eq!(
                code(QueryParams::parse(endpoint, query, LIMITS)),
                "unknown_parameter",
                "{endpoint:?} {query}"
            );
        }
        assert!(QueryParams::parse(Endpoint::Stations, "station_ids=A", LIMITS).is_ok());
        assert!(QueryParams::parse(
            Endpoint::UnitsSummary,
            "type=a&serial_number=b&from=1&to=2",
            LIMITS
        )
        .is_ok());
        assert!(QueryParams::parse(Endpoint::MetricsSummary, "names=a&names=b", LIMITS).is_ok());
    }

    #[test]
    fn issue_23_summaries_take_one_iana_time_zone() {
        for endpoint in [Endpoint::UnitsSummary, Endpoint::MetricsSummary] {
            let summary = |query| QueryParams::parse(endpoint, query, LIMITS);
            assert_eq!(summary("").unwrap().zone, Zone::Utc);
            assert_eq!(summary("tz=UTC").unwrap().zone, Zone::Utc);
            assert_eq!(
                summary("tz=Asia%2FKolkata&bucket=1d").unwrap().zone.name(),
                "Asia/Kolkata"
            );
            for query in [
                "tz=",
                "tz=Mars%2FOlympus",
                "tz=europe/berlin",
                "tz=%2B01:00",
                "tz=UTC&tz=UTC",
            ] {
                assert_eq!(code(summary(query)), "invalid_parameter", "{query}");
            }
        }
        for endpoint in [Endpoint::Units, Endpoint::Metrics, Endpoint::Stations] {
            assert_eq!(
                code(QueryParams::parse(endpoint, "tz=UTC", LIMITS)),
                "unknown_parameter"
            );
        }
    }

    #[test]
    fn a_bucket_ending_in_a_multi_byte_character_is_refused() {
        for text in ["é", "1é", "1hé", "€", "1m€"] {
            assert_eq!(Bucket::parse(text), None, "{text}");
        }
    }

    #[test]
    fn nothing_given_means_every_default() {
        let params = units("").unwrap();
        assert_eq!(params.station_ids, None);
        assert_eq!(params.directions, Directions::OUTPUT);
        assert!(params.unit_types.is_empty());
        assert_eq!(params.limit, None);
    }

    #[test]
    fn lists_combine_both_forms_trimmed_and_deduplicated() {
        let params = units("type=b,%20a&type=a&type=,&direction=input%2Coutput").unwrap();
        assert_eq!(params.unit_types, ["a", "b"]);
        assert_eq!(params.directions, Directions::BOTH);
        let params = QueryParams::parse(Endpoint::Metrics, "names=x&names=y,x", LIMITS).unwrap();
        assert_eq!(params.names, ["x", "y"]);
        let params = units("station_ids=B,A,%20B%20,,").unwrap();
        assert_eq!(params.station_ids, Some(vec!["A".into(), "B".into()]));
    }

    #[test]
    fn an_empty_list_is_not_given() {
        assert_eq!(units("station_ids=").unwrap().station_ids, None);
        assert_eq!(units("direction=").unwrap().directions, Directions::OUTPUT);
        assert_eq!(
            units("direction=,,").unwrap().directions,
            Directions::OUTPUT
        );
    }

    #[test]
    fn plus_is_a_space_except_in_times() {
        let params = units("serial_number=a+b&from=2024-01-01T00:00:00+01:00").unwrap();
        assert_eq!(params.unit_serial.as_deref(), Some("a b"));
        assert_eq!(params.from, parse_rfc3339("2024-01-01T00:00:00+01:00"));
        // An encoded space is still a space, and a space for the offset sign is wrong.
        assert_eq!(
            code(units("from=2024-01-01T00:00:00%2001:00")),
            "invalid_parameter"
        );
        assert_eq!(
            units("from=2024-01-01T00:00:00%2B01:00").unwrap().from,
            parse_rfc3339("2024-01-01T00:00:00+01:00")
        );
    }

    #[test]
    fn unknown_names_are_rejected_first() {
        assert_eq!(code(units("station_id=A")), "unknown_parameter");
        assert_eq!(code(units("from=bad&names=x")), "unknown_parameter");
        assert_eq!(
            code(QueryParams::parse(Endpoint::Metrics, "type=x", LIMITS)),
            "unknown_parameter"
        );
        assert_eq!(code(units("Station_ids=A")), "unknown_parameter");
        assert_eq!(code(units("access_token=x")), "unknown_parameter");
        match units("%73tation_id=1") {
            Err(QueryError::UnknownParameter { parameter }) => assert_eq!(parameter, "station_id"),
            other => panic!("{other:?}"),
        }
        // A name made of a decoded `station_ids` is that parameter.
        assert!(units("%73tation_ids=A").is_ok());
    }

    #[test]
    fn single_values_may_not_repeat_or_be_empty() {
        for query in [
            "station_ids=A&station_ids=B",
            "from=1&from=1",
            "serial_number=a&serial_number=a",
            "limit=1&limit=1",
            "from=",
            "to=",
            "serial_number=",
            "limit=",
            "cursor=",
            "from",
        ] {
            assert_eq!(code(units(query)), "invalid_parameter", "{query}");
        }
    }

    #[test]
    fn bad_values_name_the_parameter_and_value() {
        match units("to=2024-01-01%2000:00:00Z") {
            Err(QueryError::InvalidParameter {
                parameter, value, ..
            }) => {
                assert_eq!(parameter, "to");
                assert_eq!(value.as_deref(), Some("2024-01-01 00:00:00Z"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(code(units("direction=up")), "invalid_parameter");
        assert_eq!(code(units("direction=Output")), "invalid_parameter");
        assert_eq!(code(units("from=%FF")), "invalid_parameter");
    }

    #[test]
    fn limits_are_whole_numbers_within_max_records() {
        assert_eq!(units("limit=0007").unwrap().limit, Some(7));
        assert_eq!(units("limit=1000").unwrap().limit, Some(1000));
        for query in [
            "limit=0",
            "limit=1001",
            "limit=-1",
            "limit=+1",
            "limit=1.0",
            "limit=abc",
            "limit=99999999999999999999999",
        ] {
            assert_eq!(code(units(query)), "invalid_parameter", "{query}");
        }
        assert_eq!(code(units("cursor=abc")), "invalid_parameter");
    }

    #[test]
    fn too_many_stations_counts_distinct_ids() {
        assert!(units("station_ids=A,B,C,A,B").is_ok());
        assert_eq!(code(units("station_ids=A,B,C,D")), "too_many_stations");
    }

    #[test]
    fn windows_default_to_a_day() {
        let now = parse_rfc3339("2024-01-02T00:00:00Z").unwrap();
        let day_before = parse_rfc3339("2024-01-01T00:00:00Z").unwrap();
        let window = units("").unwrap().window(now, None).unwrap();
        assert_eq!((window.from, window.to), (day_before, now));
        let window = units("from=2024-01-01T00:00:00Z")
            .unwrap()
            .window(now, None)
            .unwrap();
        assert_eq!((window.from, window.to), (day_before, now));
        let window = units("to=2024-01-02T00:00:00Z")
            .unwrap()
            .window(Timestamp::MIN, None)
            .unwrap();
        assert_eq!((window.from, window.to), (day_before, now));
        let window = units("from=1704067200000&to=1704153600000")
            .unwrap()
            .window(now, None)
            .unwrap();
        assert_eq!((window.from, window.to), (day_before, now));
    }

    #[test]
    fn an_empty_or_reversed_window_is_invalid() {
        let now = Timestamp::from(chrono::Utc::now());
        let same = units("from=2024-01-01T00:00:00Z&to=2024-01-01T01:00:00+01:00").unwrap();
        assert_eq!(code(same.window(now, None)), "invalid_window");
        let reversed = units("from=2024-01-02T00:00:00Z&to=2024-01-01T00:00:00Z").unwrap();
        assert_eq!(code(reversed.window(now, None)), "invalid_window");
    }

    #[test]
    fn a_window_may_be_as_long_as_the_limit_but_no_longer() {
        let now = parse_rfc3339("2024-01-02T00:00:00Z").unwrap();
        let day = Some(Duration::from_secs(24 * 3600));
        let half_day = Some(Duration::from_secs(12 * 3600));
        assert!(units("").unwrap().window(now, day).is_ok());
        // The default window counts too.
        assert_eq!(
            code(units("").unwrap().window(now, half_day)),
            "window_too_large"
        );
        let exact = units("from=2024-01-01T00:00:00Z&to=2024-01-01T12:00:00Z").unwrap();
        assert!(exact.window(now, half_day).is_ok());
        let one_nanosecond_more =
            units("from=2024-01-01T00:00:00Z&to=2024-01-01T12:00:00.000000001Z").unwrap();
        assert_eq!(
            code(one_nanosecond_more.window(now, half_day)),
            "window_too_large"
        );
        // An empty window is reported as such, whatever the limit.
        let reversed = units("from=2024-01-02T00:00:00Z&to=2024-01-01T00:00:00Z").unwrap();
        assert_eq!(code(reversed.window(now, half_day)), "invalid_window");
    }

    #[test]
    fn a_query_string_longer_than_the_limit_is_refused_before_it_is_read() {
        let longest = format!("station_ids={}", "A".repeat(200 - "station_ids=".len()));
        assert_eq!(longest.len(), 200);
        assert!(units(&longest).is_ok());
        let too_long = format!("{longest}B");
        assert_eq!(code(units(&too_long)), "uri_too_long");
        // Even an unknown parameter is not looked at.
        assert_eq!(
            code(units(&format!("x={}", "A".repeat(300)))),
            "uri_too_long"
        );
    }

    /// Issue 52: `/metrics/control`'s baseline is both of its bounds or neither,
    /// checked as a window (and against `--max-window`) of its own; `rules` takes
    /// the numbers 1 to 8 in both list forms.
    #[test]
    fn issue_52_a_baseline_is_both_bounds_and_rules_are_one_to_eight() {
        let control = |query: &str| QueryParams::parse(Endpoint::MetricsControl, query, LIMITS);
        let day = Some(Duration::from_secs(DAY_SECONDS as u64));
        let neither = control("").unwrap();
        assert_eq!(neither.baseline(day), Ok(None));
        assert_eq!(neither.rules(), Rules::ALL);
        let both =
            control("baseline_from=2024-01-01T00:00:00Z&baseline_to=2024-01-01T06:00:00Z").unwrap();
        let window = both.baseline(day).unwrap().unwrap();
        assert_eq!(window.to.nanos_since(window.from), 6 * 3600 * 1_000_000_000);
        for one in [
            "baseline_from=2024-01-01T00:00:00Z",
            "baseline_to=2024-01-01T00:00:00Z",
        ] {
            let error = control(one).unwrap_err();
            assert_eq!(code::<()>(Err(error)), "invalid_parameter", "{one}");
        }
        let reversed =
            control("baseline_from=2024-01-02T00:00:00Z&baseline_to=2024-01-01T00:00:00Z").unwrap();
        let error = reversed.baseline(day).unwrap_err();
        assert_eq!(
            error.to_string(),
            "`baseline_from` must be before `baseline_to`"
        );
        let long =
            control("baseline_from=2024-01-01T00:00:00Z&baseline_to=2024-01-03T00:00:00Z").unwrap();
        assert_eq!(code(long.baseline(day)), "window_too_large");
        assert!(long.baseline(None).is_ok());

        let rules = control("rules=2,1&rules=8").unwrap().rules();
        assert!([1, 2, 8].iter().all(|&rule| rules.contains(rule)));
        assert!(![3, 4, 5, 6, 7].iter().any(|&rule| rules.contains(rule)));
        assert_eq!(rules, Rules::of(&[1, 2, 8]));
        assert_eq!(control("rules=").unwrap().rules(), Rules::ALL);
        for bad in ["0", "9", "01", "1.0", "one", "1-3"] {
            let error = control(&format!("rules={bad}")).unwrap_err();
            assert_eq!(code::<()>(Err(error)), "invalid_parameter", "{bad}");
        }
        // The other summaries take none of these.
        for query in ["rules=1", "baseline_from=2024-01-01T00:00:00Z"] {
            let error = QueryParams::parse(Endpoint::MetricsSummary, query, LIMITS).unwrap_err();
            assert_eq!(code::<()>(Err(error)), "unknown_parameter");
        }
    }
}
