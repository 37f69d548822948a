// Package claim holds what the machine and host controllers both need to know about a claim: who
// owns a Machine, what a claim records, and how a providerID names a host. The host controller
// uses it to rebuild a claim when a host comes back without status (`clusterctl move`, a backup
// restored), the machine controller to write claims.
package claim

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// ProviderID is the Node providerID of a machine on a host: unique per claim, so a reused host
// never makes CAPI confuse the old Node with the new one.
func ProviderID(namespace, host, machine string) string {
	return fmt.Sprintf("redfish://%s/%s/%s", namespace, host, machine)
}

// HostOf returns the host a providerID names in namespace, or "" when it names none there.
func HostOf(providerID, namespace string) string {
	rest, ok := strings.CutPrefix(providerID, "redfish://"+namespace+"/")
	if !ok {
		return ""
	}
	host, _, ok := strings.Cut(rest, "/")
	if !ok {
		return ""
	}
	return host
}

// MachineOf returns the namespace and the RedfishMachine a providerID names.
func MachineOf(providerID string) (namespace, machine string, ok bool) {
	rest, ok := strings.CutPrefix(providerID, "redfish://")
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", false
	}
	return parts[0], parts[2], true
}

// Owner names the MachineDeployment (or control plane, or bare MachineSet) a Machine belongs to,
// from the labels CAPI puts on every Machine; nil for a standalone Machine.
func Owner(m *clusterv1.Machine, cluster *clusterv1.Cluster) *infrav1.ObjectRef {
	ref := func(group, kind, name string) *infrav1.ObjectRef {
		return &infrav1.ObjectRef{APIGroup: group, Kind: kind, Namespace: m.Namespace, Name: name}
	}
	if name := m.Labels[clusterv1.MachineDeploymentNameLabel]; name != "" {
		return ref(clusterv1.GroupVersion.Group, "MachineDeployment", name)
	}
	if _, ok := m.Labels[clusterv1.MachineControlPlaneLabel]; ok {
		if cp := cluster.Spec.ControlPlaneRef; cp.IsDefined() {
			return ref(cp.APIGroup, cp.Kind, cp.Name)
		}
	}
	if name := m.Labels[clusterv1.MachineSetNameLabel]; name != "" {
		return ref(clusterv1.GroupVersion.Group, "MachineSet", name)
	}
	return nil
}

// For returns the claim rm makes: the consumer and owner, and the intent copied from rm's spec
// (nodeReuse, cleaning, image, boot method), defaults filled in.
func For(rm *infrav1.RedfishMachine, owner *infrav1.ObjectRef) *infrav1.HostClaim {
	c := &infrav1.HostClaim{
		Consumer:              infrav1.ObjectRef{APIGroup: infrav1.GroupVersion.Group, Kind: "RedfishMachine", Namespace: rm.Namespace, Name: rm.Name},
		ConsumerUID:           string(rm.UID),
		Owner:                 owner,
		NodeReuse:             rm.Spec.NodeReuse,
		AutomatedCleaningMode: rm.Spec.AutomatedCleaningMode,
		Image:                 rm.Spec.Image.DeepCopy(),
		BootMethod:            rm.Spec.BootMethod,
		ClusterName:           rm.Labels[clusterv1.ClusterNameLabel],
		Since:                 metav1.Now(),
	}
	if c.AutomatedCleaningMode == "" {
		c.AutomatedCleaningMode = infrav1.CleaningModeMetadata
	}
	if c.BootMethod == "" {
		c.BootMethod = infrav1.BootMethodVirtualMedia
	}
	return c
}
