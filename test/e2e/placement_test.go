package e2e

import (
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/sample"
)

// Where a Machine lands is what a platform team checks first: the host labels it asked for, the
// zone CAPI spread it to, and, once its MachineDeployment is gone, no host kept back for it.
var _ = Describe("Placement", Label("placement"), func() {
	It("claims only hosts that match the hostSelector and the Machine's failure domain, lists the zones as failure domains, and drops a reservation whose owner was deleted", func() {
		zones := []string{"a", "b", "b", ""}
		b := newBed("place", 4, func(i int, h *infrav1.RedfishHost) {
			h.Labels = map[string]string{}
			if zones[i] != "" {
				h.Labels[infrav1.FailureDomainLabel] = zones[i]
			}
			if i == 2 {
				h.Labels["example.com/gpu"] = "true"
			}
		})
		b.waitHostsAvailable(4)
		host := func(i int) string { return b.fleet.Servers[i].ID() }
		b.createCluster("place")

		By("the RedfishCluster offers the zones of its hosts as failure domains")
		rc := &infrav1.RedfishCluster{}
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: b.cluster.Spec.InfrastructureRef.Name}, rc)).To(Succeed())
			var names []string
			for _, fd := range rc.Status.FailureDomains {
				names = append(names, fd.Name)
			}
			g.Expect(names).To(Equal([]string{"a", "b"}))
		}).Should(Succeed())

		// placed waits until md has want Machines, one on the host named, the rest waiting for an
		// available host although other hosts are Available.
		placed := func(md, on string, want int) {
			GinkgoHelper()
			check := func(g Gomega) {
				ms := b.machines(md)
				g.Expect(ms).To(HaveLen(want))
				var landed, waiting []string
				for _, m := range ms {
					rm := &infrav1.RedfishMachine{}
					g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: m.Spec.InfrastructureRef.Name}, rm)).To(Succeed())
					if rm.Status.HostRef != "" {
						landed = append(landed, rm.Status.HostRef)
					} else if c := findCondition(rm.Status.Conditions, infrav1.HostClaimedCondition); c != nil && c.Reason == infrav1.WaitingForHostReason {
						waiting = append(waiting, m.Name)
					}
				}
				g.Expect(landed).To(Equal([]string{on}), b.dump())
				g.Expect(waiting).To(HaveLen(want - 1))
			}
			Eventually(check).Should(Succeed())
			Consistently(check, 2*time.Second).Should(Succeed(), "a waiting Machine took a host outside its selector or zone later")
		}

		By("a hostSelector: two Machines, one host with the label; the other Machine waits")
		b.template("gpu", infrav1.RedfishMachineSpec{
			HostSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"example.com/gpu": "true"}},
			AutomatedCleaningMode: infrav1.CleaningModeDisabled,
		})
		gpu := b.machineDeployment("gpu", "gpu", 2)
		placed("gpu", host(2), 2)

		By("a failure domain: two Machines in zone a, one host there; the other Machine waits")
		b.template("zone-a", infrav1.RedfishMachineSpec{AutomatedCleaningMode: infrav1.CleaningModeDisabled})
		data, zoneA := sample.MachineDeployment(b.ns, b.cluster.Name, "zone-a", "zone-a", 2, 0, 1)
		zoneA.Spec.Template.Spec.FailureDomain = "a"
		Expect(env.Create(ctx, data)).To(Succeed())
		Expect(env.Create(ctx, zoneA)).To(Succeed())
		placed("zone-a", host(0), 2)
		Expect(slices.ContainsFunc(b.hosts(), func(h infrav1.RedfishHost) bool { return h.Status.State == infrav1.HostStateAvailable })).To(BeTrue(),
			"hosts outside the selector and the zone stayed Available: %s", describeHosts(b.hosts()))
		scale(gpu, 0)
		scale(zoneA, 0)
		Eventually(func(g Gomega) {
			g.Expect(b.machines("gpu")).To(BeEmpty())
			g.Expect(b.machines("zone-a")).To(BeEmpty())
		}).Should(Succeed())

		By("nodeReuse: scaled to 0 the host stays reserved for the MachineDeployment; deleted, the reservation goes")
		b.template("reuse", infrav1.RedfishMachineSpec{NodeReuse: true, AutomatedCleaningMode: infrav1.CleaningModeDisabled})
		reuse := b.machineDeployment("reuse", "reuse", 1)
		b.waitRunning("reuse", 1)
		reserved := b.hostOf(b.machines("reuse")[0])
		scale(reuse, 0)
		h := &infrav1.RedfishHost{}
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: reserved}, h)).To(Succeed())
			g.Expect(h.Status.State).To(Equal(infrav1.HostStateAvailable))
			g.Expect(h.Status.ReservedFor).NotTo(BeNil())
			g.Expect(h.Status.ReservedFor.Name).To(Equal("reuse"))
		}).Should(Succeed())
		Expect(env.Delete(ctx, reuse)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(apierrors.IsNotFound(env.Get(ctx, client.ObjectKeyFromObject(reuse), reuse))).To(BeTrue())
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: reserved}, h)).To(Succeed())
			g.Expect(h.Status.ReservedFor).To(BeNil())
		}).Should(Succeed())
		Eventually(func() int { return hostEvents(b, reserved, "ReservationDropped") }).Should(Equal(1)) // events are written asynchronously
	})
})
