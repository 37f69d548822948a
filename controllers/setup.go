// Package controllers wires the provider's reconcilers (one package per kind) into a manager.
package controllers

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
	"github.com/caprf/cluster-api-provider-redfish/controllers/cluster"
	"github.com/caprf/cluster-api-provider-redfish/controllers/host"
	"github.com/caprf/cluster-api-provider-redfish/controllers/job"
	"github.com/caprf/cluster-api-provider-redfish/controllers/machine"
	"github.com/caprf/cluster-api-provider-redfish/controllers/remediation"
	"github.com/caprf/cluster-api-provider-redfish/exp/controllers/maintenance"
	"github.com/caprf/cluster-api-provider-redfish/exp/controllers/maintenanceset"
	"github.com/caprf/cluster-api-provider-redfish/internal/metrics"
)

// Options configure the provider's controllers.
type Options struct {
	// Controller carries concurrency and rate-limit options shared by every controller.
	Controller controller.Options
	// ClusterCache is CAPI's cache of workload-cluster clients.
	ClusterCache clustercache.ClusterCache
	// BMC tunes the Redfish clients.
	BMC bmc.Options
	// SeedBaseURL is the URL hosts reach the seed server at.
	SeedBaseURL string
	// SeedCABundle is the PEM CA bundle of the seed server's certificate, which the deploy script
	// trusts when it reports (nil: the deploy image's trust store).
	SeedCABundle []byte
	// DeployImageURL is the live ISO (cloud-init NoCloud, bash, curl, qemu-img) booted to write
	// raw and qcow2 images to a host's drive. Without it such images cannot be provisioned.
	DeployImageURL string
	// InstallTimeout bounds an installation to disk from the boot of the deploy image (or the
	// installer) to its report or power-off (default 60m).
	InstallTimeout time.Duration
	// SeedRate and SeedBurst limit seed requests per source address (default 50/s, burst 500).
	SeedRate  float64
	SeedBurst int
	// SeedIPXERate and SeedIPXEBurst limit iPXE script requests per source address (default
	// 5/s, burst 20).
	SeedIPXERate  float64
	SeedIPXEBurst int
	// PollInterval is how often waiting objects look again (default 2s).
	PollInterval time.Duration
	// BMCRetryInterval is how long a host with an unusable BMC waits before retrying (default 30s).
	BMCRetryInterval time.Duration
	// BMCCheckInterval is how often a settled host re-reads its BMC, refreshing BMCReachable and
	// the power state (default 1m).
	BMCCheckInterval time.Duration
	// OrphanGracePeriod is how long a claimed host's RedfishMachine may be missing before the
	// host releases the claim (default 2m).
	OrphanGracePeriod time.Duration
	// Maintenance turns the experimental maintenance controllers on (feature gate Maintenance).
	Maintenance bool
	// RestoreGracePeriod is how long an unclaimed host found powered on is kept out of the pool
	// for its machine to be recreated (default 2m).
	RestoreGracePeriod time.Duration
	// BIOSSetupWait is how long a maintenance leaves a host whose BMC reports no boot progress in
	// POST to write a staged BIOS image or settings (default 3m).
	BIOSSetupWait time.Duration
	// FirmwareVerifyGrace is how long the inventory may report the old firmware after an apply,
	// and how long a BMC is given to list an update whose answer was lost (default 5m).
	FirmwareVerifyGrace time.Duration
	// SoftPowerOffTimeout is how long a server pressed once for a graceful shutdown may take to
	// turn off before it is forced off (default 5m).
	SoftPowerOffTimeout time.Duration
	// Namespace restricts the metadata-only watch of Secrets (which tells the host controller
	// when BMC credentials changed) to the manager's namespace; empty: all namespaces.
	Namespace string
}

// RBAC of the manager, least privilege: each rule below says what uses it (the release's
// ClusterRole is generated from these markers, and TestEveryRuleOfTheManagerRoleIsJustified
// holds each to a comment). Nothing is updated whole: spec and status changes are patches
// (optimistic locks where a decision rests on them), status updates only where a claim or a
// maintenance stage is written under the object's resourceVersion.
//
// Our kinds: watched and patched by their controllers (spec: finalizers, claims' records).
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=redfishhosts;redfishmachines;redfishclusters;redfishremediations;redfishmaintenances;redfishmaintenancepolicies;redfishmaintenancesets;redfishjobs,verbs=get;list;watch;patch
// Status of our kinds: patched by their controllers; a claim (hosts), a release and a
// maintenance stage are written with update (conflict on a stale resourceVersion).
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=redfishhosts/status;redfishmachines/status;redfishclusters/status;redfishremediations/status;redfishjobs/status;redfishmaintenances/status;redfishmaintenancepolicies/status;redfishmaintenancesets/status,verbs=update;patch
// A maintenance creates the RedfishJobs of its tasks; a job ends itself after its TTL.
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=redfishjobs,verbs=create;delete
// A maintenance set creates its maintenances; a maintenance ends itself once done.
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=redfishmaintenances,verbs=create;delete
// Owner references with blockOwnerDeletion (what a cluster enforcing OwnerReferencesPermission
// asks for) on what we create: a machine's seed Secret, a set's maintenances, a maintenance's jobs.
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=redfishmachines/finalizers;redfishmaintenancesets/finalizers;redfishmaintenances/finalizers,verbs=update
// CAPI objects, read: a machine's Cluster and Machine, and a maintenance's budget across the
// MachineDeployments and MachineSets of a cluster.
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters;machines;machinesets;machinedeployments,verbs=get;list;watch
// A maintenance marks a Machine (reuse annotation, patch) and has CAPI replace it (delete).
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=delete;patch
// A nodeReuse reservation for a control plane names its object (any provider's kind): a host
// checks that it still exists, reading its metadata only.
// +kubebuilder:rbac:groups=controlplane.cluster.x-k8s.io,resources=*,verbs=get
// Secrets. get: BMC credentials, CA bundles, image credentials, bootstrap data and seed Secrets,
// each by name. list/watch: the two metadata-only informers (Secrets' versions, telling a host
// its credentials changed; and the seed server's, of seed-typed Secrets only). RBAC cannot
// narrow list/watch to metadata: a Secret's data is never cached. create/delete: the seed
// Secret of each RedfishMachine, in its namespace (anywhere a RedfishMachine may be).
// patch: the finalizer a host puts on its labelled credentials Secret, and the deploy script's
// install report the seed server records in a seed Secret. No update, no deletecollection.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;delete;patch
// Events about our objects (both APIs: CAPI's recorder and controller-runtime's).
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// sessionLogoutTimeout bounds how long a stopping manager waits for its BMC sessions' logouts.
const sessionLogoutTimeout = 5 * time.Second

// Setup registers every controller of the provider with the manager.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	bmcOpts := opts.BMC
	if bmcOpts.Observe == nil {
		bmcOpts.Observe = metrics.ObserveBMC
	}
	pool := bmc.NewPool(bmcOpts)
	// The BMC sessions are logged out when the manager stops (with the controllers, which hold
	// the pool only while elected).
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		closing, cancel := context.WithTimeout(context.Background(), sessionLogoutTimeout)
		defer cancel()
		pool.Close(closing)
		return nil
	})); err != nil {
		return err
	}
	// Versions of Secrets, no data: credentials are read again only when they changed.
	var namespaces map[string]cache.Config
	if opts.Namespace != "" {
		namespaces = map[string]cache.Config{opts.Namespace: {}}
	}
	secretVersions, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient(),
		DefaultNamespaces: namespaces, DefaultTransform: host.StripToVersion,
	})
	if err != nil {
		return err
	}
	if err := mgr.Add(secretVersions); err != nil {
		return err
	}
	hosts := &host.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), SecretVersions: secretVersions, BMCs: host.FromPool(pool), SeedBaseURL: opts.SeedBaseURL,
		Recorder: mgr.GetEventRecorder("redfishhost-controller"), PollInterval: opts.PollInterval,
		RetryInterval: opts.BMCRetryInterval, CheckInterval: opts.BMCCheckInterval, OrphanGracePeriod: opts.OrphanGracePeriod,
		RestoreGracePeriod: opts.RestoreGracePeriod, SoftPowerOffTimeout: opts.SoftPowerOffTimeout,
		DeployImageURL: opts.DeployImageURL, InstallTimeout: opts.InstallTimeout,
	}
	if err := hosts.SetupWithManager(ctx, mgr, opts.Controller); err != nil {
		return err
	}
	if err := (&job.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Connect: hosts.Connect, PollInterval: opts.PollInterval,
		Recorder: mgr.GetEventRecorder("redfishjob-controller"),
	}).SetupWithManager(ctx, mgr, opts.Controller); err != nil {
		return err
	}
	if err := (&machine.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), SecretVersions: secretVersions, ClusterCache: opts.ClusterCache,
		Recorder: mgr.GetEventRecorder("redfishmachine-controller"), PollInterval: opts.PollInterval,
	}).SetupWithManager(ctx, mgr, opts.Controller); err != nil {
		return err
	}
	if err := (&remediation.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), PollInterval: opts.PollInterval}).SetupWithManager(ctx, mgr, opts.Controller); err != nil {
		return err
	}
	if opts.Maintenance {
		if err := (&maintenance.Reconciler{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), PollInterval: opts.PollInterval, ClusterCache: opts.ClusterCache,
			Recorder: mgr.GetEventRecorder("redfishmaintenance-controller"), Connect: maintenanceBMC(hosts), SetupWait: opts.BIOSSetupWait,
			VerifyGrace: opts.FirmwareVerifyGrace,
		}).SetupWithManager(ctx, mgr, opts.Controller); err != nil {
			return err
		}
		if err := (&maintenance.PolicyReconciler{Client: mgr.GetClient()}).SetupWithManager(ctx, mgr, opts.Controller); err != nil {
			return err
		}
		if err := (&maintenanceset.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("redfishmaintenanceset-controller")}).SetupWithManager(ctx, mgr, opts.Controller); err != nil {
			return err
		}
	} else if err := (&maintenance.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), GateOff: true, ClusterCache: opts.ClusterCache,
		Recorder: mgr.GetEventRecorder("redfishmaintenance-controller"), Connect: maintenanceBMC(hosts),
	}).SetupWithManager(ctx, mgr, opts.Controller); err != nil {
		// With the gate off, maintenances created before keep their hosts held; deleting one
		// still withdraws its holds (or it would never go: its finalizer).
		return err
	}
	return (&cluster.Reconciler{Client: mgr.GetClient()}).SetupWithManager(ctx, mgr, opts.Controller)
}

// maintenanceBMC hands the maintenance controller the host's pooled BMC client (one session per
// BMC, shared with the host and job controllers).
func maintenanceBMC(hosts *host.Reconciler) func(context.Context, *infrav1.RedfishHost) (maintenance.BMC, error) {
	return func(ctx context.Context, h *infrav1.RedfishHost) (maintenance.BMC, error) {
		c, err := hosts.Connect(ctx, h)
		if err != nil {
			return nil, err
		}
		b, ok := c.(maintenance.BMC)
		if !ok {
			return nil, fmt.Errorf("the BMC client of host %s offers no firmware or BIOS operations", h.Name)
		}
		return b, nil
	}
}
