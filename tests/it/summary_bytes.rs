//! CONTRACT sections 10.2 and 12 (issue 51): a summary is a function of the files
//! alone. The same snapshot served with any `--cache-size`, `--shards`,
//! `--workers` and `--hot`, with a store cold and warm, with a store that cannot
//! be written, answers every summary with the same bytes and the same ETag; and
//! so does every control chart (section 15, issue 52).
//!
//! The snapshot is `stq gen`'s three stations over three days, beside a station
//! whose measurements stress the last bits: values near 7.35e8 with a small
//! spread, where a rounded sum of squares cancels, and values near 2.9e22 of
//! every scale of their fractions.

use std::path::{Path, PathBuf};

use crate::common::*;
use crate::export::generated_days;

/// The window that holds every record.
const WINDOW: &str = "from=2026-11-20T00:00:00Z&to=2026-11-25T00:00:00Z";

/// A station of measurements whose statistics need every bit, on three days.
fn hard_station(snapshots: &Path) {
    let mut lines = String::new();
    let mut state: u64 = 51;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for index in 0..1500u64 {
        let seconds = 1_795_219_200 + index * 173 + next() % 60;
        let time = rfc3339_from_seconds(seconds as i64);
        let slot = ["s1", "s2", "s3"][(next() % 3) as usize];
        let offset = format!("735297020.{:07}", next() % 10_000_000);
        let big = format!("2.93762963902{:04}e+22", next() % 10_000);
        for (name, value) in [("offset", offset), ("big", big)] {
            lines.push_str(&format!(
                r#"{{"station_id":"ST-HARD","slot":"{slot}","unit_serial":"SN-{index}","time_created":"{time}","name":"{name}","value":"{value}","limit_lower":"735297019","limit_upper":"3e22"}}"#
            ));
            lines.push('\n');
        }
    }
    std::fs::write(snapshots.join("hard.metrics.jsonl"), lines).unwrap();
}

/// The summaries compared: metrics by station, by slot across stations (rows
/// that merge shards), in buckets of an hour and of a day in a zone, and units.
fn queries() -> Vec<String> {
    [
        format!("/metrics/summary?{WINDOW}"),
        format!("/metrics/summary?{WINDOW}&group_by=slot&bucket=1h"),
        format!("/metrics/summary?{WINDOW}&group_by=unit&bucket=1d&tz=Europe/Berlin"),
        format!("/metrics/summary?{WINDOW}&group_by=station_id,slot,unit&bucket=4h"),
        format!("/units/summary?{WINDOW}&group_by=slot&bucket=1h"),
        format!("/units/summary?{WINDOW}&bucket=1d"),
        // Issue 52: charts, by station and across stations, with a baseline.
        format!("/metrics/control?{WINDOW}"),
        format!("/metrics/control?{WINDOW}&group_by=slot&baseline_from=2026-11-21T00:00:00Z&baseline_to=2026-11-22T00:00:00Z"),
    ]
    .to_vec()
}

/// Each query's answer (its body but `meta`) and ETag.
fn answers(server: &Server) -> Vec<(String, String)> {
    (queries().iter())
        .map(|query| {
            let response = server.get(query, Some(OPS));
            assert_eq!(response.status, 200, "{}", response.context());
            let etag = response.header("etag").unwrap_or_default().to_owned();
            // `data` and `message`, as sent; `meta` tells of the request.
            let meta = response.body.find(r#""meta":"#).expect("an envelope");
            (response.body[..meta].to_owned(), etag)
        })
        .collect()
}

fn start(snapshots: &Path, tokens: &Path, extra: &[&str]) -> Server {
    Server::spawn(
        &serve_args(snapshots, tokens, extra),
        &[("STQ_TEST_NO_STORE", "1")],
    )
}

/// The first row of `got` and `want` that differ, for the message.
fn first_difference(got: &str, want: &str) -> String {
    let rows = |text: &str| -> Vec<String> {
        let text = format!("{text}\"meta\":null}}");
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        (value["data"].as_array().unwrap().iter())
            .map(|row| row.to_string())
            .collect()
    };
    let (got, want) = (rows(got), rows(want));
    let differing = got
        .iter()
        .zip(&want)
        .filter(|(got, want)| got != want)
        .count();
    match got.iter().zip(&want).find(|(got, want)| got != want) {
        Some((got, want)) => format!(
            "{differing} of {} rows differ; first:\n got  {got}\n want {want}",
            want.len()
        ),
        None => format!("{} rows against {}", got.len(), want.len()),
    }
}

#[test]
fn issue_51_summaries_are_the_same_bytes_at_every_setting() {
    let directory = temporary_directory();
    let snapshots: PathBuf = generated_days(directory.path(), 3);
    hard_station(&snapshots);
    let tokens = directory.path().join("tokens.json");
    std::fs::write(&tokens, tokens_json()).unwrap();
    let store = directory.path().join("store");
    let store_text = path_string(&store);
    // A path below a file can be neither made nor written.
    let blocker = directory.path().join("a-file");
    std::fs::write(&blocker, "not a directory").unwrap();
    let unwritable = path_string(&blocker.join("store"));

    let want = answers(&start(&snapshots, &tokens, &[]));
    let settings: Vec<(&str, Vec<&str>)> = vec![
        ("--cache-size 64KiB", vec!["--cache-size", "64KiB"]),
        ("--shards 1", vec!["--shards", "1"]),
        ("--shards 5", vec!["--shards", "5"]),
        ("--workers 1", vec!["--workers", "1"]),
        ("--hot 1m", vec!["--hot", "1m"]),
        (
            "--hot 1m --cache-size 64KiB",
            vec!["--hot", "1m", "--cache-size", "64KiB"],
        ),
        ("store, cold", vec!["--store", &store_text, "--hot", "1m"]),
        (
            "store, warm, --cache-size 64KiB",
            vec![
                "--store",
                &store_text,
                "--hot",
                "1m",
                "--cache-size",
                "64KiB",
            ],
        ),
        (
            "an unwritable store",
            vec!["--store", &unwritable, "--cache-size", "64KiB"],
        ),
    ];
    for (name, extra) in &settings {
        let server = start(&snapshots, &tokens, extra);
        if *name == "store, cold" {
            // The warm start after it reads what this one wrote.
            server.wait_for_log("store written", 1);
        }
        if *name == "an unwritable store" {
            server.wait_for_log("cannot write the store", 1);
        }
        let got = answers(&server);
        for ((query, (got_body, got_etag)), (want_body, want_etag)) in
            queries().iter().zip(&got).zip(&want)
        {
            assert!(
                got_body == want_body,
                "{name}: {query}: {}",
                first_difference(got_body, want_body)
            );
            assert_eq!(got_etag, want_etag, "{name}: {query}");
        }
        if name.starts_with("store, warm") {
            let ready = server.log().join("\n");
            assert!(
                ready.contains("0 files (0 bytes) parsed"),
                "a warm start: {ready}"
            );
        }
    }
}
