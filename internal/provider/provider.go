// Package provider wires everything this provider runs into a controller-runtime manager: the
// admission webhooks, the seed server booting hosts fetch their data from, and the controllers.
// The manager binary, the embedded demo and the e2e suite all set it up through Setup.
package provider

import (
	"context"
	"net"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/controllers"
	"github.com/caprf/cluster-api-provider-redfish/internal/seed"
	"github.com/caprf/cluster-api-provider-redfish/internal/webhooks"
)

// Setup registers the webhooks, the seed server (serving on the listener listen returns once the
// manager starts it, reachable by hosts at o.SeedBaseURL) and the controllers.
func Setup(ctx context.Context, mgr ctrl.Manager, listen func() (net.Listener, error), o controllers.Options) error {
	if err := webhooks.Setup(ctx, mgr, mgr.GetAPIReader(), o.Namespace); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &infrav1.RedfishHost{}, seed.BootMACIndex, seed.IndexBootMAC); err != nil {
		return err
	}
	srv := &seed.Server{Reader: mgr.GetAPIReader(), Hosts: mgr.GetClient(), BaseURL: o.SeedBaseURL}
	if err := mgr.Add(everyReplica(func(ctx context.Context) error {
		l, err := listen()
		if err != nil {
			return err
		}
		return srv.Serve(ctx, l)
	})); err != nil {
		return err
	}
	return controllers.Setup(ctx, mgr, o)
}

// everyReplica is a runnable that runs on every replica, not only the leader: the seed Service
// sends booting hosts to any ready pod, and the seed server only reads from the API server.
type everyReplica manager.RunnableFunc

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }

// NeedLeaderElection tells the manager to start it without waiting for leadership.
func (everyReplica) NeedLeaderElection() bool { return false }
