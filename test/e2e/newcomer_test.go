package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/sample"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// What a newcomer runs into when adding servers: hosts registered in another namespace than the
// cluster's, and a second registration under an existing name that re-points a running host.
var _ = Describe("Adding servers", func() {
	It("tells a Machine waiting for a host that matching Available hosts sit in another namespace", Label("wrong-namespace"), func() {
		// The selector picks only this scenario's server, whatever other scenarios registered.
		selector := map[string]string{"scenario": "wrong-namespace"}
		fleetNS := newBed("elsewhere", 1, func(_ int, h *infrav1.RedfishHost) { h.Labels = selector })
		fleetNS.waitHostsAvailable(1)

		ns, err := env.CreateNamespace(ctx, "nohosts")
		Expect(err).NotTo(HaveOccurred())
		rc, cluster := sample.Cluster(ns.Name, "nohosts", "10.0.0.10")
		Expect(env.Create(ctx, rc)).To(Succeed())
		Expect(env.Create(ctx, cluster)).To(Succeed())
		Expect(env.CreateKubeconfigSecret(ctx, cluster)).To(Succeed())
		data, rm, m := sample.ControlPlane(ns.Name, cluster.Name, ns.Name+"-cp")
		rm.Spec.HostSelector = &metav1.LabelSelector{MatchLabels: selector}
		createWaiting(rm, data, rm, m)
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(rm), rm)).To(Succeed())
			c := findCondition(rm.Status.Conditions, infrav1.HostClaimedCondition)
			g.Expect(c.Message).To(ContainSubstring("No available host in namespace " + ns.Name))
			g.Expect(c.Message).To(ContainSubstring("1 Available hosts matching the selector exist in other namespaces"))
			g.Expect(c.Message).NotTo(ContainSubstring(fleetNS.ns), "another namespace's name is not the Machine owner's business")
		}).Should(Succeed())
	})

	It("refuses to re-point a claimed host at another BMC, with a message that says what to do", Label("bmc-repoint"), func() {
		b := newBed("repoint", 2, nil)
		b.waitHostsAvailable(2)
		b.createCluster("repoint")
		claimed := b.controlPlane()
		var spare string
		for _, h := range b.hosts() {
			if h.Name != claimed {
				spare = h.Name
			}
		}

		By("a claimed host: refused, nothing changed")
		h := &infrav1.RedfishHost{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: claimed}, h)).To(Succeed())
		address := h.Spec.BMC.Address
		h.Spec.BMC.Address = "redfish://127.0.0.1:1/redfish/v1/Systems/" + b.ns
		err := env.Update(ctx, h)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec.bmc.address: Forbidden: cannot change while the host is claimed by RedfishMachine " + b.ns + "-cp"))
		Expect(err.Error()).To(ContainSubstring("delete that Machine and wait until the host is Available"))
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: claimed}, h)).To(Succeed())
		Expect(h.Spec.BMC.Address).To(Equal(address))

		By("an unclaimed host: accepted, and the host registers and inspects the new server afresh")
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: spare}, h)).To(Succeed())
		Expect(h.Status.Inventory).NotTo(BeNil())
		before := h.DeepCopy()
		h.Spec.BMC.Address = "redfish://127.0.0.1:1/redfish/v1/Systems/" + b.ns
		Expect(env.Patch(ctx, h, client.MergeFrom(before))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(h), h)).To(Succeed())
			g.Expect(h.Status.State).To(Equal(infrav1.HostStateRegistering), "the old server's state and inventory must not stay")
			g.Expect(h.Status.Inventory).To(BeNil())
		}).Should(Succeed())
		Eventually(func() int { return hostEvents(b, spare, "BMCChanged") }).Should(Equal(1)) // events are written asynchronously
	})
})

// createWaiting creates objs (a control-plane Machine's Secret, RedfishMachine, Machine) and
// waits until the RedfishMachine says it waits for an available host; it returns that condition.
func createWaiting(rm *infrav1.RedfishMachine, objs ...client.Object) *metav1.Condition {
	GinkgoHelper()
	for _, o := range objs {
		Expect(env.Create(ctx, o)).To(Succeed())
	}
	var c *metav1.Condition
	Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(rm), rm)).To(Succeed())
		c = findCondition(rm.Status.Conditions, infrav1.HostClaimedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(infrav1.WaitingForHostReason))
	}).Should(Succeed())
	return c
}

func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// Status a person reads with kubectl must follow the BMC: a power transition is followed until it
// settles (not reported for a whole check interval), and a BMC that disappears turns
// BMCReachable False within the documented check interval.
var _ = Describe("Host status follows the BMC", Label("status-fresh"), func() {
	It("reports the settled power state soon after a transition, and an unreachable BMC within the check interval", func() {
		const latency = time.Second
		b := startBed("fresh", 1, bedOptions{withOS: true, powerLatency: latency})
		b.waitHostsAvailable(1)
		name := b.fleet.Servers[0].ID()
		h := &infrav1.RedfishHost{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: name}, h)).To(Succeed())
		Expect(h.Status.PowerState).To(Equal("Off"))

		By("powering on through spec.online: status shows On well before the next periodic check")
		before := h.DeepCopy()
		h.Spec.Online = ptr.To(true)
		Expect(env.Patch(ctx, h, client.MergeFrom(before))).To(Succeed())
		start := time.Now()
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(h), h)).To(Succeed())
			g.Expect(h.Status.PowerState).To(Equal("On"))
		}, bmcCheckInterval/2, 100*time.Millisecond).Should(Succeed(), func() string { return "power state still " + h.Status.PowerState })
		GinkgoWriter.Printf("power state On in status %s after the request (BMC transition %s, check interval %s)\n", time.Since(start).Round(time.Millisecond), latency, bmcCheckInterval)

		By("the BMC going away: BMCReachable turns False within the check interval")
		b.fleet.Servers[0].Close()
		start = time.Now()
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(h), h)).To(Succeed())
			c := findCondition(h.Status.Conditions, infrav1.BMCReachableCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		}, 2*bmcCheckInterval, 250*time.Millisecond).Should(Succeed())
		GinkgoWriter.Printf("BMCReachable False %s after the BMC went away\n", time.Since(start).Round(time.Millisecond))
	})
})

var _ = Describe("Pausing a host", Label("pause"), func() {
	It("does nothing on the BMC of a host carrying cluster.x-k8s.io/paused until the annotation is removed", func() {
		b := newBed("pause", 1, nil)
		b.waitHostsAvailable(1)
		server := b.fleet.Servers[0]
		h := &infrav1.RedfishHost{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: server.ID()}, h)).To(Succeed())
		// A new host records that it is not paused (CAPI's contract).
		Expect(findCondition(h.Status.Conditions, infrav1.PausedCondition)).To(HaveField("Status", metav1.ConditionFalse))
		patchAnnotations(h, map[string]string{clusterv1.PausedAnnotation: ""})
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(h), h)).To(Succeed())
			c := findCondition(h.Status.Conditions, infrav1.PausedCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())

		By("asking the paused host to power on: nothing reaches the BMC")
		requests := server.Stats().Requests
		before := h.DeepCopy()
		h.Spec.Online = ptr.To(true)
		Expect(env.Patch(ctx, h, client.MergeFrom(before))).To(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(server.PowerState()).To(Equal(simulator.PowerOff))
			g.Expect(server.Stats().Requests).To(Equal(requests))
		}, 3*time.Second, 250*time.Millisecond).Should(Succeed())

		By("a Machine needing a host: the paused one is not claimed")
		b.createCluster("pause")
		Eventually(func(g Gomega) { // the new RedfishCluster too
			rc := &infrav1.RedfishCluster{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: "pause"}, rc)).To(Succeed())
			g.Expect(rc.Status.Conditions).To(ContainElement(And(HaveField("Type", infrav1.PausedCondition), HaveField("Status", metav1.ConditionFalse))))
		}).Should(Succeed())
		data, rm, m := sample.ControlPlane(b.ns, b.cluster.Name, b.ns+"-cp")
		createWaiting(rm, data, rm, m)
		Expect(env.Get(ctx, client.ObjectKeyFromObject(h), h)).To(Succeed())
		Expect(h.Status.Claim).To(BeNil(), "a paused host was claimed")

		By("unpausing: the host powers on and serves the Machine")
		patchAnnotations(h, map[string]string{clusterv1.PausedAnnotation: ""}, true)
		Eventually(server.PowerState).Should(Equal(simulator.PowerOn))
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(rm), rm)).To(Succeed())
			g.Expect(rm.Status.HostRef).To(Equal(server.ID()))
		}).Should(Succeed())
	})
})

var _ = Describe("Registering a server twice", Label("duplicate-bmc"), func() {
	It("refuses a second host with the same BMC system or boot MAC, naming the other host", func() {
		b := newBed("dup", 1, nil)
		b.waitHostsAvailable(1)
		first := b.hosts()[0]
		other, err := env.CreateNamespace(ctx, "dup-other")
		Expect(err).NotTo(HaveOccurred())

		sameSystem := &infrav1.RedfishHost{
			ObjectMeta: metav1.ObjectMeta{Namespace: other.Name, Name: "again"},
			Spec:       infrav1.RedfishHostSpec{BMC: infrav1.BMC{Address: first.Spec.BMC.Address, CredentialsName: "x"}},
		}
		err = env.Create(ctx, sameSystem)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("RedfishHost " + b.ns + "/" + first.Name + " already manages this BMC system"))

		sameMAC := &infrav1.RedfishHost{
			ObjectMeta: metav1.ObjectMeta{Namespace: other.Name, Name: "again"},
			Spec: infrav1.RedfishHostSpec{
				BMC:            infrav1.BMC{Address: "redfish://127.0.0.1:1/redfish/v1/Systems/" + other.Name, CredentialsName: "x"},
				BootMACAddress: first.Spec.BootMACAddress,
			},
		}
		err = env.Create(ctx, sameMAC)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("RedfishHost " + b.ns + "/" + first.Name + " already boots from this MAC"))

		By("re-pointing another host at the registered BMC: refused the same way")
		sameMAC.Spec.BootMACAddress = ""
		Expect(env.Create(ctx, sameMAC)).To(Succeed())
		before := sameMAC.DeepCopy()
		sameMAC.Spec.BMC.Address = first.Spec.BMC.Address
		err = env.Patch(ctx, sameMAC, client.MergeFrom(before))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("already manages this BMC system"))
	})
})
