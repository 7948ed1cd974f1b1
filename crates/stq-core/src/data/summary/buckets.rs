//! Buckets (docs/api.md section 10): which bucket an instant is in, in UTC or a
//! zone, and how a bucket's start is written; all of a summary's bucket arithmetic.
//!
//! In UTC, buckets are the epoch's grid. In a zone (`domain::zone`), a bucket
//! boundary is an instant whose wall-clock time is `1970-01-01T00:00:00`
//! plus a whole number of buckets; a wall-clock time the zone skips (a gap, when
//! clocks go forward) stands for the first instant after the gap, and one it
//! repeats (when clocks go back) for its earlier occurrence. So boundaries never go
//! backwards in time, a `1d` bucket lasts from local midnight to local midnight (23
//! or 25 hours across a change), and a bucket whose start and end fall on the same
//! instant holds nothing. An instant belongs to the bucket of the latest boundary at
//! or before it. The zone's rules are chrono-tz's tables (through 2099 for zones
//! with daylight saving time; later years keep the last offset), not ours.

//!
//! Placing every record by a zone's rules would be slow, so [`Buckets`] keeps the
//! boundaries a summary has met, and [`BucketStarts`] the texts it has written.

use std::ops::Range;

use chrono::{
    DateTime, Datelike as _, LocalResult, NaiveDateTime, Offset as _, TimeZone as _, Timelike as _,
};
use chrono_tz::{GapInfo, Tz};
use foldhash::HashMap;

use super::Grouping;
use crate::domain::query::Bucket;
use crate::domain::time::Timestamp;
use crate::domain::zone::Zone;

/// The zone's bucket boundaries met so far, consecutive: records come a station
/// at a time in time order, each station over the same window, so after the first
/// station nearly every record falls between two known boundaries, and placing a
/// record by a zone's rules costs a few look-ups of them (a tenth of a summary's
/// time when done per bucket and station).
#[derive(Debug)]
pub(super) struct Buckets {
    /// The grouping's bucket length; `None`: one bucket.
    bucket: Option<Bucket>,
    zone: Zone,
    /// Ascending; an instant from the first to before the last is in the bucket of
    /// the latest one at or before it. Empty until a zone's bucket is asked for.
    boundaries: Vec<i64>,
}

/// How many buckets [`Buckets`] walks to join a new bucket to the known ones;
/// farther away, it starts over from the new one.
const BUCKETS_WALKED: usize = 64;

impl Buckets {
    /// The buckets of `grouping`, none of their boundaries known yet.
    pub(super) fn new(grouping: &Grouping) -> Buckets {
        Buckets {
            bucket: grouping.bucket,
            zone: grouping.zone,
            boundaries: Vec::new(),
        }
    }

    /// The first instant (in seconds) of the bucket `instant` is in; 0 without buckets.
    pub(super) fn start_of(&mut self, instant: Timestamp) -> i64 {
        let Some(bucket) = self.bucket else {
            return 0;
        };
        if self.zone == Zone::Utc {
            return utc_start(bucket.seconds(), instant);
        }
        let at = instant.seconds;
        let known = &self.boundaries;
        if known.len() >= 2 && known[0] <= at && at < known[known.len() - 1] {
            return known[known.partition_point(|&boundary| boundary <= at) - 1];
        }
        let span = span(self.zone, bucket.seconds(), instant);
        self.join(bucket.seconds(), span.clone());
        span.start
    }

    /// Adds `span` and the buckets between it and the known ones, if few.
    fn join(&mut self, length: i64, span: Range<i64>) {
        let zone = self.zone;
        let next = |boundary: i64| {
            self::span(
                zone,
                length,
                Timestamp {
                    seconds: boundary,
                    nanos: 0,
                },
            )
            .end
        };
        // The boundaries from `from` on, up to `until` at most.
        let walk = |from: i64, until: i64| {
            let mut walked = vec![from];
            while walked.len() <= BUCKETS_WALKED {
                let last = walked[walked.len() - 1];
                if last >= until {
                    return Some(walked);
                }
                let following = next(last);
                if following <= last {
                    return None;
                }
                walked.push(following);
            }
            None
        };
        let joined = match (self.boundaries.first(), self.boundaries.last()) {
            (Some(&first), Some(_)) if span.end <= first => walk(span.start, first)
                .filter(|walked| walked[walked.len() - 1] == first)
                .map(|mut walked| {
                    walked.pop();
                    walked.append(&mut self.boundaries);
                    walked
                }),
            (Some(&first), Some(&last)) if span.start >= last && first < last => {
                walk(last, span.end)
                    .filter(|walked| walked[walked.len() - 1] == span.end)
                    .map(|walked| {
                        let mut joined = std::mem::take(&mut self.boundaries);
                        joined.extend_from_slice(&walked[1..]);
                        joined
                    })
            }
            _ => None,
        };
        self.boundaries = joined.unwrap_or_else(|| vec![span.start, span.end]);
    }
}

/// `bucket_start` texts by bucket: a summary's rows share few buckets, and a
/// zone's text takes a look-up of its offset.
pub(super) struct BucketStarts {
    zone: Zone,
    texts: HashMap<i64, String>,
}

impl BucketStarts {
    pub(super) fn new(zone: Zone) -> BucketStarts {
        BucketStarts {
            zone,
            texts: HashMap::default(),
        }
    }

    /// The `bucket_start` of the bucket that starts at `start`.
    pub(super) fn text(&mut self, start: i64) -> &str {
        let zone = self.zone;
        self.texts
            .entry(start)
            .or_insert_with(|| start_text(zone, start))
    }
}

/// The first instant (in seconds) of the UTC bucket `length` seconds long that
/// `instant` falls in: buckets are aligned to the Unix epoch.
fn utc_start(length: i64, instant: Timestamp) -> i64 {
    instant.seconds.div_euclid(length) * length
}

/// The bucket `length` seconds long (whole minutes, a `bucket`'s) that `instant`
/// falls in: from its first instant to the next bucket's, in whole seconds since
/// the epoch.
fn span(zone: Zone, length: i64, instant: Timestamp) -> Range<i64> {
    let tz = match zone {
        Zone::Utc => {
            let start = utc_start(length, instant);
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
fn start_text(zone: Zone, start: i64) -> String {
    let instant = Timestamp {
        seconds: start,
        nanos: 0,
    };
    let tz = match zone {
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
    use crate::domain::query::GroupField;
    use crate::domain::time::{parse_rfc3339, DAY_SECONDS};

    fn zone(name: &str) -> Zone {
        Zone::parse(name).unwrap()
    }

    fn at(text: &str) -> Timestamp {
        parse_rfc3339(text).unwrap()
    }

    /// The bucket of `instant`, as its start and end written in the zone.
    fn bucket(zone: Zone, bucket: &str, instant: &str) -> (String, String) {
        let span = span(zone, Bucket::parse(bucket).unwrap().seconds(), at(instant));
        (start_text(zone, span.start), start_text(zone, span.end))
    }

    fn pair(start: &str, end: &str) -> (String, String) {
        (start.to_owned(), end.to_owned())
    }

    #[test]
    fn utc_buckets_are_aligned_to_the_epoch() {
        let hour = Bucket::parse("1h").unwrap().seconds();
        let at = |seconds| Timestamp { seconds, nanos: 5 };
        assert_eq!(utc_start(hour, at(7200)), 7200);
        assert_eq!(utc_start(hour, at(7199)), 3600);
        assert_eq!(utc_start(hour, at(-1)), -3600);
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
                assert_eq!(start_text(Zone::Named(tz), seconds), expected, "{tz}");
                seconds += 86_413_337;
            }
        }
    }

    #[test]
    fn utc_keeps_the_epoch_grid_and_the_z_form() {
        assert_eq!(
            bucket(Zone::Utc, "1h", "2024-05-01T10:59:59.999Z"),
            pair("2024-05-01T10:00:00Z", "2024-05-01T11:00:00Z")
        );
        // Etc/UTC is another zone by name: the same grid, written with its offset.
        assert_eq!(
            bucket(zone("Etc/UTC"), "1d", "2024-05-01T10:00:00Z"),
            pair("2024-05-01T00:00:00+00:00", "2024-05-02T00:00:00+00:00")
        );
    }

    #[test]
    fn issue_23_a_berlin_day_starts_at_local_midnight_and_lasts_23_or_25_hours() {
        let berlin = zone("Europe/Berlin");
        // Spring forward on 2026-03-29 at 02:00 CET: 23 hours.
        let spring = span(berlin, DAY_SECONDS, at("2026-03-29T12:00:00Z"));
        assert_eq!(spring.end - spring.start, 23 * 3600);
        assert_eq!(
            bucket(berlin, "1d", "2026-03-29T12:00:00Z"),
            pair("2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00")
        );
        // Fall back on 2026-10-25 at 03:00 CEST: 25 hours.
        let fall = span(berlin, DAY_SECONDS, at("2026-10-25T12:00:00Z"));
        assert_eq!(fall.end - fall.start, 25 * 3600);
        assert_eq!(
            bucket(berlin, "1d", "2026-10-24T22:30:00Z"),
            pair("2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00")
        );
    }

    #[test]
    fn issue_23_a_skipped_hour_starts_at_the_first_instant_after_the_gap() {
        let berlin = zone("Europe/Berlin");
        // 01:59:59 CET is the last second before the gap; 03:00 CEST the first after.
        assert_eq!(
            bucket(berlin, "1h", "2026-03-29T00:59:59Z"),
            pair("2026-03-29T01:00:00+01:00", "2026-03-29T03:00:00+02:00")
        );
        assert_eq!(
            bucket(berlin, "1h", "2026-03-29T01:00:00Z"),
            pair("2026-03-29T03:00:00+02:00", "2026-03-29T04:00:00+02:00")
        );
        // 30-minute buckets at 02:00 and 02:30 are empty: both start where 03:00 does.
        assert_eq!(
            bucket(berlin, "30m", "2026-03-29T01:00:00Z"),
            pair("2026-03-29T03:00:00+02:00", "2026-03-29T03:30:00+02:00")
        );
        // 2h buckets: the 02:00 boundary is the gap's end, so 00:00 lasts one hour.
        assert_eq!(
            bucket(berlin, "2h", "2026-03-29T00:30:00Z"),
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
                bucket(berlin, "1h", instant),
                pair("2026-10-25T02:00:00+02:00", "2026-10-25T03:00:00+01:00"),
                "{instant}"
            );
        }
        // With 1-minute buckets the later pass belongs to the last bucket that
        // starts in the earlier one, 02:59, which lasts 61 minutes.
        assert_eq!(
            bucket(berlin, "1m", "2026-10-25T01:10:00Z"),
            pair("2026-10-25T02:59:00+02:00", "2026-10-25T03:00:00+01:00")
        );
        assert_eq!(
            bucket(berlin, "1m", "2026-10-25T00:10:30Z"),
            pair("2026-10-25T02:10:00+02:00", "2026-10-25T02:11:00+02:00")
        );
    }

    #[test]
    fn issue_23_half_hour_offsets_and_zones_west_of_utc() {
        let kolkata = zone("Asia/Kolkata");
        assert_eq!(
            bucket(kolkata, "1d", "2026-11-18T20:00:00Z"),
            pair("2026-11-19T00:00:00+05:30", "2026-11-20T00:00:00+05:30")
        );
        assert_eq!(
            bucket(kolkata, "1h", "2026-11-18T20:00:00Z"),
            pair("2026-11-19T01:00:00+05:30", "2026-11-19T02:00:00+05:30")
        );
        // 7-day buckets start on Thursdays, 1970-01-01's weekday, at local midnight.
        assert_eq!(
            bucket(zone("America/New_York"), "7d", "2026-11-18T03:00:00Z"),
            pair("2026-11-12T00:00:00-05:00", "2026-11-19T00:00:00-05:00")
        );
    }

    #[test]
    fn the_ends_of_the_time_line_have_buckets_too() {
        // Local mean time (+00:53:28) before 1893, written without its seconds; the
        // last offset of the tables after 2099.
        let berlin = zone("Europe/Berlin");
        assert_eq!(
            bucket(berlin, "1d", "0001-01-01T12:00:00Z"),
            pair("0001-01-01T00:00:00+00:53", "0001-01-02T00:00:00+00:53")
        );
        assert_eq!(
            bucket(berlin, "31d", "9999-12-31T23:59:59.999999999Z").0,
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
                    let span = span(zone, bucket, instant);
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

    /// The known boundaries place every instant as the zone's own rules do, in
    /// whatever order instants come: forwards, backwards, near and far apart.
    #[test]
    fn issue_23_known_bucket_boundaries_place_instants_as_the_zone_does() {
        for (zone, bucket) in [
            ("Europe/Berlin", "1h"),
            ("Europe/Berlin", "1d"),
            ("Australia/Lord_Howe", "30m"),
            ("Asia/Kolkata", "7h"),
            ("America/St_Johns", "1d"),
        ] {
            let grouping = Grouping {
                fields: vec![GroupField::StationId],
                bucket: Bucket::parse(bucket),
                zone: Zone::parse(zone).unwrap(),
            };
            let length = grouping.bucket.unwrap().seconds();
            let mut buckets = Buckets::new(&grouping);
            // A fixed pseudo-random walk over 2026, around both changes of clocks.
            let mut state: u64 = 0x2545_f491_4f6c_dd1d;
            let mut seconds: i64 = 1_774_000_000;
            for step in 0..20_000 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let jump = (state % 7_200) as i64 - 2_000;
                seconds += if step % 500 == 0 { jump * 400 } else { jump };
                let instant = Timestamp { seconds, nanos: 0 };
                assert_eq!(
                    buckets.start_of(instant),
                    span(grouping.zone, length, instant).start,
                    "{zone} {bucket} at {seconds}"
                );
            }
        }
    }
}
