//! Fuzz target for the query-string parser, `stq_core::domain::QueryParams::parse`
//! (docs/api.md sections 4, 5 and 9), for both endpoints. It must never panic, and a query it accepts
//! must respect every limit: length, distinct stations, `limit`, `cursor` only
//! with `limit`, normalized lists, and a window no longer than `--max-window`.
//! The invariants are stq-core's `Kind::check_query` (its `checks` feature), shared
//! with its proptest properties (`domain/parser_properties.rs`).
//!
//! Input: five header bytes choosing the limits and the request's arrival time,
//! then the raw query string (still percent-encoded, as actix hands it over).
//! Header byte `b` picks entry `(b - b'0') % len` of its table, so a seed starting
//! with `00000` runs under the contract's defaults, and digits pick by position.

#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use stq_core::domain::record::Kind;
use stq_core::domain::time::{Timestamp, Window};
use stq_core::domain::Limits;

const MAX_RECORDS: [usize; 5] = [100_000, 1, 2, 3, 10];
const MAX_STATIONS: [usize; 5] = [1000, 0, 1, 2, 3];
const MAX_QUERY_BYTES: [usize; 5] = [8192, 0, 16, 64, 256];
const MAX_WINDOW: [Option<Duration>; 6] = [
    None,
    Some(Duration::from_nanos(1)),
    Some(Duration::from_secs(1)),
    Some(Duration::from_secs(12 * 3600)),
    Some(Duration::from_secs(24 * 3600)),
    Some(Duration::from_secs(31 * 24 * 3600)),
];
/// 2024-01-02T00:00:00Z, the Unix epoch, 0000-01-01T00:00:00Z,
/// 9999-12-31T23:59:59.999999999Z, and the two ends of the time line.
const NOW: [Timestamp; 6] = [
    Timestamp {
        seconds: 1_704_153_600,
        nanos: 0,
    },
    Timestamp {
        seconds: 0,
        nanos: 0,
    },
    Timestamp {
        seconds: -62_167_219_200,
        nanos: 0,
    },
    Timestamp {
        seconds: 253_402_300_799,
        nanos: 999_999_999,
    },
    Window::ALL.from,
    Window::ALL.to,
];

fn pick<T: Copy>(table: &[T], byte: u8) -> T {
    table[usize::from(byte.wrapping_sub(b'0')) % table.len()]
}

fuzz_target!(|data: &[u8]| {
    let Some((header, query)) = data.split_first_chunk::<5>() else {
        return;
    };
    // The parser takes a `&str`: invalid UTF-8 cannot reach it.
    let Ok(query) = std::str::from_utf8(query) else {
        return;
    };
    let limits = Limits {
        max_records: pick(&MAX_RECORDS, header[0]),
        max_stations: pick(&MAX_STATIONS, header[1]),
        max_query_bytes: pick(&MAX_QUERY_BYTES, header[2]),
        max_window: pick(&MAX_WINDOW, header[3]),
        // `--max-wait` at the contract's default, which `wait` is checked against.
        ..Limits::default()
    };
    let now = pick(&NOW, header[4]);
    for kind in [Kind::Units, Kind::Metrics] {
        kind.check_query(query, limits, now);
    }
});
