//! CONTRACT sections 4 and 5 (and the size rules of 6): query parameters, lists,
//! filters, date-times, the time window and its defaults, limit, too_many_stations,
//! result_too_large.

mod common;

use std::sync::OnceLock;

use common::*;
use serde_json::{json, Value};

struct Shared {
    fx: Fixture,
    srv: Server,
}

/// Default flags.
fn shared() -> &'static Shared {
    static S: OnceLock<Shared> = OnceLock::new();
    S.get_or_init(|| {
        let fx = Fixture::main();
        let srv = Server::start(&fx, &[]);
        Shared { fx, srv }
    })
}

/// `--max-records 3 --max-stations 3`.
fn small() -> &'static Shared {
    static S: OnceLock<Shared> = OnceLock::new();
    S.get_or_init(|| {
        let fx = Fixture::main();
        let srv = Server::start(&fx, &["--max-records", "3", "--max-stations", "3"]);
        Shared { fx, srv }
    })
}

fn srv() -> &'static Server {
    &shared().srv
}

fn fx() -> &'static Fixture {
    &shared().fx
}

fn serials(data: &[Value]) -> Vec<String> {
    data.iter()
        .map(|r| r["unit_serial"].as_str().unwrap().to_string())
        .collect()
}

/// Asserts `GET path` (as ops) equals the reference answer.
#[track_caller]
fn check(path: &str, q: &Q) -> Vec<Value> {
    let env = srv().ok(path);
    assert_records(&env.data, &fx().expect(q), path);
    env.data
}

#[track_caller]
fn bad(path: &str, code: &str) -> Value {
    srv().get(path, Some(OPS)).err(400, code)
}

/// `param=VALUE` (VALUE percent-encoded) on both endpoints -> 400 invalid_parameter
/// with `{"parameter": param, "value": VALUE}`.
#[track_caller]
fn bad_value(param: &str, value: &str) {
    for ep in ["/units", "/metrics"] {
        let path = format!("{ep}?{param}={}", enc(value));
        let d = bad(&path, "invalid_parameter");
        assert_eq!(d, json!({"parameter": param, "value": value}), "{path}");
    }
}

// ---------------------------------------------------------------------------
// Defaults (SPEC 4, CONTRACT 5)
// ---------------------------------------------------------------------------

/// A window that holds exactly what `[now - 24h, now)` holds for the ST-NOW records
/// (they sit at least an hour from both ends).
fn default_window_q(kind: Kind) -> Q {
    let now = fx().now as i128 * NANOS;
    Q::at(kind, now - DAY + HOUR / 2, now + HOUR / 2)
}

#[test]
fn window_defaults_to_the_24_hours_before_the_request_when_neither_end_is_given() {
    let data = check(
        "/units?direction=input,output",
        &default_window_q(Kind::Units).both(),
    );
    assert_eq!(
        serials(&data),
        ["SN-N2", "SN-N7", "SN-N6", "SN-N5", "SN-N1"]
    );
    let data = check("/units", &default_window_q(Kind::Units));
    assert_eq!(serials(&data), ["SN-N2", "SN-N7", "SN-N6", "SN-N1"]);
    let env = srv().ok("/metrics");
    let values: Vec<&str> = env
        .data
        .iter()
        .map(|r| r["value"].as_str().unwrap())
        .collect();
    assert_eq!(values, ["3", "1"]);
    assert_records(
        &env.data,
        &fx().expect(&default_window_q(Kind::Metrics)),
        "/metrics default window",
    );
}

#[test]
fn only_from_means_to_is_from_plus_24_hours() {
    let data = check(
        "/units?from=2024-03-09T10:00:00Z&direction=input,output",
        &Q::new(Kind::Units, "2024-03-09T10:00:00Z", "2024-03-10T10:00:00Z").both(),
    );
    // 10:00:00Z itself is the exclusive end
    assert_eq!(serials(&data), ["SN-022", "SN-004", "SN-005"]);
    check(
        "/metrics?from=2024-03-09T10:00:00Z",
        &Q::new(
            Kind::Metrics,
            "2024-03-09T10:00:00Z",
            "2024-03-10T10:00:00Z",
        ),
    );
}

#[test]
fn only_from_default_end_is_exact_to_the_nanosecond() {
    // end = 2024-03-10T10:00:00.000000001Z: includes the 10:00:00Z ties, not SN-024
    let data = check(
        "/units?from=2024-03-09T10:00:00.000000001Z&direction=input,output",
        &Q::new(
            Kind::Units,
            "2024-03-09T10:00:00.000000001Z",
            "2024-03-10T10:00:00.000000001Z",
        )
        .both(),
    );
    assert!(serials(&data).contains(&"SN-012".to_string()));
    assert!(!serials(&data).contains(&"SN-024".to_string()));
}

#[test]
fn only_from_as_epoch_ms_means_to_is_from_plus_24_hours() {
    let data = check(
        "/units?from=1709978400000&direction=input,output",
        &Q::new(Kind::Units, "2024-03-09T10:00:00Z", "2024-03-10T10:00:00Z").both(),
    );
    assert_eq!(serials(&data), ["SN-022", "SN-004", "SN-005"]);
}

#[test]
fn only_to_means_from_is_to_minus_24_hours() {
    let data = check(
        "/units?to=2024-03-11T10:00:00Z&direction=input,output",
        &Q::new(Kind::Units, "2024-03-10T10:00:00Z", "2024-03-11T10:00:00Z").both(),
    );
    let s = serials(&data);
    assert!(
        s.contains(&"SN-003".to_string()) && s.contains(&"SN-021".to_string()),
        "{s:?}"
    );
    assert!(!s.contains(&"SN-005".to_string()), "{s:?}");
    check(
        "/metrics?to=2024-03-11T00:00:00Z",
        &Q::new(
            Kind::Metrics,
            "2024-03-10T00:00:00Z",
            "2024-03-11T00:00:00Z",
        ),
    );
}

#[test]
fn only_to_with_offset_means_from_is_to_minus_24_hours() {
    check(
        "/units?to=2024-03-11T11:00:00%2B01:00&direction=input,output",
        &Q::new(Kind::Units, "2024-03-10T10:00:00Z", "2024-03-11T10:00:00Z").both(),
    );
}

#[test]
fn direction_defaults_to_output() {
    let data = check(&format!("/units?{WIN}"), &Q::units());
    assert!(!data.is_empty());
    assert!(
        data.iter().all(|r| r["direction"] == "output"),
        "{:?}",
        brief(&data)
    );
    let both = srv()
        .ok(&format!("/units?{WIN}&direction=input,output"))
        .data;
    assert_eq!(both.len(), data.len() + 3);
}

#[test]
fn no_station_list_means_all_accessible_stations() {
    check(
        &format!("/units?{WIN}&direction=input,output"),
        &Q::units().both(),
    );
    check(&format!("/metrics?{WIN}"), &Q::metrics());
}

// ---------------------------------------------------------------------------
// The window (CONTRACT 5)
// ---------------------------------------------------------------------------

#[test]
fn window_is_half_open_from_inclusive_to_exclusive() {
    let data = check(
        "/metrics?from=2024-03-10T10:00:00Z&to=2024-03-10T10:30:00Z",
        &Q::new(
            Kind::Metrics,
            "2024-03-10T10:00:00Z",
            "2024-03-10T10:30:00Z",
        ),
    );
    assert!(
        data.iter().any(|r| r["value"] == "3.30"),
        "from is inclusive"
    );
    assert!(
        !data.iter().any(|r| r["value"] == "0.25"),
        "to is exclusive"
    );
    let data = srv()
        .ok("/metrics?from=2024-03-10T10:30:00Z&to=2024-03-10T10:30:00.000000001Z")
        .data;
    assert_eq!(data.len(), 1);
    assert_eq!(data[0]["value"], "0.25");
}

#[test]
fn window_compares_instants_at_nanosecond_precision() {
    let data = check(
        "/units?from=2024-03-10T09:59:59.999999999Z&to=2024-03-10T10:00:00Z&direction=input,output",
        &Q::new(
            Kind::Units,
            "2024-03-10T09:59:59.999999999Z",
            "2024-03-10T10:00:00Z",
        )
        .both(),
    );
    assert_eq!(serials(&data), ["SN-005"]);
    let data = srv()
        .ok("/units?from=2024-03-10T10:00:00.000000001Z&to=2024-03-10T10:00:00.000000002Z")
        .data;
    assert_eq!(serials(&data), ["SN-024"]);
}

#[test]
fn invalid_window_when_from_equals_to() {
    bad(
        "/units?from=2024-03-10T10:00:00Z&to=2024-03-10T10:00:00Z",
        "invalid_window",
    );
    bad(
        "/metrics?from=1710064800000&to=1710064800000",
        "invalid_window",
    );
}

#[test]
fn invalid_window_when_from_is_after_to() {
    bad(
        "/units?from=2024-03-10T10:00:00Z&to=2024-03-09T10:00:00Z",
        "invalid_window",
    );
    bad(
        "/metrics?from=2024-03-10T10:00:00.000000001Z&to=2024-03-10T10:00:00Z",
        "invalid_window",
    );
}

#[test]
fn invalid_window_compares_instants_not_text() {
    bad(
        "/units?from=2024-03-10T10:00:00Z&to=2024-03-10T11:00:00%2B01:00",
        "invalid_window",
    );
    bad(
        "/units?from=2024-03-10T12:00:00%2B02:00&to=1710064800000",
        "invalid_window",
    );
    // later text, earlier instant
    bad(
        "/units?from=2024-03-10T09:00:00-02:00&to=2024-03-10T10:00:00Z",
        "invalid_window",
    );
}

// ---------------------------------------------------------------------------
// Date-times accepted (CONTRACT 4)
// ---------------------------------------------------------------------------

fn hour_q(kind: Kind) -> Q {
    Q::new(kind, "2024-03-10T10:00:00Z", "2024-03-10T11:00:00Z")
}

#[test]
fn utc_window_reference() {
    let data = check(
        "/units?from=2024-03-10T10:00:00Z&to=2024-03-10T11:00:00Z&direction=input,output",
        &hour_q(Kind::Units).both(),
    );
    assert_eq!(data.len(), 9);
}

#[test]
fn lower_case_t_and_z_are_accepted() {
    check(
        "/units?from=2024-03-10t10:00:00z&to=2024-03-10t11:00:00z&direction=input,output",
        &hour_q(Kind::Units).both(),
    );
}

#[test]
fn minus_zero_offset_means_utc() {
    check(
        "/metrics?from=2024-03-10T10:00:00-00:00&to=2024-03-10T11:00:00-00:00",
        &hour_q(Kind::Metrics),
    );
}

#[test]
fn one_to_nine_fraction_digits_are_accepted() {
    check(
        "/units?from=2024-03-10T09:59:59.9Z&to=2024-03-10T10:00:00.000000001Z&direction=input,output",
        &Q::new(Kind::Units, "2024-03-10T09:59:59.9Z", "2024-03-10T10:00:00.000000001Z").both(),
    );
    check(
        "/units?from=2024-03-10T09:30:00.123456789Z&to=2024-03-10T10:00:00.5Z",
        &Q::new(
            Kind::Units,
            "2024-03-10T09:30:00.123456789Z",
            "2024-03-10T10:00:00.5Z",
        ),
    );
}

#[test]
fn offsets_are_applied() {
    check(
        "/units?from=2024-03-10T08:00:00-02:00&to=2024-03-10T16:00:00%2B05:00&direction=input,output",
        &hour_q(Kind::Units).both(),
    );
}

#[test]
fn unencoded_plus_in_an_offset_is_read_as_plus() {
    // `+` sent raw in the URL decodes to a space; for from/to it is read as `+`
    let raw =
        "/units?from=2024-03-10T11:00:00+01:00&to=2024-03-10T12:00:00+01:00&direction=input,output";
    check(raw, &hour_q(Kind::Units).both());
    let raw = "/metrics?from=2024-03-10T11:00:00+01:00&to=2024-03-10T12:00:00+01:00";
    check(raw, &hour_q(Kind::Metrics));
}

#[test]
fn encoded_plus_in_an_offset_is_accepted() {
    check(
        "/units?from=2024-03-10T11:00:00%2B01:00&to=2024-03-10T12:00:00%2B01:00&direction=input,output",
        &hour_q(Kind::Units).both(),
    );
}

#[test]
fn epoch_milliseconds_from_and_to() {
    // 2024-03-10T10:00:00Z = 1710064800000
    check(
        "/units?from=1710064800000&to=1710068400000&direction=input,output",
        &hour_q(Kind::Units).both(),
    );
    check(
        "/metrics?from=1710064800000&to=2024-03-10T11:00:00Z",
        &hour_q(Kind::Metrics),
    );
    // millisecond precision of the bound: 09:30:00.500 is the start
    check(
        "/units?from=1710063000500&to=1710063000501",
        &Q::new(
            Kind::Units,
            "2024-03-10T09:30:00.5Z",
            "2024-03-10T09:30:00.501Z",
        ),
    );
}

#[test]
fn negative_epoch_milliseconds_are_accepted() {
    let env = srv().ok("/units?from=-86400000&to=0");
    assert!(env.data.is_empty());
    let env = srv().ok("/metrics?from=-1&to=1710064800001");
    assert!(!env.data.is_empty());
}

// ---------------------------------------------------------------------------
// Date-times rejected (CONTRACT 4): 400 invalid_parameter {"parameter","value"}
// ---------------------------------------------------------------------------

#[test]
fn from_with_a_space_for_t_is_invalid_parameter() {
    for ep in ["/units", "/metrics"] {
        let d = bad(
            &format!("{ep}?from=2024-03-10%2010:00:00Z"),
            "invalid_parameter",
        );
        assert_eq!(d["parameter"], json!("from"));
        // the value as sent (a server that reads the space as `+` may echo that)
        assert!(
            d["value"] == json!("2024-03-10 10:00:00Z")
                || d["value"] == json!("2024-03-10+10:00:00Z"),
            "{d}"
        );
        assert_eq!(d.as_object().unwrap().len(), 2, "{d}");
    }
}

#[test]
fn from_missing_seconds_is_invalid_parameter() {
    bad_value("from", "2024-03-10T10:00Z");
}

#[test]
fn from_hour_24_is_invalid_parameter() {
    bad_value("from", "2024-03-10T24:00:00Z");
}

#[test]
fn from_second_60_is_invalid_parameter() {
    bad_value("from", "2024-03-10T23:59:60Z");
}

#[test]
fn from_with_ten_fraction_digits_is_invalid_parameter() {
    bad_value("from", "2024-03-10T10:00:00.1234567890Z");
}

#[test]
fn from_with_offset_without_colon_is_invalid_parameter() {
    bad_value("from", "2024-03-10T10:00:00+0100");
    bad_value("from", "2024-03-10T10:00:00-0100");
}

#[test]
fn from_without_offset_is_invalid_parameter() {
    bad_value("from", "2024-03-10T10:00:00");
}

#[test]
fn from_with_a_dot_but_no_fraction_digits_is_invalid_parameter() {
    bad_value("from", "2024-03-10T10:00:00.Z");
}

#[test]
fn from_with_an_impossible_calendar_date_is_invalid_parameter() {
    bad_value("from", "2024-02-30T10:00:00Z");
    bad_value("from", "2024-13-01T10:00:00Z");
}

#[test]
fn from_in_other_formats_is_invalid_parameter() {
    for v in [
        "yesterday",
        "2024-03-10",
        "2024-3-10T10:00:00Z",
        "1710064800000.5",
        "+1710064800000",
        "1e12",
        "now",
    ] {
        bad_value("from", v);
    }
}

#[test]
fn to_invalid_values_are_invalid_parameter() {
    for v in [
        "2024-03-10T10:00Z",
        "2024-03-10T24:00:00Z",
        "2024-03-10T23:59:60Z",
        "2024-03-10T10:00:00.1234567890Z",
        "2024-03-10T10:00:00+0100",
        "tomorrow",
    ] {
        bad_value("to", v);
    }
}

#[test]
fn empty_from_or_to_is_invalid_parameter() {
    for p in ["from", "to"] {
        for ep in ["/units", "/metrics"] {
            let d = bad(&format!("{ep}?{p}="), "invalid_parameter");
            assert_eq!(d, json!({"parameter": p, "value": ""}));
        }
    }
}

// ---------------------------------------------------------------------------
// Single-valued parameters (CONTRACT 4)
// ---------------------------------------------------------------------------

#[test]
fn single_valued_parameters_given_twice_are_invalid_parameter() {
    let cases = [
        (
            "/units",
            "from=2024-03-10T10:00:00Z&from=2024-03-10T10:00:00Z",
            "from",
        ),
        (
            "/metrics",
            "to=2024-03-10T10:00:00Z&to=2024-03-11T10:00:00Z",
            "to",
        ),
        (
            "/units",
            "station_ids=ST-01&station_ids=ST-02",
            "station_ids",
        ),
        (
            "/metrics",
            "station_ids=ST-01&station_ids=ST-01",
            "station_ids",
        ),
        (
            "/units",
            "serial_number=SN-001&serial_number=SN-002",
            "serial_number",
        ),
        ("/units", "limit=1&limit=1", "limit"),
        ("/metrics", "limit=2&limit=3", "limit"),
    ];
    for (ep, q, p) in cases {
        let d = bad(&format!("{ep}?{q}"), "invalid_parameter");
        assert_eq!(d["parameter"], json!(p), "{ep}?{q}: {d}");
    }
    // a valid cursor, given twice
    let c = srv()
        .ok(&format!("/units?{WIN}&limit=1"))
        .cursor()
        .expect("next_cursor");
    let c = enc(&c);
    let d = bad(
        &format!("/units?{WIN}&limit=1&cursor={c}&cursor={c}"),
        "invalid_parameter",
    );
    assert_eq!(d["parameter"], json!("cursor"), "{d}");
}

#[test]
fn empty_single_valued_parameters_are_invalid_parameter() {
    for (ep, p) in [
        ("/units", "serial_number"),
        ("/units", "limit"),
        ("/metrics", "limit"),
    ] {
        let d = bad(&format!("{ep}?{p}="), "invalid_parameter");
        assert_eq!(d, json!({"parameter": p, "value": ""}));
    }
    let d = bad("/units?limit=1&cursor=", "invalid_parameter");
    assert_eq!(d["parameter"], json!("cursor"));
}

// ---------------------------------------------------------------------------
// station_ids (CONTRACT 4)
// ---------------------------------------------------------------------------

fn st(ids: &[&str]) -> Q {
    Q::units().both().stations(ids)
}

#[test]
fn station_ids_filters_records() {
    check(
        &format!("/units?{WIN}&direction=input,output&station_ids=ST-01,ST-03"),
        &st(&["ST-01", "ST-03"]),
    );
    check(
        &format!("/metrics?{WIN}&station_ids=ST-02"),
        &Q::metrics().stations(&["ST-02"]),
    );
}

#[test]
fn station_ids_match_exactly() {
    let data = check(
        &format!("/units?{WIN}&station_ids=ST-2"),
        &Q::units().stations(&["ST-2"]),
    );
    assert_eq!(serials(&data), ["SN-023"]);
    let env = srv().ok(&format!("/units?{WIN}&station_ids=st-01"));
    assert!(env.data.is_empty());
}

#[test]
fn station_ids_items_are_trimmed_and_empty_items_ignored() {
    check(
        &format!("/units?{WIN}&direction=input,output&station_ids=%20ST-01%20,,ST-03,"),
        &st(&["ST-01", "ST-03"]),
    );
    check(
        &format!("/units?{WIN}&direction=input,output&station_ids=,ST-10%09"),
        &st(&["ST-10"]),
    );
}

#[test]
fn station_ids_duplicates_are_ignored() {
    check(
        &format!("/units?{WIN}&direction=input,output&station_ids=ST-01,ST-01,%20ST-01"),
        &st(&["ST-01"]),
    );
}

#[test]
fn station_ids_encoded_comma_splits() {
    check(
        &format!("/units?{WIN}&direction=input,output&station_ids=ST-01%2CST-03"),
        &st(&["ST-01", "ST-03"]),
    );
}

#[test]
fn station_ids_empty_means_all_stations() {
    check(
        &format!("/units?{WIN}&direction=input,output&station_ids="),
        &Q::units().both(),
    );
    check(
        &format!("/units?{WIN}&direction=input,output&station_ids=%20,%20,"),
        &Q::units().both(),
    );
    check(&format!("/metrics?{WIN}&station_ids="), &Q::metrics());
}

// ---------------------------------------------------------------------------
// type (CONTRACT 4)
// ---------------------------------------------------------------------------

#[test]
fn type_matches_unit_type_exactly_and_case_sensitively() {
    let data = check(
        &format!("/units?{WIN}&type=PCB"),
        &Q::units().types(&["PCB"]),
    );
    assert_eq!(data.len(), 9);
    assert!(data.iter().all(|r| r["unit_type"] == "PCB"));
    let data = check(
        &format!("/units?{WIN}&type=pcb"),
        &Q::units().types(&["pcb"]),
    );
    assert_eq!(serials(&data), ["SN-004"]);
    assert!(srv().ok(&format!("/units?{WIN}&type=PC")).data.is_empty());
}

#[test]
fn type_comma_and_repeated_forms_combine() {
    let q = Q::units().both().types(&["PCB", "Cable", "Module"]);
    check(
        &format!("/units?{WIN}&direction=input,output&type=PCB,Cable&type=Module"),
        &q,
    );
    check(
        &format!("/units?{WIN}&direction=input,output&type=PCB&type=Cable&type=Module"),
        &q,
    );
    check(
        &format!("/units?{WIN}&direction=input,output&type=Cable,PCB"),
        &Q::units().both().types(&["PCB", "Cable"]),
    );
}

#[test]
fn type_items_are_trimmed_and_duplicates_ignored() {
    let q = Q::units().both().types(&["PCB", "Cable"]);
    check(
        &format!("/units?{WIN}&direction=input,output&type=%20PCB%20,%20Cable"),
        &q,
    );
    check(
        &format!("/units?{WIN}&direction=input,output&type=PCB,PCB&type=PCB,,Cable&type=Cable"),
        &q,
    );
}

#[test]
fn type_encoded_comma_splits() {
    check(
        &format!("/units?{WIN}&direction=input,output&type=PCB%2CCable"),
        &Q::units().both().types(&["PCB", "Cable"]),
    );
}

#[test]
fn type_empty_means_no_type_filter() {
    check(&format!("/units?{WIN}&type="), &Q::units());
    check(&format!("/units?{WIN}&type=,%20,&type="), &Q::units());
}

// ---------------------------------------------------------------------------
// serial_number (CONTRACT 4)
// ---------------------------------------------------------------------------

#[test]
fn serial_number_matches_unit_serial_exactly() {
    let data = check(
        &format!("/units?{WIN}&direction=input,output&serial_number=SN-001"),
        &Q::units().both().serial("SN-001"),
    );
    assert_eq!(data.len(), 2);
    assert!(srv()
        .ok(&format!("/units?{WIN}&serial_number=SN-00"))
        .data
        .is_empty());
    assert!(srv()
        .ok(&format!("/units?{WIN}&serial_number=sn-001"))
        .data
        .is_empty());
}

// ---------------------------------------------------------------------------
// direction (CONTRACT 4)
// ---------------------------------------------------------------------------

#[test]
fn direction_input_only() {
    let data = check(
        &format!("/units?{WIN}&direction=input"),
        &Q::units().directions(&["input"]),
    );
    assert_eq!(serials(&data), ["SN-005", "SN-003", "SN-011"]);
}

#[test]
fn direction_comma_and_repeated_forms_combine() {
    let q = Q::units().both();
    check(&format!("/units?{WIN}&direction=input,output"), &q);
    check(
        &format!("/units?{WIN}&direction=input&direction=output"),
        &q,
    );
    check(&format!("/units?{WIN}&direction=input%2Coutput"), &q);
    check(
        &format!("/units?{WIN}&direction=%20input%20,,input&direction=output"),
        &q,
    );
}

#[test]
fn direction_empty_means_the_default_output() {
    check(&format!("/units?{WIN}&direction="), &Q::units());
    check(&format!("/units?{WIN}&direction=%20,"), &Q::units());
}

#[test]
fn direction_other_than_input_or_output_is_invalid_parameter() {
    for v in ["sideways", "input,sideways", "in"] {
        let d = bad(
            &format!("/units?{WIN}&direction={}", enc(v)),
            "invalid_parameter",
        );
        assert_eq!(d["parameter"], json!("direction"), "{d}");
        assert!(d["value"].is_string(), "{d}");
    }
}

// ---------------------------------------------------------------------------
// names (CONTRACT 4)
// ---------------------------------------------------------------------------

#[test]
fn names_match_exactly() {
    let data = check(
        &format!("/metrics?{WIN}&names=voltage"),
        &Q::metrics().names(&["voltage"]),
    );
    assert_eq!(data.len(), 4);
    assert!(data.iter().all(|r| r["name"] == "voltage"));
    let data = check(
        &format!("/metrics?{WIN}&names=Voltage"),
        &Q::metrics().names(&["Voltage"]),
    );
    assert_eq!(data.len(), 1);
}

#[test]
fn names_comma_and_repeated_forms_combine() {
    let q = Q::metrics().names(&["voltage", "current", "temperature"]);
    check(
        &format!("/metrics?{WIN}&names=voltage,current&names=temperature"),
        &q,
    );
    check(
        &format!("/metrics?{WIN}&names=voltage&names=current&names=temperature"),
        &q,
    );
}

#[test]
fn names_items_are_trimmed_and_duplicates_ignored() {
    let q = Q::metrics().names(&["voltage", "current"]);
    check(
        &format!("/metrics?{WIN}&names=%20voltage%20,,voltage&names=current,%20current"),
        &q,
    );
}

#[test]
fn names_encoded_comma_splits() {
    check(
        &format!("/metrics?{WIN}&names=voltage%2Ccurrent"),
        &Q::metrics().names(&["voltage", "current"]),
    );
}

#[test]
fn names_empty_means_no_name_filter() {
    check(&format!("/metrics?{WIN}&names="), &Q::metrics());
}

#[test]
fn filters_combine() {
    let data = check(
        &format!("/units?{WIN}&station_ids=ST-01,ST-03&type=PCB,Cable&direction=input,output&serial_number=SN-001"),
        &Q::units().both().stations(&["ST-01", "ST-03"]).types(&["PCB", "Cable"]).serial("SN-001"),
    );
    assert_eq!(data.len(), 2);
    check(
        &format!("/metrics?{WIN}&station_ids=ST-01&names=voltage"),
        &Q::metrics().stations(&["ST-01"]).names(&["voltage"]),
    );
}

// ---------------------------------------------------------------------------
// Unknown parameters (CONTRACT 4)
// ---------------------------------------------------------------------------

#[test]
fn unknown_parameter_is_400_with_the_parameter_name() {
    let d = bad("/units?foo=1", "unknown_parameter");
    assert_eq!(d, json!({"parameter": "foo"}));
    let d = bad("/metrics?foo=", "unknown_parameter");
    assert_eq!(d, json!({"parameter": "foo"}));
}

#[test]
fn misspelled_station_id_is_unknown_parameter() {
    for ep in ["/units", "/metrics"] {
        let d = bad(&format!("{ep}?{WIN}&station_id=ST-01"), "unknown_parameter");
        assert_eq!(d, json!({"parameter": "station_id"}));
    }
}

#[test]
fn metrics_rejects_the_units_parameters() {
    for p in ["type", "serial_number", "direction"] {
        let d = bad(&format!("/metrics?{p}=x"), "unknown_parameter");
        assert_eq!(d, json!({"parameter": p}));
    }
    let d = bad("/metrics?direction=input", "unknown_parameter");
    assert_eq!(d, json!({"parameter": "direction"}));
}

#[test]
fn units_rejects_the_metrics_parameters() {
    let d = bad("/units?names=x", "unknown_parameter");
    assert_eq!(d, json!({"parameter": "names"}));
}

#[test]
fn parameter_names_are_case_sensitive() {
    for (ep, p) in [
        ("/units", "Station_ids"),
        ("/units", "FROM"),
        ("/units", "Type"),
        ("/metrics", "Names"),
        ("/metrics", "LIMIT"),
    ] {
        let d = bad(&format!("{ep}?{p}=1"), "unknown_parameter");
        assert_eq!(d, json!({"parameter": p}));
    }
}

#[test]
fn token_in_the_url_is_an_unknown_parameter() {
    let d = bad(&format!("/units?access_token={OPS}"), "unknown_parameter");
    assert_eq!(d, json!({"parameter": "access_token"}));
}

// ---------------------------------------------------------------------------
// limit (CONTRACT 4)
// ---------------------------------------------------------------------------

#[test]
fn limit_zero_is_invalid_parameter() {
    bad_value("limit", "0");
}

#[test]
fn limit_negative_is_invalid_parameter() {
    bad_value("limit", "-1");
}

#[test]
fn limit_not_decimal_digits_is_invalid_parameter() {
    for v in ["abc", "1.0", "+1", " 1", "1 ", "0x10", "1e3"] {
        bad_value("limit", v);
    }
}

#[test]
fn limit_above_max_records_is_invalid_parameter() {
    bad_value("limit", "100001");
    bad_value("limit", "99999999999999999999999999");
}

#[test]
fn limit_up_to_max_records_is_accepted() {
    let env = srv().ok(&format!("/units?{WIN}&limit=100000"));
    assert_records(&env.data, &fx().expect(&Q::units()), "limit=100000");
    assert!(env.cursor().is_none());
    let env = srv().ok(&format!("/units?{WIN}&limit=1"));
    assert_eq!(env.data.len(), 1);
}

#[test]
fn limit_with_leading_zeros_is_accepted() {
    let env = srv().ok(&format!("/units?{WIN}&limit=002"));
    assert_eq!(env.data.len(), 2);
    assert_records(&env.data, &fx().expect(&Q::units())[..2], "limit=002");
    let env = srv().ok(&format!("/metrics?{WIN}&limit=0000000000000000000001"));
    assert_eq!(env.data.len(), 1);
}

// ---------------------------------------------------------------------------
// --max-stations: too_many_stations (CONTRACT 4)
// ---------------------------------------------------------------------------

#[test]
fn too_many_stations_beyond_max_stations() {
    let s = &small().srv;
    for ep in ["/units", "/metrics"] {
        let r = s.get(
            &format!("{ep}?{WIN}&station_ids=ST-01,ST-02,ST-03,ST-04"),
            Some(OPS),
        );
        r.err(400, "too_many_stations");
    }
}

#[test]
fn max_stations_counts_distinct_ids() {
    let s = &small().srv;
    let env = s.ok(&format!(
        "/units?{WIN}&direction=input&station_ids=ST-01,ST-02,ST-03,ST-01,%20ST-02,,"
    ));
    assert_records(
        &env.data,
        &small().fx.expect(
            &Q::units()
                .directions(&["input"])
                .stations(&["ST-01", "ST-02", "ST-03"]),
        ),
        "3 distinct stations",
    );
}

#[test]
fn too_many_stations_comes_before_forbidden() {
    let s = &small().srv;
    let r = s.get(
        &format!("/units?{WIN}&station_ids=ST-03,ST-04,ST-10,ST-2"),
        Some(LINE),
    );
    r.err(400, "too_many_stations");
}

// ---------------------------------------------------------------------------
// --max-records: result_too_large (CONTRACT 6)
// ---------------------------------------------------------------------------

#[test]
fn result_too_large_without_limit() {
    let s = &small().srv;
    for path in [format!("/units?{WIN}"), format!("/metrics?{WIN}")] {
        let d = s.get(&path, Some(OPS)).err(400, "result_too_large");
        assert_eq!(d, json!({"max_records": 3}), "{path}");
    }
}

#[test]
fn result_of_exactly_max_records_is_returned() {
    let s = &small().srv;
    let env = s.ok(&format!(
        "/units?{WIN}&station_ids=ST-03&direction=input,output"
    ));
    assert_eq!(env.data.len(), 3);
    assert_records(
        &env.data,
        &small().fx.expect(&Q::units().both().stations(&["ST-03"])),
        "3 records",
    );
}

#[test]
fn result_too_large_counts_after_the_filters() {
    let s = &small().srv;
    let env = s.ok(&format!("/units?{WIN}&direction=input"));
    assert_eq!(serials(&env.data), ["SN-005", "SN-003", "SN-011"]);
    let env = s.ok_as(&format!("/metrics?{WIN}"), ST03);
    assert_eq!(env.data.len(), 1);
}

#[test]
fn limit_avoids_result_too_large() {
    let s = &small().srv;
    let env = s.ok(&format!("/units?{WIN}&limit=2"));
    assert_eq!(env.data.len(), 2);
    assert!(env.cursor().is_some());
    let env = s.ok(&format!("/units?{WIN}&limit=3"));
    assert_eq!(env.data.len(), 3);
    let env = s.ok(&format!("/units?{WIN}&limit=003"));
    assert_eq!(env.data.len(), 3);
}

#[test]
fn limit_above_a_small_max_records_is_invalid_parameter() {
    let s = &small().srv;
    let d = s
        .get(&format!("/units?{WIN}&limit=4"), Some(OPS))
        .err(400, "invalid_parameter");
    assert_eq!(d, json!({"parameter": "limit", "value": "4"}));
}

#[test]
fn forbidden_comes_before_result_too_large() {
    let s = &small().srv;
    let d = s
        .get(&format!("/units?{WIN}&station_ids=ST-01,ST-03"), Some(LINE))
        .err(403, "forbidden");
    assert_eq!(d, json!({"stations": ["ST-03"]}));
}

#[test]
fn parameter_errors_come_before_result_too_large() {
    let s = &small().srv;
    s.get(&format!("/units?{WIN}&bogus=1"), Some(OPS))
        .err(400, "unknown_parameter");
    s.get(&format!("/units?{WIN}&direction=sideways"), Some(OPS))
        .err(400, "invalid_parameter");
    s.get(&format!("/units?{WIN}&limit=1&cursor=zzz"), Some(OPS))
        .err(400, "invalid_cursor");
}

#[test]
fn unauthorized_comes_before_result_too_large() {
    let s = &small().srv;
    s.get(&format!("/units?{WIN}"), None)
        .err(401, "unauthorized");
}

#[test]
fn url_decoding_comes_first_also_for_parameter_names() {
    // `station%5Fids` is `station_ids` once decoded
    check(
        &format!("/units?{WIN}&direction=input,output&station%5Fids=ST-03"),
        &Q::units().both().stations(&["ST-03"]),
    );
    let d = bad("/units?station%5Fid=ST-03", "unknown_parameter");
    assert_eq!(d, json!({"parameter": "station_id"}));
}
