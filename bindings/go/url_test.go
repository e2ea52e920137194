package llmsession

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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

// pgQuery appends URL query parameters to base (which may already have a query).
func pgQuery(base, params string) string {
	if strings.Contains(base, "?") {
		return base + "&" + params
	}
	return base + "?" + params
}

// pgParam percent-encodes a URL parameter's value (a file path).
func pgParam(v string) string {
	return strings.ReplaceAll(url.QueryEscape(v), "+", "%20")
}

// psql runs one SQL statement on the test server (LLMSESSION_PG_URL) with the server's psql
// (LLMSESSION_PG_BIN, /usr/lib/postgresql/*/bin, or PATH), as scripts/pg/server.sh finds the
// server's binaries, and returns its output.
func psql(t *testing.T, sql string) string {
	t.Helper()
	var candidates []string
	if d := os.Getenv("LLMSESSION_PG_BIN"); d != "" {
		candidates = append(candidates, filepath.Join(d, "psql"))
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql")
	for i := len(dirs) - 1; i >= 0; i-- {
		candidates = append(candidates, dirs[i])
	}
	if p, err := exec.LookPath("psql"); err == nil {
		candidates = append(candidates, p)
	}
	bin := ""
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			bin = c
			break
		}
	}
	if bin == "" {
		t.Fatal("psql not found (LLMSESSION_PG_BIN, /usr/lib/postgresql/*/bin, PATH): it comes with the server binaries")
	}
	out, err := exec.Command(bin, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-At", "-d", os.Getenv("LLMSESSION_PG_URL"), "-c", sql).CombinedOutput()
	if err != nil {
		t.Fatalf("psql %q: %v: %s", sql, err, out)
	}
	return string(out)
}

// Six writers of six sessions share one pool of two connections (pool_size=2: a session holds
// no connection between calls), appending from six goroutines at once; pool_size=0 is refused.
func TestPostgresPooledWriters(t *testing.T) {
	base := pgURL(t)
	leakCheck(t)
	u := pgQuery(base, "pool_size=2&pool_timeout=20")
	const writers, appends = 6, 5
	prefix := pgID("pool")
	sessions := make([]*Session, writers)
	for i := range sessions {
		s, err := OpenURL(u, &URLOptions{ID: fmt.Sprintf("%s-%d", prefix, i)})
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
		defer s.Close()
		sessions[i] = s
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers*appends)
	for i, s := range sessions {
		wg.Add(1)
		go func(i int, s *Session) {
			defer wg.Done()
			for j := 0; j < appends; j++ {
				if _, err := s.AppendContext(text(fmt.Sprintf("writer %d, event %d", i, j))); err != nil {
					errs <- fmt.Errorf("writer %d, append %d: %w", i, j, err)
					return
				}
			}
		}(i, s)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, s := range sessions {
		stats, err := s.Stats()
		if err != nil || !strings.Contains(string(stats), fmt.Sprintf(`"events":%d`, appends)) {
			t.Fatalf("writer %d: stats %s %v", i, stats, err)
		}
		s.Close()
	}
	for i := 0; i < writers; i++ {
		r, err := OpenURL(base, &URLOptions{ID: fmt.Sprintf("%s-%d", prefix, i), ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		_, verr := r.Verify()
		r.Close()
		if verr != nil {
			t.Fatalf("session %d: %v", i, verr)
		}
	}
	// A pool of no connections is invalid input naming pool_size.
	_, err := OpenURL(pgQuery(base, "pool_size=0"), &URLOptions{ID: prefix + "-none"})
	if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), "pool_size") {
		t.Fatalf("pool_size=0: %v, want ErrInvalidInput naming pool_size", err)
	}
}

// TLS with the server's certificate checked (sslmode=verify-full against the test CA); a CA that
// did not sign it is a storage error about the certificate; verify-full without a CA is invalid.
func TestPostgresTLS(t *testing.T) {
	base := pgURL(t)
	ca := os.Getenv("LLMSESSION_PG_CA")
	if ca == "" {
		t.Skip("*** SKIPPED: LLMSESSION_PG_CA is not set (scripts/pg/server.sh run sets it when the server has TLS) ***")
	}
	leakCheck(t)
	id := pgID("tls")
	s, err := OpenURL(pgQuery(base, "sslmode=verify-full&sslrootcert="+pgParam(ca)), &URLOptions{ID: id})
	if err != nil {
		t.Fatalf("verify-full with the server's CA: %v", err)
	}
	if _, err := s.AppendContext(text("over TLS")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if other := os.Getenv("LLMSESSION_PG_OTHER_CA"); other != "" {
		_, err = OpenURL(pgQuery(base, "sslmode=verify-full&connect_timeout=5&sslrootcert="+pgParam(other)), &URLOptions{ID: id})
		if !errors.Is(err, ErrStorage) || !strings.Contains(strings.ToLower(err.Error()), "certificate") {
			t.Fatalf("verify-full with an unrelated CA: %v, want ErrStorage about the certificate", err)
		}
	} else {
		t.Log("LLMSESSION_PG_OTHER_CA is not set: the wrong-CA case is not run")
	}
	_, err = OpenURL(pgQuery(base, "sslmode=verify-full"), &URLOptions{ID: id})
	if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), "sslrootcert") {
		t.Fatalf("verify-full without sslrootcert: %v, want ErrInvalidInput naming sslrootcert", err)
	}
}

// A writer whose lease was taken over (expired from outside with SQL, then taken by a writer of
// another pool) gets ErrLocked naming its fencing token on its next append and on every one
// after; the new writer's log holds none of the refused events.
func TestPostgresLockedAfterLostLease(t *testing.T) {
	base := pgURL(t)
	leakCheck(t)
	// A long lease: the renewer (every third of it) does not renew A's lease between the
	// expiry below and B's open.
	u := pgQuery(base, "lease_time=60")
	id := pgID("takeover")
	a, err := OpenURL(u, &URLOptions{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.AppendContext(text("A, before the takeover")); err != nil {
		t.Fatal(err)
	}
	if out := psql(t, "UPDATE llmsession_sessions SET lease_expires = now() - interval '1 second', lease_live = NULL WHERE id = '"+
		strings.ReplaceAll(id, "'", "''")+"' RETURNING id"); strings.TrimSpace(out) != id {
		t.Fatalf("the expiry matched no row: %q", out)
	}
	// Another pool (another URL): as another process would.
	b, err := OpenURL(u+"&pool_size=3", &URLOptions{ID: id, MustExist: true})
	if err != nil {
		t.Fatalf("B could not take the expired lease: %v", err)
	}
	defer b.Close()
	if _, err := b.AppendContext(text("B, after the takeover")); err != nil {
		t.Fatal(err)
	}
	_, err = a.AppendContext(text("A, refused 1"))
	var le *Error
	if !errors.Is(err, ErrLocked) || !errors.As(err, &le) {
		t.Fatalf("A's append after the takeover: %v, want ErrLocked", err)
	}
	epoch, ok := le.Field("epoch").(float64)
	if !ok || epoch < 1 {
		t.Fatalf("the LOCKED error names no epoch: %s", le.Detail)
	}
	if cur, ok := le.Field("currentEpoch").(float64); ok && cur <= epoch {
		t.Fatalf("currentEpoch %v is not past A's epoch %v: %s", cur, epoch, le.Detail)
	}
	_, err = a.AppendContext(text("A, refused 2"))
	if !errors.Is(err, ErrLocked) || !errors.As(err, &le) || le.Field("epoch") != epoch {
		t.Fatalf("A's second append: %v, want ErrLocked with epoch %v", err, epoch)
	}
	if _, err := b.AppendContext(text("B, still writing")); err != nil {
		t.Fatal(err)
	}
	b.Close()
	a.Close()
	r, err := OpenURL(base, &URLOptions{ID: id, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Verify(); err != nil {
		t.Fatalf("verify after the takeover: %v", err)
	}
	log, err := r.ExportJSONL()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"A, before the takeover", "B, after the takeover", "B, still writing"} {
		if !strings.Contains(string(log), want) {
			t.Fatalf("the log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(string(log), "A, refused") {
		t.Fatalf("a refused append of A is in the log:\n%s", log)
	}
	if stats, _ := r.Stats(); !strings.Contains(string(stats), `"events":3`) {
		t.Fatalf("stats after the takeover: %s", stats)
	}
}
