//! CONTRACT section 8, operations: HTTP caching, compression and CORS.
//!
//! - Caching: every response carries `Cache-Control: private, no-cache` and
//!   `Vary: Authorization, Accept-Encoding, Accept`; a successful answer carries a weak
//!   `ETag` that depends on the generation, the normalized query (window resolved)
//!   and the token's station scope, and nothing else; `If-None-Match` with a
//!   matching tag is a 304 without a body, but only once every error is ruled out.
//! - Compression: `gzip` and `br` by `Accept-Encoding`; the decoded body is the
//!   same JSON as the plain one.
//! - CORS: `--cors-origin` lists the origins whose preflight is a 204 (no token
//!   needed) and whose requests are answered with `Access-Control-Allow-Origin`;
//!   an unlisted origin gets no `Access-Control-*` header at all, and its preflight,
//!   like any other `OPTIONS`, is a 405.
//!
//! Most tests share one server of default flags (`common::server()`) or one with
//! two CORS origins; tests that need other flags, other data or a SIGHUP start
//! their own (`Server::signal` reaches the server itself, not its shell wrapper).
//! `ureq` is built without its decoders, so compressed bodies arrive as sent and
//! are decoded here.

use std::io::Read;
use std::sync::OnceLock;
use std::thread;
use std::time::Duration;

use crate::common::*;
use serde_json::Value;

/// The two origins of the CORS server.
const ORIGIN: &str = "https://grafana.example.com";
const SECOND_ORIGIN: &str = "http://localhost:3000";
/// Origins that are not listed (some differ from a listed one only slightly).
const UNLISTED_ORIGINS: [&str; 4] = [
    "https://evil.example.net",
    "http://grafana.example.com",
    "https://grafana.example.com:8443",
    "https://dashboards.grafana.example.com",
];

const CACHE_CONTROL: &str = "private, no-cache";
const VARY: &str = "Authorization, Accept-Encoding, Accept";

/// The ST-01/ST-02 records of the 2024 window of both directions and two unit
/// types, three to a page: six records match, so page 1 has a next page.
const PAGED: &str = "/units?from=2024-03-01T00:00:00Z&to=2024-04-01T00:00:00Z\
                     &station_ids=ST-01,ST-02&type=Cable,PCB&direction=input,output&limit=3";

// ---------------------------------------------------------------------------
// Servers
// ---------------------------------------------------------------------------

/// The main fixture served with `--cors-origin ORIGIN --cors-origin SECOND_ORIGIN`.
fn cors_server() -> &'static Server {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    &SHARED
        .get_or_init(|| Shared::start(&["--cors-origin", ORIGIN, "--cors-origin", SECOND_ORIGIN]))
        .server
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// `GET` as `token` with extra headers.
fn get_with(
    server: &Server,
    path_and_query: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
) -> Response {
    server.request_as("GET", path_and_query, token, headers)
}

/// Sends SIGHUP to the server itself and waits until `/readyz` shows the next
/// generation.
#[track_caller]
fn reload(server: &Server) {
    let before = server.generation();
    server.signal("HUP");
    server.wait_for_generation_after(before);
    assert_eq!(
        server.generation(),
        before + 1,
        "one SIGHUP, one generation"
    );
}

/// The one `ETag` of a response, which must be weak: `W/"..."`.
#[track_caller]
fn entity_tag(response: &Response) -> String {
    let tags = response.header_all("etag");
    assert_eq!(
        tags.len(),
        1,
        "{}: ETag headers {tags:?}",
        response.context()
    );
    let tag = tags[0];
    assert!(
        tag.len() > 4 && tag.starts_with("W/\"") && tag.ends_with('"'),
        "{}: ETag {tag:?} is not a weak tag W/\"...\"",
        response.context()
    );
    tag.to_string()
}

/// `GET` as `token`, expecting a 200 envelope: its records and its tag.
#[track_caller]
fn tagged(server: &Server, path_and_query: &str, token: &str) -> (Vec<Value>, String) {
    let response = server.get(path_and_query, Some(token));
    let tag = entity_tag(&response);
    (response.ok().data, tag)
}

/// The tag without its weak prefix: `"..."`.
fn strong_form(tag: &str) -> &str {
    tag.strip_prefix("W/").expect("a weak tag")
}

/// `path` with `&cursor=` the next page's cursor of `envelope`.
fn next_page(path: &str, envelope: &Envelope) -> String {
    let cursor = envelope.cursor().expect("the page has a next_cursor");
    format!("{path}&cursor={}", percent_encode(&cursor))
}

/// Exactly one `Cache-Control` and one `Vary` header, with the contract's values.
#[track_caller]
fn assert_cache_headers(response: &Response) {
    assert_eq!(
        response.header_all("cache-control"),
        [CACHE_CONTROL],
        "{}: Cache-Control",
        response.context()
    );
    assert_eq!(
        response.header_all("vary"),
        [VARY],
        "{}: Vary",
        response.context()
    );
}

/// A 304 for `tag`: no body, the tag, a request id and the cache headers.
#[track_caller]
fn assert_not_modified(response: &Response, tag: &str) {
    assert_eq!(response.status, 304, "{}", response.context());
    assert!(
        response.body.is_empty(),
        "{}: a 304 has no body",
        response.context()
    );
    assert_eq!(entity_tag(response), tag, "{}", response.context());
    response.request_id();
    assert_cache_headers(response);
}

/// The names of the `Access-Control-*` headers of a response.
fn access_control_headers(response: &Response) -> Vec<&str> {
    response
        .headers
        .iter()
        .map(|(name, _)| name.as_str())
        .filter(|name| name.starts_with("access-control-"))
        .collect()
}

#[track_caller]
fn assert_no_access_control_headers(response: &Response) {
    let names = access_control_headers(response);
    assert!(
        names.is_empty(),
        "{}: unexpected CORS headers {names:?}",
        response.context()
    );
}

/// The items of a comma-separated header value, trimmed and upper-cased.
fn header_items(value: Option<&str>) -> Vec<String> {
    value
        .unwrap_or("")
        .split(',')
        .map(|item| item.trim().to_ascii_uppercase())
        .filter(|item| !item.is_empty())
        .collect()
}

/// `OPTIONS path` with an optional `Origin` and `Access-Control-Request-Method`,
/// asking for the `authorization` header.
fn preflight(
    server: &Server,
    path: &str,
    origin: Option<&str>,
    requested_method: Option<&str>,
) -> Response {
    let mut headers = vec![("Access-Control-Request-Headers", "authorization")];
    if let Some(origin) = origin {
        headers.push(("Origin", origin));
    }
    if let Some(method) = requested_method {
        headers.push(("Access-Control-Request-Method", method));
    }
    server.request("OPTIONS", path, &headers)
}

/// The 405 of an `OPTIONS` that is not an allowed preflight: the contract's error
/// body and `Allow: GET, HEAD`.
#[track_caller]
fn assert_options_refused(response: &Response) {
    response.error(405, "method_not_allowed");
    assert_eq!(
        response.header_all("allow"),
        ["GET, HEAD"],
        "{}: Allow",
        response.context()
    );
    assert_cache_headers(response);
}

/// A refused `OPTIONS` that also carries no CORS header.
#[track_caller]
fn assert_options_refused_without_cors(response: &Response) {
    assert_options_refused(response);
    assert_no_access_control_headers(response);
}

/// A response as sent (`bytes`, possibly compressed) and the same response with
/// its body decoded by its `Content-Encoding` (`decoded`).
struct Encoded {
    encoding: Option<String>,
    bytes: Vec<u8>,
    decoded: Response,
}

/// `GET` as `ops` with `Accept-Encoding: accept` (none when `None`) and extra headers.
fn get_encoded(
    server: &Server,
    path_and_query: &str,
    accept: Option<&str>,
    headers: &[(&str, &str)],
) -> Encoded {
    let url = server.url(path_and_query);
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .redirects(0)
        .build();
    let mut request = agent
        .get(&url)
        .set("Authorization", &format!("Bearer {OPS}"));
    if let Some(accept) = accept {
        request = request.set("Accept-Encoding", accept);
    }
    for (name, value) in headers {
        request = request.set(name, value);
    }
    let response = match request.call() {
        Ok(response) => response,
        Err(ureq::Error::Status(_, response)) => response,
        Err(error) => panic!("GET {url}: transport error: {error}"),
    };
    let status = response.status();
    let mut received = Vec::new();
    let mut names = response.headers_names();
    names.sort();
    names.dedup();
    for name in names {
        for value in response.all(&name) {
            received.push((name.clone(), value.to_string()));
        }
    }
    let encoding = response.header("content-encoding").map(str::to_string);
    let mut bytes = Vec::new();
    response
        .into_reader()
        .read_to_end(&mut bytes)
        .unwrap_or_else(|error| panic!("GET {url}: body: {error}"));
    let text = decode(encoding.as_deref(), &bytes)
        .unwrap_or_else(|error| panic!("GET {url}: body not {encoding:?}: {error}"));
    let decoded = Response {
        method: "GET".into(),
        url,
        status,
        headers: received,
        body: String::from_utf8(text).expect("a decoded body is UTF-8"),
    };
    Encoded {
        encoding,
        bytes,
        decoded,
    }
}

/// The body decoded by its content coding.
fn decode(encoding: Option<&str>, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    match encoding {
        None | Some("identity") => out.extend_from_slice(bytes),
        Some("gzip") => {
            flate2::read::GzDecoder::new(bytes).read_to_end(&mut out)?;
        }
        Some("br") => {
            brotli::Decompressor::new(bytes, 4096).read_to_end(&mut out)?;
        }
        Some(other) => panic!("unexpected Content-Encoding {other:?}"),
    }
    Ok(out)
}

/// A body in the contract's error shape, whatever its status and code.
#[track_caller]
fn assert_error_body(response: &Response) {
    response.assert_json_content_type();
    response.request_id();
    let body = response.json();
    let keys = |value: &Value| -> Vec<String> {
        value
            .as_object()
            .map(|object| object.keys().cloned().collect())
            .unwrap_or_default()
    };
    assert_eq!(keys(&body), ["error"], "{}", response.context());
    assert_eq!(
        keys(&body["error"]),
        ["code", "details", "message"],
        "{}",
        response.context()
    );
    assert!(
        body["error"]["code"]
            .as_str()
            .is_some_and(|code| !code.is_empty()),
        "{}: code",
        response.context()
    );
}

/// `YYYY-...Z` as Unix epoch milliseconds (the `from`/`to` form Grafana sends).
fn epoch_milliseconds(written: &str) -> String {
    (instant(written) / 1_000_000).to_string()
}

// ---------------------------------------------------------------------------
// 1. Cache-Control and Vary on every response
// ---------------------------------------------------------------------------

#[test]
fn every_response_carries_cache_control_and_vary() {
    let server = server();
    let (_, tag) = tagged(server, &units_all(), OPS);
    let responses = [
        server.get(&units_all(), Some(OPS)),
        server.get(&metrics_all(), Some(OPS)),
        server.request_as("HEAD", &units_all(), Some(OPS), &[]),
        server.get(&units_all(), None),
        server.get(&format!("{}&limit=0", units_all()), Some(OPS)),
        server.get(&format!("{}&station_ids=ST-03", units_all()), Some(LINE)),
        server.get("/no-such-path", Some(OPS)),
        server.request_as("POST", &units_all(), Some(OPS), &[]),
        server.request("OPTIONS", "/units", &[]),
        server.get("/healthz", None),
        server.get("/readyz", None),
        get_with(server, &units_all(), Some(OPS), &[("If-None-Match", &tag)]),
        get_encoded(server, &units_all(), Some("gzip"), &[]).decoded,
        get_encoded(server, &units_all(), Some("br"), &[]).decoded,
        preflight(cors_server(), "/units", Some(ORIGIN), Some("GET")),
        preflight(
            cors_server(),
            "/units",
            Some(UNLISTED_ORIGINS[0]),
            Some("GET"),
        ),
        get_with(
            cors_server(),
            &units_all(),
            Some(OPS),
            &[("Origin", ORIGIN)],
        ),
    ];
    let statuses: Vec<u16> = responses.iter().map(|response| response.status).collect();
    assert_eq!(
        statuses,
        [200, 200, 200, 401, 400, 403, 404, 405, 405, 200, 200, 304, 200, 200, 204, 405, 200]
    );
    for response in &responses {
        assert_cache_headers(response);
    }
}

// ---------------------------------------------------------------------------
// 2. The ETag: what it depends on
// ---------------------------------------------------------------------------

#[test]
fn a_successful_answer_carries_a_weak_etag_and_a_repeat_has_the_same() {
    let server = server();
    for path in [units_all(), metrics_all(), PAGED.to_string()] {
        let (_, first) = tagged(server, &path, OPS);
        let (_, second) = tagged(server, &path, OPS);
        assert_eq!(first, second, "{path}: a repeat of the same query");
        let head = server.request_as("HEAD", &path, Some(OPS), &[]);
        assert_eq!(head.status, 200, "{}", head.context());
        assert_eq!(
            entity_tag(&head),
            first,
            "{path}: HEAD is answered like GET"
        );
    }
}

#[test]
fn equal_normalized_queries_share_a_tag() {
    let server = server();
    let from_ms = epoch_milliseconds(WINDOW_FROM);
    let to_ms = epoch_milliseconds(WINDOW_TO);
    let paged = |parameters: &[&str]| format!("/units?{}", parameters.join("&"));
    let window = "from=2024-03-01T00:00:00Z&to=2024-04-01T00:00:00Z";
    let rest = "station_ids=ST-01,ST-02&type=Cable,PCB&direction=input,output&limit=3";
    let groups: Vec<(String, Vec<String>)> = vec![
        (
            PAGED.to_string(),
            vec![
                // parameter order
                "/units?limit=3&direction=input,output&type=Cable,PCB\
                 &station_ids=ST-01,ST-02&to=2024-04-01T00:00:00Z&from=2024-03-01T00:00:00Z"
                    .to_string(),
                // the same window with offsets, the + encoded and not
                paged(&[
                    "from=2024-03-01T01:00:00%2B01:00",
                    "to=2024-03-31T19:00:00-05:00",
                    rest,
                ]),
                paged(&[
                    "from=2024-03-01T01:00:00+01:00",
                    "to=2024-04-01T00:00:00-00:00",
                    rest,
                ]),
                // as epoch milliseconds
                paged(&[&format!("from={from_ms}&to={to_ms}"), rest]),
                // lower-case t and z, fractions of zero
                paged(&[
                    "from=2024-03-01t00:00:00.000000000z&to=2024-04-01T00:00:00.0Z",
                    rest,
                ]),
                // station lists reordered, repeated, spaced, encoded commas
                paged(&[
                    window,
                    "station_ids=ST-02,ST-01,ST-02",
                    "type=Cable,PCB&direction=input,output&limit=3",
                ]),
                paged(&[
                    window,
                    "station_ids=%20ST-02%20,,ST-01%2CST-01",
                    "type=Cable,PCB&direction=input,output&limit=3",
                ]),
                // type and direction repeated instead of comma-separated, duplicated
                paged(&[
                    window,
                    "station_ids=ST-01,ST-02",
                    "type=PCB&type=Cable,PCB&direction=output&direction=input,output",
                    "limit=3",
                ]),
                // leading zeros
                paged(&[
                    window,
                    "station_ids=ST-01,ST-02&type=Cable,PCB&direction=input,output",
                    "limit=003",
                ]),
            ],
        ),
        (
            format!("/units?{WINDOW}"),
            vec![
                // the default direction, given or as an empty list; an empty station list
                format!("/units?{WINDOW}&direction=output"),
                format!("/units?{WINDOW}&direction="),
                format!("/units?{WINDOW}&direction=,output,&direction=output"),
                format!("/units?{WINDOW}&station_ids="),
            ],
        ),
        (
            format!("/metrics?{WINDOW}&names=current,voltage"),
            vec![
                format!("/metrics?{WINDOW}&names=voltage&names=current,voltage"),
                format!("/metrics?{WINDOW}&names=%20voltage,,current"),
            ],
        ),
    ];
    for (base, variants) in groups {
        let (base_data, base_tag) = tagged(server, &base, OPS);
        assert!(!base_data.is_empty(), "{base}: the fixture has records");
        for variant in variants {
            let (data, tag) = tagged(server, &variant, OPS);
            assert_records(&data, &base_data, &format!("{variant} vs {base}"));
            assert_eq!(tag, base_tag, "{variant} is the same query as {base}");
            let repeat = get_with(server, &variant, Some(OPS), &[("If-None-Match", &base_tag)]);
            assert_not_modified(&repeat, &base_tag);
        }
    }
}

#[test]
fn issue_11_tags_are_equal_exactly_when_answers_are() {
    let server = server();
    let page_one = server.ok(PAGED);
    let window_and_stations = format!("{WINDOW}&station_ids=ST-01,ST-02");
    let paths = [
        PAGED.to_string(),
        next_page(PAGED, &page_one),
        PAGED.replace("limit=3", "limit=4"),
        PAGED.replace("&limit=3", ""),
        PAGED.replace("station_ids=ST-01,ST-02", "station_ids=ST-01"),
        PAGED.replace("type=Cable,PCB", "type=PCB"),
        PAGED.replace("direction=input,output", "direction=output"),
        PAGED.replace("T00:00:00Z&station", "T00:00:00.000000001Z&station"),
        PAGED.replace(
            "from=2024-03-01T00:00:00Z",
            "from=2024-02-29T23:59:59.999999999Z",
        ),
        format!("{PAGED}&serial_number=SN-001"),
        format!("/units?{window_and_stations}"),
        format!("/metrics?{window_and_stations}"),
        format!("/units?{WINDOW}&station_ids=NOPE-1"),
        format!("/units?{WINDOW}&station_ids=NOPE-2"),
    ];
    // An answer: its endpoint (units or not), its records, whether a next page follows.
    type Answer = (bool, Vec<Value>, bool);
    let answers: Vec<(String, Answer, String)> = paths
        .iter()
        .map(|path| {
            let response = server.get(path, Some(OPS));
            let tag = entity_tag(&response);
            let envelope = response.ok();
            let answer = (
                path.starts_with("/units"),
                envelope.data.clone(),
                envelope.cursor().is_some(),
            );
            (path.clone(), answer, tag)
        })
        .collect();
    for (left_path, left, left_tag) in &answers {
        for (right_path, right, right_tag) in &answers {
            assert_eq!(
                left_tag == right_tag,
                left == right,
                "{left_path} and {right_path}: tags {left_tag} and {right_tag}"
            );
        }
    }
}

#[test]
fn issue_11_tokens_share_a_tag_exactly_when_their_answers_match() {
    let server = server();
    // Two "*" tokens.
    let (ops_data, ops_tag) = tagged(server, PAGED, OPS);
    let (second_data, second_tag) = tagged(server, PAGED, OPS2);
    assert_records(&second_data, &ops_data, "two \"*\" tokens");
    assert_eq!(second_tag, ops_tag, "two tokens of scope \"*\"");
    let repeat = get_with(server, PAGED, Some(OPS2), &[("If-None-Match", &ops_tag)]);
    assert_not_modified(&repeat, &ops_tag);

    // "*" and [ST-01, ST-02] see the same records of ST-01: the same answer.
    let path = format!("/units?{WINDOW}&station_ids=ST-01");
    let (ops_data, ops_tag) = tagged(server, &path, OPS);
    let (line_data, line_tag) = tagged(server, &path, LINE);
    assert_records(&line_data, &ops_data, "ST-01 as ops and as line");
    assert_eq!(line_tag, ops_tag, "the same records for two scopes");

    // No station list: each token its own stations, so other answers.
    let path = format!("/units?{WINDOW}");
    let (line_data, line_tag) = tagged(server, &path, LINE);
    let (station_data, station_tag) = tagged(server, &path, ST03);
    assert_ne!(line_data, station_data);
    assert_ne!(line_tag, station_tag, "scopes [ST-01, ST-02] and [ST-03]");
    let other_scope = get_with(server, &path, Some(ST03), &[("If-None-Match", &line_tag)]);
    assert_eq!(other_scope.status, 200, "{}", other_scope.context());
}

#[test]
fn a_station_scope_is_a_set_whatever_the_order_in_the_tokens_file() {
    const FORWARD: &str = "tok-forward-0001";
    const BACKWARD: &str = "tok-backward-0001";
    let fixture = Fixture::main();
    let tokens = serde_json::json!({
        "tokens": [
            {"name": "forward", "sha256": sha256_hex(FORWARD), "stations": ["ST-01", "ST-02"]},
            {"name": "backward", "sha256": sha256_hex(BACKWARD), "stations": ["ST-02", "ST-01"]}
        ]
    });
    std::fs::write(&fixture.tokens, tokens.to_string()).unwrap();
    let server = Server::start(&fixture, &[]);
    let path = format!("/units?{WINDOW}&direction=input,output");
    let (forward_data, forward_tag) = tagged(&server, &path, FORWARD);
    let (backward_data, backward_tag) = tagged(&server, &path, BACKWARD);
    assert_records(&backward_data, &forward_data, "the same two stations");
    assert_eq!(
        backward_tag, forward_tag,
        "[ST-01, ST-02] and [ST-02, ST-01]"
    );
}

#[test]
fn issue_11_a_repeated_default_window_is_not_modified_while_its_records_stay() {
    let server = server();
    // Without from/to the window ends when the request arrives, and moves with the
    // clock; the tag follows the records in it, not the window.
    let path = "/units?station_ids=ST-NOW&direction=input,output";
    let (first_data, first_tag) = tagged(server, path, OPS);
    assert!(
        !first_data.is_empty(),
        "ST-NOW has records in the last 24 h"
    );
    // Lets the clock move the default window: the input, not a wait.
    thread::sleep(Duration::from_millis(5));
    let later = get_with(server, path, Some(OPS), &[("If-None-Match", &first_tag)]);
    assert_not_modified(&later, &first_tag);

    // A cursor pins the window of its walk, so a page's tag holds still.
    let walk = "/units?station_ids=ST-NOW&limit=1";
    let page_two = next_page(walk, &server.ok(walk));
    let (_, page_tag) = tagged(server, &page_two, OPS);
    thread::sleep(Duration::from_millis(5));
    let (_, repeat_tag) = tagged(server, &page_two, OPS);
    assert_eq!(repeat_tag, page_tag, "page 2 of one walk, asked twice");
    let repeat = get_with(
        server,
        &page_two,
        Some(OPS),
        &[("If-None-Match", &page_tag)],
    );
    assert_not_modified(&repeat, &page_tag);
}

// ---------------------------------------------------------------------------
// 3. If-None-Match
// ---------------------------------------------------------------------------

#[test]
fn a_repeat_poll_with_the_tag_is_not_modified() {
    let server = server();
    for path in [units_all(), metrics_all()] {
        let (_, tag) = tagged(server, &path, OPS);
        let poll = get_with(
            server,
            &path,
            Some(OPS),
            &[("If-None-Match", &tag), ("X-Request-Id", "poll-0002")],
        );
        assert_not_modified(&poll, &tag);
        assert_eq!(poll.request_id(), "poll-0002", "{}", poll.context());
        let head = server.request_as("HEAD", &path, Some(OPS), &[("If-None-Match", &tag)]);
        assert_not_modified(&head, &tag);
    }
}

#[test]
fn if_none_match_matches_weakly_in_lists_and_as_a_wildcard() {
    let server = server();
    let (data, tag) = tagged(server, PAGED, OPS);
    let strong = strong_form(&tag);
    let matching = [
        tag.clone(),
        strong.to_string(),
        format!("\"nope\", {tag}"),
        format!("W/\"nope\",{strong}"),
        format!("{tag} , \"nope\""),
        "*".to_string(),
    ];
    for condition in &matching {
        let response = get_with(server, PAGED, Some(OPS), &[("If-None-Match", condition)]);
        assert_not_modified(&response, &tag);
    }

    let (_, other_query_tag) = tagged(server, &PAGED.replace("limit=3", "limit=4"), OPS);
    let not_matching = [
        "W/\"0000000000000000\"".to_string(),
        "\"nope\", W/\"other\"".to_string(),
        other_query_tag,
    ];
    for condition in &not_matching {
        let response = get_with(server, PAGED, Some(OPS), &[("If-None-Match", condition)]);
        assert_eq!(entity_tag(&response), tag, "{}", response.context());
        assert_records(&response.ok().data, &data, condition);
    }
}

#[test]
fn errors_are_decided_before_not_modified() {
    let server = server();
    let (_, tag) = tagged(server, PAGED, OPS);
    let with_tag = [("If-None-Match", tag.as_str())];
    get_with(server, PAGED, None, &with_tag).error(401, "unauthorized");
    get_with(server, PAGED, Some("tok-unknown"), &with_tag).error(401, "unauthorized");
    server
        .request_as("POST", PAGED, Some(OPS), &with_tag)
        .error(405, "method_not_allowed");

    // `*` matches any tag: each of these is still its error.
    let refused = |path: &str, token: Option<&str>, status: u16, code: &str| {
        get_with(server, path, token, &[("If-None-Match", "*")]).error(status, code);
    };
    refused(PAGED, None, 401, "unauthorized");
    refused("/no-such-path", Some(OPS), 404, "not_found");
    let unknown = format!("{PAGED}&station_id=ST-01");
    refused(&unknown, Some(OPS), 400, "unknown_parameter");
    let zero_limit = PAGED.replace("limit=3", "limit=0");
    refused(&zero_limit, Some(OPS), 400, "invalid_parameter");
    let backwards = format!("/units?from={WINDOW_TO}&to={WINDOW_FROM}");
    refused(&backwards, Some(OPS), 400, "invalid_window");
    let bogus_cursor = format!("{PAGED}&cursor=bogus");
    refused(&bogus_cursor, Some(OPS), 400, "invalid_cursor");
    // station_ids given twice: a 400 of the parameters comes before the 403
    let twice = format!("{PAGED}&station_ids=ST-03");
    refused(&twice, Some(LINE), 400, "invalid_parameter");
    let forbidden = format!("/units?{WINDOW}&station_ids=ST-03");
    refused(&forbidden, Some(LINE), 403, "forbidden");
}

#[test]
fn result_too_large_is_decided_before_not_modified() {
    let fixture = Fixture::main();
    let server = Server::start(&fixture, &["--max-records", "3"]);
    let path = units_all();
    server.get(&path, Some(OPS)).error(400, "result_too_large");
    // No 200 was ever sent for this query, so no copy of it can be fresh.
    get_with(&server, &path, Some(OPS), &[("If-None-Match", "*")]).error(400, "result_too_large");
}

#[test]
fn a_reload_that_changes_the_answer_changes_the_tag() {
    let fixture = Fixture::main();
    let server = Server::start(&fixture, &[]);
    let path = units_all();
    let first = get_with(&server, &path, Some(OPS), &[]);
    let first_tag = entity_tag(&first);
    let first_data = first.ok().data;
    assert_not_modified(
        &get_with(&server, &path, Some(OPS), &[("If-None-Match", &first_tag)]),
        &first_tag,
    );

    // The same files, a new generation: the same answer, so the tag holds.
    reload(&server);
    let after = get_with(&server, &path, Some(OPS), &[("If-None-Match", &first_tag)]);
    assert_not_modified(&after, &first_tag);
    let second_tag = first_tag.clone();
    assert_records(
        &server.ok(&path).data,
        &first_data,
        "the same files reloaded",
    );

    // New data: the poll gets it.
    let mut files = main_files(fixture.now);
    let added = FileSpec::plain(
        "added.units.jsonl",
        r#"{"station_id":"ST-01","unit_serial":"SN-ADDED","time_created":"2024-03-20T00:00:00Z","unit_type":"PCB","direction":"input"}"#,
    );
    std::fs::write(fixture.snapshots.join(&added.relative_path), &added.text).unwrap();
    files.push(added);
    reload(&server);
    let changed = get_with(&server, &path, Some(OPS), &[("If-None-Match", &second_tag)]);
    assert_ne!(entity_tag(&changed), second_tag, "generation 3");
    let expected = Fixture::from_files(&files).expect(&Query::units().both());
    assert_records(&changed.ok().data, &expected, "after the new file");
}

#[test]
fn issue_11_a_restarted_server_confirms_a_tag_exactly_when_the_answer_is_the_same() {
    let fixture = Fixture::main();
    let path = units_all();
    let earlier_tag = {
        let server = Server::start(&fixture, &[]);
        tagged(&server, &path, OPS).1
    };
    let server = Server::start(&fixture, &[]);
    let again = get_with(
        &server,
        &path,
        Some(OPS),
        &[("If-None-Match", &earlier_tag)],
    );
    assert_not_modified(&again, &earlier_tag);
    drop(server);

    std::fs::write(
        fixture.snapshots.join("added.units.jsonl"),
        r#"{"station_id":"ST-01","unit_serial":"SN-ADDED","time_created":"2024-03-20T00:00:00Z","unit_type":"PCB","direction":"output"}"#,
    )
    .unwrap();
    let server = Server::start(&fixture, &[]);
    let response = get_with(
        &server,
        &path,
        Some(OPS),
        &[("If-None-Match", &earlier_tag)],
    );
    assert_eq!(
        response.status,
        200,
        "other files, another answer: {}",
        response.context()
    );
    assert!(serials(&response.ok().data).contains(&"SN-ADDED".to_string()));
}

// ---------------------------------------------------------------------------
// 4. Compression
// ---------------------------------------------------------------------------

/// `GET path` plain and with `Accept-Encoding: encoding` (same request id): the
/// encoded body decodes to the same data, message and request id, under the same tag.
fn assert_encoded_like_plain(path: &str, encoding: &str, magic: &[u8]) {
    let server = server();
    let request_id = format!("compare-{encoding}");
    let id_header = [("X-Request-Id", request_id.as_str())];
    let plain = get_encoded(server, path, None, &id_header);
    assert_eq!(plain.encoding, None, "{}", plain.decoded.context());
    let plain_tag = entity_tag(&plain.decoded);
    let plain = plain.decoded.ok();

    let encoded = get_encoded(server, path, Some(encoding), &id_header);
    let context = encoded.decoded.context();
    assert_eq!(encoded.encoding.as_deref(), Some(encoding), "{context}");
    assert!(
        encoded.bytes.starts_with(magic),
        "{context}: the body does not start like {encoding}: {:?}",
        &encoded.bytes[..encoded.bytes.len().min(8)]
    );
    assert_ne!(encoded.bytes, plain.response.body.as_bytes(), "{context}");
    assert_eq!(
        entity_tag(&encoded.decoded),
        plain_tag,
        "{context}: the tag"
    );
    assert_cache_headers(&encoded.decoded);
    let decoded = encoded.decoded.ok();
    assert_records(&decoded.data, &plain.data, &format!("{path} as {encoding}"));
    assert_eq!(decoded.message, plain.message, "{context}");
    assert_eq!(decoded.meta["request_id"], request_id.as_str(), "{context}");
    assert_eq!(plain.meta["request_id"], request_id.as_str(), "{context}");
}

const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];

#[test]
fn a_gzip_body_decodes_to_the_same_json() {
    assert_encoded_like_plain(&units_all(), "gzip", GZIP_MAGIC);
    assert_encoded_like_plain(&metrics_all(), "gzip", GZIP_MAGIC);
}

#[test]
fn a_brotli_body_decodes_to_the_same_json() {
    // Brotli has no magic number.
    assert_encoded_like_plain(&units_all(), "br", &[]);
    assert_encoded_like_plain(&metrics_all(), "br", &[]);
}

#[test]
fn the_coding_follows_accept_encoding() {
    let server = server();
    let cases: [(Option<&str>, Option<&str>); 8] = [
        (None, None),
        (Some("identity"), None),
        (Some("zstd"), None),
        (Some("gzip"), Some("gzip")),
        (Some("br"), Some("br")),
        (Some("gzip;q=0, br"), Some("br")),
        (Some("br;q=0, gzip"), Some("gzip")),
        (Some("br;q=0.5, gzip;q=1.0"), Some("gzip")),
    ];
    for (accept, expected) in cases {
        let response = get_encoded(server, PAGED, accept, &[]);
        assert_eq!(
            response.encoding.as_deref(),
            expected,
            "Accept-Encoding {accept:?}: {}",
            response.decoded.context()
        );
        response.decoded.ok();
    }
    let either = get_encoded(server, PAGED, Some("gzip, br"), &[]);
    assert!(
        matches!(either.encoding.as_deref(), Some("gzip" | "br")),
        "Accept-Encoding gzip, br: {:?}",
        either.encoding
    );
}

#[test]
fn an_encoded_error_decodes_to_the_contract_error_body() {
    let server = server();
    for encoding in ["gzip", "br"] {
        let refused = get_encoded(server, "/units?limit=0", Some(encoding), &[]);
        refused.decoded.error(400, "invalid_parameter");
        assert_cache_headers(&refused.decoded);
    }
}

#[test]
fn no_acceptable_coding_is_still_answered_in_the_contract_shape() {
    // `identity;q=0` refuses the plain body and names no other coding: whatever
    // the answer, it is a contract envelope or the contract's error body.
    let server = server();
    let none_acceptable = get_encoded(server, PAGED, Some("identity;q=0"), &[]).decoded;
    if none_acceptable.status == 200 {
        none_acceptable.ok();
    } else {
        assert_error_body(&none_acceptable);
    }
}

// ---------------------------------------------------------------------------
// 5. CORS
// ---------------------------------------------------------------------------

#[test]
fn a_preflight_from_a_listed_origin_is_allowed_without_a_token() {
    let server = cors_server();
    for origin in [ORIGIN, SECOND_ORIGIN] {
        for path in ["/units", "/metrics"] {
            let response = preflight(server, path, Some(origin), Some("GET"));
            let context = response.context();
            assert_eq!(response.status, 204, "{context}");
            assert!(response.body.is_empty(), "{context}: a 204 has no body");
            assert_eq!(
                response.header_all("access-control-allow-origin"),
                [origin],
                "{context}"
            );
            let methods = header_items(response.header("access-control-allow-methods"));
            assert!(
                methods.contains(&"GET".into()) && methods.contains(&"HEAD".into()),
                "{context}: Access-Control-Allow-Methods {methods:?}"
            );
            assert!(
                methods
                    .iter()
                    .all(|method| method == "GET" || method == "HEAD"),
                "{context}: only GET and HEAD are accepted, allowed {methods:?}"
            );
            let headers = header_items(response.header("access-control-allow-headers"));
            assert!(
                headers.contains(&"AUTHORIZATION".into()),
                "{context}: Access-Control-Allow-Headers {headers:?}"
            );
            response.request_id();
            assert_cache_headers(&response);
        }
    }
    // HEAD is a method a browser may ask for too.
    let head = preflight(server, "/units", Some(ORIGIN), Some("HEAD"));
    assert_eq!(head.status, 204, "{}", head.context());
}

#[test]
fn a_preflight_from_an_unlisted_origin_is_a_405_without_cors_headers() {
    let server = cors_server();
    for origin in UNLISTED_ORIGINS {
        for path in ["/units", "/metrics"] {
            assert_options_refused_without_cors(&preflight(
                server,
                path,
                Some(origin),
                Some("GET"),
            ));
        }
    }
}

#[test]
fn a_preflight_never_allows_another_method() {
    let server = cors_server();
    for method in ["POST", "DELETE", "PUT"] {
        let response = preflight(server, "/units", Some(ORIGIN), Some(method));
        if response.status == 204 {
            let methods = header_items(response.header("access-control-allow-methods"));
            assert!(
                !methods.contains(&method.to_string()),
                "{}: allows {method}",
                response.context()
            );
        } else {
            response.error(405, "method_not_allowed");
        }
    }
}

#[test]
fn an_options_request_that_is_no_preflight_is_a_405() {
    for server in [server(), cors_server()] {
        // Plain, with a token, and with a requested method but no Origin.
        assert_options_refused_without_cors(&server.request("OPTIONS", "/units", &[]));
        let with_token = server.request_as("OPTIONS", "/metrics", Some(OPS), &[]);
        assert_options_refused_without_cors(&with_token);
        assert_options_refused_without_cors(&preflight(server, "/units", None, Some("GET")));
        // An Origin without a requested method: an actual OPTIONS request, which a
        // listed origin may be told it could read.
        assert_options_refused(&server.request("OPTIONS", "/units", &[("Origin", ORIGIN)]));
    }
}

#[test]
fn without_cors_origins_no_origin_is_allowed() {
    let server = server();
    for origin in [ORIGIN, SECOND_ORIGIN, UNLISTED_ORIGINS[0]] {
        assert_options_refused_without_cors(&preflight(
            server,
            "/units",
            Some(origin),
            Some("GET"),
        ));
        let response = get_with(server, &units_all(), Some(OPS), &[("Origin", origin)]);
        assert_no_access_control_headers(&response);
        response.ok();
    }
}

#[test]
fn a_request_from_a_listed_origin_is_allowed_and_from_another_is_answered_plainly() {
    let server = cors_server();
    let path = units_all();
    let expected = server.ok(&path).data;
    for origin in [ORIGIN, SECOND_ORIGIN] {
        let response = get_with(server, &path, Some(OPS), &[("Origin", origin)]);
        assert_eq!(
            response.header_all("access-control-allow-origin"),
            [origin],
            "{}",
            response.context()
        );
        assert_records(&response.ok().data, &expected, origin);
    }
    for origin in UNLISTED_ORIGINS {
        let response = get_with(server, &path, Some(OPS), &[("Origin", origin)]);
        assert_no_access_control_headers(&response);
        assert_records(&response.ok().data, &expected, origin);
    }
}
