package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// MaintenanceWindow is a recurring period in which maintenances may start.
type MaintenanceWindow struct {
	// start is a cron schedule (five fields: minute hour day-of-month month day-of-week, or a
	// descriptor such as @daily) of the window's starts, e.g. "0 22 * * 1-5".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Start string `json:"start,omitempty"`
	// duration of each window, e.g. "4h".
	// +required
	Duration metav1.Duration `json:"duration,omitzero"`
	// timeZone of the schedule (IANA name, e.g. Europe/Berlin). Default UTC.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TimeZone string `json:"timeZone,omitempty"`
}

// RedfishMaintenancePolicySpec sets when and how many of the hosts it selects may be in
// maintenance.
type RedfishMaintenancePolicySpec struct {
	// hostSelector selects the hosts (in this namespace) the policy governs; empty: all of them.
	// +optional
	HostSelector *metav1.LabelSelector `json:"hostSelector,omitempty"`
	// clusterSelector narrows the hosts to those serving a Machine of a Cluster (in this
	// namespace) with these labels, and those a maintenance took out of such a Cluster; hosts
	// serving no Cluster then do not count. Empty: hosts whatever they serve.
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
	// windows: a maintenance starts (leaves Approved) only inside one of them. None: any time.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Windows []MaintenanceWindow `json:"windows,omitempty"`
	// maxUnavailable is how many selected hosts may be unavailable at once (an integer, or a
	// percentage of the selected hosts, rounded down but at least 1), counting hosts unavailable
	// for any reason (not Ready: unreachable BMC, error, cleaning, provisioning) and hosts in
	// maintenance. One exception: while a maintenance (mode Replace) that took a
	// MachineDeployment's Machine off a selected host is Draining or InMaintenance, the selected
	// host claimed first for that MachineDeployment within 30 minutes after it began draining is
	// its replacement, counted in the maintenance's place rather than again while it boots (its
	// BMC reachable, its boot not failed, no reboot request, not being deleted, claimed less than
	// 30 minutes ago): at most one host per maintained host.
	// Default 1.
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// maxParallel is how many selected hosts may be in maintenance at once (draining or worked
	// on), whatever else is unavailable. Default: no limit beyond maxUnavailable.
	// +optional
	MaxParallel *intstr.IntOrString `json:"maxParallel,omitempty"`
}

// RedfishMaintenancePolicyStatus reports what the policy allows now.
type RedfishMaintenancePolicyStatus struct {
	// hosts the policy selects.
	// +optional
	Hosts int32 `json:"hosts,omitempty"`
	// unavailable selected hosts (down, as maxUnavailable counts them, or held by a maintenance).
	// +optional
	Unavailable int32 `json:"unavailable,omitempty"`
	// inMaintenance selected hosts held by a maintenance past approval.
	// +optional
	InMaintenance int32 `json:"inMaintenance,omitempty"`
	// windowOpen says whether a window is open now (true without windows).
	// +optional
	WindowOpen bool `json:"windowOpen,omitempty"`
	// conditions: Ready (False with InvalidSchedule when a window cannot be read).
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
// +kubebuilder:resource:path=redfishmaintenancepolicies,scope=Namespaced,categories=cluster-api,shortName=rfmpol
// +kubebuilder:printcolumn:name="Hosts",type="integer",JSONPath=".status.hosts"
// +kubebuilder:printcolumn:name="Unavailable",type="integer",JSONPath=".status.unavailable"
// +kubebuilder:printcolumn:name="In maintenance",type="integer",JSONPath=".status.inMaintenance"
// +kubebuilder:printcolumn:name="Window open",type="boolean",JSONPath=".status.windowOpen"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// RedfishMaintenancePolicy sets maintenance windows and a disruption budget for the hosts it
// selects. Every policy selecting a host must allow a maintenance to start on it.
type RedfishMaintenancePolicy struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +required
	Spec RedfishMaintenancePolicySpec `json:"spec,omitzero"`
	// +optional
	Status RedfishMaintenancePolicyStatus `json:"status,omitzero"`
}

// GetConditions returns the conditions.
func (p *RedfishMaintenancePolicy) GetConditions() []metav1.Condition { return p.Status.Conditions }

// SetConditions sets the conditions.
func (p *RedfishMaintenancePolicy) SetConditions(c []metav1.Condition) { p.Status.Conditions = c }

// +kubebuilder:object:root=true

// RedfishMaintenancePolicyList is a list of RedfishMaintenancePolicies.
type RedfishMaintenancePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RedfishMaintenancePolicy `json:"items"`
}
