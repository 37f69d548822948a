// Package demo is the embedded dev environment behind `make dev`: a real kube-apiserver and etcd
// (envtest), the real Cluster API core controllers, this provider, a fleet of simulated Redfish
// servers whose simulated OS registers Nodes, and a scenario that drives a cluster through its
// life while printing what a person would watch with kubectl.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/caprf/cluster-api-provider-redfish/bmc"
	"github.com/caprf/cluster-api-provider-redfish/controllers"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/sample"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/simos"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/testenv"
	"github.com/caprf/cluster-api-provider-redfish/internal/provider"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// Namespace holds everything the demo creates.
const Namespace = "demo"

// Options configure a run.
type Options struct {
	// Scenario to play; see Scenarios. Default "lifecycle".
	Scenario string
	// Servers in the simulated fleet. Default: the scenario's (lifecycle: 4, a control plane, two workers, a spare).
	Servers int
	// Workers is the MachineDeployment's size. Default 2.
	Workers int32
	// Dir receives the kubeconfig and the controllers' log. Default: a temporary folder.
	Dir string
	// Out receives the progress. Default os.Stdout.
	Out io.Writer
	// Wait keeps everything running after the scenario until ctx is done, for kubectl.
	Wait bool
	// PowerLatency of the simulated BMCs. Default 300ms.
	PowerLatency time.Duration
	// Profiles are the BMC shapes given to the servers in turn (a mixed rack). Default: the
	// DMTF-like profile for all.
	Profiles []simulator.Profile
}

// Scenario is one story the demo can tell.
type Scenario struct {
	About string
	Run   func(ctx context.Context, w *World) error
	// Servers and Workers are the scenario's defaults for Options.Servers and Options.Workers.
	Servers int
	Workers int32
}

// Scenarios the demo knows, by name.
var Scenarios = map[string]Scenario{
	"lifecycle": {About: "a cluster comes up on simulated servers, then its workers roll to a new template while the old one is deleted", Run: lifecycle, Servers: 4, Workers: 2},
	"maintenance": {About: "a cluster comes up, then every worker's host is maintained through the typed handshake (announce, owner approval, budget of 1, CAPI drain and replacement, power held off, completion)",
		Run: maintenance, Servers: 6, Workers: 3},
}

// World is what a scenario works with.
type World struct {
	client.Client
	Env   *testenv.Environment
	Fleet *simulator.Fleet
	OS    *simos.OS
	Opts  Options
	out   io.Writer
	start time.Time

	images *imageServer

	mu        sync.Mutex
	templates map[string]string      // Machine name → template it was cloned from
	booted    map[string]bootedImage // server ID → image its last boot loaded (redirects followed)
}

// Run starts the embedded world, plays the scenario and stops everything it started.
func Run(ctx context.Context, o Options) (retErr error) {
	o, sc, err := o.withDefaults()
	if err != nil {
		return err
	}
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "caprf-dev-")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(dir) }()
		o.Dir = dir
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return err
	}
	w := &World{Opts: o, out: o.Out, start: time.Now()}
	w.Printf("scenario %q: %s", o.Scenario, sc.About)

	logFile, err := os.Create(filepath.Join(o.Dir, "controllers.log"))
	if err != nil {
		return err
	}
	defer func() { _ = logFile.Close() }()
	logger := zap.New(zap.WriteTo(logFile), zap.UseDevMode(false))

	w.images = startImageServer()
	defer w.images.srv.Close()
	w.Printf("starting kube-apiserver + etcd, the CAPI core controllers and webhooks, and CAPRF")
	seedListener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	seedURL := "http://" + seedListener.Addr().String()
	metricsAddr, err := freeLocalAddress()
	if err != nil {
		return err
	}
	env, err := testenv.Start(ctx, testenv.Options{
		Logger:             &logger,
		MetricsBindAddress: metricsAddr,
		SetupProvider: func(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache) error {
			return provider.Setup(ctx, mgr, func() (net.Listener, error) { return seedListener, nil }, controllers.Options{
				// SkipNameValidation: tests run the demo more than once in one process.
				Controller:       controller.Options{MaxConcurrentReconciles: 10, SkipNameValidation: ptr.To(true)},
				ClusterCache:     cc,
				SeedBaseURL:      seedURL,
				DeployImageURL:   w.images.srv.URL + "/deploy.iso",
				PollInterval:     500 * time.Millisecond,
				Maintenance:      true,
				BMCRetryInterval: 2 * time.Second,
				BMC:              bmc.Options{CallTimeout: 20 * time.Second, AttemptTimeout: 5 * time.Second, BreakerCooldown: 5 * time.Second},
			})
		},
	})
	if err != nil {
		_ = seedListener.Close()
		return err
	}
	w.Env, w.Client = env, env.Client
	defer func() {
		w.Printf("stopping the controllers, kube-apiserver, etcd and kube-controller-manager")
		stopStart := time.Now()
		if err := env.Stop(); err != nil {
			retErr = errors.Join(retErr, err)
			return
		}
		w.Printf("stopped in %s; nothing left running", time.Since(stopStart).Round(100*time.Millisecond))
	}()

	kubeconfig := filepath.Join(o.Dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig, testenv.KubeconfigOptions{Namespace: Namespace}); err != nil {
		return err
	}
	w.Printf("control plane up: export KUBECONFIG=%s   (controllers' log: %s)", kubeconfig, logFile.Name())
	w.Printf("seed server: %s   metrics: http://%s/metrics", seedURL, metricsAddr)
	w.Printf("image server: %s (deploy.iso: the deploy image; node-v1.raw, node-v2.raw: disk images as image-builder writes them)", w.images.srv.URL)

	if w.Fleet, err = simulator.StartFleet(simulator.FleetOptions{
		Servers: o.Servers, NamePrefix: "server", PowerLatency: o.PowerLatency, TaskDuration: 2 * time.Second, Profiles: o.Profiles,
		IPXEChainURL: seedURL + "/v1/ipxe", // what DHCP on a provisioning network would point PXE at
	}); err != nil {
		return err
	}
	defer w.Fleet.Close()
	// The simulated kubelet talks to the API server directly, as a real one does.
	kubelet, err := testenv.NewWatchClient(env.Config)
	if err != nil {
		return err
	}
	w.OS = simos.New(kubelet)
	w.OS.Attach(w.Fleet)
	w.Fleet.OnBoot(w.recordBoot)

	progress, stopProgress := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.watch(progress) }()
	defer func() { stopProgress(); <-done }()
	if err := sc.Run(ctx, w); err != nil {
		return err
	}
	if errs := w.OS.Errors(); len(errs) > 0 {
		return fmt.Errorf("the simulated OS failed: %w", errors.Join(errs...))
	}
	w.Printf("scenario %q complete", o.Scenario)
	if o.Wait {
		// Progress lines keep coming: try `kubectl scale machinedeployment workers --replicas 3`.
		w.Printf("everything keeps running for kubectl (export KUBECONFIG=%s); Ctrl-C stops it", kubeconfig)
		<-ctx.Done()
	}
	return nil
}

// freeLocalAddress returns a loopback address with a port free right now.
func freeLocalAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// withDefaults fills in defaults and refuses what cannot work, before anything starts.
func (o Options) withDefaults() (Options, Scenario, error) {
	if o.Scenario == "" {
		o.Scenario = "lifecycle"
	}
	sc, ok := Scenarios[o.Scenario]
	if !ok {
		return o, sc, fmt.Errorf("unknown scenario %q; known: %s", o.Scenario, strings.Join(ScenarioNames(), ", "))
	}
	if o.Servers == 0 {
		o.Servers = sc.Servers
	}
	if o.Workers == 0 {
		o.Workers = sc.Workers
	}
	if o.Servers < int(o.Workers)+1 {
		return o, sc, fmt.Errorf("--servers %d is too few: a control plane and %d workers need %d", o.Servers, o.Workers, o.Workers+1)
	}
	if o.PowerLatency == 0 {
		o.PowerLatency = 300 * time.Millisecond
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	return o, sc, nil
}

// ScenarioNames lists the scenarios, sorted.
func ScenarioNames() []string {
	names := make([]string, 0, len(Scenarios))
	for n := range Scenarios {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Printf prints one line of narration, stamped with the time since the start.
func (w *World) Printf(format string, args ...any) {
	fmt.Fprintf(w.out, "[%6.1fs] %s\n", time.Since(w.start).Seconds(), fmt.Sprintf(format, args...))
}

// Since returns the time since the run started.
func (w *World) Since() time.Duration { return time.Since(w.start) }

// Create creates each object, in order.
func (w *World) Create(ctx context.Context, objs ...client.Object) error {
	for _, o := range objs {
		if err := w.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// RegisterFleet creates the BMC credentials and a RedfishHost for every simulated server.
func (w *World) RegisterFleet(ctx context.Context) error {
	for _, s := range w.Fleet.Servers {
		creds, host := sample.Host(Namespace, s)
		if err := w.Create(ctx, creds, host); err != nil {
			return err
		}
	}
	return nil
}

// Until polls cond every 250ms until it returns true, an error, or ctx ends.
func (w *World) Until(ctx context.Context, what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		ok, err := cond(ctx)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%s did not happen within %s (see the controllers' log in %s)", what, timeout, w.Opts.Dir)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}
