package simulator

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Power states as Redfish reports them.
const (
	PowerOn          = "On"
	PowerOff         = "Off"
	PowerPoweringOn  = "PoweringOn"
	PowerPoweringOff = "PoweringOff"
)

// BootEvent is what a simulated system did when it powered on: which one-time (or continuous)
// boot target was set and which media was inserted. The simulated OS reads it.
type BootEvent struct {
	ServerID string
	Time     time.Time
	// PowerOnAt is when the power-on that led to this boot began: when it was accepted, or, for a
	// restart of a server that was on, when its power-off ended.
	PowerOnAt time.Time
	// Target is the effective boot source: None (disk/default), Pxe, Cd, Hdd, UefiHttp, BiosSetup.
	Target string
	// Mode is UEFI or Legacy.
	Mode string
	// MediaImage is the virtual media image URL, when booting from Cd with media inserted.
	MediaImage string
	// Media is every virtual medium attached at boot (slot ID → image URL), the boot CD
	// included: what the booted OS sees as block devices.
	Media map[string]string
	// HTTPBootURI is the UEFI HTTP boot URI, when booting UefiHttp.
	HTTPBootURI string
	// KernelCmdline is the kernel command line of a network boot: the firmware chained to the
	// fleet's iPXE URL (as DHCP would tell it) and ran the script it got. Empty when it got none.
	KernelCmdline string
	// MACs of the system's NICs, boot NIC first.
	MACs []string
}

type bootOverride struct {
	enabled string // Disabled, Once, Continuous
	target  string // None, Pxe, Cd, Hdd, UefiHttp, BiosSetup
	mode    string // UEFI, Legacy
	httpURI string
}

type drive struct {
	id, model, serial string
	wwn               string // NAA, 16 hex digits
	capacity          int64
	// path is the file holding what was written to the drive (created on first use, sparse,
	// capacity bytes): the simulated OS reads and writes it, an erase zeroes it.
	path          string
	erased        int  // times secure-erased (completed)
	erasing       bool // an erase is running
	noSecureErase bool // no Drive.SecureErase action on this drive
	absent        bool // an empty bay
}

type systemState struct {
	power     string
	postUntil time.Time // in POST until then (boot overrides refused by BootLockedDuringPOST)
	// bootProgress is BootProgress.LastState: None while off, SystemHardwareInitializationComplete
	// during POST, then SetupEntered (a boot into the BIOS setup) or OSBootStarted.
	bootProgress   string
	bootProgressAt time.Time // when bootProgress was entered (BootProgress.LastStateTime)
	powerOns       int       // counts power-ons: a POST ending applies only to the boot it belongs to
	powerOnAt      time.Time // when the last power-on was accepted
	offSince       time.Time // when the last power-off completed (PowerOnRefusedAfterOff)
	boot           bootOverride
	media          []*mediaSlot // virtual media slots; the first is the CD
	bios           map[string]any
	pendingBios    map[string]any
	biosVersion    string
	// pendingBiosVersion is a BIOS image staged by an update, flashed at the next boot.
	pendingBiosVersion string
	bmcVersion         string
	drives             []*drive
	macs               []string
	uuid               string
	shuttingDown       bool // the OS is shutting down after a GracefulShutdown
}

func newSystemState(cfg Config) systemState {
	power, progress := PowerOff, "None"
	if cfg.PoweredOn {
		power, progress = PowerOn, "OSRunning"
	}
	i := cfg.Index
	return systemState{
		power: power, bootProgress: progress,
		boot: bootOverride{enabled: "Disabled", target: "None", mode: "UEFI"},
		bios: map[string]any{
			"BootMode": "Uefi", "ProcTurboMode": "Enabled", "SriovGlobalEnable": "Disabled",
			"ProcVirtualization": "Enabled", "WorkloadProfile": "Balanced", "NumaGroupSizeOpt": 1,
		},
		pendingBios: map[string]any{},
		biosVersion: "U46 v2.80",
		bmcVersion:  "iLO 6 v1.60",
		drives:      drives(cfg),
		macs: []string{
			MAC(cfg.Fleet, i, 1),
			MAC(cfg.Fleet, i, 2),
		},
		uuid:  fmt.Sprintf("4c4c4544-%04x-4000-8000-%012x", cfg.Fleet, i+1),
		media: mediaSlots(cfg.SingleMediaSlot),
	}
}

// drives are the system's two SSDs, then its empty bays.
func drives(cfg Config) []*drive {
	ds := []*drive{
		{id: "Disk0", model: "MZ7LH960HAJR", serial: fmt.Sprintf("S4%s-0", cfg.ID), capacity: 960197124096, wwn: fmt.Sprintf("5002538e%02x%04x00", byte(cfg.Fleet), cfg.Index&0xffff)},
		{id: "Disk1", model: "MZ7LH960HAJR", serial: fmt.Sprintf("S4%s-1", cfg.ID), capacity: 960197124096, wwn: fmt.Sprintf("5002538e%02x%04x01", byte(cfg.Fleet), cfg.Index&0xffff)},
	}
	for _, d := range ds {
		d.noSecureErase = slices.Contains(cfg.NoSecureEraseDrives, d.id)
	}
	for i := range cfg.EmptyBays {
		ds = append(ds, &drive{id: fmt.Sprintf("Bay%d", i+2), absent: true, noSecureErase: true})
	}
	return ds
}

// MAC is the address of NIC nic (1 or 2) of server index of fleet: locally administered,
// 52:<0x54 xor fleet high byte>:<fleet low byte>:<index high>:<index low>:<nic>, so fleet 0 is
// 52:54:00:… and no two (fleet, index, nic) share one.
func MAC(fleet uint16, index, nic int) string {
	return fmt.Sprintf("52:%02x:%02x:%02x:%02x:%02x", 0x54^byte(fleet>>8), byte(fleet), (index>>8)&0xff, index&0xff, nic)
}

// FleetOfMAC returns the fleet number a simulated server's MAC carries (see MAC), false for a MAC
// of another shape.
func FleetOfMAC(mac string) (uint16, bool) {
	var b [6]int
	if n, err := fmt.Sscanf(strings.ToLower(mac), "%02x:%02x:%02x:%02x:%02x:%02x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]); err != nil || n != 6 || b[0] != 0x52 {
		return 0, false
	}
	return uint16(b[1]^0x54)<<8 | uint16(b[2]), true //nolint:gosec // bytes.
}

// chainIPXE is what the firmware of a network-booting server does: DHCP points it at an iPXE
// script for its MAC (Config.IPXEChainURL); the script's kernel line gives the command line.
func (s *Server) chainIPXE(mac string) string {
	if s.cfg.IPXEChainURL == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(s.cfg.IPXEChainURL, "/")+"/"+mac, nil)
	if err != nil {
		return ""
	}
	fw := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.cfg.FirmwareRootCAs, MinVersion: tls.VersionTLS12}}}
	defer fw.CloseIdleConnections()
	resp, err := fw.Do(req)
	if err != nil {
		return ""
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return ""
	}
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "kernel" {
			return strings.Join(f[2:], " ")
		}
	}
	return ""
}

// mediaSlots are a virtual CD and, unless single, a virtual USB stick (where a per-claim seed
// volume goes next to the OS image).
func mediaSlots(single bool) []*mediaSlot {
	slots := []*mediaSlot{{id: "CD1", name: "Virtual CD", types: []string{"CD", "DVD"}}}
	if !single {
		slots = append(slots, &mediaSlot{id: "USB1", name: "Virtual Removable Media", types: []string{"USBStick"}})
	}
	return slots
}

// mediaSlot is one virtual media device of the BMC.
type mediaSlot struct {
	id, name string
	types    []string
	image    string
	inserted bool
}

// biosRegistry describes every BIOS attribute: its type and, for enumerations, allowed values.
var biosRegistry = []map[string]any{
	enumAttr("BootMode", "Uefi", "LegacyBios"),
	enumAttr("ProcTurboMode", "Enabled", "Disabled"),
	enumAttr("SriovGlobalEnable", "Enabled", "Disabled"),
	enumAttr("ProcVirtualization", "Enabled", "Disabled"),
	enumAttr("WorkloadProfile", "Balanced", "MaximumPerformance", "PowerEfficient"),
	{"AttributeName": "NumaGroupSizeOpt", "Type": "Integer", "LowerBound": 1, "UpperBound": 8, "ReadOnly": false},
}

func enumAttr(name string, values ...string) map[string]any {
	vals := make([]any, 0, len(values))
	for _, v := range values {
		vals = append(vals, map[string]any{"ValueName": v})
	}
	return map[string]any{"AttributeName": name, "Type": "Enumeration", "Value": vals, "ReadOnly": false}
}

// validateBios checks one attribute against the registry; it returns a Redfish message ID and
// text when the attribute is unknown or its value does not fit.
func validateBios(name string, value any) (string, string) {
	for _, a := range biosRegistry {
		if a["AttributeName"] != name {
			continue
		}
		switch a["Type"] {
		case "Enumeration":
			s, ok := value.(string)
			if !ok {
				return "Base.1.8.PropertyValueTypeError", fmt.Sprintf("The value for the property %s is of a different type than the property can accept.", name)
			}
			for _, v := range a["Value"].([]any) {
				if v.(map[string]any)["ValueName"] == s {
					return "", ""
				}
			}
			return "Base.1.8.PropertyValueNotInList", fmt.Sprintf("The value %s for the property %s is not in the list of acceptable values.", s, name)
		case "Integer":
			f, ok := value.(float64)
			if !ok || f != float64(int64(f)) {
				return "Base.1.8.PropertyValueTypeError", fmt.Sprintf("The value for the property %s is of a different type than the property can accept.", name)
			}
			if f < float64(a["LowerBound"].(int)) || f > float64(a["UpperBound"].(int)) {
				return "Base.1.8.PropertyValueOutOfRange", fmt.Sprintf("The value for the property %s is out of range.", name)
			}
			return "", ""
		}
	}
	return "Base.1.8.PropertyUnknown", fmt.Sprintf("The property %s is not in the list of valid properties for the resource.", name)
}

// OnBoot registers an observer called (in its own goroutine) every time the system boots.
func (s *Server) OnBoot(f func(BootEvent)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observers = append(s.observers, f)
}

// PowerState returns the true power state (not affected by the WrongPowerState fault).
func (s *Server) PowerState() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.power
}

// BiosAttributes returns the current (applied) BIOS attributes.
func (s *Server) BiosAttributes() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]any{}
	for k, v := range s.state.bios {
		out[k] = v
	}
	return out
}

// post ends the power-on self test of the boot numbered boot, if the server is still in it: staged
// BIOS settings and a staged BIOS image are written, and the server enters its setup screen or
// starts its OS. Caller holds s.mu.
func (s *Server) post(boot int, setup bool) {
	st := &s.state
	if st.powerOns != boot || st.power != PowerOn {
		return // powered off (or again) before POST ended: what was staged stays staged
	}
	for k, v := range st.pendingBios {
		st.bios[k] = v
	}
	st.pendingBios = map[string]any{}
	if st.pendingBiosVersion != "" {
		st.biosVersion, st.pendingBiosVersion = st.pendingBiosVersion, ""
	}
	st.bootProgress, st.bootProgressAt = "OSBootStarted", time.Now()
	if setup {
		st.bootProgress = "SetupEntered"
	}
}

// PendingBIOSVersion returns the BIOS version an update staged for the next boot ("" when none).
func (s *Server) PendingBIOSVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.pendingBiosVersion
}

// FirmwareVersions returns the BIOS and BMC firmware versions running (a staged BIOS image
// counts once the host booted).
func (s *Server) FirmwareVersions() (bios, bmc string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.biosVersion, s.state.bmcVersion
}

// DriveErasures returns how many times each drive was secure-erased.
func (s *Server) DriveErasures() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, d := range s.state.drives {
		if d.absent {
			continue
		}
		out[d.id] = d.erased
	}
	return out
}

// Media returns the image inserted in each virtual media slot ("" when empty).
func (s *Server) Media() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for _, m := range s.state.media {
		if m.inserted {
			out[m.id] = m.image
		} else {
			out[m.id] = ""
		}
	}
	return out
}

// BootOverride returns the boot override the system holds: enabled, target, mode, HTTP boot URI.
func (s *Server) BootOverride() (enabled, target, mode, httpURI string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.state.boot
	return b.enabled, b.target, b.mode, b.httpURI
}

// MACs returns the system's NIC MAC addresses, boot NIC first.
func (s *Server) MACs() []string { return append([]string(nil), s.state.macs...) }

// reset applies a ComputerSystem.Reset; it returns an HTTP status and message. Caller holds s.mu.
func (s *Server) reset(resetType string) (int, string) {
	st := &s.state
	if st.power == PowerPoweringOn || st.power == PowerPoweringOff {
		return 409, "A power transition is in progress."
	}
	lat := s.cfg.PowerLatency
	switch resetType {
	case "On", "ForceOn":
		if st.power == PowerOn {
			return 204, ""
		}
		if time.Now().Before(st.offSince.Add(s.cfg.Profile.PowerOnRefusedAfterOff)) {
			return 409, "The server was powered off moments ago; a power-on is refused for a while."
		}
		s.powerOn(lat)
	case "ForceOff", "GracefulShutdown", "PushPowerButton":
		if st.power == PowerOff {
			if resetType == "PushPowerButton" {
				s.powerOn(lat)
			}
			return 204, ""
		}
		if resetType == "GracefulShutdown" && s.cfg.ShutdownDuration > 0 {
			// The OS shuts down first, the power reading On meanwhile; a press while it does is
			// accepted (and counted) but starts nothing more.
			if !st.shuttingDown {
				st.shuttingDown = true
				s.after(s.cfg.ShutdownDuration, func() {
					if st.shuttingDown && st.power == PowerOn {
						st.power, st.offSince, st.bootProgress, st.bootProgressAt = PowerOff, time.Now(), "None", time.Now()
					}
					st.shuttingDown = false
				})
			}
			break
		}
		st.shuttingDown = false
		st.power = PowerPoweringOff
		st.postUntil = time.Time{} // a server going off is out of POST
		s.after(lat, func() {
			st.power, st.offSince, st.bootProgress, st.bootProgressAt = PowerOff, time.Now(), "None", time.Now()
		})
	case "GracefulRestart", "ForceRestart", "PowerCycle":
		if st.power == PowerOff {
			s.powerOn(lat)
			break
		}
		st.power = PowerPoweringOff
		s.after(lat, func() {
			st.power, st.bootProgress, st.bootProgressAt = PowerOff, "None", time.Now()
			s.powerOn(lat)
		})
	default:
		return 400, fmt.Sprintf("The value %s for the parameter ResetType is not supported.", resetType)
	}
	s.stats.Resets[resetType]++
	if s.updating() {
		s.stats.ResetsDuringUpdate++
	}
	return 204, ""
}

// powerOn starts a boot that completes after lat. Caller holds s.mu.
func (s *Server) powerOn(lat time.Duration) {
	s.state.power = PowerPoweringOn
	s.state.powerOns++
	s.state.powerOnAt = time.Now()
	s.state.postUntil = time.Now().Add(lat + s.cfg.Profile.BootLockedDuringPOST)
	s.after(lat, s.booted)
}

// booted finishes a power-on: POST starts (it writes staged BIOS images and settings when it
// ends, see post), a one-time boot override is consumed, and observers see what was booted.
// Caller holds s.mu.
func (s *Server) booted() {
	st := &s.state
	st.power = PowerOn
	s.stats.Boots++
	st.bootProgress, st.bootProgressAt = "SystemHardwareInitializationComplete", time.Now()
	setup := st.boot.enabled != "Disabled" && st.boot.target == "BiosSetup"
	boot := st.powerOns
	post := s.cfg.POSTDuration
	if post == 0 {
		post = s.cfg.PowerLatency
	}
	s.after(post, func() { s.post(boot, setup) })

	ev := BootEvent{ServerID: s.cfg.ID, Time: time.Now(), PowerOnAt: st.powerOnAt, Target: "None", Mode: st.boot.mode, MACs: append([]string(nil), st.macs...)}
	if st.boot.enabled != "Disabled" {
		ev.Target = st.boot.target
		if st.boot.enabled == "Once" {
			st.boot.enabled, st.boot.target = "Disabled", "None"
		}
	}
	switch ev.Target {
	case "Cd":
		if cd := st.media[0]; cd.inserted {
			ev.MediaImage = cd.image
		}
	case "UefiHttp":
		ev.HTTPBootURI = st.boot.httpURI
	}
	ev.Media = map[string]string{}
	for _, m := range st.media {
		if m.inserted {
			ev.Media[m.id] = m.image
		}
	}
	observers := slices.Clone(s.observers)
	go func() {
		if ev.Target == "Pxe" {
			ev.KernelCmdline = s.chainIPXE(ev.MACs[0])
		}
		for _, f := range observers {
			go f(ev)
		}
	}()
}
