package e2e

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

var _ = Describe("Foundation", Label("foundation"), func() {
	It("real CAPI MachineDeployment clones RedfishMachines that carry the template's spec", func() {
		ns, err := env.CreateNamespace(ctx, "foundation")
		Expect(err).NotTo(HaveOccurred())

		rc := &infrav1.RedfishCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "demo"},
			Spec: infrav1.RedfishClusterSpec{
				ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "10.0.0.10", Port: 6443},
			},
		}
		Expect(env.Create(ctx, rc)).To(Succeed())

		cluster := &clusterv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "demo"},
			Spec: clusterv1.ClusterSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: infrav1.GroupVersion.Group, Kind: "RedfishCluster", Name: rc.Name,
				},
			},
		}
		Expect(env.Create(ctx, cluster)).To(Succeed())
		Expect(env.CreateKubeconfigSecret(ctx, cluster)).To(Succeed())

		tmpl := &infrav1.RedfishMachineTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "workers-v1"},
			Spec: infrav1.RedfishMachineTemplateSpec{Template: infrav1.RedfishMachineTemplateResource{
				Spec: infrav1.RedfishMachineSpec{
					HostSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "r1"}},
					Image:                 &infrav1.Image{URL: "http://images.example/ubuntu.iso", Format: "live-iso"},
					BootMethod:            infrav1.BootMethodVirtualMedia,
					NodeReuse:             true,
					AutomatedCleaningMode: infrav1.CleaningModeDisabled,
				},
			}},
		}
		Expect(env.Create(ctx, tmpl)).To(Succeed())

		bootstrap := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "workers-bootstrap"},
			StringData: map[string]string{"value": "#cloud-config\n", "format": "cloud-config"},
		}
		Expect(env.Create(ctx, bootstrap)).To(Succeed())

		md := &clusterv1.MachineDeployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "workers"},
			Spec: clusterv1.MachineDeploymentSpec{
				ClusterName: cluster.Name,
				Replicas:    ptr.To[int32](3),
				Template: clusterv1.MachineTemplateSpec{
					Spec: clusterv1.MachineSpec{
						ClusterName: cluster.Name,
						Version:     "v1.36.3",
						Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To(bootstrap.Name)},
						InfrastructureRef: clusterv1.ContractVersionedObjectReference{
							APIGroup: infrav1.GroupVersion.Group, Kind: "RedfishMachineTemplate", Name: tmpl.Name,
						},
					},
				},
			},
		}
		// No rollout strategy set: CAPI's own defaulting webhook, running in the environment, fills it.
		Expect(env.Create(ctx, md)).To(Succeed())

		By("CAPI creating a MachineSet and three Machines, each with a RedfishMachine")
		machines := &infrav1.RedfishMachineList{}
		Eventually(func(g Gomega) {
			g.Expect(env.List(ctx, machines, client.InNamespace(ns.Name))).To(Succeed())
			g.Expect(machines.Items).To(HaveLen(3))
			for _, m := range machines.Items {
				g.Expect(m.Spec).To(Equal(tmpl.Spec.Template.Spec), "RedfishMachine %s must carry the template's spec", m.Name)
				g.Expect(m.Labels).To(HaveKeyWithValue(clusterv1.ClusterNameLabel, cluster.Name))
				g.Expect(m.Labels).To(HaveKeyWithValue(clusterv1.MachineDeploymentNameLabel, md.Name))
				// The Machine controller takes over ownership from the MachineSet that cloned it.
				owner := metav1.GetControllerOf(&m)
				g.Expect(owner).NotTo(BeNil(), "RedfishMachine %s has no controller owner", m.Name)
				g.Expect(owner.Kind).To(Equal("Machine"), fmt.Sprintf("controller of %s", m.Name))
			}
		}, 60*time.Second, 250*time.Millisecond).Should(Succeed())

		By("the RedfishMachineTemplate being deletable while its machines live on")
		Expect(env.Delete(ctx, tmpl)).To(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(env.List(ctx, machines, client.InNamespace(ns.Name))).To(Succeed())
			g.Expect(machines.Items).To(HaveLen(3))
			for _, m := range machines.Items {
				g.Expect(m.Spec.NodeReuse).To(BeTrue())
				g.Expect(m.Spec.AutomatedCleaningMode).To(Equal(infrav1.CleaningModeDisabled))
			}
		}, 2*time.Second, 250*time.Millisecond).Should(Succeed())
	})
})
