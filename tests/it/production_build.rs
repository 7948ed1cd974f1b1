//! Issue 9: a production build (without the `fault-injection` feature) never reads
//! `X-Stq-Fault`. Run by `cargo test` without features against its own binary; in a
//! build with the feature (whose binary acts on the header, as `faults.rs` shows) it
//! is ignored unless run with `--ignored` and `STQ_TEST_BINARY` naming a production
//! build, as `.ci/run` does with the release build the Debian package is made of
//! (one build of the service fewer than a `cargo test` without features).

use crate::common::*;

/// Every fault a test build would act on is, here, a header like any other: the
/// answers are the ordinary ones, and no shard restarts.
#[test]
#[cfg_attr(
    feature = "fault-injection",
    ignore = "needs STQ_TEST_BINARY, a build without fault-injection (.ci/run)"
)]
fn issue_9_a_production_build_ignores_every_fault_header() {
    if cfg!(feature = "fault-injection") {
        assert!(
            std::env::var_os("STQ_TEST_BINARY").is_some(),
            "this build's binary acts on X-Stq-Fault: name a production build in STQ_TEST_BINARY"
        );
    }
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
