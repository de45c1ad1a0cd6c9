#!/usr/bin/env bash
# `make bench`: the scale benchmark with the real stack, from a fresh clone. Installs PostgreSQL, Redis and
# Prometheus (the telemetry part; scripts/system-deps.sh) only when they are missing, makes .venv, then
# runs benchmarks/scale.py, which starts its own throwaway PostgreSQL + Redis (scripts/services.sh), gunicorn,
# a Celery worker and (telemetry) Prometheus, and stops them all when it ends. Arguments go to scale.py
# (e.g. `--racks 20`); the JSON figures go to stdout.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$REPO_ROOT"

if ! find_pg_bindir >/dev/null || ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null \
    || ! command -v prometheus >/dev/null; then
    bash scripts/system-deps.sh >&2
fi
bash scripts/venv.sh >&2
# `--only capacity`: requests/s and p95 with 1, 2 and 4 gunicorn workers (benchmarks/capacity.py).
if [ "${1:-}" = "--only" ] && [ "${2:-}" = "capacity" ]; then
    exec .venv/bin/python benchmarks/capacity.py "$@"
fi
exec .venv/bin/python benchmarks/scale.py "$@"
