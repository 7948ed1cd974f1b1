//! CONTRACT section 7, CSV (issue 34): every API endpoint answers RFC 4180 CSV
//! when `format=csv` asks, or, without `format`, when `Accept` prefers `text/csv`.
//!
//! The CSV is read back by Python's `csv` module (the standard library's, run as
//! a subprocess) and compared, field by field, with the JSON answer to the same
//! query: strings as they are, numbers as the JSON writes them, `null` as an
//! empty field, `tags`, `metadata` (a string one too) and `results` as the same
//! JSON. Python also
//! writes the rows back with minimal quoting and CRLF, which must give the very
//! bytes stq sent: quoting only where needed, rows ending in CRLF, no BOM.
//!
//! The data holds commas, quotes, CR and LF in every kind of field, spread over
//! three days, so that both a station's sealed records (written out whole by a
//! scan) and its hot ones (from shared pieces) are read.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{json, Value};

use crate::common::*;

const CSV_TYPE: &str = "text/csv; charset=utf-8; header=present";
const WINDOW: &str = "from=2024-05-01T00:00:00Z&to=2024-05-04T00:00:00Z";

/// Reads the CSV pages (files named after the JSON answer's file) back with
/// Python's `csv` module and checks them against the JSON answer's `data`:
/// the header is each element's keys in order, and each field is the element's
/// value. Numbers are compared as the JSON writes them (parse hooks keep their
/// text). Writing the rows back with `csv.writer` must give the bytes read.
const READ_BACK: &str = r#"
import csv, io, json, sys

def number(text):
    return ("number", text)

def load(text):
    return json.loads(text, parse_float=number, parse_int=number)

answer = load(open(sys.argv[1], encoding="utf-8").read())
data = answer["data"]
header, rows = None, []
for path in sys.argv[2:]:
    raw = open(path, "rb").read()
    assert not raw.startswith(b"\xef\xbb\xbf"), "a byte order mark"
    text = raw.decode("utf-8")
    table = list(csv.reader(io.StringIO(text, newline=""), strict=True))
    again = io.StringIO(newline="")
    csv.writer(again, lineterminator="\r\n").writerows(table)
    assert again.getvalue() == text, ("not minimal RFC 4180 with CRLF", text, again.getvalue())
    assert header is None or table[0] == header, (table[0], header)
    header = table[0]
    rows += table[1:]
assert len(rows) == len(data), (len(rows), len(data))
for row, element in zip(rows, data):
    assert list(element) == header, (header, list(element))
    assert len(row) == len(header), (row, header)
    for name, field in zip(header, row):
        value = element[name]
        if name == "metadata" and value is not None:
            assert field == field.strip() and load(field) == value, (name, field, value)
        elif value is None:
            assert field == "", (name, field)
        elif isinstance(value, str):
            assert field == value, (name, field, value)
        elif isinstance(value, tuple):
            assert field == value[1], (name, field, value)
        else:
            assert field == field.strip() and load(field) == value, (name, field, value)
print(len(rows))
"#;

/// A snapshot whose strings need quoting, on three days, and its server.
fn csv_server() -> &'static Server {
    static SHARED: OnceLock<(Fixture, Server)> = OnceLock::new();
    &SHARED
        .get_or_init(|| {
            let fixture = Fixture::from_files(&quoting_files());
            let server = Server::start(&fixture, &[]);
            (fixture, server)
        })
        .1
}

/// Strings a CSV field must quote, or must not.
const AWKWARD: [&str; 8] = [
    "plain",
    "a,b",
    "say \"hi\"",
    "two\r\nlines",
    "lf\nonly",
    "cr\ronly",
    "tab\tand ünïcödé 🙂",
    "",
];

fn quoting_files() -> Vec<FileSpec> {
    let mut units = Vec::new();
    let mut metrics = Vec::new();
    let stations = ["ST-1", "ST,\"2\""];
    for index in 0..36usize {
        let station = stations[index % 2];
        let awkward = |offset: usize| AWKWARD[(index + offset) % AWKWARD.len()];
        // Every two hours from 2024-05-01T00:00Z: three days, the last one hot.
        let time = format!(
            "2024-05-0{}T{:02}:{:02}:00{}",
            1 + index * 2 / 24,
            index * 2 % 24,
            index % 60,
            ["Z", "+02:00", ".125Z"][index % 3]
        );
        let metadata = match index % 5 {
            0 => json!({"operator": awkward(1), "n": 1, "nested": [true, null, {"k": awkward(2)}]}),
            1 => json!(awkward(3)),
            2 => json!(12.5),
            3 => Value::Null,
            _ => json!([awkward(4), awkward(5)]),
        };
        let unit_type = ["PCB", "Cable,flat"][index % 2];
        let direction = ["input", "output", "output"][index % 3];
        let result = ["pass", "fail", "Pass \"ok\""][index % 3];
        let name = ["voltage", "v,\"max\""][index % 2];
        let mut unit = json!({
            "station_id": station,
            "slot": awkward(0),
            "unit_serial": format!("SN-{}", index / 3),
            "time_created": time,
            "tz": awkward(1),
            "mode": awkward(2),
            "tags": [awkward(3), awkward(4)],
            "unit_type": unit_type,
            "direction": direction,
            "result": result,
            "metadata": metadata,
        });
        if index % 7 == 0 {
            unit.as_object_mut().unwrap().remove("metadata");
        }
        units.push(unit.to_string());
        metrics.push(
            json!({
                "station_id": station,
                "slot": awkward(5),
                "unit_serial": format!("SN-{}", index / 3),
                "time_created": time,
                "tz": "UTC",
                "mode": awkward(6),
                "tags": [awkward(7)],
                "name": name,
                "value": awkward(index % 3),
                "unit": awkward(1),
                "type": "measure",
                "limit_upper": "4.5",
                "limit_lower": awkward(2),
            })
            .to_string(),
        );
        // Numbers as values and limits, which the answer writes as strings.
        metrics.push(format!(
            r#"{{"station_id":"{}","time_created":"{time}","name":"voltage","value":{}.50,"limit_upper":1E+1,"limit_lower":-0.0}}"#,
            station.replace('"', "\\\""),
            index
        ));
    }
    // Space between tokens, kept in the JSON and compacted in the CSV.
    units.push(
        r#"{"station_id":"ST-1","time_created":"2024-05-03T23:00:00Z","direction":"output","tags": [ "x, y" , "z" ],"metadata": { "a" : [ 1.50 , "b \" c" ] , "é" : "\u00e9" }}"#
            .to_string(),
    );
    // A string `metadata` and a number that reads the same as its text.
    for (minute, metadata) in [(10, r#""42""#), (20, "42")] {
        units.push(format!(
            r#"{{"station_id":"ST-42","time_created":"2024-05-03T23:{minute}:00Z","direction":"output","metadata":{metadata}}}"#
        ));
    }
    vec![
        FileSpec::plain("q.units.jsonl", units.join("\n") + "\n"),
        FileSpec::plain("q.metrics.jsonl", metrics.join("\n") + "\n"),
    ]
}

/// `path_and_query` with `format=csv` added.
fn as_csv(path_and_query: &str) -> String {
    let separator = if path_and_query.contains('?') {
        '&'
    } else {
        '?'
    };
    format!("{path_and_query}{separator}format=csv")
}

/// `python3`, from Debian's package when it is missing.
fn python() -> Option<PathBuf> {
    debian_binary("/usr/bin/python3", "python3")
}

/// A 200 CSV answer: its body. Checks the media type and the meta headers.
#[track_caller]
fn csv_ok(response: &Response) -> &str {
    assert_eq!(response.status, 200, "{}", response.context());
    assert_eq!(
        response.header_all("content-type"),
        [CSV_TYPE],
        "{}",
        response.context()
    );
    response.request_id();
    let duration = response
        .header("x-query-duration-ms")
        .unwrap_or_else(|| panic!("{}: no X-Query-Duration-Ms", response.context()));
    assert!(
        !duration.is_empty() && duration.bytes().all(|byte| byte.is_ascii_digit()),
        "{}: X-Query-Duration-Ms {duration:?}",
        response.context()
    );
    assert!(
        response.body.ends_with("\r\n"),
        "{}: rows end with CRLF",
        response.context()
    );
    &response.body
}

/// Checks with Python that the CSV pages hold what `json` holds, and returns
/// how many rows they hold; `None` where Python cannot be had.
#[track_caller]
fn read_back(json: &Response, pages: &[&Response]) -> Option<usize> {
    let python = python()?;
    let directory = temporary_directory();
    let json_path = directory.path().join("answer.json");
    std::fs::write(&json_path, &json.body).unwrap();
    let mut command = Command::new(python);
    command.arg("-c").arg(READ_BACK).arg(&json_path);
    for (index, page) in pages.iter().enumerate() {
        let path = directory.path().join(format!("page-{index}.csv"));
        std::fs::write(&path, csv_ok(page)).unwrap();
        command.arg(path);
    }
    let output = command.output().expect("run python3");
    assert!(
        output.status.success(),
        "{}: Python's csv module read back something else:\n{}",
        json.url,
        String::from_utf8_lossy(&output.stderr)
    );
    Some(
        String::from_utf8(output.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap(),
    )
}

/// Compares the CSV answer of `path_and_query` with its JSON answer; returns the
/// number of rows.
#[track_caller]
fn same_as_json(server: &Server, path_and_query: &str) -> Option<usize> {
    let json = server.get(path_and_query, Some(OPS));
    assert_eq!(json.status, 200, "{}", json.context());
    let csv = server.get(&as_csv(path_and_query), Some(OPS));
    read_back(&json, &[&csv])
}

/// The one `Link: <...>; rel="next"` of a page, as the path and query it names.
#[track_caller]
fn next_link(response: &Response) -> Option<String> {
    let links = response.header_all("link");
    assert!(links.len() <= 1, "{}: {links:?}", response.context());
    links.first().map(|link| {
        let target = link
            .strip_prefix('<')
            .and_then(|rest| rest.strip_suffix(">; rel=\"next\""))
            .unwrap_or_else(|| panic!("{}: Link {link:?}", response.context()));
        target.to_string()
    })
}

// ---------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------

#[test]
fn issue_34_records_read_back_as_the_json_answer_holds_them() {
    let server = csv_server();
    let queries = [
        format!("/units?{WINDOW}&direction=input,output"),
        format!("/units?{WINDOW}&station_ids=ST-1"),
        format!("/metrics?{WINDOW}"),
        format!("/metrics?{WINDOW}&names=voltage&station_ids=ST-1"),
    ];
    for query in &queries {
        if let Some(rows) = same_as_json(server, query) {
            assert!(rows > 10, "{query}: {rows} rows");
        }
    }
    // An answer without records still has its header row.
    for (path, header) in [
        ("/units", UNIT_FIELDS.join(",")),
        ("/metrics", METRIC_FIELDS.join(",")),
    ] {
        let empty = server.get(
            &as_csv(&format!("{path}?from=2020-01-01T00:00:00Z")),
            Some(OPS),
        );
        assert_eq!(csv_ok(&empty), format!("{header}\r\n"));
    }
}

#[test]
fn issue_51_a_string_metadata_reads_apart_from_a_number() {
    let server = csv_server();
    let response = server.get(
        &as_csv(&format!("/units?{WINDOW}&station_ids=ST-42")),
        Some(OPS),
    );
    let rows: Vec<&str> = csv_ok(&response).split("\r\n").collect();
    assert_eq!(
        rows[1..],
        [
            r#"ST-42,,,2024-05-03T23:10:00Z,,,[],,output,,"""42""""#,
            "ST-42,,,2024-05-03T23:20:00Z,,,[],,output,,42",
            "",
        ],
        "{}",
        response.body
    );
}

#[test]
fn issue_34_the_main_fixture_reads_back_too() {
    let server = server();
    for query in [units_all(), metrics_all()] {
        same_as_json(server, &query);
    }
}

#[test]
fn issue_34_pages_walk_by_the_link_header_and_cursors_cross_formats() {
    let server = csv_server();
    let all = format!("/units?{WINDOW}&direction=input,output");
    let json = server.get(&all, Some(OPS));
    let total = json.clone().ok().data.len();
    let first = as_csv(&format!("{all}&limit=5"));
    let mut pages = Vec::new();
    let mut next = Some(first.clone());
    while let Some(path) = next {
        let page = server.get(&path, Some(OPS));
        csv_ok(&page);
        next = next_link(&page);
        if let Some(link) = &next {
            // The same query, with the next page's cursor.
            assert!(link.starts_with("/units?"), "{link}");
            assert!(
                link.contains("format=csv") && link.contains("limit=5"),
                "{link}"
            );
            assert_eq!(link.matches("cursor=").count(), 1, "{link}");
        }
        pages.push(page);
        assert!(pages.len() <= total, "the walk does not end");
    }
    assert_eq!(pages.len(), total.div_ceil(5));
    let pages: Vec<&Response> = pages.iter().collect();
    if let Some(rows) = read_back(&json, &pages) {
        assert_eq!(rows, total);
    }
    // A page that ends exactly on the last record has no Link.
    let whole = server.get(&as_csv(&format!("{all}&limit={total}")), Some(OPS));
    csv_ok(&whole);
    assert_eq!(next_link(&whole), None);

    // A cursor from a JSON page works on a CSV request, and the other way round.
    let json_first = server.ok(&format!("{all}&limit=5"));
    let cursor = json_first.cursor().expect("a next page");
    let from_json = server.get(
        &as_csv(&format!("{all}&limit=5&cursor={}", percent_encode(&cursor))),
        Some(OPS),
    );
    assert_eq!(csv_ok(&from_json), csv_ok(pages[1]));
    let link = next_link(pages[0]).expect("page 1 links to page 2");
    let cursor = link.split("cursor=").nth(1).unwrap();
    let json_second = server.ok(&format!("{all}&limit=5&cursor={cursor}"));
    let json_second_by_json = server.ok(&format!(
        "{all}&limit=5&cursor={}",
        percent_encode(&json_first.cursor().unwrap())
    ));
    assert_eq!(
        json_second.data, json_second_by_json.data,
        "a CSV page's cursor on a JSON request"
    );
}

// ---------------------------------------------------------------------------
// Summaries
// ---------------------------------------------------------------------------

#[test]
fn issue_34_every_summary_reads_back() {
    let server = csv_server();
    let queries = [
        format!("/units/summary?{WINDOW}"),
        format!("/units/summary?{WINDOW}&group_by=slot,unit_type,mode&bucket=6h"),
        format!("/units/summary?{WINDOW}&group_by=mode,station_id&bucket=1d&tz=Europe/Berlin"),
        format!("/metrics/summary?{WINDOW}"),
        format!("/metrics/summary?{WINDOW}&group_by=unit,slot&bucket=12h"),
        format!("/metrics/summary?{WINDOW}&group_by=station_id&names=voltage&bucket=1d&tz=Asia/Shanghai"),
        "/stations".to_string(),
    ];
    for query in &queries {
        if let Some(rows) = same_as_json(server, query) {
            assert!(rows > 0, "{query}");
        }
    }
    // No rows: the header alone, with the group fields, `name` and
    // `bucket_start` as the rows would have them.
    let empty = "from=2020-01-01T00:00:00Z";
    let units_header = "mode,slot,bucket_start,records,results,units,first_pass,second_pass,\
                        final_pass,retested,first_pass_yield,second_pass_yield,final_yield,\
                        retest_rate,cycle_count,cycle_mean_s,cycle_p50_s,cycle_p90_s,cycle_max_s";
    let cases = [
        (
            format!("/units/summary?{empty}&group_by=mode,slot&bucket=1h"),
            units_header,
        ),
        (
            format!("/metrics/summary?{empty}&group_by=unit"),
            "unit,name,count,numeric,min,max,mean,stddev,limit_lower,limit_upper,\
             out_of_limits,failing_units,cp,cpk",
        ),
        (
            "/stations?station_ids=NONE".to_string(),
            "station_id,units,metrics,first,last",
        ),
    ];
    for (query, header) in cases {
        let response = server.get(&as_csv(&query), Some(OPS));
        assert_eq!(csv_ok(&response), format!("{header}\r\n"), "{query}");
    }
    // And the header of a non-empty answer is the same list.
    let response = server.get(
        &as_csv(&format!(
            "/units/summary?{WINDOW}&group_by=mode,slot&bucket=1h"
        )),
        Some(OPS),
    );
    assert!(csv_ok(&response).starts_with(&format!("{units_header}\r\n")));
}

// ---------------------------------------------------------------------------
// Asking for CSV
// ---------------------------------------------------------------------------

#[test]
fn issue_34_accept_chooses_csv_only_when_it_prefers_text_csv() {
    let server = csv_server();
    let path = format!("/units?{WINDOW}");
    let cases = [
        ("text/csv", true),
        ("TEXT/CSV", true),
        ("text/csv, application/json;q=0.9", true),
        ("application/json;q=0.5, text/csv", true),
        ("text/csv, */*;q=0.1", true),
        ("text/csv;q=0.5, application/*;q=0.4", true),
        ("text/html, text/csv", true),
        ("text/csv, application/json", false),
        ("text/csv;q=0.9, */*", false),
        ("text/csv, */*", false),
        ("*/*", false),
        ("application/json", false),
        ("text/*", false),
        ("text/csv;q=0", false),
        ("text/csv;q=0.5, application/*", false),
        ("text/csv;q=0.5, application/json;q=0.5", false),
        ("text/csv;q=0.8, application/json;q=0.5, */*", false),
        ("", false),
    ];
    for (accept, csv) in cases {
        let response = server.request_as("GET", &path, Some(OPS), &[("Accept", accept)]);
        assert_eq!(response.status, 200, "{}", response.context());
        let content_type = response.header("content-type").unwrap_or_default();
        assert_eq!(
            content_type.starts_with("text/csv"),
            csv,
            "Accept: {accept} -> {content_type}"
        );
    }
    // `format` decides, whatever `Accept` says.
    let json = server.request_as(
        "GET",
        &format!("{path}&format=json"),
        Some(OPS),
        &[("Accept", "text/csv")],
    );
    json.ok();
    let csv = server.request_as(
        "GET",
        &as_csv(&path),
        Some(OPS),
        &[("Accept", "application/json")],
    );
    csv_ok(&csv);
    // Without `format` or `Accept`: JSON.
    server.get(&path, Some(OPS)).ok();
}

#[test]
fn issue_34_a_bad_format_is_refused_and_errors_stay_json() {
    let server = csv_server();
    for endpoint in [
        "/units",
        "/metrics",
        "/units/summary",
        "/metrics/summary",
        "/stations",
    ] {
        for format in [
            "format=xml",
            "format=",
            "format=CSV",
            "format=csv&format=csv",
            "format=csv,json",
        ] {
            let details = server
                .get(&format!("{endpoint}?{format}"), Some(OPS))
                .error(400, "invalid_parameter");
            assert_eq!(details["parameter"], "format", "{endpoint}?{format}");
        }
        csv_ok(&server.get(&as_csv(endpoint), Some(OPS)));
    }
    // Errors of a CSV request are the contract's JSON, with their status.
    let csv_header = [("Accept", "text/csv")];
    server
        .request_as("GET", &as_csv("/units"), None, &[])
        .error(401, "unauthorized");
    server
        .request_as(
            "GET",
            "/units?from=2024-05-02T00:00:00Z&to=2024-05-01T00:00:00Z",
            Some(OPS),
            &csv_header,
        )
        .error(400, "invalid_window");
    server
        .request_as(
            "GET",
            &as_csv("/units?station_ids=ST-1&x=1"),
            Some(OPS),
            &[],
        )
        .error(400, "unknown_parameter");
    server
        .request_as(
            "GET",
            &as_csv("/units?limit=5&cursor=garbage"),
            Some(OPS),
            &[],
        )
        .error(400, "invalid_cursor");
    server
        .request_as("GET", &as_csv("/units/summary?limit=5"), Some(OPS), &[])
        .error(400, "unknown_parameter");
}

// ---------------------------------------------------------------------------
// Caching, HEAD, compression
// ---------------------------------------------------------------------------

#[test]
fn issue_34_etags_304_head_vary_and_compression_work_as_for_json() {
    let server = csv_server();
    let path = format!("/metrics?{WINDOW}&limit=7");
    let csv = server.get(&as_csv(&path), Some(OPS));
    csv_ok(&csv);
    let tag = csv.header("etag").expect("an ETag").to_string();
    assert!(tag.starts_with("W/\""), "{tag}");
    let json = server.get(&path, Some(OPS));
    assert_ne!(
        json.header("etag"),
        Some(tag.as_str()),
        "CSV and JSON differ"
    );
    // The same answer asked for by Accept, and again: the same tag.
    let by_accept = server.request_as("GET", &path, Some(OPS), &[("Accept", "text/csv")]);
    assert_eq!(by_accept.header("etag"), Some(tag.as_str()));
    assert_eq!(by_accept.body, csv.body);
    // The tag is the answer's: another query with the same answer shares it.
    let respelled = server.get(
        &as_csv("/metrics?limit=7&to=2024-05-04T00:00:00Z&from=2024-05-01T00:00:00%2B00:00"),
        Some(OPS),
    );
    assert_eq!(respelled.header("etag"), Some(tag.as_str()));
    // A different page, a different tag.
    let other = server.get(&as_csv(&format!("/metrics?{WINDOW}&limit=8")), Some(OPS));
    assert_ne!(other.header("etag"), Some(tag.as_str()));

    let not_modified =
        server.request_as("GET", &as_csv(&path), Some(OPS), &[("If-None-Match", &tag)]);
    assert_eq!(not_modified.status, 304, "{}", not_modified.context());
    assert!(not_modified.body.is_empty());
    assert_eq!(not_modified.header("etag"), Some(tag.as_str()));
    // JSON's tag does not match the CSV answer.
    let json_tag = json.header("etag").unwrap();
    let mismatch = server.request_as(
        "GET",
        &as_csv(&path),
        Some(OPS),
        &[("If-None-Match", json_tag)],
    );
    assert_eq!(mismatch.status, 200);

    let head = server.request_as("HEAD", &as_csv(&path), Some(OPS), &[]);
    assert_eq!(head.status, 200, "{}", head.context());
    assert!(head.body.is_empty());
    assert_eq!(head.header("etag"), Some(tag.as_str()));
    assert_eq!(head.header("content-type"), Some(CSV_TYPE));
    assert!(head.header("link").is_some(), "{}", head.context());

    for response in [&csv, &json, &not_modified, &head] {
        let vary = response.header_all("vary");
        assert_eq!(vary.len(), 1, "{}", response.context());
        let items: Vec<&str> = vary[0].split(',').map(str::trim).collect();
        for wanted in ["Authorization", "Accept-Encoding", "Accept"] {
            assert!(
                items.contains(&wanted),
                "{}: Vary {vary:?}",
                response.context()
            );
        }
    }

    for encoding in ["gzip", "br"] {
        let response = ureq::get(&server.url(&as_csv(&path)))
            .set("Authorization", &format!("Bearer {OPS}"))
            .set("Accept-Encoding", encoding)
            .call()
            .expect("a 200");
        assert_eq!(response.header("content-encoding"), Some(encoding));
        assert_eq!(response.header("content-type"), Some(CSV_TYPE));
        assert_eq!(response.header("etag"), Some(tag.as_str()));
        let mut compressed = Vec::new();
        response.into_reader().read_to_end(&mut compressed).unwrap();
        let mut decoded = Vec::new();
        match encoding {
            "gzip" => flate2::read::GzDecoder::new(&compressed[..])
                .read_to_end(&mut decoded)
                .unwrap(),
            _ => brotli::Decompressor::new(&compressed[..], 4096)
                .read_to_end(&mut decoded)
                .unwrap(),
        };
        assert_eq!(decoded, csv.body.as_bytes(), "{encoding}");
    }
}
