//! Why a call did not do what it was asked: this crate's one error type. Its
//! messages name the location and the object, and hold no secret: S3's own
//! messages are kept as text, redacted ([`crate::S3Settings`]), never as the
//! `object_store` error they came from.

use std::io;

/// Why an [`crate::Objects`] call failed.
#[derive(Debug, thiserror::Error)]
pub enum ObjectsError {
    /// Text that [`crate::Location::parse`] refuses.
    #[error("{text:?} is not a directory or s3://BUCKET/PREFIX: {reason}")]
    Location { text: String, reason: &'static str },
    /// An object's name (or a prefix) that the rules of names refuse.
    #[error("{name:?} is not an object's name: {reason}")]
    Name { name: String, reason: &'static str },
    /// A byte range that is empty, or ends past the object's end.
    #[error("{location}: {name}: bytes {start}..{end} are not within its {size} bytes")]
    Range {
        location: String,
        name: String,
        start: u64,
        end: u64,
        size: u64,
    },
    /// No object of that name.
    #[error("{location}: no object {name}")]
    NotFound { location: String, name: String },
    /// The local file system refused.
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
    /// S3 refused, or could not be reached after the retries.
    #[error("{location}: cannot {operation} {name}: {message}")]
    S3 {
        location: String,
        operation: &'static str,
        name: String,
        /// object_store's message and its causes, secrets redacted.
        message: String,
    },
    /// What [`crate::Objects::get_each`]'s sink returned, which ended the read.
    #[error("{0}")]
    Sink(io::Error),
    /// The settings do not make an S3 client (an invalid variable's value, say).
    #[error("{location}: {message}")]
    Settings { location: String, message: String },
    /// The runtime that drives S3's requests could not be started, or a call came
    /// from a thread that already runs an async runtime.
    #[error("{location}: {message}")]
    Runtime { location: String, message: String },
}

impl ObjectsError {
    /// Whether the object asked for does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ObjectsError::NotFound { .. })
    }

    pub(crate) fn io(path: &std::path::Path, source: io::Error) -> ObjectsError {
        ObjectsError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// `error` and each of its causes, joined with `: `, as one message.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let text = inner.to_string();
        // object_store repeats a cause's text in its own message at times.
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        cause = inner.source();
    }
    message
}
