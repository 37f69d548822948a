package maintenance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// fakeBMC is a BMC whose update tasks end as told; its firmware version changes only when a task
// ends well and applies is set. Every update request it accepts is a flash, as on a real BMC:
// while one runs it refuses another (409), as the simulator does; it never follows one for the
// caller.
type fakeBMC struct {
	version  string
	applies  bool     // a successful task changes the version to the image's
	outcomes []string // per update, in turn: "ok", "critical", "running" (never ends); last repeats
	flashed  []string // images of the updates accepted
	calls    int      // UpdateFirmware requests
	running  bool
	now      func() time.Time
	// during, when set, runs inside each update request (another round racing with it).
	during func()
	// echo is added to every task message (a BMC echoing the request's parameters).
	echo string
	// failOnce, when set, is what the next update request returns, the BMC starting nothing.
	failOnce error
	// noMonitor: updates are accepted without a task URI (the task is only listed).
	noMonitor bool
}

func (f *fakeBMC) UpdateFirmware(_ context.Context, image string, _ bmc.FirmwareTarget, _ *bmc.ImageCredentials) (string, error) {
	f.calls++
	if f.during != nil {
		during := f.during
		f.during = nil
		during()
	}
	if f.failOnce != nil {
		err := f.failOnce
		f.failOnce = nil
		return "", err
	}
	if f.running {
		return "", fmt.Errorf("%w: an update is already running", bmc.ErrConflict)
	}
	f.flashed = append(f.flashed, image)
	f.running = true
	if f.noMonitor {
		return "", nil
	}
	return fmt.Sprintf("/tasks/%d", len(f.flashed)), nil
}

func (f *fakeBMC) UpdateTasks(context.Context) ([]bmc.UpdateTask, bool, error) {
	var out []bmc.UpdateTask
	for i := range f.flashed {
		out = append(out, bmc.UpdateTask{URI: fmt.Sprintf("/tasks/%d", i+1), Running: f.running && i == len(f.flashed)-1})
	}
	return out, true, nil
}

func (f *fakeBMC) outcome() string {
	i := min(len(f.flashed), len(f.outcomes)) - 1
	return f.outcomes[i]
}

func (f *fakeBMC) TaskStatus(_ context.Context, uri string) (*bmc.Task, error) {
	switch f.outcome() {
	case "running":
		return &bmc.Task{URI: uri, State: "Running", Percent: 40, Message: "flashing" + f.echo}, nil
	case "critical":
		f.running = false
		return &bmc.Task{URI: uri, State: "Completed", Done: true, Failed: true, Message: "image rejected" + f.echo}, nil
	}
	if f.running && f.applies {
		img := f.flashed[len(f.flashed)-1]
		f.version = strings.TrimSuffix(img[strings.LastIndex(img, "/")+1:], ".bin")
	}
	f.running = false
	return &bmc.Task{URI: uri, State: "Completed", Done: true, Percent: 100}, nil
}

func (f *fakeBMC) FirmwareVersion(context.Context, bmc.FirmwareTarget) (string, error) {
	return f.version, nil
}
func (f *fakeBMC) BootProgress(context.Context) (string, error)              { return "SetupEntered", nil }
func (f *fakeBMC) CheckBIOSAttributes(context.Context, map[string]any) error { return nil }
func (f *fakeBMC) SetBIOSAttributes(context.Context, map[string]any) error   { return nil }
func (f *fakeBMC) BIOSAttributes(context.Context) (map[string]any, error)    { return nil, nil }

// bmcUpdate is an in-maintenance maintenance with one BMC firmware task (no host power involved:
// no API objects are written) and a reconciler driving it on a clock the test moves.
func bmcUpdate(t *testing.T, f *fakeBMC, retries int32, versions ...string) (*Reconciler, *expv1.RedfishMaintenance, *time.Time) {
	now := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	task := &expv1.FirmwareUpdate{Component: expv1.FirmwareBMC, Retries: ptr.To(retries)}
	for _, v := range versions {
		task.Plan = append(task.Plan, expv1.FirmwareVersion{Version: v, ImageURL: "http://images/" + v + ".bin"})
	}
	m := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"},
		Spec:   expv1.RedfishMaintenanceSpec{HostName: "h", Tasks: []expv1.MaintenanceTask{{Firmware: task}}},
		Status: expv1.RedfishMaintenanceStatus{Stage: expv1.StageInMaintenance}}
	c := apiWorld(t, &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h"}, Status: infrav1.RedfishHostStatus{State: infrav1.HostStateAvailable}})
	r := &Reconciler{Client: c, APIReader: c, PollInterval: time.Second, Now: func() time.Time { return now }, VerifyGrace: 10 * time.Second,
		Connect: func(context.Context, *infrav1.RedfishHost) (BMC, error) { return f, nil }}
	f.now = r.Now
	return r, m, &now
}

// rounds runs n reconcile rounds of the tasks, the clock moving a poll interval each.
func rounds(t *testing.T, r *Reconciler, m *expv1.RedfishMaintenance, now *time.Time, n int) bool {
	t.Helper()
	for range n {
		host := &infrav1.RedfishHost{}
		if err := r.Client.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "h"}, host); err != nil {
			t.Fatal(err)
		}
		done, _, err := r.runTasks(context.Background(), m, host)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			return true
		}
		*now = now.Add(r.PollInterval)
	}
	return false
}

func TestAStepIsVerifiedAgainstTheInventoryNotTheTaskState(t *testing.T) {
	// The BMC's task says Completed, but the firmware it runs stays the old one.
	f := &fakeBMC{version: "1.0", outcomes: []string{"ok"}}
	r, m, now := bmcUpdate(t, f, 0, "2.0")
	if rounds(t, r, m, now, 40) {
		t.Fatal("the task completed on the BMC's word, with the inventory reporting 1.0")
	}
	st := m.Status.Tasks[0]
	if st.State != expv1.TaskFailed || !strings.Contains(st.Message, "inventory reports BMC 1.0, not 2.0") {
		t.Errorf("task %+v, want failed naming the version the inventory reports", st)
	}
	if c := conditions.Get(m, infrav1.ReadyCondition); c == nil || c.Reason != TaskFailedReason {
		t.Errorf("Ready %+v, want reason %s", c, TaskFailedReason)
	}
}

func TestAnUpgradePlanGoesThroughItsVersionsInOrderSkippingOnesAlreadyRunning(t *testing.T) {
	f := &fakeBMC{version: "2.0", applies: true, outcomes: []string{"ok"}}
	r, m, now := bmcUpdate(t, f, 2, "2.0", "3.0", "4.0")
	if !rounds(t, r, m, now, 40) {
		t.Fatalf("plan not done: %+v", m.Status.Tasks[0])
	}
	if want := []string{"http://images/3.0.bin", "http://images/4.0.bin"}; fmt.Sprint(f.flashed) != fmt.Sprint(want) {
		t.Errorf("flashed %v, want %v (2.0 already ran)", f.flashed, want)
	}
	if st := m.Status.Tasks[0]; st.State != expv1.TaskSucceeded || st.Version != "4.0" {
		t.Errorf("task %+v, want succeeded on 4.0", st)
	}
}

func TestAFailedStepIsTriedAsOftenAsAllowedThenWaitsForSpecRetry(t *testing.T) {
	f := &fakeBMC{version: "1.0", applies: true, outcomes: []string{"critical", "critical", "critical", "ok"}}
	r, m, now := bmcUpdate(t, f, 2, "2.0")
	if rounds(t, r, m, now, 40) {
		t.Fatal("done despite three rejected images")
	}
	if len(f.flashed) != 3 || m.Status.Tasks[0].State != expv1.TaskFailed || m.Status.Tasks[0].Attempt != 3 {
		t.Fatalf("%d flashes, task %+v: want 3 attempts (1 + 2 retries), then failed", len(f.flashed), m.Status.Tasks[0])
	}
	if !strings.Contains(conditions.GetMessage(m, infrav1.ReadyCondition), "change spec.retry (to 1)") {
		t.Errorf("Ready says %q, want how to retry", conditions.GetMessage(m, infrav1.ReadyCondition))
	}
	m.Spec.Retry = 1
	if !rounds(t, r, m, now, 40) {
		t.Fatalf("not done after spec.retry: %+v", m.Status.Tasks[0])
	}
	if len(f.flashed) != 4 || f.version != "2.0" {
		t.Errorf("%d flashes, version %s: want one more flash, then 2.0", len(f.flashed), f.version)
	}
}

func TestAbortWaitsOutARunningFlashThenFailsKeepingTheHost(t *testing.T) {
	f := &fakeBMC{version: "1.0", applies: true, outcomes: []string{"running"}}
	r, m, now := bmcUpdate(t, f, 2, "2.0", "3.0")
	rounds(t, r, m, now, 3)
	if st := m.Status.Tasks[0]; st.Phase != expv1.PhaseFlashing || ptr.Deref(st.Percent, -1) != 40 || st.TaskURI != "/tasks/1" {
		t.Fatalf("task %+v: want the BMC task's progress (40%%) in status while it flashes", st)
	}
	m.Spec.Abort = true
	rounds(t, r, m, now, 5)
	if m.Status.Stage != expv1.StageInMaintenance || conditions.GetReason(m, infrav1.ReadyCondition) != AbortedReason {
		t.Fatalf("stage %s (%s) while the BMC still flashes: want the flash waited out", m.Status.Stage, describe(m))
	}
	f.outcomes = []string{"ok"}
	rounds(t, r, m, now, 5)
	if m.Status.Stage != expv1.StageFailed || m.Status.Tasks[0].State != expv1.TaskAborted {
		t.Fatalf("stage %s, task %+v: want Failed/Aborted once the flash ended", m.Status.Stage, m.Status.Tasks[0])
	}
	if len(f.flashed) != 1 {
		t.Errorf("%d flashes: nothing may start after an abort", len(f.flashed))
	}
}

func TestAStepThatOutlivesItsTimeoutIsTriedAgainWithoutASecondFlash(t *testing.T) {
	f := &fakeBMC{version: "1.0", outcomes: []string{"running"}}
	r, m, now := bmcUpdate(t, f, 1, "2.0")
	m.Spec.Tasks[0].Firmware.StepTimeout = &metav1.Duration{Duration: time.Minute}
	rounds(t, r, m, now, 200)
	st := m.Status.Tasks[0]
	if st.State != expv1.TaskFailed || !strings.Contains(st.Message, "not done within 1m0s") {
		t.Errorf("task %+v, want failed on its timeout", st)
	}
	if len(f.flashed) != 1 || f.calls != 1 {
		t.Errorf("%d flashes of %d requests: want the second attempt to wait for the update still running, never to send another", len(f.flashed), f.calls)
	}
}

func describe(m *expv1.RedfishMaintenance) string {
	return conditions.GetReason(m, infrav1.ReadyCondition) + ": " + conditions.GetMessage(m, infrav1.ReadyCondition)
}
