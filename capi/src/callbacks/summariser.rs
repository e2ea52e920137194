//! The summariser over a host callback.

use crate::callbacks::host::HostCallback;
use llmsession::cancel::CancelToken;
use llmsession::compaction::{Summariser, SummaryOutput, SummaryRequest};
use llmsession::error::{Error, ErrorKind, Result};
use serde_json::Value;

/// The summariser over a host callback.
pub struct HostSummariser(pub HostCallback);

impl Summariser for HostSummariser {
    fn summarise(&self, req: &SummaryRequest, cancel: &CancelToken) -> Result<SummaryOutput> {
        let text = self.0.call(&req.host_input(), cancel).map_err(|e| match e.kind() {
            ErrorKind::Cancelled => e,
            _ => e.with_kind(ErrorKind::Summariser).context("summariser callback"),
        })?;
        let v = llmsession::error::parse_json(&text)?;
        SummaryOutput::from_value(&v, "reply").map_err(|e| {
            Error::new(ErrorKind::Summariser, format!("the summariser callback replied with unusable data: {}", e.message()))
                .with("field", e.detail().get("field").cloned().unwrap_or(Value::Null))
        })
    }
}
