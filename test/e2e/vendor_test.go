package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/sample"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// A rack is rarely one vendor. Every BMC shape the simulator models provisions, is remediated
// and cleaned by the same provider, each through what its BMC offers.
var _ = Describe("A mixed fleet of every BMC profile", Label("vendor-fleet"), func() {
	It("provisions, remediates and cleans hosts of every BMC profile", func() {
		const profileLabel = "sim.caprf.dev/profile"
		// Virtual media boots with secure-erase cleaning on every profile that offers both;
		// PXE without cleaning on the others (no virtual media, or nothing Redfish can erase).
		media := []string{"dell-idrac9", "dell-idrac10", "hpe-ilo5", "lenovo-xcc", "manager-media", "supermicro-x13", "dmtf"}
		pxe := []string{"simple-storage", "bladed"}
		names := append(append([]string{"dmtf"}, media...), pxe...) // the first hosts the control plane
		var profiles []simulator.Profile
		for _, n := range names {
			profiles = append(profiles, simulator.Profiles[n])
		}
		b := startBed("vendors", len(names), bedOptions{withOS: true, fleet: simulator.FleetOptions{Profiles: profiles},
			mutate: func(i int, h *infrav1.RedfishHost) {
				h.Labels = map[string]string{profileLabel: names[i]}
				if i == 0 {
					h.Labels[profileLabel] = "control-plane"
				}
			}})
		b.waitHostsAvailable(len(names))
		b.createCluster("vendors")
		data, rm, m := sample.ControlPlane(b.ns, b.cluster.Name, b.ns+"-cp")
		rm.Spec.HostSelector = &metav1.LabelSelector{MatchLabels: map[string]string{profileLabel: "control-plane"}}
		for _, o := range []client.Object{data, rm, m} {
			Expect(env.Create(ctx, o)).To(Succeed())
		}
		selector := func(profiles ...string) *metav1.LabelSelector {
			return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: profileLabel, Operator: metav1.LabelSelectorOpIn, Values: profiles}}}
		}
		b.template("media", infrav1.RedfishMachineSpec{HostSelector: selector(media...)})
		b.template("pxe", infrav1.RedfishMachineSpec{HostSelector: selector(pxe...), BootMethod: infrav1.BootMethodPXE, AutomatedCleaningMode: infrav1.CleaningModeDisabled})
		mediaMD := b.machineDeployment("media", "media", int32(len(media)))
		b.machineDeployment("pxe", "pxe", int32(len(pxe)))
		b.waitRunning("media", len(media))
		b.waitRunning("pxe", len(pxe))
		for _, md := range []string{"media", "pxe"} {
			for _, m := range b.machines(md) {
				Expect(b.os.Fetched()[b.hostOf(m)]).To(Equal([]string{"#cloud-config for " + md + "\n"}), "the seed the OS on %s found", b.hostOf(m))
			}
		}

		By("remediating the Machine on the iDRAC: the power cycle goes out without If-Match")
		var idrac corev1.ObjectReference
		for _, m := range b.machines("media") {
			if b.hostOf(m) == b.fleet.Servers[1].ID() {
				idrac = corev1.ObjectReference{Name: m.Name}
				idrac.FieldPath = m.Status.NodeRef.Name
			}
		}
		Expect(idrac.Name).NotTo(BeEmpty(), "no Machine on the iDRAC9 host\n%s", b.dump())
		server := b.fleet.Servers[1]
		bootsBefore := server.Stats().Boots
		createRebootMHC(b, "media")
		markNodeNotReady(idrac.FieldPath)
		Eventually(func(g Gomega) {
			rr := &infrav1.RedfishRemediation{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: idrac.Name}, rr)).To(Succeed())
			g.Expect(rr.Status.Phase).To(Equal(infrav1.RemediationCompleted), func() string { return b.dump() })
		}).Should(Succeed())
		Expect(server.Stats().Boots).To(BeNumerically(">", bootsBefore))

		By("scaling the virtual media Machines to zero: every host is erased and offered again")
		Expect(simulator.ProfileNames()).To(ConsistOf(append(media, pxe...)), "a profile the fleet does not cover")
		scale(mediaMD, 0)
		Eventually(func(g Gomega) {
			for _, h := range b.hosts() {
				if name := h.Labels[profileLabel]; contains(media, name) {
					g.Expect(h.Status.State).To(Equal(infrav1.HostStateAvailable), "host %s (%s)\n%s", h.Name, name, b.dump())
					g.Expect(conditions.IsTrue(&h, infrav1.CleanedCondition)).To(BeTrue(), "host %s (%s) not cleaned", h.Name, name)
				}
			}
		}, 3*time.Minute).Should(Succeed())
		for i, s := range b.fleet.Servers {
			if contains(media, names[i]) && i != 0 {
				Expect(s.DriveErasures()).NotTo(BeEmpty(), "%s (%s) was not erased", s.ID(), names[i])
			}
			Expect(s.Stats().IfMatchOnActions).To(BeZero(), "%s (%s) got actions with If-Match", s.ID(), names[i])
		}
	})
})

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
