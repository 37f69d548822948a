package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// Objects whose counterpart vanished converge instead of sticking: a machine that lost its host
// says ClaimLost (the reconcile used to panic every round on it), a RedfishMachine whose Machine
// was force-removed finishes deleting, and a host deleted after its machine was force-removed is
// released (off, erased) and goes.
var _ = Describe("Stuck objects", Label("claim-lost", "machine-gone"), func() {
	It("reports a lost claim without a panic, and finishes deleting a machine whose Machine is gone and a host whose machine is gone", func() {
		b := newBed("stuck", 2, nil)
		b.waitHostsAvailable(2)
		b.createCluster("stuck")
		cp := b.controlPlane()
		b.template("workers", infrav1.RedfishMachineSpec{})
		b.machineDeployment("workers", "workers", 1)
		b.waitRunning("workers", 1)
		worker := b.machines("workers")[0]
		workerHost := b.hostOf(worker)
		panicsBefore := reconcilePanics()

		By("the worker's host re-registered by hand (recreated without status or record): the machine says ClaimLost, nothing panics")
		h := &infrav1.RedfishHost{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: workerHost}, h)).To(Succeed())
		// Without the annotations a move or backup keeps: re-registered by hand.
		recreate(h, &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}, Spec: h.Spec})
		rm := &infrav1.RedfishMachine{}
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: worker.Spec.InfrastructureRef.Name}, rm)).To(Succeed())
			c := conditions.Get(rm, infrav1.HostClaimedCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal("ClaimLost"), b.dump)
		}).Should(Succeed())
		Expect(reconcilePanics()).To(Equal(panicsBefore), "a reconcile panicked")

		By("the worker Machine force-removed (its finalizers dropped): its RedfishMachine finishes deleting")
		m := worker.DeepCopy()
		forceRemove(m)
		Eventually(func() bool {
			return apierrors.IsNotFound(env.Get(ctx, client.ObjectKeyFromObject(m), &clusterv1.Machine{}))
		}).Should(BeTrue())
		Expect(client.IgnoreNotFound(env.Delete(ctx, rm))).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(env.Get(ctx, client.ObjectKeyFromObject(rm), &infrav1.RedfishMachine{}))
		}).
			Should(BeTrue(), "a RedfishMachine whose Machine is gone never finished deleting")

		By("the control plane's RedfishMachine force-removed, then its host deleted: the host is released (off, erased) and goes")
		b.forceRemoveMachineOf(cp)
		server := b.server(cp)
		Expect(server.PowerState()).To(Equal(simulator.PowerOn))
		cpHost := &infrav1.RedfishHost{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: cp}, cpHost)).To(Succeed())
		Expect(env.Delete(ctx, cpHost)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(env.Get(ctx, client.ObjectKeyFromObject(cpHost), cpHost)) }, time.Minute).
			Should(BeTrue(), "a host whose machine is gone never finished deleting")
		Expect(server.PowerState()).To(Equal(simulator.PowerOff))
		Expect(erasures(server)).To(BeNumerically(">", 0), "the host went without erasing its machine's disks")
	})
})

// reconcilePanics is how many reconciles of every controller in this process have panicked.
func reconcilePanics() float64 {
	GinkgoHelper()
	families, err := ctrlmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	n := 0.0
	for _, f := range families {
		if f.GetName() == "controller_runtime_reconcile_panics_total" {
			for _, m := range f.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
