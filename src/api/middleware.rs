//! The middleware of every response: its request id, `Cache-Control` and `Vary`,
//! one access line and the metrics, and CORS (actix-cors, with the contract's
//! answers to preflights it cannot grant).

use std::time::Instant as Stopwatch;

use actix_cors::Cors;
use actix_web::body::EitherBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderMap, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::ResponseError as _;

use crate::error::Error;
use crate::metrics::{endpoint_label, EndpointLabels, Metrics, RequestLabels};

use super::X_REQUEST_ID;

/// How many records a response holds, for the access log and the metrics.
#[derive(Clone, Copy, Debug)]
pub(super) struct RecordCount(pub(super) usize);

/// A request being answered, as the access log and the metrics see it.
pub(super) struct Access {
    pub(super) request_id: String,
    method: Method,
    /// Without the query string: a token pasted into a URL must not reach a log.
    path: String,
    started: Stopwatch,
}

impl Access {
    pub(super) fn begin(request: &ServiceRequest, request_id: String) -> Access {
        Access {
            request_id,
            method: request.method().clone(),
            path: request.path().to_owned(),
            started: Stopwatch::now(),
        }
    }

    /// One access line, and the request counted.
    pub(super) fn end(self, metrics: &Metrics, status: StatusCode, records: usize) {
        let elapsed = self.started.elapsed();
        tracing::info!(
            target: "stq::access",
            request_id = %self.request_id,
            method = %self.method,
            path = %self.path,
            status = status.as_u16(),
            records,
            duration_ms = elapsed.as_secs_f64() * 1e3,
            "request"
        );
        let endpoint = endpoint_label(&self.path);
        metrics
            .requests
            .get_or_create(&RequestLabels {
                endpoint,
                status: status.as_u16(),
            })
            .inc();
        metrics
            .request_duration
            .get_or_create(&EndpointLabels { endpoint })
            .observe(elapsed.as_secs_f64());
        if records > 0 {
            metrics
                .records_returned
                .get_or_create(&EndpointLabels { endpoint })
                .inc_by(records as u64);
        }
    }
}

/// CORS for the listed origins (`*` for any): GET and HEAD with `Authorization`.
pub(super) fn cors(origins: &[String]) -> Cors {
    let cors = origins
        .iter()
        .fold(Cors::default(), |cors, origin| match origin.as_str() {
            "*" => cors.allow_any_origin(),
            origin => cors.allowed_origin(origin),
        });
    cors.allowed_methods([Method::GET, Method::HEAD])
        .allowed_header(header::AUTHORIZATION)
        .max_age(600)
}

/// An OPTIONS that asks for CORS permission. Without an `Origin` it can never be
/// granted, and is refused like any other OPTIONS.
pub(super) fn is_preflight(request: &ServiceRequest) -> bool {
    request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

pub(super) fn origin_listed(origins: &[String], headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return false;
    };
    origins
        .iter()
        .any(|listed| listed == "*" || listed.as_bytes() == origin.as_bytes())
}

/// A listed origin's preflight, as actix-cors answered it: 204 when it allowed the
/// request, else the 405 any other OPTIONS gets, with the contract's error body.
pub(super) fn answer_preflight<B>(
    mut response: ServiceResponse<B>,
) -> ServiceResponse<EitherBody<B>> {
    if response.status().is_success() {
        *response.response_mut().status_mut() = StatusCode::NO_CONTENT;
        response.map_into_left_body()
    } else {
        response
            .into_response(Error::MethodNotAllowed.error_response())
            .map_into_right_body()
    }
}

/// What every response carries (CONTRACT sections 7 and 8). Set after compression,
/// so that `Vary` is exactly the contract's.
pub(super) fn common_headers(headers: &mut HeaderMap, request_id: &str) {
    let request_id = HeaderValue::from_str(request_id).expect("request ids are visible ASCII");
    headers.insert(X_REQUEST_ID, request_id);
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-cache"),
    );
    headers.insert(
        header::VARY,
        HeaderValue::from_static("Authorization, Accept-Encoding"),
    );
}
