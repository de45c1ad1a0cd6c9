#!/usr/bin/env bash
# Create .venv (if missing) and install the project into it, editable.
# Usage: scripts/venv.sh [EXTRAS]   e.g. `scripts/venv.sh test` installs ".[test]".
# Re-installs only when pyproject.toml changed since the last install of those extras (stamp files in .venv).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

PYTHON="${PYTHON:-python3}"
extras="${1:-}"
venv=".venv"

if ! "$venv/bin/python" -c "" >/dev/null 2>&1; then
    command -v "$PYTHON" >/dev/null || die "$PYTHON not found (set PYTHON to a Python 3.11+ interpreter)"
    log "creating $venv with $("$PYTHON" --version 2>&1)"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
fi

stamp_of() { echo "$venv/.rackplane-installed${1:+-$1}"; }
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
stamp="$(stamp_of "$extras")"

if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
    spec="."
    [ -n "$extras" ] && spec=".[$extras]"
    log "pip install -e \"$spec\""
    "$venv/bin/python" -m pip install --disable-pip-version-check -q -e "$spec"
    echo "$want" >"$stamp"
    # An install with extras also installs the base dependencies.
    [ -n "$extras" ] && echo "$want" >"$(stamp_of "")"
fi
exit 0
