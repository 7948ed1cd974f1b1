//! The byte encoding of store files: LEB128 numbers (zigzag for signed ones),
//! length-prefixed byte strings, and a reader that checks every length against
//! what is there, so that a file that passed its checksum but is not what this
//! build writes is refused ([`Corrupt`]) instead of read out of bounds.

use integer_encoding::VarInt as _;

/// A store file that does not read as this build writes it.
#[derive(Debug, thiserror::Error)]
#[error("malformed store data: {0}")]
pub(crate) struct Corrupt(pub(crate) &'static str);

pub(crate) fn number(out: &mut Vec<u8>, value: u64) {
    let mut encoded = [0; 10];
    let length = value.encode_var(&mut encoded);
    out.extend_from_slice(&encoded[..length]);
}

pub(crate) fn signed(out: &mut Vec<u8>, value: i64) {
    number(out, ((value << 1) ^ (value >> 63)) as u64);
}

/// A byte string: its length, then its bytes.
pub(crate) fn bytes(out: &mut Vec<u8>, value: &[u8]) {
    number(out, value.len() as u64);
    out.extend_from_slice(value);
}

/// Reads what the functions above wrote, from the front.
#[derive(Debug)]
pub(crate) struct Decoder<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Decoder<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Decoder<'a> {
        Decoder { bytes, at: 0 }
    }

    pub(crate) fn number(&mut self) -> Result<u64, Corrupt> {
        let (value, length) =
            u64::decode_var(&self.bytes[self.at..]).ok_or(Corrupt("a number runs off the end"))?;
        self.at += length;
        Ok(value)
    }

    /// A number that must fit in a `u32`.
    pub(crate) fn u32(&mut self) -> Result<u32, Corrupt> {
        u32::try_from(self.number()?).map_err(|_| Corrupt("a number is out of range"))
    }

    pub(crate) fn signed(&mut self) -> Result<i64, Corrupt> {
        let value = self.number()?;
        Ok(((value >> 1) as i64) ^ -((value & 1) as i64))
    }

    /// The next `count` bytes.
    pub(crate) fn take(&mut self, count: usize) -> Result<&'a [u8], Corrupt> {
        let end = (self.at.checked_add(count))
            .filter(|end| *end <= self.bytes.len())
            .ok_or(Corrupt("a field runs off the end"))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    /// A byte string [`bytes`] wrote.
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], Corrupt> {
        let length = usize::try_from(self.number()?).map_err(|_| Corrupt("a length"))?;
        self.take(length)
    }

    /// A string [`bytes`] wrote.
    pub(crate) fn text(&mut self) -> Result<&'a str, Corrupt> {
        std::str::from_utf8(self.bytes()?).map_err(|_| Corrupt("a text is not UTF-8"))
    }

    pub(crate) fn u64_le(&mut self) -> Result<u64, Corrupt> {
        let bytes: [u8; 8] = self.take(8)?.try_into().expect("eight bytes");
        Ok(u64::from_le_bytes(bytes))
    }

    /// A count of items each at least `least` bytes long, checked against what is
    /// left, so that a wrong count does not reserve memory for nothing.
    pub(crate) fn count(&mut self, least: usize) -> Result<usize, Corrupt> {
        let count = usize::try_from(self.number()?).map_err(|_| Corrupt("a count"))?;
        match count.saturating_mul(least.max(1)) <= self.bytes.len() - self.at {
            true => Ok(count),
            false => Err(Corrupt("a count exceeds the data")),
        }
    }

    /// How many bytes were read.
    pub(crate) fn position(&self) -> usize {
        self.at
    }

    /// Whether every byte was read.
    pub(crate) fn finished(&self) -> Result<(), Corrupt> {
        match self.at == self.bytes.len() {
            true => Ok(()),
            false => Err(Corrupt("bytes after the end")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_32_what_is_written_reads_back_and_a_short_read_is_refused() {
        let mut out = Vec::new();
        number(&mut out, u64::MAX);
        signed(&mut out, -5);
        bytes(&mut out, b"abc");
        let mut decoder = Decoder::new(&out);
        assert_eq!(decoder.number().unwrap(), u64::MAX);
        assert_eq!(decoder.signed().unwrap(), -5);
        assert_eq!(decoder.bytes().unwrap(), b"abc");
        decoder.finished().unwrap();
        let mut short = Decoder::new(&out[..out.len() - 1]);
        short.number().unwrap();
        short.signed().unwrap();
        assert!(short.bytes().is_err());
    }
}
