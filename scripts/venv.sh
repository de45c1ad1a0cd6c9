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
    # python-ldap (django-auth-ldap, a base dependency) builds against libldap's and libsasl's headers: a new
    # machine has neither, and `make run` / `make test-fast` must work there too (scripts/system-deps.sh
    # installs them with the rest of what `make test` needs).
    build_deps=()
    [ -f /usr/include/ldap.h ] || build_deps+=(libldap2-dev)
    [ -f /usr/include/sasl/sasl.h ] || build_deps+=(libsasl2-dev)
    if [ "${#build_deps[@]}" -gt 0 ]; then
        command -v apt-get >/dev/null || die "python-ldap needs ${build_deps[*]} (headers) and there is no apt-get"
        log "installing the headers python-ldap builds against: ${build_deps[*]}"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${build_deps[@]}"
    fi
    spec="."
    [ -n "$extras" ] && spec=".[$extras]"
    log "pip install -e \"$spec\""
    "$venv/bin/python" -m pip install --disable-pip-version-check -q -e "$spec"
    echo "$want" >"$stamp"
    # An install with extras also installs the base dependencies.
    [ -n "$extras" ] && echo "$want" >"$(stamp_of "")"
fi
exit 0
