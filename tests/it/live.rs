//! Issue 49, CONTRACT section 14: live answers. `wait` holds a request until a
//! generation changes its answer (14.1); `/units/stream` and `/metrics/stream`
//! send the backlog and then what each generation adds, as Server-Sent Events,
//! resumable by the last event's id (14.2).
//!
//! Every test starts real servers and reads their streams over real HTTP
//! (`common::sse`). Changes reach a server by `--watch` (both ways it looks) or
//! SIGHUP; a test waits for the event it expects, or for the admin metric that
//! says the server got where the test needs it (a request held, a stream closed),
//! never for a fixed time.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use serde_json::Value;

use crate::common::sse::EventStream;
use crate::common::*;
use crate::reload::{
    append, lines, small_files, start_watching, tokens_file, unit_line, write_by_rename, BASE_TIME,
    WATCHES,
};

/// Longer than the heartbeat's 15 s, by which a stream notices its client left.
const HEARTBEAT_PATIENCE: Duration = Duration::from_secs(40);

/// Far enough ahead that `/units` with it as `to` holds everything a stream sends.
const FAR: &str = "2200-01-01T00:00:00Z";

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// Opens `path_and_query` on `server` as `token`, with `headers` more; the stream
/// must open.
#[track_caller]
fn open(
    server: &Server,
    path_and_query: &str,
    token: &str,
    headers: &[(&str, &str)],
) -> EventStream {
    let authorization = bearer(token);
    let mut all = vec![("Authorization", authorization.as_str())];
    all.extend_from_slice(headers);
    match EventStream::open(&server.url(path_and_query), &all) {
        Ok(stream) => stream,
        Err(response) => panic!("the stream did not open: {}", response.context()),
    }
}

/// The records `/units` (or `/metrics`) answers from `from` on, as `token`.
fn walk_from(server: &Server, path: &str, from: &str, rest: &str, token: &str) -> Vec<Value> {
    server
        .ok_as(&format!("{path}?from={from}&to={FAR}{rest}"), token)
        .data
}

/// Waits until the admin metric `name` reads `value`.
#[track_caller]
pub(crate) fn wait_for_metric(server: &Server, name: &str, value: f64) {
    wait_for_metric_within(server, name, value, RELOAD_TIMEOUT);
}

/// [`wait_for_metric`], giving up after `patience`.
#[track_caller]
fn wait_for_metric_within(server: &Server, name: &str, value: f64, patience: Duration) {
    let deadline = std::time::Instant::now() + patience;
    while server.admin_value(name) != value {
        assert!(
            std::time::Instant::now() < deadline,
            "{name} is {} and not {value} after {patience:?}",
            server.admin_value(name)
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// The path of the small fixture's one file.
fn first_file(fixture: &Fixture) -> std::path::PathBuf {
    fixture.snapshots.join("first.units.jsonl")
}

/// `from=BASE_TIME` and both directions: everything the small fixture holds.
fn everything() -> String {
    format!("from={BASE_TIME}&direction=input,output")
}

// ---------------------------------------------------------------------------
// 14.2: opening a stream, the backlog
// ---------------------------------------------------------------------------

#[test]
fn issue_49_a_stream_starts_with_its_headers_retry_and_the_backlog_of_the_walk() {
    let server = server();
    for (path, rest, token) in [
        ("/units", "&direction=input,output", OPS),
        ("/units", "&station_ids=ST-01", LINE),
        ("/metrics", "", OPS),
        ("/metrics", "&names=voltage,current", ST03),
    ] {
        let expected = walk_from(server, path, WINDOW_FROM, rest, token);
        assert!(!expected.is_empty(), "{path}{rest} finds records");
        let query = format!("{path}/stream?from={WINDOW_FROM}{rest}");
        let mut stream = open(server, &query, token, &[]);
        assert_eq!(stream.status, 200);
        assert_eq!(stream.header("content-type"), Some("text/event-stream"));
        assert_eq!(stream.header("cache-control"), Some("no-store"));
        assert_eq!(stream.header("x-accel-buffering"), Some("no"));
        assert!(
            stream.header("x-request-id").is_some(),
            "{:?}",
            stream.headers
        );
        let records = stream.records(expected.len());
        assert_eq!(stream.retries, vec![2000], "retry: 2000 comes first");
        assert_records(&records, &expected, &query);
        let id = stream.last_id.clone().expect("records events carry ids");
        assert!(
            !id.is_empty() && id.bytes().all(|byte| byte.is_ascii_graphic()),
            "{id:?}"
        );
    }
}

#[test]
fn issue_49_a_backlog_comes_in_events_of_at_most_1000_records_in_the_contract_order() {
    let records: Vec<String> = (0..2_500)
        .map(|index| {
            unit_line(
                ["ST-01", "ST-02"][index % 2],
                &format!("SN-{index}"),
                index as i64 / 3,
            )
        })
        .collect();
    let fixture = Fixture::from_files(&[FileSpec::plain("many.units.jsonl", lines(&records))]);
    let server = Server::start(&fixture, &[]);
    let expected = walk_from(&server, "/units", BASE_TIME, "", OPS);
    assert_eq!(expected.len(), 2_500);
    let mut stream = open(
        &server,
        &format!("/units/stream?from={BASE_TIME}"),
        OPS,
        &[],
    );
    let mut got = Vec::new();
    let mut ids = Vec::new();
    while got.len() < expected.len() {
        let event = stream.expect("records");
        let records = event.records();
        assert!((1..=1000).contains(&records.len()), "{}", records.len());
        ids.push(event.id.clone().expect("an id"));
        got.extend(records);
    }
    assert_records(&got, &expected, "the backlog");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "each event names its own position");
}

#[test]
fn issue_49_a_stream_is_refused_as_the_records_endpoints_refuse() {
    let server = server();
    for parameter in [
        "to=2024-03-02T00:00:00Z",
        "limit=10",
        "cursor=abc",
        "format=csv",
    ] {
        for path in ["/units/stream", "/metrics/stream"] {
            let response = server.get(&format!("{path}?{parameter}"), Some(OPS));
            response.error(400, "unknown_parameter");
        }
    }
    server
        .get("/units/stream?bogus=1", Some(OPS))
        .error(400, "unknown_parameter");
    server.get("/units/stream", None).error(401, "unauthorized");
    server
        .get("/units/stream?bogus=1", None)
        .error(401, "unauthorized");
    server
        .get("/units/stream?station_ids=ST-03", Some(LINE))
        .error(403, "forbidden");
    server
        .get("/metrics/stream?from=yesterday", Some(OPS))
        .error(400, "invalid_parameter");
    // HEAD: the stream's headers, no body.
    let head = server.request_as("HEAD", "/units/stream", Some(OPS), &[]);
    assert_eq!(head.status, 200, "{}", head.context());
    assert_eq!(head.header("content-type"), Some("text/event-stream"));
    assert_eq!(head.header("cache-control"), Some("no-store"));
    assert_eq!(head.body, "");
}

// ---------------------------------------------------------------------------
// 14.1: `wait`
// ---------------------------------------------------------------------------

#[test]
fn issue_49_wait_is_a_duration_from_1s_to_max_wait() {
    let server = server();
    let all = units_all();
    for bad in [
        "0s", "01s", "61s", "2m", "1h", "1", "s", "1.5s", "1s,2s", "-1s", "1S",
    ] {
        let response = server.get(&format!("{all}&wait={}", percent_encode(bad)), Some(OPS));
        response.error(400, "invalid_parameter");
    }
    let twice = server.get(&format!("{all}&wait=1s&wait=1s"), Some(OPS));
    twice.error(400, "invalid_parameter");
    // Every API endpoint takes it; without If-None-Match it changes nothing.
    for path in [
        units_all(),
        metrics_all(),
        format!("/units/summary?{WINDOW}"),
        format!("/metrics/summary?{WINDOW}"),
        "/stations?station_ids=ST-01".to_owned(),
        format!("{}&format=csv", units_all()),
    ] {
        let plain = server.get(&path, Some(OPS));
        let waited = server.get(&format!("{path}&wait=60s"), Some(OPS));
        assert_eq!(waited.status, 200, "{}", waited.context());
        assert_eq!(waited.header("etag"), plain.header("etag"), "{path}");
    }
    // A tag that does not match: at once, 200.
    let other = server.request_as(
        "GET",
        &format!("{all}&wait=60s"),
        Some(OPS),
        &[("If-None-Match", "\"not-the-tag\"")],
    );
    assert_eq!(other.status, 200);
    // `wait` is not pinned by a cursor: a page asked with it continues without it.
    let first = server.ok(&format!("{all}&limit=2&wait=5s"));
    let cursor = first.cursor().expect("a next page");
    let next = server.get(
        &format!("{all}&limit=2&cursor={}", percent_encode(&cursor)),
        Some(OPS),
    );
    assert_eq!(next.status, 200, "{}", next.context());
}

#[test]
fn issue_49_wait_answers_304_when_nothing_changed_and_max_wait_bounds_it() {
    let fixture = Fixture::from_files(&small_files());
    let server = Server::start(&fixture, &["--max-wait", "2s"]);
    let path = format!("/units?{}&to={FAR}", everything());
    let etag = server
        .get(&path, Some(OPS))
        .header("etag")
        .unwrap()
        .to_owned();
    server
        .get(&format!("{path}&wait=3s"), Some(OPS))
        .error(400, "invalid_parameter");
    let held = server.request_as(
        "GET",
        &format!("{path}&wait=1s"),
        Some(OPS),
        &[("If-None-Match", &etag)],
    );
    assert_eq!(held.status, 304, "{}", held.context());
    assert_eq!(held.header("etag"), Some(etag.as_str()));
}

/// Holds `path` with `etag` on another thread; its response comes on the channel.
fn hold(server: &Server, path: &str, token: &'static str, etag: &str) -> mpsc::Receiver<Response> {
    let (sender, receiver) = mpsc::channel();
    let url = server.url(path);
    let etag = etag.to_owned();
    thread::spawn(move || {
        let agent = ureq::AgentBuilder::new().build();
        let authorization = bearer(token);
        let response = call(
            &agent,
            "GET",
            &url,
            &[("Authorization", &authorization), ("If-None-Match", &etag)],
        );
        let _ = sender.send(response);
    });
    receiver
}

#[test]
fn issue_49_a_held_request_gets_the_new_answer_of_the_generation_that_changes_it() {
    for watch in WATCHES {
        let fixture = Fixture::from_files(&small_files());
        let server = start_watching(&fixture, watch);
        let path = format!("/units?{}&to={FAR}", everything());
        let before = server.get(&path, Some(OPS));
        let etag = before.header("etag").unwrap().to_owned();
        // Held by a generation that does not touch what it reads: ST-02 only.
        let quiet_path = format!("{path}&station_ids=ST-02&wait=60s");
        let quiet_tag = server
            .get(&quiet_path, Some(OPS))
            .header("etag")
            .unwrap()
            .to_owned();
        let quiet = hold(&server, &quiet_path, OPS, &quiet_tag);
        let held = hold(&server, &format!("{path}&wait=60s"), OPS, &etag);
        wait_for_metric(&server, "stq_waiting_requests", 2.0);
        append(
            &first_file(&fixture),
            &lines(&[unit_line("ST-01", "SN-NEW", 600)]),
        );
        let response = held.recv().unwrap();
        assert_eq!(response.status, 200, "{}", response.context());
        assert_ne!(response.header("etag"), Some(etag.as_str()));
        let answer = response.json();
        let serials: Vec<&str> = (answer["data"].as_array().unwrap().iter())
            .map(|record| record["unit_serial"].as_str().unwrap())
            .collect();
        assert_eq!(serials, ["SN-A1", "SN-A2", "SN-A3", "SN-A4", "SN-NEW"]);
        // The other is still held: the generation did not change its answer.
        wait_for_metric(&server, "stq_waiting_requests", 1.0);
        assert!(quiet.try_recv().is_err());
        server.signal("TERM");
        // SIGTERM answers it as though its wait had ended: 304.
        assert_eq!(quiet.recv().unwrap().status, 304);
    }
}

#[test]
fn issue_49_held_requests_asking_one_thing_cost_one_evaluation_per_generation() {
    const HELD: usize = 100;
    let fixture = Fixture::from_files(&small_files());
    let server = start_watching(&fixture, &["--watch"]);
    let path = format!("/units?{}&to={FAR}&wait=60s", everything());
    let etag = server
        .get(&path, Some(OPS))
        .header("etag")
        .unwrap()
        .to_owned();
    let held: Vec<_> = (0..HELD)
        .map(|_| hold(&server, &path, OPS, &etag))
        .collect();
    wait_for_metric(&server, "stq_waiting_requests", HELD as f64);
    let evaluations = server.admin_value("stq_wait_evaluations_total");
    let generation = server.generation();
    append(
        &first_file(&fixture),
        &lines(&[unit_line("ST-01", "SN-NEW", 600)]),
    );
    let mut tags = Vec::new();
    for receiver in held {
        let response = receiver.recv().unwrap();
        assert_eq!(response.status, 200, "{}", response.context());
        assert_eq!(response.json()["data"].as_array().unwrap().len(), 5);
        tags.push(response.header("etag").unwrap().to_owned());
    }
    tags.dedup();
    assert_eq!(tags.len(), 1, "one answer for all");
    let generations = server.generation() - generation;
    let spent = server.admin_value("stq_wait_evaluations_total") - evaluations;
    assert!(generations >= 1);
    assert!(
        spent <= generations as f64,
        "{HELD} held requests cost {spent} evaluations over {generations} generation(s)"
    );
}

#[test]
fn issue_49_beyond_max_waiting_a_request_is_answered_at_once_and_a_revoked_token_gets_401() {
    let fixture = Fixture::from_files(&small_files());
    let server = Server::start(&fixture, &["--max-waiting", "1"]);
    let path = format!("/units?{}&to={FAR}&wait=60s", everything());
    let etag = server
        .get(&path, Some(LINE))
        .header("etag")
        .unwrap()
        .to_owned();
    let held = hold(&server, &path, LINE, &etag);
    wait_for_metric(&server, "stq_waiting_requests", 1.0);
    // The second finds no place: answered at once, as without `wait`.
    let at_once = server.request_as("GET", &path, Some(LINE), &[("If-None-Match", &etag)]);
    assert_eq!(at_once.status, 304);
    assert_eq!(server.admin_value("stq_waiting_requests"), 1.0);
    // A reload that revokes the held request's token answers it 401.
    std::fs::write(&fixture.tokens, tokens_file(&[(OPS, None)])).unwrap();
    server.signal("HUP");
    let response = held.recv().unwrap();
    response.error(401, "unauthorized");
}

// ---------------------------------------------------------------------------
// 14.2: live records, resume, reset
// ---------------------------------------------------------------------------

#[test]
fn issue_49_a_stream_sends_appended_late_and_new_files_records_as_they_are_loaded() {
    for watch in WATCHES {
        let fixture = Fixture::from_files(&small_files());
        let server = start_watching(&fixture, watch);
        let query = format!("/units/stream?{}", everything());
        let mut stream = open(&server, &query, OPS, &[]);
        let mut shown = stream.records(4);
        append(
            &first_file(&fixture),
            &lines(&[unit_line("ST-01", "SN-B1", 600)]),
        );
        let appended = stream.records(1);
        assert_eq!(appended[0]["unit_serial"], "SN-B1");
        shown.extend(appended);
        // Late: before the last record sent; sent when it is loaded.
        append(
            &first_file(&fixture),
            &lines(&[unit_line("ST-02", "SN-LATE", 30)]),
        );
        let late = stream.records(1);
        assert_eq!(late[0]["unit_serial"], "SN-LATE");
        shown.extend(late);
        // A new file's lines.
        std::fs::write(
            fixture.snapshots.join("second.units.jsonl"),
            lines(&[
                unit_line("ST-03", "SN-C1", 900),
                unit_line("ST-03", "SN-C2", 901),
            ]),
        )
        .unwrap();
        shown.extend(stream.records(2));
        // What the stream showed is what a query shows, as a set.
        let mut expected = walk_from(&server, "/units", BASE_TIME, "&direction=input,output", OPS);
        let key = |record: &Value| record["unit_serial"].as_str().unwrap().to_owned();
        shown.sort_by_key(key);
        expected.sort_by_key(key);
        assert_records(&shown, &expected, &format!("{watch:?}"));
    }
}

#[test]
fn issue_49_a_stream_resumes_after_its_last_event_exactly_once_across_reloads() {
    let fixture = Fixture::from_files(&small_files());
    let server = start_watching(&fixture, &["--watch"]);
    let query = format!("/units/stream?{}", everything());
    let mut stream = open(&server, &query, OPS, &[]);
    stream.records(4);
    let last = stream.last_id.clone().unwrap();
    drop(stream);
    // Reloads while the client is away: one appended record, one late.
    let mut added: Vec<String> = Vec::new();
    for (serial, offset) in [("SN-B1", 600), ("SN-LATE", 30)] {
        let generation = server.generation();
        append(
            &first_file(&fixture),
            &lines(&[unit_line("ST-01", serial, offset)]),
        );
        server.wait_for_generation_after(generation);
        added.push(serial.to_owned());
    }
    let by_header = [("Last-Event-ID", last.as_str())];
    let variants: [(String, &[(&str, &str)]); 3] = [
        (query.clone(), &by_header),
        (
            format!("{query}&last_event_id={}", percent_encode(&last)),
            &[],
        ),
        // Both: the header wins over a parameter that names no event.
        (format!("{query}&last_event_id=not-an-id"), &by_header),
    ];
    for (round, (resumed_query, headers)) in variants.iter().enumerate() {
        let mut resumed = open(&server, resumed_query, OPS, headers);
        let first = resumed.next_event().unwrap();
        assert_eq!(first.kind, "records", "{first:?}: no reset, no backlog");
        let mut records = first.records();
        if records.len() < added.len() {
            records.extend(resumed.records(added.len() - records.len()));
        }
        let mut serials: Vec<String> = (records.iter())
            .map(|record| record["unit_serial"].as_str().unwrap().to_owned())
            .collect();
        serials.sort();
        let mut expected = added.clone();
        expected.sort();
        assert_eq!(serials, expected, "{resumed_query}: each record once");
        // From the resumed stream's own last id, only what comes next.
        let after = resumed.last_id.clone().unwrap();
        drop(resumed);
        let mut again = open(&server, &query, OPS, &[("Last-Event-ID", after.as_str())]);
        let serial = format!("SN-R{round}");
        append(
            &first_file(&fixture),
            &lines(&[unit_line("ST-01", &serial, 700 + round as i64)]),
        );
        assert_eq!(again.records(1)[0]["unit_serial"], serial.as_str());
        added.push(serial);
    }
}

#[test]
fn issue_49_a_replaced_file_or_a_foreign_id_resets_the_stream_to_a_fresh_backlog() {
    let fixture = Fixture::from_files(&small_files());
    let server = start_watching(&fixture, &["--watch"]);
    let query = format!("/units/stream?{}", everything());
    let mut stream = open(&server, &query, OPS, &[]);
    stream.records(4);
    let foreign_source = stream.last_id.clone().unwrap();
    // The file replaced by one without SN-A3: the stream starts over.
    write_by_rename(
        &fixture,
        &first_file(&fixture),
        &lines(&[
            unit_line("ST-01", "SN-A1", 0),
            unit_line("ST-02", "SN-A2", 60),
            unit_line("ST-01", "SN-A4", 180),
        ]),
    );
    let reset = stream.expect("reset");
    let reason: Value = serde_json::from_str(&reset.data).unwrap();
    assert!(reason["reason"].is_string(), "{reset:?}");
    let fresh = walk_from(&server, "/units", BASE_TIME, "&direction=input,output", OPS);
    assert_eq!(fresh.len(), 3);
    assert_records(&stream.records(3), &fresh, "the backlog after a reset");
    // An id of no stream, and one of another process: reset, then the backlog.
    let other = Server::start(&fixture, &[]);
    for (target, id) in [(&server, "garbage"), (&other, foreign_source.as_str())] {
        let mut resumed = open(target, &query, OPS, &[("Last-Event-ID", id)]);
        resumed.expect("reset");
        assert_records(&resumed.records(3), &fresh, id);
    }
    // An id of another token or query: reset too.
    let mut narrowed = open(
        &server,
        &format!("{query}&station_ids=ST-01"),
        OPS,
        &[("Last-Event-ID", &foreign_source)],
    );
    narrowed.expect("reset");
}

#[test]
fn issue_49_a_revoked_token_ends_its_stream_with_an_error_event() {
    let fixture = Fixture::from_files(&small_files());
    let server = Server::start(&fixture, &[]);
    let mut stream = open(
        &server,
        &format!("/units/stream?{}", everything()),
        LINE,
        &[],
    );
    stream.records(4);
    std::fs::write(&fixture.tokens, tokens_file(&[(OPS, None)])).unwrap();
    server.signal("HUP");
    let error = stream.expect("error");
    let body: Value = serde_json::from_str(&error.data).unwrap();
    assert_eq!(body["error"]["code"], "unauthorized", "{body}");
    assert!(stream.next_event().is_none(), "the stream ends");
    wait_for_metric(&server, "stq_streams", 0.0);
    assert_eq!(
        server.admin_value("stq_stream_disconnects_total{reason=\"token\"}"),
        1.0
    );
}

#[test]
fn issue_49_max_streams_bounds_the_streams_open_and_sigterm_closes_them() {
    let fixture = Fixture::from_files(&small_files());
    let server = Server::start(&fixture, &["--max-streams", "1"]);
    let query = format!("/units/stream?{}", everything());
    let mut stream = open(&server, &query, OPS, &[]);
    stream.records(4);
    assert_eq!(server.admin_value("stq_streams"), 1.0);
    let refused = server.get(&query, Some(OPS));
    let details = refused.error(503, "overloaded");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(details["max_streams"], 1);
    // A client that leaves is noticed when its connection is next written to: at
    // the latest, the heartbeat 15 s on.
    drop(stream);
    wait_for_metric_within(&server, "stq_streams", 0.0, HEARTBEAT_PATIENCE);
    assert_eq!(
        server.admin_value("stq_stream_disconnects_total{reason=\"closed\"}"),
        1.0
    );
    let mut stream = open(&server, &query, OPS, &[]);
    stream.records(4);
    assert!(server.admin_value("stq_stream_events_total") >= 2.0);
    server.signal("TERM");
    assert!(stream.next_event().is_none(), "SIGTERM closes the stream");
    assert!(server.wait_for_exit(RELOAD_TIMEOUT).is_some());
}

#[test]
fn issue_49_a_reader_that_stops_reading_is_cut_off_and_an_idle_one_is_kept() {
    // About 20 MB of events: more than the sockets' buffers and the stream's queue.
    let records: Vec<String> = (0..100_000)
        .map(|index| {
            unit_line(
                "ST-01",
                &format!("SN-{index:06}-{}", "X".repeat(64)),
                index as i64 / 10,
            )
        })
        .collect();
    let fixture = Fixture::from_files(&[
        FileSpec::plain("many.units.jsonl", lines(&records)),
        FileSpec::plain("other.units.jsonl", lines(&[unit_line("ST-02", "SN-Q", 0)])),
    ]);
    let server = Server::start(&fixture, &["--client-timeout", "1s", "--watch"]);
    // A client that reads the head and then nothing.
    let mut socket = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    write!(
        socket,
        "GET /units/stream?from={BASE_TIME} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {OPS}\r\n\r\n"
    )
    .unwrap();
    let mut head = [0u8; 64];
    socket.read_exact(&mut head).unwrap();
    assert!(head.starts_with(b"HTTP/1.1 200"));
    // An idle reader of ST-02 beside it, kept open past --client-timeout.
    let mut idle = open(
        &server,
        &format!("/units/stream?from={BASE_TIME}&station_ids=ST-02"),
        OPS,
        &[],
    );
    idle.records(1);
    wait_for_metric(
        &server,
        "stq_stream_disconnects_total{reason=\"slow\"}",
        1.0,
    );
    assert_eq!(server.admin_value("stq_streams"), 1.0);
    // The idle one still gets what is added.
    append(
        &fixture.snapshots.join("other.units.jsonl"),
        &lines(&[unit_line("ST-02", "SN-R", 1)]),
    );
    assert_eq!(idle.records(1)[0]["unit_serial"], "SN-R");
    drop(socket);
}

#[test]
fn issue_49_a_quiet_stream_gets_a_comment_and_outlives_the_client_timeout() {
    let fixture = Fixture::from_files(&small_files());
    let server = Server::start(&fixture, &["--client-timeout", "1s"]);
    let mut stream = open(
        &server,
        &format!("/units/stream?{}", everything()),
        OPS,
        &[],
    );
    stream.records(4);
    // Nothing happens: the next thing sent is the heartbeat, 15 s on.
    assert!(
        matches!(stream.next_item(), Some(Err(_))),
        "a comment comes first"
    );
    let generation = server.generation();
    append(
        &first_file(&fixture),
        &lines(&[unit_line("ST-01", "SN-H", 600)]),
    );
    server.signal("HUP");
    server.wait_for_generation_after(generation);
    assert_eq!(stream.records(1)[0]["unit_serial"], "SN-H");
}

// ---------------------------------------------------------------------------
// A property against the reference: what a client shows is a fresh query's
// ---------------------------------------------------------------------------

/// One step of the floor a stream's client follows.
#[derive(Clone, Debug)]
enum Step {
    /// Lines appended to a station's file, at these offsets (seconds after
    /// `BASE_TIME`; small ones are late).
    Append(usize, Vec<i64>),
    /// A station's file replaced by its lines but the first.
    Replace(usize),
    /// The client (back if away) drops its connection and resumes from its last
    /// event's id.
    Reconnect,
    /// The client drops its connection and stays away until it reconnects.
    Leave,
    /// The client resumes with an id that is not one.
    Garbage,
}

const PROPERTY_STATIONS: [&str; 3] = ["ST-01", "ST-02", "ST-03"];

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        5 => (0..3usize, proptest::collection::vec(0..2_000i64, 1..4))
            .prop_map(|(station, offsets)| Step::Append(station, offsets)),
        1 => (0..3usize).prop_map(Step::Replace),
        2 => Just(Step::Reconnect),
        2 => Just(Step::Leave),
        1 => Just(Step::Garbage),
    ]
}

/// Reads events until the client's view, cleared at each `reset`, is
/// `expected`, in its order: never holding a record twice on the way.
fn catch_up(stream: &mut EventStream, view: &mut Vec<String>, expected: &[String], context: &str) {
    loop {
        let mut shown = view.clone();
        shown.sort();
        shown.dedup();
        assert_eq!(
            shown.len(),
            view.len(),
            "{context}: a record shown twice: {view:?}"
        );
        if view == expected {
            return;
        }
        let event = stream
            .next_event()
            .unwrap_or_else(|| panic!("{context}: the stream ended at {view:?}, not {expected:?}"));
        match event.kind.as_str() {
            "reset" => view.clear(),
            "records" => view.extend(serials(&event.records())),
            other => panic!("{context}: an event {other:?}"),
        }
    }
}

/// Against a model of what a client shows: after a `reset`, what a fresh query
/// shows in its order; then each generation's additions in the contract's
/// order, generation by generation, whether the client was connected, resumed
/// or away while they came.
#[test]
fn issue_49_a_client_that_clears_on_reset_shows_what_a_fresh_query_shows() {
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    let steps = proptest::collection::vec(step(), 1..8);
    runner
        .run(&steps, |steps| {
            run_steps(&steps);
            Ok(())
        })
        .unwrap();
}

fn run_steps(steps: &[Step]) {
    let path = |station: usize| format!("{}.units.jsonl", PROPERTY_STATIONS[station]);
    let mut contents: Vec<Vec<String>> = (0..3)
        .map(|station| {
            vec![unit_line(
                PROPERTY_STATIONS[station],
                &format!("SN-{station}-0"),
                1_000,
            )]
        })
        .collect();
    let files: Vec<FileSpec> = (0..3)
        .map(|station| FileSpec::plain(&path(station), lines(&contents[station])))
        .collect();
    let fixture = Fixture::from_files(&files);
    let server = Server::start(&fixture, &[]);
    let query = format!("/units/stream?{}", everything());
    let fresh = |server: &Server| {
        serials(&walk_from(
            server,
            "/units",
            BASE_TIME,
            "&direction=input,output",
            OPS,
        ))
    };
    let mut stream = Some(open(&server, &query, OPS, &[]));
    let mut view = Vec::new();
    // What the client must show once it has read all there is.
    let mut expected = fresh(&server);
    // A reset is due when the client comes back.
    let mut reset_due = false;
    let mut last_id: Option<String> = None;
    let mut serial = 0;
    for (index, step) in steps.iter().chain([&Step::Reconnect]).enumerate() {
        let context = format!("step {index} of {steps:?}");
        let reload = |server: &Server| {
            let generation = server.generation();
            server.signal("HUP");
            server.wait_for_generation_after(generation);
        };
        if let Some(connected) = &stream {
            last_id = connected.last_id.clone().or(last_id.take());
        }
        match step {
            Step::Append(station, offsets) => {
                let mut added: Vec<(i64, String)> = (offsets.iter())
                    .map(|offset| {
                        serial += 1;
                        (*offset, format!("SN-{station}-{serial}"))
                    })
                    .collect();
                let appended: Vec<String> = (added.iter())
                    .map(|(offset, name)| unit_line(PROPERTY_STATIONS[*station], name, *offset))
                    .collect();
                append(&fixture.snapshots.join(path(*station)), &lines(&appended));
                contents[*station].extend(appended);
                reload(&server);
                // One station's lines: in order of time, then of the file.
                added.sort_by_key(|(offset, _)| *offset);
                expected.extend(added.into_iter().map(|(_, name)| name));
            }
            Step::Replace(station) => {
                if contents[*station].len() > 1 {
                    contents[*station].remove(0);
                } else {
                    serial += 1;
                    let line = unit_line(
                        PROPERTY_STATIONS[*station],
                        &format!("SN-{station}-{serial}"),
                        5,
                    );
                    contents[*station] = vec![line];
                }
                write_by_rename(
                    &fixture,
                    &fixture.snapshots.join(path(*station)),
                    &lines(&contents[*station]),
                );
                reload(&server);
                reset_due = true;
            }
            Step::Reconnect => {
                // As EventSource does: the last id received on any connection.
                drop(stream.take());
                stream = Some(match &last_id {
                    Some(id) => open(&server, &query, OPS, &[("Last-Event-ID", id)]),
                    None => {
                        // No event received yet: a new stream, a new view.
                        view.clear();
                        reset_due = true;
                        open(&server, &query, OPS, &[])
                    }
                });
            }
            Step::Leave => drop(stream.take()),
            Step::Garbage => {
                last_id = None;
                drop(stream.take());
                stream = Some(open(
                    &server,
                    &query,
                    OPS,
                    &[("Last-Event-ID", "0.0.nothing")],
                ));
                reset_due = true;
            }
        }
        let Some(connected) = &mut stream else {
            continue;
        };
        if std::mem::take(&mut reset_due) {
            expected = fresh(&server);
        }
        catch_up(connected, &mut view, &expected, &context);
    }
}

/// Late records among many sent ones, more of them than `--max-records`: each is
/// sent once, none left behind the cap of one query.
#[test]
fn issue_49_late_records_beyond_max_records_are_each_sent_once() {
    let sent: Vec<String> = (0..20)
        .map(|offset| unit_line("ST-01", &format!("SN-S{offset}"), offset))
        .collect();
    let fixture = Fixture::from_files(&[FileSpec::plain("first.units.jsonl", lines(&sent))]);
    let server = Server::start(&fixture, &["--max-records", "5"]);
    let mut stream = open(
        &server,
        &format!("/units/stream?{}", everything()),
        OPS,
        &[],
    );
    assert_eq!(stream.records(20).len(), 20);
    let late: Vec<String> = (0..12)
        .map(|offset| unit_line("ST-02", &format!("SN-L{offset}"), offset))
        .collect();
    std::fs::write(fixture.snapshots.join("late.units.jsonl"), lines(&late)).unwrap();
    let generation = server.generation();
    server.signal("HUP");
    server.wait_for_generation_after(generation);
    let serials: Vec<String> = (stream.records(12).iter())
        .map(|record| record["unit_serial"].as_str().unwrap().to_owned())
        .collect();
    let expected: Vec<String> = (0..12).map(|offset| format!("SN-L{offset}")).collect();
    assert_eq!(serials, expected);
}

/// The serial numbers of `records`.
fn serials(records: &[Value]) -> Vec<String> {
    (records.iter())
        .map(|record| record["unit_serial"].as_str().unwrap().to_owned())
        .collect()
}

/// Reads `records` events until `count` records came, each event's serial
/// numbers with the id it carried.
fn events_of(stream: &mut EventStream, count: usize) -> Vec<(Vec<String>, String)> {
    let mut events = Vec::new();
    let mut read = 0;
    while read < count {
        let event = stream.expect("records");
        let records = serials(&event.records());
        read += records.len();
        events.push((records, stream.last_id.clone().unwrap()));
    }
    assert_eq!(read, count, "{events:?}");
    events
}

/// Each generation's additions come after the backlog, generation by
/// generation and in the contract's order among themselves, and a client that
/// resumes from any event gets the rest in that same order, even across
/// generations whose records fall between those sent before (a resume once
/// sent every generation's late records first, then walked the others).
#[test]
fn issue_49_a_resumed_stream_sends_the_rest_in_the_order_the_stream_sent_it() {
    let fixture = Fixture::from_files(&small_files());
    let server = Server::start(&fixture, &[]);
    let query = format!("/units/stream?{}", everything());
    let mut stream = open(&server, &query, OPS, &[]);
    let mut events = events_of(&mut stream, 4);
    // Offsets: the backlog ends at 180; 300 falls between it and 600, and 30
    // before all of them. The third generation adds two records in one reload.
    let generations: [&[(&str, i64)]; 3] = [
        &[("SN-G1", 600)],
        &[("SN-G2", 300)],
        &[("SN-G3B", 650), ("SN-G3A", 30)],
    ];
    for added in generations {
        let generation = server.generation();
        let added: Vec<String> = (added.iter())
            .map(|(serial, offset)| unit_line("ST-01", serial, *offset))
            .collect();
        append(&first_file(&fixture), &lines(&added));
        server.signal("HUP");
        server.wait_for_generation_after(generation);
    }
    events.extend(events_of(&mut stream, 4));
    let sent: Vec<String> = events
        .iter()
        .flat_map(|(records, _)| records.clone())
        .collect();
    let expected = [
        "SN-A1", "SN-A2", "SN-A3", "SN-A4", "SN-G1", "SN-G2", "SN-G3A", "SN-G3B",
    ];
    assert_eq!(
        sent, expected,
        "the backlog, then each generation's additions"
    );
    drop(stream);
    let mut before = 0;
    for (records, id) in &events {
        before += records.len();
        let mut resumed = open(&server, &query, OPS, &[("Last-Event-ID", id)]);
        let rest: Vec<String> = (events_of(&mut resumed, sent.len() - before).iter())
            .flat_map(|(records, _)| records.clone())
            .collect();
        assert_eq!(rest, sent[before..], "resumed after {records:?}");
    }
}

/// A generation's late additions, more than `--max-records` of them, some of
/// which the stream's filter leaves out: each matching one is sent once, in
/// order (a batch once counted what it sent, not what it read, and sent some
/// again).
#[test]
fn issue_49_additions_beyond_max_records_under_a_filter_are_each_sent_once() {
    let fixture = Fixture::from_files(&small_files());
    let server = Server::start(&fixture, &["--max-records", "5"]);
    let mut stream = open(
        &server,
        &format!("/units/stream?{}&type=PCB", everything()),
        OPS,
        &[],
    );
    assert_eq!(stream.records(4).len(), 4);
    let added: Vec<String> = (0..24)
        .map(|index| {
            // Before the last record sent (180): late.
            let line = unit_line("ST-03", &format!("SN-F{index:02}"), 1 + index);
            match index % 3 {
                0 => line,
                _ => line.replace(r#""unit_type":"PCB""#, r#""unit_type":"Cable""#),
            }
        })
        .collect();
    std::fs::write(fixture.snapshots.join("added.units.jsonl"), lines(&added)).unwrap();
    let generation = server.generation();
    server.signal("HUP");
    server.wait_for_generation_after(generation);
    let expected: Vec<String> = (0..24)
        .filter(|index| index % 3 == 0)
        .map(|index| format!("SN-F{index:02}"))
        .collect();
    assert_eq!(serials(&stream.records(expected.len())), expected);
    // Nothing more: the next record is the next generation's.
    append(
        &first_file(&fixture),
        &lines(&[unit_line("ST-01", "SN-NEXT", 900)]),
    );
    server.signal("HUP");
    assert_eq!(serials(&stream.records(1)), ["SN-NEXT"]);
}

/// The venv that runs `tests/live/sse_client.py` (httpx and httpx-sse from PyPI,
/// pinned in `tests/live/requirements.txt`), made once under the target directory.
fn sse_client_python() -> std::path::PathBuf {
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("sse-venv");
    let python = venv.join("bin/python");
    let ready = |python: &std::path::Path| {
        std::process::Command::new(python)
            .args(["-c", "import httpx, httpx_sse"])
            .status()
            .is_ok_and(|status| status.success())
    };
    if !ready(&python) {
        let made = std::process::Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("run python3 -m venv");
        assert!(made.success(), "python3 -m venv {} failed", venv.display());
        let installed = std::process::Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "-r"])
            .arg(workspace.join("tests/live/requirements.txt"))
            .status()
            .expect("run pip");
        assert!(
            installed.success(),
            "pip install -r tests/live/requirements.txt failed"
        );
    }
    python
}

/// docs/api.md section 14.2's Python client, run as the docs show it: it follows a
/// stream opened now and prints the records appended after it opened, then exits.
#[test]
fn issue_49_the_python_client_of_the_docs_follows_a_stream() {
    let python = sse_client_python();
    let fixture = Fixture::from_files(&small_files());
    let server = start_watching(&fixture, &["--watch"]);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/live/sse_client.py");
    let client = std::process::Command::new(python)
        .arg(script)
        .args(["--count", "2"])
        .arg(server.url("/units/stream?station_ids=ST-01"))
        .env("STQ_TOKEN", OPS)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the Python client");
    wait_for_metric(&server, "stq_streams", 1.0);
    let now = rfc3339_from_seconds(now_seconds() + 1);
    let line = |serial: &str| {
        format!(
            r#"{{"station_id":"ST-01","unit_serial":"{serial}","time_created":"{now}","unit_type":"PCB","direction":"output"}}"#
        )
    };
    append(
        &first_file(&fixture),
        &lines(&[line("SN-PY1"), line("SN-PY2")]),
    );
    let output = client.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the client exited {:?}: {stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let serials: Vec<String> = (stdout.lines())
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["unit_serial"].to_string())
        .collect();
    assert_eq!(serials, ["\"SN-PY1\"", "\"SN-PY2\""]);
}
