//! Instants and the date-time grammar of docs/api.md section 4.
//!
//! The contract's grammar is stricter than RFC 3339 parsers in the wild (chrono
//! accepts a space for `T` and second 60), so the grammar is checked here by hand;
//! the calendar arithmetic is chrono's. Everything is compared at nanosecond
//! precision over the years 0000 to 9999, which does not fit `i64` nanoseconds,
//! hence the (seconds, nanoseconds) pair.

use chrono::{DateTime, Datelike, NaiveDate, SecondsFormat, Utc};

/// A point on the UTC time line, at nanosecond precision.
///
/// Field order makes the derived `Ord` chronological. Packed to four-byte
/// alignment, 12 bytes, so that the record keys that hold one pack too
/// (`crate::data::key`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(C, packed(4))]
pub struct Timestamp {
    /// Seconds since 1970-01-01T00:00:00Z (negative before it).
    pub seconds: i64,
    /// Nanoseconds into that second, `0..1_000_000_000`.
    pub nanos: u32,
}

/// A half-open window of time: `from <= t < to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Window {
    /// Its first instant.
    pub from: Timestamp,
    /// The first instant after it.
    pub to: Timestamp,
}

/// Seconds in the default window (docs/api.md section 5).
pub(crate) const DAY_SECONDS: i64 = 24 * 60 * 60;

impl Window {
    /// The whole time line: every instant a timestamp holds, from the earliest,
    /// but the latest, which is `to` (the first instant after a window).
    pub const ALL: Window = Window {
        from: Timestamp::MIN,
        to: Timestamp::MAX,
    };
}

impl Timestamp {
    /// The earliest instant a timestamp holds.
    pub(crate) const MIN: Timestamp = Timestamp {
        seconds: i64::MIN,
        nanos: 0,
    };
    /// The latest instant a timestamp holds.
    pub(crate) const MAX: Timestamp = Timestamp {
        seconds: i64::MAX,
        nanos: 999_999_999,
    };

    /// The instant `millis` milliseconds after the Unix epoch (before it if
    /// negative).
    pub(crate) fn from_unix_millis(millis: i64) -> Timestamp {
        Timestamp {
            seconds: millis.div_euclid(1000),
            nanos: (millis.rem_euclid(1000) as u32) * 1_000_000,
        }
    }

    /// This instant moved by whole seconds, saturating at the ends of the time line.
    pub(crate) fn add_seconds(self, seconds: i64) -> Timestamp {
        Timestamp {
            seconds: self.seconds.saturating_add(seconds),
            nanos: self.nanos,
        }
    }

    /// Nanoseconds from `earlier` to this instant (negative when `earlier` is later).
    /// `i128` holds any distance on the time line.
    pub(crate) fn nanos_since(self, earlier: Timestamp) -> i128 {
        (i128::from(self.seconds) - i128::from(earlier.seconds)) * 1_000_000_000
            + (i128::from(self.nanos) - i128::from(earlier.nanos))
    }

    /// `YYYY-MM-DDTHH:MM:SSZ`, the fraction dropped: a summary's `bucket_start`.
    pub(crate) fn to_rfc3339_seconds(self) -> String {
        match DateTime::<Utc>::from_timestamp(self.seconds, 0) {
            Some(time) => time.to_rfc3339_opts(SecondsFormat::Secs, true),
            None => format!("{}s since the Unix epoch", { self.seconds }),
        }
    }
}

/// The instant a UTC date-time names: `Timestamp::from(Utc::now())` is the system
/// clock's current instant.
impl From<DateTime<Utc>> for Timestamp {
    fn from(time: DateTime<Utc>) -> Timestamp {
        Timestamp {
            seconds: time.timestamp(),
            nanos: time.timestamp_subsec_nanos(),
        }
    }
}

/// RFC 3339 in UTC with as many fraction digits as needed, for messages.
impl std::fmt::Display for Timestamp {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match DateTime::<Utc>::from_timestamp(self.seconds, self.nanos) {
            Some(time) => formatter.write_str(&time.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
            None => write!(
                formatter,
                "{}s{}ns since the Unix epoch",
                { self.seconds },
                { self.nanos }
            ),
        }
    }
}

/// A duration as the flags write it, in the largest unit that holds it exactly:
/// `31d`, `36h`, `90m`, `10s`, `250ms`, `1500us`, `7ns`.
pub fn duration_text(duration: std::time::Duration) -> String {
    const UNITS: [(u128, &str); 6] = [
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
    ];
    let nanos = duration.as_nanos();
    for (size, name) in UNITS {
        if nanos >= size && nanos.is_multiple_of(size) {
            return format!("{}{name}", nanos / size);
        }
    }
    format!("{nanos}ns")
}

/// An RFC 3339 section 5.6 date-time as the contract restricts it (docs/api.md
/// section 4), read by [`parse_rfc3339`].
impl std::str::FromStr for Timestamp {
    type Err = String;

    fn from_str(text: &str) -> Result<Timestamp, String> {
        parse_rfc3339(text).ok_or_else(|| format!("not an RFC 3339 date-time: {text:?}"))
    }
}

/// Parses an RFC 3339 section 5.6 date-time as the contract restricts it.
/// Outside this crate, `str::parse` (its `FromStr`).
///
/// Returns `None` for anything outside the grammar or the calendar.
pub(crate) fn parse_rfc3339(text: &str) -> Option<Timestamp> {
    let bytes = text.as_bytes();
    // The shortest valid form is `YYYY-MM-DDTHH:MM:SSZ`.
    if bytes.len() < 20 {
        return None;
    }
    let year = digits(bytes, 0, 4)?;
    expect(bytes, 4, b'-')?;
    let month = digits(bytes, 5, 2)?;
    expect(bytes, 7, b'-')?;
    let day = digits(bytes, 8, 2)?;
    if !matches!(bytes[10], b'T' | b't') {
        return None;
    }
    let hour = digits(bytes, 11, 2)?;
    expect(bytes, 13, b':')?;
    let minute = digits(bytes, 14, 2)?;
    expect(bytes, 16, b':')?;
    let second = digits(bytes, 17, 2)?;
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }

    let mut position = 19;
    let mut nanos: u32 = 0;
    if bytes[position] == b'.' {
        position += 1;
        let start = position;
        while position < bytes.len() && bytes[position].is_ascii_digit() {
            position += 1;
        }
        let count = position - start;
        if count == 0 || count > 9 {
            return None;
        }
        let fraction = digits(bytes, start, count)?;
        nanos = fraction * 10u32.pow((9 - count) as u32);
    }

    let offset_seconds: i64 = match bytes.get(position)? {
        b'Z' | b'z' if position + 1 == bytes.len() => 0,
        sign @ (b'+' | b'-') if position + 6 == bytes.len() => {
            let offset_hours = digits(bytes, position + 1, 2)?;
            expect(bytes, position + 3, b':')?;
            let offset_minutes = digits(bytes, position + 4, 2)?;
            if offset_hours > 23 || offset_minutes > 59 {
                return None;
            }
            let magnitude = i64::from(offset_hours * 3600 + offset_minutes * 60);
            if *sign == b'-' {
                -magnitude
            } else {
                magnitude
            }
        }
        _ => return None,
    };

    let date = NaiveDate::from_ymd_opt(year as i32, month, day)?;
    let days = i64::from(date.num_days_from_ce()) - UNIX_EPOCH_DAYS_FROM_CE;
    let local_seconds = days * DAY_SECONDS + i64::from(hour * 3600 + minute * 60 + second);
    Some(Timestamp {
        seconds: local_seconds - offset_seconds,
        nanos,
    })
}

/// `from`/`to` also accept a bare integer of Unix epoch milliseconds (Grafana's
/// `${__from}`), an optional `-` then digits only.
pub(crate) fn parse_query_time(text: &str) -> Option<Timestamp> {
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    if !unsigned.is_empty() && unsigned.bytes().all(|byte| byte.is_ascii_digit()) {
        return text.parse::<i64>().ok().map(Timestamp::from_unix_millis);
    }
    parse_rfc3339(text)
}

/// `NaiveDate::num_days_from_ce` of 1970-01-01.
const UNIX_EPOCH_DAYS_FROM_CE: i64 = 719_163;

fn digits(bytes: &[u8], start: usize, count: usize) -> Option<u32> {
    let slice = bytes.get(start..start + count)?;
    slice.iter().try_fold(0u32, |value, byte| {
        byte.is_ascii_digit()
            .then(|| value * 10 + u32::from(byte - b'0'))
    })
}

fn expect(bytes: &[u8], position: usize, wanted: u8) -> Option<()> {
    (bytes.get(position) == Some(&wanted)).then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        parse_rfc3339(text).unwrap_or_else(|| panic!("{text} should parse"))
    }

    #[test]
    fn durations_are_written_in_their_largest_exact_unit() {
        use std::time::Duration;
        assert_eq!(duration_text(Duration::from_secs(31 * 86_400)), "31d");
        assert_eq!(duration_text(Duration::from_secs(36 * 3600)), "36h");
        assert_eq!(duration_text(Duration::from_secs(90 * 60)), "90m");
        assert_eq!(duration_text(Duration::from_secs(10)), "10s");
        assert_eq!(duration_text(Duration::from_millis(1500)), "1500ms");
        assert_eq!(duration_text(Duration::from_nanos(7)), "7ns");
        assert_eq!(duration_text(Duration::ZERO), "0ns");
    }

    #[test]
    fn distances_between_instants_span_the_whole_time_line() {
        let a = Timestamp {
            seconds: 10,
            nanos: 900_000_000,
        };
        let b = Timestamp {
            seconds: 12,
            nanos: 100_000_000,
        };
        assert_eq!(b.nanos_since(a), 1_200_000_000);
        assert_eq!(a.nanos_since(b), -1_200_000_000);
        assert!(Timestamp::MAX.nanos_since(Timestamp::MIN) > 0);
    }

    #[test]
    fn utc_and_offsets_name_the_same_instant() {
        let utc = at("2024-03-01T12:00:00Z");
        assert_eq!({ utc.seconds }, 1_709_294_400);
        assert_eq!(at("2024-03-01T14:30:00+02:30"), utc);
        assert_eq!(at("2024-03-01T07:00:00-05:00"), utc);
        assert_eq!(at("2024-03-01T12:00:00-00:00"), utc);
        assert_eq!(at("2024-03-01t12:00:00z"), utc);
    }

    #[test]
    fn fractions_keep_nanoseconds() {
        assert_eq!(at("2024-03-01T12:00:00.5Z").nanos, 500_000_000);
        assert_eq!(at("2024-03-01T12:00:00.123456789Z").nanos, 123_456_789);
        assert_eq!(at("2024-03-01T12:00:00.000000001+01:00").nanos, 1);
        assert!(at("2024-03-01T12:00:00.1Z") < at("2024-03-01T12:00:00.100000001Z"));
    }

    #[test]
    fn the_whole_four_digit_year_range_is_ordered() {
        assert!(at("0000-01-01T00:00:00Z") < at("1969-12-31T23:59:59.999999999Z"));
        assert!(at("1969-12-31T23:59:59.999999999Z") < at("1970-01-01T00:00:00Z"));
        assert!(at("1970-01-01T00:00:00Z") < at("9999-12-31T23:59:59.999999999Z"));
        assert_eq!(
            at("1970-01-01T00:00:00Z"),
            Timestamp {
                seconds: 0,
                nanos: 0
            }
        );
    }

    #[test]
    fn rejects_what_the_contract_rejects() {
        for text in [
            "2024-03-01 12:00:00Z",            // space for T
            "2024-03-01T12:00:00+0200",        // offset without colon
            "2024-03-01T12:00Z",               // missing seconds
            "2024-03-01T24:00:00Z",            // hour 24
            "2024-03-01T12:00:60Z",            // second 60
            "2024-03-01T12:00:00.1234567891Z", // ten fraction digits
            "2024-03-01T12:00:00.Z",           // empty fraction
            "2024-03-01T12:00:00",             // no offset
            "2024-02-30T12:00:00Z",            // not a date
            "2024-3-01T12:00:00Z",
            "+2024-03-01T12:00:00Z",
            "2024-03-01T12:00:00Z ",
            "2024-03-01T12:00:00+24:00",
            "2024-03-01T12:00:00+02:60",
            "2024-03-01T12:00:00+02:00x",
            "2024-03-01T12:00:00\u{ff11}Z",
            "",
        ] {
            assert_eq!(parse_rfc3339(text), None, "{text:?} should be rejected");
        }
    }

    #[test]
    fn leap_days_follow_the_calendar() {
        assert!(parse_rfc3339("2024-02-29T00:00:00Z").is_some());
        assert!(parse_rfc3339("2023-02-29T00:00:00Z").is_none());
        assert!(parse_rfc3339("2000-02-29T00:00:00Z").is_some());
        assert!(parse_rfc3339("1900-02-29T00:00:00Z").is_none());
    }

    #[test]
    fn query_times_accept_epoch_milliseconds() {
        assert_eq!(
            parse_query_time("1709294400000"),
            Some(at("2024-03-01T12:00:00Z"))
        );
        assert_eq!(
            parse_query_time("1709294400123"),
            Some(at("2024-03-01T12:00:00.123Z"))
        );
        assert_eq!(parse_query_time("-1"), Some(at("1969-12-31T23:59:59.999Z")));
        assert_eq!(
            parse_query_time("0001"),
            Some(Timestamp::from_unix_millis(1))
        );
        for text in ["", "-", "+5", "1e3", "12.5", "99999999999999999999999"] {
            assert_eq!(parse_query_time(text), None, "{text:?} should be rejected");
        }
    }
}
