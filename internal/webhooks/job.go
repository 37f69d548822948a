package webhooks

import (
	"context"
	"fmt"
	"net/url"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// maxJobTaskTimeout bounds a task's timeout: a job is a short operation, not a maintenance.
const maxJobTaskTimeout = 24 * time.Hour

// maxJobTTL bounds how long a finished job is kept.
const maxJobTTL = 30 * 24 * time.Hour

// +kubebuilder:webhook:path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-redfishjob,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrastructure.cluster.x-k8s.io,resources=redfishjobs,verbs=create;update,versions=v1alpha1,name=validation.redfishjob.infrastructure.cluster.x-k8s.io,admissionReviewVersions=v1

// Job validates RedfishJobs: timeouts and TTL in range, and no job on a host serving a Machine
// unless a RedfishMaintenance has it in stage InMaintenance (the controller checks again when the
// job starts). A host that does not exist yet is a warning: the job waits for it.
type Job struct {
	Reader client.Reader
}

// ValidateCreate checks the spec and the host.
func (v *Job) ValidateCreate(ctx context.Context, j *infrav1.RedfishJob) (admission.Warnings, error) {
	if err := invalid("RedfishJob", j.Name, validateJob(j)); err != nil {
		return nil, err
	}
	if v.Reader == nil {
		return nil, nil
	}
	h := &infrav1.RedfishHost{}
	if err := v.Reader.Get(ctx, client.ObjectKey{Namespace: j.Namespace, Name: j.Spec.HostName}, h); err != nil {
		if apierrors.IsNotFound(err) {
			return admission.Warnings{fmt.Sprintf("RedfishHost %s does not exist in namespace %s; the job waits (WaitingForHost) until it does", j.Spec.HostName, j.Namespace)}, nil
		}
		return nil, err
	}
	c := h.Status.Claim
	if c == nil || c.Release {
		return nil, nil
	}
	list := &expv1.RedfishMaintenanceList{}
	if err := v.Reader.List(ctx, list, client.InNamespace(j.Namespace)); err != nil && !meta.IsNoMatchError(err) {
		return nil, err
	}
	for _, m := range list.Items {
		if m.Spec.HostName == h.Name && m.OpensHostToJobs() {
			return nil, nil
		}
	}
	return nil, invalid("RedfishJob", j.Name, field.ErrorList{field.Forbidden(field.NewPath("spec", "hostName"),
		fmt.Sprintf("host %s serves %s %s: a job runs on it only while a RedfishMaintenance has it in stage InMaintenance", h.Name, c.Consumer.Kind, c.Consumer.Name))})
}

// ValidateUpdate: the spec is immutable (the CRD says so); the checks are the same.
func (v *Job) ValidateUpdate(_ context.Context, _, j *infrav1.RedfishJob) (admission.Warnings, error) {
	return nil, invalid("RedfishJob", j.Name, validateJob(j))
}

// ValidateDelete allows every deletion.
func (v *Job) ValidateDelete(context.Context, *infrav1.RedfishJob) (admission.Warnings, error) {
	return nil, nil
}

func validateJob(j *infrav1.RedfishJob) field.ErrorList {
	var errs field.ErrorList
	for i, t := range j.Spec.Tasks {
		path := field.NewPath("spec", "tasks").Index(i)
		if t.Timeout != nil && (t.Timeout.Duration < time.Second || t.Timeout.Duration > maxJobTaskTimeout) {
			errs = append(errs, field.Invalid(path.Child("timeout"), t.Timeout.Duration.String(), "must be at least 1s and at most 24h"))
		}
		if w := t.WaitForBootProgress; w != nil && w.OrAfter != nil {
			limit := 5 * time.Minute // the default task timeout
			if t.Timeout != nil {
				limit = t.Timeout.Duration
			}
			if w.OrAfter.Duration <= 0 || w.OrAfter.Duration >= limit {
				errs = append(errs, field.Invalid(path.Child("waitForBootProgress", "orAfter"), w.OrAfter.Duration.String(), "must be positive and shorter than the task's timeout ("+limit.String()+")"))
			}
		}
		if m := t.InsertMedia; m != nil {
			u, err := url.Parse(m.URL)
			switch {
			case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
				errs = append(errs, field.Invalid(path.Child("insertMedia", "url"), refusedURL(m.URL), "must be an http or https URL with a host"))
			case u.User != nil:
				// The spec is readable by anyone who can read jobs: no credentials in it.
				errs = append(errs, field.Invalid(path.Child("insertMedia", "url"), refusedURL(m.URL), "must not carry credentials (user:password@); serve the image without them, or from a pre-signed URL"))
			}
		}
	}
	if ttl := j.Spec.TTLAfterFinished; ttl != nil && (ttl.Duration < 0 || ttl.Duration > maxJobTTL) {
		errs = append(errs, field.Invalid(field.NewPath("spec", "ttlAfterFinished"), ttl.Duration.String(), "must be between 0 and 720h (30 days)"))
	}
	return errs
}
