package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/seed"
)

var _ = Describe("Provisioning", Label("provision"), func() {
	It("turns 3 of 5 simulated servers into Running Machines with Nodes, and only they get bootstrap data", func() {
		b := newBed("provision", 5, nil)
		b.waitHostsAvailable(5)
		b.createCluster("prov")
		b.template("workers", infrav1.RedfishMachineSpec{})
		b.machineDeployment("workers", "workers", 3)
		b.waitRunning("workers", 3)

		claimed := map[string]bool{}
		for _, m := range b.machines("workers") {
			rm := &infrav1.RedfishMachine{}
			Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: m.Spec.InfrastructureRef.Name}, rm)).To(Succeed())
			Expect(rm.Status.HostRef).NotTo(BeEmpty())
			Expect(claimed).NotTo(HaveKey(rm.Status.HostRef), "host %s claimed twice", rm.Status.HostRef)
			claimed[rm.Status.HostRef] = true

			By("the Machine carrying the providerID and addresses of its Node")
			Expect(m.Spec.ProviderID).To(Equal(rm.Spec.ProviderID))
			Expect(m.Spec.ProviderID).To(HavePrefix("redfish://" + b.ns + "/" + rm.Status.HostRef + "/"))
			Expect(m.Status.Addresses).To(ContainElement(HaveField("Type", BeEquivalentTo("InternalIP"))))
			node := &corev1.Node{}
			Expect(env.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node)).To(Succeed())
			Expect(node.Spec.ProviderID).To(Equal(m.Spec.ProviderID))

			By("the seed kept once the Node joined: the live image boots with it on every power-on")
			Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: seed.SecretName(rm.Name)}, &corev1.Secret{})).To(Succeed())
		}

		By("bootstrap data reaching exactly the claimed servers")
		fetched := b.os.Fetched()
		Expect(fetched).To(HaveLen(3))
		for server, data := range fetched {
			Expect(claimed).To(HaveKey(server))
			Expect(data).To(Equal([]string{"#cloud-config for workers\n"}))
		}
		By("Prometheus metrics reporting host states and BMC traffic")
		families, err := ctrlmetrics.Registry.Gather()
		Expect(err).NotTo(HaveOccurred())
		provisioned, bmcRequests := 0, 0.0
		for _, f := range families {
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				switch f.GetName() {
				case "caprf_host_state":
					if labels["namespace"] == b.ns && labels["state"] == "Provisioned" && m.GetGauge().GetValue() == 1 {
						provisioned++
					}
				case "caprf_bmc_requests_total":
					bmcRequests += m.GetCounter().GetValue()
				}
			}
		}
		Expect(provisioned).To(Equal(3))
		Expect(bmcRequests).To(BeNumerically(">", 0))

		for _, h := range b.hosts() {
			if !claimed[h.Name] {
				Expect(h.Status.State).To(Equal(infrav1.HostStateAvailable))
				Expect(b.server(h.Name).Stats().Boots).To(BeZero(), "unclaimed %s was booted", h.Name)
			} else {
				Expect(h.Status.State).To(Equal(infrav1.HostStateProvisioned))
				Expect(h.Status.Inventory.NICs).To(HaveLen(2))
			}
		}
	})
})
