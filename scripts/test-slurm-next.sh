#!/usr/bin/env bash
# `make test-slurm-next`: the Slurm tests (tests/integration, tests/integrations/slurm) against the newest
# Slurm Debian carries: a second testbed built from Debian sid (Slurm 26.05.5 in November 2026; forky has the
# same) by scripts/slurm-testbed.sh with RACKPLANE_SLURM_SUITE=sid, its chroot cached beside trixie's. `make
# test` keeps Slurm 24.11 (trixie): both releases in one run would not fit its 12 minutes on 2 cores.
# Measured on 2 cores: the testbed starts in 71 s the first time (debootstrap), 3 to 5 s from its cache;
# pytest 2 min 34 s to 3 min 17 s (235 tests; RACKPLANE_SLURM_SUITE=trixie: 2 min 23 s). The tests run on
# SQLite (no PostgreSQL needed); the testbed is always stopped.
# RACKPLANE_SLURM_SUITE picks another suite (trixie reruns the default's). Extra arguments go to pytest;
# ones naming tests replace the Slurm ones (`scripts/test-slurm-next.sh tests/integration/test_slurm_versions.py`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

started=$SECONDS
command -v debootstrap >/dev/null || bash scripts/system-deps.sh
bash scripts/venv.sh test
export PATH="$REPO_ROOT/.venv/bin:$PATH"
export RACKPLANE_SLURM_SUITE="${RACKPLANE_SLURM_SUITE:-sid}"

testbed="$(mktemp -d -t rackplane-slurm-next.XXXXXX)"
cleanup() {
    local status=$?
    if [ -f "$testbed/.rackplane-slurm-testbed" ]; then
        RACKPLANE_SLURM_LOGS_TO="$REPO_ROOT/var/test-artifacts/slurm-testbed-next" \
            bash scripts/slurm-testbed.sh stop "$testbed" || log "warning: stopping the Slurm testbed failed"
    else
        rmdir "$testbed" 2>/dev/null || true
    fi
    log "finished in $((SECONDS - started))s with status $status"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "== slurm testbed ($RACKPLANE_SLURM_SUITE): scripts/slurm-testbed.sh start"
testbed_started=$SECONDS
bash scripts/slurm-testbed.sh start "$testbed" >/dev/null
log "the testbed started in $((SECONDS - testbed_started)) s"
# shellcheck disable=SC1091
source "$testbed/env"
# Every Slurm test, unless the arguments name tests (tests/...): then only those.
paths=(tests/integration tests/integrations/slurm)
for arg in "$@"; do
    case "$arg" in tests/*) paths=() ;; esac
done
# shellcheck disable=SC2046
pytest -p no:cacheprovider $(parallel_pytest_args) "${paths[@]}" "$@"
