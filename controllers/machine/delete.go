package machine

import (
	"context"

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
	// From the API server, not the cache: a claim the cache has not seen yet would be left
	// behind, held by a machine that no longer exists, once the finalizer is gone.
	hosts := &infrav1.RedfishHostList{}
	if err := r.APIReader.List(ctx, hosts, client.InNamespace(rm.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	for i := range hosts.Items {
		h := &hosts.Items[i]
		if !claimedBy(h, rm) {
			continue
		}
		if !h.Status.Claim.Release {
			released := h.DeepCopy()
			released.Status.Claim.Release = true
			if err := r.Client.Status().Update(ctx, released); err != nil && !apierrors.IsConflict(err) {
				return ctrl.Result{}, err
			}
		}
		conditions.Set(rm, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.DeletingReason,
			Message: "Waiting for host " + h.Name + " to power off, clean and return to the pool"})
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	controllerutil.RemoveFinalizer(rm, infrav1.MachineFinalizer)
	return ctrl.Result{}, nil
}
