package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// JobPowerAction is a ComputerSystem.Reset type a job sends.
// +kubebuilder:validation:Enum=On;ForceOff;GracefulShutdown;GracefulRestart;ForceRestart;PowerCycle
type JobPowerAction string

// Job power actions.
const (
	JobPowerOn               JobPowerAction = "On"
	JobPowerForceOff         JobPowerAction = "ForceOff"
	JobPowerGracefulShutdown JobPowerAction = "GracefulShutdown"
	JobPowerGracefulRestart  JobPowerAction = "GracefulRestart"
	JobPowerForceRestart     JobPowerAction = "ForceRestart"
	JobPowerCycle            JobPowerAction = "PowerCycle"
)

// JobBootTarget is a one-time boot source a job sets.
// +kubebuilder:validation:Enum=Pxe;UefiHttp;Cd;Hdd;BiosSetup
type JobBootTarget string

// JobTask is one BMC operation of a job. Exactly one of power, bootOnce, insertMedia, ejectMedia
// and waitForBootProgress is set.
// +kubebuilder:validation:XValidation:rule="[has(self.power), has(self.bootOnce), has(self.insertMedia), has(self.ejectMedia), has(self.waitForBootProgress)].filter(x, x).size() == 1",message="a task sets exactly one of power, bootOnce, insertMedia, ejectMedia, waitForBootProgress"
type JobTask struct {
	// power sends this ComputerSystem.Reset and waits until the BMC reports the power state it
	// leads to: Off for ForceOff and GracefulShutdown, On for the others (PoweringOff is not Off).
	// A restart (GracefulRestart, ForceRestart, PowerCycle) is sent once, never repeated.
	// +optional
	Power JobPowerAction `json:"power,omitempty"`
	// bootOnce sets a one-time boot override: the next boot, and only that one, starts from it.
	// +optional
	BootOnce JobBootTarget `json:"bootOnce,omitempty"`
	// insertMedia inserts an ISO into the BMC's virtual CD/DVD, replacing what is there.
	// +optional
	InsertMedia *JobMedia `json:"insertMedia,omitempty"`
	// ejectMedia ejects what the BMC's virtual media hold.
	// +optional
	EjectMedia *EjectMedia `json:"ejectMedia,omitempty"`
	// waitForBootProgress waits until the system reports a boot progress state (Redfish
	// BootProgress.LastState): e.g. SetupEntered once a boot into the BIOS setup is past POST,
	// which writes staged BIOS images and settings. On a BMC that reports no boot progress it waits
	// orAfter instead.
	// +optional
	WaitForBootProgress *JobBootProgress `json:"waitForBootProgress,omitempty"`
	// timeout bounds the task, BMC calls included: past it the task, and the job, fail.
	// Default 5m.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// JobMedia is an ISO inserted as virtual media.
type JobMedia struct {
	// url of the ISO, http or https, reachable by the BMC.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	URL string `json:"url,omitempty"`
}

// EjectMedia ejects the host's virtual media.
type EjectMedia struct{}

// JobBootProgress is a boot progress state to wait for.
type JobBootProgress struct {
	// state to wait for.
	// +required
	// +kubebuilder:validation:Enum=SetupEntered;OSBootStarted;OSRunning
	State string `json:"state,omitempty"`
	// orAfter is how long to wait on a BMC that reports no boot progress. Default 3m; it must be
	// shorter than the task's timeout.
	// +optional
	OrAfter *metav1.Duration `json:"orAfter,omitempty"`
}

// RedfishJobSpec is a list of BMC operations run once, in order, on one host.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: create another job"
type RedfishJobSpec struct {
	// hostName is the RedfishHost, in the job's namespace, the tasks run on. A host serving a
	// Machine is refused, unless a RedfishMaintenance has it in stage InMaintenance. Jobs on one
	// host run one at a time, oldest first.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	HostName string `json:"hostName,omitempty"`
	// tasks run in order; the job fails at the first task that fails and runs none after it.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Tasks []JobTask `json:"tasks,omitempty"`
	// ttlAfterFinished is how long a finished job (Completed or Failed) is kept before it is
	// deleted. Default 1h.
	// +optional
	TTLAfterFinished *metav1.Duration `json:"ttlAfterFinished,omitempty"`
}

// JobTaskState is where a task stands.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed
type JobTaskState string

// Task states.
const (
	JobTaskPending   JobTaskState = "Pending"
	JobTaskRunning   JobTaskState = "Running"
	JobTaskSucceeded JobTaskState = "Succeeded"
	JobTaskFailed    JobTaskState = "Failed"
)

// JobTaskStatus is what happened to one task, in the order of spec.tasks.
type JobTaskStatus struct {
	// state of the task.
	// +required
	State JobTaskState `json:"state,omitempty"`
	// startTime is when the task started (its timeout counts from it).
	// +optional
	StartTime *metav1.MicroTime `json:"startTime,omitempty"`
	// sentTime is when the task's power action was last sent to the BMC (a restart: recorded before
	// it is sent, so that it is never sent twice).
	// +optional
	SentTime *metav1.MicroTime `json:"sentTime,omitempty"`
	// completionTime is when the task succeeded or failed.
	// +optional
	CompletionTime *metav1.MicroTime `json:"completionTime,omitempty"`
	// accepted records that the BMC accepted the task's power action (a restart or a graceful
	// shutdown is then never sent again).
	// +optional
	Accepted bool `json:"accepted,omitempty"`
	// leftOn records that a restart was seen to leave the On state (it is then done at the next On).
	// +optional
	LeftOn bool `json:"leftOn,omitempty"`
	// message says what the task is waiting for, or why it failed.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// RedfishJobStatus is the observed state of a RedfishJob.
type RedfishJobStatus struct {
	// startTime is when the job took its host; it is written before any task runs.
	// +optional
	StartTime *metav1.MicroTime `json:"startTime,omitempty"`
	// completionTime is when the job completed or failed.
	// +optional
	CompletionTime *metav1.MicroTime `json:"completionTime,omitempty"`
	// tasks, in the order of spec.tasks.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Tasks []JobTaskStatus `json:"tasks,omitempty"`
	// conditions: Running, Completed and Failed (the failing task and why), with their times.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Job conditions and reasons.
const (
	// JobRunningCondition is True while the job's tasks run; False with a reason while it waits.
	JobRunningCondition = "Running"
	// JobCompletedCondition is True once every task succeeded.
	JobCompletedCondition = "Completed"
	// JobFailedCondition is True once a task failed or the job was refused; the message names it.
	JobFailedCondition = "Failed"

	JobWaitingForJobReason  = "WaitingForEarlierJob"
	JobWaitingForHostReason = "WaitingForHost"
	JobRunningReason        = "Running"
	JobFinishedReason       = "Finished"
	JobSucceededReason      = "Succeeded"
	JobHostInUseReason      = "HostInUse"
	JobHostNotFoundReason   = "HostNotFound"
	JobTaskFailedReason     = "TaskFailed"
	JobTaskTimedOutReason   = "TaskTimedOut"
)

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:resource:path=redfishjobs,scope=Namespaced,categories=cluster-api,shortName=rfj
// +kubebuilder:selectablefield:JSONPath=".spec.hostName"
// +kubebuilder:printcolumn:name="Host",type="string",JSONPath=".spec.hostName"
// +kubebuilder:printcolumn:name="Running",type="string",JSONPath=".status.conditions[?(@.type==\"Running\")].status"
// +kubebuilder:printcolumn:name="Completed",type="string",JSONPath=".status.conditions[?(@.type==\"Completed\")].status"
// +kubebuilder:printcolumn:name="Failed",type="string",JSONPath=".status.conditions[?(@.type==\"Failed\")].status"
// +kubebuilder:printcolumn:name="Reason",type="string",JSONPath=".status.conditions[?(@.type==\"Running\")].reason",priority=1
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// RedfishJob runs a short list of BMC operations (power, one-time boot, virtual media) on one host,
// once.
type RedfishJob struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec RedfishJobSpec `json:"spec,omitzero"`
	// +optional
	Status RedfishJobStatus `json:"status,omitzero"`
}

// GetConditions returns the conditions of the job.
func (j *RedfishJob) GetConditions() []metav1.Condition { return j.Status.Conditions }

// SetConditions sets the conditions of the job.
func (j *RedfishJob) SetConditions(c []metav1.Condition) { j.Status.Conditions = c }

// Finished says whether the job completed or failed.
func (j *RedfishJob) Finished() bool { return j.Status.CompletionTime != nil }

// +kubebuilder:object:root=true

// RedfishJobList is a list of RedfishJobs.
type RedfishJobList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RedfishJob `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &RedfishJob{}, &RedfishJobList{})
}
