//! Tenant isolation of what ships: the real sample snapshot in `snapshots/`, the
//! real `snapshots/tokens.json`, and the demo tokens of README.md, served by the
//! real binary (CONTRACT section 3, with the cursors of section 6 and the ETags of
//! section 8).
//!
//! For every demo token, every station found in the snapshot files and both
//! endpoints: a request for one station is the station's records exactly when the
//! token may see it, else a 403 naming that station; without a station list, the
//! answer is exactly the records of the stations the token may see; a list mixing
//! permitted and forbidden stations is a 403 naming exactly the forbidden ones; a
//! forbidden station that exists is answered byte for byte like one that does not
//! (no existence oracle); a cursor is refused to every other token; and tokens of
//! different scopes never share an ETag.
//!
//! The expected records come from the snapshot files themselves, rendered by the
//! suite's reference loader, not from the server.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::*;
use serde_json::{json, Value};

/// README.md's demo tokens, in plain text; `snapshots/tokens.json` holds only
/// their SHA-256, and `a_demo_token_stands_for_every_shipped_token` checks that
/// each of its entries is one of these.
const DEMO_TOKENS: [&str; 2] = ["stq-demo-ops", "stq-demo-line-1"];

/// Page size of the walks: the sample's 7,680 metric records take two pages, so
/// every full answer is also a cursor walk.
const PAGE: usize = 5000;

/// Ids that no sample station has, mixed into station lists.
const ABSENT_STATIONS: [&str; 3] = ["ST-99", "AA", "zz"];

/// One demo token and what `snapshots/tokens.json` lets it see.
struct Demo {
    token: &'static str,
    name: String,
    /// `None`: every station (`"*"`), those of the snapshot and any other id.
    listed: Option<BTreeSet<String>>,
}

impl Demo {
    fn permits(&self, station: &str) -> bool {
        self.listed
            .as_ref()
            .is_none_or(|listed| listed.contains(station))
    }
}

/// The shipped sample, its reference records and a server on it.
struct Sample {
    server: Server,
    records: Vec<Record>,
    /// Every `station_id` of the snapshot files, in byte order.
    stations: Vec<String>,
    demos: Vec<Demo>,
    /// `from=...&to=...`: whole UTC days that hold every record of the sample.
    window: String,
}

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The snapshot files of `directory` as CONTRACT section 2 loads them: every
/// `*.units.jsonl` / `*.metrics.jsonl` below it (optionally `.gz`), decompressed,
/// in byte order of their `/`-separated relative paths.
fn snapshot_files(directory: &Path) -> Vec<FileSpec> {
    fn walk(root: &Path, directory: &Path, files: &mut Vec<FileSpec>) {
        for entry in std::fs::read_dir(directory).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, files);
                continue;
            }
            let relative = path
                .strip_prefix(root)
                .unwrap()
                .components()
                .map(|part| part.as_os_str().to_str().unwrap().to_string())
                .collect::<Vec<_>>()
                .join("/");
            let stem = relative.strip_suffix(".gz").unwrap_or(&relative);
            if !stem.ends_with(".units.jsonl") && !stem.ends_with(".metrics.jsonl") {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            let text = if relative.ends_with(".gz") {
                let mut text = String::new();
                flate2::read::MultiGzDecoder::new(&bytes[..])
                    .read_to_string(&mut text)
                    .unwrap();
                text
            } else {
                String::from_utf8(bytes).unwrap()
            };
            files.push(FileSpec::plain(&relative, text));
        }
    }
    let mut files = Vec::new();
    walk(directory, directory, &mut files);
    files.sort_by(|left, right| left.relative_path.cmp(&right.relative_path));
    files
}

/// `stq hash-token` of a token, as the tokens file stores it.
fn hash_token(token: &str) -> String {
    let output = run(
        &["hash-token"],
        Some(token.as_bytes()),
        &[],
        Duration::from_secs(60),
    );
    assert!(output.status.success(), "stq hash-token: {output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

/// Each demo token with the entry of the tokens file its hash names.
fn demos(tokens_file: &Path) -> Vec<Demo> {
    let tokens: Value = serde_json::from_slice(&std::fs::read(tokens_file).unwrap()).unwrap();
    let entries = tokens["tokens"].as_array().expect("tokens: an array");
    DEMO_TOKENS
        .iter()
        .map(|&token| {
            let hash = hash_token(token);
            let entry = entries
                .iter()
                .find(|entry| entry["sha256"] == hash.as_str())
                .unwrap_or_else(|| panic!("{token}: no entry of {tokens_file:?} has its hash"));
            let listed = match &entry["stations"] {
                Value::String(every) if every == "*" => None,
                Value::Array(stations) => Some(
                    stations
                        .iter()
                        .map(|station| station.as_str().unwrap().to_string())
                        .collect(),
                ),
                other => panic!("{token}: stations {other}"),
            };
            Demo {
                token,
                name: entry["name"].as_str().unwrap().to_string(),
                listed,
            }
        })
        .collect()
}

fn sample() -> &'static Sample {
    static SAMPLE: OnceLock<Sample> = OnceLock::new();
    SAMPLE.get_or_init(|| {
        let snapshots = repository().join("snapshots");
        let tokens = snapshots.join("tokens.json");
        let records = load(&snapshot_files(&snapshots));
        assert!(!records.is_empty(), "no records in {snapshots:?}");
        let stations: Vec<String> = records
            .iter()
            .map(|record| record.text("station_id").to_string())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let day_of = |at: i128| (at.div_euclid(SECOND) as i64).div_euclid(86_400);
        let first_day = day_of(records.iter().map(|record| record.at).min().unwrap());
        let last_day = day_of(records.iter().map(|record| record.at).max().unwrap());
        let window = format!(
            "from={}&to={}",
            rfc3339_from_seconds(first_day * 86_400),
            rfc3339_from_seconds((last_day + 1) * 86_400)
        );
        let demos = demos(&tokens);
        let server = Server::spawn(&serve_args(&snapshots, &tokens, &[]), &[]);
        Sample {
            server,
            records,
            stations,
            demos,
            window,
        }
    })
}

fn server() -> &'static Server {
    &sample().server
}

const KINDS: [Kind; 2] = [Kind::Units, Kind::Metrics];

/// The filters that select every record of `kind` but for stations: units of both
/// directions (the default is `output` only).
fn every_record(kind: Kind) -> &'static str {
    match kind {
        Kind::Units => "&direction=input,output",
        Kind::Metrics => "",
    }
}

/// The reference answer: the sample's records of `kind` at `stations`, in the
/// order of CONTRACT section 6.
fn expected(kind: Kind, stations: &BTreeSet<&str>) -> Vec<Value> {
    in_contract_order(
        sample()
            .records
            .iter()
            .filter(|record| record.kind == kind && stations.contains(record.text("station_id")))
            .collect(),
    )
}

/// Every record `token` gets for `kind` with `stations` (a `station_ids=...`
/// parameter, or "" for none) over the sample's window, following cursors; or the
/// first answer that is not a 200.
fn fetch_all(token: &str, kind: Kind, stations: &str) -> Result<Vec<Value>, Response> {
    let sample = sample();
    let query = format!(
        "{}?{}{}{stations}&limit={PAGE}",
        kind.path(),
        sample.window,
        every_record(kind)
    );
    let mut records = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let target = match &cursor {
            None => query.clone(),
            Some(cursor) => format!("{query}&cursor={}", percent_encode(cursor)),
        };
        let response = server().get(&target, Some(token));
        if response.status != 200 {
            return Err(response);
        }
        let page = response.ok();
        records.extend(page.data.iter().cloned());
        match page.cursor() {
            Some(next) => cursor = Some(next),
            None => return Ok(records),
        }
    }
    panic!("{query}: more than 100 pages");
}

/// `&station_ids=A,B,...`, each id percent-encoded.
fn station_list(stations: &[&str]) -> String {
    let items: Vec<String> = stations.iter().map(|id| percent_encode(id)).collect();
    format!("&station_ids={}", items.join(","))
}

#[test]
fn a_demo_token_stands_for_every_shipped_token() {
    let sample = sample();
    let tokens: Value =
        serde_json::from_slice(&std::fs::read(repository().join("snapshots/tokens.json")).unwrap())
            .unwrap();
    let shipped: BTreeSet<&str> = tokens["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["name"].as_str().unwrap())
        .collect();
    let covered: BTreeSet<&str> = sample.demos.iter().map(|demo| demo.name.as_str()).collect();
    assert_eq!(covered, shipped, "the demo tokens and the tokens file");
    // The matrix below means something only if some token may not see some
    // station of the data, and some token may see all of them.
    assert!(
        sample
            .demos
            .iter()
            .any(|demo| sample.stations.iter().any(|station| !demo.permits(station))),
        "no demo token is refused any station"
    );
    assert!(sample.demos.iter().any(|demo| demo.listed.is_none()));
}

#[test]
fn one_station_is_its_records_or_a_403_for_every_token_and_station() {
    let sample = sample();
    let mut failures = Vec::new();
    for demo in &sample.demos {
        for station in &sample.stations {
            for kind in KINDS {
                let context = format!("{} {} station_ids={station}", demo.name, kind.path());
                let answer = fetch_all(demo.token, kind, &station_list(&[station]));
                match (demo.permits(station), answer) {
                    (true, Ok(got)) => {
                        let want = expected(kind, &BTreeSet::from([station.as_str()]));
                        assert!(!want.is_empty(), "{context}: the sample has no records");
                        if got != want {
                            failures.push(format!(
                                "{context}: {} records, {} expected; first foreign: {:?}",
                                got.len(),
                                want.len(),
                                got.iter()
                                    .find(|record| record["station_id"] != station.as_str())
                            ));
                        }
                    }
                    (false, Err(response)) => {
                        let details = response.error(403, "forbidden");
                        if details != json!({"stations": [station]}) {
                            failures.push(format!("{context}: details {details}"));
                        }
                    }
                    (permitted, Ok(got)) => failures.push(format!(
                        "{context}: permitted {permitted}, yet 200 with {} records",
                        got.len()
                    )),
                    (permitted, Err(response)) => failures.push(format!(
                        "{context}: permitted {permitted}, yet {}",
                        response.context()
                    )),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn without_a_station_list_a_token_gets_exactly_its_stations() {
    let sample = sample();
    for demo in &sample.demos {
        let permitted: BTreeSet<&str> = sample
            .stations
            .iter()
            .map(String::as_str)
            .filter(|station| demo.permits(station))
            .collect();
        for kind in KINDS {
            let want = expected(kind, &permitted);
            assert!(
                !want.is_empty(),
                "{} {}: nothing to see",
                demo.name,
                kind.path()
            );
            // `station_ids=` is an empty list, which is no list (CONTRACT section 4).
            for stations in ["", "&station_ids=", "&station_ids=%20,"] {
                let context = format!("{} {}?{stations}", demo.name, kind.path());
                let got = fetch_all(demo.token, kind, stations)
                    .unwrap_or_else(|response| panic!("{context}: {}", response.context()));
                let foreign: BTreeSet<&str> = got
                    .iter()
                    .map(|record| record["station_id"].as_str().unwrap())
                    .filter(|station| !demo.permits(station))
                    .collect();
                assert!(foreign.is_empty(), "{context}: records of {foreign:?}");
                assert_records(&got, &want, &context);
            }
        }
    }
}

#[test]
fn a_mixed_list_is_a_403_naming_exactly_the_forbidden_stations() {
    let sample = sample();
    let mut failures = Vec::new();
    for demo in &sample.demos {
        let (permitted, forbidden): (Vec<&str>, Vec<&str>) = sample
            .stations
            .iter()
            .map(String::as_str)
            .chain(ABSENT_STATIONS)
            .partition(|station| demo.permits(station));
        for kind in KINDS {
            // Every id, in reverse byte order, the first one repeated and one
            // padded with spaces (items are trimmed and deduplicated).
            let mut everything: Vec<String> = permitted
                .iter()
                .chain(&forbidden)
                .map(|station| station.to_string())
                .collect();
            everything.sort();
            everything.reverse();
            everything.push(everything[0].clone());
            everything.push(format!(" {} ", everything[1]));
            let everything: Vec<&str> = everything.iter().map(String::as_str).collect();
            let mut lists = vec![everything];
            // Each permitted station with each forbidden one, in both orders.
            for allowed in &permitted {
                for refused in &forbidden {
                    lists.push(vec![allowed, refused]);
                    lists.push(vec![refused, allowed]);
                }
            }
            for list in lists {
                let context = format!("{} {}{}", demo.name, kind.path(), station_list(&list));
                let named: BTreeSet<&str> = list.iter().map(|station| station.trim()).collect();
                let refused: Vec<&str> = named
                    .iter()
                    .copied()
                    .filter(|station| !demo.permits(station))
                    .collect();
                match fetch_all(demo.token, kind, &station_list(&list)) {
                    Err(response) if !refused.is_empty() => {
                        let details = response.error(403, "forbidden");
                        if details != json!({ "stations": refused }) {
                            failures.push(format!("{context}: details {details}"));
                        }
                    }
                    // Only a token that may see every id gets records, those of
                    // the ids that exist.
                    Ok(got) if refused.is_empty() => {
                        let want = expected(kind, &named);
                        if got != want {
                            failures.push(format!(
                                "{context}: {} records, {} expected",
                                got.len(),
                                want.len()
                            ));
                        }
                    }
                    Ok(got) => failures.push(format!(
                        "{context}: 200 with {} records, not a 403 for {refused:?}",
                        got.len()
                    )),
                    Err(response) => failures.push(response.context()),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// An id of the same length as `station` that no sample station has and `demo`
/// may not see.
fn absent_twin(demo: &Demo, station: &str) -> String {
    assert!(station.is_ascii(), "{station}: ids here are ASCII");
    for position in (0..station.len()).rev() {
        for replacement in ['X', 'Q', '9', 'z'] {
            let mut twin = station.to_string();
            twin.replace_range(position..position + 1, &replacement.to_string());
            if !sample().stations.contains(&twin) && !demo.permits(&twin) {
                return twin;
            }
        }
    }
    panic!("no absent id of the length of {station}");
}

#[test]
fn a_forbidden_station_is_answered_like_one_that_does_not_exist() {
    let sample = sample();
    let mut compared = 0;
    for demo in &sample.demos {
        let permitted = sample.stations.iter().find(|station| demo.permits(station));
        for station in sample
            .stations
            .iter()
            .filter(|station| !demo.permits(station))
        {
            let twin = absent_twin(demo, station);
            let mut lists = vec![(vec![station.as_str()], vec![twin.as_str()])];
            if let Some(permitted) = permitted {
                lists.push((
                    vec![permitted.as_str(), station.as_str()],
                    vec![permitted.as_str(), twin.as_str()],
                ));
            }
            for kind in KINDS {
                for (existing, absent) in &lists {
                    for method in ["GET", "HEAD"] {
                        // The same request id, so that the header and the body
                        // that echo it can match.
                        let request_id = format!("isolation-{compared}");
                        let ask = |list: &[&str]| {
                            server().request_as(
                                method,
                                &format!("{}?{}{}", kind.path(), sample.window, station_list(list)),
                                Some(demo.token),
                                &[("X-Request-Id", &request_id)],
                            )
                        };
                        let real = ask(existing);
                        let made_up = ask(absent);
                        let context = format!("{} {method} {}", demo.name, real.url);
                        assert_eq!(real.status, 403, "{}", real.context());
                        if method == "GET" {
                            real.error(403, "forbidden");
                        }
                        assert_eq!(made_up.status, real.status, "{context}");
                        // `Date` is the one header whose value may differ: it is the
                        // clock, to the second. The order of the fields is not
                        // compared: actix-web's header map iterates in an order of
                        // its own per worker thread, so the very same request comes
                        // back in one of two orders (RFC 9110 5.3: the order of
                        // fields of different names carries no meaning).
                        let headers = |response: &Response| -> Vec<(String, String)> {
                            let mut fields: Vec<(String, String)> = response
                                .headers
                                .iter()
                                .filter(|(name, _)| name != "date")
                                .cloned()
                                .collect();
                            fields.sort();
                            fields
                        };
                        assert_eq!(headers(&made_up), headers(&real), "{context}: headers");
                        assert_eq!(
                            made_up.body.replace(&twin, station),
                            real.body,
                            "{context}: body"
                        );
                        compared += 1;
                    }
                }
            }
        }
    }
    assert!(
        compared > 0,
        "no token is refused any station of the sample"
    );
}

/// A station every demo token may see.
fn common_station() -> &'static str {
    let sample = sample();
    sample
        .stations
        .iter()
        .find(|station| sample.demos.iter().all(|demo| demo.permits(station)))
        .expect("a station every demo token may see")
}

#[test]
fn a_cursor_is_refused_to_every_other_token() {
    let sample = sample();
    let station = common_station();
    for kind in KINDS {
        // The same query for every token, and within each token's scope.
        let query = format!(
            "{}?{}{}&station_ids={station}&limit=1",
            kind.path(),
            sample.window,
            every_record(kind)
        );
        for owner in &sample.demos {
            let cursor = server()
                .ok_as(&query, owner.token)
                .cursor()
                .unwrap_or_else(|| panic!("{query}: one page only"));
            let next = format!("{query}&cursor={}", percent_encode(&cursor));
            // The cursor works for the token it was made for...
            server().ok_as(&next, owner.token);
            // ...and for no other.
            for other in sample.demos.iter().filter(|demo| demo.token != owner.token) {
                let response = server().get(&next, Some(other.token));
                response.error(400, "invalid_cursor");
            }
        }
    }
}

/// Issue 11 (CONTRACT revision 2, section 8): a tag is the answer's own, so two
/// tokens share it exactly when they get the same records; a tag never lets one
/// token's copy pass for another's different answer.
#[test]
fn tokens_share_an_etag_exactly_when_their_answers_are_equal() {
    let sample = sample();
    let station = common_station();
    for kind in KINDS {
        // No list (different data per scope) and one station all may see (the same
        // data for every token).
        for stations in [String::new(), format!("&station_ids={station}")] {
            let query = format!(
                "{}?{}{}{stations}",
                kind.path(),
                sample.window,
                every_record(kind)
            );
            let answer_of = |token: &str| -> (String, Vec<Value>) {
                let response = server().get(&query, Some(token));
                assert_eq!(response.status, 200, "{}", response.context());
                let tag = response
                    .header("etag")
                    .unwrap_or_else(|| panic!("{}: no ETag", response.context()))
                    .to_string();
                (tag, response.ok().data)
            };
            for owner in &sample.demos {
                let (tag, data) = answer_of(owner.token);
                for other in &sample.demos {
                    let (other_tag, other_data) = answer_of(other.token);
                    let context = format!("{query}: {} and {}", owner.name, other.name);
                    assert_eq!(other_tag == tag, other_data == data, "{context}");
                    let revalidated = server().request_as(
                        "GET",
                        &query,
                        Some(other.token),
                        &[("If-None-Match", &tag)],
                    );
                    let expected = if other_data == data { 304 } else { 200 };
                    assert_eq!(revalidated.status, expected, "{context}");
                }
            }
        }
    }
}
