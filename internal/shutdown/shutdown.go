// Package shutdown keeps a manager's stop out of its error log.
package shutdown

import (
	"context"
	"errors"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Quiet wraps r so that an error it returns once its context was canceled is dropped and logged
// at V(1). The context is canceled when the manager stops (SIGTERM, as the kubelet stops a pod,
// or leadership lost): a reconcile then in flight fails at its next Redfish request or API write,
// and controller-runtime would log that as "Reconciler error" and count it in
// controller_runtime_reconcile_errors_total at every rollout of the provider. Nothing is lost:
// the queue goes with the process and the next leader reconciles every object again.
//
// A timeout (context.DeadlineExceeded) is still an error.
func Quiet[T comparable](r reconcile.TypedReconciler[T]) reconcile.TypedReconciler[T] {
	return reconcile.TypedFunc[T](func(ctx context.Context, req T) (reconcile.Result, error) {
		res, err := r.Reconcile(ctx, req)
		if err != nil && errors.Is(ctx.Err(), context.Canceled) {
			ctrl.LoggerFrom(ctx).V(1).Info("Reconcile interrupted: the manager is stopping", "error", err.Error())
			return reconcile.Result{}, nil
		}
		return res, err
	})
}
