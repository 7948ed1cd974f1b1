//! Prometheus metrics (docs/api.md section 8): what stq counts, and their exposition
//! in the OpenMetrics text format by prometheus-client, served on the admin
//! listener. Every name starts with `stq_`.
//!
//! Labels take values from small fixed sets (endpoints, status codes, shard
//! numbers), never from what a client sends, so no request can grow the registry.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use stq_core::data::snapshot::LoadReport;

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

/// Every metric stq keeps, and the registry that exposes them.
pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub request_duration: Family<EndpointLabels, Histogram>,
    pub records_returned: Family<EndpointLabels, Counter>,
    pub shard_records: Family<ShardLabels, Gauge>,
    pub load_duration: Gauge<f64, AtomicU64>,
    pub reloads: Counter,
    pub failed_reloads: Counter,
    pub generation: Gauge,
    /// Counted by the shard handles, which restart a shard actor that died.
    pub shard_restarts: Counter,
    pub files_read: Counter,
    pub bytes_read: Counter,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::with_prefix("stq");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "HTTP requests answered, by endpoint and status",
            requests.clone(),
        );
        // From 0.1 ms to about 3 s: a dashboard query is a millisecond or less.
        let request_duration = Family::<EndpointLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.0, 16))
        });
        registry.register(
            "request_duration_seconds",
            "Time from a request's arrival to its response, by endpoint",
            request_duration.clone(),
        );
        let records_returned = Family::<EndpointLabels, Counter>::default();
        registry.register(
            "records_returned",
            "Records (rows, for the summaries and /stations) sent in successful responses, by endpoint",
            records_returned.clone(),
        );
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
        Metrics {
            registry,
            files_read,
            bytes_read,
            shard_restarts,
            requests,
            request_duration,
            records_returned,
            shard_records,
            load_duration,
            reloads,
            failed_reloads,
            generation,
        }
    }
}

impl Metrics {
    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }

    /// Records what the generation now served holds and how long its load took.
    pub fn serving(&self, generation: u64, load_seconds: f64, shard_records: &[usize]) {
        self.generation.set(generation as i64);
        self.load_duration.set(load_seconds);
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
    /// Counts what a load or reload read.
    pub fn read(&self, report: &LoadReport) {
        self.files_read.inc_by(report.files.len() as u64);
        self.bytes_read.inc_by(report.bytes);
    }
}

/// The endpoint label of a request path: one of a fixed set.
pub fn endpoint_label(path: &str) -> &'static str {
    match path {
        "/units" => "/units",
        "/metrics" => "/metrics",
        "/units/summary" => "/units/summary",
        "/metrics/summary" => "/metrics/summary",
        "/stations" => "/stations",
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
        metrics
            .requests
            .get_or_create(&RequestLabels {
                endpoint: "/units",
                status: 200,
            })
            .inc();
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

    #[test]
    fn client_paths_never_become_labels() {
        assert_eq!(endpoint_label("/units"), "/units");
        assert_eq!(endpoint_label("/units/summary"), "/units/summary");
        assert_eq!(endpoint_label("/stations"), "/stations");
        assert_eq!(endpoint_label("/ui/app.js"), "/ui/");
        assert_eq!(endpoint_label("/ui/../x"), "/ui/");
        assert_eq!(endpoint_label("/units/../secret"), "other");
        assert_eq!(endpoint_label("/anything"), "other");
    }
}
