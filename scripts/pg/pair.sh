#!/usr/bin/env bash
# A throwaway PostgreSQL primary and its streaming-replication standby, for the failover tests
# (docs/storage-postgres.md, "Failover recipe").
#
#   scripts/pg/pair.sh start DIR          create the pair in DIR (once) and start it: a primary, and a
#                                         standby made from it with pg_basebackup -R, each on 127.0.0.1
#                                         on a free port of its own; waits until the standby is the
#                                         primary's synchronous standby. Prints the URL (DIR/url)
#   scripts/pg/pair.sh stop DIR           stop both (fast shutdown)
#   scripts/pg/pair.sh crash-primary DIR  SIGKILL the primary's postmaster and every process of it
#   scripts/pg/pair.sh promote DIR        promote the standby (pg_ctl promote) and wait until it
#                                         takes writes (not in recovery, transaction_read_only off)
#   scripts/pg/pair.sh reset DIR          make the node that is not the primary a fresh synchronous
#                                         standby of the primary (pg_basebackup from it, over what
#                                         was there), so the next trial starts from a healthy pair;
#                                         the roles stay swapped, which the URL does not mind
#   scripts/pg/pair.sh status DIR         which node is the primary, the ports, the replication state
#   scripts/pg/pair.sh run DIR CMD...     start, run CMD with the variables below, stop on exit (a
#                                         trap), remove DIR, and exit with CMD's status
#
# The primary runs with synchronous_standby_names = '*' and synchronous_commit = on, so a commit
# made at the synchronous level returns only once the standby has flushed it (and so survives a
# failover). The standby's config is the primary's (pg_basebackup copies it), so a promoted
# standby waits for a standby in turn: its synchronous commits block until `reset` gives it one.
# fsync is off unless LLMSESSION_PAIR_FSYNC=on: here only processes crash, never the machine, so
# what a process wrote survives in the OS page cache either way, and a start after a crash or a
# fresh pg_basebackup skips fsyncing the whole data directory (4 s a node on the development
# machine; `reset` takes about 1 s without it).
# Authentication: SCRAM over TCP (user llmsession, also for replication), trust over the socket.
# As root the clusters run as $LLMSESSION_PG_OS_USER (default nobody), as in server.sh.
#
# `run` exports, for CMD:
#   LLMSESSION_PAIR_URL  postgres://llmsession:PASSWORD@127.0.0.1:P1,127.0.0.1:P2/llmsession?
#                        target_session_attrs=read-write (the client tries both, and takes the
#                        one that accepts writes)
#   LLMSESSION_PAIR_CTL  this script, and LLMSESSION_PAIR_DIR: DIR (`bash $LLMSESSION_PAIR_CTL
#                        crash-primary|promote|reset "$LLMSESSION_PAIR_DIR"`)
set -euo pipefail

PAIR_HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PAIR_SELF="$PAIR_HERE/pair.sh"
PG_LOG_TAG="pg pair"
# shellcheck source=scripts/pg/server.sh
source "$PAIR_HERE/server.sh"

other_of() { if [[ "$1" == n1 ]]; then echo n2; else echo n1; fi; }
port_of() { cat "$1/$2.port"; }
primary_of() { cat "$1/primary"; }

psql_node() {
    local dir="$1" node="$2"
    shift 2
    as_owner "$(bin_dir)/psql" -h "$(cat "$dir/socketdir")" -p "$(port_of "$dir" "$node")" -U "$DB_USER" -d postgres -Atqc "$@"
}

start_node() {
    local dir="$1" node="$2" home
    home="$(home_of "$dir")"
    [[ -n "$(postmaster_of "$home/$node")" ]] && return 0
    if ! as_owner "$(bin_dir)/pg_ctl" -D "$home/$node" -l "$home/$node.log" -w -t 60 -o "-p $(port_of "$dir" "$node")" start >/dev/null 2>&1; then
        tail -n 20 "$home/$node.log" >&2 || true
        die "node $node did not start (log: $home/$node.log)"
    fi
}

stop_node() {
    local dir="$1" node="$2" mode="${3:-fast}" home
    home="$(home_of "$dir")"
    [[ -d "$home/$node" ]] || return 0
    signal_cluster "$home/$node" CONT
    if [[ -n "$(postmaster_of "$home/$node")" ]]; then
        as_owner "$(bin_dir)/pg_ctl" -D "$home/$node" -m "$mode" -w -t 60 stop >/dev/null 2>&1 ||
            kill9_data "$home/$node" "$(cat "$dir/socketdir")" "$(port_of "$dir" "$node")"
    fi
}

# Waits until the primary reports a synchronous standby that has replayed what it has.
wait_sync() {
    local dir="$1" p st
    p="$(primary_of "$dir")"
    for _ in $(seq 1 600); do
        st="$(psql_node "$dir" "$p" "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'" 2>/dev/null || true)"
        [[ "$st" == *sync* && "$st" != *async* ]] && return 0
        sleep 0.05
    done
    die "the standby did not become the primary's synchronous standby within 30 s (logs: $(home_of "$dir")/n1.log, n2.log)"
}

# Makes NODE a fresh standby of the primary: removes what it held, copies the primary with
# pg_basebackup -R (which writes standby.signal and primary_conninfo), starts it.
make_standby() {
    local dir="$1" node="$2" home p
    home="$(home_of "$dir")"
    p="$(primary_of "$dir")"
    stop_node "$dir" "$node" immediate
    rm -rf "${home:?}/$node"
    as_owner "$(bin_dir)/pg_basebackup" -h "$(cat "$dir/socketdir")" -p "$(port_of "$dir" "$p")" -U "$DB_USER" \
        -D "$home/$node" -R -X stream -c fast --no-sync >"$home/$node.basebackup.log" 2>&1 ||
        { tail -n 20 "$home/$node.basebackup.log" >&2; die "pg_basebackup of node $node from $p failed"; }
    start_node "$dir" "$node"
}

create() {
    local dir="$1" bin home sock pw
    bin="$(ensure_installed)"
    home="$(choose_home "$dir")"
    sock="$(socket_dir "$dir")"
    pw="$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    printf '%s\n' "$pw" >"$dir/password"
    chmod 600 "$dir/password"
    printf '%s\n' "$pw" >"$home/pwfile"
    chmod 600 "$home/pwfile"
    [[ "$(id -u)" == 0 ]] && chown "$OS_USER" "$home/pwfile"
    as_owner "$bin/initdb" -D "$home/n1" -U "$DB_USER" --pwfile="$home/pwfile" --auth-local=trust \
        --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1 ||
        { rm -f "$home/pwfile"; tail -n 20 "$dir/initdb.log" >&2; die "initdb failed (log: $dir/initdb.log)"; }
    rm -f "$home/pwfile"
    cat >"$home/n1/pg_hba.conf" <<EOF
# scripts/pg/pair.sh: the pair's authentication (first match wins)
local   all          all                   trust
local   replication  all                   trust
host    all          all    127.0.0.1/32   scram-sha-256
host    replication  all    127.0.0.1/32   scram-sha-256
EOF
    # Shared by both nodes (pg_basebackup copies it); each node's port is given at its start.
    cat >>"$home/n1/postgresql.conf" <<EOF

# scripts/pg/pair.sh
listen_addresses = '127.0.0.1'
unix_socket_directories = '$sock'
max_connections = ${LLMSESSION_PG_MAX_CONNECTIONS:-100}
shared_buffers = 32MB
fsync = ${LLMSESSION_PAIR_FSYNC:-off}
wal_level = replica
max_wal_senders = 10
wal_keep_size = 64MB
hot_standby = on
wal_log_hints = on
wal_receiver_status_interval = 1s
EOF
    free_port >"$dir/n1.port"
    local p2
    p2="$(free_port)"
    while [[ "$p2" == "$(cat "$dir/n1.port")" ]]; do p2="$(free_port)"; done
    echo "$p2" >"$dir/n2.port"
    echo n1 >"$dir/primary"
    start_node "$dir" n1
    as_owner "$bin/createdb" -h "$sock" -p "$(port_of "$dir" n1)" -U "$DB_USER" "$DB_NAME"
    make_standby "$dir" n2
    # Synchronous from now on (set earlier, the createdb above would wait for a standby that
    # does not exist yet); in both nodes' config, so a promoted standby keeps it.
    local n
    for n in n1 n2; do
        printf "synchronous_standby_names = '*'\nsynchronous_commit = on\n" >>"$home/$n/postgresql.conf"
    done
    as_owner "$bin/pg_ctl" -D "$home/n1" reload >/dev/null
    as_owner "$bin/pg_ctl" -D "$home/n2" reload >/dev/null
}

pair_url_of() {
    local dir="$1"
    echo "postgres://$DB_USER:$(cat "$dir/password")@127.0.0.1:$(port_of "$dir" n1),127.0.0.1:$(port_of "$dir" n2)/$DB_NAME?target_session_attrs=read-write"
}

pair_start() {
    local dir="$1" p
    mkdir -p "$dir"
    if [[ -f "$dir/primary" ]]; then
        p="$(primary_of "$dir")"
        start_node "$dir" "$p"
        start_node "$dir" "$(other_of "$p")"
    else
        create "$dir"
    fi
    wait_sync "$dir"
    pair_url_of "$dir" >"$dir/url"
    log "primary $(primary_of "$dir") on 127.0.0.1:$(port_of "$dir" "$(primary_of "$dir")"), synchronous standby on 127.0.0.1:$(port_of "$dir" "$(other_of "$(primary_of "$dir")")")"
    pair_url_of "$dir"
}

crash_primary() {
    local dir="$1" p
    p="$(primary_of "$dir")"
    kill9_data "$(home_of "$dir")/$p" "$(cat "$dir/socketdir")" "$(port_of "$dir" "$p")"
}

promote() {
    local dir="$1" s ro
    s="$(other_of "$(primary_of "$dir")")"
    [[ -n "$(postmaster_of "$(home_of "$dir")/$s")" ]] || die "promote: the standby ($s) is not running"
    as_owner "$(bin_dir)/pg_ctl" -D "$(home_of "$dir")/$s" -w -t 60 promote >/dev/null ||
        die "pg_ctl promote failed (log: $(home_of "$dir")/$s.log)"
    for _ in $(seq 1 600); do
        ro="$(psql_node "$dir" "$s" "SELECT pg_is_in_recovery()::text || current_setting('transaction_read_only')" 2>/dev/null || true)"
        if [[ "$ro" == falseoff ]]; then
            echo "$s" >"$dir/primary"
            return 0
        fi
        sleep 0.05
    done
    die "the promoted standby ($s) does not take writes after 30 s"
}

reset() {
    local dir="$1" p
    p="$(primary_of "$dir")"
    [[ -n "$(postmaster_of "$(home_of "$dir")/$p")" ]] || die "reset: the primary ($p) is not running (promote the standby first)"
    make_standby "$dir" "$(other_of "$p")"
    wait_sync "$dir"
}

pair_stop() {
    local dir="$1"
    [[ -f "$dir/primary" ]] || return 0
    stop_node "$dir" n1
    stop_node "$dir" n2
}

pair_main() {
    local cmd="${1:-}" dir="${2:-}"
    [[ -n "$cmd" && -n "$dir" ]] || die "usage: $0 start|stop|crash-primary|promote|reset|status|run DIR [CMD...]"
    [[ "$cmd" == start || "$cmd" == run ]] && mkdir -p "$dir"
    [[ -d "$dir" ]] || die "$dir: no such pair"
    dir="$(cd "$dir" && pwd)"
    case "$cmd" in
        start) pair_start "$dir" ;;
        stop) pair_stop "$dir" ;;
        crash-primary) crash_primary "$dir" ;;
        promote) promote "$dir" ;;
        reset) reset "$dir" ;;
        status)
            local p
            p="$(primary_of "$dir")"
            echo "primary $p 127.0.0.1:$(port_of "$dir" "$p"), standby $(other_of "$p") 127.0.0.1:$(port_of "$dir" "$(other_of "$p")")"
            psql_node "$dir" "$p" "SELECT application_name, state, sync_state FROM pg_stat_replication" || true
            ;;
        run)
            shift 2
            [[ $# -gt 0 ]] || die "run: no command"
            mkdir -p "$dir"
            dir="$(cd "$dir" && pwd)"
            RUN_DIR="$dir"
            trap 'pair_stop "$RUN_DIR"; cleanup_dir "$RUN_DIR"' EXIT
            trap 'exit 130' INT TERM
            LLMSESSION_PAIR_URL="$(pair_start "$dir")"
            LLMSESSION_PAIR_CTL="$PAIR_SELF"
            LLMSESSION_PAIR_DIR="$dir"
            export LLMSESSION_PAIR_URL LLMSESSION_PAIR_CTL LLMSESSION_PAIR_DIR
            local status=0
            "$@" || status=$?
            exit "$status"
            ;;
        *) die "unknown command $cmd (start, stop, crash-primary, promote, reset, status, run)" ;;
    esac
}

pair_main "$@"
