#!/usr/bin/env bash
# The Rust newcomer path (README, "Using it from Rust"), from a temporary directory outside the
# repository: a new binary crate that depends on the checkout's core crate by path, the README's
# example (examples/readme/hello.rs) as its main.rs, run twice (the second run resumes the log as
# a new agent instance), and the log verified by the inspector (`llmsession verify`).
# It builds into the checkout's target directory, with the checkout's Cargo.lock, so that the
# dependencies already built there are reused rather than built again.
#   scripts/newcomer/rust.sh [REPO]     (CARGO= the cargo to use; LLMSESSION_CLI= the inspector)
set -euo pipefail
repo=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
cargo=${CARGO:-cargo}
cli=${LLMSESSION_CLI:-$repo/target/release/llmsession}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "rust-newcomer: $*" >&2; exit 1; }
step() { echo "rust-newcomer: $*"; }
[[ -x $cli ]] || fail "no inspector at $cli (make build-cli)"

mkdir -p "$tmp/hello/src"
cat > "$tmp/hello/Cargo.toml" <<TOML
[package]
name = "hello"
version = "0.1.0"
edition = "2021"

[dependencies]
llmsession = { path = "$repo" }
serde_json = "1"
TOML
cp "$repo/examples/readme/hello.rs" "$tmp/hello/src/main.rs"
cp "$repo/Cargo.lock" "$tmp/hello/Cargo.lock"
(cd "$tmp/hello" && CARGO_TARGET_DIR="$repo/target" "$cargo" build --quiet 2>"$tmp/build.err") ||
    { cat "$tmp/build.err" >&2; fail "cargo build of a crate depending on $repo failed"; }
step "cargo build (llmsession = { path = \"$repo\" }): ok"

mkdir "$tmp/run" && cd "$tmp/run"
first=$("$repo/target/debug/hello") || fail "the first run failed"
[[ $first == *'"requests":1'* ]] || fail "the first run printed $first"
step "one turn: $first"
second=$("$repo/target/debug/hello") || fail "the resumed run failed"
[[ $second == *'"requests":2'* ]] || fail "the resumed run printed $second"
step "resume: $second"
report=$("$cli" verify hello.jsonl) || fail "llmsession verify failed: $report"
[[ $report == ok:* ]] || fail "llmsession verify said $report"
step "verify: $report"
rm -f "$repo/target/debug/hello" "$repo/target/debug/hello.d"
step ok
