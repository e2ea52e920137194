#!/usr/bin/env bash
# Keeps the documentation self-contained and its links true. Fails when:
#   1. a tracked file (docs, READMEs, code comments, headers, scripts, scenario files) points
#      outside the repository: a `../shared` or `/work/shared` path, `SPEC.md`, `ABI.md`, or a
#      `SPEC §N` citation (the contract lives in docs/contract.md; cite `docs/contract.md §N`);
#   2. a relative Markdown link `[text](path)` or `[text](path#anchor)` in a tracked .md file
#      names a file or directory that does not exist, or an anchor (`#anchor`, `path.md#anchor`)
#      that no heading of the target page produces. http(s) and mailto links are not followed.
# Run by `make check-docs`. Needs git and python3 only (no build).
set -euo pipefail
cd "$(dirname "$0")/.."

python3 - <<'PY'
import os, re, subprocess, sys

self_path = "scripts/check-docs.sh"
files = [f for f in subprocess.run(["git", "ls-files", "-z"], check=True, capture_output=True).stdout.decode().split("\0") if f]
bad = 0

def report(path, line, what):
    global bad
    bad += 1
    print(f"check-docs: {path}:{line}: {what}")

def text_of(path):
    try:
        data = open(path, "rb").read()
    except (FileNotFoundError, IsADirectoryError):
        return None  # deleted in the work tree, or a submodule
    if b"\0" in data[:8192]:
        return None  # binary
    return data.decode("utf-8", "replace")

# 1. Pointers outside the repository.
outside = re.compile(r"\.\./shared\b|/work/shared\b|\bSPEC\.md\b|\bABI\.md\b|\bSPEC\s*§")
for f in files:
    if f == self_path:
        continue
    t = text_of(f)
    if t is None:
        continue
    for n, line in enumerate(t.splitlines(), 1):
        m = outside.search(line)
        if m:
            report(f, n, f"points outside the repository ({m.group(0)!r}): cite docs/contract.md instead")

# 2. Relative links in Markdown files.
def slug(heading):
    # GitHub's anchor for a heading: lower case, markup and punctuation other than '-' and '_'
    # dropped, spaces turned into '-'.
    h = re.sub(r"`([^`]*)`", r"\1", heading.strip())
    h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h)
    h = h.lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")

anchor_cache = {}
def anchors(path):
    if path not in anchor_cache:
        seen = {}
        out = set()
        fence = False
        for line in open(path, encoding="utf-8").read().splitlines():
            if line.lstrip().startswith("```"):
                fence = not fence
                continue
            m = None if fence else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                s = slug(m.group(1))
                k = seen.get(s, 0)
                seen[s] = k + 1
                out.add(s if k == 0 else f"{s}-{k}")
        for m in re.finditer(r"<a\s+(?:name|id)=\"([^\"]+)\"", open(path, encoding="utf-8").read()):
            out.add(m.group(1))
        anchor_cache[path] = out
    return anchor_cache[path]

link = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
for f in files:
    if not f.endswith(".md") or f.startswith(("target/", "node_modules/")) or "/node_modules/" in f:
        continue
    t = text_of(f)
    if t is None:
        continue
    fence = False
    for n, line in enumerate(t.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        # Inline code is not a link.
        plain = re.sub(r"`[^`]*`", "", line)
        for m in link.finditer(plain):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # http:, https:, mailto:, ...
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            if path and not os.path.exists(dest):
                report(f, n, f"link to {target!r}: {dest} does not exist")
                continue
            if anchor and dest.endswith(".md") and os.path.isfile(dest) and anchor not in anchors(dest):
                report(f, n, f"link to {target!r}: {dest} has no heading with the anchor #{anchor}")

# 3. The licence files a package carries (bindings/*/LICENSE-*) are the root's, byte for byte.
for f in files:
    name = os.path.basename(f)
    if name.startswith("LICENSE-") and "/" in f and os.path.isfile(name):
        if open(f, "rb").read() != open(name, "rb").read():
            report(f, 1, f"differs from the root's {name}")

if bad:
    sys.exit(f"check-docs: {bad} problem(s)")
print(f"check-docs: {len(files)} tracked files checked, no pointer outside the repository, every relative link resolves")
PY
