//! How a sealed record's time text is kept: as a small code when it is the
//! instant written one of the usual ways, else as the text itself.

use crate::domain::time::Timestamp;

/// How a time text is written, when it is one of the usual ways: the time of day
/// at its offset, with milliseconds or none, then `Z` or the offset. The code is
/// `1 + (offset << 1 | millis)`, where the offset is 0 for `Z`, else one more
/// than its minutes zigzagged; 0 means the text is kept as it is.
pub(super) fn time_code(instant: Timestamp, text: &[u8]) -> Option<u64> {
    let offset = match text.last()? {
        b'Z' => 0,
        _ => {
            let suffix = text.get(text.len().checked_sub(6)?..)?;
            let digits = |at: usize| -> Option<i64> {
                let tens = suffix[at].checked_sub(b'0').filter(|digit| *digit < 10)?;
                let ones = suffix[at + 1]
                    .checked_sub(b'0')
                    .filter(|digit| *digit < 10)?;
                Some(i64::from(tens * 10 + ones))
            };
            let minutes = digits(1)? * 60 + digits(4)?;
            let minutes = match (suffix[0], suffix[3]) {
                (b'+', b':') => minutes,
                (b'-', b':') => -minutes,
                _ => return None,
            };
            ((minutes << 1) ^ (minutes >> 63)) as u64 + 1
        }
    };
    [1u64, 0].into_iter().find_map(|millis| {
        let code = 1 + ((offset << 1) | millis);
        let mut usual = Vec::with_capacity(text.len());
        write_coded_time(&mut usual, instant, code);
        (usual == text).then_some(code)
    })
}

/// Writes the time text a [`time_code`] stands for.
pub(super) fn write_coded_time(out: &mut Vec<u8>, instant: Timestamp, code: u64) {
    let millis = (code - 1) & 1 == 1;
    let offset = (code - 1) >> 1;
    let minutes = match offset {
        0 => 0,
        _ => {
            let zigzag = offset - 1;
            ((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64)
        }
    };
    let second = (instant.seconds + minutes * 60).rem_euclid(86_400);
    let two = |out: &mut Vec<u8>, value: i64| {
        out.push(b'0' + (value / 10 % 10) as u8);
        out.push(b'0' + (value % 10) as u8);
    };
    two(out, second / 3600);
    out.push(b':');
    two(out, second / 60 % 60);
    out.push(b':');
    two(out, second % 60);
    if millis {
        let milli = instant.nanos / 1_000_000;
        out.push(b'.');
        out.push(b'0' + (milli / 100) as u8);
        two(out, i64::from(milli % 100));
    }
    match offset {
        0 => out.push(b'Z'),
        _ => {
            out.push(if minutes < 0 { b'-' } else { b'+' });
            two(out, minutes.abs() / 60);
            out.push(b':');
            two(out, minutes.abs() % 60);
        }
    }
}
