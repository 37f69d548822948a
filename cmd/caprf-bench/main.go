// Command caprf-bench is the fleet-size benchmark behind `make bench` (docs/performance.md): the
// real manager binary against the embedded control plane, the real CAPI core controllers and a
// fleet of simulated Redfish servers. It prints a table and writes the figures as JSON.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/caprf/cluster-api-provider-redfish/internal/dev/bench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchmark failed:", err)
		os.Exit(1)
	}
}

func run() error {
	o := bench.Options{}
	var managerArgs, jsonOut string
	var qps, capiQPS float64
	fs := flag.CommandLine
	fs.IntVar(&o.Hosts, "hosts", 1000, "N: hosts in the MachineDeployment (the fleet has N + maxSurge + 1 simulated servers).")
	fs.DurationVar(&o.PowerLatency, "power-latency", 0, "How long a simulated power transition takes (default 1s).")
	fs.DurationVar(&o.BootTime, "boot-time", 0, "How long the simulated OS takes from power-on to registering its Node (default 2s).")
	fs.DurationVar(&o.RequestLatency, "request-latency", 0, "Latency every simulated BMC adds to each Redfish answer (default 20ms).")
	fs.DurationVar(&o.EraseDuration, "erase-time", 0, "How long a simulated drive erase takes (default 250ms).")
	fs.IntVar(&o.MaxSurge, "max-surge", 0, "maxSurge of the rolling update (default 10% of --hosts, at least 1).")
	fs.DurationVar(&o.Idle, "idle", 0, "How long the idle phase watches the settled fleet (default 2m).")
	fs.BoolVar(&o.SkipRollout, "skip-rollout", false, "Leave the rolling update out (at N = 1000 it takes most of an hour): idle and maintenance run on the Machines provisioning made.")
	fs.DurationVar(&o.TaskTime, "task-time", 0, "How long each maintenance's task takes once its host is held off (default 10s).")
	fs.IntVar(&o.Concurrency, "concurrency", 0, "The manager's --concurrency (default: its own, 50).")
	fs.Float64Var(&qps, "kube-api-qps", 0, "The manager's --kube-api-qps (default: its own, 200).")
	fs.IntVar(&o.Burst, "kube-api-burst", 0, "The manager's --kube-api-burst (default: its own, 400).")
	fs.DurationVar(&o.BMCCheckInterval, "bmc-check-interval", 0, "The manager's --bmc-check-interval (default: its own, 1m).")
	fs.StringVar(&managerArgs, "manager-args", "", "More flags for the manager, separated by spaces.")
	fs.IntVar(&o.CAPIConcurrency, "capi-concurrency", 0, "Concurrency of each CAPI core controller (default 50).")
	fs.Float64Var(&capiQPS, "capi-qps", 0, "QPS of the CAPI core controllers (default 100, burst twice that).")
	fs.IntVar(&o.Jobs, "jobs", 0, "Run the RedfishJob benchmark instead: this many hosts, one power-cycle job each, at the manager's concurrency and at 10 (make bench-jobs: 200).")
	fs.StringVar(&o.Dir, "dir", "", "Folder for the manager's binary and log and the kubeconfig (default: a temporary folder, removed).")
	fs.StringVar(&jsonOut, "json", "", "Write the figures as JSON to this file.")
	flag.Parse()
	o.QPS, o.CAPIQPS = float32(qps), float32(capiQPS)
	o.ManagerArgs = strings.Fields(managerArgs)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := bench.Run(ctx, o)
	if report != nil {
		report.WriteTable(os.Stdout)
		if jsonOut != "" {
			raw, jerr := json.MarshalIndent(report, "", "  ")
			if jerr == nil {
				jerr = os.WriteFile(jsonOut, raw, 0o600)
			}
			if jerr != nil {
				return errors.Join(err, fmt.Errorf("writing the JSON report: %w", jerr))
			}
		}
	}
	return err
}
