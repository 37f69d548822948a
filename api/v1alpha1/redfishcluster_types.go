package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// ClusterFinalizer lets the RedfishCluster controller clean up before the object goes.
const ClusterFinalizer = "redfishcluster.infrastructure.cluster.x-k8s.io"

// RedfishClusterSpec is the desired state of a cluster's infrastructure.
type RedfishClusterSpec struct {
	// controlPlaneEndpoint is the address of the cluster's API server (a VIP or load balancer the
	// platform team provides; bare metal has no cloud load balancer).
	// +optional
	ControlPlaneEndpoint clusterv1.APIEndpoint `json:"controlPlaneEndpoint,omitzero"`

	// failureDomainLabel is the host label whose values become the cluster's failure domains.
	// +optional
	// +kubebuilder:default="topology.kubernetes.io/zone"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	FailureDomainLabel string `json:"failureDomainLabel,omitempty"`

	// hostSelector restricts which hosts contribute failure domains.
	// +optional
	HostSelector *metav1.LabelSelector `json:"hostSelector,omitempty"`
}

// RedfishClusterInitializationStatus is the CAPI v1beta2 initialization contract.
// +kubebuilder:validation:MinProperties=1
type RedfishClusterInitializationStatus struct {
	// provisioned is true when the cluster infrastructure is ready.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// RedfishClusterStatus is the observed state of a cluster's infrastructure.
type RedfishClusterStatus struct {
	// initialization reports the CAPI provisioning milestone.
	// +optional
	Initialization RedfishClusterInitializationStatus `json:"initialization,omitzero"`

	// failureDomains found on the hosts.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	FailureDomains []clusterv1.FailureDomain `json:"failureDomains,omitempty"`

	// conditions of the cluster infrastructure. Ready is mirrored into the Cluster's
	// InfrastructureReady.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:resource:path=redfishclusters,scope=Namespaced,categories=cluster-api,shortName=rfc
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
// +kubebuilder:printcolumn:name="Endpoint",type="string",JSONPath=".spec.controlPlaneEndpoint.host"
// +kubebuilder:printcolumn:name="Provisioned",type="boolean",JSONPath=".status.initialization.provisioned"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// RedfishCluster is the CAPI infrastructure cluster for clusters built on RedfishHosts.
type RedfishCluster struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec RedfishClusterSpec `json:"spec,omitzero"`
	// +optional
	Status RedfishClusterStatus `json:"status,omitzero"`
}

// GetConditions returns the conditions of the cluster.
func (c *RedfishCluster) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions sets the conditions of the cluster.
func (c *RedfishCluster) SetConditions(conds []metav1.Condition) { c.Status.Conditions = conds }

// +kubebuilder:object:root=true

// RedfishClusterList is a list of RedfishClusters.
type RedfishClusterList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RedfishCluster `json:"items"`
}

// RedfishClusterTemplateResource is what ClusterClass clones into a RedfishCluster.
type RedfishClusterTemplateResource struct {
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitzero"`
	// +required
	Spec RedfishClusterSpec `json:"spec,omitzero"`
}

// RedfishClusterTemplateSpec is the spec of a RedfishClusterTemplate.
type RedfishClusterTemplateSpec struct {
	// +required
	Template RedfishClusterTemplateResource `json:"template,omitzero"`
}

// +kubebuilder:object:root=true
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:resource:path=redfishclustertemplates,scope=Namespaced,categories=cluster-api,shortName=rfct
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// RedfishClusterTemplate is the template ClusterClass clones RedfishClusters from.
type RedfishClusterTemplate struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec RedfishClusterTemplateSpec `json:"spec,omitzero"`
}

// +kubebuilder:object:root=true

// RedfishClusterTemplateList is a list of RedfishClusterTemplates.
type RedfishClusterTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RedfishClusterTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &RedfishCluster{}, &RedfishClusterList{}, &RedfishClusterTemplate{}, &RedfishClusterTemplateList{})
}
