//! The admin listener's answers besides the metrics (docs/api.md section 8):
//! `GET /files`, each snapshot file of the generation served and what its last
//! read found. No token: the admin listener is the operator's, on an address of
//! its own.

use actix_web::HttpResponse;

use super::error::JSON;
use crate::engine::Engine;

/// `GET /files`: `{"files": [...]}`, one object per snapshot file in path order.
pub(super) async fn files(engine: Engine) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(JSON)
        .body(engine.catalog().files_json())
}
