package maintenance

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
	hostctrl "github.com/caprf/cluster-api-provider-redfish/controllers/host"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// The host lease (status.lease of the RedfishHost) makes one maintenance at a time the writer of
// a host's firmware and BIOS work. It is taken with the host's resourceVersion as a precondition
// (of two maintenances reading the host free, one write fails) before anything is sent to the BMC,
// carries the flash decided under it before the request goes, and is released only once the BMC
// lists no update running and no job of the holder boots the host. RedfishJobs of others do not
// start while it is held (controllers/job), and the holder starts nothing while a job of another
// runs.

// holds says whether the maintenance holds the host's lease.
func holds(host *infrav1.RedfishHost, m *expv1.RedfishMaintenance) bool {
	l := host.Status.Lease
	return l != nil && l.HolderUID == string(m.UID)
}

// holderRef is how a maintenance is named as a lease holder.
func holderRef(m *expv1.RedfishMaintenance) infrav1.ObjectRef {
	return infrav1.ObjectRef{APIGroup: expv1.GroupVersion.Group, Kind: "RedfishMaintenance", Namespace: m.Namespace, Name: m.Name}
}

// acquire takes the host's lease for the maintenance. It says who holds it when another does
// (describeLease; "": held by m). A lease whose holder is gone (deleted, or re-created under its
// name) is taken over: an update it started that the BMC still runs is waited out before anything
// is sent (firmwareStep).
func (r *Reconciler) acquire(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost) (string, error) {
	if holds(host, m) {
		return "", nil
	}
	if sb := host.Spec.ServiceBoot; sb != nil && sb.Requestor != requestor(m) {
		// Another maintenance's image (a vendor's updater, diagnostics) runs on the host: no
		// flash or BIOS-setup boot under it.
		return "running the image of " + sb.Requestor, nil
	}
	var keep *infrav1.FlashIntent
	if l := host.Status.Lease; l != nil {
		other := &expv1.RedfishMaintenance{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: host.Namespace, Name: l.Holder.Name}, other)
		switch {
		case err == nil && string(other.UID) == l.HolderUID:
			return describeLease(l), nil
		case err != nil && !apierrors.IsNotFound(err):
			return "", err
		}
		if l.Holder.Name == m.Name {
			// This maintenance under a new UID (clusterctl move, a restore): its flash intent
			// still says what it sent.
			keep = l.Flash
		}
	}
	before := host.DeepCopy()
	host.Status.Lease = &infrav1.HostLease{Holder: holderRef(m), HolderUID: string(m.UID), AcquiredAt: metav1.NewTime(r.Now()), Flash: keep}
	if err := r.Client.Status().Patch(ctx, host, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		*host = *before
		return "", err
	}
	r.event(m, "LeaseAcquired", "holds host %s for its firmware and BIOS work", host.Name)
	return "", nil
}

// release gives the host's lease back if the maintenance holds it.
func (r *Reconciler) release(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost) error {
	if host == nil || !holds(host, m) {
		return nil
	}
	before := host.DeepCopy()
	host.Status.Lease = nil
	if err := r.Client.Status().Patch(ctx, host, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		*host = *before
		return err
	}
	r.event(m, "LeaseReleased", "host %s is free for another's firmware and BIOS work", host.Name)
	return nil
}

// releaseConfirmed releases the lease as release does, reading the host from the API server when
// the copy read shows it free: that copy may be behind the lease's write, and the round that
// finds the tasks done is the last to look.
func (r *Reconciler) releaseConfirmed(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost) error {
	if !holds(host, m) {
		fresh := &infrav1.RedfishHost{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(host), fresh); err != nil {
			return client.IgnoreNotFound(err)
		}
		if !holds(fresh, m) {
			return nil
		}
		*host = *fresh
	}
	return r.release(ctx, m, host)
}

// setIntent records (or, nil, clears) the flash decided under the lease, before the request.
func (r *Reconciler) setIntent(ctx context.Context, host *infrav1.RedfishHost, intent *infrav1.FlashIntent) error {
	before := host.DeepCopy()
	host.Status.Lease.Flash = intent
	if err := r.Client.Status().Patch(ctx, host, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		*host = *before
		return err
	}
	return nil
}

// intentOf is the flash the maintenance recorded for the current attempt of task i (nil: none).
func intentOf(host *infrav1.RedfishHost, m *expv1.RedfishMaintenance, i int) *infrav1.FlashIntent {
	if !holds(host, m) || host.Status.Lease.Flash == nil {
		return nil
	}
	f, st := host.Status.Lease.Flash, &m.Status.Tasks[i]
	if int(f.Task) != i || f.Step != st.Step || f.Attempt != st.Attempt || f.Retry != st.Retry {
		return nil
	}
	return f
}

// othersJob names a RedfishJob of the host, not the maintenance's own, that has started and not
// finished ("" when none), read from the API server: a job confirms its start against the lease
// from the API server too, so of a job starting and a lease taken at once one sees the other.
func (r *Reconciler) othersJob(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost) (string, error) {
	jobs := &infrav1.RedfishJobList{}
	if err := r.APIReader.List(ctx, jobs, client.InNamespace(host.Namespace),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector(hostctrl.JobHostField, host.Name)}); err != nil {
		return "", err
	}
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if j.Spec.HostName != host.Name || j.Status.StartTime == nil || j.Finished() {
			continue
		}
		if slices.ContainsFunc(j.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == m.UID }) {
			continue
		}
		return j.Name, nil
	}
	return "", nil
}

// quiet says whether nothing the maintenance started on the host runs any more: no job of its own
// unfinished, and the BMC lists no update running (a BMC that cannot be asked is not quiet). What
// runs otherwise is named.
func (r *Reconciler) quiet(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost) (bool, string) {
	if annotations.HasPaused(host) {
		return false, "the pause of host " + host.Name + " (" + clusterv1.PausedAnnotation + ") to be lifted"
	}
	for _, st := range m.Status.Tasks {
		if r.jobRunning(ctx, m.Namespace, st.Job) {
			return false, "RedfishJob " + st.Job
		}
	}
	if !slices.ContainsFunc(m.Spec.Tasks, func(t expv1.MaintenanceTask) bool { return t.Firmware != nil }) {
		return true, ""
	}
	c, ok := r.connectTasks(ctx, m, host)
	if !ok {
		return false, "an answer from the BMC of host " + host.Name
	}
	tasks, listed, err := c.UpdateTasks(ctx)
	if err != nil {
		return false, "an answer from the BMC of host " + host.Name + " (" + bmc.Redact(err.Error()) + ")"
	}
	for _, t := range tasks {
		if t.Running {
			return false, "the BMC's update task " + t.URI
		}
	}
	if listed {
		return true, ""
	}
	// A BMC without a TaskService: the tasks followed say, and a flash without one is given its
	// phase's timeout.
	for i, st := range m.Status.Tasks {
		if st.State != expv1.TaskRunning || st.Phase != expv1.PhaseFlashing || i >= len(m.Spec.Tasks) {
			continue
		}
		if st.TaskURI == "" {
			if st.PhaseStartTime != nil && r.Now().Before(st.PhaseStartTime.Add(stepTimeout(m.Spec.Tasks[i]))) {
				return false, "the flash of tasks[" + fmt.Sprint(i) + "] (the BMC lists no tasks)"
			}
			continue
		}
		if task, err := c.TaskStatus(ctx, st.TaskURI); err != nil || !task.Done {
			return false, "the BMC's update task " + st.TaskURI
		}
	}
	return true, ""
}

// releaseWhenQuiet releases the lease once nothing the maintenance started runs; it says what it
// waits for ("" once released, or never held).
func (r *Reconciler) releaseWhenQuiet(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost) (string, error) {
	if host == nil || !holds(host, m) {
		return "", nil
	}
	if ok, what := r.quiet(ctx, m, host); !ok {
		return what, nil
	}
	return "", r.release(ctx, m, host)
}

func describeLease(l *infrav1.HostLease) string {
	if l == nil {
		return "free"
	}
	if l.Flash != nil {
		return fmt.Sprintf("held by maintenance %s, flashing %s %s", l.Holder.Name, l.Flash.Component, l.Flash.Version)
	}
	return "held by maintenance " + l.Holder.Name
}
