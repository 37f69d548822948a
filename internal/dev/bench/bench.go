// Package bench is the fleet-size benchmark behind `make bench`: the real manager binary, run as
// its own process with the release's defaults (or the flags given), against the embedded control
// plane with the real CAPI core controllers and a fleet of simulated Redfish servers. It measures
// each phase of a fleet's life against the floor the simulator's latencies and the manager's
// concurrency set, and what the manager spent doing it (API requests, Redfish requests, CPU,
// memory). See docs/performance.md.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/sample"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/simos"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/testenv"
	"github.com/caprf/cluster-api-provider-redfish/internal/webhooks"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

const (
	namespace   = "bench"
	clusterName = "bench"
	mdName      = "workers"
)

// Options configure a run. Zero values take the defaults named.
type Options struct {
	// Hosts is N: the MachineDeployment's replicas. The fleet has N + maxSurge + 1 servers (the
	// surge, and a control-plane Machine). Default 1000.
	Hosts int
	// PowerLatency of the simulated BMCs (each power transition). Default 1s.
	PowerLatency time.Duration
	// BootTime of the simulated OS, from power-on to its Node registering. Default 2s.
	BootTime time.Duration
	// RequestLatency the simulated BMCs add to every Redfish answer. Default 20ms.
	RequestLatency time.Duration
	// EraseDuration of a drive erase (cleaning between Machines). Default 250ms.
	EraseDuration time.Duration
	// MaxSurge of the rolling update. Default 10% of Hosts (at least 1).
	MaxSurge int
	// Idle is how long the idle phase watches a settled fleet. Default 2m.
	Idle time.Duration
	// SkipRollout leaves the rolling update out (at N = 1000 it takes most of an hour, CAPI's
	// pace): the idle and maintenance phases then run on the Machines provisioning made.
	SkipRollout bool
	// TaskTime is how long each maintenance's task takes once its host is held off (the
	// technician's work). Default 10s.
	TaskTime time.Duration
	// The manager's flags: --concurrency, --kube-api-qps, --kube-api-burst,
	// --bmc-check-interval. Defaults: the manager's own (50, 200, 400, 1m).
	Concurrency      int
	QPS              float32
	Burst            int
	BMCCheckInterval time.Duration
	// ManagerArgs are more flags for the manager.
	ManagerArgs []string
	// CAPIConcurrency of each CAPI core controller, and CAPIQPS/CAPIBurst its API client limits.
	// Defaults 50, 100 and 200 (CAPI's own --kube-api-qps/--kube-api-burst defaults).
	CAPIConcurrency int
	CAPIQPS         float32
	CAPIBurst       int
	// Jobs, when set, makes the run the RedfishJob benchmark instead: Jobs hosts are registered
	// and each gets a power-cycle job (ForceOff, then On), all at once, at the manager's
	// concurrency and again at --concurrency 10. No cluster.
	Jobs int
	// Dir receives the manager's binary and log, the kubeconfig and the controllers' log.
	// Default: a temporary folder, removed afterwards.
	Dir string
	// Out receives progress lines. Default os.Stderr.
	Out io.Writer
}

func (o Options) withDefaults() (Options, error) {
	if o.Hosts == 0 {
		o.Hosts = 1000
	}
	if o.Jobs < 0 {
		return o, fmt.Errorf("--jobs %d: must not be negative", o.Jobs)
	}
	if o.Hosts < 1 {
		return o, fmt.Errorf("--hosts %d: at least 1", o.Hosts)
	}
	o.PowerLatency = orDefault(o.PowerLatency, time.Second)
	o.BootTime = orDefault(o.BootTime, 2*time.Second)
	o.RequestLatency = orDefault(o.RequestLatency, 20*time.Millisecond)
	o.EraseDuration = orDefault(o.EraseDuration, 250*time.Millisecond)
	o.Idle = orDefault(o.Idle, 2*time.Minute)
	o.TaskTime = orDefault(o.TaskTime, 10*time.Second)
	o.BMCCheckInterval = orDefault(o.BMCCheckInterval, time.Minute)
	if o.MaxSurge == 0 {
		o.MaxSurge = max(1, o.Hosts/10)
	}
	if o.Concurrency == 0 {
		o.Concurrency = 50
	}
	if o.QPS == 0 {
		o.QPS, o.Burst = 200, max(o.Burst, 400)
	}
	if o.Burst == 0 {
		o.Burst = int(2 * o.QPS)
	}
	if o.CAPIConcurrency == 0 {
		o.CAPIConcurrency = 50
	}
	if o.CAPIQPS == 0 {
		o.CAPIQPS, o.CAPIBurst = 100, max(o.CAPIBurst, 200)
	}
	if o.CAPIBurst == 0 {
		o.CAPIBurst = int(2 * o.CAPIQPS)
	}
	if o.Out == nil {
		o.Out = os.Stderr
	}
	for name, d := range map[string]time.Duration{"power latency": o.PowerLatency, "boot time": o.BootTime, "request latency": o.RequestLatency, "idle": o.Idle} {
		if d < 0 {
			return o, fmt.Errorf("%s %s: must not be negative", name, d)
		}
	}
	for _, a := range o.ManagerArgs {
		for _, own := range []string{"--concurrency", "--kube-api-qps", "--kube-api-burst", "--bmc-check-interval", "--leader-elect", "--metrics-bind-address", "--seed-url"} {
			if a == own || strings.HasPrefix(a, own+"=") {
				return o, fmt.Errorf("--manager-args %s: set by the benchmark (use its own flag of that name, which the floors take into account)", a)
			}
		}
	}
	if o.MaxSurge < 1 || o.Concurrency < 1 || o.CAPIConcurrency < 1 {
		return o, errors.New("maxSurge and the concurrencies must be at least 1")
	}
	return o, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// run is one benchmark run's world.
type run struct {
	o       Options
	env     *testenv.Environment
	c       client.Client // the benchmark's own client (high limits: it is not what is measured)
	cache   cache.Cache   // what the benchmark watches, read without loading the API server
	fleet   *simulator.Fleet
	mgr     *managerProc
	tl      *timeline
	start   time.Time
	report  *Report
	servers int
	bin     string // the manager binary
	// template the MachineDeployment's Machines are cloned from now.
	template string
}

// Run plays every phase and returns the report.
func Run(ctx context.Context, o Options) (_ *Report, retErr error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "caprf-bench-")
		if err != nil {
			return nil, err
		}
		defer func() { _ = os.RemoveAll(dir) }()
		o.Dir = dir
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	r := &run{o: o, tl: newTimeline(), start: time.Now(), servers: o.Hosts + o.MaxSurge + 1}
	phases := []func(context.Context) error{r.register, r.provision, r.rollout, r.idle, r.maintain}
	if o.SkipRollout {
		phases = []func(context.Context) error{r.register, r.provision, r.idle, r.maintain}
	}
	if o.Jobs > 0 {
		r.servers, phases = o.Jobs, []func(context.Context) error{r.register, r.jobs}
	}
	r.report = &Report{Options: reportOptionsOf(o, r.servers)}

	r.printf("building the manager binary")
	bin, err := buildManager(ctx, o.Dir)
	if err != nil {
		return nil, err
	}
	r.bin = bin
	r.printf("starting kube-apiserver + etcd with the CAPI core controllers (concurrency %d, %g QPS)", o.CAPIConcurrency, o.CAPIQPS)
	r.env, err = testenv.Start(ctx, testenv.Options{
		Concurrency: o.CAPIConcurrency, QPS: o.CAPIQPS, Burst: o.CAPIBurst,
		// Our admission webhooks run here (their configuration points at this process); the
		// provider's controllers run only in the manager binary.
		SetupProvider: func(ctx context.Context, mgr ctrl.Manager, _ clustercache.ClusterCache) error {
			return webhooks.Setup(ctx, mgr, mgr.GetAPIReader(), "")
		},
	})
	if err != nil {
		return nil, err
	}
	defer func() { retErr = errors.Join(retErr, r.env.Stop()) }()

	cfg := rest.CopyConfig(r.env.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	if r.c, err = client.New(cfg, client.Options{Scheme: testenv.Scheme()}); err != nil {
		return nil, err
	}
	if r.cache, err = cache.New(cfg, cache.Options{Scheme: testenv.Scheme()}); err != nil {
		return nil, err
	}
	cacheCtx, stopCache := context.WithCancel(ctx)
	defer stopCache()

	r.printf("starting the manager: --concurrency %d --kube-api-qps %g --kube-api-burst %d --bmc-check-interval %s %v (log: %s/manager.log)",
		o.Concurrency, o.QPS, o.Burst, o.BMCCheckInterval, o.ManagerArgs, o.Dir)
	if r.mgr, err = startManager(ctx, r.env, bin, o.Dir, o); err != nil {
		return nil, err
	}
	defer func() {
		if err := r.mgr.stop(); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("stopping the manager: %w", err))
		}
	}()

	r.printf("starting %d simulated servers (power %s, request latency %s, erase %s; OS boot %s)", r.servers, o.PowerLatency, o.RequestLatency, o.EraseDuration, o.BootTime)
	if r.fleet, err = simulator.StartFleet(simulator.FleetOptions{
		Servers: r.servers, NamePrefix: "server", PowerLatency: o.PowerLatency, EraseDuration: o.EraseDuration,
		IPXEChainURL: r.mgr.SeedURL + "/v1/ipxe",
	}); err != nil {
		return nil, err
	}
	defer r.fleet.Close()
	for _, s := range r.fleet.Servers {
		s.Fault.Latency(o.RequestLatency)
	}
	kubelet, err := testenv.NewWatchClient(cfg)
	if err != nil {
		return nil, err
	}
	simOS := simos.New(kubelet)
	simOS.BootTime = o.BootTime
	simOS.Attach(r.fleet)

	if err := r.tl.watch(cacheCtx, r.cache, r.fleet); err != nil {
		return nil, err
	}
	go func() { _ = r.cache.Start(cacheCtx) }()
	if !r.cache.WaitForCacheSync(ctx) {
		return nil, errors.New("the benchmark's cache did not sync")
	}

	for _, phase := range phases {
		if err := phase(ctx); err != nil {
			r.finish() // what spans the run, for the phases that completed
			return r.report, err
		}
		if errs := simOS.Errors(); len(errs) > 0 {
			return r.report, fmt.Errorf("the simulated OS failed: %w", errors.Join(errs...))
		}
	}
	r.finish()
	return r.report, nil
}

func (r *run) printf(format string, args ...any) {
	fmt.Fprintf(r.o.Out, "[%7.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// measure runs one phase: it samples the manager and the fleet before and after do, and waits for
// done (read from the watch cache, every 200ms).
func (r *run) measure(ctx context.Context, name string, units int, do func(ctx context.Context) error, done func(ctx context.Context) (bool, error), timeout time.Duration) (*Phase, error) {
	before, err := r.mgr.sample()
	if err != nil {
		return nil, err
	}
	if len(r.report.Phases) == 0 {
		r.report.baseRSS = before.RSSBytes
	}
	fleetBefore := r.fleetRequests()
	start := time.Now()
	r.printf("%s: %d units", name, units)
	if err := do(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	started := time.Since(start)
	r.printf("%s: started in %.1fs", name, started.Seconds())
	if err := until(ctx, timeout, done); err != nil {
		return nil, fmt.Errorf("%s did not finish within %s (manager log: %s): %w", name, timeout, r.mgr.LogPath, err)
	}
	end := time.Now()
	after, err := r.mgr.sample()
	if err != nil {
		return nil, err
	}
	fleetAfter := r.fleetRequests()
	p := &Phase{Name: name, Units: units, start: start, end: end, WallSeconds: end.Sub(start).Seconds(), StartSeconds: started.Seconds(),
		KubeRequests: kubeDelta(before, after), CPUSeconds: after.CPUSeconds - before.CPUSeconds,
		RSSBytes: after.RSSBytes, HeapInuseBytes: after.HeapInuse}
	p.KubeWrites = writes(p.KubeRequests)
	for _, v := range p.KubeRequests {
		p.KubeTotal += v
	}
	p.perServer = make([]int, len(fleetAfter))
	for i := range fleetAfter {
		p.perServer[i] = fleetAfter[i] - fleetBefore[i]
		p.Redfish.Total += p.perServer[i]
		p.Redfish.Max = max(p.Redfish.Max, p.perServer[i])
	}
	p.Redfish.PerServer = float64(p.Redfish.Total) / float64(len(fleetAfter))
	r.report.Phases = append(r.report.Phases, p)
	return p, nil
}

// fleetRequests returns every server's Redfish request count.
func (r *run) fleetRequests() []int {
	out := make([]int, len(r.fleet.Servers))
	for i, s := range r.fleet.Servers {
		for _, n := range s.Stats().Requests {
			out[i] += n
		}
	}
	return out
}

func until(ctx context.Context, timeout time.Duration, cond func(ctx context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := cond(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// parallel runs fn(0..n-1) on 16 goroutines.
func parallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error { return fn(ctx, i) })
	}
	return g.Wait()
}

// workerFloor is the least time n units of k Redfish requests each take through the manager's
// workers: every request holds a worker for the request latency.
func (r *run) workerFloor(n, k int) time.Duration {
	return time.Duration(math.Ceil(float64(n*k)/float64(r.o.Concurrency))) * r.o.RequestLatency
}

// minRequests is the fewest Redfish requests any of the given servers got in p.
func minRequests(p *Phase, servers []int) int {
	least := -1
	for _, i := range servers {
		if least < 0 || p.perServer[i] < least {
			least = p.perServer[i]
		}
	}
	return max(least, 0)
}

func (r *run) register(ctx context.Context) error {
	create := func(ctx context.Context) error {
		if err := r.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
			return err
		}
		return parallel(ctx, r.servers, func(ctx context.Context, i int) error {
			creds, host := sample.Host(namespace, r.fleet.Servers[i])
			if err := r.c.Create(ctx, creds); err != nil {
				return err
			}
			return r.c.Create(ctx, host)
		})
	}
	available := func(ctx context.Context) (bool, error) {
		hosts := &infrav1.RedfishHostList{}
		if err := r.cache.List(ctx, hosts, client.InNamespace(namespace)); err != nil {
			return false, err
		}
		n := 0
		for _, h := range hosts.Items {
			if h.Status.State == infrav1.HostStateAvailable {
				n++
			}
		}
		return n == r.servers, nil
	}
	p, err := r.measure(ctx, "register", r.servers, create, available, 10*time.Minute+time.Duration(r.servers)*time.Second)
	if err != nil {
		return err
	}
	all := make([]int, r.servers)
	for i := range all {
		all[i] = i
	}
	k := minRequests(p, all)
	// Every host needs its k requests in a row, and all of them share the workers.
	p.setFloor(max(time.Duration(k)*r.o.RequestLatency, r.workerFloor(r.servers, k)),
		fmt.Sprintf("max(k·R, ⌈hosts·k/concurrency⌉·R), k = %d Redfish requests per host (the fewest any host got)", k))
	return nil
}

func (r *run) provision(ctx context.Context) error {
	v1 := sample.MachineTemplate(namespace, "workers-v1", infrav1.RedfishMachineSpec{})
	create := func(ctx context.Context) error {
		rc, cluster := sample.Cluster(namespace, clusterName, "10.0.0.10")
		cpData, cpInfra, cpMachine := sample.ControlPlane(namespace, clusterName, clusterName+"-control-plane")
		mdData, md := sample.MachineDeployment(namespace, clusterName, mdName, v1.Name, int32(r.o.Hosts), int32(r.o.MaxSurge), 0)
		for _, o := range []client.Object{rc, cluster} {
			if err := r.c.Create(ctx, o); err != nil {
				return err
			}
		}
		if err := r.env.CreateKubeconfigSecret(ctx, cluster); err != nil {
			return err
		}
		for _, o := range []client.Object{v1, cpData, cpInfra, cpMachine, mdData, md} {
			if err := r.c.Create(ctx, o); err != nil {
				return err
			}
		}
		return nil
	}
	p, err := r.measure(ctx, "provision", r.o.Hosts+1, create, r.rolledOut(v1.Name), 10*time.Minute+time.Duration(r.o.Hosts)*time.Second)
	if err != nil {
		return err
	}
	r.template = v1.Name
	k := minRequests(p, r.booted(p))
	p.Split = ptr.To(r.tl.split(p.start, p.end, r.o.PowerLatency+r.o.BootTime))
	p.setFloor(max(r.o.PowerLatency+r.o.BootTime, r.workerFloor(r.o.Hosts+1, k)),
		fmt.Sprintf("max(P+B, ⌈machines·k/concurrency⌉·R), k = %d Redfish requests per provisioned host (the fewest)", k))
	return nil
}

// booted lists the servers that booted during p.
func (r *run) booted(p *Phase) []int {
	r.tl.mu.Lock()
	defer r.tl.mu.Unlock()
	var out []int
	for i, s := range r.fleet.Servers {
		for _, b := range r.tl.boots[s.ID()] {
			if !b.at.Before(p.start) && !b.at.After(p.end) {
				out = append(out, i)
				break
			}
		}
	}
	return out
}

func (r *run) rollout(ctx context.Context) error {
	v2 := sample.MachineTemplate(namespace, "workers-v2", infrav1.RedfishMachineSpec{})
	roll := func(ctx context.Context) error {
		if err := r.c.Create(ctx, v2); err != nil {
			return err
		}
		md := &clusterv1.MachineDeployment{}
		if err := r.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: mdName}, md); err != nil {
			return err
		}
		patch := client.MergeFrom(md.DeepCopy())
		md.Spec.Template.Spec.InfrastructureRef.Name = v2.Name
		return r.c.Patch(ctx, md, patch)
	}
	p, err := r.measure(ctx, "rollout", r.o.Hosts, roll, r.rolledOut(v2.Name), 20*time.Minute+time.Duration(r.o.Hosts)*3*time.Second)
	if err != nil {
		return err
	}
	r.template = v2.Name
	waves := (r.o.Hosts + r.o.MaxSurge - 1) / r.o.MaxSurge
	p.Split = ptr.To(r.tl.split(p.start, p.end, r.o.PowerLatency+r.o.BootTime))
	wave := 2*r.o.PowerLatency + r.o.BootTime + r.o.EraseDuration
	p.setFloor(time.Duration(waves)*wave,
		fmt.Sprintf("waves·(P+B + P+E): %d waves of maxSurge %d; each new host powers on and boots, each old one powers off and erases before it serves the next wave", waves, r.o.MaxSurge))
	return nil
}

func (r *run) idle(ctx context.Context) error {
	wait := func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.o.Idle):
			return nil
		}
	}
	p, err := r.measure(ctx, "idle", r.servers, wait, func(context.Context) (bool, error) { return true, nil }, time.Minute)
	if err != nil {
		return err
	}
	minutes := p.WallSeconds / 60
	p.Idle = &IdleFigures{
		APIWritesPerMinute:         p.KubeWrites / minutes,
		APIRequestsPerMinute:       p.KubeTotal / minutes,
		RedfishPerHostPerMinute:    p.Redfish.PerServer / minutes,
		ResyncsPerHostPerMinute:    time.Minute.Seconds() / r.o.BMCCheckInterval.Seconds(),
		RedfishPerHostPerMinuteMax: float64(p.Redfish.Max) / minutes,
		BMCCheckIntervalSeconds:    r.o.BMCCheckInterval.Seconds(),
	}
	return nil
}

// rolledOut is true when the control plane is initialized and the MachineDeployment has exactly
// its replicas, all cloned from template, Running with a Node, available and up to date.
func (r *run) rolledOut(template string) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		c := &clusterv1.Cluster{}
		if err := r.cache.Get(ctx, client.ObjectKey{Namespace: namespace, Name: clusterName}, c); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if !conditions.IsTrue(c, clusterv1.ClusterControlPlaneInitializedCondition) {
			return false, nil
		}
		md := &clusterv1.MachineDeployment{}
		if err := r.cache.Get(ctx, client.ObjectKey{Namespace: namespace, Name: mdName}, md); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		want := ptr.Deref(md.Spec.Replicas, 0)
		if ptr.Deref(md.Status.AvailableReplicas, 0) != want || ptr.Deref(md.Status.UpToDateReplicas, 0) != want || ptr.Deref(md.Status.Replicas, 0) != want {
			return false, nil
		}
		machines := &clusterv1.MachineList{}
		if err := r.cache.List(ctx, machines, client.InNamespace(namespace), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: mdName}); err != nil {
			return false, err
		}
		n := int32(0)
		for _, m := range machines.Items {
			if !m.DeletionTimestamp.IsZero() || m.Status.Phase != string(clusterv1.MachinePhaseRunning) || !m.Status.NodeRef.IsDefined() {
				return false, nil
			}
			rm := &infrav1.RedfishMachine{}
			if err := r.cache.Get(ctx, client.ObjectKey{Namespace: namespace, Name: m.Spec.InfrastructureRef.Name}, rm); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			if rm.Annotations[clusterv1.TemplateClonedFromNameAnnotation] != template {
				return false, nil
			}
			n++
		}
		return n == want, nil
	}
}

// finish adds what spans the whole run.
func (r *run) finish() {
	for _, s := range r.fleet.Servers {
		st := s.Stats()
		r.report.Sessions.Total += st.SessionsCreated
		r.report.Sessions.MaxPerBMC = max(r.report.Sessions.MaxPerBMC, st.SessionsCreated)
	}
	if s, err := r.mgr.sample(); err == nil {
		r.report.PeakRSSBytes = s.PeakRSS
	}
	if len(r.report.Phases) >= 2 {
		// Growth: resident memory after provisioning (every host registered, every Machine
		// running) against a manager that had registered nothing, per server.
		r.report.RSSPerServerBytes = (r.report.Phases[1].RSSBytes - r.report.baseRSS) / float64(r.servers)
	}
}
