//! Micro-benchmarks of the request path's pure parts, on data made by `stq gen`,
//! through the steps the engine runs (`data::plan`): a shard's answer to its
//! question (a time-range scan), the router's merge of k shards' answers, the
//! envelope written around a page's records, query-string parsing, and
//! snapshot line parsing (in MB/s).
//!
//! Run with `cargo bench --bench engine`; BENCHMARKS.md has the numbers.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};

use stq::http::{envelope, Meta};
use stq_core::data::{Catalog, Generation, Plan, Request, Settings, ShardAnswer, ShardData};
use stq_core::domain::record::{parse_line, Kind};
use stq_core::domain::time::Timestamp;
use stq_core::domain::{Endpoint, Limits, QueryParams, Tokens};

#[path = "support/dataset.rs"]
mod support;

/// Ten stations, seven days, on one shard: the data every benchmark reads.
fn dataset() -> (PathBuf, Generation) {
    support::dataset(1)
}

/// The data on `shards` shards: its catalog and each shard's data.
fn sharded(shards: usize) -> (Arc<Catalog>, Vec<Arc<ShardData>>) {
    let (_, generation) = support::dataset(shards);
    let (catalog, data) = (generation.catalog, generation.shards);
    (catalog, data.into_iter().map(Arc::new).collect())
}

/// What the benches plan under: room for every record of the data, in any window.
fn settings() -> Settings {
    let limits = Limits {
        max_records: 100_000,
        max_stations: 1000,
        max_window: None,
        ..Limits::default()
    };
    Settings::new(limits, None).expect("a random cursor key")
}

/// `query` of `endpoint` planned on `catalog` as the engine plans a request: by
/// a token that may see every station, arriving when the data ends.
fn planned(catalog: &Arc<Catalog>, endpoint: Endpoint, query: &str, settings: &Settings) -> Plan {
    const TOKEN: &str = "stq-engine-benchmark";
    let tokens = format!(
        r#"{{"tokens": [{{"name": "bench", "sha256": "{}", "stations": "*"}}]}}"#,
        Tokens::hash(TOKEN)
    );
    let arrived = at(support::END);
    let principal = (tokens.parse::<Tokens>().expect("the tokens parse"))
        .authenticate(Some(format!("Bearer {TOKEN}").as_bytes()), arrived)
        .expect("the token is known");
    let request = Request {
        endpoint,
        params: QueryParams::parse(endpoint, query, settings.limits).expect("the query parses"),
        principal,
        arrived,
    };
    Plan::new(&request, Arc::clone(catalog), settings).expect("the query plans")
}

/// Each shard's answer to `plan`, in shard order.
fn answers(plan: &Plan, shards: &[Arc<ShardData>]) -> Vec<ShardAnswer> {
    (plan.shard_questions())
        .map(|(shard, question)| question.answer(Arc::clone(&shards[shard])))
        .map(|answer| answer.expect("a generation in memory reads"))
        .collect()
}

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

/// A shard's scan, as the shard actor runs it: the answer to its question.
fn scan(criterion: &mut Criterion) {
    let (catalog, shards) = sharded(1);
    let settings = settings();
    let cases = [
        (
            "one station, 1 h of units",
            Endpoint::Units,
            "station_ids=ST-01&direction=input,output\
             &from=2026-10-30T12:00:00Z&to=2026-10-30T13:00:00Z",
        ),
        (
            "all stations, 15 min of units",
            Endpoint::Units,
            "direction=input,output&from=2026-10-30T12:00:00Z&to=2026-10-30T12:15:00Z",
        ),
        (
            "five stations, 24 h of two metrics",
            Endpoint::Metrics,
            "station_ids=ST-01,ST-02,ST-03,ST-04,ST-05&names=voltage_3v3,temperature\
             &from=2026-10-30T00:00:00Z&to=2026-10-31T00:00:00Z",
        ),
    ];
    let mut group = criterion.benchmark_group("shard scan");
    for (name, endpoint, query) in cases {
        let plan = planned(&catalog, endpoint, query, &settings);
        let question = || {
            let (shard, question) = plan.shard_questions().next().expect("one shard");
            (question, Arc::clone(&shards[shard]))
        };
        let hits = (plan.merge(answers(&plan, &shards), &settings))
            .expect("a page")
            .count();
        group.throughput(Throughput::Elements(hits as u64));
        group.bench_function(
            BenchmarkId::new(name, format!("{hits} records")),
            |bencher| {
                bencher.iter_batched(
                    question,
                    |(question, data)| black_box(question.answer(data)),
                    BatchSize::SmallInput,
                );
            },
        );
    }
    group.finish();
}

/// The router's merge of the shards' answers into a page: every output unit
/// record of the data (10,080, a query's default direction), from 1, 2, 4 and 8
/// shards.
fn merge(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("router merge");
    let settings = settings();
    for shard_count in [1, 2, 4, 8] {
        let (catalog, shards) = sharded(shard_count);
        let plan = planned(
            &catalog,
            Endpoint::Units,
            "from=2026-10-25T00:00:00Z&to=2026-11-01T00:00:00Z",
            &settings,
        );
        let total = (plan.merge(answers(&plan, &shards), &settings))
            .expect("a page")
            .count();
        group.throughput(Throughput::Elements(total as u64));
        group.bench_function(
            BenchmarkId::new(format!("{total} records"), format!("{shard_count} shards")),
            |bencher| {
                bencher.iter_batched(
                    || answers(&plan, &shards),
                    |answers| black_box(plan.merge(answers, &settings)),
                    BatchSize::SmallInput,
                );
            },
        );
    }
    group.finish();
}

/// The envelope around a page of metric records, as a request's answer writes
/// it: one station's metrics over a window that holds `count` of them, merged,
/// then the body written around the page's `data` (`http::envelope`).
fn assembly(criterion: &mut Criterion) {
    let (catalog, shards) = sharded(1);
    let settings = settings();
    let meta = Meta {
        timestamp: chrono::DateTime::from_timestamp(1_761_955_200, 0).unwrap(),
        request_id: "0b5b5d8e-39c2-4e0c-a6d5-2f6f4a2a3f57",
        query_duration_ms: 0,
        next_cursor: None,
    };
    let mut group = criterion.benchmark_group("envelope assembly");
    for count in [10, 100, 1000] {
        let query = format!(
            "station_ids=ST-01&from=2026-10-30T00:00:00Z&to=2026-10-31T00:00:00Z&limit={count}"
        );
        let plan = planned(&catalog, Endpoint::Metrics, &query, &settings);
        let answer = (plan.merge(answers(&plan, &shards), &settings)).expect("a page");
        let (body, _) = envelope(Endpoint::Metrics, &answer, &meta);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(
            BenchmarkId::from_parameter(format!("{} records", answer.count())),
            |bencher| {
                bencher.iter(|| black_box(envelope(Endpoint::Metrics, &answer, black_box(&meta))));
            },
        );
    }
    group.finish();
}

fn query_parsing(criterion: &mut Criterion) {
    let limits = Limits {
        max_records: 100_000,
        max_stations: 1000,
        ..Limits::default()
    };
    let mut group = criterion.benchmark_group("query parsing");
    let cases = [
        (
            Endpoint::Units,
            "Q1",
            "station_ids=ST-042&from=2026-10-30T12:00:00Z&to=2026-10-30T13:00:00Z",
        ),
        (
            Endpoint::Metrics,
            "Q2",
            "station_ids=ST-001,ST-017,ST-042,ST-063,ST-099&names=voltage_3v3,temperature\
             &from=2026-10-29T00:00:00%2B01:00&to=2026-10-30T00:00:00%2B01:00",
        ),
        (
            Endpoint::Units,
            "Q4",
            "station_ids=ST-042&serial_number=SN-ST-042-5CE98331&direction=input&direction=output\
             &from=1761350400000&to=1761955200000&limit=500",
        ),
    ];
    for (endpoint, name, text) in cases {
        group.bench_function(name, |bencher| {
            bencher.iter(|| black_box(QueryParams::parse(endpoint, black_box(text), limits)));
        });
    }
    group.finish();
}

fn line_parsing(criterion: &mut Criterion) {
    let (directory, _) = dataset();
    let mut group = criterion.benchmark_group("snapshot line parsing");
    for (kind, file) in [
        (Kind::Units, "ST-01/2026-10-30.units.jsonl"),
        (Kind::Metrics, "ST-01/2026-10-30.metrics.jsonl"),
    ] {
        let text = std::fs::read_to_string(directory.join(file)).unwrap();
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_function(format!("{kind:?}"), |bencher| {
            let mut rendered = Vec::with_capacity(1024);
            let mut unknown = Vec::new();
            bencher.iter(|| {
                for line in text.lines() {
                    rendered.clear();
                    black_box(parse_line(kind, line, &mut rendered, &mut unknown).unwrap());
                }
            });
        });
    }
    group.finish();
}

criterion_group!(benches, scan, merge, assembly, query_parsing, line_parsing);
criterion_main!(benches);
