//! Host callbacks: [`host::HostCallback`] owns one host function and its userdata and calls it,
//! through the [`reply::ReplyObject`] the host answers;
//! the other modules adapt it to the core's traits (prefix and pre-step listeners, the
//! summariser, the token counter, a host store). Entry points register them; the adapters use
//! only the runtime and the core.

pub mod counter;
pub mod host;
pub mod listeners;
pub mod reply;
pub mod store;
pub mod summariser;
