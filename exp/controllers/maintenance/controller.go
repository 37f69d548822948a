// Package maintenance reconciles RedfishMaintenances: the typed handshake that takes one host out
// of service. Stages move forward only: Pending → Announced (on the RedfishMachine of the host) →
// Approved (by the owner, by policy, or by CAPI deleting the Machine anyway) → Draining (inside a
// window and the disruption budget; CAPI drains and deletes the Machine, its MachineSet replaces
// it elsewhere) → InMaintenance (tasks) → Completed; or Failed (timeout) / Cancelled (deleted).
// The host controller stays the only one touching the BMC: power is held off through a typed
// reboot request on the host, merged with every other requestor's.
package maintenance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/go-logr/logr"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
	hostctrl "github.com/caprf/cluster-api-provider-redfish/controllers/host"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/fresh"
	"github.com/caprf/cluster-api-provider-redfish/internal/metrics"
	"github.com/caprf/cluster-api-provider-redfish/internal/onepatch"
	"github.com/caprf/cluster-api-provider-redfish/internal/shutdown"
)

// Finalizer keeps a deleted maintenance until it withdrew its power hold and its announcement.
const Finalizer = "redfishmaintenance.infrastructure.cluster.x-k8s.io"

// RequestorPrefix starts the requestor of the reboot request a maintenance holds a host's power
// off with: "maintenance/<name>".
const RequestorPrefix = infrav1.MaintenanceRequestorPrefix

// HostIndex indexes RedfishMaintenances by spec.hostName.
const HostIndex = "caprf.spec.hostName"

// HostField is the field selector the API server offers on RedfishMaintenances (a selectable
// field of the CRD): the maintenances of one host are listed without the namespace's others.
const HostField = "spec.hostName"

// Reasons of the Ready condition of a maintenance.
const (
	HostNotFoundReason       = "HostNotFound"
	WaitingForApprovalReason = "WaitingForApproval"
	WaitingForWindowReason   = "WaitingForWindow"
	WaitingForBudgetReason   = "WaitingForBudget"
	// WaitingForMachineDeploymentReason: the Machine's own MachineDeployment (or control plane)
	// has no replica to spare; the maintenance is out of its policies' line meanwhile.
	WaitingForMachineDeploymentReason = "WaitingForMachineDeployment"
	RolloutInProgressReason           = "MachineDeploymentRollingOut"
	InvalidPolicyReason               = "InvalidPolicy"
	DrainingReason                    = "Draining"
	WaitingForCompletionReason        = "WaitingForCompletion"
	CompletedReason                   = "Completed"
	TimedOutReason                    = "TimedOut"
	NotReplaceableReason              = "MachineNotReplaceable"
	WaitingForReleaseReason           = "WaitingForRelease"
	// ReuseNotForControlPlaneReason: mode Reuse is refused for control-plane Machines.
	ReuseNotForControlPlaneReason = "ReuseNotForControlPlane"
)

// replaceable says whether deleting the Machine gets it replaced: a MachineSet's (so a
// MachineDeployment's) or a control plane's.
func replaceable(machine *clusterv1.Machine) bool {
	if _, ok := machine.Labels[clusterv1.MachineControlPlaneLabel]; ok {
		for _, ref := range machine.OwnerReferences {
			if ref.Controller != nil && *ref.Controller {
				return true
			}
		}
		return false
	}
	for _, ref := range machine.OwnerReferences {
		if ref.Kind == "MachineSet" {
			return true
		}
	}
	return false
}

func isControlPlane(machine *clusterv1.Machine) bool {
	_, ok := machine.Labels[clusterv1.MachineControlPlaneLabel]
	return ok
}

// Reconciler reconciles RedfishMaintenances.
type Reconciler struct {
	Client client.Client
	// APIReader reads maintenances and hosts where a stale cache would let two maintenances pass
	// one budget, or leave a request behind.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// ClusterCache reaches the workload clusters, where the Node gets KEP-5683 conditions.
	ClusterCache clustercache.ClusterCache
	PollInterval time.Duration
	// Now is the clock (tests move it); default time.Now.
	Now func() time.Time
	// Connect returns the host's pooled BMC client for the firmware and BIOS-settings tasks (the
	// host controller's Connect); nil: those tasks wait.
	Connect func(ctx context.Context, h *infrav1.RedfishHost) (BMC, error)
	// SetupWait is how long a host whose BMC reports no boot progress is left in POST to write a
	// staged BIOS image or settings (default DefaultSetupWait).
	SetupWait time.Duration
	// VerifyGrace is how long the inventory may report the old firmware or settings after an
	// apply before the attempt fails (default DefaultVerifyGrace).
	VerifyGrace time.Duration
	// GateOff runs the controller with the feature gate off: maintenances stay where they are
	// (their hosts held), and a deleted one still withdraws what it put on its host and goes.
	GateOff bool

	// gate serialises the decision to start a maintenance (leave Approved): two maintenances
	// deciding at once could both see room in one budget.
	gate sync.Mutex
	// messages remembers when each waiting maintenance's message was last rewritten (see waiting).
	messages sync.Map // types.NamespacedName -> time.Time
	// fresh keeps a round from acting on a copy of the maintenance older than the last round's
	// write: a task's attempt counted twice, a flash started again (see internal/fresh).
	fresh *fresh.Reads
	// started holds the versions of maintenances the cache must reach before the gate trusts it:
	// each start this controller wrote, those of every maintenance when it began deciding in a
	// namespace, and starts of unknown outcome (guarded by gate; see cacheHasStarts).
	started map[types.NamespacedName]start
	// baselined names the namespaces whose maintenances' versions were taken from the API server
	// since this controller started (guarded by gate; see cacheHasStarts).
	baselined map[string]bool
}

// SetupWithManager registers the controller and the index it needs.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	if r.PollInterval == 0 {
		r.PollInterval = 2 * time.Second
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	r.fresh = &fresh.Reads{Kind: expv1.GroupVersion.WithKind("RedfishMaintenance")}
	r.Client = r.fresh.Client(r.Client)
	if r.GateOff {
		return ctrl.NewControllerManagedBy(mgr).For(&expv1.RedfishMaintenance{}).Named("redfishmaintenance").WithOptions(opts).Complete(shutdown.Quiet(r))
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &expv1.RedfishMaintenance{}, HostIndex, func(o client.Object) []string {
		return []string{o.(*expv1.RedfishMaintenance).Spec.HostName}
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&expv1.RedfishMaintenance{}).
		Named("redfishmaintenance").
		Watches(&infrav1.RedfishHost{}, handler.EnqueueRequestsFromMapFunc(r.maintenancesOfHost)).
		Watches(&infrav1.RedfishMachine{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			rm := o.(*infrav1.RedfishMachine)
			if rm.Status.HostRef == "" {
				return nil
			}
			return r.maintenancesOfHost(ctx, &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: rm.Namespace, Name: rm.Status.HostRef}})
		})).
		Watches(&expv1.RedfishMaintenancePolicy{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.all(ctx, o.GetNamespace())
		})).
		Owns(&infrav1.RedfishJob{}).
		// The budget moved: the maintenance that goes next is woken (wake.go).
		Watches(&expv1.RedfishMaintenance{}, r.wakeNextInLine(), builder.WithPredicates(stageChanged)).
		Watches(&infrav1.RedfishHost{}, r.wakeNextInLine(), builder.WithPredicates(downChanged)).
		Watches(&clusterv1.Machine{}, r.wakeNextInLine(), builder.WithPredicates(runningChanged)).
		Watches(&clusterv1.MachineDeployment{}, r.wakeNextInLine(), builder.WithPredicates(shareChanged)).
		WithOptions(opts).
		Complete(shutdown.Quiet(r))
}

func (r *Reconciler) maintenancesOfHost(ctx context.Context, o client.Object) []reconcile.Request {
	list := &expv1.RedfishMaintenanceList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{HostIndex: o.GetName()}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, m := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: m.Namespace, Name: m.Name}})
	}
	return out
}

func (r *Reconciler) all(ctx context.Context, namespace string) []reconcile.Request {
	list := &expv1.RedfishMaintenanceList{}
	if err := r.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, m := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: m.Namespace, Name: m.Name}})
	}
	return out
}

func requestor(m *expv1.RedfishMaintenance) string { return RequestorPrefix + m.Name }

// Reconcile advances one maintenance.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	m := &expv1.RedfishMaintenance{}
	if err := r.read(ctx, req.NamespacedName, m); err != nil {
		if errors.Is(err, fresh.ErrStale) {
			// The cache catching up with the last write wakes the maintenance; the requeue is for
			// a watch that is down.
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		if apierrors.IsNotFound(err) {
			r.messages.Delete(req.NamespacedName)
			r.forgetStart(req.NamespacedName)
			if r.fresh != nil {
				r.fresh.Forget(req.NamespacedName)
			}
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// This controller alone sets the maintenance's conditions: a round's status, conditions
	// included, is one write (internal/onepatch; a condition of another type found on it sends
	// the write through CAPI's patch helper, which keeps that condition).
	helper := onepatch.New(m, r.Client).Owning(r.APIReader, ownedConditions...)
	defer func() {
		if err := helper.Patch(ctx, m); err != nil {
			retErr = errors.Join(retErr, err)
		}
	}()
	if !m.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, m)
	}
	if r.GateOff {
		if m.Status.Stage == expv1.StageFailed {
			// Its lease goes once what it started ended, gate or no gate: a held lease stops
			// every claim, job and BMC action of the host.
			if host, err := r.hostOf(ctx, m); err != nil || host == nil {
				return ctrl.Result{}, err
			} else if what, err := r.releaseWhenQuiet(ctx, m, host); err != nil || what != "" {
				res, err := retryOnConflict(err)
				return ctrl.Result{RequeueAfter: max(res.RequeueAfter, r.PollInterval)}, err
			}
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(m, Finalizer) {
		return ctrl.Result{}, nil
	}
	if m.Status.Stage != "" {
		metrics.SetMaintenanceStage(m.Namespace, m.Name, string(m.Status.Stage)) // again after a restart
	}
	host := &infrav1.RedfishHost{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.HostName}, host); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		if m.Status.Stage == "" || m.Status.Stage == expv1.StagePending {
			r.enter(m, expv1.StagePending)
			r.waiting(m, HostNotFoundReason, "RedfishHost %s does not exist in namespace %s", m.Spec.HostName, m.Namespace)
			return ctrl.Result{RequeueAfter: 10 * r.PollInterval}, nil
		}
		host = nil // gone mid-way: nothing left to hold
	}
	switch m.Status.Stage {
	case expv1.StageFailed:
		// The host stays held (power included) until the maintenance is deleted; its lease goes
		// once nothing it started on the BMC runs (a flash that outlived the timeout ends first).
		// A hold under its name from before a move (which gives it a new UID) is its own again,
		// before the host drops it as an orphan.
		if err := r.adoptHold(ctx, host, m); err != nil {
			return retryOnConflict(err)
		}
		if what, err := r.releaseWhenQuiet(ctx, m, host); err != nil || what != "" {
			res, err := retryOnConflict(err)
			return ctrl.Result{RequeueAfter: max(res.RequeueAfter, r.PollInterval)}, err
		}
		return ctrl.Result{}, nil
	case expv1.StageCompleted, expv1.StageCancelled:
		if err := r.withdraw(ctx, m, host); err != nil {
			return ctrl.Result{}, err
		}
		return r.collect(ctx, m)
	}
	if r.timedOut(m) {
		return ctrl.Result{}, nil
	}
	// A round that stores the maintenance itself (start: the gate's write, which must land under
	// the gate's lock) patches, at its end, only what changed after: patching from the copy read
	// before wrote the same status again (and, through CAPI's patch helper, whose conditions
	// patch re-read the cache still without that write, conflicted and slept 100-200 ms before
	// each retry while the next round, the Machine's deletion, waited for this one).
	stored := func() { helper = onepatch.New(m, r.Client).Owning(r.APIReader, ownedConditions...) }
	return r.advance(ctx, m, host, stored)
}

// ownedConditions are the condition types this controller sets on a maintenance: the only ones
// a maintenance holds (onepatch.Helper.Owning).
var ownedConditions = []string{infrav1.ReadyCondition, clusterv1.PausedCondition}

// read returns the maintenance as this controller last left it, or newer (fresh.ErrStale while
// the cache is behind); without the recording client SetupWithManager installs (unit tests), from
// the cache.
func (r *Reconciler) read(ctx context.Context, key types.NamespacedName, m *expv1.RedfishMaintenance) error {
	if r.fresh == nil {
		return r.Client.Get(ctx, key, m)
	}
	return r.fresh.Get(ctx, r.Client, r.APIReader, key, m)
}

// advance moves the maintenance as far forward as it can go now.
// stored is called once the round has written m itself.
func (r *Reconciler) advance(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost, stored func()) (ctrl.Result, error) {
	if host == nil {
		r.enter(m, expv1.StageCancelled)
		r.event(m, "Cancelled", "the host %s was deleted", m.Spec.HostName)
		return ctrl.Result{}, nil
	}
	rm, machine, err := r.consumer(ctx, host)
	if err != nil {
		return ctrl.Result{}, err
	}
	if paused, err := r.paused(ctx, m, host, machine); err != nil || paused {
		return ctrl.Result{RequeueAfter: 10 * r.PollInterval}, err
	}
	if m.Spec.Abort && (m.Status.Stage == "" || m.Status.Stage == expv1.StagePending || m.Status.Stage == expv1.StageAnnounced || m.Status.Stage == expv1.StageApproved) {
		// Nothing was done yet: the maintenance ends without holding its host.
		r.enter(m, expv1.StageCancelled)
		conditions.Set(m, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: AbortedReason,
			Message: "Aborted (spec.abort) before it started; host " + host.Name + " was not touched"})
		r.event(m, "Aborted", "aborted before it started")
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}
	switch m.Status.Stage {
	case "", expv1.StagePending:
		r.enter(m, expv1.StagePending)
		if ok, res := r.checkTasks(ctx, m, host); !ok {
			return res, nil
		}
		if rm == nil {
			return r.approve(m, "Unclaimed", "nothing runs on host %s", host.Name), nil
		}
		if machine == nil {
			r.waiting(m, WaitingForApprovalReason, "RedfishMachine %s claims host %s but its Machine is not there (yet): waiting for it", rm.Name, host.Name)
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		m.Status.Machine, m.Status.MachineUID, m.Status.MachineDeployment = machine.Name, string(machine.UID), machine.Labels[clusterv1.MachineDeploymentNameLabel]
		m.Status.Cluster = machine.Spec.ClusterName
		if err := r.announce(ctx, m, rm, true); err != nil {
			return ctrl.Result{}, err
		}
		r.enter(m, expv1.StageAnnounced)
		r.event(m, "Announced", "announced on RedfishMachine %s (Machine %s)", rm.Name, m.Status.Machine)
		fallthrough
	case expv1.StageAnnounced:
		switch {
		case rm == nil:
			return r.approve(m, "Unclaimed", "host %s was released", host.Name), nil
		case m.Spec.Policy == expv1.Enforced:
			return r.approve(m, "Policy", "policy Enforced"), nil
		case approved(rm, m):
			return r.approve(m, "Owner", "approved on RedfishMachine %s", rm.Name), nil
		case machine != nil && string(machine.UID) == m.Status.MachineUID && !machine.DeletionTimestamp.IsZero(),
			!rm.DeletionTimestamp.IsZero():
			return r.approve(m, "MachineDeleted", "CAPI is deleting Machine %s anyway", m.Status.Machine), nil
		}
		if err := r.announce(ctx, m, rm, true); err != nil {
			return ctrl.Result{}, err
		}
		r.announceOnNode(ctx, m, machine, true, false)
		r.waiting(m, WaitingForApprovalReason, "Waiting for the owner of Machine %s to approve on RedfishMachine %s (spec.maintenanceApprovals: name %s, uid %s)", m.Status.Machine, rm.Name, m.Name, m.UID)
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	case expv1.StageApproved:
		return r.start(ctx, m, host, machine, stored)
	case expv1.StageDraining:
		return r.drain(ctx, m, host, rm, machine)
	case expv1.StageInMaintenance:
		return r.work(ctx, m, host)
	}
	return ctrl.Result{}, nil
}

// paused holds a maintenance while it carries the cluster.x-k8s.io/paused annotation or the
// Cluster of the Machine on its host is paused (clusterctl move pauses it: nothing may be deleted
// then). The Paused condition says so; nothing moves until it is lifted.
func (r *Reconciler) paused(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost, machine *clusterv1.Machine) (bool, error) {
	cluster := &clusterv1.Cluster{}
	if machine != nil {
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: machine.Namespace, Name: machine.Spec.ClusterName}, cluster); client.IgnoreNotFound(err) != nil {
			return false, err
		}
	}
	msg := "The maintenance or the Cluster of the Machine on its host is paused"
	switch {
	case annotations.HasPaused(host):
		// Nothing reaches a paused host's BMC: no flash, no staging, no job, no check.
		msg = "Host " + host.Name + " is paused (" + clusterv1.PausedAnnotation + "): nothing is done on its BMC until the annotation goes"
	case !annotations.IsPaused(cluster, m):
		conditions.Set(m, metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionFalse, Reason: clusterv1.NotPausedReason})
		return false, nil
	}
	conditions.Set(m, metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionTrue, Reason: clusterv1.PausedReason, Message: msg})
	return true, nil
}

// approve records how the maintenance was approved; it starts at the next reconcile.
func (r *Reconciler) approve(m *expv1.RedfishMaintenance, by, format string, args ...any) ctrl.Result {
	m.Status.ApprovedBy = by
	r.enter(m, expv1.StageApproved)
	r.event(m, "Approved", format, args...)
	return ctrl.Result{RequeueAfter: time.Millisecond}
}

// start passes the gate (windows, budget, rollouts) and has CAPI drain the Machine.
func (r *Reconciler) start(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost, machine *clusterv1.Machine, stored func()) (ctrl.Result, error) {
	// Each check below reads the cache; a rollout's pass is confirmed from the API server, and
	// the gate's under its lock (see cacheHasStarts): a maintenance waiting for a rollout or the
	// budget costs the API server nothing, and one that passes cannot have missed a rollout or a
	// maintenance started a moment before.
	if machine != nil && machine.DeletionTimestamp.IsZero() && m.Spec.Policy != expv1.Enforced {
		for _, reader := range []client.Reader{r.Client, r.APIReader} {
			if md, rolling, err := r.rollingOut(ctx, reader, machine); err != nil {
				return ctrl.Result{}, err
			} else if rolling {
				r.waiting(m, RolloutInProgressReason, "MachineDeployment %s is rolling out; an OwnerApproval maintenance waits until it is done", md)
				return ctrl.Result{RequeueAfter: r.PollInterval}, nil
			}
		}
	}
	keep := keepsMachine(m)
	if machine != nil && m.Spec.Mode == expv1.Reuse && isControlPlane(machine) && !keep {
		// The control plane's own pre-terminate hook runs last: the etcd member of a host held
		// for the work would stay a member, powered off, for as long as the work takes.
		r.waiting(m, ReuseNotForControlPlaneReason, "Machine %s is a control-plane Machine: mode Reuse would keep its etcd member in the cluster while the host is worked on. Use mode Replace", machine.Name)
		return ctrl.Result{RequeueAfter: 10 * r.PollInterval}, nil
	}
	if machine != nil && machine.DeletionTimestamp.IsZero() && string(machine.UID) == m.Status.MachineUID && !replaceable(machine) && !keep {
		r.waiting(m, NotReplaceableReason, "Machine %s belongs to no MachineSet or control plane: deleting it would not replace it. Move its workload and delete it yourself; the maintenance then proceeds", machine.Name)
		return ctrl.Result{RequeueAfter: 10 * r.PollInterval}, nil
	}
	// The cache's answer needs no lock (a "no" from it only waits); the decision is taken again
	// under the lock, from the cache when it holds every start this controller wrote, else from
	// the API server.
	for i, reader := range []client.Reader{r.Client, r.APIReader} {
		if i == 1 {
			r.gate.Lock()
			defer r.gate.Unlock()
			if r.cacheHasStarts(ctx, m.Namespace) {
				reader = r.Client
			}
		}
		ok, reason, msg, after, err := r.gateOpen(ctx, reader, m, host, machine)
		if err != nil {
			return ctrl.Result{}, err
		}
		if !ok {
			r.waiting(m, reason, "%s", msg)
			return ctrl.Result{RequeueAfter: after}, nil
		}
	}
	// Past the gate: recorded before anything is deleted, and written now (not at the end of the
	// reconcile) so the next gate decision counts this host.
	saved := m.Status.DeepCopy()
	if keep {
		// BMC firmware only: the host and its Machine keep running; nothing is drained.
		r.enter(m, expv1.StageInMaintenance)
		r.waiting(m, TaskRunningReason, "Starting the BMC firmware update of host %s (its Machine keeps running)", host.Name)
	} else {
		r.enter(m, expv1.StageDraining)
		r.waiting(m, DrainingReason, "Waiting for CAPI to drain and delete Machine %s", m.Status.Machine)
	}
	from := m.ResourceVersion
	err := r.Client.Status().Update(ctx, m)
	switch {
	case err == nil:
		r.started[client.ObjectKeyFromObject(m)] = start{rv: m.ResourceVersion}
	case unknownOutcome(err):
		// Perhaps written all the same (a timeout): the gate reads the API server until settled.
		r.started[client.ObjectKeyFromObject(m)] = start{at: r.Now(), from: from}
	}
	if err != nil {
		// Not recorded: the deferred patch must not write Draining past the gate either.
		m.Status = *saved
		if unknownOutcome(err) {
			// Perhaps written: the round's patch, whose status carries the conditions whole,
			// would put the ones from before the gate back beside the Draining stage; the next
			// round reads the API server.
			stored()
		}
		return retryOnConflict(err)
	}
	stored()
	if keep {
		r.event(m, "InMaintenance", "started within the budget; host %s keeps serving Machine %s (BMC update only)", host.Name, m.Status.Machine)
	} else {
		r.event(m, "Draining", "started within the budget; CAPI drains Machine %s", m.Status.Machine)
	}
	// The next round drains, from the status just written (the end of this one writes only what
	// changes after it: see Reconcile). That write wakes the next round once the cache has it;
	// the timer is only a safety net.
	return ctrl.Result{RequeueAfter: r.PollInterval}, nil
}

// cacheHasStarts says whether the cache's maintenances of namespace include every start this
// controller wrote (the writes that spend a place in a budget), and forgets those it has. With
// none missing, the cache answers the gate as the API server would: only this controller starts
// maintenances, and a stage the cache is behind on otherwise (a maintenance that completed) only
// keeps a place taken a moment longer. A start of a maintenance the cache does not list, or
// whose versions do not compare, counts as missing; so does a start whose write failed other than
// by a conflict (it may have been applied), for fresh.Patience, after which it is settled from
// the API server. A controller that has not yet decided in namespace (after a restart, or taking
// over from another leader, whose last starts its cache may miss) first takes every
// maintenance's version from the API server as one its cache must reach. Caller holds gate.
func (r *Reconciler) cacheHasStarts(ctx context.Context, namespace string) bool {
	if r.started == nil {
		r.started, r.baselined = map[types.NamespacedName]start{}, map[string]bool{}
	}
	if !r.baselined[namespace] {
		ms := &expv1.RedfishMaintenanceList{}
		if err := r.APIReader.List(ctx, ms, client.InNamespace(namespace)); err != nil {
			return false
		}
		for i := range ms.Items {
			if key := client.ObjectKeyFromObject(&ms.Items[i]); r.started[key] == (start{}) {
				r.started[key] = start{rv: ms.Items[i].ResourceVersion}
			}
		}
		r.baselined[namespace] = true
	}
	pending := false
	for key := range r.started {
		pending = pending || key.Namespace == namespace
	}
	if !pending {
		return true
	}
	ms := &expv1.RedfishMaintenanceList{}
	if err := r.Client.List(ctx, ms, client.InNamespace(namespace), readOnly); err != nil {
		return false
	}
	cached := make(map[string]string, len(ms.Items))
	for i := range ms.Items {
		cached[ms.Items[i].Name] = ms.Items[i].ResourceVersion
	}
	all := true
	for key, s := range r.started {
		if key.Namespace != namespace {
			continue
		}
		if s.rv == "" {
			if r.Now().Sub(s.at) < fresh.Patience || !r.settle(ctx, key) {
				all = false
				continue
			}
			if s = r.started[key]; s.rv == "" {
				continue // gone
			}
		}
		if c, err := resourceversion.CompareResourceVersion(cached[key.Name], s.rv); err != nil || c < 0 {
			all = false
			continue
		}
		delete(r.started, key)
	}
	return all
}

// settle reads a maintenance whose start was of unknown outcome from the API server. Applied (past
// Approved), its version is one the cache must reach. Still at the version the start was written
// against, the start may yet land (an API server finishes a request up to its own timeout): it
// stays unsettled until requestTimeout has passed, then is dropped; at any other version it can
// no longer land (it was written with that version as a precondition) and is dropped. It says
// whether it settled the start; a maintenance that is gone is forgotten.
func (r *Reconciler) settle(ctx context.Context, key types.NamespacedName) bool {
	s, m := r.started[key], &expv1.RedfishMaintenance{}
	switch err := r.APIReader.Get(ctx, key, m); {
	case apierrors.IsNotFound(err):
		delete(r.started, key)
		return true
	case err != nil:
		return false
	}
	switch st := m.Status.Stage; {
	case st != "" && st != expv1.StagePending && st != expv1.StageAnnounced && st != expv1.StageApproved:
		r.started[key] = start{rv: m.ResourceVersion}
	case m.ResourceVersion == s.from && r.Now().Sub(s.at) < requestTimeout:
		return false
	default:
		delete(r.started, key)
	}
	return true
}

// requestTimeout is how long an API server may take to finish a write (its --request-timeout,
// 60 s by default): a start of unknown outcome may land until then.
const requestTimeout = time.Minute

// unknownOutcome says whether a failed write may have been applied all the same: a timeout, a
// server error or a failed connection; not an answer that refused it.
func unknownOutcome(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Code >= http.StatusInternalServerError
	}
	return true
}

// start is a version the cache must reach: that of a write that took a maintenance past the gate,
// or of the maintenance as the API server had it; or, for a start whose outcome is unknown, when
// it was tried and the version it was written against.
type start struct {
	rv, from string
	at       time.Time
}

// forgetStart drops the start of a maintenance that is gone.
func (r *Reconciler) forgetStart(key types.NamespacedName) {
	r.gate.Lock()
	defer r.gate.Unlock()
	delete(r.started, key)
}

// drain deletes the Machine on the host (CAPI cordons and drains the Node, honouring
// PodDisruptionBudgets and MachineDrainRules, and its MachineSet creates a replacement) and waits
// until the host is released and cleaned.
func (r *Reconciler) drain(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost, rm *infrav1.RedfishMachine, machine *clusterv1.Machine) (ctrl.Result, error) {
	if rm != nil {
		if err := r.announce(ctx, m, rm, true); err != nil {
			return ctrl.Result{}, err
		}
	}
	reuse := m.Spec.Mode == expv1.Reuse
	if reuse && machine != nil && string(machine.UID) == m.Status.MachineUID {
		// Before the deletion: the hook keeps the host claimed after the drain, and the claim
		// releases it uncleaned to its owner.
		if err := r.holdForReuse(ctx, m, host, machine); err != nil {
			return retryOnConflict(err)
		}
	}
	switch {
	case machine == nil:
	case !machine.DeletionTimestamp.IsZero():
		if string(machine.UID) == m.Status.MachineUID {
			// Told again while CAPI drains (a write only when the Node lacks it): the round
			// that deleted the Machine tells it best effort, and may not have reached the cluster.
			r.announceOnNode(ctx, m, machine, false, true)
		}
	case string(machine.UID) != m.Status.MachineUID:
		// Another Machine claimed the host after the approval (a race with the claim, or the host
		// changed hands): its owner approved nothing, so it is never deleted here.
		r.waiting(m, DrainingReason, "Host %s is claimed by Machine %s, which did not approve this maintenance: waiting for it to be released (delete it to proceed)", host.Name, machine.Name)
		return ctrl.Result{RequeueAfter: 10 * r.PollInterval}, nil
	default:
		// Only the Machine this maintenance recorded: one re-created under its name since the
		// cache was read is refused by the API server (409) and waited for above.
		uid := types.UID(m.Status.MachineUID)
		if err := r.Client.Delete(ctx, machine, client.Preconditions{UID: &uid}); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: r.PollInterval}, nil
			}
			if !apierrors.IsNotFound(err) {
				return ctrl.Result{}, err
			}
		}
		r.event(m, "MachineDeleted", "deleted Machine %s so CAPI drains it and its MachineSet replaces it", machine.Name)
		// Told on the Node once CAPI has started (its drain's cordon comes a moment later): the
		// Node's write no longer delays the drain of every wave.
		r.announceOnNode(ctx, m, machine, false, true)
	}
	switch released := host.Status.Claim == nil && host.Status.State == infrav1.HostStateAvailable; {
	case reuse && !released && waitingForHook(machine, m) && host.Status.State != infrav1.HostStateProvisioned:
		// CAPI skips the drain of a Machine whose Node never joined: its host (still booting, or
		// in error) has no OS to keep. The hook goes, and the host is worked on once released.
		if err := r.liftReuseHook(ctx, m); err != nil {
			return retryOnConflict(err)
		}
		r.waiting(m, DrainingReason, "Machine %s never ran on host %s (%s): nothing to reuse, waiting for the host to be released", m.Status.Machine, host.Name, host.Status.State)
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	case reuse && !released && !waitingForHook(machine, m):
		r.waiting(m, DrainingReason, "Waiting for CAPI to drain Machine %s; host %s stays claimed by its pre-terminate hook (mode Reuse)", m.Status.Machine, host.Name)
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	case !reuse && !released:
		r.waiting(m, DrainingReason, "Waiting for Machine %s to be drained and host %s released (host %s)", m.Status.Machine, host.Name, host.Status.State)
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	r.enter(m, expv1.StageInMaintenance)
	r.event(m, "InMaintenance", "host %s is out of service", host.Name)
	return r.work(ctx, m, host)
}

// work runs the tasks: powerOffAndHold holds the host off, bootImage runs an image on it, until a
// person sets spec.complete.
func (r *Reconciler) work(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost) (ctrl.Result, error) {
	if done, res, err := r.runTasks(ctx, m, host); !done || err != nil {
		return res, err
	}
	hold := slices.ContainsFunc(m.Spec.Tasks, func(t expv1.MaintenanceTask) bool { return t.PowerOffAndHold != nil })
	image := bootImage(m)
	switch {
	case hold && !m.Spec.Complete:
		if err := r.setHold(ctx, host, m, true); err != nil {
			return retryOnConflict(err)
		}
		power := host.Status.PowerState
		r.waiting(m, WaitingForCompletionReason, "Host %s is held powered off (now %s) until spec.complete is set", host.Name, power)
		return ctrl.Result{RequeueAfter: 10 * r.PollInterval}, nil
	case image != "" && !m.Spec.Complete:
		if l := host.Status.Lease; l != nil && l.HolderUID != string(m.UID) {
			r.waiting(m, WaitingForLeaseReason, "Host %s's lease is %s: this maintenance's image waits for it", host.Name, describeLease(l))
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		// Its firmware and BIOS tasks done: their power hold goes, or the image would never boot.
		if err := r.setHold(ctx, host, m, false); err != nil {
			return retryOnConflict(err)
		}
		if sb := host.Spec.ServiceBoot; sb != nil && sb.Requestor != requestor(m) {
			r.waiting(m, WaitingForCompletionReason, "Host %s runs the image of %s; this maintenance's image waits for it to end", host.Name, sb.Requestor)
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		if err := r.setServiceBoot(ctx, host, m, image); err != nil {
			return retryOnConflict(err)
		}
		if sb := host.Status.ServiceBoot; sb == nil || sb.Requestor != requestor(m) || sb.Image != hostctrl.ImageKey(image) {
			r.waiting(m, WaitingForCompletionReason, "Host %s is being booted into %s (see the host's events if this lasts)", host.Name, bmc.Redact(image))
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		r.waiting(m, WaitingForCompletionReason, "Host %s runs %s (power %s) until spec.complete is set", host.Name, bmc.Redact(image), host.Status.PowerState)
		return ctrl.Result{RequeueAfter: 10 * r.PollInterval}, nil
	case image != "":
		// Wound down with the power held, so the host's own OS does not start in between: the
		// image ejected and the host off before it is handed back. Only this maintenance's image:
		// another's (queued behind it) is never cut off.
		ours := host.Spec.ServiceBoot != nil && host.Spec.ServiceBoot.Requestor == requestor(m)
		if ours {
			if err := r.setHold(ctx, host, m, true); err != nil {
				return retryOnConflict(err)
			}
			if err := r.setServiceBoot(ctx, host, m, ""); err != nil {
				return retryOnConflict(err)
			}
		}
		held := slices.ContainsFunc(host.Spec.RebootRequests, func(q infrav1.RebootRequest) bool { return ownHold(q, m) })
		switch sb := host.Status.ServiceBoot; {
		case held && sb != nil && sb.Requestor == requestor(m):
			r.waiting(m, WaitingForCompletionReason, "Waiting for host %s to eject %s", host.Name, sb.Image)
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		case held && host.Status.PowerState != string(bmc.PowerOff):
			r.waiting(m, WaitingForCompletionReason, "Waiting for host %s to power off after the image (now %s)", host.Name, host.Status.PowerState)
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
	}
	if m.Spec.Mode == expv1.Reuse && !keepsMachine(m) {
		// The work is done: the hook goes, CAPI deletes the RedfishMachine and the host is released
		// (uncleaned, reserved for the owner) with its power still held; then the replacement,
		// which waits for it, boots on it.
		if err := r.liftReuseHook(ctx, m); err != nil {
			return retryOnConflict(err)
		}
		if host.Status.Claim != nil || host.Status.State != infrav1.HostStateAvailable {
			r.waiting(m, WaitingForReleaseReason, "Waiting for host %s to be released to the replacement of Machine %s (host %s)", host.Name, m.Status.Machine, host.Status.State)
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
	}
	if err := r.setHold(ctx, host, m, false); err != nil {
		return retryOnConflict(err)
	}
	r.enter(m, expv1.StageCompleted)
	conditions.Set(m, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: CompletedReason, Message: "Host " + host.Name + " is back in service"})
	r.event(m, "Completed", "host %s is back in service", host.Name)
	return ctrl.Result{}, nil
}

// collect deletes a completed maintenance once spec.ttlAfterCompleted has passed.
func (r *Reconciler) collect(ctx context.Context, m *expv1.RedfishMaintenance) (ctrl.Result, error) {
	done := stageTime(m, expv1.StageCompleted)
	if m.Spec.TTLAfterCompleted == nil || done == nil {
		return ctrl.Result{}, nil
	}
	if left := done.Add(m.Spec.TTLAfterCompleted.Duration).Sub(r.Now()); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	r.event(m, "Collected", "deleted %s after it completed (ttlAfterCompleted)", m.Spec.TTLAfterCompleted.Duration)
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Delete(ctx, m))
}

// timedOut fails a maintenance that outlived spec.timeout after approval; its host stays held.
func (r *Reconciler) timedOut(m *expv1.RedfishMaintenance) bool {
	if m.Spec.Timeout == nil || !m.Status.Stage.Holds() {
		return false
	}
	since := stageTime(m, expv1.StageApproved)
	if since == nil || r.Now().Before(since.Add(m.Spec.Timeout.Duration)) {
		return false
	}
	stage := m.Status.Stage
	r.enter(m, expv1.StageFailed)
	conditions.Set(m, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: TimedOutReason,
		Message: fmt.Sprintf("Not completed within %s of approval (was %s); host %s stays out of service until this maintenance is deleted", m.Spec.Timeout.Duration, stage, m.Spec.HostName)})
	r.event(m, "Failed", "timed out in stage %s", stage)
	return true
}

// reconcileDelete withdraws the power hold and the announcement, then lets the object go.
func (r *Reconciler) reconcileDelete(ctx context.Context, m *expv1.RedfishMaintenance) (ctrl.Result, error) {
	host := &infrav1.RedfishHost{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.HostName}, host); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		host = nil
	}
	if host != nil {
		if annotations.HasPaused(host) && (host.Status.Lease != nil && holds(host, m) || slices.ContainsFunc(m.Status.Tasks, func(st expv1.MaintenanceTaskStatus) bool { return st.State == expv1.TaskRunning })) {
			// What runs on the BMC cannot be asked about while the host is paused.
			r.waiting(m, AbortedReason, "Deleted: host %s is paused (%s); its BMC is asked whether this maintenance's work ended once the annotation goes", host.Name, clusterv1.PausedAnnotation)
			return ctrl.Result{RequeueAfter: 10 * r.PollInterval}, nil
		}
		// A flash under way, or a job booting the host, is waited out: the host is never handed
		// back with its firmware being written.
		for i := range m.Status.Tasks {
			if m.Status.Tasks[i].State == expv1.TaskRunning {
				if busy, what := r.busy(ctx, m, host, i); busy {
					r.waiting(m, AbortedReason, "Deleted: waiting for %s to end before the host is handed back", what)
					return ctrl.Result{RequeueAfter: r.PollInterval}, nil
				}
			}
		}
		what, err := r.releaseWhenQuiet(ctx, m, host)
		if what != "" && err == nil && !r.Now().Before(m.DeletionTimestamp.Add(leaseGiveUp(m))) {
			// Its BMC never said (unreachable, a task that never ends): a deleted maintenance does
			// not keep the host from everyone for ever. Said on the maintenance's events.
			r.warn(m, "LeaseReleasedUnconfirmed", "released the lease of host %s %s after its deletion without the BMC confirming that %s ended", host.Name, leaseGiveUp(m), what)
			what, err = "", r.release(ctx, m, host)
		}
		if err != nil || what != "" {
			if what != "" {
				r.waiting(m, AbortedReason, "Deleted: waiting for %s to end before the host's lease is released (at most %s after the deletion)", what, leaseGiveUp(m))
			}
			res, err := retryOnConflict(err)
			return ctrl.Result{RequeueAfter: max(res.RequeueAfter, r.PollInterval)}, err
		}
	}
	if what, err := r.windDown(ctx, m, host); err != nil || what != "" {
		if what != "" {
			r.waiting(m, AbortedReason, "Deleted: host %s is held powered off until %s, as a completion would", m.Spec.HostName, what)
		}
		res, err := retryOnConflict(err)
		return ctrl.Result{RequeueAfter: max(res.RequeueAfter, r.PollInterval)}, err
	}
	if m.Status.Stage.Active() && m.Status.Stage != "" {
		r.event(m, "Cancelled", "deleted in stage %s", m.Status.Stage)
	}
	if err := r.withdraw(ctx, m, host); err != nil {
		return retryOnConflict(err)
	}
	controllerutil.RemoveFinalizer(m, Finalizer)
	metrics.SetMaintenanceStage(m.Namespace, m.Name, "")
	return ctrl.Result{}, nil
}

// windDown brings a deleted maintenance's host to where a completion leaves it before its hold
// goes, in the same order, with the power held meanwhile (so neither the image nor the old OS runs
// on a host handed back): the maintenance's image ejected and the host off; in mode Reuse, the
// Machine it took (held by its hook) deleted and the host released. It says what it waits for
// ("" once done).
func (r *Reconciler) windDown(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost) (string, error) {
	if host == nil {
		return "", nil
	}
	image := (host.Spec.ServiceBoot != nil && host.Spec.ServiceBoot.Requestor == requestor(m)) ||
		(host.Status.ServiceBoot != nil && host.Status.ServiceBoot.Requestor == requestor(m))
	reuse, err := r.reuseHeld(ctx, m, host)
	if err != nil || (!image && !reuse) {
		return "", err
	}
	if err := r.setHold(ctx, host, m, true); err != nil {
		return "", err
	}
	if image {
		if err := r.setServiceBoot(ctx, host, m, ""); err != nil {
			return "", err
		}
		if sb := host.Status.ServiceBoot; sb != nil && sb.Requestor == requestor(m) {
			return "it ejects " + sb.Image, nil
		}
		if host.Status.PowerState != string(bmc.PowerOff) {
			return "it is off after the image (now " + host.Status.PowerState + ")", nil
		}
	}
	if reuse {
		if err := r.liftReuseHook(ctx, m); err != nil {
			return "", err
		}
		return "CAPI deletes Machine " + m.Status.Machine + " and the host is released", nil
	}
	return "", nil
}

// reuseHeld says whether a Reuse maintenance's host is still claimed for the Machine it took and
// CAPI deletes (held by its hook, or its hook just lifted): the host is released next.
func (r *Reconciler) reuseHeld(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost) (bool, error) {
	if m.Spec.Mode != expv1.Reuse || m.Status.MachineUID == "" || keepsMachine(m) || host.Status.Claim == nil {
		return false, nil
	}
	_, machine, err := r.consumer(ctx, host)
	if err != nil || machine == nil {
		return false, err
	}
	return string(machine.UID) == m.Status.MachineUID && !machine.DeletionTimestamp.IsZero(), nil
}

// hostOf reads the maintenance's host (nil when it is gone).
func (r *Reconciler) hostOf(ctx context.Context, m *expv1.RedfishMaintenance) (*infrav1.RedfishHost, error) {
	h := &infrav1.RedfishHost{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.HostName}, h); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return h, nil
}

// withdraw removes what an ended maintenance put elsewhere: its lease, power hold and announcement.
func (r *Reconciler) withdraw(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost) error {
	if err := r.liftReuseHook(ctx, m); err != nil {
		return err
	}
	if host == nil {
		return nil
	}
	if err := r.release(ctx, m, host); err != nil {
		return err
	}
	if err := r.setServiceBoot(ctx, host, m, ""); err != nil {
		return err
	}
	if err := r.setHold(ctx, host, m, false); err != nil {
		return err
	}
	rm, machine, err := r.consumer(ctx, host)
	if err != nil || rm == nil {
		return err
	}
	if machine != nil && string(machine.UID) == m.Status.MachineUID {
		r.announceOnNode(ctx, m, machine, false, false) // only the Node this maintenance announced on
	}
	return r.announce(ctx, m, rm, false)
}

// consumer returns the RedfishMachine that claims the host and its CAPI Machine (nil when none).
func (r *Reconciler) consumer(ctx context.Context, host *infrav1.RedfishHost) (*infrav1.RedfishMachine, *clusterv1.Machine, error) {
	c := host.Status.Claim
	if c == nil {
		return nil, nil, nil
	}
	rm := &infrav1.RedfishMachine{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: host.Namespace, Name: c.Consumer.Name}, rm); err != nil {
		return nil, nil, client.IgnoreNotFound(err)
	}
	for _, ref := range rm.OwnerReferences {
		if ref.Kind != "Machine" {
			continue
		}
		machine := &clusterv1.Machine{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rm.Namespace, Name: ref.Name}, machine); err != nil {
			return rm, nil, client.IgnoreNotFound(err)
		}
		return rm, machine, nil
	}
	return rm, nil, nil
}

// approved says whether the RedfishMachine approves exactly this maintenance (name and UID).
func approved(rm *infrav1.RedfishMachine, m *expv1.RedfishMaintenance) bool {
	return slices.ContainsFunc(rm.Spec.MaintenanceApprovals, func(a infrav1.MaintenanceApproval) bool {
		return a.Name == m.Name && a.UID == string(m.UID)
	})
}

// announce adds (or removes) the maintenance in the RedfishMachine's status.maintenances, and
// keeps its MaintenancePlanned condition in line.
func (r *Reconciler) announce(ctx context.Context, m *expv1.RedfishMaintenance, rm *infrav1.RedfishMachine, want bool) error {
	idx := slices.IndexFunc(rm.Status.Maintenances, func(a infrav1.MaintenanceAnnouncement) bool { return a.Name == m.Name })
	if (idx >= 0) == want && (idx < 0 || rm.Status.Maintenances[idx].UID == string(m.UID)) {
		return nil
	}
	before := rm.DeepCopy()
	if idx >= 0 {
		rm.Status.Maintenances = slices.Delete(rm.Status.Maintenances, idx, idx+1)
	}
	if want {
		since := metav1.NewTime(r.Now())
		if t := stageTime(m, expv1.StageAnnounced); t != nil {
			since = *t
		}
		rm.Status.Maintenances = append(rm.Status.Maintenances, infrav1.MaintenanceAnnouncement{
			Name: m.Name, UID: string(m.UID), Reason: m.Spec.Reason, Requestor: m.Spec.Requestor, Policy: string(m.Spec.Policy), Since: since,
		})
	}
	c := metav1.Condition{Type: infrav1.MaintenancePlannedCondition, Status: metav1.ConditionFalse, Reason: infrav1.NoMaintenanceReason}
	if n := len(rm.Status.Maintenances); n > 0 {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, infrav1.MaintenanceAnnouncedReason, fmt.Sprintf("%d maintenance(s) of the host announced: see status.maintenances", n)
	}
	conditions.Set(rm, c)
	return r.Client.Status().Patch(ctx, rm, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}

// bootImage is the image of the maintenance's bootImage task ("" without one).
func bootImage(m *expv1.RedfishMaintenance) string {
	for _, t := range m.Spec.Tasks {
		if t.BootImage != nil {
			return t.BootImage.URL
		}
	}
	return ""
}

// setServiceBoot sets the host's service boot to image for this maintenance, or ("") removes it
// if it is this maintenance's.
func (r *Reconciler) setServiceBoot(ctx context.Context, h *infrav1.RedfishHost, m *expv1.RedfishMaintenance, image string) error {
	sb := h.Spec.ServiceBoot
	switch {
	case image == "" && (sb == nil || sb.Requestor != requestor(m)):
		return nil
	case image != "" && sb != nil && sb.Requestor == requestor(m) && sb.Image == image:
		return nil
	}
	before := h.DeepCopy()
	h.Spec.ServiceBoot = nil
	if image != "" {
		h.Spec.ServiceBoot = &infrav1.ServiceBoot{Requestor: requestor(m), Image: image}
	}
	if err := r.Client.Patch(ctx, h, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	if image != "" {
		r.event(m, "ImageBooting", "host %s boots %s", h.Name, bmc.Redact(image))
	}
	return nil
}

// setHold adds or removes the maintenance's reboot request on the host: power stays off while any
// requestor holds one.
func (r *Reconciler) setHold(ctx context.Context, h *infrav1.RedfishHost, m *expv1.RedfishMaintenance, want bool) error {
	idx := slices.IndexFunc(h.Spec.RebootRequests, func(q infrav1.RebootRequest) bool { return ownHold(q, m) })
	if (idx >= 0) == want {
		return nil
	}
	before := h.DeepCopy()
	own := infrav1.RebootRequest{Requestor: requestor(m), Mode: infrav1.RebootModeHard, RequestorUID: string(m.UID)}
	switch pred := slices.IndexFunc(h.Spec.RebootRequests, func(q infrav1.RebootRequest) bool { return q.Requestor == requestor(m) }); {
	case want && pred >= 0:
		// A predecessor's under the same name (one request per requestor): taken over.
		h.Spec.RebootRequests[pred] = own
	case want:
		h.Spec.RebootRequests = append(h.Spec.RebootRequests, own)
	default:
		h.Spec.RebootRequests = slices.Delete(h.Spec.RebootRequests, idx, idx+1)
	}
	if err := r.Client.Patch(ctx, h, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	if want {
		r.event(m, "PowerHeld", "host %s held powered off", h.Name)
	}
	return nil
}

// adoptHold makes a reboot request under the maintenance's requestor that carries another UID its
// own (nothing when there is none).
func (r *Reconciler) adoptHold(ctx context.Context, h *infrav1.RedfishHost, m *expv1.RedfishMaintenance) error {
	if h == nil {
		return nil
	}
	idx := slices.IndexFunc(h.Spec.RebootRequests, func(q infrav1.RebootRequest) bool { return q.Requestor == requestor(m) && !ownHold(q, m) })
	if idx < 0 {
		return nil
	}
	before := h.DeepCopy()
	h.Spec.RebootRequests[idx].RequestorUID = string(m.UID)
	return r.Client.Patch(ctx, h, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}

// ownHold says whether the reboot request is the maintenance's: its requestor, and its UID (a
// request of a predecessor under the same name is not; one written before requests carried a UID
// is).
func ownHold(q infrav1.RebootRequest, m *expv1.RedfishMaintenance) bool {
	return q.Requestor == requestor(m) && (q.RequestorUID == "" || q.RequestorUID == string(m.UID))
}

// enter moves to a stage (forward only) and records when.
func (r *Reconciler) enter(m *expv1.RedfishMaintenance, s expv1.MaintenanceStage) {
	if m.Status.Stage == s {
		return
	}
	now := r.Now()
	if n := len(m.Status.Stages); n > 0 {
		last := m.Status.Stages[n-1]
		metrics.MaintenanceStageSeconds.WithLabelValues(string(last.Stage)).Observe(now.Sub(last.Time.Time).Seconds())
	}
	m.Status.Stage = s
	m.Status.Stages = append(m.Status.Stages, expv1.StageTime{Stage: s, Time: metav1.NewTime(now)})
	metrics.SetMaintenanceStage(m.Namespace, m.Name, string(s))
}

func stageTime(m *expv1.RedfishMaintenance, s expv1.MaintenanceStage) *metav1.Time {
	for _, st := range m.Status.Stages {
		if st.Stage == s {
			return &st.Time
		}
	}
	return nil
}

// waiting says why the maintenance does not move on. While the reason stays the same, a changed
// message is written at most every messageRefresh: the budget's counts in it move with every host
// of a fleet maintenance, and rewriting every waiting maintenance's status at each move was most
// of the API load of one (docs/performance.md).
func (r *Reconciler) waiting(m *expv1.RedfishMaintenance, reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	key := types.NamespacedName{Namespace: m.Namespace, Name: m.Name}
	now := r.Now()
	if c := conditions.Get(m, infrav1.ReadyCondition); c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason {
		if c.Message == msg {
			return
		}
		if last, ok := r.messages.Load(key); ok && now.Sub(last.(time.Time)) < r.messageRefresh() {
			return // the message it has says the same thing, a moment older
		}
	}
	r.messages.Store(key, now)
	conditions.Set(m, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: reason, Message: msg})
}

// messageRefresh is how long a waiting maintenance keeps a message whose figures have moved.
func (r *Reconciler) messageRefresh() time.Duration { return 10 * r.PollInterval }

// leaseGiveUp is how long a deleted maintenance waits for its BMC to confirm that what it started
// ended before it releases the host's lease anyway: its longest phase timeout.
func leaseGiveUp(m *expv1.RedfishMaintenance) time.Duration {
	d := DefaultStepTimeout
	for _, t := range m.Spec.Tasks {
		if automatic(t) {
			d = max(d, stepTimeout(t))
		}
	}
	return d
}

func (r *Reconciler) warn(m *expv1.RedfishMaintenance, reason, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(m, nil, "Warning", reason, "Maintenance", format, args...)
	}
}

func (r *Reconciler) event(m *expv1.RedfishMaintenance, reason, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(m, nil, "Normal", reason, "Maintenance", format, args...)
	}
}

// retryOnConflict turns a conflict (the object changed since it was read) into a prompt retry.
func retryOnConflict(err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	return ctrl.Result{}, err
}

func ctrlLog(ctx context.Context) logr.Logger { return ctrl.LoggerFrom(ctx) }
