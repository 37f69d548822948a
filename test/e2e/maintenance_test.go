package e2e

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

func (b *bed) maintenance(name, host string, policy expv1.MaintenancePolicy, tasks ...expv1.MaintenanceTask) *expv1.RedfishMaintenance {
	GinkgoHelper()
	m := &expv1.RedfishMaintenance{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: name},
		Spec: expv1.RedfishMaintenanceSpec{HostName: host, Reason: "replace a failing DIMM", Requestor: "fleet-ops",
			Policy: policy, Tasks: tasks},
	}
	Expect(env.Create(ctx, m)).To(Succeed())
	return m
}

// maintenanceNamed reads a maintenance (waiting out the client's cache right after a create).
func (b *bed) maintenanceNamed(name string) *expv1.RedfishMaintenance {
	GinkgoHelper()
	m := &expv1.RedfishMaintenance{}
	Eventually(func() error { return env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: name}, m) }).Should(Succeed())
	return m
}

func (b *bed) waitStage(name string, stage expv1.MaintenanceStage) *expv1.RedfishMaintenance {
	GinkgoHelper()
	var m *expv1.RedfishMaintenance
	Eventually(func(g Gomega) {
		m = &expv1.RedfishMaintenance{}
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: name}, m)).To(Succeed())
		g.Expect(m.Status.Stage).To(Equal(stage), func() string { return "maintenance " + name + ": " + describeMaintenance(m) + "\n" + b.dump() })
	}, 2*time.Minute).Should(Succeed())
	return m
}

func describeMaintenance(m *expv1.RedfishMaintenance) string {
	c := conditions.Get(m, infrav1.ReadyCondition)
	if c == nil {
		return string(m.Status.Stage)
	}
	return string(m.Status.Stage) + " " + c.Reason + ": " + c.Message
}

// clusterBed registers servers, waits until they are Available, and creates a Cluster with a
// control-plane Machine and a workers template.
func clusterBed(name string, servers int) *bed {
	GinkgoHelper()
	b := newBed(name, servers, nil)
	b.waitHostsAvailable(servers)
	b.createCluster(name)
	b.controlPlane()
	b.template("workers", infrav1.RedfishMachineSpec{})
	return b
}

// clusterWithWorkers is clusterBed with a MachineDeployment workers of n Running Machines.
func clusterWithWorkers(name string, servers int, workers int32) (*bed, *clusterv1.MachineDeployment) {
	GinkgoHelper()
	b := clusterBed(name, servers)
	md := b.machineDeployment("workers", "workers", workers)
	b.waitRunning("workers", int(workers))
	return b, md
}

// runningPod creates a pod bound to a Node and reports it Running and Ready, as the Node's kubelet
// would. It ends at once when deleted (no grace period): there is no kubelet to stop it.
func (b *bed) runningPod(name, node string, labels map[string]string) *corev1.Pod {
	GinkgoHelper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To(int64(0)),
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
	Expect(env.Create(ctx, pod)).To(Succeed())
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	Expect(env.Status().Update(ctx, pod)).To(Succeed())
	return pod
}

var holdPower = expv1.MaintenanceTask{PowerOffAndHold: &expv1.PowerOffAndHold{}}

var _ = Describe("The maintenance handshake", func() {
	It("waits for the owner's approval of this very maintenance, then CAPI drains and replaces the Machine elsewhere and the host returns to the pool", Label("maintenance-approval"), func() {
		b, _ := clusterWithWorkers("mapprove", 4, 1)
		machine := b.machines("workers")[0]
		host := b.hostOf(machine)

		m := b.maintenance("dimm-swap", host, expv1.OwnerApproval, holdPower)
		By("the maintenance being announced on the RedfishMachine, with what to quote to approve it")
		rm := &infrav1.RedfishMachine{}
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: machine.Spec.InfrastructureRef.Name}, rm)).To(Succeed())
			g.Expect(rm.Status.Maintenances).To(ConsistOf(And(HaveField("Name", "dimm-swap"), HaveField("UID", string(m.UID)),
				HaveField("Reason", "replace a failing DIMM"), HaveField("Policy", "OwnerApproval"))))
			g.Expect(conditions.IsTrue(rm, infrav1.MaintenancePlannedCondition)).To(BeTrue())
		}).Should(Succeed())
		By("the Node in the workload cluster carrying the KEP-5683 condition")
		Eventually(func(g Gomega) {
			node := &corev1.Node{}
			g.Expect(env.Get(ctx, client.ObjectKey{Name: machine.Status.NodeRef.Name}, node)).To(Succeed())
			g.Expect(node.Status.Conditions).To(ContainElement(And(HaveField("Type", maintenance.NodeMaintenancePlanned),
				HaveField("Status", corev1.ConditionTrue), HaveField("Message", ContainSubstring("replace a failing DIMM")))))
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			got := b.maintenanceNamed("dimm-swap")
			g.Expect(got.Status.Stage).To(Equal(expv1.StageAnnounced))
			g.Expect(conditions.GetReason(got, infrav1.ReadyCondition)).To(Equal(maintenance.WaitingForApprovalReason))
			g.Expect(b.machines("workers")).To(ConsistOf(HaveField("Name", machine.Name)))
		}, 3*time.Second).Should(Succeed())

		By("an approval for another maintenance (a wrong UID) being refused at admission")
		before := rm.DeepCopy()
		rm.Spec.MaintenanceApprovals = []infrav1.MaintenanceApproval{{Name: "dimm-swap", UID: "00000000-0000-0000-0000-000000000000"}}
		Expect(env.Patch(ctx, rm, client.MergeFrom(before))).To(MatchError(ContainSubstring("this approval is for another maintenance")))

		By("a pod on the Node that a PodDisruptionBudget protects (the only healthy one of its app)")
		Expect(env.Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "web"},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		})).To(Succeed())
		webOnHost := b.runningPod("web-0", machine.Status.NodeRef.Name, map[string]string{"app": "web"})

		By("the owner approving it by name and UID")
		Expect(env.Get(ctx, client.ObjectKeyFromObject(rm), rm)).To(Succeed())
		before = rm.DeepCopy()
		rm.Spec.MaintenanceApprovals = []infrav1.MaintenanceApproval{{Name: "dimm-swap", UID: string(m.UID)}}
		Expect(env.Patch(ctx, rm, client.MergeFrom(before))).To(Succeed())

		By("CAPI draining the Node: the eviction refused while it would break the PodDisruptionBudget")
		blocked := func(g Gomega) {
			got := &clusterv1.Machine{}
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(&machine), got)).To(Succeed())
			g.Expect(got.DeletionTimestamp.IsZero()).To(BeFalse(), "the Machine is not being deleted")
			g.Expect(conditions.Get(got, clusterv1.MachineDeletingCondition)).To(And(Not(BeNil()),
				HaveField("Message", ContainSubstring("violate the pod's disruption budget"))))
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(webOnHost), &corev1.Pod{})).To(Succeed())
			g.Expect(b.maintenanceNamed("dimm-swap").Status.Stage).To(Equal(expv1.StageDraining))
			// The Node tells the cluster the maintenance is under way (KEP-5683), no longer planned.
			node := &corev1.Node{}
			g.Expect(env.Get(ctx, client.ObjectKey{Name: machine.Status.NodeRef.Name}, node)).To(Succeed())
			g.Expect(node.Status.Conditions).To(ContainElements(
				And(HaveField("Type", maintenance.NodeMaintenanceInProgress), HaveField("Status", corev1.ConditionTrue),
					HaveField("Message", ContainSubstring("replace a failing DIMM"))),
				And(HaveField("Type", maintenance.NodeMaintenancePlanned), HaveField("Status", corev1.ConditionFalse))))
		}
		Eventually(blocked).Should(Succeed())
		Consistently(blocked, 3*time.Second).Should(Succeed())
		By("a second healthy pod of the app elsewhere: the eviction goes through")
		cpMachines := &clusterv1.MachineList{}
		Expect(env.List(ctx, cpMachines, client.InNamespace(b.ns), client.HasLabels{clusterv1.MachineControlPlaneLabel})).To(Succeed())
		b.runningPod("web-1", cpMachines.Items[0].Status.NodeRef.Name, map[string]string{"app": "web"})
		Eventually(func() bool {
			return apierrors.IsNotFound(env.Get(ctx, client.ObjectKeyFromObject(webOnHost), &corev1.Pod{}))
		}).Should(BeTrue(), "the protected pod was never evicted")

		By("CAPI deleting the Machine, the MachineSet replacing it on another host")
		Eventually(func(g Gomega) {
			err := env.Get(ctx, client.ObjectKeyFromObject(&machine), &clusterv1.Machine{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Machine %s still exists", machine.Name)
		}, 2*time.Minute).Should(Succeed())
		b.waitRunning("workers", 1)
		replacement := b.machines("workers")[0]
		Expect(b.hostOf(replacement)).NotTo(Equal(host), "the replacement landed on the host in maintenance")

		By("the work (the host held off) and its completion: the host returns to the pool")
		held := b.waitStage("dimm-swap", expv1.StageInMaintenance)
		Eventually(b.server(host).PowerState).Should(Equal("Off"))
		heldBefore := held.DeepCopy()
		held.Spec.Complete = true
		Expect(env.Patch(ctx, held, client.MergeFrom(heldBefore))).To(Succeed())
		done := b.waitStage("dimm-swap", expv1.StageCompleted)
		Expect(done.Status.ApprovedBy).To(Equal("Owner"))
		var stages []expv1.MaintenanceStage
		for _, s := range done.Status.Stages {
			stages = append(stages, s.Stage)
		}
		Expect(stages).To(Equal([]expv1.MaintenanceStage{expv1.StagePending, expv1.StageAnnounced, expv1.StageApproved,
			expv1.StageDraining, expv1.StageInMaintenance, expv1.StageCompleted}))
		Eventually(func(g Gomega) {
			h := &infrav1.RedfishHost{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: host}, h)).To(Succeed())
			g.Expect(h.Status.State).To(Equal(infrav1.HostStateAvailable))
			g.Expect(h.Spec.RebootRequests).To(BeEmpty())
		}).Should(Succeed())
		By("the old approval approving neither a deleted maintenance nor one recreated under its name")
		Expect(env.Delete(ctx, done)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(env.Get(ctx, client.ObjectKeyFromObject(done), &expv1.RedfishMaintenance{}))
		}).Should(BeTrue())
		replacementRM := &infrav1.RedfishMachine{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: replacement.Spec.InfrastructureRef.Name}, replacementRM)).To(Succeed())
		before = replacementRM.DeepCopy()
		replacementRM.Spec.MaintenanceApprovals = []infrav1.MaintenanceApproval{{Name: "dimm-swap", UID: string(m.UID)}}
		Expect(env.Patch(ctx, replacementRM, client.MergeFrom(before))).To(MatchError(ContainSubstring("no RedfishMaintenance dimm-swap")))
		recreated := b.maintenance("dimm-swap", b.hostOf(replacement), expv1.OwnerApproval)
		Expect(recreated.UID).NotTo(Equal(m.UID))
		Expect(env.Patch(ctx, replacementRM, client.MergeFrom(before))).To(MatchError(ContainSubstring("this approval is for another maintenance")))

		By("an approval of another host's maintenance, and approvals in a template, being refused")
		other := b.maintenance("other-host", host, expv1.OwnerApproval)
		replacementRM.Spec.MaintenanceApprovals = []infrav1.MaintenanceApproval{{Name: other.Name, UID: string(other.UID)}}
		Expect(env.Patch(ctx, replacementRM, client.MergeFrom(before))).To(MatchError(ContainSubstring("not for this machine's host")))
		bad := sample.MachineTemplate(b.ns, "with-approval", infrav1.RedfishMachineSpec{MaintenanceApprovals: []infrav1.MaintenanceApproval{{Name: "x", UID: "y"}}})
		Expect(env.Create(ctx, bad)).To(MatchError(ContainSubstring("approvals are given on a RedfishMachine")))

		By("a Machine nothing would replace (the standalone control plane) never being deleted")
		cp := &clusterv1.MachineList{}
		Expect(env.List(ctx, cp, client.InNamespace(b.ns), client.HasLabels{clusterv1.MachineControlPlaneLabel})).To(Succeed())
		Expect(cp.Items).To(HaveLen(1))
		b.maintenance("cp-psu", b.hostOf(cp.Items[0]), expv1.Enforced)
		standalone := func(g Gomega) {
			got := b.maintenanceNamed("cp-psu")
			g.Expect(conditions.GetReason(got, infrav1.ReadyCondition)).To(Equal(maintenance.NotReplaceableReason))
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(&cp.Items[0]), &clusterv1.Machine{})).To(Succeed())
		}
		Eventually(standalone).Should(Succeed())
		Consistently(standalone, 2*time.Second).Should(Succeed())
	})

	It("approves a maintenance CAPI-natively when a scale-down deletes the Machine anyway, and the host goes into maintenance instead of back to the pool", Label("maintenance-capi-native"), func() {
		// Two servers: the control plane's and one worker's; no spare.
		b, md := clusterWithWorkers("mnative", 2, 1)
		host := b.hostOf(b.machines("workers")[0])
		b.maintenance("nic-swap", host, expv1.OwnerApproval, holdPower)
		b.waitStage("nic-swap", expv1.StageAnnounced)

		scale(md, 0)
		m := b.waitStage("nic-swap", expv1.StageInMaintenance)
		Expect(m.Status.ApprovedBy).To(BeElementOf("MachineDeleted", "Unclaimed"))
		By("the host, released by CAPI, being held instead of offered again: a new worker waits")
		scale(md, 1)
		Eventually(func(g Gomega) { g.Expect(b.machines("workers")).To(HaveLen(1)) }).Should(Succeed())
		Consistently(func(g Gomega) {
			h := &infrav1.RedfishHost{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: host}, h)).To(Succeed())
			g.Expect(h.Status.Claim).To(BeNil(), "the held host was claimed")
		}, 3*time.Second).Should(Succeed())
		By("completing the maintenance: the waiting worker gets the host")
		before := m.DeepCopy()
		m.Spec.Complete = true
		Expect(env.Patch(ctx, m, client.MergeFrom(before))).To(Succeed())
		b.waitRunning("workers", 1)
		Expect(b.hostOf(b.machines("workers")[0])).To(Equal(host))
	})

	It("runs one maintenance at a time among hosts no policy selects", Label("maintenance-default-budget"), func() {
		b := newBedWithoutOS("mdefault", 2)
		b.waitHostsAvailable(2)
		hosts := b.hosts()
		b.maintenance("first", hosts[0].Name, expv1.Enforced, holdPower)
		b.waitStage("first", expv1.StageInMaintenance)
		b.maintenance("second", hosts[1].Name, expv1.Enforced, holdPower)
		waits := func(g Gomega) {
			m := b.maintenanceNamed("second")
			g.Expect(m.Status.Stage).To(Equal(expv1.StageApproved))
			g.Expect(conditions.Get(m, infrav1.ReadyCondition)).To(And(Not(BeNil()), HaveField("Reason", maintenance.WaitingForBudgetReason),
				HaveField("Message", ContainSubstring("No RedfishMaintenancePolicy selects"))))
		}
		Eventually(waits).Should(Succeed())
		Consistently(waits, 2*time.Second).Should(Succeed())
		first := b.maintenanceNamed("first")
		before := first.DeepCopy()
		first.Spec.Complete = true
		Expect(env.Patch(ctx, first, client.MergeFrom(before))).To(Succeed())
		b.waitStage("second", expv1.StageInMaintenance)
	})

	It("does not take a host, even approved, while its MachineDeployment rolls out", Label("maintenance-rollout"), func() {
		b := clusterBed("mrollout", 4)
		// maxSurge 1, maxUnavailable 0: the rollout deletes no old Machine before a new one runs.
		data, md := sample.MachineDeployment(b.ns, b.cluster.Name, "workers", "workers", 2, 1, 0)
		Expect(env.Create(ctx, data)).To(Succeed())
		Expect(env.Create(ctx, md)).To(Succeed())
		b.waitRunning("workers", 2)
		machine := b.machines("workers")[0]
		host := b.hostOf(machine)
		By("a rollout that cannot finish (the new template selects no host)")
		b.template("workers-nowhere", infrav1.RedfishMachineSpec{HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "none"}}})
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(md), md)).To(Succeed())
			before := md.DeepCopy()
			md.Spec.Template.Spec.InfrastructureRef.Name = "workers-nowhere"
			md.Spec.Rollout.After = metav1.Now()
			g.Expect(env.Patch(ctx, md, client.MergeFrom(before))).To(Succeed())
		}).Should(Succeed())
		m := b.maintenance("cpu-microcode", host, expv1.OwnerApproval)
		rm := &infrav1.RedfishMachine{}
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: machine.Spec.InfrastructureRef.Name}, rm)).To(Succeed())
			g.Expect(rm.Status.Maintenances).NotTo(BeEmpty())
		}).Should(Succeed())
		before := rm.DeepCopy()
		rm.Spec.MaintenanceApprovals = []infrav1.MaintenanceApproval{{Name: m.Name, UID: string(m.UID)}}
		Expect(env.Patch(ctx, rm, client.MergeFrom(before))).To(Succeed())
		waitsForRollout := func(g Gomega) {
			got := b.maintenanceNamed("cpu-microcode")
			mdNow := &clusterv1.MachineDeployment{}
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(md), mdNow)).To(Succeed())
			g.Expect(got.Status.Stage).To(Equal(expv1.StageApproved), "MachineDeployment generation %d ref %s\n%s", mdNow.Generation, mdNow.Spec.Template.Spec.InfrastructureRef.Name, b.dump())
			g.Expect(conditions.GetReason(got, infrav1.ReadyCondition)).To(Equal(maintenance.RolloutInProgressReason))
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(&machine), &clusterv1.Machine{})).To(Succeed(), "the Machine was deleted mid-rollout")
		}
		Eventually(waitsForRollout).Should(Succeed())
		Consistently(waitsForRollout, 3*time.Second).Should(Succeed())
	})

	It("does nothing while the Cluster of the Machine is paused (clusterctl move), and goes on when it is unpaused", Label("maintenance-paused"), func() {
		b, _ := clusterWithWorkers("mpaused", 3, 1)
		machine := b.machines("workers")[0]
		b.setPaused(true)
		b.maintenance("paused-swap", b.hostOf(machine), expv1.Enforced)
		held := func(g Gomega) {
			m := &expv1.RedfishMaintenance{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: "paused-swap"}, m)).To(Succeed())
			g.Expect(conditions.IsTrue(m, clusterv1.PausedCondition)).To(BeTrue())
			got := &clusterv1.Machine{}
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(&machine), got)).To(Succeed())
			g.Expect(got.DeletionTimestamp.IsZero()).To(BeTrue(), "the Machine was deleted while its Cluster was paused")
		}
		Eventually(held).Should(Succeed())
		Consistently(held, 3*time.Second).Should(Succeed())
		b.setPaused(false)
		b.waitStage("paused-swap", expv1.StageCompleted)
		Eventually(func() bool {
			return apierrors.IsNotFound(env.Get(ctx, client.ObjectKeyFromObject(&machine), &clusterv1.Machine{}))
		}).Should(BeTrue(), "the Machine was not replaced once the Cluster was unpaused")
	})

	It("powers off and holds the host of a failed part without approval; the Machine is replaced elsewhere; a person completes it", Label("maintenance-enforced", "hardware-failure"), func() {
		b, _ := clusterWithWorkers("mhw", 4, 1)
		machine := b.machines("workers")[0]
		host := b.hostOf(machine)
		server := b.server(host)

		b.maintenance("psu-failed", host, expv1.Enforced, holdPower)
		b.waitStage("psu-failed", expv1.StageInMaintenance)
		b.waitRunning("workers", 1)
		Expect(b.hostOf(b.machines("workers")[0])).NotTo(Equal(host))
		Expect(b.maintenanceNamed("psu-failed").Status.ApprovedBy).To(Equal("Policy"))

		By("the host staying powered off and out of the pool while held")
		Eventually(server.PowerState).Should(Equal("Off"))
		scale(machineDeploymentNamed(b, "workers"), 3)
		// Two hosts are left for three workers: the held one is not among them.
		Eventually(func(g Gomega) {
			ms := b.machines("workers")
			g.Expect(ms).To(HaveLen(3))
			running := 0
			for _, m := range ms {
				if m.Status.Phase == string(clusterv1.MachinePhaseRunning) {
					running++
				}
			}
			g.Expect(running).To(Equal(2))
		}, 2*time.Minute).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(server.PowerState()).To(Equal("Off"))
			h := &infrav1.RedfishHost{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: host}, h)).To(Succeed())
			g.Expect(h.Status.Claim).To(BeNil(), "the held host was claimed")
		}, 3*time.Second).Should(Succeed())

		By("a person completing it: the hold goes and the third worker gets the host")
		m := b.maintenanceNamed("psu-failed")
		before := m.DeepCopy()
		m.Spec.Complete = true
		Expect(env.Patch(ctx, m, client.MergeFrom(before))).To(Succeed())
		b.waitStage("psu-failed", expv1.StageCompleted)
		b.waitRunning("workers", 3)
	})

	It("never lets more hosts be in maintenance than the budget allows, counting hosts already unavailable", Label("maintenance-budget-unready"), func() {
		b := newBedWithoutOS("mbudget", 5)
		b.waitHostsAvailable(5)
		one := intstr.FromInt32(1)
		policy := &expv1.RedfishMaintenancePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "rack"},
			Spec: expv1.RedfishMaintenancePolicySpec{MaxUnavailable: &one}}
		Expect(env.Create(ctx, policy)).To(Succeed())
		var peak atomic.Int32
		sampleCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			for sampleCtx.Err() == nil {
				list := &expv1.RedfishMaintenanceList{}
				if env.List(sampleCtx, list, client.InNamespace(b.ns)) == nil {
					n := int32(0)
					for _, m := range list.Items {
						if m.Status.Stage == expv1.StageDraining || m.Status.Stage == expv1.StageInMaintenance {
							n++
						}
					}
					if n > peak.Load() {
						peak.Store(n)
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
		DeferCleanup(func() { stop(); wg.Wait() })
		hosts := b.hosts()
		for i := range 3 {
			b.maintenance("fw-"+string(rune('a'+i)), hosts[i].Name, expv1.Enforced, holdPower)
		}
		b.waitStage("fw-a", expv1.StageInMaintenance)
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(policy), policy)).To(Succeed())
			g.Expect(policy.Status).To(And(HaveField("Hosts", int32(5)), HaveField("InMaintenance", int32(1)), HaveField("Unavailable", int32(1)), HaveField("WindowOpen", true)))
		}).Should(Succeed())
		othersWait := func(g Gomega) {
			for _, n := range []string{"fw-b", "fw-c"} {
				m := b.maintenanceNamed(n)
				g.Expect(m.Status.Stage).To(Equal(expv1.StageApproved))
				g.Expect(conditions.GetReason(m, infrav1.ReadyCondition)).To(Equal(maintenance.WaitingForBudgetReason))
			}
		}
		Eventually(othersWait).Should(Succeed())
		Consistently(othersWait, 2*time.Second).Should(Succeed())
		for _, n := range []string{"fw-a", "fw-b", "fw-c"} {
			b.waitStage(n, expv1.StageInMaintenance)
			m := b.maintenanceNamed(n)
			before := m.DeepCopy()
			m.Spec.Complete = true
			Expect(env.Patch(ctx, m, client.MergeFrom(before))).To(Succeed())
			b.waitStage(n, expv1.StageCompleted)
		}
		Expect(peak.Load()).To(Equal(int32(1)), "hosts in maintenance at once")

		By("a host already unavailable (BMC unreachable) using up the budget")
		unreachable := b.server(hosts[3].Name)
		unreachable.Close()
		Eventually(func(g Gomega) {
			h := &infrav1.RedfishHost{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: hosts[3].Name}, h)).To(Succeed())
			g.Expect(conditions.IsTrue(h, infrav1.ReadyCondition)).To(BeFalse())
		}, time.Minute).Should(Succeed())
		b.maintenance("fw-e", hosts[4].Name, expv1.Enforced)
		Eventually(func(g Gomega) {
			m := b.maintenanceNamed("fw-e")
			g.Expect(m.Status.Stage).To(Equal(expv1.StageApproved))
			g.Expect(conditions.Get(m, infrav1.ReadyCondition)).To(And(Not(BeNil()), HaveField("Reason", maintenance.WaitingForBudgetReason),
				HaveField("Message", ContainSubstring("1 of 5 hosts unavailable"))))
		}).Should(Succeed())
	})

	It("starts an approved maintenance only inside a window", Label("maintenance-window"), func() {
		b := newBedWithoutOS("mwindow", 1)
		b.waitHostsAvailable(1)
		// New Year's Eve at midnight in Tokyo, for one minute: closed unless the test runs then.
		policy := &expv1.RedfishMaintenancePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "new-year"},
			Spec: expv1.RedfishMaintenancePolicySpec{Windows: []expv1.MaintenanceWindow{{Start: "0 0 1 1 *", Duration: metav1.Duration{Duration: time.Minute}, TimeZone: "Asia/Tokyo"}}}}
		Expect(env.Create(ctx, policy)).To(Succeed())
		b.maintenance("bios", b.hosts()[0].Name, expv1.Enforced)
		Eventually(func(g Gomega) {
			m := b.maintenanceNamed("bios")
			g.Expect(m.Status.Stage).To(Equal(expv1.StageApproved))
			g.Expect(conditions.Get(m, infrav1.ReadyCondition)).To(And(Not(BeNil()), HaveField("Reason", maintenance.WaitingForWindowReason),
				HaveField("Message", ContainSubstring("the next window opens at"))))
		}).Should(Succeed())
		By("a window open now (every minute, for a minute) letting it start")
		Expect(env.Get(ctx, client.ObjectKeyFromObject(policy), policy)).To(Succeed())
		policy.Spec.Windows[0] = expv1.MaintenanceWindow{Start: "* * * * *", Duration: metav1.Duration{Duration: time.Minute}}
		Expect(env.Update(ctx, policy)).To(Succeed())
		b.waitStage("bios", expv1.StageCompleted)
	})

	It("fails a maintenance that outlives its timeout and keeps its host out of service until it is deleted", Label("maintenance-timeout"), func() {
		b := newBedWithoutOS("mtimeout", 1)
		b.waitHostsAvailable(1)
		host := b.hosts()[0].Name
		m := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "stuck"},
			Spec: expv1.RedfishMaintenanceSpec{HostName: host, Reason: "r", Requestor: "q", Policy: expv1.Enforced,
				Tasks: []expv1.MaintenanceTask{holdPower}, Timeout: &metav1.Duration{Duration: 3 * time.Second}}}
		Expect(env.Create(ctx, m)).To(Succeed())
		failed := b.waitStage("stuck", expv1.StageFailed)
		Expect(conditions.GetReason(failed, infrav1.ReadyCondition)).To(Equal(maintenance.TimedOutReason))
		h := &infrav1.RedfishHost{}
		Consistently(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: host}, h)).To(Succeed())
			g.Expect(h.Spec.RebootRequests).To(ContainElement(HaveField("Requestor", maintenance.RequestorPrefix+"stuck")))
		}, 2*time.Second).Should(Succeed())
		Expect(env.Delete(ctx, failed)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: host}, h)).To(Succeed())
			g.Expect(h.Spec.RebootRequests).To(BeEmpty())
		}).Should(Succeed())
	})

	It("refuses bad input with messages that say what is wrong", Label("maintenance-bad-input"), func() {
		b := newBedWithoutOS("mbad", 1)
		zero := intstr.FromInt32(0)
		for _, tc := range []struct {
			spec expv1.RedfishMaintenancePolicySpec
			want string
		}{
			{expv1.RedfishMaintenancePolicySpec{Windows: []expv1.MaintenanceWindow{{Start: "every night", Duration: metav1.Duration{Duration: time.Hour}}}}, "is not a cron schedule"},
			{expv1.RedfishMaintenancePolicySpec{Windows: []expv1.MaintenanceWindow{{Start: "0 22 * * *", Duration: metav1.Duration{Duration: time.Hour}, TimeZone: "Mars/Olympus"}}}, "timeZone"},
			{expv1.RedfishMaintenancePolicySpec{Windows: []expv1.MaintenanceWindow{{Start: "0 22 * * *", Duration: metav1.Duration{Duration: -time.Hour}}}}, "must be positive"},
			{expv1.RedfishMaintenancePolicySpec{MaxUnavailable: &zero}, "lets no maintenance ever start"},
		} {
			p := &expv1.RedfishMaintenancePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "bad"}, Spec: tc.spec}
			Expect(env.Create(ctx, p)).To(MatchError(ContainSubstring(tc.want)))
		}
		m := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "empty-task"},
			Spec: expv1.RedfishMaintenanceSpec{HostName: b.fleet.Servers[0].ID(), Reason: "r", Requestor: "q", Tasks: []expv1.MaintenanceTask{{}}}}
		Expect(env.Create(ctx, m)).To(MatchError(ContainSubstring("sets exactly one of powerOffAndHold, bootImage, firmware, biosSettings")))
		m.Spec.Tasks = []expv1.MaintenanceTask{{BootImage: &expv1.BootImage{URL: "ftp://ops:s3cret@images.example/diag.iso"}}}
		err := env.Create(ctx, m)
		Expect(err).To(MatchError(ContainSubstring("must be an http or https URL")))
		Expect(err.Error()).NotTo(ContainSubstring("s3cret"), "the admission error echoes the URL's password")
		m.Spec.Tasks = []expv1.MaintenanceTask{holdPower, {BootImage: &expv1.BootImage{URL: "https://images.example/diag.iso"}}}
		Expect(env.Create(ctx, m)).To(MatchError(ContainSubstring("cannot be held powered off and run an image at once")))

		By("a maintenance of a host that does not exist waiting with HostNotFound")
		ghost := b.maintenance("ghost", "no-such-host", expv1.Enforced)
		Eventually(func(g Gomega) {
			m := b.maintenanceNamed("ghost")
			g.Expect(conditions.GetReason(m, infrav1.ReadyCondition)).To(Equal(maintenance.HostNotFoundReason))
		}).Should(Succeed())
		By("a second maintenance of the host in a contradicting mode being refused")
		reuse := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "ghost-reuse"},
			Spec: expv1.RedfishMaintenanceSpec{HostName: "no-such-host", Reason: "r", Requestor: "q", Mode: expv1.Reuse}}
		Expect(env.Create(ctx, reuse)).To(MatchError(ContainSubstring("maintenance ghost of host no-such-host is under way in mode Replace")))
		By("the host of a maintenance being fixed once created")
		before := ghost.DeepCopy()
		ghost.Spec.HostName = b.fleet.Servers[0].ID()
		Expect(env.Patch(ctx, ghost, client.MergeFrom(before))).To(MatchError(ContainSubstring("immutable")))
	})
})

func machineDeploymentNamed(b *bed, name string) *clusterv1.MachineDeployment {
	GinkgoHelper()
	md := &clusterv1.MachineDeployment{}
	Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: name}, md)).To(Succeed())
	return md
}
