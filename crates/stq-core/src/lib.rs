//! stq's pure layers, in a crate of their own so that the compiler keeps them pure:
//! this crate depends on no actix, actix-web or clap, owns no threads but the
//! snapshot loader's pool (`data::threads`, one for the life of the process), and
//! speaks no HTTP.
//!
//! - [`domain`]: what the records, times, queries and tokens *are*: parsing and
//!   validating them, and rendering a record's response JSON. Depends on nothing else
//!   here.
//! - [`data`]: how records are *held*: the time index and its scans, the merge of
//!   sorted results, page cursors, and loading snapshot files into an immutable
//!   generation; and how a query is answered from it ([`data::Plan`]). Depends on
//!   [`domain`].
//!
//! The service crate (`stq`) puts an actor engine and an HTTP layer on top: the
//! engine runs a plan's steps on its actors, and names little else of `data`.

// An item only this crate uses says so (`pub(crate)`): what is `pub` is the surface
// the service reads, each item of it documented; tests/it/shape.rs counts it.
#![warn(unreachable_pub, missing_docs)]

pub mod data;
pub mod domain;
