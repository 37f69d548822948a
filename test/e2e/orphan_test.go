package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

var _ = Describe("Orphaned claims", Label("orphan-claim"), func() {
	It("releases a host whose RedfishMachine vanished (finalizer removed by hand), and the owner's nodeReuse Machine lands on it", func() {
		b := newBed("orphan", 3, nil) // a control plane, one worker, a spare the reusing Machine must not take
		b.waitHostsAvailable(3)
		b.createCluster("orphan")
		b.controlPlane()
		b.template("workers", infrav1.RedfishMachineSpec{NodeReuse: true, AutomatedCleaningMode: infrav1.CleaningModeDisabled})
		b.machineDeployment("workers", "workers", 1)
		b.waitRunning("workers", 1)
		machine := b.machines("workers")[0]
		hostName := b.hostOf(machine)

		By("removing the RedfishMachine's finalizer by hand and deleting it: the host keeps a claim nobody holds")
		rm := &infrav1.RedfishMachine{}
		key := client.ObjectKey{Namespace: b.ns, Name: machine.Spec.InfrastructureRef.Name}
		deleteWithoutFinalizers(key, rm)

		By("CAPI replacing the Machine: the new nodeReuse Machine waits for the owner's host, which is released")
		Expect(env.Delete(ctx, &machine)).To(Succeed())
		Eventually(func(g Gomega) {
			h := &infrav1.RedfishHost{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: hostName}, h)).To(Succeed())
			g.Expect(h.Status.Claim).NotTo(BeNil(), "host %s is not claimed", hostName)
			g.Expect(h.Status.Claim.Consumer.Name).NotTo(Equal(rm.Name), "host %s still claimed by the vanished %s\n%s", hostName, rm.Name, b.dump())
		}).Should(Succeed())
		b.waitRunning("workers", 1)
		Expect(b.hostOf(b.machines("workers")[0])).To(Equal(hostName), "the nodeReuse Machine must land on its owner's host")

		// Events are written asynchronously by the recorder.
		Eventually(func() int { return hostEvents(b, hostName, "ConsumerGone") }).Should(Equal(1), "no ConsumerGone event on host %s", hostName)
	})
})
