//! A block's payload as numbers and bytes: the variable-length integers its
//! columns are written in, and the reader that takes them back from the front.

use integer_encoding::VarInt as _;

use super::{Source, Span};

/// Appends `value` as a variable-length integer.
pub(super) fn number(out: &mut Vec<u8>, value: u64) {
    let mut encoded = [0; 10];
    let length = value.encode_var(&mut encoded);
    out.extend_from_slice(&encoded[..length]);
}

/// Appends `value` zigzagged, so that small negative numbers stay short.
pub(super) fn signed(out: &mut Vec<u8>, value: i64) {
    number(out, ((value << 1) ^ (value >> 63)) as u64);
}

/// Reads a block's payload from the front.
#[derive(Debug)]
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader of `bytes` from their first.
    pub(super) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    pub(super) fn number(&mut self) -> u64 {
        let (value, length) =
            u64::decode_var(&self.bytes[self.at..]).expect("a sealed block's numbers are whole");
        self.at += length;
        value
    }

    pub(super) fn signed(&mut self) -> i64 {
        let value = self.number();
        ((value >> 1) as i64) ^ -((value & 1) as i64)
    }

    pub(super) fn take(&mut self, count: usize) -> &[u8] {
        let taken = &self.bytes[self.at..self.at + count];
        self.at += count;
        taken
    }

    pub(super) fn float(&mut self) -> f64 {
        let bytes: [u8; 8] = self.take(8).try_into().expect("eight bytes");
        f64::from_bits(u64::from_le_bytes(bytes))
    }

    /// The span of the next `length` bytes of the payload.
    pub(super) fn span(&mut self, length: usize) -> Span {
        let span = Span {
            source: Source::Payload,
            start: self.at as u32,
            length: length as u32,
        };
        self.at += length;
        span
    }
}
