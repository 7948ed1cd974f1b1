//! stq's integration tests: one binary, as ripgrep has, so the shared helpers compile
//! once and the tests that can share a server do (`common::server()`).
//!
//! Every module but `properties` and `summary_properties` drives the real `stq`
//! binary over real HTTP; those two drive the loader and the in-process app against
//! a naive reference (the parsers' properties are stq-core's own tests,
//! `domain/parser_properties.rs`). Module by area of docs/api.md:
//!
//! | module | what it covers |
//! |---|---|
//! | `cli` | section 1: subcommands, flags, environment, `stq check`, `stq gen` |
//! | `contract` | sections 2, 6, 7: records, order, the envelope, errors |
//! | `csv` | section 7: CSV answers of every endpoint, read back by Python's `csv` module; `format`, `Accept`, pages by `Link`, caching |
//! | `export` | section 13: `stq export --parquet`, its files read back with the `parquet` crate and compared with the API's records |
//! | `docs` | README and docs/api.md against the binary's flags, the error codes, the repository's files |
//! | `grafana` | docs/grafana/: every query of the Grafana dashboard and its data source, sent as Infinity would to stq on the sample snapshot |
//! | `parameters` | sections 4 and 5: every parameter and the window |
//! | `pages` | section 6: `limit`, cursors, walks |
//! | `tenant` | section 3: tokens and station scopes |
//! | `tokens` | sections 1 and 3: `stq token new \| list \| revoke`, expiring tokens |
//! | `operations` | section 8: health, readiness, caching, compression, CORS |
//! | `metrics` | section 8: the admin listener's Prometheus metrics |
//! | `files` | section 8: the admin listener's `/files` |
//! | `reload` | section 8: SIGHUP and `--watch` |
//! | `https` | section 16: HTTPS to curl and httpx with a test CA, HTTP/2 streams, TLS 1.1 refused, the pair's reload |
//! | `jwt` | section 16: JSON Web Tokens minted by PyJWT for every algorithm, each refusal, a key set's file and URL, rotation, the refetch limit |
//! | `s3` | section 13 on S3: `stq export` and `serve --export` to moto's and s3s-fs's servers on loopback, read back by boto3, polars and chDB against the summaries; no credential in any output |
//! | `s3_store` | section 12 on S3: `--store s3://`, replicas sharing a bucket behind nginx, a bucket that goes away and comes back, a damaged object |
//! | `replicas` | two replicas behind Debian's nginx: one walk, 304s from both (skips where nginx cannot be had) |
//! | `live` | section 14: `wait` and streams, read by a Server-Sent Events reader (`common::sse`): the backlog against the walk, live and late records under `--watch`, resume, reset, the token's end, the limits, the slow reader, SIGTERM |
//! | `limits` | section 9: query length, window, timeouts, client deadlines, the cap |
//! | `hostile_queries`, `hostile_snapshots` | hostile input of both kinds |
//! | `imports` | the code's shape: no module of any crate uses one that uses it back (read with syn) |
//! | `shape` | the code's size: stq-core's `pub` items, the longest file and the longest function (read with syn) |
//! | `openapi` | the OpenAPI document, checked against real answers |
//! | `openhtf` | section 2.1: OpenHTF test records, from the fixtures OpenHTF wrote |
//! | `page` | section 11: the overview page, its files, and the page in chromium (skips where chromium cannot be had) |
//! | `properties` | proptest against the reference |
//! | `store` | section 12: `--store`, cold and warm starts against a start without one, damage, an unwritable store, `kill -9` while it is written |
//! | `summaries` | section 10: `/units/summary`, `/metrics/summary`, `/stations`, rule by rule |
//! | `summary_properties` | section 10: proptest of the summaries against a naive reference |
//! | `faults` | failure isolation (`--features fault-injection` builds only) |
//! | `production_build` | a build without that feature ignores `X-Stq-Fault` (with the feature, run against `STQ_TEST_BINARY`) |

mod common;

mod cli;
mod contract;
mod control;
mod csv;
mod docs;
mod export;
#[cfg(feature = "fault-injection")]
mod faults;
mod files;
mod grafana;
mod hostile_queries;
mod hostile_snapshots;
mod https;
mod imports;
mod jwt;
mod limits;
mod live;
mod metrics;
mod openapi;
mod openhtf;
mod operations;
mod page;
mod pages;
mod parameters;
mod production_build;
mod properties;
mod reload;
mod replicas;
mod s3;
mod s3_store;
mod shape;
mod store;
mod summaries;
mod summary_bytes;
mod summary_properties;
mod tenant;
mod tokens;
