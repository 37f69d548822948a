package e2e

import (
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/testenv"
	"github.com/caprf/cluster-api-provider-redfish/internal/metrics"
)

var _ = Describe("Node reuse", Label("node-reuse"), func() {
	It("lands every new Machine on a host its MachineDeployment used before, without cleaning, after the old template was deleted", func() {
		b := newBed("reuse", 6, nil)
		b.waitHostsAvailable(6)
		b.createCluster("reuse")
		cpHost := b.controlPlane()
		spec := infrav1.RedfishMachineSpec{NodeReuse: true, AutomatedCleaningMode: infrav1.CleaningModeDisabled}
		v1 := b.template("workers-v1", spec)
		md := b.machineDeployment("workers", "workers-v1", 3)
		b.waitRunning("workers", 3)
		used := map[string]bool{}
		for _, m := range b.machines("workers") {
			used[b.hostOf(m)] = true
		}
		Expect(used).To(HaveLen(3))

		By("switching to a new template and deleting the old one at once, as GitOps does")
		b.template("workers-v2", spec)
		switched := metav1.Now()
		switchTemplate(md, "workers-v2")
		Expect(env.Delete(ctx, v1)).To(Succeed())

		Eventually(func(g Gomega) {
			ms := b.machines("workers")
			g.Expect(ms).To(HaveLen(3))
			for _, m := range ms {
				g.Expect(m.CreationTimestamp.Time).To(BeTemporally(">=", switched.Truncate(time.Second)), func() string { return "Machine " + m.Name + " not replaced\n" + b.dump() })
				g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), func() string { return b.dump() })
			}
		}, 4*time.Minute).Should(Succeed())

		for _, m := range b.machines("workers") {
			Expect(used).To(HaveKey(b.hostOf(m)), "new Machine %s landed on a host the MachineDeployment never used", m.Name)
		}
		for _, s := range b.fleet.Servers {
			for drive, n := range s.DriveErasures() {
				Expect(n).To(BeZero(), "%s drive %s was erased with cleaning Disabled", s.ID(), drive)
			}
			if !used[s.ID()] && s.ID() != cpHost {
				Expect(s.Stats().Boots).To(BeZero(), "%s was never used by the MachineDeployment but booted", s.ID())
			}
		}
	})
})

var _ = Describe("Cleaning", Label("cleaning"), func() {
	It("erases the drives of released hosts through Redfish and returns them to Available", func() {
		b := newBed("clean", 3, nil)
		b.waitHostsAvailable(3)
		b.createCluster("clean")
		b.template("workers", infrav1.RedfishMachineSpec{}) // nodeReuse off, cleaning Metadata (default)
		md := b.machineDeployment("workers", "workers", 2)
		b.waitRunning("workers", 2)
		used := map[string]bool{}
		for _, m := range b.machines("workers") {
			used[b.hostOf(m)] = true
		}

		By("scaling the MachineDeployment to zero")
		scale(md, 0)

		Eventually(func(g Gomega) {
			g.Expect(b.machines("workers")).To(BeEmpty())
			for _, h := range b.hosts() {
				g.Expect(h.Status.State).To(Equal(infrav1.HostStateAvailable), describeHosts(b.hosts()))
				g.Expect(h.Status.Claim).To(BeNil())
				g.Expect(h.Status.ReservedFor).To(BeNil())
			}
		}, 3*time.Minute).Should(Succeed())
		for _, s := range b.fleet.Servers {
			want := 0
			if used[s.ID()] {
				want = 1
				Expect(s.PowerState()).To(Equal("Off"), "released %s left powered on", s.ID())
			}
			for drive, n := range s.DriveErasures() {
				Expect(n).To(Equal(want), "%s drive %s erased %d times", s.ID(), drive, n)
			}
		}
	})
})

var _ = Describe("Claim race", Label("claim-race"), func() {
	It("never binds a host to two Machines when two MachineDeployments scale up at once against a smaller pool", func() {
		// The hosts start cordoned, so that every Machine is waiting when they are offered at once:
		// six Machines then pick from four hosts in the same cached view.
		b := newBed("race", 4, func(_ int, h *infrav1.RedfishHost) {
			h.Spec.Cordon = &infrav1.Cordon{Reason: "racked, not offered yet"}
		})
		b.waitHostsAvailable(4)
		b.createCluster("race")

		By("recording every claim the API server ever stored")
		w, err := testenv.NewWatchClient(env.Config)
		Expect(err).NotTo(HaveOccurred())
		watcher, err := w.Watch(ctx, &infrav1.RedfishHostList{}, client.InNamespace(b.ns))
		Expect(err).NotTo(HaveOccurred())
		var mu sync.Mutex
		consumersOf := map[string]map[string]bool{} // host -> every consumer ever seen
		hostsOf := map[string]map[string]bool{}     // consumer -> every host ever claimed
		go func() {
			defer GinkgoRecover()
			for ev := range watcher.ResultChan() {
				h, ok := ev.Object.(*infrav1.RedfishHost)
				if !ok || ev.Type == watch.Error || h.Status.Claim == nil {
					continue
				}
				c := h.Status.Claim.Consumer.Name
				mu.Lock()
				if consumersOf[h.Name] == nil {
					consumersOf[h.Name] = map[string]bool{}
				}
				if hostsOf[c] == nil {
					hostsOf[c] = map[string]bool{}
				}
				consumersOf[h.Name][c] = true
				hostsOf[c][h.Name] = true
				mu.Unlock()
			}
		}()
		DeferCleanup(watcher.Stop)

		b.template("workers", infrav1.RedfishMachineSpec{})
		b.machineDeployment("blue", "workers", 3)
		b.machineDeployment("green", "workers", 3)
		Eventually(func(g Gomega) {
			rms := &infrav1.RedfishMachineList{}
			g.Expect(env.List(ctx, rms, client.InNamespace(b.ns))).To(Succeed())
			waiting := 0
			for _, rm := range rms.Items {
				if c := findCondition(rm.Status.Conditions, infrav1.HostClaimedCondition); c != nil && c.Reason == infrav1.WaitingForHostReason {
					waiting++
				}
			}
			g.Expect(waiting).To(Equal(6))
		}).Should(Succeed())
		for _, h := range b.hosts() {
			before := h.DeepCopy()
			h.Spec.Cordon = nil
			Expect(env.Patch(ctx, &h, client.MergeFrom(before))).To(Succeed())
		}

		Eventually(func(g Gomega) {
			running := 0
			for _, md := range []string{"blue", "green"} {
				for _, m := range b.machines(md) {
					if m.Status.Phase == string(clusterv1.MachinePhaseRunning) {
						running++
					}
				}
			}
			g.Expect(running).To(Equal(4), func() string { return b.dump() })
		}, 3*time.Minute).Should(Succeed())
		Consistently(func(g Gomega) {
			claimed := 0
			for _, h := range b.hosts() {
				if h.Status.Claim != nil {
					claimed++
				}
			}
			g.Expect(claimed).To(Equal(4))
		}, 2*time.Second).Should(Succeed())

		// The race happened: claims were refused because another machine had claimed the host
		// first (six machines, four hosts, picked at random from the same cached view).
		lost := testutil.ToFloat64(metrics.ClaimConflicts.WithLabelValues(b.ns, "claimed"))
		changed := testutil.ToFloat64(metrics.ClaimConflicts.WithLabelValues(b.ns, "changed"))
		fmt.Fprintf(GinkgoWriter, "claims refused by the API server: %.0f lost to another machine, %.0f on a host that changed otherwise\n", lost, changed)
		Expect(lost).To(BeNumerically(">", 0), "no machine lost a host to another: the race was not provoked")

		mu.Lock()
		defer mu.Unlock()
		Expect(consumersOf).To(HaveLen(4))
		for host, consumers := range consumersOf {
			Expect(consumers).To(HaveLen(1), "host %s was bound to %v", host, consumers)
		}
		for consumer, hosts := range hostsOf {
			Expect(hosts).To(HaveLen(1), "machine %s claimed %v", consumer, hosts)
		}
	})
})

var _ = Describe("Cordon", Label("cordon"), func() {
	It("never claims a cordoned host, and claims it once uncordoned", func() {
		b := newBed("cordon", 2, func(i int, h *infrav1.RedfishHost) {
			if i == 0 {
				h.Spec.Cordon = &infrav1.Cordon{Reason: "DIMM replacement", Requestor: "dc-ops"}
			}
		})
		b.waitHostsAvailable(2)
		cordoned := b.fleet.Servers[0].ID()
		b.createCluster("cordon")
		b.template("workers", infrav1.RedfishMachineSpec{})
		b.machineDeployment("workers", "workers", 2)

		Eventually(func(g Gomega) {
			running := 0
			for _, m := range b.machines("workers") {
				if m.Status.Phase == string(clusterv1.MachinePhaseRunning) {
					running++
				}
			}
			g.Expect(running).To(Equal(1))
		}, 3*time.Minute).Should(Succeed())
		Consistently(func(g Gomega) {
			h := &infrav1.RedfishHost{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: cordoned}, h)).To(Succeed())
			g.Expect(h.Status.Claim).To(BeNil())
		}, 3*time.Second).Should(Succeed())

		By("uncordoning")
		h := &infrav1.RedfishHost{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: cordoned}, h)).To(Succeed())
		h.Spec.Cordon = nil
		Expect(env.Update(ctx, h)).To(Succeed())
		b.waitRunning("workers", 2)
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: cordoned}, h)).To(Succeed())
		Expect(h.Status.Claim).NotTo(BeNil())
	})
})

var _ = Describe("Bad input", Label("bad-input"), func() {
	It("reports wrong credentials, an unreachable BMC and a malformed address clearly, claims nothing, and loses nothing", func() {
		b := newBed("bad", 2, func(i int, h *infrav1.RedfishHost) {
			switch i {
			case 0:
				h.Spec.BMC.CredentialsName = "wrong-password"
			case 1:
				h.Spec.BMC.Address = "redfish+http://127.0.0.1:1/redfish/v1/Systems/1" // nothing listens on port 1
			}
		})
		wrong := b.fleet.Servers[0]
		Expect(env.Create(ctx, secret(b.ns, "wrong-password", "admin", "not-the-password-"+sweepMarker))).To(Succeed())

		By("a malformed BMC address being refused at admission")
		bad := &infrav1.RedfishHost{
			ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "typo"},
			Spec:       infrav1.RedfishHostSpec{BMC: infrav1.BMC{Address: "https://10.0.0.5/redfish/v1/Systems/1", CredentialsName: "x"}},
		}
		err := env.Create(ctx, bad)
		Expect(err).To(MatchError(ContainSubstring("spec.bmc.address")))
		Expect(err).To(MatchError(ContainSubstring("scheme must be redfish://")))
		bad.Spec.BMC.Address = "redfish://admin:hunter2@10.0.0.5"
		err = env.Create(ctx, bad)
		Expect(err).To(MatchError(ContainSubstring("must not carry credentials")))
		Expect(err.Error()).NotTo(ContainSubstring("hunter2"))

		By("an image URL without a host being refused, and templates being immutable")
		badTemplate := &infrav1.RedfishMachineTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "bad-image"},
			Spec: infrav1.RedfishMachineTemplateSpec{Template: infrav1.RedfishMachineTemplateResource{Spec: infrav1.RedfishMachineSpec{
				Image: &infrav1.Image{URL: "http:///a.iso"},
			}}},
		}
		Expect(env.Create(ctx, badTemplate)).To(MatchError(ContainSubstring("spec.template.spec.image.url")))

		Eventually(func(g Gomega) {
			got := map[string]string{}
			for _, h := range b.hosts() {
				g.Expect(h.Status.State).To(Equal(infrav1.HostStateRegistering))
				for _, c := range h.Status.Conditions {
					if c.Type == infrav1.BMCReachableCondition && c.Status == metav1.ConditionFalse {
						got[h.Name] = c.Reason
					}
				}
			}
			g.Expect(got).To(Equal(map[string]string{
				wrong.ID():              infrav1.BMCAuthFailedReason,
				b.fleet.Servers[1].ID(): infrav1.BMCUnreachableReason,
			}))
		}).Should(Succeed())
		for _, h := range b.hosts() {
			for _, c := range h.Status.Conditions {
				Expect(c.Message).NotTo(ContainSubstring("not-the-password"))
				Expect(c.Message).NotTo(ContainSubstring("password\""))
			}
		}

		b.createCluster("bad")
		tmpl := b.template("workers", infrav1.RedfishMachineSpec{})
		tmpl.Spec.Template.Spec.NodeReuse = true
		Expect(env.Update(ctx, tmpl)).To(MatchError(ContainSubstring("immutable")))
		b.machineDeployment("workers", "workers", 1)
		Consistently(func(g Gomega) {
			for _, h := range b.hosts() {
				g.Expect(h.Status.Claim).To(BeNil())
			}
		}, 3*time.Second).Should(Succeed())

		By("fixing the credentials: the host registers and the waiting Machine gets it")
		sec := secret(b.ns, "wrong-password", "admin", "")
		Expect(env.Get(ctx, client.ObjectKeyFromObject(sec), sec)).To(Succeed())
		user, pass := wrong.Credentials()
		sec.Data = map[string][]byte{"username": []byte(user), "password": []byte(pass)}
		Expect(env.Update(ctx, sec)).To(Succeed())
		b.waitRunning("workers", 1)
	})

	It("sends a BMC only credentials from a Secret labelled as BMC credentials: an unlabelled Secret is refused at admission, one that arrives unlabelled is never sent", Label("credentials-label"), func() {
		b := newBedWithoutOSMutated("credlabel", 1, func(_ int, h *infrav1.RedfishHost) { h.Spec.BMC.CredentialsName = "late-creds" })
		server := b.fleet.Servers[0]
		user, pass := server.Credentials()

		By("a host pointed at a Secret that is not BMC credentials being refused, its data not echoed")
		other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "app-db"}, StringData: map[string]string{"username": "app", "password": "db-marker-7f3a"}}
		Expect(env.Create(ctx, other)).To(Succeed())
		thief := &infrav1.RedfishHost{
			ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "thief"},
			Spec:       infrav1.RedfishHostSpec{BMC: infrav1.BMC{Address: "redfish+http://127.0.0.1:1/redfish/v1/Systems/1", CredentialsName: other.Name}},
		}
		err := env.Create(ctx, thief)
		Expect(err).To(MatchError(ContainSubstring(`lacks the label caprf.io/bmc-credentials: "true"`)))
		Expect(err.Error()).NotTo(ContainSubstring("db-marker-7f3a"))

		By("the host's own Secret arriving without the label: nothing sent to the BMC, the reason shown")
		late := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "late-creds"}, StringData: map[string]string{"username": user, "password": pass}}
		Expect(env.Create(ctx, late)).To(Succeed())
		Eventually(func(g Gomega) {
			h := b.hosts()[0]
			c := conditions.Get(&h, infrav1.BMCReachableCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(infrav1.CredentialsNotLabelledReason))
			g.Expect(c.Message).To(ContainSubstring("caprf.io/bmc-credentials"))
		}).Should(Succeed())
		Consistently(func() int {
			n := 0
			for _, v := range server.Stats().Requests {
				n += v
			}
			return n
		}, 2*time.Second, 200*time.Millisecond).Should(BeZero(), "requests reached the BMC with an unlabelled Secret's credentials")

		By("the Secret labelled: the host registers")
		Expect(env.Get(ctx, client.ObjectKeyFromObject(late), late)).To(Succeed())
		late.Labels = map[string]string{infrav1.BMCCredentialsLabel: "true"}
		Expect(env.Update(ctx, late)).To(Succeed())
		b.waitHostsAvailable(1)
	})
})
