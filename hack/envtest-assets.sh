#!/usr/bin/env bash
# Builds the envtest control plane (kube-apiserver, etcd, kube-controller-manager) from the Go module proxy and caches it
# outside the clone. Prints the assets folder (for KUBEBUILDER_ASSETS) on stdout.
# Nothing is downloaded from GitHub or a container registry: both binaries are `go build`s of
# tiny wrapper modules that import the upstream commands.
set -euo pipefail

K8S_VERSION="${ENVTEST_K8S_VERSION:-1.36.3}"
ETCD_VERSION="${ENVTEST_ETCD_VERSION:-3.6.14}"
STAGING_VERSION="v0.${K8S_VERSION#1.}"
CACHE_ROOT="${CAPRF_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/caprf}"
ASSETS="$CACHE_ROOT/envtest/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"

log() { echo "envtest-assets: $*" >&2; }

# build_k8s_command NAME APP_PACKAGE CONSTRUCTOR builds one command of k8s.io/kubernetes (e.g.
# kube-apiserver from k8s.io/kubernetes/cmd/kube-apiserver/app with NewAPIServerCommand).
build_k8s_command() {
  local name=$1 pkg=$2 ctor=$3
  local work; work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  log "building $name v$K8S_VERSION from the Go module proxy (minutes on a cold cache)"
  local gomod; gomod=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$gomod" ] || { log "could not download k8s.io/kubernetes@v$K8S_VERSION"; return 1; }
  {
    echo "module caprf.local/$name"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes v$K8S_VERSION"
    echo
    # Every staging repository k8s.io/kubernetes replaces with ./staging/... is served by the proxy
    # under its own module path at the matching v0.x version.
    grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging' "$gomod" | awk '{print $1}' | sort -u |
      while read -r m; do echo "replace $m => $m $STAGING_VERSION"; done
  } > "$work/go.mod"
  cat > "$work/main.go" <<GO
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"$pkg"
)

func main() { os.Exit(cli.Run(app.$ctor())) }
GO
  (cd "$work" && GOFLAGS=-mod=mod go mod tidy >&2 && CGO_ENABLED=0 go build -ldflags "-X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=${K8S_VERSION%%.*} -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)" -o "$ASSETS/$name.tmp" . >&2)
  mv "$ASSETS/$name.tmp" "$ASSETS/$name"
}

build_etcd() {
  local work; work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  log "building etcd v$ETCD_VERSION from the Go module proxy (about 2 minutes on a cold cache)"
  cat > "$work/go.mod" <<GOMOD
module caprf.local/etcd

go 1.26

require go.etcd.io/etcd/server/v3 v$ETCD_VERSION
GOMOD
  cat > "$work/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$work" && GOFLAGS=-mod=mod go mod tidy >&2 && CGO_ENABLED=0 go build -o "$ASSETS/etcd.tmp" . >&2)
  mv "$ASSETS/etcd.tmp" "$ASSETS/etcd"
}

mkdir -p "$ASSETS"
[ -x "$ASSETS/etcd" ] || build_etcd
[ -x "$ASSETS/kube-apiserver" ] || build_k8s_command kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver/app NewAPIServerCommand
# The test environment runs the controllers of a real cluster that matter here (garbage collection,
# namespace deletion) next to the API server.
[ -x "$ASSETS/kube-controller-manager" ] || build_k8s_command kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager/app NewControllerManagerCommand
echo "$ASSETS"
