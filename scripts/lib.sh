# Shared helpers for the scripts in this folder; source it, don't run it.
# shellcheck shell=bash

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Built test servers (kube-apiserver + etcd, Helm, the Slurm chroot, the OpenID Provider) are cached by version in
# the user's cache directory, not in the clone: a fresh clone on the same machine reuses them (RACKPLANE_CACHE_DIR
# moves it).
RACKPLANE_CACHE="${RACKPLANE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rackplane}"

log() { printf '[%s] %s\n' "$(basename "$0")" "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# The directory holding PostgreSQL's server programs (initdb, pg_ctl, postgres), or nothing.
# Debian keeps them out of PATH (in a per-version directory), so ask the tools where they are.
find_pg_bindir() {
    local dir candidate
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dir="$(dirname "$(readlink -f "$(command -v initdb)")")"
        [ -x "$dir/pg_ctl" ] && { echo "$dir"; return 0; }
    fi
    if command -v pg_config >/dev/null 2>&1; then
        dir="$(pg_config --bindir 2>/dev/null || true)"
        [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && { echo "$dir"; return 0; }
    fi
    # pg_config may come from an older client than the server: ask dpkg where the server put initdb.
    if command -v dpkg-query >/dev/null 2>&1; then
        candidate="$(dpkg-query -S '*/bin/initdb' 2>/dev/null | sed -n 's/^[^:]*: //p' | sort -V | tail -n 1 || true)"
        if [ -n "$candidate" ] && [ -x "$candidate" ] && [ -x "$(dirname "$candidate")/pg_ctl" ]; then
            dirname "$candidate"
            return 0
        fi
    fi
    return 1
}

# Run a command as root: directly when we are root, through sudo when it is there.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@" || sudo "$@"
    else
        die "'$*' needs root, and this user is not root and has no sudo"
    fi
}

# Run a named check, remember it in `failed` when it fails, and go on (the summary names every failure).
# Callers declare `failed=()` first.
step() {
    local name="$1"
    shift
    log "== $name: $*"
    "$@" || failed+=("$name")
}

# Python writes its bytecode even where the machine's image says not to (PYTHONDONTWRITEBYTECODE): otherwise
# every test worker rewrites the asserts of every test module again (about 10 s of CPU each, pytest keeps the
# result in __pycache__), and every process the tests start compiles the portal again.
unset PYTHONDONTWRITEBYTECODE

# Collect the tests once in the background (pytest rewrites their asserts and writes them to __pycache__)
# while the static checks run; `wait "$compiling"` before pytest. The workers then import them from there.
# Only when more than a few test modules lack current bytecode (a fresh clone, a new pytest): otherwise the
# workers rewrite the few themselves, and this collection would be six seconds of waiting for nothing.
compile_tests() {
    local stale
    stale="$(python scripts/stale_test_bytecode.py tests 2>/dev/null || echo all)"
    if [ "$stale" = all ] || [ "$stale" -gt 20 ]; then
        pytest -p no:cacheprovider --collect-only -q "$@" >/dev/null 2>&1 || true
    fi
}

# The checks that need no service: lint, format, the import-layer contracts, types at the seams (mypy over
# the modules pyproject.toml lists), migrations in step with models, and the documentation site (strict: a
# broken link or a page outside the navigation fails it).
static_checks() {
    step "ruff check" ruff check .
    step "ruff format" ruff format --check .
    step "import layers" lint-imports
    step "types" mypy
    step "migrations" env DEBUG=1 python manage.py makemigrations --check --dry-run
    step "docs site" mkdocs build --strict --quiet
}

# pytest in parallel (pytest-xdist). `make test` takes one worker per core and two more (its argument
# "extra"), since most of its tests' time is spent waiting on a browser, a server or a subprocess rather
# than computing (tests/timeline.py: each worker's CPU time is about a third of its busy time; on 2 cores 4
# workers ran the suite in 12 min 5 s where 3 took 14 min 13 s); `make test-fast`, all computing, one per
# core. Tests that share a service (the Slurm or Kubernetes testbed,
# the identity providers, the production stack, `make run`'s stack) run in one worker, one after another
# (`--dist loadgroup`; the groups are set in tests/conftest.py). RACKPLANE_TEST_WORKERS=0 runs in one process.
parallel_pytest_args() {
    local extra=0
    [ "${1:-}" = extra ] && extra=2
    local workers="${RACKPLANE_TEST_WORKERS:-$(($(nproc) + extra))}"
    if [ "$workers" = 0 ]; then
        return 0
    fi
    echo "-n $workers --dist loadgroup"
}

# A free TCP port on loopback (the testbeds and services pick theirs at start).
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Whether the process whose PID is in the file is alive.
pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# Stop the process whose PID is in the file (TERM, up to 5 s, then KILL) and remove the file.
stop_pid() {
    local file="$1" pid i
    [ -f "$file" ] || return 0
    pid="$(cat "$file")"
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for i in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$file"
}
