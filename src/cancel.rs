//! Cancel tokens (docs/contract.md §9.3).
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
        // The flag is set under the hooks' lock, so a hook registered concurrently is either
        // in this snapshot (and `on_cancel` saw the token untripped) or not (and `on_cancel`
        // runs it itself): never both.
        let hooks: Vec<Hook> = {
            let hooks = self.inner.hooks.lock();
            if self.inner.tripped.swap(true, Ordering::SeqCst) {
                return;
            }
            hooks.iter().map(|(_, h)| h.clone()).collect()
        };
        for h in hooks {
            h();
        }
    }

    /// Whether the token has been tripped.
    pub fn is_cancelled(&self) -> bool {
        self.inner.tripped.load(Ordering::SeqCst)
    }

    /// Registers a hook that runs once when the token trips (immediately, on this thread, if
    /// it already has). The hook is removed when the returned guard is dropped.
    pub fn on_cancel(&self, hook: impl Fn() + Send + Sync + 'static) -> CancelGuard {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let hook: Hook = Arc::new(hook);
        let tripped = {
            // Decided under the lock `cancel` sets the flag under (see there).
            let mut hooks = self.inner.hooks.lock();
            let tripped = self.is_cancelled();
            if !tripped {
                hooks.push((id, hook.clone()));
            }
            tripped
        };
        if tripped {
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

    /// A hook registered while another thread trips the token runs exactly once: either the
    /// trip runs it or the registration does, never both (docs/reliability.md, F7). Each round
    /// registers a burst of hooks while the token trips, so some registrations race the trip.
    #[test]
    fn a_hook_registered_during_a_trip_runs_once() {
        let mut twice = 0;
        for _ in 0..300 {
            let t = CancelToken::new();
            let start = Arc::new(std::sync::Barrier::new(2));
            let (t2, s2) = (t.clone(), start.clone());
            let tripper = std::thread::spawn(move || {
                s2.wait();
                t2.cancel();
            });
            start.wait();
            let mut hooks = Vec::new();
            for _ in 0..300 {
                let n = Arc::new(AtomicUsize::new(0));
                let n2 = n.clone();
                let guard = t.on_cancel(move || {
                    n2.fetch_add(1, Ordering::SeqCst);
                });
                hooks.push((n, guard));
            }
            tripper.join().unwrap();
            for (n, _) in &hooks {
                match n.load(Ordering::SeqCst) {
                    1 => {}
                    2 => twice += 1,
                    other => panic!("a hook ran {other} times"),
                }
            }
        }
        assert_eq!(twice, 0, "{twice} hooks ran twice");
    }
}
