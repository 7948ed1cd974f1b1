//! What an object's name may be: `/`-separated parts, relative to the location's
//! root, each part non-empty, not `.` or `..`, without control characters or `\`.
//! The same rule for a directory and a bucket, so that a name valid on one is
//! valid on the other and means the same file or key.

/// Checks `name`; the reason it is refused otherwise.
pub(crate) fn check(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("it is empty");
    }
    for part in name.split('/') {
        match part {
            "" => return Err("it has an empty part (a leading, trailing or double `/`)"),
            "." | ".." => return Err("it has a part `.` or `..`"),
            _ if part.chars().any(|c| c.is_control() || c == '\\') => {
                return Err("it has a control character or `\\`");
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks a prefix to list under: a name, or empty for everything.
pub(crate) fn check_prefix(prefix: &str) -> Result<(), &'static str> {
    match prefix {
        "" => Ok(()),
        prefix => check(prefix),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_relative_slash_separated_parts() {
        for name in [
            "a",
            "units/day=2026-11-24/part-0.parquet",
            ".stq-export",
            "a b/c",
        ] {
            assert_eq!(check(name), Ok(()), "{name}");
        }
        for name in ["", "/a", "a/", "a//b", "../a", "a/./b", "a\\b", "a\u{7f}"] {
            assert!(check(name).is_err(), "{name}");
        }
        assert_eq!(check_prefix(""), Ok(()));
        assert!(check_prefix("units/").is_err());
    }
}
