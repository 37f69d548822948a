package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaintenanceTemplate is the maintenance a RedfishMaintenanceSet gives each host it selects (the
// fields of RedfishMaintenanceSpec a fleet shares).
type MaintenanceTemplate struct {
	// reason is shown to the cluster owners in the announcements.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
	// requestor identifies who asks (a team, a tool).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Requestor string `json:"requestor,omitempty"`
	// policy: OwnerApproval (default) or Enforced.
	// +optional
	// +kubebuilder:default=OwnerApproval
	Policy MaintenancePolicy `json:"policy,omitempty"`
	// mode: Replace (default) or Reuse.
	// +optional
	// +kubebuilder:default=Replace
	Mode MaintenanceMode `json:"mode,omitempty"`
	// priority of the maintenances.
	// +optional
	Priority int32 `json:"priority,omitempty"`
	// tasks of each maintenance.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Tasks []MaintenanceTask `json:"tasks,omitempty"`
	// timeout of each maintenance (see RedfishMaintenance spec.timeout).
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// MaintenanceCanary picks the hosts that go first.
type MaintenanceCanary struct {
	// count of hosts that go first: the first selected hosts by name, unless hostSelector picks
	// them. Default 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Count *int32 `json:"count,omitempty"`
	// hostSelector picks the canary hosts among the selected ones (count is then ignored).
	// +optional
	HostSelector *metav1.LabelSelector `json:"hostSelector,omitempty"`
	// approved lets the other hosts' maintenances be created once every canary maintenance has
	// completed. Set it after checking the canaries.
	// +optional
	Approved bool `json:"approved,omitempty"`
}

// RedfishMaintenanceSetSpec selects hosts and the maintenance each gets.
// +kubebuilder:validation:XValidation:rule="self.template == oldSelf.template",message="template is immutable: create another RedfishMaintenanceSet"
type RedfishMaintenanceSetSpec struct {
	// hostSelector selects the hosts (in this namespace); empty selects every host. A host that
	// comes to match later gets its maintenance too.
	// +required
	HostSelector metav1.LabelSelector `json:"hostSelector,omitzero"`
	// template is the maintenance each selected host gets. Immutable.
	// +required
	Template MaintenanceTemplate `json:"template,omitzero"`
	// canary, when set, runs the maintenances of a few hosts first; the others are created only
	// once those completed and canary.approved is set.
	// +optional
	Canary *MaintenanceCanary `json:"canary,omitempty"`
	// maxFailures stops the set once this many of its maintenances are Failed (default 1): those
	// not past the gate yet are paused (cluster.x-k8s.io/paused) until fewer are Failed (a failed
	// one retried to completion, or deleted) or maxFailures is raised. A firmware the BMCs reject
	// then takes that many hosts out, not the fleet.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxFailures *int32 `json:"maxFailures,omitempty"`
}

// MaintenanceSetPhase is where a RedfishMaintenanceSet stands.
// +kubebuilder:validation:Enum=Canary;WaitingForApproval;RollingOut;Completed;Failed
type MaintenanceSetPhase string

// Phases of a RedfishMaintenanceSet.
const (
	SetPhaseCanary             MaintenanceSetPhase = "Canary"
	SetPhaseWaitingForApproval MaintenanceSetPhase = "WaitingForApproval"
	SetPhaseRollingOut         MaintenanceSetPhase = "RollingOut"
	SetPhaseCompleted          MaintenanceSetPhase = "Completed"
	SetPhaseFailed             MaintenanceSetPhase = "Failed"
)

// MaintenanceSetCounts counts the set's hosts by the stage of their maintenance.
type MaintenanceSetCounts struct {
	// notStarted: selected hosts whose maintenance is not created yet (held back by the canary).
	// +optional
	NotStarted int32 `json:"notStarted"`
	// waiting: Pending, Announced or Approved (waiting for approval, a window or the budget).
	// +optional
	Waiting int32 `json:"waiting"`
	// inProgress: Draining or InMaintenance.
	// +optional
	InProgress int32 `json:"inProgress"`
	// completed maintenances.
	// +optional
	Completed int32 `json:"completed"`
	// failed maintenances (their hosts held out of service).
	// +optional
	Failed int32 `json:"failed"`
	// cancelled maintenances.
	// +optional
	Cancelled int32 `json:"cancelled"`
}

// RedfishMaintenanceSetStatus reports the fleet maintenance.
type RedfishMaintenanceSetStatus struct {
	// phase of the set.
	// +optional
	Phase MaintenanceSetPhase `json:"phase,omitempty"`
	// hosts selected.
	// +optional
	Hosts int32 `json:"hosts,omitempty"`
	// canaryHosts are the hosts that go first (fixed when the set first reconciles).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	CanaryHosts []string `json:"canaryHosts,omitempty"`
	// counts of the hosts by stage.
	// +optional
	Counts MaintenanceSetCounts `json:"counts,omitzero"`
	// conditions: Ready (True once every maintenance completed; False with the phase's reason).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:metadata:labels="clusterctl.cluster.x-k8s.io/move="
// +kubebuilder:resource:path=redfishmaintenancesets,scope=Namespaced,categories=cluster-api,shortName=rfmset
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="Hosts",type="integer",JSONPath=".status.hosts"
// +kubebuilder:printcolumn:name="Waiting",type="integer",JSONPath=".status.counts.waiting"
// +kubebuilder:printcolumn:name="In progress",type="integer",JSONPath=".status.counts.inProgress"
// +kubebuilder:printcolumn:name="Completed",type="integer",JSONPath=".status.counts.completed"
// +kubebuilder:printcolumn:name="Failed",type="integer",JSONPath=".status.counts.failed"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// RedfishMaintenanceSet fans one maintenance out to many hosts (e.g. "this BIOS plan on these 200
// servers"): a RedfishMaintenance per selected host, owned by the set, paced by the windows and
// budgets of the RedfishMaintenancePolicies; optionally a canary group first, the rest after an
// approval. Deleting the set cancels (deletes) its maintenances.
type RedfishMaintenanceSet struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +required
	Spec RedfishMaintenanceSetSpec `json:"spec,omitzero"`
	// +optional
	Status RedfishMaintenanceSetStatus `json:"status,omitzero"`
}

// GetConditions returns the conditions.
func (s *RedfishMaintenanceSet) GetConditions() []metav1.Condition { return s.Status.Conditions }

// SetConditions sets the conditions.
func (s *RedfishMaintenanceSet) SetConditions(c []metav1.Condition) { s.Status.Conditions = c }

// +kubebuilder:object:root=true

// RedfishMaintenanceSetList is a list of RedfishMaintenanceSets.
type RedfishMaintenanceSetList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RedfishMaintenanceSet `json:"items"`
}
