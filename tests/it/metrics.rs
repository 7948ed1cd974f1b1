//! The Prometheus metrics on the admin listener (CONTRACT section 8), read from the
//! real binary: the exposition parses, every name starts with `stq_`, the gauges
//! describe the loaded generation, and the counters move with the requests served.
//! It also checks that no station id or token leaks into the metrics.

use std::collections::BTreeMap;

use crate::common::*;

/// A parsed exposition: each sample's series (`name{labels}`) and its value.
struct Exposition {
    text: String,
    samples: BTreeMap<String, f64>,
}

impl Exposition {
    fn parse(text: String) -> Exposition {
        let samples = text
            .lines()
            .filter(|line| !line.starts_with('#') && !line.is_empty())
            .map(|line| {
                let (series, value) = line
                    .rsplit_once(' ')
                    .unwrap_or_else(|| panic!("a sample line is `series value`: {line:?}"));
                let value = value
                    .parse()
                    .unwrap_or_else(|_| panic!("not a number: {line:?}"));
                (series.to_owned(), value)
            })
            .collect();
        Exposition { text, samples }
    }

    /// A sample's value; a counter or gauge not yet created reads as zero.
    fn value(&self, series: &str) -> f64 {
        self.samples.get(series).copied().unwrap_or(0.0)
    }
}

fn scrape(server: &Server) -> Exposition {
    let agent = ureq::AgentBuilder::new().build();
    let response = call(&agent, "GET", &server.metrics_url(), &[]);
    assert_eq!(response.status, 200, "{}", response.body);
    let content_type = response.header("content-type").unwrap_or_default();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    Exposition::parse(response.body)
}

#[test]
fn the_exposition_describes_the_loaded_generation() {
    let fixture = Fixture::main();
    let server = Server::start(&fixture, &["--shards", "2"]);
    let metrics = scrape(&server);

    assert!(
        metrics.text.ends_with("# EOF\n"),
        "OpenMetrics ends with # EOF"
    );
    for series in metrics.samples.keys() {
        assert!(series.starts_with("stq_"), "{series}");
    }
    assert_eq!(metrics.value("stq_generation"), 1.0);
    assert_eq!(metrics.value("stq_reloads_total"), 0.0);
    assert_eq!(metrics.value("stq_failed_reloads_total"), 0.0);
    assert!(metrics.value("stq_snapshot_load_duration_seconds") > 0.0);
    let held = metrics.value(r#"stq_shard_records{shard="0"}"#)
        + metrics.value(r#"stq_shard_records{shard="1"}"#);
    assert_eq!(held as usize, fixture.records.len());
}

#[test]
fn counters_move_with_the_requests_served() {
    let fixture = Fixture::main();
    let server = Server::start(&fixture, &[]);
    let before = scrape(&server);

    let mut returned = 0;
    for _ in 0..3 {
        returned += server.ok(&units_all()).data.len();
    }
    assert!(returned > 0, "the fixture's window holds unit records");
    assert_eq!(server.get(&units_all(), None).status, 401);
    assert_eq!(server.get("/nowhere", Some(OPS)).status, 404);
    assert_eq!(server.get("/healthz", None).status, 200);

    let after = scrape(&server);
    let moved = |series: &str| after.value(series) - before.value(series);
    assert_eq!(
        moved(r#"stq_requests_total{endpoint="/units",status="200"}"#),
        3.0
    );
    assert_eq!(
        moved(r#"stq_requests_total{endpoint="/units",status="401"}"#),
        1.0
    );
    assert_eq!(
        moved(r#"stq_requests_total{endpoint="other",status="404"}"#),
        1.0
    );
    assert_eq!(
        moved(r#"stq_requests_total{endpoint="/healthz",status="200"}"#),
        1.0
    );
    assert_eq!(
        moved(r#"stq_records_returned_total{endpoint="/units"}"#),
        returned as f64
    );
    assert_eq!(
        moved(r#"stq_request_duration_seconds_count{endpoint="/units"}"#),
        4.0
    );
    assert!(moved(r#"stq_request_duration_seconds_sum{endpoint="/units"}"#) > 0.0);
}

#[test]
fn no_station_id_path_or_token_reaches_the_metrics() {
    let fixture = Fixture::main();
    let server = Server::start(&fixture, &[]);
    server.ok(&format!("{}&station_ids=ST-01", units_all()));
    assert_eq!(server.get("/units/ST-01/secret", Some(OPS)).status, 404);
    let metrics = scrape(&server);
    for leak in ["ST-0", "secret", OPS] {
        assert!(!metrics.text.contains(leak), "{leak:?} in the metrics");
    }
}

/// Issue 32: the cache of decoded sealed blocks reports its capacity
/// (`--cache-size`), its bytes, its hits and misses: a first read of sealed history
/// decodes (misses) and keeps what it decoded (bytes), the same read again finds it
/// decoded (hits, no more misses), with the same answer. With `--cache-size 0`
/// nothing is kept: every read misses, and the answers are the same.
#[test]
fn issue_32_the_cache_reports_its_bytes_hits_and_misses() {
    let fixture = Fixture::main();
    let cached = Server::start(&fixture, &["--hot", "1s", "--cache-size", "64MiB"]);
    let before = scrape(&cached);
    assert_eq!(before.value("stq_cache_capacity_bytes"), (64 << 20) as f64);
    assert_eq!(before.value("stq_cache_bytes"), 0.0);
    assert_eq!(before.value("stq_cache_hits_total"), 0.0);
    assert_eq!(before.value("stq_cache_misses_total"), 0.0);

    let first = cached.ok(&units_all()).data;
    let once = scrape(&cached);
    let misses = once.value("stq_cache_misses_total");
    assert!(misses > 0.0, "the fixture's 2024 window holds sealed units");
    let bytes = once.value("stq_cache_bytes");
    assert!(bytes > 0.0 && bytes <= (64 << 20) as f64, "{bytes}");

    let second = cached.ok(&units_all()).data;
    assert_eq!(first, second);
    let twice = scrape(&cached);
    assert_eq!(twice.value("stq_cache_misses_total"), misses);
    assert!(twice.value("stq_cache_hits_total") >= misses);
    assert_eq!(twice.value("stq_cache_bytes"), bytes);

    let uncached = Server::start(&fixture, &["--hot", "1s", "--cache-size", "0"]);
    assert_eq!(uncached.ok(&units_all()).data, first);
    let once = scrape(&uncached).value("stq_cache_misses_total");
    assert!(once >= misses, "{once} {misses}");
    assert_eq!(uncached.ok(&units_all()).data, first);
    let none = scrape(&uncached);
    assert_eq!(none.value("stq_cache_capacity_bytes"), 0.0);
    assert_eq!(none.value("stq_cache_bytes"), 0.0);
    assert_eq!(none.value("stq_cache_hits_total"), 0.0);
    assert_eq!(none.value("stq_cache_misses_total"), 2.0 * once);
}
