package v1alpha1

// Labels and annotations of this provider. Intent is never kept in labels: these only select.
const (
	// FailureDomainLabel is the host label that names the failure domain a host sits in, unless a
	// RedfishCluster names another label in spec.failureDomainLabel.
	FailureDomainLabel = "topology.kubernetes.io/zone"

	// ClusterctlMoveLabel makes `clusterctl move` carry objects that have no Cluster owner (hosts
	// and their credentials Secrets).
	ClusterctlMoveLabel = "clusterctl.cluster.x-k8s.io/move"

	// BMCCredentialsLabel marks a Secret whose username and password may be sent to a BMC. A
	// host naming a Secret without it is refused at admission and never connects: anyone who may
	// edit a RedfishHost could otherwise point spec.bmc.credentialsName at any Secret of the
	// namespace and spec.bmc.address at a server of theirs, and receive its keys.
	BMCCredentialsLabel = "caprf.io/bmc-credentials"

	// HostClaimedByAnnotation is the host controller's record, on the host's metadata, of the
	// RedfishMachine whose claim the host carries (until its release ended). `clusterctl move`
	// and backups recreate a host without its status but with its annotations: a host that
	// comes back with this record is restored only to that machine, or cleaned before it is
	// offered again; never Available with the previous tenant's disks.
	HostClaimedByAnnotation = "redfishhost.infrastructure.cluster.x-k8s.io/claimed-by"
	// HostClaimedClusterAnnotation records the Cluster of that claim: while that Cluster is
	// paused (clusterctl move pauses it), a restored host waits for its machine without limit.
	HostClaimedClusterAnnotation = "redfishhost.infrastructure.cluster.x-k8s.io/claimed-cluster"
	// HostReservedForAnnotation records, as JSON, the owner a released host is reserved for
	// (nodeReuse): a restored host keeps its reservation, and is cleaned if its owner is gone.
	HostReservedForAnnotation = "redfishhost.infrastructure.cluster.x-k8s.io/reserved-for"
)

// BootMethod is how a host boots the provisioning image.
// +kubebuilder:validation:Enum=VirtualMedia;PXE;UefiHttp
type BootMethod string

const (
	// BootMethodVirtualMedia inserts the image as a virtual CD through the BMC.
	BootMethodVirtualMedia BootMethod = "VirtualMedia"
	// BootMethodPXE sets a one-time PXE boot override.
	BootMethodPXE BootMethod = "PXE"
	// BootMethodUefiHTTP sets a one-time UEFI HTTP boot override to the image URL.
	BootMethodUefiHTTP BootMethod = "UefiHttp"
)

// AutomatedCleaningMode says whether a host's disks are cleaned when it is released.
// +kubebuilder:validation:Enum=Metadata;Disabled
type AutomatedCleaningMode string

const (
	// CleaningModeMetadata erases partition tables and metadata of every drive on release.
	CleaningModeMetadata AutomatedCleaningMode = "Metadata"
	// CleaningModeDisabled releases the host without touching its drives.
	CleaningModeDisabled AutomatedCleaningMode = "Disabled"
)

// Image is the operating system image a host is provisioned with.
type Image struct {
	// url is where the image is downloaded from (http or https).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	URL string `json:"url,omitempty"`

	// format of the image.
	// +optional
	// +kubebuilder:validation:Enum=raw;qcow2;iso;live-iso
	Format string `json:"format,omitempty"`
}

// ObjectRef names an object of a known kind in a known namespace.
type ObjectRef struct {
	// apiGroup of the referenced object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	APIGroup string `json:"apiGroup,omitempty"`

	// kind of the referenced object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind,omitempty"`

	// namespace of the referenced object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`

	// name of the referenced object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
}
