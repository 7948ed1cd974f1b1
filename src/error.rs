//! The one error type of a request, and its one mapping to HTTP (`ResponseError`).
//!
//! Every error any path answers goes through here, so every body has the contract's
//! shape `{"error": {"code", "message", "details"}}` (CONTRACT section 7). Internal
//! causes are logged with their request id and never shown to the client.

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use serde_json::{json, Value};

use std::time::Duration;

use crate::time::{duration_text, Instant};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no such path; the endpoints are /units and /metrics")]
    NotFound,

    #[error("method not allowed; use GET or HEAD")]
    MethodNotAllowed,

    #[error("missing or invalid bearer token")]
    Unauthorized {
        /// A Bearer token was presented (possibly empty) but is not known.
        token_presented: bool,
    },

    #[error("invalid value for parameter `{parameter}`: {reason}")]
    InvalidParameter {
        parameter: String,
        /// The decoded value, when there was one to show.
        value: Option<String>,
        reason: String,
    },

    #[error("unknown parameter `{parameter}`")]
    UnknownParameter { parameter: String },

    #[error("`from` must be before `to`")]
    InvalidWindow { from: Instant, to: Instant },

    #[error("at most {max} station ids may be given, not {count}")]
    TooManyStations { count: usize, max: usize },

    #[error(
        "more than {max_records} records match; narrow the window or the filters, or page with `limit`"
    )]
    ResultTooLarge { max_records: usize },

    #[error("invalid cursor: {reason}")]
    InvalidCursor { reason: &'static str },

    #[error("the token may not access some of the requested stations")]
    Forbidden {
        /// Sorted in byte order, without repeats.
        stations: Vec<String>,
    },

    #[error("no acceptable content coding; accept gzip, br or identity")]
    NotAcceptable,

    #[error("the snapshot is not loaded yet")]
    NotReady,

    #[error("the query string is {length} bytes long; at most {max} are accepted")]
    UriTooLong { length: usize, max: usize },

    #[error("the window spans more than the {} allowed; narrow it", duration_text(*.max_window))]
    WindowTooLarge {
        from: Instant,
        to: Instant,
        max_window: Duration,
    },

    #[error("the query took longer than {}; narrow the window or the filters", duration_text(*.after))]
    Timeout { after: Duration },

    #[error("too many queries at once; retry in a second")]
    Overloaded,

    #[error("malformed request: {reason}")]
    InvalidRequest { reason: &'static str },

    /// Something went wrong on our side; the cause was logged, the client sees only
    /// the request id to quote.
    #[error("internal error")]
    Internal { request_id: String },
}

impl Error {
    pub fn code(&self) -> &'static str {
        match self {
            Error::NotFound => "not_found",
            Error::MethodNotAllowed => "method_not_allowed",
            Error::Unauthorized { .. } => "unauthorized",
            Error::InvalidParameter { .. } => "invalid_parameter",
            Error::UnknownParameter { .. } => "unknown_parameter",
            Error::InvalidWindow { .. } => "invalid_window",
            Error::TooManyStations { .. } => "too_many_stations",
            Error::ResultTooLarge { .. } => "result_too_large",
            Error::InvalidCursor { .. } => "invalid_cursor",
            Error::Forbidden { .. } => "forbidden",
            Error::NotAcceptable => "not_acceptable",
            Error::NotReady => "not_ready",
            Error::UriTooLong { .. } => "uri_too_long",
            Error::WindowTooLarge { .. } => "window_too_large",
            Error::Timeout { .. } => "timeout",
            Error::Overloaded => "overloaded",
            Error::InvalidRequest { .. } => "invalid_request",
            Error::Internal { .. } => "internal_error",
        }
    }

    fn details(&self) -> Value {
        match self {
            Error::InvalidParameter {
                parameter, value, ..
            } => match value {
                Some(value) => json!({ "parameter": parameter, "value": value }),
                None => json!({ "parameter": parameter }),
            },
            Error::UnknownParameter { parameter } => json!({ "parameter": parameter }),
            Error::InvalidWindow { from, to } => {
                json!({ "from": from.to_rfc3339(), "to": to.to_rfc3339() })
            }
            Error::TooManyStations { count, max } => {
                json!({ "count": count, "max_stations": max })
            }
            Error::ResultTooLarge { max_records } => json!({ "max_records": max_records }),
            Error::Forbidden { stations } => json!({ "stations": stations }),
            Error::Internal { request_id } => json!({ "request_id": request_id }),
            Error::UriTooLong { length, max } => {
                json!({ "length": length, "max_query_bytes": max })
            }
            Error::WindowTooLarge {
                from,
                to,
                max_window,
            } => json!({
                "from": from.to_rfc3339(),
                "to": to.to_rfc3339(),
                "max_window": duration_text(*max_window),
            }),
            Error::Timeout { after } => json!({ "request_timeout": duration_text(*after) }),
            Error::NotFound
            | Error::MethodNotAllowed
            | Error::Unauthorized { .. }
            | Error::InvalidCursor { .. }
            | Error::NotAcceptable
            | Error::NotReady
            | Error::Overloaded
            | Error::InvalidRequest { .. } => Value::Null,
        }
    }
}

impl ResponseError for Error {
    fn status_code(&self) -> StatusCode {
        match self {
            Error::NotFound => StatusCode::NOT_FOUND,
            Error::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Error::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            Error::InvalidParameter { .. }
            | Error::UnknownParameter { .. }
            | Error::InvalidWindow { .. }
            | Error::TooManyStations { .. }
            | Error::ResultTooLarge { .. }
            | Error::InvalidCursor { .. }
            | Error::WindowTooLarge { .. }
            | Error::InvalidRequest { .. } => StatusCode::BAD_REQUEST,
            Error::UriTooLong { .. } => StatusCode::URI_TOO_LONG,
            Error::Timeout { .. } | Error::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            Error::Forbidden { .. } => StatusCode::FORBIDDEN,
            Error::NotAcceptable => StatusCode::NOT_ACCEPTABLE,
            Error::NotReady => StatusCode::SERVICE_UNAVAILABLE,
            Error::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        #[derive(Serialize)]
        struct Body<'a> {
            error: ErrorBody<'a>,
        }
        #[derive(Serialize)]
        struct ErrorBody<'a> {
            code: &'a str,
            message: String,
            details: Value,
        }
        let body = Body {
            error: ErrorBody {
                code: self.code(),
                message: self.to_string(),
                details: self.details(),
            },
        };
        let mut response = HttpResponse::build(self.status_code());
        match self {
            Error::Unauthorized { token_presented } => {
                let challenge = if *token_presented {
                    r#"Bearer realm="stq", error="invalid_token""#
                } else {
                    r#"Bearer realm="stq""#
                };
                response.insert_header((header::WWW_AUTHENTICATE, challenge));
            }
            Error::MethodNotAllowed => {
                response.insert_header((header::ALLOW, "GET, HEAD"));
            }
            Error::Overloaded => {
                response.insert_header((header::RETRY_AFTER, "1"));
            }
            _ => {}
        }
        response
            .content_type(JSON)
            .body(serde_json::to_vec(&body).expect("serializing plain data cannot fail"))
    }
}

/// The text a panic was raised with, when it has one.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

/// `application/json`, without parameters, as the contract writes it.
pub const JSON: &str = "application/json";

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::body::MessageBody;

    fn body_of(error: &Error) -> Value {
        let bytes = error.error_response().into_body().try_into_bytes().unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn every_body_has_exactly_code_message_details() {
        let errors = [
            Error::NotFound,
            Error::UnknownParameter {
                parameter: "x".into(),
            },
            Error::Forbidden {
                stations: vec!["A".into()],
            },
            Error::Internal {
                request_id: "r".into(),
            },
        ];
        for error in &errors {
            let body = body_of(error);
            let object = body["error"].as_object().unwrap();
            let mut keys: Vec<_> = object.keys().collect();
            keys.sort();
            assert_eq!(keys, ["code", "details", "message"]);
            assert_eq!(body.as_object().unwrap().len(), 1);
            assert_eq!(object["code"], error.code());
        }
        assert_eq!(body_of(&Error::NotFound)["error"]["details"], Value::Null);
        assert_eq!(
            body_of(&errors[3])["error"]["details"],
            json!({"request_id": "r"})
        );
    }

    #[test]
    fn unauthorized_challenges_name_the_realm() {
        let header_of = |presented| {
            Error::Unauthorized {
                token_presented: presented,
            }
            .error_response()
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned()
        };
        assert_eq!(header_of(false), r#"Bearer realm="stq""#);
        assert_eq!(
            header_of(true),
            r#"Bearer realm="stq", error="invalid_token""#
        );
    }
}
