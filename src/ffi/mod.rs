//! The C ABI (see `docs/abi.md` and `include/llmsession.h`).
//!
//! This is the only module allowed `unsafe` and `extern "C"`. It is thin: decode arguments,
//! call the core, encode results. The pieces every entry point uses:
//!
//! - [`status`] holds `lls_status` values and the mapping from [`crate::Error`].
//! - [`error`] holds `lls_error` and [`error::FfiError`], the error type of entry point bodies.
//! - [`handle`] holds tagged, registered handles ([`handle::register`], [`handle::lookup`],
//!   [`handle::free`]) and [`handle::Guarded`] for exclusive access with panic poisoning.
//! - [`mod@boundary`] holds [`boundary::boundary()`], the panic-catching wrapper of every body.
//! - [`buffers`] holds JSON input buffers, `char **out` outputs and `lls_string_free`.
//! - [`cancel`] holds `lls_cancel`.
//! - [`callback`] and [`reply`] hold host callbacks ([`callback::HostCallback`]) and `lls_reply`.
//! - [`mod@body`] holds the one-way hot path of an agent (`lls_agent_next_body`, ...).
//! - [`mod@stream`] holds `lls_stream` (streamed responses).
//! - [`version`] holds versions.
//! - [`mod@url`] holds the stores named by URL (`lls_session_open_url`, `lls_store_list_sessions`).
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

pub mod agent;
pub mod body;
pub mod boundary;
pub mod buffers;
pub mod callback;
pub mod cancel;
pub mod error;
pub mod explain;
pub mod handle;
pub mod render;
pub mod replay;
pub mod reply;
pub mod response;
pub mod session;
pub mod status;
pub mod stream;
pub mod url;
pub mod version;

pub use boundary::{boundary, boundary_value};
pub use callback::HostCallback;
pub use error::FfiError;
pub use status::lls_status;
