//! A request to any endpoint answered from a generation, in the pure steps the
//! engine's actors run: planned ([`Plan::new`]), asked of each shard that holds
//! its stations ([`Plan::shard_questions`], [`ShardQuestion::answer`]), and its
//! shards' answers merged into an [`Answer`], a page of records or a summary's
//! rows ([`Plan::merge`]). The engine decides where each step runs and when; what each
//! step computes is here, so that the engine names a handful of types.
//!
//! Planning checks in the contract's order (docs/api.md sections 3 to 6 and 10):
//! the window or the cursor, then the stations the token may and does ask for;
//! filters become symbols. A record query's plan also holds what its cursors are
//! sealed to (`scope`): every filter of the query, so that a new filter cannot be
//! left out of it.
//!
//! - this module: the [`Request`], the [`Plan`] and the planning, the errors,
//!   and the [`Settings`] with the [`CursorKey`] pages are sealed with;
//! - [`shard`]: what one shard is asked and answers;
//! - [`page`]: the merge of the shards' answers, the page and its cursor, and the
//!   reading of a page's records that every answer format goes through;
//! - [`answer`]: the [`Answer`] written as the envelope's `data` or as CSV
//!   ([`csv`]), so that the HTTP layer names no page, row or record part;
//! - [`stream`]: a [`Stream`], which plans its own events and keeps its position.

use std::path::Path;
use std::sync::Arc;

use crate::data::catalog::Catalog;
use crate::data::cursor::{Cursor, CursorError};
use crate::data::fault::StorageFault;
use crate::data::key::Position;
use crate::data::load::{Additions, Touch};
use crate::data::scan::{Matcher, Pick, RecordFilter};
use crate::data::summary::{self, ControlQuestion, Grouping, MetricQuestion, Rows, UnitQuestion};
use crate::domain::auth::{Principal, Scope};
use crate::domain::query::{Endpoint, Limits, QueryError, QueryParams};
use crate::domain::record::Kind;
use crate::domain::time::{Timestamp, Window};

mod answer;
mod csv;
mod page;
mod scope;
mod shard;
mod stream;

pub use stream::Stream;

#[cfg(test)]
mod tests;

/// What a client asked: the endpoint, its validated parameters, who asked, and
/// when the request arrived (the default window ends then).
#[derive(Debug)]
pub struct Request {
    /// The endpoint asked.
    pub endpoint: Endpoint,
    /// Its parameters, parsed and checked.
    pub params: QueryParams,
    /// The token's holder.
    pub principal: Arc<Principal>,
    /// When the request arrived.
    pub arrived: Timestamp,
}

/// What plans are made and merged with besides their request and catalog: the
/// service's settings.
pub struct Settings {
    /// `--max-records` and the other limits of a query.
    pub limits: Limits,
    /// What cursors are sealed with.
    pub(crate) cursor_key: CursorKey,
    /// `--pass-results`: the `result` values that count as a pass in summaries.
    pub pass_results: Vec<String>,
}

impl Settings {
    /// The settings of `limits`, with `pass` the only result that passes, and
    /// cursors sealed with the key the file `cursor_key_file` holds
    /// (`--cursor-key-file`), or without one a key drawn for this process; else
    /// why the file holds no key, naming it.
    pub fn new(limits: Limits, cursor_key_file: Option<&Path>) -> Result<Settings, String> {
        Ok(Settings {
            limits,
            cursor_key: CursorKey::new(cursor_key_file)?,
            pass_results: vec!["pass".to_owned()],
        })
    }
}

/// The key that makes cursors unforgeable: drawn per process, or read from
/// `--cursor-key-file` so that replicas sharing the file accept each other's.
/// Held by the [`Settings`], with which it is declared; the cursors
/// (`crate::data::cursor`) take its secret.
#[derive(Clone)]
pub(crate) struct CursorKey(Box<[u8]>);

/// The shortest secret a cursor key file may hold.
const MINIMUM_KEY_BYTES: usize = 32;

/// Why a secret cannot be a cursor key.
#[derive(Debug, thiserror::Error)]
#[error("a cursor key needs at least {MINIMUM_KEY_BYTES} bytes; this one has {length}")]
struct ShortKey {
    length: usize,
}

impl CursorKey {
    /// The key the file `file` holds (`--cursor-key-file`): its whole content, at
    /// least [`MINIMUM_KEY_BYTES`] long; else why not, naming the file. Without a
    /// file, a key drawn from the thread's random generator, for a process whose
    /// cursors need not survive it.
    pub(crate) fn new(file: Option<&Path>) -> Result<CursorKey, String> {
        let Some(path) = file else {
            return Ok(CursorKey(Box::new(rand::random::<[u8; 32]>())));
        };
        let secret = std::fs::read(path).map_err(|error| {
            format!(
                "cannot read the cursor key file {}: {error}",
                path.display()
            )
        })?;
        CursorKey::from_secret(secret)
            .map_err(|short| format!("the cursor key file {}: {short}", path.display()))
    }

    /// A key whose whole content is `secret`, at least [`MINIMUM_KEY_BYTES`] long.
    fn from_secret(secret: Vec<u8>) -> Result<CursorKey, ShortKey> {
        if secret.len() < MINIMUM_KEY_BYTES {
            return Err(ShortKey {
                length: secret.len(),
            });
        }
        Ok(CursorKey(secret.into_boxed_slice()))
    }

    #[cfg(test)]
    pub(crate) fn fixed(byte: u8) -> CursorKey {
        CursorKey(Box::new([byte; 32]))
    }
}

/// A request planned against one generation's catalog: which stations, and what
/// each shard that holds some of them is asked.
#[derive(Debug)]
pub struct Plan {
    catalog: Arc<Catalog>,
    /// Station ranks, each at most once.
    stations: Vec<u32>,
    question: Question,
}

/// What a plan asks: records, or a summary of them.
#[derive(Debug)]
enum Question {
    /// `/units` and `/metrics`: the shards scan, the merge pages.
    Records(RecordQuestion),
    /// The summaries and `/stations`: the shards answer with partial summaries,
    /// the merge renders them.
    Summary(summary::Question),
}

/// A record query in the index's terms.
#[derive(Debug)]
struct RecordQuestion {
    kind: Kind,
    window: Window,
    after: Option<Position>,
    filter: RecordFilter,
    /// One more than a page or `max_records`, so that "more follow" is seen.
    cap: usize,
    /// `limit`: the page's length, if the query pages.
    limit: Option<usize>,
    /// What a paged query's cursors are sealed to; `None` without `limit`.
    scope: Option<Vec<u8>>,
    /// Which records by position: a stream's step reads one generation's
    /// additions, or an older generation's records.
    pick: Pick,
}

/// What one shard is asked, about its own stations, in the generation the plan
/// was made on.
#[derive(Debug)]
pub struct ShardQuestion {
    /// The catalog the query was planned on: its generation, and its symbols,
    /// which name the results a summary counts as passes.
    catalog: Arc<Catalog>,
    asked: shard::Asked,
}

/// A shard's answer to its [`ShardQuestion`]: one variant per question, so that
/// the merge takes only partials of one kind.
#[derive(Debug)]
pub struct ShardAnswer(shard::Answered);

/// What a query is answered with: the elements of the envelope's `data`, which
/// it writes as JSON or as CSV (`answer`), so that what it holds stays here.
#[derive(Debug)]
pub struct Answer(Elements);

/// An answer's elements, by the kind of its question.
#[derive(Debug)]
enum Elements {
    /// `/units` and `/metrics`.
    Page(Page),
    /// The summaries and `/stations`: rows rendered as JSON.
    Rows(Rows),
}

/// One page of records in order, pointing into the shard data they came from,
/// and the cursor of the next page.
#[derive(Debug)]
pub(crate) struct Page {
    parts: Vec<page::Part>,
    hits: Vec<page::PartHit>,
    /// Whether the query asked for pages (`limit`).
    paged: bool,
    next_cursor: Option<String>,
    /// Its last record's position, for a stream's (whose identity only a stream
    /// asks for: naming its station and file costs two strings, which a
    /// dashboard's query would pay for nothing).
    last: Option<Position>,
    /// The generation it was read from.
    generation: u64,
}

/// Why a request has no answer from the data.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The request's window cannot be resolved (docs/api.md section 5).
    #[error(transparent)]
    Query(#[from] QueryError),

    /// The query is one that is not answered as asked; the client can change it.
    #[error(transparent)]
    Refused(#[from] Refusal),

    /// A shard answered another kind of question than it was asked: a bug,
    /// reported as the query's failure rather than a panic.
    #[error("a shard answered another kind of question than it was asked")]
    OtherAnswer,

    /// A store file failed a read of the merge's: a summary's rows show fields of
    /// sealed records, read from their blocks.
    #[error(transparent)]
    Storage(#[from] StorageFault),
}

/// A query refused as asked, which the client can change: the HTTP layer gives
/// each its code. Kept apart from failures so that that mapping is total.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The cursor does not continue this query: malformed, sealed to something
    /// else, or made for another window.
    #[error("invalid cursor: {reason}")]
    Cursor {
        /// What is wrong with it, as the error message says.
        reason: &'static str,
    },

    /// The token may not see some of the stations asked for.
    #[error("the token may not access some of the requested stations")]
    Forbidden {
        /// Sorted in byte order, without repeats.
        stations: Vec<String>,
    },

    /// An unpaged query matches more records than `--max-records`.
    #[error(
        "more than {max_records} records match; narrow the window or the filters, or page with `limit`"
    )]
    ResultTooLarge {
        /// `--max-records`.
        max_records: usize,
    },

    /// A summary's rows, like records, are at most `--max-records`.
    #[error(
        "more than {max_records} summary rows; narrow the window or the stations, or use longer buckets or fewer group fields"
    )]
    TooManyRows {
        /// `--max-records`.
        max_records: usize,
    },
}

impl From<CursorError> for PlanError {
    fn from(CursorError { reason }: CursorError) -> PlanError {
        PlanError::Refused(Refusal::Cursor { reason })
    }
}

impl Plan {
    /// Plans `request` on `catalog`, checking in the contract's order: the window
    /// or the cursor (sections 5 and 6), then the stations the token may and does
    /// ask for (section 3); filters become symbols.
    pub fn new(
        request: &Request,
        catalog: Arc<Catalog>,
        settings: &Settings,
    ) -> Result<Plan, PlanError> {
        let Request {
            endpoint,
            params,
            arrived,
            ..
        } = request;
        let limits = &settings.limits;
        let grouping = || Grouping {
            fields: params.group_by.clone(),
            bucket: params.bucket,
            zone: params.zone,
        };
        let question = match endpoint {
            Endpoint::Units => {
                Question::Records(records(Kind::Units, request, &catalog, settings)?)
            }
            Endpoint::Metrics => {
                Question::Records(records(Kind::Metrics, request, &catalog, settings)?)
            }
            Endpoint::UnitsSummary => Question::Summary(summary::Question::Units(UnitQuestion {
                window: params.window(*arrived, limits.max_window)?,
                unit_types: catalog.matcher(&params.unit_types)?,
                unit_serial: serial_matcher(&catalog, params)?,
                grouping: grouping(),
                pass_results: settings.pass_results.clone(),
            })),
            Endpoint::MetricsSummary => {
                Question::Summary(summary::Question::Metrics(MetricQuestion {
                    window: params.window(*arrived, limits.max_window)?,
                    names: catalog.matcher(&params.names)?,
                    grouping: grouping(),
                }))
            }
            Endpoint::Stations => Question::Summary(summary::Question::Stations),
            Endpoint::MetricsControl => {
                Question::Summary(summary::Question::Control(ControlQuestion {
                    window: params.window(*arrived, limits.max_window)?,
                    baseline: params.baseline(limits.max_window)?,
                    names: catalog.matcher(&params.names)?,
                    grouping: grouping(),
                    rules: params.rules(),
                }))
            }
        };
        let stations = stations(params, &request.principal, &catalog)?;
        Ok(Plan {
            catalog,
            stations,
            question,
        })
    }
}

impl Plan {
    /// The generation it was planned on.
    pub fn generation(&self) -> u64 {
        self.catalog.generation()
    }
}

impl Request {
    /// The same request by `principal` (the same token, as a reload read it
    /// again), arriving at `arrived`.
    pub fn again(&self, principal: Arc<Principal>, arrived: Timestamp) -> Request {
        Request {
            endpoint: self.endpoint,
            params: self.params.clone(),
            principal,
            arrived,
        }
    }

    /// What requests that ask the same thing of the same token share, whatever
    /// their spelling and their `wait`: one evaluation serves them all.
    pub fn sharing_key(&self) -> String {
        let mut params = self.params.clone();
        params.wait = None;
        format!(
            "{:?} {} {params:?}",
            self.endpoint,
            hex_of(&self.principal.digest)
        )
    }

    /// What a reload's `additions` did to the stations its answer reads: the
    /// most they did to any of them.
    pub fn touched_by(&self, additions: &Additions) -> Touch {
        additions.touch_of(|station| self.reads(station))
    }

    /// Whether its answer reads `station`, in this generation or a later one: the
    /// token may see it, and the request names it or names none. A change to
    /// another station cannot change its answer.
    pub(crate) fn reads(&self, station: &str) -> bool {
        self.principal.scope.allows(station)
            && (self.params.station_ids.as_ref()).is_none_or(|named| {
                named
                    .binary_search_by(|id| id.as_str().cmp(station))
                    .is_ok()
            })
    }
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A record query's window, where its cursor resumes it, its filters and cap.
fn records(
    kind: Kind,
    request: &Request,
    catalog: &Catalog,
    settings: &Settings,
) -> Result<RecordQuestion, PlanError> {
    let Request {
        params,
        principal,
        arrived,
        ..
    } = request;
    let limits = &settings.limits;
    // Only pages have cursors (a cursor without `limit` was refused already).
    let scope = params
        .limit
        .map(|_| scope::cursor_scope(kind, params, principal));
    let (window, after) = match (&params.cursor, &scope) {
        (Some(text), Some(scope)) => {
            let cursor = Cursor::decode(text, &settings.cursor_key.0, scope)?;
            if cursor.kind != kind {
                return Err(CursorError {
                    reason: "it belongs to another endpoint",
                }
                .into());
            }
            let window = if params.has_window() {
                let window = params.window(*arrived, limits.max_window)?;
                if window != cursor.window {
                    return Err(CursorError {
                        reason: "the window differs from the one the cursor was made for",
                    }
                    .into());
                }
                window
            } else {
                cursor.window
            };
            // The record the cursor names, placed in the data served now.
            (window, Some(catalog.position_after(&cursor.after)))
        }
        _ => (params.window(*arrived, limits.max_window)?, None),
    };
    let filter = match kind {
        Kind::Units => RecordFilter::Units {
            unit_types: catalog.matcher(&params.unit_types)?,
            unit_serial: serial_matcher(catalog, params)?,
            results: results_matcher(catalog, &params.results)?,
            directions: params.directions,
        },
        Kind::Metrics => RecordFilter::Metrics {
            names: catalog.matcher(&params.names)?,
            unit_serial: serial_matcher(catalog, params)?,
        },
    };
    Ok(RecordQuestion {
        kind,
        window,
        after,
        filter,
        cap: params.limit.unwrap_or(limits.max_records) + 1,
        limit: params.limit,
        scope,
        pick: Pick::All,
    })
}

/// The ranks of the stations a query reads: those it names, or every one the token
/// may see; 403 if it names one the token may not see.
fn stations(
    params: &QueryParams,
    principal: &Principal,
    catalog: &Catalog,
) -> Result<Vec<u32>, Refusal> {
    let stations = match &params.station_ids {
        Some(requested) => {
            let forbidden: Vec<String> = requested
                .iter()
                .filter(|station| !principal.scope.allows(station))
                .cloned()
                .collect();
            if !forbidden.is_empty() {
                return Err(Refusal::Forbidden {
                    stations: forbidden,
                });
            }
            requested
                .iter()
                .filter_map(|station| catalog.rank(station))
                .collect()
        }
        None => match &principal.scope {
            Scope::All => (0..catalog.stations().len() as u32).collect(),
            Scope::Stations(allowed) => allowed
                .iter()
                .filter_map(|station| catalog.rank(station))
                .collect(),
        },
    };
    Ok(stations)
}

fn serial_matcher(catalog: &Catalog, params: &QueryParams) -> Result<Matcher, StorageFault> {
    params
        .unit_serial
        .as_ref()
        .map_or(Ok(Matcher::Any), |serial| {
            catalog.matcher(std::slice::from_ref(serial))
        })
}

/// `result`'s values as symbols: every spelling of each, since they match ignoring
/// ASCII case (docs/api.md section 4); any value when none is given.
fn results_matcher(catalog: &Catalog, texts: &[String]) -> Result<Matcher, StorageFault> {
    if texts.is_empty() {
        return Ok(Matcher::Any);
    }
    let mut symbols = Vec::new();
    for text in texts {
        symbols.extend(catalog.symbols().lookup_ignoring_ascii_case(text)?);
    }
    symbols.sort_unstable();
    Ok(Matcher::OneOf(symbols))
}
