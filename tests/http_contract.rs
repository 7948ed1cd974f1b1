//! CONTRACT sections 3 and 7 (and SPEC 2): the envelope, the records, the error
//! body, request ids, HEAD, 404/405, authentication, access and precedence.

mod common;

use std::collections::BTreeSet;
use std::sync::OnceLock;

use common::*;
use serde_json::{json, Value};

struct Shared {
    fx: Fixture,
    srv: Server,
}

fn shared() -> &'static Shared {
    static S: OnceLock<Shared> = OnceLock::new();
    S.get_or_init(|| {
        let fx = Fixture::main();
        let srv = Server::start(&fx, &[]);
        Shared { fx, srv }
    })
}

fn srv() -> &'static Server {
    &shared().srv
}

fn fx() -> &'static Fixture {
    &shared().fx
}

fn units_all() -> String {
    format!("/units?{WIN}&direction=input,output")
}

fn metrics_all() -> String {
    format!("/metrics?{WIN}")
}

fn find<'a>(data: &'a [Value], field: &str, value: &str) -> &'a Value {
    data.iter()
        .find(|r| r[field] == value)
        .unwrap_or_else(|| panic!("no record with {field}={value} in {:?}", brief(data)))
}

fn is_uuid_v4(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 36 {
        return false;
    }
    for (i, c) in b.iter().enumerate() {
        let ok = match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        };
        if !ok {
            return false;
        }
    }
    b[14] == b'4' && matches!(b[19].to_ascii_lowercase(), b'8' | b'9' | b'a' | b'b')
}

// ---------------------------------------------------------------------------
// Envelope and records (SPEC 2, CONTRACT 7)
// ---------------------------------------------------------------------------

#[test]
fn units_success_envelope_is_exactly_data_message_meta() {
    // `ok()` asserts: 200, application/json, keys exactly data/message/meta, meta keys
    // exactly timestamp/request_id/query_duration_ms, timestamp format, request id.
    let env = srv().ok(&units_all());
    assert!(!env.data.is_empty());
    assert!(
        !env.meta.contains_key("next_cursor"),
        "no limit: no next_cursor"
    );
}

#[test]
fn metrics_success_envelope_is_exactly_data_message_meta() {
    let env = srv().ok(&metrics_all());
    assert!(!env.data.is_empty());
    assert!(!env.meta.contains_key("next_cursor"));
}

#[test]
fn empty_result_has_the_same_envelope() {
    let env = srv().ok("/units?from=2020-01-01T00:00:00Z&to=2020-01-02T00:00:00Z");
    assert!(env.data.is_empty());
    let env = srv().ok("/metrics?from=2020-01-01T00:00:00Z&to=2020-01-02T00:00:00Z");
    assert!(env.data.is_empty());
}

#[test]
fn meta_timestamp_is_utc_with_milliseconds() {
    let env = srv().ok(&units_all());
    let ts = env.meta["timestamp"].as_str().unwrap();
    assert_eq!(ts.len(), 24, "{ts}");
    assert!(
        ts.ends_with('Z') && ts.as_bytes()[10] == b'T' && ts.as_bytes()[19] == b'.',
        "{ts}"
    );
    let ms = parse_meta_timestamp(ts).expect("YYYY-MM-DDTHH:MM:SS.mmmZ");
    assert!(
        (ms - now_secs() * 1000).abs() < 120_000,
        "timestamp {ts} is not the time of the response"
    );
}

#[test]
fn meta_query_duration_ms_is_a_whole_number() {
    let env = srv().ok(&metrics_all());
    let d = &env.meta["query_duration_ms"];
    assert!(d.is_u64(), "{d}");
    assert!(
        !env.resp.body.contains("\"query_duration_ms\":-"),
        "{}",
        env.resp.body
    );
    // whole milliseconds: written as an integer, not 0.3
    let raw = env
        .resp
        .body
        .split("\"query_duration_ms\":")
        .nth(1)
        .unwrap();
    let num: String = raw
        .chars()
        .take_while(|c| !matches!(c, ',' | '}'))
        .collect();
    assert!(
        num.trim().bytes().all(|b| b.is_ascii_digit()),
        "query_duration_ms written as {num}"
    );
}

#[test]
fn message_is_a_string() {
    let env = srv().ok(&units_all());
    assert!(!env.message.is_empty());
    let env = srv().ok(&metrics_all());
    assert!(!env.message.is_empty());
}

#[test]
fn success_content_type_is_application_json() {
    for path in [units_all(), metrics_all()] {
        let r = srv().get(&path, Some(OPS));
        assert_eq!(r.status, 200, "{}", r.ctx());
        r.assert_json_content_type();
    }
}

#[test]
fn unit_records_carry_exactly_the_spec_fields() {
    let env = srv().ok(&units_all());
    let want: BTreeSet<&str> = UNIT_FIELDS.into_iter().collect();
    for r in &env.data {
        let keys: BTreeSet<&str> = r.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(keys, want, "unit record {r}");
        for f in [
            "station_id",
            "slot",
            "unit_serial",
            "time_created",
            "tz",
            "mode",
            "unit_type",
            "direction",
            "result",
        ] {
            assert!(r[f].is_string(), "{f} of {r}");
        }
        let tags = r["tags"]
            .as_array()
            .unwrap_or_else(|| panic!("tags of {r}"));
        assert!(tags.iter().all(|t| t.is_string()), "{r}");
        assert!(
            matches!(r["direction"].as_str(), Some("input" | "output")),
            "{r}"
        );
    }
}

#[test]
fn metric_records_carry_exactly_the_spec_fields() {
    let env = srv().ok(&metrics_all());
    let want: BTreeSet<&str> = METRIC_FIELDS.into_iter().collect();
    for r in &env.data {
        let keys: BTreeSet<&str> = r.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        // a metric line with "metadata" and "direction" must not leak them
        assert_eq!(keys, want, "metric record {r}");
        for f in METRIC_FIELDS {
            if f == "tags" {
                assert!(
                    r[f].as_array().unwrap().iter().all(|t| t.is_string()),
                    "{r}"
                );
            } else {
                assert!(r[f].is_string(), "{f} of {r}");
            }
        }
    }
}

#[test]
fn all_unit_records_match_the_reference() {
    let env = srv().ok(&units_all());
    assert_records(
        &env.data,
        &fx().expect(&Q::units().both()),
        "units, whole window, both directions",
    );
}

#[test]
fn all_metric_records_match_the_reference() {
    let env = srv().ok(&metrics_all());
    assert_records(
        &env.data,
        &fx().expect(&Q::metrics()),
        "metrics, whole window",
    );
}

#[test]
fn absent_optional_unit_fields_are_empty_string_empty_list_null() {
    let env = srv().ok(&units_all());
    // SN-002: slot, tz, mode, tags, result, metadata absent
    let r = find(&env.data, "unit_serial", "SN-002");
    for f in ["slot", "tz", "mode", "result"] {
        assert_eq!(r[f], json!(""), "{f} of {r}");
    }
    assert_eq!(r["tags"], json!([]), "{r}");
    assert_eq!(r["metadata"], Value::Null, "{r}");
    // SN-005: tags and result given as null = absent
    let r = find(&env.data, "unit_serial", "SN-005");
    assert_eq!(r["tags"], json!([]), "{r}");
    assert_eq!(r["result"], json!(""), "{r}");
    assert_eq!(r["metadata"], Value::Null, "{r}");
    // SN-001 of ST-03: metadata null
    let r = env
        .data
        .iter()
        .find(|r| r["unit_serial"] == "SN-001" && r["station_id"] == "ST-03")
        .unwrap();
    assert_eq!(r["metadata"], Value::Null, "{r}");
    assert_eq!(r["slot"], json!(""), "{r}");
}

#[test]
fn absent_optional_metric_fields_are_empty_string_and_empty_list() {
    let env = srv().ok(&metrics_all());
    let r = find(&env.data, "station_id", "ST-10");
    for f in [
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
        assert_eq!(r[f], json!(""), "{f} of {r}");
    }
    assert_eq!(r["tags"], json!([]), "{r}");
}

#[test]
fn numbers_as_metric_values_come_back_as_their_text() {
    let env = srv().ok(&metrics_all());
    let v = find(&env.data, "unit", "V");
    assert_eq!(v["value"], json!("3.30"), "{v}");
    assert_eq!(v["limit_upper"], json!("3.6"), "{v}");
    assert_eq!(v["limit_lower"], json!("3.0"), "{v}");
    let a = find(&env.data, "unit", "A");
    assert_eq!(a["value"], json!("0.25"), "{a}");
    assert_eq!(a["limit_upper"], json!("1E+5"), "{a}");
    assert_eq!(a["limit_lower"], json!("-0.0"), "{a}");
    let c = find(&env.data, "unit", "C");
    assert_eq!(
        c["value"],
        json!("123456789012345678901234567890.123456789"),
        "{c}"
    );
    let s3 = find(&env.data, "station_id", "ST-03");
    assert_eq!(s3["value"], json!("5"), "{s3}");
    let late = env
        .data
        .iter()
        .find(|r| r["time_created"] == "2024-03-10T23:59:59.999999999Z")
        .unwrap();
    assert_eq!(late["value"], json!("0.5"), "{late}");
}

#[test]
fn time_created_is_returned_exactly_as_written() {
    let env = srv().ok(&units_all());
    let by = |serial: &str, station: &str| -> String {
        env.data
            .iter()
            .find(|r| r["unit_serial"] == serial && r["station_id"] == station)
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
    let env = srv().ok(&units_all());
    let r = env
        .data
        .iter()
        .find(|r| r["unit_serial"] == "SN-001" && r["station_id"] == "ST-01")
        .unwrap();
    assert_eq!(r["metadata"]["op"], json!("alice"), "{r}");
    assert!(
        r["metadata"]["n"].is_number() && r["metadata"]["big"].is_number(),
        "{r}"
    );
    // numbers keep their text
    assert!(
        env.resp.body.contains("1.50"),
        "metadata 1.50 lost its text: {}",
        env.resp.body
    );
    assert!(
        env.resp.body.contains("12345678901234567890123"),
        "big metadata number lost its text"
    );
    assert_eq!(
        find(&env.data, "unit_serial", "SN-003")["metadata"],
        json!("note")
    );
    assert_eq!(
        find(&env.data, "unit_serial", "SN-004")["metadata"],
        json!([1, 2])
    );
}

#[test]
fn unknown_snapshot_fields_are_not_returned() {
    let env = srv().ok(&units_all());
    assert!(!env.resp.body.contains("extra_field"), "{}", env.resp.body);
    let env = srv().ok(&metrics_all());
    assert!(!env.resp.body.contains("ignored"), "{}", env.resp.body);
}

#[test]
fn gzip_multi_member_and_nested_files_are_loaded() {
    let env = srv().ok(&units_all());
    for serial in ["SN-010", "SN-011", "SN-012"] {
        find(&env.data, "unit_serial", serial);
    }
    let env = srv().ok(&metrics_all());
    find(&env.data, "value", "3.31");
    find(&env.data, "name", "Voltage");
}

// ---------------------------------------------------------------------------
// X-Request-Id (CONTRACT 7)
// ---------------------------------------------------------------------------

fn get_with_id(path: &str, id: &str, token: Option<&str>) -> Resp {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut h: Vec<(&str, &str)> = vec![("X-Request-Id", id)];
    if let Some(a) = &auth {
        h.push(("Authorization", a));
    }
    srv().req("GET", path, &h)
}

#[test]
fn valid_x_request_id_is_echoed_in_header_and_meta() {
    let r = get_with_id(&units_all(), "trace-abc_123.XYZ", Some(OPS));
    assert_eq!(r.request_id(), "trace-abc_123.XYZ");
    let env = r.ok();
    assert_eq!(env.meta["request_id"], json!("trace-abc_123.XYZ"));
}

#[test]
fn x_request_id_of_128_visible_characters_is_echoed() {
    let visible: String = (b'!'..=b'~').map(|b| b as char).collect(); // 94 chars
    let id: String = visible.chars().cycle().take(128).collect();
    let r = get_with_id(&metrics_all(), &id, Some(OPS));
    assert_eq!(r.request_id(), id);
    assert_eq!(r.ok().meta["request_id"], json!(id));
    let one = get_with_id(&metrics_all(), "x", Some(OPS));
    assert_eq!(one.request_id(), "x");
}

#[test]
fn x_request_id_of_129_characters_is_replaced_by_a_uuid_v4() {
    let id = "a".repeat(129);
    let r = get_with_id(&units_all(), &id, Some(OPS));
    let got = r.request_id();
    assert_ne!(got, id);
    assert!(is_uuid_v4(&got), "{got}");
    assert_eq!(r.ok().meta["request_id"], json!(got));
}

#[test]
fn x_request_id_with_a_space_is_replaced_by_a_uuid_v4() {
    let r = get_with_id(&units_all(), "abc def", Some(OPS));
    let got = r.request_id();
    assert!(is_uuid_v4(&got), "{got}");
    assert_eq!(r.ok().meta["request_id"], json!(got));
}

#[test]
fn empty_x_request_id_is_replaced_by_a_uuid_v4() {
    let r = get_with_id(&units_all(), "", Some(OPS));
    let got = r.request_id();
    assert!(is_uuid_v4(&got), "{got}");
}

#[test]
fn missing_x_request_id_gets_a_fresh_uuid_v4_each_time() {
    let a = srv().get(&units_all(), Some(OPS)).request_id();
    let b = srv().get(&units_all(), Some(OPS)).request_id();
    assert!(is_uuid_v4(&a), "{a}");
    assert!(is_uuid_v4(&b), "{b}");
    assert_ne!(a, b);
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
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut h: Vec<(&str, &str)> = vec![("X-Request-Id", "err-trace-7")];
        if let Some(a) = &auth {
            h.push(("Authorization", a));
        }
        let r = srv().req(method, &path, &h);
        assert_eq!(r.status, status, "{}", r.ctx());
        assert_eq!(r.request_id(), "err-trace-7", "{}", r.ctx());
        // and a fresh one without the header
        let r2 = srv().req(method, &path, &h[1..]);
        assert!(is_uuid_v4(&r2.request_id()), "{}", r2.ctx());
    }
}

// ---------------------------------------------------------------------------
// HEAD (CONTRACT 7)
// ---------------------------------------------------------------------------

fn comparable_header_names(r: &Resp) -> BTreeSet<String> {
    r.headers
        .iter()
        .map(|(k, _)| k.clone())
        .filter(|k| {
            !matches!(
                k.as_str(),
                "date" | "content-length" | "transfer-encoding" | "connection" | "keep-alive"
            )
        })
        .collect()
}

#[test]
fn head_is_answered_like_get_without_a_body() {
    for path in [units_all(), metrics_all()] {
        let h = [
            ("Authorization", "Bearer tok-ops-0001"),
            ("X-Request-Id", "head-1"),
        ];
        let get = srv().req("GET", &path, &h);
        let head = srv().req("HEAD", &path, &h);
        assert_eq!(get.status, 200, "{}", get.ctx());
        assert_eq!(head.status, 200, "{}", head.ctx());
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
        let auth = token.map(|t| format!("Bearer {t}"));
        let h: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
        let get = srv().req("GET", path, &h);
        let head = srv().req("HEAD", path, &h);
        assert_eq!(get.status, status, "{}", get.ctx());
        assert_eq!(head.status, status, "{}", head.ctx());
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
        "/",
        "/units/extra",
        "/unit",
        "/Units",
        "/metrics/1",
        "/healthzz",
    ] {
        let r = srv().get(path, Some(OPS));
        let details = r.err(404, "not_found");
        let _ = details;
    }
}

#[test]
fn unknown_path_is_404_with_any_method() {
    for m in ["GET", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"] {
        let r = srv().req(m, "/nope", &[]);
        r.err(404, "not_found");
    }
    let head = srv().req("HEAD", "/nope", &[]);
    assert_eq!(head.status, 404, "{}", head.ctx());
    assert!(head.body.is_empty());
}

#[test]
fn unknown_path_404_comes_before_401_and_400() {
    // no token, unknown parameter, bad value: still 404
    let r = srv().get("/nope?bogus=1&from=x", None);
    r.err(404, "not_found");
    let r = srv().req(
        "POST",
        "/nope?bogus=1",
        &[("Authorization", "Bearer wrong")],
    );
    r.err(404, "not_found");
}

#[test]
fn other_methods_on_units_and_metrics_are_405_with_allow() {
    for path in ["/units", "/metrics"] {
        for m in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"] {
            let r = srv().req(m, path, &[("Authorization", "Bearer tok-ops-0001")]);
            r.err(405, "method_not_allowed");
            assert_eq!(r.header("allow"), Some("GET, HEAD"), "{}", r.ctx());
        }
    }
}

#[test]
fn method_not_allowed_comes_before_unauthorized() {
    for path in ["/units", "/metrics"] {
        let r = srv().req("POST", path, &[]);
        r.err(405, "method_not_allowed");
        assert_eq!(r.header("allow"), Some("GET, HEAD"));
        assert!(r.header("www-authenticate").is_none(), "{:?}", r.headers);
        let r = srv().req("PUT", path, &[("Authorization", "Bearer wrong")]);
        r.err(405, "method_not_allowed");
    }
}

#[test]
fn method_not_allowed_comes_before_bad_parameters() {
    let r = srv().req(
        "DELETE",
        "/units?bogus=1&from=x",
        &[("Authorization", "Bearer tok-ops-0001")],
    );
    r.err(405, "method_not_allowed");
    let r = srv().req(
        "POST",
        "/metrics?station_ids=ST-03",
        &[("Authorization", "Bearer tok-line-0001")],
    );
    r.err(405, "method_not_allowed");
}

// ---------------------------------------------------------------------------
// Authentication (CONTRACT 3)
// ---------------------------------------------------------------------------

#[test]
fn missing_authorization_is_401_with_bearer_realm() {
    for path in ["/units", "/metrics"] {
        let r = srv().get(path, None);
        r.err(401, "unauthorized");
        assert_eq!(
            r.header_all("www-authenticate"),
            vec![r#"Bearer realm="stq""#],
            "{}",
            r.ctx()
        );
    }
}

#[test]
fn other_scheme_is_401_without_error_param() {
    for value in ["Basic dXNlcjpwYXNz", "Token tok-ops-0001", "tok-ops-0001"] {
        let r = srv().req("GET", "/units", &[("Authorization", value)]);
        r.err(401, "unauthorized");
        assert_eq!(
            r.header("www-authenticate"),
            Some(r#"Bearer realm="stq""#),
            "{value}"
        );
    }
}

#[test]
fn unknown_bearer_token_is_401_invalid_token() {
    for path in ["/units", "/metrics"] {
        let r = srv().get(path, Some("tok-unknown-9999"));
        r.err(401, "unauthorized");
        assert_eq!(
            r.header("www-authenticate"),
            Some(r#"Bearer realm="stq", error="invalid_token""#)
        );
    }
}

#[test]
fn empty_bearer_token_is_401_invalid_token() {
    let r = srv().req("GET", "/units", &[("Authorization", "Bearer ")]);
    r.err(401, "unauthorized");
    assert_eq!(
        r.header("www-authenticate"),
        Some(r#"Bearer realm="stq", error="invalid_token""#)
    );
}

#[test]
fn bearer_scheme_name_is_case_insensitive() {
    for scheme in ["bearer", "BEARER", "BeArEr"] {
        let r = srv().req(
            "GET",
            &units_all(),
            &[("Authorization", &format!("{scheme} {OPS}"))],
        );
        let env = r.ok();
        assert_records(&env.data, &fx().expect(&Q::units().both()), scheme);
    }
}

#[test]
fn token_never_appears_in_a_response() {
    let secret = "tok-very-secret-unknown-42";
    let r = srv().get("/units", Some(secret));
    r.err(401, "unauthorized");
    assert!(!r.body.contains(secret));
    assert!(r.headers.iter().all(|(_, v)| !v.contains(secret)));
    let r = srv().get("/units?station_ids=ST-03", Some(LINE));
    r.err(403, "forbidden");
    assert!(!r.body.contains(LINE));
    let r = srv().get(&units_all(), Some(OPS));
    assert!(!r.body.contains(OPS));
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
        let r = srv().get(path, None);
        r.err(401, "unauthorized");
        assert_eq!(r.header("www-authenticate"), Some(r#"Bearer realm="stq""#));
        let r = srv().get(path, Some("tok-unknown"));
        r.err(401, "unauthorized");
        assert_eq!(
            r.header("www-authenticate"),
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
        let r = srv().get(path, Some(LINE));
        let d = r.err(403, "forbidden");
        assert_eq!(d, json!({"stations": ["ST-03"]}), "{}", r.ctx());
    }
}

#[test]
fn forbidden_stations_mixed_into_a_list_are_listed_alone_sorted_and_deduplicated() {
    let r = srv().get(
        "/units?station_ids=ST-10,ST-01,ST-03,ST-03,%20ST-99%20,ST-02,ST-2",
        Some(LINE),
    );
    let d = r.err(403, "forbidden");
    assert_eq!(
        d,
        json!({"stations": ["ST-03", "ST-10", "ST-2", "ST-99"]}),
        "{}",
        r.ctx()
    );
    let r = srv().get("/metrics?station_ids=ST-02,ST-01,ST-01,st-01", Some(LINE));
    let d = r.err(403, "forbidden");
    assert_eq!(d, json!({"stations": ["st-01"]}), "{}", r.ctx());
}

#[test]
fn nonexistent_station_is_forbidden_like_an_existing_one() {
    let existing = srv().get("/units?station_ids=ST-03", Some(LINE));
    let missing = srv().get("/units?station_ids=ST-77", Some(LINE));
    let de = existing.err(403, "forbidden");
    let dm = missing.err(403, "forbidden");
    assert_eq!(de, json!({"stations": ["ST-03"]}));
    assert_eq!(dm, json!({"stations": ["ST-77"]}));
    // the same answer but for the id: existence does not leak
    let e = existing.json();
    let m: Value = serde_json::from_str(&missing.body.replace("ST-77", "ST-03")).unwrap();
    assert_eq!(e, m);
    assert_eq!(
        existing.header_all("content-type"),
        missing.header_all("content-type")
    );
}

#[test]
fn nonexistent_station_for_an_all_stations_token_is_an_empty_result() {
    let env = srv().ok(&format!("/units?{WIN}&station_ids=ST-99"));
    assert!(env.data.is_empty());
    let env = srv().ok(&format!("/metrics?{WIN}&station_ids=ST-99"));
    assert!(env.data.is_empty());
}

#[test]
fn station_list_within_the_token_scope_is_200() {
    let env = srv().ok_as(
        &format!("/units?{WIN}&direction=input,output&station_ids=ST-02,ST-01"),
        LINE,
    );
    assert_records(
        &env.data,
        &fx().expect(&Q::units().both().stations(&["ST-01", "ST-02"])),
        "line token",
    );
}

#[test]
fn line_token_never_sees_other_stations_records() {
    let env = srv().ok_as(&units_all(), LINE);
    assert!(!env.data.is_empty());
    for r in &env.data {
        assert!(
            matches!(r["station_id"].as_str(), Some("ST-01" | "ST-02")),
            "{r}"
        );
    }
    assert_records(
        &env.data,
        &fx().expect(&Q::units().both().scope(&["ST-01", "ST-02"])),
        "line units",
    );
    let env = srv().ok_as(&metrics_all(), LINE);
    assert_records(
        &env.data,
        &fx().expect(&Q::metrics().scope(&["ST-01", "ST-02"])),
        "line metrics",
    );
    let env = srv().ok_as(
        &format!("/units?{WIN}&type=Cable&direction=input,output"),
        LINE,
    );
    assert_records(
        &env.data,
        &fx().expect(
            &Q::units()
                .both()
                .types(&["Cable"])
                .scope(&["ST-01", "ST-02"]),
        ),
        "line units Cable",
    );
    // the default window of ST-NOW is out of scope too
    let env = srv().ok_as("/units?direction=input,output", LINE);
    assert!(env.data.is_empty(), "{:?}", brief(&env.data));
    let env = srv().ok_as(&metrics_all(), ST03);
    assert_records(
        &env.data,
        &fx().expect(&Q::metrics().scope(&["ST-03"])),
        "st03 metrics",
    );
}

#[test]
fn no_station_list_covers_every_station_of_an_all_stations_token() {
    let env = srv().ok(&units_all());
    let stations: BTreeSet<&str> = env
        .data
        .iter()
        .map(|r| r["station_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        stations,
        BTreeSet::from(["ST-01", "ST-02", "ST-03", "ST-04", "ST-10", "ST-2"])
    );
}

#[test]
fn unauthorized_and_forbidden_are_distinct() {
    let r = srv().get("/units?station_ids=ST-03", None);
    r.err(401, "unauthorized");
    let r = srv().get("/units?station_ids=ST-03", Some(LINE));
    r.err(403, "forbidden");
    assert!(
        r.header("www-authenticate").is_none(),
        "403 carries no WWW-Authenticate: {:?}",
        r.headers
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
        let r = srv().get(&path, Some(LINE));
        r.err(400, code);
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
    for (m, path, token, status, code) in cases {
        let auth = token.map(|t| format!("Bearer {t}"));
        let h: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
        let r = srv().req(m, path, &h);
        // `err` checks exactly {"error":{"code","message","details"}}
        r.err(status, code);
    }
}

#[test]
fn unauthorized_details_are_null_or_absent_of_the_token() {
    let r = srv().get("/units", Some("tok-zzz"));
    let d = r.err(401, "unauthorized");
    assert!(!d.to_string().contains("tok-zzz"));
}
