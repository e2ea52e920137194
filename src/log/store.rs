//! Storage for a session log: in memory, a JSONL file (the embedded default), or a store the
//! host provides through the [`Store`] trait (the C ABI adapts host callbacks to it).
//!
//! A store holds records: the session header first, then one event per record, each a line of
//! JSON without its newline. The [`Durability`] policy decides when the session asks the store
//! to make appended records durable.

use crate::error::{Error, ErrorKind, Result};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// When appended events are made durable (fsync for a file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// After every event.
    EveryEvent,
    /// After every `turn/end` (and after repairs and compactions).
    #[default]
    TurnEnd,
    /// Never explicitly (the OS decides).
    Never,
}

impl Durability {
    /// Parses "every-event" | "turn-end" | "never".
    pub fn parse(s: &str) -> Result<Durability> {
        match s {
            "every-event" => Ok(Durability::EveryEvent),
            "turn-end" => Ok(Durability::TurnEnd),
            "never" => Ok(Durability::Never),
            other => Err(Error::invalid("durability", format!("expected \"every-event\", \"turn-end\" or \"never\", got {other:?}"))),
        }
    }
}

/// What a store holds when a session is opened.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StoreContents {
    /// The records in order (raw bytes: a damaged file may hold invalid UTF-8).
    pub records: Vec<Vec<u8>>,
    /// Whether the last record was completely written (a file's last line ended with '\n').
    pub last_complete: bool,
}

/// A place to keep a session log. Implementations must keep records in append order.
pub trait Store: Send {
    /// Every stored record, in order.
    fn load(&mut self) -> Result<StoreContents>;
    /// Appends one record. On failure nothing may remain of it (or `load` must see it torn).
    fn append(&mut self, record: &str) -> Result<()>;
    /// Makes every appended record durable.
    fn sync(&mut self) -> Result<()>;
    /// Keeps only the first `records` records (cuts a torn or damaged tail on load).
    fn truncate(&mut self, records: usize) -> Result<()>;
    /// A short description for messages ("memory", a file path, ...).
    fn describe(&self) -> String;
}

/// Records in memory.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    records: Vec<String>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// The stored records.
    pub fn records(&self) -> &[String] {
        &self.records
    }
}

impl Store for MemoryStore {
    fn load(&mut self) -> Result<StoreContents> {
        Ok(StoreContents { records: self.records.iter().map(|r| r.as_bytes().to_vec()).collect(), last_complete: true })
    }
    fn append(&mut self, record: &str) -> Result<()> {
        self.records.push(record.to_string());
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        Ok(())
    }
    fn truncate(&mut self, records: usize) -> Result<()> {
        self.records.truncate(records);
        Ok(())
    }
    fn describe(&self) -> String {
        "memory".into()
    }
}

/// A JSONL file: one record per line.
#[derive(Debug)]
pub struct JsonlStore {
    path: PathBuf,
    file: File,
    /// Byte offset where each record starts, plus the end of the last complete one.
    offsets: Vec<u64>,
    len: u64,
}

fn io_err(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::new(ErrorKind::Storage, format!("{}: {what}: {e}", path.display()))
        .with("path", path.display().to_string())
        .with("os", e.raw_os_error().map(i64::from).unwrap_or(-1))
}

impl JsonlStore {
    /// Opens (creating if missing) a JSONL file for reading and appending.
    pub fn open(path: impl AsRef<Path>) -> Result<JsonlStore> {
        let path = path.as_ref().to_path_buf();
        let file = OpenOptions::new().read(true).append(true).create(true).open(&path).map_err(|e| io_err(&path, "cannot open", e))?;
        let meta = file.metadata().map_err(|e| io_err(&path, "cannot stat", e))?;
        if !meta.is_file() {
            // A device or FIFO cannot be truncated, and reading one may never end (/dev/full).
            return Err(
                Error::new(ErrorKind::Storage, format!("{}: not a regular file", path.display())).with("path", path.display().to_string())
            );
        }
        let len = meta.len();
        Ok(JsonlStore { path, file, offsets: Vec::new(), len })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Store for JsonlStore {
    fn load(&mut self) -> Result<StoreContents> {
        let mut buf = Vec::new();
        self.file.seek(SeekFrom::Start(0)).map_err(|e| io_err(&self.path, "cannot seek", e))?;
        self.file.read_to_end(&mut buf).map_err(|e| io_err(&self.path, "cannot read", e))?;
        self.len = buf.len() as u64;
        let mut records = Vec::new();
        self.offsets.clear();
        let mut start = 0usize;
        for (i, b) in buf.iter().enumerate() {
            if *b == b'\n' {
                self.offsets.push(start as u64);
                records.push(buf[start..i].to_vec());
                start = i + 1;
            }
        }
        let last_complete = start == buf.len();
        if !last_complete {
            self.offsets.push(start as u64);
            records.push(buf[start..].to_vec());
        }
        Ok(StoreContents { records, last_complete })
    }

    fn append(&mut self, record: &str) -> Result<()> {
        let mut line = Vec::with_capacity(record.len() + 1);
        line.extend_from_slice(record.as_bytes());
        line.push(b'\n');
        if let Err(e) = self.file.write_all(&line) {
            // Undo a partial write so the file keeps only whole records.
            let _ = self.file.set_len(self.len);
            return Err(io_err(&self.path, "cannot append", e));
        }
        self.offsets.push(self.len);
        self.len += line.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        self.file.sync_data().map_err(|e| io_err(&self.path, "cannot sync", e))
    }

    fn truncate(&mut self, records: usize) -> Result<()> {
        if records > self.offsets.len() {
            return Ok(());
        }
        // Keeping every record still cuts what a failed append may have left after them.
        let at = self.offsets.get(records).copied().unwrap_or(self.len);
        self.file.set_len(at).map_err(|e| io_err(&self.path, "cannot truncate", e))?;
        self.file.sync_data().map_err(|e| io_err(&self.path, "cannot sync", e))?;
        self.offsets.truncate(records);
        self.len = at;
        Ok(())
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}
