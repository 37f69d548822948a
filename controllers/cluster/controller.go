// Package cluster reconciles RedfishClusters, the CAPI v1beta2 InfraClusters of this provider.
// Bare metal has no cloud infrastructure to create: the cluster is provisioned as soon as it
// has a control plane endpoint, and its failure domains are the values of a host label.
package cluster

import (
	"context"
	"errors"
	"maps"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
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
	"github.com/caprf/cluster-api-provider-redfish/internal/pause"
	"github.com/caprf/cluster-api-provider-redfish/internal/shutdown"
)

// Reconciler reconciles RedfishClusters.
type Reconciler struct {
	Client client.Client
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.RedfishCluster{}).
		Named("redfishcluster").
		WithOptions(opts).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(
			util.ClusterToInfrastructureMapFunc(ctx, infrav1.GroupVersion.WithKind("RedfishCluster"), mgr.GetClient(), &infrav1.RedfishCluster{}))).
		// Failure domains come from hosts' labels: a host's status changes (every power read,
		// every state) would each cost every RedfishCluster of the namespace a list of its hosts.
		Watches(&infrav1.RedfishHost{}, handler.EnqueueRequestsFromMapFunc(r.hostToClusters), builder.WithPredicates(predicate.Funcs{
			UpdateFunc:  hostLabelsChanged,
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		Complete(shutdown.Quiet(r))
}

// hostLabelsChanged says whether a host update may change a RedfishCluster's failure domains.
func hostLabelsChanged(e event.UpdateEvent) bool {
	return e.ObjectOld == nil || e.ObjectNew == nil || !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
}

// hostToClusters refreshes the failure domains of every RedfishCluster in the host's namespace.
func (r *Reconciler) hostToClusters(ctx context.Context, o client.Object) []reconcile.Request {
	list := &infrav1.RedfishClusterList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, c := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
	}
	return out
}

// Reconcile reports the cluster infrastructure.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	rc := &infrav1.RedfishCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, rc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cluster, err := util.GetOwnerCluster(ctx, r.Client, rc.ObjectMeta)
	if err != nil || cluster == nil {
		return ctrl.Result{}, client.IgnoreNotFound(err) // CAPI sets the owner; that event wakes us
	}
	isPaused, requeue, notPaused, err := pause.Ensure(ctx, r.Client, cluster, rc)
	if err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}
	helper, err := patch.NewHelper(rc, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	if notPaused != nil {
		conditions.Set(rc, *notPaused) // a new object: with the round's write
	}
	defer func() {
		if err := helper.Patch(ctx, rc, patch.WithOwnedConditions{Conditions: []string{infrav1.ReadyCondition, infrav1.PausedCondition}}); err != nil {
			retErr = errors.Join(retErr, err)
		}
	}()
	if !rc.DeletionTimestamp.IsZero() {
		controllerutil.RemoveFinalizer(rc, infrav1.ClusterFinalizer)
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(rc, infrav1.ClusterFinalizer) {
		return ctrl.Result{}, nil
	}

	if err := r.updateFailureDomains(ctx, rc); err != nil {
		return ctrl.Result{}, err
	}
	if rc.Spec.ControlPlaneEndpoint.Host == "" {
		conditions.Set(rc, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: "WaitingForControlPlaneEndpoint",
			Message: "spec.controlPlaneEndpoint.host is empty: set the VIP or load balancer of the API server"})
		return ctrl.Result{}, nil
	}
	yes := true
	rc.Status.Initialization.Provisioned = &yes
	conditions.Set(rc, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: infrav1.ReadyReason})
	return ctrl.Result{}, nil
}

func (r *Reconciler) updateFailureDomains(ctx context.Context, rc *infrav1.RedfishCluster) error {
	sel := labels.Everything()
	if rc.Spec.HostSelector != nil {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(rc.Spec.HostSelector); err != nil {
			return err
		}
	}
	hosts := &infrav1.RedfishHostList{}
	// Only read: listed from the cache without copies.
	if err := r.Client.List(ctx, hosts, client.InNamespace(rc.Namespace), client.MatchingLabelsSelector{Selector: sel}, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	key := rc.Spec.FailureDomainLabel
	if key == "" {
		key = infrav1.FailureDomainLabel
	}
	seen := map[string]bool{}
	for _, h := range hosts.Items {
		if v := h.Labels[key]; v != "" {
			seen[v] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	rc.Status.FailureDomains = nil
	yes := true
	for _, n := range names {
		rc.Status.FailureDomains = append(rc.Status.FailureDomains, clusterv1.FailureDomain{Name: n, ControlPlane: &yes})
	}
	return nil
}
