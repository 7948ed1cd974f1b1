//! HTTP caching for pollers (docs/api.md section 8): weak ETags from the answer's
//! content, and `If-None-Match`.
//!
//! The tag hashes what the answer says, not how the question was spelled or which
//! process, replica or generation answered it: so a dashboard that re-sends "the
//! last hour" gets 304 for as long as no record entered or left its window, and any
//! replica gives the same tag for the same answer. The hash is XXH3-128 with its
//! fixed default seed, the same in every process.

use actix_web::http::header::{self, HeaderMap};
use actix_web::HttpResponse;
use stq_core::domain::record::Kind;
use xxhash_rust::xxh3::Xxh3;

/// A weak ETag of an answer: its endpoint, the records of its `data` as sent (in
/// order), and whether a next page follows (the records say where it starts).
pub(super) fn entity_tag<'a>(
    kind: Kind,
    records: impl Iterator<Item = &'a [u8]>,
    more: bool,
) -> String {
    let mut hasher = Xxh3::new();
    hasher.update(&[kind as u8, u8::from(more)]);
    for record in records {
        // Each record's length first: no two lists of records hash alike by
        // shifting bytes from one record to the next.
        hasher.update(&(record.len() as u64).to_le_bytes());
        hasher.update(record);
    }
    format!("W/\"{:032x}\"", hasher.digest128())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_answers_get_equal_tags_and_any_difference_another() {
        let tag_of =
            |kind, records: &[&[u8]], more| entity_tag(kind, records.iter().copied(), more);
        let tag = tag_of(Kind::Units, &[b"{\"a\":1}", b"{}"], false);
        assert_eq!(tag, tag_of(Kind::Units, &[b"{\"a\":1}", b"{}"], false));
        assert!(tag.starts_with("W/\"") && tag.len() == 2 + 2 + 32);
        for other in [
            tag_of(Kind::Metrics, &[b"{\"a\":1}", b"{}"], false),
            tag_of(Kind::Units, &[b"{\"a\":2}", b"{}"], false),
            tag_of(Kind::Units, &[b"{\"a\":1}", b"{}"], true),
            tag_of(Kind::Units, &[b"{\"a\":1}{", b"}"], false),
            tag_of(Kind::Units, &[b"{}", b"{\"a\":1}"], false),
        ] {
            assert_ne!(tag, other);
        }
    }
}
