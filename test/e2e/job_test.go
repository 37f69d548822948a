package e2e

import (
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/sample"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// RedfishJobs: the everyday one-shot BMC operations (power, one-time boot, virtual media), on
// every BMC profile the simulator models, one at a time per host, never on a host serving a
// Machine, failed on time by a hung BMC, and collected after their TTL.
var _ = Describe("RedfishJobs", Label("redfish-job"), func() {
	It("power-cycle a free host of every BMC profile into a one-time PXE boot; a second job waits; a claimed host is refused; a hung BMC fails at the task timeout; finished jobs go after their TTL", func() {
		names := simulator.ProfileNames()
		var profiles []simulator.Profile
		for _, n := range names {
			profiles = append(profiles, simulator.Profiles[n])
		}
		// One server per profile, then two default ones: one for a cluster, one that hangs.
		profiles = append(profiles, simulator.Profiles["dmtf"], simulator.Profiles["dmtf"])
		cpIndex := len(names) // the first extra server: the only one a Machine may claim
		b := startBed("jobs", len(profiles), bedOptions{powerLatency: 300 * time.Millisecond, fleet: simulator.FleetOptions{Profiles: profiles},
			mutate: func(i int, h *infrav1.RedfishHost) {
				if i == cpIndex {
					h.Labels = map[string]string{"role": "control-plane"}
				}
			}})
		var mu sync.Mutex
		boots := map[string][]simulator.BootEvent{}
		b.fleet.OnBoot(func(ev simulator.BootEvent) {
			mu.Lock()
			defer mu.Unlock()
			boots[ev.ServerID] = append(boots[ev.ServerID], ev)
		})
		b.waitHostsAvailable(len(profiles))
		hostOf := map[string]string{} // server ID -> host name
		for _, h := range b.hosts() {
			for _, s := range b.fleet.Servers {
				if h.Spec.BMC.Address == s.Address() {
					hostOf[s.ID()] = h.Name
				}
			}
		}
		Expect(hostOf).To(HaveLen(len(profiles)))
		job := func(name, host string, tasks ...infrav1.JobTask) *infrav1.RedfishJob {
			return &infrav1.RedfishJob{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: name},
				Spec: infrav1.RedfishJobSpec{HostName: host, Tasks: tasks}}
		}
		get := func(g Gomega, name string) *infrav1.RedfishJob {
			j := &infrav1.RedfishJob{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: name}, j)).To(Succeed())
			return j
		}
		cycle := []infrav1.JobTask{{Power: infrav1.JobPowerForceOff}, {BootOnce: "Pxe"}, {Power: infrav1.JobPowerOn}}

		By("a power cycle into a one-time PXE boot on a free host of every profile")
		before := map[string]simulator.Stats{}
		for i, n := range names {
			s := b.fleet.Servers[i]
			before[s.ID()] = s.Stats()
			Expect(env.Create(ctx, job("cycle-"+n, hostOf[s.ID()], cycle...))).To(Succeed())
		}
		for i, n := range names {
			s := b.fleet.Servers[i]
			Eventually(func(g Gomega) {
				j := get(g, "cycle-"+n)
				c := findCondition(j.Status.Conditions, infrav1.JobCompletedCondition)
				g.Expect(c).NotTo(BeNil(), "job on %s: %+v", n, j.Status)
				g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "job on %s: %s", n, c.Message)
				g.Expect(findCondition(j.Status.Conditions, infrav1.JobFailedCondition).Status).To(Equal(metav1.ConditionFalse))
				g.Expect(findCondition(j.Status.Conditions, infrav1.JobRunningCondition).Status).To(Equal(metav1.ConditionFalse))
				g.Expect(j.Status.StartTime).NotTo(BeNil())
				g.Expect(j.Status.CompletionTime).NotTo(BeNil())
				for k, ts := range j.Status.Tasks {
					g.Expect(ts.State).To(Equal(infrav1.JobTaskSucceeded), "task %d", k)
					g.Expect(ts.CompletionTime).NotTo(BeNil(), "task %d", k)
				}
			}, time.Minute).Should(Succeed())
			// Done means the BMC reported On after the boot: the boot happened, from PXE, and
			// each reset went out once.
			after := s.Stats()
			// (A server already off needs no ForceOff.)
			Expect(after.Resets["ForceOff"]-before[s.ID()].Resets["ForceOff"]).To(BeNumerically("<=", 1), "ForceOff resets on %s", n)
			Expect(after.Resets["On"]-before[s.ID()].Resets["On"]).To(Equal(1), "On resets on %s: %v before, %v after", n, before[s.ID()].Resets, after.Resets)
			Expect(s.PowerState()).To(Equal(simulator.PowerOn), n)
			mu.Lock()
			evs := boots[s.ID()]
			mu.Unlock()
			Expect(evs).NotTo(BeEmpty(), "no boot on %s", n)
			Expect(evs[len(evs)-1].Target).To(Equal("Pxe"), "the job's boot on %s", n)
			enabled, _, _, _ := s.BootOverride()
			Expect(enabled).To(Equal("Disabled"), "the override on %s was for one boot only", n)
		}

		By("a second job on a host waits for the first, then runs; each reset goes out once")
		host := hostOf[b.fleet.Servers[0].ID()]
		restartsBefore := b.fleet.Servers[0].Stats().Resets["ForceRestart"]
		Expect(env.Create(ctx, job("first", host, infrav1.JobTask{Power: infrav1.JobPowerForceOff}, infrav1.JobTask{Power: infrav1.JobPowerOn}))).To(Succeed())
		Expect(env.Create(ctx, job("second", host, infrav1.JobTask{Power: infrav1.JobPowerForceRestart}))).To(Succeed())
		Eventually(func(g Gomega) {
			c := findCondition(get(g, "second").Status.Conditions, infrav1.JobRunningCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(infrav1.JobWaitingForJobReason))
			g.Expect(c.Message).To(ContainSubstring("job first"))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			first, second := get(g, "first"), get(g, "second")
			g.Expect(second.Status.CompletionTime).NotTo(BeNil())
			g.Expect(findCondition(second.Status.Conditions, infrav1.JobCompletedCondition).Status).To(Equal(metav1.ConditionTrue))
			g.Expect(first.Status.CompletionTime).NotTo(BeNil())
			g.Expect(second.Status.StartTime.Time).NotTo(BeTemporally("<", first.Status.CompletionTime.Time), "the second job started before the first ended")
		}, time.Minute).Should(Succeed())
		Expect(b.fleet.Servers[0].Stats().Resets["ForceRestart"]-restartsBefore).To(Equal(1), "ForceRestarts accepted")

		By("a job on a host that does not exist waits for it")
		Expect(env.Create(ctx, job("no-host", "no-such-host", infrav1.JobTask{Power: infrav1.JobPowerOn}))).To(Succeed())
		Eventually(func(g Gomega) {
			c := findCondition(get(g, "no-host").Status.Conditions, infrav1.JobRunningCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(infrav1.JobWaitingForHostReason))
			g.Expect(c.Message).To(ContainSubstring("RedfishHost no-such-host does not exist in namespace " + b.ns))
		}).Should(Succeed())

		By("while a job runs the host controller leaves the power alone; after it, the host gets the power it wants back")
		slow := b.fleet.Servers[1]
		slowHost := hostOf[slow.ID()]
		h := &infrav1.RedfishHost{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: slowHost}, h)).To(Succeed())
		h.Spec.Online = new(bool) // off
		Expect(env.Update(ctx, h)).To(Succeed())
		Eventually(slow.PowerState, 30*time.Second).Should(Equal(simulator.PowerOff))
		slow.Fault.Latency(time.Second) // every answer takes a second: the job lasts a few
		DeferCleanup(func() { slow.Fault.Latency(0) })
		offs := func() int { st := slow.Stats(); return st.Resets["GracefulShutdown"] + st.Resets["ForceOff"] }
		offsBefore := offs()
		Expect(env.Create(ctx, job("against-online", slowHost, infrav1.JobTask{Power: infrav1.JobPowerOn}, infrav1.JobTask{BootOnce: "Hdd"}, infrav1.JobTask{BootOnce: "Pxe"}))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(get(g, "against-online").Status.StartTime).NotTo(BeNil())
		}).Should(Succeed())
		// A change to the host wakes its controller in the middle of the job.
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: slowHost}, h)).To(Succeed())
		h.Labels = map[string]string{"touched": "during-the-job"}
		Expect(env.Update(ctx, h)).To(Succeed())
		Eventually(func(g Gomega) {
			j := get(g, "against-online")
			g.Expect(j.Status.CompletionTime).NotTo(BeNil())
			g.Expect(findCondition(j.Status.Conditions, infrav1.JobCompletedCondition).Status).To(Equal(metav1.ConditionTrue))
		}, time.Minute).Should(Succeed())
		Expect(offs()).To(Equal(offsBefore), "the host controller powered the server off while the job ran")
		Eventually(slow.PowerState, 30*time.Second).Should(Equal(simulator.PowerOff), "the host's spec.online=false was not restored after the job")

		By("a job on a host serving a Machine is refused at admission, naming the Machine")
		b.createCluster("jobs")
		// Claimed is enough to serve a Machine (no OS runs here: the Machine never gets Running).
		cpData, cpRM, cpMachine := sample.ControlPlane(b.ns, b.cluster.Name, b.ns+"-cp")
		cpRM.Spec.HostSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"role": "control-plane"}}
		for _, o := range []client.Object{cpData, cpRM, cpMachine} {
			Expect(env.Create(ctx, o)).To(Succeed())
		}
		var claimed string
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(cpRM), cpRM)).To(Succeed())
			g.Expect(cpRM.Status.HostRef).NotTo(BeEmpty())
			claimed = cpRM.Status.HostRef
		}, time.Minute).Should(Succeed())
		err := env.Create(ctx, job("on-claimed", claimed, infrav1.JobTask{Power: infrav1.JobPowerForceOff}))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("serves RedfishMachine"))
		Expect(err.Error()).To(ContainSubstring("only while a RedfishMaintenance has it in stage InMaintenance"))

		By("a hung BMC fails its task at the task's timeout, naming the task")
		Expect(claimed).To(Equal(hostOf[b.fleet.Servers[cpIndex].ID()]))
		hung := b.fleet.Servers[cpIndex+1]
		hung.Fault.Hang()
		DeferCleanup(hung.Fault.Unhang)
		timeout := 3 * time.Second
		Expect(env.Create(ctx, job("hung", hostOf[hung.ID()], infrav1.JobTask{Power: infrav1.JobPowerForceOff, Timeout: &metav1.Duration{Duration: timeout}}))).To(Succeed())
		Eventually(func(g Gomega) {
			j := get(g, "hung")
			c := findCondition(j.Status.Conditions, infrav1.JobFailedCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(infrav1.JobTaskTimedOutReason))
			g.Expect(c.Message).To(ContainSubstring("Task 0 (power ForceOff) failed: did not finish within 3s"))
			ran := j.Status.CompletionTime.Sub(j.Status.StartTime.Time)
			g.Expect(ran).To(BeNumerically(">=", timeout))
			g.Expect(ran).To(BeNumerically("<", timeout+5*time.Second), "a hung BMC held the task past its timeout")
		}, 30*time.Second).Should(Succeed())
		Expect(hung.Stats().Resets["ForceOff"]).To(BeZero())

		By("finished jobs are deleted after their TTL, not before")
		short := job("short-ttl", host, infrav1.JobTask{BootOnce: "Hdd"})
		short.Spec.TTLAfterFinished = &metav1.Duration{Duration: 3 * time.Second}
		Expect(env.Create(ctx, short)).To(Succeed())
		var done time.Time
		Eventually(func(g Gomega) {
			j := get(g, "short-ttl")
			g.Expect(j.Status.CompletionTime).NotTo(BeNil())
			done = j.Status.CompletionTime.Time
		}, 30*time.Second).Should(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: "short-ttl"}, &infrav1.RedfishJob{}))
		}, 30*time.Second).Should(BeTrue())
		Expect(time.Since(done)).To(BeNumerically(">=", 3*time.Second), "deleted before its TTL")
		Consistently(func(g Gomega) { get(g, "first") }, 2*time.Second).Should(Succeed(), "a job with the default TTL (1h) was deleted")
	})
})
