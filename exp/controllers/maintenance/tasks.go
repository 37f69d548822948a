package maintenance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/stmcginnis/gofish/schemas"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"

	"github.com/caprf/cluster-api-provider-redfish/bmc"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/names"
)

// BMC is what the firmware and BIOS-settings tasks ask of a host's BMC (a bmc.Client).
type BMC interface {
	UpdateFirmware(ctx context.Context, imageURI string, target bmc.FirmwareTarget, creds *bmc.ImageCredentials) (string, error)
	TaskStatus(ctx context.Context, uri string) (*bmc.Task, error)
	UpdateTasks(ctx context.Context) ([]bmc.UpdateTask, bool, error)
	FirmwareVersion(ctx context.Context, target bmc.FirmwareTarget) (string, error)
	CheckBIOSAttributes(ctx context.Context, attrs map[string]any) error
	SetBIOSAttributes(ctx context.Context, attrs map[string]any) error
	BIOSAttributes(ctx context.Context) (map[string]any, error)
}

// Reasons of the Ready condition for the firmware and BIOS-settings tasks.
const (
	InvalidTaskReason    = "InvalidTask"
	BMCUnreachableReason = "BMCUnreachable"
	TaskRunningReason    = "TaskRunning"
	TaskFailedReason     = "TaskFailed"
	AbortedReason        = "Aborted"
	// WaitingForLeaseReason: another maintenance holds the host's lease, or a job runs on it.
	WaitingForLeaseReason = "WaitingForLease"
)

// Defaults of the API.
const (
	DefaultTaskRetries = 2
	DefaultStepTimeout = 30 * time.Minute
	// DefaultSetupWait is how long a host whose BMC reports no boot progress is left in POST
	// to write what was staged.
	DefaultSetupWait = 3 * time.Minute
	// DefaultVerifyGrace is how long the inventory may keep reporting the old value after an
	// apply (a BMC restarting into new firmware, an inventory refreshed late).
	DefaultVerifyGrace = 5 * time.Minute
)

// JobLabel names, on the RedfishJobs a maintenance creates to apply BIOS images and settings, the
// maintenance.
const JobLabel = "caprf.io/maintenance"

// automatic says whether the task runs and ends by itself (firmware, BIOS settings).
func automatic(t expv1.MaintenanceTask) bool { return t.Firmware != nil || t.BIOSSettings != nil }

// keepsMachine says whether the maintenance leaves the Machine on its host running (BMC updates
// only).
func keepsMachine(m *expv1.RedfishMaintenance) bool { return m.KeepsMachine() }

func retries(t expv1.MaintenanceTask) int32 {
	var r *int32
	if t.Firmware != nil {
		r = t.Firmware.Retries
	} else if t.BIOSSettings != nil {
		r = t.BIOSSettings.Retries
	}
	return ptr.Deref(r, DefaultTaskRetries)
}

func stepTimeout(t expv1.MaintenanceTask) time.Duration {
	var d *metav1.Duration
	if t.Firmware != nil {
		d = t.Firmware.StepTimeout
	} else if t.BIOSSettings != nil {
		d = t.BIOSSettings.Timeout
	}
	if d == nil {
		return DefaultStepTimeout
	}
	return d.Duration
}

// Attributes decodes a BIOS-settings task's attributes.
func Attributes(s *expv1.BIOSSettings) (map[string]any, error) {
	out := make(map[string]any, len(s.Attributes))
	for k, raw := range s.Attributes {
		var v any
		d := json.NewDecoder(bytes.NewReader(raw.Raw))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			return nil, fmt.Errorf("attribute %s: %w", k, err)
		}
		switch n := v.(type) {
		case string, bool:
		case json.Number:
			i, err := n.Int64()
			if err != nil {
				return nil, fmt.Errorf("attribute %s: a string, an integer or a boolean is needed (not a fraction, at most 64 bits)", k)
			}
			v = i
		default:
			return nil, fmt.Errorf("attribute %s: a string, an integer or a boolean is needed", k)
		}
		out[k] = v
	}
	return out, nil
}

// connectTasks returns the host's BMC for the tasks, or says on the maintenance why there is none.
func (r *Reconciler) connectTasks(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost) (BMC, bool) {
	if r.Connect == nil {
		r.waiting(m, BMCUnreachableReason, "This manager runs no firmware or BIOS tasks (no BMC connection)")
		return nil, false
	}
	c, err := r.Connect(ctx, host)
	if err != nil {
		r.waiting(m, BMCUnreachableReason, "Host %s: BMC not usable for the tasks: %s", host.Name, bmc.Redact(err.Error()))
		return nil, false
	}
	return c, true
}

// checkTasks checks, before the maintenance is announced (so before any power action), what can
// be checked of its firmware and BIOS-settings tasks: the BIOS attributes against the BMC's
// registry, the image credentials Secret. It reports whether the maintenance may go on; one with
// a task that can never run stays Pending (reason InvalidTask, naming each problem).
func (r *Reconciler) checkTasks(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost) (bool, ctrl.Result) {
	if len(m.Status.Tasks) > 0 || !slices.ContainsFunc(m.Spec.Tasks, automatic) {
		return true, ctrl.Result{}
	}
	if c := conditions.Get(m, infrav1.ReadyCondition); c != nil && c.Reason == InvalidTaskReason && c.ObservedGeneration == m.Generation {
		return false, ctrl.Result{} // refused as it stands: a change of its spec checks it again
	}
	var problems []string
	var c BMC
	for i, t := range m.Spec.Tasks {
		switch {
		case t.Firmware != nil && t.Firmware.ImageCredentialsSecretName != "":
			if _, err := r.imageCredentials(ctx, m, t.Firmware); err != nil {
				if errors.Is(err, errNoSecret) || errors.Is(err, errBadSecret) || errors.Is(err, errNotImageSecret) {
					problems = append(problems, fmt.Sprintf("tasks[%d].firmware: %s", i, err))
					continue
				}
				r.waiting(m, BMCUnreachableReason, "Reading the image credentials of tasks[%d]: %s", i, err)
				return false, ctrl.Result{RequeueAfter: r.PollInterval}
			}
		case t.BIOSSettings != nil:
			attrs, err := Attributes(t.BIOSSettings)
			if err != nil {
				problems = append(problems, fmt.Sprintf("tasks[%d].biosSettings: %s", i, err))
				continue
			}
			if slices.ContainsFunc(m.Spec.Tasks[:i], func(t expv1.MaintenanceTask) bool {
				return t.Firmware != nil && t.Firmware.Component == expv1.FirmwareBIOS
			}) {
				continue // the new BIOS may know attributes the current one does not: checked when staged
			}
			if c == nil {
				var ok bool
				if c, ok = r.connectTasks(ctx, m, host); !ok {
					return false, ctrl.Result{RequeueAfter: 5 * r.PollInterval}
				}
			}
			err = c.CheckBIOSAttributes(ctx, attrs)
			var bad *bmc.UnknownAttributesError
			switch {
			case errors.As(err, &bad):
				problems = append(problems, fmt.Sprintf("tasks[%d].biosSettings: %s", i, strings.Join(bad.Problems, "; ")))
			case errors.Is(err, bmc.ErrNotSupported):
				problems = append(problems, fmt.Sprintf("tasks[%d].biosSettings: %s", i, bmc.Redact(err.Error())))
			case err != nil:
				r.waiting(m, BMCUnreachableReason, "Host %s: checking the BIOS attributes of tasks[%d]: %s", host.Name, i, bmc.Redact(err.Error()))
				return false, ctrl.Result{RequeueAfter: 5 * r.PollInterval}
			}
		}
	}
	if len(problems) > 0 {
		// It stays Pending, holding nothing, until its tasks are corrected (they may change until
		// the announcement) or it is deleted: the BMC is asked again when the spec changes.
		msg := "Refused before anything was done on host " + host.Name + ": " + strings.Join(problems, "; ") + ". Correct spec.tasks or delete this maintenance"
		if conditions.GetMessage(m, infrav1.ReadyCondition) != msg {
			r.event(m, "InvalidTask", "refused: %s", strings.Join(problems, "; "))
		}
		// Set, not throttled: its observed generation says which spec was refused.
		conditions.Set(m, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: InvalidTaskReason, Message: msg})
		return false, ctrl.Result{}
	}
	m.Status.Tasks = make([]expv1.MaintenanceTaskStatus, len(m.Spec.Tasks))
	for i, t := range m.Spec.Tasks {
		if automatic(t) {
			m.Status.Tasks[i].State = expv1.TaskPending
		}
	}
	return true, ctrl.Result{}
}

// ImageCredentialsLabel marks a Secret a firmware task may send to an image server.
const ImageCredentialsLabel = "caprf.io/image-credentials"

var (
	errNoSecret       = errors.New("not found")
	errBadSecret      = errors.New("the Secret needs the keys username and password")
	errNotImageSecret = errors.New(`the Secret lacks the label caprf.io/image-credentials: "true" (only such Secrets are sent to image servers)`)
)

// imageCredentials reads a firmware task's image server credentials (nil without a Secret).
func (r *Reconciler) imageCredentials(ctx context.Context, m *expv1.RedfishMaintenance, f *expv1.FirmwareUpdate) (*bmc.ImageCredentials, error) {
	if f.ImageCredentialsSecretName == "" {
		return nil, nil
	}
	s := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: f.ImageCredentialsSecretName}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("image credentials Secret %s %w", f.ImageCredentialsSecretName, errNoSecret)
		}
		return nil, err
	}
	if s.Labels[ImageCredentialsLabel] != "true" {
		// Only a Secret meant for image servers: BMC credentials have the same keys.
		return nil, fmt.Errorf("image credentials Secret %s: %w", f.ImageCredentialsSecretName, errNotImageSecret)
	}
	user, pass := s.Data["username"], s.Data["password"]
	if len(user) == 0 || len(pass) == 0 {
		return nil, fmt.Errorf("image credentials Secret %s: %w", f.ImageCredentialsSecretName, errBadSecret)
	}
	return &bmc.ImageCredentials{Username: string(user), Password: string(pass)}, nil
}

// runTasks runs the firmware and BIOS-settings tasks in order; it reports whether they are all
// done (then the other tasks, and the completion, follow).
func (r *Reconciler) runTasks(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost) (bool, ctrl.Result, error) {
	if !slices.ContainsFunc(m.Spec.Tasks, automatic) {
		return true, ctrl.Result{}, nil
	}
	if len(m.Status.Tasks) != len(m.Spec.Tasks) {
		// Checked and set up before the announcement; a maintenance from before tasks had a status
		// (or one whose status was lost) is set up now, unchecked tasks failing at their step.
		m.Status.Tasks = make([]expv1.MaintenanceTaskStatus, len(m.Spec.Tasks))
		for i, t := range m.Spec.Tasks {
			if automatic(t) {
				m.Status.Tasks[i].State = expv1.TaskPending
			}
		}
	}
	allDone := !slices.ContainsFunc(m.Status.Tasks, func(st expv1.MaintenanceTaskStatus) bool {
		return st.State != "" && st.State != expv1.TaskSucceeded
	})
	if !keepsMachine(m) && !allDone {
		// The host stays off between the steps: only the jobs applying BIOS images and settings
		// power it on, into its BIOS setup. (Once they are all done, the tasks after them say
		// what the power does: a hold, an image.)
		if err := r.setHold(ctx, host, m, true); err != nil {
			res, err := retryOnConflict(err)
			return false, res, err
		}
	}
	if m.Spec.Abort {
		return false, r.abort(ctx, m, host), nil
	}
	for i, t := range m.Spec.Tasks {
		if !automatic(t) {
			continue
		}
		st := &m.Status.Tasks[i]
		switch st.State {
		case expv1.TaskSucceeded:
			continue
		case expv1.TaskFailed:
			if m.Spec.Retry == st.Retry {
				// Another maintenance may work on the host meanwhile, once nothing this one
				// started runs.
				if what, err := r.releaseWhenQuiet(ctx, m, host); err != nil || what != "" {
					r.waiting(m, TaskFailedReason, "tasks[%d] (%s) failed: %s. Waiting for %s to end before the host's lease is released", i, describeTask(t), st.Message, what)
					res, err := retryOnConflict(err)
					return false, ctrl.Result{RequeueAfter: max(res.RequeueAfter, r.PollInterval)}, err
				}
				r.waiting(m, TaskFailedReason, "tasks[%d] (%s) failed: %s. Host %s stays out of service: change spec.retry (to %d) to try the step again, or set spec.abort", i, describeTask(t), st.Message, host.Name, st.Retry+1)
				return false, ctrl.Result{}, nil
			}
			st.Retry = m.Spec.Retry
			r.event(m, "TaskRetried", "tasks[%d] (%s) tried again from step %d (spec.retry %d)", i, describeTask(t), st.Step, st.Retry)
			r.startAttempt(st, 1)
			st.State, st.CompletionTime = expv1.TaskRunning, nil
		case expv1.TaskPending, "":
			st.State, st.Step, st.Retry = expv1.TaskRunning, 0, m.Spec.Retry
			r.startAttempt(st, 1)
			r.event(m, "TaskStarted", "tasks[%d] (%s) started", i, describeTask(t))
		}
		if keepsMachine(m) && !holds(host, m) {
			if why := unsettled(host); why != "" {
				// The BMC restarts into its new firmware: not while the host controller needs it.
				// Checked before the lease only: once it is held, the host's own work waits for
				// it (a release asked for meanwhile waits for the flash, not the other way round).
				r.waiting(m, TaskRunningReason, "tasks[%d] (%s) waits for host %s to settle before the BMC is flashed and restarts: %s", i, describeTask(t), host.Name, why)
				st.Message = "waiting for host " + host.Name + " to settle: " + why
				return false, ctrl.Result{RequeueAfter: r.PollInterval}, nil
			}
		}
		// One maintenance at a time flashes, stages or boots the host: the one holding its lease,
		// taken before anything is sent to the BMC.
		if who, err := r.acquire(ctx, m, host); err != nil || who != "" {
			if who != "" {
				r.waiting(m, WaitingForLeaseReason, "tasks[%d] (%s) waits for the lease of host %s (%s): one maintenance at a time flashes or boots a host", i, describeTask(t), host.Name, who)
			}
			res, err := retryOnConflict(err)
			return false, ctrl.Result{RequeueAfter: max(res.RequeueAfter, r.PollInterval)}, err
		}
		if st.Phase == expv1.PhaseChecking || st.Phase == "" {
			// A job of another that started before the lease was taken runs to its end first
			// (one started since sees the lease and waits).
			if job, err := r.othersJob(ctx, m, host); err != nil || job != "" {
				if job != "" {
					r.waiting(m, WaitingForLeaseReason, "tasks[%d] (%s) waits for RedfishJob %s to end on host %s", i, describeTask(t), job, host.Name)
				}
				return false, ctrl.Result{RequeueAfter: r.PollInterval}, err
			}
		}
		c, ok := r.connectTasks(ctx, m, host)
		if !ok {
			if r.attemptTimedOut(ctx, m, i, t) {
				return false, ctrl.Result{RequeueAfter: time.Millisecond}, nil
			}
			return false, ctrl.Result{RequeueAfter: 5 * r.PollInterval}, nil
		}
		var res ctrl.Result
		var err error
		if t.Firmware != nil {
			res, err = r.firmwareStep(ctx, m, host, c, i, t.Firmware)
		} else {
			res, err = r.biosStep(ctx, m, host, c, i, t.BIOSSettings)
		}
		if st.State == expv1.TaskSucceeded && err == nil {
			continue
		}
		st.Message = clip(st.Message) // BMC error bodies can be long; the field is bounded
		if st.State == expv1.TaskRunning && r.attemptTimedOut(ctx, m, i, t) {
			return false, ctrl.Result{RequeueAfter: time.Millisecond}, nil
		}
		if st.State == expv1.TaskRunning {
			r.waiting(m, TaskRunningReason, "tasks[%d] (%s): %s, attempt %d: %s", i, describeTask(t), progress(t, st), st.Attempt, st.Message)
		}
		return false, res, err
	}
	// Every task is done, and what they started ended with them: the lease goes.
	if err := r.releaseConfirmed(ctx, m, host); err != nil {
		res, err := retryOnConflict(err)
		return false, res, err
	}
	return true, ctrl.Result{}, nil
}

// progress says where a running task is: the step of the plan and the phase.
func progress(t expv1.MaintenanceTask, st *expv1.MaintenanceTaskStatus) string {
	if t.Firmware != nil && int(st.Step) < len(t.Firmware.Plan) {
		return fmt.Sprintf("%s (step %d of %d) %s", t.Firmware.Plan[st.Step].Version, st.Step+1, len(t.Firmware.Plan), st.Phase)
	}
	return string(st.Phase)
}

// maxMessage bounds the messages a task keeps (the status field allows 2048 bytes).
const maxMessage = 1024

// clip cuts a message from a BMC to maxMessage bytes.
func clip(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return s[:maxMessage-3] + "..."
}

// scrub hides, in a message a BMC wrote, the string values a BIOS-settings task sends (some are
// passwords, and BMCs echo refused values).
func scrub(msg string, t expv1.MaintenanceTask) string {
	if t.BIOSSettings == nil {
		return msg
	}
	attrs, err := Attributes(t.BIOSSettings)
	if err != nil {
		return msg
	}
	for _, v := range attrs {
		if s, ok := v.(string); ok && len(s) >= 3 {
			msg = strings.ReplaceAll(msg, s, "***")
		}
	}
	return msg
}

// maskPassword hides the image server's password in a message from the BMC.
func maskPassword(msg string, creds *bmc.ImageCredentials) string {
	if creds == nil || creds.Password == "" {
		return msg
	}
	return strings.ReplaceAll(msg, creds.Password, "***")
}

func describeTask(t expv1.MaintenanceTask) string {
	switch {
	case t.Firmware != nil:
		return string(t.Firmware.Component) + " firmware"
	case t.BIOSSettings != nil:
		return "BIOS settings"
	}
	return "task"
}

func (r *Reconciler) startAttempt(st *expv1.MaintenanceTaskStatus, attempt int32) {
	now := metav1.NewTime(r.Now())
	st.Attempt, st.Phase, st.StepStartTime, st.PhaseStartTime = attempt, expv1.PhaseChecking, &now, &now
	st.TaskURI, st.Job, st.Percent = "", "", nil
}

func (r *Reconciler) enterPhase(st *expv1.MaintenanceTaskStatus, p expv1.TaskPhase) {
	now := metav1.NewTime(r.Now())
	st.Phase, st.PhaseStartTime = p, &now
}

// attemptTimedOut fails the running attempt of task i once its phase outlived the timeout (a
// phase that moved on this round starts its own clock); it reports whether it did. An attempt
// that timed out booting the host starts again from that boot, not from a new flash: the image is
// staged already, and a job still running goes first (one job at a time per host).
func (r *Reconciler) attemptTimedOut(ctx context.Context, m *expv1.RedfishMaintenance, i int, t expv1.MaintenanceTask) bool {
	st := &m.Status.Tasks[i]
	if st.PhaseStartTime == nil || r.Now().Before(st.PhaseStartTime.Add(stepTimeout(t))) {
		return false
	}
	if st.Phase == expv1.PhaseApplying && r.jobRunning(ctx, m.Namespace, st.Job) {
		return false // a boot under way is never cut short: the job's own task timeouts end it
	}
	phase := st.Phase
	r.attemptFailed(m, i, fmt.Sprintf("phase %s not done within %s", phase, stepTimeout(t)))
	if st.State == expv1.TaskRunning && phase == expv1.PhaseApplying {
		r.enterPhase(st, expv1.PhaseApplying)
	}
	return true
}

// attemptFailed tries the step again while retries are left, and fails the task otherwise.
func (r *Reconciler) attemptFailed(m *expv1.RedfishMaintenance, i int, msg string) {
	t, st := m.Spec.Tasks[i], &m.Status.Tasks[i]
	msg = clip(scrub(bmc.Redact(msg), m.Spec.Tasks[i]))
	if st.Attempt <= retries(t) {
		r.event(m, "AttemptFailed", "tasks[%d] (%s) step %d attempt %d failed: %s; trying again", i, describeTask(t), st.Step, st.Attempt, msg)
		r.startAttempt(st, st.Attempt+1)
		st.Message = fmt.Sprintf("attempt %d failed: %s", st.Attempt-1, msg)
		return
	}
	now := metav1.NewTime(r.Now())
	st.State, st.Message, st.CompletionTime, st.Percent = expv1.TaskFailed, msg, &now, nil
	r.event(m, "TaskFailed", "tasks[%d] (%s) failed at step %d after %d attempt(s): %s", i, describeTask(t), st.Step, st.Attempt, msg)
	r.waiting(m, TaskFailedReason, "tasks[%d] (%s) failed: %s. Host %s stays out of service: change spec.retry (to %d) to try the step again, or set spec.abort", i, describeTask(t), msg, m.Spec.HostName, st.Retry+1)
}

// firmwareStep moves the current step of a firmware task on: read the version (a step the
// inventory already reports is skipped), flash (an update already running on the BMC is
// followed, never started twice), follow the BMC's task, apply (a BIOS image: boot into the BIOS
// setup), verify against the inventory.
func (r *Reconciler) firmwareStep(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost, c BMC, i int, f *expv1.FirmwareUpdate) (ctrl.Result, error) {
	st := &m.Status.Tasks[i]
	target := bmc.FirmwareTarget(f.Component)
	if int(st.Step) >= len(f.Plan) {
		r.taskSucceeded(m, i)
		return ctrl.Result{}, nil
	}
	want := f.Plan[st.Step]
	// A BMC may echo the image server's password in any message (a task's, an error): each is
	// masked before it reaches the status, a condition or an event.
	creds, err := r.imageCredentials(ctx, m, f)
	if err != nil {
		st.Message = err.Error()
		return ctrl.Result{RequeueAfter: 5 * r.PollInterval}, nil
	}
	switch st.Phase {
	case expv1.PhaseChecking, "":
		v, err := c.FirmwareVersion(ctx, target)
		if err != nil {
			st.Message = "reading the firmware version: " + bmc.Redact(maskPassword(err.Error(), creds))
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		st.Version = v
		if v == want.Version {
			r.stepDone(m, i, len(f.Plan))
			return ctrl.Result{RequeueAfter: time.Millisecond}, nil
		}
		if intent := intentOf(host, m, i); intent != nil {
			// Decided (and perhaps sent) in a round whose outcome was lost.
			return r.resumeFlash(ctx, m, host, c, i, intent, target), nil
		}
		tasks, _, err := c.UpdateTasks(ctx)
		if err != nil {
			st.Message = "listing the BMC's update tasks: " + bmc.Redact(maskPassword(err.Error(), creds))
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		intent := &infrav1.FlashIntent{Task: int32(i), Step: st.Step, Attempt: st.Attempt, Retry: st.Retry, //nolint:gosec // at most 16 tasks
			Component: string(f.Component), Version: want.Version, DecidedAt: metav1.NewTime(r.Now())}
		for _, t := range tasks {
			if t.Running {
				// Started by no one holding the lease now (a holder that went, a person): it
				// is waited out, never taken for this step's.
				st.Message = "the BMC runs an update this maintenance did not start (" + t.URI + "): waiting for it to end"
				return ctrl.Result{RequeueAfter: r.PollInterval}, nil
			}
			intent.PriorTasks = append(intent.PriorTasks, t.URI)
		}
		if n := len(intent.PriorTasks); n > maxPriorTasks {
			intent.PriorTasks = intent.PriorTasks[n-maxPriorTasks:]
		}
		// Recorded before the request: a round that loses the answer follows what it started.
		if err := r.setIntent(ctx, host, intent); err != nil {
			st.Message = "recording the update on the host before sending it: " + err.Error()
			res, err := retryOnConflict(err)
			return ctrl.Result{RequeueAfter: max(res.RequeueAfter, time.Millisecond)}, err
		}
		uri, err := c.UpdateFirmware(ctx, want.ImageURL, target, creds)
		switch {
		case errors.Is(err, bmc.ErrNotSupported):
			st.Attempt = retries(m.Spec.Tasks[i]) + 1 // no retry can help
			r.attemptFailed(m, i, maskPassword(err.Error(), creds))
			return ctrl.Result{}, nil
		case err != nil && refused(err):
			// Refused: nothing started; sent again next round.
			st.Message = "starting the update: " + bmc.Redact(maskPassword(err.Error(), creds))
			if err := r.setIntent(ctx, host, nil); err != nil {
				return retryOnConflict(err)
			}
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		case err != nil:
			// Perhaps started (a timeout, a lost answer): the next round looks for it.
			st.Message = "starting the update: " + bmc.Redact(maskPassword(err.Error(), creds))
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		if uri != "" && holds(host, m) {
			// A copy: the one written may be what the host decoded its answer into.
			intent = intent.DeepCopy()
			intent.TaskURI = uri
			_ = r.setIntent(ctx, host, intent) // best effort: the prior tasks find it too
		}
		st.TaskURI, st.Percent, st.Message = uri, ptr.To[int32](0), fmt.Sprintf("flashing %s %s (from %s)", f.Component, want.Version, v)
		r.event(m, "Flashing", "tasks[%d]: flashing %s %s on host %s (step %d of %d, attempt %d)", i, f.Component, want.Version, host.Name, st.Step+1, len(f.Plan), st.Attempt)
		r.enterPhase(st, expv1.PhaseFlashing)
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	case expv1.PhaseFlashing:
		if st.TaskURI == "" {
			// Accepted without a task to follow: done once the BMC lists no update running; a
			// BMC that lists none is given the verify grace to write the image before the host is
			// booted (a BIOS image) or the inventory read (a BMC's).
			tasks, listed, err := c.UpdateTasks(ctx)
			if err != nil {
				st.Message = "listing the BMC's update tasks: " + bmc.Redact(maskPassword(err.Error(), creds))
				return ctrl.Result{RequeueAfter: r.PollInterval}, nil
			}
			running := slices.ContainsFunc(tasks, func(t bmc.UpdateTask) bool { return t.Running })
			if running || (!listed && r.Now().Before(st.PhaseStartTime.Add(r.verifyGrace()))) {
				st.Message = "the BMC accepted the update without a task to follow: waiting for it to end"
				return ctrl.Result{RequeueAfter: r.PollInterval}, nil
			}
			r.afterFlash(st, target)
			return ctrl.Result{RequeueAfter: time.Millisecond}, nil
		}
		task, err := c.TaskStatus(ctx, st.TaskURI)
		if err != nil {
			// A BMC flashing its own firmware restarts and answers nothing for a while.
			st.Message = "the BMC does not answer (restarting?): " + bmc.Redact(maskPassword(err.Error(), creds))
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		st.Percent, st.Message = ptr.To(int32(task.Percent)), clip(maskPassword(task.Message, creds)) //nolint:gosec // a percentage
		switch {
		case !task.Done:
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		case task.State == bmc.TaskGone:
			// The BMC forgot the task (some purge finished ones within a second): the inventory
			// tells whether the image took, as it does for a task that claims success.
			st.Message = "the BMC no longer lists its update task; the inventory decides"
		case task.Failed:
			r.attemptFailed(m, i, maskPassword(fmt.Sprintf("the BMC's update task ended %s: %s", task.State, task.Message), creds))
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		r.afterFlash(st, target)
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	case expv1.PhaseApplying:
		return r.apply(ctx, m, host, i)
	case expv1.PhaseVerifying:
		v, err := c.FirmwareVersion(ctx, target)
		if err != nil {
			st.Message = "reading the firmware version (the BMC may be restarting): " + bmc.Redact(maskPassword(err.Error(), creds))
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		st.Version = v
		if v == want.Version {
			r.event(m, "Verified", "tasks[%d]: host %s reports %s %s", i, host.Name, f.Component, v)
			r.stepDone(m, i, len(f.Plan))
			return ctrl.Result{RequeueAfter: time.Millisecond}, nil
		}
		if r.Now().Before(st.PhaseStartTime.Add(r.verifyGrace())) {
			st.Message = fmt.Sprintf("the inventory reports %s %s, waiting for %s", f.Component, v, want.Version)
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		r.attemptFailed(m, i, fmt.Sprintf("the BMC's task succeeded but the inventory reports %s %s, not %s", f.Component, v, want.Version))
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	return ctrl.Result{}, nil
}

// afterFlash moves a flashed step on: a BIOS image is applied by a boot, a BMC image by the BMC's
// own restart.
func (r *Reconciler) afterFlash(st *expv1.MaintenanceTaskStatus, target bmc.FirmwareTarget) {
	st.Percent = ptr.To[int32](100)
	if target == bmc.FirmwareBIOS {
		r.enterPhase(st, expv1.PhaseApplying)
		return
	}
	r.enterPhase(st, expv1.PhaseVerifying)
}

// verifyGrace is how long the inventory may keep reporting the old value after an apply.
func (r *Reconciler) verifyGrace() time.Duration {
	if r.VerifyGrace > 0 {
		return r.VerifyGrace
	}
	return DefaultVerifyGrace
}

func (r *Reconciler) stepDone(m *expv1.RedfishMaintenance, i, steps int) {
	st := &m.Status.Tasks[i]
	st.Step++
	st.Message = ""
	if int(st.Step) >= steps {
		r.taskSucceeded(m, i)
		return
	}
	r.startAttempt(st, 1)
}

func (r *Reconciler) taskSucceeded(m *expv1.RedfishMaintenance, i int) {
	st := &m.Status.Tasks[i]
	now := metav1.NewTime(r.Now())
	st.State, st.Phase, st.CompletionTime, st.StepStartTime, st.PhaseStartTime = expv1.TaskSucceeded, "", &now, nil, nil
	st.TaskURI, st.Job, st.Message = "", "", "done"
	r.event(m, "TaskSucceeded", "tasks[%d] (%s) done", i, describeTask(m.Spec.Tasks[i]))
}

// biosStep moves a BIOS-settings task on: stage the attributes (checked again by the BMC layer),
// apply them with a boot into the BIOS setup, verify the attributes read back.
func (r *Reconciler) biosStep(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost, c BMC, i int, s *expv1.BIOSSettings) (ctrl.Result, error) {
	st := &m.Status.Tasks[i]
	attrs, err := Attributes(s)
	if err != nil {
		st.Attempt = retries(m.Spec.Tasks[i]) + 1
		r.attemptFailed(m, i, err.Error())
		return ctrl.Result{}, nil
	}
	switch st.Phase {
	case expv1.PhaseChecking, "":
		if drift := differing(ctx, c, attrs); drift != nil && len(drift) == 0 {
			r.event(m, "Verified", "tasks[%d]: host %s already has the BIOS settings", i, host.Name)
			r.taskSucceeded(m, i)
			return ctrl.Result{RequeueAfter: time.Millisecond}, nil
		}
		err := c.SetBIOSAttributes(ctx, attrs)
		var bad *bmc.UnknownAttributesError
		switch {
		case errors.As(err, &bad), errors.Is(err, bmc.ErrNotSupported):
			st.Attempt = retries(m.Spec.Tasks[i]) + 1
			r.attemptFailed(m, i, err.Error())
			return ctrl.Result{}, nil
		case err != nil:
			st.Message = clip(scrub("staging the BIOS settings: "+bmc.Redact(err.Error()), m.Spec.Tasks[i]))
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		st.Message = fmt.Sprintf("%d attribute(s) staged; booting into the BIOS setup to apply them", len(attrs))
		r.event(m, "BIOSSettingsStaged", "tasks[%d]: %d BIOS attribute(s) staged on host %s (attempt %d)", i, len(attrs), host.Name, st.Attempt)
		r.enterPhase(st, expv1.PhaseApplying)
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	case expv1.PhaseApplying:
		return r.apply(ctx, m, host, i)
	case expv1.PhaseVerifying:
		drift := differing(ctx, c, attrs)
		switch {
		case drift == nil:
			st.Message = "reading the BIOS attributes failed; trying again"
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		case len(drift) == 0:
			r.event(m, "Verified", "tasks[%d]: host %s reports the BIOS settings", i, host.Name)
			r.taskSucceeded(m, i)
			return ctrl.Result{RequeueAfter: time.Millisecond}, nil
		case r.Now().Before(st.PhaseStartTime.Add(r.verifyGrace())):
			st.Message = "waiting for the BMC to report " + strings.Join(drift, ", ")
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		// Values are not shown: some attributes are passwords.
		r.attemptFailed(m, i, "after the reboot the BIOS does not report the value asked for of "+strings.Join(drift, ", "))
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	return ctrl.Result{}, nil
}

// differing lists the attributes whose current value is not the one asked for (sorted); nil when
// the attributes cannot be read.
func differing(ctx context.Context, c BMC, attrs map[string]any) []string {
	cur, err := c.BIOSAttributes(ctx)
	if err != nil {
		return nil
	}
	out := []string{}
	for k, v := range attrs {
		if cv, ok := cur[k]; ok && cv == nil {
			continue // write-only (a password): BMCs read it back as null, nothing to verify
		}
		if !sameValue(cur[k], v) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// sameValue compares attribute values decoded from JSON, where an integer may come as a float.
func sameValue(a, b any) bool {
	fa, okA := toFloat(a)
	fb, okB := toFloat(b)
	if okA || okB {
		return okA && okB && fa == fb
	}
	return a == b
}

func toFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

// apply writes what was staged (a BIOS image, BIOS settings) the way a server does, during POST,
// without starting the host's OS: one RedfishJob powers the host off, sets a one-time boot into
// its BIOS setup, powers it on, waits until it reports its setup screen (BootProgress
// SetupEntered: POST is over; on a BMC that reports no boot progress, SetupWait), and powers it
// off. While the job runs the host controller leaves the power alone (the maintenance's hold
// included), so nothing powers the host off in POST.
func (r *Reconciler) apply(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost, i int) (ctrl.Result, error) {
	st := &m.Status.Tasks[i]
	done, res, err := r.runJob(ctx, m, host, i, "apply", []infrav1.JobTask{
		{Power: infrav1.JobPowerForceOff},
		{BootOnce: infrav1.JobBootTarget("BiosSetup")},
		{Power: infrav1.JobPowerOn},
		{WaitForBootProgress: &infrav1.JobBootProgress{State: string(schemas.SetupEnteredBootProgressTypes), OrAfter: &metav1.Duration{Duration: r.setupWait()}},
			Timeout: &metav1.Duration{Duration: r.setupWait() + 10*time.Minute}},
		{Power: infrav1.JobPowerForceOff},
	})
	if done {
		r.enterPhase(st, expv1.PhaseVerifying)
		st.Message = "applied; verifying"
	}
	return res, err
}

// setupWait is how long a host whose BMC reports no boot progress is left in POST.
func (r *Reconciler) setupWait() time.Duration {
	if r.SetupWait > 0 {
		return r.SetupWait
	}
	return DefaultSetupWait
}

// runJob runs a RedfishJob of the task's current attempt on the host and reports whether it
// completed; a failed job fails the attempt. The job is named after the task, step, retry and
// attempt, so a round that lost its status finds it again, and a retry never reads an old one.
func (r *Reconciler) runJob(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost, i int, kind string, tasks []infrav1.JobTask) (bool, ctrl.Result, error) {
	st := &m.Status.Tasks[i]
	name := jobName(m.Name, i, st.Step, st.Retry, st.Attempt, kind)
	job, err := r.getJob(ctx, m.Namespace, name)
	if apierrors.IsNotFound(err) && st.Job == name {
		// Created by an earlier round and gone since: collected after its TTL (the maintenance
		// was paused, or the gate off, that long) or deleted. It is never created again (it
		// would boot the host once more): the verification decides whether it applied.
		st.Message = "RedfishJob " + name + " is gone (collected after its TTL, or deleted): not created again; the inventory decides"
		r.event(m, "JobGone", "tasks[%d]: RedfishJob %s is gone; not created again, verifying", i, name)
		return true, ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}
	if apierrors.IsNotFound(err) {
		job = &infrav1.RedfishJob{
			ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: name, Labels: map[string]string{JobLabel: names.LabelValue(m.Name)}},
			Spec:       infrav1.RedfishJobSpec{HostName: host.Name, Tasks: tasks},
		}
		if err := controllerutil.SetControllerReference(m, job, r.Client.Scheme()); err != nil {
			return false, ctrl.Result{}, err
		}
		if err := r.Client.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
			st.Message = clip("creating RedfishJob " + name + ": " + err.Error())
			return false, ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		st.Job, st.Message = name, "RedfishJob "+name+" on host "+host.Name
		return false, ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	if err != nil {
		return false, ctrl.Result{}, err
	}
	st.Job = name
	switch {
	case conditions.IsTrue(job, infrav1.JobCompletedCondition):
		return true, ctrl.Result{RequeueAfter: time.Millisecond}, nil
	case conditions.IsTrue(job, infrav1.JobFailedCondition):
		r.attemptFailed(m, i, "RedfishJob "+name+" failed: "+conditions.GetMessage(job, infrav1.JobFailedCondition))
		return false, ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	st.Message = "RedfishJob " + name + " on host " + host.Name
	return false, ctrl.Result{RequeueAfter: 5 * r.PollInterval}, nil // the job's end wakes the maintenance
}

// jobRunning says whether the named job exists and has not finished (true when it cannot be read).
func (r *Reconciler) jobRunning(ctx context.Context, namespace, name string) bool {
	if name == "" {
		return false
	}
	job, err := r.getJob(ctx, namespace, name)
	if err != nil {
		return !apierrors.IsNotFound(err)
	}
	return !job.Finished()
}

// getJob reads a job from the cache, and from the API server when the cache does not have it (yet).
func (r *Reconciler) getJob(ctx context.Context, namespace, name string) (*infrav1.RedfishJob, error) {
	job := &infrav1.RedfishJob{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, job)
	if apierrors.IsNotFound(err) && r.APIReader != nil {
		err = r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, job)
	}
	return job, err
}

func jobName(maintenance string, task int, step, retry, attempt int32, kind string) string {
	return names.Join(maintenance, fmt.Sprintf("t%d-s%d-r%d-a%d-%s", task, step, retry, attempt, kind), 253)
}

// abort stops the tasks: a flash the BMC runs and a job booting the host are waited out, then the
// maintenance fails (reason Aborted), keeping its host out of service until it is deleted.
func (r *Reconciler) abort(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost) ctrl.Result {
	for i := range m.Status.Tasks {
		st := &m.Status.Tasks[i]
		if st.State != expv1.TaskRunning {
			continue
		}
		if busy, what := r.busy(ctx, m, host, i); busy {
			r.waiting(m, AbortedReason, "Aborting: waiting for %s to end (a flash is never cut off)", what)
			return ctrl.Result{RequeueAfter: r.PollInterval}
		}
		now := metav1.NewTime(r.Now())
		st.State, st.CompletionTime, st.Message = expv1.TaskAborted, &now, "aborted in phase "+string(st.Phase)
	}
	r.enter(m, expv1.StageFailed)
	conditions.Set(m, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: AbortedReason,
		Message: "Aborted (spec.abort); host " + host.Name + " stays out of service until this maintenance is deleted"})
	r.event(m, "Aborted", "aborted; host %s stays out of service until the maintenance is deleted", host.Name)
	return ctrl.Result{}
}

// busy says whether the running step of task i has something under way that must not be cut
// off: the job booting the host (until it ends), or a BMC update task (within the phase's
// timeout).
func (r *Reconciler) busy(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost, i int) (bool, string) {
	st := &m.Status.Tasks[i]
	if st.Phase == expv1.PhaseApplying && r.jobRunning(ctx, m.Namespace, st.Job) {
		return true, "RedfishJob " + st.Job // a boot, POST included: ended by the job's own timeouts
	}
	if i >= len(m.Spec.Tasks) || st.PhaseStartTime == nil || !r.Now().Before(st.PhaseStartTime.Add(stepTimeout(m.Spec.Tasks[i]))) {
		return false, "" // past its timeout: not waited for any longer
	}
	if st.Phase != expv1.PhaseFlashing || st.TaskURI == "" {
		return false, ""
	}
	c, ok := r.connectTasks(ctx, m, host)
	if !ok {
		return true, "the BMC's update task " + st.TaskURI
	}
	task, err := c.TaskStatus(ctx, st.TaskURI)
	return err != nil || !task.Done, "the BMC's update task " + st.TaskURI
}

// maxPriorTasks bounds the update tasks a flash intent lists (the newest are kept).
const maxPriorTasks = 256

// resumeFlash picks up a flash whose round lost its outcome (a crash, a lost status write, an
// answer that never came): the update the BMC lists that was not there before the request is
// followed; without one (never received, or finished and forgotten) nothing is sent again: a BIOS
// image is applied by the boot into the BIOS setup (a staged one takes, none leaves the version
// as it was), a BMC's is verified, and the inventory decides; an attempt that did not take is
// tried again as a new attempt.
func (r *Reconciler) resumeFlash(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost, c BMC, i int, intent *infrav1.FlashIntent, target bmc.FirmwareTarget) ctrl.Result {
	st := &m.Status.Tasks[i]
	uri := intent.TaskURI
	if uri == "" {
		tasks, _, err := c.UpdateTasks(ctx)
		if err != nil {
			st.Message = "listing the BMC's update tasks to find the update sent before: " + bmc.Redact(err.Error())
			return ctrl.Result{RequeueAfter: r.PollInterval}
		}
		for _, t := range tasks {
			if !slices.Contains(intent.PriorTasks, t.URI) {
				uri = t.URI
				if t.Running {
					break
				}
			}
		}
	}
	if uri != "" {
		st.TaskURI, st.Percent = uri, ptr.To[int32](0)
		st.Message = fmt.Sprintf("following the update of %s %s sent at %s (its answer was lost)", intent.Component, intent.Version, intent.DecidedAt.UTC().Format(time.RFC3339))
		r.event(m, "FlashResumed", "tasks[%d]: following the update of %s %s on host %s sent before (%s), not sending it again", i, intent.Component, intent.Version, host.Name, uri)
		r.enterPhase(st, expv1.PhaseFlashing)
		return ctrl.Result{RequeueAfter: time.Millisecond}
	}
	if wait := intent.DecidedAt.Add(r.verifyGrace()).Sub(r.Now()); wait > 0 {
		// A BMC may list the task only once it has the image (a pull that takes a while, a push
		// it still processes): nothing is decided before the grace is over.
		st.Message = fmt.Sprintf("waiting for the BMC to list the update of %s %s sent at %s (its answer was lost)", intent.Component, intent.Version, intent.DecidedAt.UTC().Format(time.RFC3339))
		return ctrl.Result{RequeueAfter: min(wait, r.PollInterval)}
	}
	r.event(m, "FlashResumed", "tasks[%d]: the update of %s %s on host %s sent before lists no task on the BMC; not sent again, the inventory decides", i, intent.Component, intent.Version, host.Name)
	r.afterFlash(st, target)
	st.Message = "the update sent before lists no task on the BMC: not sent again; the inventory decides"
	return ctrl.Result{RequeueAfter: time.Millisecond}
}

// refused says whether the BMC answered a request by refusing it (nothing started), as opposed to
// an outcome not known (a timeout, a 5xx, a lost connection).
func refused(err error) bool {
	for _, e := range []error{bmc.ErrConflict, bmc.ErrCircuitOpen, bmc.ErrConnecting, bmc.ErrAuth, bmc.ErrSessionLimit, bmc.ErrNotSupported, bmc.ErrNotSent, bmc.ErrRefused} {
		if errors.Is(err, e) {
			return true
		}
	}
	var re *schemas.Error
	return errors.As(err, &re) && re.HTTPReturnedStatusCode >= 400 && re.HTTPReturnedStatusCode < 500 && re.HTTPReturnedStatusCode != 408
}

// unsettled says why a host is not settled enough for its BMC to restart ("" when it is): a
// BMC-only update waits for a host being provisioned, released, erased or booted into an image.
func unsettled(h *infrav1.RedfishHost) string {
	switch {
	case !h.DeletionTimestamp.IsZero():
		return "it is being deleted"
	case h.Status.State != infrav1.HostStateAvailable && h.Status.State != infrav1.HostStateProvisioned:
		return "it is " + string(h.Status.State)
	case h.Status.Claim != nil && h.Status.Claim.Release:
		return "it is being released"
	case h.Status.State == infrav1.HostStateProvisioned && h.Status.Claim == nil:
		return "it is being released"
	case h.Status.Erase != nil:
		return "its drives are being erased"
	case h.Spec.ServiceBoot != nil || h.Status.ServiceBoot != nil:
		return "it boots a service image"
	}
	return ""
}
