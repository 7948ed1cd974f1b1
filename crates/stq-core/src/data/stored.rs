//! A record's stored form: its response JSON cut into five parts, three of them
//! pieces it shares with other records of its station and two texts of its own.
//!
//! Records of one unit repeat most of their JSON: the station, slot, serial and
//! date before the time; the zone, mode, tags and metric name between time and
//! value; the metric's unit, type and limits after it. So a station keeps each
//! distinct piece once ([`Pieces`]), and a record keeps the numbers of its three
//! pieces and its own texts: the time after its date (`HH:MM:SS.sssZ`) and the
//! value. That is about a tenth of the JSON (BENCHMARKS.md, issue 12). A response
//! copies the five parts in order ([`RecordJson`]); nothing serializes a record
//! again, and nothing but the arena and the pieces is read to send it.
//!
//! In the arena a record is five LEB128 numbers and two texts: head, middle and
//! tail piece numbers, then the time text's length and bytes, then the value's.

use std::hash::BuildHasher as _;
use std::ops::Range;

use hashbrown::HashTable;
use integer_encoding::VarInt as _;

/// Where a record is: the start of its stored form in its station's arena, and the
/// length of its response JSON, so that an answer's buffer is sized before any
/// record is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StoredRecord {
    pub start: u32,
    pub length: u32,
}

/// The pieces of one station's records, each held once; a piece's number is its
/// index.
#[derive(Debug, Default)]
pub struct Pieces {
    bytes: Vec<u8>,
    /// Where each piece ends in `bytes`; it starts where the one before ends.
    ends: Vec<u32>,
}

impl Pieces {
    pub fn get(&self, number: u32) -> &[u8] {
        let number = number as usize;
        let start = match number {
            0 => 0,
            _ => self.ends[number - 1] as usize,
        };
        &self.bytes[start..self.ends[number] as usize]
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The bytes it holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.bytes.capacity() + 4 * self.ends.capacity()
    }
}

/// A station's pieces while it is built: each new piece gets the next number.
#[derive(Debug, Default)]
pub(crate) struct PieceTable {
    pieces: Pieces,
    /// Piece numbers, found by the hash of their bytes.
    numbers: HashTable<u32>,
    hasher: foldhash::fast::FixedState,
}

impl PieceTable {
    /// The bytes of its pieces, together.
    pub(crate) fn bytes(&self) -> usize {
        self.pieces.bytes.len()
    }

    pub(crate) fn intern(&mut self, piece: &[u8]) -> u32 {
        let hash = self.hasher.hash_one(piece);
        let pieces = &mut self.pieces;
        if let Some(&number) = self
            .numbers
            .find(hash, |&number| pieces.get(number) == piece)
        {
            return number;
        }
        let number = pieces.ends.len() as u32;
        pieces.bytes.extend_from_slice(piece);
        pieces.ends.push(pieces.bytes.len() as u32);
        let hasher = &self.hasher;
        self.numbers
            .insert_unique(hash, number, |&number| hasher.hash_one(pieces.get(number)));
        number
    }

    #[cfg(test)]
    pub(crate) fn pieces(&self) -> &Pieces {
        &self.pieces
    }

    /// The pieces, without what finding them took.
    pub(crate) fn finish(self) -> Pieces {
        let mut pieces = self.pieces;
        pieces.bytes.shrink_to_fit();
        pieces.ends.shrink_to_fit();
        pieces
    }
}

/// The bytes of a time before its time of day (`YYYY-MM-DDT`): they go with the
/// head piece, which the records of a unit on one day then share.
const DATE_BYTES: usize = 11;

/// Stores a record whose response JSON is `json`, where `time` and `value` are the
/// spans of its time and value texts (`value` empty at the end for a unit).
pub(crate) fn store(
    arena: &mut Vec<u8>,
    table: &mut PieceTable,
    json: &[u8],
    time: Range<usize>,
    value: Range<usize>,
) -> StoredRecord {
    let own_time = match time.len() > DATE_BYTES {
        true => time.start + DATE_BYTES..time.end,
        false => time,
    };
    let start = arena.len() as u32;
    let head = table.intern(&json[..own_time.start]);
    let middle = table.intern(&json[own_time.end..value.start]);
    let tail = table.intern(&json[value.end..]);
    write(arena, [head, middle, tail], &json[own_time], &json[value]);
    StoredRecord {
        start,
        length: json.len() as u32,
    }
}

/// Stores a record of another arena and piece table (a batch of the same station,
/// or the station's previous build) into this one. `numbers` maps the other
/// table's piece numbers to this one's, `u32::MAX` where not yet known; it starts
/// empty for each other table.
pub(crate) fn copy(
    arena: &mut Vec<u8>,
    table: &mut PieceTable,
    from_arena: &[u8],
    from_pieces: &Pieces,
    record: StoredRecord,
    numbers: &mut Vec<u32>,
) -> StoredRecord {
    let (pieces, time, value) = decode(from_arena, record.start);
    let pieces = pieces.map(|number| {
        let index = number as usize;
        if numbers.len() <= index {
            numbers.resize(index + 1, u32::MAX);
        }
        if numbers[index] == u32::MAX {
            numbers[index] = table.intern(from_pieces.get(number));
        }
        numbers[index]
    });
    let start = arena.len() as u32;
    write(arena, pieces, time, value);
    StoredRecord {
        start,
        length: record.length,
    }
}

fn write(arena: &mut Vec<u8>, pieces: [u32; 3], time: &[u8], value: &[u8]) {
    let mut push = |number: u32| {
        let mut encoded = [0; 5];
        let length = number.encode_var(&mut encoded);
        arena.extend_from_slice(&encoded[..length]);
    };
    for piece in pieces {
        push(piece);
    }
    push(time.len() as u32);
    arena.extend_from_slice(time);
    let mut encoded = [0; 5];
    let length = (value.len() as u32).encode_var(&mut encoded);
    arena.extend_from_slice(&encoded[..length]);
    arena.extend_from_slice(value);
}

/// A stored record's piece numbers, time text and value text.
fn decode(arena: &[u8], start: u32) -> ([u32; 3], &[u8], &[u8]) {
    let mut at = start as usize;
    let mut next = |skip: usize| {
        at += skip;
        let (number, length) = u32::decode_var(&arena[at..]).expect("a stored record");
        at += length;
        (number, at)
    };
    let pieces = [next(0).0, next(0).0, next(0).0];
    let (time_length, time_at) = next(0);
    let (value_length, value_at) = next(time_length as usize);
    let text = |at: usize, length: u32| &arena[at..at + length as usize];
    (
        pieces,
        text(time_at, time_length),
        text(value_at, value_length),
    )
}

/// One record's response JSON: its length at once, its bytes when written.
#[derive(Clone, Copy, Debug)]
pub struct RecordJson<'a> {
    arena: &'a [u8],
    pieces: &'a Pieces,
    record: StoredRecord,
}

impl<'a> RecordJson<'a> {
    pub(crate) fn new(arena: &'a [u8], pieces: &'a Pieces, record: StoredRecord) -> Self {
        RecordJson {
            arena,
            pieces,
            record,
        }
    }

    /// The JSON's length in bytes, read from the entry: sizing an answer does not
    /// touch the arena.
    pub fn len(&self) -> usize {
        self.record.length as usize
    }

    pub fn is_empty(&self) -> bool {
        self.record.length == 0
    }

    /// Appends the JSON: the head piece, the time, the middle piece, the value and
    /// the tail piece.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        let ([head, middle, tail], time, value) = decode(self.arena, self.record.start);
        out.extend_from_slice(self.pieces.get(head));
        out.extend_from_slice(time);
        out.extend_from_slice(self.pieces.get(middle));
        out.extend_from_slice(value);
        out.extend_from_slice(self.pieces.get(tail));
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut json = Vec::with_capacity(self.len());
        self.write_to(&mut json);
        json
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::record::{parse_line, Kind};

    fn stored(
        arena: &mut Vec<u8>,
        table: &mut PieceTable,
        kind: Kind,
        line: &str,
    ) -> (StoredRecord, Vec<u8>) {
        let mut json = Vec::new();
        let parsed = parse_line(kind, line, &mut json, &mut Vec::new()).unwrap();
        let record = store(arena, table, &json, parsed.time, parsed.value);
        (record, json)
    }

    const METRIC: &str = r#"{"station_id":"ST-1","slot":"s1","unit_serial":"SN-1","time_created":"2026-11-17T00:03:07.171Z","tz":"Etc/UTC","mode":"production","tags":["a"],"name":"voltage","value":3.33,"unit":"V","type":"measurement","limit_upper":3.465,"limit_lower":3.135}"#;

    #[test]
    fn records_read_back_as_their_json_and_share_their_pieces() {
        let mut arena = Vec::new();
        let mut table = PieceTable::default();
        let other_time = METRIC
            .replace("00:03:07.171Z", "00:04:00Z")
            .replace("3.33", "\"a \\\"b\\\"\"");
        let unit = r#"{"station_id":"ST-1","time_created":"2026-11-17T00:00:00Z","direction":"input","metadata":{"x":[1]}}"#;
        let lines = [
            (Kind::Metrics, METRIC),
            (Kind::Metrics, &other_time),
            (Kind::Units, unit),
        ];
        let records: Vec<_> = lines
            .iter()
            .map(|(kind, line)| stored(&mut arena, &mut table, *kind, line))
            .collect();
        for (record, json) in &records {
            let read = RecordJson::new(&arena, table.pieces(), *record);
            assert_eq!(read.len(), json.len());
            assert_eq!(
                String::from_utf8(read.to_vec()).unwrap(),
                String::from_utf8_lossy(json)
            );
        }
        // The two metrics share all three pieces; the unit (a short time, no value)
        // has a head, a middle with the rest, and the empty tail.
        assert_eq!(table.pieces().len(), 3 + 2 + 1);
        assert!(arena.len() < 60, "{} bytes", arena.len());
    }

    #[test]
    fn a_record_copied_to_another_table_reads_back_the_same() {
        let (mut arena, mut table) = (Vec::new(), PieceTable::default());
        let (first, _) = stored(&mut arena, &mut table, Kind::Metrics, METRIC);
        let (second, json) = stored(
            &mut arena,
            &mut table,
            Kind::Metrics,
            &METRIC.replace("voltage", "current"),
        );
        let (mut to_arena, mut to_table) = (Vec::new(), PieceTable::default());
        let mut numbers = Vec::new();
        let pieces = table.finish();
        let copied = copy(
            &mut to_arena,
            &mut to_table,
            &arena,
            &pieces,
            second,
            &mut numbers,
        );
        assert_eq!(
            RecordJson::new(&to_arena, to_table.pieces(), copied).to_vec(),
            json
        );
        let copied = copy(
            &mut to_arena,
            &mut to_table,
            &arena,
            &pieces,
            first,
            &mut numbers,
        );
        assert_eq!(
            RecordJson::new(&to_arena, to_table.pieces(), copied).to_vec(),
            RecordJson::new(&arena, &pieces, first).to_vec()
        );
        // Only the pieces the copies use: the shared head and tail, two middles.
        assert_eq!(to_table.pieces().len(), 4);
    }
}
