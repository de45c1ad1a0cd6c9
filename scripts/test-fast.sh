#!/usr/bin/env bash
# The quick check while working, in under 90 seconds on 2 cores and with no service to start: ruff (lint and
# format), the import-layer contracts, mypy, migrations, the docs site, and pytest on SQLite, in parallel,
# without the browser tests (e2e), the ones that need a real service (integration) and the ones marked slow
# (each says why: subprocesses, generated cases, trace replays, grown data). The migrated test database is kept
# while the migrations do not change (tests/conftest.py).
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
compile_tests &
compiling=$!
static_checks
wait "$compiling"
# shellcheck disable=SC2046
step "pytest" pytest -p no:cacheprovider $(parallel_pytest_args) -m "not e2e and not integration and not slow" "$@"

log "finished in $((SECONDS - started))s"
if [ "${#failed[@]}" -ne 0 ]; then
    log "FAILED: ${failed[*]}"
    exit 1
fi
log "all fast checks passed (run \`make test\` for the full suite)"
