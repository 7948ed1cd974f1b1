//! Bearer tokens and what they may see (docs/api.md section 3).
//!
//! The tokens file holds only SHA-256 digests; a presented token is hashed and its
//! digest compared with every known one, so the plain token is never stored,
//! compared or logged, and the check takes the same time whichever token (if any)
//! matches and however many leading bytes a wrong digest shares with a right one.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable as _, ConstantTimeEq as _};

/// A request without a known bearer token (docs/api.md section 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("missing or invalid bearer token")]
pub struct Unauthorized {
    /// A Bearer token was presented (possibly empty) but is not known.
    pub token_presented: bool,
}

/// A tokens file that cannot be used: stq refuses to start, or a reload keeps the
/// tokens it has.
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    #[error("cannot read the tokens file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid tokens file {path}: {reason}")]
    Invalid { path: String, reason: String },
}

/// The stations a token may see.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    All,
    Stations(BTreeSet<String>),
}

impl Scope {
    pub fn allows(&self, station: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Stations(stations) => stations.contains(station),
        }
    }
}

/// The holder of a known token.
#[derive(Debug)]
pub struct Principal {
    pub name: String,
    pub scope: Scope,
    /// The token's SHA-256: identifies the holder in cursors without revealing it.
    pub digest: [u8; 32],
}

/// Every known token, by digest.
#[derive(Debug, Default)]
pub struct Tokens {
    /// A list rather than a map: a map's lookup ends at the first differing byte.
    principals: Vec<Arc<Principal>>,
}

impl Tokens {
    /// Reads and validates a tokens file.
    pub fn load(path: &Path) -> Result<Tokens, TokensError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokensError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Tokens::parse(&text).map_err(|reason| TokensError::Invalid {
            path: path.display().to_string(),
            reason,
        })
    }

    /// Reads the text of a tokens file; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Tokens, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            tokens: Vec<Entry>,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Entry {
            name: String,
            sha256: String,
            stations: Stations,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Stations {
            Star(String),
            List(Vec<String>),
        }

        let file: File = serde_json::from_str(text).map_err(|error| error.to_string())?;
        let mut tokens = Tokens::default();
        let mut names_by_digest = HashMap::new();
        for entry in file.tokens {
            let mut digest = [0u8; 32];
            if entry.sha256.len() != 64 || hex::decode_to_slice(&entry.sha256, &mut digest).is_err()
            {
                return Err(format!(
                    "token `{}`: `sha256` must be 64 hex digits",
                    entry.name
                ));
            }
            let scope = match entry.stations {
                Stations::Star(star) if star == "*" => Scope::All,
                Stations::Star(other) => {
                    return Err(format!(
                        "token `{}`: `stations` must be \"*\" or a list, not {other:?}",
                        entry.name
                    ));
                }
                Stations::List(stations) => Scope::Stations(stations.into_iter().collect()),
            };
            if let Some(previous) = names_by_digest.insert(digest, entry.name.clone()) {
                return Err(format!(
                    "tokens `{previous}` and `{}` have the same sha256",
                    entry.name
                ));
            }
            tokens.principals.push(Arc::new(Principal {
                name: entry.name,
                scope,
                digest,
            }));
        }
        Ok(tokens)
    }

    pub fn len(&self) -> usize {
        self.principals.len()
    }

    pub fn is_empty(&self) -> bool {
        self.principals.is_empty()
    }

    /// The principal of an `Authorization` header value, or 401.
    pub fn authenticate(
        &self,
        authorization: Option<&[u8]>,
    ) -> Result<Arc<Principal>, Unauthorized> {
        let token = bearer_token(authorization).ok_or(Unauthorized {
            token_presented: false,
        })?;
        let unknown = Unauthorized {
            token_presented: true,
        };
        if token.is_empty() {
            return Err(unknown);
        }
        let digest = sha256(token);
        // Every digest is compared in full, and the match is picked without a branch.
        let mut found = u64::MAX;
        for (position, principal) in self.principals.iter().enumerate() {
            found.conditional_assign(&(position as u64), principal.digest.ct_eq(&digest));
        }
        usize::try_from(found)
            .ok()
            .and_then(|position| self.principals.get(position))
            .cloned()
            .ok_or(unknown)
    }
}

/// The token of a `Bearer` credential (scheme case-insensitive), possibly empty;
/// `None` when there is no header or it names another scheme.
fn bearer_token(authorization: Option<&[u8]>) -> Option<&[u8]> {
    let value = authorization?.trim_ascii();
    let (scheme, rest) = match value.iter().position(|byte| *byte == b' ') {
        Some(space) => value.split_at(space),
        None => (value, &b""[..]),
    };
    scheme
        .eq_ignore_ascii_case(b"bearer")
        .then(|| rest.trim_ascii_start())
}

pub fn sha256(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// The hex digest the tokens file stores for a token.
pub fn hash_token(token: &str) -> String {
    hex::encode(sha256(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Tokens {
        Tokens::parse(&format!(
            r#"{{"tokens": [
                {{"name": "ops", "sha256": "{}", "stations": "*"}},
                {{"name": "line", "sha256": "{}", "stations": ["ST-01", "ST-02"]}}
            ]}}"#,
            hash_token("ops-secret"),
            hash_token("line-secret").to_uppercase(),
        ))
        .unwrap()
    }

    fn presented(result: Result<Arc<Principal>, Unauthorized>) -> Option<bool> {
        result.err().map(|refusal| refusal.token_presented)
    }

    #[test]
    fn known_tokens_authenticate_with_any_scheme_case() {
        let tokens = tokens();
        let ops = tokens.authenticate(Some(b"Bearer ops-secret")).unwrap();
        assert_eq!((ops.name.as_str(), &ops.scope), ("ops", &Scope::All));
        let line = tokens.authenticate(Some(b"bEARER   line-secret")).unwrap();
        assert!(line.scope.allows("ST-02") && !line.scope.allows("ST-03"));
    }

    #[test]
    fn failures_say_whether_a_bearer_token_was_presented() {
        let tokens = tokens();
        assert_eq!(presented(tokens.authenticate(None)), Some(false));
        assert_eq!(
            presented(tokens.authenticate(Some(b"Basic b3BzOng="))),
            Some(false)
        );
        assert_eq!(
            presented(tokens.authenticate(Some(b"Bearerops-secret"))),
            Some(false)
        );
        assert_eq!(presented(tokens.authenticate(Some(b"Bearer"))), Some(true));
        assert_eq!(presented(tokens.authenticate(Some(b"Bearer "))), Some(true));
        assert_eq!(
            presented(tokens.authenticate(Some(b"Bearer nope"))),
            Some(true)
        );
        assert_eq!(
            presented(tokens.authenticate(Some(b"Bearer ops-secretx"))),
            Some(true)
        );
    }

    #[test]
    fn bad_token_files_are_refused() {
        for text in [
            r#"{"tokens": [{"name": "a", "sha256": "abc", "stations": "*"}]}"#,
            r#"{"tokens": [{"name": "a", "sha256": "zz", "stations": "*"}]}"#,
            r#"{"tokens": [{"name": "a", "sha256": "00", "stations": "ST"}]}"#,
            r#"{"tokens": [{"name": "a", "stations": "*"}]}"#,
            r#"{"tokens": {}}"#,
        ] {
            assert!(Tokens::parse(text).is_err(), "{text}");
        }
        let same = hash_token("x");
        let duplicate = format!(
            r#"{{"tokens": [{{"name": "a", "sha256": "{same}", "stations": "*"}},
                             {{"name": "b", "sha256": "{same}", "stations": "*"}}]}}"#
        );
        assert!(Tokens::parse(&duplicate).is_err());
    }

    #[test]
    fn hashes_are_lower_case_hex_sha256() {
        assert_eq!(
            hash_token("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
