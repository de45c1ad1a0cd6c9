#!/usr/bin/env bash
# `make test-stack`: the production-stack tests (tests/stack) on their own: several replicas, the four fault
# tests, the upgrade from the previous release and backup/restore. They start everything they need
# themselves: a throwaway PostgreSQL and Redis (scripts/services.sh), gunicorn replicas, Celery workers and
# the beat (`rackplane serve|worker|beat`), and stop it all when they end. `make test` runs the same tests in
# its pytest run (they are marked `integration` and `slow`, which `make test-fast` skips).
# Extra arguments go to pytest (e.g. `scripts/test-stack.sh -k redis -x`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

started=$SECONDS
if ! find_pg_bindir >/dev/null || ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    bash scripts/system-deps.sh
fi
bash scripts/venv.sh test
export PATH="$REPO_ROOT/.venv/bin:$PATH"
status=0
pytest -p no:cacheprovider tests/stack "$@" || status=$?
log "finished in $((SECONDS - started))s with status $status"
exit "$status"
