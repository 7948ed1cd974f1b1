//! Where objects live: `s3://BUCKET/PREFIX` or a directory, as a command line
//! names it (docs/api.md sections 12 and 13).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::ObjectsError;

/// A directory, or a bucket and the prefix every object's name is put under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A directory of the local file system (made when the first object is put).
    Directory(PathBuf),
    /// An S3 bucket, and the prefix under it: no leading or trailing `/`, empty
    /// for the bucket's root.
    S3 { bucket: String, prefix: String },
}

impl Location {
    /// `s3://BUCKET/PREFIX` (`s3://BUCKET` for the bucket's root), or any other
    /// text as a local path.
    pub fn parse(text: &str) -> Result<Location, ObjectsError> {
        let invalid = |reason: &'static str| ObjectsError::Location {
            text: text.to_owned(),
            reason,
        };
        if text.is_empty() {
            return Err(invalid("it is empty"));
        }
        let Some(rest) = strip_scheme(text) else {
            return Ok(Location::Directory(PathBuf::from(text)));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if !valid_bucket(bucket) {
            return Err(invalid(
                "a bucket's name is 3 to 63 lower-case letters, digits, `.` and `-`, beginning \
                 and ending with a letter or digit",
            ));
        }
        let prefix = prefix.trim_end_matches('/');
        if !prefix.is_empty() {
            crate::names::check(prefix).map_err(invalid)?;
        }
        Ok(Location::S3 {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
        })
    }
}

/// What follows `s3://` (in any case of the scheme), or `None` for a path.
fn strip_scheme(text: &str) -> Option<&str> {
    let scheme = text.get(..5)?;
    scheme
        .eq_ignore_ascii_case("s3://")
        .then(|| &text[scheme.len()..])
}

/// S3's rule for a bucket's name (general purpose buckets).
fn valid_bucket(bucket: &str) -> bool {
    let bytes = bucket.as_bytes();
    let allowed = |byte: &u8| byte.is_ascii_lowercase() || byte.is_ascii_digit();
    (3..=63).contains(&bytes.len())
        && bytes.first().is_some_and(allowed)
        && bytes.last().is_some_and(allowed)
        && (bytes.iter()).all(|byte| allowed(byte) || *byte == b'.' || *byte == b'-')
        && !bucket.contains("..")
}

impl FromStr for Location {
    type Err = ObjectsError;

    fn from_str(text: &str) -> Result<Location, ObjectsError> {
        Location::parse(text)
    }
}

impl fmt::Display for Location {
    /// As [`Location::parse`] reads it: `s3://BUCKET/PREFIX`, or the path.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Directory(path) => write!(formatter, "{}", path.display()),
            Location::S3 { bucket, prefix } if prefix.is_empty() => {
                write!(formatter, "s3://{bucket}")
            }
            Location::S3 { bucket, prefix } => write!(formatter, "s3://{bucket}/{prefix}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(bucket: &str, prefix: &str) -> Location {
        Location::S3 {
            bucket: bucket.into(),
            prefix: prefix.into(),
        }
    }

    #[test]
    fn s3_locations_name_a_bucket_and_a_prefix() {
        assert_eq!(Location::parse("s3://lake").unwrap(), s3("lake", ""));
        assert_eq!(Location::parse("s3://lake/").unwrap(), s3("lake", ""));
        assert_eq!(
            Location::parse("s3://plant-1.lake/stq/export/").unwrap(),
            s3("plant-1.lake", "stq/export")
        );
        assert_eq!(Location::parse("S3://lake/a").unwrap(), s3("lake", "a"));
        for location in ["s3://lake", "s3://lake/stq/export"] {
            assert_eq!(Location::parse(location).unwrap().to_string(), location);
        }
    }

    #[test]
    fn anything_else_is_a_directory() {
        for path in ["lake", "/var/lib/stq/export", "./s3:/x", "s3:lake", "s3"] {
            assert_eq!(
                Location::parse(path).unwrap(),
                Location::Directory(PathBuf::from(path))
            );
            assert_eq!(Location::parse(path).unwrap().to_string(), path);
        }
    }

    #[test]
    fn invalid_buckets_and_prefixes_are_refused() {
        for text in [
            "",
            "s3://",
            "s3:///prefix",
            "s3://ab",
            "s3://Lake",
            "s3://lake_1",
            "s3://-lake",
            "s3://lake-",
            "s3://la..ke",
            "s3://lake//x",
            "s3://lake/a/../b",
            "s3://lake/./b",
            "s3://lake/a\nb",
        ] {
            let error = Location::parse(text).unwrap_err();
            assert!(
                matches!(error, ObjectsError::Location { .. }),
                "{text:?}: {error}"
            );
        }
    }
}
