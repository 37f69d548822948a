#!/usr/bin/env bash
# Builds clusterctl (the CAPI version this provider pins) from the Go module proxy and caches it
# outside the clone; prints its path. `go install sigs.k8s.io/cluster-api/cmd/clusterctl@…` refuses
# to build because CAPI's go.mod has replace directives; a tiny wrapper module that imports the
# command does not have that problem.
set -euo pipefail
cd "$(dirname "$0")/.."

CAPI_VERSION="${CLUSTERCTL_VERSION:-$(go list -m -f '{{.Version}}' sigs.k8s.io/cluster-api)}"
CACHE_ROOT="${CAPRF_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/caprf}"
BIN="$CACHE_ROOT/bin/clusterctl-$CAPI_VERSION"

if [ ! -x "$BIN" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "clusterctl: building $CAPI_VERSION from the Go module proxy" >&2
  cat > "$work/go.mod" <<GOMOD
module caprf.local/clusterctl

go 1.26

require (
	sigs.k8s.io/cluster-api $CAPI_VERSION
	sigs.k8s.io/cluster-api/api $CAPI_VERSION
)
GOMOD
  cat > "$work/main.go" <<'GO'
package main

import (
	_ "k8s.io/client-go/plugin/pkg/client/auth"

	"sigs.k8s.io/cluster-api/cmd/clusterctl/cmd"
)

func main() { cmd.Execute() }
GO
  mkdir -p "$(dirname "$BIN")"
  (cd "$work" && GOFLAGS=-mod=mod go mod tidy >&2 && CGO_ENABLED=0 go build -ldflags "-X sigs.k8s.io/cluster-api/version.gitVersion=$CAPI_VERSION" -o "$BIN.tmp" . >&2)
  mv "$BIN.tmp" "$BIN"
fi
echo "$BIN"
