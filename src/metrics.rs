//! Prometheus metrics (docs/api.md section 8): what stq counts, and their exposition
//! in the OpenMetrics text format by prometheus-client, served on the admin
//! listener. Every name starts with `stq_`.
//!
//! Labels take values from small fixed sets (endpoints, status codes, shard
//! numbers) or from the data served (a station id per station with records, for
//! its freshness gauge), never from what a client sends, so no request can grow the
//! registry.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use stq_core::data::{BlockCache, Generation, LoadReport};
use stq_core::domain::Endpoint;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub endpoint: &'static str,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub endpoint: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardLabels {
    pub shard: u32,
}

/// How a reload ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Swapped in a generation with every changed file read cleanly.
    Clean,
    /// Swapped in a generation, holding back files with invalid lines.
    Held,
    /// Kept the current generation.
    Failed,
}

impl Outcome {
    /// Its `outcome` label.
    fn label(self) -> &'static str {
        match self {
            Outcome::Clean => "clean",
            Outcome::Held => "held",
            Outcome::Failed => "failed",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// What live answers count (docs/api.md section 14).
#[derive(Clone, Default)]
pub struct LiveMetrics {
    /// Streams open.
    pub streams: Gauge,
    /// Requests held by `wait`.
    pub waiting: Gauge,
    /// `records` events sent.
    pub events: Counter,
    /// Streams ended by stq or by their client: `slow`, `closed` or `token`.
    pub disconnects: Family<ReasonLabels, Counter>,
    /// Evaluations of held requests' queries after an install: one per group of
    /// held requests asking the same thing, not one per request.
    pub evaluations: Counter,
}

impl LiveMetrics {
    fn register(&self, registry: &mut Registry) {
        // Each reason shows from the start, at 0, so that a rate over it is defined
        // before the first stream ends.
        for reason in ["slow", "closed", "token"] {
            drop(self.disconnects.get_or_create(&ReasonLabels { reason }));
        }
        registry.register("streams", "Streams open", self.streams.clone());
        registry.register(
            "waiting_requests",
            "Requests held by `wait` until a generation changes their answer",
            self.waiting.clone(),
        );
        registry.register(
            "stream_events",
            "Records events sent on streams",
            self.events.clone(),
        );
        registry.register(
            "stream_disconnects",
            "Streams ended: slow (left unread: more than 4 MiB queued, or cut off by --client-timeout), closed (by the client, or by SIGTERM) or token (revoked or expired)",
            self.disconnects.clone(),
        );
        registry.register(
            "wait_evaluations",
            "Queries of held requests evaluated again after an install, one per group asking the same thing",
            self.evaluations.clone(),
        );
    }

    /// Counts a stream's end.
    pub fn disconnected(&self, reason: &'static str) {
        self.disconnects
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }
}

/// Every metric stq keeps, and the registry that exposes them.
pub struct Metrics {
    registry: Registry,
    /// `requests`, `request_duration_seconds` and `records_returned`, tallied by
    /// each HTTP worker apart.
    pub requests: Arc<RequestMetrics>,
    pub shard_records: Family<ShardLabels, Gauge>,
    pub load_duration: Gauge<f64, AtomicU64>,
    reloads: Counter,
    failed_reloads: Counter,
    reload_outcomes: Family<OutcomeLabels, Counter>,
    held_files: Gauge,
    pub generation: Gauge,
    /// Counted by the shard handles, which restart a shard actor that died.
    pub shard_restarts: Counter,
    pub files_read: Counter,
    pub bytes_read: Counter,
    /// Each station's newest record, of the generation served.
    freshness: Freshness,
    /// Streams and held requests.
    pub live: LiveMetrics,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::with_prefix("stq");
        let requests = Arc::new(RequestMetrics::default());
        registry.register_collector(Box::new(RequestCollector(Arc::clone(&requests))));
        let shard_records = Family::<ShardLabels, Gauge>::default();
        registry.register(
            "shard_records",
            "Records the current generation holds, by shard",
            shard_records.clone(),
        );
        let load_duration = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "snapshot_load_duration_seconds",
            "How long the load of the current generation took",
            load_duration.clone(),
        );
        let reloads = Counter::default();
        registry.register(
            "reloads",
            "Reloads that swapped in a new generation",
            reloads.clone(),
        );
        let failed_reloads = Counter::default();
        registry.register(
            "failed_reloads",
            "Reloads that failed and kept the current generation",
            failed_reloads.clone(),
        );
        let reload_outcomes = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "reload_outcomes",
            "Reloads by how they ended: clean, held (swapped in, holding back files with invalid lines) or failed (kept the current generation)",
            reload_outcomes.clone(),
        );
        let held_files = Gauge::default();
        registry.register(
            "held_files",
            "Snapshot files held back for invalid lines, each serving what it served before (/readyz held_files)",
            held_files.clone(),
        );
        let generation = Gauge::default();
        registry.register(
            "generation",
            "The generation being served",
            generation.clone(),
        );
        let shard_restarts = Counter::default();
        registry.register(
            "shard_restarts",
            "Shard actors that died and were started again with their data",
            shard_restarts.clone(),
        );
        let files_read = Counter::default();
        registry.register(
            "snapshot_files_read",
            "Snapshot files read, whole or from where a grown one's last read ended, by the first load and every reload",
            files_read.clone(),
        );
        let bytes_read = Counter::default();
        registry.register(
            "snapshot_bytes_read",
            "Snapshot bytes read (after decompression) by the first load and every reload",
            bytes_read.clone(),
        );
        let freshness = Freshness::default();
        registry.register_collector(Box::new(freshness.clone()));
        let live = LiveMetrics::default();
        live.register(&mut registry);
        Metrics {
            live,
            freshness,
            registry,
            files_read,
            bytes_read,
            shard_restarts,
            requests,
            shard_records,
            load_duration,
            reloads,
            failed_reloads,
            reload_outcomes,
            held_files,
            generation,
        }
    }
}

impl Metrics {
    /// Reports the figures of `cache`, the decoded sealed blocks' (`--cache-size`).
    pub fn with_cache(mut self, cache: BlockCache) -> Metrics {
        (self.registry).register_collector(Box::new(CacheCollector(cache)));
        self
    }

    /// Reports `stq_store_generation` (with `--store`) as `generation` reads it.
    pub fn with_store_generation(
        mut self,
        generation: impl Fn() -> u64 + Send + Sync + 'static,
    ) -> Metrics {
        (self.registry).register_collector(Box::new(StoreCollector(Box::new(generation))));
        self
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }

    /// Records what the generation now served holds (`gauges`) and how long its
    /// load took.
    pub fn serving(&self, gauges: Gauges, load_seconds: f64) {
        let Gauges {
            generation,
            shard_records,
            held_files,
            newest,
        } = gauges;
        self.generation.set(generation as i64);
        self.held_files.set(held_files as i64);
        self.load_duration.set(load_seconds);
        *self.freshness.0.lock() = newest.into();
        for (shard, &records) in shard_records.iter().enumerate() {
            self.shard_records
                .get_or_create(&ShardLabels {
                    shard: shard as u32,
                })
                .set(records as i64);
        }
    }
}

impl Metrics {
    /// Counts a reload by its outcome; the generation it swapped in, if any, has
    /// been recorded by [`Metrics::serving`].
    pub fn reloaded(&self, outcome: Outcome) {
        match outcome {
            Outcome::Clean | Outcome::Held => self.reloads.inc(),
            Outcome::Failed => self.failed_reloads.inc(),
        };
        self.reload_outcomes
            .get_or_create(&OutcomeLabels {
                outcome: outcome.label(),
            })
            .inc();
    }

    /// Counts what a load or reload read.
    pub fn read(&self, report: &LoadReport) {
        self.files_read.inc_by(report.files.len() as u64);
        self.bytes_read.inc_by(report.bytes);
    }
}

/// What the gauges say of a generation: taken from it before the engine takes it
/// over, and set ([`Metrics::serving`]) once it is served.
#[derive(Debug)]
pub struct Gauges {
    generation: u64,
    shard_records: Vec<usize>,
    held_files: u64,
    newest: Vec<StationNewest>,
}

/// A station with records and the instant of its newest, in Unix seconds.
type StationNewest = (Box<str>, f64);

impl Gauges {
    pub fn of(generation: &Generation) -> Gauges {
        let catalog = &generation.catalog;
        let newest = (generation.newest_records().into_iter())
            .map(|(station, instant)| {
                let seconds = instant.seconds as f64 + f64::from(instant.nanos) / 1e9;
                (station.into(), seconds)
            })
            .collect();
        Gauges {
            generation: catalog.generation(),
            shard_records: generation.shard_records(),
            held_files: catalog.summary.held_files,
            newest,
        }
    }

    /// Files held for invalid lines.
    pub fn held_files(&self) -> u64 {
        self.held_files
    }
}

/// `station_last_record_timestamp_seconds`: per station with records, the instant
/// of its newest record, so that an alert finds a station that fell silent. The
/// whole list is replaced at each reload: a station whose records all left has no
/// series. Clones share the list.
#[derive(Clone, Debug, Default)]
struct Freshness(Arc<Mutex<Arc<[StationNewest]>>>);

impl Collector for Freshness {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let newest = Arc::clone(&self.0.lock());
        if newest.is_empty() {
            return Ok(());
        }
        let mut family = encoder.encode_descriptor(
            "station_last_record_timestamp_seconds",
            "The instant of each station's newest record served, in Unix seconds.",
            None,
            MetricType::Gauge,
        )?;
        for (station, seconds) in newest.iter() {
            ConstGauge::new(*seconds)
                .encode(family.encode_family(&[("station_id", &**station)])?)?;
        }
        Ok(())
    }
}

/// The upper bounds of `request_duration_seconds`' buckets: from 0.1 ms to about
/// 3 s, as a dashboard query is a millisecond or less, then `+Inf`.
static DURATION_BOUNDS: LazyLock<[f64; DURATION_BUCKETS]> = LazyLock::new(|| {
    let mut bounds = [f64::INFINITY; DURATION_BUCKETS];
    for (bound, exponential) in bounds.iter_mut().zip(exponential_buckets(
        0.0001,
        2.0,
        DURATION_BUCKETS as u16 - 1,
    )) {
        *bound = exponential;
    }
    bounds
});

const DURATION_BUCKETS: usize = 16 + 1;

/// The request metrics of every HTTP worker.
///
/// Each worker counts its own requests in a [`WorkerTally`] that no other worker
/// touches, and a scrape sums them. Counters and a histogram shared by the workers
/// made every request of one worker take cache lines from the other (a family's
/// lock, the histogram's lock, the counters): measured, requests without them ran
/// faster by more than the noise (BENCHMARKS.md).
#[derive(Debug, Default)]
pub struct RequestMetrics {
    workers: Mutex<Vec<Arc<WorkerTally>>>,
}

impl RequestMetrics {
    /// A new worker's tally, summed into every scrape from now on.
    pub fn worker(&self) -> Arc<WorkerTally> {
        let tally = Arc::<WorkerTally>::default();
        self.workers.lock().push(Arc::clone(&tally));
        tally
    }

    /// All workers' tallies added up.
    fn sum(&self) -> Tally {
        let mut sum = Tally::default();
        for worker in self.workers.lock().iter() {
            sum.add(&worker.tally.lock());
        }
        sum
    }
}

/// One HTTP worker's requests. Its lock is taken by its own worker for each request
/// and by a scrape, so it is never contended in practice.
#[derive(Debug, Default)]
pub struct WorkerTally {
    tally: Mutex<Tally>,
}

impl WorkerTally {
    /// Counts a request answered with `status` after `seconds`, sending `records`.
    pub fn record(&self, endpoint: &'static str, status: u16, seconds: f64, records: usize) {
        let mut tally = self.tally.lock();
        *entry(&mut tally.requests, (endpoint, status)) += 1;
        entry(&mut tally.durations, endpoint).observe(seconds);
        if records > 0 {
            *entry(&mut tally.records, endpoint) += records as u64;
        }
    }
}

/// Counts by label, in the order first seen: a handful of entries, where a linear
/// search beats hashing.
#[derive(Clone, Debug, Default)]
struct Tally {
    requests: Vec<((&'static str, u16), u64)>,
    durations: Vec<(&'static str, DurationTally)>,
    records: Vec<(&'static str, u64)>,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        for (labels, count) in &other.requests {
            *entry(&mut self.requests, *labels) += count;
        }
        for (endpoint, durations) in &other.durations {
            entry(&mut self.durations, *endpoint).add(durations);
        }
        for (endpoint, count) in &other.records {
            *entry(&mut self.records, *endpoint) += count;
        }
    }
}

fn entry<K: PartialEq, V: Default>(entries: &mut Vec<(K, V)>, key: K) -> &mut V {
    let index = match entries.iter().position(|(existing, _)| *existing == key) {
        Some(index) => index,
        None => {
            entries.push((key, V::default()));
            entries.len() - 1
        }
    };
    &mut entries[index].1
}

/// A histogram as prometheus-client's keeps it: each observation counted in the
/// first bucket whose bound holds it (`NaN` in the last).
#[derive(Clone, Debug, Default)]
struct DurationTally {
    sum: f64,
    count: u64,
    buckets: [u64; DURATION_BUCKETS],
}

impl DurationTally {
    fn observe(&mut self, seconds: f64) {
        self.sum += seconds;
        self.count += 1;
        let bucket = DURATION_BOUNDS
            .iter()
            .position(|&bound| bound >= seconds)
            .unwrap_or(DURATION_BUCKETS - 1);
        self.buckets[bucket] += 1;
    }

    fn add(&mut self, other: &DurationTally) {
        self.sum += other.sum;
        self.count += other.count;
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets) {
            *mine += theirs;
        }
    }
}

/// Encodes the workers' tallies summed, under the names the request metrics have
/// always had (a registered metric's help gets a full stop; a collector writes its own).
#[derive(Debug)]
struct RequestCollector(Arc<RequestMetrics>);

impl Collector for RequestCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let tally = self.0.sum();
        if !tally.requests.is_empty() {
            let mut family = encoder.encode_descriptor(
                "requests",
                "HTTP requests answered, by endpoint and status.",
                None,
                MetricType::Counter,
            )?;
            for ((endpoint, status), count) in &tally.requests {
                let labels = RequestLabels {
                    endpoint,
                    status: *status,
                };
                ConstCounter::new(*count).encode(family.encode_family(&labels)?)?;
            }
        }
        if !tally.durations.is_empty() {
            let mut family = encoder.encode_descriptor(
                "request_duration_seconds",
                "Time from a request's arrival to its response, by endpoint.",
                None,
                MetricType::Histogram,
            )?;
            for (endpoint, durations) in &tally.durations {
                let buckets: Vec<(f64, u64)> = DURATION_BOUNDS
                    .iter()
                    .copied()
                    .zip(durations.buckets)
                    .collect();
                family
                    .encode_family(&EndpointLabels { endpoint })?
                    .encode_histogram::<NoLabelSet>(
                        durations.sum,
                        durations.count,
                        &buckets,
                        None,
                    )?;
            }
        }
        if !tally.records.is_empty() {
            let mut family = encoder.encode_descriptor(
                "records_returned",
                "Records (rows, for the summaries and /stations) sent in successful responses, by endpoint.",
                None,
                MetricType::Counter,
            )?;
            for (endpoint, count) in &tally.records {
                ConstCounter::new(*count)
                    .encode(family.encode_family(&EndpointLabels { endpoint })?)?;
            }
        }
        Ok(())
    }
}

/// Encodes `stq_store_generation`, read at each scrape from the store's thread's
/// status (docs/api.md section 12).
struct StoreCollector(Box<dyn Fn() -> u64 + Send + Sync>);

impl std::fmt::Debug for StoreCollector {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("StoreCollector")
    }
}

impl Collector for StoreCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        ConstGauge::new((self.0)() as i64).encode(encoder.encode_descriptor(
            "store_generation",
            "The generation the store holds whole (equal to stq_generation once its writes have caught up; 0 before this process's first write reached it).",
            None,
            MetricType::Gauge,
        )?)
    }
}

/// Encodes what the process's cache of decoded sealed blocks holds and has done
/// (`--cache-size`), read from the cache at each scrape.
#[derive(Debug)]
struct CacheCollector(BlockCache);

impl Collector for CacheCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = self.0.stats();
        let gauges = [
            (
                "cache_bytes",
                "Bytes of sealed history held decoded in the cache.",
                stats.bytes,
            ),
            (
                "cache_capacity_bytes",
                "Bytes the cache of decoded sealed history may hold (--cache-size).",
                stats.capacity,
            ),
        ];
        for (name, help, value) in gauges {
            ConstGauge::new(value as i64).encode(encoder.encode_descriptor(
                name,
                help,
                None,
                MetricType::Gauge,
            )?)?;
        }
        let counters = [
            (
                "cache_hits",
                "Reads of a sealed block, or of a shard's merged four hours, that found it decoded in the cache.",
                stats.hits,
            ),
            (
                "cache_misses",
                "Reads of a sealed block, or of a shard's merged four hours, that decoded it (then kept it in the cache if it fit).",
                stats.misses,
            ),
            (
                "store_reads",
                "Reads of a sealed block's part (a frame or a digest) from a store file (--store).",
                stats.store_reads,
            ),
            (
                "store_read_bytes",
                "Bytes of those reads from store files.",
                stats.store_read_bytes,
            ),
        ];
        for (name, help, value) in counters {
            ConstCounter::new(value).encode(encoder.encode_descriptor(
                name,
                help,
                None,
                MetricType::Counter,
            )?)?;
        }
        Ok(())
    }
}

/// The endpoint label of a request path: one of a fixed set.
pub fn endpoint_label(path: &str) -> &'static str {
    if let Some(endpoint) = (Endpoint::ALL.into_iter()).find(|known| known.spec().path == path) {
        return endpoint.spec().path;
    }
    match path {
        "/healthz" => "/healthz",
        "/readyz" => "/readyz",
        "/openapi.json" => "/openapi.json",
        "/" => "/",
        // The page's files: one label, whatever file (or unknown path) under it.
        path if path.starts_with("/ui/") => "/ui/",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_names_every_metric_with_the_prefix() {
        let metrics = Metrics::default();
        metrics.requests.worker().record("/units", 200, 0.000_3, 2);
        metrics.reloads.inc();
        let text = metrics.render();
        assert!(
            text.contains(r#"stq_requests_total{endpoint="/units",status="200"} 1"#),
            "{text}"
        );
        assert!(text.contains("stq_reloads_total 1"), "{text}");
        for line in text.lines().filter(|line| !line.starts_with('#')) {
            assert!(line.starts_with("stq_"), "{line}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    /// Issue 10: the workers' tallies, summed, read exactly as one shared
    /// prometheus-client family of counters and histograms did.
    #[test]
    fn issue_10_worker_tallies_expose_what_shared_metrics_did() {
        use prometheus_client::metrics::histogram::Histogram;
        let mut registry = Registry::with_prefix("stq");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "HTTP requests answered, by endpoint and status",
            requests.clone(),
        );
        let durations = Family::<EndpointLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.0, 16))
        });
        registry.register(
            "request_duration_seconds",
            "Time from a request's arrival to its response, by endpoint",
            durations.clone(),
        );
        let records = Family::<EndpointLabels, Counter>::default();
        registry.register("records_returned", "Records (rows, for the summaries and /stations) sent in successful responses, by endpoint", records.clone());

        let metrics = Metrics::default();
        let workers = [metrics.requests.worker(), metrics.requests.worker()];
        let requests_made = [
            ("/units", 200, 0.000_05, 3),
            ("/units", 200, 0.000_1, 0),
            ("/metrics", 304, 0.25, 0),
            ("/units", 400, 7.0, 0),
            ("other", 404, f64::NAN, 0),
            ("/units", 200, 0.003, 12),
        ];
        for (index, (endpoint, status, seconds, count)) in requests_made.into_iter().enumerate() {
            workers[index % 2].record(endpoint, status, seconds, count);
            requests
                .get_or_create(&RequestLabels { endpoint, status })
                .inc();
            durations
                .get_or_create(&EndpointLabels { endpoint })
                .observe(seconds);
            if count > 0 {
                records
                    .get_or_create(&EndpointLabels { endpoint })
                    .inc_by(count as u64);
            }
        }
        let mut shared = String::new();
        prometheus_client::encoding::text::encode(&mut shared, &registry).unwrap();
        let tallied = metrics.render();
        // The requests' metrics, not the held requests' (`wait`), which the shared
        // registry of this test does not have.
        let is_request_line = |line: &str| line.contains("request") && !line.contains("wait");
        // NaN sums compare unequal as numbers but print alike.
        for line in shared.lines().filter(|line| is_request_line(line)) {
            assert!(
                tallied.lines().any(|tallied| tallied == line),
                "{line} missing from\n{tallied}"
            );
        }
        assert_eq!(
            shared.lines().filter(|line| is_request_line(line)).count(),
            tallied.lines().filter(|line| is_request_line(line)).count()
        );
    }

    #[test]
    fn client_paths_never_become_labels() {
        assert_eq!(endpoint_label("/units"), "/units");
        assert_eq!(endpoint_label("/units/summary"), "/units/summary");
        assert_eq!(endpoint_label("/stations"), "/stations");
        for endpoint in Endpoint::ALL {
            assert_eq!(endpoint_label(endpoint.spec().path), endpoint.spec().path);
        }
        assert_eq!(endpoint_label("/ui/app.js"), "/ui/");
        assert_eq!(endpoint_label("/ui/../x"), "/ui/");
        assert_eq!(endpoint_label("/units/../secret"), "other");
        assert_eq!(endpoint_label("/anything"), "other");
    }
}
