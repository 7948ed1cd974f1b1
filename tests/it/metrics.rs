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

/// No path or token a client sends reaches the metrics, nor a station id but in
/// the freshness gauge, whose series are the stations with records (issue 34).
#[test]
fn no_station_id_path_or_token_reaches_the_metrics() {
    let fixture = Fixture::main();
    let server = Server::start(&fixture, &[]);
    server.ok(&format!("{}&station_ids=ST-01", units_all()));
    assert_eq!(server.get("/units/ST-01/secret", Some(OPS)).status, 404);
    server.get("/units?station_ids=ST-99", Some(OPS));
    let metrics = scrape(&server);
    for leak in ["secret", OPS, "ST-99"] {
        assert!(!metrics.text.contains(leak), "{leak:?} in the metrics");
    }
    for line in metrics.text.lines().filter(|line| line.contains("ST-0")) {
        assert!(
            line.starts_with("stq_station_last_record_timestamp_seconds{station_id=\"ST-0"),
            "{line}"
        );
    }
}

/// The instant of `station`'s newest record, as the gauge gives it.
fn last_record(metrics: &Exposition, station: &str) -> Option<f64> {
    let series = format!("stq_station_last_record_timestamp_seconds{{station_id=\"{station}\"}}");
    metrics.samples.get(&series).copied()
}

/// Issue 34 (CONTRACT revision 4, section 8): per station with records, the
/// instant of its newest record in Unix seconds (fractions too), and the held files;
/// both follow reloads, and a station whose records all left has no series.
#[test]
fn issue_34_station_freshness_gauges_follow_reloads() {
    let unit = |station: &str, time: &str| {
        format!(r#"{{"station_id":"{station}","time_created":"{time}","direction":"output"}}"#)
            + "\n"
    };
    let (directory, snapshots, tokens) = write_snapshot(&[
        FileSpec::plain(
            "a.units.jsonl",
            unit("ST-01", "2024-03-10T10:00:00Z")
                + &unit("ST-01", "2024-03-10T12:30:00.250+02:00")
                + &unit("ST-01", "2024-03-10T09:00:00Z"),
        ),
        FileSpec::plain("b.units.jsonl", unit(r#"ST-\"q"#, "2024-03-10T11:00:00Z")),
    ]);
    let fixture = Fixture {
        directory,
        snapshots,
        tokens,
        records: Vec::new(),
        now: now_seconds(),
    };
    let server = Server::start(&fixture, &["--watch"]);
    let seconds = |written: &str| (instant(written) / SECOND) as f64;
    let metrics = scrape(&server);
    assert_eq!(
        last_record(&metrics, "ST-01"),
        Some(seconds("2024-03-10T10:30:00Z") + 0.25),
        "{}",
        metrics.text
    );
    // Label values are escaped: the station id is `ST-"q`.
    assert_eq!(
        last_record(&metrics, r#"ST-\"q"#),
        Some(seconds("2024-03-10T11:00:00Z")),
        "{}",
        metrics.text
    );
    assert_eq!(metrics.value("stq_held_files"), 0.0);
    assert!(metrics
        .text
        .contains("\n# TYPE stq_station_last_record_timestamp_seconds gauge\n"));

    // The second station's file goes; the first station writes a newer record and
    // a broken file is held back.
    std::fs::remove_file(fixture.snapshots.join("b.units.jsonl")).unwrap();
    std::fs::write(fixture.snapshots.join("c.units.jsonl"), "{not json\n").unwrap();
    let mut first = std::fs::OpenOptions::new()
        .append(true)
        .open(fixture.snapshots.join("a.units.jsonl"))
        .unwrap();
    std::io::Write::write_all(&mut first, unit("ST-01", "2024-03-11T00:00:00Z").as_bytes())
        .unwrap();
    let deadline = std::time::Instant::now() + RELOAD_TIMEOUT;
    let metrics = loop {
        let metrics = scrape(&server);
        if metrics.value("stq_held_files") == 1.0
            && last_record(&metrics, "ST-01") == Some(seconds("2024-03-11T00:00:00Z"))
        {
            break metrics;
        }
        assert!(std::time::Instant::now() < deadline, "{}", metrics.text);
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(!metrics.text.contains(r#"ST-\"q"#), "{}", metrics.text);
    let series: Vec<&String> = (metrics.samples.keys())
        .filter(|series| series.starts_with("stq_station_last_record_timestamp_seconds"))
        .collect();
    assert_eq!(series.len(), 1, "{series:?}");
}

/// Issue 34 (CONTRACT revision 4, section 8): docs/prometheus/stq-alerts.yml, the
/// alert rules for a silent station and for held files, passes Debian's promtool
/// (`check rules`, and `test rules` with docs/prometheus/stq-alerts.test.yml, which
/// says when each fires), and every metric it reads is one stq exports.
#[test]
fn issue_34_the_alert_rules_pass_promtool_and_read_exported_metrics() {
    let rules_directory = format!("{}/docs/prometheus", env!("CARGO_MANIFEST_DIR"));
    let rules = std::fs::read_to_string(format!("{rules_directory}/stq-alerts.yml")).unwrap();
    let fixture = Fixture::main();
    let server = Server::start(&fixture, &[]);
    let exported: std::collections::BTreeSet<String> = (scrape(&server).text.lines())
        .filter_map(|line| Some(line.strip_prefix("# TYPE ")?.split(' ').next()?.to_owned()))
        .collect();
    let mut read = std::collections::BTreeSet::new();
    for (at, _) in rules.match_indices("stq_") {
        let name: String = rules[at..]
            .chars()
            .take_while(|character| character.is_ascii_alphanumeric() || *character == '_')
            .collect();
        read.insert(name);
    }
    assert!(
        read.contains("stq_station_last_record_timestamp_seconds")
            && read.contains("stq_held_files"),
        "{read:?}"
    );
    for name in &read {
        assert!(
            exported.contains(name),
            "{name} is not exported: {exported:?}"
        );
    }

    let Some(promtool) = debian_binary("/usr/bin/promtool", "prometheus") else {
        return;
    };
    for arguments in [
        ["check", "rules", "stq-alerts.yml"],
        ["test", "rules", "stq-alerts.test.yml"],
    ] {
        let output = std::process::Command::new(&promtool)
            .args(arguments)
            .current_dir(&rules_directory)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "promtool {arguments:?}:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
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
    // Each read of the second found what the first decoded (not one a miss:
    // a miss from the store also reads a tier's shared pieces, which a read of
    // a merged period does not look up again).
    assert!(twice.value("stq_cache_hits_total") > once.value("stq_cache_hits_total"));
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
