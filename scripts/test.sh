#!/usr/bin/env bash
# The whole check, from a fresh machine: system packages, .venv, real PostgreSQL and Redis on loopback, a real
# Slurm 24.11 controller with 18 fake GPU nodes (scripts/slurm-testbed.sh, in a chroot), a real Kubernetes API
# server with the CRDs and Rackplane's RBAC (scripts/kube-testbed.sh, built from Go modules), a real OpenID
# Provider and OpenLDAP directory for the sign-in tests (scripts/idp-testbed.sh), then lint, format,
# the import-layer contracts (import-linter), migrations and the full pytest suite (browser tests included) on PostgreSQL. The services are always stopped.
# The suite includes the bounded schemathesis run of the API against its OpenAPI document
# (tests/test_openapi_fuzz.py, a member's, an admin's and the node agent's token); `make fuzz` is the long one.
# The production-stack tests (tests/stack, also `make test-stack`) run in the same pytest run: they start
# their own PostgreSQL, Redis, gunicorn replicas, Celery workers and beat, whatever the services below are.
# Extra arguments go to pytest (e.g. `scripts/test.sh tests/e2e -x`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

started=$SECONDS
bash scripts/system-deps.sh
# The Go-built servers (on a new machine: minutes of compiling, then cached in ~/.cache/rackplane) build in the
# background while the Python environment, the services, the Slurm chroot and the identity testbed are set up.
go_builds_log="$(mktemp -t rackplane-go-builds.XXXXXX)"
(bash scripts/kube-testbed.sh build && bash scripts/kube-testbed.sh kueue-build && bash scripts/helm.sh build) \
    >"$go_builds_log" 2>&1 &
go_builds=$!
bash scripts/venv.sh test

runtime=""
slurm_testbed=""
kube_testbed=""
idp_testbed=""
cleanup() {
    local status=$?
    if [ -n "$idp_testbed" ] && [ -f "$idp_testbed/.rackplane-idp-testbed" ]; then
        bash scripts/idp-testbed.sh stop "$idp_testbed" || log "warning: stopping the identity testbed failed"
    elif [ -n "$idp_testbed" ]; then
        rmdir "$idp_testbed" 2>/dev/null || true
    fi
    if [ -n "$kube_testbed" ] && [ -f "$kube_testbed/.rackplane-kube-testbed" ]; then
        bash scripts/kube-testbed.sh stop "$kube_testbed" || log "warning: stopping the Kubernetes testbed failed"
    elif [ -n "$kube_testbed" ]; then
        rmdir "$kube_testbed" 2>/dev/null || true
    fi
    if [ -n "$slurm_testbed" ] && [ -f "$slurm_testbed/.rackplane-slurm-testbed" ]; then
        RACKPLANE_SLURM_LOGS_TO="$REPO_ROOT/var/test-artifacts/slurm-testbed" \
            bash scripts/slurm-testbed.sh stop "$slurm_testbed" || log "warning: stopping the Slurm testbed failed"
    elif [ -n "$slurm_testbed" ]; then
        rmdir "$slurm_testbed" 2>/dev/null || true
    fi
    if [ -n "$runtime" ]; then
        bash scripts/services.sh stop "$runtime" || log "warning: stopping the services failed"
    fi
    rm -f "${go_builds_log:-}"
    log "finished in $((SECONDS - started))s with status $status"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

runtime="$(bash scripts/services.sh start)"
# shellcheck disable=SC1091
source "$runtime/env"
export PATH="$REPO_ROOT/.venv/bin:$PATH"
# Celery stays eager: the broker is only for tests that ask for CELERY_TEST_BROKER_URL themselves.
unset CELERY_BROKER_URL

failed=()
# Slurm 24.11 in a chroot (tests/integration/test_slurm_target.py). If it cannot start, everything else still
# runs; the Slurm tests then fail saying the testbed is missing, and the summary names this step.
log "== slurm testbed: scripts/slurm-testbed.sh start"
slurm_testbed="$(mktemp -d -t rackplane-slurm.XXXXXX)"
if bash scripts/slurm-testbed.sh start "$slurm_testbed" >/dev/null; then
    # shellcheck disable=SC1091
    source "$slurm_testbed/env"
else
    failed+=("slurm testbed")
    log "warning: the Slurm testbed did not start (messages above); Slurm integration tests will fail"
fi

# A real kube-apiserver + etcd built from the Go modules (first run: a few minutes; then cached in ~/.cache/rackplane),
# and the Kueue controller that tests/integrations/kubernetes/test_kueue.py starts on it (kueue-start).
log "== kubernetes testbed and helm: waiting for their builds (started in the background)"
if ! wait "$go_builds"; then
    log "warning: building the Go servers failed:"
    tail -n 30 "$go_builds_log" >&2
fi
rm -f "$go_builds_log"
log "== kubernetes testbed: scripts/kube-testbed.sh start"
kube_testbed="$(mktemp -d -t rackplane-kube.XXXXXX)"
if bash scripts/kube-testbed.sh start "$kube_testbed" >/dev/null; then
    # shellcheck disable=SC1091
    source "$kube_testbed/env"
else
    failed+=("kubernetes testbed")
    log "warning: the Kubernetes testbed did not start (messages above); Kubernetes integration tests will fail"
fi

# Helm built from its Go module (first run: a few minutes; then cached in ~/.cache/rackplane/helm) for the chart checks
# (tests/deploy/test_helm.py: lint, template, server-side dry run and apply on the Kubernetes testbed).
log "== helm: scripts/helm.sh build"
if ! bash scripts/helm.sh build >/dev/null; then
    failed+=("helm build")
    log "warning: building Helm failed (messages above); the chart tests will fail"
fi

# An OpenID Provider (oidc-provider from npm, run by Node.js; first run: an npm install into ~/.cache/rackplane) and
# OpenLDAP's slapd with a small directory, for the sign-in tests (tests/identity, tests/e2e/test_sign_in.py).
log "== identity testbed: scripts/idp-testbed.sh start"
idp_testbed="$(mktemp -d -t rackplane-idp.XXXXXX)"
if bash scripts/idp-testbed.sh start "$idp_testbed" >/dev/null; then
    # shellcheck disable=SC1091
    source "$idp_testbed/env"
else
    failed+=("identity testbed")
    log "warning: the identity testbed did not start (messages above); the sign-in tests will fail"
fi

python - <<'PY'
import django, os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DEBUG", "1")
django.setup()
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("SELECT version()")
    print(f"[test.sh] database: {connection.vendor} {connection.settings_dict['HOST']}:"
          f"{connection.settings_dict['PORT']} ({cursor.fetchone()[0].split(',')[0]})")
PY

compile_tests &
compiling=$!
static_checks
wait "$compiling"
# The browser tests' screenshots (desktop and 390 px, light and dark) are kept as the run's artefacts.
if [ -z "${RACKPLANE_SCREENSHOTS:-}" ]; then
    export RACKPLANE_SCREENSHOTS="$REPO_ROOT/var/test-artifacts/screenshots"
    rm -rf "$RACKPLANE_SCREENSHOTS"  # this run's only
fi
mkdir -p "$RACKPLANE_SCREENSHOTS"
# Each worker's tests on a timeline (tests/timeline.py): pytest ends with where the time went, per worker and
# per group of tests sharing a service.
export RACKPLANE_TEST_TIMELINE="${RACKPLANE_TEST_TIMELINE:-$REPO_ROOT/var/test-artifacts/timeline}"
pytest_status=0
log "== pytest"
pytest_started=$SECONDS
# shellcheck disable=SC2046
coverage_args=()
# `make coverage`: the same run, measuring which lines of the product code the tests execute.
[ "${RACKPLANE_COVERAGE:-0}" = 1 ] && coverage_args=(--cov --cov-report=term --cov-report=json:var/coverage.json)
pytest -p no:cacheprovider $(parallel_pytest_args extra) "${coverage_args[@]}" "$@" || pytest_status=$?
log "pytest took $((SECONDS - pytest_started)) s (the goal: at most 12 minutes on 2 cores)"
log "screenshots of the browser tests: $(find "$RACKPLANE_SCREENSHOTS" -name '*.png' | wc -l) in $RACKPLANE_SCREENSHOTS"

if [ "$pytest_status" -ne 0 ]; then
    failed+=("pytest (exit $pytest_status)")
fi
if [ "${#failed[@]}" -ne 0 ]; then
    log "FAILED: ${failed[*]}"
    [ "$pytest_status" -ne 0 ] && exit "$pytest_status"
    exit 1
fi
log "all checks passed"
