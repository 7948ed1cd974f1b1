//! Fuzz target for the snapshot line parser,
//! `stq_core::domain::record::parse_line` (docs/api.md section 2): the input, when it is UTF-8, is one line of a `*.units.jsonl` and of
//! a `*.metrics.jsonl` file. It must never panic; an accepted line must render a
//! JSON record with exactly its kind's fields, each as the line wrote it
//! (`time_created` verbatim); a rejected line must leave the output buffer alone.
//! The invariants are stq-core's `Kind::check_line` (its `checks` feature), shared
//! with its proptest properties (`domain/parser_properties.rs`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use stq_core::domain::record::Kind;

fuzz_target!(|data: &[u8]| {
    // The loader turns invalid UTF-8 into a reason before the parser sees it.
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    Kind::Units.check_line(line);
    Kind::Metrics.check_line(line);
});
