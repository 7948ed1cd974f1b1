//! The data layer: records held in memory and read back in the contract's order.
//!
//! A snapshot is loaded ([`load`]) into an immutable [`Generation`]: each
//! station's records in time order ([`station`]: the recent ones in B-tree maps,
//! older ones in compressed blocks) grouped into shards ([`shard`]), and a
//! [`catalog`] that says where each station lives. A query is a
//! [`scan`] of each shard it touches and a [`merge`] of their sorted hits; a page
//! ends in a [`cursor`] that says where the next one starts. A [`summary`] is
//! computed by each shard over its own stations and merged. The [`store`] keeps a
//! generation on disk, so that a start rebuilds it instead of parsing it again.
//!
//! The front door for queries is [`plan`]: a request planned ([`Plan`]), what
//! each shard is asked and answers, and the merge into a page or rows, in a
//! handful of types; the engine names those, not the scans, summaries and cursors
//! behind them. Every module is private: this file declares them and re-exports
//! the types the service names, whose functions are the ways in (a load's
//! [`LoadOptions`], a [`Generation`] with its [`Catalog`] and each shard's
//! [`ShardData`], the [`StoreWriter`], the [`Remote`] an `s3://` store supplies);
//! it holds no code, so that no module of the layer uses it and it uses them
//! back. The leaves that every tier and the store share
//! are [`codec`] (the store's byte encoding) and [`sources`] (what a generation
//! remembers of each snapshot file).

pub(crate) mod catalog;
pub(crate) mod codec;
pub(crate) mod cursor;
pub(crate) mod digest;
pub(crate) mod exact;
pub(crate) mod fault;
pub(crate) mod hot;
pub(crate) mod key;
pub(crate) mod load;
pub(crate) mod mapped;
pub(crate) mod memory;
pub(crate) mod merge;
pub(crate) mod plan;
pub(crate) mod scan;
pub(crate) mod sealed;
pub(crate) mod shard;
pub(crate) mod sources;
pub(crate) mod station;
pub(crate) mod store;
pub(crate) mod stored;
pub(crate) mod summary;
pub(crate) mod symbols;
pub(crate) mod threads;
pub(crate) mod tier;
pub(crate) mod tuning;

pub use catalog::{Catalog, Generation, LoadSummary, StationRecords};
pub use fault::StorageFault;
pub use load::{
    Additions, FileReport, FromStore, LoadError, LoadOptions, LoadReport, Look, OnInvalid, Start,
    Touch,
};
pub use memory::MemoryUse;
pub use plan::{
    Answer, Plan, PlanError, Refusal, Request, Settings, ShardAnswer, ShardQuestion, Stream,
};
pub use sealed::cache::BlockCache;
pub use sealed::Remote;
pub use shard::ShardData;
pub use sources::InvalidLine;
pub use store::{NamedFile, StoreWriter, WriteReport};
