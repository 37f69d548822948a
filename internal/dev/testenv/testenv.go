// Package testenv runs a real Kubernetes control plane (envtest: kube-apiserver + etcd built from
// the Go module proxy, plus kube-controller-manager for garbage collection, namespace deletion and disruption budgets)
// with the real Cluster API core controllers and admission webhooks in process. Every Cluster's workload kubeconfig points back at the same API server, so Nodes created
// here are the workload Nodes CAPI sees, cordons and drains. Test suites, test/e2e and the
// embedded demo all start their control plane through this package.
package testenv

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	addonsv1 "sigs.k8s.io/cluster-api/api/addons/v1beta2"
	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1" //nolint:staticcheck // CAPI's conversion webhooks need the v1beta1 spokes registered.
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/core/reconcilers/cluster"
	"sigs.k8s.io/cluster-api/core/reconcilers/machine"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinedeployment"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinehealthcheck"
	"sigs.k8s.io/cluster-api/core/reconcilers/machineset"
	"sigs.k8s.io/cluster-api/core/setup"
	coreadmission "sigs.k8s.io/cluster-api/core/webhooks/admission"
	"sigs.k8s.io/cluster-api/core/webhooks/conversion"
	"sigs.k8s.io/cluster-api/util/contract"
	"sigs.k8s.io/cluster-api/util/index"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/config/crd"
	webhookconfig "github.com/caprf/cluster-api-provider-redfish/config/webhook"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// starts numbers environments: client-go refuses a second informer name in one process, so each
// environment's controllers get their own name.
var starts atomic.Int32

// Options configure an Environment.
type Options struct {
	// SetupProvider registers the provider's reconcilers and webhooks with the manager. The
	// ClusterCache is the one the CAPI controllers use.
	SetupProvider func(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache) error

	// Logger receives the controllers' logs. Defaults to discarding them.
	Logger *logr.Logger

	// Concurrency of each CAPI controller. Defaults to 10.
	Concurrency int

	// QPS and Burst limit the CAPI controllers' requests to the API server (as CAPI's
	// --kube-api-qps and --kube-api-burst do). Default: envtest's (1000, 2000).
	QPS   float32
	Burst int

	// WrapClient, when set, wraps the manager's client (the one every controller and Environment
	// use; not the API reader): a test injects API-server faults through it, such as an answer
	// lost after the write landed, or a cache that lags.
	WrapClient func(client.Client) client.Client

	// MetricsBindAddress serves the manager's Prometheus metrics (plain HTTP) there, e.g.
	// 127.0.0.1:8080. Default: no metrics endpoint.
	MetricsBindAddress string
}

// Environment is a running control plane with the CAPI core controllers.
type Environment struct {
	client.Client
	Config       *rest.Config
	Manager      ctrl.Manager
	ClusterCache clustercache.ClusterCache

	env *envtest.Environment
	kcm *controllerManager
	// cleanup removes the folder of wrapper scripts.
	cleanup func()
	cancel  context.CancelFunc
	done    chan error
	// What startManager needs to start the manager again.
	parent      context.Context
	stopSources context.CancelFunc
	opts        Options
	scheme      *runtime.Scheme
}

// Scheme returns a scheme with the kinds the environment serves: core Kubernetes, CAPI (with the
// v1beta1 spokes its conversion webhooks need) and ours.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme,
		clusterv1.AddToScheme, clusterv1beta1.AddToScheme, addonsv1.AddToScheme, ipamv1.AddToScheme, runtimev1.AddToScheme,
		infrav1.AddToScheme, expv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err) // only on programming errors: duplicate registrations
		}
	}
	return s
}

// Start starts the control plane, installs CAPI's and our CRDs, starts the CAPI core controllers,
// webhooks and whatever opts.SetupProvider adds, and returns once the manager serves.
func Start(ctx context.Context, opts Options) (_ *Environment, retErr error) {
	logger := logr.Discard()
	if opts.Logger != nil {
		logger = *opts.Logger
	}
	log.SetLogger(logger)
	// client-go's own messages (e.g. informer metrics notes when CAPI's controllers and the
	// provider watch one kind in this single manager) go to the same logger, not to stderr.
	klog.SetLogger(logger)
	if opts.Concurrency == 0 {
		opts.Concurrency = 10
	}

	assets, err := assetsDir()
	if err != nil {
		return nil, err
	}
	capiDir, err := capiModuleDir()
	if err != nil {
		return nil, err
	}
	ours, err := providerCRDs()
	if err != nil {
		return nil, err
	}
	ourWebhooks := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := yaml.Unmarshal(webhookconfig.Manifests, ourWebhooks); err != nil {
		return nil, fmt.Errorf("parsing config/webhook/manifests.yaml: %w", err)
	}
	ourWebhooks.Name = "testenv-caprf-" + ourWebhooks.Name // CAPI's configuration has the same default name; the release manifests use caprf-

	// kube-apiserver and etcd die with this process, however it ends (envtest itself only puts
	// them in their own process group).
	wrapped, cleanupWrappers, err := withParentDeathSignal(assets, "kube-apiserver", "etcd")
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			cleanupWrappers()
		}
	}()

	scheme := Scheme()
	env := &envtest.Environment{
		BinaryAssetsDirectory: wrapped,
		Scheme:                scheme,
		ErrorIfCRDPathMissing: true,
		ControlPlane:          envtest.ControlPlane{APIServer: &envtest.APIServer{}},
		// CAPI's core CRDs, plus the kubeadm bootstrap and control plane CRDs so the clusterctl
		// templates' KubeadmControlPlane and KubeadmConfigTemplate can be admitted (no controllers).
		CRDDirectoryPaths: []string{
			filepath.Join(capiDir, "core", "config", "crd", "bases"),
			filepath.Join(capiDir, "bootstrap", "kubeadm", "config", "crd", "bases"),
			filepath.Join(capiDir, "controlplane", "kubeadm", "config", "crd", "bases"),
		},
		CRDs: ours,
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			Paths:                   []string{filepath.Join(capiDir, "core", "config", "webhook", "manifests.yaml")},
			ValidatingWebhooks:      []*admissionregistrationv1.ValidatingWebhookConfiguration{ourWebhooks},
			IgnoreSchemeConvertible: true,
		},
	}
	if os.Getenv("TESTENV_APISERVER_LOGS") != "" {
		env.ControlPlane.APIServer.Out, env.ControlPlane.APIServer.Err = os.Stderr, os.Stderr
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest (kube-apiserver and etcd from %s): %w", assets, err)
	}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, env.Stop())
		}
	}()
	// Plenty of headroom: the CAPI controllers, the provider and the test all share this config.
	cfg.QPS, cfg.Burst = 200, 400

	// Garbage collection and namespace deletion, as in a real cluster.
	kcm, err := startControllerManager(assets, cfg, logger)
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, kcm.Stop())
		}
	}()

	e := &Environment{Config: cfg, env: env, kcm: kcm, cleanup: cleanupWrappers, parent: ctx, opts: opts, scheme: scheme}
	if err := e.startManager(); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			e.cancel()
		}
	}()
	// Read straight from the API server: a manager that stopped on its own (a port taken between
	// its pick and its bind, say) leaves a cache that never syncs a new kind, and a list through
	// it would wait for good.
	if err := labelForClusterctl(ctx, e.Manager.GetAPIReader(), e.Client); err != nil {
		return nil, err
	}
	select {
	case err := <-e.done:
		return nil, fmt.Errorf("manager stopped while starting: %w", err)
	default:
	}
	return e, nil
}

// startManager creates and starts a manager with the CAPI core controllers and webhooks and the
// provider, and returns once its webhooks serve.
func (e *Environment) startManager() error {
	// client-go refuses a second informer name in one process: every manager gets its own.
	controllerName := fmt.Sprintf("caprf-testenv-%d", starts.Add(1))
	cfg := rest.CopyConfig(e.Config)
	if e.opts.QPS > 0 {
		cfg.QPS, cfg.Burst = e.opts.QPS, e.opts.Burst
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 e.scheme,
		Metrics:                metricsserver.Options{BindAddress: cmp.Or(e.opts.MetricsBindAddress, "0")},
		HealthProbeBindAddress: "0",
		Cache:                  setup.ManagerCacheOptions(e.scheme, controllerName, "", 10*time.Minute),
		Client:                 setup.ManagerClientOptions(),
		NewClient: func(config *rest.Config, options client.Options) (client.Client, error) {
			c, err := client.New(config, options)
			if err != nil || e.opts.WrapClient == nil {
				return c, err
			}
			return e.opts.WrapClient(c), nil
		},
		GracefulShutdownTimeout: ptr.To(shutdownTimeout), // see stopManager
		WebhookServer: webhook.NewServer(webhook.Options{
			Host:    e.env.WebhookInstallOptions.LocalServingHost,
			Port:    e.env.WebhookInstallOptions.LocalServingPort,
			CertDir: e.env.WebhookInstallOptions.LocalServingCertDir,
		}),
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	ctx, cancel := context.WithCancel(e.parent)
	e.Client, e.Manager, e.cancel, e.done = mgr.GetClient(), mgr, cancel, make(chan error, 1)
	ok := false
	defer func() {
		if !ok {
			cancel()
			if e.stopSources != nil {
				e.stopSources()
			}
		}
	}()
	if err := index.AddDefaultIndexes(ctx, mgr); err != nil {
		return fmt.Errorf("adding CAPI indexes: %w", err)
	}
	if err := setupCAPIWebhooks(mgr); err != nil {
		return err
	}
	sourcesCtx, stopSources := context.WithCancel(e.parent)
	e.stopSources = stopSources
	if e.ClusterCache, err = setupCAPIControllers(ctx, sourcesCtx, mgr, controllerName, e.opts.Concurrency); err != nil {
		return err
	}
	if e.opts.SetupProvider != nil {
		// The provider's cluster sources (its workload-cluster watches) drain as CAPI's do.
		if err := e.opts.SetupProvider(ctx, mgr, drainingSources{ClusterCache: e.ClusterCache, ctx: sourcesCtx}); err != nil {
			return fmt.Errorf("setting up the provider: %w", err)
		}
	}
	done := e.done
	go func() {
		err := mgr.Start(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "testenv: manager exited: %v\n", err)
			if errors.Is(err, context.DeadlineExceeded) {
				// What did not stop within the graceful shutdown timeout.
				_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			}
		}
		done <- err
	}()
	if err := e.waitForWebhooks(ctx); err != nil {
		return err
	}
	// The webhooks serve before the cache has started: a read through Client in that moment
	// fails with ErrCacheNotStarted.
	syncCtx, cancelSync := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelSync()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		return errors.New("the manager's cache did not start within 2 minutes")
	}
	ok = true
	return nil
}

// stopManager stops the manager (letting running reconciles finish) and its ClusterCache.
//
// A manager that does not stop within its graceful shutdown timeout fails the stop, unless, once
// the reconciles it still runs have ended, it left a new goroutine in one of two shutdown blocks
// of the libraries, each blocked for good and acting on nothing: CAPI v1.14.2's ClusterCache
// sending a Cluster event to a controller that never started reading it (drainingSources covers
// those that did), and controller-runtime v0.24.1's priority queue handing an item to workers
// that stopped while a worker that finished its reconcile waits for the queue's lock to mark it
// done. Earlier managers' blocked goroutines stay in the process; only new ones count.
func (e *Environment) stopManager() error {
	before := shutdownBlocks()
	e.cancel()
	var err error
	select {
	case err = <-e.done:
	case <-time.After(45 * time.Second):
		err = errors.New("manager did not stop within 45s")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		if blockErr := knownShutdownBlockOnceReconcilesEnd(before, reconcileDrain); blockErr != nil {
			err = fmt.Errorf("%w; %w", err, blockErr)
		} else {
			fmt.Fprintf(os.Stderr, "testenv: the manager stopped in a known library shutdown block: %v\n", err)
			err = nil
		}
	}
	e.stopSources()
	// The ClusterCache's workload-cluster caches outlive the manager (they run on their own
	// context); their open watches would keep kube-apiserver from exiting for a minute.
	if cc, ok := e.ClusterCache.(interface{ Shutdown() }); ok {
		cc.Shutdown()
	}
	return err
}

// RestartManager stops the manager (the CAPI controllers, webhooks and the provider, as a
// restarted management-cluster process would lose them: caches, queues, in-memory state) and
// starts a new one against the same API server. The Client, Manager and ClusterCache fields then
// belong to the new manager: nothing may use the environment while it restarts. See stopManager
// for a stop that meets a known library shutdown block.
func (e *Environment) RestartManager() error {
	if err := e.stopManager(); err != nil {
		return err
	}
	return e.startManager()
}

const (
	// shutdownTimeout is the test managers' graceful shutdown timeout. Short: a restart under
	// load meets the priority queue's shutdown block nearly every time and waits this long.
	shutdownTimeout = 5 * time.Second
	// reconcileDrain is how long, past shutdownTimeout, a stop waits for reconciles of the
	// manager that still run (their context is cancelled; the manager's caches and webhooks have
	// been told to stop by then).
	reconcileDrain = 25 * time.Second
)

// knownShutdownBlockOnceReconcilesEnd waits up to d for the reconciles still running to end, and
// then says (nil) whether a goroutine not in before is stuck in a known shutdown block.
func knownShutdownBlockOnceReconcilesEnd(before map[string]bool, d time.Duration) error {
	return knownShutdownBlockIn(goroutineDump, before, d)
}

func knownShutdownBlockIn(dump func() string, before map[string]bool, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		blocks, reconciling := goroutinesAtShutdown(dump())
		for id := range blocks {
			if !before[id] && len(reconciling) == 0 {
				return nil
			}
		}
		switch {
		case len(reconciling) > 0 && time.Now().After(deadline):
			return fmt.Errorf("reconciles still running %s later: %s", d, strings.Join(reconciling, "; "))
		case len(reconciling) == 0:
			return errors.New("no goroutine in a known library shutdown block: something else did not stop")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// shutdownBlocks names (by goroutine ID) the goroutines stuck in a known shutdown block now.
func shutdownBlocks() map[string]bool {
	blocks, _ := goroutinesAtShutdown(goroutineDump())
	return blocks
}

// goroutineDump is the stacks of every goroutine of the process.
func goroutineDump() string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	return b.String()
}

// goroutinesAtShutdown names (by goroutine ID) the goroutines of a dump stuck in the known
// shutdown blocks, and describes (by header and reconciler) those in a reconcile.
func goroutinesAtShutdown(dump string) (blocks map[string]bool, reconciling []string) {
	blocks = map[string]bool{}
	for _, g := range strings.Split(dump, "\n\n") {
		header := firstLine(g)
		switch {
		case strings.Contains(g, "clustercache.(*clusterCache).sendEventsToClusterSources"),
			strings.Contains(g, "priorityqueue.(*priorityqueue[...]).Done") && !strings.Contains(g, "reconcileHandler"),
			// handleReadyItems waits in a select in every live queue; only one blocked handing
			// an item over (a send) is stuck.
			strings.Contains(g, "priorityqueue.(*priorityqueue[...]).handleReadyItems") && strings.Contains(header, "[chan send"):
			id, _, _ := strings.Cut(strings.TrimPrefix(header, "goroutine "), " ")
			blocks[id] = true
		case strings.Contains(g, "reconcileHandler"):
			reconciling = append(reconciling, header+" in "+reconcilerOf(g))
		}
	}
	return blocks, reconciling
}

// reconcilerOf is the first function of this project or CAPI in a goroutine's stack: which
// reconcile it runs.
func reconcilerOf(g string) string {
	for _, line := range strings.Split(g, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "github.com/caprf/") || strings.HasPrefix(line, "sigs.k8s.io/cluster-api/") {
			return line
		}
	}
	return "?"
}

// firstLine is a goroutine's header in a dump: "goroutine 7 [chan send, 2 minutes]:".
func firstLine(g string) string {
	line, _, _ := strings.Cut(strings.TrimLeft(g, "\n"), "\n")
	return line
}

// labelForClusterctl labels the Cluster API and provider CRDs as `clusterctl init` does: clusterctl
// move and describe find the kinds they work on by that label.
func labelForClusterctl(ctx context.Context, r client.Reader, c client.Client) error {
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := r.List(ctx, crds); err != nil {
		return err
	}
	for i := range crds.Items {
		crd := &crds.Items[i]
		if !strings.HasSuffix(crd.Spec.Group, "cluster.x-k8s.io") || strings.HasPrefix(crd.Spec.Group, "clusterctl.") {
			continue
		}
		before := crd.DeepCopy()
		if crd.Labels == nil {
			crd.Labels = map[string]string{}
		}
		crd.Labels[clusterctlv1.ClusterctlLabel] = ""
		if err := c.Patch(ctx, crd, client.MergeFrom(before)); err != nil {
			return fmt.Errorf("labelling CRD %s for clusterctl: %w", crd.Name, err)
		}
	}
	return nil
}

func setupCAPIWebhooks(mgr ctrl.Manager) error {
	// CAPI's conversion webhooks look up the served version of referenced kinds.
	conversion.SetAPIVersionGetter(func(ctx context.Context, gk schema.GroupKind) (string, error) {
		return apiVersion(ctx, mgr.GetAPIReader(), gk)
	})
	for _, w := range []interface{ SetupWebhookWithManager(ctrl.Manager) error }{
		&coreadmission.Cluster{Client: mgr.GetClient()},
		&coreadmission.ClusterClass{Client: mgr.GetClient()},
		&coreadmission.Machine{},
		&coreadmission.MachineSet{},
		&coreadmission.MachineDeployment{},
		&coreadmission.MachineHealthCheck{},
		&coreadmission.MachineDrainRule{},
	} {
		if err := w.SetupWebhookWithManager(mgr); err != nil {
			return fmt.Errorf("setting up CAPI webhook %T: %w", w, err)
		}
	}
	// Test MachineHealthChecks may use short node startup timeouts.
	coreadmission.SetMinNodeStartupTimeoutSeconds(0)
	return nil
}

func setupCAPIControllers(ctx, sourcesCtx context.Context, mgr ctrl.Manager, controllerName string, concurrency int) (clustercache.ClusterCache, error) {
	secretClient, err := setup.CreateSecretCachingClient(mgr)
	if err != nil {
		return nil, fmt.Errorf("creating secret caching client: %w", err)
	}
	opts := controller.Options{MaxConcurrentReconciles: concurrency, SkipNameValidation: ptr.To(true)}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secretClient,
		Cache:        setup.ClusterCacheCacheOptions(),
		Client:       setup.ClusterCacheClientOptions(controllerName, 100, 200),
	}, opts)
	if err != nil {
		return nil, fmt.Errorf("creating ClusterCache: %w", err)
	}
	if c, ok := cc.(interface{ SetConnectionCreationRetryInterval(time.Duration) }); ok {
		c.SetConnectionCreationRetryInterval(2 * time.Second)
	}
	sources := drainingSources{ClusterCache: cc, ctx: sourcesCtx}
	if err := (&cluster.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: sources,
		RemoteConnectionGracePeriod: 50 * time.Second,
	}).SetupWithManager(ctx, mgr, opts); err != nil {
		return nil, fmt.Errorf("setting up CAPI Cluster controller: %w", err)
	}
	if err := (&machine.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: sources,
		RemoteConditionsGracePeriod: 5 * time.Minute,
	}).SetupWithManager(ctx, mgr, opts); err != nil {
		return nil, fmt.Errorf("setting up CAPI Machine controller: %w", err)
	}
	if err := (&machineset.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: sources,
	}).SetupWithManager(ctx, mgr, opts); err != nil {
		return nil, fmt.Errorf("setting up CAPI MachineSet controller: %w", err)
	}
	if err := (&machinedeployment.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
	}).SetupWithManager(ctx, mgr, opts); err != nil {
		return nil, fmt.Errorf("setting up CAPI MachineDeployment controller: %w", err)
	}
	if err := (&machinehealthcheck.Reconciler{
		Client: mgr.GetClient(), ClusterCache: sources,
	}).SetupWithManager(ctx, mgr, opts); err != nil {
		return nil, fmt.Errorf("setting up CAPI MachineHealthCheck controller: %w", err)
	}
	return cc, nil
}

// apiVersion returns the newest version of gk implementing CAPI contract v1beta2, read from the
// contract label of its CRD (what CAPI's own internal lookup does).
func apiVersion(ctx context.Context, c client.Reader, gk schema.GroupKind) (string, error) {
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := c.Get(ctx, client.ObjectKey{Name: contract.CalculateCRDName(gk.Group, gk.Kind)}, crd); err != nil {
		return "", err
	}
	versions := strings.Split(crd.Labels[clusterv1.GroupVersion.String()], "_")
	if versions[len(versions)-1] == "" {
		return "", fmt.Errorf("CRD of %s has no %s contract label", gk, clusterv1.GroupVersion)
	}
	return schema.GroupVersion{Group: gk.Group, Version: versions[len(versions)-1]}.String(), nil
}

// providerCRDs reads the CRDs `make generate` wrote into config/crd/bases.
func providerCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := fs.Glob(crd.Bases, "bases/*.yaml")
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, errors.New("no provider CRDs embedded: run 'make generate'")
	}
	crds := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(files))
	for _, f := range files {
		data, err := fs.ReadFile(crd.Bases, f)
		if err != nil {
			return nil, err
		}
		c := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, c); err != nil {
			return nil, fmt.Errorf("parsing %s: %w", f, err)
		}
		crds = append(crds, c)
	}
	return crds, nil
}

// waitForWebhooks returns once the webhook server accepts TLS connections.
func (e *Environment) waitForWebhooks(ctx context.Context) error {
	o := e.env.WebhookInstallOptions
	addr := net.JoinHostPort(o.LocalServingHost, strconv.Itoa(o.LocalServingPort))
	deadline := time.Now().Add(30 * time.Second)
	for {
		// A full TLS handshake: a bare TCP probe makes the server log a handshake error.
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: time.Second}, Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // a readiness probe of our own local server.
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn.Close()
		}
		select {
		case err := <-e.done:
			return fmt.Errorf("manager stopped while starting: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("webhook server on %s did not come up: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop stops the manager and the control plane.
func (e *Environment) Stop() error {
	start := time.Now()
	errs := []error{e.stopManager()}
	managerStopped := time.Since(start)
	errs = append(errs, e.kcm.Stop(), e.env.Stop())
	e.cleanup()
	log.Log.Info("test environment stopped", "manager", managerStopped.Round(time.Millisecond), "controlPlane", (time.Since(start) - managerStopped).Round(time.Millisecond))
	return errors.Join(errs...)
}

// CreateKubeconfigSecret writes the <cluster>-kubeconfig Secret so the CAPI controllers reach the
// "workload cluster" of this Cluster: the same API server.
func (e *Environment) CreateKubeconfigSecret(ctx context.Context, c *clusterv1.Cluster) error {
	return e.Create(ctx, kubeconfig.GenerateSecret(c, kubeconfig.FromEnvTestConfig(e.Config, c)))
}

// CreateNamespace creates a namespace with a generated name starting with prefix.
func (e *Environment) CreateNamespace(ctx context.Context, prefix string) (*corev1.Namespace, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := e.Create(ctx, ns); err != nil {
		return nil, err
	}
	return ns, nil
}

// NewWatchClient returns a client that can watch, for tests that must see every change the API
// server stores rather than the latest state a cache holds.
func NewWatchClient(cfg *rest.Config) (client.WithWatch, error) {
	return client.NewWithWatch(cfg, client.Options{Scheme: Scheme()})
}

// KubeconfigOptions shape the kubeconfig WriteKubeconfig writes.
type KubeconfigOptions struct {
	// Namespace is the context's default namespace.
	Namespace string
	// Impersonate makes the admin user act as this user, e.g. a ServiceAccount
	// ("system:serviceaccount:<ns>:<name>"), so its RBAC applies.
	Impersonate string
	// Server, when set, is the http:// URL of a proxy in front of the API server, used instead of
	// the environment's own: the proxy authenticates itself and passes the impersonation on, so
	// the kubeconfig carries no credentials.
	Server string
}

// WriteKubeconfig writes a kubeconfig for this API server to path (mode 0600), for kubectl and
// for processes started outside the test.
func (e *Environment) WriteKubeconfig(path string, o KubeconfigOptions) error {
	c := clientcmdapi.NewConfig()
	c.Clusters["caprf-dev"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthorityData: e.Config.CAData}
	c.AuthInfos["caprf-dev-admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: e.Config.CertData, ClientKeyData: e.Config.KeyData, Impersonate: o.Impersonate}
	if o.Server != "" {
		// A plain-HTTP proxy that authenticates itself: only the impersonation is passed on.
		c.Clusters["caprf-dev"] = &clientcmdapi.Cluster{Server: o.Server}
		c.AuthInfos["caprf-dev-admin"] = &clientcmdapi.AuthInfo{Impersonate: o.Impersonate}
	}
	c.Contexts["caprf-dev"] = &clientcmdapi.Context{Cluster: "caprf-dev", AuthInfo: "caprf-dev-admin", Namespace: o.Namespace}
	c.CurrentContext = "caprf-dev"
	return clientcmd.WriteToFile(*c, path)
}
