//! Reading the fault a test asks for from its request (see `engine::Fault`).

use actix_web::http::header::HeaderMap;

use crate::engine::Fault;

/// The fault `X-Stq-Fault` asks for; always `None` without `fault-injection`.
pub(crate) fn requested(headers: &HeaderMap) -> Option<Fault> {
    Fault::requested(
        headers
            .get("x-stq-fault")
            .and_then(|value| value.to_str().ok()),
    )
}
