//! The join pack: what a replica joining an `s3://` store fetches (each
//! file whole, of a sealed file its index alone), gathered into a few objects, so
//! that a join is some ten requests rather than one a file.
//!
//! A week of 1000 stations is some 2,000 files a join fetches; fetched one by one
//! from s3s-fs on loopback, the requests cost the two cores more than the bytes did
//! (each some milliseconds of CPU between the server, which opens, stats and reads a
//! file on a blocking thread, and stq's client), and the join took 3 to 3.6 x a
//! restart from a local store (BENCHMARKS.md). An S3 charges a request too, and
//! answers its first byte after tens of milliseconds.
//!
//! - **Parts**, `pack-<hash>.pack`: files laid end to end, about [`PART_BYTES`]
//!   each (a larger file in a part of its own); `<hash>` is the part's XXH3-128, as
//!   a store file's, so that parts are immutable and two replicas writing at once
//!   write the same bytes or different names.
//! - **The table**, object [`POINTER`]: each part's name and length, and where each
//!   file lies in which part, ending with the XXH3-64 of what precedes it.
//!
//! A pack is a cache of the store files, never a source: a pull checks each file it
//! takes from a part against its name (or, of an index, against the manifest's
//! checksum), and fetches the store's own object of any file the pack lacks, holds
//! damaged, or has lost. So a pack that is stale, torn, damaged or gone costs
//! requests, never an answer. The push writes a new pack when the bucket has none
//! or more than a quarter of what a join fetches is not in it ([`due`]), at most
//! once every [`INTERVAL`] (a live floor changes its stations' files all day).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::time::Duration;

use stq_core::data::NamedFile;
use xxhash_rust::xxh3::{xxh3_128, xxh3_64};

/// The table's object name, beside the manifest.
pub(crate) const POINTER: &str = "PACK";

/// A part's bytes, about: a week of 1000 stations is then some ten parts, fetched
/// at once, and a part in memory (a push builds each whole) stays small.
pub(crate) const PART_BYTES: u64 = 16 << 20;

/// The least time between two packs one process writes.
pub(crate) const INTERVAL: Duration = Duration::from_secs(600);

/// The table's first line.
const HEADER: &str = "stq pack 1";

/// What a join fetches of a file: the file whole, or a sealed file's index alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Piece {
    Whole,
    Index,
}

impl Piece {
    /// What a join fetches of `file`, and its length.
    pub(crate) fn of(file: &NamedFile) -> (Piece, u64) {
        match file.index {
            Some((_, length, _)) => (Piece::Index, u64::from(length)),
            None => (Piece::Whole, file.length),
        }
    }

    fn word(self) -> &'static str {
        match self {
            Piece::Whole => "whole",
            Piece::Index => "index",
        }
    }
}

/// Where a piece of a file lies in the pack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) name: String,
    pub(crate) piece: Piece,
    /// The part's position in [`Table::parts`].
    pub(crate) part: usize,
    pub(crate) offset: u64,
    pub(crate) length: u64,
}

/// A pack's table: its parts (name, length) and its entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Table {
    pub(crate) parts: Vec<(String, u64)>,
    pub(crate) entries: Vec<Entry>,
}

impl Table {
    /// The table in `bytes`, if whole and consistent.
    pub(crate) fn parse(bytes: &[u8]) -> Result<Table, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_owned())?;
        let body_end = (text.trim_end_matches('\n').rfind('\n'))
            .map(|at| at + 1)
            .ok_or("no checksum line")?;
        let (body, last) = text.split_at(body_end);
        if last.trim_end_matches('\n') != check_line(body) {
            return Err("its checksum does not match".into());
        }
        let mut lines = body.lines();
        if lines.next() != Some(HEADER) {
            return Err(format!("it does not begin with {HEADER:?}"));
        }
        let mut table = Table::default();
        for line in lines {
            let words: Vec<&str> = line.split(' ').collect();
            let number = |at: usize| words.get(at).and_then(|word| word.parse::<u64>().ok());
            match words.as_slice() {
                ["part", name, _] if is_part(name) => {
                    table.parts.push((name.to_string(), number(2).ok_or(line)?));
                }
                ["file", _, _, _, piece, name] => {
                    let part = number(1).ok_or(line)? as usize;
                    let (offset, length) = (number(2).ok_or(line)?, number(3).ok_or(line)?);
                    let piece = match *piece {
                        "whole" => Piece::Whole,
                        "index" => Piece::Index,
                        _ => return Err(format!("a line {line:?}")),
                    };
                    let fits = (table.parts.get(part))
                        .is_some_and(|(_, size)| offset.checked_add(length) <= Some(*size));
                    if !fits {
                        return Err(format!("{line:?} lies outside its part"));
                    }
                    table.entries.push(Entry {
                        name: name.to_string(),
                        piece,
                        part,
                        offset,
                        length,
                    });
                }
                _ => return Err(format!("a line {line:?}")),
            }
        }
        Ok(table)
    }

    /// The table as [`Table::parse`] reads it.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        self.to_text().into_bytes()
    }

    fn to_text(&self) -> String {
        let mut text = format!("{HEADER}\n");
        for (name, length) in &self.parts {
            let _ = writeln!(text, "part {name} {length}");
        }
        for entry in &self.entries {
            let _ = writeln!(
                text,
                "file {} {} {} {} {}",
                entry.part,
                entry.offset,
                entry.length,
                entry.piece.word(),
                entry.name
            );
        }
        let check = check_line(&text);
        text + &check + "\n"
    }

    /// Its entries by file and piece.
    pub(crate) fn lookup(&self) -> HashMap<(&str, Piece), &Entry> {
        (self.entries.iter())
            .map(|entry| ((entry.name.as_str(), entry.piece), entry))
            .collect()
    }
}

/// The line that ends a table of `body`.
fn check_line(body: &str) -> String {
    format!("check {:016x}", xxh3_64(body.as_bytes()))
}

/// Whether a push should write a new pack for a store whose manifest names
/// `files`: when the bucket has none, or more than a quarter of the bytes a join
/// fetches are not in it.
pub(crate) fn due(table: Option<&Table>, files: &[&NamedFile]) -> bool {
    let Some(table) = table else {
        return !files.is_empty();
    };
    let lookup = table.lookup();
    let (mut wanted, mut missing) = (0, 0);
    for file in files {
        let (piece, length) = Piece::of(file);
        wanted += length;
        let packed = lookup.get(&(file.name.as_str(), piece));
        if packed.is_none_or(|entry| entry.length != length) {
            missing += length;
        }
    }
    missing * 4 > wanted
}

/// `files` (each once) in parts of about [`PART_BYTES`], in their order.
pub(crate) fn plan<'a>(files: &[&'a NamedFile]) -> Vec<Vec<&'a NamedFile>> {
    let mut parts: Vec<Vec<&NamedFile>> = Vec::new();
    let mut bytes = 0;
    for &file in files {
        let (_, length) = Piece::of(file);
        match parts.last_mut() {
            Some(part) if bytes + length <= PART_BYTES => {
                part.push(file);
                bytes += length;
            }
            _ => {
                parts.push(vec![file]);
                bytes = length;
            }
        }
    }
    parts
}

/// Whether `bytes` are `piece` of `file`: a whole file hashes to its name, an
/// index to the manifest's checksum of it.
pub(crate) fn holds(file: &NamedFile, piece: Piece, bytes: &[u8]) -> bool {
    match (piece, file.index) {
        (Piece::Whole, _) => file.digest == Some(xxh3_128(bytes)),
        (Piece::Index, Some((_, length, check))) => {
            bytes.len() == length as usize && xxh3_64(bytes) == check
        }
        (Piece::Index, None) => false,
    }
}

/// `piece` of `file` as the local copy holds it (an index from the whole sealed
/// file, or from the index alone a pull left), checked.
pub(crate) fn read(copy: &Path, file: &NamedFile, piece: Piece) -> io::Result<Vec<u8>> {
    let bytes = match (piece, file.index, &file.index_file) {
        (Piece::Whole, ..) => fs::read(copy.join(&file.name))?,
        (Piece::Index, Some((offset, length, _)), Some(index_file)) => {
            match fs::File::open(copy.join(&file.name)) {
                Ok(whole) => {
                    let mut bytes = vec![0; length as usize];
                    whole.read_exact_at(&mut bytes, offset)?;
                    bytes
                }
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    fs::read(copy.join(index_file))?
                }
                Err(error) => return Err(error),
            }
        }
        (Piece::Index, ..) => return Err(io::Error::other("not a sealed file")),
    };
    if !holds(file, piece, &bytes) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} fails its checksum", file.name),
        ));
    }
    Ok(bytes)
}

/// A part's object name: its hash, as a store file's.
pub(crate) fn part_name(bytes: &[u8]) -> String {
    format!("pack-{:032x}.pack", xxh3_128(bytes))
}

/// Whether `name` is a part's.
pub(crate) fn is_part(name: &str) -> bool {
    name.starts_with("pack-") && name.ends_with(".pack") && !name.contains(['/', ' '])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, length: u64, index: Option<(u64, u32, u64)>) -> NamedFile {
        NamedFile {
            name: name.into(),
            length,
            index,
            index_file: index.map(|_| format!("{name}.index")),
            station: None,
            digest: name
                .split(['-', '.'])
                .nth(1)
                .and_then(|hex| u128::from_str_radix(hex, 16).ok()),
        }
    }

    /// `files` as the functions take them.
    fn refs(files: &[NamedFile]) -> Vec<&NamedFile> {
        files.iter().collect()
    }

    fn table() -> Table {
        Table {
            parts: vec![(format!("pack-{:032x}.pack", 1), 300)],
            entries: vec![
                Entry {
                    name: "settled-a.stq".into(),
                    piece: Piece::Whole,
                    part: 0,
                    offset: 0,
                    length: 200,
                },
                Entry {
                    name: "sealed-b.stq".into(),
                    piece: Piece::Index,
                    part: 0,
                    offset: 200,
                    length: 100,
                },
            ],
        }
    }

    #[test]
    fn a_table_reads_back_as_written_and_refuses_any_change() {
        let bytes = table().to_bytes();
        assert_eq!(Table::parse(&bytes), Ok(table()));
        for at in 0..bytes.len() {
            let mut changed = bytes.clone();
            changed[at] ^= 0x20;
            assert!(Table::parse(&changed).is_err(), "a change at {at}");
        }
        assert!(
            Table::parse(&bytes[..bytes.len() - 1]).is_ok(),
            "a final newline"
        );
        assert!(Table::parse(&bytes[..bytes.len() / 2]).is_err());
        assert!(Table::parse(b"").is_err());
    }

    #[test]
    fn an_entry_outside_its_part_is_refused() {
        let mut outside = table();
        outside.entries[1].length = 101;
        assert!(Table::parse(&outside.to_bytes()).is_err());
        outside.entries[1].length = 100;
        outside.entries[1].part = 1;
        assert!(Table::parse(&outside.to_bytes()).is_err());
    }

    #[test]
    fn a_pack_is_due_when_a_quarter_of_a_join_is_missing_from_it() {
        let files = [
            file("settled-a.stq", 200, None),
            file("sealed-b.stq", 1000, Some((900, 100, 7))),
        ];
        assert!(due(None, &refs(&files)));
        assert!(!due(None, &[]));
        assert!(!due(Some(&table()), &refs(&files)));
        let mut grown = files.to_vec();
        grown.push(file("settled-c.stq", 100, None));
        assert!(
            !due(Some(&table()), &refs(&grown)),
            "100 of 400 bytes missing"
        );
        grown.push(file("recent-d.stq", 1, None));
        assert!(
            due(Some(&table()), &refs(&grown)),
            "101 of 401 bytes missing"
        );
        // A file of another length under the same name is not the packed one.
        let changed = [file("settled-a.stq", 201, None), files[1].clone()];
        assert!(due(Some(&table()), &refs(&changed)));
    }

    #[test]
    fn parts_hold_about_part_bytes_and_a_larger_file_alone() {
        let big = PART_BYTES / 2 + 1;
        let files = [
            file("a", big, None),
            file("b", big, None),
            file("c", 10, None),
            file("d", 3 * PART_BYTES, None),
            file("e", 10, Some((0, 10, 0))),
        ];
        let names: Vec<Vec<&str>> = (plan(&refs(&files)).iter())
            .map(|part| part.iter().map(|file| file.name.as_str()).collect())
            .collect();
        assert_eq!(names, [vec!["a"], vec!["b", "c"], vec!["d"], vec!["e"]]);
    }

    #[test]
    fn a_piece_is_read_from_the_copy_and_checked() {
        let copy = tempfile::tempdir().unwrap();
        let whole = b"settled layer".to_vec();
        let name = format!("settled-{:032x}.stq", xxh3_128(&whole));
        fs::write(copy.path().join(&name), &whole).unwrap();
        let settled = file(&name, whole.len() as u64, None);
        assert_eq!(read(copy.path(), &settled, Piece::Whole).unwrap(), whole);

        let sealed_bytes = b"blocks....index".to_vec();
        let index = (10, 5, xxh3_64(b"index"));
        let sealed = file("sealed-x.stq", sealed_bytes.len() as u64, Some(index));
        // The index alone, as a pull leaves it; then the whole file.
        fs::write(copy.path().join("sealed-x.stq.index"), b"index").unwrap();
        assert_eq!(read(copy.path(), &sealed, Piece::Index).unwrap(), b"index");
        fs::write(copy.path().join("sealed-x.stq"), &sealed_bytes).unwrap();
        fs::remove_file(copy.path().join("sealed-x.stq.index")).unwrap();
        assert_eq!(read(copy.path(), &sealed, Piece::Index).unwrap(), b"index");

        fs::write(copy.path().join(&name), b"settled lazer").unwrap();
        assert!(read(copy.path(), &settled, Piece::Whole).is_err());
        assert!(read(copy.path(), &settled, Piece::Index).is_err());
    }
}
