package llmsession

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pgURL is the test server's URL (make test-pg sets it); without it the test is skipped loudly.
func pgURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("LLMSESSION_PG_URL")
	if u == "" {
		t.Skip("*** SKIPPED: LLMSESSION_PG_URL is not set; `make test-pg` starts a throwaway PostgreSQL server and runs this ***")
	}
	return u
}

func pgID(prefix string) string {
	return fmt.Sprintf("go-%s-%d-%d", prefix, os.Getpid(), time.Now().UnixNano())
}

func TestPostgresOpenURLLeaseAndReadOnly(t *testing.T) {
	url := pgURL(t)
	leakCheck(t)
	id := pgID("lease")
	w, err := OpenURL(url, &URLOptions{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got, _ := w.ID(); got != id {
		t.Fatalf("id %q, want %q", got, id)
	}
	if _, err := w.AppendContext(text("kept in PostgreSQL")); err != nil {
		t.Fatal(err)
	}
	// A second writer: ErrLocked, naming the holder.
	_, err = OpenURL(url, &URLOptions{ID: id})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second writer: %v, want ErrLocked", err)
	}
	var le *Error
	if !errors.As(err, &le) || !strings.Contains(fmt.Sprint(le.Field("holder")), "llmsession pid") {
		t.Fatalf("the LOCKED error names no holder: %v", err)
	}
	// A reader takes no lease and refuses appends.
	r, err := OpenURL(url+"?session="+id, &URLOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.AppendContext(text("no")); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only append: %v, want ErrReadOnly", err)
	}
	if _, err := r.Verify(); err != nil {
		t.Fatal(err)
	}
	// A session that does not exist, opened without creating it.
	if _, err := OpenURL(url, &URLOptions{ID: pgID("missing"), MustExist: true}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("MustExist on a missing session: %v", err)
	}
	// Once the writer is closed, another writer gets the lease.
	w.Close()
	w2, err := OpenURL(url, &URLOptions{ID: id, MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	stats, _ := w2.Stats()
	if !strings.Contains(string(stats), `"events":1`) {
		t.Fatalf("reopened stats: %s", stats)
	}
}

func TestPostgresForkAndList(t *testing.T) {
	url := pgURL(t)
	leakCheck(t)
	id := pgID("parent")
	p, err := OpenURL(url, &URLOptions{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.AppendContext(text("seed")); err != nil {
		t.Fatal(err)
	}
	f, err := p.ForkURL(url, &ForkOptions{ID: id + "-fork"})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	// Forking into an id that is taken is refused.
	if _, err := p.ForkURL(url, &ForkOptions{ID: id + "-fork"}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("fork into a taken id: %v", err)
	}
	list, err := ListSessions(url, &ListOptions{After: id, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != id+"-fork" || list[0].Parent == nil || list[0].Parent.ID != id || list[0].Parent.SeedLength != 1 || list[0].InUse {
		t.Fatalf("listing: %+v", list)
	}
	all, err := ListSessions(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range all {
		if s.ID == id {
			found = s.InUse && s.Events == 1
		}
	}
	if !found {
		t.Fatalf("the parent is not listed as in use with 1 event: %+v", all)
	}
}

func TestPostgresErrors(t *testing.T) {
	url := pgURL(t)
	leakCheck(t)
	if _, err := OpenURL("postgres://nobody@127.0.0.1:1/x?connect_timeout=3", &URLOptions{ID: "x"}); !errors.Is(err, ErrStorage) {
		t.Fatalf("nothing listening: %v", err)
	}
	bad := strings.Replace(url, "@", "x@", 1) // a wrong password
	if _, err := OpenURL(bad, &URLOptions{ID: "x"}); !errors.Is(err, ErrStorage) || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("wrong password: %v", err)
	}
	if _, err := OpenURL("gopher://x", nil); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("unknown scheme: %v", err)
	}
	if _, err := OpenURL(url, &URLOptions{ReadOnly: true}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("read-only without a session id: %v", err)
	}
}

func TestOpenURLFile(t *testing.T) {
	leakCheck(t)
	path := filepath.Join(t.TempDir(), "log.jsonl")
	s, err := OpenURL("file:"+path, &URLOptions{ID: "file-session"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendContext(text("in a file")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	list, err := ListSessions("file://"+path, nil)
	if err != nil || len(list) != 1 || list[0].ID != "file-session" || list[0].Events != 1 {
		t.Fatalf("file listing: %+v %v", list, err)
	}
	if _, err := OpenURL("file:"+path, &URLOptions{ID: "another"}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("a file holding another session: %v", err)
	}
}
