#!/usr/bin/env bash
# The quick check while working, in about three minutes and with no service to start: ruff (lint and format), the
# import-layer contracts, migrations, and pytest on SQLite without the browser tests (e2e), the ones that need
# a real service (integration) and the ones marked slow (scale benchmark, subprocess start-ups, trace replays).
# `make test` runs everything, on PostgreSQL, and is what must pass before a commit.
# Extra arguments go to pytest (e.g. `scripts/test-fast.sh tests/tenancy -x`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

started=$SECONDS
bash scripts/venv.sh test
export PATH="$REPO_ROOT/.venv/bin:$PATH"
# SQLite and Celery eager, whatever the shell has exported for `make run` or a PostgreSQL session.
unset DATABASE_URL CELERY_BROKER_URL

failed=()
static_checks
step "pytest" pytest -p no:cacheprovider -m "not e2e and not integration and not slow" "$@"

log "finished in $((SECONDS - started))s"
if [ "${#failed[@]}" -ne 0 ]; then
    log "FAILED: ${failed[*]}"
    exit 1
fi
log "all fast checks passed (run \`make test\` for the full suite)"
