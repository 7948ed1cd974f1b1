//! The one place where errors become the contract's answers (docs/api.md section 7).
//!
//! Every layer has its own errors: the query parser's [`QueryError`], the token
//! check's [`Unauthorized`] and a JSON Web Token's [`jwt::Refusal`], the engine's [`EngineError`] (whose refusals, the
//! cursor's among them, are the plan's [`Refusal`]). [`ApiError`] wraps each of
//! them beside the HTTP layer's own, and
//! only here are they given a code, a status, details and headers, so every body
//! has the shape `{"error": {"code", "message", "details"}}`. Internal causes are
//! logged with their request id and never shown to the client.

use std::time::Duration;

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use serde_json::{json, Value};
use stq_core::domain::time::duration_text;
use stq_core::domain::{Endpoint, QueryError, Unauthorized};

use stq_core::data::Refusal;

use crate::engine::{EngineError, Overloaded};
use crate::jwt::{self, Refused};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("no such path; the endpoints are {}", endpoint_paths())]
    NotFound,

    #[error("method not allowed; use GET or HEAD")]
    MethodNotAllowed,

    #[error(transparent)]
    Unauthorized(#[from] Unauthorized),

    /// A JSON Web Token refused (docs/api.md section 16): the message says why.
    #[error(transparent)]
    Token(#[from] jwt::Refusal),

    #[error(transparent)]
    Query(#[from] QueryError),

    /// A refusal of the engine's that the client can act on: an invalid cursor,
    /// forbidden stations, too many records. (Its window errors are `Query`, its
    /// timeouts `Timeout`, its refusals for want of a slot `Overloaded`, its failures
    /// `Internal`.)
    #[error(transparent)]
    Engine(Refusal),

    #[error("no acceptable content coding; accept gzip, br or identity")]
    NotAcceptable,

    #[error("the query took longer than {}; narrow the window or the filters", duration_text(*.after))]
    Timeout { after: Duration },

    #[error("too many queries at once; retry in a second")]
    Overloaded,

    #[error("{max} streams are open, the most this server keeps; retry in a second")]
    TooManyStreams { max: usize },

    #[error("malformed request: {reason}")]
    InvalidRequest { reason: &'static str },

    /// A store file failed a read of the query's (docs/api.md section 12): the
    /// stations reading it are being read again from the snapshot files.
    #[error("the store could not be read; retry in a second")]
    StorageUnavailable,

    /// Something went wrong on our side; the cause was logged, the client sees only
    /// the request id to quote.
    #[error("internal error")]
    Internal { request_id: String },
}

impl From<Refused> for ApiError {
    fn from(refused: Refused) -> ApiError {
        match refused {
            Refused::Tokens(refusal) => ApiError::Unauthorized(refusal),
            Refused::Jwt(refusal) => ApiError::Token(refusal),
        }
    }
}

impl ApiError {
    /// The answer to an engine error. `request_timeout` names the deadline a
    /// `timeout` passed; a failure is logged here, with `request_id`, and shown to
    /// the client only as that id.
    pub(crate) fn from_engine(
        error: EngineError,
        request_id: &str,
        request_timeout: Duration,
    ) -> ApiError {
        match error {
            EngineError::Query(error) => ApiError::Query(error),
            EngineError::TimedOut => ApiError::Timeout {
                after: request_timeout,
            },
            EngineError::Overloaded(overloaded) => overloaded.into(),
            EngineError::Raced => {
                tracing::error!(request_id = %request_id, "a stream's step raced two reloads");
                ApiError::Internal {
                    request_id: request_id.to_owned(),
                }
            }
            EngineError::Failed(cause) => {
                tracing::error!(request_id = %request_id, error = %cause, "query failed");
                ApiError::Internal {
                    request_id: request_id.to_owned(),
                }
            }
            EngineError::Refused(refusal) => ApiError::Engine(refusal),
            EngineError::StorageUnavailable(fault) => {
                // The engine logged the file's fault once; this is the request's.
                tracing::debug!(request_id = %request_id, "{fault}; answered storage_unavailable");
                ApiError::StorageUnavailable
            }
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::NotFound => "not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::Unauthorized(_) | ApiError::Token(_) => "unauthorized",
            ApiError::Query(error) => match error {
                QueryError::InvalidParameter { .. } => "invalid_parameter",
                QueryError::UnknownParameter { .. } => "unknown_parameter",
                QueryError::InvalidWindow { .. } => "invalid_window",
                QueryError::TooManyStations { .. } => "too_many_stations",
                QueryError::UriTooLong { .. } => "uri_too_long",
                QueryError::WindowTooLarge { .. } => "window_too_large",
            },
            ApiError::Engine(refusal) => match refusal {
                Refusal::Cursor { .. } => "invalid_cursor",
                Refusal::Forbidden { .. } => "forbidden",
                Refusal::ResultTooLarge { .. } | Refusal::TooManyRows { .. } => "result_too_large",
            },
            ApiError::NotAcceptable => "not_acceptable",
            ApiError::Timeout { .. } => "timeout",
            ApiError::Overloaded | ApiError::TooManyStreams { .. } => "overloaded",
            ApiError::InvalidRequest { .. } => "invalid_request",
            ApiError::StorageUnavailable => "storage_unavailable",
            ApiError::Internal { .. } => "internal_error",
        }
    }

    fn details(&self) -> Value {
        match self {
            ApiError::Query(error) => match error {
                QueryError::InvalidParameter {
                    parameter, value, ..
                } => match value {
                    Some(value) => json!({ "parameter": parameter, "value": value }),
                    None => json!({ "parameter": parameter }),
                },
                QueryError::UnknownParameter { parameter } => json!({ "parameter": parameter }),
                QueryError::InvalidWindow {
                    from,
                    to,
                    bounds: [from_name, to_name],
                } => json!({ *from_name: from.to_string(), *to_name: to.to_string() }),
                QueryError::TooManyStations { count, max } => {
                    json!({ "count": count, "max_stations": max })
                }
                QueryError::UriTooLong { length, max } => {
                    json!({ "length": length, "max_query_bytes": max })
                }
                QueryError::WindowTooLarge {
                    from,
                    to,
                    max_window,
                    bounds: [from_name, to_name],
                } => json!({
                    *from_name: from.to_string(),
                    *to_name: to.to_string(),
                    "max_window": duration_text(*max_window),
                }),
            },
            ApiError::Engine(
                Refusal::ResultTooLarge { max_records } | Refusal::TooManyRows { max_records },
            ) => {
                json!({ "max_records": max_records })
            }
            ApiError::Engine(Refusal::Forbidden { stations }) => {
                json!({ "stations": stations })
            }
            ApiError::Internal { request_id } => json!({ "request_id": request_id }),
            ApiError::Timeout { after } => json!({ "request_timeout": duration_text(*after) }),
            ApiError::NotFound
            | ApiError::MethodNotAllowed
            | ApiError::Unauthorized(_)
            | ApiError::Token(_)
            | ApiError::Engine(_)
            | ApiError::NotAcceptable
            | ApiError::Overloaded
            | ApiError::StorageUnavailable
            | ApiError::InvalidRequest { .. } => Value::Null,
            ApiError::TooManyStreams { max } => json!({ "max_streams": max }),
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Unauthorized(_) | ApiError::Token(_) => StatusCode::UNAUTHORIZED,
            ApiError::Query(QueryError::UriTooLong { .. }) => StatusCode::URI_TOO_LONG,
            ApiError::Engine(Refusal::Forbidden { .. }) => StatusCode::FORBIDDEN,
            ApiError::Query(_) | ApiError::Engine(_) | ApiError::InvalidRequest { .. } => {
                StatusCode::BAD_REQUEST
            }
            ApiError::Timeout { .. }
            | ApiError::Overloaded
            | ApiError::TooManyStreams { .. }
            | ApiError::StorageUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::NotAcceptable => StatusCode::NOT_ACCEPTABLE,
            ApiError::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        match self {
            ApiError::Unauthorized(refusal) => {
                // A Bearer token presented (possibly empty) is an invalid one,
                // known or not: an expired token is refused like an unknown one,
                // and only the message says why.
                let challenge = match refusal {
                    Unauthorized::Missing => r#"Bearer realm="stq""#,
                    Unauthorized::Unknown | Unauthorized::Expired => {
                        r#"Bearer realm="stq", error="invalid_token""#
                    }
                };
                response.insert_header((header::WWW_AUTHENTICATE, challenge));
            }
            ApiError::Token(_) => {
                response.insert_header((
                    header::WWW_AUTHENTICATE,
                    r#"Bearer realm="stq", error="invalid_token""#,
                ));
            }
            ApiError::MethodNotAllowed => {
                response.insert_header((header::ALLOW, "GET, HEAD"));
            }
            ApiError::Overloaded
            | ApiError::TooManyStreams { .. }
            | ApiError::StorageUnavailable => {
                response.insert_header((header::RETRY_AFTER, "1"));
            }
            _ => {}
        }
        response.content_type(JSON).body(self.body())
    }
}

impl ApiError {
    /// The contract's JSON body of it (docs/api.md section 7), which a stream's
    /// `error` event carries too.
    pub(crate) fn body(&self) -> Vec<u8> {
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
        serde_json::to_vec(&body).expect("serializing plain data cannot fail")
    }
}

impl From<Overloaded> for ApiError {
    fn from(_: Overloaded) -> ApiError {
        ApiError::Overloaded
    }
}

/// Every endpoint's path, in the order they are listed to people: `/units, ...
/// and /stations`.
fn endpoint_paths() -> String {
    let paths: Vec<&str> = Endpoint::ALL
        .iter()
        .map(|endpoint| endpoint.spec().path)
        .collect();
    match paths.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, others)) => format!("{} and {last}", others.join(", ")),
        None => String::new(),
    }
}

/// `application/json`, without parameters, as the contract writes it.
pub(crate) const JSON: &str = "application/json";

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::body::MessageBody;

    fn body_of(error: &ApiError) -> Value {
        let bytes = error.error_response().into_body().try_into_bytes().unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn every_body_has_exactly_code_message_details() {
        let errors = [
            ApiError::NotFound,
            ApiError::Query(QueryError::UnknownParameter {
                parameter: "x".into(),
            }),
            ApiError::Engine(Refusal::Forbidden {
                stations: vec!["A".into()],
            }),
            ApiError::Internal {
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
        assert_eq!(
            body_of(&ApiError::NotFound)["error"]["details"],
            Value::Null
        );
        assert_eq!(
            body_of(&errors[3])["error"]["details"],
            json!({"request_id": "r"})
        );
    }

    /// Issue 33: the list is made from the endpoint table, so that a new endpoint
    /// joins it; this is the text docs/api.md shows.
    #[test]
    fn issue_33_not_found_names_every_endpoint() {
        assert_eq!(
            ApiError::NotFound.to_string(),
            "no such path; the endpoints are /units, /metrics, /units/summary, \
             /metrics/summary, /stations and /metrics/control"
        );
    }

    #[test]
    fn a_query_string_over_the_limit_is_414() {
        let error = ApiError::Query(QueryError::UriTooLong {
            length: 9000,
            max: 8192,
        });
        assert_eq!(error.status_code(), StatusCode::URI_TOO_LONG);
        assert_eq!(
            body_of(&error)["error"]["details"],
            json!({"length": 9000, "max_query_bytes": 8192})
        );
    }

    #[test]
    fn unauthorized_challenges_name_the_realm() {
        let header_of = |refusal| {
            ApiError::from(refusal)
                .error_response()
                .headers()
                .get(header::WWW_AUTHENTICATE)
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(header_of(Unauthorized::Missing), r#"Bearer realm="stq""#);
        assert_eq!(
            header_of(Unauthorized::Unknown),
            r#"Bearer realm="stq", error="invalid_token""#
        );
    }

    #[test]
    fn issue_24_an_expired_token_is_refused_like_an_unknown_one_but_says_so() {
        let expired = ApiError::from(Unauthorized::Expired);
        let unknown = ApiError::from(Unauthorized::Unknown);
        assert_eq!(expired.status_code(), StatusCode::UNAUTHORIZED);
        assert_eq!(expired.code(), "unauthorized");
        let challenge = |error: &ApiError| {
            error
                .error_response()
                .headers()
                .get(header::WWW_AUTHENTICATE)
                .cloned()
        };
        assert_eq!(challenge(&expired), challenge(&unknown));
        let body = body_of(&expired);
        assert_eq!(body["error"]["details"], Value::Null);
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("expired"), "{message}");
        assert!(!body_of(&unknown)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expired"));
    }
}
