//! Bearer tokens and what they may see (docs/api.md section 3).
//!
//! The tokens file holds only SHA-256 digests; a presented token is hashed and its
//! digest compared with every known one, so the plain token is never stored,
//! compared or logged, and the check takes the same time whichever token (if any)
//! matches and however many leading bytes a wrong digest shares with a right one.
//! An entry may expire: from that instant on its token is refused like an unknown
//! one, with a message saying so.
//!
//! The file as written, entry by entry, is what `stq token` edits ([`Tokens::add`],
//! [`Tokens::revoke`], [`Tokens::list`]) without changing the entries it does not
//! touch; [`Tokens`] is what a server checks requests against.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rand::rngs::OsRng;
use rand::RngCore as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable as _, ConstantTimeEq as _};

use super::time::{parse_rfc3339, Timestamp};

/// A request without a usable bearer token (docs/api.md section 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unauthorized {
    /// No `Authorization` header, or one of another scheme.
    #[error("missing or invalid bearer token")]
    Missing,
    /// A Bearer token (possibly empty) that no entry knows.
    #[error("missing or invalid bearer token")]
    Unknown,
    /// A known Bearer token whose entry's `expires` has passed.
    #[error("the bearer token has expired")]
    Expired,
}

/// A tokens file that cannot be used: stq refuses to start, or a reload keeps the
/// tokens it has; or that `stq token` left as it was (`Read` and `Invalid` too, of
/// the file it was to edit, and the variants after them, its own).
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    /// The file could not be read. The cause is part of the message, not a
    /// source: a caller printing the chain would name it twice.
    #[error("cannot read the tokens file {path}: {cause}")]
    Read {
        /// The tokens file's path.
        path: String,
        /// Why it could not be read.
        cause: std::io::Error,
    },
    /// The file was read, but is not a valid tokens file.
    #[error("invalid tokens file {path}: {reason}")]
    Invalid {
        /// The tokens file's path.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An edit was refused: the name is taken, or unknown.
    #[error("{path} is unchanged: {refusal}")]
    Refused {
        /// The tokens file's path.
        path: String,
        /// Why the edit was refused.
        refusal: String,
    },
    /// The file as edited is one `stq serve` would refuse, so it was not written.
    #[error("the new tokens file: {0}")]
    Unservable(String),
    /// The operating system's random generator failed.
    #[error("the operating system's random generator failed: {0}")]
    Random(rand::Error),
    /// The path names no file (`/`, `..`).
    #[error("{0} names no file")]
    NoFile(String),
    /// The new file could not be written beside the old one, or renamed over it.
    #[error("cannot write the tokens file {path}: {cause}")]
    Write {
        /// The tokens file's path.
        path: String,
        /// Why it could not be written.
        cause: std::io::Error,
    },
}

/// The stations a token may see.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Scope {
    /// Every station, present and future.
    All,
    /// These stations only.
    Stations(BTreeSet<String>),
}

impl Scope {
    /// Whether a token of this scope may see `station`.
    pub(crate) fn allows(&self, station: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Stations(stations) => stations.contains(station),
        }
    }
}

/// The holder of a known token.
#[derive(Debug)]
pub struct Principal {
    /// The name of the tokens file's entry it was made from.
    pub name: String,
    /// The stations it may see.
    pub(crate) scope: Scope,
    /// The token's SHA-256: identifies the holder in cursors without revealing it.
    pub(crate) digest: [u8; 32],
    /// From this instant on the token is refused; `None`: never.
    pub expires: Option<Timestamp>,
}

impl Principal {
    /// The holder of a token verified outside the tokens file (a JSON Web Token,
    /// docs/api.md section 16): `stations` `None` is every station; `digest`
    /// identifies it in cursors; from `expires` on it is refused.
    pub(crate) fn verified(
        name: String,
        stations: Option<BTreeSet<String>>,
        digest: [u8; 32],
        expires: Option<Timestamp>,
    ) -> Principal {
        Principal {
            name,
            scope: stations.map_or(Scope::All, Scope::Stations),
            digest,
            expires,
        }
    }

    /// Whether it sees the stations `other` sees.
    pub fn sees_as(&self, other: &Principal) -> bool {
        self.scope == other.scope
    }
}

/// The tokens file as written (docs/api.md section 3.1): its entries in their order,
/// each field as the file spells it, so that an edit keeps every other entry as it
/// was. [`TokensFile::parse`] checks it as a server would.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TokensFile {
    /// The entries, in the file's order.
    pub(crate) tokens: Vec<TokenEntry>,
}

/// One entry of the tokens file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TokenEntry {
    /// The entry's name, unique in the file.
    pub(crate) name: String,
    /// The token's SHA-256 in hex, as written (either case).
    pub(crate) sha256: String,
    /// The stations its token may see.
    pub(crate) stations: Stations,
    /// A date-time (docs/api.md section 4), as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) expires: Option<String>,
}

/// An entry's `stations` as written: `"*"` or a list of station ids. (A string
/// other than `"*"` parses, to be refused with the entry's name by the check.)
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Stations {
    /// `"*"` (or, refused by the check, another string).
    Every(String),
    /// Station ids.
    List(Vec<String>),
}

impl Stations {
    /// `"*"`: every station, present and future.
    pub(crate) fn every() -> Stations {
        Stations::Every("*".to_owned())
    }
}

/// As `stq token new --stations` takes them: `*`, or station ids separated by
/// commas (trimmed; empty items and repeats dropped), at least one.
impl std::str::FromStr for Stations {
    type Err = String;

    fn from_str(text: &str) -> Result<Stations, String> {
        if text.trim() == "*" {
            return Ok(Stations::every());
        }
        let mut stations: Vec<String> = Vec::new();
        for station in text.split(',').map(str::trim) {
            if !station.is_empty() && !stations.iter().any(|known| known == station) {
                stations.push(station.to_owned());
            }
        }
        if stations.is_empty() {
            return Err("name at least one station id, or `*` for every station".to_owned());
        }
        Ok(Stations::List(stations))
    }
}

/// What [`TokensFile::add_token`] and [`TokensFile::revoke`] refuse.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EditError {
    /// An entry of this name is in the file already.
    #[error("a token named `{0}` is already in the tokens file")]
    NameTaken(String),
    /// No entry of this name is in the file.
    #[error("no token named `{0}` is in the tokens file")]
    UnknownName(String),
}

impl TokensFile {
    /// The tokens file at `path`, checked as `stq serve` checks it.
    pub(crate) fn read(path: &Path) -> Result<TokensFile, TokensError> {
        read_checked(path, TokensFile::parse)
    }

    /// Reads the text of a tokens file and checks it as [`Tokens::parse`] does.
    pub(crate) fn parse(text: &str) -> Result<TokensFile, String> {
        let file: TokensFile = serde_json::from_str(text).map_err(|error| error.to_string())?;
        Tokens::from_file(&file)?;
        Ok(file)
    }

    /// The file's text, once it is checked as `stq serve` checks it
    /// ([`Tokens::from_file`]): a file the server would refuse is never written. The
    /// error names the entry that is wrong.
    pub(crate) fn checked_json(&self) -> Result<String, String> {
        Tokens::from_file(self)?;
        Ok(self.to_json())
    }

    /// The file's text: one entry per line, in order.
    pub(crate) fn to_json(&self) -> String {
        if self.tokens.is_empty() {
            return "{\"tokens\": []}\n".to_owned();
        }
        let entries: Vec<String> = self
            .tokens
            .iter()
            .map(|entry| {
                format!(
                    "  {}",
                    serde_json::to_string(entry).expect("serializing plain data cannot fail")
                )
            })
            .collect();
        format!("{{\"tokens\": [\n{}\n]}}\n", entries.join(",\n"))
    }

    /// Whether an entry is named `name`.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.tokens.iter().any(|entry| entry.name == name)
    }

    /// Appends an entry named `name` for a new token made of 32 random bytes
    /// ([`token_text`]), unless the name is taken; the file keeps only the token's
    /// digest, so the token is returned, to be shown once.
    pub(crate) fn add_token(
        &mut self,
        name: String,
        stations: Stations,
        expires: Option<String>,
        random: &[u8; 32],
    ) -> Result<String, EditError> {
        let token = token_text(random);
        self.add(TokenEntry {
            name,
            sha256: Tokens::hash(&token),
            stations,
            expires,
        })?;
        Ok(token)
    }

    /// Appends `entry`, unless its name is taken.
    pub(crate) fn add(&mut self, entry: TokenEntry) -> Result<(), EditError> {
        if self.has(&entry.name) {
            return Err(EditError::NameTaken(entry.name));
        }
        self.tokens.push(entry);
        Ok(())
    }

    /// Removes every entry named `name` (there is one, unless the file was written
    /// by hand), keeping the others in their order.
    pub(crate) fn revoke(&mut self, name: &str) -> Result<(), EditError> {
        if !self.has(name) {
            return Err(EditError::UnknownName(name.to_owned()));
        }
        self.tokens.retain(|entry| entry.name != name);
        Ok(())
    }
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
        read_checked(path, Tokens::parse)
    }

    /// Reads the text of a tokens file; the error says what is wrong with it.
    /// Outside this crate, `str::parse` (its `FromStr`).
    pub(crate) fn parse(text: &str) -> Result<Tokens, String> {
        let file: TokensFile = serde_json::from_str(text).map_err(|error| error.to_string())?;
        Tokens::from_file(&file)
    }

    /// The tokens of a file's entries; the error names the entry that is wrong.
    pub(crate) fn from_file(file: &TokensFile) -> Result<Tokens, String> {
        let mut tokens = Tokens::default();
        let mut names_by_digest = HashMap::new();
        for entry in &file.tokens {
            let mut digest = [0u8; 32];
            if entry.sha256.len() != 64 || hex::decode_to_slice(&entry.sha256, &mut digest).is_err()
            {
                return Err(format!(
                    "token `{}`: `sha256` must be 64 hex digits",
                    entry.name
                ));
            }
            let scope = match &entry.stations {
                Stations::Every(star) if star == "*" => Scope::All,
                Stations::Every(other) => {
                    return Err(format!(
                        "token `{}`: `stations` must be \"*\" or a list, not {other:?}",
                        entry.name
                    ));
                }
                Stations::List(stations) => Scope::Stations(stations.iter().cloned().collect()),
            };
            let expires = match &entry.expires {
                None => None,
                Some(text) => Some(parse_rfc3339(text).ok_or_else(|| {
                    format!(
                        "token `{}`: `expires` is not an RFC 3339 date-time: {text:?}",
                        entry.name
                    )
                })?),
            };
            if let Some(previous) = names_by_digest.insert(digest, entry.name.clone()) {
                return Err(format!(
                    "tokens `{previous}` and `{}` have the same sha256",
                    entry.name
                ));
            }
            tokens.principals.push(Arc::new(Principal {
                name: entry.name.clone(),
                scope,
                digest,
                expires,
            }));
        }
        Ok(tokens)
    }

    /// Whether the file held no tokens: every request gets 401.
    pub fn is_empty(&self) -> bool {
        self.principals.is_empty()
    }

    /// The principal of an `Authorization` header value at instant `now`, or 401.
    pub fn authenticate(
        &self,
        authorization: Option<&[u8]>,
        now: Timestamp,
    ) -> Result<Arc<Principal>, Unauthorized> {
        let token = bearer_token(authorization).ok_or(Unauthorized::Missing)?;
        if token.is_empty() {
            return Err(Unauthorized::Unknown);
        }
        let digest = sha256(token);
        // Every digest is compared in full, and the match is picked without a branch.
        let mut found = u64::MAX;
        for (position, principal) in self.principals.iter().enumerate() {
            found.conditional_assign(&(position as u64), principal.digest.ct_eq(&digest));
        }
        let principal = usize::try_from(found)
            .ok()
            .and_then(|position| self.principals.get(position))
            .ok_or(Unauthorized::Unknown)?;
        // Only the holder of the token learns that it expired.
        if principal.expires.is_some_and(|expires| now >= expires) {
            return Err(Unauthorized::Expired);
        }
        Ok(Arc::clone(principal))
    }
}

/// The text of a tokens file, read as [`Tokens::load`] reads the file's.
impl std::str::FromStr for Tokens {
    type Err = String;

    fn from_str(text: &str) -> Result<Tokens, String> {
        Tokens::parse(text)
    }
}

/// The file at `path` read and checked by `check`; the errors name the file.
fn read_checked<T>(
    path: &Path,
    check: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, TokensError> {
    let text = fs::read_to_string(path).map_err(|cause| TokensError::Read {
        path: path.display().to_string(),
        cause,
    })?;
    check(&text).map_err(|reason| TokensError::Invalid {
        path: path.display().to_string(),
        reason,
    })
}

/// The tokens file's edits, `stq token`'s subcommands: each reads the file, changes
/// it and writes it whole again.
impl Tokens {
    /// `stq token new`: adds an entry named `name` to the tokens file at `path` (a new
    /// file when there is none) for a new token made of 32 bytes from the operating
    /// system's random generator, and returns the token. The file keeps only its
    /// digest, so the token is returned once its entry is in the file, to be shown
    /// once.
    pub fn add(
        path: &Path,
        name: String,
        stations: Stations,
        expires: Option<String>,
    ) -> Result<String, TokensError> {
        let mut file = match TokensFile::read(path) {
            Ok(file) => file,
            Err(TokensError::Read { cause, .. })
                if cause.kind() == std::io::ErrorKind::NotFound =>
            {
                TokensFile::default()
            }
            Err(error) => return Err(error),
        };
        let mut random = [0u8; 32];
        OsRng
            .try_fill_bytes(&mut random)
            .map_err(TokensError::Random)?;
        let token = file
            .add_token(name, stations, expires, &random)
            .map_err(|refusal| refused(path, &refusal))?;
        write_file(path, &file)?;
        Ok(token)
    }

    /// `stq token revoke`: removes the entry named `name` from the tokens file at
    /// `path`, keeping the others as they were, in their order.
    pub fn revoke(path: &Path, name: &str) -> Result<(), TokensError> {
        let mut file = TokensFile::read(path)?;
        file.revoke(name)
            .map_err(|refusal| refused(path, &refusal))?;
        write_file(path, &file)
    }

    /// `stq token list`: each entry of the tokens file at `path`, in its order, as
    /// its name, its stations (`*`, `(none)`, or their ids separated by commas) and
    /// its expiry (`never`, or the date-time as written, followed by `(expired)` once
    /// `now` has reached it); never a digest.
    pub fn list(path: &Path, now: Timestamp) -> Result<Vec<[String; 3]>, TokensError> {
        let file = TokensFile::read(path)?;
        let rows = file.tokens.into_iter().map(|entry| {
            let stations = match entry.stations {
                Stations::Every(star) => star,
                Stations::List(stations) if stations.is_empty() => "(none)".to_owned(),
                Stations::List(stations) => stations.join(","),
            };
            let expires = match entry.expires {
                None => "never".to_owned(),
                Some(text) if parse_rfc3339(&text).is_some_and(|instant| instant <= now) => {
                    format!("{text} (expired)")
                }
                Some(text) => text,
            };
            [entry.name, stations, expires]
        });
        Ok(rows.collect())
    }
}

fn refused(path: &Path, refusal: &EditError) -> TokensError {
    TokensError::Refused {
        path: path.display().to_string(),
        refusal: refusal.to_string(),
    }
}

/// Writes `file` to a new file beside `path` and renames it over `path` (over the
/// file a symbolic link at `path` points to, which stays a link): a server
/// reloading meanwhile reads the old file or the new one, never half of one.
fn write_file(path: &Path, file: &TokensFile) -> Result<(), TokensError> {
    // Never write a file that `stq serve` would refuse.
    let json = file.checked_json().map_err(TokensError::Unservable)?;
    let target = fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let directory = match target.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = target
        .file_name()
        .ok_or_else(|| TokensError::NoFile(path.display().to_string()))?;
    let mut suffix = [0u8; 8];
    OsRng
        .try_fill_bytes(&mut suffix)
        .map_err(TokensError::Random)?;
    let temporary = directory.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        hex::encode(suffix)
    ));
    let written = (|| -> std::io::Result<()> {
        let mut new = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temporary)?;
        // The new file keeps the old one's owner and group where this user may give
        // them (root may: a service reading the file through its group, as the
        // Debian package's does, still can), and its permissions.
        if let Ok(old) = fs::metadata(&target) {
            let _ = std::os::unix::fs::fchown(&new, Some(old.uid()), Some(old.gid()));
            new.set_permissions(old.permissions())?;
        }
        new.write_all(json.as_bytes())?;
        new.sync_all()?;
        fs::rename(&temporary, &target)?;
        // The rename itself survives a crash once the directory is synced; where a
        // directory cannot be opened, the rename is done all the same.
        let _ = File::open(&directory).and_then(|directory| directory.sync_all());
        Ok(())
    })();
    written.map_err(|cause| {
        let _ = fs::remove_file(&temporary);
        TokensError::Write {
            path: path.display().to_string(),
            cause,
        }
    })
}

/// The token of a `Bearer` credential (scheme case-insensitive), possibly empty;
/// `None` when there is no header or it names another scheme.
pub(crate) fn bearer_token(authorization: Option<&[u8]>) -> Option<&[u8]> {
    let value = authorization?.trim_ascii();
    let (scheme, rest) = match value.iter().position(|byte| *byte == b' ') {
        Some(space) => value.split_at(space),
        None => (value, &b""[..]),
    };
    scheme
        .eq_ignore_ascii_case(b"bearer")
        .then(|| rest.trim_ascii_start())
}

pub(crate) fn sha256(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

impl Tokens {
    /// The hex digest the tokens file stores for a token.
    pub fn hash(token: &str) -> String {
        hex::encode(sha256(token.as_bytes()))
    }
}

/// How every token `stq token new` makes begins.
pub(crate) const TOKEN_PREFIX: &str = "stq_";

/// The token `stq token new` makes of 32 random bytes: [`TOKEN_PREFIX`] then the
/// bytes in base64url without padding (43 characters).
pub(crate) fn token_text(random: &[u8; 32]) -> String {
    format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(random))
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
            Tokens::hash("ops-secret"),
            Tokens::hash("line-secret").to_uppercase(),
        ))
        .unwrap()
    }

    fn presented(result: Result<Arc<Principal>, Unauthorized>) -> Option<bool> {
        result.err().map(|refusal| refusal != Unauthorized::Missing)
    }

    /// An instant long before any expiry the tests write.
    const NOW: Timestamp = Timestamp {
        seconds: 1_700_000_000,
        nanos: 0,
    };

    #[test]
    fn known_tokens_authenticate_with_any_scheme_case() {
        let tokens = tokens();
        let ops = tokens
            .authenticate(Some(b"Bearer ops-secret"), NOW)
            .unwrap();
        assert_eq!((ops.name.as_str(), &ops.scope), ("ops", &Scope::All));
        let line = tokens
            .authenticate(Some(b"bEARER   line-secret"), NOW)
            .unwrap();
        assert!(line.scope.allows("ST-02") && !line.scope.allows("ST-03"));
    }

    #[test]
    fn failures_say_whether_a_bearer_token_was_presented() {
        let tokens = tokens();
        assert_eq!(presented(tokens.authenticate(None, NOW)), Some(false));
        assert_eq!(
            presented(tokens.authenticate(Some(b"Basic b3BzOng="), NOW)),
            Some(false)
        );
        assert_eq!(
            presented(tokens.authenticate(Some(b"Bearerops-secret"), NOW)),
            Some(false)
        );
        assert_eq!(
            presented(tokens.authenticate(Some(b"Bearer"), NOW)),
            Some(true)
        );
        assert_eq!(
            presented(tokens.authenticate(Some(b"Bearer "), NOW)),
            Some(true)
        );
        assert_eq!(
            presented(tokens.authenticate(Some(b"Bearer nope"), NOW)),
            Some(true)
        );
        assert_eq!(
            presented(tokens.authenticate(Some(b"Bearer ops-secretx"), NOW)),
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
        let same = Tokens::hash("x");
        let duplicate = format!(
            r#"{{"tokens": [{{"name": "a", "sha256": "{same}", "stations": "*"}},
                             {{"name": "b", "sha256": "{same}", "stations": "*"}}]}}"#
        );
        assert!(Tokens::parse(&duplicate).is_err());
    }

    #[test]
    fn hashes_are_lower_case_hex_sha256() {
        assert_eq!(
            Tokens::hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    fn expiring(expires: &str) -> Tokens {
        Tokens::parse(&format!(
            r#"{{"tokens": [{{"name": "temp", "sha256": "{}", "stations": "*", "expires": "{expires}"}}]}}"#,
            Tokens::hash("temp-secret"),
        ))
        .unwrap()
    }

    fn at(text: &str) -> Timestamp {
        parse_rfc3339(text).unwrap()
    }

    #[test]
    fn issue_24_a_token_is_refused_from_its_expiry_on() {
        let tokens = expiring("2026-11-25T12:00:00.5+01:00");
        let check = |now| tokens.authenticate(Some(b"Bearer temp-secret"), at(now));
        assert!(check("2026-11-25T11:00:00.499999999Z").is_ok());
        assert_eq!(
            check("2026-11-25T11:00:00.5Z").err(),
            Some(Unauthorized::Expired)
        );
        assert_eq!(
            check("2027-01-01T00:00:00Z").err(),
            Some(Unauthorized::Expired)
        );
        assert!(Unauthorized::Expired.to_string().contains("expired"));
        assert!(!Unauthorized::Unknown.to_string().contains("expired"));
        // An unknown token is unknown, expired entries or not.
        assert_eq!(
            tokens
                .authenticate(Some(b"Bearer other"), at("2027-01-01T00:00:00Z"))
                .err(),
            Some(Unauthorized::Unknown)
        );
    }

    #[test]
    fn issue_24_expires_takes_the_contracts_date_time_grammar() {
        for good in [
            "2026-11-25T12:00:00Z",
            "2026-11-25t12:00:00.123456789-00:00",
        ] {
            let file = format!(
                r#"{{"tokens": [{{"name": "t", "sha256": "{}", "stations": "*", "expires": "{good}"}}]}}"#,
                Tokens::hash("x")
            );
            assert!(Tokens::parse(&file).is_ok(), "{good}");
        }
        for bad in [
            "2026-11-25 12:00:00Z",
            "2026-11-25T12:00Z",
            "2026-11-25T24:00:00Z",
            "2026-11-25T12:00:00+0100",
            "tomorrow",
        ] {
            let file = format!(
                r#"{{"tokens": [{{"name": "t", "sha256": "{}", "stations": "*", "expires": "{bad}"}}]}}"#,
                Tokens::hash("x")
            );
            let error = Tokens::parse(&file).err().unwrap_or_default();
            assert!(error.contains("token `t`: `expires`"), "{bad}: {error}");
        }
        let file = format!(
            r#"{{"tokens": [{{"name": "t", "sha256": "{}", "stations": "*", "expires": 1}}]}}"#,
            Tokens::hash("x")
        );
        assert!(Tokens::parse(&file).is_err());
    }

    #[test]
    fn issue_24_unknown_members_of_an_entry_are_named() {
        let file = format!(
            r#"{{"tokens": [{{"name": "t", "sha256": "{}", "stations": "*", "expiry": "2026-11-25T12:00:00Z"}}]}}"#,
            Tokens::hash("x")
        );
        let error = Tokens::parse(&file).err().unwrap_or_default();
        assert!(error.contains("unknown field `expiry`"), "{error}");
        assert!(TokensFile::parse(&file).is_err());
    }

    #[test]
    fn issue_24_the_file_round_trips_entry_by_entry() {
        let upper = Tokens::hash("b").to_uppercase();
        let text = format!(
            r#"{{"tokens": [
                {{"name": "z-last", "sha256": "{}", "stations": ["ST-09", "ST-01", "ST-01"]}},
                {{"name": "a-first", "sha256": "{upper}", "stations": "*", "expires": "2030-01-01t00:00:00.10+02:00"}},
                {{"name": "esc\u00e9\"", "sha256": "{}", "stations": []}}
            ]}}"#,
            Tokens::hash("a"),
            Tokens::hash("c"),
        );
        let file = TokensFile::parse(&text).unwrap();
        let names: Vec<_> = file
            .tokens
            .iter()
            .map(|entry| entry.name.as_str())
            .collect();
        assert_eq!(names, ["z-last", "a-first", "esc\u{e9}\""]);
        let written = file.to_json();
        assert_eq!(TokensFile::parse(&written).unwrap(), file);
        // Each entry is written as it was read: the digest's case, the stations'
        // order and repeats, the expiry's spelling.
        assert!(written.contains(&upper), "{written}");
        assert!(
            written.contains(r#"["ST-09","ST-01","ST-01"]"#),
            "{written}"
        );
        assert!(written.contains(r#""expires":"2030-01-01t00:00:00.10+02:00""#));
        assert_eq!(written.lines().count(), 5, "{written}");
        assert!(!written.lines().next().unwrap().contains("z-last"));
        assert_eq!(TokensFile::default().to_json(), "{\"tokens\": []}\n");
        assert!(TokensFile::parse(&TokensFile::default().to_json())
            .unwrap()
            .tokens
            .is_empty());
    }

    #[test]
    fn issue_24_add_refuses_a_taken_name_and_revoke_an_unknown_one() {
        let mut file = TokensFile::parse(&format!(
            r#"{{"tokens": [{{"name": "ops", "sha256": "{}", "stations": "*"}}]}}"#,
            Tokens::hash("ops")
        ))
        .unwrap();
        let entry = |name: &str, secret: &str| TokenEntry {
            name: name.to_owned(),
            sha256: Tokens::hash(secret),
            stations: Stations::List(vec!["ST-01".to_owned()]),
            expires: None,
        };
        let before = file.clone();
        assert_eq!(
            file.add(entry("ops", "other")),
            Err(EditError::NameTaken("ops".to_owned()))
        );
        assert_eq!(file, before);
        file.add(entry("line", "line")).unwrap();
        assert_eq!(file.tokens.len(), 2);
        assert_eq!(file.tokens[1], entry("line", "line"));
        assert!(!file.to_json().contains("expires"));
        assert_eq!(
            file.revoke("nope"),
            Err(EditError::UnknownName("nope".to_owned()))
        );
        file.revoke("ops").unwrap();
        assert_eq!(file.tokens, [entry("line", "line")]);
        assert!(Tokens::from_file(&file).is_ok());
    }

    #[test]
    fn issue_24_made_tokens_are_stq_and_base64url_of_32_bytes() {
        let token = token_text(&[0xff; 32]);
        assert_eq!(token.len(), TOKEN_PREFIX.len() + 43);
        assert!(token.starts_with("stq_"), "{token}");
        assert!(token[4..]
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'));
        assert_eq!(&token[4..], "_".repeat(42) + "8");
        assert_eq!(
            URL_SAFE_NO_PAD.decode(&token_text(&[7; 32])[4..]).unwrap(),
            [7; 32]
        );
    }

    #[test]
    fn issue_24_stq_token_edits_the_file_in_place_and_lists_it() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("tokens.json");
        // A new file when there is none; the token printed is the one it holds.
        let token = Tokens::add(&path, "ops".to_owned(), Stations::every(), None).unwrap();
        let tokens = Tokens::load(&path).unwrap();
        let bearer = format!("Bearer {token}");
        assert_eq!(
            tokens
                .authenticate(Some(bearer.as_bytes()), NOW)
                .unwrap()
                .name,
            "ops"
        );
        Tokens::add(
            &path,
            "old".to_owned(),
            Stations::List(Vec::new()),
            Some("2020-01-01T00:00:00Z".to_owned()),
        )
        .unwrap();
        let stations = "ST-01, ST-02".parse().unwrap();
        let expires = Some("2099-01-01T00:00:00Z".to_owned());
        Tokens::add(&path, "line".to_owned(), stations, expires).unwrap();
        assert_eq!(
            Tokens::list(&path, NOW).unwrap(),
            [
                ["ops", "*", "never"],
                ["old", "(none)", "2020-01-01T00:00:00Z (expired)"],
                ["line", "ST-01,ST-02", "2099-01-01T00:00:00Z"],
            ]
            .map(|row| row.map(str::to_owned))
        );
        // Refused edits leave the file as it was, and say so.
        let before = fs::read(&path).unwrap();
        let taken = Tokens::add(&path, "line".to_owned(), Stations::every(), None);
        assert_eq!(
            taken.unwrap_err().to_string(),
            format!(
                "{} is unchanged: a token named `line` is already in the tokens file",
                path.display()
            )
        );
        let unknown = Tokens::revoke(&path, "nobody").unwrap_err().to_string();
        assert!(
            unknown.ends_with("no token named `nobody` is in the tokens file"),
            "{unknown}"
        );
        assert_eq!(fs::read(&path).unwrap(), before);
        Tokens::revoke(&path, "old").unwrap();
        let names: Vec<String> = (Tokens::list(&path, NOW).unwrap().into_iter())
            .map(|[name, ..]| name)
            .collect();
        assert_eq!(names, ["ops", "line"]);
        assert!(Tokens::list(&directory.path().join("none.json"), NOW).is_err());
    }
}
