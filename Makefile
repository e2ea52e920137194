# llmsession build and test entry points. `make test` is the whole suite (CI runs it);
# `make demo` is the main job.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: all build test test-rust demo scenario

all: build

build:
	$(CARGO) build --release

test: test-rust

test-rust:
	$(CARGO) test --all-targets

# Run one scenario file and print a readable diff on failure: make scenario FILE=path
scenario:
	LLMSESSION_SCENARIO_FILE="$(abspath $(FILE))" $(CARGO) test --test scenarios -- --nocapture

demo:
	@echo "make demo: not yet (the demo host arrives with issue #9)"
