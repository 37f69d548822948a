package e2e

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/sample"
)

var _ = Describe("A cluster's disruption budget", func() {
	It("maintains every worker host of a cluster, never more at once than the policy selecting the cluster allows, the MachineDeployment never below replicas minus that", Label("maintenance-budget"), func() {
		const workers, budget = 8, 2
		// The control plane's server, the workers', and a spare for each replacement under way.
		b := clusterBed("mcbudget", 1+workers+budget)
		data, md := sample.MachineDeployment(b.ns, b.cluster.Name, "workers", "workers", workers, 0, budget)
		Expect(env.Create(ctx, data)).To(Succeed())
		Expect(env.Create(ctx, md)).To(Succeed())
		b.waitRunning("workers", workers)

		By("a policy selecting the cluster by its labels, given to the Cluster afterwards")
		policy := &expv1.RedfishMaintenancePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "prod"},
			Spec: expv1.RedfishMaintenancePolicySpec{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod"}},
				MaxUnavailable: ptr.To(intstr.FromInt32(budget))}}
		Expect(env.Create(ctx, policy)).To(Succeed())
		c := &clusterv1.Cluster{}
		Expect(env.Get(ctx, client.ObjectKeyFromObject(b.cluster), c)).To(Succeed())
		before := c.DeepCopy()
		c.Labels = map[string]string{"tier": "prod"}
		Expect(env.Patch(ctx, c, client.MergeFrom(before))).To(Succeed())
		serving := 0
		for _, h := range b.hosts() {
			if h.Status.Claim != nil {
				serving++
			}
		}
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(policy), policy)).To(Succeed())
			g.Expect(policy.Status.Hosts).To(BeEquivalentTo(serving), "the policy counts the hosts serving the cluster, not the spares")
		}).Should(Succeed())

		By("a maintenance of every worker's host, sampled continuously")
		var peakOut atomic.Int32
		var lowRunning atomic.Int32
		lowRunning.Store(math.MaxInt32)
		sampleCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			for sampleCtx.Err() == nil {
				ms := &expv1.RedfishMaintenanceList{}
				machines := &clusterv1.MachineList{}
				if env.List(sampleCtx, ms, client.InNamespace(b.ns)) != nil ||
					env.List(sampleCtx, machines, client.InNamespace(b.ns), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: "workers"}) != nil {
					continue
				}
				out, running := int32(0), int32(0)
				for _, m := range ms.Items {
					if m.Status.Stage == expv1.StageDraining || m.Status.Stage == expv1.StageInMaintenance {
						out++
					}
				}
				for _, m := range machines.Items {
					if m.DeletionTimestamp.IsZero() && m.Status.Phase == string(clusterv1.MachinePhaseRunning) && m.Status.NodeRef.IsDefined() {
						running++
					}
				}
				if out > peakOut.Load() {
					peakOut.Store(out)
				}
				if running < lowRunning.Load() {
					lowRunning.Store(running)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
		DeferCleanup(func() { stop(); wg.Wait() })
		var names []string
		for i, m := range b.machines("workers") {
			name := fmt.Sprintf("bios-%d", i)
			b.maintenance(name, b.hostOf(m), expv1.Enforced)
			names = append(names, name)
		}
		for _, n := range names {
			b.waitStage(n, expv1.StageCompleted)
		}
		b.waitRunning("workers", workers)
		stop()
		wg.Wait()
		GinkgoWriter.Printf("peak in maintenance %d, fewest running workers %d\n", peakOut.Load(), lowRunning.Load())
		Expect(peakOut.Load()).To(BeNumerically("<=", budget), "hosts drained or in maintenance at once")
		Expect(peakOut.Load()).To(BeNumerically(">", 1), "the budget was never used in parallel")
		Expect(lowRunning.Load()).To(BeNumerically(">=", workers-budget), "running workers")
		for _, h := range b.hosts() {
			Expect(h.Spec.RebootRequests).To(BeEmpty())
			Expect(h.Status.State).To(BeElementOf(infrav1.HostStateAvailable, infrav1.HostStateProvisioned))
		}
	})
})
