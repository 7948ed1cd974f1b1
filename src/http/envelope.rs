//! The success envelope (docs/api.md section 7), assembled around records rendered at
//! load time: an answer writes its `data` (records' stored parts, or a summary's
//! rendered rows) into a body sized once; `message` and `meta` are written here.

use std::ops::Range;

use chrono::{DateTime, Datelike as _, SecondsFormat, Timelike as _, Utc};

use stq_core::data::Answer;
use stq_core::domain::Endpoint;

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

/// What a body holds before its `data` array.
const BEFORE_DATA: &[u8] = b"{\"data\":";

/// The bytes a body is sized for beyond its elements and their commas: what
/// surrounds them, `message` and `meta` among it. Bodies are sized once.
const AROUND_DATA: usize = 256;

/// Assembles the success body of `endpoint` around `answer`'s `data`, which the
/// answer writes into a body it sizes; also returns where in it the `data` array
/// lies, which the `ETag` hashes.
pub fn envelope(endpoint: Endpoint, answer: &Answer, meta: &Meta) -> (Vec<u8>, Range<usize>) {
    let (mut body, data) = answer.json(BEFORE_DATA, AROUND_DATA);
    write_after_data(&mut body, answer.count(), endpoint.spec().noun, meta);
    (body, data)
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

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, the format of `meta.timestamp`.
fn timestamp_millis_utc(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Appends `time` as [`timestamp_millis_utc`] writes it, without a `String`: every
/// response's envelope has one.
fn write_timestamp_millis_utc(out: &mut Vec<u8>, time: DateTime<Utc>) {
    let year = time.year();
    let nanos = time.timestamp_subsec_nanos();
    // Years chrono writes with a sign or more digits, and leap seconds, are chrono's.
    if !(0..=9999).contains(&year) || nanos >= 1_000_000_000 {
        out.extend_from_slice(timestamp_millis_utc(time).as_bytes());
        return;
    }
    let mut push = |value: u32, width: usize, after: u8| {
        let mut digits = [b'0'; 4];
        let mut rest = value;
        for digit in digits[..width].iter_mut().rev() {
            *digit = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        out.extend_from_slice(&digits[..width]);
        out.push(after);
    };
    push(year as u32, 4, b'-');
    push(time.month(), 2, b'-');
    push(time.day(), 2, b'T');
    push(time.hour(), 2, b':');
    push(time.minute(), 2, b':');
    push(time.second(), 2, b'.');
    push(nanos / 1_000_000, 3, b'Z');
}

/// What follows the `data` array of `count` elements, each a `noun`: the
/// `message` and `meta`, and the envelope's end.
fn write_after_data(body: &mut Vec<u8>, count: usize, noun: &str, meta: &Meta) {
    body.extend_from_slice(b",\"message\":\"");
    write_counted(body, count, noun);
    body.extend_from_slice(b"\",\"meta\":");
    write_meta(body, meta);
    body.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// The body `envelope` writes around `data` rendered already (as an
    /// answer writes it), of `count` elements of `endpoint`.
    fn assemble(endpoint: Endpoint, count: usize, data: &[u8], meta: &Meta) -> Vec<u8> {
        let mut body = BEFORE_DATA.to_vec();
        body.extend_from_slice(data);
        write_after_data(&mut body, count, endpoint.spec().noun, meta);
        body
    }

    #[test]
    fn the_envelope_wraps_records_as_they_were_rendered() {
        let records = &br#"[{"a":1},{"b":"2"}]"#[..];
        let meta = Meta {
            timestamp: DateTime::from_timestamp(1_704_067_200, 0).unwrap(),
            request_id: "id\"quoted",
            query_duration_ms: 3,
            next_cursor: Some(Some("abc")),
        };
        let body = assemble(Endpoint::Units, 2, records, &meta);
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
        let body = assemble(Endpoint::Metrics, 1, br#"[{"a":1}]"#, &single);
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["message"], "1 metric record");
        assert!(value["meta"].get("next_cursor").is_none());
        let last = Meta {
            timestamp: single.timestamp,
            next_cursor: Some(None),
            ..single
        };
        let body = assemble(Endpoint::Metrics, 1, br#"[{"a":1}]"#, &last);
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["meta"]["next_cursor"], Value::Null);
        assert!(value["meta"].get("next_cursor").is_some());
        let empty = assemble(Endpoint::Metrics, 0, b"[]", &single);
        assert!(empty.starts_with(br#"{"data":[],"message":"0 metric records""#));
    }

    #[test]
    fn meta_timestamps_have_milliseconds() {
        let time = DateTime::<Utc>::from_timestamp(1_709_294_400, 5_000_000).unwrap();
        assert_eq!(timestamp_millis_utc(time), "2024-03-01T12:00:00.005Z");
    }

    proptest::proptest! {
        /// Issue 10: the envelope's timestamp, written without chrono's formatter,
        /// is chrono's text for every instant, also outside years 0 to 9999.
        #[test]
        fn issue_10_written_timestamps_are_chronos(
            seconds in -70_000_000_000i64..300_000_000_000,
            nanos in 0u32..1_000_000_000,
        ) {
            let time = DateTime::<Utc>::from_timestamp(seconds, nanos).unwrap();
            let mut written = b"x".to_vec();
            write_timestamp_millis_utc(&mut written, time);
            proptest::prop_assert_eq!(
                String::from_utf8(written).unwrap(),
                format!("x{}", timestamp_millis_utc(time))
            );
        }
    }
}
