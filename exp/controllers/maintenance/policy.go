package maintenance

import (
	"context"
	"errors"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/metrics"
	"github.com/caprf/cluster-api-provider-redfish/internal/shutdown"
)

// PolicyReconciler reports, on each RedfishMaintenancePolicy, what it governs now: hosts,
// unavailable ones, ones in maintenance, whether a window is open. It decides nothing (the
// maintenance controller applies the policy when a maintenance starts).
type PolicyReconciler struct {
	Client client.Client
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// SetupWithManager registers the controller.
func (r *PolicyReconciler) SetupWithManager(_ context.Context, mgr ctrl.Manager, opts controller.Options) error {
	if r.Now == nil {
		r.Now = time.Now
	}
	toPolicies := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		list := &expv1.RedfishMaintenancePolicyList{}
		if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for _, p := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
		}
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&expv1.RedfishMaintenancePolicy{}).
		Named("redfishmaintenancepolicy").
		Watches(&infrav1.RedfishHost{}, toPolicies).
		Watches(&expv1.RedfishMaintenance{}, toPolicies).
		// A Cluster's labels decide which hosts a clusterSelector governs.
		Watches(&clusterv1.Cluster{}, toPolicies, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WithOptions(opts).
		Complete(shutdown.Quiet(r))
}

// Reconcile refreshes one policy's status.
func (r *PolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	p := &expv1.RedfishMaintenancePolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		if client.IgnoreNotFound(err) == nil {
			metrics.MaintenanceBudget.DeletePartialMatch(map[string]string{"namespace": req.Namespace, "policy": req.Name})
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	helper, err := patch.NewHelper(p, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer func() {
		if err := helper.Patch(ctx, p); err != nil {
			retErr = errors.Join(retErr, err)
		}
	}()
	f, err := listFleet(ctx, r.Client, p.Namespace, []expv1.RedfishMaintenancePolicy{*p})
	if err != nil {
		return ctrl.Result{}, err
	}
	b, _, berr := budgetOf(p, f, "", r.Now())
	open, next, werr := windowState(p.Spec.Windows, r.Now())
	if err := errors.Join(berr, werr); err != nil {
		conditions.Set(p, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: InvalidPolicyReason, Message: err.Error()})
		return ctrl.Result{}, nil
	}
	conditions.Set(p, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: infrav1.ReadyReason})
	p.Status.Hosts, p.Status.Unavailable, p.Status.InMaintenance, p.Status.WindowOpen = int32(b.hosts), int32(b.unavailable), int32(b.inMaintenance), open //nolint:gosec // host counts fit
	for kind, v := range map[string]int{"hosts": b.hosts, "unavailable": b.unavailable, "in_maintenance": b.inMaintenance, "max_unavailable": b.maxUnavailable} {
		metrics.MaintenanceBudget.WithLabelValues(p.Namespace, p.Name, kind).Set(float64(v))
	}
	// Count again when a replacement's boot not counted now passes its grace (nothing else
	// changes then to wake the policy).
	var wait time.Duration
	if !b.recount.IsZero() {
		wait = max(b.recount.Sub(r.Now()), time.Second)
	}
	if len(p.Spec.Windows) == 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	// Look again when the window closes or opens.
	window := time.Minute
	if !open && next.Sub(r.Now()) < window {
		window = max(next.Sub(r.Now()), time.Second)
	}
	if wait == 0 || window < wait {
		wait = window
	}
	return ctrl.Result{RequeueAfter: wait}, nil
}
