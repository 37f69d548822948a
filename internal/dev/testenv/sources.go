package testenv

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// drainingSources is the ClusterCache the CAPI controllers get, with cluster sources that keep
// reading their channel until the manager has stopped. CAPI v1.14.2's ClusterCache sends a
// Cluster event on an unbuffered channel without watching for shutdown: when the manager stops
// while a connect or a failed probe is being reported, the controller reading that channel is
// gone and the ClusterCache reconcile blocks for good, holding the manager for its whole graceful
// shutdown timeout. A restarted manager (Environment.RestartManager) must not wait that out.
type drainingSources struct {
	clustercache.ClusterCache
	ctx context.Context // cancelled once the manager stopped
}

func (c drainingSources) GetClusterSource(controllerName string, mapFunc func(ctx context.Context, cluster client.Object) []ctrl.Request, opts ...clustercache.GetClusterSourceOption) source.Source {
	return drainingSource{Source: c.ClusterCache.GetClusterSource(controllerName, mapFunc, opts...), ctx: c.ctx}
}

type drainingSource struct {
	source.Source
	ctx context.Context
}

// Start reads the channel until the manager stopped, not only until the controller did: what
// arrives in between goes to a queue already shut down, which drops it.
func (s drainingSource) Start(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	return s.Source.Start(s.ctx, q)
}
