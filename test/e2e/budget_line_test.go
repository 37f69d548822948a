package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/exp/controllers/maintenance"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/sample"
)

var _ = Describe("A policy's line", func() {
	It("is not held by a maintenance its own MachineDeployment refuses: another cluster's maintenance behind it starts", Label("budget-line"), func() {
		// Hosts 0-1: the control planes; 2: the only one cluster alpha's workers may take (its
		// MachineDeployment of 2 stays short); 3-5: beta's two workers and a spare.
		pools := []string{"cp", "cp", "alpha", "beta", "beta", "beta"}
		b := startBed("budgetline", len(pools), bedOptions{withOS: true, mutate: func(i int, h *infrav1.RedfishHost) {
			h.Labels = map[string]string{"pool": pools[i]}
		}})
		b.waitHostsAvailable(6)
		for _, name := range []string{"alpha", "beta"} {
			rc, c := sample.Cluster(b.ns, name, "10.0.0.10")
			Expect(env.Create(ctx, rc)).To(Succeed())
			Expect(env.Create(ctx, c)).To(Succeed())
			Expect(env.CreateKubeconfigSecret(ctx, c)).To(Succeed())
			data, rm, m := sample.ControlPlane(b.ns, name, b.ns+"-"+name+"-cp")
			rm.Spec.HostSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "cp"}}
			for _, o := range []client.Object{data, rm, m} {
				Expect(env.Create(ctx, o)).To(Succeed())
			}
			Eventually(func(g Gomega) {
				g.Expect(env.Get(ctx, client.ObjectKeyFromObject(c), c)).To(Succeed())
				g.Expect(conditions.IsTrue(c, clusterv1.ClusterControlPlaneInitializedCondition)).To(BeTrue(), func() string { return b.dump() })
			}, 3*time.Minute).Should(Succeed())
			b.template(name+"-workers", infrav1.RedfishMachineSpec{HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": name}}})
			data, md := sample.MachineDeployment(b.ns, name, name+"-workers", name+"-workers", 2, 0, 1)
			Expect(env.Create(ctx, data)).To(Succeed())
			Expect(env.Create(ctx, md)).To(Succeed())
		}
		b.waitRunning("beta-workers", 2)
		Eventually(func(g Gomega) {
			running := 0
			for _, m := range b.machines("alpha-workers") {
				if m.Status.Phase == string(clusterv1.MachinePhaseRunning) {
					running++
				}
			}
			g.Expect(running).To(Equal(1), "alpha has one worker running, its second waits for a host")
		}, 3*time.Minute).Should(Succeed())
		Expect(env.Create(ctx, &expv1.RedfishMaintenancePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "all"},
			Spec: expv1.RedfishMaintenancePolicySpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}})).To(Succeed())

		var alphaHost, betaHost string
		for _, m := range b.machines("alpha-workers") {
			if m.Status.Phase == string(clusterv1.MachinePhaseRunning) {
				alphaHost = b.hostOf(m)
			}
		}
		betaHost = b.hostOf(b.machines("beta-workers")[0])
		// First in line: higher priority, and older.
		b.firmwareMaintenance("alpha-fix", alphaHost, 10)
		Eventually(func(g Gomega) {
			m := b.maintenanceNamed("alpha-fix")
			g.Expect(m.Status.Stage).To(Equal(expv1.StageApproved))
			g.Expect(conditions.GetReason(m, infrav1.ReadyCondition)).To(Equal(maintenance.WaitingForMachineDeploymentReason), describeMaintenance(m))
		}).Should(Succeed())
		b.firmwareMaintenance("beta-fix", betaHost, 0)
		b.waitStage("beta-fix", expv1.StageCompleted)
		m := b.maintenanceNamed("alpha-fix")
		Expect(m.Status.Stage).To(Equal(expv1.StageApproved), "alpha's maintenance waits for its MachineDeployment")
		// Its next round, once beta's end freed the budget, says what it waits for now.
		Eventually(func(g Gomega) {
			m := b.maintenanceNamed("alpha-fix")
			g.Expect(m.Status.Stage).To(Equal(expv1.StageApproved), "alpha's maintenance waits for its MachineDeployment")
			g.Expect(conditions.GetReason(m, infrav1.ReadyCondition)).To(Equal(maintenance.WaitingForMachineDeploymentReason), describeMaintenance(m))
		}).Should(Succeed())
	})
})
