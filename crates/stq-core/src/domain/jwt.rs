//! A JSON Web Token's text (docs/api.md section 16), read before any key is chosen
//! and any signature checked: whether a bearer token has a JWT's shape, what its
//! header names, and what its claims say once its signature has verified. The
//! service (`src/jwt/`) verifies the signature and the registered claims with
//! jsonwebtoken; everything it reads of the token's text on its own is here, pure,
//! where the fuzz target `bearer_token` reaches it.
//!
//! The header is read here so that `none`, the HMAC algorithms and every other
//! algorithm stq does not accept are refused by name, before a key is chosen.

use std::collections::BTreeSet;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chrono::DateTime;
use serde_json::{Map, Value};

use super::auth::Principal;
use super::time::Timestamp;

/// How far a token's `exp`, `nbf` and `iat` may be off the server's clock.
pub const LEEWAY_SECONDS: u64 = 30;

/// Why a JSON Web Token was refused: the 401's message (never the token).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The token is not three parts of base64url JSON, or its header lacks what it needs.
    #[error("the bearer token is not a JSON Web Token: {0}")]
    Malformed(&'static str),
    /// The header names an algorithm stq does not accept (`none`, HMAC, ...).
    #[error("the token's algorithm {0:?} is not accepted; RS256, PS256, ES256 and EdDSA are")]
    Algorithm(String),
    /// The header's `kid` names no key of the set.
    #[error("the key set has no key {0:?}")]
    UnknownKey(String),
    /// The header has no `kid`, and the set more than one key.
    #[error("the token names no key id, and the key set has more than one key")]
    NoKeyId,
    /// The key's type or own `alg` is not for the header's algorithm.
    #[error("the token's algorithm {0} is not the one its key is for")]
    KeyMismatch(String),
    /// The signature does not verify with the key.
    #[error("the token's signature does not verify")]
    Signature,
    /// `exp` has passed, beyond the leeway.
    #[error("the token has expired")]
    Expired,
    /// `nbf` is still to come, beyond the leeway.
    #[error("the token is not valid yet (nbf)")]
    NotYetValid,
    /// `iat` is still to come, beyond the leeway.
    #[error("the token was issued in the future (iat)")]
    IssuedLater,
    /// A required claim is missing.
    #[error("the token has no `{0}` claim")]
    MissingClaim(String),
    /// `iss` is not `--jwt-issuer`.
    #[error("the token's issuer is not the one stq trusts")]
    Issuer,
    /// `aud` does not name `--jwt-audience`.
    #[error("the token's audience does not include stq's")]
    Audience,
    /// The stations claim is neither `"*"` nor a list of strings.
    #[error("the token's `{0}` claim is neither \"*\" nor a list of station ids")]
    Stations(String),
    /// The claims are not what their names require.
    #[error("the token's claims cannot be read: {0}")]
    Claims(String),
}

/// The algorithms stq accepts (docs/api.md section 16).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RS256,
    /// RSASSA-PSS with SHA-256.
    PS256,
    /// ECDSA over P-256 with SHA-256.
    ES256,
    /// Ed25519.
    EdDSA,
}

impl Algorithm {
    /// Its name, as a header's `alg` and a key's `alg` write it.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::RS256 => "RS256",
            Algorithm::PS256 => "PS256",
            Algorithm::ES256 => "ES256",
            Algorithm::EdDSA => "EdDSA",
        }
    }
}

/// What a token's header says: its algorithm and key id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// `alg`.
    pub algorithm: Algorithm,
    /// `kid`, when it has one.
    pub key_id: Option<String>,
}

/// The bearer token of `authorization` when it has a JWT's shape: three parts of
/// the base64url alphabet joined by dots, the signature possibly empty (as
/// `alg: none` leaves it, to be refused by name).
pub fn json_web_token(authorization: &[u8]) -> Option<&str> {
    let value = authorization.trim_ascii();
    let space = value.iter().position(|byte| *byte == b' ')?;
    let (scheme, token) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = std::str::from_utf8(token.trim_ascii_start()).ok()?;
    let base64url = |part: &str| {
        part.bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
    };
    let mut parts = token.split('.');
    let (header, claims, signature) = (parts.next()?, parts.next()?, parts.next()?);
    (parts.next().is_none()
        && !header.is_empty()
        && !claims.is_empty()
        && [header, claims, signature].into_iter().all(base64url))
    .then_some(token)
}

/// The header of `token`, refused unless it names an accepted algorithm.
pub fn header_of(token: &str) -> Result<Header, Refusal> {
    let encoded = token.split('.').next().unwrap_or_default();
    let bytes = URL_SAFE_NO_PAD
        .decode(encoded)
        .map_err(|_| Refusal::Malformed("its header is not base64url"))?;
    let header: Map<String, Value> =
        serde_json::from_slice(&bytes).map_err(|_| Refusal::Malformed("its header is not JSON"))?;
    let name = header
        .get("alg")
        .and_then(Value::as_str)
        .ok_or(Refusal::Malformed("its header names no algorithm"))?;
    let algorithm = match name {
        "RS256" => Algorithm::RS256,
        "PS256" => Algorithm::PS256,
        "ES256" => Algorithm::ES256,
        "EdDSA" => Algorithm::EdDSA,
        other => return Err(Refusal::Algorithm(other.to_owned())),
    };
    let key_id = match header.get("kid") {
        None => None,
        Some(Value::String(id)) => Some(id.clone()),
        Some(_) => return Err(Refusal::Malformed("its `kid` is not a string")),
    };
    Ok(Header { algorithm, key_id })
}

/// The principal of a token whose signature, `exp`, `nbf`, issuer and audience
/// have verified, at `now` (seconds since the epoch), the token's SHA-256 `digest`:
/// its `iat` not in the future, its stations from the claim `stations_claim`, named
/// by its `sub` (or nothing), kept until its `exp` and the leeway.
pub fn read_claims(
    claims: &Map<String, Value>,
    stations_claim: &str,
    now: u64,
    digest: [u8; 32],
) -> Result<Principal, Refusal> {
    if let Some(issued) = claims.get("iat") {
        let issued = issued
            .as_u64()
            .ok_or_else(|| Refusal::Claims("`iat` is not a number of seconds".into()))?;
        if issued > now + LEEWAY_SECONDS {
            return Err(Refusal::IssuedLater);
        }
    }
    let claim = stations_claim;
    let stations = match claims.get(claim) {
        None => return Err(Refusal::MissingClaim(claim.to_owned())),
        Some(Value::String(star)) if star == "*" => None,
        Some(Value::Array(ids)) => Some(
            ids.iter()
                .map(|id| id.as_str().map(str::to_owned))
                .collect::<Option<BTreeSet<String>>>()
                .ok_or_else(|| Refusal::Stations(claim.to_owned()))?,
        ),
        Some(_) => return Err(Refusal::Stations(claim.to_owned())),
    };
    let expires = claims
        .get("exp")
        .and_then(Value::as_i64)
        // `exp` may be any number jsonwebtoken took for a time still to come, up to
        // i64::MAX: the leeway must not overflow it.
        .and_then(|exp| exp.checked_add(LEEWAY_SECONDS as i64))
        .and_then(|exp| DateTime::from_timestamp(exp, 0))
        .map(Timestamp::from);
    let subject = claims.get("sub").and_then(Value::as_str).unwrap_or("");
    Ok(Principal::verified(
        subject.to_owned(),
        stations,
        digest,
        expires,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What has a JWT's shape, said the plain way: `Bearer`, spaces, then three
    /// dot-separated parts of the base64url alphabet, the first two not empty.
    fn naive_shape(value: &str) -> Option<String> {
        let value = value.trim_matches(|c: char| c.is_ascii_whitespace());
        let (scheme, rest) = value.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let token = rest.trim_start_matches(|c: char| c.is_ascii_whitespace());
        let parts: Vec<&str> = token.split('.').collect();
        let alphabet = |part: &&str| {
            part.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        };
        (parts.len() == 3 && !parts[0].is_empty() && !parts[1].is_empty())
            .then_some(())
            .filter(|()| parts.iter().all(alphabet))
            .map(|()| token.to_owned())
    }

    /// A tokens file of one token, `stq-fuzz-token`, for every station.
    fn tokens() -> crate::domain::auth::Tokens {
        let digest = crate::domain::auth::Tokens::hash("stq-fuzz-token");
        format!(r#"{{"tokens":[{{"name":"fuzz","sha256":"{digest}","stations":"*"}}]}}"#)
            .parse()
            .unwrap()
    }

    /// The values the claims and header readers look at, and others.
    fn json_value() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("\"*\"".to_owned()),
            Just("[\"ST-01\",\"ST-02\"]".to_owned()),
            Just("[\"ST-01\",7]".to_owned()),
            Just("9223372036854775807".to_owned()),
            Just("-9223372036854775808".to_owned()),
            Just("18446744073709551615".to_owned()),
            Just("1.5e300".to_owned()),
            Just("null".to_owned()),
            Just("\"RS256\"".to_owned()),
            Just("\"none\"".to_owned()),
            (0u64..4_000_000_000).prop_map(|seconds| seconds.to_string()),
            "\\PC{0,12}".prop_map(|text| serde_json::to_string(&text).unwrap()),
        ]
    }

    /// A JSON object of some of the names the readers look at.
    fn json_object() -> impl Strategy<Value = String> {
        let name = prop::sample::select(vec![
            "alg",
            "kid",
            "typ",
            "iat",
            "exp",
            "nbf",
            "sub",
            "stq_stations",
        ]);
        prop::collection::vec((name, json_value()), 0..6).prop_map(|members| {
            let members: Vec<String> = members
                .iter()
                .map(|(name, value)| format!("\"{name}\":{value}"))
                .collect();
            format!("{{{}}}", members.join(","))
        })
    }

    proptest! {
        #[test]
        fn any_authorization_keeps_the_checks(value in prop::collection::vec(any::<u8>(), 0..80), now in 0u64..4_000_000_000) {
            tokens().check_authorization(&value, now);
        }

        #[test]
        fn any_header_and_claims_keep_the_checks(header in json_object(), claims in json_object(), now in 0u64..4_000_000_000) {
            let token = format!("Bearer {}.{}.c2ln", URL_SAFE_NO_PAD.encode(header), URL_SAFE_NO_PAD.encode(claims));
            tokens().check_authorization(token.as_bytes(), now);
        }

        #[test]
        fn the_shape_is_the_naive_one(value in "[ \\t]{0,2}(Bearer|bearer|BEARER|Basic|)[ ]{0,2}[A-Za-z0-9_.+=/-]{0,24}[ ]{0,1}") {
            prop_assert_eq!(json_web_token(value.as_bytes()).map(str::to_owned), naive_shape(&value));
        }

        #[test]
        fn any_header_is_read_or_refused_without_a_panic(token in "[A-Za-z0-9_.-]{0,64}", json in "\\PC{0,40}") {
            let _ = header_of(&token);
            let _ = header_of(&format!("{}.e30.", URL_SAFE_NO_PAD.encode(json)));
        }
    }

    /// An `exp` as far off as i64 goes (jsonwebtoken takes it for a time still to
    /// come) is read without overflowing: `exp + 30` panicked in a debug build.
    #[test]
    fn an_exp_at_the_end_of_i64_is_read_without_overflowing() {
        for exp in [i64::MAX, i64::MAX - 29, i64::MAX - 30] {
            let claims: Map<String, Value> =
                serde_json::from_value(serde_json::json!({"exp": exp, "stq_stations": "*"}))
                    .unwrap();
            let read = read_claims(&claims, "stq_stations", 1_700_000_000, [0; 32]).unwrap();
            // Past what a timestamp holds: kept until the key set changes.
            assert_eq!(read.expires, None, "{exp}");
        }
        let claims: Map<String, Value> =
            serde_json::from_value(serde_json::json!({"exp": 1_800_000_000, "stq_stations": "*"}))
                .unwrap();
        let read = read_claims(&claims, "stq_stations", 1_700_000_000, [0; 32]).unwrap();
        let expected = DateTime::from_timestamp(1_800_000_030, 0).unwrap();
        assert_eq!(read.expires, Some(Timestamp::from(expected)));
    }

    #[test]
    fn only_three_base64url_parts_have_a_json_web_tokens_shape() {
        assert_eq!(json_web_token(b"Bearer a.b.c"), Some("a.b.c"));
        assert_eq!(json_web_token(b"bearer  eyJ.eyJ."), Some("eyJ.eyJ."));
        assert_eq!(json_web_token(b"Bearer stq_abc"), None);
        assert_eq!(json_web_token(b"Bearer a.b.c.d"), None);
        assert_eq!(json_web_token(b"Bearer a..c"), None);
        assert_eq!(json_web_token(b"Bearer a.b+.c"), None);
        assert_eq!(json_web_token(b"Basic a.b.c"), None);
    }

    fn header(json: &str) -> String {
        format!("{}.e30.", URL_SAFE_NO_PAD.encode(json))
    }

    #[test]
    fn none_and_hmac_are_refused_by_name() {
        for name in ["none", "HS256", "HS384", "HS512", "RS512"] {
            let token = header(&format!(r#"{{"alg":"{name}"}}"#));
            assert!(
                matches!(header_of(&token), Err(Refusal::Algorithm(named)) if named == name),
                "{name}"
            );
        }
        let token = header(r#"{"alg":"EdDSA","kid":"k"}"#);
        let parsed = header_of(&token).unwrap();
        assert_eq!(parsed.algorithm, Algorithm::EdDSA);
        assert_eq!(parsed.key_id.as_deref(), Some("k"));
        assert!(matches!(
            header_of(&header(r#"{"alg":"EdDSA","kid":7}"#)),
            Err(Refusal::Malformed(_))
        ));
    }
}
