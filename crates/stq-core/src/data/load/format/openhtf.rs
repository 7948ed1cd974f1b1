//! OpenHTF test records (`*.openhtf.json`, gzipped or not; docs/api.md section
//! 2.1): one test record a file, converted by [`crate::domain::openhtf`] into record
//! lines that are parsed like JSON Lines.

use super::{Block, Cut, Format, Records};
use crate::domain::openhtf;
use crate::domain::record::{parse_line, Kind, ParsedLine};

/// `*.openhtf.json`.
pub(super) const OPENHTF: OpenHtf = OpenHtf;

/// One OpenHTF test record: unit and metric records both.
#[derive(Debug)]
pub(super) struct OpenHtf;

impl Format for OpenHtf {
    fn name(&self) -> &'static str {
        "openhtf"
    }

    fn suffix(&self) -> &'static str {
        ".openhtf.json"
    }

    fn kind(&self) -> Option<Kind> {
        None
    }

    fn cut(&self) -> Cut {
        Cut::Whole
    }

    /// The file's records in the order of docs/api.md section 2, each numbered as
    /// line 1, 2, 3, ...; any problem is one invalid line 1 for the whole file, and
    /// then none of its records is kept.
    fn parse(&self, block: &Block, records: &mut dyn Records) {
        let lines = match openhtf::convert(&block.bytes) {
            Ok(lines) => lines,
            Err(reason) => return records.invalid(1, reason),
        };
        // Every line is parsed before any is kept, so that a file loads whole or not
        // at all. The converter writes lines `parse_line` accepts, and only the
        // fields a record has; this is the check.
        let mut unknown = Vec::new();
        let mut parsed_lines: Vec<(ParsedLine<'_>, Vec<u8>)> = Vec::with_capacity(lines.len());
        for (kind, line) in &lines {
            let mut rendered = Vec::new();
            match parse_line(*kind, line, &mut rendered, &mut unknown) {
                Ok(parsed) => parsed_lines.push((parsed, rendered)),
                Err(reason) => return records.invalid(1, reason),
            }
        }
        for (position, (parsed, rendered)) in parsed_lines.into_iter().enumerate() {
            let (json, _) = records.buffers();
            let json_start = json.len();
            json.extend_from_slice(&rendered);
            records.record(parsed, position as u32 + 1, json_start, false);
        }
    }
}
