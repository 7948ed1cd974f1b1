//! Reading the fault a test asks for from its request (see `engine::Fault`).

use actix_web::http::header::{HeaderMap, HeaderName};

use crate::engine::Fault;

/// Named once: a name looked up as text is made, and allocated, on every request.
const X_STQ_FAULT: HeaderName = HeaderName::from_static("x-stq-fault");

/// The fault `X-Stq-Fault` asks for; always `None` without `fault-injection`.
pub(crate) fn requested(headers: &HeaderMap) -> Option<Fault> {
    Fault::requested(
        headers
            .get(X_STQ_FAULT)
            .and_then(|value| value.to_str().ok()),
    )
}
