package e2e

import (
	"fmt"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/sample"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/simos"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/testenv"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// fleets numbers the beds' simulated fleets.
var fleets atomic.Int32

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
	return startBed(name, n, bedOptions{mutate: mutate, withOS: true})
}

// newBedWithoutOSMutated is newBedWithoutOS with hosts changed by mutate before they are created.
func newBedWithoutOSMutated(name string, n int, mutate func(i int, h *infrav1.RedfishHost)) *bed {
	GinkgoHelper()
	return startBed(name, n, bedOptions{mutate: mutate})
}

// newBedWithoutOS is newBed with servers that boot nothing: no Node ever joins.
func newBedWithoutOS(name string, n int) *bed {
	GinkgoHelper()
	return startBed(name, n, bedOptions{})
}

type bedOptions struct {
	mutate       func(i int, h *infrav1.RedfishHost)
	withOS       bool
	powerLatency time.Duration          // default 50ms
	fleet        simulator.FleetOptions // erase options, POSTDuration, ShutdownDuration, SingleMediaSlot, TLS and Profiles are taken from here
	prepare      func(*simulator.Fleet) // called before the hosts are registered, e.g. to inject faults
}

func startBed(name string, n int, o bedOptions) *bed {
	GinkgoHelper()
	mutate := o.mutate
	if o.powerLatency == 0 {
		o.powerLatency = 50 * time.Millisecond
	}
	ns, err := env.CreateNamespace(ctx, name)
	Expect(err).NotTo(HaveOccurred())
	// Every bed's servers get MACs and UUIDs of their own: one server is registered only once.
	fleet, err := simulator.StartFleet(simulator.FleetOptions{
		Servers: n, NamePrefix: name, Fleet: uint16(fleets.Add(1)), PowerLatency: o.powerLatency, TaskDuration: time.Second, //nolint:gosec // far fewer than 65535 beds.
		EraseDuration: o.fleet.EraseDuration, POSTDuration: o.fleet.POSTDuration, NoSecureErase: o.fleet.NoSecureErase,
		NoSecureEraseDrives: o.fleet.NoSecureEraseDrives, TLS: o.fleet.TLS,
		EmptyBays: o.fleet.EmptyBays, EraseWithoutMonitor: o.fleet.EraseWithoutMonitor, ShutdownDuration: o.fleet.ShutdownDuration, SingleMediaSlot: o.fleet.SingleMediaSlot, Profiles: o.fleet.Profiles,
		Password: "bmc-" + sweepMarker + "-pw", // searched for everywhere (sweep_test.go)
		// DHCP on the provisioning network chains network boots to the seed server's iPXE endpoint.
		IPXEChainURL: seedBaseURL + "/v1/ipxe", FirmwareRootCAs: seedCAs,
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(fleet.Close)
	for _, s := range fleet.Servers {
		s.OnRequest(sweepBMCRequest)
	}
	// The simulated kubelet talks to the API server directly, as a real one does (no cache).
	kubelet, err := testenv.NewWatchClient(env.Config)
	Expect(err).NotTo(HaveOccurred())
	b := &bed{ns: ns.Name, fleet: fleet, os: simos.New(kubelet)}
	b.os.RootCAs = seedCAs
	if o.withOS {
		b.os.Attach(fleet)
	}
	if o.prepare != nil {
		o.prepare(fleet)
	}
	// When the spec ends its servers stop and their loopback ports go back to the system: the
	// hosts go too (finalizers dropped), or a later bed's server on a reused port would be refused
	// as a BMC registered twice.
	DeferCleanup(func() {
		list := &infrav1.RedfishHostList{}
		Eventually(func() error { return env.List(ctx, list, client.InNamespace(b.ns)) }).Should(Succeed(),
			"listing the bed's hosts to remove them: a later bed's server on a reused port would be refused")
		for i := range list.Items {
			key := client.ObjectKeyFromObject(&list.Items[i])
			// Deleted first, then its finalizers dropped, until it is gone: dropped before the
			// deletion, the host controller could add its finalizer back in between, and a
			// provisioned host then stayed deleting for good, its BMC address taken.
			Eventually(func() error {
				if err := client.IgnoreNotFound(env.Delete(ctx, &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})); err != nil {
					return err
				}
				h := &infrav1.RedfishHost{}
				if err := env.Get(ctx, key, h); apierrors.IsNotFound(err) {
					return nil
				} else if err != nil {
					return err
				}
				if len(h.Finalizers) > 0 {
					before := h.DeepCopy()
					h.Finalizers = nil
					if err := env.Patch(ctx, h, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
						return err
					}
				}
				return fmt.Errorf("host %s still there", key)
			}).Should(Succeed(), "removing the bed's hosts: a later bed's server on a reused port would be refused")
		}
	})
	for i, s := range fleet.Servers {
		creds, h := sample.Host(b.ns, s)
		Expect(env.Create(ctx, creds)).To(Succeed())
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
		g.Expect(available).To(Equal(n), b.dump)
	}).Should(Succeed())
}

// createCluster creates a Cluster with a RedfishCluster and its workload kubeconfig, which points
// back at the test API server.
func (b *bed) createCluster(name string) {
	GinkgoHelper()
	rc, c := sample.Cluster(b.ns, name, "10.0.0.10")
	Expect(env.Create(ctx, rc)).To(Succeed())
	b.cluster = c
	Expect(env.Create(ctx, b.cluster)).To(Succeed())
	Expect(env.CreateKubeconfigSecret(ctx, b.cluster)).To(Succeed())
}

// template creates a RedfishMachineTemplate.
func (b *bed) template(name string, spec infrav1.RedfishMachineSpec) *infrav1.RedfishMachineTemplate {
	GinkgoHelper()
	t := sample.MachineTemplate(b.ns, name, spec)
	Expect(env.Create(ctx, t)).To(Succeed())
	return t
}

// machineDeployment creates a MachineDeployment (maxSurge 0, maxUnavailable 1) whose bootstrap data
// is a Secret saying "#cloud-config for <md>" (so a test can tell which server got which data).
func (b *bed) machineDeployment(name, template string, replicas int32) *clusterv1.MachineDeployment {
	GinkgoHelper()
	data, md := sample.MachineDeployment(b.ns, b.cluster.Name, name, template, replicas, 0, 1)
	Expect(env.Create(ctx, data)).To(Succeed())
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
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{infrav1.BMCCredentialsLabel: "true"}},
		StringData: map[string]string{"username": user, "password": pass},
	}
}

// controlPlane creates one standalone control-plane Machine on a RedfishMachine and waits for it
// to run: CAPI reports worker Machines Available (what rollouts wait for) only once the cluster's
// control plane is initialized.
func (b *bed) controlPlane() string {
	GinkgoHelper()
	// Node names are the Machine names, and every bed's "workload cluster" is the one API server:
	// the name must be unique across beds.
	data, rm, m := sample.ControlPlane(b.ns, b.cluster.Name, b.ns+"-cp")
	for _, o := range []client.Object{data, rm, m} {
		Expect(env.Create(ctx, o)).To(Succeed())
	}
	b.waitControlPlaneInitialized()
	Expect(env.Get(ctx, client.ObjectKeyFromObject(rm), rm)).To(Succeed())
	return rm.Status.HostRef
}

// waitControlPlaneInitialized waits until CAPI reports the bed's Cluster's control plane
// initialized.
func (b *bed) waitControlPlaneInitialized() {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(b.cluster), b.cluster)).To(Succeed())
		g.Expect(conditions.IsTrue(b.cluster, clusterv1.ClusterControlPlaneInitializedCondition)).To(BeTrue(), func() string { return b.dump() })
	}, 3*time.Minute).Should(Succeed())
}

// deleteWithoutFinalizers removes all of obj's finalizers by hand and deletes it, as an operator clearing
// a stuck object does, and waits until it is gone. A controller adds its finalizer back to an
// object it sees without one: the deletion goes through only on the version without finalizers,
// else the object would be deleted the ordinary way, its controller cleaning up.
func deleteWithoutFinalizers(key client.ObjectKey, obj client.Object) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		err := env.Get(ctx, key, obj)
		if apierrors.IsNotFound(err) {
			return // deleted by an earlier attempt whose answer was lost
		}
		g.Expect(err).To(Succeed())
		before := obj.DeepCopyObject().(client.Object)
		obj.SetFinalizers(nil)
		g.Expect(env.Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))).To(Succeed())
		rv := obj.GetResourceVersion()
		g.Expect(env.Delete(ctx, obj, client.Preconditions{ResourceVersion: &rv})).To(Succeed())
	}).Should(Succeed())
	Eventually(func() bool { return apierrors.IsNotFound(env.Get(ctx, key, obj)) }).Should(BeTrue())
}
