//! The provider body of an agent's requests, from the rendered form of each message.
//!
//! A [`BodyCache`] belongs to one agent and one renderer with its options. It renders a
//! request's provider body as `Renderer::render` of the request's envelope would, byte for
//! byte: the envelope stays the logged truth, and the body is a pure function of it.
use super::{RenderOptions, Renderer};
use crate::error::{Error, ErrorKind, Result};

/// The rendered form of an agent's requests for one renderer (see the module docs).
#[derive(Clone, Debug)]
pub struct BodyCache {
    renderer: Renderer,
    options: RenderOptions,
}

impl BodyCache {
    /// A cache for `renderer` with `options` (`prefix_len` is taken from each request).
    pub fn new(renderer: Renderer, options: RenderOptions) -> BodyCache {
        BodyCache { renderer, options }
    }

    /// The renderer.
    pub fn renderer(&self) -> Renderer {
        self.renderer
    }

    /// The render options (their `prefix_len` unused).
    pub fn options(&self) -> &RenderOptions {
        &self.options
    }

    /// The body of `envelope`, whose first `prefix_len` messages are the session prefix.
    pub fn render_envelope(&mut self, envelope: &str, prefix_len: usize) -> Result<String> {
        self.render_envelope_fresh(envelope, prefix_len)
    }

    /// The body of `envelope` rendered from scratch: `Renderer::render`, serialised.
    pub fn render_envelope_fresh(&self, envelope: &str, prefix_len: usize) -> Result<String> {
        let v: serde_json::Value = serde_json::from_str(envelope)?;
        let options = RenderOptions { prefix_len, ..self.options.clone() };
        let body = self.renderer.render(&v, &options)?;
        serde_json::to_string(&body).map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))
    }
}
