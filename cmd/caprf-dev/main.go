// Command caprf-dev is the embedded dev environment (`make dev`): a real kube-apiserver and etcd,
// the real Cluster API core controllers, CAPRF and a simulated Redfish fleet in one process,
// playing a scenario with live progress. Ctrl-C stops everything it started.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/caprf/cluster-api-provider-redfish/internal/dev/demo"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

func main() {
	o := demo.Options{Out: os.Stdout}
	flag.StringVar(&o.Scenario, "scenario", "lifecycle", "Scenario to play: "+strings.Join(demo.ScenarioNames(), ", ")+".")
	flag.IntVar(&o.Servers, "servers", 0, "Simulated servers in the fleet (default: the scenario's, lifecycle 4, maintenance 6).")
	workers := flag.Int("workers", 0, "Worker Machines in the MachineDeployment (default: the scenario's, lifecycle 2, maintenance 3).")
	flag.StringVar(&o.Dir, "dir", defaultDir(), "Folder for the kubeconfig and the controllers' log.")
	exit := flag.Bool("exit", false, "Exit when the scenario completes instead of waiting for Ctrl-C.")
	profiles := flag.String("profiles", "dmtf", "Comma-separated BMC profiles given to the servers in turn (a mixed rack): "+strings.Join(simulator.ProfileNames(), ", ")+
		". Virtual media boots need a profile with virtual media and drive erase (not simple-storage nor bladed).")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: caprf-dev [flags]\n\nScenarios:\n")
		for _, n := range demo.ScenarioNames() {
			fmt.Fprintf(flag.CommandLine.Output(), "  %-10s %s\n", n, demo.Scenarios[n].About)
		}
		fmt.Fprintf(flag.CommandLine.Output(), "\nFlags:\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *workers < 0 || *workers > 100 {
		fmt.Fprintln(os.Stderr, "caprf-dev: --workers must be between 1 and 100")
		os.Exit(2)
	}
	o.Workers = int32(*workers) //nolint:gosec // bounded above.
	var err error
	if o.Profiles, err = simulator.ParseProfiles(*profiles); err != nil {
		fmt.Fprintln(os.Stderr, "caprf-dev: --profiles:", err)
		os.Exit(2)
	}
	o.Wait = !*exit

	// A closed stdout (`make dev | tee log`, then Ctrl-C) must not kill the demo before it stopped
	// kube-apiserver and etcd: writes then fail instead.
	signal.Ignore(syscall.SIGPIPE)
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 2)
	// Ctrl-C, kill, and the terminal closing: each stops everything the demo started.
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		<-signals
		fmt.Fprintln(os.Stderr, "\ncaprf-dev: stopping (Ctrl-C again to exit at once)")
		cancel()
		<-signals
		os.Exit(130)
	}()

	err = demo.Run(ctx, o)
	cancel()
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "caprf-dev:", err)
		os.Exit(1)
	}
}

func defaultDir() string {
	if d := os.Getenv("CAPRF_CACHE_DIR"); d != "" {
		return filepath.Join(d, "dev")
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "caprf", "dev")
	}
	return filepath.Join(os.TempDir(), "caprf-dev")
}
