#!/usr/bin/env bash
# The inspector CLI checks of `make e2e` (docs/demo.md), on the session log of a demo run:
#
#   LLMSESSION_CLI=target/release/llmsession scripts/demo/cli-checks.sh LOG REPORT OUTDIR
#
# verify/stats/show/headers/explain must succeed on LOG (and stats --json and explain --json agree
# with the host's REPORT); hand-damaged copies written to OUTDIR must fail verify naming the line
# (and, rewritten with recomputed digests, the step); bad files must fail
# with a clear message and the exit status docs/cli.md gives them (1 another failure, 2 a usage
# error, 3 a bad log, 4 a store that cannot be read). Exit 0 when every check passed.
set -euo pipefail

CLI="${LLMSESSION_CLI:?set LLMSESSION_CLI to the built llmsession inspector}"
LOG="${1:?usage: $0 LOG REPORT OUTDIR}"
REPORT="${2:?usage: $0 LOG REPORT OUTDIR}"
OUT="${3:?usage: $0 LOG REPORT OUTDIR}"
mkdir -p "$OUT"

fails=0
pass() { echo "ok    $*"; }
fail() {
    echo "FAIL  $*"
    fails=$((fails + 1))
}

# expect_ok NAME CMD...: the command succeeds.
expect_ok() {
    local name="$1" out rc=0
    shift
    out="$("$@" 2>&1)" || rc=$?
    if [[ "$rc" == 0 ]]; then
        pass "$name"
    else
        fail "$name: exit $rc"
        printf '%s\n' "$out" | tail -n 20
    fi
}

# expect_fail NAME CODE PATTERN CMD...: the command exits with CODE and its output matches
# PATTERN (ERE).
expect_fail() {
    local name="$1" code="$2" pattern="$3" out rc=0
    shift 3
    out="$("$@" 2>&1)" || rc=$?
    if [[ "$rc" != "$code" ]]; then
        fail "$name: exit $rc, expected $code: $(head -n 3 <<<"$out")"
    elif ! grep -Eq -- "$pattern" <<<"$out"; then
        fail "$name: the message does not match /$pattern/: $out"
    else
        pass "$name (exit $rc): $(head -n 1 <<<"$out")"
    fi
}

expect_ok "verify on the log" "$CLI" verify "$LOG"
expect_ok "stats on the log" "$CLI" stats "$LOG"
expect_ok "stats --json on the log" "$CLI" stats "$LOG" --json
expect_ok "stats --json before the log" "$CLI" stats --json "$LOG"
expect_ok "verify --json on the log" "$CLI" verify "$LOG" --json
expect_ok "show --step=2 --json" "$CLI" show "$LOG" --step=2 --json
expect_ok "headers --json on the log" "$CLI" headers "$LOG" --json
expect_ok "sessions --json on the log" "$CLI" sessions "$LOG" --json
expect_ok "--help" "$CLI" --help
expect_ok "--version" "$CLI" --version
expect_ok "show --step 2 --render openai" "$CLI" show "$LOG" --step 2 --render openai
expect_ok "show --step 2 --render anthropic" "$CLI" show "$LOG" --step 2 --render anthropic
expect_ok "show --step 2 --render openai-responses" "$CLI" show "$LOG" --step 2 --render openai-responses
expect_ok "show --step 2 --render gemini" "$CLI" show "$LOG" --step 2 --render gemini
expect_ok "show --step 2 (the envelope)" "$CLI" show "$LOG" --step 2
expect_ok "headers on the log" "$CLI" headers "$LOG"
expect_ok "explain on the log" "$CLI" explain "$LOG"
expect_ok "explain --step c1 (the summarisation request)" "$CLI" explain "$LOG" --step c1
expect_fail "explain --step 9999" 1 "there is no request 9999" "$CLI" explain "$LOG" --step 9999

# explain --json agrees with the host's report (the host attached Session.Explain's figures to
# its rows): the same expected cacheable tokens, and the same provider figures as the server's.
if python3 - "$LOG" "$REPORT" "$CLI" <<'PY'; then
import json, subprocess, sys
log, report, cli = sys.argv[1:4]
ex = json.loads(subprocess.run([cli, "explain", log, "--json"], check=True, capture_output=True, text=True).stdout)
rows = [r for r in json.load(open(report))["requests"] if r["kind"] != "peer-summary"]
got = [(r["id"], r["expectedCachedTokens"], r["promptTokens"], r["cachedTokens"]) for r in ex["requests"]]
want = [(r["explain"]["id"], r["explain"]["expectedCachedTokens"], r["promptTokens"], r["cachedTokens"]) for r in rows]
if got != want:
    print("explain --json:", got, "\nreport:        ", want)
    sys.exit(1)
PY
    pass "explain --json matches the host's report and the server's figures"
else
    fail "explain --json differs from the host's report"
fi

# stats --json agrees with the host's report: the same prompt and cached tokens per request.
if python3 - "$LOG" "$REPORT" "$CLI" <<'PY'; then
import json, subprocess, sys
log, report, cli = sys.argv[1:4]
stats = json.loads(subprocess.run([cli, "stats", log, "--json"], check=True, capture_output=True, text=True).stdout)
rows = [r for r in json.load(open(report))["requests"] if r["kind"] == "conversation"]
got = [(r["promptTokens"], r["cachedTokens"]) for r in stats["requests"]]
want = [(r["promptTokens"], r["cachedTokens"]) for r in rows]
if got != want:
    print("stats --json:", got, "\nreport:      ", want)
    sys.exit(1)
streamed = sum(1 for r in rows if r.get("streamed"))
print(f"  {len(rows)} conversation requests, {streamed} of them streamed")
PY
    pass "stats --json matches the host's report (streamed turns included)"
else
    fail "stats --json differs from the host's report"
fi

# Hand-damaged copies. Only the damaged line is rewritten; every other line keeps its bytes.
# Edited by hand, the line no longer matches its chained digest: verify names the line. The same
# edit with every digest recomputed (a deliberate rewrite) keeps the chain whole, and then the
# first request that no longer rebuilds is named: each .expect file holds "line N" and
# "turn T step S".
python3 - "$LOG" "$OUT" <<'PY'
import hashlib, json, sys
log, out = sys.argv[1], sys.argv[2]
lines = open(log, encoding="utf-8").read().splitlines()
events = [json.loads(l) for l in lines]
FIELD = ',"chain":"'

def body(line):
    # The record without its chain field: the bytes its digest covers.
    assert line[-76:-66] == FIELD, line[-80:]
    return line[:-76] + "}"

def rechain(records):
    prev = hashlib.sha256(records[0].encode()).digest()
    out = [records[0]]
    for r in records[1:]:
        b = r if FIELD not in r[-76:] else body(r)
        prev = hashlib.sha256(prev + b.encode()).digest()
        out.append(b[:-1] + FIELD + prev.hex() + '"}')
    return out

def first_step_after(i):
    e = next(e for e in events[i + 1:] if e.get("type") == "step/start")
    return f"turn {e['data']['turn']} step {e['data']['step']}"

def write(name, i, event, step):
    # An edit by hand keeps the record's (now stale) chain field at its end.
    old = event.pop("chain")
    changed = list(lines)
    changed[i] = json.dumps(event, separators=(",", ":"), ensure_ascii=False)[:-1] + FIELD + old + '"}'

    for suffix, records, expect in (("", changed, f"line {i + 1}"), ("-rechained", rechain(changed), step)):
        with open(f"{out}/{name}{suffix}.jsonl", "w", encoding="utf-8") as f:
            f.write("\n".join(records) + "\n")
        with open(f"{out}/{name}{suffix}.expect", "w") as f:
            f.write(expect + "\n")

# 1. the first tool result's text altered: the next request, which carried it, differs
i = next(i for i, e in enumerate(events) if e.get("type") == "tool/result")
ev = json.loads(lines[i])
text = ev["data"]["content"][0]["text"]
ev["data"]["content"][0]["text"] = text.replace("Fahrenheit", "Farenheit", 1) if "Fahrenheit" in text else text + " "
write("damaged-content", i, ev, first_step_after(i))

# 2. a recorded request digest changed: the step/start of the first request after the first
#    compaction (the last request when there was none)
starts = [i for i, e in enumerate(events) if e.get("type") == "step/start"]
ends = [i for i, e in enumerate(events) if e.get("type") == "compaction/end"]
i = next((j for j in starts if ends and j > ends[0]), starts[-1])
ev = json.loads(lines[i])
d = ev["data"]["digest"]
ev["data"]["digest"] = d[:-6] + ("000000" if d[-6:] != "000000" else "111111")
write("damaged-digest", i, ev, f"turn {ev['data']['turn']} step {ev['data']['step']}")

# 3. the last line cut in half (a torn write), and 4. not a session log at all
with open(f"{out}/damaged-torn.jsonl", "w", encoding="utf-8") as f:
    f.write("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])
with open(f"{out}/not-a-log.jsonl", "w") as f:
    f.write("this is not a session log\n")
PY

for d in content digest; do
    want="$(cat "$OUT/damaged-$d.expect")"
    expect_fail "verify on a copy with a damaged $d names $want" 3 \
        "verify failed: .*damaged-$d.jsonl: .*$want: the chained digest does not match" \
        "$CLI" verify "$OUT/damaged-$d.jsonl"
    want="$(cat "$OUT/damaged-$d-rechained.expect")"
    expect_fail "verify on a rewritten copy (digests recomputed) with a damaged $d names $want" 3 \
        "verify failed: $want \(seq [0-9]+\): the request rebuilt from the log differs" \
        "$CLI" verify "$OUT/damaged-$d-rechained.jsonl"
done
expect_ok "verify on a copy with a torn last line (a torn tail is dropped on load)" "$CLI" verify "$OUT/damaged-torn.jsonl"
expect_fail "verify on a file that is not a session log" 3 "not-a-log.jsonl: line 1: malformed JSON" "$CLI" verify "$OUT/not-a-log.jsonl"
expect_fail "stats on a file that is not a session log" 3 "not-a-log.jsonl: line 1: malformed JSON" "$CLI" stats "$OUT/not-a-log.jsonl"
expect_fail "verify on a missing file" 4 "no-such-file.jsonl: cannot open a session log: No such file" "$CLI" verify "$OUT/no-such-file.jsonl"
expect_fail "show of a request the log does not have" 1 "there is no request 9999" "$CLI" show "$LOG" --step 9999
expect_fail "an unknown command" 2 "unrecognized subcommand 'frobnicate'" "$CLI" frobnicate "$LOG"
expect_fail "an unknown option" 2 "unexpected argument '--frobnicate'" "$CLI" stats "$LOG" --frobnicate

if ((fails > 0)); then
    echo "cli-checks: $fails check(s) failed" >&2
    exit 1
fi
echo "cli-checks: all passed"
