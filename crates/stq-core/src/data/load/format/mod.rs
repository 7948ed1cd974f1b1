//! What a snapshot format is, in one place: which file names it claims, whether
//! its files are cut into blocks of lines or read whole, which kinds of records
//! they hold, and how a block of one becomes records.
//!
//! A format is a file here and a line in [`FORMATS`]. The reading side
//! (`load::read`) knows formats only through [`Format`], and a format knows the
//! reading side only through [`Records`], where its parser puts what it finds.

use std::fmt;

use crate::domain::record::{Kind, ParsedLine};

mod json_lines;
mod openhtf;

/// Every format stq reads. A file name is tried against them in this order.
const FORMATS: &[&dyn Format] = &[&json_lines::UNITS, &json_lines::METRICS, &openhtf::OPENHTF];

/// A snapshot file format (docs/api.md section 2).
pub(crate) trait Format: fmt::Debug + Sync {
    /// Its name in messages and tests: `units`, `metrics`, `openhtf`.
    fn name(&self) -> &'static str;

    /// How the names of its files end, before a `.gz` suffix: `.units.jsonl`.
    fn suffix(&self) -> &'static str;

    /// Whether a file whose name, without a `.gz` suffix, is `stem` is of this
    /// format.
    fn claims(&self, stem: &str) -> bool {
        stem.ends_with(self.suffix())
    }

    /// The kind of every record of its files, or `None` when they hold both.
    fn kind(&self) -> Option<Kind>;

    /// How its files are handed to the parsing threads.
    fn cut(&self) -> Cut;

    /// Parses one block of a file into `records`.
    fn parse(&self, block: &Block, records: &mut dyn Records);
}

/// How a format's files are cut for the parsing threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cut {
    /// In blocks that end at line ends, any number of lines a block; an
    /// uncompressed file that grew is read again from its last line without a line
    /// end, which a writer may be half-way through.
    Lines,
    /// Whole, as one block: the file is one document, loaded whole or not at all.
    Whole,
}

/// The format of a snapshot file and whether it is gzipped, from its name; `None`
/// for files to ignore.
pub(crate) fn of_file_name(name: &str) -> Option<(&'static dyn Format, bool)> {
    let (stem, gzipped) = match name.strip_suffix(".gz") {
        Some(stem) => (stem, true),
        None => (name, false),
    };
    FORMATS
        .iter()
        .find(|format| format.claims(stem))
        .map(|format| (*format, gzipped))
}

/// The file names of every format, for people: `*.units.jsonl, ... or
/// *.openhtf.json`.
pub(crate) fn file_patterns() -> String {
    let patterns: Vec<String> = (FORMATS.iter())
        .map(|format| format!("*{}", format.suffix()))
        .collect();
    match patterns.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, others)) => format!("{} or {last}", others.join(", ")),
        None => String::new(),
    }
}

/// A run of a file's bytes handed to a parsing thread: whole lines (the last one
/// may lack its line end only at the file's end), or a whole file.
pub(crate) struct Block {
    /// The file's index in the read.
    pub(crate) file: u32,
    /// The number of the block's first line in its file.
    pub(crate) first_line: u32,
    pub(crate) bytes: Vec<u8>,
    /// The file's last block, whose last line has no line end: a writer may be
    /// half-way through it, so if it does not parse it is pending, not invalid.
    pub(crate) open_end: bool,
}

/// Where a parser puts what it finds in a block; the reading side implements it.
pub(crate) trait Records {
    /// The buffer the next record's response JSON is rendered into, at its end, and
    /// the list field names the record shape does not have are put in.
    fn buffers(&mut self) -> (&mut Vec<u8>, &mut Vec<String>);

    /// A valid record numbered `line` (its line number, or its position in a file
    /// read whole), whose response JSON is the JSON buffer from `json_start` on;
    /// `open` when it is the file's last line and has no line end.
    fn record(&mut self, parsed: ParsedLine<'_>, line: u32, json_start: usize, open: bool);

    /// An invalid line, and why.
    fn invalid(&mut self, line: u32, reason: String);

    /// The file's last line has no line end and does not parse (yet): pending, not
    /// invalid (docs/api.md section 8).
    fn pending(&mut self);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_choose_the_format() {
        for (name, wanted) in [
            ("a.units.jsonl", Some(("units", false))),
            ("a.metrics.jsonl.gz", Some(("metrics", true))),
            ("a.openhtf.json", Some(("openhtf", false))),
            ("a.openhtf.json.gz", Some(("openhtf", true))),
            (".openhtf.json", Some(("openhtf", false))),
            ("a.jsonl", None),
            ("a.json", None),
            ("a.units.jsonl.bak", None),
            ("a.openhtf.jsonl", None),
            ("a.openhtf.json.bak", None),
            ("a.OPENHTF.json", None),
        ] {
            let found = of_file_name(name).map(|(format, gzip)| (format.name(), gzip));
            assert_eq!(found, wanted, "{name}");
        }
    }

    /// A store's manifest names each file's format by one of the names the
    /// sources know: every format of the table has one, and no two share it.
    #[test]
    fn every_format_has_one_of_the_names_a_manifest_writes() {
        let names: Vec<&str> = FORMATS.iter().map(|format| format.name()).collect();
        assert_eq!(names, crate::data::sources::FORMAT_NAMES);
    }

    /// Issue 33: the "no files" warning lists the formats from [`FORMATS`].
    #[test]
    fn issue_33_file_patterns_name_every_format() {
        assert_eq!(
            file_patterns(),
            "*.units.jsonl, *.metrics.jsonl or *.openhtf.json"
        );
    }
}
