#!/usr/bin/env bash
# `make test-go-module`: the Go newcomer path of docs/go.md ("Using the binding from your
# module"), followed to the letter from a temporary module outside the repository, with
# GOPROXY=off (nothing is downloaded: the binding needs only the standard library).
#   scripts/go/outside-module.sh            (after make build-lib go-pc)
# It creates the module, requires the binding with a `replace` pointing at this checkout's
# bindings/go, builds a small program, runs one turn, a second run that resumes the log, a
# verify, and a verify of a missing log (errors.Is(err, fs.ErrNotExist)); then builds the same
# program in a second module through `go work` instead of `replace`. cgo finds the library
# through build/pkgconfig/llmsession.pc (whose -rpath lets the program run without
# LD_LIBRARY_PATH). With LLMSESSION_PREFIX=DIR it uses an installed prefix instead
# (DIR/lib/pkgconfig, and LD_LIBRARY_PATH=DIR/lib for the runs).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
binding="$root/bindings/go"
module=github.com/llmsession/llmsession/bindings/go
if [ -n "${LLMSESSION_PREFIX:-}" ]; then
    export PKG_CONFIG_PATH="$LLMSESSION_PREFIX/lib/pkgconfig"
    export LD_LIBRARY_PATH="$LLMSESSION_PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
    export PKG_CONFIG_PATH="$root/build/pkgconfig"
    # The in-tree .pc links with -rpath to build/lib: no LD_LIBRARY_PATH.
    unset LD_LIBRARY_PATH
fi
[ -f "$PKG_CONFIG_PATH/llmsession.pc" ] || { echo "outside-module: no $PKG_CONFIG_PATH/llmsession.pc (run make build-lib go-pc, or make install)"; exit 1; }
# The checkout has no bundled static library: the tag links the one pkg-config finds.
export CGO_ENABLED=1 GOPROXY=off GOTOOLCHAIN=local GOFLAGS=-tags=llmsession_system
GO=${GO:-go}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case "$tmp/" in "$root"/*) echo "outside-module: $tmp is inside the repository"; exit 1;; esac

fail() { echo "outside-module: $*"; exit 1; }

# The program of docs/go.md: one turn per run (a canned provider reply stands in for the HTTP
# call), resuming the log when it exists; `verify LOG` verifies a log.
write_program() {
    cat >"$1/main.go" <<'GO'
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"

	llmsession "github.com/llmsession/llmsession/bindings/go"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "verify" {
		rep, err := llmsession.VerifyFileOf(os.Args[2])
		if errors.Is(err, fs.ErrNotExist) {
			fmt.Printf("no log at %s\n", os.Args[2])
			os.Exit(3)
		} else if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("verified %d requests in %d events\n", rep.Requests, rep.Events)
		return
	}
	if len(os.Args) != 3 {
		log.Fatal("usage: myagent LOG TEXT | myagent verify LOG")
	}
	s, err := llmsession.OpenFile(os.Args[1], nil) // created, or resumed when it exists
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	history, err := s.HistoryOf()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("resumed %d messages\n", len(history))
	a, err := llmsession.NewAgent(s, llmsession.AgentOptions{
		Config: llmsession.CallConfig{Provider: "openai", Model: "some-model"},
		System: "Be brief.",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	if err := a.SetRenderer("openai", nil); err != nil {
		log.Fatal(err)
	}
	turn, err := a.StartTurn(llmsession.UserText(os.Args[2]))
	if err != nil {
		log.Fatal(err)
	}
	body, err := a.NextBody(context.Background()) // POST body.Bytes to /chat/completions
	if err != nil {
		log.Fatal(err)
	}
	rec, err := a.RecordBodyOf(reply("You said: " + os.Args[2]))
	if err != nil {
		log.Fatal(err)
	}
	if err := a.EndTurn("completed"); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("turn %d: sent %d bytes, %d of %d messages shared with the last request; assistant: %s\n",
		turn, len(body.Bytes), body.Info.SharedMessages, body.Info.MessageCount, rec.Message.Text())
}

// reply is a canned chat-completions reply.
func reply(text string) []byte {
	b, _ := json.Marshal(map[string]any{
		"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": text}, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": 20, "completion_tokens": 5},
	})
	return b
}
GO
}

# 1. A module of its own, requiring the binding with a replace (the documented recipe).
app="$tmp/myagent"
mkdir -p "$app"
(
    cd "$app"
    export GOWORK=off
    $GO mod init example.com/myagent >/dev/null 2>&1
    $GO mod edit -require=$module@v0.0.0 -replace=$module="$binding"
    write_program "$app"
    $GO build -o myagent .
) || fail "building the module with a replace failed"

run() { # expected pattern (grep -E, over the output on one line), command...
    local want=$1; shift
    local out rc=0
    out=$("$@" 2>&1) && rc=0 || rc=$?
    out=$(echo "$out" | tr '\n' ' ')
    if [ $rc -ne 0 ] && ! { [ "$want" = "no log at" ] && [ $rc -eq 3 ]; }; then
        echo "$out"; fail "'$*' exited $rc"
    fi
    echo "$out" | grep -Eq -- "$want" || { echo "$out"; fail "'$*' did not print '$want'"; }
    echo "outside-module: $out"
}
cd "$tmp"
run "resumed 0 messages turn 1: sent [0-9]+ bytes, 0 of 1 messages shared" "$app/myagent" chat.jsonl "Hello"
# A second process resumes the log: its request extends the first one (shares its message).
run "resumed 2 messages turn 2: sent [0-9]+ bytes, 1 of 3 messages shared" "$app/myagent" chat.jsonl "And again"
run "verified 2 requests in [0-9]+ events" "$app/myagent" verify chat.jsonl
run "no log at" "$app/myagent" verify missing.jsonl

# 2. The same program in a module without a replace, through a go.work that uses the binding.
work="$tmp/viawork"
mkdir -p "$work/app"
(
    cd "$work/app"
    export GOWORK=
    $GO mod init example.com/viawork >/dev/null 2>&1
    write_program "$work/app"
    cd "$work"
    $GO work init ./app "$binding"
    cd app
    $GO build -o viawork .
) || fail "building the module through go work failed"
run "turn 1: sent" "$work/app/viawork" work.jsonl "Hello"
run "verified 1 requests" "$work/app/viawork" verify work.jsonl
echo "outside-module: ok"
