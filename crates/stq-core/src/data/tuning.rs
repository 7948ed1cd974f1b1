//! The few thresholds that decide *when* the data layer does something whose
//! result is the same either way (fold a layer, seal while reading, where a
//! sealed block ends), in one value:
//! production's, and the unit tests', which set each so that the rarer path runs
//! on small data. A leaf: it uses nothing of the layer.

use std::time::Duration;

/// When the data layer folds, seals and merges.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tuning {
    /// The recent layer of a hot tier (and a shard's recent units) is folded into
    /// the settled one once it holds more than one in `recent_share` of the
    /// station's records (of the shard's).
    pub(crate) recent_share: usize,
    /// How much longer than the hot window a full load keeps a station's records
    /// unsealed while its files are read: the parsing threads hand a station's
    /// records over out of order by up to a block of a file, and a record in a
    /// period sealed already has that period's block sealed again.
    pub(crate) reading_margin: Duration,
    /// The fewest records a station holds before a read seals any of them:
    /// sealing a few records at a time would compress them worse.
    pub(crate) reading_seal_records: usize,
    /// A sealed block's period of time, in seconds. Of 1, 2, 4 and 6 hours, four
    /// took production the least memory for the generated 1000 stations x 7 days
    /// at a 24-hour hot window (longer blocks compress better, but leave more
    /// hours hot; BENCHMARKS.md).
    pub(crate) period_seconds: i64,
}

/// Production's thresholds.
const PRODUCTION: Tuning = Tuning {
    recent_share: 16,
    reading_margin: Duration::from_secs(24 * 3600),
    reading_seal_records: 8192,
    period_seconds: 4 * 3600,
};

/// The unit tests' thresholds: fold at once, seal any number of records, make
/// a block of each hour, so that a few hours of records make several blocks, and
/// keep an hour (a period) unsealed while reading, so that records come late to
/// sealed blocks.
const TESTS: Tuning = Tuning {
    recent_share: 1,
    reading_margin: Duration::from_secs(3600),
    reading_seal_records: 1,
    period_seconds: 3600,
};

/// The thresholds in force: the unit tests' under `cfg(test)`, else production's.
pub(crate) const TUNING: Tuning = if cfg!(test) { TESTS } else { PRODUCTION };
