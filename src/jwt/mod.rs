//! JSON Web Tokens beside the tokens file (docs/api.md section 16): a bearer
//! token of three base64url parts is verified against the identity provider's
//! key set ([`keys`]), its claims checked, and its stations read from a claim.
//!
//! The header is read here before any key is chosen, so that `none`, the HMAC
//! algorithms and every other stq does not accept are refused by name, and a key
//! is used only with the algorithm its type (and its own `alg`, when it names one)
//! is for: an RSA public key is never taken for an HMAC secret. The signature and
//! the registered claims are jsonwebtoken's, over ring.
//!
//! A verified token is kept by its SHA-256 until it expires, so that a dashboard's
//! requests with one token pay one signature check; a key set that changed empties
//! the cache.

mod keys;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chrono::DateTime;
use jsonwebtoken::{Algorithm, Validation};
use parking_lot::{Mutex, RwLock};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use stq_core::domain::auth::{Principal, Tokens, Unauthorized};
use stq_core::domain::time::Timestamp;

pub use keys::KeySource;
use keys::{Fetcher, KeySet};

/// How far a token's `exp`, `nbf` and `iat` may be off the server's clock.
const LEEWAY_SECONDS: u64 = 30;
/// How often a fetched key set is fetched again.
const REFRESH_INTERVAL: Duration = Duration::from_secs(600);
/// The shortest time between two fetches for a key id the set lacks: a stream of
/// tokens naming made-up keys must not become a stream of fetches.
const REFETCH_INTERVAL: Duration = Duration::from_secs(60);
/// The verified tokens kept at most; past it, the expired go, or else all.
const CACHE_CAPACITY: usize = 10_000;

/// `--jwt-jwks`, `--jwt-issuer`, `--jwt-audience` and `--jwt-stations-claim`.
#[derive(Clone, Debug)]
pub struct JwtSettings {
    pub source: KeySource,
    pub issuer: String,
    pub audience: Option<String>,
    pub stations_claim: String,
}

/// Why a JSON Web Token was refused: the 401's message (never the token).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the bearer token is not a JSON Web Token: {0}")]
    Malformed(&'static str),
    #[error("the token's algorithm {0:?} is not accepted; RS256, PS256, ES256 and EdDSA are")]
    Algorithm(String),
    #[error("the key set has no key {0:?}")]
    UnknownKey(String),
    #[error("the token names no key id, and the key set has more than one key")]
    NoKeyId,
    #[error("the token's algorithm {0} is not the one its key is for")]
    KeyMismatch(String),
    #[error("the token's signature does not verify")]
    Signature,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet (nbf)")]
    NotYetValid,
    #[error("the token was issued in the future (iat)")]
    IssuedLater,
    #[error("the token has no `{0}` claim")]
    MissingClaim(String),
    #[error("the token's issuer is not the one stq trusts")]
    Issuer,
    #[error("the token's audience does not include stq's")]
    Audience,
    #[error("the token's `{0}` claim is neither \"*\" nor a list of station ids")]
    Stations(String),
    #[error("the token's claims cannot be read: {0}")]
    Claims(String),
}

/// Why a request's token was refused: the tokens file's refusal, or a JWT's.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error(transparent)]
    Tokens(#[from] Unauthorized),
    #[error(transparent)]
    Jwt(#[from] Refusal),
}

/// The principal of an `Authorization` header value at `now`: a JSON Web Token's
/// when `jwt` is set and the bearer token has a JWT's shape, else the tokens
/// file's.
pub fn authenticate(
    tokens: &Tokens,
    jwt: Option<&Verifier>,
    authorization: Option<&[u8]>,
    now: Timestamp,
) -> Result<Arc<Principal>, Refused> {
    match (jwt, authorization.and_then(json_web_token)) {
        (Some(verifier), Some(token)) => Ok(verifier.verify(token, now)?),
        _ => Ok(tokens.authenticate(authorization, now)?),
    }
}

/// The bearer token of `authorization` when it has a JWT's shape: three parts of
/// the base64url alphabet joined by dots, the signature possibly empty (as
/// `alg: none` leaves it, to be refused by name).
fn json_web_token(authorization: &[u8]) -> Option<&str> {
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

/// What a token's header says: its algorithm and key id.
struct Header {
    algorithm: Algorithm,
    key_id: Option<String>,
}

/// The header of `token`, refused unless it names an accepted algorithm.
fn header_of(token: &str) -> Result<Header, Refusal> {
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

/// Verifies JSON Web Tokens against the provider's key set, and keeps those it
/// verified until they expire.
pub struct Verifier {
    settings: JwtSettings,
    keys: RwLock<Arc<KeySet>>,
    /// The SHA-256 of the file or answer the set in use was read from.
    source_digest: Mutex<Option<[u8; 32]>>,
    cache: Mutex<HashMap<[u8; 32], Arc<Principal>>>,
    /// The fetcher of a URL's set; `None` for a file's.
    fetcher: Option<Fetcher>,
    /// When a token's unknown key id last asked for a fetch.
    refetched: Mutex<Option<Instant>>,
    /// Wakes the refresh task for a fetch now.
    refetch: tokio::sync::Notify,
}

impl Verifier {
    /// The verifier of `settings`, with the key set read or fetched now: a set that
    /// cannot be had is a start-up error.
    pub async fn start(settings: JwtSettings) -> Result<Arc<Verifier>, String> {
        let (set, digest, fetcher) = match &settings.source {
            KeySource::File(path) => {
                let (set, digest) = read_file(path)?;
                (set, Some(digest), None)
            }
            KeySource::Url(url) => {
                let fetcher = Fetcher::new()?;
                let (set, digest) = fetcher.fetch(url).await?;
                (set, Some(digest), Some(fetcher))
            }
        };
        tracing::info!(
            keys = set.keys.len(),
            issuer = %settings.issuer,
            "JSON Web Tokens verified against the key set of {}",
            source_name(&settings.source)
        );
        Ok(Arc::new(Verifier {
            settings,
            keys: RwLock::new(Arc::new(set)),
            source_digest: Mutex::new(digest),
            cache: Mutex::default(),
            fetcher,
            refetched: Mutex::new(None),
            refetch: tokio::sync::Notify::new(),
        }))
    }

    /// The set of the file, read again for a reload; `None` when the file holds the
    /// set in use (a reload under `--watch` keeps the tokens verified with it), and
    /// for a URL's, which is fetched on its own schedule.
    pub fn read_again(&self) -> Option<Result<NewKeys, String>> {
        let KeySource::File(path) = &self.settings.source else {
            return None;
        };
        match read_file(path) {
            Ok((_, digest)) if *self.source_digest.lock() == Some(digest) => None,
            Ok((set, digest)) => Some(Ok(NewKeys(set, Some(digest)))),
            Err(reason) => Some(Err(reason)),
        }
    }

    /// Verifies tokens with `keys` from now on; tokens verified with the old set
    /// are verified again.
    pub fn install(&self, keys: NewKeys) {
        *self.keys.write() = Arc::new(keys.0);
        *self.source_digest.lock() = keys.1;
        self.cache.lock().clear();
    }

    /// For a URL's set: fetches it again every 10 minutes, and when a token names a
    /// key id it lacks (at most once a minute); a failed fetch keeps the set in use.
    pub fn spawn_refresh(self: &Arc<Verifier>) {
        let KeySource::Url(url) = &self.settings.source else {
            return;
        };
        let (verifier, url) = (Arc::clone(self), url.clone());
        actix_rt::spawn(async move {
            loop {
                let timer = actix_rt::time::sleep(REFRESH_INTERVAL);
                futures_util::future::select(
                    Box::pin(timer),
                    Box::pin(verifier.refetch.notified()),
                )
                .await;
                let Some(fetcher) = &verifier.fetcher else {
                    return;
                };
                match fetcher.fetch(&url).await {
                    Ok((set, digest)) => {
                        tracing::info!(keys = set.keys.len(), "fetched the key set of {url}");
                        // The same set keeps the tokens verified with it.
                        if *verifier.source_digest.lock() != Some(digest) {
                            verifier.install(NewKeys(set, Some(digest)));
                        }
                    }
                    Err(reason) => {
                        tracing::error!("{reason}; still verifying with the keys fetched before");
                    }
                }
            }
        });
    }

    /// The principal of `token`, from the cache or verified now.
    fn verify(&self, token: &str, now: Timestamp) -> Result<Arc<Principal>, Refusal> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(principal) = self.cache.lock().get(&digest) {
            // Its `expires` is `exp` with the leeway; a key set since installed
            // emptied the cache.
            if principal.expires.is_none_or(|expires| now < expires) {
                return Ok(Arc::clone(principal));
            }
        }
        let keys = Arc::clone(&self.keys.read());
        let header = header_of(token)?;
        let key = match keys.find(header.key_id.as_deref()) {
            Some(key) => key,
            None => {
                return Err(match header.key_id {
                    Some(id) => {
                        self.ask_for_key(&id, &keys);
                        Refusal::UnknownKey(id)
                    }
                    None => Refusal::NoKeyId,
                });
            }
        };
        let name = algorithm_name(header.algorithm);
        if keys::Family::of(header.algorithm) != Some(key.family)
            || key.algorithm.as_deref().is_some_and(|own| own != name)
        {
            return Err(Refusal::KeyMismatch(name.to_owned()));
        }
        let claims = jsonwebtoken::decode::<Map<String, Value>>(
            token,
            &key.decoding,
            &self.validation(header.algorithm),
        )
        .map_err(refusal_of)?
        .claims;
        let principal = Arc::new(self.principal_of(&claims, digest)?);
        let mut cache = self.cache.lock();
        if cache.len() >= CACHE_CAPACITY {
            cache.retain(|_, kept| kept.expires.is_none_or(|expires| now < expires));
            if cache.len() >= CACHE_CAPACITY {
                cache.clear();
            }
        }
        cache.insert(digest, Arc::clone(&principal));
        Ok(principal)
    }

    /// What jsonwebtoken checks: the signature by `algorithm` only, `exp`
    /// required, `nbf`, the issuer and the audience, with the leeway.
    fn validation(&self, algorithm: Algorithm) -> Validation {
        let mut validation = Validation::new(algorithm);
        validation.leeway = LEEWAY_SECONDS;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss"]);
        validation.set_issuer(&[&self.settings.issuer]);
        match &self.settings.audience {
            Some(audience) => validation.set_audience(&[audience]),
            None => validation.validate_aud = false,
        }
        validation
    }

    /// The principal of verified `claims`: its `iat` not in the future, its
    /// stations from the stations claim, named by its `sub`.
    fn principal_of(
        &self,
        claims: &Map<String, Value>,
        digest: [u8; 32],
    ) -> Result<Principal, Refusal> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        if let Some(issued) = claims.get("iat") {
            let issued = issued
                .as_u64()
                .ok_or_else(|| Refusal::Claims("`iat` is not a number of seconds".into()))?;
            if issued > now + LEEWAY_SECONDS {
                return Err(Refusal::IssuedLater);
            }
        }
        let claim = &self.settings.stations_claim;
        let stations = match claims.get(claim) {
            None => return Err(Refusal::MissingClaim(claim.clone())),
            Some(Value::String(star)) if star == "*" => None,
            Some(Value::Array(ids)) => Some(
                ids.iter()
                    .map(|id| id.as_str().map(str::to_owned))
                    .collect::<Option<BTreeSet<String>>>()
                    .ok_or_else(|| Refusal::Stations(claim.clone()))?,
            ),
            Some(_) => return Err(Refusal::Stations(claim.clone())),
        };
        let expires = claims
            .get("exp")
            .and_then(Value::as_i64)
            .and_then(|exp| DateTime::from_timestamp(exp + LEEWAY_SECONDS as i64, 0))
            .map(Timestamp::from);
        let subject = claims.get("sub").and_then(Value::as_str).unwrap_or("");
        Ok(Principal::verified(
            subject.to_owned(),
            stations,
            digest,
            expires,
        ))
    }

    /// A token named key `id`, which `keys` lacks: the refresh task fetches the
    /// set now, unless a token did this less than a minute ago.
    fn ask_for_key(&self, id: &str, keys: &KeySet) {
        if self.fetcher.is_none() || keys.has(id) {
            return;
        }
        let mut refetched = self.refetched.lock();
        if refetched.is_some_and(|last| last.elapsed() < REFETCH_INTERVAL) {
            tracing::info!(
                kid = id,
                "a token names a key the set lacks; the set was fetched for another less than \
                 a minute ago, so not now"
            );
            return;
        }
        *refetched = Some(Instant::now());
        tracing::info!(
            kid = id,
            "a token names a key the set lacks: fetching the set again"
        );
        self.refetch.notify_one();
    }
}

/// A key set read for [`Verifier::install`], not yet in use.
pub struct NewKeys(KeySet, Option<[u8; 32]>);

/// The key set of the file at `path`, and the file's SHA-256.
fn read_file(path: &std::path::Path) -> Result<(KeySet, [u8; 32]), String> {
    let text = std::fs::read(path)
        .map_err(|error| format!("cannot read the key set {}: {error}", path.display()))?;
    let set = KeySet::parse(&text)
        .map_err(|reason| format!("invalid key set {}: {reason}", path.display()))?;
    Ok((set, Sha256::digest(&text).into()))
}

fn source_name(source: &KeySource) -> String {
    match source {
        KeySource::File(path) => path.display().to_string(),
        KeySource::Url(url) => url.clone(),
    }
}

fn algorithm_name(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::RS256 => "RS256",
        Algorithm::PS256 => "PS256",
        Algorithm::ES256 => "ES256",
        Algorithm::EdDSA => "EdDSA",
        _ => "another",
    }
}

/// jsonwebtoken's error as the reason a 401 gives.
fn refusal_of(error: jsonwebtoken::errors::Error) -> Refusal {
    use jsonwebtoken::errors::ErrorKind;
    match error.into_kind() {
        ErrorKind::ExpiredSignature => Refusal::Expired,
        ErrorKind::ImmatureSignature => Refusal::NotYetValid,
        ErrorKind::InvalidIssuer => Refusal::Issuer,
        ErrorKind::InvalidAudience => Refusal::Audience,
        ErrorKind::MissingRequiredClaim(claim) => Refusal::MissingClaim(claim),
        // Not reached: the key's type was checked against the header's algorithm.
        ErrorKind::InvalidAlgorithm => Refusal::Malformed("its algorithm does not fit its key"),
        ErrorKind::Json(error) => Refusal::Claims(error.to_string()),
        ErrorKind::Base64(_) | ErrorKind::Utf8(_) | ErrorKind::InvalidToken => {
            Refusal::Malformed("a part is not base64url JSON")
        }
        _ => Refusal::Signature,
    }
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

    proptest! {
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
