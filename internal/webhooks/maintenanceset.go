package webhooks

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-redfishmaintenanceset,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrastructure.cluster.x-k8s.io,resources=redfishmaintenancesets,verbs=create;update,versions=v1alpha1,name=validation.redfishmaintenanceset.infrastructure.cluster.x-k8s.io,admissionReviewVersions=v1

// MaintenanceSet validates RedfishMaintenanceSets: readable selectors, and a template whose tasks
// a RedfishMaintenance would accept (so no host's maintenance is refused later).
type MaintenanceSet struct{}

// ValidateCreate checks the spec.
func (*MaintenanceSet) ValidateCreate(_ context.Context, s *expv1.RedfishMaintenanceSet) (admission.Warnings, error) {
	return nil, invalidExp("RedfishMaintenanceSet", s.Name, validateSet(s))
}

// ValidateUpdate checks the spec (the template's immutability is a CEL rule of the CRD).
func (*MaintenanceSet) ValidateUpdate(_ context.Context, _, s *expv1.RedfishMaintenanceSet) (admission.Warnings, error) {
	return nil, invalidExp("RedfishMaintenanceSet", s.Name, validateSet(s))
}

// ValidateDelete allows every delete (its maintenances are cancelled with it).
func (*MaintenanceSet) ValidateDelete(context.Context, *expv1.RedfishMaintenanceSet) (admission.Warnings, error) {
	return nil, nil
}

func validateSet(s *expv1.RedfishMaintenanceSet) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if _, err := metav1.LabelSelectorAsSelector(&s.Spec.HostSelector); err != nil {
		errs = append(errs, field.Invalid(spec.Child("hostSelector"), s.Spec.HostSelector, err.Error()))
	}
	if c := s.Spec.Canary; c != nil && c.HostSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(c.HostSelector); err != nil {
			errs = append(errs, field.Invalid(spec.Child("canary", "hostSelector"), c.HostSelector, err.Error()))
		}
	}
	t := s.Spec.Template
	m := &expv1.RedfishMaintenance{Spec: expv1.RedfishMaintenanceSpec{HostName: "host", Reason: t.Reason, Requestor: t.Requestor,
		Policy: t.Policy, Mode: t.Mode, Priority: t.Priority, Tasks: t.Tasks, Timeout: t.Timeout}}
	for _, e := range validateMaintenance(m) {
		e.Field = "spec.template." + e.Field[len("spec."):]
		errs = append(errs, e)
	}
	return errs
}
