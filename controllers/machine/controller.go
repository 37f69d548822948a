// Package machine reconciles RedfishMachines, the CAPI v1beta2 InfraMachines of this provider:
// claim a host (claim.go), hand it what to boot (seed.go), report the Node (node.go), and on
// deletion release the host (delete.go). It never talks to a BMC: the host controller does.
package machine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/claim"
	"github.com/caprf/cluster-api-provider-redfish/internal/fresh"
	"github.com/caprf/cluster-api-provider-redfish/internal/onepatch"
	"github.com/caprf/cluster-api-provider-redfish/internal/pause"
	"github.com/caprf/cluster-api-provider-redfish/internal/shutdown"
)

// Reconciler reconciles RedfishMachines.
type Reconciler struct {
	Client client.Client
	// APIReader reads from the API server: Secrets, which the manager does not cache, and a
	// machine whose version this controller does not know yet (its first round after a start or
	// a change of leader, or one the cache does not have), or that the cache is behind on for
	// longer than fresh.Patience.
	APIReader client.Reader
	// SecretVersions reads Secrets' metadata from a watch (whether the seed was written). Nil:
	// the API server is asked.
	SecretVersions client.Reader
	ClusterCache   clustercache.ClusterCache
	Recorder       events.EventRecorder
	// PollInterval is how often a machine waiting for a host or a Node looks again. Default 2s.
	PollInterval time.Duration

	// claimsSent remembers, per RedfishMachine UID, the host whose claim this process wrote and
	// did not yet see in the cache (an answer lost after the update landed, or a cache behind the
	// write): the next round asks the API server about that host before claiming another one.
	// After a restart the informers start from a fresh list, which holds every landed claim.
	claimsSent sync.Map // types.UID -> host name

	controller controller.Controller // for the ClusterCache's Node watches
	// fresh keeps a round from starting on a copy of the machine older than the last round's
	// write (see internal/fresh and read).
	fresh *fresh.Reads
}

// scope is what one reconcile works with.
type scope struct {
	rm      *infrav1.RedfishMachine
	machine *clusterv1.Machine
	cluster *clusterv1.Cluster
	host    *infrav1.RedfishHost // the claimed host, once there is one
}

type phase func(context.Context, *scope) (ctrl.Result, error)

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	if r.PollInterval == 0 {
		r.PollInterval = 2 * time.Second
	}
	r.readFresh()
	clusterToMachines, err := util.ClusterToTypedObjectsMapper(mgr.GetClient(), &infrav1.RedfishMachineList{}, mgr.GetScheme())
	if err != nil {
		return err
	}
	c, err := ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.RedfishMachine{}).
		Named("redfishmachine").
		// Pausing (clusterctl move) and unpausing the Cluster, and its infrastructure becoming
		// ready, reach every machine of the cluster at once.
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(clusterToMachines),
			builder.WithPredicates(predicates.ClusterPausedTransitionsOrInfrastructureProvisioned(mgr.GetScheme(), ctrl.LoggerFrom(ctx)))).
		WithOptions(opts).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(util.MachineToInfrastructureMapFunc(infrav1.GroupVersion.WithKind("RedfishMachine")))).
		Watches(&infrav1.RedfishHost{}, r.hostHandler()).
		// A workload cluster's Nodes (watched through the ClusterCache once a machine waits
		// for one) wake the machine their providerID names.
		WatchesRawSource(r.ClusterCache.GetClusterSource("redfishmachine", clusterToMachines)).
		Build(shutdown.Quiet(r))
	if err != nil {
		return err
	}
	r.controller = c
	return nil
}

// watchNodes makes the Nodes of the machine's workload cluster wake the machine they name (by
// providerID) as soon as they join, instead of the machine polling for them. Called each round a
// machine waits for its Node: the ClusterCache adds the watch once per connection.
func (r *Reconciler) watchNodes(ctx context.Context, cluster *clusterv1.Cluster) error {
	return r.ClusterCache.Watch(ctx, client.ObjectKeyFromObject(cluster), clustercache.NewWatcher(clustercache.WatcherOptions{
		Name: "redfishmachine-watchNodes", Watcher: r.controller, Kind: &corev1.Node{},
		EventHandler: handler.EnqueueRequestsFromMapFunc(nodeToMachine(cluster.Namespace)),
	}))
}

// nodeToMachine names the machine a Node's providerID (redfish://<namespace>/<host>/<machine>)
// names, in the namespace of the Node's Cluster only: a workload cluster's Nodes never wake
// machines of another namespace, whatever providerID they carry.
func nodeToMachine(namespace string) handler.MapFunc {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		n, ok := o.(*corev1.Node)
		if !ok {
			return nil
		}
		ns, name, ok := claim.MachineOf(n.Spec.ProviderID)
		if !ok || ns != namespace {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}}
	}
}

// hostHandler wakes the machines hostToMachines names, and on an update also the machine whose
// claim the host just dropped: a machine being deleted waits for exactly that, and would
// otherwise only notice at its next poll.
func (r *Reconciler) hostHandler() handler.EventHandler {
	enqueue := func(ctx context.Context, o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		for _, req := range r.hostToMachines(ctx, o) {
			q.Add(req)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.ObjectNew, q)
			if old, ok := e.ObjectOld.(*infrav1.RedfishHost); ok && old.Status.Claim != nil {
				q.Add(reconcile.Request{NamespacedName: client.ObjectKey{Namespace: old.Status.Claim.Consumer.Namespace, Name: old.Status.Claim.Consumer.Name}})
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, q)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, q)
		},
	}
}

// hostToMachines wakes the consumer of a host, and every machine still waiting for a host when
// one becomes available.
func (r *Reconciler) hostToMachines(ctx context.Context, o client.Object) []reconcile.Request {
	h, ok := o.(*infrav1.RedfishHost)
	if !ok {
		return nil
	}
	if c := h.Status.Claim; c != nil {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: c.Consumer.Namespace, Name: c.Consumer.Name}}}
	}
	if h.Status.State != infrav1.HostStateAvailable {
		return nil
	}
	list := &infrav1.RedfishMachineList{}
	if err := r.Client.List(ctx, list, client.InNamespace(h.Namespace)); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, m := range list.Items {
		if m.Status.HostRef == "" && m.DeletionTimestamp.IsZero() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&m)})
		}
	}
	return out
}

// Reconcile runs the phases of a RedfishMachine.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	rm, err := r.read(ctx, req.NamespacedName)
	if errors.Is(err, fresh.ErrStale) {
		// The cache catching up with the last write wakes the machine; the requeue is for a
		// watch that is down.
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	if err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err) // (fresh forgets a machine found gone)
	}
	// A machine being deleted releases its host whether or not its Machine and Cluster still
	// exist (force-removed, or deleted with the namespace before it): waiting for them would keep
	// the host claimed and powered on for good.
	deleting := !rm.DeletionTimestamp.IsZero()
	machine, err := util.GetOwnerMachine(ctx, r.Client, rm.ObjectMeta)
	if deleting && apierrors.IsNotFound(err) {
		machine, err = nil, nil
	}
	if err != nil || (machine == nil && !deleting) {
		return ctrl.Result{}, client.IgnoreNotFound(err) // CAPI sets the owner; that event wakes us
	}
	meta := rm.ObjectMeta // the cluster label, when the Machine is gone
	if machine != nil {
		meta = machine.ObjectMeta
		ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("Machine", klogRef(machine)))
	}
	cluster, err := util.GetClusterFromMetadata(ctx, r.Client, meta)
	if deleting && (apierrors.IsNotFound(err) || errors.Is(err, util.ErrNoCluster)) {
		cluster, err = nil, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	isPaused, requeue, notPaused, err := pause.Ensure(ctx, r.Client, cluster, rm)
	if err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}
	// The finalizer is stored before anything else (a host claimed for a machine whose deletion
	// nobody would see through would stay claimed), and the round goes on: a new machine claims
	// its host in its first round.
	if rm.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(rm, infrav1.MachineFinalizer) {
		base := rm.DeepCopy()
		controllerutil.AddFinalizer(rm, infrav1.MachineFinalizer)
		if err := r.Client.Patch(ctx, rm, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{}, nil // the newer version wakes the machine
			}
			return ctrl.Result{}, err
		}
	}

	read := rm.DeepCopy() // what the round's write is computed against
	if notPaused != nil {
		conditions.Set(rm, *notPaused) // a new machine: with the round's write
	}
	s := &scope{rm: rm, machine: machine, cluster: cluster}
	defer func() {
		if err := r.write(ctx, read, rm); err != nil && (rm.DeletionTimestamp == nil || !allNotFound(err)) {
			// (A machine being deleted that is gone: an earlier round removed the finalizer and this
			// one read the machine from a cache that had not seen it go. Nothing is lost.)
			retErr = errors.Join(retErr, err)
		}
	}()

	if !rm.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	for _, p := range []phase{r.waitForPrerequisites, r.claimHost, r.ensureSeed, r.waitForNode} {
		res, err := p(ctx, s)
		if err != nil || !res.IsZero() {
			return res, err
		}
	}
	return ctrl.Result{}, nil
}

// readFresh makes read return no machine older than this controller's last write of it: every
// write through r.Client is recorded from now on.
func (r *Reconciler) readFresh() {
	r.fresh = &fresh.Reads{Kind: infrav1.GroupVersion.WithKind("RedfishMachine")}
	r.Client = r.fresh.Client(r.Client)
}

// read returns the machine as this controller last wrote it, or newer. A round woken by its host
// (the claim it just wrote, a boot) often started on a copy a write or three behind its own last
// round: it computed that round's changes again, and the patch helper's conditions patch, locked
// to that old version, conflicted and slept 100-200 ms before trying again (0.6-0.8 conflicts
// per machine in the benchmark). Such a round now ends at once (fresh.ErrStale), and the write
// reaching the cache wakes the machine. Without SetupWithManager (unit tests) the client is read.
func (r *Reconciler) read(ctx context.Context, key types.NamespacedName) (*infrav1.RedfishMachine, error) {
	rm := &infrav1.RedfishMachine{}
	if r.fresh == nil {
		return rm, r.Client.Get(ctx, key, rm)
	}
	return rm, r.fresh.Get(ctx, r.Client, r.APIReader, key, rm)
}

// waitForPrerequisites waits for the cluster infrastructure and the bootstrap data, the two
// things CAPI promises before a machine may be provisioned.
func (r *Reconciler) waitForPrerequisites(_ context.Context, s *scope) (ctrl.Result, error) {
	if p := s.cluster.Status.Initialization.InfrastructureProvisioned; p == nil || !*p {
		setNotReady(s.rm, infrav1.WaitingForClusterInfraReason, "Waiting for the cluster infrastructure")
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	if s.machine.Spec.Bootstrap.DataSecretName == nil {
		setNotReady(s.rm, infrav1.WaitingForBootstrapReason, "Waiting for the Machine's bootstrap data")
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	if s.rm.Spec.Image == nil {
		setNotReady(s.rm, "ImageMissing", "spec.image is required to provision a host")
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, nil
}

func setNotReady(rm *infrav1.RedfishMachine, reason, msg string) {
	conditions.Set(rm, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: reason, Message: msg})
}

func klogRef(m *clusterv1.Machine) string { return m.Namespace + "/" + m.Name }

// ownedConditions are the condition types this controller sets on a RedfishMachine (the
// maintenance controller sets MaintenancePlanned).
var ownedConditions = []string{infrav1.ReadyCondition, infrav1.HostClaimedCondition, infrav1.PausedCondition}

// write stores what the round changed from read: the metadata, then the status with its
// conditions (internal/onepatch, locked), or, where someone else wrote the machine since the
// round's read, through CAPI's patch helper, which writes the conditions (merged with theirs),
// then the spec and metadata, then the rest of the status. A changed spec (the
// providerID, set in the round that claims the host: the only spec this controller writes) is
// written first, on its own: the conditions then carry the generation it made. Written after
// them, it left them a generation behind, and the next round wrote every condition again for
// nothing but that number (a status write and a reconcile of CAPI's Machine per machine). When
// that spec write fails, the rest is written as before (the claim's hostRef must not be lost,
// and the helper tries the spec again), with the conditions at the generation read; when someone
// else changed the spec meanwhile (the generation moved by more than this write), they keep it too.
func (r *Reconciler) write(ctx context.Context, read, rm *infrav1.RedfishMachine) error {
	latest := read.DeepCopy() // the newest version this round knows the API server has
	var specErr error
	if !equality.Semantic.DeepEqual(read.Spec, rm.Spec) {
		from := rm.DeepCopy()
		from.Spec = *read.Spec.DeepCopy()
		written := rm.DeepCopy()
		if specErr = r.Client.Patch(ctx, written, client.MergeFrom(from)); specErr == nil {
			if written.Generation == read.Generation+1 {
				for i := range rm.Status.Conditions {
					// Only this controller's own: MaintenancePlanned is the maintenance
					// controller's, which has not seen the new generation.
					if c := &rm.Status.Conditions[i]; c.ObservedGeneration == read.Generation && slices.Contains(ownedConditions, c.Type) {
						c.ObservedGeneration = written.Generation
					}
				}
			}
			read = read.DeepCopy()
			read.Spec = *rm.Spec.DeepCopy() // written: not the helper's to write again
			latest = written
		}
	}
	// The status, conditions included, in one write, locked on the newest version this round
	// knows: CAPI's patch helper writes the conditions apart, a second status update per round.
	// The maintenance controller sets a condition here too (MaintenancePlanned); where it, or
	// anyone, wrote the machine's status since the round's read, the lock fails and the helper
	// below merges the conditions. The spec write's version is that lock only where its answer
	// shows the status as read: a status written before it is inside that version.
	// Where it does not, the helper writes at once.
	if equality.Semantic.DeepEqual(latest.Status, read.Status) {
		err := onepatch.New(read, r.Client).Locked(latest.ResourceVersion).Patch(ctx, rm)
		if err == nil || !apierrors.IsConflict(err) {
			// (A Conflict joined behind another API error, a webhook's refusal of the spec, is
			// not seen here: the round is tried again, and nothing is lost either way.)
			return errors.Join(specErr, err)
		}
	}
	helper, err := patch.NewHelper(read, readsOwnWrite{Client: r.Client, written: latest})
	if err == nil {
		err = helper.Patch(ctx, rm, patch.WithOwnedConditions{Conditions: ownedConditions})
	}
	if specErr != nil {
		return errors.Join(specErr, err)
	}
	return err
}

// readsOwnWrite is the client the patch helper writes a round with. The helper reads the machine
// again before it patches the conditions, with the resourceVersion read as a lock; right after
// this round stored its finalizer (or its spec) the cache seldom has that write yet, and the
// conditions patch conflicted and slept 100-200 ms before trying again. Where the cache's copy is
// older than the newest one this round knows (written), the helper gets that one; a newer one
// (anyone's later write) is used as it is.
type readsOwnWrite struct {
	client.Client
	written *infrav1.RedfishMachine
}

func (c readsOwnWrite) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	rm, ok := obj.(*infrav1.RedfishMachine)
	if !ok || key != client.ObjectKeyFromObject(c.written) {
		return nil
	}
	if cmp, err := resourceversion.CompareResourceVersion(rm.ResourceVersion, c.written.ResourceVersion); err == nil && cmp < 0 {
		c.written.DeepCopyInto(rm)
	}
	return nil
}

// allNotFound says whether every error a patch returned is NotFound (through wrapping, CAPI's
// aggregates and errors.Join).
func allNotFound(err error) bool {
	switch e := err.(type) { //nolint:errorlint // each level is looked at, and unwrapped below
	case nil:
		return false
	case kerrors.Aggregate:
		return allOf(e.Errors())
	case interface{ Unwrap() []error }:
		return allOf(e.Unwrap())
	}
	if inner := errors.Unwrap(err); inner != nil {
		return allNotFound(inner)
	}
	return apierrors.IsNotFound(err)
}

func allOf(errs []error) bool {
	for _, e := range errs {
		if !allNotFound(e) {
			return false
		}
	}
	return len(errs) > 0
}
