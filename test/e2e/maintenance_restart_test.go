package e2e

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/exp/controllers/maintenance"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/testenv"
)

// approve gives the owner's approval of a maintenance on the RedfishMachine that claims its host.
func (b *bed) approve(name string) {
	GinkgoHelper()
	m := b.maintenanceNamed(name)
	Eventually(func(g Gomega) {
		h := &infrav1.RedfishHost{}
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: m.Spec.HostName}, h)).To(Succeed())
		g.Expect(h.Status.Claim).NotTo(BeNil())
		rm := &infrav1.RedfishMachine{}
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: h.Status.Claim.Consumer.Name}, rm)).To(Succeed())
		before := rm.DeepCopy()
		rm.Spec.MaintenanceApprovals = append(rm.Spec.MaintenanceApprovals, infrav1.MaintenanceApproval{Name: m.Name, UID: string(m.UID)})
		g.Expect(env.Patch(ctx, rm, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))).To(Succeed())
	}).Should(Succeed())
}

// complete sets spec.complete on a maintenance whose task waits for a person.
func (b *bed) complete(name string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		m := &expv1.RedfishMaintenance{}
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: name}, m)).To(Succeed())
		before := m.DeepCopy()
		m.Spec.Complete = true
		g.Expect(env.Patch(ctx, m, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))).To(Succeed())
	}).Should(Succeed())
}

// machineDeletions records, from a watch on the API server, the UIDs of the Machines of the
// namespace that were marked for deletion.
func machineDeletions(ns string) func() []string {
	GinkgoHelper()
	wc, err := testenv.NewWatchClient(env.Config)
	Expect(err).NotTo(HaveOccurred())
	w, err := wc.Watch(ctx, &clusterv1.MachineList{}, client.InNamespace(ns))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	var mu sync.Mutex
	deleted := map[types.UID]bool{}
	go func() {
		for ev := range w.ResultChan() {
			if m, ok := ev.Object.(*clusterv1.Machine); ok && (ev.Type == watch.Deleted || !m.DeletionTimestamp.IsZero()) {
				mu.Lock()
				deleted[m.UID] = true
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := make([]string, 0, len(deleted))
		for uid := range deleted {
			out = append(out, string(uid))
		}
		return out
	}
}

// maintenanceRun is what one run of the restart scenario did, as the simulator and the API server
// saw it.
type maintenanceRun struct {
	restarts int
	resets   map[string]int // accepted ComputerSystem.Reset by type, whole fleet
	boots    int
	deleted  []string // UIDs of the Machines marked for deletion
	recorded []string // the Machine UIDs the maintenances recorded
	sessions int      // the most Redfish sessions open on one BMC at the end
	// extra describes the sessions of each BMC that holds more than one at the end, and when the
	// manager restarted: what a failure needs to say which manager left them.
	extra string
}

// runMaintenancesWith plays three maintenances on the three workers of a fresh cluster (two
// OwnerApproval ones the test approves, one of them in mode Reuse running an image; one Enforced
// holding the power; the test completes those with tasks),
// calling restart each time anything a user watches changes: a maintenance's stage or reason, a
// host's state, a Machine's phase.
func runMaintenancesWith(name string, restart func()) maintenanceRun {
	GinkgoHelper()
	b, _ := clusterWithWorkers(name, 7, 3)
	deletions := machineDeletions(b.ns)
	workers := b.machines("workers")
	sort.Slice(workers, func(i, j int) bool { return workers[i].Name < workers[j].Name })
	names := []string{"bios-fix", "nic-firmware", "psu-swap"}
	b.maintenance(names[0], b.hostOf(workers[0]), expv1.OwnerApproval)
	Expect(env.Create(ctx, &expv1.RedfishMaintenance{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: names[1]},
		Spec: expv1.RedfishMaintenanceSpec{HostName: b.hostOf(workers[1]), Reason: "NIC firmware", Requestor: "fleet-ops",
			Policy: expv1.OwnerApproval, Mode: expv1.Reuse, Tasks: []expv1.MaintenanceTask{{BootImage: &expv1.BootImage{URL: "http://images.example/nic.iso"}}}},
	})).To(Succeed())
	b.maintenance(names[2], b.hostOf(workers[2]), expv1.Enforced, holdPower)
	approved, completed := map[string]bool{}, map[string]bool{}

	run := maintenanceRun{}
	last := ""
	var restartedAt []string
	Eventually(func(g Gomega) {
		snap, ms, booting := b.snapshot()
		// Not while a host boots: the seed server that serves its boot medium runs in the manager,
		// and a medium read during the outage fails that boot (in production a second replica
		// serves it).
		if snap != last && !booting {
			last = snap
			restart()
			run.restarts++
			restartedAt = append(restartedAt, time.Now().Format("15:04:05.000"))
		}
		for _, m := range ms {
			switch {
			case m.Status.Stage == expv1.StageAnnounced && m.Spec.Policy == expv1.OwnerApproval && !approved[m.Name]:
				b.approve(m.Name)
				approved[m.Name] = true
			case m.Status.Stage == expv1.StageInMaintenance && len(m.Spec.Tasks) > 0 && !completed[m.Name] &&
				conditions.GetReason(&m, infrav1.ReadyCondition) == maintenance.WaitingForCompletionReason && !strings.Contains(conditions.GetMessage(&m, infrav1.ReadyCondition), "being booted"):
				b.complete(m.Name)
				completed[m.Name] = true
			}
		}
		for _, m := range ms {
			g.Expect(m.Status.Stage).To(Equal(expv1.StageCompleted), "%s: %s\n%s", m.Name, describeMaintenance(&m), b.dump())
		}
	}, 5*time.Minute, 300*time.Millisecond).Should(Succeed())
	b.waitRunning("workers", 3)

	for _, n := range names {
		m := b.maintenanceNamed(n)
		var stages []expv1.MaintenanceStage
		for _, s := range m.Status.Stages {
			stages = append(stages, s.Stage)
		}
		Expect(stages).To(Equal([]expv1.MaintenanceStage{expv1.StagePending, expv1.StageAnnounced, expv1.StageApproved,
			expv1.StageDraining, expv1.StageInMaintenance, expv1.StageCompleted}), "maintenance %s went through a stage twice", n)
		run.recorded = append(run.recorded, m.Status.MachineUID)
	}
	run.resets, run.deleted = map[string]int{}, deletions()
	// A client the running manager replaced a moment ago is logged out in the background (within
	// 10 s): its session may still be open. What a stopped manager left stays for good.
	mostSessions := func() int {
		n := 0
		for _, s := range b.fleet.Servers {
			n = max(n, s.ActiveSessions())
		}
		return n
	}
	for settle := time.Now().Add(15 * time.Second); mostSessions() > 1 && time.Now().Before(settle); {
		time.Sleep(250 * time.Millisecond)
	}
	for _, s := range b.fleet.Servers {
		st := s.Stats()
		for k, v := range st.Resets {
			run.resets[k] += v
		}
		run.boots += st.Boots
		sessions := s.Sessions()
		run.sessions = max(run.sessions, len(sessions))
		if len(sessions) > 1 {
			run.extra += fmt.Sprintf("%s holds %d sessions:", s.ID(), len(sessions))
			for _, x := range sessions {
				run.extra += fmt.Sprintf(" [#%s created %s, last used %s, %d requests]", x.ID,
					x.Created.Format("15:04:05.000"), x.LastUsed.Format("15:04:05.000"), x.Requests)
			}
			run.extra += "\n"
		}
	}
	if run.extra != "" {
		run.extra += "manager restarted at " + strings.Join(restartedAt, " ")
	}
	return run
}

// snapshot describes what a user watching the namespace sees change: the maintenances' stages and
// reasons, the hosts' states and the Machines' phases; and whether a host is booting.
func (b *bed) snapshot() (string, []expv1.RedfishMaintenance, bool) {
	GinkgoHelper()
	var parts []string
	ms := &expv1.RedfishMaintenanceList{}
	Expect(env.List(ctx, ms, client.InNamespace(b.ns))).To(Succeed())
	for _, m := range ms.Items {
		parts = append(parts, m.Name+"="+string(m.Status.Stage)+"/"+conditions.GetReason(&m, infrav1.ReadyCondition))
	}
	booting := false
	for _, h := range b.hosts() {
		parts = append(parts, h.Name+"="+string(h.Status.State))
		booting = booting || h.Status.State == infrav1.HostStateProvisioning
	}
	machines := &clusterv1.MachineList{}
	Expect(env.List(ctx, machines, client.InNamespace(b.ns))).To(Succeed())
	for _, m := range machines.Items {
		parts = append(parts, m.Name+"="+m.Status.Phase)
	}
	sort.Strings(parts)
	return strings.Join(parts, " "), ms.Items, booting
}

var _ = Describe("Maintenances across manager restarts", func() {
	It("loses, repeats and doubles nothing when the manager restarts at every step of several maintenances", Label("maintenance-restart"), func() {
		By("a run without restarts, for the power actions and Machine deletions the work takes")
		control := runMaintenancesWith("mctl", func() {})

		By("the same run with the manager (CAPI's controllers and webhooks, and this provider) restarted at every step")
		restarted := runMaintenancesWith("mrestart", func() {
			Expect(env.RestartManager()).To(Succeed())
		})
		GinkgoWriter.Printf("restarts: %d; resets %v vs %v without; boots %d vs %d\n", restarted.restarts, restarted.resets, control.resets, restarted.boots, control.boots)
		Expect(restarted.restarts).To(BeNumerically(">=", 10))
		By("every stopped manager logged its BMC sessions out: the running one holds one per BMC")
		Expect(restarted.sessions).To(Equal(1), "the most sessions open on one BMC\n%s", restarted.extra)

		By("the Machines each maintenance recorded deleted, and no other Machine")
		for _, run := range []maintenanceRun{control, restarted} {
			Expect(run.deleted).To(ConsistOf(run.recorded))
		}
		By("no power action the run without restarts did not make")
		Expect(restarted.resets).To(Equal(control.resets))
		Expect(restarted.boots).To(Equal(control.boots))
	})
})

// setRebootRequest adds or removes a reboot request of requestor on a host.
func (b *bed) setRebootRequest(host, requestor string, want bool) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		h := &infrav1.RedfishHost{}
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: host}, h)).To(Succeed())
		before := h.DeepCopy()
		h.Spec.RebootRequests = slices.DeleteFunc(h.Spec.RebootRequests, func(q infrav1.RebootRequest) bool { return q.Requestor == requestor })
		if want {
			h.Spec.RebootRequests = append(h.Spec.RebootRequests, infrav1.RebootRequest{Requestor: requestor, Mode: infrav1.RebootModeHard})
		}
		g.Expect(env.Patch(ctx, h, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))).To(Succeed())
	}).Should(Succeed())
}

var _ = Describe("Several maintenances on one host", func() {
	It("approves each on its own, merges their power holds with a reboot request, and hands the host back only when all are done", Label("maintenance-merge"), func() {
		// The control plane's server, the worker's, and one spare for its replacement.
		b, md := clusterWithWorkers("mmerge", 3, 1)
		machine := b.machines("workers")[0]
		host := b.hostOf(machine)
		server := b.server(host)
		b.maintenance("bmc-firmware", host, expv1.OwnerApproval, holdPower)
		b.maintenance("dimm-swap", host, expv1.OwnerApproval, holdPower)
		Eventually(func(g Gomega) {
			rm := &infrav1.RedfishMachine{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: machine.Spec.InfrastructureRef.Name}, rm)).To(Succeed())
			g.Expect(rm.Status.Maintenances).To(ConsistOf(HaveField("Name", "bmc-firmware"), HaveField("Name", "dimm-swap")))
		}).Should(Succeed())

		By("approving one: the other is not approved by it while the Machine runs")
		b.approve("bmc-firmware")
		first := b.waitStage("bmc-firmware", expv1.StageInMaintenance)
		b.waitRunning("workers", 1)
		Expect(b.hostOf(b.machines("workers")[0])).NotTo(Equal(host))
		second := b.waitStage("dimm-swap", expv1.StageInMaintenance)
		Expect(second.Status.ApprovedBy).To(BeElementOf("MachineDeleted", "Unclaimed"), "approved by the other maintenance's approval")
		Expect(stageTime(second, expv1.StageApproved).Time).NotTo(BeTemporally("<", stageTime(first, expv1.StageDraining).Time),
			"approved before the approved maintenance took the Machine away")

		By("a third requestor's reboot request on the host, and a worker waiting for a host")
		b.setRebootRequest(host, "ops/psu-check", true)
		Eventually(server.PowerState).Should(Equal("Off"))
		boots := server.Stats().Boots
		scale(md, 2)
		heldOff := func(g Gomega) {
			g.Expect(server.PowerState()).To(Equal("Off"))
			g.Expect(server.Stats().Boots).To(Equal(boots), "the host was powered on while held")
			h := &infrav1.RedfishHost{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: host}, h)).To(Succeed())
			g.Expect(h.Status.Claim).To(BeNil(), "the held host was claimed")
		}

		By("completing one maintenance: the other and the reboot request still hold the host")
		b.complete("bmc-firmware")
		b.waitStage("bmc-firmware", expv1.StageCompleted)
		Consistently(heldOff, 3*time.Second).Should(Succeed())

		By("completing the other: the reboot request still holds the power")
		b.complete("dimm-swap")
		b.waitStage("dimm-swap", expv1.StageCompleted)
		Consistently(heldOff, 3*time.Second).Should(Succeed())

		By("withdrawing the reboot request: the waiting worker gets the host")
		b.setRebootRequest(host, "ops/psu-check", false)
		b.waitRunning("workers", 2)
		Expect(slices.ContainsFunc(b.machines("workers"), func(m clusterv1.Machine) bool { return b.hostOf(m) == host })).To(BeTrue())
	})
})

func stageTime(m *expv1.RedfishMaintenance, s expv1.MaintenanceStage) metav1.Time {
	GinkgoHelper()
	for _, st := range m.Status.Stages {
		if st.Stage == s {
			return st.Time
		}
	}
	Fail(fmt.Sprintf("maintenance %s never entered %s", m.Name, s))
	return metav1.Time{}
}

var _ = Describe("Turning the Maintenance feature gate off", func() {
	It("keeps held hosts held, and a deleted maintenance still goes", Label("maintenance-gate-off"), func() {
		b := clusterBed("mgate", 3)
		var free, held string
		for _, h := range b.hosts() {
			if h.Status.Claim == nil {
				free, held = h.Name, free
			}
		}
		Expect(held).NotTo(BeEmpty())
		// Under way on another host: its power hold in place when the gate goes off.
		b.maintenance("dimm-swap", held, expv1.Enforced, holdPower)
		b.waitStage("dimm-swap", expv1.StageInMaintenance)
		Eventually(b.server(held).PowerState).Should(Equal("Off"))
		// Approved and waiting for a window that is not open: nothing on the host (no reboot
		// request, no service boot) but the maintenance itself keeps claims off it.
		Expect(env.Create(ctx, &expv1.RedfishMaintenancePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "new-year"},
			Spec: expv1.RedfishMaintenancePolicySpec{HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": free}},
				Windows: []expv1.MaintenanceWindow{{Start: "0 0 1 1 *", Duration: metav1.Duration{Duration: time.Minute}}}}})).To(Succeed())
		h := &infrav1.RedfishHost{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: free}, h)).To(Succeed())
		before := h.DeepCopy()
		h.Labels = map[string]string{"kubernetes.io/hostname": free}
		Expect(env.Patch(ctx, h, client.MergeFrom(before))).To(Succeed())
		b.maintenance("psu-swap", free, expv1.Enforced, holdPower)
		Eventually(func(g Gomega) {
			m := b.maintenanceNamed("psu-swap")
			g.Expect(m.Status.Stage).To(Equal(expv1.StageApproved))
			g.Expect(conditions.GetReason(m, infrav1.ReadyCondition)).To(Equal(maintenance.WaitingForWindowReason))
		}).Should(Succeed())

		By("the manager restarted with the gate off")
		maintenanceGate.Store(false)
		Expect(env.RestartManager()).To(Succeed())
		DeferCleanup(func() {
			maintenanceGate.Store(true)
			Expect(env.RestartManager()).To(Succeed())
		})
		b.machineDeployment("workers", "workers", 1)
		Eventually(func(g Gomega) { g.Expect(b.machines("workers")).To(HaveLen(1)) }).Should(Succeed())
		kept := func(g Gomega) {
			h := &infrav1.RedfishHost{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: free}, h)).To(Succeed())
			g.Expect(h.Status.Claim).To(BeNil(), "the held host was claimed with the gate off")
			g.Expect(h.Spec.RebootRequests).To(BeEmpty())
			g.Expect(h.Spec.ServiceBoot).To(BeNil())
		}
		Consistently(kept, 3*time.Second).Should(Succeed())

		By("deleting the maintenance under way: its power hold withdrawn, it goes")
		Expect(env.Delete(ctx, b.maintenanceNamed("dimm-swap"))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(apierrors.IsNotFound(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: "dimm-swap"}, &expv1.RedfishMaintenance{}))).To(BeTrue())
			h := &infrav1.RedfishHost{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: held}, h)).To(Succeed())
			g.Expect(h.Spec.RebootRequests).To(BeEmpty())
		}).Should(Succeed())

		By("deleting the waiting maintenance: it goes too")
		Expect(env.Delete(ctx, b.maintenanceNamed("psu-swap"))).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: "psu-swap"}, &expv1.RedfishMaintenance{}))
		}).Should(BeTrue(), "the maintenance stays (its finalizer) with the gate off")
		b.waitRunning("workers", 1) // on either host: neither is held any more
	})
})

var _ = Describe("Completed maintenances", func() {
	It("are deleted once their ttlAfterCompleted has passed, not before", Label("maintenance-ttl"), func() {
		b := newBedWithoutOS("mttl", 1)
		b.waitHostsAvailable(1)
		ttl := 3 * time.Second
		m := &expv1.RedfishMaintenance{
			ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "cable-check"},
			Spec: expv1.RedfishMaintenanceSpec{HostName: b.hosts()[0].Name, Reason: "reseat a cable", Requestor: "dc-ops",
				Policy: expv1.Enforced, TTLAfterCompleted: &metav1.Duration{Duration: ttl}},
		}
		Expect(env.Create(ctx, m)).To(Succeed())
		done := stageTime(b.waitStage("cable-check", expv1.StageCompleted), expv1.StageCompleted)
		Eventually(func() bool {
			return apierrors.IsNotFound(env.Get(ctx, client.ObjectKeyFromObject(m), &expv1.RedfishMaintenance{}))
		}).Should(BeTrue())
		Expect(time.Now()).To(BeTemporally(">=", done.Add(ttl)), "deleted before its TTL")

		By("a negative TTL being refused")
		bad := m.DeepCopy()
		bad.ResourceVersion, bad.Name, bad.Spec.TTLAfterCompleted = "", "bad-ttl", &metav1.Duration{Duration: -time.Second}
		Expect(env.Create(ctx, bad)).To(MatchError(ContainSubstring("must not be negative")))
	})
})

var _ = Describe("A reboot request of a maintenance that no longer exists", func() {
	It("is dropped by the host after the orphan grace period (a finalizer removed by hand leaves no power hold)", Label("maintenance-orphan"), func() {
		b := newBedWithoutOS("morphan", 1)
		b.waitHostsAvailable(1)
		host := b.hosts()[0].Name
		// What a maintenance whose finalizer was removed by hand leaves behind.
		b.setRebootRequest(host, "maintenance/forgotten", true)
		b.setRebootRequest(host, "ops/psu-check", true)
		Eventually(func(g Gomega) {
			h := &infrav1.RedfishHost{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: host}, h)).To(Succeed())
			g.Expect(h.Spec.RebootRequests).To(ConsistOf(HaveField("Requestor", "ops/psu-check")), "only the operator's request stays")
		}, time.Minute).Should(Succeed())
	})
})
