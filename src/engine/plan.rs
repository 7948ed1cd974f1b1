//! A request turned into a query in the index's terms (docs/api.md sections 3 to 6):
//! which stations (by rank) the token may and does ask for, the window and where a
//! cursor resumes it, filters as symbols, and the cap. And, once the shards have
//! answered, the page: the records it keeps and the cursor of the next one.

use std::sync::Arc;

use serde::Serialize;
use stq_core::data::catalog::Catalog;
use stq_core::data::cursor::{Cursor, CursorError, CursorKey};
use stq_core::data::key::Position;
use stq_core::data::scan::{Matcher, RecordFilter};
use stq_core::data::summary::{Grouping, Question};
use stq_core::domain::auth::{Principal, Scope};
use stq_core::domain::query::{Endpoint, Limits, QueryParams};
use stq_core::domain::record::{Directions, Kind};
use stq_core::domain::time::{Timestamp, Window};

use super::router::{Page, QueryResult};
use super::EngineError;

/// What a client asked: the endpoint, its validated parameters, who asked, and
/// when the request arrived (the default window ends then).
#[derive(Debug)]
pub struct Request {
    pub kind: Kind,
    pub params: QueryParams,
    pub principal: Arc<Principal>,
    pub arrived: Timestamp,
}

/// A request for a summary (docs/api.md section 10): `/units/summary`,
/// `/metrics/summary` or `/stations`.
#[derive(Debug)]
pub struct SummaryRequest {
    pub endpoint: Endpoint,
    pub params: QueryParams,
    pub principal: Arc<Principal>,
    pub arrived: Timestamp,
}

/// A summary planned against one generation's catalog: which stations, and what
/// each shard is asked.
#[derive(Clone, Debug)]
pub struct SummaryPlan {
    pub(crate) catalog: Arc<Catalog>,
    /// Station ranks, each at most once.
    pub(crate) stations: Vec<u32>,
    pub(crate) question: Question,
}

impl SummaryPlan {
    /// How rows are grouped; `None` for `/stations`.
    pub(crate) fn grouping(&self) -> Option<&Grouping> {
        match &self.question {
            Question::Units { grouping, .. } | Question::Metrics { grouping, .. } => Some(grouping),
            Question::Stations => None,
        }
    }
}

/// A request planned against one generation's catalog.
#[derive(Clone, Debug)]
pub struct Plan {
    pub(crate) catalog: Arc<Catalog>,
    /// Station ranks, each at most once.
    pub(crate) stations: Vec<u32>,
    pub(crate) window: Window,
    pub(crate) after: Option<Position>,
    pub(crate) filter: RecordFilter,
    /// One more than a page or `max_records`, so that "more follow" is seen.
    pub(crate) cap: usize,
    /// What a paged query's cursors are sealed to; `None` without `limit`.
    scope: Option<Vec<u8>>,
}

impl Plan {
    pub fn generation(&self) -> u64 {
        self.catalog.generation()
    }

    /// The window the query reads, resolved (or pinned by its cursor).
    pub fn window(&self) -> Window {
        self.window
    }

    /// Where the page starts: after the cursor's record.
    pub fn after(&self) -> Option<Position> {
        self.after
    }
}

pub(crate) fn plan(
    request: &Request,
    catalog: Arc<Catalog>,
    limits: &Limits,
    cursor_key: &CursorKey,
) -> Result<Plan, EngineError> {
    let Request {
        kind,
        params,
        principal,
        arrived,
    } = request;
    // Only pages have cursors (a cursor without `limit` was refused already).
    let scope = params.limit.map(|_| cursor_scope(*kind, params, principal));
    let (window, after) = match (&params.cursor, &scope) {
        (Some(text), Some(scope)) => {
            let cursor = Cursor::decode(text, cursor_key, scope)?;
            if cursor.kind != *kind {
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

    let stations = stations(params, principal, &catalog)?;

    let filter = match kind {
        Kind::Units => RecordFilter::Units {
            unit_types: matcher(&catalog, &params.unit_types),
            unit_serial: serial_matcher(&catalog, params),
            directions: params.directions,
        },
        Kind::Metrics => RecordFilter::Metrics {
            names: matcher(&catalog, &params.names),
        },
    };

    let cap = params.limit.unwrap_or(limits.max_records) + 1;
    Ok(Plan {
        catalog,
        stations,
        window,
        after,
        filter,
        cap,
        scope,
    })
}

/// Plans a summary on `catalog`: the window (section 5), the stations the token
/// may and does ask for (section 3), the filters as symbols.
pub(crate) fn plan_summary(
    request: &SummaryRequest,
    catalog: Arc<Catalog>,
    limits: &Limits,
    pass_results: &[String],
) -> Result<SummaryPlan, EngineError> {
    let SummaryRequest {
        endpoint,
        params,
        principal,
        arrived,
    } = request;
    let grouping = || Grouping {
        fields: params.group_by.clone(),
        bucket: params.bucket,
        zone: params.zone,
    };
    let question = match endpoint {
        Endpoint::UnitsSummary => Question::Units {
            window: params.window(*arrived, limits.max_window)?,
            unit_types: matcher(&catalog, &params.unit_types),
            unit_serial: serial_matcher(&catalog, params),
            grouping: grouping(),
            pass_results: pass_results.to_vec(),
        },
        Endpoint::MetricsSummary => Question::Metrics {
            window: params.window(*arrived, limits.max_window)?,
            names: matcher(&catalog, &params.names),
            grouping: grouping(),
        },
        Endpoint::Stations => Question::Stations,
        Endpoint::Units | Endpoint::Metrics => {
            unreachable!("records are planned by `plan`, not as a summary")
        }
    };
    let stations = stations(params, principal, &catalog)?;
    Ok(SummaryPlan {
        catalog,
        stations,
        question,
    })
}

/// The ranks of the stations a query reads: those it names, or every one the token
/// may see; 403 if it names one the token may not see.
fn stations(
    params: &QueryParams,
    principal: &Principal,
    catalog: &Catalog,
) -> Result<Vec<u32>, EngineError> {
    let stations = match &params.station_ids {
        Some(requested) => {
            let forbidden: Vec<String> = requested
                .iter()
                .filter(|station| !principal.scope.allows(station))
                .cloned()
                .collect();
            if !forbidden.is_empty() {
                return Err(EngineError::Forbidden {
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

/// A list filter's values as symbols: any value when none is given; a value the
/// data does not hold matches nothing.
fn matcher(catalog: &Catalog, texts: &[String]) -> Matcher {
    if texts.is_empty() {
        Matcher::Any
    } else {
        Matcher::OneOf(
            texts
                .iter()
                .filter_map(|text| catalog.symbols().lookup(text))
                .collect(),
        )
    }
}

fn serial_matcher(catalog: &Catalog, params: &QueryParams) -> Matcher {
    params.unit_serial.as_ref().map_or(Matcher::Any, |serial| {
        matcher(catalog, std::slice::from_ref(serial))
    })
}

/// The page a plan's merged records make: all of them, or `limit` of them and the
/// cursor of the rest; or `result_too_large` for an unpaged query over the limit.
pub(crate) fn paginate(
    request: &Request,
    plan: Plan,
    mut records: QueryResult,
    limits: &Limits,
    cursor_key: &CursorKey,
) -> Result<Page, EngineError> {
    let next_cursor = match request.params.limit {
        None if records.len() > limits.max_records => {
            return Err(EngineError::ResultTooLarge {
                max_records: limits.max_records,
            })
        }
        None => None,
        Some(limit) if records.len() > limit => {
            records.truncate(limit);
            let after = records
                .last_position()
                .expect("a full page has a last record");
            let cursor = Cursor {
                kind: request.kind,
                window: plan.window,
                after: plan.catalog.identity_of(after),
            };
            let scope = plan
                .scope
                .as_deref()
                .expect("paged queries have a cursor scope");
            Some(cursor.encode(cursor_key, scope))
        }
        Some(_) => None,
    };
    Ok(Page {
        records,
        next_cursor,
        plan,
    })
}

/// What a cursor is sealed to besides its own payload: the endpoint, the token and
/// every normalized filter but the window (which the payload pins).
fn cursor_scope(kind: Kind, params: &QueryParams, principal: &Principal) -> Vec<u8> {
    #[derive(Serialize)]
    struct ScopeOf<'a> {
        endpoint: &'static str,
        token: [u8; 32],
        station_ids: &'a Option<Vec<String>>,
        unit_types: &'a [String],
        unit_serial: &'a Option<String>,
        directions: Directions,
        names: &'a [String],
    }
    serde_json::to_vec(&ScopeOf {
        endpoint: kind.path(),
        token: principal.digest,
        station_ids: &params.station_ids,
        unit_types: &params.unit_types,
        unit_serial: &params.unit_serial,
        directions: if kind == Kind::Units {
            params.directions
        } else {
            Directions::NONE
        },
        names: &params.names,
    })
    .expect("serializing plain data cannot fail")
}
