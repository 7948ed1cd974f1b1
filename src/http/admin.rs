//! The admin listener's answers besides the metrics (docs/api.md section 8):
//! `GET /files`, each snapshot file of the generation served and what its last
//! read found. No token: the admin listener is the operator's, on an address of
//! its own.

use actix_web::HttpResponse;
use serde_json::{json, Value};
use stq_core::data::catalog::Catalog;

use super::error::JSON;
use crate::engine::Engine;

/// `GET /files`: `{"files": [...]}`, one object per snapshot file in path order.
pub(super) async fn files(engine: Engine) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(JSON)
        .body(files_of(&engine.catalog()).to_string())
}

/// The body of `/files` for the generation of `catalog`.
fn files_of(catalog: &Catalog) -> Value {
    let files: Vec<Value> = catalog
        .file_statuses()
        .map(|file| {
            json!({
                "path": file.path,
                "kind": file.kind,
                "state": if file.held { "held" } else { "loaded" },
                "bytes": file.bytes,
                "records": file.records,
                "skipped_lines": file.skipped_lines,
                "pending_lines": file.pending_lines,
                "errors": file.errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "files": files })
}
