//! Tagged, registered handles: how every opaque pointer handed to C is created, checked and
//! freed.
//!
//! # Scheme
//!
//! Each exported object is an `Arc<Object<T>>`. [`Object`] is `#[repr(C)]` and starts with a
//! [`HandleHeader`] holding a per-type magic number ([`HandleKind::MAGIC`]), overwritten with
//! [`FREED_MAGIC`] when the object is destroyed. The pointer handed to C is the address of
//! that object.
//!
//! A global registry maps the address of every live handle to its type name and a strong
//! reference. Entry points never dereference a pointer they received: they look its address up
//! in the registry ([`lookup`]), which yields a cloned `Arc` of the right type, or a clear
//! `LLS_ERR_INVALID_HANDLE` error saying whether the address is unknown (freed, or never
//! created) or a handle of another type. The registry's reference *is* the host's reference:
//! freeing a handle removes the entry ([`free`]); a call already running keeps its own clone,
//! so a free racing with a call never frees memory under that call.
//!
//! # Limits
//!
//! Using a freed handle is a host bug. We detect it as long as the address has not been reused
//! for a new handle *of the same type*: after that, the stale pointer designates the new object
//! (an ABA problem that no check on a plain pointer can rule out). A handle of another type at
//! a reused address is still detected. The magic header is a second line of defence (and makes
//! handles recognisable in a debugger); the registry is the authority.

use crate::runtime::error::FfiError;
use crate::runtime::status::LLS_ERR_INVALID_HANDLE;
use llmsession::error::{Error, ErrorKind};
use once_cell::sync::Lazy;
use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::any::Any;
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The magic written into a handle's header when the object is destroyed.
pub const FREED_MAGIC: u64 = u64::from_be_bytes(*b"LLSFREED");

/// A Rust type that is exported to C as an opaque handle.
pub trait HandleKind: Any + Send + Sync + Sized {
    /// The opaque C type (`lls_cancel`, `lls_error`, ...) whose pointers designate the handle.
    type C;
    /// The C type's name, used in messages (`"lls_cancel"`).
    const NAME: &'static str;
    /// A magic number unique to this type, stored first in every object of the type.
    const MAGIC: u64;
}

/// The first field of every exported object.
#[repr(C)]
#[derive(Debug)]
pub struct HandleHeader {
    magic: AtomicU64,
}

/// An exported object: the tag header followed by the payload.
#[repr(C)]
#[derive(Debug)]
pub struct Object<T> {
    header: HandleHeader,
    value: T,
}

impl<T: HandleKind> Object<T> {
    fn new(value: T) -> Object<T> {
        Object { header: HandleHeader { magic: AtomicU64::new(T::MAGIC) }, value }
    }

    /// Whether the header still carries the type's magic.
    pub fn tag_ok(&self) -> bool {
        self.header.magic.load(Ordering::SeqCst) == T::MAGIC
    }

    /// The address handed to C for this object.
    pub fn c_ptr(self: &Arc<Self>) -> *mut T::C {
        Arc::as_ptr(self) as *mut T::C
    }
}

impl<T> Deref for Object<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> Drop for Object<T> {
    fn drop(&mut self) {
        self.header.magic.store(FREED_MAGIC, Ordering::SeqCst);
    }
}

struct Entry {
    name: &'static str,
    object: Arc<dyn Any + Send + Sync>,
}

static REGISTRY: Lazy<Mutex<HashMap<usize, Entry>>> = Lazy::new(|| Mutex::new(HashMap::new()));

/// Creates a handle: allocates the object, registers it (the registry holds the host's
/// reference) and returns the C pointer plus a reference for the caller.
pub fn register<T: HandleKind>(value: T) -> (*mut T::C, Arc<Object<T>>) {
    let obj = Arc::new(Object::new(value));
    let addr = Arc::as_ptr(&obj) as usize;
    let erased: Arc<dyn Any + Send + Sync> = obj.clone();
    REGISTRY.lock().insert(addr, Entry { name: T::NAME, object: erased });
    (obj.c_ptr(), obj)
}

/// Resolves a pointer received from C into a reference to a live handle of type `T`.
///
/// `argument` names the parameter in the error message. NULL gives `LLS_ERR_NULL_POINTER`;
/// an unknown address or a handle of another type gives `LLS_ERR_INVALID_HANDLE`. The pointer
/// is never dereferenced.
pub fn lookup<T: HandleKind>(ptr: *const T::C, argument: &str) -> Result<Arc<Object<T>>, FfiError> {
    if ptr.is_null() {
        return Err(FfiError::null_pointer(argument));
    }
    let found = {
        let reg = REGISTRY.lock();
        reg.get(&(ptr as usize)).map(|e| (e.name, e.object.clone()))
    };
    let Some((name, object)) = found else {
        return Err(FfiError::new(
            LLS_ERR_INVALID_HANDLE,
            format!("argument `{argument}` is not a live {} handle (it was freed, or was never returned by llmsession)", T::NAME),
        )
        .with("argument", argument)
        .with("expected", T::NAME));
    };
    match object.downcast::<Object<T>>() {
        Ok(obj) if obj.tag_ok() => Ok(obj),
        Ok(_) => Err(FfiError::new(LLS_ERR_INVALID_HANDLE, format!("argument `{argument}`: {} handle has a damaged tag", T::NAME))
            .with("argument", argument)
            .with("expected", T::NAME)),
        Err(_) => Err(FfiError::new(
            LLS_ERR_INVALID_HANDLE,
            format!("argument `{argument}` is an {name} handle, but an {} handle is expected", T::NAME),
        )
        .with("argument", argument)
        .with("expected", T::NAME)
        .with("actual", name)),
    }
}

/// Drops the registry's (the host's) reference to `obj`. Returns whether it was still
/// registered. Safe against address reuse because the caller holds `obj` alive.
pub fn unregister<T: HandleKind>(obj: &Arc<Object<T>>) -> bool {
    let addr = Arc::as_ptr(obj) as usize;
    let removed = {
        let mut reg = REGISTRY.lock();
        match reg.get(&addr) {
            Some(e) if std::ptr::addr_eq(Arc::as_ptr(&e.object), Arc::as_ptr(obj)) => reg.remove(&addr),
            _ => None,
        }
    };
    // The entry (possibly the last reference) is dropped here, outside the registry lock, so a
    // payload's Drop (which may call host code, e.g. userdata_free) never runs under the lock.
    removed.is_some()
}

/// Frees a handle received from C (`lls_x_free`): NULL, unknown addresses and handles of
/// another type are ignored. The object is destroyed once no running call still uses it.
pub fn free<T: HandleKind>(ptr: *mut T::C) {
    if let Ok(obj) = lookup::<T>(ptr, "handle") {
        unregister(&obj);
    }
}

/// How many handles (of every type) are live: for tests and leak checks.
pub fn live_handles() -> usize {
    REGISTRY.lock().len()
}

/// Exclusive-access state of a mutable object, with panic poisoning.
///
/// `write` gives exclusive access; if a panic unwinds while a write guard is held, the object
/// is marked poisoned and every later `write` fails with `LLS_ERR_POISONED`. `read` gives
/// shared access and works on a poisoned object (reads do not make things worse). A thread
/// must not take the lock twice (the lock is not reentrant): an object whose lock stays held
/// while a host callback runs (an agent) must detect and refuse a call back into it from that
/// callback (see `crate::agent`).
#[derive(Debug, Default)]
pub struct Guarded<U> {
    poisoned: AtomicBool,
    lock: RwLock<U>,
}

impl<U> Guarded<U> {
    /// Wraps a value.
    pub fn new(value: U) -> Guarded<U> {
        Guarded { poisoned: AtomicBool::new(false), lock: RwLock::new(value) }
    }

    /// Exclusive access, refused with `LLS_ERR_POISONED` after a panic.
    pub fn write(&self) -> Result<WriteGuard<'_, U>, FfiError> {
        let guard = self.lock.write();
        if self.is_poisoned() {
            return Err(poisoned_error());
        }
        Ok(WriteGuard { guard, poisoned: &self.poisoned })
    }

    /// Exclusive access that ignores poisoning, for tearing an object down (dispose, free):
    /// refusing there would only leak what the object holds.
    pub fn write_for_teardown(&self) -> RwLockWriteGuard<'_, U> {
        self.lock.write()
    }

    /// Shared access (also on a poisoned object).
    pub fn read(&self) -> RwLockReadGuard<'_, U> {
        self.lock.read()
    }

    /// Whether a panic happened while the object was being changed.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst)
    }
}

fn poisoned_error() -> FfiError {
    Error::new(ErrorKind::Poisoned, "this object was poisoned by an earlier panic inside llmsession and refuses further changes; free it")
        .into()
}

/// Panic poisoning for an object whose state is serialised elsewhere (a core type with its own
/// lock, such as a session): [`PoisonFlag::enter`] refuses with `LLS_ERR_POISONED` after a
/// panic, and the guard it returns poisons the object if a panic unwinds through it. No lock
/// is taken.
#[derive(Debug, Default)]
pub struct PoisonFlag {
    poisoned: AtomicBool,
}

impl PoisonFlag {
    /// A clean flag.
    pub fn new() -> PoisonFlag {
        PoisonFlag::default()
    }

    /// Starts a mutation: refused once poisoned.
    pub fn enter(&self) -> Result<PoisonGuard<'_>, FfiError> {
        if self.is_poisoned() {
            return Err(poisoned_error());
        }
        Ok(PoisonGuard { poisoned: &self.poisoned })
    }

    /// Whether a panic happened during a mutation.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst)
    }
}

/// A mutation in progress under a [`PoisonFlag`]; poisons it if dropped during a panic.
#[derive(Debug)]
pub struct PoisonGuard<'a> {
    poisoned: &'a AtomicBool,
}

impl Drop for PoisonGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.poisoned.store(true, Ordering::SeqCst);
        }
    }
}

/// Exclusive access to a [`Guarded`] value; poisons it if dropped during a panic.
pub struct WriteGuard<'a, U> {
    guard: RwLockWriteGuard<'a, U>,
    poisoned: &'a AtomicBool,
}

impl<U> Deref for WriteGuard<'_, U> {
    type Target = U;
    fn deref(&self) -> &U {
        &self.guard
    }
}

impl<U> DerefMut for WriteGuard<'_, U> {
    fn deref_mut(&mut self) -> &mut U {
        &mut self.guard
    }
}

impl<U> Drop for WriteGuard<'_, U> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.poisoned.store(true, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::status::*;

    #[derive(Debug)]
    struct Apple(u32);
    impl HandleKind for Apple {
        type C = u8;
        const NAME: &'static str = "lls_test_apple";
        const MAGIC: u64 = 1;
    }
    #[derive(Debug)]
    struct Pear;
    impl HandleKind for Pear {
        type C = u16;
        const NAME: &'static str = "lls_test_pear";
        const MAGIC: u64 = 2;
    }

    #[test]
    fn lookup_checks_liveness_and_type() {
        let (p, keep) = register(Apple(7));
        assert_eq!(lookup::<Apple>(p, "a").unwrap().0, 7);
        let e = lookup::<Pear>(p as *const u16, "pear").unwrap_err();
        assert_eq!(e.status(), LLS_ERR_INVALID_HANDLE);
        assert!(e.message().contains("is an lls_test_apple handle"), "{}", e.message());
        assert_eq!(e.detail()["actual"], "lls_test_apple");
        assert_eq!(lookup::<Apple>(std::ptr::null(), "a").unwrap_err().status(), LLS_ERR_NULL_POINTER);
        free::<Apple>(p);
        // Our own reference keeps the memory, so the address cannot be reused yet.
        let e = lookup::<Apple>(p, "a").unwrap_err();
        assert_eq!(e.status(), LLS_ERR_INVALID_HANDLE);
        assert!(e.message().contains("not a live lls_test_apple"));
        free::<Apple>(p); // double free ignored
        assert!(keep.tag_ok());
        assert!(!unregister(&keep));
    }

    #[test]
    fn panics_under_write_poison() {
        let g = Guarded::new(1);
        *g.write().unwrap() += 1;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut w = g.write().unwrap();
            *w += 1;
            panic!("boom");
        }));
        assert!(r.is_err());
        assert!(g.is_poisoned());
        let e = g.write().err().unwrap();
        assert_eq!(e.status(), LLS_ERR_POISONED);
        assert_eq!(*g.read(), 3);
    }
}
