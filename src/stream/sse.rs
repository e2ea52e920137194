//! Splitting raw stream bytes into events, whatever the chunking: server-sent events (every
//! format) and, for Gemini without `alt=sse`, a JSON array streamed element by element.
//!
//! Both readers keep the bytes of an unfinished line or element until the rest arrives, so a
//! multi-byte UTF-8 character (or a `\r\n`) cut by a chunk boundary is put back together
//! before anything is decoded.

use crate::error::{Error, ErrorKind, Result};

/// One dispatched event: its `event:` name (when the stream names events) and its data (the
/// `data:` lines joined by "\n").
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RawEvent {
    pub name: Option<String>,
    pub data: String,
}

/// A server-sent-events parser (the WHATWG event-stream format): lines end with `\n`, `\r\n`
/// or `\r`; `field: value` lines (one leading space of the value dropped); `data` lines
/// accumulate; a blank line dispatches the event; lines starting with `:` are comments; `id`
/// and `retry` are ignored; a leading byte-order mark is dropped.
#[derive(Debug, Default)]
pub(crate) struct SseReader {
    line: Vec<u8>,
    /// The previous chunk ended with `\r`: a `\n` starting this one belongs to that line end.
    after_cr: bool,
    name: Option<String>,
    /// The data lines of the event being read, joined; `None` before its first data line.
    data: Option<String>,
    /// The line number being read (1-based), for errors.
    line_no: u64,
}

impl SseReader {
    /// Consumes a chunk, appending every event it completes to `out`.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<RawEvent>) -> Result<()> {
        if self.after_cr {
            self.after_cr = false;
            if let [b'\n', rest @ ..] = bytes {
                bytes = rest;
            }
        }
        while !bytes.is_empty() {
            match bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
                None => {
                    self.line.extend_from_slice(bytes);
                    return Ok(());
                }
                Some(k) => {
                    self.line.extend_from_slice(&bytes[..k]);
                    let cr = bytes[k] == b'\r';
                    let mut used = k + 1;
                    if cr {
                        match bytes.get(k + 1) {
                            Some(b'\n') => used += 1,
                            None => self.after_cr = true,
                            Some(_) => {}
                        }
                    }
                    bytes = &bytes[used..];
                    self.end_line(out)?;
                }
            }
        }
        Ok(())
    }

    /// The end of the stream: an unterminated last line is taken as a line, and an event still
    /// being collected is dispatched (a stream whose last event lacks its blank line loses
    /// nothing; whether that event was complete is the format's question).
    pub fn finish(&mut self, out: &mut Vec<RawEvent>) -> Result<()> {
        if !self.line.is_empty() {
            self.end_line(out)?;
        }
        self.dispatch(out);
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<RawEvent>) -> Result<()> {
        self.line_no += 1;
        let mut raw = std::mem::take(&mut self.line);
        if self.line_no == 1 && raw.starts_with(b"\xEF\xBB\xBF") {
            raw.drain(..3);
        }
        let line = String::from_utf8(raw).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "stream line {} is not valid UTF-8 (first invalid byte at offset {} of the line)",
                    self.line_no,
                    e.utf8_error().valid_up_to()
                ),
            )
            .with("stream", "malformed")
            .with("line", self.line_no)
        })?;
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_str(), ""),
        };
        match field {
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            "event" => self.name = Some(value.to_string()),
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<RawEvent>) {
        let name = self.name.take();
        if let Some(data) = self.data.take() {
            out.push(RawEvent { name, data });
        }
    }
}

/// A JSON array streamed element by element (`[{...},\n{...}]`): each top-level element is
/// handed out as an event once its closing bracket arrives.
#[derive(Debug, Default)]
pub(crate) struct JsonArrayReader {
    state: ArrayState,
    element: Vec<u8>,
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// Elements handed out so far (for errors).
    count: u64,
}

#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
enum ArrayState {
    /// Before the opening `[`.
    #[default]
    Start,
    /// Inside the array, between elements (a `,` or the closing `]` may come).
    Between,
    /// Inside an element.
    Element,
    /// After the closing `]`.
    Done,
}

impl JsonArrayReader {
    /// Consumes a chunk, appending every element it completes to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<RawEvent>) -> Result<()> {
        for &b in bytes {
            match self.state {
                ArrayState::Start => match b {
                    b'[' => self.state = ArrayState::Between,
                    _ if b.is_ascii_whitespace() => {}
                    _ => return Err(self.bad(format!("expected '[' to open the array, got {:?}", b as char))),
                },
                ArrayState::Between => match b {
                    b',' => {}
                    b']' => self.state = ArrayState::Done,
                    _ if b.is_ascii_whitespace() => {}
                    _ => {
                        self.state = ArrayState::Element;
                        self.byte(b, out)?;
                    }
                },
                ArrayState::Element => self.byte(b, out)?,
                ArrayState::Done => {
                    if !b.is_ascii_whitespace() {
                        return Err(self.bad("data after the closing ']' of the array".to_string()));
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether the closing `]` arrived.
    #[cfg(test)]
    pub fn closed(&self) -> bool {
        self.state == ArrayState::Done
    }

    /// Whether an element is cut off (the stream ended inside it).
    pub fn inside_element(&self) -> bool {
        self.state == ArrayState::Element
    }

    fn byte(&mut self, b: u8, out: &mut Vec<RawEvent>) -> Result<()> {
        self.element.push(b);
        if self.in_string {
            match (self.escaped, b) {
                (true, _) => self.escaped = false,
                (false, b'\\') => self.escaped = true,
                (false, b'"') => self.in_string = false,
                _ => {}
            }
            return Ok(());
        }
        match b {
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                if self.depth == 0 {
                    let raw = std::mem::take(&mut self.element);
                    self.count += 1;
                    let data = String::from_utf8(raw).map_err(|_| self.bad("an element is not valid UTF-8".to_string()))?;
                    out.push(RawEvent { name: None, data });
                    self.state = ArrayState::Between;
                }
            }
            _ if self.depth == 0 => return Err(self.bad("expected an object as array element".to_string())),
            _ => {}
        }
        Ok(())
    }

    fn bad(&self, why: String) -> Error {
        Error::new(ErrorKind::InvalidInput, format!("stream element {}: {why}", self.count + 1)).with("stream", "malformed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sse(chunks: &[&[u8]]) -> Vec<RawEvent> {
        let mut r = SseReader::default();
        let mut out = Vec::new();
        for c in chunks {
            r.feed(c, &mut out).unwrap();
        }
        r.finish(&mut out).unwrap();
        out
    }

    fn ev(name: Option<&str>, data: &str) -> RawEvent {
        RawEvent { name: name.map(str::to_string), data: data.to_string() }
    }

    #[test]
    fn events_lines_and_comments() {
        let text = b"\xEF\xBB\xBF: comment\nevent: a\ndata: 1\ndata:2\n\nid: 7\nretry: 5\ndata\n\n\n\nevent: empty\n\ndata: x\r\n\r\ndata: y\r\rdata: z";
        let want = vec![ev(Some("a"), "1\n2"), ev(None, ""), ev(None, "x"), ev(None, "y"), ev(None, "z")];
        assert_eq!(sse(&[text]), want);
        // Any split of the same bytes, down to one byte at a time, gives the same events.
        for cut in 0..text.len() {
            assert_eq!(sse(&[&text[..cut], &text[cut..]]), want, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(sse(&bytes), want);
    }

    #[test]
    fn utf8_split_across_chunks_and_invalid_utf8() {
        let text = "data: h\u{e9}llo \u{1F600}\n\n".as_bytes();
        for cut in 0..text.len() {
            assert_eq!(sse(&[&text[..cut], &text[cut..]]), vec![ev(None, "h\u{e9}llo \u{1F600}")]);
        }
        let mut r = SseReader::default();
        let e = r.feed(b"data: ok\n\ndata: \xff\n", &mut Vec::new()).unwrap_err();
        assert_eq!(e.message(), "stream line 3 is not valid UTF-8 (first invalid byte at offset 6 of the line)");
        assert_eq!(e.detail()["stream"], "malformed");
    }

    #[test]
    fn json_array_elements() {
        let text = b" [{\"a\":\"x]}\\\"\"},\n{\"b\":[1,{\"c\":2}]}\n]\n";
        let want = vec![ev(None, "{\"a\":\"x]}\\\"\"}"), ev(None, "{\"b\":[1,{\"c\":2}]}")];
        for cut in 0..text.len() {
            let mut r = JsonArrayReader::default();
            let mut out = Vec::new();
            r.feed(&text[..cut], &mut out).unwrap();
            r.feed(&text[cut..], &mut out).unwrap();
            assert_eq!(out, want, "cut at {cut}");
            assert!(r.closed());
        }
        let mut r = JsonArrayReader::default();
        let mut out = Vec::new();
        r.feed(b"[{\"a\":1}, {\"b\"", &mut out).unwrap();
        assert!(r.inside_element() && !r.closed());
        let e = JsonArrayReader::default().feed(b"{}", &mut out).unwrap_err();
        assert_eq!(e.message(), "stream element 1: expected '[' to open the array, got '{'");
        let e = JsonArrayReader::default().feed(b"[1]", &mut out).unwrap_err();
        assert_eq!(e.message(), "stream element 1: expected an object as array element");
        let e = JsonArrayReader::default().feed(b"[{}] x", &mut out).unwrap_err();
        assert_eq!(e.message(), "stream element 2: data after the closing ']' of the array");
    }
}
