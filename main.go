// Command manager runs the cluster-api-provider-redfish controllers.
package main

import (
	"context"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsv1 "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/core/setup"
	"sigs.k8s.io/cluster-api/util/apiwarnings"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
	"github.com/caprf/cluster-api-provider-redfish/controllers"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/metrics"
	"github.com/caprf/cluster-api-provider-redfish/internal/provider"
)

const controllerName = "caprf-manager"

type flags struct {
	metricsAddr, probeAddr  string
	leaderElect             bool
	leaderElectionNamespace string
	leaderElection          provider.LeaderElection
	watchNamespace          string
	watchFilter             string
	concurrency             int
	qps                     float32
	burst                   int
	syncPeriod              time.Duration
	bmcCheckInterval        time.Duration
	biosSetupWait           time.Duration
	softPowerOffTimeout     time.Duration
	imageCAFile             string
	orphanGracePeriod       time.Duration
	restoreGracePeriod      time.Duration
	webhookPort             int
	webhookCertDir          string
	clusterCacheQPS         float32
	clusterCacheBurst       int
	clusterCacheConcurrency int
	seedAddr, seedURL       string
	seedCertDir             string
	deployImageURL          string
	installTimeout          time.Duration
	seedRate                float64
	seedBurst               int
	seedIPXERate            float64
	seedIPXEBurst           int
	seedInsecureHTTP        bool
	featureGates            map[string]bool
	profilerAddr            string
	insecureDiagnostics     bool
}

func main() {
	f := flags{}
	logOptions := logs.NewOptions()
	fs := pflag.CommandLine
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", ":8443", "Address the Prometheus metrics endpoint binds to (served over HTTPS with authn/authz); 0 disables it.")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", ":9440", "Address the health probes bind to.")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "Elect a leader so only one replica reconciles.")
	fs.StringVar(&f.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election lease (default: the pod's namespace; required when running outside a cluster).")
	fs.DurationVar(&f.leaderElection.LeaseDuration, "leader-elect-lease-duration", provider.DefaultLeaderElection.LeaseDuration, "How long a lease taken by the leader is valid: a replica that dies without releasing it is replaced after this long.")
	fs.DurationVar(&f.leaderElection.RenewDeadline, "leader-elect-renew-deadline", provider.DefaultLeaderElection.RenewDeadline, "How long the leader keeps trying to renew its lease before it stops reconciling (and exits): plus twice --leader-elect-retry-period at most --leader-elect-lease-duration, and well above the 1s Retry-After a busy API server answers.")
	fs.DurationVar(&f.leaderElection.RetryPeriod, "leader-elect-retry-period", provider.DefaultLeaderElection.RetryPeriod, "How often replicas try to take or renew the lease.")
	fs.StringVar(&f.watchNamespace, "namespace", "", "Only watch this namespace (default: all).")
	fs.StringVar(&f.watchFilter, "watch-filter", "", "Not supported any more: the manager refuses to start when it is set.")
	fs.IntVar(&f.concurrency, "concurrency", 50, "Concurrent reconciles per controller.")
	fs.Float32Var(&f.qps, "kube-api-qps", 200, "Maximum queries per second to the management cluster API server (sizing: docs/performance.md).")
	fs.IntVar(&f.burst, "kube-api-burst", 400, "Maximum burst to the management cluster API server.")
	fs.DurationVar(&f.orphanGracePeriod, "orphan-grace-period", 2*time.Minute, "How long a claimed host's RedfishMachine may be missing (outside a paused Cluster) before the host releases the claim.")
	fs.DurationVar(&f.restoreGracePeriod, "restore-grace-period", 2*time.Minute, "How long a host recreated without status (clusterctl move, a restore) waits for its machine: a host found powered on before it is offered, a host whose claim record names a machine before it is powered off and erased.")
	fs.DurationVar(&f.softPowerOffTimeout, "soft-power-off-timeout", 5*time.Minute, "How long a server pressed once for a graceful shutdown may take to turn off before it is forced off.")
	fs.StringVar(&f.imageCAFile, "firmware-image-ca-file", "", "PEM bundle of the CAs that sign the HTTPS image servers the manager downloads firmware from to push it to a BMC (added to the system's).")
	fs.DurationVar(&f.biosSetupWait, "bios-setup-wait", 3*time.Minute, "How long a firmware or BIOS-settings maintenance leaves a host in POST before powering it off, when its BMC reports no boot progress (BootProgress SetupEntered ends the wait on BMCs that do).")
	fs.DurationVar(&f.bmcCheckInterval, "bmc-check-interval", time.Minute, "How often a settled host re-reads its BMC (BMCReachable and power state); a power transition is re-read sooner, with backoff.")
	fs.DurationVar(&f.syncPeriod, "sync-period", 10*time.Minute, "Minimum interval at which watched objects are reconciled.")
	fs.IntVar(&f.webhookPort, "webhook-port", 9443, "Webhook server port.")
	fs.StringVar(&f.webhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs/", "Webhook server certificate folder.")
	fs.Float32Var(&f.clusterCacheQPS, "clustercache-client-qps", 20, "Maximum queries per second to each workload cluster.")
	fs.IntVar(&f.clusterCacheBurst, "clustercache-client-burst", 30, "Maximum burst to each workload cluster.")
	fs.IntVar(&f.clusterCacheConcurrency, "clustercache-concurrency", 100, "Concurrent reconciles of the cluster cache.")
	fs.StringVar(&f.seedAddr, "seed-bind-address", ":8082", "Address the seed server (bootstrap data for booting hosts) listens on.")
	fs.StringVar(&f.seedURL, "seed-url", "", "URL hosts reach the seed server at, e.g. https://seed.rack.example:30082 (required: hosts boot from it).")
	fs.StringVar(&f.deployImageURL, "deploy-image-url", "", "http(s) URL of the deploy image: a live ISO that runs cloud-init NoCloud user-data scripts and has bash, curl, sha256sum and qemu-img (see docs/deploy-image.md). Booted to write raw and qcow2 images to a host's root drive; without it machines with such images wait (condition ImageInstalled, reason NoDeployImage).")
	fs.DurationVar(&f.installTimeout, "install-timeout", time.Hour, "How long an installation to disk (the deploy image writing a raw or qcow2 image, or a self-installing ISO) may take from its boot to its report or power-off; past it the host is left off with ImageInstalled=False, InstallTimedOut.")
	fs.StringVar(&f.seedCertDir, "seed-cert-dir", "", "Folder holding the seed server's TLS certificate (tls.crt, tls.key; reloaded when renewed). Required for an https --seed-url: bootstrap data carries cluster CA keys.")
	fs.Float64Var(&f.seedRate, "seed-rate", 50, "Seed requests per second allowed from one source address (a rack behind a NAT, or a NodePort Service that does not keep source addresses, is one source).")
	fs.IntVar(&f.seedBurst, "seed-burst", 500, "Seed requests one source address may make in a burst.")
	fs.Float64Var(&f.seedIPXERate, "seed-ipxe-rate", 5, "iPXE script requests per second allowed from one source address (a MAC is no secret: the limit keeps the token from others on the network).")
	fs.IntVar(&f.seedIPXEBurst, "seed-ipxe-burst", 20, "iPXE script requests one source address may make in a burst (a rack PXE-booting at once through one NodePort is one source).")
	fs.BoolVar(&f.seedInsecureHTTP, "seed-insecure-http", false, "Serve seeds over plain HTTP (an http --seed-url): bootstrap data, cluster CA keys included, then crosses the provisioning network in clear text.")
	fs.StringVar(&f.profilerAddr, "profiler-address", "", "Serve Go's pprof profiles (/debug/pprof/) on this loopback address, e.g. 127.0.0.1:6060 (default: off; unauthenticated, so other addresses are refused).")
	fs.BoolVar(&f.insecureDiagnostics, "insecure-diagnostics", false, "Serve the metrics endpoint over plain HTTP without authentication (local runs and benchmarks; --metrics-bind-address must then be a loopback address).")
	logsv1.AddFlags(logOptions, fs)
	fs.Var(cliflag.NewMapStringBool(&f.featureGates), "feature-gates", "Experimental features to turn on, as Name=true pairs separated by commas. Known: Maintenance (RedfishMaintenance and RedfishMaintenancePolicy: the typed maintenance handshake).")
	fs.AddGoFlagSet(flag.CommandLine)
	pflag.Parse()

	for _, l := range provider.CapLogVerbosity(logOptions) {
		fmt.Fprintf(os.Stderr, "%s: from 8 on, client-go logs every API answer's body, Secrets (BMC passwords, bootstrap data) included\n", l)
	}
	if err := logsv1.ValidateAndApply(logOptions, nil); err != nil {
		fmt.Fprintf(os.Stderr, "invalid logging flags: %v\n", err)
		os.Exit(2)
	}
	ctrl.SetLogger(klog.Background())
	if err := run(ctrl.SetupSignalHandler(), f); err != nil {
		klog.Background().Error(err, "manager stopped")
		os.Exit(1)
	}
}

func run(ctx context.Context, f flags) error {
	if f.seedURL == "" {
		return fmt.Errorf("--seed-url is required: the URL booting hosts reach this manager's seed server at")
	}
	if err := checkSeedFlags(f); err != nil {
		return err
	}
	if f.leaderElect {
		if err := f.leaderElection.Validate(); err != nil {
			return err
		}
	}
	if f.watchFilter != "" {
		// Claims and remediations never honoured it: two managers sharing a namespace would
		// claim each other's hosts. Refuse rather than run unsharded.
		return fmt.Errorf("--watch-filter is not supported: run one manager per namespace set (--namespace) instead, and remove the flag")
	}
	// Unauthenticated endpoints only on loopback: metrics name BMC addresses and hosts, and pprof
	// exposes the process's memory.
	if f.insecureDiagnostics && !loopback(f.metricsAddr) {
		return fmt.Errorf("--insecure-diagnostics serves metrics without authentication: bind --metrics-bind-address to loopback (e.g. 127.0.0.1:8080), not %q", f.metricsAddr)
	}
	if f.profilerAddr != "" && !loopback(f.profilerAddr) {
		return fmt.Errorf("--profiler-address serves pprof without authentication: bind it to loopback (e.g. 127.0.0.1:6060), not %q", f.profilerAddr)
	}
	for name := range f.featureGates {
		if name != "Maintenance" {
			return fmt.Errorf("--feature-gates: unknown feature %q (known: Maintenance)", name)
		}
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme, expv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	cfg := ctrl.GetConfigOrDie()
	cfg.QPS, cfg.Burst = f.qps, f.burst
	cfg.Wrap(metrics.CountKubeRequests) // caprf_kube_api_requests_total: requests by verb and resource
	cfg.WarningHandler = apiWarnings(klog.Background().WithName("API Server Warning"))
	metricsOpts := metricsserver.Options{BindAddress: f.metricsAddr, SecureServing: true, FilterProvider: filters.WithAuthenticationAndAuthorization}
	if f.insecureDiagnostics {
		metricsOpts = metricsserver.Options{BindAddress: f.metricsAddr}
	}

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		LeaderElection:                f.leaderElect,
		LeaderElectionID:              "controller-leader-election-caprf",
		LeaderElectionNamespace:       f.leaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &f.leaderElection.LeaseDuration,
		RenewDeadline:                 &f.leaderElection.RenewDeadline,
		RetryPeriod:                   &f.leaderElection.RetryPeriod,
		HealthProbeBindAddress:        f.probeAddr,
		Metrics:                       metricsOpts,
		PprofBindAddress:              f.profilerAddr,
		Cache:                         setup.ManagerCacheOptions(scheme, controllerName, f.watchNamespace, f.syncPeriod),
		Client:                        setup.ManagerClientOptions(),
		WebhookServer:                 webhook.NewServer(webhook.Options{Port: f.webhookPort, CertDir: f.webhookCertDir}),
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}

	secretClient, err := setup.CreateSecretCachingClient(mgr)
	if err != nil {
		return err
	}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secretClient,
		Cache:        setup.ClusterCacheCacheOptions(),
		Client:       setup.ClusterCacheClientOptions(controllerName, f.clusterCacheQPS, f.clusterCacheBurst),
	}, controller.Options{MaxConcurrentReconciles: f.clusterCacheConcurrency})
	if err != nil {
		return fmt.Errorf("creating cluster cache: %w", err)
	}

	bmcOpts := bmc.Options{UserAgent: provider.UserAgent()}
	if f.imageCAFile != "" {
		pem, err := os.ReadFile(f.imageCAFile)
		if err != nil {
			return fmt.Errorf("--firmware-image-ca-file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--firmware-image-ca-file %s holds no PEM certificate", f.imageCAFile)
		}
		bmcOpts.ImageRootCAs = pool
	}
	if f.deployImageURL != "" {
		if u, err := url.Parse(f.deployImageURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--deploy-image-url %q: must be an http(s) URL the BMCs can reach", bmc.Redact(f.deployImageURL))
		}
	}
	var seedCA []byte
	if f.seedCertDir != "" {
		// cert-manager writes the issuing CA next to the certificate; the deploy script trusts
		// it when it reports. Without it, the deploy image's own trust store must know the CA.
		if b, err := os.ReadFile(filepath.Join(f.seedCertDir, "ca.crt")); err == nil {
			seedCA = b
		} else if f.deployImageURL != "" {
			klog.Background().Info("the seed certificate folder holds no ca.crt: the deploy image's own trust store must trust the seed server's certificate, or its install reports fail", "seedCertDir", f.seedCertDir)
		}
	}
	listen := func() (net.Listener, error) { return net.Listen("tcp", f.seedAddr) }
	if u, _ := url.Parse(f.seedURL); u != nil && u.Scheme == "https" { // checkSeedFlags parsed it
		wrap, err := provider.SeedTLS(mgr, f.seedCertDir)
		if err != nil {
			return err
		}
		listen = func() (net.Listener, error) {
			l, err := net.Listen("tcp", f.seedAddr)
			if err != nil {
				return nil, err
			}
			return wrap(l), nil
		}
	}
	if err := provider.Setup(ctx, mgr, listen, controllers.Options{
		SeedBaseURL:         f.seedURL,
		SeedCABundle:        seedCA,
		DeployImageURL:      f.deployImageURL,
		InstallTimeout:      f.installTimeout,
		BMCCheckInterval:    f.bmcCheckInterval,
		BIOSSetupWait:       f.biosSetupWait,
		SoftPowerOffTimeout: f.softPowerOffTimeout,
		SeedRate:            f.seedRate,
		SeedBurst:           f.seedBurst,
		SeedIPXERate:        f.seedIPXERate,
		SeedIPXEBurst:       f.seedIPXEBurst,
		BMC:                 bmcOpts,
		OrphanGracePeriod:   f.orphanGracePeriod,
		RestoreGracePeriod:  f.restoreGracePeriod,
		Maintenance:         f.featureGates["Maintenance"],
		Controller:          controller.Options{MaxConcurrentReconciles: f.concurrency, UsePriorityQueue: ptr.To(true)},
		Namespace:           f.watchNamespace,
		ClusterCache:        cc,
	}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", func(_ *http.Request) error { return nil }); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// loopback says whether addr (host:port) binds to a loopback address only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// apiWarnings logs the API server's warnings, but for the one every write of our finalizers
// draws (they are named like CAPI's own, without a path: renaming them would strand the objects
// that carry the old names). CAPI's own managers drop the same warning for their group.
func apiWarnings(l logr.Logger) rest.WarningHandler {
	return &apiwarnings.DiscardMatchingHandler{Logger: l, Expressions: []regexp.Regexp{
		apiwarnings.DomainQualifiedFinalizerWarning(regexp.QuoteMeta(infrav1.GroupVersion.Group)),
	}}
}

// checkSeedFlags refuses a seed server whose scheme and TLS flags disagree: HTTPS needs a
// certificate, plain HTTP must be asked for.
func checkSeedFlags(f flags) error {
	u, err := url.Parse(f.seedURL)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("--seed-url %q: want https://<address hosts reach>[:port]", f.seedURL)
	}
	switch {
	case u.Scheme == "https" && f.seedCertDir == "":
		return fmt.Errorf("--seed-url is https: give the seed server its certificate with --seed-cert-dir (tls.crt, tls.key)")
	case u.Scheme == "https" && f.seedInsecureHTTP:
		return fmt.Errorf("--seed-insecure-http contradicts the https --seed-url: drop one")
	case u.Scheme == "http" && !f.seedInsecureHTTP:
		return fmt.Errorf("--seed-url is plain http: bootstrap data (cluster CA keys included) would cross the provisioning network in clear text; use https with --seed-cert-dir, or accept that with --seed-insecure-http")
	}
	return nil
}
