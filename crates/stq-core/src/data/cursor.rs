//! Page cursors (docs/api.md section 6): opaque strings that carry where the next page
//! starts and the window the first page resolved.
//!
//! A cursor is `base64url(payload || tag)`. The payload holds the endpoint, the
//! generation, the pinned window and the last position returned. The tag is an
//! HMAC-SHA-256, under a key drawn at start-up, of the payload *and* the request's
//! normalized filters and token: so a cursor replayed with other filters, by another
//! token, on the other endpoint, after a restart, or edited by hand fails the same
//! single check, and a cursor can never widen what its token may see.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::data::key::Position;
use crate::domain::record::Kind;
use crate::domain::time::{Timestamp, Window};

/// A cursor that does not continue this query: malformed, sealed to something
/// else, or made for another generation or window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid cursor: {reason}")]
pub struct CursorError {
    pub reason: &'static str,
}

type HmacSha256 = Hmac<Sha256>;

const VERSION: u8 = 1;
const PAYLOAD_LEN: usize = 1 + 1 + 8 + 3 * 12 + 4 + 8;
const TAG_LEN: usize = 16;

/// The key that makes cursors unforgeable: drawn per process, or read from
/// `--cursor-key-file` so that replicas sharing the file accept each other's.
#[derive(Clone)]
pub struct CursorKey(Box<[u8]>);

/// The shortest secret a cursor key file may hold.
pub const MINIMUM_KEY_BYTES: usize = 32;

/// Why a secret cannot be a cursor key.
#[derive(Debug, thiserror::Error)]
#[error("a cursor key needs at least {MINIMUM_KEY_BYTES} bytes; this one has {length}")]
pub struct ShortKey {
    pub length: usize,
}

impl CursorKey {
    pub fn random() -> CursorKey {
        CursorKey(Box::new(rand::random::<[u8; 32]>()))
    }

    /// A key whose whole content is `secret`, at least [`MINIMUM_KEY_BYTES`] long.
    pub fn from_secret(secret: Vec<u8>) -> Result<CursorKey, ShortKey> {
        if secret.len() < MINIMUM_KEY_BYTES {
            return Err(ShortKey {
                length: secret.len(),
            });
        }
        Ok(CursorKey(secret.into_boxed_slice()))
    }

    #[cfg(test)]
    pub fn fixed(byte: u8) -> CursorKey {
        CursorKey(Box::new([byte; 32]))
    }
}

/// What a cursor says, once its tag has been checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub kind: Kind,
    pub generation: u64,
    pub window: Window,
    pub after: Position,
}

impl Cursor {
    /// Seals the cursor to `scope`: the normalized filters and token it is valid for.
    pub fn encode(&self, key: &CursorKey, scope: &[u8]) -> String {
        let payload = self.payload();
        let mut text = payload.to_vec();
        text.extend_from_slice(&tag(key, &payload, scope));
        URL_SAFE_NO_PAD.encode(text)
    }

    /// Opens a cursor made for `scope`; anything else is `invalid_cursor`.
    pub fn decode(text: &str, key: &CursorKey, scope: &[u8]) -> Result<Cursor, CursorError> {
        let malformed = || CursorError {
            reason: "not a cursor this service issued",
        };
        let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| malformed())?;
        if bytes.len() != PAYLOAD_LEN + TAG_LEN || bytes[0] != VERSION {
            return Err(malformed());
        }
        let (payload, presented_tag) = bytes.split_at(PAYLOAD_LEN);
        mac(key, payload, scope)
            .verify_truncated_left(presented_tag)
            .map_err(|_| CursorError {
                reason: "it belongs to another query, token, endpoint or data generation",
            })?;

        let mut reader = Reader {
            bytes: payload,
            at: 1,
        };
        let kind = match reader.u8() {
            0 => Kind::Units,
            _ => Kind::Metrics,
        };
        Ok(Cursor {
            kind,
            generation: reader.u64(),
            window: Window {
                from: reader.instant(),
                to: reader.instant(),
            },
            after: Position {
                instant: reader.instant(),
                station_rank: reader.u32(),
                load_order: reader.u64(),
            },
        })
    }

    fn payload(&self) -> [u8; PAYLOAD_LEN] {
        let mut payload = Vec::with_capacity(PAYLOAD_LEN);
        payload.push(VERSION);
        payload.push(match self.kind {
            Kind::Units => 0,
            Kind::Metrics => 1,
        });
        payload.extend_from_slice(&self.generation.to_be_bytes());
        for instant in [self.window.from, self.window.to, self.after.instant] {
            payload.extend_from_slice(&instant.seconds.to_be_bytes());
            payload.extend_from_slice(&instant.nanos.to_be_bytes());
        }
        payload.extend_from_slice(&self.after.station_rank.to_be_bytes());
        payload.extend_from_slice(&self.after.load_order.to_be_bytes());
        payload
            .try_into()
            .expect("the payload layout matches PAYLOAD_LEN")
    }
}

fn mac(key: &CursorKey, payload: &[u8], scope: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(&key.0).expect("HMAC takes any key length");
    mac.update(payload);
    mac.update(scope);
    mac
}

fn tag(key: &CursorKey, payload: &[u8], scope: &[u8]) -> [u8; TAG_LEN] {
    let full = mac(key, payload, scope).finalize().into_bytes();
    full[..TAG_LEN]
        .try_into()
        .expect("SHA-256 is longer than the tag")
}

/// Reads the fixed payload layout; lengths were checked before.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let bytes = self.bytes[self.at..self.at + N]
            .try_into()
            .expect("the payload length was checked");
        self.at += N;
        bytes
    }

    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }

    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take())
    }

    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.take())
    }

    fn instant(&mut self) -> Timestamp {
        Timestamp {
            seconds: i64::from_be_bytes(self.take()),
            nanos: u32::from_be_bytes(self.take()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursor() -> Cursor {
        Cursor {
            kind: Kind::Metrics,
            generation: 7,
            window: Window {
                from: Timestamp {
                    seconds: -5,
                    nanos: 1,
                },
                to: Timestamp {
                    seconds: 1_700_000_000,
                    nanos: 999_999_999,
                },
            },
            after: Position {
                instant: Timestamp {
                    seconds: 1_600_000_000,
                    nanos: 42,
                },
                station_rank: 3,
                load_order: (2 << 32) | 17,
            },
        }
    }

    #[test]
    fn a_cursor_round_trips_within_its_scope() {
        let key = CursorKey::fixed(1);
        let text = cursor().encode(&key, b"scope");
        assert!(text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-_".contains(&byte)));
        assert_eq!(Cursor::decode(&text, &key, b"scope").unwrap(), cursor());
    }

    #[test]
    fn another_scope_or_key_or_an_edit_is_rejected() {
        let key = CursorKey::fixed(1);
        let text = cursor().encode(&key, b"scope");
        let rejected =
            |text: &str, key: &CursorKey, scope: &[u8]| Cursor::decode(text, key, scope).is_err();
        assert!(rejected(&text, &key, b"other scope"));
        assert!(rejected(&text, &CursorKey::fixed(2), b"scope"));
        let mut edited = text.clone().into_bytes();
        edited[10] = if edited[10] == b'A' { b'B' } else { b'A' };
        assert!(rejected(
            std::str::from_utf8(&edited).unwrap(),
            &key,
            b"scope"
        ));
        for garbage in [
            "",
            "!!!",
            "abc",
            &text[..text.len() - 1],
            &format!("{text}AA"),
        ] {
            assert!(rejected(garbage, &key, b"scope"), "{garbage:?}");
        }
    }
}
