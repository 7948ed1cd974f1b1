//! The domain: records, timestamps, query parameters and tokens, what each one
//! means and how its text is checked. No I/O but reading a tokens file; no state.

pub mod auth;
pub(crate) mod openhtf;
pub mod query;
pub mod record;
pub mod time;
pub(crate) mod zone;
