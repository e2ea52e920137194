//! Prefix and pre-step listeners over host callbacks.

use crate::callbacks::host::HostCallback;
use llmsession::error::{ErrorKind, Result};
use llmsession::prefix::{parse_listener_output, ListenerContext, PreStepInfo, PreStepListener, PrefixListener};
use llmsession::types::Message;

/// A session prefix listener over a host callback: input `{"rest","instance","turn"}`, reply
/// the extended list of messages.
pub struct HostPrefixListener(pub HostCallback);

impl PrefixListener for HostPrefixListener {
    fn compose(&self, ctx: &ListenerContext<'_>, rest: &[Message]) -> Result<Vec<Message>> {
        let reply = self.0.call_json(&ctx.host_input(rest), ctx.cancel).map_err(|e| match e.kind() {
            ErrorKind::Cancelled => e,
            _ => e.context("prefix listener callback"),
        })?;
        parse_listener_output(&reply)
    }
}

/// A pre-step listener over a host callback: input [`PreStepInfo::to_json`], reply ignored.
pub struct HostPreStep(pub HostCallback);

impl PreStepListener for HostPreStep {
    fn pre_step(&self, ctx: &ListenerContext<'_>, info: &PreStepInfo<'_>) -> Result<()> {
        self.0.call_json(&info.to_json(), ctx.cancel).map(|_| ())
    }
}
