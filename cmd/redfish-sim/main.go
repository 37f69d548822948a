// Command redfish-sim runs a fleet of simulated Redfish BMCs on loopback, each a real HTTP(S)
// Redfish service, and prints their addresses (or RedfishHost manifests to register them).
//
//	go run ./cmd/redfish-sim --servers 50 --manifests > hosts.yaml
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

func main() {
	servers := flag.Int("servers", 5, "Number of simulated servers.")
	prefix := flag.String("prefix", "server", "Servers are named <prefix>-<n>.")
	powerLatency := flag.Duration("power-latency", 2*time.Second, "How long a power transition takes.")
	taskDuration := flag.Duration("task-duration", 10*time.Second, "How long a firmware update task runs.")
	useTLS := flag.Bool("tls", false, "Serve HTTPS with self-signed certificates (manifests then set insecureSkipVerify).")
	manifests := flag.Bool("manifests", false, "Print RedfishHost and credentials Secret manifests instead of a table.")
	namespace := flag.String("namespace", "default", "Namespace of the printed manifests.")
	flag.Parse()

	fleet, err := simulator.StartFleet(simulator.FleetOptions{
		Servers: *servers, NamePrefix: *prefix, PowerLatency: *powerLatency, TaskDuration: *taskDuration, TLS: *useTLS,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "redfish-sim:", err)
		os.Exit(1)
	}
	defer fleet.Close()
	fleet.OnBoot(func(e simulator.BootEvent) {
		fmt.Fprintf(os.Stderr, "%s %s booted target=%s media=%q httpboot=%q\n", e.Time.Format(time.TimeOnly), e.ServerID, e.Target, e.MediaImage, e.HTTPBootURI)
	})

	for _, s := range fleet.Servers {
		user, pass := s.Credentials()
		if !*manifests {
			fmt.Printf("%-12s %s  user=%s password=%s\n", s.ID(), s.Address(), user, pass)
			continue
		}
		fmt.Printf(`---
apiVersion: v1
kind: Secret
metadata:
  name: %[1]s-bmc
  namespace: %[2]s
  labels:
    clusterctl.cluster.x-k8s.io/move: ""
stringData:
  username: %[3]s
  password: %[4]s
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: RedfishHost
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  bmc:
    address: %[5]s
    credentialsName: %[1]s-bmc
    insecureSkipVerify: %[6]t
  bootMACAddress: "%[7]s"
`, s.ID(), *namespace, user, pass, s.Address(), *useTLS, s.MACs()[0])
	}
	fmt.Fprintf(os.Stderr, "redfish-sim: %d servers up; Ctrl-C stops them\n", len(fleet.Servers))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
}
