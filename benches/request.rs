//! One whole request in process, without a socket: the actix-web app as `stq serve`
//! builds it (middleware, token check, parsing, planning, ETag, a query slot, the
//! router and the shard actors on this thread, the envelope), called through
//! actix-web's test service. What the load benchmark measures minus the sockets and
//! HTTP/1 parsing, so the per-request costs stq adds are seen without the noise of
//! a load generator.
//!
//! `cargo bench --bench request` runs criterion. `REQUEST_PROFILE=Q1 cargo bench
//! --bench request` instead answers that query 20,000 times and exits, for
//! `valgrind --tool=callgrind` to attribute the instructions to each part
//! (BENCHMARKS.md has the shares and the command).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use actix_web::dev::{Service, ServiceResponse};
use actix_web::test::{self as actix_test, TestRequest};
use actix_web::web;
use criterion::{Criterion, Throughput};

#[path = "support/dataset.rs"]
mod support;

use stq::engine::Engine;
use stq::http::{app, AppState};
use stq_core::data::Settings;
use stq_core::domain::{Limits, Tokens};

const TOKEN: &str = "stq-request-benchmark";
/// Requests answered per `REQUEST_PROFILE` run.
const PROFILE_REQUESTS: usize = 20_000;

/// Ten stations, seven days of `stq gen` data, on two shards as on a 2-core box.
fn engine() -> (Engine, PathBuf) {
    let (directory, generation) = support::dataset(2);
    let tokens = format!(
        r#"{{"tokens": [{{"name": "bench", "sha256": "{}", "stations": "*"}}]}}"#,
        Tokens::hash(TOKEN)
    );
    let engine = Engine::start(
        generation,
        Arc::new(tokens.parse::<Tokens>().expect("the tokens parse")),
        Settings::new(Limits::default(), None).expect("a random cursor key"),
        Default::default(),
    );
    (engine, directory)
}

/// A serial number of the data, for the Q4-like query.
fn some_serial(directory: &Path) -> String {
    let station = directory.join("ST-01");
    let file = std::fs::read_dir(&station)
        .expect("the station's directory")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.to_string_lossy().ends_with(".units.jsonl"))
        .min()
        .expect("a units file");
    let text = std::fs::read_to_string(file).expect("the units file");
    let line: serde_json::Value =
        serde_json::from_str(text.lines().nth(100).expect("100 lines")).expect("a JSON line");
    line["unit_serial"].as_str().expect("a serial").to_owned()
}

/// Q2 of the load benchmark: five stations, 24 h of metrics filtered by two names.
const Q2: &str = "/metrics?station_ids=ST-01,ST-03,ST-05,ST-07,ST-09&names=voltage_3v3,temperature\
                  &from=2026-10-29T00:00:00Z&to=2026-10-30T00:00:00Z";

/// The data's seven days.
const WEEK: &str = "from=2026-10-25T00:00:00Z&to=2026-11-01T00:00:00Z";

/// The load benchmark's query shapes, on this data.
fn queries(serial: &str) -> [(&'static str, String); 17] {
    [
        (
            "Q1",
            "/units?station_ids=ST-03&from=2026-10-29T10:00:00Z&to=2026-10-29T11:00:00Z".into(),
        ),
        ("Q2", Q2.into()),
        // Q2 as CSV, beside its JSON (the target: at most 1.2 x its CPU).
        ("Q2csv", format!("{Q2}&format=csv")),
        (
            "Q3",
            "/units?from=2026-10-29T10:00:00Z&to=2026-10-29T10:15:00Z".into(),
        ),
        (
            "Q4",
            format!(
                "/units?station_ids=ST-01&serial_number={serial}&direction=input,output\
                 &from=2026-10-25T00:00:00Z&to=2026-11-01T00:00:00Z"
            ),
        ),
        (
            "Q5",
            "/units?from=2026-10-29T00:00:00Z&to=2026-10-30T00:00:00Z".into(),
        ),
        (
            "Q6",
            "/units/summary?from=2026-10-29T00:00:00Z&to=2026-10-30T00:00:00Z&bucket=1h".into(),
        ),
        // Q6 in a plant's local hours, which the target is set on.
        (
            "Q6tz",
            "/units/summary?from=2026-10-29T00:00:00Z&to=2026-10-30T00:00:00Z&bucket=1h\
             &tz=Europe/Berlin"
                .into(),
        ),
        // The measurements' statistics and capability per station and
        // name, as in the load benchmark.
        (
            "Q8",
            "/metrics/summary?from=2026-10-29T00:00:00Z&to=2026-10-30T00:00:00Z".into(),
        ),
        // Issue 51: the load benchmark's H2 (the seven days' units summary, a day
        // a bucket), and the same of the measurements, read mostly from digests.
        (
            "H2",
            "/units/summary?from=2026-10-25T00:00:00Z&to=2026-11-01T00:00:00Z&bucket=1d".into(),
        ),
        (
            "H2m",
            "/metrics/summary?from=2026-10-25T00:00:00Z&to=2026-11-01T00:00:00Z&bucket=1d".into(),
        ),
        // A control chart beside the summary of the same records (the
        // targets: at most 2 x), of one station's metric over the seven days
        // (`C1`), of all its metrics (`C7`), and of every station's metrics over
        // a day (`C24`, beside `Q8`).
        (
            "C1",
            format!("/metrics/control?{WEEK}&station_ids=ST-03&names=voltage_3v3"),
        ),
        (
            "C1s",
            format!("/metrics/summary?{WEEK}&station_ids=ST-03&names=voltage_3v3"),
        ),
        ("C7", format!("/metrics/control?{WEEK}&station_ids=ST-03")),
        ("C7s", format!("/metrics/summary?{WEEK}&station_ids=ST-03")),
        (
            "C24",
            "/metrics/control?from=2026-10-29T00:00:00Z&to=2026-10-30T00:00:00Z".into(),
        ),
        // The same with a baseline of the day before.
        (
            "C24b",
            "/metrics/control?from=2026-10-29T00:00:00Z&to=2026-10-30T00:00:00Z\
             &baseline_from=2026-10-28T00:00:00Z&baseline_to=2026-10-29T00:00:00Z"
                .into(),
        ),
    ]
}

async fn call<S, B>(service: &S, path: &str) -> usize
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: actix_web::body::MessageBody,
{
    let request = TestRequest::get()
        .uri(path)
        .insert_header(("Authorization", format!("Bearer {TOKEN}")))
        .to_request();
    let response = actix_test::call_service(service, request).await;
    assert_eq!(response.status(), 200, "{path}");
    actix_test::read_body(response).await.len()
}

fn main() {
    let (engine, directory) = engine();
    let serial = some_serial(&directory);
    let system = actix_rt::System::new();
    let service = system.block_on(async {
        let state = web::Data::new(AppState::new(engine.clone()));
        Rc::new(actix_test::init_service(app(state, engine.router())).await)
    });
    let queries = queries(&serial);

    if let Ok(wanted) = std::env::var("REQUEST_PROFILE") {
        let (_, path) = queries.iter().find(|(name, _)| *name == wanted).expect(
            "REQUEST_PROFILE names a query: Q1 to Q6, Q2csv, Q6tz, Q8, H2, H2m or C1 to C24b",
        );
        let bytes: usize = system.block_on(async {
            let mut bytes = 0;
            for _ in 0..PROFILE_REQUESTS {
                bytes += call(&*service, path).await;
            }
            bytes
        });
        println!("{PROFILE_REQUESTS} requests, {bytes} bytes of bodies");
        return;
    }

    let mut criterion = Criterion::default().configure_from_args();
    let mut group = criterion.benchmark_group("whole request in process");
    for (name, path) in &queries {
        let body = system.block_on(call(&*service, path));
        group.throughput(Throughput::Bytes(body as u64));
        group.bench_function(*name, |bencher| {
            bencher.iter(|| system.block_on(call(&*service, black_box(path))));
        });
    }
    group.finish();
    criterion.final_summary();
}
