package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
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
