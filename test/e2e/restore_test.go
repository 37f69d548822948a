package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/claim"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/sample"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

var _ = Describe("Restore order", Label("restore-order"), func() {
	It("neither offers nor powers off a running host recreated before its machine, while another Machine waits for a host", func() {
		b := newBed("restore", 2, nil)
		b.waitHostsAvailable(2)
		b.createCluster("restore")
		running := b.controlPlane()
		spare := ""
		for _, h := range b.hosts() {
			if h.Name != running {
				spare = h.Name
			}
		}
		server := b.server(running)
		boots := server.Stats().Boots

		By("a Machine of another cluster waiting for a host (the spare is cordoned)")
		h := &infrav1.RedfishHost{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: spare}, h)).To(Succeed())
		before := h.DeepCopy()
		h.Spec.Cordon = &infrav1.Cordon{Reason: "keep it out of this test", Requestor: "test"}
		Expect(env.Patch(ctx, h, client.MergeFrom(before))).To(Succeed())
		rc, other := sample.Cluster(b.ns, "other", "10.0.0.11")
		Expect(env.Create(ctx, rc)).To(Succeed())
		Expect(env.Create(ctx, other)).To(Succeed())
		Expect(env.CreateKubeconfigSecret(ctx, other)).To(Succeed())
		data, waiting, m := sample.ControlPlane(b.ns, "other", b.ns+"-other-cp")
		createWaiting(waiting, data, waiting, m)

		By("the running host's RedfishMachine gone and the host recreated without status before it")
		b.setPaused(true)
		rms := &infrav1.RedfishMachineList{}
		Expect(env.List(ctx, rms, client.InNamespace(b.ns), client.MatchingLabels{clusterv1.ClusterNameLabel: b.cluster.Name})).To(Succeed())
		Expect(rms.Items).To(HaveLen(1))
		rm := rms.Items[0].DeepCopy()
		Expect(env.Get(ctx, client.ObjectKeyFromObject(rm), rm)).To(Succeed())
		patch := client.MergeFrom(rm.DeepCopy())
		rm.Finalizers = nil
		Expect(env.Patch(ctx, rm, patch)).To(Succeed())
		Expect(client.IgnoreNotFound(env.Delete(ctx, rm))).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(env.Get(ctx, client.ObjectKeyFromObject(rm), &infrav1.RedfishMachine{}))
		}).Should(BeTrue())
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: running}, h)).To(Succeed())
		recreate(h, &infrav1.RedfishHost{Spec: h.Spec})
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: running}, h)).To(Succeed())
			g.Expect(h.Status.Inventory).NotTo(BeNil(), "the recreated host registers and is inspected")
		}).Should(Succeed())

		Consistently(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: running}, h)).To(Succeed())
			g.Expect(h.Status.State).NotTo(Equal(infrav1.HostStateAvailable), "a running host was offered")
			g.Expect(h.Status.Claim).To(BeNil(), "a running host was claimed by another machine")
			g.Expect(server.PowerState()).To(Equal(simulator.PowerOn))
		}, 5*time.Second, 100*time.Millisecond).Should(Succeed())
		Expect(h.Status.RestoreWaitSince).NotTo(BeNil())

		By("the machine recreated: it gets its running host back, nothing booted")
		fresh := &infrav1.RedfishMachine{Spec: rm.Spec}
		fresh.SetNamespace(rm.Namespace)
		fresh.SetName(rm.Name)
		fresh.SetLabels(rm.Labels)
		fresh.SetAnnotations(rm.Annotations)
		fresh.SetOwnerReferences(rm.OwnerReferences)
		Expect(env.Create(ctx, fresh)).To(Succeed())
		b.setPaused(false)
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: running}, h)).To(Succeed())
			g.Expect(h.Status.State).To(Equal(infrav1.HostStateProvisioned), b.dump)
			g.Expect(h.Status.Claim).NotTo(BeNil())
			g.Expect(h.Status.Claim.Consumer.Name).To(Equal(rm.Name))
		}).Should(Succeed())
		Expect(server.Stats().Boots).To(Equal(boots), "the running server booted again")
		Expect(server.Stats().Resets).NotTo(HaveKey("ForceOff"))
		Expect(server.PowerState()).To(Equal(simulator.PowerOn))
		Expect(env.Get(ctx, client.ObjectKeyFromObject(waiting), waiting)).To(Succeed())
		Expect(waiting.Status.HostRef).To(BeEmpty(), "the waiting machine took a host")
	})
})

// A host recreated without status (a backup restored, `clusterctl move`) keeps what its disks
// hold in mind through its record (annotations, which both carry): reserved for a nodeReuse owner,
// it is reserved again; claimed by a machine that is gone, it is powered off and erased before
// anyone may claim it. A Machine of another cluster waits all along and gets neither unerased.
var _ = Describe("Restore of reserved and claimed hosts", Label("restore-reserved", "providerid-create"), func() {
	It("offers a restored host to no other owner while reserved, and erases one whose machine is gone before it is claimed", func() {
		b := newBed("resres", 3, nil)
		b.waitHostsAvailable(3)
		b.createCluster("resres")
		cp := b.controlPlane()
		b.template("workers", infrav1.RedfishMachineSpec{NodeReuse: true, AutomatedCleaningMode: infrav1.CleaningModeDisabled})
		md := b.machineDeployment("workers", "workers", 1)
		b.waitRunning("workers", 1)
		reserved := b.hostOf(b.machines("workers")[0])
		spare := ""
		for _, h := range b.hosts() {
			if h.Name != cp && h.Name != reserved {
				spare = h.Name
			}
		}

		By("the worker scaled away: its host released uncleaned, reserved for the MachineDeployment, the reservation recorded")
		Expect(env.Get(ctx, client.ObjectKeyFromObject(md), md)).To(Succeed())
		before := md.DeepCopy()
		md.Spec.Replicas = ptr.To[int32](0)
		Expect(env.Patch(ctx, md, client.MergeFrom(before))).To(Succeed())
		h := &infrav1.RedfishHost{}
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: reserved}, h)).To(Succeed())
			g.Expect(h.Status.State).To(Equal(infrav1.HostStateAvailable))
			g.Expect(h.Status.ReservedFor).NotTo(BeNil())
			g.Expect(h.Annotations).To(HaveKeyWithValue(infrav1.HostReservedForAnnotation, ContainSubstring(`"name":"workers"`)))
		}, 2*time.Minute).Should(Succeed())

		By("a new RedfishMachine naming the reserved host in its providerID being refused at admission, as a template with one")
		thief := &infrav1.RedfishMachine{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "thief"},
			Spec: infrav1.RedfishMachineSpec{Image: &infrav1.Image{URL: "http://images.example/x.iso"}, ProviderID: claim.ProviderID(b.ns, reserved, "thief")}}
		Expect(env.Create(ctx, thief)).To(MatchError(And(ContainSubstring("spec.providerID"), ContainSubstring("does not name this machine"))))
		tmpl := sample.MachineTemplate(b.ns, "thief", thief.Spec)
		Expect(env.Create(ctx, tmpl)).To(MatchError(ContainSubstring("spec.template.spec.providerID")))

		By("a Machine of another cluster waiting for a host (the spare is cordoned)")
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: spare}, h)).To(Succeed())
		cordon := h.DeepCopy()
		h.Spec.Cordon = &infrav1.Cordon{Reason: "keep it out of this test", Requestor: "test"}
		Expect(env.Patch(ctx, h, client.MergeFrom(cordon))).To(Succeed())
		rc, other := sample.Cluster(b.ns, "other", "10.0.0.12")
		Expect(env.Create(ctx, rc)).To(Succeed())
		Expect(env.Create(ctx, other)).To(Succeed())
		Expect(env.CreateKubeconfigSecret(ctx, other)).To(Succeed())
		data, waiting, m := sample.ControlPlane(b.ns, "other", b.ns+"-other-cp")
		createWaiting(waiting, data, waiting, m)

		By("the reserved host recreated without status: reserved again, not offered to the waiting Machine, not erased")
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: reserved}, h)).To(Succeed())
		recreate(h, &infrav1.RedfishHost{Spec: h.Spec})
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: reserved}, h)).To(Succeed())
			g.Expect(h.Status.Inventory).NotTo(BeNil(), "the recreated host registers and is inspected")
			g.Expect(h.Status.ReservedFor).NotTo(BeNil(), b.dump)
			g.Expect(h.Status.ReservedFor.Name).To(Equal("workers"))
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: reserved}, h)).To(Succeed())
			g.Expect(h.Status.Claim).To(BeNil(), "a restored reserved host was claimed by another owner")
		}, 5*time.Second, 100*time.Millisecond).Should(Succeed())
		Expect(erasures(b.server(reserved))).To(BeZero(), "a reserved host whose owner exists was erased")

		By("the control plane's host recreated without status while its machine is gone: held, then powered off and erased before the waiting Machine gets it")
		b.setPaused(true)
		b.forceRemoveMachineOf(cp)
		cpServer := b.server(cp)
		Expect(cpServer.PowerState()).To(Equal(simulator.PowerOn))
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: cp}, h)).To(Succeed())
		Expect(h.Annotations).To(HaveKey(infrav1.HostClaimedByAnnotation))
		b.setPaused(false) // the machine is gone for good, not being moved: the grace period runs
		recreate(h, &infrav1.RedfishHost{Spec: h.Spec})
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(waiting), waiting)).To(Succeed())
			g.Expect(waiting.Status.HostRef).To(Equal(cp), b.dump)
		}, restoreGracePeriod+time.Minute).Should(Succeed())
		Expect(erasures(cpServer)).To(BeNumerically(">", 0), "the host was claimed before its previous machine's disks were erased")
		Expect(cpServer.Stats().Resets).To(HaveKey("ForceOff"), "the host was not powered off before its erase")

		By("the reservation's owner deleted: the restored reserved host is erased before it is offered")
		b.setPaused(false) // a paused cluster's MachineDeployment is not deleted
		Expect(env.Delete(ctx, md)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: reserved}, h)).To(Succeed())
			g.Expect(h.Status.ReservedFor).To(BeNil())
			g.Expect(h.Status.State).To(Equal(infrav1.HostStateAvailable))
			g.Expect(erasures(b.server(reserved))).To(BeNumerically(">", 0))
		}, time.Minute).Should(Succeed())
	})
})

// erasures is how many drive erasures a server has carried out.
func erasures(s *simulator.Server) int {
	n := 0
	for _, c := range s.DriveErasures() {
		n += c
	}
	return n
}
