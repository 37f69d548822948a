// Command redfish-sim runs a fleet of simulated Redfish BMCs on loopback, each a real HTTP(S)
// Redfish service, and prints their addresses or RedfishHost manifests, or registers them in a
// cluster and runs their simulated OS (see internal/dev/simcli and the README):
//
//	go run ./cmd/redfish-sim --servers 50 --manifests > hosts.yaml
//	go run ./cmd/redfish-sim --kubeconfig ~/.cache/caprf/dev/kubeconfig --servers 2
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/caprf/cluster-api-provider-redfish/internal/dev/simcli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := simcli.Main(ctx)
	stop()
	os.Exit(code)
}
