package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/sample"
	"github.com/caprf/cluster-api-provider-redfish/internal/seed"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// These scenarios depend on what a real cluster's kube-controller-manager does and envtest alone
// does not: the garbage collector deletes dependents of deleted owners, the namespace controller
// empties and removes deleted namespaces.
var _ = Describe("Garbage collection", Label("gc"), func() {
	It("collects the RedfishRemediation of a Machine deleted mid-fencing; the host ends with no reboot request and the next Machine on it provisions and stays on",
		Label("remediation-machine-deleted"), func() {
			b := newBed("gcrem", 2, nil) // a control plane and one worker: the next worker must land on the same host
			b.waitHostsAvailable(2)
			b.createCluster("gcrem")
			b.controlPlane()
			b.template("workers", infrav1.RedfishMachineSpec{AutomatedCleaningMode: infrav1.CleaningModeDisabled})
			md := b.machineDeployment("workers", "workers", 1)
			b.waitRunning("workers", 1)
			machine := b.machines("workers")[0]
			hostName := b.hostOf(machine)
			server := b.server(hostName)

			By("fencing that cannot finish: the BMC refuses the power-off")
			server.Fault.Conflicts(1 << 20)
			createRebootMHC(b, "workers")
			markNodeNotReady(machine.Status.NodeRef.Name)
			rr := &infrav1.RedfishRemediation{}
			Eventually(func(g Gomega) {
				g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: machine.Name}, rr)).To(Succeed())
				g.Expect(rr.Status.Phase).To(Equal(infrav1.RemediationFencing))
				g.Expect(rr.Status.Host).To(Equal(hostName))
				g.Expect(rr.OwnerReferences).To(ContainElement(HaveField("Name", machine.Name)), "the MachineHealthCheck makes the Machine own its remediation")
				h := &infrav1.RedfishHost{}
				g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: hostName}, h)).To(Succeed())
				g.Expect(h.Spec.RebootRequests).To(ContainElement(HaveField("Requestor", "remediation/"+machine.Name)))
			}).Should(Succeed())

			By("holding the remediation while its Machine is deleted, so it is collected only after the Machine is gone")
			patchAnnotations(rr, map[string]string{clusterv1.PausedAnnotation: ""})
			Eventually(func(g Gomega) {
				g.Expect(env.Get(ctx, client.ObjectKeyFromObject(rr), rr)).To(Succeed())
				g.Expect(rr.Status.Conditions).To(ContainElement(And(HaveField("Type", infrav1.PausedCondition), HaveField("Status", metav1.ConditionTrue))))
			}).Should(Succeed())
			scale(md, 0)
			server.Fault.Conflicts(0)
			Eventually(func(g Gomega) {
				err := env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: machine.Name}, &clusterv1.Machine{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Machine still there: %v\n%s", err, b.dump())
				// The garbage collector started deleting the orphaned remediation.
				g.Expect(env.Get(ctx, client.ObjectKeyFromObject(rr), rr)).To(Succeed())
				g.Expect(rr.DeletionTimestamp).NotTo(BeNil(), "the garbage collector did not delete the remediation of a deleted Machine")
			}).Should(Succeed())
			patchAnnotations(rr, map[string]string{clusterv1.PausedAnnotation: ""}, true)

			By("the remediation being gone and the host without its reboot request")
			Eventually(func(g Gomega) {
				err := env.Get(ctx, client.ObjectKeyFromObject(rr), &infrav1.RedfishRemediation{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "remediation still there: %v", err)
			}).Should(Succeed())
			h := &infrav1.RedfishHost{}
			Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: hostName}, h)).To(Succeed())
			Expect(h.Spec.RebootRequests).To(BeEmpty(), "the deleted remediation left its reboot request on host %s", hostName)
			Expect(hostEvents(b, hostName, "RebootRequestDropped")).To(BeZero(), "the remediation must withdraw its own request, not leave it to the host's sweep")

			By("the next Machine landing on that host, provisioning and staying powered on")
			scale(md, 1)
			b.waitRunning("workers", 1)
			Expect(b.hostOf(b.machines("workers")[0])).To(Equal(hostName))
			forceOffs := server.Stats().Resets["ForceOff"]
			Consistently(func(g Gomega) {
				g.Expect(server.PowerState()).To(Equal(simulator.PowerOn))
				g.Expect(server.Stats().Resets["ForceOff"]).To(Equal(forceOffs))
			}, 3*time.Second, 250*time.Millisecond).Should(Succeed())
		})

	It("drops a reboot request whose RedfishRemediation no longer exists, and the host powers on again", Label("remediation-machine-deleted"), func() {
		b := newBed("sweep", 1, nil)
		b.waitHostsAvailable(1)
		server := b.fleet.Servers[0]
		h := &infrav1.RedfishHost{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: server.ID()}, h)).To(Succeed())
		before := h.DeepCopy()
		h.Spec.Online = ptr.To(true)
		// What a remediation deleted without withdrawing its request (an older version, a
		// finalizer removed by hand) leaves behind, next to a request of another requestor.
		h.Spec.RebootRequests = []infrav1.RebootRequest{
			{Requestor: infrav1.RemediationRequestorPrefix + "gone", Mode: infrav1.RebootModeHard},
			{Requestor: "ops/firmware", Mode: infrav1.RebootModeHard},
		}
		Expect(env.Patch(ctx, h, client.MergeFrom(before))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(h), h)).To(Succeed())
			g.Expect(h.Spec.RebootRequests).To(ConsistOf(HaveField("Requestor", "ops/firmware")))
		}).Should(Succeed())
		// Several reconciles (every 500 ms) pass: the remaining request still holds the host off.
		Consistently(server.PowerState, 3*time.Second).Should(Equal(simulator.PowerOff), "another requestor still holds the host off")
		Expect(server.Stats().Resets).NotTo(HaveKey("On"))
		Eventually(func() int { return hostEvents(b, server.ID(), "RebootRequestDropped") }).Should(Equal(1)) // events are written asynchronously

		before = h.DeepCopy()
		h.Spec.RebootRequests = nil
		Expect(env.Patch(ctx, h, client.MergeFrom(before))).To(Succeed())
		Eventually(server.PowerState).Should(Equal(simulator.PowerOn))
	})

	It("collects the seed Secret of a RedfishMachine removed without its controller", func() {
		b := newBedWithoutOS("gcseed", 1) // no OS: the Node never joins, so the seed stays served
		b.waitHostsAvailable(1)
		b.createCluster("gcseed")
		data, rm, m := sample.ControlPlane(b.ns, b.cluster.Name, b.ns+"-cp")
		for _, o := range []client.Object{data, rm, m} {
			Expect(env.Create(ctx, o)).To(Succeed())
		}
		seedKey := client.ObjectKey{Namespace: b.ns, Name: seed.SecretName(rm.Name)}
		Eventually(func(g Gomega) {
			sec := &corev1.Secret{}
			g.Expect(env.Get(ctx, seedKey, sec)).To(Succeed())
			g.Expect(sec.OwnerReferences).To(ContainElement(HaveField("Name", rm.Name)))
			g.Expect(b.fleet.Servers[0].Stats().Boots).To(BeNumerically(">=", 1), "the host has not booted its seed yet")
		}).Should(Succeed())

		By("removing the RedfishMachine's finalizer by hand and deleting it: its controller cleans nothing up")
		deleteWithoutFinalizers(client.ObjectKeyFromObject(rm), rm)
		Eventually(func(g Gomega) {
			err := env.Get(ctx, seedKey, &corev1.Secret{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "seed Secret (bootstrap data and token) still there: %v", err)
		}).Should(Succeed())
	})

	It("powers off and erases a server whose host is deleted during its release, and every claimed server of a deleted namespace, before they go",
		Label("delete-while-releasing"), func() {
			const erase = 2 * time.Second
			b := startBed("gcns", 3, bedOptions{withOS: true, fleet: simulator.FleetOptions{EraseDuration: erase}})
			b.waitHostsAvailable(3)
			b.createCluster("gcns")
			cpHost := b.controlPlane()
			data, rm, m := sample.ControlPlane(b.ns, b.cluster.Name, b.ns+"-second")
			for _, o := range []client.Object{data, rm, m} {
				Expect(env.Create(ctx, o)).To(Succeed())
			}
			var secondHost string
			Eventually(func(g Gomega) {
				g.Expect(env.Get(ctx, client.ObjectKeyFromObject(rm), rm)).To(Succeed())
				g.Expect(rm.Status.Initialization.Provisioned).To(HaveValue(BeTrue()))
				secondHost = rm.Status.HostRef
			}).Should(Succeed())
			server := func(name string) *simulator.Server {
				for _, s := range b.fleet.Servers {
					if s.ID() == name {
						return s
					}
				}
				Fail("no server " + name)
				return nil
			}
			released := func(name string) {
				GinkgoHelper()
				s := server(name)
				Expect(s.PowerState()).To(Equal(simulator.PowerOff), "server %s left on", name)
				Expect(s.DriveErasures()).To(HaveEach(1), "server %s's drives when its host went", name)
			}

			By("deleting the second Machine and its host at once: the host goes only once its server is off and erased")
			Expect(env.Delete(ctx, m)).To(Succeed())
			Expect(env.Delete(ctx, &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: secondHost}})).To(Succeed())
			Eventually(func(g Gomega) {
				err := env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: secondHost}, &infrav1.RedfishHost{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "host still there: %v", err)
			}, erase+time.Minute, 100*time.Millisecond).Should(Succeed())
			released(secondHost)

			By("deleting the namespace: the control plane's server is off and erased before the namespace is gone")
			idle := b.fleet.Servers[0]
			for _, s := range b.fleet.Servers {
				if s.ID() != cpHost && s.ID() != secondHost {
					idle = s
				}
			}
			ns := &corev1.Namespace{}
			Expect(env.Get(ctx, client.ObjectKey{Name: b.ns}, ns)).To(Succeed())
			Expect(env.Delete(ctx, ns)).To(Succeed())
			Eventually(func(g Gomega) {
				err := env.Get(ctx, client.ObjectKey{Name: b.ns}, &corev1.Namespace{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "namespace still there: %v", err)
			}, 2*time.Minute+erase).Should(Succeed())
			released(cpHost)
			Expect(idle.DriveErasures()).To(HaveEach(0), "the server no machine held was erased")
		})
})

// hostEvents counts the events with reason about host name.
func hostEvents(b *bed, name, reason string) int {
	GinkgoHelper()
	events := &eventsv1.EventList{}
	Expect(env.List(ctx, events, client.InNamespace(b.ns))).To(Succeed())
	n := 0
	for _, e := range events.Items {
		if e.Reason == reason && e.Regarding.Name == name {
			n++
		}
	}
	return n
}

// createRebootMHC creates a Hard reboot RedfishRemediationTemplate and a MachineHealthCheck that
// sends Machines of md whose Node is NotReady for a second to it.
func createRebootMHC(b *bed, md string) {
	GinkgoHelper()
	tmpl, mhc := sample.RebootRemediation(b.ns, b.cluster.Name, md)
	Expect(env.Create(ctx, tmpl)).To(Succeed())
	Expect(env.Create(ctx, mhc)).To(Succeed())
}

// markNodeNotReady makes the Node report NotReady, as a kubelet that stopped posting would.
func markNodeNotReady(name string) {
	GinkgoHelper()
	node := &corev1.Node{}
	Expect(env.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
	before := node.DeepCopy()
	sample.NotReady(node)
	Expect(env.Status().Patch(ctx, node, client.MergeFrom(before))).To(Succeed())
}

// patchAnnotations adds (or, with remove, removes) annotations on obj.
func patchAnnotations(obj client.Object, annotations map[string]string, remove ...bool) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		before := obj.DeepCopyObject().(client.Object)
		a := obj.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		for k, v := range annotations {
			if len(remove) > 0 && remove[0] {
				delete(a, k)
			} else {
				a[k] = v
			}
		}
		obj.SetAnnotations(a)
		g.Expect(env.Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))).To(Succeed())
	}).Should(Succeed())
}

// switchTemplate points md at another RedfishMachineTemplate (tried again when CAPI wrote md in
// between).
func switchTemplate(md *clusterv1.MachineDeployment, template string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(md), md)).To(Succeed())
		before := md.DeepCopy()
		md.Spec.Template.Spec.InfrastructureRef.Name = template
		g.Expect(env.Patch(ctx, md, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))).To(Succeed())
	}).Should(Succeed())
}

// scale sets the replicas of md.
func scale(md *clusterv1.MachineDeployment, replicas int32) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(md), md)).To(Succeed())
		before := md.DeepCopy()
		md.Spec.Replicas = ptr.To(replicas)
		g.Expect(env.Patch(ctx, md, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))).To(Succeed())
	}).Should(Succeed())
}
