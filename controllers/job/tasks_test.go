package job

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
	"github.com/caprf/cluster-api-provider-redfish/controllers/host"
)

// scriptedBMC reports the power states it is given, one per read (the last one repeats), and
// records the resets it is sent (tried: all of them; resets: those it accepted); resetErr, when
// set, answers the next reset instead of accepting it.
type scriptedBMC struct {
	host.BMC
	states   []bmc.PowerState
	resets   []bmc.ResetType
	tried    int
	resetErr error
	progress []string // BootProgress answers in turn; the last repeats
	stateAt  time.Time
}

func (b *scriptedBMC) BootProgress(context.Context) (string, time.Time, error) {
	p := b.progress[0]
	if len(b.progress) > 1 {
		b.progress = b.progress[1:]
	}
	return p, b.stateAt, nil
}

func (b *scriptedBMC) PowerState(context.Context) (bmc.PowerState, error) {
	s := b.states[0]
	if len(b.states) > 1 {
		b.states = b.states[1:]
	}
	return s, nil
}

func (b *scriptedBMC) ResetFrom(_ context.Context, t bmc.ResetType, _ bmc.PowerState) error {
	b.tried++
	if err := b.resetErr; err != nil {
		b.resetErr = nil
		return err
	}
	b.resets = append(b.resets, t)
	return nil
}

// rounds runs the job's tasks round after round (the clock moves by step each time) until it
// finishes or n rounds have run.
func rounds(t *testing.T, tasks []infrav1.JobTask, b *scriptedBMC, n int) *infrav1.RedfishJob {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	j := &infrav1.RedfishJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j"}, Spec: infrav1.RedfishJobSpec{HostName: "h", Tasks: tasks}}
	j.Status.StartTime = &metav1.MicroTime{Time: now}
	for range tasks {
		j.Status.Tasks = append(j.Status.Tasks, infrav1.JobTaskStatus{State: infrav1.JobTaskPending})
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(j).WithStatusSubresource(j).Build()
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(j), j); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: c, PollInterval: 2 * time.Second, Now: func() time.Time { return now },
		Connect: func(context.Context, *infrav1.RedfishHost) (host.BMC, error) { return b, nil }}
	for range n {
		res, err := r.run(context.Background(), j, &infrav1.RedfishHost{})
		if err != nil {
			t.Fatal(err)
		}
		if j.Finished() {
			break
		}
		now = now.Add(max(res.RequeueAfter, 100*time.Millisecond))
	}
	return j
}

// A power task is done when the BMC reports the final state: PoweringOff is not Off, and nothing is
// sent again while the server is on its way.
func TestAPowerTaskEndsOnlyAtTheFinalState(t *testing.T) {
	b := &scriptedBMC{states: []bmc.PowerState{bmc.PowerOn, bmc.PowerPoweringOff}}
	if j := rounds(t, []infrav1.JobTask{{Power: infrav1.JobPowerForceOff}}, b, 5); j.Finished() {
		t.Fatalf("finished while the BMC reported PoweringOff: %+v", j.Status.Tasks)
	}
	if fmt.Sprint(b.resets) != "[ForceOff]" {
		t.Errorf("resets sent while the server powered off: %v, want one ForceOff", b.resets)
	}
	b = &scriptedBMC{states: []bmc.PowerState{bmc.PowerOn, bmc.PowerPoweringOff, bmc.PowerPoweringOff, bmc.PowerOff}}
	j := rounds(t, []infrav1.JobTask{{Power: infrav1.JobPowerForceOff}}, b, 10)
	if !j.Finished() || j.Status.Tasks[0].State != infrav1.JobTaskSucceeded {
		t.Fatalf("not done once the BMC reported Off: %+v", j.Status)
	}
	if fmt.Sprint(b.resets) != "[ForceOff]" {
		t.Errorf("resets sent: %v, want one ForceOff", b.resets)
	}
}

// A 409 (a power-on refused right after a power-off) is waited out, and the power-on sent again.
func TestAConflictDuringATransitionIsWaitedOut(t *testing.T) {
	b := &scriptedBMC{states: []bmc.PowerState{bmc.PowerOff, bmc.PowerOff, bmc.PowerOff, bmc.PowerPoweringOn, bmc.PowerOn},
		resetErr: fmt.Errorf("%w: the server was powered off moments ago", bmc.ErrConflict)}
	j := rounds(t, []infrav1.JobTask{{Power: infrav1.JobPowerOn}}, b, 10)
	if !j.Finished() || j.Status.Tasks[0].State != infrav1.JobTaskSucceeded {
		t.Fatalf("a 409 failed the task: %+v", j.Status)
	}
	if fmt.Sprint(b.resets) != "[On]" {
		t.Errorf("accepted resets: %v, want one On", b.resets)
	}
}

// A restart is sent once: the BMC reporting On right after it does not bring a second one, and it
// is done at the On that follows a state other than On.
func TestARestartIsSentOnce(t *testing.T) {
	b := &scriptedBMC{states: []bmc.PowerState{bmc.PowerOn, bmc.PowerOn, bmc.PowerOn, bmc.PowerPoweringOff, bmc.PowerOff, bmc.PowerPoweringOn, bmc.PowerOn}}
	j := rounds(t, []infrav1.JobTask{{Power: infrav1.JobPowerForceRestart}}, b, 20)
	if !j.Finished() || j.Status.Tasks[0].State != infrav1.JobTaskSucceeded || !j.Status.Tasks[0].LeftOn {
		t.Fatalf("restart not done: %+v", j.Status)
	}
	if fmt.Sprint(b.resets) != "[ForceRestart]" {
		t.Errorf("resets sent: %v, want one ForceRestart", b.resets)
	}
}

// A task that outlives its timeout fails the job, naming it; the tasks after it never run.
func TestATaskFailsAtItsTimeout(t *testing.T) {
	b := &scriptedBMC{states: []bmc.PowerState{bmc.PowerOn}}
	b.resetErr = fmt.Errorf("%w: busy", bmc.ErrConflict)
	timeout := &metav1.Duration{Duration: 3 * time.Second}
	j := rounds(t, []infrav1.JobTask{{Power: infrav1.JobPowerForceOff, Timeout: timeout}, {Power: infrav1.JobPowerOn}}, b, 50)
	if !j.Finished() || j.Status.Tasks[0].State != infrav1.JobTaskFailed || j.Status.Tasks[1].State != infrav1.JobTaskPending {
		t.Fatalf("want task 0 failed and task 1 never run: %+v", j.Status.Tasks)
	}
	if got := j.Status.CompletionTime.Sub(j.Status.Tasks[0].StartTime.Time); got < timeout.Duration || got > timeout.Duration+time.Second {
		t.Errorf("failed %s after the task started, want at its timeout %s", got, timeout.Duration)
	}
}

// A restart the BMC refused with a 409 was not executed: it is sent again, and done once accepted
// and seen through.
func TestARefusedRestartIsSentAgain(t *testing.T) {
	b := &scriptedBMC{states: []bmc.PowerState{bmc.PowerOn, bmc.PowerOn, bmc.PowerPoweringOff, bmc.PowerOff, bmc.PowerOn},
		resetErr: fmt.Errorf("%w: in POST", bmc.ErrConflict)}
	j := rounds(t, []infrav1.JobTask{{Power: infrav1.JobPowerForceRestart}}, b, 20)
	if !j.Finished() || j.Status.Tasks[0].State != infrav1.JobTaskSucceeded {
		t.Fatalf("not done: %+v", j.Status)
	}
	if fmt.Sprint(b.resets) != "[ForceRestart]" || b.tried != 2 {
		t.Errorf("accepted %v of %d tries, want one ForceRestart accepted on the second try", b.resets, b.tried)
	}
}

// A restart whose outcome is unknown (the send timed out) is never sent again, and not reported
// done while the BMC shows nothing: the task fails at its timeout.
func TestARestartOfUnknownOutcomeIsNeverRepeated(t *testing.T) {
	b := &scriptedBMC{states: []bmc.PowerState{bmc.PowerOn}, resetErr: context.DeadlineExceeded}
	timeout := &metav1.Duration{Duration: time.Minute}
	j := rounds(t, []infrav1.JobTask{{Power: infrav1.JobPowerCycle, Timeout: timeout}}, b, 200)
	if !j.Finished() || j.Status.Tasks[0].State != infrav1.JobTaskFailed {
		t.Fatalf("want the task failed at its timeout, not done: %+v", j.Status.Tasks)
	}
	if b.tried != 1 {
		t.Errorf("sent %d times, want once", b.tried)
	}
}

// An accepted GracefulShutdown is not pressed again while the OS shuts down (the BMC still
// reports On); a request the BMC calls invalid fails the task at once.
func TestAGracefulShutdownIsPressedOnce(t *testing.T) {
	b := &scriptedBMC{states: []bmc.PowerState{bmc.PowerOn, bmc.PowerOn, bmc.PowerOn, bmc.PowerOn, bmc.PowerOn, bmc.PowerOn, bmc.PowerOff}}
	j := rounds(t, []infrav1.JobTask{{Power: infrav1.JobPowerGracefulShutdown}}, b, 20)
	if !j.Finished() || j.Status.Tasks[0].State != infrav1.JobTaskSucceeded || b.tried != 1 {
		t.Fatalf("done %v after %d presses, want done after one: %+v", j.Finished(), b.tried, j.Status.Tasks)
	}
}

// A GracefulShutdown whose answer was lost (a timeout: the BMC may have pressed the button) is
// recorded before it goes out and never pressed again: a second press can turn a server that just
// reached Off back on. The task waits for Off, and fails at its timeout if it never comes.
func TestAGracefulShutdownOfUnknownOutcomeIsNeverPressedAgain(t *testing.T) {
	b := &scriptedBMC{states: []bmc.PowerState{bmc.PowerOn}, resetErr: context.DeadlineExceeded}
	timeout := &metav1.Duration{Duration: time.Minute}
	j := rounds(t, []infrav1.JobTask{{Power: infrav1.JobPowerGracefulShutdown, Timeout: timeout}}, b, 200)
	if !j.Finished() || j.Status.Tasks[0].State != infrav1.JobTaskFailed {
		t.Fatalf("want the task failed at its timeout: %+v", j.Status.Tasks)
	}
	if b.tried != 1 {
		t.Errorf("pressed %d times, want once", b.tried)
	}
}

// A wait for a boot progress state ends when the BMC reports it (not at an earlier POST state),
// or, on a BMC that reports none, orAfter after the task started.
func TestAWaitForBootProgressEndsAtTheStateOrAfterItsFallback(t *testing.T) {
	wait := infrav1.JobTask{WaitForBootProgress: &infrav1.JobBootProgress{State: "SetupEntered", OrAfter: &metav1.Duration{Duration: 20 * time.Second}}}
	b := &scriptedBMC{progress: []string{"SystemHardwareInitializationComplete", "SystemHardwareInitializationComplete", "SetupEntered"}}
	j := rounds(t, []infrav1.JobTask{wait}, b, 10)
	if !j.Finished() || j.Status.Tasks[0].State != infrav1.JobTaskSucceeded || len(b.progress) != 1 {
		t.Fatalf("want done at SetupEntered, after two POST answers: %+v", j.Status.Tasks)
	}
	b = &scriptedBMC{progress: []string{""}}
	j = rounds(t, []infrav1.JobTask{wait}, b, 100)
	if !j.Finished() || j.Status.Tasks[0].State != infrav1.JobTaskSucceeded {
		t.Fatalf("no boot progress: %+v", j.Status.Tasks)
	}
	if got := j.Status.CompletionTime.Sub(j.Status.Tasks[0].StartTime.Time); got < 20*time.Second || got > 22*time.Second {
		t.Errorf("no boot progress: done %s after the start, want orAfter (20s)", got)
	}
	b = &scriptedBMC{progress: []string{"SetupEntered"}, stateAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)} // left from an earlier boot
	j = rounds(t, []infrav1.JobTask{{WaitForBootProgress: wait.WaitForBootProgress, Timeout: &metav1.Duration{Duration: 10 * time.Second}}}, b, 100)
	if j.Status.Tasks[0].State != infrav1.JobTaskFailed {
		t.Errorf("a state entered before the task: %+v, want it not taken (failed at the timeout)", j.Status.Tasks)
	}
	b = &scriptedBMC{progress: []string{"OSRunning"}} // the host booted its OS instead: never there
	j = rounds(t, []infrav1.JobTask{{WaitForBootProgress: wait.WaitForBootProgress, Timeout: &metav1.Duration{Duration: 10 * time.Second}}}, b, 100)
	if j.Status.Tasks[0].State != infrav1.JobTaskFailed {
		t.Errorf("a state never reached: %+v, want failed at the timeout", j.Status.Tasks)
	}
}
