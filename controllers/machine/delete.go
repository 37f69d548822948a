package machine

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// reconcileDelete asks the host to release the claim and waits until it did: power off, clean
// (unless the claim recorded cleaning Disabled), return to the pool. Everything it needs was
// recorded on the host at claim time; no template is read.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	rm := s.rm
	conditions.Set(rm, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.DeletingReason, Message: "Releasing the host"})
	if err := r.deleteSeed(ctx, rm); err != nil {
		return ctrl.Result{}, err
	}
	// While the host the machine recorded still holds its claim in the cache, the machine waits:
	// every change of that host wakes it, and waiting longer is safe. The last look, before the
	// finalizer goes, is at the API server, not the cache, and at every host: a claim the cache
	// has not seen yet (or made and not yet recorded in status.hostRef) would be left behind,
	// held by a machine that no longer exists.
	if name := rm.Status.HostRef; name != "" {
		h := &infrav1.RedfishHost{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: rm.Namespace, Name: name}, h)
		if err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		if err == nil && claimedBy(h, rm) {
			return r.waitForRelease(ctx, rm, h)
		}
	}
	hosts := &infrav1.RedfishHostList{}
	if err := r.APIReader.List(ctx, hosts, client.InNamespace(rm.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	for i := range hosts.Items {
		if h := &hosts.Items[i]; claimedBy(h, rm) {
			return r.waitForRelease(ctx, rm, h)
		}
	}
	r.claimsSent.Delete(rm.UID) // no host holds its claim
	controllerutil.RemoveFinalizer(rm, infrav1.MachineFinalizer)
	return ctrl.Result{}, nil
}

// releaseRecheck is how often a machine being deleted looks at its host again while the host
// releases it. Only a safety net: every change of the host, and the release itself, wakes it.
const releaseRecheck = 30 * time.Second

// waitForRelease asks h to release the machine's claim and waits for it.
func (r *Reconciler) waitForRelease(ctx context.Context, rm *infrav1.RedfishMachine, h *infrav1.RedfishHost) (ctrl.Result, error) {
	if !h.Status.Claim.Release {
		released := h.DeepCopy()
		released.Status.Claim.Release = true
		if err := r.Client.Status().Update(ctx, released); err != nil && !apierrors.IsConflict(err) {
			return ctrl.Result{}, err
		}
	}
	conditions.Set(rm, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.DeletingReason,
		Message: "Waiting for host " + h.Name + " to power off, clean and return to the pool"})
	return ctrl.Result{RequeueAfter: releaseRecheck}, nil
}
