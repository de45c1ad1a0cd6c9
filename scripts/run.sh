#!/usr/bin/env bash
# `make run`: the portal on http://127.0.0.1:8000 with the embedded defaults: development mode (DEBUG=1),
# SQLite under var/, and the real Celery worker and beat on kombu's filesystem broker (var/celery/, no
# server). It writes var/dev.env first, so manage.py and celery run by hand in this clone use the same
# settings (portal/settings.py reads it). Safe to run again: migrate, seed_demo and ensure_admin are idempotent.
# DEBUG, DATABASE_URL, CELERY_BROKER_URL and RACKPLANE_ADDR (default 127.0.0.1:8000) from the environment win.
# Ctrl-C (SIGINT) or SIGTERM stops the server, the worker and the beat.
# `scripts/run.sh --prepare` does everything up to starting the processes (tests/test_readme_commands.py).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

bash scripts/venv.sh
addr="${RACKPLANE_ADDR:-127.0.0.1:8000}"
py=".venv/bin/python"

mkdir -p var/log var/celery
{
    echo "# Written by \`make run\` (scripts/run.sh): development settings for this clone. Variables set in"
    echo "# the environment win; RACKPLANE_DEV_ENV=0 ignores this file. Delete it to leave development mode."
    echo "DEBUG=${DEBUG:-1}"
    echo "CELERY_BROKER_URL=${CELERY_BROKER_URL:-filesystem://}"
    # The demo's simulated DCGM exporters: every minute a sample for every GPU of a tray that is not down
    # (portal.tasks), held or not.
    echo "RACKPLANE_DEMO_TELEMETRY=${RACKPLANE_DEMO_TELEMETRY:-1}"
    [ -n "${DATABASE_URL:-}" ] && echo "DATABASE_URL=$DATABASE_URL"
    true
} >var/dev.env.tmp
mv var/dev.env.tmp var/dev.env
export RACKPLANE_DEV_ENV="$REPO_ROOT/var/dev.env"

"$py" manage.py migrate --no-input
"$py" manage.py seed_demo
"$py" manage.py ensure_admin
[ "${1:-}" = "--prepare" ] && exit 0

# Messages consumed by earlier runs (the filesystem broker keeps what it delivered in processed/).
rm -rf var/celery/processed
mkdir -p var/celery/processed
# A message a producer died while writing (portal.broker writes it as <name>.msg.part, then renames it).
rm -f var/celery/queue/*.part

# Each process in its own process group (setsid), so stopping one stops its children too.
pgids=()
stop() {
    # A second signal must not cut the stopping short (make forwards its own SIGTERM right after the SIGINT
    # of a Ctrl-C): ignore them until the three are gone.
    trap '' INT TERM
    trap - EXIT
    log "stopping the server, the worker and the beat"
    for pgid in "${pgids[@]}"; do kill -TERM -- "-$pgid" 2>/dev/null || true; done
    # The worker finishes the tasks it runs (warm shutdown); whatever is left after 10 s is killed.
    for _ in $(seq 50); do
        alive=0
        for pgid in "${pgids[@]}"; do kill -0 -- "-$pgid" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.2
    done
    for pgid in "${pgids[@]}"; do kill -KILL -- "-$pgid" 2>/dev/null || true; done
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Two worker threads: SQLite has one writer at a time, and the 2 cores are shared with the web server.
setsid "$py" -m celery -A portal worker --pool threads --concurrency 2 --without-mingle --without-gossip \
    --loglevel INFO >>var/log/celery-worker.log 2>&1 </dev/null &
pgids+=("$!")
setsid "$py" -m celery -A portal beat --loglevel INFO >>var/log/celery-beat.log 2>&1 </dev/null &
pgids+=("$!")
log "Celery worker and beat started: logs in var/log/celery-worker.log and var/log/celery-beat.log"

log "serving http://$addr/ (Ctrl-C stops the server, the worker and the beat)"
setsid "$py" manage.py runserver "$addr" </dev/null &
pgids+=("$!")
# `wait` returns when a trapped signal arrives (a foreground command would delay the trap until it ends),
# or when any of the three exits: then the others are stopped too.
wait -n || true
log "the server, the worker or the beat exited (logs in var/log/); stopping the others"
