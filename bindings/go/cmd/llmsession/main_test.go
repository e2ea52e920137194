package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	llmsession "github.com/llmsession/llmsession/bindings/go"
)

// writeLog writes a log of one turn (one request) to path.
func writeLog(t *testing.T, path string) {
	t.Helper()
	s, err := llmsession.OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := llmsession.NewAgent(s, llmsession.AgentOptions{Config: llmsession.CallConfig{Provider: "openai", Model: "m"}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.SetRenderer("openai", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.StartTurn(llmsession.UserText("Hi")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.NextBody(context.Background()); err != nil {
		t.Fatal(err)
	}
	reply := `{"choices":[{"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}]}`
	if _, err := a.RecordBodyOf([]byte(reply)); err != nil {
		t.Fatal(err)
	}
	if err := a.EndTurn("completed"); err != nil {
		t.Fatal(err)
	}
}

func runCmd(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestVerify(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "chat.jsonl")
	writeLog(t, good)
	junk := filepath.Join(dir, "junk.jsonl")
	if err := os.WriteFile(junk, []byte("not a log\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"verify", good}, 0, "ok: 1 requests rebuilt byte for byte", ""},
		{[]string{"verify", "--json", good}, 0, `"requests":1`, ""},
		{[]string{"verify", filepath.Join(dir, "missing.jsonl")}, 4, "", "missing.jsonl"},
		{[]string{"verify", junk}, 3, "", "junk.jsonl"},
		{[]string{"verify", "--json", junk}, 3, `"ok":false`, "junk.jsonl"},
		{[]string{"verify"}, 2, "", "verify takes one LOG (got 0)"},
		{[]string{"verify", "--frob", good}, 2, "", `unknown option "--frob"`},
		{[]string{"check", good}, 2, "", `unknown command "check"`},
		{nil, 2, "", "usage:"},
		{[]string{"version"}, 0, "llmsession " + llmsession.Version(), ""},
	}
	for _, c := range cases {
		code, out, errOut := runCmd(c.args...)
		if code != c.code || !strings.Contains(out, c.stdout) || !strings.Contains(errOut, c.stderr) {
			t.Errorf("llmsession %q: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				c.args, code, out, errOut, c.code, c.stdout, c.stderr)
		}
	}
}
