#!/usr/bin/env bash
# Binding overhead (docs/performance.md, "Binding overhead"): the same steady-state step on the
# same session, through Rust (Agent::next_request), C (direct lls_ calls), Go, Node and C++,
# run back to back in one run and compared with the Rust call.
#
#   benches/bindings.sh [ITERATIONS] [PASSES] [MESSAGES]
#
# ITERATIONS timed steps per harness and pass (default 300), PASSES rounds of all harnesses in
# turn (default 3: the machine is shared, so harnesses alternate rather than run one after the
# other), MESSAGES the history length of the fixture (default 1000). BENCH_PROFILE=debug uses
# the debug build of the Rust harness (the smoke run). Expects the libraries staged in
# build/lib (make build-lib), build/pkgconfig (make go-pc) and bindings/node/node_modules
# (npm ci): `make bench-bindings` and `make bench-bindings-smoke` see to that.
#
# Every harness (examples/bench_bindings.rs, benches/c/bindings.c, bindings/go/bench_test.go,
# bindings/node/bench/next_request.js, benches/cpp/bindings.cpp) forks the fixture log into
# memory, opens a turn, and then, per iteration, records one exchange (a response with a tool
# call, and its result) and builds the next request. `next` times the request alone (what the
# host gets back from its binding's normal call), `step` the exchange and the request. The
# table gives medians over all passes and the ratio to Rust; every harness must build the same
# bytes (same length and digest), or the run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
iterations=${1:-300}
passes=${2:-3}
messages=${3:-1000}
profile=${BENCH_PROFILE:-release}
CARGO=${CARGO:-cargo}
GO=${GO:-go}
CC=${CC:-cc}
CXX=${CXX:-c++}
out=build/bench/bindings
fixture=$out/fixture
mkdir -p "$out"

echo "== building the harnesses"
if [ "$profile" = release ]; then
	$CARGO build --release --example bench_bindings
else
	$CARGO build --example bench_bindings
fi
rust=target/$profile/examples/bench_bindings
[ -n "${CARGO_TARGET_DIR:-}" ] && rust=$CARGO_TARGET_DIR/$profile/examples/bench_bindings
lib=$root/build/lib
$CC -std=c11 -O2 -Wall -Wextra -Werror -Iinclude benches/c/bindings.c -L"$lib" -lllmsession \
	-Wl,-rpath,"$lib" -o "$out/bindings_c"
$CXX -std=c++17 -O2 -Wall -Wextra -Werror -Iinclude benches/cpp/bindings.cpp -L"$lib" -lllmsession \
	-Wl,-rpath,"$lib" -o "$out/bindings_cpp"
(cd bindings/go && PKG_CONFIG_PATH="$root/build/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" \
	CGO_ENABLED=1 GOPROXY=off GOTOOLCHAIN=local $GO test -c -o "$root/$out/bindings_go.test" .)

echo "== fixture: $messages history messages"
"$rust" write "$fixture" "$messages"

run() { # name command...: runs one harness, appends its samples, records "bytes digest"
	local name=$1
	shift
	local res
	res=$("$@" | grep -o 'bytes=[0-9]* digest=[^ ]*' | tail -n 1)
	[ -n "$res" ] || { echo "bindings.sh: $name printed no result" >&2; exit 1; }
	cat "$out/$name.pass" >>"$out/$name.samples"
	echo "$res" >"$out/$name.result"
	echo "pass $pass $name: $res"
}

names="rust c go goview node cpp"
rm -f "$out/passes"
for n in $names; do rm -f "$out/$n.samples" "$out/$n.pass"; done
for pass in $(seq 1 "$passes"); do
	run rust "$rust" run "$fixture" "$iterations" "$out/rust.pass"
	run c "$out/bindings_c" "$fixture" "$iterations" "$out/c.pass"
	run go env LLMSESSION_BENCH_DIR="$root/$fixture" LLMSESSION_BENCH_OUT="$root/$out/go.pass" \
		"$out/bindings_go.test" -test.run '^$' -test.bench '^BenchmarkNextRequest$' -test.benchtime "${iterations}x"
	run goview env LLMSESSION_BENCH_DIR="$root/$fixture" LLMSESSION_BENCH_OUT="$root/$out/goview.pass" \
		"$out/bindings_go.test" -test.run '^$' -test.bench '^BenchmarkNextRequestView$' -test.benchtime "${iterations}x"
	run node node bindings/node/bench/next_request.js "$fixture" "$iterations" "$out/node.pass"
	run cpp "$out/bindings_cpp" "$fixture" "$iterations" "$out/cpp.pass"
	# Per-pass medians, to show how much the ratios move between passes.
	for n in $names; do
		echo "$pass $n $(sort -n "$out/$n.pass" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')" >>"$out/passes"
	done
done

python3 - "$out" "$passes" "$profile" $names <<'EOF'
import statistics, sys
out, passes, profile, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
labels = {"rust": "Rust `Agent::next_request`", "c": "C (direct `lls_` calls)", "go": "Go `Agent.NextRequest`",
          "goview": "Go `Agent.NextRequestView` (envelope lent)",
          "node": "Node `await agent.nextRequest()`", "cpp": "C++ `Agent::next_request`"}
results = {n: open(f"{out}/{n}.result").read().split() for n in names}
if len({tuple(r) for r in results.values()}) != 1:
    sys.exit("bindings.sh: the harnesses built different requests: " + repr(results))
samples = {}
for n in names:
    rows = [l.split() for l in open(f"{out}/{n}.samples") if l.strip()]
    samples[n] = ([int(r[0]) for r in rows], [int(r[1]) for r in rows])
per_pass = {}
for l in open(f"{out}/passes"):
    if l.strip():
        p, n, v = l.split()
        per_pass.setdefault(n, {})[int(p)] = int(v)
def fmt(ns):
    return f"{ns / 1000:.0f} µs" if ns >= 10_000 else f"{ns / 1000:.1f} µs"
rn, rs = statistics.median(samples["rust"][0]), statistics.median(samples["rust"][1])
print()
print(f"{results['rust'][0]}, {results['rust'][1]}; {len(samples['rust'][0])} samples per harness ({passes} passes)")
if profile != "release":
    print(f"(a smoke run: the Rust harness is the {profile} build, so the timings and ratios mean nothing)")
print()
print("| harness | next request | vs Rust | per-pass ratios | step (exchange + request) | vs Rust |")
print("|---|---|---|---|---|---|")
for n in names:
    nx, st = statistics.median(samples[n][0]), statistics.median(samples[n][1])
    pr = [per_pass[n][p] / per_pass["rust"][p] for p in sorted(per_pass["rust"]) if p in per_pass[n]]
    spread = f"{min(pr):.2f}–{max(pr):.2f}×" if pr else ""
    print(f"| {labels[n]} | {fmt(nx)} | **{nx / rn:.2f}×** | {spread} | {fmt(st)} | {st / rs:.2f}× |")
EOF
