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
use super::{conflict_error, jsonl_ranges, read_only_error, Batch, Store, StoreContents, StoreText};
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
    /// Byte offset where each complete record starts.
    offsets: Vec<u64>,
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
        Ok(JsonlStore { path, file, opts, offsets: Vec::new(), len: 0, sync_dir: len == 0 && !opts.read_only })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The number of complete records this handle knows (the header included).
    pub fn records(&self) -> usize {
        self.offsets.len()
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

    /// Records the offsets of the complete records of `ranges` (read from byte `at` on).
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
        self.read_records(0)
    }

    /// The file read whole, its records ranges of it; `None` for a file that is not valid UTF-8
    /// (damage that loading reports by line, from [`load`](Store::load)'s records).
    fn load_text(&mut self) -> Result<Option<StoreText>> {
        self.offsets.clear();
        let buf = self.read_from(0)?;
        let (records, last_complete) = jsonl_ranges(&buf);
        self.note_records(0, &records, last_complete);
        match String::from_utf8(buf) {
            Ok(text) => Ok(Some(StoreText { text: Arc::new(text), records, last_complete })),
            Err(_) => Ok(None),
        }
    }

    fn load_from(&mut self, from: usize) -> Result<StoreContents> {
        if from > self.offsets.len() {
            // Records this handle never saw: read everything and drop what the caller has.
            let mut c = self.load()?;
            c.records.drain(..from.min(c.records.len()));
            if c.records.is_empty() {
                c.last_complete = true;
            }
            return Ok(c);
        }
        let at = self.offsets.get(from).copied().unwrap_or(self.len);
        self.offsets.truncate(from);
        self.read_records(at)
    }

    fn append(&mut self, batch: &Batch<'_>) -> Result<()> {
        self.writable("append")?;
        let have = self.offsets.len().saturating_sub(1) as u64;
        let fresh = self.offsets.is_empty();
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
        let at = match self.offsets.get(from) {
            Some(&at) => at,
            None if from == self.offsets.len() => self.len,
            None => return Ok(()),
        };
        self.file.set_len(at).map_err(|e| io_error(&self.path, "cannot truncate", &e))?;
        self.file.sync_data().map_err(|e| io_error(&self.path, "cannot sync", &e))?;
        self.offsets.truncate(from);
        self.len = at;
        Ok(())
    }

    fn cut(&mut self, keep: usize, _reason: &str) -> Result<Option<String>> {
        self.writable("cut a damaged tail")?;
        let at = self.offsets.get(keep).copied().unwrap_or(self.len);
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
        self.offsets.truncate(keep);
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

/// `<log>.cut-<unix ms>` (with `-2`, `-3`, ... if that exists).
fn sidecar_path(log: &Path) -> PathBuf {
    let ms = crate::session::now_ms();
    let base = format!("{}.cut-{ms}", log.display());
    let mut p = PathBuf::from(&base);
    let mut n = 2;
    while p.symlink_metadata().is_ok() {
        p = PathBuf::from(format!("{base}-{n}"));
        n += 1;
    }
    p
}
