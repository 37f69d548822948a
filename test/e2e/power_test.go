package e2e

import (
	"maps"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// A Soft power-off presses the power button once, on every BMC shape: the OS shuts down for a
// 20 seconds with the power reading On, and looks meanwhile press nothing more (a second press
// can turn a server that is shutting down back on).
var _ = Describe("A Soft power-off", Label("soft-once"), func() {
	It("presses GracefulShutdown once per request on every profile while the OS shuts down", func() {
		const shutdown = 20 * time.Second // longer than the e2e host check interval (15 s)
		names := slices.Sorted(maps.Keys(simulator.Profiles))
		var profiles []simulator.Profile
		for _, n := range names {
			profiles = append(profiles, simulator.Profiles[n])
		}
		b := startBed("softonce", len(names), bedOptions{fleet: simulator.FleetOptions{Profiles: profiles, ShutdownDuration: shutdown},
			mutate: func(_ int, h *infrav1.RedfishHost) { h.Spec.Online = ptr.To(true) }})
		b.waitHostsAvailable(len(names))
		Eventually(func(g Gomega) {
			for _, s := range b.fleet.Servers {
				g.Expect(s.PowerState()).To(Equal(simulator.PowerOn), "%s powered on", s.ID())
			}
		}).Should(Succeed())
		before := map[string]map[string]int{}
		for _, s := range b.fleet.Servers {
			before[s.ID()] = s.Stats().Resets
		}

		By("asking every host for a Soft power-off")
		for _, s := range b.fleet.Servers {
			Eventually(func() error {
				h := &infrav1.RedfishHost{}
				if err := env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: s.ID()}, h); err != nil {
					return err
				}
				h.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: "soft-once", Mode: infrav1.RebootModeSoft}}
				return env.Update(ctx, h)
			}).Should(Succeed())
		}
		Eventually(func(g Gomega) {
			for _, s := range b.fleet.Servers {
				g.Expect(s.PowerState()).To(Equal(simulator.PowerOff), "%s powered off", s.ID())
			}
		}, shutdown+time.Minute, 100*time.Millisecond).Should(Succeed())
		for i, s := range b.fleet.Servers {
			after := s.Stats().Resets
			Expect(after["GracefulShutdown"]-before[s.ID()]["GracefulShutdown"]).To(Equal(1), "GracefulShutdown presses on %s (%s)", s.ID(), names[i])
			Expect(after["ForceOff"]-before[s.ID()]["ForceOff"]).To(BeZero(), "%s (%s) forced off before the timeout", s.ID(), names[i])
		}
	})
})
