//! Faults injected on purpose, so that tests can show stq surviving them: a panic
//! in a handler or in a shard, a shard actor that dies, a query that runs long.
//!
//! A request asks for one with the header `X-Stq-Fault` (after its token is
//! accepted), and only a build with the `fault-injection` feature reads it: in any
//! other build [`Fault::requested`] is always `None`, so no request can trigger one.
//! `cargo test --all-features` builds the binary that the fault tests run.

use std::time::Duration;

/// A fault a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The HTTP handler panics.
    HandlerPanic,
    /// Something goes wrong in the shards the query reaches.
    Shard(ShardFault),
    /// The envelope's assembly holds its query slot this long first, as a slow
    /// stretch of computing would.
    Delay(Duration),
}

/// A fault struck inside a shard actor, while it handles the query's scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardFault {
    /// The scan panics; the actor survives it.
    Panic,
    /// The actor dies: its mailbox closes with the query in it.
    Death,
}

impl Fault {
    /// The fault a request's `X-Stq-Fault` value asks for; always `None` without
    /// `fault-injection`.
    pub fn requested(header: Option<&str>) -> Option<Fault> {
        if cfg!(feature = "fault-injection") {
            header.and_then(Fault::parse)
        } else {
            let _ = header;
            None
        }
    }

    /// `handler-panic`, `shard-panic`, `shard-death` or `delay=<milliseconds>`.
    fn parse(text: &str) -> Option<Fault> {
        match text {
            "handler-panic" => Some(Fault::HandlerPanic),
            "shard-panic" => Some(Fault::Shard(ShardFault::Panic)),
            "shard-death" => Some(Fault::Shard(ShardFault::Death)),
            _ => text
                .strip_prefix("delay=")
                .and_then(|milliseconds| milliseconds.parse().ok())
                .map(|milliseconds| Fault::Delay(Duration::from_millis(milliseconds))),
        }
    }

    pub fn in_shard(this: Option<Fault>) -> Option<ShardFault> {
        match this {
            Some(Fault::Shard(fault)) => Some(fault),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_read_only_by_a_build_with_the_feature() {
        let expected = if cfg!(feature = "fault-injection") {
            Some(Fault::Shard(ShardFault::Panic))
        } else {
            None
        };
        assert_eq!(Fault::requested(Some("shard-panic")), expected);
    }

    #[test]
    fn fault_names_parse() {
        assert_eq!(Fault::parse("handler-panic"), Some(Fault::HandlerPanic));
        assert_eq!(
            Fault::parse("shard-death"),
            Some(Fault::Shard(ShardFault::Death))
        );
        assert_eq!(
            Fault::parse("delay=250"),
            Some(Fault::Delay(Duration::from_millis(250)))
        );
        for bad in ["", "delay=", "delay=-1", "panic", "Shard-Panic"] {
            assert_eq!(Fault::parse(bad), None, "{bad}");
        }
    }
}
