//! Library-wide entry points: versions, status names, leak counters and `lls_string_free`.

use crate::runtime::boundary::boundary_value;
use crate::runtime::buffers;
use crate::runtime::handle::live_handles;
use crate::runtime::status::*;
use std::ffi::c_char;

/// Major version of llmsession (the header this program was compiled against).
///
/// Thread safety: a constant.
pub const LLS_VERSION_MAJOR: u32 = 0;
/// Minor version of llmsession. While the major version is 0, a minor bump may break the ABI
/// (the soname is `libllmsession.so.0.MINOR`).
///
/// Thread safety: a constant.
pub const LLS_VERSION_MINOR: u32 = 2;
/// Patch version of llmsession.
///
/// Thread safety: a constant.
pub const LLS_VERSION_PATCH: u32 = 0;
/// The ABI version this header describes. Compare with `lls_abi_version()` at load time and
/// refuse to run on a mismatch. It is bumped on every incompatible change of the C ABI
/// (a removed or changed function, type, status value or callback rule).
///
/// Thread safety: a constant.
pub const LLS_ABI_VERSION: u32 = 2;
/// Compatible additions made to ABI version `LLS_ABI_VERSION` (functions, constants, structs,
/// optional fields), counted from 0 and reset when `LLS_ABI_VERSION` is bumped. A host that
/// uses an addition checks `lls_abi_minor() >= N` for the minor that brought it (docs/abi.md
/// lists them; 1: the provider-body hot path and `lls_live_string_count`; 2:
/// `lls_status_name`; 3: `lls_tool_calls_*` and the observer hook, `lls_set_observer`; 4:
/// `lls_agent_record_body_info`, `lls_agent_record_stream_info` and `lls_recorded_info`; 5: the
/// store conformance kit, `lls_store_conformance`, `lls_store_conformance_url` and
/// `LLS_ERR_NONCONFORMING`, the `"gemini-interactions"` format and the `promptCacheOptions` /
/// `promptCacheBreakpoints` render options; 6: native compaction,
/// `lls_agent_native_compaction_begin`, `lls_agent_native_compaction_record`,
/// `lls_agent_native_compaction_fail`; agent trees, `lls_agent_spawn`,
/// `lls_agent_finish_child`, the explain option `tree`, `lls_agent_new` without `config` (wake
/// a session with its logged options), the `parent` option of `lls_store_list_sessions`;
/// the cache clock, `lls_agent_cache_clock`, `lls_agent_keepalive_body`, `LLS_PURPOSE_KEEPALIVE`
/// and the `lls_agent_compact` option `trigger`; 7: checkpoints, the `"checkpoints"` and
/// `"check"` options of every open, `file:DIR` listings).
///
/// Thread safety: a constant.
pub const LLS_ABI_MINOR: u32 = 7;

/// The library version as a static NUL-terminated string, e.g. `"0.2.0"`. Never free it.
///
/// Thread safety: may be called from any thread.
#[no_mangle]
pub extern "C" fn lls_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The ABI version of the loaded library (see `LLS_ABI_VERSION`).
///
/// Thread safety: may be called from any thread.
#[no_mangle]
pub extern "C" fn lls_abi_version() -> u32 {
    LLS_ABI_VERSION
}

/// The ABI minor version of the loaded library (see `LLS_ABI_MINOR`): which compatible
/// additions to ABI version `lls_abi_version()` it has. A library older than this function
/// (ABI 2 minor 0) lacks the symbol.
///
/// Thread safety: may be called from any thread.
#[no_mangle]
pub extern "C" fn lls_abi_minor() -> u32 {
    LLS_ABI_MINOR
}

/// Every status name as a NUL-terminated string, built once: `lls_status_name` hands out
/// pointers into it, so they live as long as the library.
static STATUS_NAMES: once_cell::sync::Lazy<Vec<(lls_status, std::ffi::CString)>> = once_cell::sync::Lazy::new(|| {
    let statuses = std::iter::once(LLS_OK).chain(ALL_KINDS.iter().map(|k| status_for_kind(*k))).chain(FFI_STATUSES);
    statuses.map(|s| (s, std::ffi::CString::new(status_name(s)).expect("status names have no NUL"))).collect()
});

/// The stable short name of a status, the same word error details carry as `kind`: `"ok"`,
/// `"corrupt-log"`, `"null-pointer"`, ...; `"unknown"` for a value this library does not
/// define. Bindings use it instead of a table of their own. The string is static: never
/// free it. Since ABI 2 minor 2.
///
/// Thread safety: may be called from any thread.
#[no_mangle]
pub extern "C" fn lls_status_name(status: lls_status) -> *const c_char {
    match STATUS_NAMES.iter().find(|(s, _)| *s == status) {
        Some((_, name)) => name.as_ptr(),
        None => c"unknown".as_ptr(),
    }
}

/// The number of live handles of every type (errors, cancel tokens, replies awaiting an
/// answer, ...) in this process. A leak check for tests and bindings: it returns to its earlier
/// value once everything created since has been freed (or, for replies, answered). Handles
/// are kept alive by the library's registry, so a leaked handle is "still reachable" for
/// valgrind or LeakSanitizer; this count is how to see it.
///
/// Thread safety: may be called from any thread; other threads may change the count.
#[no_mangle]
pub extern "C" fn lls_live_handle_count() -> usize {
    boundary_value(0, live_handles)
}

/// Frees a string returned by llmsession (any `char **out` output). `lls_string_free(NULL)` does
/// nothing. Never pass a pointer that llmsession did not return, and free each string once.
///
/// # Safety
/// `s` must be NULL or a string returned by llmsession that was not freed yet.
///
/// Thread safety: may be called from any thread; each string exactly once.
#[no_mangle]
pub unsafe extern "C" fn lls_string_free(s: *mut c_char) {
    // SAFETY: forwarded from the caller.
    unsafe { buffers::free_string(s) }
}
/// The number of strings llmsession has handed out (through any `char **out` output) that have
/// not been given to `lls_string_free` yet, in this process. A leak check for tests and
/// bindings, like `lls_live_handle_count`: it returns to its earlier value once every string
/// returned since has been freed. Views that bindings lend over library strings (Go's
/// `BodyView`, Node's Buffers over library memory) are counted until they are released.
///
/// Thread safety: may be called from any thread; other threads may change the count.
#[no_mangle]
pub extern "C" fn lls_live_string_count() -> usize {
    buffers::live_strings()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_match_the_package_version() {
        let v = format!("{LLS_VERSION_MAJOR}.{LLS_VERSION_MINOR}.{LLS_VERSION_PATCH}");
        assert_eq!(v, env!("CARGO_PKG_VERSION"));
        let s = unsafe { std::ffi::CStr::from_ptr(lls_version()) };
        assert_eq!(s.to_str().unwrap(), v);
        assert_eq!(lls_abi_version(), LLS_ABI_VERSION);
        assert_eq!(lls_abi_minor(), LLS_ABI_MINOR);
    }

    #[test]
    fn every_status_has_its_name_as_a_static_string() {
        let mut seen = vec![LLS_OK];
        seen.extend(ALL_KINDS.iter().map(|k| status_for_kind(*k)));
        seen.extend(FFI_STATUSES);
        for s in seen {
            let c = unsafe { std::ffi::CStr::from_ptr(lls_status_name(s)) };
            assert_eq!(c.to_str().unwrap(), status_name(s));
        }
        let c = unsafe { std::ffi::CStr::from_ptr(lls_status_name(-1)) };
        assert_eq!(c.to_str().unwrap(), "unknown");
    }
}
