//! Fuzz target for what reads an `Authorization` header (docs/api.md sections 3
//! and 16) before any signature is checked: the tokens file's bearer token
//! (`Tokens::authenticate`) and stq-core's `domain::jwt` (a JWT's shape, its
//! header, its claims). None may panic; the two readers agree on the token, an
//! accepted header and claims say what their JSON says, and no refusal's message
//! holds the token. The invariants are stq-core's `Tokens::check_authorization`
//! (its `checks` feature), shared with its proptest properties (`domain/jwt.rs`).
//!
//! The first byte chooses: an even byte, the rest is the header's value as sent;
//! an odd one, the rest is a JWT's header JSON, claims JSON and signature,
//! separated by 0xFF bytes, each part encoded as base64url here and joined into
//! `Bearer HEADER.CLAIMS.SIGNATURE`, so that the fuzzer works on the JSON the
//! readers see rather than on its encoding. The first byte also moves "now" (the
//! time claims are read at) over 128 steps of about three years from the epoch.

#![no_main]

use std::sync::OnceLock;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use stq_core::domain::Tokens;

/// A tokens file of one token, `stq-fuzz-token`, for every station.
fn tokens() -> &'static Tokens {
    static TOKENS: OnceLock<Tokens> = OnceLock::new();
    TOKENS.get_or_init(|| {
        let digest = Tokens::hash("stq-fuzz-token");
        format!(r#"{{"tokens":[{{"name":"fuzz","sha256":"{digest}","stations":"*"}}]}}"#)
            .parse()
            .expect("a tokens file")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    let now = u64::from(choice >> 1) * 100_000_000;
    if choice & 1 == 0 {
        tokens().check_authorization(rest, now);
        return;
    }
    let mut parts = rest.splitn(3, |byte| *byte == 0xFF);
    let mut part = || URL_SAFE_NO_PAD.encode(parts.next().unwrap_or_default());
    let (header, claims, signature) = (part(), part(), part());
    let value = format!("Bearer {header}.{claims}.{signature}");
    tokens().check_authorization(value.as_bytes(), now);
});
