//! JSON inputs of the C ABI. The first byte picks the parser; the rest is the argument buffer,
//! read through the ffi input functions (capi/src/runtime/buffers.rs: pointer + length, UTF-8, JSON)
//! and then handed to the parser the entry point uses. Rejection is fine; panics are findings.
//! The entry points themselves (`lls_session_*`, `lls_agent_*`, replies, renderers) are driven
//! by the `ffi_calls` target, with the same kinds of JSON as their arguments.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmsession::compaction::{CompactionPolicy, PolicyTable, SummaryOutput};
use llmsession_capi::runtime::buffers::{input_json, input_json_text, input_str_opt};
use llmsession::{AgentOptions, Block, CallConfig, EpochHeader, HeaderDelta, Message, NewEvent, ToolSchema, Usage};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let ptr = rest.as_ptr().cast::<std::ffi::c_char>();
    // SAFETY: `rest` is valid for its length for the whole call.
    let _ = unsafe { input_str_opt(ptr, rest.len(), "text") };
    // SAFETY: as above.
    if let Ok(t) = unsafe { input_json_text(ptr, rest.len(), "json") } {
        assert!(serde_json::from_str::<serde_json::Value>(t).is_ok());
    }
    // SAFETY: as above.
    let Ok(v) = (unsafe { input_json(ptr, rest.len(), "json") }) else { return };
    match which % 12 {
        0 => {
            let _ = AgentOptions::from_value(&v, "options");
        }
        1 => {
            if let Ok(m) = Message::from_value(&v, "message") {
                let again = Message::from_value(&m.to_value(), "message").expect("a message re-parses");
                assert_eq!(again.to_value(), m.to_value());
            }
        }
        2 => {
            let _ = Message::list_from_value(&v, "messages");
        }
        3 => {
            if let Ok(e) = NewEvent::from_value(&v, "event") {
                let _ = llmsession::Session::in_memory().append(e);
            }
        }
        4 => {
            let _ = PolicyTable::from_value(&v, "policy");
        }
        5 => {
            if let Ok(p) = CompactionPolicy::from_value(&v, "policy") {
                let _ = (p.threshold_tokens(), p.retained_tokens());
            }
        }
        6 => {
            let _ = SummaryOutput::from_value(&v, "summary");
        }
        7 => {
            let _ = Usage::from_value(&v, "usage").map(|u| u.prompt_tokens());
        }
        8 => {
            let _ = ToolSchema::list_from_value(&v, "tools");
        }
        9 => {
            let _ = CallConfig::from_value(&v, "config");
        }
        10 => {
            let _ = Block::from_value(&v, "block");
            let _ = llmsession::prefix::parse_listener_output(&v);
        }
        _ => {
            let _ = EpochHeader::from_value(&v, "header");
            let _ = HeaderDelta::from_value(&v, "delta");
        }
    }
});
