#!/usr/bin/env python3
"""Prepares other people's transcripts for `llmsession simulate` (benches/clock.sh, EXTRA_TRANSCRIPTS).

    prepare.py SRC_DIR OUT_DIR

Reads every *.jsonl under SRC_DIR (names starting with a dot included), tells a Claude Code
transcript (lines with a sessionId) from a Codex rollout (session_meta / event_msg /
response_item lines), and copies it to OUT_DIR/claude-code/ or OUT_DIR/codex/ as NAME (the path
under SRC_DIR with / replaced by __). Public transcripts are sometimes redacted by hand after the
fact, which can leave lines that are not JSON (for instance a number replaced by a placeholder):
such lines are dropped and counted, and a file where a dropped line held a billed request (an
assistant line with usage, a token_count event) is left out whole, since its timeline would be
wrong. `simulate` itself refuses a line that is not JSON (docs/simulate.md); this cleaning is the
benchmark's, not the library's. Prints one line per file left out and a summary on stderr.
"""
import json
import os
import sys


def kind_of(obj):
    if "sessionId" in obj:
        return "claude-code"
    if obj.get("type") in ("session_meta", "event_msg", "response_item", "turn_context"):
        return "codex"
    return None


def billed(line):
    return ('"type":"assistant"' in line and '"usage"' in line) or '"token_count"' in line


def main(src, out):
    files = []
    for root, _, names in os.walk(src):
        files += [os.path.join(root, n) for n in names if n.endswith(".jsonl")]
    kept = {"claude-code": 0, "codex": 0}
    dropped_lines = 0
    left_out = 0
    for path in sorted(files):
        lines, bad, bad_billed, kind = [], 0, 0, None
        with open(path, encoding="utf-8", errors="strict") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    bad += 1
                    bad_billed += billed(line)
                    continue
                kind = kind or (kind_of(obj) if isinstance(obj, dict) else None)
                lines.append(line if line.endswith("\n") else line + "\n")
        name = os.path.relpath(path, src).replace(os.sep, "__")
        if kind is None or bad_billed:
            left_out += 1
            why = "neither a Claude Code transcript nor a Codex rollout" if kind is None else f"{bad_billed} billed line(s) are not JSON"
            print(f"prepare: left out {name}: {why}", file=sys.stderr)
            continue
        os.makedirs(os.path.join(out, kind), exist_ok=True)
        with open(os.path.join(out, kind, name), "w", encoding="utf-8") as f:
            f.writelines(lines)
        kept[kind] += 1
        dropped_lines += bad
    print(
        f"prepare: {kept['claude-code']} Claude Code transcripts, {kept['codex']} Codex rollouts; "
        f"{dropped_lines} line(s) that are not JSON dropped; {left_out} file(s) left out",
        file=sys.stderr,
    )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: prepare.py SRC_DIR OUT_DIR")
    main(sys.argv[1], sys.argv[2])
