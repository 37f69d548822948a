package e2e

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	clusterctl "sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/caprf/cluster-api-provider-redfish/bmc"
	"github.com/caprf/cluster-api-provider-redfish/controllers"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/testenv"
	"github.com/caprf/cluster-api-provider-redfish/internal/provider"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// `clusterctl move` recreates every object in the target cluster without its status and with a
// new UID: hosts lose their claims, machines their hostRef. A running host must stay with its
// machine, must not be offered to another one, and must not boot. This runs clusterctl's own move
// (its library) into a second management cluster with its own CAPI and provider controllers.
var _ = Describe("clusterctl move", Label("move"), func() {
	It("moves a running cluster with its hosts to a second management cluster: every running host stays with its machine, nothing boots, and the target provisions new machines on the spare", func() {
		b, placement, used, boots := runningCluster("move")

		By("starting a second management cluster with CAPI and this provider")
		target := startTarget()

		By("clusterctl move --to-kubeconfig")
		dir := GinkgoT().TempDir()
		from, to := filepath.Join(dir, "from"), filepath.Join(dir, "to")
		Expect(env.WriteKubeconfig(from, testenv.KubeconfigOptions{})).To(Succeed())
		Expect(target.WriteKubeconfig(to, testenv.KubeconfigOptions{})).To(Succeed())
		config := filepath.Join(dir, "clusterctl.yaml")
		Expect(os.WriteFile(config, []byte("{}\n"), 0o600)).To(Succeed())
		cc, err := clusterctl.New(ctx, config)
		Expect(err).NotTo(HaveOccurred())
		Expect(cc.Move(ctx, clusterctl.MoveOptions{
			FromKubeconfig: clusterctl.Kubeconfig{Path: from}, ToKubeconfig: clusterctl.Kubeconfig{Path: to}, Namespace: b.ns,
		})).To(Succeed())

		By("the source holds nothing of the cluster any more")
		Eventually(func(g Gomega) {
			g.Expect(b.hosts()).To(BeEmpty())
			rms := &infrav1.RedfishMachineList{}
			g.Expect(env.List(ctx, rms, client.InNamespace(b.ns))).To(Succeed())
			g.Expect(rms.Items).To(BeEmpty())
		}).Should(Succeed())

		By("in the target, the running hosts are back with their machines and the spare is offered")
		Eventually(func(g Gomega) {
			rms := &infrav1.RedfishMachineList{}
			g.Expect(target.List(ctx, rms, client.InNamespace(b.ns))).To(Succeed())
			got := map[string]string{}
			for _, rm := range rms.Items {
				got[rm.Name] = rm.Status.HostRef
				g.Expect(conditions.IsTrue(&rm, infrav1.ReadyCondition)).To(BeTrue(), "RedfishMachine %s not Ready: %v", rm.Name, rm.Status.Conditions)
			}
			g.Expect(got).To(Equal(placement))
			hosts := &infrav1.RedfishHostList{}
			g.Expect(target.List(ctx, hosts, client.InNamespace(b.ns))).To(Succeed())
			g.Expect(hosts.Items).To(HaveLen(3))
			for _, h := range hosts.Items {
				if used[h.Name] {
					g.Expect(h.Status.State).To(Equal(infrav1.HostStateProvisioned), "host %s", h.Name)
					g.Expect(h.Status.Claim).NotTo(BeNil())
					g.Expect(h.Status.Claim.Provisioned).To(BeTrue())
				} else {
					g.Expect(h.Status.State).To(Equal(infrav1.HostStateAvailable), "spare host %s", h.Name)
				}
			}
			ms := &clusterv1.MachineList{}
			g.Expect(target.List(ctx, ms, client.InNamespace(b.ns))).To(Succeed())
			g.Expect(ms.Items).To(HaveLen(2))
			for _, m := range ms.Items {
				g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), "Machine %s", m.Name)
			}
		}, 3*time.Minute).Should(Succeed())
		b.runningUntouched(used, boots)

		By("scaling up in the target: the new machine takes the spare host")
		md := &clusterv1.MachineDeployment{}
		Expect(target.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: "workers"}, md)).To(Succeed())
		patch := client.MergeFrom(md.DeepCopy())
		md.Spec.Replicas = ptr.To[int32](2)
		Expect(target.Patch(ctx, md, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			rms := &infrav1.RedfishMachineList{}
			g.Expect(target.List(ctx, rms, client.InNamespace(b.ns))).To(Succeed())
			g.Expect(rms.Items).To(HaveLen(3))
			for _, rm := range rms.Items {
				if _, old := placement[rm.Name]; !old {
					g.Expect(rm.Status.HostRef).NotTo(BeEmpty())
					g.Expect(used).NotTo(HaveKey(rm.Status.HostRef), "the new machine took a host already in use")
				}
				g.Expect(conditions.IsTrue(&rm, infrav1.ReadyCondition)).To(BeTrue(), "RedfishMachine %s not Ready: %v\nsimulated OS: %v\nboots: %v", rm.Name, rm.Status.Conditions, b.os.Errors(), b.os.Fetched())
			}
		}, 3*time.Minute).Should(Succeed())
	})
})

// runningCluster starts 3 hosts running a control plane and one nodeReuse worker, the third a
// spare; it returns where each RedfishMachine runs, the hosts in use and each server's boots.
func runningCluster(name string) (b *bed, placement map[string]string, used map[string]bool, boots map[string]int) {
	GinkgoHelper()
	b = newBed(name, 3, nil)
	b.waitHostsAvailable(3)
	b.createCluster(name)
	b.controlPlane()
	b.template("workers", infrav1.RedfishMachineSpec{NodeReuse: true})
	b.machineDeployment("workers", "workers", 1)
	b.waitRunning("workers", 1)
	placement = b.placement()
	Expect(placement).To(HaveLen(2))
	used = map[string]bool{}
	for _, h := range placement {
		used[h] = true
	}
	boots = map[string]int{}
	for _, s := range b.fleet.Servers {
		boots[s.ID()] = s.Stats().Boots
	}
	return b, placement, used, boots
}

// runningUntouched checks that no server booted since boots was taken and the used ones are on.
func (b *bed) runningUntouched(used map[string]bool, boots map[string]int) {
	GinkgoHelper()
	for _, s := range b.fleet.Servers {
		Expect(s.Stats().Boots).To(Equal(boots[s.ID()]), "server %s booted again", s.ID())
		if used[s.ID()] {
			Expect(s.PowerState()).To(Equal("On"), "server %s", s.ID())
		}
	}
}

// startTarget starts a second management cluster (API server, CAPI controllers and webhooks, this
// provider with its own seed server) for the length of the spec.
func startTarget() *testenv.Environment {
	GinkgoHelper()
	seedListener, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	logger := logr.Discard()
	target, err := testenv.Start(ctx, testenv.Options{
		Logger: &logger,
		SetupProvider: func(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache) error {
			return provider.Setup(ctx, mgr, func() (net.Listener, error) { return seedListener, nil }, controllers.Options{
				Controller:       controller.Options{MaxConcurrentReconciles: 10, SkipNameValidation: ptr.To(true)},
				ClusterCache:     cc,
				SeedBaseURL:      "http://" + seedListener.Addr().String(),
				PollInterval:     500 * time.Millisecond,
				BMCRetryInterval: 2 * time.Second, BMCCheckInterval: bmcCheckInterval,
				OrphanGracePeriod: orphanGracePeriod, RestoreGracePeriod: restoreGracePeriod,
				BMC: bmc.Options{CallTimeout: 20 * time.Second, AttemptTimeout: 5 * time.Second, BreakerCooldown: 5 * time.Second},
			})
		},
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(target.Stop()).To(Succeed()) })
	return target
}

// Restoring a backup in place recreates objects in the same management cluster without status and
// with new UIDs, in whatever order the tool uses: hosts first, or machines first while the hosts
// keep their claims.
var _ = Describe("Restoring a backup in place", Label("restore-in-place"), func() {
	It("keeps every running host with its machine, booting nothing, when hosts and machines come back without status", func() {
		b, placement, used, boots := runningCluster("restore")

		for _, order := range [][]string{{"hosts", "machines"}, {"machines", "hosts"}} {
			By("recreating " + order[0] + " then " + order[1] + " without status, as clusterctl move does, while the Cluster is paused")
			b.setPaused(true)
			for _, kind := range order {
				if kind == "hosts" {
					b.recreateHosts()
				} else {
					b.recreateMachines()
				}
			}
			b.setPaused(false)

			Eventually(func(g Gomega) {
				g.Expect(b.placement()).To(Equal(placement), b.dump)
				rms := &infrav1.RedfishMachineList{}
				g.Expect(env.List(ctx, rms, client.InNamespace(b.ns))).To(Succeed())
				for _, rm := range rms.Items {
					g.Expect(conditions.IsTrue(&rm, infrav1.ReadyCondition)).To(BeTrue(), "RedfishMachine %s not Ready\n%s", rm.Name, b.dump())
				}
				for _, h := range b.hosts() {
					if used[h.Name] {
						g.Expect(h.Status.State).To(Equal(infrav1.HostStateProvisioned), "host %s", h.Name)
						g.Expect(h.Status.Claim).NotTo(BeNil())
						g.Expect(h.Status.Claim.Provisioned).To(BeTrue())
					} else {
						g.Expect(h.Status.State).To(Equal(infrav1.HostStateAvailable), "spare host %s", h.Name)
						g.Expect(h.Status.Claim).To(BeNil(), "spare host %s", h.Name)
					}
				}
			}).Should(Succeed())
			b.waitRunning("workers", 1)
			b.runningUntouched(used, boots)
		}

		By("scaling up after the move: the new machine takes the spare host, not a running one")
		md := &clusterv1.MachineDeployment{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: "workers"}, md)).To(Succeed())
		patch := client.MergeFrom(md.DeepCopy())
		md.Spec.Replicas = ptr.To[int32](2)
		Expect(env.Patch(ctx, md, patch)).To(Succeed())
		b.waitRunning("workers", 2)
		after := b.placement()
		maps.DeleteFunc(after, func(rm, _ string) bool { _, old := placement[rm]; return old })
		Expect(after).To(HaveLen(1))
		for _, h := range after {
			Expect(used).NotTo(HaveKey(h), "the new machine took a host already in use")
		}
	})
})

// placement maps each RedfishMachine to the host it reports.
func (b *bed) placement() map[string]string {
	GinkgoHelper()
	rms := &infrav1.RedfishMachineList{}
	Expect(env.List(ctx, rms, client.InNamespace(b.ns))).To(Succeed())
	out := map[string]string{}
	for _, rm := range rms.Items {
		out[rm.Name] = rm.Status.HostRef
	}
	return out
}

func (b *bed) setPaused(paused bool) {
	GinkgoHelper()
	c := &clusterv1.Cluster{}
	Expect(env.Get(ctx, client.ObjectKeyFromObject(b.cluster), c)).To(Succeed())
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.Paused = ptr.To(paused)
	Expect(env.Patch(ctx, c, patch)).To(Succeed())
	if !paused {
		return
	}
	// clusterctl moves once the controllers have seen the pause.
	Eventually(func(g Gomega) {
		rms := &infrav1.RedfishMachineList{}
		g.Expect(env.List(ctx, rms, client.InNamespace(b.ns), client.MatchingLabels{clusterv1.ClusterNameLabel: b.cluster.Name})).To(Succeed())
		for _, rm := range rms.Items {
			g.Expect(conditions.IsTrue(&rm, clusterv1.PausedCondition)).To(BeTrue(), "RedfishMachine %s not paused", rm.Name)
		}
	}).Should(Succeed())
}

// recreate deletes o (finalizers dropped, as clusterctl move does on the source) and creates a
// copy with the same metadata and spec but no status and a new UID.
func recreate(o client.Object, fresh client.Object) {
	GinkgoHelper()
	Expect(env.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
	saved := o.DeepCopyObject().(client.Object)
	// Deleted first, then its finalizers dropped, until it is gone: dropped before the deletion,
	// its controller could add its finalizer back in between, and the object stayed deleting.
	Eventually(func() error {
		if err := client.IgnoreNotFound(env.Delete(ctx, o)); err != nil {
			return err
		}
		if err := env.Get(ctx, client.ObjectKeyFromObject(o), o); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		if len(o.GetFinalizers()) > 0 {
			patch := client.MergeFromWithOptions(o.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
			o.SetFinalizers(nil)
			if err := env.Patch(ctx, o, patch); err != nil {
				return err
			}
		}
		return fmt.Errorf("%s still there", o.GetName())
	}).Should(Succeed())
	o = saved
	fresh.SetNamespace(o.GetNamespace())
	fresh.SetName(o.GetName())
	fresh.SetLabels(o.GetLabels())
	if fresh.GetAnnotations() == nil { // an empty map: recreated without them (a host re-registered by hand)
		fresh.SetAnnotations(o.GetAnnotations())
	}
	fresh.SetOwnerReferences(o.GetOwnerReferences())
	Expect(env.Create(ctx, fresh)).To(Succeed())
}

// forceRemove drops an object's finalizers and deletes it, as an operator removing it by force
// does: its controller never sees it go.
func forceRemove(o client.Object) {
	GinkgoHelper()
	Expect(env.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
	patch := client.MergeFrom(o.DeepCopyObject().(client.Object))
	o.SetFinalizers(nil)
	Expect(env.Patch(ctx, o, patch)).To(Succeed())
	Expect(client.IgnoreNotFound(env.Delete(ctx, o))).To(Succeed())
}

// forceRemoveMachineOf force-removes the RedfishMachine whose status names host.
func (b *bed) forceRemoveMachineOf(host string) {
	GinkgoHelper()
	rms := &infrav1.RedfishMachineList{}
	Expect(env.List(ctx, rms, client.InNamespace(b.ns))).To(Succeed())
	for i := range rms.Items {
		if rms.Items[i].Status.HostRef == host {
			forceRemove(&rms.Items[i])
		}
	}
}

func (b *bed) recreateHosts() {
	GinkgoHelper()
	for _, h := range b.hosts() {
		recreate(&h, &infrav1.RedfishHost{Spec: h.Spec})
	}
}

func (b *bed) recreateMachines() {
	GinkgoHelper()
	rms := &infrav1.RedfishMachineList{}
	Expect(env.List(ctx, rms, client.InNamespace(b.ns))).To(Succeed())
	for _, rm := range rms.Items {
		recreate(&rm, &infrav1.RedfishMachine{Spec: rm.Spec})
	}
}
