//! Loading a snapshot directory (docs/api.md sections 2 and 8) into a
//! [`Generation`], from scratch or from the previous generation and what changed.
//!
//! The steps, each a module, used by both callers:
//! - [`files`]: finding the files, each one's stamp, the ordinals that number their
//!   lines, and what a generation remembers of each (kept in its catalog);
//! - [`format`]: what a format is (names, how its files are cut, its parser): a
//!   new format is a file there and a line in its table;
//! - [`read`]: reading files on every core, each block parsed by its file's format
//!   and its records staged into their stations' builders;
//! - [`build`]: stations built from their builders and placed on shards.
//!
//! The callers: [`full`] (start-up, `stq check`, and a reload that cannot build on
//! the previous generation) reads every file; [`reload`] reads what changed and
//! shares the rest. No module here imports one that imports it back: [`files`]
//! (which the catalog keeps) imports only [`format`] and [`report`], [`format`]
//! nothing of loading, and only [`full`] and [`reload`] import the catalog.

mod build;
pub(crate) mod files;
pub(crate) mod format;
mod full;
mod read;
mod reload;
mod report;

pub use files::{FileStamp, Stamps};
pub use full::{check, load};
pub use reload::{load_from_store, reload_looking, Look};
pub use report::{LoadError, LoadOptions, LoadReport, OnInvalid, INVALID_LINES_SHOWN};

#[cfg(test)]
pub(crate) use reload::reload;

#[cfg(doc)]
use crate::data::catalog::Generation;

#[cfg(test)]
mod tests;
