package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaintenancePolicy says whether the cluster owner must approve a maintenance.
// +kubebuilder:validation:Enum=OwnerApproval;Enforced
type MaintenancePolicy string

// Maintenance policies.
const (
	// OwnerApproval waits for the cluster owner's approval on the RedfishMachine of the host (or
	// for CAPI to delete that Machine for its own reasons).
	OwnerApproval MaintenancePolicy = "OwnerApproval"
	// Enforced needs no approval (a failing part, a security fix); budget and windows still apply.
	Enforced MaintenancePolicy = "Enforced"
)

// MaintenanceMode says what happens to the Machine on the host.
// +kubebuilder:validation:Enum=Replace;Reuse
type MaintenanceMode string

// Maintenance modes.
const (
	// Replace drains and deletes the Machine; its MachineSet creates the replacement elsewhere.
	Replace MaintenanceMode = "Replace"
	// Reuse drains and deletes the Machine too, but a pre-terminate hook keeps its host claimed
	// while the tasks run; the host is then released without cleaning, and the Machines of the same
	// owner (the MachineSet's replacement) wait for it and boot on it with its disks as they were.
	Reuse MaintenanceMode = "Reuse"
)

// MaintenanceTask is one piece of work done on the host while it is in maintenance. Exactly one
// member is set.
type MaintenanceTask struct {
	// powerOffAndHold powers the host off and keeps it off (whatever else asks for power) until a
	// person sets spec.complete: for a hardware swap or a repair.
	// +optional
	PowerOffAndHold *PowerOffAndHold `json:"powerOffAndHold,omitempty"`
	// bootImage runs a maintenance image (diagnostics, a vendor's firmware updater) on the host
	// from the BMC's virtual media until a person sets spec.complete. A Continuous boot override
	// keeps the host's own OS from coming back, whatever reboots the BMC or the image make.
	// +optional
	BootImage *BootImage `json:"bootImage,omitempty"`
}

// BootImage is a bootable ISO run on the host during the maintenance.
type BootImage struct {
	// url of the ISO, http or https, reachable by the BMC.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url,omitempty"`
}

// PowerOffAndHold powers a host off until the maintenance is completed by hand.
type PowerOffAndHold struct{}

// MaintenanceStage is where a maintenance stands; stages only move forward.
// +kubebuilder:validation:Enum=Pending;Announced;Approved;Draining;InMaintenance;Completed;Failed;Cancelled
type MaintenanceStage string

// Maintenance stages, in order.
const (
	StagePending       MaintenanceStage = "Pending"
	StageAnnounced     MaintenanceStage = "Announced"
	StageApproved      MaintenanceStage = "Approved"
	StageDraining      MaintenanceStage = "Draining"
	StageInMaintenance MaintenanceStage = "InMaintenance"
	StageCompleted     MaintenanceStage = "Completed"
	StageFailed        MaintenanceStage = "Failed"
	StageCancelled     MaintenanceStage = "Cancelled"
)

// Holds says whether a maintenance in this stage keeps its host out of the pool: from approval
// until it ends, and after a failure (the host is not handed back half-done).
func (s MaintenanceStage) Holds() bool {
	switch s {
	case StageApproved, StageDraining, StageInMaintenance, StageFailed:
		return true
	}
	return false
}

// Active says whether the maintenance has not ended.
func (s MaintenanceStage) Active() bool {
	switch s {
	case StageCompleted, StageFailed, StageCancelled:
		return false
	}
	return true
}

// RedfishMaintenanceSpec asks for one host to be taken out of service for work.
type RedfishMaintenanceSpec struct {
	// hostName is the RedfishHost (in this namespace) to maintain. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	HostName string `json:"hostName,omitempty"`
	// reason is shown to the cluster owner in the announcement.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
	// requestor identifies who asks (a team, a tool).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Requestor string `json:"requestor,omitempty"`
	// policy: OwnerApproval (default) or Enforced. Immutable.
	// +optional
	// +kubebuilder:default=OwnerApproval
	Policy MaintenancePolicy `json:"policy,omitempty"`
	// mode: Replace (default): the Machine on the host is drained and replaced elsewhere. Reuse:
	// the Machine is drained, its host held by a pre-terminate hook while the tasks run, then
	// handed back uncleaned to the replacement, which waits for it. Immutable.
	// +optional
	// +kubebuilder:default=Replace
	Mode MaintenanceMode `json:"mode,omitempty"`
	// priority orders maintenances waiting for the same budget: higher first, then older first.
	// +optional
	Priority int32 `json:"priority,omitempty"`
	// tasks run in order once the host is in maintenance. Without tasks the host is handed back
	// as soon as it is drained (work done out of band).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Tasks []MaintenanceTask `json:"tasks,omitempty"`
	// complete ends a maintenance whose tasks wait for a person (powerOffAndHold, bootImage).
	// +optional
	Complete bool `json:"complete,omitempty"`
	// timeout bounds the time from approval to completion; past it the maintenance fails and
	// keeps its host out of service. Default: none.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// ttlAfterCompleted deletes the maintenance that long after it completed (its stages and
	// metrics go with it; its Events expire as Events do). Default: kept until deleted. Failed maintenances are never
	// collected: they hold their host.
	// +optional
	TTLAfterCompleted *metav1.Duration `json:"ttlAfterCompleted,omitempty"`
}

// RedfishMaintenanceStatus reports a maintenance.
type RedfishMaintenanceStatus struct {
	// stage the maintenance is in.
	// +optional
	Stage MaintenanceStage `json:"stage,omitempty"`
	// stages lists when each stage was entered, in order.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Stages []StageTime `json:"stages,omitempty"`
	// machine is the CAPI Machine that was on the host when the maintenance was announced.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Machine string `json:"machine,omitempty"`
	// machineUID is the UID of that Machine: only that Machine is ever deleted for this
	// maintenance (one that claims the host later is waited for, never deleted).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	MachineUID string `json:"machineUID,omitempty"`
	// machineDeployment the Machine belonged to, if any: its availability is part of the budget.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	MachineDeployment string `json:"machineDeployment,omitempty"`
	// cluster of that Machine: policies selecting Clusters keep counting the host as the
	// Cluster's while it is in maintenance.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Cluster string `json:"cluster,omitempty"`
	// approvedBy says how the maintenance was approved: Policy (Enforced), Owner (the
	// RedfishMachine's approval), MachineDeleted (CAPI deleted the Machine for its own reasons) or
	// Unclaimed (nothing ran on the host).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ApprovedBy string `json:"approvedBy,omitempty"`
	// conditions: Ready (False while waiting, with the reason), Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// StageTime is when a stage was entered.
type StageTime struct {
	// +required
	Stage MaintenanceStage `json:"stage,omitempty"`
	// +required
	Time metav1.Time `json:"time,omitzero"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:metadata:labels="clusterctl.cluster.x-k8s.io/move="
// +kubebuilder:resource:path=redfishmaintenances,scope=Namespaced,categories=cluster-api,shortName=rfmaint
// +kubebuilder:printcolumn:name="Host",type="string",JSONPath=".spec.hostName"
// +kubebuilder:printcolumn:name="Policy",type="string",JSONPath=".spec.policy"
// +kubebuilder:printcolumn:name="Stage",type="string",JSONPath=".status.stage"
// +kubebuilder:printcolumn:name="Waiting",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].reason"
// +kubebuilder:printcolumn:name="Reason",type="string",JSONPath=".spec.reason",priority=1
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// RedfishMaintenance takes one host out of service for work, through the typed handshake:
// announced on the host's RedfishMachine, approved by the cluster owner (OwnerApproval) or not
// (Enforced), started within the windows and disruption budget of the RedfishMaintenancePolicies
// selecting the host, drained and replaced by CAPI, then worked on and handed back.
type RedfishMaintenance struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +required
	Spec RedfishMaintenanceSpec `json:"spec,omitzero"`
	// +optional
	Status RedfishMaintenanceStatus `json:"status,omitzero"`
}

// GetConditions returns the conditions.
func (m *RedfishMaintenance) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions sets the conditions.
func (m *RedfishMaintenance) SetConditions(c []metav1.Condition) { m.Status.Conditions = c }

// +kubebuilder:object:root=true

// RedfishMaintenanceList is a list of RedfishMaintenances.
type RedfishMaintenanceList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RedfishMaintenance `json:"items"`
}
