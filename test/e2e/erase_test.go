package e2e

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

var _ = Describe("Cleaning with asynchronous erases", Label("erase-async"), func() {
	It("returns a released host to the pool only after every drive's erase completed", func() {
		const erase = 3 * time.Second
		b := startBed("erase", 1, bedOptions{withOS: true, fleet: simulator.FleetOptions{EraseDuration: erase}})
		b.waitHostsAvailable(1)
		server := b.fleet.Servers[0]
		b.createCluster("erase")
		b.controlPlane()

		By("deleting the Machine: the host is released and cleaned")
		cp := b.machinesOfCluster()[0]
		Expect(env.Delete(ctx, &cp)).To(Succeed())
		released := time.Now()
		// Every look at the host until it is Available must find it erasing, and the first look at
		// it Available must find every drive erased.
		sawErasing := false
		Eventually(func(g Gomega) {
			h := &infrav1.RedfishHost{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: server.ID()}, h)).To(Succeed())
			if h.Status.State == infrav1.HostStateCleaning && h.Status.Erase != nil {
				sawErasing = true
			}
			g.Expect(h.Status.State).To(Equal(infrav1.HostStateAvailable))
			for drive, n := range server.DriveErasures() {
				Expect(n).To(Equal(1), "host Available while drive %s was erased %d times (%s after the release)", drive, n, time.Since(released))
			}
			c := findCondition(h.Status.Conditions, infrav1.CleanedCondition)
			Expect(c).NotTo(BeNil())
			Expect(c.Status).To(Equal(metav1.ConditionTrue))
		}, erase+time.Minute, 100*time.Millisecond).Should(Succeed())
		Expect(sawErasing).To(BeTrue(), "never saw the host Cleaning with erases recorded")
		Expect(time.Since(released)).To(BeNumerically(">=", erase), "the host came back before the erase could have finished")
	})

	It("keeps a host whose BMC offers no erase out of the pool, with a condition that says why", func() {
		b := startBed("noerase", 1, bedOptions{withOS: true, fleet: simulator.FleetOptions{NoSecureErase: true}})
		b.waitHostsAvailable(1)
		b.createCluster("noerase")
		hostName := b.controlPlane()

		cp := b.machinesOfCluster()[0]
		Expect(env.Delete(ctx, &cp)).To(Succeed())
		h := &infrav1.RedfishHost{}
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: hostName}, h)).To(Succeed())
			c := findCondition(h.Status.Conditions, infrav1.CleanedCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(infrav1.NothingToEraseReason))
			g.Expect(c.Message).To(ContainSubstring("2 Storage drives without Drive.SecureErase"))
			// In the same Eventually: the condition and the state are one write now
			// (internal/onepatch), but a check should not rely on how a status is written.
			g.Expect(h.Status.State).To(Equal(infrav1.HostStateCleaning))
		}).Should(Succeed())

		By("staying out of the pool")
		Consistently(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: hostName}, h)).To(Succeed())
			g.Expect(h.Status.State).To(Equal(infrav1.HostStateCleaning))
		}, 3*time.Second, 250*time.Millisecond).Should(Succeed())
	})
})

var _ = Describe("Cleaning a host with a drive Redfish cannot erase", Label("partial-erase"), func() {
	It("releases nothing while one drive cannot be erased, names it, and erases the rest once the operator accepts it", func() {
		const erase = 2 * time.Second
		// Disk1 has no SecureErase, an empty bay sits beside it, and the BMC answers an erase
		// with a bare 202 (no task monitor): only the drive says when its erase ended.
		b := startBed("parterase", 1, bedOptions{withOS: true, fleet: simulator.FleetOptions{
			NoSecureEraseDrives: []string{"Disk1"}, EmptyBays: 1, EraseWithoutMonitor: true, EraseDuration: erase}})
		b.waitHostsAvailable(1)
		server := b.fleet.Servers[0]
		b.createCluster("parterase")
		hostName := b.controlPlane()
		key := client.ObjectKey{Namespace: b.ns, Name: hostName}

		cp := b.machinesOfCluster()[0]
		Expect(env.Delete(ctx, &cp)).To(Succeed())
		h := &infrav1.RedfishHost{}
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, key, h)).To(Succeed())
			c := findCondition(h.Status.Conditions, infrav1.CleanedCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(infrav1.DrivesNotErasableReason))
			g.Expect(c.Message).To(ContainSubstring("Disk1 (serial " + "S4" + server.ID() + "-1)"))
			g.Expect(c.Message).NotTo(ContainSubstring("Disk0"))
			g.Expect(c.Message).NotTo(ContainSubstring("Bay"))
			g.Expect(h.Status.State).To(Equal(infrav1.HostStateCleaning))
		}).Should(Succeed())

		By("staying out of the pool, with no drive erased")
		Consistently(func(g Gomega) {
			g.Expect(env.Get(ctx, key, h)).To(Succeed())
			g.Expect(h.Status.State).To(Equal(infrav1.HostStateCleaning))
			g.Expect(h.Status.Claim).NotTo(BeNil())
		}, 3*time.Second, 250*time.Millisecond).Should(Succeed())
		Expect(eraseRequests(server)).To(BeZero(), "an erase was started although one drive cannot be erased")

		By("the operator accepting Disk1 unerased: Disk0 is erased and the host released once the drive says so")
		Eventually(func() error {
			if err := env.Get(ctx, key, h); err != nil {
				return err
			}
			h.Spec.UnerasedDrivesAccepted = []string{"Disk1"}
			return env.Update(ctx, h)
		}).Should(Succeed())
		accepted := time.Now()
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, key, h)).To(Succeed())
			g.Expect(h.Status.State).To(Equal(infrav1.HostStateAvailable))
		}, erase+time.Minute, 100*time.Millisecond).Should(Succeed())
		Expect(time.Since(accepted)).To(BeNumerically(">=", erase), "the host came back before Disk0's erase could have finished")
		Expect(server.DriveErasures()).To(Equal(map[string]int{"Disk0": 1, "Disk1": 0}))
		Expect(eraseRequests(server)).To(Equal(1))
	})
})

// eraseRequests counts the SecureErase requests a server carried out.
func eraseRequests(s *simulator.Server) int {
	n := 0
	for path, c := range s.Stats().Posts {
		if strings.HasSuffix(path, "/Actions/Drive.SecureErase") {
			n += c
		}
	}
	return n
}

// machinesOfCluster lists the bed cluster's Machines.
func (b *bed) machinesOfCluster() []clusterv1.Machine {
	GinkgoHelper()
	list := &clusterv1.MachineList{}
	Expect(env.List(ctx, list, client.InNamespace(b.ns), client.MatchingLabels{clusterv1.ClusterNameLabel: b.cluster.Name})).To(Succeed())
	return list.Items
}
