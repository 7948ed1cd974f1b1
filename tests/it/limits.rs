//! The limits of CONTRACT section 9 (issue 5), through the real binary: the query
//! string's length, the window's length, a real query over its time limit, the
//! HTTP layer's own 431 and 400, the client deadlines (including the second request
//! of a kept-alive connection, which actix-http alone does not bound), two
//! `Authorization` headers, and a token in the URL; and slow readers of large
//! answers, who hold no query slot (issue 10).
//!
//! Faults and the concurrency cap's refusals are in `tests/it/faults.rs`.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::OnceLock;
use std::thread;
use std::time::Duration;

use crate::common::*;
use serde_json::{json, Value};

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| Shared::start(&["--client-timeout", "1s"]))
}

fn server() -> &'static Server {
    &shared().server
}

// --- The query string -----------------------------------------------------------

/// A `/units` query of exactly `length` bytes: the window, then one long station id.
fn query_of_length(length: usize) -> String {
    let head = format!("{WINDOW}&station_ids=");
    format!("{head}{}", "S".repeat(length - head.len()))
}

#[test]
fn a_query_string_of_the_limit_is_read_and_one_byte_more_is_414() {
    let at_limit = query_of_length(8192);
    // Read as usual: the token may not see that station.
    server()
        .get(&format!("/units?{at_limit}"), Some(LINE))
        .error(403, "forbidden");
    let over = query_of_length(8193);
    let details = server()
        .get(&format!("/units?{over}"), Some(OPS))
        .error(414, "uri_too_long");
    assert_eq!(details, json!({"length": 8193, "max_query_bytes": 8192}));
}

#[test]
fn the_length_is_counted_as_sent_still_percent_encoded() {
    // 2,000 commas sent as `%2C` are 6,000 bytes; 3,000 are 9,000, over the limit.
    let commas = |count| "%2C".repeat(count);
    let fits = server().get(
        &format!("/units?{WINDOW}&station_ids={}", commas(2000)),
        Some(OPS),
    );
    assert_eq!(fits.status, 200, "{}", fits.context());
    server()
        .get(
            &format!("/units?{WINDOW}&station_ids={}", commas(3000)),
            Some(OPS),
        )
        .error(414, "uri_too_long");
}

#[test]
fn the_length_is_checked_after_path_and_method_and_before_anything_else() {
    let over = query_of_length(9000);
    server()
        .get(&format!("/nope?{over}"), Some(OPS))
        .error(404, "not_found");
    server()
        .request_as("POST", &format!("/metrics?{over}"), Some(OPS), &[])
        .error(405, "method_not_allowed");
    // Before the token: a long query is refused without hashing anything.
    server()
        .get(&format!("/units?{over}"), None)
        .error(414, "uri_too_long");
    server()
        .get(&format!("/units?{over}"), Some("no-such-token"))
        .error(414, "uri_too_long");
    server()
        .get(&format!("/metrics?nope=1&{over}"), Some(OPS))
        .error(414, "uri_too_long");
    let head = server().request_as("HEAD", &format!("/units?{over}"), Some(OPS), &[]);
    assert_eq!(head.status, 414);
    assert!(head.body.is_empty());
}

#[test]
fn the_limit_is_configurable_by_flag_and_environment() {
    let fixture = Fixture::main();
    for server in [
        Server::start(&fixture, &["--max-query-bytes", "100"]),
        Server::spawn(
            &serve_args(&fixture.snapshots, &fixture.tokens, &[]),
            &[("STQ_MAX_QUERY_BYTES", "100")],
        ),
    ] {
        let fits = server.get(&format!("/units?{}", query_of_length(100)), Some(OPS));
        assert_eq!(fits.status, 200, "{}", fits.context());
        let details = server
            .get(&format!("/units?{}", query_of_length(101)), Some(OPS))
            .error(414, "uri_too_long");
        assert_eq!(details, json!({"length": 101, "max_query_bytes": 100}));
    }
}

// --- The window -----------------------------------------------------------------

#[test]
fn a_window_longer_than_max_window_is_refused_the_default_one_included() {
    let fixture = Fixture::main();
    let server = Server::start(&fixture, &["--max-window", "12h"]);

    // The default 24 h window, and the 24 h windows of a lone `from` or `to`.
    for query in ["", "from=2024-03-05T00:00:00Z", "to=2024-03-05T00:00:00Z"] {
        let details = server
            .get(&format!("/units?{query}"), Some(OPS))
            .error(400, "window_too_large");
        assert_eq!(details["max_window"], "12h");
    }
    let details = server
        .get(
            "/metrics?from=2024-03-05T00:00:00Z&to=2024-03-05T12:00:00.000000001Z",
            Some(OPS),
        )
        .error(400, "window_too_large");
    assert_eq!(
        details,
        json!({
            "from": "2024-03-05T00:00:00Z",
            "to": "2024-03-05T12:00:00.000000001Z",
            "max_window": "12h",
        })
    );

    // Exactly 12 h is allowed, and so is a walk over it with cursors.
    let exact = "from=2024-03-05T00:00:00Z&to=2024-03-05T12:00:00Z";
    let all = server.ok(&format!("/metrics?{exact}"));
    let mut walked = Vec::new();
    let mut page = server.ok(&format!("/metrics?{exact}&limit=2"));
    loop {
        walked.extend(page.data.clone());
        let Some(cursor) = page.cursor() else { break };
        page = server.ok(&format!("/metrics?limit=2&cursor={cursor}"));
    }
    assert_eq!(walked, all.data);

    // An empty window is still `invalid_window`, whatever its length.
    server
        .get(
            "/units?from=2024-03-06T00:00:00Z&to=2024-03-01T00:00:00Z",
            Some(OPS),
        )
        .error(400, "invalid_window");
}

#[test]
fn without_max_window_any_window_is_allowed() {
    let response = server().get(
        "/units?from=0000-01-01T00:00:00Z&to=9999-12-31T23:59:59.999999999Z&limit=1",
        Some(OPS),
    );
    assert_eq!(response.status, 200, "{}", response.context());
}

// --- A real query over its time limit ---------------------------------------------

/// A synthetic snapshot big enough that a query over all of it takes well over a
/// millisecond, even in a release build.
fn generated(directory: &Path) {
    let output = run(
        &[
            "gen",
            "--out",
            &path_string(directory),
            "--stations",
            "8",
            "--days",
            "2",
            "--units-per-hour",
            "60",
            "--end",
            "2024-03-03T00:00:00Z",
        ],
        None,
        &[],
        Duration::from_secs(120),
    );
    assert!(output.status.success(), "{output:?}");
}

#[test]
fn a_real_query_over_the_request_timeout_gets_503_timeout() {
    let directory = temporary_directory();
    generated(directory.path());
    let tokens = directory.path().join("tokens.json");
    std::fs::write(&tokens, tokens_json()).unwrap();
    let server = Server::spawn(
        &serve_args(directory.path(), &tokens, &["--request-timeout", "1ms"]),
        &[],
    );
    let everything = "/metrics?from=2024-03-01T00:00:00Z&to=2024-03-03T00:00:00Z&limit=100000";
    let details = server.get(everything, Some(OPS)).error(503, "timeout");
    assert_eq!(details, json!({"request_timeout": "1ms"}));
    // What is refused before any work is not timed out.
    server
        .get("/metrics?limit=0", Some(OPS))
        .error(400, "invalid_parameter");
    assert_eq!(server.get("/healthz", None).status, 200);
}

// --- The HTTP layer ----------------------------------------------------------------

fn connect(server: &Server) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
}

/// Everything the server sends until it closes the connection; a reset counts as a
/// close. Fails if the connection's read timeout passes first.
fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut received = Vec::new();
    let mut buffer = [0u8; 65536];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(count) => received.extend_from_slice(&buffer[..count]),
            Err(error) if error.kind() == ErrorKind::ConnectionReset => break,
            Err(error) => panic!("the connection was not closed: {error}"),
        }
    }
    received
}

fn status_of(response: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(response);
    text.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"))
}

#[test]
fn a_head_over_the_http_layers_limits_gets_431_and_a_bad_request_line_400() {
    let many_headers: String = (0..200).map(|index| format!("X-{index}: a\r\n")).collect();
    let huge_header = format!("X-Big: {}\r\n", "a".repeat(200 * 1024));
    for (head, status) in [
        (
            format!("GET /units HTTP/1.1\r\nHost: x\r\n{many_headers}\r\n"),
            431,
        ),
        (
            format!("GET /units HTTP/1.1\r\nHost: x\r\n{huge_header}\r\n"),
            431,
        ),
        ("GARBAGE\r\n\r\n".to_owned(), 400),
        ("GET /units HTTP/9.9\r\nHost: x\r\n\r\n".to_owned(), 400),
        ("GET /un its HTTP/1.1\r\nHost: x\r\n\r\n".to_owned(), 400),
    ] {
        let mut stream = connect(server());
        // The server may answer and close before it has read everything.
        let _ = stream.write_all(head.as_bytes());
        let response = read_until_closed(&mut stream);
        assert_eq!(status_of(&response), status, "{head:.60}");
    }
    // And it goes on serving.
    assert_eq!(server().get("/healthz", None).status, 200);
}

// --- Client deadlines --------------------------------------------------------------

// The server runs with `--client-timeout 1s`. These tests wait for the close itself,
// as long as the connection's read timeout (far longer): they show that idle and
// trickling connections are closed, not how promptly, which a loaded machine's
// scheduling would decide.

const HEALTH: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";

/// Reads one `/healthz` response off a kept-alive connection.
fn read_health_response(stream: &mut TcpStream) {
    let mut received = Vec::new();
    let mut buffer = [0u8; 1024];
    while !received.ends_with(br#"{"status":"ok"}"#) {
        let count = stream.read(&mut buffer).unwrap();
        assert!(
            count > 0,
            "closed early: {:?}",
            String::from_utf8_lossy(&received)
        );
        received.extend_from_slice(&buffer[..count]);
    }
    assert_eq!(status_of(&received), 200);
}

/// Sends `bytes` one at a time, `pause` apart (the trickle itself), until the
/// server closes the connection; fails if all were sent and it is still open.
fn trickle(stream: &mut TcpStream, bytes: &[u8], pause: Duration) {
    stream
        .set_read_timeout(Some(Duration::from_millis(1)))
        .unwrap();
    let mut buffer = [0u8; 1024];
    for byte in bytes {
        if stream.write_all(&[*byte]).is_err() {
            return;
        }
        thread::sleep(pause);
        match stream.read(&mut buffer) {
            Ok(0) => return,
            Err(error) if error.kind() == ErrorKind::ConnectionReset => return,
            // A 408 before the close is allowed.
            Ok(_) | Err(_) => {}
        }
    }
    panic!(
        "still open after {} bytes trickled {pause:?} apart",
        bytes.len()
    );
}

/// A head that takes 30 s to trickle at 50 ms a byte: far longer than the timeout.
fn slow_head() -> Vec<u8> {
    format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: {}",
        "a".repeat(600)
    )
    .into_bytes()
}

#[test]
fn an_idle_new_connection_is_closed_within_the_client_timeout() {
    let mut stream = connect(server());
    // actix-http may send a 408 before it closes; the close is what counts.
    read_until_closed(&mut stream);
}

#[test]
fn an_idle_kept_alive_connection_is_closed_within_the_client_timeout() {
    let mut stream = connect(server());
    stream.write_all(HEALTH).unwrap();
    read_health_response(&mut stream);
    let rest = read_until_closed(&mut stream);
    assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
}

#[test]
fn a_trickled_first_request_is_cut_off() {
    let mut stream = connect(server());
    trickle(&mut stream, &slow_head(), Duration::from_millis(50));
}

#[test]
fn a_trickled_second_request_on_a_kept_alive_connection_is_cut_off() {
    // actix-http bounds only the first request's head; this is the gap stq closes.
    let mut stream = connect(server());
    stream.write_all(HEALTH).unwrap();
    read_health_response(&mut stream);
    stream.write_all(HEALTH).unwrap();
    read_health_response(&mut stream);
    trickle(&mut stream, &slow_head(), Duration::from_millis(50));
}

#[test]
fn a_prompt_client_keeps_its_connection_across_requests() {
    // Requests spaced under the timeout, each sent whole, are all answered on one
    // connection, for longer than the timeout in all.
    let mut stream = connect(server());
    for _ in 0..4 {
        stream.write_all(HEALTH).unwrap();
        read_health_response(&mut stream);
        thread::sleep(Duration::from_millis(400));
    }
}

// --- Authorization -------------------------------------------------------------------

fn raw_exchange(server: &Server, head: &str) -> (u16, Value) {
    let mut stream = connect(server);
    stream.write_all(head.as_bytes()).unwrap();
    let response = read_until_closed(&mut stream);
    let text = String::from_utf8(response).unwrap();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    (
        status_of(text.as_bytes()),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

#[test]
fn two_authorization_headers_are_an_invalid_request() {
    for (first, second) in [(OPS, OPS), (OPS, "no-such-token"), ("", LINE)] {
        let head = format!(
            "GET /units?{WINDOW} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
             Authorization: Bearer {first}\r\nAuthorization: Bearer {second}\r\n\r\n"
        );
        let (status, body) = raw_exchange(server(), &head);
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["code"], "invalid_request");
        assert_eq!(body["error"]["details"], Value::Null);
    }
    // Path and method come first.
    let head = format!(
        "DELETE /units HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
         Authorization: Bearer {OPS}\r\nAuthorization: Bearer {OPS}\r\n\r\n"
    );
    assert_eq!(raw_exchange(server(), &head).0, 405);
}

#[test]
fn a_token_in_the_url_is_never_read() {
    let query = format!("/units?{WINDOW}&access_token={OPS}");
    let refused = server().get(&query, None);
    refused.error(401, "unauthorized");
    assert_eq!(
        refused.header("www-authenticate"),
        Some(r#"Bearer realm="stq""#),
        "no token was presented"
    );
    let details = server()
        .get(&query, Some(OPS))
        .error(400, "unknown_parameter");
    assert_eq!(details, json!({"parameter": "access_token"}));
}

#[test]
fn tokens_never_reach_the_log() {
    let fixture = Fixture::main();
    // The access lines are where a careless server would write a token.
    let server = Server::start(&fixture, &["--log-format", "json", "--access-log"]);
    let secret = "tok-ops-0001";
    assert_eq!(secret, OPS);
    server.get(&format!("/units?{WINDOW}&access_token={secret}"), None);
    server.get(&format!("/units?{WINDOW}&access_token={secret}"), Some(OPS));
    server.get(&format!("/units?{WINDOW}"), Some(OPS));
    server.get(&format!("/units?{WINDOW}"), Some("tok-wrong-0001"));
    server.get(&format!("/units?from={secret}"), Some(OPS));
    server.wait_for_log("\"status\":400", 1);
    let log = server.log().join("\n");
    assert!(!log.contains(secret), "{log}");
    assert!(!log.contains("tok-wrong-0001"), "{log}");
}

/// Access lines cost a tenth of the CPU at full load, so they are opt-in: without
/// `--access-log` a request leaves none; with it, exactly one.
#[test]
fn issue_10_access_lines_only_with_access_log() {
    let fixture = Fixture::main();
    for (extra, expected) in [(&[][..], 0), (&["--access-log"][..], 1)] {
        let server = Server::start(&fixture, extra);
        let id = format!("access-{expected}");
        let response = server.request_as(
            "GET",
            &format!("/units?{WINDOW}"),
            Some(OPS),
            &[("X-Request-Id", &id)],
        );
        assert_eq!(response.status, 200);
        // A line logged after the request's own: once it is in the log, an access
        // line of the request would be too.
        server.signal("HUP");
        server.wait_for_log("reloaded: generation 2", 1);
        let needle = format!("request_id={id}");
        assert_eq!(server.log_count(&needle), expected, "{needle}");
    }
}

/// An access line names who the request's token names (its tokens file entry),
/// for a query and a stream alike, and no one for a refused token: the handler
/// tells the middleware through the request's one extension.
#[test]
fn access_lines_name_the_tokens_holder_of_a_query_and_a_stream() {
    let fixture = Fixture::main();
    let server = Server::start(&fixture, &["--access-log"]);
    let asked = |id: &str, token: &str| {
        server
            .request_as(
                "GET",
                &format!("/units?{WINDOW}"),
                Some(token),
                &[("X-Request-Id", id)],
            )
            .status
    };
    assert_eq!(asked("holder-query", LINE), 200);
    assert_eq!(asked("holder-refused", "tok-wrong-0001"), 401);
    let bearer = format!("Bearer {ST03}");
    let _stream = sse::EventStream::open(
        &server.url("/units/stream?from=2024-03-01T00:00:00Z"),
        &[
            ("Authorization", &bearer),
            ("X-Request-Id", "holder-stream"),
        ],
    )
    .unwrap_or_else(|response| panic!("the stream did not open: {}", response.context()));
    for (id, holder) in [
        ("holder-query", "line"),
        ("holder-refused", ""),
        ("holder-stream", "st03"),
    ] {
        let needle = format!("request_id={id}");
        server.wait_for_log(&needle, 1);
        let line = server.log().into_iter().find(|line| line.contains(&needle));
        let line = line.expect("the access line");
        assert!(line.contains(&format!("token=\"{holder}\"")), "{line}");
    }
}

/// A fixture whose station ST-01 answers [`BIG_ANSWER`] with 60,000 records of about
/// 520 bytes: about 31 MB, far more than the socket buffers hold.
fn big_answer_fixture() -> Fixture {
    let padding = "x".repeat(400);
    let mut units = String::new();
    for number in 0..60_000 {
        units.push_str(&format!(
            r#"{{"station_id":"ST-01","unit_serial":"SN-{number}","time_created":"2024-03-10T10:{:02}:{:02}Z","direction":"output","mode":"{padding}"}}"#,
            number / 1000 % 60,
            number % 60
        ));
        units.push('\n');
    }
    Fixture::from_files(&[FileSpec::plain("big.units.jsonl", units)])
}

/// Sends a request for the big answer on a new connection, and reads nothing.
fn ask_for_the_big_answer(server: &Server) -> TcpStream {
    let request = format!(
        "GET /units?{WINDOW} HTTP/1.1\r\nHost: stq\r\nAuthorization: Bearer {OPS}\r\n\
         Connection: close\r\n\r\n"
    );
    let address = server.url("").trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&address).expect("connect");
    stream.write_all(request.as_bytes()).expect("send");
    stream
}

/// Waits for the answer on `stream` to start, and checks that it is a 200: its first
/// bytes are here, the rest waits on the reader.
fn the_answer_starts_with_200(stream: &mut TcpStream) {
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).expect("the answer starts");
    assert_eq!(&head, b"HTTP/1.1 200", "{}", String::from_utf8_lossy(&head));
}

/// Reads the rest of the big answer, whose status line has been read, and checks
/// that every byte arrives.
fn the_whole_big_answer_arrives(stream: &mut TcpStream) {
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).ok();
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
    let length: usize = head
        .lines()
        .find_map(|line| {
            line.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(str::to_owned)
        })
        .expect("a content length")
        .parse()
        .unwrap();
    assert_eq!(body.len(), length, "the whole body arrives");
    assert_eq!(body.matches("\"station_id\":\"ST-01\"").count(), 60_000);
}

/// Issue 10: a query holds its slot while it is computed, not while its answer is
/// written. With one slot, two clients that ask for answers far larger than the
/// socket buffers and do not read them leave the slot free: a third client is
/// answered 200, not 503 `overloaded`; and the slow readers then get every byte.
#[test]
fn issue_10_slow_readers_of_large_answers_hold_no_query_slot() {
    let fixture = big_answer_fixture();
    let server = Server::start(&fixture, &["--max-concurrent-queries", "1"]);
    let mut slow_readers: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut stream = ask_for_the_big_answer(&server);
            the_answer_starts_with_200(&mut stream);
            stream
        })
        .collect();

    let other = server.get(&format!("/units?{WINDOW}&station_ids=ST-02"), Some(OPS));
    assert_eq!(other.status, 200, "{}", other.body);

    for stream in &mut slow_readers {
        the_whole_big_answer_arrives(stream);
    }
}

/// Issue 10: the cap counts stretches of computing, and on a thread per core at most
/// one per worker computes at once. So with as many slots as workers, slow readers
/// that outnumber the slots, asking for large answers all at once and reading none,
/// are all answered 200, none 503 `overloaded`, however long their answers take to
/// assemble; meanwhile other clients are answered 200 too. (A cap counting the
/// queries in flight turns some of them away: five queries, two slots.)
#[test]
fn issue_10_slow_readers_outnumbering_the_slots_starve_no_one() {
    let fixture = big_answer_fixture();
    let server = Server::start(
        &fixture,
        &[
            "--workers",
            "2",
            "--max-concurrent-queries",
            "2",
            // The first answers stay unread while the last are assembled.
            "--client-timeout",
            "10m",
        ],
    );
    let mut slow_readers: Vec<TcpStream> =
        (0..5).map(|_| ask_for_the_big_answer(&server)).collect();
    for stream in &mut slow_readers {
        the_answer_starts_with_200(stream);
    }

    // Queries that scan the same station as the slow readers, one a page of the
    // records, one a summary of all of them.
    for path in [
        format!("/units?{WINDOW}&limit=5"),
        format!("/units/summary?{WINDOW}"),
    ] {
        let other = server.get(&path, Some(OPS));
        assert_eq!(other.status, 200, "{path}: {}", other.body);
    }

    for stream in &mut slow_readers {
        the_whole_big_answer_arrives(stream);
    }
}
