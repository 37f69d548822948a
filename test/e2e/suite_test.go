// Package e2e runs the provider end to end: a real kube-apiserver and etcd (envtest), the real
// Cluster API core controllers and webhooks, this provider's controllers and the Redfish simulator.
// `go test ./test/e2e/... -ginkgo.label-filter=<label>` runs one scenario.
package e2e

import (
	"context"
	"os"
	"testing"

	"github.com/go-logr/logr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/caprf/cluster-api-provider-redfish/internal/testenv"
)

var (
	env *testenv.Environment
	ctx context.Context
)

func TestE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e needs envtest; skipped with -short")
	}
	RegisterFailHandler(Fail)
	RunSpecs(t, "CAPRF e2e")
}

var _ = BeforeSuite(func() {
	var cancel context.CancelFunc
	ctx, cancel = context.WithCancel(context.Background())
	DeferCleanup(cancel)

	logger := logr.Discard()
	if os.Getenv("E2E_LOGS") != "" {
		logger = zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true))
	}
	var err error
	env, err = testenv.Start(ctx, testenv.Options{Logger: &logger})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(env.Stop()).To(Succeed()) })
})
