//! The C ABI of llmsession (see `docs/abi.md` and `include/llmsession.h`).
//!
//! This crate is the only code allowed `unsafe` and `extern "C"`, and it holds no domain logic:
//! every entry point decodes its arguments, calls the core crate (`llmsession`) and encodes the
//! result. It has three rooms, which import downwards only (entry points → callbacks →
//! runtime):
//!
//! - [`runtime`]: the plumbing every entry point uses. [`runtime::status`] (`lls_status` values
//!   and the mapping from [`llmsession::Error`]), [`runtime::error`] ([`runtime::error::FfiError`],
//!   the error type of entry point bodies), [`runtime::handle`] (tagged, registered handles and
//!   [`runtime::handle::Guarded`]), [`runtime::error_object`] (the `lls_error` object),
//!   [`runtime::boundary`] (the panic-catching wrapper of every body), [`runtime::buffers`]
//!   (JSON input buffers and `char **out` outputs), [`runtime::wire`] (decoding and encoding the
//!   core's wire types).
//! - [`callbacks`]: the host-callback adapters. [`callbacks::host::HostCallback`] owns and calls
//!   one host function; [`callbacks::listeners`], [`callbacks::summariser`],
//!   [`callbacks::counter`] and [`callbacks::store`] adapt it to the core's traits.
//! - The entry points, one file per concept: [`mod@agent`], [`mod@body`] (the provider-body hot
//!   path), [`mod@clock`] (the cache clock and its keep-warm request), [`mod@session`], [`mod@url`] (stores named by URL), [`mod@render`], [`mod@response`],
//!   [`mod@stream`], [`mod@tools`] (the tool calls of a message, for hosts without a JSON
//!   parser), [`mod@explain`], [`mod@replay`], [`mod@cancel`], [`mod@reply`] (answering a
//!   callback), [`mod@observe`] (the observer hook), [`mod@error`] (reading an `lls_error`),
//!   [`mod@library`] (versions, status names, leak counters, `lls_string_free`).
//!
//! # Writing an entry point
//!
//! ```ignore
//! /// Doc comment (lands in the header); ends with its thread-safety rule.
//! ///
//! /// Thread safety: exclusive; serialised internally per session.
//! #[no_mangle]
//! pub unsafe extern "C" fn lls_session_do(
//!     session: *const lls_session,
//!     json: *const c_char,
//!     len: usize,
//!     out: *mut *mut c_char,
//!     out_len: *mut usize,
//!     err: *mut *mut lls_error,
//! ) -> lls_status {
//!     unsafe {
//!         boundary(err, || {
//!             // 1. adopt callbacks first (so userdata is freed on any failure),
//!             // 2. check out-parameters, 3. resolve handles, 4. decode inputs,
//!             let out = OutString::new(out, out_len, "out")?;
//!             let s = handle::lookup::<SessionObject>(session, "session")?;
//!             let input = buffers::input_json(json, len, "json")?;
//!             // 5. call the core (core errors convert with `?`),
//!             let result = s.state.write()?.do_something(input)?;
//!             // 6. write out-parameters last.
//!             out.write(&result.to_string())
//!         })
//!     }
//! }
//! ```
//!
//! Handle types implement [`handle::HandleKind`] with a unique `MAGIC` and an opaque C marker
//! type (`pub struct lls_session { _opaque: [u8; 0] }`, which cbindgen emits as an incomplete
//! struct). Free functions are `extern "C" fn lls_x_free(x: *mut lls_x)` calling
//! [`handle::free`].
#![allow(unsafe_code)]
#![allow(non_camel_case_types)]

pub mod runtime;

pub mod callbacks;

pub mod library;

pub mod agent;
pub mod body;
pub mod cancel;
pub mod clock;
pub mod conformance;
pub mod error;
pub mod explain;
pub mod observe;
pub mod render;
pub mod replay;
pub mod reply;
pub mod response;
pub mod session;
pub mod stream;
pub mod tools;
pub mod url;

pub use callbacks::host::HostCallback;
pub use runtime::boundary::{boundary, boundary_value};
pub use runtime::error::FfiError;
pub use runtime::status::lls_status;
