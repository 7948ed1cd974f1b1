//! The seam between an answer and the format it is written in (docs/api.md
//! section 7): which format a request asks for (`format`, else `Accept`), and the
//! answer written in it, the JSON envelope (`envelope`) or CSV (which the
//! answer writes itself: `stq_core::data::plan`), with what the format says in
//! headers rather than in its body.
//!
//! Everything else about an answer (the checks, the plan, the engine, the
//! query slot, the ETag and `If-None-Match`) is the same for every format and
//! lives in `answer`.

use std::ops::Range;

use actix_web::http::header::{self, Header as _, HeaderName, HeaderValue};
use actix_web::HttpRequest;

use stq_core::data::Answer;
use stq_core::domain::{Endpoint, Format, QueryParams};

use super::envelope::{envelope, Meta};
use super::error::JSON;

/// The media type of a CSV answer.
const CSV: &str = "text/csv; charset=utf-8; header=present";

/// `X-Query-Duration-Ms`: `meta.query_duration_ms` of a CSV answer.
const X_QUERY_DURATION_MS: HeaderName = HeaderName::from_static("x-query-duration-ms");

/// How a request's answer is to be written, and what writing it needs to know
/// that the answer does not say.
#[derive(Clone)]
pub(super) enum Presentation {
    Json,
    /// CSV, with the header row's names.
    Csv {
        columns: Vec<&'static str>,
    },
}

impl Presentation {
    /// The format `format` names, or without it the one `Accept` prefers: CSV
    /// when `text/csv` is listed with a higher preference than both
    /// `application/json` and `*/*`, JSON otherwise.
    pub(super) fn of(request: &HttpRequest, endpoint: Endpoint, params: &QueryParams) -> Self {
        let format = params.format.unwrap_or_else(|| accepted_format(request));
        match format {
            Format::Json => Presentation::Json,
            Format::Csv => Presentation::Csv {
                columns: Answer::csv_columns(endpoint, params),
            },
        }
    }

    pub(super) fn format(&self) -> Format {
        match self {
            Presentation::Json => Format::Json,
            Presentation::Csv { .. } => Format::Csv,
        }
    }
}

/// The format `Accept` prefers. Each type's preference is the quality of the
/// most specific range that names it (RFC 9110 section 12.5.1); a type no range
/// names has none. A header that cannot be read asks for nothing.
fn accepted_format(request: &HttpRequest) -> Format {
    let Ok(header::Accept(ranges)) = header::Accept::parse(request) else {
        return Format::Json;
    };
    // Media types' names compare ignoring case.
    let quality = |kind: &str, subtype: &str| {
        ranges
            .iter()
            .filter(|range| range.item.type_() == kind && range.item.subtype() == subtype)
            .map(|range| range.quality)
            .max()
    };
    let Some(csv) = quality("text", "csv") else {
        return Format::Json;
    };
    let any = quality("*", "*");
    let json = quality("application", "json")
        .or_else(|| quality("application", "*"))
        .or(any);
    let preferred = |other: Option<header::Quality>| csv > other.unwrap_or(header::Quality::ZERO);
    if preferred(json) && preferred(any) {
        Format::Csv
    } else {
        Format::Json
    }
}

/// An answer written: its body, the part of it its ETag hashes, its media type
/// and the headers its format adds.
pub(super) struct Written {
    pub(super) body: Vec<u8>,
    pub(super) hashed: Range<usize>,
    pub(super) content_type: &'static str,
    pub(super) headers: Vec<(HeaderName, HeaderValue)>,
}

/// Writes `answer` to `request` as `presentation` says.
pub(super) fn write(
    presentation: &Presentation,
    endpoint: Endpoint,
    request: &HttpRequest,
    answer: &Answer,
    meta: &Meta,
) -> Written {
    match presentation {
        Presentation::Json => {
            let (body, hashed) = envelope(endpoint, answer, meta);
            Written {
                body,
                hashed,
                content_type: JSON,
                headers: Vec::new(),
            }
        }
        Presentation::Csv { columns } => {
            let body = answer.csv(columns);
            let mut headers = vec![(
                X_QUERY_DURATION_MS,
                HeaderValue::from(meta.query_duration_ms),
            )];
            if let Some(Some(cursor)) = meta.next_cursor {
                headers.push((header::LINK, next_link(request, cursor)));
            }
            Written {
                hashed: 0..body.len(),
                body,
                content_type: CSV,
                headers,
            }
        }
    }
}

/// `Link: <PATH?QUERY>; rel="next"`: the request's own query with `cursor` set to
/// the next page's.
fn next_link(request: &HttpRequest, cursor: &str) -> HeaderValue {
    let mut link = format!("<{}?", request.path());
    for pair in request.query_string().split('&') {
        let name = pair.split_once('=').map_or(pair, |(name, _)| name);
        let decoded = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
        if pair.is_empty() || decoded == "cursor" {
            continue;
        }
        link.push_str(pair);
        link.push('&');
    }
    // A cursor is base64url: nothing in it needs encoding.
    link.push_str("cursor=");
    link.push_str(cursor);
    link.push_str(">; rel=\"next\"");
    // The query string came in the request line, whose bytes a header may hold.
    HeaderValue::from_bytes(link.as_bytes()).expect("a request line's bytes fit a header")
}
