package bmc

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// Every Client method against every BMC shape the simulator offers: no panic, a missing capability
// is a typed error (ErrNotSupported, ErrNoSeedSlot, ErrNothingToErase), and one session serves the
// whole run.
func TestEveryMethodOnEveryProfile(t *testing.T) {
	ctx := context.Background()
	const image, seed = "http://images.example/os.iso", "http://seed.example/v1/ns/m/tok/cidata.iso"
	typed := []error{ErrNotSupported, ErrNoSeedSlot, ErrNothingToErase}
	for _, name := range simulator.ProfileNames() {
		t.Run(name, func(t *testing.T) {
			s := newSim(t, simulator.Config{Profile: simulator.Profiles[name]})
			images := imageServer(t)
			pool := NewPool(Options{})
			c, err := settle(t, pool, target(s))
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			p := simulator.Profiles[name]
			media, twoDevices := p.Media != "none", p.Media != "none"
			// What each call needs of the BMC: with it, the call must succeed; without it, a
			// typed error is the only acceptable answer.
			offers := map[string]bool{
				"InsertMedia(image, seed)": media && twoDevices, "InsertMedia(seed)": media,
				"BIOSAttributes": !p.NoBios, "SetBIOSAttributes": !p.NoBios, "UpdateFirmware": !p.NoUpdateService,
				"EraseDrives": !p.SimpleStorageOnly,
			}
			calls := []struct {
				name string
				call func() error
			}{
				{"Check", func() error { return c.Check(ctx) }},
				{"Inventory", func() error { _, err := c.Inventory(ctx); return err }},
				{"PowerState", func() error { _, err := c.PowerState(ctx); return err }},
				{"Reset(On)", func() error { return c.Reset(ctx, ResetOn) }},
				{"Reset(ForceOff)", func() error { waitPower(t, c, PowerOn); return c.Reset(ctx, ResetForceOff) }},
				{"SetBootOverride(Pxe)", func() error { return c.SetBootOverride(ctx, BootOverride{Target: BootPxe}) }},
				{"SetBootOverride(Cd)", func() error { return c.SetBootOverride(ctx, BootOverride{Target: BootCd}) }},
				{"InsertMedia(image, seed)", func() error { return c.InsertMedia(ctx, image, seed) }},
				{"InsertMedia(seed)", func() error { return c.InsertMedia(ctx, "", seed) }},
				{"EjectMedia", func() error { return c.EjectMedia(ctx, "") }},
				{"BIOSAttributes", func() error { _, err := c.BIOSAttributes(ctx); return err }},
				{"SetBIOSAttributes", func() error { return c.SetBIOSAttributes(ctx, map[string]any{"BootMode": "Uefi"}) }},
				{"UpdateFirmware", func() error {
					_, err := c.UpdateFirmware(ctx, images.URL+"/bios.bin", FirmwareBIOS, nil)
					return err
				}},
				{"EraseDrives", func() error { _, err := c.EraseDrives(ctx, nil, nil); return err }},
				{"ErasesInProgress", func() error { _, err := c.ErasesInProgress(ctx, nil); return err }},
				{"TaskStatus(\"\")", func() error {
					if _, err := c.TaskStatus(ctx, ""); err == nil {
						return errors.New("read an empty task URI without an error")
					}
					return nil
				}},
			}
			for _, tc := range calls {
				before := s.Stats().Posts
				err := func() (err error) {
					defer func() {
						if p := recover(); p != nil {
							err = fmt.Errorf("panic: %v", p)
						}
					}()
					return tc.call()
				}()
				needs, listed := offers[tc.name]
				switch {
				case err == nil:
				case !listed || needs:
					t.Errorf("%s: %v (the profile offers what it needs: want success)", tc.name, err)
				case !isOneOf(err, typed):
					t.Errorf("%s: %v (want one of %v)", tc.name, err, typed)
				}
				for path, n := range s.Stats().Posts {
					if n-before[path] > 1 {
						t.Errorf("%s: %d POSTs to %s carried out, want at most one", tc.name, n-before[path], path)
					}
				}
			}
			// Every POST went where the BMC declares it: an action's target, a push URI or the
			// session collection the service root links.
			declared := declaredPostTargets(t, s)
			for path := range s.Stats().Posts {
				if !declared[path] {
					t.Errorf("POST to %s, which no resource declares (declared: %v)", path, slices.Sorted(maps.Keys(declared)))
				}
			}
			if n := s.Stats().SessionsCreated; n != 1 {
				t.Errorf("%d sessions created, want 1", n)
			}
			if n := s.Stats().IfMatchOnActions; n != 0 {
				t.Errorf("%d action POSTs carried If-Match (iDRAC refuses them)", n)
			}
		})
	}
}

// declaredPostTargets walks the BMC's resource tree (as an independent reader, with basic auth)
// and collects every URI a client may POST to: action targets, MultipartHttpPushUri and the
// session collection.
func declaredPostTargets(t *testing.T, s *simulator.Server) map[string]bool {
	t.Helper()
	user, pass := s.Credentials()
	out := map[string]bool{}
	seen := map[string]bool{}
	queue := []string{"/redfish/v1"}
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				walk(e, k)
			}
		case []any:
			for _, e := range v {
				walk(e, key)
			}
		case string:
			switch {
			case key == "target" || key == "MultipartHttpPushUri":
				out[v] = true
			case key == "@odata.id" && strings.HasPrefix(v, "/redfish/v1") && !strings.Contains(v, "#") && !seen[v]:
				seen[v] = true
				queue = append(queue, v)
			}
		}
	}
	for len(queue) > 0 && len(seen) < 500 {
		path := queue[0]
		queue = queue[1:]
		req, _ := http.NewRequest(http.MethodGet, s.URL()+path, nil)
		req.SetBasicAuth(user, pass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		var res any
		_ = json.NewDecoder(resp.Body).Decode(&res)
		_ = resp.Body.Close()
		if m, ok := res.(map[string]any); ok && path == "/redfish/v1" {
			if l, ok := m["Links"].(map[string]any)["Sessions"].(map[string]any); ok {
				out[l["@odata.id"].(string)] = true
			}
		}
		walk(res, "")
	}
	return out
}

func isOneOf(err error, targets []error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// A connection that fails after logging in (a BMC managing several systems, none named in the
// address) deletes its session: retried every reconcile, it would fill the BMC's session table.
func TestFailedConnectLeavesNoSession(t *testing.T) {
	s := newSim(t, simulator.Config{Profile: simulator.Profiles["bladed"]})
	tg := target(s)
	tg.Address = strings.TrimSuffix(tg.Address, "/redfish/v1/Systems/1")
	pool := NewPool(Options{})
	for range 3 {
		if _, err := settle(t, pool, tg); err == nil || !strings.Contains(err.Error(), "manages 4 systems") {
			t.Fatalf("connect without a system = %v, want the count of systems", err)
		}
	}
	waitFor(t, 5*time.Second, "no session left on the BMC", func() (bool, any) {
		n := s.ActiveSessions()
		return n == 0, n
	})
}

// A boot override goes only to a target the system allows, carries the boot mode only where the
// system has it, and a network boot after a UEFI HTTP one leaves no stale boot URI.
func TestBootOverrideFollowsWhatTheSystemOffers(t *testing.T) {
	ctx := context.Background()
	t.Run("a system without UefiHttp and without a boot mode", func(t *testing.T) {
		s := newSim(t, simulator.Config{Profile: simulator.Profiles["simple-storage"]})
		c := connectTo(t, s, Options{})
		err := c.SetBootOverride(ctx, BootOverride{Target: BootUefiHTTP, HTTPBootURI: "http://seed.example/image"})
		if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "UefiHttp") {
			t.Errorf("UefiHttp on a system that does not allow it = %v, want ErrNotSupported naming it", err)
		}
		if err := c.SetBootOverride(ctx, BootOverride{Target: BootPxe}); err != nil {
			t.Fatalf("Pxe without a boot mode property: %v", err)
		}
		if enabled, target, _, _ := s.BootOverride(); enabled != "Once" || target != "Pxe" {
			t.Errorf("boot override %s/%s, want Once/Pxe", enabled, target)
		}
	})
	for _, name := range simulator.ProfileNames() {
		p := simulator.Profiles[name]
		if p.BootTargets != nil && !slices.Contains(p.BootTargets, "UefiHttp") || p.Media == "none" && p.NoBios {
			continue // no UEFI HTTP boot (the bladed profile's systems are identity only)
		}
		t.Run("Pxe after UefiHttp on "+name, func(t *testing.T) {
			s := newSim(t, simulator.Config{Profile: p})
			c := connectTo(t, s, Options{})
			if err := c.SetBootOverride(ctx, BootOverride{Target: BootUefiHTTP, HTTPBootURI: "http://seed.example/v1/ns/m/tok/image"}); err != nil {
				t.Fatal(err)
			}
			if err := c.SetBootOverride(ctx, BootOverride{Target: BootPxe}); err != nil {
				t.Fatal(err)
			}
			if _, target, mode, uri := s.BootOverride(); target != "Pxe" || mode != "UEFI" || uri != "" {
				t.Errorf("target %s mode %s boot URI %q, want Pxe, UEFI and no URI", target, mode, uri)
			}
		})
	}
}

// Inserting works whatever payload the BMC wants, and ejecting leaves no image behind, by the
// EjectMedia action where the BMC offers it and by clearing Image where media is only PATCHed
// (which keeps showing a stale Image otherwise).
func TestEjectClearsTheImageOnEveryProfile(t *testing.T) {
	ctx := context.Background()
	for _, name := range simulator.ProfileNames() {
		if simulator.Profiles[name].Media == "none" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			s := newSim(t, simulator.Config{Profile: simulator.Profiles[name]})
			c := connectTo(t, s, Options{})
			if err := c.InsertMedia(ctx, "http://images.example/os.iso", "http://seed.example/v1/ns/m/tok/cidata.iso"); err != nil {
				t.Fatal(err)
			}
			if m := s.Media(); m["CD1"] == "" || m["USB1"] == "" {
				t.Fatalf("inserted media %v", m)
			}
			if err := c.EjectMedia(ctx, ""); err != nil {
				t.Fatal(err)
			}
			media, err := c.virtualMedia(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range media {
				if m.Image != "" || (m.Inserted != nil && *m.Inserted) {
					t.Errorf("%s after eject: image %q inserted %v", m.ID, m.Image, m.Inserted)
				}
			}
		})
	}
}

// The inventory lists a server's physical NICs by their permanent MAC addresses (what DHCP and
// the boot MAC match), not VLAN sub-interfaces, the BMC's host interface or a bond's address, and
// the drives whether they are Storage drives or SimpleStorage devices.
func TestInventoryOnEveryProfile(t *testing.T) {
	for _, name := range simulator.ProfileNames() {
		t.Run(name, func(t *testing.T) {
			p := simulator.Profiles[name]
			s := newSim(t, simulator.Config{Profile: p})
			c := connectTo(t, s, Options{})
			inv, err := c.Inventory(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var macs []string
			for _, n := range inv.NICs {
				macs = append(macs, n.MAC)
			}
			want := s.MACs()
			if p.NoNICs {
				want = nil
			}
			if !slices.Equal(macs, want) {
				t.Errorf("NIC MACs %v, want the permanent addresses %v", macs, want)
			}
			if len(inv.Drives) != 2 {
				t.Errorf("%d drives inventoried, want 2: %+v", len(inv.Drives), inv.Drives)
			}
			// The simulator lists eight 32 GiB modules and two empty slots.
			if len(inv.DIMMs) != 8 || inv.DIMMs[0].CapacityMiB != 32768 || inv.DIMMs[0].Type != "DDR4" || inv.DIMMs[0].SerialNumber == "" {
				t.Errorf("DIMMs %+v, want the eight installed modules", inv.DIMMs)
			}
		})
	}
}

// A firmware update accepted without a task monitor (204) is followed through the task the BMC
// lists, and asking again follows that task instead of flashing a second time.
func TestFirmwareUpdateAcceptedWithoutAMonitorIsNeverSentTwice(t *testing.T) {
	ctx := context.Background()
	s := newSim(t, simulator.Config{Profile: simulator.Profiles["manager-media"]})
	c := connectTo(t, s, Options{})
	first, err := c.UpdateFirmware(ctx, "http://images.example/bios-2.1.bin", FirmwareBIOS, nil)
	if err != nil {
		t.Fatalf("an update accepted with 204: %v", err)
	}
	again, err := c.UpdateFirmware(ctx, "http://images.example/bios-2.1.bin", FirmwareBIOS, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().SimpleUpdates; n != 1 {
		t.Errorf("%d updates started, want 1", n)
	}
	if first == "" || again != first {
		t.Errorf("followed %q then %q, want the BMC's task both times", first, again)
	}
	waitFor(t, 5*time.Second, "the update task to complete", func() (bool, any) {
		st, err := c.TaskStatus(ctx, first)
		if err != nil {
			return false, err
		}
		return st.Done && !st.Failed, st
	})
}

// Without an attribute registry the current attributes are the reference: a value of another type
// is refused before anything is sent; settings carry an apply time only where the BMC advertises
// apply times, and take effect on the next boot.
func TestBIOSSettingsWithoutARegistryOrApplyTimes(t *testing.T) {
	ctx := context.Background()
	s := newSim(t, simulator.Config{Profile: simulator.Profiles["simple-storage"]})
	c := connectTo(t, s, Options{})
	before := s.Stats().Requests["PATCH"]
	err := c.SetBIOSAttributes(ctx, map[string]any{"BootMode": 1, "NumaGroupSizeOpt": "big"})
	var bad *UnknownAttributesError
	if !errors.As(err, &bad) || len(bad.Problems) != 2 {
		t.Fatalf("values of the wrong type = %v, want both named", err)
	}
	if n := s.Stats().Requests["PATCH"] - before; n != 0 {
		t.Errorf("%d PATCHes sent for refused values", n)
	}
	if err := c.SetBIOSAttributes(ctx, map[string]any{"ProcTurboMode": "Disabled"}); err != nil {
		t.Fatalf("a valid value on a BMC without apply times: %v", err)
	}
	if err := c.Reset(ctx, ResetOn); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the setting applied at boot", func() (bool, any) {
		v := s.BiosAttributes()["ProcTurboMode"]
		return v == "Disabled", v
	})
}

// HPE iLO refuses a boot override while the system is in POST: that is "busy, try again"
// (ErrConflict, which the host controller retries quietly), not a failure.
func TestBootOverrideDuringPOSTIsBusy(t *testing.T) {
	ctx := context.Background()
	s := newSim(t, simulator.Config{Profile: simulator.Profiles["hpe-ilo5"]})
	c := connectTo(t, s, Options{})
	if err := c.Reset(ctx, ResetOn); err != nil {
		t.Fatal(err)
	}
	if err := c.SetBootOverride(ctx, BootOverride{Target: BootPxe}); !errors.Is(err, ErrConflict) {
		t.Fatalf("boot override during POST = %v, want ErrConflict", err)
	}
	waitFor(t, 5*time.Second, "the boot override accepted after POST", func() (bool, any) {
		err := c.SetBootOverride(ctx, BootOverride{Target: BootPxe})
		return err == nil, err
	})
}

// Drives listed only as SimpleStorage devices cannot be erased through Redfish: cleaning is
// refused with ErrNothingToErase rather than reported done.
func TestSimpleStorageOnlyHasNothingToErase(t *testing.T) {
	s := newSim(t, simulator.Config{Profile: simulator.Profiles["simple-storage"]})
	c := connectTo(t, s, Options{})
	if _, err := c.EraseDrives(context.Background(), nil, nil); !errors.Is(err, ErrNothingToErase) {
		t.Errorf("EraseDrives = %v, want ErrNothingToErase", err)
	}
}

// iDRAC refuses a power-on for a while after a power-off: that is "busy, try again"
// (ErrConflict), which the host controller retries, not a failure.
func TestPowerOnRightAfterPowerOffIsBusy(t *testing.T) {
	ctx := context.Background()
	s := newSim(t, simulator.Config{Profile: simulator.Profiles["dell-idrac9"]})
	c := connectTo(t, s, Options{})
	if err := c.Reset(ctx, ResetOn); err != nil {
		t.Fatal(err)
	}
	waitPower(t, c, PowerOn)
	if err := c.Reset(ctx, ResetForceOff); err != nil {
		t.Fatal(err)
	}
	waitPower(t, c, PowerOff)
	if err := c.Reset(ctx, ResetOn); !errors.Is(err, ErrConflict) {
		t.Fatalf("power-on right after a power-off = %v, want ErrConflict", err)
	}
	waitFor(t, 5*time.Second, "the power-on accepted later", func() (bool, any) {
		err := c.Reset(ctx, ResetOn)
		return err == nil, err
	})
}

// Where Boot is read-only on the system, the override goes to the system's settings object.
func TestBootOverrideThroughTheSettingsObject(t *testing.T) {
	s := newSim(t, simulator.Config{Profile: simulator.Profiles["dell-idrac10"]})
	c := connectTo(t, s, Options{})
	if err := c.SetBootOverride(context.Background(), BootOverride{Target: BootCd}); err != nil {
		t.Fatal(err)
	}
	if enabled, target, _, _ := s.BootOverride(); enabled != "Once" || target != "Cd" {
		t.Errorf("boot override %s/%s, want Once/Cd", enabled, target)
	}
}

// Where another client changed a resource between the read and the PATCH (a stale ETag, 412),
// the ETag is read again and the PATCH retried with it: on a BMC that refuses a PATCH without
// If-Match (Lenovo XCC, 428), dropping the header would not do.
func TestStaleETagIsReadAgainOnEveryProfileWithETags(t *testing.T) {
	ctx := context.Background()
	for _, name := range simulator.ProfileNames() {
		p := simulator.Profiles[name]
		if !p.ETags {
			continue
		}
		t.Run(name, func(t *testing.T) {
			s := newSim(t, simulator.Config{Profile: p})
			c := connectTo(t, s, Options{})
			s.Fault.ConcurrentChange("/Systems/1", 1)
			s.Fault.ConcurrentChange("/Systems/1/Settings", 1) // the system's settings object (iDRAC 10)
			if err := c.SetBootOverride(ctx, BootOverride{Target: BootPxe}); err != nil {
				t.Fatalf("boot override: %v", err)
			}
			if _, target, _, _ := s.BootOverride(); target != "Pxe" {
				t.Errorf("boot target %s, want Pxe", target)
			}
			s.Fault.ConcurrentChange("/Bios/"+strings.TrimSuffix(cmp.Or(p.BiosSettings, "Settings"), "/"), 1)
			if err := c.SetBIOSAttributes(ctx, map[string]any{"BootMode": "LegacyBios"}); err != nil {
				t.Fatalf("BIOS settings: %v", err)
			}
			if p.NoMediaActions {
				s.Fault.ConcurrentChange("/VirtualMedia/CD1", 1)
				if err := c.InsertMedia(ctx, "http://images.example/os.iso", ""); err != nil {
					t.Fatalf("insert media by PATCH: %v", err)
				}
			}
			if n := s.Stats().StaleIfMatch; n < 2 {
				t.Errorf("%d PATCHes met a stale ETag, want at least 2 (the faults did not fire)", n)
			}
		})
	}
}

// imageServer serves firmware images: any path answers 64 KiB, with a Content-Length when the
// path contains "sized" (else chunked).
func imageServer(t *testing.T) *httptest.Server {
	t.Helper()
	img := bytes.Repeat([]byte{0x5a}, 64<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "sized") {
			w.Header().Set("Content-Length", fmt.Sprint(len(img)))
		}
		_, _ = w.Write(img)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A firmware update runs on every BMC that has an UpdateService, pulled by SimpleUpdate or pushed
// (multipart) where the BMC only takes a push, and is followed to its end; a task that ends
// "Completed" with a Critical status is a failure, and the firmware is unchanged; a task the BMC
// already forgot reads as gone, never as done.
func TestFirmwareUpdateOnEveryProfile(t *testing.T) {
	ctx := context.Background()
	for _, name := range simulator.ProfileNames() {
		p := simulator.Profiles[name]
		if p.NoUpdateService {
			continue
		}
		t.Run(name, func(t *testing.T) {
			s := newSim(t, simulator.Config{Profile: p, TaskDuration: 400 * time.Millisecond})
			images := imageServer(t)
			c := connectTo(t, s, Options{})
			follow := func(uri string) *Task {
				var last *Task
				waitFor(t, 5*time.Second, "the update to end", func() (bool, any) {
					task, err := c.TaskStatus(ctx, uri)
					if err != nil {
						return false, err
					}
					last = task
					return task.Done, task
				})
				return last
			}
			uri, err := c.UpdateFirmware(ctx, images.URL+"/sized/U46-v2.90.bin", FirmwareBIOS, nil)
			if err != nil {
				t.Fatal(err)
			}
			if task := follow(uri); task.Failed {
				t.Fatalf("update failed: %+v", task)
			}
			if staged := s.PendingBIOSVersion(); staged != "U46-v2.90" {
				t.Errorf("BIOS version %q staged after the update, want U46-v2.90", staged)
			}
			if st := s.Stats(); p.PushUpdatesOnly && st.PushedBytes != 64<<10 {
				t.Errorf("%d bytes pushed, want the image's %d", st.PushedBytes, 64<<10)
			}

			s.Fault.FailUpdates(1)
			uri, err = c.UpdateFirmware(ctx, images.URL+"/fw/U46-v3.00.bin", FirmwareBIOS, nil)
			if err != nil {
				t.Fatal(err)
			}
			if task := follow(uri); !task.Failed || !strings.Contains(task.Message, "rejected") {
				t.Errorf("an update the BMC rejected (Completed, Critical) read as %+v, want failed with the BMC's message", task)
			}
			if staged := s.PendingBIOSVersion(); staged != "U46-v2.90" {
				t.Errorf("BIOS version %q staged after a rejected update, want U46-v2.90 unchanged", staged)
			}
			if p.PurgeTasksAfter > 0 {
				waitFor(t, 5*time.Second, "the task to be forgotten", func() (bool, any) {
					task, err := c.TaskStatus(ctx, uri)
					return err == nil && task.State == "Gone" && task.Done && task.Failed, task
				})
			}
		})
	}
}

// A pushed image is streamed from its server to the BMC: the manager holds neither the image nor
// the request body in memory (a 128 MiB image allocates far less than its size).
func TestFirmwarePushStreamsTheImage(t *testing.T) {
	const size = 128 << 20
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(size))
		_, _ = io.Copy(w, io.LimitReader(zeros{}, size))
	}))
	t.Cleanup(images.Close)
	s := newSim(t, simulator.Config{Profile: simulator.Profiles["supermicro-x13"], TaskDuration: 100 * time.Millisecond})
	c := connectTo(t, s, Options{})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if _, err := c.UpdateFirmware(context.Background(), images.URL+"/U46-v2.91.bin", FirmwareBIOS, nil); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := s.Stats().PushedBytes; got != size {
		t.Fatalf("the BMC received %d bytes, want %d", got, size)
	}
	// Everything allocated in the process meanwhile, the simulated BMC's multipart parsing
	// included: a buffered push allocates the image two or three times over.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/2 {
		t.Errorf("the push allocated %d MiB for a %d MiB image, want it streamed", alloc>>20, size>>20)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// A BMC whose session table is full (iDRAC's RAC0218 here) is reported as such on every try, not
// as an outage (the circuit breaker stays closed: the BMC answers); with Basic authentication it
// is used without any session.
func TestSessionLimitIsReportedNotAnOutage(t *testing.T) {
	p := simulator.Profiles["dell-idrac9"]
	s := newSim(t, simulator.Config{Profile: p})
	ctx := context.Background()
	// A client connected while there was room, whose session then expired while other tools
	// filled the table: every call says why, none says the BMC is down.
	c := connectTo(t, s, Options{})
	if err := c.Check(ctx); err != nil {
		t.Fatal(err)
	}
	s.ExpireSessions()
	s.HoldSessions(p.MaxSessions)
	for i := range 2 * (Options{}).withDefaults().BreakerThreshold {
		if err := c.Check(ctx); !errors.Is(err, ErrSessionLimit) {
			t.Fatalf("call %d with a full session table = %v, want ErrSessionLimit", i+1, err)
		}
	}
	// A new connection meets the same.
	pool := NewPool(Options{})
	if _, err := settle(t, pool, target(s)); !errors.Is(err, ErrSessionLimit) {
		t.Fatalf("connecting with a full session table = %v, want ErrSessionLimit", err)
	}
	basic := target(s)
	basic.BasicAuth = true
	bc, err := settle(t, pool, basic)
	if err != nil {
		t.Fatalf("Basic authentication: %v", err)
	}
	if _, err := bc.Inventory(ctx); err != nil {
		t.Fatalf("inventory with Basic authentication: %v", err)
	}
	if n := s.Stats().SessionsCreated; n != 1 {
		t.Errorf("%d sessions created, want only the first client's", n)
	}
}

// The image server's credentials go to a BMC that pulls in SimpleUpdate's Username and Password,
// and, for a BMC that only takes a push, with the provider's own download of the image.
func TestImageCredentialsReachTheImageServer(t *testing.T) {
	ctx := context.Background()
	creds := &ImageCredentials{Username: "fw-reader", Password: "s3cret"}
	var seen []string
	// HTTPS: the provider sends image credentials over nothing else.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		seen = append(seen, user+":"+pass)
		_, _ = w.Write(bytes.Repeat([]byte{0x5a}, 4096))
	}))
	t.Cleanup(srv.Close)
	for _, name := range []string{"dmtf", "supermicro-x13"} {
		s := newSim(t, simulator.Config{Profile: simulator.Profiles[name], TaskDuration: 100 * time.Millisecond})
		c := connectTo(t, s, Options{ImageRootCAs: pool(srv)})
		if _, err := c.UpdateFirmware(ctx, srv.URL+"/U46-v2.95.bin", FirmwareBIOS, creds); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if users := s.Stats().ImageUsers; simulator.Profiles[name].PushUpdatesOnly {
			if len(seen) != 1 || seen[0] != "fw-reader:s3cret" {
				t.Errorf("%s: the image server saw %v, want the credentials once", name, seen)
			}
		} else if len(users) != 1 || users[0] != "fw-reader" {
			t.Errorf("%s: SimpleUpdate carried users %v, want fw-reader", name, users)
		}
	}
}

// An update is never mistaken for another kind of task the BMC runs: with a drive erase under
// way, UpdateFirmware starts the update (it follows only a running update).
func TestAnEraseUnderWayIsNotTakenForAnUpdate(t *testing.T) {
	ctx := context.Background()
	s := newSim(t, simulator.Config{EraseDuration: 5 * time.Second, TaskDuration: 100 * time.Millisecond})
	c := connectTo(t, s, Options{})
	jobs, err := c.EraseDrives(ctx, nil, nil)
	if err != nil || len(jobs) == 0 {
		t.Fatalf("erase: %v, %v", jobs, err)
	}
	uri, err := c.UpdateFirmware(ctx, "http://images.example/U46-v2.99.bin", FirmwareBIOS, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().SimpleUpdates; n != 1 {
		t.Errorf("%d updates started, want 1", n)
	}
	for _, j := range jobs {
		if j.TaskURI != "" && strings.HasSuffix(uri, j.TaskURI[strings.LastIndex(j.TaskURI, "/"):]) {
			t.Errorf("the update follows the erase task %s", uri)
		}
	}
}

// Where a BMC keeps its virtual media is found once: the next boots list the devices without
// reading the system again (on some BMCs that read takes a second, and a boot's preparation used
// to make it twice). A listing that fails finds them again, and the insert still goes through.
func TestTheNextBootsFindTheVirtualMediaWithoutReadingTheSystem(t *testing.T) {
	ctx := context.Background()
	const image, seed = "http://images.example/os.iso", "http://seed.example/v1/ns/m/tok/cidata.iso"
	for _, name := range simulator.ProfileNames() {
		p := simulator.Profiles[name]
		if p.Media == "none" {
			continue // no virtual media (bladed)
		}
		t.Run(name, func(t *testing.T) {
			s := newSim(t, simulator.Config{Profile: p})
			c := connectTo(t, s, Options{})
			systemReads := func() int { return s.Stats().Gets[strings.TrimSuffix(c.systemPath, "/")] }
			inserted := func(want string) {
				t.Helper()
				for _, img := range s.Media() {
					if img == want {
						return
					}
				}
				t.Fatalf("%s not in any virtual media slot: %v", want, s.Media())
			}
			if err := c.InsertMedia(ctx, image, seed); err != nil {
				t.Fatal(err)
			}
			inserted(image)
			if systemReads() == 0 {
				t.Fatal("the first boot did not read the system: the test counts the wrong path")
			}
			for i := range 2 {
				before := systemReads()
				if err := c.InsertMedia(ctx, fmt.Sprintf("%s?boot=%d", image, i), seed); err != nil {
					t.Fatal(err)
				}
				inserted(fmt.Sprintf("%s?boot=%d", image, i))
				if n := systemReads() - before; n != 0 {
					t.Errorf("boot %d read the system %d times to find the virtual media, want 0", i+2, n)
				}
			}
			// The devices' collection answers 404 once (moved, say, by a BMC firmware update).
			s.Fault.ErrorBurstTo("VirtualMedia", 1, http.StatusNotFound)
			before := systemReads()
			if err := c.InsertMedia(ctx, image+"?moved", seed); err != nil {
				t.Fatalf("after a failed listing: %v", err)
			}
			inserted(image + "?moved")
			if systemReads() == before {
				t.Error("a failed listing did not look for the virtual media again")
			}
			// The remembered collection answers, but empty (left behind by a firmware update that
			// moved the devices): that is a miss too, never a BMC without media nor a silent eject.
			s.Fault.EmptyCollectionTo("VirtualMedia", 1)
			before = systemReads()
			if err := c.InsertMedia(ctx, image+"?emptied", seed); err != nil {
				t.Fatalf("after an empty listing: %v", err)
			}
			inserted(image + "?emptied")
			if systemReads() == before {
				t.Error("an empty listing did not look for the virtual media again")
			}
			s.Fault.EmptyCollectionTo("VirtualMedia", 1)
			if err := c.EjectMedia(ctx, ""); err != nil {
				t.Fatalf("eject after an empty listing: %v", err)
			}
			for slot, img := range s.Media() {
				if img != "" {
					t.Errorf("an empty listing made the eject eject nothing: %s still in %s", img, slot)
				}
			}
		})
	}
}

// A boot's round (the host controller's: the power read, the media, the boot override, the
// power-on) reads the system once: the override is shaped by the round's power read, the power-on
// starts from it. An override after the client's own reads the system again.
func TestABootsRoundReadsTheSystemOnce(t *testing.T) {
	ctx := context.Background()
	const image, seed = "http://images.example/os.iso", "http://seed.example/v1/ns/m/tok/cidata.iso"
	for _, name := range simulator.ProfileNames() {
		p := simulator.Profiles[name]
		t.Run(name, func(t *testing.T) {
			s := newSim(t, simulator.Config{Profile: p})
			c := connectTo(t, s, Options{})
			systemReads := func() int { return s.Stats().Gets[strings.TrimSuffix(c.systemPath, "/")] }
			target := BootPxe
			if p.Media != "none" {
				if err := c.InsertMedia(ctx, image, seed); err != nil { // an earlier boot: the media found
					t.Fatal(err)
				}
				target = BootCd
			}
			before := systemReads()
			ps, err := c.PowerState(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if p.Media != "none" {
				if err := c.InsertMedia(ctx, image+"?next", seed); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.SetBootOverride(ctx, BootOverride{Target: target}); err != nil {
				t.Fatal(err)
			}
			if n := systemReads() - before; n != 1 {
				t.Errorf("the boot's round read the system %d times up to its override, want 1", n)
			}
			before = systemReads()
			if err := c.SetBootOverride(ctx, BootOverride{Target: target}); err != nil {
				t.Fatal(err)
			}
			if systemReads() == before {
				t.Error("an override after the client's own override was shaped by the read from before it")
			}
			before = systemReads()
			if err := c.ResetFrom(ctx, ResetOn, ps); err != nil {
				t.Fatal(err)
			}
			if n := systemReads() - before; n != 0 {
				t.Errorf("the power-on read the system %d times, want 0 (it starts from the round's read)", n)
			}
			if enabled, got, _, _ := s.BootOverride(); enabled != "Once" || got != string(target) {
				t.Errorf("boot override %s/%s, want Once/%s", enabled, got, target)
			}
			waitPower(t, c, PowerOn)
		})
	}
}

// A BMC that lists SimpleUpdate's Targets@Redfish.AllowableValues is sent one of them: the
// firmware inventory entry of the component when the system or manager is not listed; a BMC
// listing nothing for the component is not flashed at all.
func TestFirmwareUpdateTargetsAreTheOnesTheBMCLists(t *testing.T) {
	ctx := context.Background()
	s := newSim(t, simulator.Config{Profile: simulator.Profiles["lenovo-xcc"]})
	c := connectTo(t, s, Options{})
	for _, target := range []FirmwareTarget{FirmwareBIOS, FirmwareBMC} {
		task, err := c.UpdateFirmware(ctx, "http://images.example/"+string(target)+"-2.1.bin", target, nil)
		if err != nil {
			t.Fatalf("%s update on a BMC listing its targets: %v", target, err)
		}
		waitFor(t, 10*time.Second, "the update task to complete", func() (bool, any) {
			st, err := c.TaskStatus(ctx, task)
			return err == nil && st.Done && !st.Failed, st
		})
	}
	if n := s.Stats().SimpleUpdates; n != 2 {
		t.Errorf("%d updates started, want 2", n)
	}
	const fw = "/redfish/v1/UpdateService/FirmwareInventory/"
	for _, tc := range []struct {
		listed []string
		target string
		want   string // "" for ErrNotSupported
	}{
		{[]string{fw + "NIC1"}, "/redfish/v1/Systems/1", ""},
		{[]string{fw + "Backup_BIOS", fw + "BIOS"}, "/redfish/v1/Systems/1", fw + "BIOS"},
		{[]string{fw + "Backup_BIOS"}, "/redfish/v1/Systems/1", ""},
		{[]string{fw + "BMC-Backup", fw + "PowerManagerFW", fw + "BMC"}, "/redfish/v1/Managers/1", fw + "BMC"},
		{[]string{fw + "BIOS", fw + "BIOS2"}, "/redfish/v1/Systems/1", ""}, // two look like it: which one?
		{[]string{fw + "iDRAC.Embedded.1"}, "/redfish/v1/Managers/iDRAC.Embedded.1", fw + "iDRAC.Embedded.1"},
		{[]string{fw + "BMC-Primary", fw + "BMC-Backup", fw + "UEFI"}, "/redfish/v1/Systems/1", fw + "UEFI"}, // Lenovo XCC
		{[]string{fw + "BMC-Primary", fw + "BMC-Backup", fw + "UEFI"}, "/redfish/v1/Managers/1", fw + "BMC-Primary"},
	} {
		raw, _ := json.Marshal(map[string]any{"Actions": map[string]any{"#UpdateService.SimpleUpdate": map[string]any{"Targets@Redfish.AllowableValues": tc.listed}}})
		got, err := allowedUpdateTargets(raw, []string{tc.target}, "SimpleUpdate")
		switch {
		case tc.want == "" && !errors.Is(err, ErrNotSupported):
			t.Errorf("%v for %s = %v, %v; want ErrNotSupported", tc.listed, tc.target, got, err)
		case tc.want != "" && (err != nil || len(got) != 1 || got[0] != tc.want):
			t.Errorf("%v for %s = %v, %v; want %s", tc.listed, tc.target, got, err, tc.want)
		}
	}
}

// A seed inserted alone (a UEFI HTTP boot) goes into a free device: what another device holds
// stays where it is.
func TestASeedAloneGoesIntoAFreeDeviceWithoutEvictingAnother(t *testing.T) {
	ctx := context.Background()
	s := newSim(t, simulator.Config{Profile: simulator.Profiles["dmtf"]})
	c := connectTo(t, s, Options{})
	// Something already in the USB stick (the device a seed prefers), the CD free.
	if err := c.InsertMedia(ctx, "", "http://images.example/rescue.img"); err != nil {
		t.Fatal(err)
	}
	if m := s.Media(); m["USB1"] != "http://images.example/rescue.img" {
		t.Fatalf("media %v, want the image in USB1", m)
	}
	seed := "https://seed.example/v1/ns/m/tok/cidata.iso"
	if err := c.InsertMedia(ctx, "", seed); err != nil {
		t.Fatal(err)
	}
	if m := s.Media(); m["USB1"] != "http://images.example/rescue.img" || m["CD1"] != seed {
		t.Errorf("media %v, want the seed in the free CD1 and USB1 untouched", m)
	}
	// Inserted again (a retried round): it stays where it is.
	if err := c.InsertMedia(ctx, "", seed); err != nil {
		t.Fatal(err)
	}
	if m := s.Media(); m["USB1"] != "http://images.example/rescue.img" || m["CD1"] != seed {
		t.Errorf("media %v after inserting the seed again", m)
	}
}
