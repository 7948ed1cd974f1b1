//! S3's settings: the process's `AWS_*` variables (docs/api.md section 12), and
//! keeping their secrets out of every message.
//!
//! Every `AWS_*` variable that `object_store` knows is passed to it, as its own
//! `AmazonS3Builder::from_env` would: among them `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION` (else
//! `AWS_DEFAULT_REGION`, else `us-east-1`), `AWS_ENDPOINT_URL` (object_store reads
//! it as its endpoint: no mapping needed) and `AWS_ALLOW_HTTP` (`true` for an
//! `http://` endpoint). They are read here rather than by `from_env` so that a
//! test can give them without changing the process's environment.
//!
//! What is secret (the key id, the secret key, the session token, a customer's
//! encryption key) is never formatted: [`S3Settings`]'s `Debug` names the
//! variables set and no value, and every message from S3 is passed through
//! [`S3Settings::redact`] before it becomes an [`crate::ObjectsError`].

use std::collections::BTreeMap;
use std::fmt;

/// The variables whose values are secret, wherever they would be shown.
const SECRET: [&str; 4] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SSE_CUSTOMER_KEY_BASE64",
];

/// What a secret is replaced with in a message.
const REDACTED: &str = "[redacted]";

/// The `AWS_*` settings an S3 location is opened with.
#[derive(Clone, Default)]
pub struct S3Settings {
    variables: BTreeMap<String, String>,
}

impl S3Settings {
    /// The process's `AWS_*` variables (those that are valid UTF-8).
    pub fn from_env() -> S3Settings {
        S3Settings::from_variables(std::env::vars_os().filter_map(|(name, value)| {
            Some((name.into_string().ok()?, value.into_string().ok()?))
        }))
    }

    /// The `AWS_*` variables among `variables` (names as in the environment).
    pub fn from_variables<N, V>(variables: impl IntoIterator<Item = (N, V)>) -> S3Settings
    where
        N: Into<String>,
        V: Into<String>,
    {
        let variables = (variables.into_iter())
            .map(|(name, value)| (name.into(), value.into()))
            .filter(|(name, _): &(String, String)| name.starts_with("AWS_"))
            .collect();
        S3Settings { variables }
    }

    /// Each variable, as `object_store`'s configuration keys name them (lower case).
    pub(crate) fn keys(&self) -> impl Iterator<Item = (String, &str)> {
        (self.variables.iter()).map(|(name, value)| (name.to_ascii_lowercase(), value.as_str()))
    }

    /// `text` with every secret value replaced by `[redacted]`.
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for name in SECRET {
            if let Some(secret) = self.variables.get(name).filter(|value| !value.is_empty()) {
                text = text.replace(secret.as_str(), REDACTED);
            }
        }
        text
    }
}

impl fmt::Debug for S3Settings {
    /// The names of the variables set, never their values.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("S3Settings")
            .field("variables", &self.variables.keys().collect::<Vec<_>>())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_aws_variables_are_kept_and_no_value_is_shown() {
        let settings = S3Settings::from_variables([
            ("AWS_SECRET_ACCESS_KEY", "wJalr-35-SECRET"),
            ("AWS_ACCESS_KEY_ID", "AKIA-35-KEY"),
            ("AWS_REGION", "eu-west-3"),
            ("HOME", "/root"),
        ]);
        let keys: Vec<String> = settings.keys().map(|(key, _)| key).collect();
        assert_eq!(
            keys,
            ["aws_access_key_id", "aws_region", "aws_secret_access_key"]
        );
        let debug = format!("{settings:?}");
        for value in ["wJalr-35-SECRET", "AKIA-35-KEY", "eu-west-3", "HOME"] {
            assert!(!debug.contains(value), "{debug}");
        }
        assert_eq!(
            settings.redact("key AKIA-35-KEY, secret wJalr-35-SECRET in eu-west-3"),
            "key [redacted], secret [redacted] in eu-west-3"
        );
    }
}
