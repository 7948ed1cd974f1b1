//! A block's bytes back into records: its frame of one kind decompressed, and
//! its columns read into keys, entries and, when asked for, where each record's
//! JSON parts are.

use std::cell::RefCell;
use std::sync::Arc;

use super::columns::Sealable;
use super::payload::Reader;
use super::times::write_coded_time;
use super::{
    locator, period_start, Block, Decoded, Part, Sealed, SharedPieces, Source, Span, SEALED,
};
use crate::data::fault::StorageFault;
use crate::data::key::RecordKey;
use crate::domain::time::Timestamp;

thread_local! {
    /// zstd's contexts, one of each a thread, used again for every block: making
    /// a decompression context for each block decoded was a quarter of the CPU of
    /// a summary of a hundred stations' history (BENCHMARKS.md).
    static DECOMPRESSOR: RefCell<zstd::bulk::Decompressor<'static>> = RefCell::new(
        zstd::bulk::Decompressor::new().expect("zstd makes a decompression context"),
    );
}

/// A block's frame decompressed, with this thread's context. A frame made by
/// [`frame`] says how long it is decompressed.
fn decompress(frame: &[u8]) -> Vec<u8> {
    let length = zstd::zstd_safe::get_frame_content_size(frame)
        .ok()
        .flatten()
        .expect("a sealed block's frame says its length");
    DECOMPRESSOR
        .with_borrow_mut(|decompressor| decompressor.decompress(frame, length as usize))
        .expect("a sealed block decompresses as it was made")
}

impl Sealed {
    /// Decompresses `block` (of `period`) and reads its records of kind `E`; their
    /// JSON's parts too when `json`.
    pub(super) fn decode<E: Sealable>(
        &self,
        period: i64,
        block: &Block,
        json: bool,
    ) -> Result<Decoded<E>, StorageFault> {
        let count = match E::KIND {
            0 => block.units,
            _ => block.metrics,
        } as usize;
        let mut decoded = Decoded {
            keys: Vec::new(),
            entries: Vec::new(),
            spans: Vec::new(),
            shared: Arc::default(),
            payload: Vec::new(),
            times: Vec::new(),
        };
        if count == 0 {
            return Ok(decoded);
        }
        decoded.shared = self.shared()?;
        let frame = block.read(match E::KIND {
            0 => Part::Units,
            _ => Part::Metrics,
        })?;
        decoded.payload = decompress(&frame);
        let payload = &decoded.payload;
        let mut reader = Reader::new(payload);
        let locals: Vec<Span> = read_locals(&mut reader);
        reader.number(); // the count, which the block says too
        decoded.keys = read_keys(&mut reader, count, period_start(period));
        let times = read_times(&mut reader, count);
        let values = read_values(&mut reader, count);
        let pieces = read_pieces(&mut reader, count, &locals, &decoded.shared);
        let value_texts: Vec<&[u8]> = values
            .iter()
            .map(|span| &payload[span.start as usize..(span.start + span.length) as usize])
            .collect();
        let entries = E::read(&mut reader, count, &value_texts);
        decoded.entries = self.located(entries, period);
        if json {
            (decoded.spans, decoded.times) = json_spans(&decoded.keys, &times, &values, &pieces);
        }
        Ok(decoded)
    }

    /// `entries` (of the block of `period`, in order), each with the locator of
    /// its record: its block, counted from the tier's first, and its kind and
    /// index in the block.
    fn located<E: Sealable>(&self, entries: Vec<E>, period: i64) -> Vec<E> {
        let block_number = SEALED | (period - self.base) as u32;
        (entries.into_iter().enumerate())
            .map(|(index, entry)| entry.with_bytes(locator::<E>(block_number, index as u32)))
            .collect()
    }
}

/// Each record's three pieces (head, middle and tail), a column each: a reference
/// to one of the tier's `shared` pieces (even) or of the block's own `locals` (odd).
fn read_pieces(
    reader: &mut Reader<'_>,
    count: usize,
    locals: &[Span],
    shared: &SharedPieces,
) -> [Vec<Span>; 3] {
    let mut pieces = [(); 3].map(|()| Vec::with_capacity(count));
    for column in &mut pieces {
        for _ in 0..count {
            let reference = reader.number() as usize;
            column.push(match reference & 1 {
                0 => {
                    let piece = shared.pieces[reference >> 1];
                    Span {
                        source: Source::Shared,
                        start: piece.start,
                        length: piece.length,
                    }
                }
                _ => locals[reference >> 1],
            });
        }
    }
    pieces
}

/// Each record's key: its instant (from the period's `start`, in milliseconds or
/// nanoseconds as the block says), then its file and its line, each a column of
/// differences.
fn read_keys(reader: &mut Reader<'_>, count: usize, start: Timestamp) -> Vec<RecordKey> {
    let nanos_unit = match reader.take(1)[0] {
        0 => 1_000_000,
        _ => 1,
    };
    let mut offset: u64 = 0;
    let mut instants = Vec::with_capacity(count);
    for _ in 0..count {
        offset += reader.number();
        instants.push(add_nanos(start, offset * nanos_unit));
    }
    let (mut file, mut line) = (0i64, 0i64);
    let mut files = Vec::with_capacity(count);
    for _ in 0..count {
        file += reader.signed();
        files.push(file);
    }
    let mut keys = Vec::with_capacity(count);
    for (index, instant) in instants.iter().enumerate() {
        line += reader.signed();
        keys.push(RecordKey {
            instant: *instant,
            load_order: ((files[index] as u64) << 32) | (line as u64 & 0xffff_ffff),
        });
    }
    keys
}

/// Each record's time: its code ([`super::times`]; 0 when its text is kept) and
/// where its kept text is (nothing, when it has a code).
fn read_times(reader: &mut Reader<'_>, count: usize) -> Vec<(u64, Span)> {
    let mut times: Vec<(u64, usize)> = Vec::with_capacity(count);
    for _ in 0..count {
        let code = reader.number();
        let length = match code {
            0 => reader.number() as usize,
            _ => 0,
        };
        times.push((code, length));
    }
    (times.into_iter())
        .map(|(code, length)| (code, reader.span(length)))
        .collect()
}

/// Where each record's value text is: their lengths, then the texts.
fn read_values(reader: &mut Reader<'_>, count: usize) -> Vec<Span> {
    let lengths: Vec<usize> = (0..count).map(|_| reader.number() as usize).collect();
    lengths.iter().map(|&length| reader.span(length)).collect()
}

/// Where each record's five JSON parts are, and the time texts made again from
/// their codes, which the parts of the coded times point into.
fn json_spans(
    keys: &[RecordKey],
    times: &[(u64, Span)],
    values: &[Span],
    pieces: &[Vec<Span>; 3],
) -> (Vec<[Span; 5]>, Vec<u8>) {
    let mut generated = Vec::new();
    let spans = (0..keys.len())
        .map(|index| {
            let time = match times[index] {
                (0, text) => text,
                (code, _) => {
                    let start = generated.len() as u32;
                    write_coded_time(&mut generated, keys[index].instant, code);
                    Span {
                        source: Source::Times,
                        start,
                        length: generated.len() as u32 - start,
                    }
                }
            };
            [
                pieces[0][index],
                time,
                pieces[1][index],
                values[index],
                pieces[2][index],
            ]
        })
        .collect();
    (spans, generated)
}

fn add_nanos(start: Timestamp, nanos: u64) -> Timestamp {
    Timestamp {
        seconds: start.seconds + (nanos / 1_000_000_000) as i64,
        nanos: (nanos % 1_000_000_000) as u32,
    }
}

fn read_locals(reader: &mut Reader<'_>) -> Vec<Span> {
    let count = reader.number() as usize;
    let lengths: Vec<usize> = (0..count).map(|_| reader.number() as usize).collect();
    lengths
        .into_iter()
        .map(|length| reader.span(length))
        .collect()
}
