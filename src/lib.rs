//! stq, the Station Telemetry Query Service: a read-only HTTP service over
//! test-station records. ARCHITECTURE.md maps the code; this crate is the service
//! on top of `stq-core`'s pure layers.
//!
//! Layers point one way: [`cli`] → [`http`] → [`engine`] → [`export`] →
//! `stq_core::data` → `stq_core::domain` (a layer may also skip those below it). [`metrics`] is a leaf both the HTTP layer and the engine
//! feed; [`jwt`] (JSON Web Tokens) and [`tls`] (the listener's certificate) leaves
//! the engine and the HTTP layer use; [`systemd`] a leaf that tells systemd the service's state; `newest` a leaf mailbox for the
//! threads that work off the request path. [`export`] writes through `stq_objects` (a
//! directory or an S3 bucket), a crate of its own that depends on no other of stq's.

#![warn(unreachable_pub)]

pub mod cli;
pub mod engine;
pub mod export;
pub mod http;
pub mod jwt;
pub mod metrics;
mod newest;
pub mod store;
pub mod systemd;
pub mod tls;
