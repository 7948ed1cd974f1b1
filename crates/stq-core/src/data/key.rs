//! The contract's record order (docs/api.md section 6) as plain integers: by instant,
//! then by station id in byte order, then by load order. A station id is replaced by
//! its rank in the generation's sorted station list and load order by the line's
//! file ordinal and line number, so comparing two records compares three numbers.
//! File ordinals ascend with the files' paths but leave gaps, so that a reload can
//! put a new file between two others without renumbering the lines of every file
//! after it (see `crate::data::load::files`).

use crate::domain::time::Timestamp;

/// A record's place in the order within one station: its instant, then load order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordKey {
    pub instant: Timestamp,
    pub load_order: u64,
}

/// Load order of a line: its file's ordinal (ascending in path order), then its
/// line number.
pub fn load_order(file_ordinal: u32, line_number: u32) -> u64 {
    (u64::from(file_ordinal) << 32) | u64::from(line_number)
}

/// The last record a page returned; the next page starts strictly after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub instant: Timestamp,
    pub station_rank: u32,
    pub load_order: u64,
}
