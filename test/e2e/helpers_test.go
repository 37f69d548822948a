package e2e

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/simos"
	"github.com/caprf/cluster-api-provider-redfish/internal/testenv"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// bed is one scenario's world: a namespace, a simulated fleet running the simulated OS, one
// RedfishHost per server, and a Cluster.
type bed struct {
	ns      string
	fleet   *simulator.Fleet
	os      *simos.OS
	cluster *clusterv1.Cluster
}

// newBed starts n simulated servers and registers them as RedfishHosts; mutate may change each
// host before it is created.
func newBed(name string, n int, mutate func(i int, h *infrav1.RedfishHost)) *bed {
	GinkgoHelper()
	ns, err := env.CreateNamespace(ctx, name)
	Expect(err).NotTo(HaveOccurred())
	fleet, err := simulator.StartFleet(simulator.FleetOptions{Servers: n, NamePrefix: name, PowerLatency: 50 * time.Millisecond, TaskDuration: time.Second})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(fleet.Close)
	// The simulated kubelet talks to the API server directly, as a real one does (no cache).
	kubelet, err := testenv.NewWatchClient(env.Config)
	Expect(err).NotTo(HaveOccurred())
	b := &bed{ns: ns.Name, fleet: fleet, os: simos.New(kubelet, seedBaseURL)}
	b.os.Attach(fleet)
	for i, s := range fleet.Servers {
		user, pass := s.Credentials()
		Expect(env.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: s.ID() + "-bmc"},
			StringData: map[string]string{"username": user, "password": pass},
		})).To(Succeed())
		h := &infrav1.RedfishHost{
			ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: s.ID()},
			Spec: infrav1.RedfishHostSpec{
				BMC:            infrav1.BMC{Address: s.Address(), CredentialsName: s.ID() + "-bmc"},
				BootMACAddress: s.MACs()[0],
			},
		}
		if mutate != nil {
			mutate(i, h)
		}
		Expect(env.Create(ctx, h)).To(Succeed())
	}
	return b
}

func (b *bed) server(id string) *simulator.Server {
	for _, s := range b.fleet.Servers {
		if s.ID() == id {
			return s
		}
	}
	return nil
}

func (b *bed) hosts() []infrav1.RedfishHost {
	GinkgoHelper()
	list := &infrav1.RedfishHostList{}
	Expect(env.List(ctx, list, client.InNamespace(b.ns))).To(Succeed())
	return list.Items
}

func (b *bed) waitHostsAvailable(n int) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		available := 0
		for _, h := range b.hosts() {
			if h.Status.State == infrav1.HostStateAvailable {
				available++
			}
		}
		g.Expect(available).To(Equal(n))
	}).Should(Succeed())
}

// createCluster creates a Cluster with a RedfishCluster and its workload kubeconfig, which points
// back at the test API server.
func (b *bed) createCluster(name string) {
	GinkgoHelper()
	Expect(env.Create(ctx, &infrav1.RedfishCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: name},
		Spec:       infrav1.RedfishClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "10.0.0.10", Port: 6443}},
	})).To(Succeed())
	b.cluster = &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: name},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "RedfishCluster", Name: name,
		}},
	}
	Expect(env.Create(ctx, b.cluster)).To(Succeed())
	Expect(env.CreateKubeconfigSecret(ctx, b.cluster)).To(Succeed())
}

// template creates a RedfishMachineTemplate.
func (b *bed) template(name string, spec infrav1.RedfishMachineSpec) *infrav1.RedfishMachineTemplate {
	GinkgoHelper()
	if spec.Image == nil {
		spec.Image = &infrav1.Image{URL: "http://images.example/" + name + ".iso", Format: "live-iso"}
	}
	t := &infrav1.RedfishMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: name},
		Spec:       infrav1.RedfishMachineTemplateSpec{Template: infrav1.RedfishMachineTemplateResource{Spec: spec}},
	}
	Expect(env.Create(ctx, t)).To(Succeed())
	return t
}

// machineDeployment creates a MachineDeployment whose bootstrap data is a Secret saying
// "#cloud-config for <md>" (so a test can tell which server got which data).
func (b *bed) machineDeployment(name, template string, replicas int32) *clusterv1.MachineDeployment {
	GinkgoHelper()
	data := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: name + "-bootstrap"},
		StringData: map[string]string{"value": "#cloud-config for " + name + "\n", "format": "cloud-config"},
	}
	Expect(env.Create(ctx, data)).To(Succeed())
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: name},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: b.cluster.Name,
			Replicas:    ptr.To(replicas),
			Rollout: clusterv1.MachineDeploymentRolloutSpec{Strategy: clusterv1.MachineDeploymentRolloutStrategy{
				Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
				RollingUpdate: clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{
					MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromInt32(1)),
				},
			}},
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: b.cluster.Name,
				Version:     "v1.36.3",
				Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To(data.Name)},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: infrav1.GroupVersion.Group, Kind: "RedfishMachineTemplate", Name: template,
				},
			}},
		},
	}
	Expect(env.Create(ctx, md)).To(Succeed())
	return md
}

func (b *bed) machines(md string) []clusterv1.Machine {
	GinkgoHelper()
	list := &clusterv1.MachineList{}
	Expect(env.List(ctx, list, client.InNamespace(b.ns), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md})).To(Succeed())
	return list.Items
}

// waitRunning waits until md has n Machines, all Running with a nodeRef, and no others.
func (b *bed) waitRunning(md string, n int) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		ms := b.machines(md)
		g.Expect(ms).To(HaveLen(n))
		for _, m := range ms {
			g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), func() string { return "Machine " + m.Name + "\n" + b.dump() })
			g.Expect(m.Status.NodeRef.IsDefined()).To(BeTrue(), "Machine %s has no nodeRef", m.Name)
		}
		g.Expect(b.os.Errors()).To(BeEmpty())
	}, 3*time.Minute).Should(Succeed())
}

// hostOf returns the name of the host the RedfishMachine of a Machine claimed.
func (b *bed) hostOf(m clusterv1.Machine) string {
	GinkgoHelper()
	rm := &infrav1.RedfishMachine{}
	Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: m.Spec.InfrastructureRef.Name}, rm)).To(Succeed())
	return rm.Status.HostRef
}

// dump describes hosts and machines for failure messages.
func (b *bed) dump() string {
	out := "hosts: " + describeHosts(b.hosts()) + "\n"
	for _, srv := range b.fleet.Servers {
		st := srv.Stats()
		out += fmt.Sprintf("  server %s power=%s boots=%d resets=%v fetched=%d\n", srv.ID(), srv.PowerState(), st.Boots, st.Resets, len(b.os.Fetched()[srv.ID()]))
	}
	for _, h := range b.hosts() {
		out += fmt.Sprintf("  host %s bootIssuedAt=%v power=%s\n", h.Name, h.Status.BootIssuedAt, h.Status.PowerState)
	}
	for _, err := range b.os.Errors() {
		out += "  simulated OS: " + err.Error() + "\n"
	}
	rms := &infrav1.RedfishMachineList{}
	_ = env.List(ctx, rms, client.InNamespace(b.ns))
	for _, rm := range rms.Items {
		for _, c := range rm.Status.Conditions {
			out += fmt.Sprintf("  %s %s=%s %s: %s\n", rm.Name, c.Type, c.Status, c.Reason, c.Message)
		}
	}
	mds := &clusterv1.MachineDeploymentList{}
	_ = env.List(ctx, mds, client.InNamespace(b.ns))
	for _, md := range mds.Items {
		for _, c := range md.Status.Conditions {
			out += fmt.Sprintf("  MachineDeployment %s %s=%s %s: %s\n", md.Name, c.Type, c.Status, c.Reason, c.Message)
		}
	}
	mss := &clusterv1.MachineSetList{}
	_ = env.List(ctx, mss, client.InNamespace(b.ns))
	for _, ms := range mss.Items {
		out += fmt.Sprintf("  MachineSet %s replicas=%d infra=%s\n", ms.Name, ptr.Deref(ms.Spec.Replicas, -1), ms.Spec.Template.Spec.InfrastructureRef.Name)
	}
	ms := &clusterv1.MachineList{}
	_ = env.List(ctx, ms, client.InNamespace(b.ns))
	for _, m := range ms.Items {
		for _, c := range m.Status.Conditions {
			if c.Status != metav1.ConditionTrue && c.Type != "Paused" && c.Type != "Deleting" {
				out += fmt.Sprintf("  Machine %s %s=%s %s: %s\n", m.Name, c.Type, c.Status, c.Reason, c.Message)
			}
		}
	}
	for _, h := range b.hosts() {
		for _, c := range h.Status.Conditions {
			out += fmt.Sprintf("  %s %s=%s %s: %s\n", h.Name, c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return out
}

func describeHosts(hs []infrav1.RedfishHost) string {
	s := ""
	for _, h := range hs {
		consumer := ""
		if h.Status.Claim != nil {
			consumer = h.Status.Claim.Consumer.Name
		}
		s += fmt.Sprintf("%s=%s(%s) ", h.Name, h.Status.State, consumer)
	}
	return s
}

func secret(ns, name, user, pass string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		StringData: map[string]string{"username": user, "password": pass},
	}
}

// controlPlane creates one standalone control-plane Machine on a RedfishMachine and waits for it
// to run: CAPI reports worker Machines Available (what rollouts wait for) only once the cluster's
// control plane is initialized.
func (b *bed) controlPlane() string {
	GinkgoHelper()
	data := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "cp-bootstrap"},
		StringData: map[string]string{"value": "#cloud-config for the control plane\n", "format": "cloud-config"},
	}
	Expect(env.Create(ctx, data)).To(Succeed())
	rm := &infrav1.RedfishMachine{
		// Node names are the Machine names, and every bed's "workload cluster" is the one API
		// server: the name must be unique across beds.
		ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: b.ns + "-cp", Labels: map[string]string{clusterv1.ClusterNameLabel: b.cluster.Name}},
		Spec:       infrav1.RedfishMachineSpec{Image: &infrav1.Image{URL: "http://images.example/cp.iso"}},
	}
	Expect(env.Create(ctx, rm)).To(Succeed())
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: rm.Name, Labels: map[string]string{
			clusterv1.ClusterNameLabel: b.cluster.Name, clusterv1.MachineControlPlaneLabel: "",
		}},
		Spec: clusterv1.MachineSpec{
			ClusterName: b.cluster.Name, Version: "v1.36.3",
			Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To(data.Name)},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "RedfishMachine", Name: rm.Name,
			},
		},
	}
	Expect(env.Create(ctx, m)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(b.cluster), b.cluster)).To(Succeed())
		g.Expect(conditions.IsTrue(b.cluster, clusterv1.ClusterControlPlaneInitializedCondition)).To(BeTrue(), func() string { return b.dump() })
	}, 3*time.Minute).Should(Succeed())
	Expect(env.Get(ctx, client.ObjectKeyFromObject(rm), rm)).To(Succeed())
	return rm.Status.HostRef
}
