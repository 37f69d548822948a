package claim

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// The owner a claim records is what nodeReuse reserves the host for: the MachineDeployment of a
// worker, the control plane object of a control-plane Machine, the MachineSet of a bare one.
func TestOwnerIsTheMachineDeploymentOrTheControlPlaneOrTheMachineSet(t *testing.T) {
	cluster := &clusterv1.Cluster{Spec: clusterv1.ClusterSpec{ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
		APIGroup: "controlplane.cluster.x-k8s.io", Kind: "KubeadmControlPlane", Name: "rack-cp",
	}}}
	machine := func(labels map[string]string) *clusterv1.Machine {
		return &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m", Labels: labels}}
	}
	for _, tc := range []struct {
		name    string
		m       *clusterv1.Machine
		cluster *clusterv1.Cluster
		want    *infrav1.ObjectRef
	}{
		{"worker", machine(map[string]string{clusterv1.MachineDeploymentNameLabel: "workers", clusterv1.MachineSetNameLabel: "workers-x"}), cluster,
			&infrav1.ObjectRef{APIGroup: "cluster.x-k8s.io", Kind: "MachineDeployment", Namespace: "ns", Name: "workers"}},
		{"control plane", machine(map[string]string{clusterv1.MachineControlPlaneLabel: ""}), cluster,
			&infrav1.ObjectRef{APIGroup: "controlplane.cluster.x-k8s.io", Kind: "KubeadmControlPlane", Namespace: "ns", Name: "rack-cp"}},
		{"control-plane label without a control plane", machine(map[string]string{clusterv1.MachineControlPlaneLabel: ""}), &clusterv1.Cluster{}, nil},
		{"bare MachineSet", machine(map[string]string{clusterv1.MachineSetNameLabel: "pool"}), cluster,
			&infrav1.ObjectRef{APIGroup: "cluster.x-k8s.io", Kind: "MachineSet", Namespace: "ns", Name: "pool"}},
		{"standalone", machine(nil), cluster, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Owner(tc.m, tc.cluster)
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Errorf("Owner = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestMachineOf(t *testing.T) {
	for id, want := range map[string][2]string{
		"redfish://rack/server-1/workers-abc": {"rack", "workers-abc"},
		ProviderID("ns", "h", "m"):            {"ns", "m"},
		"redfish://rack/server-1":             {},
		"redfish://rack//m":                   {},
		"aws:///us-east-1a/i-123":             {},
		"redfish://a/b/c/d":                   {},
	} {
		ns, m, ok := MachineOf(id)
		if got := [2]string{ns, m}; got != want || ok != (want != [2]string{}) {
			t.Errorf("MachineOf(%q) = %q, %q, %t; want %q", id, ns, m, ok, want)
		}
	}
}
