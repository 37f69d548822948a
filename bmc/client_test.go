package bmc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

func TestInventoryReadsWhatTheBMCHolds(t *testing.T) {
	s := newSim(t, simulator.Config{Index: 7})
	c := connectTo(t, s, Options{})
	inv, err := c.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	bios, bmcFW := s.FirmwareVersions()
	if inv.BIOSVersion != bios || inv.BMCFirmwareVersion != bmcFW {
		t.Errorf("firmware = %q/%q, BMC has %q/%q", inv.BIOSVersion, inv.BMCFirmwareVersion, bios, bmcFW)
	}
	if len(inv.NICs) != 2 || inv.NICs[0].MAC != s.MACs()[0] || inv.NICs[1].MAC != s.MACs()[1] {
		t.Errorf("NICs = %+v, BMC has MACs %v", inv.NICs, s.MACs())
	}
	if len(inv.Drives) != 2 || inv.Drives[0].CapacityBytes == 0 {
		t.Errorf("drives = %+v", inv.Drives)
	}
	if inv.UUID == "" || inv.SerialNumber != "SN-sim" || inv.CPUCount != 2 || inv.CPUCores != 32 || inv.MemoryMiB != 256*1024 {
		t.Errorf("system fields = %+v", inv)
	}
}

func TestPowerBootAndVirtualMediaDriveTheSystem(t *testing.T) {
	s := newSim(t, simulator.Config{})
	boots := make(chan simulator.BootEvent, 4)
	s.OnBoot(func(e simulator.BootEvent) { boots <- e })
	c := connectTo(t, s, Options{})
	ctx := context.Background()

	const image = "http://images.example/provision.iso"
	if err := c.InsertMedia(ctx, image, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.SetBootOverride(ctx, BootOverride{Target: BootCd}); err != nil {
		t.Fatal(err)
	}
	if err := c.Reset(ctx, ResetOn); err != nil {
		t.Fatal(err)
	}
	waitPower(t, c, PowerOn)
	if e := <-boots; e.Target != "Cd" || e.MediaImage != image {
		t.Errorf("first boot = %+v, want Cd from %s", e, image)
	}

	// The override was one-time: the next boot comes from disk.
	if err := c.EjectMedia(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.Reset(ctx, ResetForceRestart); err != nil {
		t.Fatal(err)
	}
	if e := <-boots; e.Target != "None" || e.MediaImage != "" {
		t.Errorf("second boot = %+v, want the default disk boot", e)
	}

	if err := c.SetBootOverride(ctx, BootOverride{Target: BootUefiHTTP, HTTPBootURI: "http://boot.example/efi"}); err != nil {
		t.Fatal(err)
	}
	waitPower(t, c, PowerOn)
	if err := c.Reset(ctx, ResetPowerCycle); err != nil {
		t.Fatal(err)
	}
	if e := <-boots; e.Target != "UefiHttp" || e.HTTPBootURI != "http://boot.example/efi" {
		t.Errorf("third boot = %+v, want UefiHttp", e)
	}

	waitPower(t, c, PowerOn)
	if err := c.Reset(ctx, ResetGracefulShutdown); err != nil {
		t.Fatal(err)
	}
	waitPower(t, c, PowerOff)
}

func TestBIOSSettingsApplyOnResetAndRegistryRejectsBadAttributes(t *testing.T) {
	s := newSim(t, simulator.Config{})
	c := connectTo(t, s, Options{})
	ctx := context.Background()

	err := c.SetBIOSAttributes(ctx, map[string]any{"NoSuchKnob": "On", "ProcTurboMode": "Sometimes", "NumaGroupSizeOpt": 99})
	var bad *UnknownAttributesError
	if !errors.As(err, &bad) || len(bad.Problems) != 3 {
		t.Fatalf("want all three attributes rejected, got %v", err)
	}

	if err := c.SetBIOSAttributes(ctx, map[string]any{"ProcTurboMode": "Disabled", "NumaGroupSizeOpt": 2}); err != nil {
		t.Fatal(err)
	}
	if got := s.BiosAttributes()["ProcTurboMode"]; got != "Enabled" {
		t.Fatalf("settings applied before a reset: ProcTurboMode=%v", got)
	}
	if err := c.Reset(ctx, ResetOn); err != nil {
		t.Fatal(err)
	}
	waitPower(t, c, PowerOn)
	// Written during POST, which follows the power-on.
	waitFor(t, 5*time.Second, "the settings applied", func() (bool, any) {
		attrs, err := c.BIOSAttributes(ctx)
		return err == nil && attrs["ProcTurboMode"] == "Disabled" && attrs["NumaGroupSizeOpt"] == float64(2), attrs
	})
}

func TestFirmwareUpdateProgressesAndIsNeverStartedTwice(t *testing.T) {
	s := newSim(t, simulator.Config{})
	c := connectTo(t, s, Options{})
	ctx := context.Background()

	uri, err := c.UpdateFirmware(ctx, "http://firmware.example/U46-v2.90.bin", FirmwareBIOS, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A second request while the first runs (say, after a lost answer) follows the same task.
	again, err := c.UpdateFirmware(ctx, "http://firmware.example/U46-v2.90.bin", FirmwareBIOS, nil)
	if err != nil || again != uri {
		t.Fatalf("second call = %q, %v; want the running task %q", again, err, uri)
	}
	seen := map[int]bool{}
	waitFor(t, 5*time.Second, "task completion", func() (bool, any) {
		task, err := c.TaskStatus(ctx, uri)
		if err != nil {
			return false, err
		}
		seen[task.Percent] = true
		return task.Done, task
	})
	task, _ := c.TaskStatus(ctx, uri)
	if task.Failed || task.State != "Completed" {
		t.Fatalf("task = %+v", task)
	}
	if len(seen) < 2 {
		t.Errorf("progress was never observed between start and end: %v", seen)
	}
	if bios, _ := s.FirmwareVersions(); bios == "U46-v2.90" || s.PendingBIOSVersion() != "U46-v2.90" {
		t.Errorf("BIOS version = %q, staged %q: want the image staged until the next boot", bios, s.PendingBIOSVersion())
	}
	if n := s.Stats().SimpleUpdates; n != 1 {
		t.Errorf("SimpleUpdate sent %d times, want 1", n)
	}
}

func TestEraseDrivesStartsAnEraseOfEveryDriveAndTheTasksTellWhenItIsDone(t *testing.T) {
	s := newSim(t, simulator.Config{EraseDuration: 300 * time.Millisecond})
	c := connectTo(t, s, Options{})
	ctx := context.Background()
	jobs, err := c.EraseDrives(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != len(s.DriveErasures()) {
		t.Fatalf("%d erase jobs for %d drives", len(jobs), len(s.DriveErasures()))
	}
	for _, j := range jobs {
		if j.TaskURI == "" {
			t.Fatalf("the BMC answered 202 with a task monitor, but job %s has no task", j.Drive)
		}
		st, err := c.TaskStatus(ctx, j.TaskURI)
		if err != nil {
			t.Fatal(err)
		}
		if st.Done {
			t.Fatalf("erase of %s reported done at once", j.Drive)
		}
	}
	for id, n := range s.DriveErasures() {
		if n != 0 {
			t.Errorf("drive %s counted as erased (%d) while its erase runs", id, n)
		}
	}
	for _, j := range jobs {
		waitFor(t, 5*time.Second, "erase of "+j.Drive, func() (bool, any) {
			st, err := c.TaskStatus(ctx, j.TaskURI)
			if err != nil {
				return false, err
			}
			return st.Done && !st.Failed, st.State
		})
	}
	for id, n := range s.DriveErasures() {
		if n != 1 {
			t.Errorf("drive %s erased %d times", id, n)
		}
	}
}

func TestEraseDrivesOnASystemWithNothingErasableSaysSo(t *testing.T) {
	s := newSim(t, simulator.Config{NoSecureErase: true})
	c := connectTo(t, s, Options{})
	_, err := c.EraseDrives(context.Background(), nil, nil)
	if !errors.Is(err, ErrNothingToErase) || !strings.Contains(err.Error(), "2 Storage drives without Drive.SecureErase") {
		t.Fatalf("want ErrNothingToErase naming the 2 drives, got %v", err)
	}
}

func TestOneSessionServesAThousandOperations(t *testing.T) {
	s := newSim(t, simulator.Config{PowerLatency: time.Millisecond})
	pool := NewPool(Options{})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 125; i++ {
				c, err := pool.Get(ctx, target(s)) // as every reconcile does
				if errors.Is(err, ErrConnecting) {
					i-- // a reconcile requeues until the first login is done
					time.Sleep(time.Millisecond)
					continue
				}
				if err == nil {
					_, err = c.PowerState(ctx)
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := s.Stats().SessionsCreated; n != 1 {
		t.Errorf("1000 operations created %d sessions, want 1", n)
	}
	if n := s.ActiveSessions(); n != 1 {
		t.Errorf("BMC holds %d sessions, want 1", n)
	}
}

func TestExpiredSessionIsRenewedTransparently(t *testing.T) {
	s := newSim(t, simulator.Config{})
	c := connectTo(t, s, Options{})
	ctx := context.Background()
	if _, err := c.PowerState(ctx); err != nil {
		t.Fatal(err)
	}
	s.ExpireSessions()
	if _, err := c.PowerState(ctx); err != nil {
		t.Fatalf("after session expiry: %v", err)
	}
	if n := s.Stats().SessionsCreated; n != 2 {
		t.Errorf("sessions created = %d, want 2 (one renewal)", n)
	}
}

func TestWrongCredentialsGiveErrAuth(t *testing.T) {
	s := newSim(t, simulator.Config{})
	tg := target(s)
	tg.Password = "wrong"
	c, err := connect(context.Background(), tg, fastOpts, nil)
	if err != nil {
		t.Fatal(err) // the service root is public: connecting works, using does not
	}
	if err := c.Check(context.Background()); !errors.Is(err, ErrAuth) {
		t.Fatalf("Check with a wrong password = %v, want ErrAuth", err)
	}
}

func TestPoolReplacesClientWhenCredentialsChange(t *testing.T) {
	s := newSim(t, simulator.Config{})
	pool := NewPool(Options{})
	ctx := context.Background()
	tg := target(s)
	a, _ := settle(t, pool, tg)
	b, _ := pool.Get(ctx, tg)
	if a != b {
		t.Fatal("same target gave two clients")
	}
	if err := a.Check(ctx); err != nil {
		t.Fatal(err)
	}
	tg.Password = "rotated"
	if _, err := settle(t, pool, tg); !errors.Is(err, ErrAuth) {
		t.Fatalf("the new client must log in with the new (wrong) password: %v", err)
	}
	waitFor(t, 5*time.Second, "old session logged out", func() (bool, any) {
		n := s.ActiveSessions()
		return n == 0, n
	})
}

// Another server at a BMC address the pool knows (a reassigned IP, the same factory credentials):
// once the old owner is forgotten, the new owner's client logs in where that BMC keeps its
// sessions, not where the old one did (bladed keeps them at /redfish/v1/Sessions). Until then
// the owners share the address's client, as two hosts of one BMC do.
func TestANewOwnerAtAnAddressGetsAFreshClientOnceTheOldOwnerIsForgotten(t *testing.T) {
	ctx := context.Background()
	old := newSim(t, simulator.Config{Profile: simulator.Profiles["bladed"]})
	pool := NewPool(Options{})
	tg := target(old)
	tg.Owner = "host-a"
	a, err := settle(t, pool, tg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Check(ctx); err != nil {
		t.Fatal(err)
	}
	old.Close()
	s := newSim(t, simulator.Config{ID: "second", Listen: strings.TrimPrefix(old.URL(), "http://")})
	tg.Owner = "host-b"
	if shared, _ := pool.Get(ctx, tg); shared != a {
		t.Fatal("a second owner with the same credentials must share the address's client")
	}
	pool.ForgetOwned(tg.Address, "host-b") // not its entry: nothing happens
	if pool.Len() != 1 {
		t.Fatal("a forget by the owner that did not make the client dropped it")
	}
	pool.ForgetOwned(tg.Address, "host-a")
	b, err := settle(t, pool, tg)
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatal("the new owner got the forgotten owner's client")
	}
	if err := b.Check(ctx); err != nil {
		t.Fatalf("the new owner's client on the new BMC: %v", err)
	}
	if n := s.ActiveSessions(); n != 1 {
		t.Errorf("sessions on the new BMC: %d, want 1", n)
	}
}

// ForgetOwned drops the client of its owner only: a host removed by force gives its session back,
// and one created at its address since keeps its own.
func TestForgetOwnedLeavesAnotherOwnersClient(t *testing.T) {
	s := newSim(t, simulator.Config{})
	pool := NewPool(Options{})
	tg := target(s)
	tg.Owner = "host-b"
	if _, err := settle(t, pool, tg); err != nil {
		t.Fatal(err)
	}
	pool.ForgetOwned(tg.Address, "host-a")
	if n := pool.Len(); n != 1 {
		t.Fatalf("another owner's forget dropped the client: %d entries", n)
	}
	if n := s.ActiveSessions(); n != 1 {
		t.Fatalf("sessions: %d, want 1", n)
	}
	pool.ForgetOwned(tg.Address, "host-b")
	if n := pool.Len(); n != 0 {
		t.Errorf("the owner's forget left %d entries", n)
	}
	waitFor(t, 5*time.Second, "the owner's session logged out", func() (bool, any) {
		n := s.ActiveSessions()
		return n == 0, n
	})
	// An owner whose only attempt failed leaves nothing behind either (its breaker included).
	tg.Owner, tg.Password = "host-c", "wrong"
	if _, err := settle(t, pool, tg); !errors.Is(err, ErrAuth) {
		t.Fatalf("a wrong password: %v, want ErrAuth", err)
	}
	pool.ForgetOwned(tg.Address, "host-c")
	if n := pool.Len(); n != 0 {
		t.Errorf("the forget of an owner whose attempt failed left %d entries", n)
	}
}

// A client the pool dropped (or replaced) that a reconcile still holds opens no new session when
// used: the call fails as ErrConnecting (ask the pool again) and the BMC keeps no session.
func TestADroppedClientOpensNoSessionAgain(t *testing.T) {
	ctx := context.Background()
	s := newSim(t, simulator.Config{})
	pool := NewPool(Options{})
	tg := target(s)
	tg.Owner = "host-a"
	held, err := settle(t, pool, tg)
	if err != nil {
		t.Fatal(err)
	}
	pool.ForgetOwned(tg.Address, "host-a")
	waitFor(t, 5*time.Second, "the dropped client logged out", func() (bool, any) {
		n := s.ActiveSessions()
		return n == 0, n
	})
	if err := held.Check(ctx); !errors.Is(err, ErrConnecting) {
		t.Errorf("a call on the dropped client = %v, want ErrConnecting", err)
	}
	if n := s.ActiveSessions(); n != 0 {
		t.Errorf("sessions after a call on the dropped client: %d, want 0", n)
	}
}

func TestTaskStatusFollowsRedfishMonitorsToTheirEnd(t *testing.T) {
	s := newSim(t, simulator.Config{EraseDuration: 100 * time.Millisecond})
	c := connectTo(t, s, Options{})
	ctx := context.Background()
	if _, err := c.TaskStatus(ctx, ""); err == nil {
		t.Error("an empty task URI must be an error, not a read of the service root")
	}
	if st, err := c.TaskStatus(ctx, "/redfish/v1/TaskService/TaskMonitors/nope"); err != nil || !st.Done || !st.Failed {
		t.Errorf("a forgotten (404) task: %+v %v, want done and failed (its outcome is unknown)", st, err)
	}
	jobs, err := c.EraseDrives(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	drives := make([]string, 0, len(jobs))
	for _, j := range jobs {
		drives = append(drives, j.Drive)
	}
	if n, err := c.ErasesInProgress(ctx, drives); err != nil || n != len(jobs) {
		t.Errorf("drives reporting an erase: %d %v, want %d", n, err, len(jobs))
	}
	// Once done, the monitor answers 204 without a body (the operation's own answer).
	waitFor(t, 5*time.Second, "the erase monitors to end", func() (bool, any) {
		for _, j := range jobs {
			st, err := c.TaskStatus(ctx, j.TaskURI)
			if err != nil || !st.Done || st.Failed {
				return false, fmt.Sprint(st, err)
			}
		}
		return true, nil
	})
	if n, err := c.ErasesInProgress(ctx, drives); err != nil || n != 0 {
		t.Errorf("drives reporting an erase after it ended: %d %v", n, err)
	}
}

func TestEjectMediaLeavesMediaItDidNotInsert(t *testing.T) {
	s := newSim(t, simulator.Config{})
	c := connectTo(t, s, Options{})
	ctx := context.Background()
	if err := c.InsertMedia(ctx, "http://kvm.example/rescue.iso", "http://seed.example/v1/ns/m/tok/cidata.iso"); err != nil {
		t.Fatal(err)
	}
	if err := c.EjectMedia(ctx, "/v1/ns/m/"); err != nil {
		t.Fatal(err)
	}
	media := s.Media()
	if media["CD1"] != "http://kvm.example/rescue.iso" || media["USB1"] != "" {
		t.Errorf("after ejecting the seed server's media: %v", media)
	}
}

// With no OS image to insert (UEFI HTTP boots it), the seed volume goes into a device made for
// data, else the only CD; a failed listing is an error, never "no device".
func TestInsertMediaOfASeedAlone(t *testing.T) {
	ctx := context.Background()
	const seed = "http://seed.example/v1/ns/m/tok/cidata.iso"
	for _, tc := range []struct {
		name   string
		single bool
		want   map[string]string
	}{
		{"CD and USB stick", false, map[string]string{"CD1": "", "USB1": seed}},
		{"a single CD", true, map[string]string{"CD1": seed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, simulator.Config{SingleMediaSlot: tc.single})
			c := connectTo(t, s, Options{})
			if err := c.InsertMedia(ctx, "", seed); err != nil {
				t.Fatal(err)
			}
			if got := s.Media(); !maps.Equal(got, tc.want) {
				t.Errorf("media %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("a listing that fails", func(t *testing.T) {
		s := newSim(t, simulator.Config{})
		c := connectTo(t, s, Options{Backoff: time.Millisecond})
		if _, err := c.PowerState(ctx); err != nil { // logged in
			t.Fatal(err)
		}
		// The system's listing fails every attempt (1 + 3 retries); the manager's would answer.
		s.Fault.ErrorBurstTo("/Systems/1/VirtualMedia", 4, 503)
		if err := c.InsertMedia(ctx, "", seed); err == nil || errors.Is(err, ErrNoSeedSlot) {
			t.Errorf("InsertMedia while the BMC answers 503 = %v, want an error other than ErrNoSeedSlot", err)
		}
	})
}

// A stopping manager closes its pool: every BMC gets its session back before Close returns (one
// still logging in too), and a reconcile still running connects nothing.
func TestClosingThePoolLogsOutEverySessionAndConnectsNothingAfter(t *testing.T) {
	ctx := context.Background()
	pool := NewPool(Options{})
	var sims []*simulator.Server
	for _, p := range []string{"bladed", "dell-idrac9", "supermicro-x13"} {
		s := newSim(t, simulator.Config{ID: p, Profile: simulator.Profiles[p]})
		if _, err := settle(t, pool, target(s)); err != nil {
			t.Fatal(err)
		}
		sims = append(sims, s)
	}
	// A connection still being made when the pool closes: left to finish, and logged out.
	slow := newSim(t, simulator.Config{ID: "slow"})
	slow.Fault.Latency(150 * time.Millisecond)
	if _, err := pool.Get(ctx, target(slow)); !errors.Is(err, ErrConnecting) {
		t.Fatalf("a slow BMC: %v, want ErrConnecting while its login is under way", err)
	}
	sims = append(sims, slow)
	pool.Close(ctx)
	for _, s := range sims {
		if n := s.ActiveSessions(); n != 0 {
			t.Errorf("%s: %d sessions left when Close returned", s.ID(), n)
		}
		if _, err := pool.Get(ctx, target(s)); !errors.Is(err, ErrConnecting) {
			t.Errorf("%s: a Get after Close: %v, want ErrConnecting", s.ID(), err)
		}
		if n := s.ActiveSessions(); n != 0 {
			t.Errorf("%s: a Get after Close opened %d sessions", s.ID(), n)
		}
	}
	if n := slow.Stats().SessionsCreated; n != 1 {
		t.Errorf("the slow BMC's login had not ended when Close returned: %d sessions created", n)
	}
}

// A reset type the system does not list in ResetType@Redfish.AllowableValues is not sent: the
// caller gets ErrNotSupported and can choose another (a blade that only offers On, ForceOff and
// ForceRestart has no GracefulShutdown).
func TestAResetTheSystemDoesNotAllowIsNotSent(t *testing.T) {
	s := newSim(t, simulator.Config{Profile: simulator.Profiles["bladed"]})
	tg := target(s)
	tg.Address = strings.TrimSuffix(tg.Address, "/Systems/1") + "/Systems/2"
	c, err := settle(t, NewPool(Options{}), tg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Reset(ctx, ResetOn); err != nil {
		t.Fatal(err)
	}
	waitPower(t, c, PowerOn)
	ps, err := c.PowerState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, reset := range map[string]func() error{
		"Reset":     func() error { return c.Reset(ctx, ResetGracefulShutdown) },
		"ResetFrom": func() error { return c.ResetFrom(ctx, ResetGracefulShutdown, ps) },
	} {
		if err := reset(); !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "ForceOff") {
			t.Errorf("%s(GracefulShutdown) on a blade = %v, want ErrNotSupported listing the allowed types", name, err)
		}
	}
	if n := s.Stats().Posts["/redfish/v1/Systems/2/Actions/ComputerSystem.Reset"]; n != 1 {
		t.Errorf("%d resets posted to the blade, want 1 (the power-on)", n)
	}
}

// A client made by Connect (outside a pool) logs its session out when closed.
func TestConnectedClientLogsOutOnClose(t *testing.T) {
	s := newSim(t, simulator.Config{})
	c, err := Connect(context.Background(), target(s), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := s.ActiveSessions(); n != 1 {
		t.Fatalf("%d sessions after the first request, want 1", n)
	}
	c.Close()
	if n := s.ActiveSessions(); n != 0 {
		t.Errorf("%d sessions left on the BMC after Close", n)
	}
}
