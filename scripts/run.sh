#!/usr/bin/env bash
# `make run`: the portal on http://127.0.0.1:8000 with the embedded defaults: development mode (DEBUG=1),
# SQLite under var/, Celery eager. Safe to run again: migrate, seed_demo and ensure_admin are idempotent.
# DATABASE_URL, CELERY_BROKER_URL and RACKPLANE_ADDR (default 127.0.0.1:8000) from the environment still win.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

bash scripts/venv.sh
export DEBUG="${DEBUG:-1}"
addr="${RACKPLANE_ADDR:-127.0.0.1:8000}"
py=".venv/bin/python"

"$py" manage.py migrate --no-input
"$py" manage.py seed_demo
"$py" manage.py ensure_admin
log "serving http://$addr/ (Ctrl-C stops)"
exec "$py" manage.py runserver "$addr"
