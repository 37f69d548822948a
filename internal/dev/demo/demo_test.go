package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/simcli"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/testenv"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// apiServerGone fails the test when the API server the demo's kubeconfig names still accepts
// connections.
func apiServerGone(t *testing.T, dir string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatalf("reading the kubeconfig the demo wrote: %v", err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		_ = conn.Close()
		t.Fatalf("kube-apiserver at %s still accepts connections after the demo returned", u.Host)
	}
	controllerManagersGone(t, cfg.Host)
}

// controllerManagersGone fails the test when a kube-controller-manager outlived its environment:
// one still points at apiServer, or its kubeconfig (in a folder the environment removes once the
// process exited) is gone while the process still runs. Environments of other test packages
// running meanwhile point elsewhere and still have theirs.
func controllerManagersGone(t *testing.T, apiServer string) {
	t.Helper()
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue // exited meanwhile
		}
		args := strings.Split(string(raw), "\x00")
		if !strings.HasSuffix(args[0], "kube-controller-manager") {
			continue
		}
		for _, a := range args {
			kc, ok := strings.CutPrefix(a, "--kubeconfig=")
			if !ok {
				continue
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", kc)
			switch {
			case os.IsNotExist(err) || (err != nil && strings.Contains(err.Error(), "no such file")):
				t.Fatalf("kube-controller-manager (%s) still runs after its environment stopped", filepath.Dir(f))
			case err == nil && cfg.Host == apiServer:
				t.Fatalf("kube-controller-manager (%s) of the demo's API server %s still runs", filepath.Dir(f), apiServer)
			}
		}
	}
}

// The make dev scenario, then what the README tells a user to try on the running demo: look at
// the metrics, add servers with redfish-sim and scale the workers onto them.
func TestLifecycleRollsTheWorkersThenServersAddedWithRedfishSimServeAScaleUp(t *testing.T) {
	if testing.Short() {
		t.Skip("needs envtest; skipped with -short")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	running := make(chan struct{})
	var once sync.Once
	out := &testenv.Output{OnWrite: func(line string) {
		if strings.Contains(line, "everything keeps running") {
			once.Do(func() { close(running) })
		}
	}}
	runErr := make(chan error, 1)
	// A mixed rack (what `make dev DEV_FLAGS=--profiles …` gives): the story is the same on every
	// vendor's BMC shape.
	vendors, err := simulator.ParseProfiles("dell-idrac9,hpe-ilo5,lenovo-xcc,supermicro-x13")
	if err != nil {
		t.Fatal(err)
	}
	go func() { runErr <- Run(ctx, Options{Dir: dir, Out: out, Wait: true, Profiles: vendors}) }()
	select {
	case <-running:
	case err := <-runErr:
		t.Fatalf("demo failed: %v\n%s", err, out)
	}
	text := out.String()
	// Run returns nil only once every worker runs a Node cloned from workers-v2; the narration must
	// say so too, in order.
	last := -1
	for _, want := range []string{"control plane up: export KUBECONFIG=", "seed server: http://", "cluster up in", "deleted template workers-v1", "rolling update done in", "nodeReuse: every new worker landed back on a host of the old ones", "complete"} {
		i := strings.Index(text, want)
		if i < 0 || i < last {
			t.Fatalf("output lacks %q after the previous milestone:\n%s", want, text)
		}
		last = i
	}
	final := text[strings.LastIndex(text, "rolling update done in"):]
	if n := len(regexp.MustCompile(`image=\S+/node-v2\.raw`).FindAllString(final, -1)); n != 2 {
		t.Errorf("final table shows %d workers on node-v2.raw, want 2:\n%s", n, final)
	}
	if n := strings.Count(final, "Installed: node-v2.raw → drive Disk0"); n != 2 {
		t.Errorf("the install list shows node-v2.raw written to Disk0 of %d hosts, want 2:\n%s", n, final)
	}
	seen := map[string]bool{}
	for _, p := range vendors {
		seen[p.Name] = strings.Contains(final, "bmc="+p.Name)
	}
	if n := len(slices.DeleteFunc(slices.Collect(maps.Values(seen)), func(b bool) bool { return !b })); n < 3 {
		t.Errorf("the Machines run on %d vendor profiles (%v), want the control plane and both workers on three:\n%s", n, seen, final)
	}

	t.Run("metrics endpoint serves the provider's metrics", func(t *testing.T) {
		m := regexp.MustCompile(`metrics: (http://\S+/metrics)`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no metrics address printed:\n%s", text)
		}
		body := httpGet(t, m[1])
		for _, metric := range []string{"caprf_host_state{", "caprf_power_operations_total{", "caprf_bmc_requests_total{", "caprf_bmc_request_duration_seconds_bucket{"} {
			if !strings.Contains(body, metric) {
				t.Errorf("%s serves no %s", m[1], metric)
			}
		}
	})

	t.Run("servers added with redfish-sim --kubeconfig are claimed by a scale-up and run Nodes", func(t *testing.T) {
		kubeconfig := filepath.Join(dir, "kubeconfig")
		simCtx, stopSim := context.WithCancel(ctx)
		simErr := make(chan error, 1)
		simOut := &testenv.Output{}
		go func() {
			simErr <- simcli.Run(simCtx, []string{"--kubeconfig", kubeconfig, "--servers", "2", "--power-latency", "300ms"}, simOut, simOut)
		}()
		defer func() {
			stopSim()
			if err := <-simErr; err != nil {
				t.Errorf("redfish-sim: %v\n%s", err, simOut)
			}
		}()
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		// The sim's hosts land in the kubeconfig's namespace (demo), under a name of their own.
		var added []string
		poll(t, "the added servers registered, inspected and Available", func() (bool, error) {
			hosts := &infrav1.RedfishHostList{}
			if err := c.List(ctx, hosts, client.InNamespace(Namespace), client.HasLabels{simcli.FleetLabel}); err != nil {
				return false, err
			}
			added = added[:0]
			for _, h := range hosts.Items {
				if h.Status.State == infrav1.HostStateAvailable {
					added = append(added, h.Name)
				}
			}
			return len(added) == 2, nil
		}, simOut)
		// The demo's spare and both added servers: 2 workers + 3.
		md := &clusterv1.MachineDeployment{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: mdName}, md); err != nil {
			t.Fatal(err)
		}
		before := md.DeepCopy()
		md.Spec.Replicas = ptr.To[int32](5)
		if err := c.Patch(ctx, md, client.MergeFrom(before)); err != nil {
			t.Fatal(err)
		}
		poll(t, "5 workers Running with a Node, two of them on the added servers", func() (bool, error) {
			ms := &clusterv1.MachineList{}
			if err := c.List(ctx, ms, client.InNamespace(Namespace), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: mdName}); err != nil {
				return false, err
			}
			running := 0
			for _, m := range ms.Items {
				if m.Status.Phase == string(clusterv1.MachinePhaseRunning) && m.Status.NodeRef.IsDefined() {
					running++
				}
			}
			claimedAdded := 0
			for _, name := range added {
				h := &infrav1.RedfishHost{}
				if err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: name}, h); err != nil {
					return false, err
				}
				if h.Status.State == infrav1.HostStateProvisioned {
					claimedAdded++
				}
			}
			return running == 5 && len(ms.Items) == 5 && claimedAdded == 2, nil
		}, simOut)
	})

	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "nothing left running") {
		t.Fatalf("no clean stop reported:\n%s", out)
	}
	apiServerGone(t, dir)
}

// poll checks cond every 250ms for up to 2 minutes.
func poll(t *testing.T, what string, cond func() (bool, error), diag fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 2 minutes (last error: %v)\n%s", what, err, diag)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url) //nolint:gosec,noctx // the demo's local endpoint.
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	return string(body)
}

func TestInterruptStopsEverythingMidScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("needs envtest; skipped with -short")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &testenv.Output{OnWrite: func(line string) {
		if strings.Contains(line, "created Cluster") {
			cancel() // what Ctrl-C does in cmd/caprf-dev
		}
	}}
	start := time.Now()
	err := Run(ctx, Options{Dir: dir, Out: out})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled after the interrupt, got %v\n%s", err, out)
	}
	t.Logf("interrupted run returned after %s", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(out.String(), "nothing left running") {
		t.Fatalf("no clean stop reported:\n%s", out)
	}
	apiServerGone(t, dir)
}

func TestFleetTooSmallForTheRollingUpdateIsRefusedBeforeAnythingStarts(t *testing.T) {
	err := Run(t.Context(), Options{Servers: 2, Workers: 2, Out: &testenv.Output{}})
	if err == nil || !strings.Contains(err.Error(), "--servers 2 is too few: a control plane and 2 workers need 3") {
		t.Fatalf("got %v", err)
	}
}

func TestUnknownScenarioIsRefusedBeforeAnythingStarts(t *testing.T) {
	err := Run(t.Context(), Options{Scenario: "nope", Out: &testenv.Output{}})
	if err == nil || !strings.Contains(err.Error(), `unknown scenario "nope"; known: lifecycle`) {
		t.Fatalf("got %v", err)
	}
}

// The maintenance scenario (make dev DEV_FLAGS="--scenario maintenance"): every worker's host is
// announced, approved by the owner, drained and replaced by CAPI, held off, completed by the
// technician, one host at a time, without the MachineDeployment losing more than one worker.
func TestMaintenanceScenarioMaintainsEveryWorkerHostOneAtATime(t *testing.T) {
	if testing.Short() {
		t.Skip("needs envtest; skipped with -short")
	}
	out := &testenv.Output{}
	if err := Run(t.Context(), Options{Scenario: "maintenance", Dir: t.TempDir(), Out: out}); err != nil {
		t.Fatalf("maintenance scenario: %v\n%s", err, out)
	}
	text := out.String()
	last := -1
	for _, want := range []string{"fleet operator: RedfishMaintenancePolicy rack, maxUnavailable 1", "cluster owner: approved dimm-", "technician: host", "completed: Pending → Announced",
		"maintenance done in", "3 hosts maintained one at a time; never fewer than 2 of 3 workers running", `scenario "maintenance" complete`} {
		i := strings.Index(text, want)
		if i < 0 || i < last {
			t.Fatalf("output lacks %q after the previous milestone:\n%s", want, text)
		}
		last = i
	}
	if n := strings.Count(text, "technician: host"); n != 3 {
		t.Errorf("%d maintenances completed by the technician, want 3:\n%s", n, text)
	}
	// The maintenance metrics the README lists, from the registry the manager serves.
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range families {
		got[f.GetName()] = len(f.GetMetric()) > 0
	}
	for _, name := range []string{"caprf_maintenance_stage", "caprf_maintenance_stage_duration_seconds", "caprf_maintenance_budget"} {
		if !got[name] {
			t.Errorf("metric %s has no series after the scenario", name)
		}
	}
}
