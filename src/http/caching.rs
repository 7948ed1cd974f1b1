//! HTTP caching for pollers (docs/api.md section 8): weak ETags from the answer's
//! content, and `If-None-Match`.
//!
//! The tag hashes what the answer says, not how the question was spelled or which
//! process, replica or generation answered it: so a dashboard that re-sends "the
//! last hour" gets 304 for as long as no record entered or left its window, and any
//! replica gives the same tag for the same answer. The hash is XXH3-128 of the
//! `data` array as sent (of a CSV answer, its whole body), seeded with the
//! endpoint, the format and whether more follows: the same in every process. It reads the array where the envelope was just written
//! (in cache, one pass), not the records scattered over the stations' arenas.

use actix_web::http::header::{self, HeaderMap};
use actix_web::HttpResponse;
use stq_core::domain::{Endpoint, Format};
use xxhash_rust::xxh3::xxh3_128_with_seed;

/// A weak ETag of an answer: its endpoint, its `data` as sent in `format` (the
/// records in order: a JSON array, or CSV rows under their header), and whether a
/// next page follows (the records say where it starts).
pub(super) fn entity_tag(endpoint: Endpoint, format: Format, data: &[u8], more: bool) -> String {
    let mut seed = (endpoint.spec().etag_seed << 1) | u64::from(more);
    if format == Format::Csv {
        // A JSON answer's tags are as they were before CSV existed.
        seed |= 1 << 63;
    }
    let hash = xxh3_128_with_seed(data, seed).to_be_bytes();
    let mut tag = *b"W/\"00000000000000000000000000000000\"";
    hex::encode_to_slice(hash, &mut tag[3..35]).expect("32 hex digits fit 32 bytes");
    String::from_utf8(tag.to_vec()).expect("hex digits are ASCII")
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
        let tag = entity_tag(Endpoint::Units, Format::Json, b"[{\"a\":1},{}]", false);
        assert_eq!(
            tag,
            entity_tag(Endpoint::Units, Format::Json, b"[{\"a\":1},{}]", false)
        );
        assert!(tag.starts_with("W/\"") && tag.len() == 2 + 2 + 32);
        for other in [
            entity_tag(Endpoint::Metrics, Format::Json, b"[{\"a\":1},{}]", false),
            entity_tag(Endpoint::Units, Format::Json, b"[{\"a\":2},{}]", false),
            entity_tag(Endpoint::Units, Format::Json, b"[{\"a\":1},{}]", true),
            entity_tag(Endpoint::Units, Format::Json, b"[{},{\"a\":1}]", false),
            entity_tag(
                Endpoint::UnitsSummary,
                Format::Json,
                b"[{\"a\":1},{}]",
                false,
            ),
            entity_tag(Endpoint::Stations, Format::Json, b"[{\"a\":1},{}]", false),
            entity_tag(Endpoint::Units, Format::Csv, b"[{\"a\":1},{}]", false),
        ] {
            assert_ne!(tag, other);
        }
    }

    /// Tags outlive versions (pollers and replicas compare them), so their text is
    /// pinned: how it is written may change, not what it says.
    #[test]
    fn issue_10_tags_are_the_hash_in_32_lowercase_hex_digits() {
        let data = b"[{\"a\":1},{}]";
        let hash = xxh3_128_with_seed(data, 1);
        assert_eq!(
            entity_tag(Endpoint::Units, Format::Json, data, true),
            format!("W/\"{hash:032x}\"")
        );
        assert_eq!(
            entity_tag(Endpoint::Stations, Format::Json, b"[]", false),
            format!("W/\"{:032x}\"", xxh3_128_with_seed(b"[]", 8))
        );
    }
}
