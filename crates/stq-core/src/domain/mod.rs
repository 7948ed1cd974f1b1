//! The domain: records, timestamps, query parameters and tokens, what each one
//! means and how its text is checked. No I/O but reading a tokens file; no state.

pub(crate) mod auth;
#[cfg(any(test, feature = "checks"))]
mod checks;
pub mod jwt;
pub(crate) mod openhtf;
#[cfg(test)]
mod parser_properties;
pub(crate) mod query;
pub mod record;
pub mod time;
pub(crate) mod zone;

pub use auth::{Principal, Stations, Tokens, TokensError, Unauthorized};
pub use query::{Endpoint, EndpointSpec, Format, Limits, QueryError, QueryParams};
