#!/usr/bin/env bash
# Checks that ELF programs and shared libraries run on glibc MAX (2.17 for the release):
#   scripts/dist/glibc-check.sh MAX FILE...
#   (ALLOW_NEEDED: more sonames a FILE may need, such as libllmsession's for a program linked
#   with it; ALLOW_UNVERSIONED: a grep -E pattern of the undefined symbols those define)
# For each FILE, from `objdump -p` and `objdump -T`:
#   - every glibc version it requires (the "Version References" the dynamic loader checks when
#     it loads the file) is GLIBC_2.N with N <= MAX's, and no GLIBC_PRIVATE; the symbols that
#     need a newer one are named;
#   - no strong undefined symbol is left without a version (a symbol the link did not find in
#     the glibc it linked against would fail at run time, or at load with BIND_NOW); weak ones
#     are fine: the code checks them for null (Rust's std does so for what glibc gained after
#     2.17, such as __cxa_thread_atexit_impl, getrandom, statx);
#   - it needs no shared library but glibc's, libgcc_s and those in ALLOW_NEEDED (the libraries
#     manylinux2014 lets a wheel assume).
# Prints one line per file: the newest glibc version it needs, its weak unversioned symbols and
# what it needs; exits 1 when any file fails, with the reasons.
set -euo pipefail
max=$1
shift
[[ $max =~ ^2\.[0-9]+$ ]] || { echo "glibc-check: '$max' is not a glibc version such as 2.17" >&2; exit 2; }
max_minor=${max#2.}
allowed=" libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libutil.so.1 libgcc_s.so.1 ld-linux-x86-64.so.2 ${ALLOW_NEEDED:-} "
status=0
for f in "$@"; do
    name=${f#"${GLIBC_CHECK_STRIP:-}"}
    bad=()
    [ -f "$f" ] || { echo "glibc-check: $f is missing" >&2; status=1; continue; }
    head=$(od -An -c -N4 "$f" | tr -d ' ')
    [ "$head" = '177ELF' ] || { echo "glibc-check: $name is not an ELF file" >&2; status=1; continue; }
    dynsyms=$(objdump -T "$f")
    privs=$(objdump -p "$f")
    # The versions the loader checks: "required from libc.so.6:" then one line per version.
    versions=$(awk '/^Version References:/ { on = 1; next } on && /^  required from / { next }
        on && NF == 0 { on = 0 } on && NF >= 4 { print $NF }' <<<"$privs" | LC_ALL=C sort -u)
    newest=2.0 newest_key=0
    while IFS= read -r v; do
        case "$v" in
        GLIBC_PRIVATE) bad+=("needs GLIBC_PRIVATE (glibc's internal symbols: $(grep -F '(GLIBC_PRIVATE)' <<<"$dynsyms" | awk '{ print $NF }' | tr '\n' ' '))") ;;
        GLIBC_2.*)
            minor=$(cut -d. -f2 <<<"${v#GLIBC_}")
            patch=$(cut -d. -f3 <<<"${v#GLIBC_}")
            key=$((minor * 100 + ${patch:-0}))
            if [ "$key" -gt "$newest_key" ]; then newest=${v#GLIBC_} newest_key=$key; fi
            if [ "$minor" -gt "$max_minor" ]; then
                syms=$(grep -F "($v)" <<<"$dynsyms" | awk '{ print $NF }' | LC_ALL=C sort -u | tr '\n' ' ')
                [ -n "$syms" ] || syms=$(grep -F " $v " <<<"$dynsyms" | awk '{ print $NF }' | LC_ALL=C sort -u | tr '\n' ' ')
                bad+=("needs $v (newer than $max): ${syms% }")
            fi
            ;;
        esac
    done <<<"$versions"
    # Undefined symbols without a version: objdump -T prints the flags in a fixed-width column
    # after the address ("w" second for weak), then *UND*, the size, the version if any, the name.
    unversioned=$(awk '$0 ~ /\*UND\*/ {
            flags = substr($0, 18, 7); rest = $0; sub(/.*\*UND\*[ \t]+[0-9a-f]+[ \t]+/, "", rest)
            n = split(rest, w, /[ \t]+/)
            if (n == 1 || w[1] == "Base") print (substr(flags, 2, 1) == "w" ? "weak" : "strong"), w[n]
        }' <<<"$dynsyms")
    strong=$(awk '$1 == "strong" { print $2 }' <<<"$unversioned" | { grep -Ev "${ALLOW_UNVERSIONED:-^$}" || true; } |
        LC_ALL=C sort -u | tr '\n' ' ')
    weak=$(awk '$1 == "weak" { print $2 }' <<<"$unversioned" | LC_ALL=C sort -u | tr '\n' ' ')
    [ -z "$strong" ] || bad+=("strong undefined symbols with no version (not found in glibc $max at link time): ${strong% }")
    needed=$(awk '$1 == "NEEDED" { print $2 }' <<<"$privs" | tr '\n' ' ')
    for n in $needed; do
        case "$allowed" in *" $n "*) ;; *) bad+=("needs $n, which is not part of glibc or libgcc_s") ;; esac
    done
    echo "glibc-check: $name: newest GLIBC_$newest (limit GLIBC_$max); weak unversioned: ${weak:-none}; needs: ${needed:-nothing}"
    if [ ${#bad[@]} -gt 0 ]; then
        for b in "${bad[@]}"; do echo "glibc-check: $name: FAIL: $b" >&2; done
        status=1
    fi
done
exit $status
