//! A record's stored form: its response JSON cut into five parts, three of them
//! pieces it shares with other records of its station and two texts of its own.
//!
//! Records of one unit repeat most of their JSON: the station, slot, serial and
//! date before the time; the zone, mode, tags and metric name between time and
//! value; the metric's unit, type and limits after it. So a station keeps each
//! distinct piece once ([`Pieces`]), and a record keeps where its three pieces
//! lie and its own texts: the time after its date (`HH:MM:SS.sssZ`) and the
//! value. That is about a tenth of the JSON (BENCHMARKS.md). A response
//! copies the five parts in order ([`RecordJson`]); nothing serializes a record
//! again, and nothing but the arena and the pieces is read to send it.
//!
//! In the arena a record is LEB128 numbers and two texts: the start and length of
//! its head, middle and tail pieces, then the time text's length and bytes, then
//! the value's. A piece is named by where it lies, not by a number to look up in a
//! table: one dependent read fewer between a record and its bytes. Answers of many
//! records still read two or three places per record; the envelope asks for them a
//! few records ahead ([`RecordJson::prefetch_stored`]), which won back most of what
//! the pieces cost such answers (BENCHMARKS.md).

use std::hash::BuildHasher as _;
use std::ops::Range;

use bytes::Bytes;
use hashbrown::HashTable;
use integer_encoding::VarInt as _;

/// Where a record is: the start of its stored form in its station's arena, and the
/// length of its response JSON, so that an answer's buffer is sized before any
/// record is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct StoredRecord {
    /// Where its stored form starts in its station's arena.
    pub(crate) start: u32,
    /// The length of its response JSON, in bytes.
    pub(crate) length: u32,
}

/// Where a piece lies in its station's [`Pieces`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Piece {
    pub(crate) start: u32,
    pub(crate) length: u32,
}

/// The pieces of one station's records, each held once, one after the other.
/// Shared, not copied, by the generations that keep the station's records as
/// they are.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pieces {
    bytes: Bytes,
}

impl Pieces {
    pub(crate) fn get(&self, piece: Piece) -> &[u8] {
        piece_of(&self.bytes, piece)
    }

    /// The bytes it holds on the heap.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Its pieces' bytes, one after the other, as a store file keeps them.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Pieces as [`Pieces::as_bytes`] gave them.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Pieces {
        Pieces {
            bytes: Bytes::copy_from_slice(bytes),
        }
    }
}

fn piece_of(bytes: &[u8], piece: Piece) -> &[u8] {
    let start = piece.start as usize;
    &bytes[start..start + piece.length as usize]
}

/// A station's pieces while it is built: a new piece goes after the others.
#[derive(Debug, Default)]
pub(crate) struct PieceTable {
    bytes: Vec<u8>,
    /// The pieces, found by the hash of their bytes.
    known: HashTable<Piece>,
    hasher: foldhash::fast::FixedState,
}

impl PieceTable {
    /// The bytes of its pieces, together.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes.len()
    }

    /// How many pieces it holds.
    pub(crate) fn len(&self) -> usize {
        self.known.len()
    }

    pub(crate) fn intern(&mut self, bytes: &[u8]) -> Piece {
        let hash = self.hasher.hash_one(bytes);
        let held = &mut self.bytes;
        if let Some(&piece) = self
            .known
            .find(hash, |&piece| piece_of(held, piece) == bytes)
        {
            return piece;
        }
        let piece = Piece {
            start: held.len() as u32,
            length: bytes.len() as u32,
        };
        held.extend_from_slice(bytes);
        let hasher = &self.hasher;
        self.known
            .insert_unique(hash, piece, |&piece| hasher.hash_one(piece_of(held, piece)));
        piece
    }

    /// A table that goes on from a finished station's `pieces`, where each piece
    /// keeps its place, so the station's stored records stay valid as they are; the
    /// pieces `records` (stored in `arena`) use are found again, so a new record
    /// shares them instead of adding a copy.
    pub(crate) fn continuing(
        pieces: &Pieces,
        arena: &[u8],
        records: impl Iterator<Item = StoredRecord>,
    ) -> PieceTable {
        let mut table = PieceTable {
            bytes: pieces.bytes.to_vec(),
            ..PieceTable::default()
        };
        for record in records {
            for piece in decode(arena, record.start).0 {
                let held = &table.bytes;
                let hash = table.hasher.hash_one(piece_of(held, piece));
                let hasher = &table.hasher;
                if table
                    .known
                    .find(hash, |&known| {
                        piece_of(held, known) == piece_of(held, piece)
                    })
                    .is_none()
                {
                    table.known.insert_unique(hash, piece, |&known| {
                        hasher.hash_one(piece_of(held, known))
                    });
                }
            }
        }
        table
    }

    /// A copy of its pieces as they are now.
    #[cfg(test)]
    pub(crate) fn pieces(&self) -> Pieces {
        Pieces {
            bytes: Bytes::copy_from_slice(&self.bytes),
        }
    }

    /// The pieces, without what finding them took.
    pub(crate) fn finish(self) -> Pieces {
        Pieces {
            bytes: Bytes::from(self.bytes.into_boxed_slice()),
        }
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

/// Stores a record given as its JSON's five parts (head piece, time, middle
/// piece, value, tail piece), as a sealed block gives it back.
pub(crate) fn store_parts(
    arena: &mut Vec<u8>,
    table: &mut PieceTable,
    [head, time, middle, value, tail]: [&[u8]; 5],
) -> StoredRecord {
    let start = arena.len() as u32;
    let pieces = [table.intern(head), table.intern(middle), table.intern(tail)];
    write(arena, pieces, time, value);
    StoredRecord {
        start,
        length: (head.len() + time.len() + middle.len() + value.len() + tail.len()) as u32,
    }
}

/// Stores a record of another arena and piece table (a batch of the same station,
/// or the station's previous build) into this one. `known` maps the other table's
/// pieces to this one's; it starts empty for each other table.
pub(crate) fn copy(
    arena: &mut Vec<u8>,
    table: &mut PieceTable,
    from_arena: &[u8],
    from_pieces: &Pieces,
    record: StoredRecord,
    known: &mut foldhash::HashMap<Piece, Piece>,
) -> StoredRecord {
    let (pieces, time, value) = decode(from_arena, record.start);
    let pieces = pieces.map(|piece| {
        *known
            .entry(piece)
            .or_insert_with(|| table.intern(from_pieces.get(piece)))
    });
    let start = arena.len() as u32;
    write(arena, pieces, time, value);
    StoredRecord {
        start,
        length: record.length,
    }
}

/// Appends a stored record: each piece's start and length, then the time's length
/// and bytes, then the value's.
fn write(arena: &mut Vec<u8>, pieces: [Piece; 3], time: &[u8], value: &[u8]) {
    for piece in pieces {
        push_number(arena, piece.start);
        push_number(arena, piece.length);
    }
    push_number(arena, time.len() as u32);
    arena.extend_from_slice(time);
    push_number(arena, value.len() as u32);
    arena.extend_from_slice(value);
}

fn push_number(arena: &mut Vec<u8>, number: u32) {
    let mut encoded = [0; 5];
    let length = number.encode_var(&mut encoded);
    arena.extend_from_slice(&encoded[..length]);
}

/// A stored record's pieces, time text and value text.
fn decode(arena: &[u8], start: u32) -> ([Piece; 3], &[u8], &[u8]) {
    let mut reader = Reader {
        bytes: arena,
        at: start as usize,
    };
    let pieces = [reader.piece(), reader.piece(), reader.piece()];
    let time = reader.text();
    let value = reader.text();
    (pieces, time, value)
}

/// Reads a stored record from its start.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn number(&mut self) -> u32 {
        let (number, length) = read_number(&self.bytes[self.at..]);
        self.at += length;
        number
    }

    fn piece(&mut self) -> Piece {
        Piece {
            start: self.number(),
            length: self.number(),
        }
    }

    fn text(&mut self) -> &'a [u8] {
        let length = self.number() as usize;
        let text = &self.bytes[self.at..self.at + length];
        self.at += length;
        text
    }
}

/// A LEB128 number and its length in bytes.
///
/// integer-encoding writes them. With its generic `decode_var` (through `u64`,
/// checking for overflow at each byte), reading stored records was a third of the
/// instructions of an answer of a thousand records; reading the numbers here took
/// Q2 from 1.64 M to 1.33 M instructions a
/// request, and Q2 and Q3 5% faster under load (BENCHMARKS.md). A stored
/// record holds only numbers this crate wrote, each at most five bytes.
#[inline]
fn read_number(bytes: &[u8]) -> (u32, usize) {
    let mut number = 0;
    for (index, &byte) in bytes.iter().take(5).enumerate() {
        number |= u32::from(byte & 0x7f) << (7 * index);
        if byte < 0x80 {
            return (number, index + 1);
        }
    }
    panic!("a stored record's number ends within five bytes")
}

/// Hints the CPU to load the cache line of `bytes[at]`, if there is such a byte.
#[inline]
fn prefetch(bytes: &[u8], at: u32) {
    if let Some(byte) = bytes.get(at as usize) {
        prefetch_value(byte);
    }
}

/// Hints the CPU to load the cache line where `value` starts; nothing where there
/// is no such hint. Taking the reference reads nothing from it.
#[inline]
pub(crate) fn prefetch_value<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch only hints; it never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(value).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// A record's response JSON as the five parts it is copied from, located.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Parts<'a> {
    head: &'a [u8],
    time: &'a [u8],
    middle: &'a [u8],
    value: &'a [u8],
    tail: &'a [u8],
}

impl<'a> Parts<'a> {
    /// The five parts in the order they are written: the head piece (which
    /// ends inside `time_created`, after its date), the record's own time of
    /// day, the middle piece (from the closing quote of `time_created` to just
    /// after the opening quote of `value`; to the end for a unit), the record's
    /// own value text (JSON-escaped; empty for a unit) and the tail piece (from
    /// the closing quote of `value`; empty for a unit).
    pub(crate) fn all(&self) -> [&'a [u8]; 5] {
        [self.head, self.time, self.middle, self.value, self.tail]
    }

    /// Appends the JSON.
    pub(crate) fn write_to(&self, out: &mut Vec<u8>) {
        for part in [self.head, self.time, self.middle, self.value, self.tail] {
            out.extend_from_slice(part);
        }
    }

    /// Whether the head, middle and tail are pieces the record's station shares
    /// with its other records (a hot record's), rather than the head being the
    /// record's whole JSON and the rest empty (a sealed record's, written out by
    /// its scan). A stored record's middle piece always holds its `tz` field.
    pub(crate) fn shares_pieces(&self) -> bool {
        !self.middle.is_empty()
    }

    /// Asks the CPU for the head and middle pieces, for a record written a few
    /// records later (the tail, a metric's unit and limits, is shared by many
    /// records and warm; the time and value lie in the stored form, read already).
    pub(crate) fn prefetch(&self) {
        prefetch(self.head, 0);
        prefetch(self.middle, 0);
    }
}

/// One record's response JSON: its length at once, its bytes when written.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecordJson<'a> {
    form: Form<'a>,
}

/// Where a record's JSON is: a hot record's stored form and its station's pieces,
/// or, for a sealed record, the JSON itself, which its scan wrote out.
#[derive(Clone, Copy, Debug)]
enum Form<'a> {
    Stored {
        arena: &'a [u8],
        pieces: &'a Pieces,
        record: StoredRecord,
    },
    Whole(&'a [u8]),
}

impl<'a> RecordJson<'a> {
    pub(crate) fn new(arena: &'a [u8], pieces: &'a Pieces, record: StoredRecord) -> Self {
        RecordJson {
            form: Form::Stored {
                arena,
                pieces,
                record,
            },
        }
    }

    /// A record's JSON that is already whole.
    pub(crate) fn whole(json: &'a [u8]) -> Self {
        RecordJson {
            form: Form::Whole(json),
        }
    }

    /// The JSON's length in bytes, read from the entry: sizing an answer does not
    /// touch the arena.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        match self.form {
            Form::Stored { record, .. } => record.length as usize,
            Form::Whole(json) => json.len(),
        }
    }

    /// Appends the JSON: the head piece, the time, the middle piece, the value and
    /// the tail piece.
    pub(crate) fn write_to(&self, out: &mut Vec<u8>) {
        self.parts().write_to(out);
    }

    /// Reads the stored form: where the five parts lie, none of them read yet.
    pub(crate) fn parts(&self) -> Parts<'a> {
        match self.form {
            Form::Stored {
                arena,
                pieces,
                record,
            } => {
                let ([head, middle, tail], time, value) = decode(arena, record.start);
                Parts {
                    head: pieces.get(head),
                    time,
                    middle: pieces.get(middle),
                    value,
                    tail: pieces.get(tail),
                }
            }
            Form::Whole(json) => Parts {
                head: json,
                time: &[],
                middle: &[],
                value: &[],
                tail: &[],
            },
        }
    }

    /// Asks the CPU for the stored form now, for a record written a few records
    /// later: an answer of many records otherwise waits on each one's cache miss
    /// in turn.
    pub(crate) fn prefetch_stored(&self) {
        match self.form {
            Form::Stored { arena, record, .. } => prefetch(arena, record.start),
            Form::Whole(json) => prefetch(json, 0),
        }
    }

    #[cfg(test)]
    pub(crate) fn to_vec(self) -> Vec<u8> {
        let mut json = Vec::with_capacity(self.len());
        self.write_to(&mut json);
        json
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::record::{parse_line, Kind};

    proptest::proptest! {
        /// Issue 10: the reader of stored numbers reads what integer-encoding wrote,
        /// and where it ends, with whatever follows it.
        #[test]
        fn issue_10_numbers_read_back_as_integer_encoding_wrote_them(
            number in proptest::prop_oneof![
                proptest::sample::select(vec![0, 127, 128, 16_383, 16_384, u32::MAX]),
                proptest::num::u32::ANY,
            ],
            after in proptest::collection::vec(proptest::num::u8::ANY, 0..6),
        ) {
            let mut bytes = Vec::new();
            push_number(&mut bytes, number);
            let length = bytes.len();
            bytes.extend_from_slice(&after);
            proptest::prop_assert_eq!(read_number(&bytes), (number, length));
        }
    }

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
            let pieces = table.pieces();
            let read = RecordJson::new(&arena, &pieces, *record);
            assert_eq!(read.len(), json.len());
            assert_eq!(
                String::from_utf8(read.to_vec()).unwrap(),
                String::from_utf8_lossy(json)
            );
        }
        // The two metrics share all three pieces; the unit (a short time, no value)
        // has a head, a middle with the rest, and the empty tail.
        assert_eq!(table.len(), 3 + 2 + 1);
        assert!(arena.len() < 80, "{} bytes", arena.len());
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
        let mut known = foldhash::HashMap::default();
        let pieces = table.finish();
        let copied = copy(
            &mut to_arena,
            &mut to_table,
            &arena,
            &pieces,
            second,
            &mut known,
        );
        assert_eq!(
            RecordJson::new(&to_arena, &to_table.pieces(), copied).to_vec(),
            json
        );
        let copied = copy(
            &mut to_arena,
            &mut to_table,
            &arena,
            &pieces,
            first,
            &mut known,
        );
        assert_eq!(
            RecordJson::new(&to_arena, &to_table.pieces(), copied).to_vec(),
            RecordJson::new(&arena, &pieces, first).to_vec()
        );
        // Only the pieces the copies use: the shared head and tail, two middles.
        assert_eq!(to_table.len(), 4);
    }
}
