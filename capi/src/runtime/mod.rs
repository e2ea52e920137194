//! The plumbing every entry point uses, apart from the entry points themselves. Nothing here
//! knows an entry point, and the modules import in one direction: `status` ← `error` ←
//! `handle` ← `error_object` ← `boundary`; `buffers` uses `status` and `error`.

pub mod boundary;
pub mod buffers;
pub mod error;
pub mod error_object;
pub mod handle;
pub mod status;
