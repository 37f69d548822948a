package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// A BMC with a small session table whose sessions other tools hold refuses the provider's login:
// the host says so (not "unreachable"), and switching it to Basic authentication, which holds no
// session, brings it in.
var _ = Describe("A BMC whose sessions are used up", Label("session-limit"), func() {
	It("reports SessionLimitExceeded and registers once spec.bmc.authMethod is Basic", func() {
		b := startBed("sessions", 1, bedOptions{
			fleet:   simulator.FleetOptions{Profiles: []simulator.Profile{simulator.Profiles["dell-idrac9"]}},
			prepare: func(f *simulator.Fleet) { f.Servers[0].HoldSessions(simulator.Profiles["dell-idrac9"].MaxSessions) },
		})
		server := b.fleet.Servers[0]
		Eventually(func(g Gomega) {
			hosts := b.hosts() // the cache may not have the host created a moment ago
			g.Expect(hosts).To(HaveLen(1))
			h := hosts[0]
			c := findCondition(h.Status.Conditions, infrav1.BMCReachableCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(infrav1.BMCSessionLimitReason))
			g.Expect(c.Message).To(ContainSubstring("authMethod: Basic"))
		}).Should(Succeed())
		Expect(server.Stats().SessionsCreated).To(BeZero())

		By("switching the host to Basic authentication")
		h := b.hosts()[0]
		before := h.DeepCopy()
		h.Spec.BMC.AuthMethod = infrav1.BMCAuthBasic
		Expect(env.Patch(ctx, &h, client.MergeFrom(before))).To(Succeed())
		b.waitHostsAvailable(1)
		Expect(server.Stats().SessionsCreated).To(BeZero(), "Basic authentication must hold no session")
	})
})
