#!/usr/bin/env bash
# The provider body through every binding, and against a naive host in each language
# (docs/performance.md, "Binding overhead" and "The provider body against a naive host"), side
# by side in one run.
#
#   benches/bindings.sh [ITERATIONS] [PASSES] [MESSAGES]
#
# Three parts, run in alternating passes (PASSES rounds, default 3: the machine is shared, so the
# harnesses take turns rather than run one after the other; each pass runs them in another
# order):
#
# 1. Binding overhead on MESSAGES history messages (default 1000), ITERATIONS steps per harness
#    and pass (default 300): the same hot-path step through Rust (examples/bench_bindings.rs), C
#    (benches/c/bindings.c), C++ (benches/cpp/bindings.cpp), Go (bindings/go/bench_test.go:
#    BenchmarkNextBodyView; BenchmarkAppendNextBody, the body copied into a buffer the host
#    keeps across steps) and Node (bindings/node/bench/next_request.js),
#    each compared with the Rust call. A step records the provider's raw reply
#    (lls_agent_record_body) and the tool result, and builds the next provider body
#    (lls_agent_next_body); `next` times the body alone, `step` all three.
# 2. The naive host, at each size:iterations of NAIVE (default "100:300 1000:100 10000:20"): Go
#    (bindings/go/naive_bench_test.go), Node (bindings/node/bench/naive_host.js) and Python
#    (benches/python/naive_host.py, ctypes) each run llmsession and a host that keeps the body
#    as its language's values and serialises it every step, on identical bytes, and time the
#    pair step by step (body build; full step: reply, tool result, next body).
# 3. Resume and memory, at each events:iterations of RESUME (default "10000:5 100000:3"), on
#    each kind of log of RESUME_LOGS (default "whole checkpoints"): a finished log of that many
#    events (`bench_bindings write-log`) written without checkpoints (`whole`: an open reads and
#    checks it whole, the log `bench_memory` loads; `resume-EVENTS`) or with the default policy
#    (`checkpoints`: one every 1,000 events, so an open restores the state from the last one;
#    `resume-EVENTS-cp`),
#    Go (bindings/go/resume_bench_test.go: BenchmarkResume), Node
#    (bindings/node/bench/resume.js time) and Python (benches/python/resume.py time, ctypes)
#    time, back to back in alternating order, the naive host's resume (read the file, decode
#    every line: `json.Unmarshal` into a map, `JSON.parse`, `json.loads`)
#    and llmsession's (open a copy of the file, chain check included, and build the next body);
#    then, once per size and after the passes, each in a process of its own, the memory probes
#    (on the log without checkpoints)
#    (Go TestResumeMemory, `node --expose-gc bench/resume.js memory`, `resume.py memory`, Rust
#    bench_memory): the
#    growth of the resident size on opening the session, and with one body built, over the
#    log's size.
#
# Every harness writes the last body of its first timed round to OUT.body: the run fails when
# two harnesses of a part (and size) built different bytes, and each naive-host harness fails by
# itself on the first step where its naive body differs from llmsession's. So the smoke run of
# `make test` (3 steps, one pass, 200 messages: `make bench-bindings-smoke`) checks that every
# harness builds the same bytes. BENCH_PROFILE=debug uses the debug build of the Rust harness
# (the smoke run). BENCH_BINDINGS_MODE=request runs part 1 on the envelope path
# (lls_agent_next_request) instead, and skips parts 2 and 3. BENCH_PARTS="overhead naive resume"
# (the default) names the parts to run. Expects the libraries staged in build/lib
# (make build-lib), build/pkgconfig (make go-pc) and bindings/node/node_modules (npm ci):
# `make bench-bindings` and `make bench-bindings-smoke` see to that.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
iterations=${1:-300}
passes=${2:-3}
messages=${3:-1000}
naive_spec=${NAIVE:-100:300 1000:100 10000:20}
resume_spec=${RESUME:-10000:5 100000:3}
resume_logs=${RESUME_LOGS:-whole checkpoints}
mode=${BENCH_BINDINGS_MODE:-body}
parts=${BENCH_PARTS:-overhead naive resume}
profile=${BENCH_PROFILE:-release}
CARGO=${CARGO:-cargo}
GO=${GO:-go}
CC=${CC:-cc}
CXX=${CXX:-c++}
PYTHON=${PYTHON:-python3}
out=build/bench/bindings
mkdir -p "$out"
[ "$mode" = body ] || [ "$mode" = request ] || { echo "bindings.sh: BENCH_BINDINGS_MODE is body or request" >&2; exit 2; }
[ "$mode" = body ] || naive_spec=""
[[ " $parts " == *" naive "* ]] || naive_spec=""
[ "$mode" = body ] || resume_spec=""
[[ " $parts " == *" resume "* ]] || resume_spec=""

echo "== building the harnesses"
if [ "$profile" = release ]; then
	$CARGO build --release --example bench_bindings --example bench_memory
else
	$CARGO build --example bench_bindings --example bench_memory
fi
rust=target/$profile/examples/bench_bindings
[ -n "${CARGO_TARGET_DIR:-}" ] && rust=$CARGO_TARGET_DIR/$profile/examples/bench_bindings
rust_memory=${rust%/*}/bench_memory
lib=$root/build/lib
$CC -std=c11 -O2 -Wall -Wextra -Werror -Iinclude benches/c/bindings.c -L"$lib" -lllmsession \
	-Wl,-rpath,"$lib" -o "$out/bindings_c"
$CXX -std=c++17 -O2 -Wall -Wextra -Werror -Iinclude benches/cpp/bindings.cpp -L"$lib" -lllmsession \
	-Wl,-rpath,"$lib" -o "$out/bindings_cpp"
(cd bindings/go && PKG_CONFIG_PATH="$root/build/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" \
	CGO_ENABLED=1 GOPROXY=off GOTOOLCHAIN=local GOFLAGS=-tags=llmsession_system $GO test -c -o "$root/$out/bindings_go.test" .)

# fixture N: the fixture of N history messages (bench_bindings write), with the provider's raw
# replies: per exchange of inputs.jsonl, the OpenAI chat-completions body whose message is the
# exchange's assistant message (its text as `content`, its tool calls as `tool_calls`).
fixture() {
	local dir=$out/fixture-$1
	if [ ! -f "$dir/replies.jsonl" ] || [ "$dir/inputs.jsonl" -ot "$rust" ]; then
		"$rust" write "$dir" "$1" >/dev/null
		"$PYTHON" - "$dir" <<'EOF'
import json, sys
d = sys.argv[1]
lines = [json.loads(l) for l in open(f"{d}/inputs.jsonl") if l.strip()]
model = lines[0]["config"]["model"]
with open(f"{d}/replies.jsonl", "w") as out:
    for i, r in enumerate(lines[3::2]):
        m = r["message"]
        text = "\n".join(b["text"] for b in m["content"] if b["type"] == "text")
        calls = [{"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": b["arguments"]}}
                 for b in m["content"] if b["type"] == "tool-call"]
        body = {"id": f"chatcmpl-bench-{i}", "object": "chat.completion", "created": 1767225600, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text or None, "tool_calls": calls},
                             "finish_reason": "tool_calls" if calls else "stop"}],
                "usage": {"prompt_tokens": 1000 + 300 * i, "completion_tokens": 40, "total_tokens": 1040 + 300 * i}}
        out.write(json.dumps(body, separators=(",", ":")) + "\n")
EOF
	fi
	echo "$dir"
}

echo "== fixtures"
fix=$(fixture "$messages")
echo "binding overhead: $fix"
naive_sizes=""
for spec in $naive_spec; do
	n=${spec%%:*}
	naive_sizes="$naive_sizes $n"
	echo "naive host, $n messages, ${spec##*:} steps: $(fixture "$n")"
done

# resume_dir EVENTS KIND: the directory of the resume fixture of EVENTS events of KIND (whole
# or checkpoints).
resume_dir() {
	if [ "$2" = checkpoints ]; then echo "$out/resume-$1-cp"; else echo "$out/resume-$1"; fi
}
# resume_fixture EVENTS KIND: the resume fixture of EVENTS events (bench_bindings write-log).
resume_fixture() {
	local dir
	dir=$(resume_dir "$1" "$2")
	local cp=""
	[ "$2" = checkpoints ] && cp=checkpoints
	if [ ! -f "$dir/warm/inputs.jsonl" ] || [ "$dir/inputs.jsonl" -ot "$rust" ]; then
		"$rust" write-log "$dir" "$1" $cp >/dev/null
		# The memory probes' warm-up: a small log of the same shape, opened and dropped first.
		"$rust" write-log "$dir/warm" 200 $cp >/dev/null
	fi
	echo "$dir"
}
for kind in $resume_logs; do
	[ "$kind" = whole ] || [ "$kind" = checkpoints ] || { echo "bindings.sh: RESUME_LOGS names whole and checkpoints" >&2; exit 2; }
done
resume_sizes=""
for spec in $resume_spec; do
	n=${spec%%:*}
	resume_sizes="$resume_sizes $n"
	for kind in whole ${resume_logs//whole/}; do
		echo "resume, $n events, $kind, ${spec##*:} iterations: $(resume_fixture "$n" "$kind") ($(stat -c %s "$(resume_dir "$n" "$kind")/session.jsonl") bytes)"
	done
done

# run KEY COMMAND...: runs one harness, appends its samples to KEY.samples, records its
# "bytes digest" in KEY.result and its per-pass samples in KEY.pass.N.
run() {
	local key=$1
	shift
	local res
	res=$("$@" | grep -o 'bytes=[0-9]* digest=[^ ]*' | tail -n 1) || true
	[ -n "$res" ] || { echo "bindings.sh: $key printed no result (it failed, see above)" >&2; exit 1; }
	cat "$out/$key.pass" >>"$out/$key.samples"
	cp "$out/$key.pass" "$out/$key.pass.$pass"
	echo "$res" >"$out/$key.result"
	echo "pass $pass $key: $res"
}

gotest() { # KEY BENCHMARK DIR ITERATIONS [PATH]: the Go test binary on one benchmark
	env LLMSESSION_BENCH_DIR="$root/$3" LLMSESSION_BENCH_OUT="$root/$out/$1.pass" LLMSESSION_BENCH_PATH="${5:-body}" \
		"$out/bindings_go.test" -test.run '^$' -test.bench "^$2\$" -test.benchtime "$4x"
}

if [[ " $parts " != *" overhead "* ]]; then
	overhead=""
elif [ "$mode" = body ]; then
	overhead="rust c cpp go gocopy node"
else
	overhead="rust c cpp go node"
fi
run_overhead() { # name
	case $1 in
	rust) run rust "$rust" run "$fix" "$iterations" "$out/rust.pass" "$mode" ;;
	c) run c "$out/bindings_c" "$fix" "$iterations" "$out/c.pass" "$mode" ;;
	cpp) run cpp "$out/bindings_cpp" "$fix" "$iterations" "$out/cpp.pass" "$mode" ;;
	go) if [ "$mode" = body ]; then run go gotest go BenchmarkNextBodyView "$fix" "$iterations"; else
		run go gotest go BenchmarkNextRequestView "$fix" "$iterations"; fi ;;
	gocopy) run gocopy gotest gocopy BenchmarkAppendNextBody "$fix" "$iterations" ;;
	node) run node node bindings/node/bench/next_request.js "$fix" "$iterations" "$out/node.pass" "$mode" ;;
	esac
}
run_naive() { # name size iterations
	local key=naive-$1-$2 dir=$out/fixture-$2
	case $1 in
	go) run "$key" gotest "$key" BenchmarkNaiveHost "$dir" "$3" ;;
	node) run "$key" node bindings/node/bench/naive_host.js "$dir" "$3" "$out/$key.pass" ;;
	python) run "$key" "$PYTHON" benches/python/naive_host.py "$lib/libllmsession.so" "$dir" "$3" "$out/$key.pass" ;;
	esac
}

run_resume() { # name events iterations kind
	local key=resume-$1-$2 dir
	dir=$(resume_dir "$2" "$4")
	[ "$4" = checkpoints ] && key=$key-cp
	case $1 in
	go) run "$key" gotest "$key" BenchmarkResume "$dir" "$3" ;;
	node) run "$key" node bindings/node/bench/resume.js time "$dir" "$3" "$out/$key.pass" ;;
	python) run "$key" "$PYTHON" benches/python/resume.py time "$lib/libllmsession.so" "$dir" "$3" "$out/$key.pass" ;;
	esac
}

jobs=()
for h in $overhead; do jobs+=("overhead $h"); done
for spec in $naive_spec; do
	for h in go node python; do jobs+=("naive $h ${spec%%:*} ${spec##*:}"); done
done
for spec in $resume_spec; do
	for kind in $resume_logs; do
		for h in go node python; do jobs+=("resume $h ${spec%%:*} ${spec##*:} $kind"); done
	done
done
rm -f "$out"/*.samples "$out"/*.pass "$out"/*.pass.* "$out"/*.result "$out"/*.body "$out"/*.memory
for pass in $(seq 1 "$passes"); do
	# Each pass starts at another harness, so no harness always runs first or last.
	n=${#jobs[@]}
	for i in $(seq 0 $((n - 1))); do
		j=(${jobs[$(((i + (pass - 1) * 5) % n))]})
		case ${j[0]} in
		overhead) run_overhead "${j[1]}" ;;
		naive) run_naive "${j[1]}" "${j[2]}" "${j[3]}" ;;
		resume) run_resume "${j[1]}" "${j[2]}" "${j[3]}" "${j[4]}" ;;
		esac
	done
done

# The memory probes: once per size and language, each in a process of its own.
memory() { # KEY COMMAND...: keeps the probe's "memory ..." line in KEY.memory
	local key=$1 res
	shift
	res=$("$@" | grep -o 'memory file=[0-9]* open_kib=-*[0-9]* body_kib=-*[0-9]*' | tail -n 1) || true
	[ -n "$res" ] || { echo "bindings.sh: $key printed no memory line (it failed, see above)" >&2; exit 1; }
	echo "$res" >"$out/$key.memory"
	echo "$key: $res"
}
for n in $resume_sizes; do
	memory "memory-go-$n" env LLMSESSION_BENCH_DIR="$root/$out/resume-$n" "$out/bindings_go.test" -test.run '^TestResumeMemory$' -test.count 1
	memory "memory-node-$n" node --expose-gc bindings/node/bench/resume.js memory "$out/resume-$n"
	memory "memory-python-$n" "$PYTHON" benches/python/resume.py memory "$lib/libllmsession.so" "$out/resume-$n"
	memory "memory-rust-$n" "$rust_memory" "$n" "$out/memory-$n.jsonl"
	rm -f "$out/memory-$n.jsonl"
done

"$PYTHON" - "$out" "$passes" "$profile" "$mode" "$overhead" "$naive_sizes" "$resume_sizes" "$resume_logs" <<'EOF'
import filecmp, statistics, sys
out, passes, profile, mode, overhead, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5].split(), sys.argv[6].split()
resume_sizes, resume_logs = sys.argv[7].split(), sys.argv[8].split()
med = statistics.median
def fmt(ns):
    if ns >= 10_000_000:
        return f"{ns / 1e6:.0f} ms"
    if ns >= 1_000_000:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1000:.0f} µs" if ns >= 10_000 else f"{ns / 1000:.1f} µs"
def rows(path):
    return [[int(x) for x in l.split()] for l in open(path) if l.strip()]
def same_bytes(keys, what):
    results = {k: open(f"{out}/{k}.result").read().split() for k in keys}
    if len({tuple(r) for r in results.values()}) != 1:
        sys.exit(f"bindings.sh: {what}: the harnesses built different requests: {results!r}")
    if mode == "body":
        first = keys[0]
        for k in keys[1:]:
            if not filecmp.cmp(f"{out}/{first}.pass.body", f"{out}/{k}.pass.body", shallow=False):
                sys.exit(f"bindings.sh: {what}: {k} built another body than {first} ({out}/{k}.pass.body)")
    return results[keys[0]]
if profile != "release":
    print(f"\n(a smoke run: the Rust harness is the {profile} build, so the timings and ratios mean nothing)")

# Part 1: binding overhead.
res = same_bytes(overhead, "binding overhead") if overhead else None
labels = {
    "rust": "Rust `Agent::next_body`" if mode == "body" else "Rust `Agent::next_request`",
    "c": "C (direct `lls_` calls)",
    "cpp": "C++ `Agent::next_body`" if mode == "body" else "C++ `Agent::next_request`",
    "go": "Go `Agent.NextBodyView` (+ `Release`)" if mode == "body" else "Go `Agent.NextRequestView`",
    "gocopy": "Go `Agent.AppendNextBody` (copied, buffer reused)",
    "node": "Node `await agent.nextBody()` (+ `release()`)" if mode == "body" else "Node `await agent.nextRequest()`",
}
samples = {k: rows(f"{out}/{k}.samples") for k in overhead}
per_pass = {k: {p: rows(f"{out}/{k}.pass.{p}") for p in range(1, passes + 1)} for k in overhead}
if overhead:
    rn, rs = med([r[0] for r in samples["rust"]]), med([r[1] for r in samples["rust"]])
    print()
    print(f"Binding overhead ({mode} path): {res[0]}, {res[1]}; {len(samples['rust'])} samples per harness ({passes} passes)")
    print()
    print("| harness | next body | vs Rust | per-pass ratios | step (reply + result + body) | vs Rust |" if mode == "body"
          else "| harness | next request | vs Rust | per-pass ratios | step (exchange + request) | vs Rust |")
    print("|---|---|---|---|---|---|")
for k in overhead:
    nx, st = med([r[0] for r in samples[k]]), med([r[1] for r in samples[k]])
    pr = [med([r[0] for r in per_pass[k][p]]) / med([r[0] for r in per_pass["rust"][p]]) for p in range(1, passes + 1)]
    print(f"| {labels[k]} | {fmt(nx)} | **{nx / rn:.2f}×** | {min(pr):.2f}–{max(pr):.2f}× | {fmt(st)} | {st / rs:.2f}× |")

# Part 2: the naive host, medians of the per-step pairs.
if sizes:
    print()
    print("The naive host against llmsession, step by step on identical bytes (ratio: the median over steps of naive / llmsession;")
    print("min–max: of the per-pass medians of that ratio)")
    print()
    print("| messages | host | llmsession body | naive body | body ratio | min–max | llmsession step | naive step | step ratio | min–max |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    names = {"go": "Go `json.Marshal`", "node": "Node `JSON.stringify`", "python": "Python `json.dumps`"}
    body_sizes = []
    for n in sizes:
        keys = [f"naive-{h}-{n}" for h in ("go", "node", "python")]
        r = same_bytes(keys, f"naive host, {n} messages")
        for h, k in zip(("go", "node", "python"), keys):
            s = rows(f"{out}/{k}.samples")
            def ratio(rs, a, b):
                return med([x[b] / x[a] for x in rs])
            pn = [ratio(rows(f"{out}/{k}.pass.{p}"), 0, 1) for p in range(1, passes + 1)]
            ps = [ratio(rows(f"{out}/{k}.pass.{p}"), 2, 3) for p in range(1, passes + 1)]
            print(f"| {int(n):,} | {names[h]} | {fmt(med([x[0] for x in s]))} | {fmt(med([x[1] for x in s]))} | **{ratio(s, 0, 1):.1f}×** | "
                  f"{min(pn):.1f}–{max(pn):.1f}× | {fmt(med([x[2] for x in s]))} | {fmt(med([x[3] for x in s]))} | **{ratio(s, 2, 3):.1f}×** | "
                  f"{min(ps):.1f}–{max(ps):.1f}× |")
        body_sizes.append(f"{int(n):,} messages: {int(r[0].split('=')[1]):,} bytes")
    print()
    print("Bodies compared (the last of the first timed round): " + "; ".join(body_sizes))

# Part 3: resume and memory.
if resume_sizes:
    print()
    print("Resume against the naive host's bare parse of the same file (llmsession: open, chain check included, and the next body;")
    print("naive: read the file and decode every line; ratio: the median over iterations of naive / llmsession; min–max: of the")
    print("per-pass medians; target ≥ 1×). Log: without checkpoints (the open reads and checks it whole), or with a checkpoint")
    print("every 1,000 events (the open restores the state from the last one)")
    print()
    print("| events | log | checkpoints | host | llmsession resume | naive parse | ratio | min–max |")
    print("|---|---|---|---|---|---|---|---|")
    names = {"go": "Go `json.Unmarshal` per line", "node": "Node `JSON.parse` per line", "python": "Python `json.loads` per line"}
    import os
    for n in resume_sizes:
        for kind in resume_logs:
            suffix = "-cp" if kind == "checkpoints" else ""
            keys = [f"resume-{h}-{n}{suffix}" for h in ("go", "node", "python")]
            same_results = {k: open(f"{out}/{k}.result").read().split() for k in keys}
            if len({tuple(r) for r in same_results.values()}) != 1:
                sys.exit(f"bindings.sh: resume, {n} events: the harnesses built different bodies: {same_results!r}")
            size = os.path.getsize(f"{out}/resume-{n}{suffix}/session.jsonl")
            for h, k in zip(("go", "node", "python"), keys):
                s = rows(f"{out}/{k}.samples")
                pr = [med([x[1] / x[0] for x in rows(f"{out}/{k}.pass.{p}")]) for p in range(1, passes + 1)]
                print(f"| {int(n):,} | {size / 1e6:.1f} MB | {'every 1,000 events' if suffix else 'none'} | {names[h]} | "
                      f"{fmt(med([x[0] for x in s]))} | {fmt(med([x[1] for x in s]))} | "
                      f"**{med([x[1] / x[0] for x in s]):.2f}×** | {min(pr):.2f}–{max(pr):.2f}× |")
    print()
    print("Memory: growth of the resident size (VmRSS; Node rss) over the log's size, in a process of its own (targets: open ≤ 2×,")
    print("with one body built ≤ 3×)")
    print()
    print("| events | log | language | open | factor | with one body | factor |")
    print("|---|---|---|---|---|---|---|")
    for n in resume_sizes:
        for h in ("rust", "go", "node", "python"):
            f = dict(x.split("=") for x in open(f"{out}/memory-{h}-{n}.memory").read().split()[1:])
            size, o, b = int(f["file"]), int(f["open_kib"]), int(f["body_kib"])
            print(f"| {int(n):,} | {size / 1e6:.1f} MB | {h.capitalize()} | {o / 1024:.1f} MiB | "
                  f"**{o * 1024 / size:.2f}×** | {b / 1024:.1f} MiB | **{b * 1024 / size:.2f}×** |")
EOF
