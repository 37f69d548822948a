package e2e

import (
	"maps"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/exp/controllers/maintenance"
)

var _ = Describe("A maintenance in mode Reuse", func() {
	It("drains the Machine, holds its host through a pre-terminate hook while the work runs, then boots the replacement on the same host with its disks kept", Label("maintenance-reuse"), func() {
		// The control plane's server, the worker's, and a spare the replacement must not take.
		b, _ := clusterWithWorkers("mreuse", 3, 1)
		machine := b.machines("workers")[0]
		host := b.hostOf(machine)
		server := b.server(host)
		erasures := maps.Clone(server.DriveErasures())
		cp := &clusterv1.MachineList{}
		Expect(env.List(ctx, cp, client.InNamespace(b.ns), client.HasLabels{clusterv1.MachineControlPlaneLabel})).To(Succeed())
		cpHost := b.hostOf(cp.Items[0])

		m := &expv1.RedfishMaintenance{
			ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "bios-reflash"},
			Spec: expv1.RedfishMaintenanceSpec{HostName: host, Reason: "reflash the BIOS", Requestor: "fleet-ops",
				Policy: expv1.Enforced, Mode: expv1.Reuse, Tasks: []expv1.MaintenanceTask{holdPower}},
		}
		Expect(env.Create(ctx, m)).To(Succeed())

		By("the Machine drained and waiting on the hook, its host still claimed by it and held off")
		b.waitStage("bios-reflash", expv1.StageInMaintenance)
		Eventually(server.PowerState).Should(Equal("Off"))
		held := func(g Gomega) {
			old := &clusterv1.Machine{}
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(&machine), old)).To(Succeed())
			g.Expect(old.DeletionTimestamp.IsZero()).To(BeFalse())
			g.Expect(old.Annotations).To(HaveKeyWithValue(maintenance.ReuseHook(m), string(m.UID)))
			h := &infrav1.RedfishHost{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: host}, h)).To(Succeed())
			g.Expect(h.Status.Claim).NotTo(BeNil())
			g.Expect(h.Status.Claim.Consumer.Name).To(Equal(machine.Spec.InfrastructureRef.Name))
			g.Expect(server.PowerState()).To(Equal("Off"))
			// CAPI's MachineSet replaces a Machine once it is gone, not while it is being deleted: the
			// spare stays free.
			g.Expect(b.machines("workers")).To(ConsistOf(HaveField("UID", machine.UID)))
			for _, o := range b.hosts() {
				if o.Name != host && o.Name != cpHost {
					g.Expect(o.Status.Claim).To(BeNil(), "the spare %s was claimed", o.Name)
				}
			}
		}
		Eventually(held).Should(Succeed())
		Consistently(held, 3*time.Second).Should(Succeed())

		By("the work completed: the replacement runs on the same host, whose drives were not erased")
		b.complete("bios-reflash")
		b.waitStage("bios-reflash", expv1.StageCompleted)
		b.waitRunning("workers", 1)
		replacement := b.machines("workers")[0]
		Expect(replacement.UID).NotTo(Equal(machine.UID))
		Expect(b.hostOf(replacement)).To(Equal(host))
		Expect(server.DriveErasures()).To(Equal(erasures))
	})
})
