//! A request to any endpoint turned into a query in the index's terms (docs/api.md
//! sections 3 to 6 and 10): which stations (by rank) the token may and does ask
//! for, and the question: for records, the window and where a cursor resumes it,
//! filters as symbols, and the cap; for a summary, the window, filters and
//! grouping. (The router cuts a record query's page once the shards have
//! answered.)

use std::sync::Arc;

use serde::Serialize;
use stq_core::data::catalog::Catalog;
use stq_core::data::cursor::{Cursor, CursorError, CursorKey};
use stq_core::data::key::Position;
use stq_core::data::scan::{Matcher, RecordFilter};
use stq_core::data::summary::{self, Grouping, MetricQuestion, UnitQuestion};
use stq_core::domain::auth::{Principal, Scope};
use stq_core::domain::query::{Endpoint, Limits, QueryParams};
use stq_core::domain::record::{Directions, Kind};
use stq_core::domain::time::{Timestamp, Window};

use super::{EngineError, EngineRefusal};

/// What a client asked: the endpoint, its validated parameters, who asked, and
/// when the request arrived (the default window ends then).
#[derive(Debug)]
pub struct Request {
    pub endpoint: Endpoint,
    pub params: QueryParams,
    pub principal: Arc<Principal>,
    pub arrived: Timestamp,
}

/// A request planned against one generation's catalog: which stations, and what
/// each shard that holds some of them is asked.
#[derive(Clone, Debug)]
pub struct Plan {
    pub(crate) catalog: Arc<Catalog>,
    /// Station ranks, each at most once.
    pub(crate) stations: Vec<u32>,
    pub(crate) question: Question,
}

/// What a plan asks: records, or a summary of them.
#[derive(Clone, Debug)]
pub(crate) enum Question {
    /// `/units` and `/metrics`: the shards scan, the router merges and pages.
    Records(RecordQuestion),
    /// The summaries and `/stations`: the shards answer with partial summaries,
    /// the router merges and renders them.
    Summary(summary::Question),
}

/// A record query in the index's terms.
#[derive(Clone, Debug)]
pub(crate) struct RecordQuestion {
    pub(crate) kind: Kind,
    pub(crate) window: Window,
    pub(crate) after: Option<Position>,
    pub(crate) filter: RecordFilter,
    /// One more than a page or `max_records`, so that "more follow" is seen.
    pub(crate) cap: usize,
    /// What a paged query's cursors are sealed to; `None` without `limit`.
    pub(crate) scope: Option<Vec<u8>>,
}

/// Plans `request` on `catalog`, checking in the contract's order: the window or
/// the cursor (sections 5 and 6), then the stations the token may and does ask
/// for (section 3); filters become symbols.
pub(crate) fn plan(
    request: &Request,
    catalog: Arc<Catalog>,
    settings: &Settings,
) -> Result<Plan, EngineError> {
    let Request {
        endpoint,
        params,
        arrived,
        ..
    } = request;
    let limits = settings.limits;
    let grouping = || Grouping {
        fields: params.group_by.clone(),
        bucket: params.bucket,
        zone: params.zone,
    };
    let question = match endpoint {
        Endpoint::Units => Question::Records(records(Kind::Units, request, &catalog, settings)?),
        Endpoint::Metrics => {
            Question::Records(records(Kind::Metrics, request, &catalog, settings)?)
        }
        Endpoint::UnitsSummary => Question::Summary(summary::Question::Units(UnitQuestion {
            window: params.window(*arrived, limits.max_window)?,
            unit_types: matcher(&catalog, &params.unit_types),
            unit_serial: serial_matcher(&catalog, params),
            grouping: grouping(),
            pass_results: settings.pass_results.to_vec(),
        })),
        Endpoint::MetricsSummary => Question::Summary(summary::Question::Metrics(MetricQuestion {
            window: params.window(*arrived, limits.max_window)?,
            names: matcher(&catalog, &params.names),
            grouping: grouping(),
        })),
        Endpoint::Stations => Question::Summary(summary::Question::Stations),
    };
    let stations = stations(params, &request.principal, &catalog)?;
    Ok(Plan {
        catalog,
        stations,
        question,
    })
}

/// What a plan is made with besides its request and catalog: the engine's
/// settings.
pub(crate) struct Settings<'a> {
    pub(crate) limits: &'a Limits,
    pub(crate) cursor_key: &'a CursorKey,
    /// `--pass-results`.
    pub(crate) pass_results: &'a [String],
}

/// A record query's window, where its cursor resumes it, its filters and cap.
fn records(
    kind: Kind,
    request: &Request,
    catalog: &Catalog,
    settings: &Settings,
) -> Result<RecordQuestion, EngineError> {
    let Request {
        params,
        principal,
        arrived,
        ..
    } = request;
    let limits = settings.limits;
    // Only pages have cursors (a cursor without `limit` was refused already).
    let scope = params.limit.map(|_| cursor_scope(kind, params, principal));
    let (window, after) = match (&params.cursor, &scope) {
        (Some(text), Some(scope)) => {
            let cursor = Cursor::decode(text, settings.cursor_key, scope)?;
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
            unit_types: matcher(catalog, &params.unit_types),
            unit_serial: serial_matcher(catalog, params),
            results: results_matcher(catalog, &params.results),
            directions: params.directions,
        },
        Kind::Metrics => RecordFilter::Metrics {
            names: matcher(catalog, &params.names),
            unit_serial: serial_matcher(catalog, params),
        },
    };
    Ok(RecordQuestion {
        kind,
        window,
        after,
        filter,
        cap: params.limit.unwrap_or(limits.max_records) + 1,
        scope,
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
                return Err(EngineError::Refused(EngineRefusal::Forbidden {
                    stations: forbidden,
                }));
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

/// `result`'s values as symbols: every spelling of each, since they match ignoring
/// ASCII case (docs/api.md section 4); any value when none is given.
fn results_matcher(catalog: &Catalog, texts: &[String]) -> Matcher {
    if texts.is_empty() {
        return Matcher::Any;
    }
    let mut symbols: Vec<_> = (texts.iter())
        .flat_map(|text| catalog.symbols().lookup_ignoring_ascii_case(text))
        .collect();
    symbols.sort_unstable();
    Matcher::OneOf(symbols)
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
        // Left out when empty, so that cursors made before `result` existed
        // still fit the same query.
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        results: &'a [String],
    }
    // Every field by name, none elided with `..`: a parameter added to the query
    // does not compile here until it is put into the scope or out of it, with its
    // reason below (issue 33). A filter left out would let a cursor resume another
    // query's pages.
    let QueryParams {
        station_ids,
        unit_types,
        unit_serial,
        results,
        directions,
        names,
        // The window: the cursor's payload pins it.
        from: _,
        to: _,
        // Paging itself.
        limit: _,
        cursor: _,
        // Summaries only, which take no cursor.
        group_by: _,
        bucket: _,
        zone: _,
        // Presentation, not selection (docs/api.md section 7).
        format: _,
    } = params;
    serde_json::to_vec(&ScopeOf {
        endpoint: kind.path(),
        token: principal.digest,
        station_ids,
        unit_types,
        unit_serial,
        directions: if kind == Kind::Units {
            *directions
        } else {
            Directions::NONE
        },
        names,
        results,
    })
    .expect("serializing plain data cannot fail")
}
