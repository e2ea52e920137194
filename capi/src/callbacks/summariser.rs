//! The summariser over a host callback.

use crate::callbacks::host::HostCallback;
use llmsession::cancel::CancelToken;
use llmsession::compaction::{Summariser, SummaryOutput, SummaryRequest};
use llmsession::error::{Error, ErrorKind, Result};
use serde_json::Value;

/// The summariser over a host callback.
pub struct HostSummariser(pub HostCallback);

fn json_text(s: &str) -> String {
    Value::from(s).to_string()
}

impl Summariser for HostSummariser {
    fn summarise(&self, req: &SummaryRequest, cancel: &CancelToken) -> Result<SummaryOutput> {
        // The request is spliced in as its exact bytes (the digest is over them).
        let input = format!(
            "{{\"request\":{},\"provider\":{},\"model\":{},\"maxTokens\":{},\"digest\":{},\"sharedMessages\":{},\"prefixLen\":{}}}",
            req.json,
            json_text(&req.provider),
            json_text(&req.model),
            req.max_tokens,
            json_text(&req.digest),
            req.shared_messages,
            req.prefix_len
        );
        let text = self.0.call(&input, cancel).map_err(|e| match e.kind() {
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
