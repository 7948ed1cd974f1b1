//! The contract's record order (docs/api.md section 6) as plain integers: by instant,
//! then by station id in byte order, then by load order. A station id is replaced by
//! its rank in the generation's sorted station list and load order by the line's
//! file ordinal and line number, so comparing two records compares three numbers.
//! File ordinals ascend with the files' paths but leave gaps, so that a reload can
//! put a new file between two others without renumbering the lines of every file
//! after it (see `crate::data::load::files`).

use crate::domain::time::Timestamp;

/// A record's place in the order within one station: its instant, then load order.
///
/// Packed to four-byte alignment: 20 bytes, not 24, and a tree keyed by a symbol
/// and a key holds 24 bytes a key, not 32 (every hot record is in two such trees).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(C, packed(4))]
pub(crate) struct RecordKey {
    pub(crate) instant: Timestamp,
    pub(crate) load_order: u64,
}

/// Load order of a line: its file's ordinal (ascending in path order), then its
/// line number.
pub(crate) fn load_order(file_ordinal: u32, line_number: u32) -> u64 {
    (u64::from(file_ordinal) << 32) | u64::from(line_number)
}

/// The last record a page returned; the next page starts strictly after it.
///
/// Packed as [`RecordKey`] is: 24 bytes, not 32, in the shard-wide unit tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(C, packed(4))]
pub(crate) struct Position {
    /// The record's instant, the first key of the order.
    pub(crate) instant: Timestamp,
    /// Its station's rank in the catalog, the second.
    pub(crate) station_rank: u32,
    /// Its line's load order (see `load_order`), the third.
    pub(crate) load_order: u64,
}

// What packing is for: a key and a symbol with a key in the trees' nodes.
const _: () = assert!(size_of::<RecordKey>() == 20);
const _: () = assert!(size_of::<(crate::data::symbols::Symbol, RecordKey)>() == 24);
const _: () = assert!(size_of::<Position>() == 24);
