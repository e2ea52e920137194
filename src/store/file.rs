//! Reading and opening files safely: regular files only (a device or a FIFO is refused, never
//! read or waited on), a size limit per kind of file, no symbolic link as the last path
//! component, and the holder of a file lock where the platform tells.
//!
//! The limits are documented in `docs/storage.md`: a session log may hold up to
//! [`MAX_LOG_BYTES`], a tokenizer file [`MAX_TOKENIZER_BYTES`].

use crate::error::{Error, ErrorKind, Result};
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::Path;

/// The largest session log that is read (8 GiB): the whole log is held in memory.
pub const MAX_LOG_BYTES: u64 = 8 << 30;
/// The largest tokenizer file that is read (512 MiB; real `tokenizer.json` files are tens of MB).
pub const MAX_TOKENIZER_BYTES: u64 = 512 << 20;

/// A storage error about `path`, with the OS error code in the detail.
pub fn io_error(path: &Path, what: &str, e: &std::io::Error) -> Error {
    let mut message = format!("{}: {what}: {e}", path.display());
    if e.raw_os_error() == Some(libc::ELOOP) {
        message = format!(
            "{}: {what}: it is a symbolic link; llmsession does not follow links to logs (open the link's target path)",
            path.display()
        );
    }
    Error::new(ErrorKind::Storage, message)
        .with("path", path.display().to_string())
        .with("os", e.raw_os_error().map(i64::from).unwrap_or(-1))
}

/// How to open a file.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Open {
    pub write: bool,
    pub create: bool,
    /// Permission bits of a created file.
    pub mode: u32,
}

/// Opens `path` as a regular file: the last component must not be a symbolic link, and a FIFO
/// or device is refused without blocking (the open does not wait for a FIFO's writer).
pub(crate) fn open_regular(path: &Path, how: Open, what: &str) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut o = OpenOptions::new();
    o.read(true);
    if how.write {
        o.append(true);
    }
    if how.create {
        o.create(true).mode(how.mode);
    }
    o.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC);
    let file = o.open(path).map_err(|e| io_error(path, &format!("cannot open {what}"), &e))?;
    let meta = file.metadata().map_err(|e| io_error(path, "cannot stat", &e))?;
    if !meta.is_file() {
        let kind = kind_name(&meta);
        return Err(Error::new(
            ErrorKind::Storage,
            format!("{}: not a regular file ({kind}); {what} must be a regular file", path.display()),
        )
        .with("path", path.display().to_string()));
    }
    // O_NONBLOCK has no effect on a regular file's reads and writes.
    Ok(file)
}

fn kind_name(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a plain file"
    }
}

/// Reads all of an open file, refusing one larger than `limit` bytes.
pub(crate) fn read_limited(file: &mut File, path: &Path, limit: u64, what: &str) -> Result<Vec<u8>> {
    let len = file.metadata().map_err(|e| io_error(path, "cannot stat", &e))?.len();
    if len > limit {
        return Err(too_large(path, what, len, limit));
    }
    let mut buf = Vec::with_capacity(len as usize);
    file.take(limit + 1).read_to_end(&mut buf).map_err(|e| io_error(path, "cannot read", &e))?;
    if buf.len() as u64 > limit {
        return Err(too_large(path, what, buf.len() as u64, limit));
    }
    Ok(buf)
}

fn too_large(path: &Path, what: &str, len: u64, limit: u64) -> Error {
    Error::new(ErrorKind::Storage, format!("{}: {what} is {len} bytes, more than the limit of {limit} bytes", path.display()))
        .with("path", path.display().to_string())
        .with("limit", limit)
}

/// Reads the regular file at `path` (see [`open_regular`]), at most `limit` bytes.
pub fn read_regular(path: &Path, limit: u64, what: &str) -> Result<Vec<u8>> {
    let mut f = open_regular(path, Open { write: false, create: false, mode: 0 }, what)?;
    read_limited(&mut f, path, limit, what)
}

/// Who holds a lock on `file`, where the platform tells: on Linux, the process named in
/// `/proc/locks` for the file's device and inode ("process 1234 (name)"; "this process" for our
/// own). `None` elsewhere or when it cannot be found.
/// The files a writer holds a `flock` on now, as (device, inode), from one read of
/// `/proc/locks` (empty where the platform does not tell): a listing of many logs asks once.
pub(crate) fn flock_holders() -> std::collections::HashSet<(u64, u64)> {
    let mut out = std::collections::HashSet::new();
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else { return out };
    for line in locks.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 || fields[1] != "FLOCK" {
            continue;
        }
        let mut parts = fields[5].split(':');
        let (Some(major), Some(minor), Some(ino)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let (Ok(major), Ok(minor), Ok(ino)) = (u64::from_str_radix(major, 16), u64::from_str_radix(minor, 16), ino.parse::<u64>()) else {
            continue;
        };
        // glibc's encoding of a dev_t (gnu_dev_makedev).
        let dev = ((major & 0xfff) << 8) | ((major & !0xfff) << 32) | (minor & 0xff) | ((minor & !0xff) << 12);
        out.insert((dev, ino));
    }
    out
}

pub(crate) fn lock_holder(file: &File) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().ok()?;
    let dev = meta.dev();
    // glibc's encoding of a dev_t (gnu_dev_major / gnu_dev_minor).
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let want = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    for line in locks.lines() {
        // "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF" (blocked waiters have "->").
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 || fields.get(1) == Some(&"->") || fields[1] != "FLOCK" {
            continue;
        }
        if !fields[5].eq_ignore_ascii_case(&want) {
            continue;
        }
        let pid: u32 = fields[4].parse().ok()?;
        if pid == std::process::id() {
            return Some(format!("this process ({pid}): another session handle in this process has it open for writing"));
        }
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|s| s.trim().to_string()).unwrap_or_default();
        return Some(if name.is_empty() { format!("process {pid}") } else { format!("process {pid} ({name})") });
    }
    None
}
