// Package remediation reconciles RedfishRemediations: reboot-based external remediation for
// MachineHealthChecks (spec.remediation.templateRef). The host is fenced (power confirmed off)
// through a typed reboot request on the RedfishHost, then powered on again; the host controller
// is the only one touching the BMC. Phases move forward only: Fencing → PoweringOn → Completed.
package remediation

import (
	"context"
	"errors"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/pause"
	"github.com/caprf/cluster-api-provider-redfish/internal/shutdown"
)

// Finalizer makes sure a deleted remediation never leaves its host held off.
const Finalizer = "redfishremediation.infrastructure.cluster.x-k8s.io"

// Reconciler reconciles RedfishRemediations.
type Reconciler struct {
	Client client.Client
	// APIReader reads the host when the remediation is deleted: a cached copy could miss the
	// request this remediation just added, and the finalizer would go with the request left behind.
	APIReader    client.Reader
	PollInterval time.Duration
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	if r.PollInterval == 0 {
		r.PollInterval = 2 * time.Second
	}
	clusterToRemediations, err := util.ClusterToTypedObjectsMapper(mgr.GetClient(), &infrav1.RedfishRemediationList{}, mgr.GetScheme())
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.RedfishRemediation{}).
		Named("redfishremediation").
		// Unpausing the Cluster wakes its remediations (a deleted one still has to withdraw its request).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(clusterToRemediations),
			builder.WithPredicates(predicates.ClusterPausedTransitions(mgr.GetScheme(), ctrl.LoggerFrom(ctx)))).
		WithOptions(opts).
		Complete(shutdown.Quiet(r))
}

func requestor(rr *infrav1.RedfishRemediation) string {
	return infrav1.RemediationRequestorPrefix + rr.Name
}

// Reconcile advances one remediation.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	rr := &infrav1.RedfishRemediation{}
	if err := r.Client.Get(ctx, req.NamespacedName, rr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// A paused remediation (its own cluster.x-k8s.io/paused annotation, or its Cluster paused)
	// does nothing, not even its deletion, until it is unpaused.
	var cluster *clusterv1.Cluster
	if name := rr.Labels[clusterv1.ClusterNameLabel]; name != "" {
		c := &clusterv1.Cluster{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rr.Namespace, Name: name}, c); err == nil {
			cluster = c
		} else if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
	}
	isPaused, requeue, notPaused, err := pause.Ensure(ctx, r.Client, cluster, rr)
	if err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}
	helper, err := patch.NewHelper(rr, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	if notPaused != nil {
		conditions.Set(rr, *notPaused) // a new object: with the round's write
	}
	defer func() {
		if err := helper.Patch(ctx, rr, patch.WithOwnedConditions{Conditions: []string{infrav1.PausedCondition}}); err != nil {
			retErr = errors.Join(retErr, err)
		}
	}()

	if !rr.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, rr)
	}
	if controllerutil.AddFinalizer(rr, Finalizer) {
		return ctrl.Result{}, nil
	}
	host, ours, err := r.hostOf(ctx, rr)
	if err != nil {
		return ctrl.Result{}, err
	}
	if host != nil && !ours {
		// The machine no longer holds this host (its claim was lost or is being released): never
		// power off someone else's server, and take back a request made while it was ours. The
		// request is written locked on the host read, so a claim that changed meanwhile refuses it.
		if err := r.setRequest(ctx, host, rr, false); err != nil {
			return retryOnConflict(err)
		}
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	if host == nil {
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil // the machine has no host (yet): nothing to reboot
	}
	if rr.Status.Host != host.Name {
		// Record the host before asking it for anything: once the Machine is gone (it owns this
		// remediation, which the garbage collector deletes after it), status is the only way back
		// to the host, whose reboot request must then be withdrawn.
		rr.Status.Host = host.Name
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}
	now := metav1.Now()
	switch rr.Status.Phase {
	case "", infrav1.RemediationFencing:
		rr.Status.Phase = infrav1.RemediationFencing
		if err := r.setRequest(ctx, host, rr, true); err != nil {
			return retryOnConflict(err)
		}
		if host.Status.PowerState != "Off" {
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		rr.Status.FencedAt, rr.Status.Phase = &now, infrav1.RemediationPoweringOn
		fallthrough
	case infrav1.RemediationPoweringOn:
		if err := r.setRequest(ctx, host, rr, false); err != nil {
			return retryOnConflict(err)
		}
		if host.Status.PowerState != "On" {
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		rr.Status.CompletedAt, rr.Status.Phase = &now, infrav1.RemediationCompleted
	}
	return ctrl.Result{}, nil
}

// reconcileDelete withdraws this remediation's reboot request from the host recorded in status
// (the Machine may be gone already) and keeps the finalizer until the request is gone.
func (r *Reconciler) reconcileDelete(ctx context.Context, rr *infrav1.RedfishRemediation) (ctrl.Result, error) {
	name := rr.Status.Host
	if name == "" {
		// No host recorded: this remediation never asked any host for anything.
		controllerutil.RemoveFinalizer(rr, Finalizer)
		return ctrl.Result{}, nil
	}
	h := &infrav1.RedfishHost{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: rr.Namespace, Name: name}, h); err != nil {
		if apierrors.IsNotFound(err) {
			controllerutil.RemoveFinalizer(rr, Finalizer)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if err := r.setRequest(ctx, h, rr, false); err != nil {
		return retryOnConflict(err) // the finalizer stays until the request is gone
	}
	controllerutil.RemoveFinalizer(rr, Finalizer)
	return ctrl.Result{}, nil
}

// retryOnConflict turns a conflict (the host changed since it was read) into a prompt retry.
func retryOnConflict(err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	return ctrl.Result{}, err
}

// hostOf finds the host of the Machine the remediation is named after (as the MachineHealthCheck
// names it), and whether that machine still holds it: claimed by its RedfishMachine (by UID), and
// not being released.
func (r *Reconciler) hostOf(ctx context.Context, rr *infrav1.RedfishRemediation) (*infrav1.RedfishHost, bool, error) {
	m := &clusterv1.Machine{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rr.Namespace, Name: rr.Name}, m); err != nil {
		return nil, false, client.IgnoreNotFound(err)
	}
	rm := &infrav1.RedfishMachine{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rr.Namespace, Name: m.Spec.InfrastructureRef.Name}, rm); err != nil {
		return nil, false, client.IgnoreNotFound(err)
	}
	if rm.Status.HostRef == "" {
		return nil, false, nil
	}
	h := &infrav1.RedfishHost{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rr.Namespace, Name: rm.Status.HostRef}, h); err != nil {
		return nil, false, client.IgnoreNotFound(err)
	}
	c := h.Status.Claim
	return h, c != nil && c.ConsumerUID == string(rm.UID) && !c.Release, nil
}

// setRequest adds or removes this remediation's reboot request on the host.
func (r *Reconciler) setRequest(ctx context.Context, h *infrav1.RedfishHost, rr *infrav1.RedfishRemediation, want bool) error {
	idx := slices.IndexFunc(h.Spec.RebootRequests, func(q infrav1.RebootRequest) bool { return q.Requestor == requestor(rr) })
	if (idx >= 0) == want {
		return nil
	}
	before := h.DeepCopy()
	if want {
		mode := rr.Spec.Mode
		if mode == "" {
			mode = infrav1.RebootModeHard
		}
		h.Spec.RebootRequests = append(h.Spec.RebootRequests, infrav1.RebootRequest{Requestor: requestor(rr), Mode: mode})
	} else {
		h.Spec.RebootRequests = slices.Delete(h.Spec.RebootRequests, idx, idx+1)
	}
	return r.Client.Patch(ctx, h, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}
