//! The store's manifest: which files make the generation it holds, the settings it
//! was written with and every snapshot file's state, ending in its checksum; and
//! what a copy of the store needs of it ([`NamedFile::read_manifest`]), which
//! `--store s3://`'s mirror reads.

use std::path::PathBuf;
use std::time::Duration;

use xxhash_rust::xxh3::{xxh3_128, xxh3_64};

use crate::data::catalog::Placement;
use crate::data::codec;
use crate::data::sealed::Region;
use crate::data::sources::SourceState;

/// What every store file starts with, and the version of this format: a store of
/// another version is not read (and is written over).
pub(super) const MAGIC: &[u8; 8] = b"STQSTOR4";

/// The format before this one, whose symbol runs have no hash table (they are read
/// into the heap): a start still reads a store of it, so that the upgrade that
/// brings this format does not load every snapshot file again, and the first write
/// replaces its symbol runs (its other files are as this format writes them).
pub(super) const MAGIC_BEFORE: &[u8; 8] = b"STQSTOR3";

/// The manifest's own version, one past its files': a manifest of it also says where each
/// sealed file's index is, and the index's checksum, so that an `s3://` store's start fetches
/// the indexes alone. A manifest of the version before ([`MAGIC`]) names the same files and
/// is still read: its sealed files are read whole, as before.
const MANIFEST_MAGIC: &[u8; 8] = b"STQSTOR5";

/// Which version wrote a manifest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Format {
    /// [`MAGIC_BEFORE`]: symbol runs without a hash table, read into the heap.
    Three,
    /// [`MAGIC`]: no sealed file's index region.
    Four,
    /// [`MANIFEST_MAGIC`]: this one.
    Five,
}

/// What a store is written for: a start with other settings does not use it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StoreSettings {
    /// The snapshot directory, as given.
    pub(crate) snapshots: PathBuf,
    /// How many shards the stations are spread over.
    pub(crate) shards: usize,
    /// The hot window (`--hot`).
    pub(crate) hot: Option<Duration>,
}

/// A file of the store: its name (which holds its hash) and length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct FileRef {
    pub(super) name: String,
    pub(super) length: u64,
}

/// A file a manifest names, with its length: what a copy of the store (`--store
/// s3://`'s local one) must hold for a start to use it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedFile {
    /// Its name in the store.
    pub name: String,
    /// Its length in bytes.
    pub length: u64,
    /// The XXH3-128 of its bytes, which its name holds (as every name the store
    /// writes does): a copy fetched whole is the file when its bytes have it.
    pub digest: Option<u128>,
    /// For a sealed file (in a manifest of this format): where its index begins,
    /// its length and its XXH3-64, which a start reads without the rest.
    pub index: Option<(u64, u32, u64)>,
    /// With `index`: the name under which a store directory holds that index
    /// alone (an `s3://` store's pull fetches it so; deleted once the whole file is
    /// there).
    pub index_file: Option<String>,
    /// The station whose tier it holds (none for a symbol run).
    pub station: Option<Box<str>>,
}

impl NamedFile {
    /// The manifest's name in the store's directory.
    pub const MANIFEST: &str = super::MANIFEST;

    /// Every file the manifest `manifest` (its bytes) names, if its checksum matches.
    pub fn read_manifest(manifest: &[u8]) -> Result<Vec<NamedFile>, String> {
        let body = checked_manifest(manifest)?;
        let manifest = Manifest::read(body).map_err(|corrupt| corrupt.to_string())?;
        let named = |file: &FileRef, index: Option<Region>, station: Option<&Box<str>>| NamedFile {
            name: file.name.clone(),
            length: file.length,
            digest: digest_in_name(&file.name),
            index,
            index_file: index.map(|_| index_file_name(&file.name)),
            station: station.cloned(),
        };
        let mut files: Vec<NamedFile> = (manifest.symbols.iter())
            .map(|(_, file)| named(file, None, None))
            .collect();
        for station in &manifest.stations {
            for file in [Some(&station.settled), station.recent.as_ref()]
                .into_iter()
                .flatten()
            {
                files.push(named(file, None, Some(&station.name)));
            }
            if let Some((file, index)) = &station.sealed {
                files.push(named(file, *index, Some(&station.name)));
            }
        }
        Ok(files)
    }
}

/// The name under which a store directory holds the index of its sealed file
/// `name` alone: what an `s3://` store's pull fetches of a sealed file,
/// for the start to read; deleted once the whole file is there.
pub(crate) fn index_file_name(name: &str) -> String {
    format!("{name}.index")
}

/// The XXH3-128 that the store file name `name` holds, `{kind}-{32 hex
/// digits}.stq`, if it holds one.
pub(super) fn digest_in_name(name: &str) -> Option<u128> {
    let (_, hex) = name.strip_suffix(".stq")?.rsplit_once('-')?;
    let digits = hex.len() == 32
        && hex
            .bytes()
            .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'));
    digits.then(|| u128::from_str_radix(hex, 16).ok()).flatten()
}

/// Whether `bytes` are what the store file `name` was written with: its name holds
/// their XXH3-128.
pub(crate) fn holds_its_name(name: &str, bytes: &[u8]) -> bool {
    name.contains(&format!("-{:032x}.", xxh3_128(bytes)))
}

/// What the manifest says.
pub(super) struct Manifest {
    pub(super) format: Format,
    pub(super) settings: StoreSettings,
    pub(super) symbols: Vec<(u32, FileRef)>,
    pub(super) sources: Vec<SourceState>,
    pub(super) stations: Vec<ManifestStation>,
}

pub(super) struct ManifestStation {
    pub(super) name: Box<str>,
    pub(super) placement: Placement,
    pub(super) settled: FileRef,
    /// Its recent layer's file; none for an empty layer (in a manifest of this
    /// format: the formats before name a file for each, and an empty one is a file
    /// of its own for each station, since it holds its settled layer's length).
    pub(super) recent: Option<FileRef>,
    /// Its sealed file, and where that file's index is (not in a manifest of the
    /// formats before).
    pub(super) sealed: Option<(FileRef, Option<Region>)>,
}

impl ManifestStation {
    /// The files it names.
    pub(super) fn files(&self) -> impl Iterator<Item = &FileRef> {
        [Some(&self.settled), self.recent.as_ref()]
            .into_iter()
            .flatten()
            .chain(self.sealed.as_ref().map(|(file, _)| file))
    }
}

impl Manifest {
    pub(super) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(match self.format {
            Format::Three => MAGIC_BEFORE,
            Format::Four => MAGIC,
            Format::Five => MANIFEST_MAGIC,
        });
        let settings = &self.settings;
        codec::bytes(out, settings.snapshots.to_string_lossy().as_bytes());
        codec::number(out, settings.shards as u64);
        match settings.hot {
            None => out.push(0),
            Some(hot) => {
                out.push(1);
                codec::number(out, hot.as_secs());
                codec::number(out, u64::from(hot.subsec_nanos()));
            }
        }
        codec::number(out, self.symbols.len() as u64);
        for (first, file) in &self.symbols {
            codec::number(out, u64::from(*first));
            write_ref(out, file);
        }
        codec::number(out, self.sources.len() as u64);
        for source in &self.sources {
            source.write_to(out);
        }
        codec::number(out, self.stations.len() as u64);
        for station in &self.stations {
            codec::bytes(out, station.name.as_bytes());
            codec::number(out, u64::from(station.placement.shard));
            codec::number(out, u64::from(station.placement.station_index));
            write_ref(out, &station.settled);
            match (self.format, &station.recent) {
                (Format::Five, None) => out.push(0),
                (Format::Five, Some(file)) => {
                    out.push(1);
                    write_ref(out, file);
                }
                (Format::Three | Format::Four, recent) => {
                    write_ref(
                        out,
                        recent.as_ref().expect("the formats before name each layer"),
                    );
                }
            }
            match &station.sealed {
                None => out.push(0),
                Some((file, index)) => {
                    out.push(1);
                    write_ref(out, file);
                    if self.format == Format::Five {
                        let (offset, length, check) =
                            index.expect("this format's manifest knows each index");
                        codec::number(out, offset);
                        codec::number(out, u64::from(length));
                        out.extend_from_slice(&check.to_le_bytes());
                    }
                }
            }
        }
        let checksum = xxh3_64(out);
        out.extend_from_slice(&checksum.to_le_bytes());
    }

    pub(super) fn read(body: &[u8]) -> Result<Manifest, codec::Corrupt> {
        let mut decoder = codec::Decoder::new(body);
        let format = match decoder.take(MAGIC.len())? {
            magic if magic == MANIFEST_MAGIC => Format::Five,
            magic if magic == MAGIC => Format::Four,
            magic if magic == MAGIC_BEFORE => Format::Three,
            _ => return Err(codec::Corrupt("not a manifest of this version")),
        };
        let snapshots = PathBuf::from(decoder.text()?);
        let shards = decoder.number()? as usize;
        let hot = match decoder.take(1)?[0] {
            0 => None,
            _ => Some(Duration::new(decoder.number()?, decoder.u32()?)),
        };
        let mut symbols = Vec::new();
        for _ in 0..decoder.count(2)? {
            symbols.push((decoder.u32()?, read_ref(&mut decoder)?));
        }
        let mut sources = Vec::new();
        for _ in 0..decoder.count(8)? {
            sources.push(SourceState::read_from(&mut decoder)?);
        }
        let mut stations = Vec::new();
        for _ in 0..decoder.count(4)? {
            let name = decoder.text()?.into();
            let placement = Placement {
                shard: decoder.u32()?,
                station_index: decoder.u32()?,
            };
            let settled = read_ref(&mut decoder)?;
            let recent = match format {
                Format::Five => match decoder.take(1)?[0] {
                    0 => None,
                    _ => Some(read_ref(&mut decoder)?),
                },
                Format::Three | Format::Four => Some(read_ref(&mut decoder)?),
            };
            let sealed = match decoder.take(1)?[0] {
                0 => None,
                _ => {
                    let file = read_ref(&mut decoder)?;
                    let index = match format {
                        Format::Five => {
                            Some((decoder.number()?, decoder.u32()?, decoder.u64_le()?))
                        }
                        Format::Three | Format::Four => None,
                    };
                    Some((file, index))
                }
            };
            stations.push(ManifestStation {
                name,
                placement,
                settled,
                recent,
                sealed,
            });
        }
        decoder.finished()?;
        Ok(Manifest {
            format,
            settings: StoreSettings {
                snapshots,
                shards,
                hot,
            },
            symbols,
            sources,
            stations,
        })
    }
}

/// The manifest's body, if its checksum (its last eight bytes) matches.
pub(super) fn checked_manifest(manifest: &[u8]) -> Result<&[u8], &'static str> {
    let split = manifest
        .len()
        .checked_sub(8)
        .ok_or("shorter than its checksum")?;
    let (body, checksum) = manifest.split_at(split);
    match xxh3_64(body).to_le_bytes() == checksum {
        true => Ok(body),
        false => Err("its checksum does not match"),
    }
}

fn write_ref(out: &mut Vec<u8>, file: &FileRef) {
    codec::bytes(out, file.name.as_bytes());
    codec::number(out, file.length);
}

fn read_ref(decoder: &mut codec::Decoder<'_>) -> Result<FileRef, codec::Corrupt> {
    let name = decoder.text()?;
    // A name the store made: no path in it.
    if name.contains('/') || name.starts_with('.') || name.is_empty() {
        return Err(codec::Corrupt("a file name"));
    }
    Ok(FileRef {
        name: name.to_owned(),
        length: decoder.number()?,
    })
}
