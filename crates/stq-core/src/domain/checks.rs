//! The invariants of the two parsers that read hostile input directly, written
//! once and shared by this crate's property tests (`parser_properties`) and the
//! cargo-fuzz targets under `fuzz/fuzz_targets/` (which build this crate with its
//! `checks` feature, the only way this module is built outside its tests):
//!
//! - [`Kind::check_query`]: [`crate::domain::query::parse`] (CONTRACT sections 4, 5 and 9) never
//!   panics, and a query it accepts respects every limit and is normalized.
//! - [`Kind::check_line`]: [`crate::domain::record::parse_line`] (CONTRACT section 2) never panics; a
//!   line it accepts renders a record that is JSON, has exactly the fields of its
//!   kind, and returns every field as the line wrote it (`time_created` verbatim);
//!   a line it rejects leaves the caller's buffer as it was.
//!
//! Failures are panics with a message naming the input, so that proptest shrinks
//! them and libFuzzer saves them as crashes alike. The checks are methods of
//! [`Kind`], so that this module stays private: the fuzz targets call
//! `kind.check_line(line)`.

use std::collections::HashMap;

use serde_json::value::RawValue;

use crate::domain::query::{self, Endpoint, Limits, QueryError, QueryParams};
use crate::domain::record::{parse_line, Direction, Directions, IndexedFields, Kind};
use crate::domain::time::{parse_rfc3339, Timestamp};

/// The parsers' invariants, as checks of a kind's queries and lines.
impl Kind {
    /// Parses `query` for this kind's endpoint under `limits`, asserts every
    /// invariant of the result, and also of its window with `now` as the time the
    /// request arrived. Returns the accepted parameters, for callers that compare
    /// spellings.
    pub fn check_query(self, query: &str, limits: Limits, now: Timestamp) -> Option<QueryParams> {
        let result = query::parse(Endpoint::records(self), query, limits);
        let too_long = query.len() > limits.max_query_bytes;
        assert_eq!(
            query::check_length(query, &limits).is_err(),
            too_long,
            "check_length disagrees with the limit for {query:?}"
        );
        let params = match result {
            Ok(params) => params,
            Err(error) => {
                if too_long {
                    assert_eq!(code(&error), "uri_too_long", "{query:?}");
                }
                assert_client_error(&error, query);
                return None;
            }
        };
        assert!(
            !too_long,
            "accepted a query longer than the limit: {query:?}"
        );

        if let Some(stations) = &params.station_ids {
            assert!(
                !stations.is_empty(),
                "an empty station list is `None`: {query:?}"
            );
            assert!(
                stations.len() <= limits.max_stations,
                "{} stations accepted, at most {}: {query:?}",
                stations.len(),
                limits.max_stations
            );
            assert_normalized_list(stations, "station_ids", query);
        }
        assert_normalized_list(&params.unit_types, "type", query);
        assert_normalized_list(&params.names, "names", query);
        if let Some(limit) = params.limit {
            assert!(
                (1..=limits.max_records).contains(&limit),
                "limit {limit} outside 1..={}: {query:?}",
                limits.max_records
            );
        }
        if let Some(cursor) = &params.cursor {
            assert!(
                !cursor.is_empty(),
                "an empty cursor was accepted: {query:?}"
            );
            assert!(
                params.limit.is_some(),
                "a cursor without a limit: {query:?}"
            );
        }
        if let Some(serial) = &params.unit_serial {
            assert!(
                !serial.is_empty(),
                "an empty serial_number was accepted: {query:?}"
            );
        }
        assert!(!params.directions.is_empty(), "no direction: {query:?}");
        assert_normalized_list(&params.results, "result", query);
        assert!(
            (params.results.iter())
                .all(|result| !result.bytes().any(|byte| byte.is_ascii_uppercase())),
            "`result` items are compared in ASCII lower case: {query:?}"
        );
        match self {
            Kind::Units => assert!(params.names.is_empty(), "/units took `names`: {query:?}"),
            Kind::Metrics => {
                // The other endpoint's parameters are unknown here, never silently read
                // (`serial_number` is both endpoints').
                assert!(params.unit_types.is_empty(), "{query:?}");
                assert!(params.results.is_empty(), "{query:?}");
                assert_eq!(params.directions, Directions::OUTPUT, "{query:?}");
            }
        }

        for max_window in [None, limits.max_window] {
            match params.window(now, max_window) {
                Ok(window) => {
                    assert!(window.from < window.to, "empty window accepted: {query:?}");
                    if let Some(max_window) = max_window {
                        assert!(
                            window.to.nanos_since(window.from) <= max_window.as_nanos() as i128,
                            "window {window:?} longer than {max_window:?}: {query:?}"
                        );
                    }
                    if let Some(from) = params.from {
                        assert_eq!(window.from, from, "`from` moved: {query:?}");
                    }
                    if let Some(to) = params.to {
                        assert_eq!(window.to, to, "`to` moved: {query:?}");
                    }
                }
                Err(error) => {
                    match code(&error) {
                        "invalid_window" => {}
                        "window_too_large" => assert!(max_window.is_some(), "{query:?}"),
                        other => panic!("window error {other} for {query:?}"),
                    }
                    assert_client_error(&error, query);
                }
            }
        }
        Some(params)
    }

    /// Parses `line` as a snapshot line of this kind and asserts every invariant
    /// of the result. Returns whether the line was accepted.
    pub fn check_line(self, line: &str) -> bool {
        // parse_line appends, so what the buffer held before must survive either way.
        const KEPT: &[u8] = b"kept";
        let mut rendered = KEPT.to_vec();
        let mut unknown = Vec::new();
        let parsed = match parse_line(self, line, &mut rendered, &mut unknown) {
            Ok(parsed) => parsed,
            Err(reason) => {
                assert_eq!(rendered, KEPT, "a rejected line left output: {line:?}");
                assert!(!reason.is_empty(), "a rejection without a reason: {line:?}");
                return false;
            }
        };
        assert!(
            rendered.starts_with(KEPT),
            "the buffer was overwritten: {line:?}"
        );
        let rendered = &rendered[KEPT.len()..];
        let record: HashMap<String, Box<RawValue>> = serde_json::from_slice(rendered)
            .unwrap_or_else(|error| {
                panic!(
                    "rendered record is not a JSON object ({error}): {:?} from {line:?}",
                    String::from_utf8_lossy(rendered)
                )
            });
        // The line was accepted, so it is a JSON object whose keys are distinct.
        let written: HashMap<String, Box<RawValue>> =
            serde_json::from_str(line).unwrap_or_else(|error| {
                panic!("accepted line is not a JSON object ({error}): {line:?}")
            });

        let fields = self.fields();
        let mut keys: Vec<&str> = record.keys().map(String::as_str).collect();
        keys.sort_unstable();
        let mut wanted = fields.to_vec();
        wanted.sort_unstable();
        assert_eq!(keys, wanted, "rendered fields of {line:?}");

        let station_id = rendered_string(&record, "station_id", line);
        assert!(
            !station_id.is_empty(),
            "empty station_id accepted: {line:?}"
        );
        assert_eq!(station_id, parsed.station_id, "{line:?}");
        let time_created = rendered_string(&record, "time_created", line);
        assert_eq!(
            parse_rfc3339(&time_created),
            Some(parsed.instant),
            "time_created and the instant disagree: {line:?}"
        );

        for (field, value) in &record {
            let written = written
                .get(field)
                .map(|raw| raw.get())
                .filter(|raw| *raw != "null");
            match field.as_str() {
                "tags" => {
                    let tags: Vec<String> = serde_json::from_str(value.get())
                        .unwrap_or_else(|_| panic!("tags are not strings: {line:?}"));
                    let expected: Vec<String> = written.map_or_else(Vec::new, |raw| {
                        serde_json::from_str(raw).expect("accepted tags are strings")
                    });
                    assert_eq!(tags, expected, "tags of {line:?}");
                }
                "metadata" => {
                    assert_eq!(
                        value.get(),
                        written.unwrap_or("null"),
                        "metadata of {line:?}"
                    );
                }
                _ => {
                    let text = rendered_string(&record, field, line);
                    let expected = match written {
                        None => String::new(),
                        Some(raw) if raw.starts_with('"') => {
                            serde_json::from_str(raw).expect("accepted string fields are strings")
                        }
                        // A number in `value` or a limit keeps the text it was written with.
                        Some(raw) => raw.to_owned(),
                    };
                    assert_eq!(text, expected, "field `{field}` of {line:?}");
                }
            }
        }

        match (self, &parsed.fields) {
            (Kind::Units, IndexedFields::Unit { direction, .. }) => {
                let text = rendered_string(&record, "direction", line);
                assert_eq!(Direction::parse(&text), Some(*direction), "{line:?}");
            }
            (Kind::Metrics, IndexedFields::Metric { name, .. }) => {
                assert!(!name.is_empty(), "empty name accepted: {line:?}");
                assert_eq!(rendered_string(&record, "name", line), *name, "{line:?}");
            }
            (kind, filter) => panic!("{kind:?} line parsed as {filter:?}: {line:?}"),
        }
        true
    }
}

/// Items of a normalized list: non-empty, trimmed, strictly ascending (so sorted
/// and without repeats).
fn assert_normalized_list(items: &[String], parameter: &str, query: &str) {
    for item in items {
        assert!(
            !item.is_empty() && item.trim() == item,
            "`{parameter}` item {item:?} is empty or untrimmed: {query:?}"
        );
    }
    assert!(
        items.windows(2).all(|pair| pair[0] < pair[1]),
        "`{parameter}` is not sorted and deduplicated: {items:?} from {query:?}"
    );
}

/// The contract's code of a refusal, as the HTTP layer gives it.
pub(crate) fn code(error: &QueryError) -> &'static str {
    match error {
        QueryError::InvalidParameter { .. } => "invalid_parameter",
        QueryError::UnknownParameter { .. } => "unknown_parameter",
        QueryError::InvalidWindow { .. } => "invalid_window",
        QueryError::TooManyStations { .. } => "too_many_stations",
        QueryError::UriTooLong { .. } => "uri_too_long",
        QueryError::WindowTooLarge { .. } => "window_too_large",
    }
}

/// A rejection's message can be rendered; rendering exercises the text built from
/// the hostile values. (Every `QueryError` is a client error by its type.)
fn assert_client_error(error: &QueryError, query: &str) {
    let message = error.to_string();
    assert!(
        !message.is_empty(),
        "{} without a message for {query:?}",
        code(error)
    );
}

fn rendered_string(record: &HashMap<String, Box<RawValue>>, field: &str, line: &str) -> String {
    let raw = record
        .get(field)
        .unwrap_or_else(|| panic!("no `{field}` rendered for {line:?}"));
    serde_json::from_str(raw.get())
        .unwrap_or_else(|_| panic!("`{field}` rendered as {} for {line:?}", raw.get()))
}
