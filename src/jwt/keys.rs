//! The identity provider's JSON Web Key Set (docs/api.md section 16): its signing
//! keys by key id, read from a file or fetched from a URL.
//!
//! A set is read key by key: a key of a type or curve stq does not verify with,
//! or marked for encryption, is left out rather than failing the set, since
//! providers publish such keys beside their signing ones (Keycloak's `RSA-OAEP`).

use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// How long a fetch of the set may take, connection included.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting to the provider may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest set read: a provider's is a few kilobytes.
const MAX_SET_BYTES: usize = 1 << 20;

/// One signing key of the set.
pub(crate) struct Key {
    pub(crate) id: Option<String>,
    /// The key's `alg`, when it names one: a token's header must name the same.
    pub(crate) algorithm: Option<String>,
    /// The algorithms its type verifies.
    pub(crate) family: Family,
    pub(crate) decoding: DecodingKey,
}

/// The kinds of key, by the algorithms each verifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    /// RS256 and PS256.
    Rsa,
    /// ES256.
    P256,
    /// EdDSA.
    Ed25519,
}

impl Family {
    /// The kind of key `algorithm` needs, for the algorithms stq accepts.
    pub(crate) fn of(algorithm: Algorithm) -> Option<Family> {
        match algorithm {
            Algorithm::RS256 | Algorithm::PS256 => Some(Family::Rsa),
            Algorithm::ES256 => Some(Family::P256),
            Algorithm::EdDSA => Some(Family::Ed25519),
            _ => None,
        }
    }
}

/// The signing keys of a set.
#[derive(Default)]
pub(crate) struct KeySet {
    pub(crate) keys: Vec<Key>,
}

impl KeySet {
    /// The set in `text`; the error says what is wrong with it.
    pub(crate) fn parse(text: &[u8]) -> Result<KeySet, String> {
        let set: Value = serde_json::from_slice(text).map_err(|error| error.to_string())?;
        let keys = set
            .get("keys")
            .and_then(Value::as_array)
            .ok_or("not a JSON Web Key Set: no `keys` array")?;
        let mut set = KeySet::default();
        for (position, key) in keys.iter().enumerate() {
            match signing_key(key) {
                Ok(Some(key)) => set.keys.push(key),
                Ok(None) => {}
                Err(reason) => {
                    return Err(format!("key {position}: {reason}"));
                }
            }
        }
        if set.keys.is_empty() {
            return Err("no RSA, P-256 or Ed25519 signing key in it".into());
        }
        Ok(set)
    }

    /// The key a token's header names: by `kid`, or the set's only key when the
    /// header names none.
    pub(crate) fn find(&self, id: Option<&str>) -> Option<&Key> {
        match id {
            Some(id) => self.keys.iter().find(|key| key.id.as_deref() == Some(id)),
            None if self.keys.len() == 1 => self.keys.first(),
            None => None,
        }
    }

    /// Whether it has a key of id `id`.
    pub(crate) fn has(&self, id: &str) -> bool {
        self.keys.iter().any(|key| key.id.as_deref() == Some(id))
    }
}

/// The signing key of one member of `keys`; `None` for a key stq does not
/// verify with; an error for one it would use that is malformed.
fn signing_key(key: &Value) -> Result<Option<Key>, String> {
    let text = |name: &str| key.get(name).and_then(Value::as_str);
    if text("use").is_some_and(|usage| usage != "sig") {
        return Ok(None);
    }
    let member = |name: &str| text(name).ok_or_else(|| format!("no `{name}`"));
    let family_and_key = match (text("kty"), text("crv")) {
        (Some("RSA"), _) => (
            Family::Rsa,
            DecodingKey::from_rsa_components(member("n")?, member("e")?),
        ),
        (Some("EC"), Some("P-256")) => (
            Family::P256,
            DecodingKey::from_ec_components(member("x")?, member("y")?),
        ),
        (Some("OKP"), Some("Ed25519")) => (
            Family::Ed25519,
            DecodingKey::from_ed_components(member("x")?),
        ),
        _ => return Ok(None),
    };
    let (family, decoding) = family_and_key;
    let decoding = decoding.map_err(|error| error.to_string())?;
    Ok(Some(Key {
        id: text("kid").map(str::to_owned),
        algorithm: text("alg").map(str::to_owned),
        family,
        decoding,
    }))
}

/// Where the set comes from.
#[derive(Clone, Debug)]
pub enum KeySource {
    /// A file, read again at every reload.
    File(std::path::PathBuf),
    /// A URL, fetched at start-up, every 10 minutes, and for an unknown key id.
    Url(String),
}

impl KeySource {
    /// `--jwt-jwks`'s value: a URL when it is one, else a file. Plain HTTP only to
    /// the loopback address, for tests: a set fetched in the clear could be anyone's.
    pub fn parse(text: &str) -> Result<KeySource, String> {
        if text.starts_with("https://") {
            return Ok(KeySource::Url(text.to_owned()));
        }
        if let Some(rest) = text.strip_prefix("http://") {
            let host = rest.split(['/', '?']).next().unwrap_or_default();
            let host = host.rsplit_once(':').map_or(host, |(host, _port)| host);
            if host == "127.0.0.1" || host == "[::1]" {
                return Ok(KeySource::Url(text.to_owned()));
            }
            return Err(format!(
                "{text}: a key set's URL is https://, or http:// only to 127.0.0.1 or [::1]"
            ));
        }
        Ok(KeySource::File(text.into()))
    }
}

/// Fetches key sets with timeouts, through rustls with ring and the platform's
/// roots.
pub(crate) struct Fetcher {
    client: reqwest::Client,
}

impl Fetcher {
    pub(crate) fn new() -> Result<Fetcher, String> {
        // reqwest's rustls has no provider of its own here: ring, as stq-objects'.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|error| error.to_string())?;
        Ok(Fetcher { client })
    }

    /// The set at `url` and the answer's SHA-256, or why it could not be had.
    pub(crate) async fn fetch(&self, url: &str) -> Result<(KeySet, [u8; 32]), String> {
        let response = (self.client.get(url))
            .header("Accept", "application/json")
            .send()
            .await
            .map_err(|error| format!("cannot fetch {url}: {error}"))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("{url} answered {status}"));
        }
        let body = response
            .bytes()
            .await
            .map_err(|error| format!("cannot read {url}: {error}"))?;
        if body.len() > MAX_SET_BYTES {
            return Err(format!("{url}: the key set is over {MAX_SET_BYTES} bytes"));
        }
        let set = KeySet::parse(&body).map_err(|reason| format!("{url}: {reason}"))?;
        Ok((set, Sha256::digest(&body).into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // An Ed25519 public key (RFC 8037's example).
    const ED25519_X: &str = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";

    #[test]
    fn keys_of_other_types_and_uses_are_left_out() {
        let text = format!(
            r#"{{"keys": [
                {{"kty": "OKP", "crv": "Ed25519", "x": "{ED25519_X}", "kid": "a", "use": "sig"}},
                {{"kty": "OKP", "crv": "Ed25519", "x": "{ED25519_X}", "kid": "b", "use": "enc"}},
                {{"kty": "oct", "k": "c2VjcmV0", "kid": "c"}},
                {{"kty": "EC", "crv": "P-384", "x": "AA", "y": "AA", "kid": "d"}}
            ]}}"#
        );
        let set = KeySet::parse(text.as_bytes()).unwrap();
        assert!(set.has("a"));
        assert!(!set.has("b") && !set.has("c") && !set.has("d"));
        assert!(set.find(Some("a")).is_some());
        // A set of one key matches a header without `kid`.
        assert!(set.find(None).is_some());
    }

    #[test]
    fn a_set_without_signing_keys_is_refused() {
        assert!(KeySet::parse(br#"{"keys": []}"#).is_err());
        assert!(KeySet::parse(br#"{"keys": [{"kty": "oct", "k": "AA"}]}"#).is_err());
        assert!(KeySet::parse(b"[]").is_err());
    }

    #[test]
    fn plain_http_is_for_loopback_only() {
        assert!(matches!(
            KeySource::parse("http://127.0.0.1:8080/jwks"),
            Ok(KeySource::Url(_))
        ));
        assert!(KeySource::parse("http://idp.example/jwks").is_err());
        assert!(KeySource::parse("http://127.0.0.1.example/jwks").is_err());
        assert!(matches!(
            KeySource::parse("/etc/stq/jwks.json"),
            Ok(KeySource::File(_))
        ));
    }
}
