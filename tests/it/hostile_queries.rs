//! Issue 5, "stq holds under hostile input": hostile query strings against one shared
//! server (default flags, the main fixture of `common`), CONTRACT sections 3, 4, 7
//! and 9: 10,000 station ids, NUL in every parameter, odd Unicode and malformed
//! percent escapes, `%2C` and its neighbours, repeated single-valued parameters,
//! years 0000 and 9999 and just beyond, epoch milliseconds at and past the ends of
//! `i64`, huge and odd `limit`s, very long values, and unknown parameters such as
//! `access_token`.
//!
//! Each refusal is checked for its exact status and `error.code`, the contract's
//! error body and an `X-Request-Id`, and against the OpenAPI document the server
//! serves: the pair must be documented for that path. Where the contract makes a
//! hostile value an ordinary one (a NUL in a station id is just an id that matches
//! nothing), the answer is checked as exactly that. Every test ends by checking that
//! the server still answers a normal query and has logged no panic.

use std::sync::OnceLock;

use crate::common::*;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// The main fixture served with `--max-query-bytes 65000` (the most it may be), for
/// lists longer than the default limit lets through.
fn roomy() -> &'static Shared {
    static ROOMY: OnceLock<Shared> = OnceLock::new();
    ROOMY.get_or_init(|| Shared::start(&["--max-query-bytes", "65000"]))
}

/// The OpenAPI document as the shared server serves it.
fn openapi() -> &'static Value {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let response = server().get("/openapi.json", None);
        assert_eq!(response.status, 200, "{}", response.context());
        response.json()
    })
}

/// `value`, or what its `$ref` points at.
fn resolve<'a>(document: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(reference) => document
            .pointer(reference.strip_prefix('#').expect("a local $ref"))
            .unwrap_or_else(|| panic!("$ref {reference} points at nothing")),
        None => value,
    }
}

/// Whether the OpenAPI document lists `code` among the codes of the `status`
/// response of `GET path`.
fn documented(path: &str, status: u16, code: &str) -> bool {
    let document = openapi();
    let response = resolve(
        document,
        &document["paths"][path]["get"]["responses"][status.to_string()],
    );
    let schema = resolve(document, &response["content"]["application/json"]["schema"]);
    schema["properties"]["error"]["properties"]["code"]["enum"]
        .as_array()
        .is_some_and(|codes| codes.iter().any(|listed| listed == code))
}

/// `GET path_and_query` as `token` on `server`: asserts the status, the code, the
/// contract's error body and `X-Request-Id` (`Response::error`), and that the pair
/// is documented for the path; returns `details`.
#[track_caller]
fn refused_by(
    server: &Server,
    path_and_query: &str,
    token: Option<&str>,
    status: u16,
    code: &str,
) -> Value {
    let response = server.get(path_and_query, token);
    let details = response.error(status, code);
    let path = path_and_query.split('?').next().unwrap();
    assert!(
        documented(path, status, code),
        "{}: {status} {code} is not documented for GET {path}",
        response.context()
    );
    details
}

/// [`refused_by`] on the shared server.
#[track_caller]
fn refused(path_and_query: &str, token: Option<&str>, status: u16, code: &str) -> Value {
    refused_by(server(), path_and_query, token, status, code)
}

/// A 400 `invalid_parameter` as `ops`, with exactly `details`.
#[track_caller]
fn invalid_parameter(path_and_query: &str, details: Value) {
    let got = refused(path_and_query, Some(OPS), 400, "invalid_parameter");
    assert_eq!(got, details, "{path_and_query}");
}

/// A 200 as `ops` with no records: the hostile value is an ordinary one that
/// matches nothing.
#[track_caller]
fn matches_nothing(path_and_query: &str) {
    let envelope = server().ok(path_and_query);
    assert!(
        envelope.data.is_empty(),
        "{path_and_query}: {:?}",
        brief(&envelope.data)
    );
}

/// The stations of a 403 as `line` (scope `ST-01`, `ST-02`): how a test sees the
/// exact decoded text of a station id.
#[track_caller]
fn forbidden_stations(path_and_query: &str) -> Value {
    let details = refused(path_and_query, Some(LINE), 403, "forbidden");
    details["stations"].clone()
}

/// The server still answers a normal query with the reference records, and has
/// logged no panic.
#[track_caller]
fn assert_still_serves(server: &Server) {
    let path = format!("/units?{WINDOW}&direction=input,output");
    assert_records(
        &server.ok(&path).data,
        &fixture().expect(&Query::units().both()),
        "a normal query after hostile ones",
    );
    let log = server.log().join("\n");
    assert!(!log.contains("panicked"), "the server panicked:\n{log}");
}

/// `count` distinct short station ids, `S0,S1,...`: 10,000 of them make a query
/// string of about 59 KB, under the 65,534 bytes the HTTP layer takes in a URI.
fn short_station_ids(count: usize) -> String {
    (0..count)
        .map(|index| format!("S{index}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The lookup every refusal goes through tells a documented pair from others, so
/// that its `assert!` can fail.
#[test]
fn the_openapi_lookup_tells_documented_pairs_from_others() {
    assert!(documented("/units", 414, "uri_too_long"));
    assert!(documented("/metrics", 400, "invalid_parameter"));
    assert!(documented("/metrics", 403, "forbidden"));
    assert!(!documented("/units", 400, "uri_too_long"));
    assert!(!documented("/units", 400, "unauthorized"));
    assert!(!documented("/units", 418, "invalid_parameter"));
    assert!(!documented("/nowhere", 400, "invalid_parameter"));
}

// ---------------------------------------------------------------------------
// 10,000 station ids
// ---------------------------------------------------------------------------

#[test]
fn ten_thousand_station_ids_are_a_414_by_default_and_too_many_stations_with_room() {
    let query = format!("station_ids={}", short_station_ids(10_000));
    assert!(query.len() < 65_000, "{} bytes", query.len());
    for endpoint in ["/units", "/metrics"] {
        let path = format!("{endpoint}?{query}");
        let details = refused(&path, Some(OPS), 414, "uri_too_long");
        assert_eq!(
            details,
            json!({"length": query.len(), "max_query_bytes": 8192}),
            "{endpoint}"
        );
        // Checked before the token (CONTRACT section 9).
        refused(&path, None, 414, "uri_too_long");
        let details = refused_by(&roomy().server, &path, Some(OPS), 400, "too_many_stations");
        assert_eq!(details, json!({"count": 10_000, "max_stations": 1000}));
    }
    // 404 and 405 come first.
    let response = server().get(&format!("/nowhere?{query}"), Some(OPS));
    response.error(404, "not_found");
    let response = server().request_as("DELETE", &format!("/units?{query}"), Some(OPS), &[]);
    response.error(405, "method_not_allowed");
    // 10,000 copies of one id are one distinct id.
    let repeated = vec!["ST-01"; 10_000].join(",");
    assert_records(
        &roomy()
            .server
            .ok(&format!("/units?{WINDOW}&station_ids={repeated}"))
            .data,
        &roomy().fixture.expect(&Query::units().stations(&["ST-01"])),
        "10,000 copies of ST-01",
    );
    assert_still_serves(server());
    assert_still_serves(&roomy().server);
}

/// Exactly `--max-query-bytes` bytes pass; one more is a 414.
#[test]
fn the_query_length_limit_is_exact() {
    let prefix = "serial_number=";
    let at_limit = format!("{prefix}{}", "A".repeat(8192 - prefix.len()));
    assert_eq!(at_limit.len(), 8192);
    matches_nothing(&format!("/units?{at_limit}"));
    let details = refused(
        &format!("/units?{at_limit}A"),
        Some(OPS),
        414,
        "uri_too_long",
    );
    assert_eq!(details, json!({"length": 8193, "max_query_bytes": 8192}));
    assert_still_serves(server());
}

/// A request head over actix-web's limit (128 KiB) is refused by the HTTP layer
/// itself with a 431 (CONTRACT section 9; no body is promised), and the server
/// carries on.
///
/// Sent by hand, and 140 KB of header without the blank line that ends a head:
/// actix-http answers 431 when it holds 128 KiB of a head it cannot yet parse. Had
/// the whole head arrived in one read, it would parse it, and a 140 KB request
/// target would be a 400 for the URI's own limit (64 KiB) instead: which of the
/// two a complete oversized head gets depends on how the bytes arrive, and the
/// merged test binary, busier than one file's, saw both.
#[test]
fn a_query_over_the_http_layer_head_limit_is_a_431() {
    let address = server().url("").trim_start_matches("http://").to_owned();
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    let head = format!(
        "GET /units HTTP/1.1\r\nHost: stq\r\nX-Padding: {}\r\n",
        "A".repeat(140_000)
    );
    // The server may close before it has read everything: a reset is fine.
    let _ = std::io::Write::write_all(&mut stream, head.as_bytes());
    let mut answer = Vec::new();
    let _ = std::io::Read::read_to_end(&mut stream, &mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    assert_still_serves(server());
}

/// 10,000 ids as a plant names them (`ST-00000`, a 90 KB query string) never reach
/// stq: the `http` crate under actix-web refuses a request target over 65,534 bytes,
/// and the HTTP layer answers a bare 400, as it does any request line it cannot
/// parse (CONTRACT section 9). That is why `--max-query-bytes` may be at most 65000:
/// up to it, stq itself answers 414.
#[test]
fn ten_thousand_realistic_station_ids_are_refused_by_the_http_layer() {
    let ids: Vec<String> = (0..10_000).map(|index| format!("ST-{index:05}")).collect();
    let path = format!("/units?station_ids={}", ids.join(","));
    for server in [server(), &roomy().server] {
        let response = server.get(&path, Some(OPS));
        assert_eq!(response.status, 400, "{}", response.context());
        assert!(response.body.is_empty(), "{}", response.context());
        assert_still_serves(server);
    }
}

// ---------------------------------------------------------------------------
// NUL
// ---------------------------------------------------------------------------

#[test]
fn nul_in_every_parameter() {
    for parameter in ["from", "to", "limit", "direction"] {
        invalid_parameter(
            &format!("/units?{parameter}=%00"),
            json!({"parameter": parameter, "value": "\u{0}"}),
        );
    }
    invalid_parameter(
        "/metrics?from=%00",
        json!({"parameter": "from", "value": "\u{0}"}),
    );
    // A trailing NUL is not ignored.
    invalid_parameter(
        &format!("/units?from={WINDOW_FROM}%00"),
        json!({"parameter": "from", "value": format!("{WINDOW_FROM}\u{0}")}),
    );
    invalid_parameter(
        "/units?limit=1%00",
        json!({"parameter": "limit", "value": "1\u{0}"}),
    );
    invalid_parameter("/units?cursor=%00", json!({"parameter": "cursor"}));
    refused(
        "/units?limit=1&cursor=%00",
        Some(OPS),
        400,
        "invalid_cursor",
    );
    // In a free-text filter NUL is a character like any other: it matches nothing...
    for path in [
        "/units?station_ids=%00",
        "/units?type=%00",
        "/units?serial_number=%00",
        "/units?station_ids=ST-01%00",
        "/metrics?names=%00",
        "/metrics?station_ids=%00",
    ] {
        matches_nothing(&format!("{path}&{WINDOW}"));
    }
    // ... and comes back intact where it is echoed.
    assert_eq!(
        forbidden_stations("/units?station_ids=%00"),
        json!(["\u{0}"])
    );
    assert_eq!(
        forbidden_stations("/metrics?station_ids=ST-01,ST-03%00"),
        json!(["ST-03\u{0}"])
    );
    // In a name it makes an unknown parameter, never a known one.
    for (path, name) in [
        ("/units?%00=1", "\u{0}"),
        ("/units?station_ids%00=ST-01", "station_ids\u{0}"),
        ("/metrics?names%00=voltage", "names\u{0}"),
    ] {
        let details = refused(path, Some(OPS), 400, "unknown_parameter");
        assert_eq!(details, json!({"parameter": name}), "{path}");
    }
    assert_still_serves(server());
}

// ---------------------------------------------------------------------------
// Odd Unicode and malformed escapes
// ---------------------------------------------------------------------------

/// Valid UTF-8 that no normalization must touch: `(sent, decoded)`.
const ODD_UNICODE: [(&str, &str); 6] = [
    // right-to-left override before a real station id
    ("%E2%80%AEST-01", "\u{202e}ST-01"),
    // e + combining acute accent (not the precomposed é)
    ("e%CC%81", "e\u{301}"),
    // an emoji outside the Basic Multilingual Plane
    ("%F0%9F%94%A5", "\u{1f525}"),
    // a byte order mark and a zero-width joiner around a real station id
    ("%EF%BB%BFST-01%E2%80%8D", "\u{feff}ST-01\u{200d}"),
    // full-width letters that look like ST-01
    ("%EF%BC%B3%EF%BC%B4-01", "\u{ff33}\u{ff34}-01"),
    // a private-use character
    ("%EE%80%80", "\u{e000}"),
];

#[test]
fn odd_unicode_is_matched_exactly_and_echoed_intact() {
    for (sent, decoded) in ODD_UNICODE {
        // Nothing folds these into ST-01: they match nothing...
        matches_nothing(&format!("/units?station_ids={sent}&{WINDOW}"));
        matches_nothing(&format!("/units?type={sent}&{WINDOW}"));
        matches_nothing(&format!("/metrics?names={sent}&{WINDOW}"));
        // ... and come back as sent.
        assert_eq!(
            forbidden_stations(&format!("/units?station_ids={sent}")),
            json!([decoded]),
            "{sent}"
        );
        invalid_parameter(
            &format!("/units?from={sent}"),
            json!({"parameter": "from", "value": decoded}),
        );
        invalid_parameter(
            &format!("/units?direction={sent}"),
            json!({"parameter": "direction", "value": decoded}),
        );
        let details = refused(
            &format!("/units?{sent}=1"),
            Some(OPS),
            400,
            "unknown_parameter",
        );
        assert_eq!(details, json!({"parameter": decoded}), "{sent}");
    }
    assert_still_serves(server());
}

/// Percent escapes that decode to bytes that are not UTF-8.
const NOT_UTF8: [&str; 5] = [
    // a lone surrogate, UTF-8 encoded (CESU-8)
    "%ED%A0%80",
    // an overlong `/`
    "%C0%AF",
    // a byte no UTF-8 text holds
    "%FF",
    // a three-byte sequence cut short
    "%E2%82",
    // Latin-1 é
    "caf%E9",
];

#[test]
fn escapes_that_decode_to_invalid_utf8_are_invalid_parameter() {
    let parameters: [(&str, &str); 9] = [
        ("/units", "station_ids"),
        ("/units", "from"),
        ("/units", "to"),
        ("/units", "type"),
        ("/units", "serial_number"),
        ("/units", "direction"),
        ("/units", "limit"),
        ("/metrics", "names"),
        ("/metrics", "station_ids"),
    ];
    for sent in NOT_UTF8 {
        for (endpoint, parameter) in parameters {
            // No decoded value to show: `details` names the parameter only.
            invalid_parameter(
                &format!("{endpoint}?{parameter}={sent}"),
                json!({"parameter": parameter}),
            );
        }
        // In a name: an unknown parameter, named as sent.
        let details = refused(
            &format!("/units?{sent}=1"),
            Some(OPS),
            400,
            "unknown_parameter",
        );
        assert_eq!(details, json!({"parameter": sent}), "{sent}");
    }
    assert_still_serves(server());
}

/// A `%` that starts no escape stays a `%` (the WHATWG URL rule): the value is
/// read literally, never dropped or half-decoded.
#[test]
fn malformed_escapes_are_read_literally() {
    for (sent, decoded) in [
        ("%G1", "%G1"),
        ("%", "%"),
        ("%2", "%2"),
        ("%%41", "%A"),
        ("ST-01%", "ST-01%"),
        // decoded once: `%252C` is the text `%2C`, not a comma
        ("%252C", "%2C"),
    ] {
        invalid_parameter(
            &format!("/units?from={sent}"),
            json!({"parameter": "from", "value": decoded}),
        );
        assert_eq!(
            forbidden_stations(&format!("/units?station_ids={sent}")),
            json!([decoded]),
            "{sent}"
        );
        matches_nothing(&format!("/units?serial_number={sent}&{WINDOW}"));
    }
    assert_still_serves(server());
}

// ---------------------------------------------------------------------------
// %2C and the other delimiters
// ---------------------------------------------------------------------------

#[test]
fn percent_2c_splits_lists_and_nothing_else() {
    let units = |query: &str| server().ok(&format!("/units?{WINDOW}&{query}")).data;
    // A list: `%2C` is a comma.
    assert_records(
        &units("station_ids=ST-01%2CST-02"),
        &units("station_ids=ST-01,ST-02"),
        "station_ids with %2C",
    );
    assert_records(
        &units("station_ids=ST-01%2cST-02"),
        &units("station_ids=ST-01,ST-02"),
        "station_ids with %2c",
    );
    assert_records(
        &units("direction=input%2Coutput"),
        &units("direction=input,output"),
        "direction with %2C",
    );
    assert_eq!(
        forbidden_stations("/units?station_ids=ST-01%2CST-03%2C%2CST-03"),
        json!(["ST-03"])
    );
    // Only commas: an empty list, which is no list.
    assert_records(
        &units("station_ids=%2C%2C%2C"),
        &units(""),
        "station_ids of commas only",
    );
    // A single value is not split.
    invalid_parameter(
        &format!("/units?from={WINDOW_FROM}%2C{WINDOW_TO}"),
        json!({"parameter": "from", "value": format!("{WINDOW_FROM},{WINDOW_TO}")}),
    );
    invalid_parameter(
        "/units?limit=1%2C2",
        json!({"parameter": "limit", "value": "1,2"}),
    );
    // `%26` and `%3D` are text, not `&` and `=`: no parameter is smuggled in.
    assert_eq!(
        forbidden_stations("/units?station_ids=ST-01%26from%3Dx"),
        json!(["ST-01&from=x"])
    );
    for (path, name) in [
        ("/units?station_ids%2Cfrom=ST-01", "station_ids,from"),
        (
            "/units?from%3D2024-03-01T00:00:00Z=1",
            "from=2024-03-01T00:00:00Z",
        ),
        ("/units?station_ids%26limit=1", "station_ids&limit"),
    ] {
        let details = refused(path, Some(OPS), 400, "unknown_parameter");
        assert_eq!(details, json!({"parameter": name}), "{path}");
    }
    assert_still_serves(server());
}

// ---------------------------------------------------------------------------
// Repeated parameters
// ---------------------------------------------------------------------------

#[test]
fn repeated_single_valued_parameters_are_invalid_parameter_even_when_equal() {
    for (path, parameter) in [
        (
            format!("/units?from={WINDOW_FROM}&from={WINDOW_FROM}"),
            "from",
        ),
        (format!("/units?to={WINDOW_TO}&to={WINDOW_TO}"), "to"),
        ("/units?limit=5&limit=5".to_string(), "limit"),
        (
            "/units?serial_number=SN-001&serial_number=SN-001".to_string(),
            "serial_number",
        ),
        (
            "/units?station_ids=ST-01&station_ids=ST-01".to_string(),
            "station_ids",
        ),
        (
            "/metrics?station_ids=&station_ids=".to_string(),
            "station_ids",
        ),
        ("/units?limit=1&cursor=x&cursor=x".to_string(), "cursor"),
        // the second one empty
        (format!("/metrics?from={WINDOW_FROM}&from="), "from"),
    ] {
        invalid_parameter(&path, json!({"parameter": parameter}));
    }
    // Repeating a list parameter is its documented other form, however often.
    let many_types = vec!["type=PCB"; 800].join("&");
    assert_records(
        &server().ok(&format!("/units?{WINDOW}&{many_types}")).data,
        &fixture().expect(&Query::units().types(&["PCB"])),
        "type=PCB 800 times",
    );
    // An unknown name is reported before a repeat.
    let details = refused(
        "/units?limit=1&limit=2&station_id=ST-01",
        Some(OPS),
        400,
        "unknown_parameter",
    );
    assert_eq!(details, json!({"parameter": "station_id"}));
    assert_still_serves(server());
}

// ---------------------------------------------------------------------------
// Years 0000 and 9999, and the ends of i64
// ---------------------------------------------------------------------------

/// The records of `query` on `/units` (both directions) against the reference.
#[track_caller]
fn assert_window(query: &str, from: i128, to: i128) {
    let path = format!("/units?{query}&direction=input,output");
    assert_records(
        &server().ok(&path).data,
        &fixture().expect(&Query::at(Kind::Units, from, to).both()),
        &path,
    );
}

#[test]
fn the_calendar_ends_years_0000_and_9999_are_served_and_year_10000_is_refused() {
    let first = "0000-01-01T00:00:00Z";
    let last = "9999-12-31T23:59:59.999999999Z";
    assert_window(
        &format!("from={first}&to={last}"),
        instant(first),
        instant(last),
    );
    // A default end beyond the calendar: before year 0000 and after year 9999.
    matches_nothing(&format!("/units?to={first}"));
    matches_nothing("/units?from=9999-12-31T23:59:59Z");
    matches_nothing("/units?from=0000-01-01T00:00:00%2B23:59");
    matches_nothing("/units?to=9999-12-31T23:59:59.999999999-23:59");
    for written in [
        "10000-01-01T00:00:00Z",
        "-0001-01-01T00:00:00Z",
        "%2B10000-01-01T00:00:00Z",
        "99999-12-31T23:59:59Z",
        "0000-00-01T00:00:00Z",
        "9999-12-32T00:00:00Z",
        "9999-13-01T00:00:00Z",
    ] {
        let decoded = written.replace("%2B", "+");
        for parameter in ["from", "to"] {
            invalid_parameter(
                &format!("/units?{parameter}={written}"),
                json!({"parameter": parameter, "value": decoded}),
            );
        }
    }
    assert_still_serves(server());
}

#[test]
fn epoch_milliseconds_at_the_ends_of_i64_are_served_and_beyond_them_refused() {
    let (min, max) = (i64::MIN.to_string(), i64::MAX.to_string());
    let nanoseconds = |milliseconds: &str| milliseconds.parse::<i128>().unwrap() * 1_000_000;
    assert_window(
        &format!("from={min}&to={max}"),
        nanoseconds(&min),
        nanoseconds(&max),
    );
    // A default end past the end of the time line saturates; nothing is there.
    matches_nothing(&format!("/units?from={max}"));
    matches_nothing(&format!("/units?to={min}"));
    matches_nothing("/units?from=-0&to=1");
    // Reversed: both ends beyond the calendar, named as the OpenAPI document says.
    let details = refused(
        &format!("/units?from={max}&to={min}"),
        Some(OPS),
        400,
        "invalid_window",
    );
    assert_eq!(
        details,
        json!({
            "from": "9223372036854775s807000000ns since the Unix epoch",
            "to": "-9223372036854776s192000000ns since the Unix epoch",
        })
    );
    for written in [
        "9223372036854775808",
        "-9223372036854775809",
        "99999999999999999999999999999999",
        "--1",
        "-",
        "1.5",
        "1e3",
        "0x10",
    ] {
        for parameter in ["from", "to"] {
            invalid_parameter(
                &format!("/metrics?{parameter}={written}"),
                json!({"parameter": parameter, "value": written}),
            );
        }
    }
    let thousand_digits = "9".repeat(1000);
    invalid_parameter(
        &format!("/units?from={thousand_digits}"),
        json!({"parameter": "from", "value": thousand_digits}),
    );
    assert_still_serves(server());
}

// ---------------------------------------------------------------------------
// limit
// ---------------------------------------------------------------------------

#[test]
fn huge_negative_and_odd_limits_are_invalid_parameter() {
    for (sent, decoded) in [
        ("99999999999999999999", "99999999999999999999"),
        ("18446744073709551616", "18446744073709551616"),
        ("18446744073709551615", "18446744073709551615"),
        ("100001", "100001"),
        ("0", "0"),
        ("000", "000"),
        ("-1", "-1"),
        ("1e3", "1e3"),
        ("0x10", "0x10"),
        ("1.0", "1.0"),
        ("%2B1", "+1"),
        ("+1", " 1"),
        ("%201", " 1"),
        ("1%20", "1 "),
        ("%EF%BC%91", "\u{ff11}"),
    ] {
        invalid_parameter(
            &format!("/units?limit={sent}"),
            json!({"parameter": "limit", "value": decoded}),
        );
    }
    assert_still_serves(server());
}

#[test]
fn limits_with_leading_zeros_are_accepted() {
    let full = fixture().expect(&Query::units());
    let leading = format!("{}1", "0".repeat(100));
    for limit in ["00001", leading.as_str()] {
        let path = format!("/units?{WINDOW}&limit={limit}");
        let envelope = server().ok(&path);
        assert_records(&envelope.data, &full[..1], &path);
        assert!(envelope.cursor().is_some(), "{path}: no next_cursor");
    }
    let envelope = server().ok(&format!("/units?{WINDOW}&limit=0100000"));
    assert_records(&envelope.data, &full, "limit=0100000");
    assert_still_serves(server());
}

// ---------------------------------------------------------------------------
// Very long values
// ---------------------------------------------------------------------------

#[test]
fn very_long_single_values_are_ordinary_values() {
    let long = "A".repeat(8000);
    matches_nothing(&format!("/units?serial_number={long}&{WINDOW}"));
    matches_nothing(&format!("/metrics?names={long}&{WINDOW}"));
    invalid_parameter(
        &format!("/units?from={long}"),
        json!({"parameter": "from", "value": long}),
    );
    refused(
        &format!("/units?limit=1&cursor={long}"),
        Some(OPS),
        400,
        "invalid_cursor",
    );
    assert_eq!(
        forbidden_stations(&format!("/units?station_ids={long}")),
        json!([long])
    );
    let details = refused(
        &format!("/units?{long}=1"),
        Some(OPS),
        400,
        "unknown_parameter",
    );
    assert_eq!(details, json!({"parameter": long}));
    // One more station id than `--max-stations` (1000), within the byte limit.
    let details = refused(
        &format!("/units?station_ids={}", short_station_ids(1001)),
        Some(OPS),
        400,
        "too_many_stations",
    );
    assert_eq!(details, json!({"count": 1001, "max_stations": 1000}));
    assert_still_serves(server());
}

// ---------------------------------------------------------------------------
// Unknown parameters, a token in the URL, empty names
// ---------------------------------------------------------------------------

#[test]
fn a_token_in_the_url_is_never_read_and_unknown_names_are_refused() {
    // No header: 401 comes before any parameter, whatever the URL carries.
    for path in [
        "/units?access_token=x".to_string(),
        format!("/units?access_token={OPS}"),
        format!("/metrics?access_token={OPS}&{WINDOW}"),
    ] {
        refused(&path, None, 401, "unauthorized");
    }
    // With one: `access_token` is an unknown parameter like any other.
    for (path, name) in [
        (format!("/units?access_token={OPS}"), "access_token"),
        ("/units?ACCESS_TOKEN=x".to_string(), "ACCESS_TOKEN"),
        ("/units?Station_ids=ST-01".to_string(), "Station_ids"),
        ("/units?station_id=ST-01".to_string(), "station_id"),
        ("/metrics?type=PCB".to_string(), "type"),
        ("/units?=x".to_string(), ""),
        ("/units?%20from=2024-03-01T00:00:00Z".to_string(), " from"),
    ] {
        let details = refused(&path, Some(OPS), 400, "unknown_parameter");
        assert_eq!(details, json!({"parameter": name}), "{path}");
    }
    // Stray delimiters are no parameters; a name without `=` is an empty value.
    assert_records(
        &server().ok(&format!("/units?&&{WINDOW}&&&")).data,
        &fixture().expect(&Query::units()),
        "stray &",
    );
    assert_records(
        &server().ok(&format!("/units?{WINDOW}&station_ids")).data,
        &fixture().expect(&Query::units()),
        "station_ids without =",
    );
    // Two Authorization headers: 400 invalid_request, in place of the token check,
    // before any parameter (CONTRACT section 9).
    let authorization = format!("Bearer {OPS}");
    let response = server().request(
        "GET",
        "/units?access_token=x",
        // Two spellings of the name: the HTTP client would merge two equal ones.
        &[
            ("Authorization", authorization.as_str()),
            ("authorization", authorization.as_str()),
        ],
    );
    response.error(400, "invalid_request");
    assert!(documented("/units", 400, "invalid_request"));
    assert_still_serves(server());
}
