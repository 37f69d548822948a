package simulator

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Profile is the shape of a simulated BMC: which resources it has and where. The zero value is the
// DMTF-like default (one system; Storage with erasable drives; BIOS with an attribute registry;
// virtual media listed under the system and the manager; UpdateService and TaskService).
type Profile struct {
	// Name identifies the profile (see Profiles).
	Name string
	// Systems is how many systems the BMC manages (a bladed chassis: several). Only the first
	// is a full server; the others answer with their identity and power state. Default 1.
	Systems int
	// NoBios: the system has no Bios resource.
	NoBios bool
	// NoUpdateService: the service root has no UpdateService.
	NoUpdateService bool
	// NoNICs: the system lists no EthernetInterfaces.
	NoNICs bool
	// SimpleStorageOnly: the drives are listed only as SimpleStorage devices (no Storage, no
	// Drive resources, nothing to erase).
	SimpleStorageOnly bool
	// Media says where virtual media is listed: "" (under the system and the manager),
	// "system", "manager" or "none".
	Media string
	// BootTargets are the boot override targets the system allows (its
	// BootSourceOverrideTarget@Redfish.AllowableValues); others are refused. Default: None, Pxe,
	// Cd, Hdd, UefiHttp, BiosSetup.
	BootTargets []string
	// NoBootMode: the system has no BootSourceOverrideMode property and refuses a PATCH that sets it.
	NoBootMode bool
	// NoMediaActions: virtual media offers no InsertMedia/EjectMedia actions; it is inserted and
	// ejected by PATCHing Image and Inserted, and keeps showing its Image after Inserted goes
	// false until Image is cleared (null).
	NoMediaActions bool
	// ExtraInterfaces adds what some BMCs list among a system's EthernetInterfaces besides its
	// NICs: a VLAN sub-interface of the first NIC and the Redfish host interface (both
	// EthernetInterfaceType Virtual); and the NICs report a MACAddress the OS set (a bond)
	// that differs from their PermanentMACAddress.
	ExtraInterfaces bool
	// UpdateTargetsListed: SimpleUpdate lists Targets@Redfish.AllowableValues (its firmware
	// inventory entries, not the system or manager) and refuses any other target.
	UpdateTargetsListed bool
	// UpdateWithoutMonitor: SimpleUpdate answers 204 without a task monitor; the update still
	// runs as a task of the TaskService.
	UpdateWithoutMonitor bool
	// NoAttributeRegistry: the BMC publishes no BIOS attribute registry (the Bios resource still
	// names one).
	NoAttributeRegistry bool
	// BiosRegistryName is the AttributeRegistry the Bios resource names (default the registry
	// file's Id, "BiosAttributeRegistry.v1_0_0"): iDRAC names a later minor version than the
	// file it publishes, Supermicro the prefix alone.
	BiosRegistryName string
	// NoApplyTime: the BIOS settings object advertises no SupportedApplyTimes and refuses a PATCH
	// carrying @Redfish.SettingsApplyTime; settings apply on the next reset.
	NoApplyTime bool
	// ETags: resources carry @odata.etag (so clients such as gofish send If-Match).
	ETags bool
	// ActionsRefuseIfMatch: an action POST carrying If-Match is refused with 412, as iDRAC does.
	ActionsRefuseIfMatch bool
	// PatchRequiresIfMatch: a PATCH without If-Match is refused with 428 PreconditionRequired, as
	// Lenovo XCC and AMI-based BMCs do.
	PatchRequiresIfMatch bool
	// NoBootProgress: the system reports no BootProgress (older firmware): nobody can tell from
	// the BMC when POST is over.
	NoBootProgress bool
	// BootLockedDuringPOST: for this long after a power-on the system is in POST and refuses a
	// boot override PATCH with 400 UnableToModifyDuringSystemPOST, as HPE iLO does.
	BootLockedDuringPOST time.Duration
	// StrictMediaPayload: InsertMedia refuses the Inserted and WriteProtected parameters and
	// requires TransferProtocolType, as Supermicro does.
	StrictMediaPayload bool
	// PowerOnRefusedAfterOff: for this long after a power-off completes, a power-on answers 409,
	// as iDRAC does for up to a minute.
	PowerOnRefusedAfterOff time.Duration
	// BootOnlyInSettings: Boot is read-only on the system (400 PropertyNotWritable); the system's
	// @Redfish.Settings object takes it, as on iDRAC 10.
	BootOnlyInSettings bool
	// BiosSettings is where the BIOS settings object lives, relative to the Bios resource (the
	// Bios resource's @Redfish.Settings names it). Default Settings; Lenovo uses Pending,
	// Supermicro SD, HPE settings/ (lower case, trailing slash).
	BiosSettings string
	// BootPatchNeedsAll: a Boot PATCH must carry BootSourceOverrideEnabled and
	// BootSourceOverrideTarget together (400 otherwise), as Supermicro requires.
	BootPatchNeedsAll bool
	// PushUpdatesOnly: the UpdateService offers no SimpleUpdate, only MultipartHttpPushUri (the
	// image is pushed to the BMC), as Supermicro does.
	PushUpdatesOnly bool
	// MonitorOnly: an accepted update answers 202 with only a task monitor in Location and no
	// body (the Task is found through the monitor).
	MonitorOnly bool
	// PurgeTasksAfter: a finished task (and its monitor) is forgotten this long after it ended
	// (404), as many BMCs do.
	PurgeTasksAfter time.Duration
	// MaxSessions: logins beyond this many open sessions are refused (503 SessionLimitExceeded),
	// as BMCs with small session tables do. 0: no limit.
	MaxSessions int
	// SessionLimitIDRAC: a login refused for the session limit answers as iDRAC does
	// (IDRAC.2.8.RAC0218, "The maximum number of user sessions is reached") instead of the DMTF
	// Base registry's SessionLimitExceeded.
	SessionLimitIDRAC bool
	// SessionsPath is where the session collection lives (the service root's Links.Sessions).
	// Default /redfish/v1/SessionService/Sessions.
	SessionsPath string
}

func (p Profile) biosSettingsLink() string {
	if p.BiosSettings == "" {
		return biosPath + "/Settings"
	}
	return biosPath + "/" + p.BiosSettings
}

func (p Profile) sessionsPath() string {
	if p.SessionsPath == "" {
		return rootPath + "/SessionService/Sessions"
	}
	return p.SessionsPath
}

var defaultBootTargets = []string{"None", "Pxe", "Cd", "Hdd", "UefiHttp", "BiosSetup"}

func (p Profile) biosRegistryName() string {
	if p.BiosRegistryName == "" {
		return "BiosAttributeRegistry.v1_0_0"
	}
	return p.BiosRegistryName
}

func (p Profile) bootTargets() []string {
	if len(p.BootTargets) == 0 {
		return defaultBootTargets
	}
	return p.BootTargets
}

// Profiles are the BMC shapes the simulator offers, by name.
var Profiles = map[string]Profile{
	"dmtf": {Name: "dmtf"},
	// An older single system: drives as SimpleStorage devices, virtual media under the system, no
	// UEFI HTTP boot and no boot mode property, no BIOS attribute registry nor settings apply time,
	// no BootProgress.
	"simple-storage": {Name: "simple-storage", SimpleStorageOnly: true, Media: "system",
		BootTargets: []string{"None", "Pxe", "Cd", "Hdd", "BiosSetup"}, NoBootMode: true, NoAttributeRegistry: true, NoApplyTime: true,
		NoBootProgress: true},
	// Storage with drives, virtual media only under the manager and without actions (PATCH).
	// Its system lists a VLAN sub-interface and the host interface among its EthernetInterfaces.
	// Its firmware updates are accepted with 204 and no task monitor.
	"manager-media": {Name: "manager-media", Media: "manager", NoMediaActions: true, ExtraInterfaces: true, UpdateWithoutMonitor: true},
	// Dell iDRAC9, as far as modelled: ETags on resources, 412 for an action carrying If-Match,
	// virtual media under the manager (firmware before 6.x), a power-on refused (409) for a
	// while after a power-off (a minute on real iDRACs, 2 s here); a small session table (the
	// figure is the simulator's: real limits vary by model and firmware).
	"dell-idrac9": {Name: "dell-idrac9", ETags: true, ActionsRefuseIfMatch: true, Media: "manager", PowerOnRefusedAfterOff: 2 * time.Second,
		MaxSessions: 8, SessionLimitIDRAC: true, BiosRegistryName: "BiosAttributeRegistry.v1_0_3"},
	// Dell iDRAC 10, as far as modelled: the boot override only through the system's settings object.
	"dell-idrac10": {Name: "dell-idrac10", BootOnlyInSettings: true, ETags: true},
	// Lenovo XCC, as far as modelled: virtual media under the manager, inserted and ejected by
	// PATCH (no actions); ETags, and PATCHes refused without If-Match; BIOS settings at Bios/Pending;
	// SimpleUpdate takes only the firmware inventory entries it lists as Targets.
	"lenovo-xcc": {Name: "lenovo-xcc", Media: "manager", NoMediaActions: true, ETags: true, PatchRequiresIfMatch: true,
		BiosSettings: "Pending", UpdateTargetsListed: true},
	// HPE iLO 5, as far as modelled: boot overrides refused while the system is in POST; ETags;
	// BIOS settings at bios/settings/; an update answered with a task monitor only.
	"hpe-ilo5": {Name: "hpe-ilo5", BootLockedDuringPOST: time.Second, ETags: true, BiosSettings: "settings/", MonitorOnly: true},
	// Supermicro X13, as far as modelled: virtual media under the manager, with a strict
	// InsertMedia payload; a Boot PATCH needs Enabled and Target together; BIOS settings at Bios/SD;
	// firmware only pushed (multipart), and finished tasks soon forgotten.
	"supermicro-x13": {Name: "supermicro-x13", Media: "manager", StrictMediaPayload: true, BootPatchNeedsAll: true,
		BiosSettings: "SD", PushUpdatesOnly: true, PurgeTasksAfter: time.Second, BiosRegistryName: "BiosAttributeRegistry"},
	// A bladed BMC: four systems, and no BIOS, NICs, virtual media or UpdateService; its session
	// collection is not where most BMCs keep it.
	"bladed": {Name: "bladed", Systems: 4, NoBios: true, NoNICs: true, Media: "none", NoUpdateService: true,
		SessionsPath: rootPath + "/Sessions"},
}

// ProfileNames lists the profiles' names, sorted.
func ProfileNames() []string {
	names := make([]string, 0, len(Profiles))
	for n := range Profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ParseProfiles reads a comma-separated list of profile names (a mixed fleet, given to the
// servers in turn).
func ParseProfiles(list string) ([]Profile, error) {
	var out []Profile
	for _, name := range strings.Split(list, ",") {
		p, err := ProfileNamed(strings.TrimSpace(name))
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// ProfileNamed returns the profile of that name.
func ProfileNamed(name string) (Profile, error) {
	p, ok := Profiles[name]
	if !ok {
		return Profile{}, fmt.Errorf("unknown simulator profile %q (known: %v)", name, ProfileNames())
	}
	return p, nil
}

func (p Profile) systems() int { return max(p.Systems, 1) }

func (p Profile) mediaUnderSystem() bool { return p.Media == "" || p.Media == "system" }

func (p Profile) mediaUnderManager() bool { return p.Media == "" || p.Media == "manager" }

func (p Profile) hasMedia() bool { return p.Media != "none" }

// validate refuses combinations the simulator cannot serve.
func (p Profile) validate() error {
	if !slices.Contains([]string{"", "system", "manager", "none"}, p.Media) {
		return fmt.Errorf("simulator profile %q: Media %q is not one of system, manager, none", p.Name, p.Media)
	}
	return nil
}
