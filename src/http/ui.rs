//! The overview page (docs/api.md section 11): `GET /` and its assets under `/ui/`,
//! compiled into the binary so that stq serves the page alone, with nothing fetched
//! from elsewhere. No token is needed to load them: the page asks for one and sends
//! it to the API itself.

use actix_web::http::header::{self, HeaderValue};
use actix_web::{web, HttpResponse};

use super::get_and_head;

/// One file of the page, as served.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

const HTML: &str = "text/html; charset=utf-8";
const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

/// Every path the page may load. A path not listed here (`/ui/x`) is the contract's
/// 404, on every method, like any unknown path.
static ASSETS: [Asset; 6] = [
    Asset {
        path: "/",
        content_type: HTML,
        body: include_bytes!("ui/index.html"),
    },
    Asset {
        path: "/ui/app.js",
        content_type: JAVASCRIPT,
        body: include_bytes!("ui/app.js"),
    },
    Asset {
        path: "/ui/app.css",
        content_type: CSS,
        body: include_bytes!("ui/app.css"),
    },
    Asset {
        path: "/ui/vendor/uPlot.iife.min.js",
        content_type: JAVASCRIPT,
        body: include_bytes!("ui/vendor/uPlot.iife.min.js"),
    },
    Asset {
        path: "/ui/vendor/uPlot.min.css",
        content_type: CSS,
        body: include_bytes!("ui/vendor/uPlot.min.css"),
    },
    Asset {
        path: "/ui/vendor/LICENSE",
        content_type: TEXT,
        body: include_bytes!("ui/vendor/LICENSE"),
    },
];

/// The browser may load and connect to this origin only: the page works with
/// nothing from elsewhere, and an injected script could not send a token away.
const CONTENT_SECURITY_POLICY: &str =
    "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The page's routes, each answered on GET and HEAD (405 otherwise).
pub(super) fn routes(config: &mut web::ServiceConfig) {
    for asset in &ASSETS {
        config.service(get_and_head(
            asset.path,
            move || async move { asset.response() },
        ));
    }
}

impl Asset {
    fn response(&self) -> HttpResponse {
        let mut response = HttpResponse::Ok();
        response
            .content_type(self.content_type)
            .insert_header((
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CONTENT_SECURITY_POLICY),
            ))
            .insert_header((
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ));
        response.body(self.body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_what_is_served_here() {
        let page = std::str::from_utf8(ASSETS[0].body).unwrap();
        for reference in page
            .split(['"', '\''])
            .filter(|text| text.starts_with("/ui/"))
        {
            assert!(
                ASSETS.iter().any(|asset| asset.path == reference),
                "the page refers to {reference}, which is not served"
            );
        }
        assert!(!page.contains("http://") && !page.contains("https://"));
    }
}
