package simulator

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestIndependentClientSushyDrivesEveryProfile checks the simulator, on every BMC profile,
// against OpenStack's sushy (Debian python3-sushy, the Redfish library of Ironic), a client not
// written here: it reads the systems, sets a one-time PXE boot override, inserts virtual media
// where a manager lists it, stages a BIOS setting where there is a Bios resource and power-cycles.
// What sushy sees must be what the profile has. .ci/run installs sushy and sets
// CAPRF_REQUIRE_SUSHY=1 so CI cannot silently skip this.
func TestIndependentClientSushyDrivesEveryProfile(t *testing.T) {
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import sushy").Run(); err != nil {
		if os.Getenv("CAPRF_REQUIRE_SUSHY") != "" {
			t.Fatalf("sushy is required but %s cannot import it: %v", python, err)
		}
		t.Skip("python3-sushy not installed (apt-get install python3-sushy)")
	}
	for _, name := range ProfileNames() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sushyCheck(t, Profiles[name])
		})
	}
}

func sushyCheck(t *testing.T, p Profile) {
	s, err := New(Config{ID: "sushy-" + p.Name, PowerLatency: 50 * time.Millisecond, Profile: p})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	boots := make(chan BootEvent, 4)
	s.OnBoot(func(e BootEvent) { boots <- e })

	const image = "http://images.example/live.iso"
	user, pass := s.Credentials()
	out, err := exec.Command("/usr/bin/python3", "testdata/sushy_check.py", s.URL(), user, pass, image).Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("sushy failed: %v\n%s", err, stderr)
	}
	var got struct {
		Systems     int       `json:"systems"`
		UUID        string    `json:"uuid"`
		PowerBefore string    `json:"power_before"`
		NICs        *[]string `json:"nics"`
		BootTarget  string    `json:"boot_target"`
		BootEnabled string    `json:"boot_enabled"`
		Media       *struct {
			Inserted bool   `json:"inserted"`
			Image    string `json:"image"`
		} `json:"media"`
		BiosPending     *string `json:"bios_pending"`
		PowerAfterOn    string  `json:"power_after_on"`
		PowerAfterCycle string  `json:"power_after_cycle"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("sushy output %q: %v", out, err)
	}
	if got.Systems != p.systems() || got.UUID == "" || got.PowerBefore != "Off" {
		t.Errorf("sushy read %d systems, UUID %q, power %s; want %d, a UUID, Off", got.Systems, got.UUID, got.PowerBefore, p.systems())
	}
	wantNICs := map[bool]int{true: 0, false: 2}[p.NoNICs]
	if p.ExtraInterfaces {
		wantNICs = 4 // sushy lists the VLAN and the host interface too: it does not filter them
	}
	if (got.NICs == nil) != p.NoNICs || got.NICs != nil && len(*got.NICs) != wantNICs {
		t.Errorf("sushy read NICs %v, want %d", got.NICs, wantNICs)
	}
	if got.BootTarget != "Pxe" || got.BootEnabled != "Once" {
		t.Errorf("sushy saw boot override %s/%s, want Pxe/Once", got.BootTarget, got.BootEnabled)
	}
	// sushy 4.3 looks for virtual media under managers only.
	if wantMedia := p.mediaUnderManager(); (got.Media != nil) != wantMedia || got.Media != nil && (!got.Media.Inserted || got.Media.Image != image) {
		t.Errorf("sushy saw media %+v; want it inserted with %s: %v", got.Media, image, wantMedia)
	}
	wantBios := "LegacyBios"
	if p.PatchRequiresIfMatch {
		wantBios = "refused: 428" // sushy 4.3 sends BIOS settings without If-Match (the bmc package does not)
	}
	if (got.BiosPending != nil) == p.NoBios || got.BiosPending != nil && *got.BiosPending != wantBios {
		t.Errorf("sushy staged BIOS BootMode = %v, want %s unless the profile has no BIOS", deref(got.BiosPending), wantBios)
	}
	if got.PowerAfterOn != "On" || got.PowerAfterCycle != "On" {
		t.Errorf("power after on / restart = %s / %s", got.PowerAfterOn, got.PowerAfterCycle)
	}
	// What the system actually did: first boot from PXE (the one-time override), then from disk.
	first, second := <-boots, <-boots
	if first.Target != "Pxe" || second.Target != "None" {
		t.Errorf("boots = %s then %s, want Pxe then None", first.Target, second.Target)
	}
	if st := s.Stats(); st.Resets["On"] != 1 || st.Resets["ForceRestart"] != 1 {
		t.Errorf("resets carried out = %v", st.Resets)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}
