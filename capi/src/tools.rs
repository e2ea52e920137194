//! `lls_tool_calls`: the tool calls of an assistant message, read for a host without a JSON
//! parser (the core is `llmsession::agent::tool_calls`). Since ABI 2 minor 3.

use crate::runtime::boundary::{boundary, boundary_value};
use crate::runtime::buffers::{self, OptOut, Out};
use crate::runtime::error::FfiError;
use crate::runtime::error_object::lls_error;
use crate::runtime::handle::{self, HandleKind};
use crate::runtime::status::lls_status;
use llmsession::agent::tool_calls::ToolCalls;
use std::ffi::c_char;

/// The tool calls read from one JSON value by `lls_tool_calls_parse`: a fixed list, read with
/// `lls_tool_calls_count` and `lls_tool_calls_get`, freed with `lls_tool_calls_free`.
///
/// Thread safety: immutable once made; may be read from any thread, concurrently.
pub struct lls_tool_calls {
    _opaque: [u8; 0],
}

/// One call's strings, each stored with a NUL after it (the length excludes it).
#[derive(Debug)]
struct CallText {
    id: Vec<u8>,
    name: Vec<u8>,
    arguments: Vec<u8>,
}

/// The payload of an `lls_tool_calls` handle.
#[derive(Debug)]
pub struct ToolCallsObject {
    calls: Vec<CallText>,
}

impl HandleKind for ToolCallsObject {
    type C = lls_tool_calls;
    const NAME: &'static str = "lls_tool_calls";
    const MAGIC: u64 = u64::from_be_bytes(*b"LLSTCL01");
}

fn nul_terminated(s: String) -> Vec<u8> {
    let mut v = s.into_bytes();
    v.push(0);
    v
}

/// Reads the tool calls in the JSON `(json, len)` into a new handle in `*out` (free it with
/// `lls_tool_calls_free`), in the order the model made them; none is not an error (the
/// count is 0). `json` is any of: an assistant message `{"role","content"}`; an object with a
/// `message` (what `lls_parse_response` and `lls_stream_finish` give, and what
/// `lls_agent_record_response` takes); an event (`data.message` for an `assistant/message`,
/// no calls for any other type); or an array of these, such as what
/// `lls_session_events(s, seq, seq + 1, ...)` gives for the seq `lls_agent_record_body`
/// stored. The message is validated as on input: a malformed tool-call block is refused.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`json`, `out`), `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (none of those shapes, or an invalid
/// message; detail `field`).
///
/// # Safety
/// `json` NULL or readable for `len` bytes; `out`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently (it holds no state).
#[no_mangle]
pub unsafe extern "C" fn lls_tool_calls_parse(
    json: *const c_char,
    len: usize,
    out: *mut *mut lls_tool_calls,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = Out::new(out, "out")?;
            let value = buffers::input_json(json, len, "json")?;
            let ToolCalls(calls) = ToolCalls::from_value(&value)?;
            let calls = calls
                .into_iter()
                .map(|c| CallText { id: nul_terminated(c.id), name: nul_terminated(c.name), arguments: nul_terminated(c.arguments) })
                .collect();
            let (ptr, _) = handle::register(ToolCallsObject { calls });
            out.write(ptr);
            Ok(())
        })
    }
}

/// Stores in `*out_count` how many tool calls `calls` holds.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`calls`, `out_count`), `LLS_ERR_INVALID_HANDLE`.
///
/// # Safety
/// `out_count`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently.
#[no_mangle]
pub unsafe extern "C" fn lls_tool_calls_count(calls: *const lls_tool_calls, out_count: *mut usize, err: *mut *mut lls_error) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = Out::new(out_count, "out_count")?;
            let c = handle::lookup::<ToolCallsObject>(calls, "calls")?;
            out.write(c.calls.len());
            Ok(())
        })
    }
}

/// Reads call `index` (from 0) of `calls`: its id (`callId` of its result, for
/// `lls_agent_record_tool_result`), the tool's name, and its arguments (the JSON text the model
/// wrote, not parsed: it may be invalid JSON). Each string is borrowed from `calls`, valid until
/// `lls_tool_calls_free(calls)`, never freed by the host, and NUL-terminated; its length in
/// bytes (without the NUL) goes to the matching `*_len`. Every out-parameter may be NULL (not
/// wanted).
///
/// Errors: `LLS_ERR_NULL_POINTER` (`calls`), `LLS_ERR_INVALID_HANDLE`,
/// `LLS_ERR_INVALID_ARGUMENT` (`index` not below the count; detail `argument` = `index`).
///
/// # Safety
/// Each out-parameter and `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn lls_tool_calls_get(
    calls: *const lls_tool_calls,
    index: usize,
    out_id: *mut *const c_char,
    out_id_len: *mut usize,
    out_name: *mut *const c_char,
    out_name_len: *mut usize,
    out_arguments: *mut *const c_char,
    out_arguments_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let c = handle::lookup::<ToolCallsObject>(calls, "calls")?;
            let Some(call) = c.calls.get(index) else {
                return Err(FfiError::invalid_argument("index", format!("is {index}, and there are {} tool calls", c.calls.len())));
            };
            // The strings live in the handle, which the registry keeps alive until it is freed.
            let put = |text: &Vec<u8>, ptr: *mut *const c_char, len: *mut usize| {
                OptOut::new(ptr).write(text.as_ptr().cast::<c_char>());
                OptOut::new(len).write(text.len() - 1);
            };
            put(&call.id, out_id, out_id_len);
            put(&call.name, out_name, out_name_len);
            put(&call.arguments, out_arguments, out_arguments_len);
            Ok(())
        })
    }
}

/// Frees `calls` and the strings `lls_tool_calls_get` lent from it. `lls_tool_calls_free(NULL)`
/// does nothing; so does a handle that is not a live `lls_tool_calls`.
///
/// Thread safety: call once, from any thread, when no other call uses the handle; the handle
/// and its strings must not be used afterwards.
#[no_mangle]
pub extern "C" fn lls_tool_calls_free(calls: *mut lls_tool_calls) {
    boundary_value((), || handle::free::<ToolCallsObject>(calls))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{lls_error_detail, lls_error_free, lls_error_message};
    use crate::runtime::status::*;
    use std::ffi::CStr;
    use std::ptr;

    fn parse(json: &str) -> (lls_status, *mut lls_tool_calls, *mut lls_error) {
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        let st = unsafe { lls_tool_calls_parse(json.as_ptr().cast(), json.len(), &mut out, &mut err) };
        (st, out, err)
    }

    fn text(p: *const c_char, len: usize) -> String {
        let s = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
        assert_eq!(unsafe { *p.add(len) }, 0, "NUL-terminated");
        String::from_utf8(s.to_vec()).unwrap()
    }

    #[test]
    fn reads_the_calls_of_a_response() {
        let (st, calls, _) = parse(
            r#"{"message":{"role":"assistant","content":[{"type":"text","text":"hm"},
            {"type":"tool-call","id":"c1","name":"read_file","arguments":"{\"path\":\"a\"}"}]}}"#,
        );
        assert_eq!(st, LLS_OK);
        let mut n = 9;
        assert_eq!(unsafe { lls_tool_calls_count(calls, &mut n, ptr::null_mut()) }, LLS_OK);
        assert_eq!(n, 1);
        let (mut id, mut name, mut args) = (ptr::null(), ptr::null(), ptr::null());
        let (mut id_len, mut name_len, mut args_len) = (0, 0, 0);
        let st = unsafe {
            lls_tool_calls_get(calls, 0, &mut id, &mut id_len, &mut name, &mut name_len, &mut args, &mut args_len, ptr::null_mut())
        };
        assert_eq!(st, LLS_OK);
        assert_eq!(text(id, id_len), "c1");
        assert_eq!(text(name, name_len), "read_file");
        assert_eq!(text(args, args_len), r#"{"path":"a"}"#);
        // Only what is asked for.
        let st = unsafe {
            lls_tool_calls_get(
                calls,
                0,
                ptr::null_mut(),
                ptr::null_mut(),
                &mut name,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        assert_eq!(st, LLS_OK);
        let mut err = ptr::null_mut();
        let st = unsafe {
            lls_tool_calls_get(calls, 1, &mut id, &mut id_len, ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), &mut err)
        };
        assert_eq!(st, LLS_ERR_INVALID_ARGUMENT);
        let msg = unsafe { CStr::from_ptr(lls_error_message(err)) }.to_str().unwrap().to_string();
        assert!(msg.contains("index") && msg.contains("1 tool calls"), "{msg}");
        lls_error_free(err);
        lls_tool_calls_free(calls);
    }

    #[test]
    fn refuses_what_is_not_a_message() {
        let (st, calls, err) =
            parse(r#"{"message":{"role":"assistant","content":[{"type":"tool-call","id":"","name":"x","arguments":""}]}}"#);
        assert_eq!(st, LLS_ERR_INVALID_INPUT);
        assert!(calls.is_null());
        let detail = unsafe { CStr::from_ptr(lls_error_detail(err)) }.to_str().unwrap().to_string();
        assert!(detail.contains("message.content[0].id"), "{detail}");
        lls_error_free(err);
        let (st, _, err) = parse("[1,");
        assert_eq!(st, LLS_ERR_MALFORMED_JSON);
        lls_error_free(err);
    }
}
