package v1alpha1

// Condition types and reasons. Ready on RedfishMachine is mirrored by CAPI into the Machine's
// InfrastructureReady condition; Ready on RedfishCluster into the Cluster's.
const (
	// ReadyCondition summarises the state of an object.
	ReadyCondition = "Ready"
	// PausedCondition is True while the object or its Cluster is paused.
	PausedCondition = "Paused"

	// BMCReachableCondition is True when the host's BMC answered with the given credentials.
	BMCReachableCondition = "BMCReachable"
	// InspectedCondition is True once the inventory was read over Redfish.
	InspectedCondition = "Inspected"
	// HostClaimedCondition is True on a RedfishMachine that holds a host.
	HostClaimedCondition = "HostClaimed"
	// CleanedCondition is True once every drive of a released host was erased and the erase
	// verified; False while erasing or when the host cannot be cleaned.
	CleanedCondition = "Cleaned"
	// BootPreparedCondition is True once the provisioning boot of the current claim is set up on
	// the BMC (media or boot override); False says why it cannot be.
	BootPreparedCondition = "BootPrepared"
)

// Reasons used with the conditions above.
const (
	ReadyReason                  = "Ready"
	NotReadyReason               = "NotReady"
	PausedReason                 = "Paused"
	NotPausedReason              = "NotPaused"
	WaitingForClusterInfraReason = "WaitingForClusterInfrastructure"
	WaitingForBootstrapReason    = "WaitingForBootstrapData"
	WaitingForHostReason         = "WaitingForAvailableHost"
	// WaitingForHostRestoreReason: the machine ran on the host its providerID names, and waits
	// for that host to come back (after clusterctl move or a restore) to claim it again.
	WaitingForHostRestoreReason = "WaitingForHostRestore"
	// ClaimRestoredReason: a claim lost with an object's status was rebuilt from spec.providerID.
	ClaimRestoredReason = "ClaimRestored"
	ProvisioningReason  = "Provisioning"
	DeletingReason      = "Deleting"

	// MaintenancePlannedCondition (RedfishMachine): True while maintenances of its host are
	// announced (status.maintenances lists them); the name KEP-5683 gives the Node condition.
	MaintenancePlannedCondition = "MaintenancePlanned"
	MaintenanceAnnouncedReason  = "MaintenanceAnnounced"
	NoMaintenanceReason         = "NoMaintenance"

	BMCAuthFailedReason  = "AuthenticationFailed"
	BMCUnreachableReason = "Unreachable"
	// BMCSessionLimitReason: the BMC refused a new session (its session table is full); free
	// sessions on the BMC or set spec.bmc.authMethod: Basic.
	BMCSessionLimitReason = "SessionLimitExceeded"
	// BMCCertificateUntrustedReason: the BMC's TLS certificate is not trusted (its CA is not in
	// the Secret spec.bmc.caBundleName names, key ca.crt); nothing is sent to it.
	BMCCertificateUntrustedReason = "CertificateUntrusted"
	// BMCBusyReason: the BMC refused a change for now (409, or HPE's "in POST"); retried.
	BMCBusyReason = "BMCBusy"
	// BMCConnectingReason: the connection (service root, login) is being made in the background.
	BMCConnectingReason      = "Connecting"
	BMCAddressInvalidReason  = "InvalidAddress"
	CredentialsMissingReason = "CredentialsMissing"
	// CredentialsNotLabelledReason: the credentials Secret lacks BMCCredentialsLabel; nothing is
	// sent to the BMC until it has it.
	CredentialsNotLabelledReason = "CredentialsNotLabelled"

	// ErasingReason: secure erases run on the BMC.
	ErasingReason = "Erasing"
	// ErasedReason: every drive's erase completed.
	ErasedReason = "Erased"
	// EraseFailedReason: an erase failed or could not be started; it is tried again.
	EraseFailedReason = "EraseFailed"
	// NothingToEraseReason: the BMC offers no drive erase; the host is not released.
	NothingToEraseReason = "NothingToErase"
	// DrivesNotErasable: some drives offer no Redfish erase (the condition names them); none
	// was erased and the host stays out of the pool until they are erased out of band and
	// listed in spec.unerasedDrivesAccepted, or the host is registered again.
	DrivesNotErasableReason = "DrivesNotErasable"
	// DrivesMissingReason: drives inspection recorded (by serial) are not listed by the BMC now;
	// none was erased and the host stays out of the pool until they are listed again, or the
	// operator lists their serials in spec.unerasedDrivesAccepted (taken out of the server).
	DrivesMissingReason = "DrivesMissing"

	// NoSeedMediaSlotReason: VirtualMedia provisioning needs a second virtual media device for
	// the seed volume and the BMC has one only.
	NoSeedMediaSlotReason = "NoSeedMediaSlot"
	// BootPreparationFailedReason: the BMC refused setting up the boot.
	BootPreparationFailedReason = "BootPreparationFailed"

	// RootDeviceFoundCondition (RedfishHost) is True when a drive matches the host's root device
	// hints (or, without hints, a drive of at least 4 GiB exists): a machine installing a disk
	// image may claim it.
	RootDeviceFoundCondition = "RootDeviceFound"
	// RootDeviceMatchedReason: a drive matches; the message names it.
	RootDeviceMatchedReason = "Matched"
	// NoMatchingDriveReason: no drive of the inventory matches the hints.
	NoMatchingDriveReason = "NoMatchingDrive"

	// ImageInstalledCondition (RedfishHost) reports writing the claim's image to its root drive.
	ImageInstalledCondition = "ImageInstalled"
	// InstallingReason: the deploy image (or installer) is writing the drive.
	InstallingReason = "Installing"
	// InstalledReason: the image is on the drive, verified.
	InstalledReason = "Installed"
	// ChecksumMismatchReason: the image downloaded does not have the checksum the machine gave;
	// the drive was wiped and is never booted.
	ChecksumMismatchReason = "ChecksumMismatch"
	// ImageFormatMismatchReason: the image downloaded is not in the machine's format (a qcow2 or
	// compressed file said raw, a qcow2 with a backing file); nothing was written.
	ImageFormatMismatchReason = "ImageFormatMismatch"
	// InstallFailedReason: the deploy image reported a failure (download, write, no such drive).
	InstallFailedReason = "InstallFailed"
	// InstallTimedOutReason: no report came within the install timeout.
	InstallTimedOutReason = "InstallTimedOut"
	// NoDeployImageReason: a disk image needs the deploy image, and the manager names none.
	NoDeployImageReason = "NoDeployImage"
)
