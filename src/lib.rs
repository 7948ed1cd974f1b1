//! stq, the Station Telemetry Query Service: a read-only HTTP service over
//! test-station records. See ARCHITECTURE.md for the map of these modules.

pub mod api;
pub mod auth;
pub mod config;
pub mod connection;
pub mod cursor;
pub mod error;
pub mod fault;
pub mod gen;
pub mod index;
pub mod metrics;
pub mod model;
pub mod query;
pub mod reload;
pub mod router;
pub mod server;
pub mod shard;
pub mod snapshot;
pub mod time;
