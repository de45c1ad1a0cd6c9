#!/usr/bin/env bash
# Throwaway PostgreSQL and Redis servers on loopback, for the test suite and the benchmarks.
#
#   scripts/services.sh start [DIR]   start them in DIR (default: a new `mktemp -d`); prints DIR on stdout
#   scripts/services.sh env   [DIR]   print the `export ...` lines for them (also in DIR/env)
#   scripts/services.sh stop  [DIR]   stop them and remove DIR
#   scripts/services.sh status [DIR]  tell whether they answer
#
# DIR defaults to $RACKPLANE_RUNTIME_DIR for env/stop/status. Typical use:
#   dir="$(scripts/services.sh start)"; trap 'scripts/services.sh stop "$dir"' EXIT; source "$dir/env"
#
# The environment it exports: DATABASE_URL (role and database `rackplane`, trust auth on loopback), PGHOST,
# PGPORT, PGUSER, PGDATABASE, REDIS_URL, CELERY_TEST_BROKER_URL, RACKPLANE_RUNTIME_DIR. It does NOT export
# CELERY_BROKER_URL: Celery stays eager unless a test or benchmark asks for the broker itself.
#
# Settings: RACKPLANE_SERVICES ("postgres redis" by default), RACKPLANE_KEEP_RUNTIME=1 (stop keeps DIR and its
# logs), RACKPLANE_PG_OPTIONS (extra `postgres` options; the default turns fsync off: the data is thrown away).
# PostgreSQL refuses to run as root, so as root its programs run as the `postgres` user (runuser).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SERVICES="${RACKPLANE_SERVICES:-postgres redis}"
PG_OPTIONS="${RACKPLANE_PG_OPTIONS:--c fsync=off -c synchronous_commit=off -c full_page_writes=off}"
DB_NAME="rackplane"
DB_USER="rackplane"
READY_TIMEOUT="${RACKPLANE_READY_TIMEOUT:-60}"

wants() { [[ " $SERVICES " == *" $1 "* ]]; }


# PostgreSQL's programs as the user that owns the cluster.
# (From / so that a working directory it may not read does not matter.)
pg_user_run() {
    if [ "$(id -u)" -eq 0 ]; then
        (cd / && runuser -u postgres -- "$@")
    else
        "$@"
    fi
}

runtime_dir_arg() {
    local dir="${1:-${RACKPLANE_RUNTIME_DIR:-}}"
    [ -n "$dir" ] || die "no runtime directory: pass it as an argument or set RACKPLANE_RUNTIME_DIR"
    [ -d "$dir" ] || die "runtime directory $dir does not exist"
    [ -f "$dir/.rackplane-services" ] || die "$dir was not made by '$(basename "$0") start'; leaving it alone"
    (cd "$dir" && pwd)
}

start_postgres() {
    local dir="$1" bindir port
    bindir="$(find_pg_bindir)" || die "PostgreSQL's initdb not found (install Debian's postgresql: scripts/system-deps.sh)"
    if [ "$(id -u)" -eq 0 ]; then
        id postgres >/dev/null 2>&1 || die "running as root, but there is no 'postgres' user to run PostgreSQL as"
        command -v runuser >/dev/null || die "running as root, but runuser (util-linux) is missing"
        # The cluster's owner must reach the directory; root can still write the other files in it.
        chown postgres: "$dir"
    fi
    port="$(free_port)"
    mkdir -p "$dir/pgsocket"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$dir/pgsocket"

    log "postgres: initdb ($bindir)"
    if ! pg_user_run "$bindir/initdb" -D "$dir/pgdata" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
        --no-sync >"$dir/initdb.log" 2>&1; then
        cat "$dir/initdb.log" >&2
        die "initdb failed (log above)"
    fi
    log "postgres: starting on 127.0.0.1:$port"
    # shellcheck disable=SC2086 # PG_OPTIONS is a list of options on purpose
    if ! pg_user_run "$bindir/pg_ctl" -D "$dir/pgdata" -l "$dir/postgres.log" -w -t "$READY_TIMEOUT" \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir/pgsocket $PG_OPTIONS" start >/dev/null; then
        tail -n 30 "$dir/postgres.log" >&2 || true
        die "PostgreSQL did not start (end of $dir/postgres.log above)"
    fi
    echo "$port" >"$dir/postgres.port"
    wait_for "PostgreSQL" "$bindir/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres
    pg_user_run "$bindir/psql" -q -v ON_ERROR_STOP=1 -h "$dir/pgsocket" -p "$port" -U postgres -d postgres \
        -c "CREATE ROLE $DB_USER LOGIN CREATEDB" -c "CREATE DATABASE $DB_NAME OWNER $DB_USER" >/dev/null ||
        die "could not create role and database '$DB_NAME'"
}

start_redis() {
    local dir="$1" port
    command -v redis-server >/dev/null || die "redis-server not found (install Debian's redis-server: scripts/system-deps.sh)"
    port="$(free_port)"
    mkdir -p "$dir/redis"
    log "redis: starting on 127.0.0.1:$port"
    if ! redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --daemonize yes \
        --dir "$dir/redis" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null; then
        die "redis-server did not start (see $dir/redis.log)"
    fi
    echo "$port" >"$dir/redis.port"
    if ! wait_for_redis "$port"; then
        tail -n 30 "$dir/redis.log" >&2 || true
        die "Redis did not answer PING within ${READY_TIMEOUT}s (end of $dir/redis.log above)"
    fi
}

wait_for() {
    local what="$1" deadline=$((SECONDS + READY_TIMEOUT))
    shift
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || die "$what not ready within ${READY_TIMEOUT}s"
        sleep 0.2
    done
}

wait_for_redis() {
    local deadline=$((SECONDS + READY_TIMEOUT))
    until [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = "PONG" ]; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

write_env() {
    local dir="$1" port
    {
        echo "export RACKPLANE_RUNTIME_DIR='$dir'"
        if [ -f "$dir/postgres.port" ]; then
            port="$(cat "$dir/postgres.port")"
            echo "export DATABASE_URL='postgres://$DB_USER@127.0.0.1:$port/$DB_NAME'"
            echo "export PGHOST=127.0.0.1 PGPORT=$port PGUSER=$DB_USER PGDATABASE=$DB_NAME"
        fi
        if [ -f "$dir/redis.port" ]; then
            port="$(cat "$dir/redis.port")"
            echo "export REDIS_URL='redis://127.0.0.1:$port/0'"
            echo "export CELERY_TEST_BROKER_URL='redis://127.0.0.1:$port/1'"
        fi
    } >"$dir/env"
}

stop_postgres() {
    local dir="$1" bindir
    [ -f "$dir/pgdata/postmaster.pid" ] || return 0
    bindir="$(find_pg_bindir)" || die "cannot stop PostgreSQL in $dir: pg_ctl not found"
    log "postgres: stopping"
    if ! pg_user_run "$bindir/pg_ctl" -D "$dir/pgdata" -m fast -w -t 30 stop >/dev/null 2>&1; then
        log "postgres: fast shutdown failed, sending SIGQUIT"
        kill -QUIT "$(head -n 1 "$dir/pgdata/postmaster.pid")" 2>/dev/null || true
    fi
}

stop_redis() {
    local dir="$1" pid deadline
    [ -f "$dir/redis.pid" ] || return 0
    pid="$(cat "$dir/redis.pid")"
    log "redis: stopping"
    if [ -f "$dir/redis.port" ]; then
        redis-cli -h 127.0.0.1 -p "$(cat "$dir/redis.port")" shutdown nosave >/dev/null 2>&1 || true
    fi
    deadline=$((SECONDS + 15))
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        kill -TERM "$pid" 2>/dev/null || true
        sleep 0.2
    done
    rm -f "$dir/redis.pid"
}

cmd_start() {
    local dir
    if [ -n "${1:-}" ]; then
        mkdir -p "$1"
        dir="$(cd "$1" && pwd)"
    else
        dir="$(mktemp -d -t rackplane-services.XXXXXX)"
    fi
    [[ "$dir" != *[[:space:]]* ]] || die "the runtime directory must not contain white space: '$dir'"
    [ -z "$(ls -A "$dir")" ] || die "runtime directory $dir is not empty"
    # Marks the directory as ours: `stop` removes only such a directory.
    touch "$dir/.rackplane-services"
    # Leave nothing running if any step fails.
    trap 'status=$?; if [ $status -ne 0 ]; then cmd_stop_dir "$dir"; fi' EXIT
    wants postgres && start_postgres "$dir"
    wants redis && start_redis "$dir"
    write_env "$dir"
    trap - EXIT
    log "services ready in $dir ($SERVICES); environment in $dir/env"
    echo "$dir"
}

cmd_stop_dir() {
    local dir="$1"
    stop_redis "$dir" || true
    stop_postgres "$dir" || true
    if [ "${RACKPLANE_KEEP_RUNTIME:-0}" = "1" ]; then
        log "kept $dir"
    else
        rm -rf "$dir"
    fi
}

cmd_status() {
    local dir="$1" ok=0 bindir
    if [ -f "$dir/postgres.port" ]; then
        bindir="$(find_pg_bindir)" || true
        if "$bindir/pg_isready" -q -h 127.0.0.1 -p "$(cat "$dir/postgres.port")"; then
            echo "postgres: up on 127.0.0.1:$(cat "$dir/postgres.port")"
        else
            echo "postgres: DOWN"
            ok=1
        fi
    fi
    if [ -f "$dir/redis.port" ]; then
        if [ "$(redis-cli -h 127.0.0.1 -p "$(cat "$dir/redis.port")" ping 2>/dev/null)" = "PONG" ]; then
            echo "redis: up on 127.0.0.1:$(cat "$dir/redis.port")"
        else
            echo "redis: DOWN"
            ok=1
        fi
    fi
    return $ok
}

case "${1:-}" in
start) cmd_start "${2:-}" ;;
stop | env | status)
    dir="$(runtime_dir_arg "${2:-}")"
    case "$1" in
    stop) cmd_stop_dir "$dir" ;;
    env) cat "$dir/env" ;;
    status) cmd_status "$dir" ;;
    esac
    ;;
*)
    echo "usage: $0 start [DIR] | stop [DIR] | env [DIR] | status [DIR]" >&2
    exit 2
    ;;
esac
