// Package job reconciles RedfishJobs: a short list of BMC operations (power, one-time boot,
// virtual media) run once, in order, on one host. Jobs on one host run one at a time, oldest
// first; a host serving a Machine is refused unless a maintenance has it in stage InMaintenance.
// While a job runs, the host controller leaves the host's power alone; finished jobs are deleted
// after their TTL.
package job

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/controllers/host"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/fresh"
	"github.com/caprf/cluster-api-provider-redfish/internal/onepatch"
	"github.com/caprf/cluster-api-provider-redfish/internal/shutdown"
)

// HostField is the field selector the API server offers on RedfishJobs (a selectable field of the
// CRD): the jobs of one host are listed without the namespace's others.
const HostField = host.JobHostField

// Defaults of the API.
const (
	DefaultTaskTimeout = 5 * time.Minute
	DefaultTTL         = time.Hour
)

// Reconciler reconciles RedfishJobs.
type Reconciler struct {
	Client client.Client
	// APIReader reads the host and its maintenances when a job starts: a claim or a maintenance
	// the cache has not seen yet must not let a job disrupt a Machine.
	APIReader client.Reader
	// Connect returns the host's pooled BMC client (the host controller's Connect: one session
	// per BMC, credentials read once per Secret version).
	Connect  func(ctx context.Context, h *infrav1.RedfishHost) (host.BMC, error)
	Recorder events.EventRecorder
	// PollInterval paces the reads of a power transition: the first after a quarter of it, then
	// twice as long each time, at most PollInterval. Default 2s.
	PollInterval time.Duration
	// Now is the clock (tests).
	Now func() time.Time

	// fresh keeps a round from acting on a copy of the job older than the last round's write (a
	// task started over, a reset sent again): see internal/fresh.
	fresh *fresh.Reads
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	if r.PollInterval == 0 {
		r.PollInterval = 2 * time.Second
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	r.fresh = &fresh.Reads{Kind: infrav1.GroupVersion.WithKind("RedfishJob")}
	r.Client = r.fresh.Client(r.Client)
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.RedfishJob{}).
		Named("redfishjob").
		// A job that finishes or goes wakes the next one on its host.
		Watches(&infrav1.RedfishJob{}, handler.EnqueueRequestsFromMapFunc(r.jobsOfSameHost)).
		WithOptions(opts).
		Complete(shutdown.Quiet(r))
}

func (r *Reconciler) jobsOfSameHost(ctx context.Context, o client.Object) []reconcile.Request {
	j, ok := o.(*infrav1.RedfishJob)
	if !ok {
		return nil
	}
	jobs, err := host.JobsOnHost(ctx, r.Client, j.Namespace, j.Spec.HostName)
	if err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, other := range jobs {
		if other.Name != j.Name && !other.Finished() {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: other.Namespace, Name: other.Name}})
		}
	}
	return out
}

// Reconcile runs a job's tasks as far as they go now.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	j := &infrav1.RedfishJob{}
	read := r.APIReader.Get // without SetupWithManager's recording client: the API server only
	if r.fresh != nil {
		read = func(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
			return r.fresh.Get(ctx, r.Client, r.APIReader, key, obj)
		}
	}
	if err := read(ctx, req.NamespacedName, j); err != nil {
		if errors.Is(err, fresh.ErrStale) {
			// The cache catching up with the last write wakes the job; the requeue is for a watch
			// that is down.
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !j.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if j.Finished() {
		if !conditions.IsTrue(j, infrav1.JobCompletedCondition) && !conditions.IsTrue(j, infrav1.JobFailedCondition) {
			return ctrl.Result{}, r.writeOutcome(ctx, j)
		}
		return r.collect(ctx, j)
	}
	if j.Status.StartTime == nil {
		return r.start(ctx, j)
	}
	if !begun(j) && len(j.Status.Tasks) == len(j.Spec.Tasks) {
		before := j.DeepCopy()
		ok, res, err := r.confirm(ctx, j)
		if err != nil || !ok {
			if !equality.Semantic.DeepEqual(before.Status, j.Status) {
				err = errors.Join(err, client.IgnoreNotFound(r.Client.Status().Patch(ctx, j, client.MergeFrom(before))))
			}
			return res, err
		}
	}
	// This controller alone sets the job's conditions, and a round's status, conditions included,
	// is one write (internal/onepatch): the end of a job (its completion time) never lands without
	// its outcome (Completed or Failed), which a maintenance waits for and which a finished job
	// never writes again.
	helper := onepatch.New(j, r.Client).Owning(r.APIReader, infrav1.JobRunningCondition, infrav1.JobCompletedCondition, infrav1.JobFailedCondition)
	defer func() {
		if err := helper.Patch(ctx, j); err != nil {
			retErr = errors.Join(retErr, err)
		}
	}()
	if len(j.Status.Tasks) != len(j.Spec.Tasks) {
		r.fail(j, infrav1.JobTaskFailedReason, "status.tasks (%d) no longer matches spec.tasks (%d): the status was edited; create another job", len(j.Status.Tasks), len(j.Spec.Tasks))
		return ctrl.Result{}, nil
	}
	h := &infrav1.RedfishHost{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: j.Namespace, Name: j.Spec.HostName}, h); err != nil {
		if apierrors.IsNotFound(err) {
			r.fail(j, infrav1.JobHostNotFoundReason, "RedfishHost %s was deleted while the job ran", j.Spec.HostName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if annotations.HasPaused(h) {
		// Nothing reaches a paused host's BMC: the job resumes where it stood once the
		// annotation goes (a task's deadline may have passed by then).
		conditions.Set(j, metav1.Condition{Type: infrav1.JobRunningCondition, Status: metav1.ConditionTrue, Reason: infrav1.JobRunningReason,
			Message: fmt.Sprintf("Host %s is paused (%s): nothing is sent to its BMC until the annotation goes", h.Name, clusterv1.PausedAnnotation)})
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	return r.run(ctx, j, h)
}

// begun says whether a task of the job has started (talked to the BMC).
func begun(j *infrav1.RedfishJob) bool {
	return slices.ContainsFunc(j.Status.Tasks, func(t infrav1.JobTaskStatus) bool { return t.State != infrav1.JobTaskPending })
}

// start takes the host for the job, from what the cache says: the first unfinished job of the host,
// on a settled host no Machine uses outside a maintenance. The start is written (with the
// resourceVersion read) before any task runs; the next round confirms it from the API server.
func (r *Reconciler) start(ctx context.Context, j *infrav1.RedfishJob) (ctrl.Result, error) {
	before := j.DeepCopy()
	res, started, err := r.admit(ctx, j)
	if err != nil {
		return ctrl.Result{}, err
	}
	if equality.Semantic.DeepEqual(before.Status, j.Status) {
		return res, nil // still waiting, for the same reason
	}
	opts := []client.MergeFromOption{}
	if started {
		opts = append(opts, client.MergeFromWithOptimisticLock{})
	}
	if err := r.Client.Status().Patch(ctx, j, client.MergeFromWithOptions(before, opts...)); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err) // a conflict: read again
	}
	return res, nil
}

func (r *Reconciler) admit(ctx context.Context, j *infrav1.RedfishJob) (ctrl.Result, bool, error) {
	jobs, err := host.JobsOnHost(ctx, r.Client, j.Namespace, j.Spec.HostName)
	if err != nil {
		return ctrl.Result{}, false, err
	}
	h := &infrav1.RedfishHost{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: j.Namespace, Name: j.Spec.HostName}, h); err != nil {
		if apierrors.IsNotFound(err) {
			r.waiting(j, infrav1.JobWaitingForHostReason, "RedfishHost %s does not exist in namespace %s", j.Spec.HostName, j.Namespace)
			return ctrl.Result{RequeueAfter: 10 * r.PollInterval}, false, nil
		}
		return ctrl.Result{}, false, err
	}
	if ahead := first(jobs); ahead != nil && ahead.Name != j.Name && (ahead.Status.StartTime != nil || !leaseHolders(h, j)) {
		// The job of the host's lease holder (a maintenance applying a BIOS image) goes before
		// the jobs waiting in line: they wait for the lease, which waits for it.
		r.waiting(j, infrav1.JobWaitingForJobReason, "Waiting for job %s, ahead of it on host %s", ahead.Name, j.Spec.HostName)
		return ctrl.Result{}, false, nil // its end wakes this one
	}
	if ok, res, err := r.hostUsable(ctx, j, h); !ok || err != nil {
		return res, false, err
	}
	now := metav1.NewMicroTime(r.Now())
	j.Status.StartTime = &now
	j.Status.Tasks = make([]infrav1.JobTaskStatus, len(j.Spec.Tasks))
	for i := range j.Status.Tasks {
		j.Status.Tasks[i].State = infrav1.JobTaskPending
	}
	conditions.Set(j, metav1.Condition{Type: infrav1.JobRunningCondition, Status: metav1.ConditionTrue, Reason: infrav1.JobRunningReason,
		Message: fmt.Sprintf("Running %d tasks on host %s", len(j.Spec.Tasks), h.Name)})
	return ctrl.Result{}, true, nil
}

// hostUsable fails the job on a host a Machine uses outside a maintenance, and makes it wait for a
// host that is not settled.
func (r *Reconciler) hostUsable(ctx context.Context, j *infrav1.RedfishJob, h *infrav1.RedfishHost) (bool, ctrl.Result, error) {
	if msg, err := r.inUse(ctx, h); err != nil {
		return false, ctrl.Result{}, err
	} else if msg != "" {
		r.fail(j, infrav1.JobHostInUseReason, "%s", msg)
		return false, ctrl.Result{}, nil
	}
	if annotations.HasPaused(h) {
		r.waiting(j, infrav1.JobWaitingForHostReason, "Host %s is paused (%s): nothing is sent to its BMC until the annotation goes", h.Name, clusterv1.PausedAnnotation)
		return false, ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	if l := h.Status.Lease; l != nil && !leaseHolders(h, j) {
		// A maintenance flashes, stages or boots the host: one writer at a time.
		r.waiting(j, infrav1.JobWaitingForHostReason, "Host %s is leased to %s %s for its firmware and BIOS work: the job starts once the lease is released", h.Name, l.Holder.Kind, l.Holder.Name)
		return false, ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	if s := h.Status.State; (s != infrav1.HostStateAvailable && s != infrav1.HostStateProvisioned) || !h.DeletionTimestamp.IsZero() {
		r.waiting(j, infrav1.JobWaitingForHostReason, "Host %s is %s: a job starts on an Available host (or a Provisioned one in maintenance)", h.Name, stateName(h))
		return false, ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	if c := h.Status.Claim; (c != nil && c.Release) || (h.Status.State == infrav1.HostStateProvisioned && c == nil) {
		// Being released: the host controller powers it off and starts its erase in the round
		// that reads the release, before it writes the state (an Available host too, claimed and
		// released before its controller saw the claim).
		r.waiting(j, infrav1.JobWaitingForHostReason, "Host %s is being released: a job starts on an Available host (or a Provisioned one in maintenance)", h.Name)
		return false, ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	return true, ctrl.Result{}, nil
}

// confirm checks a started job's hold on its host from the API server, before its first task: of
// two jobs of one host that both started (each from a cache without the other's start), the one
// that started first keeps the host, the other goes back to waiting; and the host must still be
// usable (no claim made since, not deleted).
func (r *Reconciler) confirm(ctx context.Context, j *infrav1.RedfishJob) (bool, ctrl.Result, error) {
	all := &infrav1.RedfishJobList{}
	if err := r.APIReader.List(ctx, all, client.InNamespace(j.Namespace),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector(HostField, j.Spec.HostName)}); err != nil {
		return false, ctrl.Result{}, err
	}
	for i := range all.Items {
		o := &all.Items[i]
		if o.Name == j.Name || o.Spec.HostName != j.Spec.HostName || o.Finished() || o.Status.StartTime == nil {
			continue
		}
		if o.Status.StartTime.Before(j.Status.StartTime) || (o.Status.StartTime.Equal(j.Status.StartTime) && o.Name < j.Name) {
			j.Status.StartTime, j.Status.Tasks = nil, nil
			r.waiting(j, infrav1.JobWaitingForJobReason, "Waiting for job %s, which took host %s first", o.Name, j.Spec.HostName)
			return false, ctrl.Result{}, nil
		}
	}
	h := &infrav1.RedfishHost{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: j.Namespace, Name: j.Spec.HostName}, h); err != nil {
		if apierrors.IsNotFound(err) {
			r.fail(j, infrav1.JobHostNotFoundReason, "RedfishHost %s was deleted", j.Spec.HostName)
			return false, ctrl.Result{}, nil
		}
		return false, ctrl.Result{}, err
	}
	ok, res, err := r.hostUsable(ctx, j, h)
	if !ok && !j.Finished() {
		j.Status.StartTime, j.Status.Tasks = nil, nil // back to waiting
	}
	return ok, res, err
}

// inUse says why a job may not touch the host: it serves a Machine, and no maintenance has it in
// stage InMaintenance (its Machine drained, or held for the work).
func (r *Reconciler) inUse(ctx context.Context, h *infrav1.RedfishHost) (string, error) {
	c := h.Status.Claim
	if c == nil || c.Release {
		return "", nil
	}
	list := &expv1.RedfishMaintenanceList{}
	if err := r.APIReader.List(ctx, list, client.InNamespace(h.Namespace)); err != nil && !meta.IsNoMatchError(err) {
		return "", fmt.Errorf("listing maintenances: %w", err)
	}
	for _, m := range list.Items {
		if m.Spec.HostName == h.Name && m.OpensHostToJobs() {
			return "", nil
		}
	}
	return fmt.Sprintf("Host %s serves %s %s: a job runs on it only while a RedfishMaintenance has it in stage InMaintenance", h.Name, c.Consumer.Kind, c.Consumer.Name), nil
}

func stateName(h *infrav1.RedfishHost) string {
	if !h.DeletionTimestamp.IsZero() {
		return "being deleted"
	}
	if h.Status.State == "" {
		return string(infrav1.HostStateRegistering)
	}
	return string(h.Status.State)
}

// writeOutcome gives a job that ended without its outcome the one its tasks tell: its completion
// time landed without its conditions (a split write: CAPI's patch helper, still used where a job
// holds a condition this controller does not own, writes them apart). A maintenance waits for
// Completed or Failed; a finished job is never run again. Nothing is sent to the BMC, and the
// completion time, which the TTL counts from, stays.
func (r *Reconciler) writeOutcome(ctx context.Context, j *infrav1.RedfishJob) error {
	helper := onepatch.New(j, r.Client).Owning(r.APIReader, infrav1.JobRunningCondition, infrav1.JobCompletedCondition, infrav1.JobFailedCondition)
	end := j.Status.CompletionTime
	failed := slices.IndexFunc(j.Status.Tasks, func(t infrav1.JobTaskStatus) bool { return t.State == infrav1.JobTaskFailed })
	succeeded := len(j.Status.Tasks) == len(j.Spec.Tasks) && !slices.ContainsFunc(j.Status.Tasks, func(t infrav1.JobTaskStatus) bool { return t.State != infrav1.JobTaskSucceeded })
	switch {
	case failed >= 0 && failed < len(j.Spec.Tasks):
		r.fail(j, infrav1.JobTaskFailedReason, "Task %d (%s) failed: %s", failed, describe(j.Spec.Tasks[failed]), j.Status.Tasks[failed].Message)
	case succeeded && j.Status.StartTime != nil:
		r.complete(j)
	default:
		r.fail(j, infrav1.JobTaskFailedReason, "the job ended (status.completionTime) with its tasks unfinished")
	}
	j.Status.CompletionTime = end
	return helper.Patch(ctx, j)
}

// collect deletes a finished job once its TTL has passed.
func (r *Reconciler) collect(ctx context.Context, j *infrav1.RedfishJob) (ctrl.Result, error) {
	ttl := DefaultTTL
	if j.Spec.TTLAfterFinished != nil {
		ttl = j.Spec.TTLAfterFinished.Duration
	}
	if left := j.Status.CompletionTime.Add(ttl).Sub(r.Now()); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Delete(ctx, j, client.Preconditions{UID: &j.UID}))
}

// waiting says why a job has not started.
func (r *Reconciler) waiting(j *infrav1.RedfishJob, reason, format string, args ...any) {
	conditions.Set(j, metav1.Condition{Type: infrav1.JobRunningCondition, Status: metav1.ConditionFalse, Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// fail ends the job: Failed True with the reason, Running False.
func (r *Reconciler) fail(j *infrav1.RedfishJob, reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	now := metav1.NewMicroTime(r.Now())
	j.Status.CompletionTime = &now
	conditions.Set(j, metav1.Condition{Type: infrav1.JobFailedCondition, Status: metav1.ConditionTrue, Reason: reason, Message: msg})
	conditions.Set(j, metav1.Condition{Type: infrav1.JobCompletedCondition, Status: metav1.ConditionFalse, Reason: reason, Message: msg})
	conditions.Set(j, metav1.Condition{Type: infrav1.JobRunningCondition, Status: metav1.ConditionFalse, Reason: infrav1.JobFinishedReason, Message: msg})
	r.event(j, corev1.EventTypeWarning, "Failed", "%s", msg)
}

// complete ends the job successfully.
func (r *Reconciler) complete(j *infrav1.RedfishJob) {
	now := metav1.NewMicroTime(r.Now())
	j.Status.CompletionTime = &now
	msg := fmt.Sprintf("%d tasks done on host %s in %s", len(j.Spec.Tasks), j.Spec.HostName, now.Sub(j.Status.StartTime.Time).Round(10*time.Millisecond))
	conditions.Set(j, metav1.Condition{Type: infrav1.JobCompletedCondition, Status: metav1.ConditionTrue, Reason: infrav1.JobSucceededReason, Message: msg})
	conditions.Set(j, metav1.Condition{Type: infrav1.JobFailedCondition, Status: metav1.ConditionFalse, Reason: infrav1.JobSucceededReason})
	conditions.Set(j, metav1.Condition{Type: infrav1.JobRunningCondition, Status: metav1.ConditionFalse, Reason: infrav1.JobFinishedReason, Message: msg})
	r.event(j, corev1.EventTypeNormal, "Completed", "%s", msg)
}

func (r *Reconciler) event(j *infrav1.RedfishJob, kind, reason, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(j, nil, kind, reason, "Job", format, args...)
	}
}

// first is the job of a host that runs next (or now): the running one, else the oldest unfinished
// one (then by name).
func first(jobs []infrav1.RedfishJob) *infrav1.RedfishJob {
	var out *infrav1.RedfishJob
	for i := range jobs {
		j := &jobs[i]
		if j.Finished() || !j.DeletionTimestamp.IsZero() {
			continue
		}
		if j.Status.StartTime != nil {
			return j
		}
		if out == nil || j.CreationTimestamp.Before(&out.CreationTimestamp) ||
			(j.CreationTimestamp.Equal(&out.CreationTimestamp) && j.Name < out.Name) {
			out = j
		}
	}
	return out
}

// leaseHolders says whether the job belongs to the holder of its host's lease.
func leaseHolders(h *infrav1.RedfishHost, j *infrav1.RedfishJob) bool {
	l := h.Status.Lease
	return l != nil && slices.ContainsFunc(j.OwnerReferences, func(o metav1.OwnerReference) bool { return string(o.UID) == l.HolderUID })
}
