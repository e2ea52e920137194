#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests (docs/storage-postgres.md, "Tests").
#
#   scripts/pg/server.sh start DIR       create the cluster in DIR (once) and start it; prints
#                                        the URL (also written to DIR/url)
#   scripts/pg/server.sh stop DIR        stop it (fast shutdown) and wait until it is gone
#   scripts/pg/server.sh restart DIR     stop, then start on the same port
#   scripts/pg/server.sh crash DIR       stop without a shutdown checkpoint (immediate mode: the
#                                        next start recovers from the WAL, as after a crash)
#   scripts/pg/server.sh run DIR CMD...  start, run CMD with LLMSESSION_PG_URL (and the others
#                                        below) set, stop on exit (a trap), remove DIR, and exit
#                                        with CMD's status
#
# PostgreSQL is installed from the system package manager when no server binaries are found
# (Debian/Ubuntu: apt-get install postgresql; sudo when not root). The cluster listens on
# 127.0.0.1 on a free port and on a unix socket in DIR/run (or a short directory under /tmp when
# DIR's path is too long for a socket). Password authentication (SCRAM) over TCP, trust over the
# socket. initdb refuses to run as root, so as root the cluster runs as an unprivileged user
# ($LLMSESSION_PG_OS_USER, default `nobody`), which owns DIR (or, when it cannot reach DIR, a
# directory under /tmp that DIR/home names).
#
# `run` exports, for CMD:
#   LLMSESSION_PG_URL         postgres://llmsession:PASSWORD@127.0.0.1:PORT/llmsession
#   LLMSESSION_PG_SOCKET_URL  the same database over the unix socket (no password)
#   LLMSESSION_PG_CTL         this script, and LLMSESSION_PG_DIR: DIR; `bash $LLMSESSION_PG_CTL
#                             stop|start "$LLMSESSION_PG_DIR"` stops and restarts the server
#                             (the tests' server-restart case)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SELF="$HERE/server.sh"
DB_USER=llmsession
DB_NAME=llmsession

log() { printf '[pg server] %s\n' "$*" >&2; }
die() { printf '[pg server] ERROR: %s\n' "$*" >&2; exit 1; }

as_root() {
    if [[ "$(id -u)" == 0 ]]; then "$@"; else sudo "$@"; fi
}

# The directory holding initdb, pg_ctl and postgres (the newest installed version).
bin_dir() {
    local d
    if [[ -n "${LLMSESSION_PG_BIN:-}" ]]; then echo "$LLMSESSION_PG_BIN"; return 0; fi
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [[ -x "$d/initdb" && -x "$d/pg_ctl" && -x "$d/postgres" ]] && { echo "$d"; return 0; }
    done
    if command -v pg_config >/dev/null 2>&1; then
        d="$(pg_config --bindir)"
        [[ -x "$d/initdb" && -x "$d/pg_ctl" ]] && { echo "$d"; return 0; }
    fi
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(readlink -f "$(command -v initdb)")"
    fi
}

ensure_installed() {
    local d
    d="$(bin_dir)"
    if [[ -z "$d" ]]; then
        command -v apt-get >/dev/null 2>&1 ||
            die "no PostgreSQL server binaries found and no apt-get to install them: install PostgreSQL (initdb, pg_ctl) or set LLMSESSION_PG_BIN"
        log "installing PostgreSQL (apt-get install postgresql)"
        as_root apt-get install -y -qq postgresql >/dev/null ||
            { as_root apt-get update -qq && as_root apt-get install -y -qq postgresql >/dev/null; } ||
            die "apt-get install postgresql failed"
        d="$(bin_dir)"
        [[ -n "$d" ]] || die "postgresql is installed but initdb/pg_ctl were not found under /usr/lib/postgresql/*/bin"
    fi
    echo "$d"
}

# Runs a command as the cluster's owner: ourselves, or (as root) the unprivileged user.
OS_USER="${LLMSESSION_PG_OS_USER:-nobody}"
as_owner() {
    if [[ "$(id -u)" == 0 ]]; then
        runuser -u "$OS_USER" -- "$@"
    else
        "$@"
    fi
}

free_port() {
    local p
    for _ in $(seq 1 50); do
        p=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
    done
    die "no free port found"
}

# Where the cluster's own files live (data, server log, socket): DIR, or, as root when the
# unprivileged user cannot reach DIR (a checkout under /root), a directory under /tmp that
# DIR/home names.
home_of() {
    local dir="$1"
    if [[ -f "$dir/home" ]]; then cat "$dir/home"; else echo "$dir"; fi
}

# The socket directory: HOME/run, unless the socket path would be too long for sun_path.
socket_dir() {
    local dir="$1"
    if [[ -f "$dir/socketdir" ]]; then cat "$dir/socketdir"; return 0; fi
    local s
    s="$(home_of "$dir")/run"
    if (( ${#s} + 20 > 100 )); then
        s="$(mktemp -d /tmp/llmsession-pg.XXXXXX)"
    else
        mkdir -p "$s"
    fi
    [[ "$(id -u)" == 0 ]] && chown "$OS_USER" "$s"
    echo "$s" >"$dir/socketdir"
    echo "$s"
}

init_cluster() {
    local dir="$1" bin="$2" home
    [[ -f "$(home_of "$dir")/data/PG_VERSION" ]] && return 0
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    home="$dir"
    if [[ "$(id -u)" == 0 ]]; then
        id "$OS_USER" >/dev/null 2>&1 || die "user $OS_USER does not exist (set LLMSESSION_PG_OS_USER to an unprivileged user)"
        chown "$OS_USER" "$dir"
        if ! as_owner test -w "$dir"; then
            home="$(mktemp -d /tmp/llmsession-pg.XXXXXX)"
            chown "$OS_USER" "$home"
            echo "$home" >"$dir/home"
            log "$OS_USER cannot reach $dir (initdb refuses to run as root, so the cluster runs as $OS_USER): the cluster lives in $home"
        fi
    fi
    local pw
    pw="$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    printf '%s\n' "$pw" >"$dir/password"
    chmod 600 "$dir/password"
    # initdb reads the password from a file the cluster's owner can read; it is removed after.
    printf '%s\n' "$pw" >"$home/pwfile"
    chmod 600 "$home/pwfile"
    [[ "$(id -u)" == 0 ]] && chown "$OS_USER" "$home/pwfile"
    as_owner "$bin/initdb" -D "$home/data" -U "$DB_USER" --pwfile="$home/pwfile" --auth-local=trust \
        --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1 ||
        { rm -f "$home/pwfile"; tail -n 20 "$dir/initdb.log" >&2; die "initdb failed (log: $dir/initdb.log)"; }
    rm -f "$home/pwfile"
    free_port >"$dir/port"
}

url_of() {
    local dir="$1"
    echo "postgres://$DB_USER:$(cat "$dir/password")@127.0.0.1:$(cat "$dir/port")/$DB_NAME"
}

socket_url_of() {
    local dir="$1" s
    s="$(cat "$dir/socketdir")"
    # The socket directory, percent-encoded as the URL's host.
    echo "postgresql://$DB_USER@${s//\//%2F}:$(cat "$dir/port")/$DB_NAME"
}

start() {
    local dir="$1" bin sock home tries=0
    bin="$(ensure_installed)"
    init_cluster "$dir" "$bin"
    dir="$(cd "$dir" && pwd)"
    home="$(home_of "$dir")"
    sock="$(socket_dir "$dir")"
    while :; do
        if as_owner "$bin/pg_ctl" -D "$home/data" -l "$home/server.log" -w -t 60 \
            -o "-c listen_addresses=127.0.0.1 -p $(cat "$dir/port") -c unix_socket_directories=$sock -c max_connections=100 -c fsync=on -c shared_buffers=32MB" \
            start >/dev/null 2>&1; then
            break
        fi
        tries=$((tries + 1))
        if (( tries >= 5 )) || ! grep -q "could not bind\|Address already in use" "$home/server.log" 2>/dev/null; then
            tail -n 20 "$home/server.log" >&2 || true
            die "the server did not start (log: $home/server.log)"
        fi
        free_port >"$dir/port"
    done
    as_owner head -n 1 "$home/data/postmaster.pid" >"$dir/pid"
    # The database the tests use (the cluster starts with `postgres` only).
    if ! as_owner "$bin/psql" -h "$sock" -p "$(cat "$dir/port")" -U "$DB_USER" -d postgres -Atqc \
        "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'" | grep -q 1; then
        as_owner "$bin/createdb" -h "$sock" -p "$(cat "$dir/port")" -U "$DB_USER" "$DB_NAME"
    fi
    url_of "$dir" >"$dir/url"
    log "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') running: pid $(cat "$dir/pid"), 127.0.0.1:$(cat "$dir/port"), socket $sock"
    url_of "$dir"
}

stop() {
    local dir="$1" mode="${2:-fast}" bin pid home
    home="$(home_of "$dir")"
    [[ -d "$home/data" ]] || return 0
    bin="$(bin_dir)"
    if [[ -n "$bin" ]] && as_owner "$bin/pg_ctl" -D "$home/data" status >/dev/null 2>&1; then
        as_owner "$bin/pg_ctl" -D "$home/data" -m "$mode" -w -t 60 stop >/dev/null 2>&1 || true
    fi
    # Still there (pg_ctl missing or failed): by PID.
    pid="$(cat "$dir/pid" 2>/dev/null || true)"
    if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null &&
        [[ "$(ps -p "$pid" -o comm= 2>/dev/null)" == postgres* ]]; then
        kill -INT "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
}

cmd="${1:-}"
dir="${2:-}"
[[ -n "$cmd" && -n "$dir" ]] || die "usage: $0 start|stop|restart|crash|run DIR [CMD...]"
case "$cmd" in
    start) start "$dir" ;;
    stop) stop "$dir" ;;
    crash) stop "$dir" immediate ;;
    restart) stop "$dir"; start "$dir" >/dev/null ;;
    run)
        shift 2
        [[ $# -gt 0 ]] || die "run: no command"
        mkdir -p "$dir"
        dir="$(cd "$dir" && pwd)"
        cleanup() {
            stop "$dir"
            local s h
            s="$(cat "$dir/socketdir" 2>/dev/null || true)"
            h="$(cat "$dir/home" 2>/dev/null || true)"
            [[ "$s" == /tmp/llmsession-pg.* ]] && rm -rf "$s"
            [[ "$h" == /tmp/llmsession-pg.* ]] && rm -rf "$h"
            rm -rf "$dir"
        }
        trap cleanup EXIT
        trap 'exit 130' INT TERM
        LLMSESSION_PG_URL="$(start "$dir")"
        LLMSESSION_PG_SOCKET_URL="$(socket_url_of "$dir")"
        LLMSESSION_PG_CTL="$SELF"
        LLMSESSION_PG_DIR="$dir"
        export LLMSESSION_PG_URL LLMSESSION_PG_SOCKET_URL LLMSESSION_PG_CTL LLMSESSION_PG_DIR
        status=0
        "$@" || status=$?
        exit "$status"
        ;;
    *) die "unknown command $cmd (start, stop, restart, crash, run)" ;;
esac
