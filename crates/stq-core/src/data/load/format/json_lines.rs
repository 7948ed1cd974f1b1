//! JSON Lines (`*.units.jsonl`, `*.metrics.jsonl`, gzipped or not): a record of
//! the file's kind on each line.

use super::{Block, Cut, Format, Records};
use crate::domain::record::{parse_line, Kind};

/// `*.units.jsonl`: a unit record a line.
pub(super) const UNITS: JsonLines = JsonLines(Kind::Units);

/// `*.metrics.jsonl`: a metric record a line.
pub(super) const METRICS: JsonLines = JsonLines(Kind::Metrics);

/// JSON Lines of one kind of record.
#[derive(Debug)]
pub(super) struct JsonLines(Kind);

impl Format for JsonLines {
    fn name(&self) -> &'static str {
        match self.0 {
            Kind::Units => "units",
            Kind::Metrics => "metrics",
        }
    }

    fn suffix(&self) -> &'static str {
        match self.0 {
            Kind::Units => ".units.jsonl",
            Kind::Metrics => ".metrics.jsonl",
        }
    }

    fn kind(&self) -> Option<Kind> {
        Some(self.0)
    }

    fn cut(&self) -> Cut {
        Cut::Lines
    }

    /// Each line on its own: a line end may be `\r\n`, the file's first line may
    /// start with a byte order mark, and blank lines are skipped.
    fn parse(&self, block: &Block, records: &mut dyn Records) {
        for (offset, (raw_line, is_last)) in lines(&block.bytes).enumerate() {
            let line_number = block.first_line + offset as u32;
            let mut line = raw_line.strip_suffix(b"\r").unwrap_or(raw_line);
            if line_number == 1 {
                line = line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line);
            }
            if line.trim_ascii().is_empty() {
                continue;
            }
            let open = block.open_end && is_last;
            let (json, unknown) = records.buffers();
            let json_start = json.len();
            let result = std::str::from_utf8(line)
                .map_err(|error| format!("invalid UTF-8 at byte {}", error.valid_up_to() + 1))
                .and_then(|text| parse_line(self.0, text, json, unknown));
            match result {
                Ok(parsed) => records.record(parsed, line_number, json_start, open),
                Err(_) if open => records.pending(),
                Err(reason) => records.invalid(line_number, reason),
            }
        }
    }
}

/// `bytes` cut at each `\n`, as `<[u8]>::split` cuts them, each piece with whether
/// it is the last.
fn lines(bytes: &[u8]) -> impl Iterator<Item = (&[u8], bool)> {
    let mut rest = Some(bytes);
    std::iter::from_fn(move || {
        let bytes = rest?;
        match memchr::memchr(b'\n', bytes) {
            Some(end) => {
                rest = Some(&bytes[end + 1..]);
                Some((&bytes[..end], false))
            }
            None => {
                rest = None;
                Some((bytes, true))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_cut_into_lines_as_split_cuts_them() {
        for bytes in ["", "\n", "a", "a\n", "a\nb", "\n\na\r\nb\n\n"] {
            let bytes = bytes.as_bytes();
            let expected: Vec<&[u8]> = bytes.split(|byte| *byte == b'\n').collect();
            let cut: Vec<(&[u8], bool)> = lines(bytes).collect();
            assert_eq!(
                cut.iter().map(|(line, _)| *line).collect::<Vec<_>>(),
                expected
            );
            let lasts: Vec<bool> = cut.iter().map(|(_, last)| *last).collect();
            assert_eq!(lasts.iter().filter(|last| **last).count(), 1);
            assert_eq!(lasts.last(), Some(&true));
        }
    }
}
