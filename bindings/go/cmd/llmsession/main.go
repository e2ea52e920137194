// Command llmsession is the Go binding's command: `llmsession verify LOG` checks a session log
// and rebuilds every request from it, like the inspector's verify (cli/), with nothing but the
// module: `go run github.com/llmsession/llmsession/bindings/go/cmd/llmsession@vX.Y.Z verify LOG`
// (the released module links its own static library; docs/go.md).
//
// Exit status, as the inspector's: 0 verified; 1 any other failure; 2 usage error; 3 the log is
// bad (damaged, breaks the log rules, not a session log, or a request rebuilt from it differs
// from the one sent); 4 the log could not be read (missing or unreadable file).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	llmsession "github.com/llmsession/llmsession/bindings/go"
)

const usage = `usage: llmsession verify [--json] LOG
       llmsession version

verify  check the JSONL session log LOG and rebuild every request from it
        (--json: the report as one JSON document on stdout)
version the library's version and ABI
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "verify":
		return verify(args[1:], stdout, stderr)
	case "version":
		if len(args) != 1 {
			fmt.Fprintf(stderr, "llmsession: version takes no argument (got %q)\n%s", args[1], usage)
			return 2
		}
		if err := llmsession.CheckABI(); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		fmt.Fprintf(stdout, "llmsession %s (ABI %d.%d)\n", llmsession.Version(), llmsession.ABIVersion, llmsession.ABIMinor)
		return 0
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "llmsession: unknown command %q\n%s", args[0], usage)
		return 2
	}
}

func verify(args []string, stdout, stderr io.Writer) int {
	asJSON := false
	var logs []string
	for _, a := range args {
		switch {
		case a == "--json":
			asJSON = true
		case len(a) > 1 && a[0] == '-':
			fmt.Fprintf(stderr, "llmsession: verify: unknown option %q\n%s", a, usage)
			return 2
		default:
			logs = append(logs, a)
		}
	}
	if len(logs) != 1 {
		fmt.Fprintf(stderr, "llmsession: verify takes one LOG (got %d)\n%s", len(logs), usage)
		return 2
	}
	path := logs[0]
	rep, err := llmsession.VerifyFileOf(path)
	if err != nil {
		code := exitCode(err)
		if asJSON {
			b, _ := json.Marshal(map[string]any{"ok": false, "error": map[string]string{"message": err.Error()}})
			fmt.Fprintf(stdout, "%s\n", b)
		}
		fmt.Fprintln(stderr, err) // "llmsession: [kind] PATH: what was wrong"
		return code
	}
	if asJSON {
		fmt.Fprintf(stdout, "%s\n", rep.Raw)
		return 0
	}
	fmt.Fprintf(stdout, "%s: ok: %d requests rebuilt byte for byte from %d events (%d compactions)\n",
		path, rep.Requests, rep.Events, rep.Compactions)
	return 0
}

// exitCode maps a library error onto the inspector's exit status.
func exitCode(err error) int {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission), errors.Is(err, llmsession.ErrStorage):
		return 4
	case errors.Is(err, llmsession.ErrCorruptLog), errors.Is(err, llmsession.ErrReconstruction),
		errors.Is(err, llmsession.ErrMalformedJSON):
		return 3
	default:
		return 1
	}
}
