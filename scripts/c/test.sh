#!/usr/bin/env bash
# The C test programs (tests/c/<name>.c, each ending with "N passed, N failed"), built and run
# against the staged library. The compiler flags come from the Makefile, in the environment:
#   CC STAGE C_TEST_DIR C_TEST_CFLAGS C_SANITIZE NATIVE_STATIC_LIBS VALGRIND_FLAGS
#
#   scripts/c/test.sh full NAME...   `make test-c`: against the shared and the static library,
#                                    each under ASan+UBSan (the C side is instrumented, the Rust
#                                    library is not), then the shared one under valgrind (no ASan)
#   scripts/c/test.sh asan NAME...   `make check`, `make test-c-one`: the shared library under
#                                    ASan+UBSan only
set -euo pipefail
mode=$1; shift
case "$mode" in full | asan) ;; *) echo "c/test.sh: the mode is full or asan (got '$mode')"; exit 1 ;; esac
for v in STAGE C_TEST_DIR C_TEST_CFLAGS C_SANITIZE NATIVE_STATIC_LIBS VALGRIND_FLAGS; do
    [ -n "${!v:-}" ] || { echo "c/test.sh: $v is not set (run it through make)"; exit 1; }
done
cc=${CC:-cc}
mkdir -p "$C_TEST_DIR"
asan_env=(ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1)
# shellcheck disable=SC2086 # the flag variables are lists of words
for t in "$@"; do
    out=$C_TEST_DIR/$t
    echo "== $t: build"
    $cc $C_TEST_CFLAGS $C_SANITIZE "tests/c/$t.c" -L"$STAGE" -lllmsession -o "${out}_shared_asan"
    if [ "$mode" = full ]; then
        $cc $C_TEST_CFLAGS $C_SANITIZE "tests/c/$t.c" "$STAGE/libllmsession.a" $NATIVE_STATIC_LIBS -o "${out}_static_asan"
        $cc $C_TEST_CFLAGS "tests/c/$t.c" -L"$STAGE" -lllmsession -o "${out}_shared"
    fi
    echo "== $t: shared library, ASan+UBSan"
    env LD_LIBRARY_PATH="$STAGE" "${asan_env[@]}" "${out}_shared_asan"
    if [ "$mode" = full ]; then
        echo "== $t: static library, ASan+UBSan"
        env "${asan_env[@]}" "${out}_static_asan"
        echo "== $t: shared library, valgrind"
        LD_LIBRARY_PATH="$STAGE" valgrind -q $VALGRIND_FLAGS "${out}_shared"
    fi
done
