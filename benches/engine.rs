//! Micro-benchmarks of the request path's pure parts, on data made by `stq gen`:
//! a shard's time-range scan, the router's merge of k sorted shard results, the
//! envelope's assembly from pre-rendered records, query-string parsing, and
//! snapshot line parsing (in MB/s).
//!
//! Run with `cargo bench --bench engine`; BENCHMARKS.md has the numbers.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};

use stq::http::{assemble, Meta};
use stq_core::data::catalog::Generation;
use stq_core::data::key::Position;
use stq_core::data::merge::merge_sorted;
use stq_core::data::scan::{Hit, Matcher, RecordFilter, ScanRequest, ShardStation};
use stq_core::data::stored::StoredRecord;
use stq_core::domain::query::{self, Endpoint, Limits};
use stq_core::domain::record::{parse_line, Directions, Kind};
use stq_core::domain::time::{parse_rfc3339, Timestamp, Window};

#[path = "support/dataset.rs"]
mod support;

/// Ten stations, seven days, on one shard: the data every benchmark reads.
fn dataset() -> (PathBuf, Generation) {
    support::dataset(1)
}

fn at(text: &str) -> Timestamp {
    parse_rfc3339(text).unwrap()
}

fn all_units() -> RecordFilter {
    RecordFilter::Units {
        unit_types: Matcher::Any,
        unit_serial: Matcher::Any,
        results: Matcher::Any,
        directions: Directions::BOTH,
    }
}

fn scan(criterion: &mut Criterion) {
    let (_, generation) = dataset();
    let (catalog, shards) = generation.into_parts();
    let shard = &shards[0];
    let stations: Vec<ShardStation> = (0..catalog.stations().len() as u32)
        .map(|rank| ShardStation {
            rank,
            station_index: catalog.placement(rank).station_index,
        })
        .collect();
    let names = RecordFilter::Metrics {
        names: catalog.matcher(&["voltage_3v3".to_owned(), "temperature".to_owned()]),
        unit_serial: Matcher::Any,
    };
    let cases = [
        (
            "one station, 1 h of units",
            vec![stations[0]],
            at("2026-10-30T12:00:00Z"),
            3600,
            all_units(),
        ),
        (
            "all stations, 15 min of units",
            stations.clone(),
            at("2026-10-30T12:00:00Z"),
            900,
            all_units(),
        ),
        (
            "five stations, 24 h of two metrics",
            stations[..5].to_vec(),
            at("2026-10-30T00:00:00Z"),
            86_400,
            names,
        ),
    ];
    let mut group = criterion.benchmark_group("shard scan");
    for (name, stations, from, seconds, filter) in cases {
        let request = ScanRequest {
            stations,
            window: Window {
                from,
                to: from.add_seconds(seconds),
            },
            after: None,
            filter,
            cap: 100_001,
        };
        let hits = shard.scan(&request).hits.len();
        group.throughput(Throughput::Elements(hits as u64));
        group.bench_function(
            BenchmarkId::new(name, format!("{hits} records")),
            |bencher| bencher.iter(|| black_box(shard.scan(black_box(&request)))),
        );
    }
    group.finish();
}

fn merge(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("router merge");
    let total = 10_000;
    for shards in [1, 2, 4, 8] {
        // Interleaved instants, as shards holding different stations produce them.
        let streams: Vec<Vec<Hit>> = (0..shards)
            .map(|shard| {
                (0..total / shards)
                    .map(|index| Hit {
                        position: Position {
                            instant: Timestamp {
                                seconds: (index * shards + shard) as i64,
                                nanos: 0,
                            },
                            station_rank: shard as u32,
                            load_order: index as u64,
                        },
                        station_index: 0,
                        bytes: StoredRecord {
                            start: 0,
                            length: 0,
                        },
                    })
                    .collect()
            })
            .collect();
        group.throughput(Throughput::Elements(total as u64));
        group.bench_function(
            BenchmarkId::new("10000 records", format!("{shards} shards")),
            |bencher| {
                bencher.iter_batched(
                    || streams.clone(),
                    |streams| {
                        let iterators = streams.into_iter().map(Vec::into_iter).collect();
                        black_box(merge_sorted(iterators, total + 1))
                    },
                    BatchSize::SmallInput,
                );
            },
        );
    }
    group.finish();
}

fn assembly(criterion: &mut Criterion) {
    let (directory, _) = dataset();
    let lines = std::fs::read_to_string(directory.join("ST-01/2026-10-30.metrics.jsonl")).unwrap();
    let mut records: Vec<Vec<u8>> = Vec::new();
    for line in lines.lines() {
        let mut rendered = Vec::new();
        parse_line(Kind::Metrics, line, &mut rendered, &mut Vec::new()).unwrap();
        records.push(rendered);
    }
    let meta = Meta {
        timestamp: chrono::DateTime::from_timestamp(1_761_955_200, 0).unwrap(),
        request_id: "0b5b5d8e-39c2-4e0c-a6d5-2f6f4a2a3f57",
        query_duration_ms: 0,
        next_cursor: None,
    };
    let mut group = criterion.benchmark_group("envelope assembly");
    for count in [10, 100, 1000] {
        let slice = &records[..count.min(records.len())];
        let bytes: usize = slice.iter().map(Vec::len).sum();
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_function(
            BenchmarkId::from_parameter(format!("{count} records")),
            |bencher| {
                bencher.iter(|| {
                    black_box(assemble(
                        Kind::Metrics,
                        slice.len(),
                        slice.iter().map(Vec::as_slice),
                        black_box(&meta),
                    ))
                });
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
            Kind::Units,
            "Q1",
            "station_ids=ST-042&from=2026-10-30T12:00:00Z&to=2026-10-30T13:00:00Z",
        ),
        (
            Kind::Metrics,
            "Q2",
            "station_ids=ST-001,ST-017,ST-042,ST-063,ST-099&names=voltage_3v3,temperature\
             &from=2026-10-29T00:00:00%2B01:00&to=2026-10-30T00:00:00%2B01:00",
        ),
        (
            Kind::Units,
            "Q4",
            "station_ids=ST-042&serial_number=SN-ST-042-5CE98331&direction=input&direction=output\
             &from=1761350400000&to=1761955200000&limit=500",
        ),
    ];
    for (kind, name, text) in cases {
        group.bench_function(name, |bencher| {
            bencher.iter(|| {
                black_box(query::parse(
                    Endpoint::records(kind),
                    black_box(text),
                    limits,
                ))
            });
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
