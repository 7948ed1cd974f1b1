//! The invariants of the two parsers that read hostile input directly, written
//! once and shared by this crate's property tests (`parser_properties`) and the
//! cargo-fuzz targets under `fuzz/fuzz_targets/` (which build this crate with its
//! `checks` feature, the only way this module is built outside its tests):
//!
//! - [`Kind::check_query`]: [`QueryParams::parse`] (CONTRACT sections 4, 5 and 9) never
//!   panics, and a query it accepts respects every limit and is normalized.
//! - [`Kind::check_line`]: [`crate::domain::record::parse_line`] (CONTRACT section 2) never panics; a
//!   line it accepts renders a record that is JSON, has exactly the fields of its
//!   kind, and returns every field as the line wrote it (`time_created` verbatim);
//!   a line it rejects leaves the caller's buffer as it was.
//!
//! - [`Tokens::check_authorization`]: an `Authorization` header read both ways
//!   (docs/api.md sections 3 and 16), by [`Tokens::authenticate`] and by
//!   [`crate::domain::jwt`]'s shape, header and claims readers, never panics; the
//!   two agree on the bearer token, a JWT's parts are what its shape says, an
//!   accepted header and claims are what their JSON says, and no refusal's
//!   message holds the token.
//!
//! Failures are panics with a message naming the input, so that proptest shrinks
//! them and libFuzzer saves them as crashes alike. The checks are methods of
//! [`Kind`], so that this module stays private: the fuzz targets call
//! `kind.check_line(line)`.

use std::collections::HashMap;

use serde_json::value::RawValue;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chrono::DateTime;
use serde_json::{Map, Value};

use crate::domain::auth::{bearer_token, Scope, Tokens};
use crate::domain::jwt::{self, header_of, json_web_token, read_claims, Refusal};
use crate::domain::query::{Endpoint, Limits, QueryError, QueryParams};
use crate::domain::record::{parse_line, Direction, Directions, IndexedFields, Kind};
use crate::domain::time::{parse_rfc3339, Timestamp};

/// The parsers' invariants, as checks of a kind's queries and lines.
impl Kind {
    /// Parses `query` for this kind's endpoint under `limits`, asserts every
    /// invariant of the result, and also of its window with `now` as the time the
    /// request arrived. Returns the accepted parameters, for callers that compare
    /// spellings.
    pub fn check_query(self, query: &str, limits: Limits, now: Timestamp) -> Option<QueryParams> {
        let result = QueryParams::parse(Endpoint::records(self), query, limits);
        let too_long = query.len() > limits.max_query_bytes;
        assert_eq!(
            limits.check_length(query).is_err(),
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

/// The invariants of reading an `Authorization` header.
impl Tokens {
    /// Reads `authorization` as a request's header at `now` (seconds since the
    /// epoch): as the tokens file's bearer token and, when it has a JWT's shape, as
    /// a JWT's header and claims (the claims as if its signature had verified, with
    /// the stations claim `stq_stations`), asserting every invariant of each step.
    pub fn check_authorization(&self, authorization: &[u8], now: u64) {
        let instant = DateTime::from_timestamp(now as i64, 0).expect("a time of this era");
        let bearer = bearer_token(Some(authorization));
        if let Ok(principal) = self.authenticate(Some(authorization), instant.into()) {
            assert!(
                bearer.is_some_and(|token| !token.is_empty()),
                "a principal without a bearer token: {authorization:?}"
            );
            assert!(principal
                .expires
                .is_none_or(|expires| Timestamp::from(instant) < expires));
        }
        let Some(token) = json_web_token(authorization) else {
            return;
        };
        assert_eq!(
            bearer,
            Some(token.as_bytes()),
            "the JWT reader and the tokens file's disagree on the token: {authorization:?}"
        );
        let parts: Vec<&str> = token.split('.').collect();
        assert!(
            parts.len() == 3 && !parts[0].is_empty() && !parts[1].is_empty(),
            "not a JWT's shape: {token:?}"
        );
        let decoded = |part: &str| {
            let bytes = URL_SAFE_NO_PAD.decode(part).ok()?;
            serde_json::from_slice::<Map<String, Value>>(&bytes).ok()
        };
        match header_of(token) {
            Ok(header) => {
                let json = decoded(parts[0]).expect("an accepted header is base64url JSON");
                assert_eq!(json["alg"], header.algorithm.name(), "{token:?}");
                assert_eq!(
                    json.get("kid")
                        .map(|kid| kid.as_str().expect("a string kid")),
                    header.key_id.as_deref(),
                    "{token:?}"
                );
            }
            Err(refusal) => {
                assert!(
                    matches!(refusal, Refusal::Malformed(_) | Refusal::Algorithm(_)),
                    "{refusal:?} of a header: {token:?}"
                );
                assert_refusal_hides(&refusal, token);
            }
        }
        if let Some(claims) = decoded(parts[1]) {
            check_claims(&claims, now, token);
        }
    }
}

/// [`read_claims`] of `claims` at `now`: what it accepts is what the claims say.
fn check_claims(claims: &Map<String, Value>, now: u64, token: &str) {
    let read = match read_claims(claims, "stq_stations", now, [0; 32]) {
        Ok(read) => read,
        Err(refusal) => {
            assert!(
                matches!(
                    refusal,
                    Refusal::IssuedLater
                        | Refusal::MissingClaim(_)
                        | Refusal::Stations(_)
                        | Refusal::Claims(_)
                ),
                "{refusal:?} of claims: {token:?}"
            );
            assert_refusal_hides(&refusal, token);
            return;
        }
    };
    if let Some(issued) = claims.get("iat") {
        let issued = issued.as_u64().expect("an accepted `iat` is whole seconds");
        assert!(issued <= now + jwt::LEEWAY_SECONDS, "{token:?}");
    }
    match (&claims["stq_stations"], &read.scope) {
        (Value::String(star), Scope::All) => assert_eq!(star, "*", "{token:?}"),
        (Value::Array(ids), Scope::Stations(stations)) => {
            assert!(ids
                .iter()
                .all(|id| id.as_str().is_some_and(|id| stations.contains(id))));
            assert!(stations
                .iter()
                .all(|station| ids.contains(&Value::from(station.as_str()))));
        }
        (claim, read) => panic!("the stations claim {claim} read as {read:?}: {token:?}"),
    }
    assert_eq!(
        read.name,
        claims.get("sub").and_then(Value::as_str).unwrap_or(""),
        "{token:?}"
    );
    if let (Some(exp), Some(expires)) = (claims.get("exp").and_then(Value::as_i64), read.expires) {
        let kept_until = DateTime::from_timestamp(exp, 0).map(Timestamp::from);
        assert!(
            kept_until.is_none_or(|kept_until| kept_until < expires),
            "a token kept until {expires:?}, before its `exp` {exp}: {token:?}"
        );
    }
}

/// A refusal's message names the reason, never the token.
fn assert_refusal_hides(refusal: &Refusal, token: &str) {
    assert!(
        !refusal.to_string().contains(token),
        "the refusal {refusal:?} holds the token {token:?}"
    );
}
