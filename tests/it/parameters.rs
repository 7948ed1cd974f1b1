//! CONTRACT sections 4 and 5 (and the size rules of 6): query parameters, lists,
//! filters, date-times, the time window and its defaults, limit, too_many_stations,
//! result_too_large.

use std::sync::OnceLock;

use crate::common::*;
use serde_json::{json, Value};

/// The main fixture served with `--max-records 3 --max-stations 3`.
fn small() -> &'static Shared {
    static SMALL: OnceLock<Shared> = OnceLock::new();
    SMALL.get_or_init(|| Shared::start(&["--max-records", "3", "--max-stations", "3"]))
}

/// Asserts `GET path` (as ops) equals the reference answer.
#[track_caller]
fn check(path: &str, query: &Query) -> Vec<Value> {
    let envelope = server().ok(path);
    assert_records(&envelope.data, &fixture().expect(query), path);
    envelope.data
}

#[track_caller]
fn bad(path: &str, code: &str) -> Value {
    server().get(path, Some(OPS)).error(400, code)
}

/// `PARAMETER=VALUE` (VALUE percent-encoded) on both endpoints -> 400 invalid_parameter
/// with `{"parameter": PARAMETER, "value": VALUE}`.
#[track_caller]
fn bad_value(parameter: &str, value: &str) {
    for endpoint in ["/units", "/metrics"] {
        let path = format!("{endpoint}?{parameter}={}", percent_encode(value));
        let details = bad(&path, "invalid_parameter");
        assert_eq!(
            details,
            json!({"parameter": parameter, "value": value}),
            "{path}"
        );
    }
}

// ---------------------------------------------------------------------------
// Defaults (SPEC 4, CONTRACT 5)
// ---------------------------------------------------------------------------

/// A window that holds exactly what `[now - 24h, now)` holds for the ST-NOW records
/// (they sit at least an hour from both ends).
fn default_window_query(kind: Kind) -> Query {
    let now = fixture().now as i128 * SECOND;
    Query::at(kind, now - DAY + HOUR / 2, now + HOUR / 2)
}

#[test]
fn window_defaults_to_the_24_hours_before_the_request_when_neither_end_is_given() {
    let data = check(
        "/units?direction=input,output",
        &default_window_query(Kind::Units).both(),
    );
    assert_eq!(
        serials(&data),
        ["SN-N2", "SN-N7", "SN-N6", "SN-N5", "SN-N1"]
    );
    let data = check("/units", &default_window_query(Kind::Units));
    assert_eq!(serials(&data), ["SN-N2", "SN-N7", "SN-N6", "SN-N1"]);
    let envelope = server().ok("/metrics");
    assert_eq!(metric_values(&envelope.data), ["3", "1"]);
    assert_records(
        &envelope.data,
        &fixture().expect(&default_window_query(Kind::Metrics)),
        "/metrics default window",
    );
}

#[test]
fn only_from_means_to_is_from_plus_24_hours() {
    let data = check(
        "/units?from=2024-03-09T10:00:00Z&direction=input,output",
        &Query::new(Kind::Units, "2024-03-09T10:00:00Z", "2024-03-10T10:00:00Z").both(),
    );
    // 10:00:00Z itself is the exclusive end
    assert_eq!(serials(&data), ["SN-022", "SN-004", "SN-005"]);
    check(
        "/metrics?from=2024-03-09T10:00:00Z",
        &Query::new(
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
        &Query::new(
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
        &Query::new(Kind::Units, "2024-03-09T10:00:00Z", "2024-03-10T10:00:00Z").both(),
    );
    assert_eq!(serials(&data), ["SN-022", "SN-004", "SN-005"]);
}

#[test]
fn only_to_means_from_is_to_minus_24_hours() {
    let data = check(
        "/units?to=2024-03-11T10:00:00Z&direction=input,output",
        &Query::new(Kind::Units, "2024-03-10T10:00:00Z", "2024-03-11T10:00:00Z").both(),
    );
    let found = serials(&data);
    assert!(
        found.contains(&"SN-003".to_string()) && found.contains(&"SN-021".to_string()),
        "{found:?}"
    );
    assert!(!found.contains(&"SN-005".to_string()), "{found:?}");
    check(
        "/metrics?to=2024-03-11T00:00:00Z",
        &Query::new(
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
        &Query::new(Kind::Units, "2024-03-10T10:00:00Z", "2024-03-11T10:00:00Z").both(),
    );
}

#[test]
fn direction_defaults_to_output() {
    let data = check(&format!("/units?{WINDOW}"), &Query::units());
    assert!(!data.is_empty());
    assert!(
        data.iter().all(|record| record["direction"] == "output"),
        "{:?}",
        brief(&data)
    );
    let both = server()
        .ok(&format!("/units?{WINDOW}&direction=input,output"))
        .data;
    assert_eq!(both.len(), data.len() + 3);
}

#[test]
fn no_station_list_means_all_accessible_stations() {
    check(
        &format!("/units?{WINDOW}&direction=input,output"),
        &Query::units().both(),
    );
    check(&format!("/metrics?{WINDOW}"), &Query::metrics());
}

// ---------------------------------------------------------------------------
// The window (CONTRACT 5)
// ---------------------------------------------------------------------------

#[test]
fn window_is_half_open_from_inclusive_to_exclusive() {
    let data = check(
        "/metrics?from=2024-03-10T10:00:00Z&to=2024-03-10T10:30:00Z",
        &Query::new(
            Kind::Metrics,
            "2024-03-10T10:00:00Z",
            "2024-03-10T10:30:00Z",
        ),
    );
    assert!(
        data.iter().any(|record| record["value"] == "3.30"),
        "from is inclusive"
    );
    assert!(
        !data.iter().any(|record| record["value"] == "0.25"),
        "to is exclusive"
    );
    let data = server()
        .ok("/metrics?from=2024-03-10T10:30:00Z&to=2024-03-10T10:30:00.000000001Z")
        .data;
    assert_eq!(data.len(), 1);
    assert_eq!(data[0]["value"], "0.25");
}

#[test]
fn window_compares_instants_at_nanosecond_precision() {
    let data = check(
        "/units?from=2024-03-10T09:59:59.999999999Z&to=2024-03-10T10:00:00Z&direction=input,output",
        &Query::new(
            Kind::Units,
            "2024-03-10T09:59:59.999999999Z",
            "2024-03-10T10:00:00Z",
        )
        .both(),
    );
    assert_eq!(serials(&data), ["SN-005"]);
    let data = server()
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

fn hour_query(kind: Kind) -> Query {
    Query::new(kind, "2024-03-10T10:00:00Z", "2024-03-10T11:00:00Z")
}

#[test]
fn utc_window_reference() {
    let data = check(
        "/units?from=2024-03-10T10:00:00Z&to=2024-03-10T11:00:00Z&direction=input,output",
        &hour_query(Kind::Units).both(),
    );
    assert_eq!(data.len(), 9);
}

#[test]
fn lower_case_t_and_z_are_accepted() {
    check(
        "/units?from=2024-03-10t10:00:00z&to=2024-03-10t11:00:00z&direction=input,output",
        &hour_query(Kind::Units).both(),
    );
}

#[test]
fn minus_zero_offset_means_utc() {
    check(
        "/metrics?from=2024-03-10T10:00:00-00:00&to=2024-03-10T11:00:00-00:00",
        &hour_query(Kind::Metrics),
    );
}

#[test]
fn one_to_nine_fraction_digits_are_accepted() {
    check(
        "/units?from=2024-03-10T09:59:59.9Z&to=2024-03-10T10:00:00.000000001Z&direction=input,output",
        &Query::new(Kind::Units, "2024-03-10T09:59:59.9Z", "2024-03-10T10:00:00.000000001Z").both(),
    );
    check(
        "/units?from=2024-03-10T09:30:00.123456789Z&to=2024-03-10T10:00:00.5Z",
        &Query::new(
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
        &hour_query(Kind::Units).both(),
    );
}

#[test]
fn unencoded_plus_in_an_offset_is_read_as_plus() {
    // `+` sent raw in the URL decodes to a space; for from/to it is read as `+`
    let raw =
        "/units?from=2024-03-10T11:00:00+01:00&to=2024-03-10T12:00:00+01:00&direction=input,output";
    check(raw, &hour_query(Kind::Units).both());
    let raw = "/metrics?from=2024-03-10T11:00:00+01:00&to=2024-03-10T12:00:00+01:00";
    check(raw, &hour_query(Kind::Metrics));
}

#[test]
fn encoded_plus_in_an_offset_is_accepted() {
    check(
        "/units?from=2024-03-10T11:00:00%2B01:00&to=2024-03-10T12:00:00%2B01:00&direction=input,output",
        &hour_query(Kind::Units).both(),
    );
}

#[test]
fn epoch_milliseconds_from_and_to() {
    // 2024-03-10T10:00:00Z = 1710064800000
    check(
        "/units?from=1710064800000&to=1710068400000&direction=input,output",
        &hour_query(Kind::Units).both(),
    );
    check(
        "/metrics?from=1710064800000&to=2024-03-10T11:00:00Z",
        &hour_query(Kind::Metrics),
    );
    // millisecond precision of the bound: 09:30:00.500 is the start
    check(
        "/units?from=1710063000500&to=1710063000501",
        &Query::new(
            Kind::Units,
            "2024-03-10T09:30:00.5Z",
            "2024-03-10T09:30:00.501Z",
        ),
    );
}

#[test]
fn negative_epoch_milliseconds_are_accepted() {
    let envelope = server().ok("/units?from=-86400000&to=0");
    assert!(envelope.data.is_empty());
    let envelope = server().ok("/metrics?from=-1&to=1710064800001");
    assert!(!envelope.data.is_empty());
}

// ---------------------------------------------------------------------------
// Date-times rejected (CONTRACT 4): 400 invalid_parameter {"parameter","value"}
// ---------------------------------------------------------------------------

#[test]
fn from_with_a_space_for_t_is_invalid_parameter() {
    for endpoint in ["/units", "/metrics"] {
        let details = bad(
            &format!("{endpoint}?from=2024-03-10%2010:00:00Z"),
            "invalid_parameter",
        );
        assert_eq!(details["parameter"], json!("from"));
        // the value as sent (a server that reads the space as `+` may echo that)
        assert!(
            details["value"] == json!("2024-03-10 10:00:00Z")
                || details["value"] == json!("2024-03-10+10:00:00Z"),
            "{details}"
        );
        assert_eq!(details.as_object().unwrap().len(), 2, "{details}");
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
    for value in [
        "yesterday",
        "2024-03-10",
        "2024-3-10T10:00:00Z",
        "1710064800000.5",
        "+1710064800000",
        "1e12",
        "now",
    ] {
        bad_value("from", value);
    }
}

#[test]
fn to_invalid_values_are_invalid_parameter() {
    for value in [
        "2024-03-10T10:00Z",
        "2024-03-10T24:00:00Z",
        "2024-03-10T23:59:60Z",
        "2024-03-10T10:00:00.1234567890Z",
        "2024-03-10T10:00:00+0100",
        "tomorrow",
    ] {
        bad_value("to", value);
    }
}

#[test]
fn empty_from_or_to_is_invalid_parameter() {
    for parameter in ["from", "to"] {
        for endpoint in ["/units", "/metrics"] {
            let details = bad(&format!("{endpoint}?{parameter}="), "invalid_parameter");
            assert_eq!(details, json!({"parameter": parameter, "value": ""}));
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
    for (endpoint, query, parameter) in cases {
        let details = bad(&format!("{endpoint}?{query}"), "invalid_parameter");
        assert_eq!(
            details["parameter"],
            json!(parameter),
            "{endpoint}?{query}: {details}"
        );
    }
    // a valid cursor, given twice
    let cursor = server()
        .ok(&format!("/units?{WINDOW}&limit=1"))
        .cursor()
        .expect("next_cursor");
    let cursor = percent_encode(&cursor);
    let details = bad(
        &format!("/units?{WINDOW}&limit=1&cursor={cursor}&cursor={cursor}"),
        "invalid_parameter",
    );
    assert_eq!(details["parameter"], json!("cursor"), "{details}");
}

#[test]
fn empty_single_valued_parameters_are_invalid_parameter() {
    for (endpoint, parameter) in [
        ("/units", "serial_number"),
        ("/units", "limit"),
        ("/metrics", "limit"),
    ] {
        let details = bad(&format!("{endpoint}?{parameter}="), "invalid_parameter");
        assert_eq!(details, json!({"parameter": parameter, "value": ""}));
    }
    let details = bad("/units?limit=1&cursor=", "invalid_parameter");
    assert_eq!(details["parameter"], json!("cursor"));
}

// ---------------------------------------------------------------------------
// station_ids (CONTRACT 4)
// ---------------------------------------------------------------------------

fn units_at_stations(stations: &[&str]) -> Query {
    Query::units().both().stations(stations)
}

#[test]
fn station_ids_filters_records() {
    check(
        &format!("/units?{WINDOW}&direction=input,output&station_ids=ST-01,ST-03"),
        &units_at_stations(&["ST-01", "ST-03"]),
    );
    check(
        &format!("/metrics?{WINDOW}&station_ids=ST-02"),
        &Query::metrics().stations(&["ST-02"]),
    );
}

#[test]
fn station_ids_match_exactly() {
    let data = check(
        &format!("/units?{WINDOW}&station_ids=ST-2"),
        &Query::units().stations(&["ST-2"]),
    );
    assert_eq!(serials(&data), ["SN-023"]);
    let envelope = server().ok(&format!("/units?{WINDOW}&station_ids=st-01"));
    assert!(envelope.data.is_empty());
}

#[test]
fn station_ids_items_are_trimmed_and_empty_items_ignored() {
    check(
        &format!("/units?{WINDOW}&direction=input,output&station_ids=%20ST-01%20,,ST-03,"),
        &units_at_stations(&["ST-01", "ST-03"]),
    );
    check(
        &format!("/units?{WINDOW}&direction=input,output&station_ids=,ST-10%09"),
        &units_at_stations(&["ST-10"]),
    );
}

#[test]
fn station_ids_duplicates_are_ignored() {
    check(
        &format!("/units?{WINDOW}&direction=input,output&station_ids=ST-01,ST-01,%20ST-01"),
        &units_at_stations(&["ST-01"]),
    );
}

#[test]
fn station_ids_encoded_comma_splits() {
    check(
        &format!("/units?{WINDOW}&direction=input,output&station_ids=ST-01%2CST-03"),
        &units_at_stations(&["ST-01", "ST-03"]),
    );
}

#[test]
fn station_ids_empty_means_all_stations() {
    check(
        &format!("/units?{WINDOW}&direction=input,output&station_ids="),
        &Query::units().both(),
    );
    check(
        &format!("/units?{WINDOW}&direction=input,output&station_ids=%20,%20,"),
        &Query::units().both(),
    );
    check(
        &format!("/metrics?{WINDOW}&station_ids="),
        &Query::metrics(),
    );
}

// ---------------------------------------------------------------------------
// type (CONTRACT 4)
// ---------------------------------------------------------------------------

#[test]
fn type_matches_unit_type_exactly_and_case_sensitively() {
    let data = check(
        &format!("/units?{WINDOW}&type=PCB"),
        &Query::units().types(&["PCB"]),
    );
    assert_eq!(data.len(), 9);
    assert!(data.iter().all(|record| record["unit_type"] == "PCB"));
    let data = check(
        &format!("/units?{WINDOW}&type=pcb"),
        &Query::units().types(&["pcb"]),
    );
    assert_eq!(serials(&data), ["SN-004"]);
    assert!(server()
        .ok(&format!("/units?{WINDOW}&type=PC"))
        .data
        .is_empty());
}

#[test]
fn type_comma_and_repeated_forms_combine() {
    let query = Query::units().both().types(&["PCB", "Cable", "Module"]);
    check(
        &format!("/units?{WINDOW}&direction=input,output&type=PCB,Cable&type=Module"),
        &query,
    );
    check(
        &format!("/units?{WINDOW}&direction=input,output&type=PCB&type=Cable&type=Module"),
        &query,
    );
    check(
        &format!("/units?{WINDOW}&direction=input,output&type=Cable,PCB"),
        &Query::units().both().types(&["PCB", "Cable"]),
    );
}

#[test]
fn type_items_are_trimmed_and_duplicates_ignored() {
    let query = Query::units().both().types(&["PCB", "Cable"]);
    check(
        &format!("/units?{WINDOW}&direction=input,output&type=%20PCB%20,%20Cable"),
        &query,
    );
    check(
        &format!("/units?{WINDOW}&direction=input,output&type=PCB,PCB&type=PCB,,Cable&type=Cable"),
        &query,
    );
}

#[test]
fn type_encoded_comma_splits() {
    check(
        &format!("/units?{WINDOW}&direction=input,output&type=PCB%2CCable"),
        &Query::units().both().types(&["PCB", "Cable"]),
    );
}

#[test]
fn type_empty_means_no_type_filter() {
    check(&format!("/units?{WINDOW}&type="), &Query::units());
    check(
        &format!("/units?{WINDOW}&type=,%20,&type="),
        &Query::units(),
    );
}

// ---------------------------------------------------------------------------
// serial_number (CONTRACT 4)
// ---------------------------------------------------------------------------

#[test]
fn serial_number_matches_unit_serial_exactly() {
    let data = check(
        &format!("/units?{WINDOW}&direction=input,output&serial_number=SN-001"),
        &Query::units().both().serial("SN-001"),
    );
    assert_eq!(data.len(), 2);
    assert!(server()
        .ok(&format!("/units?{WINDOW}&serial_number=SN-00"))
        .data
        .is_empty());
    assert!(server()
        .ok(&format!("/units?{WINDOW}&serial_number=sn-001"))
        .data
        .is_empty());
}

// ---------------------------------------------------------------------------
// result on /units, serial_number on /metrics (CONTRACT 4, revision 4)
// ---------------------------------------------------------------------------

/// Units with results in several spellings, and metrics of two units, in two files
/// of one station and one of another.
fn traced() -> &'static Shared {
    static TRACED: OnceLock<Shared> = OnceLock::new();
    TRACED.get_or_init(|| {
        let unit = |station: &str, serial: &str, minute: u32, result: Option<&str>| {
            let result = result.map_or("null".to_owned(), |result| format!("\"{result}\""));
            format!(
                r#"{{"station_id":"{station}","unit_serial":"{serial}","time_created":"2024-03-10T10:{minute:02}:00Z","direction":"output","result":{result}}}"#
            )
        };
        let metric = |station: &str, serial: &str, minute: u32, name: &str| {
            format!(
                r#"{{"station_id":"{station}","unit_serial":"{serial}","time_created":"2024-03-10T10:{minute:02}:30Z","name":"{name}","value":1.5}}"#
            )
        };
        let lines = |lines: Vec<String>| lines.join("\n") + "\n";
        let fixture = Fixture::from_files(&[
            FileSpec::plain(
                "a.units.jsonl",
                lines(vec![
                    unit("ST-01", "SN-1", 1, Some("pass")),
                    unit("ST-01", "SN-2", 2, Some("FAIL")),
                    unit("ST-01", "SN-3", 3, Some("Fail")),
                    unit("ST-02", "SN-4", 4, Some("abort")),
                    unit("ST-02", "SN-5", 5, None),
                    unit("ST-02", "SN-6", 6, Some("failed")),
                ]),
            ),
            FileSpec::plain(
                "a.metrics.jsonl",
                lines(vec![
                    metric("ST-01", "SN-2", 2, "voltage"),
                    metric("ST-01", "SN-2", 2, "current"),
                    metric("ST-01", "SN-1", 1, "voltage"),
                    metric("ST-02", "SN-2", 7, "voltage"),
                    metric("ST-02", "sn-2", 8, "voltage"),
                ]),
            ),
        ]);
        let server = Server::start(&fixture, &[]);
        Shared { fixture, server }
    })
}

/// `GET path` on the traced fixture equals the reference answer of `query`.
#[track_caller]
fn check_traced(path: &str, query: &Query) -> Vec<Value> {
    let envelope = traced().server.ok(path);
    assert_records(&envelope.data, &traced().fixture.expect(query), path);
    envelope.data
}

/// Issue 34: a list of the day's failures. `result` matches ignoring ASCII case, in
/// both list forms, and never matches a longer value or a record without one.
#[test]
fn issue_34_result_lists_units_by_result_ignoring_case() {
    let data = check_traced(
        &format!("/units?{WINDOW}&result=fail"),
        &Query::units().results(&["fail"]),
    );
    assert_eq!(serials(&data), ["SN-2", "SN-3"]);
    let data = check_traced(
        &format!("/units?{WINDOW}&result=ABORT,%20fail&result=FAIL"),
        &Query::units().results(&["abort", "fail"]),
    );
    assert_eq!(serials(&data), ["SN-2", "SN-3", "SN-4"]);
    let data = check_traced(
        &format!("/units?{WINDOW}&result=,&station_ids=ST-02"),
        &Query::units().stations(&["ST-02"]),
    );
    assert_eq!(serials(&data), ["SN-4", "SN-5", "SN-6"]);
    let none = traced()
        .server
        .ok(&format!("/units?{WINDOW}&result=unknown"));
    assert!(none.data.is_empty());
}

/// Issue 34: a unit traced through its measurements: `/metrics?serial_number=`
/// matches `unit_serial` exactly, on every station, with `names` too, and pages.
#[test]
fn issue_34_serial_number_selects_one_units_measurements() {
    let data = check_traced(
        &format!("/metrics?{WINDOW}&serial_number=SN-2"),
        &Query::metrics().serial("SN-2"),
    );
    assert_eq!(data.len(), 3);
    check_traced(
        &format!("/metrics?{WINDOW}&serial_number=SN-2&names=voltage"),
        &Query::metrics().serial("SN-2").names(&["voltage"]),
    );
    let first = traced()
        .server
        .ok(&format!("/metrics?{WINDOW}&serial_number=SN-2&limit=2"));
    assert_eq!(first.data.len(), 2);
    let cursor = first.cursor().expect("a next page");
    let rest = traced().server.ok(&format!(
        "/metrics?{WINDOW}&serial_number=SN-2&limit=2&cursor={cursor}"
    ));
    let mut walked = first.data.clone();
    walked.extend(rest.data);
    assert_records(&walked, &data, "a walk of SN-2's measurements");
    // A cursor is sealed to its serial number.
    traced()
        .server
        .get(
            &format!("/metrics?{WINDOW}&serial_number=SN-1&limit=2&cursor={cursor}"),
            Some(OPS),
        )
        .error(400, "invalid_cursor");
}

// ---------------------------------------------------------------------------
// direction (CONTRACT 4)
// ---------------------------------------------------------------------------

#[test]
fn direction_input_only() {
    let data = check(
        &format!("/units?{WINDOW}&direction=input"),
        &Query::units().directions(&["input"]),
    );
    assert_eq!(serials(&data), ["SN-005", "SN-003", "SN-011"]);
}

#[test]
fn direction_comma_and_repeated_forms_combine() {
    let query = Query::units().both();
    check(&format!("/units?{WINDOW}&direction=input,output"), &query);
    check(
        &format!("/units?{WINDOW}&direction=input&direction=output"),
        &query,
    );
    check(&format!("/units?{WINDOW}&direction=input%2Coutput"), &query);
    check(
        &format!("/units?{WINDOW}&direction=%20input%20,,input&direction=output"),
        &query,
    );
}

#[test]
fn direction_empty_means_the_default_output() {
    check(&format!("/units?{WINDOW}&direction="), &Query::units());
    check(&format!("/units?{WINDOW}&direction=%20,"), &Query::units());
}

#[test]
fn direction_other_than_input_or_output_is_invalid_parameter() {
    for value in ["sideways", "input,sideways", "in"] {
        let details = bad(
            &format!("/units?{WINDOW}&direction={}", percent_encode(value)),
            "invalid_parameter",
        );
        assert_eq!(details["parameter"], json!("direction"), "{details}");
        assert!(details["value"].is_string(), "{details}");
    }
}

// ---------------------------------------------------------------------------
// names (CONTRACT 4)
// ---------------------------------------------------------------------------

#[test]
fn names_match_exactly() {
    let data = check(
        &format!("/metrics?{WINDOW}&names=voltage"),
        &Query::metrics().names(&["voltage"]),
    );
    assert_eq!(data.len(), 4);
    assert!(data.iter().all(|record| record["name"] == "voltage"));
    let data = check(
        &format!("/metrics?{WINDOW}&names=Voltage"),
        &Query::metrics().names(&["Voltage"]),
    );
    assert_eq!(data.len(), 1);
}

#[test]
fn names_comma_and_repeated_forms_combine() {
    let query = Query::metrics().names(&["voltage", "current", "temperature"]);
    check(
        &format!("/metrics?{WINDOW}&names=voltage,current&names=temperature"),
        &query,
    );
    check(
        &format!("/metrics?{WINDOW}&names=voltage&names=current&names=temperature"),
        &query,
    );
}

#[test]
fn names_items_are_trimmed_and_duplicates_ignored() {
    let query = Query::metrics().names(&["voltage", "current"]);
    check(
        &format!("/metrics?{WINDOW}&names=%20voltage%20,,voltage&names=current,%20current"),
        &query,
    );
}

#[test]
fn names_encoded_comma_splits() {
    check(
        &format!("/metrics?{WINDOW}&names=voltage%2Ccurrent"),
        &Query::metrics().names(&["voltage", "current"]),
    );
}

#[test]
fn names_empty_means_no_name_filter() {
    check(&format!("/metrics?{WINDOW}&names="), &Query::metrics());
}

#[test]
fn filters_combine() {
    let data = check(
        &format!("/units?{WINDOW}&station_ids=ST-01,ST-03&type=PCB,Cable&direction=input,output&serial_number=SN-001"),
        &Query::units().both().stations(&["ST-01", "ST-03"]).types(&["PCB", "Cable"]).serial("SN-001"),
    );
    assert_eq!(data.len(), 2);
    check(
        &format!("/metrics?{WINDOW}&station_ids=ST-01&names=voltage"),
        &Query::metrics().stations(&["ST-01"]).names(&["voltage"]),
    );
}

// ---------------------------------------------------------------------------
// Unknown parameters (CONTRACT 4)
// ---------------------------------------------------------------------------

#[test]
fn unknown_parameter_is_400_with_the_parameter_name() {
    let details = bad("/units?foo=1", "unknown_parameter");
    assert_eq!(details, json!({"parameter": "foo"}));
    let details = bad("/metrics?foo=", "unknown_parameter");
    assert_eq!(details, json!({"parameter": "foo"}));
}

#[test]
fn misspelled_station_id_is_unknown_parameter() {
    for endpoint in ["/units", "/metrics"] {
        let details = bad(
            &format!("{endpoint}?{WINDOW}&station_id=ST-01"),
            "unknown_parameter",
        );
        assert_eq!(details, json!({"parameter": "station_id"}));
    }
}

#[test]
fn metrics_rejects_the_units_parameters() {
    for parameter in ["type", "result", "direction"] {
        let details = bad(&format!("/metrics?{parameter}=x"), "unknown_parameter");
        assert_eq!(details, json!({"parameter": parameter}));
    }
    let details = bad("/metrics?direction=input", "unknown_parameter");
    assert_eq!(details, json!({"parameter": "direction"}));
}

#[test]
fn units_rejects_the_metrics_parameters() {
    let details = bad("/units?names=x", "unknown_parameter");
    assert_eq!(details, json!({"parameter": "names"}));
}

#[test]
fn parameter_names_are_case_sensitive() {
    for (endpoint, parameter) in [
        ("/units", "Station_ids"),
        ("/units", "FROM"),
        ("/units", "Type"),
        ("/metrics", "Names"),
        ("/metrics", "LIMIT"),
    ] {
        let details = bad(&format!("{endpoint}?{parameter}=1"), "unknown_parameter");
        assert_eq!(details, json!({"parameter": parameter}));
    }
}

#[test]
fn token_in_the_url_is_an_unknown_parameter() {
    let details = bad(&format!("/units?access_token={OPS}"), "unknown_parameter");
    assert_eq!(details, json!({"parameter": "access_token"}));
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
    for value in ["abc", "1.0", "+1", " 1", "1 ", "0x10", "1e3"] {
        bad_value("limit", value);
    }
}

#[test]
fn limit_above_max_records_is_invalid_parameter() {
    bad_value("limit", "100001");
    bad_value("limit", "99999999999999999999999999");
}

#[test]
fn limit_up_to_max_records_is_accepted() {
    let envelope = server().ok(&format!("/units?{WINDOW}&limit=100000"));
    assert_records(
        &envelope.data,
        &fixture().expect(&Query::units()),
        "limit=100000",
    );
    assert!(envelope.cursor().is_none());
    let envelope = server().ok(&format!("/units?{WINDOW}&limit=1"));
    assert_eq!(envelope.data.len(), 1);
}

#[test]
fn limit_with_leading_zeros_is_accepted() {
    let envelope = server().ok(&format!("/units?{WINDOW}&limit=002"));
    assert_eq!(envelope.data.len(), 2);
    assert_records(
        &envelope.data,
        &fixture().expect(&Query::units())[..2],
        "limit=002",
    );
    let envelope = server().ok(&format!("/metrics?{WINDOW}&limit=0000000000000000000001"));
    assert_eq!(envelope.data.len(), 1);
}

// ---------------------------------------------------------------------------
// --max-stations: too_many_stations (CONTRACT 4)
// ---------------------------------------------------------------------------

#[test]
fn too_many_stations_beyond_max_stations() {
    let server = &small().server;
    for endpoint in ["/units", "/metrics"] {
        let response = server.get(
            &format!("{endpoint}?{WINDOW}&station_ids=ST-01,ST-02,ST-03,ST-04"),
            Some(OPS),
        );
        response.error(400, "too_many_stations");
    }
}

#[test]
fn max_stations_counts_distinct_ids() {
    let server = &small().server;
    let envelope = server.ok(&format!(
        "/units?{WINDOW}&direction=input&station_ids=ST-01,ST-02,ST-03,ST-01,%20ST-02,,"
    ));
    assert_records(
        &envelope.data,
        &small().fixture.expect(
            &Query::units()
                .directions(&["input"])
                .stations(&["ST-01", "ST-02", "ST-03"]),
        ),
        "3 distinct stations",
    );
}

#[test]
fn too_many_stations_comes_before_forbidden() {
    let server = &small().server;
    let response = server.get(
        &format!("/units?{WINDOW}&station_ids=ST-03,ST-04,ST-10,ST-2"),
        Some(LINE),
    );
    response.error(400, "too_many_stations");
}

// ---------------------------------------------------------------------------
// --max-records: result_too_large (CONTRACT 6)
// ---------------------------------------------------------------------------

#[test]
fn result_too_large_without_limit() {
    let server = &small().server;
    for path in [format!("/units?{WINDOW}"), format!("/metrics?{WINDOW}")] {
        let details = server.get(&path, Some(OPS)).error(400, "result_too_large");
        assert_eq!(details, json!({"max_records": 3}), "{path}");
    }
}

#[test]
fn result_of_exactly_max_records_is_returned() {
    let server = &small().server;
    let envelope = server.ok(&format!(
        "/units?{WINDOW}&station_ids=ST-03&direction=input,output"
    ));
    assert_eq!(envelope.data.len(), 3);
    assert_records(
        &envelope.data,
        &small()
            .fixture
            .expect(&Query::units().both().stations(&["ST-03"])),
        "3 records",
    );
}

#[test]
fn result_too_large_counts_after_the_filters() {
    let server = &small().server;
    let envelope = server.ok(&format!("/units?{WINDOW}&direction=input"));
    assert_eq!(serials(&envelope.data), ["SN-005", "SN-003", "SN-011"]);
    let envelope = server.ok_as(&format!("/metrics?{WINDOW}"), ST03);
    assert_eq!(envelope.data.len(), 1);
}

#[test]
fn limit_avoids_result_too_large() {
    let server = &small().server;
    let envelope = server.ok(&format!("/units?{WINDOW}&limit=2"));
    assert_eq!(envelope.data.len(), 2);
    assert!(envelope.cursor().is_some());
    let envelope = server.ok(&format!("/units?{WINDOW}&limit=3"));
    assert_eq!(envelope.data.len(), 3);
    let envelope = server.ok(&format!("/units?{WINDOW}&limit=003"));
    assert_eq!(envelope.data.len(), 3);
}

#[test]
fn limit_above_a_small_max_records_is_invalid_parameter() {
    let server = &small().server;
    let details = server
        .get(&format!("/units?{WINDOW}&limit=4"), Some(OPS))
        .error(400, "invalid_parameter");
    assert_eq!(details, json!({"parameter": "limit", "value": "4"}));
}

#[test]
fn forbidden_comes_before_result_too_large() {
    let server = &small().server;
    let details = server
        .get(
            &format!("/units?{WINDOW}&station_ids=ST-01,ST-03"),
            Some(LINE),
        )
        .error(403, "forbidden");
    assert_eq!(details, json!({"stations": ["ST-03"]}));
}

#[test]
fn parameter_errors_come_before_result_too_large() {
    let server = &small().server;
    server
        .get(&format!("/units?{WINDOW}&bogus=1"), Some(OPS))
        .error(400, "unknown_parameter");
    server
        .get(&format!("/units?{WINDOW}&direction=sideways"), Some(OPS))
        .error(400, "invalid_parameter");
    server
        .get(&format!("/units?{WINDOW}&limit=1&cursor=zzz"), Some(OPS))
        .error(400, "invalid_cursor");
}

#[test]
fn unauthorized_comes_before_result_too_large() {
    let server = &small().server;
    server
        .get(&format!("/units?{WINDOW}"), None)
        .error(401, "unauthorized");
}

#[test]
fn url_decoding_comes_first_also_for_parameter_names() {
    // `station%5Fids` is `station_ids` once decoded
    check(
        &format!("/units?{WINDOW}&direction=input,output&station%5Fids=ST-03"),
        &Query::units().both().stations(&["ST-03"]),
    );
    let details = bad("/units?station%5Fid=ST-03", "unknown_parameter");
    assert_eq!(details, json!({"parameter": "station_id"}));
}
