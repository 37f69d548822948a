// Package provider wires everything this provider runs into a controller-runtime manager: the
// admission webhooks, the seed server booting hosts fetch their data from, and the controllers.
// The manager binary, the embedded demo and the e2e suite all set it up through Setup.
package provider

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"

	"golang.org/x/time/rate"
	"k8s.io/client-go/rest"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
	srv, err := seedServer(mgr, o)
	if err != nil {
		return err
	}
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

// seedServer builds the seed server: seed Secrets looked up in a metadata-only cache of their
// own (Secrets of the seed type only), read through a client of its own, whose client-side rate
// limit is not the controllers'.
func seedServer(mgr ctrl.Manager, o controllers.Options) (*seed.Server, error) {
	var namespaces map[string]cache.Config
	if o.Namespace != "" {
		namespaces = map[string]cache.Config{o.Namespace: {}}
	}
	co := seed.CacheOptions(namespaces)
	co.Scheme, co.Mapper, co.HTTPClient = mgr.GetScheme(), mgr.GetRESTMapper(), mgr.GetHTTPClient()
	seeds, err := cache.New(mgr.GetConfig(), co)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(seeds); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(mgr.GetConfig())
	cfg.QPS, cfg.Burst, cfg.RateLimiter = seedQPS, seedBurst, nil
	reader, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return nil, err
	}
	return &seed.Server{Seeds: seeds, Reader: reader, Writer: reader, Hosts: mgr.GetClient(), BaseURL: o.SeedBaseURL, CABundle: o.SeedCABundle,
		Rate: rate.Limit(o.SeedRate), Burst: o.SeedBurst, IPXERate: rate.Limit(o.SeedIPXERate), IPXEBurst: o.SeedIPXEBurst}, nil
}

// The seed server's own client-side rate limit: it reads a seed Secret once per version, the
// bootstrap data of authenticated requests (once per 30 s), and hosts before a refusal (at most
// 5 per second, see seed.Server.Reader).
const (
	seedQPS   = 50
	seedBurst = 100
)

// everyReplica is a runnable that runs on every replica, not only the leader: the seed Service
// sends booting hosts to any ready pod, and the seed server only reads from the API server.
type everyReplica manager.RunnableFunc

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }

// NeedLeaderElection tells the manager to start it without waiting for leadership.
func (everyReplica) NeedLeaderElection() bool { return false }

// SeedTLS serves the seed server over TLS with the certificate in certDir (tls.crt, tls.key, as
// cert-manager writes a Certificate's Secret), read again whenever the files change (a renewed
// certificate is served without a restart). It returns what wraps the seed listener.
func SeedTLS(mgr ctrl.Manager, certDir string) (func(net.Listener) net.Listener, error) {
	w, err := certwatcher.New(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("seed server certificate in %s: %w", certDir, err)
	}
	if err := mgr.Add(everyReplica(w.Start)); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: w.GetCertificate}
	return func(l net.Listener) net.Listener { return tls.NewListener(l, cfg) }, nil
}
