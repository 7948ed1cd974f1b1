//! CONTRACT section 6: order of `data`, `limit` pages, `next_cursor`, cursor errors,
//! the pinned default window, and load order.

use std::thread;
use std::time::Duration;

use crate::common::*;
use serde_json::Value;

fn with_cursor(base: &str, limit: usize, cursor: Option<&str>) -> String {
    match cursor {
        Some(cursor) => format!("{base}&limit={limit}&cursor={}", percent_encode(cursor)),
        None => format!("{base}&limit={limit}"),
    }
}

/// Follows `next_cursor` to the end, with the limits taken in turn; checks that
/// every page with a next cursor is full and that the last page is not empty
/// (unless the whole result is).
fn walk(server: &Server, base: &str, limits: &[usize], token: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0.. {
        assert!(page < 1000, "{base}: the walk does not end");
        let limit = limits[page % limits.len()];
        let path = with_cursor(base, limit, cursor.as_deref());
        let envelope = server.ok_as(&path, token);
        assert!(
            envelope.data.len() <= limit,
            "{path}: {} records for limit {limit}",
            envelope.data.len()
        );
        match envelope.cursor() {
            Some(next) => {
                assert_eq!(
                    envelope.data.len(),
                    limit,
                    "{path}: a page with next_cursor must hold exactly limit records"
                );
                out.extend(envelope.data);
                cursor = Some(next);
            }
            None => {
                if page > 0 {
                    assert!(
                        !envelope.data.is_empty(),
                        "{path}: empty last page: the previous page carried next_cursor with nothing left"
                    );
                }
                out.extend(envelope.data);
                break;
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Pages
// ---------------------------------------------------------------------------

#[test]
fn walking_cursors_with_each_fixed_limit_returns_the_unpaged_result() {
    for base in [units_all(), metrics_all()] {
        let full = server().ok(&base).data;
        assert!(full.len() >= 8, "fixture too small: {}", full.len());
        for limit in 1..=full.len() + 2 {
            let got = walk(server(), &base, &[limit], OPS);
            assert_records(&got, &full, &format!("{base} limit={limit}"));
        }
    }
}

#[test]
fn walking_with_varying_limits_returns_every_record_once_in_order() {
    for base in [
        units_all(),
        metrics_all(),
        format!("/units?{WINDOW}&type=PCB"),
    ] {
        let full = server().ok(&base).data;
        for limits in [&[1usize, 3, 2, 5][..], &[4, 1], &[2, 7, 1], &[5, 2, 3]] {
            let got = walk(server(), &base, limits, OPS);
            assert_records(&got, &full, &format!("{base} limits={limits:?}"));
        }
    }
}

#[test]
fn walk_matches_the_reference() {
    let got = walk(server(), &units_all(), &[2], OPS);
    assert_records(
        &got,
        &fixture().expect(&Query::units().both()),
        "units walk",
    );
    let got = walk(server(), &metrics_all(), &[3], OPS);
    assert_records(&got, &fixture().expect(&Query::metrics()), "metrics walk");
}

#[test]
fn every_page_but_the_last_holds_exactly_limit_records() {
    let full = fixture().expect(&Query::units().both());
    assert_eq!(full.len(), 15);
    let mut cursor: Option<String> = None;
    let mut sizes = vec![];
    loop {
        let envelope = server().ok(&with_cursor(&units_all(), 4, cursor.as_deref()));
        sizes.push(envelope.data.len());
        match envelope.cursor() {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(sizes, [4, 4, 4, 3]);
}

#[test]
fn next_cursor_is_null_when_the_page_ends_exactly_on_the_last_record() {
    let total = fixture().expect(&Query::units().both()).len(); // 15
    let envelope = server().ok(&with_cursor(&units_all(), total, None));
    assert_eq!(envelope.data.len(), total);
    assert_eq!(
        envelope.meta.get("next_cursor"),
        Some(&Value::Null),
        "page of exactly all records"
    );
    // 15 = 3 pages of 5: the third page is full and last
    let first_page = server().ok(&with_cursor(&units_all(), 5, None));
    let cursor = first_page.cursor().expect("page 1 cursor");
    let second_page = server().ok(&with_cursor(&units_all(), 5, Some(&cursor)));
    let cursor = second_page.cursor().expect("page 2 cursor");
    let third_page = server().ok(&with_cursor(&units_all(), 5, Some(&cursor)));
    assert_eq!(third_page.data.len(), 5);
    assert_eq!(
        third_page.meta.get("next_cursor"),
        Some(&Value::Null),
        "full last page"
    );
}

#[test]
fn issue_11_next_cursor_is_null_on_the_last_page() {
    let first_page = server().ok(&with_cursor(&metrics_all(), 6, None));
    let cursor = first_page.cursor().expect("cursor");
    let second_page = server().ok(&with_cursor(&metrics_all(), 6, Some(&cursor)));
    assert!(!second_page.data.is_empty() && second_page.data.len() < 6);
    // Present and null: Grafana's Infinity stops its pagination on null, and fails
    // on a missing cursor.
    assert_eq!(second_page.meta.get("next_cursor"), Some(&Value::Null));
}

#[test]
fn limit_larger_than_the_result_gives_one_page_without_cursor() {
    let envelope = server().ok(&with_cursor(&units_all(), 1000, None));
    assert_records(
        &envelope.data,
        &fixture().expect(&Query::units().both()),
        "limit=1000",
    );
    assert!(envelope.cursor().is_none());
}

#[test]
fn empty_result_with_limit_has_no_cursor() {
    let envelope = server().ok("/units?from=2020-01-01T00:00:00Z&to=2020-01-02T00:00:00Z&limit=5");
    assert!(envelope.data.is_empty());
    assert!(envelope.cursor().is_none());
}

#[test]
fn limit_may_change_between_pages() {
    let full = fixture().expect(&Query::units().both());
    let cursor = first_cursor(&units_all(), 2, OPS);
    let second_page = server().ok(&with_cursor(&units_all(), 10, Some(&cursor)));
    assert_records(
        &second_page.data,
        &full[2..12],
        "second page with a larger limit",
    );
    let cursor = second_page.cursor().unwrap();
    let third_page = server().ok(&with_cursor(&units_all(), 1, Some(&cursor)));
    assert_records(&third_page.data, &full[12..13], "third page with limit 1");
}

#[test]
fn a_cursor_can_be_used_again() {
    let cursor = first_cursor(&units_all(), 3, OPS);
    let first = server().ok(&with_cursor(&units_all(), 3, Some(&cursor)));
    let second = server().ok(&with_cursor(&units_all(), 3, Some(&cursor)));
    assert_records(&first.data, &second.data, "same cursor twice");
    assert_eq!(first.cursor(), second.cursor());
}

#[test]
fn line_token_walk_sees_only_its_stations() {
    let got = walk(server(), &units_all(), &[2, 1], LINE);
    assert_records(
        &got,
        &fixture().expect(&Query::units().both().scope(&["ST-01", "ST-02"])),
        "line walk",
    );
    let got = walk(server(), &metrics_all(), &[1], LINE);
    assert_records(
        &got,
        &fixture().expect(&Query::metrics().scope(&["ST-01", "ST-02"])),
        "line metrics walk",
    );
}

// ---------------------------------------------------------------------------
// Cursor errors
// ---------------------------------------------------------------------------

fn bad(path: &str, token: &str, code: &str) {
    server().get(path, Some(token)).error(400, code);
}

/// The `next_cursor` of the first page of `base` with `limit`, as `token`.
fn first_cursor(base: &str, limit: usize, token: &str) -> String {
    server()
        .ok_as(&with_cursor(base, limit, None), token)
        .cursor()
        .unwrap()
}

#[test]
fn cursor_without_limit_is_invalid_parameter() {
    let cursor = first_cursor(&units_all(), 2, OPS);
    let details = server()
        .get(
            &format!("{}&cursor={}", units_all(), percent_encode(&cursor)),
            Some(OPS),
        )
        .error(400, "invalid_parameter");
    assert_eq!(details["parameter"], "cursor", "{details}");
    server()
        .get("/metrics?cursor=garbage", Some(OPS))
        .error(400, "invalid_parameter");
}

#[test]
fn malformed_cursor_is_invalid_cursor() {
    let cursor = first_cursor(&units_all(), 2, OPS);
    let half = cursor[..cursor.len() / 2].to_string();
    let longer = format!("{cursor}x");
    for bad_cursor in [
        "not-a-cursor",
        "AAAA",
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "eyJ0IjoxfQ",
        "%%%",
        "\u{0}",
        half.as_str(),
        longer.as_str(),
    ] {
        bad(
            &with_cursor(&units_all(), 2, Some(bad_cursor)),
            OPS,
            "invalid_cursor",
        );
    }
}

#[test]
fn tampered_cursor_is_invalid_cursor() {
    let cursor = first_cursor(&units_all(), 2, OPS);
    for position in [cursor.len() / 3, cursor.len() / 2, 2 * cursor.len() / 3] {
        let mut bytes = cursor.clone().into_bytes();
        bytes[position] = if bytes[position] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).unwrap();
        assert_ne!(tampered, cursor);
        bad(
            &with_cursor(&units_all(), 2, Some(&tampered)),
            OPS,
            "invalid_cursor",
        );
    }
}

#[test]
fn cursor_with_other_filters_is_invalid_cursor() {
    let base =
        format!("/units?{WINDOW}&direction=input,output&station_ids=ST-01,ST-02&type=PCB,Module");
    let cursor = first_cursor(&base, 2, OPS);
    // the same parameters are accepted
    server().ok(&with_cursor(&base, 2, Some(&cursor)));
    let others = [
        format!("/units?{WINDOW}&direction=input,output&station_ids=ST-01&type=PCB,Module"),
        format!("/units?{WINDOW}&direction=input,output&type=PCB,Module"),
        format!("/units?from=2024-03-02T00:00:00Z&to={WINDOW_TO}&direction=input,output&station_ids=ST-01,ST-02&type=PCB,Module"),
        format!("/units?from={WINDOW_FROM}&to=2024-03-31T00:00:00Z&direction=input,output&station_ids=ST-01,ST-02&type=PCB,Module"),
        format!("/units?from={WINDOW_FROM}&direction=input,output&station_ids=ST-01,ST-02&type=PCB,Module"),
        format!("/units?to={WINDOW_TO}&direction=input,output&station_ids=ST-01,ST-02&type=PCB,Module"),
        // (Leaving out both `from` and `to` is not listed: a window left to its default
        // under a cursor resolves to the window the cursor pinned (CONTRACT 6), so the
        // normalized filters are equal.)
        format!("/units?{WINDOW}&direction=input,output&station_ids=ST-01,ST-02&type=PCB"),
        format!("/units?{WINDOW}&direction=input,output&station_ids=ST-01,ST-02"),
        format!("/units?{WINDOW}&direction=output&station_ids=ST-01,ST-02&type=PCB,Module"),
        format!("/units?{WINDOW}&station_ids=ST-01,ST-02&type=PCB,Module"),
        format!("/units?{WINDOW}&direction=input,output&station_ids=ST-01,ST-02&type=PCB,Module&serial_number=SN-001"),
    ];
    for other in others {
        bad(
            &with_cursor(&other, 2, Some(&cursor)),
            OPS,
            "invalid_cursor",
        );
    }
    let metrics_base = format!("/metrics?{WINDOW}&names=voltage,current");
    let cursor = first_cursor(&metrics_base, 1, OPS);
    bad(
        &with_cursor(
            &format!("/metrics?{WINDOW}&names=voltage"),
            1,
            Some(&cursor),
        ),
        OPS,
        "invalid_cursor",
    );
    bad(
        &with_cursor(&metrics_all(), 1, Some(&cursor)),
        OPS,
        "invalid_cursor",
    );
}

#[test]
fn cursor_with_the_same_filters_written_differently_is_accepted() {
    let base =
        format!("/units?{WINDOW}&direction=input,output&station_ids=ST-01,ST-02&type=PCB,Module");
    let full = fixture().expect(
        &Query::units()
            .both()
            .stations(&["ST-01", "ST-02"])
            .types(&["PCB", "Module"]),
    );
    assert!(full.len() > 4);
    let cursor = first_cursor(&base, 2, OPS);
    // 2024-03-01T00:00:00Z and 2024-04-01T00:00:00Z (= 1711929600000 ms) written otherwise,
    // lists reordered, repeated and split differently
    let same = "/units?from=2024-03-01T01:00:00%2B01:00&to=1711929600000\
                &station_ids=ST-02,%20ST-01,ST-02&type=Module&type=%20PCB,PCB&direction=output&direction=input";
    let second_page = server().ok(&with_cursor(same, 2, Some(&cursor)));
    assert_records(
        &second_page.data,
        &full[2..4],
        "second page through an equivalent query",
    );
}

#[test]
fn cursor_accepts_defaults_written_explicitly() {
    // no direction = ["output"]; station_ids= (empty) = not given
    let base = format!("/units?{WINDOW}");
    let full = fixture().expect(&Query::units());
    let cursor = first_cursor(&base, 2, OPS);
    let second_page = server().ok(&with_cursor(
        &format!("/units?{WINDOW}&direction=output&station_ids="),
        2,
        Some(&cursor),
    ));
    assert_records(&second_page.data, &full[2..4], "explicit defaults");
}

#[test]
fn cursor_from_another_token_is_invalid_cursor() {
    let base = format!("/units?{WINDOW}&station_ids=ST-01");
    let cursor = first_cursor(&base, 1, OPS);
    bad(
        &with_cursor(&base, 1, Some(&cursor)),
        LINE,
        "invalid_cursor",
    );
    let cursor = first_cursor(&base, 1, LINE);
    bad(&with_cursor(&base, 1, Some(&cursor)), OPS, "invalid_cursor");
}

#[test]
fn cursor_from_another_token_with_the_same_scope_is_invalid_cursor() {
    let cursor = first_cursor(&units_all(), 1, OPS);
    bad(
        &with_cursor(&units_all(), 1, Some(&cursor)),
        OPS2,
        "invalid_cursor",
    );
}

#[test]
fn cursor_on_the_other_endpoint_is_invalid_cursor() {
    let units = format!("/units?{WINDOW}&station_ids=ST-01");
    let metrics = format!("/metrics?{WINDOW}&station_ids=ST-01");
    let units_cursor = first_cursor(&units, 1, OPS);
    let metrics_cursor = first_cursor(&metrics, 1, OPS);
    bad(
        &with_cursor(&metrics, 1, Some(&units_cursor)),
        OPS,
        "invalid_cursor",
    );
    bad(
        &with_cursor(&units, 1, Some(&metrics_cursor)),
        OPS,
        "invalid_cursor",
    );
}

// ---------------------------------------------------------------------------
// The default window under a walk
// ---------------------------------------------------------------------------

#[test]
fn default_window_walk_is_accepted_without_from_and_to() {
    let base = "/units?station_ids=ST-NOW&direction=input,output";
    let first_page = server().ok(&with_cursor(base, 2, None));
    assert_eq!(serials(&first_page.data), ["SN-N2", "SN-N7"]);
    // Time must pass for the default window to move under the walk: these sleeps are
    // the test's input, not a wait for something to happen.
    thread::sleep(Duration::from_millis(1100));
    let second_page = server().ok(&with_cursor(base, 2, first_page.cursor().as_deref()));
    assert_eq!(serials(&second_page.data), ["SN-N6", "SN-N5"]);
    thread::sleep(Duration::from_millis(1100));
    let third_page = server().ok(&with_cursor(base, 2, second_page.cursor().as_deref()));
    assert_eq!(serials(&third_page.data), ["SN-N1"]);
    assert!(third_page.cursor().is_none());
}

#[test]
fn default_window_cursor_with_an_explicit_window_is_invalid_cursor() {
    let base = "/units?station_ids=ST-NOW";
    let cursor = first_cursor(base, 1, OPS);
    bad(
        &with_cursor(&format!("{base}&{WINDOW}"), 1, Some(&cursor)),
        OPS,
        "invalid_cursor",
    );
}

#[test]
fn default_window_is_pinned_by_the_cursor() {
    // A record a few seconds in the future: not in the window of the first page; a
    // window re-computed on a later page would let it in.
    let now = now_seconds();
    let future = now + 8;
    let from_now = |delta: i64| rfc3339_from_seconds(now + delta);
    let units = [
        format!(r#"{{"station_id":"ST-PIN","unit_serial":"P1","time_created":"{}","direction":"output"}}"#, from_now(-36000)),
        format!(r#"{{"station_id":"ST-PIN","unit_serial":"P2","time_created":"{}","direction":"output"}}"#, from_now(-32400)),
        format!(r#"{{"station_id":"ST-PIN","unit_serial":"P3","time_created":"{}","direction":"output"}}"#, from_now(-28800)),
        format!(r#"{{"station_id":"ST-PIN","unit_serial":"P4","time_created":"{}","direction":"output"}}"#, rfc3339_from_seconds(future)),
    ]
    .join("\n");
    let metrics = [
        format!(
            r#"{{"station_id":"ST-PIN","time_created":"{}","name":"m","value":"1"}}"#,
            from_now(-36000)
        ),
        format!(
            r#"{{"station_id":"ST-PIN","time_created":"{}","name":"m","value":"2"}}"#,
            from_now(-32400)
        ),
        format!(
            r#"{{"station_id":"ST-PIN","time_created":"{}","name":"m","value":"3"}}"#,
            from_now(-28800)
        ),
        format!(
            r#"{{"station_id":"ST-PIN","time_created":"{}","name":"m","value":"4"}}"#,
            rfc3339_from_seconds(future)
        ),
    ]
    .join("\n");
    let fixture = Fixture::from_files(&[
        FileSpec::plain("pin.units.jsonl", units),
        FileSpec::plain("pin.metrics.jsonl", metrics),
    ]);
    let server = Server::start(&fixture, &[]);
    assert!(
        now_seconds() < future - 1,
        "server start took too long to test the pinned window"
    );
    let (units_base, metrics_base) = ("/units?station_ids=ST-PIN", "/metrics?station_ids=ST-PIN");
    let units_first_page = server.ok(&with_cursor(units_base, 2, None));
    let metrics_first_page = server.ok(&with_cursor(metrics_base, 2, None));
    assert_eq!(serials(&units_first_page.data), ["P1", "P2"]);
    let units_cursor = units_first_page.cursor().expect("units cursor");
    let metrics_cursor = metrics_first_page.cursor().expect("metrics cursor");
    // Until the clock passes the future record: the input of this test.
    while now_seconds() < future + 2 {
        thread::sleep(Duration::from_millis(200));
    }
    // control: the window of a fresh request has moved over the future record
    let fresh = server.ok("/units");
    assert_eq!(serials(&fresh.data), ["P1", "P2", "P3", "P4"]);
    let units_second_page = server.ok(&with_cursor(units_base, 2, Some(&units_cursor)));
    assert_eq!(
        serials(&units_second_page.data),
        ["P3"],
        "the walk's window moved"
    );
    assert!(units_second_page.cursor().is_none());
    let metrics_second_page = server.ok(&with_cursor(metrics_base, 2, Some(&metrics_cursor)));
    assert_eq!(
        metric_values(&metrics_second_page.data),
        ["3"],
        "the walk's window moved"
    );
}

// ---------------------------------------------------------------------------
// Order (CONTRACT 6)
// ---------------------------------------------------------------------------

#[test]
fn data_is_sorted_by_instant_then_station_bytes_then_load_order() {
    let envelope = server()
        .ok("/units?from=2024-03-10T10:00:00Z&to=2024-03-10T11:00:00Z&direction=input,output");
    assert_eq!(
        serials(&envelope.data),
        [
            "SN-001", // ST-01 a.units.jsonl:1   10:00:00Z
            "SN-003", // ST-01 a.units.jsonl:4   10:00:00.000000000Z
            "SN-010", // ST-01 nested/c.units.jsonl.gz:1   11:00:00+01:00
            "SN-002", // ST-02 a.units.jsonl:2   12:00:00+02:00
            "SN-020", // ST-02 z.units.jsonl:1   10:00:00Z
            "SN-012", // ST-10 nested/c.units.jsonl.gz:3   10:00:00-00:00
            "SN-023", // ST-2  z.units.jsonl:4   ("ST-2" > "ST-10" in bytes)
            "SN-024", // ST-01 10:00:00.000000001Z: one nanosecond later
            "SN-006", // ST-03 09:45:00-01:00 = 10:45Z
        ]
    );
}

#[test]
fn metrics_are_sorted_by_instant_then_station_bytes_then_load_order() {
    let envelope = server().ok("/metrics?from=2024-03-10T10:00:00Z&to=2024-03-10T11:00:00Z");
    assert_eq!(
        metric_values(&envelope.data),
        [
            "3.30",
            "123456789012345678901234567890.123456789",
            "3.31",
            "1",
            "5",
            "0.25"
        ]
    );
}

#[test]
fn whole_result_is_sorted_like_the_reference() {
    let envelope = server().ok(&units_all());
    assert_records(
        &envelope.data,
        &fixture().expect(&Query::units().both()),
        "units order",
    );
    let envelope = server().ok(&metrics_all());
    assert_records(
        &envelope.data,
        &fixture().expect(&Query::metrics()),
        "metrics order",
    );
}

#[test]
fn order_is_the_same_on_every_request() {
    let first = server().ok(&units_all()).data;
    for _ in 0..5 {
        assert_records(&server().ok(&units_all()).data, &first, "repeat");
    }
}

#[test]
fn load_order_is_the_byte_order_of_relative_paths() {
    let unit_line = |serial: &str| {
        format!(
            r#"{{"station_id":"ST-01","unit_serial":"{serial}","time_created":"2024-03-10T10:00:00Z","direction":"output"}}"#
        )
    };
    let files = vec![
        FileSpec::plain("z.units.jsonl", unit_line("z")),
        FileSpec::plain("nested/deeper/x.units.jsonl", unit_line("nested/deeper")),
        FileSpec::plain("nested/c.units.jsonl", unit_line("nested/c")),
        FileSpec::plain("nested.units.jsonl", unit_line("nested.units")),
        FileSpec::plain("nested-2/e.units.jsonl", unit_line("nested-2")),
        FileSpec::gz("a.units.jsonl.gz", unit_line("a.gz"), &[]),
        FileSpec::plain(
            "a.units.jsonl",
            format!("{}\n{}\n", unit_line("a-1"), unit_line("a-2")),
        ),
        FileSpec::plain("B.units.jsonl", unit_line("B")),
    ];
    let fixture = Fixture::from_files(&files);
    let server = Server::start(&fixture, &[]);
    let envelope = server.ok(&format!("/units?{WINDOW}"));
    assert_eq!(
        serials(&envelope.data),
        [
            "B",
            "a-1",
            "a-2",
            "a.gz",
            "nested-2",
            "nested.units",
            "nested/c",
            "nested/deeper",
            "z"
        ]
    );
    assert_records(
        &envelope.data,
        &fixture.expect(&Query::units()),
        "load order",
    );
}

#[test]
fn order_and_pages_do_not_depend_on_the_shard_count() {
    let fixture = Fixture::main();
    for shards in ["1", "3", "8"] {
        let server = Server::start(&fixture, &["--shards", shards]);
        let envelope = server.ok(&units_all());
        assert_records(
            &envelope.data,
            &fixture.expect(&Query::units().both()),
            &format!("--shards {shards}"),
        );
        let envelope = server.ok(&metrics_all());
        assert_records(
            &envelope.data,
            &fixture.expect(&Query::metrics()),
            &format!("--shards {shards} metrics"),
        );
        let got = walk(&server, &units_all(), &[2, 3], OPS);
        assert_records(
            &got,
            &fixture.expect(&Query::units().both()),
            &format!("--shards {shards} walk"),
        );
    }
}

/// Issue 11: Grafana's Infinity data source pages by reading the cursor at a path of
/// the body (`meta.next_cursor`), stops when it is null or empty, and fails the
/// query when the path is missing. Played here against stq with its rules, for
/// every page size that divides the result or not.
#[test]
fn issue_11_a_walk_by_grafana_infinity_rules_ends_on_a_null_cursor() {
    let want = fixture().expect(&Query::units().both());
    for limit in 1..=want.len() + 1 {
        let mut records = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..=want.len() + 1 {
            let envelope = server().ok(&with_cursor(&units_all(), limit, cursor.as_deref()));
            records.extend(envelope.data.iter().cloned());
            let Some(value) = envelope.meta.get("next_cursor") else {
                panic!("limit {limit}: no next_cursor at meta.next_cursor: Infinity fails here");
            };
            match value {
                Value::Null => break,
                Value::String(text) if text.is_empty() => break,
                Value::String(text) => cursor = Some(text.clone()),
                other => panic!("limit {limit}: next_cursor is {other}"),
            }
        }
        assert_records(&records, &want, &format!("walk with limit {limit}"));
    }
}
