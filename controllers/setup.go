// Package controllers holds the provider's reconcilers, one package-level file set per kind.
package controllers

import (
	"context"

	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
)

// Options configure the provider's controllers.
type Options struct {
	// WatchFilterValue, when set, limits reconciliation to objects labelled
	// cluster.x-k8s.io/watch-filter=<value> (sharding across several provider instances).
	WatchFilterValue string
	// Controller carries concurrency and rate-limit options shared by every controller.
	Controller controller.Options
	// ClusterCache is CAPI's cache of workload-cluster clients.
	ClusterCache clustercache.ClusterCache
}

// RBAC of the manager, least privilege: our kinds, CAPI objects it reads or hooks into, the Secrets
// holding BMC credentials and bootstrap data, Events, and the workload kubeconfig.
//
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=redfishhosts;redfishmachines;redfishclusters,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=redfishhosts/status;redfishmachines/status;redfishclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=redfishmachinetemplates;redfishclustertemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters;clusters/status;machines;machines/status;machinesets;machinedeployments,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Setup registers every controller of the provider with the manager.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	return nil
}
