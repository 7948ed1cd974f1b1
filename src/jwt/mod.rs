//! JSON Web Tokens beside the tokens file (docs/api.md section 16): a bearer
//! token of three base64url parts is verified against the identity provider's
//! key set ([`keys`]), its claims checked, and its stations read from a claim.
//!
//! The token's text is read by stq-core's `domain::jwt` (its shape, its header,
//! its claims), where the fuzz target `bearer_token` reaches it: the header before
//! any key is chosen, so that `none`, the HMAC algorithms and every other stq does
//! not accept are refused by name, and a key is used only with the algorithm its
//! type (and its own `alg`, when it names one) is for: an RSA public key is never
//! taken for an HMAC secret. The signature and the registered claims are
//! jsonwebtoken's, over ring.
//!
//! A verified token is kept by its SHA-256 until it expires, so that a dashboard's
//! requests with one token pay one signature check; a key set that changed empties
//! the cache.

mod keys;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, Validation};
use parking_lot::{Mutex, RwLock};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
pub use stq_core::domain::jwt::Refusal;
use stq_core::domain::jwt::{self as text, header_of, json_web_token, LEEWAY_SECONDS};
use stq_core::domain::time::Timestamp;
use stq_core::domain::{Principal, Tokens, Unauthorized};

pub use keys::KeySource;
use keys::{Fetcher, KeySet};

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
    // Without `--jwt-jwks`, a bearer token's shape is not looked at.
    let token = jwt.and_then(|verifier| Some((verifier, authorization.and_then(json_web_token)?)));
    match token {
        Some((verifier, token)) => Ok(verifier.verify(token, now)?),
        None => Ok(tokens.authenticate(authorization, now)?),
    }
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
        let name = header.algorithm.name();
        let algorithm = match header.algorithm {
            text::Algorithm::RS256 => Algorithm::RS256,
            text::Algorithm::PS256 => Algorithm::PS256,
            text::Algorithm::ES256 => Algorithm::ES256,
            text::Algorithm::EdDSA => Algorithm::EdDSA,
        };
        if keys::Family::of(algorithm) != Some(key.family)
            || key.algorithm.as_deref().is_some_and(|own| own != name)
        {
            return Err(Refusal::KeyMismatch(name.to_owned()));
        }
        let claims = jsonwebtoken::decode::<Map<String, Value>>(
            token,
            &key.decoding,
            &self.validation(algorithm),
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

    /// The principal of verified `claims` (stq-core's `read_claims`): its `iat`
    /// not in the future, its stations from the stations claim, named by its `sub`.
    fn principal_of(
        &self,
        claims: &Map<String, Value>,
        digest: [u8; 32],
    ) -> Result<Principal, Refusal> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        text::read_claims(claims, &self.settings.stations_claim, now, digest)
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
