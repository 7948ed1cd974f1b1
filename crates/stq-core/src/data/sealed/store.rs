//! A station's sealed tier in a store file (issue 32).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Block, Filter, Sealed, SharedPieces};
use crate::data::store::codec;
use crate::data::stored::Piece;

/// A station's sealed tier in a store file (issue 32): its blocks as they are in
/// memory, compressed, with their digests, and its shared pieces; what is derived
/// from them (counts, ends, serials) is found again when it is read back.
impl Sealed {
    /// Appends the tier's blocks and shared pieces.
    pub(crate) fn write_to(&self, out: &mut Vec<u8>) {
        codec::number(out, self.blocks.len() as u64);
        for (&period, block) in &self.blocks {
            codec::signed(out, period);
            codec::bytes(out, &block.bytes);
            for number in [
                block.split,
                block.unit_digest,
                block.metric_digest,
                block.units,
                block.metrics,
                block.files.0,
                block.files.1,
            ] {
                codec::number(out, u64::from(number));
            }
            for word in block.serials.0.iter().chain(&block.names.0) {
                out.extend_from_slice(&word.to_le_bytes());
            }
        }
        codec::bytes(out, &self.shared.bytes);
        codec::number(out, self.shared.pieces.len() as u64);
        for piece in &self.shared.pieces {
            codec::number(out, u64::from(piece.start));
            codec::number(out, u64::from(piece.length));
        }
    }

    /// A tier as [`Sealed::write_to`] wrote it.
    pub(crate) fn read_from(decoder: &mut codec::Decoder<'_>) -> Result<Sealed, codec::Corrupt> {
        let corrupt = codec::Corrupt;
        let mut blocks = BTreeMap::new();
        for _ in 0..decoder.count(8)? {
            let period = decoder.signed()?;
            let bytes: Arc<[u8]> = Arc::from(decoder.bytes()?);
            let mut numbers = [0u32; 7];
            for number in &mut numbers {
                *number = decoder.u32()?;
            }
            let [split, unit_digest, metric_digest, units, metrics, lowest, highest] = numbers;
            if !(split <= unit_digest
                && unit_digest <= metric_digest
                && metric_digest as usize <= bytes.len())
            {
                return Err(corrupt("a sealed block's parts"));
            }
            let mut words = [0u64; 8];
            for word in &mut words {
                *word = decoder.u64_le()?;
            }
            let block = Block {
                bytes,
                split,
                unit_digest,
                metric_digest,
                units,
                metrics,
                serials: Filter([words[0], words[1], words[2], words[3]]),
                names: Filter([words[4], words[5], words[6], words[7]]),
                files: (lowest, highest),
                shares: false,
            };
            if blocks.insert(period, block).is_some() {
                return Err(corrupt("a sealed period twice"));
            }
        }
        let shared_bytes = decoder.bytes()?.to_vec();
        let mut pieces = Vec::new();
        for _ in 0..decoder.count(2)? {
            let piece = Piece {
                start: decoder.u32()?,
                length: decoder.u32()?,
            };
            if u64::from(piece.start) + u64::from(piece.length) > shared_bytes.len() as u64 {
                return Err(corrupt("a shared piece"));
            }
            pieces.push(piece);
        }
        let mut sealed = Sealed {
            blocks,
            shared: Arc::new(SharedPieces {
                bytes: shared_bytes,
                pieces,
            }),
            ..Sealed::default()
        };
        sealed.count();
        sealed.settle();
        Ok(sealed)
    }
}
