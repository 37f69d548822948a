package webhooks

import (
	"context"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/exp/controllers/maintenance"
)

// +kubebuilder:webhook:path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-redfishmaintenance,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrastructure.cluster.x-k8s.io,resources=redfishmaintenances,verbs=create;update,versions=v1alpha1,name=validation.redfishmaintenance.infrastructure.cluster.x-k8s.io,admissionReviewVersions=v1

// Maintenance validates RedfishMaintenances: well-formed tasks, a positive timeout, and the
// host, policy and mode fixed once created. A host that does not exist yet is a warning (GitOps
// tools may apply the maintenance first); the maintenance waits with HostNotFound.
type Maintenance struct {
	Reader client.Reader
}

// ValidateCreate checks the spec.
func (v *Maintenance) ValidateCreate(ctx context.Context, m *expv1.RedfishMaintenance) (admission.Warnings, error) {
	errs := validateMaintenance(m)
	if limit := 253 - len(maintenance.RequestorPrefix); len(m.Name) > limit {
		// Its power hold on the host is a reboot request named maintenance/<name> (at most 253).
		errs = append(errs, field.TooLong(field.NewPath("metadata", "name"), m.Name, limit))
	}
	if err := invalidExp("RedfishMaintenance", m.Name, errs); err != nil {
		return nil, err
	}
	var warnings admission.Warnings
	if v.Reader != nil {
		err := v.Reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.HostName}, &infrav1.RedfishHost{})
		if apierrors.IsNotFound(err) {
			warnings = append(warnings, fmt.Sprintf("RedfishHost %s does not exist in namespace %s; the maintenance waits (HostNotFound) until it does", m.Spec.HostName, m.Namespace))
		}
		if err := conflictingMode(ctx, v.Reader, m); err != nil {
			return warnings, err
		}
	}
	return warnings, nil
}

// conflictingMode refuses a maintenance whose mode contradicts one that is under way on the same
// host: Reuse gives the host back to its Machine's owner, Replace does not. Only the host's
// maintenances are read (the CRD's selectable field spec.hostName): a hundred maintenances
// created at once would otherwise each read every other from the API server. An API server that
// refuses the selector (older than Kubernetes v1.31, CustomResourceFieldSelectors off, the CRD not
// yet updated) is asked for the namespace's maintenances instead: creates must not stop there.
func conflictingMode(ctx context.Context, reader client.Reader, m *expv1.RedfishMaintenance) error {
	list := &expv1.RedfishMaintenanceList{}
	err := reader.List(ctx, list, client.InNamespace(m.Namespace),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector(maintenance.HostField, m.Spec.HostName)})
	if apierrors.IsBadRequest(err) {
		err = reader.List(ctx, list, client.InNamespace(m.Namespace))
	}
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("listing maintenances: %w", err))
	}
	mode := m.Spec.Mode
	if mode == "" {
		mode = expv1.Replace
	}
	for _, o := range list.Items {
		other := o.Spec.Mode
		if other == "" {
			other = expv1.Replace
		}
		if o.Spec.HostName == m.Spec.HostName && o.Name != m.Name && o.Status.Stage.Active() && o.DeletionTimestamp.IsZero() && other != mode {
			return invalidExp("RedfishMaintenance", m.Name, field.ErrorList{field.Invalid(field.NewPath("spec", "mode"), string(mode),
				fmt.Sprintf("maintenance %s of host %s is under way in mode %s: a second maintenance of the host must use the same mode (or wait until it ends)", o.Name, m.Spec.HostName, other))})
		}
	}
	return nil
}

// ValidateUpdate checks the spec and refuses to change what the handshake was agreed on.
func (v *Maintenance) ValidateUpdate(_ context.Context, old, m *expv1.RedfishMaintenance) (admission.Warnings, error) {
	if !m.DeletionTimestamp.IsZero() {
		return nil, nil // going away: its finalizer must come off whatever rules came since
	}
	checked := m
	if reflect.DeepEqual(old.Spec.Tasks, m.Spec.Tasks) {
		// Unchanged tasks were admitted once: rules added since do not lock the object (its
		// spec.abort, spec.retry and spec.complete stay writable after an upgrade).
		checked = m.DeepCopy()
		checked.Spec.Tasks = nil
	}
	errs := validateMaintenance(checked)
	spec := field.NewPath("spec")
	if old.Spec.HostName != m.Spec.HostName {
		errs = append(errs, field.Forbidden(spec.Child("hostName"), "is immutable: create another maintenance for another host"))
	}
	if old.Spec.Policy != m.Spec.Policy {
		errs = append(errs, field.Forbidden(spec.Child("policy"), "is immutable: an approval was given (or not) for this policy"))
	}
	if old.Spec.Mode != m.Spec.Mode {
		errs = append(errs, field.Forbidden(spec.Child("mode"), "is immutable"))
	}
	// The work announced is the work approved and done: changing it mid-way would, e.g., end an
	// image task without its wind-down.
	if st := old.Status.Stage; st != "" && st != expv1.StagePending && !reflect.DeepEqual(old.Spec.Tasks, m.Spec.Tasks) {
		errs = append(errs, field.Forbidden(spec.Child("tasks"), fmt.Sprintf("are fixed once the maintenance is announced (it is %s): create another maintenance for other work", st)))
	}
	return nil, invalidExp("RedfishMaintenance", m.Name, errs)
}

// ValidateDelete allows every delete (a deleted maintenance is cancelled).
func (v *Maintenance) ValidateDelete(context.Context, *expv1.RedfishMaintenance) (admission.Warnings, error) {
	return nil, nil
}

func validateMaintenance(m *expv1.RedfishMaintenance) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	held, images := 0, 0
	for i, t := range m.Spec.Tasks {
		path := spec.Child("tasks").Index(i)
		set := 0
		for _, p := range []bool{t.PowerOffAndHold != nil, t.BootImage != nil, t.Firmware != nil, t.BIOSSettings != nil} {
			if p {
				set++
			}
		}
		switch {
		case set != 1:
			errs = append(errs, field.Required(path, "set exactly one task (powerOffAndHold, bootImage, firmware or biosSettings)"))
		case t.PowerOffAndHold != nil:
			held++
		case t.BootImage != nil:
			images++
			if u, err := url.Parse(t.BootImage.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				errs = append(errs, field.Invalid(path.Child("bootImage", "url"), refusedURL(t.BootImage.URL), "must be an http or https URL the BMC can reach"))
			}
		case t.Firmware != nil:
			errs = append(errs, validateFirmware(path.Child("firmware"), t.Firmware)...)
		default:
			if _, err := maintenance.Attributes(t.BIOSSettings); err != nil {
				errs = append(errs, field.Invalid(path.Child("biosSettings", "attributes"), "", err.Error()))
			}
			if d := t.BIOSSettings.Timeout; d != nil && (d.Duration < time.Minute || d.Duration > 24*time.Hour) {
				errs = append(errs, field.Invalid(path.Child("biosSettings", "timeout"), d.Duration.String(), "must be between 1m (an attempt boots the host) and 24h"))
			}
		}
	}
	if held+images > 1 {
		errs = append(errs, field.Invalid(spec.Child("tasks"), len(m.Spec.Tasks), "a host cannot be held powered off and run an image at once, nor run two images: use one of powerOffAndHold and bootImage (or another maintenance)"))
	}
	if m.Spec.TTLAfterCompleted != nil && m.Spec.TTLAfterCompleted.Duration < 0 {
		errs = append(errs, field.Invalid(spec.Child("ttlAfterCompleted"), m.Spec.TTLAfterCompleted.Duration.String(), "must not be negative (0 deletes it as soon as it completed; leave it out to keep it)"))
	}
	if m.Spec.Timeout != nil && m.Spec.Timeout.Duration <= 0 {
		errs = append(errs, field.Invalid(spec.Child("timeout"), m.Spec.Timeout.Duration.String(), "must be positive (leave it out for no timeout)"))
	}
	return errs
}

// validateFirmware checks an upgrade plan: http(s) image URLs without credentials in them (the
// Secret carries those), each version once.
func validateFirmware(path *field.Path, f *expv1.FirmwareUpdate) field.ErrorList {
	var errs field.ErrorList
	if len(f.Plan) == 0 {
		errs = append(errs, field.Required(path.Child("plan"), "list at least one version"))
	}
	seen := map[string]bool{}
	for j, v := range f.Plan {
		p := path.Child("plan").Index(j)
		u, err := url.Parse(v.ImageURL)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			errs = append(errs, field.Invalid(p.Child("imageURL"), refusedURL(v.ImageURL), "must be an http or https URL the BMC can reach"))
		case u.User != nil:
			errs = append(errs, field.Invalid(p.Child("imageURL"), refusedURL(v.ImageURL), "must not carry credentials: put them in the Secret named by imageCredentialsSecretName"))
		case f.ImageCredentialsSecretName != "" && u.Scheme != "https":
			errs = append(errs, field.Invalid(p.Child("imageURL"), refusedURL(v.ImageURL), "must be https when imageCredentialsSecretName is set: the credentials would cross the network in clear"))
		}
		if seen[v.Version] {
			errs = append(errs, field.Duplicate(p.Child("version"), v.Version))
		}
		seen[v.Version] = true
	}
	if d := f.StepTimeout; d != nil && (d.Duration < time.Minute || d.Duration > 24*time.Hour) {
		errs = append(errs, field.Invalid(path.Child("stepTimeout"), d.Duration.String(), "must be between 1m (a step flashes and boots the host) and 24h"))
	}
	return errs
}

// +kubebuilder:webhook:path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-redfishmaintenancepolicy,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrastructure.cluster.x-k8s.io,resources=redfishmaintenancepolicies,verbs=create;update,versions=v1alpha1,name=validation.redfishmaintenancepolicy.infrastructure.cluster.x-k8s.io,admissionReviewVersions=v1

// MaintenancePolicy validates RedfishMaintenancePolicies: readable windows, and budgets that let
// a maintenance start at all.
type MaintenancePolicy struct{}

// ValidateCreate checks the spec.
func (*MaintenancePolicy) ValidateCreate(_ context.Context, p *expv1.RedfishMaintenancePolicy) (admission.Warnings, error) {
	return nil, invalidExp("RedfishMaintenancePolicy", p.Name, validatePolicy(p))
}

// ValidateUpdate checks the spec.
func (*MaintenancePolicy) ValidateUpdate(_ context.Context, _, p *expv1.RedfishMaintenancePolicy) (admission.Warnings, error) {
	return nil, invalidExp("RedfishMaintenancePolicy", p.Name, validatePolicy(p))
}

// ValidateDelete allows every delete.
func (*MaintenancePolicy) ValidateDelete(context.Context, *expv1.RedfishMaintenancePolicy) (admission.Warnings, error) {
	return nil, nil
}

func validatePolicy(p *expv1.RedfishMaintenancePolicy) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if p.Spec.ClusterSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(p.Spec.ClusterSelector); err != nil {
			errs = append(errs, field.Invalid(spec.Child("clusterSelector"), p.Spec.ClusterSelector, err.Error()))
		}
	}
	if p.Spec.HostSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(p.Spec.HostSelector); err != nil {
			errs = append(errs, field.Invalid(spec.Child("hostSelector"), p.Spec.HostSelector, err.Error()))
		}
	}
	for i, w := range p.Spec.Windows {
		path := spec.Child("windows").Index(i)
		if _, _, err := maintenance.ParseWindow(w); err != nil {
			f := "start"
			if strings.HasPrefix(err.Error(), "timeZone") {
				f = "timeZone"
			}
			errs = append(errs, field.Invalid(path.Child(f), map[string]string{"start": w.Start, "timeZone": w.TimeZone}[f], err.Error()))
		}
		if w.Duration.Duration <= 0 {
			errs = append(errs, field.Invalid(path.Child("duration"), w.Duration.Duration.String(), "must be positive"))
		}
	}
	for name, v := range map[string]*intstr.IntOrString{"maxUnavailable": p.Spec.MaxUnavailable, "maxParallel": p.Spec.MaxParallel} {
		if v == nil {
			continue
		}
		if n, err := intstr.GetScaledValueFromIntOrPercent(v, 100, false); err != nil || n < 0 {
			errs = append(errs, field.Invalid(spec.Child(name), v.String(), "must be a non-negative integer or a percentage such as 10%"))
		} else if n == 0 {
			errs = append(errs, field.Invalid(spec.Child(name), v.String(), "0 lets no maintenance ever start on the selected hosts; use at least 1 (or 1%), or delete the maintenances instead"))
		}
	}
	return errs
}

// approvalsExist refuses an approval, newly added to a RedfishMachine, of a maintenance that does
// not exist (by name and UID) in its namespace.
func approvalsExist(ctx context.Context, reader client.Reader, old, m *infrav1.RedfishMachine) field.ErrorList {
	var errs field.ErrorList
	if reader == nil {
		return nil
	}
	for i, a := range m.Spec.MaintenanceApprovals {
		already := false
		if old != nil {
			for _, o := range old.Spec.MaintenanceApprovals {
				already = already || o == a
			}
		}
		if already {
			continue
		}
		path := field.NewPath("spec", "maintenanceApprovals").Index(i)
		got := &expv1.RedfishMaintenance{}
		err := reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: a.Name}, got)
		switch {
		case apierrors.IsNotFound(err):
			errs = append(errs, field.Invalid(path.Child("name"), a.Name, fmt.Sprintf("no RedfishMaintenance %s in namespace %s: approve what status.maintenances announces", a.Name, m.Namespace)))
		case err != nil:
			errs = append(errs, field.InternalError(path, err))
		case string(got.UID) != a.UID:
			errs = append(errs, field.Invalid(path.Child("uid"), a.UID, fmt.Sprintf("RedfishMaintenance %s has uid %s: this approval is for another maintenance (one deleted and recreated under the same name is not approved)", a.Name, got.UID)))
		case got.Spec.HostName != m.Status.HostRef:
			errs = append(errs, field.Invalid(path.Child("name"), a.Name, fmt.Sprintf("RedfishMaintenance %s is for host %s, not for this machine's host %q", a.Name, got.Spec.HostName, m.Status.HostRef)))
		}
	}
	return errs
}

func invalidExp(kind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(expv1.GroupVersion.WithKind(kind).GroupKind(), name, errs)
}
