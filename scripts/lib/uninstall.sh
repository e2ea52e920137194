#!/usr/bin/env bash
# `make uninstall`: removes what `make install` put under DESTDIR, as its manifest lists it
# (MANIFEST, from the Makefile, in the environment): every installed file and link, then each
# directory the install created, when it is empty. Nothing else is touched: a file the manifest
# does not name stays, and so does a directory that holds one.
set -euo pipefail
: "${MANIFEST:?run it through make uninstall}"
DESTDIR=${DESTDIR:-}
manifest=$DESTDIR$MANIFEST
[ -f "$manifest" ] || { echo "uninstall: no install manifest at $manifest; nothing removed"; exit 1; }
dirs=()
while read -r kind path; do
    case "$kind" in
    f) if [ -e "$DESTDIR$path" ] || [ -L "$DESTDIR$path" ]; then echo "rm $DESTDIR$path"; rm -f "$DESTDIR$path"; fi ;;
    d) dirs+=("$path") ;;
    '#' | '') ;;
    *) echo "uninstall: $manifest: unexpected line '$kind $path'"; exit 1 ;;
    esac
done <"$manifest"
# The manifest is itself listed, so it is gone by now.
for d in "${dirs[@]}"; do
    if [ -d "$DESTDIR$d" ] && [ -z "$(ls -A "$DESTDIR$d")" ]; then echo "rmdir $DESTDIR$d"; rmdir "$DESTDIR$d"; fi
done
