package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// MachineFinalizer lets the RedfishMachine controller release its host before the object goes.
const MachineFinalizer = "redfishmachine.infrastructure.cluster.x-k8s.io"

// RedfishMachineSpec is the desired state of a machine: which host to claim and what to put on it.
// CAPI clones it from a RedfishMachineTemplate; everything the machine needs at delete time lives
// here (or on the claimed host), never only in the template.
type RedfishMachineSpec struct {
	// providerID is set by the provider once the host is provisioned: redfish://<namespace>/<host>.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// hostSelector restricts which hosts may be claimed, by host labels.
	// +optional
	HostSelector *metav1.LabelSelector `json:"hostSelector,omitempty"`

	// image is the operating system written to the host.
	// +optional
	Image *Image `json:"image,omitempty"`

	// bootMethod is how the host boots the provisioning image.
	// +optional
	// +kubebuilder:default=VirtualMedia
	BootMethod BootMethod `json:"bootMethod,omitempty"`

	// nodeReuse keeps a released host reserved for the same MachineDeployment or control plane,
	// so the next Machine of that owner lands on it. Recorded on the host when it is claimed.
	// +optional
	NodeReuse bool `json:"nodeReuse,omitempty"`

	// automatedCleaningMode says whether the host's drives are cleaned when it is released.
	// Recorded on the host when it is claimed.
	// +optional
	// +kubebuilder:default=Metadata
	AutomatedCleaningMode AutomatedCleaningMode `json:"automatedCleaningMode,omitempty"`

	// maintenanceApprovals approve maintenances of the host announced in
	// status.maintenances, each by name and UID: an approval approves that one maintenance only,
	// never another (nor one recreated under the same name). The only field of the spec that may
	// change after creation.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	MaintenanceApprovals []MaintenanceApproval `json:"maintenanceApprovals,omitempty"`
}

// MaintenanceApproval approves one RedfishMaintenance of the machine's host.
type MaintenanceApproval struct {
	// name of the RedfishMaintenance.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
	// uid of the RedfishMaintenance, as announced.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	UID string `json:"uid,omitempty"`
}

// MaintenanceAnnouncement tells the cluster owner of a maintenance planned for the machine's host.
type MaintenanceAnnouncement struct {
	// name of the RedfishMaintenance (same namespace).
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
	// uid to quote in spec.maintenanceApprovals.
	// +required
	// +kubebuilder:validation:MaxLength=64
	UID string `json:"uid,omitempty"`
	// reason given by the requestor.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
	// requestor of the maintenance.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Requestor string `json:"requestor,omitempty"`
	// policy: OwnerApproval (waits for an approval) or Enforced (proceeds without one).
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Policy string `json:"policy,omitempty"`
	// since when it is announced.
	// +optional
	Since metav1.Time `json:"since,omitzero"`
}

// RedfishMachineInitializationStatus is the CAPI v1beta2 initialization contract.
// +kubebuilder:validation:MinProperties=1
type RedfishMachineInitializationStatus struct {
	// provisioned is true when the host runs the machine's image and bootstrap data.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// RedfishMachineStatus is the observed state of a machine.
type RedfishMachineStatus struct {
	// initialization reports the CAPI provisioning milestone.
	// +optional
	Initialization RedfishMachineInitializationStatus `json:"initialization,omitzero"`

	// hostRef names the claimed RedfishHost (same namespace).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	HostRef string `json:"hostRef,omitempty"`

	// addresses of the provisioned host.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Addresses []clusterv1.MachineAddress `json:"addresses,omitempty"`

	// failureDomain the claimed host sits in.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	FailureDomain string `json:"failureDomain,omitempty"`

	// maintenances announced for the claimed host, waiting for approval or under way.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Maintenances []MaintenanceAnnouncement `json:"maintenances,omitempty"`

	// conditions of the machine. Ready is mirrored into the Machine's InfrastructureReady.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:resource:path=redfishmachines,scope=Namespaced,categories=cluster-api,shortName=rfm
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
// +kubebuilder:printcolumn:name="Host",type="string",JSONPath=".status.hostRef"
// +kubebuilder:printcolumn:name="ProviderID",type="string",JSONPath=".spec.providerID"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// RedfishMachine is the CAPI infrastructure machine: one claim of a RedfishHost.
type RedfishMachine struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec RedfishMachineSpec `json:"spec,omitzero"`
	// +optional
	Status RedfishMachineStatus `json:"status,omitzero"`
}

// GetConditions returns the conditions of the machine.
func (m *RedfishMachine) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions sets the conditions of the machine.
func (m *RedfishMachine) SetConditions(c []metav1.Condition) { m.Status.Conditions = c }

// +kubebuilder:object:root=true

// RedfishMachineList is a list of RedfishMachines.
type RedfishMachineList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RedfishMachine `json:"items"`
}

// RedfishMachineTemplateResource is what a MachineSet clones into each RedfishMachine.
type RedfishMachineTemplateResource struct {
	// metadata copied onto each machine.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitzero"`

	// spec of each machine.
	// +required
	Spec RedfishMachineSpec `json:"spec,omitzero"`
}

// RedfishMachineTemplateSpec is the spec of a RedfishMachineTemplate.
type RedfishMachineTemplateSpec struct {
	// +required
	Template RedfishMachineTemplateResource `json:"template,omitzero"`
}

// +kubebuilder:object:root=true
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:resource:path=redfishmachinetemplates,scope=Namespaced,categories=cluster-api,shortName=rfmt
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// RedfishMachineTemplate is the template CAPI clones RedfishMachines from. It may be deleted at any
// time: nothing is read back from it after a machine was created.
type RedfishMachineTemplate struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec RedfishMachineTemplateSpec `json:"spec,omitzero"`
}

// +kubebuilder:object:root=true

// RedfishMachineTemplateList is a list of RedfishMachineTemplates.
type RedfishMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RedfishMachineTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &RedfishMachine{}, &RedfishMachineList{}, &RedfishMachineTemplate{}, &RedfishMachineTemplateList{})
}
