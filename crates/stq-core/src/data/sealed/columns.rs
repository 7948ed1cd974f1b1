//! What each kind's entries are in a block: the columns a unit's and a metric's
//! entry write, and read back.

use super::payload::{number, Reader};
use crate::data::stored::StoredRecord;
use crate::data::symbols::Symbol;
use crate::data::tier::{MetricEntry, UnitEntry};
use crate::domain::record::{numeric, Direction};

/// The entries a block holds: the columns each kind writes and reads.
pub(super) trait Sealable: Copy + Send + Sync + std::fmt::Debug + 'static {
    /// The kind's bit in a locator's `length`.
    const KIND: u32;
    fn with_bytes(self, bytes: StoredRecord) -> Self;
    /// Its `bytes`: for a decoded record, its locator.
    fn bytes(&self) -> StoredRecord;
    /// The symbol a block's filter notes: a unit's serial, a metric's name.
    fn filtered(&self) -> Symbol;
    /// Writes the entries' columns; `values` are their value texts.
    fn write(entries: &[Self], values: &[&[u8]], out: &mut Vec<u8>);
    /// Reads `count` entries' columns, given their value texts.
    fn read(reader: &mut Reader<'_>, count: usize, values: &[&[u8]]) -> Vec<Self>;
}

impl Sealable for UnitEntry {
    const KIND: u32 = 0;

    fn with_bytes(self, bytes: StoredRecord) -> Self {
        UnitEntry { bytes, ..self }
    }

    fn bytes(&self) -> StoredRecord {
        self.bytes
    }

    fn filtered(&self) -> Symbol {
        self.unit_serial
    }

    fn write(entries: &[Self], _: &[&[u8]], out: &mut Vec<u8>) {
        let columns: [fn(&UnitEntry) -> Symbol; 5] = [
            |entry| entry.unit_type,
            |entry| entry.unit_serial,
            |entry| entry.slot,
            |entry| entry.mode,
            |entry| entry.result,
        ];
        for column in columns {
            for entry in entries {
                number(out, u64::from(column(entry).0));
            }
        }
        out.extend(entries.iter().map(|entry| entry.direction as u8));
    }

    fn read(reader: &mut Reader<'_>, count: usize, _: &[&[u8]]) -> Vec<Self> {
        let mut columns = [(); 5].map(|()| Vec::with_capacity(count));
        for column in &mut columns {
            for _ in 0..count {
                column.push(Symbol(reader.number() as u32));
            }
        }
        let directions = reader.take(count);
        (0..count)
            .map(|index| UnitEntry {
                bytes: StoredRecord {
                    start: 0,
                    length: 0,
                },
                unit_type: columns[0][index],
                unit_serial: columns[1][index],
                slot: columns[2][index],
                mode: columns[3][index],
                result: columns[4][index],
                direction: match directions[index] {
                    0 => Direction::Input,
                    _ => Direction::Output,
                },
            })
            .collect()
    }
}

impl Sealable for MetricEntry {
    const KIND: u32 = 1;

    fn with_bytes(self, bytes: StoredRecord) -> Self {
        MetricEntry { bytes, ..self }
    }

    fn bytes(&self) -> StoredRecord {
        self.bytes
    }

    fn filtered(&self) -> Symbol {
        self.name
    }

    fn write(entries: &[Self], values: &[&[u8]], out: &mut Vec<u8>) {
        let columns: [fn(&MetricEntry) -> Symbol; 4] = [
            |entry| entry.name,
            |entry| entry.slot,
            |entry| entry.unit_serial,
            |entry| entry.unit,
        ];
        for column in columns {
            for entry in entries {
                number(out, u64::from(column(entry).0));
            }
        }
        // A value is almost always the number its text says: then nothing more.
        let mut raw = Vec::new();
        for (entry, text) in entries.iter().zip(values) {
            let told = value_of(text).to_bits() == entry.value.to_bits();
            out.push(u8::from(!told));
            if !told {
                raw.extend_from_slice(&entry.value.to_bits().to_le_bytes());
            }
        }
        out.extend_from_slice(&raw);
        // Limits by their index in the block's table of distinct pairs.
        let mut table: Vec<[u64; 2]> = Vec::new();
        let mut indexes = Vec::with_capacity(entries.len());
        for entry in entries {
            let pair = [entry.limit_lower.to_bits(), entry.limit_upper.to_bits()];
            let index = match table.iter().position(|known| *known == pair) {
                Some(index) => index,
                None => {
                    table.push(pair);
                    table.len() - 1
                }
            };
            indexes.push(index);
        }
        number(out, table.len() as u64);
        for pair in &table {
            for bits in pair {
                out.extend_from_slice(&bits.to_le_bytes());
            }
        }
        for index in indexes {
            number(out, index as u64);
        }
    }

    fn read(reader: &mut Reader<'_>, count: usize, values: &[&[u8]]) -> Vec<Self> {
        let mut columns = [(); 4].map(|()| Vec::with_capacity(count));
        for column in &mut columns {
            for _ in 0..count {
                column.push(Symbol(reader.number() as u32));
            }
        }
        let told = reader.take(count).to_vec();
        let mut numbers = Vec::with_capacity(count);
        for (index, &raw) in told.iter().enumerate() {
            numbers.push(match raw {
                0 => value_of(values[index]),
                _ => reader.float(),
            });
        }
        let pairs = reader.number() as usize;
        let table: Vec<[f64; 2]> = (0..pairs)
            .map(|_| [reader.float(), reader.float()])
            .collect();
        (0..count)
            .map(|index| {
                let [limit_lower, limit_upper] = table[reader.number() as usize];
                MetricEntry {
                    bytes: StoredRecord {
                        start: 0,
                        length: 0,
                    },
                    name: columns[0][index],
                    slot: columns[1][index],
                    unit_serial: columns[2][index],
                    unit: columns[3][index],
                    value: numbers[index],
                    limit_lower,
                    limit_upper,
                }
            })
            .collect()
    }
}

/// The number a value text says, as the loader reads it (`NaN` when none).
fn value_of(text: &[u8]) -> f64 {
    std::str::from_utf8(text)
        .ok()
        .and_then(numeric)
        .unwrap_or(f64::NAN)
}
