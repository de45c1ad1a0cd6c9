#!/usr/bin/env bash
# A real Kubernetes API server (and its etcd) on loopback, for the integration tests.
#
#   scripts/kube-testbed.sh build         build kube-apiserver and etcd into ~/.cache/rackplane/kube-testbed/ (once)
#   scripts/kube-testbed.sh start  [DIR]  build if needed, start in DIR (default: a new `mktemp -d`); prints DIR
#   scripts/kube-testbed.sh env    [DIR]  print the `export ...` lines for it (also in DIR/env)
#   scripts/kube-testbed.sh status [DIR]  tell whether the API server is ready (exit 1 if not)
#   scripts/kube-testbed.sh stop   [DIR]  stop both servers and remove DIR (safe to run twice)
#   scripts/kube-testbed.sh kueue-build        build the Kueue controller into ~/.cache/rackplane/kueue/ (once)
#   scripts/kube-testbed.sh kueue-start [DIR]  install Kueue's own CRDs on the testbed in DIR and start Kueue
#   scripts/kube-testbed.sh kueue-stop  [DIR]  stop Kueue, delete its Workloads, put back Rackplane's CRDs
#
# DIR defaults to $RACKPLANE_KUBE_TESTBED for everything but start.
#
# Debian ships no kube-apiserver, so testbed/kube-apiserver/ is a small Go module whose `main` calls
# k8s.io/kubernetes/cmd/kube-apiserver/app, with every k8s.io/* staging module pinned by a `replace` line to
# the published v0.x.y of the same release, and etcd built from the version that release's go.mod pins.
# Both binaries are cached under ~/.cache/rackplane/kube-testbed/<kubernetes version>-<hash of the module files>/,
# so only the first start pays for the build (Go module downloads and a few minutes of compiling); later
# starts take about a second. Delete that folder (or change the module) to rebuild.
#
# The API server runs with TLS (a CA and certificates made with openssl in DIR/pki), a static token file
# (an admin in system:masters), RBAC, service-account tokens (TokenRequest) and the default admission
# plugins. No controller runs: no kube-controller-manager, scheduler, kubelet, Kueue or DRA driver. So a
# deleted Namespace stays Terminating, a Job gets no Pods, and whatever status a controller would write is
# written by the tests through the API. After it is ready, scripts/kube_testbed.py installs the CRDs
# Rackplane writes (integrations/kubernetes/crds/) and Rackplane's RBAC (deploy/kubernetes/rbac.yaml), then
# asks for a token of the `rackplane` service account, which is all Rackplane gets.
#
# Kueue (kueue-start): testbed/kueue/ is a small Go module whose `main` runs the upstream controller from the
# published sigs.k8s.io/kueue module, as upstream's test/performance/scheduler/minimalkueue does (core
# controllers, the scheduler, topology-aware scheduling) plus the batch/Job integration; no webhooks, so no
# certificates. Built and cached like the API server (~/.cache/rackplane/kueue/<kueue version>-<hash>/, with
# that version's CRDs beside the binary). kueue-start server-side applies those CRDs over the packaged ones
# (same field manager, so kueue-stop's re-apply of integrations/kubernetes/crds/ restores them exactly), then
# runs Kueue as the testbed admin, with the configuration Rackplane asks a site to give Kueue (DIR/kueue-config.yaml
# from integrations.kubernetes.tenants.kueue_configuration: the IMEX channel DeviceClass mapped to a quota
# resource), until /readyz (its caches synced) answers. kueue-stop deletes the objects
# of Kueue's other kinds (Workloads...) but leaves those CRDs installed, empty (deleting a CRD keeps the API
# server busy for seconds). Nodes are not made here: Kueue's topology-aware scheduling counts only Ready,
# untainted Nodes with allocatable GPUs, which the tests register (tests/integrations/kube_testbed.py
# `register_ready_node`). Log: DIR/log/kueue.log.
#
# DIR/env exports:
#   RACKPLANE_KUBE_TESTBED      DIR
#   RACKPLANE_KUBE_URL          https://127.0.0.1:<port>
#   RACKPLANE_KUBE_CA           the cluster CA certificate (PEM file)
#   RACKPLANE_KUBE_TOKEN        the rackplane service account's token (exactly deploy/kubernetes/rbac.yaml)
#   RACKPLANE_KUBECONFIG        a kubeconfig for the same service account
#   RACKPLANE_KUBE_ADMIN_TOKEN  an admin token (system:masters), for test set-up only
#   RACKPLANE_KUBE_ADMIN_KUBECONFIG  a kubeconfig for the admin
#
# Settings: GO (the go command, default `go` on PATH), RACKPLANE_KEEP_RUNTIME=1 (stop keeps DIR and its logs), RACKPLANE_READY_TIMEOUT (seconds, 60).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODULE_DIR="$REPO_ROOT/testbed/kube-apiserver"
CACHE_ROOT="$RACKPLANE_CACHE/kube-testbed"
KUEUE_MODULE_DIR="$REPO_ROOT/testbed/kueue"
KUEUE_CACHE_ROOT="$RACKPLANE_CACHE/kueue"
MARKER=".rackplane-kube-testbed"
READY_TIMEOUT="${RACKPLANE_READY_TIMEOUT:-60}"
GO_MINIMUM="1.26"
GO="${GO:-go}"

testbed_dir_arg() {
    local dir="${1:-${RACKPLANE_KUBE_TESTBED:-}}"
    [ -n "$dir" ] || die "no testbed directory: pass it as an argument or set RACKPLANE_KUBE_TESTBED"
    [ -d "$dir" ] || die "testbed directory $dir does not exist"
    [ -f "$dir/$MARKER" ] || die "$dir was not made by '$(basename "$0") start'; leaving it alone"
    (cd "$dir" && pwd)
}

kube_version() {
    awk '$1 == "k8s.io/kubernetes" {print $2} $1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' \
        "$MODULE_DIR/go.mod" | head -n 1
}

# The cache folder for this module: its Kubernetes version and a hash of the files that decide the build.
cache_dir() {
    local hash
    hash="$(cat "$MODULE_DIR/go.mod" "$MODULE_DIR/go.sum" "$MODULE_DIR/main.go" | sha256sum | cut -c1-12)"
    echo "$CACHE_ROOT/$(kube_version)-$hash"
}

check_go() {
    command -v "$GO" >/dev/null 2>&1 ||
        die "Go $GO_MINIMUM or newer is needed once, to build the test API server (testbed/kube-apiserver): install Go and put 'go' on PATH (or set GO=/path/to/go), then run this again"
    local have
    have="$("$GO" env GOVERSION | sed 's/^go//')"
    if [ "$(printf '%s\n%s\n' "$GO_MINIMUM" "$have" | sort -V | head -n 1)" != "$GO_MINIMUM" ]; then
        die "Go $have is too old to build Kubernetes $(kube_version) (it needs Go $GO_MINIMUM or newer): install a newer Go, then run this again"
    fi
}

cmd_build() {
    local cache tmp version minor stamp package started=$SECONDS
    cache="$(cache_dir)"
    if [ -x "$cache/kube-apiserver" ] && [ -x "$cache/etcd" ]; then
        echo "$cache"
        return 0
    fi
    check_go
    mkdir -p "$CACHE_ROOT"
    # One build at a time (two test runs starting together wait for the first).
    exec 9>"$CACHE_ROOT/.build.lock"
    flock 9
    if [ -x "$cache/kube-apiserver" ] && [ -x "$cache/etcd" ]; then
        echo "$cache"
        return 0
    fi
    log "building kube-apiserver $(kube_version) and etcd from Go modules (first time only; several minutes)"
    tmp="$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")"
    # The version stamps Kubernetes' own build sets (hack/lib/version.sh), so /version tells the truth.
    version="$(kube_version)"
    minor="$(echo "$version" | cut -d. -f2)"
    stamp=""
    for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        stamp="$stamp -X $package.gitVersion=$version -X $package.gitMajor=1 -X $package.gitMinor=$minor"
        stamp="$stamp -X $package.gitTreeState=clean"
    done
    (
        cd "$MODULE_DIR"
        export CGO_ENABLED=0 GOFLAGS=-mod=readonly
        "$GO" build -trimpath -ldflags="-s -w$stamp" -o "$tmp/kube-apiserver" . &&
            "$GO" build -trimpath -ldflags="-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
    ) >"$tmp/build.log" 2>&1 || {
        tail -n 30 "$tmp/build.log" >&2
        die "building the test API server failed (log above, also in $tmp/build.log): check that the Go module proxy is reachable (go env GOPROXY) and that Go is $GO_MINIMUM or newer"
    }
    rm -rf "$cache"
    mv "$tmp" "$cache"
    log "built in $((SECONDS - started))s: $cache"
    echo "$cache"
}


make_pki() {
    local pki="$1"
    mkdir -p "$pki"
    (
        cd "$pki"
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 30 \
            -subj "/CN=rackplane-kube-testbed-ca" 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr \
            -subj "/CN=kube-apiserver" 2>/dev/null
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' >server.ext
        openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt \
            -days 30 -extfile server.ext 2>/dev/null
        openssl genrsa -out sa.key 2048 2>/dev/null
        openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
        chmod 0600 ca.key server.key sa.key
    )
}

kubeconfig() {
    local url="$1" ca="$2" user="$3" token="$4"
    cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster:
    server: $url
    certificate-authority: $ca
users:
- name: $user
  user:
    token: $token
contexts:
- name: $user@testbed
  context: {cluster: testbed, user: $user}
current-context: $user@testbed
EOF
}


wait_ready() {
    local dir="$1" url="$2" token="$3" deadline=$((SECONDS + READY_TIMEOUT))
    until curl -fsS -m 2 --cacert "$dir/pki/ca.crt" -H "Authorization: Bearer $token" "$url/readyz" >/dev/null 2>&1; do
        if ! pid_alive "$dir/apiserver.pid" || ! pid_alive "$dir/etcd.pid"; then
            tail -n 20 "$dir/log/etcd.log" "$dir/log/apiserver.log" >&2 || true
            die "the test API server stopped while starting (logs above, in $dir/log)"
        fi
        [ "$SECONDS" -lt "$deadline" ] || {
            tail -n 20 "$dir/log/apiserver.log" >&2 || true
            die "the test API server was not ready within ${READY_TIMEOUT}s (log in $dir/log/apiserver.log)"
        }
        sleep 0.2
    done
}

cmd_start() {
    local dir="${1:-}" bin etcd_client etcd_peer port url admin_token python
    bin="$(cmd_build)"
    if [ -z "$dir" ]; then
        dir="$(mktemp -d -t rackplane-kube.XXXXXX)"
    else
        mkdir -p "$dir"
        [ -z "$(ls -A "$dir")" ] || [ -f "$dir/$MARKER" ] || die "$dir is not empty; give an empty or new folder"
    fi
    dir="$(cd "$dir" && pwd)"
    touch "$dir/$MARKER"
    mkdir -p "$dir/log"
    python="$REPO_ROOT/.venv/bin/python"
    [ -x "$python" ] || die "no .venv: run 'bash scripts/venv.sh test' first (the set-up uses the kubernetes client)"

    make_pki "$dir/pki"
    etcd_client="$(free_port)"
    etcd_peer="$(free_port)"
    port="$(free_port)"
    url="https://127.0.0.1:$port"
    admin_token="$(openssl rand -hex 24)"
    printf '%s,admin,admin-uid,"system:masters"\n' "$admin_token" >"$dir/pki/tokens.csv"
    chmod 0600 "$dir/pki/tokens.csv"

    "$bin/etcd" --name testbed --data-dir "$dir/etcd" \
        --listen-client-urls "http://127.0.0.1:$etcd_client" --advertise-client-urls "http://127.0.0.1:$etcd_client" \
        --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
        --initial-cluster "testbed=http://127.0.0.1:$etcd_peer" --unsafe-no-fsync --quota-backend-bytes 1073741824 \
        >"$dir/log/etcd.log" 2>&1 &
    echo $! >"$dir/etcd.pid"

    "$bin/kube-apiserver" \
        --etcd-servers "http://127.0.0.1:$etcd_client" \
        --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$port" \
        --tls-cert-file "$dir/pki/server.crt" --tls-private-key-file "$dir/pki/server.key" \
        --client-ca-file "$dir/pki/ca.crt" \
        --token-auth-file "$dir/pki/tokens.csv" \
        --authorization-mode RBAC \
        --service-account-issuer https://kubernetes.default.svc \
        --service-account-key-file "$dir/pki/sa.pub" --service-account-signing-key-file "$dir/pki/sa.key" \
        --service-cluster-ip-range 10.96.0.0/24 \
        --profiling=false \
        >"$dir/log/apiserver.log" 2>&1 &
    echo $! >"$dir/apiserver.pid"

    wait_ready "$dir" "$url" "$admin_token"
    kubeconfig "$url" "$dir/pki/ca.crt" admin "$admin_token" >"$dir/admin.kubeconfig"
    chmod 0600 "$dir/admin.kubeconfig"
    "$python" "$REPO_ROOT/scripts/kube_testbed.py" setup --kubeconfig "$dir/admin.kubeconfig" \
        --crds "$REPO_ROOT/integrations/kubernetes/crds" --rbac "$REPO_ROOT/deploy/kubernetes/rbac.yaml" \
        --token-out "$dir/rackplane.token" >>"$dir/log/setup.log" 2>&1 || {
        tail -n 20 "$dir/log/setup.log" >&2
        die "installing the CRDs and Rackplane's RBAC on the test API server failed (log above)"
    }
    kubeconfig "$url" "$dir/pki/ca.crt" rackplane "$(cat "$dir/rackplane.token")" >"$dir/rackplane.kubeconfig"
    chmod 0600 "$dir/rackplane.kubeconfig"

    cat >"$dir/env" <<EOF
export RACKPLANE_KUBE_TESTBED='$dir'
export RACKPLANE_KUBE_URL='$url'
export RACKPLANE_KUBE_CA='$dir/pki/ca.crt'
export RACKPLANE_KUBE_TOKEN='$(cat "$dir/rackplane.token")'
export RACKPLANE_KUBECONFIG='$dir/rackplane.kubeconfig'
export RACKPLANE_KUBE_ADMIN_TOKEN='$admin_token'
export RACKPLANE_KUBE_ADMIN_KUBECONFIG='$dir/admin.kubeconfig'
EOF
    log "Kubernetes $(kube_version) API server ready at $url (testbed $dir)"
    echo "$dir"
}


# --- Kueue ------------------------------------------------------------------------------------------------

kueue_version() {
    awk '$1 == "sigs.k8s.io/kueue" {print $2} $1 == "require" && $2 == "sigs.k8s.io/kueue" {print $3}' \
        "$KUEUE_MODULE_DIR/go.mod" | head -n 1
}

kueue_cache_dir() {
    local hash
    hash="$(cat "$KUEUE_MODULE_DIR/go.mod" "$KUEUE_MODULE_DIR/go.sum" "$KUEUE_MODULE_DIR/main.go" | sha256sum | cut -c1-12)"
    echo "$KUEUE_CACHE_ROOT/$(kueue_version)-$hash"
}

cmd_kueue_build() {
    local cache tmp started=$SECONDS
    cache="$(kueue_cache_dir)"
    if [ -x "$cache/kueue" ] && [ -d "$cache/crds" ]; then
        echo "$cache"
        return 0
    fi
    check_go
    mkdir -p "$KUEUE_CACHE_ROOT"
    exec 8>"$KUEUE_CACHE_ROOT/.build.lock"
    flock 8
    if [ -x "$cache/kueue" ] && [ -d "$cache/crds" ]; then
        echo "$cache"
        return 0
    fi
    log "building Kueue $(kueue_version) from its Go module (first time only; several minutes)"
    tmp="$(mktemp -d "$KUEUE_CACHE_ROOT/.build.XXXXXX")"
    (
        cd "$KUEUE_MODULE_DIR"
        export CGO_ENABLED=0 GOFLAGS=-mod=readonly
        "$GO" build -trimpath -ldflags="-s -w" -o "$tmp/kueue" . &&
            module_dir="$("$GO" list -m -f '{{.Dir}}' sigs.k8s.io/kueue)" &&
            mkdir "$tmp/crds" &&
            cp "$module_dir"/config/components/crd/bases/*.yaml "$tmp/crds/" &&
            chmod u+w "$tmp"/crds/*.yaml
    ) >"$tmp/build.log" 2>&1 || {
        tail -n 30 "$tmp/build.log" >&2
        die "building Kueue failed (log above, also in $tmp/build.log): check that the Go module proxy is reachable (go env GOPROXY) and that Go is $GO_MINIMUM or newer"
    }
    rm -rf "$cache"
    mv "$tmp" "$cache"
    log "built Kueue in $((SECONDS - started))s: $cache"
    echo "$cache"
}

cmd_kueue_start() {
    local dir bin port deadline python
    dir="$(testbed_dir_arg "${1:-}")"
    bin="$(cmd_kueue_build)"
    python="$REPO_ROOT/.venv/bin/python"
    [ -x "$python" ] || die "no .venv: run 'bash scripts/venv.sh test' first (the set-up uses PyYAML)"
    if pid_alive "$dir/kueue.pid"; then
        log "Kueue already runs on $dir"
        return 0
    fi
    "$python" "$REPO_ROOT/scripts/kube_testbed.py" crds --kubeconfig "$dir/admin.kubeconfig" \
        --crds "$bin/crds" >>"$dir/log/setup.log" 2>&1 || {
        tail -n 20 "$dir/log/setup.log" >&2
        die "installing Kueue's CRDs on the test API server failed (log above)"
    }
    # Kueue's configuration as Rackplane asks a site to set it (the IMEX channel DeviceClass mapped to quota).
    "$python" "$REPO_ROOT/scripts/kube_testbed.py" kueue-config --out "$dir/kueue-config.yaml" ||
        die "writing Kueue's configuration failed"
    port="$(free_port)"
    KUBECONFIG="$dir/admin.kubeconfig" "$bin/kueue" --health-probe-bind-address "127.0.0.1:$port" \
        --config "$dir/kueue-config.yaml" >"$dir/log/kueue.log" 2>&1 &
    echo $! >"$dir/kueue.pid"
    deadline=$((SECONDS + READY_TIMEOUT))
    until curl -fsS -m 2 "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
        if ! pid_alive "$dir/kueue.pid"; then
            tail -n 20 "$dir/log/kueue.log" >&2 || true
            rm -f "$dir/kueue.pid"
            die "Kueue stopped while starting (log above, in $dir/log/kueue.log)"
        fi
        [ "$SECONDS" -lt "$deadline" ] || {
            tail -n 20 "$dir/log/kueue.log" >&2 || true
            die "Kueue was not ready within ${READY_TIMEOUT}s (log in $dir/log/kueue.log)"
        }
        sleep 0.1
    done
    kueue_version >"$dir/kueue.version"
    log "Kueue $(kueue_version) running on $dir"
}

cmd_kueue_stop() {
    local dir="${1:-${RACKPLANE_KUBE_TESTBED:-}}" bin
    [ -n "$dir" ] && [ -d "$dir" ] || return 0
    dir="$(testbed_dir_arg "$dir")"
    [ -f "$dir/kueue.version" ] || [ -f "$dir/kueue.pid" ] || return 0
    stop_pid "$dir/kueue.pid"
    bin="$(kueue_cache_dir)"
    "$REPO_ROOT/.venv/bin/python" "$REPO_ROOT/scripts/kube_testbed.py" crds --kubeconfig "$dir/admin.kubeconfig" \
        --crds "$REPO_ROOT/integrations/kubernetes/crds" --empty-others "$bin/crds" >>"$dir/log/setup.log" 2>&1 || {
        tail -n 20 "$dir/log/setup.log" >&2
        die "putting Rackplane's CRDs back on the test API server failed (log above)"
    }
    rm -f "$dir/kueue.version"
}

cmd_stop() {
    local dir="${1:-${RACKPLANE_KUBE_TESTBED:-}}"
    [ -n "$dir" ] && [ -d "$dir" ] || return 0 # already gone
    dir="$(testbed_dir_arg "$dir")"
    stop_pid "$dir/kueue.pid"
    stop_pid "$dir/apiserver.pid"
    stop_pid "$dir/etcd.pid"
    if [ "${RACKPLANE_KEEP_RUNTIME:-0}" = 1 ]; then
        log "kept $dir (RACKPLANE_KEEP_RUNTIME=1)"
    else
        rm -rf "$dir"
    fi
}

cmd_status() {
    local dir
    dir="$(testbed_dir_arg "${1:-}")"
    # shellcheck disable=SC1091
    source "$dir/env"
    if curl -fsS -m 2 --cacert "$RACKPLANE_KUBE_CA" -H "Authorization: Bearer $RACKPLANE_KUBE_ADMIN_TOKEN" \
        "$RACKPLANE_KUBE_URL/readyz" >/dev/null 2>&1; then
        echo "ready: $RACKPLANE_KUBE_URL"
    else
        echo "not ready: $RACKPLANE_KUBE_URL"
        return 1
    fi
}

case "${1:-}" in
build) cmd_build >/dev/null ;;
start) cmd_start "${2:-}" ;;
stop) cmd_stop "${2:-}" ;;
status) cmd_status "${2:-}" ;;
env) cat "$(testbed_dir_arg "${2:-}")/env" ;;
kueue-build) cmd_kueue_build >/dev/null ;;
kueue-start) cmd_kueue_start "${2:-}" ;;
kueue-stop) cmd_kueue_stop "${2:-}" ;;
*)
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
