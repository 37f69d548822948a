package e2e

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/caprf/cluster-api-provider-redfish/internal/dev/sample"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// A BMC address outlives the server behind it: a decommissioned server's host is removed by force
// (its finalizer dropped, as operators do once a BMC is gone for good) and its IP goes to another
// server, of another make, with the same factory credentials. The removed host's session is
// given back to its BMC (small session tables fill up otherwise), and the new server's host
// registers with what its own BMC offers, never with the session and the service layout the
// provider learned from the old one.
var _ = Describe("A BMC address given to another server", Label("reused-address"), func() {
	It("registers the new server on every BMC profile after the old host was removed without its finalizer", func() {
		names := simulator.ProfileNames()
		b := profileBed("reused", len(names), names, false)
		b.waitHostsAvailable(len(names))

		By("removing every host by force and stopping its server")
		for _, h := range b.hosts() {
			// Paused in the same write that drops the finalizer: the controller neither puts the
			// finalizer back nor runs the host's deletion (which would log the session out).
			before := h.DeepCopy()
			h.Annotations = map[string]string{clusterv1.PausedAnnotation: ""}
			h.Finalizers = nil
			Expect(env.Patch(ctx, &h, client.MergeFrom(before))).To(Succeed())
			Expect(client.IgnoreNotFound(env.Delete(ctx, &h))).To(Succeed())
		}
		Eventually(b.hosts).Should(BeEmpty())
		Eventually(func(g Gomega) {
			for _, s := range b.fleet.Servers {
				g.Expect(s.ActiveSessions()).To(BeZero(), "sessions left open on %s (%s)", s.ID(), s.Profile().Name)
			}
		}).Should(Succeed(), "a host removed by force gives its BMC session back")
		b.fleet.Close()

		By("a server of the next profile at each old address, with its host")
		fleet := uint16(fleets.Add(1)) //nolint:gosec // far fewer than 65535 beds.
		removed := b.fleet
		b.fleet = &simulator.Fleet{} // what failure messages describe from now on
		for i, old := range removed.Servers {
			s, err := simulator.New(simulator.Config{
				ID: fmt.Sprintf("second-%d", i), Index: i, Fleet: fleet, Profile: simulator.Profiles[names[(i+1)%len(names)]],
				PowerLatency: 50 * time.Millisecond, Listen: strings.TrimPrefix(old.URL(), "http://"),
				Password: "second-" + sweepMarker,
			})
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(s.Close)
			s.OnRequest(sweepBMCRequest)
			b.fleet.Servers = append(b.fleet.Servers, s)
			Expect(s.Address()).To(Equal(old.Address()))
			creds, h := sample.Host(b.ns, s)
			Expect(env.Create(ctx, creds)).To(Succeed())
			Expect(env.Create(ctx, h)).To(Succeed())
		}
		b.waitHostsAvailable(len(names))
		for _, s := range b.fleet.Servers {
			Expect(s.ActiveSessions()).To(Equal(1), "sessions on %s (%s)", s.ID(), s.Profile().Name)
		}
	})
})
