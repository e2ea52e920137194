#!/usr/bin/env bash
# `make go-pc`: a pkg-config file for the in-tree build (prefix = this checkout, the staged
# libraries in STAGE), which cgo's `pkg-config: llmsession` finds through PKG_CONFIG_PATH.
#   scripts/go/pc.sh OUT_DIR ROOT STAGE VERSION        (ROOT: the checkout, absolute)
set -euo pipefail
out=$1 root=$2 stage=$3 version=$4
mkdir -p "$out"
cat >"$out/llmsession.pc" <<PC
prefix=$root
libdir=\${prefix}/$stage
includedir=\${prefix}/include

Name: llmsession
Description: llmsession, in-tree build (for the Go binding's tests)
Version: $version
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lllmsession
Cflags: -I\${includedir}
PC
