//! Page cursors (docs/api.md section 6): opaque strings that carry where the next page
//! starts and the window the first page resolved.
//!
//! A cursor is `base64url(payload || tag)`. The payload holds the endpoint, the
//! pinned window and the identity of the last record returned: its instant, station
//! id, file path (relative to the snapshot directory) and line. Not a generation nor
//! a position in one, so the next page starts after that record in whatever data is
//! served now: across reloads, restarts, and replicas sharing the key (revision 2 of
//! the contract). The tag is an HMAC-SHA-256, under that key, of the payload *and*
//! the request's normalized filters and token: so a cursor replayed with other
//! filters, by another token, on the other endpoint, under another key, or edited by
//! hand fails the same single check, and a cursor can never widen what its token may
//! see.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::domain::record::Kind;
use crate::domain::time::{Timestamp, Window};

/// A cursor that does not continue this query: malformed, sealed to something
/// else, or made for another window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid cursor: {reason}")]
pub(crate) struct CursorError {
    /// What is wrong with it, as the error message says.
    pub(crate) reason: &'static str,
}

type HmacSha256 = Hmac<Sha256>;

const VERSION: u8 = 2;
const TAG_LEN: usize = 16;
/// The fixed part: version, kind, three instants, the line, two lengths.
const FIXED_LEN: usize = 1 + 1 + 3 * 12 + 4 + 2 + 2;

/// A record's identity, the same in every generation and process that loads the
/// same file: what a cursor names as the last record it returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RecordIdentity {
    pub(crate) instant: Timestamp,
    pub(crate) station_id: String,
    /// Relative to the snapshot directory, `/`-separated.
    pub(crate) path: String,
    pub(crate) line: u32,
}

/// What a cursor says, once its tag has been checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cursor {
    /// The kind of records it pages through.
    pub(crate) kind: Kind,
    /// The window of the query it continues.
    pub(crate) window: Window,
    /// The last record the previous page returned.
    pub(crate) after: RecordIdentity,
}

impl Cursor {
    /// Seals the cursor to `scope`, the normalized filters and token it is valid
    /// for, under `key`: the secret of the service's
    /// [`CursorKey`](crate::data::plan::CursorKey), which the plan holds.
    pub(crate) fn encode(&self, key: &[u8], scope: &[u8]) -> String {
        let mut text = self.payload();
        let tag = tag(key, &text, scope);
        text.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(text)
    }

    /// Opens a cursor made for `scope` under `key`; anything else is
    /// `invalid_cursor`.
    pub(crate) fn decode(text: &str, key: &[u8], scope: &[u8]) -> Result<Cursor, CursorError> {
        let malformed = || CursorError {
            reason: "not a cursor this service issued",
        };
        let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| malformed())?;
        if bytes.len() < FIXED_LEN + TAG_LEN || bytes[0] != VERSION {
            return Err(malformed());
        }
        let (payload, presented_tag) = bytes.split_at(bytes.len() - TAG_LEN);
        mac(key, payload, scope)
            .verify_truncated_left(presented_tag)
            .map_err(|_| CursorError {
                reason: "it belongs to another query, token or endpoint",
            })?;

        // Sealed by this key, so written by `payload` below: the layout holds.
        let mut reader = Reader {
            bytes: payload,
            at: 1,
        };
        let kind = match reader.u8() {
            0 => Kind::Units,
            _ => Kind::Metrics,
        };
        let window = Window {
            from: reader.instant(),
            to: reader.instant(),
        };
        let instant = reader.instant();
        let line = reader.u32();
        let station_length = usize::from(reader.u16());
        let path_length = usize::from(reader.u16());
        if payload.len() != FIXED_LEN + station_length + path_length {
            return Err(malformed());
        }
        let station_id = reader.text(station_length).ok_or_else(malformed)?;
        let path = reader.text(path_length).ok_or_else(malformed)?;
        Ok(Cursor {
            kind,
            window,
            after: RecordIdentity {
                instant,
                station_id,
                path,
                line,
            },
        })
    }

    fn payload(&self) -> Vec<u8> {
        let after = &self.after;
        let mut payload = Vec::with_capacity(FIXED_LEN + after.station_id.len() + after.path.len());
        payload.push(VERSION);
        payload.push(match self.kind {
            Kind::Units => 0,
            Kind::Metrics => 1,
        });
        for instant in [self.window.from, self.window.to, after.instant] {
            payload.extend_from_slice(&instant.seconds.to_be_bytes());
            payload.extend_from_slice(&instant.nanos.to_be_bytes());
        }
        payload.extend_from_slice(&after.line.to_be_bytes());
        // Station ids and paths are far shorter than 64 KiB; a longer one is cut,
        // which only makes the cursor invalid, never wrong.
        let length = |text: &str| u16::try_from(text.len()).unwrap_or(u16::MAX);
        payload.extend_from_slice(&length(&after.station_id).to_be_bytes());
        payload.extend_from_slice(&length(&after.path).to_be_bytes());
        payload.extend_from_slice(
            &after.station_id.as_bytes()[..usize::from(length(&after.station_id))],
        );
        payload.extend_from_slice(&after.path.as_bytes()[..usize::from(length(&after.path))]);
        payload
    }
}

fn mac(key: &[u8], payload: &[u8], scope: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(payload);
    mac.update(scope);
    mac
}

fn tag(key: &[u8], payload: &[u8], scope: &[u8]) -> [u8; TAG_LEN] {
    let full = mac(key, payload, scope).finalize().into_bytes();
    full[..TAG_LEN]
        .try_into()
        .expect("SHA-256 is longer than the tag")
}

/// Reads the payload layout; its length was checked before.
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

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.take())
    }

    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take())
    }

    fn text(&mut self, length: usize) -> Option<String> {
        let bytes = self.bytes.get(self.at..self.at + length)?;
        self.at += length;
        String::from_utf8(bytes.to_vec()).ok()
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
            after: RecordIdentity {
                instant: Timestamp {
                    seconds: 1_600_000_000,
                    nanos: 42,
                },
                station_id: "ST-é1".into(),
                path: "line-1/a.metrics.jsonl.gz".into(),
                line: 17,
            },
        }
    }

    #[test]
    fn a_cursor_round_trips_within_its_scope() {
        let key = [1; 32];
        let text = cursor().encode(&key, b"scope");
        assert!(text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-_".contains(&byte)));
        assert_eq!(Cursor::decode(&text, &key, b"scope").unwrap(), cursor());
    }

    #[test]
    fn another_scope_or_key_or_an_edit_is_rejected() {
        let key = [1; 32];
        let text = cursor().encode(&key, b"scope");
        let rejected =
            |text: &str, key: &[u8], scope: &[u8]| Cursor::decode(text, key, scope).is_err();
        assert!(rejected(&text, &key, b"other scope"));
        assert!(rejected(&text, &[2; 32], b"scope"));
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
