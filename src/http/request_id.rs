//! Request ids (docs/api.md section 7): the client's `X-Request-Id` when it is
//! printable and short, else a fresh UUID; echoed on the response, quoted in the
//! envelope, an internal error and the access line.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use actix_web::{HttpMessage as _, HttpRequest};
use stq_core::domain::Principal;

pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The request id of a request, set by the middleware; and who its token names,
/// once the handler has checked it, for the access line (a tokens file entry's
/// name, or a JSON Web Token's `sub`; never the token).
///
/// The id is shared, not copied: the middleware, the handler and the access line
/// each hold it, and a request stays on one worker's thread. One extension holds
/// both, since each extension a request carries is an allocation of its own.
#[derive(Debug)]
pub(crate) struct RequestId {
    id: Rc<str>,
    holder: RefCell<Option<Arc<Principal>>>,
}

impl RequestId {
    /// The extension of a request whose id is `id`.
    pub(crate) fn new(id: Rc<str>) -> RequestId {
        RequestId {
            id,
            holder: RefCell::new(None),
        }
    }

    /// The id the middleware gave `request` (or, outside it, the one it would).
    pub(crate) fn of(request: &HttpRequest) -> Rc<str> {
        request
            .extensions()
            .get::<RequestId>()
            .map_or_else(|| request_id(request.headers()), |id| Rc::clone(&id.id))
    }

    /// Records that `request`'s token names `principal`.
    pub(crate) fn set_holder(request: &HttpRequest, principal: &Arc<Principal>) {
        if let Some(id) = request.extensions().get::<RequestId>() {
            *id.holder.borrow_mut() = Some(Arc::clone(principal));
        }
    }

    /// Who the request's token names, once the handler has checked it.
    pub(crate) fn holder(&self) -> Option<Arc<Principal>> {
        self.holder.borrow().clone()
    }
}

/// The client's `X-Request-Id` when it is 1 to 128 visible ASCII characters, else a
/// fresh UUID v4.
pub(crate) fn request_id(headers: &HeaderMap) -> Rc<str> {
    headers
        .get(X_REQUEST_ID)
        .map(HeaderValue::as_bytes)
        .filter(|id| {
            (1..=128).contains(&id.len()) && id.iter().all(|byte| (b'!'..=b'~').contains(byte))
        })
        .and_then(|id| std::str::from_utf8(id).ok())
        .map_or_else(fresh, Rc::from)
}

/// A fresh UUID v4, written without the formatting machinery.
fn fresh() -> Rc<str> {
    let mut text = [0; uuid::fmt::Hyphenated::LENGTH];
    Rc::from(&*uuid::Uuid::new_v4().hyphenated().encode_lower(&mut text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_echoed_only_when_well_formed() {
        let with = |value: &[u8]| {
            let mut headers = HeaderMap::new();
            headers.insert(X_REQUEST_ID, HeaderValue::from_bytes(value).unwrap());
            request_id(&headers)
        };
        assert_eq!(&*with(b"abc-123"), "abc-123");
        assert_eq!(&*with(b"!\"~"), "!\"~");
        let long = "x".repeat(128);
        assert_eq!(*with(long.as_bytes()), *long);
        for bad in [&b"x".repeat(129)[..], b"a b", b"caf\xc3\xa9"] {
            let fresh = with(bad);
            assert!(uuid::Uuid::parse_str(&fresh).is_ok(), "{fresh}");
        }
        assert_eq!(request_id(&HeaderMap::new()).len(), 36);
    }
}
