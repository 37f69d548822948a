package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
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
// member is set. firmware and biosSettings tasks run first, in order, and end by themselves;
// powerOffAndHold and bootImage then wait for spec.complete.
// +kubebuilder:validation:XValidation:rule="[has(self.powerOffAndHold), has(self.bootImage), has(self.firmware), has(self.biosSettings)].filter(x, x).size() == 1",message="a task sets exactly one of powerOffAndHold, bootImage, firmware, biosSettings"
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
	// firmware flashes the BIOS or the BMC through the plan's images, one after another, each
	// verified against the BMC's firmware inventory. A BIOS image is applied by booting the host
	// into its BIOS setup (never into its OS) and powering it off again. A maintenance whose only
	// tasks are BMC updates does not drain the Machine on the host: the host keeps running.
	// +optional
	Firmware *FirmwareUpdate `json:"firmware,omitempty"`
	// biosSettings sets BIOS attributes: checked against the BMC's attribute registry (or, without
	// one, the current attributes' types) before the maintenance is announced, staged in the BIOS
	// settings object, applied by booting the host into its BIOS setup, and verified.
	// +optional
	BIOSSettings *BIOSSettings `json:"biosSettings,omitempty"`
}

// FirmwareComponent is the firmware a firmware task flashes.
// +kubebuilder:validation:Enum=BIOS;BMC
type FirmwareComponent string

// Firmware components.
const (
	FirmwareBIOS FirmwareComponent = "BIOS"
	FirmwareBMC  FirmwareComponent = "BMC"
)

// FirmwareUpdate flashes one firmware component through an ordered list of versions.
type FirmwareUpdate struct {
	// component to flash: BIOS or BMC.
	// +required
	Component FirmwareComponent `json:"component,omitempty"`
	// plan lists the versions to go through, in order (an upgrade path: each image is applied and
	// verified before the next). A version the inventory already reports is skipped.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	Plan []FirmwareVersion `json:"plan,omitempty"`
	// imageCredentialsSecretName names a Secret (in this namespace, keys username and password,
	// label caprf.io/image-credentials: "true") the BMC presents to the image server; the plan's
	// images must then be https. Never logged nor shown in status.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ImageCredentialsSecretName string `json:"imageCredentialsSecretName,omitempty"`
	// retries is how many more times a failed step is tried before the task fails (default 2).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	Retries *int32 `json:"retries,omitempty"`
	// stepTimeout bounds each phase of a step (flash, boot into the BIOS setup, verify): past it
	// the attempt fails (default 30m, at most 24h).
	// +optional
	StepTimeout *metav1.Duration `json:"stepTimeout,omitempty"`
}

// FirmwareVersion is one step of an upgrade plan.
type FirmwareVersion struct {
	// version the BMC's firmware inventory reports once the image is applied.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Version string `json:"version,omitempty"`
	// imageURL of the image, http or https, reachable by the BMC (or by the provider, for a BMC
	// that only takes pushed images).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	ImageURL string `json:"imageURL,omitempty"`
}

// BIOSSettings is a set of BIOS attributes to apply.
type BIOSSettings struct {
	// attributes by name: a string, an integer or a boolean each.
	// +required
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=64
	Attributes map[string]apiextensionsv1.JSON `json:"attributes,omitempty"`
	// retries is how many more times a failed apply is tried before the task fails (default 2).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	Retries *int32 `json:"retries,omitempty"`
	// timeout bounds each phase of an attempt (stage, boot into the BIOS setup, verify): past it
	// the attempt fails (default 30m, at most 24h).
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// TaskState is where a firmware or BIOS-settings task stands.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;Aborted
type TaskState string

// Task states.
const (
	TaskPending   TaskState = "Pending"
	TaskRunning   TaskState = "Running"
	TaskSucceeded TaskState = "Succeeded"
	TaskFailed    TaskState = "Failed"
	TaskAborted   TaskState = "Aborted"
)

// TaskPhase is the part of a step a running task is in.
// +kubebuilder:validation:Enum=Checking;Flashing;Applying;Verifying
type TaskPhase string

// Task phases, in order.
// A BIOS-settings task stages its attributes while Checking.
const (
	PhaseChecking TaskPhase = "Checking"
	PhaseFlashing TaskPhase = "Flashing"
	// PhaseApplying: a RedfishJob boots the host into its BIOS setup (POST writes what was
	// staged) and powers it off again.
	PhaseApplying  TaskPhase = "Applying"
	PhaseVerifying TaskPhase = "Verifying"
)

// MaintenanceTaskStatus reports a firmware or BIOS-settings task (spec.tasks of the same index).
type MaintenanceTaskStatus struct {
	// state of the task.
	// +optional
	State TaskState `json:"state,omitempty"`
	// phase of the running step.
	// +optional
	Phase TaskPhase `json:"phase,omitempty"`
	// step is the index in the plan being worked on (firmware).
	// +optional
	Step int32 `json:"step,omitempty"`
	// attempt of the current step, from 1.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// stepStartTime is when the current attempt started.
	// +optional
	StepStartTime *metav1.Time `json:"stepStartTime,omitempty"`
	// phaseStartTime is when the current phase started (the timeout counts from it).
	// +optional
	PhaseStartTime *metav1.Time `json:"phaseStartTime,omitempty"`
	// version the firmware inventory reported at the last read.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Version string `json:"version,omitempty"`
	// percent done of the BMC's update task, as its task monitor reports it.
	// +optional
	Percent *int32 `json:"percent,omitempty"`
	// taskURI is the BMC task being followed.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	TaskURI string `json:"taskURI,omitempty"`
	// job is the RedfishJob booting the host into its BIOS setup to apply the step.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Job string `json:"job,omitempty"`
	// message from the BMC or about the last failure.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Message string `json:"message,omitempty"`
	// retry is the spec.retry this task last acted on.
	// +optional
	Retry int32 `json:"retry,omitempty"`
	// completionTime is when the task succeeded, failed or was aborted.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
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

// TakesHostOut says whether the maintenance has its host out of service, as budgets count it: past
// the gate (Draining, InMaintenance) or failed there. An Approved one holds its host against new
// claims (Holds) but has not taken it out yet.
func (m *RedfishMaintenance) TakesHostOut() bool {
	return m.Status.Stage.Holds() && m.Status.Stage != StageApproved
}

// OpensHostToJobs says whether the maintenance lets RedfishJobs act on its host while a Machine
// still claims it: in stage InMaintenance, with that Machine drained or held for the work (not
// a BMC-only update, whose Machine keeps running). The job webhook and controller ask this.
func (m *RedfishMaintenance) OpensHostToJobs() bool {
	return m.Status.Stage == StageInMaintenance && !m.KeepsMachine()
}

// KeepsMachine says whether the maintenance leaves the Machine on its host running: its only
// tasks are BMC firmware updates, which need no host power action (no drain, no power hold).
func (m *RedfishMaintenance) KeepsMachine() bool {
	if len(m.Spec.Tasks) == 0 {
		return false
	}
	for _, t := range m.Spec.Tasks {
		if t.Firmware == nil || t.Firmware.Component != FirmwareBMC {
			return false
		}
	}
	return true
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
	// abort stops the firmware and BIOS-settings tasks: a flash the BMC is running is waited out
	// (it cannot be stopped safely), nothing more is started, and the maintenance ends Failed
	// (reason Aborted) with its host kept out of service until the maintenance is deleted.
	// +optional
	Abort bool `json:"abort,omitempty"`
	// retry, raised, tries a failed firmware or BIOS-settings task again from its failed step,
	// with its retries counted afresh.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Retry int32 `json:"retry,omitempty"`
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
	// tasks reports the firmware and BIOS-settings tasks, by the index of spec.tasks (other
	// tasks' entries stay empty).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Tasks []MaintenanceTaskStatus `json:"tasks,omitempty"`
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
// +kubebuilder:selectablefield:JSONPath=".spec.hostName"
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
