//! Time zones of summary buckets (docs/api.md section 10): `tz` names a zone of the
//! IANA database that chrono-tz compiles in (`chrono_tz::IANA_TZDB_VERSION`), and
//! buckets are then cut at that zone's wall-clock times.
//!
//! A bucket boundary is an instant whose wall-clock time is `1970-01-01T00:00:00`
//! plus a whole number of buckets; a wall-clock time the zone skips (a gap, when
//! clocks go forward) stands for the first instant after the gap, and one it
//! repeats (when clocks go back) for its earlier occurrence. So boundaries never go
//! backwards in time, a `1d` bucket lasts from local midnight to local midnight (23
//! or 25 hours across a change), and a bucket whose start and end fall on the same
//! instant holds nothing. An instant belongs to the bucket of the latest boundary at
//! or before it. The zone's rules are chrono-tz's tables (through 2099 for zones
//! with daylight saving time; later years keep the last offset), not ours.

use std::ops::Range;
use std::str::FromStr as _;

use chrono::{
    DateTime, Datelike as _, LocalResult, NaiveDateTime, Offset as _, TimeZone as _, Timelike as _,
};
use chrono_tz::{GapInfo, Tz};

use crate::domain::time::Timestamp;

/// A summary's time zone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Zone {
    /// `UTC`, the default: buckets are the epoch's grid, and `bucket_start` ends in
    /// `Z`.
    #[default]
    Utc,
    /// Any other IANA zone (`Etc/UTC` too): `bucket_start` carries its offset.
    Named(Tz),
}

impl Zone {
    /// The zone an IANA name names, exactly as the database spells it.
    pub fn parse(name: &str) -> Option<Zone> {
        match name {
            "UTC" => Some(Zone::Utc),
            name => Tz::from_str(name).ok().map(Zone::Named),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Zone::Utc => "UTC",
            Zone::Named(tz) => tz.name(),
        }
    }

    /// The bucket `length` seconds long (whole minutes, a `bucket`'s) that `instant`
    /// falls in: from its first instant to the next bucket's, in whole seconds since
    /// the epoch.
    pub fn bucket_span(self, length: i64, instant: Timestamp) -> Range<i64> {
        let tz = match self {
            Zone::Utc => {
                let start = instant.seconds.div_euclid(length) * length;
                return start..start.saturating_add(length);
            }
            Zone::Named(tz) => tz,
        };
        // Boundaries are whole seconds, so an instant's own second places it.
        let at = instant.seconds;
        let boundary = |index: i64| instant_of_wall(tz, index.saturating_mul(length));
        // The bucket its wall-clock time names; off only where the wall clock went
        // back (the later pass of a repeated hour), or in a zone stranger than any.
        let mut index = wall_seconds(tz, at).div_euclid(length);
        while boundary(index) > at && index > i64::MIN / length {
            index -= 1;
        }
        // The latest boundary at or before `at`: gallop forward, then halve.
        let (mut low, mut step) = (index, 1_i64);
        while boundary(low.saturating_add(step)) <= at && step < i64::MAX / 4 {
            low += step;
            step *= 2;
        }
        let mut high = low.saturating_add(step);
        while high - low > 1 {
            let middle = low + (high - low) / 2;
            match boundary(middle) <= at {
                true => low = middle,
                false => high = middle,
            }
        }
        boundary(low)..boundary(high)
    }

    /// A bucket's `bucket_start`: `YYYY-MM-DDTHH:MM:SSZ` in UTC, else the zone's
    /// wall-clock time at `start` with its offset, `YYYY-MM-DDTHH:MM:SS+HH:MM` (an
    /// offset with seconds, as local mean time before about 1900 has, is written
    /// without them).
    pub fn bucket_start_text(self, start: i64) -> String {
        let instant = Timestamp {
            seconds: start,
            nanos: 0,
        };
        let tz = match self {
            Zone::Utc => return instant.to_rfc3339_seconds(),
            Zone::Named(tz) => tz,
        };
        let Some(utc) = DateTime::from_timestamp(start, 0) else {
            return instant.to_rfc3339_seconds();
        };
        let offset = tz.offset_from_utc_datetime(&utc.naive_utc()).fix();
        let local = utc.naive_utc() + offset;
        // Written by hand: a summary writes one per row, and chrono's `format`
        // parses its pattern each time (a tenth of a bucketed summary's time).
        let (date, time) = (local.date(), local.time());
        if !(0..=9999).contains(&date.year()) {
            return instant.to_rfc3339_seconds();
        }
        let offset = offset.local_minus_utc();
        let magnitude = offset.unsigned_abs();
        let sign = if offset < 0 { '-' } else { '+' };
        // Each number, its width in digits, and the character after it.
        let parts = [
            (date.year() as u32, 4, Some('-')),
            (date.month(), 2, Some('-')),
            (date.day(), 2, Some('T')),
            (time.hour(), 2, Some(':')),
            (time.minute(), 2, Some(':')),
            (time.second(), 2, Some(sign)),
            (magnitude / 3600, 2, Some(':')),
            (magnitude % 3600 / 60, 2, None),
        ];
        let mut text = String::with_capacity(25);
        for (value, width, after) in parts {
            for place in (0..width).rev() {
                text.push(char::from(b'0' + (value / 10_u32.pow(place) % 10) as u8));
            }
            text.extend(after);
        }
        text
    }
}

/// The wall-clock time in `tz` at `seconds` since the epoch, as seconds since the
/// wall clock's own 1970-01-01T00:00:00.
fn wall_seconds(tz: Tz, seconds: i64) -> i64 {
    match DateTime::from_timestamp(seconds, 0) {
        Some(utc) => {
            let offset = tz.offset_from_utc_datetime(&utc.naive_utc()).fix();
            seconds + i64::from(offset.local_minus_utc())
        }
        None => seconds,
    }
}

/// The instant of wall-clock time `wall` (seconds since the wall clock's
/// 1970-01-01T00:00:00) in `tz`: the earlier of two, the first after a gap.
fn instant_of_wall(tz: Tz, wall: i64) -> i64 {
    let Some(local) = DateTime::from_timestamp(wall, 0).map(|time| time.naive_utc()) else {
        return wall;
    };
    match tz.from_local_datetime(&local) {
        LocalResult::Single(time) => time.timestamp(),
        LocalResult::Ambiguous(one, other) => one.timestamp().min(other.timestamp()),
        LocalResult::None => first_after_gap(tz, &local).unwrap_or(wall),
    }
}

fn first_after_gap(tz: Tz, local: &NaiveDateTime) -> Option<i64> {
    let gap = GapInfo::new(local, &tz)?;
    gap.end.map(|end| end.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::query::Bucket;
    use crate::domain::time::{parse_rfc3339, DAY_SECONDS};

    fn zone(name: &str) -> Zone {
        Zone::parse(name).unwrap()
    }

    fn at(text: &str) -> Timestamp {
        parse_rfc3339(text).unwrap()
    }

    /// The bucket of `instant`, as its start and end written in the zone.
    fn span(zone: Zone, bucket: &str, instant: &str) -> (String, String) {
        let span = zone.bucket_span(Bucket::parse(bucket).unwrap().seconds(), at(instant));
        (
            zone.bucket_start_text(span.start),
            zone.bucket_start_text(span.end),
        )
    }

    fn pair(start: &str, end: &str) -> (String, String) {
        (start.to_owned(), end.to_owned())
    }

    /// The text is written by hand for speed; chrono's own formatting is the
    /// reference, in every zone, from local mean time to the far future.
    #[test]
    fn bucket_starts_are_written_as_chrono_writes_them() {
        for tz in chrono_tz::TZ_VARIANTS {
            let mut seconds = -5_000_000_000_i64;
            while seconds < 7_000_000_000 {
                let utc = DateTime::from_timestamp(seconds, 0).unwrap();
                let local = utc.with_timezone(&tz);
                let offset = local.offset().fix().local_minus_utc();
                let magnitude = offset.unsigned_abs();
                let expected = format!(
                    "{}{}{:02}:{:02}",
                    local.format("%Y-%m-%dT%H:%M:%S"),
                    if offset < 0 { '-' } else { '+' },
                    magnitude / 3600,
                    magnitude % 3600 / 60
                );
                assert_eq!(Zone::Named(tz).bucket_start_text(seconds), expected, "{tz}");
                seconds += 86_413_337;
            }
        }
    }

    #[test]
    fn names_are_the_databases_exactly_and_utc_is_its_own() {
        assert_eq!(Zone::parse("UTC"), Some(Zone::Utc));
        assert_eq!(zone("Europe/Berlin").name(), "Europe/Berlin");
        assert!(matches!(zone("Etc/UTC"), Zone::Named(_)));
        for unknown in [
            "",
            "utc",
            "europe/berlin",
            "Europe/Nowhere",
            "+01:00",
            "CEST ",
        ] {
            assert_eq!(Zone::parse(unknown), None, "{unknown:?}");
        }
    }

    #[test]
    fn utc_keeps_the_epoch_grid_and_the_z_form() {
        assert_eq!(
            span(Zone::Utc, "1h", "2024-05-01T10:59:59.999Z"),
            pair("2024-05-01T10:00:00Z", "2024-05-01T11:00:00Z")
        );
        // Etc/UTC is another zone by name: the same grid, written with its offset.
        assert_eq!(
            span(zone("Etc/UTC"), "1d", "2024-05-01T10:00:00Z"),
            pair("2024-05-01T00:00:00+00:00", "2024-05-02T00:00:00+00:00")
        );
    }

    #[test]
    fn issue_23_a_berlin_day_starts_at_local_midnight_and_lasts_23_or_25_hours() {
        let berlin = zone("Europe/Berlin");
        // Spring forward on 2026-03-29 at 02:00 CET: 23 hours.
        let spring = berlin.bucket_span(DAY_SECONDS, at("2026-03-29T12:00:00Z"));
        assert_eq!(spring.end - spring.start, 23 * 3600);
        assert_eq!(
            span(berlin, "1d", "2026-03-29T12:00:00Z"),
            pair("2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00")
        );
        // Fall back on 2026-10-25 at 03:00 CEST: 25 hours.
        let fall = berlin.bucket_span(DAY_SECONDS, at("2026-10-25T12:00:00Z"));
        assert_eq!(fall.end - fall.start, 25 * 3600);
        assert_eq!(
            span(berlin, "1d", "2026-10-24T22:30:00Z"),
            pair("2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00")
        );
    }

    #[test]
    fn issue_23_a_skipped_hour_starts_at_the_first_instant_after_the_gap() {
        let berlin = zone("Europe/Berlin");
        // 01:59:59 CET is the last second before the gap; 03:00 CEST the first after.
        assert_eq!(
            span(berlin, "1h", "2026-03-29T00:59:59Z"),
            pair("2026-03-29T01:00:00+01:00", "2026-03-29T03:00:00+02:00")
        );
        assert_eq!(
            span(berlin, "1h", "2026-03-29T01:00:00Z"),
            pair("2026-03-29T03:00:00+02:00", "2026-03-29T04:00:00+02:00")
        );
        // 30-minute buckets at 02:00 and 02:30 are empty: both start where 03:00 does.
        assert_eq!(
            span(berlin, "30m", "2026-03-29T01:00:00Z"),
            pair("2026-03-29T03:00:00+02:00", "2026-03-29T03:30:00+02:00")
        );
        // 2h buckets: the 02:00 boundary is the gap's end, so 00:00 lasts one hour.
        assert_eq!(
            span(berlin, "2h", "2026-03-29T00:30:00Z"),
            pair("2026-03-29T00:00:00+01:00", "2026-03-29T03:00:00+02:00")
        );
    }

    #[test]
    fn issue_23_a_repeated_hour_belongs_to_its_earlier_occurrence() {
        let berlin = zone("Europe/Berlin");
        // 02:00-03:00 happens twice on 2026-10-25: at 00:00Z (CEST) and 01:00Z (CET).
        // The 02:00 bucket starts at the first and lasts two hours.
        for instant in [
            "2026-10-25T00:00:00Z",
            "2026-10-25T00:59:59Z",
            "2026-10-25T01:30:00Z",
        ] {
            assert_eq!(
                span(berlin, "1h", instant),
                pair("2026-10-25T02:00:00+02:00", "2026-10-25T03:00:00+01:00"),
                "{instant}"
            );
        }
        // With 1-minute buckets the later pass belongs to the last bucket that
        // starts in the earlier one, 02:59, which lasts 61 minutes.
        assert_eq!(
            span(berlin, "1m", "2026-10-25T01:10:00Z"),
            pair("2026-10-25T02:59:00+02:00", "2026-10-25T03:00:00+01:00")
        );
        assert_eq!(
            span(berlin, "1m", "2026-10-25T00:10:30Z"),
            pair("2026-10-25T02:10:00+02:00", "2026-10-25T02:11:00+02:00")
        );
    }

    #[test]
    fn issue_23_half_hour_offsets_and_zones_west_of_utc() {
        let kolkata = zone("Asia/Kolkata");
        assert_eq!(
            span(kolkata, "1d", "2026-11-18T20:00:00Z"),
            pair("2026-11-19T00:00:00+05:30", "2026-11-20T00:00:00+05:30")
        );
        assert_eq!(
            span(kolkata, "1h", "2026-11-18T20:00:00Z"),
            pair("2026-11-19T01:00:00+05:30", "2026-11-19T02:00:00+05:30")
        );
        // 7-day buckets start on Thursdays, 1970-01-01's weekday, at local midnight.
        assert_eq!(
            span(zone("America/New_York"), "7d", "2026-11-18T03:00:00Z"),
            pair("2026-11-12T00:00:00-05:00", "2026-11-19T00:00:00-05:00")
        );
    }

    #[test]
    fn the_ends_of_the_time_line_have_buckets_too() {
        // Local mean time (+00:53:28) before 1893, written without its seconds; the
        // last offset of the tables after 2099.
        let berlin = zone("Europe/Berlin");
        assert_eq!(
            span(berlin, "1d", "0001-01-01T12:00:00Z"),
            pair("0001-01-01T00:00:00+00:53", "0001-01-02T00:00:00+00:53")
        );
        assert_eq!(
            span(berlin, "31d", "9999-12-31T23:59:59.999999999Z").0,
            "9999-12-14T00:00:00+01:00"
        );
    }

    #[test]
    fn every_instant_is_in_its_span_and_spans_tile_the_line() {
        // Around both of Berlin's changes in 2026 and Lord Howe's half-hour one, in
        // steps shorter than a minute that divide no bucket.
        for (name, from) in [
            ("Europe/Berlin", "2026-03-28T20:00:00Z"),
            ("Europe/Berlin", "2026-10-24T20:00:00Z"),
            ("Australia/Lord_Howe", "2026-04-04T10:00:00Z"),
            ("Asia/Kolkata", "2026-04-04T10:00:00Z"),
        ] {
            let zone = zone(name);
            for bucket in ["1m", "7m", "30m", "1h", "90m", "1d"] {
                let bucket = Bucket::parse(bucket).unwrap().seconds();
                let mut instant = at(from);
                let mut previous: Option<Range<i64>> = None;
                for _ in 0..1000 {
                    let span = zone.bucket_span(bucket, instant);
                    assert!(
                        span.contains(&{ instant.seconds }),
                        "{name} {bucket:?} {instant:?}"
                    );
                    if let Some(previous) = previous.filter(|previous| *previous != span) {
                        assert_eq!(previous.end, span.start, "{name} {bucket} {instant:?}");
                    }
                    previous = Some(span);
                    instant = instant.add_seconds(37);
                }
            }
        }
    }
}
