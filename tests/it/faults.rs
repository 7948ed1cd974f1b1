//! Faults and overload (issue 5; CONTRACT sections 7 and 9), through the real
//! binary built with `fault-injection`: a request asks for a fault with the header
//! `X-Stq-Fault`, which no other build reads.
//!
//! - A panic in a handler or a shard, and a shard actor that dies, give 500
//!   `internal_error` for that request only, logged with its request id; the server
//!   goes on serving, a dead shard comes back with its data, and the restart is
//!   counted in `stq_shard_restarts_total`.
//! - A query longer than `--request-timeout` gets 503 `timeout`, and its connection
//!   stays usable.
//! - Beyond `--max-concurrent-queries` a request waits up to 100 ms for a slot, then
//!   gets 503 `overloaded` with `Retry-After: 1`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{json, Value};

/// The whole fixture, one page of everything: a query every shard takes part in.
fn everything() -> String {
    format!("/units?{WINDOW}&direction=input,output&limit=100000")
}

fn with_fault(server: &Server, path: &str, fault: &str, request_id: &str) -> Response {
    server.request_as(
        "GET",
        path,
        Some(OPS),
        &[("X-Stq-Fault", fault), ("X-Request-Id", request_id)],
    )
}

fn assert_internal_error(response: &Response, request_id: &str) {
    let details = response.error(500, "internal_error");
    assert_eq!(details, json!({ "request_id": request_id }));
    assert_eq!(
        response.json()["error"]["message"],
        "internal error",
        "nothing internal leaks"
    );
}

/// The admin listener's `stq_shard_restarts_total`.
fn shard_restarts(server: &Server) -> f64 {
    server.admin_value("stq_shard_restarts_total")
}

#[test]
fn a_panicking_handler_fails_only_its_own_request() {
    let fixture = Fixture::main();
    let server = Server::start(&fixture, &[]);
    let before = server.get(&everything(), Some(OPS)).ok();

    let response = with_fault(&server, &everything(), "handler-panic", "panic-1");
    assert_internal_error(&response, "panic-1");
    server.wait_for_log("request_id=panic-1", 1);
    assert!(
        server
            .log()
            .iter()
            .any(|line| line.contains("panicked at") && line.contains("the handler panics")),
        "the panic itself is logged"
    );

    // Same worker threads, same data: nothing was lost.
    for _ in 0..8 {
        assert_eq!(server.get(&everything(), Some(OPS)).ok().data, before.data);
    }
}

#[test]
fn a_shard_that_panics_keeps_running_with_its_data() {
    let fixture = Fixture::main();
    let server = Server::start(&fixture, &["--shards", "3"]);
    let before = server.get(&everything(), Some(OPS)).ok();

    let response = with_fault(&server, &everything(), "shard-panic", "panic-2");
    assert_internal_error(&response, "panic-2");
    server.wait_for_log("request_id=panic-2", 1);

    assert_eq!(server.get(&everything(), Some(OPS)).ok().data, before.data);
    assert_eq!(
        shard_restarts(&server),
        0.0,
        "a caught panic kills no actor"
    );
}

#[test]
fn a_shard_that_dies_is_restarted_with_its_data() {
    let fixture = Fixture::main();
    let server = Server::start(&fixture, &["--shards", "3"]);
    let before = server.get(&everything(), Some(OPS)).ok();
    let metrics_before = server.get(&format!("/metrics?{WINDOW}"), Some(OPS));

    let response = with_fault(&server, &everything(), "shard-death", "death-1");
    assert_internal_error(&response, "death-1");
    server.wait_for_log("request_id=death-1", 1);
    server.wait_for_log("shard actor died; started a new one with its data", 1);

    // Every shard took part in the query, and every one died: each comes back.
    assert_eq!(server.get(&everything(), Some(OPS)).ok().data, before.data);
    let metrics_after = server.get(&format!("/metrics?{WINDOW}"), Some(OPS));
    assert_eq!(metrics_after.status, metrics_before.status);
    assert_eq!(metrics_after.json()["data"], metrics_before.json()["data"]);
    assert_eq!(shard_restarts(&server), 3.0);

    // A reload after the restart reaches the new actors.
    let generation = server.generation();
    server.signal("HUP");
    server.wait_for_generation_after(generation);
    assert_eq!(server.get(&everything(), Some(OPS)).ok().data, before.data);
}

/// One HTTP/1.1 request on an open connection; the response's status and body.
fn exchange(
    reader: &mut BufReader<TcpStream>,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut request =
        format!("GET {path} HTTP/1.1\r\nHost: stq\r\nAuthorization: Bearer {OPS}\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    reader.get_mut().write_all(request.as_bytes()).unwrap();

    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not a status line: {status_line:?}"));
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        assert!(
            !lower.starts_with("connection: close"),
            "the server means to close the connection: {line:?}"
        );
        if let Some(value) = lower.strip_prefix("content-length:") {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    (status, String::from_utf8(body).unwrap())
}

#[test]
fn a_query_over_the_timeout_gets_503_and_its_connection_stays_usable() {
    let fixture = Fixture::main();
    let server = Server::start(&fixture, &["--request-timeout", "300ms"]);
    let stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    // The query is delayed ten minutes; the read waits one. So the 503 below can only
    // be the timeout's, answered while the query was still delayed.
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut connection = BufReader::new(stream);
    let path = format!("/units?{WINDOW}&limit=5");

    let (status, body) = exchange(&mut connection, &path, &[("X-Stq-Fault", "delay=600000")]);
    assert_eq!(status, 503, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        body,
        json!({"error": {
            "code": "timeout",
            "message": "the query took longer than 300ms; narrow the window or the filters",
            "details": {"request_timeout": "300ms"},
        }})
    );

    // The same connection answers the next query.
    let (status, body) = exchange(&mut connection, &path, &[]);
    assert_eq!(status, 200, "{body}");
    let expected = server.get(&path, Some(OPS)).ok();
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["data"],
        json!(expected.data)
    );
}

#[test]
fn beyond_the_concurrency_cap_a_request_waits_briefly_then_is_turned_away() {
    let fixture = Fixture::main();
    let server = Server::start(&fixture, &["--max-concurrent-queries", "1"]);
    let path = format!("/units?{WINDOW}&limit=5");

    thread::scope(|scope| {
        // Holds the only slot for five seconds. A refusal can only come while it
        // does: once it is free, a request gets it.
        let slow = scope.spawn(|| with_fault(&server, &path, "delay=5000", "slow"));
        wait_until_the_slot_is_taken(&server, &path);
        let refused = server.get(&path, Some(OPS));
        assert_eq!(refused.error(503, "overloaded"), Value::Null);
        assert_eq!(refused.header("retry-after"), Some("1"));
        assert_eq!(slow.join().unwrap().status, 200);
    });

    // A request that finds the slot taken for less than 100 ms waits and is served.
    thread::scope(|scope| {
        let brief = scope.spawn(|| with_fault(&server, &path, "delay=30", "brief"));
        let served = server.get(&path, Some(OPS));
        assert_eq!(served.status, 200, "{}", served.context());
        assert_eq!(brief.join().unwrap().status, 200);
    });

    // Refusals cost no slot: what cannot be a query never waits for one.
    thread::scope(|scope| {
        let slow = scope.spawn(|| with_fault(&server, &path, "delay=5000", "slow-2"));
        wait_until_the_slot_is_taken(&server, &path);
        server
            .get(&format!("{path}&nope=1"), Some(OPS))
            .error(400, "unknown_parameter");
        server.get(&path, None).error(401, "unauthorized");
        assert_eq!(slow.join().unwrap().status, 200);
    });
}

/// Waits until the only slot is taken: a probe is refused `overloaded`. A refused
/// probe takes no slot.
fn wait_until_the_slot_is_taken(server: &Server, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.get(path, Some(OPS)).status != 503 {
        assert!(
            Instant::now() < deadline,
            "the slow request never took its slot"
        );
        thread::sleep(Duration::from_millis(5));
    }
}
