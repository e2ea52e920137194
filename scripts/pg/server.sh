#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests (docs/storage-postgres.md, "Tests").
#
#   scripts/pg/server.sh start DIR       create the cluster in DIR (once) and start it; prints
#                                        the URL (also written to DIR/url)
#   scripts/pg/server.sh stop DIR        stop it (fast shutdown) and wait until it is gone
#   scripts/pg/server.sh restart DIR     stop, then start on the same port
#   scripts/pg/server.sh crash DIR       stop without a shutdown checkpoint (immediate mode: the
#                                        next start recovers from the WAL, as after a crash)
#   scripts/pg/server.sh kill9 DIR       a real crash: SIGKILL the postmaster and every process of
#                                        the cluster at once (shared memory, WAL buffers not yet
#                                        written and all); `start` then recovers from the WAL
#   scripts/pg/server.sh freeze DIR      SIGSTOP every process of the cluster: connections are
#                                        accepted by the kernel and never answered
#   scripts/pg/server.sh thaw DIR        SIGCONT them again
#   scripts/pg/server.sh shutdown DIR    stop the server and PgBouncer (what `run`'s trap does)
#   scripts/pg/server.sh run DIR CMD...  start, run CMD with LLMSESSION_PG_URL (and the others
#                                        below) set, stop on exit (a trap), remove DIR, and exit
#                                        with CMD's status
#
# PostgreSQL is installed from the system package manager when no server binaries are found
# (Debian/Ubuntu: apt-get install postgresql; sudo when not root), and so is PgBouncer when it is
# asked for and missing. The cluster listens on 127.0.0.1 on a free port and on a unix socket in
# DIR/run (or a short directory under /tmp when DIR's path is too long for a socket). initdb
# refuses to run as root, so as root the cluster runs as an unprivileged user
# ($LLMSESSION_PG_OS_USER, default `nobody`), which owns DIR (or, when it cannot reach DIR, a
# directory under /tmp that DIR/home names).
#
# Authentication (pg_hba.conf): trust over the socket; over TCP, SCRAM for `llmsession` (and any
# role with a password) with or without TLS; the role `llmsession_cert` only over TLS, by its
# client certificate (`cert`). TLS is on (ssl=on) with a server certificate for `localhost` and
# 127.0.0.1 signed by a throwaway CA that the script makes once per cluster (openssl), together
# with a second, unrelated CA and a client certificate (CN llmsession_cert) signed by the first.
#
# Environment: LLMSESSION_PG_MAX_CONNECTIONS (the server's max_connections, default 100; kept
# for the cluster's later starts), LLMSESSION_PG_BOUNCER=1 (also start PgBouncer in transaction
# mode in front of the cluster, on 127.0.0.1 on a free port of its own; it stays up while the
# server is stopped, crashed or frozen, and `shutdown` or `run`'s trap stops it).
#
# `run` exports, for CMD:
#   LLMSESSION_PG_URL         postgres://llmsession:PASSWORD@127.0.0.1:PORT/llmsession
#   LLMSESSION_PG_SOCKET_URL  the same database over the unix socket (no password)
#   LLMSESSION_PG_CTL         this script, and LLMSESSION_PG_DIR: DIR; `bash $LLMSESSION_PG_CTL
#                             stop|start|kill9|freeze|thaw "$LLMSESSION_PG_DIR"` acts on the
#                             server (the tests' server-restart, crash and frozen-server cases)
#   LLMSESSION_PG_CA          the CA certificate that signed the server's (PEM; sslrootcert)
#   LLMSESSION_PG_OTHER_CA    a CA that signed nothing the server shows (verify-ca must fail)
#   LLMSESSION_PG_CLIENT_CERT, LLMSESSION_PG_CLIENT_KEY
#                             the client certificate of role llmsession_cert and its key (PEM,
#                             PKCS#8, mode 0600): postgres://llmsession_cert@127.0.0.1:PORT/
#                             llmsession?sslmode=verify-full&sslrootcert=..&sslcert=..&sslkey=..
#   LLMSESSION_PGBOUNCER_URL  with LLMSESSION_PG_BOUNCER=1: postgres://llmsession:PASSWORD@
#                             127.0.0.1:BOUNCER_PORT/llmsession (pool_mode=transaction)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SELF="$HERE/server.sh"
DB_USER=llmsession
DB_NAME=llmsession

PG_LOG_TAG="${PG_LOG_TAG:-pg server}"
log() { printf '[%s] %s\n' "$PG_LOG_TAG" "$*" >&2; }
die() { printf '[%s] ERROR: %s\n' "$PG_LOG_TAG" "$*" >&2; exit 1; }

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

# Chooses where DIR's cluster files live (once; home_of reads the choice back): DIR, or, as
# root when the unprivileged user cannot reach DIR, a new directory under /tmp, recorded in
# DIR/home. Also used by pair.sh.
choose_home() {
    local dir="$1" home="$1"
    [[ -f "$dir/home" ]] && { cat "$dir/home"; return 0; }
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
    echo "$home"
    return 0
}

init_cluster() {
    local dir="$1" bin="$2" home
    [[ -f "$(home_of "$dir")/data/PG_VERSION" ]] && return 0
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    home="$(choose_home "$dir")"
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

# A process that exists and is not a zombie (nothing reaps orphans on some machines, and a
# zombie still answers kill -0).
alive() {
    local st
    st="$(ps -o stat= -p "$1" 2>/dev/null)" || return 1
    [[ -n "$st" && "$st" != Z* ]]
}

# The postmaster of the cluster in DATA (from its postmaster.pid), when it runs.
postmaster_of() {
    local data="$1" pm
    pm="$(head -n 1 "$data/postmaster.pid" 2>/dev/null || true)"
    [[ "$pm" =~ ^[0-9]+$ ]] && alive "$pm" && [[ "$(ps -o comm= -p "$pm" 2>/dev/null)" == postgres* ]] && echo "$pm"
    return 0
}

# The postmaster of the cluster in DATA and its children, one a line; nothing when it is not
# running.
cluster_pids() {
    local data="$1" pm
    pm="$(head -n 1 "$data/postmaster.pid" 2>/dev/null || true)"
    [[ "$pm" =~ ^[0-9]+$ ]] && alive "$pm" && [[ "$(ps -o comm= -p "$pm" 2>/dev/null)" == postgres* ]] || return 0
    echo "$pm"
    ps -o pid= --ppid "$pm" | tr -d ' '
}

# SIGKILLs every process of the cluster in DATA (listening on PORT, its socket in SOCKDIR) at once (the postmaster is stopped first, so it
# forks nothing meanwhile), waits until they are gone, and removes the lock files a killed
# postmaster leaves (a zombie that nothing reaps would otherwise look like a live postmaster).
kill9_data() {
    local data="$1" sock="${2:-}" port="${3:-}" pm pids=() p
    pm="$(postmaster_of "$data")"
    [[ -n "$pm" ]] || die "kill9: no server is running in $data"
    kill -STOP "$pm" 2>/dev/null || true
    mapfile -t pids < <(cluster_pids "$data")
    kill -KILL "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 1 200); do
        local left=0
        for p in "${pids[@]}"; do alive "$p" && left=1; done
        (( left == 0 )) && break
        sleep 0.05
    done
    rm -f "$data/postmaster.pid"
    [[ -n "$sock" && -n "$port" ]] && rm -f "$sock/.s.PGSQL.$port.lock"
    return 0
}

# SIGSTOP (freeze) or SIGCONT (thaw) every process of the cluster in DATA.
signal_cluster() {
    local data="$1" sig="$2" pm pids=()
    pm="$(postmaster_of "$data")"
    [[ -n "$pm" ]] || return 0
    if [[ "$sig" == STOP ]]; then
        # The postmaster first, so it forks nothing new meanwhile.
        kill -STOP "$pm"
        mapfile -t pids < <(cluster_pids "$data")
        kill -STOP "${pids[@]}" 2>/dev/null || true
    else
        mapfile -t pids < <(cluster_pids "$data")
        kill -CONT "${pids[@]}" 2>/dev/null || true
    fi
}

# ---------------------------------------------------------------------------------------------
# TLS: a throwaway CA, a server certificate it signs (localhost, 127.0.0.1), a second CA, and a
# client certificate for role llmsession_cert. The client side lies in DIR/tls (the test user's),
# the server's key and certificates in HOME/server-tls (the cluster owner's).
make_tls() {
    local dir="$1" home="$2" t st
    t="$dir/tls"
    st="$home/server-tls"
    if [[ ! -f "$t/done" ]]; then
        command -v openssl >/dev/null 2>&1 || die "openssl is needed to make the test certificates (apt-get install openssl)"
        rm -rf "$t"
        mkdir -p "$t"
        chmod 755 "$t"
        (
            set -e
            cd "$t"
            umask 077
            key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
            ca() {
                key "$1.key"
                openssl req -x509 -new -key "$1.key" -out "$1.crt" -days 3650 -subj "/CN=$2" \
                    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
            }
            # sign NAME CN EXTENSIONS: NAME.key and NAME.crt, signed by ca
            sign() {
                key "$1.key"
                openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr" 2>/dev/null
                printf '%b\n' "$3" >"$1.ext"
                openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -days 3650 \
                    -set_serial "0x$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" -extfile "$1.ext" -out "$1.crt" 2>/dev/null
                rm -f "$1.csr" "$1.ext"
            }
            ca ca "llmsession test CA"
            ca other-ca "llmsession unrelated test CA"
            sign server localhost "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid"
            sign client llmsession_cert "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid"
            chmod 644 ca.crt other-ca.crt server.crt client.crt
            chmod 600 ca.key other-ca.key server.key client.key
        )
        # (set -e does not reach into a subshell that is tested, so check the result instead.)
        openssl verify -CAfile "$t/ca.crt" "$t/server.crt" "$t/client.crt" >/dev/null 2>&1 ||
            die "openssl failed to make the test certificates in $t"
        : >"$t/done"
    fi
    if [[ ! -f "$st/server.key" ]]; then
        mkdir -p "$st"
        cp "$t/server.crt" "$t/server.key" "$t/ca.crt" "$st/"
        chmod 700 "$st"
        chmod 600 "$st/server.key"
        [[ "$(id -u)" == 0 ]] && chown -R "$OS_USER" "$st"
    fi
    return 0
}

# pg_hba.conf and the server settings that every start uses (TLS), written once per cluster.
configure_cluster() {
    local dir="$1" home="$2" st
    [[ -f "$dir/configured" ]] && return 0
    make_tls "$dir" "$home"
    st="$home/server-tls"
    # Overwritten in place, so the file keeps its owner.
    cat >"$home/data/pg_hba.conf" <<EOF
# scripts/pg/server.sh: the test cluster's authentication (first match wins)
local   all          all                             trust
local   replication  all                             trust
hostssl all          llmsession_cert  127.0.0.1/32   cert
host    all          llmsession_cert  127.0.0.1/32   reject
host    all          all              127.0.0.1/32   scram-sha-256
host    replication  all              127.0.0.1/32   scram-sha-256
EOF
    cat >>"$home/data/postgresql.conf" <<EOF

# scripts/pg/server.sh: TLS with the throwaway CA's certificates
ssl = on
ssl_cert_file = '$st/server.crt'
ssl_key_file = '$st/server.key'
ssl_ca_file = '$st/ca.crt'
EOF
    # The start after a crash (kill9) fsyncs the data directory first: file by file that takes
    # seconds here, one syncfs(2) a fraction of one (PostgreSQL 14 and later, on Linux).
    local major
    major="$("$(bin_dir)/postgres" --version | awk '{print $3}' | cut -d. -f1)"
    if [[ "$(uname -s)" == Linux && "$major" =~ ^[0-9]+$ ]] && (( major >= 14 )); then
        echo "recovery_init_sync_method = syncfs" >>"$home/data/postgresql.conf"
    fi
    : >"$dir/configured"
}

# The role that logs in with its client certificate, with the rights of `llmsession` on its
# database (a member of it: it reads, writes and migrates the same tables).
make_cert_role() {
    local dir="$1" bin="$2" sock="$3"
    [[ -f "$dir/cert-role" ]] && return 0
    as_owner "$bin/psql" -h "$sock" -p "$(cat "$dir/port")" -U "$DB_USER" -d "$DB_NAME" -v ON_ERROR_STOP=1 -Atq >/dev/null <<EOF ||
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'llmsession_cert') THEN CREATE ROLE llmsession_cert LOGIN; END IF;
END \$\$;
GRANT ALL ON DATABASE $DB_NAME TO llmsession_cert;
GRANT ALL ON SCHEMA public TO llmsession_cert;
GRANT $DB_USER TO llmsession_cert;
EOF
        die "cannot create the role llmsession_cert"
    : >"$dir/cert-role"
}

# ---------------------------------------------------------------------------------------------
# PgBouncer (transaction mode) in front of the cluster: config, auth file, log and pid under
# HOME/pgbouncer, the port in DIR/bouncer_port.
bouncer_bin() {
    local b
    b="$(command -v pgbouncer 2>/dev/null || true)"
    [[ -z "$b" && -x /usr/sbin/pgbouncer ]] && b=/usr/sbin/pgbouncer
    if [[ -z "$b" ]]; then
        command -v apt-get >/dev/null 2>&1 || die "pgbouncer is not installed and there is no apt-get to install it"
        log "installing PgBouncer (apt-get install pgbouncer)"
        as_root apt-get install -y -qq pgbouncer >/dev/null 2>&1 ||
            { as_root apt-get update -qq && as_root apt-get install -y -qq pgbouncer >/dev/null; } ||
            die "apt-get install pgbouncer failed"
        b="$(command -v pgbouncer 2>/dev/null || echo /usr/sbin/pgbouncer)"
        [[ -x "$b" ]] || die "pgbouncer is installed but not found"
    fi
    echo "$b"
}

bouncer_pid() {
    local dir="$1" pid
    pid="$(cat "$(home_of "$dir")/pgbouncer/pgbouncer.pid" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] && alive "$pid" && [[ "$(ps -o comm= -p "$pid" 2>/dev/null)" == pgbouncer* ]] && echo "$pid"
    return 0
}

bouncer_url_of() {
    local dir="$1"
    echo "postgres://$DB_USER:$(cat "$dir/password")@127.0.0.1:$(cat "$dir/bouncer_port")/$DB_NAME"
}

start_bouncer() {
    local dir="$1" home b bd port
    home="$(home_of "$dir")"
    bd="$home/pgbouncer"
    [[ -n "$(bouncer_pid "$dir")" ]] && return 0
    b="$(bouncer_bin)"
    mkdir -p "$bd"
    [[ -f "$dir/bouncer_port" ]] || free_port >"$dir/bouncer_port"
    port="$(cat "$dir/bouncer_port")"
    # The auth file holds the password itself: PgBouncer answers the client's SCRAM exchange
    # with it and logs in to the server with SCRAM too.
    (umask 077 && printf '"%s" "%s"\n' "$DB_USER" "$(cat "$dir/password")" >"$bd/userlist.txt")
    cat >"$bd/pgbouncer.ini" <<EOF
; scripts/pg/server.sh: PgBouncer in transaction mode in front of the test cluster
[databases]
$DB_NAME = host=127.0.0.1 port=$(cat "$dir/port") dbname=$DB_NAME

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $bd/userlist.txt
admin_users = $DB_USER
pool_mode = transaction
max_client_conn = 5000
default_pool_size = 20
listen_backlog = 4096
ignore_startup_parameters = extra_float_digits
logfile = $bd/pgbouncer.log
pidfile = $bd/pgbouncer.pid
EOF
    [[ "$(id -u)" == 0 ]] && chown -R "$OS_USER" "$bd"
    # 5000 clients need as many descriptors.
    (ulimit -n "$(ulimit -Hn)" 2>/dev/null || true; as_owner "$b" -d -q "$bd/pgbouncer.ini") ||
        { tail -n 20 "$bd/pgbouncer.log" >&2 2>/dev/null || true; die "pgbouncer did not start (log: $bd/pgbouncer.log)"; }
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.05
    done
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null ||
        { tail -n 20 "$bd/pgbouncer.log" >&2 2>/dev/null || true; die "pgbouncer does not listen on 127.0.0.1:$port (log: $bd/pgbouncer.log)"; }
    log "PgBouncer $("$b" --version | awk 'NR == 1 {print $2}') running (pool_mode=transaction): pid $(bouncer_pid "$dir"), 127.0.0.1:$port"
}

stop_bouncer() {
    local dir="$1" pid
    pid="$(bouncer_pid "$dir")"
    [[ -n "$pid" ]] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do alive "$pid" || return 0; sleep 0.05; done
    kill -KILL "$pid" 2>/dev/null || true
}

# ---------------------------------------------------------------------------------------------

start() {
    local dir="$1" bin sock home mc tries=0
    bin="$(ensure_installed)"
    init_cluster "$dir" "$bin"
    dir="$(cd "$dir" && pwd)"
    home="$(home_of "$dir")"
    sock="$(socket_dir "$dir")"
    configure_cluster "$dir" "$home"
    # max_connections: the environment's, else what this cluster was started with, else 100.
    mc="${LLMSESSION_PG_MAX_CONNECTIONS:-$(cat "$dir/max_connections" 2>/dev/null || echo 100)}"
    [[ "$mc" =~ ^[0-9]+$ ]] || die "LLMSESSION_PG_MAX_CONNECTIONS must be a number (got $mc)"
    echo "$mc" >"$dir/max_connections"
    while :; do
        if as_owner "$bin/pg_ctl" -D "$home/data" -l "$home/server.log" -w -t 60 \
            -o "-c listen_addresses=127.0.0.1 -p $(cat "$dir/port") -c unix_socket_directories=$sock -c max_connections=$mc -c fsync=on -c shared_buffers=32MB" \
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
    make_cert_role "$dir" "$bin" "$sock"
    url_of "$dir" >"$dir/url"
    log "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') running: pid $(cat "$dir/pid"), 127.0.0.1:$(cat "$dir/port") (TLS on, max_connections $mc), socket $sock"
    if [[ "${LLMSESSION_PG_BOUNCER:-0}" == 1 ]]; then
        start_bouncer "$dir"
        bouncer_url_of "$dir" >"$dir/bouncer_url"
    fi
    url_of "$dir"
}

stop() {
    local dir="$1" mode="${2:-fast}" bin pid home
    home="$(home_of "$dir")"
    [[ -d "$home/data" ]] || return 0
    bin="$(bin_dir)"
    # A frozen server cannot shut down.
    signal_cluster "$home/data" CONT
    if [[ -n "$bin" ]] && as_owner "$bin/pg_ctl" -D "$home/data" status >/dev/null 2>&1; then
        as_owner "$bin/pg_ctl" -D "$home/data" -m "$mode" -w -t 60 stop >/dev/null 2>&1 || true
    fi
    # Still there (pg_ctl missing or failed): by PID.
    pid="$(cat "$dir/pid" 2>/dev/null || true)"
    if [[ "$pid" =~ ^[0-9]+$ ]] && alive "$pid" &&
        [[ "$(ps -p "$pid" -o comm= 2>/dev/null)" == postgres* ]]; then
        kill -INT "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
}

cleanup_dir() {
    local dir="$1" s h
    s="$(cat "$dir/socketdir" 2>/dev/null || true)"
    h="$(cat "$dir/home" 2>/dev/null || true)"
    [[ "$s" == /tmp/llmsession-pg.* ]] && rm -rf "$s"
    [[ "$h" == /tmp/llmsession-pg.* ]] && rm -rf "$h"
    rm -rf "$dir"
}

main() {
    local cmd="${1:-}" dir="${2:-}"
    [[ -n "$cmd" && -n "$dir" ]] || die "usage: $0 start|stop|restart|crash|kill9|freeze|thaw|shutdown|run DIR [CMD...]"
    case "$cmd" in
        start) start "$dir" ;;
        stop) stop "$dir" ;;
        crash) stop "$dir" immediate ;;
        kill9) kill9_data "$(home_of "$dir")/data" "$(cat "$dir/socketdir" 2>/dev/null || true)" "$(cat "$dir/port")" ;;
        freeze) signal_cluster "$(home_of "$dir")/data" STOP ;;
        thaw) signal_cluster "$(home_of "$dir")/data" CONT ;;
        restart) stop "$dir"; start "$dir" >/dev/null ;;
        shutdown) stop "$dir"; stop_bouncer "$dir" ;;
        run)
            shift 2
            [[ $# -gt 0 ]] || die "run: no command"
            mkdir -p "$dir"
            dir="$(cd "$dir" && pwd)"
            RUN_DIR="$dir"
            trap 'stop "$RUN_DIR"; stop_bouncer "$RUN_DIR"; cleanup_dir "$RUN_DIR"' EXIT
            trap 'exit 130' INT TERM
            LLMSESSION_PG_URL="$(start "$dir")"
            LLMSESSION_PG_SOCKET_URL="$(socket_url_of "$dir")"
            LLMSESSION_PG_CTL="$SELF"
            LLMSESSION_PG_DIR="$dir"
            LLMSESSION_PG_CA="$dir/tls/ca.crt"
            LLMSESSION_PG_OTHER_CA="$dir/tls/other-ca.crt"
            LLMSESSION_PG_CLIENT_CERT="$dir/tls/client.crt"
            LLMSESSION_PG_CLIENT_KEY="$dir/tls/client.key"
            export LLMSESSION_PG_URL LLMSESSION_PG_SOCKET_URL LLMSESSION_PG_CTL LLMSESSION_PG_DIR \
                LLMSESSION_PG_CA LLMSESSION_PG_OTHER_CA LLMSESSION_PG_CLIENT_CERT LLMSESSION_PG_CLIENT_KEY
            if [[ -f "$dir/bouncer_url" ]]; then
                LLMSESSION_PGBOUNCER_URL="$(cat "$dir/bouncer_url")"
                export LLMSESSION_PGBOUNCER_URL
            fi
            local status=0
            "$@" || status=$?
            exit "$status"
            ;;
        *) die "unknown command $cmd (start, stop, restart, crash, kill9, freeze, thaw, shutdown, run)" ;;
    esac
}

# Sourced (scripts/pg/pair.sh): the functions only.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    main "$@"
fi
