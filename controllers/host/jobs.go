package host

import (
	"context"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"

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
	return slices.ContainsFunc(jobs, func(j infrav1.RedfishJob) bool { return j.Status.StartTime != nil && !j.Finished() })
}

// jobRunning says whether a RedfishJob runs on the host: the host controller then leaves its power
// alone (the job's end wakes the host, which then restores the power it wants).
func (r *Reconciler) jobRunning(ctx context.Context, h *infrav1.RedfishHost) (bool, error) {
	jobs, err := JobsOnHost(ctx, r.Client, h.Namespace, h.Name)
	if err != nil {
		return false, err
	}
	return JobRunning(jobs), nil
}
