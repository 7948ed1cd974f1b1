//! What a record query's cursors are sealed to besides their own payload: the
//! endpoint, the token and every normalized filter but the window (which the
//! payload pins). A cursor replayed with any of them changed fails its check
//! (`data::cursor`).

use serde::Serialize;

use crate::domain::auth::Principal;
use crate::domain::query::QueryParams;
use crate::domain::record::{Directions, Kind};

/// The scope of the cursors of a `kind` query with `params`, by `principal`.
pub(super) fn cursor_scope(kind: Kind, params: &QueryParams, principal: &Principal) -> Vec<u8> {
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
    // reason below. A filter left out would let a cursor resume another
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
        baseline_from: _,
        baseline_to: _,
        rules: _,
        // Presentation, not selection (docs/api.md section 7).
        format: _,
        // How long to wait for a change, and where a stream resumes: neither
        // selects records.
        wait: _,
        last_event_id: _,
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
