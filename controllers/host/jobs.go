package host

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// JobHostIndex indexes RedfishJobs by spec.hostName (registered by the host controller).
const JobHostIndex = "redfishjob.spec.hostName"

// IndexJobHost is the JobHostIndex function.
func IndexJobHost(o client.Object) []string {
	if j, ok := o.(*infrav1.RedfishJob); ok {
		return []string{j.Spec.HostName}
	}
	return nil
}

// JobsOnHost lists the RedfishJobs of a host from a reader with JobHostIndex.
func JobsOnHost(ctx context.Context, reader client.Reader, namespace, hostName string) ([]infrav1.RedfishJob, error) {
	list := &infrav1.RedfishJobList{}
	if err := reader.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{JobHostIndex: hostName}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// JobRunning says whether one of the jobs runs now (started, not finished).
func JobRunning(jobs []infrav1.RedfishJob) bool {
	return slices.ContainsFunc(jobs, func(j infrav1.RedfishJob) bool { return runs(&j) })
}

// runs says whether the job runs now: started, not finished.
func runs(j *infrav1.RedfishJob) bool { return j.Status.StartTime != nil && !j.Finished() }

// jobChanges are the RedfishJob events that wake the job's host: a job that ends, goes, or goes
// back to waiting without finishing (its start confirmed against a release made meanwhile). A
// job's start needs no host round.
var jobChanges = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		before, ok1 := e.ObjectOld.(*infrav1.RedfishJob)
		after, ok2 := e.ObjectNew.(*infrav1.RedfishJob)
		return !ok1 || !ok2 || before.Finished() != after.Finished() || (runs(before) && !runs(after))
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// JobHostField is the field selector the API server offers on RedfishJobs (a selectable field of
// the CRD): the jobs of one host are listed without the namespace's others.
const JobHostField = "spec.hostName"

// jobRunning says whether a RedfishJob runs on the host: the host controller then leaves its power
// alone (the job's end wakes the host, which then restores the power it wants). what names the
// work the job holds, for the event that says so.
func (r *Reconciler) jobRunning(ctx context.Context, h *infrav1.RedfishHost, what string) (bool, error) {
	jobs, err := JobsOnHost(ctx, r.Client, h.Namespace, h.Name)
	if err != nil {
		return false, err
	}
	return r.heldBy(h, jobs, what), nil
}

// heldBy says whether one of the jobs of h runs now, and names it in an event on the host (reason
// WaitingForJob, the job as related object, what waits): the host's status does not change while
// a job holds it.
func (r *Reconciler) heldBy(h *infrav1.RedfishHost, jobs []infrav1.RedfishJob, what string) bool {
	if l := h.Status.Lease; l != nil {
		// A maintenance flashes, stages or boots the host through its BMC (a BMC restarting into
		// new firmware, a BIOS image being written): the host's own BMC work waits for the lease
		// to be released, which wakes the host.
		if r.Recorder != nil {
			r.Recorder.Eventf(h, nil, corev1.EventTypeNormal, WaitingForLeaseReason, "Wait", "%s %s holds this host's lease for its firmware and BIOS work: its %s waits for the lease's release", l.Holder.Kind, l.Holder.Name, what)
		}
		return true
	}
	for i := range jobs {
		if j := &jobs[i]; j.Spec.HostName == h.Name && runs(j) {
			if r.Recorder != nil {
				r.Recorder.Eventf(h, j, corev1.EventTypeNormal, WaitingForJobReason, "Wait", "RedfishJob %s runs on this host: its %s waits for the job's end", j.Name, what)
			}
			return true
		}
	}
	return false
}

// WaitingForJobReason is the reason of the event a host records while a RedfishJob holds it.
const WaitingForJobReason = "WaitingForJob"

// WaitingForLeaseReason is the reason of the event a host records while a maintenance's lease
// holds its work.
const WaitingForLeaseReason = "WaitingForLease"

// claimWork names what a claim asks of the host: its provisioning, or its release.
func claimWork(c *infrav1.HostClaim) string {
	switch {
	case c == nil:
		return "release"
	case c.Release:
		return "release for " + c.Consumer.Kind + " " + c.Consumer.Name
	default:
		return "provisioning for " + c.Consumer.Kind + " " + c.Consumer.Name
	}
}

// stateWork names what a host in a state other than Available does on its BMC.
func stateWork(h *infrav1.RedfishHost) string {
	switch c := h.Status.Claim; {
	case stateOf(h) == infrav1.HostStateProvisioned && c != nil && !c.Release:
		return "power for " + c.Consumer.Kind + " " + c.Consumer.Name
	case stateOf(h) == infrav1.HostStateProvisioning, stateOf(h) == infrav1.HostStateProvisioned:
		return claimWork(c)
	default:
		return strings.ToLower(string(stateOf(h)))
	}
}

// jobRunningNow is jobRunning read from the API server, for the round that sees a claim made or
// released and is about to act on the BMC for it. A job confirms its start by reading the host
// from the API server after writing it: a job that saw neither the claim nor the release started
// before that write, so the API server shows it running here, even when the cache does not yet.
//
// An API server that refuses the field selector (older than Kubernetes v1.31, or the
// CustomResourceFieldSelectors feature off) lists the namespace's jobs instead: hosts must still
// provision and release there.
func (r *Reconciler) jobRunningNow(ctx context.Context, h *infrav1.RedfishHost, what string) (bool, error) {
	list := &infrav1.RedfishJobList{}
	err := r.APIReader.List(ctx, list, client.InNamespace(h.Namespace),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector(JobHostField, h.Name)})
	if apierrors.IsBadRequest(err) {
		err = r.APIReader.List(ctx, list, client.InNamespace(h.Namespace))
	}
	if err != nil {
		return false, fmt.Errorf("listing the host's RedfishJobs: %w", err)
	}
	return r.heldBy(h, list.Items, what), nil
}
