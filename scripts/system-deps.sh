#!/usr/bin/env bash
# Install the Debian packages the test suite needs, if missing: PostgreSQL's server, Redis, Chromium, and
# openssl + curl for the Kubernetes testbed's certificates and readiness checks. (Go, which builds the test
# API server once, is not taken from Debian: bookworm's is too old for Kubernetes 1.36; the script says so.)
# Runs `apt-get update` only when something has to be installed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

missing=()
find_pg_bindir >/dev/null || missing+=(postgresql)
{ command -v redis-server >/dev/null && command -v redis-cli >/dev/null; } || missing+=(redis-server)
command -v chromium >/dev/null || missing+=(chromium)
command -v openssl >/dev/null || missing+=(openssl)
command -v curl >/dev/null || missing+=(curl)

if [ "${#missing[@]}" -eq 0 ]; then
    log "system packages present (postgresql, redis-server, chromium, openssl, curl)"
    exit 0
fi

command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them with"
log "installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"

find_pg_bindir >/dev/null || die "postgresql installed, but initdb still cannot be found"
command -v redis-server >/dev/null || die "redis-server installed, but it is not on PATH"
command -v chromium >/dev/null || die "chromium installed, but it is not on PATH"
