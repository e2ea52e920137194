#!/usr/bin/env bash
# The PostgreSQL suite (`make test-pg` runs it under scripts/pg/server.sh, which sets
# LLMSESSION_PG_URL and the other LLMSESSION_PG_* variables): the Rust tests (tests/postgres.rs:
# lease, conflicts, damage, errors, a two-process race, SIGKILLed writers, the server stopped and
# crashed mid-session; every scenario file on PostgreSQL), tests/pg_fleet.rs (the whole server
# SIGKILLed under writers of each durability policy; a primary failed over to its synchronous
# standby, on a pair that scripts/pg/pair.sh starts for that step), then the Go, Node and C++
# wrappers' tests (and the C tests of the URL entry points and of the store conformance kit) against the same server. Needs the library staged in build/lib and the Go pkg-config
# file (make build-lib go-pc), Node's dependencies (npm ci) and the C++ test build's deps.
#
# Environment: CARGO, GO (commands), LLMSESSION_PG_KILLS (SIGKILL trials, default 200),
# LLMSESSION_PG_RACE_ROUNDS (race rounds, default 10), LLMSESSION_PG_CRASHES (server SIGKILLs,
# default 10), LLMSESSION_PG_FAILOVERS (failovers, default 5), LLMSESSION_PG_PAIR_DIR (where
# the pair lives, default build/pg-pair).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
CARGO="${CARGO:-cargo}"
GO="${GO:-go}"
[[ -n "${LLMSESSION_PG_URL:-}" ]] ||
    { echo "test-pg: LLMSESSION_PG_URL is not set (run this through scripts/pg/server.sh run)" >&2; exit 1; }

step() { printf '\n== test-pg: %s\n' "$*"; }

step "Rust: tests/postgres.rs and cli/tests/postgres.rs (the inspector)"
"$CARGO" test --test postgres -- --nocapture

step "Rust: tests/pg_fleet.rs (server SIGKILLs per durability policy; failover to a synchronous standby)"
bash scripts/pg/pair.sh run "${LLMSESSION_PG_PAIR_DIR:-build/pg-pair}" "$CARGO" test --test pg_fleet -- --nocapture

step "Rust: every scenario file on PostgreSQL"
"$CARGO" test --test scenarios scenarios_on_postgres

step "Go: OpenURL, ListSessions, ForkURL, CheckStoreURL"
(
    cd bindings/go
    PKG_CONFIG_PATH="$ROOT/build/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" \
        LD_LIBRARY_PATH="$ROOT/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        CGO_ENABLED=1 GOPROXY=off GOTOOLCHAIN=local GOFLAGS=-tags=llmsession_system "$GO" test -count=1 -run 'Postgres|URL' -v . |
        grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)' 
)

step "Node: Session.openUrl, listSessions, fork({url})"
(cd bindings/node && LLMSESSION_LIB="$ROOT/build/lib/libllmsession.so" node --test test/postgres.test.js)

step "Python: Session.open_url, list_sessions, fork(url=...) (bindings/python/tests/test_urls.py)"
bash scripts/python/test.sh venv build/python-venv
(cd bindings/python && "$ROOT/build/python-venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_urls.py)

step "C: lls_session_open_url, lls_store_list_sessions (tests/c/test_url.c, ASan)"
mkdir -p build/c
"${CC:-cc}" -std=c11 -Wall -Wextra -Werror -g -O1 -pthread -Iinclude -fsanitize=address,undefined \
    -fno-sanitize-recover=undefined -fno-omit-frame-pointer tests/c/test_url.c -Lbuild/lib -lllmsession \
    -o build/c/test_url_pg_asan
LD_LIBRARY_PATH="$ROOT/build/lib" ASAN_OPTIONS=detect_leaks=1 build/c/test_url_pg_asan

step "C: the store conformance kit on PostgreSQL, lls_store_conformance_url (tests/c/test_conformance.c, ASan)"
"${CC:-cc}" -std=c11 -Wall -Wextra -Werror -g -O1 -pthread -Iinclude -fsanitize=address,undefined \
    -fno-sanitize-recover=undefined -fno-omit-frame-pointer tests/c/test_conformance.c -Lbuild/lib -lllmsession \
    -o build/c/test_conformance_pg_asan
LD_LIBRARY_PATH="$ROOT/build/lib" ASAN_OPTIONS=detect_leaks=1 build/c/test_conformance_pg_asan

step "C++: Session::open_url, list_sessions"
cmake -S tests/cpp -B build/cpp -DLLMSESSION_LIB_DIR="$ROOT/build/lib" >/dev/null
cmake --build build/cpp --target test_cpp_postgres -j 2 >/dev/null
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 build/cpp/test_cpp_postgres

step "passed"
