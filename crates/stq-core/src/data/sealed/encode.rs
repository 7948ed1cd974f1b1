//! Records into a block's bytes: each kind's records as columns (times as deltas,
//! pieces by reference, texts after their lengths) in a zstd frame of its own,
//! then the block's digests.

use std::cell::RefCell;

use foldhash::{HashMap, HashMapExt as _};

use super::columns::Sealable;
use super::payload::{number, signed};
use super::times::time_code;
use super::{period_start, Block, Filter, Group, Unsealed};
use crate::data::digest::{write_metric_digest, write_unit_digest, MetricRecord};
use crate::data::key::RecordKey;
use crate::data::tier::UnitEntry;
use crate::domain::time::Timestamp;

/// zstd's level: 3, its default, compressed the sealed blocks of the generated
/// floor to within a few percent of level 9, at a third of the time.
const LEVEL: i32 = 3;

thread_local! {
    /// zstd's compression context, one a thread, used again for every block.
    static COMPRESSOR: RefCell<zstd::bulk::Compressor<'static>> = RefCell::new(
        zstd::bulk::Compressor::new(LEVEL).expect("zstd makes a compression context"),
    );
}

/// The block of one period's records, each kind in key order.
pub(super) fn encode(period: i64, group: &Group<'_>, known: &HashMap<&[u8], usize>) -> Block {
    let units = frame(period, &group.units, known);
    let metrics = frame(period, &group.metrics, known);
    let split = units.len() as u32;
    let mut bytes = units;
    bytes.extend_from_slice(&metrics);
    let unit_digest = bytes.len() as u32;
    let records: Vec<(RecordKey, UnitEntry)> = (group.units.iter())
        .map(|record| (record.key, record.entry))
        .collect();
    write_unit_digest(period_start(period), &records, &mut bytes);
    let metric_digest = bytes.len() as u32;
    let records: Vec<MetricRecord<'_>> = (group.metrics.iter())
        .map(|record| (record.key, record.entry, record.parts))
        .collect();
    write_metric_digest(period_start(period), &records, &mut bytes);
    let mut files = (u32::MAX, 0);
    let orders = (group.units.iter().map(|record| record.key.load_order))
        .chain(group.metrics.iter().map(|record| record.key.load_order));
    for order in orders {
        let file = (order >> 32) as u32;
        files = (files.0.min(file), files.1.max(file));
    }
    Block {
        units: group.units.len() as u32,
        metrics: group.metrics.len() as u32,
        serials: Filter::of(group.units.iter().map(|record| record.entry.filtered())),
        names: Filter::of(group.metrics.iter().map(|record| record.entry.filtered())),
        files,
        ..Block::resident(bytes, split, unit_digest, metric_digest)
    }
}

/// One kind's records of a block as a zstd frame of their own (none when there are
/// none): the pieces of theirs the shared table does not hold, then their columns.
/// A read of one kind decompresses its frame alone.
fn frame<'a, E: Sealable>(
    period: i64,
    records: &[Unsealed<'a, E>],
    known: &HashMap<&[u8], usize>,
) -> Vec<u8> {
    if records.is_empty() {
        return Vec::new();
    }
    let mut locals: Vec<&'a [u8]> = Vec::new();
    let mut local_index: HashMap<&'a [u8], usize> = HashMap::new();
    let mut reference = |piece: &'a [u8]| -> u64 {
        if let Some(&index) = known.get(piece) {
            return (index as u64) << 1;
        }
        let index = *local_index.entry(piece).or_insert_with(|| {
            locals.push(piece);
            locals.len() - 1
        });
        ((index as u64) << 1) | 1
    };
    let mut section = Vec::new();
    write_section(period, records, &mut reference, &mut section);
    let mut payload = Vec::with_capacity(section.len() + 64);
    number(&mut payload, locals.len() as u64);
    for piece in &locals {
        number(&mut payload, piece.len() as u64);
    }
    for piece in &locals {
        payload.extend_from_slice(piece);
    }
    payload.extend_from_slice(&section);
    COMPRESSOR
        .with_borrow_mut(|compressor| compressor.compress(&payload))
        .expect("zstd compresses a buffer in memory")
}

/// Writes one kind's records of a block, in key order, as columns.
fn write_section<'a, E: Sealable>(
    period: i64,
    records: &[Unsealed<'a, E>],
    reference: &mut dyn FnMut(&'a [u8]) -> u64,
    out: &mut Vec<u8>,
) {
    number(out, records.len() as u64);
    let whole_millis = (records.iter()).all(|record| record.key.instant.nanos % 1_000_000 == 0);
    out.push(u8::from(!whole_millis));
    let unit: u64 = if whole_millis { 1_000_000 } else { 1 };
    let start = period_start(period);
    let mut previous = 0;
    for record in records {
        let offset = nanos_between(start, record.key.instant) / unit;
        number(out, offset - previous);
        previous = offset;
    }
    let mut file = 0i64;
    for record in records {
        let this = (record.key.load_order >> 32) as i64;
        signed(out, this - file);
        file = this;
    }
    let mut line = 0i64;
    for record in records {
        let this = i64::from(record.key.load_order as u32);
        signed(out, this - line);
        line = this;
    }
    let mut texts = Vec::new();
    for record in records {
        match time_code(record.key.instant, record.parts[1]) {
            Some(code) => number(out, code),
            None => {
                number(out, 0);
                number(out, record.parts[1].len() as u64);
                texts.extend_from_slice(record.parts[1]);
            }
        }
    }
    out.extend_from_slice(&texts);
    for record in records {
        number(out, record.parts[3].len() as u64);
    }
    for record in records {
        out.extend_from_slice(record.parts[3]);
    }
    for part in [0, 2, 4] {
        for record in records {
            number(out, reference(record.parts[part]));
        }
    }
    let entries: Vec<E> = records.iter().map(|record| record.entry).collect();
    let values: Vec<&[u8]> = records.iter().map(|record| record.parts[3]).collect();
    E::write(&entries, &values, out);
}

fn nanos_between(start: Timestamp, instant: Timestamp) -> u64 {
    instant.nanos_since(start) as u64
}
