//! Exact token counts from a HuggingFace `tokenizer.json`.

use super::{count_with, Countable, TokenCounter};
use crate::error::{Error, ErrorKind, Result};
use crate::store::file::{read_regular, MAX_TOKENIZER_BYTES};
use std::path::Path;

/// A token counter backed by a HuggingFace tokenizer (`tokenizer.json`, as shipped next to
/// most open-weight models, e.g. DeepSeek-V3, Qwen, Llama).
///
/// Text is encoded without special tokens, so [`TokenizerCounter::count_text`] is exactly the
/// length of the tokenizer's own encoding of that text. Items ([`Countable`]) are counted with
/// the same framing rules as the estimate (see [`super`]), with every piece of text measured
/// by the tokenizer. Truncation and padding settings stored in the file are ignored: a count
/// is never capped or padded.
pub struct TokenizerCounter {
    tokenizer: tokenizers::Tokenizer,
    source: String,
}

impl std::fmt::Debug for TokenizerCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenizerCounter").field("source", &self.source).finish_non_exhaustive()
    }
}

impl TokenizerCounter {
    /// Loads a tokenizer from a `tokenizer.json` file.
    ///
    /// The file must be a regular file of at most [`MAX_TOKENIZER_BYTES`] bytes: a device, a
    /// FIFO or a directory is refused without reading (or waiting on) it. Symbolic links are
    /// followed (model caches link their files to content-addressed blobs); the link's target
    /// must be such a file.
    ///
    /// Fails with [`ErrorKind::Tokenizer`] when the file cannot be read, is not a regular file,
    /// is larger than the limit, or is not a valid tokenizer; the message names the path and
    /// what was wrong, and the detail carries `path`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let fail = |why: String| {
            Error::new(ErrorKind::Tokenizer, format!("cannot read tokenizer file {shown}: {why}")).with("path", shown.clone())
        };
        let target = std::fs::canonicalize(path).map_err(|e| fail(e.to_string()))?;
        let bytes = read_regular(&target, MAX_TOKENIZER_BYTES, "a tokenizer file").map_err(|e| {
            // The store's message starts with the path it opened: say it once.
            let why = e.message();
            let why = why.strip_prefix(&format!("{}: ", target.display())).unwrap_or(why);
            let mut out = fail(why.to_string());
            if let Some(limit) = e.detail().get("limit") {
                out = out.with("limit", limit.clone());
            }
            out
        })?;
        Self::load(&bytes, &shown).map_err(|e| e.with("path", shown.clone()))
    }

    /// Loads a tokenizer from the bytes of a `tokenizer.json` (for hosts that ship the file
    /// embedded). Fails with [`ErrorKind::Tokenizer`] when the bytes are not a valid tokenizer.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Self::load(bytes, "<bytes>")
    }

    fn load(bytes: &[u8], source: &str) -> Result<Self> {
        let mut tokenizer = tokenizers::Tokenizer::from_bytes(bytes)
            .map_err(|e| Error::new(ErrorKind::Tokenizer, format!("{source} is not a valid tokenizer.json: {e}")))?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| Error::new(ErrorKind::Tokenizer, format!("{source}: cannot disable truncation: {e}")))?;
        Ok(TokenizerCounter { tokenizer, source: source.to_string() })
    }

    /// Where the tokenizer was loaded from (the path, or `<bytes>`).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The number of tokens the tokenizer produces for `text`, without special tokens.
    pub fn count_text(&self, text: &str) -> Result<u64> {
        if text.is_empty() {
            return Ok(0);
        }
        let encoding = self.tokenizer.encode_fast(text, false).map_err(|e| {
            Error::new(ErrorKind::Tokenizer, format!("tokenizer {} failed to encode a text of {} bytes: {e}", self.source, text.len()))
        })?;
        Ok(encoding.len() as u64)
    }
}

impl TokenCounter for TokenizerCounter {
    fn count(&self, item: Countable<'_>) -> Result<u64> {
        count_with(item, &mut |text| self.count_text(text))
    }

    fn name(&self) -> &'static str {
        "tokenizer"
    }
}
