//! CONTRACT section 6: order of `data`, `limit` pages, `next_cursor`, cursor errors,
//! the pinned default window, and load order.

mod common;

use std::sync::OnceLock;
use std::thread;
use std::time::Duration;

use common::*;
use serde_json::Value;

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

fn serials(data: &[Value]) -> Vec<String> {
    data.iter()
        .map(|r| r["unit_serial"].as_str().unwrap().to_string())
        .collect()
}

fn with_cursor(base: &str, limit: usize, cursor: Option<&str>) -> String {
    match cursor {
        Some(c) => format!("{base}&limit={limit}&cursor={}", enc(c)),
        None => format!("{base}&limit={limit}"),
    }
}

/// Follows `next_cursor` to the end, with the limits taken in turn; checks that
/// every page with a next cursor is full and that the last page is not empty
/// (unless the whole result is).
fn walk(srv: &Server, base: &str, limits: &[usize], token: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for i in 0.. {
        assert!(i < 1000, "{base}: the walk does not end");
        let limit = limits[i % limits.len()];
        let q = with_cursor(base, limit, cursor.as_deref());
        let env = srv.ok_as(&q, token);
        assert!(
            env.data.len() <= limit,
            "{q}: {} records for limit {limit}",
            env.data.len()
        );
        match env.cursor() {
            Some(c) => {
                assert_eq!(
                    env.data.len(),
                    limit,
                    "{q}: a page with next_cursor must hold exactly limit records"
                );
                out.extend(env.data);
                cursor = Some(c);
            }
            None => {
                if i > 0 {
                    assert!(
                        !env.data.is_empty(),
                        "{q}: empty last page: the previous page carried next_cursor with nothing left"
                    );
                }
                out.extend(env.data);
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
        let full = srv().ok(&base).data;
        assert!(full.len() >= 8, "fixture too small: {}", full.len());
        for limit in 1..=full.len() + 2 {
            let got = walk(srv(), &base, &[limit], OPS);
            assert_records(&got, &full, &format!("{base} limit={limit}"));
        }
    }
}

#[test]
fn walking_with_varying_limits_returns_every_record_once_in_order() {
    for base in [units_all(), metrics_all(), format!("/units?{WIN}&type=PCB")] {
        let full = srv().ok(&base).data;
        for limits in [&[1usize, 3, 2, 5][..], &[4, 1], &[2, 7, 1], &[5, 2, 3]] {
            let got = walk(srv(), &base, limits, OPS);
            assert_records(&got, &full, &format!("{base} limits={limits:?}"));
        }
    }
}

#[test]
fn walk_matches_the_reference() {
    let got = walk(srv(), &units_all(), &[2], OPS);
    assert_records(&got, &fx().expect(&Q::units().both()), "units walk");
    let got = walk(srv(), &metrics_all(), &[3], OPS);
    assert_records(&got, &fx().expect(&Q::metrics()), "metrics walk");
}

#[test]
fn every_page_but_the_last_holds_exactly_limit_records() {
    let full = fx().expect(&Q::units().both());
    assert_eq!(full.len(), 15);
    let mut cursor: Option<String> = None;
    let mut sizes = vec![];
    loop {
        let env = srv().ok(&with_cursor(&units_all(), 4, cursor.as_deref()));
        sizes.push(env.data.len());
        match env.cursor() {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(sizes, [4, 4, 4, 3]);
}

#[test]
fn next_cursor_is_absent_when_the_page_ends_exactly_on_the_last_record() {
    let total = fx().expect(&Q::units().both()).len(); // 15
    let env = srv().ok(&with_cursor(&units_all(), total, None));
    assert_eq!(env.data.len(), total);
    assert!(
        env.cursor().is_none(),
        "page of exactly all records carries next_cursor"
    );
    // 15 = 3 pages of 5: the third page is full and last
    let p1 = srv().ok(&with_cursor(&units_all(), 5, None));
    let c1 = p1.cursor().expect("page 1 cursor");
    let p2 = srv().ok(&with_cursor(&units_all(), 5, Some(&c1)));
    let c2 = p2.cursor().expect("page 2 cursor");
    let p3 = srv().ok(&with_cursor(&units_all(), 5, Some(&c2)));
    assert_eq!(p3.data.len(), 5);
    assert!(p3.cursor().is_none(), "full last page carries next_cursor");
}

#[test]
fn next_cursor_is_absent_on_the_last_page() {
    let p1 = srv().ok(&with_cursor(&metrics_all(), 6, None));
    let c = p1.cursor().expect("cursor");
    let p2 = srv().ok(&with_cursor(&metrics_all(), 6, Some(&c)));
    assert!(!p2.data.is_empty() && p2.data.len() < 6);
    assert!(p2.cursor().is_none());
    assert!(!p2.meta.contains_key("next_cursor"));
}

#[test]
fn limit_larger_than_the_result_gives_one_page_without_cursor() {
    let env = srv().ok(&with_cursor(&units_all(), 1000, None));
    assert_records(&env.data, &fx().expect(&Q::units().both()), "limit=1000");
    assert!(env.cursor().is_none());
}

#[test]
fn empty_result_with_limit_has_no_cursor() {
    let env = srv().ok("/units?from=2020-01-01T00:00:00Z&to=2020-01-02T00:00:00Z&limit=5");
    assert!(env.data.is_empty());
    assert!(env.cursor().is_none());
}

#[test]
fn limit_may_change_between_pages() {
    let full = fx().expect(&Q::units().both());
    let p1 = srv().ok(&with_cursor(&units_all(), 2, None));
    let c = p1.cursor().unwrap();
    let p2 = srv().ok(&with_cursor(&units_all(), 10, Some(&c)));
    assert_records(&p2.data, &full[2..12], "second page with a larger limit");
    let c = p2.cursor().unwrap();
    let p3 = srv().ok(&with_cursor(&units_all(), 1, Some(&c)));
    assert_records(&p3.data, &full[12..13], "third page with limit 1");
}

#[test]
fn a_cursor_can_be_used_again() {
    let p1 = srv().ok(&with_cursor(&units_all(), 3, None));
    let c = p1.cursor().unwrap();
    let a = srv().ok(&with_cursor(&units_all(), 3, Some(&c)));
    let b = srv().ok(&with_cursor(&units_all(), 3, Some(&c)));
    assert_records(&a.data, &b.data, "same cursor twice");
    assert_eq!(a.cursor(), b.cursor());
}

#[test]
fn line_token_walk_sees_only_its_stations() {
    let got = walk(srv(), &units_all(), &[2, 1], LINE);
    assert_records(
        &got,
        &fx().expect(&Q::units().both().scope(&["ST-01", "ST-02"])),
        "line walk",
    );
    let got = walk(srv(), &metrics_all(), &[1], LINE);
    assert_records(
        &got,
        &fx().expect(&Q::metrics().scope(&["ST-01", "ST-02"])),
        "line metrics walk",
    );
}

// ---------------------------------------------------------------------------
// Cursor errors
// ---------------------------------------------------------------------------

fn bad(path: &str, token: &str, code: &str) {
    srv().get(path, Some(token)).err(400, code);
}

#[test]
fn cursor_without_limit_is_invalid_parameter() {
    let c = srv()
        .ok(&with_cursor(&units_all(), 2, None))
        .cursor()
        .unwrap();
    let d = srv()
        .get(&format!("{}&cursor={}", units_all(), enc(&c)), Some(OPS))
        .err(400, "invalid_parameter");
    assert_eq!(d["parameter"], "cursor", "{d}");
    srv()
        .get("/metrics?cursor=garbage", Some(OPS))
        .err(400, "invalid_parameter");
}

#[test]
fn malformed_cursor_is_invalid_cursor() {
    let c = srv()
        .ok(&with_cursor(&units_all(), 2, None))
        .cursor()
        .unwrap();
    let half = c[..c.len() / 2].to_string();
    let longer = format!("{c}x");
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
    let c = srv()
        .ok(&with_cursor(&units_all(), 2, None))
        .cursor()
        .unwrap();
    for pos in [c.len() / 3, c.len() / 2, 2 * c.len() / 3] {
        let mut bytes = c.clone().into_bytes();
        bytes[pos] = if bytes[pos] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).unwrap();
        assert_ne!(tampered, c);
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
        format!("/units?{WIN}&direction=input,output&station_ids=ST-01,ST-02&type=PCB,Module");
    let c = srv().ok(&with_cursor(&base, 2, None)).cursor().unwrap();
    // the same parameters are accepted
    srv().ok(&with_cursor(&base, 2, Some(&c)));
    let others = [
        format!("/units?{WIN}&direction=input,output&station_ids=ST-01&type=PCB,Module"),
        format!("/units?{WIN}&direction=input,output&type=PCB,Module"),
        format!("/units?from=2024-03-02T00:00:00Z&to={W_TO}&direction=input,output&station_ids=ST-01,ST-02&type=PCB,Module"),
        format!("/units?from={W_FROM}&to=2024-03-31T00:00:00Z&direction=input,output&station_ids=ST-01,ST-02&type=PCB,Module"),
        format!("/units?from={W_FROM}&direction=input,output&station_ids=ST-01,ST-02&type=PCB,Module"),
        format!("/units?to={W_TO}&direction=input,output&station_ids=ST-01,ST-02&type=PCB,Module"),
        // (Leaving out both `from` and `to` is not listed: a window left to its default
        // under a cursor resolves to the window the cursor pinned (CONTRACT 6), so the
        // normalized filters are equal.)
        format!("/units?{WIN}&direction=input,output&station_ids=ST-01,ST-02&type=PCB"),
        format!("/units?{WIN}&direction=input,output&station_ids=ST-01,ST-02"),
        format!("/units?{WIN}&direction=output&station_ids=ST-01,ST-02&type=PCB,Module"),
        format!("/units?{WIN}&station_ids=ST-01,ST-02&type=PCB,Module"),
        format!("/units?{WIN}&direction=input,output&station_ids=ST-01,ST-02&type=PCB,Module&serial_number=SN-001"),
    ];
    for o in others {
        bad(&with_cursor(&o, 2, Some(&c)), OPS, "invalid_cursor");
    }
    let mbase = format!("/metrics?{WIN}&names=voltage,current");
    let c = srv().ok(&with_cursor(&mbase, 1, None)).cursor().unwrap();
    bad(
        &with_cursor(&format!("/metrics?{WIN}&names=voltage"), 1, Some(&c)),
        OPS,
        "invalid_cursor",
    );
    bad(
        &with_cursor(&metrics_all(), 1, Some(&c)),
        OPS,
        "invalid_cursor",
    );
}

#[test]
fn cursor_with_the_same_filters_written_differently_is_accepted() {
    let base =
        format!("/units?{WIN}&direction=input,output&station_ids=ST-01,ST-02&type=PCB,Module");
    let full = fx().expect(
        &Q::units()
            .both()
            .stations(&["ST-01", "ST-02"])
            .types(&["PCB", "Module"]),
    );
    assert!(full.len() > 4);
    let p1 = srv().ok(&with_cursor(&base, 2, None));
    let c = p1.cursor().unwrap();
    // 2024-03-01T00:00:00Z and 2024-04-01T00:00:00Z (= 1711929600000 ms) written otherwise,
    // lists reordered, repeated and split differently
    let same = "/units?from=2024-03-01T01:00:00%2B01:00&to=1711929600000\
                &station_ids=ST-02,%20ST-01,ST-02&type=Module&type=%20PCB,PCB&direction=output&direction=input";
    let p2 = srv().ok(&with_cursor(same, 2, Some(&c)));
    assert_records(
        &p2.data,
        &full[2..4],
        "second page through an equivalent query",
    );
}

#[test]
fn cursor_accepts_defaults_written_explicitly() {
    // no direction = ["output"]; station_ids= (empty) = not given
    let base = format!("/units?{WIN}");
    let full = fx().expect(&Q::units());
    let c = srv().ok(&with_cursor(&base, 2, None)).cursor().unwrap();
    let p2 = srv().ok(&with_cursor(
        &format!("/units?{WIN}&direction=output&station_ids="),
        2,
        Some(&c),
    ));
    assert_records(&p2.data, &full[2..4], "explicit defaults");
}

#[test]
fn cursor_from_another_token_is_invalid_cursor() {
    let base = format!("/units?{WIN}&station_ids=ST-01");
    let c = srv()
        .ok_as(&with_cursor(&base, 1, None), OPS)
        .cursor()
        .unwrap();
    bad(&with_cursor(&base, 1, Some(&c)), LINE, "invalid_cursor");
    let c = srv()
        .ok_as(&with_cursor(&base, 1, None), LINE)
        .cursor()
        .unwrap();
    bad(&with_cursor(&base, 1, Some(&c)), OPS, "invalid_cursor");
}

#[test]
fn cursor_from_another_token_with_the_same_scope_is_invalid_cursor() {
    let c = srv()
        .ok_as(&with_cursor(&units_all(), 1, None), OPS)
        .cursor()
        .unwrap();
    bad(
        &with_cursor(&units_all(), 1, Some(&c)),
        OPS2,
        "invalid_cursor",
    );
}

#[test]
fn cursor_on_the_other_endpoint_is_invalid_cursor() {
    let u = format!("/units?{WIN}&station_ids=ST-01");
    let m = format!("/metrics?{WIN}&station_ids=ST-01");
    let cu = srv().ok(&with_cursor(&u, 1, None)).cursor().unwrap();
    let cm = srv().ok(&with_cursor(&m, 1, None)).cursor().unwrap();
    bad(&with_cursor(&m, 1, Some(&cu)), OPS, "invalid_cursor");
    bad(&with_cursor(&u, 1, Some(&cm)), OPS, "invalid_cursor");
}

// ---------------------------------------------------------------------------
// The default window under a walk
// ---------------------------------------------------------------------------

#[test]
fn default_window_walk_is_accepted_without_from_and_to() {
    let base = "/units?station_ids=ST-NOW&direction=input,output";
    let p1 = srv().ok(&with_cursor(base, 2, None));
    assert_eq!(serials(&p1.data), ["SN-N2", "SN-N7"]);
    thread::sleep(Duration::from_millis(1100));
    let p2 = srv().ok(&with_cursor(base, 2, p1.cursor().as_deref()));
    assert_eq!(serials(&p2.data), ["SN-N6", "SN-N5"]);
    thread::sleep(Duration::from_millis(1100));
    let p3 = srv().ok(&with_cursor(base, 2, p2.cursor().as_deref()));
    assert_eq!(serials(&p3.data), ["SN-N1"]);
    assert!(p3.cursor().is_none());
}

#[test]
fn default_window_cursor_with_an_explicit_window_is_invalid_cursor() {
    let base = "/units?station_ids=ST-NOW";
    let c = srv().ok(&with_cursor(base, 1, None)).cursor().unwrap();
    bad(
        &with_cursor(&format!("{base}&{WIN}"), 1, Some(&c)),
        OPS,
        "invalid_cursor",
    );
}

#[test]
fn default_window_is_pinned_by_the_cursor() {
    // A record a few seconds in the future: not in the window of the first page; a
    // window re-computed on a later page would let it in.
    let now = now_secs();
    let future = now + 8;
    let t = |d: i64| rfc3339_secs(now + d);
    let units = [
        format!(r#"{{"station_id":"ST-PIN","unit_serial":"P1","time_created":"{}","direction":"output"}}"#, t(-36000)),
        format!(r#"{{"station_id":"ST-PIN","unit_serial":"P2","time_created":"{}","direction":"output"}}"#, t(-32400)),
        format!(r#"{{"station_id":"ST-PIN","unit_serial":"P3","time_created":"{}","direction":"output"}}"#, t(-28800)),
        format!(r#"{{"station_id":"ST-PIN","unit_serial":"P4","time_created":"{}","direction":"output"}}"#, rfc3339_secs(future)),
    ]
    .join("\n");
    let metrics = [
        format!(
            r#"{{"station_id":"ST-PIN","time_created":"{}","name":"m","value":"1"}}"#,
            t(-36000)
        ),
        format!(
            r#"{{"station_id":"ST-PIN","time_created":"{}","name":"m","value":"2"}}"#,
            t(-32400)
        ),
        format!(
            r#"{{"station_id":"ST-PIN","time_created":"{}","name":"m","value":"3"}}"#,
            t(-28800)
        ),
        format!(
            r#"{{"station_id":"ST-PIN","time_created":"{}","name":"m","value":"4"}}"#,
            rfc3339_secs(future)
        ),
    ]
    .join("\n");
    let fx = Fixture::from_files(&[
        FileSpec::plain("pin.units.jsonl", units),
        FileSpec::plain("pin.metrics.jsonl", metrics),
    ]);
    let s = Server::start(&fx, &[]);
    assert!(
        now_secs() < future - 1,
        "server start took too long to test the pinned window"
    );
    let (ub, mb) = ("/units?station_ids=ST-PIN", "/metrics?station_ids=ST-PIN");
    let u1 = s.ok(&with_cursor(ub, 2, None));
    let m1 = s.ok(&with_cursor(mb, 2, None));
    assert_eq!(serials(&u1.data), ["P1", "P2"]);
    let cu = u1.cursor().expect("units cursor");
    let cm = m1.cursor().expect("metrics cursor");
    while now_secs() < future + 2 {
        thread::sleep(Duration::from_millis(200));
    }
    // control: the window of a fresh request has moved over the future record
    let fresh = s.ok("/units");
    assert_eq!(serials(&fresh.data), ["P1", "P2", "P3", "P4"]);
    let u2 = s.ok(&with_cursor(ub, 2, Some(&cu)));
    assert_eq!(serials(&u2.data), ["P3"], "the walk's window moved");
    assert!(u2.cursor().is_none());
    let m2 = s.ok(&with_cursor(mb, 2, Some(&cm)));
    let values: Vec<&str> = m2
        .data
        .iter()
        .map(|r| r["value"].as_str().unwrap())
        .collect();
    assert_eq!(values, ["3"], "the walk's window moved");
}

// ---------------------------------------------------------------------------
// Order (CONTRACT 6)
// ---------------------------------------------------------------------------

#[test]
fn data_is_sorted_by_instant_then_station_bytes_then_load_order() {
    let env =
        srv().ok("/units?from=2024-03-10T10:00:00Z&to=2024-03-10T11:00:00Z&direction=input,output");
    assert_eq!(
        serials(&env.data),
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
    let env = srv().ok("/metrics?from=2024-03-10T10:00:00Z&to=2024-03-10T11:00:00Z");
    let values: Vec<&str> = env
        .data
        .iter()
        .map(|r| r["value"].as_str().unwrap())
        .collect();
    assert_eq!(
        values,
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
    let env = srv().ok(&units_all());
    assert_records(&env.data, &fx().expect(&Q::units().both()), "units order");
    let env = srv().ok(&metrics_all());
    assert_records(&env.data, &fx().expect(&Q::metrics()), "metrics order");
}

#[test]
fn order_is_the_same_on_every_request() {
    let first = srv().ok(&units_all()).data;
    for _ in 0..5 {
        assert_records(&srv().ok(&units_all()).data, &first, "repeat");
    }
}

#[test]
fn load_order_is_the_byte_order_of_relative_paths() {
    let rec = |serial: &str| {
        format!(
            r#"{{"station_id":"ST-01","unit_serial":"{serial}","time_created":"2024-03-10T10:00:00Z","direction":"output"}}"#
        )
    };
    let files = vec![
        FileSpec::plain("z.units.jsonl", rec("z")),
        FileSpec::plain("nested/deeper/x.units.jsonl", rec("nested/deeper")),
        FileSpec::plain("nested/c.units.jsonl", rec("nested/c")),
        FileSpec::plain("nested.units.jsonl", rec("nested.units")),
        FileSpec::plain("nested-2/e.units.jsonl", rec("nested-2")),
        FileSpec::gz("a.units.jsonl.gz", rec("a.gz"), &[]),
        FileSpec::plain("a.units.jsonl", format!("{}\n{}\n", rec("a-1"), rec("a-2"))),
        FileSpec::plain("B.units.jsonl", rec("B")),
    ];
    let fx = Fixture::from_files(&files);
    let s = Server::start(&fx, &[]);
    let env = s.ok(&format!("/units?{WIN}"));
    assert_eq!(
        serials(&env.data),
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
    assert_records(&env.data, &fx.expect(&Q::units()), "load order");
}

#[test]
fn order_and_pages_do_not_depend_on_the_shard_count() {
    let fx = Fixture::main();
    for shards in ["1", "3", "8"] {
        let s = Server::start(&fx, &["--shards", shards]);
        let env = s.ok(&units_all());
        assert_records(
            &env.data,
            &fx.expect(&Q::units().both()),
            &format!("--shards {shards}"),
        );
        let env = s.ok(&metrics_all());
        assert_records(
            &env.data,
            &fx.expect(&Q::metrics()),
            &format!("--shards {shards} metrics"),
        );
        let got = walk(&s, &units_all(), &[2, 3], OPS);
        assert_records(
            &got,
            &fx.expect(&Q::units().both()),
            &format!("--shards {shards} walk"),
        );
    }
}
