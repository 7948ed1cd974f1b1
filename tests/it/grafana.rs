//! Issue 24, a Grafana starting point: `docs/grafana/datasource.yaml` provisions an
//! Infinity data source for stq, and `docs/grafana/stq-dashboard.json` is a dashboard
//! to import over it. Grafana and the Infinity plugin cannot run here, so these tests
//! do with the two files what Infinity 3.11.1 does with them (read from its source and
//! that of its `jsonframer`/`gframer` libraries), against the real binary on the
//! sample snapshot:
//!
//! - the provisioning file is read (a small reader for the YAML it uses: maps, lists,
//!   scalars; no YAML crate is a dependency): an Infinity data source with a base URL,
//!   bearer-token authentication whose token comes from Grafana's environment, and
//!   allowed hosts that admit every URL the dashboard asks for (Infinity refuses any
//!   other, with or without a base URL);
//! - the dashboard's import inputs name that plugin, and every panel, query and
//!   variable uses the data source input;
//! - every variable's and panel's query is an Infinity JSON query from a URL, parsed in
//!   the backend; its URL is interpolated as Grafana and Infinity would (the `station`
//!   variable from the answer of its own query, the `metric` box's default, the time
//!   macros with a window over the sample's records), joined to the base URL, its
//!   query string re-encoded as Go's `url.Values` does, and sent with the headers
//!   Infinity sends (the bearer token, `Accept: application/json;q=0.9,text/plain`);
//!   with every station selected (All), and with each station alone;
//! - the answer is a 200 whose `root_selector` path is a non-empty array, and every
//!   column's selector names a field of every row, of the column's type as Infinity
//!   converts it (a number column takes JSON numbers and decimal strings, a timestamp
//!   column strings Go's RFC 3339 parser reads); a time series panel has a timestamp
//!   and a number column, and its rows are in time order within each series the
//!   panel's `partitionByValues` transformation splits them into.
//!
//! `issue_24_the_grafana_check_fails_on_a_wrong_field_parameter_or_type` proves the
//! check can fail: a copy of the files with one mistake each (a misspelt field, a bad
//! or unknown parameter, a wrong column type or root, a list variable without `:csv`, a
//! wrong path for the station variable, an allowed host that does not match, a token
//! written into the provisioning file) must each be reported.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value;

use crate::common::{civil_from_days, instant, serve_args, Server};

/// The demo token of the sample snapshot that sees every station (README.md).
const DEMO_OPS: &str = "stq-demo-ops";
const INFINITY: &str = "yesoreyeram-infinity-datasource";
/// What Infinity sends as `Accept` with a JSON query (`ApplyAcceptHeader`).
const INFINITY_ACCEPT: &str = "application/json;q=0.9,text/plain";
/// The column types of an Infinity query.
const COLUMN_TYPES: [&str; 6] = [
    "string",
    "number",
    "timestamp",
    "timestamp_epoch",
    "timestamp_epoch_s",
    "boolean",
];

fn repository_file(relative_path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative_path);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("read {relative_path}: {error}"))
}

/// stq on the sample snapshot with its demo tokens, started once for this module.
fn sample_server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let snapshots = Path::new(env!("CARGO_MANIFEST_DIR")).join("snapshots");
        let tokens = snapshots.join("tokens.json");
        Server::spawn(&serve_args(&snapshots, &tokens, &[]), &[])
    })
}

// ---------------------------------------------------------------------------
// The provisioning file
// ---------------------------------------------------------------------------

/// The YAML the provisioning file uses, flattened to `path -> scalar`, the path's
/// parts joined by `.` (list items by their index): `datasources.0.jsonData.auth_method`.
/// Block maps and lists by indentation (lists indented under their key), `#`
/// comments, plain and quoted scalars: no flow style, anchors or multi-line scalars.
fn flatten_yaml(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut flat = BTreeMap::new();
    // The open maps and lists: (indentation of the line that opened it, its path).
    let mut open: Vec<(usize, String)> = Vec::new();
    let mut items: BTreeMap<String, usize> = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        let at = |reason: &str| format!("line {}: {reason}: {line:?}", number + 1);
        let content = match line.find(" #") {
            Some(comment) => &line[..comment],
            None => line,
        };
        let trimmed = content.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if content.starts_with('\t') {
            return Err(at("a tab for indentation"));
        }
        let mut indent = content.len() - content.trim_start().len();
        while open.last().is_some_and(|(opened, _)| *opened >= indent) {
            open.pop();
        }
        let mut parent = open.last().map(|(_, path)| path.clone());
        let mut entry = trimmed;
        if let Some(item) = entry.strip_prefix("- ").or((entry == "-").then_some("")) {
            let list = parent.clone().ok_or_else(|| at("a list item at the top"))?;
            let index = items.entry(list.clone()).or_insert(0);
            let path = format!("{list}.{index}");
            *index += 1;
            if key_value(item.trim()).is_none() {
                flat.insert(path, unquote(item.trim()));
                continue;
            }
            // A map as the item: its first key is on the dash's line.
            open.push((indent, path.clone()));
            parent = Some(path);
            indent += 2;
            entry = item.trim();
        }
        let (key, value) = key_value(entry).ok_or_else(|| at("no `key:`"))?;
        let path = match parent {
            Some(parent) => format!("{parent}.{}", key.trim()),
            None => key.trim().to_owned(),
        };
        match value.trim() {
            "" => open.push((indent, path)),
            value => {
                flat.insert(path, unquote(value));
            }
        }
    }
    Ok(flat)
}

/// `key: value` or `key:` (a map or list follows).
fn key_value(entry: &str) -> Option<(&str, &str)> {
    match entry.strip_suffix(':') {
        Some(key) => Some((key, "")),
        None => entry.split_once(": "),
    }
}

fn unquote(scalar: &str) -> String {
    for quote in ['"', '\''] {
        if scalar.len() >= 2 && scalar.starts_with(quote) && scalar.ends_with(quote) {
            return scalar[1..scalar.len() - 1].to_owned();
        }
    }
    scalar.to_owned()
}

/// What the dashboard's queries need of the provisioned data source.
#[derive(Debug)]
struct DataSource {
    /// The base URL every query's URL follows.
    url: String,
    allowed_hosts: Vec<String>,
}

fn data_source(yaml: &str, problems: &mut Vec<String>) -> Option<DataSource> {
    let flat = match flatten_yaml(yaml) {
        Ok(flat) => flat,
        Err(error) => {
            problems.push(format!("datasource.yaml: {error}"));
            return None;
        }
    };
    let get = |key: &str| {
        flat.get(&format!("datasources.0.{key}"))
            .map(String::as_str)
    };
    let mut expect = |key: &str, wanted: &str| {
        if get(key) != Some(wanted) {
            problems.push(format!(
                "datasource.yaml: {key} is {:?}, not {wanted:?}",
                get(key)
            ));
        }
    };
    expect("type", INFINITY);
    expect("jsonData.auth_method", "bearerToken");
    if flat.get("apiVersion").map(String::as_str) != Some("1") {
        problems.push("datasource.yaml: apiVersion is not 1".into());
    }
    if flat.keys().any(|key| key.starts_with("datasources.1.")) {
        problems.push("datasource.yaml: more than one data source".into());
    }
    let url = get("url").unwrap_or_default().to_owned();
    if !(url.starts_with("http://") || url.starts_with("https://")) || url.ends_with('/') {
        problems.push(format!(
            "datasource.yaml: url {url:?} is not an http(s) base URL without a trailing /"
        ));
    }
    let token = get("secureJsonData.bearerToken").unwrap_or_default();
    // Grafana replaces `$NAME` and `${NAME}` in a provisioning file by the environment.
    let token_variable = token
        .strip_prefix("${")
        .and_then(|rest| rest.strip_suffix('}'))
        .or_else(|| token.strip_prefix('$'))
        .filter(|name| {
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        });
    if token_variable.is_none() {
        problems.push(format!(
            "datasource.yaml: secureJsonData.bearerToken is {token:?}, not `$VARIABLE` (no token in the file)"
        ));
        return None;
    }
    let allowed_hosts: Vec<String> = (0..)
        .map_while(|index| get(&format!("jsonData.allowedHosts.{index}")))
        .map(str::to_owned)
        .collect();
    if allowed_hosts.is_empty() {
        problems.push("datasource.yaml: no jsonData.allowedHosts".into());
    }
    Some(DataSource { url, allowed_hosts })
}

/// The host name of an http(s) URL.
fn host_name(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    match authority.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    }
}

/// Infinity's `CanAllowURL`: some allowed entry is a prefix of the URL and names its host.
fn allowed(url: &str, allowed_hosts: &[String]) -> bool {
    allowed_hosts.is_empty()
        || allowed_hosts
            .iter()
            .any(|entry| url.starts_with(entry.as_str()) && host_name(entry) == host_name(url))
}

// ---------------------------------------------------------------------------
// The dashboard's queries
// ---------------------------------------------------------------------------

/// One Infinity query of the dashboard.
struct Query<'a> {
    /// Where it is, for messages: `panel 2 "First-pass yield per hour", query A`.
    place: String,
    spec: &'a Value,
    /// The panel's type (`timeseries`, `table`); `None` for a variable's query.
    panel_type: Option<&'a str>,
    /// The fields its panel's `partitionByValues` transformations split series by.
    series_fields: Vec<String>,
    /// Its panel's `filterByValue` filters: (field, Grafana's matcher id, the value).
    value_filters: Vec<(String, String, Value)>,
    /// The display names its table panel sorts by (`options.sortBy`).
    sorted_by: Vec<String>,
    /// Its panel's field overrides' display names: display name -> field.
    display_names: BTreeMap<String, String>,
}

/// A panel's `filterByValue` filters, its sort and its display names, for `Query`.
type PanelView = (
    Vec<(String, String, Value)>,
    Vec<String>,
    BTreeMap<String, String>,
);

fn panel_view(panel: &Value) -> PanelView {
    let filters = panel["transformations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|transformation| transformation["id"] == "filterByValue")
        .flat_map(|transformation| {
            transformation["options"]["filters"]
                .as_array()
                .into_iter()
                .flatten()
        })
        .map(|filter| {
            (
                filter["fieldName"].as_str().unwrap_or_default().to_owned(),
                filter["config"]["id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                filter["config"]["options"]["value"].clone(),
            )
        })
        .collect();
    let sorted_by = panel["options"]["sortBy"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|sort| sort["displayName"].as_str().map(str::to_owned))
        .collect();
    let mut display_names = BTreeMap::new();
    for rule in panel["fieldConfig"]["overrides"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let field = rule["matcher"]["options"].as_str().unwrap_or_default();
        for property in rule["properties"].as_array().into_iter().flatten() {
            if let (true, Some(name)) =
                (property["id"] == "displayName", property["value"].as_str())
            {
                display_names.insert(name.to_owned(), field.to_owned());
            }
        }
    }
    (filters, sorted_by, display_names)
}

/// The `filterByValue` matchers of numbers this test applies (Grafana's value matchers).
const VALUE_MATCHERS: [&str; 6] = [
    "greater",
    "greaterOrEqual",
    "lower",
    "lowerOrEqual",
    "equal",
    "notEqual",
];

/// Whether a row passes a `filterByValue` filter (Grafana's value matchers).
fn passes(row: &Value, (field, matcher, value): &(String, String, Value)) -> Option<bool> {
    let cell = row.get(field.as_str())?.as_f64()?;
    let limit = value.as_f64()?;
    Some(match matcher.as_str() {
        "greater" => cell > limit,
        "greaterOrEqual" => cell >= limit,
        "lower" => cell < limit,
        "lowerOrEqual" => cell <= limit,
        "equal" => cell == limit,
        "notEqual" => cell != limit,
        _ => return None,
    })
}

/// A table panel's view of its rows: every `filterByValue` filter names a number
/// column and a matcher this test knows, every field it sorts by is one of its
/// columns (by its display name), and with every station selected the filters leave
/// rows to show. Returns the rows left.
fn check_view(query: &Query, rows: &[Value], all: bool, problems: &mut Vec<String>) -> usize {
    let columns: BTreeMap<&str, &str> = query.spec["columns"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|column| {
            (
                column["selector"].as_str().unwrap_or_default(),
                column["type"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    for (field, matcher, value) in &query.value_filters {
        if columns.get(field.as_str()) != Some(&"number") {
            problems.push(format!(
                "{}: filterByValue on {field:?}, which is not a number column",
                query.place
            ));
        }
        if !VALUE_MATCHERS.contains(&matcher.as_str()) || !value.is_number() {
            problems.push(format!(
                "{}: filterByValue matcher {matcher:?} with {value}: one this test does not know",
                query.place
            ));
        }
    }
    for name in &query.sorted_by {
        let field = query
            .display_names
            .get(name)
            .map_or(name.as_str(), String::as_str);
        if !columns.contains_key(field) {
            problems.push(format!(
                "{}: the table sorts by {name:?}, which names no column",
                query.place
            ));
        }
    }
    let left = rows
        .iter()
        .filter(|row| {
            query
                .value_filters
                .iter()
                .all(|filter| passes(row, filter).unwrap_or(false))
        })
        .count();
    if all && !rows.is_empty() && left == 0 {
        problems.push(format!(
            "{}: its filterByValue transformation leaves no row with every station selected",
            query.place
        ));
    }
    left
}

/// Every panel's queries (rows' panels too), in order.
fn panel_queries<'a>(dashboard: &'a Value, problems: &mut Vec<String>) -> Vec<Query<'a>> {
    let mut panels: Vec<&Value> = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        panels.push(panel);
        panels.extend(panel["panels"].as_array().into_iter().flatten());
    }
    let mut queries = Vec::new();
    for panel in panels {
        let panel_type = panel["type"].as_str().unwrap_or_default();
        if panel_type == "row" {
            continue;
        }
        let name = format!("panel {} {}", panel["id"], panel["title"]);
        let targets = panel["targets"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        if targets.is_empty() {
            problems.push(format!("{name}: no query"));
        }
        let series_fields: Vec<String> = panel["transformations"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|transformation| transformation["id"] == "partitionByValues")
            .flat_map(|transformation| {
                transformation["options"]["fields"]
                    .as_array()
                    .into_iter()
                    .flatten()
            })
            .filter_map(|field| field.as_str().map(str::to_owned))
            .collect();
        let (value_filters, sorted_by, display_names) = panel_view(panel);
        for target in targets {
            queries.push(Query {
                place: format!("{name}, query {}", target["refId"]),
                spec: target,
                panel_type: Some(panel_type),
                series_fields: series_fields.clone(),
                value_filters: value_filters.clone(),
                sorted_by: sorted_by.clone(),
                display_names: display_names.clone(),
            });
        }
    }
    if queries.is_empty() {
        problems.push("the dashboard has no panel queries".into());
    }
    queries
}

/// The import inputs: the data source input's name, when the inputs and requirements
/// are as an import needs them; and every data source reference uses it.
fn check_import(dashboard: &Value, problems: &mut Vec<String>) -> String {
    let inputs: Vec<&Value> = dashboard["__inputs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|input| input["type"] == "datasource" && input["pluginId"] == INFINITY)
        .collect();
    let [input] = inputs.as_slice() else {
        problems.push(format!(
            "__inputs: {} data source inputs of {INFINITY}, not one",
            inputs.len()
        ));
        return String::new();
    };
    let name = input["name"].as_str().unwrap_or_default().to_owned();
    let required = |kind: &str, id: &str| {
        dashboard["__requires"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|item| item["type"] == kind && item["id"] == id)
    };
    if !required("datasource", INFINITY) || !required("grafana", "grafana") {
        problems.push(format!("__requires lacks grafana or {INFINITY}"));
    }
    if !dashboard["id"].is_null() {
        problems.push("a dashboard to import has `\"id\": null`".into());
    }
    // Every `datasource` object anywhere: panels, queries, variables.
    fn references<'a>(value: &'a Value, found: &mut Vec<&'a Value>) {
        match value {
            Value::Object(object) => {
                for (key, inner) in object {
                    if key == "datasource" && inner.is_object() {
                        found.push(inner);
                    } else {
                        references(inner, found);
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| references(item, found)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    references(&dashboard["panels"], &mut found);
    references(&dashboard["templating"], &mut found);
    let wanted = format!("${{{name}}}");
    for reference in &found {
        if reference["type"] != INFINITY || reference["uid"] != wanted.as_str() {
            problems.push(format!("a data source reference {reference}, not {wanted}"));
        }
    }
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        let kind = panel["type"].as_str().unwrap_or_default();
        if kind != "row" && !required("panel", kind) {
            problems.push(format!("__requires lacks the panel type {kind:?}"));
        }
    }
    name
}

/// The shape Infinity needs of a query the test can send.
fn check_shape(query: &Query, problems: &mut Vec<String>) {
    let spec = query.spec;
    let mut expect = |key: &str, wanted: &str| {
        if spec[key] != wanted {
            problems.push(format!(
                "{}: {key} is {}, not {wanted:?}",
                query.place, spec[key]
            ));
        }
    };
    expect("type", "json");
    expect("source", "url");
    expect("parser", "backend");
    expect("format", "table");
    if spec["url_options"]["method"] != "GET" {
        problems.push(format!("{}: url_options.method is not GET", query.place));
    }
    if !matches!(spec["pagination_mode"].as_str(), None | Some("none")) {
        problems.push(format!(
            "{}: pagination, which this test does not follow",
            query.place
        ));
    }
    let columns = spec["columns"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if columns.is_empty() {
        problems.push(format!("{}: no columns", query.place));
    }
    for column in columns {
        let selector = column["selector"].as_str().unwrap_or_default();
        let kind = column["type"].as_str().unwrap_or_default();
        if selector.is_empty() || !COLUMN_TYPES.contains(&kind) {
            problems.push(format!("{}: a column {column}", query.place));
        }
        // Some versions of Infinity's framer key a row by the alias (`text`) and then
        // look the column up by its selector, dropping it when the two differ.
        if !matches!(column["text"].as_str(), None | Some("")) && column["text"] != selector {
            problems.push(format!(
                "{}: column {selector:?} has the alias {}; name it in the panel instead",
                query.place, column["text"]
            ));
        }
    }
}

// ---------------------------------------------------------------------------
// Interpolation, as Grafana and Infinity do it
// ---------------------------------------------------------------------------

/// Values of the dashboard's variables in one run: a multi-value selection is a list.
type Selection = BTreeMap<String, Vec<String>>;

/// Unix milliseconds as `2006-01-02T15:04:05.999Z` (Go), Infinity's `:date:iso`.
fn go_iso(milliseconds: i64) -> String {
    let seconds = milliseconds.div_euclid(1000);
    let millis = milliseconds.rem_euclid(1000);
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    let second_of_day = seconds.rem_euclid(86_400);
    let mut text = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    );
    if millis != 0 {
        text.push_str(format!(".{millis:03}").trim_end_matches('0'));
    }
    text.push('Z');
    text
}

/// A time macro: `${__timeFrom}`, `${__timeTo:date:iso}` (Infinity, in the backend) or
/// `${__from:date:iso}` (Grafana, in the browser: always three fraction digits).
fn time_macro(name: &str, format: Option<&str>, window: (i64, i64)) -> Option<String> {
    let (milliseconds, grafana) = match name {
        "__timeFrom" => (window.0, false),
        "__timeTo" => (window.1, false),
        "__from" => (window.0, true),
        "__to" => (window.1, true),
        _ => return None,
    };
    Some(match format {
        None => milliseconds.to_string(),
        Some("date:seconds") => milliseconds.div_euclid(1000).to_string(),
        Some("date" | "date:iso") if grafana => {
            let text = go_iso(milliseconds.div_euclid(1000) * 1000);
            format!(
                "{}.{:03}Z",
                text.trim_end_matches('Z'),
                milliseconds.rem_euclid(1000)
            )
        }
        Some("date" | "date:iso") => go_iso(milliseconds),
        Some(_) => return None,
    })
}

/// `text` with `$name`, `${name}`, `${name:csv}` and the time macros replaced.
fn interpolate(text: &str, selection: &Selection, window: (i64, i64)) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        let (reference, after) = if let Some(braced) = rest.strip_prefix('{') {
            let end = braced
                .find('}')
                .ok_or(format!("an unclosed ${{ in {text:?}"))?;
            (&braced[..end], &braced[end + 1..])
        } else {
            let end = rest
                .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .unwrap_or(rest.len());
            (&rest[..end], &rest[end..])
        };
        let (name, format) = match reference.split_once(':') {
            Some((name, format)) => (name, Some(format)),
            None => (reference, None),
        };
        if let Some(value) = time_macro(name, format, window) {
            out.push_str(&value);
        } else if let Some(values) = selection.get(name) {
            match (format, values.as_slice()) {
                (Some("csv"), _) => out.push_str(&values.join(",")),
                (None, [one]) => out.push_str(one),
                (None, _) => {
                    return Err(format!(
                        "${name} holds a list here; write ${{{name}:csv}}, as stq's lists are comma-separated"
                    ))
                }
                (Some(format), _) => {
                    return Err(format!("${{{name}:{format}}}: a format this test does not know"))
                }
            }
        } else {
            return Err(format!("${reference}: no such variable or macro"));
        }
        rest = after;
    }
    out.push_str(rest);
    if out.contains("[[") {
        return Err(format!(
            "{text:?}: [[name]] is not interpolated by this test"
        ));
    }
    Ok(out)
}

/// Go's `url.QueryEscape`.
fn query_escape(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char);
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// Go's `url.QueryUnescape`; `None` where Go gives an error.
fn query_unescape(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'%' => {
                let hex = text.get(at + 1..at + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                at += 3;
            }
            b'+' => {
                out.push(b' ');
                at += 1;
            }
            byte => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The path and query Infinity requests for a query's interpolated URL: its query
/// string parsed (`u.Query()`), the query's `url_options.params` added, and encoded
/// again with the keys sorted (`q.Encode()`), as `GetQueryURL` does.
fn infinity_path(url: &str, params: &[(String, String)]) -> String {
    let (path, raw_query) = url.split_once('?').unwrap_or((url, ""));
    let mut pairs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for part in raw_query.split('&').filter(|part| !part.is_empty()) {
        if part.contains(';') {
            continue;
        }
        let (key, value) = part.split_once('=').unwrap_or((part, ""));
        if let (Some(key), Some(value)) = (query_unescape(key), query_unescape(value)) {
            pairs.entry(key).or_default().push(value);
        }
    }
    for (key, value) in params {
        pairs.entry(key.clone()).or_default().push(value.clone());
    }
    let encoded: Vec<String> = pairs
        .iter()
        .flat_map(|(key, values)| {
            values
                .iter()
                .map(move |value| format!("{}={}", query_escape(key), query_escape(value)))
        })
        .collect();
    if encoded.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", encoded.join("&"))
    }
}

// ---------------------------------------------------------------------------
// Sending a query and reading its answer as Infinity does
// ---------------------------------------------------------------------------

/// The value at a gjson path of plain keys (`data`, `meta.next_cursor`).
fn at_path<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(value, |inner, key| inner.as_object()?.get(key))
}

/// Go's `time.Parse(time.RFC3339, ...)`, which also reads a fraction of a second:
/// `YYYY-MM-DDTHH:MM:SS[.F]` then `Z` or `+HH:MM`. Returns the instant.
fn go_rfc3339(text: &str) -> Option<i128> {
    let bytes = text.as_bytes();
    let shape = b"dddd-dd-ddTdd:dd:dd";
    if bytes.len() < shape.len() {
        return None;
    }
    for (byte, expected) in bytes.iter().zip(shape) {
        if !(*expected == b'd' && byte.is_ascii_digit() || byte == expected) {
            return None;
        }
    }
    let mut rest = &text[shape.len()..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = &fraction[digits..];
    }
    let zone = rest.as_bytes();
    let offset_ok = zone.len() == 6
        && (zone[0] == b'+' || zone[0] == b'-')
        && zone[1..3].iter().all(u8::is_ascii_digit)
        && zone[3] == b':'
        && zone[4..6].iter().all(u8::is_ascii_digit);
    (rest == "Z" || offset_ok).then(|| instant(text))
}

/// Whether a value fits a column of `kind` as Infinity's framer converts it. `null`
/// (and, for numbers, `""`, an absent limit) is an empty cell; anything Infinity would
/// silently turn into an empty cell is a mismatch.
fn fits(kind: &str, value: &Value) -> bool {
    match (kind, value) {
        (_, Value::Null) => true,
        ("string", Value::String(_)) | ("boolean", Value::Bool(_)) => true,
        ("number", Value::Number(_)) => true,
        ("number", Value::String(text)) => {
            text.is_empty() || text.parse::<f64>().is_ok_and(f64::is_finite)
        }
        ("timestamp", Value::String(text)) => go_rfc3339(text).is_some(),
        ("timestamp_epoch" | "timestamp_epoch_s", Value::Number(number)) => number.is_i64(),
        ("timestamp_epoch" | "timestamp_epoch_s", Value::String(text)) => {
            text.parse::<i64>().is_ok()
        }
        _ => false,
    }
}

/// Whether a value makes a cell that is not empty.
fn filled(value: &Value) -> bool {
    !value.is_null() && value != ""
}

/// Runs one query as Infinity would and returns its rows; what is wrong goes to
/// `problems`.
fn run(
    query: &Query,
    selection: &Selection,
    window: (i64, i64),
    source: &DataSource,
    server: &Server,
    token: &str,
    problems: &mut Vec<String>,
) -> Vec<Value> {
    let spec = query.spec;
    let run_name = || {
        let chosen: Vec<String> = selection
            .iter()
            .map(|(name, values)| format!("{name}={}", values.join(",")))
            .collect();
        format!("{} [{}]", query.place, chosen.join(" "))
    };
    let url = spec["url"].as_str().unwrap_or_default();
    if !url.starts_with('/') {
        problems.push(format!(
            "{}: url {url:?} is not a path after the data source's base URL",
            query.place
        ));
        return Vec::new();
    }
    let interpolated = match interpolate(url, selection, window) {
        Ok(interpolated) => interpolated,
        Err(error) => {
            problems.push(format!("{}: {error}", query.place));
            return Vec::new();
        }
    };
    let params: Vec<(String, String)> = spec["url_options"]["params"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|param| {
            let value = param["value"].as_str().unwrap_or_default();
            let value = interpolate(value, selection, window).unwrap_or_else(|error| {
                problems.push(format!("{}: {error}", query.place));
                String::new()
            });
            (param["key"].as_str().unwrap_or_default().to_owned(), value)
        })
        .collect();
    let path = infinity_path(&interpolated, &params);
    let configured = format!("{}{path}", source.url);
    if !allowed(&configured, &source.allowed_hosts) {
        problems.push(format!(
            "{}: Infinity refuses {configured}: no allowed host {:?} admits it",
            query.place, source.allowed_hosts
        ));
        return Vec::new();
    }
    let authorization = format!("Bearer {token}");
    let response = server.request(
        "GET",
        &path,
        &[
            ("Authorization", &authorization),
            ("Accept", INFINITY_ACCEPT),
        ],
    );
    if response.status != 200 {
        problems.push(format!("{}: {}", run_name(), response.context()));
        return Vec::new();
    }
    let Ok(body) = serde_json::from_str::<Value>(&response.body) else {
        problems.push(format!("{}: not JSON: {}", run_name(), response.context()));
        return Vec::new();
    };
    let root = spec["root_selector"].as_str().unwrap_or_default();
    if root.is_empty()
        || !root
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.".contains(&b))
    {
        problems.push(format!(
            "{}: root_selector {root:?} is not a path of keys (the test reads no other)",
            query.place
        ));
        return Vec::new();
    }
    let rows = match at_path(&body, root) {
        Some(Value::Array(rows)) if !rows.is_empty() => rows.clone(),
        Some(Value::Array(_)) => {
            problems.push(format!("{}: {root} is an empty array: {path}", run_name()));
            return Vec::new();
        }
        other => {
            problems.push(format!(
                "{}: {root} is {other:?}, not an array: {path}",
                run_name()
            ));
            return Vec::new();
        }
    };
    for column in spec["columns"].as_array().into_iter().flatten() {
        let selector = column["selector"].as_str().unwrap_or_default();
        let kind = column["type"].as_str().unwrap_or_default();
        let cells: Vec<Option<&Value>> = rows.iter().map(|row| at_path(row, selector)).collect();
        if let Some(row) = cells.iter().position(Option::is_none) {
            problems.push(format!(
                "{}: column {selector:?}: row {row} has no such field: {}",
                run_name(),
                rows[row]
            ));
            continue;
        }
        let cells: Vec<&Value> = cells.into_iter().flatten().collect();
        if let Some(cell) = cells.iter().find(|cell| !fits(kind, cell)) {
            problems.push(format!(
                "{}: column {selector:?} is a {kind} column, but holds {cell}",
                run_name()
            ));
        } else if !cells.iter().any(|cell| filled(cell)) {
            problems.push(format!(
                "{}: column {selector:?} is empty in every row",
                run_name()
            ));
        }
    }
    if query.panel_type == Some("timeseries") {
        check_series(query, &rows, &run_name(), problems);
    }
    rows
}

/// A time series panel: a timestamp column, a number column, and its rows in time
/// order within each series its transformations split them into.
fn check_series(query: &Query, rows: &[Value], run_name: &str, problems: &mut Vec<String>) {
    let columns: Vec<(&str, &str)> = query.spec["columns"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|column| {
            (
                column["selector"].as_str().unwrap_or_default(),
                column["type"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    let times: Vec<&str> = columns
        .iter()
        .filter(|(_, kind)| *kind == "timestamp")
        .map(|(selector, _)| *selector)
        .collect();
    let [time] = times.as_slice() else {
        problems.push(format!(
            "{}: a time series needs one timestamp column, not {times:?}",
            query.place
        ));
        return;
    };
    if !columns.iter().any(|(_, kind)| *kind == "number") {
        problems.push(format!(
            "{}: a time series without a number column",
            query.place
        ));
    }
    for field in &query.series_fields {
        if !columns.contains(&(field.as_str(), "string")) {
            problems.push(format!(
                "{}: the series are split by {field:?}, which is not a string column",
                query.place
            ));
        }
    }
    let mut last: BTreeMap<Vec<String>, i128> = BTreeMap::new();
    for row in rows {
        let key: Vec<String> = query
            .series_fields
            .iter()
            .map(|field| row[field.as_str()].to_string())
            .collect();
        let Some(at) = row[*time].as_str().and_then(go_rfc3339) else {
            continue; // reported with the column
        };
        if last.get(&key).is_some_and(|previous| *previous > at) {
            problems.push(format!(
                "{run_name}: series {key:?} is not in time order at {row}"
            ));
            return;
        }
        last.insert(key, at);
    }
}

/// What checking the two files against stq found.
struct Checked {
    /// Everything wrong with the dashboard and the provisioning file.
    problems: Vec<String>,
    /// How many times a query was sent and answered with rows.
    answered: usize,
    /// Each panel query's rows with All selected, and how many its panel's filters leave.
    shown: BTreeMap<String, (Vec<Value>, usize)>,
}

fn check(dashboard: &Value, yaml: &str, server: &Server, token: &str) -> Checked {
    let mut problems = Vec::new();
    let mut answered = 0;
    let source = data_source(yaml, &mut problems);
    let input = check_import(dashboard, &mut problems);
    let queries = panel_queries(dashboard, &mut problems);
    let Some(source) = source else {
        return Checked {
            problems,
            answered,
            shown: BTreeMap::new(),
        };
    };
    // Grafana takes the token from its environment: here, `token`.
    // The window: from the first record of the sample to just after its last, in ms.
    let stations = server.request(
        "GET",
        "/stations",
        &[("Authorization", &format!("Bearer {token}"))],
    );
    assert_eq!(stations.status, 200, "{}", stations.context());
    let stations = stations.json();
    let edges = |key: &str| -> Vec<i64> {
        stations["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| (instant(row[key].as_str().unwrap()) / 1_000_000) as i64)
            .collect()
    };
    let window = (
        *edges("first").iter().min().unwrap(),
        *edges("last").iter().max().unwrap() + 1,
    );

    // The variables, in order: a query variable's values come from its query.
    let mut selection = Selection::new();
    let mut lists: Vec<String> = Vec::new();
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = variable["name"].as_str().unwrap_or_default().to_owned();
        let values: Vec<String> = match variable["type"].as_str() {
            Some("query") => {
                let query = Query {
                    place: format!("variable {name}"),
                    spec: &variable["query"]["infinityQuery"],
                    panel_type: None,
                    series_fields: Vec::new(),
                    value_filters: Vec::new(),
                    sorted_by: Vec::new(),
                    display_names: BTreeMap::new(),
                };
                if variable["query"]["queryType"] != "infinity" {
                    problems.push(format!("{}: queryType is not infinity", query.place));
                }
                if variable["datasource"]["uid"] != format!("${{{input}}}").as_str() {
                    problems.push(format!("{}: not on the data source input", query.place));
                }
                check_shape(&query, &mut problems);
                let field = variable["query"]["meta"]["valueField"]
                    .as_str()
                    .or(query.spec["columns"][0]["selector"].as_str())
                    .unwrap_or_default();
                let rows = run(
                    &query,
                    &selection,
                    window,
                    &source,
                    server,
                    token,
                    &mut problems,
                );
                answered += usize::from(!rows.is_empty());
                rows.iter()
                    .filter_map(|row| row[field].as_str().map(str::to_owned))
                    .collect()
            }
            Some("textbox" | "constant") => {
                vec![variable["query"].as_str().unwrap_or_default().to_owned()]
            }
            other => {
                problems.push(format!(
                    "variable {name}: a type {other:?} this test does not know"
                ));
                continue;
            }
        };
        if values.is_empty() || values.iter().any(String::is_empty) {
            problems.push(format!("variable {name}: no values ({values:?})"));
            continue;
        }
        if variable["multi"] == true && variable["includeAll"] == true && values.len() > 1 {
            lists.push(name.clone());
        } else if values.len() > 1 {
            problems.push(format!(
                "variable {name}: several values but not multi with All"
            ));
        }
        selection.insert(name, values);
    }

    // Every panel with All selected, then with each value of a list alone.
    let mut selections = vec![selection.clone()];
    for name in &lists {
        for value in &selection[name] {
            let mut alone = selection.clone();
            alone.insert(name.clone(), vec![value.clone()]);
            selections.push(alone);
        }
    }
    let mut shown = BTreeMap::new();
    for query in &queries {
        check_shape(query, &mut problems);
        for (index, selection) in selections.iter().enumerate() {
            let rows = run(
                query,
                selection,
                window,
                &source,
                server,
                token,
                &mut problems,
            );
            answered += usize::from(!rows.is_empty());
            // The first selection is All.
            let left = check_view(query, &rows, index == 0, &mut problems);
            if index == 0 {
                shown.insert(query.place.clone(), (rows, left));
            }
        }
    }
    let mut seen = BTreeSet::new();
    problems.retain(|problem| seen.insert(problem.clone()));
    Checked {
        problems,
        answered,
        shown,
    }
}

fn dashboard_text() -> String {
    repository_file("docs/grafana/stq-dashboard.json")
}

fn datasource_text() -> String {
    repository_file("docs/grafana/datasource.yaml")
}

#[test]
fn issue_24_every_grafana_panel_query_answers_with_its_columns() {
    let dashboard: Value = serde_json::from_str(&dashboard_text()).expect("the dashboard is JSON");
    let checked = check(&dashboard, &datasource_text(), sample_server(), DEMO_OPS);
    assert!(
        checked.problems.is_empty(),
        "docs/grafana against stq on the sample snapshot:\n{}",
        checked.problems.join("\n")
    );
    // The station variable's query once, then each panel query with All and with
    // each of the sample's four stations alone.
    let panel_queries: usize = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|panel| panel["targets"].as_array().map_or(0, Vec::len))
        .sum();
    assert!(panel_queries >= 5, "{panel_queries} panel queries");
    assert_eq!(checked.answered, 1 + panel_queries * (1 + 4));

    // Issue 52: the unstable measurements, from /metrics/control: with All, the rows
    // Nelson's rules flag, and only those, sorted by their count of flags.
    let (place, (rows, left)) = checked
        .shown
        .iter()
        .find(|(place, _)| place.contains("Unstable measurements"))
        .expect("a panel of unstable measurements");
    let flagged = rows
        .iter()
        .filter(|row| row["violations_count"].as_u64().unwrap() > 0)
        .count();
    assert!(flagged > 0, "{place}: the sample breaks no rule: {rows:?}");
    assert_eq!(*left, flagged, "{place}");
    assert!(flagged < rows.len(), "{place}: every group flagged");
    let panel = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|panel| {
            panel["targets"][0]["url"]
                .as_str()
                .is_some_and(|url| url.starts_with("/metrics/control?"))
        })
        .unwrap();
    assert_eq!(
        panel["options"]["sortBy"],
        serde_json::json!([{"displayName": "Flags", "desc": true}])
    );
}

#[test]
fn issue_24_the_grafana_check_fails_on_a_wrong_field_parameter_or_type() {
    // (what to replace, by what, in which file, a word the report must contain)
    let mistakes: [(&str, &str, bool, &str); 14] = [
        (
            r#""selector": "first_pass_yield""#,
            r#""selector": "first_pass_yeild""#,
            true,
            "first_pass_yeild",
        ),
        ("bucket=1h", "bucket=1hour", true, "invalid_parameter"),
        (
            "group_by=station_id",
            "groupby=station_id",
            true,
            "unknown_parameter",
        ),
        (
            r#""type": "timestamp""#,
            r#""type": "number""#,
            true,
            "is a number column",
        ),
        (
            r#""root_selector": "data""#,
            r#""root_selector": "rows""#,
            true,
            "not an array",
        ),
        ("${station:csv}", "${station}", true, "holds a list"),
        (
            "names=${metric}",
            "name=${metric}",
            true,
            "unknown_parameter",
        ),
        (
            r#""selector": "cpk""#,
            r#""selector": "cpk_value""#,
            true,
            "cpk_value",
        ),
        (
            r#""url": "/stations""#,
            r#""url": "/station""#,
            true,
            "not_found",
        ),
        (
            "        - http://localhost:8080",
            "        - http://stq.internal:8080",
            false,
            "Infinity refuses",
        ),
        (
            "bearerToken: $STQ_TOKEN",
            "bearerToken: stq-demo-ops",
            false,
            "no token in the file",
        ),
        // Issue 52: the unstable measurements' filter and sort.
        (
            r#""fieldName": "violations_count""#,
            r#""fieldName": "violation_count""#,
            true,
            "not a number column",
        ),
        (
            r#""displayName": "Flags""#,
            r#""displayName": "Flag count""#,
            true,
            "names no column",
        ),
        (
            r#""id": "greater""#,
            r#""id": "lower""#,
            true,
            "leaves no row",
        ),
    ];
    let (dashboard, yaml) = (dashboard_text(), datasource_text());
    for (from, to, in_dashboard, word) in mistakes {
        let (mut dashboard, mut yaml) = (dashboard.clone(), yaml.clone());
        let text = if in_dashboard {
            &mut dashboard
        } else {
            &mut yaml
        };
        assert!(text.contains(from), "{from:?} is not in the file any more");
        *text = text.replacen(from, to, 1);
        let dashboard: Value = serde_json::from_str(&dashboard).expect("still JSON");
        let problems = check(&dashboard, &yaml, sample_server(), DEMO_OPS).problems;
        assert!(
            problems.iter().any(|problem| problem.contains(word)),
            "{from:?} -> {to:?} was not reported as {word:?}; reported:\n{}",
            problems.join("\n")
        );
    }
}

#[test]
fn issue_24_the_test_reads_yaml_and_urls_as_grafana_and_infinity_do() {
    let flat = flatten_yaml(
        "a: 1\nlist:\n  - x # note\n  - 'y'\nitems:\n  - name: n\n    deep:\n      k: \"v\"\n  - name: m\n",
    )
    .unwrap();
    let expected: BTreeMap<String, String> = [
        ("a", "1"),
        ("list.0", "x"),
        ("list.1", "y"),
        ("items.0.name", "n"),
        ("items.0.deep.k", "v"),
        ("items.1.name", "m"),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value.to_owned()))
    .collect();
    assert_eq!(flat, expected);

    // Go's url.Values: keys sorted, `,` and `:` escaped, `+` read as a space.
    assert_eq!(
        infinity_path("/units?to=b:1&station_ids=ST-01,ST-02&from=a+b", &[]),
        "/units?from=a+b&station_ids=ST-01%2CST-02&to=b%3A1"
    );
    // Infinity's `:date:iso` (Go) drops trailing zeros of the fraction; Grafana's keeps three.
    assert_eq!(go_iso(1_794_960_000_000), "2026-11-18T00:00:00Z");
    assert_eq!(go_iso(1_794_960_000_250), "2026-11-18T00:00:00.25Z");
    let window = (1_794_960_000_250, 1_794_960_060_000);
    assert_eq!(
        time_macro("__from", Some("date:iso"), window).unwrap(),
        "2026-11-18T00:00:00.250Z"
    );
    let selection: Selection = [("s".to_owned(), vec!["A".to_owned(), "B".to_owned()])].into();
    assert_eq!(
        interpolate(
            "x=${s:csv}&f=${__timeFrom:date:iso}&t=${__timeTo}",
            &selection,
            window
        )
        .unwrap(),
        "x=A,B&f=2026-11-18T00:00:00.25Z&t=1794960060000"
    );
    assert!(interpolate("x=$s", &selection, window).is_err());
    assert!(interpolate("x=$nothing", &selection, window).is_err());

    assert!(go_rfc3339("2026-11-19T13:36:09.870092+05:30").is_some());
    assert!(go_rfc3339("2026-11-19T13:36:09Z").is_some());
    assert!(go_rfc3339("2026-11-19t13:36:09z").is_none());
    assert!(go_rfc3339("2026-11-19 13:36:09Z").is_none());

    assert!(allowed(
        "http://localhost:8080/units",
        &["http://localhost:8080".into()]
    ));
    assert!(!allowed(
        "http://localhost:8080/units",
        &["https://localhost:8080".into()]
    ));
    assert!(!allowed(
        "http://stq.internal:8080/units",
        &["http://localhost:8080".into()]
    ));
}
