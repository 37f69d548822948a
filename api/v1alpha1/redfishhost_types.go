package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HostState is the lifecycle state of a RedfishHost. Maintenance is an overlay on top of these
// states, not a state of its own.
// +kubebuilder:validation:Enum=Registering;Inspecting;Available;Provisioning;Provisioned;Deprovisioning;Cleaning;Error
type HostState string

// Host lifecycle states.
const (
	HostStateRegistering    HostState = "Registering"
	HostStateInspecting     HostState = "Inspecting"
	HostStateAvailable      HostState = "Available"
	HostStateProvisioning   HostState = "Provisioning"
	HostStateProvisioned    HostState = "Provisioned"
	HostStateDeprovisioning HostState = "Deprovisioning"
	HostStateCleaning       HostState = "Cleaning"
	HostStateError          HostState = "Error"
)

// BMC says how to reach a host's baseboard management controller.
type BMC struct {
	// address of the Redfish service: redfish://host[:port][/redfish/v1/Systems/<id>] (https) or
	// redfish+http://… (plain http, lab use only). The system is discovered when the path is omitted
	// and the BMC manages exactly one system.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// The admission webhook validates the form (a CRD pattern would echo a password typed into
	// the URL back in its error).
	Address string `json:"address,omitempty"`

	// credentialsName is the name of a Secret in the host's namespace with keys "username" and
	// "password", labelled caprf.io/bmc-credentials: "true" (an unlabelled Secret is refused at
	// admission and never sent to the BMC).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	CredentialsName string `json:"credentialsName,omitempty"`

	// caBundleName is the name of a Secret in the host's namespace whose key "ca.crt" holds the PEM
	// CA bundle that signs the BMC certificate. Without it the system trust store is used.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	CABundleName string `json:"caBundleName,omitempty"`

	// insecureSkipVerify disables TLS verification of the BMC. Only for labs; never the default.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`

	// authMethod is how the provider authenticates to the BMC: Session (the default) creates one
	// Redfish session per BMC and keeps it; Basic sends the credentials with every request and
	// holds no session, for BMCs whose few sessions other tools use up (the host then reports
	// BMCReachable=False, SessionLimitExceeded).
	// +optional
	AuthMethod BMCAuthMethod `json:"authMethod,omitempty"`
}

// BMCAuthMethod is how the provider authenticates to a BMC.
// +kubebuilder:validation:Enum=Session;Basic
type BMCAuthMethod string

// BMC authentication methods.
const (
	BMCAuthSession BMCAuthMethod = "Session"
	BMCAuthBasic   BMCAuthMethod = "Basic"
)

// Cordon stops new claims of a host. A claimed host keeps running.
type Cordon struct {
	// reason is shown to people looking at the host.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`

	// requestor identifies who cordoned the host (a team, a tool).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Requestor string `json:"requestor,omitempty"`
}

// RebootMode is how a requested reboot powers the host off.
// +kubebuilder:validation:Enum=Soft;Hard
type RebootMode string

// Reboot modes.
const (
	RebootModeSoft RebootMode = "Soft"
	RebootModeHard RebootMode = "Hard"
)

// RebootRequest asks for the host to be powered off until the request is removed. Power returns
// when the last request is gone.
type RebootRequest struct {
	// requestor identifies who asked; one request per requestor.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Requestor string `json:"requestor,omitempty"`

	// mode is Soft (graceful shutdown first) or Hard (immediate power off).
	// +optional
	// +kubebuilder:default=Soft
	Mode RebootMode `json:"mode,omitempty"`

	// requestorUID is the UID of the object behind the requestor (a RedfishMaintenance or
	// RedfishRemediation), when it is one: a request whose object is gone, or was re-created
	// under the same name, is dropped after the host's orphan grace period.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	RequestorUID string `json:"requestorUID,omitempty"`
}

// RedfishHostSpec is the desired state of one physical server.
type RedfishHostSpec struct {
	// bmc says how to reach the server's BMC.
	// +required
	BMC BMC `json:"bmc,omitzero"`

	// bootMACAddress is the MAC of the NIC the host boots from over the network.
	// +optional
	// +kubebuilder:validation:Pattern=`^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$`
	BootMACAddress string `json:"bootMACAddress,omitempty"`

	// online is the desired power state while no claim or reboot request says otherwise.
	// +optional
	Online *bool `json:"online,omitempty"`

	// cordon, when set, stops new claims of this host.
	// +optional
	Cordon *Cordon `json:"cordon,omitempty"`

	// rebootRequests power the host off until each is removed.
	// +optional
	// +listType=map
	// +listMapKey=requestor
	// +kubebuilder:validation:MaxItems=32
	RebootRequests []RebootRequest `json:"rebootRequests,omitempty"`

	// serviceBoot, when set, runs an image on the host instead of its OS: the image goes into
	// the BMC's virtual media with a Continuous boot override to it, and the host is powered on
	// into it (and again into it whatever reboots the BMC makes). A reboot request still wins
	// (power off). Removing it ejects the image and clears the override. A RedfishMaintenance's
	// bootImage task sets it.
	// +optional
	ServiceBoot *ServiceBoot `json:"serviceBoot,omitempty"`

	// unerasedDrivesAccepted names drives (Redfish Id or serial number) that offer no Redfish
	// erase and that the operator accepts to see released without one (erased out of band, or
	// holding nothing of a tenant's). Cleaning erases every other drive present; a drive with no
	// erase that is not listed here keeps the host out of the pool (condition Cleaned,
	// reason DrivesNotErasable, names it). A listed drive that does offer an erase is erased.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	UnerasedDrivesAccepted []string `json:"unerasedDrivesAccepted,omitempty"`

	// rootDeviceHints choose the drive a disk image (format raw or qcow2) or a self-installing
	// ISO is written to, among the drives inspection found: every hint given must match, and of
	// the drives that match the smallest is taken. Without hints, the smallest drive of at least
	// 4 GiB. A host none of whose drives matches is not claimed by a machine that installs to
	// disk (condition RootDeviceFound says why); live images claim it as before.
	// +optional
	RootDeviceHints *RootDeviceHints `json:"rootDeviceHints,omitempty"`
}

// RootDeviceHints select a host's root drive. The deploy image finds the chosen drive by its
// serial number or WWN, never by a kernel device name alone.
type RootDeviceHints struct {
	// deviceName is the drive's name as the BMC lists it (its Redfish Id, such as Disk1).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	DeviceName string `json:"deviceName,omitempty"`
	// serialNumber of the drive.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SerialNumber string `json:"serialNumber,omitempty"`
	// wwn of the drive (NAA or EUI-64, with or without 0x).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	WWN string `json:"wwn,omitempty"`
	// model of the drive (a substring match).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Model string `json:"model,omitempty"`
	// vendor of the drive (a substring match, case-insensitive).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Vendor string `json:"vendor,omitempty"`
	// minSizeGigabytes is the smallest drive accepted, in GB (10^9 bytes).
	// +optional
	// +kubebuilder:validation:Minimum=0
	MinSizeGigabytes int32 `json:"minSizeGigabytes,omitempty"`
	// rotational: true for spinning disks only, false for SSDs only.
	// +optional
	Rotational *bool `json:"rotational,omitempty"`
}

// ServiceBoot is an image run on a host out of service (diagnostics, a firmware updater).
type ServiceBoot struct {
	// requestor identifies who asked (maintenance/<name> for a maintenance).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Requestor string `json:"requestor,omitempty"`
	// image is the http(s) URL of the bootable ISO.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	Image string `json:"image,omitempty"`
}

// ServiceBootStatus records the service boot the host made, so that it is made once.
type ServiceBootStatus struct {
	// requestor the boot was made for.
	Requestor string `json:"requestor,omitempty"`
	// image that was inserted and booted: host and path of its URL (no credentials).
	Image string `json:"image,omitempty"`
	// bootIssuedAt is when the image was attached and the boot to it recorded.
	BootIssuedAt metav1.Time `json:"bootIssuedAt,omitzero"`
}

// InstallPhase is where writing an image to a host's drive stands.
// +kubebuilder:validation:Enum=Installing;Installed;Failed
type InstallPhase string

// Install phases.
const (
	// InstallPhaseInstalling: the deploy image (or the self-installing ISO) was booted and is
	// writing the drive.
	InstallPhaseInstalling InstallPhase = "Installing"
	// InstallPhaseInstalled: the image is on the drive and verified; the host boots from it.
	InstallPhaseInstalled InstallPhase = "Installed"
	// InstallPhaseFailed: the write failed, the checksum did not match, or it timed out. The
	// host is left off and never boots the drive for this claim.
	InstallPhaseFailed InstallPhase = "Failed"
)

// InstallStatus records an installation to a host's drive, so that it is booted once and its
// outcome is known.
type InstallStatus struct {
	// phase of the installation.
	// +required
	Phase InstallPhase `json:"phase,omitempty"`
	// bootIssuedAt is when the boot into the deploy image (or the installer) was recorded,
	// before it was sent.
	// +optional
	BootIssuedAt *metav1.Time `json:"bootIssuedAt,omitempty"`
	// powerOnSentAt is when the power-on into it was recorded, before it was sent: it is sent
	// once. A host still off long after it (or off again before it was seen on) ended its run.
	// +optional
	PowerOnSentAt *metav1.Time `json:"powerOnSentAt,omitempty"`
	// sawPowerOn is set once the host was seen on after that boot: a power-off then ends the
	// installation (a self-installing ISO's signal; a deploy image reports before it).
	// +optional
	SawPowerOn bool `json:"sawPowerOn,omitempty"`
	// device is the drive written (its serial number or WWN).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Device string `json:"device,omitempty"`
	// sizeBytes is how many bytes of image were written, as the deploy image reported.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// checksum of what was written, as the deploy image computed it while it streamed.
	// +optional
	// +kubebuilder:validation:MaxLength=160
	Checksum string `json:"checksum,omitempty"`
	// message says what failed.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Message string `json:"message,omitempty"`
	// finishedAt is when the installation ended (Installed or Failed).
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}

// HostLease is the single-writer hold of a host's firmware and BIOS work.
type HostLease struct {
	// holder of the lease: a RedfishMaintenance of the host's namespace.
	// +required
	Holder ObjectRef `json:"holder,omitzero"`
	// holderUID is the UID of the holder: a maintenance re-created under the same name holds
	// nothing of its predecessor's.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	HolderUID string `json:"holderUID,omitempty"`
	// acquiredAt is when the lease was taken.
	// +required
	AcquiredAt metav1.Time `json:"acquiredAt,omitzero"`
	// flash is the firmware update the holder decided to send, recorded before the request: a
	// holder that lost the answer (a crash, a lost write) follows the update the BMC started
	// instead of sending it again.
	// +optional
	Flash *FlashIntent `json:"flash,omitempty"`
}

// FlashIntent records a firmware update request before it is sent.
type FlashIntent struct {
	// task is the index of the holder's spec.tasks entry; step and attempt those of its status.
	// +required
	Task int32 `json:"task"`
	// +required
	Step int32 `json:"step"`
	// +required
	Attempt int32 `json:"attempt"`
	// retry is the holder's spec.retry the attempt belongs to.
	// +optional
	Retry int32 `json:"retry,omitempty"`
	// component and version being flashed.
	// +required
	// +kubebuilder:validation:MaxLength=16
	Component string `json:"component,omitempty"`
	// +required
	// +kubebuilder:validation:MaxLength=128
	Version string `json:"version,omitempty"`
	// decidedAt is when the request was decided (before it was sent).
	// +required
	DecidedAt metav1.Time `json:"decidedAt,omitzero"`
	// priorTasks lists the BMC's update tasks that existed before the request: one not among
	// them is this request's.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=1024
	PriorTasks []string `json:"priorTasks,omitempty"`
	// taskURI is the BMC task of the update, once known.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	TaskURI string `json:"taskURI,omitempty"`
}

// DIMM is an installed memory module.
type DIMM struct {
	// name is the BMC's name of the module's slot.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
	// capacityMiB is the module's size.
	// +optional
	CapacityMiB int64 `json:"capacityMiB,omitempty"`
	// type is the memory device type (DDR4, DDR5, …).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Type string `json:"type,omitempty"`
	// speedMHz is the operating speed.
	// +optional
	SpeedMHz int32 `json:"speedMHz,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Manufacturer string `json:"manufacturer,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PartNumber string `json:"partNumber,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SerialNumber string `json:"serialNumber,omitempty"`
}

// NIC is a network interface found by inspection.
type NIC struct {
	// name of the interface as the BMC reports it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
	// mac address.
	// +optional
	// +kubebuilder:validation:MaxLength=17
	MAC string `json:"mac,omitempty"`
	// speedMbps is the link speed.
	// +optional
	SpeedMbps int32 `json:"speedMbps,omitempty"`
}

// Drive is a disk found by inspection.
type Drive struct {
	// name of the drive as the BMC reports it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
	// model of the drive.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Model string `json:"model,omitempty"`
	// serialNumber of the drive.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SerialNumber string `json:"serialNumber,omitempty"`
	// capacityBytes of the drive.
	// +optional
	CapacityBytes int64 `json:"capacityBytes,omitempty"`
	// mediaType is HDD or SSD.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	MediaType string `json:"mediaType,omitempty"`
	// wwn of the drive (its NAA or EUI-64 durable name), lower case, without 0x.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	WWN string `json:"wwn,omitempty"`
	// vendor (manufacturer) of the drive.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Vendor string `json:"vendor,omitempty"`
}

// RootDevice is the drive a claim installs to, chosen by the host's root device hints when the
// claim was made.
type RootDevice struct {
	// name of the drive as the BMC lists it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
	// serialNumber the deploy image finds the drive by.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SerialNumber string `json:"serialNumber,omitempty"`
	// wwn the deploy image finds the drive by, when the BMC reports one.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	WWN string `json:"wwn,omitempty"`
	// capacityBytes of the drive.
	// +optional
	CapacityBytes int64 `json:"capacityBytes,omitempty"`
}

// Inventory is what inspection read from the BMC, without an agent on the host.
type Inventory struct {
	// +optional
	// +kubebuilder:validation:MaxLength=64
	UUID string `json:"uuid,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Manufacturer string `json:"manufacturer,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Model string `json:"model,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SerialNumber string `json:"serialNumber,omitempty"`
	// cpuCount is the number of processor sockets.
	// +optional
	CPUCount int32 `json:"cpuCount,omitempty"`
	// cpuCores is the total number of cores.
	// +optional
	CPUCores int32 `json:"cpuCores,omitempty"`
	// cpuModel of the first processor.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CPUModel string `json:"cpuModel,omitempty"`
	// memoryMiB is the total system memory.
	// +optional
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// dimms are the installed memory modules (empty slots are not listed).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	DIMMs []DIMM `json:"dimms,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	NICs []NIC `json:"nics,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Drives []Drive `json:"drives,omitempty"`
	// biosVersion is the system firmware version.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	BIOSVersion string `json:"biosVersion,omitempty"`
	// bmcFirmwareVersion is the BMC firmware version.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	BMCFirmwareVersion string `json:"bmcFirmwareVersion,omitempty"`
}

// HostClaim records who holds a host and the intent of that claim, copied from the claiming
// machine when the claim is made. Nothing here is read back from a template later.
type HostClaim struct {
	// consumer is the RedfishMachine holding the host. The single owner of the host.
	// +required
	Consumer ObjectRef `json:"consumer,omitzero"`

	// consumerUID is the UID of the consumer, so that a recreated object of the same name is not
	// mistaken for the owner.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ConsumerUID string `json:"consumerUID,omitempty"`

	// owner is the MachineDeployment or control plane the consumer belongs to. With nodeReuse the
	// host stays reserved for this owner after release.
	// +optional
	Owner *ObjectRef `json:"owner,omitempty"`

	// nodeReuse as the consumer's spec said when the claim was made.
	// +optional
	NodeReuse bool `json:"nodeReuse,omitempty"`

	// automatedCleaningMode as the consumer's spec said when the claim was made.
	// +optional
	AutomatedCleaningMode AutomatedCleaningMode `json:"automatedCleaningMode,omitempty"`

	// image the consumer asked for, copied when the claim was made.
	// +optional
	Image *Image `json:"image,omitempty"`

	// bootMethod the consumer asked for, copied when the claim was made.
	// +optional
	BootMethod BootMethod `json:"bootMethod,omitempty"`

	// rootDevice is the drive the image is installed to (formats raw, qcow2 and iso), chosen by
	// the host's rootDeviceHints when the claim was made.
	// +optional
	RootDevice *RootDevice `json:"rootDevice,omitempty"`

	// clusterName is the Cluster of the consumer. While that Cluster is paused (clusterctl move)
	// a missing consumer is not taken as gone.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	ClusterName string `json:"clusterName,omitempty"`

	// since is when the claim was made.
	// +optional
	Since metav1.Time `json:"since,omitzero"`

	// provisioned is set by the consumer once its Node joined: the host runs the image.
	// +optional
	Provisioned bool `json:"provisioned,omitempty"`

	// release is set by the consumer when it is deleted: the host powers off, is cleaned unless
	// the claim says otherwise, and returns to the pool (reserved for owner with nodeReuse). The
	// host controller sets it too when the consumer no longer exists (consumerMissingSince).
	// +optional
	Release bool `json:"release,omitempty"`

	// consumerMissingSince is when the host controller first found the consumer gone (its
	// finalizer removed by hand, a partial restore). Still gone after a grace period (moves
	// recreate machines), the claim is released like a deleted machine's.
	// +optional
	ConsumerMissingSince *metav1.Time `json:"consumerMissingSince,omitempty"`
}

// EraseStatus follows the drive erases of one cleaning.
type EraseStatus struct {
	// startedAt is when the erases were started on the BMC.
	// +required
	StartedAt metav1.Time `json:"startedAt,omitzero"`

	// drives are the Redfish paths of the drives whose erase was started.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=512
	Drives []string `json:"drives,omitempty"`

	// tasks are the BMC tasks (or task monitors) of the erases still to confirm.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=512
	Tasks []string `json:"tasks,omitempty"`
}

// RedfishHostStatus is the observed state of one physical server.
type RedfishHostStatus struct {
	// state is the lifecycle state.
	// +optional
	State HostState `json:"state,omitempty"`

	// bootIssuedAt is when the provisioning boot was sent to the BMC for the current claim, so it
	// is never sent twice.
	// +optional
	BootIssuedAt *metav1.Time `json:"bootIssuedAt,omitempty"`

	// liveBootIssuedAt is when the provider last booted a provisioned host's live image again
	// (its media, seed and boot override prepared, then the power-on recorded before it was sent):
	// a live OS keeps nothing across a power-off, so every power-on the provider sends boots the
	// image with its seed. Cleared when the claim is released.
	// +optional
	LiveBootIssuedAt *metav1.Time `json:"liveBootIssuedAt,omitempty"`

	// install is the progress of writing the claim's image to the root drive (formats raw,
	// qcow2 and iso) before the host boots from it; nil for a live image, or before it began.
	// +optional
	Install *InstallStatus `json:"install,omitempty"`

	// serviceBoot is the image of spec.serviceBoot the host is attached to and booting (nil when
	// none): set once the image and the override are in place, cleared once they are gone.
	// +optional
	ServiceBoot *ServiceBootStatus `json:"serviceBoot,omitempty"`

	// powerState as the BMC last reported it (On, Off, PoweringOn, PoweringOff).
	// +optional
	// +kubebuilder:validation:MaxLength=32
	PowerState string `json:"powerState,omitempty"`

	// softPowerOffSentAt is when the host's power button was pressed (GracefulShutdown) for a
	// Soft power-off, recorded before the press: it is pressed once per power-off (a second press
	// can turn a server that is shutting down back on), and the host is forced off only once the
	// manager's soft power-off timeout has passed with the server still on. Cleared once off.
	// +optional
	SoftPowerOffSentAt *metav1.Time `json:"softPowerOffSentAt,omitempty"`

	// restoreWaitSince is when inspection found this unclaimed host powered on: it may run a
	// machine whose objects are still being recreated (clusterctl move, a restore), so it is not
	// offered to other machines until a grace period passed without a machine claiming it back.
	// +optional
	RestoreWaitSince *metav1.Time `json:"restoreWaitSince,omitempty"`

	// erase follows the secure erase of a released host's drives (Cleaning).
	// +optional
	Erase *EraseStatus `json:"erase,omitempty"`

	// registeredAddress is the spec.bmc.address the host was registered and inspected at. When
	// the spec points elsewhere (an unclaimed host re-pointed at another server), the host
	// registers and inspects again.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	RegisteredAddress string `json:"registeredAddress,omitempty"`

	// inventory read over Redfish.
	// +optional
	Inventory *Inventory `json:"inventory,omitempty"`

	// claim is the current claim, if any.
	// +optional
	Claim *HostClaim `json:"claim,omitempty"`

	// reservedFor is the owner a released nodeReuse host is kept for.
	// +optional
	ReservedFor *ObjectRef `json:"reservedFor,omitempty"`

	// lease names the one maintenance whose firmware or BIOS work may reach the host's BMC now
	// (flash, stage, boot into the BIOS setup). It is written with the host's resourceVersion
	// before the first request, so two maintenances never both hold it, and released once the BMC
	// shows that work ended. RedfishJobs of others wait while it is held.
	// +optional
	Lease *HostLease `json:"lease,omitempty"`

	// conditions of the host.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:metadata:labels="clusterctl.cluster.x-k8s.io/move-hierarchy="
// +kubebuilder:resource:path=redfishhosts,scope=Namespaced,categories=cluster-api,shortName=rfh
// +kubebuilder:printcolumn:name="State",type="string",JSONPath=".status.state"
// +kubebuilder:printcolumn:name="Power",type="string",JSONPath=".status.powerState"
// +kubebuilder:printcolumn:name="Consumer",type="string",JSONPath=".status.claim.consumer.name"
// +kubebuilder:printcolumn:name="Cordoned",type="string",JSONPath=".spec.cordon.reason",priority=1
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// RedfishHost is one physical server driven through its BMC's Redfish API.
type RedfishHost struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec RedfishHostSpec `json:"spec,omitzero"`
	// +optional
	Status RedfishHostStatus `json:"status,omitzero"`
}

// GetConditions returns the conditions of the host.
func (h *RedfishHost) GetConditions() []metav1.Condition { return h.Status.Conditions }

// SetConditions sets the conditions of the host.
func (h *RedfishHost) SetConditions(c []metav1.Condition) { h.Status.Conditions = c }

// +kubebuilder:object:root=true

// RedfishHostList is a list of RedfishHosts.
type RedfishHostList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RedfishHost `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &RedfishHost{}, &RedfishHostList{})
}
