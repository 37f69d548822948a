package manager

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/exp/controllers/maintenance"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/sample"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/simos"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/testenv"
	"github.com/caprf/cluster-api-provider-redfish/internal/seed"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// Leader election timings short enough for a replica killed without releasing its lease to be
// replaced in about two seconds (the release keeps controller-runtime's 15s/10s/2s). Against an
// API server that answers 429 with Retry-After: 1, a 1s renew deadline loses the lease again
// and again: the other runs renew for longer (steadyLease).
var (
	shortLease  = []string{"--leader-elect-lease-duration=2s", "--leader-elect-renew-deadline=1s", "--leader-elect-retry-period=250ms"}
	steadyLease = []string{"--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"}
)

const (
	leaseDuration = 2 * time.Second
	minKills      = 30
)

// Two replicas of the manager binary with leader election run one lifecycle on simulated servers
// four times: undisturbed; while the leader is SIGKILLed (no lease release, no logout, no deferred
// write) again and again at random points, each killed replica started again as Kubernetes
// restarts a pod; while the BMCs fail as real ones do; and while the API server fails as a busy one
// does. Each disturbed run must converge to the same end, and the BMCs must have carried out
// exactly as many destructive requests (power actions, boots, virtual media inserts, firmware
// updates, erasures) per host as in the undisturbed run: nothing makes the provider repeat one.
// No maintenance goes back to a stage or a flash step it had left, no BMC sees requests of two
// replicas interleaved (one writer per host), and each RedfishMachine holds at most one host.
func TestKilledReplicasAndFailingBMCsAndAPIServerRepeatNoDestructiveRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("needs envtest; skipped with -short")
	}
	ctx := t.Context()
	seedProxy := startSeedProxy(t)
	// At the most verbose log level: the logs are searched for secrets at the end.
	rel := startRelease(t, ctx, map[string]string{"CAPRF_SEED_URL": "https://" + seedProxy.addr, "CAPRF_SEED_HOSTNAME": "seed.rack.example", "CAPRF_LOGLEVEL": "10"})
	seed := uint64(time.Now().UnixNano()) //nolint:gosec // a seed, logged
	t.Logf("random seed: %d", seed)
	api := startAPIProxy(t, rel.env.Config, seed)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	NewWithT(t).Expect(rel.env.WriteKubeconfig(kubeconfig, testenv.KubeconfigOptions{Impersonate: sa, Server: api.addr})).To(Succeed())
	// Each run gets its own two replicas (a Deployment of 2), stopped when the run ends; every
	// replica's log is kept for the secrets sweep.
	var all []*slot
	var slots []*slot // the running pair
	replicas := func(t *testing.T, run string, lease []string) {
		t.Helper()
		// The maintenance handshake is experimental: its gate is on, as an operator who uses it sets it.
		argsA, seedA, _ := replicaArgs(t, slices.Concat(rel.args, lease, []string{"--feature-gates=Maintenance=true"}))
		argsB, seedB, _ := replicaArgs(t, argsA)
		seedProxy.route(seedA, seedB)
		slots = []*slot{newSlot(t, run+"-a", rel, kubeconfig, argsA), newSlot(t, run+"-b", rel, kubeconfig, argsB)}
		all = append(all, slots...)
		for _, s := range slots {
			s.start()
		}
	}
	replicaLogs := func(mentioning []string) string { return logsOf(slots, mentioning) }

	var calm *lifecycle
	if !t.Run("undisturbed", func(t *testing.T) {
		replicas(t, "calm", steadyLease)
		calm = runLifecycle(t, ctx, rel, seedProxy.addr, "calm", 1, nil, replicaLogs)
		t.Logf("destructive requests carried out: %v", calm.totals())
		NewWithT(t).Expect(calm.claims).NotTo(BeEmpty(), "no claim seen")
	}) {
		t.FailNow()
	}
	// same checks what every disturbed run must show against the undisturbed one.
	same := func(t *testing.T, run *lifecycle) {
		t.Helper()
		g := NewWithT(t)
		t.Logf("destructive requests carried out: %v (undisturbed: %v)", run.totals(), calm.totals())
		exact, erases := run.perHost()
		calmExact, calmErases := calm.perHost()
		g.Expect(exact).To(Equal(calmExact), "the BMCs carried out other power actions, media inserts, firmware updates or boots than in the undisturbed run (per host, sorted)")
		g.Expect(run.unaccountedUpdates()).To(BeEmpty(), "firmware updates accepted that neither completed nor were ended by a BMC reset")
		// An erase whose outcome a kill or a BMC reset left unknown is sent again by design (a
		// released host must be erased): never fewer erases than undisturbed, more only then.
		for role, n := range erases {
			for i := range n {
				g.Expect(n[i]).To(BeNumerically(">=", calmErases[role][i]), "a host (%s) was erased less than in the undisturbed run", role)
			}
		}
		t.Logf("drive erasures per host (by role), undisturbed %v, here %v", calmErases, erases)
		g.Expect(run.claims).To(HaveLen(len(calm.claims)), "RedfishMachines that claimed a host")
		for machine, hosts := range run.claims {
			g.Expect(hosts).To(BeNumerically("<=", 1), "RedfishMachine %s held %d hosts", machine, hosts)
		}
		t.Logf("BMC requests per replica: %v; replicas that exited by themselves (a lost lease): %d", run.perReplica(), slots[0].exits()+slots[1].exits())
		g.Expect(run.overlapping()).To(BeEmpty(), "two replicas sent BMC requests in the same interval")
	}

	var runs []*lifecycle
	defer func() {
		// Every replica's log, and every request to a BMC but the logins that carry the
		// password, searched for the BMC password and the bootstrap data, in clear and base64.
		markers := []string{bmcPassword, base64.StdEncoding.EncodeToString([]byte(bmcPassword)), "#cloud-config for", base64.StdEncoding.EncodeToString([]byte("#cloud-config for"))[:20]}
		// The seed tokens, read from the seed Secrets and the media URLs the BMCs were given: they
		// open the bootstrap data, and no log may hold one.
		tokens := map[string]bool{}
		for _, run := range append(runs, calm) {
			for _, tok := range run.seedTokens() {
				tokens[tok] = true
			}
			for tok := range run.tokens {
				tokens[tok] = true
			}
		}
		logMarkers := slices.Concat(markers, slices.Collect(maps.Keys(tokens)))
		found, lines, requests := 0, 0, 0
		for _, sl := range all {
			for _, o := range sl.outputs() {
				for line := range strings.Lines(o) {
					lines++
					for _, m := range logMarkers {
						if strings.Contains(line, m) {
							found++
							t.Errorf("a secret reached %s's log: %s", sl.name, line)
						}
					}
				}
			}
		}
		for _, run := range append(runs, calm) {
			n, leaks := run.sweep(markers)
			requests += n
			for _, l := range leaks {
				found++
				t.Errorf("a secret reached a BMC outside a login: %s", l)
			}
		}
		t.Logf("secrets sweep: %d log lines searched for %d markers (%d of them seed tokens) and %d BMC requests for %d: %d found", lines, len(logMarkers), len(tokens), requests, len(markers), found)
		if len(tokens) == 0 {
			t.Error("no seed token found in the media URLs: the sweep searched for none")
		}
	}()

	t.Run("leader killed", func(t *testing.T) {
		replicas(t, "kills", shortLease)
		k := &killer{slots: slots, rng: rand.New(rand.NewPCG(seed, 35)), killed: map[string]time.Time{}} //nolint:gosec // test randomness
		run := runLifecycle(t, ctx, rel, seedProxy.addr, "kills", 2, func(*simulator.Fleet) func() { return k.run(t) }, replicaLogs)
		runs = append(runs, run)
		kills, takeovers := k.report()
		t.Logf("%d SIGKILLs of the leader; another replica led after a kill in median %s, at most %s (lease duration %s)",
			kills, median(takeovers), slices.Max(append(takeovers, 0)), leaseDuration)
		acting, lastActs := run.killedWhileActing(k.killedAt())
		t.Logf("killed generations that had sent a destructive request: %d; whose last one was sent within 1s before the kill: %d", acting, lastActs)
		g := NewWithT(t)
		g.Expect(kills).To(BeNumerically(">=", minKills), "the lifecycle ended before the leader was killed %d times", minKills)
		g.Expect(lastActs).To(BeNumerically(">", 0), "no kill landed while a replica was acting on a BMC")
		midFlash := run.killedMidFlash(k.killedAt())
		t.Logf("kills between the first BIOS image the BMC accepted and the maintenance's end: %d", midFlash)
		g.Expect(midFlash).To(BeNumerically(">", 0), "no kill landed mid-flash")
		g.Expect(k.splitBrains()).To(BeZero(), "two replicas logged holding the lease at once")
		for _, d := range takeovers {
			// Generous: a replica sees the lease free one retry period after it expired.
			g.Expect(d).To(BeNumerically("<", leaseDuration+4*time.Second), "a replica took over %s after the leader was killed", d)
		}
		same(t, run)
	})

	t.Run("BMCs failing", func(t *testing.T) {
		replicas(t, "bmcfaults", steadyLease)
		f := &bmcFaults{rng: rand.New(rand.NewPCG(seed, 37))} //nolint:gosec // test randomness
		run := runLifecycle(t, ctx, rel, seedProxy.addr, "bmcfaults", 3, func(fleet *simulator.Fleet) func() {
			f.servers = fleet.Servers
			return f.run()
		}, replicaLogs)
		runs = append(runs, run)
		peak, where := run.peakRate(false)
		failing, failingWhere := run.peakRate(true)
		interrupted := 0
		for _, s := range run.servers {
			interrupted += s.Stats().UpdatesInterrupted
		}
		t.Logf("BMC faults injected: %v; destructive requests carried out whose answer was lost: %d; firmware updates a BMC reset interrupted: %d; the most requests one BMC got in one second: %d (%s); the most it failed in one second: %d (%s)",
			f.counts(), run.droppedDestructive(), interrupted, peak, where, failing, failingWhere)
		same(t, run)
	})

	t.Run("API server failing", func(t *testing.T) {
		replicas(t, "apifaults", steadyLease)
		run := runLifecycle(t, ctx, rel, seedProxy.addr, "apifaults", 4, func(*simulator.Fleet) func() {
			api.faults(true)
			return func() { api.faults(false) }
		}, replicaLogs)
		runs = append(runs, run)
		counts := api.counts()
		t.Logf("API server faults injected: %v", counts)
		g := NewWithT(t)
		// A touch may fail as any write may (an admission webhook whose replica is restarting):
		// reported with the counts; what must show is that conflicts were real.
		g.Expect(counts).To(HaveKeyWithValue("409 after another writer", BeNumerically(">", 0)), "no update met another writer's newer version")
		same(t, run)
	})
}

// lifecycle is what one run left on its BMCs.
type lifecycle struct {
	tokens     map[string]bool // seed tokens the run's seed Secrets held
	mu         sync.Mutex
	servers    []*simulator.Server
	requests   map[string][]simulator.Request // by server ID
	claims     map[string]int                 // RedfishMachine UID -> hosts it held
	maintained time.Time                      // when the maintenance completed (its own record)
}

// runLifecycle runs a RedfishJob and a BIOS firmware maintenance (two versions) on a spare host,
// provisions a control plane by virtual media and two workers by PXE, rolls the workers onto a
// UEFI HTTP template with nodeReuse, scales them down, remediates the last worker through a
// MachineHealthCheck and deletes the cluster, each host cleaned as it is released; disturb, when
// set, runs from the hosts' registration until the run ends.
func runLifecycle(t *testing.T, ctx context.Context, rel *world, seedAddr, name string, fleetNo uint16, disturb func(*simulator.Fleet) func(), logs func(mentioning []string) string) *lifecycle {
	t.Helper()
	g := NewWithT(t)
	env := rel.env
	// BMCs that take their time, as real ones do (and each flow lasts long enough to be killed in).
	fleet, err := simulator.StartFleet(simulator.FleetOptions{Servers: 4, NamePrefix: name, Fleet: fleetNo, Password: bmcPassword,
		PowerLatency: 200 * time.Millisecond, POSTDuration: time.Second, EraseDuration: 2 * time.Second, IPXEChainURL: "https://" + seedAddr + "/v1/ipxe", FirmwareRootCAs: rel.seedCAs})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(fleet.Close)
	l := &lifecycle{servers: fleet.Servers, requests: map[string][]simulator.Request{}, claims: map[string]int{}, tokens: map[string]bool{}}
	for _, s := range fleet.Servers {
		s.OnRequest(func(r simulator.Request) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.requests[s.ID()] = append(l.requests[s.ID()], r)
		})
	}
	kubelet, err := testenv.NewWatchClient(env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	simOS := simos.New(kubelet)
	simOS.RootCAs = rel.seedCAs
	simOS.Attach(fleet)

	g.Expect(env.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	stopWatch := l.watchClaims(t, ctx, kubelet, name)
	defer stopWatch()
	if disturb != nil {
		stop := disturb(fleet)
		defer stop()
	}
	// The last host is the RedfishJob's and never the cluster's: each host then has the same role
	// in every run, and its requests can be compared host by host.
	const spareLabel = "test.caprf.dev/spare"
	notSpare := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: spareLabel, Operator: metav1.LabelSelectorOpDoesNotExist}}}
	hosts := make([]*infrav1.RedfishHost, 0, len(fleet.Servers))
	for i, s := range fleet.Servers {
		creds, host := sample.Host(name, s)
		if i == len(fleet.Servers)-1 {
			host.Labels = map[string]string{spareLabel: ""}
		}
		g.Expect(env.Create(ctx, creds)).To(Succeed())
		g.Expect(env.Create(ctx, host)).To(Succeed())
		hosts = append(hosts, host)
	}
	dump := func() string {
		var behind []string // the hosts not Available, whose log lines the message shows
		for _, h := range hosts {
			if env.Get(ctx, client.ObjectKeyFromObject(h), h) == nil && h.Status.State != infrav1.HostStateAvailable {
				behind = append(behind, h.Name)
			}
		}
		return rel.dumpHosts(ctx, name) + l.lastRequests(12) + logs(behind)
	}
	waitAvailable := func(what string) {
		t.Helper()
		g.Eventually(func(g Gomega) {
			for _, h := range hosts {
				g.Expect(env.Get(ctx, client.ObjectKeyFromObject(h), h)).To(Succeed())
				g.Expect(h.Status.State).To(Equal(infrav1.HostStateAvailable), "%s: %s", h.Name, what)
				g.Expect(h.Status.Claim).To(BeNil(), "%s: %s", h.Name, what)
			}
		}, 4*time.Minute, 200*time.Millisecond).Should(Succeed(), dump)
	}
	t.Logf("%s: hosts registered and inspected", name)
	waitAvailable("inspected")

	t.Logf("%s: a RedfishJob powers a spare host on, force-restarts it and forces it off", name)
	job := &infrav1.RedfishJob{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "cycle"}, Spec: infrav1.RedfishJobSpec{
		HostName: hosts[len(hosts)-1].Name,
		Tasks:    []infrav1.JobTask{{Power: infrav1.JobPowerOn}, {Power: infrav1.JobPowerForceRestart}, {Power: infrav1.JobPowerForceOff}},
	}}
	g.Expect(env.Create(ctx, job)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(job), job)).To(Succeed())
		g.Expect(conditions.IsTrue(job, infrav1.JobFailedCondition)).To(BeFalse(), "%+v", job.Status)
		g.Expect(conditions.IsTrue(job, infrav1.JobCompletedCondition)).To(BeTrue(), "%+v", job.Status)
	}, 3*time.Minute, 200*time.Millisecond).Should(Succeed(), dump)

	t.Logf("%s: a BIOS firmware maintenance flashes the spare host through two versions", name)
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("firmware", 1024)))
	}))
	defer images.Close()
	stopStages := l.watchMaintenances(ctx, kubelet, name)
	defer stopStages()
	bios := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "bios"}, Spec: expv1.RedfishMaintenanceSpec{
		HostName: hosts[len(hosts)-1].Name, Reason: "BIOS 2.2", Requestor: "fleet-ops", Policy: expv1.Enforced,
		Tasks: []expv1.MaintenanceTask{{Firmware: &expv1.FirmwareUpdate{Component: expv1.FirmwareBIOS, Plan: []expv1.FirmwareVersion{
			{Version: "2.1", ImageURL: images.URL + "/bios/2.1.bin"}, {Version: "2.2", ImageURL: images.URL + "/bios/2.2.bin"},
		}}}},
	}}
	g.Expect(env.Create(ctx, bios)).To(Succeed())
	// A flash recorded but never sent (the leader killed between the two) is told from one whose
	// answer was lost only after the verify grace: nothing is sent again before it is over.
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(bios), bios)).To(Succeed())
		g.Expect(bios.Status.Stage).To(Equal(expv1.StageCompleted), "%s: %v", bios.Status.Stage, bios.Status.Conditions)
	}, maintenance.DefaultVerifyGrace+4*time.Minute, 200*time.Millisecond).Should(Succeed(), dump)
	seen, back := stopStages(bios.Name)
	g.Expect(back).To(BeEmpty(), "a maintenance went back to a stage or a step it had left")
	g.Expect(seen).To(HaveKeyWithValue("bios", ContainElements(string(expv1.StageInMaintenance), string(expv1.StageCompleted))), "the watch missed the maintenance's stages")
	for _, st := range bios.Status.Stages {
		if st.Stage == expv1.StageCompleted {
			l.mu.Lock()
			l.maintained = st.Time.Time
			l.mu.Unlock()
		}
	}
	biosVersion, _ := fleet.Servers[len(fleet.Servers)-1].FirmwareVersions()
	g.Expect(biosVersion).To(Equal("2.2"))

	rc, cluster := sample.Cluster(name, name, "10.0.0.10")
	g.Expect(env.Create(ctx, rc)).To(Succeed())
	g.Expect(env.Create(ctx, cluster)).To(Succeed())
	g.Expect(env.CreateKubeconfigSecret(ctx, cluster)).To(Succeed())
	data, rm, cp := sample.ControlPlane(name, name, name+"-cp")
	rm.Spec.HostSelector = notSpare
	for _, o := range []client.Object{data, rm, cp} {
		g.Expect(env.Create(ctx, o)).To(Succeed())
	}
	running := func(want int, what string, machines func(Gomega) []clusterv1.Machine) {
		t.Helper()
		g.Eventually(func(g Gomega) {
			ms := machines(g)
			g.Expect(ms).To(HaveLen(want), what)
			for _, m := range ms {
				g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), "%s: %s", m.Name, what)
			}
		}, 5*time.Minute, 250*time.Millisecond).Should(Succeed(), dump)
		// The seed tokens of the Machines running now (PXE ones reach the host through the
		// seed server only), for the secrets sweep.
		secrets := &corev1.SecretList{}
		g.Expect(env.List(ctx, secrets, client.InNamespace(name))).To(Succeed())
		for _, sec := range secrets.Items {
			if tok := sec.Data[seed.KeyToken]; len(tok) > 0 {
				l.tokens[string(tok)] = true
			}
		}
	}
	// patchMD changes md, again when CAPI wrote it in between.
	patchMD := func(md *clusterv1.MachineDeployment, change func()) {
		t.Helper()
		g.Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(md), md)).To(Succeed())
			before := md.DeepCopy()
			change()
			g.Expect(env.Patch(ctx, md, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))).To(Succeed())
		}, time.Minute, 100*time.Millisecond).Should(Succeed())
	}
	// workers lists the MachineDeployment's Machines whose RedfishMachine was cloned from template
	// (any, for "").
	workers := func(template string) func(Gomega) []clusterv1.Machine {
		return func(g Gomega) []clusterv1.Machine {
			list := &clusterv1.MachineList{}
			g.Expect(env.List(ctx, list, client.InNamespace(name), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: "workers"})).To(Succeed())
			return slices.DeleteFunc(list.Items, func(m clusterv1.Machine) bool {
				if template == "" {
					return false
				}
				rm := &infrav1.RedfishMachine{}
				if err := env.Get(ctx, client.ObjectKey{Namespace: name, Name: m.Spec.InfrastructureRef.Name}, rm); err != nil {
					return true
				}
				return rm.Annotations[clusterv1.TemplateClonedFromNameAnnotation] != template
			})
		}
	}
	t.Logf("%s: the control plane boots by virtual media", name)
	running(1, "control plane", func(g Gomega) []clusterv1.Machine {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(cp), cp)).To(Succeed())
		return []clusterv1.Machine{*cp}
	})

	t.Logf("%s: two workers boot by PXE", name)
	v1 := sample.MachineTemplate(name, "workers-v1", infrav1.RedfishMachineSpec{BootMethod: infrav1.BootMethodPXE, NodeReuse: true, HostSelector: notSpare})
	g.Expect(env.Create(ctx, v1)).To(Succeed())
	mdData, md := sample.MachineDeployment(name, name, "workers", "workers-v1", 2, 0, 1)
	g.Expect(env.Create(ctx, mdData)).To(Succeed())
	g.Expect(env.Create(ctx, md)).To(Succeed())
	running(2, "workers on v1", workers(""))

	t.Logf("%s: the workers roll onto a UEFI HTTP template, reusing their hosts; the old template is deleted at once", name)
	v2 := sample.MachineTemplate(name, "workers-v2", infrav1.RedfishMachineSpec{BootMethod: infrav1.BootMethodUefiHTTP, NodeReuse: true, HostSelector: notSpare})
	g.Expect(env.Create(ctx, v2)).To(Succeed())
	patchMD(md, func() { md.Spec.Template.Spec.InfrastructureRef.Name = "workers-v2" })
	g.Expect(env.Delete(ctx, v1)).To(Succeed())
	running(2, "workers on v2", workers("workers-v2"))
	g.Expect(l.hostsBootOverridden("UefiHttp")).To(BeNumerically(">=", 2), "the v2 workers' hosts were not set to boot by UEFI HTTP")
	g.Eventually(func(g Gomega) { g.Expect(workers("workers-v1")(g)).To(BeEmpty()) }, 5*time.Minute, 250*time.Millisecond).Should(Succeed(), dump)

	t.Logf("%s: scaled down to one worker", name)
	patchMD(md, func() { md.Spec.Replicas = ptr.To[int32](1) })
	running(1, "workers scaled down", workers(""))

	t.Logf("%s: the worker's Node goes NotReady: a MachineHealthCheck's RedfishRemediation power-cycles its host and the same Machine recovers", name)
	tmpl, mhc := sample.RebootRemediation(name, name, "workers")
	g.Expect(env.Create(ctx, tmpl)).To(Succeed())
	g.Expect(env.Create(ctx, mhc)).To(Succeed())
	sick := workers("")(g)[0]
	sickRM := &infrav1.RedfishMachine{}
	g.Expect(env.Get(ctx, client.ObjectKey{Namespace: name, Name: sick.Spec.InfrastructureRef.Name}, sickRM)).To(Succeed())
	node := &corev1.Node{}
	g.Expect(env.Get(ctx, client.ObjectKey{Name: sick.Status.NodeRef.Name}, node)).To(Succeed())
	beforeSick := node.DeepCopy()
	sample.NotReady(node)
	g.Expect(node.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionFalse))), "the Node had no Ready condition to turn")
	sickAt := time.Now()
	g.Expect(env.Status().Patch(ctx, node, client.MergeFrom(beforeSick))).To(Succeed())
	g.Eventually(func(g Gomega) {
		// The host was powered off and on again (a hard reboot) by a BMC request, after the Node
		// went NotReady.
		resets := l.resetsSince(sickRM.Status.HostRef, sickAt)
		off := slices.Index(resets, "ForceOff")
		g.Expect(off >= 0 && slices.Contains(resets[off+1:], "On")).To(BeTrue(), "host %s not powered off and on again: %v", sickRM.Status.HostRef, resets)
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(node), node)).To(Succeed())
		ready := false
		for _, c := range node.Status.Conditions {
			ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}
		g.Expect(ready).To(BeTrue(), "Node %s not Ready again", node.Name)
		ms := workers("")(g)
		g.Expect(ms).To(HaveLen(1))
		g.Expect(ms[0].UID).To(Equal(sick.UID), "the Machine was replaced instead of remediated")
		err := env.Get(ctx, client.ObjectKey{Namespace: name, Name: sick.Name}, &infrav1.RedfishRemediation{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the RedfishRemediation is still there: %v", err)
	}, 3*time.Minute, 200*time.Millisecond).Should(Succeed(), dump)

	t.Logf("%s: the cluster deleted: every host cleaned and Available", name)
	g.Expect(env.Delete(ctx, cluster)).To(Succeed())
	g.Eventually(func() error { return env.Get(ctx, client.ObjectKeyFromObject(cluster), cluster) }, 5*time.Minute, 250*time.Millisecond).
		ShouldNot(Succeed(), dump)
	waitAvailable("released and cleaned")
	g.Expect(simOS.Errors()).To(BeEmpty())

	// The hosts go before their BMCs do (the fleet closes when the run's test ends): a later
	// run's server on a reused port would otherwise be refused as a BMC registered twice, and
	// the replicas would keep polling BMCs that are gone.
	for _, h := range hosts {
		g.Expect(client.IgnoreNotFound(env.Delete(ctx, h))).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		list := &infrav1.RedfishHostList{}
		g.Expect(env.List(ctx, list, client.InNamespace(name))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty())
	}, time.Minute, 200*time.Millisecond).Should(Succeed(), dump)
	return l
}

// watchMaintenances follows every RedfishMaintenance of ns as the API server stores it. Its stop
// returns the stages each maintenance was seen in, by name, and each time one went back: to a
// stage it had left, or to an earlier step of a task (a flash sent again). It waits first (up to
// 10 s) for the watch to have seen each of completed Completed, which a reader may see before the
// watch delivers it. Stopping again returns the same.
func (l *lifecycle) watchMaintenances(ctx context.Context, c client.WithWatch, ns string) func(completed ...string) (map[string][]string, []string) {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex // byName, back
	type seen struct {
		stages []string
		steps  map[int]int32 // task index -> the furthest step
	}
	var back []string
	byName := map[string]*seen{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		follow(ctx, c, &expv1.RedfishMaintenanceList{}, ns, func(ev watch.Event) {
			m, ok := ev.Object.(*expv1.RedfishMaintenance)
			if !ok || ev.Type == watch.Deleted {
				return
			}
			mu.Lock()
			st := byName[m.Name]
			if st == nil {
				st = &seen{steps: map[int]int32{}}
				byName[m.Name] = st
			}
			if stage := string(m.Status.Stage); stage != "" && (len(st.stages) == 0 || st.stages[len(st.stages)-1] != stage) {
				if slices.Contains(st.stages, stage) {
					back = append(back, fmt.Sprintf("%s: back to stage %s after %v", m.Name, stage, st.stages))
				}
				st.stages = append(st.stages, stage)
			}
			for i, ts := range m.Status.Tasks {
				if ts.Step < st.steps[i] {
					back = append(back, fmt.Sprintf("%s: task %d back to step %d from %d", m.Name, i, ts.Step, st.steps[i]))
				}
				st.steps[i] = max(st.steps[i], ts.Step)
			}
			mu.Unlock()
		})
	}()
	var once sync.Once
	stages := map[string][]string{}
	seenCompleted := func(name string) bool {
		mu.Lock()
		defer mu.Unlock()
		return byName[name] != nil && slices.Contains(byName[name].stages, string(expv1.StageCompleted))
	}
	return func(completed ...string) (map[string][]string, []string) {
		once.Do(func() {
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && slices.ContainsFunc(completed, func(n string) bool { return !seenCompleted(n) }); {
				time.Sleep(20 * time.Millisecond)
			}
			cancel()
			<-done
			for name, st := range byName {
				stages[name] = st.stages
			}
		})
		return stages, back
	}
}

// follow calls fn with every change to the objects of list's kind in ns the API server stores,
// until ctx ends: each watch resumes from the last version seen (from the current state after one
// too old), so a watch that ends misses nothing.
func follow(ctx context.Context, c client.WithWatch, list client.ObjectList, ns string, fn func(watch.Event)) {
	rv := ""
	for ctx.Err() == nil {
		if w, err := c.Watch(ctx, list, &client.ListOptions{Namespace: ns, Raw: &metav1.ListOptions{ResourceVersion: rv}}); err == nil {
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					rv = ""
					continue
				}
				if o, ok := ev.Object.(client.Object); ok {
					rv = o.GetResourceVersion()
				}
				fn(ev)
			}
			w.Stop()
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// watchClaims counts, per RedfishMachine, the hosts whose claim named it.
func (l *lifecycle) watchClaims(t *testing.T, ctx context.Context, c client.WithWatch, ns string) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	held := map[string]map[string]bool{} // machine UID -> hosts
	done := make(chan struct{})
	go func() {
		defer close(done)
		follow(ctx, c, &infrav1.RedfishHostList{}, ns, func(ev watch.Event) {
			h, ok := ev.Object.(*infrav1.RedfishHost)
			if !ok || ev.Type == watch.Deleted || h.Status.Claim == nil {
				return
			}
			uid := h.Status.Claim.ConsumerUID
			if held[uid] == nil {
				held[uid] = map[string]bool{}
			}
			held[uid][h.Name] = true
		})
	}()
	return func() {
		cancel()
		<-done
		l.mu.Lock()
		defer l.mu.Unlock()
		for uid, hosts := range held {
			l.claims[uid] = len(hosts)
		}
	}
}

// destructive names the requests that act on a server and must never be repeated by accident, as
// the BMC accepted them: power and reset actions, virtual media inserts (by action, or by PATCH on
// BMCs without the action), erasures and firmware updates. Boot overrides and ejects, which set a
// state and can be sent again harmlessly, are not among them.
func destructive(r simulator.Request) string {
	if r.Status < 200 || r.Status >= 300 {
		return ""
	}
	switch {
	case r.Method == "POST" && strings.HasSuffix(r.Path, "/Actions/ComputerSystem.Reset"):
		return "reset:" + resetType(r.Body)
	case r.Method == "POST" && strings.HasSuffix(r.Path, "/Actions/VirtualMedia.InsertMedia"):
		return "insert"
	case r.Method == "PATCH" && strings.Contains(r.Path, "/VirtualMedia/") && strings.Contains(string(r.Body), `"Image"`) && !strings.Contains(string(r.Body), `"Image":null`):
		return "insert"
	case r.Method == "POST" && strings.HasSuffix(r.Path, "/Actions/Drive.SecureErase"):
		return "erase"
	case r.Method == "POST" && (strings.HasSuffix(r.Path, "/Actions/UpdateService.SimpleUpdate") || strings.HasSuffix(r.Path, "/upload")):
		return "update"
	}
	return ""
}

func resetType(body []byte) string {
	for _, t := range []string{"GracefulShutdown", "ForceOff", "ForceRestart", "GracefulRestart", "PowerCycle", "ForceOn", "On"} {
		if strings.Contains(string(body), `"`+t+`"`) {
			return t
		}
	}
	return "?"
}

// perHost is each server's destructive requests (firmware updates by their completed tasks) and
// boots but its erasures, sorted (which server
// got which role may differ between runs, what each did may not), and the drive erasures of the
// servers of each such role, sorted.
func (l *lifecycle) perHost() ([]string, map[string][]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	exact := []string{}
	erases := map[string][]int{}
	for _, s := range l.servers {
		counts := map[string]int{}
		for _, r := range l.requests[s.ID()] {
			if d := destructive(r); d != "" && d != "erase" {
				counts[d]++
			}
		}
		stats := s.Stats()
		counts["boots"] = stats.Boots
		// Firmware updates by the tasks that completed: one whose task the BMC's own reset ended
		// in Exception staged nothing and is sent again by design (unaccountedUpdates checks that
		// every accepted update is one or the other).
		delete(counts, "update")
		if stats.UpdatesCompleted > 0 {
			counts["update"] = stats.UpdatesCompleted
		}
		role := fmt.Sprint(counts)
		exact = append(exact, role)
		n := 0
		for _, e := range s.DriveErasures() {
			n += e
		}
		erases[role] = append(erases[role], n)
		slices.Sort(erases[role])
	}
	sort.Strings(exact)
	return exact, erases
}

// seedTokens are the 64-hex seed tokens in the media URLs and boot settings the BMCs were given.
func (l *lifecycle) seedTokens() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, rs := range l.requests {
		for _, r := range rs {
			out = append(out, tokenPattern.FindAllString(string(r.Body), -1)...)
		}
	}
	return out
}

var tokenPattern = regexp.MustCompile(`\b[0-9a-f]{64}\b`)

// totals sums perHost over the fleet.
func (l *lifecycle) totals() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, s := range l.servers {
		for _, r := range l.requests[s.ID()] {
			if d := destructive(r); d != "" {
				out[d]++
			}
		}
		out["boots"] += s.Stats().Boots
	}
	return out
}

// sweep searches every request the BMCs got, but the logins (which carry the password), for the
// markers; it returns how many it searched and where it found one.
func (l *lifecycle) sweep(markers []string) (int, []string) {
	if l == nil {
		return 0, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	var leaks []string
	for id, rs := range l.requests {
		for _, r := range rs {
			if r.Method == "POST" && strings.HasSuffix(strings.TrimSuffix(r.Path, "/"), "/Sessions") {
				continue
			}
			n++
			text := r.Path + fmt.Sprint(r.Header) + string(r.Body)
			for _, m := range markers {
				if strings.Contains(text, m) {
					leaks = append(leaks, fmt.Sprintf("%s: %s %s", id, r.Method, r.Path))
				}
			}
		}
	}
	return n, leaks
}

// replicaOf is the replica a request came from, by the User-Agent the manager sends.
func replicaOf(r simulator.Request) string {
	ua := r.Header.Get("User-Agent")
	if i := strings.Index(ua, "("); i >= 0 && strings.HasSuffix(ua, ")") {
		return ua[i+1 : len(ua)-1]
	}
	return "other: " + ua
}

func (l *lifecycle) perReplica() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, rs := range l.requests {
		for _, r := range rs {
			out[replicaOf(r)]++
		}
	}
	return out
}

// overlapping lists the pairs of replicas that sent BMC requests in overlapping intervals (from a
// replica's first request to its last, to any BMC): two writers at once.
func (l *lifecycle) overlapping() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	type span struct {
		who         string
		first, last time.Time
	}
	spans := map[string]*span{}
	for _, rs := range l.requests {
		for _, r := range rs {
			who := replicaOf(r)
			sp := spans[who]
			if sp == nil {
				sp = &span{who: who, first: r.Received, last: r.Received}
				spans[who] = sp
			}
			if r.Received.Before(sp.first) {
				sp.first = r.Received
			}
			if r.Received.After(sp.last) {
				sp.last = r.Received
			}
		}
	}
	list := slices.Collect(maps.Values(spans))
	slices.SortFunc(list, func(a, b *span) int { return a.first.Compare(b.first) })
	var out []string
	for i := 1; i < len(list); i++ {
		if prev := list[i-1]; !list[i].first.After(prev.last) {
			out = append(out, fmt.Sprintf("%s sent from %s while %s sent until %s", list[i].who, list[i].first.Format(time.StampMilli), prev.who, prev.last.Format(time.StampMilli)))
		}
	}
	return out
}

// killedWhileActing counts the killed replica generations (by name, with their kill times) that
// had sent a destructive request, and those whose last one was sent within a second before the kill.
func (l *lifecycle) killedWhileActing(killed map[string]time.Time) (acting, recent int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := map[string]time.Time{}
	for _, rs := range l.requests {
		for _, r := range rs {
			if destructive(r) == "" {
				continue
			}
			if who := replicaOf(r); r.Received.After(last[who]) {
				last[who] = r.Received
			}
		}
	}
	for who, at := range killed {
		if t, ok := last[who]; ok {
			acting++
			if at.Sub(t) < time.Second {
				recent++
			}
		}
	}
	return acting, recent
}

// unaccountedUpdates names the servers where the firmware updates the BMC accepted are not all
// either completed or ended by the BMC's own reset (a flash sent while another was staged).
func (l *lifecycle) unaccountedUpdates() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.servers {
		accepted := 0
		for _, r := range l.requests[s.ID()] {
			if destructive(r) == "update" {
				accepted++
			}
		}
		if st := s.Stats(); accepted != st.UpdatesCompleted+st.UpdatesInterrupted {
			out = append(out, fmt.Sprintf("%s: %d accepted, %d completed, %d ended by a BMC reset", s.ID(), accepted, st.UpdatesCompleted, st.UpdatesInterrupted))
		}
	}
	return out
}

// hostsBootOverridden counts the servers whose BMC accepted a boot override to target.
func (l *lifecycle) hostsBootOverridden(target string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, rs := range l.requests {
		if slices.ContainsFunc(rs, func(r simulator.Request) bool {
			return r.Method == http.MethodPatch && r.Status >= 200 && r.Status < 300 && strings.Contains(string(r.Body), `"BootSourceOverrideTarget":"`+target+`"`)
		}) {
			n++
		}
	}
	return n
}

// resetsSince is the reset types the BMC of host carried out from since on, in order.
func (l *lifecycle) resetsSince(host string, since time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.requests[host] {
		if d, ok := strings.CutPrefix(destructive(r), "reset:"); ok && r.Received.After(since) {
			out = append(out, d)
		}
	}
	return out
}

// killedMidFlash counts the kills between the first firmware update a BMC accepted and the end
// of the maintenance that sent it.
func (l *lifecycle) killedMidFlash(killed map[string]time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, rs := range l.requests {
		for _, r := range rs {
			if destructive(r) == "update" && (first.IsZero() || r.Received.Before(first)) {
				first = r.Received
			}
		}
	}
	if first.IsZero() || l.maintained.IsZero() {
		return 0
	}
	n := 0
	for _, at := range killed {
		if at.After(first) && at.Before(l.maintained) {
			n++
		}
	}
	return n
}

// slot is one replica of the Deployment: a pod whose process the kubelet starts again whenever it
// ends (killed, or exiting by itself, as a replica that lost its lease does).
type slot struct {
	t          *testing.T
	name       string
	rel        *world
	kubeconfig string
	args       []string
	mu         sync.Mutex
	gen        int
	cmd        *exec.Cmd
	out        *testenv.Output
	allOutputs []*testenv.Output
	killed     bool         // the running process was SIGKILLed by the test
	leading    *atomic.Bool // the running process logged taking the lease
	selfExits  int          // processes that ended without being killed
	stopped    bool
	done       chan struct{}
}

func newSlot(t *testing.T, name string, rel *world, kubeconfig string, args []string) *slot {
	s := &slot{t: t, name: name, rel: rel, kubeconfig: kubeconfig, args: args, done: make(chan struct{})}
	t.Cleanup(func() {
		s.mu.Lock()
		s.stopped = true
		if s.cmd != nil {
			_ = s.cmd.Process.Kill()
		}
		s.mu.Unlock()
		<-s.done
		if t.Failed() {
			for i, o := range s.allOutputs {
				t.Logf("%s-%d log (last 200 lines):\n%s", s.name, i+1, lastLines(o.String(), 200))
			}
		}
	})
	return s
}

// start runs the slot: a new generation of its manager, named <slot>-<generation> (POD_NAME), each
// time the last one ended, half a second later (the kubelet's restart).
func (s *slot) start() {
	go func() {
		defer close(s.done)
		// The parent-death signal fires when the thread that started the child exits: this
		// goroutine keeps its thread while its children run.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for {
			s.mu.Lock()
			if s.stopped {
				s.mu.Unlock()
				return
			}
			s.gen++
			leading := &atomic.Bool{}
			var partial string // a line split across writes
			out := &testenv.Output{OnWrite: func(p string) {
				text := partial + p
				if strings.Contains(text, "uccessfully acquired lease") {
					leading.Store(true)
				}
				partial = text[strings.LastIndex(text, "\n")+1:]
			}}
			cmd := exec.Command(s.rel.bin, s.args...) //nolint:gosec,noctx // killed by the test
			cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig, fmt.Sprintf("POD_NAME=%s-%d", s.name, s.gen))
			cmd.Stdout, cmd.Stderr = out, out
			// Killed with the test process, however that ends (a panic, the test timeout).
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				s.mu.Unlock()
				s.t.Errorf("starting %s-%d: %v", s.name, s.gen, err)
				return
			}
			s.cmd, s.out, s.killed, s.leading = cmd, out, false, leading
			s.allOutputs = append(s.allOutputs, out)
			s.mu.Unlock()
			_ = cmd.Wait()
			s.mu.Lock()
			if !s.killed && !s.stopped {
				s.selfExits++
			}
			s.cmd, s.out, s.leading = nil, nil, nil
			s.mu.Unlock()
			time.Sleep(500 * time.Millisecond)
		}
	}()
}

// outputs is every generation's log.
func (s *slot) outputs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.allOutputs))
	for _, o := range s.allOutputs {
		out = append(out, o.String())
	}
	return out
}

// leads says whether the slot's running manager holds the lease (it logged taking it), and names
// that manager (<slot>-<generation>, its POD_NAME).
func (s *slot) leads() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leading != nil && s.leading.Load(), fmt.Sprintf("%s-%d", s.name, s.gen)
}

// kill SIGKILLs the slot's manager if it is still generation name (its restart follows), and says
// whether it did.
func (s *slot) kill(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || fmt.Sprintf("%s-%d", s.name, s.gen) != name {
		return false
	}
	s.killed = true
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	s.leading = nil // leads no more
	return true
}

// exits is how many of the slot's processes ended without being killed.
func (s *slot) exits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.selfExits
}

// killer SIGKILLs the leader at random points: after it led for 50 to 650ms (its pod then
// restarts it).
type killer struct {
	slots     []*slot
	rng       *rand.Rand
	mu        sync.Mutex
	kills     int
	takeovers []time.Duration
	killed    map[string]time.Time // replica generation -> when it was killed
	split     int                  // times two replicas were seen leading at once
}

func (k *killer) killedAt() map[string]time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.killed)
}

func (k *killer) splitBrains() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.split
}

func (k *killer) run(t *testing.T) func() {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var leader *slot
		var leaderName string
		var since, killedAt time.Time
		var lead time.Duration // how long this leader is let lead
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			leading := 0
			for _, s := range k.slots {
				if ok, _ := s.leads(); ok {
					leading++
				}
			}
			if leading > 1 {
				k.mu.Lock()
				k.split++
				k.mu.Unlock()
			}
			if leader != nil {
				if ok, name := leader.leads(); !ok || name != leaderName {
					leader = nil // it stopped leading by itself (a lost lease): not killed
				}
			}
			if leader == nil {
				for _, s := range k.slots {
					if ok, name := s.leads(); ok {
						leader, leaderName, since = s, name, time.Now()
						lead = 50*time.Millisecond + time.Duration(k.rng.Int64N(int64(600*time.Millisecond)))
					}
				}
				if leader != nil && !killedAt.IsZero() {
					k.mu.Lock()
					k.takeovers = append(k.takeovers, since.Sub(killedAt))
					k.mu.Unlock()
					killedAt = time.Time{} // a takeover after a leader that ended by itself is no takeover after a kill
				}
				continue
			}
			if time.Since(since) < lead {
				continue
			}
			if !leader.kill(leaderName) {
				leader = nil // it ended by itself meanwhile
				continue
			}
			killedAt = time.Now()
			k.mu.Lock()
			k.kills++
			k.killed[leaderName] = killedAt
			k.mu.Unlock()
			leader = nil
		}
	}()
	return func() {
		close(stop)
		<-done
	}
}

func (k *killer) report() (int, []time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.kills, slices.Clone(k.takeovers)
}

// logsOf is the end of every replica's log, and its last lines mentioning any of mentioning
// (hosts that did not get where they should), for a failure message.
func logsOf(slots []*slot, mentioning []string) string {
	var b strings.Builder
	for _, s := range slots {
		s.mu.Lock()
		for i, o := range s.allOutputs {
			log := o.String()
			fmt.Fprintf(&b, "\n--- %s-%d (last 40 lines)\n%s", s.name, i+1, lastLines(log, 40))
			if len(mentioning) == 0 {
				continue
			}
			var about []string
			for line := range strings.Lines(log) {
				if slices.ContainsFunc(mentioning, func(m string) bool { return strings.Contains(line, m) }) {
					about = append(about, line)
				}
			}
			fmt.Fprintf(&b, "\n--- %s-%d (last 30 lines mentioning %s)\n%s", s.name, i+1, strings.Join(mentioning, ", "), strings.Join(about[max(0, len(about)-30):], ""))
		}
		s.mu.Unlock()
	}
	return b.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// lastRequests is the last n requests each BMC got, for a failure message.
func (l *lifecycle) lastRequests(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, s := range l.servers {
		rs := l.requests[s.ID()]
		fmt.Fprintf(&b, "%s (power %s), its last requests:\n", s.ID(), s.PowerState())
		for _, r := range rs[max(0, len(rs)-n):] {
			fmt.Fprintf(&b, "  %s %s %s → %d dropped=%v from %s\n", r.Received.Format(time.StampMilli), r.Method, r.Path, r.Status, r.Dropped, replicaOf(r))
		}
	}
	return b.String()
}

// dumpHosts is the hosts' states and conditions, for a failure message.
func (w *world) dumpHosts(ctx context.Context, ns string) string {
	list := &infrav1.RedfishHostList{}
	if err := w.env.List(ctx, list, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, h := range list.Items {
		fmt.Fprintf(&b, "%s: %s claim=%v power=%s\n", h.Name, h.Status.State, h.Status.Claim != nil, h.Status.PowerState)
		for _, c := range h.Status.Conditions {
			fmt.Fprintf(&b, "  %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return b.String()
}

// seedProxy stands for the seed Service: it passes each connection to the first replica's seed
// server that accepts it.
type seedProxy struct {
	addr     string
	mu       sync.Mutex
	backends []string
}

func startSeedProxy(t *testing.T) *seedProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &seedProxy{addr: l.Addr().String()}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *seedProxy) route(backends ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.backends = backends
}

func (p *seedProxy) serve(c net.Conn) {
	defer func() { _ = c.Close() }()
	p.mu.Lock()
	backends := slices.Clone(p.backends)
	p.mu.Unlock()
	for _, b := range backends {
		up, err := net.DialTimeout("tcp", b, time.Second)
		if err != nil {
			continue
		}
		defer func() { _ = up.Close() }()
		go func() {
			_, _ = io.Copy(up, c)
			_ = up.Close()
		}()
		_, _ = io.Copy(c, up)
		return
	}
}
