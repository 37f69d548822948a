package simulator

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestIndependentClientSushyDrivesTheSimulator checks the simulator against OpenStack's sushy
// (Debian python3-sushy, the Redfish library of Ironic), a client not written here: it reads the
// system, sets a one-time PXE boot override, inserts virtual media and power-cycles.
// .ci/run installs sushy and sets CAPRF_REQUIRE_SUSHY=1 so CI cannot silently skip this.
func TestIndependentClientSushyDrivesTheSimulator(t *testing.T) {
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import sushy").Run(); err != nil {
		if os.Getenv("CAPRF_REQUIRE_SUSHY") != "" {
			t.Fatalf("sushy is required but %s cannot import it: %v", python, err)
		}
		t.Skip("python3-sushy not installed (apt-get install python3-sushy)")
	}
	s, err := New(Config{ID: "sushy", PowerLatency: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	boots := make(chan BootEvent, 4)
	s.OnBoot(func(e BootEvent) { boots <- e })

	const image = "http://images.example/live.iso"
	user, pass := s.Credentials()
	cmd := exec.Command(python, "testdata/sushy_check.py", s.URL(), user, pass, image)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("sushy failed: %v\n%s", err, stderr)
	}
	var got struct {
		Systems         int      `json:"systems"`
		UUID            string   `json:"uuid"`
		PowerBefore     string   `json:"power_before"`
		NICs            []string `json:"nics"`
		BootTarget      string   `json:"boot_target"`
		BootEnabled     string   `json:"boot_enabled"`
		MediaInserted   bool     `json:"media_inserted"`
		MediaImage      string   `json:"media_image"`
		PowerAfterOn    string   `json:"power_after_on"`
		PowerAfterCycle string   `json:"power_after_cycle"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("sushy output %q: %v", out, err)
	}
	if got.Systems != 1 || got.UUID == "" || len(got.NICs) != 2 || got.PowerBefore != "Off" {
		t.Errorf("sushy read the system as %+v", got)
	}
	if got.BootTarget != "Pxe" || got.BootEnabled != "Once" {
		t.Errorf("sushy saw boot override %s/%s, want Pxe/Once", got.BootTarget, got.BootEnabled)
	}
	if !got.MediaInserted || got.MediaImage != image {
		t.Errorf("sushy saw media %v %q", got.MediaInserted, got.MediaImage)
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
