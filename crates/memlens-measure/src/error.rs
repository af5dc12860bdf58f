//! Errors as values: a usage error ([`usage`]) anywhere in an error chain makes `memlens` exit with status 2
//! (bad invocation); anything else exits 1 (the work failed).
use std::fmt;

/// The user asked for something that cannot be done as asked (bad option value, unknown name…).
#[derive(Debug)]
pub(crate) struct UsageError(String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Build a usage error: `return Err(usage(format!("bad --sizes value '{s}'")))`.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// True when `err` (or anything it wraps) is a usage error.
pub fn is_usage(err: &anyhow::Error) -> bool {
    err.chain().any(|e| e.is::<UsageError>())
}
