//! Objects as keys of an S3 bucket under a prefix, through `object_store`'s
//! `AmazonS3`, whose async calls a runtime of this module's own drives: callers
//! are plain threads (the export's, the store's), and block on each call.
//!
//! An object is put with one PUT of its whole bytes, so it is there whole or not
//! at all; nothing is ever uploaded in parts.

use std::future::Future;
use std::ops::Range;
use std::time::Duration;

use futures_util::TryStreamExt as _;
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as StorePath;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, ObjectStore as _, ObjectStoreExt as _, PutPayload,
    RetryConfig,
};

use crate::error::chain;
use crate::{Listed, ObjectsError, S3Settings};

/// A TCP (and TLS) connection to the endpoint must be made within this. An S3
/// endpoint, or a MinIO on the same network, answers within milliseconds; 5 s
/// covers a SYN lost twice (retransmitted after 1 s, then 3 s more) and no more,
/// so that an endpoint that is down or filtered fails fast and is retried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One request, from its start to the last byte of its answer. The largest body
/// stq sends is an export's part: up to 8 Mi rows, some 175 MB at the 21 bytes a
/// row BENCHMARKS.md measured for a week of 1000 stations. 120 s lets that go at
/// 1.5 MB/s, a slow link's pace, while a request that hangs ends in minutes.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Retries of a request that failed in a way worth trying again (no connection,
/// a reset, a timeout of an idempotent request, 5xx, 429), with a backoff from
/// 200 ms, doubled each time (object_store adds jitter) up to 5 s: some 6 s of
/// waiting over 4 retries. That rides out what clears by itself (S3's 503 Slow
/// Down, an endpoint restarting, a load balancer's hiccup) while an endpoint that
/// is down fails a call in seconds, not after object_store's default of 10
/// retries up to 15 s apart (minutes), so that `stq export` exits with its error
/// and a store reports itself degraded promptly. The AWS SDKs' standard mode
/// makes 3 attempts.
const RETRIES: usize = 4;
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const LONGEST_BACKOFF: Duration = Duration::from_secs(5);
/// No retry begins this long after the first attempt began.
const RETRY_TIMEOUT: Duration = Duration::from_secs(60);

/// A bucket, and the prefix every name is put under.
pub(crate) struct Bucket {
    store: AmazonS3,
    /// `s3://BUCKET/PREFIX`, for messages.
    location: String,
    prefix: String,
    settings: S3Settings,
    driver: Driver,
}

/// The runtime that drives the requests: one worker thread, which runs the
/// connections' own tasks between calls, while each caller's thread blocks on its
/// own call. Shut down in the background when dropped, so that dropping it never
/// blocks, even where blocking is not allowed.
struct Driver {
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Bucket {
    pub(crate) fn open(
        bucket: &str,
        prefix: &str,
        location: String,
        settings: &S3Settings,
    ) -> Result<Bucket, ObjectsError> {
        // reqwest is built without a TLS provider of its own (Cargo.toml says why):
        // ring is made the process's provider, unless something already made one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = ClientOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT);
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: FIRST_BACKOFF,
                max_backoff: LONGEST_BACKOFF,
                base: 2.0,
            },
            max_retries: RETRIES,
            retry_timeout: RETRY_TIMEOUT,
        };
        // The client's options first: `with_client_options` replaces them whole,
        // and `AWS_ALLOW_HTTP` is one of them.
        let mut builder = AmazonS3Builder::new()
            .with_client_options(client)
            .with_retry(retry);
        for (key, value) in settings.keys() {
            // Variables object_store does not know (AWS_PROFILE, say) are not its.
            if let Ok(key) = key.parse::<AmazonS3ConfigKey>() {
                if key != AmazonS3ConfigKey::Bucket {
                    builder = builder.with_config(key, value);
                }
            }
        }
        let store =
            builder
                .with_bucket_name(bucket)
                .build()
                .map_err(|error| ObjectsError::Settings {
                    location: location.clone(),
                    message: settings.redact(&chain(&error)),
                })?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("stq-objects")
            .enable_all()
            .build()
            .map_err(|error| ObjectsError::Runtime {
                location: location.clone(),
                message: format!("cannot start the runtime for S3's requests: {error}"),
            })?;
        Ok(Bucket {
            store,
            location,
            prefix: prefix.to_owned(),
            settings: settings.clone(),
            driver: Driver {
                runtime: Some(runtime),
            },
        })
    }

    /// The key of `name` (checked by [`crate::names`], as the prefix was): under
    /// the prefix, as it is, never percent-encoded.
    fn key(&self, name: &str) -> StorePath {
        let key = match (self.prefix.as_str(), name) {
            (prefix, "") | ("", prefix) => StorePath::parse(prefix),
            (prefix, name) => StorePath::parse(format!("{prefix}/{name}")),
        };
        key.expect("names and prefixes are checked as object_store checks keys")
    }

    /// Runs `call` to its end on the runtime.
    fn block_on<T>(
        &self,
        name: &str,
        operation: &'static str,
        call: impl Future<Output = object_store::Result<T>>,
    ) -> Result<T, ObjectsError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(ObjectsError::Runtime {
                location: self.location.clone(),
                message: format!(
                    "cannot {operation} {name} from a thread that runs an async runtime: its \
                     calls block"
                ),
            });
        }
        let runtime = self
            .driver
            .runtime
            .as_ref()
            .expect("shut down only when dropped");
        runtime.block_on(call).map_err(|error| match error {
            object_store::Error::NotFound { .. } => ObjectsError::NotFound {
                location: self.location.clone(),
                name: name.to_owned(),
            },
            error => ObjectsError::S3 {
                location: self.location.clone(),
                operation,
                name: name.to_owned(),
                message: self.settings.redact(&chain(&error)),
            },
        })
    }

    pub(crate) fn put(&self, name: &str, bytes: Vec<u8>) -> Result<(), ObjectsError> {
        let key = self.key(name);
        self.block_on(name, "put", self.store.put(&key, PutPayload::from(bytes)))?;
        Ok(())
    }

    pub(crate) fn get(&self, name: &str) -> Result<Vec<u8>, ObjectsError> {
        let key = self.key(name);
        let bytes = self.block_on(name, "get", async {
            self.store.get(&key).await?.bytes().await
        })?;
        Ok(bytes.into())
    }

    pub(crate) fn get_each(
        &self,
        name: &str,
        sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<u64, ObjectsError> {
        let key = self.key(name);
        // What the sink refused, kept apart from the bucket's own errors.
        let mut refused = None;
        let size = self.block_on(name, "get", async {
            let mut stream = self.store.get(&key).await?.into_stream();
            let mut size = 0;
            while let Some(chunk) = stream.try_next().await? {
                size += chunk.len() as u64;
                if let Err(error) = sink(&chunk) {
                    refused = Some(error);
                    break;
                }
            }
            Ok(size)
        })?;
        match refused {
            Some(error) => Err(ObjectsError::Sink(error)),
            None => Ok(size),
        }
    }

    pub(crate) fn get_range(&self, name: &str, range: Range<u64>) -> Result<Vec<u8>, ObjectsError> {
        let key = self.key(name);
        let (start, end) = (range.start, range.end);
        let (bytes, size) = self.block_on(name, "read", async {
            if start >= end {
                return Ok((None, self.store.head(&key).await?.size));
            }
            // One request, not a HEAD for the size and then the GET: a replica
            // reads its blocks from the bucket so until its copy has them.
            let options = GetOptions {
                range: Some(range.into()),
                ..GetOptions::default()
            };
            let result = self.store.get_opts(&key, options).await?;
            let size = result.meta.size;
            // A range that ends past the object's end comes back shorter.
            if end > size {
                return Ok((None, size));
            }
            Ok((Some(result.bytes().await?), size))
        })?;
        match bytes {
            Some(bytes) => Ok(bytes.into()),
            None => Err(ObjectsError::Range {
                location: self.location.clone(),
                name: name.to_owned(),
                start,
                end,
                size,
            }),
        }
    }

    pub(crate) fn list(&self, prefix: &str) -> Result<Vec<Listed>, ObjectsError> {
        let root = self.key(prefix);
        let under = match (self.prefix.as_str(), prefix) {
            ("", "") => None,
            _ => Some(&root),
        };
        let metas: Vec<_> = self.block_on(prefix, "list", self.store.list(under).try_collect())?;
        let strip = match self.prefix.as_str() {
            "" => String::new(),
            prefix => format!("{prefix}/"),
        };
        let mut listed: Vec<Listed> = (metas.into_iter())
            .filter_map(|meta| {
                let name = meta
                    .location
                    .as_ref()
                    .strip_prefix(strip.as_str())?
                    .to_owned();
                Some(Listed {
                    name,
                    size: meta.size,
                    modified: meta.last_modified.into(),
                })
            })
            .collect();
        listed.sort_unstable_by(|one, other| one.name.cmp(&other.name));
        Ok(listed)
    }

    pub(crate) fn delete(&self, name: &str) -> Result<(), ObjectsError> {
        let key = self.key(name);
        match self.block_on(name, "delete", self.store.delete(&key)) {
            Err(error) if error.is_not_found() => Ok(()),
            other => other,
        }
    }
}

/// Keeps the bucket's client (and its credentials) out of every `Debug`.
impl std::fmt::Debug for Bucket {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Bucket")
            .field("location", &self.location)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}
