package v1alpha1

import "strings"

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

	// format of the image:
	//   - raw, qcow2: a disk image (image-builder's output, a distribution's cloud image). It is
	//     written to the host's root drive (spec.rootDeviceHints of the RedfishHost) by the deploy
	//     image, its checksum verified while it streams, and the host then boots from that drive.
	//   - iso: a self-installing ISO (Fedora CoreOS / Flatcar with an install target, Talos,
	//     Ubuntu autoinstall), booted once with the seed; the power-off that ends its install
	//     is the signal to boot from disk.
	//   - live-iso: an image that runs from RAM. It is booted from virtual media (or the network)
	//     and keeps nothing across a reboot: see the README.
	// Omitted, it is read from the URL's extension (.raw, .qcow2/.qcow, .iso: live-iso; .img
	// says nothing: image-builder's raw output and the distributions' qcow2 cloud images share it);
	// an URL whose extension says nothing, or says another format, is refused at admission.
	// +optional
	// +kubebuilder:validation:Enum=raw;qcow2;iso;live-iso
	Format ImageFormat `json:"format,omitempty"`

	// checksum of the image: the hex digest, or an http(s) URL of a checksum file
	// (sha256sum/sha512sum output; the line naming the image's file is used). Required for raw
	// and qcow2: a disk image is never written unverified.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Checksum string `json:"checksum,omitempty"`

	// checksumType is sha256 (the default) or sha512.
	// +optional
	// +kubebuilder:validation:Enum=sha256;sha512
	ChecksumType ChecksumType `json:"checksumType,omitempty"`

	// caBundleName is a Secret of the machine's namespace whose key "ca.crt" holds the PEM CA
	// bundle the deploy image trusts when it downloads a raw or qcow2 image over HTTPS. Without
	// it the deploy image's own trust store is used.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	CABundleName string `json:"caBundleName,omitempty"`
}

// ImageFormat is how an image is put on a host.
type ImageFormat string

// Image formats.
const (
	ImageFormatRaw     ImageFormat = "raw"
	ImageFormatQCOW2   ImageFormat = "qcow2"
	ImageFormatISO     ImageFormat = "iso"
	ImageFormatLiveISO ImageFormat = "live-iso"
)

// ChecksumType is the hash an image checksum is computed with.
type ChecksumType string

// Checksum types.
const (
	ChecksumSHA256 ChecksumType = "sha256"
	ChecksumSHA512 ChecksumType = "sha512"
)

// DiskImage says whether an image in this format is written to a drive by the deploy image.
func (f ImageFormat) DiskImage() bool { return f == ImageFormatRaw || f == ImageFormatQCOW2 }

// InstallsToDisk says whether the host boots from its drive once the image is in place (a disk
// image, or a self-installing ISO): such a host needs a root drive.
func (f ImageFormat) InstallsToDisk() bool { return f.DiskImage() || f == ImageFormatISO }

// EffectiveFormat is the image's format, read from the URL's extension when it is omitted (""
// when the extension says nothing).
func (i *Image) EffectiveFormat() ImageFormat {
	if i == nil {
		return ""
	}
	if i.Format != "" {
		return i.Format
	}
	return FormatOfURL(i.URL)
}

// EffectiveChecksumType is the image's checksum type, sha256 when omitted.
func (i *Image) EffectiveChecksumType() ChecksumType {
	if i == nil || i.ChecksumType == "" {
		return ChecksumSHA256
	}
	return i.ChecksumType
}

// FormatOfURL is the format an image URL's file extension names ("" when none does). A
// compressed image (.gz, .xz, .zst) names none: it would be written compressed. Nor does .img:
// image-builder's raw output and the distributions' qcow2 cloud images both use it.
func FormatOfURL(u string) ImageFormat {
	path := u
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	path = strings.ToLower(path)
	switch {
	case strings.HasSuffix(path, ".raw"):
		return ImageFormatRaw
	case strings.HasSuffix(path, ".qcow2"), strings.HasSuffix(path, ".qcow"):
		return ImageFormatQCOW2
	case strings.HasSuffix(path, ".iso"):
		return ImageFormatLiveISO
	}
	return ""
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
