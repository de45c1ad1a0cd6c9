#!/usr/bin/env bash
# Helm, built from its Go module, for the chart checks (tests/deploy/test_helm.py).
#
#   scripts/helm.sh build      build helm into ~/.cache/rackplane/helm/ (once) and print the binary's path
#   scripts/helm.sh path       print the binary's path if it is built (exit 1 if not)
#   scripts/helm.sh ARGS...    build if needed, then run `helm ARGS...` (e.g. scripts/helm.sh lint deploy/helm/rackplane)
#
# Debian ships no Helm, and no chart repository or image registry is reachable from these machines, but the
# Go module proxy is. testbed/helm/ is a small Go module that pins helm.sh/helm/v4 (a `tool` line in go.mod;
# v4 is the current major on the proxy) with every dependency in go.sum. The binary is cached under
# ~/.cache/rackplane/helm/<helm version>-<hash of go.mod and go.sum>/helm, so only the first run pays for the build
# (about two minutes on two cores). Delete that folder (or change the module) to rebuild.
#
# Settings: GO (the go command, default `go` on PATH).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODULE_DIR="$REPO_ROOT/testbed/helm"
CACHE_ROOT="$RACKPLANE_CACHE/helm"
GO_MINIMUM="1.26"
GO="${GO:-go}"

helm_version() {
    awk '$1 == "helm.sh/helm/v4" {print $2}' "$MODULE_DIR/go.mod" | head -n 1
}

cache_dir() {
    local hash
    hash="$(cat "$MODULE_DIR/go.mod" "$MODULE_DIR/go.sum" | sha256sum | cut -c1-12)"
    echo "$CACHE_ROOT/$(helm_version)-$hash"
}

check_go() {
    command -v "$GO" >/dev/null 2>&1 ||
        die "Go $GO_MINIMUM or newer is needed once, to build Helm (testbed/helm): install Go and put 'go' on PATH (or set GO=/path/to/go), then run this again"
    local have
    have="$("$GO" env GOVERSION | sed 's/^go//')"
    if [ "$(printf '%s\n%s\n' "$GO_MINIMUM" "$have" | sort -V | head -n 1)" != "$GO_MINIMUM" ]; then
        die "Go $have is too old to build Helm $(helm_version) (it needs Go $GO_MINIMUM or newer): install a newer Go, then run this again"
    fi
}

cmd_build() {
    local cache tmp version started=$SECONDS
    cache="$(cache_dir)"
    if [ -x "$cache/helm" ]; then
        echo "$cache/helm"
        return 0
    fi
    check_go
    mkdir -p "$CACHE_ROOT"
    # One build at a time (two test runs starting together wait for the first).
    exec 9>"$CACHE_ROOT/.build.lock"
    flock 9
    if [ -x "$cache/helm" ]; then
        echo "$cache/helm"
        return 0
    fi
    version="$(helm_version)"
    log "building helm $version from its Go module (first time only; a few minutes)"
    tmp="$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")"
    (
        cd "$MODULE_DIR"
        export CGO_ENABLED=0 GOFLAGS=-mod=readonly
        # The version stamp Helm's own Makefile sets, so `helm version` tells the truth.
        "$GO" build -trimpath -ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$version" \
            -o "$tmp/helm" helm.sh/helm/v4/cmd/helm
    ) >"$tmp/build.log" 2>&1 || {
        tail -n 30 "$tmp/build.log" >&2
        die "building Helm failed (log above, also in $tmp/build.log): check that the Go module proxy is reachable (go env GOPROXY) and that Go is $GO_MINIMUM or newer"
    }
    rm -rf "$cache"
    mv "$tmp" "$cache"
    log "built in $((SECONDS - started))s: $cache/helm"
    echo "$cache/helm"
}

case "${1:-}" in
build) cmd_build ;;
path)
    [ -x "$(cache_dir)/helm" ] || die "Helm is not built yet: run scripts/helm.sh build"
    echo "$(cache_dir)/helm"
    ;;
"" | -h | --help)
    sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
*)
    helm="$(cmd_build)"
    exec "$helm" "$@"
    ;;
esac
