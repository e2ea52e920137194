//! Input and output buffers.
//!
//! Input: `(const char *ptr, size_t len)`, borrowed for the call only; it need not be
//! NUL-terminated. A NULL pointer, a length beyond `PTRDIFF_MAX`, invalid UTF-8 and malformed
//! JSON each get their own status (`LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_ARGUMENT`,
//! `LLS_ERR_INVALID_UTF8`, `LLS_ERR_MALFORMED_JSON` with `line`/`column` in the detail).
//!
//! Output: `char **out, size_t *out_len`. The library allocates a NUL-terminated copy with the C
//! allocator (`malloc`) and the host frees it with `lls_string_free` only (which calls `free`;
//! the host must not rely on that and never call `free` itself, so the allocator may change).
//! A large output the library built for the call anyway (a request envelope,
//! [`OutString::write_owned`]) is handed out without a copy: its Rust buffer is registered and
//! `lls_string_free` gives it back to Rust. A provider body ([`OutString::write_shared`]) is the
//! buffer the agent's renderer keeps and renders the next body from: the host is handed a
//! reference to it, reads it and never writes into it, and `lls_string_free` drops that
//! reference. `*out_len` is the length without the NUL. Out-parameters are checked for NULL
//! before any work ([`OutString::new`], [`Out::new`]) and written last, only on success.

use crate::runtime::error::FfiError;
use crate::runtime::status::*;
use llmsession::error::Error;
use llmsession::log::Text;
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::HashMap;
use std::ffi::c_char;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Borrows an input buffer as bytes.
///
/// # Safety
/// When `ptr` is not NULL it must point to `len` readable bytes that stay valid and unchanged
/// for the lifetime `'a` (in practice: the current call).
pub unsafe fn input_bytes<'a>(ptr: *const c_char, len: usize, argument: &str) -> Result<&'a [u8], FfiError> {
    if ptr.is_null() {
        return Err(FfiError::null_pointer(argument));
    }
    if len > isize::MAX as usize {
        return Err(FfiError::invalid_argument(&format!("{argument}_len"), format!("length {len} is too large")));
    }
    // SAFETY: non-NULL, length bounded by isize::MAX, validity guaranteed by the caller.
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}

/// Checks that bytes are UTF-8 (`LLS_ERR_INVALID_UTF8` with `validUpTo` otherwise).
pub fn utf8<'a>(bytes: &'a [u8], argument: &str) -> Result<&'a str, FfiError> {
    std::str::from_utf8(bytes).map_err(|e| {
        FfiError::new(
            LLS_ERR_INVALID_UTF8,
            format!("argument `{argument}` is not valid UTF-8 (first invalid byte at offset {})", e.valid_up_to()),
        )
        .with("argument", argument)
        .with("validUpTo", e.valid_up_to() as u64)
    })
}

/// Parses JSON text (`LLS_ERR_MALFORMED_JSON` with `line`, `column` and `argument`).
pub fn json(text: &str, argument: &str) -> Result<Value, FfiError> {
    serde_json::from_str(text)
        .map_err(|e| FfiError::from(Error::from(e).context(format!("argument `{argument}`")).with("argument", argument)))
}

/// Borrows an input buffer as UTF-8 text.
///
/// # Safety
/// As for [`input_bytes`].
pub unsafe fn input_str<'a>(ptr: *const c_char, len: usize, argument: &str) -> Result<&'a str, FfiError> {
    // SAFETY: forwarded.
    utf8(unsafe { input_bytes(ptr, len, argument) }?, argument)
}

/// Borrows an optional input text: NULL gives `None`.
///
/// # Safety
/// As for [`input_bytes`].
pub unsafe fn input_str_opt<'a>(ptr: *const c_char, len: usize, argument: &str) -> Result<Option<&'a str>, FfiError> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded.
    unsafe { input_str(ptr, len, argument) }.map(Some)
}

/// Reads and parses an input JSON buffer.
///
/// # Safety
/// As for [`input_bytes`].
pub unsafe fn input_json(ptr: *const c_char, len: usize, argument: &str) -> Result<Value, FfiError> {
    // SAFETY: forwarded.
    json(unsafe { input_str(ptr, len, argument) }?, argument)
}

/// Reads an input JSON buffer, checks that it parses, and returns the text itself.
///
/// # Safety
/// As for [`input_bytes`].
pub unsafe fn input_json_text<'a>(ptr: *const c_char, len: usize, argument: &str) -> Result<&'a str, FfiError> {
    // SAFETY: forwarded.
    let text = unsafe { input_str(ptr, len, argument) }?;
    json(text, argument)?;
    Ok(text)
}

/// Copies bytes into a new NUL-terminated buffer from the C allocator.
pub fn alloc_c_string(bytes: &[u8]) -> Result<*mut c_char, FfiError> {
    // SAFETY: malloc has no preconditions; the result is checked for NULL.
    let p = unsafe { libc::malloc(bytes.len() + 1) }.cast::<u8>();
    if p.is_null() {
        return Err(FfiError::new(LLS_ERR_OUT_OF_MEMORY, format!("could not allocate {} bytes for an output buffer", bytes.len() + 1)));
    }
    // SAFETY: `p` has room for len + 1 bytes and does not overlap `bytes`.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
        p.add(bytes.len()).write(0);
    }
    Ok(p.cast())
}

/// Outputs at least this long are handed out without a copy by [`OutString::write_owned`].
/// Registering a buffer (a lock and a hash-map insert, and the same at `lls_string_free`) costs
/// less than a `malloc` and a copy from a few KiB on: at 64 KiB, as before, a 46 KB provider body
/// was copied at every step, 2 to 5 µs of the step in every binding (docs/performance.md, issue
/// 28). Small outputs (errors, reports) stay plain `malloc`ed copies.
const OWNED_MIN: usize = 4 * 1024;

/// A buffer handed out without a copy, until `lls_string_free`.
enum Held {
    /// A `Vec<u8>`'s buffer given up by [`OutString::write_owned`]: its capacity.
    Vec(usize),
    /// A buffer shared with the library ([`OutString::write_shared`]): a reference to it, and
    /// how many times it was handed out and not freed yet.
    Shared(Arc<String>, usize),
}

/// Buffers handed out by [`OutString::write_owned`] and [`OutString::write_shared`] and not
/// freed yet, by address.
static OWNED: Mutex<Option<HashMap<usize, Held>>> = Mutex::new(None);

/// How many buffers [`OWNED`] holds (lets `lls_string_free` skip the lock when none).
static OWNED_LIVE: AtomicUsize = AtomicUsize::new(0);

/// Strings handed out by [`OutString`] and not yet given to `lls_string_free`.
static LIVE_STRINGS: AtomicUsize = AtomicUsize::new(0);

/// A checked `char **out, size_t *out_len` pair, written only by [`OutString::write`] or
/// [`OutString::write_owned`].
#[derive(Debug)]
pub struct OutString {
    out: *mut *mut c_char,
    out_len: *mut usize,
}

impl OutString {
    /// Checks the pair up front: `out` is required, `out_len` may be NULL (the string is
    /// NUL-terminated either way).
    ///
    /// # Safety
    /// `out` (when not NULL) and `out_len` (when not NULL) must be valid for writes until
    /// [`OutString::write`] is called.
    pub unsafe fn new(out: *mut *mut c_char, out_len: *mut usize, argument: &str) -> Result<OutString, FfiError> {
        if out.is_null() {
            return Err(FfiError::null_pointer(argument));
        }
        Ok(OutString { out, out_len })
    }

    /// Hands `text` out without copying it when it is large (at least [`OWNED_MIN`] bytes):
    /// its buffer gets the NUL (usually within its capacity) and is registered, so that
    /// `lls_string_free` returns it to Rust; a smaller text is copied as by
    /// [`OutString::write`]. For outputs built for the call anyway, such as request envelopes,
    /// where a copy of half a megabyte would cost more than the FFI call itself.
    pub fn write_owned(self, text: String) -> Result<(), FfiError> {
        if text.len() < OWNED_MIN {
            return self.write(&text);
        }
        let len = text.len();
        let mut bytes = text.into_bytes();
        bytes.push(0);
        let mut bytes = std::mem::ManuallyDrop::new(bytes);
        let (p, cap) = (bytes.as_mut_ptr(), bytes.capacity());
        {
            let mut owned = OWNED.lock();
            let map = owned.get_or_insert_with(HashMap::new);
            map.insert(p as usize, Held::Vec(cap));
            OWNED_LIVE.store(map.len(), Ordering::Release);
        }
        LIVE_STRINGS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: validity promised to `new`.
        unsafe {
            self.out.write(p.cast());
            if !self.out_len.is_null() {
                self.out_len.write(len);
            }
        }
        Ok(())
    }

    /// Hands out a text the library keeps too (a provider body, which the agent's renderer
    /// renders the next body from) without copying it when it is large and a NUL follows it in
    /// its buffer ([`Text::c_buffer`]): the host gets a reference to that buffer, registered so
    /// that `lls_string_free` drops it, and must only read it. Otherwise as
    /// [`OutString::write`].
    pub fn write_shared(self, text: &Text) -> Result<(), FfiError> {
        let Some((buf, start)) = text.c_buffer().filter(|_| text.len() >= OWNED_MIN) else {
            return self.write(text);
        };
        let p = buf[start..].as_ptr();
        {
            let mut owned = OWNED.lock();
            let map = owned.get_or_insert_with(HashMap::new);
            match map.get_mut(&(p as usize)) {
                // The same text handed out again: each is freed once.
                Some(Held::Shared(_, n)) => *n += 1,
                _ => {
                    map.insert(p as usize, Held::Shared(buf.clone(), 1));
                }
            }
            OWNED_LIVE.store(map.len(), Ordering::Release);
        }
        LIVE_STRINGS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: validity promised to `new`. The host gets a `char *` by the ABI's convention;
        // it reads the buffer and never writes into it (the function's documentation says so).
        unsafe {
            self.out.write(p.cast_mut().cast());
            if !self.out_len.is_null() {
                self.out_len.write(text.len());
            }
        }
        Ok(())
    }

    /// Writes NULL and length 0: "nothing to hand out" (the last step of a call).
    pub fn write_none(self) {
        // SAFETY: validity promised to `new`.
        unsafe {
            self.out.write(std::ptr::null_mut());
            if !self.out_len.is_null() {
                self.out_len.write(0);
            }
        }
    }

    /// Allocates the output and writes both out-parameters (the last step of a call).
    /// Writes a core wire type's JSON (see [`encode`]).
    pub fn write_json<T: serde::Serialize>(self, value: &T) -> Result<(), FfiError> {
        self.write(&encode(value).to_string())
    }

    /// Writes `text` as an owned C string (and its length).
    pub fn write(self, text: &str) -> Result<(), FfiError> {
        let p = alloc_c_string(text.as_bytes())?;
        LIVE_STRINGS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: validity promised to `new`.
        unsafe {
            self.out.write(p);
            if !self.out_len.is_null() {
                self.out_len.write(text.len());
            }
        }
        Ok(())
    }
}

/// A checked out-parameter of a plain type, written only by [`Out::write`].
#[derive(Debug)]
pub struct Out<T> {
    ptr: *mut T,
}

impl<T> Out<T> {
    /// Checks the pointer up front (`LLS_ERR_NULL_POINTER` when NULL).
    ///
    /// # Safety
    /// `ptr` (when not NULL) must be valid for writing a `T` until [`Out::write`] is called.
    pub unsafe fn new(ptr: *mut T, argument: &str) -> Result<Out<T>, FfiError> {
        if ptr.is_null() {
            return Err(FfiError::null_pointer(argument));
        }
        Ok(Out { ptr })
    }

    /// Writes the value (the last step of a call).
    pub fn write(self, value: T) {
        // SAFETY: validity promised to `new`.
        unsafe { self.ptr.write(value) }
    }
}

/// An optional out-parameter of a plain type (NULL means "not wanted"), written only by
/// [`OptOut::write`].
#[derive(Debug)]
pub struct OptOut<T> {
    ptr: *mut T,
}

impl<T> OptOut<T> {
    /// Wraps a pointer that may be NULL.
    ///
    /// # Safety
    /// `ptr` (when not NULL) must be valid for writing a `T` until [`OptOut::write`] is called.
    pub unsafe fn new(ptr: *mut T) -> OptOut<T> {
        OptOut { ptr }
    }

    /// Writes the value when the pointer is not NULL (the last step of a call).
    pub fn write(self, value: T) {
        if !self.ptr.is_null() {
            // SAFETY: validity promised to `new`.
            unsafe { self.ptr.write(value) }
        }
    }
}

/// Reads an optional JSON options buffer: NULL gives `None` (defaults), otherwise it must be
/// well-formed JSON.
///
/// # Safety
/// As for [`input_bytes`].
pub unsafe fn input_json_opt(ptr: *const c_char, len: usize, argument: &str) -> Result<Option<Value>, FfiError> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded.
    unsafe { input_json(ptr, len, argument) }.map(Some)
}

/// Frees a string handed out through an `OutString` (`lls_string_free`). NULL does nothing.
///
/// # Safety
/// `s` must be NULL or a string returned by llmsession that was not freed yet.
pub unsafe fn free_string(s: *mut c_char) {
    if s.is_null() {
        return;
    }
    // Saturating: a count gone wrong through a host's double free must not wrap.
    let _ = LIVE_STRINGS.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    if OWNED_LIVE.load(Ordering::Acquire) != 0 {
        // `Some(None)`: one of several references to a shared buffer, given back.
        let held = {
            let mut owned = OWNED.lock();
            let held = owned.as_mut().and_then(|m| match m.get_mut(&(s as usize)) {
                Some(Held::Shared(_, n)) if *n > 1 => {
                    *n -= 1;
                    Some(None)
                }
                _ => m.remove(&(s as usize)).map(Some),
            });
            OWNED_LIVE.store(owned.as_ref().map_or(0, HashMap::len), Ordering::Release);
            held
        };
        match held {
            Some(None) => return,
            Some(Some(Held::Vec(cap))) => {
                // SAFETY: `s` is the buffer of a `Vec<u8>` of capacity `cap` that `write_owned`
                // gave up (registered, so handed out and not freed yet).
                drop(unsafe { Vec::from_raw_parts(s.cast::<u8>(), 0, cap) });
                return;
            }
            // The host's reference to a shared buffer, dropped (outside the lock).
            Some(Some(Held::Shared(buf, _))) => {
                drop(buf);
                return;
            }
            None => {}
        }
    }
    // SAFETY: `s` came from `alloc_c_string` (malloc), per the contract.
    unsafe { libc::free(s.cast()) }
}

/// How many strings handed out are not freed yet (`lls_live_string_count`).
pub fn live_strings() -> usize {
    LIVE_STRINGS.load(Ordering::Relaxed)
}

/// A core wire type as the JSON the C ABI hands out: through a `serde_json::Value`, so object
/// keys come out in one stable (sorted) order, whatever the order of the type's fields.
pub fn encode<T: serde::Serialize>(value: &T) -> serde_json::Value {
    // The core's wire types serialise to JSON objects without fail (no non-string map keys).
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_errors_are_distinct() {
        let bad = b"{\"a\": \xff}";
        let e = unsafe { input_json(bad.as_ptr().cast(), bad.len(), "json") }.unwrap_err();
        assert_eq!(e.status(), LLS_ERR_INVALID_UTF8);
        assert_eq!(e.detail()["validUpTo"], 6);
        let e = unsafe { input_json(std::ptr::null(), 0, "json") }.unwrap_err();
        assert_eq!(e.status(), LLS_ERR_NULL_POINTER);
        let txt = b"{\n \"a\": tru }";
        let e = unsafe { input_json(txt.as_ptr().cast(), txt.len(), "json") }.unwrap_err();
        assert_eq!(e.status(), LLS_ERR_MALFORMED_JSON);
        assert_eq!(e.detail()["line"], 2);
        assert!(e.message().starts_with("argument `json`: malformed JSON"), "{}", e.message());
        let ok = b"[1,2] trailing";
        let e = unsafe { input_json(ok.as_ptr().cast(), 5, "json") }.unwrap();
        assert_eq!(e, serde_json::json!([1, 2]));
        let e = unsafe { input_bytes(ok.as_ptr().cast(), usize::MAX, "json") }.unwrap_err();
        assert_eq!(e.status(), LLS_ERR_INVALID_ARGUMENT);
    }

    #[test]
    fn output_strings_round_trip() {
        let mut out: *mut c_char = std::ptr::null_mut();
        let mut len = 0usize;
        let o = unsafe { OutString::new(&mut out, &mut len, "out") }.unwrap();
        o.write("héllo").unwrap();
        assert_eq!(len, 6);
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(out) }.to_str().unwrap(), "héllo");
        unsafe { free_string(out) };
        unsafe { free_string(std::ptr::null_mut()) };
        assert!(unsafe { OutString::new(std::ptr::null_mut(), &mut len, "out") }.is_err());
    }

    #[test]
    fn large_outputs_are_handed_out_without_a_copy() {
        let mut text = String::with_capacity(OWNED_MIN + 11);
        text.push_str(&"x".repeat(OWNED_MIN + 10));
        let expected = text.clone();
        let mut out: *mut c_char = std::ptr::null_mut();
        let mut len = 0usize;
        let o = unsafe { OutString::new(&mut out, &mut len, "out") }.unwrap();
        let p = text.as_ptr();
        o.write_owned(text).unwrap();
        assert_eq!(out.cast::<u8>().cast_const(), p, "the String's own buffer");
        assert_eq!(len, expected.len());
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(out) }.to_str().unwrap(), expected);
        // A small one is copied, and both free through lls_string_free in any order.
        let mut small: *mut c_char = std::ptr::null_mut();
        let o = unsafe { OutString::new(&mut small, std::ptr::null_mut(), "out") }.unwrap();
        o.write_owned("small".to_string()).unwrap();
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(small) }.to_str().unwrap(), "small");
        unsafe { free_string(out) };
        unsafe { free_string(small) };
    }

    #[test]
    fn shared_outputs_are_the_library_buffer_and_each_handout_is_freed_once() {
        let body = Text::terminated("b".repeat(OWNED_MIN + 5));
        let (buf, _) = body.c_buffer().unwrap();
        let hand_out = |text: &Text| {
            let mut out: *mut c_char = std::ptr::null_mut();
            let mut len = 0usize;
            let o = unsafe { OutString::new(&mut out, &mut len, "body") }.unwrap();
            o.write_shared(text).unwrap();
            (out, len)
        };
        let (out, len) = hand_out(&body);
        assert_eq!(out.cast::<u8>().cast_const(), buf.as_ptr(), "the library's own buffer, not a copy");
        assert_eq!(len, OWNED_MIN + 5);
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(out) }.to_bytes().len(), len, "NUL-terminated");
        assert_eq!(Arc::strong_count(buf), 2, "the host holds a reference");
        // The same text handed out twice: two references, each freed once.
        let (again, _) = hand_out(&body);
        assert_eq!(again, out);
        unsafe { free_string(out) };
        assert_eq!(Arc::strong_count(buf), 2, "one handout still held");
        unsafe { free_string(again) };
        assert_eq!(Arc::strong_count(buf), 1, "the host's reference dropped");
        // Small, or without the NUL after it in its buffer: a copy.
        for text in [Text::terminated("small".into()), Text::from("u".repeat(OWNED_MIN + 5))] {
            let (out, len) = hand_out(&text);
            assert_ne!(out.cast::<u8>().cast_const(), text.as_ptr());
            assert_eq!(unsafe { std::ffi::CStr::from_ptr(out) }.to_str().unwrap(), text.as_str());
            assert_eq!(len, text.len());
            unsafe { free_string(out) };
        }
    }
}
