package llmsession

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A file operation the OS refused: the *Error unwraps to the OS error (the detail's "os"), so
// the standard library's checks work.
func TestOSErrorsUnwrap(t *testing.T) {
	leakCheck(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such-dir", "s.jsonl")
	_, err := OpenFile(missing, nil)
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrStorage) || errors.Is(err, fs.ErrPermission) {
		t.Fatalf("a log in a missing directory: want ErrStorage and fs.ErrNotExist, got %v", err)
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) || errno != syscall.ENOENT {
		t.Fatalf("errors.As gives the errno: %v (%d)", err, errno)
	}
	var le *Error
	if !errors.As(err, &le) || le.Field("path") != missing {
		t.Fatalf("the detail names the path: %v", err)
	}
	if n, ok := le.Errno(); !ok || n != syscall.ENOENT {
		t.Fatalf("Errno() = %d, %v", n, ok)
	}
	if _, err := VerifyFile(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("VerifyFile of a missing file: %v", err)
	}
	if _, err := OpenReplay(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenReplay of a missing file: %v", err)
	}

	// Permission denied (not as root, which reads and writes anything).
	if os.Geteuid() != 0 {
		locked := filepath.Join(dir, "locked")
		if err := os.Mkdir(locked, 0o500); err != nil {
			t.Fatal(err)
		}
		_, err := OpenFile(filepath.Join(locked, "s.jsonl"), nil)
		if !errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("a log in a read-only directory: want fs.ErrPermission, got %v", err)
		}
	}

	// The OS refuses to open a directory for appending: EISDIR.
	if _, err := OpenFile(dir, nil); !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("a directory as the log: want EISDIR, got %v", err)
	}

	// No OS error: a FIFO where a log is expected opens, and the library refuses it itself (not
	// a regular file): the error has no OS cause.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = OpenFile(fifo, nil)
	if !errors.Is(err, ErrStorage) || errors.Is(err, fs.ErrNotExist) || errors.Unwrap(err) != nil {
		t.Fatalf("a FIFO as the log: want ErrStorage without an OS cause, got %v (cause %v)", err, errors.Unwrap(err))
	}
	if _, ok := err.(*Error).Errno(); ok {
		t.Fatalf("a FIFO as the log has no errno: %s", err.(*Error).Detail)
	}
}
