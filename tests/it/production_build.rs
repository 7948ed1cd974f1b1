//! Issue 9: a production build (without the `fault-injection` feature) never reads
//! `X-Stq-Fault`. Run by `cargo test` without features, as `.ci/run` does; in a
//! build with the feature this file compiles to nothing, and `faults.rs` runs.

use crate::common::*;

/// Every fault a test build would act on is, here, a header like any other: the
/// answers are the ordinary ones, and no shard restarts.
#[test]
fn issue_9_a_production_build_ignores_every_fault_header() {
    let server = server();
    let path = format!("/units?{WINDOW}&direction=input,output");
    let plain = server.request_as("GET", &path, Some(OPS), &[]);
    assert_eq!(plain.status, 200, "{}", plain.context());
    for fault in ["handler-panic", "shard-panic", "shard-death", "delay=60000"] {
        let asked = server.request_as("GET", &path, Some(OPS), &[("X-Stq-Fault", fault)]);
        assert_eq!(asked.status, 200, "{fault}: {}", asked.context());
        assert_eq!(
            asked.json()["data"],
            plain.json()["data"],
            "{fault}: the same records"
        );
    }
}
