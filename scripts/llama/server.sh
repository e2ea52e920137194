#!/usr/bin/env bash
# Start, stop and query the local llama-server built by scripts/llama/setup.sh.
#
#   scripts/llama/server.sh start    start (if not running), wait for /health, print the base URL
#   scripts/llama/server.sh stop     stop the server by its PID and wait until it is gone
#   scripts/llama/server.sh status   print "running pid=... url=..." (exit 0) or "stopped" (exit 3)
#   scripts/llama/server.sh url      print the base URL, e.g. http://127.0.0.1:8766 (exit 3 if stopped)
#
# The server listens on 127.0.0.1 only, serves one model with ONE slot (every request reuses the
# same KV cache, so a request that extends the previous one reads its prompt from cache) and
# renders prompts with the Qwen2.5 chat template, which puts tools and tool calls in the prompt.
#
# Environment:
#   LLMSESSION_CACHE               cache root (default $HOME/.cache/llmsession)
#   LLMSESSION_RUN_DIR             PID, port and log files (default $LLMSESSION_CACHE/run)
#   LLMSESSION_LLAMA_PORT          port; when set it must be free. Unset: 8766, or any free port
#                                  if 8766 is taken
#   LLMSESSION_LLAMA_CTX           context size in tokens (default 8192, SmolLM2's trained context)
#   LLMSESSION_LLAMA_CACHE_RAM     MiB of host RAM for saved prompts of replaced slot contents
#                                  (default 0 = off: the single slot holds one prefix only;
#                                  -1 = unlimited; see docs/llama.md)
#   LLMSESSION_LLAMA_THREADS       CPU threads for generation and prompt processing (default 1;
#                                  "auto" = llama.cpp's choice). One thread is the fast choice on a
#                                  busy 2-core machine and keeps outputs independent of core count
#   LLMSESSION_LLAMA_START_TIMEOUT seconds to wait for /health (default 120)
#   LLMSESSION_LLAMA_EXTRA_ARGS    extra llama-server arguments (word-split)
set -euo pipefail

CACHE="${LLMSESSION_CACHE:-$HOME/.cache/llmsession}"
RUN_DIR="${LLMSESSION_RUN_DIR:-$CACHE/run}"
BIN="$CACHE/llama/bin/llama-server"
MODEL="$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf"
TEMPLATE="$CACHE/llama/templates/Qwen-Qwen2.5-7B-Instruct.jinja"
PID_FILE="$RUN_DIR/llama-server.pid"
PORT_FILE="$RUN_DIR/llama-server.port"
LOG_FILE="$RUN_DIR/llama-server.log"
HOST=127.0.0.1
DEFAULT_PORT=8766

log() { printf '[llama server] %s\n' "$*" >&2; }
die() { printf '[llama server] ERROR: %s\n' "$*" >&2; exit 1; }

# PID of our running server, or nothing. A stale PID file (process gone, or the PID now belongs
# to some other program) counts as stopped.
running_pid() {
    [[ -f "$PID_FILE" ]] || return 0
    local pid
    pid="$(cat "$PID_FILE" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    # guard against PID reuse: the process must be our binary
    # (compared with symlinks resolved; "(deleted)" when setup.sh replaced the binary since)
    local exe bin_real
    exe="$(readlink "/proc/$pid/exe" 2>/dev/null || true)"
    bin_real="$(readlink -f "$BIN" 2>/dev/null || echo "$BIN")"
    [[ "$exe" == "$bin_real" || "$exe" == "$bin_real (deleted)" ]] || return 0
    echo "$pid"
}

base_url() { echo "http://$HOST:$(cat "$PORT_FILE")"; }

port_free() {
    python3 - "$1" <<'PY'
import socket, sys
s = socket.socket()
# like llama-server itself: a port whose old connections sit in TIME_WAIT is still usable
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
finally:
    s.close()
PY
}

any_free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

health_ok() { curl -fsS --max-time 2 "$1/health" >/dev/null 2>&1; }

cmd_start() {
    local pid
    pid="$(running_pid)"
    if [[ -n "$pid" ]]; then
        log "already running (pid $pid)"
        base_url
        return 0
    fi
    for f in "$BIN" "$MODEL" "$TEMPLATE"; do
        [[ -e "$f" ]] || die "$f is missing; run scripts/llama/setup.sh first"
    done
    command -v curl >/dev/null 2>&1 || die "curl is needed to probe /health (apt-get install curl)"
    mkdir -p "$RUN_DIR"

    local port
    if [[ -n "${LLMSESSION_LLAMA_PORT:-}" ]]; then
        port="$LLMSESSION_LLAMA_PORT"
        port_free "$port" || die "port $port on $HOST is in use (LLMSESSION_LLAMA_PORT)"
    elif port_free "$DEFAULT_PORT"; then
        port="$DEFAULT_PORT"
    else
        port="$(any_free_port)"
        log "port $DEFAULT_PORT is in use; using free port $port"
    fi

    local args=(
        --model "$MODEL"
        --alias "SmolLM2-135M-Instruct"
        --host "$HOST" --port "$port"
        --jinja --chat-template-file "$TEMPLATE"
        --ctx-size "${LLMSESSION_LLAMA_CTX:-8192}"
        --parallel 1
        --cache-prompt
        --cache-reuse 0
        --cache-ram "${LLMSESSION_LLAMA_CACHE_RAM:-0}"
        --temp 0 --seed 42
        --no-webui
    )
    if [[ "${LLMSESSION_LLAMA_THREADS:-1}" != auto ]]; then
        args+=(--threads "${LLMSESSION_LLAMA_THREADS:-1}" --threads-batch "${LLMSESSION_LLAMA_THREADS:-1}")
    fi
    if [[ -n "${LLMSESSION_LLAMA_EXTRA_ARGS:-}" ]]; then
        # shellcheck disable=SC2206
        args+=($LLMSESSION_LLAMA_EXTRA_ARGS)
    fi

    echo "$port" >"$PORT_FILE"
    # one log per run (the previous run's log is kept as .prev), so failures show this run only
    if [[ -f "$LOG_FILE" ]]; then mv -f "$LOG_FILE" "$LOG_FILE.prev"; fi
    {
        printf '=== started %s: %s' "$(date -u +%FT%TZ)" "$BIN"
        printf ' %q' "${args[@]}"
        printf '\n'
    } >"$LOG_FILE"
    # Detached: new session, no terminal, all descriptors redirected, so the caller's shell or
    # CI step can exit while the server keeps running until `stop`.
    # The PID is written by the process that then execs the server (setsid may fork first).
    rm -f "$PID_FILE"
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$PID_FILE" "$BIN" "${args[@]}" \
        </dev/null >>"$LOG_FILE" 2>&1 &
    local i
    for i in $(seq 1 50); do
        [[ -s "$PID_FILE" ]] && break
        sleep 0.1
    done
    pid="$(cat "$PID_FILE" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] || die "could not launch $BIN (no PID written to $PID_FILE; see $LOG_FILE)"

    local url="http://$HOST:$port" timeout="${LLMSESSION_LLAMA_START_TIMEOUT:-120}" waited=0
    until health_ok "$url"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PID_FILE"
            log "llama-server (pid $pid) exited during start-up; last lines of $LOG_FILE:"
            tail -n 40 "$LOG_FILE" >&2
            exit 1
        fi
        if ((waited >= timeout * 2)); then
            log "llama-server (pid $pid) did not answer $url/health within ${timeout} s; last lines of $LOG_FILE:"
            tail -n 40 "$LOG_FILE" >&2
            cmd_stop >/dev/null 2>&1 || true
            exit 1
        fi
        sleep 0.5
        waited=$((waited + 1))
    done
    log "running (pid $pid) at $url, log $LOG_FILE"
    echo "$url"
}

cmd_stop() {
    local pid
    pid="$(running_pid)"
    if [[ -z "$pid" ]]; then
        rm -f "$PID_FILE"
        log "not running"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    local i
    for i in $(seq 1 100); do   # up to 10 s for a clean shutdown
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "pid $pid did not exit after SIGTERM within 10 s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for i in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    fi
    kill -0 "$pid" 2>/dev/null && die "pid $pid is still alive"
    rm -f "$PID_FILE"
    log "stopped (pid $pid)"
}

cmd_status() {
    local pid
    pid="$(running_pid)"
    if [[ -n "$pid" ]]; then
        echo "running pid=$pid url=$(base_url)"
    else
        echo "stopped"
        return 3
    fi
}

cmd_url() {
    local pid
    pid="$(running_pid)"
    [[ -n "$pid" ]] || { log "not running (scripts/llama/server.sh start)"; return 3; }
    base_url
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    url) cmd_url ;;
    *)
        echo "usage: $0 start|stop|status|url" >&2
        exit 2
        ;;
esac
