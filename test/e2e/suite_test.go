// Package e2e runs the provider end to end: a real kube-apiserver and etcd (envtest), the real
// Cluster API core controllers and webhooks, this provider's controllers and seed server, and
// fleets of simulated Redfish servers whose simulated OS registers Nodes.
// `go test ./test/e2e/... -ginkgo.label-filter=<label>` runs one scenario.
package e2e

import (
	"context"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/caprf/cluster-api-provider-redfish/bmc"
	"github.com/caprf/cluster-api-provider-redfish/controllers"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/testenv"
	"github.com/caprf/cluster-api-provider-redfish/internal/provider"
)

// bmcCheckInterval is how often settled hosts re-read their BMC in these scenarios.
const bmcCheckInterval = 15 * time.Second

// orphanGracePeriod is how long a claimed host's RedfishMachine may be missing in these scenarios.
const orphanGracePeriod = 3 * time.Second

// restoreGracePeriod is how long a host found powered on waits for its machine in these scenarios.
const restoreGracePeriod = 20 * time.Second

// maintenanceGate is the Maintenance feature gate of the managers the suite starts (on, unless a
// spec turns it off and restarts the manager).
var maintenanceGate atomic.Bool

var (
	env         *testenv.Environment
	ctx         context.Context
	seedBaseURL string
	// seedCAs trust the seed server's certificate (as hosts' firmware, BMCs and images would).
	seedCAs *x509.CertPool
	// seedCertPEM is that certificate, which the disk image server serves too.
	seedCertPEM []byte
	// diskImages serves the deploy image (its URL is the managers' DeployImageURL) and the disk
	// images specs publish, over HTTPS with the seed server's certificate.
	diskImages *imageFiles
)

func TestE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e needs envtest; skipped with -short")
	}
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(2 * time.Minute)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	RunSpecs(t, "CAPRF e2e")
}

var _ = BeforeSuite(func() {
	var cancel context.CancelFunc
	ctx, cancel = context.WithCancel(context.Background())
	DeferCleanup(cancel)

	maintenanceGate.Store(true)
	// The most verbose level the manager allows, searched for secrets (see sweep_test.go);
	// E2E_LOGS=1 also prints it.
	logger := logr.New(recovering{zap.New(sweptLogger()).GetSink()})
	seedListener, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	// The seed server serves HTTPS, as the release does by default.
	seedBaseURL = "https://" + seedListener.Addr().String()
	certDir, err := testenv.WriteServingCert(filepath.Join(GinkgoT().TempDir(), "seed-certs"), "seed.rack.example")
	Expect(err).NotTo(HaveOccurred())
	certPEM, err := os.ReadFile(filepath.Join(certDir, "tls.crt"))
	Expect(err).NotTo(HaveOccurred())
	seedCAs = x509.NewCertPool()
	Expect(seedCAs.AppendCertsFromPEM(certPEM)).To(BeTrue())
	seedCertPEM = certPEM
	diskImages = startImageFiles(certDir)
	DeferCleanup(diskImages.close)
	// The first manager serves seeds on seedListener; one started by env.RestartManager listens
	// on the same address again.
	var listened atomic.Bool
	listenSeed := func() (net.Listener, error) {
		if listened.CompareAndSwap(false, true) {
			return seedListener, nil
		}
		return net.Listen("tcp", seedListener.Addr().String())
	}

	env, err = testenv.Start(ctx, testenv.Options{
		Logger:     &logger,
		WrapClient: apiFaults.wrap,
		SetupProvider: func(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache) error {
			wrap, err := provider.SeedTLS(mgr, certDir)
			if err != nil {
				return err
			}
			listen := func() (net.Listener, error) {
				l, err := listenSeed()
				if err != nil {
					return nil, err
				}
				return wrap(l), nil
			}
			return provider.Setup(ctx, mgr, listen, controllers.Options{
				// SkipNameValidation: env.RestartManager registers the controllers again.
				Controller:       controller.Options{MaxConcurrentReconciles: 10, SkipNameValidation: ptr.To(true)},
				ClusterCache:     cc,
				SeedBaseURL:      seedBaseURL,
				SeedCABundle:     seedCertPEM,
				DeployImageURL:   diskImages.url("/deploy.iso"),
				PollInterval:     500 * time.Millisecond,
				Maintenance:      maintenanceGate.Load(),
				BMCRetryInterval: 2 * time.Second,
				BMCCheckInterval: bmcCheckInterval,
				BIOSSetupWait:    3 * time.Second, // the simulated POST is far shorter than a real one
				// The simulated inventory never lags; a flash whose answer a restart lost is
				// looked for this long.
				FirmwareVerifyGrace: 20 * time.Second,
				OrphanGracePeriod:   orphanGracePeriod,
				RestoreGracePeriod:  restoreGracePeriod,
				BMC:                 bmc.Options{CallTimeout: 20 * time.Second, AttemptTimeout: 5 * time.Second, BreakerCooldown: 5 * time.Second},
			})
		},
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(env.Stop()).To(Succeed()) })
	startSweep(ctx)
})
