//! Image and file blocks (`docs/contract.md` §1.1): where their bytes come from and what kind
//! of media they hold. Each renderer maps a [`Media`] to its own parts, and refuses one its
//! format cannot carry with [`cannot_carry`], which names the block, its media type and the
//! format.
//!
//! - `{"type":"image","url"}` or `{"type":"image","mediaType","data"}` (base64); an image by URL
//!   may name its `mediaType` too.
//! - `{"type":"file","mediaType", one of "data" (base64) | "url" | "fileId", "filename"?}`: a
//!   document (PDF, text, ...), audio, video or an image, told apart by the media type; `fileId`
//!   is the id (or URI) the provider's Files API gave the file.

use crate::error::{Error, Result};
use crate::types::{kind_of, Block};
use serde_json::Value;

/// Where a medium's bytes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source<'a> {
    /// Inline base64 data.
    Data(&'a str),
    /// A URL the provider fetches (may itself be a `data:` URL).
    Url(&'a str),
    /// The provider's file id (or file URI, for Gemini).
    FileId(&'a str),
}

/// What a medium holds, by its media type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `image/*`.
    Image,
    /// `audio/*`.
    Audio,
    /// `video/*`.
    Video,
    /// Anything else: a PDF, a text file, ...
    Document,
}

/// An image or file block, read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Media<'a> {
    /// `"image"` or `"file"`: the block's type.
    pub block: &'static str,
    pub kind: Kind,
    /// The media type (always set for a file block and for inline data).
    pub media_type: Option<&'a str>,
    pub source: Source<'a>,
    /// A file block's `filename`.
    pub filename: Option<&'a str>,
}

impl<'a> Media<'a> {
    /// The media as a URL: the URL itself, or inline data as a `data:` URL (`None` for a file
    /// id).
    pub fn url(&self) -> Option<String> {
        match self.source {
            Source::Url(u) => Some(u.to_string()),
            Source::Data(d) => Some(format!("data:{};base64,{d}", self.media_type.unwrap_or("application/octet-stream"))),
            Source::FileId(_) => None,
        }
    }

    /// The media type and base64 data of inline data, also of a `data:…;base64,` URL.
    pub fn inline(&self) -> Option<(&'a str, &'a str)> {
        match self.source {
            Source::Data(d) => Some((self.media_type.unwrap_or("application/octet-stream"), d)),
            Source::Url(u) => u.strip_prefix("data:").and_then(|rest| rest.split_once(";base64,")),
            Source::FileId(_) => None,
        }
    }

    /// How the block is named in errors: `a file block (audio/wav)`, `an image block`.
    fn describe(&self) -> String {
        let article = if self.block == "image" { "an" } else { "a" };
        match self.media_type {
            Some(t) => format!("{article} {} block ({t})", self.block),
            None => format!("{article} {} block", self.block),
        }
    }
}

/// Reads an image or file block at `path`.
pub(crate) fn read<'a>(b: &'a Block, path: &str) -> Result<Media<'a>> {
    let field = |key: &str| -> Result<Option<&'a str>> {
        match b.get(key) {
            None => Ok(None),
            Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.as_str())),
            Some(Value::String(_)) => Err(Error::invalid(format!("{path}.{key}"), "must not be empty")),
            Some(v) => Err(Error::invalid(format!("{path}.{key}"), format!("expected a string, got {}", kind_of(v)))),
        }
    };
    let media_type = field("mediaType")?;
    let (url, data) = (field("url")?, field("data")?);
    if b.kind() == "image" {
        let source = match (url, data) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid(path, "an image block has both \"url\" and \"data\"; give one").with("blockType", "image"))
            }
            (Some(u), None) => Source::Url(u),
            (None, Some(d)) if media_type.is_some() => Source::Data(d),
            (None, Some(_)) => {
                return Err(Error::invalid(path, "an image block with \"data\" (base64) needs its \"mediaType\"").with("blockType", "image"))
            }
            (None, None) => {
                return Err(Error::invalid(path, "an image block needs \"url\", or \"data\" (base64) with its \"mediaType\"")
                    .with("blockType", "image"))
            }
        };
        return Ok(Media { block: "image", kind: Kind::Image, media_type, source, filename: None });
    }
    let Some(media_type) = media_type else {
        return Err(Error::invalid(
            format!("{path}.mediaType"),
            "is required: a file block names its media type (\"application/pdf\", \"audio/wav\", \"video/mp4\", ...)",
        )
        .with("blockType", "file"));
    };
    let file_id = field("fileId")?;
    let source = match (data, url, file_id) {
        (Some(d), None, None) => Source::Data(d),
        (None, Some(u), None) => Source::Url(u),
        (None, None, Some(id)) => Source::FileId(id),
        _ => {
            return Err(Error::invalid(path, "a file block needs exactly one of \"data\" (base64), \"url\" and \"fileId\"")
                .with("blockType", "file"))
        }
    };
    let kind = match media_type.split('/').next().unwrap_or_default() {
        "image" => Kind::Image,
        "audio" => Kind::Audio,
        "video" => Kind::Video,
        _ => Kind::Document,
    };
    Ok(Media { block: "file", kind, media_type: Some(media_type), source, filename: field("filename")? })
}

/// The error for a medium the `renderer`'s format cannot carry: it names the block, its media
/// type, the format and `why`.
pub(crate) fn cannot_carry(path: &str, m: &Media<'_>, renderer: &str, why: &str) -> Error {
    let e = Error::invalid(path, format!("{} cannot be sent by the {renderer} renderer: {why}", m.describe())).with("blockType", m.block);
    match m.media_type {
        Some(t) => e.with("mediaType", t),
        None => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn block(v: Value) -> Block {
        Block::from_value(&v, "").unwrap()
    }

    #[test]
    fn image_and_file_sources() {
        let b = block(json!({"type":"image","url":"https://x/y.png","mediaType":"image/png"}));
        let m = read(&b, "p").unwrap();
        assert_eq!((m.source, m.media_type, m.kind), (Source::Url("https://x/y.png"), Some("image/png"), Kind::Image));
        let b = block(json!({"type":"file","mediaType":"video/mp4","fileId":"files/abc","filename":"a.mp4"}));
        let m = read(&b, "p").unwrap();
        assert_eq!((m.source, m.kind, m.filename), (Source::FileId("files/abc"), Kind::Video, Some("a.mp4")));
        let b = block(json!({"type":"file","mediaType":"application/pdf","data":"JVBER"}));
        assert_eq!(read(&b, "p").unwrap().url().unwrap(), "data:application/pdf;base64,JVBER");
        let bad = [
            (json!({"type":"image"}), "p: an image block needs \"url\", or \"data\" (base64) with its \"mediaType\""),
            (json!({"type":"image","mediaType":"image/png"}), "p: an image block needs"),
            (json!({"type":"image","data":"x"}), "p: an image block with \"data\" (base64) needs its \"mediaType\""),
            (json!({"type":"image","url":"u","data":"d","mediaType":"image/png"}), "p: an image block has both \"url\" and \"data\""),
            (json!({"type":"image","url":7}), "p.url: expected a string, got a number"),
            (json!({"type":"image","url":""}), "p.url: must not be empty"),
            (json!({"type":"file","data":"x"}), "p.mediaType: is required"),
            (json!({"type":"file","mediaType":"application/pdf"}), "p: a file block needs exactly one of"),
            (json!({"type":"file","mediaType":"application/pdf","url":"u","fileId":"f"}), "p: a file block needs exactly one of"),
            (json!({"type":"file","mediaType":"application/pdf","url":"u","filename":3}), "p.filename: expected a string"),
        ];
        for (b, want) in bad {
            let b = block(b);
            let msg = read(&b, "p").err().unwrap().message().to_string();
            assert!(msg.starts_with(want), "{msg}");
        }
    }
}
