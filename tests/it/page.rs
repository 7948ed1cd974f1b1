//! Issue 13, CONTRACT section 11: the overview page at `/`. Its files are served
//! without a token, from stq alone, on GET and HEAD only; and the page itself,
//! driven in Debian's chromium (headless), shows the stations a token sees, the
//! yield table and a metric's chart from the sample snapshot, and the API's message
//! for a bad token. It leaves a screenshot at 1280 x 800 in the target directory
//! (`STQ_UPDATE_SCREENSHOT=1` also writes it to docs/overview.png, which README.md
//! shows).
//!
//! Issue 23: the yield table's second-pass yield, retest rate and median cycle time
//! and the chart's Cp and Cpk are stq's figures for the page's own queries (sent
//! again by the test); the time zone picker, the browser's zone by default (set by
//! the test), sends `tz` and cuts local days, in Asia/Kolkata and across Berlin's
//! change back from summer time; a zone stq does not know falls back to UTC, said
//! on the page.
//!
//! Issue 49: the page follows `/units/stream` and `/metrics/stream`: a line appended
//! to a watched snapshot file shows in the yield table or the chart without a reload
//! of the page, a replaced file (`reset`) and a revoked token (`error`) are handled,
//! and the indicator says "live", "reconnecting" and "stopped".
//!
//! chromium is installed with `apt-get` when it is missing (CI runs as root on
//! Debian), as `replicas` installs nginx. Where it is missing and cannot be (not
//! root, or no apt-get), the chromium tests skip, saying which package they need;
//! under `CI=true` they fail instead (`common::debian_binary`). The page marks what
//! it has drawn in `data-*` attributes, and the tests wait for those, never for a
//! fixed time; what the page asked stq is read from the browser's Resource Timing
//! entries, waited for the same way.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use headless_chrome::protocol::cdp::Emulation;
use headless_chrome::protocol::cdp::Page::{self, CaptureScreenshotFormatOption};
use headless_chrome::{Browser, LaunchOptions, Tab};
use serde_json::Value;

use crate::common::*;

/// The demo tokens of the sample snapshot (README.md, `snapshots/tokens.json`).
const DEMO_OPS: &str = "stq-demo-ops";
const DEMO_LINE_1: &str = "stq-demo-line-1";

/// Every file the page loads, with its media type.
const ASSETS: [(&str, &str); 6] = [
    ("/", "text/html; charset=utf-8"),
    ("/ui/app.js", "text/javascript; charset=utf-8"),
    ("/ui/app.css", "text/css; charset=utf-8"),
    (
        "/ui/vendor/uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
    ),
    ("/ui/vendor/uPlot.min.css", "text/css; charset=utf-8"),
    ("/ui/vendor/LICENSE", "text/plain; charset=utf-8"),
];

/// Only the loopback network exists here: chromium must not try to reach anything
/// else on its own.
const CHROMIUM_FLAGS: [&str; 6] = [
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];

/// The longest any one wait for the page may take: a guard against a page that
/// never gets there, not a timing the test relies on.
const PAGE_TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn issue_13_the_page_and_its_files_are_served_without_a_token() {
    for (path, media_type) in ASSETS {
        let response = server().get(path, None);
        assert_eq!(response.status, 200, "{}", response.context());
        assert_eq!(response.header("content-type"), Some(media_type), "{path}");
        assert!(!response.body.is_empty(), "{path}");
        let policy = response.header("content-security-policy").unwrap_or("");
        assert!(
            policy.starts_with("default-src 'self'"),
            "{path}: Content-Security-Policy {policy:?}"
        );
        assert_eq!(response.header("x-content-type-options"), Some("nosniff"));
        assert!(response.header("x-request-id").is_some());

        let head = server().request("HEAD", path, &[]);
        assert_eq!(head.status, 200, "{}", head.context());
        assert!(head.body.is_empty(), "HEAD {path} has a body");

        for method in ["POST", "PUT", "DELETE", "PATCH"] {
            let refused = server().request(method, path, &[]);
            refused.error(405, "method_not_allowed");
            assert_eq!(
                refused.header("allow"),
                Some("GET, HEAD"),
                "{method} {path}"
            );
        }
    }
    // A token changes nothing: the page is the same for everybody.
    let with_token = server().get("/", Some(OPS));
    assert_eq!(with_token.body, server().get("/", None).body);

    // What the page refers to is served here, and nothing is from elsewhere.
    let page = server().get("/", None).body;
    for reference in page.split('"').filter(|text| text.starts_with("/ui/")) {
        assert!(
            ASSETS.iter().any(|(path, _)| *path == reference),
            "the page loads {reference}, which is not served"
        );
    }
    assert!(!page.contains("//"), "the page names another origin");

    for path in [
        "/ui/",
        "/ui/nope.js",
        "/ui/vendor/",
        "/ui/app.js/x",
        "/index.html",
    ] {
        server().get(path, None).error(404, "not_found");
        server().request("POST", path, &[]).error(404, "not_found");
    }
}

/// Debian's chromium, installed when missing; `None` (the test skips) when it cannot
/// be (`common::debian_binary`).
fn chromium_binary() -> Option<PathBuf> {
    debian_binary("/usr/bin/chromium", "chromium")
}

/// Headless chromium, or `None` when the package is missing and cannot be installed.
fn browser() -> Option<Browser> {
    let options = LaunchOptions {
        path: Some(chromium_binary()?),
        headless: true,
        // Root in a container: chromium's sandbox needs user namespaces it may not have.
        sandbox: false,
        window_size: Some((1280, 800)),
        args: CHROMIUM_FLAGS.iter().map(OsStr::new).collect(),
        idle_browser_timeout: Duration::from_secs(300),
        ..LaunchOptions::default()
    };
    Some(Browser::new(options).expect("start chromium"))
}

/// The sample snapshot with its demo tokens, as `cargo run --release` serves it.
fn sample_server() -> Server {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let snapshots = root.join("snapshots");
    let tokens = snapshots.join("tokens.json");
    Server::spawn(&serve_args(&snapshots, &tokens, &[]), &[])
}

/// A tab showing `url` in a 1280 x 800 viewport (the window size alone leaves room
/// for a browser's frame, even headless), its browser in UTC.
fn open_page(browser: &Browser, url: &str) -> Arc<Tab> {
    open_page_in(browser, url, "UTC", None)
}

/// The same with the browser's time zone `zone` (the page's default zone) and, with
/// `now`, the clock the page reads (`Date.now`) stopped at that instant, so that
/// "today" is a day the test knows.
fn open_page_in(browser: &Browser, url: &str, zone: &str, now: Option<&str>) -> Arc<Tab> {
    let tab = browser.new_tab().expect("open a tab");
    tab.set_default_timeout(PAGE_TIMEOUT);
    tab.call_method(Emulation::SetDeviceMetricsOverride {
        width: 1280,
        height: 800,
        device_scale_factor: 1.0,
        mobile: false,
        scale: None,
        screen_width: None,
        screen_height: None,
        position_x: None,
        position_y: None,
        dont_set_visible_size: None,
        screen_orientation: None,
        viewport: None,
        display_feature: None,
        device_posture: None,
    })
    .expect("set the viewport");
    tab.call_method(Emulation::SetTimezoneOverride {
        timezone_id: zone.to_string(),
    })
    .unwrap_or_else(|error| panic!("set the browser's time zone to {zone}: {error}"));
    if let Some(now) = now {
        let milliseconds = instant(now) / 1_000_000;
        tab.call_method(Page::AddScriptToEvaluateOnNewDocument {
            source: format!("Date.now = () => {milliseconds};"),
            world_name: None,
            include_command_line_api: None,
            run_immediately: None,
        })
        .expect("stop the page's clock");
    }
    tab.navigate_to(url)
        .unwrap()
        .wait_until_navigated()
        .unwrap();
    tab
}

/// Runs `script` (an expression) in the page and returns its JSON value.
fn evaluate(tab: &Tab, script: &str) -> Value {
    let result = tab
        .evaluate(script, false)
        .unwrap_or_else(|error| panic!("evaluate {script}: {error}"));
    result.value.unwrap_or(Value::Null)
}

/// The text of a table's body cells, row by row.
fn table(tab: &Tab, selector: &str) -> Vec<Vec<String>> {
    let script = format!(
        "JSON.stringify([...document.querySelectorAll('{selector} tbody tr')]\
         .map(row => [...row.cells].map(cell => cell.textContent)))"
    );
    let text = evaluate(tab, &script);
    serde_json::from_str(text.as_str().expect("a JSON string")).unwrap()
}

fn attribute(tab: &Tab, selector: &str, name: &str) -> String {
    tab.find_element(selector)
        .unwrap_or_else(|error| panic!("{selector}: {error}"))
        .get_attribute_value(name)
        .unwrap()
        .unwrap_or_else(|| panic!("{selector} has no {name}"))
}

/// Types `token` into the token field and submits it, as a person would.
fn enter_token(tab: &Tab, token: &str) {
    tab.wait_for_element("#token")
        .unwrap()
        .click()
        .unwrap()
        .type_into(token)
        .unwrap();
    tab.press_key("Enter").unwrap();
}

/// Chooses `value` in the `<select>` with id `id`, firing its change event.
fn choose(tab: &Tab, id: &str, value: &str) {
    let script = format!(
        "(() => {{ const select = document.getElementById('{id}'); select.value = '{value}';
           select.dispatchEvent(new Event('change')); return select.value; }})()"
    );
    assert_eq!(evaluate(tab, &script), Value::String(value.into()), "{id}");
}

/// A fraction as the page writes it.
fn percent(fraction: &Value) -> String {
    match fraction.as_f64() {
        None => "—".to_string(),
        Some(fraction) => format!("{:.1} %", fraction * 100.0),
    }
}

/// A count of seconds as the page writes it.
fn seconds(value: &Value) -> String {
    match value.as_f64() {
        None => "—".to_string(),
        Some(seconds) => format!("{seconds:.1} s"),
    }
}

/// A units summary row as the yield table shows it: station, the day (with
/// `bucket`), output records, units, first-pass, second-pass and final yield, retest
/// rate, and the median cycle time.
fn yield_row(answer: &Value, bucketed: bool) -> Vec<String> {
    let mut row = vec![answer["station_id"].as_str().unwrap().to_string()];
    if bucketed {
        row.push(answer["bucket_start"].as_str().unwrap()[..10].to_string());
    }
    row.push(answer["records"].to_string());
    row.push(answer["units"].to_string());
    for fraction in [
        "first_pass_yield",
        "second_pass_yield",
        "final_yield",
        "retest_rate",
    ] {
        row.push(percent(&answer[fraction]));
    }
    row.push(seconds(&answer["cycle_p50_s"]));
    row
}

/// A process capability index as the page writes it.
fn capability(value: &Value) -> String {
    match value.as_f64() {
        None => "—".to_string(),
        Some(index) => format!("{index:.2}"),
    }
}

/// The paths and queries of the page's calls to `path` since `forget_calls`, oldest
/// first, as the browser's Resource Timing entries record them: the requests
/// themselves, not what the page says it sent. Waits until there is one.
fn calls(tab: &Tab, path: &str) -> Vec<String> {
    let script = format!(
        "new Promise((resolve) => {{
           const answer = () => {{
             const calls = performance.getEntriesByType('resource')
               .map((entry) => new URL(entry.name))
               .filter((url) => url.pathname === '{path}')
               .map((url) => url.pathname + url.search);
             if (calls.length > 0) {{ resolve(JSON.stringify(calls)); }}
             return calls.length > 0;
           }};
           if (!answer()) {{
             new PerformanceObserver((_, observer) => {{ if (answer()) observer.disconnect(); }})
               .observe({{ type: 'resource' }});
           }}
         }})"
    );
    let result = tab
        .evaluate(&script, true)
        .unwrap_or_else(|error| panic!("the page's calls to {path}: {error}"));
    serde_json::from_str(result.value.unwrap().as_str().unwrap()).unwrap()
}

/// The page's last call to `path` since `forget_calls`.
fn last_call(tab: &Tab, path: &str) -> String {
    calls(tab, path).pop().unwrap()
}

fn forget_calls(tab: &Tab) {
    evaluate(tab, "performance.clearResourceTimings()");
}

/// The parameters of a path and query, decoded.
fn parameters(path_and_query: &str) -> BTreeMap<String, String> {
    let (_, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |text: &str| {
                percent_encoding::percent_decode_str(&text.replace('+', " "))
                    .decode_utf8()
                    .unwrap()
                    .into_owned()
            };
            (decode(name), decode(value))
        })
        .collect()
}

/// `from`, `to`, `tz` and `bucket` of a call (an empty text for one it lacks).
fn window_of(call: &str) -> [String; 4] {
    let sent = parameters(call);
    ["from", "to", "tz", "bucket"].map(|name| sent.get(name).cloned().unwrap_or_default())
}

/// A JSON list the page evaluates to, as strings.
fn strings(tab: &Tab, script: &str) -> Vec<String> {
    serde_json::from_str(evaluate(tab, script).as_str().expect("a JSON string")).unwrap()
}

/// The `data-bucket-start` of each body row of a table.
fn bucket_starts(tab: &Tab, selector: &str) -> Vec<String> {
    strings(
        tab,
        &format!(
            "JSON.stringify([...document.querySelectorAll('{selector} tbody tr')]\
             .map(row => row.dataset.bucketStart || ''))"
        ),
    )
}

fn value_of(tab: &Tab, id: &str) -> String {
    evaluate(tab, &format!("document.getElementById('{id}').value"))
        .as_str()
        .unwrap()
        .to_string()
}

/// Chooses `value` in a select and waits for the yield table it reloads.
fn choose_and_wait(tab: &Tab, id: &str, value: &str) {
    choose(tab, id, value);
    // The change reloads synchronously (data-state 'loading'), so 'ready' is the new answer.
    tab.wait_for_element("#yields[data-state='ready']").unwrap();
    tab.wait_for_element("#chart[data-state='drawn']").unwrap();
}

/// The yield table against stq's answer to the page's own last call, sent again:
/// the cells, and the day of each row; a station of the stations table without a
/// row in the answer has one of its own, of zeros and dashes. Returns that answer.
fn assert_yields_answer_the_call(tab: &Tab, server: &Server, token: &str) -> Vec<Value> {
    let call = last_call(tab, "/units/summary");
    let bucketed = parameters(&call).contains_key("bucket");
    let answer = server.ok_as(&call, token).data;
    let mut expected = vec![];
    let mut starts = vec![];
    for station in table(tab, "#stations")
        .into_iter()
        .map(|row| row[0].clone())
    {
        let rows: Vec<&Value> = answer
            .iter()
            .filter(|row| row["station_id"] == station.as_str())
            .collect();
        if rows.is_empty() {
            let mut empty = vec![station.clone()];
            empty.extend(bucketed.then(|| "—".to_string()));
            empty.extend(["0", "0", "—", "—", "—", "—", "—"].map(String::from));
            expected.push(empty);
            starts.push(String::new());
        }
        for row in rows {
            expected.push(yield_row(row, bucketed));
            starts.push(row["bucket_start"].as_str().unwrap_or("").to_string());
        }
    }
    assert_eq!(table(tab, "#yields"), expected, "{call}");
    assert_eq!(bucket_starts(tab, "#yields"), starts, "{call}");
    answer
}

/// The `bucket_start`s of an answer, distinct, in order.
fn days(answer: &[Value]) -> Vec<String> {
    let mut days: Vec<String> = answer
        .iter()
        .map(|row| row["bucket_start"].as_str().unwrap().to_string())
        .collect();
    days.sort();
    days.dedup();
    days
}

/// The first and last record of each station, as the stations table shows them:
/// on the wall clock of `zone`, to the second.
fn assert_station_times(tab: &Tab, stations: &[Value], zone: chrono_tz::Tz) {
    let local = |written: &Value| {
        chrono::DateTime::parse_from_rfc3339(written.as_str().unwrap())
            .unwrap()
            .with_timezone(&zone)
            .format("%Y-%m-%d %H:%M:%S")
            .to_string()
    };
    let rows = table(tab, "#stations");
    assert_eq!(rows.len(), stations.len());
    for (row, station) in rows.iter().zip(stations) {
        assert_eq!(row[3], local(&station["first"]), "{zone}");
        assert_eq!(row[4], local(&station["last"]), "{zone}");
    }
}

/// Sets the window's inputs, wall-clock times of the page's zone, and applies them.
fn enter_window(tab: &Tab, from: &str, to: &str) {
    evaluate(
        tab,
        &format!(
            "document.getElementById('from').value = '{from}'; \
             document.getElementById('to').value = '{to}'; \
             document.getElementById('window-form').requestSubmit(); true"
        ),
    );
    tab.wait_for_element("#yields[data-state='ready']").unwrap();
}

/// The statistic `key` beside the chart: its text, and its exact value (empty for
/// null).
fn statistic(tab: &Tab, key: &str) -> (String, String) {
    let selector = format!("#chart-stats [data-stat='{key}']");
    let text = evaluate(
        tab,
        &format!("document.querySelector(\"{selector} dd\").textContent"),
    );
    (
        text.as_str().unwrap().to_string(),
        attribute(tab, &selector, "data-value"),
    )
}

/// Every metric record of `station` named `name` in the window, through the API.
fn metric_records(server: &Server, station: &str, name: &str, from: &str, to: &str) -> Vec<Value> {
    server
        .ok_as(
            &format!("/metrics?station_ids={station}&names={name}&from={from}&to={to}"),
            DEMO_OPS,
        )
        .data
}

fn numeric(text: &str) -> Option<f64> {
    let looks_numeric = !text.is_empty()
        && text
            .bytes()
            .all(|byte| byte.is_ascii_digit() || b"+-.eE".contains(&byte));
    looks_numeric
        .then(|| text.parse::<f64>().ok())
        .flatten()
        .filter(|value| value.is_finite())
}

#[test]
fn issue_13_the_overview_page_in_chromium() {
    let Some(browser) = browser() else {
        return;
    };
    let server = sample_server();
    let tab = open_page(&browser, &server.url("/"));
    assert_eq!(tab.get_title().unwrap(), "stq overview");

    // The ops token sees the four stations of the sample.
    enter_token(&tab, DEMO_OPS);
    tab.wait_for_element("#stations[data-state='ready']")
        .unwrap();
    let stations = server.ok_as("/stations", DEMO_OPS).data;
    let rows = table(&tab, "#stations");
    let ids: Vec<&str> = rows.iter().map(|row| row[0].as_str()).collect();
    assert_eq!(ids, ["ST-01", "ST-02", "ST-03", "ST-04"]);
    // First and last record in UTC, to the second.
    let utc = |written: &Value| {
        let seconds = (instant(written.as_str().unwrap()) / SECOND) as i64;
        rfc3339_from_seconds(seconds)
            .replace('T', " ")
            .replace('Z', "")
    };
    for (row, station) in rows.iter().zip(&stations) {
        assert_eq!(row[1], station["units"].to_string());
        assert_eq!(row[2], station["metrics"].to_string());
        assert_eq!(row[3], utc(&station["first"]));
        assert_eq!(row[4], utc(&station["last"]));
    }

    // The default window spans every record, and the table has every station's
    // yields in it: the sample's own numbers (each station has 192 finished units'
    // output records; some units were tested more than once).
    tab.wait_for_element("#yields[data-state='ready']").unwrap();
    let yields = table(&tab, "#yields");
    // Station, output records, units, first-pass and final yield.
    let first_columns: Vec<[&str; 5]> = yields
        .iter()
        .map(|row| [0, 1, 2, 3, 5].map(|column| row[column].as_str()))
        .collect();
    let expected = [
        ["ST-01", "192", "189", "98.4 %", "100.0 %"],
        ["ST-02", "192", "183", "91.8 %", "95.6 %"],
        ["ST-03", "192", "186", "96.8 %", "99.5 %"],
        ["ST-04", "192", "188", "95.7 %", "97.9 %"],
    ];
    assert_eq!(first_columns, expected);
    // ... which is what /units/summary answers for the page's window.
    let from = format!(
        "{}Z",
        evaluate(&tab, "document.getElementById('from').value")
            .as_str()
            .unwrap()
    );
    let to = format!(
        "{}Z",
        evaluate(&tab, "document.getElementById('to').value")
            .as_str()
            .unwrap()
    );
    // From the sample's first record (00:04:23.582964 UTC) to just after its last
    // (23:53:19.144 UTC), to the second.
    assert_eq!(
        (from.as_str(), to.as_str()),
        ("2026-11-18T00:04:23Z", "2026-11-19T23:53:20Z")
    );
    let summary = server
        .ok_as(
            &format!("/units/summary?group_by=station_id&from={from}&to={to}"),
            DEMO_OPS,
        )
        .data;
    let answered: Vec<Vec<String>> = summary.iter().map(|row| yield_row(row, false)).collect();
    assert_eq!(yields, answered);

    // The chart: ST-02's temperature, 192 values of which 5 are out of limits.
    tab.wait_for_element("#chart[data-state='drawn']").unwrap();
    choose(&tab, "chart-station", "ST-02");
    tab.wait_for_element("#chart[data-state='drawn'][data-station='ST-02']")
        .unwrap();
    choose(&tab, "chart-metric", "temperature");
    tab.wait_for_element(
        "#chart[data-state='drawn'][data-station='ST-02'][data-metric='temperature']",
    )
    .unwrap();
    tab.wait_for_element("#chart canvas").unwrap();
    let records = metric_records(&server, "ST-02", "temperature", &from, &to);
    let mut out_of_limits = 0;
    let mut points = 0;
    for record in &records {
        let Some(value) = numeric(record["value"].as_str().unwrap()) else {
            continue;
        };
        points += 1;
        let below = numeric(record["limit_lower"].as_str().unwrap()).is_some_and(|low| value < low);
        let above =
            numeric(record["limit_upper"].as_str().unwrap()).is_some_and(|high| value > high);
        out_of_limits += usize::from(below || above);
    }
    assert_eq!((points, out_of_limits), (192, 5));
    assert_eq!(attribute(&tab, "#chart", "data-points"), points.to_string());
    assert_eq!(
        attribute(&tab, "#chart", "data-out-of-limits"),
        out_of_limits.to_string()
    );
    // The values, the lower and the upper limit, and the out-of-limit marks.
    assert_eq!(attribute(&tab, "#chart", "data-series"), "4");
    let legend: Vec<String> = serde_json::from_str(
        evaluate(
            &tab,
            "JSON.stringify([...document.querySelectorAll('#chart .u-legend .u-label')]\
             .map(label => label.textContent))",
        )
        .as_str()
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        legend,
        [
            "time (UTC)",
            "temperature (degC)",
            "lower limit",
            "upper limit",
            "out of limits"
        ]
    );

    // Everything the page did was within its Content-Security-Policy.
    assert_eq!(
        evaluate(
            &tab,
            "document.documentElement.dataset.policyViolations || '0'"
        ),
        serde_json::json!("0")
    );

    // The token is in this tab's sessionStorage only.
    let storage = evaluate(
        &tab,
        "JSON.stringify([sessionStorage.getItem('stq.token'), localStorage.length, \
         location.href, document.cookie])",
    );
    let storage: Value = serde_json::from_str(storage.as_str().unwrap()).unwrap();
    assert_eq!(
        storage,
        serde_json::json!([DEMO_OPS, 0, server.url("/"), ""])
    );

    // The picture without the token field's focus ring, once the page follows
    // its streams (issue 49: the indicator says "live").
    tab.wait_for_element("#live[data-state='live']").unwrap();
    evaluate(&tab, "document.activeElement.blur()");
    let screenshot = tab
        .capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true)
        .unwrap();
    assert!(screenshot.starts_with(b"\x89PNG\r\n\x1a\n"));
    // The PNG header's IHDR: width and height, big-endian, at bytes 16..24.
    let width = u32::from_be_bytes(screenshot[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(screenshot[20..24].try_into().unwrap());
    assert_eq!((width, height), (1280, 800), "the screenshot's size");
    let saved = Path::new(env!("CARGO_TARGET_TMPDIR")).join("overview.png");
    std::fs::write(&saved, &screenshot).unwrap();
    if std::env::var_os("STQ_UPDATE_SCREENSHOT").is_some_and(|value| value == "1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/overview.png");
        std::fs::write(docs, &screenshot).unwrap();
    }

    // Another token sees its own stations only.
    enter_token(&tab, DEMO_LINE_1);
    tab.wait_for_element("#yields[data-state='ready'][data-rows='2']")
        .unwrap();
    let ids: Vec<String> = table(&tab, "#stations")
        .into_iter()
        .map(|row| row[0].clone())
        .collect();
    assert_eq!(ids, ["ST-01", "ST-02"]);

    // A bad token: the API's own message, on the page.
    enter_token(&tab, "not-a-token");
    tab.wait_for_element("#stations[data-state='error']")
        .unwrap();
    let refused = server.get("/stations", Some("not-a-token"));
    let message = refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    let shown: BTreeMap<String, Value> = serde_json::from_str(
        evaluate(
            &tab,
            "JSON.stringify({text: document.querySelector('[role=alert]').textContent, \
             hidden: document.getElementById('error').hidden, \
             overview: document.getElementById('overview').hidden})",
        )
        .as_str()
        .unwrap(),
    )
    .unwrap();
    assert_eq!(shown["text"], Value::String(message));
    assert_eq!(shown["hidden"], Value::Bool(false));
    assert_eq!(
        shown["overview"],
        Value::Bool(true),
        "no data shown for a refused token"
    );

    // Forgetting the token removes it from the tab.
    tab.find_element("#forget").unwrap().click().unwrap();
    tab.wait_for_element("#status[data-state='forgotten']")
        .unwrap();
    assert_eq!(
        evaluate(&tab, "sessionStorage.length + localStorage.length"),
        serde_json::json!(0)
    );
}

// ---------------------------------------------------------------------------
// Issue 23: second pass, retests, cycle times, capability, the plant's zone
// ---------------------------------------------------------------------------

#[test]
fn issue_23_the_yield_table_shows_second_pass_retests_and_cycle_times_and_the_chart_cpk() {
    let Some(browser) = browser() else {
        return;
    };
    let server = sample_server();
    let tab = open_page(&browser, &server.url("/"));
    enter_token(&tab, DEMO_OPS);
    tab.wait_for_element("#yields[data-state='ready']").unwrap();

    // Every column is stq's figure for the page's own query, sent again.
    let call = last_call(&tab, "/units/summary");
    let [from, to, tz, bucket] = window_of(&call);
    assert_eq!((tz.as_str(), bucket.as_str()), ("UTC", ""), "{call}");
    let answer = assert_yields_answer_the_call(&tab, &server, DEMO_OPS);
    assert_eq!(answer.len(), 4);
    // The sample retests units and pairs every output with its input: the new
    // columns hold figures, and second pass differs from first pass somewhere.
    assert!(answer.iter().all(|row| row["cycle_p50_s"].is_f64()));
    assert!(answer
        .iter()
        .any(|row| row["retest_rate"].as_f64() > Some(0.0)));
    assert!(answer
        .iter()
        .any(|row| row["second_pass_yield"] != row["first_pass_yield"]));

    // Null is a dash, not 0: the second that holds ST-01's first output record but
    // not its input has a unit and no cycle time; the other stations, nothing.
    let outputs = server
        .ok_as(
            &format!("/units?station_ids=ST-01&from={from}&to={to}"),
            DEMO_OPS,
        )
        .data;
    let first_output = outputs
        .iter()
        .find(|record| record["direction"] == "output")
        .unwrap();
    let second = (instant(first_output["time_created"].as_str().unwrap()) / SECOND) as i64;
    let wall = |seconds: i64| {
        rfc3339_from_seconds(seconds)
            .trim_end_matches('Z')
            .to_string()
    };
    enter_window(&tab, &wall(second), &wall(second + 1));
    let answer = assert_yields_answer_the_call(&tab, &server, DEMO_OPS);
    assert_eq!(answer.len(), 1, "{answer:?}");
    assert_eq!(answer[0]["cycle_p50_s"], Value::Null);
    let rows = table(&tab, "#yields");
    assert_eq!(
        rows[0][1..],
        ["1", "1", "100.0 %", "100.0 %", "100.0 %", "0.0 %", "—"]
    );
    for row in &rows[1..] {
        assert_eq!(row[1..], ["0", "0", "—", "—", "—", "—", "—"]);
    }

    // Cp and Cpk beside the chart's statistics, as /metrics/summary has them for
    // the page's window.
    choose(&tab, "window-preset", "span");
    tab.wait_for_element("#yields[data-state='ready']").unwrap();
    choose(&tab, "chart-station", "ST-02");
    tab.wait_for_element("#chart[data-state='drawn'][data-station='ST-02']")
        .unwrap();
    let names_call = calls(&tab, "/metrics/summary")
        .into_iter()
        .rfind(|call| parameters(call)["station_ids"] == "ST-02")
        .unwrap();
    let rows = server.ok_as(&names_call, DEMO_OPS).data;
    for name in ["temperature", "contrast_ratio"] {
        choose(&tab, "chart-metric", name);
        tab.wait_for_element(&format!(
            "#chart[data-state='drawn'][data-station='ST-02'][data-metric='{name}']"
        ))
        .unwrap();
        let row = rows.iter().find(|row| row["name"] == name).unwrap();
        for key in ["cp", "cpk", "mean", "stddev", "min", "max"] {
            let (text, exact) = statistic(&tab, key);
            match row[key].as_f64() {
                None => assert_eq!((text.as_str(), exact.as_str()), ("—", ""), "{name} {key}"),
                Some(figure) => {
                    // Read as the answer was (serde_json's parser can be a last
                    // bit off the exact reading): the same text, the same figure.
                    let shown: f64 = serde_json::from_str(&exact).unwrap();
                    assert_eq!(shown, figure, "{name} {key}");
                    if key.starts_with("cp") {
                        assert_eq!(text, capability(&row[key]), "{name} {key}");
                    }
                }
            }
        }
        for key in ["out_of_limits", "failing_units"] {
            assert_eq!(statistic(&tab, key).0, row[key].to_string(), "{name} {key}");
        }
    }
    // temperature has both limits; contrast_ratio only a lower one, so its Cp is
    // null and its Cpk one-sided.
    let temperature = rows
        .iter()
        .find(|row| row["name"] == "temperature")
        .unwrap();
    assert!(temperature["cp"].is_f64() && temperature["cpk"].is_f64());
    assert_eq!(statistic(&tab, "cp").0, "—");
    assert_ne!(statistic(&tab, "cpk").0, "—");
    assert_eq!(
        evaluate(
            &tab,
            "document.documentElement.dataset.policyViolations || '0'"
        ),
        serde_json::json!("0")
    );
}

/// `stq gen`'s data from 2026-10-23 12:00 to 2026-10-26 12:00 UTC, across Berlin's
/// change back to standard time (03:00 CEST is 02:00 CET on 2026-10-25, at 01:00Z),
/// with the suite's tokens. The directory lives as long as the server.
fn generated_server() -> (tempfile::TempDir, Server) {
    let directory = temporary_directory();
    let snapshots = directory.path().join("snap");
    let mut command = std::process::Command::new(stq_binary());
    command.args([
        "gen",
        "--out",
        &path_string(&snapshots),
        "--stations",
        "2",
        "--days",
        "3",
        "--units-per-hour",
        "4",
        "--seed",
        "23",
        "--end",
        "2026-10-26T12:00:00Z",
    ]);
    clean_environment(&mut command, &[]);
    let output = command.output().expect("run stq gen");
    assert!(output.status.success(), "{output:?}");
    let tokens = directory.path().join("tokens.json");
    std::fs::write(&tokens, tokens_json()).unwrap();
    let server = Server::spawn(&serve_args(&snapshots, &tokens, &[]), &[]);
    (directory, server)
}

/// The page's clock in the zone tests: noon UTC on the day Berlin's clocks go back.
const NOON_OF_THE_CHANGE: &str = "2026-10-25T12:00:00Z";

#[test]
fn issue_23_the_zone_picker_sends_tz_and_cuts_local_days_across_a_dst_change() {
    let Some(browser) = browser() else {
        return;
    };
    let (_directory, server) = generated_server();
    let tab = open_page_in(
        &browser,
        &server.url("/"),
        "Europe/Berlin",
        Some(NOON_OF_THE_CHANGE),
    );
    enter_token(&tab, OPS);
    tab.wait_for_element("#yields[data-state='ready']").unwrap();
    tab.wait_for_element("#chart[data-state='drawn']").unwrap();

    // The browser's zone is the page's, and its times are Berlin's.
    assert_eq!(value_of(&tab, "zone"), "Europe/Berlin");
    assert_eq!(
        evaluate(&tab, "document.getElementById('zone-note').hidden"),
        Value::Bool(true)
    );
    let stations = server.ok_as("/stations", OPS).data;
    assert_eq!(stations.len(), 2);
    assert_station_times(&tab, &stations, chrono_tz::Europe::Berlin);
    let [_, _, tz, _] = window_of(&last_call(&tab, "/units/summary"));
    assert_eq!(tz, "Europe/Berlin");

    // Yields per day over every record: Berlin's days, the 25th 25 hours long (its
    // midnights +02:00 and +01:00).
    forget_calls(&tab);
    choose_and_wait(&tab, "bucket", "1d");
    let call = last_call(&tab, "/units/summary");
    let [_, _, tz, bucket] = window_of(&call);
    assert_eq!([tz.as_str(), bucket.as_str()], ["Europe/Berlin", "1d"]);
    let answer = assert_yields_answer_the_call(&tab, &server, OPS);
    assert_eq!(
        days(&answer),
        [
            "2026-10-23T00:00:00+02:00",
            "2026-10-24T00:00:00+02:00",
            "2026-10-25T00:00:00+02:00",
            "2026-10-26T00:00:00+01:00",
        ]
    );

    // Today in Berlin: from its midnight (22:00Z) to the next (23:00Z), 25 hours.
    forget_calls(&tab);
    choose_and_wait(&tab, "window-preset", "today");
    assert_eq!(
        window_of(&last_call(&tab, "/units/summary")),
        [
            "2026-10-24T22:00:00.000Z",
            "2026-10-25T23:00:00.000Z",
            "Europe/Berlin",
            "1d"
        ]
    );
    // The inputs show Berlin's wall clock (chromium leaves out seconds that are 0).
    assert_eq!(
        [value_of(&tab, "from"), value_of(&tab, "to")],
        ["2026-10-25T00:00", "2026-10-26T00:00"]
    );
    let answer = assert_yields_answer_the_call(&tab, &server, OPS);
    assert_eq!(days(&answer), ["2026-10-25T00:00:00+02:00"]);

    // Asia/Kolkata, UTC+05:30 all year: today starts at 18:30Z the day before, and
    // both summaries are asked in that zone.
    forget_calls(&tab);
    choose_and_wait(&tab, "zone", "Asia/Kolkata");
    assert_eq!(
        window_of(&last_call(&tab, "/units/summary")),
        [
            "2026-10-24T18:30:00.000Z",
            "2026-10-25T18:30:00.000Z",
            "Asia/Kolkata",
            "1d"
        ]
    );
    let answer = assert_yields_answer_the_call(&tab, &server, OPS);
    assert_eq!(days(&answer), ["2026-10-25T00:00:00+05:30"]);
    // The metric's names and statistics, and its figures per day.
    let metric_calls = calls(&tab, "/metrics/summary");
    assert_eq!(metric_calls.len(), 2, "{metric_calls:?}");
    for call in &metric_calls {
        assert_eq!(parameters(call)["tz"], "Asia/Kolkata", "{call}");
    }
    assert_station_times(&tab, &stations, chrono_tz::Asia::Kolkata);
    assert_eq!(
        [value_of(&tab, "from"), value_of(&tab, "to")],
        ["2026-10-25T00:00", "2026-10-26T00:00"]
    );
    let legend = strings(
        &tab,
        "JSON.stringify([...document.querySelectorAll('#chart .u-legend .u-label')]\
         .map(label => label.textContent))",
    );
    assert_eq!(legend[0], "time (Asia/Kolkata)");

    // The chart's metric per day: stq's rows for the page's call with the bucket.
    let daily = metric_calls
        .iter()
        .find(|call| parameters(call).contains_key("bucket"))
        .unwrap();
    let rows = server.ok_as(daily, OPS).data;
    assert_eq!(bucket_starts(&tab, "#chart-days"), days(&rows));
    let shown = table(&tab, "#chart-days");
    assert_eq!(shown.len(), rows.len());
    for (shown, row) in shown.iter().zip(&rows) {
        assert_eq!(shown[0], row["bucket_start"].as_str().unwrap()[..10]);
        assert_eq!(shown[1], row["numeric"].to_string());
        assert_eq!(shown[4], row["out_of_limits"].to_string());
        assert_eq!(
            shown[5..],
            [capability(&row["cp"]), capability(&row["cpk"])]
        );
    }

    // Yesterday in Kolkata.
    forget_calls(&tab);
    choose_and_wait(&tab, "window-preset", "yesterday");
    assert_eq!(
        window_of(&last_call(&tab, "/units/summary"))[..2],
        ["2026-10-23T18:30:00.000Z", "2026-10-24T18:30:00.000Z"]
    );
    let answer = assert_yields_answer_the_call(&tab, &server, OPS);
    assert_eq!(days(&answer), ["2026-10-24T00:00:00+05:30"]);

    // The last 7 days in Berlin: from its midnight of the 19th (+02:00) to the
    // 26th's (+01:00), 169 hours.
    choose_and_wait(&tab, "zone", "Europe/Berlin");
    forget_calls(&tab);
    choose_and_wait(&tab, "window-preset", "days7");
    assert_eq!(
        window_of(&last_call(&tab, "/units/summary"))[..2],
        ["2026-10-18T22:00:00.000Z", "2026-10-25T23:00:00.000Z"]
    );
    let answer = assert_yields_answer_the_call(&tab, &server, OPS);
    assert_eq!(
        days(&answer),
        [
            "2026-10-23T00:00:00+02:00",
            "2026-10-24T00:00:00+02:00",
            "2026-10-25T00:00:00+02:00",
        ]
    );
    assert_eq!(
        evaluate(
            &tab,
            "document.documentElement.dataset.policyViolations || '0'"
        ),
        serde_json::json!("0")
    );
}

/// A zone name chromium takes for its own and stq does not know.
const UNKNOWN_ZONE: &str = "SystemV/AST4";

#[test]
fn issue_23_a_browser_zone_stq_does_not_know_falls_back_to_utc_and_says_so() {
    let Some(browser) = browser() else {
        return;
    };
    let server = sample_server();
    let tab = open_page_in(&browser, &server.url("/"), UNKNOWN_ZONE, None);
    let browser_zone = evaluate(&tab, "Intl.DateTimeFormat().resolvedOptions().timeZone");
    let browser_zone = browser_zone.as_str().unwrap().to_string();
    let openapi: Value = serde_json::from_str(&server.get("/openapi.json", None).body).unwrap();
    let known: Vec<&str> = openapi["components"]["parameters"]["Tz"]["schema"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|name| name.as_str().unwrap())
        .collect();
    assert!(!known.contains(&browser_zone.as_str()), "{browser_zone}");

    enter_token(&tab, DEMO_OPS);
    tab.wait_for_element("#yields[data-state='ready']").unwrap();
    assert_eq!(value_of(&tab, "zone"), "UTC");
    let note = tab.find_element("#zone-note").unwrap();
    assert_eq!(note.get_attribute_value("hidden").unwrap(), None);
    let text = evaluate(&tab, "document.getElementById('zone-note').textContent");
    assert!(text.as_str().unwrap().contains(&browser_zone), "{text}");
    assert_eq!(attribute(&tab, "#zone-note", "data-fallback"), browser_zone);
    assert_eq!(window_of(&last_call(&tab, "/units/summary"))[2], "UTC");
    assert_eq!(
        strings(
            &tab,
            "JSON.stringify([...document.querySelectorAll('.zone-name')].map(e => e.textContent))"
        )[0],
        "(UTC)"
    );

    // The picker offers the names stq knows (this browser knows them all).
    let offered = strings(
        &tab,
        "JSON.stringify([...document.getElementById('zone').options].map(o => o.value))",
    );
    assert_eq!(offered, known);

    // Choosing a zone puts the note away.
    forget_calls(&tab);
    choose_and_wait(&tab, "zone", "Asia/Kolkata");
    assert_eq!(
        evaluate(&tab, "document.getElementById('zone-note').hidden"),
        Value::Bool(true)
    );
    assert_eq!(
        window_of(&last_call(&tab, "/units/summary"))[2],
        "Asia/Kolkata"
    );
}

// ---------------------------------------------------------------------------
// Issue 34: "Download CSV" of each table
// ---------------------------------------------------------------------------

/// Issue 34: each table's "Download CSV" sends the table's own call again with
/// `format=csv` (the token in the Authorization header) and saves what stq
/// answers: the file chromium saves is the CSV stq gives that call.
#[test]
fn issue_34_download_csv_saves_each_tables_csv() {
    let Some(browser) = browser() else {
        return;
    };
    let server = sample_server();
    let tab = open_page(&browser, &server.url("/"));
    let downloads = temporary_directory();
    tab.call_method(
        headless_chrome::protocol::cdp::Browser::SetDownloadBehavior {
            behavior:
                headless_chrome::protocol::cdp::Browser::SetDownloadBehaviorBehaviorOption::Allow,
            browser_context_id: None,
            download_path: Some(path_string(downloads.path())),
            events_enabled: None,
        },
    )
    .expect("let chromium save downloads");
    enter_token(&tab, DEMO_OPS);
    tab.wait_for_element("#yields[data-state='ready']").unwrap();
    tab.wait_for_element("#chart[data-state='drawn']").unwrap();
    // Days, so that the metric's table per day is shown too.
    choose_and_wait(&tab, "bucket", "1d");
    tab.wait_for_element("#chart-days[data-state='ready']")
        .unwrap();
    for (button, path, file) in [
        ("#stations-csv", "/stations", "stq-stations.csv"),
        ("#yields-csv", "/units/summary", "stq-yields.csv"),
        ("#chart-days-csv", "/metrics/summary", "stq-days.csv"),
        // Issue 52: the unstable measurements' call, every group of the window.
        ("#unstable-csv", "/metrics/control", "stq-unstable.csv"),
    ] {
        forget_calls(&tab);
        tab.find_element(button).unwrap().click().unwrap();
        tab.wait_for_element(&format!("{button}[data-state='saved']"))
            .unwrap();
        let call = last_call(&tab, path);
        assert_eq!(
            parameters(&call).get("format").map(String::as_str),
            Some("csv"),
            "{call}"
        );
        let answer = server.get(&call, Some(DEMO_OPS));
        assert_eq!(answer.status, 200, "{}", answer.context());
        assert!(
            answer.body.lines().count() > 1,
            "{}: rows under the header",
            answer.context()
        );
        let saved = downloads.path().join(file);
        // Chromium writes `<file>.crdownload` and renames it when done.
        let deadline = std::time::Instant::now() + PAGE_TIMEOUT;
        while !saved.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "{file} was never saved"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            std::fs::read_to_string(&saved).unwrap(),
            answer.body,
            "{button}"
        );
    }
}

// ---------------------------------------------------------------------------
// Issue 49: the page follows the streams
// ---------------------------------------------------------------------------

/// Where the live tests' records start.
const LIVE_BASE: &str = "2024-03-10T10:00:00Z";
const LIVE_UNITS: &str = "line.units.jsonl";
const LIVE_METRICS: &str = "line.metrics.jsonl";

/// `LIVE_BASE + offset_seconds`, as a record writes it.
fn live_time(offset_seconds: i64) -> String {
    rfc3339_from_seconds((instant(LIVE_BASE) / SECOND) as i64 + offset_seconds)
}

/// An output unit record of `station` as a snapshot line, with its line end.
fn live_unit(station: &str, serial: &str, result: &str, offset_seconds: i64) -> String {
    format!(
        "{{\"station_id\":\"{station}\",\"unit_serial\":\"{serial}\",\"time_created\":\"{}\",\
         \"unit_type\":\"PCB\",\"direction\":\"output\",\"result\":\"{result}\"}}\n",
        live_time(offset_seconds)
    )
}

/// A `voltage` metric record of ST-01 (limits 3.0 to 3.6) as a snapshot line.
fn live_voltage(value: &str, offset_seconds: i64) -> String {
    format!(
        "{{\"station_id\":\"ST-01\",\"time_created\":\"{}\",\"name\":\"voltage\",\"unit\":\"V\",\
         \"value\":{value},\"limit_lower\":3.0,\"limit_upper\":3.6}}\n",
        live_time(offset_seconds)
    )
}

/// ST-01's first output record and ST-02's one.
fn live_first_units() -> String {
    live_unit("ST-01", "SN-1", "pass", 0) + &live_unit("ST-02", "SN-2", "pass", 60)
}

/// ST-01's three output records and voltages (one out of limits) and ST-02's one
/// output record, watched (`--watch`) by a server with the suite's tokens.
fn live_server() -> (Fixture, Server) {
    let units = live_first_units()
        + &live_unit("ST-01", "SN-3", "fail", 120)
        + &live_unit("ST-01", "SN-3", "pass", 240);
    let metrics = live_voltage("3.3", 0) + &live_voltage("3.1", 120) + &live_voltage("3.9", 240);
    let fixture = Fixture::from_files(&[
        FileSpec::plain(LIVE_UNITS, units),
        FileSpec::plain(LIVE_METRICS, metrics),
    ]);
    let server = Server::start(&fixture, &["--watch"]);
    (fixture, server)
}

fn append(path: &Path, text: &str) {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

/// Replaces `target` whole: `text` is written beside the snapshot directory first.
fn replace_file(fixture: &Fixture, target: &Path, text: &str) {
    let staging = fixture.directory.path().join("staging");
    std::fs::write(&staging, text).unwrap();
    std::fs::rename(&staging, target).unwrap();
}

/// The page's tab with its token, once its view is drawn and its streams are open;
/// a value set in the page at its load, which a reload would lose, is kept in
/// `window.loadedAt`.
fn live_page(browser: &Browser, server: &Server) -> Arc<Tab> {
    let tab = open_page(browser, &server.url("/"));
    evaluate(&tab, "window.loadedAt = performance.timeOrigin; true");
    enter_token(&tab, OPS);
    tab.wait_for_element("#yields[data-state='ready']").unwrap();
    tab.wait_for_element("#chart[data-state='drawn']").unwrap();
    tab.wait_for_element("#live[data-state='live']").unwrap();
    assert_eq!(live_text(&tab), "live");
    tab
}

fn live_text(tab: &Tab) -> String {
    let text = evaluate(tab, "document.getElementById('live').textContent");
    text.as_str().unwrap().to_string()
}

/// The output records column of the yield table, by station.
fn records_shown(tab: &Tab) -> Vec<(String, String)> {
    table(tab, "#yields")
        .into_iter()
        .map(|row| (row[0].clone(), row[1].clone()))
        .collect()
}

fn pairs(rows: &[(&str, &str)]) -> Vec<(String, String)> {
    rows.iter()
        .map(|(station, records)| (station.to_string(), records.to_string()))
        .collect()
}

/// Issue 49 (CONTRACT section 14.2, the page): with the page open, a unit line
/// appended to a snapshot file shows in the yield table and a metric line in the
/// chart, as stq answers the page's window, without a reload of the page; a window
/// from the first to the last record grows to take in a later record; a replaced
/// file (`reset`) has the view asked for again; a revoked token (`error`) shows the
/// API's message and the page stops following. The indicator says "live" and then
/// "stopped". Every wait is for the page to show the change, within `PAGE_TIMEOUT`.
#[test]
fn issue_49_the_page_takes_an_appended_record_without_a_reload() {
    let Some(browser) = browser() else {
        return;
    };
    let (fixture, server) = live_server();
    let tab = live_page(&browser, &server);
    assert_eq!(
        records_shown(&tab),
        pairs(&[("ST-01", "3"), ("ST-02", "1")])
    );
    let window = [value_of(&tab, "from"), value_of(&tab, "to")];
    assert_eq!(window, ["2024-03-10T10:00", "2024-03-10T10:04:01"]);
    assert_eq!(
        [
            attribute(&tab, "#chart", "data-station"),
            attribute(&tab, "#chart", "data-metric"),
            attribute(&tab, "#chart", "data-points"),
            attribute(&tab, "#chart", "data-out-of-limits"),
        ],
        ["ST-01", "voltage", "3", "1"]
    );

    // A unit line inside the window: the yield table takes it, as stq answers the
    // page's own call for the same window.
    append(
        &fixture.snapshots.join(LIVE_UNITS),
        &live_unit("ST-01", "SN-4", "pass", 180),
    );
    tab.wait_for_element("#yields tr[data-station='ST-01'][data-records='4']")
        .unwrap();
    assert_eq!(
        records_shown(&tab),
        pairs(&[("ST-01", "4"), ("ST-02", "1")])
    );
    assert_yields_answer_the_call(&tab, &server, OPS);
    assert_eq!([value_of(&tab, "from"), value_of(&tab, "to")], window);
    // The stations table was asked again too: ST-01 has 4 unit records.
    assert_eq!(table(&tab, "#stations")[0][..2], ["ST-01", "4"]);

    // A metric line after the last record: the window (first to last record) grows
    // to take it in, and the chart draws it, out of limits.
    append(
        &fixture.snapshots.join(LIVE_METRICS),
        &live_voltage("3.7", 300),
    );
    tab.wait_for_element("#chart[data-state='drawn'][data-points='4']")
        .unwrap();
    assert_eq!(attribute(&tab, "#chart", "data-out-of-limits"), "2");
    assert_eq!(value_of(&tab, "to"), "2024-03-10T10:05:01");
    tab.wait_for_element("#yields[data-state='ready']").unwrap();
    let [from, to, _, _] = window_of(&last_call(&tab, "/units/summary"));
    assert_eq!(
        [from.as_str(), to.as_str()],
        ["2024-03-10T10:00:00.000Z", "2024-03-10T10:05:01.000Z"]
    );
    assert_yields_answer_the_call(&tab, &server, OPS);

    // The units file replaced by a shorter one: stq resets the stream, and the
    // page asks for its view again.
    replace_file(
        &fixture,
        &fixture.snapshots.join(LIVE_UNITS),
        &live_first_units(),
    );
    tab.wait_for_element("#yields tr[data-station='ST-01'][data-records='1']")
        .unwrap();
    assert_ne!(attribute(&tab, "#live", "data-resets"), "0");
    assert_eq!(
        records_shown(&tab),
        pairs(&[("ST-01", "1"), ("ST-02", "1")])
    );
    assert_yields_answer_the_call(&tab, &server, OPS);

    // All of it in the page as loaded: no reload, and still live.
    assert_eq!(
        evaluate(&tab, "window.loadedAt === performance.timeOrigin"),
        Value::Bool(true),
        "the page was loaded again"
    );
    assert_eq!(live_text(&tab), "live");
    assert_eq!(attribute(&tab, "#live", "data-state"), "live");

    // The token revoked: stq ends the streams with the 401's body, whose message
    // the page shows, and it follows no more.
    let others = serde_json::json!({
        "tokens": [{"name": "ops-2", "sha256": sha256_hex(OPS2), "stations": "*"}]
    });
    replace_file(&fixture, &fixture.tokens, &others.to_string());
    tab.wait_for_element("#live[data-state='stopped']").unwrap();
    assert_eq!(live_text(&tab), "stopped");
    let refused = server.get("/stations", Some(OPS));
    assert_eq!(refused.status, 401, "{}", refused.context());
    let message = refused.json()["error"]["message"].clone();
    assert_eq!(
        evaluate(&tab, "document.getElementById('error').textContent"),
        message
    );
    // What the page showed stays.
    assert_eq!(
        records_shown(&tab),
        pairs(&[("ST-01", "1"), ("ST-02", "1")])
    );
    assert_eq!(
        evaluate(
            &tab,
            "document.documentElement.dataset.policyViolations || '0'"
        ),
        serde_json::json!("0")
    );
}

/// Issue 49: the streams the page follows are the window's, with the token in the
/// Authorization header only (nothing of it in their URLs); when stq stops
/// (SIGTERM closes every stream) the indicator says "reconnecting" while the page
/// asks again, and the view stays.
#[test]
fn issue_49_the_page_says_reconnecting_when_its_stream_ends() {
    let Some(browser) = browser() else {
        return;
    };
    let (_fixture, server) = live_server();
    let tab = live_page(&browser, &server);
    server.signal("TERM");
    tab.wait_for_element("#live[data-state='reconnecting']")
        .unwrap();
    assert_eq!(live_text(&tab), "reconnecting");
    assert_eq!(
        records_shown(&tab),
        pairs(&[("ST-01", "3"), ("ST-02", "1")])
    );

    // The streams ended, so the browser lists them with the page's calls.
    let from = "2024-03-10T10:00:00.000Z".to_string();
    let units = calls(&tab, "/units/stream");
    assert_eq!(
        parameters(&units[0]),
        BTreeMap::from([("from".to_string(), from.clone())])
    );
    let metrics = calls(&tab, "/metrics/stream");
    assert_eq!(
        parameters(&metrics[0]),
        BTreeMap::from([
            ("from".to_string(), from),
            ("names".to_string(), "voltage".to_string()),
            ("station_ids".to_string(), "ST-01".to_string()),
        ])
    );
}

// ---------------------------------------------------------------------------
// Issue 52: the control view and the Pareto of unstable measurements
// ---------------------------------------------------------------------------

/// The control tests' snapshot file.
const CONTROL_FILE: &str = "control.metrics.jsonl";

/// Where the control tests' records start: one a minute from here.
const CONTROL_BASE: &str = "2024-03-10T08:00:00Z";

/// CT-01's `gap` (limits 8.0 to 12.0), designed so that every one of Nelson's rules
/// fires, each at known points, and no value lies within 1e-3 of a zone boundary:
/// with the window as the baseline, centre 10.05224, sigma 0.53393. A spike (point
/// 9), 9 points above the centre (12 to 20), a fall of 6 (19 to 24 and on), two
/// points beyond 3 sigma below of 3 (31 to 33), 4 of 5 beyond 1 sigma above (37 to
/// 41), 8 beyond 1 sigma on both sides (44 to 51), then 16 points alternating within
/// 1 sigma (52 to 67).
const GAP: [&str; 67] = [
    "10.0", "10.3", "9.8", "10.1", "9.9", "10.2", "9.7", "10.0", "13.0", "10.1", "9.9", "10.4",
    "10.5", "10.3", "10.6", "10.4", "10.5", "10.3", "10.6", "10.4", "10.2", "9.9", "9.6", "9.3",
    "9.0", "8.7", "10.0", "9.9", "10.1", "10.0", "8.3", "9.9", "8.4", "10.1", "9.9", "10.0",
    "10.7", "10.8", "10.2", "10.7", "10.8", "10.0", "9.9", "10.7", "9.3", "10.8", "9.2", "10.7",
    "9.3", "10.8", "9.2", "10.0", "10.1", "9.9", "10.2", "9.8", "10.1", "9.9", "10.2", "9.8",
    "10.1", "9.9", "10.2", "9.8", "10.1", "9.95", "10.05",
];

/// The (point number, rule) pairs of `GAP`, worked out from CONTRACT section 15 by
/// hand and with a short reference of the eight rules, in point then rule order:
/// rule 1 at the spike and the two low points, rule 2 at the 9th and 10th point
/// above, rule 3 at the 6th to 8th point of the fall, rule 5 at the second low point
/// of three, rule 6 at the 4th of 5 above, rule 8 at the 8th of 8 on both sides,
/// rule 4 from the 14th alternating point and rule 7 from the 15th within 1 sigma.
const GAP_RULES: &str =
    "9:1,20:2,21:2,24:3,25:3,26:3,31:1,33:1,33:5,41:6,51:8,65:4,66:4,66:7,67:4,67:7";

/// CT-02's `gap` (limits 4.0 to 6.5): one spike, point 6, beyond 3 sigma.
const GAP_02: [&str; 10] = [
    "5.0", "5.2", "4.9", "5.1", "5.0", "9.0", "5.1", "4.9", "5.0", "5.2",
];

/// CT-01's `flat`: five points that break no rule.
const FLAT: [&str; 5] = ["1", "3", "2", "4", "2"];

/// CT-02's `const`: equal values, so no moving range, no limits and no rule.
const CONST: [&str; 3] = ["2.0", "2.0", "2.0"];

/// A metric line of the control tests: its `index`th point, a minute apart.
fn control_line(
    station: &str,
    name: &str,
    value: &str,
    limits: (&str, &str),
    index: usize,
) -> String {
    let at = rfc3339_from_seconds((instant(CONTROL_BASE) / SECOND) as i64 + 60 * index as i64);
    format!(
        "{{\"station_id\":\"{station}\",\"unit_serial\":\"SN-{station}-{index:03}\",\"time_created\":\"{at}\",\
         \"name\":\"{name}\",\"unit\":\"mm\",\"value\":{value},\"limit_lower\":{},\"limit_upper\":{}}}\n",
        limits.0, limits.1
    )
}

/// The designed series, CT-01's and CT-02's, with the suite's tokens.
fn control_server() -> (Fixture, Server) {
    control_server_with(&[])
}

/// The same, the server started with `extra` flags.
fn control_server_with(extra: &[&str]) -> (Fixture, Server) {
    let mut lines = String::new();
    for (index, value) in GAP.iter().enumerate() {
        lines += &control_line("CT-01", "gap", value, ("8.0", "12.0"), index);
    }
    for (index, value) in FLAT.iter().enumerate() {
        lines += &control_line("CT-01", "flat", value, ("0", "5"), index);
    }
    for (index, value) in GAP_02.iter().enumerate() {
        lines += &control_line("CT-02", "gap", value, ("4.0", "6.5"), index);
    }
    for (index, value) in CONST.iter().enumerate() {
        lines += &control_line("CT-02", "const", value, ("1", "3"), index);
    }
    let fixture = Fixture::from_files(&[FileSpec::plain(CONTROL_FILE, lines)]);
    let server = Server::start(&fixture, extra);
    (fixture, server)
}

/// The (point number, rule) pairs a `/metrics/control` row names, its violations
/// found among `records` (the group's numeric points, in order) by the fields the
/// API returns: what the page must mark.
fn rule_pairs(row: &Value, records: &[Value]) -> String {
    let same = |violation: &Value, record: &Value| {
        ["time_created", "station_id", "unit_serial", "value"]
            .iter()
            .all(|key| violation[key] == record[key])
    };
    let mut pairs = Vec::new();
    for violation in row["violations"].as_array().unwrap() {
        let index = records
            .iter()
            .position(|record| same(violation, record))
            .unwrap_or_else(|| panic!("{violation} names no point"));
        pairs.push(format!("{}:{}", index + 1, violation["rule"]));
    }
    pairs.join(",")
}

/// The control view's statistic `key`: its exact value (empty for null).
fn control_statistic(tab: &Tab, key: &str) -> String {
    attribute(
        tab,
        &format!("#control-stats [data-stat='{key}']"),
        "data-value",
    )
}

/// Waits for the control view to show `metric` of `station`, drawn.
fn wait_for_control(tab: &Tab, station: &str, metric: &str) {
    tab.wait_for_element(&format!(
        "#control-i[data-state='drawn'][data-station='{station}'][data-metric='{metric}']"
    ))
    .unwrap();
    tab.wait_for_element("#control-mr[data-state='drawn']")
        .unwrap();
}

/// Issue 52 (CONTRACT sections 11 and 15): the control view of a designed series
/// marks the points Nelson's rules flag, with their rule numbers, exactly as
/// `/metrics/control` answers the page's own call and as the rules say; its limits
/// are the row's, its MR chart the moving ranges of the points; and the table of
/// unstable measurements lists the window's groups with flags, most first, a click
/// on one showing it. It leaves a screenshot of the view at 1280 x 800.
#[test]
fn issue_52_the_control_view_marks_the_rules_of_a_designed_series() {
    let Some(browser) = browser() else {
        return;
    };
    let (_fixture, server) = control_server();
    let tab = open_page(&browser, &server.url("/"));
    enter_token(&tab, OPS);
    tab.wait_for_element("#unstable[data-state='ready']")
        .unwrap();
    tab.wait_for_element("#chart[data-state='drawn']").unwrap();

    // The table's call: every station the token sees, the window alone.
    let pareto_call = last_call(&tab, "/metrics/control");
    let pareto_call = calls(&tab, "/metrics/control")
        .into_iter()
        .find(|call| !parameters(call).contains_key("names"))
        .unwrap_or(pareto_call);
    assert_eq!(
        parameters(&pareto_call).keys().collect::<Vec<_>>(),
        ["from", "to"],
        "{pareto_call}"
    );

    // The chart's first station and metric: CT-01's flat, no flags.
    wait_for_control(&tab, "CT-01", "flat");
    assert_eq!(attribute(&tab, "#control-i", "data-rules"), "");
    assert_eq!(attribute(&tab, "#control-i", "data-violations"), "0");

    forget_calls(&tab);
    choose(&tab, "chart-metric", "gap");
    wait_for_control(&tab, "CT-01", "gap");
    let call = calls(&tab, "/metrics/control")
        .into_iter()
        .rfind(|call| parameters(call).get("names").map(String::as_str) == Some("gap"))
        .unwrap();
    let sent = parameters(&call);
    assert_eq!(sent["station_ids"], "CT-01", "{call}");
    let [from, to, _, _] = window_of(&call);
    let answer = server.ok_as(&call, OPS).data;
    assert_eq!(answer.len(), 1, "{answer:?}");
    let row = &answer[0];
    let records = server
        .ok_as(
            &format!("/metrics?station_ids=CT-01&names=gap&from={from}&to={to}"),
            OPS,
        )
        .data;
    assert_eq!(records.len(), GAP.len());
    let expected = rule_pairs(row, &records);
    assert_eq!(
        expected, GAP_RULES,
        "/metrics/control's flags of the designed series"
    );
    assert_eq!(attribute(&tab, "#control-i", "data-rules"), expected);
    assert_eq!(attribute(&tab, "#control-i", "data-violations"), "16");
    assert_eq!(row["violations_count"], 16);
    assert_eq!(attribute(&tab, "#control-i", "data-points"), "67");
    assert_eq!(attribute(&tab, "#control-i", "data-limits"), "yes");

    // The limits beside the chart are the row's, figure for figure.
    for key in [
        "points",
        "center",
        "sigma",
        "ucl",
        "lcl",
        "mr_mean",
        "mr_ucl",
        "cpk",
        "ppk",
        "violations_count",
    ] {
        let shown = control_statistic(&tab, key);
        match row[key].as_f64() {
            None => assert_eq!(shown, "", "{key}"),
            Some(figure) => {
                let shown: f64 = serde_json::from_str(&shown).unwrap();
                assert_eq!(shown, figure, "{key}");
            }
        }
    }
    let center = row["center"].as_f64().unwrap();
    let sigma = row["sigma"].as_f64().unwrap();
    assert!(
        (center / 10.052_238_805_970_148 - 1.0).abs() < 1e-9,
        "{row}"
    );
    assert!(
        (sigma / 0.533_929_722_759_509_6 - 1.0).abs() < 1e-9,
        "{row}"
    );

    // The MR chart: the 66 moving ranges of the 67 points, two of them (into and
    // out of the spike) above the row's `mr_ucl`.
    let values: Vec<f64> = GAP.iter().map(|value| value.parse().unwrap()).collect();
    let mr_ucl = row["mr_ucl"].as_f64().unwrap();
    let above = values
        .windows(2)
        .filter(|pair| (pair[1] - pair[0]).abs() > mr_ucl)
        .count();
    assert_eq!(above, 2);
    assert_eq!(attribute(&tab, "#control-mr", "data-points"), "66");
    assert_eq!(
        attribute(&tab, "#control-mr", "data-above-ucl"),
        above.to_string()
    );

    // The flags' table: a row a flagged point, with its rules.
    let flagged: Vec<(String, String)> = strings(
        &tab,
        "JSON.stringify([...document.querySelectorAll('#control-flags tbody tr')]\
         .map(row => row.dataset.point + '=' + row.dataset.rules))",
    )
    .into_iter()
    .map(|text| {
        let (point, rules) = text.split_once('=').unwrap();
        (point.to_string(), rules.to_string())
    })
    .collect();
    let mut by_point: Vec<(String, String)> = Vec::new();
    for pair in GAP_RULES.split(',') {
        let (point, rule) = pair.split_once(':').unwrap();
        match by_point.last_mut() {
            Some((last, rules)) if last == point => *rules += &format!(",{rule}"),
            _ => by_point.push((point.to_string(), rule.to_string())),
        }
    }
    assert_eq!(flagged, by_point);
    let rows = table(&tab, "#control-flags");
    assert_eq!(rows[0][2..], ["SN-CT-01-008", "13.0", "1"]);

    // The unstable measurements: the window's groups with flags, most first, as
    // stq answers the page's call over every station; CT-01's flat has none.
    let groups = server.ok_as(&pareto_call, OPS).data;
    assert_eq!(groups.len(), 4, "{groups:?}");
    let unstable = table(&tab, "#unstable");
    let shown: Vec<[&str; 5]> = unstable
        .iter()
        .map(|row| [0, 1, 2, 3, 4].map(|column| row[column].as_str()))
        .collect();
    assert_eq!(
        shown,
        [
            ["CT-01", "gap", "67", "16", "1, 2, 3, 4, 5, 6, 7, 8"],
            ["CT-02", "gap", "10", "1", "1"],
        ]
    );
    for (shown, name) in unstable.iter().zip(["gap", "gap"]) {
        let group = groups
            .iter()
            .find(|group| group["station_id"] == shown[0].as_str() && group["name"] == name)
            .unwrap();
        assert_eq!(shown[3], group["violations_count"].to_string());
        assert_eq!(
            shown[6..],
            [capability(&group["cpk"]), capability(&group["ppk"])]
        );
    }
    assert_eq!(attribute(&tab, "#unstable", "data-groups"), "4");

    // The picture: the control view at the top of the 1280 x 800 viewport.
    evaluate(
        &tab,
        "document.activeElement.blur(); \
         document.getElementById('control-section').scrollIntoView(); true",
    );
    let screenshot = tab
        .capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true)
        .unwrap();
    assert!(screenshot.starts_with(b"\x89PNG\r\n\x1a\n"));
    let width = u32::from_be_bytes(screenshot[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(screenshot[20..24].try_into().unwrap());
    assert_eq!((width, height), (1280, 800), "the screenshot's size");
    let saved = Path::new(env!("CARGO_TARGET_TMPDIR")).join("control.png");
    std::fs::write(&saved, &screenshot).unwrap();
    if std::env::var_os("STQ_UPDATE_SCREENSHOT").is_some_and(|value| value == "1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/control.png");
        std::fs::write(docs, &screenshot).unwrap();
    }

    // A click on CT-02's row shows its gap: the spike, point 6, rule 1.
    tab.find_element("#unstable tr[data-station='CT-02'][data-metric='gap']")
        .unwrap()
        .click()
        .unwrap();
    wait_for_control(&tab, "CT-02", "gap");
    assert_eq!(attribute(&tab, "#control-i", "data-rules"), "6:1");
    assert_eq!(value_of(&tab, "chart-station"), "CT-02");
    assert_eq!(value_of(&tab, "chart-metric"), "gap");
    tab.wait_for_element("#chart[data-state='drawn'][data-station='CT-02'][data-metric='gap']")
        .unwrap();

    // Equal values: a row without limits, drawn without them, and no flag.
    choose(&tab, "chart-metric", "const");
    wait_for_control(&tab, "CT-02", "const");
    assert_eq!(attribute(&tab, "#control-i", "data-limits"), "none");
    assert_eq!(attribute(&tab, "#control-i", "data-rules"), "");
    assert_eq!(attribute(&tab, "#control-i", "data-points"), "3");
    for key in ["center", "sigma", "ucl", "lcl", "cpk", "ppk"] {
        assert_eq!(control_statistic(&tab, key), "", "{key}");
    }
    let summary = evaluate(
        &tab,
        "document.getElementById('control-summary').textContent",
    );
    assert!(
        summary.as_str().unwrap().contains("no control limits"),
        "{summary}"
    );
    assert_eq!(
        evaluate(
            &tab,
            "document.documentElement.dataset.policyViolations || '0'"
        ),
        serde_json::json!("0")
    );
}

/// Issue 52 with issue 49's streams: points appended to the watched snapshot file
/// show in the control view and in the unstable measurements without a reload, as
/// `/metrics/control` answers the page's calls: six points below the centre after
/// CT-02's spike make a run of 9 (rule 2 at points 15 and 16).
#[test]
fn issue_52_the_control_view_takes_appended_points_without_a_reload() {
    let Some(browser) = browser() else {
        return;
    };
    let (fixture, server) = control_server_with(&["--watch"]);
    let tab = open_page(&browser, &server.url("/"));
    evaluate(&tab, "window.loadedAt = performance.timeOrigin; true");
    enter_token(&tab, OPS);
    tab.wait_for_element("#unstable tr[data-station='CT-02'][data-violations='1']")
        .unwrap();
    tab.find_element("#unstable tr[data-station='CT-02'][data-metric='gap']")
        .unwrap()
        .click()
        .unwrap();
    wait_for_control(&tab, "CT-02", "gap");
    assert_eq!(attribute(&tab, "#control-i", "data-rules"), "6:1");
    tab.wait_for_element("#live[data-state='live']").unwrap();

    let added: String = ["5.1", "5.0", "4.9", "5.0", "5.1", "5.0"]
        .iter()
        .enumerate()
        .map(|(offset, value)| {
            control_line("CT-02", "gap", value, ("4.0", "6.5"), GAP_02.len() + offset)
        })
        .collect();
    forget_calls(&tab);
    append(&fixture.snapshots.join(CONTROL_FILE), &added);
    tab.wait_for_element("#control-i[data-state='drawn'][data-station='CT-02'][data-points='16']")
        .unwrap();
    let call = calls(&tab, "/metrics/control")
        .into_iter()
        .rfind(|call| parameters(call).get("names").map(String::as_str) == Some("gap"))
        .unwrap();
    let row = &server.ok_as(&call, OPS).data[0];
    let [from, to, _, _] = window_of(&call);
    let records = server
        .ok_as(
            &format!("/metrics?station_ids=CT-02&names=gap&from={from}&to={to}"),
            OPS,
        )
        .data;
    assert_eq!(rule_pairs(row, &records), "6:1,15:2,16:2");
    assert_eq!(attribute(&tab, "#control-i", "data-rules"), "6:1,15:2,16:2");
    assert_eq!(attribute(&tab, "#control-mr", "data-points"), "15");
    tab.wait_for_element("#unstable tr[data-station='CT-02'][data-violations='3']")
        .unwrap();
    assert_eq!(
        table(&tab, "#unstable")
            .iter()
            .map(|row| (row[0].clone(), row[3].clone(), row[4].clone()))
            .collect::<Vec<_>>(),
        [
            (
                "CT-01".to_string(),
                "16".to_string(),
                "1, 2, 3, 4, 5, 6, 7, 8".to_string()
            ),
            ("CT-02".to_string(), "3".to_string(), "1, 2".to_string()),
        ]
    );
    assert_eq!(
        evaluate(&tab, "window.loadedAt === performance.timeOrigin"),
        Value::Bool(true),
        "the page was loaded again"
    );
}
