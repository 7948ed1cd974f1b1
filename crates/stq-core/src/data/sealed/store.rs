//! A station's sealed tier in a store file.
//!
//! The file: the store's magic, each block's bytes one after the other (as they
//! are in memory: its two frames and two digests), then the index, then the
//! index's offset (8 bytes, little-endian). The index holds each block's header
//! (its period, where its bytes are, its parts' bounds and checksums, counts,
//! filters and files), the tier's shared pieces, and what is derived from its
//! blocks (its first and last record, its outputs' serials), so that a start
//! reads the index and no block: blocks are read when a query needs them
//! ([`super::body`]).
//!
//! The index starts with [`ROWS`], then the count of blocks (u64, little-endian)
//! and their headers as rows of a fixed length, read where they lie in the mapped
//! file ([`super::headers`]). An index of the older format starts with the count
//! as a LEB128 number and each header in LEB128 numbers; it is still read, its
//! headers into the heap, and the store's first write replaces the file.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use itertools::Itertools as _;
use xxhash_rust::xxh3::xxh3_64;

use super::body::{BlockBody, IndexPart};
use super::cache::BlockCache;
use super::headers::{write_row, Blocks, Rows, ROW};
use super::{Block, Filter, Part, Sealed, SerialList, SharedPieces, StoreFile};
use crate::data::codec;
use crate::data::fault::StorageFault;
use crate::data::key::RecordKey;
use crate::data::mapped::Mapped;
use crate::data::stored::{Piece, StoredRecord};
use crate::data::symbols::Symbol;
use crate::domain::time::Timestamp;

/// What starts an index of rows: no index of the format before starts so, whose
/// first bytes are a LEB128 number written in the fewest bytes (`0x80 0x00` is
/// a zero written in two).
const ROWS: [u8; 8] = [0x80, 0x00, b'R', b'O', b'W', b'S', 0, 1];

/// Where a tier's parts are in the store file [`Sealed::file`] made of it: each
/// block's bytes, in period order, its rows (where they start, and a copy of
/// them), and the regions of its shared pieces and its serial list.
#[derive(Debug)]
pub(crate) struct Layout {
    blocks: Vec<u64>,
    rows: (usize, Vec<u8>),
    shared: Region,
    serials: Region,
}

/// A region of a store file: where it starts, its length and its XXH3-64.
pub(crate) type Region = (u64, u32, u64);

/// Where the index of a sealed store file's `bytes` (the whole file) begins: its
/// last eight bytes say, after the magic's `skip` bytes.
fn index_at(bytes: &[u8], skip: usize) -> Result<usize, codec::Corrupt> {
    let corrupt = codec::Corrupt;
    let split = (bytes.len().checked_sub(8)).ok_or(corrupt("a sealed file's end"))?;
    let index = u64::from_le_bytes(bytes[split..].try_into().expect("8 bytes"));
    usize::try_from(index)
        .ok()
        .filter(|index| (skip..=split).contains(index))
        .ok_or(corrupt("a sealed file's index"))
}

/// A part of a tier's index that stays in its file (`what`: its shared pieces, its
/// serial list), read by `read` from `decoder` over `bytes` (the index, at `index`
/// in the file) once to check it: where it is in the file, its length and its
/// XXH3-64.
fn stored_part(
    decoder: &mut codec::Decoder<'_>,
    bytes: &[u8],
    index: usize,
    what: &'static str,
    read: impl FnOnce(&mut codec::Decoder<'_>) -> Result<(), codec::Corrupt>,
) -> Result<Region, codec::Corrupt> {
    let start = decoder.position();
    read(decoder)?;
    let region = &bytes[start..decoder.position()];
    let length = u32::try_from(region.len()).map_err(|_| codec::Corrupt(what))?;
    Ok(((index + start) as u64, length, xxh3_64(region)))
}

/// The region of a sealed store file's `bytes` (the whole file) that
/// [`Sealed::read_index`] reads: from its index to its end.
pub(crate) fn index_region(bytes: &[u8], skip: usize) -> Result<Region, codec::Corrupt> {
    let index = index_at(bytes, skip)?;
    let region = &bytes[index..];
    let length =
        u32::try_from(region.len()).map_err(|_| codec::Corrupt("a sealed file's index"))?;
    Ok((index as u64, length, xxh3_64(region)))
}

fn write_serials(serials: &[Symbol], out: &mut Vec<u8>) {
    codec::number(out, serials.len() as u64);
    for serial in serials {
        codec::number(out, u64::from(serial.0));
    }
}

fn read_serials_from(decoder: &mut codec::Decoder<'_>) -> Result<SerialList, codec::Corrupt> {
    (0..decoder.count(1)?)
        .map(|_| decoder.u32().map(Symbol))
        .collect()
}

/// A serial list [`write_serials`] wrote, alone in `bytes`.
pub(super) fn read_serials(bytes: &[u8]) -> Result<SerialList, codec::Corrupt> {
    let mut decoder = codec::Decoder::new(bytes);
    let serials = read_serials_from(&mut decoder)?;
    decoder.finished()?;
    Ok(serials)
}

impl SharedPieces {
    /// Its bytes, then each piece's start and length.
    fn write_to(&self, out: &mut Vec<u8>) {
        codec::bytes(out, &self.bytes);
        codec::number(out, self.pieces.len() as u64);
        for piece in &self.pieces {
            codec::number(out, u64::from(piece.start));
            codec::number(out, u64::from(piece.length));
        }
    }

    /// What [`SharedPieces::write_to`] wrote, checked.
    fn read_from(decoder: &mut codec::Decoder<'_>) -> Result<SharedPieces, codec::Corrupt> {
        let bytes = decoder.bytes()?.to_vec();
        let mut pieces = Vec::new();
        for _ in 0..decoder.count(2)? {
            let piece = Piece {
                start: decoder.u32()?,
                length: decoder.u32()?,
            };
            if u64::from(piece.start) + u64::from(piece.length) > bytes.len() as u64 {
                return Err(codec::Corrupt("a shared piece"));
            }
            pieces.push(piece);
        }
        Ok(SharedPieces { bytes, pieces })
    }

    /// The pieces of a region [`SharedPieces::write_to`] wrote.
    pub(super) fn read(bytes: &[u8]) -> Result<SharedPieces, codec::Corrupt> {
        let mut decoder = codec::Decoder::new(bytes);
        let pieces = SharedPieces::read_from(&mut decoder)?;
        decoder.finished()?;
        Ok(pieces)
    }
}

impl Sealed {
    /// The tier as a store file after `magic`, and where its parts are in it; a
    /// block in a store file that cannot be read is that file's fault.
    pub(crate) fn file(&self, magic: &[u8]) -> Result<(Vec<u8>, Layout), StorageFault> {
        let mut out = magic.to_vec();
        let mut offsets = Vec::with_capacity(self.blocks.len());
        for block in self.blocks.iter() {
            let (_, block) = block?;
            offsets.push(out.len() as u64);
            for part in [
                Part::Units,
                Part::Metrics,
                Part::UnitDigest,
                Part::MetricDigest,
            ] {
                out.extend_from_slice(&block.read(part)?);
            }
        }
        let index = out.len() as u64;
        let (shared, serials) = self.write_index(&offsets, &mut out)?;
        out.extend_from_slice(&index.to_le_bytes());
        let rows = index as usize + ROWS.len() + 8;
        let layout = Layout {
            rows: (rows, out[rows..rows + offsets.len() * ROW].to_vec()),
            blocks: offsets,
            shared,
            serials,
        };
        Ok((out, layout))
    }

    /// Writes the index; where its shared pieces and its serial list are in
    /// `out`, how long, and their checksums.
    fn write_index(
        &self,
        offsets: &[u64],
        out: &mut Vec<u8>,
    ) -> Result<(Region, Region), StorageFault> {
        out.extend_from_slice(&ROWS);
        out.extend_from_slice(&(self.blocks.len() as u64).to_le_bytes());
        for (block, offset) in self.blocks.iter().zip(offsets) {
            let (period, block) = block?;
            write_row(period, *offset, &block, out);
        }
        let start = out.len();
        self.shared()?.write_to(out);
        let shared = &out[start..];
        let shared = (start as u64, shared.len() as u32, xxh3_64(shared));
        match self.ends {
            None => out.push(0),
            Some((first, last)) => {
                out.push(1);
                for (key, record) in [first, last] {
                    let instant = key.instant;
                    codec::signed(out, instant.seconds);
                    codec::number(out, u64::from(instant.nanos));
                    codec::number(out, key.load_order);
                    codec::number(out, u64::from(record.start));
                    codec::number(out, u64::from(record.length));
                }
            }
        }
        let start = out.len();
        write_serials(&self.serials()?, out);
        let serials = &out[start..];
        let serials = (start as u64, serials.len() as u32, xxh3_64(serials));
        write_serials(&self.shared_serials, out);
        Ok((shared, serials))
    }

    /// Points every block at its bytes in `file`, and the shared pieces and the
    /// serial list at their regions, where `layout` ([`Sealed::file`]) says: they
    /// leave memory. The tier sealed into next starts from the file's rows, each
    /// block known by the number it is known by now, so that the cache's entries
    /// of it stay. A row of its file before that cannot be read leaves the tier as
    /// it was, read from memory and that file, and is that file's fault.
    pub(crate) fn stored_in(
        &self,
        file: &Arc<StoreFile>,
        layout: &Layout,
    ) -> Result<(), StorageFault> {
        // Every row read first, so that a fault leaves no block pointed at the
        // new file.
        let blocks: Vec<(i64, Cow<'_, Block>)> = self.blocks.iter().try_collect()?;
        let mut ids = Vec::with_capacity(layout.blocks.len());
        for ((_, block), offset) in blocks.iter().zip(&layout.blocks) {
            if let BlockBody::Shared { body, .. } = &block.body {
                body.store_at(Arc::clone(file), *offset);
            }
            ids.push(block.body.id());
        }
        // Not mapped (no mapping left, say): the next tier keeps its headers in
        // the heap, as this one does.
        if let Ok(map) = file.map() {
            let (start, rows) = &layout.rows;
            let skip = layout.blocks.first().copied().unwrap_or(0);
            let bounds = (skip, *start as u64);
            if let Ok(rows) = Rows::read(
                rows,
                ids.len(),
                bounds,
                file,
                Some((map, *start)),
                Some(ids.into()),
            ) {
                let _ = self.written.set(Arc::new(rows));
            }
        }
        let (offset, length, check) = layout.shared;
        self.shared
            .store_at(Arc::clone(file), offset, length, check);
        let (offset, length, check) = layout.serials;
        self.serials
            .store_at(Arc::clone(file), offset, length, check);
        Ok(())
    }

    /// The tier of a store file (its whole `bytes`, checked, after the magic's
    /// `skip` bytes), its blocks read from `file` when needed, through `cache`.
    pub(crate) fn read_file(
        bytes: &[u8],
        skip: usize,
        file: &Arc<StoreFile>,
        cache: &BlockCache,
    ) -> Result<Sealed, codec::Corrupt> {
        let index = index_at(bytes, skip)?;
        // Not mapped (no mapping left, say): its rows are copied into the heap.
        let map = (file.map().ok()).filter(|map| map.len() == bytes.len());
        Sealed::read_index(&bytes[index..], index as u64, skip, file, map, cache)
    }

    /// The tier of a store file from its index alone (`bytes`, from `index` to the
    /// file's end, checked), its blocks read from `file` when needed: an `s3://`
    /// store's start fetches only this much of each sealed file. Its
    /// rows are read where they lie in `map`, the whole file mapped, if given;
    /// its blocks through `cache`.
    pub(crate) fn read_index(
        bytes: &[u8],
        index: u64,
        skip: usize,
        file: &Arc<StoreFile>,
        map: Option<Mapped>,
        cache: &BlockCache,
    ) -> Result<Sealed, codec::Corrupt> {
        let corrupt = codec::Corrupt;
        let split = (bytes.len().checked_sub(8)).ok_or(corrupt("a sealed file's end"))?;
        if u64::from_le_bytes(bytes[split..].try_into().expect("8 bytes")) != index {
            return Err(corrupt("a sealed file's index"));
        }
        let index = usize::try_from(index).map_err(|_| corrupt("a sealed file's index"))?;
        let bytes = &bytes[..split];
        let mut decoder = codec::Decoder::new(bytes);
        let blocks = match bytes.starts_with(&ROWS) {
            true => {
                decoder.take(ROWS.len())?;
                let count = u64::from_le_bytes(decoder.take(8)?.try_into().expect("8 bytes"));
                let count = usize::try_from(count).map_err(|_| corrupt("a sealed file's rows"))?;
                let at = index + decoder.position();
                let rows = decoder.take(count.checked_mul(ROW).ok_or(corrupt("rows"))?)?;
                let map = map.map(|map| (map, at));
                let bounds = (skip as u64, index as u64);
                Blocks::of_rows(Arc::new(Rows::read(rows, count, bounds, file, map, None)?))
            }
            false => Blocks::of_tree(Sealed::read_headers(&mut decoder, index, skip, file)?),
        };
        // The shared pieces stay in the file, read into the cache when a block is
        // decoded; read here once to check them.
        let (offset, length, check) = stored_part(
            &mut decoder,
            bytes,
            index,
            "a tier's shared pieces",
            |decoder| SharedPieces::read_from(decoder).map(drop),
        )?;
        let shared = IndexPart::stored(Arc::clone(file), offset, length, check);
        let ends = match decoder.take(1)?[0] {
            0 => None,
            _ => {
                let mut end = || -> Result<(RecordKey, StoredRecord), codec::Corrupt> {
                    let instant = Timestamp {
                        seconds: decoder.signed()?,
                        nanos: decoder.u32()?,
                    };
                    let key = RecordKey {
                        instant,
                        load_order: decoder.number()?,
                    };
                    let record = StoredRecord {
                        start: decoder.u32()?,
                        length: decoder.u32()?,
                    };
                    Ok((key, record))
                };
                Some((end()?, end()?))
            }
        };
        let (offset, length, check) =
            stored_part(&mut decoder, bytes, index, "a tier's serials", |decoder| {
                read_serials_from(decoder).map(drop)
            })?;
        let serials = IndexPart::stored(Arc::clone(file), offset, length, check);
        let shared_serials = read_serials_from(&mut decoder)?;
        decoder.finished()?;
        let mut sealed = Sealed {
            blocks,
            shared,
            ends,
            serials,
            shared_serials,
            cache: Some(cache.clone()),
            ..Sealed::default()
        };
        sealed.base = sealed.blocks.first_period().unwrap_or(0);
        // Its rows hide none yet, and only hidden rows are read to count.
        (sealed.count()).expect("a tier just read hides no row");
        if !sealed.blocks.is_empty() {
            sealed.identity = super::fresh_id();
        }
        Ok(sealed)
    }

    /// Block headers of an index of the format before (each in LEB128 numbers),
    /// from `decoder`; `index` is where the index starts in the file, whose magic
    /// is `skip` bytes.
    fn read_headers(
        decoder: &mut codec::Decoder<'_>,
        index: usize,
        skip: usize,
        file: &Arc<StoreFile>,
    ) -> Result<BTreeMap<i64, Block>, codec::Corrupt> {
        let corrupt = codec::Corrupt;
        // Collected, not inserted one by one: a tree built from a sorted sequence
        // has full nodes, where one that grows at its right end keeps them about
        // half full (a year's 219,000 block headers: 35 MB less).
        let mut blocks = Vec::new();
        for _ in 0..decoder.count(8)? {
            let period = decoder.signed()?;
            let offset = decoder.number()?;
            let mut numbers = [0u32; 8];
            for number in &mut numbers {
                *number = decoder.u32()?;
            }
            let [split, unit_digest, metric_digest, length, units, metrics, lowest, highest] =
                numbers;
            let inside = (offset.checked_add(u64::from(length)))
                .is_some_and(|end| offset >= skip as u64 && end <= index as u64);
            let ordered =
                split <= unit_digest && unit_digest <= metric_digest && metric_digest <= length;
            if !(ordered && inside) {
                return Err(corrupt("a sealed block's parts"));
            }
            let mut words = [0u64; 12];
            for word in &mut words {
                *word = decoder.u64_le()?;
            }
            let block = Block {
                body: BlockBody::shared(super::Body::stored(Arc::clone(file), offset)),
                split,
                unit_digest,
                metric_digest,
                length,
                checks: [words[0], words[1], words[2], words[3]],
                units,
                metrics,
                serials: Filter([words[4], words[5], words[6], words[7]]),
                names: Filter([words[8], words[9], words[10], words[11]]),
                files: (lowest, highest),
                shares: decoder.take(1)?[0] != 0,
            };
            if (blocks.last()).is_some_and(|(last, _)| *last >= period) {
                return Err(corrupt("sealed periods out of order"));
            }
            blocks.push((period, block));
        }
        Ok(blocks.into_iter().collect())
    }
}

#[cfg(test)]
impl Sealed {
    /// The tier as a store file of the format before rows (each header in LEB128
    /// numbers), after `magic`: what a store of the older format holds.
    pub(crate) fn file_before(&self, magic: &[u8]) -> Vec<u8> {
        let (file, layout) = self.file(magic).expect("a tier in memory reads");
        let index = index_at(&file, magic.len()).expect("a file just made");
        let mut out = file[..index].to_vec();
        codec::number(&mut out, self.blocks.len() as u64);
        for (block, offset) in self.blocks.iter().zip(&layout.blocks) {
            let (period, block) = block.expect("a tier in memory reads");
            codec::signed(&mut out, period);
            codec::number(&mut out, *offset);
            for number in [
                block.split,
                block.unit_digest,
                block.metric_digest,
                block.length,
                block.units,
                block.metrics,
                block.files.0,
                block.files.1,
            ] {
                codec::number(&mut out, u64::from(number));
            }
            let words = (block.checks.iter())
                .chain(&block.serials.0)
                .chain(&block.names.0);
            for word in words {
                out.extend_from_slice(&word.to_le_bytes());
            }
            out.push(u8::from(block.shares));
        }
        // The rest of the index is as this format writes it.
        let rest = index + ROWS.len() + 8 + layout.blocks.len() * ROW;
        out.extend_from_slice(&file[rest..file.len() - 8]);
        out.extend_from_slice(&(index as u64).to_le_bytes());
        out
    }
}
