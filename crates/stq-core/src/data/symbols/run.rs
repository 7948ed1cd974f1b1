//! A run of the symbol table as the store keeps it: strings and a hash
//! table of them laid out so that they are read where they lie, mapped from the
//! store's file, rather than copied into the heap. A year of 100 stations holds
//! some six million serial numbers: 160 MB of heap as an interner, for strings a
//! query looks up a handful of at a time.
//!
//! The layout, after the store's magic (all numbers little-endian):
//! - a header: the run's first symbol, its string count, its slot count (a power
//!   of two), 4 bytes of zero, and its text's length (u32, u32, u32, u32, u64);
//! - each string's XXH3-64 (u64 each);
//! - where each string ends in the text (u32 each, after a leading 0);
//! - the hash table: a slot per u32, each 0 (empty) or a string's index plus one,
//!   probed linearly from its hash's slot;
//! - the text: the strings one after the other.
//!
//! The store checks the file whole against its name before mapping it. A mapped
//! file is read for as long as a layer holds it, after the store has deleted it
//! too; stq never writes to a named store file, but another process that did would
//! change what is read, and one that cut it would lose pages of the map (which
//! `crate::data::mapped` turns into zeros, marking the map). So a string is
//! checked against its hash whenever its text is read, every read asks whether
//! the map lost a page, and the read of a damaged or cut run is a
//! [`StorageFault`], as a damaged block part's is.

use std::fs::File;
use std::path::{Path, PathBuf};

use itertools::Itertools as _;
use xxhash_rust::xxh3::xxh3_64;

use crate::data::fault::StorageFault;
use crate::data::mapped::Mapped;

const HEADER: usize = 24;

/// Why a run's bytes cannot be read as one.
#[derive(Debug, thiserror::Error)]
#[error("a symbol run's {0}")]
pub(crate) struct Malformed(pub(super) &'static str);

/// A run of symbols mapped from a store file: `count` strings numbered from
/// `first`.
#[derive(Debug)]
pub(crate) struct Run {
    path: PathBuf,
    /// The file, open: what [`Run::check_length`] asks its length.
    file: File,
    map: Mapped,
    first: u32,
    count: usize,
    slots: usize,
    /// Where the hashes, the ends, the slots and the text start in `map`.
    hashes: usize,
    ends: usize,
    table: usize,
    text: usize,
}

/// Appends the run of `texts`, numbered from `first`, to `out`; each is read
/// four times, and a read that fails (a string of a mapped run) fails the write.
///
/// # Errors
/// A run holds at most `u32::MAX` strings of at most 4 GiB of text in all.
pub(crate) fn write<'a>(
    first: u32,
    texts: impl ExactSizeIterator<Item = Result<&'a str, StorageFault>> + Clone,
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    let too_large = || std::io::Error::other("a symbol run of more than 4 GiB");
    let count = u32::try_from(texts.len()).map_err(|_| too_large())?;
    let slots = (texts.len() * 3 / 2 + 1).next_power_of_two();
    let texts = texts.map(|text| text.map_err(std::io::Error::other));
    let length: usize = texts
        .clone()
        .map_ok(str::len)
        .sum::<std::io::Result<usize>>()?;
    u32::try_from(length).map_err(|_| too_large())?;
    for number in [first, count, slots as u32, 0] {
        out.extend_from_slice(&number.to_le_bytes());
    }
    out.extend_from_slice(&(length as u64).to_le_bytes());
    let mut table = vec![0u32; slots];
    for (index, text) in texts.clone().enumerate() {
        let text = text?;
        let hash = xxh3_64(text.as_bytes());
        out.extend_from_slice(&hash.to_le_bytes());
        let mut slot = hash as usize & (slots - 1);
        while table[slot] != 0 {
            slot = (slot + 1) & (slots - 1);
        }
        table[slot] = index as u32 + 1;
    }
    let mut end = 0u32;
    out.extend_from_slice(&end.to_le_bytes());
    for text in texts.clone() {
        end += text?.len() as u32;
        out.extend_from_slice(&end.to_le_bytes());
    }
    for slot in table {
        out.extend_from_slice(&slot.to_le_bytes());
    }
    for text in texts {
        out.extend_from_slice(text?.as_bytes());
    }
    Ok(())
}

impl Run {
    /// The run in `file` (at `path`) after its first `skip` bytes, whose bytes the
    /// caller checked against the file's name as `checked`: the same bytes, so
    /// that its layout is checked here without reading the mapping.
    pub(crate) fn open(
        path: &Path,
        file: &File,
        skip: usize,
        checked: &[u8],
    ) -> Result<Run, Malformed> {
        let bytes = checked.get(skip..).ok_or(Malformed("header"))?;
        let header = bytes.get(..HEADER).ok_or(Malformed("header"))?;
        let word = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().expect("4"));
        let (first, count, slots) = (word(0), word(4) as usize, word(8) as usize);
        let length = u64::from_le_bytes(header[16..24].try_into().expect("8"));
        if first == 0 || !slots.is_power_of_two() || slots <= count {
            return Err(Malformed("header"));
        }
        let hashes = skip + HEADER;
        let ends = hashes + count * 8;
        let table = ends + (count + 1) * 4;
        let text = table + slots * 4;
        if (text as u64).checked_add(length) != Some(checked.len() as u64) {
            return Err(Malformed("length"));
        }
        let run_ends = &checked[ends..table];
        let mut previous = 0;
        for end in run_ends.chunks_exact(4) {
            let end = u32::from_le_bytes(end.try_into().expect("4"));
            if end < previous {
                return Err(Malformed("string ends"));
            }
            previous = end;
        }
        let slot_values = checked[table..text].chunks_exact(4);
        if u64::from(previous) != length
            || (slot_values.map(|slot| u32::from_le_bytes(slot.try_into().expect("4"))))
                .any(|slot| slot as usize > count)
        {
            return Err(Malformed("string ends or table"));
        }
        let map = Mapped::new(file).map_err(|_| Malformed("mapping"))?;
        if map.len() != checked.len() {
            return Err(Malformed("length"));
        }
        Ok(Run {
            path: path.to_path_buf(),
            file: file.try_clone().map_err(|_| Malformed("file"))?,
            map,
            first,
            count,
            slots,
            hashes,
            ends,
            table,
            text,
        })
    }

    /// The symbol its first string is numbered.
    pub(crate) fn first(&self) -> u32 {
        self.first
    }

    /// How many strings it holds.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// The index in the run of `text`, if it holds it.
    pub(crate) fn get(&self, text: &str) -> Result<Option<usize>, StorageFault> {
        let hash = xxh3_64(text.as_bytes());
        let mut slot = hash as usize & (self.slots - 1);
        loop {
            let index = self.word(self.table + slot * 4) as usize;
            if index == 0 {
                // An empty slot may be a lost page's zeros, or the zeros past
                // the end of a file cut inside its last page (no fault there).
                self.check_length()?;
                return Ok(None);
            }
            let index = index - 1;
            if self.hash(index) == hash && self.bytes(index)? == text.as_bytes() {
                self.check_whole()?;
                return Ok(Some(index));
            }
            slot = (slot + 1) & (self.slots - 1);
        }
    }

    /// The string at `index` in the run, checked against its hash.
    ///
    /// A [`StorageFault`] if the mapped file changed since it was checked whole.
    pub(crate) fn text(&self, index: usize) -> Result<&str, StorageFault> {
        let bytes = self.bytes(index)?;
        let text = (xxh3_64(bytes) == self.hash(index))
            .then(|| std::str::from_utf8(bytes).ok())
            .flatten();
        self.check_whole()?;
        text.ok_or_else(|| {
            let symbol = self.first as usize + index;
            self.fault(&format!("symbol {symbol} fails its check"))
        })
    }

    /// Its strings, in order.
    pub(crate) fn texts(&self) -> impl Iterator<Item = Result<&str, StorageFault>> + '_ {
        (0..self.count).map(|index| self.text(index))
    }

    /// The indexes of its strings equal to `text` ignoring ASCII case. Only the
    /// strings of `text`'s length are read (a year's run is millions of serial
    /// numbers: their ends are read, not their text), and a match is checked
    /// against its hash.
    pub(crate) fn indexes_ignoring_ascii_case(
        &self,
        text: &str,
    ) -> Result<Vec<usize>, StorageFault> {
        let mut found = Vec::new();
        for index in 0..self.count {
            let start = self.word(self.ends + index * 4) as usize;
            let end = self.word(self.ends + index * 4 + 4) as usize;
            if end.wrapping_sub(start) == text.len()
                && self.bytes(index)?.eq_ignore_ascii_case(text.as_bytes())
                && self.text(index)?.eq_ignore_ascii_case(text)
            {
                found.push(index);
            }
        }
        // A length read as zeros (a cut file) may have hidden a match.
        self.check_length()?;
        Ok(found)
    }

    /// The bytes of the file it is mapped from.
    pub(crate) fn mapped_bytes(&self) -> u64 {
        self.map.len() as u64
    }

    fn bytes(&self, index: usize) -> Result<&[u8], StorageFault> {
        assert!(index < self.count, "symbol index within its run");
        let start = self.word(self.ends + index * 4) as usize;
        let end = self.word(self.ends + index * 4 + 4) as usize;
        let text = &self.map[self.text..];
        (text.get(start..end)).ok_or_else(|| self.fault("a symbol's bounds fail their check"))
    }

    /// The fault of a map that lost a page since it was checked whole.
    fn check_whole(&self) -> Result<(), StorageFault> {
        match self.map.faulted() {
            true => Err(self.fault("a page of its map was lost")),
            false => Ok(()),
        }
    }

    /// The fault of a file no longer its checked length, or of a map that lost a
    /// page: what a read that found nothing asks (one `fstat`), since the zeros
    /// past a cut file's end inside its last page read without a fault.
    fn check_length(&self) -> Result<(), StorageFault> {
        match self.cut() {
            true => Err(self.fault("it is no longer the length it was checked at")),
            false => Ok(()),
        }
    }

    fn cut(&self) -> bool {
        self.map.faulted()
            || (self.file.metadata()).map_or(true, |meta| meta.len() != self.map.len() as u64)
    }

    /// The fault of `what` failing: the run was cut, or is damaged.
    fn fault(&self, what: &str) -> StorageFault {
        let how = match self.cut() {
            true => "was cut short under the server",
            false => "is damaged",
        };
        StorageFault::at(&self.path, format!("{how}: {what}"))
    }

    fn hash(&self, index: usize) -> u64 {
        let at = self.hashes + index * 8;
        u64::from_le_bytes(self.map[at..at + 8].try_into().expect("8"))
    }

    fn word(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.map[at..at + 4].try_into().expect("4"))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::io::Write as _;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Issue 32: against a plain list of the strings, a mapped run finds each
        /// one at its index and nothing else, whatever the strings (any UTF-8, any
        /// length, colliding slots), and matches ignoring ASCII case exactly as a
        /// comparison of every string does.
        #[test]
        fn issue_32_a_mapped_run_answers_as_a_list_of_its_strings(
            texts in proptest::collection::btree_set("\\PC{0,12}", 0..200),
            probes in proptest::collection::vec("\\PC{0,12}", 0..40),
            first in 1u32..1000,
        ) {
            let texts: Vec<String> = texts.into_iter().filter(|text| !text.is_empty()).collect();
            let views: Vec<&str> = texts.iter().map(String::as_str).collect();
            let (file, bytes) = written(first, &views);
            let run = Run::open(file.path(), file.as_file(), 8, &bytes).unwrap();
            prop_assert_eq!((run.first(), run.len()), (first, texts.len()));
            for (index, text) in texts.iter().enumerate() {
                prop_assert_eq!(run.get(text).unwrap(), Some(index));
                prop_assert_eq!(run.text(index).unwrap(), text.as_str());
            }
            let held: BTreeSet<&str> = views.iter().copied().collect();
            for probe in probes.iter().map(String::as_str).chain(views.iter().copied()) {
                if !held.contains(probe) {
                    prop_assert_eq!(run.get(probe).unwrap(), None);
                }
                let found: Vec<usize> = run.indexes_ignoring_ascii_case(probe).unwrap();
                let expected: Vec<usize> = (0..texts.len())
                    .filter(|&index| texts[index].eq_ignore_ascii_case(probe))
                    .collect();
                prop_assert_eq!(found, expected);
            }
        }
    }

    fn written(first: u32, texts: &[&str]) -> (tempfile::NamedTempFile, Vec<u8>) {
        let mut bytes = b"MAGIC!!!".to_vec();
        write(first, texts.iter().copied().map(Ok), &mut bytes).unwrap();
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&bytes).unwrap();
        (file, bytes)
    }

    /// Issue 32: a run written and mapped finds each of its strings, numbers them
    /// in order, and finds nothing it does not hold.
    #[test]
    fn issue_32_a_mapped_run_reads_what_was_written() {
        let texts: Vec<String> = (0..5000).map(|number| format!("SN-{number:08}")).collect();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let (file, bytes) = written(7, &texts);
        let run = Run::open(file.path(), file.as_file(), 8, &bytes).unwrap();
        assert_eq!((run.first(), run.len()), (7, 5000));
        for (index, text) in texts.iter().enumerate() {
            assert_eq!(run.get(text).unwrap(), Some(index));
            assert_eq!(run.text(index).unwrap(), *text);
        }
        assert_eq!(run.get("SN-x").unwrap(), None);
        assert_eq!(run.get("").unwrap(), None);
        assert!(run.texts().map(Result::unwrap).eq(texts.iter().copied()));
        let matches: Vec<usize> = run.indexes_ignoring_ascii_case("sn-00004999").unwrap();
        assert_eq!(matches, [4999]);
        assert!(run
            .indexes_ignoring_ascii_case("SN-0000499")
            .unwrap()
            .is_empty());
    }

    /// Issue 32: bytes that are not a run are refused before anything is mapped:
    /// a count the length does not hold, ends out of order.
    #[test]
    fn issue_32_a_malformed_run_is_refused() {
        let (file, bytes) = written(1, &["a", "bc", "def"]);
        assert!(Run::open(file.path(), file.as_file(), 8, &bytes).is_ok());
        let mut longer = bytes.clone();
        longer[12..16].copy_from_slice(&4u32.to_le_bytes());
        assert!(Run::open(file.path(), file.as_file(), 8, &longer).is_err());
        let mut disordered = bytes.clone();
        let ends = 8 + HEADER + 3 * 8;
        disordered[ends + 4..ends + 8].copy_from_slice(&9u32.to_le_bytes());
        assert!(Run::open(file.path(), file.as_file(), 8, &disordered).is_err());
        let mut first_zero = bytes;
        first_zero[8..12].copy_from_slice(&0u32.to_le_bytes());
        assert!(Run::open(file.path(), file.as_file(), 8, &first_zero).is_err());
    }

    /// Issue 32: a string changed in the file after it was checked is a fault
    /// where its text is read, rather than read as another string.
    #[test]
    fn issue_32_a_string_changed_since_its_check_is_a_fault_when_read() {
        let (file, bytes) = written(1, &["SN-1", "SN-2"]);
        let run = Run::open(file.path(), file.as_file(), 8, &bytes).unwrap();
        let mut changed = bytes.clone();
        let last = changed.len() - 1;
        changed[last] ^= 1;
        std::fs::write(file.path(), &changed).unwrap();
        assert_eq!(run.text(0).unwrap(), "SN-1");
        let fault = run.text(1).unwrap_err();
        assert!(fault.reason.contains("fails its check"), "{fault}");
    }
}
