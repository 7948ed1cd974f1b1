//! CONTRACT sections 3 and 7 (and SPEC 2): the envelope, the records, the error
//! body, request ids, HEAD, 404/405, authentication, access and precedence.

use std::collections::BTreeSet;

use crate::common::*;
use serde_json::{json, Value};

fn find<'a>(data: &'a [Value], field: &str, value: &str) -> &'a Value {
    data.iter()
        .find(|record| record[field] == value)
        .unwrap_or_else(|| panic!("no record with {field}={value} in {:?}", brief(data)))
}

fn field_names(record: &Value) -> BTreeSet<&str> {
    record
        .as_object()
        .unwrap()
        .keys()
        .map(|name| name.as_str())
        .collect()
}

fn is_uuid_v4(text: &str) -> bool {
    let bytes = text.as_bytes();
    if bytes.len() != 36 {
        return false;
    }
    for (index, byte) in bytes.iter().enumerate() {
        let ok = match index {
            8 | 13 | 18 | 23 => *byte == b'-',
            _ => byte.is_ascii_hexdigit(),
        };
        if !ok {
            return false;
        }
    }
    bytes[14] == b'4' && matches!(bytes[19].to_ascii_lowercase(), b'8' | b'9' | b'a' | b'b')
}

// ---------------------------------------------------------------------------
// Envelope and records (SPEC 2, CONTRACT 7)
// ---------------------------------------------------------------------------

#[test]
fn units_success_envelope_is_exactly_data_message_meta() {
    // `ok()` asserts: 200, application/json, keys exactly data/message/meta, meta keys
    // exactly timestamp/request_id/query_duration_ms, timestamp format, request id.
    let envelope = server().ok(&units_all());
    assert!(!envelope.data.is_empty());
    assert!(
        !envelope.meta.contains_key("next_cursor"),
        "no limit: no next_cursor"
    );
}

#[test]
fn metrics_success_envelope_is_exactly_data_message_meta() {
    let envelope = server().ok(&metrics_all());
    assert!(!envelope.data.is_empty());
    assert!(!envelope.meta.contains_key("next_cursor"));
}

#[test]
fn empty_result_has_the_same_envelope() {
    let envelope = server().ok("/units?from=2020-01-01T00:00:00Z&to=2020-01-02T00:00:00Z");
    assert!(envelope.data.is_empty());
    let envelope = server().ok("/metrics?from=2020-01-01T00:00:00Z&to=2020-01-02T00:00:00Z");
    assert!(envelope.data.is_empty());
}

#[test]
fn meta_timestamp_is_utc_with_milliseconds() {
    let envelope = server().ok(&units_all());
    let timestamp = envelope.meta["timestamp"].as_str().unwrap();
    assert_eq!(timestamp.len(), 24, "{timestamp}");
    assert!(
        timestamp.ends_with('Z')
            && timestamp.as_bytes()[10] == b'T'
            && timestamp.as_bytes()[19] == b'.',
        "{timestamp}"
    );
    let milliseconds = parse_meta_timestamp(timestamp).expect("YYYY-MM-DDTHH:MM:SS.mmmZ");
    assert!(
        (milliseconds - now_seconds() * 1000).abs() < 120_000,
        "timestamp {timestamp} is not the time of the response"
    );
}

#[test]
fn meta_query_duration_ms_is_a_whole_number() {
    let envelope = server().ok(&metrics_all());
    let duration = &envelope.meta["query_duration_ms"];
    assert!(duration.is_u64(), "{duration}");
    assert!(
        !envelope.response.body.contains("\"query_duration_ms\":-"),
        "{}",
        envelope.response.body
    );
    // whole milliseconds: written as an integer, not 0.3
    let raw = envelope
        .response
        .body
        .split("\"query_duration_ms\":")
        .nth(1)
        .unwrap();
    let number: String = raw
        .chars()
        .take_while(|c| !matches!(c, ',' | '}'))
        .collect();
    assert!(
        number.trim().bytes().all(|b| b.is_ascii_digit()),
        "query_duration_ms written as {number}"
    );
}

#[test]
fn message_is_a_string() {
    let envelope = server().ok(&units_all());
    assert!(!envelope.message.is_empty());
    let envelope = server().ok(&metrics_all());
    assert!(!envelope.message.is_empty());
}

#[test]
fn success_content_type_is_application_json() {
    for path in [units_all(), metrics_all()] {
        let response = server().get(&path, Some(OPS));
        assert_eq!(response.status, 200, "{}", response.context());
        response.assert_json_content_type();
    }
}

#[test]
fn unit_records_carry_exactly_the_spec_fields() {
    let envelope = server().ok(&units_all());
    let want: BTreeSet<&str> = UNIT_FIELDS.into_iter().collect();
    for record in &envelope.data {
        let keys = field_names(record);
        assert_eq!(keys, want, "unit record {record}");
        for field in UNIT_STRING_FIELDS {
            assert!(record[field].is_string(), "{field} of {record}");
        }
        let tags = record["tags"]
            .as_array()
            .unwrap_or_else(|| panic!("tags of {record}"));
        assert!(tags.iter().all(|t| t.is_string()), "{record}");
        assert!(
            matches!(record["direction"].as_str(), Some("input" | "output")),
            "{record}"
        );
    }
}

#[test]
fn metric_records_carry_exactly_the_spec_fields() {
    let envelope = server().ok(&metrics_all());
    let want: BTreeSet<&str> = METRIC_FIELDS.into_iter().collect();
    for record in &envelope.data {
        let keys = field_names(record);
        // a metric line with "metadata" and "direction" must not leak them
        assert_eq!(keys, want, "metric record {record}");
        for field in METRIC_FIELDS {
            if field == "tags" {
                assert!(
                    record[field]
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|t| t.is_string()),
                    "{record}"
                );
            } else {
                assert!(record[field].is_string(), "{field} of {record}");
            }
        }
    }
}

#[test]
fn all_unit_records_match_the_reference() {
    let envelope = server().ok(&units_all());
    assert_records(
        &envelope.data,
        &fixture().expect(&Query::units().both()),
        "units, whole window, both directions",
    );
}

#[test]
fn all_metric_records_match_the_reference() {
    let envelope = server().ok(&metrics_all());
    assert_records(
        &envelope.data,
        &fixture().expect(&Query::metrics()),
        "metrics, whole window",
    );
}

#[test]
fn absent_optional_unit_fields_are_empty_string_empty_list_null() {
    let envelope = server().ok(&units_all());
    // SN-002: slot, tz, mode, tags, result, metadata absent
    let record = find(&envelope.data, "unit_serial", "SN-002");
    for field in ["slot", "tz", "mode", "result"] {
        assert_eq!(record[field], json!(""), "{field} of {record}");
    }
    assert_eq!(record["tags"], json!([]), "{record}");
    assert_eq!(record["metadata"], Value::Null, "{record}");
    // SN-005: tags and result given as null = absent
    let record = find(&envelope.data, "unit_serial", "SN-005");
    assert_eq!(record["tags"], json!([]), "{record}");
    assert_eq!(record["result"], json!(""), "{record}");
    assert_eq!(record["metadata"], Value::Null, "{record}");
    // SN-001 of ST-03: metadata null
    let record = envelope
        .data
        .iter()
        .find(|record| record["unit_serial"] == "SN-001" && record["station_id"] == "ST-03")
        .unwrap();
    assert_eq!(record["metadata"], Value::Null, "{record}");
    assert_eq!(record["slot"], json!(""), "{record}");
}

#[test]
fn absent_optional_metric_fields_are_empty_string_and_empty_list() {
    let envelope = server().ok(&metrics_all());
    let record = find(&envelope.data, "station_id", "ST-10");
    for field in [
        "slot",
        "unit_serial",
        "tz",
        "mode",
        "value",
        "unit",
        "type",
        "limit_upper",
        "limit_lower",
    ] {
        assert_eq!(record[field], json!(""), "{field} of {record}");
    }
    assert_eq!(record["tags"], json!([]), "{record}");
}

#[test]
fn numbers_as_metric_values_come_back_as_their_text() {
    let envelope = server().ok(&metrics_all());
    let voltage = find(&envelope.data, "unit", "V");
    assert_eq!(voltage["value"], json!("3.30"), "{voltage}");
    assert_eq!(voltage["limit_upper"], json!("3.6"), "{voltage}");
    assert_eq!(voltage["limit_lower"], json!("3.0"), "{voltage}");
    let current = find(&envelope.data, "unit", "A");
    assert_eq!(current["value"], json!("0.25"), "{current}");
    assert_eq!(current["limit_upper"], json!("1E+5"), "{current}");
    assert_eq!(current["limit_lower"], json!("-0.0"), "{current}");
    let temperature = find(&envelope.data, "unit", "C");
    assert_eq!(
        temperature["value"],
        json!("123456789012345678901234567890.123456789"),
        "{temperature}"
    );
    let station_03 = find(&envelope.data, "station_id", "ST-03");
    assert_eq!(station_03["value"], json!("5"), "{station_03}");
    let late = envelope
        .data
        .iter()
        .find(|record| record["time_created"] == "2024-03-10T23:59:59.999999999Z")
        .unwrap();
    assert_eq!(late["value"], json!("0.5"), "{late}");
}

#[test]
fn time_created_is_returned_exactly_as_written() {
    let envelope = server().ok(&units_all());
    let by = |serial: &str, station: &str| -> String {
        envelope
            .data
            .iter()
            .find(|record| record["unit_serial"] == serial && record["station_id"] == station)
            .unwrap_or_else(|| panic!("{serial}"))["time_created"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(by("SN-001", "ST-03"), "2024-03-10t11:00:00z");
    assert_eq!(by("SN-002", "ST-02"), "2024-03-10T12:00:00+02:00");
    assert_eq!(by("SN-003", "ST-01"), "2024-03-10T10:00:00.000000000Z");
    assert_eq!(by("SN-004", "ST-10"), "2024-03-10T09:30:00.5Z");
    assert_eq!(by("SN-005", "ST-02"), "2024-03-10T07:59:59.999999999-02:00");
    assert_eq!(by("SN-012", "ST-10"), "2024-03-10T10:00:00-00:00");
}

#[test]
fn metadata_is_returned_as_written() {
    let envelope = server().ok(&units_all());
    let record = envelope
        .data
        .iter()
        .find(|record| record["unit_serial"] == "SN-001" && record["station_id"] == "ST-01")
        .unwrap();
    assert_eq!(record["metadata"]["op"], json!("alice"), "{record}");
    assert!(
        record["metadata"]["n"].is_number() && record["metadata"]["big"].is_number(),
        "{record}"
    );
    // numbers keep their text
    assert!(
        envelope.response.body.contains("1.50"),
        "metadata 1.50 lost its text: {}",
        envelope.response.body
    );
    assert!(
        envelope.response.body.contains("12345678901234567890123"),
        "big metadata number lost its text"
    );
    assert_eq!(
        find(&envelope.data, "unit_serial", "SN-003")["metadata"],
        json!("note")
    );
    assert_eq!(
        find(&envelope.data, "unit_serial", "SN-004")["metadata"],
        json!([1, 2])
    );
}

#[test]
fn unknown_snapshot_fields_are_not_returned() {
    let envelope = server().ok(&units_all());
    assert!(
        !envelope.response.body.contains("extra_field"),
        "{}",
        envelope.response.body
    );
    let envelope = server().ok(&metrics_all());
    assert!(
        !envelope.response.body.contains("ignored"),
        "{}",
        envelope.response.body
    );
}

#[test]
fn gzip_multi_member_and_nested_files_are_loaded() {
    let envelope = server().ok(&units_all());
    for serial in ["SN-010", "SN-011", "SN-012"] {
        find(&envelope.data, "unit_serial", serial);
    }
    let envelope = server().ok(&metrics_all());
    find(&envelope.data, "value", "3.31");
    find(&envelope.data, "name", "Voltage");
}

// ---------------------------------------------------------------------------
// X-Request-Id (CONTRACT 7)
// ---------------------------------------------------------------------------

fn get_with_id(path: &str, id: &str, token: Option<&str>) -> Response {
    server().request_as("GET", path, token, &[("X-Request-Id", id)])
}

#[test]
fn valid_x_request_id_is_echoed_in_header_and_meta() {
    let response = get_with_id(&units_all(), "trace-abc_123.XYZ", Some(OPS));
    assert_eq!(response.request_id(), "trace-abc_123.XYZ");
    let envelope = response.ok();
    assert_eq!(envelope.meta["request_id"], json!("trace-abc_123.XYZ"));
}

#[test]
fn x_request_id_of_128_visible_characters_is_echoed() {
    let visible: String = (b'!'..=b'~').map(|b| b as char).collect(); // 94 chars
    let id: String = visible.chars().cycle().take(128).collect();
    let response = get_with_id(&metrics_all(), &id, Some(OPS));
    assert_eq!(response.request_id(), id);
    assert_eq!(response.ok().meta["request_id"], json!(id));
    let one = get_with_id(&metrics_all(), "x", Some(OPS));
    assert_eq!(one.request_id(), "x");
}

#[test]
fn x_request_id_of_129_characters_is_replaced_by_a_uuid_v4() {
    let id = "a".repeat(129);
    let response = get_with_id(&units_all(), &id, Some(OPS));
    let got = response.request_id();
    assert_ne!(got, id);
    assert!(is_uuid_v4(&got), "{got}");
    assert_eq!(response.ok().meta["request_id"], json!(got));
}

#[test]
fn x_request_id_with_a_space_is_replaced_by_a_uuid_v4() {
    let response = get_with_id(&units_all(), "abc def", Some(OPS));
    let got = response.request_id();
    assert!(is_uuid_v4(&got), "{got}");
    assert_eq!(response.ok().meta["request_id"], json!(got));
}

#[test]
fn empty_x_request_id_is_replaced_by_a_uuid_v4() {
    let response = get_with_id(&units_all(), "", Some(OPS));
    let got = response.request_id();
    assert!(is_uuid_v4(&got), "{got}");
}

#[test]
fn missing_x_request_id_gets_a_fresh_uuid_v4_each_time() {
    let first = server().get(&units_all(), Some(OPS)).request_id();
    let second = server().get(&units_all(), Some(OPS)).request_id();
    assert!(is_uuid_v4(&first), "{first}");
    assert!(is_uuid_v4(&second), "{second}");
    assert_ne!(first, second);
}

#[test]
fn x_request_id_is_on_every_error_response() {
    let cases: Vec<(String, &str, Option<&str>, u16)> = vec![
        ("/units?from=nope".into(), "GET", Some(OPS), 400),
        ("/units?bogus=1".into(), "GET", Some(OPS), 400),
        ("/units".into(), "GET", None, 401),
        ("/units?station_ids=ST-03".into(), "GET", Some(LINE), 403),
        ("/nope".into(), "GET", Some(OPS), 404),
        ("/nope".into(), "GET", None, 404),
        ("/units".into(), "POST", Some(OPS), 405),
        ("/metrics".into(), "DELETE", None, 405),
    ];
    for (path, method, token, status) in cases {
        let response =
            server().request_as(method, &path, token, &[("X-Request-Id", "err-trace-7")]);
        assert_eq!(response.status, status, "{}", response.context());
        assert_eq!(
            response.request_id(),
            "err-trace-7",
            "{}",
            response.context()
        );
        // and a fresh one without the header
        let fresh = server().request_as(method, &path, token, &[]);
        assert!(is_uuid_v4(&fresh.request_id()), "{}", fresh.context());
    }
}

// ---------------------------------------------------------------------------
// HEAD (CONTRACT 7)
// ---------------------------------------------------------------------------

fn comparable_header_names(response: &Response) -> BTreeSet<String> {
    response
        .headers
        .iter()
        .map(|(name, _)| name.clone())
        .filter(|name| {
            !matches!(
                name.as_str(),
                "date" | "content-length" | "transfer-encoding" | "connection" | "keep-alive"
            )
        })
        .collect()
}

#[test]
fn head_is_answered_like_get_without_a_body() {
    for path in [units_all(), metrics_all()] {
        let headers = [
            ("Authorization", "Bearer tok-ops-0001"),
            ("X-Request-Id", "head-1"),
        ];
        let get = server().request("GET", &path, &headers);
        let head = server().request("HEAD", &path, &headers);
        assert_eq!(get.status, 200, "{}", get.context());
        assert_eq!(head.status, 200, "{}", head.context());
        assert!(head.body.is_empty(), "HEAD body: {}", head.body);
        head.assert_json_content_type();
        assert_eq!(head.request_id(), "head-1");
        assert_eq!(
            comparable_header_names(&head),
            comparable_header_names(&get),
            "HEAD vs GET headers"
        );
    }
}

#[test]
fn head_errors_are_answered_like_get_without_a_body() {
    let cases: Vec<(&str, Option<&str>, u16)> = vec![
        ("/units", None, 401),
        ("/units?from=nope", Some(OPS), 400),
        ("/metrics?station_ids=ST-03", Some(LINE), 403),
        ("/nope", Some(OPS), 404),
    ];
    for (path, token, status) in cases {
        let get = server().request_as("GET", path, token, &[]);
        let head = server().request_as("HEAD", path, token, &[]);
        assert_eq!(get.status, status, "{}", get.context());
        assert_eq!(head.status, status, "{}", head.context());
        assert!(head.body.is_empty(), "HEAD {path} body: {}", head.body);
        head.request_id();
        assert_eq!(
            comparable_header_names(&head),
            comparable_header_names(&get),
            "HEAD vs GET headers for {path}"
        );
        assert_eq!(
            head.header("www-authenticate"),
            get.header("www-authenticate")
        );
    }
}

// ---------------------------------------------------------------------------
// 404 and 405 (CONTRACT 7, precedence of CONTRACT 3)
// ---------------------------------------------------------------------------

#[test]
fn unknown_path_is_404_not_found() {
    for path in [
        "/nope",
        "/units/extra",
        "/unit",
        "/Units",
        "/metrics/1",
        "/healthzz",
    ] {
        let response = server().get(path, Some(OPS));
        let details = response.error(404, "not_found");
        let _ = details;
    }
}

#[test]
fn unknown_path_is_404_with_any_method() {
    for method in ["GET", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"] {
        let response = server().request(method, "/nope", &[]);
        response.error(404, "not_found");
    }
    let head = server().request("HEAD", "/nope", &[]);
    assert_eq!(head.status, 404, "{}", head.context());
    assert!(head.body.is_empty());
}

#[test]
fn unknown_path_404_comes_before_401_and_400() {
    // no token, unknown parameter, bad value: still 404
    let response = server().get("/nope?bogus=1&from=x", None);
    response.error(404, "not_found");
    let response = server().request(
        "POST",
        "/nope?bogus=1",
        &[("Authorization", "Bearer wrong")],
    );
    response.error(404, "not_found");
}

#[test]
fn other_methods_on_units_and_metrics_are_405_with_allow() {
    for path in ["/units", "/metrics"] {
        for method in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"] {
            let response =
                server().request(method, path, &[("Authorization", "Bearer tok-ops-0001")]);
            response.error(405, "method_not_allowed");
            assert_eq!(
                response.header("allow"),
                Some("GET, HEAD"),
                "{}",
                response.context()
            );
        }
    }
}

#[test]
fn method_not_allowed_comes_before_unauthorized() {
    for path in ["/units", "/metrics"] {
        let response = server().request("POST", path, &[]);
        response.error(405, "method_not_allowed");
        assert_eq!(response.header("allow"), Some("GET, HEAD"));
        assert!(
            response.header("www-authenticate").is_none(),
            "{:?}",
            response.headers
        );
        let response = server().request("PUT", path, &[("Authorization", "Bearer wrong")]);
        response.error(405, "method_not_allowed");
    }
}

#[test]
fn method_not_allowed_comes_before_bad_parameters() {
    let response = server().request(
        "DELETE",
        "/units?bogus=1&from=x",
        &[("Authorization", "Bearer tok-ops-0001")],
    );
    response.error(405, "method_not_allowed");
    let response = server().request(
        "POST",
        "/metrics?station_ids=ST-03",
        &[("Authorization", "Bearer tok-line-0001")],
    );
    response.error(405, "method_not_allowed");
}

// ---------------------------------------------------------------------------
// Authentication (CONTRACT 3)
// ---------------------------------------------------------------------------

#[test]
fn missing_authorization_is_401_with_bearer_realm() {
    for path in ["/units", "/metrics"] {
        let response = server().get(path, None);
        response.error(401, "unauthorized");
        assert_eq!(
            response.header_all("www-authenticate"),
            vec![r#"Bearer realm="stq""#],
            "{}",
            response.context()
        );
    }
}

#[test]
fn other_scheme_is_401_without_error_param() {
    for value in ["Basic dXNlcjpwYXNz", "Token tok-ops-0001", "tok-ops-0001"] {
        let response = server().request("GET", "/units", &[("Authorization", value)]);
        response.error(401, "unauthorized");
        assert_eq!(
            response.header("www-authenticate"),
            Some(r#"Bearer realm="stq""#),
            "{value}"
        );
    }
}

#[test]
fn unknown_bearer_token_is_401_invalid_token() {
    for path in ["/units", "/metrics"] {
        let response = server().get(path, Some("tok-unknown-9999"));
        response.error(401, "unauthorized");
        assert_eq!(
            response.header("www-authenticate"),
            Some(r#"Bearer realm="stq", error="invalid_token""#)
        );
    }
}

#[test]
fn empty_bearer_token_is_401_invalid_token() {
    let response = server().request("GET", "/units", &[("Authorization", "Bearer ")]);
    response.error(401, "unauthorized");
    assert_eq!(
        response.header("www-authenticate"),
        Some(r#"Bearer realm="stq", error="invalid_token""#)
    );
}

#[test]
fn bearer_scheme_name_is_case_insensitive() {
    for scheme in ["bearer", "BEARER", "BeArEr"] {
        let response = server().request(
            "GET",
            &units_all(),
            &[("Authorization", &format!("{scheme} {OPS}"))],
        );
        let envelope = response.ok();
        assert_records(
            &envelope.data,
            &fixture().expect(&Query::units().both()),
            scheme,
        );
    }
}

#[test]
fn token_never_appears_in_a_response() {
    let secret = "tok-very-secret-unknown-42";
    let response = server().get("/units", Some(secret));
    response.error(401, "unauthorized");
    assert!(!response.body.contains(secret));
    assert!(response.headers.iter().all(|(_, v)| !v.contains(secret)));
    let response = server().get("/units?station_ids=ST-03", Some(LINE));
    response.error(403, "forbidden");
    assert!(!response.body.contains(LINE));
    let response = server().get(&units_all(), Some(OPS));
    assert!(!response.body.contains(OPS));
}

#[test]
fn unauthorized_comes_before_parameter_errors() {
    let cases = [
        "/units?bogus=1",
        "/units?station_id=ST-01",
        "/metrics?type=x",
        "/units?from=nope",
        "/units?from=2024-03-02T00:00:00Z&to=2024-03-01T00:00:00Z",
        "/units?limit=0",
        "/units?cursor=garbage&limit=1",
    ];
    for path in cases {
        let response = server().get(path, None);
        response.error(401, "unauthorized");
        assert_eq!(
            response.header("www-authenticate"),
            Some(r#"Bearer realm="stq""#)
        );
        let response = server().get(path, Some("tok-unknown"));
        response.error(401, "unauthorized");
        assert_eq!(
            response.header("www-authenticate"),
            Some(r#"Bearer realm="stq", error="invalid_token""#)
        );
    }
}

// ---------------------------------------------------------------------------
// Access (CONTRACT 3)
// ---------------------------------------------------------------------------

#[test]
fn forbidden_station_is_403_with_the_station_in_details() {
    for path in ["/units?station_ids=ST-03", "/metrics?station_ids=ST-03"] {
        let response = server().get(path, Some(LINE));
        let details = response.error(403, "forbidden");
        assert_eq!(
            details,
            json!({"stations": ["ST-03"]}),
            "{}",
            response.context()
        );
    }
}

#[test]
fn forbidden_stations_mixed_into_a_list_are_listed_alone_sorted_and_deduplicated() {
    let response = server().get(
        "/units?station_ids=ST-10,ST-01,ST-03,ST-03,%20ST-99%20,ST-02,ST-2",
        Some(LINE),
    );
    let details = response.error(403, "forbidden");
    assert_eq!(
        details,
        json!({"stations": ["ST-03", "ST-10", "ST-2", "ST-99"]}),
        "{}",
        response.context()
    );
    let response = server().get("/metrics?station_ids=ST-02,ST-01,ST-01,st-01", Some(LINE));
    let details = response.error(403, "forbidden");
    assert_eq!(
        details,
        json!({"stations": ["st-01"]}),
        "{}",
        response.context()
    );
}

#[test]
fn nonexistent_station_is_forbidden_like_an_existing_one() {
    let existing = server().get("/units?station_ids=ST-03", Some(LINE));
    let missing = server().get("/units?station_ids=ST-77", Some(LINE));
    let existing_details = existing.error(403, "forbidden");
    let missing_details = missing.error(403, "forbidden");
    assert_eq!(existing_details, json!({"stations": ["ST-03"]}));
    assert_eq!(missing_details, json!({"stations": ["ST-77"]}));
    // the same answer but for the id: existence does not leak
    let existing_body = existing.json();
    let missing_body: Value =
        serde_json::from_str(&missing.body.replace("ST-77", "ST-03")).unwrap();
    assert_eq!(existing_body, missing_body);
    assert_eq!(
        existing.header_all("content-type"),
        missing.header_all("content-type")
    );
}

#[test]
fn nonexistent_station_for_an_all_stations_token_is_an_empty_result() {
    let envelope = server().ok(&format!("/units?{WINDOW}&station_ids=ST-99"));
    assert!(envelope.data.is_empty());
    let envelope = server().ok(&format!("/metrics?{WINDOW}&station_ids=ST-99"));
    assert!(envelope.data.is_empty());
}

#[test]
fn station_list_within_the_token_scope_is_200() {
    let envelope = server().ok_as(
        &format!("/units?{WINDOW}&direction=input,output&station_ids=ST-02,ST-01"),
        LINE,
    );
    assert_records(
        &envelope.data,
        &fixture().expect(&Query::units().both().stations(&["ST-01", "ST-02"])),
        "line token",
    );
}

#[test]
fn line_token_never_sees_other_stations_records() {
    let envelope = server().ok_as(&units_all(), LINE);
    assert!(!envelope.data.is_empty());
    for record in &envelope.data {
        assert!(
            matches!(record["station_id"].as_str(), Some("ST-01" | "ST-02")),
            "{record}"
        );
    }
    assert_records(
        &envelope.data,
        &fixture().expect(&Query::units().both().scope(&["ST-01", "ST-02"])),
        "line units",
    );
    let envelope = server().ok_as(&metrics_all(), LINE);
    assert_records(
        &envelope.data,
        &fixture().expect(&Query::metrics().scope(&["ST-01", "ST-02"])),
        "line metrics",
    );
    let envelope = server().ok_as(
        &format!("/units?{WINDOW}&type=Cable&direction=input,output"),
        LINE,
    );
    assert_records(
        &envelope.data,
        &fixture().expect(
            &Query::units()
                .both()
                .types(&["Cable"])
                .scope(&["ST-01", "ST-02"]),
        ),
        "line units Cable",
    );
    // the default window of ST-NOW is out of scope too
    let envelope = server().ok_as("/units?direction=input,output", LINE);
    assert!(envelope.data.is_empty(), "{:?}", brief(&envelope.data));
    let envelope = server().ok_as(&metrics_all(), ST03);
    assert_records(
        &envelope.data,
        &fixture().expect(&Query::metrics().scope(&["ST-03"])),
        "st03 metrics",
    );
}

#[test]
fn no_station_list_covers_every_station_of_an_all_stations_token() {
    let envelope = server().ok(&units_all());
    let stations: BTreeSet<&str> = envelope
        .data
        .iter()
        .map(|record| record["station_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        stations,
        BTreeSet::from(["ST-01", "ST-02", "ST-03", "ST-04", "ST-10", "ST-2"])
    );
}

#[test]
fn unauthorized_and_forbidden_are_distinct() {
    let response = server().get("/units?station_ids=ST-03", None);
    response.error(401, "unauthorized");
    let response = server().get("/units?station_ids=ST-03", Some(LINE));
    response.error(403, "forbidden");
    assert!(
        response.header("www-authenticate").is_none(),
        "403 carries no WWW-Authenticate: {:?}",
        response.headers
    );
}

// ---------------------------------------------------------------------------
// Precedence among 400 and 403 (CONTRACT 3)
// ---------------------------------------------------------------------------

#[test]
fn parameter_errors_come_before_forbidden() {
    let forbidden = "station_ids=ST-03";
    let cases = [
        (format!("/units?{forbidden}&from=nope"), "invalid_parameter"),
        (format!("/units?{forbidden}&bogus=1"), "unknown_parameter"),
        (
            format!("/metrics?{forbidden}&type=PCB"),
            "unknown_parameter",
        ),
        (
            format!("/units?{forbidden}&direction=sideways"),
            "invalid_parameter",
        ),
        (format!("/units?{forbidden}&limit=0"), "invalid_parameter"),
        (
            format!("/units?{forbidden}&from=2024-03-02T00:00:00Z&to=2024-03-01T00:00:00Z"),
            "invalid_window",
        ),
        (
            format!("/units?{forbidden}&limit=2&cursor=not-a-cursor"),
            "invalid_cursor",
        ),
        (
            format!("/units?{forbidden}&cursor=not-a-cursor"),
            "invalid_parameter",
        ),
    ];
    for (path, code) in cases {
        let response = server().get(&path, Some(LINE));
        response.error(400, code);
    }
}

// ---------------------------------------------------------------------------
// Error bodies of 401/403/404/405 carry exactly error.code/message/details
// ---------------------------------------------------------------------------

#[test]
fn every_error_body_is_exactly_error_code_message_details() {
    let cases: Vec<(&str, &str, Option<&str>, u16, &str)> = vec![
        ("GET", "/units", None, 401, "unauthorized"),
        (
            "GET",
            "/metrics?station_ids=ST-03",
            Some(LINE),
            403,
            "forbidden",
        ),
        ("GET", "/nowhere", Some(OPS), 404, "not_found"),
        ("PUT", "/units", Some(OPS), 405, "method_not_allowed"),
        ("GET", "/units?x=1", Some(OPS), 400, "unknown_parameter"),
        ("GET", "/units?to=x", Some(OPS), 400, "invalid_parameter"),
    ];
    for (method, path, token, status, code) in cases {
        let response = server().request_as(method, path, token, &[]);
        // `error` checks exactly {"error":{"code","message","details"}}
        response.error(status, code);
    }
}

#[test]
fn unauthorized_details_are_null_or_absent_of_the_token() {
    let response = server().get("/units", Some("tok-zzz"));
    let details = response.error(401, "unauthorized");
    assert!(!details.to_string().contains("tok-zzz"));
}
