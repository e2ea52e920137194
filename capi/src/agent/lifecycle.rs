//! Disposing and freeing an agent instance.

use super::{agent_arg, lls_agent, AgentObject};
use crate::callbacks::store::check_not_in_store;
use crate::runtime::boundary::{boundary, boundary_value};
use crate::runtime::error_object::lls_error;
use crate::runtime::handle;
use crate::runtime::status::lls_status;

/// Disposes the agent instance: an open turn ends with `disposed`, its callbacks are released
/// (their `userdata_free` runs), and the session is free for a new instance. Later calls on the
/// agent give `LLS_ERR_DISPOSED`; disposing again is a no-op. The handle stays valid until
/// `lls_agent_free`.
///
/// From inside one of the agent's own callbacks (e.g. a prefix listener) this only marks the
/// agent disposed and interrupts the running operation, which then fails with
/// `LLS_ERR_DISPOSED`, ends its turn `disposed` and completes the disposal before returning.
/// From another thread while a call runs, it interrupts that call (a pending reply's wait ends)
/// and waits for it to return.
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_STORAGE` (writing
/// `turn/end` failed; the agent is disposed anyway), `LLS_ERR_OUT_OF_ORDER` (from the session's
/// store callback).
///
/// # Safety
/// `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread at any time, including from the agent's own
/// callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_dispose(agent: *mut lls_agent, err: *mut *mut lls_error) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let a = agent_arg(agent)?;
            if !a.on_this_thread() {
                check_not_in_store(a.session.store_key)?;
            }
            a.dispose_now()?;
            Ok(())
        })
    }
}

/// Frees an agent handle, disposing the instance if it is still live (as `lls_agent_dispose`;
/// a storage error there cannot be reported). `lls_agent_free(NULL)` does nothing; so does a
/// handle that is not a live `lls_agent`.
///
/// Thread safety: call once, when no other thread is about to use the handle; from inside one
/// of the agent's own callbacks it disposes as `lls_agent_dispose` does and the handle becomes
/// invalid; never from the session's store callback (ignored there).
#[no_mangle]
pub extern "C" fn lls_agent_free(agent: *mut lls_agent) {
    boundary_value((), || {
        let Ok(a) = handle::lookup::<AgentObject>(agent, "agent") else { return };
        if !a.on_this_thread() && check_not_in_store(a.session.store_key).is_err() {
            return;
        }
        handle::unregister(&a);
        let _ = a.dispose_now();
    })
}
