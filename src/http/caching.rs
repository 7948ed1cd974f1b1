//! HTTP caching for pollers (docs/api.md section 8): weak ETags from what the answer
//! depends on, and `If-None-Match`.

use std::hash::{Hash as _, Hasher as _};

use actix_web::http::header::{self, HeaderMap};
use actix_web::HttpResponse;

use crate::engine::{Plan, Request};

/// A weak ETag that changes exactly when the response's `data` or `next_cursor`
/// could: it hashes the generation, the endpoint, the normalized query with its
/// window resolved, the page's start and size, and the token's station scope (not
/// the token: two tokens that see the same stations share cached answers).
pub(super) fn entity_tag(boot: u64, request: &Request, plan: &Plan) -> String {
    let params = &request.params;
    let mut hasher = std::hash::DefaultHasher::new();
    (
        boot,
        plan.generation(),
        request.kind,
        plan.window(),
        plan.after(),
        params.limit,
        &params.station_ids,
        &params.unit_types,
        &params.unit_serial,
        params.directions,
        &params.names,
        &request.principal.scope,
    )
        .hash(&mut hasher);
    format!("W/\"{:016x}\"", hasher.finish())
}

/// A request's `If-None-Match`: the tags it names (compared weakly), or `*`.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum IfNoneMatch {
    Absent,
    Tags(Vec<String>),
    Any,
}

impl IfNoneMatch {
    pub(super) fn of(headers: &HeaderMap) -> IfNoneMatch {
        let mut tags = Vec::new();
        for value in headers.get_all(header::IF_NONE_MATCH) {
            for tag in value.to_str().unwrap_or_default().split(',') {
                match tag.trim() {
                    "*" => return IfNoneMatch::Any,
                    "" => {}
                    tag => tags.push(opaque_tag(tag).to_owned()),
                }
            }
        }
        if tags.is_empty() {
            IfNoneMatch::Absent
        } else {
            IfNoneMatch::Tags(tags)
        }
    }

    pub(super) fn names(&self, etag: &str) -> bool {
        matches!(self, IfNoneMatch::Tags(tags) if tags.iter().any(|tag| tag == opaque_tag(etag)))
    }
}

/// A tag without its weakness mark: weak comparison ignores it.
fn opaque_tag(tag: &str) -> &str {
    tag.strip_prefix("W/").unwrap_or(tag)
}

pub(super) fn not_modified(etag: String) -> HttpResponse {
    HttpResponse::NotModified()
        .insert_header((header::ETAG, etag))
        .finish()
}
