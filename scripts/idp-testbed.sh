#!/usr/bin/env bash
# Real identity providers on loopback, for the sign-in tests: an OpenID Provider and an LDAP directory.
#
#   scripts/idp-testbed.sh build          install the OpenID Provider into ~/.cache/rackplane/idp-testbed/ (once)
#   scripts/idp-testbed.sh start  [DIR]   build if needed, start both in DIR (default: a new `mktemp -d`); prints DIR
#   scripts/idp-testbed.sh env    [DIR]   print the `export ...` lines for them (also in DIR/env)
#   scripts/idp-testbed.sh status [DIR]   tell whether both answer (exit 1 if not)
#   scripts/idp-testbed.sh restart-oidc [DIR]  restart the OpenID Provider (same port, keys and accounts file)
#   scripts/idp-testbed.sh stop   [DIR]   stop both and remove DIR (safe to run twice)
#
# DIR defaults to $RACKPLANE_IDP_TESTBED for everything but start.
#
# OpenID Provider: panva's certified `oidc-provider` (testbed/oidc-provider: package.json, the committed
# package-lock.json that pins every package, and server.mjs), installed from the npm registry with `npm ci`
# into ~/.cache/rackplane/idp-testbed/<hash of those files>/ on the first start, and run by Node.js (20.12 or newer).
# It serves a real login page; its clients and accounts (passwords, groups) are DIR/oidc/provider.json,
# which it re-reads at every use: tests change a person's groups, or register their live server's callback
# URL, by rewriting that file. Authorization code flow, PKCE required, RS256 ID tokens (key in DIR/oidc).
#
# LDAP: Debian's OpenLDAP `slapd` (scripts/system-deps.sh installs it), started as this user on a loopback
# port with its own config and an mdb database in DIR/ldap, loaded with slapadd from
# testbed/ldap/directory.ldif: people (ada, grace), groups (groupOfNames), and Rackplane's read-only service
# account. No system service, no privileged port.
#
# DIR/env exports:
#   RACKPLANE_IDP_TESTBED                DIR
#   RACKPLANE_IDP_OIDC_ISSUER            http://127.0.0.1:<port>
#   RACKPLANE_IDP_OIDC_DISCOVERY_URL     <issuer>/.well-known/openid-configuration
#   RACKPLANE_IDP_OIDC_CLIENT_ID         rackplane
#   RACKPLANE_IDP_OIDC_CLIENT_SECRET     the client's secret (made at start)
#   RACKPLANE_IDP_OIDC_CONFIG            DIR/oidc/provider.json (clients and accounts)
#   RACKPLANE_IDP_LDAP_URI               ldap://127.0.0.1:<port>
#   RACKPLANE_IDP_LDAP_BIND_DN, RACKPLANE_IDP_LDAP_BIND_PASSWORD    Rackplane's read-only service account
#   RACKPLANE_IDP_LDAP_ADMIN_DN, RACKPLANE_IDP_LDAP_ADMIN_PASSWORD  the directory's admin, for test set-up
#   RACKPLANE_IDP_LDAP_BASE, RACKPLANE_IDP_LDAP_USERS, RACKPLANE_IDP_LDAP_GROUPS   the suffix, people, groups
#
# Settings: RACKPLANE_KEEP_RUNTIME=1 (stop keeps DIR and its logs), RACKPLANE_READY_TIMEOUT (seconds, 30).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OIDC_DIR="$REPO_ROOT/testbed/oidc-provider"
LDIF="$REPO_ROOT/testbed/ldap/directory.ldif"
CACHE_ROOT="$RACKPLANE_CACHE/idp-testbed"
MARKER=".rackplane-idp-testbed"
READY_TIMEOUT="${RACKPLANE_READY_TIMEOUT:-30}"
NODE_MINIMUM="20.12"
SUFFIX="dc=rackplane,dc=test"
CLIENT_ID="rackplane"
# Debian keeps slapd and slapadd in /usr/sbin, which a non-root PATH may lack.
export PATH="$PATH:/usr/sbin:/usr/local/sbin"

testbed_dir_arg() {
    local dir="${1:-${RACKPLANE_IDP_TESTBED:-}}"
    [ -n "$dir" ] || die "no testbed directory: pass it as an argument or set RACKPLANE_IDP_TESTBED"
    [ -d "$dir" ] || die "testbed directory $dir does not exist"
    [ -f "$dir/$MARKER" ] || die "$dir was not made by '$(basename "$0") start'; leaving it alone"
    (cd "$dir" && pwd)
}

# The cache folder for this provider: a hash of the files that decide what is installed and run.
cache_dir() {
    local hash
    hash="$(cat "$OIDC_DIR/package.json" "$OIDC_DIR/package-lock.json" "$OIDC_DIR/server.mjs" | sha256sum | cut -c1-12)"
    echo "$CACHE_ROOT/oidc-provider-$hash"
}

check_node() {
    command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 ||
        die "Node.js $NODE_MINIMUM or newer (node and npm) runs the test OpenID Provider: run scripts/system-deps.sh, or install Node.js, then run this again"
    local have
    have="$(node --version | sed 's/^v//')"
    if [ "$(printf '%s\n%s\n' "$NODE_MINIMUM" "$have" | sort -V | head -n 1)" != "$NODE_MINIMUM" ]; then
        die "Node.js $have is too old for oidc-provider (it needs $NODE_MINIMUM or newer): install a newer Node.js, then run this again"
    fi
}

check_slapd() {
    local tool
    for tool in slapd slapadd slappasswd ldapsearch; do
        command -v "$tool" >/dev/null 2>&1 ||
            die "$tool is missing: the LDAP testbed runs Debian's OpenLDAP (packages slapd and ldap-utils); run scripts/system-deps.sh, then run this again"
    done
}

cmd_build() {
    local cache tmp started=$SECONDS
    cache="$(cache_dir)"
    if [ -f "$cache/server.mjs" ] && [ -d "$cache/node_modules/oidc-provider" ]; then
        echo "$cache"
        return 0
    fi
    check_node
    mkdir -p "$CACHE_ROOT"
    # One install at a time (two test runs starting together wait for the first).
    exec 9>"$CACHE_ROOT/.build.lock"
    flock 9
    if [ -f "$cache/server.mjs" ] && [ -d "$cache/node_modules/oidc-provider" ]; then
        echo "$cache"
        return 0
    fi
    log "installing oidc-provider from the npm registry (npm ci, testbed/oidc-provider/package-lock.json; first time only)"
    tmp="$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")"
    cp "$OIDC_DIR/package.json" "$OIDC_DIR/package-lock.json" "$OIDC_DIR/server.mjs" "$tmp/"
    (cd "$tmp" && npm ci --omit=dev --no-audit --no-fund --ignore-scripts) >"$tmp/npm.log" 2>&1 || {
        tail -n 30 "$tmp/npm.log" >&2
        die "installing oidc-provider failed (log above, also in $tmp/npm.log): check that the npm registry is reachable (npm config get registry)"
    }
    rm -rf "$cache"
    mv "$tmp" "$cache"
    log "installed in $((SECONDS - started))s: $cache"
    echo "$cache"
}



# Wait until `$2...` succeeds, while the process of pid file $1 lives; $3 names the server and its log.
wait_for() {
    local pidfile="$1" name="$2" logfile="$3" deadline=$((SECONDS + READY_TIMEOUT))
    shift 3
    until "$@" >/dev/null 2>&1; do
        if ! pid_alive "$pidfile"; then
            tail -n 20 "$logfile" >&2 || true
            die "the test $name stopped while starting (log above, in $logfile)"
        fi
        [ "$SECONDS" -lt "$deadline" ] || {
            tail -n 20 "$logfile" >&2 || true
            die "the test $name was not ready within ${READY_TIMEOUT}s (log in $logfile)"
        }
        sleep 0.2
    done
}

write_oidc_config() {
    local file="$1" secret="$2"
    SECRET="$secret" CLIENT_ID="$CLIENT_ID" python3 - "$file" <<'PY'
import json, os, sys
# Callback URLs of `make run`; tests add their live server's.
config = {
    "clients": [
        {
            "client_id": os.environ["CLIENT_ID"],
            "client_secret": os.environ["SECRET"],
            "client_name": "Rackplane",
            "redirect_uris": ["http://127.0.0.1:8000/oidc/callback/", "http://localhost:8000/oidc/callback/"],
            "grant_types": ["authorization_code"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "client_secret_basic",
        }
    ],
    "accounts": {
        "ada": {"sub": "4f6a1c2e-ada", "password": "ada-oidc-password-1", "email": "ada@rackplane.test",
                "given_name": "Ada", "family_name": "Lovelace", "groups": ["rackplane-alpha-members", "payroll"],
                "posix_username": "ada", "uid_number": 20001, "gid_number": 20001, "posix_groups": [20100]},
        "grace": {"sub": "9b3d7e10-grace", "password": "grace-oidc-password-1", "email": "grace@rackplane.test",
                  "given_name": "Grace", "family_name": "Hopper", "groups": ["rackplane-admins", "payroll"],
                  "posix_username": "grace", "uid_number": 20002, "gid_number": 20002, "posix_groups": [20100]},
    },
}
with open(sys.argv[1], "w") as out:
    json.dump(config, out, indent=2)
os.chmod(sys.argv[1], 0o600)
PY
}

start_oidc() {
    local dir="$1" bin port
    bin="$(cat "$dir/oidc/bin")"
    port="$(cat "$dir/oidc/port")"
    node "$bin/server.mjs" --issuer "http://127.0.0.1:$port" --port "$port" \
        --config "$dir/oidc/provider.json" --keys "$dir/oidc/jwks.json" >>"$dir/log/oidc.log" 2>&1 &
    echo $! >"$dir/oidc/pid"
    wait_for "$dir/oidc/pid" "OpenID Provider" "$dir/log/oidc.log" \
        curl -fsS -m 2 "http://127.0.0.1:$port/.well-known/openid-configuration"
}

write_slapd_conf() {
    local dir="$1" rootpw_hash="$2"
    cat >"$dir/ldap/slapd.conf" <<EOF
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
include /etc/ldap/schema/nis.schema
modulepath /usr/lib/ldap
moduleload back_mdb
pidfile $dir/ldap/slapd.pid.file
argsfile $dir/ldap/slapd.args
loglevel stats

database mdb
maxsize 67108864
suffix "$SUFFIX"
rootdn "cn=admin,$SUFFIX"
rootpw $rootpw_hash
directory $dir/ldap/data
index objectClass eq
index uid,cn,member eq

# Passwords: checked by a bind, changed by their owner; nobody reads them.
access to attrs=userPassword
    by self write
    by anonymous auth
    by * none
# Rackplane's service account reads people and groups; a person reads their own entry; nobody else anything.
access to *
    by dn.exact="cn=rackplane,ou=services,$SUFFIX" read
    by self read
    by * none
EOF
}

start_ldap() {
    local dir="$1" port
    port="$(cat "$dir/ldap/port")"
    # -d 0: stay in the foreground (no fork), so the pid is ours to stop.
    slapd -d 0 -f "$dir/ldap/slapd.conf" -h "ldap://127.0.0.1:$port/" >>"$dir/log/slapd.log" 2>&1 &
    echo $! >"$dir/ldap/pid"
    wait_for "$dir/ldap/pid" "LDAP server" "$dir/log/slapd.log" \
        ldapsearch -x -H "ldap://127.0.0.1:$port" -D "cn=rackplane,ou=services,$SUFFIX" \
        -w "$(cat "$dir/ldap/service.password")" -b "ou=people,$SUFFIX" -s one "(uid=ada)" dn
}

cmd_start() {
    local dir="${1:-}" bin secret admin_password service_password oidc_port ldap_port
    bin="$(cmd_build)"
    check_slapd
    if [ -z "$dir" ]; then
        dir="$(mktemp -d -t rackplane-idp.XXXXXX)"
    else
        mkdir -p "$dir"
        [ -z "$(ls -A "$dir")" ] || [ -f "$dir/$MARKER" ] || die "$dir is not empty; give an empty or new folder"
    fi
    dir="$(cd "$dir" && pwd)"
    touch "$dir/$MARKER"
    mkdir -p "$dir/log" "$dir/oidc" "$dir/ldap/data"
    chmod 0700 "$dir/oidc" "$dir/ldap"

    # OpenID Provider
    secret="$(openssl rand -hex 24)"
    oidc_port="$(free_port)"
    echo "$bin" >"$dir/oidc/bin"
    echo "$oidc_port" >"$dir/oidc/port"
    write_oidc_config "$dir/oidc/provider.json" "$secret"
    start_oidc "$dir"

    # LDAP
    admin_password="$(openssl rand -hex 16)"
    service_password="$(openssl rand -hex 16)"
    printf '%s' "$service_password" >"$dir/ldap/service.password"
    ldap_port="$(free_port)"
    echo "$ldap_port" >"$dir/ldap/port"
    write_slapd_conf "$dir" "$(slappasswd -s "$admin_password")"
    sed -e "s/@SUFFIX@/$SUFFIX/g" \
        -e "s|@ADA_PASSWORD_HASH@|$(slappasswd -s ada-ldap-password-1)|" \
        -e "s|@GRACE_PASSWORD_HASH@|$(slappasswd -s grace-ldap-password-1)|" \
        -e "s|@SERVICE_PASSWORD_HASH@|$(slappasswd -s "$service_password")|" \
        "$LDIF" >"$dir/ldap/directory.ldif"
    slapadd -q -f "$dir/ldap/slapd.conf" -l "$dir/ldap/directory.ldif" >>"$dir/log/slapd.log" 2>&1 || {
        tail -n 20 "$dir/log/slapd.log" >&2
        die "loading the test directory with slapadd failed (log above)"
    }
    start_ldap "$dir"

    cat >"$dir/env" <<EOF
export RACKPLANE_IDP_TESTBED='$dir'
export RACKPLANE_IDP_OIDC_ISSUER='http://127.0.0.1:$oidc_port'
export RACKPLANE_IDP_OIDC_DISCOVERY_URL='http://127.0.0.1:$oidc_port/.well-known/openid-configuration'
export RACKPLANE_IDP_OIDC_CLIENT_ID='$CLIENT_ID'
export RACKPLANE_IDP_OIDC_CLIENT_SECRET='$secret'
export RACKPLANE_IDP_OIDC_CONFIG='$dir/oidc/provider.json'
export RACKPLANE_IDP_LDAP_URI='ldap://127.0.0.1:$ldap_port'
export RACKPLANE_IDP_LDAP_BIND_DN='cn=rackplane,ou=services,$SUFFIX'
export RACKPLANE_IDP_LDAP_BIND_PASSWORD='$service_password'
export RACKPLANE_IDP_LDAP_ADMIN_DN='cn=admin,$SUFFIX'
export RACKPLANE_IDP_LDAP_ADMIN_PASSWORD='$admin_password'
export RACKPLANE_IDP_LDAP_BASE='$SUFFIX'
export RACKPLANE_IDP_LDAP_USERS='ou=people,$SUFFIX'
export RACKPLANE_IDP_LDAP_GROUPS='ou=groups,$SUFFIX'
EOF
    chmod 0600 "$dir/env"
    log "OpenID Provider ready at http://127.0.0.1:$oidc_port, LDAP at ldap://127.0.0.1:$ldap_port (testbed $dir)"
    echo "$dir"
}


cmd_restart_oidc() {
    local dir
    dir="$(testbed_dir_arg "${1:-}")"
    stop_pid "$dir/oidc/pid"
    start_oidc "$dir"
    log "OpenID Provider restarted at http://127.0.0.1:$(cat "$dir/oidc/port")"
}

cmd_stop() {
    local dir="${1:-${RACKPLANE_IDP_TESTBED:-}}"
    [ -n "$dir" ] && [ -d "$dir" ] || return 0 # already gone
    dir="$(testbed_dir_arg "$dir")"
    stop_pid "$dir/oidc/pid"
    stop_pid "$dir/ldap/pid"
    if [ "${RACKPLANE_KEEP_RUNTIME:-0}" = 1 ]; then
        log "kept $dir (RACKPLANE_KEEP_RUNTIME=1)"
    else
        rm -rf "$dir"
    fi
}

cmd_status() {
    local dir status=0
    dir="$(testbed_dir_arg "${1:-}")"
    # shellcheck disable=SC1091
    source "$dir/env"
    if curl -fsS -m 2 "$RACKPLANE_IDP_OIDC_DISCOVERY_URL" >/dev/null 2>&1; then
        echo "ready: OpenID Provider $RACKPLANE_IDP_OIDC_ISSUER"
    else
        echo "not ready: OpenID Provider $RACKPLANE_IDP_OIDC_ISSUER"
        status=1
    fi
    if ldapsearch -x -H "$RACKPLANE_IDP_LDAP_URI" -D "$RACKPLANE_IDP_LDAP_BIND_DN" -w "$RACKPLANE_IDP_LDAP_BIND_PASSWORD" \
        -b "$RACKPLANE_IDP_LDAP_USERS" -s one "(uid=*)" dn >/dev/null 2>&1; then
        echo "ready: LDAP $RACKPLANE_IDP_LDAP_URI"
    else
        echo "not ready: LDAP $RACKPLANE_IDP_LDAP_URI"
        status=1
    fi
    return "$status"
}

case "${1:-}" in
build) cmd_build >/dev/null ;;
start) cmd_start "${2:-}" ;;
stop) cmd_stop "${2:-}" ;;
status) cmd_status "${2:-}" ;;
restart-oidc) cmd_restart_oidc "${2:-}" ;;
env) cat "$(testbed_dir_arg "${2:-}")/env" ;;
*)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
