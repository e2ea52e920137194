//! Cancel tokens (SPEC §5).
//!
//! A [`CancelToken`] can be tripped from any thread at any time. Operations that may wait
//! (prefix composition, pre-step listeners, summarisation, a pending host reply) check it, and
//! a waiter can register a wake-up hook so that a blocked wait ends as soon as the token trips.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

type Hook = Arc<dyn Fn() + Send + Sync>;

struct Inner {
    tripped: AtomicBool,
    next_id: AtomicU64,
    hooks: Mutex<Vec<(u64, Hook)>>,
}

/// A cloneable, thread-safe cancellation flag with wake-up hooks.
#[derive(Clone)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

impl Default for CancelToken {
    fn default() -> Self {
        CancelToken::new()
    }
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken").field("tripped", &self.is_cancelled()).finish()
    }
}

impl CancelToken {
    /// A new, untripped token.
    pub fn new() -> CancelToken {
        CancelToken {
            inner: Arc::new(Inner { tripped: AtomicBool::new(false), next_id: AtomicU64::new(1), hooks: Mutex::new(Vec::new()) }),
        }
    }

    /// Trips the token and runs every registered hook (once). Idempotent.
    pub fn cancel(&self) {
        if self.inner.tripped.swap(true, Ordering::SeqCst) {
            return;
        }
        let hooks: Vec<Hook> = self.inner.hooks.lock().iter().map(|(_, h)| h.clone()).collect();
        for h in hooks {
            h();
        }
    }

    /// Whether the token has been tripped.
    pub fn is_cancelled(&self) -> bool {
        self.inner.tripped.load(Ordering::SeqCst)
    }

    /// Registers a hook that runs when the token trips (immediately if it already has).
    /// The hook is removed when the returned guard is dropped.
    pub fn on_cancel(&self, hook: impl Fn() + Send + Sync + 'static) -> CancelGuard {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let hook: Hook = Arc::new(hook);
        self.inner.hooks.lock().push((id, hook.clone()));
        if self.is_cancelled() {
            hook();
        }
        CancelGuard { token: self.clone(), id }
    }

    /// Whether two tokens are the same token.
    pub fn same_as(&self, other: &CancelToken) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// Removes a cancel hook when dropped.
pub struct CancelGuard {
    token: CancelToken,
    id: u64,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        self.token.inner.hooks.lock().retain(|(id, _)| *id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn hooks_run_once_and_guards_unregister() {
        let t = CancelToken::new();
        let n = Arc::new(AtomicUsize::new(0));
        let n2 = n.clone();
        let g = t.on_cancel(move || {
            n2.fetch_add(1, Ordering::SeqCst);
        });
        let n3 = n.clone();
        drop(t.on_cancel(move || {
            n3.fetch_add(100, Ordering::SeqCst);
        }));
        t.cancel();
        t.cancel();
        assert_eq!(n.load(Ordering::SeqCst), 1);
        drop(g);
        let n4 = n.clone();
        let _g = t.on_cancel(move || {
            n4.fetch_add(10, Ordering::SeqCst);
        });
        assert_eq!(n.load(Ordering::SeqCst), 11, "a hook registered after the trip runs at once");
    }
}
