// Package sample builds the objects of a small cluster on simulated servers: BMC credentials and
// RedfishHosts, a Cluster with its RedfishCluster, RedfishMachineTemplates, a MachineDeployment and
// a standalone control-plane Machine. Bootstrap data is a plain Secret (no bootstrap provider runs
// in the embedded control plane). The embedded demo and the e2e suite build their worlds from it.
package sample

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// KubernetesVersion is the version the sample Machines ask for.
const KubernetesVersion = "v1.36.3"

// Host returns the credentials Secret and the RedfishHost that register a simulated server.
func Host(ns string, s *simulator.Server) (*corev1.Secret, *infrav1.RedfishHost) {
	user, pass := s.Credentials()
	secret := &corev1.Secret{
		// The move label: `clusterctl move` takes the credentials along with the hosts; the
		// credentials label: only such Secrets are sent to BMCs.
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.ID() + "-bmc", Labels: map[string]string{clusterctlv1.ClusterctlMoveLabel: "", infrav1.BMCCredentialsLabel: "true"}},
		StringData: map[string]string{"username": user, "password": pass},
	}
	host := &infrav1.RedfishHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.ID()},
		Spec: infrav1.RedfishHostSpec{
			BMC:            infrav1.BMC{Address: s.Address(), CredentialsName: secret.Name},
			BootMACAddress: s.MACs()[0],
		},
	}
	return secret, host
}

// Cluster returns a RedfishCluster and the Cluster that uses it.
func Cluster(ns, name, endpoint string) (*infrav1.RedfishCluster, *clusterv1.Cluster) {
	rc := &infrav1.RedfishCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       infrav1.RedfishClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: endpoint, Port: 6443}},
	}
	c := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "RedfishCluster", Name: name,
		}},
	}
	return rc, c
}

// MachineTemplate returns a RedfishMachineTemplate; without an image in spec it boots
// http://images.example/<name>.iso.
func MachineTemplate(ns, name string, spec infrav1.RedfishMachineSpec) *infrav1.RedfishMachineTemplate {
	if spec.Image == nil {
		spec.Image = &infrav1.Image{URL: "http://images.example/" + name + ".iso", Format: "live-iso"}
	}
	return &infrav1.RedfishMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       infrav1.RedfishMachineTemplateSpec{Template: infrav1.RedfishMachineTemplateResource{Spec: spec}},
	}
}

// BootstrapData returns a cloud-config bootstrap data Secret saying "#cloud-config for <what>", so a
// test can tell which server got which data.
func BootstrapData(ns, name, what string) *corev1.Secret {
	return &corev1.Secret{
		// A bootstrap provider's data Secret is owned by its config and moves with the Machine;
		// this stand-in carries the move label so that `clusterctl move` takes it along.
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterctlv1.ClusterctlMoveLabel: ""}},
		StringData: map[string]string{"value": "#cloud-config for " + what + "\n", "format": "cloud-config"},
	}
}

// MachineDeployment returns the bootstrap data Secret and a MachineDeployment of replicas Machines
// on template, rolling one Machine at a time (maxSurge, maxUnavailable).
func MachineDeployment(ns, cluster, name, template string, replicas int32, maxSurge, maxUnavailable int32) (*corev1.Secret, *clusterv1.MachineDeployment) {
	data := BootstrapData(ns, name+"-bootstrap", name)
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: cluster,
			Replicas:    ptr.To(replicas),
			Rollout: clusterv1.MachineDeploymentRolloutSpec{Strategy: clusterv1.MachineDeploymentRolloutStrategy{
				Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
				RollingUpdate: clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{
					MaxSurge: ptr.To(intstr.FromInt32(maxSurge)), MaxUnavailable: ptr.To(intstr.FromInt32(maxUnavailable)),
				},
			}},
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: cluster,
				Version:     KubernetesVersion,
				Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To(data.Name)},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: infrav1.GroupVersion.Group, Kind: "RedfishMachineTemplate", Name: template,
				},
			}},
		},
	}
	return data, md
}

// ControlPlane returns the bootstrap data Secret, RedfishMachine and Machine of one standalone
// control-plane Machine named name. CAPI reports worker Machines Available (what rollouts wait
// for) only once a control-plane Machine has a Node.
func ControlPlane(ns, cluster, name string) (*corev1.Secret, *infrav1.RedfishMachine, *clusterv1.Machine) {
	data := BootstrapData(ns, name+"-bootstrap", "the control plane")
	rm := &infrav1.RedfishMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}},
		Spec:       infrav1.RedfishMachineSpec{Image: &infrav1.Image{URL: "http://images.example/cp.iso"}},
	}
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			clusterv1.ClusterNameLabel: cluster, clusterv1.MachineControlPlaneLabel: "",
		}},
		Spec: clusterv1.MachineSpec{
			ClusterName: cluster, Version: KubernetesVersion,
			Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To(data.Name)},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "RedfishMachine", Name: rm.Name,
			},
		},
	}
	return data, rm, m
}

// RebootRemediation returns a RedfishRemediationTemplate (a hard reboot) and a MachineHealthCheck
// that sends the MachineDeployment md's Machines to it when their Node is NotReady for a second.
func RebootRemediation(ns, cluster, md string) (*infrav1.RedfishRemediationTemplate, *clusterv1.MachineHealthCheck) {
	tmpl := &infrav1.RedfishRemediationTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reboot"},
		Spec: infrav1.RedfishRemediationTemplateSpec{Template: infrav1.RedfishRemediationTemplateResource{
			Spec: infrav1.RedfishRemediationSpec{Mode: infrav1.RebootModeHard},
		}},
	}
	mhc := &clusterv1.MachineHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: md},
		Spec: clusterv1.MachineHealthCheckSpec{
			ClusterName: cluster,
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: md}},
			Checks: clusterv1.MachineHealthCheckChecks{UnhealthyNodeConditions: []clusterv1.UnhealthyNodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionFalse, TimeoutSeconds: ptr.To[int32](1)},
			}},
			Remediation: clusterv1.MachineHealthCheckRemediation{TemplateRef: clusterv1.MachineHealthCheckRemediationTemplateReference{
				APIVersion: infrav1.GroupVersion.String(), Kind: "RedfishRemediationTemplate", Name: tmpl.Name,
			}},
		},
	}
	return tmpl, mhc
}

// NotReady marks node NotReady, as a kubelet that stopped posting would leave it.
func NotReady(node *corev1.Node) {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			node.Status.Conditions[i].Status = corev1.ConditionFalse
			node.Status.Conditions[i].LastTransitionTime = metav1.Now()
		}
	}
}
