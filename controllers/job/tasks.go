package job

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
	"github.com/caprf/cluster-api-provider-redfish/controllers/host"
)

// run works through the tasks from the first one not done: each task that finishes this round lets
// the next one start in the same round.
func (r *Reconciler) run(ctx context.Context, j *infrav1.RedfishJob, h *infrav1.RedfishHost) (ctrl.Result, error) {
	rd := &round{}
	for i := range j.Spec.Tasks {
		ts := &j.Status.Tasks[i]
		if ts.State == infrav1.JobTaskSucceeded {
			continue
		}
		now := r.Now()
		if ts.State == infrav1.JobTaskPending || ts.StartTime == nil {
			ts.State, ts.StartTime = infrav1.JobTaskRunning, microTime(now)
		}
		deadline := ts.StartTime.Add(timeout(j.Spec.Tasks[i]))
		if !now.Before(deadline) {
			r.failTask(j, i, infrav1.JobTaskTimedOutReason, "did not finish within %s: %s", timeout(j.Spec.Tasks[i]), orDefault(ts.Message, "no answer from the BMC"))
			return ctrl.Result{}, nil
		}
		// Every BMC call of the task ends by its deadline: a hung BMC fails the task on time.
		tctx, cancel := context.WithDeadline(ctx, deadline)
		done, wait, err := r.step(tctx, j, i, h, rd)
		cancel()
		switch {
		case err != nil && permanent(err):
			r.failTask(j, i, infrav1.JobTaskFailedReason, "%v", err)
			return ctrl.Result{}, nil
		case err != nil:
			// Transient (a 409 while the BMC is in a transition, a timeout, a 5xx): tried again
			// until the task's deadline.
			ts.Message = truncate(err.Error())
			return ctrl.Result{RequeueAfter: min(r.PollInterval, deadline.Sub(r.Now())+time.Millisecond)}, nil
		case !done:
			return ctrl.Result{RequeueAfter: min(wait, deadline.Sub(r.Now())+time.Millisecond)}, nil
		}
		ts.State, ts.CompletionTime, ts.Message = infrav1.JobTaskSucceeded, microTime(r.Now()), ""
	}
	r.complete(j)
	return ctrl.Result{}, nil
}

// step does what task i needs now: done says it is finished; otherwise it is looked at again after
// wait.
func (r *Reconciler) step(ctx context.Context, j *infrav1.RedfishJob, i int, h *infrav1.RedfishHost, rd *round) (bool, time.Duration, error) {
	t, ts := j.Spec.Tasks[i], &j.Status.Tasks[i]
	c, err := r.Connect(ctx, h)
	if errors.Is(err, bmc.ErrConnecting) {
		ts.Message = "connecting to the BMC"
		return false, r.PollInterval / 4, nil
	}
	if err != nil {
		return false, 0, err
	}
	switch {
	case t.Power != "":
		return r.power(ctx, j, i, c, rd)
	case t.BootOnce != "":
		return true, 0, c.SetBootOverride(ctx, bmc.BootOverride{Target: bmc.BootTarget(t.BootOnce)})
	case t.InsertMedia != nil:
		return true, 0, c.InsertMedia(ctx, t.InsertMedia.URL, "")
	case t.EjectMedia != nil:
		return true, 0, c.EjectMedia(ctx, "")
	case t.WaitForBootProgress != nil:
		return r.waitForBootProgress(ctx, j, i, c)
	}
	return false, 0, fmt.Errorf("%w: task %d sets no operation", errInvalid, i)
}

var errInvalid = errors.New("invalid task")

// DefaultBootProgressFallback is how long a waitForBootProgress task waits on a BMC that reports
// no boot progress.
const DefaultBootProgressFallback = 3 * time.Minute

// waitForBootProgress is done once the system reports the state, entered since the job started
// when the BMC says when, or, on a BMC that reports no boot progress (or None throughout), once
// orAfter has passed since the task started.
func (r *Reconciler) waitForBootProgress(ctx context.Context, j *infrav1.RedfishJob, i int, c host.BMC) (bool, time.Duration, error) {
	w, ts := j.Spec.Tasks[i].WaitForBootProgress, &j.Status.Tasks[i]
	progress, at, err := c.BootProgress(ctx)
	if err != nil {
		ts.Message = truncate("reading the boot progress: " + err.Error())
		return false, r.PollInterval, nil // until the task's timeout
	}
	if progress == w.State && (at.IsZero() || j.Status.StartTime == nil || !at.Before(j.Status.StartTime.Time)) {
		return true, 0, nil // entered since the job started: not a state left from an earlier boot
	}
	if progress == "" || progress == "None" { // None after a power-on: the BMC does not follow boots
		after := DefaultBootProgressFallback
		if w.OrAfter != nil {
			after = w.OrAfter.Duration
		}
		left := ts.StartTime.Add(after).Sub(r.Now())
		if left <= 0 {
			return true, 0, nil
		}
		ts.Message = fmt.Sprintf("the BMC reports no boot progress: waiting %s", after)
		return false, min(left, r.PollInterval), nil
	}
	ts.Message = fmt.Sprintf("boot progress %s, waiting for %s", progress, w.State)
	return false, r.PollInterval, nil
}

// round is what one reconcile learnt of the BMC: the power state, read once unless a task
// changed it.
type round struct {
	ps    bmc.PowerState
	known bool
}

// power sends a reset and waits for the state it leads to.
//   - On and ForceOff are sent again when the BMC still reports the opposite settled state a poll
//     interval after the last send (a power-on refused for a while after a power-off): both are
//     harmless to repeat.
//   - GracefulShutdown and the restarts (GracefulRestart, ForceRestart, PowerCycle) are sent at
//     most once (a second press of a power button can turn a server that just reached Off back
//     on): the send is recorded in the API before it goes out, so a round that lost its status
//     write cannot repeat it. A refusal (409, 4xx) means it was not executed, and it may be sent
//     again; an error that leaves its fate unknown (a timeout) means it is never sent again, and
//     the task waits for the BMC to show it happened, until its timeout.
func (r *Reconciler) power(ctx context.Context, j *infrav1.RedfishJob, i int, c host.BMC, rd *round) (bool, time.Duration, error) {
	t, ts := j.Spec.Tasks[i], &j.Status.Tasks[i]
	if !rd.known {
		ps, err := c.PowerState(ctx)
		if err != nil {
			return false, 0, err
		}
		rd.ps, rd.known = ps, true
	}
	ps := rd.ps
	now := r.Now()
	restart := t.Power != infrav1.JobPowerOn && t.Power != infrav1.JobPowerForceOff && t.Power != infrav1.JobPowerGracefulShutdown
	want := bmc.PowerOn
	if t.Power == infrav1.JobPowerForceOff || t.Power == infrav1.JobPowerGracefulShutdown {
		want = bmc.PowerOff
	}
	// Done?
	if restart {
		if ts.SentTime != nil && ps != bmc.PowerOn {
			ts.LeftOn = true
		}
		if ps == bmc.PowerOn && (ts.LeftOn || (ts.Accepted && now.Sub(ts.SentTime.Time) >= restartSettle(timeout(t)))) {
			return true, 0, nil
		}
	} else if ps == want {
		return true, 0, nil
	}
	// Send?
	settled := ps == bmc.PowerOn || ps == bmc.PowerOff
	var send bool
	once := restart || t.Power == infrav1.JobPowerGracefulShutdown
	switch {
	case once:
		send = ts.SentTime == nil
	default:
		send = settled && (ts.SentTime == nil || now.Sub(ts.SentTime.Time) >= r.PollInterval)
	}
	if send {
		if once {
			if err := r.recordSend(ctx, j, i, now); err != nil {
				return false, 0, err
			}
		}
		rd.known = false
		err := c.ResetFrom(ctx, bmc.ResetType(t.Power), ps)
		switch {
		case err == nil:
			ts.SentTime, ts.Accepted = microTime(now), true
		case bmc.Refused(err):
			// Refused: not executed. A 409 is tried again, a request the BMC calls invalid or
			// does not offer fails the task. A recorded send is withdrawn first (if that write
			// fails, it is never sent again: the task fails at its timeout rather than repeat it).
			if once {
				before := j.DeepCopy()
				ts.SentTime = nil
				if perr := r.patchStatus(ctx, j, client.MergeFrom(before)); perr != nil {
					return false, 0, errors.Join(err, perr)
				}
			}
			return false, 0, err
		case once:
			ts.Message = truncate(fmt.Sprintf("%s sent once, its outcome unknown (%v): not sent again, waiting for the BMC to show it", t.Power, err))
			return false, r.PollInterval, nil
		default:
			return false, 0, err
		}
	}
	// The same words every look: a look that finds nothing new writes nothing.
	if restart {
		ts.Message = fmt.Sprintf("%s sent, waiting for the BMC to report On after it", t.Power)
	} else {
		ts.Message = fmt.Sprintf("%s sent, waiting for the BMC to report %s", t.Power, want)
	}
	return false, r.nextLook(ts.SentTime, now), nil
}

// restartSettle is how long after an accepted restart a BMC that reports On throughout (some
// restart without ever reporting another state) is taken as done: 30 s, or half the task's
// timeout when that is shorter.
func restartSettle(timeout time.Duration) time.Duration { return min(30*time.Second, timeout/2) }

// recordSend writes the send time of a restart before it goes out.
func (r *Reconciler) recordSend(ctx context.Context, j *infrav1.RedfishJob, i int, now time.Time) error {
	before := j.DeepCopy()
	j.Status.Tasks[i].SentTime = microTime(now)
	j.Status.Tasks[i].Message = fmt.Sprintf("sending %s", j.Spec.Tasks[i].Power)
	if err := r.patchStatus(ctx, j, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		j.Status.Tasks[i].SentTime, j.Status.Tasks[i].Message = nil, before.Status.Tasks[i].Message
		return fmt.Errorf("recording the %s before sending it: %w", j.Spec.Tasks[i].Power, err)
	}
	return nil
}

// patchStatus writes the job's status mid-round. A copy is written: j keeps its task statuses
// (the round holds pointers into them), and takes the new resourceVersion.
func (r *Reconciler) patchStatus(ctx context.Context, j *infrav1.RedfishJob, p client.Patch) error {
	cp := j.DeepCopy()
	if err := r.Client.Status().Patch(ctx, cp, p); err != nil {
		return err
	}
	j.ResourceVersion = cp.ResourceVersion
	return nil
}

// nextLook is how soon a transition is read again: a quarter of PollInterval after the send, then
// twice as long each time (0.5 s, 1.5 s, 3.5 s after it), at most PollInterval apart.
func (r *Reconciler) nextLook(sent *metav1.MicroTime, now time.Time) time.Duration {
	first := r.PollInterval / 4
	if sent == nil {
		return first
	}
	return min(max(2*now.Sub(sent.Time), first), r.PollInterval)
}

// permanent says whether an error will not go away by trying again: the BMC refused the request
// as invalid or unsupported.
func permanent(err error) bool {
	return errors.Is(err, errInvalid) || errors.Is(err, bmc.ErrNotSupported) || errors.Is(err, bmc.ErrNoSeedSlot) ||
		errors.Is(err, bmc.ErrAuth) || bmc.IsBadRequest(err)
}

// failTask fails task i and the job.
func (r *Reconciler) failTask(j *infrav1.RedfishJob, i int, reason, format string, args ...any) {
	ts := &j.Status.Tasks[i]
	ts.State, ts.CompletionTime = infrav1.JobTaskFailed, microTime(r.Now())
	ts.Message = truncate(fmt.Sprintf(format, args...))
	r.fail(j, reason, "Task %d (%s) failed: %s", i, describe(j.Spec.Tasks[i]), ts.Message)
}

// describe names a task for messages.
func describe(t infrav1.JobTask) string {
	switch {
	case t.Power != "":
		return "power " + string(t.Power)
	case t.BootOnce != "":
		return "bootOnce " + string(t.BootOnce)
	case t.InsertMedia != nil:
		return "insertMedia"
	case t.EjectMedia != nil:
		return "ejectMedia"
	case t.WaitForBootProgress != nil:
		return "waitForBootProgress " + t.WaitForBootProgress.State
	}
	return "empty"
}

func timeout(t infrav1.JobTask) time.Duration {
	if t.Timeout != nil && t.Timeout.Duration > 0 {
		return t.Timeout.Duration
	}
	return DefaultTaskTimeout
}

func microTime(t time.Time) *metav1.MicroTime { m := metav1.NewMicroTime(t); return &m }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func truncate(s string) string {
	if len(s) > 1000 {
		return s[:1000] + "…"
	}
	return s
}
