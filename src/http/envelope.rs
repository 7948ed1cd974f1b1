//! The success envelope (docs/api.md section 7), assembled around records rendered at
//! load time: a record's stored parts, or a summary's rendered rows, are copied
//! into a body sized once.

use std::ops::Range;

use chrono::{DateTime, Utc};

use stq_core::data::stored::RecordJson;
use stq_core::data::summary::Rows;
use stq_core::domain::query::Endpoint;
use stq_core::domain::record::Kind;
use stq_core::domain::time::write_timestamp_millis_utc;

use crate::engine::QueryResult;

/// The envelope's `meta` (docs/api.md section 7).
pub struct Meta<'a> {
    pub timestamp: DateTime<Utc>,
    pub request_id: &'a str,
    pub query_duration_ms: u64,
    /// Absent without `limit`; with it, the next page's cursor, or `null` on the
    /// last page (Grafana's Infinity data source stops on `null` and fails on a
    /// missing cursor).
    pub next_cursor: Option<Option<&'a str>>,
}

/// Assembles the success body from the records' pre-rendered JSON; also returns
/// where in it the `data` array lies, which the `ETag` hashes.
pub fn envelope(kind: Kind, result: &QueryResult, meta: &Meta) -> (Vec<u8>, Range<usize>) {
    assemble_with_data(record_noun(kind), result.len(), result.records(), meta)
}

/// The success body of a summary (docs/api.md section 10) around its rendered
/// rows, and where in it the `data` array lies.
pub(super) fn summary_envelope(
    endpoint: Endpoint,
    rows: &Rows,
    meta: &Meta,
) -> (Vec<u8>, Range<usize>) {
    let noun = match endpoint {
        Endpoint::Stations => "station",
        _ => "summary row",
    };
    assemble_with_data(noun, rows.len(), rows.rows(), meta)
}

fn record_noun(kind: Kind) -> &'static str {
    match kind {
        Kind::Units => "unit record",
        Kind::Metrics => "metric record",
    }
}

/// One element of the `data` array: a record's parts, or a rendered row.
pub trait Element {
    /// Its length in bytes, known before it is written.
    fn length(&self) -> usize;
    fn write_to(&self, body: &mut Vec<u8>);

    /// Readies an element that is written a few elements later; see
    /// [`assemble_with_data`].
    fn prefetch(&self, _stage: Prefetch) {}
}

/// How far ahead an element to be written is readied.
#[derive(Clone, Copy)]
pub enum Prefetch {
    /// Far ahead: fetch what locates its bytes.
    Locate,
    /// Nearer: fetch its bytes.
    Bytes,
}

/// How many elements ahead each stage of [`Prefetch`] works.
const PREFETCH_LOCATE_AHEAD: usize = 8;
const PREFETCH_BYTES_AHEAD: usize = 4;

impl Element for &[u8] {
    fn length(&self) -> usize {
        self.len()
    }

    fn write_to(&self, body: &mut Vec<u8>) {
        body.extend_from_slice(self);
    }
}

impl Element for RecordJson<'_> {
    fn length(&self) -> usize {
        self.len()
    }

    fn write_to(&self, body: &mut Vec<u8>) {
        RecordJson::write_to(self, body);
    }

    fn prefetch(&self, stage: Prefetch) {
        match stage {
            Prefetch::Locate => self.prefetch_stored(),
            Prefetch::Bytes => self.prefetch_pieces(),
        }
    }
}

/// `1 unit record`, `3 summary rows`: a message needs no escaping.
fn write_counted(body: &mut Vec<u8>, count: usize, noun: &str) {
    body.extend_from_slice(itoa::Buffer::new().format(count).as_bytes());
    body.push(b' ');
    body.extend_from_slice(noun.as_bytes());
    if count != 1 {
        body.push(b's');
    }
}

/// `meta`'s object, written field by field: serde's derive would format the
/// timestamp into a `String` of its own first.
fn write_meta(body: &mut Vec<u8>, meta: &Meta) {
    body.extend_from_slice(b"{\"timestamp\":\"");
    write_timestamp_millis_utc(body, meta.timestamp);
    body.extend_from_slice(b"\",\"request_id\":");
    serde_json::to_writer(&mut *body, meta.request_id).expect("writing to a Vec cannot fail");
    body.extend_from_slice(b",\"query_duration_ms\":");
    body.extend_from_slice(
        itoa::Buffer::new()
            .format(meta.query_duration_ms)
            .as_bytes(),
    );
    match meta.next_cursor {
        None => {}
        Some(None) => body.extend_from_slice(b",\"next_cursor\":null"),
        Some(Some(cursor)) => {
            body.extend_from_slice(b",\"next_cursor\":");
            serde_json::to_writer(&mut *body, cursor).expect("writing to a Vec cannot fail");
        }
    }
    body.push(b'}');
}

/// `{"data":[...],"message":"...","meta":{...}}` around records rendered at load.
pub fn assemble(
    kind: Kind,
    count: usize,
    records: impl Iterator<Item = impl Element> + Clone,
    meta: &Meta,
) -> Vec<u8> {
    assemble_with_data(record_noun(kind), count, records, meta).0
}

/// [`assemble`], and the range of the body that is the `data` array.
fn assemble_with_data(
    noun: &str,
    count: usize,
    records: impl Iterator<Item = impl Element> + Clone,
    meta: &Meta,
) -> (Vec<u8>, Range<usize>) {
    let records_bytes: usize = records.clone().map(|record| record.length()).sum();
    let mut body = Vec::with_capacity(records_bytes + count + 256);
    body.extend_from_slice(b"{\"data\":");
    let data_start = body.len();
    body.push(b'[');
    // A record's bytes lie in two or three places (its stored form, then its
    // pieces), each a cache miss that waits on the one before: asking for them a
    // few records ahead lets the misses of several records overlap.
    let mut locate = records.clone().skip(PREFETCH_LOCATE_AHEAD);
    let mut fetch = records.clone().skip(PREFETCH_BYTES_AHEAD);
    for (index, record) in records.enumerate() {
        if let Some(ahead) = locate.next() {
            ahead.prefetch(Prefetch::Locate);
        }
        if let Some(ahead) = fetch.next() {
            ahead.prefetch(Prefetch::Bytes);
        }
        if index > 0 {
            body.push(b',');
        }
        record.write_to(&mut body);
    }
    body.push(b']');
    let data = data_start..body.len();
    body.extend_from_slice(b",\"message\":\"");
    write_counted(&mut body, count, noun);
    body.extend_from_slice(b"\",\"meta\":");
    write_meta(&mut body, meta);
    body.push(b'}');
    (body, data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn the_envelope_wraps_records_as_they_were_rendered() {
        let records = [&br#"{"a":1}"#[..], &br#"{"b":"2"}"#[..]];
        let meta = Meta {
            timestamp: DateTime::from_timestamp(1_704_067_200, 0).unwrap(),
            request_id: "id\"quoted",
            query_duration_ms: 3,
            next_cursor: Some(Some("abc")),
        };
        let body = assemble(Kind::Units, 2, records.iter().copied(), &meta);
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            value,
            json!({"data": [{"a": 1}, {"b": "2"}], "message": "2 unit records",
                   "meta": {"timestamp": "2024-01-01T00:00:00.000Z", "request_id": "id\"quoted",
                            "query_duration_ms": 3, "next_cursor": "abc"}})
        );
        let single = Meta {
            next_cursor: None,
            ..meta
        };
        let body = assemble(Kind::Metrics, 1, records[..1].iter().copied(), &single);
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["message"], "1 metric record");
        assert!(value["meta"].get("next_cursor").is_none());
        let last = Meta {
            timestamp: single.timestamp,
            next_cursor: Some(None),
            ..single
        };
        let body = assemble(Kind::Metrics, 1, records[..1].iter().copied(), &last);
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["meta"]["next_cursor"], Value::Null);
        assert!(value["meta"].get("next_cursor").is_some());
        let empty = assemble(Kind::Metrics, 0, std::iter::empty::<&[u8]>(), &single);
        assert!(empty.starts_with(br#"{"data":[],"message":"0 metric records""#));
    }
}
