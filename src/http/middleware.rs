//! The middleware of every response: its request id, `Cache-Control` and `Vary`,
//! one access line and the metrics, and CORS (actix-cors, with the contract's
//! answers to preflights it cannot grant).

use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use actix_cors::Cors;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse};
use actix_web::error::InternalError;
use actix_web::http::header::{self, HeaderMap, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::{HttpMessage as _, ResponseError as _};

use super::answer::RecordCount;
use super::error::ApiError;
use super::request_id::{request_id, RequestId, X_REQUEST_ID};
use crate::metrics::{endpoint_label, WorkerTally};

/// Runs `service` for `request` and gives every response, of every path and
/// status, what the contract puts on all of them: its request id, cache headers,
/// an access line and metrics; and answers CORS preflights.
pub(super) fn around<S, B>(
    request: ServiceRequest,
    service: &S,
    origins: &[String],
    tally: &Arc<WorkerTally>,
) -> impl Future<Output = Result<ServiceResponse<EitherBody<B>>, actix_web::Error>>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let id = request_id(request.headers());
    request
        .extensions_mut()
        .insert(RequestId::new(Rc::clone(&id)));
    let access = Access::begin(&request, id);
    let preflight = is_preflight(&request);
    // An unlisted origin gets no CORS headers: its preflight is one more OPTIONS,
    // and that is a 405.
    let refused = preflight && !origin_listed(origins, request.headers());
    let response = if refused {
        Err(request)
    } else {
        Ok(service.call(request))
    };
    let tally = Arc::clone(tally);
    async move {
        let mut response = match response {
            Err(request) => request
                .error_response(ApiError::MethodNotAllowed)
                .map_into_right_body(),
            Ok(response) => match response.await {
                Ok(response) if preflight => answer_preflight(response),
                Ok(response) => response.map_into_left_body(),
                // Errors normally arrive as responses; one that escapes as an error
                // still leaves with the same headers.
                Err(error) => {
                    let mut response = error.error_response();
                    common_headers(response.headers_mut(), &access.request_id);
                    access.end(&tally, response.status(), 0, None);
                    return Err(InternalError::from_response(error, response).into());
                }
            },
        };
        // Compress refuses a request that excludes every coding, itself; the
        // refusal still gets the contract's error body.
        if response.status() == StatusCode::NOT_ACCEPTABLE {
            response = response
                .into_response(ApiError::NotAcceptable.error_response())
                .map_into_right_body();
        }
        common_headers(response.headers_mut(), &access.request_id);
        let records = response
            .response()
            .extensions()
            .get::<RecordCount>()
            .map_or(0, |count| count.0);
        let holder = response
            .request()
            .extensions()
            .get::<RequestId>()
            .and_then(RequestId::holder);
        let name = holder.as_ref().map(|principal| principal.name.as_str());
        access.end(&tally, response.status(), records, name);
        Ok(response)
    }
}

/// A request being answered, as the access log and the metrics see it.
struct Access {
    request_id: Rc<str>,
    /// The method and path, only when access lines are on: a line nobody writes
    /// needs no copies of them.
    line: Option<(Method, String)>,
    endpoint: &'static str,
    started: Instant,
}

impl Access {
    fn begin(request: &ServiceRequest, request_id: Rc<str>) -> Access {
        let line = tracing::enabled!(target: "stq::access", tracing::Level::INFO)
            // Without the query string: a token pasted into a URL must not reach a log.
            .then(|| (request.method().clone(), request.path().to_owned()));
        Access {
            request_id,
            line,
            endpoint: endpoint_label(request.path()),
            started: Instant::now(),
        }
    }

    /// One access line, and the request counted.
    fn end(self, tally: &WorkerTally, status: StatusCode, records: usize, holder: Option<&str>) {
        let elapsed = self.started.elapsed();
        if let Some((method, path)) = &self.line {
            tracing::info!(
                target: "stq::access",
                request_id = %self.request_id,
                method = %method,
                path = %path,
                status = status.as_u16(),
                records,
                token = holder.unwrap_or(""),
                duration_ms = elapsed.as_secs_f64() * 1e3,
                "request"
            );
        }
        tally.record(
            self.endpoint,
            status.as_u16(),
            elapsed.as_secs_f64(),
            records,
        );
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
fn is_preflight(request: &ServiceRequest) -> bool {
    request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

fn origin_listed(origins: &[String], headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return false;
    };
    origins
        .iter()
        .any(|listed| listed == "*" || listed.as_bytes() == origin.as_bytes())
}

/// A listed origin's preflight, as actix-cors answered it: 204 when it allowed the
/// request, else the 405 any other OPTIONS gets, with the contract's error body.
fn answer_preflight<B>(mut response: ServiceResponse<B>) -> ServiceResponse<EitherBody<B>> {
    if response.status().is_success() {
        *response.response_mut().status_mut() = StatusCode::NO_CONTENT;
        response.map_into_left_body()
    } else {
        response
            .into_response(ApiError::MethodNotAllowed.error_response())
            .map_into_right_body()
    }
}

/// What every response carries (docs/api.md sections 7 and 8). Set after compression,
/// so that `Vary` is exactly the contract's.
fn common_headers(headers: &mut HeaderMap, request_id: &str) {
    let request_id = HeaderValue::from_str(request_id).expect("request ids are visible ASCII");
    headers.insert(X_REQUEST_ID, request_id);
    // A stream says `no-store` itself (section 14.2).
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("private, no-cache"),
        );
    }
    headers.insert(
        header::VARY,
        // `Accept` chooses between JSON and CSV (section 7).
        HeaderValue::from_static("Authorization, Accept-Encoding, Accept"),
    );
}
