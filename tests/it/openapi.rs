//! The OpenAPI document (`src/http/openapi.json`, served at `GET /openapi.json`) against
//! the real server: the document is well formed, every path and operation it lists
//! is answered as it says, and every response the suite can provoke (successes,
//! every 4xx code, the probes) has a status, headers and body the document names for
//! that path, method and status, checked with a JSON Schema validator.
//!
//! The server is started with a small `--max-stations` and `--max-records` so that
//! `too_many_stations` and `result_too_large` are easy to provoke, and with one CORS
//! origin so that the preflight is answered too.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use crate::common::*;
use serde_json::{json, Value};

/// The document as the repository holds it; `GET /openapi.json` must serve it.
const DOCUMENT: &str = include_str!("../../src/http/openapi.json");

const MAX_STATIONS: &str = "2";
const MAX_RECORDS: &str = "5";
/// As long as the fixture's `WINDOW`, so that only a longer one is refused.
const MAX_WINDOW: &str = "31d";
const MAX_QUERY_BYTES: &str = "512";
const CORS_ORIGIN: &str = "https://grafana.example";

/// Every error code of CONTRACT section 7, and its status.
const ERROR_CODES: [(&str, u16); 19] = [
    ("invalid_parameter", 400),
    ("unknown_parameter", 400),
    ("invalid_window", 400),
    ("too_many_stations", 400),
    ("result_too_large", 400),
    ("invalid_cursor", 400),
    ("window_too_large", 400),
    ("invalid_request", 400),
    ("unauthorized", 401),
    ("forbidden", 403),
    ("not_found", 404),
    ("method_not_allowed", 405),
    ("not_acceptable", 406),
    ("uri_too_long", 414),
    ("internal_error", 500),
    ("not_ready", 503),
    ("timeout", 503),
    ("overloaded", 503),
    ("storage_unavailable", 503),
];

/// The codes this file provokes. `internal_error` and `not_ready` cannot be
/// provoked here, and `timeout` and `overloaded` need load or injected faults:
/// `tests/it/faults.rs` checks those against the document; `storage_unavailable`
/// a damaged store (`tests/it/store.rs`).
const PROVOKED_CODES: [&str; 13] = [
    "invalid_parameter",
    "unknown_parameter",
    "invalid_window",
    "too_many_stations",
    "result_too_large",
    "invalid_cursor",
    "window_too_large",
    "invalid_request",
    "unauthorized",
    "forbidden",
    "not_found",
    "method_not_allowed",
    "uri_too_long",
];

/// The operations of a path item an OpenAPI 3.1 document may hold.
const METHODS: [&str; 8] = [
    "get", "head", "options", "post", "put", "patch", "delete", "trace",
];

fn document() -> &'static Value {
    static DOCUMENT_VALUE: OnceLock<Value> = OnceLock::new();
    DOCUMENT_VALUE.get_or_init(|| {
        serde_json::from_str(DOCUMENT)
            .unwrap_or_else(|error| panic!("src/http/openapi.json is not JSON: {error}"))
    })
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        Shared::start(&[
            "--max-stations",
            MAX_STATIONS,
            "--max-records",
            MAX_RECORDS,
            "--max-window",
            MAX_WINDOW,
            "--max-query-bytes",
            MAX_QUERY_BYTES,
            "--cors-origin",
            CORS_ORIGIN,
        ])
    })
}

fn server() -> &'static Server {
    &shared().server
}

// ---------------------------------------------------------------------------
// Reading the document
// ---------------------------------------------------------------------------

/// The value a local reference (`#/a/b`) points at.
fn pointer<'d>(doc: &'d Value, reference: &str) -> Option<&'d Value> {
    doc.pointer(reference.strip_prefix('#')?)
}

/// `value`, or what its `$ref` (chain) points at.
fn resolve<'d>(doc: &'d Value, mut value: &'d Value) -> Result<&'d Value, String> {
    for _ in 0..16 {
        match value.get("$ref").and_then(Value::as_str) {
            None => return Ok(value),
            Some(reference) => {
                value = pointer(doc, reference)
                    .ok_or_else(|| format!("$ref {reference} does not resolve"))?;
            }
        }
    }
    Err("a $ref chain longer than 16".to_string())
}

/// Every `$ref` of the document that does not point at a value, with where it is.
fn unresolved_refs(doc: &Value) -> Vec<String> {
    fn walk(doc: &Value, value: &Value, at: &str, bad: &mut Vec<String>) {
        match value {
            Value::Object(object) => {
                for (key, child) in object {
                    let here = format!("{at}/{key}");
                    if key == "$ref" {
                        match child.as_str() {
                            Some(reference) if pointer(doc, reference).is_some() => {}
                            _ => bad.push(format!("{here}: {child}")),
                        }
                    } else {
                        walk(doc, child, &here, bad);
                    }
                }
            }
            Value::Array(items) => {
                for (index, child) in items.iter().enumerate() {
                    walk(doc, child, &format!("{at}/{index}"), bad);
                }
            }
            _ => {}
        }
    }
    let mut bad = Vec::new();
    walk(doc, doc, "#", &mut bad);
    bad
}

/// A validator for `schema` (a schema of the document, e.g. a `$ref` into
/// `components/schemas`) with the document's components available to `$ref`, and
/// formats (`date-time`) checked.
fn validator(doc: &Value, schema: &Value) -> jsonschema::Validator {
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": doc["components"],
        "allOf": [schema],
    });
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&root)
        .unwrap_or_else(|error| panic!("schema {schema} does not compile: {error}"))
}

/// What is wrong with `instance` under `schema`: empty when it is valid.
fn schema_errors(doc: &Value, schema: &Value, instance: &Value) -> Vec<String> {
    validator(doc, schema)
        .iter_errors(instance)
        .map(|error| format!("at {:?}: {error}", error.instance_path.as_str()))
        .collect()
}

fn component_schema(name: &str) -> Value {
    let reference = format!("#/components/schemas/{name}");
    assert!(
        pointer(document(), &reference).is_some(),
        "no schema {name} in the document"
    );
    json!({ "$ref": reference })
}

/// The schema named `name` accepts `instance`.
fn is_valid(name: &str, instance: &Value) -> bool {
    schema_errors(document(), &component_schema(name), instance).is_empty()
}

/// The response object the document gives for `method path` answering `status`
/// (references followed), with where it was found. A path the document does not
/// list must be a 404, whose response is `components/responses/NotFound`; a method
/// it does not list for a path must be a 405, whose response is
/// `components/responses/MethodNotAllowed` (OpenAPI lists only the operations a
/// path has, so a method it leaves out is one the server does not accept).
fn documented_response<'d>(
    doc: &'d Value,
    path: &str,
    method: &str,
    status: u16,
) -> Result<(String, &'d Value), String> {
    let method = method.to_ascii_lowercase();
    let Some(item) = doc["paths"].get(path) else {
        if status != 404 {
            return Err(format!(
                "{path} is not in the document, yet answered {status} (only a 404 may answer an undocumented path)"
            ));
        }
        let not_found = pointer(doc, "#/components/responses/NotFound")
            .ok_or("no components/responses/NotFound for undocumented paths")?;
        return Ok(("#/components/responses/NotFound".to_string(), not_found));
    };
    let Some(operation) = item.get(&method) else {
        if status != 405 {
            return Err(format!(
                "{method} {path} is not documented, yet answered {status} (only a 405 may answer an undocumented method)"
            ));
        }
        let not_allowed = pointer(doc, "#/components/responses/MethodNotAllowed")
            .ok_or("no components/responses/MethodNotAllowed for undocumented methods")?;
        return Ok((
            "#/components/responses/MethodNotAllowed".to_string(),
            not_allowed,
        ));
    };
    let response = operation["responses"]
        .get(status.to_string())
        .ok_or_else(|| {
            let documented: Vec<&String> = operation["responses"]
                .as_object()
                .map(|responses| responses.keys().collect())
                .unwrap_or_default();
            format!(
                "status {status} of {method} {path} is not documented (documented: {documented:?})"
            )
        })?;
    Ok((
        format!("#/paths/{path}/{method}/responses/{status}"),
        resolve(doc, response)?,
    ))
}

/// The path of a request URL (`http://host:port/units?x` -> `/units`).
fn path_of(url: &str) -> String {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path_and_query = after_scheme
        .find('/')
        .map_or("/", |start| &after_scheme[start..]);
    path_and_query
        .split(['?', '#'])
        .next()
        .unwrap_or("/")
        .to_string()
}

/// Everything about `response` the document disagrees with: its status is not
/// documented for its path and method, a required header is missing, a header or
/// the body does not fit its schema, or a body came where none is documented.
fn problems(doc: &Value, response: &Response) -> Vec<String> {
    let path = path_of(&response.url);
    let (location, documented) =
        match documented_response(doc, &path, &response.method, response.status) {
            Ok(found) => found,
            Err(problem) => return vec![problem],
        };
    let mut found = Vec::new();
    if let Some(headers) = documented.get("headers").and_then(Value::as_object) {
        for (name, header) in headers {
            let header = match resolve(doc, header) {
                Ok(header) => header,
                Err(problem) => {
                    found.push(format!("header {name}: {problem}"));
                    continue;
                }
            };
            match response.header(name) {
                None if header["required"] == true => {
                    found.push(format!("required header {name} is missing ({location})"));
                }
                None => {}
                Some(value) => {
                    for error in schema_errors(doc, &header["schema"], &json!(value)) {
                        found.push(format!("header {name}: {value:?}: {error} ({location})"));
                    }
                }
            }
        }
    }
    // A CSV answer (issue 34) has its own media type's entry, a string; HEAD's
    // has no body, like HEAD's JSON.
    if is_csv(response) && !response.body.is_empty() {
        match documented.pointer("/content/text~1csv/schema") {
            Some(schema) => {
                for error in schema_errors(doc, schema, &json!(response.body)) {
                    found.push(format!("body: {error} (schema of {location}: {schema})"));
                }
            }
            None => found.push(format!("a CSV body where {location} documents none")),
        }
        return found;
    }
    match documented.pointer("/content/application~1json/schema") {
        Some(schema) => {
            let media = response
                .header("content-type")
                .map(|value| value.split(';').next().unwrap_or("").trim().to_string());
            if !media
                .as_deref()
                .is_some_and(|media| media.eq_ignore_ascii_case("application/json"))
            {
                found.push(format!(
                    "Content-Type {media:?}, documented application/json"
                ));
            }
            match serde_json::from_str::<Value>(&response.body) {
                Err(error) => found.push(format!("the body is not JSON: {error}")),
                Ok(body) => {
                    for error in schema_errors(doc, schema, &body) {
                        found.push(format!("body: {error} (schema of {location}: {schema})"));
                    }
                }
            }
        }
        None if !response.body.is_empty() => found.push(format!(
            "a body where {location} documents none: {}",
            response.body
        )),
        None => {}
    }
    found
}

/// Whether `response` is a CSV answer (issue 34).
fn is_csv(response: &Response) -> bool {
    response.header("content-type").is_some_and(|value| {
        let media = value.split(';').next().unwrap_or("").trim();
        media.eq_ignore_ascii_case("text/csv")
    })
}

/// Asserts that `response` is answered as the document says; returns its JSON
/// body (`null` when it has none, or a CSV one).
#[track_caller]
fn check(response: &Response) -> Value {
    let found = problems(document(), response);
    assert!(
        found.is_empty(),
        "{}: the document disagrees:\n  {}",
        response.context(),
        found.join("\n  ")
    );
    if response.body.is_empty() || is_csv(response) {
        Value::Null
    } else {
        response.json()
    }
}

/// `check`, then the error code of the body.
#[track_caller]
fn check_error(response: &Response, status: u16, code: &str) {
    assert_eq!(response.status, status, "{}", response.context());
    let body = check(response);
    assert_eq!(body["error"]["code"], code, "{}", response.context());
}

// ---------------------------------------------------------------------------
// The document itself
// ---------------------------------------------------------------------------

#[test]
fn the_document_is_well_formed_openapi_3_1() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["info"]["title"], "stq: Station Telemetry Query Service");
    assert_eq!(doc["info"]["version"], "0.1.0");
    assert!(doc["info"]["description"]
        .as_str()
        .is_some_and(|text| !text.is_empty()));
    assert_eq!(doc["servers"].as_array().map(Vec::len), Some(1));
    assert_eq!(doc["servers"][0]["url"], "http://127.0.0.1:8080");
    assert_eq!(
        doc["components"]["securitySchemes"]["bearerAuth"]["type"],
        "http"
    );
    assert_eq!(
        doc["components"]["securitySchemes"]["bearerAuth"]["scheme"],
        "bearer"
    );

    let bad = unresolved_refs(doc);
    assert!(bad.is_empty(), "unresolved $refs: {bad:#?}");

    // Every schema compiles.
    for name in doc["components"]["schemas"].as_object().unwrap().keys() {
        validator(doc, &component_schema(name));
    }

    let mut operation_ids = BTreeSet::new();
    let paths = doc["paths"].as_object().unwrap();
    let listed: BTreeSet<&str> = paths.keys().map(String::as_str).collect();
    assert_eq!(
        listed,
        BTreeSet::from([
            "/units",
            "/metrics",
            "/units/summary",
            "/metrics/summary",
            "/metrics/control",
            "/stations",
            "/units/stream",
            "/metrics/stream",
            "/healthz",
            "/readyz",
            "/openapi.json"
        ])
    );
    for (path, item) in paths {
        // Only what the server accepts is an operation: GET, HEAD and the CORS
        // preflight. Any other method is the 405 of `documented_response`, as
        // schemathesis's `unsupported_method` check also expects.
        let operations: BTreeSet<&str> = item
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .filter(|key| METHODS.contains(key))
            .collect();
        assert_eq!(
            operations,
            BTreeSet::from(["get", "head", "options"]),
            "operations of {path}"
        );
        for (method, operation) in item.as_object().unwrap() {
            if !METHODS.contains(&method.as_str()) {
                continue;
            }
            let id = operation["operationId"].as_str().unwrap_or_else(|| {
                panic!("{method} {path}: no operationId");
            });
            assert!(operation_ids.insert(id), "operationId {id} repeated");
            // The token is needed exactly by GET and HEAD of the record, summary and
            // stream endpoints.
            let records = [
                "/units",
                "/metrics",
                "/units/summary",
                "/metrics/summary",
                "/metrics/control",
                "/stations",
                "/units/stream",
                "/metrics/stream",
            ]
            .contains(&path.as_str())
                && (method == "get" || method == "head");
            let expected = if records {
                json!([{"bearerAuth": []}])
            } else {
                json!([])
            };
            assert_eq!(
                operation["security"], expected,
                "security of {method} {path}"
            );
            let responses = operation["responses"].as_object().unwrap();
            assert!(!responses.is_empty(), "{method} {path}: no responses");
            for (status, response) in responses {
                let response = resolve(doc, response).unwrap();
                assert!(
                    response["description"].is_string(),
                    "{method} {path} {status}: no description"
                );
                let schema = response.pointer("/content/application~1json/schema");
                // A stream's 200 is `text/event-stream` (issue 49).
                let stream = path.ends_with("/stream") && status == "200";
                assert_eq!(
                    schema.is_some(),
                    method != "head" && status != "304" && status != "204" && !stream,
                    "{method} {path} {status}: a body only for GET answers (and errors)"
                );
                assert_eq!(
                    response
                        .pointer("/content/text~1event-stream/schema")
                        .is_some(),
                    stream && method == "get",
                    "{method} {path} {status}: an event stream only from GET of a stream"
                );
            }
        }
    }
}

#[test]
fn the_error_schemas_list_every_code_by_status() {
    let doc = document();
    let all: BTreeSet<&str> = doc
        .pointer("/components/schemas/Error/properties/error/properties/code/enum")
        .and_then(Value::as_array)
        .expect("Error: an enum of error.code")
        .iter()
        .map(|code| code.as_str().unwrap())
        .collect();
    let expected: BTreeSet<&str> = ERROR_CODES.iter().map(|(code, _)| *code).collect();
    assert_eq!(all, expected, "the codes of Error");

    // The schema each error status of GET /units and /metrics names lists exactly
    // that status's codes; a body of each code validates, and of no other.
    let mut covered = BTreeSet::new();
    for path in ["/units", "/metrics"] {
        for status in [400, 401, 403, 406, 414, 500, 503] {
            let (location, response) = documented_response(doc, path, "get", status).unwrap();
            let schema = response
                .pointer("/content/application~1json/schema")
                .unwrap_or_else(|| panic!("{location}: no schema"));
            let target = resolve(doc, schema).unwrap();
            let codes: BTreeSet<&str> = target
                .pointer("/properties/error/properties/code/enum")
                .and_then(Value::as_array)
                .unwrap_or_else(|| panic!("{location}: no enum of error.code"))
                .iter()
                .map(|code| code.as_str().unwrap())
                .collect();
            let wanted: BTreeSet<&str> = ERROR_CODES
                .iter()
                .filter(|(_, of)| *of == status)
                .map(|(code, _)| *code)
                .collect();
            assert_eq!(codes, wanted, "{location}");
            covered.extend(codes);
        }
    }
    for (name, status) in [("NotFound", 404), ("MethodNotAllowed", 405)] {
        let schema = pointer(doc, &format!("#/components/responses/{name}"))
            .and_then(|response| response.pointer("/content/application~1json/schema"))
            .unwrap();
        let target = resolve(doc, schema).unwrap();
        let codes = &target["properties"]["error"]["properties"]["code"]["enum"];
        let wanted: Vec<&str> = ERROR_CODES
            .iter()
            .filter(|(_, of)| *of == status)
            .map(|(code, _)| *code)
            .collect();
        assert_eq!(codes, &json!(wanted), "{name}");
        covered.extend(wanted);
    }
    assert_eq!(covered, expected, "every code has its status");

    // Each code's own body under each status schema.
    let statuses = [
        (400, "BadRequestError"),
        (401, "UnauthorizedError"),
        (403, "ForbiddenError"),
        (404, "NotFoundError"),
        (405, "MethodNotAllowedError"),
        (414, "UriTooLongError"),
        (500, "InternalServerError"),
        (503, "ServiceUnavailableError"),
    ];
    let body_of = |code: &str| {
        let details = match code {
            "invalid_parameter" => json!({"parameter": "from", "value": "x"}),
            "unknown_parameter" => json!({"parameter": "x"}),
            "invalid_window" => {
                json!({"from": "2024-01-02T00:00:00Z", "to": "2024-01-01T00:00:00Z"})
            }
            "too_many_stations" => json!({"count": 3, "max_stations": 2}),
            "result_too_large" => json!({"max_records": 5}),
            "forbidden" => json!({"stations": ["ST-03"]}),
            "internal_error" => json!({"request_id": "abc"}),
            "uri_too_long" => json!({"length": 9000, "max_query_bytes": 8192}),
            "window_too_large" => json!({
                "from": "2024-01-01T00:00:00Z",
                "to": "2024-03-01T00:00:00Z",
                "max_window": "31d",
            }),
            "timeout" => json!({"request_timeout": "10s"}),
            _ => Value::Null,
        };
        json!({"error": {"code": code, "message": "m", "details": details}})
    };
    for (code, status) in ERROR_CODES {
        assert!(is_valid("Error", &body_of(code)), "{code} under Error");
        for (of, schema) in statuses {
            assert_eq!(
                is_valid(schema, &body_of(code)),
                of == status,
                "{code} under {schema}"
            );
        }
    }
}

#[test]
fn the_reference_check_finds_a_broken_reference() {
    let mut broken = document().clone();
    broken["paths"]["/units"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        ["$ref"] = json!("#/components/schemas/NoSuchSchema");
    let bad = unresolved_refs(&broken);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].contains("NoSuchSchema"), "{bad:?}");
    assert!(unresolved_refs(document()).is_empty());
}

// ---------------------------------------------------------------------------
// The document against the server
// ---------------------------------------------------------------------------

/// Fails until `GET /openapi.json` is routed (src/api.rs serving
/// `include_str!("openapi.json")`).
#[test]
fn the_server_serves_this_document() {
    let response = server().get("/openapi.json", None);
    assert_eq!(
        response.status,
        200,
        "GET /openapi.json is not served (yet): {}",
        response.context()
    );
    let served = check(&response);
    assert_eq!(
        &served,
        document(),
        "GET /openapi.json differs from src/http/openapi.json"
    );
    let head = server().request("HEAD", "/openapi.json", &[]);
    assert_eq!(head.status, 200, "{}", head.context());
    check(&head);
}

/// Every method on every documented path, tried on the server: none is a 404, and
/// each answer is documented for its path, method and status (for a method the
/// path does not list, the 405 with `Allow`). Fails for `/openapi.json` until that
/// route exists.
#[test]
fn every_documented_operation_is_answered_as_documented() {
    let doc = document();
    let mut failures = Vec::new();
    for path in doc["paths"].as_object().unwrap().keys() {
        for method in METHODS {
            let method = method.to_ascii_uppercase();
            // A stream's GET never ends, so it is not read here; its HEAD, the
            // other methods and its refusals are.
            if path.ends_with("/stream") && method == "GET" {
                continue;
            }
            let token = matches!(method.as_str(), "GET" | "HEAD").then_some(OPS);
            let response = server().request_as(&method, path, token, &[]);
            if response.status == 404 {
                failures.push(format!("{method} {path}: a documented path answered 404"));
                continue;
            }
            let found = problems(doc, &response);
            if !found.is_empty() {
                failures.push(format!("{}: {}", response.context(), found.join("; ")));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_paged_units_walk_matches_the_document() {
    let first = server().get(&format!("{}&limit=2", units_all()), Some(OPS));
    assert_eq!(first.status, 200, "{}", first.context());
    let body = check(&first);
    assert_eq!(body["data"].as_array().unwrap().len(), 2);
    let mut cursor = body["meta"]["next_cursor"]
        .as_str()
        .unwrap_or_else(|| panic!("{}: no next_cursor", first.context()))
        .to_string();
    let mut records = body["data"].as_array().unwrap().clone();
    // Every page validates, the last one with a null next_cursor.
    for _ in 0..100 {
        let page = server().get(
            &format!("{}&limit=4&cursor={}", units_all(), percent_encode(&cursor)),
            Some(OPS),
        );
        assert_eq!(page.status, 200, "{}", page.context());
        let body = check(&page);
        records.extend(body["data"].as_array().unwrap().iter().cloned());
        match body["meta"]["next_cursor"].as_str() {
            Some(next) => cursor = next.to_string(),
            None => {
                assert_eq!(body["meta"].get("next_cursor"), Some(&Value::Null));
                break;
            }
        }
    }
    let want = shared().fixture.expect(&Query::units().both());
    assert_records(&records, &want, "the walk");

    // HEAD of the first page: the same status and headers, no body.
    let head = server().request_as("HEAD", &format!("{}&limit=2", units_all()), Some(OPS), &[]);
    assert_eq!(head.status, 200, "{}", head.context());
    check(&head);
    assert_eq!(head.header("etag"), first.header("etag"));

    // The ETag of the first page gives a 304, for GET and HEAD.
    let etag = first.header("etag").unwrap();
    for method in ["GET", "HEAD"] {
        let again = server().request_as(
            method,
            &format!("{}&limit=2", units_all()),
            Some(OPS),
            &[("If-None-Match", etag)],
        );
        assert_eq!(again.status, 304, "{}", again.context());
        check(&again);
    }
}

#[test]
fn metrics_answers_match_the_document() {
    let query = format!("/metrics?{WINDOW}&station_ids=ST-01,ST-02");
    let want = shared()
        .fixture
        .expect(&Query::metrics().stations(&["ST-01", "ST-02"]));
    assert!(
        !want.is_empty() && want.len() <= 5,
        "fixture: {}",
        want.len()
    );
    let response = server().get(&query, Some(OPS));
    assert_eq!(response.status, 200, "{}", response.context());
    let body = check(&response);
    assert_records(body["data"].as_array().unwrap(), &want, &query);
    assert!(body["meta"].get("next_cursor").is_none());

    let page = server().get(&format!("{query}&limit=1&names=voltage,current"), Some(OPS));
    assert_eq!(page.status, 200, "{}", page.context());
    let body = check(&page);
    assert!(
        body["meta"]["next_cursor"].is_string(),
        "{}",
        page.context()
    );

    let head = server().request_as("HEAD", &query, Some(OPS), &[]);
    assert_eq!(head.status, 200, "{}", head.context());
    check(&head);

    // The unit schema does not describe a metric answer: the schemas are not lax.
    let metrics = response.json();
    assert!(is_valid("MetricEnvelope", &metrics));
    assert!(!is_valid("UnitEnvelope", &metrics));
}

/// Issue 13: the summaries and the station list, with and without buckets and
/// with every group field, have the bodies and headers the document names.
#[test]
fn summary_answers_match_the_document() {
    // This server's `--max-records` is 5, so queries keep to one station.
    for query in [
        format!("/units/summary?{WINDOW}&station_ids=ST-01"),
        format!("/units/summary?{WINDOW}&station_ids=ST-01&group_by=mode,unit_type,slot,station_id&bucket=31d"),
        format!("/metrics/summary?{WINDOW}&station_ids=ST-01"),
        format!("/metrics/summary?{WINDOW}&station_ids=ST-01&group_by=unit,slot&bucket=31d"),
        // Issue 52: control charts, with a baseline and some of the rules.
        format!("/metrics/control?{WINDOW}&station_ids=ST-01"),
        format!("/metrics/control?{WINDOW}&station_ids=ST-01&group_by=unit,slot&rules=1,2&rules=7"),
        format!("/metrics/control?{WINDOW}&station_ids=ST-01&baseline_from=2024-03-01T00:00:00Z&baseline_to=2024-03-15T00:00:00Z"),
        "/stations?station_ids=ST-01,ST-02".to_owned(),
        "/stations?station_ids=ST-01".to_owned(),
    ] {
        let response = server().get(&query, Some(OPS));
        assert_eq!(response.status, 200, "{}", response.context());
        let body = check(&response);
        assert!(
            !body["data"].as_array().unwrap().is_empty(),
            "{}",
            response.context()
        );
        let head = server().request_as("HEAD", &query, Some(OPS), &[]);
        assert_eq!(head.status, 200, "{}", head.context());
        check(&head);
    }
    // The row schemas are not lax: one summary's rows are not another's.
    let units = server()
        .get(
            &format!("/units/summary?{WINDOW}&station_ids=ST-01"),
            Some(OPS),
        )
        .json();
    assert!(is_valid("UnitSummaryEnvelope", &units));
    assert!(!is_valid("MetricSummaryEnvelope", &units));
    assert!(!is_valid("StationsEnvelope", &units));
    let metrics = server()
        .get(
            &format!("/metrics/summary?{WINDOW}&station_ids=ST-01"),
            Some(OPS),
        )
        .json();
    let control = server()
        .get(
            &format!("/metrics/control?{WINDOW}&station_ids=ST-01"),
            Some(OPS),
        )
        .json();
    assert!(is_valid("MetricControlEnvelope", &control), "{control}");
    assert!(!is_valid("MetricSummaryEnvelope", &control));
    assert!(!is_valid("MetricControlEnvelope", &metrics));
    assert!(!is_valid("MetricControlEnvelope", &units));
}

/// Every error the suite can provoke, each checked against the response the
/// document names for its path, method and status. `$W` is the fixture's window.
#[test]
fn every_client_error_matches_the_document() {
    // (request, token, status, code; "" for a HEAD, which has no body)
    #[rustfmt::skip]
    let cases: [(&str, Option<&str>, u16, &str); 47] = [
        ("GET /units?from=yesterday", Some(OPS), 400, "invalid_parameter"),
        // Issue 23: schemathesis found `tz` missing from the parameters an
        // invalid_parameter may name.
        ("GET /units/summary?$W&station_ids=ST-01&tz=", Some(OPS), 400, "invalid_parameter"),
        ("GET /metrics/summary?$W&station_ids=ST-01&bucket=1d&tz=00", Some(OPS), 400, "invalid_parameter"),
        ("GET /units?$W&limit=0", Some(OPS), 400, "invalid_parameter"),
        ("GET /units?$W&direction=sideways", Some(OPS), 400, "invalid_parameter"),
        ("GET /metrics?$W&to=2024-05-01T00:00:00Z", Some(OPS), 400, "invalid_parameter"),
        ("GET /metrics?$W&cursor=abc", Some(OPS), 400, "invalid_parameter"),
        ("HEAD /units?limit=abc", Some(OPS), 400, ""),
        ("GET /units?$W&station_id=ST-01", Some(OPS), 400, "unknown_parameter"),
        ("GET /metrics?$W&type=PCB", Some(OPS), 400, "unknown_parameter"),
        ("GET /units?access_token=x", Some(OPS), 400, "unknown_parameter"),
        ("GET /units?from=2024-03-02T00:00:00Z&to=2024-03-01T00:00:00Z", Some(OPS), 400, "invalid_window"),
        ("GET /metrics?from=1710028800000&to=1710028800000", Some(OPS), 400, "invalid_window"),
        // --max-stations 2
        ("GET /units?$W&station_ids=ST-01,ST-02,ST-03", Some(OPS), 400, "too_many_stations"),
        // --max-records 5
        ("GET /units?$W&direction=input,output", Some(OPS), 400, "result_too_large"),
        ("GET /metrics?$W", Some(OPS), 400, "result_too_large"),
        // --max-window 31d, as long as $W
        ("GET /units?from=2024-03-01T00:00:00Z&to=2024-04-01T00:00:01Z", Some(OPS), 400, "window_too_large"),
        // --max-query-bytes 512
        ("GET /units?station_ids=$LONG", Some(OPS), 414, "uri_too_long"),
        ("GET /units?$W&limit=2&cursor=not-a-cursor", Some(OPS), 400, "invalid_cursor"),
        ("GET /metrics?$W&limit=2&cursor=AQEAAAAAAAAAAQAAAABq_jwA", Some(OPS), 400, "invalid_cursor"),
        ("GET /units?$W", None, 401, "unauthorized"),
        ("GET /metrics?$W", Some("no-such-token"), 401, "unauthorized"),
        ("GET /units?station_id=x", Some(""), 401, "unauthorized"),
        ("HEAD /metrics", None, 401, ""),
        ("GET /units?$W&station_ids=ST-01,ST-03", Some(LINE), 403, "forbidden"),
        ("GET /metrics?$W&station_ids=NOPE", Some(ST03), 403, "forbidden"),
        ("HEAD /metrics?station_ids=ST-01", Some(ST03), 403, ""),
        ("GET /nope", Some(OPS), 404, "not_found"),
        ("GET /units/ST-01", None, 404, "not_found"),
        ("POST /nope", None, 404, "not_found"),
        ("POST /units", Some(OPS), 405, "method_not_allowed"),
        ("DELETE /metrics", None, 405, "method_not_allowed"),
        ("PUT /healthz", None, 405, "method_not_allowed"),
        ("OPTIONS /units", None, 405, "method_not_allowed"),
        // Issue 49: `wait` beyond `--max-wait` (default 60s), and a stream's refusals,
        // decided before it starts.
        ("GET /units?$W&wait=2m", Some(OPS), 400, "invalid_parameter"),
        ("GET /units/stream?wait=0s", Some(OPS), 400, "invalid_parameter"),
        ("GET /metrics/stream?to=2024-05-01T00:00:00Z", Some(OPS), 400, "unknown_parameter"),
        ("GET /units/stream?station_ids=ST-01", None, 401, "unauthorized"),
        ("GET /metrics/stream?station_ids=ST-03", Some(LINE), 403, "forbidden"),
        // Issue 52: the control charts' own parameters.
        ("GET /metrics/control?$W&station_ids=ST-01&baseline_from=2024-03-01T00:00:00Z", Some(OPS), 400, "invalid_parameter"),
        ("GET /metrics/control?$W&station_ids=ST-01&baseline_to=2024-03-01T00:00:00Z", Some(OPS), 400, "invalid_parameter"),
        ("GET /metrics/control?$W&station_ids=ST-01&rules=9", Some(OPS), 400, "invalid_parameter"),
        ("GET /metrics/control?$W&station_ids=ST-01&baseline_from=2024-03-02T00:00:00Z&baseline_to=2024-03-01T00:00:00Z", Some(OPS), 400, "invalid_window"),
        ("GET /metrics/control?$W&station_ids=ST-01&baseline_from=2024-01-01T00:00:00Z&baseline_to=2024-03-01T00:00:00Z", Some(OPS), 400, "window_too_large"),
        ("GET /metrics/control?$W&station_ids=ST-01&bucket=1d", Some(OPS), 400, "unknown_parameter"),
        ("GET /metrics/control?$W&station_ids=ST-03", Some(LINE), 403, "forbidden"),
        ("HEAD /metrics/control?$W&rules=0", Some(OPS), 400, ""),
    ];
    let mut observed = BTreeSet::new();
    for (request, token, status, code) in cases {
        let (method, target) = request.split_once(' ').unwrap();
        let target = target
            .replace("$W", WINDOW)
            .replace("$LONG", &"A".repeat(600));
        let response = server().request_as(method, &target, token, &[]);
        if code.is_empty() {
            assert_eq!(response.status, status, "{}", response.context());
            check(&response);
        } else {
            check_error(&response, status, code);
            observed.insert(code);
        }
    }
    // The client replaces a header of the same name, but tells `authorization`
    // from `Authorization`: so it sends both.
    let two_tokens = server().request_as(
        "GET",
        &format!("/units?{WINDOW}"),
        Some(OPS),
        &[("authorization", "Bearer x")],
    );
    check_error(&two_tokens, 400, "invalid_request");
    observed.insert("invalid_request");
    assert_eq!(observed, BTreeSet::from(PROVOKED_CODES));
}

#[test]
fn the_probes_and_the_preflight_match_the_document() {
    let health = server().get("/healthz", None);
    assert_eq!(health.status, 200, "{}", health.context());
    assert_eq!(check(&health), json!({"status": "ok"}));

    let ready = server().get("/readyz", None);
    assert_eq!(ready.status, 200, "{}", ready.context());
    let body = check(&ready);
    assert_eq!(body["status"], "ready");
    assert_eq!(
        body["units"].as_u64().unwrap() + body["metrics"].as_u64().unwrap(),
        shared().fixture.records.len() as u64
    );

    for path in ["/healthz", "/readyz"] {
        let head = server().request("HEAD", path, &[]);
        assert_eq!(head.status, 200, "{}", head.context());
        check(&head);
    }

    // A preflight from the listed origin is a 204; from another, a 405.
    for path in ["/units", "/metrics", "/healthz"] {
        let preflight = server().request(
            "OPTIONS",
            path,
            &[
                ("Origin", CORS_ORIGIN),
                ("Access-Control-Request-Method", "GET"),
                ("Access-Control-Request-Headers", "authorization"),
            ],
        );
        assert_eq!(preflight.status, 204, "{}", preflight.context());
        check(&preflight);
        let stranger = server().request(
            "OPTIONS",
            path,
            &[
                ("Origin", "https://elsewhere.example"),
                ("Access-Control-Request-Method", "GET"),
            ],
        );
        check_error(&stranger, 405, "method_not_allowed");
    }
}

/// Each documented query parameter, sent with its documented example, is one the
/// endpoint accepts; the other endpoint's are refused as unknown; and the
/// documented names are exactly the contract's.
#[test]
fn the_documented_parameters_are_the_ones_the_server_accepts() {
    let doc = document();
    let names_of = |path: &str| -> Vec<(String, Value)> {
        doc["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|parameter| resolve(doc, parameter).unwrap().clone())
            .filter(|parameter| parameter["in"] == "query")
            .map(|parameter| (parameter["name"].as_str().unwrap().to_string(), parameter))
            .collect()
    };
    let contract = [
        (
            "/units",
            vec![
                "station_ids",
                "from",
                "to",
                "type",
                "serial_number",
                "result",
                "direction",
                "limit",
                "cursor",
                "format",
                "wait",
            ],
        ),
        (
            "/metrics",
            vec![
                "station_ids",
                "from",
                "to",
                "names",
                "serial_number",
                "limit",
                "cursor",
                "format",
                "wait",
            ],
        ),
        (
            "/units/summary",
            vec![
                "station_ids",
                "from",
                "to",
                "type",
                "serial_number",
                "group_by",
                "bucket",
                "tz",
                "format",
                "wait",
            ],
        ),
        (
            "/metrics/summary",
            vec![
                "station_ids",
                "from",
                "to",
                "names",
                "group_by",
                "bucket",
                "tz",
                "format",
                "wait",
            ],
        ),
        ("/stations", vec!["station_ids", "format", "wait"]),
        (
            "/metrics/control",
            vec![
                "station_ids",
                "from",
                "to",
                "names",
                "group_by",
                "baseline_from",
                "baseline_to",
                "rules",
                "format",
                "wait",
            ],
        ),
    ];
    for (path, expected) in &contract {
        let documented: BTreeSet<String> =
            names_of(path).into_iter().map(|(name, _)| name).collect();
        let expected: BTreeSet<String> = expected.iter().map(ToString::to_string).collect();
        assert_eq!(documented, expected, "query parameters of GET {path}");
        // HEAD takes the same parameters.
        assert_eq!(
            doc["paths"][path]["get"]["parameters"], doc["paths"][path]["head"]["parameters"],
            "HEAD {path}"
        );
    }

    // A parameter's example, encoded as its style says.
    let encode = |name: &str, parameter: &Value| -> String {
        let example = &parameter["example"];
        match example {
            Value::Array(items) => {
                let items: Vec<String> = items
                    .iter()
                    .map(|item| percent_encode(item.as_str().unwrap()))
                    .collect();
                assert_eq!(parameter["style"], "form", "{name}");
                if parameter["explode"] == true {
                    items
                        .iter()
                        .map(|item| format!("{name}={item}"))
                        .collect::<Vec<_>>()
                        .join("&")
                } else {
                    format!("{name}={}", items.join(","))
                }
            }
            Value::String(text) => format!("{name}={}", percent_encode(text)),
            Value::Number(number) => format!("{name}={number}"),
            other => panic!("{name}: example {other}"),
        }
    };
    for (path, _) in &contract {
        // This server's `--max-records` is 5: record queries page, and summaries
        // and `/stations` keep to one station (so few rows).
        let narrow = match *path {
            "/units" | "/metrics" => format!("limit={MAX_RECORDS}"),
            _ => "station_ids=ST-01".to_owned(),
        };
        let mut all = Vec::new();
        for (name, parameter) in names_of(path) {
            if name == "cursor" {
                // Only a cursor the server issued is valid, so the document gives no
                // example (schemathesis would send it as a valid value). A live
                // one is accepted.
                assert!(parameter.get("example").is_none(), "{path} cursor: example");
                let query = if *path == "/units" {
                    units_all()
                } else {
                    metrics_all()
                };
                let first = server().get(&format!("{query}&limit=1"), Some(OPS));
                let cursor = check(&first)["meta"]["next_cursor"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{}: no next_cursor", first.context()))
                    .to_string();
                let next = server().get(
                    &format!("{query}&limit=1&cursor={}", percent_encode(&cursor)),
                    Some(OPS),
                );
                assert_eq!(next.status, 200, "{}", next.context());
                check(&next);
                continue;
            }
            let errors = schema_errors(doc, &parameter["schema"], &parameter["example"]);
            assert!(errors.is_empty(), "{path} {name}: example: {errors:?}");
            let sent = if name == "limit" {
                // The example fits the default --max-records; this server has 5.
                format!("limit={MAX_RECORDS}")
            } else {
                encode(&name, &parameter)
            };
            // The baseline's two ends come together (one alone is refused): each is
            // sent with the other's example.
            let partner = match name.as_str() {
                "baseline_from" => Some("baseline_to"),
                "baseline_to" => Some("baseline_from"),
                _ => None,
            };
            let narrow = match partner {
                Some(partner) => {
                    let (_, other) = names_of(path)
                        .into_iter()
                        .find(|(name, _)| name == partner)
                        .unwrap();
                    format!("{narrow}&{}", encode(partner, &other))
                }
                None => narrow.clone(),
            };
            all.push(sent.clone());
            let response = if name == "limit" || name == "station_ids" {
                server().get(&format!("{path}?{sent}"), Some(OPS))
            } else {
                server().get(&format!("{path}?{sent}&{narrow}"), Some(OPS))
            };
            check(&response);
            assert_eq!(response.status, 200, "{}", response.context());
            // A list is repeatable exactly when the document says `explode: true`
            // (`type`, `result`, `direction`, `names`); `station_ids` given twice is
            // a 400.
            if parameter["schema"]["type"] == "array" {
                let lists = ["type", "result", "direction", "names", "group_by", "rules"];
                assert_eq!(
                    parameter["explode"] == true,
                    lists.contains(&name.as_str()),
                    "{path} {name}: explode"
                );
                let first = parameter["example"][0].as_str().unwrap();
                let twice = format!("{name}={first}&{name}={first}&{narrow}");
                let response = server().get(&format!("{path}?{twice}"), Some(OPS));
                if parameter["explode"] == true {
                    assert_eq!(response.status, 200, "{}", response.context());
                    check(&response);
                } else {
                    check_error(&response, 400, "invalid_parameter");
                }
            }
        }
        // All examples at once (one station for the summaries).
        if path.contains("summary") || path.contains("control") {
            all.retain(|sent| !sent.starts_with("station_ids="));
            all.push(narrow.clone());
        }
        let response = server().get(&format!("{path}?{}", all.join("&")), Some(OPS));
        assert_eq!(response.status, 200, "{}", response.context());
        check(&response);
    }

    // The other endpoint's parameters are unknown here.
    let units: BTreeSet<String> = names_of("/units")
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let metrics: BTreeSet<String> = names_of("/metrics")
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    for (path, others) in [
        ("/units", metrics.difference(&units)),
        ("/metrics", units.difference(&metrics)),
    ] {
        for name in others {
            let response = server().get(&format!("{path}?{name}=x"), Some(OPS));
            check_error(&response, 400, "unknown_parameter");
        }
    }

    // The documented request id header is echoed.
    let example = doc["components"]["parameters"]["XRequestId"]["example"]
        .as_str()
        .unwrap();
    let response = server().request("GET", "/healthz", &[("X-Request-Id", example)]);
    check(&response);
    assert_eq!(response.header("x-request-id"), Some(example));
}

/// The `pattern`s of `from`/`to` and of a `direction` item say exactly what the
/// server accepts, on both sides of each rule of CONTRACT section 4: schemathesis
/// sends what they accept as valid data, and what they refuse as invalid data.
#[test]
fn the_documented_patterns_are_what_the_server_accepts() {
    let doc = document();
    let parameters = &doc["components"]["parameters"];
    assert_eq!(
        parameters["From"]["schema"]["pattern"], parameters["To"]["schema"]["pattern"],
        "from and to take the same forms"
    );
    // (parameter, schema, value, accepted)
    #[rustfmt::skip]
    let cases: Vec<(&str, &Value, &str, bool)> = {
        let time = &parameters["From"]["schema"];
        let direction = &parameters["Direction"]["schema"]["items"];
        vec![
            ("from", time, "2024-03-10T00:00:00Z", true),
            ("from", time, "2024-03-10t00:00:00z", true),
            ("from", time, "2024-02-29T12:00:00.123456789+05:30", true),
            ("from", time, "2000-02-29T00:00:00-00:00", true),
            ("from", time, "0000-02-29T23:59:59.5-23:59", true),
            ("from", time, "2024-01-31T00:00:00Z", true),
            ("from", time, "1710028800000", true),
            ("from", time, "-1", true),
            ("from", time, "0", true),
            ("from", time, "2023-02-29T00:00:00Z", false),
            ("from", time, "1900-02-29T00:00:00Z", false),
            ("from", time, "2024-04-31T00:00:00Z", false),
            ("from", time, "2024-13-01T00:00:00Z", false),
            ("from", time, "2024-03-10 00:00:00Z", false),
            ("from", time, "2024-03-10T24:00:00Z", false),
            ("from", time, "2024-03-10T00:00:60Z", false),
            ("from", time, "2024-03-10T00:00Z", false),
            ("from", time, "2024-03-10T00:00:00+0100", false),
            ("from", time, "2024-03-10T00:00:00+24:00", false),
            ("from", time, "2024-03-10T00:00:00.1234567890Z", false),
            ("from", time, "2024-03-10T00:00:00.Z", false),
            ("from", time, "2024-03-10T00:00:00", false),
            ("from", time, "yesterday", false),
            ("from", time, "1.5", false),
            ("from", time, "+1", false),
            ("from", time, "", false),
            ("direction", direction, "input", true),
            ("direction", direction, " output\t", true),
            ("direction", direction, "", true),
            ("direction", direction, "  ", true),
            ("direction", direction, "Input", false),
            ("direction", direction, "in put", false),
            ("direction", direction, "sideways", false),
        ]
    };
    let mut disagreements = Vec::new();
    for (name, schema, value, accepted) in cases {
        let valid = schema_errors(doc, schema, &json!(value)).is_empty();
        let response = server().get(
            &format!("/units?{name}={}&limit=1", percent_encode(value)),
            Some(OPS),
        );
        let served = response.status == 200;
        if valid != accepted || served != accepted {
            disagreements.push(format!(
                "{name}={value:?}: the schema says {valid}, the server {} (expected {accepted})",
                response.status
            ));
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}

/// Issue 23: `tz` is an enum of the zones the server knows, so a generator that keeps
/// to the document never sends a zone it refuses (schemathesis sent `tz=00`).
#[test]
fn issue_23_the_documented_zones_are_the_ones_the_server_accepts() {
    let doc = document();
    let schema = &doc["components"]["parameters"]["Tz"]["schema"];
    let documented: Vec<&str> = schema["enum"]
        .as_array()
        .expect("tz: an enum of zone names")
        .iter()
        .map(|name| name.as_str().expect("tz: names are strings"))
        .collect();
    let known: Vec<&str> = chrono_tz::TZ_VARIANTS
        .iter()
        .map(|zone| zone.name())
        .collect();
    assert_eq!(
        documented, known,
        "tz: the enum is chrono-tz's zones, in its order"
    );
    let mut disagreements = Vec::new();
    for (value, accepted) in [
        ("UTC", true),
        ("Etc/UTC", true),
        ("Europe/Berlin", true),
        ("America/Argentina/Buenos_Aires", true),
        ("", false),
        ("00", false),
        ("utc", false),
        ("europe/berlin", false),
        ("Europe/Berlin ", false),
        ("+01:00", false),
    ] {
        let valid = schema_errors(doc, schema, &json!(value)).is_empty();
        let response = server().get(
            &format!(
                "/units/summary?{WINDOW}&station_ids=ST-01&bucket=1d&tz={}",
                percent_encode(value)
            ),
            Some(OPS),
        );
        let served = response.status == 200;
        if valid != accepted || served != accepted {
            disagreements.push(format!(
                "tz={value:?}: the schema says {valid}, the server {} (expected {accepted})",
                response.status
            ));
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}

// ---------------------------------------------------------------------------
// The checks can fail
// ---------------------------------------------------------------------------

fn with(mut value: Value, pointer: &str, replacement: Value) -> Value {
    *value
        .pointer_mut(pointer)
        .unwrap_or_else(|| panic!("no {pointer}")) = replacement;
    value
}

fn adding(mut value: Value, pointer: &str, key: &str, added: Value) -> Value {
    value
        .pointer_mut(pointer)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("no object at {pointer}"))
        .insert(key.to_string(), added);
    value
}

fn without(mut value: Value, pointer: &str, key: &str) -> Value {
    value
        .pointer_mut(pointer)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("no object at {pointer}"))
        .remove(key)
        .unwrap_or_else(|| panic!("no {key} at {pointer}"));
    value
}

#[test]
fn the_schemas_refuse_what_the_contract_forbids() {
    // Real answers, valid as they are.
    let units = server()
        .get(&format!("{}&limit=2", units_all()), Some(OPS))
        .json();
    let metrics = server()
        .get(&format!("/metrics?{WINDOW}&station_ids=ST-01"), Some(OPS))
        .json();
    let bad_request = server().get("/units?from=nope", Some(OPS)).json();
    let forbidden = server().get("/units?station_ids=ST-03", Some(LINE)).json();
    let ready = server().get("/readyz", None).json();
    assert!(is_valid("UnitEnvelope", &units), "{units}");
    assert!(is_valid("MetricEnvelope", &metrics), "{metrics}");
    assert!(is_valid("BadRequestError", &bad_request), "{bad_request}");
    assert!(is_valid("ForbiddenError", &forbidden), "{forbidden}");
    assert!(is_valid("Readiness", &ready), "{ready}");
    assert!(is_valid("Health", &json!({"status": "ok"})));

    // Issue 52: a control row, with a flag of its own record's fields.
    let control = server()
        .get(
            &format!("/metrics/control?{WINDOW}&station_ids=ST-01"),
            Some(OPS),
        )
        .json();
    assert!(is_valid("MetricControlEnvelope", &control), "{control}");
    let mut chart = control["data"][0].clone();
    let flag = json!({"rule": 1, "time_created": metrics["data"][0]["time_created"],
        "station_id": "ST-01", "unit_serial": "", "value": "3.3"});
    chart["violations"] = json!([flag.clone()]);
    assert!(is_valid("MetricControlRow", &chart), "{chart}");
    let record = units["data"][0].clone();
    let metric = metrics["data"][0].clone();
    // (what, the schema, an instance it must refuse)
    #[rustfmt::skip]
    let refused: Vec<(&str, &str, Value)> = vec![
        ("a unit record with an extra field", "UnitRecord", adding(record.clone(), "", "extra", json!("x"))),
        ("a unit record without metadata", "UnitRecord", without(record.clone(), "", "metadata")),
        ("a unit record with a number for a string", "UnitRecord", with(record.clone(), "/slot", json!(1))),
        ("a unit record with a null string", "UnitRecord", with(record.clone(), "/result", Value::Null)),
        ("a tag that is not a string", "UnitRecord", with(record.clone(), "/tags", json!([1]))),
        ("another direction", "UnitRecord", with(record.clone(), "/direction", json!("sideways"))),
        ("a time that is no date-time", "UnitRecord", with(record.clone(), "/time_created", json!("yesterday"))),
        ("an empty station id", "UnitRecord", with(record.clone(), "/station_id", json!(""))),
        ("a metric value as a number", "MetricRecord", with(metric.clone(), "/value", json!(3.3))),
        ("a metric record without limit_lower", "MetricRecord", without(metric.clone(), "", "limit_lower")),
        ("a metric record with metadata", "MetricRecord", adding(metric.clone(), "", "metadata", Value::Null)),
        ("a unit record among metrics", "MetricEnvelope", with(metrics.clone(), "/data/0", record.clone())),
        ("an extra envelope key", "UnitEnvelope", adding(units.clone(), "", "total", json!(2))),
        ("no message", "UnitEnvelope", without(units.clone(), "", "message")),
        ("another message", "UnitEnvelope", with(units.clone(), "/message", json!("2 metric records"))),
        ("an extra meta key", "UnitEnvelope", adding(units.clone(), "/meta", "page", json!(1))),
        ("a timestamp without milliseconds", "UnitEnvelope", with(units.clone(), "/meta/timestamp", json!("2024-01-01T00:00:00Z"))),
        ("a negative duration", "UnitEnvelope", with(units.clone(), "/meta/query_duration_ms", json!(-1))),
        ("a fractional duration", "UnitEnvelope", with(units.clone(), "/meta/query_duration_ms", json!(1.5))),
        ("an empty next_cursor", "UnitEnvelope", with(units.clone(), "/meta/next_cursor", json!(""))),
        ("a request id with a space", "UnitEnvelope", with(units.clone(), "/meta/request_id", json!("a b"))),
        ("a 403 code in a 400", "BadRequestError", with(bad_request.clone(), "/error/code", json!("forbidden"))),
        ("an unknown code", "Error", with(bad_request.clone(), "/error/code", json!("teapot"))),
        ("an error without details", "Error", without(bad_request.clone(), "/error", "details")),
        ("an extra error key", "Error", adding(bad_request.clone(), "/error", "hint", json!("x"))),
        ("invalid_parameter details without the parameter", "BadRequestError", without(bad_request.clone(), "/error/details", "parameter")),
        ("forbidden without stations", "ForbiddenError", with(forbidden.clone(), "/error/details", Value::Null)),
        ("another health", "Health", json!({"status": "fine"})),
        ("readiness listing stations", "Readiness", adding(ready.clone(), "", "station_ids", json!(["ST-01"]))),
        ("readiness without generation", "Readiness", without(ready.clone(), "", "generation")),
        ("a control row without violations", "MetricControlRow", without(chart.clone(), "", "violations")),
        ("a control row with a bucket", "MetricControlRow", adding(chart.clone(), "", "bucket_start", json!("2024-03-01T00:00:00Z"))),
        ("a control row of no points", "MetricControlRow", with(chart.clone(), "/points", json!(0))),
        ("a sigma of 0", "MetricControlRow", with(chart.clone(), "/sigma", json!(0.0))),
        ("a rule 9", "MetricControlRow", with(chart.clone(), "/violations/0/rule", json!(9))),
        ("a flag without its value", "MetricControlRow", without(chart.clone(), "/violations/0", "value")),
        ("a flag's value as a number", "MetricControlRow", with(chart.clone(), "/violations/0/value", json!(3.3))),
        ("a summary's message", "MetricControlEnvelope", with(control.clone(), "/message", json!("1 summary row"))),
    ];
    for (what, schema, instance) in refused {
        assert!(
            !is_valid(schema, &instance),
            "{what}: {schema} accepts {instance}"
        );
    }
}

#[test]
fn the_response_check_refuses_what_the_document_does_not_say() {
    let doc = document();
    let real = server().get(&format!("{}&limit=2", units_all()), Some(OPS));
    assert!(
        problems(doc, &real).is_empty(),
        "{:?}",
        problems(doc, &real)
    );

    let status = Response {
        status: 418,
        ..real.clone()
    };
    assert!(!problems(doc, &status).is_empty(), "an undocumented status");

    let method = Response {
        method: "CONNECT".into(),
        ..real.clone()
    };
    assert!(!problems(doc, &method).is_empty(), "an undocumented method");

    let headers = Response {
        headers: real
            .headers
            .iter()
            .filter(|(name, _)| name != "etag")
            .cloned()
            .collect(),
        ..real.clone()
    };
    assert!(!problems(doc, &headers).is_empty(), "a missing ETag");

    let vary = Response {
        headers: real
            .headers
            .iter()
            .map(|(name, value)| {
                let value = if name == "vary" {
                    "Origin".to_string()
                } else {
                    value.clone()
                };
                (name.clone(), value)
            })
            .collect(),
        ..real.clone()
    };
    assert!(!problems(doc, &vary).is_empty(), "another Vary");

    let mut extra = real.json();
    extra["data"][0]["extra"] = json!(1);
    let body = Response {
        body: extra.to_string(),
        ..real.clone()
    };
    assert!(
        !problems(doc, &body).is_empty(),
        "a record with an extra field"
    );

    let unit_path = Response {
        url: real.url.replace("/units", "/metrics"),
        ..real.clone()
    };
    assert!(!problems(doc, &unit_path).is_empty(), "units from /metrics");

    let head_with_body = Response {
        method: "HEAD".into(),
        ..real.clone()
    };
    assert!(!problems(doc, &head_with_body).is_empty(), "a body to HEAD");

    let elsewhere = Response {
        url: real.url.replace("/units", "/elsewhere"),
        ..real.clone()
    };
    assert!(
        !problems(doc, &elsewhere).is_empty(),
        "a 200 from an undocumented path"
    );
}

/// Issue 34: CSV answers of every endpoint, a paged one with its `Link`, match the
/// document; a CSV body or a `Link` it does not describe is refused.
#[test]
fn issue_34_csv_answers_match_the_document() {
    let doc = document();
    let paged = server().get(&format!("{}&limit=2&format=csv", units_all()), Some(OPS));
    assert!(paged.header("link").is_some(), "{}", paged.context());
    let answers = [
        paged.clone(),
        server().get(&format!("{}&limit=2&format=csv", metrics_all()), Some(OPS)),
        server().get("/units/summary?station_ids=ST-01&format=csv", Some(OPS)),
        server().get(
            "/metrics/summary?station_ids=ST-01&bucket=1h&format=csv",
            Some(OPS),
        ),
        server().get("/stations?station_ids=ST-01,ST-02&format=csv", Some(OPS)),
        server().get(
            &format!("/metrics/control?{WINDOW}&station_ids=ST-01&format=csv"),
            Some(OPS),
        ),
        server().request_as(
            "GET",
            "/stations?station_ids=ST-01",
            Some(OPS),
            &[("Accept", "text/csv")],
        ),
        server().request_as(
            "HEAD",
            "/stations?station_ids=ST-01&format=csv",
            Some(OPS),
            &[],
        ),
    ];
    for answer in &answers {
        assert_eq!(answer.status, 200, "{}", answer.context());
        let found = problems(doc, answer);
        assert!(found.is_empty(), "{}: {found:?}", answer.context());
    }
    let bad_link = Response {
        headers: paged
            .headers
            .iter()
            .map(|(name, value)| match name.as_str() {
                "link" => (name.clone(), "</units?limit=2>; rel=\"prev\"".to_string()),
                _ => (name.clone(), value.clone()),
            })
            .collect(),
        ..paged.clone()
    };
    assert!(!problems(doc, &bad_link).is_empty(), "another Link");
    let csv_probe = Response {
        url: server().url("/healthz"),
        ..paged
    };
    assert!(!problems(doc, &csv_probe).is_empty(), "a CSV /healthz");
}
