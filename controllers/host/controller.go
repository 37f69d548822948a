// Package host reconciles RedfishHosts: the only controller that talks to a host's BMC. It runs
// an explicit state machine (states.go), one handler per lifecycle state:
//
//	Registering → Inspecting → Available → Provisioning → Provisioned → Deprovisioning → [Cleaning] → Available
//
// Error holds hosts whose spec cannot work (a malformed BMC address) until the spec changes.
// Claims are written by the RedfishMachine controller into status.claim; this controller acts
// on them and, when a claim is released, returns the host to the pool.
package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
	"github.com/caprf/cluster-api-provider-redfish/internal/claim"
	"github.com/caprf/cluster-api-provider-redfish/internal/fresh"
	"github.com/caprf/cluster-api-provider-redfish/internal/install"
	"github.com/caprf/cluster-api-provider-redfish/internal/metrics"
	"github.com/caprf/cluster-api-provider-redfish/internal/onepatch"
	"github.com/caprf/cluster-api-provider-redfish/internal/pause"
	"github.com/caprf/cluster-api-provider-redfish/internal/shutdown"
)

// Finalizer keeps a claimed host from disappearing under its machine.
const Finalizer = "redfishhost.infrastructure.cluster.x-k8s.io"

// Reconciler reconciles RedfishHosts.
type Reconciler struct {
	Client client.Client
	// APIReader reads Secrets (credentials, CA bundles, seeds), which the manager does not cache,
	// and hosts the cache has not caught up with.
	APIReader client.Reader
	// SecretVersions reads Secrets' metadata (resourceVersion) from a watch: credentials and CA
	// bundles are read from the API server again only when their version changed. Nil: they are
	// read on every reconcile.
	SecretVersions client.Reader
	// BMCs connects to the hosts' BMCs (FromPool in the manager).
	BMCs BMCs
	// SeedBaseURL is where hosts reach the seed server (see internal/seed).
	SeedBaseURL string
	Recorder    events.EventRecorder
	// PollInterval is how often a host is re-read while waiting on the BMC. Default 2s.
	PollInterval time.Duration
	// RetryInterval is how long a host whose BMC is unreachable or refuses its credentials waits
	// before trying again. Default 30s.
	RetryInterval time.Duration
	// CheckInterval is how often a settled host re-reads its BMC: BMCReachable and the power
	// state are never older than this. Default 1m.
	CheckInterval time.Duration
	// SoftPowerOffTimeout is how long a server pressed once for a Soft power-off (GracefulShutdown)
	// may take to shut its OS down before it is forced off. Default 5m.
	SoftPowerOffTimeout time.Duration
	// OrphanGracePeriod is how long a claim's consumer may be missing before the claim is
	// released (clusterctl move and restores recreate machines). Default 2m.
	OrphanGracePeriod time.Duration
	// RestoreGracePeriod is how long an unclaimed host found powered on at inspection is kept out
	// of the pool, waiting for its machine to be recreated and claim it back. Default 2m.
	RestoreGracePeriod time.Duration
	// DeployImageURL is the live ISO that writes raw and qcow2 images to a host's drive.
	DeployImageURL string
	// InstallTimeout bounds an installation to disk. Default 60m.
	InstallTimeout time.Duration

	// transitions remembers, per host, the power transition being followed: when it started (the
	// reset sent, or the first round that found the power in transition); the looks fall on the
	// schedule lookAfter sets from it.
	transitions sync.Map // types.NamespacedName -> followed
	// clock is the time (tests move it); default time.Now.
	clock       func() time.Time
	lastReset   sync.Map // types.NamespacedName -> sentReset
	secretsOnce sync.Once
	secretRead  *secretReader

	// missingRequestors remembers, per host, since when each remediation holding a reboot request
	// on it has been missing (types.NamespacedName -> map[requestor]time.Time).
	missingRequestors sync.Map
	// missingLeaseHolders remembers, per host, since when the holder of its lease is missing.
	missingLeaseHolders sync.Map
	// connected remembers, per host name, the BMC address and host UID its last connection was
	// made for: a host that vanishes without its finalizer has its pooled client dropped.
	connected sync.Map // types.NamespacedName -> connectedTo

	// fresh tells whether the cache has this controller's last write of a host (see read).
	fresh *fresh.Reads
}

// maxTransitionBackoff bounds the wait between reads of a power state in transition, and of an
// erase in progress.
const maxTransitionBackoff = 30 * time.Second

// firstLook is how soon a power action's outcome, or a fresh erase, is read: a quarter of
// PollInterval (a server that powers off in one second is seen off after one, see lookAfter).
func (r *Reconciler) firstLook() time.Duration { return r.PollInterval / 4 }

// eraseLook is how soon an erase started at since is read again: a quarter of the time it has
// run so far (between firstLook and maxTransitionBackoff), so a short erase is seen done soon and
// an hour-long one is not read every 2 s. (status.erase.startedAt has whole seconds: for the
// first PollInterval this is firstLook whatever the rounding.)
func (r *Reconciler) eraseLook(since time.Time) time.Duration {
	return min(max(time.Since(since)/4, r.firstLook()), maxTransitionBackoff)
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	if r.PollInterval == 0 {
		r.PollInterval = 2 * time.Second
	}
	if r.InstallTimeout == 0 {
		r.InstallTimeout = time.Hour
	}
	if r.RetryInterval == 0 {
		r.RetryInterval = 30 * time.Second
	}
	if r.CheckInterval == 0 {
		r.CheckInterval = time.Minute
	}
	if r.OrphanGracePeriod == 0 {
		r.OrphanGracePeriod = 2 * time.Minute
	}
	if r.SoftPowerOffTimeout == 0 {
		r.SoftPowerOffTimeout = 5 * time.Minute
	}
	if r.RestoreGracePeriod == 0 {
		r.RestoreGracePeriod = 2 * time.Minute
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &infrav1.RedfishMachine{}, ProviderIDHostIndex, indexProviderIDHost); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &infrav1.RedfishJob{}, JobHostIndex, IndexJobHost); err != nil {
		return err
	}
	r.fresh = &fresh.Reads{Kind: infrav1.GroupVersion.WithKind("RedfishHost")}
	r.Client = r.fresh.Client(r.Client)
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.RedfishHost{}).
		Named("redfishhost").
		WithOptions(opts).
		// A machine that appears (recreated by clusterctl move or a restore) or changes wakes the
		// host its providerID names, and the host its claim is on.
		// Only what names a host matters: a machine's status changes would each cost its host a
		// BMC read.
		Watches(&infrav1.RedfishMachine{}, handler.EnqueueRequestsFromMapFunc(machineToHosts), builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool {
				before, ok1 := e.ObjectOld.(*infrav1.RedfishMachine)
				after, ok2 := e.ObjectNew.(*infrav1.RedfishMachine)
				return !ok1 || !ok2 || before.Spec.ProviderID != after.Spec.ProviderID || before.Status.HostRef != after.Status.HostRef
			},
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		// A RedfishJob that ends, goes, or goes back to waiting (jobChanges) wakes its host, which
		// then restores the power it wants: only a host that wants a power state.
		Watches(&infrav1.RedfishJob{}, handler.EnqueueRequestsFromMapFunc(r.jobToHost), builder.WithPredicates(jobChanges)).
		Complete(shutdown.Quiet(r))
}

func (r *Reconciler) jobToHost(ctx context.Context, o client.Object) []reconcile.Request {
	j, ok := o.(*infrav1.RedfishJob)
	if !ok {
		return nil
	}
	key := types.NamespacedName{Namespace: j.Namespace, Name: j.Spec.HostName}
	h := &infrav1.RedfishHost{}
	if err := r.Client.Get(ctx, key, h); err != nil {
		return nil
	}
	if stateOf(h) == infrav1.HostStateAvailable && h.Spec.Online == nil && h.Status.Claim == nil && len(h.Spec.RebootRequests) == 0 {
		return nil // nothing waited for the job, nothing to restore
	}
	return []reconcile.Request{{NamespacedName: key}}
}

// ProviderIDHostIndex indexes RedfishMachines by the host their spec.providerID names.
const ProviderIDHostIndex = "caprf.spec.providerID.host"

func indexProviderIDHost(o client.Object) []string {
	rm, ok := o.(*infrav1.RedfishMachine)
	if !ok {
		return nil
	}
	if h := claim.HostOf(rm.Spec.ProviderID, rm.Namespace); h != "" {
		return []string{h}
	}
	return nil
}

func machineToHosts(_ context.Context, o client.Object) []reconcile.Request {
	rm, ok := o.(*infrav1.RedfishMachine)
	if !ok {
		return nil
	}
	var out []reconcile.Request
	for _, h := range []string{claim.HostOf(rm.Spec.ProviderID, rm.Namespace), rm.Status.HostRef} {
		if h != "" && (len(out) == 0 || out[0].Name != h) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: rm.Namespace, Name: h}})
		}
	}
	return out
}

// scope is everything one reconcile of a host works with.
type scope struct {
	host  *infrav1.RedfishHost
	bmc   BMC            // nil until connect succeeded
	power bmc.PowerState // read by connect, this reconcile
	acted bool           // a power action was sent this reconcile
	// registered says how the host was registered in this round, for the inspection's event to
	// tell ("": not this round).
	registered string
	// store writes the host now (a handler that must record something before acting on the BMC
	// goes on in the same round once it is stored).
	store func() error
}

// Reconcile moves one host through its state machine.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	host, err := r.read(ctx, req.NamespacedName)
	if errors.Is(err, fresh.ErrStale) {
		// The cache catching up with the last write wakes the host (the queue merges this requeue
		// into that round); the requeue is for a watch that is down.
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			r.transitions.Delete(req.NamespacedName)
			r.lastReset.Delete(req.NamespacedName)
			r.missingRequestors.Delete(req.NamespacedName)
			r.missingLeaseHolders.Delete(req.NamespacedName)
			r.forgetConnection(req.NamespacedName) // gone without its finalizer (removed by force)
			if r.fresh != nil {
				r.fresh.Forget(req.NamespacedName)
			}
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// A paused host (cluster.x-k8s.io/paused annotation) does nothing on its BMC, and nothing
	// else either (not even its deletion), until the annotation is removed.
	isPaused, requeue, notPaused, err := pause.Ensure(ctx, r.Client, nil, host)
	if err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}
	if dropped, err := r.dropOrphanedRemediationRequests(ctx, host); err != nil || dropped {
		return ctrl.Result{}, err // the update wakes the next round
	}
	if dropped, err := r.dropOrphanedLease(ctx, host); err != nil || dropped {
		return ctrl.Result{}, err // the update wakes the next round
	}
	// The finalizer is stored before anything else is done for a host (a BMC session, a restored
	// claim), and the round goes on: a new host is registered and inspected in the round that
	// adds it.
	if host.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(host, Finalizer) {
		base := host.DeepCopy()
		controllerutil.AddFinalizer(host, Finalizer)
		if err := r.Client.Patch(ctx, host, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{}, nil // the newer version wakes the host
			}
			return ctrl.Result{}, err
		}
	}
	// Only this controller sets a host's conditions: a round's status, conditions included, is
	// one write (internal/onepatch; a condition of another type found on the host sends it
	// through CAPI's patch helper, which keeps that condition).
	helper := onepatch.New(host, r.Client).Owning(r.APIReader, ownedConditions...)
	if notPaused != nil {
		conditions.Set(host, *notPaused) // a new host: with the round's write
	}
	record(host) // with the round's write, whatever the round then waits for
	write := func() error {
		r.updateReady(host)
		updateRootDevice(host)
		return helper.Patch(ctx, host)
	}
	defer func() {
		if host.DeletionTimestamp.IsZero() || controllerutil.ContainsFinalizer(host, Finalizer) {
			metrics.SetHostState(host.Namespace, host.Name, string(stateOf(host)))
		} else {
			metrics.SetHostState(host.Namespace, host.Name, "")
		}
		if err := write(); err != nil {
			retErr = errors.Join(retErr, err)
		}
	}()

	deleting := !host.DeletionTimestamp.IsZero()
	if wait, err := r.releaseOrphanedClaim(ctx, host); err != nil || wait > 0 {
		if deleting {
			r.deletionWaits(host)
		}
		return ctrl.Result{RequeueAfter: wait}, err
	}
	if deleting && !releasing(host) {
		return r.reconcileDelete(ctx, host)
	}
	if !deleting {
		if err := r.protectCredentials(ctx, host); err != nil {
			return ctrl.Result{}, err
		}
	}
	// A host deleted while its claim is being released (its machine deleted, or its whole
	// namespace) keeps its finalizer and goes through the release: powered off and cleaned as
	// the claim asked, then deleted.
	if r.reregister(host) {
		return ctrl.Result{}, nil // the status change wakes the next state
	}
	if st := stateOf(host); st != infrav1.HostStateAvailable && st != infrav1.HostStateRegistering && st != infrav1.HostStateError && st != infrav1.HostStateInspecting {
		// A RedfishJob is using the BMC (one started on this host before a claim, or in a
		// maintenance): the host's own BMC actions wait for its end, which wakes the host.
		if running, err := r.jobRunning(ctx, host, stateWork(host)); err != nil || running {
			return ctrl.Result{RequeueAfter: r.CheckInterval}, err
		}
	}
	s := &scope{host: host, store: func() error {
		if err := write(); err != nil {
			return err
		}
		// What the round changes from here on is written at its end, as usual.
		helper = onepatch.New(host, r.Client).Owning(r.APIReader, ownedConditions...)
		return nil
	}}
	res, err := r.handlers()[stateOf(host)](ctx, s)
	record(host)
	res = r.followTransition(req.NamespacedName, s, res)
	// A reboot request whose requestor is gone is dropped when its grace period ends, not at the
	// next resync of a host its request holds off.
	if due, ok := r.orphanDue(req.NamespacedName); ok && (res.RequeueAfter == 0 || due < res.RequeueAfter) {
		res.RequeueAfter = due
	}
	return res, err
}

// read returns the host as this controller last left it, or newer: every state handler may act on
// the BMC (power off, boot, erase), and a copy older than the last round's write would repeat an
// action that round recorded (see internal/fresh; fresh.ErrStale while the cache is behind).
// Without the recording client SetupWithManager installs (unit tests), every read goes to the API
// server.
func (r *Reconciler) read(ctx context.Context, key types.NamespacedName) (*infrav1.RedfishHost, error) {
	host := &infrav1.RedfishHost{}
	if r.fresh == nil {
		return host, r.APIReader.Get(ctx, key, host)
	}
	return host, r.fresh.Get(ctx, r.Client, r.APIReader, key, host)
}

// orphanDue says how soon the grace period of the host's first missing reboot requestor ends.
func (r *Reconciler) orphanDue(key types.NamespacedName) (time.Duration, bool) {
	v, ok := r.missingRequestors.Load(key)
	if !ok {
		return 0, false
	}
	var due time.Duration
	first := true
	for _, since := range v.(map[string]time.Time) {
		if d := time.Until(since.Add(r.OrphanGracePeriod)); first || d < due {
			due, first = d, false
		}
	}
	return max(due, r.firstLook()), !first
}

// dropOrphanedRemediationRequests removes reboot requests of RedfishRemediations and
// RedfishMaintenances that no longer exist (read from the API server): each withdraws its own
// request before it goes, but a request left behind (by an older version, or a finalizer removed by hand) would hold the host
// off forever. The change is its own optimistic-locked patch, so a request another requestor adds
// meanwhile is never lost. True when requests were dropped.
func (r *Reconciler) dropOrphanedRemediationRequests(ctx context.Context, h *infrav1.RedfishHost) (bool, error) {
	key := types.NamespacedName{Namespace: h.Namespace, Name: h.Name}
	var seen map[string]time.Time
	if v, ok := r.missingRequestors.Load(key); ok {
		seen = v.(map[string]time.Time)
	}
	missing := map[string]time.Time{} // only requestors missing now: the rest is forgotten
	paused := h.Status.Claim != nil && r.clusterPaused(ctx, h.Namespace, h.Status.Claim.ClusterName)
	kept := h.Spec.RebootRequests[:0:0]
	for _, rr := range h.Spec.RebootRequests {
		kind, name := requestorObject(rr.Requestor)
		if kind != "" {
			obj := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: infrav1.GroupVersion.String(), Kind: kind}}
			err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: name}, obj)
			if err == nil && rr.RequestorUID != "" && string(obj.UID) != rr.RequestorUID {
				// Another object under the requestor's name: the one that asked is gone.
				err = apierrors.NewNotFound(infrav1.GroupVersion.WithResource(kind).GroupResource(), name)
			}
			switch {
			case err == nil, meta.IsNoMatchError(err): // the experimental CRDs not installed: kept
			case !apierrors.IsNotFound(err):
				return false, err
			default:
				// Missing for the grace period first, and never while the claim's Cluster is
				// paused: clusterctl move recreates a host before its remediation, whose fencing
				// must not be lifted meanwhile.
				since, ok := seen[rr.Requestor]
				if !ok || paused {
					since = time.Now()
				}
				if time.Since(since) >= r.OrphanGracePeriod {
					continue
				}
				missing[rr.Requestor] = since
			}
		}
		kept = append(kept, rr)
	}
	if len(missing) > 0 {
		r.missingRequestors.Store(key, missing)
	} else {
		r.missingRequestors.Delete(key)
	}
	if len(kept) == len(h.Spec.RebootRequests) {
		return false, nil
	}
	before := h.DeepCopy()
	h.Spec.RebootRequests = kept
	if err := r.Client.Patch(ctx, h, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			return true, nil // changed meanwhile: that change wakes the next round
		}
		return false, err
	}
	r.event(h, "RebootRequestDropped", "Power", "dropped %d reboot request(s) of RedfishRemediations or RedfishMaintenances that no longer exist", len(before.Spec.RebootRequests)-len(kept))
	return true, nil
}

// dropOrphanedLease releases a lease whose holder is gone (deleted with its finalizer removed by
// hand, or re-created under its name), after the orphan grace period and never while the claim's
// Cluster is paused (clusterctl move recreates a maintenance with a new UID; it takes its lease
// over itself): a lease left behind would keep the host from every claim, job and BMC action for
// ever. True when it did.
func (r *Reconciler) dropOrphanedLease(ctx context.Context, h *infrav1.RedfishHost) (bool, error) {
	key := types.NamespacedName{Namespace: h.Namespace, Name: h.Name}
	l := h.Status.Lease
	if l == nil {
		r.missingLeaseHolders.Delete(key)
		return false, nil
	}
	obj := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: infrav1.GroupVersion.String(), Kind: l.Holder.Kind}}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: l.Holder.Name}, obj)
	switch {
	case err == nil && string(obj.UID) == l.HolderUID, meta.IsNoMatchError(err):
		r.missingLeaseHolders.Delete(key)
		return false, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, err
	}
	since := time.Now()
	if v, ok := r.missingLeaseHolders.Load(key); ok {
		since = v.(time.Time)
	}
	if h.Status.Claim != nil && r.clusterPaused(ctx, h.Namespace, h.Status.Claim.ClusterName) {
		since = time.Now()
	}
	r.missingLeaseHolders.Store(key, since)
	grace := r.OrphanGracePeriod
	if l.Flash != nil {
		// Its holder sent a flash the BMC may still be writing: given a step's time to end.
		grace = max(grace, orphanFlashGrace)
	}
	if time.Since(since) < grace {
		return false, nil
	}
	before := h.DeepCopy()
	h.Status.Lease = nil
	if err := r.Client.Status().Patch(ctx, h, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			return true, nil // changed meanwhile: that change wakes the next round
		}
		return false, err
	}
	r.missingLeaseHolders.Delete(key)
	r.event(h, "LeaseDropped", "Lease", "dropped the lease of %s %s, which no longer exists", l.Holder.Kind, l.Holder.Name)
	return true, nil
}

// orphanFlashGrace is how long a lease whose holder is gone is kept when that holder had sent a
// flash (a maintenance step's default timeout).
const orphanFlashGrace = 30 * time.Minute

// requestorObject names the object behind a reboot request's requestor, when it is one of ours.
func requestorObject(requestor string) (kind, name string) {
	if name, ok := strings.CutPrefix(requestor, infrav1.RemediationRequestorPrefix); ok {
		return "RedfishRemediation", name
	}
	if name, ok := strings.CutPrefix(requestor, infrav1.MaintenanceRequestorPrefix); ok {
		return "RedfishMaintenance", name
	}
	return "", ""
}

// reregister sends an unclaimed host whose spec.bmc.address no longer is the address it was
// registered at back to Registering: it is another server now, whose inventory, power and
// identity must be read afresh (admission refuses this change while the host is claimed or
// reserved). True when it did.
func (r *Reconciler) reregister(h *infrav1.RedfishHost) bool {
	old := h.Status.RegisteredAddress
	if old == "" {
		if st := stateOf(h); st != infrav1.HostStateRegistering && st != infrav1.HostStateError {
			h.Status.RegisteredAddress = h.Spec.BMC.Address // registered before this field existed
		}
		return false
	}
	if old == h.Spec.BMC.Address || h.Status.Claim != nil {
		return false
	}
	r.BMCs.ForgetOwned(old, string(h.UID))
	h.Status.State = infrav1.HostStateRegistering
	h.Status.RegisteredAddress, h.Status.PowerState, h.Status.Inventory, h.Status.SoftPowerOffSentAt = "", "", nil, nil
	conditions.Delete(h, infrav1.InspectedCondition)
	r.event(h, "BMCChanged", "Register", "spec.bmc.address changed: registering and inspecting the server again")
	return true
}

// releaseOrphanedClaim releases a claim whose consumer (a RedfishMachine) no longer exists, so
// the host is deprovisioned normally instead of staying claimed forever. The consumer must stay
// missing for OrphanGracePeriod. A positive wait means: look again then, doing nothing else now.
func (r *Reconciler) releaseOrphanedClaim(ctx context.Context, h *infrav1.RedfishHost) (time.Duration, error) {
	c := h.Status.Claim
	if c == nil || c.Release {
		return 0, nil
	}
	// From the cache: this runs on every reconcile of a claimed host, and the grace period covers
	// any lag of the cache.
	consumer := &infrav1.RedfishMachine{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Consumer.Namespace, Name: c.Consumer.Name}, consumer)
	if err == nil && string(consumer.UID) != c.ConsumerUID {
		if c.ConsumerUID == "" || claim.HostOf(consumer.Spec.ProviderID, h.Namespace) == h.Name {
			// The same machine, recreated with a new UID (clusterctl move, a restore): it
			// adopts the claim, and the host keeps running it.
			c.ConsumerUID = string(consumer.UID)
			r.event(h, infrav1.ClaimRestoredReason, "Claim", "RedfishMachine %s was recreated: its claim is kept", consumer.Name)
		} else {
			err = apierrors.NewNotFound(infrav1.GroupVersion.WithResource("redfishmachines").GroupResource(), c.Consumer.Name) // another machine under the same name: the consumer is gone
		}
	}
	switch {
	case err == nil:
		c.ConsumerMissingSince = nil
		if c.ClusterName == "" { // claims made before the field existed
			c.ClusterName = consumer.Labels[clusterv1.ClusterNameLabel]
		}
		return 0, nil
	case !apierrors.IsNotFound(err):
		return 0, err
	case r.clusterPaused(ctx, h.Namespace, c.ClusterName):
		// clusterctl move deletes the source's machines before its hosts: a paused Cluster's
		// missing machine is being moved, not gone.
		c.ConsumerMissingSince = nil
		return r.CheckInterval, nil
	case c.ConsumerMissingSince == nil:
		now := metav1.Now()
		c.ConsumerMissingSince = &now
		return r.OrphanGracePeriod, nil
	}
	if left := r.OrphanGracePeriod - time.Since(c.ConsumerMissingSince.Time); left > 0 {
		return left, nil
	}
	c.Release, c.ConsumerMissingSince = true, nil
	r.event(h, "ConsumerGone", "Release", "%s %s no longer exists (missing for %s): releasing the host", c.Consumer.Kind, c.Consumer.Name, r.OrphanGracePeriod)
	return 0, nil
}

// clusterPaused says whether the named Cluster exists and is paused (spec.paused or the paused
// annotation). Unknown (no name, unreadable) counts as not paused.
func (r *Reconciler) clusterPaused(ctx context.Context, namespace, name string) bool {
	if name == "" {
		return false
	}
	c := &clusterv1.Cluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, c); err != nil {
		return false
	}
	return annotations.IsPaused(c, c)
}

// followTransition re-reads a power state in transition (PoweringOn, PoweringOff, or a power
// action just sent) until it settles, backing off from firstLook, instead of reporting a stale
// state for a whole CheckInterval.
func (r *Reconciler) followTransition(key types.NamespacedName, s *scope, res ctrl.Result) ctrl.Result {
	if s.bmc == nil {
		return res // no BMC read this round
	}
	if !s.acted && s.power != bmc.PowerPoweringOn && s.power != bmc.PowerPoweringOff {
		r.transitions.Delete(key)
		return res
	}
	now := r.now()
	t := r.transition(key, s.host, "", now)
	t.last = now
	r.transitions.Store(key, t)
	wait := lookAfter(now.Sub(t.start), r.firstLook())
	if res.RequeueAfter == 0 || res.RequeueAfter > wait {
		res.RequeueAfter = wait
	}
	return res
}

func stateOf(h *infrav1.RedfishHost) infrav1.HostState {
	if h.Status.State == "" {
		return infrav1.HostStateRegistering
	}
	return h.Status.State
}

// releasing says whether h is being released: a claim asked to release, or a release under
// way (powering off, cleaning) whose claim is already gone.
func releasing(h *infrav1.RedfishHost) bool {
	if c := h.Status.Claim; c != nil {
		return c.Release
	}
	st := stateOf(h)
	return st == infrav1.HostStateDeprovisioning || st == infrav1.HostStateCleaning
}

// deletionWaits says, on a deleted host still claimed, what its deletion waits for.
func (r *Reconciler) deletionWaits(h *infrav1.RedfishHost) {
	c := h.Status.Claim
	if c == nil {
		return
	}
	msg := fmt.Sprintf("Deletion waits: claimed by %s %s; delete that machine first", c.Consumer.Kind, c.Consumer.Name)
	if c.ConsumerMissingSince != nil {
		msg = fmt.Sprintf("Deletion waits: %s %s, which holds the claim, is missing since %s; the claim is released (server powered off and cleaned) once it has been gone for %s",
			c.Consumer.Kind, c.Consumer.Name, c.ConsumerMissingSince.Format(time.RFC3339), r.OrphanGracePeriod)
	}
	conditions.Set(h, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.DeletingReason, Message: msg})
}

func (r *Reconciler) reconcileDelete(ctx context.Context, h *infrav1.RedfishHost) (ctrl.Result, error) {
	if c := h.Status.Claim; c != nil && !c.Release {
		r.deletionWaits(h)
		return ctrl.Result{}, nil
	}
	if err := r.releaseCredentials(ctx, h, ""); err != nil {
		return ctrl.Result{}, err // the host's finalizer stays until its Secrets' are gone
	}
	r.BMCs.ForgetOwned(h.Spec.BMC.Address, string(h.UID))
	r.forgetConnection(client.ObjectKeyFromObject(h))
	r.secrets().forget(client.ObjectKey{Namespace: h.Namespace, Name: h.Spec.BMC.CredentialsName})
	if name := h.Spec.BMC.CABundleName; name != "" {
		r.secrets().forget(client.ObjectKey{Namespace: h.Namespace, Name: name})
	}
	controllerutil.RemoveFinalizer(h, Finalizer)
	return ctrl.Result{}, nil
}

// secrets reads credentials and CA bundles (see SecretVersions).
func (r *Reconciler) secrets() *secretReader {
	r.secretsOnce.Do(func() { r.secretRead = &secretReader{api: r.APIReader, versions: r.SecretVersions} })
	return r.secretRead
}

// target is the host's BMC address with its credentials (and CA bundle); on error, the reason
// for the BMCReachable condition.
func (r *Reconciler) target(ctx context.Context, h *infrav1.RedfishHost) (bmc.Target, string, error) {
	if _, err := bmc.ParseAddress(h.Spec.BMC.Address); err != nil {
		return bmc.Target{}, infrav1.BMCAddressInvalidReason, err
	}
	sec, err := r.secrets().getSecret(ctx, client.ObjectKey{Namespace: h.Namespace, Name: h.Spec.BMC.CredentialsName})
	if err != nil {
		if apierrors.IsNotFound(err) {
			err = fmt.Errorf("credentials Secret %s not found", h.Spec.BMC.CredentialsName)
		}
		return bmc.Target{}, infrav1.CredentialsMissingReason, err
	}
	// Checked here too, not only at admission: a Secret created after its host, or its label
	// removed later, is never sent to a BMC. A Secret that already carries this host's
	// credentials finalizer (put there before the label was required, for a host that used it)
	// is trusted, so that an upgrade does not cut a running fleet off its BMCs; the finalizer is
	// only ever added to labelled Secrets now.
	if sec.labels[infrav1.BMCCredentialsLabel] != "true" && !slices.Contains(sec.finalizers, credentialsFinalizer(h)) {
		return bmc.Target{}, infrav1.CredentialsNotLabelledReason, fmt.Errorf("credentials Secret %s lacks the label %s: \"true\"; only Secrets so labelled are sent to BMCs", h.Spec.BMC.CredentialsName, infrav1.BMCCredentialsLabel)
	}
	user, pass := sec.data["username"], sec.data["password"]
	if len(user) == 0 || len(pass) == 0 {
		return bmc.Target{}, infrav1.CredentialsMissingReason, fmt.Errorf("credentials Secret %s needs non-empty keys \"username\" and \"password\"", h.Spec.BMC.CredentialsName)
	}
	t := bmc.Target{Address: h.Spec.BMC.Address, Username: string(user), Password: string(pass), InsecureSkipVerify: h.Spec.BMC.InsecureSkipVerify,
		BasicAuth: h.Spec.BMC.AuthMethod == infrav1.BMCAuthBasic, Owner: string(h.UID)}
	if name := h.Spec.BMC.CABundleName; name != "" {
		ca, err := r.secrets().get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: name})
		if err != nil {
			return bmc.Target{}, infrav1.CredentialsMissingReason, fmt.Errorf("CA bundle Secret %s: %w", name, err)
		}
		t.CABundle = ca["ca.crt"]
	}
	return t, "", nil
}

// Connect returns the host's pooled BMC client, the one this controller uses (one session per
// BMC, credentials read once per Secret version), for other controllers that act on the BMC.
func (r *Reconciler) Connect(ctx context.Context, h *infrav1.RedfishHost) (BMC, error) {
	t, _, err := r.target(ctx, h)
	if err != nil {
		return nil, err
	}
	// Remembered unless the host controller has (its record is the live host's; another
	// controller's copy of the host may be older).
	r.connected.LoadOrStore(client.ObjectKeyFromObject(h), connectedTo{address: t.Address, uid: h.UID})
	return r.BMCs.Get(ctx, t)
}

// connect returns the pooled BMC client of the host, reading its credentials (and CA bundle).
// Failures are reported in the BMCReachable condition and returned.
func (r *Reconciler) connect(ctx context.Context, s *scope) error {
	h := s.host
	fail := func(reason string, err error) error {
		conditions.Set(h, metav1.Condition{Type: infrav1.BMCReachableCondition, Status: metav1.ConditionFalse, Reason: reason, Message: err.Error()})
		return err
	}
	t, reason, err := r.target(ctx, h)
	if err != nil {
		return fail(reason, err)
	}
	r.remember(h, t.Address)
	// The power state read is the reachability check, and the only one a handler needs this round.
	c, err := r.BMCs.Get(ctx, t)
	var ps bmc.PowerState
	if err == nil {
		ps, err = c.PowerState(ctx)
	}
	if errors.Is(err, bmc.ErrConnecting) {
		// No outcome yet: the conditions stay as they are (retryAfter polls soon), except a
		// verdict on an address that has been fixed since.
		if conditions.GetReason(h, infrav1.BMCReachableCondition) == infrav1.BMCAddressInvalidReason {
			conditions.Set(h, metav1.Condition{Type: infrav1.BMCReachableCondition, Status: metav1.ConditionUnknown, Reason: infrav1.BMCConnectingReason, Message: "Connecting to the BMC"})
		}
		return err
	}
	if err != nil {
		reason := infrav1.BMCUnreachableReason
		switch {
		case errors.Is(err, bmc.ErrAuth):
			reason = infrav1.BMCAuthFailedReason
		case errors.Is(err, bmc.ErrTLS):
			reason = infrav1.BMCCertificateUntrustedReason
		case errors.Is(err, bmc.ErrSessionLimit):
			reason = infrav1.BMCSessionLimitReason
			err = fmt.Errorf("%w; free sessions on the BMC, or set spec.bmc.authMethod: Basic (no session needed)", err)
		}
		return fail(reason, err)
	}
	conditions.Set(h, metav1.Condition{Type: infrav1.BMCReachableCondition, Status: metav1.ConditionTrue, Reason: infrav1.ReadyReason})
	s.bmc, s.power = c, ps
	h.Status.PowerState = string(ps)
	return nil
}

// retryAfter is how soon a host whose BMC was not usable looks again: soon while the connection
// is still being made in the background, RetryInterval after a failure.
func (r *Reconciler) retryAfter(err error) time.Duration {
	if errors.Is(err, bmc.ErrConnecting) {
		return r.PollInterval
	}
	return r.RetryInterval
}

// ownedConditions are the condition types this controller sets on a host: the only ones a
// host holds. (A type it does not own found on a host sends the round's write through CAPI's
// patch helper, which keeps it: onepatch.Helper.Owning.)
var ownedConditions = []string{
	infrav1.ReadyCondition, clusterv1.PausedCondition, infrav1.BMCReachableCondition,
	infrav1.InspectedCondition, infrav1.BootPreparedCondition, infrav1.CleanedCondition,
	infrav1.RootDeviceFoundCondition, infrav1.ImageInstalledCondition,
}

// updateRootDevice says in RootDeviceFound which drive an installation to disk would write, or
// why there is none: such machines do not claim the host then.
func updateRootDevice(h *infrav1.RedfishHost) {
	if h.Status.Inventory == nil {
		return
	}
	c := metav1.Condition{Type: infrav1.RootDeviceFoundCondition, Status: metav1.ConditionTrue, Reason: infrav1.RootDeviceMatchedReason}
	if d, err := install.RootDevice(h.Spec.RootDeviceHints, h.Status.Inventory); err != nil {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, infrav1.NoMatchingDriveReason, err.Error()+": machines that install an image to disk (raw, qcow2, iso) do not claim this host"
	} else {
		c.Message = "disk images are written to " + deviceName(d)
	}
	conditions.Set(h, c)
}

func (r *Reconciler) updateReady(h *infrav1.RedfishHost) {
	if !h.DeletionTimestamp.IsZero() {
		return
	}
	st := stateOf(h)
	ready := conditions.IsTrue(h, infrav1.BMCReachableCondition) && (st == infrav1.HostStateAvailable || st == infrav1.HostStateProvisioned)
	c := metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.NotReadyReason, Message: "Host is " + string(st)}
	if ready {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, infrav1.ReadyReason, ""
	}
	conditions.Set(h, c)
}

// reset sends a power action and counts it.
func (r *Reconciler) reset(ctx context.Context, s *scope, t bmc.ResetType) error {
	s.acted = true
	// Many BMCs keep reporting the old power state for seconds after accepting a reset: the same
	// reset is not sent again within PollInterval of the last one; the host only reads the state.
	key := client.ObjectKeyFromObject(s.host)
	if v, ok := r.lastReset.Load(key); ok {
		if last := v.(sentReset); last.t == t && r.now().Sub(last.at) < r.PollInterval {
			return nil
		}
	}
	metrics.PowerOperations.WithLabelValues(s.host.Namespace, s.host.Name, string(t)).Inc()
	// The power state this round read is the one the reset starts from: the BMC is not read again.
	err := s.bmc.ResetFrom(ctx, t, s.power)
	// Recorded whatever the answer but a refusal: a reset whose answer was lost (a timeout) may
	// have been carried out, and the BMC may not show it yet; one the BMC refused (409 while busy,
	// 4xx) was not, and the next round sends it again.
	if bmc.Refused(err) {
		if v, ok := r.lastReset.Load(key); ok && v.(sentReset).t == t {
			r.lastReset.CompareAndDelete(key, v)
		}
	} else {
		r.lastReset.Store(key, sentReset{t: t, at: r.now()})
	}
	if err == nil {
		r.transitionStarted(key, s.host, t)
	}
	return err
}

// followed is a power transition the host controller follows (see followTransition).
type followed struct {
	uid         types.UID
	reset       bmc.ResetType // the last reset sent; "" when none was (found in transition)
	start, last time.Time     // the schedule's start; the last look
}

// transition is the transition of h being followed at now, or a new one starting now: a new reset
// type starts a new schedule (the same reset sent again continues its own), as does another host
// of the same name, or a schedule nobody looked at for longer than two maxTransitionBackoffs
// (rounds that return early, such as a paused host or a running RedfishJob, leave it behind).
func (r *Reconciler) transition(key types.NamespacedName, h *infrav1.RedfishHost, sent bmc.ResetType, now time.Time) followed {
	if v, ok := r.transitions.Load(key); ok {
		t := v.(followed)
		if t.uid == h.UID && (sent == "" || sent == t.reset) && now.Sub(t.last) <= 2*maxTransitionBackoff {
			return t
		}
	}
	return followed{uid: h.UID, reset: sent, start: now, last: now}
}

// transitionStarted records a reset just sent: a new schedule of looks, unless the same reset
// was sent again while its transition is still followed.
func (r *Reconciler) transitionStarted(key types.NamespacedName, h *infrav1.RedfishHost, t bmc.ResetType) {
	r.transitions.Store(key, r.transition(key, h, t, r.now()))
}

// lookAfter is how long after elapsed (since the transition's start) the next look falls: the
// looks are at firstLook, 2, 3 firstLooks, then each half as long again after the start as the
// one before (a gap of half the time gone by, at most maxTransitionBackoff). A transition is so
// seen at most half its length late (at most firstLook for one shorter than 3 firstLooks): a
// doubling schedule (1, 3, 7, 15 … firstLooks) saw a 4-s power-off at 7.5 s and an 8-s one at
// 15.5 s, for every host of a maintenance wave; this one reads a 20-s transition 10 times
// instead of 6.
func lookAfter(elapsed, firstLook time.Duration) time.Duration {
	elapsed = elapsed.Truncate(time.Millisecond)
	step := max(firstLook, time.Millisecond)
	next := step
	for next <= elapsed {
		gap := min(max(step, (next/2).Truncate(time.Millisecond)), maxTransitionBackoff)
		if gap == maxTransitionBackoff {
			// Past the growth: every maxTransitionBackoff.
			next += ((elapsed-next)/gap + 1) * gap
			break
		}
		next += gap
	}
	return min(next-elapsed, maxTransitionBackoff)
}

func (r *Reconciler) now() time.Time {
	if r.clock != nil {
		return r.clock()
	}
	return time.Now()
}

// connectedTo is the BMC address a host's last connection was made for, and the host's UID.
type connectedTo struct {
	address string
	uid     types.UID
}

// remember records that h connects to address: what the last connection under h's name was made
// for, if it was another address or another host of that name (deleted and created again), is
// dropped from the pool.
func (r *Reconciler) remember(h *infrav1.RedfishHost, address string) {
	now := connectedTo{address: address, uid: h.UID}
	if prev, loaded := r.connected.Swap(client.ObjectKeyFromObject(h), now); loaded && prev.(connectedTo) != now {
		p := prev.(connectedTo)
		r.BMCs.ForgetOwned(p.address, string(p.uid))
	}
}

// forgetConnection drops from the pool what the last connection under key was made for (unless a
// host created at that address since holds it).
func (r *Reconciler) forgetConnection(key types.NamespacedName) {
	if v, ok := r.connected.LoadAndDelete(key); ok {
		c := v.(connectedTo)
		r.BMCs.ForgetOwned(c.address, string(c.uid))
	}
}

// sentReset is the last reset a host's BMC accepted.
type sentReset struct {
	t  bmc.ResetType
	at time.Time
}

func (r *Reconciler) event(h *infrav1.RedfishHost, reason, action, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(h, nil, corev1.EventTypeNormal, reason, action, format, args...)
	}
}
