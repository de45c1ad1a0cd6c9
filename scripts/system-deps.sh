#!/usr/bin/env bash
# Install the Debian packages the test suite needs, if missing: PostgreSQL's server, Redis, Chromium,
# openssl + curl for the Kubernetes testbed's certificates and readiness checks, OpenLDAP's slapd and
# ldap-utils for the identity testbed (scripts/idp-testbed.sh), the libldap/libsasl headers python-ldap
# (django-auth-ldap) builds against, Node.js + npm, which run the test OpenID Provider, and Prometheus, which
# the telemetry tests start themselves (tests/tenancy/prometheus_server.py). (Go, which builds the test
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
# Debian keeps slapd and slapadd in /usr/sbin.
PATH="$PATH:/usr/sbin" command -v slapd >/dev/null || missing+=(slapd)
command -v ldapsearch >/dev/null || missing+=(ldap-utils)
command -v prometheus >/dev/null || missing+=(prometheus)
[ -f /usr/include/ldap.h ] || missing+=(libldap2-dev)
[ -f /usr/include/sasl/sasl.h ] || missing+=(libsasl2-dev)
# A Japanese font, so the browser tests' screenshots of the Japanese pages show text, not empty boxes; GNU
# gettext, whose xgettext the catalogue test runs (tests/portal/test_i18n.py, `make messages`).
[ -d /usr/share/fonts/opentype/ipafont-gothic ] || missing+=(fonts-ipafont-gothic)
command -v xgettext >/dev/null || missing+=(gettext)
# Node.js 20.12+ with npm (NodeSource's nodejs package bundles npm; Debian's needs its npm package).
if ! command -v node >/dev/null; then
    missing+=(nodejs)
elif ! command -v npm >/dev/null; then
    missing+=(npm)
fi

if [ "${#missing[@]}" -eq 0 ]; then
    log "system packages present (postgresql, redis-server, chromium, openssl, curl, slapd, ldap-utils, libldap2-dev, libsasl2-dev, fonts-ipafont-gothic, gettext, nodejs, prometheus)"
    exit 0
fi

command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them with"
log "installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
# Prometheus without its recommends (node exporter, alertmanager ...): the tests need only the server binary.
others=()
for package in "${missing[@]}"; do [ "$package" = prometheus ] || others+=("$package"); done
if [ "${#others[@]}" -gt 0 ]; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${others[@]}"
fi
if [ "${#others[@]}" -lt "${#missing[@]}" ]; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus
fi

find_pg_bindir >/dev/null || die "postgresql installed, but initdb still cannot be found"
command -v redis-server >/dev/null || die "redis-server installed, but it is not on PATH"
command -v chromium >/dev/null || die "chromium installed, but it is not on PATH"
command -v prometheus >/dev/null || die "prometheus installed, but it is not on PATH"
