package bmc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// eraseActionPosts counts the SecureErase requests the BMC carried out.
func eraseActionPosts(s *simulator.Server) int {
	n := 0
	for path, c := range s.Stats().Posts {
		if strings.HasSuffix(path, "/Actions/Drive.SecureErase") {
			n += c
		}
	}
	return n
}

func TestEraseDrivesStartsNothingWhenOneDriveCannotBeErasedAndNamesIt(t *testing.T) {
	s := newSim(t, simulator.Config{NoSecureEraseDrives: []string{"Disk1"}, EmptyBays: 1})
	c := connectTo(t, s, Options{})
	jobs, err := c.EraseDrives(context.Background(), nil, nil)
	if !errors.Is(err, ErrDrivesNotErasable) {
		t.Fatalf("EraseDrives = %v, %v; want ErrDrivesNotErasable", jobs, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "Disk1") || !strings.Contains(msg, "S4sim-1") || strings.Contains(msg, "Disk0") || strings.Contains(msg, "Bay") {
		t.Errorf("the error names %q; want Disk1 and its serial only (not the erasable Disk0, not the empty bay)", msg)
	}
	if n := eraseActionPosts(s); n != 0 {
		t.Errorf("%d erases started although one drive cannot be erased; want none", n)
	}
}

func TestEraseDrivesErasesTheRestWhenTheUnerasableDriveIsExempt(t *testing.T) {
	s := newSim(t, simulator.Config{NoSecureEraseDrives: []string{"Disk1"}, EraseDuration: time.Millisecond})
	c := connectTo(t, s, Options{})
	jobs, err := c.EraseDrives(context.Background(), []string{"S4sim-1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || !strings.HasSuffix(jobs[0].Drive, "/Disk0") {
		t.Fatalf("jobs %+v; want Disk0's erase only", jobs)
	}
	// An exemption names a drive that cannot be erased; one that can is erased all the same.
	s2 := newSim(t, simulator.Config{ID: "sim2", EraseDuration: time.Millisecond})
	c2 := connectTo(t, s2, Options{})
	jobs, err = c2.EraseDrives(context.Background(), []string{"S4sim2-1", "Disk0"}, nil)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("EraseDrives with erasable drives exempt = %+v, %v; want both erased", jobs, err)
	}
}

func TestEmptyBaysAreNeitherDrivesNorErased(t *testing.T) {
	s := newSim(t, simulator.Config{EmptyBays: 2, EraseDuration: time.Millisecond})
	c := connectTo(t, s, Options{})
	ctx := context.Background()
	inv, err := c.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Drives) != 2 {
		t.Errorf("inventory lists %d drives (%+v); want the 2 SSDs, not the empty bays", len(inv.Drives), inv.Drives)
	}
	jobs, err := c.EraseDrives(ctx, nil, nil)
	if err != nil || len(jobs) != 2 {
		t.Errorf("EraseDrives = %+v, %v; want the 2 SSDs erased and the bays left alone", jobs, err)
	}
	old := connectTo(t, newSim(t, simulator.Config{ID: "old", EmptyBays: 1, Profile: simulator.Profiles["simple-storage"]}), Options{})
	if inv, err := old.Inventory(ctx); err != nil || len(inv.Drives) != 2 {
		t.Errorf("SimpleStorage inventory = %+v, %v; want the 2 devices, not the empty bay", inv, err)
	}
}

func TestAnEraseAnsweredWithoutAMonitorRunsUntilTheDriveSaysOtherwise(t *testing.T) {
	s := newSim(t, simulator.Config{EraseWithoutMonitor: true, EraseDuration: 400 * time.Millisecond})
	c := connectTo(t, s, Options{})
	ctx := context.Background()
	jobs, err := c.EraseDrives(ctx, nil, nil)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("EraseDrives = %+v, %v", jobs, err)
	}
	var drives []string
	for _, j := range jobs {
		if j.TaskURI != "" {
			t.Fatalf("job %+v has a task, but the BMC gave none", j)
		}
		drives = append(drives, j.Drive)
	}
	if n, err := c.ErasesInProgress(ctx, drives); err != nil || n != 2 {
		t.Fatalf("ErasesInProgress right after a 202 = %d, %v; want 2 (the drives report the erase)", n, err)
	}
	waitFor(t, 5*time.Second, "the drives to finish", func() (bool, any) {
		n, err := c.ErasesInProgress(ctx, drives)
		return err == nil && n == 0, n
	})
	for id, n := range s.DriveErasures() {
		if n != 1 {
			t.Errorf("drive %s erased %d times, want 1", id, n)
		}
	}
}

// A drive the inventory recorded that the BMC does not list now (a controller that did not answer,
// a partial listing) keeps everything unerased, named by serial; one the operator accepts (taken
// out of the server) no longer holds the erase. A recorded drive the BMC stops listing is never
// taken as done erasing.
func TestADriveRecordedButNotListedHoldsTheErase(t *testing.T) {
	s := newSim(t, simulator.Config{EraseDuration: time.Millisecond})
	c := connectTo(t, s, Options{})
	ctx := context.Background()
	inv, err := c.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var expected []string
	for _, d := range inv.Drives {
		expected = append(expected, d.SerialNumber)
	}
	expected = append(expected, "S4gone-7")
	jobs, err := c.EraseDrives(ctx, nil, expected)
	if !errors.Is(err, ErrDrivesMissing) || !strings.Contains(err.Error(), "S4gone-7") {
		t.Fatalf("EraseDrives = %+v, %v; want ErrDrivesMissing naming S4gone-7", jobs, err)
	}
	if n := eraseActionPosts(s); n != 0 {
		t.Errorf("%d erases started while a recorded drive is missing; want none", n)
	}
	if jobs, err = c.EraseDrives(ctx, []string{"S4gone-7"}, expected); err != nil || len(jobs) != len(inv.Drives) {
		t.Fatalf("with the missing drive accepted: %+v, %v; want every listed drive erased", jobs, err)
	}
	if n, err := c.ErasesInProgress(ctx, []string{"/redfish/v1/Systems/1/Storage/1/Drives/NoSuchDrive"}); err != nil || n != 1 {
		t.Errorf("ErasesInProgress of a drive no longer listed = %d, %v; want 1 (not known to be done)", n, err)
	}
}
