//! [`FfiError`], the error type every entry point body returns: a status, a message and a JSON
//! detail. The `lls_error` object the host receives is built from it (`error_object`).

use crate::runtime::status::*;
use llmsession::error::Error;
use serde_json::{Map, Value};

/// An error as the C boundary sees it: a status, a message and a JSON detail object.
///
/// Core errors convert into it with `?` (status from [`status_of`]); FFI-only conditions
/// (NULL pointer, invalid UTF-8, bad handle, panic, ...) are built with the constructors here.
#[derive(Clone, Debug, PartialEq)]
pub struct FfiError {
    status: lls_status,
    message: String,
    detail: Map<String, Value>,
}

impl FfiError {
    /// A new error with an empty detail. `status` must not be `LLS_OK`.
    pub fn new(status: lls_status, message: impl Into<String>) -> FfiError {
        debug_assert_ne!(status, LLS_OK);
        FfiError { status, message: message.into(), detail: Map::new() }
    }

    /// Adds a detail key (builder style).
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> FfiError {
        self.detail.insert(key.to_string(), value.into());
        self
    }

    /// A required pointer argument was NULL.
    pub fn null_pointer(argument: &str) -> FfiError {
        FfiError::new(LLS_ERR_NULL_POINTER, format!("argument `{argument}` is NULL")).with("argument", argument)
    }

    /// A non-pointer argument is out of range.
    pub fn invalid_argument(argument: &str, why: impl std::fmt::Display) -> FfiError {
        FfiError::new(LLS_ERR_INVALID_ARGUMENT, format!("argument `{argument}`: {why}")).with("argument", argument)
    }

    /// The status code.
    pub fn status(&self) -> lls_status {
        self.status
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The machine-readable detail (without `kind`/`message`).
    pub fn detail(&self) -> &Map<String, Value> {
        &self.detail
    }

    /// The detail as handed to the host: the detail keys plus `kind` (the status name, equal to
    /// the core [`llmsession::ErrorKind::name`] for core errors), `status` and `message`.
    pub fn detail_json(&self) -> Value {
        let mut m = self.detail.clone();
        m.insert("kind".into(), Value::from(status_name(self.status)));
        m.insert("status".into(), Value::from(self.status));
        m.insert("message".into(), Value::from(self.message.clone()));
        Value::Object(m)
    }
}

impl From<Error> for FfiError {
    fn from(e: Error) -> FfiError {
        FfiError { status: status_of(&e), message: e.message().to_string(), detail: e.detail().clone() }
    }
}

impl std::fmt::Display for FfiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FfiError {}
