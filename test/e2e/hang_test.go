package e2e

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// A BMC whose session service hangs must cost the provider no more than a short wait per
// connection attempt: the reconcile workers it would otherwise hold are the ones every healthy
// host of the fleet needs.
var _ = Describe("BMCs that hang at login", Label("bmc-hang-connect"), func() {
	It("do not slow the provisioning of healthy hosts by more than 20%", func() {
		// provision registers 4 healthy hosts and runs a control plane and 3 workers on them; it
		// returns the time from registration to every Machine Running with a Node.
		provision := func(name string) time.Duration {
			GinkgoHelper()
			start := time.Now()
			b := startBed(name, 4, bedOptions{withOS: true, powerLatency: time.Second})
			b.createCluster(name)
			b.controlPlane()
			b.template("workers", infrav1.RedfishMachineSpec{AutomatedCleaningMode: infrav1.CleaningModeDisabled})
			b.machineDeployment("workers", "workers", 3)
			b.waitRunning("workers", 3)
			return time.Since(start)
		}
		// The first provisioning of a run also warms the caches of CAPI's controllers: the
		// baseline is the second one, so that both measured runs start warm.
		provision("hang-warm")
		baseline := provision("hang-base")

		hung := startBed("hang-dead", 20, bedOptions{prepare: func(f *simulator.Fleet) {
			for _, s := range f.Servers {
				s.Fault.HangLogins()
			}
		}})
		loaded := provision("hang-load")
		ratio := loaded.Seconds() / baseline.Seconds()
		fmt.Fprintf(GinkgoWriter, "4 healthy hosts to 4 Running Machines: %s alone, %s beside 20 BMCs hanging at login (%.2fx)\n",
			baseline.Round(10*time.Millisecond), loaded.Round(10*time.Millisecond), ratio)

		By("the hanging BMCs are reported, not offered")
		Eventually(func(g Gomega) {
			for _, h := range hung.hosts() {
				g.Expect(h.Status.State).NotTo(Equal(infrav1.HostStateAvailable))
				c := conditions.Get(&h, infrav1.BMCReachableCondition)
				g.Expect(c).NotTo(BeNil(), "host %s has no BMCReachable condition", h.Name)
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse), "host %s", h.Name)
				g.Expect(strings.Contains(c.Message, "session") || strings.Contains(c.Message, "circuit breaker")).To(BeTrue(), "host %s: %s", h.Name, c.Message)
			}
		}).Should(Succeed())
		Expect(ratio).To(BeNumerically("<=", 1.2), "provisioning beside hanging BMCs took %s, alone %s", loaded, baseline)
	})
})
