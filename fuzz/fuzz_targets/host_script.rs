//! Random host scripts: operation sequences decoded from the input drive a Session and an
//! Agent; after every operation the log must verify and the incremental history must equal a
//! replay (see tests/support/host_script.rs). API errors are expected; panics and failed
//! checks are findings.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/host_script.rs"]
mod host_script;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = host_script::run_script(data) {
        panic!("host script finding: {e}");
    }
});
