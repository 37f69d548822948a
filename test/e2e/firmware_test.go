package e2e

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
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
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/simos"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// mediaProfiles are the BMC profiles that boot from virtual media and secure-erase their drives:
// hosts of any of them can stand in for one another in a MachineDeployment.
var mediaProfiles = []string{"dmtf", "dell-idrac9", "dell-idrac10", "hpe-ilo5", "lenovo-xcc", "manager-media", "supermicro-x13"}

// imageServer serves firmware images (a few KiB each, whatever the path): BMCs that pull fetch
// nothing in the simulator, but the provider streams the image to a BMC that only takes pushes.
func imageServer() *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("firmware", 1024)))
	}))
	DeferCleanup(srv.Close)
	return srv
}

// profileBed starts a bed whose servers take the profiles in turn, each host labelled with its
// profile (the first "control-plane" when cp is set).
func profileBed(name string, n int, profiles []string, cp bool) *bed {
	GinkgoHelper()
	var ps []simulator.Profile
	for i := range n {
		ps = append(ps, simulator.Profiles[profiles[i%len(profiles)]])
	}
	// POST takes a second, many times the power latency, as on real servers: a BIOS image or
	// settings staged are written during it, and a host powered off before it ends keeps them
	// staged.
	return startBed(name, n, bedOptions{withOS: true, fleet: simulator.FleetOptions{Profiles: ps, POSTDuration: time.Second},
		mutate: func(i int, h *infrav1.RedfishHost) {
			h.Labels = map[string]string{profileLabel: profiles[i%len(profiles)]}
			if cp && i == 0 {
				h.Labels[profileLabel] = "control-plane"
			}
		}})
}

const profileLabel = "sim.caprf.dev/profile"

// controlPlaneOnLabelled is controlPlane on the host profileBed labelled control-plane.
func (b *bed) controlPlaneOnLabelled() {
	GinkgoHelper()
	data, rm, m := sample.ControlPlane(b.ns, b.cluster.Name, b.ns+"-cp")
	rm.Spec.HostSelector = &metav1.LabelSelector{MatchLabels: map[string]string{profileLabel: "control-plane"}}
	for _, o := range []client.Object{data, rm, m} {
		Expect(env.Create(ctx, o)).To(Succeed())
	}
	b.waitControlPlaneInitialized()
}

// serverOf returns the simulated server behind a host.
func (b *bed) serverOf(host string) *simulator.Server {
	GinkgoHelper()
	h := &infrav1.RedfishHost{}
	Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: host}, h)).To(Succeed())
	for _, s := range b.fleet.Servers {
		if s.Address() == h.Spec.BMC.Address {
			return s
		}
	}
	Fail("no server for host " + host)
	return nil
}

// firmwareMaintenance creates an Enforced maintenance of host with the tasks.
func (b *bed) firmwareMaintenance(name, host string, priority int32, tasks ...expv1.MaintenanceTask) {
	GinkgoHelper()
	Expect(env.Create(ctx, &expv1.RedfishMaintenance{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: name},
		Spec: expv1.RedfishMaintenanceSpec{HostName: host, Reason: "firmware", Requestor: "fleet-ops", Policy: expv1.Enforced,
			Priority: priority, Tasks: tasks},
	})).To(Succeed())
}

// editMaintenance changes a maintenance's spec.
func (b *bed) editMaintenance(name string, edit func(*expv1.RedfishMaintenance)) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		m := &expv1.RedfishMaintenance{}
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: name}, m)).To(Succeed())
		before := m.DeepCopy()
		edit(m)
		g.Expect(env.Patch(ctx, m, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))).To(Succeed())
	}).Should(Succeed())
}

// waitReason waits until the maintenance's Ready condition has the reason.
func (b *bed) waitReason(name, reason string) *expv1.RedfishMaintenance {
	GinkgoHelper()
	var m *expv1.RedfishMaintenance
	Eventually(func(g Gomega) {
		m = &expv1.RedfishMaintenance{}
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: name}, m)).To(Succeed())
		g.Expect(conditions.GetReason(m, infrav1.ReadyCondition)).To(Equal(reason), func() string { return "maintenance " + name + ": " + describeMaintenance(m) })
	}, 2*time.Minute).Should(Succeed())
	return m
}

func biosPlan(images string, versions ...string) expv1.MaintenanceTask {
	f := &expv1.FirmwareUpdate{Component: expv1.FirmwareBIOS}
	for _, v := range versions {
		f.Plan = append(f.Plan, expv1.FirmwareVersion{Version: v, ImageURL: images + "/bios/" + v + ".bin"})
	}
	return expv1.MaintenanceTask{Firmware: f}
}

var _ = Describe("Firmware through maintenances", func() {
	It("updates the BIOS of 12 hosts serving 2 clusters through a two-version plan, never more than 2 down; a failed host stays out with the reason until retried; an aborted one until deleted", Label("firmware-fleet"), func() {
		const perCluster, budget = 6, 2
		images := imageServer()
		// Two control planes, 2×6 workers, and a spare for each host out at once.
		b := profileBed("fwfleet", 2+2*perCluster+budget, mediaProfiles, false)
		b.waitHostsAvailable(2 + 2*perCluster + budget)
		var clusters []string
		for _, name := range []string{"alpha", "beta"} {
			rc, c := sample.Cluster(b.ns, name, "10.0.0.10")
			c.Labels = map[string]string{"fleet": "bios-2026"}
			Expect(env.Create(ctx, rc)).To(Succeed())
			Expect(env.Create(ctx, c)).To(Succeed())
			Expect(env.CreateKubeconfigSecret(ctx, c)).To(Succeed())
			data, rm, m := sample.ControlPlane(b.ns, name, b.ns+"-"+name+"-cp")
			for _, o := range []client.Object{data, rm, m} {
				Expect(env.Create(ctx, o)).To(Succeed())
			}
			Eventually(func(g Gomega) {
				g.Expect(env.Get(ctx, client.ObjectKeyFromObject(c), c)).To(Succeed())
				g.Expect(conditions.IsTrue(c, clusterv1.ClusterControlPlaneInitializedCondition)).To(BeTrue(), func() string { return b.dump() })
			}, 3*time.Minute).Should(Succeed())
			b.template(name+"-workers", infrav1.RedfishMachineSpec{})
			data, md := sample.MachineDeployment(b.ns, name, name+"-workers", name+"-workers", perCluster, 0, budget)
			Expect(env.Create(ctx, data)).To(Succeed())
			Expect(env.Create(ctx, md)).To(Succeed())
			clusters = append(clusters, name)
		}
		for _, name := range clusters {
			b.waitRunning(name+"-workers", perCluster)
		}
		Expect(env.Create(ctx, &expv1.RedfishMaintenancePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "bios-2026"},
			Spec: expv1.RedfishMaintenancePolicySpec{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "bios-2026"}},
				MaxUnavailable: ptr.To(intstr.FromInt32(budget))}})).To(Succeed())

		var workers []string // hosts
		for _, name := range clusters {
			for _, m := range b.machines(name + "-workers") {
				workers = append(workers, b.hostOf(m))
			}
		}
		Expect(workers).To(HaveLen(2 * perCluster))
		failing, aborted := workers[0], workers[perCluster]
		// Every update of these two is rejected by their BMC (Completed, Critical) for a while: three
		// attempts (the first and two retries) fail.
		b.serverOf(failing).Fault.FailUpdates(3)
		b.serverOf(aborted).Fault.FailUpdates(3)
		before := map[string]string{}
		for _, h := range workers {
			before[h], _ = b.serverOf(h).FirmwareVersions()
		}

		By("sampling hosts out of service and running workers while the maintenances run")
		var peakOut atomic.Int32
		var peakWho atomic.Value
		lowRunning := map[string]*atomic.Int32{}
		for _, name := range clusters {
			lowRunning[name] = &atomic.Int32{}
			lowRunning[name].Store(math.MaxInt32)
		}
		sampleCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			for sampleCtx.Err() == nil {
				ms := &expv1.RedfishMaintenanceList{}
				machines := &clusterv1.MachineList{}
				if env.List(sampleCtx, ms, client.InNamespace(b.ns)) != nil || env.List(sampleCtx, machines, client.InNamespace(b.ns)) != nil {
					continue
				}
				// Out of the clusters' service: hosts a maintenance took from a cluster, from the
				// drain until the maintenance ends or is deleted (a failed one keeps its host).
				out, who := int32(0), []string{}
				for _, m := range ms.Items {
					if m.Status.Stage.Holds() && m.Status.Stage != expv1.StageApproved && m.Status.Cluster != "" {
						out++
						who = append(who, m.Name+" "+string(m.Status.Stage))
					}
				}
				if out > budget {
					peakWho.Store(strings.Join(who, ", "))
				}
				running := map[string]int32{}
				for _, m := range machines.Items {
					if md := m.Labels[clusterv1.MachineDeploymentNameLabel]; md != "" && m.DeletionTimestamp.IsZero() &&
						m.Status.Phase == string(clusterv1.MachinePhaseRunning) && m.Status.NodeRef.IsDefined() {
						running[strings.TrimSuffix(md, "-workers")]++
					}
				}
				if out > peakOut.Load() {
					peakOut.Store(out)
				}
				for _, name := range clusters {
					if running[name] < lowRunning[name].Load() {
						lowRunning[name].Store(running[name])
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
		DeferCleanup(func() { stop(); wg.Wait() })

		names := map[string]string{} // host -> maintenance
		for i, h := range workers {
			names[h] = fmt.Sprintf("bios-%02d", i)
			priority := int32(0)
			if h == failing || h == aborted {
				priority = 10 // first through the gate
			}
			b.firmwareMaintenance(names[h], h, priority, biosPlan(images.URL, "U46-v2.90", "U46-v3.00"))
		}

		By("a host whose BMC keeps rejecting the image stays in maintenance with the reason, held off and unclaimed")
		for _, h := range []string{failing, aborted} {
			b.waitReason(names[h], maintenance.TaskFailedReason)
			// The reason and the rest of the status are read together, whenever they are written.
			var m *expv1.RedfishMaintenance
			Eventually(func(g Gomega) {
				m = b.maintenanceNamed(names[h])
				g.Expect(m.Status.Tasks[0].State).To(Equal(expv1.TaskFailed), "%+v %s", m.Status.Tasks[0], describeMaintenance(m))
			}).Should(Succeed())
			Expect(m.Status.Stage).To(Equal(expv1.StageInMaintenance))
			Expect(m.Status.Tasks[0].Attempt).To(BeEquivalentTo(3), "the first attempt and two retries")
			Expect(conditions.GetMessage(m, infrav1.ReadyCondition)).To(ContainSubstring("tasks[0] (BIOS firmware) failed"))
			host := &infrav1.RedfishHost{}
			Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: h}, host)).To(Succeed())
			Expect(host.Status.Claim).To(BeNil())
			Expect(host.Spec.RebootRequests).To(ContainElement(HaveField("Requestor", maintenance.RequestorPrefix+names[h])))
			Expect(b.serverOf(h).PowerState()).To(Equal("Off"))
		}

		By("retry: the failed step runs again and the plan completes")
		b.editMaintenance(names[failing], func(m *expv1.RedfishMaintenance) { m.Spec.Retry = 1 })

		By("abort: the maintenance fails, its host stays out until the maintenance is deleted, then a new one updates it")
		b.editMaintenance(names[aborted], func(m *expv1.RedfishMaintenance) { m.Spec.Abort = true })
		m := b.waitStage(names[aborted], expv1.StageFailed)
		Expect(conditions.GetReason(m, infrav1.ReadyCondition)).To(Equal(maintenance.AbortedReason))
		Expect(m.Status.Tasks[0].State).To(Equal(expv1.TaskFailed), "it had failed before the abort")
		host := &infrav1.RedfishHost{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: aborted}, host)).To(Succeed())
		Expect(host.Spec.RebootRequests).NotTo(BeEmpty(), "an aborted maintenance keeps its host out of service")
		Expect(env.Delete(ctx, m)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: aborted}, host)).To(Succeed())
			g.Expect(host.Spec.RebootRequests).To(BeEmpty())
		}).Should(Succeed())
		names[aborted] = "bios-again"
		b.firmwareMaintenance(names[aborted], aborted, 0, biosPlan(images.URL, "U46-v2.90", "U46-v3.00"))

		By("every maintenance completes; every host runs the plan's last version, each version flashed in turn")
		for _, h := range workers {
			b.waitStage(names[h], expv1.StageCompleted)
		}
		for _, name := range clusters {
			b.waitRunning(name+"-workers", perCluster)
		}
		stop()
		wg.Wait()
		for _, h := range workers {
			s := b.serverOf(h)
			bios, _ := s.FirmwareVersions()
			Expect(bios).To(Equal("U46-v3.00"), "host %s (was %s)", h, before[h])
			updates := 2
			if h == failing || h == aborted {
				updates = 5 // three rejected, then both versions
			}
			Expect(s.Stats().SimpleUpdates).To(Equal(updates), "updates accepted by host %s's BMC", h)
			Expect(b.os.Booted(h)).To(ContainElement(simos.BIOSSetup), "the images are applied by a boot into the BIOS setup")
			m := b.maintenanceNamed(names[h])
			Expect(m.Status.Tasks[0].State).To(Equal(expv1.TaskSucceeded))
			Expect(m.Status.Tasks[0].Version).To(Equal("U46-v3.00"))
		}
		GinkgoWriter.Printf("peak out of service %d, fewest running workers %d / %d\n", peakOut.Load(), lowRunning["alpha"].Load(), lowRunning["beta"].Load())
		Expect(peakOut.Load()).To(BeNumerically("<=", budget), "hosts drained or in maintenance at once: %v", peakWho.Load())
		for _, name := range clusters {
			Expect(lowRunning[name].Load()).To(BeNumerically(">=", perCluster-budget), "running workers of %s", name)
		}
	})

	It("updates the BMC firmware of hosts serving a cluster without draining them or touching their power", Label("firmware-bmc"), func() {
		images := imageServer()
		// A control plane, then one worker per BMC profile that runs a cluster through virtual media.
		b := profileBed("fwbmc", 1+len(mediaProfiles), append([]string{"dmtf"}, mediaProfiles...), true)
		b.waitHostsAvailable(1 + len(mediaProfiles))
		b.createCluster("fwbmc")
		b.controlPlaneOnLabelled()
		b.template("workers", infrav1.RedfishMachineSpec{})
		b.machineDeployment("workers", "workers", int32(len(mediaProfiles)))
		b.waitRunning("workers", len(mediaProfiles))
		Expect(env.Create(ctx, &expv1.RedfishMaintenancePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "all"},
			Spec: expv1.RedfishMaintenancePolicySpec{MaxUnavailable: ptr.To(intstr.FromString("100%"))}})).To(Succeed())

		type worker struct {
			machine clusterv1.Machine
			host    string
			server  *simulator.Server
			resets  int
			boots   int
		}
		var ws []worker
		for _, m := range b.machines("workers") {
			h := b.hostOf(m)
			s := b.serverOf(h)
			resets := 0
			for _, n := range s.Stats().Resets {
				resets += n
			}
			ws = append(ws, worker{machine: m, host: h, server: s, resets: resets, boots: s.Stats().Boots})
		}

		By("sampling the workers' power and Nodes while the BMCs update")
		var off, cordoned, notReady, peak atomic.Int32
		sampleCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			for sampleCtx.Err() == nil {
				for _, w := range ws {
					if w.server.PowerState() != "On" {
						off.Add(1)
					}
					node := &corev1.Node{}
					if env.Get(sampleCtx, client.ObjectKey{Name: w.machine.Status.NodeRef.Name}, node) != nil {
						continue
					}
					if node.Spec.Unschedulable {
						cordoned.Add(1)
					}
					for _, c := range node.Status.Conditions {
						if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
							notReady.Add(1)
						}
					}
				}
				ms := &expv1.RedfishMaintenanceList{}
				if env.List(sampleCtx, ms, client.InNamespace(b.ns)) == nil {
					n := int32(0)
					for _, m := range ms.Items {
						if m.Status.Stage == expv1.StageInMaintenance {
							n++
						}
					}
					if n > peak.Load() {
						peak.Store(n)
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
		DeferCleanup(func() { stop(); wg.Wait() })
		for i, w := range ws {
			b.firmwareMaintenance(fmt.Sprintf("bmc-%d", i), w.host, 0, expv1.MaintenanceTask{Firmware: &expv1.FirmwareUpdate{
				Component: expv1.FirmwareBMC, Plan: []expv1.FirmwareVersion{{Version: "5.10.50", ImageURL: images.URL + "/bmc/5.10.50.bin"}}}})
		}
		for i := range ws {
			m := b.waitStage(fmt.Sprintf("bmc-%d", i), expv1.StageCompleted)
			Expect(m.Status.Stages).NotTo(ContainElement(HaveField("Stage", expv1.StageDraining)))
			Expect(m.Status.Tasks[0].Version).To(Equal("5.10.50"))
		}
		stop()
		wg.Wait()
		for _, w := range ws {
			_, bmcVersion := w.server.FirmwareVersions()
			Expect(bmcVersion).To(Equal("5.10.50"), "host %s", w.host)
			resets := 0
			for _, n := range w.server.Stats().Resets {
				resets += n
			}
			Expect(resets).To(Equal(w.resets), "power actions on host %s", w.host)
			Expect(w.server.Stats().Boots).To(Equal(w.boots), "boots of host %s", w.host)
			m := &clusterv1.Machine{}
			Expect(env.Get(ctx, client.ObjectKeyFromObject(&w.machine), m)).To(Succeed())
			Expect(m.UID).To(Equal(w.machine.UID))
			Expect(m.DeletionTimestamp.IsZero()).To(BeTrue())
		}
		Expect(off.Load()).To(BeZero(), "samples of a worker not powered on")
		Expect(cordoned.Load()).To(BeZero(), "samples of a cordoned Node")
		Expect(notReady.Load()).To(BeZero(), "samples of a Node not Ready")
		// The MachineDeployment allows 1 unavailable: BMC updates do not count against it.
		Expect(peak.Load()).To(BeNumerically(">", 1), "BMC updates in progress at once")
	})

	It("applies BIOS settings on every BMC profile with a BIOS, verified after the boot; an unknown attribute or a bad value is refused before any power action", Label("bios-settings"), func() {
		var withBios []string
		for _, n := range simulator.ProfileNames() {
			if !simulator.Profiles[n].NoBios {
				withBios = append(withBios, n)
			}
		}
		names := append(append([]string{}, withBios...), "dmtf", "bladed") // then one for a bad value, one without a BIOS
		b := profileBed("bios", len(names), names, false)
		b.waitHostsAvailable(len(names))
		hostOf := map[int]string{}
		for _, h := range b.hosts() {
			for i, s := range b.fleet.Servers {
				if s.Address() == h.Spec.BMC.Address {
					hostOf[i] = h.Name
				}
			}
		}
		raw := func(v string) apiextensionsv1.JSON { return apiextensionsv1.JSON{Raw: []byte(v)} }
		settings := func(attrs map[string]apiextensionsv1.JSON) expv1.MaintenanceTask {
			return expv1.MaintenanceTask{BIOSSettings: &expv1.BIOSSettings{Attributes: attrs}}
		}
		resets := func(s *simulator.Server) int {
			n := 0
			for _, c := range s.Stats().Resets {
				n += c
			}
			return n
		}

		By("refused before any power action: an unknown attribute, a value the registry does not allow, a host without BIOS resource")
		bad := len(withBios)
		refusals := map[string]struct {
			host  string
			attrs map[string]apiextensionsv1.JSON
			says  string
		}{
			"unknown":  {hostOf[0], map[string]apiextensionsv1.JSON{"BootMode": raw(`"Uefi"`), "TurboBoost": raw(`"Enabled"`)}, "TurboBoost: unknown attribute"},
			"badvalue": {hostOf[bad], map[string]apiextensionsv1.JSON{"BootMode": raw(`"Floppy"`)}, "BootMode: not one of [Uefi LegacyBios]"},
			"nobios":   {hostOf[bad+1], map[string]apiextensionsv1.JSON{"BootMode": raw(`"Uefi"`)}, "no Bios resource"},
		}
		for name, r := range refusals {
			before := resets(b.serverOf(r.host))
			b.firmwareMaintenance(name, r.host, 0, settings(r.attrs))
			m := b.waitReason(name, maintenance.InvalidTaskReason)
			Expect(conditions.GetMessage(m, infrav1.ReadyCondition)).To(ContainSubstring(r.says))
			Expect(m.Status.Stage).To(Equal(expv1.StagePending), "refused before its announcement, holding nothing")
			Expect(resets(b.serverOf(r.host))).To(Equal(before), "power actions on host %s", r.host)
			Expect(env.Delete(ctx, m)).To(Succeed())
		}

		By("a valid change on every profile: staged, applied by a boot into the BIOS setup, verified")
		for i, p := range withBios {
			b.firmwareMaintenance("set-"+p, hostOf[i], 0, settings(map[string]apiextensionsv1.JSON{"WorkloadProfile": raw(`"MaximumPerformance"`), "ProcTurboMode": raw(`"Disabled"`)}))
		}
		for i, p := range withBios {
			m := b.waitStage("set-"+p, expv1.StageCompleted)
			Expect(m.Status.Tasks[0].State).To(Equal(expv1.TaskSucceeded), p)
			attrs := b.serverOf(hostOf[i]).BiosAttributes()
			Expect(attrs).To(HaveKeyWithValue("WorkloadProfile", "MaximumPerformance"), p)
			Expect(attrs).To(HaveKeyWithValue("ProcTurboMode", "Disabled"), p)
			Expect(b.os.Booted(hostOf[i])).To(ContainElement(simos.BIOSSetup), p)
			Expect(b.os.Booted(hostOf[i])).NotTo(ContainElement(BeElementOf(simos.Blank, simos.LiveOS)), "%s: the host must not boot from its drives or an OS to apply BIOS settings", p)
		}
	})

	It("runs a fleet BIOS update on a canary group first; the rest waits for approval, then proceeds within the budget", Label("firmware-canary"), func() {
		const budget = 2
		images := imageServer()
		b := profileBed("canary", len(mediaProfiles), mediaProfiles, false)
		b.waitHostsAvailable(len(mediaProfiles))
		for _, h := range b.hosts() {
			before := h.DeepCopy()
			h.Labels["fleet"] = "bios-2026"
			Expect(env.Patch(ctx, &h, client.MergeFrom(before))).To(Succeed())
		}
		Expect(env.Create(ctx, &expv1.RedfishMaintenancePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "fleet"},
			Spec: expv1.RedfishMaintenancePolicySpec{MaxUnavailable: ptr.To(intstr.FromInt32(budget))}})).To(Succeed())
		set := &expv1.RedfishMaintenanceSet{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "bios-2026"},
			Spec: expv1.RedfishMaintenanceSetSpec{
				HostSelector: metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "bios-2026"}},
				Template: expv1.MaintenanceTemplate{Reason: "BIOS 3.00", Requestor: "fleet-ops", Policy: expv1.Enforced,
					Tasks: []expv1.MaintenanceTask{biosPlan(images.URL, "U46-v3.00")}},
				Canary: &expv1.MaintenanceCanary{Count: ptr.To[int32](2)},
			}}
		Expect(env.Create(ctx, set)).To(Succeed())
		getSet := func(g Gomega) *expv1.RedfishMaintenanceSet {
			s := &expv1.RedfishMaintenanceSet{}
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(set), s)).To(Succeed())
			return s
		}

		By("the canary completes; the others have no maintenance and no update until the approval")
		var canary []string
		Eventually(func(g Gomega) {
			s := getSet(g)
			g.Expect(s.Status.Phase).To(Equal(expv1.SetPhaseWaitingForApproval), "%+v", s.Status)
			canary = s.Status.CanaryHosts
		}, 2*time.Minute).Should(Succeed())
		s := getSet(Default)
		Expect(canary).To(HaveLen(2))
		Expect(s.Status.Counts).To(Equal(expv1.MaintenanceSetCounts{NotStarted: int32(len(mediaProfiles)) - 2, Completed: 2}))
		Expect(conditions.GetReason(s, infrav1.ReadyCondition)).To(Equal("WaitingForApproval"))
		ms := &expv1.RedfishMaintenanceList{}
		Expect(env.List(ctx, ms, client.InNamespace(b.ns))).To(Succeed())
		Expect(ms.Items).To(HaveLen(2))
		for _, h := range b.hosts() {
			bios, _ := b.serverOf(h.Name).FirmwareVersions()
			if slices.Contains(canary, h.Name) {
				Expect(bios).To(Equal("U46-v3.00"), "canary host %s", h.Name)
				continue
			}
			Expect(b.serverOf(h.Name).Stats().SimpleUpdates).To(BeZero(), "host %s was updated before the approval", h.Name)
		}

		By("approved: every other host is updated, never more than the budget at once")
		var peak atomic.Int32
		sampleCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			for sampleCtx.Err() == nil {
				if s := (&expv1.RedfishMaintenanceSet{}); env.Get(sampleCtx, client.ObjectKeyFromObject(set), s) == nil && s.Status.Counts.InProgress > peak.Load() {
					peak.Store(s.Status.Counts.InProgress)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
		DeferCleanup(func() { stop(); wg.Wait() })
		Eventually(func(g Gomega) {
			s := getSet(g)
			before := s.DeepCopy()
			s.Spec.Canary.Approved = true
			g.Expect(env.Patch(ctx, s, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))).To(Succeed())
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			s := getSet(g)
			g.Expect(s.Status.Phase).To(Equal(expv1.SetPhaseCompleted), "%+v", s.Status)
			g.Expect(conditions.IsTrue(s, infrav1.ReadyCondition)).To(BeTrue())
		}, 2*time.Minute).Should(Succeed())
		stop()
		wg.Wait()
		Expect(getSet(Default).Status.Counts).To(Equal(expv1.MaintenanceSetCounts{Completed: int32(len(mediaProfiles))}))
		for _, h := range b.hosts() {
			bios, _ := b.serverOf(h.Name).FirmwareVersions()
			Expect(bios).To(Equal("U46-v3.00"), "host %s", h.Name)
		}
		Expect(peak.Load()).To(BeNumerically("<=", budget), "maintenances in progress at once")
		Expect(peak.Load()).To(BeNumerically(">", 1), "the budget was never used in parallel")

		By("deleting the set deletes its maintenances")
		Expect(env.Delete(ctx, set)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(env.List(ctx, ms, client.InNamespace(b.ns))).To(Succeed())
			g.Expect(ms.Items).To(BeEmpty())
		}).Should(Succeed())
	})
})
