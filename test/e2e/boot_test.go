package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("Provisioning boot", Label("boot-once"), func() {
	It("powers a host on exactly once when the BMC carries out the power-on but its answer is lost", func() {
		b := newBed("bootonce", 1, nil)
		b.waitHostsAvailable(1)
		server := b.fleet.Servers[0]
		// The next power action's answer is lost after the BMC carried it out: the provider
		// cannot tell from the answer whether the server is booting.
		server.Fault.DropResponsesTo("POST", "/Actions/ComputerSystem.Reset", 1)
		b.createCluster("bootonce")
		Expect(b.controlPlane()).To(Equal(server.ID()))
		st := server.Stats()
		Expect(st.Resets).To(HaveKeyWithValue("On", 1), "power-on resets accepted: %v\n%s", st.Resets, b.dump())
		Expect(st.Resets).NotTo(HaveKey("ForceOff"), "the booting server was powered off: %v", st.Resets)
		Expect(st.Boots).To(Equal(1))
	})
})
