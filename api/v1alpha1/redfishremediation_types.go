package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// RemediationPhase is where a reboot remediation stands.
// +kubebuilder:validation:Enum=Fencing;PoweringOn;Completed
type RemediationPhase string

// Remediation phases, forward only.
const (
	RemediationFencing    RemediationPhase = "Fencing"
	RemediationPoweringOn RemediationPhase = "PoweringOn"
	RemediationCompleted  RemediationPhase = "Completed"
)

// RedfishRemediationSpec says how to remediate an unhealthy Machine's host: power it off (fencing:
// its workloads are certainly stopped), then on again.
type RedfishRemediationSpec struct {
	// mode is Hard (immediate power off, the default: an unhealthy host may not shut down) or Soft.
	// +optional
	// +kubebuilder:default=Hard
	Mode RebootMode `json:"mode,omitempty"`
}

// RemediationRequestorPrefix starts the requestor of every reboot request a RedfishRemediation
// puts on a host: "remediation/<name>". The host drops such a request once that remediation is
// gone.
const RemediationRequestorPrefix = "remediation/"

// MaintenanceRequestorPrefix starts the requestor of the reboot requests and service boots a
// RedfishMaintenance puts on a host: "maintenance/<name>". The host drops such a reboot request
// once that maintenance is gone.
const MaintenanceRequestorPrefix = "maintenance/"

// RedfishRemediationStatus reports the remediation.
type RedfishRemediationStatus struct {
	// phase of the remediation.
	// +optional
	Phase RemediationPhase `json:"phase,omitempty"`
	// host that is remediated.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host,omitempty"`
	// fencedAt is when the host was confirmed powered off.
	// +optional
	FencedAt *metav1.Time `json:"fencedAt,omitempty"`
	// completedAt is when the host was powered on again.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`

	// conditions of the remediation (Paused).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:resource:path=redfishremediations,scope=Namespaced,categories=cluster-api,shortName=rfr
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="Host",type="string",JSONPath=".status.host"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// RedfishRemediation is a reboot remediation of one Machine's host, created by a
// MachineHealthCheck from a RedfishRemediationTemplate (named after the Machine).
type RedfishRemediation struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Spec RedfishRemediationSpec `json:"spec,omitzero"`
	// +optional
	Status RedfishRemediationStatus `json:"status,omitzero"`
}

// GetConditions returns the conditions of the remediation.
func (r *RedfishRemediation) GetConditions() []metav1.Condition { return r.Status.Conditions }

// SetConditions sets the conditions of the remediation.
func (r *RedfishRemediation) SetConditions(c []metav1.Condition) { r.Status.Conditions = c }

// +kubebuilder:object:root=true

// RedfishRemediationList is a list of RedfishRemediations.
type RedfishRemediationList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RedfishRemediation `json:"items"`
}

// RedfishRemediationTemplateResource is what a MachineHealthCheck clones.
type RedfishRemediationTemplateResource struct {
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitzero"`
	// +optional
	Spec RedfishRemediationSpec `json:"spec,omitzero"`
}

// RedfishRemediationTemplateSpec is the spec of a RedfishRemediationTemplate.
type RedfishRemediationTemplateSpec struct {
	// +required
	Template RedfishRemediationTemplateResource `json:"template,omitzero"`
}

// Nothing owns a RedfishRemediationTemplate, so its CRD carries clusterctl's move label:
// `clusterctl move` takes every one along.

// +kubebuilder:object:root=true
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:metadata:labels="clusterctl.cluster.x-k8s.io/move="
// +kubebuilder:resource:path=redfishremediationtemplates,scope=Namespaced,categories=cluster-api,shortName=rfrt

// RedfishRemediationTemplate is referenced by a MachineHealthCheck's spec.remediation.templateRef.
type RedfishRemediationTemplate struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +required
	Spec RedfishRemediationTemplateSpec `json:"spec,omitzero"`
}

// +kubebuilder:object:root=true

// RedfishRemediationTemplateList is a list of RedfishRemediationTemplates.
type RedfishRemediationTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RedfishRemediationTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &RedfishRemediation{}, &RedfishRemediationList{}, &RedfishRemediationTemplate{}, &RedfishRemediationTemplateList{})
}
