//! The JSONL file store: one record per line, the embedded default.
//!
//! - A store opened for writing holds an exclusive, non-blocking lock on the file (`flock`,
//!   through `File::try_lock`): a second writer, in another process or in this one, is refused
//!   at open with [`ErrorKind::Locked`], naming the holder where the platform tells. The lock
//!   goes with the file descriptor: it is released when the store is dropped, and by the OS when
//!   the process dies.
//! - A read-only store takes no lock, never creates, cuts or writes the file, and can read what
//!   a writer appended since ([`Store::load_from`]): complete lines only.
//! - A created log gets the permission bits of [`FileOptions::mode`] (0600 by default: logs hold
//!   users' prompts). The last path component must not be a symbolic link.
//! - Before each append the file's length is compared with the end of the last record this
//!   handle knows: a file that grew behind its back (a writer that ignored the lock) is a
//!   [`ErrorKind::Conflict`] and nothing is written. A failed write is undone by cutting the
//!   file back to where that write started, which is this handle's own end of file.
//! - A torn or damaged tail that loading cuts is copied, byte for byte, to a sidecar file
//!   `<log>.cut-<unix ms>` (0600) next to the log before the log is shortened.

use super::file::{self, io_error, Open, MAX_LOG_BYTES};
use super::{conflict_error, jsonl_ranges, read_only_error, Batch, RecordStream, Store, StoreContents, StoreText, StoreWindow};
use crate::error::{Error, ErrorKind, Result};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How a JSONL log is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileOptions {
    /// Open without the write lock; appends are refused.
    pub read_only: bool,
    /// Permission bits of a log this open creates (default `0o600`).
    pub mode: u32,
    /// The largest log that is read, in bytes (default [`MAX_LOG_BYTES`]).
    pub max_bytes: u64,
}

impl Default for FileOptions {
    fn default() -> FileOptions {
        FileOptions { read_only: false, mode: 0o600, max_bytes: MAX_LOG_BYTES }
    }
}

/// A JSONL file: one record per line.
#[derive(Debug)]
pub struct JsonlStore {
    path: PathBuf,
    file: File,
    opts: FileOptions,
    /// Byte offset where each complete record from record `first` on starts (a bounded open
    /// knows only those of its window).
    offsets: Vec<u64>,
    /// The record index of `offsets[0]`.
    first: usize,
    /// The whole file, read by a [`load_window`](Store::load_window) that found no checkpoint,
    /// for the whole load that follows (so the file is read once).
    stash: Option<StoreText>,
    /// The end of the last complete record: where the next append goes.
    len: u64,
    /// The file was empty when opened: its directory entry is made durable at the first sync.
    sync_dir: bool,
}

impl JsonlStore {
    /// Opens (creating if missing) a JSONL file for reading and appending, with the write lock.
    pub fn open(path: impl AsRef<Path>) -> Result<JsonlStore> {
        JsonlStore::open_with(path, FileOptions::default())
    }

    /// Opens an existing JSONL file read-only (no lock; appends are refused).
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<JsonlStore> {
        JsonlStore::open_with(path, FileOptions { read_only: true, ..FileOptions::default() })
    }

    /// Opens a JSONL file as `opts` says.
    pub fn open_with(path: impl AsRef<Path>, opts: FileOptions) -> Result<JsonlStore> {
        let path = path.as_ref().to_path_buf();
        if opts.mode & !0o7777 != 0 {
            return Err(Error::invalid("mode", format!("{:o} is not a set of permission bits (at most 7777 octal)", opts.mode)));
        }
        let how = Open { write: !opts.read_only, create: !opts.read_only, mode: opts.mode };
        let file = file::open_regular(&path, how, "a session log")?;
        if !opts.read_only {
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    let holder = file::lock_holder(&file);
                    let by = holder.as_deref().map(|h| format!(" (held by {h})")).unwrap_or_default();
                    let mut e = Error::new(
                        ErrorKind::Locked,
                        format!(
                            "{}: the session is in use: another writer holds the log's lock{by}; open it read-only to inspect it, or wait until the writer closes it",
                            path.display()
                        ),
                    )
                    .with("path", path.display().to_string());
                    crate::observe::emit(crate::observe::Level::Warn, || {
                        let mut o = crate::observe::Observation::new(
                            "store-locked",
                            crate::observe::Level::Warn,
                            format!("{}: refused to open for writing: another writer holds the log's lock{by}", path.display()),
                        )
                        .with("store", path.display().to_string());
                        if let Some(h) = &holder {
                            o = o.with("holder", h.clone());
                        }
                        o
                    });
                    if let Some(h) = holder {
                        e = e.with("holder", h);
                    }
                    return Err(e);
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io_error(&path, "cannot lock", &e)),
            }
        }
        let len = file.metadata().map_err(|e| io_error(&path, "cannot stat", &e))?.len();
        Ok(JsonlStore { path, file, opts, offsets: Vec::new(), first: 0, stash: None, len: 0, sync_dir: len == 0 && !opts.read_only })
    }

    /// Whether the file is empty (holds no session).
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.file_len()? == 0)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The number of complete records this handle knows (the header included).
    pub fn records(&self) -> usize {
        self.first + self.offsets.len()
    }

    /// The byte offset where record `i` starts, if this handle knows it (the end of the file for
    /// the record after the last).
    fn offset(&self, i: usize) -> Option<u64> {
        let k = i.checked_sub(self.first)?;
        match self.offsets.get(k) {
            Some(&at) => Some(at),
            None if k == self.offsets.len() => Some(self.len),
            None => None,
        }
    }

    /// Reads `len` bytes at byte `at`.
    fn read_at(&self, at: u64, len: usize) -> Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; len];
        self.file.read_exact_at(&mut buf, at).map_err(|e| io_error(&self.path, "cannot read", &e))?;
        Ok(buf)
    }

    /// Appends the `len` bytes from `at` on to `buf`.
    fn read_into(&self, at: u64, len: usize, buf: &mut Vec<u8>) -> Result<()> {
        let mut file = &self.file;
        file.seek(SeekFrom::Start(at)).map_err(|e| io_error(&self.path, "cannot seek", &e))?;
        let n = file.take(len as u64).read_to_end(buf).map_err(|e| io_error(&self.path, "cannot read", &e))?;
        if n != len {
            let e = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, format!("{n} of {len} bytes from byte {at}: the file shrank"));
            return Err(io_error(&self.path, "cannot read", &e));
        }
        Ok(())
    }

    /// The session header record (the first line) and where the next line starts; `None` when
    /// the file has no complete first line.
    fn header_line(&self, size: u64) -> Result<Option<(Vec<u8>, u64)>> {
        let mut at = 0u64;
        let mut head = Vec::new();
        let mut chunk = 4u64 << 10;
        while at < size {
            let n = (size - at).min(chunk) as usize;
            chunk *= 4;
            let chunk = self.read_at(at, n)?;
            if let Some(nl) = chunk.iter().position(|&b| b == b'\n') {
                head.extend_from_slice(&chunk[..nl]);
                return Ok(Some((head, at + nl as u64 + 1)));
            }
            head.extend_from_slice(&chunk);
            at += n as u64;
        }
        Ok(None)
    }

    fn file_len(&self) -> Result<u64> {
        Ok(self.file.metadata().map_err(|e| io_error(&self.path, "cannot stat", &e))?.len())
    }

    /// Reads from byte `at` to the end of the file.
    fn read_from(&mut self, at: u64) -> Result<Vec<u8>> {
        let size = self.file_len()?;
        if size > self.opts.max_bytes {
            return Err(Error::new(
                ErrorKind::Storage,
                format!("{}: the log is {size} bytes, more than the limit of {} bytes", self.path.display(), self.opts.max_bytes),
            )
            .with("path", self.path.display().to_string())
            .with("limit", self.opts.max_bytes));
        }
        let mut buf = Vec::with_capacity(size.saturating_sub(at) as usize);
        self.file.seek(SeekFrom::Start(at)).map_err(|e| io_error(&self.path, "cannot seek", &e))?;
        (&mut self.file)
            .take(self.opts.max_bytes - at.min(self.opts.max_bytes))
            .read_to_end(&mut buf)
            .map_err(|e| io_error(&self.path, "cannot read", &e))?;
        Ok(buf)
    }

    /// Records the offsets of the complete records of `ranges` (read from byte `at` on), which
    /// follow the records this handle knows.
    fn note_records(&mut self, at: u64, ranges: &[(usize, usize)], last_complete: bool) {
        let complete = ranges.len() - usize::from(!last_complete);
        for &(start, _) in &ranges[..complete] {
            self.offsets.push(at + start as u64);
        }
        self.len = match ranges[..complete].last() {
            Some(&(_, end)) => at + end as u64 + 1,
            None => at,
        };
    }

    /// Reads from byte `at` to the end of the file and splits it into records, recording the
    /// offsets of the complete ones (the first starting at `at`).
    fn read_records(&mut self, at: u64) -> Result<StoreContents> {
        let buf = self.read_from(at)?;
        let (ranges, last_complete) = jsonl_ranges(&buf);
        self.note_records(at, &ranges, last_complete);
        Ok(StoreContents::of_ranges(&buf, &ranges, last_complete))
    }

    fn writable(&self, what: &str) -> Result<()> {
        if self.opts.read_only {
            return Err(read_only_error(&self.describe(), what));
        }
        Ok(())
    }
}

impl Store for JsonlStore {
    fn load(&mut self) -> Result<StoreContents> {
        self.offsets.clear();
        self.first = 0;
        if let Some(t) = self.stash.take() {
            let c = StoreContents::of_ranges(t.text.as_bytes(), &t.records, t.last_complete);
            self.note_records(0, &t.records, t.last_complete);
            return Ok(c);
        }
        self.read_records(0)
    }

    /// The file read whole, its records ranges of it; `None` for a file that is not valid UTF-8
    /// (damage that loading reports by line, from [`load`](Store::load)'s records).
    fn load_text(&mut self) -> Result<Option<StoreText>> {
        self.offsets.clear();
        self.first = 0;
        if let Some(t) = self.stash.take() {
            self.note_records(0, &t.records, t.last_complete);
            return Ok(Some(t));
        }
        let buf = self.read_from(0)?;
        let (records, last_complete) = jsonl_ranges(&buf);
        self.note_records(0, &records, last_complete);
        match String::from_utf8(buf) {
            Ok(text) => Ok(Some(StoreText { text: Arc::new(text), records, last_complete })),
            Err(_) => Ok(None),
        }
    }

    fn load_from(&mut self, from: usize) -> Result<StoreContents> {
        let Some(at) = self.offset(from) else {
            // Records this handle never saw: read everything and drop what the caller has.
            let mut c = self.load()?;
            c.records.drain(..from.min(c.records.len()));
            if c.records.is_empty() {
                c.last_complete = true;
            }
            return Ok(c);
        };
        self.offsets.truncate(from - self.first);
        self.read_records(at)
    }

    /// Reads the file backwards from its end, in growing chunks, until it finds the last
    /// complete checkpoint line (before event `before`) and then the line before that
    /// checkpoint's window; the window is handed over without the file having been read from its
    /// start. A file with no such checkpoint has been read whole by then: it is kept for the
    /// whole load that follows (`load` / `load_text`), so it is read once either way.
    fn load_window(&mut self, before: Option<u64>) -> Result<Option<StoreWindow>> {
        self.stash = None;
        let size = self.file_len()?;
        let Some((header, body)) = self.header_line(size)? else { return Ok(None) };
        // `buf` holds the bytes [lo, size). Lines are found from the newest back: `end` is the
        // end (exclusive, without its newline) of the newest line not found yet. The read that
        // reaches the first event also reads the header line before it (`lo` is then 0), so a
        // file without a checkpoint ends up read whole into this one buffer.
        let mut buf: Vec<u8> = Vec::new();
        let mut lo = size;
        let mut chunk: u64 = 1 << 20;
        let last_complete = size > body && self.read_at(size - 1, 1)?[0] == b'\n';
        let mut end = if last_complete { size - 1 } else { size };
        let mut found: Option<(u64, u64)> = None; // (checkpoint seq, window from)
        let mut start_of_from: Option<u64> = None; // where the line of event `from` starts
                                                   // The seq of the earliest line found so far and where it starts: once the checkpoint is
                                                   // found, the rest of its window is read in one go, its size estimated from the lines read
                                                   // so far.
        let mut earliest: Option<(u64, u64)> = None;
        let mut latest: Option<u64> = None;
        'scan: loop {
            while end >= lo && end > body {
                let rel = (end - lo) as usize;
                let start = match memchr::memrchr(b'\n', &buf[..rel]) {
                    Some(nl) => lo + nl as u64 + 1,
                    None if lo <= body => body,
                    None => break,
                };
                let line = &buf[(start - lo) as usize..rel];
                let complete = end < size;
                if let Some((ty, seq)) = crate::log::load::record_head(line) {
                    earliest = Some((seq, start));
                    latest.get_or_insert(seq);
                    if found.is_none() && complete && ty == crate::log::event::types::CHECKPOINT && before.is_none_or(|b| seq < b) {
                        found = super::window_from(line).map(|from| (seq, from.min(seq)));
                    }
                    if found.is_some_and(|(_, from)| from == seq) {
                        start_of_from = Some(start);
                        break 'scan;
                    }
                }
                if start == body {
                    break 'scan;
                }
                end = start - 1;
            }
            if lo <= body {
                break;
            }
            // Read further back: after the checkpoint, as far as its window's start is estimated to
            // be (the mean length of the lines read so far), with a margin.
            if let (Some((_, from)), Some((seq, at)), Some(last)) = (found, earliest, latest) {
                if seq > from && size > at && last >= seq {
                    let mean = (size - at) / (last - seq + 1);
                    chunk = chunk.max((seq - from) * mean.max(1) * 5 / 4 + (1 << 16));
                }
            }
            let new_lo = match lo.saturating_sub(chunk).max(body) {
                b if b == body => 0,
                b => b,
            };
            if size - new_lo.max(body) > self.opts.max_bytes {
                return Err(Error::new(
                    ErrorKind::Storage,
                    format!("{}: the log is {size} bytes, more than the limit of {} bytes", self.path.display(), self.opts.max_bytes),
                )
                .with("path", self.path.display().to_string())
                .with("limit", self.opts.max_bytes));
            }
            // One buffer of the new size: the bytes read in front (into its spare room, which
            // is not zeroed first), the old ones copied after.
            let mut more = Vec::with_capacity((size - new_lo) as usize);
            self.read_into(new_lo, (lo - new_lo) as usize, &mut more)?;
            more.extend_from_slice(&buf);
            buf = more;
            lo = new_lo;
            chunk = (chunk * 8).min(64 << 20);
        }
        let (Some((checkpoint, from)), Some(start)) = (found, start_of_from) else {
            // No checkpoint: the whole file has been read, header included; keep it for the
            // whole load.
            if lo == 0 && size - body <= self.opts.max_bytes {
                let (records, last) = jsonl_ranges(&buf);
                if let Ok(text) = String::from_utf8(buf) {
                    self.stash = Some(StoreText { text: Arc::new(text), records, last_complete: last });
                }
            } else if body == size {
                // The header alone.
                let mut text = header.clone();
                text.push(b'\n');
                let (records, last) = jsonl_ranges(&text);
                if let Ok(text) = String::from_utf8(text) {
                    self.stash = Some(StoreText { text: Arc::new(text), records, last_complete: last });
                }
            }
            return Ok(None);
        };
        let skip = (start - lo) as usize;
        let (mut ranges, last) = jsonl_ranges(&buf[skip..]);
        // The handle knows the offsets of the window's records (for refresh, undo and cut).
        self.offsets.clear();
        self.first = from as usize + 1;
        self.note_records(start, &ranges, last);
        // The buffer is handed over as it is: the ranges skip what was read before the window.
        for r in &mut ranges {
            *r = (r.0 + skip, r.1 + skip);
        }
        Ok(Some(StoreWindow { header, checkpoint, from, text: buf, records: ranges, last_complete: last }))
    }

    fn record_stream(&mut self) -> Result<Box<dyn RecordStream>> {
        let file = self.file.try_clone().map_err(|e| io_error(&self.path, "cannot open", &e))?;
        let size = self.file_len()?;
        Ok(Box::new(JsonlRecords { path: self.path.clone(), file, size, at: 0, buf: Vec::new(), start: 0 }))
    }

    fn read_records(&mut self, from: usize, to: usize) -> Result<Vec<Vec<u8>>> {
        // A plain read from the start, one record at a time (only the records asked for are
        // kept), leaving what the handle knows as it is.
        let mut stream = self.record_stream()?;
        let mut out = Vec::with_capacity(to.saturating_sub(from).min(1 << 16));
        let mut index = 0;
        while index < to {
            let Some((r, _)) = stream.next_record()? else { break };
            if index >= from {
                out.push(r);
            }
            index += 1;
        }
        Ok(out)
    }

    fn append(&mut self, batch: &Batch<'_>) -> Result<()> {
        self.writable("append")?;
        let have = self.records().saturating_sub(1) as u64;
        let fresh = self.records() == 0;
        let size = self.file_len()?;
        if batch.header.is_some() != fresh || (!fresh && batch.seq != have) || size != self.len {
            let mut e = conflict_error(&self.describe(), batch.seq, have);
            if size != self.len {
                e = Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "{}: the file is {size} bytes but this handle wrote up to byte {}: something else wrote to the log; reopen it",
                        self.describe(),
                        self.len
                    ),
                )
                .with("path", self.describe());
            }
            return Err(e);
        }
        let total: usize = batch.header.map_or(0, |h| h.len() + 1) + batch.events.iter().map(|r| r.len() + 1).sum::<usize>();
        let mut buf = Vec::with_capacity(total);
        let mut starts = Vec::with_capacity(batch.len());
        for r in batch.header.into_iter().chain(batch.events.iter().map(|r| &**r)) {
            starts.push(self.len + buf.len() as u64);
            buf.extend_from_slice(r.as_bytes());
            buf.push(b'\n');
        }
        if let Err(e) = self.file.write_all(&buf) {
            let err = io_error(&self.path, "cannot append", &e);
            // Undo what part of the batch reached the file: everything after our own end.
            // (The session then asks for an undo as well, which cuts again if this failed.)
            let _ = self.file.set_len(self.len);
            return Err(err);
        }
        self.offsets.extend(starts);
        self.len += buf.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        self.writable("sync")?;
        self.file.sync_data().map_err(|e| io_error(&self.path, "cannot sync", &e))?;
        if self.sync_dir {
            let dir = self.path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_error(dir, "cannot sync the directory", &e))?;
            self.sync_dir = false;
        }
        Ok(())
    }

    fn undo(&mut self, from: usize) -> Result<()> {
        self.writable("undo an append")?;
        // From the start of record `from`; for `from` = the number of records, everything after
        // the last one (what a failed write may have left).
        let Some(at) = self.offset(from) else { return Ok(()) };
        self.file.set_len(at).map_err(|e| io_error(&self.path, "cannot truncate", &e))?;
        self.file.sync_data().map_err(|e| io_error(&self.path, "cannot sync", &e))?;
        self.offsets.truncate(from - self.first);
        self.len = at;
        Ok(())
    }

    fn cut(&mut self, keep: usize, _reason: &str) -> Result<Option<String>> {
        self.writable("cut a damaged tail")?;
        let at = self.offset(keep).unwrap_or(self.len);
        let size = self.file_len()?;
        if size <= at {
            return Ok(None);
        }
        let mut tail = Vec::with_capacity((size - at) as usize);
        self.file.seek(SeekFrom::Start(at)).map_err(|e| io_error(&self.path, "cannot seek", &e))?;
        (&mut self.file).take(size - at).read_to_end(&mut tail).map_err(|e| io_error(&self.path, "cannot read", &e))?;
        let side = sidecar_path(&self.path);
        {
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&side)
                .map_err(|e| io_error(&side, "cannot create the file for the cut records", &e))?;
            f.write_all(&tail).and_then(|_| f.sync_all()).map_err(|e| io_error(&side, "cannot write the cut records", &e))?;
        }
        self.file.set_len(at).map_err(|e| io_error(&self.path, "cannot truncate", &e))?;
        self.file.sync_data().map_err(|e| io_error(&self.path, "cannot sync", &e))?;
        self.offsets.truncate(keep.saturating_sub(self.first));
        self.len = at;
        Ok(Some(side.display().to_string()))
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn read_only(&self) -> bool {
        self.opts.read_only
    }

    fn file_path(&self) -> Option<PathBuf> {
        Some(self.path.clone())
    }

    /// `DIR/STEM.TAG.jsonl` beside this log (`DIR/STEM.jsonl`), created with this file's mode.
    fn child_store(&self, tag: &str, _id: &str, _durability: super::Durability) -> Result<Option<super::NewStore>> {
        let path = child_path(&self.path, tag);
        let created = (!path.exists()).then(|| path.display().to_string());
        let file = FileOptions { read_only: false, ..self.opts };
        Ok(Some((Box::new(JsonlStore::open_with(path, file)?), created)))
    }
}

/// The JSONL files beside the log at `parent` that may hold its descendants: `DIR/STEM.*.jsonl`
/// (see [`child_path`]), in name order. A missing directory has none.
pub fn children_beside(parent: &Path) -> Result<Vec<PathBuf>> {
    let name = parent.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = name.strip_suffix(".jsonl").unwrap_or(&name);
    let dir = parent.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(dir, "cannot list", &e)),
    };
    let prefix = format!("{stem}.");
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.len() > prefix.len() + 6 && n.starts_with(&prefix) && n.ends_with(".jsonl"))
        .map(|n| dir.join(n))
        .collect();
    out.sort();
    Ok(out)
}

/// Where the child tagged `tag` of the log at `parent` lives: `DIR/STEM.TAG.jsonl` for
/// `DIR/STEM.jsonl` (any other name: `NAME.TAG.jsonl`), so that a session's children sort
/// beside it and their own children beside them.
pub fn child_path(parent: &Path, tag: &str) -> PathBuf {
    let name = parent.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = name.strip_suffix(".jsonl").unwrap_or(&name);
    parent.with_file_name(format!("{stem}.{tag}.jsonl"))
}

/// A JSONL file's lines one at a time, read in chunks at offsets of their own (`pread`: the
/// store's handle is not moved), up to the file's size when the stream began (what a writer
/// appends after that is not read; a last line cut there counts as torn).
struct JsonlRecords {
    path: PathBuf,
    file: File,
    size: u64,
    /// The file offset `buf[0]` was read from.
    at: u64,
    buf: Vec<u8>,
    /// Where the next line starts in `buf`.
    start: usize,
}

impl RecordStream for JsonlRecords {
    fn next_record(&mut self) -> Result<Option<(Vec<u8>, bool)>> {
        use std::os::unix::fs::FileExt;
        loop {
            if let Some(nl) = memchr::memchr(b'\n', &self.buf[self.start..]) {
                let line = self.buf[self.start..self.start + nl].to_vec();
                self.start += nl + 1;
                return Ok(Some((line, true)));
            }
            let end = self.at + self.buf.len() as u64;
            if end >= self.size {
                if self.start < self.buf.len() {
                    let line = self.buf[self.start..].to_vec();
                    self.start = self.buf.len();
                    return Ok(Some((line, false)));
                }
                return Ok(None);
            }
            // Keep the part of a line read so far, and read the next chunk after it.
            self.buf.drain(..self.start);
            self.at += self.start as u64;
            self.start = 0;
            let have = self.buf.len();
            let n = ((self.size - end).min(1 << 20) as usize).max(1);
            self.buf.resize(have + n, 0);
            let got = self.file.read_at(&mut self.buf[have..], end).map_err(|e| io_error(&self.path, "cannot read", &e))?;
            self.buf.truncate(have + got);
            if got == 0 {
                // The file shrank under the reader: what was read is all there is.
                self.size = end;
            }
        }
    }
    fn total_bytes(&self) -> Option<u64> {
        Some(self.size)
    }
}

/// The row of a session listing for the JSONL log at `path`, read without reading the log
/// whole: the session header (its first line) and the last complete line (the last event's seq
/// and chain value); `locks` are the files a writer holds ([`file::flock_holders`]). `None`
/// for an empty file; an error for a file that is not a session log.
pub(crate) fn session_row(path: &Path, locks: &std::collections::HashSet<(u64, u64)>) -> Result<Option<super::url::SessionInfo>> {
    use std::os::unix::fs::MetadataExt;
    let store = JsonlStore::open_read_only(path)?;
    let meta = store.file.metadata().map_err(|e| io_error(path, "cannot stat", &e))?;
    let size = meta.len();
    if size == 0 {
        return Ok(None);
    }
    let Some((header, body)) = store.header_line(size)? else {
        return Err(Error::new(ErrorKind::CorruptLog, "line 1: the session header is incomplete").with("line", 1u64));
    };
    let value: serde_json::Value = serde_json::from_slice(&header).map_err(|e| crate::log::rules::as_corrupt(Error::from(e), 1))?;
    let h = crate::log::load::SessionHeader::from_value(&value).map_err(|e| crate::log::rules::as_corrupt(e, 1))?;
    // The last complete line: read back from the end until one is whole.
    let mut tail: Vec<u8> = Vec::new();
    let mut lo = size;
    let mut chunk = 64u64 << 10;
    let last = loop {
        let new_lo = lo.saturating_sub(chunk).max(body);
        let mut more = store.read_at(new_lo, (lo - new_lo) as usize)?;
        more.extend_from_slice(&tail);
        tail = more;
        lo = new_lo;
        // The lines of `tail` that end with a newline; the last of them whose start is known.
        let end = memchr::memrchr(b'\n', &tail);
        if let Some(end) = end {
            let start = memchr::memrchr(b'\n', &tail[..end]).map(|i| i + 1);
            match start {
                Some(s) => break Some(tail[s..end].to_vec()),
                None if lo == body => break Some(tail[..end].to_vec()),
                None => {}
            }
        } else if lo == body {
            break None;
        }
        chunk *= 2;
    };
    let (events, chain_head) = match last.as_deref().and_then(|l| crate::log::load::record_head(l).map(|(_, seq)| (seq, l))) {
        Some((seq, line)) => (seq + 1, std::str::from_utf8(line).ok().and_then(crate::log::chain::stored_link).map(str::to_string)),
        None => (0, None),
    };
    let updated_at =
        meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map(|d| d.as_millis() as u64).unwrap_or(0);
    Ok(Some(super::url::SessionInfo {
        parent: super::url::ParentInfo::of(&h),
        id: h.id,
        created_at: h.created_at,
        events,
        chain_head,
        updated_at,
        in_use: locks.contains(&(meta.dev(), meta.ino())),
    }))
}

/// The session id of the JSONL log at `path` and its parent's id, from its first line (`None`:
/// not a session log).
fn session_id_of(path: &Path) -> Option<(String, Option<String>)> {
    let store = JsonlStore::open_read_only(path).ok()?;
    let size = store.file_len().ok()?;
    let (header, _) = store.header_line(size).ok()??;
    let v: serde_json::Value = serde_json::from_slice(&header).ok()?;
    crate::log::load::SessionHeader::from_value(&v).ok().map(|h| (h.id, h.parent.map(|p| p.0)))
}

/// The sessions of the JSONL logs in a directory (`*.jsonl`, not the sidecar files of cut
/// records), ordered by id, after id `after`, at most `limit`; a file that is not a session log
/// is passed over; with `parent`, only the sessions whose parent that is. Every log's first
/// line gives its id (and parent); for a page (`limit`), only the page's rows read a last line
/// too ([`session_row`]).
pub(crate) fn list_directory(
    dir: &Path,
    after: Option<&str>,
    limit: Option<u64>,
    parent: Option<&str>,
) -> Result<Vec<super::url::SessionInfo>> {
    let wanted = |p: Option<&str>| parent.is_none() || p == parent;
    let locks = file::flock_holders();
    let mut ids: Vec<(String, PathBuf)> = Vec::new();
    let mut rows_all = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io_error(dir, "cannot list the directory", &e))? {
        let entry = entry.map_err(|e| io_error(dir, "cannot list the directory", &e))?;
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("jsonl") || !entry.file_type().map(|t| t.is_file()).unwrap_or(false) {
            continue;
        }
        if limit.is_none() {
            // The whole list: each log read once, for its row.
            if let Ok(Some(row)) = session_row(&path, &locks) {
                if after.is_none_or(|a| row.id.as_str() > a) && wanted(row.parent.as_ref().map(|p| p.id.as_str())) {
                    rows_all.push(row);
                }
            }
            continue;
        }
        if let Some((id, p)) = session_id_of(&path) {
            if after.is_none_or(|a| id.as_str() > a) && wanted(p.as_deref()) {
                ids.push((id, path));
            }
        }
    }
    if limit.is_none() {
        rows_all.sort_by(|a, b| a.id.cmp(&b.id));
        return Ok(rows_all);
    }
    ids.sort();
    if let Some(l) = limit {
        ids.truncate(l.min(usize::MAX as u64) as usize);
    }
    let mut rows = Vec::with_capacity(ids.len());
    for (_, path) in ids {
        if let Ok(Some(row)) = session_row(&path, &locks) {
            rows.push(row);
        }
    }
    Ok(rows)
}

/// `<log>.cut-<unix ms>` (with `-2`, `-3`, ... if that exists).
fn sidecar_path(log: &Path) -> PathBuf {
    let ms = crate::time::now_ms();
    let base = format!("{}.cut-{ms}", log.display());
    let mut p = PathBuf::from(&base);
    let mut n = 2;
    while p.symlink_metadata().is_ok() {
        p = PathBuf::from(format!("{base}-{n}"));
        n += 1;
    }
    p
}
