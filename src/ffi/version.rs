//! Library and ABI versions.

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
/// `lls_status_name`).
///
/// Thread safety: a constant.
pub const LLS_ABI_MINOR: u32 = 2;

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
}
